"""Command line for the handler (its options: speaker_asr/cli_options.py).

    python -m speaker_asr transcribe FILE [--num-speakers N | --min-speakers N --max-speakers N]
                                  [--language xx] [--task transcribe|translate] [--assisted]
                                  [--prompt TEXT] [--word-timestamps] [--speaker-names A,B]
                                  [--known-speaker NAME=CLIP ...] [--speaker-embeddings]
                                  [--format FORMAT[,FORMAT...]] [--output PATH | --output-dir DIR]
                                  [--url URL [--token T] [--body json|raw] ...]
    python -m speaker_asr transcribe PATH... --output-dir DIR [--recursive] [--overwrite]
                                  [--manifest FILE.jsonl] [--url URL [--concurrency N] ...]
                                  [--ray ADDRESS [--ray-actors N] [--ray-gpus-per-actor G] ...]
    python -m speaker_asr serve [--host HOST] [--port PORT]

``transcribe`` runs the handler in this process (models from ASR_MODEL, DIARIZATION_MODEL, ...,
exactly as the endpoint reads them) on one audio file (``-`` reads standard input) and writes the
result in one of the endpoint's response formats (``formats.FORMATS``: json, verbose_json,
diarized_json, srt, vtt, rttm, txt). Text formats (srt, vtt, rttm, txt) are written as the text
itself (the response's ``content``), JSON formats as indented JSON. ``--output PATH`` writes a
file; ``--output-dir DIR`` (or ``--output`` naming a directory) writes ``<audio stem>.<ext>``
there, and takes several formats at once (``--format srt,vtt,json``: one transcription, each
format rendered from it). ``serve`` runs the HTTP server (see speaker_asr/serving/app.py and docs/serving.md).
In this process, how far a recording has got is shown on stderr while it runs (speaker_asr/batch/display.py): on
a terminal a line with the ASR's windows done of the total and the diarization's step, otherwise
a line every 30 s at most (none for a recording done sooner).

Several files, or a folder (``--recursive`` for its subfolders), make a batch run
(speaker_asr/batch/): the models load once, the outputs go to ``--output-dir`` keeping each
folder's subfolders, a recording whose outputs all exist is skipped (``--overwrite`` redoes it),
a failing one is reported and the run goes on, progress is shown on stderr and a summary printed
at the end (``--manifest`` adds one JSON line per recording). Ctrl-C stops after the recording in
hand. ``--url`` sends the recordings to our server or an Inference Endpoint instead
(speaker_asr/remote.py), ``--concurrency`` at a time, retrying 429/502/503/504 and connection errors.
``--ray`` transcribes them on a Ray cluster's actor pool instead, one model load per actor
(speaker_asr/batch/ray_engine.py, docs/ray.md); the outputs are still written here.

Exit codes: 0 done; 2 bad arguments, unreadable file or a request the handler refuses (the
message is printed on stderr); 1 the models could not be loaded or another error; in a batch run
1 when any recording failed or was not attempted, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

from speaker_asr.batch import output_name, output_text, render_result  # noqa: F401 (the CLI's API)
from speaker_asr.cli_options import (DEFAULT_CONCURRENCY, DEFAULT_MAX_WAIT_S, DEFAULT_REQUEST_TIMEOUT_S,
                                     RAY_ONLY, REMOTE_ONLY, STDIN_STEM, build_parser, check_parameters,
                                     request_parameters, requested_formats)

HF_ENDPOINT_DOMAINS = (".endpoints.huggingface.cloud", ".huggingface.cloud", ".hf.space")
T = TypeVar("T")


def _output_folder(args: argparse.Namespace) -> Optional[Path]:
    """The folder the outputs go into: --output-dir, or --output naming a folder (one that exists,
    or a path ending in /); None otherwise."""
    if args.output_dir:
        return Path(args.output_dir)
    if args.output and (Path(args.output).is_dir() or args.output.endswith(("/", os.sep))):
        return Path(args.output)
    return None


def destinations(args: argparse.Namespace, formats: list[str]) -> dict[str, Optional[Path]]:
    """format -> the file to write (None: stdout). Raises ValueError for several formats
    without a directory to write them into."""
    directory = _output_folder(args)
    if directory is None:
        if len(formats) > 1:
            raise ValueError(f"{len(formats)} formats ({', '.join(formats)}) need a directory to "
                             "write them into: add --output-dir DIR")
        return {formats[0]: Path(args.output) if args.output else None}
    file = args.file[0] if isinstance(args.file, list) else args.file
    stem = STDIN_STEM if file == "-" else (Path(file).stem or STDIN_STEM)
    return {fmt: directory / output_name(stem, fmt, formats) for fmt in formats}


def _write_stdout(text: str) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
    else:
        buffer.write(text.encode("utf-8"))
        buffer.flush()


def _fail(message: str, code: int) -> int:
    from speaker_asr.redaction import scrub

    print(f"error: {scrub(message)}", file=sys.stderr)
    return code


def _is_batch(args: argparse.Namespace) -> bool:
    """Several FILEs, a folder, a URI, --manifest or --ray: a batch run (otherwise one file, as
    always)."""
    from speaker_asr.batch.sources import is_uri

    files = args.file
    return (len(files) > 1 or bool(args.manifest) or bool(getattr(args, "ray", None))
            or any(f != "-" and (is_uri(f) or Path(f).is_dir()) for f in files))


def _token(args: argparse.Namespace, url: str) -> tuple[Optional[str], str]:
    """The bearer token for --url and where it came from (for messages, never the token):
    --token; else for an Inference Endpoint (``*.endpoints.huggingface.cloud``) HF_TOKEN, then
    API_KEY; for any other server (ours) API_KEY, then HF_TOKEN."""
    if args.token:
        return args.token, "--token"
    from urllib.parse import urlsplit

    from speaker_asr.settings import ClientSettings

    host = (urlsplit(url).hostname or "").lower()
    found = ClientSettings().tokens(endpoint_first=host.endswith(HF_ENDPOINT_DOMAINS))
    if not found:
        return None, "none"
    name, value = found[0]
    if len(found) > 1:
        name += f" ({found[1][0]} is set too: --token chooses)"
    return value, name


def _given(args: argparse.Namespace, names) -> list[str]:
    return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name, None) is not None]


def make_engine(args: argparse.Namespace):
    """The engine the options ask for: the handler in this process, RemoteEngine(--url) or
    RayEngine(--ray). Raises ValueError for options of another engine, or a bad URL."""
    from speaker_asr.batch import LocalEngine

    ray_options = _given(args, RAY_ONLY)
    if getattr(args, "ray", None):
        if args.url:
            raise ValueError("--ray and --url are two ways to run the batch: give one")
        given = _given(args, REMOTE_ONLY)
        if given:
            raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --url; on Ray "
                             "the actors take one recording each at a time (--ray-actors sets how many)")
        from speaker_asr.batch.ray_engine import DEFAULT_RETRIES, RayEngine

        return RayEngine(args.ray, actors=args.ray_actors, gpus_per_actor=args.ray_gpus_per_actor,
                         cpus_per_actor=args.ray_cpus_per_actor,
                         retries=DEFAULT_RETRIES if args.ray_retries is None else args.ray_retries)
    if ray_options:
        raise ValueError(f"{', '.join(ray_options)} {'is' if len(ray_options) == 1 else 'are'} for --ray "
                         "(transcribing on a Ray cluster)")
    if not args.url:
        given = _given(args, REMOTE_ONLY)
        if given:
            raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --url (sending "
                             "the recordings to a server); in-process they are transcribed one at a "
                             "time with the models loaded here")
        return LocalEngine()
    from speaker_asr.remote import RemoteEngine, RetryPolicy

    token, source = _token(args, args.url)
    return RemoteEngine(args.url, token=token, token_source=source,
                        concurrency=args.concurrency or DEFAULT_CONCURRENCY, body=args.body or "json",
                        policy=RetryPolicy(max_wait_s=args.max_wait or DEFAULT_MAX_WAIT_S),
                        timeout_s=args.request_timeout or DEFAULT_REQUEST_TIMEOUT_S)


def _warn_cleartext(engine) -> None:
    """A token about to go unencrypted (http://) to another machine: say so (not the token)."""
    from urllib.parse import urlsplit

    url = engine.url
    if engine.token and urlsplit(url).scheme == "http" and not engine.loopback:
        print(f"warning: the token from {engine.token_source} goes unencrypted (http://) to "
              f"{urlsplit(url).hostname}; use https:// beyond this machine", file=sys.stderr)


def _check_body(engine, params: dict[str, Any], formats: list[str]) -> None:
    """Refuse parameters a raw body cannot carry before anything is sent."""
    if engine.body == "raw":
        from speaker_asr.remote import query_items

        sent = {k: v for k, v in params.items() if k not in ("speaker_names", "response_format")}
        query_items(sent)


def _quiet_libraries() -> None:
    """Without -v: no library chatter on stderr (transformers' advice and progress bars, Python
    warnings from torch, numpy, pyannote), so that what is printed is ours: results, warnings
    from the handler, progress and errors."""
    import warnings

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for category in (UserWarning, RuntimeWarning, FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)


def _setup(args: argparse.Namespace, place: Callable[[list[str]], T]) -> tuple[dict[str, Any], list[str], T, Any]:
    """What one file and a batch run both start with, in this order: the request parameters and
    the formats the options spell, where the outputs go (``place(formats)``: one file's
    destinations or the batch's folder), the parameters checked, the engine (in this process or
    --url) and what a raw body can carry; then the warning about a token over plain http. Raises
    ValueError (exit 2) before anything is loaded or sent."""
    params = request_parameters(args)
    formats = requested_formats(args, params)
    where = place(formats)
    check_parameters({**params, "response_format": formats[0]})
    engine = make_engine(args)
    if args.url:  # a RemoteEngine
        _check_body(engine, params, formats)
        _warn_cleartext(engine)
    return params, formats, where, engine


def transcribe(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        _quiet_libraries()
    if _is_batch(args):
        return transcribe_many(args)
    try:
        params, formats, targets, engine = _setup(args, lambda formats: destinations(args, formats))
    except ValueError as exc:
        return _fail(str(exc), 2)
    file = args.file[0]
    try:
        audio = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        return _fail(f"cannot read {file}: {exc.strerror or exc}", 2)
    if not audio:
        return _fail(f"{file} is empty", 2)

    from speaker_asr.batch import FileError, LocalEngine, RunError, transcribe_audio

    display = None
    try:
        engine.load()
        if isinstance(engine, LocalEngine):  # how far the request has got, on stderr
            from speaker_asr.batch.display import progress_for

            display = progress_for(1, files=False)
            engine.watch = display.recording
        reply = transcribe_audio(engine, audio, params, formats,
                                 source=None if file == "-" else Path(file))
    except RunError as exc:
        return _fail(str(exc), 1)
    except FileError as exc:
        return _fail(str(exc), 2 if exc.refused else 1)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    finally:
        if display is not None:
            display.close()

    for warning in reply.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    from speaker_asr.batch import write_atomic

    for fmt, text in reply.texts.items():
        path = targets[fmt]
        if path is None:
            _write_stdout(text)
            continue
        try:
            write_atomic(path, text)
        except OSError as exc:
            return _fail(f"cannot write {path}: {exc.strerror or exc}", 2)
    return 0


def _batch_output_dir(args: argparse.Namespace, count_hint: str) -> Path:
    directory = _output_folder(args)
    if directory is not None:
        return directory
    if args.output:
        raise ValueError(f"--output {args.output} names one file; {count_hint} need a folder to "
                         "write into: use --output-dir DIR")
    raise ValueError(f"{count_hint} need a folder to write into: add --output-dir DIR (each "
                     "recording's outputs go there as <name>.<ext>, keeping the subfolders)")


class _StopOnSignal:
    """First Ctrl-C (or SIGTERM): set ``stop`` and say so; the second Ctrl-C stops at once."""

    def __init__(self, stop, say):
        self.stop = stop
        self.say = say
        self.previous: dict = {}

    def __enter__(self):
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.stop.is_set():
            raise KeyboardInterrupt
        self.stop.set()
        self.say("stopping after the recordings in hand (Ctrl-C again to stop at once; what "
                 "is written is complete, and a rerun resumes)")

    def __exit__(self, *exc):
        import signal

        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def transcribe_many(args: argparse.Namespace) -> int:
    """A batch run: plan, resume, transcribe (in-process or --url), report; the exit code."""
    import threading
    import time

    from speaker_asr import batch
    from speaker_asr.batch.display import progress_for

    started = time.monotonic()
    try:
        if "-" in args.file and getattr(args, "ray", None):
            raise ValueError("--ray: the cluster's workers read the recordings themselves; give "
                             "files or folders they can read, not - (standard input)")
        if "-" in args.file:
            raise ValueError("- (standard input) can only be transcribed alone, not with other "
                             "files or folders")
        hint = ("several recordings" if len(args.file) > 1 else
                "a run on Ray" if getattr(args, "ray", None) else "the recordings of a folder")
        params, formats, output_dir, engine = _setup(args, lambda formats: _batch_output_dir(args, hint))
        work = batch.plan(args.file, output_dir, formats, recursive=args.recursive,
                          overwrite=args.overwrite)
        manifest = batch.Manifest(args.manifest) if args.manifest else None
    except OSError as exc:
        return _fail(f"cannot write the manifest {args.manifest}: {exc.strerror or exc}", 2)
    except ValueError as exc:
        return _fail(str(exc), 2)

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    for note in work.notes():
        say(note)
    if not work.jobs:
        say(f"no audio files found (audio extensions: {', '.join(sorted(batch.AUDIO_EXTENSIONS))})")
    elif work.skipped and not work.todo:
        n = len(work.jobs)
        say(f"nothing to do: {'the recording is' if n == 1 else f'all {n} recordings are'} transcribed "
            f"in {output_dir} (--overwrite transcribes {'it' if n == 1 else 'them'} again)")
    elif work.skipped:
        say(f"skipping {len(work.skipped)} of {len(work.jobs)} recordings already transcribed in "
            f"{output_dir}; {len(work.todo)} to do")
    if getattr(args, "ray", None):
        where = f"on the Ray cluster at {args.ray}"
    else:
        where = "in this process" if not args.url else f"with {engine.shown_url} ({engine.concurrency} at a time)"
    if work.todo:
        say(f"transcribing {len(work.todo)} recording{'s' if len(work.todo) != 1 else ''} {where} "
            f"into {output_dir}")

    stop = threading.Event()
    summary = batch.Summary()
    progress = None
    run = batch.BatchRun(work, engine, params, stop=stop)
    code = 0
    try:
        with _StopOnSignal(stop, lambda text: (progress.note(text) if progress else say(text))):
            if work.todo:
                loading = time.monotonic()
                try:
                    engine.load()
                except batch.RunError as exc:
                    return _fail(str(exc), 1)
                if getattr(args, "ray", None):
                    say(f"{engine.describe()} ready in {time.monotonic() - loading:.1f} s")
                elif not args.url:
                    say(f"models loaded in {time.monotonic() - loading:.1f} s")
            progress = progress_for(len(work.todo))
            if isinstance(engine, batch.LocalEngine):  # each recording's progress as it runs
                engine.watch = progress.recording
            for result in run:
                summary.add(result)
                if manifest:
                    manifest.write(result)
                progress.update(result)
    except KeyboardInterrupt:
        summary.interrupted = True
        summary.counts["not_attempted"] += max(0, len(work.jobs) - summary.total)
        code = 130
    finally:
        if progress:
            progress.close()
        if manifest:
            manifest.close()
        if code != 130:  # Ray's actors (after a second Ctrl-C the process exits at once: Ray
            engine.close()  # ends them)
    summary.wall_seconds = time.monotonic() - started
    summary.stopped_because = engine.redact(run.stopped_because) if run.stopped_because else None
    if stop.is_set():
        summary.interrupted = True
    for line in summary.lines():
        say(line)
    if code == 130 and run.busy:
        # the second Ctrl-C stops at once: a recording still running on the run's threads (a
        # model call, a request) would hold the interpreter's exit until it ends; its answer
        # is dropped, and everything written is complete (the manifest is closed)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    if summary.interrupted and not summary.ok:
        return 130
    return code or (0 if summary.ok else 1)


def serve(args: argparse.Namespace) -> int:
    from speaker_asr.serving import app as server

    try:
        server.serve(host=args.host, port=args.port)
    except server.ConfigError as exc:
        return _fail(str(exc), 2)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "transcribe":
        return transcribe(args)
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
