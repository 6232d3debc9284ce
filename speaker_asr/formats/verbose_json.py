"""``verbose_json``: OpenAI's verbose transcription shape, plus a speaker on every segment.

``{"task", "language", "duration", "text", "segments": [{"id", "start", "end", "text", "speaker",
"words"?}]}``. Segments are the per-speaker segments when diarization is on, else the chunks;
``speaker`` is null without diarization. ``words`` (``{"word", "start", "end", "speaker"}``) appear
on every segment only when the chunks carry words.
"""

from __future__ import annotations

from ._common import chunks, has_words, span, speaker_segments, word_entry, words_by_segment
from speaker_asr.types import Response

NAME = "verbose_json"


def render(response: Response, *, task: str = "transcribe") -> dict:
    segments = speaker_segments(response)
    with_words = has_words(response)
    out_segments = []
    if segments is None:  # no diarization: one segment per chunk
        for i, chunk in enumerate(chunks(response)):
            start, end = span(chunk)
            seg = {"id": i, "start": start, "end": end, "text": chunk.get("text") or "",
                   "speaker": None}
            if with_words:
                seg["words"] = [word_entry(w, None) for w in chunk.get("words") or []
                                if isinstance(w, dict)]
            out_segments.append(seg)
    else:
        words = words_by_segment(response, segments) if with_words else None
        for i, s in enumerate(segments):
            seg = {"id": i, "start": s["start"], "end": s["end"], "text": s["text"],
                   "speaker": s["speaker"]}
            if words is not None:
                seg["words"] = words[i]
            out_segments.append(seg)
    return {"task": task, "language": response.get("language"), "duration": response.get("duration"),
            "text": response.get("text") or "", "segments": out_segments}
