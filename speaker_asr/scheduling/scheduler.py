"""The one scheduler of the models' work (:class:`Scheduler`), its policy is
speaker_asr/scheduling/policy.py's.

Work runs on the threads that ask for it (a request's thread, the diarization pool, a live
session's call); what the scheduler decides is which of them holds each lane. A thread takes a
lane for a stretch of work with :meth:`Scheduler.unit`; inside it, the model code calls
:func:`checkpoint` at each unit's boundary (each generated token of a decode, each batch of the
segmentation and of the embeddings, each sentence's voice). There the holder

* stops with :class:`WorkCancelled` when its job was cancelled (its client is gone, its session
  closed): the stack unwinds and frees what the work held;
* gives the lane up when the policy ranks a waiting claim before it, and waits for its turn.

A unit's boundaries change the order of the work, never its result: each thread's computation is
the one it would make alone.

The job a thread works for is a context variable, so a request's work on
the diarization pool is the request's (the pool copies the caller's context).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from speaker_asr.scheduling.policy import (LANES, Claim, Priority, SchedulePolicy, choose,
                                           should_yield)


# how far back the live sessions' measured load looks (Scheduler.load)
LOAD_WINDOW_S = 60.0


class WorkCancelled(BaseException):
    """The job's work stopped at a unit's boundary: its client is gone or its session closed.
    A BaseException, as asyncio's CancelledError: no ``except Exception`` on the way (a
    diarization fault kept as a warning, a failed voice embedding) may take it for a fault."""


@dataclass(eq=False)
class Job:
    """One request's or one live call's work: its ``priority``, a ``name`` for the logs, when it
    arrived, the model seconds it was served so far."""

    id: int
    priority: Priority
    name: str
    arrived: float
    served: float = 0.0
    last_ran: float = float("-inf")
    reason: Optional[str] = None  # set: cancelled, and why
    scheduler: Optional["Scheduler"] = field(default=None, repr=False)

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the job's work at its next unit's boundary (waiting units at once)."""
        if self.scheduler is not None:
            self.scheduler.cancel(self, reason)
        elif self.reason is None:
            self.reason = reason


_CURRENT: contextvars.ContextVar[Optional[Job]] = contextvars.ContextVar("scheduled_job", default=None)
_HELD = threading.local()  # this thread's held lanes: [(scheduler, lane), ...]; its seconds waited

def _held() -> list:
    held = getattr(_HELD, "units", None)
    if held is None:
        held = _HELD.units = []
    return held


def checkpoint() -> None:
    """A unit's boundary, called by the model code (cheap when nothing waits): raises
    :class:`WorkCancelled` when this context's job was cancelled, and gives each lane this thread
    holds to a claim that ranks before it."""
    job = _CURRENT.get()
    if job is not None and job.reason is not None:
        raise WorkCancelled(job.reason)
    for scheduler, lane in list(_held()):
        scheduler._maybe_yield(lane)


def thread_waited() -> float:
    """Seconds this thread has waited for lanes so far (a decode's own time is its wall time
    less what it waited)."""
    return getattr(_HELD, "waited", 0.0)


