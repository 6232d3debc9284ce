"""The OpenAI-compatible routes, API_KEY and the bounded queue, end to end.

* A ``python -m speaker_asr serve`` subprocess with the tiny random models and ``API_KEY`` set,
  driven by the official ``openai`` SDK (skipped where it is not installed): every
  ``response_format``, word and segment timestamps, diarized_json, known speakers named from a
  reference clip, streaming, translations, /v1/models, a wrong or missing key (on /v1 and on the
  Endpoints routes), bad parameters, a body over the limit. The /v1 answers are checked against
  ``POST /``'s json for the same audio (greedy decoding: the same transcript every time).
* An in-process server (uvicorn in a thread) around fake handlers, for what the real models cannot
  show deterministically: both speakers of a two-speaker result through the SDK, a full queue
  (503 with Retry-After), a client that disconnects while queued (dropped before the model,
  counted, its audio released), errors before and after a stream starts, keep-alive comments.
"""

from __future__ import annotations

import base64
import gc
import http.client
import json
import re
import threading
import time
import weakref
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np
import pytest
import srt
import webvtt

from helpers import (FAKE_TOKEN, HTTP, MAX_BODY, SEEN_RESPONSES, ServerProcess, encode,
                     inprocess_server, parse_metrics, record, server_env, session, tone, wait_until)

openai = pytest.importorskip("openai")

KEY = "sk-test-0123456789abcdef-SECRET"
PARAMS = {"language": "en", "num_speakers": 2}


def client(url: str, key: str = KEY, **kwargs):
    """The SDK on our /v1, without retries (a 503 must show up here, not be retried) or proxies."""
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=kwargs.pop("max_retries", 0),
                         timeout=kwargs.pop("timeout", 180),
                         http_client=openai.DefaultHttpxClient(trust_env=False), **kwargs)


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


# --------------------------------------------------------------------------- the live server


@pytest.fixture(scope="module")
def recording() -> bytes:
    """12 s of two alternating 'voices' (tones at two pitches) as 16-bit WAV."""
    return encode(np.concatenate([tone(3.0, freq=f) for f in (180.0, 320.0, 180.0, 320.0)]))


@pytest.fixture(scope="module")
def live(tiny_models, tmp_path_factory, recording):
    server = ServerProcess("openai", server_env(tiny_models, API_KEY=KEY),
                           tmp_path_factory.mktemp("openai-logs"))
    try:
        server.wait_health(lambda status, body: status == 200)
        sdk = client(server.url)
        # the Endpoints route's json for the same audio and parameters: what /v1 must agree with
        reference = server.post("/", files={"file": ("a.wav", recording, "audio/wav")},
                                data={**PARAMS, "return_word_timestamps": "true"}, headers=auth())
        assert reference.status_code == 200, reference.text
        yield SimpleNamespace(server=server, sdk=sdk, reference=reference.json())
    finally:
        server.stop()


def upload(recording: bytes):
    return ("meeting.wav", recording, "audio/wav")


def raw(live, recording: bytes, **kwargs):
    """The SDK's raw response (headers and body) of one transcription."""
    response = live.sdk.audio.transcriptions.with_raw_response.create(
        file=upload(recording), model="whisper-1", **kwargs)
    SEEN_RESPONSES.append(response.text)
    SEEN_RESPONSES.append(json.dumps(dict(response.headers)))
    return response


def reference_speakers(live) -> list:
    return [s["speaker"] for s in live.reference["speakers"]]


@pytest.mark.subprocess
def test_models_are_listed_and_retrieved(live):
    models = live.sdk.models.list()
    assert [m.id for m in models.data] == ["whisper", "assistant", "pyannote"]  # the folders' names
    for m in models.data:
        assert m.object == "model" and m.owned_by == "local" and abs(m.created - time.time()) < 3600
    assert live.sdk.models.retrieve("whisper").id == "whisper"
    with pytest.raises(openai.NotFoundError) as err:
        live.sdk.models.retrieve("whisper-1")
    assert err.value.body["code"] == "model_not_found" and "whisper" in err.value.body["message"]


