"""Whisper's decoder step without transformers' per-call machinery (output-identical).

At batch 1 on CPU a decoding step is a few dozen small tensor operations per layer, and
transformers 5 wraps them in a lot of Python: the output-capturing hooks that collect the
attention weights, the keyword-deprecation wrappers, the causal-mask builder, the cache's
bookkeeping and one module call per projection. For small models that overhead is a noticeable
part of the ASR time (profiled: bench/README.md, "What the profiling found"; what removing it
gains: docs/measurements.md, "What each speed fix gains").

:func:`install` replaces one model's ``decoder.forward`` with :func:`lean_forward`: the same
operations, in the same order and dtype, on the same modules and the same cache object, so every
logit is bit-identical; only the overhead goes. It serves the calls ``generate()`` makes when
word timestamps are asked for (eager attention, which the timestamps need and which the handler
uses whenever it diarizes: token ids, encoder states, an encoder-decoder cache, no padding mask)
and hands every other call to the stock forward. :func:`install` compares the two on a probe
before it switches and keeps the stock forward when anything differs (a transformers release
that changes the layer's arithmetic), so the speed-up can never change a transcript.
"""

from __future__ import annotations

import functools
import logging

import torch

logger = logging.getLogger(__name__)


def _supported() -> bool:
    """transformers 5 (its decoder step is what lean_forward mirrors); 4.x keeps the stock decoder.
    4.56-4.57 already have cache layers, but their step differs and the probe would refuse it."""
    from speaker_asr.compat import transformers_major

    if transformers_major() < 5:
        return False
    try:
        from transformers.cache_utils import DynamicCache
    except ImportError:
        return False
    return hasattr(DynamicCache(), "layers")


@functools.cache
def _transformers_5():
    """The transformers 5 names a step uses, imported once (4.5x lacks some of them)."""
    from transformers.cache_utils import EncoderDecoderCache
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
    from transformers.models.whisper.modeling_whisper import eager_attention_forward

    return EncoderDecoderCache, BaseModelOutputWithPastAndCrossAttentions, eager_attention_forward


def lean_forward(decoder, stock, input_ids=None, attention_mask=None, encoder_hidden_states=None,
                 cache=None, inputs_embeds=None, position_ids=None, use_cache=None,
                 output_attentions=False, **kwargs):
    """``WhisperDecoder.forward`` for generation steps; anything else goes to ``stock``."""
    EncoderDecoderCache, BaseModelOutputWithPastAndCrossAttentions, eager_attention_forward = \
        _transformers_5()
    if (getattr(decoder.config, "_attn_implementation", None) != "eager"
            or input_ids is None or inputs_embeds is not None or attention_mask is not None
            or position_ids is not None or encoder_hidden_states is None or not use_cache
            or type(cache) is not EncoderDecoderCache or kwargs or decoder.training):
        return stock(input_ids=input_ids, attention_mask=attention_mask,
                     encoder_hidden_states=encoder_hidden_states, cache=cache,
                     inputs_embeds=inputs_embeds, position_ids=position_ids, use_cache=use_cache,
                     output_attentions=output_attentions, **kwargs)
    batch, length = input_ids.shape
    self_cache, cross_cache = cache.self_attention_cache, cache.cross_attention_cache
    past = self_cache.get_seq_length()
    hidden = decoder.embed_tokens(input_ids)
    hidden = hidden + decoder.embed_positions.weight[past:past + length]
    mask = None
    if length > 1:  # causal within the new tokens (a prompt, or assisted candidates)
        mask = torch.full((length, past + length), torch.finfo(hidden.dtype).min,
                          dtype=hidden.dtype, device=hidden.device).triu_(past + 1)[None, None]
    self_weights, cross_weights = [], []
    for i, layer in enumerate(decoder.layers):
        attn = layer.self_attn
        heads, head_dim = attn.num_heads, attn.head_dim
        shape = (batch, length, heads, head_dim)
        residual = hidden
        x = layer.self_attn_layer_norm(hidden)
        q = (attn.q_proj(x) * attn.scaling).view(shape).transpose(1, 2).contiguous()
        k = attn.k_proj(x).view(shape).transpose(1, 2).contiguous()
        v = attn.v_proj(x).view(shape).transpose(1, 2).contiguous()
        k, v = self_cache.update(k, v, i)
        out, weights = eager_attention_forward(attn, q, k, v, mask, scaling=1.0)
        self_weights.append(weights)
        hidden = residual + attn.out_proj(out.reshape(batch, length, -1).contiguous())

        attn = layer.encoder_attn
        residual = hidden
        x = layer.encoder_attn_layer_norm(hidden)
        q = (attn.q_proj(x) * attn.scaling).view(shape).transpose(1, 2).contiguous()
        if cache.is_updated.get(i):
            k, v = cross_cache.layers[i].keys, cross_cache.layers[i].values
        else:
            kv_shape = (batch, -1, heads, head_dim)
            k = attn.k_proj(encoder_hidden_states).view(kv_shape).transpose(1, 2).contiguous()
            v = attn.v_proj(encoder_hidden_states).view(kv_shape).transpose(1, 2).contiguous()
            k, v = cross_cache.update(k, v, i)
            cache.is_updated[i] = True
        out, weights = eager_attention_forward(attn, q, k, v, None, scaling=1.0)
        cross_weights.append(weights)
        hidden = residual + attn.out_proj(out.reshape(batch, length, -1).contiguous())

        residual = hidden
        x = layer.final_layer_norm(hidden)
        hidden = residual + layer.fc2(layer.activation_fn(layer.fc1(x)))
    hidden = decoder.layer_norm(hidden)
    return BaseModelOutputWithPastAndCrossAttentions(
        last_hidden_state=hidden, cache=cache,
        attentions=tuple(self_weights) if output_attentions else None,
        cross_attentions=tuple(cross_weights) if output_attentions else None)


