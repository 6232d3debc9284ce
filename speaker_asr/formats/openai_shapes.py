"""OpenAI's audio API shapes, written from a :class:`~speaker_asr.result.Result`: what
``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` answer
(speaker_asr/serving/openai_api.py), in the shapes the official ``openai`` SDK parses into its own
types, with a ``speaker`` beside every segment and word.

* ``json`` (``Transcription``): ``{"text", "usage"}``;
* ``text``, ``srt``, ``vtt``: the plain text (the transcript's text; subtitles with the speaker as
  a ``SPEAKER_00: `` prefix in srt and a ``<v SPEAKER_00>`` voice span in vtt);
* ``verbose_json`` (``TranscriptionVerbose``): ``task``, ``language`` (Whisper's name of it:
  ``english``), ``duration``, ``text``, ``segments`` (Whisper's segments, split where the speaker
  changes: ``id``, ``seek``, ``start``, ``end``, ``text``, ``tokens``, ``temperature``,
  ``avg_logprob``, ``compression_ratio``, ``no_speech_prob``, ``speaker``) with the ``segment``
  granularity, ``words`` (``word``, ``start``, ``end``, ``speaker``) with the ``word`` one,
  ``usage``;
* ``diarized_json`` (``TranscriptionDiarized``): ``task``, ``duration``, ``text``, ``segments``
  (one per speaker turn: ``type`` ``transcript.text.segment``, ``id`` ``seg_0``..., ``start``,
  ``end``, ``text``, ``speaker``), ``usage``;
* ``stream=true``: server-sent events, per speaker turn a ``transcript.text.delta`` and a
  ``transcript.text.segment``, then one ``transcript.text.done`` (:func:`stream_events`, :func:`sse`);
* errors: ``{"error": {"message", "type", "param", "code"}}`` (:func:`error_object`), and the model
  list of ``GET /v1/models`` (:func:`model_list`).

The JSON shapes also carry ``model`` (the model that ran) and, when there are any, ``warnings``,
``known_speakers`` and ``speaker_embeddings`` as the other formats do (extra fields: the SDK keeps
them on its objects). What Whisper's segments have in OpenAI's shape and this pipeline does not
keep is written as it is known: ``tokens`` ``[]``, ``avg_logprob`` and ``no_speech_prob`` null,
``seek`` the segment's start in 10 ms frames, ``temperature`` the request's (first) temperature;
``compression_ratio`` is computed from the text as Whisper does (zlib). A time Whisper left out is
the previous one (a word's start: the previous word's end; its end: its start).

Pure Python: no torch.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from . import srt_writer, vtt_writer
from speaker_asr.result import Result

OPENAI_FORMATS: tuple[str, ...] = ("json", "text", "srt", "verbose_json", "vtt", "diarized_json")
TEXT_FORMATS: tuple[str, ...] = ("text", "srt", "vtt")
TIMESTAMP_GRANULARITIES: tuple[str, ...] = ("word", "segment")
JSON_MEDIA_TYPE = "application/json"
TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
EVENT_STREAM_MEDIA_TYPE = "text/event-stream; charset=utf-8"


@dataclass(frozen=True)
class Options:
    """How to write one answer. ``words`` / ``segments``: the ``timestamp_granularities`` asked
    for (verbose_json; none given means segments); ``model``: the model that ran (None: not
    named); ``temperature``: the request's first temperature (verbose_json's segments);
    ``language_names``: language code -> Whisper's name (``en`` -> ``english``), for
    verbose_json's ``language`` (a code without a name is written as it is)."""

    task: str = "transcribe"
    response_format: str = "json"
    words: bool = False
    segments: bool = True
    model: Optional[str] = None
    temperature: float = 0.0
    language_names: Mapping[str, str] = field(default_factory=dict)


def media_type(response_format: str) -> str:
    return TEXT_MEDIA_TYPE if response_format in TEXT_FORMATS else JSON_MEDIA_TYPE


def render(result: Result, options: Options) -> Union[dict[str, Any], str]:
    """The answer for ``options.response_format``: a dict for the JSON formats, the text for
    ``text``, ``srt`` and ``vtt``."""
    fmt = options.response_format
    if fmt == "json":
        return transcription(result, options)
    if fmt == "verbose_json":
        return verbose(result, options)
    if fmt == "diarized_json":
        return diarized(result, options)
    if fmt == "text":
        return plain_text(result)
    if fmt == "srt":
        return srt_writer.write(result)
    if fmt == "vtt":
        return vtt_writer.write(result)
    raise ValueError(f"unknown response_format {fmt!r}: use one of {', '.join(OPENAI_FORMATS)}")


# --------------------------------------------------------------------------- the shapes


def text_of(result: Result) -> str:
    """The transcript's text as OpenAI writes it: without the leading space Whisper puts there."""
    return result.text.strip()


def plain_text(result: Result) -> str:
    """``response_format=text``: the transcript's text and a line break (nothing for silence)."""
    text = text_of(result)
    return text + "\n" if text else ""


def usage(result: Result) -> Optional[dict[str, Any]]:
    """OpenAI's usage by audio duration: ``{"type": "duration", "seconds"}``."""
    return None if result.duration is None else {"type": "duration", "seconds": result.duration}


def _extras(result: Result, options: Options) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if options.model is not None:
        out["model"] = options.model
    carried = result.carried_json()
    for key in ("warnings", "known_speakers", "speaker_embeddings"):
        if key in carried:
            out[key] = carried[key]
    return out


def transcription(result: Result, options: Options) -> dict[str, Any]:
    """``json``: OpenAI's ``Transcription``."""
    out: dict[str, Any] = {"text": text_of(result)}
    if (used := usage(result)) is not None:
        out["usage"] = used
    out.update(_extras(result, options))
    return out