@pytest.mark.subprocess
def test_json_text_srt_and_vtt_come_back_as_the_sdk_expects(live, recording):
    text = live.reference["text"].strip()
    response = raw(live, recording, extra_body=PARAMS)
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-model"] == "whisper"
    out = response.parse()
    assert isinstance(out, openai.types.audio.Transcription)
    assert out.text == text and out.usage.type == "duration" and out.usage.seconds == pytest.approx(12.0)
    assert out.model == "whisper"  # the model that ran, whatever the request named

    response = raw(live, recording, response_format="text", extra_body=PARAMS)
    assert response.headers["content-type"].startswith("text/plain")
    assert response.parse() == (text + "\n" if text else "")

    speakers = set(reference_speakers(live))
    subtitles = live.sdk.audio.transcriptions.create(file=upload(recording), model="whisper-1",
                                                     response_format="srt", extra_body=PARAMS)
    assert isinstance(subtitles, str)
    cues = list(srt.parse(subtitles))
    assert cues and all(c.content.split(": ", 1)[0] in speakers for c in cues)
    assert " ".join(c.content.split(": ", 1)[1] for c in cues).split() == text.split()
    assert cues[-1].end.total_seconds() <= 12.0

    captions = live.sdk.audio.transcriptions.create(file=upload(recording), model="whisper-1",
                                                    response_format="vtt", extra_body=PARAMS)
    parsed = webvtt.from_string(captions)
    assert len(parsed.captions) == len(cues)
    assert {c.voice for c in parsed.captions} <= speakers


@pytest.mark.subprocess
def test_verbose_json_with_word_and_segment_timestamps(live, recording):
    out = live.sdk.audio.transcriptions.create(
        file=upload(recording), model="whisper-1", response_format="verbose_json",
        timestamp_granularities=["word", "segment"], language="en", extra_body={"num_speakers": 2})
    assert isinstance(out, openai.types.audio.TranscriptionVerbose)
    assert out.language == "english" and out.duration == pytest.approx(12.0)
    assert out.text == live.reference["text"].strip()
    assert out.task == "transcribe"
    chunks = live.reference["chunks"]
    assert [(s.start, s.end, s.text, s.speaker) for s in out.segments] == \
        [(c["timestamp"][0], c["timestamp"][1], c["text"], c["speaker"]) for c in chunks]
    for i, segment in enumerate(out.segments):
        assert segment.id == i and segment.tokens == [] and segment.temperature == 0.0
        assert 0.0 <= segment.start <= segment.end <= 12.0
    words = [w for c in chunks for w in c["words"] if w["word"].strip()]
    assert [(w.word, w.speaker) for w in out.words] == [(w["word"].strip(), w["speaker"]) for w in words]
    previous = 0.0
    for word in out.words:
        assert previous - 0.01 <= word.start <= word.end <= 12.0, word
        previous = word.start
    only_words = live.sdk.audio.transcriptions.create(
        file=upload(recording), model="whisper-1", response_format="verbose_json",
        timestamp_granularities=["word"], extra_body=PARAMS)
    assert only_words.segments is None and len(only_words.words) == len(out.words)
    segments_only = live.sdk.audio.transcriptions.create(
        file=upload(recording), model="whisper-1", response_format="verbose_json", extra_body=PARAMS)
    assert segments_only.words is None and len(segments_only.segments) == len(out.segments)


@pytest.mark.subprocess
def test_diarized_json_carries_the_speakers(live, recording):
    out = live.sdk.audio.transcriptions.create(file=upload(recording), model="whisper-1",
                                               response_format="diarized_json", extra_body=PARAMS)
    assert isinstance(out, openai.types.audio.TranscriptionDiarized)
    assert out.task == "transcribe" and out.duration == pytest.approx(12.0)
    assert [(s.speaker, s.text, s.start, s.end) for s in out.segments] == \
        [(t["speaker"], t["text"], *t["timestamp"]) for t in live.reference["speakers"] if t["text"]]
    assert all(s.type == "transcript.text.segment" and s.speaker.startswith("SPEAKER_")
               for s in out.segments)
    assert [s.id for s in out.segments] == [f"seg_{i}" for i in range(len(out.segments))]


