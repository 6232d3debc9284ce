"""Batch throughput: the batch client (speaker_asr/remote.py, what ``transcribe --url`` runs)
sending a folder of recordings to 1, 2, ... local server processes behind one URL, as an
autoscaled Inference Endpoint puts one URL in front of its replicas.

Each server process (``python -m speaker_asr serve``) is one replica: pinned to a core of its own
(``taskset -c i``, where there are enough cores) with ``OMP_NUM_THREADS=1``, the real whisper
tiny.en and the kit's CAM++ 3.1 pipeline (``$REAL_MODELS_DIR``, default ``~/.cache/real-models``).
A loopback balancer (speaker_asr/testing/balancer.py) sends each request to the replica with the
fewest in flight. For every ``REPLICASxCONCURRENCY`` configuration the same folder is transcribed
(outputs overwritten) and timed; the table gives the wall time, recordings per minute, audio
hours per hour, the speedup over one replica taking one recording at a time, and how the
requests spread (``--repeats``: rounds over the configurations in turn, the median wall time;
the 1-minute load average after each run is in the table, and each replica's CPU time over the
wall time: under 100 % it was kept waiting, by the client or by the machine's other jobs).
``--cli-comparison K`` also times K separate one-file command-line runs against
one run over a folder of the same K files (models loaded once), on one core.

    .venv/bin/python bench/batch_throughput.py
    .venv/bin/python bench/batch_throughput.py --files 12 --configs 1x1,1x2,2x2,2x4 --cli-comparison 4

The machine is shared and small: the numbers are noisy (the load average is printed before and
after); the client and the balancer share the cores with the replicas.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

from speaker_asr import batch
from speaker_asr.remote import RemoteEngine, RetryPolicy
from speaker_asr.testing.balancer import Balancer
from speaker_asr.testing.server import ServerProcess

MODELS = {"tiny.en": "whisper-tiny.en", "base": "whisper-base"}


def parse_configs(text: str) -> list[tuple[int, int]]:
    configs = []
    for part in text.split(","):
        replicas, sep, concurrency = part.strip().partition("x")
        if not sep or not replicas.isdigit() or not concurrency.isdigit() or int(replicas) < 1 or int(concurrency) < 1:
            raise argparse.ArgumentTypeError(f"{part!r}: use REPLICASxCONCURRENCY, e.g. 2x4")
        configs.append((int(replicas), int(concurrency)))
    return configs


def make_inputs(folder: Path, count: int, kinds: list[str]) -> list[Path]:
    """``count`` recordings cycled from the kit's audio: ``sample`` (30 s, two speakers) and
    ``librivox`` (five read-speech clips of 3-7 s)."""
    sources: list[Path] = []
    for kind in kinds:
        if kind == "sample":
            sources.append(common.REAL / "audio" / "sample.wav")
        elif kind == "librivox":
            sources.extend(sorted((common.REAL / "audio" / "librivox").glob("*.wav")))
        else:
            raise SystemExit(f"unknown input kind {kind!r}: use sample and/or librivox")
    missing = [s for s in sources if not s.is_file()]
    if not sources or missing:
        raise SystemExit(f"audio missing: {missing or kinds} (run ../shared/real-models/build.sh)")
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(count):
        source = sources[i % len(sources)]
        target = folder / f"{i:03d}-{source.stem}.wav"
        shutil.copyfile(source, target)
        files.append(target)
    return files


def audio_seconds(files: list[Path]) -> float:
    import soundfile as sf

    return sum(sf.info(str(f)).duration for f in files)


def server_env(args) -> dict:
    env = dict(os.environ)
    env.update(ASR_MODEL=str(args.models_dir / MODELS[args.model]), ASSISTANT_MODEL="",
               DIARIZATION_MODEL="" if args.no_diarization else str(args.models_dir / "pyannote-campp-3.1"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", LOG_LEVEL="warning",
               PYTHONPATH=os.pathsep.join(p for p in (str(common.ROOT), env.get("PYTHONPATH")) if p))
    env.pop("HOST", None)
    env.pop("PORT", None)
    return env


def pin(i: int, enabled: bool) -> list[str]:
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if enabled and shutil.which("taskset") and cores:
        return ["taskset", "-c", str(cores[i % len(cores)])]
    return []


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def timed_run(url: str, folder: Path, out: Path, concurrency: int, parameters: dict) -> tuple[float, list]:
    engine = RemoteEngine(url, concurrency=concurrency, policy=RetryPolicy(max_wait_s=120))
    work = batch.plan([folder], out, ["json"], overwrite=True)
    started = time.monotonic()
    results = list(batch.BatchRun(work, engine, parameters))
    return time.monotonic() - started, results


def cli_comparison(args, files: list[Path], work: Path) -> list[list[str]]:
    """K one-file runs against one folder run of the same K files, in this machine's first core."""
    env = server_env(args)
    prefix = pin(0, not args.no_pin)
    folder = work / "cli-in"
    folder.mkdir()
    for f in files[:args.cli_comparison]:
        shutil.copyfile(f, folder / f.name)
    chosen = sorted(folder.iterdir())
    base = [*prefix, sys.executable, "-m", "speaker_asr", "transcribe"]
    started = time.monotonic()
    for i, f in enumerate(chosen):
        subprocess.run([*base, str(f), "-o", str(work / f"cli-one-{i}.json"), "--language", "en"], env=env,
                       check=True, capture_output=True)
    separate = time.monotonic() - started
    started = time.monotonic()
    subprocess.run([*base, str(folder), "-d", str(work / "cli-folder"), "--language", "en"], env=env, check=True,
                   capture_output=True)
    together = time.monotonic() - started
    k = len(chosen)
    return [[f"{k} separate `transcribe FILE` runs", f"{separate:.1f}", f"{separate / k:.1f}", str(k), "1.00"],
            [f"one `transcribe FOLDER` run ({k} files)", f"{together:.1f}", f"{together / k:.1f}", "1",
             f"{together / separate:.2f}"]]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", type=Path, default=common.REAL, help="the real-models kit (default %(default)s)")
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny.en")
    parser.add_argument("--no-diarization", action="store_true", help="ASR only (DIARIZATION_MODEL='')")
    parser.add_argument("--files", type=int, default=12, help="recordings in the folder (default %(default)s)")
    parser.add_argument("--inputs", default="sample,librivox", help="sample and/or librivox, cycled (default %(default)s)")
    parser.add_argument("--configs", type=parse_configs, default=parse_configs("1x1,1x2,2x2,2x4"),
                        help="REPLICASxCONCURRENCY, comma-separated (default 1x1,1x2,2x2,2x4)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the configurations (median; default 1)")
    parser.add_argument("--cli-comparison", type=int, default=0, metavar="K",
                        help="also time K one-file command-line runs against one folder run of them")
    parser.add_argument("--no-pin", action="store_true", help="do not pin each replica to a core")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    common.setup_env()
    model_dir = args.models_dir / MODELS[args.model]
    if not (model_dir / "config.json").is_file():
        print(f"no {args.model} model in {args.models_dir} (run ../shared/real-models/build.sh)", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="batch-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    replicas = max(r for r, _ in args.configs)
    load_before = common.loadavg()
    files = make_inputs(work / "in", args.files, [k.strip() for k in args.inputs.split(",") if k.strip()])
    total_audio = audio_seconds(files)
    parameters = {"language": "en"} if args.model != "tiny.en" else {}
    servers = [ServerProcess(f"replica{i}", server_env(args), work, prefix=pin(i, not args.no_pin))
               for i in range(replicas)]
    rows = []
    try:
        for server in servers:
            server.wait_ready(timeout=600)
        # one warm-up request per replica (lazy initialisation), not timed
        warm = work / "warm"
        warm.mkdir()
        shutil.copyfile(files[0], warm / files[0].name)
        for server in servers:
            _, results = timed_run(server.url, warm, work / "warm-out", 1, parameters)
            assert results[0].status == "done", results[0].error
        # the configurations in turn, --repeats rounds: a busy neighbour slows them all alike
        walls: dict[tuple[int, int], list[float]] = {cfg: [] for cfg in args.configs}
        loads: dict[tuple[int, int], list[float]] = {cfg: [] for cfg in args.configs}
        served: dict[tuple[int, int], list[int]] = {}
        busy: dict[tuple[int, int], list[list[float]]] = {cfg: [] for cfg in args.configs}
        failures: dict[tuple[int, int], int] = {cfg: 0 for cfg in args.configs}
        for _ in range(args.repeats):
            for r, c in args.configs:
                cpu_before = [cpu_seconds(s.proc.pid) for s in servers[:r]]
                with Balancer([s.url for s in servers[:r]]) as lb:
                    wall, results = timed_run(lb.url, work / "in", work / f"out-{r}x{c}", c, parameters)
                    served[(r, c)] = list(lb.served)
                busy[(r, c)].append([(cpu_seconds(s.proc.pid) - before) / wall
                                     for s, before in zip(servers[:r], cpu_before)])
                failed = [res for res in results if res.status != "done"]
                if failed:
                    print(f"{r}x{c}: {len(failed)} failed, e.g. {failed[0].job.name}: {failed[0].error}",
                          file=sys.stderr)
                failures[(r, c)] += len(failed)
                walls[(r, c)].append(wall)
                loads[(r, c)].append(common.loadavg()[0])
        baseline = None
        for r, c in args.configs:
            wall = statistics.median(walls[(r, c)])
            rate = total_audio / wall
            baseline = baseline or rate
            rows.append([str(r), str(c), str(len(files)), f"{total_audio:.1f}",
                         f"{wall:.1f}" + (f" ({min(walls[(r, c)]):.1f}-{max(walls[(r, c)]):.1f})" if args.repeats > 1 else ""),
                         f"{len(files) / wall * 60:.1f}", f"{rate:.1f}", f"{rate / baseline:.2f}",
                         " / ".join(map(str, served[(r, c)])),
                         " / ".join(f"{100 * statistics.mean(b[i] for b in busy[(r, c)]):.0f} %" for i in range(r)),
                         f"{statistics.mean(loads[(r, c)]):.1f}", str(failures[(r, c)])])
    finally:
        for server in servers:
            server.stop()
    comparison = cli_comparison(args, files, work) if args.cli_comparison else None
    load_after = common.loadavg()

    pinned = "each pinned to a core of its own (taskset)" if pin(0, not args.no_pin) else "not pinned"
    print(f"# Batch throughput ({time.strftime('%Y-%m-%d %H:%M')})\n")
    print(f"CPU: {common.cpu_model()}, {os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after (a shared machine: noisy numbers).")
    print(f"Replicas: `python -m speaker_asr serve`, OMP_NUM_THREADS=1, {pinned}; whisper {args.model}"
          f"{'' if args.no_diarization else ' + the kit pyannote-campp-3.1 pipeline'}; one loopback balancer "
          f"(fewest requests in flight) in front. Client: speaker_asr/remote.py, base64 JSON bodies, outputs json.")
    print(f"Inputs: {len(files)} recordings ({args.inputs}, cycled), {total_audio:.1f} s of audio.\n")
    print(table(["replicas", "concurrency", "files", "audio s", "wall s" + (f" (median of {args.repeats}, range)"
                 if args.repeats > 1 else ""), "files/min", "audio x real time",
                 f"vs {args.configs[0][0]}x{args.configs[0][1]}", "requests per replica", "replica CPU busy",
                 "load avg", "failed"], rows))
    if comparison:
        print("\nModels loaded once (in process, one core):\n")
        print(table(["runs", "wall s", "per file s", "model loads", "vs separate"], comparison))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(row[-1] == "0" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
