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
   are clearly two voices (:class:`VoiceRule`: far enough apart, past the spread inside either,
   each with enough audio and sentences), the smaller group is a new speaker -- never past the
   most speakers the request allows -- unless it sounds like another speaker the diarization
   found: then it may go to them where the rule lets sentences move (by default none does). A new speaker's label is one no other speaker has (every
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
from speaker_asr.types import Turn, Word

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


@dataclass(frozen=True)
class VoiceRule:
    """When the sentences' voices change a speaker (:func:`regroup`). Every threshold asks for
    evidence stronger than the diarization's own: one person's short sentences (1-3 s, far-field,
    with crosstalk) lie far apart, so a rule that trusts one distance undoes right speakers.

    * ``split_distance``: the two groups' average-linkage cosine distance from which a speaker's
      sentences hold two voices; ``split_gap``: by how much that distance must pass the spread
      inside either group (its mean pairwise distance): a split is a clear gap, not a spread;
    * ``min_group_s``: distinct audio each group holds; ``min_group_units``: sentences the
      smaller group holds;
    * ``join_distance``: the moved group's mean voice within this of another speaker's is that
      speaker; ``join_margin``: and closer to them than to the rest of its own speaker by this;
    * ``new_speakers``: whether a group that is nobody's may become a new speaker (never past the
      most the request allows);
    * ``sure_support``: a sentence the diarization gives its speaker alone for at least this
      share of its time (its own one-at-a-time turns, less where another speaker's turn covers
      it) is never moved; above 1 every sentence may move.

    The defaults were chosen by eval/choose_voice_rule.py on the real meetings, their far-field,
    noisy, moving-level and crosstalk variants and the generated dialogues: of the rules that
    moved no right word on any of them with the reference turns, the one with the fewest errors
    with the pipeline's turns (docs/measurements.md, "Speaker attribution"). So a group splits
    off only where it is a clear voice of its own, 0.8 away with a gap of 0.3 past either group's
    spread and 3 s of audio; and no sentence moves to another speaker the diarization found
    (``sure_support`` 0: every sentence counts as sure), since on far-field and crosstalk
    audio one person's sentences sound like another's too often for that to be safe."""

    split_distance: float = 0.8
    split_gap: float = 0.3
    min_group_s: float = 3.0
    min_group_units: int = 1
    join_distance: float = 0.5
    join_margin: float = 0.15
    new_speakers: bool = True
    sure_support: float = 0.0


VOICE_RULE = VoiceRule()


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


def _spread(vectors: np.ndarray) -> float:
    """Mean pairwise cosine distance of unit ``vectors`` (0 for one)."""
    if len(vectors) < 2:
        return 0.0
    sims = vectors @ vectors.T
    n = len(vectors)
    return float(1.0 - (sims.sum() - np.trace(sims)) / (n * (n - 1)))


