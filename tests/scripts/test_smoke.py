"""Smoke runs of the scripts in bench/, eval/ and reliability/: each runs as a user runs it
(``python bench/benchmark.py ...`` from the repository root, its own process), on the tiny random stand-in
for the real-models kit (speaker_asr/testing/kit.py, through ``REAL_MODELS_DIR`` /
``--models-dir``) and a few short inputs, and must exit 0 and print its table or summary.
The numbers mean nothing (random weights); that the scripts run is what is checked.
(bench/batch_throughput.py runs its server processes and the loopback balancer,
speaker_asr/testing/balancer.py, the same way.)

eval/data.py, eval/generate.py, speaker_asr/testing/scoring.py, eval/algorithms.py, bench/common.py and
reliability/_common.py are modules the scripts import, not scripts (eval/test_eval.py checks the
evaluation's metrics and algorithms on hand-made inputs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = [pytest.mark.subprocess, pytest.mark.scripts]
# a minute or more on a busy 2-core machine: make test-all runs these, make test leaves them out
heavy = pytest.mark.heavy

TIMEOUT_S = 400


@pytest.fixture(scope="session")
def kit(tmp_path_factory) -> Path:
    from speaker_asr.testing.kit import build_kit

    return build_kit(tmp_path_factory.mktemp("kit") / "real-models")


@pytest.fixture
def env(kit, tmp_path) -> dict:
    """The scripts' environment: this checkout's speaker_asr first (wherever an editable install
    points), the stand-in kit as the real models, outputs in tmp_path, offline."""
    env = dict(os.environ)
    env.pop("OUT", None)  # the device runner's output folder: gpu_benchmark.py would write there
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
               REAL_MODELS_DIR=str(kit), SHARED_AUDIO_DIR=str(kit / "audio"),
               BENCH_RESULTS_DIR=str(tmp_path / "bench-results"), BENCH_DATA_DIR=str(tmp_path / "bench-data"),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               # one thread each: on a busy 2-core machine that is several times faster than two
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def run(command: list[str], env: dict, timeout: float = TIMEOUT_S) -> str:
    """Run ``command`` from the repository root; its stdout (stderr in the failure message)."""
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(command[:3])} exited {proc.returncode}\n--- stdout\n"
                                  f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")
    return proc.stdout


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of the markdown table under ``header`` (its first line, given whole)."""
    lines = text.splitlines()
    assert header in lines, f"no table {header!r} in:\n{text[-3000:]}"
    rows = []
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


# --------------------------------------------------------------------------- bench/


@heavy
def test_benchmark(env, tmp_path):
    """A worker for the handler (base, multilingual, with its assistant: assisted="auto", whose
    policy is timed first) and one for faster-whisper (requirements-scripts.txt installs it), side
    by side; without faster-whisper the script says so and leaves its row out."""
    fw = importlib.util.find_spec("faster_whisper") is not None
    out = run([sys.executable, "bench/benchmark.py", "--models", "base", "--inputs", "8s", "--modes", "auto,fw",
               "--threads", "1", "--no-results-md", "--timeout", "300"], env)
    rows = table_rows(out, "| input | dur s | model | mode | decode s | ASR s | diar s | align s | e2e s | RTF "
                           "| ASR ours/fw | WER | peak RSS MB | RSS over loaded MB |")
    assert [r[:3] for r in rows] == [["8s", "8.3", "base"]] * (2 if fw else 1), out
    assert re.fullmatch(r"auto \((assisted|plain)\)", rows[0][3]) and float(rows[0][8]) > 0, out  # not an error row
    if fw:
        assert rows[1][3] == "faster-whisper int8" and float(rows[0][10]) > 0, out  # ASR ours/fw
    else:
        assert "faster-whisper not installed" in out, out
    assert json.loads(next((tmp_path / "bench-results").glob("benchmark-*.json")).read_text())["results"]


