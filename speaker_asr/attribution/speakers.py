"""Speaker alignment: give every piece of transcript a speaker. Pure Python, no torch.

Inputs are plain data: speaker turns ``Turn(start, end, speaker)`` from the diarization, and
transcript pieces (chunks or words) with ``(start, end)`` times in seconds, either of which may be
missing (``None``) as Whisper sometimes leaves them.

* a chunk (:func:`assign_speakers`) takes the speaker whose turns overlap it most, else the
  nearest turn's;
* a word (:func:`attribute_words`) takes the speaker with the highest score, one choice per word:
  a sum of named weights (:data:`WEIGHTS`) times named evidence -- how much of the word their
  turns cover, whether they are the dominant voice where people talk at once (pyannote 4's
  exclusive turns), whether they are the voice Whisper was writing on the word before, whether
  they are the speaker of the word's sentence, less the gap to their nearest turn;
* with no turns at all (silence, music, diarization off) pieces get no speaker;
* nothing is ever dropped, and every output time is finite, within ``[0, duration]`` and
  ``start <= end``.

Lookups go through :class:`~speaker_asr.attribution.turns.SpeakerIndex`, an interval index
(sorted starts + running maximum of ends), so attributing N pieces against T turns costs
O((N + T) log T) plus the turns found near each piece, not O(N * T).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from speaker_asr.attribution.turns import (SpeakerIndex, clean_turns, exclusive_turns,  # noqa: F401
                                           finite, span)
from speaker_asr.types import Segment, Turn, Word


def resolve_times(spans: Sequence[tuple[Optional[float], Optional[float]]], duration: float
                  ) -> list[tuple[float, float]]:
    """Fill in missing times and clamp: a missing start takes the previous end (0 at first), a
    missing end takes the next known start (the audio duration at the end); every pair is then
    clamped to ``[0, duration]``, made non-decreasing across the sequence and ``start <= end``."""
    duration = max(0.0, finite(duration) or 0.0)
    n = len(spans)
    starts = [finite(s) for s, _ in spans]
    ends = [finite(e) for _, e in spans]
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


# --------------------------------------------------------------------------- word level

SENTENCE_END = (".", "?", "!", "。", "？", "！", "…")


def tidy_word_times(words: Sequence[Word], cap: float = 0.7,
                    speech: Optional[SpeakerIndex] = None) -> list[Word]:
    """Trim words that cross-attention timing stretched over a pause, as OpenAI's Whisper does
    (``add_word_timestamps``): DTW tends to glue leading silence onto the first word of a window
    (a "Hello" timed 0.0-6.98 s when it is spoken at 6.7 s) and trailing silence onto the word
    that ends a sentence. Such a word at a sentence boundary (the first word, a word after a
    sentence end, or a word ending one) is cut to twice the median word duration (median capped
    at ``cap`` seconds), keeping its edge that touches speech (:func:`_kept_edge`; ``speech``:
    the speaker turns, which tell where the speech is). Other words are left alone."""
    durations = sorted(w.end - w.start for w in words if w.end > w.start)
    if not durations:
        return list(words)
    median = min(durations[len(durations) // 2], cap)
    longest = 2 * median
    out = []
    for i, w in enumerate(words):
        start, end = w.start, w.end
        starts_sentence = i == 0 or words[i - 1].text.strip().endswith(SENTENCE_END)
        ends_sentence = w.text.strip().endswith(SENTENCE_END)
        if end - start > longest and (starts_sentence or ends_sentence):
            # the transcript's first word: the leading silence DTW glues on is the known case
            keep = _kept_edge(start, end, longest, starts_sentence, ends_sentence,
                              speech if i > 0 else None)
            if keep == "start":
                end = start + longest
            elif keep == "end":
                start = end - longest
        out.append(Word(w.text, start, end, w.speaker))
    return out


def _kept_edge(start: float, end: float, longest: float, starts_sentence: bool, ends_sentence: bool,
               speech: Optional[SpeakerIndex]) -> Optional[str]:
    """Which edge of a stretched word tidy keeps ("start", "end", or None for the whole word):
    the one in speech when the turns put one cut piece in speech (at least half of it inside
    turns) and the other in a pause; otherwise by the word's place -- the end of a word that
    starts a sentence, the start of one that ends it, the whole of a one-word sentence (either
    edge could be its own)."""
    if speech is not None:
        head = _speech(speech, start, start + longest) >= 0.5 * longest
        tail = _speech(speech, end - longest, end) >= 0.5 * longest
        if head != tail:
            return "start" if head else "end"
    if starts_sentence and ends_sentence:
        return None if speech is not None else "end"
    return "end" if starts_sentence else "start"


def _speech(index: SpeakerIndex, start: float, end: float) -> float:
    """Seconds of ``[start, end]`` inside anyone's turn."""
    return sum(b - a for a, b in _union([(max(start, t.start), min(end, t.end))
                                         for t in index.turns_in(start, end)]))


