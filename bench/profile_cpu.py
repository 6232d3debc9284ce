"""Where the CPU time goes, and candidate fixes measured side by side.

In one process per model (models loaded once), on the 30 s two-speaker sample:

* breakdown   -- ASR alone and diarization alone, instrumented: feature extraction, encoder,
                 decoder steps, LM head, logits processors, word-timestamp DTW, pipeline
                 post-processing; pyannote segmentation, embedding fbank / network, clustering.
                 Optionally a cProfile listing (--cprofile).
* asr         -- ASR variants with word timestamps on (what the handler runs when diarizing):
                 stock (transformers switches the *shared* config to eager for DTW), encoder kept on
                 sdpa, no word timestamps (all sdpa), 1 thread, int8 dynamic quantization of the
                 Linear layers, bfloat16; with WER and word-time drift against stock.
* diar        -- pyannote embedding / segmentation batch sizes, 1 vs all threads.
* concurrency -- ASR then diarization vs diarization in a thread beside the ASR (the handler's
                 current design), with all threads in both vs one thread each.

Variants are interleaved repeat by repeat (the machine is shared and noisy); medians are
reported with the load average. Nothing in the project is modified: variants are built by
patching objects in this process.

    .venv/bin/python bench/profile_cpu.py                         # all sections, tiny.en + base
    .venv/bin/python bench/profile_cpu.py --models tiny.en --sections breakdown --cprofile
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from common import (MODELS, PIPELINE, RESULTS, SR, Timers, fmt, get_input, loadavg, machine, normalize,
                    peak_rss_mb, reset_peak_rss, rss_mb, setup_env, wer)

SECTIONS = ("breakdown", "asr", "diar", "concurrency")


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')} load {loadavg()[0]:.2f}]", *a, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- model helpers


def load(model: str, threads: int):
    import torch

    torch.set_num_threads(threads)
    from speaker_asr.settings import ModelSettings
    from speaker_asr.endpoint import EndpointHandler

    # the stock transformers code paths: each fix is measured as a variant against them
    return EndpointHandler(settings=ModelSettings(asr_model=str(MODELS[model]["hf"]),
                                                  diarization_model=str(PIPELINE), device="cpu",
                                                  generation_speedups=False))


def asr_config(model: str, **extra):
    from speaker_asr.config import InferenceConfig, ModelCapabilities

    params = {"language": "en"} if MODELS[model]["multilingual"] else {}
    params.update(extra)
    return InferenceConfig.from_request(params, ModelCapabilities())


def set_model(asr, model) -> None:
    """Make the transcriber (and its pipeline) use ``model``."""
    asr.model = model
    asr.pipe.model = model


def encoder_keeps_sdpa(model) -> None:
    """The endpoint's fix (patches.whisper.keep_encoder_on_sdpa), applied to a copy of the stock
    model: generate() sets the *shared* config to eager attention for word timestamps, so the
    encoder would run eager too; with its own config it stays on sdpa."""
    from speaker_asr.patches.whisper import keep_encoder_on_sdpa

    assert keep_encoder_on_sdpa(model), "the model must be on sdpa attention first"


def attn_impl(model) -> str:
    enc = model.model.encoder.layers[0].self_attn.config._attn_implementation
    dec = model.model.decoder.layers[0].encoder_attn.config._attn_implementation
    return f"enc={enc},dec={dec}"


class cached_suppress_masks:
    """Context manager: transformers' SuppressTokensLogitsProcessor and
    SuppressTokensAtBeginLogitsProcessor rebuild their mask with ``torch.isin(arange(vocab),
    tokens)`` at *every* decoding step (a sort of the 51k vocabulary, 3 calls per token). This
    computes each mask once per processor and reuses it; the output is identical."""

    def __enter__(self):
        import torch
        from transformers.generation import logits_process as lp

        self.saved = {cls: cls.__dict__["__call__"] for cls in
                      (lp.SuppressTokensLogitsProcessor, lp.SuppressTokensAtBeginLogitsProcessor)}

        def mask_for(proc, tokens, scores):
            key = (scores.shape[-1], str(scores.device))
            cache = proc.__dict__.setdefault("_bench_mask", {})
            if key not in cache:
                ids = tokens.to(scores.device)
                ids = ids[(ids >= 0) & (ids < scores.shape[-1])]
                mask = torch.zeros(scores.shape[-1], dtype=torch.bool, device=scores.device)
                mask[ids] = True
                cache[key] = mask
            return cache[key]

        def suppress(proc, input_ids, scores):
            return scores.masked_fill(mask_for(proc, proc.suppress_tokens, scores), -float("inf"))

        def suppress_at_begin(proc, input_ids, scores):
            if input_ids.shape[-1] != proc.begin_index:
                return scores
            return scores.masked_fill(mask_for(proc, proc.begin_suppress_tokens, scores), -float("inf"))

        lp.SuppressTokensLogitsProcessor.__call__ = suppress
        lp.SuppressTokensAtBeginLogitsProcessor.__call__ = suppress_at_begin
        return self

    def __exit__(self, *exc):
        for cls, fn in self.saved.items():
            cls.__call__ = fn


def quantized_copy(model):
    import torch

    q = copy.deepcopy(model)
    return torch.ao.quantization.quantize_dynamic(q, {torch.nn.Linear}, dtype=torch.qint8)


def word_drift(ref_words, words) -> dict:
    """Mean / max |start - start_ref| over words when the texts match word for word."""
    if ref_words is None or words is None:
        return {}
    a = [normalize(w.text) for w in ref_words]
    b = [normalize(w.text) for w in words]
    if a != b:
        return {"same_words": False}
    d = [abs((x.start or 0) - (y.start or 0)) for x, y in zip(ref_words, words)]
    return {"same_words": True, "start_drift_mean_s": statistics.fmean(d) if d else 0.0,
            "start_drift_max_s": max(d) if d else 0.0}


def instrument_asr(timers: Timers, asr) -> None:
    from transformers.generation import logits_process

    model = asr.model
    timers.patch(type(asr.processor.feature_extractor), "__call__", "asr.feature_extractor")
    timers.patch(model, "generate", "asr.generate")
    timers.patch(model.model.encoder, "forward", "asr.encoder")
    timers.patch(model.model.decoder, "forward", "asr.decoder_layers")
    timers.patch(model.proj_out, "forward", "asr.lm_head")
    timers.patch(model, "_extract_token_timestamps", "asr.word_dtw")
    timers.patch(logits_process.LogitsProcessorList, "__call__", "asr.logits_processors")
    for name in dir(logits_process):  # each processor class on its own (class-level patch)
        cls = getattr(logits_process, name)
        if (isinstance(cls, type) and issubclass(cls, logits_process.LogitsProcessor)
                and "__call__" in cls.__dict__ and cls is not logits_process.LogitsProcessor):
            timers.patch(cls, "__call__", f"asr.lp.{name}")
    from transformers.generation import stopping_criteria

    timers.patch(stopping_criteria.StoppingCriteriaList, "__call__", "asr.stopping_criteria")
    timers.patch(asr.pipe, "postprocess", "asr.pipeline_postprocess(tokens->text,words)")


def instrument_diar(timers: Timers, pipeline) -> None:
    timers.patch(pipeline, "get_segmentations", "diar.segmentation")
    timers.patch(pipeline._segmentation.model, "forward", "diar.segmentation_net")
    timers.patch(pipeline, "speaker_count", "diar.speaker_count")
    timers.patch(pipeline, "get_embeddings", "diar.embeddings")
    emb = getattr(pipeline._embedding, "model_", None)
    timers.patch(emb, "compute_fbank", "diar.emb_fbank")
    timers.patch(emb, "_embed", "diar.emb_network")
    timers.patch(type(pipeline.clustering), "__call__", "diar.clustering")
    timers.patch(pipeline, "reconstruct", "diar.reconstruct")
    timers.patch(pipeline, "to_annotation", "diar.to_annotation")


# --------------------------------------------------------------------------- sections


def section_breakdown(h, model, audio, ref, args) -> dict:
    import torch
    from speaker_asr.diarization.pipeline import diarize

    cfg = asr_config(model)
    out = {"threads": args.breakdown_threads}
    torch.set_num_threads(args.breakdown_threads)
    h.models.asr.transcribe(audio[: 5 * SR], cfg, word_timestamps=True)  # warm-up (and eager switch)
    timers = Timers()
    instrument_asr(timers, h.models.asr)
    samples = []
    for _ in range(args.repeats):
        timers.reset()
        t = time.perf_counter()
        r = h.models.asr.transcribe(audio, cfg, word_timestamps=True)
        total = time.perf_counter() - t
        samples.append((total, dict(timers.total), dict(timers.calls), r.text))
    total, st, calls, text = sorted(samples, key=lambda s: s[0])[len(samples) // 2]
    dec_steps = calls.get("asr.decoder_layers", 0)
    gen = st.get("asr.generate", 0)
    inner = sum(st.get(k, 0) for k in ("asr.encoder", "asr.decoder_layers", "asr.lm_head",
                                       "asr.logits_processors", "asr.word_dtw",
                                       "asr.stopping_criteria"))
    st["asr.feature_extractor"] = st.get("asr.feature_extractor", 0.0)
    asr = {"total_s": total, "wer": wer(ref, text), "attn": attn_impl(h.models.asr.model),
           "decoder_steps": dec_steps,
           "decoder_ms_per_step": 1000 * st.get("asr.decoder_layers", 0) / dec_steps if dec_steps else None,
           "parts_s": st, "generate_other_s": gen - inner,
           "outside_generate_s": total - gen - st.get("asr.feature_extractor", 0)
           - st.get("asr.pipeline_postprocess(tokens->text,words)", 0)}
    timers.unpatch()
    out["asr"] = asr
    log(f"{model} ASR {total:.2f}s", {k: round(v, 3) for k, v in st.items()})

    timers = Timers()
    instrument_diar(timers, h.models.diarizer.pipeline)
    diarize(h.models.diarizer.pipeline, audio[: 5 * SR])  # warm-up
    samples = []
    for _ in range(args.repeats):
        timers.reset()
        reset_peak_rss()
        before = rss_mb()
        t = time.perf_counter()
        diarize(h.models.diarizer.pipeline, audio)
        total = time.perf_counter() - t
        samples.append((total, dict(timers.total), dict(timers.calls), peak_rss_mb() - before))
    total, st, calls, mem = sorted(samples, key=lambda s: s[0])[len(samples) // 2]
    timers.unpatch()
    out["diarization"] = {"total_s": total, "parts_s": st, "calls": calls, "peak_rss_over_before_mb": mem}
    log(f"{model} diarization {total:.2f}s", {k: round(v, 3) for k, v in st.items()})

    # memory of the ASR alone
    reset_peak_rss()
    before = rss_mb()
    h.models.asr.transcribe(audio, cfg, word_timestamps=True)
    out["asr"]["peak_rss_over_before_mb"] = peak_rss_mb() - before

    if args.cprofile:
        import cProfile
        import io
        import pstats

        for name, fn in (("asr", lambda: h.models.asr.transcribe(audio, cfg, word_timestamps=True)),
                         ("diarization", lambda: diarize(h.models.diarizer.pipeline, audio))):
            prof = cProfile.Profile()
            prof.enable()
            fn()
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
            path = RESULTS / f"cprofile-{model}-{name}.txt"
            path.write_text(s.getvalue())
            out[f"cprofile_{name}"] = str(path)
    if args.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            h.models.asr.transcribe(audio, cfg, word_timestamps=True)
        path = RESULTS / f"torchprof-{model}-asr.txt"
        path.write_text(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
        out["torch_profile_asr"] = str(path)
    return out


def _timeit(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def section_asr(h, model, audio, ref, args) -> dict:
    import torch

    from speaker_asr.asr.transcriber import WhisperTranscriber

    asr = h.models.asr
    cfg = asr_config(model)
    stock = asr.model
    stock.config._attn_implementation = "sdpa"  # as loaded
    variants = {}

    vt = args.variant_threads

    def run_with(m, threads=vt, words=True, transcriber=None, masks=False):
        def go():
            tr = transcriber or asr
            if transcriber is None:
                set_model(asr, m)
            torch.set_num_threads(threads)
            try:
                if masks:
                    with cached_suppress_masks():
                        return tr.transcribe(audio, cfg, word_timestamps=words)
                return tr.transcribe(audio, cfg, word_timestamps=words)
            finally:
                torch.set_num_threads(args.threads)
        return go

    # built once; each variant keeps its own model object
    enc_sdpa = copy.deepcopy(stock)
    encoder_keeps_sdpa(enc_sdpa)
    nowords = copy.deepcopy(stock)
    variants[f"stock (word ts; all eager after 1st request), {vt} thr"] = run_with(stock)
    for n in sorted({1, args.threads} - {vt}):
        variants[f"stock, {n} thr"] = run_with(stock, threads=n)
    variants["encoder kept on sdpa (decoder eager)"] = run_with(enc_sdpa)
    variants["suppress masks cached"] = run_with(stock, masks=True)
    variants["encoder sdpa + masks cached"] = run_with(enc_sdpa, masks=True)
    variants["no word timestamps (all sdpa)"] = run_with(nowords, words=False)
    if "int8" in args.asr_variants:
        q = quantized_copy(stock)
        variants["int8 dynamic Linear"] = run_with(q)
        q2 = quantized_copy(enc_sdpa)
        encoder_keeps_sdpa(q2)
        variants["int8 + encoder sdpa + masks cached"] = run_with(q2, masks=True)
    if "bf16" in args.asr_variants:
        from speaker_asr.settings import ModelSettings

        bf = WhisperTranscriber(ModelSettings(asr_model=str(MODELS[model]["hf"]), torch_dtype="bfloat16",
                                              device="cpu", diarization_model="",
                                              generation_speedups=False),
                                torch.device("cpu"), torch.bfloat16)
        variants["bfloat16"] = run_with(None, transcriber=bf)

    # warm-up each once (first call flips attention to eager where it will)
    for name, fn in variants.items():
        fn()
    times = {k: [] for k in variants}
    results, mem = {}, {}
    for rep in range(args.repeats):
        for name, fn in variants.items():
            reset_peak_rss()
            before = rss_mb()
            dt, r = _timeit(fn)
            mem[name] = max(mem.get(name, 0.0), peak_rss_mb() - before)
            times[name].append(dt)
            results[name] = r
            log(f"{model} asr[{rep}] {name}: {dt:.2f}s, peak RSS +{mem[name]:.0f} MB")
    set_model(asr, stock)
    base_name = next(iter(variants))
    base_t = statistics.median(times[base_name])
    out = {}
    for name in variants:
        r = results[name]
        med = statistics.median(times[name])
        out[name] = {"median_s": med, "all_s": times[name], "vs_stock": med / base_t,
                     "peak_rss_over_before_mb": mem[name],
                     "wer": wer(ref, r.text), "same_text_as_stock": normalize(r.text) == normalize(results[base_name].text),
                     **word_drift(results[base_name].words, r.words)}
    return out


def section_diar(h, model, audio, ref, args) -> dict:
    import torch
    from speaker_asr.diarization.pipeline import diarize

    p = h.models.diarizer.pipeline
    orig = (p.embedding_batch_size, p.segmentation_batch_size)

    def cfg(emb, seg, threads=args.variant_threads):
        def go():
            p.embedding_batch_size, p.segmentation_batch_size = emb, seg
            torch.set_num_threads(threads)
            try:
                return diarize(p, audio)
            finally:
                torch.set_num_threads(args.threads)
                p.embedding_batch_size, p.segmentation_batch_size = orig
        return go

    vt = args.variant_threads
    variants = {f"emb {e} / seg {s}, {vt} thr": cfg(e, s) for e, s in
                ((32, 32), (1, 32), (8, 32), (64, 32), (32, 1), (32, 8), (32, 64))}
    for n in sorted({1, args.threads} - {vt}):
        variants[f"emb 32 / seg 32, {n} thr"] = cfg(32, 32, threads=n)
    diarize(p, audio[: 5 * SR])
    times = {k: [] for k in variants}
    mem, turns = {}, {}
    for rep in range(args.repeats):
        for name, fn in variants.items():
            reset_peak_rss()
            before = rss_mb()
            dt, r = _timeit(fn)
            mem[name] = max(mem.get(name, 0), peak_rss_mb() - before)
            times[name].append(dt)
            turns[name] = [(round(t.start, 2), round(t.end, 2), t.speaker) for t in r.turns]
            log(f"{model} diar[{rep}] {name}: {dt:.2f}s")
    base = next(iter(variants))
    base_t = statistics.median(times[base])
    return {name: {"median_s": statistics.median(times[name]), "all_s": times[name],
                   "vs_default": statistics.median(times[name]) / base_t,
                   "peak_rss_over_before_mb": mem[name], "same_turns": turns[name] == turns[base]}
            for name in variants}


def section_concurrency(h, model, audio, ref, args) -> dict:
    import torch
    from speaker_asr.diarization.pipeline import diarize

    cfg = asr_config(model)
    n = args.threads

    def asr_job(threads):
        torch.set_num_threads(threads)
        t = time.perf_counter()
        r = h.models.asr.transcribe(audio, cfg, word_timestamps=True)
        return time.perf_counter() - t, r

    def diar_job(threads):
        torch.set_num_threads(threads)
        t = time.perf_counter()
        d = diarize(h.models.diarizer.pipeline, audio)
        return time.perf_counter() - t, d

    def sequential(threads):
        def go():
            a, _ = asr_job(threads)
            d, _ = diar_job(threads)
            torch.set_num_threads(n)
            return {"asr_s": a, "diar_s": d}
        return go

    def concurrent(asr_threads, diar_threads):
        def go():
            with ThreadPoolExecutor(1) as pool:
                fut = pool.submit(diar_job, diar_threads)
                a, _ = asr_job(asr_threads)
                d, _ = fut.result()
            torch.set_num_threads(n)
            return {"asr_s": a, "diar_s": d}
        return go

    variants = {f"sequential, {n} thr": sequential(n),
                f"thread beside ASR, {n}+{n} thr (the handler's way)": concurrent(n, n)}
    if n > 1:
        half = max(1, n // 2)
        variants["sequential, 1 thr"] = sequential(1)
        variants[f"thread beside ASR, {n - half}+{half} thr"] = concurrent(n - half, half)
    h.models.asr.transcribe(audio[: 5 * SR], cfg, word_timestamps=True)
    times = {k: [] for k in variants}
    parts = {k: [] for k in variants}
    for rep in range(args.repeats):
        for name, fn in variants.items():
            dt, p = _timeit(fn)
            times[name].append(dt)
            parts[name].append(p)
            log(f"{model} concurrency[{rep}] {name}: {dt:.2f}s {p}")
    base = next(iter(variants))
    base_t = statistics.median(times[base])
    return {name: {"median_wall_s": statistics.median(times[name]), "all_s": times[name],
                   "vs_sequential": statistics.median(times[name]) / base_t, "parts": parts[name]}
            for name in variants}


# --------------------------------------------------------------------------- report


def report(doc: dict) -> str:
    lines = [f"Profile run {doc['started']}: `python bench/profile_cpu.py {' '.join(doc['argv'])}`  ",
             f"Machine: {doc['machine']['nproc']} CPUs ({doc['machine']['cpu_model']}), torch "
             f"{doc['machine'].get('torch')}, {doc['threads']} threads; load average at start "
             f"{doc['load_start']}, at end {doc['load_end']}.", ""]
    for model, sec in doc["models"].items():
        lines.append(f"## {model}")
        b = sec.get("breakdown")
        if b:
            a = b["asr"]
            lines.append(f"\nBreakdown at {b.get('threads')} thread(s).")
            lines.append(f"\nASR alone (word timestamps, {doc.get('input')}): {a['total_s']:.2f} s, WER "
                         f"{fmt(a['wer'], 3)}, attention {a['attn']}, {a['decoder_steps']} decoder "
                         f"steps ({fmt(a['decoder_ms_per_step'], 1)} ms/step), peak RSS +"
                         f"{fmt(a.get('peak_rss_over_before_mb'), 0)} MB\n")
            lines.append("| part | s | share |\n|---|---|---|")
            for k, v in sorted(a["parts_s"].items(), key=lambda kv: -kv[1]):
                lines.append(f"| {k} | {v:.3f} | {100 * v / a['total_s']:.0f} % |")
            lines.append(f"| generate: other (loop, cache, stopping) | {a['generate_other_s']:.3f} | "
                         f"{100 * a['generate_other_s'] / a['total_s']:.0f} % |")
            lines.append(f"| outside generate (pipeline chunking, detect_language, ...) | "
                         f"{a['outside_generate_s']:.3f} | {100 * a['outside_generate_s'] / a['total_s']:.0f} % |")
            d = b["diarization"]
            lines.append(f"\nDiarization alone ({doc.get('input')}): {d['total_s']:.2f} s, peak RSS "
                         f"+{fmt(d['peak_rss_over_before_mb'], 0)} MB\n")
            lines.append("| part | s | calls | share |\n|---|---|---|---|")
            for k, v in sorted(d["parts_s"].items(), key=lambda kv: -kv[1]):
                lines.append(f"| {k} | {v:.3f} | {d['calls'].get(k)} | {100 * v / d['total_s']:.0f} % |")
        inp = doc.get("input", "30s")
        for key, title, col in (("asr", f"ASR variants (word timestamps on, {inp})", "vs_stock"),
                                ("diar", f"Diarization variants ({inp})", "vs_default"),
                                ("concurrency", f"ASR + diarization ({inp})", "vs_sequential")):
            s = sec.get(key)
            if not s:
                continue
            lines.append(f"\n{title}\n")
            if key == "asr":
                lines.append("| variant | median s | ratio | WER | same text | word start drift mean / max s "
                             "| peak RSS + MB |")
                lines.append("|---|---|---|---|---|---|---|")
                for name, v in s.items():
                    drift = (f"{v['start_drift_mean_s']:.3f} / {v['start_drift_max_s']:.2f}"
                             if v.get("same_words") else ("words differ" if "same_words" in v else "–"))
                    lines.append(f"| {name} | {v['median_s']:.2f} | {v[col]:.2f} | {fmt(v['wer'], 3)} | "
                                 f"{v['same_text_as_stock']} | {drift} | "
                                 f"{fmt(v.get('peak_rss_over_before_mb'), 0)} |")
            elif key == "diar":
                lines.append("| variant | median s | ratio | peak RSS + MB | same turns |\n|---|---|---|---|---|")
                for name, v in s.items():
                    lines.append(f"| {name} | {v['median_s']:.2f} | {v[col]:.2f} | "
                                 f"{fmt(v['peak_rss_over_before_mb'], 0)} | {v['same_turns']} |")
            else:
                lines.append("| variant | median wall s | ratio | ASR s / diar s (last) |\n|---|---|---|---|")
                for name, v in s.items():
                    p = v["parts"][-1]
                    lines.append(f"| {name} | {v['median_wall_s']:.2f} | {v[col]:.2f} | "
                                 f"{p['asr_s']:.2f} / {p['diar_s']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny.en,base")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma list of: " + ", ".join(SECTIONS))
    ap.add_argument("--input", default="30s")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--variant-threads", type=int, default=1,
                    help="threads for the asr/diar variants (1: steadier on a shared machine); the "
                         "stock setting also runs at 1 and at --threads")
    ap.add_argument("--breakdown-threads", type=int, default=1)
    ap.add_argument("--asr-variants", default="int8,bf16", help="optional ASR variants: int8,bf16")
    ap.add_argument("--diar-every-model", action="store_true",
                    help="run the diar section for every model (default: the first only)")
    ap.add_argument("--results-md", default=None,
                    help="also write the report to this file (e.g. bench/profile_results.md)")
    ap.add_argument("--cprofile", action="store_true", help="write cProfile listings to bench/results/")
    ap.add_argument("--torch-profile", action="store_true", help="write a torch.profiler op table")
    args = ap.parse_args()
    setup_env()
    import torch

    torch.set_num_threads(args.threads)
    from speaker_asr.audio.decode import decode_audio

    RESULTS.mkdir(parents=True, exist_ok=True)
    path, ref = get_input(args.input)
    audio = decode_audio(path.read_bytes())
    started = datetime.now(timezone.utc)
    doc = {"started": started.isoformat(), "argv": sys.argv[1:], "machine": machine(),
           "threads": args.threads, "input": args.input, "load_start": loadavg(), "models": {}}
    sections = [s for s in args.sections.split(",") if s]
    fns = {"breakdown": section_breakdown, "asr": section_asr, "diar": section_diar,
           "concurrency": section_concurrency}
    out = RESULTS / f"profile-{started.strftime('%Y%m%d-%H%M%S')}.json"
    for model in args.models.split(","):
        h = load(model, args.threads)
        doc["models"][model] = {}
        for s in sections:
            if s == "diar" and model != args.models.split(",")[0] and not args.diar_every_model:
                continue  # the same pyannote pipeline whatever the Whisper model
            log(f"{model}: {s}")
            doc["models"][model][s] = fns[s](h, model, audio, ref, args)
            doc["load_end"] = loadavg()
            out.write_text(json.dumps(doc, indent=1, default=str))
        del h
    doc["load_end"] = loadavg()
    out.write_text(json.dumps(doc, indent=1, default=str))
    md = report(doc)
    (out.with_suffix(".md")).write_text(md)
    if args.results_md:
        path = Path(args.results_md)
        path.write_text("# CPU profile (latest run)\n\nWritten by `bench/profile_cpu.py`; see bench/README.md. "
                        "Raw numbers: bench/results/profile-*.json (not committed).\n\n" + md + "\n")
    print(md)
    print(f"JSON: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
