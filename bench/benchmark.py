"""End-to-end CPU benchmark of the endpoint handler, side by side with faster-whisper.

Every configuration (input x model x mode) runs in a fresh subprocess, so its peak RSS is its own.
Run from the repository root:

    .venv/bin/python bench/benchmark.py --quick                     # tiny.en, 8 s + 30 s
    .venv/bin/python bench/benchmark.py                             # 8 s, 30 s, 60 s; tiny.en, base
    .venv/bin/python bench/benchmark.py --inputs 10min --allow-long # long inputs only on request

Prints a markdown table, writes bench/results/benchmark-<time>.json (gitignored) and the latest
table to bench/results.md. See bench/README.md for the columns.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from common import (BENCH, INPUTS, LONG_INPUTS, MODELS, PIPELINE, RESULTS, SR, Timers,  # noqa: E402
                    fmt, get_input, lifetime_peak_rss_mb, loadavg, machine, peak_rss_mb,
                    reset_peak_rss, rss_mb, setup_env, wav_bytes, wer)

MODES = ("plain", "sequential", "assisted", "auto", "fw")
# process-level settings compared side by side (--variants): name -> (threads or None for --threads, env)
VARIANTS = {
    "default": (None, {}),
    "threads1": (1, {}),
    "omp-passive": (None, {"OMP_WAIT_POLICY": "PASSIVE"}),
    # the ASR alone, as faster-whisper runs: no diarization thread beside it, word timestamps on
    "asr-only": (None, {"BENCH_ASR_ONLY": "1"}),
    "asr-only-1t": (1, {"BENCH_ASR_ONLY": "1"}),
    # the same with the opt-in TORCH_DTYPE=bfloat16 (faster where the CPU has bf16 instructions; the
    # text can change, see bench/README.md)
    "asr-only-bf16": (None, {"BENCH_ASR_ONLY": "1", "TORCH_DTYPE": "bfloat16"}),
    # the opt-in QUANTIZATION=int8 (int8 decoder weights, bfloat16 model): faster-whisper's like
    "asr-only-int8": (None, {"BENCH_ASR_ONLY": "1", "QUANTIZATION": "int8"}),
    # QUANTIZATION=int8 in its dynamic form (int8 activations, float32 model), which the handler
    # picks by itself where bfloat16 is not native; TORCH_DTYPE=float32 forces it anywhere
    "asr-only-int8-dynamic": (None, {"BENCH_ASR_ONLY": "1", "QUANTIZATION": "int8", "TORCH_DTYPE": "float32"}),
    # word times from transformers' attention output at every step (the alignment_heads_only
    # patch skipped, every other one applied)
    "asr-only-stock-word-times": (None, {"BENCH_ASR_ONLY": "1", "BENCH_STOCK_WORD_TIMES": "1"}),
    # the handler without its warm-up at load (WARMUP=false): load_s in the JSON without it, and
    # with --no-warmup the cold first request it would otherwise have paid for
    "warmup-off": (None, {"WARMUP": "false"}),
}
# --emulate-cpu: keep every library of both sides off the instructions such a CPU lacks
EMULATED_CPUS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2"},
}
WARMUP_S = 5.0  # the warm-up request: the input's first seconds (lazy initialisation, eager switch)
FW_OPTIONS = {"beam_size": 1, "word_timestamps": True, "vad_filter": False}


# --------------------------------------------------------------------------- workers


def _handler_params(model: str, mode: str) -> dict:
    params: dict = {}
    if MODELS[model]["multilingual"]:
        params["language"] = "en"  # same as faster-whisper below: no language detection pass
    # explicit in every mode: the handler's default may be "auto"
    params["assisted"] = {"plain": False, "sequential": False, "assisted": True, "auto": "auto"}[mode]
    if mode == "sequential":
        params["long_form"] = "sequential"  # Whisper's own long-form loop instead of batched chunks
    if os.environ.get("BENCH_ASR_ONLY"):
        params["return_word_timestamps"] = True  # as faster-whisper's word_timestamps=True
    return params


def auto_supported() -> tuple[bool, str]:
    """Does the handler's config accept ``assisted: "auto"``? (checked, not assumed)"""
    setup_env()
    from speaker_asr.config import InferenceConfig, ModelCapabilities

    caps = ModelCapabilities(has_assistant=True)
    try:
        InferenceConfig.from_request({"assisted": "auto"}, caps)
        return True, ""
    except ValueError as exc:
        return False, f"config.py rejects assisted='auto' ({str(exc)[:160]})"


