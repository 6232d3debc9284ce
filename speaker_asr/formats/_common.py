"""Shared helpers for the output writers: milliseconds, text on one line, display width.

Pure Python: nothing here imports torch, numpy or pyannote.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any, Optional


def to_ms(seconds: float) -> int:
    """Seconds -> whole milliseconds, rounding half up, never negative."""
    return max(0, int(math.floor(seconds * 1000.0 + 0.5)))


def one_line(text: Any) -> str:
    """Text on one line: control characters dropped, whitespace runs collapsed, ends stripped."""
    if not isinstance(text, str):
        return ""
    text = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    return " ".join(text.split())


def label(speaker: Any) -> Optional[str]:
    """A speaker label fit for one line, or None (no speaker)."""
    if speaker is None:
        return None
    text = one_line(str(speaker))
    return text or None


def char_width(ch: str) -> int:
    """Display columns of a character: wide East Asian characters count 2, combining marks 0."""
    if ch == "\u200d" or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def width(text: str) -> int:
    return sum(char_width(ch) for ch in text)
