"""Text Whisper wrote with no audio under it (hallucination.py), on hand-made words."""

from speaker_asr.asr.hallucination import drop_hallucinations, rewound_runs, squeezed_runs
from speaker_asr.types import Segment, Word


def words(*spec):
    return [Word(t, s, e) for t, s, e in spec]


# whisper base on pyannote's sample: the real speech ends at 29.98 s, then 20 words repeat
# earlier sentences, every one timed 29.98-29.98 (shortened here)
TAIL = words((" in", 29.04, 29.18), (" New", 29.18, 29.24), (" Jersey", 29.24, 29.58),
             (" now.", 29.58, 29.98), (" Oh,", 29.98, 29.98), (" I", 29.98, 29.98),
             (" don't", 29.98, 29.98), (" hear", 29.98, 29.98), (" that.", 29.98, 29.98),
             (" I'm", 29.98, 29.98), (" Sheila.", 29.98, 29.98))
SEGMENTS = [Segment(" I don't hear that in New Jersey now.", 20.0, 23.0),
            Segment(" Oh, I don't hear that.", 23.0, 24.0), Segment(" I'm Sheila.", 24.0, 25.0)]
SPOKEN = words((" I", 28.5, 28.6), (" don't", 28.6, 28.8), (" hear", 28.8, 28.9), (" that", 28.9, 29.04))


def test_finds_runs_of_zero_length_words_only():
    assert squeezed_runs(TAIL) == [range(4, 11)]
    # short runs happen in real speech (a word squeezed between two others): kept
    assert squeezed_runs(words((" a", 1.0, 1.0), (" b", 1.0, 1.0), (" c", 1.0, 1.0), (" d", 1.0, 1.5))) == []
    # a word without times breaks a run; two separate runs are both found
    gap = words(*([(" x", 2.0, 2.0)] * 4), (" y", None, None), *([(" z", 3.0, 3.01)] * 5))
    assert squeezed_runs(gap) == [range(0, 4), range(5, 10)]
    assert squeezed_runs([]) == []


def test_drop_removes_the_run_from_words_segments_and_text():
    all_words = SPOKEN + TAIL
    cleaned = drop_hallucinations(SEGMENTS, all_words)
    assert cleaned.dropped == ["Oh, I don't hear that. I'm Sheila."]
    assert [w.text for w in cleaned.words] == [" I", " don't", " hear", " that", " in", " New", " Jersey", " now."]
    assert cleaned.text == " I don't hear that in New Jersey now."
    # the segments that held only dropped words are gone; the first keeps its times
    assert cleaned.segments == [Segment(" I don't hear that in New Jersey now.", 20.0, 23.0)]
    assert cleaned.text == "".join(w.text for w in cleaned.words) == "".join(s.text for s in cleaned.segments)


def test_nothing_to_drop_returns_none():
    assert drop_hallucinations(SEGMENTS[:1], SPOKEN + TAIL[:4]) is None


def test_a_run_inside_a_segment_keeps_the_rest_of_it():
    segs = [Segment(" one two three four five six seven", 0.0, 5.0)]
    ws = words((" one", 0.0, 0.5), (" two", 1.0, 1.0), (" three", 1.0, 1.0), (" four", 1.0, 1.0),
               (" five", 1.0, 1.0), (" six", 1.0, 1.5), (" seven", 1.5, 2.0))
    cleaned = drop_hallucinations(segs, ws)
    assert cleaned.segments == [Segment(" one six seven", 0.0, 5.0)]
    assert cleaned.dropped == ["two three four five"]


# whisper base in bfloat16 on the same sample: after "now." at 29.98 s the decoder repeats earlier
# words and the alignment lays them over the audio where they were first said (shortened here)
SPOKEN_BEFORE = words((" there's", 13.0, 13.4), (" not", 13.4, 13.6), (" much", 13.6, 13.9),
                      (" difference.", 13.9, 14.5), (" At", 22.0, 22.2), (" least", 22.2, 22.5),
                      (" they", 22.5, 22.8), (" all", 22.8, 23.0), (" call", 23.0, 23.3),
                      (" me", 23.3, 23.5), (" in", 29.04, 29.18), (" New", 29.18, 29.24),
                      (" Jersey", 29.24, 29.58), (" now.", 29.58, 29.98))
