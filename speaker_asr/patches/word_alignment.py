"""Word timestamps from the alignment heads only, instead of every layer's attention at every step.

For word timestamps transformers' Whisper ``generate()`` asks for the cross-attention weights of
every decoder layer and head at every decoding step (and for the scores, and on short-form input
copies the whole key/value cache to the CPU once per batch item), keeps all of it to the end of
the batch, and then uses a handful of heads (the checkpoint's ``alignment_heads``: 10 of 640 for
large-v3) for the dynamic time warping that places each token in time. That memory grows with
layers x heads x batch x tokens x frames: for large-v3's decoder (32 layers x 20 heads) at batch
8 and the 448-token limit, over 1500 frames in float32, up to 12.8 GiB of weights (measured on
a large-v3-shaped model: docs/measurements.md, "Word timestamps: memory").

:func:`install` changes where those weights come from, not what is done with them:

* decoding runs without attention output or scores (``_set_return_outputs``), so the decoder keeps
  its own attention implementation (SDPA on a GPU) and nothing per step is kept;
* the encoder states of the window being decoded are held for the request (a forward hook on the
  encoder; only while a word-timestamp ``generate()`` runs on this thread);
* when ``generate()`` asks for the token timestamps, one teacher-forced decoder pass over the
  generated tokens (the decoder input, all but the last token -- exactly the queries the stock
  steps attended from) computes the alignment heads' cross-attention: query and key projections of
  the alignment heads only, in the layers that have them, and the pass stops after the deepest of
  those layers. The weights are ``softmax(q k^T)`` with q scaled as Whisper's attention scales it,
  the same arithmetic as its eager attention, except that the product and the softmax run in
  float32 whatever the model's dtype (:func:`alignment_weights`);
* each batch item then goes through transformers' own ``_extract_token_timestamps`` (its
  normalisation, median filter, dynamic time warping and timestamp layout, which differ between
  releases), fed a cross-attention tuple that holds only that item's alignment heads. Memory: the
  alignment heads of one item at a time (heads x tokens x 1500 frames), never the batch's
  layers x heads;
* the per-item copy of the key/value cache that ``_postprocess_outputs`` makes for the segment
  results (nothing in the pipeline reads it) is left out.

Word times equal the stock ones up to float rounding of the attention (the teacher-forced pass
multiplies the same numbers in a different blocking); ``tests/patches/test_word_alignment.py``
compares them with transformers' own path.
"""

from __future__ import annotations

import copy
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch

from speaker_asr.patches.scope import RequestScope

# bytes of attention weights one teacher-forced pass may materialise per layer where the decoder
# runs eager attention (its softmax(q k^T) for all heads is built, then dropped, in every layer)
EAGER_PASS_BUDGET = 64 * 2 ** 20


@dataclass
class _Capture:
    """What one word-timestamp ``generate()`` call holds on its thread."""

    encoder_states: Optional[torch.Tensor] = None
    encoder_inputs: Optional[torch.Tensor] = None
    # the encoder inputs of earlier calls, by batch size: a temperature fallback re-decodes a
    # subset of the rows, whose per-row frame counts are found by matching them here
    earlier_inputs: dict = field(default_factory=dict)
    # during a teacher-forced pass: layer index -> (query, key) of its alignment heads
    queries_keys: dict = field(default_factory=dict)
    in_pass: bool = False
    # the long-form loop's position: each original row's seek (frames), the rows still decoding
    seek: Any = None
    batch_idx_map: Any = None


CAPTURE = RequestScope(None)


class _DeepestLayerDone(Exception):
    """Raised by the capture hook of the deepest alignment layer: the rest of the pass is not
    needed (later layers and the output projection do not affect these weights)."""


def _layer_heads(alignment_heads) -> dict[int, list[int]]:
    heads: dict[int, list[int]] = {}
    for layer, head in alignment_heads:
        heads.setdefault(int(layer), []).append(int(head))
    return heads


def _select_heads(states: torch.Tensor, num_heads: int, heads: list[int]) -> torch.Tensor:
    """(batch, length, num_heads * head_dim) -> (batch, len(heads), length, head_dim)."""
    batch, length, _ = states.shape
    return states.view(batch, length, num_heads, -1)[:, :, heads].transpose(1, 2)


