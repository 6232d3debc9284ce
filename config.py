"""Settings (environment variables) and request parameters: re-exported from
:mod:`speaker_asr.config`, where they live."""

from speaker_asr.config import *  # noqa: F401,F403
from speaker_asr.config import InferenceConfig, ModelCapabilities, ModelSettings  # noqa: F401
