"""Which files are recordings, by their extension, and the Content-Type each one is uploaded with.

A folder given to ``python -m speaker_asr transcribe`` is searched for files whose extension is in
:data:`AUDIO_EXTENSIONS` (case-insensitive); everything else is skipped. The list is what the
decoder reads (audio/decode.py: libsndfile for WAV, FLAC, MP3, Ogg; ffmpeg for the rest, video
containers included, their first audio stream). A file named on the command line is always
tried, whatever its extension.

:func:`upload_content_type` is the ``Content-Type`` a raw upload of a recording is sent with
(``transcribe --url --body raw``): one of the audio types the Inference Endpoints toolkit accepts
where one fits (it refuses any other), ``audio/x-audio`` (which it also accepts) for the rest.
Pure Python.
"""

from __future__ import annotations

from pathlib import PurePath

# extension -> Content-Type of a raw upload (the inference toolkit's own list where one fits)
_UPLOAD_CONTENT_TYPES = {
    "wav": "audio/wav", "wave": "audio/wav", "bwf": "audio/wav", "rf64": "audio/wav",
    "flac": "audio/flac",
    "mp3": "audio/mpeg", "mpga": "audio/mpeg",
    "ogg": "audio/ogg", "oga": "audio/ogg", "opus": "audio/ogg", "spx": "audio/ogg",
    "webm": "audio/webm", "weba": "audio/webm",
    "m4a": "audio/m4a", "m4b": "audio/m4a", "mp4": "audio/m4a", "3gp": "audio/m4a",
    "mov": "audio/m4a",
    "amr": "audio/amr", "awb": "audio/AMR-WB",
    "aac": "audio/x-audio", "aif": "audio/x-audio", "aiff": "audio/x-audio",
    "aifc": "audio/x-audio", "au": "audio/x-audio", "snd": "audio/x-audio", "caf": "audio/x-audio",
    "wma": "audio/x-audio", "asf": "audio/x-audio", "mka": "audio/x-audio", "mkv": "audio/x-audio",
    "ac3": "audio/x-audio", "w64": "audio/x-audio",
}

AUDIO_EXTENSIONS: frozenset[str] = frozenset(_UPLOAD_CONTENT_TYPES)
FALLBACK_CONTENT_TYPE = "audio/x-audio"


def extension(path: "str | PurePath") -> str:
    """``Talk.MP3`` -> ``mp3``; no extension -> ``""``."""
    return PurePath(path).suffix.lower().lstrip(".")


def is_audio(path: "str | PurePath") -> bool:
    """Whether a file is a recording by its name (:data:`AUDIO_EXTENSIONS`)."""
    return extension(path) in AUDIO_EXTENSIONS


def upload_content_type(path: "str | PurePath") -> str:
    """The Content-Type a raw upload of ``path`` is sent with (``audio/x-audio`` for an unknown extension)."""
    return _UPLOAD_CONTENT_TYPES.get(extension(path), FALLBACK_CONTENT_TYPE)
