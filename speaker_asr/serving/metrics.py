"""Prometheus metrics with prometheus_client: request counters, the latency histogram and the
in-flight gauge are updated as requests are answered, the live sessions' (``asr_live_*``) as
sessions open, receive audio, complete items and end; the model's and the queue's values are read
from the runner when ``/metrics`` is scraped (:class:`RunnerCollector`). Every app has its own
:class:`~prometheus_client.CollectorRegistry`, so several apps in one process (the tests) keep
their own counts; the exposition format is negotiated from the scraper's ``Accept`` header by
prometheus_client (the text format, or OpenMetrics when asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from speaker_asr.types import ASSIST_REASONS

if TYPE_CHECKING:
    from speaker_asr.serving.runner import ModelRunner

# latency buckets, seconds (prometheus_client adds +Inf)
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# a live item's commit -> completed: a real-time client wants it within a second or two
LIVE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# how a live session ended (speaker_asr/serving/realtime.py): the client closed the socket (or a
# send failed), speaker_asr.session.finish (with its final pass, or that pass failed),
# LIVE_MAX_SESSION_S reached, a fault of the server's; and the bounds of
# speaker_asr/serving/live_limits.py: no audio for LIVE_IDLE_TIMEOUT_S, a client that reads
# nothing (LIVE_SEND_TIMEOUT_S), the server's stop
LIVE_OUTCOMES = ("client_closed", "finished", "final_pass_failed", "expired", "failed", "idle",
                 "client_not_reading", "server_shutdown")


class Metrics:
    """One app's metrics, in its own registry."""

    def __init__(self, runner: ModelRunner):
        self.registry = CollectorRegistry()
        self.requests = Counter("asr_http_requests", "HTTP requests answered, by method, path and status code.",
                                ["method", "path", "code"], registry=self.registry)
        self.audio_seconds = Counter("asr_audio_seconds", "Seconds of audio transcribed (the responses' duration).",
                                     registry=self.registry)
        self.bytes_in = Counter("asr_request_bytes", "Request body bytes received by the transcription routes.",
                                registry=self.registry)
        self.latency = Histogram(
            "asr_request_duration_seconds",
            "Latency of transcription requests (POST /, /predict, /v1/audio/*), every status code.",
            buckets=BUCKETS, registry=self.registry)
        self.decodes = Counter(
            "asr_decodes",
            "Transcription requests answered after the ASR ran, by whether the assistant model "
            "drafted the tokens (speculative decoding) and why (the response's assisted.reason).",
            ["assisted", "reason"], registry=self.registry)
        self.in_flight = Gauge("asr_requests_in_flight",
                               "Transcription requests being handled (reading, queued or running).",
                               registry=self.registry)
        self.live_open = Gauge("asr_live_sessions_open", "Live sessions (/v1/realtime) open now.",
                               registry=self.registry)
        self.live_started = Counter("asr_live_sessions_started",
                                    "Live sessions accepted (session.created sent).", registry=self.registry)
        self.live_ended = Counter(
            "asr_live_sessions_ended",
            "Live sessions ended, by outcome: client_closed, finished (speaker_asr.session.finish), "
            "final_pass_failed, expired (LIVE_MAX_SESSION_S), failed (a server fault), idle "
            "(LIVE_IDLE_TIMEOUT_S), client_not_reading (LIVE_SEND_TIMEOUT_S), server_shutdown (SIGTERM).",
            ["outcome"], registry=self.registry)
        self.live_refused = Counter(
            "asr_live_sessions_refused",
            "Live connections refused before a session, by the error event's code (missing_api_key, "
            "invalid_api_key, invalid_intent, model_not_ready, session_limit_reached, server_at_capacity).",
            ["code"], registry=self.registry)
        self.live_items = Counter("asr_live_items",
                                  "Live items transcribed, by status (completed, failed).",
                                  ["status"], registry=self.registry)
        self.live_audio_seconds = Counter("asr_live_audio_seconds",
                                          "Seconds of audio received by live sessions (16 kHz, decoded).",
                                          registry=self.registry)
        self.live_latency = Histogram(
            "asr_live_item_latency_seconds",
            "Live items: seconds from input_audio_buffer.committed to the completed event sent.",
            buckets=LIVE_BUCKETS, registry=self.registry)
        for outcome in LIVE_OUTCOMES:  # every outcome shows, at 0 until it happens
            self.live_ended.labels(outcome)
        for status in ("completed", "failed"):
            self.live_items.labels(status)
        self.registry.register(RunnerCollector(runner))

    def add_in_flight(self, delta: int) -> None:
        self.in_flight.inc(delta)

    def record(self, method: str, path: str, status: int, seconds: float, inference: bool,
               audio_seconds: Optional[float], bytes_in: int,
               assisted: Optional[Mapping[str, Any]] = None) -> None:
        """One request answered. ``assisted``: its response's ``{"used", "reason"}`` (None where
        the ASR did not run: silence, an error)."""
        self.requests.labels(method, path, str(status)).inc()
        if inference:
            self.bytes_in.inc(bytes_in)
            self.latency.observe(seconds)
            if audio_seconds:
                self.audio_seconds.inc(audio_seconds)
            if isinstance(assisted, Mapping) and isinstance(assisted.get("used"), bool):
                reason = assisted.get("reason")
                # a closed label set: a reason this server does not write (a custom handler's)
                # counts as "other"
                self.decodes.labels(str(assisted["used"]).lower(),
                                    reason if reason in ASSIST_REASONS else "other").inc()

    # -- live sessions (speaker_asr/serving/realtime.py, speaker_asr/live/session.py) ------------

    def live_session_started(self) -> None:
        self.live_started.inc()
        self.live_open.inc()

    def live_session_ended(self, outcome: str) -> None:
        self.live_open.dec()
        self.live_ended.labels(outcome).inc()

    def live_session_refused(self, code: str) -> None:
        self.live_refused.labels(code).inc()

    def live_audio(self, seconds: float) -> None:
        self.live_audio_seconds.inc(seconds)

    def live_item(self, status: str, latency_s: float) -> None:
        """An item's transcription ended (``completed`` / ``failed``) ``latency_s`` after its
        commit; the histogram holds the completed ones."""
        self.live_items.labels(status).inc()
        if status == "completed":
            self.live_latency.observe(latency_s)

    def exposition(self, accept: Optional[str]) -> tuple[bytes, str]:
        """``/metrics``: the body and its content type, in the format the ``Accept`` header asks
        for (prometheus_client's choice; the text format 0.0.4 by default)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class RunnerCollector(Collector):
    """The values the runner and the loaded handler own, read at every scrape: the queue, the
    refusals, whether the model is ready, its load time, the patch report and assisted='auto''s
    measurements."""

    def __init__(self, runner: ModelRunner):
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        runner = self.runner
        waiting, running_now = runner.counts()
        yield GaugeMetricFamily("asr_queue_depth", "Requests waiting for the model.", value=waiting)
        yield GaugeMetricFamily("asr_queue_limit",
                                "MAX_QUEUE: requests that may wait for the model beside the one it runs.",
                                value=runner.max_queue)
        yield CounterMetricFamily(
            "asr_requests_rejected_queue_full",
            "Transcription requests refused with 503 because MAX_QUEUE requests were waiting.",
            value=runner.rejected_queue_full)
        yield CounterMetricFamily(
            "asr_requests_dropped_disconnected",
            "Queued requests dropped before the model ran them because their client disconnected.",
            value=runner.dropped_disconnected)
        yield CounterMetricFamily(
            "asr_requests_cancelled_disconnected",
            "Running requests stopped at their next unit of model work because their client disconnected.",
            value=runner.cancelled_disconnected)
        yield GaugeMetricFamily("asr_inference_running",
                                "Requests and live calls the models are working on (at most MAX_CONCURRENT "
                                "requests).", value=running_now)
        yield GaugeMetricFamily("asr_model_ready",
                                "1 once the model is loaded, 0 while loading or after a failed load.",
                                value=1 if runner.ready else 0)
        if runner.load_seconds is not None:
            yield GaugeMetricFamily("asr_model_load_seconds", "Seconds the model took to load.",
                                    value=round(runner.load_seconds, 3))
        models = runner.models
        if models is not None:
            yield CounterMetricFamily(
                "asr_scheduler_yields",
                "Units of model work that gave their lane up to work the scheduler ranked first.",
                value=models.scheduler.yields)
            yield CounterMetricFamily(
                "asr_scheduler_jobs_cancelled",
                "Jobs (requests, live calls) cancelled, their work stopped at its next unit.",
                value=models.scheduler.cancelled)
        report = models.patch_report if models is not None else None
        if report:
            patches = GaugeMetricFamily(
                "asr_patch_applied",
                "1 for each change to transformers' or pyannote's internals that applied at load, 0 "
                "for one skipped (GET /health says why).", labels=["target", "name", "changes_output"])
            for r in report:
                patches.add_metric([r.target, r.name, str(r.changes_output).lower()], 1 if r.applied else 0)
            yield patches
        assist = models.assist_speeds() if models is not None else {}
        if assist:
            speeds = GaugeMetricFamily(
                "asr_auto_decode_seconds_per_audio_second",
                "Median decode time per second of one-window audio, by mode, that assisted='auto' "
                "chooses from.", labels=["mode"])
            for mode, median in assist.items():
                if median is not None:
                    speeds.add_metric([mode], median)
            yield speeds
