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
"""

from __future__ import annotations

import errno
import json
import logging
import os
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import (TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Optional,
                    Protocol, Sequence, Union)

from speaker_asr.audio.files import AUDIO_EXTENSIONS, is_audio
from speaker_asr.errors import RequestError
from speaker_asr.formats import FORMATS

if TYPE_CHECKING:
    from speaker_asr.progress import ProgressCallback

logger = logging.getLogger("speaker_asr.batch")

PARTIAL_SUFFIX = ".partial"  # the temporary files of write_atomic: .<final name>.<random>.partial
STATUSES = ("done", "skipped", "failed", "not_attempted")


# --------------------------------------------------------------------------- errors


class BatchError(ValueError):
    """What was asked cannot be done (a path that does not exist, two recordings writing the same
    output): nothing was transcribed. The message says what and how to fix it."""


class FileError(Exception):
    """One recording could not be transcribed; ``str(error)`` says why (safe to show: no token).
    ``refused``: the input's own fault (bad audio, too long, too large: an HTTP 4xx), which the
    single-file command line exits 2 for."""

    def __init__(self, message: str, *, refused: bool = False, attempts: Optional[int] = None):
        super().__init__(message)
        self.refused = refused
        self.attempts = attempts


class Unavailable(FileError):
    """The service did not take the file within the retry budget (503s, connection errors, ...)."""


class RunError(Exception):
    """The run cannot go on: the models did not load, the endpoint refused the token, the URL is
    not an endpoint. ``str(error)`` says why."""


class Interrupted(Exception):
    """The run is stopping: the file was put down before it was sent (it is not attempted)."""


# --------------------------------------------------------------------------- outputs


def output_name(stem: str, fmt: str, formats: Sequence[str]) -> str:
    """``<stem>.<ext>``; when several requested formats share the extension (json,
    verbose_json, diarized_json) all but ``json`` itself become ``<stem>.<format>.<ext>``."""
    ext = FORMATS[fmt].extension
    if fmt != "json" and sum(FORMATS[f].extension == ext for f in formats) > 1:
        return f"{stem}.{fmt}.{ext}"
    return f"{stem}.{ext}"


def render_result(response: dict[str, Any], fmt: str, speaker_names: Optional[list[str]],
                  task: str) -> dict[str, Any]:
    """What the handler answers for ``response_format=fmt`` (and ``speaker_names``), from its
    plain json ``response``: for writing several formats from one transcription."""
    from speaker_asr.formats import render_response

    return render_response(response, fmt, speaker_names=speaker_names or None, task=task)


def output_text(result: Any, fmt: str) -> str:
    """A result as written: the text itself for text formats, indented JSON for the others."""
    if FORMATS[fmt].is_text:
        if not isinstance(result, dict) or not isinstance(result.get("content"), str):
            raise ValueError(f"the handler answered without the {fmt} text")
        return result["content"]
    return json.dumps(result, ensure_ascii=False, indent=2) + "\n"


_umask: Optional[int] = None
_umask_lock = threading.Lock()


def _file_mode() -> int:
    """The mode a newly created file gets here (0o666 less the umask): mkstemp makes 0o600."""
    global _umask
    with _umask_lock:
        if _umask is None:
            _umask = os.umask(0o022)
            os.umask(_umask)
    return 0o666 & ~_umask


def write_atomic(path: Union[str, Path], content: Union[str, Iterable[str]]) -> None:
    """Write ``content`` (a text, or its pieces) to ``path`` so that ``path`` is either absent,
    as it was, or complete: into ``.<name>.<random>.partial`` beside it, flushed to disk, then
    renamed over ``path``. The folder is created when missing; the temporary file is removed
    when anything goes wrong. A path that exists and is not a regular file (``/dev/stdout``, a
    pipe) is written directly."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8", newline="") as f:
            for piece in [content] if isinstance(content, str) else content:
                f.write(piece)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            for piece in [content] if isinstance(content, str) else content:
                f.write(piece)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def is_partial(name: str) -> bool:
    """Whether a file name is one of :func:`write_atomic`'s temporary files."""
    return name.startswith(".") and name.endswith(PARTIAL_SUFFIX)


