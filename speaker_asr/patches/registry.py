"""Every change this project makes to transformers' or pyannote's internals, in one place.

Each :class:`Patch` says what it targets (the Whisper model, the assistant, the diarization
pipeline), whether it can change the output or only the speed, which library versions it
supports, and how it is installed. :func:`install` applies a target's patches in the fixed order
of :data:`PATCHES` and returns one :class:`PatchResult` per patch -- applied, or skipped and why
-- which the handler logs at load and shows in ``/health`` and ``/metrics``. Everything is
decided at load: no patch changes a model's state per request.

``GENERATION_SPEEDUPS=false`` skips every Whisper/assistant patch (transformers' stock code
paths, output included); ``DIARIZATION_SPEEDUPS=false`` every diarization patch.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterator, Optional

# an install function returns None when it applied, else the reason it did not
Install = Callable[[Any, dict], Optional[str]]


@dataclass(frozen=True)
class Patch:
    name: str
    target: str  # "whisper" | "assistant" | "diarization"
    changes_output: bool  # False: checked output-identical to the stock path, speed only
    versions: str  # the library versions it supports, in words
    install: Install
    summary: str


@dataclass(frozen=True)
class PatchResult:
    name: str
    target: str
    applied: bool
    reason: str  # why it was skipped; "" when applied
    changes_output: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _chunk_windows(model, context: dict) -> Optional[str]:
    from speaker_asr.patches import chunk_windows

    return None if chunk_windows.install(model) else "transformers' segment splitter takes other arguments"


def _keep_encoder_on_sdpa(model, context: dict) -> Optional[str]:
    from speaker_asr.patches.whisper import keep_encoder_on_sdpa

    return None if keep_encoder_on_sdpa(model) else "the model is not on SDPA attention"


def _alignment_heads_only(model, context: dict) -> Optional[str]:
    from speaker_asr.patches import word_alignment

    return word_alignment.install(model)


def _decoder_attention_at_load(model, context: dict) -> Optional[str]:
    from speaker_asr.patches import word_alignment

    return word_alignment.own_decoder_attention(model)


def _cache_suppress_masks(model, context: dict) -> Optional[str]:
    from speaker_asr.patches.whisper import cache_suppress_masks

    return None if cache_suppress_masks(model) else "the model builds no Whisper logits processors"


def _fast_dtw(model, context: dict) -> Optional[str]:
    from speaker_asr.patches.whisper import fast_dtw

    return None if fast_dtw(model) else "transformers has no _dynamic_time_warping to replace"


def _fast_lm_head(model, context: dict) -> Optional[str]:
    from speaker_asr.patches.whisper import fast_lm_head

    return fast_lm_head(model)  # None, or why not


def _cache_processor_signatures(model, context: dict) -> Optional[str]:
    from speaker_asr.patches.whisper import cache_processor_signatures

    return None if cache_processor_signatures(model) else "the model has no generation hook to wrap"


def _lean_decoder(model, context: dict) -> Optional[str]:
    from speaker_asr.patches import lean_decoder

    if not lean_decoder._supported():
        return "transformers 4.x: its decoder step is not the one lean_forward mirrors"
    return None if lean_decoder.install(model) else "its probe output differs from this transformers'"


def _draft_decoding(model, context: dict) -> Optional[str]:
    from speaker_asr.patches import draft_decoding

    return draft_decoding.install(model)


def _skip_silent_embeddings(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization import skip_silent_embeddings

    return None if skip_silent_embeddings(pipeline) else (
        "the clustering assigns a window's speakers jointly and the embedding does not return "
        "NaN for silence (or the pipeline has no embedding model)")


def _cpu_embedding_batch(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization import cpu_embedding_batch

    from speaker_asr.patches.diarization import off_cpu

    device = context.get("device")
    if off_cpu(device):
        return off_cpu(device)
    return None if cpu_embedding_batch(pipeline, device) else "the pipeline has no embedding batch size"


def _embed_trunk_once(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization import embed_trunk_once

    return embed_trunk_once(pipeline)


def _onnx_embedding_trunk(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization_onnx import onnx_embedding_trunk

    return onnx_embedding_trunk(pipeline, context.get("device"))


def _absorb_stray_clusters(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization import absorb_stray_clusters

    return absorb_stray_clusters(pipeline)


def _onnx_segmentation(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization_onnx import onnx_segmentation

    return onnx_segmentation(pipeline, context.get("device"), context.get("segmentation", "float"))


def _share_window_embeddings(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization import share_window_embeddings

    if context.get("embeddings", "recipe") != "approximate":
        return "DIARIZATION_EMBEDDINGS=recipe"
    return share_window_embeddings(pipeline, context.get("device"))


def _linear_clustering(pipeline, context: dict) -> Optional[str]:
    from speaker_asr.patches.diarization import linear_clustering

    return linear_clustering(pipeline)


_TRANSFORMERS = "transformers 4.51-4.57 and 5.x"
PATCHES: tuple[Patch, ...] = (
    Patch("chunk_windows", "whisper", True, _TRANSFORMERS, _chunk_windows,
          "one decoding pass per chunked window, as transformers 4.51 does without word timestamps "
          "(with them, and in newer releases always, an unfinished window's tail is decoded twice, "
          "and 4.51 then lost text)"),
    Patch("keep_encoder_on_sdpa", "whisper", False, _TRANSFORMERS, _keep_encoder_on_sdpa,
          "the encoder keeps SDPA attention and returns no attention weights when word timestamps "
          "switch the decoder to eager attention"),
    Patch("cache_suppress_masks", "whisper", False, _TRANSFORMERS, _cache_suppress_masks,
          "suppress-token masks built once per processor instead of at every step"),
    Patch("fast_dtw", "whisper", False, _TRANSFORMERS, _fast_dtw,
          "word-timestamp dynamic time warping by anti-diagonals and the median filter by a "
          "sorting network (same path, same values)"),
    Patch("alignment_heads_only", "whisper", True, _TRANSFORMERS, _alignment_heads_only,
          "word timestamps from the alignment heads of one teacher-forced decoder pass instead of "
          "every layer's attention at every step (word times equal up to float rounding)"),
    Patch("decoder_attention_at_load", "whisper", False, "transformers 4.52+ (4.57, 5.x)",
          _decoder_attention_at_load,
          "the decoder's attention is fixed at load (eager on the CPU, SDPA on a GPU) and no longer "
          "switched by transformers at the first word-timestamp request"),
    Patch("fast_lm_head", "whisper", False, _TRANSFORMERS + ", CPU float32, native bfloat16", _fast_lm_head,
          "the vocabulary projection in bfloat16 with a float32 recompute of every logit that can "
          "decide the greedy token"),
    Patch("draft_decoding", "whisper", False, _TRANSFORMERS, _draft_decoding,
          "a live utterance's previous decode proposes the tokens of its next one, verified by the "
          "model several at a time (assisted generation with that draft: greedy's own tokens)"),
    Patch("cache_processor_signatures", "whisper", False, _TRANSFORMERS, _cache_processor_signatures,
          "the logits-processor list looks each processor's signature up once"),
    Patch("lean_decoder", "whisper", False, "transformers 5.x", _lean_decoder,
          "the decoder step without transformers' per-call machinery (bit-identical, probed at load)"),
    Patch("cache_processor_signatures", "assistant", False, _TRANSFORMERS, _cache_processor_signatures,
          "as for the main model"),
    Patch("lean_decoder", "assistant", False, "transformers 5.x", _lean_decoder, "as for the main model"),
    Patch("skip_silent_embeddings", "diarization", False, "pyannote.audio 3.3 and 4.x",
          _skip_silent_embeddings, "no speaker embedding for a window's silent speaker slots"),
    Patch("cpu_embedding_batch", "diarization", False, "pyannote.audio 3.3 and 4.x", _cpu_embedding_batch,
          "on CPU one window per embedding batch instead of 32"),
    Patch("embed_trunk_once", "diarization", False, "pyannote.audio 3.3 and 4.x", _embed_trunk_once,
          "WeSpeaker ResNet embeddings (the 3.1 recipe's): the network once per window, pooled with "
          "each active speaker's mask, instead of once per (window, speaker) pair (probed at load)"),
    Patch("onnx_embedding_trunk", "diarization", False, "pyannote.audio 3.3 and 4.x, onnxruntime",
          _onnx_embedding_trunk,
          "on CPU that network runs in ONNX Runtime (exported at load; the same frames to float "
          "rounding, probed at load)"),
    Patch("onnx_segmentation", "diarization", False, "pyannote.audio 3.3 and 4.x, onnxruntime",
          _onnx_segmentation,
          "on CPU the segmentation model runs in ONNX Runtime (exported at load; the same scores to "
          "float rounding and the same powerset argmax, probed at load); opt-in (segmentation=\"int8\") "
          "its LSTM's weights in int8: cheaper, close to torch's scores but not the same (the "
          "pipeline's settings say which runs)"),
    Patch("share_window_embeddings", "diarization", True, "pyannote.audio 3.3 and 4.x",
          _share_window_embeddings,
          "DIARIZATION_EMBEDDINGS=approximate (CPU, past 5 minutes): the speakers of every fifth window "
          "are embedded; a speaker of a window in between gets the mean of its matches in the two "
          "embedded windows around it, or its own embedding where neither heard it; the clustering "
          "is trained on the embedded ones, its minimum cluster size scaled to them"),
    Patch("linear_clustering", "diarization", True, "pyannote.audio 3.3 and 4.x", _linear_clustering,
          "above 4,000 embeddings (about 45 min) the clustering's centroid linkage runs in blocks "
          "whose clusters are then linked by their weighted centroids: linear time and memory"),
    Patch("absorb_stray_clusters", "diarization", True, "pyannote.audio 3.3 and 4.x", _absorb_stray_clusters,
          "a cluster under 1 % of a long recording's embeddings within 0.45 (cosine) of a larger one joins it "
          "(the recipe's fixed minimum size lets overlapped speech through as extra speakers over hours)"),
)


@contextlib.contextmanager
def skipping(name: str, reason: str) -> Iterator[None]:
    """Within the block, patch ``name`` is skipped with ``reason`` (every other one as usual):
    for measuring or testing one patch against the code path it replaces."""
    global PATCHES
    saved = PATCHES
    if name not in {p.name for p in saved}:
        raise ValueError(f"no patch named {name!r}")
    PATCHES = tuple(replace(p, install=lambda obj, context: reason) if p.name == name else p
                    for p in saved)
    try:
        yield
    finally:
        PATCHES = saved


def install(target: str, obj: Any, enabled: bool, **context: Any) -> list[PatchResult]:
    """Apply ``target``'s patches to ``obj`` in their fixed order (none when ``enabled`` is
    false); one result per patch."""
    results = []
    for patch in PATCHES:
        if patch.target != target:
            continue
        if not enabled:
            reason = ("DIARIZATION_SPEEDUPS=false" if target == "diarization"
                      else "GENERATION_SPEEDUPS=false")
        else:
            reason = patch.install(obj, context)
        results.append(PatchResult(patch.name, target, reason is None, reason or "", patch.changes_output))
    return results


def describe(results: list[PatchResult]) -> str:
    """One log line: ``target.name`` applied, or skipped (why)."""
    return "; ".join(f"{r.target}.{r.name}: " + ("applied" if r.applied else f"skipped ({r.reason})")
                     for r in results)
