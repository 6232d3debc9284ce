"""ModelRunner: loads the handler in the background and runs one call at a time on a single
worker thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from speaker_asr.serving.logging_setup import scrub

logger = logging.getLogger("server")


class ModelRunner:
    """Owns the handler. It loads once in the background, then runs one call at a time on a
    single daemon worker thread (model calls are not re-entrant), so the event loop stays free."""

    def __init__(self, factory: Callable[[], Callable[[dict], Any]]):
        self.factory = factory
        self.state = "loading"  # loading | ready | failed
        self.reason: Optional[str] = None
        self.handler: Optional[Callable[[dict], Any]] = None
        self.load_started = time.monotonic()
        self.load_seconds: Optional[float] = None
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.waiting = 0  # submitted, not started: the queue depth
        self.running = 0

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def start(self) -> None:
        if self._thread is not None:
            return
        # a daemon thread: a shutdown during a long download or transcription does not hang
        self._thread = threading.Thread(target=self._work, name="model-worker", daemon=True)
        self._thread.start()
        self.load_started = time.monotonic()
        self._jobs.put(self._load)

    def stop(self) -> None:
        self._jobs.put(None)

    def counts(self) -> tuple[int, int]:
        """(requests waiting for the model, requests running)."""
        with self._lock:
            return self.waiting, self.running

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

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
        self.load_seconds = time.monotonic() - self.load_started
        self.state = "ready"
        logger.info("model ready after %.1f s", self.load_seconds)

    def status(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status code, body, headers) for a health check."""
        if self.state == "ready":
            body: dict[str, Any] = {"status": "ok"}
            report = getattr(self.handler, "patch_report", None)
            if report:  # which library internals this server changed, and why the others not
                body["patches"] = [r.as_dict() for r in report]
            quantization = getattr(self.handler, "quantization", None)
            if quantization:  # QUANTIZATION=int8: the form chosen for this CPU, and why
                body["quantization"] = quantization
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
        models' capabilities), so the two cannot disagree; a handler without ``capabilities``
        validates for itself."""
        capabilities = getattr(self.handler, "capabilities", None)
        if capabilities is None or not isinstance(data, dict):
            return
        from speaker_asr.config import InferenceConfig

        InferenceConfig.from_request(data.get("parameters"), capabilities)

    async def run(self, data: dict[str, Any]) -> tuple[Any, float, float]:
        """(result, seconds queued, seconds running); the handler's exceptions propagate."""
        assert self.handler is not None
        future: concurrent.futures.Future = concurrent.futures.Future()
        context = contextvars.copy_context()  # the request id reaches the handler's log lines
        submitted = time.perf_counter()
        times = {}

        def job() -> None:
            with self._lock:
                self.waiting -= 1
            if not future.set_running_or_notify_cancel():
                return
            with self._lock:
                self.running += 1
            times["start"] = time.perf_counter()
            try:
                result = context.run(self.handler, data)
            except BaseException as exc:
                outcome: tuple = (None, exc)
            else:
                outcome = (result, None)
            # times and counters first: setting the future wakes the request up
            times["end"] = time.perf_counter()
            with self._lock:
                self.running -= 1
            if outcome[1] is not None:
                future.set_exception(outcome[1])
            else:
                future.set_result(outcome[0])

        with self._lock:
            self.waiting += 1
        self._jobs.put(job)
        result = await asyncio.wrap_future(future)
        return result, times["start"] - submitted, times["end"] - times["start"]