@pytest.mark.subprocess
def test_known_speakers_are_named_from_reference_clips(live, recording):
    clip = "data:audio/wav;base64," + base64.b64encode(encode(tone(3.0, freq=180.0))).decode()
    out = live.sdk.audio.transcriptions.create(
        file=upload(recording), model="whisper-1", response_format="diarized_json",
        known_speaker_names=["Alice"], known_speaker_references=[clip],
        # the tiny random embedding model knows no voices: take the closest speaker, however far
        extra_body={"num_speakers": 2, "speaker_match_threshold": -1.0})
    assert out.known_speakers[0]["name"] == "Alice" and out.known_speakers[0]["speaker"] == "Alice"
    speakers = {s.speaker for s in out.segments}
    assert "Alice" in speakers and len(speakers) == len(set(reference_speakers(live)))
    # a bad clip is the client's mistake, named
    with pytest.raises(openai.BadRequestError) as err:
        live.sdk.audio.transcriptions.create(
            file=upload(recording), model="whisper-1", known_speaker_names=["Alice"],
            known_speaker_references=["data:audio/wav;base64," + base64.b64encode(encode(tone(1.0))).decode()])
    assert err.value.body["param"] == "known_speaker_references"
    assert "1.0 s long" in err.value.body["message"]


@pytest.mark.subprocess
def test_stream_yields_segment_events_and_one_done_event(live, recording):
    with live.sdk.audio.transcriptions.with_streaming_response.create(
            file=upload(recording), model="whisper-1", stream=True, extra_body=PARAMS) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-model"] == "whisper"
    events = list(live.sdk.audio.transcriptions.create(file=upload(recording), model="whisper-1",
                                                       stream=True, extra_body=PARAMS))
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and kinds.count("transcript.text.done") == 1
    segments = [e for e in events if e.type == "transcript.text.segment"]
    assert [(s.speaker, s.text) for s in segments] == \
        [(t["speaker"], t["text"]) for t in live.reference["speakers"] if t["text"]]
    assert events[-1].text == live.reference["text"].strip()
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta") == events[-1].text


@pytest.mark.subprocess
def test_translations(live, recording):
    out = live.sdk.audio.translations.create(file=upload(recording), model="whisper-1",
                                             response_format="verbose_json")
    assert isinstance(out, openai.types.audio.TranslationVerbose)
    assert out.language == "english" and out.task == "translate" and out.duration == pytest.approx(12.0)
    text = live.sdk.audio.translations.create(file=upload(recording), model="whisper-1",
                                              response_format="text")
    assert isinstance(text, str) and text.strip() == out.text