def remove_stale_partials(jobs: Iterable["Job"]) -> int:
    """Remove the temporary files a killed run left beside these jobs' outputs; how many."""
    wanted: dict[Path, set[str]] = {}
    for job in jobs:
        for path in job.outputs.values():
            wanted.setdefault(path.parent, set()).add(path.name)
    removed = 0
    for folder, names in wanted.items():
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            if not is_partial(entry):
                continue
            final = entry[1:-len(PARTIAL_SUFFIX)].rsplit(".", 1)[0]  # .<final>.<random>.partial
            if final in names:
                with suppress(OSError):
                    os.unlink(folder / entry)
                    removed += 1
    return removed


# --------------------------------------------------------------------------- discovery and plan


@dataclass(frozen=True)
class Job:
    """One recording: where it is (``source``, the path as given or as found in a given
    folder), its place under the output folder (``relative``: subfolders and file name) and the
    file each format is written to (``outputs``)."""

    source: Path
    relative: PurePath
    outputs: dict[str, Path]

    @property
    def name(self) -> str:
        return str(self.source)

    def done(self) -> bool:
        """Every output exists (what a rerun skips)."""
        return all(path.is_file() for path in self.outputs.values())


@dataclass
class Discovery:
    """What the paths given hold: ``found`` recordings as (source, relative place), files that
    are not audio by their extension (``ignored``), subfolders left out without ``recursive``
    (``unsearched``) and folders that could not be read (``unreadable``, with the reason)."""

    found: list[tuple[Path, PurePath]] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)
    unsearched: list[Path] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def _missing(path: str) -> BatchError:
    return BatchError(f"cannot read {path}: {os.strerror(errno.ENOENT)} (give audio files or "
                      "folders that hold them)")


def discover(paths: Sequence[Union[str, Path]], recursive: bool = False,
             exclude: Optional[Union[str, Path]] = None) -> Discovery:
    """The recordings in ``paths``: a file given is taken whatever its extension (it was asked
    for); a folder gives its files whose extension is audio (``AUDIO_EXTENSIONS``), in name
    order, and with ``recursive`` those of its subfolders (symbolic links followed, each folder
    once). Hidden files and folders (``.name``) are skipped, and so is the folder ``exclude``
    (the output folder). The same file reached twice is taken once. Raises BatchError for a path
    that does not exist."""
    out = Discovery()
    seen: set[str] = set()
    skip = os.path.realpath(exclude) if exclude is not None else None

    def add(source: Path, relative: PurePath) -> None:
        real = os.path.realpath(source)
        if real not in seen:
            seen.add(real)
            out.found.append((source, relative))

    for given in paths:
        path = Path(given)
        if path.is_dir():
            for source, relative in _walk(path, recursive, skip, out):
                add(source, relative)
        elif path.exists():
            add(path, PurePath(path.name))
        else:
            raise _missing(str(given))
    return out


def _walk(root: Path, recursive: bool, skip: Optional[str], out: Discovery) -> Iterator[tuple[Path, PurePath]]:
    visited: set[str] = set()

    def unreadable(exc: OSError) -> None:
        out.unreadable.append(f"{exc.filename}: {exc.strerror or exc}")

    for folder, subfolders, files in os.walk(root, onerror=unreadable, followlinks=True):
        real = os.path.realpath(folder)
        if real in visited:  # a link back up the tree
            subfolders[:] = []
            continue
        visited.add(real)
        keep = []
        for name in sorted(subfolders):
            full = Path(folder, name)
            if name.startswith(".") or (skip is not None and os.path.realpath(full) == skip):
                continue
            if recursive:
                keep.append(name)
            else:
                out.unsearched.append(full)
        subfolders[:] = keep
        for name in sorted(files):
            if name.startswith("."):
                continue
            full = Path(folder, name)
            if is_audio(name):
                yield full, PurePath(full.relative_to(root))
            else:
                out.ignored.append(full)