def split_in_two(vectors: np.ndarray) -> tuple[float, list[list[int]], float]:
    """Unit ``vectors`` split in two by average linkage on cosine distance: the two groups'
    distance, the groups (positions; the second empty where every merge is at one height), and
    the larger spread inside either (:func:`_spread`)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(vectors, method="average", metric="cosine")
    cluster = fcluster(tree, 2, criterion="maxclust")
    groups = [[i for i, c in enumerate(cluster) if c == k] for k in (1, 2)]
    return float(tree[-1, 2]), groups, max(_spread(vectors[g]) for g in groups)


def _two_voices(units: list[Unit], vectors: list[np.ndarray], rule: VoiceRule
                ) -> Optional[tuple[list[int], list[int]]]:
    """Positions of the larger and the smaller group when the units hold two voices by ``rule``,
    else None."""
    distance, groups, spread = split_in_two(np.stack(vectors))
    if not distance >= rule.split_distance:
        return None
    seconds = [_distinct_seconds([units[i] for i in g]) for g in groups]
    if min(seconds) < rule.min_group_s:
        return None
    big, small = (groups[0], groups[1]) if seconds[0] >= seconds[1] else (groups[1], groups[0])
    if len(small) < rule.min_group_units:
        return None
    if distance - spread < rule.split_gap:
        return None
    return big, small


def regroup(words: Sequence[Word], units: Sequence[Unit],
            vectors: Callable[[list[int]], list[Optional[np.ndarray]]],
            max_speakers: Optional[int] = None, labels: Iterable[str] = (),
            rule: VoiceRule = VOICE_RULE, support: Optional[Callable[[Unit], float]] = None) -> Regrouped:
    """``words`` with the speakers :func:`voice_units`' sentences' voices show (the module's
    steps). ``vectors(ks)``: the unit vectors (or None) of units ``ks``, asked for only where
    needed -- the sentences of a speaker with enough of them, the others' only to place a group
    that moves. A new speaker gets the first SPEAKER_NN label after the others' that neither a
    speaker with words nor any of ``labels`` (every label the diarization made) has; none is
    made once there are ``max_speakers``. ``support(unit)``: the share of the unit the
    diarization gives its speaker alone (see :class:`VoiceRule`'s ``sure_support``)."""
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
        split = _two_voices([units[k] for k in mine], [known[k] for k in mine], rule)
        if split is None:
            continue
        moved = [mine[i] for i in split[1]]
        voice = _mean_direction([known[k] for k in moved])
        own = 1.0 - float(voice @ _mean_direction([known[mine[i]] for i in split[0]]))
        others = {}
        for s in speakers:
            ks = [k for k in voiced(s) if label[k] == s] if s != speaker else []
            if ks:
                others[s] = _mean_direction([known[k] for k in ks])
        distance = {s: 1.0 - float(voice @ v) for s, v in others.items()}
        target = min(distance, key=distance.get) if distance else None
        if target is not None and distance[target] < rule.join_distance:
            if own - distance[target] < rule.join_margin:
                continue  # as near its own speaker as the other: no evidence either way
            # without the turns nothing says the diarization was in doubt: every sentence is sure
            moved = [k for k in moved if (support(units[k]) if support is not None else 1.0) < rule.sure_support]
        else:
            if not rule.new_speakers or (max_speakers is not None and count >= max_speakers):
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


def diarization_support(turns: Sequence[Turn], exclusive: Optional[Sequence[Turn]] = None
                        ) -> Callable[[Unit], float]:
    """``support(unit)``: the share of the unit's time its speaker's one-at-a-time turns
    (``exclusive``, or ``turns`` without them) cover, less the share other speakers' ``turns``
    cover: 1 where the diarization heard that speaker alone all through the sentence."""
    from speaker_asr.attribution.turns import SpeakerIndex

    alone = SpeakerIndex(exclusive if exclusive is not None else turns)
    regular = SpeakerIndex(turns)

    def support(unit: Unit) -> float:
        own = alone.coverage(unit.start, unit.end).get(unit.speaker, 0.0)
        others = max((v for s, v in regular.coverage(unit.start, unit.end).items() if s != unit.speaker),
                     default=0.0)
        return max(0.0, own - others)

    return support


def speakers_by_sentence(words: Sequence[Word],
                         embed: Callable[[list[tuple[float, float]]], list[Optional[np.ndarray]]],
                         max_speakers: Optional[int] = None, labels: Iterable[str] = (),
                         turns: Optional[Sequence[Turn]] = None, exclusive: Optional[Sequence[Turn]] = None,
                         rule: VoiceRule = VOICE_RULE) -> Regrouped:
    """:func:`voice_units` -> ``embed`` (the :func:`embedded_span` of each sentence long enough to
    compare; a unit vector or None for each) -> :func:`regroup` by ``rule`` (``labels``: every
    label the diarization made; ``turns`` and ``exclusive``: its turns, which say where it was
    sure: :func:`diarization_support`)."""
    units = voice_units(words)

    def vectors(ks: list[int]) -> list[Optional[np.ndarray]]:
        return list(embed([embedded_span(units[k]) for k in ks]))

    support = diarization_support(turns, exclusive) if turns is not None else None
    return regroup(words, units, vectors, max_speakers, labels, rule, support)
