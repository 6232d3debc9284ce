"""The result of one request: :class:`Result`, the one record from the pipeline to every writer.

It holds what every format is written from: the transcript as segments (Whisper's segments, split
wherever the speaker changes, each with its speaker and, with word timestamps, its words), the
language, the audio's duration, whether the assistant model drafted the tokens (and why), the
warnings, the known speakers' matches and the voice embeddings. The speaker turns (consecutive segments of one speaker, with their words) are derived
from the segments (:attr:`Result.speaker_turns`), never stored beside them. Times and numbers
are held as the response writes them (seconds to the millisecond, similarities to 4 decimals,
embeddings to 6).

A dict appears only at the JSON edge: :meth:`Result.to_json` is the ``json`` response, and
:meth:`Result.from_json` reads one back -- the command line renders several formats from one
``json`` answer, and a client may hand its response to :func:`speaker_asr.formats.render`. Speakers
are renamed in one place, :meth:`Result.renamed` (known names, and ``speaker_names`` through
:meth:`Result.named`).

Pure Python: no torch, numpy or pydantic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Mapping, Optional, Sequence

from speaker_asr.errors import RequestError
from speaker_asr.types import AssistDecision, Segment, Word


@dataclass(frozen=True)
class SpeakerTurn:
    """One speaker's stretch of the transcript (the response's ``speakers`` entries):
    consecutive segments of that speaker, their text joined and stripped, with their words."""

    speaker: Optional[str]
    text: str
    start: float
    end: float
    words: list[Word] = field(default_factory=list)
    channel: Optional[int] = None


@dataclass(frozen=True)
class KnownSpeaker:
    """One ``known_speaker_names`` entry: the label it got in the transcript (the name itself;
    None when no found voice matched its clip), the cosine similarity behind that (its best one
    when unmatched; None when no speaker had a voice) and, with ``return_speaker_embeddings``,
    its reference's voice embedding."""

    name: str
    speaker: Optional[str]
    similarity: Optional[float]
    embedding: Optional[list[float]] = None


