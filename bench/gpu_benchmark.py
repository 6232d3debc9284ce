"""GPU benchmark with random-weight Whisper large-v3 / distil-large-v3 and pyannote.

No hub, no checkpoints: the architectures are built from their shapes with random weights, and
every measurement fixes the number of generated tokens (random weights would otherwise stop at
random places), so the numbers are the cost of the architecture, not of a transcript.
bench/gpu_run.sh runs it on the GPU machine after its preflight (the default sections).

    python bench/gpu_benchmark.py                      # on a GPU: the endpoint sections, about 6 minutes
    python bench/gpu_benchmark.py --full               # and the bare models' sections
    python bench/gpu_benchmark.py --smoke              # tiny shapes; runs on CPU in a minute or two
    python bench/gpu_benchmark.py --sections encoder,decode --compile

Sections (each skipped when the time budget is spent; JSON is rewritten after each):

The endpoint sections (the default) go through ``EndpointHandler`` -- every patch of the registry,
its warm-up at load, requests as WAV bytes -- over random models built on the device in its dtype
(EndpointRig: large-v3 in full, a 2-decoder-layer distil-large-v3-shaped assistant, pyannote's 3.1
layout with WeSpeaker ResNet34):

* bracket  -- the seed's comparison, ASR only: an 8 s and a 60 s clip, plain against assisted,
              the assisted runs bracketed by the model drafting for itself (every draft accepted:
              the upper bound) and the random distil-shaped assistant (nearly none: the lower
              bound); latency (median of 3 after a warm-up) and ms per generated token.
* batch24  -- large-v3 at batch 24 on 10 min: real-time factor, with and without word timestamps.
* together -- on 10 min: the ASR alone, the diarization alone, and both as the endpoint runs
              them, with the diarization on the default CUDA stream and on one of its own.

The bare models' sections (``--full``, or by name):

* encoder  -- encoder ms per 30 s window at batch 1 and throughput at batch 8/16/24.
* decode   -- decoder ms/token at batch 1: a bare KV-cache loop (model cost) and ``generate()``
              (what the endpoint pays, with Whisper's logits processors).
* batch    -- ``generate()`` at batch 8/16/24: windows/s, tokens/s, audio seconds per second.
* static   -- ``generate()`` with a static cache; on CUDA transformers compiles the decoder step
              (torch.compile) automatically -- first call (compile) and steady state. Only with
              --compile (compilation takes minutes for large-v3).
* assisted -- speculative decoding: large-v3 with itself as assistant (every draft token accepted:
              the acceptance upper bound) and with the random distil-large-v3 decoder (nearly none
              accepted: the lower bound), plus the per-call costs and a projection of ms/token at
              acceptance rates 0.6-0.9 for 1-6 draft tokens.
* pyannote -- the speaker-diarization-3.1 pipeline layout with random PyanNet + WeSpeaker
              ResNet34 (speaker_asr/testing/tiny_models.py) on synthetic audio: real-time factor for embedding /
              segmentation batch sizes.

Results: $OUT/gpu_benchmark.json and .md when $OUT is set (the device runner), else bench/results/.
Run from the repository root with the project importable: ``.venv/bin/python`` (``make install``
installs it), or ``PYTHONPATH=$PWD`` where it is not installed (the GPU machine: bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent

SHAPES = {
    # name: d_model, encoder layers, decoder layers, heads, ffn, mel bins, vocab
    "large-v3": dict(d_model=1280, encoder_layers=32, decoder_layers=32, heads=20, ffn=5120,
                     num_mel_bins=128, vocab_size=51866),
    "distil-large-v3": dict(d_model=1280, encoder_layers=32, decoder_layers=2, heads=20, ffn=5120,
                            num_mel_bins=128, vocab_size=51866),
    # --smoke: same code paths, tiny tensors
    "smoke-main": dict(d_model=64, encoder_layers=2, decoder_layers=4, heads=4, ffn=128,
                       num_mel_bins=128, vocab_size=51866),
    "smoke-distil": dict(d_model=64, encoder_layers=2, decoder_layers=1, heads=4, ffn=128,
                         num_mel_bins=128, vocab_size=51866),
}
# what bench/gpu_run.sh measures (the default), then the bare models' sections (--full)
ENDPOINT_SECTIONS = ["bracket", "batch24", "together"]
SECTIONS = ["encoder", "decode", "batch", "static", "assisted", "pyannote"]

# large-v3's special tokens (vocabulary of 51866)
EOT, SOT, EN, TRANSCRIBE, NO_TIMESTAMPS = 50257, 50258, 50259, 50360, 50364


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


def sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, warmup: int = 1, iters: int = 3) -> tuple[float, object]:
    """Median seconds of ``iters`` calls after ``warmup`` calls."""
    out = None
    for _ in range(warmup):
        out = fn()
    sync(device)
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2], out


# --------------------------------------------------------------------------- models


def build_whisper(name: str, device, dtype, attn: str = "sdpa"):
    """A random-weight WhisperForConditionalGeneration with ``name``'s shapes, on ``device``."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    s = SHAPES[name]
    config = WhisperConfig(
        vocab_size=s["vocab_size"], num_mel_bins=s["num_mel_bins"], d_model=s["d_model"],
        encoder_layers=s["encoder_layers"], decoder_layers=s["decoder_layers"],
        encoder_attention_heads=s["heads"], decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"], decoder_ffn_dim=s["ffn"], max_source_positions=1500,
        max_target_positions=448, pad_token_id=EOT, bos_token_id=EOT, eos_token_id=EOT,
        decoder_start_token_id=SOT, suppress_tokens=[], begin_suppress_tokens=[220, EOT],
    )
    config._attn_implementation = attn
    torch.manual_seed(0)
    with torch.device(device):
        model = WhisperForConditionalGeneration(config)
    model = model.to(dtype).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=SOT, eos_token_id=EOT, pad_token_id=EOT, bos_token_id=EOT,
        max_length=448, no_timestamps_token_id=NO_TIMESTAMPS, is_multilingual=False,
        suppress_tokens=[], begin_suppress_tokens=[220, EOT], num_beams=1, do_sample=False,
        alignment_heads=[[s["decoder_layers"] - 1, 0]],
    )
    return model


