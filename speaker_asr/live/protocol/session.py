"""The session's configuration (:class:`TranscriptionSession`: what ``session.created`` and
``session.updated`` show) and ``session.update``'s own shapes, in which every field is optional and
presence is what changes."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_serializer, model_validator)

from speaker_asr.config import (MAX_PROMPT_CHARS, InferenceConfig, ModelCapabilities,
                                describe_validation_error)
from speaker_asr.live.protocol.errors import ProtocolError, InvalidField, protocol_error
from speaker_asr.live.protocol.vocabulary import (ALLOWED_FORMATS, AUDIO_FORMAT_TYPES, G711_RATE,
                                                  MAX_VAD_MS, NOT_AVAILABLE, PCM_RATE, PCM_RATES,
                                                  new_id)
from speaker_asr.speaker_names import MAX_SPEAKERS


def without_none(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A field written only when it has a value (pydantic >= 2.7: no ``exclude_if``)."""
    if data.get(name, 0) is None:
        del data[name]
    return data


class StrictModel(BaseModel):
    # strict: 1 is not true, "2" is not 2; unknown names are errors, as OpenAI's server answers
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# -- the session's configuration ---------------------------------------------------------------

class AudioFormat(StrictModel):
    """``audio.input.format``: ``{"type": "audio/pcm", "rate": 24000}`` (or 16000, our
    extension), ``{"type": "audio/pcmu"}``, ``{"type": "audio/pcma"}``. ``rate`` is written
    only for audio/pcm (the SDK's G.711 formats have none)."""

    type: str = "audio/pcm"
    rate: Optional[int] = None

    @model_serializer(mode="wrap")
    def _written(self, handler) -> dict[str, Any]:
        return without_none(handler(self), "rate")

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
                raise InvalidField(f"Invalid value: {self.rate}. Supported values are: 24000 (the "
                               "protocol's) and 16000 (this server's extension).", "rate")
        else:
            if self.rate not in (None, G711_RATE):
                raise InvalidField(f"Invalid value: {self.rate}. {self.type} is G.711 at {G711_RATE} Hz: "
                               "leave rate out.", "rate")
            object.__setattr__(self, "rate", None)
        return self

    @property
    def sample_rate(self) -> int:
        """Samples per second of the client's audio."""
        return self.rate if self.type == "audio/pcm" else G711_RATE


class Transcription(StrictModel):
    """``audio.input.transcription``: ``model`` (any name is accepted: the server runs the
    Whisper it loaded and says which in its session), ``language`` (None: detect), ``prompt``."""

    model: Optional[str] = None
    language: Optional[str] = None
    prompt: Optional[str] = Field(None, max_length=MAX_PROMPT_CHARS)

    @field_validator("model", "language", "prompt")
    @classmethod
    def _blank_is_none(cls, v: Optional[str]) -> Optional[str]:
        return v.strip() or None if v is not None else None


class ServerVad(StrictModel):
    """``audio.input.turn_detection`` when on: silero-vad on the server. Defaults are OpenAI's
    documented ones."""

    type: Literal["server_vad"] = "server_vad"
    threshold: float = Field(0.5, ge=0.0, le=1.0)
    prefix_padding_ms: int = Field(300, ge=0, le=MAX_VAD_MS)
    silence_duration_ms: int = Field(500, ge=0, le=MAX_VAD_MS)


class SpeakerOptions(StrictModel):
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
                raise InvalidField(describe_validation_error(exc), "known_speaker_names") from None
            object.__setattr__(self, "known_speaker_names", list(checked.known_speaker_names))
        if self.max_speakers is not None and self.max_speakers < len(self.known_speaker_names):
            raise InvalidField(f"max_speakers ({self.max_speakers}) counts the known speakers too: give at "
                           f"least {len(self.known_speaker_names)} for the "
                           f"{len(self.known_speaker_names)} known_speaker_names", "max_speakers")
        return self


class AudioInput(StrictModel):
    format: AudioFormat = Field(default_factory=AudioFormat)
    transcription: Transcription = Field(default_factory=Transcription)
    turn_detection: Optional[ServerVad] = Field(default_factory=ServerVad)
    noise_reduction: None = None  # accepted in updates, never applied


class Audio(StrictModel):
    input: AudioInput = Field(default_factory=AudioInput)


class TranscriptionSession(StrictModel):
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
            raise protocol_error(exc, TranscriptionSession, ("session",), event_id) from None


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

class ServerVadUpdate(StrictModel):
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
                raise InvalidField(f"Invalid value: null. Give a number, or leave {name} out to keep it.", name)
        return self


class NoiseReductionUpdate(StrictModel):
    type: Optional[Literal["near_field", "far_field"]] = None
    strength: Optional[float] = None


class AudioInputUpdate(StrictModel):
    format: Optional[AudioFormat] = None
    transcription: Optional[Transcription] = None
    turn_detection: Optional[ServerVadUpdate] = None
    noise_reduction: Optional[NoiseReductionUpdate] = Field(None, exclude=True)  # not applied

    @model_validator(mode="after")
    def _no_nulls(self) -> "AudioInputUpdate":
        if "transcription" in self.model_fields_set and self.transcription is None:
            raise InvalidField("Invalid value: null. This server always transcribes: give an object "
                           "({\"model\", \"language\", \"prompt\"}) or leave transcription out.",
                           "transcription")
        if "format" in self.model_fields_set and self.format is None:
            raise InvalidField(f"Invalid value: null. Give a format: {ALLOWED_FORMATS}.", "format")
        return self


class AudioUpdate(StrictModel):
    input: Optional[AudioInputUpdate] = None


class SpeakerOptionsUpdate(StrictModel):
    speaker_labels: Optional[bool] = None
    max_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    speaker_match_threshold: Optional[float] = Field(None, ge=-1.0, le=1.0)
    known_speaker_names: Optional[list[str]] = None
    known_speaker_references: Optional[list[Union[str, list[float]]]] = None
    return_word_timestamps: Optional[bool] = None
    final_transcript: Optional[bool] = None


class SessionConfigUpdate(StrictModel):
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


