"""One transcription request end to end, for ``POST /`` and the ``/v1`` routes alike:
:meth:`RequestPath.run` takes a place in the queue (before the body is read), has the route read
its request (:class:`PreparedCall`), checks the parameters before queueing, runs the call on the
model and waits for it, dropping it when the client leaves first. The routes differ only in how
they read the request and write the answer; errors are raised (:class:`HttpError`,
:class:`ClientLeft`) and answered by the exception handlers of the app the route belongs to
(:func:`exception_handlers`), each in its own shape.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from speaker_asr.errors import RequestError
from speaker_asr.redaction import scrub
from speaker_asr.serving.negotiation import HttpError
from speaker_asr.scheduling import WorkCancelled
from speaker_asr.serving.runner import ClientGone, DisconnectWatch, ModelCall, ModelRunner, QueueFull

logger = logging.getLogger("server")

# why a request ended without an answer because its client went away (the access log's "error")
LEFT_DURING_BODY = "the client disconnected before sending the whole body"
LEFT_WHILE_QUEUED = ("the client disconnected while the request waited for the model; dropped "
                     "before it ran")
LEFT_WHILE_RUNNING = "the client disconnected while the model ran; the answer was discarded"
LEFT_DURING_STREAM = "the client disconnected during the stream"


class ClientLeft(Exception):
    """The client went away before its answer: nobody reads one (499, nginx's "client closed
    request"); ``why`` is logged."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def request_info(request: Request) -> dict[str, Any]:
    """What the request logs (RequestContextMiddleware in app.py puts it in the scope)."""
    return request.scope.get("state", {}).get("request_info") or {"request_id": "-"}


@dataclass
class PreparedCall:
    """What a route read from its request: the handler's ``data``, the call to run on it
    (default: the handler itself) and, for a streamed answer, an event the call sets when the
    models start (waiting stops there and the stream takes over)."""

    data: dict
    call: Optional[Callable[..., Any]] = None
    started: Optional[asyncio.Event] = None


def bad_request(error: RequestError, param_names: Optional[dict[str, str]] = None) -> HttpError:
    """The 400 for the client's mistake, with its parameter (renamed by ``param_names``: the
    field a client of that route sent) and its code."""
    param = (param_names or {}).get(error.param, error.param)
    code = error.code or ("invalid_file" if param == "file" else "invalid_value")
    return HttpError(400, str(error) or type(error).__name__, param=param, code=code)


class RequestPath:
    """The steps every transcription request takes, on the server's runner."""

    def __init__(self, runner: ModelRunner, max_body_bytes: int):
        self.runner = runner
        self.max_body_bytes = max_body_bytes

    def not_ready(self) -> HttpError:
        """503 while the model loads (or after it failed to load), with the reason."""
        why = self.runner.not_ready()
        headers = why.headers if why.recovers else {**why.headers, "X-Should-Retry": "false"}
        return HttpError(503, why.reason, headers, code=why.code)

    def admit(self):
        """A place in the queue for a request, before its body is read; HttpError 503 while
        the model is not ready or when the queue is full (with Retry-After)."""
        if not self.runner.ready:
            raise self.not_ready()
        try:
            return self.runner.admit()
        except QueueFull as exc:
            raise HttpError(503, str(exc), {"Retry-After": str(exc.retry_after)},
                            code="queue_full") from None

    async def run(self, request: Request, read: Callable[[Request], Awaitable[PreparedCall]],
                  param_names: Optional[dict[str, str]] = None) -> ModelCall:
        """Admit the request, ``read`` it, check its parameters, run it on the model and wait:
        the finished call -- or, when ``read`` gave a ``started`` event, the call still running
        once the models have started on it. Raises HttpError (503, what ``read`` raises, 400 for
        the client's mistake, also one the model found), :class:`ClientLeft`, or the model's own
        error (a 500)."""
        info = request_info(request)
        ticket = watch = call = None
        try:
            ticket = self.admit()
            try:
                prepared = await read(request)
                self.runner.precheck(prepared.data)
            except RequestError as exc:
                raise bad_request(exc, param_names) from None
            watch = DisconnectWatch(request.receive)
            call = self.runner.submit(prepared.data, call=prepared.call, ticket=ticket)
            prepared.data = {}  # the call holds the audio now: dropped with it if the client goes
            done = await self.runner.wait(call, watch, until=prepared.started)
        except ClientDisconnect:
            raise ClientLeft(LEFT_DURING_BODY) from None
        except ClientGone:
            raise ClientLeft(LEFT_WHILE_QUEUED) from None
        finally:
            if ticket is not None:
                ticket.release()
            if watch is not None:
                watch.close()
            if call is not None:
                record_times(call, info)
        if not done:  # streaming, and the models have started
            return call
        error = call.future.exception()
        if isinstance(error, WorkCancelled) or (error is None and watch.gone.is_set()):
            raise ClientLeft(LEFT_WHILE_RUNNING)  # stopped at its next unit, or done too late
        if isinstance(error, RequestError):
            raise bad_request(error, param_names)
        if error is not None:
            raise error
        return call


def record_times(call: ModelCall, info: dict) -> None:
    """The queue and model times of a call, for the access log."""
    info["queue_ms"] = round(call.queued_seconds * 1000, 1)
    info["inference_ms"] = round(call.run_seconds * 1000, 1)


# --------------------------------------------------------------------------- errors, per app

ErrorBody = Callable[[HttpError, str], dict]


def routes_help(request: Request) -> str:
    return (f"no such route: {request.method} {request.url.path}; use POST / or /predict, GET "
            "/health, GET /metrics, POST /v1/audio/transcriptions, POST /v1/audio/translations or "
            "GET /v1/models")


def error_response(request: Request, exc: HttpError, body: ErrorBody) -> JSONResponse:
    """``exc`` answered in an app's shape (``body``), its message scrubbed and logged."""
    message = scrub(exc.message)
    request_info(request)["error"] = message
    return JSONResponse(body(exc, message), status_code=exc.status, headers=exc.headers)


def exception_handlers(body: ErrorBody) -> dict:
    """An app's exception handlers, writing every error in its shape ``body(HttpError,
    message)``: HttpError as raised; Starlette's 404 and 405; a client gone (499, no body);
    anything else 500 with the request id only (the access log middleware logs the traceback)."""

    async def http_error(request: Request, exc: HttpError) -> Response:
        return error_response(request, exc, body)

    async def starlette_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404:
            message = routes_help(request)
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(request, HttpError(exc.status_code, message, dict(exc.headers or {})),
                              body)

    async def client_left(request: Request, exc: ClientLeft) -> Response:
        request_info(request)["error"] = exc.why
        return Response(status_code=499)

    async def internal_error(request: Request, exc: Exception) -> Response:
        request_id = request_info(request).get("request_id", "-")
        exc_500 = HttpError(500, f"internal error (request id {request_id})")
        return JSONResponse(body(exc_500, exc_500.message), status_code=500)

    return {HttpError: http_error, HTTPException: starlette_error, ClientLeft: client_left,
            Exception: internal_error}