def compression_ratio(text: str) -> float:
    """Whisper's measure of repetition: the text's UTF-8 length over its zlib-compressed length."""
    data = text.encode("utf-8")
    if not data:
        return 0.0
    return round(len(data) / len(zlib.compress(data)), 4)


def _times(start: Optional[float], end: Optional[float], previous: float) -> tuple[float, float]:
    start = start if start is not None else previous
    end = end if end is not None and end >= start else start
    return start, end


def words_of(result: Result) -> list[dict[str, Any]]:
    """Every word of the transcript with its times and speaker (``overlap`` when others talk
    over it), in order."""
    out = []
    for seg in result.segments:
        previous = seg.start if seg.start is not None else 0.0
        for w in seg.words:
            start, end = _times(w.start, w.end, previous)
            previous = end
            text = w.text.strip()
            if not text:
                continue
            word: dict[str, Any] = {"word": text, "start": start, "end": end,
                                    "speaker": w.speaker if result.diarized else None}
            if w.overlap:
                word["overlap"] = list(w.overlap)
            out.append(word)
    return out


def verbose(result: Result, options: Options) -> dict[str, Any]:
    """``verbose_json``: OpenAI's ``TranscriptionVerbose`` / ``TranslationVerbose`` (whose
    ``language`` is always ``english``, the language of the translation)."""
    if options.task == "translate":
        language: Optional[str] = "english"
    else:
        language = options.language_names.get(result.language, result.language) \
            if result.language is not None else None
    out: dict[str, Any] = {"task": options.task, "language": language,
                           "duration": result.duration, "text": text_of(result)}
    if options.segments:
        segments = []
        previous = 0.0
        for i, seg in enumerate(result.segments):
            start, end = _times(seg.start, seg.end, previous)
            previous = end
            segments.append({
                "id": i, "seek": int(round(start * 100)), "start": start, "end": end,
                "text": seg.text, "tokens": [], "temperature": options.temperature,
                "avg_logprob": None, "compression_ratio": compression_ratio(seg.text),
                "no_speech_prob": None, "speaker": seg.speaker if result.diarized else None})
        out["segments"] = segments
    if options.words:
        out["words"] = words_of(result)
    if (used := usage(result)) is not None:
        out["usage"] = used
    out.update(_extras(result, options))
    return out


def turns_of(result: Result) -> list[tuple[float, float, str, Optional[str]]]:
    """(start, end, text, speaker) per speaker turn; without diarization per transcript segment
    (speaker None). Parts without text are left out."""
    if result.diarized:
        parts = [(t.start, t.end, t.text.strip(), t.speaker) for t in result.speaker_turns]
    else:
        parts = [(s.start, s.end, s.text.strip(), None) for s in result.segments]
    out, previous = [], 0.0
    for start, end, text, speaker in parts:
        start, end = _times(start, end, previous)
        previous = end
        if text:
            out.append((start, end, text, speaker))
    return out


def _segment(i: int, part: tuple[float, float, str, Optional[str]]) -> dict[str, Any]:
    start, end, text, speaker = part
    return {"type": "transcript.text.segment", "id": f"seg_{i}", "start": start, "end": end,
            "text": text, "speaker": speaker}


def diarized(result: Result, options: Options) -> dict[str, Any]:
    """``diarized_json``: OpenAI's ``TranscriptionDiarized``, one segment per speaker turn (known
    speakers under their names, the others ``SPEAKER_00``, ...)."""
    out: dict[str, Any] = {"task": options.task, "duration": result.duration, "text": text_of(result),
                           "segments": [_segment(i, p) for i, p in enumerate(turns_of(result))]}
    if (used := usage(result)) is not None:
        out["usage"] = used
    out.update(_extras(result, options))
    return out


# --------------------------------------------------------------------------- streaming


def stream_events(result: Result, options: Options) -> list[dict[str, Any]]:
    """The events of ``stream=true``: per speaker turn (transcript segment without diarization)
    a ``transcript.text.delta`` (its text, after a space from the second on, and its
    ``segment_id``) and a ``transcript.text.segment`` (as in diarized_json), then one
    ``transcript.text.done`` with the whole text (and ``warnings`` / ``known_speakers`` when
    there are any)."""
    events: list[dict[str, Any]] = []
    for i, part in enumerate(turns_of(result)):
        events.append({"type": "transcript.text.delta", "delta": part[2] if i == 0 else " " + part[2],
                       "segment_id": f"seg_{i}"})
        events.append(_segment(i, part))
    done: dict[str, Any] = {"type": "transcript.text.done", "text": text_of(result)}
    carried = result.carried_json()
    for key in ("warnings", "known_speakers"):
        if key in carried:
            done[key] = carried[key]
    events.append(done)
    return events


def sse(event: Mapping[str, Any]) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line."""
    return b"data: " + json.dumps(event, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n\n"


SSE_KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: clients skip it, proxies see traffic


# --------------------------------------------------------------------------- errors and models


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for a status code."""
    if status == 429:
        return "rate_limit_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error_object(message: str, status: int, param: Optional[str] = None,
                 code: Optional[str] = None) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type(status), "param": param, "code": code}}


@dataclass(frozen=True)
class ModelCard:
    """One entry of ``GET /v1/models``."""

    id: str
    created: int
    owned_by: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": self.owned_by}


def model_list(cards: list[ModelCard]) -> dict[str, Any]:
    """OpenAI's list shape: ``{"object": "list", "data": [model, ...]}``."""
    return {"object": "list", "data": [card.to_json() for card in cards]}
