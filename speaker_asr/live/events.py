"""The events of OpenAI's Realtime API (GA) for a transcription session, as our live route speaks
them: the client events parsed (a bad one answered by an ``error`` event that says what is wrong
and what is allowed), the server events built, and the session's configuration.

Field names and shapes are the official ``openai`` SDK's (``openai.types.realtime``, checked
against openai 3.57: ``RealtimeTranscriptionSessionCreateRequest``, ``SessionUpdateEvent``, the
``InputAudioBuffer*``, ``ConversationItemAdded``/``Done`` and
``ConversationItemInputAudioTranscription*`` events, ``RealtimeErrorEvent``; ``transcript.text.done``
is not a realtime event: its shape is ``TranscriptionTextDoneEvent``'s, which the SDK's realtime
client hands over with its ``type`` and fields as they came) so that the SDK's own client reads
every server event into its types;
tests/live/test_live_events.py checks each one with the SDK's pydantic models. The wording of errors
follows what OpenAI's server answers (``Invalid value: 'x'. Supported values are: ...``,
``param`` as a dotted path such as ``session.audio.input.format.type``, the client's
``event_id`` echoed in ``error.event_id``).

Client events (:func:`parse_client_event`): ``session.update``, ``input_audio_buffer.append``,
``input_audio_buffer.commit``, ``input_audio_buffer.clear``, and ours,
``speaker_asr.session.finish`` (:class:`SessionFinish`). A transcription session makes no
responses, so the conversation events (``response.create``, ...) are refused by name, and the
beta protocol's ``transcription_session.update`` with a pointer to its GA replacement.

The session (:class:`TranscriptionSession`) is what ``session.created`` and ``session.updated``
show: the full, effective configuration. ``session.update`` changes only the fields it names
(:meth:`TranscriptionSession.apply`), nested objects field by field as OpenAI does (a
``turn_detection`` with only ``threshold`` keeps the other VAD settings); an audio ``format`` is
replaced whole (its ``rate`` belongs to its ``type``).

What this server does differently, each documented where it is decided:

* ``audio/pcm`` also at 16000 Hz (:data:`PCM_RATES`): Whisper's own rate, so a client that has
  16 kHz audio sends it without a resampling step on either side. OpenAI takes only 24000.
* ``session.speaker_asr`` (:class:`SpeakerOptions`): our options, under a key named after this
  server. OpenAI keeps adding fields to the session (``include``, ``transcription.delay``,
  ``keywords``); a generic name such as ``diarization`` might one day be one of theirs with
  another shape, a vendor-named key cannot. The SDK keeps unknown keys on its objects and sends
  a dict given to ``session.update`` as it is, so SDK clients can use it.
* ``turn_detection`` is ``server_vad`` or null (the client commits): no ``semantic_vad``.
  ``create_response``, ``interrupt_response`` and ``idle_timeout_ms`` are accepted and ignored
  (they steer model responses, which a transcription session never makes).
* ``noise_reduction`` is accepted and not applied: the effective session shows it null.
* ``include`` (log-probabilities), ``transcription.delay``, ``keywords`` and ``languages`` are
  refused by name (not available here) rather than ignored, so a client is never misled.
* ``audio.input.transcription`` cannot be null: this server always transcribes.
* ``speaker_asr.session.finish`` (a client event of ours, named after this server for the reason
  ``speaker_asr`` is) ends the session: what the buffer holds is committed, every item is
  finished, then, with ``session.speaker_asr.final_transcript``, the file pipeline's transcript
  of the session's audio goes out as one ``transcript.text.done`` event (:class:`TranscriptDone`:
  the shape of the last event of ``/v1/audio/transcriptions``' ``stream=true``, with
  ``segments``), and the server closes the socket (1000).
* A committed item is announced as OpenAI announces one (the SDK's ``ConversationItemAdded``:
  "when the input audio buffer is committed ... the item will be a user message containing the
  audio"): ``conversation.item.added`` right after ``input_audio_buffer.committed``, its
  ``input_audio`` content's ``transcript`` null; ``conversation.item.done`` after the item's last
  transcription event (completed or failed, and its segments), with the transcript (null when it
  failed) -- a client that keeps the items (the SDK's docs: the item "will include the full
  content ... except for audio data") holds the transcript.
* The ``conversation.item.input_audio_transcription.segment`` events carry our speaker labels
  (SPEAKER_00 ..., or a known speaker's name); their ``start``/``end`` are seconds on the
  session's audio clock (the clock of ``audio_start_ms``), so a client can place them without
  holding the item's start; with ``return_word_timestamps`` they also carry ``words``.

Pure: no torch. Reference clips are kept as given (base64 or embeddings); decoding and embedding
them, and checking ``language`` against the loaded Whisper, is the live route's work.
"""

