"""Output-preserving speed fixes for pyannote.audio's speaker diarization pipeline.

* ``skip_silent_embeddings``: the pipeline extracts one speaker embedding per (window, local
  speaker) pair -- 3 local speakers per 10 s window with segmentation-3.0 -- including the pairs
  whose speaker never speaks in that window (all-zero mask): 22 of 63 pairs on the 30 s
  two-speaker sample, 79 of 153 on the 60 s benchmark input. Those pairs now get a NaN embedding
  without running the model. This cannot change the output when either
  (a) the embedding model itself returns NaN for an all-zero mask (probed at load), or
  (b) the clustering assigns each (window, speaker) pair on its own (``constrained_assignment``
  false, as in the 3.1 recipe's AgglomerativeClustering): pyannote trains the clustering only on
  pairs active for at least 20 % of the window, and after the per-pair assignment it sends every
  pair with no active frame to a throw-away cluster, so such a pair's embedding is never read.
  (VBx clustering, as in community-1, assigns a window's speakers jointly: there only (a) applies.)
  WeSpeaker ResNet34, the 3.1 recipe's embedding, runs its whole network on every row and pools
  with the mask at the end, so it gains most.
* ``cpu_embedding_batch``: on CPU the embeddings run one window at a time instead of the recipe's
  32: WeSpeaker ResNet34's activations for 32 ten-second windows do not fit the caches, and one
  at a time was 2x faster here (30 s sample: 34.4 -> 17.0 s). Same speaker turns on every input
  measured; the embeddings differ only in float rounding (at most 1.4e-7 on values up to 0.14).
* ``coarser_segmentation_step`` and ``embed_fewer_windows``, on recordings longer than
  ``LONG_RECORDING_S`` (5 minutes) only: the segmentation slides by 2 s instead of the 3.1
  recipe's 1 s, and the speakers of every third window are embedded, a speaker of a window in
  between taking the embedding of the same speaker in the nearest embedded window
  (speaker_asr/diarization/window_plan.py). pyannote embeds each second of speech about ten
  times at its 1-s step; this about twice (where a copy finds no match, its window is embedded
  too: about 43 % of the active speakers were on 5 minutes of real speech). Together they cut
  the diarization of a long recording to about a third. Shorter recordings keep the recipe's way, speakers and all.
* ``linear_clustering``: above ``EXACT_LIMIT`` embeddings (about 45 minutes of meeting) the
  clustering step's centroid linkage runs blockwise (speaker_asr/diarization/clustering.py):
  linear time and memory instead of n^2/2 distances, for the 3.1 recipe's agglomerative
  clustering and for the AHC that seeds community-1's VBx. At or below it, pyannote's own.
  It can change the output of long recordings only (a different merge order across blocks).
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE

logger = logging.getLogger(__name__)


def _zero_mask_gives_nan(embedding) -> bool:
    import torch

    rate = int(getattr(embedding, "sample_rate", SAMPLE_RATE) or SAMPLE_RATE)
    samples = max(2 * rate, 2 * int(getattr(embedding, "min_num_samples", 0) or 0))
    waveforms = 0.1 * torch.randn(2, 1, samples, generator=torch.Generator().manual_seed(0))
    masks = torch.zeros(2, 100)
    masks[1] = 1.0
    try:
        with torch.inference_mode():
            out = np.asarray(embedding(waveforms, masks=masks))
    except Exception as exc:  # an embedding that cannot take masks: leave it as it is
        logger.debug("silent-slot probe failed (%s: %s)", type(exc).__name__, exc)
        return False
    return out.shape[0] == 2 and bool(np.isnan(out[0]).all()) and bool(np.isfinite(out[1]).all())


CPU_EMBEDDING_BATCH_SIZE = 1


def cpu_embedding_batch(pipeline, device=None) -> bool:
    """One window per embedding batch when the pipeline runs on CPU. Returns whether it applied."""
    if device is not None and str(device).split(":")[0] != "cpu":
        return False
    if not hasattr(pipeline, "embedding_batch_size"):
        return False
    pipeline.embedding_batch_size = CPU_EMBEDDING_BATCH_SIZE
    return True


def skip_silent_embeddings(pipeline) -> bool:
    """Make ``pipeline``'s embedding skip all-zero masks (see the module doc). Returns whether
    it applied."""
    embedding = getattr(pipeline, "_embedding", None)
    if embedding is None or not callable(embedding) or getattr(embedding, "_skips_silent", False):
        return False
    clustering = getattr(pipeline, "clustering", None)
    per_pair = type(pipeline).__name__ == "SpeakerDiarization" and clustering is not None \
        and getattr(clustering, "constrained_assignment", None) is False
    if not per_pair and not _zero_mask_gives_nan(embedding):
        return False
    stock = type(embedding)

    class SkipSilent(stock):
        _skips_silent = True

        def __call__(self, waveforms, masks=None):
            if masks is None:
                return stock.__call__(self, waveforms)
            active = (masks.reshape(masks.shape[0], -1) != 0).any(dim=1)
            if bool(active.all()):
                return stock.__call__(self, waveforms, masks=masks)
            if not bool(active.any()):
                return np.full((masks.shape[0], self.dimension), np.nan, dtype=np.float32)
            computed = np.asarray(stock.__call__(self, waveforms[active], masks=masks[active]))
            out = np.full((masks.shape[0],) + computed.shape[1:], np.nan, dtype=computed.dtype)
            out[active.cpu().numpy()] = computed
            return out

    SkipSilent.__name__ = SkipSilent.__qualname__ = f"SkipSilent{stock.__name__}"
    embedding.__class__ = SkipSilent
    return True


# the thread-local state through which a patched VBx step hands its threshold to the AHC
# (pyannote's module-level ``linkage``) that seeds it
_BLOCKWISE = threading.local()


def _linkage_for_vbx(scipy_linkage):
    """pyannote's clustering module's ``linkage``, replaced once: the blockwise centroid linkage
    while a patched VBx step runs on this thread with more than EXACT_LIMIT embeddings, scipy's
    own everywhere else (any other caller, any other method)."""
    from speaker_asr.diarization import clustering as linear

    def linkage(y, method="single", metric="euclidean", *args, **kwargs):
        threshold = getattr(_BLOCKWISE, "threshold", None)
        if (threshold is not None and method == "centroid" and metric == "euclidean"
                and np.ndim(y) == 2 and len(y) > linear.EXACT_LIMIT):
            return linear.blockwise_linkage(y, threshold)
        return scipy_linkage(y, method, metric, *args, **kwargs)

    linkage._blockwise_dispatch = True
    return linkage


def linear_clustering(pipeline) -> Optional[str]:
    """Make ``pipeline.clustering`` cluster more than EXACT_LIMIT embeddings in linear time and
    memory (speaker_asr/diarization/clustering.py); at or below it, pyannote's own clustering.
    Returns None when it applied, else why not."""
    clustering = getattr(pipeline, "clustering", None)
    if clustering is None:
        return "the pipeline has no clustering step"
    if getattr(clustering, "_linear", False):
        return None
    try:
        from pyannote.audio.pipelines import clustering as module
    except Exception as exc:  # pragma: no cover - pyannote is installed wherever a pipeline loads
        return f"pyannote's clustering module: {type(exc).__name__}"
    from speaker_asr.diarization import clustering as linear

    stock = type(clustering)
    agglomerative = getattr(module, "AgglomerativeClustering", None)
    vbx = getattr(module, "VBxClustering", None)
    if agglomerative is not None and isinstance(clustering, agglomerative):
        if getattr(clustering, "method", "centroid") != "centroid":
            return f"its linkage method is {clustering.method!r}, not centroid"

        class Linear(stock):
            _linear = True

            def cluster(self, embeddings, min_clusters=None, max_clusters=None, num_clusters=None):
                if len(embeddings) <= linear.EXACT_LIMIT or self.method != "centroid":
                    return stock.cluster(self, embeddings, min_clusters=min_clusters,
                                         max_clusters=max_clusters, num_clusters=num_clusters)
                n = len(embeddings)
                return linear.cluster_centroid(
                    embeddings, float(self.threshold), int(self.min_cluster_size),
                    min_clusters=min_clusters or 1, max_clusters=max_clusters or n,
                    num_clusters=num_clusters, metric=self.metric)
    elif vbx is not None and isinstance(clustering, vbx):
        if not getattr(module.linkage, "_blockwise_dispatch", False):
            module.linkage = _linkage_for_vbx(module.linkage)

        class Linear(stock):
            _linear = True

            def __call__(self, *args, **kwargs):
                _BLOCKWISE.threshold = float(self.threshold)
                try:
                    return stock.__call__(self, *args, **kwargs)
                finally:
                    _BLOCKWISE.threshold = None
    else:
        return f"{stock.__name__} is neither agglomerative (centroid) nor VBx clustering"
    Linear.__name__ = Linear.__qualname__ = f"Linear{stock.__name__}"
    clustering.__class__ = Linear
    return None


# recordings longer than this are "long": their segmentation slides SEGMENTATION_STEP_FACTOR
# times the recipe's step, and every EMBEDDING_STRIDE-th window's speakers are embedded, the
# others taking a neighbour's (speaker_asr/diarization/window_plan.py). Shorter ones run as the
# recipe says: the speakers of every recording up to 5 minutes are those pyannote finds.
LONG_RECORDING_S = 300.0
SEGMENTATION_STEP_FACTOR = 2
EMBEDDING_STRIDE = 3


def _duration_s(pipeline, file) -> float:
    try:
        return float(pipeline._audio.get_duration(file))
    except Exception:  # no duration to be had: treat the recording as short (the recipe's way)
        return 0.0


def coarser_segmentation_step(pipeline, long_after_s: Optional[float] = None) -> Optional[str]:
    """Make ``pipeline`` slide its segmentation by SEGMENTATION_STEP_FACTOR times the recipe's
    step on recordings longer than ``long_after_s`` (default LONG_RECORDING_S; a second
    segmentation inference sharing the model, made once here). Returns None when it applied,
    else why not."""
    long_after_s = LONG_RECORDING_S if long_after_s is None else long_after_s
    if SEGMENTATION_STEP_FACTOR <= 1:
        return "SEGMENTATION_STEP_FACTOR is 1"
    stock = getattr(type(pipeline), "get_segmentations", None)
    inference = getattr(pipeline, "_segmentation", None)
    if stock is None or inference is None or not hasattr(inference, "step") \
            or type(pipeline).__name__ != "SpeakerDiarization":
        return "the pipeline is not pyannote's SpeakerDiarization"
    import copy

    coarse = copy.copy(inference)  # the same model; only the step differs
    coarse.step = inference.step * SEGMENTATION_STEP_FACTOR

    def get_segmentations(self, file, hook=None):
        if self.training or _duration_s(self, file) <= long_after_s:
            return stock(self, file, hook=hook)
        if hook is not None:
            import functools

            hook = functools.partial(hook, "segmentation", None)
        return coarse(file, hook=hook)

    pipeline.get_segmentations = get_segmentations.__get__(pipeline)
    return None


def _windows(window, indices):
    """``window`` (a pyannote SlidingWindow) at the positions ``indices`` only, as pyannote's
    ``get_embeddings`` iterates it."""
    from pyannote.core import SlidingWindow

    class Chosen(SlidingWindow):
        def __getitem__(self, i):
            return SlidingWindow.__getitem__(self, int(indices[i]))

    return Chosen(start=window.start, duration=window.duration, step=window.step)


def embed_fewer_windows(pipeline, long_after_s: Optional[float] = None) -> Optional[str]:
    """Make ``pipeline`` embed the speakers of every EMBEDDING_STRIDE-th window only on recordings
    longer than ``long_after_s`` (default LONG_RECORDING_S), the others taking the embedding of
    the same speaker in the nearest embedded window. Returns None when it applied, else why not."""
    long_after_s = LONG_RECORDING_S if long_after_s is None else long_after_s
    if EMBEDDING_STRIDE <= 1:
        return "EMBEDDING_STRIDE is 1"
    stock = getattr(type(pipeline), "get_embeddings", None)
    if stock is None or type(pipeline).__name__ != "SpeakerDiarization":
        return "the pipeline is not pyannote's SpeakerDiarization"
    if not getattr(pipeline._embedding, "_skips_silent", False):
        # the copies leave a silent speaker's embedding NaN, as skip_silent_embeddings does
        return "skip_silent_embeddings did not apply"
    from pyannote.core import SlidingWindowFeature

    from speaker_asr.diarization.window_plan import plan_windows

    def get_embeddings(self, file, binary_segmentations, exclude_overlap=False, hook=None):
        data = binary_segmentations.data
        window = binary_segmentations.sliding_window
        if self.training or len(data) <= EMBEDDING_STRIDE or _duration_s(self, file) <= long_after_s:
            return stock(self, file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        plan = plan_windows(data, data.shape[1] * window.step / window.duration, EMBEDDING_STRIDE)
        chosen = np.flatnonzero(plan.embed)
        # one embedding call for the chosen windows: its batches are the step's progress
        part = SlidingWindowFeature(data[chosen], _windows(window, chosen))
        computed = stock(self, file, part, exclude_overlap=exclude_overlap, hook=hook)
        embeddings = np.full((len(data),) + computed.shape[1:], np.nan, dtype=computed.dtype)
        embeddings[chosen] = computed
        plan.copy_into(embeddings)
        # a copy whose source came out NaN (too little clean speech there): embed that window too
        missing = np.flatnonzero(~plan.embed & (
            (np.nan_to_num(data).sum(axis=1) > 0) & np.isnan(embeddings).any(axis=2)).any(axis=1))
        if len(missing):
            part = SlidingWindowFeature(data[missing], _windows(window, missing))
            embeddings[missing] = stock(self, file, part, exclude_overlap=exclude_overlap)
        return embeddings

    pipeline.get_embeddings = get_embeddings.__get__(pipeline)
    return None
