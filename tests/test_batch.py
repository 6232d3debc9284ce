"""speaker_asr/batch/ without models: which files a folder gives, where their outputs go, what a
rerun skips, atomic writing (a writer killed mid-file leaves no file under the final name), and
the run itself over a stand-in engine (outputs, failures that do not stop the run, concurrency,
stopping, the summary and the manifest). speaker_asr/progress.py's lines and bar."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path, PurePath

import pytest

from helpers import GOLDEN, ROOT

from speaker_asr import batch
from speaker_asr.batch import (BatchError, BatchRun, FileError, Interrupted, Manifest, Reply, RunError,
                               Summary, Unavailable, discover, plan, remove_stale_partials, write_atomic)

GOLDEN_RESPONSE = json.loads((GOLDEN / "response.json").read_text(encoding="utf-8"))


def touch(path: Path, data: bytes = b"RIFF....WAVE") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def archive(tmp_path) -> Path:
    """interviews/ with audio at the top and two levels down, a non-audio file, hidden files, an
    upper-case extension, a hidden folder."""
    root = tmp_path / "interviews"
    for name in ("b.wav", "a.MP3", "notes.txt", ".DS_Store", "._a.wav", "2024/c.flac", "2024/q1/d.m4a",
                 "2024/q1/cover.jpg", ".cache/e.wav"):
        touch(root / name)
    return root


# --------------------------------------------------------------------------- discovery


def test_a_folder_gives_its_audio_files_in_name_order(archive):
    found = discover([archive])
    assert [rel for _, rel in found.found] == [PurePath("a.MP3"), PurePath("b.wav")]
    assert sorted(p.name for p in found.ignored) == ["notes.txt"]  # hidden ones are not even listed
    assert found.unsearched == [archive / "2024"]  # hidden .cache is not mentioned either


def test_recursive_keeps_the_subfolders(archive):
    found = discover([archive], recursive=True)
    assert [str(rel) for _, rel in found.found] == ["a.MP3", "b.wav", "2024/c.flac", "2024/q1/d.m4a"]
    assert [src for src, _ in found.found][3] == archive / "2024" / "q1" / "d.m4a"
    assert sorted(p.name for p in found.ignored) == ["cover.jpg", "notes.txt"]
    assert found.unsearched == []


def test_a_file_named_is_taken_whatever_its_extension_and_once(archive, tmp_path):
    odd = touch(tmp_path / "recording.dat")
    found = discover([odd, archive / "b.wav", archive, str(archive / "b.wav")])
    assert [(src.name, str(rel)) for src, rel in found.found] == [
        ("recording.dat", "recording.dat"), ("b.wav", "b.wav"), ("a.MP3", "a.MP3")]


def test_a_missing_path_is_refused(tmp_path):
    with pytest.raises(BatchError, match=r"cannot read .*nope\.wav: No such file or directory"):
        discover([tmp_path / "nope.wav"])


def test_links_back_up_the_tree_are_followed_once(tmp_path):
    root = tmp_path / "a"
    touch(root / "x.wav")
    os.symlink(root, root / "loop")
    found = discover([root], recursive=True)
    assert [str(rel) for _, rel in found.found] == ["x.wav"]


def test_the_output_folder_inside_an_input_folder_is_not_searched(tmp_path):
    root = tmp_path / "a"
    touch(root / "x.wav")
    touch(root / "out" / "y.wav")
    found = discover([root], recursive=True, exclude=root / "out")
    assert [str(rel) for _, rel in found.found] == ["x.wav"]


# --------------------------------------------------------------------------- plan and resume


def test_outputs_keep_the_subfolders_of_each_folder_given(archive, tmp_path):
    single = touch(tmp_path / "elsewhere" / "call.ogg")
    out = tmp_path / "out"
    work = plan([archive, single], out, ["json", "verbose_json", "srt"], recursive=True)
    outputs = {job.name: sorted(str(p.relative_to(out)) for p in job.outputs.values()) for job in work.jobs}
    assert outputs == {
        str(archive / "a.MP3"): ["a.json", "a.srt", "a.verbose_json.json"],
        str(archive / "b.wav"): ["b.json", "b.srt", "b.verbose_json.json"],
        str(archive / "2024" / "c.flac"): ["2024/c.json", "2024/c.srt", "2024/c.verbose_json.json"],
        str(archive / "2024" / "q1" / "d.m4a"): ["2024/q1/d.json", "2024/q1/d.srt", "2024/q1/d.verbose_json.json"],
        str(single): ["call.json", "call.srt", "call.verbose_json.json"],
    }
    assert work.todo == work.jobs and work.skipped == []
    assert any("notes.txt" in line and "cover.jpg" in line for line in work.notes())


def test_two_recordings_writing_one_output_are_refused_naming_both(tmp_path):
    touch(tmp_path / "in" / "talk.wav")
    touch(tmp_path / "in" / "talk.mp3")
    touch(tmp_path / "other" / "x.wav")
    touch(tmp_path / "more" / "x.wav")
    with pytest.raises(BatchError) as exc:
        plan([tmp_path / "in", tmp_path / "other", tmp_path / "more"], tmp_path / "out", ["srt"])
    message = str(exc.value)
    assert message.startswith("2 recordings would overwrite another's output")
    assert "talk.mp3 and " in message and "talk.wav would both write" in message
    assert f"{tmp_path / 'other' / 'x.wav'} and {tmp_path / 'more' / 'x.wav'}" in message
    assert "--output-dir" in message


@pytest.mark.parametrize("formats, fragment", [(["docx"], "unknown format 'docx'"), ([], "no output format")])
def test_bad_formats_are_refused(tmp_path, formats, fragment):
    with pytest.raises(BatchError, match=fragment):
        plan([touch(tmp_path / "a.wav")], tmp_path / "out", formats)


def test_an_output_dir_that_is_a_file_is_refused(tmp_path):
    with pytest.raises(BatchError, match="exists and is not a folder"):
        plan([touch(tmp_path / "a.wav")], touch(tmp_path / "out"), ["json"])


def test_a_rerun_skips_what_has_every_output(archive, tmp_path):
    out = tmp_path / "out"
    first = plan([archive], out, ["json", "srt"])
    a, b = first.jobs
    for path in a.outputs.values():
        touch(path, b"done")
    touch(b.outputs["json"], b"done")  # b was interrupted between its two outputs
    again = plan([archive], out, ["json", "srt"])
    assert [j.name for j in again.skipped] == [a.name]
    assert [j.name for j in again.todo] == [b.name]
    assert [j.name for j in plan([archive], out, ["json", "srt"], overwrite=True).todo] == [a.name, b.name]
    assert plan([archive], out, ["json"]).todo == []  # json alone: both done


# --------------------------------------------------------------------------- atomic writing


def test_write_atomic_writes_and_replaces(tmp_path):
    path = tmp_path / "new" / "a.srt"
    write_atomic(path, "first\n")
    assert path.read_text() == "first\n"
    write_atomic(path, ["sec", "ond\n"])
    assert path.read_text() == "second\n"
    assert os.listdir(path.parent) == ["a.srt"]
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    path.write_text("old")

    def pieces():
        yield "half of it"
        raise RuntimeError("the disk went away")

    with pytest.raises(RuntimeError):
        write_atomic(path, pieces())
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.json"]


def test_a_writer_killed_midway_leaves_no_file_under_the_final_name(tmp_path):
    """A process killed (SIGKILL) in the middle of writing: the final name does not exist, the
    temporary file is hidden, and the next run's clean-up removes it."""
    path = tmp_path / "out" / "talk.json"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from speaker_asr.batch import write_atomic\n"
        "def pieces():\n"
        "    yield '{\"text\": \"the first half'\n"
        "    sys.stdout.write('started\\n'); sys.stdout.flush()\n"
        "    time.sleep(60)\n"
        "    yield ' and the rest\"}'\n"
        f"write_atomic({str(path)!r}, pieces())\n")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "started\n"
        left = os.listdir(path.parent)
        assert len(left) == 1 and batch.is_partial(left[0]) and left[0].startswith(".talk.json."), left
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not path.exists()
    job = batch.Job(Path("talk.wav"), PurePath("talk.wav"), {"json": path})
    assert not job.done()
    assert remove_stale_partials([job]) == 1
    assert os.listdir(path.parent) == []