@dataclass
class Plan:
    """Every recording found (``jobs``), split into what is left to do (``todo``) and what a
    previous run finished (``skipped``: its outputs all exist), and what discovery noted."""

    jobs: list[Job]
    todo: list[Job]
    skipped: list[Job]
    discovery: Discovery
    output_dir: Path
    formats: list[str]

    def notes(self, limit: int = 5) -> list[str]:
        """Lines saying what was left out and why."""
        lines = []
        d = self.discovery

        def some(paths: Sequence[Any]) -> str:
            shown = ", ".join(str(p) for p in paths[:limit])
            return shown + (f", ... ({len(paths) - limit} more)" if len(paths) > limit else "")

        if d.ignored:
            one = len(d.ignored) == 1
            lines.append(f"ignored {len(d.ignored)} file{'' if one else 's'} that {'is' if one else 'are'} "
                         f"not audio by {'its' if one else 'their'} extension: {some(d.ignored)}")
        if d.unsearched:
            lines.append(f"not searched ({len(d.unsearched)} subfolder"
                         f"{'s' if len(d.unsearched) != 1 else ''}; add --recursive): {some(d.unsearched)}")
        for problem in d.unreadable:
            lines.append(f"cannot read folder {problem}")
        return lines


def plan(paths: Sequence[Union[str, Path]], output_dir: Union[str, Path], formats: Sequence[str],
         *, recursive: bool = False, overwrite: bool = False) -> Plan:
    """The jobs for ``paths`` (see :func:`discover`) writing ``formats`` into ``output_dir``:
    a recording found in a given folder keeps its subfolders there
    (``folder/a/b.wav`` -> ``output_dir/a/b.<ext>``), a file given directly goes to the top.
    Raises BatchError when a format is unknown or two recordings would write the same file."""
    formats = list(formats)
    for fmt in formats:
        if fmt not in FORMATS:
            raise BatchError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if not formats:
        raise BatchError("no output format: give at least one of " + ", ".join(FORMATS))
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise BatchError(f"--output-dir {output_dir} exists and is not a folder")
    found = discover(paths, recursive=recursive, exclude=output_dir)
    jobs: list[Job] = []
    writers: dict[str, Job] = {}
    clashes: list[str] = []
    for source, relative in found.found:
        outputs = {fmt: output_dir / relative.parent / output_name(relative.stem or relative.name, fmt, formats)
                   for fmt in formats}
        job = Job(source, relative, outputs)
        for path in outputs.values():
            key = os.path.normpath(path)
            other = writers.setdefault(key, job)
            if other is not job:
                clashes.append(f"{other.source} and {source} would both write {path}")
                break
        jobs.append(job)
    if clashes:
        shown = "; ".join(clashes[:5]) + (f"; ... ({len(clashes) - 5} more)" if len(clashes) > 5 else "")
        raise BatchError(f"{len(clashes)} recording{'s' if len(clashes) != 1 else ''} would overwrite "
                         f"another's output: {shown}. Rename one of each pair, or transcribe them "
                         "into separate --output-dir folders")
    todo = list(jobs) if overwrite else [job for job in jobs if not job.done()]
    left = {id(job) for job in todo}
    skipped = [job for job in jobs if id(job) not in left]
    return Plan(jobs, todo, skipped, found, output_dir, formats)


# --------------------------------------------------------------------------- engines


