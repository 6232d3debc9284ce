"""Channels as speakers (``multichannel``): each channel's transcript joined into one, every word
kept once, on the channel whose voice it is.

A recording that gives each person a channel (a stereo call, a track or microphone per person)
says who spoke; it also lets everyone be heard on every channel: another person's voice bleeds
into a microphone, more quietly, and Whisper transcribes it there too. Each word (or, without word
times, each segment) is judged by the channels' levels over its time (10 ms frames,
:func:`frame_energy`): over the frames of the word where anything is heard (within
:data:`ACTIVE_RANGE_DB` of the word's loudest frame), the median of how much louder its channel is
than the loudest other channel (:func:`dominance`). The median, not the mean: Whisper's word times
stretch over pauses, and a word of bleed whose span happens to hold a syllable of the channel's
own person is still mostly the other voice.

* nothing heard on any channel there (every channel below :data:`HEARD_DB`, or quieter than
  :data:`LOUD_DB` and within :data:`ABOVE_FLOOR_DB` of its own noise floor,
  :func:`noise_floors`): made up over silence, dropped. The floor is the channel's own: a
  microphone's hiss or a call's line noise is not speech. (:data:`LOUD_DB` keeps a channel that
  never pauses, whose floor is its voice, heard);
* the same word heard on several channels (the same text, starting within :data:`SAME_WORD_S`
  or overlapping; at most one copy a channel): kept once, on the channel
  loudest where its most exactly timed copy puts it (the shortest copy not squeezed into an
  instant: Whisper stretches a word's time over a pause or another person's words before it, and
  each channel's decode times the word its own way), with that copy's time; where that channel
  has no copy, the copy is moved there (unless a word of that channel covers it);
* a word on one channel only, its median more than :data:`BLEED_DB` below another channel: that
  channel's voice bleeding in. It is dropped where the louder channel has a word of its own at
  that time, else moved there: a word belongs to the channel where it is loudest, and a channel
  whose own transcript missed it still gets it;
* anything else is the channel's own: two people talking at once are both kept, and so is a quiet
  person talking over a loud one.

The words of all channels are then merged in time order (:func:`joined_segments`).

No torch, no I/O: numpy over the channels' samples, and the transcript's records.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from dataclasses import dataclass, replace
from typing import NamedTuple, Optional, Sequence

import numpy as np

from speaker_asr.result import speakers_by_channel
from speaker_asr.types import Segment, Word, word_key

FRAME_S = 0.01
# the level of digital near-silence: a channel whose loudest half second is below it is silent
SILENT_DB = -60.0
SILENT_WINDOW_S = 0.5
# a word over which no channel is this loud (the median of its frames) was made up over silence
HEARD_DB = -75.0
# ... nor this many dB above its own noise floor (the FLOOR_PERCENTILE of its frames' levels)
ABOVE_FLOOR_DB = 10.0
FLOOR_PERCENTILE = 5.0
# ... unless it is this loud: speech, even on a channel that never pauses
LOUD_DB = -50.0
# a word's channel this many dB below another channel (the median over the word) heard that
# channel's voice
BLEED_DB = 12.0
# the frames of a word that count: those within this many dB of its loudest frame (on any channel)
ACTIVE_RANGE_DB = 30.0
# a word of another channel covers a bleeding word's time when it overlaps at least this share of
# it and is no longer than COVER_MAX_S (Whisper stretches a looping or misaligned word over seconds)
COVER_SHARE = 0.5
COVER_MAX_S = 1.5
# a word is judged over its own time and this much on each side (word times from the alignment
# heads can be a few frames early or late)
PAD_S = 0.05
# the same word on another channel: the same text, starting within this many seconds
SAME_WORD_S = 0.5
# a word shorter than this was squeezed into an instant by the alignment (no audio found for it)
SQUEEZED_S = 0.04


def channel_label(channel: int) -> str:
    """The speaker label of a channel: ``CHANNEL_0``, ``CHANNEL_1``, ..."""
    return f"CHANNEL_{channel}"


def channel_speaker_label(channel: int, label: str) -> str:
    """The label of a speaker found within a channel (``diarize_channels``):
    ``CHANNEL_1_SPEAKER_00``."""
    return f"{channel_label(channel)}_{label}"


def frame_energy(channels: np.ndarray, rate: int) -> np.ndarray:
    """The mean square of each channel's samples per :data:`FRAME_S` frame: ``(channels,
    frames)`` float64 (the last partial frame left out)."""
    hop = max(1, int(round(FRAME_S * rate)))
    frames = channels.shape[1] // hop
    out = np.empty((channels.shape[0], frames), dtype=np.float64)
    for c in range(channels.shape[0]):  # one channel at a time: no second copy of the recording
        x = channels[c, :frames * hop].astype(np.float64).reshape(frames, hop)
        out[c] = np.einsum("ij,ij->i", x, x) / hop
    return out


def frame_db(energy: np.ndarray) -> np.ndarray:
    """:func:`frame_energy` (any mean square) in dB."""
    return 10.0 * np.log10(np.maximum(energy, 1e-12))


def silent_channels(energy: np.ndarray) -> list[int]:
    """The channels whose loudest :data:`SILENT_WINDOW_S` is below :data:`SILENT_DB`: nothing to
    transcribe (Whisper would only make something up)."""
    width = max(1, int(round(SILENT_WINDOW_S / FRAME_S)))
    silent = []
    for c in range(energy.shape[0]):
        row = energy[c]
        if row.size >= width:
            sums = np.convolve(row, np.ones(width), mode="valid") / width
            loudest = float(sums.max())
        else:
            loudest = float(row.mean()) if row.size else 0.0
        if frame_db(np.array(loudest)) < SILENT_DB:
            silent.append(c)
    return silent


def noise_floors(levels: np.ndarray) -> np.ndarray:
    """Each channel's noise floor in dB: the :data:`FLOOR_PERCENTILE` of its frames' levels
    (``levels``: :func:`frame_db`), the level of its pauses."""
    if levels.shape[1] == 0:
        return np.full(levels.shape[0], -120.0)
    return np.percentile(levels, FLOOR_PERCENTILE, axis=1)


def heard(levels: np.ndarray, floors: np.ndarray, start: float, end: float) -> bool:
    """Whether anything is heard over ``start``..``end`` on some channel: the median of its
    frames there at least :data:`HEARD_DB`, and :data:`LOUD_DB` or :data:`ABOVE_FLOOR_DB`
    above its floor."""
    medians = np.median(_frames(levels, start, end), axis=1)
    return bool(np.any((medians >= HEARD_DB)
                       & ((medians >= LOUD_DB) | (medians >= floors + ABOVE_FLOOR_DB))))


def _frames(levels: np.ndarray, start: float, end: float) -> np.ndarray:
    """The frames of ``start``..``end`` seconds (at least one) where anything is heard: within
    :data:`ACTIVE_RANGE_DB` of the loudest frame there on any channel; ``(channels, frames)``."""
    first = max(0, int(np.floor(start / FRAME_S)))
    last = max(first + 1, int(np.ceil(end / FRAME_S)))
    first = min(first, max(0, levels.shape[1] - 1))
    span = levels[:, first:last]
    loudest = span.max(axis=0)
    return span[:, loudest >= loudest.max() - ACTIVE_RANGE_DB]


def dominance(levels: np.ndarray, channel: int, start: float, end: float,
              other: Optional[int] = None) -> float:
    """How many dB louder ``channel`` is than the loudest other channel (or than ``other``) over
    ``start``..``end``: the median over the frames where anything is heard (``levels``:
    :func:`frame_db`). Positive: its own voice; far below zero: another's bleeding in."""
    span = _frames(levels, start, end)
    if other is not None:
        rival = span[other]
    else:
        rival = np.delete(span, channel, axis=0).max(axis=0)
    return float(np.median(span[channel] - rival))


