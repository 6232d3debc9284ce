"""The sentences' voices check the speakers: hand-made words and voice vectors, no models."""

from dataclasses import replace

import numpy as np
import pytest

from speaker_asr.attribution.sentence_voices import (MAX_EMBED_S, MIN_UNIT_S, regroup,
                                                     speakers_by_sentence, voice_units)
from speaker_asr.types import Word

A, B = "SPEAKER_00", "SPEAKER_01"


def _unit(angle: float) -> np.ndarray:
    return np.array([np.cos(angle), np.sin(angle), 0.0])


def sentences(*spec):
    """Words of sentences ``(start, speaker, n_words)``: 0.4 s words, each sentence ending in '.'."""
    out = []
    for start, speaker, n in spec:
        for k in range(n):
            text = " w." if k == n - 1 else " w"
            out.append(Word(text, start + 0.4 * k, start + 0.4 * (k + 1), speaker))
    return out


def embedder(voice_at):
    """A span embedder whose voice is ``voice_at(start)``; it records the spans it was asked for."""
    asked = []

    def embed(spans):
        asked.extend(spans)
        return [voice_at(a) for a, _ in spans]

    embed.asked = asked
    return embed


def test_units_cut_at_sentence_ends_pauses_and_speaker_changes():
    words = [Word(" so", 0.0, 0.3, A), Word(" yes.", 0.3, 0.6, A), Word(" and", 0.7, 1.0, A),
             Word(" then", 1.8, 2.0, A), Word(" no", 2.0, 2.2, B)]
    units = voice_units(words)
    assert [(u.first, u.last, u.speaker) for u in units] == [(0, 1, A), (2, 2, A), (3, 3, A), (4, 4, B)]
    assert not any(u.embedded for u in units)  # all shorter than MIN_UNIT_S


def test_a_speaker_holding_two_voices_is_split_and_short_sentences_are_not_embedded():
    # A's sentences at 0, 10, 20 s are one voice, at 5 and 15 s another; nobody else speaks
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4), (25, A, 1))
    embed = embedder(lambda t: _unit(0.0) if int(t) % 10 == 0 else _unit(np.pi / 2))
    out = speakers_by_sentence(words, embed).words
    by_start = {w.start: w.speaker for w in out}
    assert by_start[0.0] == by_start[10.0] == by_start[20.0] == A
    assert by_start[5.0] == by_start[15.0] == B  # a new speaker, labelled after the others
    assert by_start[25.0] == A  # a 0.4 s sentence: not embedded, not moved
    assert all(b - a >= MIN_UNIT_S for a, b in embed.asked)
    assert [w.text for w in out] == [w.text for w in words]
    assert [(w.start, w.end) for w in out] == [(w.start, w.end) for w in words]


def test_a_long_sentence_is_embedded_from_its_middle_only():
    # sentences of 20 words (8 s) and one of 5 (2 s): the embedding's time grows with its audio
    words = sentences((0, A, 20), (10, A, 20), (20, A, 20), (30, A, 5))
    embed = embedder(lambda t: _unit(0.0))
    speakers_by_sentence(words, embed)
    assert [(round(a, 6), round(b, 6)) for a, b in embed.asked] == [
        (2.5, 5.5), (12.5, 15.5), (22.5, 25.5), (30.0, 32.0)]
    assert all(b - a <= MAX_EMBED_S + 1e-9 for a, b in embed.asked)


def test_the_odd_sentences_go_to_the_speaker_they_sound_like_where_the_rule_lets_them_move():
    # B's own sentences sound like the ones A was given at 5 and 15 s
    from speaker_asr.attribution.sentence_voices import VoiceRule

    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4), (30, B, 4), (35, B, 4))
    embed = embedder(lambda t: _unit(0.0) if t in (0, 10, 20) else _unit(np.pi / 2 + 0.1))
    out = speakers_by_sentence(words, embed, rule=VoiceRule(sure_support=1.01)).words
    assert {w.speaker for w in out if w.start in (5.0, 15.0)} == {B}
    assert {w.speaker for w in out} == {A, B}
    # the default moves no sentence to another speaker the diarization found, nor makes a new one
    # of a voice that is theirs
    assert [w.speaker for w in speakers_by_sentence(words, embed).words] == [w.speaker for w in words]


def test_one_voice_is_left_alone():
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, B, 4))
    out = speakers_by_sentence(words, embedder(lambda t: _unit(0.05 * t))).words  # small drift only
    assert [w.speaker for w in out] == [w.speaker for w in words]


@pytest.mark.parametrize("max_speakers", [1, 2])
def test_no_new_speaker_past_the_count_the_request_allows(max_speakers):
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4))
    embed = embedder(lambda t: _unit(0.0) if int(t) % 10 == 0 else _unit(np.pi / 2))
    out = speakers_by_sentence(words, embed, max_speakers=max_speakers).words
    assert len({w.speaker for w in out}) == max_speakers


def test_a_repeated_stretch_of_audio_counts_once():
    # two sentences over the same 1.6 s (a repeated hallucination) are not 2 s of a second voice
    words = sentences((0, A, 4), (5, A, 4), (5, A, 4), (10, A, 4))
    out = speakers_by_sentence(words, embedder(lambda t: _unit(0.0) if t != 5 else _unit(np.pi / 2))).words
    assert {w.speaker for w in out} == {A}


def test_sentences_without_a_vector_and_words_without_a_speaker_stay():
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, None, 4))
    units = voice_units(words)
    out = regroup(words, units, lambda ks: [None] * len(ks)).words
    assert [w.speaker for w in out] == [w.speaker for w in words]
    assert speakers_by_sentence([], embedder(lambda t: None)).words == []


