"""Inference Endpoints custom handler: who said what, when.

The Endpoints loader imports this file from the repository root and calls
``EndpointHandler(path)(data)``: the models are loaded once, then each request is validated
(config.py), its audio decoded once (audio/), run through the :class:`~speaker_asr.pipeline.Pipeline`
(transcribe beside diarize, attribute, name known speakers) and the resulting
:class:`~speaker_asr.result.Result` rendered in the format asked for (formats/).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from speaker_asr.audio.inputs import preprocess_inputs, unwrap_json_body
from speaker_asr.config import InferenceConfig, ModelSettings
from speaker_asr.diarization.pipeline import configure_pyannote_telemetry, load_diarization_pipeline
from speaker_asr.errors import RequestError
from speaker_asr.formats import render_response
from speaker_asr.pipeline import WARM_UP_SECONDS, Pipeline
from speaker_asr.progress import ProgressCallback
from speaker_asr.result import Result

logger = logging.getLogger("handler")


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
                speedups=self.settings.diarization_speedups,
                long_after_s=self.settings.diarization_long_after_s,
                coarse_long=self.settings.diarization_coarse_long_recordings)
            from speaker_asr.diarization.embeddings import SpeakerVoices

            try:
                self.voices = SpeakerVoices(self.diarization)
            except RuntimeError as exc:  # a custom pipeline without an embedding model
                logger.warning("known speakers unavailable: %s", exc)
        stream = None
        if self.diarization is not None and self.settings.diarization_cuda_stream \
                and str(self.device).startswith("cuda"):
            import torch

            stream = torch.cuda.Stream(self.device)
        self.pipeline = Pipeline(self.asr, self.diarization, self.voices,
                                 self.settings.speaker_match_threshold, diarization_stream=stream)
        # one request at a time: the models, the assistant policy and the diarization worker are
        # shared state (the Endpoints toolkit serialises calls too; a caller's own threads may not)
        self._lock = threading.Lock()
        self.capabilities = self.asr.capabilities(has_diarization=self.diarization is not None)
        # what was changed in transformers' and pyannote's internals: logged, in /health and /metrics
        from speaker_asr.patches.registry import describe

        self.patch_report = self.asr.patch_report + list(getattr(self.diarization, "patch_report", []))
        # what the diarization computes (the recipe's way, or the opt-in coarse one; in /health)
        self.diarization_settings = getattr(self.diarization, "diarization_settings", None)
        # QUANTIZATION=int8: which form this CPU got and why (in /health)
        self.quantization = self.asr.quantization
        logger.info("patches: %s", describe(self.patch_report))
        logger.info("models loaded in %.1f s (asr=%s assistant=%s diarization=%s device=%s dtype=%s%s)",
                    time.perf_counter() - started, self.settings.asr_model,
                    self.settings.assistant_model, self.settings.diarization_model, self.device,
                    str(self.dtype).removeprefix("torch."),
                    f" quantization={self.settings.quantization}" if self.settings.quantization else "")
        # seconds per part of the warm-up (Pipeline.warm_up); None with WARMUP=false
        self.warmup: Optional[dict[str, float]] = self._warm_up() if self.settings.warmup else None

    def _warm_up(self) -> dict[str, float]:
        """The models run once before the first request (``WARMUP``); one log line with the time
        of each part. A model that fails here fails the load."""
        import transformers

        started = time.perf_counter()
        # what transformers says about decoding made-up audio cut short ("did not predict an
        # ending timestamp") is noise in the start-up log; errors still show
        previous = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            with self._lock:
                seconds = self.pipeline.warm_up(self.capabilities)
        except Exception:
            logger.error("the warm-up failed: the models raised on %.0f s of made-up audio "
                         "(WARMUP=false starts without the warm-up)", WARM_UP_SECONDS)
            raise
        finally:
            transformers.logging.set_verbosity(previous)
        logger.info("warm-up in %.2f s (%s; %.0f s of audio)", time.perf_counter() - started,
                    " ".join(f"{part}={s:.2f}s" for part, s in seconds.items()), WARM_UP_SECONDS)
        return seconds

    def __call__(self, data: dict[str, Any], progress: Optional[ProgressCallback] = None
                 ) -> dict[str, Any]:
        """One request: validate -> decode -> run the pipeline -> render. A mistake in it raises
        :class:`~speaker_asr.errors.RequestError` (answer 400 with its message); anything else is
        the server's fault. ``progress``: called with a :class:`~speaker_asr.progress.Progress`
        as the ASR decodes its windows and the diarization goes through its steps -- from both
        of their threads at once, so it must be thread-safe."""
        config, result = self.result(data, progress=progress)
        return render_response(result, config.response_format, speaker_names=config.speaker_names,
                               task=config.task, temperature=config.temperature)

    def result(self, data: dict[str, Any], on_start: Optional[Callable[[], None]] = None,
               progress: Optional[ProgressCallback] = None) -> tuple[InferenceConfig, Result]:
        """One request up to its :class:`~speaker_asr.result.Result` (not yet rendered, speakers
        not yet renamed by ``speaker_names``): validate -> decode -> run the pipeline. For
        servers that write their own shapes (the OpenAI-compatible routes). ``on_start`` is
        called once the request has been checked (parameters, audio, known speakers' clips),
        before the models run; ``progress`` as for :meth:`__call__`. Raises
        :class:`~speaker_asr.errors.RequestError` for a mistake in the request, its ``param``
        naming the parameter (``inputs`` for the audio)."""
        if not isinstance(data, dict):
            raise RequestError("the request must be a JSON object with 'inputs' (base64 audio) and "
                               "optional 'parameters'")
        with self._lock:
            data = unwrap_json_body(data)
            config = InferenceConfig.from_request(data.get("parameters"), self.capabilities)
            try:
                audio = preprocess_inputs(data.get("inputs"),
                                          max_duration_s=self.settings.max_audio_seconds)
            except RequestError as exc:
                exc.param = exc.param or "inputs"
                raise
            return config, self.pipeline(audio, config, on_start=on_start, progress=progress)
