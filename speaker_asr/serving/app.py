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

import contextlib
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
from speaker_asr.serving.metrics import Metrics
from speaker_asr.serving.negotiation import HttpError, parse_request, read_body
from speaker_asr.serving.runner import ModelRunner

ROOT = Path(__file__).resolve().parents[2]  # the repository (HF_MODEL_DIR by default)

DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 100 * 1024 * 1024

PREDICT_PATHS = ("/", "/predict")
HEALTH_PATHS = ("/", "/health")
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

logger = logging.getLogger("server")
access_logger = logging.getLogger("server.access")

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
