"""OpenAI's audio API shapes, written from a :class:`~speaker_asr.result.Result`: what
``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` answer
(speaker_asr/serving/openai_api.py), in the shapes the official ``openai`` SDK parses into its own
types, with a ``speaker`` beside every segment and word.

* ``json`` (``Transcription``): ``{"text", "usage"}``;
* ``text``, ``srt``, ``vtt``: the plain text (:data:`TEXT_MEDIA_TYPE`): the transcript's text;
  subtitles with the speaker as a ``SPEAKER_00: `` prefix in srt and a ``<v SPEAKER_00>`` voice
  span in vtt -- the srt and vtt writers of ``POST /``;
* ``verbose_json`` (``TranscriptionVerbose``) and ``diarized_json`` (``TranscriptionDiarized``):
  the writers of these names in this package (:mod:`.verbose_json`, :mod:`.diarized_json`), the
  same on ``POST /``;
* ``stream=true``: server-sent events, per speaker turn a ``transcript.text.delta`` and a
  ``transcript.text.segment``, then one ``transcript.text.done`` (:func:`stream_events`, :func:`sse`);
* errors: ``{"error": {"message", "type", "param", "code"}}`` (:func:`error_object`), and the model
  list of ``GET /v1/models`` (:func:`model_list`).

The JSON shapes also carry ``model`` (the model that ran) and, when there are any, ``assisted``,
``known_speakers``, ``speaker_embeddings`` and ``warnings`` as the other formats do (extra fields:
the SDK keeps them on its objects).

Pure Python: no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from . import diarized_json, srt_writer, verbose_json, vtt_writer
from ._common import Options, closing_fields, transcript_text
from speaker_asr.result import Result

# the formats of /v1 (OpenAI's), each answered as JSON or, for the text ones, as TEXT_MEDIA_TYPE
OPENAI_FORMATS: tuple[str, ...] = ("json", "text", "srt", "verbose_json", "vtt", "diarized_json")
TIMESTAMP_GRANULARITIES: tuple[str, ...] = ("word", "segment")
TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
EVENT_STREAM_MEDIA_TYPE = "text/event-stream; charset=utf-8"

def render(result: Result, options: Options) -> Union[dict[str, Any], str]:
    """The answer for ``options.response_format``: a dict for the JSON formats, the text (served
    as :data:`TEXT_MEDIA_TYPE`) for ``text``, ``srt`` and ``vtt``."""
    fmt = options.response_format
    if fmt == "json":
        return transcription(result, options)
    if fmt == "verbose_json":
        return verbose_json.write(result, options)
    if fmt == "diarized_json":
        return diarized_json.write(result, options)
    if fmt == "text":
        return plain_text(result)
    if fmt == "srt":
        return srt_writer.write(result)
    if fmt == "vtt":
        return vtt_writer.write(result)
    raise ValueError(f"unknown response_format {fmt!r}: use one of {', '.join(OPENAI_FORMATS)}")


# --------------------------------------------------------------------------- the shapes


def plain_text(result: Result) -> str:
    """``response_format=text``: the transcript's text and a line break (nothing for silence)."""
    text = transcript_text(result)
    return text + "\n" if text else ""


def transcription(result: Result, options: Options) -> dict[str, Any]:
    """``json``: OpenAI's ``Transcription``: ``text``, ``usage``, and what every JSON shape closes
    with."""
    return {"text": transcript_text(result), **closing_fields(result, options)}


# --------------------------------------------------------------------------- streaming


def stream_events(result: Result, options: Options) -> list[dict[str, Any]]:
    """The events of ``stream=true``: per speaker turn (transcript segment without diarization)
    a ``transcript.text.delta`` (its text, after a space from the second on, and its
    ``segment_id``) and a ``transcript.text.segment`` (as in diarized_json), then one
    ``transcript.text.done`` with the whole text (and ``warnings`` / ``known_speakers`` when
    there are any: :func:`done_event`)."""
    events: list[dict[str, Any]] = []
    for i, part in enumerate(diarized_json.turns_of(result)):
        events.append({"type": "transcript.text.delta", "delta": part[2] if i == 0 else " " + part[2],
                       "segment_id": f"seg_{i}"})
        events.append(diarized_json.segment(i, part, result.channels is not None))
    events.append(done_event(result))
    return events


def done_event(result: Result, segments: bool = False) -> dict[str, Any]:
    """``transcript.text.done``: the whole text, and ``warnings`` / ``known_speakers`` when there
    are any. With ``segments``, it also carries every ``transcript.text.segment`` the stream
    sends before it (``segments``, as in diarized_json): the live route's final transcript, one
    event with all of it (speaker_asr/live/session.py)."""
    done: dict[str, Any] = {"type": "transcript.text.done", "text": transcript_text(result)}
    if segments:
        done["segments"] = [diarized_json.segment(i, part, result.channels is not None)
                            for i, part in enumerate(diarized_json.turns_of(result))]
    notes = result.notes_json()
    for key in ("warnings", "known_speakers"):
        if key in notes:
            done[key] = notes[key]
    return done


def sse(event: Mapping[str, Any]) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    return b"data: " + json.dumps(event, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n\n"


SSE_KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it, proxies see traffic


# --------------------------------------------------------------------------- errors and models


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for a status code."""
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error_object(message: str, status: int, param: Optional[str] = None,
                 code: Optional[str] = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


@dataclass(frozen=True)
class ModelCard:
    """One entry of ``GET /v1/models``."""

    id: str
    created: int
    owned_by: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": self.owned_by}


def model_list(cards: list[ModelCard]) -> dict[str, Any]:
    """OpenAI's list shape: ``{"object": "list", "data": [model, ...]}``."""
    return {"object": "list", "data": [card.to_json() for card in cards]}
