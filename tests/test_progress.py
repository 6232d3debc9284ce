"""Progress within one request (speaker_asr/progress.py): the events, their throttling and the
thread-safe sink with hand-made events and a hand-turned clock; what the command line prints
with a stand-in handler that reports progress; and the ASR's and the diarization's events from
the tiny random models on 70 s of audio (the transcript the same with and without a callback)."""

from __future__ import annotations

import io
import json
import re
import threading
import time

import numpy as np
import pytest

from helpers import GOLDEN, b64, encode, tone

from speaker_asr.batch import display
from speaker_asr.batch.display import progress_for
from speaker_asr.progress import (ASR, DIARIZATION, WINDOWS, AsrWindows, DiarizationHook, Progress,
                                  RequestProgress, takes_progress)


def asr(done: int, total: int) -> Progress:
    return Progress(ASR, WINDOWS, done, total)


def diar(step: str, done: int = 0, total: int = 0) -> Progress:
    return Progress(DIARIZATION, step, done, total)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- pure


def test_an_event_says_how_far_its_stage_has_got():
    assert asr(12, 480).describe() == "asr 12/480 windows"
    assert diar("embeddings", 120, 480).describe() == "diarization: embeddings 120/480"
    assert diar("speaker_counting").describe() == "diarization: speaker_counting"
    assert asr(1, 4).fraction == 0.25 and diar("speaker_counting").fraction == 1.0
    with pytest.raises(ValueError):
        asr(-1, 3)


def test_lines_are_throttled_to_one_per_interval_and_only_when_something_moved():
    clock = Clock()
    state = RequestProgress(30.0, clock=clock)
    # a request done within the interval: no line at all
    assert state.update(asr(0, 480)) is None
    assert state.update(diar("segmentation", 0, 100)) is None
    clock.now += 29.9
    assert state.update(asr(5, 480)) is None
    clock.now += 0.2
    line = state.update(diar("segmentation", 40, 100))
    assert line is not None and line.text == "asr 5/480 windows, diarization: segmentation 40/100"
    assert round(line.elapsed_s, 1) == 30.1
    # the next one not before another interval, however many events come
    for done in range(41, 100):
        clock.now += 0.4
        assert state.update(diar("segmentation", done, 100)) is None
    clock.now += 10.0
    assert state.update(asr(6, 480)).text == "asr 6/480 windows, diarization: segmentation 99/100"
    # nothing moved since the last line: no repeat, however long it has been
    clock.now += 100.0
    assert state.update(asr(6, 480)) is None
    assert state.latest().text == "asr 6/480 windows, diarization: segmentation 99/100"


def test_the_server_throttle_also_waits_for_ten_percent_of_a_step_or_a_new_step():
    clock = Clock()
    state = RequestProgress(30.0, min_step=0.1, clock=clock)
    state.update(asr(0, 100))
    clock.now += 31
    assert state.update(asr(3, 100)).text == "asr 3/100 windows"  # the stage is new to the log
    clock.now += 31
    assert state.update(asr(12, 100)) is None  # 9 % more: not yet
    clock.now += 31
    assert state.update(asr(13, 100)).text == "asr 13/100 windows"
    clock.now += 31
    assert state.update(diar("segmentation", 1, 100)) is not None  # a stage begun
    clock.now += 31
    assert state.update(diar("speaker_counting")).text == \
        "asr 13/100 windows, diarization: speaker_counting"  # a new step
    fields = state.latest().fields()
    assert fields["progress"] == {"asr": {"step": "windows", "done": 13, "total": 100},
                                  "diarization": {"step": "speaker_counting", "done": 0, "total": 0}}