_norm = functools.lru_cache(maxsize=8192)(word_key)


@dataclass(frozen=True)
class Unit:
    """A word (or, without word times, a segment) heard on ``channel``: what is kept or
    dropped."""

    channel: int
    text: str
    start: float
    end: float


def _loudest_other(levels: np.ndarray, channel: int, start: float, end: float) -> int:
    span = _frames(levels, start, end)
    medians = np.median(span, axis=1)
    medians[channel] = -np.inf
    return int(np.argmax(medians))


def _covers(o: Unit, u: Unit) -> bool:
    length = o.end - o.start
    shared = min(o.end, u.end) - max(o.start, u.start)
    return length <= COVER_MAX_S and shared >= COVER_SHARE * max(u.end - u.start, FRAME_S)


def _twins(o: Unit, u: Unit) -> bool:
    """The same word at about the same time: the same text, starting within
    :data:`SAME_WORD_S` or overlapping (each channel's decode times it its own way)."""
    return _norm(o.text) == _norm(u.text) and (abs(o.start - u.start) <= SAME_WORD_S
                                               or (o.start <= u.end and u.start <= o.end))


class _ByChannel:
    """Each channel's units sorted by start, so that the units near one in time are found by
    bisection, not by a pass over the channel (an hour's call holds thousands of words a
    channel)."""

    def __init__(self, units: Sequence[Unit]):
        self._units: dict[int, list[Unit]] = {}
        self._starts: dict[int, list[float]] = {}
        self._longest: dict[int, float] = {}
        for u in sorted(units, key=lambda u: u.start):
            self.add(u)

    def add(self, u: Unit) -> None:
        at = bisect.bisect_right(self._starts.setdefault(u.channel, []), u.start)
        self._starts[u.channel].insert(at, u.start)
        self._units.setdefault(u.channel, []).insert(at, u)
        self._longest[u.channel] = max(self._longest.get(u.channel, 0.0), u.end - u.start)

    @property
    def channels(self) -> list[int]:
        return list(self._units)

    def near(self, channel: int, u: Unit) -> list[Unit]:
        """The units of ``channel`` that can cover ``u`` or be its twin (:func:`_covers`,
        :func:`_twins`): those starting from the channel's longest unit (or
        :data:`SAME_WORD_S`) before ``u`` to :data:`SAME_WORD_S` after its end."""
        starts = self._starts.get(channel, [])
        lo = bisect.bisect_left(starts, u.start - max(self._longest.get(channel, 0.0), SAME_WORD_S))
        hi = bisect.bisect_right(starts, u.end + SAME_WORD_S)
        return self._units[channel][lo:hi] if starts else []


