"""The pure alignment core, on hand-made turns, chunks and words."""

import math

import pytest

from speaker_asr.attribution.speakers import (RULES, SpeakerIndex, assign_speakers,
                                              attribute_words, clean_turns, exclusive_turns,
                                              resolve_times, split_segments)
from speaker_asr.types import Turn, Word

A, B, C = "SPEAKER_00", "SPEAKER_01", "SPEAKER_02"


def turns(*spec):
    return [Turn(s, e, spk) for s, e, spk in spec]


def test_largest_overlap_wins():
    index = SpeakerIndex(turns((0, 4, A), (4, 10, B)))
    assert index.speaker_at(1, 5) == A  # 3 s of A, 1 s of B
    assert index.speaker_at(3, 9) == B


def test_overlap_is_summed_per_speaker():
    # A speaks in two short turns around one longer B turn: 0.8 + 0.8 of A beats 1.2 of B
    index = SpeakerIndex(turns((0.0, 0.8, A), (0.8, 2.0, B), (2.0, 10.0, A)))
    assert index.speaker_at(0.0, 2.8) == A


def test_gap_takes_nearest_turn():
    index = SpeakerIndex(turns((0, 2, A), (5, 8, B)))
    assert index.speaker_at(2.5, 3.0) == A  # 0.5 s after A, 2 s before B
    assert index.speaker_at(4.0, 4.8) == B  # 0.2 s before B


def test_before_first_and_after_last_turn():
    index = SpeakerIndex(turns((3, 5, A), (5, 7, B)))
    assert index.speaker_at(0.0, 1.0) == A
    assert index.speaker_at(20.0, 21.0) == B


def test_no_turns_gives_no_speaker():
    assert SpeakerIndex([]).speaker_at(0, 1) is None
    out = assign_speakers([Word("hi", 0, 1)], [])
    assert [(p.text, p.speaker) for p in out] == [("hi", None)]


def test_unsorted_overlapping_and_degenerate_turns():
    raw = turns((5, 9, B), (0, 6, A), (3, 3, C), (8, 7, C), (float("nan"), 2, C))
    cleaned = clean_turns(raw)
    assert [(t.start, t.speaker) for t in cleaned] == [(0, A), (5, B)]
    index = SpeakerIndex(raw)
    assert index.speaker_at(5.2, 5.8) == A  # both overlap equally: the first label
    assert index.speaker_at(6.5, 8.5) == B
    assert index.speaker_at(0.5, 1.5) == A


def test_zero_length_piece_is_a_point_lookup():
    index = SpeakerIndex(turns((0, 2, A), (2, 4, B)))
    assert index.speaker_at(3.0, 3.0) == B
    assert index.speaker_at(1.0, 1.0) == A


def test_very_short_turn_wins_its_word():
    index = SpeakerIndex(turns((0, 5, A), (5.0, 5.25, B), (5.25, 9, A)))
    assert index.speaker_at(5.02, 5.22) == B


def test_index_matches_bruteforce_on_many_turns():
    import random

    rng = random.Random(0)
    raw = []
    t = 0.0
    for _ in range(400):
        length = rng.uniform(0.05, 3)
        raw.append(Turn(t, t + length, rng.choice([A, B, C])))
        t += length + rng.uniform(-0.5, 1.0)  # gaps and overlaps
    index = SpeakerIndex(raw)
    for _ in range(500):
        s = rng.uniform(-2, t + 2)
        e = s + rng.uniform(0.01, 4)
        brute = {}
        for turn in raw:
            ov = min(e, turn.end) - max(s, turn.start)
            if ov > 0:
                brute[turn.speaker] = brute.get(turn.speaker, 0) + ov
        got = index.overlaps(s, e)
        assert got.keys() == brute.keys()
        for k in got:
            assert math.isclose(got[k], brute[k], abs_tol=1e-9)
        if not brute:
            gaps = [(max(turn.start - e, s - turn.end), turn) for turn in raw]
            best_gap = min(g for g, _ in gaps)
            assert index.nearest(s, e).speaker in {turn.speaker for g, turn in gaps
                                                   if math.isclose(g, best_gap, abs_tol=1e-9)}


