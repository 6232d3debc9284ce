"""Diarization alone: pyannote's own settings vs the endpoint's (speaker_asr/patches/diarization.py), side by side.

    python bench/diarization_bench.py [--inputs 8s,30s,60s] [--embedding wespeaker,campp]

* ``wespeaker``: the speaker-diarization-3.1 recipe as on the hub -- real segmentation-3.0 from
  ../shared/real-models and a WeSpeaker ResNet34 embedding with *random* weights (the hub's is
  gated; random weights cost the same compute). The speakers it finds are meaningless, but the
  two settings must still find the same ones.
* ``campp``: the kit's complete offline pipeline (real segmentation-3.0 + real CAM++ embedding).

For each input: wall time and real-time factor with pyannote's settings (embedding batch 32,
every window's every speaker slot embedded) and with the endpoint's, their ratio, and whether the
speaker turns are identical. One process, the two pipelines alternating per input; prints a
markdown table and writes JSON to bench/results/. Speed claims come from here, never from tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from common import REAL, RESULTS, get_input, loadavg, machine, setup_env


def wespeaker_pipeline(out: Path, recipe: Path) -> Path:
    """3.1 layout: real segmentation-3.0, random WeSpeaker ResNet34, and the hyper-parameters of
    ``recipe`` (the kit's 3.1 pipeline folder)."""
    from speaker_asr.testing.tiny_models import build_resnet34_recipe

    return build_resnet34_recipe(out, REAL / "segmentation-3.0", recipe)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", default="8s,30s,60s")
    ap.add_argument("--embedding", default="wespeaker,campp")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    setup_env()
    import torch

    torch.set_num_threads(args.threads)
    from speaker_asr.audio.decode import decode_audio
    from speaker_asr.diarization.pipeline import diarize, load_diarization_pipeline

    folders = {"campp": REAL / "pyannote-campp-3.1"}
    if not (REAL / "segmentation-3.0").exists() or not folders["campp"].exists():
        raise SystemExit(f"real models missing under {REAL}: run ../shared/real-models/build.sh")
    started, load_start, rows = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), loadavg(), []
    for name in args.embedding.split(","):
        folder = wespeaker_pipeline(RESULTS / "wespeaker-3.1", folders["campp"]) \
            if name == "wespeaker" else folders[name]
        stock = load_diarization_pipeline(str(folder), None, "cpu", speedups=False)
        ours = load_diarization_pipeline(str(folder), None, "cpu")
        for label in args.inputs.split(","):
            audio = decode_audio(get_input(label)[0].read_bytes())
            diarize(stock, audio[:16000 * 12])  # warm-up, both
            diarize(ours, audio[:16000 * 12])
            t = time.perf_counter()
            a = diarize(stock, audio)
            stock_s = time.perf_counter() - t
            t = time.perf_counter()
            b = diarize(ours, audio)
            ours_s = time.perf_counter() - t
            seconds = len(audio) / 16000
            rows.append({"embedding": name, "input": label, "duration_s": seconds,
                         "stock_s": stock_s, "ours_s": ours_s, "ratio": ours_s / stock_s,
                         "identical": a.turns == b.turns and a.exclusive_turns == b.exclusive_turns,
                         "turns": len(a.turns)})
            print(f"{name} {label}: pyannote {stock_s:.2f} s, ours {ours_s:.2f} s", file=sys.stderr)
    lines = ["| embedding | input | dur s | pyannote settings s | RTF | ours s | RTF | ours / pyannote | same turns |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['embedding']} | {r['input']} | {r['duration_s']:.1f} | {r['stock_s']:.2f} | "
                     f"{r['stock_s'] / r['duration_s']:.3f} | {r['ours_s']:.2f} | "
                     f"{r['ours_s'] / r['duration_s']:.3f} | {r['ratio']:.2f} | {r['identical']} |")
    mach = machine()
    print(f"Run {started}: `python bench/diarization_bench.py {' '.join(sys.argv[1:])}`; "
          f"{mach['nproc']} CPUs ({mach['cpu_model']}), torch {mach.get('torch')}, "
          f"pyannote.audio {mach.get('pyannote.audio')}, {args.threads} threads; load average "
          f"{load_start} -> {loadavg()}.\n\n" + "\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"diarization-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"started": started, "machine": mach, "rows": rows}, indent=1, default=str))
    print(f"JSON: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
