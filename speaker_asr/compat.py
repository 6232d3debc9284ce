"""Which releases of transformers and pyannote.audio are installed, asked in one place, and the
few keyword differences between them that the code has to bridge.

Supported: transformers 4.51.3-4.57.x and 5.x; pyannote.audio 3.3.x (the default Inference
Endpoints image's torch 2.5) and 4.x (torch >= 2.8). Each caller asks here instead of parsing
``__version__`` itself.
"""

from __future__ import annotations

import functools

from packaging.version import Version


@functools.cache
def transformers_version() -> Version:
    import transformers

    return Version(transformers.__version__)


def transformers_major() -> int:
    return transformers_version().major


def transformers_at_least(version: str) -> bool:
    return transformers_version() >= Version(version)


@functools.cache
def pyannote_major() -> int:
    """3 on the default Endpoints image's torch 2.5, 4 where torch >= 2.8."""
    from pyannote.audio import __version__

    return Version(str(__version__)).major


def dtype_kwarg(dtype) -> dict:
    """transformers >= 4.56 calls it ``dtype``; older releases only know ``torch_dtype``."""
    return {"dtype" if transformers_at_least("4.56") else "torch_dtype": dtype}
