"""Content negotiation and request parsing: HttpError, the accepted media types, audio sniffing,
query/form value coercion, the body size limit, and the handler's ``data`` from a JSON, raw-audio
or multipart request."""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any, Optional

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

DRAIN_AFTER_LIMIT_BYTES = 1024 * 1024


class HttpError(Exception):
    """An HTTP error answered as ``{"error": message}`` (on ``/v1``: OpenAI's error object, with
    ``param`` and ``code`` when they are known)."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None,
                 code: Optional[str] = None, param: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.code = code
        self.param = param


OPENAI_PREFIX = "/v1"
# OpenAI's error codes where our HttpError names none
_DEFAULT_CODES = {401: "invalid_api_key", 404: "unknown_url", 405: "method_not_allowed",
                  413: "request_too_large", 415: "unsupported_media_type", 500: "internal_error",
                  503: "service_unavailable"}


def is_openai_path(path: str) -> bool:
    return path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/")


def error_body(path: str, exc: HttpError, message: str) -> dict[str, Any]:
    """The error's JSON for a request to ``path``: OpenAI's error object on ``/v1``, else
    ``{"error": message}``."""
    if is_openai_path(path):
        from speaker_asr.formats.openai_shapes import error_object

        return error_object(message, exc.status, exc.param, exc.code or _DEFAULT_CODES.get(exc.status))
    return {"error": message}


# the audio types the inference toolkit lists, and a few more; any audio/* or video/* is accepted
AUDIO_MEDIA_TYPES = (
    "audio/flac", "audio/x-flac", "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave",
    "audio/mpeg", "audio/mp3", "audio/x-mpeg-3", "audio/ogg", "audio/opus", "audio/webm",
    "audio/m4a", "audio/x-m4a", "audio/mp4", "audio/aac", "audio/amr", "audio/amr-wb",
    "audio/x-audio", "video/mp4", "video/webm", "video/ogg",
)
RAW_MEDIA_TYPES = ("", "application/octet-stream", "application/x-www-form-urlencoded")

_INT = re.compile(r"[+-]?\d{1,18}")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")


def coerce_value(value: str) -> Any:
    """A query-string or form value as the JSON value it spells: ``true``/``false`` -> bool,
    ``2`` -> int, ``0.5`` -> float; anything else stays a string (``en``, ``translate``)."""
    text = value.strip()
    if text.lower() == "true":
        return True
    if text.lower() == "false":
        return False
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        number = float(text)
        if math.isfinite(number):
            return number
    return value


def sniff_audio(data: bytes) -> Optional[str]:
    """The container format the first bytes announce, or None when they do not look like audio."""
    head = bytes(data[:16])
    if len(head) >= 12 and head[:4] in (b"RIFF", b"RIFX") and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] in (b"RF64", b"BW64"):
        return "wav"
    if len(head) >= 12 and head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "aiff"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:3] == b"ID3":
        return "mp3"
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0:
        # MPEG audio frame sync; layer bits 00 is an ADTS (AAC) header
        return "mp3" if head[1] & 0x06 else "aac"
    if len(head) >= 8 and head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if head[:5] == b"#!AMR":
        return "amr"
    if head[:4] == b".snd":
        return "au"
    if head[:4] == b"caff":
        return "caf"
    if head[:8] == b"\x30\x26\xb2\x75\x8e\x66\xcf\x11":
        return "asf"
    return None


def media_type(content_type: Optional[str]) -> str:
    """``Audio/WAV; charset=x`` -> ``audio/wav``; missing -> ``""``."""
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


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing it (413) by its Content-Length before reading anything, and while
    reading when it arrives chunked or without a length."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
            if length < 0:
                raise ValueError
        except ValueError:
            raise HttpError(400, f"invalid Content-Length header {declared[:40]!r}") from None
        if length > limit:
            raise _too_large(limit, length)
    chunks, total = [], 0
    stream = request.stream()
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            chunks.clear()
            # read (and drop) a little more, so that a client just over the limit has sent its
            # whole body and reads the 413 instead of a connection reset
            async for extra in stream:
                total += len(extra)
                if total > limit + DRAIN_AFTER_LIMIT_BYTES:
                    break
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def request_info(request: Request) -> dict[str, Any]:
    """What the request logs (RequestContextMiddleware in app.py puts it in the scope)."""
    return request.scope.get("state", {}).get("request_info") or {"request_id": "-"}


# why a request ended without an answer because its client went away (the access log's "error")
LEFT_DURING_BODY = "the client disconnected before sending the whole body"
LEFT_WHILE_QUEUED = ("the client disconnected while the request waited for the model; dropped "
                     "before it ran")
LEFT_WHILE_RUNNING = "the client disconnected while the model ran; the answer was discarded"


def client_left(info: dict[str, Any], why: str) -> Response:
    """The answer nobody reads (499, nginx's "client closed request"), with ``why`` logged."""
    info["error"] = why
    return Response(status_code=499)


# a form field's value (a data URI of a reference clip) may be this large; the body limit applies
MAX_FORM_FIELD_BYTES = 64 * 1024 * 1024


# parameters that are lists even when given once (``known_speaker_names=Alice``)
LIST_PARAMETERS = ("known_speaker_names", "known_speaker_references")


def collect_parameters(items) -> dict[str, Any]:
    """(key, text) pairs -> parameters, values coerced; a key given more than once becomes a list
    (``?speaker_names=Diane&speaker_names=Sheila``); OpenAI-style ``key[]`` names mean ``key``
    (``-F known_speaker_names[]=Alice``). Values already decoded (an uploaded clip, as base64)
    are kept as they are."""
    grouped: dict[str, list] = {}
    for key, value in items:
        key = key[:-2] if key.endswith("[]") else key
        if key in LIST_PARAMETERS and isinstance(value, str):
            grouped.setdefault(key, []).append(value.strip() if key == "known_speaker_names" else value)
            continue
        grouped.setdefault(key, []).append(coerce_value(value) if isinstance(value, str) else value)
    return {key: values if key in LIST_PARAMETERS or len(values) > 1 else values[0]
            for key, values in grouped.items()}


def query_parameters(request: Request) -> dict[str, Any]:
    return collect_parameters(request.query_params.multi_items())


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


def _replay(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


# form fields that OpenAI-style clients send and that mean nothing to a one-model endpoint
IGNORED_FORM_FIELDS = ("model",)


async def read_form(request: Request, body: bytes):
    """The multipart form of ``body`` (already read), or HttpError 400."""
    replayed = Request(request.scope, receive=_replay(body))
    try:
        return await replayed.form(max_part_size=MAX_FORM_FIELD_BYTES)
    except HTTPException as exc:
        raise HttpError(400, f"invalid multipart/form-data body: {exc.detail}") from None
    except Exception as exc:  # python-multipart's MultiPartException and parse errors
        raise HttpError(400, f"invalid multipart/form-data body: {exc}") from None


async def _multipart_data(request: Request, body: bytes, query: dict[str, Any]) -> dict[str, Any]:
    form = await read_form(request, body)
    try:
        audio: Optional[bytes] = None
        fields: list[tuple[str, str]] = []
        parameters: dict[str, Any] = {}
        for key, value in form.multi_items():
            is_file = not isinstance(value, str)
            if key == "file":
                if not is_file:
                    raise HttpError(400, "the 'file' field must be a file upload, e.g. "
                                            "curl -F file=@audio.wav")
                audio = await value.read()
            elif is_file and key.removesuffix("[]") == "known_speaker_references":
                # a reference clip uploaded as a file: the handler takes clips as base64
                fields.append((key, base64.b64encode(await value.read()).decode("ascii")))
            elif is_file:
                raise HttpError(400, f"unexpected file field {key!r}: upload the audio as 'file' "
                                     "(and reference clips as 'known_speaker_references[]')")
            elif key in IGNORED_FORM_FIELDS:
                continue
            elif key == "parameters":
                try:
                    extra = json.loads(value)
                except (ValueError, RecursionError):
                    extra = None
                if not isinstance(extra, dict):
                    raise HttpError(400, "the 'parameters' form field must be a JSON object")
                parameters.update(extra)
            else:
                fields.append((key, value))
    finally:
        await form.close()
    # form fields win over the query string, the 'parameters' JSON field over both
    parameters = {**query, **collect_parameters(fields), **parameters}
    if audio is None:
        raise HttpError(400, "the multipart upload has no 'file' field: send the audio as "
                                "-F file=@audio.wav (other fields become parameters)")
    if not audio:
        raise HttpError(400, "the uploaded 'file' is empty")
    return {"inputs": audio, "parameters": parameters}


_SUPPORTED = ("application/json (" + _JSON_SHAPE + "), audio/* or video/* (the file's bytes, "
              "parameters in the query string), or multipart/form-data with a 'file' field")


async def parse_request(request: Request, body: bytes) -> dict[str, Any]:
    """The handler's ``data`` from the request, or a :class:`HttpError` (400 / 415)."""
    raw_type = request.headers.get("content-type")
    kind = media_type(raw_type)
    query = query_parameters(request)
    if kind == "application/json" or kind.endswith("+json"):
        return await _json_data(body, query)
    if kind == "multipart/form-data":
        return await _multipart_data(request, body, query)
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