def worker_handler(spec: dict) -> dict:
    setup_env()
    import torch

    torch.set_num_threads(spec["threads"])
    from speaker_asr.settings import ModelSettings
    from speaker_asr import endpoint as handler_mod, pipeline as steps_mod
    from speaker_asr.endpoint import EndpointHandler

    m = MODELS[spec["model"]]
    assisted = spec["mode"] in ("assisted", "auto")
    import contextlib

    from speaker_asr.patches import registry

    stock = registry.skipping("alignment_heads_only", "benchmark: stock word times") \
        if os.environ.get("BENCH_STOCK_WORD_TIMES") else contextlib.nullcontext()
    rss0 = rss_mb()
    t = time.perf_counter()
    with stock:
        h = EndpointHandler(settings=ModelSettings(
            asr_model=str(m["hf"]), assistant_model=str(m["assistant"]) if assisted else None,
            diarization_model="" if os.environ.get("BENCH_ASR_ONLY") else str(PIPELINE), device="cpu"))
    load_s = time.perf_counter() - t
    rss_loaded = rss_mb()

    path, reference = get_input(spec["input"])
    data = path.read_bytes()
    from speaker_asr.audio.decode import decode_audio

    audio = decode_audio(data)
    duration = len(audio) / SR
    warm = base64.b64encode(wav_bytes(audio[: int(WARMUP_S * SR)])).decode()
    payload = base64.b64encode(data).decode()  # what a client sends; encoding it is not timed
    params = _handler_params(spec["model"], spec["mode"])

    timers = Timers(keep_spans=("asr", "diarization"))
    timers.patch(handler_mod, "preprocess_inputs", "decode")
    timers.patch(steps_mod, "diarize", "diarization")
    timers.patch(steps_mod, "attribute", "alignment")
    timers.patch(steps_mod, "rename_speakers", "alignment")
    timers.patch(h.models.asr, "transcribe", "asr")
    model = h.models.asr.model
    timers.patch(type(h.models.asr.processor.feature_extractor), "__call__", "asr.features")
    timers.patch(model.model.encoder, "forward", "asr.encoder")
    timers.patch(model.model.decoder, "forward", "asr.decoder")
    timers.patch(model, "_extract_token_timestamps", "asr.word_dtw")
    if h.models.asr.assistant is not None:
        timers.patch(h.models.asr.assistant.model.decoder, "forward", "asr.assistant_decoder")
    used_assistant = []
    timed_transcribe = h.models.asr.transcribe

    def transcribe(*a, **k):  # records whether the assistant drafted (assisted="auto" decides)
        r = timed_transcribe(*a, **k)
        used_assistant.append(getattr(r, "assisted", None))
        return r

    h.models.asr.transcribe = transcribe

    if spec["warmup"]:
        h({"inputs": warm, "parameters": params})
    policy = getattr(h.models.asr, "assist_policy", None)
    auto_learning = 0
    if spec["mode"] == "auto" and policy is not None and h.models.asr.assistant is not None:
        # assisted="auto" learns which mode is faster from the requests it serves (assist_policy.py):
        # measure the steady state of a deployment that has served this kind of request, not its
        # first requests (ASR only: the diarization does not depend on the mode)
        from speaker_asr.config import InferenceConfig

        cfg = InferenceConfig.from_request(params, h.models.capabilities)
        if cfg.assist_eligible(duration, True):
            while min(v["timings"] for v in policy.snapshot().values()) < policy.min_samples:
                timed_transcribe(audio, cfg, word_timestamps=True)
                auto_learning += 1
    del audio  # the measured requests decode their own copy
    runs = []
    reset_ok = reset_peak_rss()
    rss_before = rss_mb()
    for _ in range(spec["repeats"]):
        timers.reset()
        t = time.perf_counter()
        response = h({"inputs": payload, "parameters": params})
        e2e = time.perf_counter() - t
        both = timers.union_s("asr", "diarization")
        runs.append({"e2e_s": e2e, "stages": dict(timers.total), "calls": dict(timers.calls),
                     "text": response.get("text", ""), "asr_diar_wall_s": both,
                     "overlap_s": sum(timers.total.get(k, 0.0) for k in ("asr", "diarization")) - both})
    peak = peak_rss_mb()
    run = sorted(runs, key=lambda r: r["e2e_s"])[len(runs) // 2]  # the median run
    st = run["stages"]
    stages = {k: st.get(k) for k in ("decode", "asr", "diarization", "alignment")}
    # diarization may run beside the ASR (a thread): count their common wall time once
    known = (stages["decode"] or 0) + (stages["alignment"] or 0) + run["asr_diar_wall_s"]
    return {
        **spec, "kind": "handler", "duration_s": duration, "load_s": load_s,
        "load_warmup_s": getattr(h, "warmup", None),
        "decode_s": stages["decode"], "asr_s": stages["asr"], "diar_s": stages["diarization"],
        "align_s": stages["alignment"], "e2e_s": run["e2e_s"], "other_s": run["e2e_s"] - known,
        "asr_diar_overlap_s": run["overlap_s"],
        "e2e_all_s": [r["e2e_s"] for r in runs], "rtf": run["e2e_s"] / duration,
        "asr_breakdown": {k: v for k, v in st.items() if k.startswith("asr.")},
        "asr_calls": {k: v for k, v in run["calls"].items() if k.startswith("asr.")},
        "decoder_steps": run["calls"].get("asr.decoder"),
        "wer": wer(reference, run["text"]), "text": run["text"], "params": params,
        "assistant_used": used_assistant[-1] if used_assistant else None,
        "auto_learning_requests": auto_learning,
        "auto_policy": policy.snapshot() if policy is not None and spec["mode"] == "auto" else None,
        "rss_start_mb": rss0, "rss_loaded_mb": rss_loaded, "rss_before_request_mb": rss_before,
        "peak_rss_mb": peak if reset_ok else None,
        "peak_above_loaded_mb": (peak - rss_loaded) if reset_ok and peak and rss_loaded else None,
        "lifetime_peak_rss_mb": lifetime_peak_rss_mb(),
        "speakers": len(response.get("speakers") and {s["speaker"] for s in response["speakers"]} or []),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "quantization": getattr(h.models.asr, "quantization", None),
    }


def worker_fw(spec: dict) -> dict:
    setup_env()
    from faster_whisper import WhisperModel
    from faster_whisper import decode_audio as fw_decode

    m = MODELS[spec["model"]]
    rss0 = rss_mb()
    t = time.perf_counter()
    model = WhisperModel(str(m["ct2"]), device="cpu", compute_type="int8",
                         cpu_threads=spec["threads"], num_workers=1)
    load_s = time.perf_counter() - t
    rss_loaded = rss_mb()
    path, reference = get_input(spec["input"])
    options = {**FW_OPTIONS, "language": "en"}

    def transcribe(audio):
        segments, info = model.transcribe(audio, **options)
        segs = list(segments)  # the generator does the work
        return "".join(s.text for s in segs), sum(len(s.words or []) for s in segs)

    if spec["warmup"]:
        transcribe(fw_decode(str(path), sampling_rate=SR)[: int(WARMUP_S * SR)])
    reset_ok = reset_peak_rss()
    runs = []
    for _ in range(spec["repeats"]):
        t = time.perf_counter()
        audio = fw_decode(str(path), sampling_rate=SR)
        decode_s = time.perf_counter() - t
        t = time.perf_counter()
        text, n_words = transcribe(audio)
        asr_s = time.perf_counter() - t
        runs.append({"decode_s": decode_s, "asr_s": asr_s, "text": text, "words": n_words})
    peak = peak_rss_mb()
    run = sorted(runs, key=lambda r: r["asr_s"])[len(runs) // 2]
    duration = len(audio) / SR
    e2e = run["decode_s"] + run["asr_s"]
    return {
        **spec, "kind": "faster-whisper", "duration_s": duration, "load_s": load_s,
        "decode_s": run["decode_s"], "asr_s": run["asr_s"], "diar_s": None, "align_s": None,
        "e2e_s": e2e, "asr_all_s": [r["asr_s"] for r in runs], "rtf": e2e / duration,
        "wer": wer(reference, run["text"]), "text": run["text"], "word_count": run["words"],
        "options": {**options, "compute_type": "int8", "cpu_threads": spec["threads"]},
        "rss_start_mb": rss0, "rss_loaded_mb": rss_loaded, "peak_rss_mb": peak if reset_ok else None,
        "peak_above_loaded_mb": (peak - rss_loaded) if reset_ok and peak and rss_loaded else None,
        "lifetime_peak_rss_mb": lifetime_peak_rss_mb(),
    }


def run_worker(spec: dict) -> dict:
    spec = dict(spec)
    spec["load_start"] = loadavg()
    result = worker_fw(spec) if spec["mode"] == "fw" else worker_handler(spec)
    result["load_end"] = loadavg()
    return result


# --------------------------------------------------------------------------- driver


def spawn(spec: dict, timeout: float, log_dir: Path) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as tmp:
        out = Path(tmp.name)
    log = log_dir / f"{spec['input']}-{spec['model']}-{spec['mode']}-{spec['variant']}.log"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec),
           "--result-file", str(out)]
    env = {**os.environ, **spec.get("env", {})}
    t = time.perf_counter()
    try:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        if proc.returncode != 0:
            tail = log.read_text().strip().splitlines()[-3:]
            return {**spec, "error": f"exit {proc.returncode}: {' | '.join(tail)[:400]}"}
        result = json.loads(out.read_text())
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    finally:
        out.unlink(missing_ok=True)
    result["subprocess_s"] = time.perf_counter() - t
    return result