@pytest.mark.subprocess
def test_a_wrong_or_missing_key_is_401_on_every_route_but_health(live, recording):
    with pytest.raises(openai.AuthenticationError) as err:
        client(live.server.url, key="sk-wrong-key-000000000000").audio.transcriptions.create(
            file=upload(recording), model="whisper-1")
    assert err.value.status_code == 401 and err.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(live.server.url, key="sk-wrong-key-000000000000").models.list()
    for method, path in (("GET", "/"), ("POST", "/"), ("POST", "/predict"), ("GET", "/metrics"),
                         ("GET", "/v1/models"), ("GET", "/nope")):
        for headers in ({}, auth("sk-wrong-key-000000000000"), {"Authorization": KEY},
                        {"Authorization": "Basic " + base64.b64encode(b"u:" + KEY.encode()).decode()}):
            r = record(HTTP.request(method, live.server.url + path, headers=headers, timeout=30,
                                    data=recording if method == "POST" else None))
            assert r.status_code == 401, (method, path, headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
            error = r.json()["error"]
            message = error["message"] if path.startswith("/v1") else error
            assert "API key" in message or "Authorization" in message
            assert KEY not in r.text and "wrong-key" not in r.text
    assert live.server.get("/health").status_code == 200  # no key needed
    assert live.server.get("/", headers=auth()).status_code == 200


@pytest.mark.subprocess
def test_a_wrong_key_with_a_large_upload_still_reads_401(live):
    """Answered before the body is read: the client still uploading reads the 401, not a
    connection reset."""
    big = encode(tone(45.0))  # 1.4 MB, under MAX_BODY_BYTES
    with pytest.raises(openai.AuthenticationError):
        client(live.server.url, key="sk-wrong-key-000000000000").audio.transcriptions.create(
            file=upload(big), model="whisper-1")


@pytest.mark.subprocess
def test_bad_parameters_are_400_with_the_field_named(live, recording):
    cases = [
        ({"extra_body": {"num_speakers": "two"}}, "num_speakers", "invalid_value", "expected an integer"),
        ({"extra_body": {"num_speaker": 2}}, "num_speaker", "unknown_parameter", "did you mean 'num_speakers'"),
        ({"response_format": "xml"}, "response_format", "invalid_value", "json, text, srt"),
        ({"timestamp_granularities": ["word"]}, "timestamp_granularities", "invalid_value", "verbose_json"),
        ({"temperature": 3.0}, "temperature", "invalid_value", "from 0 to 1"),
        ({"language": "klingon"}, None, "invalid_value", "unknown language 'klingon'"),
    ]
    for kwargs, param, code, fragment in cases:
        with pytest.raises(openai.BadRequestError) as err:
            live.sdk.audio.transcriptions.create(file=upload(recording), model="whisper-1", **kwargs)
        body = err.value.body
        SEEN_RESPONSES.append(json.dumps(body))
        assert (body["param"], body["code"], body["type"]) == (param, code, "invalid_request_error"), body
        assert fragment in body["message"], body
    with pytest.raises(openai.BadRequestError) as err:
        live.sdk.audio.transcriptions.create(file=("a.wav", b"RIFF\0\0\0\0WAVEjunk", "audio/wav"),
                                             model="whisper-1")
    assert err.value.body["param"] == "file" and err.value.body["code"] == "invalid_file"
    # not multipart: 415, OpenAI's error object
    r = live.server.post("/v1/audio/transcriptions", json={"file": "x"}, headers=auth())
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.subprocess
def test_a_body_over_the_limit_is_413(live):
    with pytest.raises(openai.APIStatusError) as err:
        live.sdk.audio.transcriptions.create(file=upload(b"\0" * (MAX_BODY + 10)), model="whisper-1")
    assert err.value.status_code == 413
    assert err.value.body["code"] == "request_too_large" and "MAX_BODY_BYTES" in err.value.body["message"]


@pytest.mark.subprocess
def test_metrics_count_the_v1_routes_and_the_key_never_shows(live):
    m = parse_metrics(live.server.get("/metrics", headers=auth()).text)
    assert m['asr_http_requests_total{method="POST",path="/v1/audio/transcriptions",code="200"}'] >= 5
    assert m['asr_http_requests_total{method="POST",path="/v1/audio/translations",code="200"}'] >= 1
    assert m['asr_http_requests_total{method="GET",path="/v1/models",code="200"}'] >= 1
    assert m['asr_http_requests_total{method="GET",path="/v1/models/{model}",code="404"}'] >= 1
    assert m['asr_http_requests_total{method="POST",path="/v1/audio/transcriptions",code="401"}'] >= 1
    assert m["asr_queue_limit"] == 8 and m["asr_requests_rejected_queue_full_total"] == 0
    log = live.server.log()
    for secret in (KEY, FAKE_TOKEN, "sk-wrong-key"):
        assert secret not in log
        assert all(secret not in text for text in SEEN_RESPONSES)
    assert '"path": "/v1/audio/transcriptions", "status": 200' in log


# --------------------------------------------------------------------------- in-process, fake handlers


@contextmanager
def inprocess(factory, api_key=None, **options):
    """The app on a thread of this process (no API_KEY unless given), once its models are up."""
    with inprocess_server(factory, api_key=api_key, **options) as (url, app):
        wait_until(lambda: HTTP.get(url + "/health").status_code == 200)
        yield url, app


def metrics(url: str, key=None) -> dict:
    return parse_metrics(HTTP.get(url + "/metrics", headers=auth(key) if key else {}).text)


def two_speaker_result():
    from speaker_asr.result import Result
    from speaker_asr.types import Segment, Word

    segments = [Segment(" Hello there.", 0.0, 1.2, "SPEAKER_00",
                        [Word(" Hello", 0.0, 0.5, "SPEAKER_00"), Word(" there.", 0.5, 1.2, "SPEAKER_00")]),
                Segment(" Yes.", 1.2, 1.6, "SPEAKER_01", [Word(" Yes.", 1.2, 1.6, "SPEAKER_01")])]
    return Result(" Hello there. Yes.", segments, "en", 2.0, "word",
                  diarized=True, with_words=True)


class FakeHandler:
    """``result()`` like EndpointHandler's: the parameters validated for real, a fixed two-speaker
    Result (words and speakers), ``on_start`` called, optionally blocked or failing."""

    def __init__(self, block: threading.Event = None, fail_before=None, fail_after=None, delay=0.0):
        self.block, self.fail_before, self.fail_after, self.delay = block, fail_before, fail_after, delay
        self.calls = []
        self.lock = threading.Lock()

    def _run(self, data, on_start=None):
        from speaker_asr.config import InferenceConfig, ModelCapabilities

        with self.lock:
            self.calls.append(data.get("parameters"))
        config = InferenceConfig.from_request(data.get("parameters"), ModelCapabilities())
        if self.fail_before is not None:
            raise self.fail_before
        if on_start is not None:
            on_start()
        if self.block is not None:
            self.block.wait(30)
        time.sleep(self.delay)
        if self.fail_after is not None:
            raise self.fail_after
        return config, two_speaker_result()

    def result(self, data, on_start=None):
        return self._run(data, on_start)

    def __call__(self, data):
        config, result = self._run(data)
        return result.to_json()


def test_both_speakers_of_a_two_speaker_result_through_the_sdk(clip_bytes):
    with inprocess(FakeHandler) as (url, _):
        sdk = client(url)
        out = sdk.audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"), model="m",
                                              response_format="diarized_json")
        assert [(s.speaker, s.text) for s in out.segments] == [("SPEAKER_00", "Hello there."),
                                                                ("SPEAKER_01", "Yes.")]
        named = sdk.audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"), model="m",
                                                response_format="diarized_json",
                                                extra_body={"speaker_names": ["Ann", "Ben"]})
        assert [s.speaker for s in named.segments] == ["Ann", "Ben"]
        verbose = sdk.audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"), model="m",
                                                  response_format="verbose_json",
                                                  timestamp_granularities=["word"])
        assert [(w.word, w.speaker) for w in verbose.words] == [
            ("Hello", "SPEAKER_00"), ("there.", "SPEAKER_00"), ("Yes.", "SPEAKER_01")]
        assert sdk.models.list().data == []  # a handler without settings names no models