def test_stale_partials_of_other_files_are_left_alone(tmp_path):
    mine = tmp_path / ".a.json.x1y2z3.partial"
    theirs = tmp_path / ".b.json.x1y2z3.partial"
    mine.write_text("x")
    theirs.write_text("x")
    job = batch.Job(Path("a.wav"), PurePath("a.wav"), {"json": tmp_path / "a.json"})
    assert remove_stale_partials([job]) == 1
    assert os.listdir(tmp_path) == [theirs.name]


# --------------------------------------------------------------------------- the run


class FakeEngine(batch.Engine):
    """Answers the golden response; a file named ``bad*`` is refused, ``crash*`` raises a bug,
    ``down*`` is unavailable, ``token*`` is a refused token. Records the parameters and the
    number of recordings in flight at once."""

    render_locally = False

    def __init__(self, concurrency: int = 1, delay: float = 0.0):
        self.concurrency = concurrency
        self.delay = delay
        self.loaded = 0
        self.calls: list[dict] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()

    def load(self):
        self.loaded += 1

    def respond(self, audio, parameters, source, stop):
        with self.lock:
            self.calls.append(dict(parameters))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            name = source.name
            if name.startswith("bad"):
                raise FileError("could not decode the audio", refused=True)
            if name.startswith("crash"):
                raise ZeroDivisionError("division by zero")
            if name.startswith("down"):
                raise Unavailable("gave up after 3 attempts", attempts=3)
            if name.startswith("token"):
                raise RunError("the endpoint refused the token")
            if name.startswith("wait") and stop.wait(60):
                raise Interrupted()
            response = dict(GOLDEN_RESPONSE)
            fmt = parameters.get("response_format", "json")
            if fmt != "json":
                response = batch.render_result(response, fmt, parameters.get("speaker_names"), "transcribe")
            return Reply(response, attempts=2)
        finally:
            with self.lock:
                self.in_flight -= 1