# --------------------------------------------------------------------------- the word decision

# The score of a candidate speaker for a word is the sum of these weights times their evidence,
# in units of "one whole word covered by a speaker's turns" (cover = 1). Round numbers, each with
# its reason; none is fitted to the evaluation's words.
WEIGHTS: Mapping[str, float] = {
    # the share of the word the speaker's regular (overlapping) turns cover: the basic evidence,
    # the unit the others are measured in
    "cover": 1.0,
    # the share of the word where people talk at once and pyannote 4's own exclusive turns give
    # it to this speaker (the dominant voice, the one Whisper writes): as strong as coverage,
    # since it is the same model saying which of two covering voices was the louder -- it
    # settles the tie two covering turns make, and no more
    "dominant": 1.0,
    # the share of the word where people talk at once, for the speaker whose turn there began
    # last: a sentence that starts over someone else's speech is mostly a new turn (a reply said
    # over the end of another's). A quarter word: it settles only a tie nothing else settles
    # (pyannote 3.x, no dominant voice, at the start of a sentence)
    "newest": 0.25,
    # 1 for the speaker of the previous word of the same sentence when their turns cover the
    # whole of this word (a zero-length word: hold its instant): Whisper keeps writing the voice
    # it was writing while that voice goes on. Half a word: since that speaker covers the whole
    # word, nobody covers more, so it settles a tie between covering turns (against newest and
    # part of dominant), never a clear share. A voice whose turn ends or begins inside the word
    # does not go on through it and gets nothing (scaled by its share instead, it added half
    # again to a partial cover and could outweigh a larger one)
    "continuity": 0.5,
    # the sentence's speaker (:func:`sentence_speakers`: the one speaker the words that single
    # out a speaker in that sentence agree on): Whisper's sentences are one voice far more often
    # than its word times are right at a turn edge. A whole word: it outweighs most evidence of a
    # word the turns do not single out (not a larger cover with dominant and newest on top of it,
    # e.g. AMI EN2001a " than" in eval/README.md), and never meets a word that singles out
    # someone else (that word would have made the sentence ambiguous)
    "sentence": 1.0,
    # subtracted per second between the word and the speaker's nearest turn: a speaker 1 s away
    # has lost a whole word's coverage, so the sentence's speaker reaches 1 s (:data:`REACH`)
    "gap": 1.0,
}
# how far (seconds) from a word a speaker's turns may lie for the speaker to be a candidate:
# weight of the sentence's speaker / weight of the gap, the furthest a speaker with no turn on
# the word can still outscore one whose turn touches it. The nearest turn's speaker is always a
# candidate, so no word is left without a speaker when there are turns.
REACH = WEIGHTS["sentence"] / WEIGHTS["gap"]
# a word singles out a speaker when that speaker's turns cover at least CLEAR_SHARE of it and no
# other speaker's cover OTHERS_SHARE of it (and it has a length): half the word, and a tenth --
# a tenth of a 0.3 s word is 30 ms, about where turn edges stop being noise
CLEAR_SHARE = 0.5
OTHERS_SHARE = 0.1

# the parts of attribute_words that can be left out (the evaluation's ablations): the step "tidy"
# (before the decision) and the decision's optional evidence, left out by setting its weight to 0.
# There is no "orphans" pass (a turn that got no word taking back a short sentence timed after
# it): on the real meetings it cost 1-4 words in every mode and fixed none.
RULES = ("tidy", "dominant", "newest", "continuity", "sentence")


