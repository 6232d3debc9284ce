"""``verbose_json``: OpenAI's verbose transcription shape, plus a speaker on every segment.

``{"task", "language", "duration", "text", "segments": [{"id", "start", "end", "text", "speaker",
"words"?}]}``. Segments are the speaker turns when diarization is on, else the transcript's
segments; ``speaker`` is null without diarization. ``words`` (``{"word", "start", "end",
"speaker", "overlap"?}``; ``overlap``: the other speakers talking over it, when any) appear on
every segment only with word timestamps.
"""

from __future__ import annotations

from speaker_asr.result import Result
from speaker_asr.types import Word


def _word(w: Word) -> dict:
    out = {"word": w.text, "start": w.start, "end": w.end, "speaker": w.speaker}
    if w.overlap:
        out["overlap"] = list(w.overlap)
    return out


def write(result: Result, task: str) -> dict:
    parts = result.speaker_turns if result.diarized else result.segments
    segments = []
    for i, part in enumerate(parts):
        seg = {"id": i, "start": part.start, "end": part.end, "text": part.text,
               "speaker": part.speaker if result.diarized else None}
        if result.with_words:
            seg["words"] = [_word(w) for w in part.words]
        segments.append(seg)
    return {"task": task, "language": result.language, "duration": result.duration,
            "text": result.text, "segments": segments}