@pytest.fixture(scope="module")
def clip_bytes() -> bytes:
    return encode(tone(1.0))


def test_a_full_queue_answers_503_with_retry_after(clip_bytes):
    release = threading.Event()
    handler = FakeHandler(block=release)
    with inprocess(lambda: handler, max_queue=1) as (url, app):
        results = {}

        def post(name, path="/"):
            results[name] = session().post(url + path, data=clip_bytes,
                                           headers={"Content-Type": "audio/wav"}, timeout=60)

        running = threading.Thread(target=post, args=("running",))
        running.start()
        wait_until(lambda: len(handler.calls) == 1)
        queued = threading.Thread(target=post, args=("queued",))
        queued.start()
        wait_until(lambda: metrics(url)["asr_queue_depth"] == 1)
        # no place left: refused before the body is read, in each route's own shape
        r = record(session().post(url + "/predict", data=clip_bytes,
                                  headers={"Content-Type": "audio/wav"}, timeout=30))
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        assert "MAX_QUEUE=1" in r.json()["error"]
        with pytest.raises(openai.InternalServerError) as err:
            client(url).audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"), model="m")
        assert err.value.status_code == 503 and err.value.body["code"] == "queue_full"
        assert int(err.value.response.headers["retry-after"]) >= 1
        # a big upload reads its 503 too (answered before its body is read)
        r = session().post(url, data=encode(tone(20.0)), headers={"Content-Type": "audio/wav"}, timeout=30)
        assert r.status_code == 503
        m = metrics(url)
        assert m["asr_requests_rejected_queue_full_total"] == 3 and m["asr_queue_limit"] == 1
        release.set()
        running.join(30)
        queued.join(30)
        assert results["running"].status_code == 200 and results["queued"].status_code == 200
        assert len(handler.calls) == 2
        # room again
        assert session().post(url, data=clip_bytes, headers={"Content-Type": "audio/wav"},
                              timeout=30).status_code == 200
        assert app.state.runner.admitted == 0 and app.state.runner.waiting == 0


