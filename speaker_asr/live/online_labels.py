"""Online speaker labels for a live session: each utterance (or each stretch of one long enough)
is embedded by the live route with the diarization pipeline's own embedding model
(:class:`speaker_asr.diarization.embeddings.SpeakerVoices`, the vectors the ``/v1`` known
speakers are matched with) and given a speaker here, at once, for good.

An offline diarization clusters the whole recording at the end; a live one cannot wait, so
:class:`OnlineSpeakers` keeps one running centroid per speaker and decides each stretch as it
comes:

* its voice's cosine similarity to every centroid; at or above ``threshold`` it joins the
  nearest (ties: the speaker first in order) and moves that centroid (a running mean of the unit
  vectors weighted by seconds of speech, so a long utterance counts more than a short one);
* below ``threshold`` for all, it opens a new speaker -- unless ``max_speakers`` are already
  there: then it takes the nearest speaker heard so far (a known speaker's name is given on a
  match only, never as a guess; when only known speakers have places, the nearest of them) and
  leaves that centroid where it was (a voice that far from it would pull it away from the
  speaker it stands for);
* a stretch shorter than ``min_duration_s`` (or without a usable vector) is not worth a voice
  vector (an embedding of a fraction of a second is mostly noise, and it would found or drag
  centroids): it takes the previous stretch's speaker (a short stretch between pauses is most
  often the same person going on), or none at the session's start; :attr:`Assignment.by_voice`
  says so.

Known speakers (names with reference voices) are seeded before the first stretch: they keep their
names, their reference counts as :data:`KNOWN_WEIGHT_S` seconds of speech in their centroid (so
the session's own speech adapts it gradually to the microphone), and ``max_speakers`` keeps their
places (at most ``max_speakers - len(known)`` unnamed speakers open). An unnamed speaker is
``SPEAKER_00``, ``SPEAKER_01``, ... in order of first appearance, numbered among the unnamed only;
labels are never renumbered or merged, so every label sent stays true for the session.

Pure: numpy, no torch. Vectors are 1-D arrays (or sequences) of one dimension per session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from speaker_asr.speaker_names import speaker_label

# a stretch shorter than this is not embedded (seconds): pyannote's embedding windows are 5-10 s,
# and speaker_asr/diarization/embeddings.py takes 0.5 s pieces only inside a longer centroid
MIN_EMBED_S = 1.0
# how many seconds of speech a known speaker's reference clip counts as in its centroid
KNOWN_WEIGHT_S = 10.0

Vector = Union[np.ndarray, Sequence[float]]


def unit(vector: Optional[Vector]) -> Optional[np.ndarray]:
    """The vector scaled to length 1 (float64), or None when it is missing, zero or not finite."""
    if vector is None:
        return None
    v = np.asarray(vector, dtype=np.float64).reshape(-1)
    norm = float(np.linalg.norm(v)) if v.size else 0.0
    if not np.all(np.isfinite(v)) or norm == 0.0:
        return None
    return v / norm


@dataclass(frozen=True)
class Assignment:
    """One stretch's speaker. ``speaker``: its label (None only before anyone was heard);
    ``similarity``: the cosine of its voice to that speaker's centroid before the stretch moved
    it (None when not decided by voice, or for a speaker it opened); ``new``: it opened that speaker; ``by_voice``: decided
    by this stretch's own voice (False: too short, it took the previous speaker)."""

    speaker: Optional[str]
    similarity: Optional[float] = None
    new: bool = False
    by_voice: bool = False


class _Speaker:
    def __init__(self, label: str, vector: np.ndarray, weight: float, known: bool):
        self.label, self.known = label, known
        self.total = vector * weight  # sum of unit vectors weighted by seconds
        self.weight = weight

    @property
    def centroid(self) -> np.ndarray:
        return self.total / np.linalg.norm(self.total)

    def add(self, vector: np.ndarray, weight: float) -> None:
        self.total = self.total + vector * weight
        self.weight += weight


