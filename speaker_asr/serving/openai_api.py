"""OpenAI's audio API on our server: ``POST /v1/audio/transcriptions``,
``POST /v1/audio/translations`` (multipart, OpenAI's fields), ``GET /v1/models`` and
``GET /v1/models/{id}``, so that the official ``openai`` SDK, LiteLLM or Open WebUI can call it
(``OpenAI(base_url="http://127.0.0.1:8080/v1")``).

The form becomes the handler's parameters (:func:`parse_fields`): ``file`` the audio, ``language``,
``prompt`` (``keywords`` appended to it), ``temperature``, ``known_speaker_names[]`` and
``known_speaker_references[]`` (data URIs or uploaded files) as on ``/``; the route sets ``task``;
``timestamp_granularities[]=word`` asks for word timestamps; ``response_format``, ``stream`` and
``model`` choose the answer. ``chunking_strategy`` is checked and has no effect (the pipeline
windows the audio its own way); ``include[]`` (log-probabilities, which the pipeline does not
keep) is accepted and ignored; ``languages[]`` with one entry is ``language``, with several the
language is detected. Any other field is one of our own parameters (``num_speakers``,
``min_speakers``, ...), converted like query-string values; unknown names are refused.

The request goes through the same queue as ``POST /`` (app.py: a place taken before the body is
read, dropped when the client disconnects while it waits), and the handler's
:meth:`~speaker_asr.endpoint.EndpointHandler.result` gives the typed Result, written in OpenAI's
shapes by :mod:`speaker_asr.formats.openai_shapes` on the worker thread. With ``stream=true`` the
answer starts (200, ``text/event-stream``) once the request has been checked and the models start,
sends a keep-alive comment every ``keepalive_s`` while they run, and then every event at once:
the pipeline has segments only when transcription, diarization and attribution are all done.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from speaker_asr.errors import RequestError
from speaker_asr.formats.openai_shapes import (EVENT_STREAM_MEDIA_TYPE, OPENAI_FORMATS, SSE_KEEPALIVE,
                                               TEXT_MEDIA_TYPE, TIMESTAMP_GRANULARITIES, ModelCard,
                                               Options, error_object, model_list, render, sse,
                                               stream_events)
from speaker_asr.progress import ProgressCallback
from speaker_asr.serving.logging_setup import scrub
from speaker_asr.serving.negotiation import (LEFT_DURING_BODY, LEFT_WHILE_QUEUED,
                                             LEFT_WHILE_RUNNING, HttpError, client_left,
                                             collect_parameters, coerce_value, media_type as
                                             content_media_type, read_body, read_form, request_info)
from speaker_asr.serving.runner import ClientGone, DisconnectWatch, ModelRunner

logger = logging.getLogger("server")

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
CHUNKING_FIELDS = {"type": str, "prefix_padding_ms": int, "silence_duration_ms": int, "threshold": float}
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


def _unknown(key: str) -> HttpError:
    import difflib

    own = own_parameters()
    close = difflib.get_close_matches(key, list(OPENAI_FIELDS) + own, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return _bad(f"unknown field {key!r}{hint}; OpenAI's fields: "
                f"{', '.join(f + '[]' if f in LIST_FIELDS + IGNORED_FIELDS else f for f in OPENAI_FIELDS)}; "
                f"this server's own: {', '.join(own)}", key, "unknown_parameter")


@dataclass(frozen=True)
class Upload:
    """A file field of the form."""

    filename: Optional[str]
    data: bytes


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


def _boolean(value: str, param: str) -> bool:
    coerced = coerce_value(value)
    if not isinstance(coerced, bool):
        raise _bad(f"{param} must be true or false, got {value[:40]!r}", param)
    return coerced


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
    for key, raw in fields.items():
        kind = CHUNKING_FIELDS.get(key)
        if kind is None:
            raise _bad(f"chunking_strategy has an unknown field {key!r}; allowed: "
                       f"{', '.join(CHUNKING_FIELDS)}", "chunking_strategy")
        got = coerce_value(raw) if isinstance(raw, str) and kind is not str else raw
        if kind is str:
            ok = got == "server_vad"
        elif kind is int:
            ok = isinstance(got, int) and not isinstance(got, bool) and got >= 0
        else:
            ok = isinstance(got, (int, float)) and not isinstance(got, bool) and 0 <= got <= 1
        if not ok:
            expected = {"type": "'server_vad'", "threshold": "a number in [0, 1]"}.get(
                key, "a whole number of milliseconds >= 0")
            raise _bad(f"chunking_strategy.{key} must be {expected}, got {raw!r}", "chunking_strategy")
    if fields.get("type") != "server_vad":
        raise _bad(f"chunking_strategy must be {allowed}", "chunking_strategy")


def parse_fields(items: Sequence[tuple[str, Union[str, Upload]]], task: str) -> OpenAIRequest:
    """The form's fields (in order; files as :class:`Upload`) -> an :class:`OpenAIRequest`, or
    HttpError 400 saying which field is wrong and what it may be."""
    audio: Optional[bytes] = None
    scalars: dict[str, str] = {}
    chunking_sub: dict[str, str] = {}
    lists: dict[str, list] = {name: [] for name in LIST_FIELDS}
    extras: list[tuple[str, Any]] = []
    json_parameters: dict[str, Any] = {}
    for raw_key, value in items:
        key, sub = _split_key(raw_key)
        if key == "file":
            if not isinstance(value, Upload):
                raise _bad("the 'file' field must be a file upload (the audio), e.g. "
                           "curl -F file=@audio.wav", "file")
            if audio is not None:
                raise _bad("the form has two 'file' fields; send one recording per request", "file")
            audio = value.data
            continue
        if isinstance(value, Upload):
            if key == "known_speaker_references":  # a clip uploaded as a file: base64 for the handler
                lists[key].append(base64.b64encode(value.data).decode("ascii"))
                continue
            raise _bad(f"unexpected file field {raw_key!r}: upload the audio as 'file' (and "
                       "reference clips as 'known_speaker_references[]')", raw_key)
        if key == "chunking_strategy" and sub is not None:
            chunking_sub[sub] = value
        elif sub is not None:
            raise _unknown(raw_key)
        elif key in lists:
            lists[key].append(value.strip() if key != "known_speaker_references" else value)
        elif key in SCALAR_FIELDS:
            if key in scalars:
                raise _bad(f"the field {key!r} is given twice; give it once", key)
            scalars[key] = value
        elif key in IGNORED_FIELDS:
            continue
        elif key == "parameters":  # our own parameters as one JSON object, as on POST /
            try:
                extra = json.loads(value)
            except (ValueError, RecursionError):
                extra = None
            if not isinstance(extra, dict):
                raise _bad("the 'parameters' form field must be a JSON object", "parameters")
            json_parameters.update(extra)
        else:
            extras.append((key, value))
    if audio is None:
        raise _bad("the form has no 'file' field: send the audio as a file upload named 'file' "
                   "(curl -F file=@audio.wav; the openai SDK: file=open('audio.wav', 'rb'))", "file",
                   "missing_required_parameter")
    if not audio:
        raise _bad("the uploaded 'file' is empty", "file")

    fmt = scalars.get("response_format", "json").strip().lower() or "json"
    if fmt not in OPENAI_FORMATS:
        raise _bad(f"unknown response_format {scalars['response_format'][:40]!r}: use one of "
                   f"{', '.join(OPENAI_FORMATS)} (rttm and txt are on POST /)", "response_format")
    stream = _boolean(scalars["stream"], "stream") if "stream" in scalars else False
    if stream and fmt in ("srt", "vtt"):
        raise _bad(f"stream=true sends transcript events; {fmt} is a file: leave stream out, or "
                   "use json, text, verbose_json or diarized_json", "stream")
    granularities = lists["timestamp_granularities"]
    for g in granularities:
        if g not in TIMESTAMP_GRANULARITIES:
            raise _bad(f"unknown timestamp granularity {g[:40]!r}: use word, segment or both",
                       "timestamp_granularities")
    if granularities and (fmt != "verbose_json" or stream):
        raise _bad("timestamp_granularities needs response_format=verbose_json (without stream): "
                   "only verbose_json has segment and word times", "timestamp_granularities")
    if "chunking_strategy" in scalars or chunking_sub:
        _chunking(scalars.get("chunking_strategy", ""), chunking_sub)

    parameters: dict[str, Any] = {"task": task}
    language = scalars.get("language", "").strip()
    if not language and len(lists["languages"]) == 1:
        language = lists["languages"][0]
    if language:
        parameters["language"] = language
    prompt = scalars.get("prompt", "").strip()
    keywords = [k for k in lists["keywords"] if k]
    if keywords:
        prompt = (prompt + " " if prompt else "") + ", ".join(keywords)
    if prompt:
        parameters["prompt"] = prompt
    if "temperature" in scalars:
        value = coerce_value(scalars["temperature"])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _bad(f"temperature must be a number from 0 to 1, got {scalars['temperature'][:40]!r}",
                       "temperature")
        parameters["temperature"] = float(value)
    if "word" in granularities:
        parameters["return_word_timestamps"] = True
    for key in ("known_speaker_names", "known_speaker_references"):
        if lists[key]:
            parameters[key] = lists[key]
    own = {**collect_parameters(extras), **json_parameters}
    allowed = set(own_parameters())
    for key in own:
        if key in REPLACED_PARAMETERS:
            reason = REPLACED_PARAMETERS[key] or "give it once, as the OpenAI field"
            raise _bad(f"{key!r} is not a parameter of this route: {reason}", key, "unknown_parameter")
        if key not in allowed and key not in OPENAI_FIELDS:
            raise _unknown(key)
        if key in parameters:
            raise _bad(f"{key!r} is given twice (as an OpenAI field and in 'parameters'); give it once",
                       key)
    parameters.update(own)
    model = scalars.get("model", "").strip() or None
    return OpenAIRequest(audio, parameters, fmt, words="word" in granularities,
                         segments=not granularities or "segment" in granularities, stream=stream,
                         model=model)


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


def model_cards(handler: Any, created: int) -> list[ModelCard]:
    """What the handler loaded: the ASR model first (the one transcriptions name), then the
    assistant and the diarization pipeline."""
    settings = getattr(handler, "settings", None)
    if settings is None:
        return []
    cards: list[ModelCard] = []
    for setting in (settings.asr_model, settings.assistant_model, settings.diarization_model):
        if setting:
            name, owner = model_name(setting)
            if name not in {c.id for c in cards}:
                cards.append(ModelCard(name, created, owner))
    return cards


def language_names() -> dict[str, str]:
    """Whisper's language names by code (``en`` -> ``english``); empty where transformers is
    missing (the codes are written then)."""
    try:
        from speaker_asr.config import _whisper_languages

        return dict(_whisper_languages()[0])
    except Exception:  # pragma: no cover - transformers is a dependency of the handler
        return {}


# --------------------------------------------------------------------------- answers


def _setter(event: asyncio.Event) -> Callable[[], None]:
    """A function that sets ``event`` from another thread (the worker's)."""
    loop = asyncio.get_running_loop()
    return lambda: loop.call_soon_threadsafe(event.set)


@dataclass
class Answer:
    """What the worker thread wrote for one request: the body (or the events) and its duration."""

    body: Union[dict, str, None]
    events: Optional[list[dict]]
    duration: Optional[float]


class EventStream:
    """The ``stream=true`` answer (an ASGI app): 200 and ``text/event-stream`` at once (the
    request has been checked and the models are running), a keep-alive comment every
    ``keepalive_s`` until the job is done, then its events -- or an ``{"error": ...}`` event
    (what the SDK raises as ``APIError``) when the pipeline failed after the answer started."""

    def __init__(self, routes: "OpenAIRoutes", job, watch: DisconnectWatch, info: dict,
                 headers: dict[str, str], keepalive_s: float):
        self.routes, self.job, self.watch, self.info = routes, job, watch, info
        self.headers, self.keepalive_s = headers, keepalive_s

    async def __call__(self, scope, receive, send) -> None:
        runner, job, watch = self.routes.runner, self.job, self.watch
        loop = asyncio.get_running_loop()
        try:
            headers = [(b"content-type", EVENT_STREAM_MEDIA_TYPE.encode()),
                       (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
            headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while not job.future.done():
                tick = asyncio.Event()
                timer = loop.call_later(self.keepalive_s, tick.set)
                try:
                    await runner.wait(job, watch, until=tick)
                finally:
                    timer.cancel()
                if watch.gone.is_set():  # the model finishes; nobody is listening
                    self.info["error"] = "the client disconnected during the stream"
                    return
                if not job.future.done():
                    await send({"type": "http.response.body", "body": SSE_KEEPALIVE, "more_body": True})
            self.routes.record_times(job, self.info)
            error = job.future.exception()
            if error is None:
                answer: Answer = job.future.result()
                self.info["audio_seconds"] = answer.duration
                chunks = [sse(event) for event in answer.events or []]
            else:
                status, message, param, code = self.routes.describe_failure(error, self.info)
                chunks = [sse(error_object(message, status, param, code))]
            for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (OSError, ClientDisconnect):  # the client went away while we wrote
            self.info["error"] = "the client disconnected during the stream"
        finally:
            watch.close()


class OpenAIRoutes:
    """The /v1 routes on the server's runner. ``admit(request)``: app.py's queue admission (a
    ticket, or HttpError 503); ``error(request, HttpError)``: app.py's error answer (OpenAI's
    error object on /v1)."""

    def __init__(self, runner: ModelRunner, max_body_bytes: int,
                 admit: Callable, error: Callable[[Request, HttpError], Response],
                 keepalive_s: float = DEFAULT_KEEPALIVE_S):
        self.runner = runner
        self.max_body_bytes = max_body_bytes
        self.admit = admit
        self.error = error
        self.keepalive_s = keepalive_s
        self._languages: Optional[dict[str, str]] = None

    def routes(self) -> list[Route]:
        return [
            Route(TRANSCRIPTIONS, self.transcriptions, methods=["POST"]),
            Route(TRANSLATIONS, self.translations, methods=["POST"]),
            Route(MODELS, self.models, methods=["GET"]),
            Route(MODELS + "/{model:path}", self.model, methods=["GET"]),
        ]

    # ------------------------------------------------------------------------- models

    def cards(self) -> list[ModelCard]:
        if not self.runner.ready:
            return []
        created = int(self.runner.loaded_at or time.time())
        return model_cards(self.runner.handler, created)

    def served_model(self) -> Optional[str]:
        cards = self.cards()
        return cards[0].id if cards else None

    async def models(self, request: Request) -> Response:
        if not self.runner.ready:
            return self.error(request, self._not_ready())
        return JSONResponse(model_list(self.cards()))

    async def model(self, request: Request) -> Response:
        wanted = request.path_params["model"]
        if not self.runner.ready:
            return self.error(request, self._not_ready())
        for card in self.cards():
            if card.id == wanted:
                return JSONResponse(card.to_json())
        names = ", ".join(c.id for c in self.cards()) or "none"
        return self.error(request, HttpError(404, f"no model {wanted[:100]!r} is loaded here; "
                                                  f"loaded: {names}", code="model_not_found",
                                             param="model"))

    def _not_ready(self) -> HttpError:
        status, body, headers = self.runner.status()
        return HttpError(503, body["reason"], headers,
                         code="model_loading" if self.runner.state == "loading" else "model_failed")

    # ------------------------------------------------------------------------- transcription

    async def transcriptions(self, request: Request) -> Response:
        return await self._transcribe(request, "transcribe")

    async def translations(self, request: Request) -> Response:
        return await self._transcribe(request, "translate")

    def describe_failure(self, error: BaseException, info: dict) -> tuple[int, str, Optional[str], str]:
        """(status, message, param, code) for an exception of the job: the client's mistake
        (400, its message) or the server's (500, the request id only; logged)."""
        if isinstance(error, RequestError):
            message = scrub(str(error) or type(error).__name__)
            param = OPENAI_PARAM.get(error.param, error.param)
            code = ("unknown_parameter" if message.startswith("unknown parameter")
                    else "invalid_file" if param == "file" else "invalid_value")
            info["error"] = message
            return 400, message, param, code
        logger.error("internal error on an OpenAI-compatible request", exc_info=error)
        info["error"] = "internal error"
        return 500, f"internal error (request id {info.get('request_id', '-')})", None, "internal_error"

    def record_times(self, job, info: dict) -> None:
        info["queue_ms"] = round(job.queued_seconds * 1000, 1)
        info["inference_ms"] = round(job.run_seconds * 1000, 1)

    def _options(self, request: OpenAIRequest, config, model: Optional[str]) -> Options:
        if self._languages is None and request.response_format == "verbose_json":
            self._languages = language_names()
        temperature = config.temperature[0] if isinstance(config.temperature, list) else config.temperature
        return Options(task=config.task, response_format=request.response_format,
                       words=request.words, segments=request.segments, model=model,
                       temperature=float(temperature), language_names=self._languages or {})

    def _work(self, handler, request: OpenAIRequest, model: Optional[str],
              on_start: Optional[Callable[[], None]]) -> Callable[..., Answer]:
        """The job for the worker thread: the handler's Result, renamed by ``speaker_names``,
        written in the shape asked for. ``progress``: the runner's, for a handler that takes it."""

        def work(data: dict, progress: Optional[ProgressCallback] = None) -> Answer:
            extra = {"progress": progress} if progress is not None else {}
            config, result = handler.result(data, on_start=on_start, **extra)
            result = result.named(config.speaker_names or [])
            options = self._options(request, config, model)
            if request.stream:
                return Answer(None, stream_events(result, options), result.duration)
            return Answer(render(result, options), None, result.duration)

        return work

    async def _transcribe(self, request: Request, task: str) -> Response:
        info = request_info(request)
        ticket = watch = None
        try:
            kind = content_media_type(request.headers.get("content-type"))
            if kind != "multipart/form-data":
                # refused before reading: OpenAI's audio API takes multipart uploads only
                raise HttpError(415, f"send the audio as multipart/form-data (a 'file' field and "
                                     f"OpenAI's other fields), got Content-Type "
                                     f"{request.headers.get('content-type')!r}",
                                code="unsupported_media_type")
            ticket = await self.admit(request)
            handler = self.runner.handler
            if not callable(getattr(handler, "result", None)):
                raise HttpError(501, "this server's handler cannot answer the OpenAI-compatible "
                                     "routes (it has no result method); use POST /",
                                code="not_implemented")
            body = await read_body(request, self.max_body_bytes)
            parsed = await self._read(request, body, task)
            del body
            model = self.served_model()
            data = {"inputs": parsed.audio, "parameters": parsed.parameters}
            parsed = replace(parsed, audio=b"")
            try:
                self.runner.precheck(data)
            except RequestError as exc:
                status, message, param, code = self.describe_failure(exc, info)
                raise HttpError(status, message, param=param, code=code) from None
            headers = {MODEL_HEADER: model} if model else {}
            started = asyncio.Event() if parsed.stream else None
            on_start = _setter(started) if started is not None else None

            watch = DisconnectWatch(request.receive)
            job = self.runner.submit(data, call=self._work(handler, parsed, model, on_start),
                                     ticket=ticket)
            del data  # the job holds the audio now: dropped with it if the client goes
            done = await self.runner.wait(job, watch, until=started)
            if not done:  # streaming, and the models have started: the stream takes over
                stream, watch = EventStream(self, job, watch, info, headers, self.keepalive_s), None
                return stream  # type: ignore[return-value]
            self.record_times(job, info)
            error = job.future.exception()
            if error is not None:
                status, message, param, code = self.describe_failure(error, info)
                return JSONResponse(error_object(message, status, param, code), status_code=status)
            if watch.gone.is_set():
                return client_left(info, LEFT_WHILE_RUNNING)
            answer: Answer = job.future.result()
            info["audio_seconds"] = answer.duration
            if parsed.stream:  # done before the stream started: all of it at once
                stream, watch = EventStream(self, job, watch, info, headers, self.keepalive_s), None
                return stream  # type: ignore[return-value]
            if isinstance(answer.body, str):
                return Response(answer.body, media_type=TEXT_MEDIA_TYPE,
                                headers=headers)
            payload = json.dumps(answer.body, ensure_ascii=False, allow_nan=False)
            return Response(payload, media_type="application/json", headers=headers)
        except HttpError as exc:
            return self.error(request, exc)
        except ClientDisconnect:
            return client_left(info, LEFT_DURING_BODY)
        except ClientGone:
            return client_left(info, LEFT_WHILE_QUEUED)
        finally:
            if ticket is not None:
                ticket.release()
            if watch is not None:
                watch.close()

    async def _read(self, request: Request, body: bytes, task: str) -> OpenAIRequest:
        form = await read_form(request, body)
        try:
            items: list[tuple[str, Union[str, Upload]]] = []
            for key, value in form.multi_items():
                if isinstance(value, str):
                    items.append((key, value))
                else:
                    items.append((key, Upload(value.filename, await value.read())))
        finally:
            await form.close()
        return parse_fields(items, task)

