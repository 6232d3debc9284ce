"""The pieces of a transcript, from the ASR through the attribution to the writers.

* :class:`Word` -- a word (or any stretch of transcript) with its times and, once attributed, its
  speaker and the other speakers talking over it. Times may be missing (``None``) as Whisper
  sometimes leaves them.
* :class:`Segment` -- one of Whisper's segments (a "chunk"): text and times; after attribution
  one speaker's part of it, with its words.
* :class:`Turn` -- one speaker turn from the diarization.
* :class:`Diarization` -- what the diarization found for one request: its turns, its exclusive
  turns and, when asked for, each speaker's voice.
* :class:`Transcript` -- what the ASR returns for one request.
* :class:`AssistDecision` -- whether the assistant model drafted the tokens, and why
  (:data:`ASSIST_REASONS`).

The record every writer reads, made of these, is :class:`speaker_asr.result.Result`.

Pure Python: no torch, numpy or pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class Word:
    """A stretch of transcript with times in seconds and, after attribution, a speaker and the
    other speakers talking while it is said (``overlap``; most words: none); in a multichannel
    transcript, the channel it was heard on (0-based; None otherwise)."""

    text: str
    start: Optional[float]
    end: Optional[float]
    speaker: Optional[str] = None
    overlap: list[str] = field(default_factory=list)
    channel: Optional[int] = None


def word_key(text: str) -> str:
    """A word as two transcripts' words are compared for sameness: lowercase letters, digits and
    apostrophes only (" Hello," and "hello" are one word), for the hallucination filter's repeats
    and for a word heard on two channels."""
    return "".join(ch for ch in text.lower() if ch.isalnum() or ch == "'")


@dataclass
class Segment:
    """A stretch of transcript made of words: one of Whisper's segments as the ASR returns it
    (text and times, either time may be missing), or after attribution one speaker's words inside
    one of those segments (with ``speaker`` and ``words``); in a multichannel transcript, its
    channel."""

    text: str
    start: Optional[float]
    end: Optional[float]
    speaker: Optional[str] = None
    words: list[Word] = field(default_factory=list)
    channel: Optional[int] = None


@dataclass(frozen=True)
class Turn:
    """One speaker turn from the diarization."""

    start: float
    end: float
    speaker: str


@dataclass(frozen=True)
class Diarization:
    """What the diarization found: its ``turns`` (overlapping where people talk at once) and its
    own ``exclusive_turns`` (one speaker at a time: pyannote 4's, the dominant voice at each
    moment; None from pyannote 3.x, which makes none --
    :func:`speaker_asr.attribution.turns.speakers_alone` derives them there for what needs one
    speaker at a time); with known speakers or speaker embeddings, each found
    speaker's voice (``voices``: a unit vector as a list, None for a speaker without speech to
    embed). ``embedding_error``: why the voices could not be computed (the embedding model's
    exception), then ``voices`` is empty. ``error``: why the diarization failed (its exception),
    then nothing was found."""

    turns: list[Turn] = field(default_factory=list)
    exclusive_turns: Optional[list[Turn]] = None
    voices: dict[str, Optional[list[float]]] = field(default_factory=dict)
    embedding_error: Optional[str] = None
    error: Optional[str] = None


# why a request was or was not decoded with the assistant (speculative decoding): the response's
# ``assisted.reason`` and the label of /metrics' asr_decodes_total. Defined here only.
ASSIST_REQUESTED = "requested"  # assisted=true
ASSIST_NOT_REQUESTED = "not requested"  # assisted=false
ASSIST_NO_ASSISTANT = "no assistant model loaded"  # auto, and ASSISTANT_MODEL is not set
# auto: several windows are decoded faster batched without the assistant (it runs at batch 1)
ASSIST_LONG_AUDIO = "audio longer than one window"
ASSIST_SAMPLING = "sampling temperature"  # auto: the first temperature is above 0 (not greedy)
ASSIST_BATCH_SIZE = "batch_size above 1"  # auto: the request asked for batched windows
ASSIST_CHANNELS = "channels decoded in one batch"  # auto, multichannel: the channels side by side
# auto, for audio both modes decode alike (asr/assist_policy.py): what this deployment measured
ASSIST_AUTO_ASSISTED_FASTER = "auto: assisted measured faster"
ASSIST_AUTO_PLAIN_FASTER = "auto: plain measured faster"
ASSIST_AUTO_LEARNING = "auto: timing both modes"  # too few timings of one mode yet
ASSIST_AUTO_EXPLORING = "auto: rechecking the slower mode"  # every few decisions, the other mode
ASSIST_REASONS: tuple[str, ...] = (
    ASSIST_REQUESTED, ASSIST_NOT_REQUESTED, ASSIST_NO_ASSISTANT, ASSIST_LONG_AUDIO, ASSIST_SAMPLING,
    ASSIST_BATCH_SIZE, ASSIST_CHANNELS, ASSIST_AUTO_ASSISTED_FASTER, ASSIST_AUTO_PLAIN_FASTER, ASSIST_AUTO_LEARNING,
    ASSIST_AUTO_EXPLORING)


@dataclass(frozen=True)
class AssistDecision:
    """Whether the assistant model drafted this request's tokens (``used``) and why (``reason``,
    one of :data:`ASSIST_REASONS`; a response read back may hold another server's reason)."""

    used: bool
    reason: str

    def to_json(self) -> dict:
        return {"used": self.used, "reason": self.reason}


@dataclass
class Transcript:
    """The ASR's result for one request."""

    text: str
    chunks: list[Segment]  # Whisper's segments
    language: Optional[str]
    # word timestamps from the alignment heads (cross-attention DTW); None when not computed
    words: Optional[list[Word]] = None
    # whether the assistant model drafted the tokens, and why; None when the ASR did not run
    assisted: Optional[AssistDecision] = None
    # text removed by the hallucination filter, one entry per removed run
    dropped: list[str] = field(default_factory=list)
