"""The result record (speaker_asr/result.py) on hand-made results: the JSON edge both ways, the one
renaming, and a word's overlapping speakers in the formats that show words."""

import json
from dataclasses import replace

import pytest

from speaker_asr.errors import RequestError
from speaker_asr.formats import render, render_response
from speaker_asr.result import KnownSpeaker, Result, SpeakerTurn, speaker_turns
from speaker_asr.types import AssistDecision, Segment, Word

from helpers import GOLDEN


def two_speakers(with_words: bool = True) -> Result:
    """"Hello there." by SPEAKER_00 with "Yes." by SPEAKER_01 said over "there."."""
    segments = [Segment(" Hello there.", 0.0, 1.2, "SPEAKER_00",
                        [Word(" Hello", 0.0, 0.5, "SPEAKER_00"),
                         Word(" there.", 0.5, 1.2, "SPEAKER_00", ["SPEAKER_01"])]),
                Segment(" Yes.", 1.2, 1.6, "SPEAKER_01", [Word(" Yes.", 1.2, 1.6, "SPEAKER_01")])]
    if not with_words:
        segments = [Segment(s.text, s.start, s.end, s.speaker) for s in segments]
    return Result(" Hello there. Yes.", segments, "en", 1.6, "word",
                  diarized=True, with_words=with_words, warnings=["a warning"],
                  known_speakers=[KnownSpeaker("Bob", None, 0.12, [0.6, 0.8])],
                  speaker_embeddings={"SPEAKER_00": [1.0, 0.0], "SPEAKER_01": None},
                  assisted=AssistDecision(False, "auto: plain measured faster"))


def test_json_edge_round_trips_with_every_key_in_order():
    result = two_speakers()
    out = result.to_json()
    assert list(out) == ["text", "chunks", "speakers", "language", "duration", "alignment",
                         "assisted", "known_speakers", "speaker_embeddings", "warnings"]
    assert out["assisted"] == {"used": False, "reason": "auto: plain measured faster"}
    assert out["speakers"] == [{"speaker": "SPEAKER_00", "text": "Hello there.", "timestamp": [0.0, 1.2]},
                               {"speaker": "SPEAKER_01", "text": "Yes.", "timestamp": [1.2, 1.6]}]
    assert Result.from_json(json.loads(json.dumps(out))) == result
    golden = json.loads((GOLDEN / "response.json").read_text(encoding="utf-8"))
    assert Result.from_json(golden).to_json() == golden
    assert result.carried_json() == {"duration": 1.6, "warnings": ["a warning"],
                                     "assisted": out["assisted"],
                                     "known_speakers": out["known_speakers"],
                                     "speaker_embeddings": out["speaker_embeddings"]}


def test_assisted_is_read_back_and_older_responses_without_it_still_read():
    out = two_speakers().to_json()
    assert Result.from_json(out).assisted == AssistDecision(False, "auto: plain measured faster")
    older = {k: v for k, v in out.items() if k != "assisted"}  # before the field existed
    assert Result.from_json(older).assisted is None
    assert "assisted" not in Result.from_json(older).to_json()
    assert Result.from_json(older) == replace(two_speakers(), assisted=None)
    for bad in (None, True, "yes", {"reason": "requested"}, {"used": "true", "reason": "requested"}):
        assert Result.from_json({**out, "assisted": bad}).assisted is None, bad
    # a reason this server does not write (another release's) is kept as it is
    assert Result.from_json({**out, "assisted": {"used": True, "reason": "new"}}).assisted == \
        AssistDecision(True, "new")
    assert Result.from_json({**out, "assisted": {"used": True}}).assisted == AssistDecision(True, "")


def test_overlap_is_written_with_words_only_where_someone_talks_over():
    words = [w for c in render(two_speakers(), "json")["chunks"] for w in c["words"]]
    assert words == [{"word": " Hello", "start": 0.0, "end": 0.5, "speaker": "SPEAKER_00"},
                     {"word": " there.", "start": 0.5, "end": 1.2, "speaker": "SPEAKER_00",
                      "overlap": ["SPEAKER_01"]},
                     {"word": " Yes.", "start": 1.2, "end": 1.6, "speaker": "SPEAKER_01"}]
    verbose = render(two_speakers(), "verbose_json", speaker_names=["Ann", "Ben"])
    assert [w.get("overlap") for w in verbose["words"]] == [None, ["Ben"], None]
    assert "overlap" not in json.dumps(render(two_speakers(with_words=False), "json"))
    assert "overlap" not in json.dumps(render(two_speakers(with_words=False), "verbose_json"))


def test_one_renaming_reaches_segments_words_turns_and_voices():
    named = two_speakers().named(["Ann"])
    assert [s.speaker for s in named.segments] == ["Ann", "SPEAKER_01"]
    assert [w.speaker for w in named.segments[0].words] == ["Ann", "Ann"]
    assert [t.speaker for t in named.speaker_turns] == ["Ann", "SPEAKER_01"]
    assert list(named.speaker_embeddings) == ["Ann", "SPEAKER_01"]
    assert named.known_speakers == two_speakers().known_speakers
    assert two_speakers().named([]) == two_speakers()
    with pytest.raises(RequestError, match="also the label of a speaker"):
        two_speakers().named(["SPEAKER_01"])


def test_shifting_moves_every_segment_and_word_time_and_keeps_the_duration():
    moved = replace(two_speakers(), segments=[*two_speakers().segments,
                                              Segment(" Hm.", None, None, None, [Word(" Hm.", None, None)])]
                    ).shifted(10.25)
    assert [(s.start, s.end) for s in moved.segments] == [(10.25, 11.45), (11.45, 11.85), (None, None)]
    assert [(w.start, w.end) for w in moved.segments[0].words] == [(10.25, 10.75), (10.75, 11.45)]
    assert moved.segments[2].words[0].start is None
    assert [(t.start, t.end) for t in moved.speaker_turns][:2] == [(10.25, 11.45), (11.45, 11.85)]
    assert moved.duration == 1.6 and moved.text == two_speakers().text
    assert two_speakers().shifted(0.0) == two_speakers()


def test_every_format_answers_with_what_the_result_carries():
    for fmt in ("srt", "verbose_json"):
        out = render_response(two_speakers(), fmt, speaker_names=["Ann"])
        assert out["speaker_embeddings"] == {"Ann": [1.0, 0.0], "SPEAKER_01": None}
        assert out["warnings"] == ["a warning"] and out["duration"] == 1.6
        assert out["assisted"] == {"used": False, "reason": "auto: plain measured faster"}
    assert render_response(two_speakers(), "json") == two_speakers().to_json()


def test_speaker_turns_join_one_speakers_consecutive_segments():
    segments = [Segment(" a", 0.0, 1.0, "S0", [Word(" a", 0.0, 1.0, "S0")]),
                Segment(" b", 1.0, 3.0, "S0", [Word(" b", 1.0, 3.0, "S0")]),
                Segment(" c", 2.0, 2.5, "S1")]
    assert speaker_turns(segments) == [
        SpeakerTurn("S0", "a b", 0.0, 3.0, [Word(" a", 0.0, 1.0, "S0"), Word(" b", 1.0, 3.0, "S0")]),
        SpeakerTurn("S1", "c", 2.0, 2.5)]
