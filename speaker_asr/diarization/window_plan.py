"""Which (window, speaker) embeddings the diarization computes, and which it takes from a
neighbouring window that heard the same speech.

pyannote's 3.1 recipe slides a 10-s window by 1 s and embeds every active speaker of every
window: each second of speech is embedded about ten times, from windows that share 80-90 % of
their audio and give nearly the same vector. Here only every ``stride``-th window (and the last)
is embedded. A speaker of a window in between takes the embedding of the speaker it *is* in the
nearest embedded window: the one whose activity over the audio both windows share matches its
own (intersection over union at least :data:`MIN_IOU`, each the other's best match), provided
at least :data:`MIN_COVER` of its activity lies in that shared audio (the same person heard
over the same speech: a speaker embedding characterises the voice, and half of a window's
speech of one person already gives the vector the other half would). A speaker with no such
match (someone who starts or stops talking where the windows do not overlap, or a local speaker
the segmentation tracks differently in the two windows) is embedded from its own window, as
before. pyannote's clustering then sees an embedding for every active speaker of every window.

Pure numpy; :mod:`speaker_asr.patches.diarization` (``embed_fewer_windows``) runs the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_IOU = 0.5
MIN_COVER = 0.5


@dataclass
class WindowPlan:
    embed: np.ndarray  # (windows,) bool: embed this window's speakers
    source: np.ndarray  # (windows, speakers, 2) int: (window, speaker) to copy from; -1: none

    def copy_into(self, embeddings: np.ndarray) -> np.ndarray:
        """Fill the windows not embedded from their sources (rows of the embedded windows
        must be filled); (windows, speakers, dim), NaN where there is no source."""
        w, s = np.nonzero(self.source[..., 0] >= 0)
        embeddings[w, s] = embeddings[self.source[w, s, 0], self.source[w, s, 1]]
        return embeddings


def _shared(masks: np.ndarray, c: int, e: int, frames_per_step: float):
    """The frames of windows ``c`` and ``e`` that cover the same audio: (c's, e's)."""
    num_frames = masks.shape[1]
    shift = int(round(abs(e - c) * frames_per_step))
    if shift >= num_frames:
        return None
    if e > c:
        return masks[c, shift:], masks[e, :num_frames - shift]
    return masks[c, :num_frames - shift], masks[e, shift:]


def plan_windows(masks: np.ndarray, frames_per_step: float, stride: int) -> WindowPlan:
    """The plan for binarized segmentations ``masks`` (windows, frames, speakers), windows
    ``frames_per_step`` frames apart, every ``stride``-th window embedded."""
    masks = np.nan_to_num(np.asarray(masks, dtype=np.float32)) > 0
    windows, _, speakers = masks.shape
    source = np.full((windows, speakers, 2), -1, dtype=np.int64)
    embed = np.zeros(windows, dtype=bool)
    embed[::max(1, stride)] = True
    if windows:
        embed[-1] = True
    active = masks.sum(axis=1)  # (windows, speakers) frames
    chosen = np.flatnonzero(embed)
    for c in np.flatnonzero(~embed):
        k = np.searchsorted(chosen, c)
        neighbours = sorted((e for e in (chosen[k - 1] if k else None, chosen[k] if k < len(chosen) else None)
                             if e is not None), key=lambda e: (abs(e - c), e))
        for s in np.flatnonzero(active[c] > 0):
            for e in neighbours:
                shared = _shared(masks, c, e, frames_per_step)
                if shared is None:
                    continue
                mine, theirs = shared
                if mine[:, s].sum() < MIN_COVER * active[c, s]:
                    continue
                inter = (mine[:, s:s + 1] & theirs).sum(axis=0)
                union = (mine[:, s:s + 1] | theirs).sum(axis=0)
                iou = inter / np.maximum(union, 1)
                best = int(np.argmax(iou))
                if iou[best] < MIN_IOU:
                    continue
                # each the other's best: no other speaker of c matches e's speaker better
                back = (mine & theirs[:, best:best + 1]).sum(axis=0) / np.maximum(
                    (mine | theirs[:, best:best + 1]).sum(axis=0), 1)
                if int(np.argmax(back)) != s:
                    continue
                source[c, s] = (e, best)
                break
        if ((active[c] > 0) & (source[c, :, 0] < 0)).any():
            embed[c] = True
            source[c] = -1
    return WindowPlan(embed, source)
