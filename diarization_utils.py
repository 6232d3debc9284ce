"""The earlier home of input decoding, pyannote loading and response building, kept as a
re-export for code that imports it from the repository root: they now live in
:mod:`speaker_asr.audio.inputs`, :mod:`speaker_asr.diarization.pipeline` and
:mod:`speaker_asr.attribution.response`."""

from speaker_asr.attribution.response import build_response, rename_speakers  # noqa: F401
from speaker_asr.audio.inputs import (decode_base64, input_bytes, preprocess_inputs,  # noqa: F401
                                      unwrap_json_body)
from speaker_asr.diarization.pipeline import (GATED_REPOS, Diarization,  # noqa: F401
                                              configure_pyannote_telemetry, diarize,
                                              load_diarization_pipeline, pyannote3_config,
                                              pyannote_major)
