"""Output-preserving speed fixes for transformers' Whisper, applied to one loaded model instance.

They were found by profiling (bench/profile_cpu.py, results in bench/profile_results.md) and change
no token, text or word time; tests/patches/test_whisper_patches.py compares against the stock code paths.

* ``keep_encoder_on_sdpa``: for word timestamps transformers 5's ``generate()`` sets
  ``model.model.config._attn_implementation = "eager"`` (the DTW needs the decoder's
  cross-attention weights). Every submodule shares that one config object, so the *encoder* also
  runs eager attention from then on, for every later request, and keeps each layer's
  1500x1500 attention maps. Giving the encoder its own copy of the config keeps it on SDPA; the
  decoder still switches. The encoder is also told never to return attention weights (nothing
  reads them): on SDPA it has none, and transformers 4.57 then failed on the tuple of ``None`` it
  got back ("'NoneType' object is not subscriptable"). (transformers 4.51 picks attention classes
  at build time, where this is a no-op.)
* ``cache_suppress_masks``: ``SuppressTokensLogitsProcessor`` and
  ``SuppressTokensAtBeginLogitsProcessor`` rebuild a vocabulary-sized mask with ``torch.isin`` at
  every decoding step; the processors Whisper builds for this model are switched to subclasses
  that build each mask once per processor.
* ``cache_processor_signatures``: ``LogitsProcessorList`` looks up every processor's call
  signature with ``inspect.signature`` at every decoding step, to see whether it takes extra
  arguments (a small but steady cost per step); the list generate builds for this model looks
  each processor type up once.
* ``fast_lm_head`` (CPU, float32): the vocabulary projection reads its whole float32 weight
  (51,866 x d_model) at every decoding step, a large share of a small model's ASR time on CPU.
  It is computed in bfloat16 first (half the memory traffic), with a rigorous
  bound on the bfloat16 error; then every logit that can decide the greedy choice is recomputed
  in float32 from the original weight: all special and timestamp tokens, the suppressed tokens,
  and every other token whose bfloat16 logit lies within twice the bound of the largest. Greedy
  decoding picks its token from these (Whisper's logits processors only mask whole blocks of text
  tokens or subsets of the special ones), so the choice is the float32 one. Used only for greedy
  requests that read no probabilities (no sampling, no logprob or no-speech threshold), and only
  where the CPU computes bfloat16 natively (AVX512-BF16 or AMX; emulated bfloat16 is slower).
* ``fast_dtw``: word timestamps align tokens to audio frames by dynamic time warping, which
  transformers runs as a Python double loop over tokens x frames, once per window.
  :func:`dynamic_time_warping` fills the same cost matrix one anti-diagonal at a time with numpy
  (each cell depends only on the previous two diagonals), with the same float32 rounding and tie
  rules, so the path is identical: one numpy operation per anti-diagonal instead of one Python
  step per cell. Before the warping the attention weights are smoothed by a width-7 median
  filter, which transformers computes by sorting every window of 7; :func:`median_filter` takes
  the middle of a 16-comparator sorting network instead (elementwise min/max, same values),
  cheaper than a sort.

What each of these gains: docs/measurements.md ("What each speed fix gains", and "Figures behind
the speed fixes' reasons").
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import threading
from typing import Optional

import numpy as np
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

from speaker_asr.patches.scope import RequestScope


def keep_encoder_on_sdpa(model) -> bool:
    """Give ``model``'s encoder a private config pinned to SDPA. Returns whether it applied."""
    encoder = getattr(getattr(model, "model", None), "encoder", None)
    config = getattr(encoder, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    own = copy.copy(config)
    for module in encoder.modules():
        if getattr(module, "config", None) is config:
            module.config = own
    forward = encoder.forward

    @functools.wraps(forward)
    def forward_without_attentions(*args, **kwargs):
        kwargs["output_attentions"] = False
        return forward(*args, **kwargs)

    encoder.forward = forward_without_attentions
    return True


def _mask(processor, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    key = (scores.shape[-1], scores.device)
    cache = processor.__dict__.setdefault("_mask_cache", {})
    mask = cache.get(key)
    if mask is None:
        ids = tokens.to(device=scores.device, dtype=torch.long)
        ids = ids[(ids >= 0) & (ids < scores.shape[-1])]
        mask = torch.zeros(scores.shape[-1], dtype=torch.bool, device=scores.device)
        mask[ids] = True
        cache[key] = mask
    return mask


class CachedSuppressTokens(SuppressTokensLogitsProcessor):
    """Same result as the parent; the mask is built on the first call only."""

    def __call__(self, input_ids, scores):
        return scores.masked_fill(_mask(self, self.suppress_tokens, scores), -float("inf"))


class CachedSuppressTokensAtBegin(SuppressTokensAtBeginLogitsProcessor):
    """Same result as the parent; the mask is built on the first call only."""

    def __call__(self, input_ids, scores):
        if input_ids.shape[-1] != self.begin_index:
            return scores
        return scores.masked_fill(_mask(self, self.begin_suppress_tokens, scores), -float("inf"))


_CACHED = {SuppressTokensLogitsProcessor: CachedSuppressTokens,
           SuppressTokensAtBeginLogitsProcessor: CachedSuppressTokensAtBegin}


def cache_suppress_masks(model) -> bool:
    """Wrap this model's ``_retrieve_logit_processors`` (Whisper's generate builds its
    processors there) so the suppress processors it returns use cached masks."""
    build = getattr(model, "_retrieve_logit_processors", None)
    if build is None:
        return False

    def retrieve(*args, **kwargs):
        processors = build(*args, **kwargs)
        for processor in processors or ():
            cached = _CACHED.get(type(processor))
            if cached is not None:
                processor.__class__ = cached
        return processors

    model._retrieve_logit_processors = retrieve
    return True


_TAKES_EXTRA: dict = {}


def _takes_extra_arguments(processor) -> bool:
    """Whether ``processor`` is called with the list's keyword arguments (its ``__call__`` takes
    more than input ids and scores), looked up once per processor type."""
    kind = type(processor)
    extra = _TAKES_EXTRA.get(kind)
    if extra is None:
        extra = _TAKES_EXTRA[kind] = len(inspect.signature(processor.__call__).parameters) > 2
    return extra


class SignatureCachedProcessorList(LogitsProcessorList):
    """``LogitsProcessorList`` without a signature lookup per processor and step. A list with a
    processor that takes extra arguments is handed to the stock call (its checks and errors)."""

    def __call__(self, input_ids, scores, **kwargs):
        if any(_takes_extra_arguments(processor) for processor in self):
            return super().__call__(input_ids, scores, **kwargs)
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


def cache_processor_signatures(model) -> bool:
    """Wrap this model's ``_get_logits_processor`` (where generate builds its processor list) so
    the list it returns is a :class:`SignatureCachedProcessorList`. Returns whether it applied."""
    build = getattr(model, "_get_logits_processor", None)
    if build is None:
        return False

    def get_logits_processor(*args, **kwargs):
        processors = build(*args, **kwargs)
        if type(processors) is LogitsProcessorList:
            processors.__class__ = SignatureCachedProcessorList
        return processors

    model._get_logits_processor = get_logits_processor
    return True


# Error bound of a bfloat16 logit, per unit of |x| * max row norm: bfloat16 keeps 8 significant
# bits, so each of the three roundings (hidden state, weight, output) costs at most u = 2^-8
# relatively, (1 + u)^3 - 1 in all; the products are exact in float32 and the float32
# accumulation adds at most d * 2^-23 (generous); 1.25 for margin
_BF16_UNIT = 2.0 ** -8


def _bound_factor(d: int) -> float:
    return 1.25 * ((1 + _BF16_UNIT) ** 3 - 1 + d * 2.0 ** -23)


class _FastHead:
    """State of one model's fast vocabulary projection (see :func:`fast_lm_head`)."""

    def __init__(self, linear: torch.nn.Linear, exact_ids: torch.Tensor):
        weight = linear.weight.detach()
        self.linear = linear
        self.vocab, self.d = weight.shape
        self.weight_bf16 = weight.to(torch.bfloat16)
        self.exact_ids = exact_ids
        self.weight_exact = weight[exact_ids].contiguous()
        self.max_row_norm = float(weight.norm(dim=1).max())
        self.factor = _bound_factor(self.d)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.linear.weight
        if not FAST_HEAD_ALLOWED.get() or x.dtype != torch.float32 \
                or x.device.type != "cpu":
            return torch.nn.functional.linear(x, weight, self.linear.bias)
        shape = x.shape
        flat_x = x.reshape(-1, self.d)
        out = torch.nn.functional.linear(flat_x.to(torch.bfloat16), self.weight_bf16).float()
        # every other token within 2 x bound of the largest other one may be the greedy choice
        # (the exact tokens are set aside in place first: no vocabulary-sized copy per step)
        out[:, self.exact_ids] = -math.inf
        bound = self.factor * flat_x.norm(dim=1) * self.max_row_norm
        top = out.max(dim=1).values
        near = (out >= (top - 2 * bound)[:, None]).any(dim=0).nonzero().squeeze(1)
        # exact: special/timestamp/suppressed tokens, whose masks the logits processors change
        out[:, self.exact_ids] = torch.nn.functional.linear(flat_x, self.weight_exact)
        if near.numel():
            out[:, near] = torch.nn.functional.linear(flat_x, weight[near])
        if self.linear.bias is not None:
            out += self.linear.bias
        return out.reshape(*shape[:-1], self.vocab)


def decision_token_ids(model) -> Optional[torch.Tensor]:
    """Ids whose logits Whisper's logits processors treat specially, sorted: every special and
    timestamp token (eos and above) and the suppressed ones. None when the model's generation
    config does not say."""
    gen = getattr(model, "generation_config", None)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if gen is None or not isinstance(vocab, int):
        return None
    first_special = getattr(gen, "eos_token_id", None)
    if isinstance(first_special, (list, tuple)):
        first_special = min(first_special)
    if not isinstance(first_special, int) or not 0 < first_special < vocab:
        return None
    ids = set(range(first_special, vocab))
    for name in ("suppress_tokens", "begin_suppress_tokens"):
        ids.update(i for i in (getattr(gen, name, None) or ()) if 0 <= i < vocab)
    return torch.tensor(sorted(ids), dtype=torch.long)


def native_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (AVX512-BF16 or AMX); where it
    does not, torch emulates them and the float32 projection is the faster one."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


def fast_lm_head(model, require_native_bfloat16: bool = True) -> Optional[str]:
    """Switch ``model.proj_out`` (float32 on CPU) to the bfloat16-then-exact projection, where the
    CPU computes bfloat16 natively: decided from the CPU's capability, the same at every load.
    Returns None when it applied, else why not. Requests that read probabilities run the float32
    projection (:func:`fast_lm_head_scope`)."""
    head = getattr(model, "proj_out", None)
    if not isinstance(head, torch.nn.Linear) or head.weight.dtype != torch.float32 \
            or head.weight.device.type != "cpu":
        return "the vocabulary projection is not float32 on the CPU (a GPU, another dtype, or int8)"
    exact_ids = decision_token_ids(model)
    if exact_ids is None or head.weight.shape[0] != model.config.vocab_size:
        return "the generation config does not say which tokens are special"
    if require_native_bfloat16 and not native_bfloat16():
        return "bfloat16 is emulated on this CPU (no AVX512-BF16 or AMX): float32 is faster"
    state = _FastHead(head, exact_ids)
    head._fast_head = state
    head.forward = state.logits
    return None


# whether requests decoding on this thread may use the fast projection
FAST_HEAD_ALLOWED = RequestScope(True)


def fast_lm_head_scope(allowed: bool):
    """Within this block (this thread) the fast projection runs only if ``allowed``."""
    return FAST_HEAD_ALLOWED.set(allowed)


def fast_lm_head_allowed(generate_kwargs: dict) -> bool:
    """Greedy decoding that reads no probabilities: the fast projection gives its exact tokens."""
    return (not generate_kwargs.get("do_sample") and "temperature" not in generate_kwargs
            and generate_kwargs.get("logprob_threshold") is None
            and generate_kwargs.get("no_speech_threshold") is None)


def dynamic_time_warping(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' ``_dynamic_time_warping`` (same cost rounding, tie rules and path), one
    anti-diagonal at a time: cell (i, j) needs (i-1, j-1), (i-1, j) and (i, j-1) only."""
    n, m = matrix.shape
    w = m + 1
    cost = np.full((n + 1) * w, np.inf, dtype=np.float32)  # float32 as in transformers
    trace = np.full((n + 1) * w, -1, dtype=np.int8)
    flat = np.ascontiguousarray(matrix).ravel()
    cost[0] = 0
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        at = i * w + (d - i)
        c0, c1, c2 = cost[at - w - 1], cost[at - w], cost[at - 1]
        # the stock rule: the diagonal on a strict minimum, else up on a strict minimum, else left
        diagonal = (c0 < c1) & (c0 < c2)
        up = ~diagonal & (c1 < c0) & (c1 < c2)
        cost[at] = flat[(i - 1) * m + (d - i - 1)] + np.where(diagonal, c0, np.where(up, c1, c2))
        trace[at] = np.where(diagonal, 0, np.where(up, 1, 2))
    trace = trace.reshape(n + 1, w)
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    text_indices, time_indices = [], []
    while i > 0 or j > 0:
        text_indices.append(i - 1)
        time_indices.append(j - 1)
        step = trace[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text_indices)[::-1], np.array(time_indices)[::-1]


# a sorting network for 7 values (16 comparators, Knuth TAOCP 5.3.4): after these
# compare-exchanges position 3 holds the median
_SORT7 = ((0, 6), (2, 3), (4, 5), (0, 2), (1, 4), (3, 6), (0, 1), (2, 5), (3, 4), (1, 2), (4, 6),
          (2, 3), (4, 5), (1, 2), (3, 4), (5, 6))


def median_filter(inputs: torch.Tensor, filter_width: int, stock) -> torch.Tensor:
    """transformers' ``_median_filter`` (reflect padding, median of each window along the last
    dimension) for width 7 without sorting: the same values. Other widths, inputs too short to
    pad, and inputs holding a NaN (sort and min/max order NaN differently) go to ``stock``,
    transformers' own function."""
    pad = filter_width // 2
    if filter_width != 7 or inputs.shape[-1] <= pad or bool(torch.isnan(inputs).any()):
        return stock(inputs, filter_width)
    padded = torch.nn.functional.pad(inputs, (pad, pad, 0, 0), mode="reflect")
    n = inputs.shape[-1]
    v = [padded[..., i:i + n] for i in range(filter_width)]
    for i, j in _SORT7:
        v[i], v[j] = torch.minimum(v[i], v[j]), torch.maximum(v[i], v[j])
    return v[pad]


_DTW_LOCK = threading.Lock()


def fast_dtw(model) -> bool:
    """Make this model's word timestamps use :func:`dynamic_time_warping`. transformers calls a
    module-level function, so it is swapped in for the duration of this model's alignment only
    (a model loaded without the speed-ups keeps the stock loop). Returns whether it applied."""
    try:
        from transformers.models.whisper import generation_whisper
    except ImportError:
        return False
    stock = getattr(generation_whisper, "_dynamic_time_warping", None)
    stock_median = getattr(generation_whisper, "_median_filter", None)
    extract = getattr(model, "_extract_token_timestamps", None)
    if stock is None or extract is None:
        return False

    def fast_median(inputs, filter_width):
        return median_filter(inputs, filter_width, stock_median)

    def extract_token_timestamps(*args, **kwargs):
        with _DTW_LOCK:
            generation_whisper._dynamic_time_warping = dynamic_time_warping
            if stock_median is not None:
                generation_whisper._median_filter = fast_median
            try:
                return extract(*args, **kwargs)
            finally:
                generation_whisper._dynamic_time_warping = stock
                if stock_median is not None:
                    generation_whisper._median_filter = stock_median

    model._extract_token_timestamps = extract_token_timestamps
    return True