@dataclass
class Reply:
    """One recording's answer: what an engine returns (the handler's or endpoint's ``response``
    and the ``attempts``, requests, it took), to which :func:`transcribe_audio` adds ``texts``, the
    outputs as they are written (format -> text). The handler's warnings and the audio's duration
    are read from the response.

    The run's account of a recording is a :class:`FileResult`: it exists for every recording
    (skipped, failed and not attempted ones too) and knows its files; a Reply exists only when an
    engine answered, and knows nothing of files -- it is what a custom :class:`Engine` returns."""

    response: Any
    attempts: int = 1
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        value = self.response.get("warnings") if isinstance(self.response, dict) else None
        return [str(w) for w in value] if isinstance(value, list) else []

    @property
    def duration(self) -> Optional[float]:
        """Seconds of audio (None when the response does not say)."""
        value = self.response.get("duration") if isinstance(self.response, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None


class Engine(Protocol):
    """Transcribes one recording's bytes with the request parameters given.

    ``concurrency``: how many recordings it takes at once (on that many threads).
    ``render_locally``: ask for the plain ``json`` response and write every format from it here
    (otherwise a single format is asked for as ``response_format``, as the endpoint renders it).
    ``load()`` prepares it (raises RunError), ``respond(...)`` answers one recording (raises
    FileError, Unavailable, RunError or Interrupted)."""

    concurrency: int
    render_locally: bool

    def load(self) -> None: ...

    def respond(self, audio: bytes, parameters: dict[str, Any], source: Optional[Path],
                stop: threading.Event) -> Reply: ...


class LocalEngine:
    """The handler in this process (``speaker_asr.endpoint.EndpointHandler`` with the settings
    from the environment: ASR_MODEL, DIARIZATION_MODEL, ...), loaded once, on the first
    :meth:`load` or recording; one recording at a time.

    ``watch``: for a recording's name (its path, ``-`` for standard input), a context manager
    giving the progress callback for its request while it runs (``progress.LineProgress.recording``
    or ``BarProgress.recording``); the handler is called with ``progress=`` when it takes it."""

    concurrency = 1
    render_locally = False

    def __init__(self, handler: Any = None,
                 watch: Optional[Callable[[str], ContextManager["ProgressCallback"]]] = None):
        self.handler = handler
        self.watch = watch

    def load(self) -> None:
        if self.handler is not None:
            return
        from speaker_asr.endpoint import EndpointHandler

        try:
            self.handler = EndpointHandler()
        except Exception as exc:
            raise RunError(f"could not load the models: {type(exc).__name__}: {exc}") from None

    def respond(self, audio: bytes, parameters: dict[str, Any], source: Optional[Path],
                stop: threading.Event) -> Reply:
        self.load()
        from speaker_asr.progress import takes_progress

        data = {"inputs": audio, "parameters": parameters}
        try:
            if self.watch is None or not takes_progress(self.handler):
                return Reply(self.handler(data))
            with self.watch(str(source) if source is not None else "-") as progress:
                return Reply(self.handler(data, progress=progress))
        except (RequestError, ValueError) as exc:  # the input's fault, with the handler's message
            raise FileError(str(exc) or type(exc).__name__, refused=True) from None
        except Exception as exc:
            logger.debug("transcription failed", exc_info=True)
            raise FileError(f"the transcription failed: {type(exc).__name__}: {exc}") from None


def transcribe_audio(engine: Engine, audio: bytes, parameters: dict[str, Any], formats: Sequence[str],
                     *, source: Optional[Path] = None,
                     stop: Optional[threading.Event] = None) -> Reply:
    """One recording through ``engine``, its :attr:`Reply.texts` in every one of ``formats``: a
    single format is asked for as the endpoint's ``response_format`` (unless the engine renders
    locally); several are rendered from one plain ``json`` answer, with ``speaker_names`` applied
    here. Raises FileError (an answer that cannot be written), or what the engine raises."""
    stop = stop or threading.Event()
    params = dict(parameters)
    task = params.get("task", "transcribe")
    if len(formats) == 1 and not engine.render_locally:
        reply = engine.respond(audio, {**params, "response_format": formats[0]}, source, stop)
        results = {formats[0]: reply.response}
    else:
        names = params.pop("speaker_names", None)
        params.pop("response_format", None)
        reply = engine.respond(audio, params, source, stop)
        results = {}
        for fmt in formats:
            try:
                results[fmt] = render_result(reply.response, fmt, names, task)
            except ValueError as exc:
                raise FileError(f"the answer could not be written as {fmt}: {exc}",
                                attempts=reply.attempts) from None
    try:
        reply.texts = {fmt: output_text(result, fmt) for fmt, result in results.items()}
    except ValueError as exc:
        raise FileError(str(exc), attempts=reply.attempts) from None
    return reply


# --------------------------------------------------------------------------- the run


@dataclass
class FileResult:
    """What happened to one recording: ``status`` (done, skipped, failed, not_attempted), the
    output files (written now or found done), the audio's duration and the seconds it took, the
    reason it failed, the handler's warnings, and the requests it took (remote engines)."""

    job: Job
    status: str
    outputs: list[Path] = field(default_factory=list)
    duration: Optional[float] = None
    seconds: Optional[float] = None
    error: Optional[str] = None
    warnings: list[str] = field(default_factory=list)
    attempts: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        """The manifest line: path, status, outputs, duration, seconds, error (and warnings,
        attempts)."""
        return {"path": self.job.name, "status": self.status, "outputs": [str(p) for p in self.outputs],
                "duration": self.duration,
                "seconds": None if self.seconds is None else round(self.seconds, 3),
                "error": self.error, "warnings": self.warnings, "attempts": self.attempts}


def largest_first(jobs: Sequence[Job]) -> list[Job]:
    """The jobs by file size, largest first (name order among equals): with several recordings
    in flight, a long one started last would keep one replica busy while the others sit idle
    at the end of the run; started first, the short ones fill in around it."""

    def size(job: Job) -> int:
        try:
            return job.source.stat().st_size
        except OSError:
            return 0

    return sorted(jobs, key=lambda job: -size(job))  # a stable sort keeps name order among equals


class BatchRun:
    """Run ``plan``'s jobs through ``engine``: iterate it for a :class:`FileResult` per recording
    -- the skipped ones first, then each job as it finishes, then (when the run stopped early)
    the ones not attempted. One at a time the jobs go in name order; with several in flight,
    largest file first (:func:`largest_first`). The engine answers ``engine.concurrency``
    recordings at once on a ``concurrent.futures.ThreadPoolExecutor``'s threads; the run waits for
    the first to finish (``wait(FIRST_COMPLETED)``) and writes its outputs (atomically) on the
    iterating thread before its result is yielded. Leaving the iteration early (``break``, an
    exception such as a second Ctrl-C) does not wait for the recordings in flight: their answers
    are dropped (:attr:`busy` says whether one is still running).

    The engine is loaded only when there is something to do (RunError when it cannot be).
    Setting ``stop`` ends the run after the recordings already in hand (a remote one waiting to
    retry is put down). A RunError from a recording (the token refused, ...) ends it too. Once a
    recording gives up on an unavailable service, no new one is sent until one in flight
    succeeds; when every one in flight has given up the run ends (unless
    ``stop_when_unavailable`` is false: then each recording keeps its own retry budget).
    ``stopped_because`` says why a run ended early."""

    def __init__(self, plan: Plan, engine: Engine, parameters: Optional[dict[str, Any]] = None,
                 *, stop: Optional[threading.Event] = None, stop_when_unavailable: bool = True):
        self.plan = plan
        self.engine = engine
        self.parameters = dict(parameters or {})
        self.stop = stop or threading.Event()
        self.stop_when_unavailable = stop_when_unavailable
        self.stopped_because: Optional[str] = None
        self.started = time.monotonic()
        self._in_flight: dict[Future, Job] = {}  # in the order sent

    def redact(self, text: str) -> str:
        """``text`` without a secret: the engine's token, HF_TOKEN and the other *_TOKEN /
        *_KEY variables' values (an exception's message may quote one)."""
        from speaker_asr.serving.logging_setup import scrub

        engine_redact = getattr(self.engine, "redact", None)
        return scrub(engine_redact(text) if engine_redact else text)

    def __iter__(self) -> Iterator[FileResult]:
        for job in self.plan.skipped:
            yield FileResult(job, "skipped", outputs=list(job.outputs.values()))
        todo = list(self.plan.todo)
        if not todo:
            return
        if self.engine.concurrency > 1:
            todo = largest_first(todo)
        self.engine.load()
        remove_stale_partials(todo)
        workers = max(1, self.engine.concurrency)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="batch")
        pending = iter(todo)
        unavailable_in_a_row = 0  # recordings that gave up since the last one that got through
        left: list[Job] = []
        finished = False
        try:
            while True:
                holding = self.stop_when_unavailable and unavailable_in_a_row > 0
                while len(self._in_flight) < workers and not self._stopping() and not holding:
                    job = next(pending, None)
                    if job is None:
                        break
                    self._in_flight[pool.submit(self._transcribe, job)] = job
                if not self._in_flight:
                    break
                wait(self._in_flight, return_when=FIRST_COMPLETED)  # at once when one is done
                # one at a time, the first sent of those done, and the free thread refilled
                future = next(f for f in self._in_flight if f.done())
                job = self._in_flight.pop(future)
                reply, error, seconds = future.result()
                if isinstance(error, Interrupted):
                    left.append(job)
                    continue
                if isinstance(error, Unavailable):
                    unavailable_in_a_row += 1
                    if self.stop_when_unavailable and not self._in_flight and self.stopped_because is None:
                        self.stopped_because = self.redact(
                            f"the service stayed unavailable for {unavailable_in_a_row} recording"
                            f"{'s' if unavailable_in_a_row != 1 else ''} in a row (last: {error})")
                elif not isinstance(error, RunError):
                    unavailable_in_a_row = 0  # an answer got through: the service is up
                if isinstance(error, RunError) and self.stopped_because is None:
                    self.stopped_because = self.redact(str(error))
                yield self._finish(job, reply, error, seconds)
            left.extend(pending)
            finished = True
        finally:
            # a run left early (the caller stopped iterating, a second Ctrl-C) does not wait for
            # the recordings still in flight: their answers are dropped, nothing is written
            pool.shutdown(wait=finished, cancel_futures=True)
        order = {id(job): i for i, job in enumerate(todo)}
        for job in sorted(left, key=lambda j: order[id(j)]):
            yield FileResult(job, "not_attempted")

    @property
    def busy(self) -> bool:
        """Whether a recording is still being transcribed on the run's threads (after the run was
        left early: its answer will be dropped)."""
        return any(not future.done() for future in self._in_flight)

    def _stopping(self) -> bool:
        return self.stop.is_set() or self.stopped_because is not None

    def _transcribe(self, job: Job) -> tuple[Optional[Reply], Optional[BaseException], float]:
        """One recording, on a thread of the run's pool: the engine's reply or the error that
        ended it, and the seconds it took. Never raises: a bug fails this recording only."""
        started = time.monotonic()
        try:
            if self._stopping():
                raise Interrupted()
            try:
                audio = job.source.read_bytes()
            except OSError as exc:
                raise FileError(f"cannot read {job.source}: {exc.strerror or exc}", refused=True) from None
            if not audio:
                raise FileError(f"{job.source} is empty", refused=True)
            reply = transcribe_audio(self.engine, audio, self.parameters, self.plan.formats,
                                     source=job.source, stop=self.stop)
            return reply, None, time.monotonic() - started
        except (FileError, RunError, Interrupted) as exc:
            return None, exc, time.monotonic() - started
        except Exception as exc:  # a bug: this recording fails, the run goes on
            logger.debug("unexpected error on %s", job.source, exc_info=True)
            return None, FileError(f"unexpected error: {type(exc).__name__}: {exc}"), time.monotonic() - started

    def _finish(self, job: Job, reply: Optional[Reply], error: Optional[BaseException],
                seconds: float) -> FileResult:
        """The recording's outputs written (on the iterating thread), and its account."""
        if error is not None:
            return FileResult(job, "failed", seconds=seconds,
                              error=self.redact(str(error) or type(error).__name__),
                              attempts=getattr(error, "attempts", None))
        assert reply is not None
        warnings = [self.redact(w) for w in reply.warnings]
        started = time.monotonic()
        written: list[Path] = []
        for fmt, text in reply.texts.items():
            path = job.outputs[fmt]
            try:
                write_atomic(path, text)
            except OSError as exc:
                return FileResult(job, "failed", outputs=written, duration=reply.duration,
                                  seconds=seconds + time.monotonic() - started,
                                  error=self.redact(f"cannot write {path}: {exc.strerror or exc}"),
                                  warnings=warnings, attempts=reply.attempts)
            written.append(path)
        return FileResult(job, "done", outputs=written, duration=reply.duration,
                          seconds=seconds + time.monotonic() - started, warnings=warnings,
                          attempts=reply.attempts)