@heavy
def test_profile_cpu(env, tmp_path):
    out = run([sys.executable, "bench/profile_cpu.py", "--models", "tiny.en", "--input", "8s", "--repeats", "1",
               "--threads", "1"], env)
    for title in ("Breakdown at 1 thread(s).", "ASR variants (word timestamps on, 8s)", "Diarization variants (8s)",
                  "ASR + diarization (8s)"):
        assert title in out, out
    variants = table_rows(out, "| variant | median s | ratio | WER | same text | word start drift mean / max s "
                               "| peak RSS + MB |")
    assert {"encoder kept on sdpa (decoder eager)", "int8 dynamic Linear", "bfloat16"} <= {r[0] for r in variants}
    # the speed fixes keep the text: the claim profile_cpu.py exists to check
    assert all(r[4] == "True" for r in variants if not r[0].startswith(("int8", "bfloat16"))), variants
    diar = table_rows(out, "| variant | median s | ratio | peak RSS + MB | same turns |")
    assert len(diar) >= 5 and all(r[-1] == "True" for r in diar), diar  # batch sizes and threads keep the turns
    assert list((tmp_path / "bench-results").glob("profile-*.md"))


@heavy
def test_batch_throughput(env):
    """Two replicas (server processes) behind the loopback balancer, the batch client at 1x1 and
    2x2, and the one-folder run against separate one-file runs."""
    out = run([sys.executable, "bench/batch_throughput.py", "--files", "3", "--configs", "1x1,2x2",
               "--cli-comparison", "1"], env)
    rows = table_rows(out, "| replicas | concurrency | files | audio s | wall s | files/min | audio x real time "
                           "| vs 1x1 | requests per replica | replica CPU busy | load avg | failed |")
    assert [r[:3] for r in rows] == [["1", "1", "3"], ["2", "2", "3"]], out
    assert [r[-1] for r in rows] == ["0", "0"] and rows[0][7] == "1.00", out
    assert rows[0][8] == "3" and sorted(int(n) for n in rows[1][8].split(" / ")) == [1, 2], out  # both replicas used
    cli = table_rows(out, "| runs | wall s | per file s | model loads | vs separate |")
    assert [r[3] for r in cli] == ["1", "1"], out
    assert out.startswith("# Batch throughput") and "CPU: " in out


@heavy
def test_ray_throughput(env):
    """The in-process run and a Ray head (in a loopback-only network namespace) with one actor,
    on two recordings of the stand-in kit: the table, the transcripts the same."""
    from speaker_asr.testing.ray_cluster import unavailable

    why = unavailable()
    if why:
        pytest.skip(f"no Ray head here: {why}")
    out = run([sys.executable, "bench/ray_throughput.py", "--files", "2", "--actors", "1"], env)
    rows = table_rows(out, "| run | actors | CPU per actor | files | audio s | load s | wall s | files/min "
                           "| audio x real time | vs in-process | Ray overhead per file ms (median / max) "
                           "| transcripts as in-process | failed |")
    cores = str(os.cpu_count())  # the in-process run's threads, and the one actor's CPUs
    assert [r[:4] for r in rows] == [["in-process", "-", cores, "2"], ["ray-1", "1", cores, "2"]], out
    assert rows[1][11] == "yes" and [r[-1] for r in rows] == ["0", "0"], out
    assert out.startswith("# Ray throughput") and "CPU: " in out


@heavy
def test_diarization_bench(env):
    out = run([sys.executable, "bench/diarization_bench.py", "--inputs", "8s", "--embedding", "wespeaker,campp",
               "--threads", "1"], env)
    rows = table_rows(out, "| embedding | input | dur s | pyannote settings s | RTF | ours s | RTF | ours / pyannote "
                           "| same turns |")
    assert [(r[0], r[1]) for r in rows] == [("wespeaker", "8s"), ("campp", "8s")], out
    assert [r[-1] for r in rows] == ["True", "True"], out  # the speed fixes keep pyannote's turns


def test_segmentation_int8_bench(env):
    """bench/segmentation_int8.py --smoke on the stand-in's segmentation model: torch, ONNX
    float32 and ONNX int8 timed and compared (the float32 model decides as torch does)."""
    out = run([sys.executable, "bench/segmentation_int8.py", "--smoke", "--threads", "1"], env)
    rows = table_rows(out, "| variant | s per 32 windows (median) | runs s | speedup vs torch | speedup vs ONNX float32 "
                           "| argmax changed vs ONNX float32 | max abs score diff | mean / max abs prob diff |")
    assert [r[0] for r in rows] == ["torch", "ONNX float32", "ONNX int8 (LSTM)"], out
    assert rows[0][5] == "0.00%" and rows[1][5] == "0.00%" and float(rows[2][1]) > 0, out
    assert "CPU: " in out and "SMOKE" in out, out