class Scheduler:
    """The lanes (``asr``, ``diarization``), who holds each, who waits, and the jobs' service.
    ``clock``: seconds (monotonic)."""

    def __init__(self, policy: Optional[SchedulePolicy] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.policy = policy or SchedulePolicy()
        self.clock = clock
        self._cond = threading.Condition()
        self._holder: dict[str, Optional[tuple[Job, Claim, float]]] = {lane: None for lane in LANES}
        self._waiting: dict[str, dict[int, tuple[Job, Claim]]] = {lane: {} for lane in LANES}
        self._live = 0  # claims waiting or holding whose work file units pause for
        self._ids = itertools.count(1)
        self._claims = itertools.count(1)
        #: units given up to a claim that ranked first, and jobs cancelled (for /metrics)
        self.yields = 0
        self.cancelled = 0
        self._started = clock()
        # the live units of the last LOAD_WINDOW_S: (end, seconds, lane, priority)
        self._recent: collections.deque = collections.deque()

    # -- jobs -----------------------------------------------------------------------------------

    def new_job(self, priority: Priority, name: str = "") -> Job:
        return Job(next(self._ids), Priority(priority), name, self.clock(), scheduler=self)

    @contextlib.contextmanager
    def working_for(self, job: Job) -> Iterator[Job]:
        """Within the block, this context's work is ``job``'s."""
        token = _CURRENT.set(job)
        try:
            yield job
        finally:
            _CURRENT.reset(token)

    @contextlib.contextmanager
    def job(self, priority: Priority, name: str = "") -> Iterator[Job]:
        """A new job, worked for within the block."""
        with self.working_for(self.new_job(priority, name)) as job:
            yield job

    @contextlib.contextmanager
    def file_job(self, name: str = "") -> Iterator[Job]:
        """The context's job, or a new file job for the block when it has none (a caller outside
        our server: the Endpoints toolkit's request threads, a script)."""
        job = _CURRENT.get()
        if job is not None and job.scheduler is self:
            yield job
            return
        with self.job(Priority.FILE, name) as job:
            yield job

    def cancel(self, job: Job, reason: str = "cancelled") -> None:
        with self._cond:
            if job.reason is None:
                job.reason = reason
                self.cancelled += 1
            self._cond.notify_all()

    # -- lanes ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def unit(self, lane: str) -> Iterator[None]:
        """Hold ``lane`` for the block (its checkpoints may give it up and take it back). Taken
        again by the thread that holds it: nothing more. Without a job in the context, a file
        job of its own."""
        if lane not in self._holder:
            raise ValueError(f"no lane {lane!r}; lanes: {', '.join(LANES)}")
        held = _held()
        entry = (self, lane)
        if entry in held:
            yield
            return
        with self.file_job() as job:
            self._acquire(lane, job)
            held.append(entry)
            try:
                yield
            finally:
                held.remove(entry)
                self._release(lane, job)

    def busy(self, at_most: Priority, lane: Optional[str] = None) -> bool:
        """Whether work of priority ``at_most`` or before it waits or runs (on ``lane``, or any)."""
        with self._cond:
            for lane in [lane] if lane is not None else LANES:
                holder = self._holder[lane]
                if holder is not None and holder[1].priority <= at_most:
                    return True
                if any(c.priority <= at_most for _, c in self._waiting[lane].values()):
                    return True
            return False

    def load(self, lane: str, at_most: Priority = Priority.LIVE_SPEAKERS,
             window_s: float = LOAD_WINDOW_S) -> float:
        """The share of the last ``window_s`` (at most :data:`LOAD_WINDOW_S`; since the start when
        shorter) that live work of priority ``at_most`` or before it held ``lane``: what the live
        sessions need of the model, measured (a live session's final decodes: ``asr``)."""
        with self._cond:
            now = self.clock()
            window = min(window_s, LOAD_WINDOW_S, max(1e-9, now - self._started))
            busy = sum(min(seconds, end - (now - window)) for end, seconds, l, p in self._recent
                       if l == lane and p <= at_most and end > now - window)
            return busy / window

    def snapshot(self) -> dict:
        """Each lane's holder (its job's name and priority) and how many claims wait on it."""
        with self._cond:
            return {lane: {"running": None if h is None else {"job": h[0].name, "priority": h[0].priority.name.lower()},
                           "waiting": len(self._waiting[lane])}
                    for lane, h in self._holder.items()}

    # -- inside (under self._cond) --------------------------------------------------------------

    def _claim(self, job: Job) -> Claim:
        return Claim(job.id, job.priority, job.arrived, self.clock(), job.served, job.last_ran)

    def _acquire(self, lane: str, job: Job) -> None:
        started = time.perf_counter()
        with self._cond:
            claim = self._claim(job)
            key = next(self._claims)
            self._waiting[lane][key] = (job, claim)
            if job.priority.live_first:
                self._live += 1
            try:
                self._grant()
                while self._holder[lane] is None or self._holder[lane][1] is not claim:
                    if job.reason is not None:
                        raise WorkCancelled(job.reason)
                    self._cond.wait()
                    self._grant()
            except BaseException:
                if self._waiting[lane].pop(key, None) is not None and job.priority.live_first:
                    self._live -= 1
                if self._holder[lane] is not None and self._holder[lane][1] is claim:
                    self._holder[lane] = None
                    if job.priority.live_first:
                        self._live -= 1
                    self._grant()
                self._cond.notify_all()
                raise
        _HELD.waited = thread_waited() + time.perf_counter() - started

    def _grant(self) -> None:
        """Give each free lane to the claim the policy picks."""
        now = self.clock()
        granted = False
        for lane in LANES:
            if self._holder[lane] is not None or not self._waiting[lane]:
                continue
            claims = {id(c): (key, job, c) for key, (job, c) in self._waiting[lane].items()}
            best = choose([c for _, _, c in claims.values()], now, self.policy, self._live > 0)
            if best is None:
                continue
            key, job, claim = claims[id(best)]
            del self._waiting[lane][key]
            self._holder[lane] = (job, claim, now)
            granted = True
        if granted:
            self._cond.notify_all()

    def _release(self, lane: str, job: Job) -> None:
        with self._cond:
            holder = self._holder[lane]
            if holder is None or holder[0] is not job:
                return
            now = self.clock()
            job.served += now - holder[2]
            job.last_ran = now
            if job.priority != Priority.FILE:
                self._recent.append((now, now - holder[2], lane, job.priority))
                while self._recent and self._recent[0][0] < now - LOAD_WINDOW_S:
                    self._recent.popleft()
            self._holder[lane] = None
            if job.priority.live_first:
                self._live -= 1
            self._grant()
            self._cond.notify_all()

    def _maybe_yield(self, lane: str) -> None:
        """At a checkpoint of the thread holding ``lane``: give it up and wait for it again when
        a waiting claim ranks first."""
        if not self._waiting[lane] and not (self._live and self.policy.live_first):
            return  # the common case, read without the lock: nothing waits
        with self._cond:
            holder = self._holder[lane]
            if holder is None:
                return
            job, claim, since = holder
            now = self.clock()
            current = Claim(claim.job_id, claim.priority, claim.arrived, claim.since,
                            job.served + now - since, job.last_ran)
            others = [c for _, c in self._waiting[lane].values()]
            if not should_yield(current, others, now, self.policy, self._live > 0):
                return
            self.yields += 1
        self._release(lane, job)
        self._acquire(lane, job)


__all__ = ["Job", "LOAD_WINDOW_S", "Scheduler", "WorkCancelled", "checkpoint", "thread_waited"]
