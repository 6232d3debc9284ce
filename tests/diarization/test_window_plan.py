"""speaker_asr/diarization/window_plan.py: which windows are embedded, which copy a neighbour."""

from __future__ import annotations

import numpy as np

from speaker_asr.diarization.window_plan import plan_windows

FRAMES = 100  # 10 frames per 1-s step, 10-s windows


def _masks(timeline: dict[str, list[tuple[int, int]]], windows: int, order=None) -> np.ndarray:
    """Binarized segmentations of a recording at 10 frames a second: ``timeline`` maps a speaker to
    its (start, end) seconds; each window's local slots follow ``order`` (default: first heard)."""
    seconds = windows + 10
    frames = np.zeros((len(timeline), seconds * 10), dtype=np.float32)
    for k, spans in enumerate(timeline.values()):
        for start, end in spans:
            frames[k, start * 10:end * 10] = 1
    masks = np.zeros((windows, FRAMES, 3), dtype=np.float32)
    for c in range(windows):
        part = frames[:, c * 10:c * 10 + FRAMES]
        heard = [k for k in np.argsort([np.argmax(p) if p.any() else 1e9 for p in part]) if part[k].any()]
        if order is not None:
            heard = order(c, heard)
        for slot, k in enumerate(heard[:3]):
            masks[c, :, slot] = part[k]
    return masks


def test_every_stride_th_window_and_the_last_are_embedded():
    masks = _masks({"A": [(0, 40)]}, windows=31)
    plan = plan_windows(masks, frames_per_step=10, stride=3)
    assert np.flatnonzero(plan.embed).tolist() == list(range(0, 31, 3))  # 30 is the last
    # one speaker talking throughout: every other window copies its nearest embedded neighbour
    for c in range(31):
        if not plan.embed[c]:
            e, s = plan.source[c, 0]
            assert abs(e - c) <= 1 and plan.embed[e] and s == 0
            assert (plan.source[c, 1:] == -1).all()


def test_a_speaker_copies_the_same_speaker_even_in_another_slot():
    # B is heard first in windows 0-5 but A first later: the local slots swap between windows
    masks = _masks({"A": [(0, 60)], "B": [(0, 8), (12, 60)]}, windows=30,
                   order=lambda c, heard: heard[::-1] if c % 2 else heard)
    plan = plan_windows(masks, frames_per_step=10, stride=3)
    for c in np.flatnonzero(~plan.embed):
        for s in range(2):
            e, t = plan.source[c, s]
            assert np.array_equal(masks[c, 10 * abs(e - c):, s] if e > c else masks[c, :FRAMES - 10 * abs(e - c), s],
                                  masks[e, :FRAMES - 10 * abs(e - c), t] if e > c else masks[e, 10 * abs(e - c):, t])


def test_a_speaker_heard_only_where_windows_do_not_overlap_gets_its_own_embedding():
    # C speaks only in the last second of window 1 (second 10): window 0 never hears it and
    # window 3 covers seconds 3-12 -> C is there, but that is not where window 1 ends; it is
    # window 1's own speech at its edge: copied only if its activity lies in shared audio
    masks = _masks({"A": [(0, 60)], "C": [(10, 11)]}, windows=12)
    plan = plan_windows(masks, frames_per_step=10, stride=3)
    # window 1 (seconds 1-11) hears C at its last second; window 0 (0-10) does not; window 3
    # (3-13) does, and that second is shared with window 1: C copies window 3's
    e, s = plan.source[1, 1]
    assert e == 3 and masks[3, 70:80, s].all()
    # a speaker no embedded neighbour hears: its window is embedded itself
    masks = _masks({"A": [(0, 60)]}, windows=12)
    masks[4, :5, 1] = 1  # a blip in window 4's first half second: window 3 has it at 1.0-1.5 s
    masks[3, :, 1] = 0  # ... but hears no second speaker, and window 6 starts after it
    plan = plan_windows(masks, frames_per_step=10, stride=3)
    assert plan.embed[4] and (plan.source[4] == -1).all()


def test_copy_into_fills_the_windows_in_between():
    masks = _masks({"A": [(0, 40)], "B": [(0, 40)]}, windows=10)
    plan = plan_windows(masks, frames_per_step=10, stride=3)
    embeddings = np.full((10, 3, 4), np.nan)
    for c in np.flatnonzero(plan.embed):
        embeddings[c, 0], embeddings[c, 1] = c, 100 + c
    plan.copy_into(embeddings)
    assert not np.isnan(embeddings[:, :2]).any() and np.isnan(embeddings[:, 2]).all()
    assert all(embeddings[c, 0, 0] < 100 <= embeddings[c, 1, 0] for c in range(10))
