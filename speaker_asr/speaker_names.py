"""Speaker names given in a request (``speaker_names``, ``known_speaker_names``): how many, and
the rule every name follows. A vocabulary below the code that reads it: the request validation
(config.py) and the writers (formats/) both import it, and it imports neither.

Pure Python: no torch, numpy or pydantic.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from speaker_asr.errors import RequestError

MAX_SPEAKERS = 32  # speakers to find (num_speakers, ...) and names for them (speaker_names)


def speaker_label(index: int) -> str:
    """The label of the ``index``-th speaker found, ``SPEAKER_00``, ``SPEAKER_01``, ...: the one
    spelling of a speaker without a name, in files and live sessions alike."""
    return f"SPEAKER_{index:02d}"


def first_free_label(used) -> str:
    """The first :func:`speaker_label` not in ``used``."""
    n = 0
    while speaker_label(n) in used:
        n += 1
    return speaker_label(n)


def validate_speaker_names(names: Any, param: str = "speaker_names",
                           limit: int = MAX_SPEAKERS) -> list[str]:
    """``speaker_names`` (or another list of names, ``param``) -> a clean list (names stripped).
    Raises RequestError saying what is wrong."""
    if names is None:
        return []
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise RequestError(f"{param} must be a list of strings, e.g. [\"Alice\", \"Bob\"]")
    if len(names) > limit:
        raise RequestError(f"{param} has {len(names)} names; at most {limit} are allowed")
    clean: list[str] = []
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip():
            raise RequestError(f"{param}[{i}] must be a non-empty string, got {name!r}")
        if any(unicodedata.category(ch) == "Cc" for ch in name):
            raise RequestError(f"{param}[{i}] must not contain line breaks or control characters")
        name = name.strip()
        if name in clean:
            raise RequestError(f"{param} has the name {name!r} twice; names must be unique")
        clean.append(name)
    return clean
