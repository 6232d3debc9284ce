"""A ``multichannel`` recording, each channel a speaker: which channels are heard, the language
the ASR decodes them in, and the one :class:`~speaker_asr.result.Result` made of their
transcripts -- each channel's words given its label (or, with ``diarize_channels``, the speakers
its own diarization found), every word kept once, on the channel whose voice it is
(speaker_asr/attribution/channels.py).

:class:`speaker_asr.file_pipeline.FilePipeline` runs the models (on its threads) between
:meth:`Channels.of` and :func:`channel_result`; nothing here runs a model but ``embed``, the
function it is handed for a channel speaker's voice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np

from speaker_asr.attribution import channels as ch
from speaker_asr.attribution.response import attribute
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import MAX_CHUNK_LENGTH_S, InferenceConfig
from speaker_asr.pipeline import failure_warnings, name_speakers
from speaker_asr.result import Result
from speaker_asr.types import Diarization, Transcript, Turn


@dataclass
class Channels:
    """A multichannel recording before its models run: how many channels, its duration, each
    channel's frame energy, the silent channels (skipped) and those heard, and ``config`` as each
    channel's own diarization takes it."""

    count: int
    duration: float
    energy: np.ndarray
    silent: set[int]
    heard: list[int]
    config: InferenceConfig

    @classmethod
    def of(cls, audio: np.ndarray, config: InferenceConfig) -> "Channels":
        """``audio`` is ``(channels, samples)``; RequestError for more channels than a request
        may have."""
        count = audio.shape[0]
        config.check_channels(count)
        energy = ch.frame_energy(audio, SAMPLE_RATE)
        silent = set(ch.silent_channels(energy))
        return cls(count, audio.shape[1] / SAMPLE_RATE, energy, silent,
                   [c for c in range(count) if c not in silent],
                   config.model_copy(update=config.channel_speakers(count)))


def recording_language(asr, audio: np.ndarray, heard: list[int], config: InferenceConfig) -> InferenceConfig:
    """``config`` with the recording's language (detected by ``asr`` on its ``heard`` channels'
    first window, summed) where none is given and the model is multilingual: detected channel by
    channel, a channel holding mostly the others' bleed, its own person quiet, took another
    language (whisper base wrote Welsh for one of an English meeting's channels). The caller holds
    the models' lock."""
    if config.language is not None or not asr.multilingual or len(heard) < 2:
        return config
    first = audio[heard, :int(MAX_CHUNK_LENGTH_S * SAMPLE_RATE)]
    language = asr.detect_language(first.mean(axis=0))
    return config.model_copy(update={"language": language}) if language else config


def channel_speakers(channel: int, duration: float, found: Optional[Diarization]) -> Diarization:
    """Who speaks on one channel: the channel itself, the whole time (no diarization asked
    for, or it failed), else the speakers its diarization found, labelled by channel."""
    if found is None or found.error is not None or not found.turns:
        whole = [Turn(0.0, duration, ch.channel_label(channel))]
        return Diarization(whole, whole)

    def label(t: Turn) -> Turn:
        return Turn(t.start, t.end, ch.channel_speaker_label(channel, t.speaker))

    return Diarization([label(t) for t in found.turns],
                       None if found.exclusive_turns is None else [label(t) for t in found.exclusive_turns],
                       {ch.channel_speaker_label(channel, k): v for k, v in found.voices.items()})


def channel_voice(samples: np.ndarray, channel: int, segments: list,
                  embed: Callable[[np.ndarray], Optional[np.ndarray]]) -> Optional[list[float]]:
    """The voice of one channel's speaker: its kept words' audio embedded (None: too little)."""
    spans = [(w.start, w.end) for s in segments if s.channel == channel
             for w in (s.words or [s]) if w.start is not None and w.end is not None]
    if not spans:
        return None
    own = np.concatenate([samples[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)] for a, b in spans])
    vector = embed(own) if own.size else None
    return None if vector is None else [float(x) for x in vector]


def channel_result(audio: np.ndarray, channels: Channels, config: InferenceConfig,
                   transcripts: dict[int, Transcript], found: Optional[dict[int, Diarization]],
                   references: Optional[dict], with_voices: bool, *, multilingual: bool,
                   embed: Callable[[np.ndarray], Optional[np.ndarray]], threshold: float) -> Result:
    """The recording's Result from its heard channels' ``transcripts`` and (``diarize_channels``)
    each one's diarization (``found``; None: none ran): the channels' segments joined, the warnings
    of each channel, ``with_voices`` the speakers' voices (``embed``) and the known ones named
    (``references``, at the request's threshold or ``threshold``)."""
    found = found or {}
    heard, duration = channels.heard, channels.duration
    warnings = [ch.silent_channel_warning(c) for c in sorted(channels.silent)]
    results: dict[int, Result] = {}
    voices: dict[str, Optional[list[float]]] = {}
    for c in heard:
        warnings += [f"channel {c}: {w}" for w in failure_warnings(transcripts[c], found.get(c))]
        speakers = channel_speakers(c, duration, found.get(c))
        results[c] = attribute(transcripts[c], duration, speakers, with_words=True)
        voices.update(speakers.voices)
    per_channel = [results[c].segments if c in results else [] for c in range(channels.count)]
    segments = ch.joined_segments(per_channel, ch.frame_db(channels.energy))
    warnings += [ch.only_bleed_warning(c) for c in heard if not any(s.channel == c for s in segments)]
    spoken = list(results.values())
    result = Result(
        text="".join(s.text for s in segments).strip(), segments=segments,
        language=max(spoken, key=lambda r: sum(len(s.words) or 1 for s in r.segments)).language
        if spoken else (config.language if multilingual else "en"),
        duration=round(duration, 3), alignment=spoken[0].alignment if spoken else "word",
        diarized=True, with_words=config.return_word_timestamps,
        assisted=spoken[0].assisted if spoken else None, channels=channels.count,
        speaker_order=ch.channel_order(channels.count, segments, config.diarize_channels))
    if with_voices:
        if not config.diarize_channels:
            voices = {ch.channel_label(c): channel_voice(audio[c], c, segments, embed) for c in heard}
        result = name_speakers(result, voices, references, config, threshold)
    if not config.return_word_timestamps:  # after the voices: they are embedded from the words
        result = replace(result, segments=[replace(s, words=[]) for s in result.segments])
    return replace(result, warnings=warnings)


__all__ = ["Channels", "channel_result", "channel_speakers", "channel_voice", "recording_language"]
