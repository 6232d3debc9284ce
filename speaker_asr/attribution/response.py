"""ASR segments and words + speaker turns -> the response object, through the pure speaker
attribution of :mod:`speaker_asr.attribution.speakers`."""

from __future__ import annotations

from typing import Optional, Sequence

from speaker_asr.attribution.speakers import (SpeakerIndex, assign_speakers, attribute_words,
                                              merge_by_speaker, resolve_times, split_segments,
                                              tidy_word_times)
from speaker_asr.types import Response, Segment, Turn, Word


def speaker_labels(turns: list[Turn]) -> dict[str, str]:
    """The diarization's labels -> SPEAKER_00, SPEAKER_01, ... in order of first appearance."""
    mapping: dict[str, str] = {}
    for t in sorted(turns, key=lambda t: (t.start, t.end)):
        mapping.setdefault(t.speaker, f"SPEAKER_{len(mapping):02d}")
    return mapping


def rename_speakers(turns: list[Turn], mapping: Optional[dict[str, str]] = None) -> list[Turn]:
    """Relabel speakers SPEAKER_00, SPEAKER_01, ... in order of first appearance (or by
    ``mapping``, from :func:`speaker_labels`)."""
    mapping = mapping if mapping is not None else speaker_labels(turns)
    return [Turn(t.start, t.end, mapping[t.speaker]) for t in turns]


def _r(x: float) -> float:
    return round(float(x), 3)


def _word_dict(w: Word, with_speaker: bool) -> dict:
    d = {"word": w.text, "start": _r(w.start), "end": _r(w.end)}
    if with_speaker:
        d["speaker"] = w.speaker
    return d


def build_response(text: str, segments: Sequence[Segment], turns: Optional[list[Turn]],
                   duration: float, language: Optional[str], words: Optional[Sequence[Word]] = None,
                   return_words: bool = False, extra: Optional[dict] = None,
                   exclusive: Optional[list[Turn]] = None) -> Response:
    """The response object, from the ASR's segments and words (times may be missing) and the
    diarization's turns.

    ``turns=None`` means diarization is off: chunks carry no speaker and ``speakers`` is empty.
    With ``words`` (Whisper's word timestamps) every word gets a speaker and chunks are Whisper's
    segments split wherever the speaker changes, timed by their words; without, each segment
    takes the speaker it overlaps most. Every piece of text is kept; missing times are filled in
    and clamped to the audio.
    """
    diarized = turns is not None
    index = SpeakerIndex(turns or [])
    if words is not None:
        spans = resolve_times([(w.start, w.end) for w in words], duration)
        pieces = [Word(w.text, s, e) for w, (s, e) in zip(words, spans)]
        # attribution tidies the word times it judges by (and returns them); without it, the same
        pieces = attribute_words(pieces, turns, exclusive) if diarized else tidy_word_times(pieces)
        groups = [g for g in split_segments([s.text for s in segments], pieces) if g.words]
        chunks = []
        for g in groups:
            chunk = {"text": g.text, "timestamp": [_r(g.start), _r(g.end)]}
            if diarized:
                chunk["speaker"] = g.speaker
            if return_words:
                chunk["words"] = [_word_dict(w, diarized) for w in g.words]
            chunks.append(chunk)
        merged_input = [Word(c["text"], *c["timestamp"], c.get("speaker")) for c in chunks]
    else:
        spans = resolve_times([(s.start, s.end) for s in segments], duration)
        pieces = [Word(seg.text, s, e) for seg, (s, e) in zip(segments, spans)]
        if diarized:
            pieces = assign_speakers(pieces, index)
        chunks = []
        for p in pieces:
            chunk = {"text": p.text, "timestamp": [_r(p.start), _r(p.end)]}
            if diarized:
                chunk["speaker"] = p.speaker
            chunks.append(chunk)
        merged_input = pieces
    response: Response = {"text": text, "chunks": chunks}  # type: ignore[typeddict-item]
    response["speakers"] = [
        {"speaker": p.speaker, "text": p.text.strip(), "timestamp": [_r(p.start), _r(p.end)]}
        for p in merge_by_speaker(merged_input)] if diarized else []
    response["language"] = language
    response["duration"] = _r(duration)
    response["alignment"] = "word" if words is not None else "segment"
    if extra:
        response.update(extra)
    return response
