"""QUANTIZATION=int8 (asr/quantization.py), in its two forms: the decoder's weights as int8 in a
bfloat16 model (where bfloat16 is native), or dynamic int8 linear layers in a float32 model
(elsewhere; chosen from the CPU at load).

It changes the output (as faster-whisper's int8 does), so these tests check what a user relies on:
the error of each layer stays within its quantization step, every decoder projection and the
vocabulary projection are int8 while the encoder is not, the endpoint loads and transcribes with
word timestamps (plain, chunked and assisted), and bad combinations fail at load with a message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import SAMPLE_RATE, encode, tiny_settings, tone
from speaker_asr.asr.quantization import (DynamicInt8Head, Int8Head, Int8Linear, choose_int8_path,
                                          kernel_available, native_bfloat16_math, quantize_decoder,
                                          quantize_dynamic_int8)

pytestmark = pytest.mark.skipif(not kernel_available(), reason="torch lacks _weight_int8pack_mm")


def test_int8_linear_error_stays_within_the_quantization_step():
    g = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(96, 130)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(130, 96, generator=g) * 0.1)
        linear.weight[3] = 0.0  # an all-zero row must not divide by zero
        linear.bias.copy_(torch.randn(130, generator=g))
    q = Int8Linear(linear)
    assert q.weight_int8.dtype == torch.int8 and q.scale.shape == (130,)
    x = torch.randn(2, 5, 96, generator=g)
    want = linear(x)
    got = q(x)
    assert got.shape == want.shape and got.dtype == x.dtype
    # per output: half a step per weight (|x|_1 * scale / 2), plus bfloat16 roundings
    step = q.scale.float() / 2 * 1.01
    bound = x.abs().sum(-1, keepdim=True) * step + 4 * 2.0 ** -8 * (
        x.norm(dim=-1, keepdim=True) * linear.weight.norm(dim=1) + linear.bias.abs())
    assert ((got - want).abs() <= bound).all()
    assert torch.equal(got[..., 3], q.bias[3].float().expand(2, 5))
    assert q(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_int8_head_picks_what_bfloat16_would_among_near_ties():
    """int8 alone can flip the greedy choice between close tokens; the refined head recomputes
    the special/suppressed tokens and each row's top candidates from the bfloat16 weight."""
    g = torch.Generator().manual_seed(1)
    vocab, d, first_special = 2000, 64, 1900
    linear = torch.nn.Linear(d, vocab, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(vocab, d, generator=g) * 0.05)
        # near-ties: pairs of rows closer than int8 resolves, and a row with one outlier weight
        # (a coarse int8 step for the rest of it)
        for a, b in ((10, 11), (20, 21), (30, 31)):
            linear.weight[b] = linear.weight[a] + 1e-3 * torch.randn(d, generator=g)
        linear.weight[11, 0] = 1.5
    exact_ids = torch.arange(first_special, vocab)
    plain, head = Int8Linear(linear), Int8Head(linear, exact_ids, refine=8)
    x = torch.randn(400, d, generator=g).to(torch.bfloat16)
    x[:200] = (linear.weight[[10, 20, 30, 11] * 50] * 30).to(torch.bfloat16)
    want = torch.nn.functional.linear(x, linear.weight)
    picks_plain, picks_head = plain(x).argmax(-1), head(x).argmax(-1)
    assert torch.equal(picks_head, want.argmax(-1))
    assert not torch.equal(picks_plain, want.argmax(-1)), "the case must flip int8's choice"
    out = head(x)
    # specials as a bfloat16 projection computes them
    assert torch.allclose(out[:, exact_ids].float(), want[:, exact_ids].float(), rtol=1e-2, atol=1e-2)
    assert torch.equal(head(x.reshape(20, 20, d)).reshape(400, vocab), out)


@pytest.fixture(scope="module")
def int8_transcriber(tiny_models):
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

    # the bfloat16 form on any CPU (TORCH_DTYPE=bfloat16 asks for it; emulated where not native)
    settings = tiny_settings(tiny_models, quantization="int8", torch_dtype="bfloat16")
    device, dtype = resolve_device(settings)
    assert (device.type, dtype) == ("cpu", torch.bfloat16)
    return WhisperTranscriber(settings, device, dtype)


