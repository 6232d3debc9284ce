"""The ASR's transcript + the diarization -> the Result (attribution/response.py), on hand-made
words and turns: speakers per word, segments split at speaker changes, who talks over whom."""

from speaker_asr.attribution.response import attribute
from speaker_asr.attribution.speakers import cross_talk
from speaker_asr.types import Diarization, Segment, Transcript, Turn, Word

# A talks 0-2 s, B 1-3 s: both at once from 1 to 2 s; one at a time, A hands over at 1.5 s
TURNS = [Turn(0.0, 2.0, "A"), Turn(1.0, 3.0, "B")]
EXCLUSIVE = [Turn(0.0, 1.5, "A"), Turn(1.5, 3.0, "B")]
WORDS = [Word(" one", 0.0, 0.5), Word(" two", 0.6, 1.0), Word(" three", 1.1, 1.4),
         Word(" four", 1.6, 1.9), Word(" five", 2.2, 2.8)]
TRANSCRIPT = Transcript(" one two three four five", [Segment(" one two three four five", 0.0, 3.0)],
                        "en", WORDS)


def test_cross_talk_names_the_other_speakers_covering_half_a_word():
    attributed = [Word(w.text, w.start, w.end, s) for w, s in zip(WORDS, "AAABB")]
    assert cross_talk(attributed, TURNS) == [[], [], ["B"], ["A"], []]
    # half of the word is enough; its own speaker never counts; no turns, nobody
    assert cross_talk([Word(" x", 0.5, 1.5, "A"), Word(" y", 0.9, 1.5, "B")], TURNS) == [["B"], ["A"]]
    assert cross_talk(attributed, []) == [[]] * 5


def test_words_get_their_speaker_and_who_talks_over_them():
    result = attribute(TRANSCRIPT, 3.0, Diarization(TURNS, EXCLUSIVE), with_words=True)
    assert [(s.text, s.speaker) for s in result.segments] == [(" one two three", "A"),
                                                              (" four five", "B")]
    words = [w for s in result.segments for w in s.words]
    assert [(w.speaker, w.overlap) for w in words] == [("A", []), ("A", []), ("A", ["B"]),
                                                       ("B", ["A"]), ("B", [])]
    assert [(t.speaker, t.text, t.start, t.end) for t in result.speaker_turns] == [
        ("A", "one two three", 0.0, 1.4), ("B", "four five", 1.6, 2.8)]
    json_words = [w for c in result.to_json()["chunks"] for w in c["words"]]
    assert json_words[2] == {"word": " three", "start": 1.1, "end": 1.4, "speaker": "A",
                             "overlap": ["B"]}
    assert "overlap" not in json_words[0]
    # without word timestamps asked for the words are not in the result, nor their overlaps
    plain = attribute(TRANSCRIPT, 3.0, Diarization(TURNS, EXCLUSIVE))
    assert not plain.with_words and all(s.words == [] for s in plain.segments)
    assert [s.speaker for s in plain.segments] == ["A", "B"]


def test_without_diarization_nobody_speaks_and_nobody_overlaps():
    result = attribute(TRANSCRIPT, 3.0, with_words=True)
    assert not result.diarized and result.speaker_turns == []
    assert [s.text for s in result.segments] == [" one two three four five"]
    assert all(w.speaker is None and w.overlap == [] for w in result.segments[0].words)
    assert "speaker" not in result.to_json()["chunks"][0]


def test_a_speaker_the_sentences_voices_make_has_a_label_of_its_own_and_a_voice():
    """The diarization found SPEAKER_00 (all the words) and SPEAKER_01 (no words). Two of
    SPEAKER_00's six sentences sound like another person: they become SPEAKER_02 -- not SPEAKER_01,
    whose name and voice would follow -- and SPEAKER_02's voice is returned beside the others."""
    import numpy as np

    from speaker_asr.attribution.response import attribute_with_voices

    words, chunks = [], []
    for k, start in enumerate(range(0, 30, 5)):
        sentence = [Word(" w" if i < 3 else " w.", start + 0.4 * i, start + 0.4 * (i + 1)) for i in range(4)]
        words += sentence
        chunks.append(Segment("".join(w.text for w in sentence), start, start + 1.6))
    transcript = Transcript("".join(c.text for c in chunks), chunks, "en", words)
    turns = [Turn(0.0, 30.0, "SPEAKER_00"), Turn(30.0, 31.0, "SPEAKER_01")]
    voices = {"SPEAKER_00": [1.0, 0.0, 0.0], "SPEAKER_01": [0.0, 0.0, 1.0]}

    def embed(spans):
        return [np.array([0.0, 1.0, 0.0]) if int(a) in (5, 15) else np.array([1.0, 0.0, 0.0]) for a, _ in spans]

    result, found = attribute_with_voices(transcript, 31.0, Diarization(turns, turns, voices), embed=embed)
    assert {s.speaker for s in result.segments} == {"SPEAKER_00", "SPEAKER_02"}
    assert found["SPEAKER_01"] == voices["SPEAKER_01"] and found["SPEAKER_00"] == voices["SPEAKER_00"]
    assert found["SPEAKER_02"] == [0.0, 1.0, 0.0]
