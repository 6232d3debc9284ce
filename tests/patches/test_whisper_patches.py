"""The speed fixes in speaker_asr/patches/whisper.py change nothing a user sees: same tokens, text and word
times as transformers' stock code, in plain, chunked and assisted decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

from helpers import SAMPLE_RATE, tiny_settings, tone
from speaker_asr.patches.whisper import CachedSuppressTokens, CachedSuppressTokensAtBegin


def test_cached_suppress_processors_equal_stock():
    g = torch.Generator().manual_seed(0)
    vocab = 300
    tokens = [1, 5, 17, 299, 300, 1000]  # ids beyond the vocabulary are ignored, like torch.isin
    stock, cached = SuppressTokensLogitsProcessor(tokens), SuppressTokensLogitsProcessor(tokens)
    cached.__class__ = CachedSuppressTokens
    begin_stock = SuppressTokensAtBeginLogitsProcessor([2, 3, 250], begin_index=4)
    begin_cached = SuppressTokensAtBeginLogitsProcessor([2, 3, 250], begin_index=4)
    begin_cached.__class__ = CachedSuppressTokensAtBegin
    for length in (3, 4, 5, 4):
        ids = torch.zeros((2, length), dtype=torch.long)
        scores = torch.randn((2, vocab), generator=g)
        assert torch.equal(stock(ids, scores.clone()), cached(ids, scores.clone()))
        assert torch.equal(begin_stock(ids, scores.clone()), begin_cached(ids, scores.clone()))
    empty, empty_cached = SuppressTokensLogitsProcessor([]), SuppressTokensLogitsProcessor([])
    empty_cached.__class__ = CachedSuppressTokens
    scores = torch.randn((2, vocab), generator=g)
    assert torch.equal(empty(ids, scores.clone()), empty_cached(ids, scores.clone()))
    begin_stock.set_begin_index(6)
    begin_cached.set_begin_index(6)
    ids = torch.zeros((2, 6), dtype=torch.long)
    scores = torch.randn((2, vocab), generator=g)
    out = begin_cached(ids, scores.clone())
    assert torch.equal(begin_stock(ids, scores.clone()), out)
    assert torch.isinf(out[:, [2, 3, 250]]).all()


@pytest.fixture(scope="module")
def transcribers(tiny_models):
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

    from speaker_asr.patches import chunk_windows

    out = {}
    for fast in (True, False):
        settings = tiny_settings(tiny_models, generation_speedups=fast)
        device, dtype = resolve_device(settings)
        out[fast] = WhisperTranscriber(settings, device, dtype)
    # the one patch that changes the output (one pass per chunked window) is on both sides: these
    # tests compare the output-preserving ones (test_chunk_windows.py checks that one)
    chunk_windows.install(out[False].model)
    return out


def _speech_like(seconds: float) -> np.ndarray:
    rng = np.random.default_rng(3)
    audio = tone(seconds, freq=180.0) + 0.05 * rng.standard_normal(int(seconds * SAMPLE_RATE)).astype(np.float32)
    return audio.astype(np.float32)


@pytest.mark.parametrize("seconds,assisted", [(6.0, False), (6.0, True), (40.0, False)])
def test_speedups_keep_output_identical(transcribers, seconds, assisted):
    from speaker_asr.config import InferenceConfig

    audio = _speech_like(seconds)
    caps = transcribers[True].capabilities(has_diarization=False)
    cfg = InferenceConfig.from_request({"language": "en", "assisted": assisted,
                                        "return_word_timestamps": True}, caps)
    results = {}
    for fast, transcriber in transcribers.items():
        # twice: the second request runs after word timestamps switched the attention to eager
        first = transcriber.transcribe(audio, cfg, word_timestamps=True)
        second = transcriber.transcribe(audio, cfg, word_timestamps=True)
        assert first == second
        results[fast] = first
    assert results[True].text == results[False].text
    assert results[True].chunks == results[False].chunks
    assert results[True].words == results[False].words
    assert results[True].words  # the comparison covered word timestamps


def test_encoder_stays_on_sdpa_after_word_timestamps(transcribers):
    from speaker_asr.config import InferenceConfig
    from speaker_asr.compat import transformers_major as _transformers_major

    fast = transcribers[True]
    model = fast.model.model
    if _transformers_major() >= 5:
        # decided at load: the decoder runs eager attention (the cross-attention weights the word
        # times need) before any request, and no request changes it
        assert model.decoder.layers[0].encoder_attn.config._attn_implementation == "eager"
    fast.transcribe(_speech_like(4.0), InferenceConfig(language="en"), word_timestamps=False)
    fast.transcribe(_speech_like(4.0), InferenceConfig(language="en"), word_timestamps=True)
    assert model.encoder.layers[0].self_attn.config._attn_implementation == "sdpa"
    if _transformers_major() >= 5:
        assert model.decoder.layers[0].encoder_attn.config._attn_implementation == "eager"


def test_auto_tries_both_modes_on_one_window_audio_with_identical_output(transcribers):
    from speaker_asr.config import InferenceConfig

    from speaker_asr.asr.assist_policy import AssistPolicy

    transcriber = transcribers[True]
    transcriber.assist_policy = AssistPolicy()  # earlier tests' timings would decide already
    caps = transcriber.capabilities(has_diarization=False)
    audio = _speech_like(5.0)
    auto = InferenceConfig.from_request({"language": "en"}, caps)
    assert auto.assisted == "auto" and auto.assist_eligible(5.0, True)
    results = [transcriber.transcribe(audio, auto, word_timestamps=True) for _ in range(4)]
    assert {r.assisted.used for r in results} == {True, False}
    assert all(r.text == results[0].text and r.words == results[0].words for r in results)
    assert all(v["timings"] >= 2 for v in transcriber.assist_policy.snapshot().values())
    # long audio is never assisted under auto: batched windows
    long = transcriber.transcribe(_speech_like(40.0), auto)
    assert (long.assisted.used, long.assisted.reason) == (False, "audio longer than one window")


def test_cpu_decodes_long_audio_in_batches_of_eight(transcribers):
    from speaker_asr.config import DEFAULT_CPU_BATCH_SIZE

    assert all(t.default_batch_size == DEFAULT_CPU_BATCH_SIZE == 8 for t in transcribers.values())


def test_processor_list_looks_signatures_up_once_per_type(transcribers, monkeypatch):
    import inspect

    from speaker_asr.config import InferenceConfig

    real = inspect.signature
    lookups = []

    from transformers.generation.logits_process import LogitsProcessor

    def counted(fn, *a, **k):
        if isinstance(getattr(fn, "__self__", None), LogitsProcessor):
            lookups.append(fn)
        return real(fn, *a, **k)

    monkeypatch.setattr(inspect, "signature", counted)
    audio = _speech_like(6.0)
    for assisted in (False, True):
        counts = {}
        for fast, transcriber in transcribers.items():
            cfg = InferenceConfig.from_request({"language": "en", "assisted": assisted},
                                               transcriber.capabilities(False))
            transcriber.transcribe(audio, cfg, word_timestamps=True)  # types seen once
            lookups.clear()
            transcriber.transcribe(audio, cfg, word_timestamps=True)
            counts[fast] = len(lookups)
        # stock: every processor at every step; here: once per processor type, then never
        assert counts[False] > 20
        assert counts[True] == 0


def test_signature_cached_list_gives_the_stock_list_result_and_errors():
    from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList

    from speaker_asr.patches.whisper import SignatureCachedProcessorList

    class Scale(LogitsProcessor):
        def __call__(self, input_ids, scores):
            return scores * 2

    class NeedsLength(LogitsProcessor):
        def __call__(self, input_ids, scores, cur_len):
            return scores + cur_len

    ids, scores = torch.zeros(2, 3, dtype=torch.long), torch.randn(2, 10)
    for processors in ([Scale(), Scale()], [Scale(), NeedsLength()]):
        stock, cached = LogitsProcessorList(processors), SignatureCachedProcessorList(processors)
        if any(isinstance(p, NeedsLength) for p in processors):
            assert torch.equal(stock(ids, scores, cur_len=3), cached(ids, scores, cur_len=3))
            with pytest.raises(ValueError, match="required parameters"):
                cached(ids, scores)
        else:
            assert torch.equal(stock(ids, scores), cached(ids, scores))


def test_fast_lm_head_picks_the_float32_greedy_token_under_whisper_masks():
    """The bfloat16-then-exact projection: every token that can be the greedy choice has its
    float32 logit, whatever Whisper's processors mask (suppressed ids, the whole text block, or
    subsets of the special tokens)."""
    from speaker_asr.patches import whisper
    from speaker_asr.patches.whisper import _FastHead

    g = torch.Generator().manual_seed(0)
    vocab, d, first_special = 3000, 96, 2500
    linear = torch.nn.Linear(d, vocab, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(vocab, d, generator=g) * 0.05)
        # near-ties: rows that differ from another row by less than bfloat16 can resolve
        linear.weight[10] = linear.weight[12] * (1 + 1e-4)
    suppressed = [5, 11, 400]
    exact_ids = torch.tensor(sorted(set(range(first_special, vocab)) | set(suppressed)))
    head = _FastHead(linear, exact_ids)
    x = torch.randn(64, 3, d, generator=g) * 3
    x[0, 0] = linear.weight[10] * 40  # a hidden state aligned with the near-tie rows
    fast, stock = head.logits(x), torch.nn.functional.linear(x, linear.weight)
    assert fast.shape == stock.shape
    assert torch.allclose(fast[..., exact_ids], stock[..., exact_ids], rtol=1e-5, atol=1e-5)
    masks = [torch.zeros(vocab, dtype=torch.bool)]
    masks.append(masks[0].clone())
    masks[1][suppressed] = True
    masks.append(masks[1].clone())
    masks[2][:first_special] = True  # timestamps win: all text masked
    masks.append(masks[1].clone())
    masks[3][first_special + 100:] = True  # some timestamps masked
    for mask in masks:
        pick = fast.masked_fill(mask, -float("inf")).argmax(-1)
        want = stock.masked_fill(mask, -float("inf")).argmax(-1)
        assert torch.equal(pick, want)
    # what is not recomputed stays within the bfloat16 error of the float32 logit
    bound = head.factor * x.norm(dim=-1, keepdim=True) * head.max_row_norm
    assert ((fast - stock).abs() <= bound).all()
    with whisper.fast_lm_head_scope(False):  # a request that reads probabilities
        assert torch.equal(head.logits(x), stock)


def test_fast_lm_head_keeps_transcripts_identical_and_is_greedy_only(transcribers, monkeypatch):
    from speaker_asr.config import InferenceConfig
    from speaker_asr.patches import whisper
    from speaker_asr.patches.whisper import fast_lm_head, fast_lm_head_allowed

    fast = transcribers[True]
    # a CPU without native bfloat16 leaves the projection alone: force it on for this check
    if not fast.fast_lm_head:
        assert fast_lm_head(fast.model, require_native_bfloat16=False) is None
        fast.fast_lm_head = True
    state = fast.model.proj_out._fast_head
    scopes = []  # what each decoding step may use: the request's scope, never the model's state
    logits = state.logits

    def spy(x):
        scopes.append(whisper.FAST_HEAD_ALLOWED.get())
        return logits(x)

    monkeypatch.setattr(state, "logits", spy)
    monkeypatch.setattr(fast.model.proj_out, "forward", spy)
    caps = fast.capabilities(has_diarization=False)
    for seconds in (6.0, 40.0):
        audio = _speech_like(seconds)
        cfg = InferenceConfig.from_request({"language": "en"}, caps)
        a = fast.transcribe(audio, cfg, word_timestamps=True)
        assert scopes and all(scopes)
        b = transcribers[False].transcribe(audio, cfg, word_timestamps=True)
        assert (a.text, a.chunks, a.words) == (b.text, b.chunks, b.words)
    scopes.clear()
    fallback = InferenceConfig.from_request({"language": "en", "temperature": [0.0, 0.4]}, caps)
    fast.transcribe(_speech_like(3.0), fallback)
    assert scopes and not any(scopes)  # sampling reads probabilities: the float32 projection runs
    assert whisper.FAST_HEAD_ALLOWED.get()  # nothing left behind
    assert fast_lm_head_allowed({"num_beams": 1, "do_sample": False})
    assert not fast_lm_head_allowed({"do_sample": True, "temperature": 0.5})
    assert not fast_lm_head_allowed({"logprob_threshold": -1.0})


def test_dtw_by_diagonals_gives_transformers_path_exactly():
    """Word timestamps come from this path: same indices as transformers' loop, ties included
    (integer costs make every tie rule matter), on the shapes a window produces and the edges."""
    from transformers.models.whisper import generation_whisper

    from speaker_asr.patches.whisper import dynamic_time_warping

    stock = generation_whisper._dynamic_time_warping
    assert stock is not dynamic_time_warping
    rng = np.random.default_rng(7)
    shapes = [(1, 1), (1, 6), (6, 1), (2, 2), (5, 9), (9, 5), (37, 301), (60, 1500)]
    for shape in shapes:
        for matrix in (rng.standard_normal(shape), rng.integers(-2, 3, shape).astype(np.float64),
                       np.zeros(shape)):
            want, got = stock(-matrix), dynamic_time_warping(-matrix)
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(want, got))


def test_sorting_network_puts_the_median_in_the_middle_for_every_input():
    """0-1 principle: a comparator network that orders all 128 binary inputs of 7 orders every
    input, so position 3 is the median whatever the values."""
    import itertools

    from speaker_asr.patches.whisper import _SORT7

    for bits in itertools.product((0, 1), repeat=7):
        v = list(bits)
        for i, j in _SORT7:
            v[i], v[j] = min(v[i], v[j]), max(v[i], v[j])
        assert v == sorted(bits)


def test_median_filter_equals_transformers_values_exactly():
    from transformers.models.whisper import generation_whisper

    from speaker_asr.patches.whisper import median_filter

    stock = generation_whisper._median_filter
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.randn(1, 8, 40, 1500, generator=gen),
              torch.randn(2, 6, 9, 300, generator=gen).to(torch.bfloat16),
              torch.randint(-2, 3, (1, 4, 7, 50), generator=gen).float(),  # ties everywhere
              torch.randn(3, 5, 20, generator=gen),  # 3-D, as transformers' per-batch path
              torch.randn(1, 2, 3, 3, generator=gen),  # too short to pad: returned as is
              torch.zeros(1, 2, 3, 30)]
    with_inf = torch.randn(1, 2, 5, 40, generator=gen)
    with_inf[0, 0, 1, 3], with_inf[0, 1, 2, 10] = float("inf"), -float("inf")
    with_nan = torch.randn(1, 2, 5, 40, generator=gen)
    with_nan[0, 1, 2, 10] = float("nan")  # sort orders NaN last, min/max would spread it
    for x in inputs + [with_inf, with_nan]:
        want, got = stock(x, 7), median_filter(x, 7, stock)
        assert want.dtype == got.dtype and want.shape == got.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    x = torch.randn(1, 2, 5, 40, generator=gen)
    torch.testing.assert_close(median_filter(x, 5, stock), stock(x, 5), rtol=0, atol=0)


def test_fast_dtw_swaps_only_during_this_models_alignment(transcribers):
    from transformers.models.whisper import generation_whisper

    from speaker_asr.patches.whisper import dynamic_time_warping

    fast = transcribers[True]
    seen = []
    stock = generation_whisper._dynamic_time_warping
    assert stock is not dynamic_time_warping  # outside an alignment the stock loop stays
    stock_median = generation_whisper._median_filter
    real = dynamic_time_warping

    def spy(matrix):
        seen.append(matrix.shape)
        return real(matrix)

    from speaker_asr.patches import whisper as whisper_speedups

    whisper_speedups.dynamic_time_warping = spy
    try:
        from speaker_asr.config import InferenceConfig

        cfg = InferenceConfig.from_request({"language": "en"}, fast.capabilities(False))
        fast.transcribe(_speech_like(5.0), cfg, word_timestamps=True)
    finally:
        whisper_speedups.dynamic_time_warping = real
    assert seen and generation_whisper._dynamic_time_warping is stock
    assert generation_whisper._median_filter is stock_median


def test_a_draft_gives_the_plain_greedy_decode_in_fewer_steps(transcribers):
    """A live utterance's next decode verifies the previous one's tokens (draft_decoding): text,
    segments, word times and tokens stay those of plain greedy decoding, whatever the draft (its
    own tokens, a shorter decode's, nonsense); with GENERATION_SPEEDUPS=false a draft is ignored."""
    from speaker_asr.config import InferenceConfig
    from speaker_asr.patches.draft_decoding import DraftTokens

    fast = transcribers[True]
    cfg = InferenceConfig(language="en", assisted=False)
    audio = _speech_like(6.0)
    first = DraftTokens()
    plain = fast.transcribe(audio, cfg, word_timestamps=True, record=False, draft=first)
    tokens = first.generated
    assert tokens and first.steps == 0  # no draft given: stock greedy decoding, tokens recorded
    shorter = DraftTokens()
    fast.transcribe(audio[: 4 * SAMPLE_RATE], cfg, word_timestamps=True, record=False, draft=shorter)
    vocab = fast.model.config.vocab_size
    nonsense = [tokens[0]] + [(t * 7 + 3) % vocab for t in tokens[1:]]
    for given in (tokens, shorter.generated, nonsense):
        draft = DraftTokens(given=given)
        out = fast.transcribe(audio, cfg, word_timestamps=True, record=False, draft=draft)
        assert (out.text, out.chunks, out.words) == (plain.text, plain.chunks, plain.words)
        assert draft.generated == tokens and draft.steps > 0
    own = DraftTokens(given=tokens)
    fast.transcribe(audio, cfg, word_timestamps=True, record=False, draft=own)
    assert own.steps <= len(tokens) // 10 + 2, (own.steps, len(tokens))
    stock = DraftTokens(given=tokens)
    out = transcribers[False].transcribe(audio, cfg, word_timestamps=True, record=False, draft=stock)
    assert out.text == plain.text and stock.generated is None and stock.steps == 0
    # a decode the assistant drafts keeps its assistant
    assisted = DraftTokens(given=tokens)
    caps = fast.capabilities(has_diarization=False)
    cfg = InferenceConfig.from_request({"language": "en", "assisted": True}, caps)
    out = fast.transcribe(audio, cfg, word_timestamps=True, record=False, draft=assisted)
    assert out.assisted.used and not assisted.verify and assisted.steps == 0