def test_resolve_times_fills_missing_and_clamps():
    spans = resolve_times([(None, 2.0), (2.0, None), (5.0, 7.0), (6.5, None)], duration=8.0)
    assert spans == [(0.0, 2.0), (2.0, 5.0), (5.0, 7.0), (6.5, 8.0)]
    # beyond the audio, negative, inverted and non-finite values
    spans = resolve_times([(-1.0, 0.5), (3.0, 1.0), (float("inf"), None), (9.0, 12.0)], duration=10.0)
    assert spans == [(0.0, 0.5), (3.0, 3.0), (3.0, 9.0), (9.0, 10.0)]
    for s, e in spans:
        assert 0 <= s <= e <= 10


def test_no_chunk_is_dropped_after_the_last_turn():
    # the original handler dropped every chunk after the last speaker turn
    chunks = [Word(" one", 0, 2), Word(" two", 2, 4), Word(" three", 9, 12)]
    out = assign_speakers(chunks, turns((0, 2, A), (2, 4, B)))
    assert [p.text for p in out] == [" one", " two", " three"]
    assert [p.speaker for p in out] == [A, B, B]


def test_word_level_splits_segment_at_speaker_change():
    words = [Word(" Hello", 0.0, 0.4), Word(" there.", 0.4, 0.9), Word(" Hi", 1.0, 1.3),
             Word(" you.", 1.3, 1.6)]
    attributed = attribute_words(words, turns((0, 0.95, A), (0.95, 2.0, B)))
    assert [w.speaker for w in attributed] == [A, A, B, B]
    # one Whisper segment spans both speakers
    segs = split_segments([" Hello there. Hi you."], attributed)
    assert [(s.text, s.speaker, s.start, s.end) for s in segs] == [
        (" Hello there.", A, 0.0, 0.9), (" Hi you.", B, 1.0, 1.6)]


def test_word_straddling_a_boundary_goes_to_larger_share():
    words = [Word(" straddle", 1.8, 2.6)]
    assert attribute_words(words, turns((0, 2.0, A), (2.0, 4.0, B)))[0].speaker == B


def test_without_rules_it_is_plain_max_overlap():
    t = turns((0, 1.0, A), (1.05, 1.1, B), (1.6, 3.0, A))
    words = [Word(" on", 0.6, 0.95), Word(" the", 1.12, 1.5), Word(" table", 1.6, 2.0)]
    assert [w.speaker for w in attribute_words(words, t, rules=())] == [A, B, A]
    assert set(RULES) == {"tidy", "dominant", "newest", "continuity", "sentence"}
    with pytest.raises(ValueError, match="unknown attribution rule 'smooth'"):
        attribute_words(words, t, rules=("smooth",))


def test_a_weak_word_takes_its_sentences_speaker():
    # " the" overlaps no turn; the nearest is B's tiny turn: weak evidence inside A's sentence
    t = turns((0, 1.0, A), (1.05, 1.1, B), (1.6, 3.0, A))
    words = [Word(" on", 0.6, 0.95), Word(" the", 1.12, 1.5), Word(" table.", 1.6, 2.0)]
    assert [w.speaker for w in attribute_words(words, t)] == [A, A, A]
    # a one-word reply fully inside its own turn keeps its speaker
    t2 = turns((0, 1.0, A), (1.0, 1.25, B), (1.25, 3.0, A))
    reply = [Word(" are", 0.5, 0.9), Word(" Yes", 1.0, 1.2), Word(" you", 1.3, 1.6)]
    assert [w.speaker for w in attribute_words(reply, t2)] == [A, B, A]