def _send_and_vanish(port: int, path: str, body: bytes, content_type: str) -> None:
    """Send a whole request, then close the connection without reading the answer."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("POST", path)
    conn.putheader("Content-Type", content_type)
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    conn.send(body)
    conn.close()


def _multipart(body: bytes) -> tuple[bytes, str]:
    boundary = "b0undary"
    data = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode() + body + f"\r\n--{boundary}--\r\n".encode()
    return data, f"multipart/form-data; boundary={boundary}"


def test_a_client_that_disconnects_while_queued_is_dropped_before_the_model(clip_bytes):
    release = threading.Event()
    handler = FakeHandler(block=release)
    with inprocess(lambda: handler) as (url, app):
        port = int(url.rsplit(":", 1)[1])
        runner = app.state.runner
        result = {}
        first = threading.Thread(target=lambda: result.update(r=session().post(
            url, data=clip_bytes, headers={"Content-Type": "audio/wav"}, timeout=60)))
        first.start()
        wait_until(lambda: len(handler.calls) == 1)
        _send_and_vanish(port, "/", clip_bytes, "audio/wav")
        body, kind = _multipart(clip_bytes)
        _send_and_vanish(port, "/v1/audio/transcriptions", body, kind)
        m = wait_until(lambda: (lambda m: m if m["asr_requests_dropped_disconnected_total"] == 2 else None)(
            metrics(url)))
        # dropped at once, not when the worker gets to them: out of the queue, their audio released
        assert m["asr_queue_depth"] == 0 and runner.admitted == 0
        release.set()
        first.join(30)
        assert result["r"].status_code == 200
        time.sleep(0.3)
        assert len(handler.calls) == 1  # the two that left never reached the model
        m = metrics(url)
        assert m["asr_requests_dropped_disconnected_total"] == 2
        assert m['asr_http_requests_total{method="POST",path="/",code="499"}'] == 1
        assert m['asr_http_requests_total{method="POST",path="/v1/audio/transcriptions",code="499"}'] == 1


def test_a_dropped_job_releases_its_data_at_once():
    """The runner itself: the job of a client that went away lets go of its data while it still
    sits in the worker's queue behind a running job."""
    import asyncio

    from speaker_asr.serving.runner import ClientGone, DisconnectWatch, ModelRunner

    release = threading.Event()

    class Audio:  # bytes cannot be weakly referenced; this can
        pass

    runner = ModelRunner(lambda: (lambda data: release.wait(10)))
    runner.start()
    wait_until(lambda: runner.ready)

    async def scenario():
        disconnected = asyncio.Event()

        async def receive():
            await disconnected.wait()
            return {"type": "http.disconnect"}

        busy = runner.submit({"inputs": Audio()})
        audio = Audio()
        ref = weakref.ref(audio)
        job = runner.submit({"inputs": audio})
        del audio
        watch = DisconnectWatch(receive)
        waiter = asyncio.ensure_future(runner.wait(job, watch))
        await asyncio.sleep(0.05)
        assert not waiter.done() and runner.counts() == (1, 1)
        disconnected.set()
        with pytest.raises(ClientGone):
            await waiter
        gc.collect()
        assert ref() is None and job.dropped and runner.counts() == (0, 1)
        assert runner.dropped_disconnected == 1
        release.set()
        await runner.wait(busy)

    asyncio.run(scenario())
    runner.stop()


