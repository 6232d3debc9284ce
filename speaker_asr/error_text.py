"""The pieces every "what is wrong and what is allowed" sentence is made of, for the settings
(speaker_asr/settings.py: ``PORT='eighty' is not valid: use a whole number >= 0 and <= 65535``) and
the request parameters (speaker_asr/config.py: ``invalid value for 'batch_size': 0; expected an
integer >= 1 and <= 64``). The live protocol words its errors as OpenAI's server does
(speaker_asr/live/protocol/errors.py)."""

from __future__ import annotations

from typing import Any

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def bounds_text(info: Any) -> str:
    """A pydantic field's bounds in words: ``>= 1 and <= 64`` (empty when it has none)."""
    bounds = []
    for m in info.metadata:
        for attr, sym in _BOUNDS:
            if getattr(m, attr, None) is not None:
                bounds.append(f"{sym} {getattr(m, attr)}")
    return " and ".join(bounds)


def shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def value_error_text(message: str) -> str:
    """A validator's own message without pydantic's ``Value error, `` prefix."""
    return message.removeprefix("Value error, ")


def too_many_channels_text(count: int, limit: int) -> str:
    """``multichannel`` on a recording with more channels than it takes: said by the decoder (from
    the file's header, before the samples are read) and by the request's own check alike."""
    return f"the recording has {count} channels; multichannel takes at most {limit}"