from __future__ import annotations

import difflib
import json
import secrets
import typing
from typing import Any, Literal, Mapping, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_serializer, model_validator)

from speaker_asr.config import (MAX_PROMPT_CHARS, InferenceConfig, ModelCapabilities,
                                describe_validation_error)
from speaker_asr.errors import RequestError
from speaker_asr.speaker_names import MAX_SPEAKERS

# -- vocabulary ------------------------------------------------------------------------------

PCM_RATE = 24_000  # the protocol's audio/pcm rate
PCM_RATES = (PCM_RATE, 16_000)  # 16000: this server's extension (Whisper's rate)
G711_RATE = 8_000  # audio/pcmu and audio/pcma
AUDIO_FORMAT_TYPES = ("audio/pcm", "audio/pcmu", "audio/pcma")
ALLOWED_FORMATS = ("audio/pcm (16-bit little-endian mono PCM; rate 24000, or 16000 on this server), "
                   "audio/pcmu (G.711 mu-law, 8000 Hz) or audio/pcma (G.711 A-law, 8000 Hz)")
# OpenAI's limit on one input_audio_buffer.append (the decoded audio)
MAX_APPEND_BYTES = 15 * 1024 * 1024
# bounds on the VAD's times: sanity, not a model limit (OpenAI documents none)
MAX_VAD_MS = 10_000

FINISH = "speaker_asr.session.finish"  # our client event: end the session (see SessionFinish)
CLIENT_EVENT_TYPES = ("session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
                      "input_audio_buffer.clear", FINISH)
# events of a conversation session (a model that answers): none apply to transcription
CONVERSATION_EVENT_TYPES = ("conversation.item.create", "conversation.item.delete",
                            "conversation.item.retrieve", "conversation.item.truncate",
                            "response.create", "response.cancel", "output_audio_buffer.clear")
# the beta protocol's names, with what replaced them in GA
BETA_EVENT_TYPES = {
    "transcription_session.update": "session.update with session.type 'transcription' (the GA "
                                    "protocol; this server does not speak the beta one)",
}

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
# parameters of OpenAI's protocol that this server refuses by name, with why
NOT_AVAILABLE = {
    "session.include": "log-probabilities are not sent by this server; leave include out or empty",
    "session.audio.input.transcription.delay": "it tunes OpenAI's gpt-realtime-whisper; here the "
                                               "deltas come by local agreement of successive decodes",
    "session.audio.input.transcription.keywords": "use prompt for vocabulary and spellings",
    "session.audio.input.transcription.languages": "give one language, or none to detect it",
    "session.audio.output": "a transcription session makes no audio",
}


def new_id(prefix: str) -> str:
    """A fresh id in OpenAI's style: ``event_...``, ``item_...``, ``sess_...``."""
    return f"{prefix}_{secrets.token_hex(12)}"


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