def test_stream_errors_before_the_start_have_a_status_after_it_an_error_event(clip_bytes):
    from speaker_asr.errors import RequestError

    with inprocess(lambda: FakeHandler(fail_before=RequestError("the audio could not be decoded",
                                                                 param="inputs"))) as (url, _):
        with pytest.raises(openai.BadRequestError) as err:
            list(client(url).audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"),
                                                         model="m", stream=True))
        assert err.value.body["param"] == "file"
    with inprocess(lambda: FakeHandler(fail_after=RuntimeError(f"CUDA out of memory {FAKE_TOKEN}"),
                                       delay=0.3), keepalive_s=0.05) as (url, _):
        response = session().post(url + "/v1/audio/transcriptions", files={"file": ("a.wav", clip_bytes)},
                                  data={"stream": "true"}, timeout=30, stream=True)
        assert response.status_code == 200
        raw_text = response.content.decode()
        assert raw_text.count(": keep-alive\n\n") >= 2  # comments while the model runs
        assert "CUDA" not in raw_text and FAKE_TOKEN not in raw_text
        with pytest.raises(openai.APIError) as err:
            list(client(url).audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"),
                                                         model="m", stream=True))
        assert err.value.body["type"] == "server_error"
        assert err.value.body["message"].startswith("internal error (request id ")


def test_keep_alive_comments_do_not_disturb_the_sdk(clip_bytes):
    with inprocess(lambda: FakeHandler(delay=0.3), keepalive_s=0.05) as (url, _):
        events = list(client(url).audio.transcriptions.create(
            file=("a.wav", clip_bytes, "audio/wav"), model="m", stream=True))
        assert [e.type for e in events] == ["transcript.text.delta", "transcript.text.segment",
                                            "transcript.text.delta", "transcript.text.segment",
                                            "transcript.text.done"]
        assert events[1].speaker == "SPEAKER_00" and events[3].speaker == "SPEAKER_01"
        assert events[-1].text == "Hello there. Yes."


def test_api_key_guards_every_route_but_health_and_is_never_echoed(clip_bytes):
    with inprocess(FakeHandler, api_key=KEY) as (url, _):
        assert HTTP.get(url + "/health").status_code == 200
        for path in ("/", "/metrics", "/v1/models"):
            r = HTTP.get(url + path, headers=auth("x" * 20))
            assert r.status_code == 401 and KEY not in r.text
        assert HTTP.get(url + "/", headers=auth()).json() == {"status": "ok"}
        r = HTTP.post(url + "/predict", data=clip_bytes, headers={"Content-Type": "audio/wav", **auth()})
        assert r.status_code == 200 and r.json()["speakers"]
        assert HTTP.get(url + "/metrics", headers={"Authorization": f"bearer  {KEY} "}).status_code == 200
        m = metrics(url, KEY)
        assert m['asr_http_requests_total{method="GET",path="/metrics",code="401"}'] == 1


