"""``python -m speaker_asr serve`` as a child process on a free loopback port, and the environment
that runs the server or the command line on the tiny random models: for the tests
(``tests/helpers.py`` builds on it) and the reliability scripts (``reliability/_common.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from speaker_asr.testing.tiny_models import TINY_MAX_NEW_TOKENS

# the checkout whose speaker_asr this is: the server is started there, so `-m speaker_asr` is it
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_env(models: dict, **overrides: str) -> dict:
    """This process's environment with the settings of the tiny random models (``models``: what
    :func:`speaker_asr.testing.tiny_models.build_all` returns), offline and without telemetry,
    and without the warm-up at load (``WARMUP=false``: it costs the tiny models 3-4 s a load and
    saves their first request little; ``WARMUP="true"`` in ``overrides`` turns it on)."""
    env = dict(os.environ)
    env.update(ASR_MODEL=str(models["whisper"]), ASSISTANT_MODEL=str(models["assistant"]),
               DIARIZATION_MODEL=str(models["pyannote"]), MAX_NEW_TOKENS=str(TINY_MAX_NEW_TOKENS),
               WARMUP="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false")
    env.update(overrides)
    return env


class ServerProcess:
    """The server on 127.0.0.1:<a free port> with ``env``, its output in ``log_dir/<name>.log``;
    ``prefix`` goes in front of the command (``["taskset", "-c", "0"]``: pinned to core 0);
    ``root``: the checkout whose code it runs (default this one; another revision's worktree to
    compare the two on one bench)."""

    def __init__(self, name: str, env: dict, log_dir: Path, prefix: Sequence[str] = (),
                 root: Optional[Path] = None):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "speaker_asr", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=root or ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 300) -> float:
        """Seconds until /health said 200; RuntimeError when the process exits or time runs out."""
        import requests

        started = time.monotonic()
        http = requests.Session()
        http.trust_env = False  # loopback: never through a proxy
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            try:
                if http.get(self.url + "/health", timeout=5).status_code == 200:
                    return time.monotonic() - started
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} server not ready after {timeout} s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
