"""ModelRunner: loads the handler in the background, then runs the requests' calls on a pool of
worker threads (``MAX_CONCURRENT`` at once), behind a bounded queue. Which request's work the
models do at each moment is the models' scheduler's choice (speaker_asr/scheduling/): a short
file is not stuck behind a long one, and a live session's decodes go first.

A transcription request takes a place (:meth:`ModelRunner.admit`) before its body is read: at
most ``MAX_QUEUE`` requests wait beside the ones the models run, so at most ``MAX_QUEUE +
MAX_CONCURRENT`` bodies are held in memory; one more is refused (:class:`QueueFull`: 503 with
``Retry-After``). A request submitted to the model (:meth:`ModelRunner.submit`) is watched while
it waits and runs (:meth:`ModelRunner.wait`): when its client disconnects before the models start
on it, it is dropped (:class:`ClientGone`) and its data (the audio) released at once; once
started, its job is cancelled and its work stops at its next unit (a decode step, a batch of the
diarization).

A long request's progress is logged at info (:class:`ProgressLog`) while the model runs it, when
the handler takes a ``progress`` callback (``EndpointHandler`` does).

A live session's model calls (:meth:`ModelRunner.call`: a plain function, no request data, with
its priority) run on a pool of their own, each a job of the scheduler's, and stop the same way
when their session closes.
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

from speaker_asr.settings import DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_QUEUE
from speaker_asr.models import Models, ModelThread
from speaker_asr.scheduling import Job, Priority, WorkCancelled
from speaker_asr.progress import Progress, RequestProgress, takes_progress
from speaker_asr.redaction import scrub
from speaker_asr.serving.logging_setup import _request_id

logger = logging.getLogger("server")

# Retry-After before anything was measured, and its bounds (clients such as the openai SDK only
# honour values up to 60 s)
DEFAULT_RETRY_AFTER_S = 5
MAX_RETRY_AFTER_S = 60
# live sessions' model calls in flight at once (the scheduler orders their units): more than
# MAX_SESSIONS' default sessions can ask for together (a decode, a language detection, an item's
# speakers each)
LIVE_WORKERS = 16
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
                 ticket: Optional[Ticket], plain: bool = False, priority: Priority = Priority.FILE):
        self.runner = runner
        #: the scheduler's job this call works for (None: a handler without a models layer)
        self.job: Optional[Job] = None
        if runner.models is not None:
            self.job = runner.models.scheduler.new_job(priority, _request_id.get() or "")
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
            result = self.context.run(self._run, data, extra)
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


    def _run(self, data: Any, extra: dict) -> Any:
        args = () if self.plain else (data,)
        if self.job is None:
            return self.call(*args, **extra)
        with self.job.scheduler.working_for(self.job):
            return self.call(*args, **extra)


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

    def __init__(self, factory: Callable[[], Callable[[dict], Any]], max_queue: int = DEFAULT_MAX_QUEUE,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT):
        self.factory = factory
        self.max_queue = max_queue
        #: requests the models work on at once (1 for a handler without a models layer: nothing
        #: would schedule their work)
        self.max_concurrent = max_concurrent
        self.state = "loading"  # loading | ready | failed
        self.reason: Optional[str] = None
        self.handler: Optional[Callable[[dict], Any]] = None
        self.models: Optional[Models] = None
        self.reports_progress = False  # the handler takes ``progress=`` (its jobs' calls too)
        self.load_started = time.monotonic()
        self.load_seconds: Optional[float] = None
        self.loaded_at: Optional[float] = None  # wall clock (time.time()) when loading finished
        self._thread = ModelThread()  # the load
        self._requests: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._live: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self.admitted = 0  # tickets held: requests reading, parsing or waiting, not yet running
        self.waiting = 0  # submitted, not started: the queue depth
        self.running = 0
        self.rejected_queue_full = 0
        self.dropped_disconnected = 0
        self.cancelled_disconnected = 0  # running when their client left: stopped at the next unit
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
        for pool in (self._requests, self._live):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=False)

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
        workers = self.max_concurrent if self.models is not None else 1
        self._requests = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="request")
        self._live = concurrent.futures.ThreadPoolExecutor(LIVE_WORKERS, thread_name_prefix="live-call")
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
            if self.admitted + self.running >= self.max_queue + self._workers():
                self.rejected_queue_full += 1
                raise QueueFull(self.max_queue, self.retry_after())
            self.admitted += 1
            return Ticket(self)

    def _workers(self) -> int:
        return self.max_concurrent if self.models is not None else 1

    def submit(self, data: Any, call: Optional[Callable[..., Any]] = None,
               ticket: Optional[Ticket] = None) -> ModelCall:
        """Queue ``call(data)`` (by default ``handler(data)``) for the worker thread; when the
        handler takes a progress callback, ``call(data, progress=ProgressLog(...))``. The caller
        should drop its own reference to ``data``: the job holds it until it runs or is dropped."""
        assert self.handler is not None
        return self._queue(ModelCall(self, data, call or self.handler, ticket))

    async def call(self, fn: Callable[[], Any], priority: Priority = Priority.FILE) -> Any:
        """``fn()`` on the live calls' pool as a job of ``priority`` (a live session's model
        call: no data, no progress callback, no place taken with :meth:`admit`). Cancelled while
        it waits: dropped before it runs (:meth:`drop`); cancelled once running: its job is
        cancelled and it stops at its next unit."""
        assert self.handler is not None
        job = self._queue(ModelCall(self, None, fn, None, plain=True, priority=priority))
        done = asyncio.wrap_future(job.future)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            if not self.drop(job) and job.job is not None:
                job.job.cancel("the live call was cancelled")
            done.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    def _queue(self, job: ModelCall) -> ModelCall:
        with self._lock:
            self.waiting += 1
        pool = self._live if job.plain and self._live is not None else self._requests
        pool.submit(job)
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
        started, its scheduler's job is cancelled (its work stops at its next unit, with
        :class:`~speaker_asr.scheduling.WorkCancelled`) and this waits for it to stop."""
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
        elif watch is not None:
            if self.drop(job):
                raise ClientGone()
            if job.job is not None and not job.future.done():
                job.job.cancel("client_gone")
                with self._lock:
                    self.cancelled_disconnected += 1
        try:
            while True:
                finished, _ = await asyncio.wait(waiters + extra, return_when=asyncio.FIRST_COMPLETED)
                if done in finished:
                    return True
                if gone_task is not None and gone_task in finished:
                    if self.drop(job):
                        raise ClientGone()
                    if job.job is not None and not job.future.done():  # running: stop it
                        job.job.cancel("client_gone")
                        with self._lock:
                            self.cancelled_disconnected += 1
                    extra.remove(gone_task)  # wait for it to stop (its next unit)
                    gone_task = None
                    continue
                return done.done()  # ``until`` is set
        except asyncio.CancelledError:
            # the request's task was cancelled (the server's stop, past SHUTDOWN_GRACE_S): its
            # model work stops too instead of running on for nobody
            if not self.drop(job) and job.job is not None:
                job.job.cancel("the request was cancelled")
            raise
        finally:
            for task in extra:
                task.cancel()
