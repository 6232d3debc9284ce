"""``diarized_json``: OpenAI's diarized transcription shape (``gpt-4o-transcribe-diarize``).

``{"task", "duration", "text", "segments": [{"type": "transcript.text.segment", "id": "seg_0",
"start", "end", "text", "speaker"}]}``: one segment per speaker segment (per chunk, speaker null,
when diarization is off).
"""

from __future__ import annotations

from ._common import chunks, span, speaker_segments
from speaker_asr.types import Response

NAME = "diarized_json"


def render(response: Response, *, task: str = "transcribe") -> dict:
    segments = speaker_segments(response)
    if segments is None:
        segments = [{"start": span(c)[0], "end": span(c)[1], "text": (c.get("text") or "").strip(),
                     "speaker": None} for c in chunks(response)]
    return {"task": task, "duration": response.get("duration"), "text": response.get("text") or "",
            "segments": [{"type": "transcript.text.segment", "id": f"seg_{i}", "start": s["start"],
                          "end": s["end"], "text": s["text"], "speaker": s["speaker"]}
                         for i, s in enumerate(segments)]}