def _install_hooks(model, alignment_heads) -> bool:
    decoder = model.model.decoder
    heads = _layer_heads(alignment_heads)
    if not heads or max(heads) >= len(decoder.layers):
        return False
    deepest = max(heads)

    def encoder_hook(module, args, kwargs, output):
        capture = CAPTURE.get()
        if capture is not None:
            states = output[0] if isinstance(output, (tuple, list)) else output.last_hidden_state
            capture.encoder_states = states
            inputs = args[0] if args else kwargs.get("input_features")
            if isinstance(inputs, torch.Tensor):
                capture.encoder_inputs = inputs
                capture.earlier_inputs[inputs.shape[0]] = inputs

    def make_layer_hook(index: int, wanted: list[int]):
        def hook(module, args, kwargs):
            capture = CAPTURE.get()
            if capture is None or not capture.in_pass:
                return None
            hidden = args[0] if args else kwargs["hidden_states"]
            states = kwargs.get("key_value_states")
            num_heads = module.num_heads
            q = _select_heads(module.q_proj(hidden) * module.scaling, num_heads, wanted)
            k = _select_heads(module.k_proj(states), num_heads, wanted)
            capture.queries_keys[index] = (q, k)
            if index == deepest:
                raise _DeepestLayerDone
            return None

        return hook

    model.model.encoder.register_forward_hook(encoder_hook, with_kwargs=True)
    for index, wanted in heads.items():
        decoder.layers[index].encoder_attn.register_forward_pre_hook(
            make_layer_hook(index, wanted), with_kwargs=True)
    return True


