"""Speaker turns as data: cleaning, the interval index every lookup goes through, and pyannote
4's exclusive turns derived for pyannote 3.x. Pure Python, no torch.

The records (:mod:`speaker_asr.types`) sit below this module and do not import it; the diarization
step and the attribution call :func:`speakers_alone` when they need one speaker at a time.
"""

from __future__ import annotations

import bisect
import math
from typing import Iterable, Optional

from speaker_asr.types import Diarization, Turn

# a zero-length piece (Whisper times some words so) is looked up as the instant it is: the span
# [t - POINT, t + POINT], short enough to lie inside any real turn that contains t
POINT = 1e-6


def finite(x) -> Optional[float]:
    """``x`` as a float when it is a finite number, else None."""
    if x is None:
        return None
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def span(start: float, end: float) -> tuple[float, float]:
    """The span a piece is looked up by: itself, or for a zero-length piece its instant
    (:data:`POINT` either side). The one place a zero-length lookup is defined."""
    return (start - POINT, start + POINT) if end <= start else (start, end)


def clean_turns(turns: Iterable[Turn], duration: Optional[float] = None) -> list[Turn]:
    """Sorted turns with positive length, clamped to ``[0, duration]``; unsorted, overlapping and
    degenerate input is fine."""
    out = []
    for t in turns:
        start, end = finite(t.start), finite(t.end)
        if start is None or end is None:
            continue
        start = max(0.0, start)
        if duration is not None:
            end = min(end, duration)
        if end > start:
            out.append(Turn(start, end, t.speaker))
    out.sort(key=lambda t: (t.start, t.end))
    return out


def _merge_own(turns: list[Turn]) -> list[Turn]:
    """Each speaker's overlapping or touching turns merged into one."""
    merged: dict[str, list[Turn]] = {}
    for t in turns:
        own = merged.setdefault(t.speaker, [])
        if own and t.start <= own[-1].end:
            own[-1] = Turn(own[-1].start, max(own[-1].end, t.end), t.speaker)
        else:
            own.append(t)
    return sorted((t for own in merged.values() for t in own), key=lambda t: (t.start, t.end))


def exclusive_turns(turns: Iterable[Turn]) -> list[Turn]:
    """One speaker at a time, from turns that may overlap: what pyannote.audio 4 returns as its
    exclusive diarization, derived here for pyannote.audio 3.x, which only returns the turns.

    Where turns overlap, a turn lying inside every other turn active there (an interjection or a
    backchannel inside a longer turn) keeps its time and the longer turn keeps the rest; otherwise
    (one speaker takes over from another) the shared stretch is split at its midpoint, the first
    half to the speaker who was talking first. Every speaker keeps every moment nobody else speaks
    in; the result is sorted, with no overlaps and adjacent pieces of one speaker merged.
    """
    clean = _merge_own(clean_turns(turns))
    if not clean:
        return []
    bounds = sorted({x for t in clean for x in (t.start, t.end)})
    pieces: list[Turn] = []

    def add(start: float, end: float, speaker: str) -> None:
        if end <= start:
            return
        if pieces and pieces[-1].speaker == speaker and pieces[-1].end >= start:
            pieces[-1] = Turn(pieces[-1].start, end, speaker)
        else:
            pieces.append(Turn(start, end, speaker))

    active: list[Turn] = []
    following = 0  # clean[following:] start later than the current stretch
    for a, b in zip(bounds, bounds[1:]):
        while following < len(clean) and clean[following].start <= a:
            active.append(clean[following])
            following += 1
        active = [t for t in active if t.end >= b]
        if not active:
            continue
        if len(active) == 1:
            add(a, b, active[0].speaker)
            continue
        inside = [t for t in active
                  if all(o is t or (o.start <= t.start and t.end <= o.end) for o in active)]
        if inside:
            add(a, b, min(inside, key=lambda t: (t.end - t.start, t.start)).speaker)
            continue
        # a hand-over: split the stretch all active turns share at its midpoint
        middle = (max(t.start for t in active) + min(t.end for t in active)) / 2
        first = min(active, key=lambda t: (t.start, t.end))
        last = max(active, key=lambda t: (t.end, t.start))
        add(a, min(b, max(a, middle)), first.speaker)
        add(max(a, min(b, middle)), b, last.speaker)
    return pieces


