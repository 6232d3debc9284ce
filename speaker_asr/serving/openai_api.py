"""OpenAI's audio API on our server: ``POST /v1/audio/transcriptions``,
``POST /v1/audio/translations`` (multipart, OpenAI's fields), ``GET /v1/models`` and
``GET /v1/models/{id}``, so that the official ``openai`` SDK, LiteLLM or Open WebUI can call it
(``OpenAI(base_url="http://127.0.0.1:8080/v1")``).

The form (read once, by :func:`~speaker_asr.serving.negotiation.read_form`, as ``POST /`` reads
its own) becomes the handler's parameters and the answer's shape in
speaker_asr/serving/openai_form.py (:func:`~speaker_asr.serving.openai_form.parse_fields`: which
of OpenAI's fields mean what, and our own parameters beside them).

The request takes the same path as ``POST /`` (request_path.py: a place in the queue taken before
the body is read, dropped when the client disconnects while it waits), and the handler's
:meth:`~speaker_asr.endpoint.EndpointHandler.result` gives the typed Result, written in OpenAI's
shapes by :mod:`speaker_asr.formats.openai_shapes` on the worker thread. With ``stream=true`` the
answer (a StreamingResponse over :func:`event_stream`) starts (200, ``text/event-stream``) once
the request has been checked and the models start, sends a keep-alive comment every
``keepalive_s`` while they run, and then every event at once: the pipeline has segments only when
transcription, diarization and attribution are all done.

These routes are their own Starlette app, mounted at ``/v1`` by app.py with exception handlers
that write OpenAI's error object (:func:`error_body`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional, Union

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from speaker_asr.errors import RequestError
from speaker_asr.formats import first_temperature
from speaker_asr.formats.openai_shapes import (EVENT_STREAM_MEDIA_TYPE, SSE_KEEPALIVE, TEXT_MEDIA_TYPE,
                                               ModelCard, Options, error_object, model_list, render,
                                               sse, stream_events)
from speaker_asr.models import Models
from speaker_asr.progress import ProgressCallback
from speaker_asr.redaction import scrub
from speaker_asr.serving.negotiation import HttpError, header_media_type, read_form
from speaker_asr.serving.openai_form import OPENAI_PARAM, OpenAIRequest, parse_fields
from speaker_asr.serving.request_path import (LEFT_DURING_STREAM, PreparedCall, RequestPath,
                                              bad_request, record_times, request_info)
from speaker_asr.serving.runner import ModelCall

logger = logging.getLogger("server")

PREFIX = "/v1"  # where app.py mounts these routes
TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
MODELS = "/v1/models"
DEFAULT_KEEPALIVE_S = 10.0
MODEL_HEADER = "X-Model"  # the model that ran, on every transcription answer (text ones too)

# OpenAI's error codes where our HttpError names none
DEFAULT_ERROR_CODES = {401: "invalid_api_key", 404: "unknown_url", 405: "method_not_allowed",
                       413: "request_too_large", 415: "unsupported_media_type",
                       500: "internal_error", 503: "service_unavailable"}


def error_body(exc: HttpError, message: str) -> dict[str, Any]:
    """An error on /v1: OpenAI's error object (``message``, ``type``, ``param``, ``code``)."""
    return error_object(message, exc.status, exc.param, exc.code or DEFAULT_ERROR_CODES.get(exc.status))


# --------------------------------------------------------------------------- models


def model_name(setting: str) -> tuple[str, str]:
    """(id, owned_by) of a model setting: a hub id as it is (owned by its organisation), a local
    folder or file by its folder's name (owned by ``local``: its path stays private)."""
    value = setting.strip()
    path = Path(value).expanduser()
    try:
        local = path.exists()
    except OSError:
        local = False
    if local:
        name = path.parent.name if path.is_file() else path.name
        return scrub(name or "local-model"), "local"
    owner = value.split("/", 1)[0] if "/" in value else "huggingface"
    return scrub(value), scrub(owner)


