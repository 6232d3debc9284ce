"""int8 Whisper on CPU (the opt-in ``QUANTIZATION=int8``), in one of two forms chosen from the CPU
at load (:func:`choose_int8_path`):

* ``bf16`` -- where the CPU computes bfloat16 natively (AVX512-BF16 or AMX): the decoder's weights
  as int8, the model in bfloat16 (below);
* ``dynamic`` -- everywhere else (AVX2-only CPUs, where torch emulates bfloat16 and that form is
  slower than float32: docs/measurements.md, "QUANTIZATION=int8: its two forms"): the decoder's
  linear layers and the vocabulary projection as int8 with activations quantized to int8 on the
  fly, PyTorch's own dynamic quantization (fbgemm /
  oneDNN int8 kernels, which use AVX2's integer instructions); the encoder and everything else
  float32 (:func:`quantize_dynamic_int8` says why).

Weight-only int8 for Whisper's decoder (the ``bf16`` form):

Why the decoder: at batch 1 every decoding step reads the decoder's linear weights and the
vocabulary projection (51,866 x d_model) from memory, and on CPU that traffic, not arithmetic, sets
the step time. Stored as int8 with one bfloat16 scale per output row, the weights take a quarter of
float32's bytes (half of bfloat16's). The encoder runs once per 30 s window over 1,500 frames: it is
arithmetic-bound, where bfloat16 matrix products are faster than this int8 kernel, so it stays
bfloat16 (the model is loaded in bfloat16).

The kernel is ``torch._weight_int8pack_mm`` (bfloat16 activations, int8 weights, per-row scales),
the CPU kernel torchao's weight-only int8 uses. Unlike the float32 default this changes the
output, as faster-whisper's int8 does: measured WER is in docs/measurements.md ("Speed") and bench/results.md.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

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
        return _refine(super()._project(flat), flat, self)


def _refine(out: torch.Tensor, flat: torch.Tensor, head) -> torch.Tensor:
    """The int8 logits ``out`` of a refined head (:class:`Int8Head`, :class:`DynamicInt8Head`),
    with its ``exact_ids`` and each row's ``refine`` highest other tokens recomputed from the
    full-precision weight in ``flat``'s dtype; in place."""
    out[:, head.exact_ids] = -float("inf")  # out of the text tokens' ranking
    top = out.topk(head.refine, dim=1).indices
    rows = head.weight_ref.detach()[top].to(flat.dtype)  # (n, refine, d)
    out.scatter_(1, top, torch.bmm(rows, flat.unsqueeze(2)).squeeze(2))
    out[:, head.exact_ids] = flat @ head.weight_exact.T
    return out


def _replace_decoder(model, linear, head, refined_head) -> int:
    """Replace every ``nn.Linear`` of ``model``'s decoder by ``linear(layer)`` and the vocabulary
    projection (``proj_out``) by ``refined_head(layer, exact_ids)`` -- ``head(layer)`` when the
    model's generation config does not name Whisper's special tokens -- in place. Works for
    ``WhisperForConditionalGeneration`` and the decoder-only ``WhisperForCausalLM`` (the
    assistant). Returns how many layers were replaced."""
    decoder = getattr(getattr(model, "model", None), "decoder", None)
    if decoder is None:
        raise ValueError(f"{type(model).__name__} has no Whisper decoder (model.model.decoder)")
    replaced = 0
    for module in list(decoder.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, linear(child))
                replaced += 1
    proj = getattr(model, "proj_out", None)
    if isinstance(proj, torch.nn.Linear):
        # the projection shares its weight with the token embedding, which stays for the lookup
        from speaker_asr.patches.whisper import decision_token_ids

        exact_ids = decision_token_ids(model)
        model.proj_out = head(proj) if exact_ids is None else refined_head(proj, exact_ids)
        replaced += 1
    return replaced


def quantize_decoder(model) -> int:
    """Replace the linear layers of ``model``'s decoder and its vocabulary projection
    (``proj_out``) by :class:`Int8Linear` (the projection refined: :class:`Int8Head`), in place.
    Returns how many were replaced."""
    return _replace_decoder(model, Int8Linear, Int8Linear, Int8Head)


# --------------------------------------------------------------------------- which int8 form

INT8_PATHS = {
    "bf16": "int8 decoder weights, bfloat16 model (torch._weight_int8pack_mm)",
    "dynamic": "int8 decoder weights with dynamically quantized int8 activations, float32 encoder "
               "(PyTorch dynamic quantization, {engine} engine)",
}
# oneDNN ISA names (ONEDNN_MAX_CPU_ISA) that leave bfloat16 instructions out
_ONEDNN_WITHOUT_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                        "AVX512_CORE_VNNI")