class OnlineSpeakers:
    """One session's speakers. ``threshold``: the cosine similarity at which a voice joins a
    speaker; ``max_speakers``: the most labels the session gives, known speakers included (None:
    no limit); ``known``: name -> reference voice, in the order given."""

    def __init__(self, threshold: float, max_speakers: Optional[int] = None,
                 min_duration_s: float = MIN_EMBED_S, known: Optional[Mapping[str, Vector]] = None,
                 known_weight_s: float = KNOWN_WEIGHT_S):
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"threshold is a cosine similarity in [-1, 1], got {threshold}")
        known = dict(known or {})
        if max_speakers is not None and max_speakers < max(1, len(known)):
            raise ValueError(f"max_speakers ({max_speakers}) must be at least 1 and at least the "
                             f"{len(known)} known speakers")
        self.threshold, self.max_speakers = threshold, max_speakers
        self.min_duration_s, self.known_weight_s = min_duration_s, known_weight_s
        self._speakers: list[_Speaker] = []  # known first (in the order given), then as opened
        self._unnamed = 0
        self._heard: list[str] = []
        self._previous: Optional[str] = None
        self._dimension: Optional[int] = None
        for name, vector in known.items():
            self.add_known(name, vector)

    # -- what the session has --------------------------------------------------------------------

    @property
    def labels(self) -> list[str]:
        """The speakers heard so far, in order of first appearance."""
        return list(self._heard)

    def centroid(self, label: str) -> np.ndarray:
        """A speaker's current centroid (a unit vector)."""
        for s in self._speakers:
            if s.label == label:
                return s.centroid.copy()
        raise KeyError(label)

    def needs_embedding(self, duration_s: float) -> bool:
        """Whether a stretch this long is decided by its voice (else no vector is needed)."""
        return duration_s >= self.min_duration_s

    def _vector(self, vector: Optional[Vector]) -> Optional[np.ndarray]:
        v = unit(vector)
        if v is not None:
            if self._dimension is None:
                self._dimension = v.size
            elif v.size != self._dimension:
                raise ValueError(f"voice vectors of this session have {self._dimension} dimensions, "
                                 f"got {v.size}")
        return v

    def add_known(self, name: str, vector: Vector) -> None:
        """A named speaker with a reference voice (before the session's first stretch, or later:
        a known speaker added mid-session). A name already in use is refused."""
        if any(s.label == name for s in self._speakers):
            raise ValueError(f"the speaker name {name!r} is already in use in this session")
        v = self._vector(vector)
        if v is None:
            raise ValueError(f"the reference voice of {name!r} is empty or not finite")
        if self.max_speakers is not None and sum(s.known for s in self._speakers) + 1 > self.max_speakers:
            raise ValueError(f"max_speakers ({self.max_speakers}) leaves no place for another known speaker")
        known_count = sum(s.known for s in self._speakers)
        self._speakers.insert(known_count, _Speaker(name, v, self.known_weight_s, known=True))

    # -- deciding a stretch ----------------------------------------------------------------------

    def _can_open(self) -> bool:
        if self.max_speakers is None:
            return True
        places = self.max_speakers - sum(s.known for s in self._speakers)
        return self._unnamed < places

    def _hear(self, label: str) -> None:
        if label not in self._heard:
            self._heard.append(label)
        self._previous = label

    def assign(self, embedding: Optional[Vector], duration_s: float) -> Assignment:
        """The speaker of one stretch of ``duration_s`` seconds whose voice is ``embedding``
        (None when it was not embedded: :meth:`needs_embedding`)."""
        v = self._vector(embedding) if duration_s >= self.min_duration_s else None
        if v is None:
            return Assignment(self._previous)
        return self._decide(v, duration_s)

    def assign_group(self, stretches: Sequence[tuple[Optional[Vector], float]]) -> list[Assignment]:
        """The speakers of several voices heard in one utterance (``(embedding, duration_s)``
        each, as the utterance's own diarization found them): two voices of one utterance are two
        people (the diarization told them apart), so no two of them join the same speaker. They
        are decided longest first (the surest voice claims its speaker first); each takes the
        nearest speaker not taken by another voice of the group if at or above ``threshold``,
        else opens one (at the cap: the nearest speaker left, or the nearest of all when every
        one is taken). A voice shorter than ``min_duration_s`` opens no speaker and moves no
        centroid: it joins a speaker already heard and not taken in the group when its vector
        is at or above ``threshold`` to it, else takes the group's longest voice's speaker (a
        short stretch is mostly the main speaker going on); at the session's start, when every voice
        is short, the longest one opens the first speaker all the same. Returned in the order
        given."""
        order = sorted(range(len(stretches)), key=lambda i: -stretches[i][1])
        out: list[Optional[Assignment]] = [None] * len(stretches)
        taken: set[str] = set()
        short = []
        # nobody heard yet and every voice short: the longest one with a vector opens the first
        # speaker all the same (someone must, or the session's first words have none)
        opener = None
        if not self._heard and not any(d >= self.min_duration_s and unit(e) is not None for e, d in stretches):
            opener = next((i for i in order if unit(stretches[i][0]) is not None), None)
        for i in order:
            embedding, duration = stretches[i]
            v = self._vector(embedding) if duration >= self.min_duration_s or i == opener else None
            if v is None:
                short.append(i)
                continue
            out[i] = self._decide(v, duration, exclude=taken)
            taken.add(out[i].speaker)
        lead = next((out[i].speaker for i in order if out[i] is not None), None)
        for i in short:
            v = self._vector(stretches[i][0])
            free = [s for s in self._speakers if s.label not in taken and s.label in self._heard]
            sims = [float(np.clip(s.centroid @ v, -1.0, 1.0)) for s in free] if v is not None else []
            if sims and max(sims) >= self.threshold:  # a known voice: joins it, moves nothing
                best = int(np.argmax(sims))
                taken.add(free[best].label)
                self._hear(free[best].label)
                out[i] = Assignment(free[best].label, sims[best])
            elif lead is not None:
                self._hear(lead)
                out[i] = Assignment(lead)
            else:
                out[i] = Assignment(self._previous)
        if lead is not None:
            self._previous = lead
        return out  # type: ignore[return-value]

    def _decide(self, v: np.ndarray, duration_s: float, exclude: set = frozenset()) -> Assignment:
        """One embedded voice (a unit vector): join, open or (at the cap) take the nearest, among
        the speakers not in ``exclude``."""
        free = [i for i, s in enumerate(self._speakers) if s.label not in exclude]
        sims = {i: float(np.clip(self._speakers[i].centroid @ v, -1.0, 1.0)) for i in free}
        best = max(free, key=lambda i: (sims[i], -i)) if free else None  # ties: the first
        if best is not None and sims[best] >= self.threshold:
            speaker = self._speakers[best]
            speaker.add(v, duration_s)
            self._hear(speaker.label)
            return Assignment(speaker.label, sims[best], by_voice=True)
        if self._can_open():
            label = speaker_label(self._unnamed)
            self._unnamed += 1
            self._speakers.append(_Speaker(label, v, duration_s, known=False))
            self._hear(label)
            return Assignment(label, None, new=True, by_voice=True)
        # at the cap: the nearest speaker heard so far (a name is given on a match only), or
        # the nearest known one when only known speakers have places; its centroid left alone
        every = {i: float(np.clip(s.centroid @ v, -1.0, 1.0)) for i, s in enumerate(self._speakers)}
        pool = free or list(every)
        heard = [i for i in pool if self._speakers[i].label in self._heard] or pool
        best = max(heard, key=lambda i: (every[i], -i))
        speaker = self._speakers[best]
        self._hear(speaker.label)
        return Assignment(speaker.label, every[best], by_voice=True)

    @property
    def previous(self) -> Optional[str]:
        """The speaker of the last stretch decided (None before anyone was heard)."""
        return self._previous
