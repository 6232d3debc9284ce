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
* ``API_KEY``: when set, every route but ``/health`` and the ``/live`` page needs ``Authorization:
  Bearer <key>`` (the live WebSocket takes it in a subprotocol as well: realtime.py);
* ``GET /live``: a page that streams a browser's microphone to ``/v1/realtime`` and shows the
  captions with their speakers (live_page.py);
* ``MAX_CONCURRENT`` requests worked on at once, their units interleaved by the models' scheduler,
  and a bounded queue (``MAX_QUEUE``) behind them: a request that does not fit is answered 503
  with ``Retry-After`` before its body is read; a queued request whose client disconnected is
  dropped before the model runs it, a running one stops at its next unit (runner.py).

Environment: ``HOST`` (0.0.0.0), ``PORT`` (8080), ``MAX_BODY_BYTES`` (100 MiB), ``MAX_QUEUE`` (8),
``MAX_CONCURRENT`` (4),
``API_KEY`` (none), ``LOG_LEVEL`` (info): :class:`~speaker_asr.settings.ServerSettings`; plus the
handler's model settings (``ASR_MODEL``, ... :class:`~speaker_asr.settings.ModelSettings`).

The app is two Starlette apps under one that logs and counts every request: the root app
(health, metrics, ``POST /``; errors as ``{"error": message}``) and the ``/v1`` app mounted on it
(openai_api.py; errors as OpenAI's error object), each with its own exception handlers and API-key
check. Both transcription routes run :class:`~speaker_asr.serving.request_path.RequestPath`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from speaker_asr.settings import ServerSettings
from speaker_asr.redaction import refresh_secrets, scrub
from speaker_asr.serving.logging_setup import ConfigError, _request_id, _route_library_logs, configure_logging
from speaker_asr.serving import live_page, openai_api
from speaker_asr.serving.api_key import ApiKey, bearer
from speaker_asr.serving.metrics import Metrics
from speaker_asr.serving.negotiation import HttpError, read_request
from speaker_asr.serving.request_path import (ErrorBody, PreparedCall, RequestPath,
                                              exception_handlers, request_info)
from speaker_asr.serving.live_limits import LiveLimits
from speaker_asr.serving.realtime import RealtimeRoute
from speaker_asr.serving.ws_protocol import live_protocol
from speaker_asr.serving.runner import ModelRunner

ROOT = Path(__file__).resolve().parents[2]  # the repository (the path the toolkit would pass)

PREDICT_PATHS = ("/", "/predict")
HEALTH_PATHS = ("/", "/health")

logger = logging.getLogger("server")
access_logger = logging.getLogger("server.access")

_INCOMING_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
KNOWN_PATHS = ("/", "/health", "/predict", "/metrics", live_page.LIVE, openai_api.TRANSCRIPTIONS,
               openai_api.TRANSLATIONS, openai_api.MODELS)
# the requests that transcribe (counted in the latency histogram, the bytes and in flight)
INFERENCE_PATHS = PREDICT_PATHS + (openai_api.TRANSCRIPTIONS, openai_api.TRANSLATIONS)
# what API_KEY leaves open: the health check (orchestrators and load balancers send no key) and
# the live page (a browser cannot send the header; the page holds no data, and its WebSocket
# checks the key)
OPEN_PATHS = ("/health", live_page.LIVE)


def _metric_path(path: str) -> str:
    if path in KNOWN_PATHS:
        return path
    if path.startswith(openai_api.MODELS + "/"):
        return openai_api.MODELS + "/{model}"
    return "other"


class RequestContextMiddleware:
    """Per request: an id (the caller's X-Request-Id when it is sane, else a new one) in the
    ``X-Request-Id`` response header, metrics, one JSON log line, and a JSON 500 for anything
    that escapes the endpoint. ``stopping``: set when the server stops (:func:`serve`); a request
    its stop cuts (``SHUTDOWN_GRACE_S`` passed) is answered 503 saying so."""

    def __init__(self, app, metrics: Metrics, stopping: Optional[asyncio.Event] = None):
        self.app = app
        self.metrics = metrics
        self.stopping = stopping

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
            if info["status"] is None:  # the apps answer their own errors; this is a last resort
                response = JSONResponse(plain_error_body(HttpError(500, ""),
                                                         f"internal error (request id {request_id})"),
                                        status_code=500)
                try:
                    await response(scope, counting_receive, send_with_id)
                except Exception:  # the client is gone
                    pass
        except asyncio.CancelledError:
            # uvicorn cancels what is still running when the shutdown's grace is over: tell the
            # client why (uvicorn itself would answer a bare 500) and let the task end
            if self.stopping is None or not self.stopping.is_set() or info["status"] is not None:
                raise
            message = (f"the server is shutting down: this request was still running after "
                       f"SHUTDOWN_GRACE_S and was stopped (request id {request_id}); send it again")
            info["error"] = message
            body = (openai_api.error_body if path.startswith(openai_api.PREFIX + "/") else plain_error_body)(
                HttpError(503, message, code="server_shutting_down"), message)
            try:
                await JSONResponse(body, status_code=503)(scope, counting_receive, send_with_id)
            except Exception:  # the client is gone
                pass
        finally:
            seconds = time.perf_counter() - started
            status = info["status"] if info["status"] is not None else 499
            label = _metric_path(path)
            self.metrics.record(method, label, status, seconds, inference, info["audio_seconds"],
                                info["bytes_in"], info.get("assisted"))
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
    """With ``API_KEY`` set: every request but :data:`OPEN_PATHS` must carry ``Authorization: Bearer
    <key>``; anything else is answered 401 in the app's own error shape (``error_body``), before
    its body is read (uvicorn reads and drops a body the app leaves unread, so a client still
    uploading reads the answer). The check is serving/api_key.py's."""

    def __init__(self, app, api_key: Optional[str], error_body: ErrorBody):
        self.app = app
        self.key = ApiKey(api_key)
        self.error_body = error_body

    def problem(self, header: Optional[bytes]) -> Optional[tuple[str, str]]:
        """None when ``header`` carries the key; else (error code, what is wrong)."""
        given, malformed = bearer(header.decode("latin-1") if header else None)
        if malformed:
            return "invalid_api_key", ("the Authorization header must be 'Bearer <API_KEY>' (another "
                                       "scheme or an empty key was sent)")
        return self.key.problem(given)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.key.required or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        problem = self.problem(dict(scope.get("headers") or []).get(b"authorization"))
        if problem is None:
            await self.app(scope, receive, send)
            return
        code, message = problem
        info = scope.get("state", {}).get("request_info")
        if info is not None:
            info["error"] = message
        response = JSONResponse(self.error_body(HttpError(401, message, code=code), message),
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def plain_error_body(exc: HttpError, message: str) -> dict[str, Any]:
    """An error on the root app (``POST /``, health, metrics): ``{"error": message}``."""
    return {"error": message}


def default_handler_factory() -> Callable[[dict], Any]:
    """``EndpointHandler`` with the settings from the environment."""
    _route_library_logs()
    from speaker_asr.endpoint import EndpointHandler

    return EndpointHandler(path=str(ROOT))


def server_settings(**overrides: Any) -> ServerSettings:
    """:class:`ServerSettings` from the environment (``overrides`` win); ConfigError naming the
    bad variable and what it may be (never the key)."""
    try:
        return ServerSettings.from_env(**overrides)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


_UNSET: Any = object()


def create_app(handler_factory: Optional[Callable[[], Callable[[dict], Any]]] = None,
               max_body_bytes: Optional[int] = None, max_queue: Optional[int] = None,
               api_key: Optional[str] = _UNSET,
               keepalive_s: float = openai_api.DEFAULT_KEEPALIVE_S,
               settings: Optional[ServerSettings] = None) -> Starlette:
    """The ASGI app. ``handler_factory`` builds the handler (called once, on the worker thread,
    when the app starts); by default ``handler.EndpointHandler()``. ``settings``: by default from
    the environment (:class:`ServerSettings`); ``max_body_bytes``, ``max_queue`` and ``api_key``
    override them; ``keepalive_s``: seconds between keep-alive comments of an event stream."""
    refresh_secrets()
    settings = settings or server_settings()
    overrides = {name: value for name, value in (("max_body_bytes", max_body_bytes),
                                                 ("max_queue", max_queue)) if value is not None}
    if api_key is not _UNSET:
        overrides["api_key"] = api_key
    if overrides:  # validated as the environment's values are
        settings = server_settings(**{**settings.model_dump(), **overrides})
    limit, queue_limit, key = settings.max_body_bytes, settings.max_queue, settings.key()
    runner = ModelRunner(handler_factory or default_handler_factory, max_queue=queue_limit,
                         max_concurrent=settings.max_concurrent)
    path = RequestPath(runner, limit)
    metrics = Metrics(runner)

    async def health(request: Request) -> Response:
        status, body, headers = runner.status()
        if "reason" in body:
            body["reason"] = scrub(body["reason"])
        return JSONResponse(body, status_code=status, headers=headers)

    async def read(request: Request) -> PreparedCall:
        return PreparedCall(await read_request(request, limit))

    async def predict(request: Request) -> Response:
        call = await path.run(request, read)
        result = call.future.result()
        if isinstance(result, dict) and isinstance(result.get("duration"), (int, float)):
            request_info(request)["audio_seconds"] = float(result["duration"])
        if isinstance(result, dict):  # every format carries it where the ASR ran (metrics)
            request_info(request)["assisted"] = result.get("assisted")
        payload = json.dumps(result, ensure_ascii=False, allow_nan=False)
        return Response(payload, media_type="application/json")

    async def metrics_endpoint(request: Request) -> Response:
        body, content_type = metrics.exposition(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        runner.start()
        logger.info("listening; loading the model in the background (max body %d bytes, max queue "
                    "%d, API key %s)", limit, queue_limit, "required" if key else "not required")
        try:
            yield
        finally:
            runner.stop()

    root = Starlette(
        routes=[
            Route("/", health, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/", predict, methods=["POST"]),
            Route("/predict", predict, methods=["POST"]),
            *live_page.routes(),
        ],
        middleware=[Middleware(ApiKeyMiddleware, api_key=key, error_body=plain_error_body)],
        exception_handlers=exception_handlers(plain_error_body),
    )
    realtime = RealtimeRoute(runner, key, settings.max_sessions, settings.live_max_session_s,
                             settings.live_max_frame_bytes, metrics=metrics,
                             limits=LiveLimits(settings.live_idle_timeout_s, settings.live_send_timeout_s,
                                               settings.live_read_ahead_bytes, settings.live_max_load))
    v1 = Starlette(
        routes=openai_api.OpenAIRoutes(path, keepalive_s).routes() + realtime.routes(),
        middleware=[Middleware(ApiKeyMiddleware, api_key=key, error_body=openai_api.error_body)],
        exception_handlers=exception_handlers(openai_api.error_body),
    )
    app = Starlette(
        routes=[Mount(openai_api.PREFIX, app=v1), Mount("", app=root)],
        middleware=[Middleware(RequestContextMiddleware, metrics=metrics, stopping=realtime.stopping)],
        lifespan=lifespan,
    )
    app.state.runner = runner
    app.state.metrics = metrics
    app.state.settings = settings
    app.state.max_body_bytes = limit
    app.state.max_queue = queue_limit
    app.state.realtime = realtime
    return app


def ws_max_size(settings: ServerSettings) -> int:
    """The largest WebSocket message uvicorn takes: one append of ``LIVE_MAX_FRAME_BYTES`` in
    base64, with room for the event around it (a larger message is closed with 1009 by the
    transport; one a little over the frame limit gets the session's error event)."""
    return -(-settings.live_max_frame_bytes // 3) * 4 + 64 * 1024


def serve(host: Optional[str] = None, port: Optional[int] = None) -> None:
    """Run the server with uvicorn (one process: the model is loaded once); ``host`` and
    ``port`` win over HOST and PORT. Its stop: :func:`uvicorn_server`."""
    given = {"host": host, "port": port}
    settings = server_settings(**{name: value for name, value in given.items() if value is not None})
    configure_logging(settings.log_level)
    uvicorn_server(create_app(settings=settings), settings).run()


def uvicorn_server(app: Starlette, settings: ServerSettings):
    """The uvicorn server :func:`serve` runs ``app`` (:func:`create_app`'s) with. At SIGTERM (or
    Ctrl-C; or ``should_exit``) it stops listening, closes every live session at once (an
    ``error`` event, code ``server_shutting_down``, and close 1012), gives the requests in
    progress ``SHUTDOWN_GRACE_S`` to finish (then answers them 503: RequestContextMiddleware)
    and returns. A WebSocket whose client reads nothing is dropped rather than waited for
    (speaker_asr/serving/ws_protocol.py)."""
    import uvicorn

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None,
                            access_log=False, log_level=settings.log_level, lifespan="on",
                            server_header=False, ws_max_size=ws_max_size(settings),
                            ws=live_protocol() or "auto", timeout_graceful_shutdown=settings.shutdown_grace_s)

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            # the live sessions first, while the app can still say why: uvicorn's own shutdown
            # closes every WebSocket with 1012 and no word (and would wait on their routes)
            for listening in self.servers:
                listening.close()
            await app.state.realtime.shut_down()
            await super().shutdown(sockets)

    return Server(config)


def __getattr__(name: str):
    # ``uvicorn speaker_asr.serving.app:app``: the app is built on first access, not at import
    if name == "app":
        globals()["app"] = create_app()
        return globals()["app"]
    raise AttributeError(name)
