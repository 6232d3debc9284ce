"""Text Whisper wrote with no audio under it (hallucination.py), on hand-made words."""

from hallucination import drop_squeezed, squeezed_runs


def words(*spec):
    return [(t, s, e) for t, s, e in spec]


# whisper base on pyannote's sample: the real speech ends at 29.98 s, then 20 words repeat
# earlier sentences, every one timed 29.98-29.98 (shortened here)
TAIL = words((" in", 29.04, 29.18), (" New", 29.18, 29.24), (" Jersey", 29.24, 29.58),
             (" now.", 29.58, 29.98), (" Oh,", 29.98, 29.98), (" I", 29.98, 29.98),
             (" don't", 29.98, 29.98), (" hear", 29.98, 29.98), (" that.", 29.98, 29.98),
             (" I'm", 29.98, 29.98), (" Sheila.", 29.98, 29.98))
SEGMENTS = [(" I don't hear that in New Jersey now.", 20.0, 23.0), (" Oh, I don't hear that.", 23.0, 24.0),
            (" I'm Sheila.", 24.0, 25.0)]
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
    cleaned = drop_squeezed(SEGMENTS, all_words)
    assert cleaned.dropped == ["Oh, I don't hear that. I'm Sheila."]
    assert [w[0] for w in cleaned.words] == [" I", " don't", " hear", " that", " in", " New", " Jersey", " now."]
    assert cleaned.text == " I don't hear that in New Jersey now."
    # the segments that held only dropped words are gone; the first keeps its times
    assert cleaned.segments == [(" I don't hear that in New Jersey now.", 20.0, 23.0)]
    assert cleaned.text == "".join(w[0] for w in cleaned.words) == "".join(s[0] for s in cleaned.segments)


def test_nothing_to_drop_returns_none():
    assert drop_squeezed(SEGMENTS[:1], SPOKEN + TAIL[:4]) is None


def test_a_run_inside_a_segment_keeps_the_rest_of_it():
    segs = [(" one two three four five six seven", 0.0, 5.0)]
    ws = words((" one", 0.0, 0.5), (" two", 1.0, 1.0), (" three", 1.0, 1.0), (" four", 1.0, 1.0),
               (" five", 1.0, 1.0), (" six", 1.0, 1.5), (" seven", 1.5, 2.0))
    cleaned = drop_squeezed(segs, ws)
    assert cleaned.segments == [(" one six seven", 0.0, 5.0)]
    assert cleaned.dropped == ["two three four five"]
