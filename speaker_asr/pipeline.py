"""The steps of one recording's transcription, each a function of the models handed in:

    known speakers' clips -> transcribe beside diarize -> attribute -> name known speakers

:class:`speaker_asr.file_pipeline.FilePipeline` runs them in that order on the models' threads
(for :meth:`speaker_asr.models.Models.transcribe`); a test hands in its own models (tiny random
ones, or a stand-in for the voice model) instead of patching this module. The warnings are
written by the small functions at the end.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Optional

import numpy as np

from speaker_asr.attribution.naming import name_known_speakers
from speaker_asr.attribution.response import rename_speakers, speaker_labels
from speaker_asr.attribution.turns import speakers_alone
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig
from speaker_asr.diarization.pipeline import diarize
from speaker_asr.errors import RequestError
from speaker_asr.progress import DiarizationHook, ProgressCallback
from speaker_asr.result import Result
from speaker_asr.scheduling import checkpoint
from speaker_asr.types import Diarization, Transcript, Turn

logger = logging.getLogger("handler")

# peak amplitude below which audio is digital silence (-80 dBFS)
SILENCE_PEAK = 1e-4
# the warm-up at load (Models.warm_up, WARMUP): this much made-up audio, and at most this many
# tokens decoded from it (whisper base wrote "Hmm hmm ..." up to its 448-token limit on it, tens
# of seconds on a CPU: the warm-up's point is the libraries' set-up, not the text)
WARM_UP_SECONDS = 2.0
WARM_UP_MAX_NEW_TOKENS = 16


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


def scheduled_hook(hook: Optional[Callable] = None) -> Callable:
    """pyannote's hook, called after each batch of the segmentation and of the embeddings and
    after each step: there the diarization's unit ends (speaker_asr/scheduling/: the lane given
    up to work ranked first, a cancelled job's diarization stopped), then ``hook`` hears it."""
    def hook_and_checkpoint(*args, **kwargs):
        checkpoint()
        if hook is not None:
            hook(*args, **kwargs)

    hook_and_checkpoint.progress = hook  # what hears the steps (None: nobody)
    return hook_and_checkpoint


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
                    hook=scheduled_hook(DiarizationHook(progress) if progress is not None else None))
    alone = speakers_alone(found)
    labels = speaker_labels(found.turns, speaker_labels(alone))
    found = Diarization(rename_speakers(found.turns, labels),
                        None if found.exclusive_turns is None
                        else rename_speakers(found.exclusive_turns, labels))
    if not with_voices:
        return found
    return speaker_voices(found, voices, audio, rename_speakers(alone, labels))


def speaker_voices(found: Diarization, voices, audio: np.ndarray, turns: list[Turn]) -> Diarization:
    """``found`` with each speaker's voice, embedded by ``voices`` (the voice model) from their
    ``turns`` of ``audio`` (turns without overlapped speech). A fault in the embedding model is
    the result's ``embedding_error``: the speakers stay, unnamed, and the answer says so."""
    try:
        centroids = voices.centroids(audio, turns)
    except Exception as exc:
        logger.exception("speaker embeddings failed")
        return replace(found, embedding_error=type(exc).__name__)
    return replace(found, voices={k: None if v is None else v.tolist() for k, v in centroids.items()})


def name_speakers(result: Result, voices: dict, references: Optional[dict], config: InferenceConfig,
                  default_threshold: float) -> Result:
    """The result with the known speakers named by voice (and, when asked for, the voice
    embeddings), at the request's threshold or ``default_threshold`` (the server's)."""
    threshold = (config.speaker_match_threshold if config.speaker_match_threshold is not None
                 else default_threshold)
    return name_known_speakers(result, voices, references, threshold, config.return_speaker_embeddings)


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
