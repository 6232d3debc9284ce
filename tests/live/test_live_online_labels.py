"""Online speaker labels (speaker_asr/live/online_labels.py) on hand-made 2-D and 3-D voices: labels
in order of first appearance and stable for a long session, returning speakers, the cap, known
names, short stretches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speaker_asr.live.online_labels import Assignment, OnlineSpeakers, unit

A, B, C = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]


def at(angle_deg: float) -> list[float]:
    """A 2-D voice at an angle: two voices ``d`` degrees apart have cosine ``cos(d)``."""
    r = math.radians(angle_deg)
    return [math.cos(r), math.sin(r)]


def at3(angle_deg: float) -> list[float]:
    """A 3-D voice in A and B's plane, ``angle_deg`` from A (B is at 90)."""
    return at(angle_deg) + [0.0]


def labels(speakers: OnlineSpeakers, voices, duration: float = 2.0) -> list:
    return [speakers.assign(v, duration).speaker for v in voices]


def test_unit_vectors_and_unusable_ones():
    assert np.allclose(unit([3.0, 4.0]), [0.6, 0.8])
    assert unit([0.0, 0.0]) is None and unit([math.nan, 1.0]) is None and unit(None) is None and unit([]) is None


def test_new_voices_open_speakers_in_order_of_first_appearance():
    speakers = OnlineSpeakers(threshold=0.7)
    first = speakers.assign(B, 2.0)
    assert first == Assignment("SPEAKER_00", None, new=True, by_voice=True)
    assert labels(speakers, [A, B, C, A]) == ["SPEAKER_01", "SPEAKER_00", "SPEAKER_02", "SPEAKER_01"]
    assert speakers.labels == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_02"]


def test_labels_stay_stable_over_a_long_noisy_session():
    """300 stretches of three speakers taking turns at random, each voice a noisy copy of its
    speaker's: every stretch gets its speaker's first label, and no fourth speaker opens."""
    rng = np.random.default_rng(7)
    truth = [A, B, C]
    speakers = OnlineSpeakers(threshold=0.6)
    first_label: dict[int, str] = {}
    for _ in range(300):
        who = int(rng.integers(3))
        voice = np.array(truth[who]) + rng.normal(0.0, 0.15, 3)
        got = speakers.assign(voice, float(rng.uniform(1.0, 6.0))).speaker
        assert first_label.setdefault(who, got) == got
    assert sorted(first_label.values()) == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_02"]
    assert len(speakers.labels) == 3
    # the centroids settled near the true voices
    for who, label in first_label.items():
        assert speakers.centroid(label) @ np.array(truth[who]) > 0.98


def test_a_speaker_who_returns_after_a_long_absence_keeps_its_label():
    speakers = OnlineSpeakers(threshold=0.8)
    assert labels(speakers, [at(0), at(90)]) == ["SPEAKER_00", "SPEAKER_01"]
    for i in range(100):  # SPEAKER_01 talks for a long time, drifting a little
        assert speakers.assign(at(90 + 5 * math.sin(i)), 3.0).speaker == "SPEAKER_01"
    back = speakers.assign(at(3), 2.0)
    assert back.speaker == "SPEAKER_00" and back.similarity == pytest.approx(math.cos(math.radians(3)))


def test_the_centroid_is_a_running_mean_weighted_by_seconds():
    speakers = OnlineSpeakers(threshold=0.5)
    speakers.assign(at(0), 1.0)
    speakers.assign(at(30), 3.0)  # cos 30 = 0.87: joins
    expected = unit(np.array(at(0)) * 1.0 + np.array(at(30)) * 3.0)
    assert np.allclose(speakers.centroid("SPEAKER_00"), expected)
    assert speakers.labels == ["SPEAKER_00"]
    # the similarity reported is to the centroid before this stretch moved it
    got = speakers.assign([3.0, 0.0], 2.0)  # not unit length: scaled first
    assert got.similarity == pytest.approx(float(expected @ np.array(at(0))))


