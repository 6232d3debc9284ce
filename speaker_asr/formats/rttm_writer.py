"""``rttm``: NIST RTTM speaker turns, one line per speaker segment:

``SPEAKER <uri> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>`` (seconds, 3 decimals).

Segments without a speaker or without duration are left out; whitespace inside a speaker name
becomes ``_`` (RTTM fields are whitespace-separated). Empty without diarization.
"""

from __future__ import annotations

from ._common import label, speaker_segments, to_ms
from speaker_asr.types import Response

NAME = "rttm"
DEFAULT_URI = "audio"


def write(response: Response, uri: str = DEFAULT_URI) -> str:
    uri = "_".join(str(uri).split()) or DEFAULT_URI
    lines = []
    for seg in speaker_segments(response) or []:
        name = label(seg["speaker"])
        start, end = to_ms(seg["start"]), to_ms(seg["end"])
        if name is None or end <= start:
            continue
        lines.append(f"SPEAKER {uri} 1 {start / 1000:.3f} {(end - start) / 1000:.3f} <NA> <NA> "
                     f"{'_'.join(name.split())} <NA> <NA>\n")
    return "".join(lines)


def render(response: Response, *, task: str = "transcribe") -> dict:
    return {"format": NAME, "content": write(response)}
