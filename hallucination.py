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

A run of at least :data:`MIN_RUN` consecutive words each shorter than :data:`MAX_SECONDS` is
removed from the words, the segments and the text, and reported so the caller can say what went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from alignment import segment_of_each_word

MIN_RUN = 4
MAX_SECONDS = 0.02  # one DTW frame

Span = tuple[str, Optional[float], Optional[float]]


def squeezed_runs(words: Sequence[Span], min_run: int = MIN_RUN, max_seconds: float = MAX_SECONDS
                  ) -> list[range]:
    """Index ranges of ``min_run`` or more consecutive words that each last ``max_seconds`` or
    less. A word without both times breaks a run (nothing is known about it)."""
    runs: list[range] = []
    first = None
    for i, (_, start, end) in enumerate(list(words) + [("", None, None)]):
        squeezed = start is not None and end is not None and end - start <= max_seconds
        if squeezed and first is None:
            first = i
        elif not squeezed and first is not None:
            if i - first >= min_run:
                runs.append(range(first, i))
            first = None
    return runs


@dataclass
class Cleaned:
    text: str
    segments: list[Span]
    words: list[Span]
    dropped: list[str]  # the text of each removed run


def drop_squeezed(segments: Sequence[Span], words: Sequence[Span], min_run: int = MIN_RUN,
                  max_seconds: float = MAX_SECONDS) -> Optional[Cleaned]:
    """Remove :func:`squeezed_runs` from ``words`` and the matching text from ``segments``
    (words and segments are two cuts of one text: a word belongs to the segment holding its
    first character). Returns None when there is nothing to remove. A segment left without
    words disappears; the others keep their times."""
    runs = squeezed_runs(words, min_run, max_seconds)
    if not runs:
        return None
    drop = {i for r in runs for i in r}
    owner = segment_of_each_word([s[0] for s in segments], [w[0] for w in words])
    kept_text: list[list[str]] = [[] for _ in segments]
    for i, w in enumerate(words):
        if i not in drop and segments:
            kept_text[owner[i]].append(w[0])
    new_segments = [("".join(parts), s[1], s[2]) for parts, s in zip(kept_text, segments) if parts]
    new_words = [w for i, w in enumerate(words) if i not in drop]
    return Cleaned(text="".join(w[0] for w in new_words), segments=new_segments, words=new_words,
                   dropped=["".join(words[i][0] for i in r).strip() for r in runs])

