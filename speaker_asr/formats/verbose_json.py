"""``verbose_json``: OpenAI's ``TranscriptionVerbose`` / ``TranslationVerbose``, with a ``speaker``
on every segment and word -- the one shape of this name, on ``POST /`` and on ``/v1``.

``{"task", "language", "duration", "text", "segments", "words", "usage"}``:

* ``language``: Whisper's name of it (``english``), as OpenAI writes it; on translations always
  ``english``, the language of the translation;
* ``text``: the transcript, without Whisper's leading space;
* ``segments`` (unless only words are asked for): Whisper's segments, split where the speaker
  changes: ``id``, ``seek``, ``start``, ``end``, ``text``, ``tokens``, ``temperature``,
  ``avg_logprob``, ``compression_ratio``, ``no_speech_prob``, ``speaker`` (null without
  diarization). What Whisper's segments have and this pipeline does not keep is written as it is
  known: ``tokens`` ``[]``, ``avg_logprob`` and ``no_speech_prob`` null, ``seek`` the segment's
  start in 10 ms frames, ``temperature`` the request's (first) temperature; ``compression_ratio``
  is computed from the text as Whisper does (zlib);
* ``words`` (with word timestamps): every word, ``word`` (stripped), ``start``, ``end``,
  ``speaker``, and ``overlap`` (the other speakers talking over it) when any;
* ``usage``: ``{"type": "duration", "seconds"}``; then ``model`` when named, and ``assisted``,
  ``known_speakers``, ``speaker_embeddings``, ``warnings`` when present.

A time Whisper left out is the previous one (a word's start: the previous word's end; its end:
its start). Pure Python (no torch); Whisper's language names come from transformers' table, read
the first time they are needed.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Mapping, Optional

from ._common import Options, closing_fields, times, transcript_text
from speaker_asr.result import Result


def write(result: Result, options: Options) -> dict[str, Any]:
    out: dict[str, Any] = {"task": options.task, "language": language(result, options),
                           "duration": result.duration, "text": transcript_text(result)}
    if options.segments:
        out["segments"] = segments_of(result, options.temperature)
    if options.words:
        out["words"] = words_of(result)
    out.update(closing_fields(result, options))
    return out


def language(result: Result, options: Options) -> Optional[str]:
    """Whisper's name of the result's language (``english``; ``english`` for a translation); a
    code without a name as it is; None when no language was found (silence)."""
    if options.task == "translate":
        return "english"
    if result.language is None:
        return None
    names = options.language_names if options.language_names is not None else whisper_language_names()
    return names.get(result.language, result.language)


@functools.lru_cache(maxsize=1)
def whisper_language_names() -> Mapping[str, str]:
    """Whisper's language names by code (``en`` -> ``english``), from transformers; empty where
    transformers is missing (the codes are written then)."""
    try:
        from transformers.models.whisper.tokenization_whisper import LANGUAGES
    except ImportError:  # pragma: no cover - transformers is a dependency of the package
        return {}
    return dict(LANGUAGES)


def compression_ratio(text: str) -> float:
    """Whisper's measure of repetition: the text's UTF-8 length over its zlib-compressed length."""
    data = text.encode("utf-8")
    if not data:
        return 0.0
    return round(len(data) / len(zlib.compress(data)), 4)


def segments_of(result: Result, temperature: float) -> list[dict[str, Any]]:
    out, previous = [], 0.0
    for i, seg in enumerate(result.segments):
        start, end = times(seg.start, seg.end, previous)
        previous = end
        out.append({
            "id": i, "seek": int(round(start * 100)), "start": start, "end": end,
            "text": seg.text, "tokens": [], "temperature": temperature,
            "avg_logprob": None, "compression_ratio": compression_ratio(seg.text),
            "no_speech_prob": None, "speaker": seg.speaker if result.diarized else None})
        if result.channels is not None:
            out[-1]["channel"] = seg.channel
    return out


def words_of(result: Result) -> list[dict[str, Any]]:
    """Every word of the transcript with its times and speaker (``overlap`` when others talk
    over it), in order; words without text are left out."""
    out = []
    for seg in result.segments:
        previous = seg.start
        for w in seg.words:
            start, end = times(w.start, w.end, previous)
            previous = end
            text = w.text.strip()
            if not text:
                continue
            word: dict[str, Any] = {"word": text, "start": start, "end": end,
                                    "speaker": w.speaker if result.diarized else None}
            if result.channels is not None:
                word["channel"] = w.channel
            if w.overlap:
                word["overlap"] = list(w.overlap)
            out.append(word)
    return out
