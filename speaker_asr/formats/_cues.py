"""Subtitle cues for SRT and VTT.

Cues are built from words when the segments have them (each word's own times), else from the
segments' text with times interpolated by character position inside each segment. The rules:

* a cue never mixes speakers, and never spans a pause longer than ``MAX_GAP_S``;
* at most ``MAX_LINES`` (2) lines of at most ``MAX_LINE`` (42) columns -- wide East Asian
  characters count two; in SRT the ``SPEAKER: `` prefix counts on the first line;
* at most ``MAX_CUE_S`` (7 s) per cue, unless one word alone is longer;
* when a cue must end, it ends preferably after a sentence end (``.?!``), else after a comma-like
  mark, provided that leaves at least a third of the text in the cue; the two lines are balanced,
  with a bonus for breaking after punctuation (more after a sentence end);
* a word wider than a line is cut into pieces;
* cue times are whole milliseconds, strictly increasing, non-overlapping, never empty.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Optional

from ._common import char_width, label, to_ms, width
from speaker_asr.result import Result

MAX_LINE = 42
MAX_LINES = 2
MAX_CUE_S = 7.0
MAX_GAP_S = 1.5
MIN_FIRST_LINE = MAX_LINE // 2  # room left on the first line whatever the speaker prefix
# columns of imbalance a line break is worth after a sentence end / after a comma-like mark
STRONG_BONUS = 14
WEAK_BONUS = 8

_STRONG = set(".?!…。？！‼⁇⁈⁉")
_WEAK = set(",;:、，；：—–")
_CLOSERS = set("\"'”’»)]}」』）")
_NON_SPACE = re.compile(r"\S+")


@dataclass(frozen=True)
class Token:
    text: str  # no whitespace inside
    sep: str  # "" or " ": what joins it to the previous token on a line
    start: float
    end: float
    speaker: Optional[str]
    cols: int = field(init=False, compare=False)  # display width of ``text``

    def __post_init__(self):
        object.__setattr__(self, "cols", width(self.text))


@dataclass(frozen=True)
class Cue:
    start: int  # milliseconds
    end: int
    speaker: Optional[str]
    lines: tuple[str, ...]


# --------------------------------------------------------------------------- tokens


def _split_text(text: str, start: float, end: float, speaker: Optional[str]) -> list[Token]:
    """Whitespace-separated tokens of ``text``, times interpolated by character position between
    its first and last non-space character."""
    clean = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in text)
    parts = [(m.group(), m.start()) for m in _NON_SPACE.finditer(clean)]
    if not parts:
        return []
    first, last = parts[0][1], parts[-1][1] + len(parts[-1][0])
    total = max(1, last - first)
    out = []
    for sub, at in parts:
        sep = " " if at > 0 and clean[at - 1].isspace() else ""
        out.append(Token(sub, sep, start + (end - start) * (at - first) / total,
                         start + (end - start) * (at + len(sub) - first) / total, speaker))
    return out


def result_tokens(result: Result) -> list[Token]:
    """Every word of the transcript in order, with times and speaker labels (a word's missing
    start is the previous word's end, a missing end its start)."""
    out: list[Token] = []
    for seg in result.segments:
        if not seg.words:
            out += _split_text(seg.text, seg.start, seg.end, label(seg.speaker))
            continue
        previous_end = seg.start
        for w in seg.words:
            start = w.start if w.start is not None else previous_end
            end = w.end if w.end is not None and w.end >= start else start
            out += _split_text(w.text, start, end, label(w.speaker))
            previous_end = end
    return out


def _hard_split(token: Token, limit: int) -> list[Token]:
    """A token wider than ``limit`` columns cut into pieces that fit (not inside a combining
    sequence), times shared by character count."""
    if token.cols <= limit:
        return [token]
    pieces, current, cols = [], "", 0
    for ch in token.text:
        w = char_width(ch)
        if current and cols + w > limit and w > 0 and not current.endswith("\u200d"):
            pieces.append(current)
            current, cols = "", 0
        current += ch
        cols += w
    pieces.append(current)
    out, at, n = [], 0, len(token.text)
    for i, piece in enumerate(pieces):
        t0 = token.start + (token.end - token.start) * at / n
        at += len(piece)
        t1 = token.start + (token.end - token.start) * at / n
        out.append(Token(piece, token.sep if i == 0 else "", t0, t1, token.speaker))
    return out


# --------------------------------------------------------------------------- layout


def _ends_with(token: Token, marks: set) -> bool:
    text = token.text.rstrip("".join(_CLOSERS))
    return bool(text) and text[-1] in marks


def _bonus(token: Token) -> int:
    return STRONG_BONUS if _ends_with(token, _STRONG) else WEAK_BONUS if _ends_with(token, _WEAK) else 0


def _join(tokens: list[Token]) -> str:
    return "".join((t.sep if i else "") + t.text for i, t in enumerate(tokens))


def _line_cols(tokens: list[Token]) -> list[int]:
    """``cols[k]``: display width of the first ``k`` tokens joined on one line."""
    cols = [0]
    for i, t in enumerate(tokens):
        cols.append(cols[-1] + (len(t.sep) if i else 0) + t.cols)
    return cols


def layout(tokens: list[Token], first_limit: int, reserve: int = 0) -> Optional[tuple[str, ...]]:
    """The lines of a cue (one, or two balanced), or None when the tokens do not fit."""
    cols = _line_cols(tokens)
    if cols[-1] <= first_limit:
        return (_join(tokens),)
    best_key, best_k = None, None
    for k in range(1, len(tokens)):
        wt = cols[k]
        if wt > first_limit:
            break
        wb = cols[-1] - wt - len(tokens[k].sep)
        if wb > MAX_LINE:
            continue
        key = (abs(wt + reserve - wb) - _bonus(tokens[k - 1]), k)
        if best_key is None or key < best_key:
            best_key, best_k = key, k
    if best_k is None:
        return None
    return (_join(tokens[:best_k]), _join(tokens[best_k:]))


def _duration(tokens: list[Token]) -> float:
    return max(t.end for t in tokens) - min(t.start for t in tokens)


def _cut(tokens: list[Token]) -> int:
    """How many tokens the cue being closed keeps: up to the last sentence end, else the last
    comma-like mark, that keeps at least a third of the text; else all of them."""
    cols = _line_cols(tokens)
    for marks in (_STRONG, _WEAK):
        for k in range(len(tokens), 0, -1):
            if 3 * cols[k] < cols[-1]:
                break
            if _ends_with(tokens[k - 1], marks):
                return k
    return len(tokens)


def _runs(tokens: list[Token]) -> list[list[Token]]:
    """Tokens split at speaker changes and at pauses longer than ``MAX_GAP_S``."""
    runs: list[list[Token]] = []
    for tok in tokens:
        if runs and runs[-1][-1].speaker == tok.speaker and tok.start - runs[-1][-1].end <= MAX_GAP_S:
            runs[-1].append(tok)
        else:
            runs.append([tok])
    return runs


def build_cues(tokens: list[Token], reserve: Callable[[Optional[str]], int] = lambda s: 0) -> list[Cue]:
    """Tokens -> cues. ``reserve(speaker)``: columns the first line gives to a speaker prefix."""
    raw: list[tuple[float, float, Optional[str], tuple[str, ...]]] = []
    for run in _runs(tokens):
        speaker = run[0].speaker
        extra = reserve(speaker)
        first_limit = max(MAX_LINE - extra, MIN_FIRST_LINE)
        pieces = [p for t in run for p in _hard_split(t, first_limit)]

        def fits(group: list[Token]) -> bool:
            return len(group) == 1 or (_duration(group) <= MAX_CUE_S
                                       and layout(group, first_limit, extra) is not None)

        groups, current = [], []
        for tok in pieces:
            while current and not fits(current + [tok]):
                k = _cut(current)
                groups.append(current[:k])
                current = current[k:]
            current.append(tok)
        if current:
            groups.append(current)
        for group in groups:
            lines = layout(group, first_limit, extra) or (_join(group),)
            raw.append((min(t.start for t in group), max(t.end for t in group), speaker, lines))
    return _sanitize(raw)


def _sanitize(raw: list[tuple[float, float, Optional[str], tuple[str, ...]]]) -> list[Cue]:
    """Whole milliseconds; each cue starts at or after the previous one's end and ends by the next
    one's start; at least 1 ms long. Text order is kept."""
    starts = [to_ms(s) for s, _, _, _ in raw]
    out: list[Cue] = []
    for i, (_, end, speaker, lines) in enumerate(raw):
        s = max(starts[i], out[-1].end) if out else starts[i]
        e = max(to_ms(end), s + 1)
        if i + 1 < len(raw) and starts[i + 1] > s:
            e = min(e, starts[i + 1])
        out.append(Cue(s, e, speaker, lines))
    return out


def cues_for(result: Result, reserve: Callable[[Optional[str]], int] = lambda s: 0) -> list[Cue]:
    return build_cues(result_tokens(result), reserve)


def timestamp(ms: int, decimal: str) -> str:
    """``HH:MM:SS<decimal>mmm``."""
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{decimal}{millis:03d}"