def test_a_first_word_timed_over_another_speakers_untranscribed_turn_joins_its_sentence():
    """AMI EN2001e: A's "sixteen times zero" (0.02-1.08 s) is not transcribed; B's "I'm not a
    hundred percent sure" starts at 1.12 s, and Whisper timed "I'm" from 0 s to 1.28 s: by its
    times it is A's word, by its sentence B's."""
    t = turns((0.02, 1.08, A), (1.12, 30.0, B))
    words = [Word(" I'm", 0.0, 1.28), Word(" not", 1.28, 1.36), Word(" a", 1.36, 1.58),
             Word(" hundred", 1.78, 2.06), Word(" percent", 2.06, 2.4), Word(" sure.", 2.4, 2.7)]
    assert attribute_words(words, t, rules=())[0].speaker == A
    assert [w.speaker for w in attribute_words(words, t)] == [B] * 6
    # a zero-length word is no evidence either (AMI EN2003a: "Can" timed at 16.22 s, inside the
    # previous turn, for a sentence said from 16.76 s)
    t = turns((14.41, 16.36, A), (16.76, 23.57, B))
    words = [Word(" Yeah.", 14.1, 14.98), Word(" Can", 16.22, 16.22), Word(" you", 16.22, 16.96),
             Word(" just", 16.96, 17.1), Word(" remind", 17.1, 17.28), Word(" me?", 17.28, 17.7)]
    assert [w.speaker for w in attribute_words(words, t)] == [A, B, B, B, B, B]


def test_sentence_coherence_needs_one_clear_speaker_and_a_turn_nearby():
    # B's turn starts while A's turn still runs: " And" and " I'm" are covered by both turns
    t = turns((0, 5.0, A), (4.6, 8.0, B))
    words = [Word(" Jersey.", 4.0, 4.5), Word(" And", 4.55, 4.75), Word(" I'm", 4.75, 5.0),
             Word(" Sheila", 5.1, 5.6)]
    assert [w.speaker for w in attribute_words(words, t)] == [A, B, B, B]
    # a sentence's last word timed late, into the pause, barely touching the next turn
    t = turns((0, 2.0, A), (2.5, 5.0, B))
    words = [Word(" in", 1.5, 1.8), Word(" Jersey", 1.8, 2.0), Word(" though.", 2.2, 2.55),
             Word(" Well,", 2.6, 2.9)]
    assert [w.speaker for w in attribute_words(words, t, rules=("tidy",))] == [A, A, B, B]
    assert [w.speaker for w in attribute_words(words, t)] == [A, A, A, B]
    # no sentence end there: the sentence has two clear speakers, so the times decide
    words[2] = Word(" though", 2.2, 2.55)
    assert [w.speaker for w in attribute_words(words, t)] == [A, A, B, B]
    # the sentence's speaker must have a turn within COHERENCE_REACH of the weak word
    t = turns((0, 2.0, A), (4.0, 5.0, B))
    words = [Word(" far", 2.2, 2.4), Word(" away", 4.1, 4.5), Word(" words.", 4.5, 4.9)]
    assert [w.speaker for w in attribute_words(words, t)] == [A, B, B]


def test_a_backchannel_turn_inside_a_long_turn_does_not_take_its_words():
    """AMI EN2006b: a "hmm" turn (12.73-14.43 s) inside A's long turn, not transcribed: A's
    "it should be a | break for Andrew" came out as two speakers on the exclusive turns."""
    t = turns((10.0, 19.6, A), (12.7, 14.4, B))
    words = [Word(" I", 10.2, 10.4), Word(" think", 10.4, 10.8), Word(" it", 12.6, 13.0),
             Word(" should", 13.0, 13.4), Word(" be", 13.4, 13.7), Word(" a", 13.7, 13.8),
             Word(" break", 14.3, 14.7), Word(" for", 14.7, 14.9), Word(" Andrew.", 14.9, 15.5)]
    assert [w.speaker for w in attribute_words(words, t)] == [A] * 9
    # what the exclusive turns alone say (pyannote 3.x's derived ones, as before)
    assert [w.speaker for w in attribute_words(words, exclusive_turns(t), rules=())][3:6] == [B] * 3


