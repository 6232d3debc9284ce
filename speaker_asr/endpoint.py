"""Inference Endpoints custom handler: who said what, when.

The Endpoints loader imports this file from the repository root and calls
``EndpointHandler(path)(data)``: the models are loaded once, then each request is validated
(config.py), its audio decoded once (audio/), transcribed by :meth:`speaker_asr.models.Models.transcribe`
(transcribe beside diarize, attribute, name known speakers) and the resulting
:class:`~speaker_asr.result.Result` rendered in the format asked for (formats/).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from speaker_asr.audio.inputs import preprocess_inputs, unwrap_json_body
from speaker_asr.config import MAX_CHANNELS, InferenceConfig
from speaker_asr.settings import ModelSettings
from speaker_asr.errors import RequestError
from speaker_asr.formats import render_response
from speaker_asr.models import WARM_UP_SECONDS, Models
from speaker_asr.progress import ProgressCallback
from speaker_asr.result import Result

logger = logging.getLogger("handler")


class EndpointHandler:
    """``EndpointHandler(path)(data)``: the models (:class:`~speaker_asr.models.Models`) loaded
    once from ``settings`` (by default the environment's, read now, when the endpoint starts),
    then one request per call. ``path`` is the repository folder the toolkit passes; the models
    come from the settings."""

    def __init__(self, path: str = "", settings: Optional[ModelSettings] = None,
                 models: Optional[Models] = None):
        self.models = models if models is not None else Models.load(settings or ModelSettings())
        if self.models.settings.warmup and self.models.warm_up_seconds is None:
            self._warm_up()

    def _warm_up(self) -> None:
        """The models run once before the first request (``WARMUP``); one log line with the time
        of each part. A model that fails here fails the load."""
        import transformers

        started = time.perf_counter()
        # what transformers says about decoding made-up audio cut short ("did not predict an
        # ending timestamp") is noise in the start-up log; errors still show
        previous = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            seconds = self.models.warm_up()
        except Exception:
            logger.error("the warm-up failed: the models raised on %.0f s of made-up audio "
                         "(WARMUP=false starts without the warm-up)", WARM_UP_SECONDS)
            raise
        finally:
            transformers.logging.set_verbosity(previous)
        logger.info("warm-up in %.2f s (%s; %.0f s of audio)", time.perf_counter() - started,
                    " ".join(f"{part}={s:.2f}s" for part, s in seconds.items()), WARM_UP_SECONDS)

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
        data = unwrap_json_body(data)
        config = InferenceConfig.from_request(data.get("parameters"), self.models.capabilities)
        try:
            audio = preprocess_inputs(data.get("inputs"),
                                      max_duration_s=self.models.settings.max_audio_seconds,
                                      channels=config.multichannel, max_channels=MAX_CHANNELS)
        except RequestError as exc:
            exc.param = exc.param or "inputs"
            raise
        # one recording at a time: Models.transcribe holds the models' lock
        return config, self.models.transcribe(audio, config, on_start=on_start, progress=progress)
