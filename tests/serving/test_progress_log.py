"""A long request's progress in the server's log (serving/runner.py ``ProgressLog``): an
in-process server around a stand-in handler that reports progress as EndpointHandler does (the
diarization's events from a thread of its own), with the throttle's interval made short."""

from __future__ import annotations

import json
import logging
import threading
import time

from helpers import HTTP, encode, inprocess_server, tone, wait_until

from speaker_asr.progress import ASR, DIARIZATION, WINDOWS, Progress
from speaker_asr.serving import runner as runner_module
from speaker_asr.serving.logging_setup import JsonFormatter

INTERVAL_S = 0.5


def asr(done: int) -> Progress:
    return Progress(ASR, WINDOWS, done, 100)


def segmentation(done: int) -> Progress:
    return Progress(DIARIZATION, "segmentation", done, 100)


class Reporting:
    """Takes ``progress`` in ``__call__`` and ``result`` like EndpointHandler; ``pause`` seconds
    between the moments of a long request."""

    def __init__(self):
        self.pause = 0.0
        self.given = []

    def _run(self, progress) -> None:
        self.given.append(progress is not None)

        def from_the_diarization_thread(event: Progress) -> None:
            thread = threading.Thread(target=progress, args=(event,))  # no request context there
            thread.start()
            thread.join()

        progress(asr(0))
        from_the_diarization_thread(segmentation(0))  # too soon for a line
        time.sleep(self.pause)
        progress(asr(5))  # a line: both stages are new to the log
        time.sleep(self.pause)
        progress(asr(9))  # none: 4 % of the windows since the last line
        from_the_diarization_thread(segmentation(20))  # a line: 20 % of the step

    def __call__(self, data, progress=None):
        self._run(progress)
        return {"text": "ok", "duration": 3600.0}

    def result(self, data, on_start=None, progress=None):
        from speaker_asr.config import InferenceConfig, ModelCapabilities
        from speaker_asr.result import Result

        self._run(progress)
        return (InferenceConfig.from_request(data.get("parameters"), ModelCapabilities()),
                Result(" ok", [], "en", 3600.0))


def progress_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "server" and r.getMessage().startswith("progress: ")]


def test_a_long_request_logs_its_progress_at_info_with_its_id(caplog, monkeypatch):
    monkeypatch.setattr(runner_module, "PROGRESS_LOG_INTERVAL_S", INTERVAL_S)
    caplog.set_level(logging.INFO, logger="server")
    handler = Reporting()
    handler.pause = INTERVAL_S + 0.1
    with inprocess_server(lambda: handler) as (url, _):
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)
        posted = HTTP.post(url, json={"inputs": "aGVsbG8="}, timeout=60)
        assert posted.status_code == 200, posted.text
        openai = HTTP.post(url + "/v1/audio/transcriptions", data={"model": "whisper-1"},
                           files={"file": ("a.wav", encode(tone(0.5)), "audio/wav")}, timeout=60)
        assert openai.status_code == 200, openai.text
        handler.pause = 0.0
        assert HTTP.post(url, json={"inputs": "aGVsbG8="}, timeout=60).status_code == 200
    assert handler.given == [True, True, True]
    records = progress_records(caplog)
    # two lines per long request (one every interval at most, each after 10 % of a step moved),
    # none for the quick one; each with its request's id, also when the diarization's thread
    # made it
    assert [(r.levelno, r.request_id, r.getMessage().split(" (")[0]) for r in records] == [
        (logging.INFO, response.headers["x-request-id"], line)
        for response in (posted, openai)
        for line in ("progress: asr 5/100 windows, diarization: segmentation 0/100",
                     "progress: asr 9/100 windows, diarization: segmentation 20/100")]
    logged = json.loads(JsonFormatter().format(records[-1]))  # as LOG_LEVEL=info writes it
    assert logged["request_id"] == openai.headers["x-request-id"] and logged["level"] == "info"
    assert logged["progress"]["asr"] == {"step": "windows", "done": 9, "total": 100}
    assert logged["progress"]["diarization"] == {"step": "segmentation", "done": 20, "total": 100}
    assert logged["elapsed_s"] >= 2 * INTERVAL_S