REWOUND = words((" There's", 22.0, 22.72), (" not", 22.72, 22.84), (" much", 22.84, 23.28),
                (" difference", 23.28, 23.7), (" at", 23.7, 24.12), (" least", 24.12, 24.3),
                (" they", 24.3, 25.3), (" all", 25.3, 25.52), (" call", 25.52, 25.78))


def test_finds_repeats_laid_over_audio_already_transcribed():
    n = len(SPOKEN_BEFORE)
    assert rewound_runs(SPOKEN_BEFORE + REWOUND) == [range(n, n + len(REWOUND))]
    # words written long before (outside the stretch the run rewinds over) do not count: on long
    # audio almost every word has been written somewhere; here a seam re-decodes 20-26 s, which
    # the previous window had garbled, with words said 20 s earlier
    early = [Word(w.text, w.start - 20.0, w.end - 20.0) for w in REWOUND]
    garbled = words((" I'm", 20.0, 21.0), (" sure", 21.0, 22.0), (" I'm", 22.0, 23.0), (" sure", 23.0, 24.0),
                    (" so", 24.0, 25.0), (" sure", 25.0, 26.5))
    assert rewound_runs(early + garbled + REWOUND) == []
    # new words over earlier audio are not a repeat (e.g. a window seam that re-times speech)
    fresh = [Word(" zebra" + str(i), w.start, w.end) for i, w in enumerate(REWOUND)]
    assert rewound_runs(SPOKEN_BEFORE + fresh) == []
    # times that step back by less than REWIND_SECONDS are DTW jitter or a seam: kept
    jitter = [Word(w.text, w.start + 7.5, w.end + 7.5) for w in REWOUND]
    assert rewound_runs(SPOKEN_BEFORE + jitter) == []
    # a short repeat (under MIN_RUN words) is kept; the run ends where the times pass the old end
    assert rewound_runs(SPOKEN_BEFORE + REWOUND[:3] + words((" later", 31.0, 31.5))) == []
    # tiny.en on the sample: DTW stretched "thing." over the pause to the window's end; the next
    # words start 2 s before that end but only 0.5 s before its start: real speech, kept
    stretched = words((" kind", 28.02, 28.3), (" of", 28.3, 28.5), (" thing.", 28.5, 29.98), (" I", 28.0, 28.54),
                      (" don't", 28.54, 28.78), (" hear", 28.78, 28.94), (" that", 28.94, 29.2),
                      (" New", 29.2, 29.4))
    assert rewound_runs(SPOKEN_BEFORE[:-4] + stretched) == []
    assert rewound_runs([]) == []


def test_drop_hallucinations_removes_both_kinds_once():
    ws = SPOKEN_BEFORE + REWOUND + words(*[(" x", 29.98, 29.98)] * 4)
    segs = [Segment("".join(w.text for w in SPOKEN_BEFORE), 0.0, 30.0),
            Segment("".join(w.text for w in REWOUND) + " x x x x", 22.0, 30.0)]
    cleaned = drop_hallucinations(segs, ws)
    assert [w.text for w in cleaned.words] == [w.text for w in SPOKEN_BEFORE]
    assert cleaned.segments == [segs[0]]
    assert cleaned.dropped == ["There's not much difference at least they all call x x x x"]
    assert drop_hallucinations(segs[:1], SPOKEN_BEFORE) is None


def test_a_decode_loops_when_a_phrase_repeats_back_to_back_at_its_end():
    from speaker_asr.asr.hallucination import looping

    sorry = [40, 1101, 7014, 13]  # " I", "'m", " sorry", "."
    prompt = [50257, 50362]
    assert looping(prompt + [5, 6, 7] + sorry * 3)  # the third "I'm sorry." in a row: a loop
    assert not looping(prompt + [5, 6, 7] + sorry * 2)
    assert not looping(prompt + sorry * 3 + [8])  # it moved on
    assert not looping(prompt + [9, 9, 9])  # "no no no": a word said three times is speech
    assert looping(prompt + [9] * 12)
    assert looping(prompt + [3, 4] * 6) and not looping(prompt + [3, 4] * 5)  # 12 tokens in all
    assert not looping([]) and not looping(list(range(40)))