def test_the_threshold_decides_join_or_open():
    just_in = OnlineSpeakers(threshold=math.cos(math.radians(40)) - 1e-9)
    assert labels(just_in, [at(0), at(40)]) == ["SPEAKER_00", "SPEAKER_00"]
    just_out = OnlineSpeakers(threshold=math.cos(math.radians(40)) + 1e-9)
    assert labels(just_out, [at(0), at(40)]) == ["SPEAKER_00", "SPEAKER_01"]


def test_at_the_cap_a_new_voice_takes_the_nearest_label_and_moves_no_centroid():
    speakers = OnlineSpeakers(threshold=0.9, max_speakers=2)
    assert labels(speakers, [at(0), at(90)]) == ["SPEAKER_00", "SPEAKER_01"]
    before = speakers.centroid("SPEAKER_01")
    third = speakers.assign(at(60), 5.0)  # far from both (cos 60 = 0.5, cos 30 = 0.87 < 0.9)
    assert third == Assignment("SPEAKER_01", pytest.approx(math.cos(math.radians(30))), by_voice=True)
    assert np.allclose(speakers.centroid("SPEAKER_01"), before)
    assert speakers.labels == ["SPEAKER_00", "SPEAKER_01"]


def test_ties_go_to_the_speaker_first_in_order():
    speakers = OnlineSpeakers(threshold=0.5)
    labels(speakers, [at(0), at(90)])  # two speakers
    assert speakers.assign(at(45), 2.0).speaker == "SPEAKER_00"  # cos 45 to both


def test_known_speakers_keep_their_names_and_unnamed_ones_are_numbered_apart():
    speakers = OnlineSpeakers(threshold=0.8, known={"Alice": [2.0, 0.0, 0.0], "Bob": B})
    assert labels(speakers, [C, [0.95, 0.1, 0.0], [0.0, 0.9, 0.2], C]) == \
        ["SPEAKER_00", "Alice", "Bob", "SPEAKER_00"]
    assert speakers.labels == ["SPEAKER_00", "Alice", "Bob"]
    # the reference counts as KNOWN_WEIGHT_S seconds: the session's speech moves it gradually
    moved = speakers.centroid("Alice")
    assert moved @ unit(A) > 0.999 and not np.allclose(moved, unit(A))


def test_max_speakers_keeps_places_for_the_known_speakers():
    speakers = OnlineSpeakers(threshold=0.9, max_speakers=2, known={"Alice": A})
    # one unnamed place only; the third voice is nearer Alice's reference than SPEAKER_00, but
    # below the threshold it is not given her name: it takes the nearest speaker heard
    assert labels(speakers, [B, [0.6, 0.3, 0.74]]) == ["SPEAKER_00", "SPEAKER_00"]
    assert speakers.assign(A, 2.0).speaker == "Alice"
    assert speakers.labels == ["SPEAKER_00", "Alice"]
    # only known places: a voice that matches none takes the nearest known speaker
    only_known = OnlineSpeakers(threshold=0.9, max_speakers=2, known={"Alice": A, "Bob": B})
    assert only_known.assign([0.3, 0.6, 0.74], 2.0) == Assignment(
        "Bob", pytest.approx(0.6 / np.linalg.norm([0.3, 0.6, 0.74])), by_voice=True)
    with pytest.raises(ValueError, match="at least the 2 known speakers"):
        OnlineSpeakers(threshold=0.5, max_speakers=1, known={"A": A, "B": B})


