"""``srt``: SubRip subtitles, the speaker as a ``SPEAKER_00: `` prefix on each cue's first line.

Cue rules: see :mod:`formats._cues`. Times ``HH:MM:SS,mmm``. Text is written as is (SRT has no
escaping); the prefix counts towards the first line's 42 columns.
"""

from __future__ import annotations

from typing import Optional

from ._common import width
from ._cues import cues_for, timestamp
from speaker_asr.result import Result


def _prefix(speaker: Optional[str]) -> str:
    return f"{speaker}: " if speaker else ""


def write(result: Result) -> str:
    blocks = []
    for i, cue in enumerate(cues_for(result, lambda s: width(_prefix(s))), start=1):
        text = "\n".join((_prefix(cue.speaker) if j == 0 else "") + line for j, line in enumerate(cue.lines))
        blocks.append(f"{i}\n{timestamp(cue.start, ',')} --> {timestamp(cue.end, ',')}\n{text}\n\n")
    return "".join(blocks)