def table(results: list[dict]) -> str:
    fw = {(r["input"], r["model"], r["variant"]): r for r in results
          if r.get("mode") == "fw" and "error" not in r}
    variants = len({r["variant"] for r in results}) > 1
    head = ("| input | dur s | model | mode | decode s | ASR s | diar s | align s | e2e s | RTF "
            "| ASR ours/fw | WER | peak RSS MB | RSS over loaded MB |")
    if variants:
        head = head.replace("| mode |", "| mode | variant |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['input']} | | {r['model']} | {r['mode']} |"
                         + (f" {r['variant']} |" if variants else "")
                         + f" error: {r['error'][:120]} | | | | | | | | | |")
            continue
        ratio = None
        ref = fw.get((r["input"], r["model"], r["variant"]))
        if r["mode"] != "fw" and ref and r.get("asr_s") and ref.get("asr_s"):
            ratio = r["asr_s"] / ref["asr_s"]
        mode = "faster-whisper int8" if r["mode"] == "fw" else r["mode"]
        if r["mode"] == "auto" and r.get("assistant_used") is not None:
            mode += f" ({'assisted' if r['assistant_used'] else 'plain'})"
        if r.get("quantization"):
            mode += f" (int8 {r['quantization']['path']})"
        if variants:
            mode += f" | {r['variant']}"
        lines.append(
            f"| {r['input']} | {r['duration_s']:.1f} | {r['model']} | {mode} | {fmt(r['decode_s'], 3)} "
            f"| {fmt(r['asr_s'])} | {fmt(r['diar_s'])} | {fmt(r['align_s'], 3)} | {fmt(r['e2e_s'])} "
            f"| {fmt(r['rtf'], 3)} | {fmt(ratio)} | {fmt(r['wer'], 3)} | {fmt(r['peak_rss_mb'], 0)} "
            f"| {fmt(r['peak_above_loaded_mb'], 0)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny.en,base", help="comma list of: " + ", ".join(MODELS))
    ap.add_argument("--inputs", default="8s,30s,60s", help="comma list of: " + ", ".join(INPUTS))
    ap.add_argument("--modes", default="plain,assisted,auto,fw",
                    help="comma list of: plain (batched, chunked), sequential (plain, long_form="
                         "sequential), assisted (models with an assistant), "
                         "auto (only if config.py accepts assisted='auto'), fw (faster-whisper int8)")
    ap.add_argument("--quick", action="store_true", help="tiny.en only; 8 s and 30 s; plain + fw")
    ap.add_argument("--allow-long", action="store_true", help="permit the 10min/60min inputs")
    ap.add_argument("--repeats", type=int, default=1, help="measured requests per configuration "
                                                         "(the median is reported)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads / CTranslate2 cpu_threads (default: nproc)")
    ap.add_argument("--variants", default="default",
                    help="process settings to compare side by side, comma list of: "
                         "default (--threads, environment as is), threads1 (1 torch/CTranslate2 thread), "
                         "omp-passive (OMP_WAIT_POLICY=PASSIVE), asr-only / asr-only-1t (no diarization, word "
                         "timestamps on: the ASR alone, as faster-whisper runs)")
    ap.add_argument("--no-warmup", action="store_true", help="measure the first request (cold)")
    ap.add_argument("--emulate-cpu", choices=sorted(EMULATED_CPUS),
                    help="run every row (faster-whisper's too) as on a CPU with only these instructions "
                         "(avx2: no AVX-512, no bfloat16), through each library's own ISA switch")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per configuration")
    ap.add_argument("--no-results-md", action="store_true", help="do not overwrite bench/results.md")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result-file", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        result = run_worker(json.loads(args.worker))
        Path(args.result_file).write_text(json.dumps(result, default=str))
        return

    if args.quick:
        args.models, args.inputs, args.modes = "tiny.en", "8s,30s", "plain,fw"
    models = [m for m in args.models.split(",") if m]
    inputs = [i for i in args.inputs.split(",") if i]
    modes = [m for m in args.modes.split(",") if m]
    variants = [v for v in args.variants.split(",") if v]
    for name, known, what in ((models, MODELS, "model"), (inputs, INPUTS, "input"), (modes, MODES, "mode"),
                              (variants, VARIANTS, "variant")):
        bad = [n for n in name if n not in known]
        if bad:
            ap.error(f"unknown {what}(s) {bad}; known: {', '.join(known)}")
    long_ = [i for i in inputs if i in LONG_INPUTS]
    if long_ and not args.allow_long:
        ap.error(f"{', '.join(long_)} take long on CPU: add --allow-long to run them")

    notes = []
    if "auto" in modes:
        ok, why = auto_supported()
        if not ok:
            modes.remove("auto")
            notes.append(f"mode 'auto' skipped: {why}")
    try:
        import faster_whisper  # noqa: F401
    except ImportError:
        if "fw" in modes:
            modes.remove("fw")
            notes.append("faster-whisper not installed (.venv/bin/pip install faster-whisper): skipped")

    started = datetime.now(timezone.utc)
    load_start = loadavg()
    for label in inputs:  # build (and cache) the concatenations once, before any worker
        path, _ = get_input(label)
        if not path.exists():
            sys.exit(f"input {label}: {path} is missing")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    log_dir = RESULTS / f"logs-{stamp}"
    log_dir.mkdir(parents=True, exist_ok=True)

    specs = []
    for label in inputs:
        for model in models:
            for mode in modes:
                if mode in ("assisted", "auto") and not MODELS[model]["assistant"]:
                    continue
                for variant in variants:
                    threads, env = VARIANTS[variant]
                    specs.append({"input": label, "model": model, "mode": mode, "variant": variant,
                                  "threads": threads or args.threads,
                                  "env": {**EMULATED_CPUS.get(args.emulate_cpu or "", {}), **env},
                                  "repeats": args.repeats, "warmup": not args.no_warmup})
    results = []
    for spec in specs:
        print(f"[{time.strftime('%H:%M:%S')}] {spec['input']} {spec['model']} {spec['mode']} {spec['variant']} "
              f"(load {loadavg()[0]:.2f}) ...", file=sys.stderr, flush=True)
        r = spawn(spec, args.timeout, log_dir)
        results.append(r)
        if "error" in r:
            print(f"    error: {r['error']}", file=sys.stderr)
        else:
            print(f"    e2e {r['e2e_s']:.2f} s  asr {fmt(r['asr_s'])} s  wer {fmt(r['wer'], 3)}",
                  file=sys.stderr, flush=True)
    load_end = loadavg()
    mach = machine()
    doc = {"started": started.isoformat(), "argv": sys.argv[1:], "machine": mach,
           "load_start": load_start, "load_end": load_end, "notes": notes, "results": results}
    out = RESULTS / f"benchmark-{stamp}.json"
    out.write_text(json.dumps(doc, indent=1, default=str))

    md = table(results)
    header = (f"Run {started.strftime('%Y-%m-%d %H:%M UTC')}: `python bench/benchmark.py "
              f"{' '.join(sys.argv[1:])}`\n\n"
              f"Machine: {mach['nproc']} CPUs ({mach['cpu_model']}), {mach.get('mem_gib', '?')} GiB, "
              f"torch {mach.get('torch')} ({args.threads} threads unless the variant says otherwise), transformers "
              f"{mach.get('transformers')}, pyannote.audio {mach.get('pyannote.audio')}, "
              f"faster-whisper {mach.get('faster-whisper')} / ctranslate2 {mach.get('ctranslate2')}.  \n"
              f"CPU instructions: {', '.join(mach.get('cpu_flags', [])) or 'unknown'}; torch kernels "
              f"{mach.get('cpu_capability')}, bfloat16 {mach.get('bfloat16')}"
              + (f"; **emulated {args.emulate_cpu.upper()}-only CPU** ("
                 + ", ".join(f"{k}={v}" for k, v in EMULATED_CPUS[args.emulate_cpu].items())
                 + "; every row measured that way)" if args.emulate_cpu else "") + ".  \n"
              f"Load average (1/5/15 min) at start {load_start}, at end {load_end}.  \n"
              f"One warm-up request ({WARMUP_S:.0f} s) before the measured one"
              f"{'' if not args.no_warmup else ' (disabled)'}; {args.repeats} measured request(s), "
              "median shown; every row is a fresh process.\n")
    text = header + "\n" + md + "\n" + "".join(f"\n- {n}" for n in notes) + "\n"
    print("\n" + text)
    if not args.no_results_md:
        (BENCH / "results.md").write_text(
            "# Benchmark results (latest run)\n\nWritten by `bench/benchmark.py`; columns are explained "
            "in bench/README.md. Raw numbers: bench/results/*.json (not committed).\n\n" + text)
    print(f"JSON: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
