"""The random large-v3 that bench/gpu_run.sh builds on the GPU has large-v3's token ids: what the
speculative decoding, the logits processors and the output projection see there is the real
checkpoint's vocabulary, not the tests' 1,865 ids."""

from __future__ import annotations

from speaker_asr.testing.tiny_models import LARGE_V3, build_whisper, build_whisper_processor


def test_the_full_vocabulary_has_large_v3s_special_token_ids(tmp_path):
    tok = build_whisper_processor(tmp_path, feature_size=128, text_tokens=LARGE_V3["text_tokens"]).tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|startoftranscript|>", "<|en|>",
                                                     "<|transcribe|>", "<|notimestamps|>", "<|0.00|>",
                                                     "<|30.00|>")}
    # openai/whisper-large-v3's tokenizer
    assert ids == {"<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|en|>": 50259,
                   "<|transcribe|>": 50360, "<|notimestamps|>": 50364, "<|0.00|>": 50365,
                   "<|30.00|>": 51865}
    assert len(tok) == 51866
    # the made-up text tokens decode to words
    assert tok.decode([300, 5000]).split() == [tok.convert_ids_to_tokens(300)[1:],
                                               tok.convert_ids_to_tokens(5000)[1:]]


def test_a_model_built_in_half_precision_is_saved_in_it(tmp_path):
    import json

    import torch

    path = build_whisper(tmp_path, d_model=64, text_tokens=300, dtype=torch.float16)
    config = json.loads((path / "config.json").read_text())
    assert config["vocab_size"] == 300 + 1609 and (config.get("dtype") or config.get("torch_dtype")) == "float16"