@heavy
def test_clustering_bench(env):
    """The loaded pipeline's clustering against pyannote's on the windows of 0.05 and 0.2 hours
    (the limit lowered through the patch module is not reachable from here: both run
    pyannote's own below it, so they must agree)."""
    out = run([sys.executable, "bench/clustering_bench.py", "--hours", "0.05,0.2", "--stock-up-to", "0.2",
               "--voices", "4", "--embedded-every", "5"], env)
    rows = table_rows(out, "| hours | windows | embeddings | clustering | time | peak memory | voices found "
                           "| purity | returning voice kept |")
    shared = "ours, every 5th embedded"
    assert [(r[0], r[3]) for r in rows] == [("0.05", "ours"), ("0.05", "pyannote"), ("0.05", shared),
                                             ("0.2", "ours"), ("0.2", "pyannote"), ("0.2", shared)], out
    assert rows[3][6:] == rows[4][6:], out


@heavy
def test_long_audio_per_stage(env, tmp_path):
    """A minute of the stand-in kit's speech in a process of its own: every stage has a time and a
    peak, the row a total, an RTF and the memory columns; the growth row is there (a dash with one
    length); the CPU is named; the sentence voices' share of the diarization and their counts are given."""
    out = run([sys.executable, "bench/long_audio.py", "--minutes", "1", "--models", "real",
               "--work", str(tmp_path / "work"), "--json", str(tmp_path / "long.json")], env)
    stages = ("decode", "ASR", "segmentation", "embeddings", "clustering", "reconstruction", "attribution",
              "sentence voices")
    rows = table_rows(out, "| minutes | " + " | ".join(f"{s} s / MB" for s in stages)
                      + " | total s | RTF | loaded MB | peak MB | peak above loaded MB |")
    assert [r[0] for r in rows] == ["1", "per audio hour"], out
    assert all(re.fullmatch(r"\d+\.\d+ / \d+", cell) for cell in rows[0][1:9]), rows[0]  # seconds / MB
    total, rtf, loaded, peak, above = (float(x) for x in rows[0][9:])
    assert total > 0 and rtf > 0 and 0 < loaded <= peak and above == pytest.approx(peak - loaded, abs=1), rows[0]
    assert re.search(r"^CPU: .+ torch CPU capability \w+", out, re.M), out
    doc = json.loads((tmp_path / "long.json").read_text())
    run_ = doc["runs"][0]
    assert list(run_["stages"]) == ["decode", "asr", "segmentation", "embeddings", "clustering",
                                    "reconstruction", "attribution", "voices"], run_
    # the stand-in's random Whisper says a few words, too few for a speaker's sentences to be
    # compared: the counts are there, the embedding itself is tested in tests/test_pipeline.py
    assert run_["sentences_embedded"] >= 0 and 0 <= run_["words_moved_by_voices"] <= run_["words"], run_
    assert re.search(r"^\* 1 min: .*sentence voices \d+\.\d % of the diarization's time", out, re.M), out
    assert run_["ru_maxrss_mb"] > 0 and run_["diarization_events"]["speaker_counting"]["calls"] == 1, run_
    assert (tmp_path / "long.md").read_text().strip() in out


@pytest.fixture(scope="module")
def gpu_wheels(tmp_path_factory) -> Path:
    """The wheels bench/gpu_run.sh carries, downloaded by bench/gpu_wheels.sh from the package
    index (CI reaches it) -- for this Python: the GPU machine's are for 3.12."""
    folder = tmp_path_factory.mktemp("whl")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    run(["bash", "bench/gpu_wheels.sh"], dict(os.environ, PYTHON=sys.executable, WHEEL_DIR=str(folder),
                                              PYTHON_VERSION=version), timeout=300)
    return folder


def gpu_run(env, wheels, out) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "bench/gpu_run.sh", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=dict(env, DEVICE="cpu", WHEEL_DIR=str(wheels),
                                                      PYTHON=sys.executable))


