"""``diarized_json``: OpenAI's ``TranscriptionDiarized`` (``gpt-4o-transcribe-diarize``) -- the one
shape of this name, on ``POST /`` and on ``/v1``.

``{"task", "duration", "text", "segments": [{"type": "transcript.text.segment", "id": "seg_0",
"start", "end", "text", "speaker"}], "usage"}``: one segment per speaker turn (per transcript
segment, speaker null, when diarization is off), parts without text left out; ``text`` without
Whisper's leading space; then ``model`` when named, and ``assisted``, ``known_speakers``,
``speaker_embeddings``, ``warnings`` when present. The same segments are the
``transcript.text.segment`` events of ``stream=true`` (:func:`turns_of`, :func:`segment`).
"""

from __future__ import annotations

from typing import Any, Optional

from ._common import Options, closing_fields, times, transcript_text
from speaker_asr.result import Result

Part = tuple[float, float, str, Optional[str], Optional[int]]  # start, end, text, speaker, channel


def write(result: Result, options: Options) -> dict[str, Any]:
    out: dict[str, Any] = {"task": options.task, "duration": result.duration,
                           "text": transcript_text(result),
                           "segments": [segment(i, p, result.channels is not None)
                                        for i, p in enumerate(turns_of(result))]}
    out.update(closing_fields(result, options))
    return out


def turns_of(result: Result) -> list[Part]:
    """(start, end, text, speaker, channel) per speaker turn; without diarization per transcript
    segment (speaker None). Parts without text are left out."""
    if result.diarized:
        parts = [(t.start, t.end, t.text.strip(), t.speaker, t.channel) for t in result.speaker_turns]
    else:
        parts = [(s.start, s.end, s.text.strip(), None, None) for s in result.segments]
    out, previous = [], 0.0
    for start, end, text, speaker, channel in parts:
        start, end = times(start, end, previous)
        previous = end
        if text:
            out.append((start, end, text, speaker, channel))
    return out


def segment(i: int, part: Part, with_channel: bool = False) -> dict[str, Any]:
    """One ``transcript.text.segment``; ``with_channel`` (multichannel): its ``channel`` too."""
    start, end, text, speaker, channel = part
    out = {"type": "transcript.text.segment", "id": f"seg_{i}", "start": start, "end": end,
           "text": text, "speaker": speaker}
    if with_channel:
        out["channel"] = channel
    return out
