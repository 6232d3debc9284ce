"""Local agreement (speaker_asr/live/agreement.py) on hand-made decodes of growing utterances:
what is committed, that nothing is taken back, and how the final decode closes an utterance."""

from __future__ import annotations

from typing import Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from speaker_asr.live.agreement import Delta, LocalAgreement, normalise, words_text
from speaker_asr.types import Word


def W(text: str, times: Optional[list[tuple[float, float]]] = None) -> list[Word]:
    """Whisper-style words: each with its leading space (``" Hello"``, ``" world."``)."""
    parts = text.split()
    times = times or [(None, None)] * len(parts)
    return [Word(" " + p, s, e) for p, (s, e) in zip(parts, times)]


def timed(text: str, start: float = 0.0, step: float = 0.5) -> list[Word]:
    n = len(text.split())
    return W(text, [(start + i * step, start + i * step + step * 0.8) for i in range(n)])


def run(decodes: list[str], final: str):
    agreement = LocalAgreement()
    deltas = [agreement.update(W(d)).text for d in decodes]
    finish = agreement.finish(W(final))
    return deltas, finish


def test_normalised_words_ignore_case_and_punctuation_at_either_end():
    assert normalise(" Hello,") == normalise("hello") == "hello"
    assert normalise("¿Qué?") == "qué"
    assert normalise(" don't.") == "don't"  # inner punctuation stays
    assert normalise(" ...") == "..."  # punctuation only: compared as it is
    assert normalise("ＡＢＣ") == "abc"  # NFKC


def test_text_joins_words_as_whisper_spells_them_without_the_leading_space():
    assert words_text(W("Hello there, world.")) == "Hello there, world."
    assert words_text([Word(" It", 0, 1), Word("'s", 1, 2), Word("  fine. ", 2, 3)]) == "It's fine."
    assert words_text([]) == ""


def test_the_first_decode_commits_nothing_then_agreement_commits_the_common_prefix():
    agreement = LocalAgreement()
    assert agreement.update(W("The")) == Delta()
    first = agreement.update(W("The cat"))
    assert first.text == "The" and [w.text for w in first.words] == [" The"]
    assert agreement.update(W("The cat sat on")).text == " cat"
    assert agreement.update(W("The cat sat on the mat")).text == " sat on"
    assert agreement.text == "The cat sat on"


def test_disagreement_waits_and_nothing_committed_is_taken_back():
    deltas, finish = run(["I scream", "Ice cream", "Ice cream is", "Ice cream is cold"],
                         "Ice cream is cold.")
    # the two first decodes disagree from the first word: nothing until two agree
    assert deltas == ["", "", "Ice cream", " is"]
    assert finish.delta == " cold." and not finish.revised
    assert "".join(deltas) + finish.delta == finish.transcript == "Ice cream is cold."


def test_case_and_punctuation_differences_agree_and_the_later_spelling_is_sent():
    agreement = LocalAgreement()
    agreement.update(W("hello world"))
    assert agreement.update(W("Hello, world. How")).text == "Hello, world."
    # the next decode spells a committed word differently: still the same words, nothing resent
    assert agreement.update(W("Hello world, how are")).text == " how"
    assert agreement.update(W("Hello world, how are you")).text == " are"


def test_the_final_decode_that_agrees_completes_the_deltas_exactly():
    deltas, finish = run(["So", "So we", "So we met", "So we met at noon"], "So we met at noon.")
    assert deltas == ["", "So", " we", " met"]
    assert (finish.delta, finish.transcript, finish.revised) == (" at noon.", "So we met at noon.", False)
    assert "".join(deltas) + finish.delta == finish.transcript


def test_a_final_decode_that_changes_committed_text_is_marked_revised():
    """The deltas cannot be taken back: the rest is still sent, and the completed event's
    transcript (the final decode) is what the item says."""
    deltas, finish = run(["the cat", "the cat sat"], "The cat sat down.")
    assert deltas == ["", "the cat"]
    assert finish.revised and finish.transcript == "The cat sat down."
    assert finish.delta == " sat down."  # the final decode's words past the committed ones
    # only punctuation differs: still revised (the concatenation would not be the transcript)
    deltas, finish = run(["Yes.", "Yes. Right"], "Yes, right.")
    assert deltas == ["", "Yes."] and finish.revised and finish.delta == " right."


def test_an_utterance_with_one_decode_sends_it_all_at_the_end():
    agreement = LocalAgreement()
    finish = agreement.finish(W("Just this."))
    assert (finish.delta, finish.transcript, finish.revised) == ("Just this.", "Just this.", False)
    assert LocalAgreement().finish([]).transcript == ""


def test_a_finished_utterance_takes_no_more_decodes():
    agreement = LocalAgreement()
    agreement.finish(W("Done."))
    with pytest.raises(RuntimeError, match="finished"):
        agreement.update(W("Done. Again"))
    with pytest.raises(RuntimeError, match="already finished"):
        agreement.finish(W("Done."))


def test_a_decode_that_rewrites_the_start_is_aligned_by_word_times():
    """Whisper re-decodes the whole utterance: a later decode may change a committed word. With
    times, its tail is what starts after the committed words end, less a repeat of their end."""
    agreement = LocalAgreement()
    agreement.update(timed("We went to Paris"))
    agreement.update(timed("We went to Paris in"))
    assert agreement.text == "We went to Paris"  # the last committed word ends at 1.5 + 0.4 s
    # a decode that writes "Wee went" but agrees on the words after the committed ones
    changed = timed("Wee went to Paris in May")
    assert [w.text for w in agreement.tail(changed)] == [" in", " May"]
    assert agreement.update(changed).text == " in"  # "in" (2.0-2.4 s) agreed with the decode before
    # times drifting later put the committed "in" after the committed end: the repeat is dropped
    drifted = timed("Wee went to Paris in May", start=0.6)
    assert [(w.text, w.start) for w in agreement.tail(drifted)] == [(" May", 3.1)]
    assert agreement.update(drifted).text == " May"
    assert agreement.text == "We went to Paris in May"


def test_without_times_a_changed_start_is_aligned_by_position():
    agreement = LocalAgreement()
    agreement.update(W("a b c"))
    agreement.update(W("a b c d"))
    assert agreement.text == "a b c"
    assert [w.text for w in agreement.tail(W("A bee c d e"))] == [" d", " e"]


def test_shorter_decodes_commit_nothing_new():
    agreement = LocalAgreement()
    agreement.update(W("one two three"))
    agreement.update(W("one two three four"))
    assert agreement.update(W("one two")).text == ""  # nothing past the committed words
    assert agreement.text == "one two three"


def test_empty_and_blank_words_are_ignored():
    agreement = LocalAgreement()
    agreement.update([Word(" ", 0, 0), *W("hi there")])
    assert agreement.update(W("hi there you")).text == "hi there"


@given(st.lists(st.lists(st.sampled_from(["a", "b", "A", "b.", "c", "C,", "d"]), max_size=8),
                min_size=1, max_size=8),
       st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=8))
def test_deltas_only_grow_and_match_the_transcript_unless_revised(decodes, final):
    agreement = LocalAgreement()
    sent = ""
    for d in decodes:
        before = agreement.text
        sent += agreement.update(W(" ".join(d))).text
        assert agreement.text.startswith(before)  # never taken back
        assert sent == agreement.text
    finish = agreement.finish(W(" ".join(final)))
    sent += finish.delta
    assert finish.transcript == " ".join(final)
    assert finish.revised or sent == finish.transcript
