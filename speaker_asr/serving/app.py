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
  (``HF_TOKEN``) and the API key are scrubbed from everything the server writes or answers;
* OpenAI's audio API (speaker_asr/serving/openai_api.py): ``POST /v1/audio/transcriptions``,
  ``POST /v1/audio/translations``, ``GET /v1/models``;
* ``API_KEY``: when set, every route but ``/health`` needs ``Authorization: Bearer <key>``;
* a bounded queue (``MAX_QUEUE``): a request that does not fit is answered 503 with
  ``Retry-After`` before its body is read, and a queued request whose client disconnected is
  dropped before the model runs it (runner.py).

Environment: ``HOST`` (0.0.0.0), ``PORT`` (8080), ``MAX_BODY_BYTES`` (100 MiB), ``MAX_QUEUE`` (8),
``API_KEY`` (none), ``LOG_LEVEL`` (info), plus the handler's model settings (``ASR_MODEL``, ...
see config.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from speaker_asr.errors import RequestError
from speaker_asr.serving.logging_setup import (ConfigError, _request_id, _route_library_logs,
                                               configure_logging, log_level, refresh_secrets, scrub)
from speaker_asr.serving import openai_api
from speaker_asr.serving.metrics import Metrics
from speaker_asr.serving.negotiation import (LEFT_DURING_BODY, LEFT_WHILE_QUEUED,
                                             LEFT_WHILE_RUNNING, HttpError, client_left, error_body,
                                             parse_request, read_body, request_info)
from speaker_asr.serving.runner import (DEFAULT_MAX_QUEUE, ClientGone, DisconnectWatch, ModelRunner,
                                        QueueFull)

ROOT = Path(__file__).resolve().parents[2]  # the repository (HF_MODEL_DIR by default)

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 100 * 1024 * 1024

PREDICT_PATHS = ("/", "/predict")
HEALTH_PATHS = ("/", "/health")

logger = logging.getLogger("server")
access_logger = logging.getLogger("server.access")

_INCOMING_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
KNOWN_PATHS = ("/", "/health", "/predict", "/metrics", openai_api.TRANSCRIPTIONS,
               openai_api.TRANSLATIONS, openai_api.MODELS)
# the requests that transcribe (counted in the latency histogram, the bytes and in flight)
INFERENCE_PATHS = PREDICT_PATHS + (openai_api.TRANSCRIPTIONS, openai_api.TRANSLATIONS)
# what API_KEY leaves open: the health check (orchestrators and load balancers send no key)
OPEN_PATHS = ("/health",)
MIN_API_KEY_CHARS = 16
_API_KEY_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: a header value


def _metric_path(path: str) -> str:
    if path in KNOWN_PATHS:
        return path
    if path.startswith(openai_api.MODELS + "/"):
        return openai_api.MODELS + "/{model}"
    return "other"


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
        inference = method == "POST" and path in INFERENCE_PATHS
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
                response = JSONResponse(error_body(path, HttpError(500, ""),
                                                   f"internal error (request id {request_id})"),
                                        status_code=500)
                try:
                    await response(scope, counting_receive, send_with_id)
                except Exception:  # the client is gone
                    pass
        finally:
            seconds = time.perf_counter() - started
            status = info["status"] if info["status"] is not None else 499
            label = _metric_path(path)
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
            quiet = method in ("GET", "HEAD") and path in HEALTH_PATHS + ("/metrics",)
            access_logger.log(logging.DEBUG if quiet else logging.INFO, "request",
                              extra={"fields": fields, "request_id": request_id})
            _request_id.reset(token)


