"""The language of a live session's items when the session gives none and the model is
multilingual: each item's language is detected once, at its first decode, on the committed speech
heard so far with its own audio (the last 30 s), and once that speech was
:data:`LANGUAGE_LOCK_S` long the session keeps that language for good -- as the file route detects
one language per file on its first 30 s. (Detection on a second of speech, or on ten, picked
Welsh for an English meeting with Whisper base, which then looped.)

No I/O and no model: :class:`SessionLanguage` is told what was heard and is handed the detection
as a function; the session awaits it.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE

# the most audio a detection hears (Whisper's window), and the committed speech after which the
# session keeps the language it detected
MAX_HEARD_S = 30.0
LANGUAGE_LOCK_S = 30.0


class SessionLanguage:
    """What one session knows of its language. ``multilingual``: the model detects languages at
    all (an English-only model never does)."""

    def __init__(self, multilingual: bool):
        self.multilingual = multilingual
        self.kept: Optional[str] = None  # the session's language once kept
        self._heard = np.zeros(0, dtype=np.float32)  # committed speech, the last 30 s, until then

    def detects(self, session_language: Optional[str]) -> bool:
        """Whether items still get their language detected: a multilingual model, no session
        language and none kept yet."""
        return not session_language and self.kept is None and self.multilingual

    def heard(self, audio: np.ndarray, session_language: Optional[str]) -> None:
        """A committed item's audio, heard by later detections while they are still made."""
        if self.detects(session_language):
            self._heard = np.concatenate([self._heard, audio])[-int(MAX_HEARD_S * SAMPLE_RATE):]

    def forget(self) -> None:
        """The session's language changed: what was kept no longer holds."""
        self.kept = None

    async def for_item(self, audio: np.ndarray, session_language: Optional[str],
                       detect: Callable[[np.ndarray], Awaitable[Optional[str]]]) -> Optional[str]:
        """The language of an item whose audio (so far) is ``audio``: the session's, the kept
        one, or one ``detect`` finds on the speech heard with this audio (None: the model
        decides by itself at each decode)."""
        if session_language or not self.multilingual:
            return session_language or None
        if not self.detects(session_language):
            return self.kept
        heard = np.concatenate([self._heard, audio])[-int(MAX_HEARD_S * SAMPLE_RATE):]
        language = await detect(heard)
        if language and len(heard) >= LANGUAGE_LOCK_S * SAMPLE_RATE:
            self.kept, self._heard = language, np.zeros(0, dtype=np.float32)
        return language
