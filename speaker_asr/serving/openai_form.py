"""OpenAI's transcription form on our server (``POST /v1/audio/transcriptions`` and
``/v1/audio/translations``, speaker_asr/serving/openai_api.py): its fields read into the
handler's parameters and the answer's shape (:func:`parse_fields`).

The form (read once, by :func:`~speaker_asr.serving.negotiation.read_form`, as ``POST /`` reads
its own) becomes: ``file`` the audio, ``language``, ``prompt`` (``keywords`` appended to it),
``temperature``, ``known_speaker_names[]`` and ``known_speaker_references[]`` (data URIs or
uploaded files) as on ``/``; the route sets ``task``; ``timestamp_granularities[]=word`` asks for
word timestamps; ``response_format``, ``stream`` and ``model`` choose the answer.
``chunking_strategy`` is checked and has no effect (the pipeline windows the audio its own way);
``include[]`` (log-probabilities, which the pipeline does not keep) is accepted and ignored;
``languages[]`` with one entry is ``language``, with several the language is detected. Any other
field is one of our own parameters (``num_speakers``, ``min_speakers``, ...), read by its declared
type as query-string values are; unknown names are refused. Every refusal is an HttpError 400
naming the field and what it may be.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from pydantic import TypeAdapter, ValidationError

from speaker_asr.errors import RequestError
from speaker_asr.formats.openai_shapes import OPENAI_FORMATS, TIMESTAMP_GRANULARITIES
from speaker_asr.live.protocol import MAX_VAD_MS, ServerVad
from speaker_asr.serving.negotiation import HttpError, Upload, split_form
from speaker_asr.serving.request_path import bad_request
from speaker_asr.text_parameters import list_key, parameters_from_text

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
