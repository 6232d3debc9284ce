"""Output-preserving speed fixes for transformers' Whisper, applied to one loaded model instance.

Both were found by profiling (bench/profile_cpu.py, results in bench/profile_results.md) and change
no token, text or word time; tests/test_speedups.py compares against the stock code paths.

* ``keep_encoder_on_sdpa``: for word timestamps transformers 5's ``generate()`` sets
  ``model.model.config._attn_implementation = "eager"`` (the DTW needs the decoder's
  cross-attention weights). Every submodule shares that one config object, so the *encoder* also
  runs eager attention from then on, for every later request, and keeps each layer's
  1500x1500 attention maps. Giving the encoder its own copy of the config keeps it on SDPA; the
  decoder still switches. (transformers 4.5x picks attention classes at build time, where this is
  a no-op.)
* ``cache_suppress_masks``: ``SuppressTokensLogitsProcessor`` and
  ``SuppressTokensAtBeginLogitsProcessor`` rebuild a vocabulary-sized mask with ``torch.isin`` at
  every decoding step; the processors Whisper builds for this model are switched to subclasses
  that build each mask once per processor.
"""

from __future__ import annotations

import copy

import torch
from transformers.generation.logits_process import (
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)


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
