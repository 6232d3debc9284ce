"""The draft a live utterance's previous decode gives its next one
(speaker_asr/patches/draft_decoding.py): which tokens are proposed, on hand-made token lists.
That the model keeps only its own greedy tokens is checked on a real decode in
test_whisper_patches.py."""

from __future__ import annotations

from speaker_asr.patches.draft_decoding import draft_allowed, propose

SPECIAL = 1000  # ids from here on are control and timestamp tokens
SOT, TS = 1001, 1100  # start of transcript; a timestamp


def test_the_whole_draft_is_proposed_after_the_prompt():
    draft = [SOT, 5, 6, 7, 8]
    assert propose([SOT], draft, SPECIAL) == [5, 6, 7, 8]
    assert propose([SOT], draft, SPECIAL, count=2) == [5, 6]


def test_after_accepted_tokens_the_draft_goes_on_where_it_left_off():
    draft = [SOT, 5, 6, 7, 8, 9]
    assert propose([SOT, 5, 6, 7], draft, SPECIAL) == [8, 9]
    # the model's own token replaced a draft token: the draft's tail after it still follows
    assert propose([SOT, 5, 6, 42], draft, SPECIAL) == []
    assert propose([SOT, 5, 6, 42, 8], draft, SPECIAL) == [9]


def test_a_repeated_phrase_continues_from_the_occurrence_nearest_the_current_position():
    # "I mean, I mean, so": after the second "I mean" the draft goes on with "so"
    draft = [SOT, 1, 2, 3, 1, 2, 3, 9]
    assert propose([SOT, 1, 2, 3, 1, 2, 3], draft, SPECIAL) == [9]
    assert propose([SOT, 1, 2, 3], draft, SPECIAL) == [1, 2, 3, 9]


def test_a_timestamp_that_moved_does_not_lose_the_thread():
    # the previous decode closed a segment at TS+1; this one closes it at TS: the text goes on,
    # and the segment's opening timestamp (the same as its closing one) is proposed first
    draft = [SOT, 5, 6, TS + 1, TS + 1, 7, 8]
    assert propose([SOT, 5, 6, TS], draft, SPECIAL) == [TS, 7, 8]
    assert propose([SOT, 5, 6, TS, TS], draft, SPECIAL) == [7, 8]


def test_nothing_is_proposed_without_a_match_or_past_the_draft():
    assert propose([SOT, 40, 41], [SOT + 1, 5, 6], SPECIAL) == []
    assert propose([SOT, 5, 6], [SOT, 5, 6], SPECIAL) == []
    assert propose([SOT], [], SPECIAL) == []


def test_only_greedy_decoding_without_an_assistant_takes_a_draft():
    assert draft_allowed({"num_beams": 1, "do_sample": False})
    assert not draft_allowed({"num_beams": 5, "do_sample": False})
    assert not draft_allowed({"num_beams": 1, "do_sample": True, "temperature": 0.4})
    assert not draft_allowed({"num_beams": 1, "do_sample": False, "temperature": (0.0, 0.2, 0.4)})
    assert not draft_allowed({"num_beams": 1, "do_sample": False, "assistant_model": object()})