def test_the_sink_takes_events_from_two_threads_at_once():
    """The ASR's and the diarization's threads report at the same time: every event lands and is
    shown once, and the latest of each stage is the last one sent."""
    import sys

    state = RequestProgress(0.0)
    lines = []
    start = threading.Barrier(2)

    def send(make, n):
        start.wait()
        for i in range(1, n + 1):
            line = state.update(make(i, n))
            if line is not None:
                lines.append(line)

    threads = [threading.Thread(target=send, args=(asr, 3000)),
               threading.Thread(target=send, args=(lambda i, n: diar("embeddings", i, n), 3000))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert state.latest().text == "asr 3000/3000 windows, diarization: embeddings 3000/3000"
    # with no interval every change is due: one line per event, none lost or doubled, each
    # showing the event that made it
    assert len(lines) == 6000
    for stage in (ASR, DIARIZATION):
        shown = {e.done for line in lines for e in line.stages if e.stage == stage}
        assert shown == set(range(1, 3001))


def test_pyannote_hook_calls_become_diarization_events():
    events = []
    hook = DiarizationHook(events.append)
    # what pyannote 4 calls: per batch (the segmentation's overshoots its total), then per step
    hook("segmentation", None, file={}, completed=0, total=3)
    hook("segmentation", None, file={}, completed=32, total=3)
    hook("segmentation", object(), file={})
    hook("speaker_counting", object(), file={})
    hook("embeddings", None, file={}, total=2, completed=0)
    hook("embeddings", object(), file={}, total=2, completed=1)
    hook("embeddings", object(), file={}, total=2, completed=2)
    hook("embeddings", object(), file={})
    hook("discrete_diarization", object(), file={})
    assert events == [diar("segmentation", 0, 3), diar("segmentation", 3, 3),
                      diar("speaker_counting"), diar("embeddings", 0, 2), diar("embeddings", 1, 2),
                      diar("embeddings", 2, 2), diar("discrete_diarization")]


def test_asr_windows_count_up_to_the_total_and_never_past_it():
    events = []
    windows = AsrWindows(5, events.append)
    windows.decoded(2)
    windows.reached(0.5)  # the sequential loop: 2.5 windows' worth, nothing new
    windows.reached(0.99)  # the last window is only done when decoding ends
    windows.decoded(8)
    windows.finished()
    assert events == [asr(0, 5), asr(2, 5), asr(4, 5), asr(5, 5)]


def test_asr_windows_of_several_recordings_count_each_one_in_turn():
    """A multichannel file's channels decoded one after another (3 windows each): each one's
    sequential loop moves within its own share, and a recording finished ends its share only."""
    events = []
    windows = AsrWindows(6, events.append, recordings=2)
    windows.reached(0.5)  # the first channel half decoded: 1.5 windows of its 3
    windows.finished()  # the first channel done: 3 of 6, not all of them
    windows.reached(0.99)  # the second channel: its last window left for the end
    windows.finished()
    assert events == [asr(0, 6), asr(1, 6), asr(3, 6), asr(5, 6), asr(6, 6)]
    events.clear()
    both = AsrWindows(2, events.append, recordings=2)
    both.finished(2)  # both decoded whole in one batch
    assert events == [asr(0, 2), asr(2, 2)]


def test_only_handlers_naming_progress_are_given_one():
    class Handler:
        def __call__(self, data, progress=None): ...

    assert takes_progress(Handler()) and not takes_progress(lambda data: data)
    assert not takes_progress(lambda data, **kwargs: data) and not takes_progress(len)


def test_chunked_window_count_is_transformers_own():
    """The total the ASR reports is the number of windows transformers' chunk_iter makes."""
    from transformers.pipelines.automatic_speech_recognition import chunk_iter

    from speaker_asr.asr.transcriber import chunked_windows

    class Features:
        sampling_rate = 16000

        def __call__(self, chunk, **kwargs):
            return {}

    for chunk, left, right in ((480000, 80000, 80000), (160000, 26667, 26667), (1000, 100, 300)):
        for samples in sorted({1, left, left + 1, chunk - 1, chunk, chunk + 1, 2 * chunk,
                               2 * (chunk - left - right) + left, 2 * (chunk - left - right) + left + 1,
                               70 * 16000, 600 * 16000 + 7}):
            made = sum(1 for _ in chunk_iter(np.zeros(samples, np.float32), Features(), chunk, left, right))
            assert chunked_windows(samples, chunk, left, right) == made, (chunk, left, right, samples)


# --------------------------------------------------------------------------- command line


def _answer(params: dict) -> dict:
    from speaker_asr import cli

    response = json.loads((GOLDEN / "response.json").read_text(encoding="utf-8"))
    return cli.render_result(response, params.get("response_format", "json"),
                             params.get("speaker_names"), params.get("task", "transcribe"))


class ReportingHandler:
    """Stands in for EndpointHandler: reports a long request's progress (pauses of ``pause`` s,
    the diarization's events from a thread of its own) and answers the golden response."""

    pause = 0.0

    def __call__(self, data: dict, progress=None) -> dict:
        def diarization():
            progress(diar("segmentation", 0, 10))

        worker = threading.Thread(target=diarization)
        progress(asr(0, 4))
        worker.start()
        worker.join()
        time.sleep(self.pause)
        progress(asr(1, 4))  # a line: the interval has passed
        progress(diar("segmentation", 5, 10))  # none: too soon after it
        time.sleep(self.pause)
        progress(diar("segmentation", 10, 10))  # a line
        return _answer(dict(data["parameters"]))


PROGRESS_LINE = r"\d\d:\d\d:\d\d (?P<name>.+): (?P<text>asr .*) \(\d+ s\)$"


def _progress_lines(stderr: str) -> list[tuple[str, str]]:
    return [(m["name"], m["text"]) for m in map(re.compile(PROGRESS_LINE).match, stderr.splitlines()) if m]


def test_without_a_terminal_a_long_recording_prints_a_line_per_interval(monkeypatch, tmp_path, capsys):
    from speaker_asr import cli

    monkeypatch.setattr("speaker_asr.endpoint.EndpointHandler", ReportingHandler)
    monkeypatch.setattr(display, "LINE_INTERVAL_S", 0.5)
    monkeypatch.setattr(ReportingHandler, "pause", 0.6)
    audio = tmp_path / "long talk.flac"
    audio.write_bytes(b"fLaC not really")  # the stand-in does not decode
    assert cli.main(["transcribe", str(audio), "--format", "txt"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("SPEAKER_00: ")  # the transcript, as before
    assert _progress_lines(captured.err) == [
        (str(audio), "asr 1/4 windows, diarization: segmentation 0/10"),
        (str(audio), "asr 1/4 windows, diarization: segmentation 10/10")]
    # a batch run: the same lines for each recording, beside the files' own lines
    other = tmp_path / "b.flac"
    other.write_bytes(b"fLaC")
    assert cli.main(["transcribe", str(audio), str(other), "--output-dir", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    said = [(m[1], "done") if (m := re.search(r"\] (.+): done,", line)) else
            next(((name, "progress") for name, _ in _progress_lines(line)), None)
            for line in err.splitlines()]
    first, second = str(audio), str(other)  # one at a time, in the order given
    assert [s for s in said if s] == [(first, "progress")] * 2 + [(first, "done")] + \
        [(second, "progress")] * 2 + [(second, "done")]
    # a recording done within the interval prints no progress at all
    monkeypatch.setattr(ReportingHandler, "pause", 0.0)
    assert cli.main(["transcribe", str(audio), "--format", "txt"]) == 0
    assert _progress_lines(capsys.readouterr().err) == []


def test_on_a_terminal_the_recording_progress_is_shown_under_the_bar(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    display = progress_for(2, stream)
    with display.recording("talks/a.wav") as report:
        report(asr(2, 3))
        report(diar("embeddings", 120, 480))
        shown = stream.getvalue()
    display.close()
    assert "transcribing: 0/2 files" in shown
    assert "talks/a.wav: asr 2/3 windows, diarization: embeddings 120/480" in shown
    # one recording alone: its progress without a bar of files
    stream = Terminal()
    single = progress_for(1, stream, files=False)
    with single.recording("a.wav") as report:
        report(asr(1, 3))
    single.close()
    assert "a.wav: asr 1/3 windows" in stream.getvalue() and "files" not in stream.getvalue()


# --------------------------------------------------------------------------- the models


def seventy_seconds() -> np.ndarray:
    return np.concatenate([tone(5.0, freq=f) for f in (180.0, 320.0) * 7])


class Collect:
    """A thread-safe sink: every event with the thread it came from."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events: list[tuple[str, Progress]] = []

    def __call__(self, event: Progress) -> None:
        with self.lock:
            self.events.append((threading.current_thread().name, event))

    def of(self, stage: str) -> list[Progress]:
        return [e for _, e in self.events if e.stage == stage]


def test_a_long_request_reports_its_windows_and_diarization_steps(handler):
    """70 s in 30 s windows overlapping by 5 s on each side: 3 windows, decoded one at a time
    (batch_size 1) and counted as each is done; pyannote's steps from the diarization's thread."""
    sink = Collect()
    handler({"inputs": b64(encode(seventy_seconds())), "parameters": {"batch_size": 1}}, progress=sink)
    assert sink.of(ASR) == [asr(0, 3), asr(1, 3), asr(2, 3), asr(3, 3)]
    steps = sink.of(DIARIZATION)
    assert list(dict.fromkeys(e.step for e in steps)) == [
        "segmentation", "speaker_counting", "embeddings", "discrete_diarization"]
    for step in ("segmentation", "embeddings"):  # the long steps, batch by batch to the end
        counts = [e.done for e in steps if e.step == step]
        total = next(e.total for e in steps if e.step == step)
        assert total > 0 and counts[0] == 0 and counts[-1] == total and counts == sorted(counts)
    threads = {stage: {name for name, e in sink.events if e.stage == stage} for stage in (ASR, DIARIZATION)}
    assert len(threads[ASR]) == 1 and not threads[ASR] & threads[DIARIZATION]


@pytest.mark.parametrize("parameters,counted", [
    ({"batch_size": 2, "return_word_timestamps": True}, [0, 2, 3]),  # chunked: batch by batch
    ({"long_form": "sequential", "assisted": False}, [0, 1, 2, 3]),  # Whisper's own loop
])
def test_the_transcript_is_the_same_with_a_progress_callback(handler, parameters, counted):
    """The windows are counted around the pipeline's batches (chunked) or from generate's own
    report (sequential: one call, which says where each window starts), and the transcript is
    what it is without a callback (the ASR alone: the diarization's hook is pyannote's own)."""
    from speaker_asr.config import InferenceConfig
    from speaker_asr.models import Models

    config = InferenceConfig.from_request(parameters, None)
    sink = Collect()
    asr_only = Models(handler.models.asr).transcribe
    result = asr_only(seventy_seconds(), config, progress=sink)
    done = [e.done for e in sink.of(ASR)]
    if handler.models.asr.monitors_progress or "long_form" not in parameters:
        assert done == counted
    else:  # a transformers without generate's monitor_progress: the start and the end
        assert done == [0, 3]
    assert {e.total for e in sink.of(ASR)} == {3}
    assert result.text and asr_only(seventy_seconds(), config) == result