class ApiKeyMiddleware:
    """With ``API_KEY`` set: every request but ``GET /health`` must carry ``Authorization: Bearer
    <key>``; anything else is answered 401 in the route's own error shape, before its body is
    read (uvicorn reads and drops a body the app leaves unread, so a client still uploading reads
    the answer). The key is compared in constant time (of SHA-256 digests: not even its length
    leaks) and never logged or echoed."""

    def __init__(self, app, api_key: Optional[str]):
        self.app = app
        self.digest = hashlib.sha256(api_key.encode()).digest() if api_key else None

    def authorized(self, header: Optional[bytes]) -> tuple[bool, str]:
        """(whether ``header`` carries the key, what is wrong when not)."""
        if not header:
            return False, ("this server requires an API key: send the header 'Authorization: "
                           "Bearer <API_KEY>' (the openai SDK sends its api_key so)")
        scheme, _, credential = header.decode("latin-1").strip().partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            return False, ("the Authorization header must be 'Bearer <API_KEY>' (another scheme or "
                           "an empty key was sent)")
        given = hashlib.sha256(credential.strip().encode("utf-8", "surrogateescape")).digest()
        if not hmac.compare_digest(given, self.digest):
            return False, "the API key is wrong (the one this server was started with: API_KEY)"
        return True, ""

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.digest is None or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization")
        ok, problem = self.authorized(header)
        if ok:
            await self.app(scope, receive, send)
            return
        info = scope.get("state", {}).get("request_info")
        if info is not None:
            info["error"] = problem
        code = "missing_api_key" if not header else "invalid_api_key"
        response = JSONResponse(error_body(scope["path"], HttpError(401, problem, code=code), problem),
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def _error(request: Request, exc: HttpError) -> JSONResponse:
    """The error in the route's own shape: OpenAI's error object on /v1, ``{"error"}`` elsewhere."""
    message = scrub(exc.message)
    request_info(request)["error"] = message
    return JSONResponse(error_body(request.url.path, exc, message), status_code=exc.status,
                        headers=exc.headers)


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


def max_queue_from_env() -> int:
    return _env_int("MAX_QUEUE", DEFAULT_MAX_QUEUE, minimum=0, maximum=10_000)


def api_key_from_env() -> Optional[str]:
    """``API_KEY``, or None when unset or empty; ConfigError for a key too short to be safe or
    with characters a header cannot carry (the message never shows the key)."""
    raw = os.environ.get("API_KEY")
    if raw is None or not raw.strip():
        return None
    key = raw.strip()
    if not _API_KEY_CHARS.fullmatch(key):
        raise ConfigError("API_KEY may hold only printable ASCII characters without spaces (it "
                          "travels in the Authorization header)")
    if len(key) < MIN_API_KEY_CHARS:
        raise ConfigError(f"API_KEY is {len(key)} characters long; use at least {MIN_API_KEY_CHARS} "
                          "(e.g. the output of: openssl rand -hex 32)")
    return key


async def wait_for_result(runner: ModelRunner, job, watch: DisconnectWatch, info: dict) -> None:
    """Wait for ``job`` (submitted by the caller); ClientGone when its client disconnected before
    the model started on it (dropped). Records the queue and model times."""
    try:
        await runner.wait(job, watch)
    finally:
        info["queue_ms"] = round(job.queued_seconds * 1000, 1)
        info["inference_ms"] = round(job.run_seconds * 1000, 1)


_UNSET: Any = object()


def create_app(handler_factory: Optional[Callable[[], Callable[[dict], Any]]] = None,
               max_body_bytes: Optional[int] = None, max_queue: Optional[int] = None,
               api_key: Optional[str] = _UNSET,
               keepalive_s: float = openai_api.DEFAULT_KEEPALIVE_S) -> Starlette:
    """The ASGI app. ``handler_factory`` builds the handler (called once, on the worker thread,
    when the app starts); by default ``handler.EndpointHandler()``. ``max_body_bytes``,
    ``max_queue``, ``api_key``: by default from the environment (MAX_BODY_BYTES, MAX_QUEUE,
    API_KEY); ``keepalive_s``: seconds between keep-alive comments of an event stream."""
    refresh_secrets()
    limit = max_body_bytes if max_body_bytes is not None else max_body_bytes_from_env()
    queue_limit = max_queue if max_queue is not None else max_queue_from_env()
    key = api_key_from_env() if api_key is _UNSET else api_key
    runner = ModelRunner(handler_factory or default_handler_factory, max_queue=queue_limit)
    metrics = Metrics(runner)

    async def health(request: Request) -> Response:
        status, body, headers = runner.status()
        if "reason" in body:
            body["reason"] = scrub(body["reason"])
        return JSONResponse(body, status_code=status, headers=headers)

    async def predict(request: Request) -> Response:
        info = request_info(request)
        ticket = watch = None
        try:
            ticket = await admit(request)
            body_bytes = await read_body(request, limit)
            data = await parse_request(request, body_bytes)
            del body_bytes
            try:
                runner.precheck(data)
                watch = DisconnectWatch(request.receive)
                job = runner.submit(data, ticket=ticket)
                del data  # the job holds the audio now: dropped with it if the client goes
                await wait_for_result(runner, job, watch, info)
                result = job.future.result()
            except RequestError as exc:  # the client's mistake; anything else is a 500
                raise HttpError(400, str(exc) or type(exc).__name__, param=exc.param) from None
        except HttpError as exc:
            return _error(request, exc)
        except ClientDisconnect:
            return client_left(info, LEFT_DURING_BODY)
        except ClientGone:
            return client_left(info, LEFT_WHILE_QUEUED)
        finally:
            if ticket is not None:
                ticket.release()
            if watch is not None:
                watch.close()
        if watch.gone.is_set():
            return client_left(info, LEFT_WHILE_RUNNING)
        if isinstance(result, dict) and isinstance(result.get("duration"), (int, float)):
            info["audio_seconds"] = float(result["duration"])
        payload = json.dumps(result, ensure_ascii=False, allow_nan=False)
        return Response(payload, media_type="application/json")

    async def admit(request: Request):
        """A place in the queue for this request, before its body is read; HttpError 503 while
        the model is not ready or when the queue is full (with Retry-After)."""
        if not runner.ready:
            status, body, headers = runner.status()
            code = "model_loading" if runner.state == "loading" else "model_failed"
            if runner.state == "failed":  # retrying will not help until the server is fixed
                headers = {**headers, "X-Should-Retry": "false"}
            raise HttpError(503, body["reason"], headers, code=code)
        try:
            return runner.admit()
        except QueueFull as exc:
            raise HttpError(503, str(exc), {"Retry-After": str(exc.retry_after)},
                            code="queue_full") from None

    async def metrics_endpoint(request: Request) -> Response:
        body, content_type = metrics.exposition(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404:
            message = (f"no such route: {request.method} {request.url.path}; use POST / or "
                       "/predict, GET /health, GET /metrics, POST /v1/audio/transcriptions, POST "
                       "/v1/audio/translations or GET /v1/models")
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return _error(request, HttpError(exc.status_code, message, dict(exc.headers or {})))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        runner.start()
        logger.info("listening; loading the model in the background (max body %d bytes, max queue "
                    "%d, API key %s)", limit, queue_limit, "required" if key else "not required")
        try:
            yield
        finally:
            runner.stop()

    v1 = openai_api.OpenAIRoutes(runner, limit, admit, _error, keepalive_s)
    app = Starlette(
        routes=[
            Route("/", health, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/", predict, methods=["POST"]),
            Route("/predict", predict, methods=["POST"]),
            *v1.routes(),
        ],
        middleware=[Middleware(RequestContextMiddleware, metrics=metrics),
                    Middleware(ApiKeyMiddleware, api_key=key)],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.runner = runner
    app.state.metrics = metrics
    app.state.max_body_bytes = limit
    app.state.max_queue = queue_limit
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
