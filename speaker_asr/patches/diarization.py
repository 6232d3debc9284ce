"""Output-preserving speed fixes for pyannote.audio's speaker diarization pipeline.

* ``skip_silent_embeddings``: the pipeline extracts one speaker embedding per (window, local
  speaker) pair -- 3 local speakers per 10 s window with segmentation-3.0 -- including the pairs
  whose speaker never speaks in that window (all-zero mask): a large share of the pairs on the
  bench inputs (counted in docs/measurements.md, "Figures behind the speed fixes' reasons").
  Those pairs get a NaN embedding without running the model. This cannot change the output when either
  (a) the embedding model itself returns NaN for an all-zero mask (probed at load), or
  (b) the clustering assigns each (window, speaker) pair on its own (``constrained_assignment``
  false, as in the 3.1 recipe's AgglomerativeClustering): pyannote trains the clustering only on
  pairs active for at least 20 % of the window, and after the per-pair assignment it sends every
  pair with no active frame to a throw-away cluster, so such a pair's embedding is never read.
  (VBx clustering, as in community-1, assigns a window's speakers jointly: there only (a) applies.)
  WeSpeaker ResNet34, the 3.1 recipe's embedding, runs its whole network on every row and pools
  with the mask at the end, so it gains most.
* ``cpu_embedding_batch``: on CPU the embeddings run one window at a time instead of the recipe's
  32: WeSpeaker ResNet34's activations for 32 ten-second windows do not fit the caches, so one
  at a time is faster on CPU (docs/measurements.md, "Figures behind the speed fixes' reasons").
  The speaker turns stay the same (bench/diarization_bench.py compares them); the embeddings
  differ only in float rounding.
* ``embed_trunk_once``: pyannote runs the embedding model once per (window, local speaker) pair,
  the fbank and the whole network each time. WeSpeaker ResNet (the 3.1 recipe's ResNet34) takes
  its mask only in the statistics pooling at the very end: its network runs once per window here
  and is pooled with each active speaker's mask (exact: probed at load against one slot at a time;
  the runs it saves: docs/measurements.md, "Diarization on CPU"). Models that cut frames by their
  mask (the kit's CAM++) keep pyannote's way.
* ``onnx_embedding_trunk`` and ``onnx_segmentation`` (CPU): those networks in ONNX Runtime
  (speaker_asr/patches/diarization_onnx.py).
* ``share_window_embeddings`` (CPU, recordings longer than ``SHARED_AFTER_S``, with
  ``DIARIZATION_EMBEDDINGS=approximate``, and, like every patch here, only with
  ``DIARIZATION_SPEEDUPS`` on): the speakers of every fifth window are embedded and the others
  pooled from the two embedded windows around them, matched by their activity over the shared
  audio (speaker_asr/diarization/window_plan.py); a speaker neither heard is embedded from its
  own window. pyannote embeds each second of speech about ten times at its 1-s step; this about
  twice. The clustering is then trained on the embedded pairs alone (a pooled one repeats its
  neighbours: no evidence of its own), with the recipe's minimum cluster size scaled by their
  share (:func:`relative_min_cluster_size`: the same speech, fewer embeddings); every pair is
  assigned to its clusters as before. Trained on the pooled pairs with the recipe's absolute
  minimum, it lost speakers; the choice and its price in DER are in docs/measurements.md
  ("Diarization on CPU"; eval/choose_approximate.py).
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


def off_cpu(device) -> Optional[str]:
    """Why a CPU-only patch does not apply on ``device`` (None: it is the CPU, or not given)."""
    if device is not None and str(device).split(":")[0] != "cpu":
        return f"the pipeline runs on {device}"
    return None


def _equal_to_rounding(got: np.ndarray, want: np.ndarray) -> bool:
    """What the load-time probes accept as the same output: the same shape, at most 1e-5 of the
    output's scale apart."""
    scale = float(np.abs(want).max()) or 1.0
    return got.shape == want.shape and np.allclose(got, want, rtol=0, atol=1e-5 * scale)


def cpu_embedding_batch(pipeline, device=None) -> bool:
    """One window per embedding batch when the pipeline runs on CPU. Returns whether it applied."""
    if off_cpu(device):
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


def _pooling_model(embedding):
    """The WeSpeaker ResNet model behind ``embedding`` (pyannote's pretrained-embedding wrapper)
    when its mask only weights the statistics pooling, else None."""
    try:
        from pyannote.audio.models.embedding.wespeaker import BaseWeSpeakerResNet
    except Exception:  # pragma: no cover - a pyannote without WeSpeaker models
        return None
    model = getattr(embedding, "model_", None)
    return model if isinstance(model, BaseWeSpeakerResNet) else None


