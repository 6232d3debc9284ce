"""One request's steps, on the models loaded once and handed in:

    known speakers' clips -> transcribe beside diarize -> attribute -> name known speakers

:class:`Pipeline` runs them for :class:`~speaker_asr.endpoint.EndpointHandler` (which validates the
request and decodes the audio before, and renders the :class:`~speaker_asr.result.Result` after).
It takes the models as arguments, so a test hands in its own (tiny random ones, or a stand-in for
the diarization) instead of patching this module. Each step is a function of its own; the warnings
are written by the small functions at the end.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any, Callable, Optional

import numpy as np

from speaker_asr.attribution.naming import name_known_speakers
from speaker_asr.attribution.response import attribute, rename_speakers, speaker_labels
from speaker_asr.attribution.turns import one_at_a_time
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import DEFAULT_SPEAKER_MATCH_THRESHOLD, InferenceConfig, ModelCapabilities
from speaker_asr.diarization.pipeline import diarize
from speaker_asr.errors import RequestError
from speaker_asr.progress import DiarizationHook, ProgressCallback
from speaker_asr.result import Result
from speaker_asr.types import Diarization, Transcript

logger = logging.getLogger("handler")

# peak amplitude below which audio is digital silence (-80 dBFS)
SILENCE_PEAK = 1e-4
# the warm-up at load (Pipeline.warm_up, WARMUP): this much made-up audio, and at most this many
# tokens decoded from it (whisper base wrote "Hmm hmm ..." up to its 448-token limit on it, tens
# of seconds on a CPU: the warm-up's point is the libraries' set-up, not the text)
WARM_UP_SECONDS = 2.0
WARM_UP_MAX_NEW_TOKENS = 16


class Pipeline:
    """``pipeline(audio, config) -> Result`` for 16 kHz mono audio and a request's validated
    parameters. ``asr``: a :class:`~speaker_asr.asr.transcriber.WhisperTranscriber`;
    ``diarization``: a pyannote pipeline (None: no speakers); ``voices``: its
    :class:`~speaker_asr.diarization.embeddings.SpeakerVoices` (None: no known speakers);
    ``match_threshold``: the similarity a speaker needs to take a known name when the request
    gives none; ``diarization_stream``: a CUDA stream for the diarization (None: the device's
    default stream, which the ASR uses too). Not for two requests at once (the handler holds a
    lock)."""

    def __init__(self, asr, diarization=None, voices=None,
                 match_threshold: float = DEFAULT_SPEAKER_MATCH_THRESHOLD, diarization_stream=None):
        self.asr, self.diarization, self.voices = asr, diarization, voices
        self.match_threshold = match_threshold
        self.diarization_stream = diarization_stream
        # the diarization runs on its own thread beside the ASR (torch releases the GIL), so a
        # request costs about the longer of the two rather than their sum
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diarization") \
            if diarization is not None else None

    def __call__(self, audio: np.ndarray, config: InferenceConfig,
                 on_start: Optional[Callable[[], None]] = None,
                 progress: Optional[ProgressCallback] = None) -> Result:
        """The request's Result. ``on_start`` is called once its inputs are checked (the known
        speakers' clips embedded), before transcription and diarization start. ``progress`` is
        called as the ASR decodes its windows (on this thread) and as the diarization goes
        through its steps (on the worker thread, at the same time): it must be thread-safe
        (``progress.RequestProgress`` is)."""
        # known speakers' clips are checked and embedded before any decoding, so a bad clip is
        # refused at once (embeddings are cached by the clip's bytes)
        references = reference_voices(self.voices, config)
        if on_start is not None:
            on_start()
        with_voices = references is not None or config.return_speaker_embeddings
        if is_silent(audio, config):  # nothing to transcribe: Whisper would only make something up
            transcript = Transcript("", [], config.language if self.asr.multilingual else "en")
            found = Diarization() if self.diarization is not None else None
        else:
            transcript, found = self._transcribe_and_diarize(audio, config, with_voices, progress)
        warnings = failure_warnings(transcript, found)
        if found is not None and heard_nobody(found, transcript, config):
            warnings.append(no_speech_warning(transcript.text))
            transcript = replace(transcript, text="", chunks=[],
                                 words=[] if transcript.words is not None else None)
        result = attribute(transcript, len(audio) / SAMPLE_RATE, found,
                           with_words=config.return_word_timestamps)
        if with_voices:
            threshold = (config.speaker_match_threshold if config.speaker_match_threshold is not None
                         else self.match_threshold)
            result = name_known_speakers(result, found.voices, references, threshold,
                                         config.return_speaker_embeddings)
        return replace(result, warnings=warnings)

    def beside(self, fn: Callable[[], Any]) -> Future:
        """``fn()`` on the diarization's thread, where a request's diarization runs beside its
        ASR (the live sessions' speaker work runs there, beside their decodes)."""
        if self._worker is None:
            raise RuntimeError("no diarization pipeline is loaded")
        return self._worker.submit(fn)

    def warm_up(self, capabilities: ModelCapabilities, audio: Optional[np.ndarray] = None
                ) -> dict[str, float]:
        """Run the models once on ``audio`` (default :func:`warm_up_audio`) as a diarized request
        runs them, so that the libraries' lazy set-up (cuBLAS and cuDNN handles, kernel choice,
        the memory pool on a GPU) is paid at load instead of by the first request: one plain
        decode, one assisted decode when an assistant is loaded (word timestamps on, at most
        :data:`WARM_UP_MAX_NEW_TOKENS` tokens, a request's defaults otherwise), then the
        diarization on the worker thread that requests use (:func:`diarize_speakers`, through the
        patched pyannote pipeline). Seconds per part (``plain``, ``assisted``, ``diarization``).

        Nothing a request's statistics count sees it: the decodes are not timed for
        ``assisted="auto"`` (``record=False``), no progress is reported, and the server's metrics
        count requests only. What the models make of the audio is not looked at (random test
        models write anything, or nothing); an exception in a model propagates."""
        audio = warm_up_audio() if audio is None else audio
        seconds: dict[str, float] = {}
        for assisted in (False, True) if capabilities.has_assistant else (False,):
            config = InferenceConfig.from_request({"assisted": assisted}, capabilities)
            started = time.perf_counter()
            self.asr.transcribe(audio, config, word_timestamps=True, record=False,
                                max_new_tokens=WARM_UP_MAX_NEW_TOKENS)
            seconds["assisted" if assisted else "plain"] = time.perf_counter() - started
        if self.diarization is not None:
            config = InferenceConfig.from_request({}, capabilities)
            started = time.perf_counter()
            self._worker.submit(self._diarize, audio, config, False, None).result()
            seconds["diarization"] = time.perf_counter() - started
        return seconds

    def _transcribe_and_diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool,
                                progress: Optional[ProgressCallback] = None
                                ) -> tuple[Transcript, Optional[Diarization]]:
        """The ASR's transcript and, with a diarization pipeline, what it found (a fault in it is
        the Diarization's ``error``: the transcript is still worth returning)."""
        pending = None
        if self.diarization is not None:
            pending = self._worker.submit(self._diarize, audio, config, with_voices, progress)
        try:
            # word timestamps drive speaker attribution; without diarization only when asked for
            transcript = self.asr.transcribe(audio, config, word_timestamps=pending is not None
                                             or config.return_word_timestamps, progress=progress)
        finally:
            if pending is not None:  # the worker is never left running into the next request
                wait([pending])
        if pending is None:
            return transcript, None
        try:
            return transcript, pending.result()
        except Exception as exc:  # a fault in the model, not in the request: keep the transcript
            logger.exception("diarization failed")
            return transcript, Diarization(error=type(exc).__name__)

    def _diarize(self, audio: np.ndarray, config: InferenceConfig, with_voices: bool,
                 progress: Optional[ProgressCallback]) -> Diarization:
        """:func:`diarize_speakers` on the worker thread, on :attr:`diarization_stream` if set."""
        stream = self.diarization_stream
        if stream is None:
            return diarize_speakers(self.diarization, self.voices, audio, config, with_voices, progress)
        import torch

        with torch.cuda.stream(stream):
            found = diarize_speakers(self.diarization, self.voices, audio, config, with_voices, progress)
        stream.synchronize()
        return found


