"""HTTP server for the handler: the Inference Endpoints custom-handler contract, locally or in a
container (``python -m speaker_asr serve``, or ``uvicorn speaker_asr.serving.app:app``).

The contract is the one huggingface-inference-toolkit's web service gives a custom handler:
``GET /`` and ``GET /health`` answer health checks; ``POST /`` and ``POST /predict`` call
``EndpointHandler(data)`` with ``data = {"inputs": ..., "parameters": {...}}``, built from a JSON
body, from a raw audio body (parameters from the query string) or from a multipart upload.

Beyond the toolkit:

* the models load in the background: health answers 503 with the reason until they are ready, and
  stays up (503, with the reason) when loading failed instead of crash-looping;
* requests queue for the one model, which runs on a single worker thread, so health checks and
  metrics keep answering during a long transcription;
* status codes separate client errors (400, 413, 415) from server errors (500, 503); a 500 says
  only "internal error (request id ...)" -- the traceback goes to the log;
* ``GET /metrics`` (Prometheus text format) and one JSON log line per request; the token
  (``HF_TOKEN``) is scrubbed from everything the server writes or answers.

Environment: ``HOST`` (0.0.0.0), ``PORT`` (8080), ``MAX_BODY_BYTES`` (100 MiB), ``LOG_LEVEL``
(info), plus the handler's model settings (``ASR_MODEL``, ... see config.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import math
import os
import queue
import re
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from speaker_asr.errors import RequestError

ROOT = Path(__file__).resolve().parents[2]  # the repository (HF_MODEL_DIR by default)

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 100 * 1024 * 1024
DRAIN_AFTER_LIMIT_BYTES = 1024 * 1024

PREDICT_PATHS = ("/", "/predict")
HEALTH_PATHS = ("/", "/health")
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

logger = logging.getLogger("server")
access_logger = logging.getLogger("server.access")

_request_id: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("request_id", default=None)


class ConfigError(ValueError):
    """A server setting (HOST, PORT, MAX_BODY_BYTES, LOG_LEVEL) is invalid."""


# --------------------------------------------------------------------------- secrets


_SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN")
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "API_KEY")
# a Hugging Face user access token, wherever it comes from
_HF_TOKEN_PATTERN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
REDACTED = "<redacted>"
_secrets: Optional[list[str]] = None


def refresh_secrets(environ: Optional[dict] = None) -> list[str]:
    """Remember the values of HF_TOKEN and other *_TOKEN / *_SECRET variables for :func:`scrub`."""
    global _secrets
    env = os.environ if environ is None else environ
    values = set()
    for name, value in env.items():
        upper = name.upper()
        if upper in _SECRET_NAMES or upper.endswith(_SECRET_SUFFIXES):
            value = (value or "").strip()
            if len(value) >= 6:
                values.add(value)
    _secrets = sorted(values, key=len, reverse=True)
    return _secrets


def scrub(text: Any) -> str:
    """``text`` with every secret replaced by ``<redacted>``."""
    text = str(text)
    for secret in _secrets if _secrets is not None else refresh_secrets():
        text = text.replace(secret, REDACTED)
    return _HF_TOKEN_PATTERN.sub(REDACTED, text)


# --------------------------------------------------------------------------- logging


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id, extra ``fields``, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        request_id = getattr(record, "request_id", None) or _request_id.get()
        if request_id:
            entry["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return scrub(json.dumps(entry, ensure_ascii=False, default=str))


_LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING,
           "info": logging.INFO, "debug": logging.DEBUG}
_json_logging = False


def log_level(value: Optional[str] = None) -> str:
    value = (value if value is not None else os.environ.get("LOG_LEVEL") or "info").strip().lower()
    if value not in _LEVELS:
        raise ConfigError(f"LOG_LEVEL={value!r}: use one of {', '.join(_LEVELS)}")
    return value


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for everything logged in this process (uvicorn, the handler, warnings),
    scrubbed of secrets."""
    global _json_logging
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])
    logging.captureWarnings(True)
    _json_logging = True


