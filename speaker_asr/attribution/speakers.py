"""Speaker alignment: give every piece of transcript a speaker. Pure Python, no torch.

Inputs are plain data: speaker turns ``Turn(start, end, speaker)`` from the diarization, and
transcript pieces (chunks or words) with ``(start, end)`` times in seconds, either of which may be
missing (``None``) as Whisper sometimes leaves them. The rules:

* a piece takes the speaker whose turns overlap it most (summed over that speaker's turns);
* a piece that overlaps no turn takes the speaker of the nearest turn;
* words (:func:`attribute_words`) take both the regular turns (overlapping where people talk at
  once) and, where the diarization has them, its own exclusive turns: in overlapped speech a
  word goes to the voice Whisper was most likely writing, a word the turns do not single out
  takes its sentence's speaker, and a turn that got no word takes back a short sentence timed
  just after it (the rules in :data:`RULES`);
* with no turns at all (silence, music, diarization off) pieces get no speaker;
* nothing is ever dropped, and every output time is finite, within ``[0, duration]`` and
  ``start <= end``.

Lookups go through :class:`SpeakerIndex`, an interval index (sorted starts + running maximum of
ends), so attributing N pieces against T turns costs O((N + T) log T) plus the overlaps found, not
O(N * T).
"""

from __future__ import annotations

import bisect
import math
from typing import Iterable, Iterator, Optional, Sequence

from speaker_asr.types import Segment, Turn, Word


def _finite(x) -> Optional[float]:
    if x is None:
        return None
    try:
        value = float(x)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def clean_turns(turns: Iterable[Turn], duration: Optional[float] = None) -> list[Turn]:
    """Sorted turns with positive length, clamped to ``[0, duration]``; unsorted, overlapping and
    degenerate input is fine."""
    out = []
    for t in turns:
        start, end = _finite(t.start), _finite(t.end)
        if start is None or end is None:
            continue
        start, end = max(0.0, start), end
        if duration is not None:
            end = min(end, duration)
        if end > start:
            out.append(Turn(start, end, t.speaker))
    out.sort(key=lambda t: (t.start, t.end))
    return out


def _merge_own(turns: list[Turn]) -> list[Turn]:
    """Each speaker's overlapping or touching turns merged into one."""
    merged: dict[str, list[Turn]] = {}
    for t in turns:
        own = merged.setdefault(t.speaker, [])
        if own and t.start <= own[-1].end:
            own[-1] = Turn(own[-1].start, max(own[-1].end, t.end), t.speaker)
        else:
            own.append(t)
    return sorted((t for own in merged.values() for t in own), key=lambda t: (t.start, t.end))


def exclusive_turns(turns: Iterable[Turn]) -> list[Turn]:
    """One speaker at a time, from turns that may overlap: what pyannote.audio 4 returns as its
    exclusive diarization, derived here for pyannote.audio 3.x, which only returns the turns.

    Where turns overlap, a turn lying inside every other turn active there (an interjection or a
    backchannel inside a longer turn) keeps its time and the longer turn keeps the rest; otherwise
    (one speaker takes over from another) the shared stretch is split at its midpoint, the first
    half to the speaker who was talking first. Every speaker keeps every moment nobody else speaks
    in; the result is sorted, with no overlaps and adjacent pieces of one speaker merged.
    """
    clean = _merge_own(clean_turns(turns))
    if not clean:
        return []
    bounds = sorted({x for t in clean for x in (t.start, t.end)})
    pieces: list[Turn] = []

    def add(start: float, end: float, speaker: str) -> None:
        if end <= start:
            return
        if pieces and pieces[-1].speaker == speaker and pieces[-1].end >= start:
            pieces[-1] = Turn(pieces[-1].start, end, speaker)
        else:
            pieces.append(Turn(start, end, speaker))

    active: list[Turn] = []
    following = 0  # clean[following:] start later than the current stretch
    for a, b in zip(bounds, bounds[1:]):
        while following < len(clean) and clean[following].start <= a:
            active.append(clean[following])
            following += 1
        active = [t for t in active if t.end >= b]
        if not active:
            continue
        if len(active) == 1:
            add(a, b, active[0].speaker)
            continue
        inside = [t for t in active
                  if all(o is t or (o.start <= t.start and t.end <= o.end) for o in active)]
        if inside:
            add(a, b, min(inside, key=lambda t: (t.end - t.start, t.start)).speaker)
            continue
        # a hand-over: split the stretch all active turns share at its midpoint
        middle = (max(t.start for t in active) + min(t.end for t in active)) / 2
        first = min(active, key=lambda t: (t.start, t.end))
        last = max(active, key=lambda t: (t.end, t.start))
        add(a, min(b, max(a, middle)), first.speaker)
        add(max(a, min(b, middle)), b, last.speaker)
    return pieces


