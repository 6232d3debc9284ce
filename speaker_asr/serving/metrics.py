"""Prometheus metrics: request counters, the latency histogram and the model's gauges, written
out in the text format by hand."""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from speaker_asr.serving.runner import ModelRunner


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


class Metrics:
    """Prometheus counters, gauges and a latency histogram, written out by hand."""

    BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, str], int] = {}
        self.audio_seconds = 0.0
        self.bytes_in = 0
        self.bucket_counts = [0] * len(self.BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.in_flight = 0

    def add_in_flight(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta

    def record(self, method: str, path: str, status: int, seconds: float, inference: bool,
               audio_seconds: Optional[float], bytes_in: int) -> None:
        with self._lock:
            key = (method, path, str(status))
            self.requests[key] = self.requests.get(key, 0) + 1
            if inference:
                self.bytes_in += bytes_in
                self.latency_sum += seconds
                self.latency_count += 1
                for i, bound in enumerate(self.BUCKETS):
                    if seconds <= bound:
                        self.bucket_counts[i] += 1
                if audio_seconds:
                    self.audio_seconds += audio_seconds

    def render(self, runner: ModelRunner) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for suffix, value in samples:
                lines.append(f"{name}{suffix} {_num(value)}")

        with self._lock:
            metric("asr_http_requests_total", "counter",
                   "HTTP requests answered, by method, path and status code.",
                   [(f'{{method="{_label(m)}",path="{_label(p)}",code="{_label(c)}"}}', n)
                    for (m, p, c), n in sorted(self.requests.items())])
            metric("asr_audio_seconds_total", "counter",
                   "Seconds of audio transcribed (the responses' duration).", [("", self.audio_seconds)])
            metric("asr_request_bytes_total", "counter",
                   "Request body bytes received by the transcription routes.", [("", self.bytes_in)])
            # bucket_counts are cumulative already: each observation counts in every bucket >= it
            cumulative = [(f'_bucket{{le="{_num(bound)}"}}', count)
                          for bound, count in zip(self.BUCKETS, self.bucket_counts)]
            metric("asr_request_duration_seconds", "histogram",
                   "Latency of transcription requests (POST /, /predict, /v1/audio/*), every status code.",
                   cumulative + [("_sum", self.latency_sum), ("_count", self.latency_count)])
            in_flight = self.in_flight
        waiting, running_now = runner.counts()
        metric("asr_requests_in_flight", "gauge",
               "Transcription requests being handled (reading, queued or running).", [("", in_flight)])
        metric("asr_queue_depth", "gauge", "Requests waiting for the model.", [("", waiting)])
        metric("asr_queue_limit", "gauge",
               "MAX_QUEUE: requests that may wait for the model beside the one it runs.",
               [("", runner.max_queue)])
        metric("asr_requests_rejected_queue_full_total", "counter",
               "Transcription requests refused with 503 because MAX_QUEUE requests were waiting.",
               [("", runner.rejected_queue_full)])
        metric("asr_requests_dropped_disconnected_total", "counter",
               "Queued requests dropped before the model ran them because their client disconnected.",
               [("", runner.dropped_disconnected)])
        metric("asr_inference_running", "gauge", "Requests the model is working on (0 or 1).",
               [("", running_now)])
        metric("asr_model_ready", "gauge", "1 once the model is loaded, 0 while loading or after a failed load.",
               [("", 1 if runner.ready else 0)])
        if runner.load_seconds is not None:
            metric("asr_model_load_seconds", "gauge", "Seconds the model took to load.",
                   [("", round(runner.load_seconds, 3))])
        report = getattr(runner.handler, "patch_report", None)
        if report:
            metric("asr_patch_applied", "gauge",
                   "1 for each change to transformers' or pyannote's internals that applied at load, 0 "
                   "for one skipped (GET /health says why).",
                   [(f'{{target="{_label(r.target)}",name="{_label(r.name)}",'
                     f'changes_output="{str(r.changes_output).lower()}"}}', 1 if r.applied else 0)
                    for r in report])
        policy = getattr(getattr(runner.handler, "asr", None), "assist_policy", None)
        if policy is not None and getattr(runner.handler.asr, "assistant", None) is not None:
            snap = policy.snapshot()
            metric("asr_auto_decode_seconds_per_audio_second", "gauge",
                   "Median decode time per second of one-window audio, by mode, that assisted='auto' "
                   "chooses from.", [(f'{{mode="{m}"}}', v["median_s_per_audio_s"]) for m, v in snap.items()
                                     if v["median_s_per_audio_s"] is not None])
        return "\n".join(lines) + "\n"
