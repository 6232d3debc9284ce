"""``/v1/realtime?intent=transcription`` end to end: ``python -m speaker_asr serve`` on the tiny
random models with ``API_KEY`` and ``MAX_SESSIONS=1``, driven by a plain WebSocket client
(``websockets``) and by the official openai SDK's realtime client. The tiny models' text is
noise, so what is checked is the protocol: the events, their order, ids and shapes, the
refusals. (Server VAD on synthetic audio does not fire with silero; the VAD path is
tests/live/test_live_session.py's, and silero on real speech is checked there when the shared
clip is present.)"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from helpers import ServerProcess, server_env, tone

websockets_sync = pytest.importorskip("websockets.sync.client")

pytestmark = pytest.mark.subprocess

KEY = "sk-live-0123456789abcdef-SECRET"


@pytest.fixture(scope="module")
def live(tiny_models, tmp_path_factory):
    server = ServerProcess("realtime", server_env(tiny_models, API_KEY=KEY, MAX_SESSIONS="1"),
                           tmp_path_factory.mktemp("realtime-logs"))
    try:
        server.wait_health(lambda status, body: status == 200)
        yield server
    finally:
        server.stop()


def ws_url(server, intent: str = "transcription") -> str:
    return server.url.replace("http://", "ws://") + f"/v1/realtime?intent={intent}"


def connect(server, key: str = KEY, intent: str = "transcription", header: bool = True):
    protocols = ["realtime"] + ([] if header else [f"openai-insecure-api-key.{key}"])
    headers = {"Authorization": f"Bearer {key}"} if header else {}
    return websockets_sync.connect(ws_url(server, intent), additional_headers=headers,
                                   subprotocols=protocols, open_timeout=30, proxy=None)


def receive(ws, timeout: float = 120) -> dict:
    return json.loads(ws.recv(timeout=timeout))


def until(ws, kind: str, timeout: float = 120) -> list[dict]:
    """Every event up to and including the first of ``kind``."""
    events = []
    while True:
        events.append(receive(ws, timeout))
        if events[-1]["type"] == kind:
            return events


def appends(audio: np.ndarray, sr: int = 16_000, ms: int = 20):
    step = sr * ms // 1000
    for i in range(0, len(audio), step):
        pcm = (np.clip(audio[i:i + step], -1, 1) * 32767).astype("<i2").tobytes()
        yield json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})


def manual_session(ws) -> dict:
    created = receive(ws)
    assert created["type"] == "session.created"
    ws.send(json.dumps({"type": "session.update", "event_id": "u1", "session": {
        "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                     "turn_detection": None}}}}))
    updated = receive(ws)
    assert updated["type"] == "session.updated", updated
    assert updated["session"]["audio"]["input"]["turn_detection"] is None
    return updated


def test_manual_commit_gives_committed_completed_and_a_segment_with_a_speaker(live):
    with connect(live) as ws:
        assert ws.subprotocol == "realtime"
        manual_session(ws)
        for message in appends(tone(2.0, freq=180.0)):
            ws.send(message)
        ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "c1"}))
        events = until(ws, "conversation.item.input_audio_transcription.completed")
        kinds = [e["type"] for e in events]
        assert kinds[0] == "input_audio_buffer.committed" and "error" not in kinds, events
        item = events[0]["item_id"]
        assert events[0]["previous_item_id"] is None
        completed = events[-1]
        assert completed["item_id"] == item and completed["usage"]["seconds"] == pytest.approx(2.0, abs=0.05)
        deltas = "".join(e["delta"] for e in events if e["type"].endswith(".delta"))
        assert deltas == completed["transcript"] or not completed["transcript"]
        if completed["transcript"]:  # the tiny model may write nothing: then no speaker is due
            segment = receive(ws)
            assert segment["type"] == "conversation.item.input_audio_transcription.segment", segment
            assert segment["item_id"] == item and segment["speaker"] == "SPEAKER_00"
            assert 0.0 <= segment["start"] <= segment["end"] <= 2.05


def test_the_key_can_come_in_the_subprotocol_and_a_wrong_one_is_refused(live):
    with connect(live, header=False) as ws:
        assert receive(ws)["type"] == "session.created"
    for key, code in ((KEY[:-1] + "X", "invalid_api_key"),):
        with connect(live, key=key) as ws:
            error = receive(ws)
            assert error["type"] == "error" and error["error"]["code"] == code
            assert KEY not in json.dumps(error)
            with pytest.raises(Exception):
                ws.recv(timeout=10)
            assert ws.close_code == 1008


def test_another_intent_is_refused(live):
    with connect(live, intent="conversation") as ws:
        error = receive(ws)
        assert error["error"]["code"] == "invalid_intent" and "intent=transcription" in error["error"]["message"]


def test_bad_messages_get_error_events_and_the_session_goes_on(live):
    with connect(live) as ws:
        manual_session(ws)
        ws.send("{not json")
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "!!!!", "event_id": "b1"}))
        ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA", "event_id": "b2"}))
        ws.send(json.dumps({"type": "response.create"}))
        ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "b3"}))
        errors = [receive(ws) for _ in range(5)]
        assert [e["type"] for e in errors] == ["error"] * 5
        assert [e["error"]["code"] for e in errors] == ["invalid_json", "invalid_value", "invalid_value",
                                                        "invalid_value", "input_audio_buffer_commit_empty"]
        assert [e["error"]["event_id"] for e in errors[1:3]] == ["b1", "b2"]
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert receive(ws)["type"] == "input_audio_buffer.cleared"


def test_a_second_session_over_max_sessions_is_refused_while_the_first_goes_on(live):
    with connect(live) as first:
        manual_session(first)
        with connect(live) as second:
            error = receive(second)
            assert error["type"] == "error" and error["error"]["code"] == "session_limit_reached"
            assert "MAX_SESSIONS" in error["error"]["message"]
        first.send(json.dumps({"type": "input_audio_buffer.clear"}))
        assert receive(first)["type"] == "input_audio_buffer.cleared"
    # the first one closed: a new one is taken (the count is given back at the close)
    for _ in range(50):
        with connect(live) as third:
            event = receive(third)
            if event["type"] == "session.created":
                break
    assert event["type"] == "session.created"


def test_the_openai_sdk_realtime_client(live):
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=KEY, max_retries=0,
                                websocket_base_url=live.url.replace("http://", "ws://") + "/v1")
    import asyncio

    async def main():
        async with client.realtime.connect(model="whisper-tiny", extra_query={"intent": "transcription"}) as conn:
            created = await conn.recv()
            assert created.type == "session.created"
            await conn.session.update(session={"type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None}}})
            updated = await conn.recv()
            assert updated.type == "session.updated"
            audio = tone(1.5, sr=24_000, freq=200.0)
            for i in range(0, len(audio), 480):
                pcm = (np.clip(audio[i:i + 480], -1, 1) * 32767).astype("<i2").tobytes()
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())
            await conn.input_audio_buffer.commit()
            kinds = []
            while True:
                event = await asyncio.wait_for(conn.recv(), 120)
                kinds.append(event.type)
                if event.type == "conversation.item.input_audio_transcription.completed":
                    return kinds, event

    kinds, completed = asyncio.run(main())
    assert kinds[0] == "input_audio_buffer.committed" and "error" not in kinds
    assert completed.usage.seconds == pytest.approx(1.5, abs=0.05)


def real_speech(start: float, end: float, sr: int) -> np.ndarray:
    """Seconds ``start`` to ``end`` of pyannote.audio's own sample (real speech, two speakers;
    it ships in the package) at ``sr``."""
    from math import gcd
    from pathlib import Path

    import soundfile as sf
    from scipy.signal import resample_poly

    import pyannote.audio

    audio, rate = sf.read(str(Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"), dtype="float32")
    audio = audio[int(start * rate):int(end * rate)]
    g = gcd(sr, rate)
    return resample_poly(audio, sr // g, rate // g).astype(np.float32)


def test_the_openai_sdk_with_server_vad_on_real_speech(live):
    """Real speech through the SDK's realtime client with server VAD (OpenAI's defaults): silero
    hears the turns, each committed item is completed, its text came as deltas, and its
    segment events carry speakers; everything on one item id per utterance."""
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=live.url + "/v1", api_key=KEY, max_retries=0,
                                websocket_base_url=live.url.replace("http://", "ws://") + "/v1")
    import asyncio

    audio = real_speech(6.0, 26.0, 24_000)  # speech from 0.8 s, pauses at about 1.2, 12 and 16 s

    async def main():
        async with client.realtime.connect(model="whisper-tiny", extra_query={"intent": "transcription"}) as conn:
            await conn.session.update(session={"type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": {"type": "server_vad"}}}})
            for i in range(0, len(audio), 480):  # 20 ms frames, as fast as the server reads them
                pcm = (np.clip(audio[i:i + 480], -1, 1) * 32767).astype("<i2").tobytes()
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())
            await conn.input_audio_buffer.commit()  # the speech still open at the end
            events, committed, done = [], set(), set()
            while not committed or committed - done or any(
                    e.type.endswith(".completed") and e.transcript and e.item_id not in
                    {s.item_id for s in events if s.type.endswith(".segment")} for e in events):
                event = await asyncio.wait_for(conn.recv(), 120)
                events.append(event)
                if event.type == "input_audio_buffer.committed":
                    committed.add(event.item_id)
                elif event.type.endswith((".completed", ".failed")):
                    done.add(event.item_id)
            return events

    events = asyncio.run(main())
    kinds = [e.type for e in events]
    assert kinds[:2] == ["session.created", "session.updated"] and "error" not in kinds, kinds
    started = [e for e in events if e.type == "input_audio_buffer.speech_started"]
    stopped = [e for e in events if e.type == "input_audio_buffer.speech_stopped"]
    assert len(started) >= 2 and stopped, kinds  # the VAD ended at least one turn by itself
    assert all(a.audio_start_ms < b.audio_end_ms for a, b in zip(started, stopped))
    completed = [e for e in events if e.type.endswith(".completed")]
    segments = [e for e in events if e.type.endswith(".segment")]
    assert [e.item_id for e in completed] == [e.item_id for e in events if e.type == "input_audio_buffer.committed"]
    assert any(c.transcript for c in completed), completed  # the tiny model wrote something
    for c in completed:
        deltas = "".join(e.delta for e in events if e.type.endswith(".delta") and e.item_id == c.item_id)
        assert deltas.strip() == c.transcript.strip() or not c.transcript
        mine = [s for s in segments if s.item_id == c.item_id]
        assert bool(mine) == bool(c.transcript), (c, mine)
        assert all(s.speaker.startswith("SPEAKER_") and 0.0 <= s.start <= s.end <= 20.05 for s in mine)
