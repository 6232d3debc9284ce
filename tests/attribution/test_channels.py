"""Channels as speakers, the pure part (speaker_asr/attribution/channels.py): which channel each
word belongs to, judged by the channels' levels, on hand-made signals and words."""

import numpy as np
import pytest

from speaker_asr.attribution import channels as ch
from speaker_asr.types import Segment, Word

SR = 16_000


def noise(seconds: float, level: float, seed: int) -> np.ndarray:
    return (level * np.random.default_rng(seed).standard_normal(int(seconds * SR))).astype(np.float32)


def two_people(seconds: float = 4.0, bleed: float = 0.1) -> np.ndarray:
    """Person 0 talks in 0-2 s, person 1 in 2-4 s; each bleeds into the other's channel."""
    a = np.concatenate([noise(2.0, 0.2, 1), np.zeros(int((seconds - 2.0) * SR), np.float32)])
    b = np.concatenate([np.zeros(int(2.0 * SR), np.float32), noise(seconds - 2.0, 0.2, 2)])
    return np.stack([a + bleed * b, b + bleed * a])


def levels(audio: np.ndarray) -> np.ndarray:
    return ch.frame_db(ch.frame_energy(audio, SR))


def test_a_silent_channel_is_found_and_a_quiet_one_is_not():
    audio = np.stack([noise(2.0, 0.1, 1), np.zeros(2 * SR, np.float32), noise(2.0, 0.003, 3)])
    assert ch.silent_channels(ch.frame_energy(audio, SR)) == [1]


def test_dominance_says_whose_voice_it_is():
    lv = levels(two_people())
    assert ch.dominance(lv, 0, 0.2, 1.8) == pytest.approx(20.0, abs=0.5)
    assert ch.dominance(lv, 1, 0.2, 1.8) == pytest.approx(-20.0, abs=0.5)
    assert ch.dominance(lv, 1, 2.2, 3.8) == pytest.approx(20.0, abs=0.5)


def test_bleed_is_dropped_where_the_louder_channel_has_the_word():
    lv = levels(two_people())
    units = [ch.Unit(0, " hello", 0.5, 0.9), ch.Unit(1, " hello", 0.52, 0.95)]
    assert ch.owners(units, lv) == [0, None]


def test_bleed_moves_to_the_louder_channel_when_its_own_decode_missed_it():
    lv = levels(two_people())
    units = [ch.Unit(1, " hello", 0.5, 0.9), ch.Unit(2 - 2, " other", 1.5, 1.8)]
    assert ch.owners(units, lv) == [0, 0]
    # two channels' copies of one missed word: moved once
    three = np.stack([*two_people(), 0.1 * two_people()[0]])
    units = [ch.Unit(1, " hello", 0.5, 0.9), ch.Unit(2, " hello", 0.45, 0.92)]
    assert ch.owners(units, levels(three)) == [0, None]


def test_two_people_at_once_are_both_kept_and_the_same_word_once():
    a, b = noise(2.0, 0.2, 1), noise(2.0, 0.15, 2)
    lv = levels(np.stack([a + 0.1 * b, b + 0.1 * a]))
    units = [ch.Unit(0, " yes", 0.5, 0.8), ch.Unit(1, " no", 0.5, 0.8)]
    assert ch.owners(units, lv) == [0, 1]
    # one word heard on two channels at the same level: kept once, on the lower channel
    same = levels(np.stack([a, a]))
    assert ch.owners([ch.Unit(0, " yes", 0.5, 0.8), ch.Unit(1, " Yes.", 0.55, 0.8)], same) == [0, None]


def test_a_word_on_two_channels_is_judged_where_its_exactly_timed_copy_is():
    """Person 1 says "right" at 2.2-2.5 s; the bleed's copy on channel 0 was stretched back over
    person 0's speech (Whisper's word times absorb what came before). Kept once, on channel 1, with
    the exact copy's time; a copy squeezed into an instant says nothing about where the word is."""
    lv = levels(two_people())
    units = [ch.Unit(0, " right", 0.8, 2.5), ch.Unit(1, " Right.", 2.2, 2.5)]
    assert ch.owners(units, lv) == [None, 1]
    assert ch.owners([ch.Unit(0, " right", 0.8, 2.5), ch.Unit(1, " right", 1.0, 1.0)], lv) == [0, None]
    one = [Segment(" right", 2.2, 2.5, "CHANNEL_1", [Word(" right", 2.2, 2.5, "CHANNEL_1")])]
    zero = [Segment(" hi right", 0.3, 2.45, "CHANNEL_0",
                    [Word(" hi", 0.3, 0.6, "CHANNEL_0"), Word(" right", 0.6, 2.45, "CHANNEL_0")])]
    out = ch.joined_segments([zero, one], lv)
    assert [(s.channel, s.text, s.start, s.end) for s in out] == [(0, " hi", 0.3, 0.6), (1, " right", 2.2, 2.5)]


def test_a_word_made_up_over_silence_is_dropped():
    audio = np.stack([np.concatenate([noise(1.0, 0.2, 1), np.zeros(SR, np.float32)]),
                      np.zeros(2 * SR, np.float32)])
    assert ch.owners([ch.Unit(0, " thanks", 1.2, 1.8), ch.Unit(0, " hi", 0.2, 0.5)], levels(audio)) == [None, 0]


