"""Which (window, speaker) embeddings the diarization computes, and which it pools from the
neighbouring windows that heard the same speech.

pyannote's 3.1 recipe slides a 10-s window by 1 s and embeds every active speaker of every
window: each second of speech is embedded about ten times, from windows that share 80-90 % of
their audio and give nearly the same vector. Here the speakers of every ``stride``-th window
(and of the last) are embedded. A speaker of a window in between is matched, in each of the two
embedded windows around it, with the speaker it *is* there: the one whose activity over the
audio both windows share matches its own (intersection over union at least :data:`MIN_IOU`,
each the other's best match), provided at least :data:`MIN_COVER` of its activity lies in that
shared audio. Its embedding is the mean of its matches' unit vectors, each weighted by the
speech the two share (frames active in both): the same person over the same speech, heard from
both sides. A speaker matched in neither (someone who starts or stops talking where the windows
do not overlap, a local speaker the segmentation tracks differently) is embedded from its own
window. pyannote's clustering then sees an embedding for every active speaker of every window.

With ``stride`` 1 every window is embedded: the recipe's computation, unchanged.

Pure numpy; :mod:`speaker_asr.patches.diarization` (``share_window_embeddings``) runs the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_IOU = 0.5
MIN_COVER = 0.5


@dataclass
class WindowPlan:
    own: np.ndarray  # (windows, speakers) bool: embed this pair from its own window
    sources: np.ndarray  # (windows, speakers, 2, 2) int: up to two (window, speaker); -1: none
    weights: np.ndarray  # (windows, speakers, 2) float: each source's weight (0: none)

    @property
    def windows(self) -> np.ndarray:
        """The windows with at least one pair to embed from its own audio."""
        return np.flatnonzero(self.own.any(axis=1))

    def pool_into(self, embeddings: np.ndarray) -> np.ndarray:
        """Fill each pooled pair of ``embeddings`` (windows, speakers, dim; the own pairs
        computed) with the weighted mean of its sources' directions (unit vectors), as long as
        their weighted mean length; a pair whose sources are all NaN stays NaN. Returns
        ``embeddings``."""
        w, s = np.nonzero((self.weights > 0).any(axis=2) & ~self.own)
        if not len(w):
            return embeddings
        src = self.sources[w, s]  # (n, 2, 2)
        weight = self.weights[w, s].astype(np.float64)  # (n, 2)
        vectors = embeddings[np.maximum(src[..., 0], 0), np.maximum(src[..., 1], 0)].astype(np.float64)
        norms = np.linalg.norm(vectors, axis=2)  # (n, 2); NaN where a source came out NaN
        usable = (weight > 0) & np.isfinite(norms) & (norms > 0)
        weight = np.where(usable, weight, 0.0)
        norms = np.where(usable, norms, 1.0)
        units = np.where(usable[..., None], vectors / norms[..., None], 0.0)
        total = weight.sum(axis=1)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            direction = (weight[..., None] * units).sum(axis=1)
            direction /= np.linalg.norm(direction, axis=1, keepdims=True)
            pooled = direction * (weight * norms).sum(axis=1, keepdims=True) / total
        pooled[total[:, 0] <= 0] = np.nan
        embeddings[w, s] = pooled.astype(embeddings.dtype)
        return embeddings


def embedding_masks(data: np.ndarray, exclude_overlap: bool, min_num_frames: int) -> np.ndarray:
    """The mask each (window, speaker) pair is embedded with, as pyannote's ``get_embeddings``
    chooses it from binarized segmentations ``data`` (windows, frames, speakers; NaN where
    stitching left none): the speaker's frames, and with ``exclude_overlap`` only those where
    nobody else speaks, unless fewer than ``min_num_frames`` of them are left."""
    masks = np.nan_to_num(np.asarray(data, dtype=np.float32), nan=0.0)
    if not exclude_overlap:
        return masks
    clean = np.nan_to_num(data * (np.sum(data, axis=2, keepdims=True) < 2), nan=0.0).astype(np.float32)
    return np.where(clean.sum(axis=1, keepdims=True) > min_num_frames, clean, masks)


def _matches(mine: np.ndarray, theirs: np.ndarray, active: np.ndarray):
    """For each speaker of a window (``mine``: its frames over the audio shared with an embedded
    window, ``theirs``: that window's over the same audio; ``active``: each speaker's frames over
    its whole window), the speaker it is in the other window and the frames both share (-1, 0:
    no match)."""
    inter = mine.T.astype(np.int64) @ theirs.astype(np.int64)  # (speakers, speakers)
    union = mine.sum(axis=0)[:, None] + theirs.sum(axis=0)[None, :] - inter
    iou = inter / np.maximum(union, 1)
    best = iou.argmax(axis=1)
    speakers = np.arange(len(best))
    ok = (active > 0) & (mine.sum(axis=0) >= MIN_COVER * active) \
        & (iou[speakers, best] >= MIN_IOU) & (iou[:, best].argmax(axis=0) == speakers)
    return np.where(ok, best, -1), np.where(ok, inter[speakers, best], 0)


def plan_windows(masks: np.ndarray, frames_per_step: float, stride: int) -> WindowPlan:
    """The plan for binarized segmentations ``masks`` (windows, frames, speakers), windows
    ``frames_per_step`` frames apart, the speakers of every ``stride``-th window embedded."""
    masks = np.nan_to_num(np.asarray(masks, dtype=np.float32)) > 0
    windows, num_frames, speakers = masks.shape
    active = masks.sum(axis=1)  # (windows, speakers) frames
    sources = np.full((windows, speakers, 2, 2), -1, dtype=np.int64)
    weights = np.zeros((windows, speakers, 2), dtype=np.float64)
    grid = np.zeros(windows, dtype=bool)
    grid[::max(1, stride)] = True
    if windows:
        grid[-1] = True
    chosen = np.flatnonzero(grid)
    for c in np.flatnonzero(~grid):
        k = np.searchsorted(chosen, c)
        for side, e in enumerate((chosen[k - 1], chosen[k])):  # c lies between two grid windows
            shift = int(round(abs(e - c) * frames_per_step))
            if shift >= num_frames:
                continue
            if e > c:
                mine, theirs = masks[c, shift:], masks[e, :num_frames - shift]
            else:
                mine, theirs = masks[c, :num_frames - shift], masks[e, shift:]
            best, shared = _matches(mine, theirs, active[c])
            sources[c, :, side] = np.stack([np.where(best >= 0, e, -1), best], axis=1)
            weights[c, :, side] = shared
    own = (active > 0) & (grid[:, None] | ~(weights > 0).any(axis=2))
    return WindowPlan(own, sources, weights)
