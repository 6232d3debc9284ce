"""Appended audio frames -> 16 kHz float32 mono, frame by frame, as the live route receives them.

A Realtime client sends its audio in ``input_audio_buffer.append`` events, base64 bytes in the
session's format (:class:`speaker_asr.live.protocol.AudioFormat`):

* ``audio/pcm``: 16-bit little-endian mono, at 24000 Hz (the protocol's rate) or 16000 Hz (our
  extension: Whisper's rate, taken as it is);
* ``audio/pcmu`` / ``audio/pcma``: G.711 mu-law / A-law, one byte per sample at 8000 Hz,
  expanded by the standard tables (ITU-T G.711: the values Python's old ``audioop`` gives).

Samples are scaled to [-1, 1) by 32768 as :mod:`speaker_asr.audio.decode` reads 16-bit audio.

The resampling is scipy's ``resample_poly`` -- the same polyphase filter ``audio/decode.py``
uses for a file -- run on a buffered stream (:class:`speaker_asr.audio.resample.StreamResampler`), because resampling each
frame on its own would zero-pad both of its ends and click at every frame boundary. The stream
keeps the last few input samples; each frame's output is taken only where the filter sees real
input on both sides, so frame by frame gives the samples the whole signal resampled at once
gives (to float32 rounding), at a delay of half the filter (0.6 ms from 24 kHz, 1.3 ms from
8 kHz).

A frame that is not base64, or whose byte count is not whole 16-bit samples, is refused with a
:class:`AudioFormatError` saying what was expected; nothing of it is kept.

Pure: numpy and scipy, no torch.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.audio.resample import StreamResampler
from speaker_asr.errors import RequestError
from speaker_asr.live.protocol import AUDIO_FORMAT_TYPES, G711_RATE, MAX_APPEND_BYTES, PCM_RATES

PCM_TYPE, MULAW_TYPE, ALAW_TYPE = AUDIO_FORMAT_TYPES


class AudioFormatError(RequestError):
    """A frame that cannot be decoded; the message says why and what is expected. ``param`` is
    ``audio`` (the append event's field)."""

    def __init__(self, message: str):
        super().__init__(message, param="audio", code="invalid_value")


def frame_bytes(audio: str) -> bytes:
    """An append event's ``audio`` -> its bytes. Raises :class:`AudioFormatError` for text that
    is not base64 (standard alphabet, padded) or a frame over :data:`MAX_APPEND_BYTES`."""
    if len(audio) > math.ceil(MAX_APPEND_BYTES / 3) * 4:
        raise AudioFormatError(f"The audio frame is too large ({len(audio)} base64 characters): send at "
                               f"most {MAX_APPEND_BYTES // (1024 * 1024)} MiB of audio per "
                               "input_audio_buffer.append, in smaller frames.")
    try:
        return base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AudioFormatError(f"The audio frame is not valid base64 ({exc}): send the frame's bytes "
                               "base64-encoded (standard alphabet, with padding).") from None


def _mulaw_table() -> np.ndarray:
    """G.711 mu-law byte -> 16-bit sample (the complement-coded byte, 8 segments)."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 0x07, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    """G.711 A-law byte -> 16-bit sample (even bits inverted, sign bit set for positive)."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent, mantissa = (a >> 4) & 0x07, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8,
                         ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype(np.int16)


MULAW = _mulaw_table()
ALAW = _alaw_table()


def samples(raw: bytes, format_type: str) -> np.ndarray:
    """A frame's bytes -> float32 samples at the format's own rate. Raises
    :class:`AudioFormatError` for a PCM frame with an odd byte count."""
    if format_type == PCM_TYPE:
        if len(raw) % 2:
            raise AudioFormatError(f"audio/pcm is 16-bit samples, 2 bytes each, but this frame has "
                                   f"{len(raw)} bytes (an odd count): send whole samples.")
        pcm = np.frombuffer(raw, dtype="<i2")
    elif format_type == MULAW_TYPE:
        pcm = MULAW[np.frombuffer(raw, dtype=np.uint8)]
    elif format_type == ALAW_TYPE:
        pcm = ALAW[np.frombuffer(raw, dtype=np.uint8)]
    else:
        raise ValueError(f"unknown audio format {format_type!r}")  # events.py refuses it first
    return pcm.astype(np.float32) / 32768.0


class FrameDecoder:
    """One session's audio: append events' ``audio`` -> 16 kHz float32 mono, in order.
    :meth:`decode` validates the whole frame before keeping any of it; :meth:`flush` ends the
    stream (the session ends, or the client clears the buffer) and returns what the resampler
    still held. A format change is a new decoder."""

    def __init__(self, format_type: str = PCM_TYPE, rate: Optional[int] = None):
        if format_type == PCM_TYPE:
            rate = PCM_RATES[0] if rate is None else rate
            if rate not in PCM_RATES:
                raise ValueError(f"audio/pcm at {rate} Hz is not supported; rates: {PCM_RATES}")
        elif format_type in (MULAW_TYPE, ALAW_TYPE):
            rate = G711_RATE
        else:
            raise ValueError(f"unknown audio format {format_type!r}")
        self.format_type, self.rate = format_type, rate
        self.resampler = StreamResampler(rate, SAMPLE_RATE)

    @classmethod
    def for_format(cls, fmt) -> "FrameDecoder":
        """From a session's :class:`speaker_asr.live.protocol.AudioFormat`."""
        return cls(fmt.type, fmt.sample_rate)

    def decode(self, audio: str) -> np.ndarray:
        """One append event's ``audio`` -> the 16 kHz samples it completes."""
        return self.resampler.push(samples(frame_bytes(audio), self.format_type))

    def flush(self) -> np.ndarray:
        return self.resampler.flush()
