"""Speakers checked by the voices of the transcript's sentences. numpy and scipy, no torch.

The diarization clusters the speakers of 10-s windows that up to three people share. On a short
recording that is few, mixed windows, and it often hears two people as one: on the real AMI
clips every speaker count it got wrong was too low. A sentence of the transcript is one voice far
more often, and a longer, cleaner stretch of it. So, after the words have their speakers:

1. :func:`voice_units` cuts the words into sentences (at a sentence end, a pause over
   :data:`PAUSE_S`, or where the word's speaker changes); those spanning at least
   :data:`MIN_UNIT_S` are embedded (their middle :data:`MAX_EMBED_S` at most) with the
   diarization's own embedding model (by the caller: the model code stays out of this module)
   -- a speaker's only when it has enough of them to compare, the others' only to place a group
   that moves;
2. :func:`regroup`: for each speaker with at least :data:`MIN_UNITS` embedded sentences, the
   sentences' voices are split in two by average linkage on cosine distance. Where the two groups
   are at least :data:`SPLIT_DISTANCE` apart and each holds :data:`MIN_GROUP_S` of distinct audio,
   the smaller group is another voice: it goes to the other speaker whose sentences sound
   closest (mean voice within :data:`JOIN_DISTANCE`), else to a new speaker -- never past the
   most speakers the request allows. A new speaker's label is one no other speaker has (every
   label the diarization made counts, with words or without), and its voice is its sentences'
   mean voice, so that it can be named and its embedding returned as any other's.

Words keep their text, times and order; only speaker labels change, a sentence at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from speaker_asr.attribution.speakers import SENTENCE_END
from speaker_asr.speaker_names import speaker_label
from speaker_asr.types import Word

# a pause (seconds) between two words that ends a sentence for this step even without
# punctuation: longer than the pauses inside a sentence, as short as a quick reply's
PAUSE_S = 0.5
# the shortest sentence embedded (first word's start to last word's end): below a second an
# embedding says more about the word than about the voice
MIN_UNIT_S = 1.0
# the most of a sentence embedded (its middle): a voice is as clear from 3 s as from 10, and the
# embedding's time grows with the audio it is given, so a long sentence costs no more than this
MAX_EMBED_S = 3.0
# embedded sentences a speaker needs before its voices are compared: two cannot tell which of
# them is the odd one
MIN_UNITS = 3
# cosine distance between the two groups (average linkage) from which they are two voices. One
# person's sentences lay 0.2-0.5 apart and two people's 0.75-0.95 with the CAM++ embedding the
# evaluation runs; the results were the same for any value from 0.5 to 0.8, so the middle of
# the gap, for other embedding models' scales
SPLIT_DISTANCE = 0.6
# distinct audio (seconds, overlapping sentences counted once: a repeated hallucination is one
# stretch of audio) each group must hold for the comparison to be trusted
MIN_GROUP_S = 2.0
# cosine distance from the moved group's mean voice to another speaker's within which the group
# is that speaker rather than a new one: below the distance that splits
JOIN_DISTANCE = 0.5


@dataclass(frozen=True)
class Regrouped:
    """The words with the speakers the sentences' voices show, and the voice (a unit vector) of
    each new speaker made, by its label."""

    words: list[Word]
    voices: dict[str, np.ndarray]


@dataclass(frozen=True)
class Unit:
    """Words ``first..last`` (indices, inclusive) of one sentence, said by ``speaker``."""

    first: int
    last: int
    start: float
    end: float
    speaker: Optional[str]

    @property
    def embedded(self) -> bool:
        return self.speaker is not None and self.end - self.start >= MIN_UNIT_S


def voice_units(words: Sequence[Word]) -> list[Unit]:
    """The attributed ``words`` as sentences: cut after a sentence end, at a pause over
    :data:`PAUSE_S` and where the speaker changes."""
    out: list[Unit] = []
    first = 0
    for i, w in enumerate(words):
        last_of_unit = (i + 1 == len(words) or w.text.strip().endswith(SENTENCE_END)
                        or words[i + 1].start - w.end > PAUSE_S or words[i + 1].speaker != w.speaker)
        if last_of_unit:
            out.append(Unit(first, i, words[first].start, max(x.end for x in words[first:i + 1]),
                            words[first].speaker))
            first = i + 1
    return out


def embedded_span(unit: Unit) -> tuple[float, float]:
    """The stretch of ``unit`` that is embedded: all of it, or its middle :data:`MAX_EMBED_S`."""
    spare = max(0.0, (unit.end - unit.start) - MAX_EMBED_S) / 2
    return unit.start + spare, unit.end - spare


def _distinct_seconds(units: Sequence[Unit]) -> float:
    total, reached = 0.0, float("-inf")
    for u in sorted(units, key=lambda u: u.start):
        start = max(u.start, reached)
        if u.end > start:
            total += u.end - start
        reached = max(reached, u.end)
    return total


def _mean_direction(vectors: Sequence[np.ndarray]) -> np.ndarray:
    m = np.mean(vectors, axis=0)
    return m / (np.linalg.norm(m) or 1.0)


def _two_voices(units: list[Unit], vectors: list[np.ndarray]) -> Optional[tuple[list[int], list[int]]]:
    """Positions of the larger and the smaller group when the units hold two voices, else None."""
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(np.stack(vectors), method="average", metric="cosine")
    if not tree[-1, 2] >= SPLIT_DISTANCE:
        return None
    cluster = fcluster(tree, 2, criterion="maxclust")
    groups = [[i for i, c in enumerate(cluster) if c == k] for k in (1, 2)]
    seconds = [_distinct_seconds([units[i] for i in g]) for g in groups]
    if min(seconds) < MIN_GROUP_S:
        return None
    return (groups[0], groups[1]) if seconds[0] >= seconds[1] else (groups[1], groups[0])


def regroup(words: Sequence[Word], units: Sequence[Unit],
            vectors: Callable[[list[int]], list[Optional[np.ndarray]]],
            max_speakers: Optional[int] = None, labels: Iterable[str] = ()) -> Regrouped:
    """``words`` with the speakers :func:`voice_units`' sentences' voices show (the module's
    steps). ``vectors(ks)``: the unit vectors (or None) of units ``ks``, asked for only where
    needed -- the sentences of a speaker with enough of them, the others' only to place a group
    that moves. A new speaker gets the first SPEAKER_NN label after the others' that neither a
    speaker with words nor any of ``labels`` (every label the diarization made) has; none is
    made once there are ``max_speakers``."""
    speakers = sorted({u.speaker for u in units if u.speaker is not None})
    eligible: dict[str, list[int]] = {}
    for k, u in enumerate(units):
        if u.embedded:
            eligible.setdefault(u.speaker, []).append(k)
    known: dict[int, Optional[np.ndarray]] = {}

    def voiced(speaker: str) -> list[int]:
        ks = eligible.get(speaker, [])
        missing = [k for k in ks if k not in known]
        if missing:
            known.update(zip(missing, vectors(missing)))
        return [k for k in ks if known[k] is not None]

    checked = [s for s in speakers if len(eligible.get(s, [])) >= MIN_UNITS]
    if checked:  # one call for every sentence that may be compared
        wanted = [k for s in checked for k in eligible[s]]
        known.update(zip(wanted, vectors(wanted)))
    label = {k: u.speaker for k, u in enumerate(units)}
    count = len(speakers)
    taken = set(speakers) | set(labels)
    new_voices: dict[str, np.ndarray] = {}
    for speaker in checked:
        mine = voiced(speaker)
        if len(mine) < MIN_UNITS:
            continue
        split = _two_voices([units[k] for k in mine], [known[k] for k in mine])
        if split is None:
            continue
        moved = [mine[i] for i in split[1]]
        voice = _mean_direction([known[k] for k in moved])
        others = {}
        for s in speakers:
            ks = [k for k in voiced(s) if label[k] == s] if s != speaker else []
            if ks:
                others[s] = _mean_direction([known[k] for k in ks])
        distance = {s: 1.0 - float(voice @ v) for s, v in others.items()}
        target = min(distance, key=distance.get) if distance else None
        if target is None or distance[target] >= JOIN_DISTANCE:
            if max_speakers is not None and count >= max_speakers:
                continue
            target = _new_label(taken, count)
            taken.add(target)
            new_voices[target] = voice
            count += 1
        for k in moved:
            label[k] = target
    out = list(words)
    for k, u in enumerate(units):
        if label[k] != u.speaker:
            for i in range(u.first, u.last + 1):
                out[i] = replace(out[i], speaker=label[k])
    return Regrouped(out, new_voices)


def _new_label(taken: set, count: int) -> str:
    n = count
    while speaker_label(n) in taken:
        n += 1
    return speaker_label(n)


def speakers_by_sentence(words: Sequence[Word],
                         embed: Callable[[list[tuple[float, float]]], list[Optional[np.ndarray]]],
                         max_speakers: Optional[int] = None, labels: Iterable[str] = ()) -> Regrouped:
    """:func:`voice_units` -> ``embed`` (the :func:`embedded_span` of each sentence long enough to
    compare; a unit vector or None for each) -> :func:`regroup` (``labels``: every label the
    diarization made)."""
    units = voice_units(words)

    def vectors(ks: list[int]) -> list[Optional[np.ndarray]]:
        return list(embed([embedded_span(units[k]) for k in ks]))

    return regroup(words, units, vectors, max_speakers, labels)
