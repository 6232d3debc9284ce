"""Content negotiation and request reading: HttpError, the accepted media types, audio sniffing,
the body size limit (enforced while the body streams in), the one multipart reader
(:func:`read_form`, used by ``POST /`` and by the ``/v1`` routes), and the handler's ``data`` from
a JSON, raw-audio or multipart request (its parameters given as text read by
speaker_asr/text_parameters.py)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from speaker_asr.text_parameters import list_key, parameters_from_text

DRAIN_AFTER_LIMIT_BYTES = 1024 * 1024


class HttpError(Exception):
    """An HTTP error, answered in the error shape of the app that raised it (``{"error":
    message}`` on ``/``, OpenAI's error object on ``/v1``, with ``param`` and ``code``)."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None,
                 code: Optional[str] = None, param: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.code = code
        self.param = param


# the audio types the inference toolkit lists, and a few more; any audio/* or video/* is accepted
AUDIO_MEDIA_TYPES = (
    "audio/flac", "audio/x-flac", "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave",
    "audio/mpeg", "audio/mp3", "audio/x-mpeg-3", "audio/ogg", "audio/opus", "audio/webm",
    "audio/m4a", "audio/x-m4a", "audio/mp4", "audio/aac", "audio/amr", "audio/amr-wb",
    "audio/x-audio", "video/mp4", "video/webm", "video/ogg",
)
RAW_MEDIA_TYPES = ("", "application/octet-stream", "application/x-www-form-urlencoded")

# (where the bytes stand, the bytes, the container), tried in this order: mp4's ftyp at offset 4
# can follow any first four bytes, so the formats listed before it win over it
_MAGIC = (
    (0, b"RF64", "wav"), (0, b"BW64", "wav"), (0, b"fLaC", "flac"), (0, b"OggS", "ogg"),
    (0, b"ID3", "mp3"), (4, b"ftyp", "mp4"), (0, b"\x1a\x45\xdf\xa3", "webm"), (0, b"#!AMR", "amr"),
    (0, b".snd", "au"), (0, b"caff", "caf"), (0, b"\x30\x26\xb2\x75\x8e\x66\xcf\x11", "asf"),
)


def sniff_audio(data: bytes) -> Optional[str]:
    """The container format the first bytes announce, or None when they do not look like audio."""
    head = bytes(data[:16])
    if head[:4] in (b"RIFF", b"RIFX") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0:
        # MPEG audio frame sync; layer bits 00 is an ADTS (AAC) header
        return "mp3" if head[1] & 0x06 else "aac"
    for offset, magic, name in _MAGIC:
        if head[offset:offset + len(magic)] == magic:
            return name
    return None


def header_media_type(content_type: Optional[str]) -> str:
    """The media type a Content-Type header names, without its parameters: ``Audio/WAV;
    charset=x`` -> ``audio/wav``; no header -> ``""``."""
    return (content_type or "").split(";")[0].strip().lower()


def is_audio_media_type(value: str) -> bool:
    return value in AUDIO_MEDIA_TYPES or value.startswith(("audio/", "video/"))


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _too_large(limit: int, got: Optional[int] = None) -> HttpError:
    got_text = f" ({_size(got)})" if got is not None else ""
    return HttpError(413, f"the request body{got_text} is larger than this server's limit of "
                             f"{limit} bytes ({_size(limit)}, MAX_BODY_BYTES); send a shorter or "
                             "compressed recording (FLAC, MP3, Opus), as raw bytes rather than "
                             "base64 JSON (a third larger)")


def check_declared_length(request: Request, limit: int) -> None:
    """413 by the Content-Length header, before anything is read; 400 for a header that is no
    length."""
    declared = request.headers.get("content-length")
    if declared is None:
        return
    try:
        length = int(declared)
        if length < 0:
            raise ValueError
    except ValueError:
        raise HttpError(400, f"invalid Content-Length header {declared[:40]!r}") from None
    if length > limit:
        raise _too_large(limit, length)


def limited_receive(receive, limit: int):
    """``receive`` that raises HttpError 413 once more than ``limit`` body bytes have arrived
    (for a body sent chunked or without a length), after reading and dropping a little more, so
    that a client just over the limit has sent its whole body and reads the 413 instead of a
    connection reset."""
    total = 0

    async def receive_within_limit():
        nonlocal total
        message = await receive()
        if message["type"] != "http.request":
            return message
        total += len(message.get("body", b""))
        if total > limit:
            more = message.get("more_body", False)
            while more and total <= limit + DRAIN_AFTER_LIMIT_BYTES:
                extra = await receive()
                if extra["type"] != "http.request":
                    break
                total += len(extra.get("body", b""))
                more = extra.get("more_body", False)
            raise _too_large(limit)
        return message

    return receive_within_limit


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing it (413) by its Content-Length before reading anything, and while
    reading when it arrives chunked or without a length."""
    check_declared_length(request, limit)
    limited = Request(request.scope, receive=limited_receive(request.receive, limit))
    chunks = [chunk async for chunk in limited.stream()]
    return b"".join(chunks)


# a form field's value (a data URI of a reference clip) may be this large; the body limit applies
MAX_FORM_FIELD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Upload:
    """A file field of a multipart form, read."""

    filename: Optional[str]
    data: bytes


FormItems = list[tuple[str, Union[str, Upload]]]


async def read_form(request: Request, limit: int) -> FormItems:
    """The multipart form's fields in order (files read, as :class:`Upload`), parsed while the
    body streams in -- python-multipart spools large files to disk instead of holding the body
    and its parts at once -- with the body limit (413) enforced as it arrives; HttpError 400 for
    a form that does not parse."""
    check_declared_length(request, limit)
    limited = Request(request.scope, receive=limited_receive(request.receive, limit))
    try:
        form = await limited.form(max_part_size=MAX_FORM_FIELD_BYTES)
    except HTTPException as exc:  # python-multipart's MultiPartException, as Starlette raises it
        raise HttpError(400, f"invalid multipart/form-data body: {exc.detail}") from None
    try:
        items: FormItems = []
        for key, value in form.multi_items():
            if isinstance(value, str):
                items.append((key, value))
            else:
                items.append((key, Upload(value.filename, await value.read())))
        return items
    finally:
        await form.close()


_JSON_SHAPE = '{"inputs": "<base64 audio>", "parameters": {...}}'


async def _json_data(body: bytes, query: dict[str, Any]) -> dict[str, Any]:
    try:
        # a base64 recording is megabytes of JSON: parse it off the event loop
        data = json.loads(body) if len(body) < 1 << 20 else await run_in_threadpool(json.loads, body)
    except UnicodeDecodeError:
        raise HttpError(400, "the body is not valid JSON (it is not UTF-8 text); send "
                                f"{_JSON_SHAPE}, or the audio file with an audio/* Content-Type") from None
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"the body is not valid JSON ({exc.msg} at line {exc.lineno} "
                                f"column {exc.colno}); send {_JSON_SHAPE}") from None
    except RecursionError:  # a few KB of [[[[...]]]] exhaust the parser's stack: a client error
        raise HttpError(400, f"the JSON body is nested too deeply; send {_JSON_SHAPE}") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", int: "a number", float: "a number",
                bool: "a boolean", type(None): "null"}.get(type(data), type(data).__name__)
        raise HttpError(400, f"the JSON body must be an object like {_JSON_SHAPE}, got {kind}")
    if "inputs" not in data:
        keys = ", ".join(repr(k) for k in list(data)[:10]) or "none"
        raise HttpError(400, f"the JSON body has no 'inputs' (keys: {keys}); send {_JSON_SHAPE}")
    if query:
        parameters = data.get("parameters")
        if parameters is None:
            data["parameters"] = query
        elif isinstance(parameters, dict):  # the body's parameters win
            data["parameters"] = {**query, **parameters}
    return data


# form fields that OpenAI-style clients send and that mean nothing to a one-model endpoint
IGNORED_FORM_FIELDS = ("model",)


def json_object_field(value: str, name: str = "parameters") -> dict[str, Any]:
    """The ``parameters`` form field: a JSON object of parameters, or HttpError 400."""
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise HttpError(400, f"the '{name}' form field must be a JSON object", param=name)
    return parsed


@dataclass
class FormParts:
    """A multipart form's parts, as every route that takes one reads them (:func:`split_form`):
    the audio, the text fields in order (reference clips uploaded as files among them, as base64)
    and the ``parameters`` field's JSON object."""

    audio: bytes
    texts: list[tuple[str, str]]
    parameters: dict[str, Any]


def split_form(items: FormItems, ignored: Sequence[str] = ()) -> FormParts:
    """The form's fields (in order; files as :class:`Upload`) -> :class:`FormParts`: one
    ``file`` upload (the audio), reference clips uploaded as ``known_speaker_references[]``
    (base64, for the handler), the ``parameters`` JSON object, the other text fields (those in
    ``ignored`` dropped). HttpError 400 naming the field otherwise."""
    audio: Optional[bytes] = None
    texts: list[tuple[str, str]] = []
    parameters: dict[str, Any] = {}
    for key, value in items:
        if key == "file":
            if not isinstance(value, Upload):
                raise HttpError(400, "the 'file' field must be a file upload (the audio), e.g. "
                                     "curl -F file=@audio.wav", param="file")
            if audio is not None:
                raise HttpError(400, "the form has two 'file' fields; send one recording per request",
                                param="file")
            audio = value.data
        elif isinstance(value, Upload):
            if list_key(key) != "known_speaker_references":
                raise HttpError(400, f"unexpected file field {key!r}: upload the audio as 'file' "
                                     "(and reference clips as 'known_speaker_references[]')", param=key)
            texts.append((key, base64.b64encode(value.data).decode("ascii")))
        elif list_key(key) in ignored:
            continue
        elif key == "parameters":  # our own parameters as one JSON object
            parameters.update(json_object_field(value))
        else:
            texts.append((key, value))
    if audio is None:
        raise HttpError(400, "the form has no 'file' field: send the audio as a file upload named "
                             "'file' (curl -F file=@audio.wav; the openai SDK: "
                             "file=open('audio.wav', 'rb')); other fields become parameters",
                        param="file", code="missing_required_parameter")
    if not audio:
        raise HttpError(400, "the uploaded 'file' is empty", param="file")
    return FormParts(audio, texts, parameters)


def _multipart_data(items: FormItems, query: dict[str, Any]) -> dict[str, Any]:
    form = split_form(items, IGNORED_FORM_FIELDS)
    # form fields win over the query string, the 'parameters' JSON field over both
    return {"inputs": form.audio,
            "parameters": {**query, **parameters_from_text(form.texts), **form.parameters}}


_SUPPORTED = ("application/json (" + _JSON_SHAPE + "), audio/* or video/* (the file's bytes, "
              "parameters in the query string), or multipart/form-data with a 'file' field")


async def read_request(request: Request, limit: int) -> dict[str, Any]:
    """The handler's ``data`` from a ``POST /`` request, its body read within ``limit`` bytes;
    HttpError (400, 413, 415) or RequestError (a parameter in the query string or the form)."""
    raw_type = request.headers.get("content-type")
    kind = header_media_type(raw_type)
    query = parameters_from_text(request.query_params.multi_items())
    if kind == "multipart/form-data":
        return _multipart_data(await read_form(request, limit), query)
    body = await read_body(request, limit)
    if kind == "application/json" or kind.endswith("+json"):
        return await _json_data(body, query)
    if is_audio_media_type(kind):
        if not body:
            raise HttpError(400, "the request body is empty: send the audio file's bytes")
        return {"inputs": body, "parameters": query}
    if kind in RAW_MEDIA_TYPES:
        if not body:
            raise HttpError(400, "the request body is empty: send the audio file's bytes, or "
                                    + _JSON_SHAPE)
        if sniff_audio(body):
            return {"inputs": body, "parameters": query}
        if not kind and body.lstrip()[:1] == b"{":
            return await _json_data(body, query)
        described = f"Content-Type {raw_type!r}" if raw_type else "no Content-Type"
        raise HttpError(415, f"the body ({_size(len(body))}, {described}) is not a recognised "
                                "audio file (WAV, FLAC, MP3, Ogg, MP4/M4A, WebM, AMR); if it is "
                                "audio, set its Content-Type (e.g. audio/wav). Accepted: " + _SUPPORTED)
    raise HttpError(415, f"unsupported Content-Type {raw_type!r}; send " + _SUPPORTED)
