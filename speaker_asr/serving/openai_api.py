"""OpenAI's audio API on our server: ``POST /v1/audio/transcriptions``,
``POST /v1/audio/translations`` (multipart, OpenAI's fields), ``GET /v1/models`` and
``GET /v1/models/{id}``, so that the official ``openai`` SDK, LiteLLM or Open WebUI can call it
(``OpenAI(base_url="http://127.0.0.1:8080/v1")``).

The form (read once, by :func:`~speaker_asr.serving.negotiation.read_form`, as ``POST /`` reads
its own) becomes the handler's parameters (:func:`parse_fields`): ``file`` the audio,
``language``, ``prompt`` (``keywords`` appended to it), ``temperature``, ``known_speaker_names[]``
and ``known_speaker_references[]`` (data URIs or uploaded files) as on ``/``; the route sets
``task``; ``timestamp_granularities[]=word`` asks for word timestamps; ``response_format``,
``stream`` and ``model`` choose the answer. ``chunking_strategy`` is checked and has no effect (the
pipeline windows the audio its own way); ``include[]`` (log-probabilities, which the pipeline does
not keep) is accepted and ignored; ``languages[]`` with one entry is ``language``, with several the
language is detected. Any other field is one of our own parameters (``num_speakers``,
``min_speakers``, ...), read by its declared type as query-string values are; unknown names are
refused.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional, Sequence, Union

from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from speaker_asr.errors import RequestError
from speaker_asr.formats.openai_shapes import (EVENT_STREAM_MEDIA_TYPE, OPENAI_FORMATS, SSE_KEEPALIVE,
                                               TEXT_MEDIA_TYPE, TIMESTAMP_GRANULARITIES, ModelCard,
                                               Options, error_object, model_list, render, sse,
                                               stream_events)
from speaker_asr.formats._common import first_temperature
from speaker_asr.live.protocol import MAX_VAD_MS, ServerVad
from speaker_asr.models import Models
from speaker_asr.progress import ProgressCallback
from speaker_asr.redaction import scrub
from speaker_asr.serving.negotiation import HttpError, Upload, header_media_type, read_form, split_form
from speaker_asr.serving.request_path import (LEFT_DURING_STREAM, PreparedCall, RequestPath,
                                              bad_request, record_times, request_info)
from speaker_asr.serving.runner import ModelCall
from speaker_asr.text_parameters import list_key, parameters_from_text

logger = logging.getLogger("server")

PREFIX = "/v1"  # where app.py mounts these routes
TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
MODELS = "/v1/models"
DEFAULT_KEEPALIVE_S = 10.0
MODEL_HEADER = "X-Model"  # the model that ran, on every transcription answer (text ones too)

# OpenAI fields that mean nothing for this pipeline: accepted and ignored (docs/serving.md)
IGNORED_FIELDS = ("include",)
# our own parameters that the OpenAI fields (or the route) stand for on /v1
REPLACED_PARAMETERS = {
    "task": "the route sets the task: POST /v1/audio/transcriptions transcribes, "
            "POST /v1/audio/translations translates into English",
    "return_word_timestamps": "ask for word timestamps with timestamp_granularities[]=word "
                              "(and response_format=verbose_json)",
    "response_format": "",  # an OpenAI field itself
}
# our parameter names in the handler's errors -> the OpenAI field a client sent
OPENAI_PARAM = {"inputs": "file", "return_word_timestamps": "timestamp_granularities"}
SCALAR_FIELDS = ("model", "language", "prompt", "temperature", "response_format", "stream",
                 "chunking_strategy")
LIST_FIELDS = ("timestamp_granularities", "known_speaker_names", "known_speaker_references",
               "keywords", "languages")
OPENAI_FIELDS = ("file",) + SCALAR_FIELDS + LIST_FIELDS + IGNORED_FIELDS


def own_parameters() -> list[str]:
    """Our parameters that go in as extra fields on /v1: every request parameter but those an
    OpenAI field (or the route) stands for."""
    from speaker_asr.config import InferenceConfig

    return sorted(set(InferenceConfig.model_fields) - set(REPLACED_PARAMETERS) - set(OPENAI_FIELDS))



# OpenAI's error codes where our HttpError names none
DEFAULT_ERROR_CODES = {401: "invalid_api_key", 404: "unknown_url", 405: "method_not_allowed",
                       413: "request_too_large", 415: "unsupported_media_type",
                       500: "internal_error", 503: "service_unavailable"}


def error_body(exc: HttpError, message: str) -> dict[str, Any]:
    """An error on /v1: OpenAI's error object (``message``, ``type``, ``param``, ``code``)."""
    return error_object(message, exc.status, exc.param, exc.code or DEFAULT_ERROR_CODES.get(exc.status))


