"""What pyannote's clustering step is handed for a recording of any length, made up: the windows'
binarized segmentations and their (window, speaker slot) embeddings, with the true voice of each.

The shape is the 3.1 recipe's: 10-s windows every second, 3 local speaker slots, 589 frames per
window (segmentation-3.0's). A conversation of ``voices`` people is drawn second by second (turns
of 2-20 s; a ``returning`` voice speaks only in the first and the last tenth of the recording,
as a person who comes back after a long gap); each slot active in a window gets an embedding
near its voice's direction (``spread``: the noise's norm against the unit voice vector, 0.75
putting one voice's embeddings about as far from their centroid as real CAM++ ones are). For the
tests and bench/clustering_bench.py: 14,400 windows is a 4-hour meeting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

FRAMES = 589
SLOTS = 3
WINDOW_S = 10
STEP_S = 1


@dataclass
class Windows:
    embeddings: np.ndarray  # (windows, slots, dim) float32, NaN where a slot is silent
    segmentations: object  # pyannote.core.SlidingWindowFeature (windows, frames, slots) 0/1
    voices: np.ndarray  # (windows, slots) the true voice of each slot, -1 where silent

    @property
    def num_voices(self) -> int:
        return int(self.voices.max()) + 1


def synthetic_windows(num_windows: int, voices: int = 8, dim: int = 192, seed: int = 0,
                      spread: float = 0.75, returning: Optional[int] = None) -> Windows:
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(voices, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    seconds = num_windows + WINDOW_S
    others = [v for v in range(voices) if v != returning]
    who = np.empty(seconds, dtype=np.int64)
    t = 0
    while t < seconds:
        length = int(rng.integers(2, 21))
        edge = returning is not None and (t < seconds // 10 or t >= seconds - seconds // 10)
        who[t:t + length] = rng.choice([returning] + others[:1] if edge else others)
        t += length
    per_second = FRAMES / WINDOW_S
    bounds = np.round(np.arange(WINDOW_S + 1) * per_second).astype(int)
    segmentations = np.zeros((num_windows, FRAMES, SLOTS), dtype=np.float32)
    embeddings = np.full((num_windows, SLOTS, dim), np.nan, dtype=np.float32)
    truth = np.full((num_windows, SLOTS), -1, dtype=np.int64)
    for c in range(num_windows):
        span = who[c:c + WINDOW_S]
        for slot, voice in enumerate(dict.fromkeys(span.tolist())):
            if slot == SLOTS:
                break
            for second in np.flatnonzero(span == voice):
                segmentations[c, bounds[second]:bounds[second + 1], slot] = 1.0
            truth[c, slot] = voice
    active = truth >= 0
    noise = rng.normal(size=(int(active.sum()), dim)) * (spread / np.sqrt(dim))
    embeddings[active] = directions[truth[active]] + noise
    window = SlidingWindow(start=0.0, duration=float(WINDOW_S), step=float(STEP_S))
    return Windows(embeddings, SlidingWindowFeature(segmentations, window), truth)
