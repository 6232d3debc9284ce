"""ASR segments and words + speaker turns -> the :class:`~speaker_asr.result.Result`, through the
pure speaker attribution of :mod:`speaker_asr.attribution.speakers`."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, Sequence

import numpy as np

from speaker_asr.attribution.speakers import (SpeakerIndex, assign_speakers, attribute_words,
                                              cross_talk, resolve_times, split_segments,
                                              tidy_word_times)
from speaker_asr.attribution.sentence_voices import speakers_by_sentence
from speaker_asr.attribution.turns import speakers_alone
from speaker_asr.result import Result
from speaker_asr.speaker_names import speaker_label
from speaker_asr.types import Diarization, Segment, Transcript, Turn, Word


def speaker_labels(turns: list[Turn], first: Optional[dict[str, str]] = None) -> dict[str, str]:
    """The diarization's labels -> SPEAKER_00, SPEAKER_01, ... in order of first appearance
    (after those already in ``first``, which keep theirs)."""
    mapping = dict(first or {})
    for t in sorted(turns, key=lambda t: (t.start, t.end)):
        mapping.setdefault(t.speaker, speaker_label(len(mapping)))
    return mapping


def rename_speakers(turns: list[Turn], mapping: Optional[dict[str, str]] = None) -> list[Turn]:
    """Relabel speakers SPEAKER_00, SPEAKER_01, ... in order of first appearance (or by
    ``mapping``, from :func:`speaker_labels`)."""
    mapping = mapping if mapping is not None else speaker_labels(turns)
    return [Turn(t.start, t.end, mapping[t.speaker]) for t in turns]


def _r(x: float) -> float:
    return round(float(x), 3)


# embeds the audio of each (start, end) span in seconds: one unit vector, or None, per span
SpanEmbedder = Callable[[list[tuple[float, float]]], list[Optional[np.ndarray]]]


def attribute(transcript: Transcript, duration: float, diarization: Optional[Diarization] = None,
              with_words: bool = False, embed: Optional[SpanEmbedder] = None,
              max_speakers: Optional[int] = None) -> Result:
    """The result of :func:`attribute_with_voices`, without the voices."""
    return attribute_with_voices(transcript, duration, diarization, with_words, embed, max_speakers)[0]


def attribute_with_voices(transcript: Transcript, duration: float, diarization: Optional[Diarization] = None,
                          with_words: bool = False, embed: Optional[SpanEmbedder] = None,
                          max_speakers: Optional[int] = None
                          ) -> tuple[Result, dict[str, Optional[list[float]]]]:
    """The result, from the ASR's segments and words (times may be missing) and the
    diarization's turns (which may overlap) and its own exclusive turns (one speaker at a time,
    pyannote 4; see :func:`~speaker_asr.attribution.speakers.attribute_words`).

    ``diarization=None`` means diarization is off: segments carry no speaker and there are no
    speaker turns. With the ASR's words (Whisper's word timestamps) every word gets a speaker and
    the segments are Whisper's segments split wherever the speaker changes, timed by their words,
    and each word knows the other speakers whose turns cover at least half of it (``overlap``);
    without, each segment takes the speaker it overlaps most. Every piece of text is kept;
    missing times are filled in and clamped to the audio; times are rounded to the millisecond.
    ``with_words``: the segments keep their words (``return_word_timestamps``). ``embed``: the
    sentences' voices check the words' speakers
    (:mod:`~speaker_asr.attribution.sentence_voices`; at most ``max_speakers``). Also returned:
    every speaker's voice, the diarization's ``voices`` with those of the speakers the
    sentences' voices made."""
    diarized = diarization is not None
    voices = dict(diarization.voices) if diarized else {}
    words = transcript.words
    if words is not None:
        spans = resolve_times([(w.start, w.end) for w in words], duration)
        pieces = [Word(w.text, s, e) for w, (s, e) in zip(words, spans)]
        # attribution tidies the word times it judges by (and returns them); without it, the same
        if diarized:
            pieces = attribute_words(pieces, diarization.turns, diarization.exclusive_turns)
            if embed is not None:
                labels = {t.speaker for t in [*diarization.turns, *(diarization.exclusive_turns or [])]}
                regrouped = speakers_by_sentence(pieces, embed, max_speakers, labels | set(voices),
                                                 diarization.turns, diarization.exclusive_turns)
                pieces = regrouped.words
                voices.update((k, v.tolist()) for k, v in regrouped.voices.items())
            pieces = [replace(w, overlap=others)
                      for w, others in zip(pieces, cross_talk(pieces, diarization.turns))]
        else:
            pieces = tidy_word_times(pieces)
        groups = [g for g in split_segments([s.text for s in transcript.chunks], pieces) if g.words]
        segments = [Segment(g.text, _r(g.start), _r(g.end), g.speaker,
                            [Word(w.text, _r(w.start), _r(w.end), w.speaker, w.overlap)
                             for w in g.words] if with_words else []) for g in groups]
    else:
        spans = resolve_times([(s.start, s.end) for s in transcript.chunks], duration)
        pieces = [Word(seg.text, s, e) for seg, (s, e) in zip(transcript.chunks, spans)]
        if diarized:
            pieces = assign_speakers(pieces, SpeakerIndex(speakers_alone(diarization)))
        segments = [Segment(p.text, _r(p.start), _r(p.end), p.speaker) for p in pieces]
    return Result(text=transcript.text, segments=segments,
                  language=transcript.language, duration=_r(duration),
                  alignment="word" if words is not None else "segment", diarized=diarized,
                  with_words=with_words and words is not None, assisted=transcript.assisted), voices


def build_response(text: str, segments: Sequence[Segment], turns: Optional[list[Turn]],
                   duration: float, language: Optional[str], words: Optional[Sequence[Word]] = None,
                   return_words: bool = False, exclusive: Optional[list[Turn]] = None,
                   embed: Optional[SpanEmbedder] = None, max_speakers: Optional[int] = None) -> dict:
    """The ``json`` response of :func:`attribute` for the diarization's ``turns`` and its own
    ``exclusive`` turns (for code that builds a response from plain lists, as the evaluation
    does)."""
    transcript = Transcript(text, list(segments), language, None if words is None else list(words))
    speakers = None if turns is None else Diarization(turns, exclusive)
    return attribute(transcript, duration, speakers, with_words=return_words, embed=embed,
                     max_speakers=max_speakers).to_json()
