"""The bounds of a live session against clients that stop taking part, and the server's stop
(speaker_asr/serving/live_limits.py, speaker_asr/serving/ws_protocol.py, app.py's
``uvicorn_server``): ``LIVE_IDLE_TIMEOUT_S``, ``LIVE_SEND_TIMEOUT_S``, ``SHUTDOWN_GRACE_S``.

:class:`SessionGuard` first with stand-ins (a socket that takes or refuses sends, a session whose
clock and pending items the test moves), then through ``python -m speaker_asr serve`` on the tiny
random models: a client that sends no audio, one that reads nothing, SIGTERM with sessions open,
and a request cut by the end of the shutdown's grace. Time bounds are generous: what is checked is
that each session ends, with which error event and close code, and that its place is given back."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import socket
import threading
import time

import pytest

from helpers import (ServerProcess, encode, free_port, parse_metrics, running_server, server_env, tone,
                     wait_until)

websockets_sync = pytest.importorskip("websockets.sync.client")

SILENCE = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(960)).decode()})
# each one is answered by an error event that echoes its 4 kB event_id: a client that reads
# nothing fills its connection's buffers in a second
NOT_AN_EVENT = json.dumps({"type": "response.create", "event_id": "x" * 4000})


# --------------------------------------------------------------------------- SessionGuard, stand-ins


class FakeSocket:
    """What SessionGuard uses of Starlette's WebSocket; ``stuck``: sends never complete (a client
    that reads nothing)."""

    def __init__(self, stuck: bool = False):
        self.stuck = stuck
        self.sent: list[dict] = []
        self.closed: list[tuple[int, str]] = []

    async def send_text(self, text: str) -> None:
        if self.stuck:
            await asyncio.Event().wait()
        self.sent.append(json.loads(text))

    async def close(self, code: int, reason: str = "") -> None:
        if self.stuck:
            await asyncio.Event().wait()
        self.closed.append((code, reason))


class FakeSession:
    clock = 0
    pending = 0
    ending = None

    def unfinished_items(self):
        return []


class Event:
    def __init__(self, text: str):
        self.text = text

    def to_text(self) -> str:
        return self.text


def guard(socket_, idle=0.5, send=0.5, stopping=None):
    from speaker_asr.serving.live_limits import LiveLimits, SessionGuard

    return SessionGuard(socket_, LiveLimits(idle, send), stopping or asyncio.Event())


async def forever() -> str:
    await asyncio.Event().wait()
    return "never"


def test_a_session_without_audio_ends_with_an_idle_error_and_a_normal_close():
    async def main():
        ws, session = FakeSocket(), FakeSession()
        started = time.monotonic()
        outcome = await guard(ws, idle=0.5).run(forever(), session)
        return outcome, time.monotonic() - started, ws

    outcome, took, ws = asyncio.run(main())
    assert outcome == "idle" and 0.4 < took < 10
    (event,) = ws.sent
    assert event["type"] == "error" and event["error"]["code"] == "session_idle_timeout"
    assert "LIVE_IDLE_TIMEOUT_S" in event["error"]["message"] and "input_audio_buffer.append" in event["error"]["message"]
    assert ws.closed == [(1000, "session_idle_timeout")]


def test_audio_and_items_in_hand_keep_a_session_from_being_idle():
    """A client that keeps appending, or one waiting for its items' transcripts (the server has
    them in hand: push-to-talk), is not idle; once neither holds, the idle clock runs."""

    async def main():
        ws, session = FakeSocket(), FakeSession()
        g = guard(ws, idle=0.6)
        task = asyncio.ensure_future(g.run(forever(), session))
        for _ in range(8):  # 1.6 s of audio arriving
            await asyncio.sleep(0.2)
            session.clock += 3200
        session.pending = 1  # then 1.6 s with an item in hand
        await asyncio.sleep(1.6)
        assert not task.done()
        session.pending = 0
        quiet = time.monotonic()
        outcome = await asyncio.wait_for(task, 10)
        return outcome, time.monotonic() - quiet

    outcome, idle_for = asyncio.run(main())
    assert outcome == "idle" and idle_for >= 0.5


def test_a_send_the_client_does_not_take_ends_the_session_as_not_reading():
    from speaker_asr.serving.live_limits import ClientNotReading

    async def main():
        ws, session = FakeSocket(stuck=True), FakeSession()
        g = guard(ws, idle=60, send=0.3)

        async def serving():
            await g.send(Event('{"type": "x"}'))  # the route's own send waits, then fails
            return "never"

        started = time.monotonic()
        outcome = await g.run(serving(), session)
        took = time.monotonic() - started
        with pytest.raises(ClientNotReading):  # nothing more goes out once the session is ending
            await g.send(Event('{"type": "y"}'))
        return outcome, took

    outcome, took = asyncio.run(main())
    # the send timed out (0.3 s), then the close was given its bounded wait (2 s) and dropped
    assert outcome == "client_not_reading" and took < 10


def test_a_send_timed_out_in_another_task_ends_the_session_too():
    """The session's item worker sends most events: its timeout ends the route's serving."""

    async def main():
        ws, session = FakeSocket(stuck=True), FakeSession()
        g = guard(ws, idle=60, send=0.3)

        async def worker():
            try:
                await g.send(Event('{"type": "x"}'))
            except Exception:
                pass  # the session's worker logs and goes on

        asyncio.ensure_future(worker())
        return await asyncio.wait_for(g.run(forever(), session), 10)

    assert asyncio.run(main()) == "client_not_reading"


def test_the_servers_stop_ends_every_session_with_a_shutdown_error_and_1012():
    async def main():
        stopping = asyncio.Event()
        sockets = [FakeSocket(), FakeSocket()]
        runs = [asyncio.ensure_future(guard(ws, idle=60, stopping=stopping).run(forever(), FakeSession()))
                for ws in sockets]
        await asyncio.sleep(0.1)
        stopping.set()
        return await asyncio.wait_for(asyncio.gather(*runs), 10), sockets

    outcomes, sockets = asyncio.run(main())
    assert outcomes == ["server_shutdown"] * 2
    for ws in sockets:
        assert [e["error"]["code"] for e in ws.sent] == ["server_shutting_down"]
        assert ws.sent[0]["error"]["type"] == "server_error"
        assert ws.closed == [(1012, "server_shutting_down")]


def test_a_session_that_ends_by_itself_keeps_its_outcome():
    async def main():
        ws = FakeSocket()

        async def serving():
            await asyncio.sleep(0.05)
            return "finished"

        return await guard(ws, idle=60).run(serving(), FakeSession()), ws

    outcome, ws = asyncio.run(main())
    assert outcome == "finished" and ws.sent == [] and ws.closed == []


def test_the_connection_is_read_ahead_of_a_session_that_holds_back_but_only_so_far():
    """While the route takes no message (the session's queue of items is full), ReadAhead goes on
    reading for it (what answers the client's pings) up to LIVE_READ_AHEAD_BYTES, then stops:
    the rest stays in the client's socket. Every message comes out, in order."""
    from speaker_asr.serving.live_limits import ReadAhead

    class Incoming:
        def __init__(self, count):
            self.left = [{"type": "websocket.receive", "text": f"{i:04d}" + "x" * 996} for i in range(count)]
            self.read = 0

        async def receive(self):
            if not self.left:
                await asyncio.Event().wait()
            self.read += 1
            return self.left.pop(0) if self.left else {"type": "websocket.disconnect", "code": 1000}

    async def main():
        incoming = Incoming(50)
        inbox = ReadAhead(incoming, max_bytes=10_000)
        await asyncio.sleep(0.1)  # the route holds back: nothing taken
        held_back = incoming.read, inbox.held
        texts = []
        for _ in range(50):
            texts.append((await inbox.get())["text"][:4])
        inbox.close()
        return held_back, texts

    (read, held), texts = asyncio.run(main())
    assert read == 10 and held == 10_000  # ten messages of 1000 characters read ahead, no more
    assert texts == [f"{i:04d}" for i in range(50)]


def test_with_no_read_ahead_every_message_still_comes_out_one_at_a_time():
    """LIVE_READ_AHEAD_BYTES=0: one message is read ahead of the route, no more, and each one
    the route takes lets the next be read."""
    from speaker_asr.serving.live_limits import ReadAhead

    class Incoming:
        def __init__(self, count):
            self.left = [{"type": "websocket.receive", "text": f"{i:04d}"} for i in range(count)]
            self.read = 0

        async def receive(self):
            if not self.left:
                await asyncio.Event().wait()
            self.read += 1
            return self.left.pop(0)

    async def main():
        incoming = Incoming(20)
        inbox = ReadAhead(incoming, max_bytes=0)
        await asyncio.sleep(0.1)
        held_back = incoming.read
        texts = [(await asyncio.wait_for(inbox.get(), 2))["text"] for _ in range(20)]
        inbox.close()
        return held_back, texts

    held_back, texts = asyncio.run(main())
    assert held_back == 1
    assert texts == [f"{i:04d}" for i in range(20)]


def test_a_disconnect_read_ahead_ends_the_session_wherever_the_route_waits():
    from speaker_asr.serving.live_limits import ReadAhead

    class Incoming:
        def __init__(self):
            self.left = [{"type": "websocket.receive", "text": "a"}, {"type": "websocket.disconnect", "code": 1001}]

        async def receive(self):
            if not self.left:
                await asyncio.Event().wait()
            return self.left.pop(0)

    async def main():
        g = guard(FakeSocket(), idle=30, send=30)
        inbox = ReadAhead(Incoming(), 1 << 20, on_disconnect=g.client_left)
        outcome = await asyncio.wait_for(g.run(forever(), FakeSession()), 5)  # the route never takes a message
        inbox.close()
        return outcome, g.websocket

    outcome, socket_ = asyncio.run(main())
    assert outcome == "client_closed" and socket_.sent == [] and socket_.closed == []


def test_the_bounds_are_settings_that_say_what_is_allowed(monkeypatch):
    from speaker_asr.settings import ServerSettings

    for var in ("LIVE_IDLE_TIMEOUT_S", "LIVE_SEND_TIMEOUT_S", "SHUTDOWN_GRACE_S", "LIVE_READ_AHEAD_BYTES"):
        monkeypatch.delenv(var, raising=False)
    s = ServerSettings.from_env()
    assert (s.live_idle_timeout_s, s.live_send_timeout_s, s.shutdown_grace_s) == (120.0, 10.0, 5.0)
    assert s.live_read_ahead_bytes == 4 * 1024 * 1024
    monkeypatch.setenv("LIVE_READ_AHEAD_BYTES", "1.5MB")
    with pytest.raises(ValueError, match=r"LIVE_READ_AHEAD_BYTES='1.5MB' is not valid: use a whole number >= 0"):
        ServerSettings.from_env()
    monkeypatch.delenv("LIVE_READ_AHEAD_BYTES")
    monkeypatch.setenv("LIVE_IDLE_TIMEOUT_S", "2.5")
    monkeypatch.setenv("SHUTDOWN_GRACE_S", "0")
    s = ServerSettings.from_env()
    assert (s.live_idle_timeout_s, s.shutdown_grace_s) == (2.5, 0.0)
    for var, value, allowed in (("LIVE_IDLE_TIMEOUT_S", "soon", "> 0 and <= 604800"),
                                ("LIVE_SEND_TIMEOUT_S", "0", "> 0 and <= 3600"),
                                ("SHUTDOWN_GRACE_S", "-1", ">= 0 and <= 3600")):
        monkeypatch.setenv(var, value)
        with pytest.raises(ValueError, match=f"{var}='{value}' is not valid: use a number of seconds {allowed}"):
            ServerSettings.from_env()
        monkeypatch.delenv(var)


# --------------------------------------------------------------------------- a real server


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


def metrics(server):
    return parse_metrics(server.get("/metrics").text)


def receive(ws, timeout: float = 60) -> dict:
    return json.loads(ws.recv(timeout=timeout))


@pytest.fixture(scope="module")
def bounded(tiny_models, tmp_path_factory):
    with running_server("live-limits", server_env(tiny_models, MAX_SESSIONS="1", LIVE_IDLE_TIMEOUT_S="6",
                                                  LIVE_SEND_TIMEOUT_S="2", LIVE_MAX_FRAME_BYTES="4096"),
                        tmp_path_factory.mktemp("live-limits-logs")) as server:
        yield server


def open_session(server):
    """A new session, once the server has given the last one's place back."""
    for _ in range(100):
        ws = websockets_sync.connect(ws_url(server), open_timeout=30, proxy=None)
        event = receive(ws)
        if event["type"] == "session.created":
            return ws
        ws.close()
        time.sleep(0.1)
    pytest.fail(f"no session: {event}")


@pytest.mark.subprocess
def test_a_client_that_sends_no_audio_is_told_and_closed_and_its_place_given_back(bounded):
    with open_session(bounded) as ws:
        for _ in range(40):  # 8 s of silence, past the 6 s idle timeout: still open
            ws.send(SILENCE)
            time.sleep(0.2)
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert receive(ws)["type"] == "input_audio_buffer.cleared"
        quiet = time.monotonic()
        error = receive(ws, timeout=60)  # then nothing: the idle timeout
        waited = time.monotonic() - quiet
        assert error["type"] == "error" and error["error"]["code"] == "session_idle_timeout", error
        assert "LIVE_IDLE_TIMEOUT_S" in error["error"]["message"]
        with pytest.raises(Exception):
            ws.recv(timeout=30)
        assert ws.close_code == 1000
    assert 5.5 < waited < 40
    wait_until(lambda: metrics(bounded)['asr_live_sessions_ended_total{outcome="idle"}'] >= 1)
    open_session(bounded).close()  # MAX_SESSIONS=1: the place is free again


@pytest.mark.subprocess
def test_a_frame_over_live_max_frame_bytes_is_refused_and_the_session_goes_on(bounded):
    """LIVE_MAX_FRAME_BYTES=4096: an append of 8 KiB of audio gets an error event naming the
    setting and is dropped; the next frames are taken."""
    big = json.dumps({"type": "input_audio_buffer.append", "event_id": "big",
                      "audio": base64.b64encode(bytes(8192)).decode()})
    with open_session(bounded) as ws:
        ws.send(big)
        error = receive(ws)
        assert error["type"] == "error" and error["error"]["code"] == "invalid_value", error
        assert "LIVE_MAX_FRAME_BYTES" in error["error"]["message"] and error["error"]["event_id"] == "big"
        ws.send(SILENCE)
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        answer = receive(ws)
        # 20 ms are too little to commit: the buffer holds the small frame, not the big one's 170 ms
        assert answer["type"] == "error" and answer["error"]["code"] == "input_audio_buffer_commit_empty", answer
        held = float(re.search(r"only has ([\d.]+)ms", answer["error"]["message"]).group(1))
        assert 15 < held < 25, answer


@pytest.mark.subprocess
def test_a_client_that_reads_nothing_is_dropped_with_bounded_memory_and_its_place_given_back(bounded):
    """A client flooding events (each answered by an error event) with a small receive buffer
    and no reading: the server's sends fill the socket, wait LIVE_SEND_TIMEOUT_S (2 s, well
    before the 6 s idle timeout) and end the session; the server drops the connection (the
    close could never reach the client), its memory does not grow with what the client left
    unread, and the place is free again."""
    from websockets.exceptions import ConnectionClosed

    def rss_mb() -> float:
        with open(f"/proc/{bounded.proc.pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))

    before = rss_mb()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window it offers
    sock.connect(("127.0.0.1", bounded.port))
    ws = websockets_sync.connect(ws_url(bounded), sock=sock, open_timeout=30, proxy=None, max_queue=1)
    assert receive(ws)["type"] == "session.created"
    dropped, last_audio, started, peak = None, 0.0, time.monotonic(), before
    stop = threading.Event()

    def flood():
        nonlocal dropped, last_audio
        try:
            while not stop.is_set():
                quiet = time.monotonic() - last_audio > 0.5  # some audio: not idle, only not reading
                ws.send(SILENCE if quiet else NOT_AN_EVENT)
                if quiet:
                    last_audio = time.monotonic()
        except (ConnectionClosed, OSError):
            dropped = time.monotonic() - started

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    while sender.is_alive() and time.monotonic() - started < 120:
        peak = max(peak, rss_mb())
        time.sleep(0.2)
    stop.set()
    sock.close()
    assert dropped is not None, "the server kept a client that reads nothing for 120 s"
    assert peak - before < 300, (before, peak)  # what the client left unread is not held in memory
    wait_until(lambda: metrics(bounded)['asr_live_sessions_ended_total{outcome="client_not_reading"}'] >= 1)
    open_session(bounded).close()


@pytest.mark.subprocess
def test_sigterm_closes_the_live_sessions_with_a_reason_and_the_server_exits(tiny_models, tmp_path):
    server = ServerProcess("live-sigterm", server_env(tiny_models, MAX_SESSIONS="2"), tmp_path)
    try:
        server.wait_health(lambda status, body: status == 200)
        sessions = [open_session(server) for _ in range(2)]
        for ws in sessions:
            for _ in range(20):
                ws.send(SILENCE)
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for ws in sessions:
            events = []
            try:
                while True:
                    events.append(receive(ws, timeout=30))
            except Exception:
                pass
            errors = [e["error"]["code"] for e in events if e["type"] == "error"]
            assert errors == ["server_shutting_down"], events
            assert ws.close_code == 1012
        server.proc.wait(timeout=30)
        assert time.monotonic() - sent < 15
        assert "Traceback" not in server.log()
        ended = [json.loads(line) for line in server.log().splitlines() if '"live session"' in line]
        assert [e["outcome"] for e in ended] == ["server_shutdown"] * 2, ended
    finally:
        server.stop()


def test_a_request_still_running_after_the_grace_is_answered_503_saying_so():
    """uvicorn_server's stop with SHUTDOWN_GRACE_S=0 while the model runs a request: the request
    gets a 503 that says the server is shutting down (not uvicorn's bare 500), and the server
    stops at once."""
    import requests

    from speaker_asr.serving.app import create_app, server_settings, uvicorn_server

    release = threading.Event()

    def handler(data, progress=None):
        release.wait(60)  # the model is busy until the test is done
        return {"text": "", "chunks": []}

    settings = server_settings(host="127.0.0.1", port=free_port(), shutdown_grace_s=0.0, log_level="warning")
    app = create_app(handler_factory=lambda: handler, settings=settings)
    server = uvicorn_server(app, settings)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    http = requests.Session()
    http.trust_env = False
    try:
        wait_until(lambda: server.started and http.get(url + "/health", timeout=5).status_code == 200, timeout=30)
        answers = {}

        def post(path):
            answers[path] = http.post(url + path, data=encode(tone(1.0)), headers={"Content-Type": "audio/wav"},
                                      timeout=60)

        poster = threading.Thread(target=post, args=("/",))
        poster.start()
        wait_until(lambda: app.state.runner.counts()[1] == 1)  # the model is on it
        server.should_exit = True
        poster.join(30)
        thread.join(30)
        assert not thread.is_alive()
    finally:
        release.set()
    r = answers["/"]
    assert r.status_code == 503, r.text
    assert "shutting down" in r.json()["error"] and "SHUTDOWN_GRACE_S" in r.json()["error"]


def test_the_keepalive_waits_while_the_server_holds_back_reading():
    """A route that stops reading for a while (the live session does while its queue of items is
    full, so that audio sent ahead of real time waits in the client's socket) must not have its
    connection failed by the WebSocket keepalive: the client's pong is behind the frames the
    server has not read. uvicorn's own protocol fails it after ping interval + timeout (1011);
    ours (speaker_asr/serving/ws_protocol.py) waits, and every message gets through."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute

    from speaker_asr.serving.ws_protocol import live_protocol

    async def endpoint(websocket):
        await websocket.accept()
        first = await websocket.receive_text()
        await asyncio.sleep(4)  # holding back: 4 ping timeouts of 0.5 s
        count = 1
        while True:
            text = await websocket.receive_text()
            count += 1
            if text == "end":
                break
        await websocket.send_text(json.dumps({"first": first, "count": count}))
        await websocket.close(1000)

    port = free_port()
    config = uvicorn.Config(Starlette(routes=[WebSocketRoute("/ws", endpoint)]), host="127.0.0.1", port=port,
                            log_config=None, log_level="warning", ws=live_protocol(), ws_ping_interval=0.5,
                            ws_ping_timeout=0.5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=30)
        # the client sends no pings of its own: only the server's keepalive is under test
        with websockets_sync.connect(f"ws://127.0.0.1:{port}/ws", proxy=None, ping_interval=None) as ws:
            for i in range(200):  # a backlog the server reads only after its pause
                ws.send(f"m{i}" + "x" * 2000)
            ws.send("end")
            answer = json.loads(ws.recv(timeout=30))
        assert answer == {"first": "m0" + "x" * 2000, "count": 201}
    finally:
        server.should_exit = True
        thread.join(15)
