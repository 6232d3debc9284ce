"""Who speaks in one utterance, from the segmentation model's frame-level activity: the pure part
of a live session's speakers (numpy only, unit-tested with hand-made frames).

The segmentation model (pyannote's segmentation-3.0, the first step of the diarization pipeline)
says, for every frame of about 17 ms, which of up to three *local* speakers talk. Run once over
an utterance (:func:`speaker_asr.diarization.pipeline.frame_activity`), that is enough to tell its
speakers apart within it; their voices are then embedded and matched to the session's speakers
(speaker_asr/live/segment_events.py). Two questions are answered here:

* :func:`utterance_turns`: the utterance's speaker turns (local labels, overlap kept) and its
  exclusive turns (one speaker at a time, what the voices are embedded from) as a
  :class:`~speaker_asr.types.Diarization`, the file route's diarization record, so that the
  utterance's words are attributed to them exactly as a file's are.
* :func:`speaker_change`: whether a growing utterance has changed hands -- another person has
  held the floor alone for ``after_s`` after someone else spoke for ``before_s`` -- and where to
  cut it, so that a live item follows the speakers as a line of captions does.

A local speaker's activity is first smoothed (:func:`smoothed`): pauses shorter than
:data:`FILL_GAP_S` are filled and runs shorter than :data:`MIN_RUN_S` dropped, so that a breath
does not end a turn and a click does not make one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from speaker_asr.types import Diarization, Turn

FILL_GAP_S = 0.25  # a local speaker's pause shorter than this is filled
MIN_RUN_S = 0.12  # a run of activity shorter than this is dropped
# a growing utterance changes hands when a new person has held the floor alone this long ...
CHANGE_AFTER_S = 0.5
# ... after someone else spoke alone at least this long in it
CHANGE_BEFORE_S = 1.0
FLOOR_SHARE = 0.85  # "held the floor": the new speaker active in this share of those frames at least ...
OTHER_SHARE = 0.1  # ... and the one before in no more than this share of them,
MAX_OVERLAP_S = 0.5  # having stopped at most this long after the new speaker began


@dataclass(frozen=True)
class Activity:
    """Frame-level speaker activity: ``frames`` (frames x local speakers, bool: that speaker
    talks in that frame), each frame ``step`` seconds, frame ``i`` starting at ``i * step``."""

    frames: np.ndarray
    step: float

    @property
    def duration(self) -> float:
        return len(self.frames) * self.step

    def __post_init__(self):
        if self.frames.ndim != 2:
            raise ValueError(f"frames must be (frames, speakers), got shape {self.frames.shape}")
        if not self.step > 0:
            raise ValueError(f"step must be positive, got {self.step}")


def runs(active: np.ndarray) -> list[tuple[int, int]]:
    """The ``[start, end)`` frame spans where the 1-D bool array is true."""
    padded = np.concatenate([[False], np.asarray(active, bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b)) for a, b in zip(edges[0::2], edges[1::2])]


def smoothed(activity: Activity, fill_gap_s: float = FILL_GAP_S, min_run_s: float = MIN_RUN_S) -> np.ndarray:
    """Each local speaker's activity with pauses shorter than ``fill_gap_s`` filled, then runs
    shorter than ``min_run_s`` dropped."""
    out = np.asarray(activity.frames, bool).copy()
    gap, shortest = int(round(fill_gap_s / activity.step)), int(round(min_run_s / activity.step))
    for k in range(out.shape[1]):
        spans = runs(out[:, k])
        for (_, b), (a, _) in zip(spans, spans[1:]):
            if a - b < gap:
                out[b:a, k] = True
        for a, b in runs(out[:, k]):
            if b - a < shortest:
                out[a:b, k] = False
    return out


def utterance_turns(activity: Activity, label_prefix: str = "SPEAKER_") -> Diarization:
    """The utterance's speaker turns (each local speaker's smoothed runs; two people talking at
    once overlap) and exclusive turns (the frames where exactly one talks), times in seconds from
    the utterance's start, labelled ``SPEAKER_00``, ``SPEAKER_01``, ... in order of first
    exclusive speech (a speaker only ever heard over another comes after). Empty when nobody
    talks."""
    active = smoothed(activity)
    alone = active & (active.sum(axis=1, keepdims=True) == 1)
    firsts = []
    for k in range(active.shape[1]):
        solo, any_ = np.flatnonzero(alone[:, k]), np.flatnonzero(active[:, k])
        if len(any_):
            firsts.append((0 if len(solo) else 1, int(solo[0]) if len(solo) else int(any_[0]), k))
    labels = {k: f"{label_prefix}{i:02d}" for i, (_, _, k) in enumerate(sorted(firsts))}
    step = activity.step

    def turns_of(matrix: np.ndarray) -> list[Turn]:
        out = [Turn(round(a * step, 3), round(b * step, 3), labels[k])
               for k in labels for a, b in runs(matrix[:, k])]
        return sorted(out, key=lambda t: (t.start, t.end, t.speaker))

    return Diarization(turns_of(active), turns_of(alone))


def speaker_change(activity: Activity, after_s: float = CHANGE_AFTER_S,
                   before_s: float = CHANGE_BEFORE_S) -> Optional[float]:
    """Where a growing utterance changed hands (seconds from its start), or None. It has when
    the speaker of its last ``after_s`` held the floor through them (active in
    :data:`FLOOR_SHARE` of the frames) and is still talking at the end, and another speaker
    talked alone for at least ``before_s`` before that speaker's current run began and fell
    silent at most :data:`MAX_OVERLAP_S` after it began (active in at most :data:`OTHER_SHARE`
    of those last frames): a clear hand-over. The cut lies midway between the other's last speech before
    the run and the run's start: the words before it are the first person's item."""
    active = smoothed(activity)
    n, tail = len(active), int(round(after_s / activity.step))
    if tail < 1 or n < tail:
        return None
    share = active[n - tail:].mean(axis=0)
    holder = int(np.argmax(share))
    if share[holder] < FLOOR_SHARE:
        return None
    spans = runs(active[:, holder])
    if not spans or spans[-1][1] < n - 1:
        return None
    run_start = spans[-1][0]
    before = active[:run_start]
    alone = before & (before.sum(axis=1, keepdims=True) == 1)
    # the people who spoke before it and fell silent soon after it began (a third one's
    # backchannel while the new speaker talks does not hold the hand-over back; two people
    # talking over each other for long is no clear hand-over: the item's segments split it)
    overlap = int(round(MAX_OVERLAP_S / activity.step))
    spoke = [k for k in range(active.shape[1]) if k != holder and share[k] <= OTHER_SHARE
             and alone[:, k].sum() * activity.step >= before_s
             and runs(active[:, k])[-1][1] - run_start <= overlap]
    if not spoke:
        return None
    # the others' last speech before the run (right up to it when they overlapped at the hand-over)
    last_other = max(int(np.flatnonzero(before[:, k])[-1]) + 1 for k in spoke)
    cut = (last_other + run_start) / 2
    return round(cut * activity.step, 3) if cut > 0 else None
