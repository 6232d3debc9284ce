"""Progress within one long request (a batch run's displays, which show it, are
speaker_asr/batch/display.py).

Within one request: a :class:`Progress` event says how far one of its two stages has got -- the
ASR's 30 s windows decoded of the total, or the diarization's step (pyannote's segmentation,
speaker_counting, embeddings, discrete_diarization) with its batches done of the total. A caller
hands a :data:`ProgressCallback` to ``EndpointHandler.__call__`` / ``result`` (``progress=``);
it is called from the ASR's thread and from the diarization's, at once. :class:`RequestProgress`
gathers one request's events (thread-safe) and says when a line is due (throttled): the command
line shows it under the bar (``recording``) or as a line every 30 s at most, the server logs it
(serving/runner.py).
"""

from __future__ import annotations

import inspect
import threading
import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional


# --------------------------------------------------------------------------- within one request

ASR = "asr"
DIARIZATION = "diarization"
WINDOWS = "windows"  # the ASR's step: 30 s windows decoded


@dataclass(frozen=True)
class Progress:
    """How far one stage of a request has got. ``stage``: :data:`ASR` (``step`` :data:`WINDOWS`:
    30 s windows decoded, ``done`` of ``total``) or :data:`DIARIZATION` (``step``: pyannote's --
    segmentation, speaker_counting, embeddings, discrete_diarization -- ``done`` of ``total``
    batches; a step without batches has ``total`` 0 and is reported when it ends)."""

    stage: Literal["asr", "diarization"]
    step: str
    done: int
    total: int

    def __post_init__(self):
        if self.done < 0 or self.total < 0:
            raise ValueError(f"progress counts cannot be negative: {self.done}/{self.total}")

    @property
    def fraction(self) -> float:
        """Of the step, 0 to 1 (1 for a step without batches: it is reported when it ends)."""
        return 1.0 if self.total == 0 else min(1.0, self.done / self.total)

    def describe(self) -> str:
        """``asr 12/480 windows``, ``diarization: embeddings 120/480``, ``diarization: speaker_counting``."""
        if self.stage == ASR:
            return f"asr {self.done}/{self.total} {self.step}"
        counts = f" {self.done}/{self.total}" if self.total else ""
        return f"{self.stage}: {self.step}{counts}"


# a request's progress sink: called from the ASR's thread and from the diarization's, at once
ProgressCallback = Callable[[Progress], None]


def takes_progress(call: Callable) -> bool:
    """Whether ``call`` (a handler) names a ``progress`` parameter: ``EndpointHandler`` does; a
    custom or stand-in handler without one is called without it."""
    try:
        return "progress" in inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False


