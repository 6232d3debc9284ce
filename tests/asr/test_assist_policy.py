"""assisted="auto" for one-window audio picks the measured faster mode (assist_policy.py)."""

from speaker_asr.asr.assist_policy import AssistPolicy
from speaker_asr.types import (ASSIST_AUTO_ASSISTED_FASTER, ASSIST_AUTO_EXPLORING,
                               ASSIST_AUTO_LEARNING, ASSIST_AUTO_PLAIN_FASTER, ASSIST_REASONS)


def drive(policy, seconds_per_second, n, reasons=None):
    """n decisions, each followed by a timing from the given speeds (s per s of audio); each
    decision's reason appended to ``reasons``."""
    modes = []
    for _ in range(n):
        decision = policy.choose()
        assert decision.reason in ASSIST_REASONS
        assisted = decision.used
        policy.record(assisted, 10.0, 10.0 * seconds_per_second[assisted])
        modes.append(assisted)
        if reasons is not None:
            reasons.append((assisted, decision.reason))
    return modes


def test_learns_both_then_keeps_the_faster_and_still_explores():
    policy = AssistPolicy(min_samples=2, explore_every=10)
    reasons = []
    modes = drive(policy, {True: 0.5, False: 0.2}, 40, reasons)  # plain is faster here (CPU, weak drafts)
    assert modes[:4] == [True, False, True, False]  # learning: alternate
    assert {r for _, r in reasons[:4]} == {ASSIST_AUTO_LEARNING}
    # then each decision says why: plain measured faster, or the slower mode rechecked (the 10th, 20th...)
    assert reasons[4:9] == [(False, ASSIST_AUTO_PLAIN_FASTER)] * 5
    assert reasons[9] == (True, ASSIST_AUTO_EXPLORING)
    assert set(reasons[4:]) == {(False, ASSIST_AUTO_PLAIN_FASTER), (True, ASSIST_AUTO_EXPLORING)}
    steady = modes[4:]
    assert steady.count(False) >= 30 and 0 < steady.count(True) <= 4  # explores now and then
    snap = policy.snapshot()
    assert snap["plain"]["median_s_per_audio_s"] == 0.2 and snap["assisted"]["median_s_per_audio_s"] == 0.5


def test_prefers_assisted_when_it_is_faster_and_follows_a_change():
    policy = AssistPolicy(min_samples=2, window=4, explore_every=5)
    reasons = []
    modes = drive(policy, {True: 0.1, False: 0.3}, 20, reasons)
    assert modes[4:].count(True) >= 12
    assert set(reasons[4:]) == {(True, ASSIST_AUTO_ASSISTED_FASTER), (False, ASSIST_AUTO_EXPLORING)}
    # the machine changes: assisted becomes slow; exploration and the window notice it
    modes = drive(policy, {True: 0.9, False: 0.3}, 40)
    assert modes[-10:].count(False) >= 8


def test_requested_modes_count_and_bad_timings_are_ignored():
    policy = AssistPolicy(min_samples=1)
    policy.record(True, 5.0, 1.0)
    policy.record(False, 0.0, 1.0)  # no audio: ignored
    policy.record(False, 5.0, -1.0)  # clock went backwards: ignored
    assert policy.snapshot()["plain"]["timings"] == 0
    decision = policy.choose()
    assert (decision.used, decision.reason) == (False, ASSIST_AUTO_LEARNING)  # plain has fewer timings
