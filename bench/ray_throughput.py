"""Ray throughput: one folder transcribed by the batch run in this process and by the batch run on a
Ray cluster (``transcribe DIR --ray``, speaker_asr/batch/ray_engine.py) with 1, 2, ... actors, on
this machine; and what Ray adds per recording.

The cluster is a real Ray head started here in a network namespace of its own that holds only
loopback (speaker_asr/testing/ray_cluster.py: needs root, ``unshare`` and ``nsenter``), ended by
its own process id. Every run is a fresh driver process (the in-process run too), timed in two
parts: loading (the models here, or the actors each loading theirs) and the folder itself. Each
configuration runs ``--repeats`` times in turn; the table gives the median. The machine's CPUs are
shared out: the in-process run uses every core (torch's default threads), one actor gets all of
the head's CPUs, two actors half each (``OMP_NUM_THREADS`` per actor, as the engine sets it).

Per recording, Ray's overhead is the time from the driver sending a recording to its answer
coming back, less the time the actor spent on it (reading the file and the handler): scheduling,
the call, and the answer's transfer (median and maximum). Every Ray run's transcripts are
compared with the in-process run's, word for word and speaker for speaker.

Inputs: the ten real AMI clips (``../shared/real-meetings``, 30 s each) by default, or
``--files N`` copies cycled from the kit's audio; models: whisper tiny.en and the kit's CAM++
3.1 pipeline (``$REAL_MODELS_DIR``).

    .venv/bin/python bench/ray_throughput.py
    .venv/bin/python bench/ray_throughput.py --actors 1,2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

MEETINGS = common.ROOT.parent / "shared" / "real-meetings"
MODELS = {"tiny.en": "whisper-tiny.en", "base": "whisper-base"}


def inputs(folder: Path, files: int) -> list[Path]:
    """The AMI clips (``files`` 0), or ``files`` recordings cycled from the kit's audio."""
    folder.mkdir(parents=True, exist_ok=True)
    if files == 0:
        sources = sorted(MEETINGS.glob("*/audio.wav"))
        if not sources:
            raise SystemExit(f"no clips in {MEETINGS}: give --files N to use the kit's audio instead")
        names = [s.parent.name.split("_")[1] + ".wav" for s in sources]
    else:
        kit = sorted((common.REAL / "audio" / "librivox").glob("*.wav")) + [common.REAL / "audio" / "sample.wav"]
        kit = [k for k in kit if k.is_file()]
        if not kit:
            raise SystemExit(f"no audio in {common.REAL / 'audio'} (run ../shared/real-models/build.sh)")
        sources = [kit[i % len(kit)] for i in range(files)]
        names = [f"{i:03d}-{s.stem}.wav" for i, s in enumerate(sources)]
    made = []
    for source, name in zip(sources, names):
        shutil.copyfile(source, folder / name)
        made.append(folder / name)
    return made


def model_env(args) -> dict:
    env = dict(os.environ)
    env.update(ASR_MODEL=str(args.models_dir / MODELS[args.model]), ASSISTANT_MODEL="",
               DIARIZATION_MODEL=str(args.models_dir / "pyannote-campp-3.1"), WARMUP="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error",
               PYTHONPATH=os.pathsep.join(p for p in (str(common.ROOT), os.environ.get("PYTHONPATH")) if p))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # every core for the in-process run
        env.pop(name, None)
    return env


def drive(args) -> None:
    """One run (a driver process): the folder into ``--out``, timings as one JSON line."""
    common.setup_env()
    from speaker_asr import batch

    if args.driver == "local":
        engine = batch.LocalEngine()
    else:
        from speaker_asr.batch.ray_engine import RayEngine

        engine = RayEngine(args.address, actors=args.n)
    started = time.monotonic()
    engine.load()
    loaded = time.monotonic()
    work = batch.plan([args.folder], args.out, ["json"], overwrite=True)
    results = list(batch.BatchRun(work, engine, {}))
    wall = time.monotonic() - loaded
    line = {"load_s": loaded - started, "wall_s": wall, "files": len(results),
            "failed": sum(r.status != "done" for r in results),
            "audio_s": sum(r.duration or 0.0 for r in results)}
    if args.driver == "ray":
        line["overhead_s"] = [here - there for _, there, here in engine.timings]
        line["cpus_per_actor"] = engine.actor_options.get("num_cpus")
        engine.close()
    print("RESULT " + json.dumps(line), flush=True)


