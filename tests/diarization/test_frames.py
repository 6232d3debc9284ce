"""Who speaks in one utterance from hand-made frame activity (speaker_asr/diarization/frames.py):
the live item's turns, and where a growing item changes hands."""

from __future__ import annotations

import numpy as np
import pytest

from speaker_asr.diarization.frames import (CHANGE_AFTER_S, Activity, smoothed, speaker_change,
                                            utterance_turns)

STEP = 0.02  # 20 ms frames: seconds * 50 frames


def activity(*spans: tuple[int, float, float], seconds: float, speakers: int = 3) -> Activity:
    """Frames where local speaker ``k`` talks from ``a`` to ``b`` seconds, for each (k, a, b)."""
    frames = np.zeros((int(round(seconds / STEP)), speakers), bool)
    for k, a, b in spans:
        frames[int(round(a / STEP)):int(round(b / STEP)), k] = True
    return Activity(frames, STEP)


def test_a_hand_over_is_found_once_the_new_speaker_held_the_floor_and_cut_between_them():
    # speaker 1 for 2 s, a 0.2 s pause, then speaker 2 for 0.7 s (still talking)
    a = activity((1, 0.0, 2.0), (2, 2.2, 2.9), seconds=2.9)
    assert speaker_change(a) == pytest.approx(2.1, abs=STEP)
    # one frame earlier into the new speaker's turn: not yet (they held it less than CHANGE_AFTER_S)
    early = activity((1, 0.0, 2.0), (2, 2.2, 2.2 + CHANGE_AFTER_S - 0.1), seconds=2.2 + CHANGE_AFTER_S - 0.1)
    assert speaker_change(early) is None


def test_no_change_for_one_speaker_a_backchannel_or_a_first_speaker_too_short():
    assert speaker_change(activity((0, 0.0, 5.0), seconds=5.0)) is None
    # someone says "yeah" over the speaker: they never hold the floor
    assert speaker_change(activity((0, 0.0, 5.0), (1, 2.0, 2.4), seconds=5.0)) is None
    # the speaker before the new one said less than a second: not a hand-over worth a new item
    assert speaker_change(activity((0, 0.0, 0.6), (1, 0.8, 2.5), seconds=2.5)) is None
    # the new speaker stopped before the end: the utterance's end (the VAD) will close the item
    assert speaker_change(activity((0, 0.0, 2.0), (1, 2.2, 3.0), seconds=3.5)) is None
    # two people at once at the end: nobody holds the floor alone
    assert speaker_change(activity((0, 0.0, 3.0), (1, 2.0, 3.0), seconds=3.0)) is None
    assert speaker_change(activity(seconds=3.0)) is None


def test_an_overlapping_hand_over_is_cut_where_the_new_turn_began():
    a = activity((0, 0.0, 2.5), (1, 2.3, 3.5), seconds=3.5)
    # the first speaker talked alone until 2.3 s, then both for 0.2 s: cut at the new turn's start
    assert speaker_change(a) == pytest.approx(2.3, abs=STEP)


def test_a_third_speaker_after_two_cuts_at_the_last_hand_over():
    a = activity((0, 0.0, 1.5), (1, 1.7, 3.0), (2, 3.2, 4.0), seconds=4.0)
    assert speaker_change(a) == pytest.approx(3.1, abs=STEP)


def test_short_pauses_are_filled_and_clicks_dropped():
    a = activity((0, 0.0, 1.0), (0, 1.1, 2.0), (1, 3.0, 3.04), seconds=4.0)
    s = smoothed(a)
    assert s[:, 0].sum() == int(2.0 / STEP)  # the 0.1 s pause filled
    assert not s[:, 1].any()  # 40 ms of activity is a click, not a turn


def test_utterance_turns_label_by_first_speech_and_keep_overlap_out_of_the_exclusive_turns():
    a = activity((2, 0.0, 2.0), (0, 1.5, 4.0), seconds=4.0)
    found = utterance_turns(a)
    assert [(t.speaker, t.start, t.end) for t in found.turns] == [("SPEAKER_00", 0.0, 2.0), ("SPEAKER_01", 1.5, 4.0)]
    assert [(t.speaker, t.start, t.end) for t in found.exclusive_turns] == [
        ("SPEAKER_00", 0.0, 1.5), ("SPEAKER_01", 2.0, 4.0)]
    assert utterance_turns(activity(seconds=1.0)).turns == []


def test_activity_is_checked():
    with pytest.raises(ValueError, match="frames must be"):
        Activity(np.zeros(5, bool), STEP)
    with pytest.raises(ValueError, match="step must be positive"):
        Activity(np.zeros((5, 3), bool), 0.0)


def test_a_third_persons_backchannel_does_not_hold_a_hand_over_back():
    # A speaks, falls silent, B takes over while C says "mm" over B: the hand-over from A stands
    a = activity((0, 0.0, 2.0), (1, 2.2, 3.0), (2, 2.6, 2.8), seconds=3.0)
    assert speaker_change(a) == pytest.approx(2.1, abs=STEP)
    # but A still talking over B is no hand-over
    assert speaker_change(activity((0, 0.0, 2.0), (0, 2.6, 2.8), (1, 2.2, 3.0), seconds=3.0)) is None


def test_two_people_talking_over_each_other_for_long_is_no_clear_hand_over():
    # the first speaker goes on for 1.5 s after the second began: no cut (segments split the item)
    assert speaker_change(activity((0, 0.0, 4.0), (1, 2.5, 5.0), seconds=5.0)) is None
    # a short overlap at the hand-over is one
    assert speaker_change(activity((0, 0.0, 2.8), (1, 2.5, 3.5), seconds=3.5)) == pytest.approx(2.5, abs=STEP)
