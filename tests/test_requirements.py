"""The two requirement files: requirements.txt (what the default Inference Endpoints image
installs at every start, on its torch 2.5.1) and requirements-pyannote4.txt (torch >= 2.8) name the
same packages with the same bounds, except pyannote.audio's major version, transformers 5 (not on the
image) and the pins that keep the image's stack; neither names torch."""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
IMAGE_ONLY = {"speechbrain"}  # pinned below the release that would pull a newer torch


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
    assert set(image) - IMAGE_ONLY == set(modern)
    for name in set(modern) - {"pyannote.audio", "numpy", "transformers"}:
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
