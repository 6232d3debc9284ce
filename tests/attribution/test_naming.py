"""Known-speaker naming (pure logic): cosine matching, one-to-one, threshold."""

import math

import pytest

from speaker_asr.attribution.naming import (Match, cosine, known_names, match_speakers,
                                            name_known_speakers)
from speaker_asr.result import KnownSpeaker, Result
from speaker_asr.types import Segment, Word


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


def diarized(*segments: Segment) -> Result:
    return Result("".join(s.text for s in segments), list(segments), "en",
                  segments[-1].end, "word", diarized=True, with_words=True)


def test_known_names_rename_only_matched_speakers():
    result = diarized(Segment(" a", 0, 1, "SPEAKER_00"), Segment(" b", 1, 2, "SPEAKER_01"),
                      Segment(" c", 2, 3, "SPEAKER_00"))
    out = result.renamed(known_names([Match("Alice", "SPEAKER_00", 0.9), Match("Carol", None, 0.1)]))
    assert [t.speaker for t in out.segments] == ["Alice", "SPEAKER_01", "Alice"]
    assert [(t.start, t.end) for t in out.segments] == [(0, 1), (1, 2), (2, 3)]


def test_name_known_speakers_names_the_matched_voice_everywhere():
    result = diarized(Segment(" Hi.", 0.0, 1.0, "SPEAKER_00", [Word(" Hi.", 0.0, 1.0, "SPEAKER_00")]),
                      Segment(" Yes.", 1.0, 2.0, "SPEAKER_01",
                              [Word(" Yes.", 1.0, 2.0, "SPEAKER_01", ["SPEAKER_00"])]))
    voices = {"SPEAKER_01": [0.0, 1.0], "SPEAKER_00": [1.0, 0.0]}
    references = {"Bob": [0.1, 0.9999999], "Carol": [-1.0, 0.0]}
    out = name_known_speakers(result, voices, references, 0.6, with_embeddings=True)
    assert [s.speaker for s in out.segments] == ["SPEAKER_00", "Bob"]
    assert [t.speaker for t in out.speaker_turns] == ["SPEAKER_00", "Bob"]
    assert out.segments[1].words[0].speaker == "Bob" and out.segments[1].words[0].overlap == ["SPEAKER_00"]
    assert out.known_speakers == [KnownSpeaker("Bob", "Bob", 0.995, [0.1, 1.0]),
                                  KnownSpeaker("Carol", None, 0.0, [-1.0, 0.0])]  # its best
    # keyed by the transcript's labels, in the order of the labels they had
    assert list(out.speaker_embeddings.items()) == [("SPEAKER_00", [1.0, 0.0]), ("Bob", [0.0, 1.0])]
    plain = name_known_speakers(result, voices, references, 0.6, with_embeddings=False)
    assert plain.speaker_embeddings is None and all(k.embedding is None for k in plain.known_speakers)
    # no voices (silence, or the embedding model failed): nobody is named
    assert name_known_speakers(result, {}, references, 0.6, True).known_speakers == [
        KnownSpeaker("Bob", None, None, [0.1, 1.0]), KnownSpeaker("Carol", None, None, [-1.0, 0.0])]