def transcripts(out: Path) -> dict[str, list]:
    """Each file's words with their speakers (the decode's ``assisted`` bookkeeping left out)."""
    found = {}
    for path in sorted(out.glob("*.json")):
        data = json.loads(path.read_text())
        found[path.name] = [(c.get("text"), c.get("speaker"), c.get("timestamp")) for c in data.get("chunks", [])]
    return found


def run_driver(command: list[str], env: dict) -> dict:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"a run failed ({done.returncode}):\n{done.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", default="1,2", help="Ray configurations: actors, comma-separated")
    parser.add_argument("--files", type=int, default=0, help="0: the ten AMI clips; N: N copies of the kit's audio")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny.en")
    parser.add_argument("--models-dir", type=Path, default=common.REAL)
    parser.add_argument("--driver", choices=("local", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        drive(args)
        return 0

    from speaker_asr.testing.ray_cluster import LoopbackRayHead, unavailable
    from speaker_asr.testing.server import free_port

    why = unavailable()
    if why:
        raise SystemExit(f"no Ray head here: {why}")
    actors = [int(a) for a in args.actors.split(",") if a.strip()]
    work = Path(tempfile.mkdtemp(prefix="ray-bench-"))
    folder = work / "in"
    files = inputs(folder, args.files)
    env = model_env(args)
    me = [sys.executable, str(Path(__file__).resolve())]
    common_args = ["--model", args.model, "--models-dir", str(args.models_dir), "--folder", str(folder)]
    before = common.loadavg()
    rows: dict[str, list[dict]] = {}
    same: dict[str, bool] = {}
    head = LoopbackRayHead(work / "home", work, port=free_port(), num_cpus=os.cpu_count() or 2, env=env)
    head.start()
    try:
        for repeat in range(args.repeats):
            out = work / f"out-local-{repeat}"
            rows.setdefault("in-process", []).append(
                run_driver([*me, *common_args, "--driver", "local", "--out", str(out)], env))
            reference = transcripts(out)
            for n in actors:
                name = f"ray-{n}"
                out = work / f"out-{name}-{repeat}"
                rows.setdefault(name, []).append(run_driver(
                    [*head.prefix(), *me, *common_args, "--driver", "ray", "--address", head.address,
                     "--n", str(n), "--out", str(out)], head.env()))
                same[name] = same.get(name, True) and transcripts(out) == reference
    finally:
        head.stop()
        shutil.rmtree(work, ignore_errors=True)

    m = common.machine()
    print("# Ray throughput\n")
    print(f"CPU: {m['cpu_model']} ({m['nproc']} cores; {', '.join(m['cpu_flags'])}); torch {m.get('torch')}, "
          f"transformers {m.get('transformers')}, pyannote.audio {m.get('pyannote.audio')}; Ray "
          f"{_ray_version()}; load average before {before}, after {common.loadavg()}")
    print(f"Inputs: {len(files)} recordings ({'the AMI clips' if args.files == 0 else 'the kit audio'}); "
          f"whisper {args.model}, the kit's CAM++ 3.1 pipeline; median of {args.repeats} run(s) each\n")
    print("| run | actors | CPU per actor | files | audio s | load s | wall s | files/min | audio x real time "
          "| vs in-process | Ray overhead per file ms (median / max) | transcripts as in-process | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    base = statistics.median(r["wall_s"] for r in rows["in-process"])
    for name, runs in rows.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        load = statistics.median(r["load_s"] for r in runs)
        first = runs[0]
        overhead = [o for r in runs for o in r.get("overhead_s", [])]
        print(f"| {name} | {name.split('-')[1] if name != 'in-process' else '-'} "
              f"| {common.fmt(first.get('cpus_per_actor'), 0) if 'cpus_per_actor' in first else os.cpu_count()} "
              f"| {first['files']} | {first['audio_s']:.1f} | {load:.1f} | {wall:.1f} "
              f"| {60 * first['files'] / wall:.1f} | {first['audio_s'] / wall:.1f} | {base / wall:.2f} "
              f"| {(f'{1000 * statistics.median(overhead):.0f} / {1000 * max(overhead):.0f}') if overhead else '-'} "
              f"| {'-' if name == 'in-process' else ('yes' if same[name] else 'NO')} "
              f"| {max(r['failed'] for r in runs)} |")
    return 0


def _ray_version() -> str:
    try:
        import ray

        return ray.__version__
    except ImportError:
        return "not installed"


if __name__ == "__main__":
    raise SystemExit(main())
