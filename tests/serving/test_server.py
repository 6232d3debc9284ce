"""The HTTP server, end to end.

* ``python -m speaker_asr serve`` subprocesses with the tiny models, driven by real clients (requests,
  http.client, huggingface_hub's InferenceClient) on 127.0.0.1: one healthy server for most tests
  and one whose ASR_MODEL does not exist (it must stay up and answer 503 with the reason).
* An in-process server (uvicorn in a thread) around fake handlers, for what the real models cannot
  show deterministically: the exact ``data`` each kind of body becomes, one-at-a-time queueing,
  the 500 path and the loading states.

The servers get a fake HF_TOKEN; the last test checks that it never shows up in the logs, the
responses or the health checks.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import requests

from helpers import (FAKE_TOKEN, HTTP, MAX_BODY, REQUEST_TIMEOUT_S, SEEN_RESPONSES,
                     ServerProcess, b64, check_error, encode, inprocess_server,
                     parse_metrics, record, server_env, session, tiny_settings, tone, wait_until)

# every test here starts the server (or the command line) as a process
pytestmark = pytest.mark.subprocess

@pytest.fixture(scope="module")
def servers(tiny_models, tmp_path_factory):
    logs = tmp_path_factory.mktemp("server-logs")
    # both start at once: the broken one fails while the healthy one loads
    main = ServerProcess("main", server_env(tiny_models, WARMUP="true"), logs)
    broken = ServerProcess("broken", server_env(
        tiny_models, ASR_MODEL=f"/nonexistent/{FAKE_TOKEN}/whisper", ASSISTANT_MODEL="",
        DIARIZATION_MODEL=""), logs)
    try:
        main.wait_health(lambda status, body: status == 200)
        yield SimpleNamespace(main=main, broken=broken)
    finally:
        main.stop()
        broken.stop()


@pytest.fixture(scope="module")
def clip() -> bytes:
    """2 s of a tone as 16-bit WAV: the cheapest request the tiny models answer."""
    return encode(tone(2.0))


@pytest.fixture(scope="module")
def clip_path(clip, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("audio") / "clip.wav"
    path.write_bytes(clip)
    return path


def check_transcript(body: dict, duration: float) -> None:
    assert isinstance(body["text"], str)
    assert body["chunks"], body
    for chunk in body["chunks"]:
        start, end = chunk["timestamp"]
        assert 0.0 <= start <= end <= duration + 0.01, chunk
    assert isinstance(body["speakers"], list)
    assert body["duration"] == pytest.approx(duration, abs=0.01)



# --------------------------------------------------------------------------- healthy server


def test_health_is_503_while_loading_then_ok(servers):
    loading = [body for status, body in servers.main.health_log if status == 503]
    assert loading, "the server should answer (503) while the model loads"
    assert loading[0]["status"] == "loading" and "loading" in loading[0]["reason"]
    # ready only once the models are warmed up (the handler's warm-up is part of its load)
    log = servers.main.log()
    assert 0 <= log.find("warm-up in") < log.find("model ready after"), log[-3000:]
    for path in ("/health", "/"):
        r = servers.main.get(path)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    # which library internals the server changed at load, and why the others not
    patches = {(p["target"], p["name"]): p for p in r.json()["patches"]}
    from speaker_asr.patches.registry import PATCHES

    assert set(patches) == {(p.target, p.name) for p in PATCHES}
    assert all(p["applied"] or p["reason"] for p in patches.values())
    # what the diarization computes: the recipe's embeddings unless the approximate ones are opted in
    diarization = r.json()["diarization"]
    assert diarization["embeddings"] == "recipe" and "DIARIZATION_EMBEDDINGS=recipe" in diarization["summary"]


def test_json_base64_with_parameters(servers, clip):
    r = servers.main.post("/", json={"inputs": b64(clip), "parameters": {"language": "en", "num_speakers": 1}},
                          headers={"X-Request-Id": "json-base64-1"})
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == "json-base64-1"  # a caller's id is kept
    body = r.json()
    check_transcript(body, 2.0)
    assert body["language"] == "en"


def test_raw_audio_with_query_parameters_while_health_keeps_answering(servers, speech_like_wav):
    """A 12 s clip (the longest request here) runs on the worker thread; meanwhile /health and
    /metrics answer promptly and show the request in flight."""
    result = {}

    def slow_request():
        result["response"] = record(session().post(  # its own connection pool: another thread
            servers.main.url + "/?num_speakers=2&language=en", data=speech_like_wav,
            headers={"Content-Type": "audio/wav"}, timeout=REQUEST_TIMEOUT_S))

    worker = threading.Thread(target=slow_request)
    worker.start()
    latencies, saw_in_flight = [], False
    while worker.is_alive():
        started = time.perf_counter()
        r = servers.main.get("/health", timeout=10)
        latencies.append(time.perf_counter() - started)
        assert r.status_code == 200
        metrics = servers.main.get("/metrics", timeout=10).text
        saw_in_flight |= "asr_requests_in_flight 1" in metrics
        time.sleep(0.1)
    worker.join()
    r = result["response"]
    assert r.status_code == 200, r.text
    body = r.json()
    check_transcript(body, 12.0)
    assert body["language"] == "en"  # the query string reached the handler, numbers as numbers
    assert len(latencies) >= 2 and saw_in_flight
    assert max(latencies) < 5.0, latencies  # lenient: a busy 2-core box


def test_raw_audio_without_content_type(servers, clip):
    prepared = requests.Request("POST", servers.main.url + "/predict", data=clip).prepare()
    assert "Content-Type" not in prepared.headers
    r = record(HTTP.send(prepared, timeout=REQUEST_TIMEOUT_S))
    assert r.status_code == 200, r.text
    check_transcript(r.json(), 2.0)


def test_raw_audio_as_octet_stream(servers, clip):
    r = servers.main.post("/predict?language=en", data=clip,
                          headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    assert r.json()["language"] == "en"


def test_multipart_upload(servers, clip):
    r = servers.main.post("/", files={"file": ("clip.wav", clip, "audio/wav")},
                          data={"language": "en", "num_speakers": "1", "model": "whisper-1"})
    assert r.status_code == 200, r.text
    body = r.json()
    check_transcript(body, 2.0)
    assert body["language"] == "en"


def test_multipart_known_speakers_openai_style(servers, clip):
    ref = encode(tone(3.0, freq=300.0))
    r = servers.main.post("/", files=[("file", ("clip.wav", clip, "audio/wav")),
                                      ("known_speaker_references[]", ("alice.wav", ref, "audio/wav"))],
                          data={"known_speaker_names[]": "Alice", "response_format": "diarized_json"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [k["name"] for k in body["known_speakers"]] == ["Alice"] and body["segments"]
    bad = servers.main.post("/", files=[("file", ("clip.wav", clip, "audio/wav")),
                                        ("known_speaker_references[]", ("a.wav", encode(tone(1.0)), "audio/wav"))],
                            data={"known_speaker_names[]": "Alice"})
    check_error(bad, 400, "known_speaker_references[0] (for 'Alice')", "1.0 s long")


def test_huggingface_hub_inference_client(servers, clip_path):
    """InferenceClient refuses every URL, loopback included, while HF_HUB_OFFLINE or
    TRANSFORMERS_OFFLINE is set (read at import), so it runs in a subprocess without them."""
    script = textwrap.dedent("""
        import inspect, json, sys
        from pathlib import Path
        from huggingface_hub import InferenceClient

        url, path = sys.argv[1], sys.argv[2]
        client = InferenceClient(model=url, timeout=180)
        calls = {
            "path": lambda: client.automatic_speech_recognition(path),
            "bytes": lambda: client.automatic_speech_recognition(Path(path).read_bytes()),
        }
        # parameters for ASR: only releases whose method has extra_body (0.36 and 2.x do)
        if "extra_body" in inspect.signature(client.automatic_speech_recognition).parameters:
            calls["extra_body"] = lambda: client.automatic_speech_recognition(
                path, extra_body={"language": "en", "num_speakers": 1})
        out = {}
        for name, call in calls.items():
            r = call()
            out[name] = {"type": type(r).__name__, "text": r.text,
                         "language": r.get("language") if isinstance(r, dict) else None,
                         "chunks": [{"text": c.text, "timestamp": list(c.timestamp)} for c in r.chunks or []]}
        print(json.dumps(out))
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    proc = subprocess.run([sys.executable, "-c", script, servers.main.url, str(clip_path)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, r in out.items():
        assert r["type"] == "AutomaticSpeechRecognitionOutput", name
        assert isinstance(r["text"], str) and r["chunks"], (name, r)
        for chunk in r["chunks"]:
            start, end = chunk["timestamp"]
            assert 0.0 <= start <= end <= 2.01, (name, chunk)
    import huggingface_hub
    from packaging.version import Version

    if Version(huggingface_hub.__version__) >= Version("0.36"):
        assert out["extra_body"]["language"] == "en"  # extra_body arrives as "parameters"


def test_400_bad_base64(servers):
    r = servers.main.post("/", json={"inputs": "this is not base64 audio!"})
    check_error(r, 400, "base64")


def test_400_unknown_parameter(servers, clip):
    r = servers.main.post("/", json={"inputs": b64(clip), "parameters": {"speakers": 2}})
    check_error(r, 400, "unknown parameter 'speakers'")


def test_400_query_value_of_the_wrong_type(servers, clip):
    r = servers.main.post("/?num_speakers=two", data=clip, headers={"Content-Type": "audio/wav"})
    check_error(r, 400, "num_speakers")


def test_400_json_that_is_not_an_object_or_not_json(servers):
    check_error(servers.main.post("/", data="[1, 2]", headers={"Content-Type": "application/json"}),
                400, "must be an object", "array")
    check_error(servers.main.post("/", data="{inputs:", headers={"Content-Type": "application/json"}),
                400, "not valid JSON")
    check_error(servers.main.post("/", json={"audio": "AAAA"}), 400, "no 'inputs'")


def test_400_audio_that_does_not_decode(servers):
    r = servers.main.post("/", data=b"RIFF\x00\x00\x00\x00WAVEgarbage", headers={"Content-Type": "audio/wav"})
    check_error(r, 400)


def test_413_by_content_length_before_reading(servers):
    conn = http.client.HTTPConnection("127.0.0.1", servers.main.port, timeout=30)
    try:
        conn.putrequest("POST", "/")
        conn.putheader("Content-Type", "audio/wav")
        conn.putheader("Content-Length", str(MAX_BODY + 1))
        conn.endheaders()  # no body at all: the server must answer from the header
        r = conn.getresponse()
        body = r.read().decode()
    finally:
        conn.close()
    SEEN_RESPONSES.append(body)
    assert r.status == 413, body
    assert r.getheader("X-Request-Id")
    message = json.loads(body)["error"]
    assert str(MAX_BODY) in message and "MAX_BODY_BYTES" in message


def test_413_chunked_body_while_reading(servers):
    chunk = b"\0" * 65536
    chunks = MAX_BODY // len(chunk) + 1  # just over the limit

    def body():
        for _ in range(chunks):
            yield chunk

    r = servers.main.post("/", data=body(), headers={"Content-Type": "audio/wav"})
    assert "content-length" not in {k.lower() for k in r.request.headers}
    check_error(r, 413, "MAX_BODY_BYTES")


def test_415_unsupported_media_types(servers):
    check_error(servers.main.post("/", data="hello", headers={"Content-Type": "text/plain"}),
                415, "text/plain")
    check_error(servers.main.post("/", data=b"\x00\x01 not audio",
                                  headers={"Content-Type": "application/octet-stream"}),
                415, "not a recognised audio file")


def test_404_and_405_are_json(servers):
    check_error(servers.main.get("/nope"), 404, "no such route")
    check_error(record(HTTP.put(servers.main.url + "/predict", data=b"x", timeout=30)), 405)


def test_metrics_after_requests(servers):
    r = servers.main.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(r.text)
    for path, code in (("/", "200"), ("/", "400"), ("/", "413"), ("/", "415"), ("/predict", "200")):
        assert m[f'asr_http_requests_total{{method="POST",path="{path}",code="{code}"}}'] >= 1, (path, code)
    assert m['asr_http_requests_total{method="GET",path="/health",code="200"}'] >= 1
    assert m['asr_http_requests_total{method="GET",path="other",code="404"}'] >= 1
    assert m['asr_patch_applied{target="whisper",name="fast_dtw",changes_output="false"}'] == 1
    assert m["asr_audio_seconds_total"] >= 2.0 * 4 + 12.0  # four 2 s clips and the 12 s one
    count = m["asr_request_duration_seconds_count"]
    assert count >= 10 and m['asr_request_duration_seconds_bucket{le="+Inf"}'] == count
    assert m["asr_request_duration_seconds_sum"] > 0
    assert m["asr_request_bytes_total"] > 0
    assert m["asr_queue_depth"] == 0 and m["asr_requests_in_flight"] == 0
    assert m["asr_inference_running"] == 0
    assert m["asr_model_ready"] == 1 and m["asr_model_load_seconds"] > 0
    # assisted="auto" on the 2 s clips tried both modes (the tiny models include an assistant)
    assert m['asr_auto_decode_seconds_per_audio_second{mode="assisted"}'] > 0
    assert m['asr_auto_decode_seconds_per_audio_second{mode="plain"}'] > 0
    # every answered request where the ASR ran counts once, by whether the assistant drafted and why
    from speaker_asr.types import ASSIST_REASONS

    decodes = {k: v for k, v in m.items() if k.startswith("asr_decodes_total")}
    assert sum(decodes.values()) >= 5
    assert all(re.fullmatch(r'asr_decodes_total\{assisted="(true|false)",reason="([^"]*)"\}', k)[2]
               in ASSIST_REASONS for k in decodes), decodes
    assert any('reason="auto: timing both modes"' in k for k in decodes), decodes


# --------------------------------------------------------------------------- broken server


def test_failed_load_answers_503_with_the_reason_and_stays_up(servers, clip):
    broken = servers.broken
    status, body = broken.wait_health(lambda status, body: body.get("status") == "error")
    assert status == 503
    reason = body["reason"]
    assert "failed to load" in reason and "/nonexistent/" in reason, reason
    assert FAKE_TOKEN not in reason and "<redacted>" in reason  # the path held the token
    check_error(broken.post("/", data=clip, headers={"Content-Type": "audio/wav"}), 503, "failed to load")
    for _ in range(5):  # still alive, still answering
        time.sleep(0.2)
        assert broken.proc.poll() is None
        assert broken.get("/health").status_code == 503
    assert "asr_model_ready 0" in broken.get("/metrics").text


# --------------------------------------------------------------------------- in-process, fake handlers


def echo_handler(data):
    inputs = data.get("inputs")
    return {"inputs": type(inputs).__name__, "size": len(inputs) if inputs is not None else None,
            "parameters": data.get("parameters"), "keys": sorted(data), "duration": 1.5}


def test_how_each_body_becomes_the_handler_data(clip):
    with inprocess_server(lambda: echo_handler) as (url, _):
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)
        # JSON: the body's parameters win over the query string's
        r = HTTP.post(url + "/?language=en&num_speakers=2",
                      json={"inputs": "QUJD", "parameters": {"num_speakers": 3}})
        assert r.json()["parameters"] == {"language": "en", "num_speakers": 3}
        assert r.json()["inputs"] == "str"
        r = HTTP.post(url + "/?task=translate", json={"inputs": "QUJD"})
        assert r.json()["parameters"] == {"task": "translate"}
        # a key given twice is a list
        r = HTTP.post(url + "/?speaker_names=Diane&speaker_names=Sheila&response_format=srt",
                      data=clip, headers={"Content-Type": "audio/wav"})
        assert r.json()["parameters"] == {"speaker_names": ["Diane", "Sheila"], "response_format": "srt"}
        r = HTTP.post(url, files={"file": ("a.wav", clip, "audio/wav")},
                      data={"speaker_names": ["Diane", "Sheila"]})
        assert r.json()["parameters"] == {"speaker_names": ["Diane", "Sheila"]}
        # raw audio: query values read by each parameter's declared type, not guessed from the
        # text: a prompt of 1984 stays text, a list parameter given once is a list
        r = HTTP.post(url + "/predict?assisted=true&vad_filter=False&num_speakers=2&temperature=0.5"
                            "&language=en&prompt=1984&chunk_length_s=2e1&speaker_names=Ann",
                      data=clip, headers={"Content-Type": "audio/x-wav; codecs=1"})
        assert r.json() == {"inputs": "bytes", "size": len(clip), "keys": ["inputs", "parameters"],
                            "parameters": {"assisted": True, "vad_filter": False, "num_speakers": 2,
                                           "temperature": 0.5, "language": "en", "prompt": "1984",
                                           "chunk_length_s": 20.0, "speaker_names": ["Ann"]},
                            "duration": 1.5}
        r = HTTP.post(url + "/?assisted=auto&prompt=true&temperature=0&temperature=0.2", data=clip,
                      headers={"Content-Type": "audio/wav"})
        assert r.json()["parameters"] == {"assisted": "auto", "prompt": "true", "temperature": [0.0, 0.2]}
        # what a parameter's type cannot read is refused, saying what it may be
        for query, fragments in (("num_speakers=2.5", ("invalid value for 'num_speakers': '2.5'", "an integer")),
                                 ("temperature=nan", ("'temperature'", "a number in [0, 1]")),
                                 ("vad_filter=maybe", ("'vad_filter'", "true or false")),
                                 ("speakers=2", ("unknown parameter 'speakers'", "did you mean 'num_speakers'"))):
            check_error(HTTP.post(url + "/?" + query, data=clip, headers={"Content-Type": "audio/wav"}),
                        400, *fragments)
        # curl --data-binary @file.wav without -H sends application/x-www-form-urlencoded
        r = HTTP.post(url, data=clip, headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 200 and r.json()["size"] == len(clip)
        # no Content-Type and a JSON object: read as JSON
        r = HTTP.post(url, data=json.dumps({"inputs": "QUJD"}).encode())
        assert r.json()["inputs"] == "str"
        # any audio/* or video/* is passed on (the handler decides whether it decodes)
        for kind in ("audio/flac", "audio/mpeg", "audio/webm", "audio/x-m4a", "audio/amr", "video/mp4"):
            assert HTTP.post(url, data=b"xyz", headers={"Content-Type": kind}).status_code == 200, kind
        # multipart: fields become parameters, 'model' (OpenAI clients) is ignored
        r = HTTP.post(url + "/?language=fr", files={"file": ("a.wav", clip, "audio/wav")},
                      data={"language": "en", "num_speakers": "2", "assisted": "true", "model": "whisper-1",
                            "parameters": json.dumps({"batch_size": 4})})
        assert r.json()["parameters"] == {"language": "en", "num_speakers": 2, "assisted": True,
                                          "batch_size": 4}
        assert r.json()["size"] == len(clip)
        # OpenAI-style known speakers: key[] fields, clips as data URIs or as uploaded files,
        # always lists (one name is still a list); names stay text ("true" is a name here)
        uri = "data:audio/wav;base64," + b64(clip)
        r = HTTP.post(url, files=[("file", ("a.wav", clip, "audio/wav")),
                                  ("known_speaker_references[]", ("bob.wav", clip, "audio/wav"))],
                      data={"known_speaker_names[]": ["Alice", "true"], "known_speaker_references[]": uri})
        params = r.json()["parameters"]
        assert params["known_speaker_names"] == ["Alice", "true"]
        assert sorted(params["known_speaker_references"]) == sorted([uri, b64(clip)])
        r = HTTP.post(url + "/?known_speaker_names=Alice&known_speaker_references=" + b64(clip)[:8],
                      data=clip, headers={"Content-Type": "audio/wav"})
        assert r.json()["parameters"] == {"known_speaker_names": ["Alice"],
                                          "known_speaker_references": [b64(clip)[:8]]}
        check_error(HTTP.post(url, files={"audio": ("a.wav", clip, "audio/wav")}), 400, "'file'")
        check_error(HTTP.post(url, files={"file": ("a.wav", b"", "audio/wav")}), 400, "empty")
        check_error(HTTP.post(url, data=b"", headers={"Content-Type": "audio/wav"}), 400, "empty")
        check_error(HTTP.post(url, data=b"{}", headers={"Content-Type": "application/json"}), 400, "inputs")


def test_body_limit_counts_what_arrives(clip):
    with inprocess_server(lambda: echo_handler, max_body_bytes=len(clip)) as (url, _):
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)
        assert HTTP.post(url, data=clip, headers={"Content-Type": "audio/wav"}).status_code == 200
        check_error(HTTP.post(url, data=clip + b"x", headers={"Content-Type": "audio/wav"}), 413,
                    f"limit of {len(clip)} bytes")
        # base64 JSON counts as sent (4/3 of the audio)
        check_error(HTTP.post(url, json={"inputs": b64(clip)}), 413)
        # a multipart upload: by its Content-Length, and (sent chunked) while the form streams in
        from requests.models import RequestEncodingMixin

        form, content_type = RequestEncodingMixin._encode_files({"file": ("a.wav", clip, "audio/wav")}, {})
        check_error(HTTP.post(url, data=form, headers={"Content-Type": content_type}), 413,
                    f"limit of {len(clip)} bytes")
        chunked = HTTP.post(url, data=iter([form[:1000], form[1000:]]), headers={"Content-Type": content_type})
        assert "Content-Length" not in chunked.request.headers
        check_error(chunked, 413, f"limit of {len(clip)} bytes")
        small = form.replace(clip, clip[:len(clip) // 2])  # within the limit: parsed while it streams
        r = HTTP.post(url, data=iter([small[:1000], small[1000:]]), headers={"Content-Type": content_type})
        assert r.status_code == 200 and r.json()["size"] == len(clip) // 2


def test_request_error_is_400_and_other_errors_are_500_without_internals():
    from speaker_asr.errors import RequestError

    def failing(data):
        if data["parameters"].get("language") == "value":
            raise RequestError("language 'xx' is not available")
        if data["parameters"].get("language") == "internal-value":  # a library's ValueError: not the client's
            raise ValueError(f"shapes do not match in /secret/path/model.bin token={FAKE_TOKEN}")
        raise RuntimeError(f"CUDA out of memory at /secret/path/model.bin token={FAKE_TOKEN}")

    with inprocess_server(lambda: failing) as (url, _):
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)
        r = HTTP.post(url + "/?language=value", data=b"fLaC....", headers={"Content-Type": "audio/flac"})
        assert r.status_code == 400 and r.json() == {"error": "language 'xx' is not available"}
        for kind in ("other", "internal-value"):
            r = HTTP.post(url + f"/?language={kind}", data=b"fLaC....", headers={"Content-Type": "audio/flac"})
            assert r.status_code == 500
            request_id = r.headers["x-request-id"]
            assert r.json() == {"error": f"internal error (request id {request_id})"}
            assert "secret" not in r.text and "CUDA" not in r.text and "shapes" not in r.text
        # the server is fine afterwards
        assert HTTP.get(url + "/health").status_code == 200


def test_one_request_at_a_time_and_health_answers_meanwhile():
    release = threading.Event()
    active, peak = [0], [0]
    lock = threading.Lock()

    def blocking(data):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            release.wait(30)
            return {"text": "ok", "duration": 2.0}
        finally:
            with lock:
                active[0] -= 1

    with inprocess_server(lambda: blocking) as (url, _):
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)
        results = []
        threads = [threading.Thread(target=lambda: results.append(
            session().post(url, data=b"OggS....", headers={"Content-Type": "audio/ogg"}, timeout=60)))
            for _ in range(3)]
        for t in threads:
            t.start()

        def gauges():
            m = parse_metrics(HTTP.get(url + "/metrics").text)
            return m if (m["asr_queue_depth"] == 2 and m["asr_inference_running"] == 1
                         and m["asr_requests_in_flight"] == 3) else None

        wait_until(gauges)
        started = time.perf_counter()
        assert HTTP.get(url + "/health").json() == {"status": "ok"}
        assert time.perf_counter() - started < 2.0
        release.set()
        for t in threads:
            t.join(30)
        assert [r.status_code for r in results] == [200, 200, 200]
        assert peak[0] == 1  # never two model calls at once
        m = parse_metrics(HTTP.get(url + "/metrics").text)
        assert m["asr_queue_depth"] == 0 and m["asr_requests_in_flight"] == 0
        assert m["asr_audio_seconds_total"] == 6.0


def test_loading_states(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    loaded = threading.Event()

    def slow_factory():
        loaded.wait(30)
        return echo_handler

    with inprocess_server(slow_factory) as (url, _):
        r = HTTP.get(url + "/health")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = HTTP.post(url, data=b"fLaC....", headers={"Content-Type": "audio/flac"})
        check_error(r, 503, "loading")
        assert r.headers["retry-after"]
        loaded.set()
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)

    def failing_factory():
        raise OSError(f"401 Client Error for https://huggingface.co/x (token {FAKE_TOKEN} is invalid)")

    with inprocess_server(failing_factory) as (url, _):
        body = wait_until(lambda: (lambda r: r.json() if r.json()["status"] == "error" else None)(
            HTTP.get(url + "/health")))
        assert "OSError: 401 Client Error" in body["reason"]
        assert FAKE_TOKEN not in body["reason"] and "<redacted>" in body["reason"]
        assert HTTP.get(url + "/health").status_code == 503


def test_health_is_not_ok_until_the_warm_up_ends(tiny_models, monkeypatch):
    """The real handler on the tiny models, its warm-up held until the test lets it go: /health
    answers 503 (loading) all that time, 200 after, and the warm-up's decodes left no timings
    for assisted='auto'."""
    from speaker_asr.endpoint import EndpointHandler
    from speaker_asr.models import Models

    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    reached, release, done = threading.Event(), threading.Event(), threading.Event()
    warm_up = Models.warm_up

    def held(self, *args, **kwargs):
        reached.set()
        assert release.wait(120), "the test never let the warm-up go"
        try:
            return warm_up(self, *args, **kwargs)
        finally:
            done.set()

    monkeypatch.setattr(Models, "warm_up", held)
    with inprocess_server(lambda: EndpointHandler(settings=tiny_settings(tiny_models, warmup=True))
                          ) as (url, app):
        assert reached.wait(240), "the handler never reached its warm-up"
        r = HTTP.get(url + "/health")  # the models are loaded, the warm-up has not run
        assert r.status_code == 503 and r.json()["status"] == "loading", r.text
        check_error(HTTP.post(url, data=encode(tone(1.0)), headers={"Content-Type": "audio/wav"}),
                    503, "loading")
        release.set()
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200, timeout=120)
        assert done.is_set()
        handler = app.state.runner.handler
        assert set(handler.models.warm_up_seconds) == {"plain", "assisted", "diarization", "utterance"}
        assert all(v["timings"] == 0 for v in handler.models.asr.assist_policy.snapshot().values())