@dataclass
class Evidence:
    """What the turns say about one word, per candidate speaker: ``cover`` and ``dominant``
    (shares of the word, 0-1) and ``gap`` (seconds to the speaker's nearest turn; its keys are
    the candidates)."""

    cover: dict[str, float] = field(default_factory=dict)
    present: dict[str, float] = field(default_factory=dict)
    dominant: dict[str, float] = field(default_factory=dict)
    newest: dict[str, float] = field(default_factory=dict)
    gap: dict[str, float] = field(default_factory=dict)


def _union(stretches: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(stretches):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def word_evidence(regular: SpeakerIndex, heard: Optional[SpeakerIndex], start: float,
                  end: float) -> Evidence:
    """The evidence for the word ``[start, end]`` from the regular turns and pyannote 4's own
    exclusive turns (``heard``; None for pyannote 3.x). A zero-length word covers nothing (its
    instant is no evidence of who said it; ``present`` holds that instant's cover, for
    continuity)."""
    lo, hi = span(start, end)
    ev = Evidence()
    found = regular.turns_in(lo - REACH, hi + REACH)
    if not found:
        nearest = regular.nearest(lo, hi)
        if nearest is None:
            return ev
        found = [nearest]
    covering = []
    for t in found:
        ev.gap[t.speaker] = min(ev.gap.get(t.speaker, REACH + 1e9), max(0.0, t.start - hi, lo - t.end))
        if min(hi, t.end) > max(lo, t.start):
            covering.append(t)
            share = (min(hi, t.end) - max(lo, t.start)) / (hi - lo)
            ev.present[t.speaker] = min(1.0, ev.present.get(t.speaker, 0.0) + share)
    if end > start:
        ev.cover = dict(ev.present)
    if len(covering) < 2:
        return ev
    # the stretches inside the word where two speakers' turns overlap: people talking at once
    pairs = [(a, b) for i, a in enumerate(covering) for b in covering[i + 1:]
             if a.speaker != b.speaker and min(a.end, b.end) > max(a.start, b.start)]
    talking = _union([(max(a.start, b.start, lo), min(a.end, b.end, hi)) for a, b in pairs])
    if talking:
        # the one speaker whose turn began last; turns that began together make nobody newest
        begun = [t for pair in pairs for t in pair]
        last = max(t.start for t in begun)
        newest = {t.speaker for t in begun if t.start == last}
        if len(newest) == 1 and any(t.start < last for t in begun):
            ev.newest[newest.pop()] = sum(b - a for a, b in talking) / (hi - lo)
    if heard is not None:
        # who pyannote 4 heard there
        for a, b in talking:
            for speaker, seconds in heard.overlaps(a, b).items():
                ev.dominant[speaker] = ev.dominant.get(speaker, 0.0) + seconds / (hi - lo)
    return ev


def singled_out(ev: Evidence) -> Optional[str]:
    """The speaker the word's turns single out (:data:`CLEAR_SHARE`, :data:`OTHERS_SHARE`), or
    None: the word sits in a pause, across a turn edge, in overlapped speech, or has no length."""
    ranked = sorted(ev.cover.items(), key=lambda kv: (-kv[1], kv[0]))
    if not ranked or ranked[0][1] < CLEAR_SHARE or (len(ranked) > 1 and ranked[1][1] >= OTHERS_SHARE):
        return None
    return ranked[0][0]


def sentence_speakers(words: Sequence[Word], evidence: Sequence[Evidence]) -> list[Optional[str]]:
    """For each word, its sentence's speaker: the one speaker every word of the sentence that
    singles out a speaker (:func:`singled_out`) singles out; None when they name none or two."""
    out: list[Optional[str]] = [None] * len(words)
    for a, b in _sentences(words):
        clear = {singled_out(evidence[k]) for k in range(a, b)} - {None}
        if len(clear) == 1:
            (speaker,) = clear
            out[a:b] = [speaker] * (b - a)
    return out


def goes_on(ev: Evidence, speaker: str) -> bool:
    """Whether ``speaker``'s turns cover the whole word (its instant, for a zero-length word)."""
    return ev.present.get(speaker, 0.0) >= 1.0 - 1e-9


def _weights(rules: frozenset, weights: Optional[Mapping[str, float]]) -> dict[str, float]:
    out = dict(WEIGHTS)
    unknown = sorted(set(weights or {}) - set(WEIGHTS))
    if unknown:
        raise ValueError(f"unknown attribution weight {unknown[0]!r}: the weights are {', '.join(WEIGHTS)}")
    out.update(weights or {})
    for name in WEIGHTS:
        if name in RULES and name not in rules:
            out[name] = 0.0
    return out


def attribute_words(words: Sequence[Word], turns: Iterable[Turn],
                    exclusive: Optional[Iterable[Turn]] = None, rules: Iterable[str] = RULES,
                    weights: Optional[Mapping[str, float]] = None) -> list[Word]:
    """Speaker per word, from the diarization's ``turns`` (which may overlap) and, where the
    diarization has them, its own ``exclusive`` turns (pyannote 4: the dominant speaker at each
    moment; None for pyannote 3.x, whose exclusive turns would only be derived from ``turns``).

    One choice per word, left to right: each candidate speaker (turns within :data:`REACH` of
    the word, and the nearest turn's) scores

        cover + dominant + 0.25 x newest + 0.5 x continuity + sentence - gap   (:data:`WEIGHTS`)

    and the highest score wins, ties to the first label. ``cover``: the share of the word the
    speaker's turns cover; ``dominant``: the share where people talk at once and pyannote 4 heard
    this speaker; ``continuity``: 1 for the speaker chosen for the previous word of the same
    sentence when their turns cover the whole word; ``sentence``: 1 for the sentence's speaker (:func:`sentence_speakers`);
    ``gap``: seconds to the speaker's nearest turn. Before the decision, one step, ``tidy``
    (:func:`tidy_word_times`): words stretched over a pause at a sentence boundary are cut back
    to the edge that touches speech.

    ``rules`` (:data:`RULES`) leaves steps and evidence out (an evidence left out has weight 0;
    none: plain word-level max overlap on ``turns``, the nearest turn for a word in a pause);
    ``weights`` overrides :data:`WEIGHTS`. Each rule's effect on real AMI meetings is in
    eval/README.md. The returned words carry the (tidied) times the attribution judged by."""
    rules = frozenset(rules)
    unknown = sorted(rules - set(RULES))
    if unknown:
        raise ValueError(f"unknown attribution rule {unknown[0]!r}: the rules are {', '.join(RULES)}")
    weight = _weights(rules, weights)
    regular = turns if isinstance(turns, SpeakerIndex) else SpeakerIndex(turns)
    heard = SpeakerIndex(exclusive) if exclusive is not None and weight["dominant"] else None
    words = tidy_word_times(words, speech=regular) if "tidy" in rules else list(words)
    if not len(regular):
        return [Word(w.text, w.start, w.end, None) for w in words]
    evidence = [word_evidence(regular, heard, w.start, w.end) for w in words]
    sentence = sentence_speakers(words, evidence) if weight["sentence"] else [None] * len(words)
    out: list[Word] = []
    for k, (w, ev) in enumerate(zip(words, evidence)):
        following = out[-1].speaker if out and not out[-1].text.strip().endswith(SENTENCE_END) else None

        def score(s: str) -> float:
            cover = ev.cover.get(s, 0.0)
            return round(weight["cover"] * cover + weight["dominant"] * ev.dominant.get(s, 0.0)
                         + weight["newest"] * ev.newest.get(s, 0.0)
                         + weight["continuity"] * (s == following and goes_on(ev, s))
                         + weight["sentence"] * (s == sentence[k]) - weight["gap"] * ev.gap[s], 9)

        out.append(Word(w.text, w.start, w.end, max(sorted(ev.gap), key=score)))
    return out


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


# the share of a word another speaker's turns must cover for that speaker to be listed as talking
# over it (the word's ``overlap``): half the word
CROSS_TALK_SHARE = 0.5


def cross_talk(words: Sequence[Word], turns: Iterable[Turn]) -> list[list[str]]:
    """For each attributed word, the other speakers talking while it is said: those whose turns
    (the regular, overlapping ones) cover at least :data:`CROSS_TALK_SHARE` of the word (a
    zero-length word: its instant), sorted by label; ``[]`` for most words."""
    index = turns if isinstance(turns, SpeakerIndex) else SpeakerIndex(turns)
    out = []
    for w in words:
        start, end = finite(w.start), finite(w.end)
        if start is None or end is None or not len(index):
            out.append([])
            continue
        shares = index.coverage(start, max(start, end))
        out.append(sorted(s for s, v in shares.items()
                          if s != w.speaker and v >= CROSS_TALK_SHARE - 1e-9))
    return out
