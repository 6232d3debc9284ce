"""speaker_asr/remote.py against real local HTTP servers (http.server in a thread) that answer what
each test scripts: 503 with Retry-After and then 200, 503 for ever (the recording gives up and
says so), 429 without Retry-After (backoff), 400 and 413 (the file's own failure, not retried),
401 (the run stops), connections refused or closed, a slow answer (the request timeout), and the
bodies sent (base64 JSON or raw audio with the parameters in the query string, the bearer token).
The waits are real, kept tiny by the retry policy's parameters, and checked by what the engine
asked for (:class:`Waits`, the stop event it waits on), not by the clock: a slow machine makes the
gaps longer, never the delays chosen. The token never appears in a message, a manifest or an
output, even when a server echoes it back."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from helpers import FAKE_TOKEN, GOLDEN, ROOT, free_port

from speaker_asr.batch import BatchRun, FileError, RunError, Unavailable, plan
from speaker_asr.remote import RemoteEngine, RetryPolicy, check_url, display_url, parse_retry_after, query_items

GOLDEN_TEXT = (GOLDEN / "response.json").read_text(encoding="utf-8")
FAST = RetryPolicy(initial_s=0.02, max_delay_s=0.1, max_wait_s=1.0)


class Scripted:
    """An HTTP server on 127.0.0.1 answering POSTs from a script: each entry is (status, headers,
    body) or a callable(request) -> that, or "close" (drop the connection unanswered); the last
    entry repeats. Every request is recorded (time, path, query, headers, body)."""

    def __init__(self, script, delay: float = 0.0):
        self.script = list(script)
        self.delay = delay
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                parts = urlsplit(self.path)
                request = {"t": time.monotonic(), "path": parts.path, "query": parse_qsl(parts.query),
                           "headers": dict(self.headers), "body": body}
                with outer.lock:
                    outer.requests.append(request)
                    entry = outer.script[min(len(outer.requests), len(outer.script)) - 1]
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                try:
                    time.sleep(outer.delay)
                    if callable(entry):
                        entry = entry(request)
                    if entry == "close":
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    status, headers, text = entry
                    data = text.encode("utf-8")
                    self.send_response(status)
                    for key, value in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with outer.lock:
                        outer.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def gaps(self) -> list[float]:
        return [b["t"] - a["t"] for a, b in zip(self.requests, self.requests[1:])]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(script, **kw) -> Scripted:
        server = Scripted(script, **kw)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def OK(request) -> tuple:
    """200 with the golden response in the response_format asked for, as the endpoint renders it."""
    from speaker_asr.formats import render_response

    try:
        parameters = json.loads(request["body"]).get("parameters") or {}
    except ValueError:  # a raw body: the parameters are in the query string
        parameters = dict(request["query"])
    fmt = parameters.get("response_format", "json")
    if fmt == "json" and not parameters.get("speaker_names"):
        return 200, {}, GOLDEN_TEXT
    rendered = render_response(json.loads(GOLDEN_TEXT), fmt, speaker_names=parameters.get("speaker_names"))
    return 200, {}, json.dumps(rendered)


def unavailable(retry_after=None, message="the model is loading"):
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return (503, headers, json.dumps({"error": message}))


def engine(url, **kw) -> RemoteEngine:
    kw.setdefault("policy", FAST)
    kw.setdefault("token", FAKE_TOKEN)
    kw.setdefault("token_source", "HF_TOKEN")
    return RemoteEngine(url, **kw)


class Waits(threading.Event):
    """The stop event handed to the engine, recording each wait it asks of it (its retry delays)
    as (seconds asked, whether the wait ended because the stop was set)."""

    def __init__(self):
        super().__init__()
        self.waits: list[tuple[float, bool]] = []

    def wait(self, timeout=None):
        ended = super().wait(timeout)
        self.waits.append((timeout, ended))
        return ended

    @property
    def delays(self) -> list[float]:
        return [delay for delay, _ in self.waits]


def respond(eng: RemoteEngine, audio=b"RIFF-audio", parameters=None, source=Path("talk.wav"), stop=None):
    return eng.respond(audio, parameters or {"language": "en"}, source, stop if stop is not None else Waits())


# --------------------------------------------------------------------------- retries


def test_503_with_retry_after_then_200(serve):
    server = serve([unavailable("0.3"), unavailable("0.3"), OK])
    stop = Waits()
    reply = respond(engine(server.url), stop=stop)
    assert reply.response == json.loads(GOLDEN_TEXT)
    assert reply.attempts == 3 and len(server.requests) == 3
    # Retry-After honoured, plus at most 10 % jitter
    assert len(stop.delays) == 2 and all(0.3 <= d <= 0.33 for d in stop.delays), stop.delays
    assert all(gap >= 0.3 for gap in server.gaps()), server.gaps()  # ... and really waited


def test_an_http_date_retry_after_is_honoured_too(serve):
    from email.utils import formatdate

    server = serve([unavailable(formatdate(time.time() + 2, usegmt=True)), OK])
    stop = Waits()
    reply = respond(engine(server.url, policy=RetryPolicy(initial_s=0.02, max_delay_s=0.1, max_wait_s=5)), stop=stop)
    assert reply.attempts == 2
    # whole seconds in an HTTP date: 1 to 2 s from now, plus up to 10 %
    assert len(stop.delays) == 1 and 1.0 <= stop.delays[0] <= 2.2, stop.delays
    assert server.gaps()[0] >= stop.delays[0]


def test_always_503_gives_up_within_the_budget_and_says_so(serve):
    server = serve([unavailable()])
    stop = Waits()
    with pytest.raises(Unavailable) as exc:
        respond(engine(server.url), stop=stop)
    message = str(exc.value)
    assert message.startswith(f"gave up after {len(server.requests)} attempts over ")
    assert "the limit is 1 s of retrying, --max-wait" in message
    assert "last answer: 503 Service Unavailable: the model is loading (request id batch-" in message
    assert len(server.requests) >= 4 and len(stop.delays) == len(server.requests) - 1  # backed off, but retried
    assert sum(stop.delays) <= FAST.max_wait_s  # within the budget
    # exponential, equal jitter: the n-th wait is in [cap/2, cap], cap = initial * 2**(n-1) up to max_delay
    for n, delay in enumerate(stop.delays, 1):
        cap = min(FAST.max_delay_s, FAST.initial_s * 2 ** (n - 1))
        assert cap / 2 <= delay <= cap, (n, stop.delays)
    assert not any(ended for _, ended in stop.waits)


def test_a_retry_after_beyond_the_budget_gives_up_at_once(serve):
    server = serve([unavailable("120")])
    with pytest.raises(Unavailable, match=r"gave up after 1 attempt over 0\.0 s .*it asked to wait 120 s more"):
        respond(engine(server.url))
    assert len(server.requests) == 1


def test_429_502_504_are_retried_with_backoff(serve):
    server = serve([(429, {}, '{"error": "slow down"}'), (502, {}, "<html>bad gateway</html>"),
                    (504, {}, ""), OK])
    stop = Waits()
    reply = respond(engine(server.url), stop=stop)
    assert reply.attempts == 4 and len(stop.delays) == 3
    assert all(delay >= FAST.initial_s / 2 for delay in stop.delays), stop.delays


def test_connection_refused_is_retried_then_given_up(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(Unavailable) as exc:
        respond(engine(url))
    assert "connection error (connection refused) on " + url + "/" in str(exc.value)
    assert exc.value.attempts >= 3


def test_a_connection_closed_without_an_answer_is_retried(serve):
    server = serve(["close", OK])
    assert respond(engine(server.url)).attempts == 2


# --------------------------------------------------------------------------- not retried


def test_400_is_the_files_own_failure_and_not_retried(serve):
    server = serve([(400, {}, json.dumps({"error": "could not decode the audio (...)"}))])
    with pytest.raises(FileError) as exc:
        respond(engine(server.url))
    assert not isinstance(exc.value, Unavailable) and exc.value.refused
    assert str(exc.value).startswith("400 Bad Request: could not decode the audio (...) (request id batch-")
    assert len(server.requests) == 1


def test_413_reports_the_servers_limit(serve):
    message = ("the request body (1.2 MiB) is larger than this server's limit of 1000000 bytes "
               "(976.6 KiB, MAX_BODY_BYTES); send a shorter or compressed recording")
    server = serve([(413, {}, json.dumps({"error": message}))])
    with pytest.raises(FileError, match=r"^413 Request Entity Too Large: the request body \(1\.2 MiB\) is larger"):
        respond(engine(server.url))
    assert len(server.requests) == 1


def test_500_fails_the_file_without_retrying(serve):
    server = serve([(500, {}, json.dumps({"error": "internal error (request id 42)"}))])
    with pytest.raises(FileError, match=r"500 Internal Server Error: internal error \(request id 42\)") as exc:
        respond(engine(server.url))
    assert not exc.value.refused and len(server.requests) == 1


@pytest.mark.parametrize("status, fragment", [(401, "refused the request: 401 Unauthorized"),
                                              (403, "refused the request: 403 Forbidden"),
                                              (404, "is not a transcription endpoint: 404 Not Found")])
def test_the_token_or_the_url_refused_ends_the_run(serve, status, fragment):
    server = serve([(status, {}, json.dumps({"error": f"bad credentials: Bearer {FAKE_TOKEN}"}))])
    with pytest.raises(RunError) as exc:
        respond(engine(server.url))
    message = str(exc.value)
    assert fragment in message
    assert FAKE_TOKEN not in message and "<redacted>" in message  # the server echoed it; we do not
    if status != 404:
        assert message.endswith("the token from HF_TOKEN")


def test_no_token_says_how_to_give_one(serve):
    server = serve([(401, {}, '{"error": "missing bearer token"}')])
    with pytest.raises(RunError, match=r"no token was sent \(set HF_TOKEN or API_KEY, or pass --token\)"):
        respond(engine(server.url, token=None))
    assert "Authorization" not in server.requests[0]["headers"]


def test_a_slow_answer_times_out_once_and_is_not_resent(serve):
    server = serve([OK], delay=1.0)
    stop = Waits()
    with pytest.raises(FileError, match=r"no answer within 0\.3 s of sending \(--request-timeout\)") as exc:
        respond(engine(server.url, timeout_s=0.3), stop=stop)
    assert not isinstance(exc.value, Unavailable)
    # respond has returned: nothing more can be sent; it neither waited to retry nor resent
    assert len(server.requests) == 1 and stop.waits == []


def test_a_200_that_is_not_json_fails_the_file(serve):
    server = serve([(200, {"Content-Type": "text/html"}, "<html>a login page</html>")])
    with pytest.raises(FileError, match=r"200 but the body is not JSON: '<html>a login page</html>'"):
        respond(engine(server.url))


def test_stopping_puts_down_a_recording_waiting_to_retry(serve):
    """The stop is set once the server has answered 503 (Retry-After: 30); the engine's wait for
    the retry ends because of it, not when the 30 s are up (a run that ignored the stop would
    give up after 60 s of retrying: Unavailable, not Interrupted)."""
    from speaker_asr.batch import Interrupted

    answered = threading.Event()

    def first(request):
        answered.set()
        return unavailable("30")

    server = serve([first])
    stop = Waits()
    threading.Thread(target=lambda: answered.wait(60) and stop.set(), daemon=True).start()
    with pytest.raises(Interrupted):
        respond(engine(server.url, policy=RetryPolicy(initial_s=1, max_wait_s=60)), stop=stop)
    assert len(stop.waits) == 1 and stop.delays[0] >= 30 and stop.waits[0][1], stop.waits
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- what is sent


def test_json_body_with_the_bearer_token(serve):
    server = serve([OK])
    respond(engine(server.url + "/predict"), audio=b"\x00\x01audio", parameters={"num_speakers": 2, "language": "en"})
    request = server.requests[0]
    assert request["path"] == "/predict" and request["query"] == []
    assert request["headers"]["Authorization"] == f"Bearer {FAKE_TOKEN}"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["X-Request-Id"].startswith("batch-")
    body = json.loads(request["body"])
    assert base64.b64decode(body["inputs"]) == b"\x00\x01audio"
    assert body["parameters"] == {"num_speakers": 2, "language": "en"}


def test_raw_body_with_query_parameters(serve):
    server = serve([OK])
    eng = engine(server.url, body="raw")
    assert eng.render_locally  # the formats are written here from the plain json answer
    respond(eng, audio=b"fLaC...", parameters={"num_speakers": 2, "assisted": True, "speaker_match_threshold": 0.7,
                                               "known_speaker_names": ["Ann"], "prompt": "1984"},
            source=Path("call.FLAC"))
    request = server.requests[0]
    assert request["body"] == b"fLaC..." and request["headers"]["Content-Type"] == "audio/flac"
    assert request["query"] == [("num_speakers", "2"), ("assisted", "true"), ("speaker_match_threshold", "0.7"),
                                ("known_speaker_names", "Ann"), ("prompt", "1984")]  # read back as text


def test_query_items_read_back_as_given_or_are_refused():
    from speaker_asr.text_parameters import parameters_from_text

    params = {"num_speakers": 2, "temperature": [0.0, 0.2], "vad_filter": False, "language": "en",
              "speaker_names": ["Ann"]}
    assert parameters_from_text(query_items(params)) == params
    # each value is read by its parameter's type: text that looks like a number stays text
    for given in ({"prompt": "1984"}, {"prompt": "true"}, {"language": "2"}, {"temperature": 0.2}):
        assert query_items(given) == [(k, str(v).lower()) for k, v in given.items()]
        assert parameters_from_text(query_items(given)) == given
    for bad, fragment in (({"temperature": [0.2]}, "'temperature' would not read back"),
                          ({"num_speakers": "two"}, "invalid value for 'num_speakers'"),
                          ({"speakers": 2}, "unknown parameter 'speakers'"),
                          ({"known_speaker_references": ["UklGRg=="]}, "clips cannot go in a query string"),
                          ({"x": {"a": 1}}, "cannot go in a query string"),
                          ({"prompt": "word " * 2000}, "longer than 8000 characters")):
        with pytest.raises(ValueError, match=fragment):
            query_items(bad)


def test_urls():
    assert check_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/"
    assert check_url("https://x.endpoints.huggingface.cloud/predict") == "https://x.endpoints.huggingface.cloud/predict"
    for bad in ("127.0.0.1:8080", "ftp://host/", "http://", "http://host:99999/"):
        with pytest.raises(ValueError, match="--url"):
            check_url(bad)
    assert display_url(f"https://user:{FAKE_TOKEN}@host:8443/p?api_key={FAKE_TOKEN}") == "https://host:8443/p"
    with pytest.raises(ValueError) as exc:
        check_url(f"ftp://user:{FAKE_TOKEN}@host/")
    assert FAKE_TOKEN not in str(exc.value)


# --------------------------------------------------------------------------- the policy alone


def test_backoff_is_exponential_capped_and_jittered():
    import random

    policy = RetryPolicy(initial_s=1.0, max_delay_s=8.0, max_wait_s=100)
    rng = random.Random(0)
    for retry, cap in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (12, 8.0)):
        delays = [policy.delay(retry, None, rng) for _ in range(200)]
        assert all(cap / 2 <= d <= cap for d in delays), (retry, min(delays), max(delays))
        assert max(delays) - min(delays) > cap / 4  # jittered, not in step
    assert all(7.0 <= policy.delay(1, 7.0, rng) <= 7.7 for _ in range(100))  # Retry-After + up to 10 %
    assert policy.delay(1, 0.0, rng) >= 1.0  # Retry-After: 0 still waits the initial delay
    assert policy.retryable(503) and policy.retryable(429) and not policy.retryable(400)
    with pytest.raises(ValueError, match="max_wait_s must be a number >= 0"):
        RetryPolicy(max_wait_s=-1)


def test_parse_retry_after():
    assert parse_retry_after("10") == 10.0
    assert parse_retry_after(" 2.5 ") == 2.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 - 30) == 30.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480 + 30) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("-3") is None


# --------------------------------------------------------------------------- a run


def test_concurrency_is_bounded_against_a_server(serve, tmp_path):
    """The server answers each request once three are in flight together (a barrier): fewer at
    a time break it (503s), more show in most_in_flight."""
    together = threading.Barrier(3, timeout=60)

    def in_threes(request):
        together.wait()
        return OK(request)

    server = serve([in_threes])
    root = tmp_path / "in"
    root.mkdir()
    for i in range(9):
        (root / f"f{i}.wav").write_bytes(b"RIFF" + bytes([i]))
    results = list(BatchRun(plan([root], tmp_path / "out", ["srt"]), engine(server.url, concurrency=3)))
    assert [r.status for r in results] == ["done"] * 9, [r.error for r in results]
    assert server.most_in_flight == 3 and len(server.requests) == 9
    assert {r["headers"]["X-Request-Id"] for r in server.requests}.__len__() == 9


def run_cli(args, env, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speaker_asr", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.subprocess
def test_the_command_line_against_an_endpoint_that_stays_unavailable(serve, tmp_path):
    """Every request answers 503 (a replica that never comes up): each recording gives up after
    --max-wait, the run stops once every one in flight has, and says so; exit 1; the token is
    nowhere in what the command wrote."""
    server = serve([unavailable("0.2", message=f"scaling up (token {FAKE_TOKEN})")])
    root = tmp_path / "in"
    root.mkdir()
    for name in ("a.wav", "b.wav", "c.wav", "d.wav"):
        (root / name).write_bytes(b"RIFF....WAVE")
    out, manifest = tmp_path / "out", tmp_path / "run.jsonl"
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("HF_TOKEN", "API_KEY")}
    env.update(HF_TOKEN=FAKE_TOKEN, PYTHONUNBUFFERED="1")
    proc = run_cli(["transcribe", root, "-d", out, "--url", server.url, "--max-wait", "1", "--concurrency", "2",
                    "--manifest", manifest, "-f", "json,srt"], env)
    assert proc.returncode == 1, proc.stderr
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {FAKE_TOKEN}"
    lines = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert [line["status"] for line in lines] == ["failed", "failed", "not_attempted", "not_attempted"]
    assert all(line["error"].startswith("gave up after ") for line in lines[:2])
    err = proc.stderr
    assert "4 recordings: done 0, skipped 0 (already done), failed 2, not attempted 2" in err
    assert "stopped: the service stayed unavailable for 2 recordings in a row" in err
    assert "503 Service Unavailable: scaling up (token <redacted>)" in err
    assert not out.exists() or not any(out.rglob("*"))
    assert FAKE_TOKEN not in proc.stdout + err + manifest.read_text()


@pytest.mark.subprocess
def test_the_command_line_retries_then_writes(serve, tmp_path):
    server = serve([unavailable("0.2"), "close", OK])
    audio = tmp_path / "call.wav"
    audio.write_bytes(b"RIFF....WAVE")
    env = dict(__import__("os").environ, API_KEY=FAKE_TOKEN)
    env.pop("HF_TOKEN", None)
    proc = run_cli(["transcribe", audio, "--url", server.url, "-f", "txt", "--speaker-names", "Ann"], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Ann: Hello there, Tom & Jerry.")
    assert server.requests[-1]["headers"]["Authorization"] == f"Bearer {FAKE_TOKEN}"  # from API_KEY
    assert json.loads(server.requests[-1]["body"])["parameters"] == {"speaker_names": ["Ann"], "response_format": "txt"}
    assert FAKE_TOKEN not in proc.stdout + proc.stderr


@pytest.mark.subprocess
def test_a_second_ctrl_c_stops_at_once_with_requests_in_flight(serve, tmp_path):
    """The server holds every request until the test ends. The first Ctrl-C waits for the
    recordings in hand; the second ends the run at once: the process exits (130) while both
    requests are still unanswered, says what was done, and writes nothing."""
    import os
    import signal

    release, two_in = threading.Event(), threading.Event()

    def held(request):
        if len(server.requests) >= 2:
            two_in.set()
        release.wait(120)
        return OK(request)

    server = serve([held])
    root = tmp_path / "in"
    root.mkdir()
    for name in ("a.wav", "b.wav", "c.wav"):
        (root / name).write_bytes(b"RIFF....WAVE")
    out, manifest = tmp_path / "out", tmp_path / "run.jsonl"
    env = dict(os.environ, API_KEY=FAKE_TOKEN, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "speaker_asr", "transcribe", str(root), "-d", str(out),
                             "--url", server.url, "--concurrency", "2", "--manifest", str(manifest)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said, acknowledged = [], threading.Event()

    def read():
        for line in proc.stderr:
            said.append(line)
            if line.startswith("stopping after the recordings in hand"):
                acknowledged.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert two_in.wait(60), "the two requests never arrived"
        proc.send_signal(signal.SIGINT)
        assert acknowledged.wait(60), "".join(said)  # the first Ctrl-C, acknowledged
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        assert server.in_flight == 2  # it exited with both requests still unanswered
    finally:
        release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    err = "".join(said)
    assert proc.returncode == 130, err
    assert "3 recordings: done 0, skipped 0 (already done), failed 0, not attempted 3" in err
    assert "interrupted: what is done is written in full" in err and "Traceback" not in err
    assert manifest.read_text() == "" and not out.exists()
    assert FAKE_TOKEN not in err


@pytest.mark.subprocess
@pytest.mark.parametrize("args, fragment", [
    (["--token", "x"], "--token is for --url"),
    (["--concurrency", "3", "--max-wait", "5"], "--concurrency, --max-wait are for --url"),
    (["--url", "localhost:8080"], "is not an http:// or https:// URL"),
    (["--url", "http://127.0.0.1:9", "--body", "raw", "--param", "num_speakers=two"],
     "invalid value for 'num_speakers': 'two'"),
    (["--url", "http://127.0.0.1:9", "--concurrency", "0"], "must be 1 or more"),
    (["--url", "http://127.0.0.1:9", "--max-wait", "-1"], "must be a number of seconds above 0"),
])
def test_remote_options_are_checked_before_anything_is_sent(tmp_path, args, fragment):
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"RIFF....WAVE")
    proc = run_cli(["transcribe", audio, *args], dict(__import__("os").environ, DEVICE="nonsense"))
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr and "Traceback" not in proc.stderr


def test_which_token_is_sent(monkeypatch):
    """--token; else an Inference Endpoint gets HF_TOKEN first, any other server (ours) API_KEY
    first; the source is named for messages, with a hint when both are set."""
    from speaker_asr import cli

    def token(url, *extra):
        args = cli.build_parser().parse_args(["transcribe", "a.wav", "--url", url, *extra])
        return cli._token(args, url)

    endpoint, ours = "https://abc.us-east-1.aws.endpoints.huggingface.cloud", "http://127.0.0.1:8080"
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("API_KEY", raising=False)
    assert token(ours) == (None, "none")
    monkeypatch.setenv("HF_TOKEN", "hf_user_token_0123456789")
    assert token(ours) == ("hf_user_token_0123456789", "HF_TOKEN")
    monkeypatch.setenv("API_KEY", "server-key-123")
    assert token(ours) == ("server-key-123", "API_KEY (HF_TOKEN is set too: --token chooses)")
    assert token(endpoint) == ("hf_user_token_0123456789", "HF_TOKEN (API_KEY is set too: --token chooses)")
    assert token(endpoint, "--token", "given") == ("given", "--token")


def test_a_token_over_plain_http_to_another_machine_is_warned_about(tmp_path, serve):
    server = serve([OK])
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"RIFF....WAVE")
    env = dict(__import__("os").environ, API_KEY=FAKE_TOKEN)
    proc = run_cli(["transcribe", audio, "--url", server.url.replace("127.0.0.1", "localhost")], env)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr  # this machine: fine
    proc = run_cli(["transcribe", audio, "--url", "http://192.0.2.1:9/", "--max-wait", "0.5",
                    "--request-timeout", "1"], env, timeout=120)
    assert "warning: the token from API_KEY goes unencrypted (http://) to 192.0.2.1" in proc.stderr
    assert proc.returncode == 1 and FAKE_TOKEN not in proc.stderr