def test_short_stretches_take_the_previous_speaker_and_move_nothing():
    speakers = OnlineSpeakers(threshold=0.8, min_duration_s=1.0)
    assert not speakers.needs_embedding(0.4) and speakers.needs_embedding(1.0)
    assert speakers.assign(None, 0.4) == Assignment(None)  # nobody heard yet
    speakers.assign(A, 2.0)
    speakers.assign(B, 2.0)
    before = speakers.centroid("SPEAKER_01")
    short = speakers.assign(A, 0.5)  # A's voice, but too short to tell: the previous speaker
    assert short == Assignment("SPEAKER_01", None, new=False, by_voice=False)
    assert np.allclose(speakers.centroid("SPEAKER_01"), before)
    # a long stretch without a usable vector is the same
    assert speakers.assign([0.0, 0.0, 0.0], 3.0).speaker == "SPEAKER_01"
    assert speakers.assign(None, 3.0).by_voice is False


def test_known_speakers_added_later_and_mistakes():
    speakers = OnlineSpeakers(threshold=0.8, max_speakers=3)
    assert speakers.assign(A, 2.0).speaker == "SPEAKER_00"
    speakers.add_known("Carol", C)
    assert speakers.assign([0.0, 0.1, 1.0], 2.0).speaker == "Carol"
    with pytest.raises(ValueError, match="already in use"):
        speakers.add_known("Carol", B)
    with pytest.raises(ValueError, match="empty or not finite"):
        speakers.add_known("Dan", [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="3 dimensions, got 2"):
        speakers.assign([1.0, 0.0], 2.0)
    with pytest.raises(ValueError, match="cosine similarity"):
        OnlineSpeakers(threshold=1.5)
    with pytest.raises(KeyError):
        speakers.centroid("nobody")


def test_two_voices_of_one_utterance_never_join_one_speaker():
    """The utterance's own diarization told them apart: the longer voice takes the nearest
    speaker, the other one opens a new one though it is near that speaker too."""
    speakers = OnlineSpeakers(threshold=0.7)
    assert speakers.assign(at(0), 3.0).speaker == "SPEAKER_00"
    group = speakers.assign_group([(at(20), 1.5), (at(10), 4.0)])
    assert [a.speaker for a in group] == ["SPEAKER_01", "SPEAKER_00"]  # the order given
    assert group[1].by_voice and group[0].new
    # later, each voice goes back to its own speaker
    assert [a.speaker for a in speakers.assign_group([(at(10), 2.0), (at(22), 2.0)])] \
        == ["SPEAKER_00", "SPEAKER_01"]


def test_a_short_voice_of_an_utterance_joins_a_speaker_heard_or_the_main_voice():
    speakers = OnlineSpeakers(threshold=0.7)
    labels(speakers, [A, B])  # SPEAKER_00 = A, SPEAKER_01 = B
    before = speakers.centroid("SPEAKER_01")
    group = speakers.assign_group([(A, 5.0), (at3(95), 0.4), (C, 0.5)])
    # the short voice near B takes B (its centroid left alone); the one near nobody: the main voice
    assert [a.speaker for a in group] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_00"]
    assert np.allclose(speakers.centroid("SPEAKER_01"), before) and not group[1].by_voice
    assert speakers.labels == ["SPEAKER_00", "SPEAKER_01"] and speakers.previous == "SPEAKER_00"


def test_a_group_of_short_voices_at_the_session_start_opens_the_first_speaker():
    speakers = OnlineSpeakers(threshold=0.7)
    assert [a.speaker for a in speakers.assign_group([(None, 0.2)])] == [None]  # no voice at all: none
    assert [a.speaker for a in speakers.assign_group([(B, 0.3), (A, 0.6), (None, 0.2)])] \
        == ["SPEAKER_00"] * 3  # the longest opens the first speaker; short ones open none
    assert speakers.labels == ["SPEAKER_00"] and speakers.previous == "SPEAKER_00"


def test_a_group_at_the_cap_takes_the_nearest_speakers_left():
    speakers = OnlineSpeakers(threshold=0.9, max_speakers=2)
    labels(speakers, [A, B])
    group = speakers.assign_group([(at3(40), 3.0), (at3(30), 2.0)])  # both nearer A than B
    assert [a.speaker for a in group] == ["SPEAKER_00", "SPEAKER_01"]
