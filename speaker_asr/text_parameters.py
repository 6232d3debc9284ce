"""Request parameters given as text -- a query string, form fields, ``--param NAME=VALUE`` -- read
by each parameter's declared type (:meth:`InferenceConfig.parameters_from_strings`): what the
server reads from a request and what the batch client checks a query string against."""

from __future__ import annotations

from typing import Any, Iterable


def list_key(key: str) -> str:
    """OpenAI-style ``key[]`` names mean ``key`` (``-F known_speaker_names[]=Alice``)."""
    return key[:-2] if key.endswith("[]") else key


def parameters_from_text(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """(name, text) pairs -- a query string, form fields -> parameters, each read by its declared
    type (:meth:`~speaker_asr.config.InferenceConfig.parameters_from_strings`: ``prompt=1984``
    stays text, ``num_speakers=2`` is a number). A name given more than once is a list
    (``?speaker_names=Diane&speaker_names=Sheila``); ``key[]`` means ``key``. Values already
    decoded (an uploaded clip, as base64) are kept as they are. RequestError for an unknown name
    or a value of the wrong type."""
    from speaker_asr.config import InferenceConfig

    grouped: dict[str, list] = {}
    for key, value in items:
        grouped.setdefault(list_key(key), []).append(value)
    if not grouped:
        return {}
    return InferenceConfig.parameters_from_strings(grouped)