def test_server_settings(monkeypatch):
    from speaker_asr.serving import app as server
    from speaker_asr.serving.logging_setup import ConfigError

    monkeypatch.delenv("API_KEY", raising=False)
    assert server.server_settings().key() is None
    monkeypatch.setenv("API_KEY", "   ")
    assert server.server_settings().key() is None
    monkeypatch.setenv("API_KEY", f" {KEY} ")
    settings = server.server_settings()
    assert settings.key() == KEY and KEY not in repr(settings) and KEY not in str(settings.model_dump())
    for bad, fragment in (("short-key", "at least 16"), ("with a space inside it!", "printable ASCII")):
        monkeypatch.setenv("API_KEY", bad)
        with pytest.raises(ConfigError, match=fragment) as err:
            server.server_settings()
        assert bad not in str(err.value)
    monkeypatch.delenv("API_KEY")
    monkeypatch.setenv("MAX_QUEUE", "-1")
    with pytest.raises(ConfigError, match=r"MAX_QUEUE='-1' is not valid: use a whole number >= 0"):
        server.server_settings()
    monkeypatch.setenv("MAX_QUEUE", "0")
    assert server.server_settings().max_queue == 0
    for name, bad, fragment in (("PORT", "abc", "PORT='abc' is not valid: use a whole number >= 0 and <= 65535"),
                                ("PORT", "70000", "<= 65535"),
                                ("MAX_BODY_BYTES", "0", "MAX_BODY_BYTES='0' is not valid"),
                                ("LOG_LEVEL", "loud", "use one of critical, error, warning, info, debug")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            server.server_settings()
        monkeypatch.delenv(name)
    monkeypatch.setenv("MAX_BODY_BYTES", "1_000_000")
    monkeypatch.setenv("LOG_LEVEL", " DEBUG ")
    settings = server.server_settings(port=9000)  # --port wins over PORT
    assert (settings.max_body_bytes, settings.log_level, settings.port) == (1_000_000, "debug", 9000)


def test_a_handler_that_cannot_give_a_result_answers_501_and_a_wrong_body_415(clip_bytes):
    with inprocess(lambda: (lambda data: {"text": "", "duration": 1.0})) as (url, _):
        with pytest.raises(openai.APIStatusError) as err:
            client(url).audio.transcriptions.create(file=("a.wav", clip_bytes, "audio/wav"), model="m")
        assert err.value.status_code == 501 and err.value.body["code"] == "not_implemented"
        r = HTTP.post(url + "/v1/audio/translations", data=clip_bytes, headers={"Content-Type": "audio/wav"})
        assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]["message"]
        r = HTTP.get(url + "/v1/nothing")
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
        r = HTTP.get(url + "/v1/audio/transcriptions")
        assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"


def test_decodes_are_counted_in_the_metrics_on_both_routes(clip_bytes):
    """Each answered request counts in asr_decodes_total by its result's ``assisted``: POST / (any
    format: every one carries it) and /v1 (json, text, a stream); a silent one (no decision) not."""
    from dataclasses import replace

    from speaker_asr.types import AssistDecision

    class Assisted(FakeHandler):
        def _run(self, data, on_start=None):
            config, result = super()._run(data, on_start)
            if (data.get("parameters") or {}).get("vad_filter") is False:  # stands for silence here
                return config, result
            return config, replace(result, assisted=AssistDecision(True, "auto: assisted measured faster"))

    with inprocess(Assisted) as (url, _):
        def post(query=""):
            r = session().post(url + "/" + query, data=clip_bytes, headers={"Content-Type": "audio/wav"},
                               timeout=30)
            assert r.status_code == 200, r.text
            return r.json()

        assert post()["assisted"] == {"used": True, "reason": "auto: assisted measured faster"}
        assert post("?response_format=srt")["assisted"]["used"] is True
        assert "assisted" not in post("?vad_filter=false")
        sdk = client(url)
        upload = ("a.wav", clip_bytes, "audio/wav")
        verbose = sdk.audio.transcriptions.create(file=upload, model="m", response_format="verbose_json")
        assert verbose.model_extra["assisted"] == {"used": True, "reason": "auto: assisted measured faster"}
        assert sdk.audio.transcriptions.create(file=upload, model="m", response_format="text")
        assert list(sdk.audio.transcriptions.create(file=upload, model="m", stream=True))
        m = metrics(url)
        assert m['asr_decodes_total{assisted="true",reason="auto: assisted measured faster"}'] == 5
        assert sum(v for k, v in m.items() if k.startswith("asr_decodes_total")) == 5