def _rows_per_pass(model, length: int, frames: int) -> int:
    """Batch rows per teacher-forced pass: all of them where the decoder does not build attention
    weights (SDPA), else as many as keep one layer's weights within EAGER_PASS_BUDGET."""
    config = model.model.decoder.config
    if getattr(config, "_attn_implementation", "eager") not in ("eager", None):
        return 1 << 30
    itemsize = torch.finfo(model.dtype).bits // 8 if model.dtype.is_floating_point else 4
    per_row = config.decoder_attention_heads * length * max(frames, length) * itemsize
    return max(1, EAGER_PASS_BUDGET // max(per_row, 1))


def alignment_weights(model, sequences: torch.Tensor, encoder_states: torch.Tensor,
                      alignment_heads) -> Iterator[torch.Tensor]:
    """Per batch item, the cross-attention weights of ``alignment_heads`` (in their order) for
    the decoder input ``sequences[:, :-1]``: (heads, tokens, frames) float32 tensors, one item at
    a time (the teacher-forced passes run first; only the alignment heads' queries and keys of the
    whole batch are held, never the weights of more than one item).

    float32 whatever the model's dtype: transformers' ``_extract_token_timestamps`` normalises
    the weights in their own dtype (each frame's mean and standard deviation over the tokens,
    4.51 and 5.x alike), and in float16 (the GPU's dtype) a frame that every token attends to
    with less than float16's smallest number (6e-8: a peaked head over 1500 frames) is all zeros,
    its deviation 0 and its normalised column NaN -- the time warping then follows no path and
    puts every word at -0.02 s. The queries and keys stay in the model's dtype (as its
    attention computes them); only their product and the softmax are float32 (for a float32
    model that is the model's own arithmetic)."""
    capture = CAPTURE.get()
    decoder = model.model.decoder
    inputs = sequences[:, :-1]
    rows = _rows_per_pass(model, inputs.shape[1], encoder_states.shape[1])
    per_layer: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    capture.in_pass = True
    try:
        for start in range(0, inputs.shape[0], rows):
            capture.queries_keys = {}
            try:
                decoder(input_ids=inputs[start:start + rows],
                        encoder_hidden_states=encoder_states[start:start + rows], use_cache=False)
            except _DeepestLayerDone:
                pass
            for index, qk in capture.queries_keys.items():
                per_layer.setdefault(index, []).append(qk)
    finally:
        capture.in_pass = False
        capture.queries_keys = {}
    queries = {i: torch.cat([q for q, _ in parts]) for i, parts in per_layer.items()}
    keys = {i: torch.cat([k for _, k in parts]) for i, parts in per_layer.items()}
    order = _layer_heads(alignment_heads)
    # (layer, position of the head among that layer's captured heads), in alignment_heads' order
    where = [(int(layer), order[int(layer)].index(int(head))) for layer, head in alignment_heads]
    for b in range(inputs.shape[0]):
        yield torch.stack([torch.softmax(torch.matmul(queries[layer][b, position].float(),
                                                      keys[layer][b, position].float().transpose(0, 1)),
                                         dim=-1)
                           for layer, position in where])


class _Outputs(dict):
    """The part of a generate output that ``_extract_token_timestamps`` reads, for one item."""

    __getattr__ = dict.__getitem__


def _rows_frames(num_frames, capture: _Capture, rows: int, adjust_seek: bool):
    """``num_frames`` (audio frames per row, which crop the attention before the warping) for the
    ``rows`` being decoded, as a numpy array, or None (no crop) where they cannot be told.

    transformers passes one count per window of the batch it started with. 4.57/5.x subtract
    each row's seek and select the rows still decoding; 4.51 does neither (``adjust_seek``), and
    then failed with an IndexError as soon as a window was continued from its last timestamp in a
    batch of two or more -- that adjustment is made here. When a temperature fallback re-decodes
    only some rows, they are found by matching their encoder input to the batch's."""
    import numpy as np

    if not _per_row(num_frames):
        return num_frames
    frames = np.asarray(num_frames.cpu() if isinstance(num_frames, torch.Tensor) else num_frames)
    if adjust_seek and capture.seek is not None:
        frames = (frames - capture.seek)[capture.batch_idx_map]
    if len(frames) == rows:
        return frames
    full = capture.earlier_inputs.get(len(frames))
    current = capture.encoder_inputs
    if full is None or current is None or current.shape[0] != rows:
        return None
    index = []
    for row in current:
        matches = [i for i in range(full.shape[0]) if torch.equal(full[i], row)]
        if not matches:
            return None
        index.append(matches[0])
    return frames[index]


def _per_row(num_frames) -> bool:
    """Whether ``num_frames`` holds one count per row (else None or one count for all)."""
    return not (num_frames is None or isinstance(num_frames, int)
                or (isinstance(num_frames, torch.Tensor) and num_frames.dim() == 0))


def _item_frames(num_frames, b: int):
    return num_frames[b:b + 1] if _per_row(num_frames) else num_frames


def install(model) -> Optional[str]:
    """Switch ``model``'s word timestamps to the alignment heads only. Returns None when it
    applied, else why not."""
    gen = getattr(model, "generation_config", None)
    alignment_heads = getattr(gen, "alignment_heads", None)
    if not alignment_heads:
        return "the model has no alignment heads: no word timestamps"
    needed = ("_set_return_outputs", "_extract_token_timestamps", "_postprocess_outputs",
              "_get_input_segment", "generate")
    missing = [name for name in needed if not hasattr(model, name)]
    if missing:
        return f"transformers' Whisper generate has no {', '.join(missing)}"
    decoder = getattr(getattr(model, "model", None), "decoder", None)
    layers = getattr(decoder, "layers", None)
    if layers is None or not all(hasattr(layer.encoder_attn, name) for layer in layers
                                 for name in ("q_proj", "k_proj", "num_heads", "scaling")):
        return "the decoder's cross-attention is not transformers' WhisperAttention"
    if not _install_hooks(model, alignment_heads):
        return "the alignment heads name a layer the decoder does not have"

    stock_generate = model.generate
    stock_set_return = model._set_return_outputs
    stock_extract = model._extract_token_timestamps  # fast_dtw's, when it applied
    stock_postprocess = model._postprocess_outputs
    stock_segment = model._get_input_segment
    # 4.51's _postprocess_outputs neither subtracts the seek nor selects the rows
    adjust_seek = "seek" not in inspect.signature(stock_postprocess).parameters

    def get_input_segment(*args, **kwargs):
        capture = CAPTURE.get()
        if capture is not None:
            names = ("input_features", "seek", "seek_num_frames", "num_segment_frames", "cur_bsz",
                     "batch_idx_map")
            given = {**dict(zip(names, args)), **kwargs}
            seek, rows = given.get("seek"), given.get("batch_idx_map")
            if isinstance(seek, torch.Tensor) and rows is not None:
                capture.seek = seek.cpu().numpy().copy()
                capture.batch_idx_map = list(rows)
        return stock_segment(*args, **kwargs)

    @functools.wraps(stock_generate)
    def generate(*args, **kwargs):
        if not kwargs.get("return_token_timestamps"):
            return stock_generate(*args, **kwargs)
        with CAPTURE.set(_Capture()):
            return stock_generate(*args, **kwargs)

    def set_return_outputs(return_dict_in_generate, return_token_timestamps, logprob_threshold,
                           generation_config):
        attentions = getattr(generation_config, "output_attentions", False)
        scores = getattr(generation_config, "output_scores", False)
        result = stock_set_return(return_dict_in_generate, return_token_timestamps,
                                  logprob_threshold, generation_config)
        if return_token_timestamps and CAPTURE.get() is not None:
            # what stock adds for the timestamps only: every step's attention and scores
            generation_config.output_attentions = attentions
            generation_config.output_scores = scores or logprob_threshold is not None
        return result

    def postprocess_outputs(*args, **kwargs):
        outputs = kwargs.get("seek_outputs", args[0] if args else None)
        if CAPTURE.get() is not None and isinstance(outputs, dict):
            dropped = {k: v for k, v in outputs.items() if k not in ("cache", "past_key_values")}
            if len(dropped) != len(outputs):
                outputs = type(outputs)(**dropped)
                if "seek_outputs" in kwargs:
                    kwargs["seek_outputs"] = outputs
                else:
                    args = (outputs, *args[1:])
        return stock_postprocess(*args, **kwargs)

    def extract_token_timestamps(generate_outputs, alignment_heads, time_precision=0.02,
                                 num_frames=None, num_input_ids=None, **kwargs: Any):
        capture = CAPTURE.get()
        attentions = generate_outputs.get("cross_attentions")
        if capture is None or attentions or capture.encoder_states is None:
            return stock_extract(generate_outputs, alignment_heads, time_precision=time_precision,
                                 num_frames=num_frames, num_input_ids=num_input_ids, **kwargs)
        sequences = generate_outputs["sequences"]
        states = capture.encoder_states
        if states.shape[0] != sequences.shape[0]:
            raise RuntimeError(f"word timestamps: {sequences.shape[0]} sequences but encoder states "
                               f"for {states.shape[0]} windows")
        weights = alignment_weights(model, sequences, states, alignment_heads)
        num_frames = _rows_frames(num_frames, capture, sequences.shape[0], adjust_seek)
        count = model.config.decoder_layers
        rows = []
        for b, item in enumerate(weights):
            # one "step" whose layer 0 holds this item's alignment heads in order; the other layers
            # are empty (only the listed heads are read)
            tokens = item.shape[1]
            empty = item.new_empty((1, 0, tokens, 0))
            layers = (item[None],) + (empty,) * (count - 1)
            one = _Outputs(sequences=sequences[b:b + 1], cross_attentions=(layers,))
            rows.append(stock_extract(one, [(0, h) for h in range(item.shape[0])],
                                      time_precision=time_precision,
                                      num_frames=_item_frames(num_frames, b),
                                      num_input_ids=num_input_ids, **kwargs))
        return torch.cat(rows)

    model.generate = generate
    model._set_return_outputs = set_return_outputs
    model._postprocess_outputs = postprocess_outputs
    model._get_input_segment = get_input_segment
    model._extract_token_timestamps = extract_token_timestamps
    model._alignment_heads_only = True
    return None


def own_decoder_attention(model) -> Optional[str]:
    """Give the decoder its own config with the attention implementation fixed at load, so that
    ``generate()``'s switch of the shared config to eager for word timestamps (transformers
    4.52+) changes nothing: eager on the CPU (the attention lean_decoder's step serves), SDPA
    elsewhere -- possible only because word timestamps here read no attention weights from
    decoding (:func:`install` applied). Without it, the decoder is switched to eager here once, as
    transformers would at the first word-timestamp request.
    Returns None when it applied, else why not."""
    from transformers.models.whisper import modeling_whisper

    if not hasattr(modeling_whisper, "ALL_ATTENTION_FUNCTIONS"):
        return "transformers 4.51 picks attention classes at build time: nothing switches"
    if not getattr(model.generation_config, "alignment_heads", None):
        return "the model has no alignment heads: no word timestamps, nothing switches"
    inner = model.model
    if getattr(inner.encoder.config, "_attn_implementation", None) == "eager" \
            or inner.encoder.config is inner.config:
        return "the encoder shares the decoder's config (keep_encoder_on_sdpa did not apply)"
    if not getattr(model, "_alignment_heads_only", False):
        inner.config._attn_implementation = "eager"  # the decoder reads every step's weights
        return None
    shared = inner.decoder.config
    own = copy.copy(shared)
    own._attn_implementation = "eager" if model.device.type == "cpu" else "sdpa"
    for module in inner.decoder.modules():
        if getattr(module, "config", None) is shared:
            module.config = own
    return None