def test_overlapped_speech_keeps_the_voice_whisper_was_writing():
    # B starts talking over A at 5.0; both turns cover the words in 5.0-6.0 equally
    t = turns((0.0, 6.0, A), (5.0, 9.0, B))
    words = [Word(" so", 4.5, 4.9), Word(" what", 5.1, 5.4), Word(" can", 5.4, 5.7),
             Word(" we", 6.2, 6.5)]
    assert [w.speaker for w in attribute_words(words, t)] == [A, A, A, B]
    # a word mostly in one speaker's clear stretch is not overlapped speech: its share decides
    assert [w.speaker for w in attribute_words([Word(" so.", 4.5, 4.9), Word(" Yes", 5.7, 6.6)], t)] == [A, B]
    # ... unless its sentence says otherwise: "so yes" is one sentence, and only A is clear in it
    assert [w.speaker for w in attribute_words([Word(" so", 4.5, 4.9), Word(" yes", 5.7, 6.6)], t)] == [A, A]
    # A stops at 5.5, in the middle of " what": no continuity (A does not go on through it), and
    # on cover alone B covers more of it; the sentence's speaker decides (A 0.8 + 1 against
    # B 1 + 0.25 x 0.8 newest)
    t = turns((0.0, 5.5, A), (5.0, 9.0, B))
    words = [Word(" so", 4.5, 4.9), Word(" what", 5.1, 5.6)]
    assert [w.speaker for w in attribute_words(words, t, rules=())] == [A, B]
    assert [w.speaker for w in attribute_words(words, t)] == [A, A]


def test_continuity_needs_the_voice_to_go_on_through_the_whole_word():
    """Issue 29, AMI EN2006b: a word stretched over a turn edge is covered 0.8 by A and 0.5 by B,
    whose earlier turn holds the previous words. B's turns do not cover all of it, so B gets no
    continuity there and A's larger cover wins (scaled by B's share, continuity gave B
    0.5 + 0.12 newest + 0.25 = 0.87 against A's 0.8). On the next word both turns cover it
    wholly and the voice of the word before, A's, goes on: A 1 + 0.5 against B 1 + 0.25 newest.
    The sentence has no speaker of its own (its first words single out B, its last A)."""
    t = turns((0.0, 1.0, B), (1.5, 10.0, A), (2.5, 4.0, B))
    words = [Word(" I", 0.2, 0.5), Word(" think", 0.5, 0.9), Word(" it", 0.9, 0.9),
             Word(" should", 0.9, 3.9), Word(" be", 3.9, 4.0), Word(" a", 4.1, 4.3),
             Word(" break.", 4.3, 4.6)]
    assert [w.speaker for w in attribute_words(words, t)] == [B, B, B, A, A, A, A]
    # left out, cover and newest alone decide " be" (B's turn began last)
    assert [w.speaker for w in attribute_words(words, t, rules=("tidy", "newest", "sentence"))][3:5] == [A, B]


def test_overlapped_sentence_start_goes_to_the_dominant_voice_or_the_new_turn():
    # B says "Mm-hmm." inside A's long turn, and Whisper wrote it: without pyannote 4's own
    # exclusive turns, a sentence starting in the overlap goes to the turn that began last
    t = turns((0.0, 10.0, A), (6.0, 7.0, B))
    words = [Word(" right.", 5.0, 5.5), Word(" Mm-hmm.", 6.1, 6.6), Word(" So", 7.5, 7.8)]
    assert [w.speaker for w in attribute_words(words, t)] == [A, B, A]
    # pyannote 4 heard A as the dominant voice there: the word is A's
    heard = turns((0.0, 10.0, A))
    assert [w.speaker for w in attribute_words(words, t, heard)] == [A, A, A]



