"""Audio bytes -> 16 kHz mono float32 (or, for ``multichannel``, one row per channel), decoded
once and shared by ASR and diarization.

libsndfile (soundfile) reads WAV in any encoding (PCM 8/16/24/32, float, mu-law, A-law), FLAC,
Ogg Vorbis/Opus and MP3 without ffmpeg. Everything else (m4a/AAC, webm, AMR, ...) and anything
libsndfile refuses goes through the ``ffmpeg`` command when it is installed. Stereo and
multi-channel audio is averaged to mono unless the channels are asked for (``channels=True``:
each channel its own row, none averaged); any sample rate is resampled (polyphase filter). There
is deliberately no ``sampling_rate`` parameter: the rate comes from the file, so ASR and
diarization can never disagree about time. No torch import.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import subprocess
import tempfile
from typing import Optional

import numpy as np

from speaker_asr.audio.resample import resample
from speaker_asr.error_text import too_many_channels_text
from speaker_asr.errors import RequestError

SAMPLE_RATE = 16_000
# sample rates a real recording can have (telephony 1-8 kHz up to studio 768 kHz)
MIN_RATE, MAX_RATE = 1_000, 768_000
FFMPEG_TIMEOUT_S = 300


class AudioDecodeError(RequestError):
    """The bytes are not audio we can read; the message says why and what is accepted."""


ACCEPTED = ("WAV (PCM, float, mu-law, A-law), FLAC, MP3, Ogg Vorbis/Opus; with ffmpeg installed "
            "also M4A/AAC, WebM, AMR and most other audio containers")


def _finish(audio: np.ndarray, sr: int, channels: bool = False) -> np.ndarray:
    """Mono (``channels``: ``(channels, samples)``, every channel kept), finite, 16 kHz, within
    [-1, 1]; works in place on ``audio`` (the decoder's own buffer, ``(samples, channels)``), so a
    long recording is held once more at most while it is downmixed or resampled (its channels
    kept: once more, and one channel besides)."""
    if audio.ndim == 1:
        audio = audio[:, None]
    if channels:  # one channel in hand at a time, written into the output as it is finished
        out = np.zeros((audio.shape[1], 0), dtype=np.float32)
        for c in range(audio.shape[1]):
            row = _finite_16k(np.ascontiguousarray(audio[:, c]), sr)
            if c == 0:
                out = np.empty((audio.shape[1], len(row)), dtype=np.float32)
            out[c] = row
    else:
        mono = audio.mean(axis=1, dtype=np.float32) if audio.shape[1] > 1 else audio[:, 0]
        out = _finite_16k(mono, sr)
    # float WAVs may hold values far outside [-1, 1]; keep the waveform in range (one gain for
    # every channel: their levels relative to each other say whose voice is where)
    peak = max(float(out.max()), -float(out.min())) if out.size else 0.0
    if peak > 1.0:
        out /= peak
    return np.ascontiguousarray(out, dtype=np.float32)


def _finite_16k(audio: np.ndarray, sr: int) -> np.ndarray:
    """One channel, float32, NaN and infinities zeroed (in place, a piece at a time: numpy's
    temporaries stay small), at 16 kHz."""
    audio = audio.astype(np.float32, copy=False)
    for start in range(0, len(audio), 1 << 20):
        np.nan_to_num(audio[start:start + (1 << 20)], copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return resample(audio, sr, SAMPLE_RATE)


def _check_channels(count: int, max_channels: Optional[int]) -> None:
    if max_channels is not None and count > max_channels:
        raise AudioDecodeError(too_many_channels_text(count, max_channels))


def _decode_soundfile(data: bytes, max_duration_s: Optional[float], channels: bool = False,
                      max_channels: Optional[int] = None) -> Optional[np.ndarray]:
    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            sr = f.samplerate
            if not MIN_RATE <= sr <= MAX_RATE:
                raise AudioDecodeError(f"the audio header declares an implausible sample rate ({sr} Hz); "
                                       f"accepted: {MIN_RATE} to {MAX_RATE} Hz")
            frames = f.frames
            if channels:
                _check_channels(f.channels, max_channels)
            if max_duration_s is not None and frames > 0 and frames / sr > max_duration_s:
                raise AudioDecodeError(
                    f"audio is {frames / sr:.1f} s long; the limit is {max_duration_s:.0f} s")
            # read block by block into one buffer, held once: sized from the header but never past
            # the duration limit (or 10 minutes without one), grown while the data goes on
            limit = None if max_duration_s is None else int(math.ceil(max_duration_s * sr)) + 1
            capacity = max(frames, 0)
            capacity = min(capacity, limit if limit is not None else sr * 600)
            audio = np.empty((max(capacity, sr), f.channels), dtype=np.float32)
            total = 0
            for block in f.blocks(blocksize=sr * 30, dtype="float32", always_2d=True):
                if limit is not None and total + len(block) > limit:
                    raise AudioDecodeError(f"audio is longer than the limit of {max_duration_s:.0f} s")
                if total + len(block) > len(audio):
                    grown = np.empty((max(2 * len(audio), total + len(block)), f.channels), dtype=np.float32)
                    grown[:total] = audio[:total]
                    audio = grown
                audio[total:total + len(block)] = block
                total += len(block)
    except AudioDecodeError:
        raise
    except Exception:  # libsndfile refused the format or the data is damaged: try ffmpeg
        return None
    return _finish(audio[:total], sr, channels)


def _decode_ffmpeg(data: bytes, max_duration_s: Optional[float], channels: bool = False,
                   max_channels: Optional[int] = None) -> np.ndarray:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioDecodeError(
            f"could not decode the audio: the format is not one libsndfile reads ({ACCEPTED}); "
            "install ffmpeg on the server to accept M4A/WebM/AMR and other containers")
    # a temporary file, not a pipe: MP4/M4A keep their index at the end of the file
    with tempfile.NamedTemporaryFile(suffix=".audio", delete=False) as tmp:
        tmp.write(data)
        path = tmp.name
    try:
        cmd = [ffmpeg, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", path, "-map", "0:a:0",
               "-vn", "-ar", str(SAMPLE_RATE)]
        # the channels kept: a float WAV in a file (its header says how many); else mono samples
        cmd += ["-c:a", "pcm_f32le", "-f", "wav", "-y"] if channels else ["-ac", "1", "-f", "f32le"]
        if max_duration_s is not None:
            cmd += ["-t", f"{max_duration_s + 1:.3f}"]
        cmd.append(path + ".wav" if channels else "pipe:1")
        try:
            # its own session: a Ctrl-C meant for a batch run (which finishes the recording in hand)
            # must not kill the decoder under it
            proc = subprocess.run(cmd, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            raise AudioDecodeError(f"decoding the audio took longer than {FFMPEG_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            reason = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            reason = reason[-1] if reason else f"ffmpeg exit code {proc.returncode}"
            reason = reason.replace(path, "<input>")
            raise AudioDecodeError(f"could not decode the audio ({reason}); accepted: {ACCEPTED}")
        if channels:
            import soundfile as sf

            with sf.SoundFile(path + ".wav") as f:
                _check_channels(f.channels, max_channels)
                audio = f.read(dtype="float32", always_2d=True)
        else:
            audio = np.frombuffer(proc.stdout, dtype="<f4").copy()
    finally:
        for leftover in (path, path + ".wav"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    if max_duration_s is not None and len(audio) > max_duration_s * SAMPLE_RATE:
        raise AudioDecodeError(f"audio is longer than the limit of {max_duration_s:.0f} s")
    return _finish(audio, SAMPLE_RATE, channels)


def decode_audio(data: bytes, max_duration_s: Optional[float] = None, channels: bool = False,
                 max_channels: Optional[int] = None) -> np.ndarray:
    """Decode audio file bytes to 16 kHz mono float32 in [-1, 1]; ``channels``: every channel
    kept, shape ``(channels, samples)`` (a mono file gives one row), refused beyond
    ``max_channels`` before the samples are read where the header says.

    Raises :class:`AudioDecodeError` (a :class:`~speaker_asr.errors.RequestError`) when the bytes are not decodable audio or
    the audio is longer than ``max_duration_s``.
    """
    if not data:
        raise AudioDecodeError("no audio: the input is empty")
    audio = _decode_soundfile(data, max_duration_s, channels, max_channels)
    if audio is None:
        audio = _decode_ffmpeg(data, max_duration_s, channels, max_channels)
    elif audio.size == 0 and len(data) > 4096:
        # a header that claims no samples in front of real data (a recorder that never finalised
        # its WAV header): ffmpeg reads on to the end of the file
        try:
            audio = _decode_ffmpeg(data, max_duration_s, channels, max_channels)
        except AudioDecodeError:
            pass
    return audio
