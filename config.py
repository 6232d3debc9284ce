"""Settings (environment variables) and request parameters, for code written against the flat
layout: re-exported from :mod:`speaker_asr.settings` and :mod:`speaker_asr.config`, where they
live."""

from speaker_asr.config import *  # noqa: F401,F403
from speaker_asr.config import InferenceConfig, ModelCapabilities  # noqa: F401
from speaker_asr.settings import *  # noqa: F401,F403
from speaker_asr.settings import ModelSettings, ServerSettings  # noqa: F401
