"""``assisted="auto"`` for audio that fits one window: decode with or without the assistant,
whichever this deployment has measured to be faster. Pure Python, no torch.

Whether speculative decoding pays off depends on the pair of models and the hardware, not on
the request: a well-matched assistant on a GPU can save time on a short request, while on a
CPU, or with a weak assistant, the drafts cost more than they save (docs/measurements.md,
"Long-form decoding and the assistant" and "Figures behind the speed fixes' reasons"). Both ways
give the same text -- greedy assisted decoding equals greedy decoding -- so the policy can simply
try both and keep the faster: it alternates until it has :attr:`min_samples` timings of each, then
picks the mode with the lower median seconds per second of audio over the last
:attr:`window` timings, and every :attr:`explore_every`-th decision takes the other mode once so
a change (a busier machine, longer requests) is noticed. Each choice says why
(:class:`~speaker_asr.types.AssistDecision`: the reasons ``auto: ...`` of
:data:`~speaker_asr.types.ASSIST_REASONS`).
"""

from __future__ import annotations

import statistics
import threading
from collections import deque

from speaker_asr.types import (ASSIST_AUTO_ASSISTED_FASTER, ASSIST_AUTO_EXPLORING,
                               ASSIST_AUTO_LEARNING, ASSIST_AUTO_PLAIN_FASTER, AssistDecision)


class AssistPolicy:
    def __init__(self, min_samples: int = 2, window: int = 16, explore_every: int = 10):
        self.min_samples = min_samples
        self.explore_every = explore_every
        self._seconds_per_second = {True: deque(maxlen=window), False: deque(maxlen=window)}
        self._decisions = 0
        self._lock = threading.Lock()

    def choose(self) -> AssistDecision:
        """Whether to decode this request with the assistant (``used``), and why."""
        with self._lock:
            self._decisions += 1
            assisted, plain = self._seconds_per_second[True], self._seconds_per_second[False]
            if len(assisted) < self.min_samples or len(plain) < self.min_samples:
                # learning: the mode with fewer timings
                return AssistDecision(len(assisted) <= len(plain), ASSIST_AUTO_LEARNING)
            faster = statistics.median(assisted) <= statistics.median(plain)
            if self.explore_every and self._decisions % self.explore_every == 0:
                return AssistDecision(not faster, ASSIST_AUTO_EXPLORING)
            return AssistDecision(faster, ASSIST_AUTO_ASSISTED_FASTER if faster
                                  else ASSIST_AUTO_PLAIN_FASTER)

    def record(self, assisted: bool, audio_seconds: float, elapsed_seconds: float) -> None:
        """The time one eligible request took to decode (either mode, chosen or requested)."""
        if audio_seconds <= 0 or elapsed_seconds < 0:
            return
        with self._lock:
            self._seconds_per_second[bool(assisted)].append(elapsed_seconds / audio_seconds)

    def snapshot(self) -> dict:
        """Medians (seconds per second of audio) and counts, for logs and metrics."""
        with self._lock:
            return {("assisted" if mode else "plain"): {
                "timings": len(values),
                "median_s_per_audio_s": round(statistics.median(values), 4) if values else None}
                for mode, values in self._seconds_per_second.items()}