def test_audio_sniffing():
    from speaker_asr.serving.negotiation import sniff_audio

    samples = np.zeros(1600, np.float32)
    assert sniff_audio(encode(samples)) == "wav"
    assert sniff_audio(encode(samples, fmt="FLAC")) == "flac"
    assert sniff_audio(encode(samples, fmt="OGG", subtype="VORBIS")) == "ogg"
    assert sniff_audio(b"ID3\x04\x00" + b"\0" * 20) == "mp3"
    assert sniff_audio(b"\xff\xfb\x90\x00" + b"\0" * 20) == "mp3"
    assert sniff_audio(b"\xff\xf1\x50\x80" + b"\0" * 20) == "aac"
    assert sniff_audio(b"\0\0\0\x20ftypM4A " + b"\0" * 20) == "mp4"
    assert sniff_audio(b"\x1a\x45\xdf\xa3" + b"\0" * 20) == "webm"
    assert sniff_audio(b"#!AMR\n" + b"\0" * 20) == "amr"
    for not_audio in (b"", b"hello world", b"{\"inputs\": 1}", b"\x89PNG\r\n\x1a\n", b"RIFF\0\0\0\0AVI "):
        assert sniff_audio(not_audio) is None, not_audio


# --------------------------------------------------------------------------- last: secrets and logs


