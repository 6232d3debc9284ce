"""Shared helpers for the output writers: milliseconds, text on one line, display width; and for
the JSON shapes, the :class:`Options` they are written with and the fields they share.

Pure Python: nothing here imports torch, numpy or pyannote.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    from speaker_asr.result import Result


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


# --------------------------------------------------------------------------- the JSON shapes


@dataclass(frozen=True)
class Options:
    """How to write one answer, on both routes (``POST /`` and ``/v1``).

    ``task``: ``transcribe`` or ``translate``. ``response_format``: the format's name (the
    ``/v1`` writer, :func:`speaker_asr.formats.openai_shapes.render`, chooses by it).
    ``words`` / ``segments``: verbose_json's ``words`` and ``segments`` (on ``/v1`` the
    ``timestamp_granularities`` asked for, none given meaning segments; on ``POST /`` segments,
    and words when the result has word timestamps). ``model``: the model that ran, written as
    ``model`` (None: not written). ``temperature``: the request's first temperature
    (verbose_json's segments). ``language_names``: language code -> Whisper's name (``en`` ->
    ``english``) for verbose_json's ``language``; None: Whisper's own table (read from
    transformers when verbose_json is written); a code without a name is written as it is."""

    task: str = "transcribe"
    response_format: str = "json"
    words: bool = False
    segments: bool = True
    model: Optional[str] = None
    temperature: float = 0.0
    language_names: Optional[Mapping[str, str]] = None


def first_temperature(temperature: Union[float, Sequence[float]]) -> float:
    """The temperature a request decodes with first: itself, or the first of its fallback list
    (what verbose_json's segments carry, and what decides whether the first pass samples and
    whether the assistant may draft)."""
    if isinstance(temperature, (list, tuple)):
        return float(temperature[0]) if temperature else 0.0
    return float(temperature)


def times(start: Optional[float], end: Optional[float], previous: float) -> tuple[float, float]:
    """A part's ``(start, end)`` with a time Whisper left out filled in: a missing start is the
    previous part's end, a missing (or earlier) end its start."""
    start = start if start is not None else previous
    end = end if end is not None and end >= start else start
    return start, end


def transcript_text(result: "Result") -> str:
    """The transcript's text as OpenAI writes it: without the leading space Whisper puts there."""
    return result.text.strip()


def usage(result: "Result") -> Optional[dict[str, Any]]:
    """OpenAI's usage by audio duration: ``{"type": "duration", "seconds"}`` (None: no duration)."""
    return None if result.duration is None else {"type": "duration", "seconds": result.duration}


def closing_fields(result: "Result", options: Options) -> dict[str, Any]:
    """What every JSON shape but ``json`` itself ends with: ``usage`` (with a duration), ``model``
    (when named), then what the request noted (:meth:`Result.notes_json`)."""
    out: dict[str, Any] = {}
    if (used := usage(result)) is not None:
        out["usage"] = used
    if options.model is not None:
        out["model"] = options.model
    out.update(result.notes_json())
    return out
