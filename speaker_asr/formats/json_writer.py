"""``json``: the handler's response itself (speakers renamed when names are given)."""

from __future__ import annotations

from ._common import Options
from speaker_asr.result import Result


def write(result: Result, options: Options) -> dict:
    return result.to_json()