def folder(tmp_path, names) -> Path:
    root = tmp_path / "in"
    for name in names:
        touch(root / name, b"audio of " + name.encode())
    return root


def test_every_recording_is_accounted_for_and_a_failure_does_not_stop_the_run(tmp_path):
    root = folder(tmp_path, ["a.wav", "bad.wav", "crash.wav", "sub/c.wav"])
    touch(root / "empty.wav", b"")
    out = tmp_path / "out"
    engine = FakeEngine()
    work = plan([root], out, ["json", "srt"], recursive=True)
    results = list(BatchRun(work, engine, {"language": "en", "speaker_names": ["Alice"]}))
    status = {r.job.source.name: (r.status, r.error) for r in results}
    assert status == {
        "a.wav": ("done", None), "bad.wav": ("failed", "could not decode the audio"),
        "crash.wav": ("failed", "unexpected error: ZeroDivisionError: division by zero"),
        "empty.wav": ("failed", f"{root / 'empty.wav'} is empty"), "c.wav": ("done", None)}
    # several formats: one plain json request, the names applied here
    assert engine.calls == [{"language": "en"}] * 4 and engine.loaded == 1  # not the empty file
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == \
        ["a.json", "a.srt", "sub/c.json", "sub/c.srt"]
    assert (out / "a.srt").read_text() == batch.render_result(GOLDEN_RESPONSE, "srt", ["Alice"], "transcribe")["content"]
    assert json.loads((out / "sub" / "c.json").read_text())["speakers"][0]["speaker"] == "Alice"
    done = next(r for r in results if r.job.source.name == "a.wav")
    assert done.duration == GOLDEN_RESPONSE["duration"] and done.attempts == 2 and done.seconds >= 0
    assert done.outputs == [out / "a.json", out / "a.srt"]


def test_one_format_is_asked_for_as_the_response_format(tmp_path):
    root = folder(tmp_path, ["a.wav"])
    engine = FakeEngine()
    results = list(BatchRun(plan([root], tmp_path / "out", ["vtt"]), engine, {"speaker_names": ["Al"]}))
    assert engine.calls == [{"speaker_names": ["Al"], "response_format": "vtt"}]
    assert [r.status for r in results] == ["done"]
    assert (tmp_path / "out" / "a.vtt").read_text().startswith("WEBVTT")


