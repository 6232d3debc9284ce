"""The client events, and :func:`parse_client_event`: one WebSocket message to its event, or a
:class:`~speaker_asr.live.protocol.errors.ProtocolError` saying what is wrong and what is allowed."""

from __future__ import annotations

import difflib
import json
import typing
from typing import Any, Literal, Mapping, Optional, Union

from pydantic import ValidationError

from speaker_asr.live.protocol.errors import ProtocolError, json_type, protocol_error
from speaker_asr.live.protocol.session import SessionConfigUpdate, StrictModel
from speaker_asr.live.protocol.vocabulary import (BETA_EVENT_TYPES, CLIENT_EVENT_TYPES,
                                                  CONVERSATION_EVENT_TYPES, FINISH)


# -- client events -----------------------------------------------------------------------------

class _ClientEvent(StrictModel):
    event_id: Optional[str] = None


class SessionUpdate(_ClientEvent):
    type: Literal["session.update"]
    session: SessionConfigUpdate


class InputAudioBufferAppend(_ClientEvent):
    """``audio``: base64 of the bytes in the session's format (decoded by
    :mod:`speaker_asr.live.audio_format`, which says what is wrong with a bad frame)."""

    type: Literal["input_audio_buffer.append"]
    audio: str


class InputAudioBufferCommit(_ClientEvent):
    type: Literal["input_audio_buffer.commit"]


class InputAudioBufferClear(_ClientEvent):
    type: Literal["input_audio_buffer.clear"]


class SessionFinish(_ClientEvent):
    """Ours: the client is done. The buffer is committed (an open utterance too), every item
    finished, then with ``final_transcript`` the final pass is sent, and the server closes the
    socket (1000). Nothing the client sends after it is taken. The SDK's client sends it as
    it is: ``connection.send({"type": "speaker_asr.session.finish"})``."""

    type: Literal["speaker_asr.session.finish"]


ClientEvent = Union[SessionUpdate, InputAudioBufferAppend, InputAudioBufferCommit, InputAudioBufferClear,
                    SessionFinish]
_CLIENT_MODELS: dict[str, type[_ClientEvent]] = {
    "session.update": SessionUpdate, "input_audio_buffer.append": InputAudioBufferAppend,
    "input_audio_buffer.commit": InputAudioBufferCommit, "input_audio_buffer.clear": InputAudioBufferClear,
    FINISH: SessionFinish}


def _listed(values: typing.Sequence[str]) -> str:
    quoted = [f"'{v}'" for v in values]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 2 else " and ".join(quoted)


def parse_client_event(data: Union[str, bytes, Mapping[str, Any]]) -> ClientEvent:
    """One WebSocket message (JSON text) -> its event. Raises :class:`ProtocolError` saying what
    is wrong and what is allowed: not JSON, no ``type``, an unknown ``type`` (the known ones are
    listed), or a field that breaks the event's shape (named by its dotted path)."""
    if isinstance(data, (bytes, bytearray)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("The event is not UTF-8 text: send each event as a JSON object in a "
                                "text message.", code="invalid_json") from None
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(f"The event is not valid JSON ({exc}): send each event as a JSON "
                                "object with a 'type'.", code="invalid_json") from None
    if not isinstance(data, Mapping):
        raise ProtocolError(f"Invalid type for the event: expected a JSON object with a 'type', but "
                            f"got {json_type(data)}.", code="invalid_type")
    event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    kind = data.get("type")
    if kind is None:
        raise ProtocolError(f"Missing required parameter: 'type'. Supported values are: "
                            f"{_listed(CLIENT_EVENT_TYPES)}.", param="type",
                            code="missing_required_parameter", event_id=event_id)
    if not isinstance(kind, str):
        raise ProtocolError(f"Invalid type for 'type': expected a string, but got {json_type(kind)}.",
                            param="type", code="invalid_type", event_id=event_id)
    model = _CLIENT_MODELS.get(kind)
    if model is None:
        if kind in BETA_EVENT_TYPES:
            why = f" It belongs to the beta protocol; use {BETA_EVENT_TYPES[kind]}."
        elif kind in CONVERSATION_EVENT_TYPES:
            why = " A transcription session has no conversation or responses."
        else:
            close = difflib.get_close_matches(kind, CLIENT_EVENT_TYPES, n=1)
            why = f" Did you mean '{close[0]}'?" if close else ""
        raise ProtocolError(f"Invalid value: '{kind}'. Supported values are: "
                            f"{_listed(CLIENT_EVENT_TYPES)}.{why}", param="type", event_id=event_id)
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise protocol_error(exc, model, (), event_id) from None