def _new_cache(decoder):
    import copy

    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    config = copy.deepcopy(decoder.config)
    config.num_hidden_layers = config.decoder_layers
    return EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))


def _probe(decoder, forward) -> list[torch.Tensor]:
    """Three generation-like calls (a 3-token prompt, then one token twice) on fixed random
    encoder states: last hidden states and cross-attention weights of each."""
    config = decoder.config
    param = next(decoder.parameters())
    gen = torch.Generator().manual_seed(0)
    states = torch.randn(1, 40, config.d_model, generator=gen).to(param.device, param.dtype)
    ids = torch.randint(0, config.vocab_size, (1, 5), generator=gen).to(param.device)
    cache, results = _new_cache(decoder), []
    for start, end in ((0, 3), (3, 4), (4, 5)):
        out = forward(input_ids=ids[:, start:end], encoder_hidden_states=states, cache=cache,
                      use_cache=True, output_attentions=True)
        results.append(out.last_hidden_state)
        results.extend(out.cross_attentions)
    return results


def install(model) -> bool:
    """Switch ``model``'s decoder (``WhisperForConditionalGeneration`` or the decoder-only
    ``WhisperForCausalLM``) to :func:`lean_forward` if its output is bit-identical to the stock
    forward's on a probe. Returns whether it applied."""
    inner = getattr(model, "model", None)
    decoder = getattr(inner, "decoder", None)
    if decoder is None or not hasattr(decoder, "layers") or not _supported():
        return False
    stock = decoder.forward

    def forward(*args, **kwargs):
        if args:  # positional use is not generate()'s: the stock forward knows it
            return stock(*args, **kwargs)
        return lean_forward(decoder, stock, **kwargs)

    config = decoder.config
    implementation = config._attn_implementation
    try:
        # generate() switches the decoder to eager attention for word timestamps (it needs the
        # cross-attention weights): the only setting lean_forward serves
        config._attn_implementation = "eager"
        with torch.inference_mode():
            same = all(torch.equal(a, b) for a, b in zip(_probe(decoder, stock),
                                                          _probe(decoder, forward), strict=True))
    except Exception as error:  # noqa: BLE001 - a decoder this module does not know: keep stock
        logger.info("lean decoder not used: the probe failed (%s)", type(error).__name__)
        return False
    finally:
        config._attn_implementation = implementation
    if not same:
        logger.info("lean decoder not used: its probe output differs from this transformers'")
        return False
    decoder.forward = forward
    return True