def _pooled(model, waveforms, masks, trunk=None) -> np.ndarray:
    """``model``'s embeddings of every speaker slot of every window: the trunk once per waveform
    (batch, 1, samples), pooled with each of its masks (batch, speakers, frames) -> (batch,
    speakers, dimension). ``trunk``: what runs the network from fbank to frames (default the
    model's own torch modules; :func:`onnx_embedding_trunk` gives ONNX Runtime's)."""
    import torch

    device = next(model.parameters()).device
    with torch.inference_mode():
        if trunk is None:
            out = model(waveforms.to(device), weights=masks.to(device))
        else:
            frames = trunk(model.compute_fbank(waveforms.to(device)))
            out = model.forward_embedding(frames, weights=masks.to(device))
    return out.cpu().numpy()


def _trunk_probe(embedding, model) -> Optional[str]:
    """Why one trunk per window would not give ``embedding``'s own per-slot output here (None: it
    does, to float rounding): checked once at load on a random 10 s window with 3 slots."""
    import torch

    rate = int(getattr(embedding, "sample_rate", SAMPLE_RATE) or SAMPLE_RATE)
    gen = torch.Generator().manual_seed(0)
    waveform = 0.1 * torch.randn(1, 1, 10 * rate, generator=gen)
    masks = torch.zeros(1, 3, 589)
    masks[0, 0, :300] = 1.0
    masks[0, 1, 250:] = 1.0
    masks[0, 2, 100:140] = 1.0
    try:
        got = _pooled(model, waveform, masks)[0]
        with torch.inference_mode():
            want = np.vstack([np.asarray(embedding(waveform, masks=masks[:, s]))
                              for s in range(masks.shape[1])])
    except Exception as exc:
        return f"its probe failed ({type(exc).__name__}: {exc})"
    if got.shape != want.shape:
        return f"pooling per speaker gives {got.shape}, not {want.shape}"
    if not _equal_to_rounding(got, want):
        return "pooling per speaker differs from one slot at a time"
    return None


