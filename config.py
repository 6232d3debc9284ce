"""The request parameters and the settings, importable from the repository root as in the
Inference Endpoints speaker-diarization handler's layout (``handler.py``, ``config.py``,
``diarization_utils.py`` side by side). It exports every public name of :mod:`speaker_asr.config`
-- ``InferenceConfig`` (one request's ``parameters``, typed and validated:
``InferenceConfig.from_request``) and ``ModelCapabilities`` (what the loaded models allow a
request) -- and of :mod:`speaker_asr.settings`: ``ModelSettings`` (the models' environment
variables: ``ASR_MODEL``, ``DIARIZATION_MODEL``, ``HF_TOKEN``, ...) and ``ServerSettings`` (our
HTTP server's: ``HOST``, ``PORT``, ``API_KEY``, ...)."""

from speaker_asr.config import *  # noqa: F401,F403
from speaker_asr.config import InferenceConfig, ModelCapabilities  # noqa: F401
from speaker_asr.settings import *  # noqa: F401,F403
from speaker_asr.settings import ModelSettings, ServerSettings  # noqa: F401