def causal_lm_from(model, share: bool = True):
    """The decoder of ``model`` as a WhisperForCausalLM assistant (what speaker_asr/asr/transcriber.py loads), sharing
    its modules (no copy)."""
    import copy

    import torch
    from transformers import WhisperForCausalLM

    with torch.device("meta"):  # WhisperForCausalLM sets is_encoder_decoder=False on its config: copy
        lm = WhisperForCausalLM(copy.deepcopy(model.config))
    lm.model.decoder = model.model.decoder
    lm.proj_out = model.proj_out
    lm.generation_config = copy.deepcopy(model.generation_config)
    return lm.eval()


def encoder_keeps_sdpa(model) -> None:
    """The endpoint's fix (patches.whisper.keep_encoder_on_sdpa): the encoder gets its own config,
    so generate()'s switch to eager attention for word timestamps leaves it on sdpa."""
    from speaker_asr.patches.whisper import keep_encoder_on_sdpa

    assert keep_encoder_on_sdpa(model), "the model must be on sdpa attention first"


def set_attn(model, impl: str) -> None:
    model.config._attn_implementation = impl


def features(model, batch: int, device, dtype):
    import torch

    g = torch.Generator(device="cpu").manual_seed(batch)
    x = torch.randn(batch, model.config.num_mel_bins, 3000, generator=g)
    return x.to(device=device, dtype=dtype)


# --------------------------------------------------------------------------- sections


