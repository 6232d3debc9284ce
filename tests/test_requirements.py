"""The two requirement files: requirements.txt (what the default Inference Endpoints image
installs at every start, on its torch 2.5.1) and requirements-pyannote4.txt (torch >= 2.8) name the
same packages with the same bounds, except pyannote.audio's major version, transformers 5 (not on the
image), the pins that keep the image's stack and torchcodec (pyannote.audio 4's file reader); neither
names torch. torchcodec is pinned with torch, in the Dockerfile and the Makefile, to a release built
for that torch (its compatibility table, recorded here)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
IMAGE_ONLY = {"speechbrain"}  # pinned below the release that would pull a newer torch
MODERN_ONLY = {"torchcodec"}  # pyannote.audio 4's; 3.3 reads audio with torchaudio

# torchcodec's compatibility table (its README): the torch releases each torchcodec minor is built
# for. Up to 0.11 one torch minor each; from 0.12 on every torch from 2.11 (torch's stable ABI).
# torchcodec declares no torch dependency, so nothing but this table keeps the two together.
TORCHCODEC_TORCH = {"0.1": "2.5", "0.2": "2.6", "0.3": "2.7", "0.4": "2.7", "0.5": "2.7", "0.6": "2.8",
                    "0.7": "2.8", "0.8": "2.9", "0.9": "2.9", "0.10": "2.10", "0.11": "2.11"}
STABLE_ABI_FROM = (Version("0.12"), Version("2.11"))  # torchcodec 0.12 on: torch >= 2.11


def _read(name: str) -> dict[str, Requirement]:
    reqs = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            reqs[req.name.lower()] = req
    return reqs


def test_neither_file_replaces_torch():
    for name in ("requirements.txt", "requirements-pyannote4.txt"):
        assert not {"torch", "torchvision", "torchaudio"} & set(_read(name)), name


def test_the_image_gets_pyannote_3_and_keeps_numpy_1():
    image, modern = _read("requirements.txt"), _read("requirements-pyannote4.txt")
    assert Version("3.3.2") in image["pyannote.audio"].specifier
    assert Version("4.0.7") not in image["pyannote.audio"].specifier
    assert Version("4.0.7") in modern["pyannote.audio"].specifier
    assert Version("1.26.4") in image["numpy"].specifier and Version("2.0.0") not in image["numpy"].specifier
    assert Version("1.0.3") in image["speechbrain"].specifier
    assert Version("1.1.0") not in image["speechbrain"].specifier


def test_both_files_agree_on_everything_else():
    image, modern = _read("requirements.txt"), _read("requirements-pyannote4.txt")
    assert set(image) - IMAGE_ONLY == set(modern) - MODERN_ONLY
    for name in set(modern) - MODERN_ONLY - {"pyannote.audio", "numpy", "transformers"}:
        assert str(image[name].specifier) == str(modern[name].specifier), name


def test_transformers_releases_allowed_are_the_tested_ones():
    """4.51.3 (the image's), 4.57.x (the newest 4.x) everywhere; 5.x needs torch >= 2.6 and breaks
    the image's own server, so only requirements-pyannote4.txt allows it (make test-all runs each)."""
    image, modern = _read("requirements.txt"), _read("requirements-pyannote4.txt")
    for version in ("4.51.3", "4.57.6"):
        assert Version(version) in image["transformers"].specifier
        assert Version(version) in modern["transformers"].specifier
    assert Version("5.0.0") not in image["transformers"].specifier
    assert Version("5.24.0") in modern["transformers"].specifier
    assert Version("6.0.0") not in modern["transformers"].specifier
    assert Version("4.51.2") not in image["transformers"].specifier


def torchcodec_runs_on(torchcodec: str, torch: str) -> bool:
    """Whether torchcodec release ``torchcodec`` is built for torch release ``torch`` (the table)."""
    codec, torch_version = Version(torchcodec), Version(torch)
    if codec >= STABLE_ABI_FROM[0]:
        return torch_version >= STABLE_ABI_FROM[1]
    built_for = TORCHCODEC_TORCH.get(f"{codec.major}.{codec.minor}")
    return built_for is not None and Version(built_for).release == torch_version.release[:2]


def test_the_table_reads_as_torchcodec_says():
    assert torchcodec_runs_on("0.7.0", "2.8.0") and not torchcodec_runs_on("0.7.0", "2.9.0")
    assert not torchcodec_runs_on("0.17.0", "2.8.0")  # what pip would take on the image's torch
    assert torchcodec_runs_on("0.17.0", "2.14.1") and torchcodec_runs_on("0.12.0", "2.11.0")
    assert not torchcodec_runs_on("0.10.0", "2.11.0")


def test_the_dockerfile_pins_the_torchcodec_of_its_base_images_torch():
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=pytorch/pytorch:(\d+\.\d+\.\d+)-", dockerfile, re.M)
    pin = re.search(r"^ARG TORCHCODEC_VERSION=(\S+)$", dockerfile, re.M)
    assert base and pin, "the Dockerfile names its base image's torch and its torchcodec"
    torch_version, torchcodec = base[1], pin[1]
    assert torchcodec_runs_on(torchcodec, torch_version), (torchcodec, torch_version)
    assert Version(torchcodec) in _read("requirements-pyannote4.txt")["torchcodec"].specifier
    # installed together with the image's torch, and the build fails if they do not load together
    assert '"torchcodec==${TORCHCODEC_VERSION}"' in dockerfile
    assert 'python -c "import torchcodec.decoders"' in dockerfile


def test_make_install_pins_the_torchcodec_of_its_torch():
    makefile = (ROOT / "Makefile").read_text()
    pins = re.search(r"^TORCH_PINS := (.*)$", makefile, re.M)[1].split()
    versions = {Requirement(p).name: str(Requirement(p).specifier).removeprefix("==") for p in pins}
    assert torchcodec_runs_on(versions["torchcodec"], versions["torch"]), versions
    assert Version(versions["torchcodec"]) in _read("requirements-pyannote4.txt")["torchcodec"].specifier
    # pyannote.audio 4's own lower bound (4.0.7: torchcodec>=0.7.0)
    assert Version("0.6.0") not in _read("requirements-pyannote4.txt")["torchcodec"].specifier
