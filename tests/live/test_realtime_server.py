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

from helpers import parse_metrics, running_server, server_env, tone, wait_until

websockets_sync = pytest.importorskip("websockets.sync.client")

pytestmark = pytest.mark.subprocess

KEY = "sk-live-0123456789abcdef-SECRET"


@pytest.fixture(scope="module")
def live(tiny_models, tmp_path_factory):
    with running_server("realtime", server_env(tiny_models, API_KEY=KEY, MAX_SESSIONS="1"),
                        tmp_path_factory.mktemp("realtime-logs")) as server:
        yield server


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


def manual_session(ws, **speaker_asr) -> dict:
    created = receive(ws)
    assert created["type"] == "session.created"
    ws.send(json.dumps({"type": "session.update", "event_id": "u1", "session": {
        "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                     "turn_detection": None}},
        **({"speaker_asr": speaker_asr} if speaker_asr else {})}}))
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


def metrics(server):
    return parse_metrics(server.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).text)


def test_finish_sends_the_final_transcript_closes_and_is_counted_and_logged(live):
    before = metrics(live)
    with connect(live) as ws:
        updated = manual_session(ws, final_transcript=True)
        assert updated["session"]["speaker_asr"]["final_transcript"] is True
        for message in appends(tone(1.5, freq=180.0)):
            ws.send(message)
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        for message in appends(tone(1.5, freq=300.0)):
            ws.send(message)
        ws.send(json.dumps({"type": "speaker_asr.session.finish"}))  # commits the second item
        events = until(ws, "transcript.text.done", timeout=300)
        with pytest.raises(Exception):
            ws.recv(timeout=30)
        assert ws.close_code == 1000
    kinds = [e["type"] for e in events]
    assert "error" not in kinds and kinds.count("input_audio_buffer.committed") == 2
    assert kinds.count("conversation.item.added") == 2 and kinds.count("conversation.item.done") == 2
    assert kinds[-2] == "conversation.item.done"
    done = events[-1]
    assert isinstance(done["text"], str) and isinstance(done["segments"], list)
    for segment in done["segments"]:
        assert segment["type"] == "transcript.text.segment" and 0.0 <= segment["start"] <= segment["end"] <= 3.05
    live_labels = {e["speaker"] for e in events if e["type"].endswith(".segment")}
    offline_labels = {s["speaker"] for s in done["segments"]}
    assert not live_labels or not offline_labels or live_labels & offline_labels  # the same names

    def counted():
        after = metrics(live)
        return after if after['asr_live_sessions_ended_total{outcome="finished"}'] == \
            before['asr_live_sessions_ended_total{outcome="finished"}'] + 1 else None

    after = wait_until(counted)
    assert after["asr_live_sessions_started_total"] == before["asr_live_sessions_started_total"] + 1
    assert after["asr_live_sessions_open"] == 0
    assert after['asr_live_items_total{status="completed"}'] == \
        before['asr_live_items_total{status="completed"}'] + 2
    assert after["asr_live_item_latency_seconds_count"] == before["asr_live_item_latency_seconds_count"] + 2
    assert after["asr_live_audio_seconds_total"] - before["asr_live_audio_seconds_total"] == \
        pytest.approx(3.0, abs=0.01)
    session_id = updated["session"]["id"]

    def logged():
        for line in live.log().splitlines():
            if '"live session"' in line and session_id in line:
                return json.loads(line)
        return None

    entry = wait_until(logged)
    assert entry["logger"] == "server.access" and entry["request_id"] == entry["session_id"] == session_id
    assert entry["outcome"] == "finished" and entry["audio_seconds"] == pytest.approx(3.0, abs=0.01)
    assert entry["items_completed"] == 2 and entry["items_failed"] == 0 and entry["final_transcript"] is True
    assert entry["total_ms"] > 0
    assert KEY not in live.log()


def test_refusals_are_counted_by_code(live):
    refused = 'asr_live_sessions_refused_total{code="invalid_intent"}'
    before = metrics(live)
    count = before[refused] if refused in before else 0
    with connect(live, intent="conversation") as ws:
        assert receive(ws)["error"]["code"] == "invalid_intent"

    def counted():
        m = metrics(live)
        return m if refused in m and m[refused] == count + 1 else None

    after = wait_until(counted)
    assert after["asr_live_sessions_started_total"] == before["asr_live_sessions_started_total"]


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
                "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None}},
                "speaker_asr": {"final_transcript": True}})
            updated = await conn.recv()
            assert updated.type == "session.updated"
            audio = tone(1.5, sr=24_000, freq=200.0)
            for i in range(0, len(audio), 480):
                pcm = (np.clip(audio[i:i + 480], -1, 1) * 32767).astype("<i2").tobytes()
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm).decode())
            await conn.input_audio_buffer.commit()
            # ours: the SDK sends a dict as it is, and reads the final event (a type it does not
            # know) without failing; the close (1000) ends its iterator
            await conn.send({"type": "speaker_asr.session.finish"})
            events = []

            async def read():
                async for event in conn:
                    events.append(event)

            await asyncio.wait_for(read(), 300)
            return events

    events = asyncio.run(main())
    kinds = [e.type for e in events]
    assert kinds[:2] == ["input_audio_buffer.committed", "conversation.item.added"] and "error" not in kinds
    assert kinds[-2:] == ["conversation.item.done", "transcript.text.done"]
    assert events[1].item.content[0].type == "input_audio" and events[1].item.content[0].transcript is None
    completed = next(e for e in events if e.type == "conversation.item.input_audio_transcription.completed")
    assert completed.usage.seconds == pytest.approx(1.5, abs=0.05)
    assert events[-2].item.content[0].transcript == completed.transcript
    final = events[-1]  # an SDK class that does not know the type, its fields as sent
    assert isinstance(final.text, str) and isinstance(final.segments, list)


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
