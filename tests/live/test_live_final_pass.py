"""The pure parts of a live session's final pass (speaker_asr/live/final_pass.py): the audio kept
for it, and the offline speakers' labels put onto the live session's, from hand-made spans."""

from __future__ import annotations

import numpy as np
import pytest

from speaker_asr.live.final_pass import KeptAudio, overflow_warning, overlaps, speaker_mapping

SR = 16_000


def test_kept_audio_is_16_bit_bounded_and_counts_what_it_dropped():
    kept = KeptAudio(origin=8000, limit=SR)
    kept.append(np.full(SR // 2, 0.5, np.float32))
    kept.append(np.full(SR, -1.0, np.float32))
    assert kept.samples == SR and kept.dropped == SR // 2 and kept.nbytes == 2 * SR
    assert all(c.dtype == np.int16 for c in kept.chunks)
    audio = kept.audio()
    assert audio.dtype == np.float32 and len(audio) == SR
    assert audio[0] == 0.5 and audio[-1] == -1.0  # exact at the decoder's scale (1/32768)
    assert kept.seconds == 1.0


def test_cleared_audio_is_silenced_in_place_across_chunks():
    kept = KeptAudio(origin=100, limit=10 * SR)
    for _ in range(3):
        kept.append(np.full(10, 0.25, np.float32))
    kept.silence_from(100 + 15)  # clock sample 115: the middle of the second chunk
    audio = kept.audio()
    assert audio[:15].all() and not audio[15:].any()
    kept.silence_from(50)  # before the origin: all of it
    assert not kept.audio().any()
    with pytest.raises(ValueError, match="limit"):
        KeptAudio(0, -1)


def test_overlaps_add_up_per_pair_and_skip_spans_without_a_speaker():
    offline = [(0.0, 2.0, "A"), (3.0, 4.0, "A"), (2.0, 3.0, None)]
    live = [(1.0, 3.5, "S0"), (0.0, 1.0, None)]
    assert overlaps(offline, live) == {("A", "S0"): pytest.approx(1.5)}


def test_each_offline_speaker_takes_the_live_label_it_shares_most_time_with():
    offline = [(0, 2, "SPEAKER_00"), (2, 4, "SPEAKER_01"), (4, 6, "SPEAKER_00")]
    live = [(0, 2, "SPEAKER_01"), (2, 4, "SPEAKER_00"), (4, 6, "SPEAKER_01")]
    assert speaker_mapping(offline, live, ["SPEAKER_00", "SPEAKER_01"]) == {
        "SPEAKER_00": "SPEAKER_01", "SPEAKER_01": "SPEAKER_00"}


def test_the_assignment_is_one_to_one_by_total_overlap():
    # B shares most with S0 alone, but A has nowhere else to go: A -> S0, B -> S1 (3 + 2 > 4 + 0)
    offline = [(0, 3, "A"), (3, 7, "B"), (7, 9, "B")]
    live = [(0, 7, "S0"), (7, 9, "S1")]
    assert speaker_mapping(offline, live, ["A", "B"]) == {"A": "S0", "B": "S1"}


def test_a_speaker_only_the_offline_pass_found_gets_a_label_no_live_speaker_had():
    live = [(0, 2, "SPEAKER_00"), (2, 4, "SPEAKER_01")]
    offline = [(0, 2, "SPEAKER_01"), (2, 4, "SPEAKER_02"), (5, 6, "SPEAKER_00")]
    mapping = speaker_mapping(offline, live, ["SPEAKER_01", "SPEAKER_02", "SPEAKER_00"])
    assert mapping == {"SPEAKER_01": "SPEAKER_00", "SPEAKER_02": "SPEAKER_01", "SPEAKER_00": "SPEAKER_02"}
    # its own label, when free, is kept (left out of the mapping)
    assert speaker_mapping([(0, 2, "SPEAKER_00"), (5, 6, "SPEAKER_03")], [(0, 2, "SPEAKER_00")],
                           ["SPEAKER_00", "SPEAKER_03"]) == {}


def test_known_names_stay_and_are_given_to_no_one_else():
    live = [(0, 2, "Alice"), (2, 4, "SPEAKER_00")]
    offline = [(0, 2, "Alice"), (2, 4, "SPEAKER_00"), (4, 5, "SPEAKER_01")]
    assert speaker_mapping(offline, live, ["Alice", "SPEAKER_00", "SPEAKER_01"], keep={"Alice"}) == {}
    # a voice the offline pass did not match takes the name the live session gave it
    assert speaker_mapping([(0, 2, "SPEAKER_00")], [(0, 2, "Bob")], ["SPEAKER_00"]) == {"SPEAKER_00": "Bob"}


def test_no_live_segments_leave_the_offline_labels_as_they_are():
    assert speaker_mapping([(0, 1, "SPEAKER_00"), (1, 2, "SPEAKER_01")], [], ["SPEAKER_00", "SPEAKER_01"]) == {}


def test_the_overflow_warning_says_what_is_covered_and_why():
    text = overflow_warning(3600.0, 12.4)
    assert "first 3600 s" in text and "12 s" in text and "LIVE_MAX_SESSION_S" in text