@dataclass(frozen=True)
class Result:
    """One request's transcript, speakers and notes, as every format is written from it.

    ``diarized``: diarization was on (segments and words carry a speaker, None where nobody was
    found). ``with_words``: the segments carry their words (``return_word_timestamps``).
    ``alignment``: ``"word"`` (speakers from word timestamps) or ``"segment"``; None only for a
    response read back without one, as is a missing ``duration``. ``speaker_embeddings``: each
    found speaker's voice by its label, None when not asked for. ``assisted``: whether the
    assistant model drafted the tokens, and why; None where the ASR did not run (silence) or a
    response read back has none. :attr:`speaker_turns` is derived from the segments."""

    text: str
    segments: list[Segment]
    language: Optional[str]
    duration: Optional[float]
    alignment: Optional[str] = None
    diarized: bool = False
    with_words: bool = False
    warnings: list[str] = field(default_factory=list)
    known_speakers: list[KnownSpeaker] = field(default_factory=list)
    speaker_embeddings: Optional[dict[str, Optional[list[float]]]] = None
    assisted: Optional[AssistDecision] = None
    #: multichannel: the recording's number of channels (segments and words carry theirs)
    channels: Optional[int] = None
    #: the labels ``speaker_names`` names, in order, where that is not first appearance (a
    #: multichannel transcript: channel order, a silent channel's label included)
    speaker_order: Optional[tuple[str, ...]] = None

    # ----------------------------------------------------------------------------- speakers

    @cached_property
    def speaker_turns(self) -> list[SpeakerTurn]:
        """The response's ``speakers`` entries: :func:`speaker_turns` of the segments with
        diarization on, none without it."""
        return speaker_turns(self.segments) if self.diarized else []

    def speakers_in_order(self) -> list[Any]:
        """Speaker labels in order of first appearance in time (speaker turns, segments and
        words; at equal times in that reading order). ``None`` is not a speaker."""
        items: list[tuple[float, Any]] = [(t.start, t.speaker) for t in self.speaker_turns]
        for seg in self.segments:
            items.append((seg.start, seg.speaker))
            items += [(w.start if w.start is not None else seg.start, w.speaker) for w in seg.words]
        order: list[Any] = []
        seen: set = set()
        for _, speaker in sorted(items, key=lambda item: item[0]):  # stable: ties keep reading order
            if speaker is not None and speaker not in seen:
                seen.add(speaker)
                order.append(speaker)
        return order

    def renamed(self, mapping: Mapping[str, str]) -> "Result":
        """The result with every speaker label in ``mapping`` replaced by its new name: segments,
        words (and the speakers they overlap), so the speaker turns too, and voice embeddings."""
        if not mapping:
            return self

        def name(speaker):
            return mapping.get(speaker, speaker)

        def words(ws: list[Word]) -> list[Word]:
            return [replace(w, speaker=name(w.speaker), overlap=[name(s) for s in w.overlap])
                    for w in ws]

        voices = self.speaker_embeddings
        return replace(
            self,
            segments=[replace(s, speaker=name(s.speaker), words=words(s.words)) for s in self.segments],
            speaker_embeddings=None if voices is None else {name(k): v for k, v in voices.items()},
            speaker_order=None if self.speaker_order is None
            else tuple(name(k) for k in self.speaker_order))

    def shifted(self, seconds: float) -> "Result":
        """The result with every time ``seconds`` later (segments and words; ``duration`` stays
        the audio's): the transcript of a stretch placed on a longer recording's clock -- a live
        session's final pass over the audio it kept from some point of the session on."""
        if not seconds:
            return self

        def at(t: Optional[float]) -> Optional[float]:
            return None if t is None else round(t + seconds, 3)

        return replace(self, segments=[
            replace(s, start=at(s.start), end=at(s.end),
                    words=[replace(w, start=at(w.start), end=at(w.end)) for w in s.words])
            for s in self.segments])

    def named(self, names: Sequence[str]) -> "Result":
        """``speaker_names``: the first speakers (by first appearance) renamed to ``names``; later
        speakers keep their labels. Raises RequestError if a new name equals the label of a
        speaker that keeps its label."""
        if not names:
            return self
        order = self.speakers_in_order()
        mapping = {speaker: name for speaker, name in zip(order, names)}
        kept = {str(s) for s in order[len(names):]}
        clashes = [name for name in mapping.values() if name in kept]
        if clashes:
            raise RequestError(f"speaker_names: {clashes[0]!r} is also the label of a speaker beyond "
                               f"the {len(names)} named ones; give every speaker a name or pick "
                               "another name")
        return self.renamed(mapping)

    # ----------------------------------------------------------------------------- JSON

    def to_json(self) -> dict[str, Any]:
        """The ``json`` response: ``text``, ``chunks`` (segments: ``text``, ``timestamp``, with
        diarization ``speaker``, with word timestamps ``words``), ``speakers`` (speaker turns),
        ``language``, ``duration``, ``alignment``, then :meth:`notes_json`. New lists and dicts
        throughout."""
        out: dict[str, Any] = {
            "text": self.text,
            "chunks": [self._chunk_json(s) for s in self.segments],
            "speakers": [self._turn_json(t) for t in self.speaker_turns],
            "language": self.language,
            "duration": self.duration,
        }
        if self.channels is not None:
            out["channels"] = self.channels
        if self.alignment is not None:
            out["alignment"] = self.alignment
        return {**out, **self.notes_json()}

    def carried_json(self) -> dict[str, Any]:
        """What every format's answer carries beside its transcript: the audio's ``duration``
        (when known), then :meth:`notes_json`."""
        out: dict[str, Any] = {} if self.duration is None else {"duration": self.duration}
        return {**out, **self.notes_json()}

    def notes_json(self) -> dict[str, Any]:
        """What the request noted beside the transcript, each key only when present:
        ``assisted`` (``{"used", "reason"}``), ``known_speakers``, ``speaker_embeddings``,
        ``warnings`` -- written here only, in this order, for :meth:`to_json`,
        :meth:`carried_json` and the OpenAI shapes."""
        out: dict[str, Any] = {}
        if self.assisted is not None:
            out["assisted"] = self.assisted.to_json()
        if self.known_speakers:
            out["known_speakers"] = self._known_speakers_json()
        if self.speaker_embeddings is not None:
            out["speaker_embeddings"] = self._speaker_embeddings_json()
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out

    def _turn_json(self, t: SpeakerTurn) -> dict[str, Any]:
        out: dict[str, Any] = {"speaker": t.speaker, "text": t.text, "timestamp": [t.start, t.end]}
        if self.channels is not None:
            out["channel"] = t.channel
        return out

    def _chunk_json(self, seg: Segment) -> dict[str, Any]:
        chunk: dict[str, Any] = {"text": seg.text, "timestamp": [seg.start, seg.end]}
        if self.diarized:
            chunk["speaker"] = seg.speaker
        if self.channels is not None:
            chunk["channel"] = seg.channel
        if self.with_words:
            chunk["words"] = [self._word_json(w) for w in seg.words]
        return chunk

    def _word_json(self, w: Word) -> dict[str, Any]:
        out: dict[str, Any] = {"word": w.text, "start": w.start, "end": w.end}
        if self.diarized:
            out["speaker"] = w.speaker
        if self.channels is not None:
            out["channel"] = w.channel
        if w.overlap:
            out["overlap"] = list(w.overlap)
        return out

    def _known_speakers_json(self) -> list[dict[str, Any]]:
        out = []
        for k in self.known_speakers:
            entry: dict[str, Any] = {"name": k.name, "speaker": k.speaker, "similarity": k.similarity}
            if k.embedding is not None:
                entry["embedding"] = list(k.embedding)
            out.append(entry)
        return out

    def _speaker_embeddings_json(self) -> dict[str, Optional[list[float]]]:
        return {k: None if v is None else list(v) for k, v in (self.speaker_embeddings or {}).items()}

    @classmethod
    def from_json(cls, response: Mapping[str, Any]) -> "Result":
        """A ``json`` response read back (this endpoint's, or one shaped like it): what
        :meth:`to_json` writes gives the same result again. Read leniently, as a client's may be
        hand-edited: entries that are not objects are skipped, a missing or unusable time is
        the previous one (a start, 0 at first) or the start (an end), a word's missing speaker is
        its chunk's. The response is diarized when its chunks carry speakers or it has
        ``speakers`` entries; those entries are not read otherwise: the speaker turns are derived
        from the chunks, as :meth:`to_json` wrote them."""
        chunks = [c for c in response.get("chunks") or [] if isinstance(c, dict)]
        segments = [Segment(_text(c.get("text")), *_span(c), c.get("speaker"),
                            [_word(w, c.get("speaker"), _channel(c.get("channel")))
                             for w in c.get("words") or [] if isinstance(w, dict)],
                            _channel(c.get("channel"))) for c in chunks]
        channels = _channel(response.get("channels"))
        entries = [e for e in response.get("speakers") or [] if isinstance(e, dict)]
        diarized = bool(entries) or any("speaker" in c for c in chunks)
        voices = response.get("speaker_embeddings")
        return cls(
            text=_text(response.get("text")), segments=segments,
            language=response.get("language"), duration=_num(response.get("duration")),
            alignment=response.get("alignment") if isinstance(response.get("alignment"), str) else None,
            diarized=diarized, with_words=any("words" in c for c in chunks),
            warnings=[w for w in response.get("warnings") or [] if isinstance(w, str)],
            known_speakers=[KnownSpeaker(k.get("name"), k.get("speaker"), k.get("similarity"),
                                         _vector(k.get("embedding")))
                            for k in response.get("known_speakers") or [] if isinstance(k, dict)],
            speaker_embeddings={k: _vector(v) for k, v in voices.items()}
            if isinstance(voices, dict) else None,
            assisted=_assisted(response.get("assisted")), channels=channels,
            speaker_order=None if channels is None else speakers_by_channel(segments))