def test_nothing_to_do_never_loads_the_engine(tmp_path):
    root = folder(tmp_path, ["a.wav", "b.wav"])
    out = tmp_path / "out"
    for name in ("a", "b"):
        touch(out / f"{name}.json", b"{}")
    engine = FakeEngine()
    results = list(BatchRun(plan([root], out, ["json"]), engine))
    assert [r.status for r in results] == ["skipped", "skipped"]
    assert results[0].outputs == [out / "a.json"]
    assert engine.loaded == 0 and engine.calls == []


def test_concurrency_is_bounded_by_the_engine(tmp_path):
    """Each recording waits (a barrier of 3) until three are in flight at once: a run sending
    fewer at a time breaks the barrier (the recordings fail), one sending more shows more."""

    class Engine(FakeEngine):
        def respond(self, audio, parameters, source, stop):
            with self.lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                together.wait()
            finally:
                with self.lock:
                    self.in_flight -= 1
            return super().respond(audio, parameters, source, stop)

    together = threading.Barrier(3, timeout=60)
    root = folder(tmp_path, [f"f{i}.wav" for i in range(9)])
    engine = Engine(concurrency=3)
    results = list(BatchRun(plan([root], tmp_path / "out", ["json"]), engine))
    assert [r.status for r in results] == ["done"] * 9, [r.error for r in results]
    assert engine.most_in_flight == 3


def test_stop_ends_the_run_after_the_recordings_in_hand(tmp_path):
    root = folder(tmp_path, [f"f{i}.wav" for i in range(6)])
    stop = threading.Event()
    run = BatchRun(plan([root], tmp_path / "out", ["json"]), FakeEngine(), stop=stop)
    seen = []
    for result in run:
        seen.append((result.job.source.name, result.status))
        if len(seen) == 2:
            stop.set()
    assert seen[:2] == [("f0.wav", "done"), ("f1.wav", "done")]
    assert seen[2:] == [(f"f{i}.wav", "not_attempted") for i in range(2, 6)]


def test_a_recording_waiting_when_the_run_stops_is_not_attempted(tmp_path):
    """wait.wav waits for the stop (FakeEngine: it answers if the stop does not come); the stop
    is set once it has begun."""

    class Engine(FakeEngine):
        began = threading.Event()

        def respond(self, audio, parameters, source, stop):
            self.began.set()
            return super().respond(audio, parameters, source, stop)

    root = folder(tmp_path, ["wait.wav", "z.wav"])
    stop = threading.Event()
    engine = Engine()
    threading.Thread(target=lambda: engine.began.wait(60) and stop.set(), daemon=True).start()
    results = list(BatchRun(plan([root], tmp_path / "out", ["json"]), engine, stop=stop))
    assert [(r.job.source.name, r.status) for r in results] == [("wait.wav", "not_attempted"),
                                                                ("z.wav", "not_attempted")]


def test_a_refused_token_ends_the_run(tmp_path):
    root = folder(tmp_path, ["a.wav", "token.wav", "x.wav", "y.wav"])
    run = BatchRun(plan([root], tmp_path / "out", ["json"]), FakeEngine())
    results = [(r.job.source.name, r.status) for r in run]
    assert results == [("a.wav", "done"), ("token.wav", "failed"), ("x.wav", "not_attempted"),
                       ("y.wav", "not_attempted")]
    assert run.stopped_because == "the endpoint refused the token"


def test_every_recording_in_flight_giving_up_ends_the_run(tmp_path):
    root = folder(tmp_path, ["a.wav", "down1.wav", "down2.wav", "x.wav", "y.wav"])
    run = BatchRun(plan([root], tmp_path / "out", ["json"]), FakeEngine(concurrency=1))
    results = [(r.job.source.name, r.status) for r in run]
    # one at a time: the first give-up is every recording in flight
    assert results == [("a.wav", "done"), ("down1.wav", "failed"), ("down2.wav", "not_attempted"),
                       ("x.wav", "not_attempted"), ("y.wav", "not_attempted")]
    assert run.stopped_because.startswith("the service stayed unavailable for 1 recording in a row")
    run = BatchRun(plan([root], tmp_path / "out2", ["json"]), FakeEngine(concurrency=1), stop_when_unavailable=False)
    assert [r.status for r in run] == ["done", "failed", "failed", "done", "done"]


