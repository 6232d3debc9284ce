"""Appended frames -> 16 kHz float32 (speaker_asr/live/audio_format.py): the three formats, bad
frames refused, and frame-by-frame resampling equal to resampling the whole signal at once."""

from __future__ import annotations

import base64
import warnings

import numpy as np
import pytest
from scipy.signal import resample_poly

from speaker_asr.audio.decode import SAMPLE_RATE as SR
from speaker_asr.audio.resample import StreamResampler
from speaker_asr.errors import RequestError
from speaker_asr.live.audio_format import (ALAW, MULAW, AudioFormatError, FrameDecoder,
                                           frame_bytes, samples)
from speaker_asr.live.protocol import MAX_APPEND_BYTES, AudioFormat, ProtocolError


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def pcm16(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1 - 1 / 32768) * 32768).astype("<i2").tobytes()


def tone(seconds: float, rate: int, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def frames(x: np.ndarray, rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """``x`` cut at random places into ``count`` pieces (some of them one sample long)."""
    cuts = np.sort(rng.choice(np.arange(1, len(x)), size=count - 1, replace=False))
    return np.split(x, cuts)


# -- decoding one frame ----------------------------------------------------------------------------

def test_pcm_is_16_bit_little_endian_scaled_by_32768():
    raw = np.array([0, 16384, -32768, 32767, -1], dtype="<i2").tobytes()
    assert samples(raw, "audio/pcm").tolist() == [0.0, 0.5, -1.0, 32767 / 32768, -1 / 32768]
    assert samples(raw, "audio/pcm").dtype == np.float32
    assert samples(b"", "audio/pcm").size == 0


def test_g711_tables_are_the_standard_ones():
    # ITU-T G.711 corner values: mu-law 0x00/0x80 are the extremes, 0xFF/0x7F zero; A-law 0xD5/0x55
    # the smallest steps (+-8), 0xAA/0x2A the extremes (+-32256)
    assert (MULAW[0x00], MULAW[0x80], MULAW[0xFF], MULAW[0x7F]) == (-32124, 32124, 0, 0)
    assert (ALAW[0xD5], ALAW[0x55], ALAW[0xAA], ALAW[0x2A]) == (8, -8, 32256, -32256)
    # both tables are odd-symmetric (sign bit), strictly monotonic within a sign
    assert np.array_equal(MULAW[:128], -MULAW[128:])
    assert np.array_equal(ALAW[:128], -ALAW[128:])
    try:  # Python <= 3.12 still has audioop, the reference implementation
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import audioop
    except ImportError:
        return
    every = bytes(range(256))
    assert np.array_equal(MULAW, np.frombuffer(audioop.ulaw2lin(every, 2), dtype="<i2"))
    assert np.array_equal(ALAW, np.frombuffer(audioop.alaw2lin(every, 2), dtype="<i2"))


def test_g711_frames_decode_byte_by_byte():
    assert samples(bytes([0xFF, 0x80, 0x00]), "audio/pcmu").tolist() == [0.0, 32124 / 32768, -32124 / 32768]
    assert samples(bytes([0xD5, 0x2A]), "audio/pcma").tolist() == [8 / 32768, -32256 / 32768]


def test_bad_frames_say_what_is_expected():
    with pytest.raises(AudioFormatError, match="not valid base64.*standard alphabet, with padding") as caught:
        frame_bytes("not base64!")
    assert isinstance(caught.value, RequestError) and caught.value.param == "audio"
    with pytest.raises(AudioFormatError, match="not valid base64"):
        frame_bytes("AAA")  # missing padding
    with pytest.raises(AudioFormatError, match=r"2 bytes each, but this frame has 3 bytes \(an odd count\)"):
        samples(b"\x00\x01\x02", "audio/pcm")
    with pytest.raises(AudioFormatError, match="too large.*at most 15 MiB"):
        frame_bytes("A" * (MAX_APPEND_BYTES // 3 * 4 + 8))
    assert frame_bytes("") == b""
    # G.711 is one byte per sample: any count is whole samples
    assert samples(b"\x00\x01\x02", "audio/pcmu").size == 3


def test_a_bad_frame_becomes_an_error_event_for_the_append_that_sent_it():
    with pytest.raises(AudioFormatError) as caught:
        FrameDecoder("audio/pcm").decode(b64(b"\x00\x01\x02"))
    error = ProtocolError.from_request_error(caught.value, event_id="a9").event().to_json()["error"]
    assert error == {"type": "invalid_request_error", "code": "invalid_value", "param": "audio",
                     "event_id": "a9", "message": "audio/pcm is 16-bit samples, 2 bytes each, but this "
                                                  "frame has 3 bytes (an odd count): send whole samples."}


def test_a_bad_frame_leaves_the_stream_as_it_was():
    x = tone(0.2, 24000)
    decoder, clean = FrameDecoder("audio/pcm", 24000), FrameDecoder("audio/pcm", 24000)
    first, second = pcm16(x[:2400]), pcm16(x[2400:])
    got = [decoder.decode(b64(first))]
    with pytest.raises(AudioFormatError):
        decoder.decode(b64(second[:-1]))  # odd
    got += [decoder.decode(b64(second)), decoder.flush()]
    want = [clean.decode(b64(first)), clean.decode(b64(second)), clean.flush()]
    assert np.array_equal(np.concatenate(got), np.concatenate(want))


# -- the stream ------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", [24000, 8000, 44100])
def test_frame_by_frame_equals_resampling_the_whole_signal(rate):
    rng = np.random.default_rng(rate)
    x = (0.3 * rng.standard_normal(int(0.7 * rate)) + tone(0.7, rate)).astype(np.float32)
    resampler = StreamResampler(rate, SR)
    whole = resample_poly(x, resampler.up, resampler.down).astype(np.float32)
    for count in (1, 2, 37, 400):
        resampler = StreamResampler(rate, SR)
        out = np.concatenate([resampler.push(f) for f in frames(x, rng, count)] + [resampler.flush()])
        assert out.shape == whole.shape
        assert np.max(np.abs(out - whole)) <= 1e-6
    short = x[:2000]  # one sample per push
    one_by_one = StreamResampler(rate, SR)
    out = np.concatenate([one_by_one.push(short[i:i + 1]) for i in range(len(short))] + [one_by_one.flush()])
    assert np.max(np.abs(out - resample_poly(short, one_by_one.up, one_by_one.down))) <= 1e-6


def test_resampling_each_frame_alone_would_click_and_the_stream_does_not():
    """Why the stream exists: a 24 kHz tone cut into 20 ms frames, each resampled on its own,
    drops toward zero at every boundary (zero padding at both ends of each frame)."""
    x = tone(1.0, 24000)
    alone = np.concatenate([resample_poly(f, 2, 3) for f in np.split(x, 50)])
    reference = resample_poly(x, 2, 3)
    assert np.max(np.abs(alone - reference)) > 0.05  # audible clicks
    stream = StreamResampler(24000, SR)
    out = np.concatenate([stream.push(f) for f in np.split(x, 50)] + [stream.flush()])
    assert np.max(np.abs(out - reference)) <= 1e-6


def test_the_stream_holds_back_half_its_filter_and_keeps_little():
    for rate, frame, held_ms in ((24000, 480, 0.7), (8000, 160, 1.4)):
        stream = StreamResampler(rate, SR)
        sent = sum(len(stream.push(np.ones(frame, np.float32))) for _ in range(500))
        due = 500 * frame * 16000 // rate
        assert 0 < due - sent <= held_ms * 16
        assert len(stream._kept) <= 2 * stream.half_len  # memory does not grow with the session


def test_flush_ends_a_stream_and_the_next_starts_fresh():
    x = tone(0.1, 24000)
    stream = StreamResampler(24000, SR)
    first = np.concatenate([stream.push(x), stream.flush()])
    again = np.concatenate([stream.push(x), stream.flush()])
    assert np.array_equal(first, again) and len(first) == 1600
    assert stream.flush().size == 0


def test_16_khz_pcm_is_taken_as_it_is():
    x = tone(0.05, 16000)
    decoder = FrameDecoder("audio/pcm", 16000)
    out = decoder.decode(b64(pcm16(x)))
    assert np.max(np.abs(out - x)) <= 1 / 32768 and decoder.flush().size == 0


@pytest.mark.parametrize("fmt, encode", [
    ({"type": "audio/pcm"}, lambda x: pcm16(x)),
    ({"type": "audio/pcm", "rate": 16000}, lambda x: pcm16(x)),
    ({"type": "audio/pcmu"}, None),
    ({"type": "audio/pcma"}, None),
])
def test_every_session_format_gives_16_khz_audio_of_the_right_length(fmt, encode):
    fmt = AudioFormat.model_validate(fmt)
    decoder = FrameDecoder.for_format(fmt)
    rate = fmt.sample_rate
    if encode is None:  # G.711: a byte per sample, any bytes are valid
        raw = np.random.default_rng(1).integers(0, 256, size=rate // 2, dtype=np.uint8).tobytes()
    else:
        raw = encode(tone(0.5, rate))
    pieces = [raw[i:i + 320] for i in range(0, len(raw), 320)]  # 320 bytes: whole samples in every format
    out = np.concatenate([decoder.decode(b64(p)) for p in pieces] + [decoder.flush()])
    assert out.dtype == np.float32 and len(out) == 8000  # 0.5 s at 16 kHz


def test_a_tone_keeps_its_pitch_through_the_resampling():
    decoder = FrameDecoder("audio/pcm", 24000)
    x = tone(1.0, 24000, freq=1000.0)
    out = np.concatenate([decoder.decode(b64(pcm16(f))) for f in np.split(x, 100)] + [decoder.flush()])
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(np.argmax(spectrum) * 16000 / len(out) - 1000.0) <= 1.0


def test_unknown_formats_are_the_callers_mistake():
    with pytest.raises(ValueError, match="unknown audio format"):
        FrameDecoder("audio/wav")
    with pytest.raises(ValueError, match="not supported"):
        FrameDecoder("audio/pcm", 44100)
