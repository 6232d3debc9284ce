"""Find and remove text Whisper wrote without any audio under it. Pure Python, no torch.

Whisper's word times come from aligning the text to the audio (cross-attention DTW in 20 ms
frames). When the decoder runs on after the speech -- typically repeating earlier sentences at
the end of a window, because its own segment timestamps fell behind the audio -- the alignment
has no frames left for that text and gives every such word zero duration at one instant.
Measured on pyannote's two-speaker sample with whisper base: 20 words ("Oh, I don't hear that.
I'm Sheila. I'm Sheila and Texas originally from Chicago. ...", all timed 29.98-29.98 s)
repeating what was said before, which faster-whisper's decoding of the same weights does not
produce. No run of even two zero-length words occurred in any other transcript of the
evaluation set (tiny.en and base over six files).

A second form of the same failure: the decoder repeats earlier sentences and the alignment lays
the repeat over the audio where those words were first spoken, so the word times jump back
(measured: whisper base in bfloat16 on the same sample, after "...New Jersey now." at 29.98 s,
19 words "There's not much difference at least they all call me a Yankee down here. So I don't
hear that New Jersey now" timed 22.0-29.8 s, all of them already said). A run of at least
:data:`MIN_RUN` words that starts more than :data:`REWIND_SECONDS` before the latest word start
so far (starts, not ends: DTW stretches a sentence's last word over a following pause), stays
inside the stretch already transcribed, and repeats the words already written for that stretch
(at least :data:`REPEAT_SHARE` of them among the words starting from :data:`LOOKBACK_SECONDS`
before it) is removed too (:func:`rewound_runs`). Checking the repeat locally matters on long
audio, where almost every word has been written somewhere before: a window seam that re-decodes
audio the previous window had garbled gives new words there, and they are kept.

A run of at least :data:`MIN_RUN` consecutive words each shorter than :data:`MAX_SECONDS` is
removed from the words, the segments and the text, and reported so the caller can say what went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from speaker_asr.attribution.speakers import segment_of_each_word
from speaker_asr.types import Segment, Word, word_key

MIN_RUN = 4
MAX_SECONDS = 0.02  # one DTW frame
REWIND_SECONDS = 1.0  # window seams and DTW jitter move word times back by tenths, not seconds
REPEAT_SHARE = 0.8
LOOKBACK_SECONDS = 10.0  # the repeat is checked against the words written for the audio it
# rewinds over, plus this much before it (a chunk seam overlaps 5-10 s)


def squeezed_runs(words: Sequence[Word], min_run: int = MIN_RUN, max_seconds: float = MAX_SECONDS
                  ) -> list[range]:
    """Index ranges of ``min_run`` or more consecutive words that each last ``max_seconds`` or
    less. A word without both times breaks a run (nothing is known about it)."""
    runs: list[range] = []
    first = None
    for i, w in enumerate(list(words) + [Word("", None, None)]):
        squeezed = w.start is not None and w.end is not None and w.end - w.start <= max_seconds
        if squeezed and first is None:
            first = i
        elif not squeezed and first is not None:
            if i - first >= min_run:
                runs.append(range(first, i))
            first = None
    return runs


def rewound_runs(words: Sequence[Word], min_run: int = MIN_RUN, rewind: float = REWIND_SECONDS,
                 repeat_share: float = REPEAT_SHARE, lookback: float = LOOKBACK_SECONDS
                 ) -> list[range]:
    """Index ranges of ``min_run`` or more words that repeat earlier text over audio already
    transcribed: the run starts with a word beginning more than ``rewind`` seconds before the
    latest word start so far, continues while the words start before that, and at least
    ``repeat_share`` of its words were already written for that stretch (by words starting at
    most ``lookback`` seconds before the run's first word). Words without times are skipped over
    (they neither start nor end a run)."""
    runs: list[range] = []
    latest = None  # the latest word start before the current run
    written: list[tuple[float, str]] = []  # (start, normalized text) of the words kept so far
    i, n = 0, len(words)
    while i < n:
        start = words[i].start
        if start is None or words[i].end is None:
            i += 1
            continue
        if latest is not None and start < latest - rewind:
            j = i
            while j < n and (words[j].start is None or words[j].start < latest):
                j += 1
            run = [w for w in words[i:j] if word_key(w.text)]
            here = {text for t, text in written if t >= start - lookback}
            repeated = sum(word_key(w.text) in here for w in run)
            if len(run) >= min_run and repeated >= repeat_share * len(run):
                runs.append(range(i, j))
                i = j
                continue
        written.append((start, word_key(words[i].text)))
        latest = start if latest is None else max(latest, start)
        i += 1
    return runs


@dataclass
class Cleaned:
    text: str
    segments: list[Segment]
    words: list[Word]
    dropped: list[str]  # the text of each removed run


def drop_hallucinations(segments: Sequence[Segment], words: Sequence[Word]) -> Optional[Cleaned]:
    """Remove :func:`squeezed_runs` and :func:`rewound_runs` from ``words`` and the matching text
    from ``segments`` (words and segments are two cuts of one text: a word belongs to the
    segment holding its first character). Returns None when there is nothing to remove. A
    segment left without words disappears; the others keep their times."""
    runs = sorted(squeezed_runs(words) + rewound_runs(words), key=lambda r: r.start)
    merged: list[range] = []
    for r in runs:  # a word can be in both kinds of run, or they can touch: report one run
        if merged and r.start <= merged[-1].stop:
            merged[-1] = range(merged[-1].start, max(merged[-1].stop, r.stop))
        else:
            merged.append(r)
    return _drop(segments, words, merged)


def _drop(segments: Sequence[Segment], words: Sequence[Word], runs: list[range]) -> Optional[Cleaned]:
    if not runs:
        return None
    drop = {i for r in runs for i in r}
    owner = segment_of_each_word([s.text for s in segments], [w.text for w in words])
    kept_text: list[list[str]] = [[] for _ in segments]
    for i, w in enumerate(words):
        if i not in drop and segments:
            kept_text[owner[i]].append(w.text)
    new_segments = [Segment("".join(parts), s.start, s.end) for parts, s in zip(kept_text, segments)
                    if parts]
    new_words = [w for i, w in enumerate(words) if i not in drop]
    return Cleaned(text="".join(w.text for w in new_words), segments=new_segments, words=new_words,
                   dropped=["".join(words[i].text for i in r).strip() for r in runs])



# a decode loops when its last tokens are one phrase said again and again: the phrase at most
# this many tokens ...
LOOP_MAX_PERIOD = 16
# ... repeated at least this often in a row, and the repeats at least LOOP_MIN_TOKENS tokens in
# all (a word said three times, "no no no", is speech; a sentence said a fourth time is a loop)
LOOP_REPEATS = 3
LOOP_MIN_TOKENS = 12


def looping(tokens: Sequence[int], max_period: int = LOOP_MAX_PERIOD, repeats: int = LOOP_REPEATS,
            min_tokens: int = LOOP_MIN_TOKENS) -> bool:
    """Whether the token sequence ends in a loop: its last ``p`` tokens (``p`` up to
    ``max_period``) repeated back to back at least ``repeats`` times and over at least
    ``min_tokens`` tokens in all -- Whisper writing "I'm sorry. I'm sorry. I'm sorry. ..." over
    a short stretch of audio until its token limit. Checked after each generated token, so it
    looks at the end only."""
    n = len(tokens)
    for period in range(1, max_period + 1):
        times = max(repeats, -(-min_tokens // period))
        if n < period * times:
            continue
        tail = list(tokens[n - period:])
        if all(list(tokens[n - (k + 1) * period:n - k * period]) == tail for k in range(1, times)):
            return True
    return False