def test_after_a_give_up_nothing_new_is_sent_until_one_in_flight_gets_through(tmp_path):
    """Two in flight: down1 gives up, so z1 and z2 wait; a (in flight beside it) gets through,
    and the run goes on. a answers only once down1 has given up, and then looks for a while
    whether z1 was sent to the thread down1 freed (a run that held nothing would send it at
    once); a slow machine can only make it see nothing, never a z too soon."""

    class Engine(FakeEngine):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.events: list[str] = []
            self.gave_up = threading.Event()
            self.z_sent = threading.Event()
            self.held = None

        def respond(self, audio, parameters, source, stop):
            name = source.name
            if name.startswith("z"):
                self.events.append(f"{name} sent")
                self.z_sent.set()
            if name == "a.wav":
                assert self.gave_up.wait(60)
                self.held = not self.z_sent.wait(0.5)
                self.events.append("a answered")
            try:
                return super().respond(audio, parameters, source, stop)
            finally:
                if name == "down1.wav":
                    self.gave_up.set()

    root = folder(tmp_path, ["down1.wav", "z1.wav", "z2.wav"])
    touch(root / "a.wav", b"x" * 100)  # the largest: sent first, beside down1
    engine = Engine(concurrency=2)
    run = BatchRun(plan([root], tmp_path / "out", ["json"]), engine)
    results = [(r.job.source.name, r.status) for r in run]
    assert results[:2] == [("down1.wav", "failed"), ("a.wav", "done")]
    assert sorted(results[2:]) == [("z1.wav", "done"), ("z2.wav", "done")]
    # z1 was held back while a was still running, though a thread was free
    assert engine.held and engine.events[0] == "a answered", engine.events
    assert run.stopped_because is None


def test_leaving_a_run_early_does_not_wait_for_the_recordings_in_flight(tmp_path):
    """A caller that stops iterating (a second Ctrl-C) gets control back at once: b is still
    held by the engine when the loop is left, and its answer is dropped (nothing written)."""
    release, b_started = threading.Event(), threading.Event()

    class Engine(FakeEngine):
        def respond(self, audio, parameters, source, stop):
            if source.name == "b.wav":
                b_started.set()
                release.wait(60)
            return super().respond(audio, parameters, source, stop)

    root = folder(tmp_path, ["a.wav", "b.wav"])
    out = tmp_path / "out"
    run = BatchRun(plan([root], out, ["json"]), Engine(concurrency=2))
    try:
        for result in run:
            assert (result.job.source.name, result.status) == ("a.wav", "done")
            # on a busy machine b's thread may not have picked it up yet: leaving now would
            # cancel it before it started, which is not what this test is about
            assert b_started.wait(30)
            break
        assert run.busy  # b is still being transcribed, and the loop is over
    finally:
        release.set()
    assert sorted(p.name for p in out.iterdir()) == ["a.json"]


def test_a_reply_reads_the_warnings_and_the_duration_from_the_response():
    reply = batch.Reply({"text": "hi", "duration": 12, "warnings": ["the diarization failed"]}, attempts=2)
    assert reply.warnings == ["the diarization failed"] and reply.duration == 12.0 and reply.texts == {}
    assert batch.Reply({"duration": True, "warnings": "one"}).duration is None
    assert batch.Reply({"warnings": "one"}).warnings == [] and batch.Reply("text").warnings == []


def test_a_write_error_fails_that_recording(tmp_path):
    root = folder(tmp_path, ["a.wav", "b.wav"])
    out = tmp_path / "out"
    (out / "a.json").mkdir(parents=True)  # a folder where the output should go
    results = list(BatchRun(plan([root], out, ["json"]), FakeEngine()))
    assert results[0].status == "failed" and results[0].error.startswith(f"cannot write {out / 'a.json'}")
    assert results[1].status == "done"