class _Invalid(ValueError):
    """A validator's error about a field below the one it validates (``param`` relative to it),
    so the error event names the exact field."""

    def __init__(self, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.param = param


def _without_none(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A field written only when it has a value (pydantic >= 2.7: no ``exclude_if``)."""
    if data.get(name, 0) is None:
        del data[name]
    return data


class _Model(BaseModel):
    # strict: 1 is not true, "2" is not 2; unknown names are errors, as OpenAI's server answers
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# -- the session's configuration ---------------------------------------------------------------

class AudioFormat(_Model):
    """``audio.input.format``: ``{"type": "audio/pcm", "rate": 24000}`` (or 16000, our
    extension), ``{"type": "audio/pcmu"}``, ``{"type": "audio/pcma"}``. ``rate`` is written
    only for audio/pcm (the SDK's G.711 formats have none)."""

    type: str = "audio/pcm"
    rate: Optional[int] = None

    @model_serializer(mode="wrap")
    def _written(self, handler) -> dict[str, Any]:
        return _without_none(handler(self), "rate")

    @model_validator(mode="before")
    @classmethod
    def _object(cls, data: Any) -> Any:
        if isinstance(data, str):  # the beta protocol's input_audio_format: "pcm16"
            raise ValueError(f"Invalid type for the format: {data!r}. In the GA protocol it is an "
                             f"object such as {{\"type\": \"audio/pcm\", \"rate\": 24000}}; supported "
                             f"types: {ALLOWED_FORMATS}.")
        return data

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v not in AUDIO_FORMAT_TYPES:
            raise ValueError(f"Invalid value: {v!r}. Supported values are: {ALLOWED_FORMATS}.")
        return v

    @model_validator(mode="after")
    def _rate(self) -> "AudioFormat":
        if self.type == "audio/pcm":
            if self.rate is None:
                object.__setattr__(self, "rate", PCM_RATE)
            elif self.rate not in PCM_RATES:
                raise _Invalid(f"Invalid value: {self.rate}. Supported values are: 24000 (the "
                               "protocol's) and 16000 (this server's extension).", "rate")
        else:
            if self.rate not in (None, G711_RATE):
                raise _Invalid(f"Invalid value: {self.rate}. {self.type} is G.711 at {G711_RATE} Hz: "
                               "leave rate out.", "rate")
            object.__setattr__(self, "rate", None)
        return self

    @property
    def sample_rate(self) -> int:
        """Samples per second of the client's audio."""
        return self.rate if self.type == "audio/pcm" else G711_RATE


class Transcription(_Model):
    """``audio.input.transcription``: ``model`` (any name is accepted: the server runs the
    Whisper it loaded and says which in its session), ``language`` (None: detect), ``prompt``."""

    model: Optional[str] = None
    language: Optional[str] = None
    prompt: Optional[str] = Field(None, max_length=MAX_PROMPT_CHARS)

    @field_validator("model", "language", "prompt")
    @classmethod
    def _blank_is_none(cls, v: Optional[str]) -> Optional[str]:
        return v.strip() or None if v is not None else None


class ServerVad(_Model):
    """``audio.input.turn_detection`` when on: silero-vad on the server. Defaults are OpenAI's
    documented ones."""

    type: Literal["server_vad"] = "server_vad"
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0, le=MAX_VAD_MS)
    silence_duration_ms: int = Field(500, ge=0, le=MAX_VAD_MS)


class SpeakerOptions(_Model):
    """``session.speaker_asr``: this server's own options (see the module's docstring for the
    key's name).

    * ``speaker_labels``: false sends no segment events (and embeds no voices).
    * ``max_speakers``: the most speakers the session labels, known speakers included (their
      places are kept for them); once reached, a new voice takes the nearest label. A live
      session cannot hold to a minimum (it does not know what is still to come), so there is no
      ``min_speakers``/``num_speakers``.
    * ``known_speaker_names`` + ``known_speaker_references``: as on ``/v1`` (the same checks):
      one clip (base64 audio or data URI, or a voice embedding returned by
      ``return_speaker_embeddings``) per name; a voice that matches a clip is labelled with the
      name. Given together, they replace the session's known speakers. The clips are never
      echoed in ``session.updated`` (size; the names say which are set).
    * ``speaker_match_threshold``: the voice similarity (cosine) at which an utterance joins a
      speaker already heard or a known one; None: the server's default.
    * ``return_word_timestamps``: segment events carry their ``words`` with times.
    * ``final_transcript``: keep the session's audio (from the update that turns it on; turning
      it off drops what was kept) for a final offline pass when the client ends the session with
      ``speaker_asr.session.finish``: the file pipeline's transcript with its diarization, sent
      as one ``transcript.text.done`` event. At most ``LIVE_MAX_SESSION_S`` (and the server's
      ``MAX_AUDIO_SECONDS``) of audio are kept, as 16-bit samples: 115 MB an hour.
    """

    speaker_labels: bool = True
    max_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    speaker_match_threshold: Optional[float] = Field(None, ge=-1.0, le=1.0)
    known_speaker_names: list[str] = Field(default_factory=list)
    known_speaker_references: list[Union[str, list[float]]] = Field(default_factory=list, exclude=True)
    return_word_timestamps: bool = False
    final_transcript: bool = False

    @model_validator(mode="after")
    def _known(self) -> "SpeakerOptions":
        names, refs = self.known_speaker_names, self.known_speaker_references
        if names or refs:
            try:  # the /v1 rules, from their one definition
                checked = InferenceConfig.model_validate(
                    {"known_speaker_names": names, "known_speaker_references": refs},
                    context={"capabilities": ModelCapabilities()})
            except ValidationError as exc:
                raise _Invalid(describe_validation_error(exc), "known_speaker_names") from None
            object.__setattr__(self, "known_speaker_names", list(checked.known_speaker_names))
        if self.max_speakers is not None and self.max_speakers < len(self.known_speaker_names):
            raise _Invalid(f"max_speakers ({self.max_speakers}) counts the known speakers too: give at "
                           f"least {len(self.known_speaker_names)} for the "
                           f"{len(self.known_speaker_names)} known_speaker_names", "max_speakers")
        return self


class AudioInput(_Model):
    format: AudioFormat = Field(default_factory=AudioFormat)
    transcription: Transcription = Field(default_factory=Transcription)
    turn_detection: Optional[ServerVad] = Field(default_factory=ServerVad)
    noise_reduction: None = None  # accepted in updates, never applied


class Audio(_Model):
    input: AudioInput = Field(default_factory=AudioInput)


class TranscriptionSession(_Model):
    """The session's full, effective configuration: what ``session.created`` and
    ``session.updated`` carry (the SDK reads it as its ``RealtimeTranscriptionSessionCreateRequest``,
    keeping ``id``, ``object`` and ``speaker_asr`` as extra fields)."""

    id: str = Field(default_factory=lambda: new_id("sess"))
    object: Literal["realtime.transcription_session"] = "realtime.transcription_session"
    type: Literal["transcription"] = "transcription"
    audio: Audio = Field(default_factory=Audio)
    include: Optional[list[str]] = None
    speaker_asr: SpeakerOptions = Field(default_factory=SpeakerOptions)

    @classmethod
    def new(cls, model: Optional[str] = None) -> "TranscriptionSession":
        """A session's defaults, naming the model the server runs."""
        return cls(audio=Audio(input=AudioInput(transcription=Transcription(model=model))))

    @property
    def format(self) -> AudioFormat:
        return self.audio.input.format

    @property
    def turn_detection(self) -> Optional[ServerVad]:
        return self.audio.input.turn_detection

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def apply(self, update: "SessionConfigUpdate", event_id: Optional[str] = None) -> "TranscriptionSession":
        """This session with ``update``'s fields changed (only those it names; nested objects
        field by field, a ``format`` whole). Raises :class:`ProtocolError` (naming the client's
        ``event_id``) when the result breaks a rule across fields."""
        merged = self.model_dump()
        merged["speaker_asr"]["known_speaker_references"] = list(self.speaker_asr.known_speaker_references)
        _merge(merged, update)
        speakers = update.speaker_asr
        if speakers is not None:
            given = {"known_speaker_names", "known_speaker_references"} & speakers.model_fields_set
            if len(given) == 1:
                (one,) = given
                other = ({"known_speaker_names", "known_speaker_references"} - given).pop()
                raise ProtocolError(f"{one} needs {other} in the same update: together they replace "
                                    "the session's known speakers (two empty lists remove them)",
                                    param=f"session.speaker_asr.{other}", code="missing_required_parameter",
                                    event_id=event_id)
        try:
            return TranscriptionSession.model_validate(merged)
        except ValidationError as exc:
            raise _protocol_error(exc, TranscriptionSession, ("session",), event_id) from None


def _merge(into: dict[str, Any], update: BaseModel) -> None:
    """``update``'s explicitly given fields written over ``into`` (a session's dump): nested
    objects field by field, except an audio format (replaced whole); fields marked ``exclude``
    (accepted, not applied) are skipped."""
    for name in update.model_fields_set:
        if type(update).model_fields[name].exclude:
            continue
        value = getattr(update, name)
        if not isinstance(value, BaseModel):
            into[name] = value
        elif name == "format":
            into[name] = value.model_dump()
        else:
            if not isinstance(into.get(name), dict):  # turn_detection was off: its defaults fill in
                into[name] = {}
            _merge(into[name], value)


# -- session.update's own shapes: every field optional, presence is what changes ---------------

class ServerVadUpdate(_Model):
    type: str
    threshold: Optional[float] = Field(None, ge=0.0, le=1.0)
    prefix_padding_ms: Optional[int] = Field(None, ge=0, le=MAX_VAD_MS)
    silence_duration_ms: Optional[int] = Field(None, ge=0, le=MAX_VAD_MS)
    # they steer model responses, which a transcription session never makes: accepted, ignored
    create_response: Optional[bool] = Field(None, exclude=True)
    interrupt_response: Optional[bool] = Field(None, exclude=True)
    idle_timeout_ms: Optional[int] = Field(None, exclude=True)

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v != "server_vad":
            raise ValueError(f"Invalid value: {v!r}. Supported values are: 'server_vad' (silero-vad on "
                             "the server); or set turn_detection to null and commit the buffer yourself.")
        return v

    @model_validator(mode="after")
    def _no_nulls(self) -> "ServerVadUpdate":
        for name in ("threshold", "prefix_padding_ms", "silence_duration_ms"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise _Invalid(f"Invalid value: null. Give a number, or leave {name} out to keep it.", name)
        return self


class NoiseReductionUpdate(_Model):
    type: Optional[Literal["near_field", "far_field"]] = None
    strength: Optional[float] = None


class AudioInputUpdate(_Model):
    format: Optional[AudioFormat] = None
    transcription: Optional[Transcription] = None
    turn_detection: Optional[ServerVadUpdate] = None
    noise_reduction: Optional[NoiseReductionUpdate] = Field(None, exclude=True)  # not applied

    @model_validator(mode="after")
    def _no_nulls(self) -> "AudioInputUpdate":
        if "transcription" in self.model_fields_set and self.transcription is None:
            raise _Invalid("Invalid value: null. This server always transcribes: give an object "
                           "({\"model\", \"language\", \"prompt\"}) or leave transcription out.",
                           "transcription")
        if "format" in self.model_fields_set and self.format is None:
            raise _Invalid(f"Invalid value: null. Give a format: {ALLOWED_FORMATS}.", "format")
        return self


class AudioUpdate(_Model):
    input: Optional[AudioInputUpdate] = None


class SpeakerOptionsUpdate(_Model):
    speaker_labels: Optional[bool] = None
    max_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    speaker_match_threshold: Optional[float] = Field(None, ge=-1.0, le=1.0)
    known_speaker_names: Optional[list[str]] = None
    known_speaker_references: Optional[list[Union[str, list[float]]]] = None
    return_word_timestamps: Optional[bool] = None
    final_transcript: Optional[bool] = None


class SessionConfigUpdate(_Model):
    """``session`` of a ``session.update``: the SDK's ``RealtimeTranscriptionSessionCreateRequest``
    (``type``, ``audio``, ``include``) and our ``speaker_asr``."""

    type: str
    audio: Optional[AudioUpdate] = None
    include: Optional[list[str]] = None
    speaker_asr: Optional[SpeakerOptionsUpdate] = None

    @field_validator("type")
    @classmethod
    def _type(cls, v: str) -> str:
        if v != "transcription":
            raise ValueError(f"Invalid value: {v!r}. Supported values are: 'transcription' (this "
                             "endpoint serves transcription sessions: /v1/realtime?intent=transcription).")
        return v

    @field_validator("include")
    @classmethod
    def _include(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        if v:
            raise ValueError(f"Invalid value: {v[0]!r}. {NOT_AVAILABLE['session.include'].capitalize()}.")
        return v


# -- client events -----------------------------------------------------------------------------

class _ClientEvent(_Model):
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
                            f"got {_json_type(data)}.", code="invalid_type")
    event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    kind = data.get("type")
    if kind is None:
        raise ProtocolError(f"Missing required parameter: 'type'. Supported values are: "
                            f"{_listed(CLIENT_EVENT_TYPES)}.", param="type",
                            code="missing_required_parameter", event_id=event_id)
    if not isinstance(kind, str):
        raise ProtocolError(f"Invalid type for 'type': expected a string, but got {_json_type(kind)}.",
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
        raise _protocol_error(exc, model, (), event_id) from None


# -- validation errors in OpenAI's words ----------------------------------------------------------

_TYPE_WORDS = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
               "bool_type": "a boolean", "list_type": "an array", "dict_type": "an object",
               "model_type": "an object", "model_attributes_type": "an object", "none_required": "null"}


def _json_type(value: Any) -> str:
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


def _protocol_error(exc: ValidationError, root: type[BaseModel], prefix: tuple,
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
                             f"{_json_type(value)}.", param, "invalid_type", event_id)
    msg = err.get("msg", "")
    return ProtocolError(f"Invalid value for '{param}': {value!r} ({msg[:1].lower() + msg[1:]}).", param,
                         "invalid_value", event_id)


# -- server events -------------------------------------------------------------------------------

class _ServerEvent(BaseModel):
    """Every server event has a fresh ``event_id``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    event_id: str = Field(default_factory=lambda: new_id("event"))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_text(self) -> str:
        """The WebSocket message."""
        return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))


class SessionCreated(_ServerEvent):
    """The first server event, with the session's defaults."""

    type: Literal["session.created"] = "session.created"
    session: TranscriptionSession


class SessionUpdated(_ServerEvent):
    """The answer to a ``session.update``: the full, effective configuration."""

    type: Literal["session.updated"] = "session.updated"
    session: TranscriptionSession


class SpeechStarted(_ServerEvent):
    """Server VAD heard speech begin. ``audio_start_ms``: on the session's audio clock (all
    audio appended since the session began), including ``prefix_padding_ms``; ``item_id``: the
    item the utterance will be committed as."""

    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str


class SpeechStopped(_ServerEvent):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str


class Committed(_ServerEvent):
    """The buffer became an item (by the VAD or the client's commit); ``previous_item_id``: the
    item committed before it (null for the first), always written."""

    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: Optional[str] = None


class Cleared(_ServerEvent):
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"


class _ItemTranscriptionEvent(_ServerEvent):
    """An event about one item's transcription (delta, completed, failed, segment): the item and
    its one content part."""

    item_id: str
    content_index: int = 0


class TranscriptionDelta(_ItemTranscriptionEvent):
    """Text of the item that two successive decodes agreed on (:mod:`.agreement`): sent once,
    never taken back."""

    type: Literal["conversation.item.input_audio_transcription.delta"] = \
        "conversation.item.input_audio_transcription.delta"
    delta: str


class DurationUsage(BaseModel):
    """The SDK's usage by audio duration (``usage`` is required on the completed event)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["duration"] = "duration"
    seconds: float


class TranscriptionCompleted(_ItemTranscriptionEvent):
    """The item's final transcript (its last decode, which may differ from the deltas: see
    :class:`speaker_asr.live.agreement.Finish`) and the seconds of audio it had."""

    type: Literal["conversation.item.input_audio_transcription.completed"] = \
        "conversation.item.input_audio_transcription.completed"
    transcript: str
    usage: DurationUsage


class FailureDetail(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Optional[str] = None
    code: Optional[str] = None
    message: Optional[str] = None
    param: Optional[str] = None


class TranscriptionFailed(_ItemTranscriptionEvent):
    """An item whose transcription failed (the server's error, said without internals)."""

    type: Literal["conversation.item.input_audio_transcription.failed"] = \
        "conversation.item.input_audio_transcription.failed"
    error: FailureDetail


class SegmentWord(BaseModel):
    """A word of a segment, named as in verbose_json's words."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    word: str
    start: float
    end: float


class TranscriptionSegment(_ItemTranscriptionEvent):
    """One speaker's stretch of an item: ``start``/``end`` in seconds on the session's audio
    clock, ``speaker`` a label (SPEAKER_00 ...) or a known speaker's name; ``words`` (our
    extension, only with ``return_word_timestamps``)."""

    type: Literal["conversation.item.input_audio_transcription.segment"] = \
        "conversation.item.input_audio_transcription.segment"
    id: str
    start: float
    end: float
    text: str
    speaker: str
    words: Optional[list[SegmentWord]] = None

    @model_serializer(mode="wrap")
    def _written(self, handler) -> dict[str, Any]:
        return _without_none(handler(self), "words")


class InputAudioContent(BaseModel):
    """The content part of a committed item: its audio (never echoed) and its transcript (null
    until the item is transcribed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["input_audio"] = "input_audio"
    transcript: Optional[str] = None


class UserAudioItem(BaseModel):
    """A committed item as the SDK's ``RealtimeConversationItemUserMessage``: a user message
    holding one ``input_audio`` part."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    object: Literal["realtime.item"] = "realtime.item"
    type: Literal["message"] = "message"
    status: Literal["completed"] = "completed"
    role: Literal["user"] = "user"
    content: list[InputAudioContent]

    @classmethod
    def of(cls, item_id: str, transcript: Optional[str] = None) -> "UserAudioItem":
        return cls(id=item_id, content=[InputAudioContent(transcript=transcript)])


class ItemAdded(_ServerEvent):
    """Right after ``input_audio_buffer.committed``: the item, its transcript null."""

    type: Literal["conversation.item.added"] = "conversation.item.added"
    previous_item_id: Optional[str] = None
    item: UserAudioItem


class ItemDone(_ServerEvent):
    """After the item's last transcription event: the item with its transcript (null when the
    transcription failed)."""

    type: Literal["conversation.item.done"] = "conversation.item.done"
    previous_item_id: Optional[str] = None
    item: UserAudioItem


class TranscriptDone(_ServerEvent):
    """The final pass (``final_transcript``), sent once before the close: what
    :func:`speaker_asr.formats.openai_shapes.done_event` writes from the file pipeline's
    result -- ``text``, ``segments`` (diarized_json's: ``id``, ``start``, ``end`` on the session's
    audio clock, ``text``, ``speaker``), ``warnings`` and ``known_speakers`` when there are any --
    with the ``event_id`` every server event has."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str


class RealtimeError(BaseModel):
    """OpenAI's error object: ``event_id`` is the client event's that caused it, if any."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str
    code: Optional[str] = None
    message: str
    param: Optional[str] = None
    event_id: Optional[str] = None


class ErrorEvent(_ServerEvent):
    type: Literal["error"] = "error"
    error: RealtimeError


ServerEvent = Union[SessionCreated, SessionUpdated, SpeechStarted, SpeechStopped, Committed, Cleared,
                    ItemAdded, ItemDone, TranscriptionDelta, TranscriptionCompleted, TranscriptionFailed,
                    TranscriptionSegment, TranscriptDone, ErrorEvent]


def commit_empty_error(buffered_ms: float, event_id: Optional[str] = None) -> ErrorEvent:
    """What OpenAI answers a commit of less than 100 ms of audio (the client's ``event_id``)."""
    return ProtocolError(f"Error committing input audio buffer: buffer too small. Expected at least "
                         f"100ms of audio, but buffer only has {buffered_ms:.2f}ms of audio.",
                         code="input_audio_buffer_commit_empty", event_id=event_id).event()


def server_error(message: str = "The server had an error while processing your request.",
                 event_id: Optional[str] = None) -> ErrorEvent:
    """Our fault, said without internals."""
    return ProtocolError(message, code=None, event_id=event_id, type=SERVER_ERROR).event()
