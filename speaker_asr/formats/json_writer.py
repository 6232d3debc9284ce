"""``json``: the handler's response itself (speakers renamed when names are given)."""

from __future__ import annotations

NAME = "json"


def render(response: dict, *, task: str = "transcribe") -> dict:
    return response  # already a renamed deep copy (see formats.render)