def test_a_word_made_up_over_a_channels_hiss_is_dropped():
    """A line's or a microphone's noise (here -60 dB, above the absolute floor of digital
    silence) is not speech: a word over nothing but each channel's own hiss is dropped, a word
    over speech is kept."""
    hiss = [noise(3.0, 0.001, 5), noise(3.0, 0.001, 6)]
    speech = np.concatenate([noise(1.0, 0.2, 1), np.zeros(2 * SR, np.float32)])
    lv = levels(np.stack([speech + hiss[0], hiss[1] + 0.1 * speech]))
    assert ch.noise_floors(lv) == pytest.approx([-60.0, -60.0], abs=1.5)
    assert ch.owners([ch.Unit(0, " thanks", 1.5, 2.1), ch.Unit(1, " bye", 2.3, 2.8),
                      ch.Unit(0, " hi", 0.2, 0.5)], lv) == [None, None, 0]


def test_joined_segments_follow_time_across_channels_and_keep_only_own_words():
    lv = levels(two_people())
    zero = [Segment(" hello there", 0.2, 1.0, "CHANNEL_0",
                    [Word(" hello", 0.2, 0.5, "CHANNEL_0"), Word(" there", 0.5, 1.0, "CHANNEL_0")]),
            Segment(" fine", 2.3, 2.6, "CHANNEL_0", [Word(" fine", 2.3, 2.6, "CHANNEL_0")])]
    one = [Segment(" hello", 0.25, 0.5, "CHANNEL_1", [Word(" hello", 0.25, 0.5, "CHANNEL_1")]),
           Segment(" fine thanks", 2.2, 3.0, "CHANNEL_1",
                   [Word(" fine", 2.25, 2.6, "CHANNEL_1"), Word(" thanks", 2.6, 3.0, "CHANNEL_1")])]
    out = ch.joined_segments([zero, one], lv)
    assert [(s.channel, s.speaker, s.text) for s in out] == [
        (0, "CHANNEL_0", " hello there"), (1, "CHANNEL_1", " fine thanks")]
    assert all(w.channel == s.channel for s in out for w in s.words)


def test_words_of_several_channels_merge_in_time_order_each_channel_in_its_own():
    """A backchannel said over a long turn lands between the turn's words (the turn's segment is
    split around it), and a channel's words keep their order where its times step back (two
    windows of its decode meeting)."""
    a = np.zeros(3 * SR, np.float32)
    a[int(0.2 * SR):int(2.6 * SR)] = noise(2.4, 0.2, 1)
    b = np.zeros(3 * SR, np.float32)
    b[int(1.2 * SR):int(1.5 * SR)] = noise(0.3, 0.2, 2)
    lv = levels(np.stack([a + 0.1 * b, b + 0.1 * a]))
    words = [Word(" so", 0.2, 0.6, "CHANNEL_0"), Word(" we", 0.6, 0.9, "CHANNEL_0"),
             Word(" start", 1.6, 2.0, "CHANNEL_0")]
    zero = [Segment(" so we start", 0.2, 2.0, "CHANNEL_0", words),
            Segment(" now", 1.5, 2.4, "CHANNEL_0", [Word(" now", 1.5, 2.4, "CHANNEL_0")])]
    one = [Segment(" yes", 1.25, 1.45, "CHANNEL_1", [Word(" yes", 1.25, 1.45, "CHANNEL_1")])]
    out = ch.joined_segments([zero, one], lv)
    assert [(s.channel, s.text, s.start, s.end) for s in out] == [
        (0, " so we", 0.2, 0.9), (1, " yes", 1.25, 1.45), (0, " start", 1.6, 2.0), (0, " now", 1.5, 2.4)]


def test_a_moved_word_takes_the_speaker_of_its_new_channel_at_that_time():
    lv = levels(two_people())
    one = [Segment(" oops", 0.5, 0.9, "CHANNEL_1_SPEAKER_00",
                   [Word(" oops", 0.5, 0.9, "CHANNEL_1_SPEAKER_00")])]
    zero = [Segment(" hi", 1.5, 1.8, "CHANNEL_0_SPEAKER_01", [Word(" hi", 1.5, 1.8, "CHANNEL_0_SPEAKER_01")])]
    out = ch.joined_segments([zero, one], lv)
    assert [(s.channel, s.speaker, s.text) for s in out] == [
        (0, "CHANNEL_0_SPEAKER_01", " oops"), (0, "CHANNEL_0_SPEAKER_01", " hi")]


def test_speaker_names_go_in_channel_order():
    segs = [Segment(" b", 0.0, 1.0, "CHANNEL_2_SPEAKER_01", channel=2),
            Segment(" a", 1.0, 2.0, "CHANNEL_0_SPEAKER_00", channel=0),
            Segment(" c", 0.5, 1.0, "CHANNEL_2_SPEAKER_00", channel=2)]
    assert ch.channel_order(3, segs, diarized=False) == ("CHANNEL_0", "CHANNEL_1", "CHANNEL_2")
    assert ch.channel_order(3, segs, diarized=True) == (
        "CHANNEL_0_SPEAKER_00", "CHANNEL_2_SPEAKER_01", "CHANNEL_2_SPEAKER_00")

