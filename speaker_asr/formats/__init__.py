"""Output writers: a :class:`~speaker_asr.result.Result` -> json, verbose_json, diarized_json,
srt, vtt, rttm, txt. Pure Python (no torch).

>>> render(result, "srt", speaker_names=["Alice", "Bob"])
{"format": "srt", "content": "1\\n00:00:00,000 --> 00:00:01,200\\nAlice: Hello there.\\n\\n..."}

JSON formats return a dict; text formats return ``{"format": <name>, "content": <text>}`` so every
client still gets JSON. ``verbose_json`` and ``diarized_json`` are OpenAI's shapes, written by one
writer each for ``POST /`` and for the ``/v1`` routes (:mod:`.openai_shapes`). ``render`` also takes a ``json`` response (read with
:meth:`Result.from_json`), and never changes what it is given.

:data:`FORMATS` (every format, with its file extension, media type and writer) and :data:`TASKS`
are the vocabularies the request validation (config.py), the command line and the writers read:
config.py imports this package, and nothing here imports config.py (speaker names are checked by
:mod:`speaker_asr.speaker_names`, below both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

from . import (diarized_json, json_writer, rttm_writer, srt_writer, txt_writer, verbose_json,
               vtt_writer)
from ._common import Options, first_temperature
from speaker_asr.errors import RequestError
from speaker_asr.result import Result
from speaker_asr.speaker_names import validate_speaker_names

JSON_MEDIA_TYPE = "application/json"
Temperature = Union[float, Sequence[float]]


@dataclass(frozen=True)
class Format:
    """One ``response_format``: its name, the extension of a file holding it, the media type of
    what it writes, and its writer: ``write(result)`` -> the text of a text format,
    ``write(result, options)`` -> the object of a JSON format (:class:`Options`)."""

    name: str
    extension: str
    media_type: str
    write: Callable[..., Any]

    @property
    def is_text(self) -> bool:
        return self.media_type != JSON_MEDIA_TYPE

    def render(self, result: Result, options: Options) -> dict[str, Any]:
        if self.is_text:
            return {"format": self.name, "content": self.write(result)}
        return self.write(result, options)


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("json", "json", JSON_MEDIA_TYPE, json_writer.write),
    Format("verbose_json", "json", JSON_MEDIA_TYPE, verbose_json.write),
    Format("diarized_json", "json", JSON_MEDIA_TYPE, diarized_json.write),
    Format("srt", "srt", "application/x-subrip", srt_writer.write),
    Format("vtt", "vtt", "text/vtt", vtt_writer.write),
    Format("rttm", "rttm", "text/plain", rttm_writer.write),
    Format("txt", "txt", "text/plain", txt_writer.write),
)}
TASKS: tuple[str, ...] = ("transcribe", "translate")

__all__ = ["FORMATS", "TASKS", "Format", "Options", "first_temperature", "render", "render_response"]


def render(response: Union[Result, dict], fmt: str, *, speaker_names: Optional[list[str]] = None,
           task: str = "transcribe", temperature: Temperature = 0.0) -> dict[str, Any]:
    """The transcript in format ``fmt``. ``speaker_names`` renames speakers in order of first
    appearance (the first to speak -> ``speaker_names[0]``, ...; later ones keep their labels);
    ``temperature``: the request's temperature, or the first of its list (written on
    verbose_json's segments). verbose_json
    has ``words`` when the result has word timestamps. Raises RequestError (a ValueError) for
    an unknown format or task, bad names, or a response that is neither a Result nor a dict."""
    return _render(response, fmt, speaker_names, task, temperature)[0]


def render_response(response: Union[Result, dict], fmt: str, *,
                    speaker_names: Optional[list[str]] = None, task: str = "transcribe",
                    temperature: Temperature = 0.0) -> dict[str, Any]:
    """What the endpoint answers for ``response_format=fmt``: :func:`render`, with what every
    format carries beside its transcript (:meth:`Result.carried_json`: audio length, warnings,
    known speakers, voice embeddings)."""
    out, result = _render(response, fmt, speaker_names, task, temperature)
    for key, value in result.carried_json().items():
        out.setdefault(key, value)
    return out


def _render(response: Union[Result, dict], fmt: str, speaker_names: Optional[list[str]], task: str,
            temperature: Temperature) -> tuple[dict[str, Any], Result]:
    form, result = _prepare(response, fmt, speaker_names, task)
    options = Options(task=task, response_format=form.name, words=result.with_words,
                      temperature=first_temperature(temperature))
    return form.render(result, options), result


def _prepare(response: Union[Result, dict], fmt: str, speaker_names: Optional[list[str]],
             task: str) -> tuple[Format, Result]:
    """The format asked for and the result with ``speaker_names`` applied, once the format, the
    task, the names and the response are checked."""
    name = fmt.strip().lower() if isinstance(fmt, str) else None
    if name not in FORMATS:
        raise RequestError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    if task not in TASKS:
        raise RequestError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if isinstance(response, dict):
        response = Result.from_json(response)
    elif not isinstance(response, Result):
        raise RequestError(f"the response to render must be a dict, got {type(response).__name__}")
    return FORMATS[name], response.named(validate_speaker_names(speaker_names))