def warm_up_audio(seconds: float = WARM_UP_SECONDS) -> np.ndarray:
    """Made-up voiced sound for the warm-up, the same every time: a 140 Hz buzz with its first
    harmonics, its pitch wavering, opened and closed four times a second like syllables, over a
    little noise (16 kHz mono float32). pyannote's segmentation-3.0 hears one speaker in its 1-3 s
    (from 2 s on, one long enough for the clustering step to train on: shorter audio, or two
    voices heard at once, leave it none, and numpy warns of an empty mean)."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    phase = 2 * np.pi * np.cumsum(140.0 + 15.0 * np.sin(2 * np.pi * 3.0 * t)) / SAMPLE_RATE
    voiced = sum(np.sin(k * phase) / k for k in range(1, 6))
    syllables = 0.5 - 0.5 * np.cos(2 * np.pi * 4.0 * t)
    noise = np.random.default_rng(0).standard_normal(len(t))
    audio = 0.1 * voiced * syllables + 0.003 * noise
    return audio.astype(np.float32)


def is_silent(audio: np.ndarray, config: InferenceConfig) -> bool:
    """No audio, or (with ``vad_filter``) digital silence."""
    return len(audio) == 0 or (config.vad_filter and float(np.max(np.abs(audio))) < SILENCE_PEAK)


def reference_voices(voices, config: InferenceConfig) -> Optional[dict[str, list[float]]]:
    """Known name -> its reference's voice vector as a list (None when no known speakers are asked
    for); raises RequestError for a clip that cannot serve, or when the diarization has no
    embedding model to compare voices with."""
    wanted = config.known_speaker_names is not None or config.return_speaker_embeddings
    if wanted and voices is None:
        raise RequestError("known speakers and speaker embeddings are not available: the "
                           "diarization pipeline has no speaker embedding model")
    if config.known_speaker_names is None:
        return None
    try:
        return {name: voices.reference(i, name, ref).tolist() for i, (name, ref) in
                enumerate(zip(config.known_speaker_names, config.known_speaker_references))}
    except RequestError as exc:
        exc.param = exc.param or "known_speaker_references"
        raise


def diarize_speakers(pipeline, voices, audio: np.ndarray, config: InferenceConfig,
                     with_voices: bool, progress: Optional[ProgressCallback] = None) -> Diarization:
    """The diarization of ``audio``, speakers labelled SPEAKER_00, SPEAKER_01, ... in order of
    first appearance in the exclusive turns (derived from the turns for pyannote 3.x; any speaker
    only in the overlapping turns after them); ``with_voices``, each speaker's voice from those
    exclusive turns (no overlapped speech). ``progress`` hears pyannote's steps.
    A fault in the embedding model is the result's ``embedding_error`` (the speakers stay, without
    voices)."""
    found = diarize(pipeline, audio, num_speakers=config.num_speakers,
                    min_speakers=config.min_speakers, max_speakers=config.max_speakers,
                    hook=DiarizationHook(progress) if progress is not None else None)
    alone = one_at_a_time(found)
    labels = speaker_labels(found.turns, speaker_labels(alone))
    found = Diarization(rename_speakers(found.turns, labels),
                        None if found.exclusive_turns is None
                        else rename_speakers(found.exclusive_turns, labels))
    if not with_voices:
        return found
    try:
        centroids = voices.centroids(audio, rename_speakers(alone, labels))
    except Exception as exc:  # a fault in the embedding model: keep the speakers, unnamed
        logger.exception("speaker embeddings failed")
        return replace(found, embedding_error=type(exc).__name__)
    return replace(found, voices={k: None if v is None else v.tolist() for k, v in centroids.items()})


def heard_nobody(found: Diarization, transcript: Transcript, config: InferenceConfig) -> bool:
    """The diarization's segmentation model heard no speech anywhere, yet Whisper wrote something:
    a hallucination on noise or music, dropped with ``vad_filter``."""
    return (found.error is None and not found.turns and not found.exclusive_turns
            and config.vad_filter and bool(transcript.text.strip()))


# --------------------------------------------------------------------------- warnings


def failure_warnings(transcript: Transcript, found: Optional[Diarization]) -> list[str]:
    """What the request's answer must say was removed or is missing."""
    warnings = [removed_words_warning(run) for run in transcript.dropped]
    if found is not None and found.error is not None:
        warnings.append(diarization_failed_warning(found.error))
    if found is not None and found.embedding_error is not None:
        warnings.append(EMBEDDINGS_FAILED_WARNING)
    return warnings


def removed_words_warning(run: str) -> str:
    return (f"removed {len(run.split())} words Whisper wrote with no audio under them (a repetition "
            f"after the speech): {run!r} (set hallucination_filter=false to keep them)")


def diarization_failed_warning(error: str) -> str:
    # the transcript is still worth returning: say plainly that speakers are missing
    return f"speaker diarization failed ({error}); the transcript has no speakers"


EMBEDDINGS_FAILED_WARNING = ("the speakers' voices could not be compared (the speaker embedding "
                             "model failed); speakers keep their SPEAKER_xx labels")


def no_speech_warning(text: str) -> str:
    return f"no speech detected; dropped the transcript {text.strip()!r} (set vad_filter=false to keep it)"