def model_cards(models: Optional[Models], created: int) -> list[ModelCard]:
    """What is loaded: the ASR model first (the one transcriptions name), then the assistant and
    the diarization pipeline (none for a handler without models)."""
    if models is None:
        return []
    settings = models.settings
    cards: list[ModelCard] = []
    for setting in (settings.asr_model, settings.assistant_model, settings.diarization_model):
        if setting:
            name, owner = model_name(setting)
            if name not in {c.id for c in cards}:
                cards.append(ModelCard(name, created, owner))
    return cards


# --------------------------------------------------------------------------- answers


def _setter(event: asyncio.Event) -> Callable[[], None]:
    """A function that sets ``event`` from another thread (the worker's)."""
    loop = asyncio.get_running_loop()
    return lambda: loop.call_soon_threadsafe(event.set)


@dataclass
class RenderedAnswer:
    """What the worker thread wrote for one /v1 request in the shape it asked for: the body (or
    the stream's events), the audio's duration and whether the assistant drafted
    (``{"used", "reason"}``, None where the ASR did not run; for the metrics)."""

    body: Union[dict, str, None]
    events: Optional[list[dict]]
    duration: Optional[float]
    assisted: Optional[dict] = None


def failure_event(error: BaseException, info: dict) -> dict:
    """The ``{"error": ...}`` event that ends a stream whose call failed after the answer
    started: the client's mistake (400, its message) or the server's (500, the request id only;
    logged)."""
    if isinstance(error, RequestError):
        exc = bad_request(error, OPENAI_PARAM)
        message = scrub(exc.message)
        info["error"] = message
    else:
        logger.error("internal error during an event stream", exc_info=error)
        info["error"] = "internal error"
        exc = HttpError(500, f"internal error (request id {info.get('request_id', '-')})")
        message = exc.message
    return error_body(exc, message)


async def event_stream(runner, call: ModelCall, info: dict, keepalive_s: float) -> AsyncIterator[bytes]:
    """The ``stream=true`` answer's body: a keep-alive comment every ``keepalive_s`` until the
    call is done, then its events -- or an ``{"error": ...}`` event (what the SDK raises as
    ``APIError``) when the pipeline failed after the answer started. A client that leaves
    cancels it (StreamingResponse listens for the disconnect); the model finishes its call."""
    loop = asyncio.get_running_loop()
    try:
        while not call.future.done():
            tick = asyncio.Event()
            timer = loop.call_later(keepalive_s, tick.set)
            try:
                await runner.wait(call, until=tick)
            finally:
                timer.cancel()
            if not call.future.done():
                yield SSE_KEEPALIVE
        record_times(call, info)
        error = call.future.exception()
        if error is not None:
            yield sse(failure_event(error, info))
            return
        answer: RenderedAnswer = call.future.result()
        info["audio_seconds"], info["assisted"] = answer.duration, answer.assisted
        for event in answer.events or []:
            yield sse(event)
    except (asyncio.CancelledError, OSError):  # the client went away
        info["error"] = LEFT_DURING_STREAM
        raise


