"""Shared fixtures: tiny random models built once per test session (offline), audio helpers, and
handlers loaded through the production settings and ``from_pretrained`` paths."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# offline, private: nothing may reach the hub or pyannote's telemetry during tests
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# property tests draw the same examples on every run (a red CI must be reproducible, not luck);
# HYPOTHESIS_PROFILE=explore draws fresh random examples when hunting for new failures
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("default", derandomize=True)
_hypothesis_settings.register_profile("explore", derandomize=False)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REAL_MODELS = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
SHARED_AUDIO = ROOT.parent / "shared" / "audio"
SAMPLE_RATE = 16_000
# generation cap for random weights: keeps every test fast
TINY_MAX_NEW_TOKENS = 24


def pytest_configure(config):
    config.addinivalue_line("markers", "real: needs the real models from ../shared/real-models (skipped when absent)")
    config.addinivalue_line("markers", "slow: long-running, run on demand")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    from speaker_asr.testing.tiny_models import build_all

    return build_all(tmp_path_factory.mktemp("tiny-models"))


def tiny_settings(tiny_models, **overrides):
    from speaker_asr.config import ModelSettings

    values = dict(asr_model=str(tiny_models["whisper"]), assistant_model=str(tiny_models["assistant"]),
                  diarization_model=str(tiny_models["pyannote"]), max_new_tokens=TINY_MAX_NEW_TOKENS)
    values.update(overrides)
    return ModelSettings(**values)


@pytest.fixture(scope="session")
def handler(tiny_models):
    """Multilingual tiny Whisper + assistant + tiny pyannote pipeline, loaded like production."""
    from speaker_asr.endpoint import EndpointHandler

    return EndpointHandler(settings=tiny_settings(tiny_models))


def tone(seconds: float, sr: int = SAMPLE_RATE, freq: float = 220.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    mono = (0.3 * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))).astype(np.float32)
    return np.stack([mono] * channels, axis=1) if channels > 1 else mono


def encode(audio: np.ndarray, sr: int = SAMPLE_RATE, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


@pytest.fixture(scope="session")
def speech_like_wav() -> bytes:
    """12 s of two alternating 'voices' (tones at different pitches) as 16-bit WAV."""
    parts = [tone(3.0, freq=f) for f in (180.0, 320.0, 180.0, 320.0)]
    return encode(np.concatenate(parts))
