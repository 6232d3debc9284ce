"""``python -m speaker_asr transcribe DIR --ray ADDRESS`` (speaker_asr/batch/ray_engine.py) as a
user runs it, against a real Ray head started here in a network namespace that holds only
loopback (speaker_asr/testing/ray_cluster.py) and ended by its own process id, with the tiny
models:

* a folder with a broken file: non-zero exit naming it, and the good files' transcripts
  identical, word for word and speaker for speaker, to the in-process batch run's (srt and txt
  byte for byte), although one actor was killed (SIGKILL, as the OOM killer does) while it had a
  recording: that recording was retried on a new actor and finished;
* a rerun into the same folder skips what is done (the outputs untouched);
* the endpoint never imports Ray.

And without a cluster: the options of one engine refused with another's, the settings the
workers get (never a token), and recordings found and read through fsspec URIs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import FAKE_TOKEN, ROOT, cli_env, encode, tone

GOOD = ["a.wav", "b.flac", "sub/c.wav", "long.wav"]
FORMATS = "json,srt,txt"


def _clip(i: int, seconds: float = 1.5) -> np.ndarray:
    return np.concatenate([tone(seconds, freq=180.0 + 15 * i), tone(seconds, freq=320.0)])


def _archive(root: Path) -> Path:
    for i, name in enumerate(GOOD):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        audio = _clip(i, 20.0 if name == "long.wav" else 1.5)
        path.write_bytes(encode(audio, fmt="FLAC" if name.endswith(".flac") else "WAV"))
    (root / "broken.wav").write_text("meeting notes saved with the wrong name\n")
    return root


def _transcripts(out: Path) -> dict[str, object]:
    """Every output: text formats as they are, JSON without the decode's own bookkeeping
    (``assisted``: whether speculative decoding was used, which assisted=auto decides per
    process from the files it has timed)."""
    found: dict[str, object] = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            if path.suffix == ".json":
                data = json.loads(path.read_text())
                data.pop("assisted", None)
                found[str(path.relative_to(out))] = data
            else:
                found[str(path.relative_to(out))] = path.read_text()
    return found


@pytest.fixture(scope="module")
def head(tmp_path_factory, tiny_models):
    from speaker_asr.testing.ray_cluster import LoopbackRayHead, unavailable
    from speaker_asr.testing.server import free_port

    why = unavailable()
    if why:
        pytest.skip(f"no Ray head here: {why}")
    work = tmp_path_factory.mktemp("ray")
    cluster = LoopbackRayHead(work / "home", work, port=free_port(),
                              env=cli_env(tiny_models))
    cluster.start()
    yield cluster
    cluster.stop()
    assert cluster.processes() == [], "a process of the Ray cluster outlived its head"


@pytest.mark.subprocess
@pytest.mark.heavy  # a minute and a half: make test-scripts
def test_a_folder_on_ray_matches_the_local_run_and_survives_a_killed_actor(head, tiny_models, tmp_path):
    rec = _archive(tmp_path / "rec")
    local = tmp_path / "local"
    done = subprocess.run([sys.executable, "-m", "speaker_asr", "transcribe", str(rec), "-r", "-d", str(local),
                           "-f", FORMATS], cwd=ROOT, env=cli_env(tiny_models), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 1, done.stderr

    out = tmp_path / "ray"
    manifest = tmp_path / "ray.jsonl"
    # paths relative to the driver's folder (the workers' is another): they read rec/... there
    cli = head.popen([sys.executable, "-m", "speaker_asr", "transcribe", "rec", "-r", "-d", "ray",
                      "-f", FORMATS, "--ray", head.address, "--ray-actors", "2", "--manifest", str(manifest)],
                     cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 600
    while cli.poll() is None and time.monotonic() < deadline:
        # the first actor seen with a recording in hand (largest first: long.wav, 40 s, went
        # out first and keeps its actor busiest)
        busy = head.worker("ray::Transcriber.respond") if killed is None else None
        if busy is not None:
            os.kill(busy, signal.SIGKILL)
            killed = busy
        time.sleep(0.02)
    stdout, stderr = cli.communicate(timeout=60)
    assert killed is not None, "no actor was seen with a recording in hand"
    assert cli.returncode == 1, stderr
    assert "rec/broken.wav: FAILED: could not decode the audio" in stderr
    assert FAKE_TOKEN not in stderr + stdout

    lines = {r["path"]: r for r in map(json.loads, manifest.read_text().splitlines())}  # rec/...
    retried = [name for name, r in lines.items() if r["attempts"] == 2]
    assert len(retried) == 1, lines  # the recording the killed actor had: tried again, and done
    assert f"the Ray actor transcribing {retried[0]} died" in stderr
    assert lines[retried[0]]["status"] == "done"
    assert [name for name, r in lines.items() if r["status"] != "done"] == ["rec/broken.wav"]
    assert _transcripts(out) == _transcripts(local)
    assert len(_transcripts(out)) == 3 * len(GOOD)
    words = json.loads((out / "long.json").read_text())["chunks"]
    assert words and all(c.get("speaker") for c in words)

    # a rerun into the same folder skips the good files (only the broken one is tried again)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    again = head.run([sys.executable, "-m", "speaker_asr", "transcribe", str(rec), "-r", "-d", str(out),
                      "-f", FORMATS, "--ray", head.address, "--ray-actors", "1"],
                     cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1, again.stderr
    assert f"skipping {len(GOOD)} of {len(GOOD) + 1} recordings already transcribed" in again.stderr
    assert "broken.wav: FAILED" in again.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.subprocess
def test_a_pool_the_cluster_cannot_hold_or_load_is_refused_with_the_reason(head, tmp_path):
    """Before any recording: GPUs the cluster does not have, and models the actors cannot load,
    each a message that says what is wrong (exit 1, nothing written)."""
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "a.wav").write_bytes(encode(tone(1.0)))
    base = [sys.executable, "-m", "speaker_asr", "transcribe", "rec", "-d", "out", "--ray", head.address]
    gpus = head.run([*base, "--ray-gpus-per-actor", "1"], cwd=tmp_path, capture_output=True, text=True,
                    timeout=300)
    assert gpus.returncode == 1, gpus.stderr
    assert (f"the Ray cluster at {head.address} has 0 GPU and 2 CPU; 1 actor with 1 GPU and 1 CPU each "
            "need more: lower --ray-actors, --ray-gpus-per-actor or --ray-cpus-per-actor") in gpus.stderr
    missing = tmp_path / "no-such-model"
    models = head.run(base, env=head.env(ASR_MODEL=str(missing)), cwd=tmp_path, capture_output=True,
                      text=True, timeout=300)
    assert models.returncode == 1, models.stderr
    assert "error: could not load the models on a Ray actor: could not load the models:" in models.stderr
    assert str(missing) in models.stderr
    assert not (tmp_path / "out").exists()


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speaker_asr", "transcribe", *args], cwd=ROOT,
                          env=env or dict(os.environ), capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--ray", "auto", "--url", "http://127.0.0.1:9"], "--ray and --url are two ways to run the batch: give one"),
    (["--ray", "auto", "--concurrency", "4"], "--concurrency is for --url; on Ray the actors take one "
                                              "recording each at a time (--ray-actors sets how many)"),
    (["--ray-actors", "2"], "--ray-actors is for --ray (transcribing on a Ray cluster)"),
    (["--ray", "auto", "--ray-gpus-per-actor", "-1"], "-1 must be 0 or more"),
])
def test_options_of_another_engine_are_refused_before_anything_runs(tmp_path, args, message):
    (tmp_path / "a.wav").write_bytes(encode(tone(0.5)))
    done = _cli(str(tmp_path), "-d", str(tmp_path / "out"), *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_workers_get_the_model_settings_and_never_a_token():
    from speaker_asr.batch.ray_engine import secret_env, worker_env

    environ = {"ASR_MODEL": "/models/whisper", "diarization_model": "/models/pyannote", "HF_HUB_OFFLINE": "1",
               "PYANNOTE_METRICS_ENABLED": "false", "QUANTIZATION": "int8", "HF_TOKEN": FAKE_TOKEN,
               "API_KEY": "k" * 20, "PATH": "/usr/bin", "HOME": "/root"}
    assert worker_env(environ) == {"ASR_MODEL": "/models/whisper", "diarization_model": "/models/pyannote",
                                   "HF_HUB_OFFLINE": "1", "PYANNOTE_METRICS_ENABLED": "false",
                                   "QUANTIZATION": "int8"}
    assert secret_env(environ) == {"HF_TOKEN": FAKE_TOKEN}


def test_recordings_are_found_and_read_through_a_uri(tmp_path):
    """A folder given as a URI (fsspec's: s3://, gs://, ... where installed; file:// and memory://
    always) is searched like a local one: audio by extension in name order, hidden names skipped,
    subfolders only with recursive, each output keeping its subfolder."""
    import fsspec

    from speaker_asr.batch import plan
    from speaker_asr.batch.errors import BatchError, FileError
    from speaker_asr.batch.sources import read_source

    fs = fsspec.filesystem("memory")
    wav = encode(tone(0.5))
    for name in ("calls/b.wav", "calls/a.mp3", "calls/notes.txt", "calls/.hidden.wav", "calls/2026/c.flac"):
        fs.pipe(f"/{name}", wav)
    flat = plan(["memory://calls"], tmp_path / "out", ["json"])
    assert [j.source for j in flat.jobs] == ["memory:///calls/a.mp3", "memory:///calls/b.wav"]
    assert flat.discovery.ignored == ["memory:///calls/notes.txt"]
    assert flat.discovery.unsearched == ["memory:///calls/2026"]
    deep = plan(["memory://calls"], tmp_path / "out", ["json"], recursive=True)
    assert [(j.source, j.outputs["json"]) for j in deep.jobs][0] == (
        "memory:///calls/2026/c.flac", tmp_path / "out" / "2026" / "c.json")
    assert read_source(deep.jobs[0].source) == wav

    local = tmp_path / "rec"
    local.mkdir()
    (local / "d.wav").write_bytes(wav)
    assert [j.source for j in plan([f"file://{local}"], tmp_path / "out", ["json"]).jobs] == [f"file://{local}/d.wav"]

    with pytest.raises(BatchError, match="cannot read memory://nowhere: no such file or folder"):
        plan(["memory://nowhere"], tmp_path / "out", ["json"])
    with pytest.raises(BatchError, match="cannot read nosuchfs://bucket/x"):
        plan(["nosuchfs://bucket/x"], tmp_path / "out", ["json"])
    fs.pipe("/calls/empty.wav", b"")
    with pytest.raises(FileError, match="memory:///calls/empty.wav is empty"):
        read_source("memory:///calls/empty.wav")


def test_the_endpoint_never_imports_ray():
    code = ("import sys; import handler, speaker_asr.cli, speaker_asr.serving.app, speaker_asr.batch; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