class OpenAIRoutes:
    """The /v1 routes (relative to the mount) on the server's request path."""

    def __init__(self, path: RequestPath, keepalive_s: float = DEFAULT_KEEPALIVE_S):
        self.path = path
        self.runner = path.runner
        self.keepalive_s = keepalive_s

    def routes(self) -> list[Route]:
        return [
            Route(TRANSCRIPTIONS.removeprefix(PREFIX), self.transcriptions, methods=["POST"]),
            Route(TRANSLATIONS.removeprefix(PREFIX), self.translations, methods=["POST"]),
            Route(MODELS.removeprefix(PREFIX), self.models, methods=["GET"]),
            Route(MODELS.removeprefix(PREFIX) + "/{model:path}", self.model, methods=["GET"]),
        ]

    # ------------------------------------------------------------------------- models

    def cards(self) -> list[ModelCard]:
        if not self.runner.ready:
            return []
        created = int(self.runner.loaded_at or time.time())
        return model_cards(self.runner.models, created)

    def served_model(self) -> Optional[str]:
        cards = self.cards()
        return cards[0].id if cards else None

    def _check_ready(self) -> None:
        why = self.runner.not_ready()
        if why is not None:  # no X-Should-Retry on a listing
            raise HttpError(503, why.reason, why.headers, code=why.code)

    async def models(self, request: Request) -> Response:
        self._check_ready()
        return JSONResponse(model_list(self.cards()))

    async def model(self, request: Request) -> Response:
        wanted = request.path_params["model"]
        self._check_ready()
        for card in self.cards():
            if card.id == wanted:
                return JSONResponse(card.to_json())
        names = ", ".join(c.id for c in self.cards()) or "none"
        raise HttpError(404, f"no model {wanted[:100]!r} is loaded here; loaded: {names}",
                        code="model_not_found", param="model")

    # ------------------------------------------------------------------------- transcription

    async def transcriptions(self, request: Request) -> Response:
        return await self._transcribe(request, "transcribe")

    async def translations(self, request: Request) -> Response:
        return await self._transcribe(request, "translate")

    def _options(self, request: OpenAIRequest, config, model: Optional[str]) -> Options:
        return Options(task=config.task, response_format=request.response_format,
                       words=request.words, segments=request.segments, model=model,
                       temperature=first_temperature(config.temperature))

    def _work(self, handler, request: OpenAIRequest, model: Optional[str],
              on_start: Optional[Callable[[], None]]) -> Callable[..., RenderedAnswer]:
        """The call for the worker thread: the handler's Result, renamed by ``speaker_names``,
        written in the shape asked for. ``progress``: the runner's, for a handler that takes it."""

        def work(data: dict, progress: Optional[ProgressCallback] = None) -> RenderedAnswer:
            extra = {"progress": progress} if progress is not None else {}
            config, result = handler.result(data, on_start=on_start, **extra)
            result = result.named(config.speaker_names or [])
            options = self._options(request, config, model)
            assisted = None if result.assisted is None else result.assisted.to_json()
            if request.stream:
                return RenderedAnswer(None, stream_events(result, options), result.duration, assisted)
            return RenderedAnswer(render(result, options), None, result.duration, assisted)

        return work

    async def _transcribe(self, request: Request, task: str) -> Response:
        if header_media_type(request.headers.get("content-type")) != "multipart/form-data":
            # refused before reading: OpenAI's audio API takes multipart uploads only
            raise HttpError(415, f"send the audio as multipart/form-data (a 'file' field and "
                                 f"OpenAI's other fields), got Content-Type "
                                 f"{request.headers.get('content-type')!r}",
                            code="unsupported_media_type")
        asked: dict[str, OpenAIRequest] = {}
        model = None

        async def read(request: Request) -> PreparedCall:
            nonlocal model
            handler = self.runner.handler
            if not callable(getattr(handler, "result", None)):
                raise HttpError(501, "this server's handler cannot answer the OpenAI-compatible "
                                     "routes (it has no result method); use POST /",
                                code="not_implemented")
            parsed = parse_fields(await read_form(request, self.path.max_body_bytes), task)
            model = self.served_model()
            data = {"inputs": parsed.audio, "parameters": parsed.parameters}
            parsed = OpenAIRequest(b"", parsed.parameters, parsed.response_format, parsed.words,
                                   parsed.segments, parsed.stream, parsed.model)
            asked["request"] = parsed
            started = asyncio.Event() if parsed.stream else None
            on_start = _setter(started) if started is not None else None
            return PreparedCall(data, self._work(handler, parsed, model, on_start), started)

        call = await self.path.run(request, read, OPENAI_PARAM)
        parsed = asked["request"]
        headers = {MODEL_HEADER: model} if model else {}
        info = request_info(request)
        if parsed.stream:  # running (the models have started), or done before: all at once
            return StreamingResponse(event_stream(self.runner, call, info, self.keepalive_s),
                                     headers={"Content-Type": EVENT_STREAM_MEDIA_TYPE,
                                              "Cache-Control": "no-cache",
                                              "X-Accel-Buffering": "no", **headers})
        answer: RenderedAnswer = call.future.result()
        info["audio_seconds"], info["assisted"] = answer.duration, answer.assisted
        if isinstance(answer.body, str):
            return Response(answer.body, media_type=TEXT_MEDIA_TYPE,
                            headers=headers)
        payload = json.dumps(answer.body, ensure_ascii=False, allow_nan=False)
        return Response(payload, media_type="application/json", headers=headers)
