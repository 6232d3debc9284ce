"""Weight-only int8 for Whisper's decoder on CPU (the opt-in ``QUANTIZATION=int8``).

Why the decoder: at batch 1 every decoding step reads the decoder's linear weights and the
vocabulary projection (51,866 x d_model) from memory, and on CPU that traffic, not arithmetic, sets
the step time. Stored as int8 with one bfloat16 scale per output row, the weights take a quarter of
float32's bytes (half of bfloat16's). The encoder runs once per 30 s window over 1,500 frames: it is
arithmetic-bound, where bfloat16 matrix products are faster than this int8 kernel, so it stays
bfloat16 (the model is loaded in bfloat16).

The kernel is ``torch._weight_int8pack_mm`` (bfloat16 activations, int8 weights, per-row scales),
the CPU kernel torchao's weight-only int8 uses. Unlike the float32 default this changes the
output, as faster-whisper's int8 does: measured WER is in docs/measurements.md ("Speed, measured") and bench/results.md.
"""

from __future__ import annotations

import torch

_INT8_MAX = 127


def kernel_available() -> bool:
    """Whether this torch has the CPU weight-only int8 kernel."""
    return hasattr(torch, "_weight_int8pack_mm")


class Int8Linear(torch.nn.Module):
    """``nn.Linear`` with int8 weights (symmetric, one scale per output row); computes in bfloat16."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        peak = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny)
        scale = (peak / _INT8_MAX).to(torch.bfloat16)
        q = torch.round(weight / scale.float()[:, None]).clamp(-_INT8_MAX, _INT8_MAX)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_int8", q.to(torch.int8).contiguous())
        self.register_buffer("scale", scale)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.bfloat16))

    def _project(self, flat: torch.Tensor) -> torch.Tensor:
        """(n, in_features) bfloat16 -> (n, out_features) bfloat16, without the bias."""
        return torch._weight_int8pack_mm(flat, self.weight_int8, self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        out = self._project(x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous())
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


class Int8Head(Int8Linear):
    """The vocabulary projection in int8, refined where the choice is made: the logits of the
    tokens Whisper's processors treat specially (``exact_ids``: special, timestamp and
    suppressed tokens) and of each row's ``refine`` highest other tokens are recomputed from the
    bfloat16 weight, so greedy decoding picks what a bfloat16 projection would pick unless that
    token is not among int8's top ``refine``. (Measured: int8 alone cost tiny.en a sentence on the
    attribution eval.) The bfloat16 weight is the token embedding's, which the model keeps anyway."""

    def __init__(self, linear: torch.nn.Linear, exact_ids: torch.Tensor, refine: int = 8):
        super().__init__(linear)
        self.weight_ref = linear.weight  # shared with the embedding: no copy
        self.refine = min(refine, self.out_features)
        self.register_buffer("exact_ids", exact_ids.to(torch.long))
        self.register_buffer("weight_exact", linear.weight.detach()[exact_ids].to(torch.bfloat16))

    def _project(self, flat: torch.Tensor) -> torch.Tensor:
        out = super()._project(flat)
        out[:, self.exact_ids] = -float("inf")  # out of the text tokens' ranking
        top = out.topk(self.refine, dim=1).indices
        rows = self.weight_ref.detach()[top].to(torch.bfloat16)  # (n, refine, d)
        out.scatter_(1, top, torch.bmm(rows, flat.unsqueeze(2)).squeeze(2))
        out[:, self.exact_ids] = flat @ self.weight_exact.T
        return out


def quantize_decoder(model) -> int:
    """Replace the linear layers of ``model``'s decoder and its vocabulary projection
    (``proj_out``) by :class:`Int8Linear`, in place. Works for ``WhisperForConditionalGeneration``
    and the decoder-only ``WhisperForCausalLM`` (the assistant). Returns how many were replaced."""
    decoder = getattr(getattr(model, "model", None), "decoder", None)
    if decoder is None:
        raise ValueError(f"{type(model).__name__} has no Whisper decoder (model.model.decoder)")
    replaced = 0
    for module in list(decoder.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, Int8Linear(child))
                replaced += 1
    head = getattr(model, "proj_out", None)
    if isinstance(head, torch.nn.Linear):
        # the projection shares its weight with the token embedding, which stays for the lookup
        from speaker_asr.patches.whisper import decision_token_ids

        exact_ids = decision_token_ids(model)
        model.proj_out = Int8Linear(head) if exact_ids is None else Int8Head(head, exact_ids)
        replaced += 1
    return replaced
