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
* ``embed_trunk_once``: pyannote runs the embedding model once per (window, local speaker) pair,
  the fbank and the whole network each time. WeSpeaker ResNet (the 3.1 recipe's ResNet34) takes
  its mask only in the statistics pooling at the very end: its network now runs once per window
  and is pooled with each active speaker's mask (exact: probed at load against one slot at a time;
  on the 60 s benchmark input 74 pair runs became 51 window runs). Models that cut frames by their
  mask (the kit's CAM++) keep pyannote's way.
* ``onnx_embedding_trunk``: on CPU that network (fbank to frames) runs in ONNX Runtime, exported in
  memory at load: 1.8x torch's speed here at 2 threads (0.21 vs 0.38 s a 10 s window), the same
  embeddings to float rounding (probed at load). Batching windows gained nothing on CPU (0.20-0.21 s
  a window at 1, 2, 4 and 8), and neither did a thread count other than torch's.
* ``coarser_segmentation_step`` and ``embed_fewer_windows``: an opt-in
  (``DIARIZATION_COARSE_LONG_RECORDINGS``, CPU only, never under CUDA) that trades accuracy for
  speed on recordings longer than ``LONG_RECORDING_S`` (5 minutes): the segmentation slides by 2 s
  instead of the 3.1 recipe's 1 s, and the speakers of every third window are embedded, a speaker
  of a window in between taking the embedding of the same speaker in the nearest embedded window
  (speaker_asr/diarization/window_plan.py). pyannote embeds each second of speech about ten
  times at its 1-s step; this about twice. Together they cut the diarization of a long recording
  to about a third, and cost DER (docs/measurements.md): off by default.
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

    def get_embeddings(self, file, binary_segmentations, exclude_overlap=False, hook=None):
        if self.training:
            return stock(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        data = np.nan_to_num(binary_segmentations.data, nan=0.0).astype(np.float32)
        window = binary_segmentations.sliding_window
        num_chunks, num_frames, num_speakers = data.shape
        masks = data
        if exclude_overlap:  # as pyannote: overlapped frames out, unless too little is left
            min_num_samples = self._embedding.min_num_samples
            num_samples = window.duration * self._embedding.sample_rate
            min_num_frames = math.ceil(num_frames * min_num_samples / num_samples)
            clean = data * (data.sum(axis=2, keepdims=True) < 2)
            enough = clean.sum(axis=1, keepdims=True) > min_num_frames
            masks = np.where(enough, clean, data)
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


def onnx_embedding_trunk(pipeline, device=None) -> Optional[str]:
    """On CPU, run the WeSpeaker ResNet trunk that :func:`embed_trunk_once` runs once per window
    (fbank -> frames: all but the pooling and the last layer) with ONNX Runtime instead of
    torch: 1.8x faster here at 2 threads (10 s window: 0.21 vs 0.38 s) with the same frames to
    float rounding (probed at load: at most 1e-5 of their scale apart). The model is exported in
    memory at load (about 2 s) with as many threads as torch has. Returns None when it applied,
    else why not."""
    if off_cpu(device):
        return off_cpu(device)
    model = getattr(pipeline, "_trunk_model", None)
    if model is None:
        return "embed_trunk_once did not apply"
    missing = _onnx_missing()
    if missing:
        return missing
    import torch

    class Trunk(torch.nn.Module):
        def __init__(self, resnet):
            super().__init__()
            self.resnet = resnet

        def forward(self, fbank):
            return self.resnet.forward_frames(fbank)

    rate = int(getattr(pipeline._embedding, "sample_rate", SAMPLE_RATE) or SAMPLE_RATE)
    waveform = 0.1 * torch.randn(1, 1, 10 * rate, generator=torch.Generator().manual_seed(1))
    masks = torch.zeros(1, 2, 589)
    masks[0, 0, :350] = 1.0
    masks[0, 1, 200:] = 1.0
    try:
        with torch.inference_mode():
            fbank = model.compute_fbank(waveform)
        trunk = _onnx_session(Trunk(model.resnet).eval(), fbank.clone(), ("fbank", "frames"),
                              {0: "batch", 1: "frames"})
        want = _pooled(model, waveform, masks)
        got = _pooled(model, waveform, masks, trunk)
    except Exception as exc:
        return f"its ONNX export or run failed ({type(exc).__name__}: {str(exc)[:200]})"
    if not _equal_to_rounding(got, want):
        return "ONNX Runtime's embeddings differ from torch's"

    pipeline._embedding_trunk = trunk
    return None


def _onnx_session(module, example, names, dynamic):
    """``module`` exported in memory to ONNX and loaded in ONNX Runtime with as many threads as
    torch has; a ``run(tensor) -> tensor`` for it."""
    import inspect
    import io
    import warnings

    import onnxruntime
    import torch

    buffer = io.BytesIO()
    options = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (example,), buffer, input_names=[names[0]], output_names=[names[1]],
                          dynamic_axes={names[0]: dynamic}, **options)
    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = max(1, torch.get_num_threads())
    session_options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(buffer.getvalue(), session_options,
                                           providers=["CPUExecutionProvider"])

    def run(x):
        out = session.run(None, {names[0]: np.ascontiguousarray(x.detach().cpu().numpy())})[0]
        return torch.from_numpy(out)

    return run


def _onnx_missing() -> Optional[str]:
    try:
        import onnx  # noqa: F401  (torch's exporter needs it)
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed"
    return None


def onnx_segmentation(pipeline, device=None) -> Optional[str]:
    """On CPU, run the segmentation model (segmentation-3.0's PyanNet: SincNet, LSTM, linear
    layers) in ONNX Runtime, exported in memory at load: 2-3x torch's speed here for a batch of
    32 windows, the same outputs to float rounding (probed at load on a batch of random windows,
    and their argmax, which decides the powerset speakers, identical). Returns None when it
    applied, else why not."""
    if off_cpu(device):
        return off_cpu(device)
    inference = getattr(pipeline, "_segmentation", None)
    model = getattr(inference, "model", None)
    if model is None or type(pipeline).__name__ != "SpeakerDiarization":
        return "the pipeline is not pyannote's SpeakerDiarization"
    missing = _onnx_missing()
    if missing:
        return missing
    import torch

    try:
        rate = int(model.hparams.sample_rate)
        samples = int(round(float(inference.duration) * rate))
        example = 0.1 * torch.randn(4, 1, samples, generator=torch.Generator().manual_seed(2))
        with torch.inference_mode():
            want = model(example).numpy()
        run = _onnx_session(model, example[:1], ("waveforms", "scores"), {0: "batch", 2: "samples"})
        got = run(example).numpy()
    except Exception as exc:
        return f"its ONNX export or run failed ({type(exc).__name__}: {str(exc)[:200]})"
    if not _equal_to_rounding(got, want) or not np.array_equal(got.argmax(axis=-1), want.argmax(axis=-1)):
        return "ONNX Runtime's segmentation differs from torch's"

    def forward(waveforms, *args, **kwargs):
        if args or kwargs or waveforms.device.type != "cpu":
            return type(model).forward(model, waveforms, *args, **kwargs)
        return run(waveforms)

    model.forward = forward
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


def absorb_stray_clusters(pipeline) -> Optional[str]:
    """Make ``pipeline``'s agglomerative clustering let a stray cluster of a long recording join
    the larger cluster it lies near (speaker_asr/diarization/clustering.py, :func:`absorb_strays`):
    one label per person over hours, where the recipe's fixed minimum cluster size lets clusters
    of overlapped speech through. Not when the caller fixed the number of speakers. Returns None
    when it applied, else why not."""
    clustering = getattr(pipeline, "clustering", None)
    if clustering is None:
        return "the pipeline has no clustering step"
    try:
        from pyannote.audio.pipelines.clustering import AgglomerativeClustering
    except Exception as exc:  # pragma: no cover - pyannote is installed wherever a pipeline loads
        return f"pyannote's clustering module: {type(exc).__name__}"
    if not isinstance(clustering, AgglomerativeClustering):
        return f"{type(clustering).__name__} is not agglomerative clustering (VBx weighs clusters its own way)"
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
    stock = getattr(pipeline, "get_embeddings", None)  # pyannote's, or embed_trunk_once's
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
            return stock(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        plan = plan_windows(data, data.shape[1] * window.step / window.duration, EMBEDDING_STRIDE)
        chosen = np.flatnonzero(plan.embed)
        # one embedding call for the chosen windows: its batches are the step's progress
        part = SlidingWindowFeature(data[chosen], _windows(window, chosen))
        computed = stock(file, part, exclude_overlap=exclude_overlap, hook=hook)
        embeddings = np.full((len(data),) + computed.shape[1:], np.nan, dtype=computed.dtype)
        embeddings[chosen] = computed
        plan.copy_into(embeddings)
        # a copy whose source came out NaN (too little clean speech there): embed that window too
        missing = np.flatnonzero(~plan.embed & (
            (np.nan_to_num(data).sum(axis=1) > 0) & np.isnan(embeddings).any(axis=2)).any(axis=1))
        if len(missing):
            part = SlidingWindowFeature(data[missing], _windows(window, missing))
            embeddings[missing] = stock(file, part, exclude_overlap=exclude_overlap)
        return embeddings

    pipeline.get_embeddings = get_embeddings.__get__(pipeline)
    return None
