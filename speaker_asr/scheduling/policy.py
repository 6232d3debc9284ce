"""Which unit of model work goes next: the scheduler's policy as pure logic (no threads, no
torch), so that it is tested on hand-made claims.

Every front end's work reaches the models as *units*: a decode step of Whisper, a batch of the
segmentation or of the embeddings, the clustering, a live decode, a voice embedding. A unit runs
on a *lane* (``asr``: Whisper and its assistant; ``diarization``: the diarization and its voice
model), one unit per lane at a time. A :class:`Claim` is one job's wish to run its next unit on a
lane; when a lane comes free, or the unit holding it reaches its end, :func:`choose` picks the
claim that goes next, and :func:`should_yield` says whether the holder gives way.

The order:

1. a live item's final decode (:attr:`Priority.LIVE_FINAL`), then the live speaker work
   (:attr:`Priority.LIVE_SPEAKERS`: an item's speakers, a session's voices), first come first;
2. a file unit that has waited past ``max_wait_s`` (no file starves behind the live work or
   behind shorter files);
3. a growing item's partial decode (:attr:`Priority.LIVE_PARTIAL`), optional work;
4. file work (:attr:`Priority.FILE`), by ``file_order``: ``least_served`` (the job with the
   least model time so far first, so a short file is not stuck behind a long one), ``round_robin``
   (the job that ran longest ago first) or ``arrival`` (first come, first served: one whole
   recording after another).

With ``live_first``, file units pause on *every* lane while a live final decode or live speaker
work waits or runs: on a CPU the two lanes share the cores, and a live caption's latency is what
a person waits for.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Literal, Optional, Sequence

FileOrder = Literal["least_served", "round_robin", "arrival"]
FILE_ORDERS: tuple[str, ...] = ("least_served", "round_robin", "arrival")
LANES: tuple[str, ...] = ("asr", "diarization")

# a file unit waiting this long goes before partial decodes and other files: a long request ends
# in bounded time however many short ones arrive
DEFAULT_MAX_WAIT_S = 20.0
# a holder gives way to a file that has had less model time only past this difference: two files
# of equal service would otherwise hand the lane back and forth at every decode step
DEFAULT_QUANTUM_S = 0.5


class Priority(IntEnum):
    """A unit's class; a lower value goes first."""

    LIVE_FINAL = 0
    LIVE_SPEAKERS = 1
    LIVE_PARTIAL = 2
    FILE = 3

    @property
    def live_first(self) -> bool:
        """Work that file units pause for (with ``live_first``)."""
        return self in (Priority.LIVE_FINAL, Priority.LIVE_SPEAKERS)


@dataclass(frozen=True)
class SchedulePolicy:
    """The scheduler's settings (``SCHEDULE_FILE_ORDER``, ``SCHEDULE_MAX_WAIT_S``,
    ``SCHEDULE_LIVE_FIRST``; speaker_asr/settings.py)."""

    file_order: FileOrder = "least_served"
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    live_first: bool = True
    quantum_s: float = DEFAULT_QUANTUM_S

    def __post_init__(self):
        if self.file_order not in FILE_ORDERS:
            raise ValueError(f"file_order must be one of {', '.join(FILE_ORDERS)}, not {self.file_order!r}")
        if self.max_wait_s <= 0:
            raise ValueError(f"max_wait_s must be above 0, not {self.max_wait_s}")


@dataclass(frozen=True)
class Claim:
    """One job's wish for its next unit on a lane: the job (``job_id``, its ``priority``, when it
    ``arrived``, the model seconds it was ``served`` so far, when it ``last_ran`` a unit) and
    since when this claim waits (``since``)."""

    job_id: int
    priority: Priority
    arrived: float
    since: float
    served: float = 0.0
    last_ran: float = float("-inf")


def overdue(claim: Claim, now: float, policy: SchedulePolicy) -> bool:
    """A file unit that has waited past ``max_wait_s``."""
    return claim.priority == Priority.FILE and now - claim.since >= policy.max_wait_s


def rank(claim: Claim, now: float, policy: SchedulePolicy, holding: bool = False) -> tuple:
    """The claim's place: the lowest rank goes next. ``holding``: the claim of the unit that
    holds the lane, credited ``quantum_s`` against the files that would take it over."""
    if claim.priority != Priority.FILE:
        return (int(claim.priority), 0.0, claim.since, claim.job_id)
    if not holding and overdue(claim, now, policy):
        return (1.5, 0.0, claim.since, claim.job_id)  # after the live work, before partials
    credit = policy.quantum_s if holding else 0.0
    if policy.file_order == "least_served":
        key = claim.served - credit
    elif policy.file_order == "round_robin":
        key = (now if holding else claim.last_ran) - credit
    else:
        key = claim.arrived
    return (int(Priority.FILE), key, claim.arrived, claim.job_id)


def blocked(claim: Claim, live_active: bool, policy: SchedulePolicy) -> bool:
    """Whether the claim must wait although its lane is free: a file unit while live final or
    speaker work waits or runs (with ``live_first``)."""
    return policy.live_first and live_active and claim.priority == Priority.FILE


def choose(claims: Sequence[Claim], now: float, policy: SchedulePolicy,
           live_active: bool = False) -> Optional[Claim]:
    """The claim that takes a free lane next (None: none may run now)."""
    ready = [c for c in claims if not blocked(c, live_active, policy)]
    return min(ready, key=lambda c: rank(c, now, policy)) if ready else None


def should_yield(holder: Claim, claims: Sequence[Claim], now: float, policy: SchedulePolicy,
                 live_active: bool = False) -> bool:
    """Whether the unit holding a lane gives it up at its next unit's boundary: a claim waiting
    on the lane ranks before it, or it is file work and live work has come (``live_first``)."""
    if blocked(holder, live_active, policy):
        return True
    mine = rank(holder, now, policy, holding=True)
    return any(rank(c, now, policy) < mine for c in claims if not blocked(c, live_active, policy))


__all__ = ["Claim", "DEFAULT_MAX_WAIT_S", "DEFAULT_QUANTUM_S", "FILE_ORDERS", "FileOrder", "LANES",
           "Priority", "SchedulePolicy", "blocked", "choose", "overdue", "rank", "should_yield"]
