"""ModelRunner: loads the handler in the background and runs one call at a time on a single
worker thread, behind a bounded queue.

A transcription request takes a place (:meth:`ModelRunner.admit`) before its body is read: at
most ``MAX_QUEUE`` requests wait beside the one the model runs, so at most ``MAX_QUEUE + 1``
bodies are held in memory; one more is refused (:class:`QueueFull`: 503 with ``Retry-After``).
A request submitted to the model (:meth:`ModelRunner.submit`) is watched while it waits
(:meth:`ModelRunner.wait`): when its client disconnects before the model starts on it, it is
dropped (:class:`ClientGone`) and its data (the audio) released at once, not when the worker
gets to it.

A long request's progress is logged at info (:class:`ProgressLog`) while the model runs it, when
the handler takes a ``progress`` callback (``EndpointHandler`` does).

A live session's model calls (:meth:`ModelRunner.call`: a plain function, no request data) take
the same queue, behind the requests already in it, and are dropped the same way when their
session closes before the model starts on them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from speaker_asr.settings import DEFAULT_MAX_QUEUE
from speaker_asr.models import Models, ModelThread
from speaker_asr.progress import Progress, RequestProgress, takes_progress
from speaker_asr.redaction import scrub
from speaker_asr.serving.logging_setup import _request_id

logger = logging.getLogger("server")

# Retry-After before anything was measured, and its bounds (clients such as the openai SDK only
# honour values up to 60 s)
DEFAULT_RETRY_AFTER_S = 5
MAX_RETRY_AFTER_S = 60
# a running request's progress is logged at most every 30 s and every 10 % of a step, whichever is
# rarer (a request done within 30 s logs none)
PROGRESS_LOG_INTERVAL_S = 30.0
PROGRESS_LOG_STEP = 0.1


class ProgressLog:
    """One request's progress callback on the server: a line at info on the ``server`` logger when
    :class:`~speaker_asr.progress.RequestProgress` says one is due (``PROGRESS_LOG_INTERVAL_S``,
    ``PROGRESS_LOG_STEP``), with the request's id (the diarization's thread does not carry the
    request's context) and the counts as fields: ``progress: asr 120/480 windows, diarization:
    embeddings 30/120 (95 s)``."""

    def __init__(self, request_id: Optional[str]):
        self.request_id = request_id
        self.state = RequestProgress(PROGRESS_LOG_INTERVAL_S, PROGRESS_LOG_STEP)

    def __call__(self, event: Progress) -> None:
        line = self.state.update(event)
        if line is not None:
            logger.info("progress: %s (%.0f s)", line.text, line.elapsed_s,
                        extra={"request_id": self.request_id, "fields": line.fields()})


@dataclass(frozen=True)
class NotReady:
    """The model is not ready: ``code`` (``model_loading``, ``model_failed``), the ``reason`` in
    words, the ``headers`` of a 503 (``Retry-After`` while loading) and whether waiting helps
    (``recovers``: a failed load stays failed until the server is fixed)."""

    code: str
    reason: str
    headers: dict[str, str]
    recovers: bool


class QueueFull(Exception):
    """No place is left in the queue: answer 503 with ``Retry-After: retry_after``."""

    def __init__(self, limit: int, retry_after: int):
        super().__init__(f"the server is busy: {limit} requests are waiting for the model already "
                         f"(MAX_QUEUE={limit}); retry in about {retry_after} s")
        self.limit = limit
        self.retry_after = retry_after


class ClientGone(Exception):
    """The client disconnected while its request waited for the model: dropped, never run."""


class Ticket:
    """A request's place in the queue, from before its body is read until the model starts on it
    (or the request ends). :meth:`release` is idempotent."""

    def __init__(self, runner: "ModelRunner"):
        self._runner = runner
        self.held = True

    def release(self) -> None:
        with self._runner._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        if self.held:
            self.held = False
            self._runner.admitted -= 1


class ModelCall:
    """One call of the model, queued for the worker thread: a request's ``call(data)`` or, with
    ``plain``, ``call()`` (a live session's: no data, no progress callback). ``data`` is dropped
    as soon as the job is dropped or has run. ``future``: its outcome (the call's result or
    exception)."""

    def __init__(self, runner: "ModelRunner", data: Any, call: Callable[..., Any],
                 ticket: Optional[Ticket], plain: bool = False):
        self.runner = runner
        self.data = data
        self.call = call
        self.ticket = ticket
        self.plain = plain
        self.context = contextvars.copy_context()  # the request id reaches the handler's log lines
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.submitted = time.perf_counter()
        self.started: Optional[float] = None
        self.ended: Optional[float] = None
        self.dropped = False

    @property
    def queued_seconds(self) -> float:
        return (self.started if self.started is not None else time.perf_counter()) - self.submitted

    @property
    def run_seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else time.perf_counter()) - self.started

    def __call__(self) -> None:  # on the worker thread
        runner = self.runner
        with runner._lock:
            if not self.future.set_running_or_notify_cancel():
                return  # dropped while it waited: counted and released by drop()
            runner.waiting -= 1
            runner.running += 1
            if self.ticket is not None:
                self.ticket._release_locked()
        self.started = time.perf_counter()
        data, self.data = self.data, None
        # a handler that takes a progress callback gets one (and the job's call passes it on)
        extra = {"progress": ProgressLog(self.context.get(_request_id))} \
            if runner.reports_progress and not self.plain else {}
        try:
            result = self.context.run(self.call, *(() if self.plain else (data,)), **extra)
        except BaseException as exc:
            outcome: tuple = (None, exc)
        else:
            outcome = (result, None)
        del data
        # times and counters first: setting the future wakes the request up
        self.ended = time.perf_counter()
        with runner._lock:
            runner.running -= 1
            runner._observe(self.ended - self.started)
        if outcome[1] is not None:
            self.future.set_exception(outcome[1])
        else:
            self.future.set_result(outcome[0])


class DisconnectWatch:
    """Reads the request's ASGI ``receive`` after its body, until ``http.disconnect``: ``gone``
    is set when the client has gone away. :meth:`close` stops watching."""

    def __init__(self, receive: Callable):
        self.gone = asyncio.Event()
        self._task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Callable) -> None:
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                self.gone.set()
                return

    def close(self) -> None:
        self._task.cancel()


class ModelRunner:
    """Owns the handler. It loads once in the background, then runs one call at a time on a
    :class:`~speaker_asr.models.ModelThread`, so the event loop stays free and the requests keep
    their order. (What keeps two model calls apart is the models' own lock,
    :attr:`speaker_asr.models.Models.lock`; the thread is for the queue.) :attr:`models`: the
    handler's :class:`~speaker_asr.models.Models` (its ``models``), None for a handler that is
    a plain function (a test's stand-in)."""

    def __init__(self, factory: Callable[[], Callable[[dict], Any]], max_queue: int = DEFAULT_MAX_QUEUE):
        self.factory = factory
        self.max_queue = max_queue
        self.state = "loading"  # loading | ready | failed
        self.reason: Optional[str] = None
        self.handler: Optional[Callable[[dict], Any]] = None
        self.models: Optional[Models] = None
        self.reports_progress = False  # the handler takes ``progress=`` (its jobs' calls too)
        self.load_started = time.monotonic()
        self.load_seconds: Optional[float] = None
        self.loaded_at: Optional[float] = None  # wall clock (time.time()) when loading finished
        self._thread = ModelThread()
        self._lock = threading.Lock()
        self.admitted = 0  # tickets held: requests reading, parsing or waiting, not yet running
        self.waiting = 0  # submitted, not started: the queue depth
        self.running = 0
        self.rejected_queue_full = 0
        self.dropped_disconnected = 0
        self._mean_run_s: Optional[float] = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def start(self) -> None:
        if self._thread.started:
            return
        # a daemon thread: a shutdown during a long download or transcription does not hang
        self._thread.start()
        self.load_started = time.monotonic()
        self._thread.put(self._load)

    def stop(self) -> None:
        self._thread.stop()

    def counts(self) -> tuple[int, int]:
        """(requests waiting for the model, requests running)."""
        with self._lock:
            return self.waiting, self.running

    def _load(self) -> None:
        try:
            handler = self.factory()
        except BaseException as exc:  # never let a failed load take the server down
            self.reason = scrub(f"{type(exc).__name__}: {exc}")[:2000]
            self.state = "failed"
            logger.error("the model failed to load; the server stays up and answers 503: %s",
                         self.reason, exc_info=True)
            return
        self.handler = handler
        models = getattr(handler, "models", None)  # the handler's public models layer, if any
        self.models = models if isinstance(models, Models) else None
        self.reports_progress = takes_progress(handler)
        self.load_seconds = time.monotonic() - self.load_started
        self.loaded_at = time.time()
        self.state = "ready"
        logger.info("model ready after %.1f s", self.load_seconds)

    def not_ready(self) -> Optional["NotReady"]:
        """Why the model cannot take a call now (None: it can): loading, or failed to load --
        the one answer of every route that needs the model (503 on HTTP, an ``error`` event on a
        live socket)."""
        if self.state == "ready":
            return None
        status, body, headers = self.status()
        loading = self.state == "loading"
        return NotReady("model_loading" if loading else "model_failed", body["reason"], headers,
                        recovers=loading)

    def status(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status code, body, headers) for a health check."""
        if self.state == "ready":
            # the patches, the diarization settings in force, the int8 form (Models.health)
            body: dict[str, Any] = {"status": "ok", **(self.models.health() if self.models else {})}
            return 200, body, {}
        if self.state == "loading":
            elapsed = time.monotonic() - self.load_started
            return 503, {"status": "loading",
                         "reason": f"the model is loading ({elapsed:.0f} s so far)"}, {"Retry-After": "10"}
        return 503, {"status": "error", "reason": f"the model failed to load: {self.reason}"}, {}

    def precheck(self, data: Any) -> None:
        """Refuse invalid parameters (RequestError) before the request queues: a typo in
        ``language`` is answered at once instead of after the transcriptions ahead of it. The
        check is the handler's own first step (``InferenceConfig.from_request`` against the loaded
        models' capabilities), so the two cannot disagree; a handler without models validates
        for itself."""
        if self.models is None or not isinstance(data, dict):
            return
        from speaker_asr.config import InferenceConfig

        InferenceConfig.from_request(data.get("parameters"), self.models.capabilities)

    # ----------------------------------------------------------------------------- the queue

    def retry_after(self) -> int:
        """Seconds after which a place in the queue is likely free: about one run of the model
        (the running request's end frees one), by the mean of recent runs."""
        mean = self._mean_run_s
        if mean is None:
            return DEFAULT_RETRY_AFTER_S
        return int(min(MAX_RETRY_AFTER_S, max(1, math.ceil(mean))))

    def _observe(self, seconds: float) -> None:
        # an exponentially weighted mean of the last runs (under the lock)
        self._mean_run_s = seconds if self._mean_run_s is None else 0.7 * self._mean_run_s + 0.3 * seconds

    def admit(self) -> Ticket:
        """A place for a new request, before its body is read; :class:`QueueFull` when
        ``max_queue`` requests wait already (beside the one the model runs)."""
        with self._lock:
            if self.admitted + self.running >= self.max_queue + 1:
                self.rejected_queue_full += 1
                raise QueueFull(self.max_queue, self.retry_after())
            self.admitted += 1
            return Ticket(self)

    def submit(self, data: Any, call: Optional[Callable[..., Any]] = None,
               ticket: Optional[Ticket] = None) -> ModelCall:
        """Queue ``call(data)`` (by default ``handler(data)``) for the worker thread; when the
        handler takes a progress callback, ``call(data, progress=ProgressLog(...))``. The caller
        should drop its own reference to ``data``: the job holds it until it runs or is dropped."""
        assert self.handler is not None
        return self._queue(ModelCall(self, data, call or self.handler, ticket))

    async def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the worker thread, queued behind the requests already waiting (a live
        session's model call: no data, no progress callback, no place taken with :meth:`admit`).
        Cancelled while it waits: dropped before it runs (:meth:`drop`); cancelled once running:
        it ends on its own and nobody reads its outcome."""
        assert self.handler is not None
        job = self._queue(ModelCall(self, None, fn, None, plain=True))
        done = asyncio.wrap_future(job.future)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            self.drop(job)
            done.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    def _queue(self, job: ModelCall) -> ModelCall:
        with self._lock:
            self.waiting += 1
        self._thread.put(job)
        return job

    def drop(self, job: ModelCall) -> bool:
        """Drop a job that has not started (its client is gone): True when dropped (counted, its
        data released); False when the model is already on it or done."""
        with self._lock:
            if not job.future.cancel():
                return False
            self.waiting -= 1
            self.dropped_disconnected += 1
            job.data = None
            job.dropped = True
            if job.ticket is not None:
                job.ticket._release_locked()
        return True

    async def wait(self, job: ModelCall, watch: Optional[DisconnectWatch] = None,
                   until: Optional[asyncio.Event] = None) -> bool:
        """Wait for the job to finish -- or, with ``until``, for that event, whichever is first.
        Returns whether the job is done. When ``watch`` sees the client go before the model has
        started on the job, the job is dropped and :class:`ClientGone` raised; once it has
        started, the model finishes it (it cannot be interrupted) and this keeps waiting."""
        done = asyncio.wrap_future(job.future)
        # the outcome is read from job.future: mark this copy's exception as retrieved
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        waiters: list = [done]
        extra = []
        if until is not None:
            extra.append(asyncio.ensure_future(until.wait()))
        gone_task = None
        if watch is not None and not watch.gone.is_set():
            gone_task = asyncio.ensure_future(watch.gone.wait())
            extra.append(gone_task)
        elif watch is not None and self.drop(job):
            raise ClientGone()
        try:
            while True:
                finished, _ = await asyncio.wait(waiters + extra, return_when=asyncio.FIRST_COMPLETED)
                if done in finished:
                    return True
                if gone_task is not None and gone_task in finished:
                    if self.drop(job):
                        raise ClientGone()
                    extra.remove(gone_task)  # running: wait for it anyway
                    gone_task = None
                    continue
                return done.done()  # ``until`` is set
        finally:
            for task in extra:
                task.cancel()
