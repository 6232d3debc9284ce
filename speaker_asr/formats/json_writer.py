"""``json``: the handler's response itself (speakers renamed when names are given)."""

from __future__ import annotations

from speaker_asr.result import Result


def write(result: Result, task: str) -> dict:
    return result.to_json()