def test_the_whole_decision_on_overlapped_speech_inside_one_sentence():
    """Issue 29: the dominant-voice rule alone gave [A, B, B], and coherence then made it
    [A, A, A]; now one score decides. Both turns cover " what" and " can" wholly (1 each);
    pyannote 4 heard B for 2/3 of " what" and all of " can" (dominant); " so" is the only word
    that singles out a speaker, so the sentence is A's (+1), and A's turn goes on under each word
    (continuity +0.5). " can": A = 1 + 0.5 + 1 = 2.5 against B = 1 + 1 = 2: A."""
    t = turns((0.0, 6.0, A), (5.0, 9.0, B))
    words = [Word(" so", 4.5, 4.9), Word(" what", 5.1, 5.4), Word(" can", 5.4, 5.7)]
    heard = turns((0.0, 5.2, A), (5.2, 9.0, B))
    assert [w.speaker for w in attribute_words(words, t, heard)] == [A, A, A]
    # the dominant voice alone decides against cover alone ...
    assert [w.speaker for w in attribute_words(words, t, heard, rules=("dominant",))] == [A, B, B]
    # ... continuity alone is not enough against it (A 1.5, B 2 on " can") ...
    assert [w.speaker for w in attribute_words(words, t, heard, rules=("dominant", "continuity"))] == [A, A, B]
    # ... and with a sentence end after " so", neither continuity nor the sentence speaks for A
    words[0] = Word(" so.", 4.5, 4.9)
    assert [w.speaker for w in attribute_words(words, t, heard)] == [A, B, B]


def test_tidy_trims_words_stretched_over_pauses():
    from speaker_asr.attribution.speakers import tidy_word_times

    words = [Word(" Hello.", 0.0, 6.98), Word(" Oh,", 8.4, 8.7), Word(" hello.", 8.7, 9.0),
             Word(" I", 9.0, 9.1), Word(" knew", 9.1, 9.4), Word(" it.", 9.4, 12.0),
             Word(" Then", 12.0, 12.3), Word(" a", 12.3, 14.0), Word(" b", 14.0, 14.3)]
    out = tidy_word_times(words)
    median = 0.3
    # first word: cut from the left (speech is at its end), the sentence end from the right
    assert out[0].end == 6.98 and abs(out[0].start - (6.98 - 2 * median)) < 1e-9
    assert out[5].start == 9.4 and abs(out[5].end - (9.4 + 2 * median)) < 1e-9
    # a long word inside a sentence keeps its times; normal words are untouched
    assert (out[7].start, out[7].end) == (12.3, 14.0)
    assert [(w.start, w.end) for w in out[1:5]] == [(w.start, w.end) for w in words[1:5]]
    assert [w.text for w in out] == [w.text for w in words]


def test_tidy_moves_a_stretched_first_word_to_the_right_speaker():
    # Whisper timed "Hello." 0-6.98 s; it is spoken at 6.7 s inside B's turn, after A's noise turn
    t = turns((0.5, 1.0, A), (6.6, 7.2, B))
    word = [Word(" Hello.", 0.0, 6.98), Word(" Hi.", 7.6, 8.0), Word(" there", 8.0, 8.3)]
    assert attribute_words(word, t, rules=set(RULES) - {"tidy"})[0].speaker == A
    assert attribute_words(word, t)[0].speaker == B
    # the words come back with the times the attribution judged by
    assert attribute_words(word, t)[0].start > 6.0


# ------------------------------------------------------------- exclusive turns (pyannote.audio 3.x)


def _exclusive(*turns):
    from speaker_asr.attribution.speakers import exclusive_turns

    return [(t.start, t.end, t.speaker) for t in exclusive_turns([Turn(*t) for t in turns])]


def test_exclusive_turns_split_a_hand_over_at_the_middle_of_the_overlap():
    assert _exclusive((0, 5, "A"), (4, 10, "B")) == [(0, 4.5, "A"), (4.5, 10, "B")]
    # input order does not matter
    assert _exclusive((4, 10, "B"), (0, 5, "A")) == [(0, 4.5, "A"), (4.5, 10, "B")]