def embed_trunk_once(pipeline) -> Optional[str]:
    """Make ``pipeline``'s embedding step run the WeSpeaker ResNet once per window and pool it
    with each active speaker's mask, where pyannote runs the fbank and the whole trunk once per
    (window, speaker slot). Exact: that model's mask reaches only its statistics pooling
    (probed at load, :func:`_trunk_probe`). ``embedding_batch_size`` windows go through the
    trunk at a time (pyannote batches as many (window, speaker) rows). A silent slot is NaN where
    ``skip_silent_embeddings`` applied, else pooled with its all-zero mask as pyannote does.
    Returns None when it applied, else why not."""
    stock = getattr(pipeline, "get_embeddings", None)
    embedding = getattr(pipeline, "_embedding", None)
    if stock is None or embedding is None or type(pipeline).__name__ != "SpeakerDiarization":
        return "the pipeline is not pyannote's SpeakerDiarization"
    model = _pooling_model(embedding)
    if model is None:
        return (f"its embedding ({type(getattr(embedding, 'model_', embedding)).__name__}) is not a "
                "WeSpeaker ResNet, whose mask weights the pooling only")
    reason = _trunk_probe(embedding, model)
    if reason is not None:
        return reason
    import math

    import torch

    from speaker_asr.diarization.window_plan import embedding_masks

    def get_embeddings(self, file, binary_segmentations, exclude_overlap=False, hook=None):
        if self.training:
            return stock(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        data = np.nan_to_num(binary_segmentations.data, nan=0.0).astype(np.float32)
        window = binary_segmentations.sliding_window
        num_chunks, num_frames, num_speakers = data.shape
        min_num_frames = _min_num_frames(self._embedding, window, num_frames)
        masks = embedding_masks(data, exclude_overlap, min_num_frames)
        masks = np.ascontiguousarray(masks.transpose(0, 2, 1))  # (chunks, speakers, frames)
        silent_nan = getattr(self._embedding, "_skips_silent", False)
        active = masks.any(axis=2)
        todo = np.flatnonzero(active.any(axis=1)) if silent_nan else np.arange(num_chunks)
        size = max(1, int(self.embedding_batch_size))
        embeddings = np.full((num_chunks, num_speakers, self._embedding.dimension), np.nan,
                             dtype=np.float32)
        total = math.ceil(len(todo) / size)
        trunk = getattr(self, "_embedding_trunk", None)  # onnx_embedding_trunk's, if it applied
        if hook is not None:
            hook("embeddings", None, total=total, completed=0)
        for i, start in enumerate(range(0, len(todo), size), 1):
            chunks = todo[start:start + size]
            waveforms = torch.vstack([self._audio.crop(file, window[int(c)], mode="pad")[0][None]
                                      for c in chunks])
            out = _pooled(model, waveforms, torch.from_numpy(masks[chunks]), trunk)
            embeddings[chunks] = out
            if hook is not None:
                hook("embeddings", out, total=total, completed=i)
        if silent_nan:
            embeddings[~active] = np.nan
        return embeddings

    pipeline.get_embeddings = get_embeddings.__get__(pipeline)
    pipeline._trunk_model = model
    return None


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


def _not_agglomerative(clustering) -> Optional[str]:
    """Why ``clustering`` is not pyannote's agglomerative clustering (the 3.1 recipe's); None
    when it is."""
    try:
        from pyannote.audio.pipelines.clustering import AgglomerativeClustering
    except Exception as exc:  # pragma: no cover - pyannote is installed wherever a pipeline loads
        return f"pyannote's clustering module: {type(exc).__name__}"
    if not isinstance(clustering, AgglomerativeClustering):
        return f"{type(clustering).__name__} is not agglomerative clustering"
    return None


def absorb_stray_clusters(pipeline) -> Optional[str]:
    """Make ``pipeline``'s agglomerative clustering let a stray cluster of a long recording join
    the larger cluster it lies near (speaker_asr/diarization/clustering.py, :func:`absorb_strays`):
    one label per person over hours, where the recipe's fixed minimum cluster size lets clusters
    of overlapped speech through. Not when the caller fixed the number of speakers. Returns None
    when it applied, else why not."""
    clustering = getattr(pipeline, "clustering", None)
    if clustering is None:
        return "the pipeline has no clustering step"
    why_not = _not_agglomerative(clustering)
    if why_not is not None:
        return why_not + " (VBx weighs clusters its own way)"
    if getattr(clustering, "_absorbs_strays", False):
        return None
    from speaker_asr.diarization.clustering import absorb_strays

    stock = type(clustering)

    class Absorbing(stock):
        _absorbs_strays = True

        def cluster(self, embeddings, min_clusters=None, max_clusters=None, num_clusters=None):
            clusters = stock.cluster(self, embeddings, min_clusters=min_clusters,
                                     max_clusters=max_clusters, num_clusters=num_clusters)
            if num_clusters is not None:  # the caller's count stands
                return clusters
            return absorb_strays(embeddings, clusters, int(self.min_cluster_size),
                                 min_clusters=min_clusters or 1)

    Absorbing.__name__ = Absorbing.__qualname__ = f"Absorbing{stock.__name__}"
    clustering.__class__ = Absorbing
    return None


# CPU, recordings longer than SHARED_AFTER_S: the speakers of every EMBEDDING_STRIDE-th
# segmentation window are embedded, the others pooled from the two around them
# (speaker_asr/diarization/window_plan.py). Shorter ones are embedded as the recipe does: a few
# minutes take little time either way, and with few windows each embedding weighs more in the
# clustering's decisions (on the 30-s meeting clips sharing moved some of the speaker counts:
# docs/measurements.md, "Diarization on CPU").
EMBEDDING_STRIDE = 5
SHARED_AFTER_S = 300.0

# the (window, speaker) pairs the running diarization embedded from their own audio (the others
# were pooled), from its get_embeddings to its clustering: on the thread that runs them both
_EMBEDDED = threading.local()
# one clustering at a time changes the shared step's minimum cluster size for its own call
_CLUSTERING = threading.Lock()


def relative_min_cluster_size(min_cluster_size: int, embedded: int, trained: int) -> int:
    """The recipe's minimum cluster size (counted in embeddings of windows 1 s apart) for a
    clustering trained on ``embedded`` of the ``trained`` embeddings the recipe would train on:
    the same speech, fewer embeddings."""
    if trained <= 0:
        return int(min_cluster_size)
    return max(1, int(round(int(min_cluster_size) * embedded / trained)))


def _train_on_embedded(clustering) -> Optional[str]:
    """Make the agglomerative ``clustering`` train on the embedded pairs alone where the running
    diarization pooled the others (``_EMBEDDED``), its minimum cluster size scaled to them
    (:func:`relative_min_cluster_size`); the pooled pairs are then assigned to its clusters as
    every other pair is. Returns None when it applied, else why not."""
    why_not = _not_agglomerative(clustering)
    if why_not is not None:
        return why_not
    if getattr(clustering, "_trains_on_embedded", False):
        return None
    stock = type(clustering)

    class TrainedOnEmbedded(stock):
        _trains_on_embedded = True

        def __call__(self, *args, **kwargs):
            with _CLUSTERING:
                saved = self.min_cluster_size
                try:
                    return stock.__call__(self, *args, **kwargs)
                finally:
                    self.min_cluster_size = saved

        def filter_embeddings(self, embeddings, *args, **kwargs):
            out, chunks, speakers = stock.filter_embeddings(self, embeddings, *args, **kwargs)
            own = getattr(_EMBEDDED, "own", None)
            if own is None or own.shape != embeddings.shape[:2] or not len(chunks):
                return out, chunks, speakers
            keep = own[chunks, speakers]
            if not keep.any():
                return out, chunks, speakers
            self.min_cluster_size = relative_min_cluster_size(self.min_cluster_size, int(keep.sum()),
                                                              len(chunks))
            return out[keep], chunks[keep], speakers[keep]

    TrainedOnEmbedded.__name__ = TrainedOnEmbedded.__qualname__ = f"TrainedOnEmbedded{stock.__name__}"
    clustering.__class__ = TrainedOnEmbedded
    return None


def _min_num_frames(embedding, window, num_frames: int) -> int:
    """pyannote's fewest clean frames for which an embedding leaves out the overlapped speech."""
    import math

    num_samples = window.duration * embedding.sample_rate
    return math.ceil(num_frames * embedding.min_num_samples / num_samples)


def _windows(window, indices):
    """``window`` (a pyannote SlidingWindow) at the positions ``indices`` only, as pyannote's
    ``get_embeddings`` iterates it."""
    from pyannote.core import SlidingWindow

    class Chosen(SlidingWindow):
        def __getitem__(self, i):
            return SlidingWindow.__getitem__(self, int(indices[i]))

    return Chosen(start=window.start, duration=window.duration, step=window.step)


def share_window_embeddings(pipeline, device=None) -> Optional[str]:
    """On CPU, make ``pipeline`` embed the speakers of every EMBEDDING_STRIDE-th window (and
    those no neighbour heard) of recordings longer than SHARED_AFTER_S, and pool the others from
    the two embedded windows around them (speaker_asr/diarization/window_plan.py). Returns None
    when it applied, else why not."""
    if off_cpu(device):
        return off_cpu(device) + " (the GPU embeds every window, as the recipe does)"
    if EMBEDDING_STRIDE <= 1:
        return "EMBEDDING_STRIDE is 1"
    stock = getattr(pipeline, "get_embeddings", None)  # pyannote's, or embed_trunk_once's
    if stock is None or type(pipeline).__name__ != "SpeakerDiarization":
        return "the pipeline is not pyannote's SpeakerDiarization"
    if not getattr(pipeline._embedding, "_skips_silent", False):
        # the pairs left out of a window are skipped as silent ones (NaN, not computed)
        return "skip_silent_embeddings did not apply"
    from pyannote.core import SlidingWindowFeature

    from speaker_asr.diarization.window_plan import embedding_masks, plan_windows

    def get_embeddings(self, file, binary_segmentations, exclude_overlap=False, hook=None):
        _EMBEDDED.own = None  # every pair embedded: the clustering trains as the recipe does
        data = binary_segmentations.data
        window = binary_segmentations.sliding_window
        length = window.start + (len(data) - 1) * window.step + window.duration
        if self.training or len(data) <= 2 or length <= SHARED_AFTER_S:
            return stock(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        plan = plan_windows(data, data.shape[1] * window.step / window.duration, EMBEDDING_STRIDE)
        # each pair's mask chosen over the whole window (as the recipe would: whether a frame
        # overlaps depends on every speaker), then only the own pairs' kept
        masks = embedding_masks(data, exclude_overlap,
                                _min_num_frames(self._embedding, window, data.shape[1]))

        def embed(own, hook=None):
            rows = np.flatnonzero(own.any(axis=1))
            part = SlidingWindowFeature(masks[rows] * own[rows, None, :], _windows(window, rows))
            out = np.full(data.shape[:1] + (data.shape[2], self._embedding.dimension), np.nan,
                          dtype=np.float32)
            if len(rows):
                out[rows] = stock(file, part, exclude_overlap=False, hook=hook)
            return out

        embeddings = embed(plan.own, hook)  # one call: its batches are the step's progress
        plan.pool_into(embeddings)
        # a pooled pair whose sources all came out NaN: embed it from its own window
        missing = (np.nan_to_num(data).sum(axis=1) > 0) & np.isnan(embeddings).any(axis=2) & ~plan.own
        if missing.any():
            embeddings[missing] = embed(missing)[missing]
        _EMBEDDED.own = plan.own | missing  # for the clustering that follows on this thread
        return embeddings

    why_not = _train_on_embedded(pipeline.clustering)
    if why_not is not None:
        return f"its clustering cannot train on the embedded windows alone ({why_not})"
    pipeline.get_embeddings = get_embeddings.__get__(pipeline)
    return None