def _route_library_logs() -> None:
    """transformers writes through its own stderr handler and draws progress bars; send its
    messages through the JSON log instead (called before the models load)."""
    if not _json_logging:
        return
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_default_handler()
        hf_logging.enable_propagation()
        hf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover - transformers is a dependency of the handler
        pass


# --------------------------------------------------------------------------- request parsing


class HttpError(Exception):
    """An HTTP error answered as ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


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


def collect_parameters(items) -> dict[str, Any]:
    """(key, text) pairs -> parameters, values coerced; a key given more than once becomes a list
    (``?speaker_names=Diane&speaker_names=Sheila``)."""
    grouped: dict[str, list] = {}
    for key, value in items:
        grouped.setdefault(key, []).append(coerce_value(value))
    return {key: values[0] if len(values) == 1 else values for key, values in grouped.items()}


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


async def _multipart_data(request: Request, body: bytes, query: dict[str, Any]) -> dict[str, Any]:
    replayed = Request(request.scope, receive=_replay(body))
    try:
        form = await replayed.form()
    except HTTPException as exc:
        raise HttpError(400, f"invalid multipart/form-data body: {exc.detail}") from None
    except Exception as exc:  # python-multipart's MultiPartException and parse errors
        raise HttpError(400, f"invalid multipart/form-data body: {exc}") from None
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
            elif is_file:
                raise HttpError(400, f"unexpected file field {key!r}: upload the audio as 'file'")
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


# --------------------------------------------------------------------------- the model


class ModelRunner:
    """Owns the handler. It loads once in the background, then runs one call at a time on a
    single daemon worker thread (model calls are not re-entrant), so the event loop stays free."""

    def __init__(self, factory: Callable[[], Callable[[dict], Any]]):
        self.factory = factory
        self.state = "loading"  # loading | ready | failed
        self.reason: Optional[str] = None
        self.handler: Optional[Callable[[dict], Any]] = None
        self.load_started = time.monotonic()
        self.load_seconds: Optional[float] = None
        self._jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.waiting = 0  # submitted, not started: the queue depth
        self.running = 0

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def start(self) -> None:
        if self._thread is not None:
            return
        # a daemon thread: a shutdown during a long download or transcription does not hang
        self._thread = threading.Thread(target=self._work, name="model-worker", daemon=True)
        self._thread.start()
        self.load_started = time.monotonic()
        self._jobs.put(self._load)

    def stop(self) -> None:
        self._jobs.put(None)

    def counts(self) -> tuple[int, int]:
        """(requests waiting for the model, requests running)."""
        with self._lock:
            return self.waiting, self.running

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    def _load(self) -> None:
        try:
            handler = self.factory()
        except BaseException as exc:  # never let a failed load take the server down
            self.reason = scrub(f"{type(exc).__name__}: {exc}")[:2000]
            self.state = "failed"
            logger.error("the model failed to load; the server stays up and answers 503: %s",
                         self.reason, exc_info=True)
            return
        self.handler = handler
        self.load_seconds = time.monotonic() - self.load_started
        self.state = "ready"
        logger.info("model ready after %.1f s", self.load_seconds)

    def status(self) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status code, body, headers) for a health check."""
        if self.state == "ready":
            body: dict[str, Any] = {"status": "ok"}
            report = getattr(self.handler, "patch_report", None)
            if report:  # which library internals this server changed, and why the others not
                body["patches"] = [r.as_dict() for r in report]
            return 200, body, {}
        if self.state == "loading":
            elapsed = time.monotonic() - self.load_started
            return 503, {"status": "loading",
                         "reason": f"the model is loading ({elapsed:.0f} s so far)"}, {"Retry-After": "10"}
        return 503, {"status": "error", "reason": f"the model failed to load: {self.reason}"}, {}

    def precheck(self, data: Any) -> None:
        """Refuse invalid parameters (RequestError) before the request queues: a typo in
        ``language`` is answered at once instead of after the transcriptions ahead of it. The
        check is the handler's own first step (``InferenceConfig.from_request`` against the loaded
        models' capabilities), so the two cannot disagree; a handler without ``capabilities``
        validates for itself."""
        capabilities = getattr(self.handler, "capabilities", None)
        if capabilities is None or not isinstance(data, dict):
            return
        from speaker_asr.config import InferenceConfig

        InferenceConfig.from_request(data.get("parameters"), capabilities)

    async def run(self, data: dict[str, Any]) -> tuple[Any, float, float]:
        """(result, seconds queued, seconds running); the handler's exceptions propagate."""
        assert self.handler is not None
        future: concurrent.futures.Future = concurrent.futures.Future()
        context = contextvars.copy_context()  # the request id reaches the handler's log lines
        submitted = time.perf_counter()
        times = {}

        def job() -> None:
            with self._lock:
                self.waiting -= 1
            if not future.set_running_or_notify_cancel():
                return
            with self._lock:
                self.running += 1
            times["start"] = time.perf_counter()
            try:
                result = context.run(self.handler, data)
            except BaseException as exc:
                outcome: tuple = (None, exc)
            else:
                outcome = (result, None)
            # times and counters first: setting the future wakes the request up
            times["end"] = time.perf_counter()
            with self._lock:
                self.running -= 1
            if outcome[1] is not None:
                future.set_exception(outcome[1])
            else:
                future.set_result(outcome[0])

        with self._lock:
            self.waiting += 1
        self._jobs.put(job)
        result = await asyncio.wrap_future(future)
        return result, times["start"] - submitted, times["end"] - times["start"]


