"""``txt``: plain text -- ``SPEAKER_00: text`` per speaker segment, one per line; the transcript
text when diarization is off. Segments without a speaker are written without a prefix."""

from __future__ import annotations

from ._common import label, one_line
from speaker_asr.result import Result


def write(result: Result) -> str:
    if not result.diarized:
        text = result.text.strip()
        return text + "\n" if text else ""
    lines = []
    for turn in result.speaker_turns:
        text = one_line(turn.text)
        if text:
            name = label(turn.speaker)
            lines.append(f"{name}: {text}\n" if name else text + "\n")
    return "".join(lines)