def test_summary_and_manifest(tmp_path):
    root = folder(tmp_path, ["a.wav", "bad.wav", "c.wav"])
    out = tmp_path / "out"
    touch(out / "c.json", b"{}")
    summary = Summary()
    with Manifest(tmp_path / "logs" / "run.jsonl") as manifest:
        for result in BatchRun(plan([root], out, ["json"]), FakeEngine()):
            summary.add(result)
            manifest.write(result)
    summary.wall_seconds = 2.0
    lines = [json.loads(line) for line in (tmp_path / "logs" / "run.jsonl").read_text().splitlines()]
    assert [(line["path"], line["status"]) for line in lines] == [
        (str(root / "c.wav"), "skipped"), (str(root / "a.wav"), "done"), (str(root / "bad.wav"), "failed")]
    assert set(lines[1]) == {"path", "status", "outputs", "duration", "seconds", "error", "warnings", "attempts"}
    assert lines[1]["outputs"] == [str(out / "a.json")] and lines[1]["duration"] == GOLDEN_RESPONSE["duration"]
    assert lines[2]["error"] == "could not decode the audio" and lines[2]["outputs"] == []
    assert lines[0]["outputs"] == [str(out / "c.json")]
    assert not summary.ok
    text = "\n".join(summary.lines())
    assert text.startswith("3 recordings: done 1, skipped 1 (already done), failed 1; wall time 2.0 s")
    rtf = 2.0 / GOLDEN_RESPONSE["duration"]
    assert f"real-time factor {rtf:.3f}" in text
    assert f"failed:\n  {root / 'bad.wav'}: could not decode the audio" in text
    assert "run the same command again" in text


def test_transcribe_paths_is_the_api_in_one_call(tmp_path):
    root = folder(tmp_path, ["a.wav", "sub/b.wav"])
    results = list(batch.transcribe_paths([root], tmp_path / "out", ["txt"], engine=FakeEngine(), recursive=True))
    assert [(str(r.job.relative), r.status) for r in results] == [("a.wav", "done"), ("sub/b.wav", "done")]
    assert (tmp_path / "out" / "sub" / "b.txt").read_text().startswith("SPEAKER_00: Hello there")


# --------------------------------------------------------------------------- progress


def _result(tmp_path, status, **kw) -> batch.FileResult:
    job = batch.Job(tmp_path / "talks" / "a.wav", PurePath("a.wav"), {"json": tmp_path / "out" / "a.json"})
    return batch.FileResult(job, status, **kw)


def test_progress_lines(tmp_path):
    from speaker_asr.batch.display import LineProgress, progress_for

    stream = io.StringIO()
    progress = progress_for(2, stream)
    assert type(progress) is LineProgress  # not a terminal
    progress.update(_result(tmp_path, "skipped"))
    progress.update(_result(tmp_path, "done", outputs=[tmp_path / "out" / "a.json"], duration=61.25, seconds=4.06,
                            warnings=["the diarization failed"]))
    progress.update(_result(tmp_path, "failed", error="400 Bad Request: could not decode"))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].endswith(f"[1/2] {tmp_path}/talks/a.wav: done, 61.2 s audio in 4.1 s -> {tmp_path}/out/a.json")
    assert lines[1].endswith(f"[1/2] {tmp_path}/talks/a.wav: warning: the diarization failed")
    assert lines[2].endswith(f"[2/2] {tmp_path}/talks/a.wav: FAILED: 400 Bad Request: could not decode")


def test_progress_bar_on_a_terminal(tmp_path):
    from speaker_asr.batch.display import BarProgress, progress_for

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = progress_for(3, stream)
    assert isinstance(progress, BarProgress)
    progress.update(_result(tmp_path, "done", duration=1800.0, seconds=60.0))
    progress.update(_result(tmp_path, "failed", error="gave up after 5 attempts"))
    progress.close()
    text = stream.getvalue()
    assert "transcribing: 2/3 files" in text and "0.50 h audio, RTF " in text
    assert f"{tmp_path}/talks/a.wav: FAILED: gave up after 5 attempts" in text


