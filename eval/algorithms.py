"""The speaker-attribution algorithms compared, all on the same ASR output and speaker turns.

Each takes the ASR result as plain data -- Whisper's segments ``chunks`` and words ``words`` as
``(text, start, end)`` (times may be None) -- plus the diarization as :class:`Diar` (its regular
turns, which may overlap, and its exclusive turns, one speaker at a time) and the audio duration,
and returns :class:`speaker_asr.testing.scoring.HypToken` s covering *every* token of the ASR output, in ASR order,
each with the speaker the algorithm gave it, or ``dropped=True`` when the algorithm's output
leaves it out.

* ``hf_original`` -- (a) the algorithm of the original Hugging Face speaker-diarization handler
  (``diarization_utils.post_process_segments_and_transcripts`` in insanely-fast-whisper / the HF
  endpoint template), reproduced as it was, on the regular turns (pyannote 3's output, what it
  ran on): consecutive turns of one speaker are merged, a merged turn ending where the next
  speaker's turn starts; for each merged turn the not yet used chunk whose end time is nearest
  the turn's end is found and that chunk and all before it go to the turn's speaker; once the
  turns run out, the remaining chunks are dropped.
* ``anchor`` -- plain word-level max overlap, WhisperX's ``assign_word_speakers(fill_nearest=True)``
  as it is meant: each word takes the speaker whose regular turns overlap it most (summed), else
  the nearest turn's. The simplest rule, and the one to beat.
* ``anchor_exclusive`` -- the same on the exclusive turns.
* ``before`` -- the endpoint's attribution at another revision (``--before REV``: its
  ``speaker_asr/attribution/speakers.py`` loaded from git), on the exclusive turns as the endpoint
  gave them then; ``before_turns`` -- the same on the regular turns, as the evaluation measured it
  then (in oracle mode the eval handed it the reference turns, which the endpoint never saw).
* ``ours`` -- the endpoint's attribution now (:func:`speaker_asr.attribution.speakers.attribute_words`
  with every rule), given both kinds of turns.
  Where the file has a span embedder (the endpoint's SENTENCE_VOICES, on by default), the
  sentences' voices then check the speakers (:mod:`speaker_asr.attribution.sentence_voices`).
* ``ours-<rule>`` -- the same with one rule off (``--ablate``), to show what each rule does;
  ``ours-voices``: without the sentences' voices.

:func:`endpoint` runs the endpoint's own response builder on the same input; the evaluation
checks that ``ours`` gives every word the speaker the endpoint gives it.

For the chunk-level algorithm every word of a chunk (its text split on whitespace) inherits the
chunk's speaker.
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from speaker_asr.attribution import speakers as attribution
from speaker_asr.attribution.sentence_voices import VOICE_RULE, VoiceRule, speakers_by_sentence
from speaker_asr.attribution.speakers import SpeakerIndex, resolve_times
from speaker_asr.types import Turn, Word
from speaker_asr.testing.scoring import HypToken, normalize_word

Span = tuple[str, Optional[float], Optional[float]]
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Diar:
    """What a diarization gives the attribution: its turns (overlapping where people talk at
    once) and its exclusive turns (one speaker at a time)."""

    turns: list[Turn]
    exclusive: list[Turn]
    heard: bool = True  # the exclusive turns are the diarization's own (pyannote 4), not derived
    # the endpoint's sentence-voice check (SENTENCE_VOICES): the file's span embedder, or None
    embed: Optional[Callable] = None
    max_speakers: Optional[int] = None  # the speakers the pipeline was told of, if it was

    @property
    def own_exclusive(self) -> Optional[list[Turn]]:
        """What the endpoint hands the attribution as exclusive turns: the diarization's own."""
        return self.exclusive if self.heard else None