@heavy
def test_long_audio_with_the_recipes_resnet34(env, tmp_path):
    """--models resnet34: the 3.1 recipe as production runs it (WeSpeaker ResNet34, random
    weights) is built and timed stage by stage, and named in the table's header."""
    out = run([sys.executable, "bench/long_audio.py", "--minutes", "0.5", "--models", "resnet34",
               "--stages", "diarization", "--work", str(tmp_path / "work"), "--json",
               str(tmp_path / "long.json")], env)
    assert "WeSpeaker ResNet34 with random weights" in out, out
    doc = json.loads((tmp_path / "long.json").read_text())
    assert doc["runs"][0]["stages"]["embeddings"]["seconds"] > 0, doc


@heavy
def test_gpu_run_dry_run(env, gpu_wheels, tmp_path):
    """bench/gpu_run.sh as the GPU machine runs it, on the CPU with the smoke shapes: the preflight
    (wheels, install, imports), then every endpoint section through the handler."""
    proc = gpu_run(env, gpu_wheels, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "preflight wheels: ok" in proc.stdout and "preflight imports: ok" in proc.stdout, proc.stdout
    preflight = json.loads((tmp_path / "preflight.json").read_text())
    assert preflight["problems"] == [] and "speaker_asr.endpoint" in preflight["imports"], preflight
    doc = json.loads((tmp_path / "gpu_benchmark-smoke.json").read_text())
    assert doc["errors"] == {} and list(doc["results"]) == ["bracket", "batch24", "together"], doc["errors"]
    bracket = doc["results"]["bracket"]
    for clip, windows in (("8s", 1), ("60s", 3)):
        for mode, used in (("plain", False), ("assisted, random distil (lower bound)", True),
                           ("assisted, self (upper bound)", True)):
            r = bracket[f"{clip} {mode}"]
            assert r["windows"] == windows and r["ms_per_token"] > 0 and r["assisted"]["used"] is used, (clip, mode, r)
    assert set(doc["results"]["batch24"]) == {"words", "plain"}
    together = doc["results"]["together"]
    assert {"asr alone", "diarization alone", "both, one stream"} <= set(together), together
    assert together["both, one stream"]["speakers"] >= 1  # the diarization ran inside the request
    md = (tmp_path / "gpu_benchmark-smoke.md").read_text()
    assert "| 60s | assisted, self (upper bound) |" in md and "| diarization alone |" in md, md


@heavy
def test_gpu_run_preflight_names_a_missing_wheel(env, gpu_wheels, tmp_path):
    """One carried wheel gone: the run stops in its first seconds, naming it."""
    partial = tmp_path / "whl"
    shutil.copytree(gpu_wheels, partial)
    (gone,) = partial.glob("pydantic_core-*.whl")
    gone.unlink()
    started = time.monotonic()
    proc = gpu_run(env, partial, tmp_path / "out")
    assert time.monotonic() - started < 10
    assert proc.returncode != 0 and "missing wheel pydantic-core==2.50.5" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


@heavy
def test_gpu_wheels_travel(tmp_path):
    """What travels to the GPU machine: the wheels for its Python 3.12 (from the package index),
    whose requirements the image or each other meet (and whatever the run imports here, too), with
    the working tree, under the device runner's 64 MiB."""
    folder = tmp_path / "whl"
    run(["bash", "bench/gpu_wheels.sh"], dict(os.environ, PYTHON=sys.executable, WHEEL_DIR=str(folder)),
        timeout=300)
    run([sys.executable, "bench/gpu_preflight.py", "closure", "--dir", str(folder), "--python", "3.12"],
        dict(os.environ, PYANNOTE_METRICS_ENABLED="false", PYTHONPATH=str(ROOT)))
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode().split("\0")
    tree = sum((ROOT / f).stat().st_size for f in tracked if f and (ROOT / f).is_file())
    wheels = sum(f.stat().st_size for f in folder.glob("*.whl"))
    assert tree + wheels < 64 * 2**20, (tree, wheels)


@heavy
def test_gpu_benchmark_bare_model_sections(env, tmp_path):
    """--full's sections on the bare models (not part of gpu_run.sh), smoke shapes on the CPU."""
    sections = "encoder,decode,batch,assisted,pyannote"
    run([sys.executable, "bench/gpu_benchmark.py", "--smoke", "--device", "cpu", "--sections", sections,
         "--tokens", "4", "--iters", "1", "--batch-sizes", "2", "--pyannote-seconds", "10", "--out", str(tmp_path)], env)
    doc = json.loads((tmp_path / "gpu_benchmark-smoke.json").read_text())
    assert doc["errors"] == {} and list(doc["results"]) == sections.split(","), doc["errors"]
    assert "| assisted (batch 1, 4 tokens) | ms/token | x plain |" in (tmp_path / "gpu_benchmark-smoke.md").read_text()


@heavy
def test_live_replay(env, kit, tmp_path):
    """bench/live_replay.py: a recording without references (real speech: pyannote.audio's own
    sample, so silero-vad hears turns) and one in the real-meetings layout, through the openai
    SDK's realtime client at 10x real time and through the file endpoint; the tables have a row
    per recording and the pooled row, and the JSON keeps every event."""
    from pathlib import Path as _Path

    import pyannote.audio

    sample = _Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"
    meeting = str(kit / "meetings" / "standin_meeting")
    out = run([sys.executable, "bench/live_replay.py", str(sample), meeting, meeting, "--joined",
               "--models", "tiny.en", "--speed", "10", "--max-seconds", "20", "--threads", "1",
               "--commit-every", "5"], env)
    pooled = table_rows(out, "| model | files | items (failed) | end -> completed p50 / p95 / max s "
                             "| speech_stopped -> completed p50 / p95 / max s "
                             "| reference word said -> its item completed p50 / p95 / max s "
                             "| completed -> first segment p50 / p95 / max s | items with text, no segment "
                             "| items with 2+ reference speakers | speech -> first delta p50 / p95 s "
                             "| live WER | file WER | live WDER | file WDER | live WDER / file WDER "
                             "| live recall of the file's words |")
    assert [r[:2] for r in pooled] == [["tiny.en", "4"]], out
    rows = table_rows(out, "| file | audio s | items | deltas | segments | speakers | end -> completed p50 / max s "
                           "| speech -> first delta p50 s | live WER | file WER | live WDER | file WDER "
                           "| live vs file WER | live recall of the file's words |")
    assert [r[0] for r in rows] == ["sample", "standin_meeting", "standin_meeting", "joined (2 clips)"], out
    assert rows[3][1] == "42.0", rows  # the two 20 s clips and a second after each
    assert "| file | item audio (s) | speech_stopped -> completed s | of which waiting" in out  # the slowest items
    items = rows[0][2].split("/")
    assert int(items[1]) >= 1 and items[0] == items[1], rows  # the VAD heard the sample's speech; all completed
    assert rows[1][8] != "-" and rows[0][8] == "-" and rows[3][8] != "-", rows  # references: not the sample's
    assert all(re.fullmatch(r"[01]\.\d\d", r[13]) for r in rows), rows  # the live words' recall of the file's
    saved = json.loads(next((tmp_path / "bench-results").glob("live-replay-*.json")).read_text())
    events = saved["results"]["tiny.en"][0]["events"]
    assert events[0][1]["type"] == "session.created" and any(e["type"].endswith(".completed") for _, e in events)


@heavy
def test_word_timestamp_memory(env, tmp_path):
    out = run([sys.executable, "bench/word_timestamp_memory.py", "--batches", "1", "--tokens", "4",
               "--d-model", "80", "--encoder-layers", "1", "--out", str(tmp_path)], env)
    rows = table_rows(out, "| batch | plain: peak (above the model) | words: peak (above the model) | words add | "
                           "stock words add |")
    assert len(rows) == 1 and rows[0][0] == "1" and re.fullmatch(r"\d+ MB \(-?\d+ MB\)", rows[0][1]), rows
    assert (tmp_path / "word_timestamp_memory.md").read_text().strip() in out


# --------------------------------------------------------------------------- eval/


@heavy
def test_known_speakers(env, kit, tmp_path):
    out = run([sys.executable, "eval/known_speakers.py", "--part", "sample", "--models-dir", str(kit),
               "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")], env)
    summary = table_rows(out, "| threshold | files all right | names right | wrong | missed | strangers named |")
    assert [r[0] for r in summary] == ["0.6"], out
    files = table_rows(out, "| file | speakers | clips | right | wrong | missed | stranger named | purity "
                            "| similarities |")
    assert [r[:3] for r in files] == [["sample", "2", "2"]], out  # both voices got a clip
    assert (tmp_path / "out" / "sample.md").read_text() == out.rstrip("\n") + "\n"


