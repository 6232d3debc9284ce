"""The run: :class:`BatchRun` takes a plan's jobs through an engine on a thread pool and yields a
:class:`FileResult` per recording; :func:`transcribe_paths` is plan + run in one call."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

from speaker_asr.batch.engine import Engine, LocalEngine, Reply, transcribe_audio
from speaker_asr.batch.errors import FileError, Interrupted, RunError, Unavailable
from speaker_asr.batch.outputs import write_atomic
from speaker_asr.batch.plan import Job, Plan, plan, remove_stale_partials
from speaker_asr.batch.sources import read_source, source_size

logger = logging.getLogger("speaker_asr.batch")


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

    return sorted(jobs, key=lambda job: -source_size(job.source))  # a stable sort keeps name order among equals


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
        from speaker_asr.redaction import scrub

        return scrub(self.engine.redact(text))

    def __iter__(self) -> Iterator[FileResult]:
        for job in self.plan.skipped:
            yield FileResult(job, "skipped", outputs=list(job.outputs.values()))
        todo = list(self.plan.todo)
        if not todo:
            return
        self.engine.load()  # before the order: an engine may learn its concurrency from its cluster
        if self.engine.concurrency > 1:
            todo = largest_first(todo)
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
            # an engine whose workers read the recording themselves (Ray's, from a path or bucket
            # the cluster shares) is sent its source only
            audio = None if self.engine.reads_sources else read_source(job.source)
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
