"""Scoring: text normalization, WER (jiwer), cpWER (meeteval) and WDER.

Everything works on *tokens*: a reference or hypothesis word is normalized into zero or more
tokens (lowercase, punctuation stripped, hyphens split), and each token keeps the speaker (and
times) of the word it came from. So a hyphenated "ill-disposed" from Whisper and the reference's
"ill disposed" score as the same two tokens, and a chunk-level algorithm's speaker reaches every
token of every word in the chunk.

Definitions (per file; pooled numbers sum errors and lengths over files, i.e. micro averages):

* WER    -- jiwer word error rate of the algorithm's output text (all speakers, in output order)
            against the reference text (utterances in start-time order).
* cpWER  -- meeteval's concatenated minimum-permutation WER: the output grouped per hypothesis
            speaker against the reference grouped per reference speaker, best speaker mapping.
            Words left without a speaker form their own hypothesis stream. Not computed (None)
            beyond 20 speakers on either side, which meeteval refuses.
* WDER   -- word diarization error rate (Shafey et al. 2019): reference words aligned (jiwer) to
            a hypothesis word as correct or substituted, whose hypothesis speaker differs from
            the reference speaker after the best one-to-one speaker mapping (Hungarian on the
            counts of aligned pairs), over all such aligned words. The alignment is against the
            full ASR word sequence: words an algorithm dropped stay in the sequence with no
            speaker, so dropping a word counts as a speaker error, not as a free pass.
* dropped -- share of the ASR output's tokens that the algorithm's output lacks or leaves without
            a speaker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

import jiwer
import numpy as np

from speaker_asr.assignment import best_pairs

# spellings Whisper writes that references spell out (reference texts use the long form)
_SPELLING = {"mr": "mister", "mrs": "missus", "dr": "doctor", "ok": "okay"}
_DASHES = re.compile(r"[-\u2010-\u2015/]")
_NOT_WORD = re.compile(r"[^a-z0-9' ]+")


def normalize_word(text: str) -> list[str]:
    """One written word -> normalized tokens: lowercase, curly quotes straightened, hyphens and
    dashes split, other punctuation removed, a few abbreviations spelled out."""
    t = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    t = _DASHES.sub(" ", t)
    t = _NOT_WORD.sub("", t)
    out = []
    for tok in t.split():
        tok = tok.strip("'")
        if tok:
            out.append(_SPELLING.get(tok, tok))
    return out


def normalize_text(text: str) -> list[str]:
    return [tok for word in text.split() for tok in normalize_word(word)]


@dataclass
class RefToken:
    text: str
    speaker: str
    utt: int  # index of the reference utterance it belongs to
    pos: str  # "first", "last", "only" or "middle" token of that utterance


@dataclass
class HypToken:
    text: str
    speaker: Optional[str]  # None: no speaker
    start: Optional[float] = None  # times of the word the token came from
    end: Optional[float] = None
    dropped: bool = False  # in the ASR output, missing from the algorithm's output
    word: int = -1  # index of the ASR word / chunk word it came from


def aligned_pairs(ref: Sequence[str], hyp: Sequence[str]) -> list[tuple[int, int, bool]]:
    """(ref index, hyp index, equal?) for every reference token aligned as correct or substituted
    by jiwer's Levenshtein alignment."""
    if not ref or not hyp:
        return []
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    pairs = []
    for chunk in out.alignments[0]:
        if chunk.type in ("equal", "substitute"):
            for k in range(chunk.ref_end_idx - chunk.ref_start_idx):
                pairs.append((chunk.ref_start_idx + k, chunk.hyp_start_idx + k, chunk.type == "equal"))
    return pairs


@dataclass
class WerCounts:
    errors: int
    length: int
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0


def wer_counts(ref: Sequence[str], hyp: Sequence[str]) -> WerCounts:
    if not ref:
        return WerCounts(len(hyp), 0, 0, 0, len(hyp))
    if not hyp:
        return WerCounts(len(ref), len(ref), 0, len(ref), 0)
    o = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return WerCounts(o.substitutions + o.deletions + o.insertions, len(ref), o.substitutions,
                     o.deletions, o.insertions)


# meeteval refuses cpWER with more speakers than this on either side (docs: num_speaker_limits.md)
CPWER_MAX_SPEAKERS = 20


def cpwer_counts(ref: Sequence[RefToken], hyp: Sequence[HypToken]) -> Optional[WerCounts]:
    """meeteval's cpWER counts; None when either side has more than ``CPWER_MAX_SPEAKERS``
    speakers (meeteval refuses those: the long recordings of ``--part long``)."""
    from meeteval.wer import cp_word_error_rate

    refs: dict[str, list[str]] = {}
    for t in ref:
        refs.setdefault(t.speaker, []).append(t.text)
    hyps: dict[str, list[str]] = {}
    for t in hyp:
        if not t.dropped:
            hyps.setdefault("<none>" if t.speaker is None else t.speaker, []).append(t.text)
    if max(len(refs), len(hyps)) > CPWER_MAX_SPEAKERS:
        return None
    er = cp_word_error_rate({k: " ".join(v) for k, v in refs.items()},
                            {k: " ".join(v) for k, v in hyps.items()},
                            reference_sort=False, hypothesis_sort=False)
    return WerCounts(int(er.errors), int(er.length), int(er.substitutions), int(er.deletions),
                     int(er.insertions))


def best_mapping(pairs: Sequence[tuple[str, Optional[str]]]) -> dict[str, str]:
    """Hypothesis speaker -> reference speaker, one-to-one, maximizing the aligned words whose
    speakers then agree (Hungarian algorithm on the co-occurrence counts)."""
    refs = sorted({r for r, _ in pairs})
    hyps = sorted({h for _, h in pairs if h is not None})
    counts = {(h, r): 0.0 for h in hyps for r in refs}  # every pair, as many as can be paired
    for r, h in pairs:
        if h is not None:
            counts[(h, r)] += 1
    return best_pairs(counts, hyps, refs)


@dataclass
class SpeakerErrors:
    errors: int  # aligned words with the wrong (or no) speaker
    scored: int  # aligned words (correct + substituted)
    mapping: dict[str, str]
    wrong: list[tuple[int, int]] = field(default_factory=list)  # (ref idx, hyp idx) of errors
    pairs: list[tuple[int, int, bool]] = field(default_factory=list)


def wder_counts(ref: Sequence[RefToken], hyp: Sequence[HypToken]) -> SpeakerErrors:
    """WDER against the full hypothesis token sequence (dropped tokens included, speakerless)."""
    pairs = aligned_pairs([t.text for t in ref], [t.text for t in hyp])

    def spk(t: HypToken) -> Optional[str]:
        return None if t.dropped else t.speaker

    mapping = best_mapping([(ref[i].speaker, spk(hyp[j])) for i, j, _ in pairs])
    wrong = [(i, j) for i, j, _ in pairs
             if spk(hyp[j]) is None or mapping.get(spk(hyp[j])) != ref[i].speaker]
    return SpeakerErrors(len(wrong), len(pairs), mapping, wrong, pairs)


def ratio(num: float, den: float) -> Optional[float]:
    return num / den if den else None