class SpeakerIndex:
    """Interval index over speaker turns: overlap and nearest-turn queries in O(log T + k)."""

    def __init__(self, turns: Iterable[Turn]):
        self.turns = clean_turns(turns)
        self._starts = [t.start for t in self.turns]
        # _max_end[i] = max(end of turns[0..i]): lets a query stop scanning backwards early
        self._max_end: list[float] = []
        running = -math.inf
        for t in self.turns:
            running = max(running, t.end)
            self._max_end.append(running)
        # turns sorted by end, for the nearest-turn lookup to the left of a point
        self._by_end = sorted(self.turns, key=lambda t: t.end)
        self._ends = [t.end for t in self._by_end]

    def __len__(self) -> int:
        return len(self.turns)

    def overlaps(self, start: float, end: float) -> dict[str, float]:
        """Seconds of overlap with ``[start, end]`` per speaker (only speakers that overlap)."""
        result: dict[str, float] = {}
        i = bisect.bisect_left(self._starts, end) - 1  # last turn starting before `end`
        while i >= 0 and self._max_end[i] > start:
            t = self.turns[i]
            overlap = min(end, t.end) - max(start, t.start)
            if overlap > 0:
                result[t.speaker] = result.get(t.speaker, 0.0) + overlap
            i -= 1
        return result

    def turns_in(self, start: float, end: float) -> list[Turn]:
        """The turns that overlap ``[start, end]`` by more than zero, in start order."""
        found = []
        i = bisect.bisect_left(self._starts, end) - 1
        while i >= 0 and self._max_end[i] > start:
            t = self.turns[i]
            if min(end, t.end) > max(start, t.start):
                found.append(t)
            i -= 1
        return found[::-1]

    def nearest(self, start: float, end: float) -> Optional[Turn]:
        """The turn closest to ``[start, end]`` (gap measured between the nearest edges); ties
        go to the turn that comes first."""
        best, best_gap = None, math.inf
        j = bisect.bisect_right(self._ends, start) - 1  # latest-ending turn ending at/before start
        if j >= 0:
            best, best_gap = self._by_end[j], start - self._by_end[j].end
        k = bisect.bisect_left(self._starts, end)  # first turn starting at/after end
        if k < len(self.turns) and self.turns[k].start - end < best_gap:
            best = self.turns[k]
        return best

    def speaker_at(self, start: float, end: float) -> Optional[str]:
        """The speaker for a piece spanning ``[start, end]``: largest total overlap, else the
        nearest turn's, else None when there are no turns. A zero-length piece is looked up as
        the point it is (the turn that contains it)."""
        if not self.turns:
            return None
        if end <= start:
            eps = 1e-6
            start, end = start - eps, start + eps
        overlaps = self.overlaps(start, end)
        if overlaps:
            # max overlap; deterministic tie-break by speaker label
            return max(sorted(overlaps), key=lambda s: overlaps[s])
        nearest = self.nearest(start, end)
        return nearest.speaker if nearest else None