def test_only_the_sentences_that_can_be_compared_are_embedded():
    # B has two sentences: too few to compare, and nothing moves, so they are never embedded
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, B, 4), (20, B, 4))
    embed = embedder(lambda t: _unit(0.0))
    speakers_by_sentence(words, embed)
    assert sorted(a for a, _ in embed.asked) == [0.0, 5.0, 10.0]


def test_a_new_speaker_never_takes_a_label_the_diarization_made():
    # the diarization also found SPEAKER_01, who has no words: the split must not become them
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4))
    embed = embedder(lambda t: _unit(0.0) if int(t) % 10 == 0 else _unit(np.pi / 2))
    out = speakers_by_sentence(words, embed, labels={A, B})
    assert {w.speaker for w in out.words} == {A, "SPEAKER_02"}
    assert set(out.voices) == {"SPEAKER_02"}
    assert out.voices["SPEAKER_02"] == pytest.approx(_unit(np.pi / 2))


def test_two_splits_in_one_recording_get_two_labels_and_each_its_own_voice():
    # A and C (SPEAKER_02) each hold two voices; the two new speakers must not merge
    C = "SPEAKER_02"
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4),
                      (30, C, 4), (35, C, 4), (40, C, 4), (45, C, 4), (50, C, 4))
    voices = {0: 0.0, 5: 1.0, 10: 0.0, 15: 1.0, 20: 0.0, 30: 2.0, 35: 3.0, 40: 2.0, 45: 3.0, 50: 2.0}
    embed = embedder(lambda t: np.eye(4)[int(voices[int(t)])])
    out = speakers_by_sentence(words, embed, labels={A, C})
    new = sorted({w.speaker for w in out.words} - {A, C})
    assert len(new) == 2 and set(out.voices) == set(new)
    moved = {int(w.start): w.speaker for w in out.words if w.speaker in new}
    assert moved[5] == moved[15] and moved[35] == moved[45] and moved[5] != moved[35]
    assert not np.allclose(out.voices[new[0]], out.voices[new[1]])


def test_sentences_the_diarization_was_sure_of_do_not_move():
    """B's voice turns up in two of A's sentences; the diarization heard A alone through one of
    them (sure) and B over the other (in doubt): only the one in doubt moves."""
    from speaker_asr.attribution.sentence_voices import VoiceRule
    from speaker_asr.types import Turn

    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4), (30, B, 4), (35, B, 4))
    embed = embedder(lambda t: _unit(0.0) if t in (0, 10, 20) else _unit(np.pi / 2 + 0.1))
    turns = [Turn(0, 28, A), Turn(14.5, 17, B), Turn(30, 40, B)]
    exclusive = [Turn(0, 14.5, A), Turn(14.5, 17, B), Turn(17, 28, A), Turn(30, 40, B)]
    out = speakers_by_sentence(words, embed, turns=turns, exclusive=exclusive,
                               rule=VoiceRule(sure_support=0.9)).words
    assert {w.speaker for w in out if w.start == 5.0} == {A}  # A alone all through: sure
    assert {w.speaker for w in out if 15.0 <= w.start < 17} == {B}
    # with the gate off both move, as the voices say
    out = speakers_by_sentence(words, embed, turns=turns, exclusive=exclusive,
                               rule=VoiceRule(sure_support=1.01)).words
    assert {w.speaker for w in out if w.start in (5.0, 15.0)} == {B}


def test_a_group_as_near_its_own_speaker_as_another_stays():
    from speaker_asr.attribution.sentence_voices import VoiceRule

    # A's odd sentences (5, 15 s) lie between A's voice and B's: 0.7 from A's rest, 0.45 from B
    words = sentences((0, A, 4), (5, A, 4), (10, A, 4), (15, A, 4), (20, A, 4), (30, B, 4), (35, B, 4))
    a, b = _unit(0.0), _unit(1.3)
    odd = _unit(0.8)
    embed = embedder(lambda t: a if t in (0, 10, 20) else odd if t in (5, 15) else b)
    moved = speakers_by_sentence(words, embed, rule=VoiceRule(split_distance=0.25, split_gap=0.0, join_margin=0.0, sure_support=1.01)).words
    assert {w.speaker for w in moved if w.start in (5.0, 15.0)} == {B}
    kept = speakers_by_sentence(words, embed, rule=VoiceRule(split_distance=0.25, split_gap=0.0, join_margin=0.2, sure_support=1.01)).words
    assert [w.speaker for w in kept] == [w.speaker for w in words]


def test_a_split_needs_a_gap_past_the_spread_and_enough_sentences():
    from speaker_asr.attribution.sentence_voices import VoiceRule

    # one person whose short sentences wander (a shared voice, each sentence's own noise, and a
    # little of two moods): the two groups are 0.70 apart, each 0.65 spread inside
    words = sentences((0, A, 6), (5, A, 6), (10, A, 6), (15, A, 6), (20, A, 6), (25, A, 6))

    def wandering(t):
        v = np.zeros(9)
        i = int(t) // 5
        v[0], v[1 + i % 2], v[3 + i] = np.sqrt(0.30), np.sqrt(0.05), np.sqrt(0.65)
        return v

    embed = embedder(wandering)
    loose = VoiceRule(split_distance=0.6, split_gap=0.0, min_group_s=2.0)
    assert len({w.speaker for w in speakers_by_sentence(words, embed, rule=loose).words}) == 2
    for rule in (replace(loose, split_gap=0.15), replace(loose, min_group_units=4),
                 replace(loose, new_speakers=False), VoiceRule()):
        assert {w.speaker for w in speakers_by_sentence(words, embed, rule=rule).words} == {A}, rule
