"""Helpers the tests share (import them from here, not from conftest): paths, the tiny models'
settings, and audio made in code. Fixtures live in conftest.py."""

from __future__ import annotations

import base64
import io
import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import requests

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.testing import server as testing_server
from speaker_asr.testing.server import free_port, tiny_env  # noqa: F401 (tests import them from here)
from speaker_asr.testing.tiny_models import TINY_MAX_NEW_TOKENS  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
REAL_MODELS = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
SHARED_AUDIO = ROOT.parent / "shared" / "audio"


def tiny_settings(tiny_models, **overrides):
    """ModelSettings for the tiny random models (the ``tiny_models`` fixture), as production reads them,
    without the warm-up at load unless ``warmup=True`` (3-4 s a load for the tiny models, which
    their first request hardly notices; tiny_env says the same to a process)."""
    from speaker_asr.settings import ModelSettings

    values = dict(asr_model=str(tiny_models["whisper"]), assistant_model=str(tiny_models["assistant"]),
                  diarization_model=str(tiny_models["pyannote"]), max_new_tokens=TINY_MAX_NEW_TOKENS,
                  warmup=False)
    values.update(overrides)
    return ModelSettings(**values)


def tone(seconds: float, sr: int = SAMPLE_RATE, freq: float = 220.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    mono = (0.3 * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))).astype(np.float32)
    return np.stack([mono] * channels, axis=1) if channels > 1 else mono


def encode(audio: np.ndarray, sr: int = SAMPLE_RATE, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# --------------------------------------------------------------------------- processes

FAKE_TOKEN = "hf_fake_SECRET123"
MAX_BODY = 2_000_000  # the subprocess server's MAX_BODY_BYTES; every test clip is far smaller
STARTUP_TIMEOUT_S = 240  # bounded wait for the model to load (seconds; usually ~10)
REQUEST_TIMEOUT_S = 180

# every body a server sent back, checked for the token at the end
SEEN_RESPONSES: list[str] = []


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # no proxy for 127.0.0.1
    return s


HTTP = session()


def record(response: requests.Response) -> requests.Response:
    SEEN_RESPONSES.append(response.text)
    SEEN_RESPONSES.append(json.dumps(dict(response.headers)))
    return response


class ServerProcess(testing_server.ServerProcess):
    """The server process (speaker_asr/testing/server.py) with recorded requests and a /health
    wait that fails the test."""

    def __init__(self, name: str, env: dict, log_dir: Path):
        super().__init__(name, env, log_dir)
        self.health_log: list[tuple[int, dict]] = []

    def get(self, path: str, **kwargs) -> requests.Response:
        return record(HTTP.get(self.url + path, timeout=kwargs.pop("timeout", 30), **kwargs))

    def post(self, path: str = "/", **kwargs) -> requests.Response:
        return record(HTTP.post(self.url + path, timeout=kwargs.pop("timeout", REQUEST_TIMEOUT_S), **kwargs))

    def wait_health(self, done, timeout: float = STARTUP_TIMEOUT_S) -> tuple[int, dict]:
        """Poll /health until ``done(status, body)``; fail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} server exited ({self.proc.returncode}):\n{self.log()[-4000:]}")
            try:
                r = self.get("/health", timeout=10)
            except requests.ConnectionError:
                time.sleep(0.1)
                continue
            self.health_log.append((r.status_code, r.json()))
            if done(r.status_code, r.json()):
                return r.status_code, r.json()
            time.sleep(0.2)
        pytest.fail(f"{self.name} server: no answer in {timeout} s; health: {self.health_log[-3:]}\n"
                    f"{self.log()[-4000:]}")


@contextmanager
def running_server(name: str, env: dict, log_dir: Path):
    """A :class:`ServerProcess` once its /health answers 200 (the test fails if it never does),
    stopped on leaving."""
    server = ServerProcess(name, env, log_dir)
    try:
        server.wait_health(lambda status, body: status == 200)
        yield server
    finally:
        server.stop()


def server_env(tiny_models, **overrides) -> dict:
    env = tiny_env(tiny_models, HF_TOKEN=FAKE_TOKEN, MAX_BODY_BYTES=str(MAX_BODY), LOG_LEVEL="info",
                   PYTHONUNBUFFERED="1")
    env.pop("HOST", None)
    env.pop("PORT", None)
    env.update(overrides)
    return env


def check_error(r: requests.Response, status: int, *fragments: str) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers.get("x-request-id")
    message = r.json()["error"]
    for fragment in fragments:
        assert fragment.lower() in message.lower(), message
    return message


class MetricValues(dict):
    """/metrics samples by ``name{label="value",...}``; a key finds its sample whatever the order
    of its labels (prometheus_client writes them sorted by name)."""

    def __getitem__(self, key: str) -> float:
        return super().__getitem__(_metric_key(key))

    def __contains__(self, key) -> bool:
        return super().__contains__(_metric_key(key))


def _sample_key(name: str, labels: dict) -> str:
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")


def _metric_key(key: str) -> str:
    from prometheus_client.parser import text_string_to_metric_families

    sample = next(iter(text_string_to_metric_families(key + " 0\n"))).samples[0]
    return _sample_key(sample.name, sample.labels)


def parse_metrics(text: str) -> MetricValues:
    """The samples of a /metrics answer, read with prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return MetricValues({_sample_key(s.name, s.labels): s.value
                         for family in text_string_to_metric_families(text) for s in family.samples})


def cli_env(tiny_models, **overrides) -> dict:
    return tiny_env(tiny_models, HF_TOKEN=FAKE_TOKEN, **overrides)


@contextmanager
def inprocess_server(factory, max_body_bytes: int = 1_000_000, **options):
    """Our app (``create_app(handler_factory=factory, ...)``, ``options`` passed on) served by
    uvicorn on a thread of this process, on a free port: yields (url, app)."""
    import uvicorn

    from speaker_asr.serving import app as server

    app = server.create_app(handler_factory=factory, max_body_bytes=max_body_bytes, **options)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                            lifespan="on", log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "in-process server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        srv.should_exit = True
        thread.join(timeout=15)


def wait_until(predicate, timeout: float = 20.0):
    """``predicate()``'s first truthy value, polled every 20 ms; the test fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail("condition not reached in time")
