"""speaker_asr/diarization/window_plan.py: which pairs are embedded, which are pooled from neighbours."""

from __future__ import annotations

import numpy as np

from speaker_asr.diarization.window_plan import WindowPlan, embedding_masks, plan_windows

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


def _shared_frames(masks, c, e, s, t):
    """Window c's speaker s and window e's speaker t over the audio both windows cover."""
    shift = 10 * abs(e - c)
    if e > c:
        return masks[c, shift:, s], masks[e, :FRAMES - shift, t]
    return masks[c, :FRAMES - shift, s], masks[e, shift:, t]


def test_every_stride_th_window_and_the_last_are_embedded_the_others_pooled_from_both_sides():
    masks = _masks({"A": [(0, 40)]}, windows=28)
    plan = plan_windows(masks, frames_per_step=10, stride=5)
    assert np.flatnonzero(plan.own[:, 0]).tolist() == [0, 5, 10, 15, 20, 25, 27]  # 27 is the last
    assert not plan.own[:, 1:].any() and plan.windows.tolist() == [0, 5, 10, 15, 20, 25, 27]
    # one speaker talking throughout: window 1 pools windows 0 and 5, each weighted by the
    # speech they share with it (9 and 6 seconds of the 10 s it hears)
    assert plan.sources[1, 0].tolist() == [[0, 0], [5, 0]]
    assert plan.weights[1, 0].tolist() == [90, 60]
    assert plan.sources[26, 0].tolist() == [[25, 0], [27, 0]]
    assert (plan.weights[:, 1:] == 0).all() and (plan.sources[:, 1:] == -1).all()


def test_stride_one_embeds_every_active_pair_as_the_recipe_does():
    masks = _masks({"A": [(0, 20)], "B": [(5, 9), (14, 30)]}, windows=15)
    plan = plan_windows(masks, frames_per_step=10, stride=1)
    assert np.array_equal(plan.own, masks.sum(axis=1) > 0)
    assert (plan.weights == 0).all() and (plan.sources == -1).all()


def test_a_speaker_is_pooled_from_the_same_speaker_even_in_another_slot():
    # B is heard first in windows 0-5 but A first later: the local slots swap between windows
    masks = _masks({"A": [(0, 60)], "B": [(0, 8), (12, 60)]}, windows=30,
                   order=lambda c, heard: heard[::-1] if c % 2 else heard)
    plan = plan_windows(masks, frames_per_step=10, stride=5)
    pooled = 0
    for c, s in zip(*np.nonzero((plan.weights > 0).any(axis=2) & ~plan.own)):
        for (e, t), weight in zip(plan.sources[c, s], plan.weights[c, s]):
            if weight:
                mine, theirs = _shared_frames(masks, c, e, s, t)
                assert np.array_equal(mine, theirs) and weight == mine.sum()
                pooled += 1
    assert pooled > 40


def test_a_speaker_heard_only_where_windows_do_not_overlap_gets_its_own_embedding():
    # C speaks only in second 10: window 1 (seconds 1-11) hears it in its last second, window 0
    # (0-10) does not, window 5 (5-15) does, over audio it shares with window 1: C is pooled
    # from window 5 alone
    masks = _masks({"A": [(0, 60)], "C": [(10, 11)]}, windows=12)
    plan = plan_windows(masks, frames_per_step=10, stride=5)
    none, (e, s) = plan.sources[1, 1]
    assert e == 5 and masks[5, 50:60, s].all() and none.tolist() == [-1, -1]
    assert plan.weights[1, 1].tolist() == [0, 10] and not plan.own[1, 1]
    # a speaker neither embedded neighbour hears: that pair alone is embedded from its window
    masks = _masks({"A": [(0, 60)]}, windows=12)
    masks[4, :5, 1] = 1  # a blip in window 4's first half second (second 4.0-4.5) ...
    masks[0, :, 1] = masks[5, :, 1] = 0  # ... that windows 0 and 5 do not hear
    plan = plan_windows(masks, frames_per_step=10, stride=5)
    assert plan.own[4].tolist() == [False, True, False] and plan.weights[4, 0].tolist() == [60, 90]


def test_a_neighbour_pools_a_speaker_only_when_half_its_speech_is_in_their_shared_audio():
    # D speaks in seconds 14-16: window 6 (6-16) hears 2 s of it. Window 5 (5-15) shares seconds
    # 6-15 with it, where half of that is (1 s, heard by both): pooled, weighted 1 s; window 10
    # (10-20) shares all 2 s
    masks = _masks({"A": [(0, 60)], "D": [(14, 16)]}, windows=12)
    plan = plan_windows(masks, frames_per_step=10, stride=5)
    assert plan.weights[6, 1].tolist() == [10, 20] and not plan.own[6, 1]
    # D in seconds 14-17: window 7 (7-17) hears 3 s, of which window 5 shares only 1: not enough
    masks = _masks({"A": [(0, 60)], "D": [(14, 17)]}, windows=12)
    plan = plan_windows(masks, frames_per_step=10, stride=5)
    assert plan.weights[7, 1].tolist() == [0, 30] and not plan.own[7, 1]


def test_pooling_is_the_weighted_mean_of_unit_vectors_and_skips_nan_sources():
    own = np.zeros((3, 2), dtype=bool)
    own[0] = own[2] = True
    sources = np.full((3, 2, 2, 2), -1)
    weights = np.zeros((3, 2, 2))
    sources[1, 0] = [[0, 0], [2, 0]]
    weights[1, 0] = [3, 1]
    sources[1, 1] = [[0, 1], [2, 1]]
    weights[1, 1] = [1, 1]
    embeddings = np.full((3, 2, 2), np.nan, dtype=np.float32)
    embeddings[0, 0], embeddings[2, 0] = [2, 0], [0, 5]  # lengths differ: only directions count
    embeddings[2, 1] = [0, -1]  # window 0's speaker 1 came out NaN
    WindowPlan(own, sources, weights).pool_into(embeddings)
    # the direction of 3 x (1, 0) + 1 x (0, 1), the length of (3 x 2 + 1 x 5) / 4
    np.testing.assert_allclose(embeddings[1, 0], 2.75 * np.array([3, 1]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(embeddings[1, 1], [0, -1])
    embeddings[2, 1] = np.nan
    embeddings[1] = np.nan
    WindowPlan(own, sources, weights).pool_into(embeddings)
    assert np.isnan(embeddings[1, 1]).all() and np.isfinite(embeddings[1, 0]).all()


def test_embedding_masks_leave_out_overlap_unless_too_little_is_left():
    data = np.zeros((1, 10, 3), dtype=np.float32)
    data[0, :6, 0] = 1  # A: 6 frames, 2 of them under B
    data[0, 4:10, 1] = 1  # B: 6 frames, 2 under A
    data[0, 5:7, 2] = 1  # C: 2 frames, all under A or B
    masks = embedding_masks(data, exclude_overlap=True, min_num_frames=2)
    assert masks[0, :, 0].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]  # 4 clean frames > 2
    assert masks[0, :, 1].tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]  # 3 clean frames > 2
    assert masks[0, :, 2].tolist() == data[0, :, 2].tolist()  # none clean: all of its speech
    assert np.array_equal(embedding_masks(data, exclude_overlap=False, min_num_frames=2), data)
    data[0, 8, :] = np.nan  # a frame the stitching left empty counts as silence
    assert not np.isnan(embedding_masks(data, True, 2)).any()
