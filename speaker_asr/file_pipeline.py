"""One recording's transcription on the models' threads, for
:meth:`speaker_asr.models.Models.transcribe`: the steps of speaker_asr/pipeline.py in their order

    known speakers' clips -> transcribe beside diarize -> attribute -> name known speakers

with the ASR on the ASR lane on the calling thread and the diarization (and every voice embedding)
on the diarization lane's pool, the whole as one scheduled job (speaker_asr/scheduling/: the
caller's, or a file job of its own). A ``multichannel`` recording takes the same way, each
channel a speaker (speaker_asr/multichannel.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Optional

import numpy as np

from speaker_asr.attribution.response import attribute_with_voices
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig
from speaker_asr.multichannel import Channels, channel_result, recording_language
from speaker_asr.pipeline import (failure_warnings, heard_nobody, is_silent, name_speakers,
                                  no_speech_warning, reference_voices)
from speaker_asr.progress import ProgressCallback
from speaker_asr.result import Result
from speaker_asr.types import Diarization, Transcript

logger = logging.getLogger("handler")


class FilePipeline:
    """The file pipeline over ``models`` (the :class:`~speaker_asr.models.Models` it serves: their
    ASR, diarizer, lock and settings) and their diarization thread (``diarization``, a
    :class:`~speaker_asr.models.DiarizationThread`). speaker_asr/models.py imports this module,
    so nothing here imports it."""

    def __init__(self, models, diarization):
        self.models, self.diarization = models, diarization

    def transcribe(self, audio: np.ndarray, config: InferenceConfig,
                   on_start: Optional[Callable[[], None]] = None,
                   progress: Optional[ProgressCallback] = None) -> Result:
        """As :meth:`speaker_asr.models.Models.transcribe` says: the known speakers' clips
        checked and embedded (a bad one refused before any decoding; ``on_start`` called after),
        the ASR beside the diarization, every word given a speaker, the known speakers named."""
        with self.models.scheduler.file_job():
            return self._transcribe(audio, config, on_start, progress)

    def _transcribe(self, audio: np.ndarray, config: InferenceConfig,
                    on_start: Optional[Callable[[], None]] = None,
                    progress: Optional[ProgressCallback] = None) -> Result:
        models = self.models
        channels = Channels.of(audio, config) if config.multichannel else None
        references = self.diarization.call(reference_voices, models.diarizer if models.has_voices else None,
                                           config)
        if on_start is not None:
            on_start()
        with_voices = references is not None or config.return_speaker_embeddings
        if channels is not None:
            transcripts, found_by_channel = self._hear_channels(audio, channels, config, with_voices, progress)
        elif is_silent(audio, config):  # nothing to transcribe: Whisper would only make something up
            transcript = Transcript("", [], config.language if models.asr.multilingual else "en")
            found = Diarization() if models.diarizer is not None else None
        else:
            transcript, found = self._transcribe_and_diarize(audio, config, with_voices, progress)
        if channels is not None:
            return channel_result(audio, channels, config, transcripts, found_by_channel, references, with_voices,
                                  multilingual=models.asr.multilingual, embed=models.embed,
                                  threshold=models.settings.speaker_match_threshold)
        warnings = failure_warnings(transcript, found)
        if found is not None and heard_nobody(found, transcript, config):
            warnings.append(no_speech_warning(transcript.text))
            transcript = replace(transcript, text="", chunks=[],
                                 words=[] if transcript.words is not None else None)
        result, voices = attribute_with_voices(transcript, len(audio) / SAMPLE_RATE, found,
                                               with_words=config.return_word_timestamps,
                                               embed=self._sentence_embedder(audio, found),
                                               max_speakers=config.num_speakers or config.max_speakers)
        if with_voices:
            result = name_speakers(result, voices, references, config,
                                   models.settings.speaker_match_threshold)
        return replace(result, warnings=warnings)

    def _transcribe_and_diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool,
                                progress: Optional[ProgressCallback] = None
                                ) -> tuple[Transcript, Optional[Diarization]]:
        """The ASR's transcript and, with a diarizer, what it found (a fault in it is the
        Diarization's ``error``)."""
        asr, diarizer = self.models.asr, self.models.diarizer
        diarize = None
        if diarizer is not None:
            def diarize():
                return diarizer.diarize(audio, config, with_voices, progress)
        # word timestamps drive speaker attribution; without diarization only when asked for
        return self.diarization.beside(
            lambda: asr.transcribe(audio, config, word_timestamps=diarize is not None
                                   or config.return_word_timestamps, progress=progress),
            diarize, lambda exc: Diarization(error=type(exc).__name__))

    def _hear_channels(self, audio: np.ndarray, channels: Channels, config: InferenceConfig,
                       with_voices: bool, progress: Optional[ProgressCallback]
                       ) -> tuple[dict[int, Transcript], Optional[dict[int, Diarization]]]:
        """Each heard channel transcribed on its own (batched side by side, ``progress`` hearing
        their windows) and, with ``diarize_channels``, diarized on the diarization thread beside
        the ASR (None: no diarization ran)."""
        asr, diarizer, heard = self.models.asr, self.models.diarizer, channels.heard
        diarize = None
        if config.diarize_channels and heard:
            def diarize():
                return {c: diarizer.diarize(audio[c], channels.config, with_voices) for c in heard}
        return self.diarization.beside(
            lambda: dict(zip(heard, asr.transcribe_many([audio[c] for c in heard],
                                                        recording_language(asr, audio, heard, config),
                                                        word_timestamps=True, progress=progress,
                                                        stop_loops=True))),
            diarize, lambda exc: {c: Diarization(error=type(exc).__name__) for c in heard})

    def _sentence_embedder(self, audio: np.ndarray, found: Optional[Diarization]
                           ) -> Optional[Callable[[list[tuple[float, float]]], list]]:
        """What embeds the sentences whose voices check the speakers (SENTENCE_VOICES), on the
        diarization thread; None where that check is off or cannot run. A fault in the
        embedding model leaves the speakers as the diarization gave them."""
        diarizer = self.models.diarizer
        if (not self.models.settings.sentence_voices or found is None or not found.turns
                or diarizer is None or not diarizer.has_voices):
            return None

        def embed_spans(spans: list[tuple[float, float]]) -> list:
            try:
                return self.diarization.call(diarizer.embed_spans, audio, spans)
            except Exception:
                logger.exception("sentence voices: the embedding failed; the speakers stay as found")
                return [None] * len(spans)

        return embed_spans


__all__ = ["FilePipeline"]