def test_int8_decoder_and_vocabulary_projection_encoder_untouched(int8_transcriber):
    for model in (int8_transcriber.model, int8_transcriber.assistant):
        decoder = model.model.decoder
        assert not any(isinstance(m, torch.nn.Linear) for m in decoder.modules())
        assert sum(isinstance(m, Int8Linear) for m in decoder.modules()) > 0
        assert isinstance(model.proj_out, Int8Head)  # refined with Whisper's special tokens
        # the token embedding (tied to the projection in the checkpoint) stays for the lookup
        assert decoder.embed_tokens.weight.dtype == torch.bfloat16
    encoder = int8_transcriber.model.model.encoder
    assert any(isinstance(m, torch.nn.Linear) for m in encoder.modules())
    assert not any(isinstance(m, Int8Linear) for m in encoder.modules())
    assert encoder.layers[0].fc1.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("form", ["int8_transcriber", "dynamic_transcriber"])
@pytest.mark.parametrize("seconds,params", [(6.0, {"assisted": False}), (6.0, {"assisted": True}),
                                            (40.0, {"assisted": False})])
def test_int8_transcribes_with_word_timestamps(request, form, seconds, params):
    """Both int8 forms: plain, assisted and chunked decoding with word times."""
    from speaker_asr.config import InferenceConfig

    transcriber = request.getfixturevalue(form)
    rng = np.random.default_rng(5)
    audio = (tone(seconds, freq=180.0) + 0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE))
             ).astype(np.float32)
    cfg = InferenceConfig.from_request({"language": "en", **params},
                                       transcriber.capabilities(has_diarization=False))
    result = transcriber.transcribe(audio, cfg, word_timestamps=True)
    assert result.assisted.used == bool(params.get("assisted"))
    assert result.words, "the tiny random model writes tokens until max_new_tokens"
    assert all(0.0 <= w.start <= w.end for w in result.words)


def test_int8_endpoint_answers_with_speakers_and_times(tiny_models):
    from speaker_asr.endpoint import EndpointHandler

    handler = EndpointHandler(settings=tiny_settings(tiny_models, quantization="int8"))
    # the form this CPU runs fastest, named with its reason
    native = native_bfloat16_math()[0]
    assert handler.models.asr.quantization["path"] == ("bf16" if native else "dynamic")
    assert handler.models.asr.quantization["reason"]
    audio = np.concatenate([tone(3.0, freq=f) for f in (180.0, 320.0)])
    r = handler({"inputs": encode(audio), "parameters": {"language": "en", "num_speakers": 2}})
    assert r["text"].strip() and r["alignment"] == "word" and abs(r["duration"] - 6.0) < 0.01
    assert "".join(c["text"] for c in r["chunks"]).strip() == r["text"].strip()
    for c in r["chunks"]:
        start, end = c["timestamp"]
        assert 0.0 <= start <= end <= r["duration"] + 1e-6
        assert c["speaker"] in {"SPEAKER_00", "SPEAKER_01", None}


def test_quantize_decoder_needs_a_whisper_decoder():
    with pytest.raises(ValueError, match="no Whisper decoder"):
        quantize_decoder(torch.nn.Linear(4, 4))


def test_quantization_setting_values_and_conflicts(monkeypatch):
    from pydantic import ValidationError

    from speaker_asr.settings import ModelSettings

    for off in ("", "none", "None"):
        monkeypatch.setenv("QUANTIZATION", off)
        assert ModelSettings().quantization is None
    monkeypatch.setenv("QUANTIZATION", "INT8")
    assert ModelSettings().quantization == "int8"
    monkeypatch.setenv("QUANTIZATION", "int4")
    with pytest.raises(ValidationError, match="int8"):
        ModelSettings()
    monkeypatch.setenv("QUANTIZATION", "int8")
    monkeypatch.setenv("TORCH_DTYPE", "float16")
    with pytest.raises(ValidationError, match="QUANTIZATION=int8 computes in bfloat16 or float32"):
        ModelSettings()
    for dtype in ("bfloat16", "float32"):
        monkeypatch.setenv("TORCH_DTYPE", dtype)
        assert ModelSettings().quantization == "int8"