@heavy
def test_evaluate_meetings(env, kit, tmp_path):
    """The real-meetings evaluation on the stand-in clip: every mode, the old attribution loaded
    from git beside ours, the rule ablations; the pooled table has the anchor and ours in every
    mode, the rule table every rule, and ours agrees with the endpoint's response builder."""
    from speaker_asr.attribution.speakers import RULES

    out = run([sys.executable, "eval/evaluate.py", "--part", "meetings", "--meetings-dir", str(kit / "meetings"),
               "--models-dir", str(kit), "--mode", "oracle,oracle4,pipeline", "--before", "HEAD", "--ablate",
               "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--threads", "1"], env)
    pooled = table_rows(out, "| model | turns | algorithm | WER | cpWER | WDER | dropped | speaker errors | vs anchor |")
    for model in ("tiny.en", "base"):
        for mode in ("oracle", "oracle4", "pipeline"):
            algorithms = [r[2] for r in pooled if r[:2] == [model, mode]]
            assert "word max-overlap (WhisperX), turns" in algorithms and "**ours**" in algorithms, (model, mode, out)
            assert sum(a.startswith("ours before") for a in algorithms) == 2, algorithms
            assert [a for a in algorithms if a.startswith("ours without")] == \
                [f"ours without {r}" for r in RULES] + ["ours without voices"]
    rules = table_rows(out, "| model | turns | rule | words changed | fixed | broken | WDER without it | with it |")
    assert {r[2] for r in rules} == set(RULES) | {"voices"}
    assert "disagree" not in out and "differ**" not in out, out
    derived = table_rows(out, "| file | DER (collar 0) | JER (collar 0) | speakers found | reference speakers |")
    assert derived[0][0] == "STANDIN1" and derived[0][4] == "2", derived
    assert (tmp_path / "out" / "latest.md").read_text().startswith("# Speaker-attribution evaluation")