def _twin_groups(units: Sequence[Unit], by_channel: _ByChannel) -> list[list[int]]:
    """The copies of one word heard on several channels (:func:`_twins`), as lists of indices
    into ``units`` (``by_channel``: the same units by channel) with at most one copy per channel:
    pairs of twins joined closest in time first, never two units of one channel in a group (a
    channel that says "the" twice has two words)."""
    index = {id(u): i for i, u in enumerate(units)}
    pairs = [(abs(o.start - u.start), i, index[id(o)])
             for i, u in enumerate(units) for c in by_channel.channels if c > u.channel
             for o in by_channel.near(c, u) if _twins(o, u)]
    parent = list(range(len(units)))
    channels = [{u.channel} for u in units]

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for _, i, j in sorted(pairs):
        a, b = root(i), root(j)
        if a != b and not channels[a] & channels[b]:
            parent[b] = a
            channels[a] |= channels[b]
    groups: dict[int, list[int]] = {}
    for i in range(len(units)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def owners(units: Sequence[Unit], levels: np.ndarray) -> list[Optional[int]]:
    """For each unit, the channel it belongs to: its own, another (a word of that channel's voice
    that its own transcript missed), or None (dropped: bleed another channel has, a word heard
    louder elsewhere, or nothing heard). See the module's docstring. ``levels``:
    :func:`frame_db` of the channels."""
    return judge(units, levels)[0]


def judge(units: Sequence[Unit], levels: np.ndarray) -> tuple[list[Optional[int]], dict[int, Unit]]:
    """:func:`owners`, and for each kept copy of a word heard on several channels the copy whose
    time it takes (the most exactly timed one, by index)."""
    if levels.shape[0] < 2:
        return [u.channel for u in units], {}
    by_channel = _ByChannel(units)
    times: dict[int, Unit] = {}
    floors = noise_floors(levels)
    out: list[Optional[int]] = [None] * len(units)
    groups = _twin_groups(units, by_channel)
    for group in groups:  # one word heard on several channels: one copy kept
        if len(group) < 2:
            continue
        if not any(heard(levels, floors, units[k].start - PAD_S, units[k].end + PAD_S) for k in group):
            continue
        # judged where its most exactly timed copy says it is: the shortest (a copy stretched
        # over a pause or another's words is less exact), but not one squeezed into an instant
        # (the alignment found no audio for it: its time says nothing)
        timed = min(group, key=lambda k: (_timing_error(units[k]), units[k].channel))
        t = units[timed]
        owner = _loudest(levels, t.start - PAD_S, t.end + PAD_S)
        own = [k for k in group if units[k].channel == owner]
        if own:
            out[own[0]] = owner
            times[own[0]] = t
        elif not any(_covers(o, t) for o in by_channel.near(owner, t)):
            out[timed] = owner
            by_channel.add(replace(t, channel=owner))
    for group in groups:
        if len(group) > 1:
            continue
        u = units[group[0]]
        start, end = u.start - PAD_S, u.end + PAD_S
        if not heard(levels, floors, start, end):
            continue
        if dominance(levels, u.channel, start, end) < -BLEED_DB:
            louder = _loudest_other(levels, u.channel, start, end)
            if not any(_covers(o, u) or _twins(o, u) for o in by_channel.near(louder, u)):
                out[group[0]] = louder
                by_channel.add(replace(u, channel=louder))  # a later copy finds it there
            continue
        out[group[0]] = u.channel
    return out, times


def _timing_error(u: Unit) -> float:
    """How far a copy's time may be off: its length, or without measure where it is squeezed
    under :data:`SQUEEZED_S`."""
    length = u.end - u.start
    return length if length >= SQUEEZED_S else float("inf")


def _loudest(levels: np.ndarray, start: float, end: float) -> int:
    """The channel loudest over ``start``..``end`` (the median of the frames where anything is
    heard; at a tie, the lower channel)."""
    return int(np.argmax(np.median(_frames(levels, start, end), axis=1)))


def joined_segments(per_channel: Sequence[Sequence[Segment]], levels: np.ndarray) -> list[Segment]:
    """Every channel's attributed segments (speaker and, where timed, words set; channel by
    position) joined, each word (each segment without words) on the channel whose voice it is
    (:func:`owners`; ``levels``: :func:`frame_db` of the channels). The words of all channels are
    merged in time order, each channel's in its own order (its word times can step back where
    Whisper's windows meet: a running maximum orders them); a segment is a stretch of one
    channel's segment's words that no other channel's word interrupts, its text and times its
    words'. A word moved to another channel forms a segment there (with the words moved beside
    it) whose speaker is that channel's there (:func:`label_at`)."""
    units: list[Unit] = []
    for c, segments in enumerate(per_channel):
        for seg in segments:
            for piece in (seg.words or [seg]):
                units.append(Unit(c, piece.text, _time(piece.start, seg.start),
                                  _time(piece.end, _time(seg.end, seg.start))))
    decided, times = judge(units, levels)
    owner, index = iter(decided), iter(range(len(units)))
    streams: list[list[_Piece]] = []
    for c, segments in enumerate(per_channel):
        stream, clock = [], float("-inf")
        for i, seg in enumerate(segments):
            for w in (seg.words or [None]):
                to, k = next(owner), next(index)
                if w is not None and k in times:  # the time of its most exactly timed copy
                    w = replace(w, start=times[k].start, end=times[k].end)
                clock = max(clock, _time(seg.start if w is None else w.start, seg.start))
                if to is not None:
                    stream.append(_Piece(clock, c, len(stream), i, to, seg, w))
        streams.append(stream)
    out: list[Segment] = []
    run: list[_Piece] = []

    def close() -> None:
        if not run:
            return
        first = run[0]
        c, to, seg = first.channel, first.to, first.segment
        if first.word is None:  # a segment without words, whole
            out.append(replace(seg, channel=to, speaker=seg.speaker if to == c
                               else label_at(per_channel[to], to, _time(seg.start, 0.0))))
        else:
            words = [piece.word for piece in run]
            speaker = seg.speaker if to == c else label_at(per_channel[to], to, _time(words[0].start, 0.0))
            kept = [replace(w, channel=to, speaker=speaker if to != c else w.speaker) for w in words]
            out.append(replace(seg, text="".join(w.text for w in kept), start=kept[0].start,
                               end=max(w.end for w in kept), words=kept, channel=to, speaker=speaker))
        run.clear()

    for piece in heapq.merge(*streams, key=lambda piece: piece[:3]):
        if not run or not piece.continues(run[-1]):
            close()
        run.append(piece)
    close()
    return out


class _Piece(NamedTuple):
    """A kept word (or a segment without words) of :func:`joined_segments`, in merge order
    (``clock``: its channel's running maximum of start times, then ``channel`` and ``order``)."""

    clock: float
    channel: int  # the channel whose transcript has it
    order: int
    segment_index: int  # of its segment in that channel's transcript
    to: int  # the channel it belongs to
    segment: Segment
    word: Optional[Word]

    def continues(self, before: "_Piece") -> bool:
        """Whether it goes on ``before``'s segment: words both, of the same segment, to the same
        channel."""
        return (self.word is not None and before.word is not None and self.channel == before.channel
                and self.segment_index == before.segment_index and self.to == before.to)


def _time(value: Optional[float], default: Optional[float]) -> float:
    return float(value) if value is not None else float(default or 0.0)


def channel_order(count: int, segments: Sequence[Segment], diarized: bool) -> tuple[str, ...]:
    """The labels ``speaker_names`` names, in order: every channel's label in channel order (a
    silent channel's too), or (``diarize_channels``) each channel's speakers by first appearance,
    channel after channel."""
    if not diarized:
        return tuple(channel_label(c) for c in range(count))
    return speakers_by_channel(segments)


def label_at(segments: Sequence[Segment], channel: int, time: float) -> str:
    """The speaker of ``channel`` at ``time``: that of its own segment nearest in time (with
    ``diarize_channels`` a channel has several), else the channel's label."""
    timed = [s for s in segments if s.speaker is not None]
    if not timed:
        return channel_label(channel)

    def distance(s: Segment) -> float:
        start, end = _time(s.start, 0.0), _time(s.end, _time(s.start, 0.0))
        return max(0.0, start - time, time - end)

    return min(timed, key=distance).speaker


def silent_channel_warning(channel: int) -> str:
    return f"channel {channel} is silent: it has no words"


def only_bleed_warning(channel: int) -> str:
    return (f"channel {channel} has no words of its own: everything it picked up was louder on "
            "another channel (another person's voice bleeding into its microphone)")


__all__ = ["ABOVE_FLOOR_DB", "BLEED_DB", "SILENT_DB", "Unit", "channel_label", "channel_order",
           "channel_speaker_label", "heard", "noise_floors", "dominance", "frame_db", "frame_energy",
           "joined_segments", "judge", "only_bleed_warning", "label_at", "owners",
           "silent_channel_warning", "silent_channels"]
