"""``rttm``: NIST RTTM speaker turns, one line per speaker segment:

``SPEAKER <uri> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>`` (seconds, 3 decimals).

``<channel>`` is 1, or in a multichannel transcript the turn's channel counted from 1 (RTTM's
convention; the JSON's ``channel`` counts from 0). Segments without a speaker or without duration are left out; whitespace inside a speaker name
becomes ``_`` (RTTM fields are whitespace-separated). Empty without diarization.
"""

from __future__ import annotations

from ._common import label, to_ms
from speaker_asr.result import Result

DEFAULT_URI = "audio"


def write(result: Result, uri: str = DEFAULT_URI) -> str:
    uri = "_".join(str(uri).split()) or DEFAULT_URI
    lines = []
    for turn in result.speaker_turns:
        name = label(turn.speaker)
        start, end = to_ms(turn.start), to_ms(turn.end)
        if name is None or end <= start:
            continue
        channel = 1 if turn.channel is None else turn.channel + 1
        lines.append(f"SPEAKER {uri} {channel} {start / 1000:.3f} {(end - start) / 1000:.3f} <NA> <NA> "
                     f"{'_'.join(name.split())} <NA> <NA>\n")
    return "".join(lines)
