"""Speaker embeddings with the diarization pipeline's own embedding model: one vector per found
speaker (a centroid of its clean speech) and one per reference clip, in the same space, so that
:mod:`speaker_asr.attribution.naming` can match them.

The centroids are computed here rather than taken from the pipeline's clustering: pyannote 3.x
and 4.x hand them out differently (``return_embeddings=True`` vs ``DiarizeOutput``), a VBx
recipe keeps them in its PLDA space, and the clustering's training embeddings include overlapped
speech. Here every vector -- speaker or reference -- is the same model run the same way on one
person's speech: a speaker's longest exclusive turns (no overlap), cut into pieces of at most
:data:`MAX_PIECE_S`, up to :data:`MAX_SPEECH_PER_SPEAKER_S` per speaker, each piece's embedding
L2-normalised, averaged weighted by duration and normalised again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from typing import Iterable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.types import Turn

logger = logging.getLogger(__name__)

# longest piece embedded at once (the 3.1 recipe's own window is 10 s)
MAX_PIECE_S = 10.0
# shortest exclusive turn used for a speaker's centroid when it has longer ones
MIN_PIECE_S = 0.5
# speech per speaker that goes into its centroid (its longest turns first)
MAX_SPEECH_PER_SPEAKER_S = 60.0


def embedding_model(pipeline):
    """The pipeline's speaker-embedding model (pyannote 3.x and 4.x ``SpeakerDiarization`` keep it
    as ``_embedding``: a callable ``(batch, 1, samples) -> (batch, dimension)``)."""
    model = getattr(pipeline, "_embedding", None)
    if model is None or not callable(model):
        raise RuntimeError(f"the diarization pipeline ({type(pipeline).__name__}) has no speaker "
                           "embedding model to compare voices with")
    return model


def model_sample_rate(model) -> int:
    return int(getattr(model, "sample_rate", SAMPLE_RATE) or SAMPLE_RATE)


def min_samples(model) -> int:
    """The fewest samples the model embeds (pyannote probes it; at least 0.1 s)."""
    try:
        probed = int(getattr(model, "min_num_samples", 0) or 0)
    except Exception:  # a probe that fails: fall back to the floor
        probed = 0
    return max(probed, int(0.1 * SAMPLE_RATE))


def _normalise(v: np.ndarray) -> Optional[np.ndarray]:
    v = np.asarray(v, dtype=np.float64).reshape(-1)
    norm = float(np.linalg.norm(v))
    if not np.all(np.isfinite(v)) or norm == 0.0:
        return None
    return v / norm


def _embed_piece(model, piece: np.ndarray) -> Optional[np.ndarray]:
    import torch

    waveform = torch.from_numpy(np.ascontiguousarray(piece, dtype=np.float32))[None, None]
    with torch.inference_mode():
        out = model(waveform)
    return _normalise(np.asarray(out)[0])


def _pieces(start: int, end: int, longest: int) -> Iterable[tuple[int, int]]:
    """``[start, end)`` in equal parts of at most ``longest`` samples."""
    n = max(1, -(-(end - start) // longest))
    step = (end - start) / n
    for i in range(n):
        yield start + round(i * step), start + round((i + 1) * step)


def _mean(vectors: list[tuple[np.ndarray, float]]) -> Optional[np.ndarray]:
    if not vectors:
        return None
    total = sum(w for _, w in vectors)
    return _normalise(sum(v * (w / total) for v, w in vectors))


def embed_clip(model, audio: np.ndarray) -> Optional[np.ndarray]:
    """One unit vector for a clip of one person's speech (16 kHz mono float32), or None when the
    model gives no embedding (too short, silent)."""
    if model_sample_rate(model) != SAMPLE_RATE:
        raise RuntimeError(f"the speaker embedding model expects {model_sample_rate(model)} Hz audio; "
                           f"this server decodes to {SAMPLE_RATE} Hz")
    if len(audio) < min_samples(model):
        return None
    longest = int(MAX_PIECE_S * SAMPLE_RATE)
    vectors = []
    for a, b in _pieces(0, len(audio), longest):
        if b - a >= min_samples(model):
            v = _embed_piece(model, audio[a:b])
            if v is not None:
                vectors.append((v, float(b - a)))
    return _mean(vectors)


def speaker_centroids(model, audio: np.ndarray, turns: Iterable[Turn]) -> dict[str, Optional[np.ndarray]]:
    """Per speaker label, the unit-vector centroid of its speech in ``turns`` (exclusive turns:
    no overlapped speech), or None when none of its speech could be embedded."""
    by_speaker: dict[str, list[tuple[int, int]]] = {}
    for t in turns:
        a, b = max(0, int(t.start * SAMPLE_RATE)), min(len(audio), int(t.end * SAMPLE_RATE))
        by_speaker.setdefault(t.speaker, [])
        if b > a:
            by_speaker[t.speaker].append((a, b))
    shortest, longest = min_samples(model), int(MAX_PIECE_S * SAMPLE_RATE)
    budget = int(MAX_SPEECH_PER_SPEAKER_S * SAMPLE_RATE)
    out: dict[str, Optional[np.ndarray]] = {}
    for speaker, spans in by_speaker.items():
        spans.sort(key=lambda s: s[0] - s[1])  # longest first
        usable = [s for s in spans if s[1] - s[0] >= MIN_PIECE_S * SAMPLE_RATE] or \
            [s for s in spans[:1] if s[1] - s[0] >= shortest]
        vectors, used = [], 0
        for a, b in usable:
            if used >= budget:
                break
            b = min(b, a + budget - used)
            used += b - a
            for x, y in _pieces(a, b, longest):
                if y - x >= shortest:
                    v = _embed_piece(model, audio[x:y])
                    if v is not None:
                        vectors.append((v, float(y - x)))
        out[speaker] = _mean(vectors)
    return out


class EmbeddingCache:
    """Reference-clip embeddings by the clip's bytes (SHA-256): a caller who sends the same
    reference clips with every request pays for embedding them once. Least recently used entries
    go first; thread-safe."""

    def __init__(self, size: int = 256):
        self.size = size
        self._items: OrderedDict[str, Optional[np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def get_or_compute(self, data: bytes, compute) -> Optional[np.ndarray]:
        key = self.key(data)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        value = compute()
        with self._lock:
            self.misses += 1
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value


# a reference clip needs this much audio above SPEECH_LEVEL_DBFS (30 ms frames) to count as speech
MIN_REFERENCE_SPEECH_S = 1.0
SPEECH_LEVEL_DBFS = -50.0
_FRAME = int(0.03 * SAMPLE_RATE)


def speech_seconds(audio: np.ndarray) -> float:
    """Seconds of 30 ms frames louder than :data:`SPEECH_LEVEL_DBFS` (a level check, not a
    voice detector: it tells a silent or near-silent clip from one with sound in it)."""
    n = len(audio) // _FRAME
    if n == 0:
        return 0.0
    frames = np.asarray(audio[: n * _FRAME], dtype=np.float64).reshape(n, _FRAME)
    rms = np.sqrt(np.mean(frames * frames, axis=1))
    return float(np.count_nonzero(rms >= 10 ** (SPEECH_LEVEL_DBFS / 20))) * _FRAME / SAMPLE_RATE


class SpeakerVoices:
    """The pipeline's embedding model, for reference clips (cached by their bytes) and for the
    found speakers' centroids."""

    def __init__(self, pipeline, cache_size: int = 256):
        self.model = embedding_model(pipeline)
        self.cache = EmbeddingCache(cache_size)
        self._dimension: Optional[int] = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            dim = getattr(self.model, "dimension", None)
            if not isinstance(dim, int):  # probe: one embedding of a second of noise
                v = _embed_piece(self.model, 0.01 * np.random.default_rng(0).standard_normal(SAMPLE_RATE))
                dim = 0 if v is None else len(v)
            self._dimension = int(dim)
        return self._dimension

    def reference(self, index: int, name: str, ref) -> np.ndarray:
        """The unit voice vector of ``known_speaker_references[index]``: a base64 clip / data URI
        (decoded, checked and embedded; cached by its bytes), or an embedding sent back as a list
        of numbers. Raises RequestError saying which reference is wrong and why."""
        from speaker_asr.audio.decode import decode_audio
        from speaker_asr.audio.inputs import decode_base64
        from speaker_asr.config import MAX_REFERENCE_SECONDS, MIN_REFERENCE_SECONDS
        from speaker_asr.errors import RequestError

        what = f"known_speaker_references[{index}] (for {name!r})"
        if isinstance(ref, (list, tuple)):
            if len(ref) != self.dimension:
                raise RequestError(f"{what} is a voice embedding of {len(ref)} numbers; this server's "
                                   f"speaker embedding model gives {self.dimension}")
            v = _normalise(np.asarray(ref, dtype=np.float64))
            if v is None:
                raise RequestError(f"{what} is an all-zero voice embedding")
            return v
        if not isinstance(ref, str):
            raise RequestError(f"{what} must be a base64 audio clip, a data URI or a voice embedding")
        data = decode_base64(ref, what)

        def compute() -> np.ndarray:
            try:
                audio = decode_audio(data, max_duration_s=MAX_REFERENCE_SECONDS + 1.0)
            except RequestError as exc:
                raise RequestError(f"{what} could not be read as audio: {exc}") from None
            seconds = len(audio) / SAMPLE_RATE
            if not MIN_REFERENCE_SECONDS <= seconds <= MAX_REFERENCE_SECONDS + 0.05:
                raise RequestError(f"{what} is {seconds:.1f} s long; a reference clip must be "
                                   f"{MIN_REFERENCE_SECONDS:g} to {MAX_REFERENCE_SECONDS:g} s of that "
                                   "person speaking alone")
            voiced = speech_seconds(audio)
            if voiced < MIN_REFERENCE_SPEECH_S:
                raise RequestError(f"{what} is silent or nearly so ({voiced:.1f} s louder than "
                                   f"{SPEECH_LEVEL_DBFS:g} dBFS; at least {MIN_REFERENCE_SPEECH_S:g} s "
                                   f"needed): send a clip of {name} speaking")
            v = embed_clip(self.model, audio)
            if v is None:
                raise RequestError(f"{what} gave no voice embedding (too little speech in it)")
            return v

        return self.cache.get_or_compute(data, compute)

    def centroids(self, audio: np.ndarray, turns: Iterable[Turn]) -> dict[str, Optional[np.ndarray]]:
        return speaker_centroids(self.model, audio, turns)