def transcribe_paths(paths: Sequence[Union[str, Path]], output_dir: Union[str, Path],
                     formats: Sequence[str] = ("json",), parameters: Optional[dict[str, Any]] = None,
                     *, engine: Optional[Engine] = None, recursive: bool = False,
                     overwrite: bool = False, stop: Optional[threading.Event] = None) -> Iterator[FileResult]:
    """:func:`plan` then :class:`BatchRun` (in this process unless ``engine`` says otherwise):
    a :class:`FileResult` per recording."""
    batch = plan(paths, output_dir, formats, recursive=recursive, overwrite=overwrite)
    yield from BatchRun(batch, engine or LocalEngine(), parameters, stop=stop)


# --------------------------------------------------------------------------- accounting


class Manifest:
    """One JSON object per line (:meth:`FileResult.to_json`), each written and flushed as its
    recording finishes, so an interrupted run's manifest holds what it did."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        if self.path.parent != Path(""):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

    def write(self, result: FileResult) -> None:
        self._file.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Manifest":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def hours(seconds: float) -> str:
    """``5400`` -> ``1.50 h``; under an hour also in minutes."""
    if seconds < 3600:
        return f"{seconds / 3600:.2f} h ({seconds / 60:.1f} min)"
    return f"{seconds / 3600:.2f} h"


@dataclass
class Summary:
    """Counts, failures (recording, reason), audio transcribed and wall time of a run."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    failures: list[tuple[str, str]] = field(default_factory=list)
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    stopped_because: Optional[str] = None
    interrupted: bool = False

    def add(self, result: FileResult) -> None:
        self.counts[result.status] += 1
        if result.status == "failed":
            self.failures.append((result.job.name, result.error or "unknown error"))
        if result.status == "done" and result.duration:
            self.audio_seconds += result.duration

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> bool:
        """Every recording is transcribed (done now or before)."""
        return self.counts["failed"] == 0 and self.counts["not_attempted"] == 0

    def rtf(self) -> Optional[float]:
        """Wall time over audio time (0.1: ten times faster than real time)."""
        return self.wall_seconds / self.audio_seconds if self.audio_seconds > 0 else None

    def lines(self) -> list[str]:
        c = self.counts
        total = self.total
        out = [f"{total} recording{'s' if total != 1 else ''}: done {c['done']}, skipped {c['skipped']} "
               f"(already done), failed {c['failed']}"
               + (f", not attempted {c['not_attempted']}" if c["not_attempted"] else "")
               + f"; wall time {self.wall_seconds:.1f} s"]
        if c["done"]:
            rtf = self.rtf()
            out.append(f"audio transcribed: {hours(self.audio_seconds)}"
                       + (f", real-time factor {rtf:.3f} (wall time / audio time)" if rtf is not None else ""))
        if self.failures:
            out.append("failed:")
            out.extend(f"  {name}: {reason}" for name, reason in self.failures)
        if self.stopped_because:
            out.append(f"stopped: {self.stopped_because}")
        if self.interrupted:
            out.append("interrupted: what is done is written in full")
        if c["not_attempted"] or c["failed"]:
            out.append("run the same command again to retry the rest (finished recordings are skipped)")
        return out


__all__ = ["AUDIO_EXTENSIONS", "BatchError", "BatchRun", "Discovery", "Engine", "FileError",
           "FileResult", "Interrupted", "Job", "LocalEngine", "Manifest", "Plan", "Reply", "RunError",
           "Summary", "Unavailable", "discover", "largest_first", "output_name", "output_text", "plan",
           "remove_stale_partials", "render_result", "transcribe_audio", "transcribe_paths",
           "write_atomic"]
