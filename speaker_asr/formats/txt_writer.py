"""``txt``: plain text -- ``SPEAKER_00: text`` per speaker segment, one per line; the transcript
text when diarization is off. Segments without a speaker are written without a prefix."""

from __future__ import annotations

from ._common import label, one_line, speaker_segments
from speaker_asr.types import Response

NAME = "txt"


def write(response: Response) -> str:
    segments = speaker_segments(response)
    if segments is None:
        text = (response.get("text") or "").strip()
        return text + "\n" if text else ""
    lines = []
    for seg in segments:
        text = one_line(seg["text"])
        if text:
            name = label(seg["speaker"])
            lines.append(f"{name}: {text}\n" if name else text + "\n")
    return "".join(lines)


def render(response: Response, *, task: str = "transcribe") -> dict:
    return {"format": NAME, "content": write(response)}
