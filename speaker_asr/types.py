"""The records that travel from the ASR to the writers, in one place.

* :class:`Word` -- a word (or any stretch of transcript) with its times and, once attributed, its
  speaker. Times may be missing (``None``) as Whisper sometimes leaves them.
* :class:`Segment` -- one of Whisper's segments (a "chunk"): text and times; after attribution
  one speaker's part of it, with its words.
* :class:`Turn` -- one speaker turn from the diarization.
* :class:`Transcript` -- what the ASR returns for one request.
* :class:`Response`, :class:`ResponseChunk`, :class:`ResponseWord`, :class:`SpeakerTurn` -- the
  JSON response (``response_format=json``) every writer in :mod:`speaker_asr.formats` reads.

Pure Python: no torch, numpy or pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, TypedDict

try:  # Python 3.11+
    from typing import NotRequired
except ImportError:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired


@dataclass
class Word:
    """A stretch of transcript with times in seconds and, after attribution, a speaker."""

    text: str
    start: Optional[float]
    end: Optional[float]
    speaker: Optional[str] = None


@dataclass
class Segment:
    """A stretch of transcript made of words: one of Whisper's segments as the ASR returns it
    (text and times, either time may be missing), or after attribution one speaker's words inside
    one of those segments (with ``speaker`` and ``words``)."""

    text: str
    start: Optional[float]
    end: Optional[float]
    speaker: Optional[str] = None
    words: list[Word] = field(default_factory=list)


@dataclass(frozen=True)
class Turn:
    """One speaker turn from the diarization."""

    start: float
    end: float
    speaker: str


@dataclass
class Transcript:
    """The ASR's result for one request."""

    text: str
    chunks: list[Segment]  # Whisper's segments
    language: Optional[str]
    # word timestamps from the alignment heads (cross-attention DTW); None when not computed
    words: Optional[list[Word]] = None
    assisted: bool = False  # whether the assistant model drafted the tokens
    # text removed by the hallucination filter, one entry per removed run
    dropped: list[str] = field(default_factory=list)


class ResponseWord(TypedDict):
    word: str
    start: float
    end: float
    speaker: NotRequired[str]


class ResponseChunk(TypedDict):
    text: str
    timestamp: list[float]  # [start, end]
    speaker: NotRequired[Optional[str]]
    words: NotRequired[list[ResponseWord]]


class SpeakerTurn(TypedDict):
    speaker: Optional[str]
    text: str
    timestamp: list[float]


class KnownSpeaker(TypedDict):
    """One ``known_speaker_names`` entry: the label it got (the name; None when no found voice
    matched its clip) and the cosine similarity behind that (its best one when unmatched)."""

    name: str
    speaker: Optional[str]
    similarity: Optional[float]
    embedding: NotRequired[Optional[list[float]]]  # with return_speaker_embeddings


class Response(TypedDict):
    """The handler's JSON response (``response_format=json``)."""

    text: str
    chunks: list[ResponseChunk]
    speakers: list[SpeakerTurn]
    language: Optional[str]
    duration: float
    alignment: str  # "word" or "segment"
    warnings: NotRequired[list[str]]
    known_speakers: NotRequired[list[KnownSpeaker]]
    # with return_speaker_embeddings: each found speaker's voice embedding, by its label
    speaker_embeddings: NotRequired[dict[str, Optional[list[float]]]]
