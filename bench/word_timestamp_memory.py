"""Peak memory of word timestamps on a large-v3-shaped Whisper, on demand.

Runs the handler's ASR (``WhisperTranscriber.transcribe``, chunked windows in one batch) with a
random, thin large-v3-shaped model -- 128 mel bins, 32 decoder layers x 20 heads, large-v3's 10
alignment heads, d_model 320, 4 encoder layers (the encoder's size is the same with and without
word timestamps) -- and reports the peak memory above the loaded model with and without word
timestamps at batch 1, 8 and 24. Every generated window has exactly ``--tokens`` tokens (the
end-of-text token is suppressed), so both sides decode the same amount.

    .venv/bin/python bench/word_timestamp_memory.py                       # batch 1, 8, 24 on CPU
    .venv/bin/python bench/word_timestamp_memory.py --stock               # + transformers' own path
    .venv/bin/python bench/word_timestamp_memory.py --device cuda --d-model 1280 --encoder-layers 32

Each configuration runs in a fresh subprocess. CPU: the peak resident set (VmHWM, reset after a
warm-up request) during the measured request; CUDA: ``torch.cuda.max_memory_allocated`` during
it. "Above the model" subtracts what the process held right after loading the model. ``--stock`` adds
transformers' own word-timestamp path (every layer's attention at every step), where it is
expected to fit in memory (at batch 24 it needs tens of GB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(out: Path, d_model: int, encoder_layers: int, ffn_dim: int | None = None) -> Path:
    """The large-v3-shaped Whisper (thin unless told otherwise), with end-of-text suppressed
    (fixed token counts)."""
    from transformers import GenerationConfig

    from speaker_asr.testing.tiny_models import LARGE_V3_SHAPE, build_whisper

    shape = {**LARGE_V3_SHAPE, "d_model": d_model, "encoder_layers": encoder_layers, "ffn_dim": ffn_dim}
    path = build_whisper(out, multilingual=True, seed=7, **shape)
    gen = GenerationConfig.from_pretrained(path)
    gen.suppress_tokens = sorted(set(gen.suppress_tokens) | {gen.eos_token_id})
    gen.save_pretrained(path)
    return path


def worker(args) -> dict:
    import numpy as np
    import torch

    from common import peak_rss_mb, reset_peak_rss, rss_mb
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device
    from speaker_asr.audio.decode import SAMPLE_RATE
    from speaker_asr.config import InferenceConfig
    from speaker_asr.settings import ModelSettings
    from speaker_asr.patches import registry

    import contextlib

    # stock-words: transformers' own word timestamps, every other patch on
    stock = registry.skipping("alignment_heads_only", "benchmark: stock path") \
        if args.variant == "stock-words" else contextlib.nullcontext()
    settings = ModelSettings(asr_model=args.model, assistant_model="", diarization_model="",
                             max_new_tokens=args.tokens, device=args.device)
    with stock:
        transcriber = WhisperTranscriber(settings, *resolve_device(settings))
    cuda = transcriber.device.type == "cuda"
    loaded = torch.cuda.memory_allocated() if cuda else rss_mb() * 2 ** 20
    words = args.variant != "plain"
    rng = np.random.default_rng(0)
    # batch B: chunked windows of 30 s every 20 s (the pipeline's 5 s strides) -> B windows
    seconds = 30.0 if args.batch == 1 else 30.0 + 20.0 * (args.batch - 1) - 1.0
    audio = (0.1 * rng.standard_normal(int(seconds * SAMPLE_RATE))).astype(np.float32)
    cfg = InferenceConfig(language="en", batch_size=args.batch, long_form="chunked")
    transcriber.transcribe(audio[: 5 * SAMPLE_RATE], cfg, word_timestamps=words)  # warm-up
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        reset_peak_rss()
    started = time.perf_counter()
    result = transcriber.transcribe(audio, cfg, word_timestamps=words)
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = peak_rss_mb() * 2 ** 20
    return {"variant": args.variant, "batch": args.batch, "seconds": seconds,
            "peak_mb": peak / 2 ** 20, "loaded_mb": loaded / 2 ** 20,
            "wall_s": time.perf_counter() - started, "words": len(result.words or []),
            "device": str(transcriber.device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,8,24")
    parser.add_argument("--tokens", type=int, default=100, help="generated tokens per window")
    parser.add_argument("--d-model", type=int, default=320)
    parser.add_argument("--encoder-layers", type=int, default=4)
    parser.add_argument("--device", default=None, help="cpu (default without a GPU) or cuda")
    parser.add_argument("--stock", action="store_true",
                        help="also transformers' own path, where it should fit (batch <= 8 on CPU)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(HERE / "results"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--model", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # (common.py is beside this script: sys.path[0])
    if args.worker:
        print("RESULT " + json.dumps(worker(args)), flush=True)
        return

    import torch

    from common import machine

    model = build(Path(tempfile.mkdtemp()) / "large-v3-shaped", args.d_model, args.encoder_layers)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        variants = ["plain", "words"]
        if args.stock and (batch <= 8 or (args.device or "").startswith("cuda")):
            variants.append("stock-words")
        for variant in variants:
            command = [sys.executable, __file__, "--worker", "--variant", variant, "--batch", str(batch),
                       "--model", str(model), "--tokens", str(args.tokens)]
            if args.device:
                command += ["--device", args.device]
            done = subprocess.run(command, capture_output=True, text=True)
            line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if done.returncode or not line:
                rows.append({"variant": variant, "batch": batch, "error": done.stderr.strip()[-300:]})
            else:
                rows.append(json.loads(line[0][len("RESULT "):]))
            print(rows[-1], flush=True)
    info = machine()
    facts = (f"{info.get('cpu_model')}, {info.get('nproc')} CPUs, "
             f"avx512_bf16={'avx512_bf16' in info.get('cpu_flags', [])}; transformers {info.get('transformers')}")
    lines = [f"# Word-timestamp memory, large-v3-shaped (d_model {args.d_model}, {args.encoder_layers} "
             f"encoder layers, 32 x 20 decoder, {args.tokens} tokens per window)", "",
             f"Machine: {facts}; torch {torch.__version__}", "",
             "| batch | plain: peak (above the model) | words: peak (above the model) | words add | "
             "stock words add |", "|---:|---:|---:|---:|---:|"]
    for batch in sorted({r["batch"] for r in rows}):
        by = {r["variant"]: r for r in rows if r["batch"] == batch and "error" not in r}
        plain, words, stock = by.get("plain"), by.get("words"), by.get("stock-words")

        def peak(row):
            return f"{row['peak_mb']:.0f} MB ({row['peak_mb'] - row['loaded_mb']:.0f} MB)"

        def add(row):
            if not (plain and row):
                return "not run"
            more = row["peak_mb"] - plain["peak_mb"]
            return f"{more:+.0f} MB ({more / plain['peak_mb']:+.1%} of the peak)"

        lines.append(f"| {batch} | {peak(plain)} | {peak(words)} | {add(words)} | {add(stock)} |"
                     if plain and words else f"| {batch} | failed | | | |")
    table = "\n".join(lines)
    print("\n" + table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "word_timestamp_memory.json").write_text(json.dumps({"rows": rows, "machine": facts}, indent=1))
    (out / "word_timestamp_memory.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