@heavy
def test_choose_word_rules(env, kit, tmp_path):
    """eval/choose_word_rules.py --quick on two stand-in meeting clips and their harder variants,
    as eval/test_eval.py runs choose_voice_rule.py: every turn kind scored, today's rules listed
    with where they do harm, every clip held out once, the tables written to word-rules.md."""
    from speaker_asr.testing.kit import write_meeting

    for name in ("ami_EN0001a", "ami_EN0002a"):
        write_meeting(tmp_path / "meetings" / name, kit / "audio")
        (tmp_path / "meetings" / name / "info.json").write_text(json.dumps({"ami": {"meeting": name[4:]}}))
    out = run([sys.executable, "eval/choose_word_rules.py", "--quick", "--parts", "meetings,meetings-hard",
               "--heldout", "", "--models", "tiny.en", "--models-dir", str(kit),
               "--meetings-dir", str(tmp_path / "meetings"), "--cache-dir", str(tmp_path / "cache"),
               "--out", str(tmp_path / "out")], env)
    assert "## The set chosen on every recording" in out and "Where today's rules do harm" in out, out
    held = table_rows(out, "| part | model | turns | anchor | today's | chosen on all | held-out choice "
                           "| recordings harmed |")
    assert {(r[0], r[2]) for r in held} == {(p, t) for p in ("meetings", "meetings-hard")
                                            for t in ("reference", "reference (4)", "pipeline")}, out
    result = json.loads((tmp_path / "out" / "word-rules.json").read_text())
    assert set(result["result"]["held"]) == {"EN0001a", "EN0002a"}
    assert {r["part"] for r in result["rows"]} == {"meetings", "meetings-hard"}
    assert len({r["algorithm"] for r in result["rows"]}) == 33  # the anchor and 2^5 candidates
    assert (tmp_path / "out" / "word-rules.md").read_text() == out.rstrip("\n") + "\n"


