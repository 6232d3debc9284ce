"""Which transformers the suite runs under: the compatibility pass (`make test-compat`) puts
transformers 4.51 (the Inference Endpoints toolkit's pin) first and must really get it."""

import os

import pytest


def test_transformers_version_is_the_expected_one():
    import transformers

    expected = os.environ.get("EXPECT_TRANSFORMERS")
    if not expected:
        pytest.skip("no EXPECT_TRANSFORMERS given (main pass)")
    assert transformers.__version__ == expected


def test_dtype_keyword_matches_the_transformers_release():
    import transformers
    from packaging.version import Version

    from speaker_asr.compat import dtype_kwarg

    key = next(iter(dtype_kwarg("float32")))
    assert key == ("dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype")


def test_versions_are_asked_in_one_place():
    """speaker_asr.compat answers for the installed releases; no other module parses a version."""
    import re
    from pathlib import Path

    import pyannote.audio
    import transformers
    from packaging.version import Version

    from speaker_asr.compat import pyannote_major, transformers_at_least, transformers_major

    assert transformers_major() == Version(transformers.__version__).major
    assert transformers_at_least("4.51.3") and not transformers_at_least("99")
    assert pyannote_major() == Version(pyannote.audio.__version__).major
    package = Path(__file__).resolve().parent.parent / "speaker_asr"
    parsing = [str(p.relative_to(package)) for p in package.rglob("*.py")
               if p.name != "compat.py" and re.search(r"(transformers|pyannote\.audio)\.__version__|"
                                                      r"from (transformers|pyannote\.audio) import __version__",
                                                      p.read_text())]
    assert parsing == []
