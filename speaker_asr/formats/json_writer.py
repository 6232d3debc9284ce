"""``json``: the handler's response itself (speakers renamed when names are given)."""

from __future__ import annotations

from speaker_asr.types import Response

NAME = "json"


def render(response: Response, *, task: str = "transcribe") -> dict:
    return response  # already a renamed deep copy (see formats.render)
