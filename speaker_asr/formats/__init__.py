"""Output writers: the handler's JSON response -> json, verbose_json, diarized_json, srt, vtt,
rttm, txt. Pure Python (no torch).

>>> render(response, "srt", speaker_names=["Alice", "Bob"])
{"format": "srt", "content": "1\\n00:00:00,000 --> 00:00:01,200\\nAlice: Hello there.\\n\\n..."}

JSON formats return a dict; text formats return ``{"format": <name>, "content": <text>}`` so every
client still gets JSON. ``render`` never changes the response it is given.
"""

from __future__ import annotations

from typing import Any, Optional

from . import (diarized_json, json_writer, rttm_writer, srt_writer, txt_writer, verbose_json,
               vtt_writer)
from ._common import apply_speaker_names, validate_speaker_names
from speaker_asr.errors import RequestError
from speaker_asr.types import Response

_WRITERS = {m.NAME: m for m in (json_writer, verbose_json, diarized_json, srt_writer, vtt_writer,
                                rttm_writer, txt_writer)}
FORMATS: tuple[str, ...] = tuple(_WRITERS)
TEXT_FORMATS: tuple[str, ...] = ("srt", "vtt", "rttm", "txt")
TASKS: tuple[str, ...] = ("transcribe", "translate")
# media types of the text formats' content, for a server that wants to send it raw
MEDIA_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt", "rttm": "text/plain",
               "txt": "text/plain", "json": "application/json", "verbose_json": "application/json",
               "diarized_json": "application/json"}

# response keys beside the transcript that every format carries along unchanged
CARRIED_KEYS = ("duration", "warnings", "known_speakers", "speaker_embeddings")

__all__ = ["FORMATS", "TEXT_FORMATS", "TASKS", "MEDIA_TYPES", "CARRIED_KEYS", "render",
           "render_response"]


def render(response: Response, fmt: str, *, speaker_names: Optional[list[str]] = None,
           task: str = "transcribe") -> dict[str, Any]:
    """The response in format ``fmt``. ``speaker_names`` renames speakers in order of first
    appearance (the first to speak -> ``speaker_names[0]``, ...; later ones keep their labels).
    Raises ValueError for an unknown format or task, bad names, or a response that is not a dict."""
    name = fmt.strip().lower() if isinstance(fmt, str) else None
    if name not in _WRITERS:
        raise RequestError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if task not in TASKS:
        raise RequestError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if not isinstance(response, dict):
        raise RequestError(f"the response to render must be a dict, got {type(response).__name__}")
    names = validate_speaker_names(speaker_names)
    return _WRITERS[name].render(apply_speaker_names(response, names), task=task)


def render_response(response: Response, fmt: str, *, speaker_names: Optional[list[str]] = None,
                    task: str = "transcribe") -> dict[str, Any]:
    """What the endpoint answers for ``response_format=fmt``: the json response itself when
    nothing changes it, else :func:`render` with the :data:`CARRIED_KEYS` (audio length,
    warnings, known speakers, voice embeddings) kept beside the rendered transcript."""
    if fmt == "json" and not speaker_names:
        return response
    out = render(response, fmt, speaker_names=speaker_names, task=task)
    renamed = apply_speaker_names(response, validate_speaker_names(speaker_names)) \
        if speaker_names and response.get("speaker_embeddings") else response
    for key in CARRIED_KEYS:
        if renamed.get(key) is not None:
            out.setdefault(key, renamed[key])
    return out
