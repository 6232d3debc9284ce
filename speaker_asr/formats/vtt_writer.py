"""``vtt``: WebVTT subtitles, the speaker as a voice span ``<v SPEAKER_00>``.

Cue rules: see :mod:`formats._cues`. Times ``HH:MM:SS.mmm``; ``&``, ``<`` and ``>`` escaped in the
text and in the voice name (so ``-->`` never appears in a cue's text).
"""

from __future__ import annotations

from ._cues import cues_for, timestamp
from speaker_asr.result import Result


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write(result: Result) -> str:
    out = ["WEBVTT\n"]
    for cue in cues_for(result):
        lines = [escape(line) for line in cue.lines]
        if cue.speaker:
            lines[0] = f"<v {escape(cue.speaker)}>{lines[0]}"
        out.append(f"\n{timestamp(cue.start, '.')} --> {timestamp(cue.end, '.')}\n" + "\n".join(lines) + "\n")
    return "".join(out)