def test_both_displays_keep_the_same_account(tmp_path):
    """The line display and the bar count the same recordings and audio (one bookkeeping); each
    prints its own: every outcome as a line, or only failures and warnings above the bar."""
    from speaker_asr.batch.display import BarProgress, LineProgress

    results = [_result(tmp_path, "skipped"), _result(tmp_path, "done", duration=30.0, seconds=2.0),
               _result(tmp_path, "failed", error="could not decode"), _result(tmp_path, "not_attempted"),
               _result(tmp_path, "done", duration=12.5, seconds=1.0, warnings=["no speech"])]
    lines, terminal = io.StringIO(), io.StringIO()
    shown = [LineProgress(4, lines), BarProgress(4, terminal)]
    for display in shown:
        for result in results:
            display.update(result)
    assert [(d.count, d.audio) for d in shown] == [(4, 42.5), (4, 42.5)]
    assert shown[1].bar.n == 4
    shown[1].close()
    text = lines.getvalue().splitlines()
    assert [line.split("] ", 1)[0][-3:] for line in text] == ["1/4", "2/4", "3/4", "4/4", "4/4"]
    assert text[2].endswith("a.wav: not attempted") and text[4].endswith("a.wav: warning: no speech")
    bar = terminal.getvalue()
    assert f"{tmp_path}/talks/a.wav: FAILED: could not decode" in bar
    assert f"{tmp_path}/talks/a.wav: warning: no speech" in bar
    assert "not attempted" not in bar and ": done," not in bar


def test_the_batch_modules_import_no_torch():
    code = ("import sys; import speaker_asr.batch, speaker_asr.remote, speaker_asr.progress, speaker_asr.cli; "
            "print(sorted(m for m in ('torch', 'numpy', 'transformers', 'pyannote') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_secret_in_an_error_message_is_scrubbed(tmp_path, monkeypatch):
    """An exception quoting HF_TOKEN (a library's message with a URL, say) reaches neither the
    result, nor the manifest, nor the summary."""
    from speaker_asr import redaction

    secret = "hf_" + "x" * 8 + "SECRETsecret1234567890abcdefgh"
    monkeypatch.setenv("HF_TOKEN", secret)
    redaction.refresh_secrets()

    class Leaky(FakeEngine):
        def respond(self, audio, parameters, source, stop):
            raise FileError(f"GET https://hub/x?token={secret} failed")

    root = folder(tmp_path, ["a.wav"])
    try:
        result, = BatchRun(plan([root], tmp_path / "out", ["json"]), Leaky())
    finally:
        monkeypatch.delenv("HF_TOKEN")
        redaction.refresh_secrets()
    assert result.error == "GET https://hub/x?token=<redacted> failed"


def test_several_in_flight_take_the_largest_files_first(tmp_path):
    """One at a time: name order. Several at a time: largest first, so that a long recording
    does not start last and hold the run's end alone."""
    root = tmp_path / "in"
    for name, size in (("a.wav", 10), ("b.wav", 3000), ("c.wav", 200), ("d.wav", 3000)):
        touch(root / name, b"x" * size)

    def order(concurrency):
        engine = FakeEngine(concurrency=concurrency)
        engine.seen = []
        respond = engine.respond

        def recording(audio, parameters, source, stop):
            engine.seen.append(source.name)
            return respond(audio, parameters, source, stop)

        engine.respond = recording
        list(BatchRun(plan([root], tmp_path / f"out{concurrency}", ["json"]), engine))
        return engine.seen

    assert order(1) == ["a.wav", "b.wav", "c.wav", "d.wav"]
    seen = order(2)
    # the two largest start first; which of the two threads then reaches the engine first with
    # the next file is a race, so the queue's own order is read from largest_first
    assert sorted(seen[:2]) == ["b.wav", "d.wav"] and sorted(seen[2:]) == ["a.wav", "c.wav"]
    from speaker_asr.batch import largest_first

    jobs = plan([root], tmp_path / "out-order", ["json"]).jobs
    assert [j.source.name for j in largest_first(jobs)] == ["b.wav", "d.wav", "c.wav", "a.wav"]
