"""The audio and diarization helpers, importable from the repository root as in the Inference
Endpoints speaker-diarization handler's layout (``handler.py``, ``config.py``,
``diarization_utils.py`` side by side):

* decoding a request's audio (:mod:`speaker_asr.audio.inputs`): ``preprocess_inputs``
  (``data["inputs"]`` -> 16 kHz mono float32), ``input_bytes`` (the file's bytes from base64, a
  data URI or bytes), ``decode_base64``, ``unwrap_json_body`` (a JSON body a server handed over
  as raw bytes);
* pyannote (:mod:`speaker_asr.diarization.pipeline`): ``load_diarization_pipeline`` (a hub id,
  folder or yaml file, with the speed fixes), ``diarize`` (one run on the in-memory waveform ->
  ``Diarization``), ``GATED_REPOS`` (the hub repositories whose conditions must be accepted),
  ``pyannote_major``, ``pyannote3_config``, ``configure_pyannote_telemetry``;
* the response (:mod:`speaker_asr.attribution.response`): ``build_response`` (transcript and
  speaker turns -> the ``json`` response) and ``rename_speakers`` (``SPEAKER_00``, ... by first
  appearance)."""

from speaker_asr.attribution.response import build_response, rename_speakers  # noqa: F401
from speaker_asr.audio.inputs import (decode_base64, input_bytes, preprocess_inputs,  # noqa: F401
                                      unwrap_json_body)
from speaker_asr.diarization.pipeline import (GATED_REPOS, Diarization,  # noqa: F401
                                              configure_pyannote_telemetry, diarize,
                                              load_diarization_pipeline, pyannote3_config,
                                              pyannote_major)