def test_quantization_is_refused_on_a_gpu_with_a_message(monkeypatch):
    from speaker_asr.settings import ModelSettings
    from speaker_asr.asr.transcriber import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    settings = ModelSettings(asr_model="m", quantization="int8")
    with pytest.raises(RuntimeError, match="QUANTIZATION=int8 is a CPU mode.*DEVICE=cpu"):
        resolve_device(settings)
    cpu = ModelSettings(asr_model="m", quantization="int8", device="cpu")
    assert resolve_device(cpu)[1] == (torch.bfloat16 if native_bfloat16_math()[0] else torch.float32)
    for dtype, want in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        forced = ModelSettings(asr_model="m", quantization="int8", device="cpu", torch_dtype=dtype)
        assert resolve_device(forced)[1] == want


# --------------------------------------------------------------------------- the dynamic form


def test_the_int8_form_follows_the_cpu_and_its_isa_switches():
    """bfloat16 compute only where it is native: an AVX2-only CPU (here: torch's and oneDNN's ISA
    switches, as on such a machine) gets the dynamic form, with the reason."""
    import os
    import subprocess
    import sys

    path, reason = choose_int8_path()
    assert path == ("bf16" if native_bfloat16_math()[0] else "dynamic") and reason
    assert choose_int8_path("float32")[0] == "dynamic"
    assert choose_int8_path("bfloat16")[0] == "bf16"
    code = ("from speaker_asr.asr.quantization import choose_int8_path; "
            "import torch; print(torch.backends.cpu.get_cpu_capability()); print(*choose_int8_path(), sep='|')")
    for env in ({"ATEN_CPU_CAPABILITY": "avx2"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=True,
                             capture_output=True, text=True).stdout.splitlines()
        got_path, got_reason = out[-1].split("|", 1)
        assert got_path == "dynamic", out
        assert "bfloat16" in got_reason


def test_dynamic_head_picks_what_float32_would_among_near_ties():
    g = torch.Generator().manual_seed(1)
    vocab, d, first_special = 2000, 64, 1900
    linear = torch.nn.Linear(d, vocab, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(vocab, d, generator=g) * 0.05)
        for a, b in ((10, 11), (20, 21), (30, 31)):
            linear.weight[b] = linear.weight[a] + 1e-3 * torch.randn(d, generator=g)
        linear.weight[11, 0] = 1.5
    exact_ids = torch.arange(first_special, vocab)
    head = DynamicInt8Head(linear, exact_ids, refine=8)
    x = torch.randn(400, d, generator=g)
    x[:200] = linear.weight.detach()[[10, 20, 30, 11] * 50] * 30
    want = linear(x).detach()
    # activations are quantized per call (one scale for the batch, as a decoding step's rows of
    # similar size): the near-tie rows and the random rows each as their own batch
    out = torch.cat([head(x[:200]), head(x[200:])])
    assert torch.equal(out.argmax(-1), want.argmax(-1))
    assert torch.allclose(out[:, exact_ids], want[:, exact_ids], atol=1e-5)
    assert torch.equal(head(x[200:].reshape(10, 20, d)).reshape(200, vocab), out[200:])


@pytest.fixture(scope="module")
def dynamic_transcriber(tiny_models):
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

    settings = tiny_settings(tiny_models, quantization="int8", torch_dtype="float32")
    device, dtype = resolve_device(settings)
    assert dtype == torch.float32
    return WhisperTranscriber(settings, device, dtype)


def test_dynamic_int8_quantizes_the_decoders_and_leaves_the_encoder_float32(dynamic_transcriber):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    assert dynamic_transcriber.quantization["path"] == "dynamic"
    main, assistant = dynamic_transcriber.model, dynamic_transcriber.assistant
    for part in (main.model.decoder, assistant.model.decoder):
        assert not any(type(m) is torch.nn.Linear for m in part.modules())
        assert sum(isinstance(m, DynamicLinear) for m in part.modules()) > 0
    assert isinstance(main.proj_out, DynamicInt8Head) and isinstance(assistant.proj_out, DynamicInt8Head)
    encoder = main.model.encoder
    assert not any(isinstance(m, DynamicLinear) for m in encoder.modules())
    assert encoder.layers[0].fc1.weight.dtype == torch.float32
    assert main.model.decoder.embed_tokens.weight.dtype == torch.float32


def test_quantize_dynamic_needs_a_whisper_decoder():
    with pytest.raises(ValueError, match="no Whisper decoder"):
        quantize_dynamic_int8(torch.nn.Linear(4, 4))