def speakers_alone(diarization: Diarization) -> list[Turn]:
    """The diarization's exclusive turns, or where it made none (pyannote 3.x) the ones
    :func:`exclusive_turns` derives from its turns: for the speakers' labels and voices and for
    segment-level attribution, not as evidence for whose words are whose."""
    if diarization.exclusive_turns is not None:
        return diarization.exclusive_turns
    return exclusive_turns(diarization.turns)


class SpeakerIndex:
    """Interval index over speaker turns: overlap and nearest-turn queries in O(log T + k)."""

    def __init__(self, turns: Iterable[Turn]):
        self.turns = clean_turns(turns)
        self._starts = [t.start for t in self.turns]
        # _max_end[i] = max(end of turns[0..i]): lets a query stop scanning backwards early
        self._max_end: list[float] = []
        running = -math.inf
        for t in self.turns:
            running = max(running, t.end)
            self._max_end.append(running)
        # turns sorted by end, for the nearest-turn lookup to the left of a point
        self._by_end = sorted(self.turns, key=lambda t: t.end)
        self._ends = [t.end for t in self._by_end]

    def __len__(self) -> int:
        return len(self.turns)

    def turns_in(self, start: float, end: float) -> list[Turn]:
        """The turns that overlap ``[start, end]`` by more than zero, in start order (the one
        scan every overlap query goes through)."""
        found = []
        i = bisect.bisect_left(self._starts, end) - 1  # last turn starting before `end`
        while i >= 0 and self._max_end[i] > start:
            t = self.turns[i]
            if min(end, t.end) > max(start, t.start):
                found.append(t)
            i -= 1
        return found[::-1]

    def overlaps(self, start: float, end: float) -> dict[str, float]:
        """Seconds of overlap with ``[start, end]`` per speaker (only speakers that overlap)."""
        result: dict[str, float] = {}
        for t in self.turns_in(start, end):
            result[t.speaker] = result.get(t.speaker, 0.0) + min(end, t.end) - max(start, t.start)
        return result

    def coverage(self, start: float, end: float) -> dict[str, float]:
        """Share of ``[start, end]`` each speaker's turns cover (a zero-length span: of its
        instant, so 1.0 for each speaker with a turn containing it)."""
        start, end = span(start, end)
        return {s: min(1.0, v / (end - start)) for s, v in self.overlaps(start, end).items()}

    def nearest(self, start: float, end: float) -> Optional[Turn]:
        """The turn closest to ``[start, end]`` (gap measured between the nearest edges); ties
        go to the turn that comes first."""
        best, best_gap = None, math.inf
        j = bisect.bisect_right(self._ends, start) - 1  # latest-ending turn ending at/before start
        if j >= 0:
            best, best_gap = self._by_end[j], start - self._by_end[j].end
        k = bisect.bisect_left(self._starts, end)  # first turn starting at/after end
        if k < len(self.turns) and self.turns[k].start - end < best_gap:
            best = self.turns[k]
        return best

    def speaker_at(self, start: float, end: float) -> Optional[str]:
        """The speaker for a piece spanning ``[start, end]``: largest total overlap (ties: the
        first label), else the nearest turn's, else None when there are no turns. A zero-length
        piece is looked up as the instant it is (:func:`span`)."""
        if not self.turns:
            return None
        start, end = span(start, end)
        overlaps = self.overlaps(start, end)
        if overlaps:
            # compared to the nanosecond: sums of the same seconds in another order differ in
            # the last bits, and a tie must go to the first label whatever the order
            return max(sorted(overlaps), key=lambda s: round(overlaps[s], 9))
        return self.nearest(start, end).speaker