def sec_encoder(models, args, device, dtype, budget) -> dict:
    import torch

    out = {}
    for name, model in models.items():
        r = {}
        for b in [1] + args.batch_sizes:
            if budget.left() < 20:
                r[f"batch_{b}"] = "skipped (time budget)"
                continue
            x = features(model, b, device, dtype)
            with torch.inference_mode():
                t, _ = timed(lambda: model.model.encoder(x), device, warmup=1, iters=args.iters)
            r[f"batch_{b}"] = {"ms_per_call": 1000 * t, "ms_per_window": 1000 * t / b,
                               "windows_per_s": b / t}
            log(f"encoder {name} batch {b}: {1000 * t / b:.1f} ms/window")
        # what the encoder runs after a word-timestamp request: transformers switches the shared
        # config to eager attention (see profile_cpu.py / encoder_keeps_sdpa)
        for b in (1, max(args.batch_sizes)):
            if budget.left() < 20 or name != next(iter(models)):
                continue
            x = features(model, b, device, dtype)
            set_attn(model, "eager")
            try:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                with torch.inference_mode():
                    t, _ = timed(lambda: model.model.encoder(x), device, warmup=1, iters=args.iters)
                r[f"batch_{b}_eager"] = {"ms_per_call": 1000 * t, "ms_per_window": 1000 * t / b,
                                         "windows_per_s": b / t}
                if device.type == "cuda":
                    r[f"batch_{b}_eager"]["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
                log(f"encoder {name} batch {b} EAGER: {1000 * t / b:.1f} ms/window")
            finally:
                set_attn(model, "sdpa")
        out[name] = r
    return out


def decode_loop(model, enc, n_tokens: int, device):
    """Bare greedy decoding with an encoder-decoder KV cache: 4 prompt tokens, then n_tokens steps."""
    import torch
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    b = enc.shape[0]
    ids = torch.tensor([[SOT, EN, TRANSCRIBE, NO_TIMESTAMPS]], device=device).expand(b, -1)
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    out = model(encoder_outputs=(enc,), decoder_input_ids=ids, past_key_values=cache, use_cache=True)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(n_tokens - 1):
        out = model(encoder_outputs=(enc,), decoder_input_ids=nxt, past_key_values=out.past_key_values,
                    use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    return nxt


def gen_kwargs(n_tokens: int) -> dict:
    # fixed token count: EOS is masked until n_tokens are out
    return {"max_new_tokens": n_tokens, "min_new_tokens": n_tokens, "num_beams": 1, "do_sample": False,
            "return_timestamps": False}


def sec_decode(models, args, device, dtype, budget) -> dict:
    import torch

    out = {}
    n = args.tokens
    for name, model in models.items():
        if budget.left() < 30:
            out[name] = "skipped (time budget)"
            continue
        x = features(model, 1, device, dtype)
        with torch.inference_mode():
            enc = model.model.encoder(x).last_hidden_state
            t_loop, _ = timed(lambda: decode_loop(model, enc, n, device), device, iters=args.iters)
            t_gen, seq = timed(lambda: model.generate(x, **gen_kwargs(n)), device, iters=args.iters)
            t_enc, _ = timed(lambda: model.model.encoder(x), device, iters=args.iters)
        generated = seq.shape[-1] if hasattr(seq, "shape") else None
        out[name] = {"tokens": n, "loop_ms_per_token": 1000 * t_loop / n,
                     "generate_s": t_gen, "generate_sequence_length": generated,
                     "generate_ms_per_token_excl_encoder": 1000 * (t_gen - t_enc) / n,
                     "encoder_ms": 1000 * t_enc}
        if name == next(iter(models)) and budget.left() > 60:
            # word timestamps (what the endpoint asks for whenever it diarizes): cross-attentions
            # are returned, which switches the shared config to eager; then with the fix
            wt = {**gen_kwargs(n), "return_token_timestamps": True}
            try:
                with torch.inference_mode():
                    t_wt, _ = timed(lambda: model.generate(x, **wt), device, iters=args.iters)
                out[name]["generate_word_ts_s"] = t_wt
                out[name]["generate_word_ts_attn"] = model.model.encoder.layers[0].self_attn.config._attn_implementation
                set_attn(model, "sdpa")
                encoder_keeps_sdpa(model)
                with torch.inference_mode():
                    t_fix, _ = timed(lambda: model.generate(x, **wt), device, iters=args.iters)
                out[name]["generate_word_ts_encoder_sdpa_s"] = t_fix
                log(f"decode {name}: generate {t_gen:.3f} s, with word timestamps {t_wt:.3f} s "
                    f"(encoder eager), {t_fix:.3f} s (encoder kept on sdpa)")
            except Exception as exc:
                out[name]["word_ts_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                log("word ts:", out[name]["word_ts_error"])
            finally:
                set_attn(model, "sdpa")
        log(f"decode {name}: loop {1000 * t_loop / n:.2f} ms/token, generate "
            f"{1000 * (t_gen - t_enc) / n:.2f} ms/token (+{1000 * t_enc:.1f} ms encoder)")
    return out


def sec_batch(models, args, device, dtype, budget) -> dict:
    import torch

    out = {}
    n = args.tokens
    for name, model in models.items():
        r = {}
        for b in args.batch_sizes:
            if budget.left() < 40:
                r[f"batch_{b}"] = "skipped (time budget)"
                continue
            x = features(model, b, device, dtype)
            with torch.inference_mode():
                t, _ = timed(lambda: model.generate(x, **gen_kwargs(n)), device, warmup=1,
                             iters=max(1, args.iters - 1))
            r[f"batch_{b}"] = {"s_per_call": t, "windows_per_s": b / t, "tokens_per_s": b * n / t,
                               "audio_s_per_s": 30 * b / t}
            if device.type == "cuda":
                r[f"batch_{b}"]["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            log(f"batch {name} {b}: {b / t:.2f} windows/s ({30 * b / t:.0f}x real time at {n} tokens/window)")
        out[name] = r
    return out


def sec_static(models, args, device, dtype, budget) -> dict:
    """Static cache (+ automatic torch.compile of the decoder step on CUDA)."""
    import torch

    out = {}
    n = args.tokens
    name, model = next(iter(models.items()))
    if budget.left() < 120:
        return {"skipped": "time budget"}
    x = features(model, 1, device, dtype)
    kw = gen_kwargs(n)
    r = {}
    try:
        with torch.inference_mode():
            for label, extra in (("static, compile off", {"cache_implementation": "static",
                                                          "disable_compile": True}),
                                 ("static, auto-compile", {"cache_implementation": "static"})):
                if budget.left() < 90:
                    r[label] = "skipped (time budget)"
                    continue
                t0 = time.perf_counter()
                model.generate(x, **kw, **extra)  # first call: cache allocation / compilation
                sync(device)
                first = time.perf_counter() - t0
                t, _ = timed(lambda: model.generate(x, **kw, **extra), device, warmup=1, iters=args.iters)
                r[label] = {"first_call_s": first, "steady_s": t, "ms_per_token_incl_encoder": 1000 * t / n}
                log(f"static {name} {label}: first {first:.1f} s, steady {1000 * t / n:.2f} ms/token")
            t, _ = timed(lambda: model.generate(x, **kw), device, iters=args.iters)
            r["dynamic cache (default)"] = {"steady_s": t, "ms_per_token_incl_encoder": 1000 * t / n}
    except Exception as exc:  # report, do not abort the other sections
        r["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        log("static:", r["error"])
    out[name] = r
    return out


def sec_assisted(models, args, device, dtype, budget) -> dict:
    import torch

    names = list(models)
    main_name, distil_name = names[0], names[1]
    main, distil = models[main_name], models[distil_name]
    n = args.tokens
    x = features(main, 1, device, dtype)
    out = {"tokens": n}
    self_asst = causal_lm_from(main)
    distil_asst = causal_lm_from(distil)
    with torch.inference_mode():
        t_plain, _ = timed(lambda: main.generate(x, **gen_kwargs(n)), device, iters=args.iters)
        out["plain_s"] = t_plain
        out["plain_ms_per_token"] = 1000 * t_plain / n
        for label, asst in (("self (all accepted: upper bound)", self_asst),
                            ("random distil (few accepted: lower bound)", distil_asst)):
            if budget.left() < 40:
                out[label] = "skipped (time budget)"
                continue
            try:
                t, _ = timed(lambda: main.generate(x, assistant_model=asst, **gen_kwargs(n)), device,
                             iters=args.iters)
                out[label] = {"s": t, "ms_per_token": 1000 * t / n, "speedup_vs_plain": t_plain / t}
                log(f"assisted {label}: {1000 * t / n:.2f} ms/token ({t_plain / t:.2f}x plain)")
            except Exception as exc:
                out[label] = f"error {type(exc).__name__}: {str(exc)[:300]}"
                log("assisted:", out[label])

        # per-call costs: main model verifying k+1 tokens, assistant drafting one token
        enc = main.model.encoder(x).last_hidden_state
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        def prefilled(model, length=64):
            cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
            ids = torch.full((1, length), 400, device=device)
            model(encoder_outputs=(enc,), decoder_input_ids=ids, past_key_values=cache, use_cache=True)
            return cache

        def step(model, k):
            cache = prefilled(model)
            ids = torch.full((1, k), 401, device=device)
            grown = [0]

            def go():
                if grown[0]:
                    cache.crop(-grown[0])  # back to the 64 prefilled tokens
                grown[0] = k
                return model(encoder_outputs=(enc,), decoder_input_ids=ids, past_key_values=cache,
                             use_cache=True)
            return go

        costs = {}
        for k in range(1, 8):
            costs[f"main_verify_{k}_tokens_ms"] = 1000 * timed(step(main, k), device, warmup=2,
                                                               iters=args.iters + 2)[0]
        costs["distil_draft_1_token_ms"] = 1000 * timed(step(distil, 1), device, warmup=2,
                                                        iters=args.iters + 2)[0]
        out["call_costs"] = costs
        # expected tokens per iteration with k drafts at acceptance a: (1 - a^(k+1)) / (1 - a)
        proj = {}
        for a in (0.6, 0.7, 0.8, 0.9):
            best = None
            for k in range(1, 7):
                tokens = (1 - a ** (k + 1)) / (1 - a)
                cost = k * costs["distil_draft_1_token_ms"] + costs[f"main_verify_{k + 1}_tokens_ms"]
                ms = cost / tokens
                proj[f"a={a},k={k}"] = ms
                best = min(best or (ms, k), (ms, k))
            proj[f"a={a},best"] = {"ms_per_token": best[0], "draft_tokens": best[1],
                                   "speedup_vs_plain_step": costs["main_verify_1_tokens_ms"] / best[0]}
        out["projection_ms_per_token"] = proj
    return out


def synthetic_speech(seconds: float, sr: int = 16000, seed: int = 0):
    """Noise shaped like speech: voiced bursts (harmonics of a wandering pitch) with pauses, two
    'voices' taking turns. Enough for timing; random weights make the output meaningless anyway."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    t = np.arange(n) / sr
    out = np.zeros(n, np.float32)
    pos = 0
    voice = 0
    while pos < n:
        dur = int(rng.uniform(0.8, 4.0) * sr)
        seg = slice(pos, min(n, pos + dur))
        f0 = (120 if voice else 210) * (1 + 0.1 * np.sin(2 * np.pi * 0.5 * t[seg]))
        phase = 2 * np.pi * np.cumsum(f0) / sr
        sig = sum(np.sin(h * phase) / h for h in range(1, 8))
        env = (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t[seg])) ** 2
        out[seg] = 0.1 * sig * env + 0.01 * rng.standard_normal(len(sig))
        pos += dur + int(rng.uniform(0.1, 0.8) * sr)
        voice = 1 - voice if rng.random() < 0.6 else voice
    return out


def sec_pyannote(args, device, budget) -> dict:
    import torch

    os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
    from speaker_asr.testing.tiny_models import build_pyannote_pipeline
    from pyannote.audio import Pipeline

    folder = Path(tempfile.mkdtemp(prefix="bench-pyannote-"))
    build_pyannote_pipeline(folder)
    pipe = Pipeline.from_pretrained(str(folder))
    pipe.to(device)
    seconds = args.pyannote_seconds
    audio = torch.from_numpy(synthetic_speech(seconds))[None]
    file = {"waveform": audio, "sample_rate": 16000}
    out = {"audio_s": seconds, "note": "random PyanNet + WeSpeaker ResNet34 (3.1 layout), synthetic audio"}
    pipe(file)  # warm-up (cuDNN autotuning, lazy init)
    for emb, seg in args.pyannote_batches:
        if budget.left() < 20:
            out[f"emb{emb}_seg{seg}"] = "skipped (time budget)"
            continue
        pipe.embedding_batch_size, pipe.segmentation_batch_size = emb, seg
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t, _ = timed(lambda: pipe(file), device, warmup=0, iters=1)
        r = {"s": t, "rtf": t / seconds}
        if device.type == "cuda":
            r["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        out[f"emb{emb}_seg{seg}"] = r
        log(f"pyannote emb {emb} seg {seg}: {t:.2f} s for {seconds:.0f} s (RTF {t / seconds:.4f})")
    # the endpoint's fix (speaker_asr/patches/diarization.py): no embedding for silent speaker slots
    from speaker_asr.patches.diarization import skip_silent_embeddings

    if budget.left() >= 20 and skip_silent_embeddings(pipe):
        pipe.embedding_batch_size, pipe.segmentation_batch_size = 32, 32
        t, _ = timed(lambda: pipe(file), device, warmup=0, iters=1)
        out["skip_silent_emb32_seg32"] = {"s": t, "rtf": t / seconds}
        log(f"pyannote skip-silent emb 32 seg 32: {t:.2f} s (RTF {t / seconds:.4f})")
    # the endpoint's whole set (patch registry: over 5 minutes a 2-s segmentation step and every
    # third window embedded, linear clustering), at batch 32, in float32 and under float16 autocast
    # (segmentation and embeddings in half precision): the GPU settings for long recordings
    from speaker_asr.patches import registry

    if budget.left() >= 40:
        fresh = Pipeline.from_pretrained(str(folder))
        fresh.to(device)
        report = registry.install("diarization", fresh, True, device=device)
        out["endpoint_patches"] = registry.describe(report)
        fresh.embedding_batch_size, fresh.segmentation_batch_size = 32, 32
        turns = {}
        for name, half in (("endpoint_emb32_seg32", False), ("endpoint_fp16_emb32_seg32", True)):
            context = torch.autocast(device.type, dtype=torch.float16) if half and device.type == "cuda" \
                else contextlib.nullcontext()
            with context:
                t, result = timed(lambda: fresh(file), device, warmup=0, iters=1)
            annotation = getattr(result, "speaker_diarization", result)
            turns[name] = [(round(s.start, 2), round(s.end, 2), k) for s, _, k in annotation.itertracks(yield_label=True)]
            out[name] = {"s": t, "rtf": t / seconds}
            log(f"pyannote {name}: {t:.2f} s (RTF {t / seconds:.4f})")
        out["endpoint_fp16_same_turns"] = turns["endpoint_emb32_seg32"] == turns["endpoint_fp16_emb32_seg32"]
    return out


class EndpointRig:
    """What the endpoint sections run: the handler (``EndpointHandler``, every patch of the
    registry, its warm-up at load) over random models built on the device in its dtype and saved
    like hub checkpoints -- large-v3 in full on a GPU (1.55 B parameters, its 51,866-token
    vocabulary; the thin large-v3 shape for --smoke), a distil-large-v3-shaped assistant (large-v3's
    encoder shape, which transformers checks, and 2 decoder layers; random: it drafts nearly nothing
    right, the lower bound) and the pyannote 3.1 layout
    (random PyanNet + WeSpeaker ResNet34; XVector for --smoke). End-of-text is suppressed, so every
    window generates exactly the tokens it is allowed (``tokens_per_s`` x its seconds): random
    weights would otherwise stop anywhere. Handlers are loaded on first use and kept."""

    def __init__(self, args, device, dtype):
        from transformers import GenerationConfig

        from speaker_asr.testing.tiny_models import (LARGE_V3, LARGE_V3_SHAPE, build_pyannote_pipeline,
                                                     build_whisper)

        self.args, self.device, self.dtype = args, device, dtype
        self.root = Path(tempfile.mkdtemp(prefix="gpu-run-"))
        shape = LARGE_V3_SHAPE if args.smoke else LARGE_V3
        started = time.perf_counter()
        self.paths = {}
        for name, seed, layers in (("main", 7, {}), ("distil", 8, {"decoder_layers": 2,
                                                                   "alignment_heads": [[1, 0]]})):
            path = build_whisper(self.root / name, multilingual=True, seed=seed, **{**shape, **layers},
                                 device=device, dtype=dtype)
            gen = GenerationConfig.from_pretrained(path)
            gen.suppress_tokens = sorted(set(gen.suppress_tokens) | {gen.eos_token_id})
            gen.save_pretrained(path)
            self.paths[name] = path
        self.paths["pyannote"] = build_pyannote_pipeline(
            self.root / "pyannote", embedding="xvector" if args.smoke else "resnet34")
        self.build_s = time.perf_counter() - started
        log(f"built the random models in {self.build_s:.1f} s ({self.root})")
        self.handlers, self.load_s = {}, {}

    # handler name -> (assistant, diarization)
    LAYOUT = {"asr": ("distil", None), "self": ("main", None), "full": ("distil", "pyannote")}

    def handler(self, name: str):
        if name not in self.handlers:
            from speaker_asr.settings import ModelSettings
            from speaker_asr.endpoint import EndpointHandler

            assistant, diarization = self.LAYOUT[name]
            settings = ModelSettings(
                asr_model=str(self.paths["main"]), assistant_model=str(self.paths[assistant]),
                diarization_model=str(self.paths[diarization]) if diarization else "",
                device=str(self.device), torch_dtype=str(self.dtype).removeprefix("torch."))
            started = time.perf_counter()
            self.handlers[name] = EndpointHandler(settings=settings)
            self.load_s[name] = time.perf_counter() - started
            log(f"handler {name} loaded in {self.load_s[name]:.1f} s")
        return self.handlers[name]

    def tokens_for(self, seconds: float) -> int:
        """Tokens per window for ``seconds`` of speech in it (a 30 s window at most)."""
        return max(1, min(444, round(self.args.tokens_per_s * min(seconds, 30.0))))


@functools.lru_cache(maxsize=4)
def wav_bytes(seconds: float, seed: int = 0) -> bytes:
    """``seconds`` of synthetic speech as the 16-bit WAV a client would send (made once per
    length: batch24 and together send the same long recording)."""
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, synthetic_speech(seconds, seed=seed), 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def timed_requests(handler, audio: bytes, params: dict, device, iters: int) -> dict:
    """A request through the handler as the endpoint serves it: one warm-up in the same
    configuration (which also counts the ASR's windows), then ``iters`` timed; the median."""
    import torch

    windows = [0]

    def progress(event):
        if event.stage == "asr":
            windows[0] = event.total

    request = {"inputs": audio, "parameters": {"language": "en", **params}}
    response = handler(request, progress=progress)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        response = handler(request)
        sync(device)
        times.append(time.perf_counter() - started)
    times.sort()
    r = {"s": times[len(times) // 2], "runs_s": [round(t, 4) for t in times], "windows": windows[0],
         "assisted": response.get("assisted"),
         "speakers": len({turn["speaker"] for turn in response.get("speakers", [])})}
    if device.type == "cuda":
        r["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return r


def sec_bracket(rig, args, device, budget) -> dict:
    """The seed's comparison through the handler (ASR only, as the seed measured it): an 8 s and a
    60 s clip, plain against assisted, the assisted runs bracketed by the model drafting for itself
    (every draft accepted: the upper bound) and the random distil-shaped assistant (nearly none:
    the lower bound). Latency is the median of ``iters`` after a warm-up; ms per generated token
    divides it by windows x tokens per window."""
    out = {"tokens_per_s": args.tokens_per_s}
    for seconds in (8.0, 60.0):
        audio = wav_bytes(seconds, seed=int(seconds))
        tokens = rig.tokens_for(seconds)
        for label, handler, assisted in (("plain", "asr", False), ("assisted, random distil (lower bound)", "asr", True),
                                         ("assisted, self (upper bound)", "self", True)):
            key = f"{seconds:.0f}s {label}"
            if budget.left() < (30 if seconds < 30 else 60):
                out[key] = "skipped (time budget)"
                continue
            h = rig.handler(handler)
            h.models.asr.max_new_tokens = tokens
            r = timed_requests(h, audio, {"assisted": assisted}, device, args.iters)
            r.update(audio_s=seconds, tokens_per_window=tokens,
                     ms_per_token=1000 * r["s"] / max(1, r["windows"] * tokens))
            out[key] = r
            log(f"bracket {key}: {1000 * r['s']:.0f} ms ({r['ms_per_token']:.2f} ms/token, {r['windows']} windows)")
        plain = out.get(f"{seconds:.0f}s plain")
        for key, r in out.items():
            if key.startswith(f"{seconds:.0f}s ") and isinstance(r, dict) and isinstance(plain, dict):
                r["x_plain"] = plain["s"] / r["s"]
    return out


def sec_batch24(rig, args, device, budget) -> dict:
    """large-v3 on the long recording at batch 24 (chunked windows), word timestamps on as every
    diarized request has them: real-time factor, median of ``iters`` after a warm-up (the memory
    pool grown there, not in the timed calls)."""
    seconds = args.long_seconds
    h = rig.handler("asr")
    h.models.asr.max_new_tokens = rig.tokens_for(30.0)
    out = {}
    for label, words in (("words", True), ("plain", False)):
        if budget.left() < 60:
            out[label] = "skipped (time budget)"
            continue
        r = timed_requests(h, wav_bytes(seconds), {"batch_size": 24, "return_word_timestamps": words},
                           device, max(1, args.iters - 1))
        r.update(audio_s=seconds, tokens_per_window=h.models.asr.max_new_tokens, rtf=r["s"] / seconds)
        out[label] = r
        log(f"batch24 {label}: {r['s']:.2f} s for {seconds:.0f} s (RTF {r['rtf']:.4f}, {r['windows']} windows)")
    return out


def sec_together(rig, args, device, budget) -> dict:
    """On the long recording: the ASR alone (batch 24, word timestamps), the diarization alone
    (``speaker_asr.pipeline.diarize_speakers`` on the loaded pipeline) and both as the endpoint runs
    them (the diarization on its worker thread beside the ASR): once with the diarization on the
    default CUDA stream, once on a stream of its own (DIARIZATION_CUDA_STREAM)."""
    import torch

    from speaker_asr.config import InferenceConfig
    from speaker_asr.pipeline import diarize_speakers

    seconds = args.long_seconds
    audio = wav_bytes(seconds)
    h = rig.handler("full")
    h.models.asr.max_new_tokens = rig.tokens_for(30.0)
    out = {"audio_s": seconds}
    iters = max(1, args.iters - 1)
    if budget.left() >= 60:
        asr = rig.handler("asr")
        asr.models.asr.max_new_tokens = h.models.asr.max_new_tokens
        r = timed_requests(asr, audio, {"batch_size": 24, "return_word_timestamps": True}, device, iters)
        out["asr alone"] = {**r, "rtf": r["s"] / seconds}
    if budget.left() >= 45:
        waveform = synthetic_speech(seconds)
        cfg = InferenceConfig.model_validate({}, context={"capabilities": h.models.capabilities})
        diarize_speakers(h.models.diarizer.pipeline, h.models.diarizer.voices, waveform, cfg, with_voices=False)  # warm-up
        times = []
        for _ in range(iters):
            started = time.perf_counter()
            found = diarize_speakers(h.models.diarizer.pipeline, h.models.diarizer.voices, waveform, cfg, with_voices=False)
            sync(device)
            times.append(time.perf_counter() - started)
        times.sort()
        out["diarization alone"] = {"s": times[len(times) // 2], "runs_s": [round(t, 4) for t in times],
                                    "rtf": times[len(times) // 2] / seconds,
                                    "speakers": len({t.speaker for t in found.turns})}
    streams = [("both, one stream", None)]
    if device.type == "cuda":
        streams.append(("both, diarization on its own stream", torch.cuda.Stream(device)))
    for label, stream in streams:
        if budget.left() < 60:
            out[label] = "skipped (time budget)"
            continue
        h.models.diarizer.stream = stream
        r = timed_requests(h, audio, {"batch_size": 24}, device, iters)
        out[label] = {**r, "rtf": r["s"] / seconds}
    h.models.diarizer.stream = None
    for key, r in out.items():
        if isinstance(r, dict):
            log(f"together {key}: {r['s']:.2f} s for {seconds:.0f} s (RTF {r['rtf']:.4f})")
    return out


# --------------------------------------------------------------------------- report


def fmt(x, digits: int = 2) -> str:
    return "–" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def markdown(doc: dict) -> str:
    L = [f"GPU benchmark {doc['started']} on {doc['device_name']} ({doc['dtype']}, "
         f"{'smoke shapes' if doc['smoke'] else 'large-v3 / distil-large-v3 shapes'}, random weights, "
         f"{doc['tokens']} tokens per window)", ""]
    r = doc["results"]
    if "encoder" in r:
        L += ["| encoder | batch | ms / 30 s window | windows/s |", "|---|---|---|---|"]
        for name, rows in r["encoder"].items():
            for b, v in rows.items():
                if isinstance(v, dict):
                    L.append(f"| {name} | {b.removeprefix('batch_').replace('_', ' ')} | "
                             f"{v['ms_per_window']:.1f} | {v['windows_per_s']:.1f} |")
        L.append("")
    if "decode" in r:
        L += ["| decoder (batch 1) | loop ms/token | generate() ms/token | encoder ms |", "|---|---|---|---|"]
        for name, v in r["decode"].items():
            if isinstance(v, dict):
                L.append(f"| {name} | {v['loop_ms_per_token']:.2f} | "
                         f"{v['generate_ms_per_token_excl_encoder']:.2f} | {v['encoder_ms']:.1f} |")
        for name, v in r["decode"].items():
            if isinstance(v, dict) and "generate_word_ts_s" in v:
                L.append(f"\n{name} generate() of {v['tokens']} tokens: {v['generate_s']:.3f} s plain, "
                         f"{v['generate_word_ts_s']:.3f} s with word timestamps (encoder switched to eager), "
                         f"{fmt(v.get('generate_word_ts_encoder_sdpa_s'), 3)} s with the encoder kept on sdpa")
        L.append("")
    if "batch" in r:
        L += ["| generate() | batch | windows/s | tokens/s | x real time |", "|---|---|---|---|---|"]
        for name, rows in r["batch"].items():
            for b, v in rows.items():
                if isinstance(v, dict):
                    L.append(f"| {name} | {b.split('_')[1]} | {v['windows_per_s']:.2f} | "
                             f"{v['tokens_per_s']:.0f} | {v['audio_s_per_s']:.0f} |")
        L.append("")
    rig = doc.get("rig") or {}
    shape = "the thin large-v3 shape (d_model 80)" if doc["smoke"] else "large-v3 in full"
    b = r.get("bracket")
    if isinstance(b, dict):
        L += [f"The seed's comparison through the handler, ASR only ({shape}, {doc['dtype']}, random weights, "
              f"{b.get('tokens_per_s')} tokens per second of audio, latency the median of {doc.get('iters')} "
              "after a warm-up):", "",
              "| clip | decoding | latency ms | x plain | windows | tokens/window | ms/token | assisted |",
              "|---|---|---|---|---|---|---|---|"]
        for k, v in b.items():
            if isinstance(v, dict):
                clip, _, mode = k.partition(" ")
                used = (v.get("assisted") or {}).get("used") if isinstance(v.get("assisted"), dict) \
                    else v.get("assisted")
                L.append(f"| {clip} | {mode} | {1000 * v['s']:.0f} | {fmt(v.get('x_plain'))} | {v['windows']} | "
                         f"{v['tokens_per_window']} | {v['ms_per_token']:.2f} | {fmt(used)} |")
            elif isinstance(v, str):
                L.append(f"| {k} | {v} | | | | | | |")
        L.append("")
    for key, title in (("batch24", "large-v3 at batch 24 on the long recording"),
                       ("together", "ASR beside diarization on one device")):
        t = r.get(key)
        if not isinstance(t, dict):
            continue
        L += [f"{title} ({shape} + the random pyannote 3.1 layout; median of {max(1, doc.get('iters', 1) - 1)} "
              "after a warm-up):", "", "| run | audio s | s | RTF | windows | peak GiB |", "|---|---|---|---|---|---|"]
        for k, v in t.items():
            if isinstance(v, dict):
                L.append(f"| {k} | {v.get('audio_s', t.get('audio_s'))} | {v['s']:.2f} | {v['rtf']:.4f} | "
                         f"{fmt(v.get('windows'))} | {fmt(v.get('peak_memory_gib'))} |")
            elif isinstance(v, str):
                L.append(f"| {k} | {v} | | | | |")
        L.append("")
    if rig:
        L += [f"random models built in {rig.get('build_s', 0):.1f} s; handlers loaded (warm-up included): "
              + ", ".join(f"{k} {v:.1f} s" for k, v in (rig.get('load_s') or {}).items()), ""]
    a = r.get("assisted")
    if isinstance(a, dict):
        L += [f"| assisted (batch 1, {a.get('tokens')} tokens) | ms/token | x plain |", "|---|---|---|",
              f"| plain | {fmt(a.get('plain_ms_per_token'))} | 1.00 |"]
        for k, v in a.items():
            if isinstance(v, dict) and "ms_per_token" in v:
                L.append(f"| {k} | {fmt(v['ms_per_token'])} | {fmt(v['speedup_vs_plain'])} |")
            elif isinstance(v, str) and k not in ("tokens",):
                L.append(f"| {k} | {v[:100]} | |")
        c = a.get("call_costs", {})
        if c:
            L += ["", "call costs (ms): " + ", ".join(f"{k.replace('_ms', '')} {v:.2f}" for k, v in c.items())]
        p = a.get("projection_ms_per_token", {})
        best = {k: v for k, v in p.items() if k.endswith(",best")}
        if best:
            L += ["", "| acceptance (projected) | best draft tokens | ms/token | x plain step |", "|---|---|---|---|"]
            for k, v in best.items():
                L.append(f"| {k.split(',')[0][2:]} | {v['draft_tokens']} | {v['ms_per_token']:.2f} | "
                         f"{v['speedup_vs_plain_step']:.2f} |")
        L.append("")
    st = r.get("static")
    if isinstance(st, dict):
        L += ["| static cache | first call s | steady ms/token (incl. encoder) |", "|---|---|---|"]
        for name, rows in st.items():
            if not isinstance(rows, dict):
                L.append(f"| {name} | {rows} | |")
                continue
            for k, v in rows.items():
                if isinstance(v, dict):
                    L.append(f"| {name}: {k} | {fmt(v.get('first_call_s'))} | {fmt(v.get('ms_per_token_incl_encoder'))} |")
                else:
                    L.append(f"| {name}: {k} | {str(v)[:120]} | |")
        L.append("")
    py = r.get("pyannote")
    if isinstance(py, dict):
        L += [f"pyannote ({py.get('note')}, {py.get('audio_s')} s):", "",
              "| embedding batch | segmentation batch | s | RTF | max GPU memory GiB |", "|---|---|---|---|---|"]
        for k, v in py.items():
            if k.startswith("emb") and isinstance(v, dict):
                e, sg = k[3:].split("_seg")
                L.append(f"| {e} | {sg} | {v['s']:.2f} | {v['rtf']:.4f} | {fmt(v.get('max_memory_gib'))} |")
            elif k.startswith(("skip_silent", "endpoint_")) and isinstance(v, dict):
                L.append(f"| {k} | 32 | {v['s']:.2f} | {v['rtf']:.4f} | |")
        if "endpoint_fp16_same_turns" in py:
            L.append(f"\nendpoint's patches: {py.get('endpoint_patches')}; float16 autocast gives the same "
                     f"turns as float32: {py['endpoint_fp16_same_turns']}")
        L.append("")
    if doc.get("errors"):
        L += ["errors:", "```", json.dumps(doc["errors"], indent=1)[:3000], "```"]
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes; runs on CPU")
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--dtype", default=None, help="default float16 on GPU, float32 on CPU")
    ap.add_argument("--sections", default=",".join(ENDPOINT_SECTIONS),
                    help="comma list of: " + ", ".join(ENDPOINT_SECTIONS + SECTIONS) + " (static needs --compile)")
    ap.add_argument("--compile", action="store_true", help="add the static-cache / torch.compile section")
    ap.add_argument("--full", action="store_true",
                    help="every section on the bare models too (encoder, decode, batch, assisted) and "
                         "seven pyannote batch settings: about 10 minutes")
    ap.add_argument("--tokens", type=int, default=None, help="generated tokens per window (default 128, smoke 16)")
    ap.add_argument("--batch-sizes", default=None, help="default 8,16,24 (smoke 2,4)")
    ap.add_argument("--iters", type=int, default=None, help="timed iterations (default 3, smoke 2)")
    ap.add_argument("--budget-s", type=float, default=540, help="stop starting new measurements after this")
    ap.add_argument("--pyannote-seconds", type=float, default=None, help="default 600 (smoke 30)")
    ap.add_argument("--tokens-per-s", type=float, default=None,
                    help="endpoint sections: tokens each window generates per second of audio in it "
                         "(default 4: about 120 for a full 30 s window, as speech gives; smoke 0.5)")
    ap.add_argument("--long-seconds", type=float, default=None,
                    help="endpoint sections: the long recording (default 600; smoke 60)")
    ap.add_argument("--out", default=None, help="output folder (default $OUT, else bench/results)")
    args = ap.parse_args()

    budget = Budget(args.budget_s)
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings

    warnings.filterwarnings("ignore")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else torch.float32)
    if args.smoke:
        names = ["smoke-main", "smoke-distil"]
        args.tokens = args.tokens or 16
        args.batch_sizes = [int(b) for b in (args.batch_sizes or "2,4").split(",")]
        args.iters = args.iters or 2
        args.pyannote_seconds = args.pyannote_seconds or 30.0
        args.pyannote_batches = [(32, 32), (8, 8)]
        args.tokens_per_s = args.tokens_per_s or 0.5
        args.long_seconds = args.long_seconds or 60.0
    else:
        names = ["large-v3", "distil-large-v3"]
        args.tokens = args.tokens or 128
        args.batch_sizes = [int(b) for b in (args.batch_sizes or "8,16,24").split(",")]
        args.iters = args.iters or 3
        # over 5 minutes: the endpoint's long-recording settings apply
        args.pyannote_seconds = args.pyannote_seconds or 600.0
        args.pyannote_batches = [(32, 32), (1, 32), (8, 32), (64, 32), (128, 32), (32, 1), (32, 128)] \
            if args.full else [(32, 32), (8, 32)]
        args.tokens_per_s = args.tokens_per_s or 4.0
        args.long_seconds = args.long_seconds or 600.0
    if args.full and args.sections == ",".join(ENDPOINT_SECTIONS):
        args.sections = ",".join(ENDPOINT_SECTIONS + SECTIONS)
    sections = [s for s in args.sections.split(",") if s]
    if args.compile and "static" not in sections:
        sections.append("static")  # last: compiling large-v3 takes minutes
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True

    out_dir = Path(args.out or os.environ.get("OUT") or (HERE / "results"))
    out_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc)
    doc = {"started": started.isoformat(), "argv": sys.argv[1:], "smoke": args.smoke,
           "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
           else f"CPU x{os.cpu_count()}", "dtype": str(dtype).removeprefix("torch."),
           "torch": torch.__version__, "tokens": args.tokens, "iters": args.iters, "results": {},
           "errors": {}}
    try:
        import transformers

        doc["transformers"] = transformers.__version__
    except ImportError:
        pass
    stem = "gpu_benchmark-smoke" if args.smoke else "gpu_benchmark"

    def save():
        (out_dir / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str))
        (out_dir / f"{stem}.md").write_text(markdown(doc))

    models = {}
    need_whisper = any(s in sections for s in ("encoder", "decode", "batch", "static", "assisted"))
    if need_whisper:
        t = time.perf_counter()
        for name in names:
            models[name] = build_whisper(name, device, dtype)
        doc["build_s"] = time.perf_counter() - t
        log(f"built {', '.join(names)} in {doc['build_s']:.1f} s")
    fns = {"encoder": lambda: sec_encoder(models, args, device, dtype, budget),
           "decode": lambda: sec_decode(models, args, device, dtype, budget),
           "batch": lambda: sec_batch(models, args, device, dtype, budget),
           "static": lambda: sec_static(models, args, device, dtype, budget),
           "assisted": lambda: sec_assisted(models, args, device, dtype, budget),
           "pyannote": lambda: sec_pyannote(args, device, budget)}
    rigs = []

    def rig():  # the endpoint sections' models and handlers, built once
        if not rigs:
            rigs.append(EndpointRig(args, device, dtype))
        doc["rig"] = {"build_s": rigs[0].build_s, "load_s": rigs[0].load_s}
        return rigs[0]

    fns.update({"bracket": lambda: sec_bracket(rig(), args, device, budget),
                "batch24": lambda: sec_batch24(rig(), args, device, budget),
                "together": lambda: sec_together(rig(), args, device, budget)})
    for s in sections:
        if s not in fns:
            doc["errors"][s] = "unknown section"
            continue
        if budget.left() < 15:
            doc["errors"][s] = "skipped: time budget spent"
            continue
        log(f"section {s} ({budget.left():.0f} s left)")
        t = time.perf_counter()
        try:
            doc["results"][s] = fns[s]()
        except Exception as exc:  # keep going: one failing section must not lose the others
            import traceback

            doc["errors"][s] = f"{type(exc).__name__}: {exc}"[:500]
            traceback.print_exc()
        doc.setdefault("section_s", {})[s] = time.perf_counter() - t
        save()
    save()
    print(markdown(doc))
    log(f"wrote {out_dir / (stem + '.json')}")


if __name__ == "__main__":
    main()
