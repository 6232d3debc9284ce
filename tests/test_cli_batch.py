"""``python -m speaker_asr transcribe FOLDER`` with the tiny models, as a user runs it (a process):
a folder of five recordings, one of them broken and two in subfolders, gives four sets of outputs
in the same subfolders, names the broken one with its reason, writes the manifest and exits 1; a
rerun skips what is done, and one with nothing left returns without loading a model. A run killed
mid-way leaves only complete files under final names and the rerun finishes the rest; Ctrl-C stops
after the recording in hand. ``--url`` against the server on the same models writes the same bytes
as the run in this process (JSON and raw bodies, several formats and one)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import FAKE_TOKEN, ROOT, cli_env, encode, running_server, server_env, tone

pytestmark = pytest.mark.subprocess

FORMATS = "json,srt,txt"
GOOD = ["a.wav", "b.flac", "sub/c.wav", "sub/deeper/d.wav"]


def run_cli(args, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speaker_asr", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def start_cli(args, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "speaker_asr", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def clip(i: int) -> np.ndarray:
    return np.concatenate([tone(1.5, freq=180.0 + 15 * i), tone(1.5, freq=320.0)])


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """rec/: a.wav, b.flac, broken.wav (text), notes.txt, sub/c.wav, sub/deeper/d.wav."""
    root = tmp_path_factory.mktemp("batch") / "rec"
    for i, name in enumerate(GOOD):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode(clip(i), fmt="FLAC" if name.endswith(".flac") else "WAV"))
    (root / "broken.wav").write_text("meeting notes saved with the wrong name\n")
    (root / "notes.txt").write_text("not audio\n")
    return root


def outputs_of(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def comparable(name: str, data: bytes):
    """An output as two runs must agree on it: its bytes, a json one's without ``assisted`` (the
    mode assisted='auto' took depends on what that process had timed before; the text is the
    same either way), the rest of it still byte for byte."""
    if not name.endswith(".json"):
        return data
    kept = re.sub(rb',\n  "assisted": \{\n    "used": (true|false),\n    "reason": "[^"]*"\n  \}', b"", data)
    assert b'"assisted"' not in kept and kept != data, (name, data[-300:])  # the ASR ran: it is there
    return kept


def comparable_outputs(out: Path) -> dict:
    return {name: comparable(name, data) for name, data in outputs_of(out).items()}


def expected_names(formats=FORMATS) -> list[str]:
    ext = {"json": "json", "srt": "srt", "txt": "txt", "vtt": "vtt"}
    return sorted(f"{Path(name).with_suffix('')}.{ext[f]}" for name in GOOD for f in formats.split(","))


@pytest.fixture(scope="module")
def local(tiny_models, archive, tmp_path_factory):
    """The folder transcribed in this process (the first run)."""
    work = tmp_path_factory.mktemp("local")
    out, manifest = work / "out", work / "run.jsonl"
    proc = run_cli(["transcribe", archive, "--recursive", "-d", out, "-f", FORMATS, "--num-speakers", 2,
                    "--language", "en", "--manifest", manifest], cli_env(tiny_models))
    return proc, out, manifest


def test_a_folder_with_a_broken_file(local, archive):
    proc, out, manifest = local
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert proc.stdout == ""
    assert sorted(outputs_of(out)) == expected_names()
    for name in GOOD:
        stem = Path(name).with_suffix("")
        result = json.loads((out / f"{stem}.json").read_text())
        assert result["duration"] == pytest.approx(3.0, abs=0.01) and result["language"] == "en"
        assert (out / f"{stem}.srt").read_text().startswith("1\n00:00:")
    err = proc.stderr
    assert err.count("models loaded in ") == 1  # once for the whole folder
    assert f"ignored 1 file that is not audio by its extension: {archive / 'notes.txt'}" in err
    assert f"{archive / 'broken.wav'}: FAILED: could not decode the audio" in err
    assert "5 recordings: done 4, skipped 0 (already done), failed 1; wall time " in err
    assert f"failed:\n  {archive / 'broken.wav'}: could not decode the audio" in err
    assert "audio transcribed: 0.00 h (0.2 min)" in err
    assert "Traceback" not in err and FAKE_TOKEN not in err
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert [(Path(line["path"]).relative_to(archive).as_posix(), line["status"]) for line in lines] == [
        ("a.wav", "done"), ("b.flac", "done"), ("broken.wav", "failed"), ("sub/c.wav", "done"),
        ("sub/deeper/d.wav", "done")]
    assert lines[0]["outputs"] == [str(out / f"a.{ext}") for ext in ("json", "srt", "txt")]
    assert lines[0]["duration"] == pytest.approx(3.0, abs=0.01) and lines[0]["seconds"] > 0
    assert lines[2]["error"].startswith("could not decode the audio") and lines[2]["outputs"] == []


def test_a_rerun_skips_what_is_done(tiny_models, local, archive):
    _, out, _ = local
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    proc = run_cli(["transcribe", archive, "-r", "-d", out, "-f", FORMATS, "--num-speakers", 2, "--language", "en"],
                   cli_env(tiny_models))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "skipping 4 of 5 recordings already transcribed" in proc.stderr
    assert "5 recordings: done 0, skipped 4 (already done), failed 1" in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_nothing_left_to_do_returns_without_loading_a_model(tiny_models, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    (src / "x.wav").write_bytes(encode(tone(1.0)))
    (out / "x.json").parent.mkdir()
    (out / "x.json").write_text("{}\n")
    # a model load would fail with these settings (exit 1, as the --overwrite run shows): exit 0
    # is the proof that none was loaded, whatever the time it took
    env = cli_env(tiny_models, ASR_MODEL="/nonexistent/whisper", DEVICE="nonsense")
    proc = run_cli(["transcribe", src, "-d", out], env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"nothing to do: the recording is transcribed in {out} (--overwrite transcribes it again)" in proc.stderr
    assert "1 recording: done 0, skipped 1 (already done), failed 0" in proc.stderr
    proc = run_cli(["transcribe", src, "-d", out, "--overwrite"], env, timeout=120)
    assert proc.returncode == 1 and "error: could not load the models" in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["{dir}", "{dir}/a.wav"], "need a folder to write into: add --output-dir DIR"),
    (["{dir}", "-o", "{dir}/out.json"], "names one file; the recordings of a folder need a folder"),
    (["{dir}", "-", "-d", "{dir}/out"], "- (standard input) can only be transcribed alone"),
    (["{dir}", "{dir}/missing.wav", "-d", "{dir}/out"], "cannot read {dir}/missing.wav: No such file or directory"),
    (["{dir}", "{dir}/again/a.wav", "-d", "{dir}/out"], "would both write {dir}/out/a.json"),
    (["{dir}", "-d", "{dir}/out", "--format", "srt,docx"], "unknown format 'docx'"),
])
def test_bad_batch_arguments_exit_2_before_loading_models(tiny_models, tmp_path, args, fragment):
    (tmp_path / "again").mkdir()
    for name in ("a.wav", "again/a.wav"):
        (tmp_path / name).write_bytes(encode(tone(1.0)))
    proc = run_cli(["transcribe", *(a.format(dir=tmp_path) for a in args)], cli_env(tiny_models, DEVICE="nonsense"),
                   timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert fragment.format(dir=tmp_path) in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- interrupted runs


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Path:
    """Eight copies of one clip: every transcript must come out the same."""
    root = tmp_path_factory.mktemp("copies") / "calls"
    root.mkdir()
    data = encode(clip(0))
    for i in range(8):
        (root / f"call{i}.wav").write_bytes(data)
    return root


def run_until_first_output(args, env, out: Path, sig: int) -> tuple[subprocess.Popen, str, str]:
    proc = start_cli(args, env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if any(out.glob("*.srt")):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, stdout, stderr


def check_complete(out: Path, reference: dict[str, bytes]) -> None:
    """Every file under a final name is a whole transcript (the same as any other copy's)."""
    for path in out.iterdir():
        assert not path.name.startswith("."), path
        assert comparable(path.name, path.read_bytes()) == comparable(path.name, reference[path.suffix]), path


@pytest.mark.heavy  # half a minute: make test-scripts
def test_a_killed_run_leaves_only_whole_files_and_the_rerun_finishes(tiny_models, copies, tmp_path):
    out = tmp_path / "out"
    args = ["transcribe", copies, "-d", out, "-f", "json,srt", "--language", "en"]
    env = cli_env(tiny_models)
    proc, _, _ = run_until_first_output(args, env, out, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    finished = sorted(p.stem for p in out.glob("*.srt"))
    assert 1 <= len(finished) < 8, finished
    # (json is written before srt: a killed run may also have left a json without its srt)
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert all(name.endswith(".partial") for name in leftovers), leftovers
    reference = {".json": (out / f"{finished[0]}.json").read_bytes(), ".srt": (out / f"{finished[0]}.srt").read_bytes()}
    json.loads(reference[".json"])
    for path in out.iterdir():  # whatever is under a final name is whole
        if not path.name.startswith("."):
            assert comparable(path.name, path.read_bytes()) == comparable(path.name, reference[path.suffix]), path

    again = run_cli(args, env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"skipping {len(finished)} of 8 recordings already transcribed" in again.stderr
    assert f"8 recordings: done {8 - len(finished)}, skipped {len(finished)} (already done), failed 0" in again.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(f"call{i}.{e}" for i in range(8) for e in ("json", "srt"))
    check_complete(out, reference)  # no temporary file left either


@pytest.mark.heavy  # make test-scripts
def test_ctrl_c_stops_after_the_recording_in_hand(tiny_models, copies, tmp_path):
    out, manifest = tmp_path / "out", tmp_path / "run.jsonl"
    args = ["transcribe", copies, "-d", out, "-f", "json,srt", "--language", "en", "--manifest", manifest]
    proc, stdout, stderr = run_until_first_output(args, cli_env(tiny_models), out, signal.SIGINT)
    assert proc.returncode == 130, stderr[-3000:]
    assert "stopping after the recordings in hand (Ctrl-C again to stop at once" in stderr
    assert "interrupted: what is done is written in full" in stderr
    assert "run the same command again to retry the rest" in stderr and "Traceback" not in stderr
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    done = [line for line in lines if line["status"] == "done"]
    assert len(lines) == 8 and 1 <= len(done) < 8
    assert {line["status"] for line in lines} == {"done", "not_attempted"}
    assert f"8 recordings: done {len(done)}, skipped 0 (already done), failed 0, not attempted {8 - len(done)}" in stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{Path(line['path']).stem}.{e}" for line in done for e in ("json", "srt"))
    first = Path(done[0]["path"]).stem
    check_complete(out, {".json": (out / f"{first}.json").read_bytes(), ".srt": (out / f"{first}.srt").read_bytes()})


# --------------------------------------------------------------------------- --url


@pytest.fixture(scope="module")
def server(tiny_models, tmp_path_factory):
    with running_server("batch", server_env(tiny_models), tmp_path_factory.mktemp("server-logs")) as s:
        yield s


def test_url_writes_the_same_bytes_as_the_run_in_process(tiny_models, local, archive, server, tmp_path):
    """Same models, same folder: every output identical byte for byte, with the JSON body and with
    the raw body (where every format is rendered here from the plain json answer); the broken file
    is the server's 400 with the same reason; the token is sent and written nowhere."""
    _, local_out, _ = local
    expected = comparable_outputs(local_out)
    env = cli_env(tiny_models)  # HF_TOKEN=FAKE_TOKEN: sent as the bearer token
    for body in ("json", "raw"):
        out, manifest = tmp_path / body, tmp_path / f"{body}.jsonl"
        proc = run_cli(["transcribe", archive, "-r", "-d", out, "-f", FORMATS, "--num-speakers", 2, "--language",
                        "en", "--url", server.url, "--body", body, "--concurrency", 3, "--manifest", manifest], env)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert f"with {server.url}/ (3 at a time)" in proc.stderr
        assert comparable_outputs(out) == expected, body
        assert f"{archive / 'broken.wav'}: FAILED: 400 Bad Request: could not decode the audio" in proc.stderr
        assert FAKE_TOKEN not in proc.stdout + proc.stderr + manifest.read_text()
        assert not any(FAKE_TOKEN.encode() in data for data in outputs_of(out).values())
        # in the order they finished (three at a time)
        statuses = {Path(line["path"]).name: line["status"]
                    for line in map(json.loads, manifest.read_text().splitlines())}
        assert statuses == {"a.wav": "done", "b.flac": "done", "broken.wav": "failed", "c.wav": "done",
                            "d.wav": "done"}
    assert FAKE_TOKEN not in server.log()


@pytest.mark.heavy  # half a minute: make test-scripts
def test_url_one_format_is_rendered_by_the_server_as_in_process(tiny_models, archive, server, tmp_path):
    """A single format is the endpoint's response_format (with speaker_names) both ways."""
    common = ["-r", "-f", "vtt", "--speaker-names", "Alice", "--language", "en"]
    local = run_cli(["transcribe", archive, "-d", tmp_path / "local", *common], cli_env(tiny_models))
    remote = run_cli(["transcribe", archive, "-d", tmp_path / "remote", *common, "--url", server.url + "/predict"],
                     cli_env(tiny_models))
    assert local.returncode == remote.returncode == 1, remote.stderr[-3000:]
    got = outputs_of(tmp_path / "remote")
    assert sorted(got) == expected_names("vtt") and got == outputs_of(tmp_path / "local")
    assert all(text.startswith(b"WEBVTT") and b"Alice" in text for text in got.values())


def test_url_a_recording_larger_than_the_server_takes_is_reported(tiny_models, server, tmp_path):
    """The server's MAX_BODY_BYTES (2 MB here): a 3 MB recording gets its 413 with the limit in
    the message, is not retried, and the run goes on."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "long.wav").write_bytes(encode(tone(95.0)))  # 3 MB of 16-bit WAV
    (src / "short.wav").write_bytes(encode(clip(1)))
    proc = run_cli(["transcribe", src, "-d", tmp_path / "out", "--url", server.url, "--language", "en"],
                   cli_env(tiny_models))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert re.search(re.escape(f"{src / 'long.wav'}: FAILED: 413 Request Entity Too Large: the request body (")
                     + r"3\.9 MiB\) is larger than this server's limit of 2000000 bytes \(1\.9 MiB, MAX_BODY_BYTES\)",
                     proc.stderr), proc.stderr[-3000:]
    assert "2 recordings: done 1, skipped 0 (already done), failed 1" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["short.json"]