class AsrWindows:
    """The ASR's windows of one request, reported to ``progress`` as they are decoded (0 of
    ``total`` at once). ``recordings``: the request's recordings decoded one after another or
    batched (a ``multichannel`` file's channels), ``total`` windows in all, as many each. Called
    on the ASR's thread only."""

    def __init__(self, total: int, progress: ProgressCallback, recordings: int = 1):
        self.total = max(1, total)
        self.recordings = max(1, recordings)
        self.done = 0
        self.finished_recordings = 0
        self.progress = progress
        self._report()

    def _report(self) -> None:
        self.progress(Progress(ASR, WINDOWS, self.done, self.total))

    def _move(self, done: int) -> None:
        done = min(self.total, done)
        if done > self.done:
            self.done = done
            self._report()

    def _before(self) -> tuple[int, int]:
        """(the windows of the recordings finished, each recording's windows)."""
        each = max(1, self.total // self.recordings)
        return self.finished_recordings * each, each

    def decoded(self, windows: int) -> None:
        """``windows`` more decoded (a batch of chunked decoding)."""
        self._move(self.done + windows)

    def reached(self, fraction: float) -> None:
        """Decoding of the current recording has reached ``fraction`` of it (Whisper's sequential
        long-form loop, which starts each window where the last complete segment ended): the
        windows' worth before it, the last one left for :meth:`finished`."""
        before, each = self._before()
        self._move(before + min(each - 1, int(fraction * each)))

    def finished(self, recordings: int = 1) -> None:
        """``recordings`` more decoded whole (the last, or every one: all windows done)."""
        self.finished_recordings = min(self.recordings, self.finished_recordings + recordings)
        before, _ = self._before()
        self._move(self.total if self.finished_recordings == self.recordings else before)


class DiarizationHook:
    """pyannote's progress hook -- ``hook(step_name, artefact, file=..., total=..., completed=...)``,
    called after each step and within the long ones after each batch -- as :class:`Progress`
    events of stage :data:`DIARIZATION` for ``progress`` (an event repeated is left out)."""

    def __init__(self, progress: ProgressCallback):
        self.progress = progress
        self._totals: dict[str, int] = {}
        self._last: Optional[Progress] = None

    def __call__(self, step_name: str, artefact=None, file=None, total: Optional[int] = None,
                 completed: Optional[int] = None, **_) -> None:
        if total is not None and completed is not None:
            total = max(0, int(total))
            self._totals[step_name] = total
            event = Progress(DIARIZATION, step_name, max(0, min(int(completed), total)), total)
        else:  # the step's end (its artefact): all of its batches
            total = self._totals.get(step_name, 0)
            event = Progress(DIARIZATION, step_name, total, total)
        if event != self._last:
            self._last = event
            self.progress(event)


@dataclass(frozen=True)
class ProgressLine:
    """What a due progress line says: each stage's latest event (the ASR first), and the seconds
    since the request started."""

    stages: tuple[Progress, ...]
    elapsed_s: float

    @property
    def text(self) -> str:
        """``asr 120/480 windows, diarization: embeddings 30/120``."""
        return ", ".join(event.describe() for event in self.stages)

    def fields(self) -> dict:
        """For a JSON log line: ``{"progress": {"asr": {"step", "done", "total"}, ...}, "elapsed_s"}``."""
        return {"progress": {e.stage: {"step": e.step, "done": e.done, "total": e.total}
                             for e in self.stages},
                "elapsed_s": round(self.elapsed_s, 1)}


class RequestProgress:
    """One request's progress, fed :meth:`update` from the ASR's and the diarization's threads
    (under a lock), and throttled: :meth:`update` returns a :class:`ProgressLine` when one is due
    -- ``interval_s`` after the start or the last line, and only when something moved since that
    line: a stage began, began a new step, or advanced by at least ``min_step`` of its step (0:
    any advance). ``interval_s`` 0: every change."""

    def __init__(self, interval_s: float, min_step: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.min_step = min_step
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self._latest: dict[str, Progress] = {}
        self._shown: dict[str, Progress] = {}
        self._last_line = self.started

    def update(self, event: Progress) -> Optional[ProgressLine]:
        with self._lock:
            self._latest[event.stage] = event
            now = self.clock()
            if now - self._last_line < self.interval_s or not self._moved():
                return None
            self._last_line = now
            self._shown = dict(self._latest)
            return self._line(now)

    def latest(self) -> ProgressLine:
        """The latest of each stage now, due or not."""
        with self._lock:
            return self._line(self.clock())

    def _moved(self) -> bool:
        for stage, event in self._latest.items():
            shown = self._shown.get(stage)
            if shown is None or shown.step != event.step:
                return True
            # (a hair under min_step: 13/100 - 3/100 is 0.0999... in floating point)
            if event != shown and event.fraction - shown.fraction >= self.min_step - 1e-9:
                return True
        return False

    def _line(self, now: float) -> ProgressLine:
        order = sorted(self._latest.values(), key=lambda e: (e.stage != ASR, e.stage))
        return ProgressLine(tuple(order), now - self.started)


__all__ = ["ASR", "DIARIZATION", "AsrWindows", "DiarizationHook", "Progress", "ProgressCallback",
           "ProgressLine", "RequestProgress", "takes_progress"]
