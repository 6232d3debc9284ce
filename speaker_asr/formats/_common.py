"""Shared helpers for the output writers: speaker renaming, speaker segments, numbers, text.

Pure Python: nothing here imports torch, numpy or pyannote.
"""

from __future__ import annotations

import copy
import math
import unicodedata
from bisect import bisect_right
from typing import Any, Optional, Sequence

from speaker_asr.errors import RequestError
from speaker_asr.types import Response

MAX_SPEAKER_NAMES = 32


# --------------------------------------------------------------------------- numbers and text


def num(value: Any) -> Optional[float]:
    """A finite float, or None for anything else (None, NaN, inf, strings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def span(item: dict) -> tuple[float, float]:
    """``(start, end)`` of a chunk or speaker entry from its ``timestamp`` pair (missing -> 0 / start)."""
    stamp = item.get("timestamp")
    stamp = list(stamp) if isinstance(stamp, (list, tuple)) else []
    start = num(stamp[0]) if len(stamp) > 0 else None
    end = num(stamp[1]) if len(stamp) > 1 else None
    start = max(0.0, start if start is not None else 0.0)
    end = end if end is not None and end >= start else start
    return start, end


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


# --------------------------------------------------------------------------- speaker names


def validate_speaker_names(names: Any, param: str = "speaker_names",
                           limit: int = MAX_SPEAKER_NAMES) -> list[str]:
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


def speakers_in_order(response: Response) -> list[Any]:
    """Speaker labels in order of first appearance in time (speaker entries, chunks and words; at
    equal times in that reading order). ``None`` is not a speaker."""
    items: list[tuple[float, Any]] = []
    for entry in response.get("speakers") or []:
        if isinstance(entry, dict):
            items.append((span(entry)[0], entry.get("speaker")))
    for chunk in response.get("chunks") or []:
        if not isinstance(chunk, dict):
            continue
        items.append((span(chunk)[0], chunk.get("speaker")))
        for word in chunk.get("words") or []:
            if isinstance(word, dict):
                start = num(word.get("start"))
                items.append((start if start is not None else span(chunk)[0], word.get("speaker")))
    order: list[Any] = []
    seen: set = set()
    for _, speaker in sorted(items, key=lambda item: item[0]):  # stable: ties keep reading order
        if speaker is not None and speaker not in seen:
            seen.add(speaker)
            order.append(speaker)
    return order


def apply_speaker_names(response: Response, names: Sequence[str]) -> dict:
    """A deep copy of the response with the first speakers (by first appearance) renamed to
    ``names``; later speakers keep their labels. Raises ValueError if a new name equals the label
    of a speaker that keeps its label."""
    response = copy.deepcopy(response)
    if not names:
        return response
    order = speakers_in_order(response)
    mapping = {speaker: name for speaker, name in zip(order, names)}
    kept = {str(s) for s in order[len(names):]}
    clashes = [name for name in mapping.values() if name in kept]
    if clashes:
        raise RequestError(f"speaker_names: {clashes[0]!r} is also the label of a speaker beyond the "
                         f"{len(names)} named ones; give every speaker a name or pick another name")

    def rename(item: Any) -> None:
        if isinstance(item, dict) and item.get("speaker") in mapping:
            item["speaker"] = mapping[item["speaker"]]

    for entry in response.get("speakers") or []:
        rename(entry)
    for chunk in response.get("chunks") or []:
        rename(chunk)
        if isinstance(chunk, dict):
            for word in chunk.get("words") or []:
                rename(word)
    voices = response.get("speaker_embeddings")
    if isinstance(voices, dict):  # keyed by the transcript's labels: the same names
        response["speaker_embeddings"] = {mapping.get(k, k): v for k, v in voices.items()}
    return response


# --------------------------------------------------------------------------- segments and words


def chunks(response: Response) -> list[dict]:
    return [c for c in response.get("chunks") or [] if isinstance(c, dict)]


def is_diarized(response: Response) -> bool:
    """Diarization was on: speaker entries exist, or chunks carry a ``speaker`` key."""
    return bool(response.get("speakers")) or any("speaker" in c for c in chunks(response))


def has_words(response: Response) -> bool:
    return any("words" in c for c in chunks(response))


def _chunk_groups(response: Response) -> list[list[dict]]:
    """Consecutive chunks of the same speaker."""
    groups: list[list[dict]] = []
    for chunk in chunks(response):
        if groups and groups[-1][0].get("speaker") == chunk.get("speaker"):
            groups[-1].append(chunk)
        else:
            groups.append([chunk])
    return groups


def speaker_segments(response: Response) -> Optional[list[dict]]:
    """Per-speaker segments ``{"start", "end", "text", "speaker"}``: the response's ``speakers``
    entries; built from consecutive same-speaker chunks when those are missing but chunks carry
    speakers; None when diarization is off."""
    entries = [e for e in response.get("speakers") or [] if isinstance(e, dict)]
    if entries:
        out = []
        for e in entries:
            start, end = span(e)
            out.append({"start": start, "end": end, "text": e.get("text") or "",
                        "speaker": e.get("speaker")})
        return out
    if not is_diarized(response):
        return None
    out = []
    for group in _chunk_groups(response):
        out.append({"start": span(group[0])[0], "end": max(span(c)[1] for c in group),
                    "text": "".join(c.get("text") or "" for c in group).strip(),
                    "speaker": group[0].get("speaker")})
    return out


def word_entry(word: dict, speaker: Any) -> dict:
    """A word as the JSON formats write it: ``{"word", "start", "end", "speaker"}``."""
    return {"word": word.get("word") if isinstance(word.get("word"), str) else "",
            "start": num(word.get("start")), "end": num(word.get("end")),
            "speaker": word.get("speaker", speaker)}


def words_by_segment(response: Response, segments: list[dict]) -> list[list[dict]]:
    """The response's words shared out to ``segments``: by consecutive same-speaker chunk groups
    when those match the segments one to one (how the handler builds them), else each word to the
    nearby segment it overlaps most, preferring one of its own speaker."""
    groups = _chunk_groups(response)
    if len(groups) == len(segments) and all(g[0].get("speaker") == s["speaker"]
                                            for g, s in zip(groups, segments)):
        return [[word_entry(w, c.get("speaker")) for c in g for w in c.get("words") or []
                 if isinstance(w, dict)] for g in groups]
    out: list[list[dict]] = [[] for _ in segments]
    if not segments:
        return out
    starts = [s["start"] for s in segments]
    for chunk in chunks(response):
        for w in chunk.get("words") or []:
            if not isinstance(w, dict):
                continue
            entry = word_entry(w, chunk.get("speaker"))
            ws = entry["start"] if entry["start"] is not None else span(chunk)[0]
            we = entry["end"] if entry["end"] is not None and entry["end"] >= ws else ws
            i = bisect_right(starts, (ws + we) / 2) - 1

            def score(j: int) -> tuple:
                seg = segments[j]
                overlap = min(we, seg["end"]) - max(ws, seg["start"])
                return (seg["speaker"] == entry["speaker"], overlap, -abs(j - i))

            best = max(range(max(0, i - 2), min(len(segments), i + 3)), key=score)
            out[best].append(entry)
    return out