def test_exclusive_turns_keep_an_interjection_inside_a_longer_turn():
    assert _exclusive((0, 10, "A"), (4.8, 5.2, "B")) == [(0, 4.8, "A"), (4.8, 5.2, "B"), (5.2, 10, "A")]


def test_exclusive_turns_merge_a_speakers_own_overlaps_and_keep_gaps():
    assert _exclusive((0, 2, "A"), (1, 3, "A"), (5, 6, "B"), (6, 7, "B")) == [(0, 3, "A"), (5, 7, "B")]
    assert _exclusive() == [] and _exclusive((1, 1, "A")) == []


def test_exclusive_turns_have_one_speaker_at_a_time_and_cover_all_speech():
    import random

    rng = random.Random(7)
    for _ in range(200):
        turns = []
        for _ in range(rng.randrange(1, 12)):
            start = rng.uniform(0, 30)
            turns.append((start, start + rng.uniform(0.05, 8), rng.choice("ABCD")))
        out = _exclusive(*turns)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(out, out[1:])), out
        assert all(s < e for s, e, _ in out)
        # speech time is neither lost nor invented
        covered = sorted((s, e) for s, e, _ in turns)
        union, (cs, ce) = 0.0, covered[0]
        for s, e in covered[1:]:
            if s > ce:
                union, cs, ce = union + ce - cs, s, e
            else:
                ce = max(ce, e)
        union += ce - cs
        assert sum(e - s for s, e, _ in out) == pytest.approx(union)
        # a moment only one speaker talks in stays that speaker's
        for s, e, speaker in turns:
            t = (s + e) / 2
            others = [o for o in turns if o[2] != speaker and o[0] <= t <= o[1]]
            if not others:
                assert any(a <= t <= b and who == speaker for a, b, who in out)


def test_pure_logic_imports_no_model_library():
    """Attribution, input decoding, errors and settings import neither torch, pyannote,
    transformers nor the web server: they are usable and testable without them."""
    import subprocess
    import sys

    from helpers import ROOT

    modules = ("speaker_asr.attribution.speakers", "speaker_asr.attribution.response",
               "speaker_asr.attribution.naming",
               "speaker_asr.audio.inputs", "speaker_asr.errors", "speaker_asr.config")
    code = (f"import sys, {', '.join(modules)}; "
            "bad = {'torch', 'pyannote', 'transformers', 'starlette'} & {m.split('.')[0] for m in sys.modules}; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_turns_that_began_together_make_nobody_newest():
    """Two speakers' turns over the same stretch (a random pyannote 3.x pipeline asked for two
    speakers): no turn began last, so nothing but the tie-break decides: the first label."""
    turns = [Turn(0.0, 15.0, "B"), Turn(0.0, 15.0, "A")]
    words = [Word(" one", 0.1, 0.3), Word(" two", 0.3, 8.0), Word(" three.", 8.0, 12.0)]
    assert [w.speaker for w in attribute_words(words, turns)] == ["A", "A", "A"]


def test_tidy_keeps_the_edge_the_turns_put_in_speech():
    # a reply timed from its true start (7.86 s, inside C's turn) to the next voice (9.82 s): the
    # place rule would keep its end, in the pause; the turns say its start is the speech
    t = turns((6.2, 7.36, B), (7.84, 8.31, C), (9.91, 11.6, B))
    words = [Word(" for", 6.9, 7.2), Word(" me.", 7.2, 7.5), Word(" Really?", 7.86, 9.82),
             Word(" The", 9.82, 10.1), Word(" first", 10.1, 10.4), Word(" item.", 10.4, 10.7)]
    out = attribute_words(words, t)
    assert out[2].speaker == C and out[2].start == 7.86
    # without turns (diarization off) the place rule stands: a sentence's first word keeps its end
    from speaker_asr.attribution.speakers import tidy_word_times

    assert tidy_word_times(words)[2].end == 9.82
