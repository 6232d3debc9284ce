"""An item's words attributed to its own speakers, and those given the session's labels
(speaker_asr/live/segment_events.py), on hand-made transcripts and diarizations."""

from __future__ import annotations

from speaker_asr.live.segment_events import item_speakers, turns_by_diarization
from speaker_asr.live.online_labels import OnlineSpeakers
from speaker_asr.types import Diarization, Segment, Transcript, Turn, Word


def transcript() -> Transcript:
    words = [Word(" Hello", 0.1, 0.5), Word(" there.", 0.6, 1.0), Word(" Hi,", 1.6, 1.9),
             Word(" how", 2.0, 2.2), Word(" are", 2.2, 2.4), Word(" you?", 2.4, 2.8)]
    text = "".join(w.text for w in words).strip()
    return Transcript(text, [Segment(text, 0.0, 2.8)], "en", words)


def test_an_items_words_go_to_its_own_speakers_by_time_with_their_seconds_alone():
    turns = [Turn(0.0, 1.2, "SPEAKER_00"), Turn(1.4, 3.0, "SPEAKER_01")]
    found = Diarization(turns, turns, {"SPEAKER_00": [1.0, 0.0], "SPEAKER_01": [0.0, 1.0]})
    speakers = item_speakers(found, transcript(), 3.0)
    assert [(t.speaker, t.text.strip()) for t in speakers.turns] == [
        ("SPEAKER_00", "Hello there."), ("SPEAKER_01", "Hi, how are you?")]
    assert speakers.seconds == {"SPEAKER_00": 1.2, "SPEAKER_01": 1.6}
    assert speakers.voice["SPEAKER_01"] == [0.0, 1.0]


def test_nothing_to_attribute_when_the_diarization_heard_nobody_or_failed():
    assert item_speakers(Diarization(), transcript(), 3.0) is None
    assert item_speakers(Diarization(error="RuntimeError"), transcript(), 3.0) is None
    turns = [Turn(0.0, 3.0, "SPEAKER_00")]
    assert item_speakers(Diarization(turns, turns, embedding_error="RuntimeError"), transcript(), 3.0) is None
    assert item_speakers(None, transcript(), 3.0) is None
    assert item_speakers(Diarization(turns, turns), None, 3.0) is None


def test_two_voices_of_an_item_get_two_session_speakers_and_a_voice_too_short_the_main_ones():
    session = OnlineSpeakers(threshold=0.5)
    turns = [Turn(0.0, 1.2, "SPEAKER_00"), Turn(1.4, 3.0, "SPEAKER_01")]
    found = item_speakers(Diarization(turns, turns, {"SPEAKER_00": [1.0, 0.0], "SPEAKER_01": [0.0, 1.0]}),
                          transcript(), 3.0)
    labelled = turns_by_diarization(session, found)
    assert sorted(t.speaker for t in labelled) == ["SPEAKER_00", "SPEAKER_01"]
    # the next item: one voice of 0.4 s (too short to decide by) beside the second voice
    short = [Turn(0.0, 0.4, "SPEAKER_00"), Turn(0.5, 3.0, "SPEAKER_01")]
    found = item_speakers(Diarization(short, short, {"SPEAKER_00": None, "SPEAKER_01": [0.0, 1.0]}),
                          transcript(), 3.0)
    assert {t.speaker for t in turns_by_diarization(session, found)} == {labelled[1].speaker}


def test_no_turns_when_no_voice_can_be_decided_at_the_sessions_start():
    """The session's first item, every voice without a vector: nobody can be named, and the
    caller falls back on the whole item's voice (speaker_asr/live/item_diarization.py)."""
    turns = [Turn(0.0, 3.0, "SPEAKER_00")]
    found = item_speakers(Diarization(turns, turns, {"SPEAKER_00": None}), transcript(), 3.0)
    assert turns_by_diarization(OnlineSpeakers(threshold=0.5), found) == []
