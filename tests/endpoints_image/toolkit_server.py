"""Run the REAL Inference Endpoints toolkit webservice (huggingface-inference-toolkit 0.5.6, from
``../shared/hf-inference-toolkit``) serving this repository's ``handler.py``, as the default image
does: the toolkit's source on PYTHONPATH, its ``webservice_starlette.py`` copied into an app folder
(the image's layout: run from inside the package, its ``logging.py`` would shadow the standard
library's), ``HF_MODEL_DIR`` pointing at a copy of the repository as it would be pushed to the Hub
(the files git tracks or would track), ``uvicorn webservice_starlette:app``. The one difference
from the image's entrypoint: it listens on 127.0.0.1 and a free port, not 0.0.0.0:5000.
Nothing of the toolkit is copied into this project.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = ROOT.parent / "shared" / "hf-inference-toolkit"
TOOLKIT_SRC = TOOLKIT / "src"
TOOLKIT_AUDIO = TOOLKIT / "audio"


def repository_copy(dest: Path) -> Path:
    """This checkout's files as a Hub model repository would hold them (tracked + untracked, not
    ignored): no virtual environments, caches or build output."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> float:
    """Seconds until GET /health answers 200; raises with the server's log if it dies or times out."""
    import urllib.error
    import urllib.request

    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the toolkit server exited ({proc.returncode}):\n{log.read_text()[-6000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return time.perf_counter() - started
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.25)
    raise RuntimeError(f"the toolkit server was not healthy after {timeout:.0f} s:\n{log.read_text()[-6000:]}")


@contextlib.contextmanager
def toolkit_server(env: dict[str, Optional[str]], python: str = sys.executable, timeout: float = 600,
                   model_dir: Optional[Path] = None) -> Iterator[str]:
    """Yield the base URL of the toolkit serving this repository. ``env`` sets (or, with None,
    unsets) variables such as HF_TASK and the handler's ASR_MODEL / DIARIZATION_MODEL."""
    with tempfile.TemporaryDirectory(prefix="hf-endpoint-") as tmp:
        tmp = Path(tmp)
        app = tmp / "app"
        app.mkdir()
        shutil.copy2(TOOLKIT_SRC / "huggingface_inference_toolkit" / "webservice_starlette.py", app)
        repo = model_dir or repository_copy(tmp / "repository")
        run_env = dict(os.environ)
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        run_env.update({"HF_MODEL_DIR": str(repo), "PYTHONUNBUFFERED": "1",
                        "PYTHONPATH": os.pathsep.join([*inherited, str(TOOLKIT_SRC)]),
                        "HF_HUB_OFFLINE": "1", "PYANNOTE_METRICS_ENABLED": "false"})
        for key, value in env.items():
            if value is None:
                run_env.pop(key, None)
            else:
                run_env[key] = value
        port = free_port()
        log = tmp / "server.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([python, "-m", "uvicorn", "webservice_starlette:app",
                                     "--host", "127.0.0.1", "--port", str(port)],
                                    cwd=app, env=run_env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, timeout, log)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