def test_token_never_leaks_and_each_request_logs_one_json_line(servers, clip):
    servers.main.get("/health")
    servers.broken.get("/health")
    for text in SEEN_RESPONSES:
        assert FAKE_TOKEN not in text
    for proc in (servers.main, servers.broken):
        log = proc.log()
        assert FAKE_TOKEN not in log, proc.name
        assert b64(clip)[:64] not in log  # neither the audio's base64...
        assert "UklGR" not in log  # ... nor any base64 WAV header
    log = servers.main.log()
    requests_logged = []
    for line in log.splitlines():
        if '"logger": "server.access"' in line:
            requests_logged.append(json.loads(line))
    by_id = {entry["request_id"]: entry for entry in requests_logged}
    entry = by_id["json-base64-1"]
    assert entry["method"] == "POST" and entry["path"] == "/" and entry["status"] == 200
    assert entry["audio_seconds"] == pytest.approx(2.0) and entry["total_ms"] > 0
    assert entry["bytes_in"] > len(clip)  # base64 JSON is larger than the file
    assert {"ts", "level", "msg", "queue_ms", "inference_ms"} <= set(entry)
    statuses = {e["status"] for e in requests_logged}
    assert {200, 400, 413, 415} <= statuses
    errors = [e for e in requests_logged if e["status"] == 400]
    assert all(e.get("error") for e in errors)
    # each POST is one line: ids are unique
    posts = [e for e in requests_logged if e["method"] == "POST"]
    assert len({e["request_id"] for e in posts}) == len(posts)
    # the broken server logged why it failed, scrubbed
    assert "failed to load" in servers.broken.log() and "<redacted>" in servers.broken.log()


def test_health_names_the_int8_form_chosen_for_this_cpu():
    """/health says what the models layer says of the int8 form (speaker_asr/models.py: health)."""
    import types

    from speaker_asr.config import ModelCapabilities
    from speaker_asr.models import Models

    class Quantized:
        quantization = {"mode": "int8", "path": "dynamic", "reason": "torch runs AVX2 kernels here"}

        def __init__(self):
            asr = types.SimpleNamespace(quantization=self.quantization, patch_report=[], assistant=None,
                                        capabilities=lambda has_diarization: ModelCapabilities())
            self.models = Models(asr)

        def __call__(self, data):
            return echo_handler(data)

    with inprocess_server(Quantized) as (url, _):
        body = wait_until(lambda: (r := HTTP.get(url + "/health")).status_code == 200 and r.json())
        assert body["quantization"] == Quantized.quantization
    with inprocess_server(lambda: echo_handler) as (url, _):
        body = wait_until(lambda: (r := HTTP.get(url + "/health")).status_code == 200 and r.json())
        assert "quantization" not in body