def native_bfloat16_math() -> tuple[bool, str]:
    """Whether bfloat16 matrix products run natively here, and why (or why not). Besides the CPU's
    own flags (AVX512-BF16 or AMX), it honours the switches that keep torch off those
    instructions: ``ATEN_CPU_CAPABILITY`` below AVX512 and ``ONEDNN_MAX_CPU_ISA`` without bf16."""
    from speaker_asr.patches.whisper import native_bfloat16

    capability = torch.backends.cpu.get_cpu_capability()
    if not native_bfloat16():
        return False, f"this CPU has no bfloat16 instructions (AVX512-BF16/AMX); torch kernels: {capability}"
    if not capability.upper().startswith("AVX512"):
        return False, f"torch runs {capability} kernels here (ATEN_CPU_CAPABILITY), without bfloat16"
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if isa in _ONEDNN_WITHOUT_BF16:
        return False, f"ONEDNN_MAX_CPU_ISA={isa} keeps oneDNN off bfloat16 instructions"
    return True, f"this CPU computes bfloat16 natively (AVX512-BF16/AMX; torch kernels: {capability})"


def dynamic_engine() -> Optional[str]:
    """The quantized engine dynamic int8 runs on (``x86`` picks fbgemm or oneDNN per shape), or None
    when this torch has none."""
    engines = list(torch.backends.quantized.supported_engines)
    for name in ("x86", "fbgemm", "onednn"):
        if name in engines:
            return name
    return None


def choose_int8_path(torch_dtype: Optional[str] = None) -> tuple[str, str]:
    """(``"bf16"`` or ``"dynamic"``, the reason), decided once at load from the CPU: bfloat16
    compute only where the CPU has it natively (or ``TORCH_DTYPE=bfloat16`` asks for it); int8
    with dynamically quantized activations everywhere else, which never emulates bfloat16."""
    engine = dynamic_engine()
    if torch_dtype == "bfloat16" and kernel_available():
        return "bf16", "TORCH_DTYPE=bfloat16 was set"
    if torch_dtype == "float32" and engine is not None:
        return "dynamic", "TORCH_DTYPE=float32 was set"
    native, why = native_bfloat16_math()
    if native and kernel_available():
        return "bf16", why
    if engine is None:
        if kernel_available():
            return "bf16", why + "; but this torch has no quantized engine for the other form"
        raise RuntimeError(f"QUANTIZATION=int8 needs torch's quantized engines or "
                           f"torch._weight_int8pack_mm; torch {torch.__version__} has neither")
    return "dynamic", why + f": int8 activations on the {engine} engine instead of emulated bfloat16"


# --------------------------------------------------------------------------- the dynamic form


def _dynamic_linear(linear: torch.nn.Linear) -> torch.nn.Module:
    """``linear`` as PyTorch's dynamically quantized int8 linear (per-tensor int8 activations,
    per-channel int8 weights; float32 in and out)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    linear.qconfig = per_channel_dynamic_qconfig
    try:
        with warnings.catch_warnings():
            # torch 2.10+ marks its quantized-tensor constructors deprecated; they are what
            # dynamic quantization packs its weights with (docs/reference.md, QUANTIZATION)
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
            return DynamicLinear.from_float(linear)
    finally:
        del linear.qconfig


class DynamicInt8Head(torch.nn.Module):
    """The vocabulary projection as dynamic int8, refined where the choice is made (as
    :class:`Int8Head`, in float32): the logits of the tokens Whisper's processors treat specially
    (``exact_ids``) and of each row's ``refine`` highest other tokens are recomputed from the
    float32 weight, which the token embedding keeps anyway."""

    def __init__(self, linear: torch.nn.Linear, exact_ids: torch.Tensor, refine: int = 8):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight_ref = linear.weight  # shared with the embedding: no copy
        self.refine = min(refine, self.out_features)
        self.rank = _dynamic_linear(_detached_copy(linear))  # int8 ranking of every token
        self.register_buffer("exact_ids", exact_ids.to(torch.long))
        self.register_buffer("weight_exact", linear.weight.detach()[exact_ids].float().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, self.in_features).float().contiguous()
        out = _refine(self.rank(flat), flat, self)
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, dynamic int8, "
                f"top {self.refine} refined in float32")


def _detached_copy(linear: torch.nn.Linear) -> torch.nn.Linear:
    copy = torch.nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    with torch.no_grad():
        copy.weight.copy_(linear.weight.detach().float())
        if linear.bias is not None:
            copy.bias.copy_(linear.bias.detach().float())
    return copy


def quantize_dynamic_int8(model) -> int:
    """Replace every ``nn.Linear`` of ``model``'s decoder by its dynamically quantized int8 form and
    the vocabulary projection by :class:`DynamicInt8Head`; in place, on a float32 model. The
    encoder stays float32: with one activation scale per tensor (and 7-bit activations on the x86
    engine, which keeps AVX2's 16-bit sums from saturating) its outlier activations cost tiny.en
    5 words in 81 on the 30 s sample, where the float32 encoder loses none; int8 x int8 with one
    scale per token (``torch._int_mm``) was accurate on AVX-512 but not exact on AVX2, where oneDNN's
    sums saturate. Returns how many layers were replaced."""
    engine = dynamic_engine()
    if engine is None:
        raise RuntimeError(f"torch {torch.__version__} has no quantized engine for dynamic int8")
    torch.backends.quantized.engine = engine

    def dynamic(layer: torch.nn.Linear) -> torch.nn.Module:
        return _dynamic_linear(_detached_copy(layer))

    return _replace_decoder(model, dynamic, dynamic, DynamicInt8Head)
