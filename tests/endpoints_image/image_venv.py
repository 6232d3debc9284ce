"""Emulate the default Inference Endpoints image (huggingface-inference-toolkit 0.5.6) in a venv.

    python tests/endpoints_image/image_venv.py base VENV        # the image's own packages
    python tests/endpoints_image/image_venv.py entrypoint VENV  # what its entrypoint installs
    python tests/endpoints_image/image_venv.py coldstart VENV   # a container start, timed

``base`` reads the image's pins from the toolkit's ``setup.py`` in ``../shared/hf-inference-toolkit``
(install_requires and the ``torch``, ``st`` and ``diffusers`` extras the image's Dockerfile installs)
and installs them into a fresh venv, with the versions the image resolves that setup.py leaves open
(torch 2.5.1's torchvision 0.20.1 / torchaudio 2.5.1, numpy 1.26, starlette < 1). Left out, and said
so: kenlm (a git URL; only the toolkit's CTC language-model decoding uses it).

``entrypoint`` runs the image entrypoint's install step exactly (``pip install -r
$HF_MODEL_DIR/requirements.txt --no-cache-dir``) for this repository, times it, and checks that the
image's torch, torchvision and torchaudio survived it.

``coldstart`` times what a container start does, on a copy of a ``base`` venv that has not seen
requirements.txt yet: the entrypoint's install, then the toolkit's webservice loading handler.py
(the real whisper tiny.en + CAM++ 3.1 pipeline of ../shared/real-models, on CPU) until ``GET
/health`` answers 200. The models are local: a real endpoint also downloads its weights (not
measurable here, no hub).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = ROOT.parent / "shared" / "hf-inference-toolkit"
# what the image has beside setup.py's pins (its Dockerfile: torch extra "torch==2.5.1, torchvision,
# torchaudio" resolved against torch 2.5.1; numpy as measured in the image)
IMAGE_RESOLVED = ["torchvision==0.20.1", "torchaudio==2.5.1", "numpy==1.26.4", "starlette<1"]
IMAGE_EXTRAS = ("torch", "st", "diffusers")
KEEP = {"torch": "2.5.1", "torchvision": "0.20.1", "torchaudio": "2.5.1"}


def image_pins(setup_py: Path = TOOLKIT / "setup.py") -> list[str]:
    """setup.py's install_requires + the image's extras, as pip requirement strings."""
    tree = ast.parse(setup_py.read_text())
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
        elif (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript)
              and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "extras"):
            values.setdefault("extras", {})[ast.literal_eval(node.targets[0].slice)] = \
                ast.literal_eval(node.value)
    pins = [p for p in values["install_requires"] if "@" not in p]  # kenlm@git+...: unreachable
    for extra in IMAGE_EXTRAS:
        pins += values["extras"][extra]
    return pins + IMAGE_RESOLVED


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", *args], check=True)


def installed(venv: Path) -> dict[str, str]:
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def build_base(venv: Path) -> None:
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _pip(venv, "install", "-q", "--upgrade", "pip")
    pins = image_pins()
    print("image pins:", " ".join(pins), flush=True)
    _pip(venv, "install", "-q", *pins)


def entrypoint_install(venv: Path, repo: Path = ROOT) -> float:
    """The entrypoint's ``pip install -r $HF_MODEL_DIR/requirements.txt --no-cache-dir``; seconds."""
    started = time.perf_counter()
    _pip(venv, "install", "-r", str(repo / "requirements.txt"), "--no-cache-dir")
    seconds = time.perf_counter() - started
    after = installed(venv)
    changed = {name: after.get(name) for name, version in KEEP.items()
               if (after.get(name) or "").split("+")[0] != version}
    if changed:
        raise SystemExit(f"requirements.txt replaced the image's {changed} (image has {KEEP})")
    print(f"entrypoint install of requirements.txt: {seconds:.1f} s; kept "
          + ", ".join(f"{n} {after[n]}" for n in KEEP), flush=True)
    return seconds


def cold_start(venv: Path) -> None:
    import os
    import shutil
    import tempfile

    from toolkit_server import toolkit_server  # beside this script: sys.path[0] when it runs

    real = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
    pipeline = real / "pyannote-campp-3.1"
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        fresh = Path(tmp) / "venv"
        subprocess.run(["cp", "-a", str(venv), str(fresh)], check=True)  # the image as it ships
        started = time.perf_counter()
        install = entrypoint_install(fresh)
        env = {"HF_TASK": "automatic-speech-recognition", "ASR_MODEL": str(real / "whisper-tiny.en"),
               "ASSISTANT_MODEL": "", "DIARIZATION_MODEL": str(pipeline)}
        with toolkit_server(env, python=str(fresh / "bin" / "python")):
            total = time.perf_counter() - started
        shutil.rmtree(fresh, ignore_errors=True)
    print(f"cold start: {total:.1f} s from container start to /health 200 "
          f"(pip install -r requirements.txt {install:.1f} s, server start and model load "
          f"{total - install:.1f} s)", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("base", "entrypoint", "pins", "coldstart"):
        raise SystemExit(__doc__)
    target = Path(sys.argv[2])
    if sys.argv[1] == "pins":
        print("\n".join(image_pins()))
    elif sys.argv[1] == "base":
        build_base(target)
    elif sys.argv[1] == "coldstart":
        cold_start(target)
    else:
        entrypoint_install(target)
