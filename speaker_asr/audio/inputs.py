"""The request's ``inputs`` -> 16 kHz mono float32 audio, decoded once and shared by the ASR and the
diarization: base64 strings, data URIs, raw bytes, and JSON bodies handed over as bytes. Every
mistake is a :class:`~speaker_asr.errors.RequestError`."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, Optional

import numpy as np

from speaker_asr.audio.decode import decode_audio
from speaker_asr.errors import RequestError

_DATA_URI = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.IGNORECASE)
_B64_ALPHABET = re.compile(rb"^[A-Za-z0-9+/]*={0,2}$")


def decode_base64(text: str, what: str = "'inputs'") -> bytes:
    """Strict base64 (standard alphabet; whitespace and line breaks ignored; a
    ``data:audio/...;base64,`` prefix accepted). Raises RequestError saying what is wrong, naming
    the field as ``what``."""
    text = text.strip()
    match = _DATA_URI.match(text)
    if match:
        if not match.group("b64"):
            raise RequestError(f"{what} is a data URI without ';base64': send the audio base64-encoded")
        mime = (match.group("mime") or "").lower()
        if mime and not (mime.startswith("audio/") or mime.startswith("video/")
                         or mime == "application/octet-stream"):
            raise RequestError(f"{what} is a data URI of type {mime!r}; expected audio/*")
        text = text[match.end():]
    compact = re.sub(r"\s+", "", text).encode("ascii", "replace")
    if not compact:
        raise RequestError(f"{what} is empty: send the audio file's bytes as a base64 string")
    if not _B64_ALPHABET.match(compact) or len(compact) % 4 != 0:
        hint = " (URL-safe base64 is not accepted: use the standard alphabet with + and /)" \
            if (b"-" in compact or b"_" in compact) else ""
        raise RequestError(f"{what} is not valid base64{hint}: encode the audio file's bytes with "
                         "standard base64 (e.g. base64.b64encode(open(path, 'rb').read()).decode())")
    try:
        return base64.b64decode(compact, validate=True)
    except binascii.Error as exc:
        raise RequestError(f"{what} is not valid base64 ({exc})") from None


def input_bytes(inputs: Any) -> bytes:
    """The audio file's bytes from ``data["inputs"]`` (base64 str, data URI, bytes)."""
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        data = bytes(inputs)
        if not data:
            raise RequestError("'inputs' is empty: send an audio file")
        return data
    if isinstance(inputs, str):
        return decode_base64(inputs)
    if inputs is None:
        raise RequestError("missing 'inputs': send {\"inputs\": \"<base64 audio>\", \"parameters\": {...}} "
                         "or the audio file itself as the request body")
    raise RequestError(f"'inputs' must be a base64 string of an audio file (or raw bytes), got "
                     f"{type(inputs).__name__}")


def unwrap_json_body(data: dict) -> dict:
    """The request as sent, where a server handed a JSON body over as raw bytes.

    The Inference Endpoints toolkit passes any body whose Content-Type is ``audio/*`` on as
    ``{"inputs": <bytes>}``; huggingface_hub's ``InferenceClient`` sends its JSON body
    (``{"inputs": <base64>, "parameters": {...}}``, when given ``extra_body``) without a
    Content-Type of its own, so with ``headers={"Content-Type": "audio/..."}`` set for its raw
    uploads, that JSON arrives here as bytes. No audio format starts with ``{``: such bytes that
    parse as a JSON object with ``inputs`` are read as that request (query-string parameters, if
    any, win over the body's)."""
    inputs = data.get("inputs")
    if not isinstance(inputs, (bytes, bytearray)) or inputs[:1] != b"{":
        return data
    try:
        body = json.loads(bytes(inputs))
    except ValueError:
        return data
    if not isinstance(body, dict) or "inputs" not in body:
        return data
    parameters = body.get("parameters")
    if isinstance(parameters, dict) and isinstance(data.get("parameters"), dict):
        parameters = {**parameters, **data["parameters"]}
    elif data.get("parameters") is not None:
        parameters = data["parameters"]
    return {"inputs": body["inputs"], "parameters": parameters}


def preprocess_inputs(inputs: Any, max_duration_s: Optional[float] = None, channels: bool = False,
                      max_channels: Optional[int] = None) -> np.ndarray:
    """``data["inputs"]`` -> 16 kHz mono float32 audio (``channels``: one row per channel)."""
    return decode_audio(input_bytes(inputs), max_duration_s=max_duration_s, channels=channels,
                        max_channels=max_channels)