def speaker_turns(segments: Sequence[Segment]) -> list[SpeakerTurn]:
    """Consecutive segments of one speaker joined: text concatenated and stripped, from the first
    one's start to the latest end, with all their words."""
    runs: list[list[Segment]] = []
    for seg in segments:
        if runs and runs[-1][0].speaker == seg.speaker:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    return [SpeakerTurn(run[0].speaker, "".join(s.text for s in run).strip(), run[0].start,
                        max(s.end for s in run), [w for s in run for w in s.words], run[0].channel)
            for run in runs]


def speakers_by_channel(segments: Sequence[Segment]) -> tuple[Any, ...]:
    """A multichannel transcript's speakers in channel order, within a channel by first
    appearance (segments without a channel last), as ``speaker_names`` names them."""
    first: dict[Any, tuple[int, float]] = {}
    for seg in segments:
        if seg.speaker is not None:
            key = (seg.channel if seg.channel is not None else 1 << 30, seg.start)
            first[seg.speaker] = min(first.get(seg.speaker, key), key)
    return tuple(sorted(first, key=lambda speaker: first[speaker]))


# --------------------------------------------------------------------------- reading JSON


def _num(value: Any) -> Optional[float]:
    """A finite float, or None for anything else (None, NaN, inf, strings)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _span(item: dict) -> tuple[float, float]:
    """``(start, end)`` of a chunk from its ``timestamp`` pair (missing -> 0 / start)."""
    stamp = item.get("timestamp")
    stamp = list(stamp) if isinstance(stamp, (list, tuple)) else []
    start = _num(stamp[0]) if len(stamp) > 0 else None
    end = _num(stamp[1]) if len(stamp) > 1 else None
    start = max(0.0, start if start is not None else 0.0)
    end = end if end is not None and end >= start else start
    return start, end


def _word(word: dict, speaker: Any, channel: Optional[int] = None) -> Word:
    own = _channel(word.get("channel"))
    return Word(_text(word.get("word")), _num(word.get("start")), _num(word.get("end")),
                word.get("speaker", speaker),
                [s for s in word.get("overlap") or [] if isinstance(s, str)],
                own if own is not None else channel)


def _channel(value: Any) -> Optional[int]:
    """A channel index or count: a non-negative int, None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _assisted(value: Any) -> Optional[AssistDecision]:
    """``{"used": bool, "reason": str}`` read back; None when missing (older responses, silence)
    or not of that shape."""
    if not isinstance(value, dict) or not isinstance(value.get("used"), bool):
        return None
    reason = value.get("reason")
    return AssistDecision(value["used"], reason if isinstance(reason, str) else "")


def _vector(value: Any) -> Optional[list[float]]:
    return list(value) if isinstance(value, list) else None
