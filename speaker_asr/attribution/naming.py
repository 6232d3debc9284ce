"""Known speakers: put names on the speakers the diarization found, by their voices.

The caller names some people and gives a short clip of each (``known_speaker_names`` +
``known_speaker_references``). Each clip and each found speaker become one voice embedding (see
:mod:`speaker_asr.diarization.embeddings`); here the two sets are matched: cosine similarity,
one name per speaker and one speaker per name, the assignment with the highest total similarity
among the pairs at or above a threshold. A speaker whose voice matches no name closely enough
keeps its label (``SPEAKER_01``); a name whose voice is not in the recording names nobody.

Pure: no torch (the assignment is scipy's, speaker_asr/assignment.py); embeddings are sequences of floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from speaker_asr.assignment import best_pairs
from speaker_asr.result import KnownSpeaker, Result

Vector = Sequence[float]


def cosine(a: Vector, b: Vector) -> Optional[float]:
    """Cosine similarity of two vectors of the same length; None when either is zero or not
    finite (no voice to compare)."""
    if len(a) != len(b):
        raise ValueError(f"embeddings of different sizes ({len(a)} and {len(b)}) cannot be compared")
    dot = na = nb = 0.0
    for x, y in zip(a, b):
        dot += x * y
        na += x * x
        nb += y * y
    if not (math.isfinite(dot) and math.isfinite(na) and math.isfinite(nb)) or na == 0 or nb == 0:
        return None
    return max(-1.0, min(1.0, dot / math.sqrt(na * nb)))


@dataclass(frozen=True)
class Match:
    """One reference name: the speaker label it was given to (None: nobody) and the similarity
    behind that (for a name given to nobody, its best similarity to any speaker, so a caller sees
    how far it was from the threshold; None when no speaker had a voice to compare)."""

    name: str
    speaker: Optional[str]
    similarity: Optional[float]
    closest: Optional[str] = None  # the speaker with that best similarity, for an unmatched name


def similarities(speakers: Mapping[str, Optional[Vector]], references: Mapping[str, Vector]
                 ) -> dict[tuple[str, str], float]:
    """``(speaker, name) -> cosine`` for every pair where both have a voice."""
    out = {}
    for s, v in speakers.items():
        if v is None:
            continue
        for name, r in references.items():
            c = cosine(v, r)
            if c is not None:
                out[(s, name)] = c
    return out


def match_speakers(speakers: Mapping[str, Optional[Vector]], references: Mapping[str, Vector],
                   threshold: float) -> list[Match]:
    """The best one-to-one naming, one :class:`Match` per reference in the given order.

    Among all assignments of names to speakers (each at most once, only pairs with similarity
    >= ``threshold``), the one with the highest total similarity; ties go to the assignment
    that names more speakers (:func:`speaker_asr.assignment.best_pairs`; deterministic)."""
    names = list(references)
    labels = sorted(speakers)
    sims = similarities(speakers, references)
    ok = {pair: c for pair, c in sims.items() if c >= threshold}
    given = {name: s for s, name in best_pairs(ok, labels, names).items()}
    out = []
    for name in names:
        s = given.get(name)
        if s is not None:
            out.append(Match(name, s, sims[(s, name)]))
            continue
        scored = [(c, sp) for (sp, n), c in sims.items() if n == name]
        if scored:
            c, sp = min(scored, key=lambda x: (-x[0], x[1]))  # highest; ties: earlier label
            out.append(Match(name, None, c, sp))
        else:
            out.append(Match(name, None, None))
    return out


def known_names(matches: Sequence[Match]) -> dict[str, str]:
    """Each matched speaker's label -> its name."""
    return {m.speaker: m.name for m in matches if m.speaker is not None}


def _rounded(v: Optional[Vector], digits: int = 6) -> Optional[list[float]]:
    return None if v is None else [round(float(x), digits) for x in v]


def name_known_speakers(result: Result, voices: Mapping[str, Optional[Vector]],
                        references: Optional[Mapping[str, Vector]], threshold: float,
                        with_embeddings: bool) -> Result:
    """The result with the known speakers named: ``voices`` (each found speaker's voice, by its
    label) matched to the ``references`` (name -> its clip's voice; None when no names were
    given) at ``threshold``; each matched speaker renamed to its name everywhere. The result
    gets ``known_speakers`` (per reference name, in the request's order, the label it got -- the
    name, or None when no speaker's voice matched -- and the similarity behind it) and, with
    ``with_embeddings``, each reference's voice and ``speaker_embeddings`` (each found speaker's
    voice under the label it has in the transcript; None for a speaker without one)."""
    matches = match_speakers(voices, references, threshold) if references is not None else []
    known = [KnownSpeaker(m.name, m.name if m.speaker is not None else None,
                          None if m.similarity is None else round(m.similarity, 4),
                          _rounded(references[m.name]) if with_embeddings else None)
             for m in matches]
    embeddings = {label: _rounded(v) for label, v in sorted(voices.items())} if with_embeddings \
        else None
    return replace(result, known_speakers=known, speaker_embeddings=embeddings) \
        .renamed(known_names(matches))
