"""/metrics (speaker_asr/serving/metrics.py) without a server: each app's own registry, the names
and labels scraped today, and the exposition format prometheus_client negotiates."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from speaker_asr.serving.metrics import Metrics
from speaker_asr.serving.runner import ModelRunner

from helpers import parse_metrics


def runner(max_queue: int = 3) -> ModelRunner:
    return ModelRunner(lambda: (lambda data: data), max_queue=max_queue)  # never started


def test_every_app_counts_in_its_own_registry():
    first, second = Metrics(runner(3)), Metrics(runner(5))
    first.record("POST", "/", 200, 0.3, True, 2.0, 100)
    first.record("GET", "/health", 200, 0.001, False, None, 0)
    first.add_in_flight(1)
    one = parse_metrics(first.exposition(None)[0].decode())
    two = parse_metrics(second.exposition(None)[0].decode())
    assert one['asr_http_requests_total{method="POST",path="/",code="200"}'] == 1
    assert one['asr_http_requests_total{method="GET",path="/health",code="200"}'] == 1
    assert (one["asr_audio_seconds_total"], one["asr_request_bytes_total"]) == (2.0, 100)
    # only transcription routes count in the histogram, with prometheus_client's cumulative buckets
    assert one["asr_request_duration_seconds_count"] == 1 and one["asr_request_duration_seconds_sum"] == 0.3
    assert one['asr_request_duration_seconds_bucket{le="0.25"}'] == 0
    assert one['asr_request_duration_seconds_bucket{le="0.5"}'] == 1
    assert one['asr_request_duration_seconds_bucket{le="+Inf"}'] == 1
    assert (one["asr_requests_in_flight"], one["asr_queue_limit"], one["asr_model_ready"]) == (1, 3, 0)
    assert one["asr_requests_rejected_queue_full_total"] == 0
    assert "asr_model_load_seconds" not in one  # not loaded
    assert not [k for k in two if k.startswith("asr_http_requests_total")]
    assert (two["asr_audio_seconds_total"], two["asr_requests_in_flight"], two["asr_queue_limit"]) == (0, 0, 5)


def test_the_format_follows_the_accept_header():
    metrics = Metrics(runner())
    metrics.record("POST", "/", 400, 0.01, True, None, 5)
    body, content_type = metrics.exposition("*/*")
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE asr_http_requests_total counter" in body.decode()
    body, content_type = metrics.exposition(
        "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    families = {f.name: f for f in openmetrics_families(body.decode())}  # ends with # EOF
    sample = next(s for s in families["asr_http_requests"].samples if s.name.endswith("_total"))
    assert (sample.labels, sample.value) == ({"method": "POST", "path": "/", "code": "400"}, 1)


def test_decodes_are_counted_by_whether_the_assistant_drafted_and_why():
    metrics = Metrics(runner())
    metrics.record("POST", "/", 200, 0.3, True, 2.0, 100, {"used": True, "reason": "requested"})
    metrics.record("POST", "/", 200, 0.3, True, 2.0, 100, {"used": True, "reason": "requested"})
    metrics.record("POST", "/v1/audio/transcriptions", 200, 0.3, True, 2.0, 100,
                   {"used": False, "reason": "audio longer than one window"})
    metrics.record("POST", "/", 200, 0.1, True, 3.0, 100, None)  # silence: the ASR did not run
    metrics.record("POST", "/", 400, 0.1, True, None, 100)  # refused
    # a custom handler's own reason, or a malformed value: a closed label set
    metrics.record("POST", "/", 200, 0.1, True, 1.0, 100, {"used": False, "reason": "made up"})
    metrics.record("POST", "/", 200, 0.1, True, 1.0, 100, {"used": "no", "reason": "requested"})
    m = parse_metrics(metrics.exposition(None)[0].decode())
    decodes = {k: v for k, v in m.items() if k.startswith("asr_decodes_total")}
    assert decodes == {'asr_decodes_total{assisted="true",reason="requested"}': 2,
                       'asr_decodes_total{assisted="false",reason="audio longer than one window"}': 1,
                       'asr_decodes_total{assisted="false",reason="other"}': 1}
