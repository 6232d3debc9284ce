"""Shared by the reliability scripts: paths, a local server with the tiny models, percentiles,
and the summary line / JSON result every script ends with (memory: speaker_asr/testing/memory.py;
long recordings: speaker_asr/testing/long_audio.py).

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
SR = 16_000


def percentile(values: list[float], q: float) -> Optional[float]:
    """The q-th percentile (0-100, nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def finish(name: str, summary: str, result: dict[str, Any], json_path: Optional[str], ok: bool) -> int:
    """Print the one summary line, write the result as JSON when asked; the exit code."""
    result = {"script": name, **result, "passed": ok}
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2, default=str))
    print(f"{name}: {summary}", flush=True)
    return 0 if ok else 1


def local_server(work: Path, **env_overrides: str):
    """``python -m speaker_asr serve`` on 127.0.0.1 with the tiny random models (built once into
    ``work``; log in ``work/load-server.log``): speaker_asr/testing/server.py's ServerProcess."""
    from speaker_asr.testing.server import ServerProcess, tiny_env
    from speaker_asr.testing.tiny_models import build_all_once

    models = build_all_once(work / "tiny-models")
    return ServerProcess("load-server", tiny_env(models, PYTHONUNBUFFERED="1", **env_overrides), work)
