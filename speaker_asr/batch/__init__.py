"""Many recordings at once: find them, decide what is left to do, transcribe each one -- in this
process or against an endpoint -- write its outputs atomically, and account for every file.

The command line (``python -m speaker_asr transcribe PATH...``, speaker_asr/cli.py) is built on
this; so can a script be::

    from speaker_asr.batch import LocalEngine, transcribe_paths

    for result in transcribe_paths(["interviews/"], "transcripts/", formats=["json", "srt"],
                                   parameters={"language": "en"}, recursive=True):
        print(result.status, result.job.source, result.error or "")

``engine=RemoteEngine(url, token=...)`` (speaker_asr/remote.py) sends the same files to our server
or an Inference Endpoint instead, several at a time.

The steps, each usable alone:

* :func:`discover` / :func:`plan`: the files and folders given -> one :class:`Job` per recording
  (audio by extension, ``audio.files.AUDIO_EXTENSIONS``; folders searched recursively on request;
  hidden files and folders skipped), each with its output files ``<stem>.<ext>`` under the output
  folder, keeping the subfolders relative to the folder it was found in. Two recordings that would
  write the same output are refused before anything runs.
* Resume: a job whose outputs all exist is skipped (``overwrite`` redoes it); a plan with nothing
  left to do never loads a model.
* :func:`write_atomic`: an output is written to a hidden temporary file beside it and renamed into
  place (``os.replace``), so a killed run never leaves a half-written file under a final name;
  :func:`remove_stale_partials` clears the temporary files a killed run left.
* :class:`BatchRun`: the jobs through an engine (:class:`LocalEngine`: the handler in this process,
  models loaded once and lazily; or a remote one), ``engine.concurrency`` at a time on a
  ``concurrent.futures`` thread pool, outputs written on the caller's thread; a file that fails
  is reported and the run goes on; a ``stop`` event ends it after the files in hand. Each
  recording is a :class:`FileResult`; :class:`Summary` and :class:`Manifest` account for the run.

No torch here: the models are imported only when :class:`LocalEngine` loads them.

The package: :mod:`.plan` (discovery, jobs, the plan), :mod:`.outputs` (names, texts, atomic
writes), :mod:`.engine` (the engine interface, :class:`LocalEngine`, one recording's texts),
:mod:`.run` (:class:`BatchRun`, :func:`transcribe_paths`), :mod:`.report` (manifest and summary),
:mod:`.display` (progress on stderr), :mod:`.errors`.
"""

from __future__ import annotations

from speaker_asr.audio.files import AUDIO_EXTENSIONS
from speaker_asr.batch.engine import Engine, LocalEngine, Reply, transcribe_audio
from speaker_asr.batch.errors import (BatchError, FileError, Interrupted, RunError, STATUSES,
                                      Unavailable)
from speaker_asr.batch.outputs import (PARTIAL_SUFFIX, is_partial, output_name, output_text,
                                       render_result, write_atomic)
from speaker_asr.batch.plan import Discovery, Job, Plan, discover, plan, remove_stale_partials
from speaker_asr.batch.report import Manifest, Summary
from speaker_asr.batch.run import BatchRun, FileResult, largest_first, transcribe_paths

__all__ = ["AUDIO_EXTENSIONS", "BatchError", "BatchRun", "Discovery", "Engine", "FileError", "FileResult",
           "Interrupted", "Job", "LocalEngine", "Manifest", "PARTIAL_SUFFIX", "Plan", "Reply", "RunError",
           "STATUSES", "Summary", "Unavailable", "discover", "is_partial", "largest_first", "output_name",
           "output_text", "plan", "remove_stale_partials", "render_result", "transcribe_audio",
           "transcribe_paths", "write_atomic"]
