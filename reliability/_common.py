"""Shared by the reliability scripts: paths, a local server with the tiny models, percentiles,
RSS, and the summary line / JSON result every script ends with.

The scripts import it as ``_common`` (their own folder is ``sys.path[0]`` when they run) and the
project (``speaker_asr``, installed editable by ``make install``) read-only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent

REAL = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
REAL_AUDIO = REAL / "audio"
REAL_ASR = REAL / "whisper-tiny.en"
REAL_PIPELINE = REAL / "pyannote-campp-3.1"
SR = 16_000


def percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile (0-100, nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def rss_mb() -> float:
    """This process's resident set size now (MiB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident set size so far (MiB, ru_maxrss)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def finish(name: str, summary: str, result: dict[str, Any], json_path: Optional[str], ok: bool) -> int:
    """Print the one summary line, write the result as JSON when asked; the exit code."""
    result = {"script": name, **result, "passed": ok}
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2, default=str))
    print(f"{name}: {summary}", flush=True)
    return 0 if ok else 1


def tiny_models(work: Path) -> dict[str, Path]:
    """speaker_asr/testing/tiny_models.py's tiny random models, built once into ``work/tiny-models``."""
    from speaker_asr.testing.tiny_models import build_all

    models = work / "tiny-models"
    names = ("whisper", "whisper.en", "assistant", "pyannote")
    if (models / ".built").exists():
        return {name: models / name for name in names}
    print(f"building the tiny random models in {models} ...", flush=True)
    work.mkdir(parents=True, exist_ok=True)
    paths = build_all(models)
    (models / ".built").write_text("ok")
    return paths


def local_server(work: Path, **env_overrides: str):
    """``python -m speaker_asr serve`` on 127.0.0.1 with the tiny random models (built once into
    ``work``; log in ``work/load-server.log``): speaker_asr/testing/server.py's ServerProcess."""
    from speaker_asr.testing.server import ServerProcess, tiny_env

    return ServerProcess("load-server", tiny_env(tiny_models(work), PYTHONUNBUFFERED="1", **env_overrides), work)