# --------------------------------------------------------------------------- metrics


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


class Metrics:
    """Prometheus counters, gauges and a latency histogram, written out by hand."""

    BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, str], int] = {}
        self.audio_seconds = 0.0
        self.bytes_in = 0
        self.bucket_counts = [0] * len(self.BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.in_flight = 0

    def add_in_flight(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta

    def record(self, method: str, path: str, status: int, seconds: float, inference: bool,
               audio_seconds: Optional[float], bytes_in: int) -> None:
        with self._lock:
            key = (method, path, str(status))
            self.requests[key] = self.requests.get(key, 0) + 1
            if inference:
                self.bytes_in += bytes_in
                self.latency_sum += seconds
                self.latency_count += 1
                for i, bound in enumerate(self.BUCKETS):
                    if seconds <= bound:
                        self.bucket_counts[i] += 1
                if audio_seconds:
                    self.audio_seconds += audio_seconds

    def render(self, runner: ModelRunner) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for suffix, value in samples:
                lines.append(f"{name}{suffix} {_num(value)}")

        with self._lock:
            metric("asr_http_requests_total", "counter",
                   "HTTP requests answered, by method, path and status code.",
                   [(f'{{method="{_label(m)}",path="{_label(p)}",code="{_label(c)}"}}', n)
                    for (m, p, c), n in sorted(self.requests.items())])
            metric("asr_audio_seconds_total", "counter",
                   "Seconds of audio transcribed (the responses' duration).", [("", self.audio_seconds)])
            metric("asr_request_bytes_total", "counter",
                   "Request body bytes received by POST / and /predict.", [("", self.bytes_in)])
            # bucket_counts are cumulative already: each observation counts in every bucket >= it
            cumulative = [(f'_bucket{{le="{_num(bound)}"}}', count)
                          for bound, count in zip(self.BUCKETS, self.bucket_counts)]
            metric("asr_request_duration_seconds", "histogram",
                   "Latency of POST / and /predict requests, every status code.",
                   cumulative + [("_sum", self.latency_sum), ("_count", self.latency_count)])
            in_flight = self.in_flight
        waiting, running_now = runner.counts()
        metric("asr_requests_in_flight", "gauge",
               "POST / and /predict requests being handled (reading, queued or running).", [("", in_flight)])
        metric("asr_queue_depth", "gauge", "Requests waiting for the model.", [("", waiting)])
        metric("asr_inference_running", "gauge", "Requests the model is working on (0 or 1).",
               [("", running_now)])
        metric("asr_model_ready", "gauge", "1 once the model is loaded, 0 while loading or after a failed load.",
               [("", 1 if runner.ready else 0)])
        if runner.load_seconds is not None:
            metric("asr_model_load_seconds", "gauge", "Seconds the model took to load.",
                   [("", round(runner.load_seconds, 3))])
        report = getattr(runner.handler, "patch_report", None)
        if report:
            metric("asr_patch_applied", "gauge",
                   "1 for each change to transformers' or pyannote's internals that applied at load, 0 "
                   "for one skipped (GET /health says why).",
                   [(f'{{target="{_label(r.target)}",name="{_label(r.name)}",'
                     f'changes_output="{str(r.changes_output).lower()}"}}', 1 if r.applied else 0)
                    for r in report])
        policy = getattr(getattr(runner.handler, "asr", None), "assist_policy", None)
        if policy is not None and getattr(runner.handler.asr, "assistant", None) is not None:
            snap = policy.snapshot()
            metric("asr_auto_decode_seconds_per_audio_second", "gauge",
                   "Median decode time per second of one-window audio, by mode, that assisted='auto' "
                   "chooses from.", [(f'{{mode="{m}"}}', v["median_s_per_audio_s"]) for m, v in snap.items()
                                     if v["median_s_per_audio_s"] is not None])
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the app


_INCOMING_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
KNOWN_PATHS = ("/", "/health", "/predict", "/metrics")


class RequestContextMiddleware:
    """Per request: an id (the caller's X-Request-Id when it is sane, else a new one) in the
    ``X-Request-Id`` response header, metrics, one JSON log line, and a JSON 500 for anything
    that escapes the endpoint."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = incoming if _INCOMING_ID.fullmatch(incoming) else uuid.uuid4().hex
        info: dict[str, Any] = {"request_id": request_id, "bytes_in": 0, "status": None,
                                "audio_seconds": None, "error": None}
        scope.setdefault("state", {})
        scope["state"]["request_info"] = info
        method, path = scope["method"], scope["path"]
        inference = method == "POST" and path in PREDICT_PATHS
        token = _request_id.set(request_id)
        if inference:
            self.metrics.add_in_flight(1)

        async def counting_receive():
            message = await receive()
            if message["type"] == "http.request":
                info["bytes_in"] += len(message.get("body", b""))
            return message

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                info["status"] = message["status"]
                MutableHeaders(scope=message).append("X-Request-Id", request_id)
            await send(message)

        try:
            await self.app(scope, counting_receive, send_with_id)
        except Exception:
            logger.exception("internal error on %s %s", method, path)
            info["error"] = "internal error"
            if info["status"] is None:
                response = JSONResponse({"error": f"internal error (request id {request_id})"},
                                        status_code=500)
                try:
                    await response(scope, counting_receive, send_with_id)
                except Exception:  # the client is gone
                    pass
        finally:
            seconds = time.perf_counter() - started
            status = info["status"] if info["status"] is not None else 499
            label = path if path in KNOWN_PATHS else "other"
            self.metrics.record(method, label, status, seconds, inference, info["audio_seconds"],
                                info["bytes_in"])
            if inference:
                self.metrics.add_in_flight(-1)
            fields = {"method": method, "path": path, "status": status,
                      "audio_seconds": info["audio_seconds"], "total_ms": round(seconds * 1000, 1),
                      "bytes_in": info["bytes_in"]}
            for key in ("queue_ms", "inference_ms"):
                if key in info:
                    fields[key] = info[key]
            if info["error"]:
                fields["error"] = scrub(info["error"])[:300]
            # health checks and scrapes come every few seconds: logged at debug level
            quiet = method in ("GET", "HEAD") and path in KNOWN_PATHS
            access_logger.log(logging.DEBUG if quiet else logging.INFO, "request",
                              extra={"fields": fields, "request_id": request_id})
            _request_id.reset(token)


def _request_info(request: Request) -> dict[str, Any]:
    return request.scope.get("state", {}).get("request_info") or {"request_id": "-"}


def _error(request: Request, exc: HttpError) -> JSONResponse:
    message = scrub(exc.message)
    _request_info(request)["error"] = message
    return JSONResponse({"error": message}, status_code=exc.status, headers=exc.headers)


def default_handler_factory() -> Callable[[dict], Any]:
    """``EndpointHandler`` with the settings from the environment."""
    _route_library_logs()
    from speaker_asr.endpoint import EndpointHandler

    return EndpointHandler(path=os.environ.get("HF_MODEL_DIR") or str(ROOT))


def _env_int(name: str, default: int, minimum: int = 0, maximum: Optional[int] = None) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{name}={value} must be {bound}")
    return value


def max_body_bytes_from_env() -> int:
    return _env_int("MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, minimum=1)


def create_app(handler_factory: Optional[Callable[[], Callable[[dict], Any]]] = None,
               max_body_bytes: Optional[int] = None) -> Starlette:
    """The ASGI app. ``handler_factory`` builds the handler (called once, on the worker thread,
    when the app starts); by default ``handler.EndpointHandler()``."""
    refresh_secrets()
    limit = max_body_bytes if max_body_bytes is not None else max_body_bytes_from_env()
    runner = ModelRunner(handler_factory or default_handler_factory)
    metrics = Metrics()

    async def health(request: Request) -> Response:
        status, body, headers = runner.status()
        if "reason" in body:
            body["reason"] = scrub(body["reason"])
        return JSONResponse(body, status_code=status, headers=headers)

    async def predict(request: Request) -> Response:
        info = _request_info(request)
        try:
            if not runner.ready:
                status, body, headers = runner.status()
                raise HttpError(503, body["reason"], headers)
            body_bytes = await read_body(request, limit)
            data = await parse_request(request, body_bytes)
            del body_bytes
            try:
                runner.precheck(data)
                result, queued, ran = await runner.run(data)
            except RequestError as exc:  # the client's mistake; anything else is a 500
                raise HttpError(400, str(exc) or type(exc).__name__) from None
        except HttpError as exc:
            return _error(request, exc)
        except ClientDisconnect:
            info["error"] = "the client disconnected before sending the whole body"
            return Response(status_code=499)
        info["queue_ms"] = round(queued * 1000, 1)
        info["inference_ms"] = round(ran * 1000, 1)
        if isinstance(result, dict) and isinstance(result.get("duration"), (int, float)):
            info["audio_seconds"] = float(result["duration"])
        payload = json.dumps(result, ensure_ascii=False, allow_nan=False)
        return Response(payload, media_type="application/json")

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.render(runner), media_type=METRICS_CONTENT_TYPE)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404:
            message = (f"no such route: {request.method} {request.url.path}; use POST / or "
                       "/predict, GET /health or GET /metrics")
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return _error(request, HttpError(exc.status_code, message, dict(exc.headers or {})))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        runner.start()
        logger.info("listening; loading the model in the background (max body %d bytes)", limit)
        try:
            yield
        finally:
            runner.stop()

    app = Starlette(
        routes=[
            Route("/", health, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/", predict, methods=["POST"]),
            Route("/predict", predict, methods=["POST"]),
        ],
        middleware=[Middleware(RequestContextMiddleware, metrics=metrics)],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.runner = runner
    app.state.metrics = metrics
    app.state.max_body_bytes = limit
    return app


def serve(host: Optional[str] = None, port: Optional[int] = None) -> None:
    """Run the server with uvicorn (one process: the model is loaded once)."""
    import uvicorn

    level = log_level()
    host = host or os.environ.get("HOST") or DEFAULT_HOST
    if port is None:
        port = _env_int("PORT", DEFAULT_PORT, minimum=0, maximum=65535)
    elif not 0 <= port <= 65535:
        raise ConfigError(f"port {port} must be between 0 and 65535")
    configure_logging(level)
    app = create_app()
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                            log_level=level, lifespan="on", server_header=False)
    uvicorn.Server(config).run()


def __getattr__(name: str):
    # ``uvicorn server:app``: the app is built on first access, not at import
    if name == "app":
        globals()["app"] = create_app()
        return globals()["app"]
    raise AttributeError(name)
