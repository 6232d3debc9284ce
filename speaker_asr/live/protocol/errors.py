"""The live protocol's errors in OpenAI's words: :class:`ProtocolError` (an ``error`` event's
fields) and a failed validation said as OpenAI's server says it (:func:`protocol_error`)."""

from __future__ import annotations

import difflib
import typing
import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from speaker_asr.errors import RequestError
from speaker_asr.live.protocol.vocabulary import INVALID_REQUEST, NOT_AVAILABLE, new_id


class ProtocolError(Exception):
    """A client event this server cannot take: OpenAI's error object's fields. ``event_id`` is
    the client's event's id (None when it gave none). :meth:`event` is what to send back."""

    def __init__(self, message: str, param: Optional[str] = None, code: Optional[str] = "invalid_value",
                 event_id: Optional[str] = None, type: str = INVALID_REQUEST):
        super().__init__(message)
        self.message, self.param, self.code, self.event_id, self.type = message, param, code, event_id, type

    @classmethod
    def from_request_error(cls, error: RequestError, event_id: Optional[str] = None) -> "ProtocolError":
        """The client's mistake found past parsing (a bad audio frame:
        :class:`speaker_asr.live.audio_format.AudioFormatError`) as an error event's fields."""
        return cls(str(error), param=error.param, code=error.code or "invalid_value", event_id=event_id)

    def event(self) -> "ErrorEvent":
        return ErrorEvent(error=RealtimeError(type=self.type, code=self.code, message=self.message,
                                              param=self.param, event_id=self.event_id))


class InvalidField(ValueError):
    """A validator's error about a field below the one it validates (``param`` relative to it),
    so the error event names the exact field."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


# -- validation errors in OpenAI's words ----------------------------------------------------------

_TYPE_WORDS = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
               "bool_type": "a boolean", "list_type": "an array", "dict_type": "an object",
               "model_type": "an object", "model_attributes_type": "an object", "none_required": "null"}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    return "an object"


def _model_in(annotation: Any) -> Optional[type[BaseModel]]:
    """The model class inside an annotation (``Optional[X]``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _walk(root: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel]]:
    """A pydantic error location -> (the dotted parameter path, the model holding its last
    name). List indices are written ``[i]``; union members' tags (``'list[float]'``), which
    come below a field that holds no model, are dropped."""
    path, model, parent = "", root, root
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif model is not None:
            path += ("." if path else "") + str(part)
            parent = model
            field = model.model_fields.get(part)
            model = _model_in(field.annotation) if field is not None else None
    return path, parent


def protocol_error(exc: ValidationError, root: type[BaseModel], prefix: tuple,
                    event_id: Optional[str]) -> ProtocolError:
    """The first problem of a failed validation, as OpenAI's server words it."""
    err = exc.errors(include_url=False)[0]
    loc, kind = tuple(err.get("loc", ())), err.get("type", "")
    param, where = _walk(root, loc)
    param = ".".join(p for p in (*prefix, param) if p)
    value = err.get("input")
    if kind == "missing":
        return ProtocolError(f"Missing required parameter: '{param}'.", param, "missing_required_parameter",
                             event_id)
    if kind == "extra_forbidden":
        if param in NOT_AVAILABLE:
            return ProtocolError(f"'{param}' is not available on this server: {NOT_AVAILABLE[param]}.",
                                 param, "unknown_parameter", event_id)
        known = list(where.model_fields)
        name = str(loc[-1])
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return ProtocolError(f"Unknown parameter: '{param}'.{hint} Allowed here: {', '.join(known)}.",
                             param, "unknown_parameter", event_id)
    if kind in ("value_error", "assertion_error"):
        cause = (err.get("ctx") or {}).get("error")
        sub = getattr(cause, "param", None)
        if sub:
            param = f"{param}.{sub}" if param else sub
        return ProtocolError(str(cause) if cause is not None else err.get("msg", ""), param or None,
                             "invalid_value", event_id)
    if kind == "literal_error":
        expected = (err.get("ctx") or {}).get("expected", "")
        return ProtocolError(f"Invalid value: {value!r}. Supported values are: {expected}.", param,
                             "invalid_value", event_id)
    if kind in _TYPE_WORDS:
        # a union reports once per member, at the same place: "a string or an array"
        expected: list[str] = []
        for other in exc.errors(include_url=False):
            if other.get("type") in _TYPE_WORDS and _walk(root, tuple(other.get("loc", ())))[0] == \
                    _walk(root, loc)[0] and _TYPE_WORDS[other["type"]] not in expected:
                expected.append(_TYPE_WORDS[other["type"]])
        return ProtocolError(f"Invalid type for '{param}': expected {' or '.join(expected)}, but got "
                             f"{json_type(value)}.", param, "invalid_type", event_id)
    msg = err.get("msg", "")
    return ProtocolError(f"Invalid value for '{param}': {value!r} ({msg[:1].lower() + msg[1:]}).", param,
                         "invalid_value", event_id)


# -- the error event ----------------------------------------------------------------------------

class ServerEventBase(BaseModel):
    """Every server event has a fresh ``event_id``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    event_id: str = Field(default_factory=lambda: new_id("event"))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_text(self) -> str:
        """The WebSocket message."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))


class RealtimeError(BaseModel):
    """OpenAI's error object: ``event_id`` is the client event's that caused it, if any."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str
    code: Optional[str] = None
    message: str
    param: Optional[str] = None
    event_id: Optional[str] = None


class ErrorEvent(ServerEventBase):
    type: Literal["error"] = "error"
    error: RealtimeError
