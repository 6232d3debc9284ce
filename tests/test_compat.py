"""Which transformers the suite runs under: the compatibility pass of `make test` puts
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

    from speaker_asr.asr.transcriber import dtype_kwarg

    key = next(iter(dtype_kwarg("float32")))
    assert key == ("dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype")