def resolve_times(spans: Sequence[tuple[Optional[float], Optional[float]]], duration: float
                  ) -> list[tuple[float, float]]:
    """Fill in missing times and clamp: a missing start takes the previous end (0 at first), a
    missing end takes the next known start (the audio duration at the end); every pair is then
    clamped to ``[0, duration]``, made non-decreasing across the sequence and ``start <= end``."""
    duration = max(0.0, _finite(duration) or 0.0)
    n = len(spans)
    starts = [_finite(s) for s, _ in spans]
    ends = [_finite(e) for _, e in spans]
    # next known start after each index, for missing ends
    next_start: list[Optional[float]] = [None] * n
    upcoming = None
    for i in range(n - 1, -1, -1):
        next_start[i] = upcoming
        if starts[i] is not None:
            upcoming = starts[i]
    out = []
    previous_end = 0.0
    for i in range(n):
        start = starts[i] if starts[i] is not None else previous_end
        start = min(max(start, 0.0), duration)
        start = max(start, out[-1][0]) if out else start  # starts never go backwards
        end = ends[i]
        if end is None:
            end = next_start[i] if next_start[i] is not None else duration
        end = min(max(end, start), duration)
        out.append((start, end))
        previous_end = end
    return out


def assign_speakers(pieces: Sequence[Word], turns: Iterable[Turn]) -> list[Word]:
    """Each piece gets ``speaker_at`` its span. Pieces and their order are kept as they are."""
    index = turns if isinstance(turns, SpeakerIndex) else SpeakerIndex(turns)
    return [Word(p.text, p.start, p.end, index.speaker_at(p.start, p.end)) for p in pieces]


def merge_by_speaker(pieces: Sequence[Word]) -> list[Word]:
    """Join consecutive pieces of the same speaker into one (text concatenated as Whisper wrote
    it, start of the first, end of the last)."""
    merged: list[Word] = []
    for p in pieces:
        if merged and merged[-1].speaker == p.speaker:
            last = merged[-1]
            merged[-1] = Word(last.text + p.text, last.start, max(last.end, p.end), last.speaker)
        else:
            merged.append(Word(p.text, p.start, p.end, p.speaker))
    return merged


# --------------------------------------------------------------------------- word level

SENTENCE_END = (".", "?", "!", "。", "？", "！", "…")


