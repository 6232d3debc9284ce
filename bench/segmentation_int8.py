"""The segmentation model (segmentation-3.0's PyanNet) on CPU: torch, ONNX Runtime float32 (the
``onnx_segmentation`` speed fix) and ONNX Runtime int8 (its opt-in ``segmentation="int8"``: the
LSTM's weights quantized, speaker_asr/patches/diarization_onnx.py), side by side on real audio.

    python bench/segmentation_int8.py [--audio a.wav,b.wav] [--timed-batches 3] [--repeats 3]
    python bench/segmentation_int8.py --smoke   # the tiny random stand-in (REAL_MODELS_DIR), one short run

Windows of the model's duration (10 s) at the 3.1 recipe's step (1 s) over the audio (default:
the ten AMI clips of ../shared/real-meetings joined, then the kit's sample.wav), in batches of 32
as the pipeline runs them. Prints a markdown table: seconds per batch of 32 windows (the median of
``--repeats`` runs of ``--timed-batches`` batches, the three variants alternating), the speedups,
and against ONNX float32 the share of frames whose powerset argmax (the decision the pipeline
keeps) changed and how far the scores moved, on every window of the audio. The CPU and the date
are named. JSON goes to bench/results/. The numbers of a --smoke run mean nothing (random weights).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from common import REAL, RESULTS, ROOT, SR, loadavg, machine, setup_env

MEETINGS = ROOT.parent / "shared" / "real-meetings"
BATCH = 32
STEP_S = 1.0  # the 3.1 recipe's segmentation step: a tenth of the 10-s window


def default_audio(smoke: bool) -> list[Path]:
    sample = REAL / "audio" / "sample.wav"
    if smoke:
        return [sample]
    return sorted(MEETINGS.glob("*/audio.wav")) + ([sample] if sample.exists() else [])


def windows(files: list[Path], seconds: float) -> np.ndarray:
    """(windows, 1, samples): ``seconds``-long windows every STEP_S over the files joined."""
    from speaker_asr.audio.decode import decode_audio

    audio = np.concatenate([decode_audio(f.read_bytes()) for f in files]).astype(np.float32)
    size, step = int(round(seconds * SR)), int(round(STEP_S * SR))
    if len(audio) < size:
        audio = np.resize(audio, size)
    starts = range(0, len(audio) - size + 1, step)
    return np.stack([audio[s:s + size] for s in starts])[:, None]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", default="", help="comma list of audio files (default: the AMI clips + sample.wav)")
    ap.add_argument("--timed-batches", type=int, default=3, help="batches of 32 windows per timed run")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per variant (alternating)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--smoke", action="store_true",
                    help="the stand-in kit's sample.wav, one batch, one run (CI: that the script runs)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.timed_batches, args.repeats = 1, 1
    setup_env()
    import torch

    torch.set_num_threads(args.threads)
    from pyannote.audio import Model

    from speaker_asr.patches.diarization_onnx import _export, _int8_lstm, _session, segmentation_difference

    checkpoint = REAL / "segmentation-3.0" / "pytorch_model.bin"
    if not checkpoint.exists():
        raise SystemExit(f"no segmentation-3.0 under {REAL}: run ../shared/real-models/build.sh")
    files = [Path(f) for f in args.audio.split(",") if f] or default_audio(args.smoke)
    started, load_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), loadavg()
    model = Model.from_pretrained(str(checkpoint)).eval()
    seconds = float(getattr(getattr(model, "specifications", None), "duration", 10.0) or 10.0)
    data = windows(files, seconds)
    if len(data) < BATCH:  # a short input (the smoke run): its windows cycled to one batch
        data = np.resize(data, (BATCH,) + data.shape[1:])
    batches = [data[i:i + BATCH] for i in range(0, len(data) - BATCH + 1, BATCH)]
    names = ("waveforms", "scores")

    t = time.perf_counter()
    exported = _export(model, torch.from_numpy(data[:1]), names, {0: "batch", 2: "samples"})
    export_s = time.perf_counter() - t
    t = time.perf_counter()
    quantized = _int8_lstm(exported)
    quantize_s = time.perf_counter() - t
    onnx_float, onnx_int8 = _session(exported, names), _session(quantized, names)

    def torch_run(x):
        with torch.inference_mode():
            return model(x)

    variants = {"torch": torch_run, "ONNX float32": onnx_float, "ONNX int8 (LSTM)": onnx_int8}
    # the decisions: every window, every variant
    scores = {name: np.concatenate([run(torch.from_numpy(b)).numpy() for b in batches])
              for name, run in variants.items()}
    # the timings: the variants alternating, each run over the same first batches
    times: dict[str, list[float]] = {name: [] for name in variants}
    timed = batches[:max(1, args.timed_batches)]
    for _ in range(args.repeats):
        for name, run in variants.items():
            t = time.perf_counter()
            for b in timed:
                run(torch.from_numpy(b))
            times[name].append((time.perf_counter() - t) / len(timed))
    median = {name: statistics.median(v) for name, v in times.items()}
    reference = scores["ONNX float32"]
    rows = []
    for name in variants:
        diff = segmentation_difference(scores[name], reference)
        rows.append({"variant": name, "s_per_32": median[name], "runs": times[name],
                     "vs_torch": median["torch"] / median[name],
                     "vs_float": median["ONNX float32"] / median[name], **diff})
    mach = machine()
    frames = reference.shape[0] * reference.shape[1]
    lines = ["| variant | s per 32 windows (median) | runs s | speedup vs torch | speedup vs ONNX float32 "
             "| argmax changed vs ONNX float32 | max abs score diff | mean / max abs prob diff |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['s_per_32']:.3f} | {' '.join(f'{x:.2f}' for x in r['runs'])} | "
                     f"{r['vs_torch']:.2f} | {r['vs_float']:.2f} | {r['argmax_changed']:.2%} | "
                     f"{r['max_score_diff']:.3g} | {r['mean_prob_diff']:.4f} / {r['max_prob_diff']:.3f} |")
    audio_s = sum(len(b) for b in batches) * STEP_S + seconds - STEP_S
    print(f"# Segmentation int8 ({'SMOKE: random stand-in, numbers mean nothing' if args.smoke else 'real'})\n\n"
          f"Run {started}: `python bench/segmentation_int8.py {' '.join(sys.argv[1:] if argv is None else argv)}`; "
          f"CPU: {mach['nproc']} x {mach['cpu_model']}, torch {mach.get('torch')} "
          f"(capability {mach.get('cpu_capability')}), pyannote.audio {mach.get('pyannote.audio')}, onnxruntime "
          f"{_version('onnxruntime')}, {args.threads} threads; load average {load_start} -> {loadavg()}.\n"
          f"Audio: {len(files)} file(s), {len(data)} windows of {seconds:g} s every {STEP_S:g} s "
          f"({len(batches)} batches of {BATCH}, about {audio_s / 60:.1f} min; {frames} frames scored); "
          f"timed: {len(timed)} batch(es) x {args.repeats} runs per variant, alternating. Load-time cost of "
          f"int8: export {export_s:.2f} s (float32 too), quantization {quantize_s:.2f} s.\n\n" + "\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"segmentation-int8-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"started": started, "machine": mach, "smoke": args.smoke,
                               "files": [str(f) for f in files], "windows": len(data), "frames": frames,
                               "export_s": export_s, "quantize_s": quantize_s, "rows": rows},
                              indent=1, default=str))
    print(f"JSON: {out}", file=sys.stderr)


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    main()
