"""Known-speaker naming (pure logic): cosine matching, one-to-one, threshold."""

import math

import pytest

from speaker_asr.attribution.naming import Match, cosine, match_speakers, name_turns
from speaker_asr.types import Turn


def test_cosine_is_scale_free_and_refuses_empty_or_mismatched_vectors():
    assert cosine([1, 0], [3, 0]) == pytest.approx(1.0)
    assert cosine([1, 0], [0, 2]) == pytest.approx(0.0)
    assert cosine([1, 1], [-1, -1]) == pytest.approx(-1.0)
    assert cosine([0, 0], [1, 0]) is None
    assert cosine([math.nan, 1], [1, 0]) is None
    with pytest.raises(ValueError, match="different sizes"):
        cosine([1, 0, 0], [1, 0])


def test_each_name_goes_to_its_closest_speaker_one_to_one():
    speakers = {"SPEAKER_00": [1.0, 0.1, 0.0], "SPEAKER_01": [0.0, 1.0, 0.1], "SPEAKER_02": [0.1, 0.0, 1.0]}
    refs = {"Bob": [0.05, 0.9, 0.0], "Alice": [0.9, 0.0, 0.1]}
    got = match_speakers(speakers, refs, threshold=0.5)
    assert [(m.name, m.speaker) for m in got] == [("Bob", "SPEAKER_01"), ("Alice", "SPEAKER_00")]
    assert all(m.similarity > 0.9 for m in got)


def test_the_assignment_maximises_total_similarity_not_greedy_order():
    """Greedy (best pair first) gives A to S0 (0.95) and leaves B unnamed (0.24 to S1, below
    the threshold); the best one-to-one assignment names both: B -> S0 (0.90), A -> S1 (0.85)."""
    at = lambda angle: [math.cos(angle), math.sin(angle)]  # noqa: E731
    alpha, beta = math.acos(0.95), -math.acos(0.9)
    phi = alpha + math.acos(0.85)
    speakers, refs = {"S0": at(0.0), "S1": at(phi)}, {"A": at(alpha), "B": at(beta)}
    assert cosine(at(phi), at(beta)) < 0.3
    got = match_speakers(speakers, refs, threshold=0.3)
    assert {m.name: m.speaker for m in got} == {"A": "S1", "B": "S0"}
    assert [m.similarity for m in got] == [pytest.approx(0.85), pytest.approx(0.9)]


def test_a_voice_below_the_threshold_names_nobody_and_reports_how_close_it_came():
    speakers = {"SPEAKER_00": [1.0, 0.0], "SPEAKER_01": [0.0, 1.0]}
    stranger = [-1.0, 0.2]
    got = match_speakers(speakers, {"Carol": stranger, "Dan": [0.1, 1.0]}, threshold=0.6)
    carol, dan = got
    assert carol == Match("Carol", None, pytest.approx(cosine(stranger, [0.0, 1.0])), "SPEAKER_01")
    assert dan.speaker == "SPEAKER_01"
    # two names for one voice: only the closer one names it
    got = match_speakers({"SPEAKER_00": [1.0, 0.0]}, {"A": [1.0, 0.1], "B": [1.0, 0.3]}, 0.5)
    assert [(m.name, m.speaker) for m in got] == [("A", "SPEAKER_00"), ("B", None)]
    assert got[1].closest == "SPEAKER_00"


def test_speakers_without_a_voice_are_skipped_and_ties_are_deterministic():
    got = match_speakers({"SPEAKER_01": None, "SPEAKER_00": [1.0, 0.0]}, {"A": [1.0, 0.0]}, 0.5)
    assert got == [Match("A", "SPEAKER_00", pytest.approx(1.0))]
    got = match_speakers({"SPEAKER_01": None}, {"A": [1.0, 0.0]}, 0.5)
    assert got == [Match("A", None, None)]
    tie = match_speakers({"SPEAKER_01": [1.0, 0.0], "SPEAKER_00": [1.0, 0.0]}, {"A": [1.0, 0.0]}, 0.5)
    assert tie[0].speaker in ("SPEAKER_00", "SPEAKER_01")
    assert all(match_speakers({"SPEAKER_01": [1.0, 0.0], "SPEAKER_00": [1.0, 0.0]}, {"A": [1.0, 0.0]}, 0.5)
               == tie for _ in range(5))


def test_name_turns_renames_only_matched_speakers():
    turns = [Turn(0, 1, "SPEAKER_00"), Turn(1, 2, "SPEAKER_01"), Turn(2, 3, "SPEAKER_00")]
    out = name_turns(turns, [Match("Alice", "SPEAKER_00", 0.9), Match("Carol", None, 0.1)])
    assert [t.speaker for t in out] == ["Alice", "SPEAKER_01", "Alice"]
    assert [(t.start, t.end) for t in out] == [(0, 1), (1, 2), (2, 3)]
