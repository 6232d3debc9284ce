"""QUANTIZATION=int8 (int8_weights.py): the decoder's weights as int8, the model in bfloat16.

It changes the output (as faster-whisper's int8 does), so these tests check what a user relies on:
the error of each layer stays within its quantization step, every decoder projection and the
vocabulary projection are int8 while the encoder is not, the endpoint loads and transcribes with
word timestamps (plain, chunked and assisted), and bad combinations fail at load with a message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import SAMPLE_RATE, encode, tiny_settings, tone
from speaker_asr.asr.quantization import Int8Head, Int8Linear, kernel_available, quantize_decoder

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

    settings = tiny_settings(tiny_models, quantization="int8")
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


@pytest.mark.parametrize("seconds,params", [(6.0, {"assisted": False}), (6.0, {"assisted": True}),
                                            (40.0, {"assisted": False})])
def test_int8_transcribes_with_word_timestamps(int8_transcriber, seconds, params):
    from speaker_asr.config import InferenceConfig

    rng = np.random.default_rng(5)
    audio = (tone(seconds, freq=180.0) + 0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE))
             ).astype(np.float32)
    cfg = InferenceConfig.from_request({"language": "en", **params},
                                       int8_transcriber.capabilities(has_diarization=False))
    result = int8_transcriber.transcribe(audio, cfg, word_timestamps=True)
    assert result.assisted == bool(params.get("assisted"))
    assert result.words, "the tiny random model writes tokens until max_new_tokens"
    assert all(0.0 <= w.start <= w.end for w in result.words)


def test_int8_endpoint_answers_with_speakers_and_times(tiny_models):
    from speaker_asr.endpoint import EndpointHandler

    handler = EndpointHandler(settings=tiny_settings(tiny_models, quantization="int8"))
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

    from speaker_asr.config import ModelSettings

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
    with pytest.raises(ValidationError, match="QUANTIZATION=int8 computes in bfloat16"):
        ModelSettings()
    monkeypatch.setenv("TORCH_DTYPE", "bfloat16")
    assert ModelSettings().quantization == "int8"


def test_quantization_is_refused_on_a_gpu_with_a_message(monkeypatch):
    from speaker_asr.config import ModelSettings
    from speaker_asr.asr.transcriber import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    settings = ModelSettings(asr_model="m", quantization="int8")
    with pytest.raises(RuntimeError, match="QUANTIZATION=int8 is a CPU mode.*DEVICE=cpu"):
        resolve_device(settings)
    cpu = ModelSettings(asr_model="m", quantization="int8", device="cpu")
    assert resolve_device(cpu)[1] == torch.bfloat16
