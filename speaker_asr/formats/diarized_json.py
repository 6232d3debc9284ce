"""``diarized_json``: OpenAI's diarized transcription shape (``gpt-4o-transcribe-diarize``).

``{"task", "duration", "text", "segments": [{"type": "transcript.text.segment", "id": "seg_0",
"start", "end", "text", "speaker"}]}``: one segment per speaker turn (per transcript segment,
its text stripped and speaker null, when diarization is off).
"""

from __future__ import annotations

from speaker_asr.result import Result


def write(result: Result, task: str) -> dict:
    if result.diarized:
        parts = [(t.start, t.end, t.text, t.speaker) for t in result.speaker_turns]
    else:
        parts = [(s.start, s.end, s.text.strip(), None) for s in result.segments]
    return {"task": task, "duration": result.duration, "text": result.text,
            "segments": [{"type": "transcript.text.segment", "id": f"seg_{i}", "start": start,
                          "end": end, "text": text, "speaker": speaker}
                         for i, (start, end, text, speaker) in enumerate(parts)]}
