"""An item's speakers in the session's labels, and the ``segment`` events that carry them. No I/O
and no model: what the item's own diarization found (its words attributed to it:
:func:`item_speakers`), or the whole item's voice, goes in with the session's
:class:`~speaker_asr.live.online_labels.OnlineSpeakers`; speaker turns come out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from speaker_asr.attribution.response import attribute
from speaker_asr.attribution.turns import speakers_alone
from speaker_asr.live.protocol import SegmentWord, TranscriptionSegment
from speaker_asr.live.online_labels import OnlineSpeakers
from speaker_asr.result import SpeakerTurn
from speaker_asr.types import Diarization, Transcript, Word


@dataclass
class ItemSpeakers:
    """Who speaks in an item, as its own diarization found them: ``turns``, the item's words
    attributed to them as the file route attributes them (the transcript's speaker turns, times
    from the item's start; a turn's ``speaker`` is a label of this item only, or None where the
    diarization heard nobody); per label, its ``voice`` (a unit vector, None when it had no
    speech alone to embed) and ``seconds`` of speech alone."""

    turns: list[SpeakerTurn]
    voice: dict[str, Optional[list[float]]]
    seconds: dict[str, float]


def item_speakers(found: Optional[Diarization], transcript: Optional[Transcript],
                  seconds: float) -> Optional[ItemSpeakers]:
    """The item's words (its final decode's ``transcript``) attributed to the speakers its own
    diarization ``found`` (:func:`speaker_asr.attribution.response.attribute`, the file route's
    rule). None when there is nothing to attribute, the diarization failed or heard nobody (the
    caller then decides the item by its whole voice)."""
    if found is None or transcript is None or found.error is not None \
            or found.embedding_error is not None or not found.turns:
        return None
    result = attribute(transcript, seconds, found, with_words=True)
    alone: dict[str, float] = {}
    for turn in speakers_alone(found):
        alone[turn.speaker] = alone.get(turn.speaker, 0.0) + max(0.0, turn.end - turn.start)
    return ItemSpeakers(result.speaker_turns, dict(found.voices), alone)


def turns_by_voice(speakers: OnlineSpeakers, embedding: Optional[np.ndarray], seconds: float,
                   transcript: str, words: list[Word]) -> list[SpeakerTurn]:
    """The item as one turn of the speaker its whole voice (``embedding``) is closest to (when the
    item's diarization heard nobody). An item too short to be decided by voice takes the previous
    speaker; the session's first one opens the first label all the same (someone must). Empty
    when there is no voice vector before anyone was heard."""
    duration = seconds if speakers.labels else max(seconds, speakers.min_duration_s)
    speaker = speakers.assign(embedding, duration).speaker
    if speaker is None:
        return []
    return [SpeakerTurn(speaker, transcript, 0.0, seconds, list(words))]


def turns_by_diarization(speakers: OnlineSpeakers, found: ItemSpeakers) -> list[SpeakerTurn]:
    """The item's own diarization's turns with the session's labels: each of its voices linked to
    a session speaker (:meth:`OnlineSpeakers.assign_group`: two voices of one item never to one
    speaker); a turn of a voice too short to decide takes the item's main voice's speaker (or the
    previous one). Consecutive turns that got one speaker are joined. Empty when a turn is left
    without a speaker."""
    labels = [label for label in found.seconds if found.seconds[label] > 0] or list(found.voice)
    chosen = speakers.assign_group([(found.voice.get(label), found.seconds.get(label, 0.0))
                                    for label in labels])
    names = {label: a.speaker for label, a in zip(labels, chosen)}
    lead = max(labels, key=lambda label: found.seconds.get(label, 0.0), default=None)
    fallback = names.get(lead) or speakers.previous
    turns = [replace(t, speaker=names.get(t.speaker) or fallback) for t in found.turns if t.text]
    if any(t.speaker is None for t in turns):
        return []
    return merged(turns)


def merged(turns: list[SpeakerTurn]) -> list[SpeakerTurn]:
    """Consecutive turns of one session speaker joined (two of the item's own speakers may turn
    out to be one)."""
    out: list[SpeakerTurn] = []
    for t in turns:
        if out and out[-1].speaker == t.speaker:
            last = out[-1]
            out[-1] = SpeakerTurn(t.speaker, (last.text + " " + t.text.strip()).strip(), last.start,
                                  max(last.end, t.end), last.words + t.words)
        else:
            out.append(t)
    return out


def segment_event(item_id: str, index: int, origin_s: float, seconds: float, turn: SpeakerTurn,
                  with_words: bool) -> TranscriptionSegment:
    """The ``segment`` event of one speaker turn of an item that starts at ``origin_s`` on the
    session's clock and lasts ``seconds``: its times those of its timed words (the turn's
    otherwise), clipped to the item's audio (a model may overshoot), on the session's clock;
    ``with_words``: its words too. ``index``: the session's count of segments so far."""

    def at(t: float) -> float:
        return round(origin_s + min(max(0.0, t), seconds), 3)

    timed = [w for w in turn.words if w.start is not None and w.end is not None]
    start = at(timed[0].start) if timed else at(turn.start)
    end = at(timed[-1].end) if timed else at(turn.end)
    words = [SegmentWord(word=w.text.strip(), start=at(w.start), end=at(w.end)) for w in timed] \
        if with_words else None
    return TranscriptionSegment(item_id=item_id, id=f"seg_{index}", start=start, end=max(start, end),
                                text=turn.text.strip(), speaker=turn.speaker, words=words)