def tidy_word_times(words: Sequence[Word], cap: float = 0.7) -> list[Word]:
    """Trim words that cross-attention timing stretched over a pause, as OpenAI's Whisper does
    (``add_word_timestamps``): DTW tends to glue leading silence onto the first word of a window
    (a "Hello" timed 0.0-6.98 s when it is spoken at 6.7 s) and trailing silence onto the word
    that ends a sentence. Such a word at a sentence boundary (the first word, a word after a
    sentence end, or a word ending one) is cut to twice the median word duration (median capped
    at ``cap`` seconds), keeping its edge that touches speech. Other words are left alone."""
    durations = sorted(w.end - w.start for w in words if w.end > w.start)
    if not durations:
        return list(words)
    median = min(durations[len(durations) // 2], cap)
    longest = 2 * median
    out = []
    for i, w in enumerate(words):
        start, end = w.start, w.end
        if end - start > longest:
            starts_sentence = i == 0 or words[i - 1].text.strip().endswith(SENTENCE_END)
            if starts_sentence:
                start = end - longest
            elif w.text.strip().endswith(SENTENCE_END):
                end = start + longest
        out.append(Word(w.text, start, end, w.speaker))
    return out


# the rules of attribute_words, each of which can be left out (the evaluation's ablations)
RULES = ("tidy", "overlaps", "coherence", "orphans")
# a word is in overlapped speech when at least this share of it lies where two of the speakers
# who cover it talk at once
OVERLAPPED_SHARE = 0.5


def _talking_at_once(index: SpeakerIndex, start: float, end: float) -> tuple[set[str], float]:
    """The speakers whose turns overlap each other inside ``[start, end]`` (people talking at
    once there, not merely two turns that each cover part of the span), and the share of the
    span where they do."""
    found = index.turns_in(start, end)
    speakers: set[str] = set()
    stretches = []
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            lo, hi = max(a.start, b.start, start), min(a.end, b.end, end)
            if a.speaker != b.speaker and hi > lo:
                speakers.update((a.speaker, b.speaker))
                stretches.append((lo, hi))
    covered, reach = 0.0, start
    for lo, hi in sorted(stretches):
        lo = max(lo, reach)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return speakers, covered / (end - start) if end > start else 0.0


def _containing(index: SpeakerIndex, speaker: str, start: float, end: float) -> Optional[Turn]:
    """``speaker``'s turn that overlaps ``[start, end]`` most."""
    own = [t for t in index.turns_in(start, end) if t.speaker == speaker]
    return max(own, key=lambda t: min(end, t.end) - max(start, t.start), default=None)


def _first_pass(words: Sequence[Word], regular: SpeakerIndex, heard: Optional[SpeakerIndex],
                overlaps: bool) -> list[Word]:
    """Each word's speaker from the regular turns: the speaker who covers most of it (the nearest
    turn's when none does). With ``overlaps``, a word said while two of the speakers who cover
    it talk at once (:data:`OVERLAPPED_SHARE`) goes to the one Whisper was most likely writing:

    1. the dominant voice there, when the diarization's own exclusive turns (``heard``:
       pyannote 4) give one of them at least half of the word -- Whisper writes one voice, the
       loudest;
    2. else, in the middle of a sentence, the speaker of the word before, when that speaker's
       turns cover the whole word -- Whisper keeps following the voice it was writing while that
       voice goes on (a "hmm" inside a long turn does not take the long turn's words);
    3. else the one ``heard`` covering more of it, else the one whose turn began last (a new
       sentence comes with a new turn: a reply said over the end of another's)."""
    out: list[Word] = []
    previous: Optional[Word] = None
    for w in words:
        start, end = w.start, w.end
        if end <= start:
            start, end = start - 1e-6, start + 1e-6
        shares = coverage(regular, start, end)
        speaker = None
        if shares:
            speaker = max(sorted(shares), key=lambda k: shares[k])
            talking, share = _talking_at_once(regular, start, end)
            talking &= {k for k, v in shares.items() if v >= WEAK_SECOND}
            if overlaps and len(talking) >= 2 and share >= OVERLAPPED_SHARE:
                loud = {k: v for k, v in (coverage(heard, start, end) if heard else {}).items()
                        if k in talking}
                loudest = max(sorted(loud), key=lambda k: loud[k]) if loud else None
                mid_sentence = previous is not None and not previous.text.strip().endswith(SENTENCE_END)
                if loudest is not None and loud[loudest] >= 0.5:
                    speaker = loudest
                elif mid_sentence and shares.get(previous.speaker, 0.0) >= 1.0 - 1e-6:
                    speaker = previous.speaker
                elif loudest is not None:
                    speaker = loudest
                else:
                    speaker = max(sorted(talking), key=lambda k: _containing(regular, k, start, end).start)
        elif len(regular):
            speaker = regular.nearest(start, end).speaker
        word = Word(w.text, w.start, w.end, speaker)
        out.append(word)
        previous = word
    return out


# how far (seconds) a sentence's speaker's turns may lie from one of its weak words for the word
# to join them (see sentence_coherence)
COHERENCE_REACH = 1.0


def sentence_coherence(words: Sequence[Word], index: SpeakerIndex) -> list[Word]:
    """A word the turns do not single out (:func:`weak_evidence`: in a pause, across a turn edge,
    in overlapped speech, or of no length) takes the speaker of its sentence when every word of
    that sentence the turns do single out has one speaker, and that speaker's turns lie within
    :data:`COHERENCE_REACH` of the word. Whisper's sentences are one voice far more often than
    its word times are right at a turn edge ("I'm | not a hundred percent sure", "I'm" timed
    from 0 s over another speaker's untranscribed words). Returns new pieces; times untouched."""
    out = [Word(w.text, w.start, w.end, w.speaker) for w in words]
    weak = [w.end <= w.start or weak_evidence(coverage(index, w.start, w.end)) for w in out]
    for a, b in _sentences(out):
        clear = {out[k].speaker for k in range(a, b) if not weak[k]}
        if len(clear) != 1:
            continue
        (speaker,) = clear
        if speaker is None:
            continue
        for k in range(a, b):
            if weak[k] and out[k].speaker != speaker and any(
                    t.speaker == speaker for t in index.turns_in(out[k].start - COHERENCE_REACH,
                                                                 out[k].end + COHERENCE_REACH)):
                out[k].speaker = speaker
    return out


def attribute_words(words: Sequence[Word], turns: Iterable[Turn],
                    exclusive: Optional[Iterable[Turn]] = None,
                    rules: Iterable[str] = RULES) -> list[Word]:
    """Speaker per word, from the diarization's ``turns`` (which may overlap) and, where the
    diarization has one, its own ``exclusive`` turns (pyannote 4: the dominant speaker at each
    moment; None for pyannote 3.x, whose exclusive turns would only be derived from ``turns``).

    The rules, in this order, each of which can be left out (``rules``; none: plain word-level
    max overlap on ``turns``, the nearest turn for a word in a pause):

    * ``tidy`` -- :func:`tidy_word_times`: words stretched over a pause at a sentence boundary
      are cut back to the edge that touches speech;
    * ``overlaps`` -- words said while two people talk at once go to the voice Whisper was most
      likely writing (:func:`_first_pass`);
    * ``coherence`` -- a word the turns do not single out takes its sentence's speaker
      (:func:`sentence_coherence`);
    * ``orphans`` -- a turn that got no word takes back the short sentence timed just after it
      (:func:`orphan_turns`).

    Measured on real AMI meetings and on the generated dialogues, each rule's effect is in
    eval/README.md. The returned words carry the (tidied) times the attribution judged by."""
    rules = frozenset(rules)
    unknown = sorted(rules - set(RULES))
    if unknown:
        raise ValueError(f"unknown attribution rule {unknown[0]!r}: the rules are {', '.join(RULES)}")
    regular = turns if isinstance(turns, SpeakerIndex) else SpeakerIndex(turns)
    heard = SpeakerIndex(exclusive) if exclusive is not None else None
    words = tidy_word_times(words) if "tidy" in rules else list(words)
    out = _first_pass(words, regular, heard, "overlaps" in rules)
    if len(out) < 2 or not len(regular):
        return out
    if "coherence" in rules:
        out = sentence_coherence(out, regular)
    if "orphans" in rules:
        out = orphan_turns(out, regular)
    return out


# a word's turn evidence is weak when its best speaker covers less than WEAK_BEST of it or a
# second speaker covers at least WEAK_SECOND of it (see weak_evidence)
WEAK_BEST = 0.5
WEAK_SECOND = 0.1


def coverage(index: SpeakerIndex, start: float, end: float) -> dict[str, float]:
    """Share of ``[start, end]`` each speaker's turns cover (a zero-length span: 1.0 for each
    speaker with a turn containing the point)."""
    if end <= start:
        eps = 1e-6
        return {s: 1.0 for s in index.overlaps(start - eps, start + eps)}
    return {s: min(1.0, v / (end - start)) for s, v in index.overlaps(start, end).items()}


def weak_evidence(shares: dict[str, float]) -> bool:
    """True when the turns do not single out one speaker for a word: no turn covers most of it
    (it sits in a pause, or the turn edges are off), or two speakers' turns both cover a real
    part of it (a speaker change or overlapped speech)."""
    ranked = sorted(shares.values(), reverse=True)
    return not ranked or ranked[0] < WEAK_BEST or (len(ranked) > 1 and ranked[1] >= WEAK_SECOND)


# orphan_turns: the longest sentence (words) moved into a turn that got no word, how far from the
# turn it may lie (seconds), the shortest turn that counts, and how much of the turn other
# speakers' turns may cover (more: a backchannel inside another's turn, often not transcribed)
ORPHAN_WORDS = 3
ORPHAN_REACH = 1.2
ORPHAN_MIN_TURN = 0.25
ORPHAN_MAX_COVERED = 0.5


def _sentences(words: Sequence[Word]) -> list[tuple[int, int]]:
    """(first, last + 1) word index of each sentence."""
    spans, a = [], 0
    for i, w in enumerate(words):
        if w.text.strip().endswith(SENTENCE_END):
            spans.append((a, i + 1))
            a = i + 1
    if a < len(words):
        spans.append((a, len(words)))
    return spans


CLAUSE_END = (",", ";", ":", "，", "、", "；", "：")


def _short_spans(words: Sequence[Word]) -> list[tuple[int, int]]:
    """(first, last + 1) of each sentence of at most :data:`ORPHAN_WORDS` words, and of a longer
    sentence's opening and closing clause of at most that many ("No, | you should go"; Whisper
    often joins a one-word reply to the next speaker's sentence with a comma)."""
    spans = []
    for a, b in _sentences(words):
        if b - a <= ORPHAN_WORDS:
            spans.append((a, b))
        ends = [k for k in range(a, b - 1) if words[k].text.strip().endswith(CLAUSE_END)]
        if ends and ends[0] + 1 - a <= ORPHAN_WORDS:
            spans.append((a, ends[0] + 1))
        if ends and b - (ends[-1] + 1) <= ORPHAN_WORDS:
            spans.append((ends[-1] + 1, b))
    return spans


def orphan_turns(words: Sequence[Word], index: SpeakerIndex) -> list[Word]:
    """Give a turn that received no word the short sentence its words were timed out of.

    A short reply ("Really?", "Yes.") between two other speakers' turns is where Whisper's word
    timing is worst: measured on the tuning dialogues, tiny.en put such a word up to 1.4 s after
    its turn, into the pause or the next speaker's turn, while its own turn -- the diarization heard
    someone there -- got no word at all. For each turn of at least :data:`ORPHAN_MIN_TURN` s in the
    clear (other speakers' turns cover at most :data:`ORPHAN_MAX_COVERED` of it) whose speaker got
    no word overlapping it, the nearest span of at most :data:`ORPHAN_WORDS` words starting
    after the turn starts and within :data:`ORPHAN_REACH` s of it -- a whole sentence, or the
    opening or closing clause of one (see :func:`_short_spans`) -- given to one other speaker who
    keeps other words within 2 s, moves to the turn's speaker. Only words timed late: in real
    meetings a turn without a word is mostly speech Whisper left out (a "hmm" over the end of
    another's sentence), and the closing clause it lies beside belongs to that sentence. Whole
    sentences go before clauses, then the nearest. Not when the span is
    all its owner has in one of the owner's own turns (one word transcribed for two replies:
    moving it would only empty that turn), and a span moved once is never taken back. Returns
    new pieces; times are untouched. Lookups go through start-sorted lists: O((N + T) log N)
    plus the words and spans near each turn."""
    out = [Word(w.text, w.start, w.end, w.speaker) for w in words]
    if not out:
        return out
    by_start = sorted(range(len(out)), key=lambda k: out[k].start)
    starts = [out[k].start for k in by_start]
    longest_word = max(w.end - w.start for w in out)

    def words_near(lo: float, hi: float) -> Iterator[int]:
        """Indices of the words with start < hi and end > lo."""
        i, j = bisect.bisect_left(starts, lo - longest_word), bisect.bisect_left(starts, hi)
        return (by_start[x] for x in range(i, j) if out[by_start[x]].end > lo)

    # the spans short enough to move, by start time
    short = sorted((out[a].start, out[b - 1].end, a, b) for a, b in _short_spans(out))
    short_starts = [x[0] for x in short]
    longest_span = max((end - start for start, end, _, _ in short), default=0.0)
    sentence_spans = set(_sentences(out))
    moved: set[int] = set()

    def in_the_clear(turn: Turn) -> bool:
        length = turn.end - turn.start
        covered = sum(v for s, v in index.overlaps(turn.start, turn.end).items() if s != turn.speaker)
        return length >= ORPHAN_MIN_TURN and covered <= ORPHAN_MAX_COVERED * length

    def has_word(turn: Turn, skip: range = range(0)) -> bool:
        return any(out[k].speaker == turn.speaker and k not in skip
                   for k in words_near(turn.start, turn.end))

    def candidates(turn: Turn) -> list[tuple[int, int]]:
        """Spans the turn may take, best first: whole sentences before clauses, then nearest,
        then earliest."""
        lo, hi = turn.start, turn.end
        first = bisect.bisect_left(short_starts, lo - ORPHAN_REACH - longest_span)
        last = bisect.bisect_right(short_starts, hi + ORPHAN_REACH)
        ranked = []
        for start, end, a, b in short[first:last]:
            owner = out[a].speaker
            if owner in (None, turn.speaker) or any(out[k].speaker != owner or k in moved
                                                    for k in range(a, b)):
                continue
            distance = max(0.0, lo - end, start - hi)
            if distance > ORPHAN_REACH or start < lo:  # only words timed late, not early
                continue
            if not any(out[k].speaker == owner for k in words_near(start - 2.0, end + 2.0)
                       if not a <= k < b):
                continue
            ranked.append(((a, b) not in sentence_spans, distance, a, b))
        return [(a, b) for *_, a, b in sorted(ranked)]

    for turn in index.turns:
        if not in_the_clear(turn) or has_word(turn):
            continue
        for a, b in candidates(turn):
            # not a span that is all its owner has in one of the owner's turns: taking it would
            # only leave that turn without a word (one word transcribed for two replies)
            start, end = out[a].start, out[b - 1].end
            if any(t.speaker == out[a].speaker and not has_word(t, range(a, b))
                   for t in index.turns_in(start, end)):
                continue
            moved.update(range(a, b))  # taken once: no other turn takes it back
            for k in range(a, b):
                out[k].speaker = turn.speaker
            break
    return out


def segment_of_each_word(segment_texts: Sequence[str], word_texts: Sequence[str]) -> list[int]:
    """Words and segments are two cuts of the same text: for each word, the index of the segment
    that holds its first non-space character (leading spaces belong to the gap). Words beyond
    the segments' text (if the texts disagree) go to the last segment; with no segments, 0."""
    seg_starts, pos = [], 0
    for t in segment_texts:
        seg_starts.append(pos)
        pos += len(t)
    out, pos, j = [], 0, 0
    for t in word_texts:
        first = pos + len(t) - len(t.lstrip())
        while j + 1 < len(seg_starts) and first >= seg_starts[j + 1]:
            j += 1
        out.append(j)
        pos += len(t)
    return out


def split_segments(segment_texts: Sequence[str], words: Sequence[Word]) -> list[Segment]:
    """Group speaker-attributed words back into Whisper's segments, splitting a segment wherever
    the speaker changes. Each word goes to the segment that holds its first character
    (:func:`segment_of_each_word`); words left over (if the texts disagree) join the last
    segment. Every word lands in exactly one output segment, in order."""
    groups: list[list[Word]] = [[] for _ in segment_texts] or [[]]
    for w, j in zip(words, segment_of_each_word(segment_texts, [w.text for w in words])):
        groups[j].append(w)
    out: list[Segment] = []
    for group in groups:
        run: list[Word] = []
        for w in group:
            if run and w.speaker != run[-1].speaker:
                out.append(_segment(run))
                run = []
            run.append(w)
        if run:
            out.append(_segment(run))
    return out


def _segment(words: list[Word]) -> Segment:
    return Segment("".join(w.text for w in words), words[0].start, max(w.end for w in words),
                   words[0].speaker, list(words))


# the share of a word another speaker's turn must cover for the word to count as cross-talk
OVERLAP_SHARE = 0.5


def cross_talk(words: Sequence[Word], turns: Iterable[Turn]) -> list[list[str]]:
    """For each attributed word, the other speakers talking while it is said: those whose turns
    (the regular, overlapping ones) cover at least :data:`OVERLAP_SHARE` of the word (a
    zero-length word: its instant), sorted by label; ``[]`` for most words."""
    index = turns if isinstance(turns, SpeakerIndex) else SpeakerIndex(turns)
    out = []
    for w in words:
        start, end = _finite(w.start), _finite(w.end)
        if start is None or end is None or not len(index):
            out.append([])
            continue
        shares = coverage(index, start, max(start, end))
        out.append(sorted(s for s, v in shares.items()
                          if s != w.speaker and v >= OVERLAP_SHARE - 1e-9))
    return out
