"""assisted="auto" for one-window audio picks the measured faster mode (assist_policy.py)."""

from speaker_asr.asr.assist_policy import AssistPolicy


def drive(policy, seconds_per_second, n):
    """n decisions, each followed by a timing from the given speeds (s per s of audio)."""
    modes = []
    for _ in range(n):
        assisted = policy.choose()
        policy.record(assisted, 10.0, 10.0 * seconds_per_second[assisted])
        modes.append(assisted)
    return modes


def test_learns_both_then_keeps_the_faster_and_still_explores():
    policy = AssistPolicy(min_samples=2, explore_every=10)
    modes = drive(policy, {True: 0.5, False: 0.2}, 40)  # plain is faster here (CPU, weak drafts)
    assert modes[:4] == [True, False, True, False]  # learning: alternate
    steady = modes[4:]
    assert steady.count(False) >= 30 and 0 < steady.count(True) <= 4  # explores now and then
    snap = policy.snapshot()
    assert snap["plain"]["median_s_per_audio_s"] == 0.2 and snap["assisted"]["median_s_per_audio_s"] == 0.5


def test_prefers_assisted_when_it_is_faster_and_follows_a_change():
    policy = AssistPolicy(min_samples=2, window=4, explore_every=5)
    modes = drive(policy, {True: 0.1, False: 0.3}, 20)
    assert modes[4:].count(True) >= 12
    # the machine changes: assisted becomes slow; exploration and the window notice it
    modes = drive(policy, {True: 0.9, False: 0.3}, 40)
    assert modes[-10:].count(False) >= 8


def test_requested_modes_count_and_bad_timings_are_ignored():
    policy = AssistPolicy(min_samples=1)
    policy.record(True, 5.0, 1.0)
    policy.record(False, 0.0, 1.0)  # no audio: ignored
    policy.record(False, 5.0, -1.0)  # clock went backwards: ignored
    assert policy.snapshot()["plain"]["timings"] == 0
    assert policy.choose() is False  # plain has fewer timings
