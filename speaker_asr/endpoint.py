"""Inference Endpoints custom handler: who said what, when.

The Endpoints loader imports this file from the repository root and calls
``EndpointHandler(path)(data)``. This module only orchestrates: load once, validate, decode once,
transcribe + diarize, align.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig, ModelSettings
from speaker_asr.formats import render_response
from speaker_asr.attribution.naming import (known_speakers_entries, match_speakers, name_turns,
                                            speaker_embeddings_entries)
from speaker_asr.attribution.response import build_response, rename_speakers, speaker_labels
from speaker_asr.attribution.speakers import exclusive_turns
from speaker_asr.diarization.pipeline import (configure_pyannote_telemetry, diarize,
                                              load_diarization_pipeline)
from speaker_asr.audio.inputs import preprocess_inputs, unwrap_json_body
from speaker_asr.errors import RequestError

logger = logging.getLogger("handler")

# peak amplitude below which audio is digital silence (-80 dBFS)
SILENCE_PEAK = 1e-4


class EndpointHandler:
    def __init__(self, path: str = "", settings: Optional[ModelSettings] = None):
        # settings come from the environment now, when the endpoint starts -- not at import
        self.settings = settings or ModelSettings()
        configure_pyannote_telemetry(self.settings.diarization_telemetry)

        from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

        started = time.perf_counter()
        self.device, self.dtype = resolve_device(self.settings)
        self.asr = WhisperTranscriber(self.settings, self.device, self.dtype)
        self.diarization = None
        self.voices = None  # the diarization's speaker-embedding model, for known speakers
        if self.settings.diarization_model:
            self.diarization = load_diarization_pipeline(
                self.settings.diarization_model, self.settings.token(), self.device,
                telemetry=self.settings.diarization_telemetry,
                speedups=self.settings.diarization_speedups)
            from speaker_asr.diarization.embeddings import SpeakerVoices

            try:
                self.voices = SpeakerVoices(self.diarization)
            except RuntimeError as exc:  # a custom pipeline without an embedding model
                logger.warning("known speakers unavailable: %s", exc)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diarization")
        # one request at a time: the models, the assistant policy and the diarization worker are
        # shared state (the Endpoints toolkit serialises calls too; a caller's own threads may not)
        self._lock = threading.Lock()
        self.capabilities = self.asr.capabilities(has_diarization=self.diarization is not None)
        # what was changed in transformers' and pyannote's internals: logged, in /health and /metrics
        from speaker_asr.patches.registry import describe

        self.patch_report = self.asr.patch_report + list(getattr(self.diarization, "patch_report", []))
        # QUANTIZATION=int8: which form this CPU got and why (in /health)
        self.quantization = self.asr.quantization
        logger.info("patches: %s", describe(self.patch_report))
        logger.info("models loaded in %.1f s (asr=%s assistant=%s diarization=%s device=%s dtype=%s%s)",
                    time.perf_counter() - started, self.settings.asr_model,
                    self.settings.assistant_model, self.settings.diarization_model, self.device,
                    str(self.dtype).removeprefix("torch."),
                    f" quantization={self.settings.quantization}" if self.settings.quantization else "")

    def __call__(self, data: dict[str, Any]) -> dict[str, Any]:
        """One request. A mistake in it raises :class:`~speaker_asr.errors.RequestError` (answer
        400 with its message); anything else is the server's fault."""
        if not isinstance(data, dict):
            raise RequestError("the request must be a JSON object with 'inputs' (base64 audio) and "
                               "optional 'parameters'")
        with self._lock:
            return self._call(data)

    def _call(self, data: dict[str, Any]) -> dict[str, Any]:
        data = unwrap_json_body(data)
        config = InferenceConfig.from_request(data.get("parameters"), self.capabilities)
        audio = preprocess_inputs(data.get("inputs"), max_duration_s=self.settings.max_audio_seconds)
        duration = len(audio) / SAMPLE_RATE
        diarized = self.diarization is not None
        # known speakers' reference clips: checked and embedded before any decoding, so a bad
        # clip is refused at once (embeddings are cached by the clip's bytes)
        references = self._references(config)
        voices = references is not None or config.return_speaker_embeddings
        silent = duration == 0 or (config.vad_filter and float(np.max(np.abs(audio))) < SILENCE_PEAK)
        if silent:  # nothing to transcribe: Whisper would only make something up ("Thank you.")
            extra = self._voice_extra(config, references, {}) if voices else None
            return self._render(build_response(
                "", [], [] if diarized else None, duration,
                "en" if not self.capabilities.multilingual else config.language, extra=extra), config)

        # diarization runs beside the ASR (torch releases the GIL), so a request costs about the
        # longer of the two rather than their sum
        pending = self._pool.submit(self._diarize, audio, config, voices) if diarized else None
        try:
            # word timestamps drive speaker attribution; without diarization only when asked for
            asr = self.asr.transcribe(audio, config,
                                      word_timestamps=diarized or config.return_word_timestamps)
        finally:
            result, error = self._diarization_result(pending)
        turns, exclusive, extra = None, None, {}
        warnings = [f"removed {len(run.split())} words Whisper wrote with no audio under them "
                    f"(a repetition after the speech): {run!r} (set hallucination_filter=false "
                    "to keep them)" for run in asr.dropped]
        centroids: dict = {}
        if diarized and error is None:
            result, centroids = result
            if centroids is None:
                centroids = {}
                warnings.append("the speakers' voices could not be compared (the speaker embedding "
                                "model failed); speakers keep their SPEAKER_xx labels")
            # the turns (overlapping where people talk at once) and the exclusive turns (one
            # speaker at a time: pyannote 4's own, or derived for 3.x) are both evidence
            labels = speaker_labels(result.turns)
            turns = rename_speakers(result.turns, labels)
            if result.exclusive_turns is not None:
                exclusive = rename_speakers(result.exclusive_turns, labels)
            centroids = {labels[k]: v for k, v in centroids.items() if k in labels}
            if not result.turns and config.vad_filter and asr.text.strip():
                # the diarization's segmentation model heard no speech anywhere: what Whisper
                # wrote is a hallucination on noise or music. Say what was dropped.
                warnings.append(f"no speech detected; dropped the transcript {asr.text.strip()!r} "
                                "(set vad_filter=false to keep it)")
                asr.text, asr.chunks, asr.words = "", [], ([] if asr.words is not None else None)
        elif diarized:
            # the transcript is still worth returning: say plainly that speakers are missing
            turns = []
            warnings.append(f"speaker diarization failed ({error}); the transcript has no speakers")
        if voices:
            matches = self._matches(config, references, centroids)
            if matches and turns:
                turns = name_turns(turns, matches)
                exclusive = name_turns(exclusive, matches) if exclusive is not None else None
            extra.update(self._voice_extra(config, references, centroids, matches))
        if warnings:
            extra["warnings"] = warnings
        return self._render(build_response(
            asr.text, asr.chunks, turns, duration, asr.language, words=asr.words,
            return_words=config.return_word_timestamps, extra=extra, exclusive=exclusive), config)

    def _diarize(self, audio: np.ndarray, config: InferenceConfig, voices: bool):
        """(Diarization, {label: voice vector as a list, or None}) -- the vectors only when
        asked for; None instead of them when the embedding model failed."""
        result = diarize(self.diarization, audio, num_speakers=config.num_speakers,
                         min_speakers=config.min_speakers, max_speakers=config.max_speakers)
        centroids: Optional[dict] = {}
        if voices:
            # one speaker at a time: pyannote 4's own exclusive turns, else derived from the turns
            clean = result.exclusive_turns if result.exclusive_turns is not None \
                else exclusive_turns(result.turns)
            try:
                centroids = {k: None if v is None else v.tolist()
                             for k, v in self.voices.centroids(audio, clean).items()}
            except Exception:  # a fault in the embedding model: keep the speakers, unnamed
                logger.exception("speaker embeddings failed")
                centroids = None
        return result, centroids

    def _references(self, config: InferenceConfig) -> Optional[dict[str, list[float]]]:
        """Known name -> its reference's voice vector as a list (None when no known speakers
        are asked for); raises RequestError for a clip that cannot serve."""
        wanted = config.known_speaker_names is not None or config.return_speaker_embeddings
        if wanted and self.voices is None:
            raise RequestError("known speakers and speaker embeddings are not available: the "
                               "diarization pipeline has no speaker embedding model")
        if config.known_speaker_names is None:
            return None
        return {name: self.voices.reference(i, name, ref).tolist() for i, (name, ref) in
                enumerate(zip(config.known_speaker_names, config.known_speaker_references))}

    def _matches(self, config: InferenceConfig, references, centroids) -> list:
        if references is None:
            return []
        threshold = (config.speaker_match_threshold if config.speaker_match_threshold is not None
                     else self.settings.speaker_match_threshold)
        return match_speakers(centroids, references, threshold)

    def _voice_extra(self, config: InferenceConfig, references, centroids, matches=None) -> dict:
        extra: dict[str, Any] = {}
        if references is not None:
            if matches is None:
                matches = self._matches(config, references, {})
            extra["known_speakers"] = known_speakers_entries(
                matches, references if config.return_speaker_embeddings else None)
        if config.return_speaker_embeddings:
            extra["speaker_embeddings"] = speaker_embeddings_entries(centroids, matches or [])
        return extra

    @staticmethod
    def _diarization_result(pending: Optional[Future]):
        """(Diarization, None) or (None, short reason) -- never raises for a diarization fault."""
        if pending is None:
            return None, None
        try:
            return pending.result(), None
        except Exception as exc:  # a fault in the model, not in the request: keep the transcript
            logger.exception("diarization failed")
            return None, type(exc).__name__

    @staticmethod
    def _render(response: dict[str, Any], config: InferenceConfig) -> dict[str, Any]:
        return render_response(response, config.response_format, speaker_names=config.speaker_names,
                               task=config.task)
