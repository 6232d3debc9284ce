"""Shared fixtures: tiny random models built once per test session (offline), a handler loaded
through the production settings and ``from_pretrained`` paths, a speech-like clip. Helpers (paths,
settings, audio) are in helpers.py."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

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

from helpers import encode, tiny_settings, tone  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "real: needs the real models from ../shared/real-models (skipped when absent)")
    config.addinivalue_line("markers", "slow: long-running, run on demand")
    config.addinivalue_line("markers", "subprocess: starts the server or the command line as a process "
                                       "(seconds each); -m 'not subprocess' for a quick pass")
    config.addinivalue_line("markers", "scripts: a smoke run of a script in bench/, eval/ or reliability/ "
                                       "(tests/scripts/; -m scripts runs only them)")
    config.addinivalue_line("markers", "heavy: half a minute or more (a script's longer smoke run, the longest end-to-end "
                                       "tests); make test leaves it out, make test-all (make test-scripts) runs it")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    from speaker_asr.testing.tiny_models import build_all

    return build_all(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def handler(tiny_models):
    """Multilingual tiny Whisper + assistant + tiny pyannote pipeline, loaded like production
    (warmed up at load, as WARMUP defaults to)."""
    from speaker_asr.endpoint import EndpointHandler

    return EndpointHandler(settings=tiny_settings(tiny_models, warmup=True))


@pytest.fixture(scope="session")
def speech_like_wav() -> bytes:
    """12 s of two alternating 'voices' (tones at different pitches) as 16-bit WAV."""
    parts = [tone(3.0, freq=f) for f in (180.0, 320.0, 180.0, 320.0)]
    return encode(np.concatenate(parts))


def pytest_collection_modifyitems(config, items):
    """The files whose tests start processes or load models run first (in the order collected
    otherwise, each file's tests together and in their order): pytest-xdist (``make test``,
    ``--dist loadfile``) hands the files to its workers in this order, so a long file does not
    start last and end the run alone on one worker while the others wait."""
    from collections import Counter

    cost = Counter(item.path for item in items
                   if item.get_closest_marker("subprocess") or "tiny_models" in item.fixturenames)
    items.sort(key=lambda item: -cost[item.path])  # stable: a file's tests stay together, in order
