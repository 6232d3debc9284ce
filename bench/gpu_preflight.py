"""The GPU run's preflight (bench/gpu_run.sh): a missing wheel, import or device fails in seconds,
named, before any minute of GPU time goes to building models.

    python bench/gpu_preflight.py wheels [--dir bench/.whl]          # stdlib only, well under a second
    python bench/gpu_preflight.py imports --device cuda --out DIR    # after the wheels are installed
    python bench/gpu_preflight.py closure --dir bench/.whl           # here: every carried wheel's
                                                                      # needs met by the image or the wheels

``wheels``: every pin of bench/gpu_wheels.txt has its wheel in the folder (and only one version of it:
two stop pip's install). ``imports``: everything the run imports, then the device (CUDA there, with a
half-precision product; or the CPU of a dry run); writes ``preflight.json`` (versions, the GPU) to
``--out``. ``closure`` (here, in the project's environment): the requirements of each carried wheel (for
Python ``--python``, x86-64 Linux) are met by another carried wheel (version checked) or named in
bench/gpu_image.txt, and every distribution that importing the run's modules loads here is on the
image, carried, left behind, or needed by one of those (an optional import).
Exit status 2 and one line per problem on a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "gpu_wheels.txt"
IMAGE = HERE / "gpu_image.txt"
FETCH = "run bench/gpu_wheels.sh where pip reaches the package index, then carry the folder"
# what the run imports (module, what needs it), in the order it needs them
IMPORTS = [
    ("numpy", "everything"), ("scipy", "the clustering"), ("torch", "everything"),
    ("transformers", "Whisper"), ("pydantic", "speaker_asr.config"),
    ("pydantic_settings", "speaker_asr.config"), ("soundfile", "decoding the requests' WAV"),
    ("lightning", "pyannote.audio's models"), ("pyannote.audio", "the diarization"),
    ("speaker_asr.endpoint", "the handler"), ("speaker_asr.testing.tiny_models", "the random models"),
]


def canonical(name: str) -> str:
    """A distribution's name as wheel files and indexes compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def manifest_lines(manifest: Path | None = None) -> list[str]:
    manifest = manifest or MANIFEST
    return [line.split("#", 1)[0].strip() for line in manifest.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def left_behind(manifest: Path | None = None) -> set[str]:
    """The requirements left behind on purpose (``!name`` lines), canonical names."""
    return {canonical(line[1:]) for line in manifest_lines(manifest) if line.startswith("!")}


def pins(manifest: Path | None = None) -> dict[str, str]:
    """bench/gpu_wheels.txt: canonical name -> the pin as written (``name==version``)."""
    out = {}
    for line in manifest_lines(manifest):
        if not line.startswith("!"):
            name, _, version = line.partition("==")
            if not version:
                raise SystemExit(f"{manifest or MANIFEST}: {line!r} is not pinned (name==version)")
            out[canonical(name)] = line
    return out


def wheel_files(folder: Path) -> dict[str, list[tuple[str, str]]]:
    """The folder's wheels: canonical name -> [(version, file name)]."""
    found: dict[str, list[tuple[str, str]]] = {}
    for f in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
        name, version = f.name.split("-")[:2]
        found.setdefault(canonical(name), []).append((version, f.name))
    return found


def check_wheels(folder: Path) -> list[str]:
    """What is wrong with the folder against the manifest: one line each (none: all is there)."""
    if not folder.is_dir():
        return [f"preflight: no wheel folder {folder}: {FETCH}"]
    found = wheel_files(folder)
    pinned = pins()
    problems = []
    for name, pin in pinned.items():
        want = pin.partition("==")[2]
        have = found.get(name, [])
        if not any(v == want for v, _ in have):
            problems.append(f"preflight: missing wheel {pin} in {folder}"
                            + (f" (found {', '.join(f for _, f in have)})" if have else "")
                            + f": {FETCH}")
        if len(have) > 1:
            problems.append(f"preflight: {len(have)} versions of {name} in {folder} "
                            f"({', '.join(f for _, f in have)}): keep one")
    for name, files in found.items():
        if name not in pinned:
            problems.append(f"preflight: {files[0][1]} in {folder} is not in {MANIFEST.name}")
    return problems


def check_imports() -> tuple[list[str], dict]:
    import importlib

    problems, versions = [], {}
    for module, why in IMPORTS:
        started = time.perf_counter()
        try:
            mod = importlib.import_module(module)
        except Exception as exc:  # ImportError, or a wheel built for another Python
            missing = getattr(exc, "name", None) or module
            carried = canonical(missing.split(".")[0]) in pins()
            problems.append(
                f"preflight: cannot import {module} (for {why}): {type(exc).__name__}: {exc}"
                + ("" if carried else f" -- {missing.split('.')[0]} is neither on this machine nor in "
                                      f"{MANIFEST.name}"))
            continue
        versions[module] = {"version": getattr(mod, "__version__", None),
                            "s": round(time.perf_counter() - started, 2)}
    return problems, versions


def check_device(device: str) -> tuple[list[str], dict]:
    import torch

    info = {"torch": torch.__version__, "device": device}
    if not device.startswith("cuda"):
        info["name"] = f"CPU x{os.cpu_count()} ({torch.backends.cpu.get_cpu_capability()})"
        return [], info
    if not torch.cuda.is_available():
        return [f"preflight: DEVICE={device} but torch {torch.__version__} sees no GPU"], info
    props = torch.cuda.get_device_properties(device)
    info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1),
                capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda)
    a = torch.randn(1024, 1024, device=device, dtype=torch.float16)
    if not torch.isfinite((a @ a).float().sum()).item():  # also synchronises: the GPU answered
        return [f"preflight: a float16 matrix product on {props.name} is not finite"], info
    return [], info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=("wheels", "imports", "closure"))
    ap.add_argument("--dir", type=Path, default=HERE / ".whl", help="the wheel folder")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=None, help="imports: where preflight.json goes")
    ap.add_argument("--python", default="3.12", help="closure: the machine's Python")
    ap.add_argument("--manifest", type=Path, default=None, help="instead of bench/gpu_wheels.txt")
    args = ap.parse_args()
    if args.manifest:
        global MANIFEST
        MANIFEST = args.manifest
    started = time.perf_counter()
    if args.step == "wheels":
        problems = check_wheels(args.dir)
        detail = f"{len(pins())} wheels in {args.dir}"
    elif args.step == "closure":
        problems = check_closure(args.dir, args.python)
        detail = f"the needs of {len(pins())} wheels met by each other or {IMAGE.name}"
    else:
        problems, versions = check_imports()
        info = {}
        if not problems:
            more, info = check_device(args.device)
            problems += more
        detail = f"imports and device ({info.get('name', args.device)})"
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "preflight.json").write_text(json.dumps(
                {"python": sys.version.split()[0], "imports": versions, "device": info,
                 "problems": problems}, indent=1))
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return 2
    print(f"preflight {args.step}: ok, {detail} ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


def check_closure(folder: Path, python: str) -> list[str]:
    """Each carried wheel's requirements (no extras; markers for ``python`` on x86-64 Linux) are
    met by a carried wheel of a matching version, or by a distribution of the image."""
    from packaging.requirements import Requirement

    image = {canonical(line.strip()) for line in IMAGE.read_text().splitlines()
             if line.strip() and not line.startswith("#")}
    found = wheel_files(folder)
    carried = {name: files[0][0] for name, files in found.items()}
    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    behind = left_behind()
    problems = check_wheels(folder)
    for name, files in found.items():
        with zipfile.ZipFile(folder / files[0][1]) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode("utf-8", "replace").splitlines()
        for line in lines:
            if not line.startswith("Requires-Dist:"):
                continue
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            need = canonical(req.name)
            if need in carried:
                if req.specifier and not req.specifier.contains(carried[need], prereleases=True):
                    problems.append(f"closure: {files[0][1]} needs {req}, the wheels carry {carried[need]}")
            elif need not in image and need not in behind:
                problems.append(f"closure: {files[0][1]} needs {req}: neither carried "
                                f"({MANIFEST.name}) nor on the image ({IMAGE.name})")
    return problems + check_imported_distributions(image | set(carried) | behind)


def check_imported_distributions(known: set[str]) -> list[str]:
    """Import what the run imports, here, and name each distribution they loaded that the GPU
    machine would lack: neither on its image, carried, left behind, nor needed (extras too) by
    something that is -- a new import in the endpoint's code fails here, not on the GPU."""
    import importlib.metadata as md

    check_imports()
    requires = {canonical(d.metadata["Name"]): d.requires or [] for d in md.distributions()}
    reach, todo = set(known), list(known)
    while todo:
        for req in requires.get(todo.pop(), []):
            need = canonical(re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0])
            if need not in reach:
                reach.add(need)
                todo.append(need)
    owners = md.packages_distributions()
    loaded = {canonical(d) for top in {m.split(".")[0] for m in list(sys.modules)}
              for d in owners.get(top, [])}
    return [f"closure: the run imports {name} (installed here), which the GPU machine lacks: add its "
            f"wheel to {MANIFEST.name}" for name in sorted(loaded - reach - {"speaker-asr"})]


if __name__ == "__main__":
    sys.exit(main())
