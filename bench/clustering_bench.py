"""The diarization's clustering step alone, on the windows of recordings of 1 to 4 hours: the
loaded pipeline's own ``pipeline.clustering`` (speaker_asr/patches/diarization.py:
linear_clustering) against pyannote's (``DIARIZATION_SPEEDUPS=false``), side by side.

    python bench/clustering_bench.py [--hours 0.5,1,2,4] [--stock-up-to 2] [--voices 8] [--embedded-every 5]

The input is what the step is handed for a meeting of that length at the 3.1 recipe's 1-s step
(speaker_asr/testing/windows.py): 3,600 windows an hour x 3 speaker slots, ``--voices`` voices
(one of them heard only in the first and last tenth), CAM++-sized embeddings. For each length
and each clustering: wall time, the peak of memory allocated during the call (tracemalloc, a
second run), the voices found and the purity of the clusters (the share of embeddings whose
cluster's majority voice is their own), and whether the returning voice kept one label. The
pipeline is the kit's (../shared/real-models: pyannote-campp-3.1) when present, else the tiny
one with the 3.1 recipe's clustering parameters. ``--embedded-every 5`` adds ours as
``DIARIZATION_EMBEDDINGS=approximate`` hands it the same windows: every fifth window's speakers
embedded, the clustering trained on those alone (its minimum cluster size scaled to them) and
every window assigned. Prints a markdown table; JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import time
import tracemalloc
from pathlib import Path

import numpy as np

from common import REAL, RESULTS, machine, setup_env

RECIPE = {"method": "centroid", "min_cluster_size": 12, "threshold": 0.7045654963945799}


def load(speedups: bool, work: Path, embeddings: str = "recipe"):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    folder = REAL / "pyannote-campp-3.1"
    if not (folder / "config.yaml").exists():
        from speaker_asr.testing.tiny_models import build_pyannote_pipeline

        folder = work / "tiny-pyannote"
        if not (folder / "config.yaml").exists():
            build_pyannote_pipeline(folder)
    pipeline = load_diarization_pipeline(str(folder), None, "cpu", speedups=speedups, embeddings=embeddings)
    pipeline.clustering.instantiate(RECIPE)
    return pipeline, folder.name


def run(step, windows, measure_memory: bool, every: int = 1) -> dict:
    from speaker_asr.patches import diarization

    gc.collect()
    if measure_memory:
        tracemalloc.start()
    started = time.perf_counter()
    if every > 1:  # as share_window_embeddings leaves it for the clustering
        own = np.zeros(windows.voices.shape, dtype=bool)
        own[::every] = windows.voices[::every] >= 0
        diarization._EMBEDDED.own = own
    try:
        hard, _, _ = step(embeddings=windows.embeddings.copy(), segmentations=windows.segmentations,
                          min_clusters=1, max_clusters=windows.embeddings.shape[0] * 3)
    finally:
        diarization._EMBEDDED.own = None
    seconds = time.perf_counter() - started
    out = {"seconds": seconds}
    if measure_memory:
        out["peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    active = windows.voices >= 0
    found, truth = hard[active], windows.voices[active]
    out["voices_found"] = int(len(np.unique(found)))
    out["purity"] = sum(collections.Counter(truth[found == k]).most_common(1)[0][1]
                        for k in np.unique(found)) / len(found)
    back = windows.voices.max()
    tenth = len(hard) // 10
    first = set(hard[:tenth][windows.voices[:tenth] == back].tolist())
    last = set(hard[-tenth:][windows.voices[-tenth:] == back].tolist())
    out["returning_kept"] = len(first) == 1 and first == last
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", default="0.5,1,2,4")
    ap.add_argument("--stock-up-to", type=float, default=2.0,
                    help="run pyannote's own clustering up to this many hours (it is quadratic)")
    ap.add_argument("--voices", type=int, default=8)
    ap.add_argument("--embedded-every", type=int, default=0,
                    help="also ours trained on every N-th window's speakers (DIARIZATION_EMBEDDINGS=approximate)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/clustering-bench"))
    ap.add_argument("--json", type=Path, default=RESULTS / "clustering_bench.json")
    args = ap.parse_args(argv)
    setup_env()
    from speaker_asr.testing.windows import synthetic_windows

    args.work.mkdir(parents=True, exist_ok=True)
    ours, name = load(True, args.work)
    stock, _ = load(False, args.work)
    shared = None
    if args.embedded_every > 1:
        shared, _ = load(True, args.work, embeddings="approximate")
    rows = []
    for hours in [float(h) for h in args.hours.split(",") if h.strip()]:
        windows = synthetic_windows(int(round(hours * 3600)), voices=args.voices, seed=0,
                                    returning=args.voices - 1)
        embeddings = int((windows.voices >= 0).sum())
        every = args.embedded_every
        for label, pipeline, k in (("ours", ours, 1), ("pyannote", stock, 1),
                                   (f"ours, every {every}th embedded", shared, every)):
            if pipeline is None or (label == "pyannote" and hours > args.stock_up_to):
                continue
            timed = run(pipeline.clustering, windows, measure_memory=False, every=k)
            timed["peak_mb"] = run(pipeline.clustering, windows, measure_memory=True, every=k)["peak_mb"]
            rows.append({"hours": hours, "windows": len(windows.voices), "embeddings": embeddings,
                         "clustering": label, **timed})
            r = rows[-1]
            print(f"clustering_bench: {hours:g} h {label}: {r['seconds']:.1f} s, {r['peak_mb']:.0f} MB, "
                  f"{r['voices_found']}/{args.voices} voices, purity {r['purity']:.4f}, "
                  f"returning voice kept: {r['returning_kept']}", flush=True)
    info = machine()
    print(f"\nClustering step alone ({name} pipeline's clustering, 3.1 recipe parameters), "
          f"{args.voices} voices; {info['cpu_model']} ({info.get('cpu_capability', '')}), "
          f"{info.get('torch_threads')} threads\n")
    print("| hours | windows | embeddings | clustering | time | peak memory | voices found | purity | returning voice kept |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['hours']:g} | {r['windows']:,} | {r['embeddings']:,} | {r['clustering']} | {r['seconds']:.1f} s | "
              f"{r['peak_mb']:.0f} MB | {r['voices_found']} / {args.voices} | {r['purity']:.4f} | "
              f"{'yes' if r['returning_kept'] else 'no'} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
