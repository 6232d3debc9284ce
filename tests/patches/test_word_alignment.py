"""word_alignment.py: word timestamps from the alignment heads of one teacher-forced decoder pass,
not from every layer's attention kept at every decoding step -- the same word times as
transformers' own path, nothing per step kept, and large-v3's shape through the whole handler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import SAMPLE_RATE, b64, encode, tiny_settings, tone
from speaker_asr.patches.word_alignment import _Capture, _item_frames, _rows_frames


def _speech_like(seconds: float, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    audio = tone(seconds, freq=180.0) + 0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE))
    return audio.astype(np.float32)


def _load(settings, without_alignment_patch: bool = False):
    """A transcriber; ``without_alignment_patch``: every other patch as configured, this one
    skipped (the word times then come from transformers' attention output, as before)."""
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device
    from speaker_asr.patches import registry

    if not without_alignment_patch:
        return WhisperTranscriber(settings, *resolve_device(settings))
    with registry.skipping("alignment_heads_only", "skipped by the test"):
        return WhisperTranscriber(settings, *resolve_device(settings))


@pytest.fixture(scope="module")
def pair(tiny_models):
    settings = tiny_settings(tiny_models)
    return {"new": _load(settings), "stock": _load(settings, without_alignment_patch=True)}


def _config(transcriber, **params):
    from speaker_asr.config import InferenceConfig

    return InferenceConfig.from_request({"language": "en", **params},
                                        transcriber.capabilities(has_diarization=False))


def test_the_patch_applies_and_the_reference_is_transformers_path(pair):
    applied = {r.name: r.applied for r in pair["new"].patch_report}
    assert applied["alignment_heads_only"]
    assert not {r.name: r.applied for r in pair["stock"].patch_report}["alignment_heads_only"]


@pytest.mark.parametrize("seconds,params", [
    (6.0, {}),                                               # one window
    (70.0, {"long_form": "chunked", "batch_size": 4}),       # a batch of 4 windows
    (70.0, {"long_form": "chunked", "batch_size": 1}),
    (45.0, {"long_form": "sequential"}),                     # Whisper's own long-form loop
    (6.0, {"prompt": "earlier words"}),                      # a prompt before the window
])
def test_word_times_equal_transformers_attention_path(pair, seconds, params):
    from speaker_asr.compat import transformers_at_least

    audio = _speech_like(seconds)
    new = pair["new"].transcribe(audio, _config(pair["new"], **params), word_timestamps=True)
    stock = pair["stock"].transcribe(audio, _config(pair["stock"], **params), word_timestamps=True)
    assert new.words, "no words: the comparison would be empty"
    if not transformers_at_least("4.52") and new.text != stock.text:
        pytest.skip("transformers 4.51 decoded word-timestamp requests with eager attention (its SDPA "
                    "class falls back to it when asked for the weights); they now decode with SDPA, as "
                    "its plain requests do, and a random model's greedy tokens can differ by that "
                    "rounding (the real models' are identical: test_real_chunked_word_mode_keeps_every_word)")
    assert new.text == stock.text
    assert [(w.text, w.start, w.end) for w in new.words] == [(w.text, w.start, w.end) for w in stock.words]


@pytest.mark.parametrize("batch_size", [1, 4])
def test_word_timestamps_change_no_text_of_chunked_windows(pair, batch_size):
    """Asking for word times must not change what is transcribed (transformers 4.51 lost text of
    chunked windows in word mode, and failed on batches of two or more)."""
    from speaker_asr.compat import transformers_at_least

    if not transformers_at_least("4.52"):
        pytest.skip("transformers 4.51 decodes a word-timestamp request otherwise than a plain one "
                    "(its own code, before and after this project's patches), which a random model's "
                    "text shows; test_real_chunked_word_mode_keeps_every_word checks 4.51 on speech")
    transcriber = pair["new"]
    audio = _speech_like(70.0, seed=4)
    cfg = _config(transcriber, long_form="chunked", batch_size=batch_size, hallucination_filter=False)
    plain = transcriber.transcribe(audio, cfg, word_timestamps=False)
    words = transcriber.transcribe(audio, cfg, word_timestamps=True)
    assert words.text == plain.text and words.words
    assert "".join(w.text for w in words.words).split() == plain.text.split()


def test_assisted_decoding_gets_the_word_times_of_plain_decoding(pair):
    """Greedy assisted decoding writes the same tokens as plain decoding, and the word times come
    from those tokens alone (transformers' attention bookkeeping under assisted decoding moved words
    by up to 8.3 s on real whisper-base)."""
    audio = _speech_like(6.0, seed=9)
    transcriber = pair["new"]
    plain = transcriber.transcribe(audio, _config(transcriber, assisted=False), word_timestamps=True)
    assisted = transcriber.transcribe(audio, _config(transcriber, assisted=True), word_timestamps=True)
    assert assisted.assisted.used and not plain.assisted.used
    assert assisted.text == plain.text and plain.words
    assert assisted.words == plain.words


def test_decoding_keeps_no_attention_scores_or_cache_for_the_timestamps(pair):
    """What transformers kept to the end of the batch for word timestamps -- every step's
    cross-attention of every layer and head, the scores, a copy of the cache -- is not asked for."""
    transcriber = pair["new"]
    model = transcriber.model
    seen = []
    extract = model._extract_token_timestamps

    def spy(outputs, *args, **kwargs):
        seen.append({k for k, v in outputs.items() if v is not None})
        return extract(outputs, *args, **kwargs)

    model._extract_token_timestamps = spy
    try:
        result = transcriber.transcribe(_speech_like(70.0), _config(transcriber, batch_size=4),
                                        word_timestamps=True)
    finally:
        model._extract_token_timestamps = extract
    assert result.words and seen
    for keys in seen:
        assert not keys & {"cross_attentions", "decoder_attentions", "scores", "cache", "past_key_values"}, keys


def test_logprob_threshold_still_reads_the_scores(pair):
    """The scores stay where a request needs them (the log-probability fallback)."""
    audio = _speech_like(6.0)
    new = pair["new"].transcribe(audio, _config(pair["new"], logprob_threshold=-1.0), word_timestamps=True)
    stock = pair["stock"].transcribe(audio, _config(pair["stock"], logprob_threshold=-1.0),
                                     word_timestamps=True)
    assert new.text == stock.text and new.words == stock.words


def test_attention_is_fixed_at_load_and_no_request_changes_it(pair):
    from speaker_asr.compat import transformers_major

    model = pair["new"].model.model
    before = (model.encoder.layers[0].self_attn.config._attn_implementation,
              model.decoder.layers[0].encoder_attn.config._attn_implementation)
    pair["new"].transcribe(_speech_like(4.0), _config(pair["new"]), word_timestamps=True)
    after = (model.encoder.layers[0].self_attn.config._attn_implementation,
             model.decoder.layers[0].encoder_attn.config._attn_implementation)
    assert before == after
    assert after[0] == "sdpa"
    if transformers_major() >= 5:
        # the CPU keeps eager decoder attention (what lean_decoder serves); a GPU gets SDPA
        assert after[1] == "eager"


def test_frame_counts_follow_the_rows_being_decoded():
    """transformers passes one frame count per window it started with; a window continued from
    its last timestamp (4.51 neither subtracted its seek nor selected its row) or a temperature
    fallback of some rows must crop each row's attention by its own count."""
    capture = _Capture()
    assert _rows_frames(None, capture, 2, True) is None
    assert _rows_frames(3000, capture, 2, True) == 3000
    assert list(_rows_frames([3000, 2946], capture, 2, False)) == [3000, 2946]
    # 4.51: rows 0 and 2 still decoding, row 0 from frame 1200
    capture.seek, capture.batch_idx_map = np.array([1200, 3000, 0]), [0, 2]
    assert list(_rows_frames([3000, 3000, 1000], capture, 2, True)) == [1800, 1000]
    # a fallback re-decodes row 1 of 3: found by its encoder input
    capture = _Capture()
    batch = torch.arange(3 * 4 * 5, dtype=torch.float32).reshape(3, 4, 5)
    capture.earlier_inputs[3] = batch
    capture.encoder_inputs = batch[1:2].clone()
    assert list(_rows_frames(torch.tensor([3000, 2000, 1000]), capture, 1, False)) == [2000]
    capture.encoder_inputs = torch.zeros(1, 4, 5)  # not among them: no crop rather than a wrong one
    assert _rows_frames([3000, 2000, 1000], capture, 1, False) is None
    frames = np.array([3000, 2000])
    assert list(_item_frames(frames, 1)) == [2000] and _item_frames(None, 0) is None


@pytest.fixture(scope="module")
def large_v3_shaped(tmp_path_factory):
    from speaker_asr.testing.tiny_models import build_large_v3_shaped

    return build_large_v3_shaped(tmp_path_factory.mktemp("large-v3-shaped"))


def test_large_v3_shaped_models_through_the_handler(large_v3_shaped, tiny_models):
    """128 mel bins, 32 decoder layers x 20 heads with large-v3's alignment heads, and a 2-layer
    distil-large-v3-shaped assistant sharing the encoder: diarized requests (word timestamps) in
    chunked batches, Whisper's sequential long-form and assisted decoding, through the handler."""
    from speaker_asr.endpoint import EndpointHandler

    handler = EndpointHandler(settings=tiny_settings(
        tiny_models, asr_model=str(large_v3_shaped["whisper"]),
        assistant_model=str(large_v3_shaped["assistant"])))
    report = {r.name: r for r in handler.models.asr.patch_report if r.target == "whisper"}
    assert report["alignment_heads_only"].applied
    assert handler.models.asr.model.config.num_mel_bins == 128
    long_audio = b64(encode(_speech_like(45.0)))
    short_audio = b64(encode(_speech_like(8.0)))
    for audio, params in ((long_audio, {"long_form": "chunked", "batch_size": 2}),
                          (long_audio, {"long_form": "sequential"}),
                          (short_audio, {"assisted": True})):
        response = handler({"inputs": audio, "parameters": {
            "language": "en", "return_word_timestamps": True, **params}})
        duration = response["duration"]
        assert response["alignment"] == "word", params
        words = [w for chunk in response["chunks"] for w in chunk["words"]]
        assert words, (params, response)
        for word in words:
            assert 0 <= word["start"] <= word["end"] <= duration + 0.02, (params, word)
            assert "speaker" in word


def test_word_times_with_the_decoder_on_sdpa_as_on_a_gpu(tiny_models):
    """On a GPU the decoder keeps SDPA attention (no weights) and the teacher-forced pass runs on
    the whole batch at once: the same word times as the CPU's eager decoder."""
    from speaker_asr.compat import transformers_major

    settings = tiny_settings(tiny_models)
    cpu, gpu_like = _load(settings), _load(settings)
    decoder = gpu_like.model.model.decoder
    # what own_decoder_attention picks on a GPU, in the decoder's own config (transformers 4.51
    # built SDPA attention classes at load and decodes with them already)
    own = decoder.config
    if transformers_major() >= 5:
        assert own is not gpu_like.model.model.config
        assert decoder.layers[0].encoder_attn.config is own
    own._attn_implementation = "sdpa"
    from speaker_asr.patches.word_alignment import _rows_per_pass

    assert _rows_per_pass(gpu_like.model, 100, 1500) > 1000
    audio = _speech_like(70.0, seed=6)
    cfg = _config(cpu, long_form="chunked", batch_size=4)
    a = cpu.transcribe(audio, cfg, word_timestamps=True)
    b = gpu_like.transcribe(audio, cfg, word_timestamps=True)
    assert a.words and a.text == b.text
    assert [(w.start, w.end) for w in a.words] == [(w.start, w.end) for w in b.words]


def _sharpen_alignment_heads(model, factor: float) -> None:
    """Scale the keys of the alignment heads' layers: each token's attention peaks on a few
    frames and leaves the others below float16's smallest number (6e-8), as trained alignment
    heads over 1500 frames do (the tiny random model's are nearly uniform)."""
    from speaker_asr.patches.word_alignment import _layer_heads

    with torch.no_grad():
        for layer in _layer_heads(model.generation_config.alignment_heads):
            model.model.decoder.layers[layer].encoder_attn.k_proj.weight.mul_(factor)


def test_float16_word_times_are_float32s_with_peaked_alignment_heads(tiny_models, monkeypatch):
    """float16 is the GPU's dtype; here on the CPU (torch runs Whisper in float16 there too). With
    the alignment weights' softmax in float16, frames no token attends to above 6e-8 were all
    zeros, transformers' normalisation divided them by a deviation of 0 (NaN), and the time
    warping put every word at -0.02 s; the weights are float32 now, and the words are timed as
    in a float32 model."""
    import math

    from speaker_asr.patches import word_alignment

    seen = []
    stock_weights = word_alignment.alignment_weights

    def spy(*args, **kwargs):
        for item in stock_weights(*args, **kwargs):
            # transformers' normalisation: each frame's deviation over the tokens
            seen.append((item.dtype, bool((item.std(dim=-2, unbiased=False) > 0).all())))
            yield item

    monkeypatch.setattr(word_alignment, "alignment_weights", spy)
    audio = _speech_like(6.0)
    words = {}
    for dtype in ("float32", "float16"):
        transcriber = _load(tiny_settings(tiny_models, torch_dtype=dtype, device="cpu"))
        assert transcriber.model.dtype == getattr(torch, dtype)
        _sharpen_alignment_heads(transcriber.model, 1500.0)
        result = transcriber.transcribe(audio, _config(transcriber, assisted=False), word_timestamps=True)
        assert result.words, dtype
        words[dtype] = [(w.text, w.start, w.end) for w in result.words]
    for text, start, end in words["float16"]:
        assert math.isfinite(start) and math.isfinite(end) and 0.0 <= start <= end, words["float16"]
    assert [t for t, _, _ in words["float16"]] == [t for t, _, _ in words["float32"]]
    for (_, start16, end16), (_, start32, end32) in zip(words["float16"], words["float32"]):
        assert abs(start16 - start32) <= 0.1 and abs(end16 - end32) <= 0.1, words
    assert seen and all(dtype == torch.float32 and every_frame_varies for dtype, every_frame_varies in seen)


@pytest.mark.real
def test_real_chunked_word_mode_keeps_every_word():
    """Real whisper-base on the five LibriVox clips twice (49 s, 3 chunked windows): word mode
    writes every word plain decoding writes -- transformers 4.51 lost half of them (67 of 134) and
    failed at batch >= 2, and one pass per window lost the last 5.7 s (transformers >= 4.52)."""
    import glob
    import subprocess

    from helpers import REAL_MODELS
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device
    from speaker_asr.config import InferenceConfig
    from speaker_asr.settings import ModelSettings

    model = REAL_MODELS / "whisper-base"
    clips = sorted(glob.glob(str(REAL_MODELS / "audio" / "librivox" / "*.wav")))
    if not model.exists() or not clips:
        pytest.skip(f"real models not built: {model} (run ../shared/real-models/build.sh)")

    def load(path):
        raw = subprocess.run(["ffmpeg", "-v", "quiet", "-i", path, "-f", "f32le", "-ac", "1", "-ar",
                              "16000", "-"], capture_output=True, check=True).stdout
        return np.frombuffer(raw, np.float32)

    audio = np.concatenate([load(c) for c in clips] * 2)
    settings = ModelSettings(asr_model=str(model), assistant_model="", diarization_model="")
    transcriber = WhisperTranscriber(settings, *resolve_device(settings))
    # one batch of all three windows (4.51 failed on batches of two or more)
    cfg = InferenceConfig(long_form="chunked", batch_size=8, hallucination_filter=False)
    plain = transcriber.transcribe(audio, cfg, word_timestamps=False)
    words = transcriber.transcribe(audio, cfg, word_timestamps=True)
    assert len(plain.text.split()) == 134
    assert len(words.text.split()) == 134
    assert words.text.rstrip().endswith("amiable himself.")
    # (4.51 leaves the last word of a window without an end time; the response fills it in)
    assert all(0 <= w.start <= (w.end if w.end is not None else w.start) <= 49.5 for w in words.words)
