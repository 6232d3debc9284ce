"""lean_decoder: the decoder step without transformers' per-call machinery must give exactly the
stock decoder's numbers (hidden states, attention weights, cache) in every call generate() makes,
hand every other call to the stock forward, and refuse to switch when its probe differs."""

from __future__ import annotations

import pytest
import torch

from speaker_asr.patches import lean_decoder


@pytest.fixture()
def whisper(tiny_models):
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(str(tiny_models["whisper"])).eval()


def _needs_v5():
    if not lean_decoder._supported():
        pytest.skip("transformers 4.5x: the stock decoder stays (lean_decoder needs cache layers)")


def _steps(decoder, forward, states, ids, attention_mask=None):
    """A prompt then single tokens, as generate() feeds them; every output and the cache."""
    cache = lean_decoder._new_cache(decoder)
    seen = []
    for start, end in ((0, 4), (4, 5), (5, 6), (6, 7)):
        kwargs = {}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask[:, :end]
        out = forward(input_ids=ids[:, start:end], encoder_hidden_states=states, cache=cache,
                      use_cache=True, output_attentions=True, **kwargs)
        seen += [out.last_hidden_state, *out.attentions, *out.cross_attentions]
    for layer in (*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers):
        seen += [layer.keys, layer.values]
    return seen


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [False, True])
def test_lean_forward_equals_stock_bit_for_bit(whisper, attention, padded):
    _needs_v5()
    decoder = whisper.model.decoder
    stock = decoder.forward
    assert lean_decoder.install(whisper)
    lean = decoder.forward
    assert lean is not stock
    config = decoder.config
    gen = torch.Generator().manual_seed(1)
    batch = 2
    states = torch.randn(batch, 1500, config.d_model, generator=gen)
    ids = torch.randint(0, config.vocab_size, (batch, 7), generator=gen)
    mask = torch.ones(batch, 7, dtype=torch.long)
    mask[1, 0] = 0  # a left-padded row: the stock forward's mask handling serves it
    previous = config._attn_implementation
    config._attn_implementation = attention
    try:
        with torch.inference_mode():
            want = _steps(decoder, stock, states, ids, mask if padded else None)
            got = _steps(decoder, lean, states, ids, mask if padded else None)
    finally:
        config._attn_implementation = previous
    assert len(want) == len(got) > 0
    assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(want, got))


def test_lean_forward_is_what_runs_for_word_timestamps(whisper, monkeypatch):
    _needs_v5()
    decoder = whisper.model.decoder
    assert lean_decoder.install(whisper)
    served = []
    real = lean_decoder.lean_forward

    def spy(dec, stock, **kwargs):
        calls = []

        def counted_stock(**kw):
            calls.append(1)
            return stock(**kw)

        out = real(dec, counted_stock, **kwargs)
        served.append(not calls)
        return out

    monkeypatch.setattr(lean_decoder, "lean_forward", spy)
    features = torch.randn(1, whisper.config.num_mel_bins, 3000, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        whisper.generate(features, language="en", return_timestamps=True, return_token_timestamps=True,
                         max_new_tokens=6, num_beams=1, do_sample=False)
    assert served and all(served)  # every decoding step took the lean path


def test_install_keeps_stock_when_the_probe_differs(whisper, monkeypatch):
    _needs_v5()
    decoder = whisper.model.decoder
    stock = decoder.forward
    real = lean_decoder.lean_forward

    def off_by_a_little(*args, **kwargs):
        out = real(*args, **kwargs)
        out.last_hidden_state = out.last_hidden_state + 1e-6
        return out

    monkeypatch.setattr(lean_decoder, "lean_forward", off_by_a_little)
    assert lean_decoder.install(whisper) is False
    assert decoder.forward == stock
    assert decoder.config._attn_implementation == whisper.config._attn_implementation


def test_transformers_4_keeps_the_stock_decoder(whisper, monkeypatch):
    monkeypatch.setattr(lean_decoder, "_supported", lambda: False)
    stock = whisper.model.decoder.forward
    assert lean_decoder.install(whisper) is False
    assert whisper.model.decoder.forward == stock
