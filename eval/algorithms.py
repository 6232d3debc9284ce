"""The speaker-attribution algorithms compared, all on the same ASR output and speaker turns.

Each takes the ASR result as plain data -- Whisper's segments ``chunks`` and words ``words`` as
``(text, start, end)`` (times may be None) -- plus speaker turns (``alignment.Turn``) and the audio
duration, and returns :class:`metrics.HypToken` s covering *every* token of the ASR output, in ASR
order, each with the speaker the algorithm gave it, or ``dropped=True`` when the algorithm's
output leaves it out.

* ``hf_original`` -- (a) the algorithm of the original Hugging Face speaker-diarization handler
  (``diarization_utils.post_process_segments_and_transcripts`` in insanely-fast-whisper / the HF
  endpoint template), reproduced as it was: consecutive turns of one speaker are merged, a merged
  turn ending where the next speaker's turn starts; for each merged turn the not yet used chunk
  whose end time is nearest the turn's end is found and that chunk and all before it go to the
  turn's speaker; once the turns run out, the remaining chunks are dropped.
* ``chunk_overlap`` -- (b) each Whisper segment takes the speaker it overlaps most
  (``alignment.assign_speakers``; nearest turn when it overlaps none).
* ``word_raw`` -- (c') ours, word level on Whisper's raw word times: ``attribute_words(smooth=False,
  tidy=False)`` (only when alignment.py has ``tidy_word_times``): shows what the tidying does.
* ``word_plain`` -- (c'') ours, word level on tidied times but plain max overlap: no timing-lag
  calibration, no continuity on near ties (``calibrate=False, continuity=False``): shows what
  those two do.
* ``word`` -- (c) ours, word level without smoothing (``alignment.attribute_words(smooth=False)``,
  word times tidied by ``tidy_word_times`` first as the endpoint does).
* ``word_smooth`` -- (d) ours, word level with one-word-blip smoothing (``smooth=True``, what the
  endpoint does).

:func:`endpoint` runs the endpoint's own ``diarization_utils.build_response`` on the same input;
the evaluation checks that (d) gives every word the speaker the endpoint gives it.

For the chunk-level algorithms every word of a chunk (its text split on whitespace) inherits the
chunk's speaker.
"""

from __future__ import annotations

import inspect
import sys
from typing import Callable, Optional, Sequence

import numpy as np

from speaker_asr.attribution.speakers import (SpeakerIndex, assign_speakers, attribute_words,
                                              resolve_times)
from speaker_asr.types import Turn, Word
from metrics import HypToken, normalize_word

Span = tuple[str, Optional[float], Optional[float]]

HAS_TIDY = "tidy" in inspect.signature(attribute_words).parameters
HAS_CALIBRATE = "calibrate" in inspect.signature(attribute_words).parameters

ALGORITHMS = {
    "hf_original": "(a) original HF handler",
    "chunk_overlap": "(b) chunk max-overlap",
    **({"word_raw": "(c') ours: word-level, raw word times"} if HAS_TIDY else {}),
    **({"word_plain": "(c'') ours: word-level, plain max overlap"} if HAS_CALIBRATE else {}),
    "word": "(c) ours: word-level",
    "word_smooth": "(d) ours: word-level + smoothing",
}


def _chunk_tokens(chunks: Sequence[Span], speakers: Sequence[Optional[str]],
                  dropped: Sequence[bool], spans: Sequence[tuple[float, float]]) -> list[HypToken]:
    out: list[HypToken] = []
    w = 0
    for (text, _, _), spk, drop, (start, end) in zip(chunks, speakers, dropped, spans):
        for word in text.split():
            for tok in normalize_word(word):
                out.append(HypToken(tok, spk, start, end, drop, w))
            w += 1
    return out


def hf_original(chunks: Sequence[Span], words, turns: Sequence[Turn], duration: float
                ) -> list[HypToken]:
    segments = sorted(turns, key=lambda t: (t.start, t.end))
    speakers: list[Optional[str]] = [None] * len(chunks)
    dropped = [True] * len(chunks)
    if segments:
        # merge consecutive turns of one speaker (as the original did: a merged turn ends where
        # the next speaker starts; the last one at the end of the last turn)
        merged = []
        prev = cur = segments[0]
        for cur in segments[1:]:
            if cur.speaker != prev.speaker:
                merged.append((prev.start, cur.start, prev.speaker))
                prev = cur
        merged.append((prev.start, cur.end, prev.speaker))
        ends = np.array([c[2] if c[2] is not None else sys.float_info.max for c in chunks],
                        dtype=float)
        first = 0
        for _, end, speaker in merged:
            if first >= len(chunks):
                break
            upto = first + int(np.argmin(np.abs(ends[first:] - end)))
            for k in range(first, upto + 1):
                speakers[k], dropped[k] = speaker, False
            first = upto + 1
    spans = resolve_times([(s, e) for _, s, e in chunks], duration)
    return _chunk_tokens(chunks, speakers, dropped, spans)


def chunk_overlap(chunks: Sequence[Span], words, turns: Sequence[Turn], duration: float
                  ) -> list[HypToken]:
    spans = resolve_times([(s, e) for _, s, e in chunks], duration)
    pieces = assign_speakers([Word(t, s, e) for (t, _, _), (s, e) in zip(chunks, spans)],
                             SpeakerIndex(turns))
    return _chunk_tokens(chunks, [p.speaker for p in pieces], [False] * len(pieces), spans)


def _word_level(smooth: bool, tidy: bool = True, plain: bool = False) -> Callable:
    def run(chunks: Sequence[Span], words: Sequence[Span], turns: Sequence[Turn], duration: float
            ) -> list[HypToken]:
        spans = resolve_times([(s, e) for _, s, e in words], duration)
        extra = {} if tidy else {"tidy": False}  # attribute_words tidies word times by default
        if plain:
            extra.update(calibrate=False, continuity=False)
        pieces = attribute_words([Word(t, s, e) for (t, _, _), (s, e) in zip(words, spans)],
                                 SpeakerIndex(turns), smooth=smooth, **extra)
        return [HypToken(tok, p.speaker, p.start, p.end, False, i)
                for i, p in enumerate(pieces) for tok in normalize_word(p.text)]

    return run


def endpoint(chunks: Sequence[Span], words: Sequence[Span], turns: Sequence[Turn], duration: float
             ) -> list[HypToken]:
    """The endpoint's own response builder on the same input (word mode), flattened to tokens."""
    from speaker_asr.attribution.response import build_response
    from speaker_asr.types import Segment, Word

    response = build_response("", [Segment(*c) for c in chunks], list(turns), duration, "en",
                              words=[Word(*w) for w in words], return_words=True)
    out: list[HypToken] = []
    i = 0
    for chunk in response["chunks"]:
        for w in chunk.get("words", []):
            for tok in normalize_word(w["word"]):
                out.append(HypToken(tok, w.get("speaker"), w["start"], w["end"], False, i))
            i += 1
    return out


RUNNERS = {
    "hf_original": hf_original,
    "chunk_overlap": chunk_overlap,
    **({"word_raw": _word_level(False, tidy=False)} if HAS_TIDY else {}),
    **({"word_plain": _word_level(False, plain=True)} if HAS_CALIBRATE else {}),
    "word": _word_level(False),
    "word_smooth": _word_level(True),
}