@heavy
def test_multichannel_eval(env, kit, tmp_path):
    """eval/multichannel.py on the stand-in meeting: one channel per person, both modes scored,
    every word of the multichannel answer carrying its channel."""
    out = run([sys.executable, "eval/multichannel.py", "--models-dir", str(kit), "--meetings-dir",
               str(kit / "meetings"), "--out", str(tmp_path / "mc.md")], env)
    rows = table_rows(out, "| file | people | s | words left out | WDER multichannel | WDER downmixed "
                           "| WER multichannel | WER downmixed | s multichannel | s downmixed "
                           "| every word has a channel | multichannel words off their channel's speech |")
    assert rows[0][1] == "2" and rows[0][-2] == "yes" and rows[-1][0] == "**pooled**", out
    assert (tmp_path / "mc.md").read_text() == out[out.index("Channels as speakers"):].rstrip("\n") + "\n"


@pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")),
                    reason="the generated dialogues' voices need espeak-ng and sox")
@heavy
def test_multichannel_eval_on_generated_dialogues(env, kit, tmp_path):
    """eval/multichannel.py --source generated: one held-out dialogue, each speaker's own voice
    on a channel, every word scored, the off-time column filled."""
    out = run([sys.executable, "eval/multichannel.py", "--models-dir", str(kit), "--source", "generated",
               "--part", "heldout", "--count", "1", "--cache-dir", str(tmp_path / "cache")], env)
    rows = table_rows(out, "| file | people | s | words left out | WDER multichannel | WDER downmixed "
                           "| WER multichannel | WER downmixed | s multichannel | s downmixed "
                           "| every word has a channel | multichannel words off their channel's speech |")
    assert rows[0][0] == "h01" and rows[0][3] == "0" and rows[-1][0] == "**pooled**", out
    assert "generated dialogues (heldout)" in out


@heavy
def test_multichannel_cost(env):
    out = run([sys.executable, "bench/multichannel_cost.py", "--input", "8s", "--repeats", "1",
               "--channels", "2"], env)
    rows = table_rows(out, "| run | median s | / one channel's ASR | peak MB added |")
    assert [r[0] for r in rows] == ["one channel, ASR only", "2 channels downmixed, default",
                                    "2 channels, multichannel", "2 channels, multichannel, batch_size 1",
                                    "2 channels, diarize_channels"], out


# --------------------------------------------------------------------------- reliability/


@heavy
def test_reliability_run_all(env, tmp_path):
    """run_all.py runs each of the other reliability scripts (load.py, fuzz_decoder.py,
    long_audio.py) as its own process, echoes its summary line, then sums them up."""
    out = run([sys.executable, "reliability/run_all.py", "--work", str(tmp_path), "--matrix-args", "-k empty-body",
               "--fuzz-inputs", "24", "--load-requests", "5", "--long-minutes", "0.25",
               "--long-args", "--models real --limit-minutes 5", "--json", str(tmp_path / "all.json")], env)
    assert re.search(r"^  load: sent=5 ok=3 4xx=2 5xx=0 lost=0 mismatched=0 ", out, re.M), out
    assert re.search(r"^  fuzz_decoder: inputs=24 .* crashes=0 bad_outputs=0 hard_crashes=0 timeouts=0", out, re.M), out
    assert re.search(r"^  long_audio: minutes=0.25 models=real .* words=\d+ speakers=\d+", out, re.M), out
    summary = out[out.index("reliability summary"):]
    assert "tests/serving/test_reliability.py): cases tried 3, passed 3, xfailed 0, failed 0" in summary, summary
    assert "concurrent load: sent 5, ok 3, 4xx 2, 5xx 0, lost 0, mismatched 0" in summary, summary
    assert "decoder fuzz: inputs 24 (seed 0), crashes 0" in summary and "long audio 0.25 min (real models" in summary
    assert summary.rstrip().endswith("overall: ok"), summary
    assert set(json.loads((tmp_path / "all.json").read_text())) == {"matrix", "fuzz", "load", "long"}


