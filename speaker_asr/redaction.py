"""Secrets kept out of every message: the values of HF_TOKEN, API_KEY and the other secret
variables (:func:`refresh_secrets`), bearer credentials and anything shaped like a Hugging Face
token, each replaced by ``<redacted>`` (:func:`scrub`). The server's logs and answers and the
batch client's messages all go through it."""

from __future__ import annotations

import os
import re
from typing import Any, Optional

# HF_TOKEN (the hub) and API_KEY (this server's own key: every client's Authorization header)
_SECRET_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "API_KEY")
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "API_KEY")
# a Hugging Face user access token, wherever it comes from
_HF_TOKEN_PATTERN = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
# a bearer credential (an Authorization header's value, the server's key or a wrong one a client
# sent), wherever it would show up in a message
_BEARER_PATTERN = re.compile(r"(?i)\b(bearer\s+)[^\s\"',;]+")
REDACTED = "<redacted>"
_secrets: Optional[list[str]] = None


def refresh_secrets(environ: Optional[dict] = None) -> list[str]:
    """Remember the values of HF_TOKEN, API_KEY and other *_TOKEN / *_SECRET / *_API_KEY
    variables for :func:`scrub`."""
    global _secrets
    env = os.environ if environ is None else environ
    values = set()
    for name, value in env.items():
        upper = name.upper()
        if upper in _SECRET_NAMES or upper.endswith(_SECRET_SUFFIXES):
            value = (value or "").strip()
            if len(value) >= 6:
                values.add(value)
    _secrets = sorted(values, key=len, reverse=True)
    return _secrets


def scrub(text: Any) -> str:
    """``text`` with every secret replaced by ``<redacted>``."""
    text = str(text)
    for secret in _secrets if _secrets is not None else refresh_secrets():
        text = text.replace(secret, REDACTED)
    text = _BEARER_PATTERN.sub(lambda m: m.group(1) + REDACTED, text)
    return _HF_TOKEN_PATTERN.sub(REDACTED, text)
