"""The server's one API-key check (``API_KEY``), for HTTP requests (serving/app.py's middleware)
and live sockets (serving/realtime.py): the key is compared in constant time, as SHA-256 digests
(not even its length leaks), and never logged or echoed."""

from __future__ import annotations

import hashlib
import hmac
from typing import Optional

HOW_TO_SEND = "send the header 'Authorization: Bearer <API_KEY>' (the openai SDK sends its api_key so)"
WRONG_KEY = "the API key is wrong (the one this server was started with: API_KEY)"


def bearer(header: Optional[str]) -> tuple[Optional[str], bool]:
    """An ``Authorization`` header's bearer credential (None when there is none) and whether the
    header was there but malformed (another scheme, or an empty key)."""
    if not header or not header.strip():
        return None, False
    scheme, _, credential = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return None, True
    return credential.strip(), False


class ApiKey:
    """``API_KEY`` (None: no key required)."""

    def __init__(self, key: Optional[str]):
        self._digest = hashlib.sha256(key.encode()).digest() if key else None

    @property
    def required(self) -> bool:
        return self._digest is not None

    def problem(self, given: Optional[str], how_to_send: str = HOW_TO_SEND) -> Optional[tuple[str, str]]:
        """None when ``given`` is the key (or none is required); else (error code, what is
        wrong): ``missing_api_key`` (saying ``how_to_send`` it) or ``invalid_api_key``."""
        if self._digest is None:
            return None
        if not given:
            return "missing_api_key", f"this server requires an API key: {how_to_send}"
        digest = hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest()
        if not hmac.compare_digest(digest, self._digest):
            return "invalid_api_key", WRONG_KEY
        return None