ALGORITHMS = {
    "hf_original": "(a) original HF handler",
    "anchor": "word max-overlap (WhisperX), turns",
    "anchor_exclusive": "word max-overlap, exclusive turns",
    "before": "ours before, exclusive turns (as the endpoint ran it)",
    "before_turns": "ours before, turns (as the eval measured it)",
    "ours": "**ours**",
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


def _word_tokens(pieces: Sequence[Word]) -> list[HypToken]:
    return [HypToken(tok, p.speaker, p.start, p.end, False, i)
            for i, p in enumerate(pieces) for tok in normalize_word(p.text)]


def _pieces(words: Sequence[Span], duration: float) -> list[Word]:
    spans = resolve_times([(s, e) for _, s, e in words], duration)
    return [Word(t, s, e) for (t, _, _), (s, e) in zip(words, spans)]


def hf_original(chunks: Sequence[Span], words, diar: Diar, duration: float) -> list[HypToken]:
    segments = sorted(diar.turns, key=lambda t: (t.start, t.end))
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


def max_overlap(pieces: Sequence[Word], turns: Sequence[Turn]) -> list[Word]:
    """WhisperX's ``assign_word_speakers`` with ``fill_nearest``, as meant: the speaker whose turns
    overlap the word most in total, else the nearest turn's (no speaker without turns)."""
    index = SpeakerIndex(turns)
    return [Word(p.text, p.start, p.end, index.speaker_at(p.start, p.end)) for p in pieces]


def anchor(chunks, words, diar: Diar, duration: float) -> list[HypToken]:
    return _word_tokens(max_overlap(_pieces(words, duration), diar.turns))


def anchor_exclusive(chunks, words, diar: Diar, duration: float) -> list[HypToken]:
    return _word_tokens(max_overlap(_pieces(words, duration), diar.exclusive))


def ours(rules: Optional[frozenset] = None, voices: bool = True, voice_rule: VoiceRule = VOICE_RULE,
         weights: Optional[Mapping[str, float]] = None) -> Callable:
    """The endpoint's attribution (``rules``: the attribution's rules on; ``weights``: its
    weights where not the defaults; ``voices``: the sentences' voices, by ``voice_rule``)."""
    def run(chunks, words, diar: Diar, duration: float) -> list[HypToken]:
        extra = ({} if rules is None else {"rules": rules}) | ({} if weights is None else {"weights": weights})
        pieces = attribution.attribute_words(_pieces(words, duration), diar.turns,
                                             diar.own_exclusive, **extra)
        if voices and diar.embed is not None:
            pieces = speakers_by_sentence(pieces, diar.embed, diar.max_speakers,
                                          {t.speaker for t in diar.turns}, diar.turns, diar.own_exclusive,
                                          voice_rule).words
        return _word_tokens(pieces)

    return run


def load_before(rev: str, regular: bool = False) -> Callable:
    """The runner of the endpoint's attribution at git revision ``rev`` (its attribution module
    loaded from git into a module of its own). Where its ``attribute_words`` takes one kind of
    turns: tidied word times, then ``attribute_words`` on the exclusive turns (on the regular
    turns with ``regular``); where it takes both: ``attribute_words`` with both, as ``ours``."""
    source = subprocess.run(["git", "show", f"{rev}:speaker_asr/attribution/speakers.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="attribution-before-")) / "speakers_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("speakers_before", path)
    module = importlib.util.module_from_spec(spec)
    # registered before it runs, as an import would: dataclasses look their module up there
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    both = "exclusive" in inspect.signature(module.attribute_words).parameters

    def run(chunks, words, diar: Diar, duration: float) -> list[HypToken]:
        if both:  # the attribution takes both kinds of turns: as ``ours`` runs it
            return _word_tokens(module.attribute_words(_pieces(words, duration), diar.turns,
                                                       diar.own_exclusive))
        pieces = module.tidy_word_times(_pieces(words, duration))
        turns = diar.turns if regular else diar.exclusive
        return _word_tokens(module.attribute_words(pieces, module.SpeakerIndex(turns), tidy=False))

    return run


def endpoint(chunks: Sequence[Span], words: Sequence[Span], diar: Diar, duration: float
             ) -> list[HypToken]:
    """The endpoint's own response builder on the same input (word mode), flattened to tokens."""
    from speaker_asr.attribution.response import build_response
    from speaker_asr.types import Segment, Word

    response = build_response("", [Segment(*c) for c in chunks], list(diar.turns), duration, "en",
                              words=[Word(*w) for w in words], return_words=True,
                              exclusive=diar.own_exclusive, embed=diar.embed,
                              max_speakers=diar.max_speakers)
    out: list[HypToken] = []
    i = 0
    for chunk in response["chunks"]:
        for w in chunk.get("words", []):
            for tok in normalize_word(w["word"]):
                out.append(HypToken(tok, w.get("speaker"), w["start"], w["end"], False, i))
            i += 1
    return out


def runners(before: Optional[str] = None, ablate: bool = False) -> dict[str, Callable]:
    """Algorithm id -> runner, in table order."""
    out: dict[str, Callable] = {"hf_original": hf_original, "anchor": anchor,
                                "anchor_exclusive": anchor_exclusive}
    if before:
        out["before"] = load_before(before)
        out["before_turns"] = load_before(before, regular=True)
    out["ours"] = ours()
    if ablate:
        for rule in attribution.RULES:
            out[f"ours-{rule}"] = ours(frozenset(attribution.RULES) - {rule})
        out["ours-voices"] = ours(voices=False)
    return out


def label(alg: str) -> str:
    if alg.startswith("ours-"):
        return f"ours without {alg[5:]}"
    return ALGORITHMS[alg]
