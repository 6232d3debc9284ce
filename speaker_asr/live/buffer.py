"""A live session's audio buffer: the audio appended and not yet committed, on the session's
*audio clock* (samples since the session began, 16 kHz; every ``*_ms`` of its events and every
segment time is on it). No I/O."""

from __future__ import annotations

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE


class AudioBuffer:
    """:attr:`samples` start at clock sample :attr:`start`; :attr:`clock` counts every sample
    appended, so it stays the session's clock when the buffer is trimmed or cleared."""

    def __init__(self):
        self.samples = np.zeros(0, dtype=np.float32)
        self.start = 0
        self.clock = 0

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def held_ms(self) -> float:
        """How much audio the buffer holds, in milliseconds."""
        return len(self.samples) * 1000.0 / SAMPLE_RATE

    def append(self, samples: np.ndarray) -> None:
        self.samples = np.concatenate([self.samples, samples])
        self.clock += len(samples)

    def audio(self, start: int, end: int) -> np.ndarray:
        """The held audio between clock samples ``start`` and ``end`` (a view)."""
        return self.samples[max(0, start - self.start):max(0, end - self.start)]

    def trim(self, start: int) -> None:
        """Drop the audio before clock sample ``start``."""
        if start > self.start:
            self.samples = self.samples[start - self.start:].copy()
            self.start = start

    def clear(self) -> None:
        """Drop all of it: the buffer starts again at the clock."""
        self.samples = np.zeros(0, dtype=np.float32)
        self.start = self.clock