@heavy
def test_live_load(env, kit, tmp_path):
    """reliability/live_load.py on the stand-in kit's models (through REAL_MODELS_DIR) with real
    speech (pyannote.audio's own sample, so silero-vad hears turns): every phase runs, its checks
    pass (exit 0: every fault answered by an error event or a close code, nothing lost, no
    session left open, SIGTERM's exit within 10 s), and the table and the JSON say so."""
    from pathlib import Path as _Path

    import pyannote.audio

    sample = _Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"
    out = run([sys.executable, "reliability/live_load.py", "--models", "real", "--audio", str(sample),
               "--seconds", "10", "--max-ratio", "100", "--work", str(tmp_path / "work"),
               "--json", str(tmp_path / "live.json")], env)
    rows = table_rows(out, "| phase | what | items completed / committed | speech end -> completed p50 / p95 s "
                           "| speaker lag p50 / p95 s | file request p50 / p95 s (n) "
                           "| server RSS start / peak / end MB | faults seen | problems |")
    assert [r[0] for r in rows] == ["alone", "concurrent", "mixed", "flood", "malformed", "no_read", "disconnect",
                                    "idle", "sigterm"], out
    assert all(r[-1] == "0" for r in rows), out
    assert re.search(r"^live_load: phases=9 problems=0 ", out, re.M), out
    doc = json.loads((tmp_path / "live.json").read_text())
    phases = {p["name"]: p for p in doc["phases"]}
    assert doc["passed"] and doc["models"] == "real" and doc["sessions"] == 2
    assert phases["concurrent"]["extra"]["over_limit"] == {"errors": ["session_limit_reached"], "close_code": 1013}
    assert phases["malformed"]["extra"]["over_ws_limit_close"] == 1009
    assert phases["idle"]["extra"]["errors"] == ["session_idle_timeout"]
    assert phases["no_read"]["extra"]["server_outcome"] in ("client_not_reading", "idle")
    sigterm = phases["sigterm"]["extra"]
    assert sigterm["exit_s"] < 10 and all(s["close_code"] == 1012 for s in sigterm["sessions"]), sigterm


@heavy
def test_scheduler_load(env, kit, tmp_path):
    """reliability/scheduler_load.py on the stand-in kit's models with real speech: every phase
    runs (a short file beside a long one, a live session beside it, an abandoned request), each
    request is answered, the long file's answer beside other work is the one it gets alone, and
    the table and the JSON say so (the ratios' bounds are loose here: the stand-in models' times
    are not the real ones')."""
    from pathlib import Path as _Path

    import pyannote.audio

    sample = _Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"
    out = run([sys.executable, "reliability/scheduler_load.py", "--models", "real", "--audio", str(sample),
               "--long-seconds", "24", "--short-seconds", "4", "--live-seconds", "8", "--abandon-after", "1",
               "--max-short-ratio", "100", "--max-long-ratio", "100", "--work", str(tmp_path / "work"),
               "--json", str(tmp_path / "scheduler.json")], env)
    rows = table_rows(out, "| phase | what | seconds | x alone | bound | ok |")
    assert [r[0] for r in rows] == ["alone", "alone", "alone", "short_after_long", "short_after_long",
                                    "live_beside_long", "live_beside_long", "abandoned"], out
    assert all(r[-1] == "yes" for r in rows), out
    assert re.search(r"^scheduler_load: checks=5 failed=0$", out, re.M), out
    doc = json.loads((tmp_path / "scheduler.json").read_text())
    assert doc["passed"] and doc["phases"]["long_alone"]["answer"]["text"] is not None
    assert doc["phases"]["short_after_long"]["long"]["answer"] == doc["phases"]["long_alone"]["answer"]


@heavy
def test_choose_approximate(env):
    """eval/choose_approximate.py --smoke: the tiny random pipeline's run recorded once, then
    every variant (pooled, re-embedded, trained on the embedded pairs) computed from it, each
    embedding at most what the recipe embeds."""
    spec = importlib.util.spec_from_file_location("choose_approximate", ROOT / "eval" / "choose_approximate.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, script)  # its dataclasses look their module up there
    spec.loader.exec_module(script)
    out = run([sys.executable, "eval/choose_approximate.py", "--smoke"], env)
    lines = [line for line in out.splitlines() if line.startswith("smoke ")]
    assert [line.split(":")[0][len("smoke "):] for line in lines] == [v.name for v in script.VARIANTS], out
    for line in lines:
        done, total = map(int, line.rsplit("embedded ", 1)[1].split("/"))
        assert 0 < done <= total, line
    assert lines[0].endswith(f"embedded {total}/{total}"), out  # the recipe embeds every pair