def _unknown(key: str) -> HttpError:
    import difflib

    own = own_parameters()
    close = difflib.get_close_matches(key, list(OPENAI_FIELDS) + own, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return _bad(f"unknown field {key!r}{hint}; OpenAI's fields: "
                f"{', '.join(f + '[]' if f in LIST_FIELDS + IGNORED_FIELDS else f for f in OPENAI_FIELDS)}; "
                f"this server's own: {', '.join(own)}", key, "unknown_parameter")


@dataclass(frozen=True)
class OpenAIRequest:
    """A /v1 request read from its form: the audio, the handler's parameters, and how to answer."""

    audio: bytes
    parameters: dict[str, Any]
    response_format: str = "json"
    words: bool = False
    segments: bool = True
    stream: bool = False
    model: Optional[str] = None  # what the client asked for (accepted whatever it is)


def _bad(message: str, param: Optional[str] = None, code: str = "invalid_value") -> HttpError:
    return HttpError(400, message, param=param, code=code)


def _split_key(key: str) -> tuple[str, Optional[str]]:
    """``known_speaker_names[]`` -> (``known_speaker_names``, None); ``chunking_strategy[type]``
    -> (``chunking_strategy``, ``type``)."""
    if key.endswith("[]"):
        return key[:-2], None
    if key.endswith("]") and "[" in key:
        base, _, sub = key[:-1].partition("[")
        return base, sub
    return key, None


def _typed(kind: type, value: Any) -> Any:
    """``value`` (form text, or a JSON value) read as ``kind`` by pydantic (``"true"`` is True,
    ``"20"`` is 20); ValueError when it is not one (a boolean is no number)."""
    if isinstance(value, bool) and kind is not bool:
        raise ValueError(value)
    try:
        return TypeAdapter(kind).validate_python(value.strip() if isinstance(value, str) else value)
    except ValidationError:
        raise ValueError(value) from None


def _boolean(value: str, param: str) -> bool:
    try:
        return _typed(bool, value)
    except ValueError:
        raise _bad(f"{param} must be true or false, got {value[:40]!r}", param) from None


def _chunking(value: Union[str, dict], sub: dict[str, str]) -> None:
    """Check ``chunking_strategy`` (``auto``, or a ``server_vad`` object as JSON or as
    ``chunking_strategy[key]`` fields); it changes nothing here."""
    if isinstance(value, str) and value.strip().lower() == "auto" and not sub:
        return
    allowed = "'auto' or a server_vad object {\"type\": \"server_vad\", \"prefix_padding_ms\", " \
              "\"silence_duration_ms\", \"threshold\"}"
    fields: dict[str, Any] = dict(sub)
    if isinstance(value, str) and value.strip():
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            raise _bad(f"chunking_strategy must be {allowed}, got {value[:60]!r}", "chunking_strategy")
        fields.update(parsed)
    converted: dict[str, Any] = {}
    for key, raw in fields.items():
        spec = ServerVad.model_fields.get(key)
        if spec is None:
            raise _bad(f"chunking_strategy has an unknown field {key!r}; allowed: "
                       f"{', '.join(ServerVad.model_fields)}", "chunking_strategy")
        try:  # form text read as the field's type ("0.5" a number), then checked by the model
            converted[key] = _typed(str if key == "type" else spec.annotation, raw)
        except ValueError:
            converted[key] = raw
    if converted.get("type") != "server_vad":
        raise _bad(f"chunking_strategy must be {allowed}", "chunking_strategy")
    try:
        ServerVad.model_validate(converted)  # the live sessions' server_vad: one set of bounds
    except ValidationError as exc:
        key = str(exc.errors(include_url=False)[0]["loc"][0])
        expected = {"threshold": "a number in [0, 1]"}.get(
            key, f"a whole number of milliseconds >= 0 and <= {MAX_VAD_MS}")
        raise _bad(f"chunking_strategy.{key} must be {expected}, got {fields[key]!r}",
                   "chunking_strategy") from None


@dataclass
class FormFields:
    """A /v1 form's fields sorted by kind (:func:`sort_fields`)."""

    audio: Optional[bytes] = None
    scalars: dict[str, str] = field(default_factory=dict)  # OpenAI's one-value fields
    chunking: dict[str, str] = field(default_factory=dict)  # chunking_strategy[key] fields
    lists: dict[str, list] = field(default_factory=lambda: {name: [] for name in LIST_FIELDS})
    own: list[tuple[str, str]] = field(default_factory=list)  # our own parameters, as text
    own_json: dict[str, Any] = field(default_factory=dict)  # the 'parameters' field's object


def sort_fields(items: Sequence[tuple[str, Union[str, Upload]]]) -> FormFields:
    """The form's fields (in order; files as :class:`Upload`) sorted into the audio, OpenAI's
    fields and our own parameters (the parts read by negotiation.split_form, as for ``POST /``);
    HttpError 400 for a field that cannot be one of them."""
    parts = split_form(items, IGNORED_FIELDS)
    form = FormFields(audio=parts.audio, own_json=parts.parameters)
    for raw_key, value in parts.texts:
        key, sub = _split_key(raw_key)
        if key == "chunking_strategy" and sub is not None:
            form.chunking[sub] = value
        elif sub is not None:
            raise _unknown(raw_key)
        elif key in form.lists:
            form.lists[key].append(value.strip() if key != "known_speaker_references" else value)
        elif key in SCALAR_FIELDS:
            if key in form.scalars:
                raise _bad(f"the field {key!r} is given twice; give it once", key)
            form.scalars[key] = value
        else:
            form.own.append((key, value))
    return form


@dataclass(frozen=True)
class AnswerShape:
    """How a /v1 request wants its answer (:func:`answer_shape`)."""

    response_format: str
    stream: bool
    granularities: tuple[str, ...]


def answer_shape(form: FormFields) -> AnswerShape:
    """``response_format``, ``stream``, ``timestamp_granularities[]`` and ``chunking_strategy``,
    checked together; HttpError 400 saying what is allowed."""
    fmt = form.scalars.get("response_format", "json").strip().lower() or "json"
    if fmt not in OPENAI_FORMATS:
        raise _bad(f"unknown response_format {form.scalars['response_format'][:40]!r}: use one of "
                   f"{', '.join(OPENAI_FORMATS)} (rttm and txt are on POST /)", "response_format")
    stream = _boolean(form.scalars["stream"], "stream") if "stream" in form.scalars else False
    if stream and fmt in ("srt", "vtt"):
        raise _bad(f"stream=true sends transcript events; {fmt} is a file: leave stream out, or "
                   "use json, text, verbose_json or diarized_json", "stream")
    granularities = form.lists["timestamp_granularities"]
    for g in granularities:
        if g not in TIMESTAMP_GRANULARITIES:
            raise _bad(f"unknown timestamp granularity {g[:40]!r}: use word, segment or both",
                       "timestamp_granularities")
    if granularities and (fmt != "verbose_json" or stream):
        raise _bad("timestamp_granularities needs response_format=verbose_json (without stream): "
                   "only verbose_json has segment and word times", "timestamp_granularities")
    if "chunking_strategy" in form.scalars or form.chunking:
        _chunking(form.scalars.get("chunking_strategy", ""), form.chunking)
    return AnswerShape(fmt, stream, tuple(granularities))


def openai_parameters(form: FormFields, shape: AnswerShape, task: str) -> dict[str, Any]:
    """Our parameters that OpenAI's fields (and the route) stand for: ``task``, ``language``
    (or the one entry of ``languages[]``), ``prompt`` with ``keywords[]`` appended,
    ``temperature``, word timestamps, the known speakers."""
    parameters: dict[str, Any] = {"task": task}
    language = form.scalars.get("language", "").strip()
    if not language and len(form.lists["languages"]) == 1:
        language = form.lists["languages"][0]
    if language:
        parameters["language"] = language
    prompt = form.scalars.get("prompt", "").strip()
    keywords = [k for k in form.lists["keywords"] if k]
    if keywords:
        prompt = (prompt + " " if prompt else "") + ", ".join(keywords)
    if prompt:
        parameters["prompt"] = prompt
    if "temperature" in form.scalars:
        text = form.scalars["temperature"]
        try:
            value = _typed(float, text)
        except ValueError:
            value = None
        if value is None or not 0 <= value <= 1:
            raise _bad(f"temperature must be a number from 0 to 1, got {text[:40]!r}", "temperature")
        parameters["temperature"] = float(value)
    if "word" in shape.granularities:
        parameters["return_word_timestamps"] = True
    for key in ("known_speaker_names", "known_speaker_references"):
        if form.lists[key]:
            parameters[key] = form.lists[key]
    return parameters


def own_parameters_of(form: FormFields, given: dict[str, Any]) -> dict[str, Any]:
    """Our own parameters from the extra fields (each read by its declared type) and the
    ``parameters`` JSON object; HttpError 400 for a name that is unknown, stood for by an OpenAI
    field, or ``given`` already."""
    allowed = set(own_parameters())
    for key in [list_key(key) for key, _ in form.own] + list(form.own_json):
        if key in REPLACED_PARAMETERS:
            reason = REPLACED_PARAMETERS[key] or "give it once, as the OpenAI field"
            raise _bad(f"{key!r} is not a parameter of this route: {reason}", key, "unknown_parameter")
        if key not in allowed and key not in OPENAI_FIELDS:
            raise _unknown(key)
        if key in given:
            raise _bad(f"{key!r} is given twice (as an OpenAI field and in 'parameters'); give it once",
                       key)
    try:
        from_text = parameters_from_text(form.own)
    except RequestError as exc:
        raise bad_request(exc, OPENAI_PARAM) from None
    return {**from_text, **form.own_json}


def parse_fields(items: Sequence[tuple[str, Union[str, Upload]]], task: str) -> OpenAIRequest:
    """The form's fields (in order; files as :class:`Upload`) -> an :class:`OpenAIRequest`, or
    HttpError 400 saying which field is wrong and what it may be: the fields sorted by kind,
    the answer's shape checked, OpenAI's fields mapped to our parameters, our own added."""
    form = sort_fields(items)
    shape = answer_shape(form)
    parameters = openai_parameters(form, shape, task)
    parameters.update(own_parameters_of(form, parameters))
    model = form.scalars.get("model", "").strip() or None
    return OpenAIRequest(form.audio, parameters, shape.response_format,
                         words="word" in shape.granularities,
                         segments=not shape.granularities or "segment" in shape.granularities,
                         stream=shape.stream, model=model)


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
