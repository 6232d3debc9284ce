"""The server events, each built as the official SDK reads it into its own type."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, model_serializer

from speaker_asr.live.protocol.errors import ErrorEvent, ProtocolError, ServerEventBase
from speaker_asr.live.protocol.session import TranscriptionSession, without_none
from speaker_asr.live.protocol.vocabulary import SERVER_ERROR


# -- server events -------------------------------------------------------------------------------

class SessionCreated(ServerEventBase):
    """The first server event, with the session's defaults."""

    type: Literal["session.created"] = "session.created"
    session: TranscriptionSession


class SessionUpdated(ServerEventBase):
    """The answer to a ``session.update``: the full, effective configuration."""

    type: Literal["session.updated"] = "session.updated"
    session: TranscriptionSession


class SpeechStarted(ServerEventBase):
    """Server VAD heard speech begin. ``audio_start_ms``: on the session's audio clock (all
    audio appended since the session began), including ``prefix_padding_ms``; ``item_id``: the
    item the utterance will be committed as."""

    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str


class SpeechStopped(ServerEventBase):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str


class Committed(ServerEventBase):
    """The buffer became an item (by the VAD or the client's commit); ``previous_item_id``: the
    item committed before it (null for the first), always written."""

    type: Literal["input_audio_buffer.committed"] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: Optional[str] = None


class Cleared(ServerEventBase):
    type: Literal["input_audio_buffer.cleared"] = "input_audio_buffer.cleared"


class _ItemTranscriptionEvent(ServerEventBase):
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
        return without_none(handler(self), "words")


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


class ItemAdded(ServerEventBase):
    """Right after ``input_audio_buffer.committed``: the item, its transcript null."""

    type: Literal["conversation.item.added"] = "conversation.item.added"
    previous_item_id: Optional[str] = None
    item: UserAudioItem


class ItemDone(ServerEventBase):
    """After the item's last transcription event: the item with its transcript (null when the
    transcription failed)."""

    type: Literal["conversation.item.done"] = "conversation.item.done"
    previous_item_id: Optional[str] = None
    item: UserAudioItem


class TranscriptDone(ServerEventBase):
    """The final pass (``final_transcript``), sent once before the close: what
    :func:`speaker_asr.formats.openai_shapes.done_event` writes from the file pipeline's
    result -- ``text``, ``segments`` (diarized_json's: ``id``, ``start``, ``end`` on the session's
    audio clock, ``text``, ``speaker``), ``warnings`` and ``known_speakers`` when there are any --
    with the ``event_id`` every server event has."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str


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

