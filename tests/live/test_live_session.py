"""The live session's state machine (speaker_asr/live/session.py) and the turn detector
(speaker_asr/live/vad.py) with stand-ins for the models: a fake engine whose "decode" is a
function of the audio's length, and a fake VAD whose probability is the window's loudness. What
the real models do over a real WebSocket is tests/live/test_realtime_server.py."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest

from speaker_asr.live.engine import LiveEngine, Loaded, PartialDecodes
from speaker_asr.live.items import MAX_ITEM_S
from speaker_asr.live.session import LiveSession
from speaker_asr.live.vad import WINDOW, TurnDetector, TurnEvent
from speaker_asr.scheduling import Priority
from speaker_asr.types import Diarization, Segment, Transcript, Turn, Word

SR = 16_000


class FakeEngine(LiveEngine):
    """A LiveEngine (speaker_asr/live/engine.py) without models: a decode's words follow the
    audio's length, a voice its loudness; a known speaker's clip, the language detection and the
    final pass are the subclasses' below (here they fail the test that reaches them). Each call
    runs its stand-in (the sync methods below, which subclasses override) inline, or on a worker
    thread as the server's do with ``threaded``; :attr:`asked` notes every call's priority."""

    loaded = Loaded("fake-whisper", has_voices=True)
    threaded = False

    def __init__(self, fail: bool = False, voices=None, activity=None):
        self.partials = PartialDecodes()
        self.asked = []  # (the call, its priority) of every call
        self.decodes = []  # (samples, the previous decode given as its draft) of every decode
        self.languages = []  # the config's language at every decode
        self.fail = fail
        self.found = voices  # audio -> Diarization (the item's own, with voices), or None: nobody found
        self.activities = activity  # audio -> Activity (who speaks in a growing item), or None
        self.looked = []  # the audio lengths of the activity looks

    def busy(self) -> bool:
        return False

    def unavailable(self):
        return None

    async def _model(self, call: str, fn, priority: Priority):
        self.asked.append((call, priority))
        return await asyncio.to_thread(fn) if self.threaded else fn()

    # -- the calls, as a session makes them ----------------------------------------------------

    async def decode(self, audio, config, previous=None, cancel=None, *, priority=Priority.LIVE_FINAL):
        return await self._model("decode", lambda: self.decode_now(audio, config, previous, cancel), priority)

    async def language(self, audio, *, priority=Priority.LIVE_FINAL):
        return await self._model("language", lambda: self.language_now(audio), priority)

    async def activity(self, audio, *, priority=Priority.LIVE_SPEAKERS):
        return await self._model("activity", lambda: self.activity_now(audio), priority)

    async def utterance(self, audio, config, *, priority=Priority.LIVE_SPEAKERS):
        return await self._model("utterance", lambda: self.utterance_now(audio, config), priority)

    async def embed(self, audio, *, priority=Priority.LIVE_SPEAKERS):
        return await self._model("embed", lambda: self.embed_now(audio), priority)

    async def references(self, names, clips, *, priority=Priority.LIVE_SPEAKERS):
        return await self._model("references", lambda: self.references_now(names, clips), priority)

    async def transcribe_session(self, audio, config, progress, *, priority=Priority.FILE):
        return await self._model("transcribe_session", lambda: self.transcribe_session_now(
            audio() if callable(audio) else audio, config, progress), priority)

    # -- their stand-ins --------------------------------------------------------------------------

    def decode_now(self, audio, config, previous=None, cancel=None):
        from speaker_asr.models import Decoded

        self.decodes.append((len(audio), previous))
        self.languages.append(config.language)
        if self.fail:
            raise RuntimeError("boom")
        n = int(len(audio) / SR * 2)  # two words a second
        words = [Word(f" w{i}", i * 0.5, i * 0.5 + 0.4) for i in range(n)]
        text = "".join(w.text for w in words).strip()
        return Decoded(text, words, Transcript(text, [Segment(text, 0.0, n * 0.5)] if n else [], "en", words))

    def embed_now(self, audio):
        loud = float(np.abs(audio).mean() > 0.2)
        return np.array([1.0 - loud, loud])

    def utterance_now(self, audio, config):
        return self.found(audio) if self.found is not None else None

    def activity_now(self, audio):
        self.looked.append(len(audio))
        return self.activities(audio) if self.activities is not None else None

    def language_now(self, audio):
        raise AssertionError("a model that is not multilingual detects no language")

    def references_now(self, names, clips):
        raise AssertionError("no known speakers in this test")

    def transcribe_session_now(self, audio, config, progress):
        raise AssertionError("no final pass in this test")


class LoudVad:
    """Speech probability = 1 for a window louder than 0.05 RMS, else 0."""

    def __init__(self):
        self.pending, self.next = np.zeros(0, np.float32), 0

    def probabilities(self, samples):
        pending = np.concatenate([self.pending, samples])
        n = len(pending) // WINDOW
        probs = [float(np.sqrt(np.mean(pending[i * WINDOW:(i + 1) * WINDOW] ** 2)) > 0.05) for i in range(n)]
        first = self.next
        self.pending, self.next = pending[n * WINDOW:], first + n * WINDOW
        return probs, first

    def reset(self, at):
        self.pending, self.next = np.zeros(0, np.float32), at


def frames(audio: np.ndarray, ms: int = 20):
    step = SR * ms // 1000
    for i in range(0, len(audio), step):
        pcm = (np.clip(audio[i:i + step], -1, 1) * 32767).astype("<i2").tobytes()
        yield json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})


def speech(seconds: float, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return (level * np.sin(2 * np.pi * 200 * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), np.float32)


def run_session(messages, engine=None, vad=True, transcription=None):
    sent = []

    async def send(event):
        sent.append(event.to_json())

    async def main():
        session = LiveSession(send, engine or FakeEngine(), LoudVad)
        await session.start()
        fmt = {"format": {"type": "audio/pcm", "rate": 16000}}
        td = {"turn_detection": {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100}} \
            if vad else {"turn_detection": None}
        given = {"transcription": transcription} if transcription else {}
        await session.handle(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {**fmt, **td, **given}}}}))
        for m in messages:
            await session.wait_for_room()
            await session.handle(m)
            await asyncio.sleep(0)
        await session.drain()
        await session.close()

    asyncio.run(main())
    return sent


def types(sent):
    return [e["type"].removeprefix("conversation.item.input_audio_transcription.")
            .removeprefix("input_audio_buffer.").removeprefix("conversation.") for e in sent]


def item_of(event) -> str:
    return event["item"]["id"] if "item" in event else event["item_id"]


def test_turn_detector_starts_with_padding_and_stops_after_the_silence():
    d = TurnDetector(0.5, prefix_padding_ms=64, silence_duration_ms=96)
    assert d.push([0.1, 0.9, 0.9], 10 * WINDOW) == [TurnEvent("start", 11 * WINDOW - 1024)]
    assert d.push([0.4, 0.2], 13 * WINDOW) == []  # 0.4: between the thresholds, still speech
    assert d.push([0.1], 15 * WINDOW) == [TurnEvent("stop", 13 * WINDOW)] and not d.speaking


def test_a_long_turn_ends_at_a_shorter_pause():
    d = TurnDetector(0.5, prefix_padding_ms=0, silence_duration_ms=500, long_turn_ms=1000,
                     long_turn_silence_ms=128)
    speech_windows, pause = [0.9] * 20, [0.0] * 5  # 640 ms of speech, a 160 ms pause
    assert d.push(speech_windows + pause, 0) == [TurnEvent("start", 0)]  # before 1 s: the pause is not enough
    assert d.push(speech_windows, 25 * WINDOW) == []
    assert d.push(pause, 45 * WINDOW) == [TurnEvent("stop", 45 * WINDOW)]  # past 1 s: it is
    assert TurnDetector(0.5, silence_duration_ms=96, long_turn_silence_ms=200).long_silence == 96 * SR // 1000


def test_server_vad_opens_and_commits_an_item_with_deltas_completed_and_a_segment():
    audio = np.concatenate([silence(1.0), speech(3.0), silence(1.0)])
    sent = run_session(frames(audio))
    assert types(sent)[:2] == ["session.created", "session.updated"]
    kinds = types(sent)[2:]
    assert kinds[0] == "speech_started" and "speech_stopped" in kinds and "committed" in kinds
    assert kinds.index("speech_stopped") < kinds.index("committed") < kinds.index("completed")
    assert kinds[kinds.index("committed") + 1] == "item.added"
    assert kinds[-3:] == ["completed", "segment", "item.done"]
    started = sent[2]
    assert abs(started["audio_start_ms"] - 900) <= 40  # 1 s less the 100 ms padding
    stopped = next(e for e in sent if e["type"].endswith("speech_stopped"))
    assert abs(stopped["audio_end_ms"] - 4000) <= 40
    deltas = "".join(e["delta"] for e in sent if e["type"].endswith(".delta"))
    completed = next(e for e in sent if e["type"].endswith(".completed"))
    assert deltas == completed["transcript"] and completed["transcript"].startswith("w0 w1")
    assert sum(1 for k in kinds if k == "delta") >= 2  # partial decodes agreed before the commit
    segment = sent[-2]
    assert segment["speaker"] == "SPEAKER_00" and 0.85 <= segment["start"] < segment["end"]
    assert {item_of(e) for e in sent[2:]} == {started["item_id"]}
    added, done = (e["item"] for e in sent if e["type"].startswith("conversation.item.") and "item" in e)
    assert added["content"] == [{"type": "input_audio", "transcript": None}] and added["role"] == "user"
    assert done["content"] == [{"type": "input_audio", "transcript": completed["transcript"]}]


def test_two_utterances_of_different_voices_get_two_speakers_and_chained_items():
    audio = np.concatenate([speech(2.0, 0.1), silence(1.0), speech(2.0, 0.5), silence(1.0)])
    sent = run_session(frames(audio))
    segments = [e for e in sent if e["type"].endswith(".segment")]
    assert [s["speaker"] for s in segments] == ["SPEAKER_00", "SPEAKER_01"]
    committed = [e for e in sent if e["type"].endswith(".committed")]
    assert committed[0]["previous_item_id"] is None
    assert committed[1]["previous_item_id"] == committed[0]["item_id"]


def test_an_item_with_two_voices_gets_a_segment_per_voice():
    """The item's own diarization found two voices (the fake: the first half of the item one,
    the rest another): its words are attributed to them by time, two segment events, each with
    its words' text and times, and the labels come back for the same voices in the next item."""

    def found(audio):
        half = round(len(audio) / SR / 2 * 2) / 2  # on a word boundary (two words a second)
        turns = [Turn(0.0, half, "L1"), Turn(half, len(audio) / SR, "L2")]
        return Diarization(turns, turns, {"L1": [1.0, 0.0], "L2": [0.0, 1.0]})

    audio = np.concatenate([silence(0.5), speech(3.0), silence(1.0), speech(3.0), silence(1.0)])
    sent = run_session(frames(audio), engine=FakeEngine(voices=found))
    segments = [e for e in sent if e["type"].endswith(".segment")]
    speakers = [s["speaker"] for s in segments]
    assert sorted(speakers[:2]) == ["SPEAKER_00", "SPEAKER_01"] and speakers[2:] == speakers[:2]
    completed = [e for e in sent if e["type"].endswith(".completed")]
    assert " ".join(s["text"] for s in segments[:2]) == completed[0]["transcript"]
    assert segments[0]["end"] <= segments[1]["start"] and segments[1]["end"] <= segments[2]["start"]
    assert len({s["id"] for s in segments}) == 4


def test_the_final_decode_reuses_the_partial_decode_made_in_the_pause_that_ended_the_item():
    engine = FakeEngine()
    sent = run_session(frames(np.concatenate([silence(0.5), speech(3.0), silence(1.0)])), engine=engine)
    completed = next(e for e in sent if e["type"].endswith(".completed"))
    assert completed["transcript"].startswith("w0") and completed["usage"]["seconds"] > 3.4
    # the last decode was the pause's, of less than the committed audio; none came after the commit
    assert 3.1 <= engine.decodes[-1][0] / SR < 3.4, engine.decodes
    assert all(n / SR < 3.4 for n, _ in engine.decodes)
    # each decode after the item's first has the one before as its draft (the same text, sooner)
    assert engine.decodes[0][1] is None and len(engine.decodes) >= 3
    for (_, previous), (n, _) in zip(engine.decodes[1:], engine.decodes[:-1]):
        assert previous is not None and len(previous.words) == int(n / SR * 2)
    # the item's speakers (a look while it grew, its own diarization, its voice) rank as speakers
    speakers = [(call, priority) for call, priority in engine.asked if call != "decode"]
    assert {call for call, _ in speakers} == {"activity", "utterance", "embed"}
    assert {priority for _, priority in speakers} == {Priority.LIVE_SPEAKERS}


def test_a_long_utterance_is_split_at_30_s():
    sent = run_session(frames(np.concatenate([speech(MAX_ITEM_S + 2), silence(1.0)]), ms=100))
    kinds = types(sent)
    assert kinds.count("committed") == 2 and kinds.count("speech_started") == 2
    assert kinds.count("completed") == 2


def test_a_commit_mid_speech_under_server_vad_keeps_every_word_after_it():
    """Push-to-talk clients commit while someone speaks: each commit ends an item where the audio
    stands and the speech goes on in a new one, so the items together hold all the speech (the
    fake decode: two words a second) and the last one still ends at the pause."""
    audio = np.concatenate([silence(0.5), speech(10.0), silence(1.0)])
    msgs = list(frames(audio))
    commit = '{"type": "input_audio_buffer.commit", "event_id": "ptt"}'
    for at in (175, 125, 75):  # 3 s, 2 s and 1 s into the speech (20-ms frames)
        msgs.insert(at, commit)
    sent = run_session(msgs)
    kinds = types(sent)[2:]
    assert "error" not in kinds, [e for e in sent if e["type"] == "error"]
    assert kinds.count("committed") == 4 and kinds.count("speech_started") == 4
    assert kinds.count("speech_stopped") == 4 and kinds.count("completed") == 4
    completed = [e for e in sent if e["type"].endswith(".completed")]
    seconds = sum(e["usage"]["seconds"] for e in completed)
    assert 10.0 <= seconds <= 10.0 + 0.1 + 0.3 + 0.05  # the speech, its padding and the silence heard
    words = sum(len(e["transcript"].split()) for e in completed)
    assert words >= 2 * 10.0 - 4  # a word or so lost at each cut at most
    started = [e["audio_start_ms"] for e in sent if e["type"].endswith("speech_started")]
    stopped = [e["audio_end_ms"] for e in sent if e["type"].endswith("speech_stopped")]
    assert started[1:] == stopped[:-1]  # each item begins where the one before ended
    assert abs(stopped[-1] - 10_500) <= 40


def test_manual_commit_clear_and_faults_keep_the_session_going():
    audio = speech(1.0)
    msgs = [*frames(audio), '{"type": "input_audio_buffer.commit"}',
            "{not json", '{"type": "input_audio_buffer.append", "audio": "@@@"}',
            '{"type": "input_audio_buffer.append", "audio": "AAE"}', '{"type": "nope"}',
            '{"type": "input_audio_buffer.commit", "event_id": "c2"}',
            *frames(audio), '{"type": "input_audio_buffer.clear"}']
    sent = run_session(msgs, vad=False)
    kinds = types(sent)
    assert kinds[2:6] == ["committed", "item.added", "delta", "completed"]
    errors = [e["error"] for e in sent if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["invalid_json", "invalid_value", "invalid_value", "invalid_value",
                                           "input_audio_buffer_commit_empty"]
    assert errors[-1]["event_id"] == "c2"
    assert kinds[-1] == "cleared" and "speech_started" not in kinds


def test_a_model_failure_fails_the_item_and_the_session_goes_on():
    sent = run_session([*frames(speech(1.0)), '{"type": "input_audio_buffer.commit"}'],
                       engine=FakeEngine(fail=True), vad=False)
    failed = [e for e in sent if e["type"].endswith(".failed")]
    assert len(failed) == 1 and failed[0]["error"]["type"] == "server_error"
    assert "boom" not in json.dumps(failed)


def test_manual_buffer_is_bounded():
    sent = run_session(frames(speech(MAX_ITEM_S + 1), ms=500), vad=False)
    errors = [e["error"] for e in sent if e["type"] == "error"]
    assert errors and all(e["code"] == "input_audio_buffer_full" for e in errors)


def test_silero_finds_the_speech_of_the_shared_clip():
    """silero-vad + the detector on real speech (../shared/audio; skipped where it is absent)."""
    from pathlib import Path

    clip = Path(__file__).resolve().parents[2].parent / "shared" / "audio" / "polyai-minds14-0.wav"
    if not clip.exists():
        pytest.skip("no shared clip")
    import soundfile as sf
    from scipy.signal import resample_poly

    from speaker_asr.live.vad import SileroVad

    audio, sr = sf.read(str(clip), dtype="float32")
    audio = resample_poly(audio, SR, sr).astype(np.float32)
    vad, detector, events = SileroVad(), TurnDetector(0.5, 300, 500), []
    for i in range(0, len(audio), 320):
        events += detector.push(*vad.probabilities(audio[i:i + 320]))
    starts = [e.sample / SR for e in events if e.kind == "start"]
    assert starts and 0.3 < starts[0] < 1.5 and len(starts) <= 3  # the caller starts at ~0.9 s


# -- the end: speaker_asr.session.finish and the final pass ------------------------------------

FINISH = '{"type": "speaker_asr.session.finish", "event_id": "f1"}'
COMMIT = '{"type": "input_audio_buffer.commit"}'


class FinalEngine(FakeEngine):
    """FakeEngine with a final pass that returns ``result`` (or raises) and records its input."""

    def __init__(self, result=None, fail_final: bool = False):
        super().__init__()
        self.result, self.fail_final, self.final_calls = result, fail_final, []

    def transcribe_session_now(self, audio, config, progress):
        self.final_calls.append((audio.copy(), config))
        progress(None)
        if self.fail_final:
            raise RuntimeError("final boom")
        return self.result


def offline(*parts, duration: float = 5.0, known=()):
    """A hand-made file-pipeline Result: (start, end, text, speaker) per segment."""
    from speaker_asr.result import KnownSpeaker, Result
    from speaker_asr.types import Segment

    segments = [Segment(" " + text, start, end, speaker) for start, end, text, speaker in parts]
    return Result("".join(s.text for s in segments), segments, "en", duration, diarized=True,
                  known_speakers=[KnownSpeaker(name, name, 0.9) for name in known])


def finish_session(messages, engine, speaker_asr=None, vad=False):
    """A session (manual commits unless ``vad``) fed ``messages`` that end with the finish:
    (the events sent, how the session ended)."""
    sent, ended = [], []

    async def send(event):
        sent.append(event.to_json())

    async def main():
        session = LiveSession(send, engine, LoudVad)
        await session.start()
        td = {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100} if vad else None
        await session.handle(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                         "transcription": {"language": "en", "prompt": "Hi"},
                                                         "turn_detection": td}},
            "speaker_asr": {"max_speakers": 3, **(speaker_asr or {})}}}))
        for m in messages:
            await session.handle(m)
            await asyncio.sleep(0)
        ended.append(await session.ending)
        await session.close()

    asyncio.run(main())
    return sent, ended[0]


def test_finish_without_a_final_pass_commits_the_buffer_and_finishes_every_item():
    msgs = [*frames(speech(1.0, 0.1)), COMMIT, *frames(speech(1.0, 0.5)), FINISH]
    sent, ended = finish_session(msgs, FinalEngine())
    assert ended == "finished"
    kinds = types(sent)[2:]
    assert kinds.count("committed") == 2 and kinds.count("item.added") == 2  # the second by the finish
    assert kinds[-4:] == ["delta", "completed", "segment", "item.done"]
    for item in {item_of(e) for e in sent[2:]}:  # each item's events in order, its done last
        assert types([e for e in sent[2:] if item_of(e) == item]) == [
            "committed", "item.added", "delta", "completed", "segment", "item.done"]
    done = [e for e in sent if e["type"] == "conversation.item.done"]
    committed = [e for e in sent if e["type"] == "input_audio_buffer.committed"]
    assert [d["item"]["id"] for d in done] == [c["item_id"] for c in committed]
    assert done[1]["previous_item_id"] == committed[0]["item_id"]
    assert done[1]["item"]["content"][0]["transcript"] == "w0 w1"


def test_the_final_pass_is_sent_last_with_the_live_labels_and_a_fresh_one():
    # live: quiet voice 0-2 s -> SPEAKER_00, loud 2-4 s -> SPEAKER_01, the last second (silence,
    # committed by the finish) -> SPEAKER_00. Offline: its own labels, and one speaker only it found.
    result = offline((0.0, 2.0, "one", "SPEAKER_02"), (2.0, 4.0, "two", "SPEAKER_00"),
                     (4.2, 4.8, "three", "SPEAKER_01"))
    engine = FinalEngine(result)
    audio = [speech(2.0, 0.1), speech(2.0, 0.5), silence(1.0)]
    msgs = [*frames(audio[0]), COMMIT, *frames(audio[1]), COMMIT, *frames(audio[2]), FINISH]
    sent, ended = finish_session(msgs, engine, {"final_transcript": True})
    assert ended == "finished"
    last = sent[-1]
    assert last["type"] == "transcript.text.done" and last["event_id"].startswith("event_")
    assert types(sent)[-2] == "item.done" and types(sent).count("item.done") == 3
    live = [(e["start"], e["speaker"]) for e in sent if e["type"].endswith(".segment")]
    assert [s for _, s in live] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_00"]
    assert last["text"] == "one two three"
    assert [(s["start"], s["end"], s["text"], s["speaker"]) for s in last["segments"]] == [
        (0.0, 2.0, "one", "SPEAKER_00"), (2.0, 4.0, "two", "SPEAKER_01"), (4.2, 4.8, "three", "SPEAKER_02")]
    assert all(s["type"] == "transcript.text.segment" for s in last["segments"])
    (audio_in, config), = engine.final_calls
    assert len(audio_in) == 5 * SR and np.allclose(audio_in, np.concatenate(audio), atol=3 / 32768)
    assert engine.asked[-1] == ("transcribe_session", Priority.FILE)  # file work, after every live call
    assert (config.language, config.prompt, config.max_speakers) == ("en", "Hi", 3)


def test_a_final_pass_turned_on_mid_session_is_on_the_session_clock_and_cleared_audio_is_silent():
    engine = FinalEngine(offline((0.5, 1.5, "late", "SPEAKER_00"), duration=2.0))
    on = json.dumps({"type": "session.update", "session": {"type": "transcription",
                                                           "speaker_asr": {"final_transcript": True}}})
    msgs = [*frames(speech(1.0)), COMMIT, on, *frames(speech(0.5)), '{"type": "input_audio_buffer.clear"}',
            *frames(speech(1.5, 0.1)), FINISH]
    sent, ended = finish_session(msgs, engine)
    (audio_in, _), = engine.final_calls
    assert len(audio_in) == 2 * SR  # from the update on
    assert not audio_in[:SR // 2].any() and audio_in[SR // 2:].any()  # the cleared half second
    last = sent[-1]
    # 1 s later on the clock; the live speaker of that stretch is SPEAKER_00 too
    assert [(s["start"], s["end"], s["speaker"]) for s in last["segments"]] == [(1.5, 2.5, "SPEAKER_00")]


def test_a_failed_final_pass_is_an_error_without_internals():
    sent, ended = finish_session([*frames(speech(1.0)), FINISH], FinalEngine(fail_final=True),
                                 {"final_transcript": True})
    assert ended == "final_pass_failed"
    error = sent[-1]
    assert error["type"] == "error" and error["error"]["type"] == "server_error"
    assert error["error"]["code"] == "final_transcript_failed" and "boom" not in json.dumps(error)
    assert types(sent)[-2] == "item.done"  # the items were finished first


def test_events_after_the_finish_are_refused():
    sent, ended = finish_session([*frames(speech(1.0)), FINISH, COMMIT], FinalEngine())
    errors = [e["error"] for e in sent if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["session_ending"]
    assert "speaker_asr.session.finish" in errors[0]["message"]


def test_a_failed_item_is_done_with_a_null_transcript():
    sent = run_session([*frames(speech(1.0)), COMMIT], engine=FakeEngine(fail=True), vad=False)
    assert types(sent)[-2:] == ["failed", "item.done"]
    assert sent[-1]["item"]["content"] == [{"type": "input_audio", "transcript": None}]


def test_a_client_that_leaves_stops_the_final_pass_on_the_model_thread():
    import threading

    from speaker_asr.live.final_pass import FinalPassCancelled

    started, stopped = threading.Event(), threading.Event()

    class SlowEngine(FakeEngine):
        threaded = True

        def transcribe_session_now(self, audio, config, progress):
            started.set()
            try:
                for _ in range(500):  # ~10 s unless stopped
                    progress(None)
                    threading.Event().wait(0.02)
            except FinalPassCancelled:
                stopped.set()
                raise
            raise AssertionError("the final pass was not stopped")

    async def send(event):
        pass

    async def main():
        session = LiveSession(send, SlowEngine(), LoudVad)
        await session.start()
        await session.handle(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "speaker_asr": {"final_transcript": True},
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}}))
        for m in frames(speech(0.5)):
            await session.handle(m)
        await session.handle(FINISH)
        assert await asyncio.to_thread(started.wait, 10)
        await session.close()  # the client left
        assert session.ending.cancelled()
        assert await asyncio.to_thread(stopped.wait, 5)

    asyncio.run(main())


def test_with_server_vad_the_finish_commits_the_open_utterance_but_not_the_padding():
    sent, _ = finish_session([*frames(silence(0.5)), *frames(speech(2.0)), FINISH], FinalEngine(), vad=True)
    kinds = types(sent)[2:]
    assert kinds[0] == "speech_started" and "speech_stopped" not in kinds
    assert kinds.count("committed") == 1 and kinds[-3:] == ["completed", "segment", "item.done"]
    sent, ended = finish_session([*frames(silence(1.0)), FINISH], FinalEngine(), vad=True)
    assert types(sent)[2:] == [] and ended == "finished"


# -- the route (speaker_asr/serving/realtime.py) around the session, on a stand-in socket -------

class FakeSocket:
    """What the route uses of Starlette's WebSocket; ``incoming`` feeds ``receive``."""

    def __init__(self):
        self.scope, self.headers, self.query_params = {"subprotocols": []}, {}, {"intent": "transcription"}
        self.incoming: asyncio.Queue = asyncio.Queue()
        self.sent, self.close_code = [], None

    async def accept(self, subprotocol=None):
        pass

    async def receive(self):
        return await self.incoming.get()

    async def send_text(self, text):
        if self.close_code is not None:
            raise RuntimeError("closed")
        self.sent.append(json.loads(text))

    async def close(self, code=1000, reason=None):
        self.close_code = code

    def put(self, text):
        self.incoming.put_nowait({"type": "websocket.receive", "text": text})

    def put_items(self, count: int, seconds: float = 0.5):
        """A session with manual commits (16 kHz PCM), then ``count`` items of ``seconds`` of
        speech, each committed."""
        self.put(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}}))
        for _ in range(count):
            for m in frames(speech(seconds), ms=100):
                self.put(m)
            self.put('{"type": "input_audio_buffer.commit"}')


def route_with(engine, max_session_s: float = 60.0):
    from speaker_asr.serving.metrics import Metrics
    from speaker_asr.serving.realtime import RealtimeRoute

    class Runner:
        ready, max_queue, rejected_queue_full, dropped_disconnected, load_seconds, handler = True, 1, 0, 0, None, None
        models = None

        def counts(self):
            return 0, 0

        def not_ready(self):
            return None

    metrics = Metrics(Runner())
    route = RealtimeRoute(Runner(), None, 1, max_session_s, 1 << 20, vad_factory=LoudVad, metrics=metrics)
    route.engine = engine
    return route, metrics.registry


def test_the_route_expires_a_session_and_counts_it():
    route, registry = route_with(FakeEngine(), max_session_s=0.2)
    socket = FakeSocket()
    asyncio.run(route.endpoint(socket))
    assert socket.sent[0]["type"] == "session.created"
    assert socket.sent[-1]["error"]["code"] == "session_expired" and socket.close_code == 1000
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "expired"}) == 1
    assert registry.get_sample_value("asr_live_sessions_open") == 0 and route.open == 0


def test_a_session_the_measured_load_cannot_serve_is_refused_at_its_start_and_counted():
    class BusyEngine(FakeEngine):
        def live_load(self, window_s=60.0):
            return 0.5  # the open session's final decodes hold the model half of the time

    import time

    route, registry = route_with(BusyEngine())
    route.max_sessions, route.open = 4, 1
    route._open_since = [time.monotonic() - 5]  # too young to have been measured: taken
    socket = FakeSocket()
    socket.put(json.dumps({"type": "speaker_asr.session.finish"}))
    asyncio.run(route.endpoint(socket))
    assert socket.sent[0]["type"] == "session.created"
    route._open_since = [time.monotonic() - 30]
    socket = FakeSocket()
    asyncio.run(route.endpoint(socket))
    error = socket.sent[0]["error"]
    assert error["code"] == "server_at_capacity" and "about 100%, past LIVE_MAX_LOAD (80%)" in error["message"]
    assert socket.close_code == 1013 and route.open == 1
    assert registry.get_sample_value("asr_live_sessions_refused_total", {"code": "server_at_capacity"}) == 1
    route.open, route._open_since = 0, []  # the first session is never refused by its load
    socket = FakeSocket()
    socket.put(json.dumps({"type": "speaker_asr.session.finish"}))
    asyncio.run(route.endpoint(socket))
    assert socket.sent[0]["type"] == "session.created"


def test_a_client_that_leaves_during_the_final_pass_stops_it_and_is_counted():
    import threading

    from speaker_asr.live.final_pass import FinalPassCancelled

    started, stopped = threading.Event(), threading.Event()

    class SlowEngine(FakeEngine):
        threaded = True

        def transcribe_session_now(self, audio, config, progress):
            started.set()
            try:
                for _ in range(500):
                    progress(None)
                    threading.Event().wait(0.02)
            except FinalPassCancelled:
                stopped.set()
                raise

    route, registry = route_with(SlowEngine())
    socket = FakeSocket()

    async def main():
        serving = asyncio.ensure_future(route.endpoint(socket))
        socket.put(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "speaker_asr": {"final_transcript": True},
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}}))
        for m in frames(speech(1.0)):
            socket.put(m)
        socket.put(FINISH)
        assert await asyncio.to_thread(started.wait, 10)
        socket.incoming.put_nowait({"type": "websocket.disconnect", "code": 1001})
        await asyncio.wait_for(serving, 10)
        assert await asyncio.to_thread(stopped.wait, 5)

    asyncio.run(main())
    assert socket.close_code is None and "transcript.text.done" not in types(socket.sent)
    assert types(socket.sent)[-1] == "item.done"  # the items were finished before the pass began
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "client_closed"}) == 1
    assert registry.get_sample_value("asr_live_items_total", {"status": "completed"}) == 1
    assert registry.get_sample_value("asr_live_audio_seconds_total") == pytest.approx(1.0)


def test_a_client_that_leaves_while_the_route_waits_for_room_has_its_queued_items_dropped():
    """Items committed faster than the model decodes them fill the session's queue and the route
    holds back reading; the client's disconnect, read ahead meanwhile, ends the session at once:
    the items still queued are never decoded for nobody."""
    import threading

    decoding, release = threading.Event(), threading.Event()

    class SlowEngine(FakeEngine):
        threaded = True

        def decode_now(self, audio, config, previous=None, cancel=None):
            decoding.set()
            release.wait(10)
            return super().decode_now(audio, config, previous, cancel)

    engine = SlowEngine()
    route, registry = route_with(engine)
    socket = FakeSocket()

    async def main():
        serving = asyncio.ensure_future(route.endpoint(socket))
        socket.put_items(6)  # six items: one decoding, the queue full behind it
        assert await asyncio.to_thread(decoding.wait, 10)
        await asyncio.sleep(0.2)
        socket.incoming.put_nowait({"type": "websocket.disconnect", "code": 1001})
        await asyncio.wait_for(serving, 5)  # the route ends while the first decode still runs
        release.set()
        await asyncio.sleep(0.3)

    asyncio.run(main())
    assert len(engine.decodes) <= 1, engine.decodes
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "client_closed"}) == 1
    assert route.open == 0


def test_a_session_without_read_ahead_is_served_to_its_end():
    """LIVE_READ_AHEAD_BYTES=0 (no reading ahead while the model is behind): items queue, the
    route reads on as each is done, every item completes and the finish closes normally."""
    from speaker_asr.serving.live_limits import LiveLimits

    route, registry = route_with(FakeEngine())
    route.limits = LiveLimits(idle_timeout_s=30.0, send_timeout_s=30.0, read_ahead_bytes=0)
    socket = FakeSocket()
    socket.put_items(5)
    socket.put(FINISH)

    asyncio.run(asyncio.wait_for(route.endpoint(socket), 20))
    assert types(socket.sent).count("completed") == 5 and socket.close_code == 1000
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "finished"}) == 1


def test_an_expiry_on_a_client_that_reads_nothing_is_bounded_and_counted_as_expired():
    route, registry = route_with(FakeEngine(), max_session_s=0.3)
    route.limits = type(route.limits)(idle_timeout_s=30.0, send_timeout_s=30.0)
    socket = FakeSocket()
    stuck = asyncio.Event()

    async def send_text(text):
        if stuck.is_set():
            await asyncio.Event().wait()  # reads nothing
        socket.sent.append(json.loads(text))

    socket.send_text = send_text

    async def main():
        serving = asyncio.ensure_future(route.endpoint(socket))
        await asyncio.sleep(0.1)
        stuck.set()
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(serving, 10)
        return asyncio.get_running_loop().time() - started

    took = asyncio.run(main())
    assert took < 0.3 + 2 * 2.0 + 1.0  # the expiry, then the event and the close bounded (CLOSE_WAIT_S each)
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "expired"}) == 1
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "idle"}) == 0


class MultilingualEngine(FakeEngine):
    """A multilingual model whose language detection is wrong on less than 6 s of speech."""

    loaded = Loaded("fake-whisper", has_voices=True, multilingual=True)

    def __init__(self):
        super().__init__()
        self.detections = []  # seconds of audio each detection heard

    def language_now(self, audio):
        self.detections.append(len(audio) / SR)
        return "cy" if len(audio) < 6 * SR else "en"


def test_without_a_session_language_one_is_detected_on_the_speech_heard_and_then_kept(monkeypatch):
    from speaker_asr.live import language

    monkeypatch.setattr(language, "LANGUAGE_LOCK_S", 10.0)  # 30 s in production
    engine = MultilingualEngine()
    turns = [np.concatenate([speech(seconds), silence(1.0)]) for seconds in (2.0, 3.0, 3.0, 4.0, 2.0)]
    sent = run_session(frames(np.concatenate([silence(0.3), *turns])), engine=engine)
    assert sum(e["type"].endswith(".completed") for e in sent) == 5
    # one detection per item until 10 s of speech were heard: on that speech, not the item alone
    heard = engine.detections
    assert len(heard) == 4 and heard[0] < 2 and heard[1] > heard[0] + 2 and heard[-1] >= 10, heard
    # every decode of an item in the language detected for it; the last item's is the kept one
    assert engine.languages[0] == "cy" and engine.languages[-1] == "en"
    assert set(engine.languages) == {"cy", "en"}
    # the item's decodes wait for its language: it ranks as a final decode
    assert {p for call, p in engine.asked if call == "language"} == {Priority.LIVE_FINAL}


def test_a_session_language_is_never_detected():
    engine = MultilingualEngine()
    run_session(frames(np.concatenate([silence(0.3), speech(2.0), silence(1.0)])), engine=engine,
                transcription={"language": "de"})
    assert engine.detections == [] and set(engine.languages) == {"de"}


def test_a_live_decode_makes_at_most_a_few_tokens_per_second_of_audio():
    """A decode that loops (a wrong language, a hallucination) stops near the audio's length in
    tokens instead of Whisper's 448: 2 s of audio, 54 tokens at most. The engine reaches the ASR
    through the models layer (speaker_asr/models.py), under its lock, as a runner's live call of
    the priority asked for (a final decode's by default)."""
    import types

    from speaker_asr.config import ModelCapabilities
    from speaker_asr.live.engine import RunnerEngine
    from speaker_asr.models import Models
    from speaker_asr.types import Transcript

    calls = []

    def transcribe(audio, config, **kwargs):
        assert models.scheduler.snapshot()["asr"]["running"] is not None  # on the ASR lane, whoever calls
        calls.append(kwargs)
        return Transcript(text=" hello", chunks=[], language="en", words=[Word(" hello", 0.0, 0.5)])

    asr = types.SimpleNamespace(has_alignment_heads=True, transcribe=transcribe,
                                capabilities=lambda has_diarization: ModelCapabilities())
    models = Models(asr)
    priorities = []

    async def call(fn, priority):  # the runner's live calls (ModelRunner.call)
        priorities.append(priority)
        return await asyncio.to_thread(fn)

    engine = RunnerEngine(types.SimpleNamespace(models=models, call=call))
    config = None
    decoded = asyncio.run(engine.decode(np.zeros(2 * SR, np.float32), config))
    assert decoded.text == "hello" and calls[0]["max_new_tokens"] == 54
    asyncio.run(engine.decode(np.zeros(20 * SR, np.float32), config, decoded, priority=Priority.LIVE_PARTIAL))
    assert calls[1]["max_new_tokens"] == 324 and calls[1]["draft"].given is None  # no tokens kept
    assert priorities == [Priority.LIVE_FINAL, Priority.LIVE_PARTIAL]


def test_the_engines_speaker_calls_run_beside_the_asr_and_a_cancelled_one_stops_at_its_next_unit():
    """An item's speakers run on the diarization pool, holding its lane as a job of the priority
    asked for; a known speakers' roster is one live call, its voices by name. A speaker call
    cancelled once running stops at its next unit (the model's checkpoint)."""
    import threading
    import time
    import types

    from speaker_asr.config import ModelCapabilities
    from speaker_asr.live.engine import RunnerEngine
    from speaker_asr.models import Models
    from speaker_asr.scheduling import WorkCancelled, checkpoint

    started, stopped, seen = threading.Event(), threading.Event(), []

    class Diarizer:
        has_voices = True

        def embed(self, audio):
            seen.append((threading.current_thread().name, models.scheduler.snapshot()["diarization"]["running"]))
            return np.ones(2)

        def activity(self, audio):
            started.set()
            try:
                for _ in range(500):  # ~5 s unless stopped
                    checkpoint()
                    time.sleep(0.01)
            except WorkCancelled:
                stopped.set()
                raise
            raise AssertionError("the look was not stopped")

        def reference(self, index, name, clip):
            return np.array([float(index), float(clip)])

    asr = types.SimpleNamespace(capabilities=lambda has_diarization: ModelCapabilities())
    models = Models(asr, Diarizer())
    priorities = []

    async def call(fn, priority):  # the runner's live calls (ModelRunner.call)
        priorities.append(priority)
        return await asyncio.to_thread(fn)

    engine = RunnerEngine(types.SimpleNamespace(models=models, call=call))

    async def main():
        assert (await engine.embed(np.zeros(SR, np.float32))).tolist() == [1.0, 1.0]
        await engine.embed(np.zeros(SR, np.float32), priority=Priority.FILE)
        known = await engine.references(["Alice", "Bob"], [3, 4])
        assert {name: v.tolist() for name, v in known.items()} == {"Alice": [0.0, 3.0], "Bob": [1.0, 4.0]}
        look = asyncio.ensure_future(engine.activity(np.zeros(SR, np.float32)))
        assert await asyncio.to_thread(started.wait, 5)
        look.cancel()
        with pytest.raises(asyncio.CancelledError):
            await look
        assert await asyncio.to_thread(stopped.wait, 5)

    asyncio.run(main())
    assert [name.startswith("diarization") for name, _ in seen] == [True, True]
    assert [running["priority"] for _, running in seen] == ["live_speakers", "file"]
    assert priorities == [Priority.LIVE_SPEAKERS]


def test_a_final_decode_stops_the_other_sessions_partials_but_not_one_that_may_be_a_final():
    """Sessions share the model thread: when an item is committed, every session's partial
    decode of a still growing utterance stops at its next token (it can be made again later;
    the final should not wait behind it), but not a partial made in a pause, which may be its
    own utterance's final decode, nor the committing session's own partial that can be its."""
    import threading
    import types

    from speaker_asr.live.engine import RunnerEngine

    partials = RunnerEngine(types.SimpleNamespace(models=None)).partials
    growing, paused, own = threading.Event(), threading.Event(), threading.Event()
    with partials.running(growing), partials.running(paused, preemptible=False), partials.running(own):
        partials.preempt(keep=own)
    assert growing.is_set() and not paused.is_set() and not own.is_set()
    ended = threading.Event()
    with partials.running(ended):
        pass
    partials.preempt()
    assert not ended.is_set()  # a partial that has ended is not in hand


def loudness_activity(audio):
    """A stand-in segmentation: per 20 ms frame, local speaker 0 for a quiet voice, 1 for a loud one."""
    from speaker_asr.diarization.frames import Activity

    step = SR // 50
    rms = np.array([np.sqrt(np.mean(audio[i:i + step] ** 2)) for i in range(0, len(audio) - step + 1, step)])
    return Activity(np.stack([(rms > 0.05) & (rms < 0.2), rms >= 0.2], axis=1), 0.02)


def test_an_item_ends_where_another_person_takes_over_and_its_segments_come_before_the_next_item():
    """Two voices with no pause between them (the VAD hears one utterance): the growing item's
    speaker activity shows the hand-over, so the item ends there (speech_stopped at the cut,
    then a new item from the same point), each item has its own speaker, and an item's segments
    are sent before the next item completes."""
    engine = FakeEngine(activity=loudness_activity)
    audio = np.concatenate([silence(0.5), speech(2.0, 0.1), speech(2.0, 0.5), silence(1.0)])
    sent = run_session(frames(audio), engine=engine)
    stopped = [e for e in sent if e["type"].endswith("speech_stopped")]
    started = [e for e in sent if e["type"].endswith("speech_started")]
    assert len(stopped) == len(started) == 2
    assert abs(stopped[0]["audio_end_ms"] - 2500) <= 60  # where the loud voice began
    assert started[1]["audio_start_ms"] == stopped[0]["audio_end_ms"]
    assert abs(stopped[1]["audio_end_ms"] - 4500) <= 60
    segments = [e for e in sent if e["type"].endswith(".segment")]
    assert [(s["item_id"], s["speaker"]) for s in segments] == [
        (stopped[0]["item_id"], "SPEAKER_00"), (stopped[1]["item_id"], "SPEAKER_01")]
    order = [(e["type"].rsplit(".", 1)[-1], item_of(e)) for e in sent if e["type"].endswith((".segment", ".completed"))]
    assert order == [("completed", stopped[0]["item_id"]), ("segment", stopped[0]["item_id"]),
                     ("completed", stopped[1]["item_id"]), ("segment", stopped[1]["item_id"])]
    # the first item's text is its own audio's: its final decode did not hear the second voice
    completed = [e for e in sent if e["type"].endswith(".completed")]
    assert completed[0]["usage"]["seconds"] == pytest.approx(2.1, abs=0.06)
    assert engine.looked and max(engine.looked) <= 4.2 * SR


def test_one_voice_is_one_item_whatever_its_length():
    engine = FakeEngine(activity=loudness_activity)
    sent = run_session(frames(np.concatenate([silence(0.5), speech(6.0, 0.1), silence(1.0)])), engine=engine)
    assert types(sent).count("committed") == 1 and len(engine.looked) >= 10


def test_a_partial_decode_the_utterances_end_made_useless_is_stopped_at_once():
    """A partial decode still running when the utterance ends, of audio that is not the item's
    whole speech, is cancelled: the final decode does not wait behind it."""
    import time as _time

    cancelled = []

    class SlowPartials(FakeEngine):
        threaded = True

        def busy(self):
            return False

        def decode_now(self, audio, config, previous=None, cancel=None):
            if len(audio) < 2.0 * SR and cancel is not None:  # the partial of the first 2 s: slow
                if cancel.wait(5.0):
                    cancelled.append(len(audio))
                    raise RuntimeError("cancelled")
            return super().decode_now(audio, config, previous, cancel)

    times = {}

    async def send(event):
        data = event.to_json() if hasattr(event, "to_json") else event
        kind = json.loads(data)["type"] if isinstance(data, str) else data["type"]
        times.setdefault(kind, _time.monotonic())

    async def main():
        session = LiveSession(send, SlowPartials(), LoudVad)
        await session.start()
        await session.handle(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 16000},
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100}}}}}))
        for m in frames(np.concatenate([silence(0.5), speech(2.5), silence(0.6)])):
            await session.handle(m)
            await asyncio.sleep(0.001)
        await session.drain()
        await session.close()

    asyncio.run(main())
    assert cancelled, "the slow partial was not cancelled"
    completed = times["conversation.item.input_audio_transcription.completed"]
    assert completed - times["input_audio_buffer.committed"] < 1.0


def test_at_the_servers_stop_each_committed_item_not_yet_done_gets_a_failed_event():
    """SIGTERM while items wait for the model: each committed item whose transcript has not
    gone out gets its ``failed`` event saying why, before the session's error and close 1012;
    the item already completed gets none; the failures are counted."""
    import threading

    decoding, release = threading.Event(), threading.Event()

    class SlowEngine(FakeEngine):
        threaded = True

        def decode_now(self, audio, config, previous=None, cancel=None):
            if len(self.decodes) >= 1:  # the first item completes, the second hangs in the model
                decoding.set()
                release.wait(10)
            return super().decode_now(audio, config, previous, cancel)

    route, registry = route_with(SlowEngine())
    socket = FakeSocket()

    async def main():
        serving = asyncio.ensure_future(route.endpoint(socket))
        socket.put_items(3)
        assert await asyncio.to_thread(decoding.wait, 10)
        await asyncio.sleep(0.2)
        await route.shut_down()
        release.set()
        await asyncio.wait_for(serving, 10)

    asyncio.run(main())
    committed = [e["item_id"] for e in socket.sent if e["type"] == "input_audio_buffer.committed"]
    completed = [e["item_id"] for e in socket.sent if e["type"].endswith(".completed")]
    failed = [e for e in socket.sent if e["type"].endswith(".failed")]
    assert len(committed) == 3 and completed == committed[:1]
    assert [e["item_id"] for e in failed] == committed[1:]
    assert all(e["error"]["code"] == "server_shutting_down" for e in failed)
    assert socket.sent[-1]["error"]["code"] == "server_shutting_down" and socket.close_code == 1012
    assert registry.get_sample_value("asr_live_items_total", {"status": "failed"}) == 2
    assert registry.get_sample_value("asr_live_sessions_ended_total", {"outcome": "server_shutdown"}) == 1


def test_an_appends_decoding_and_vad_run_off_the_event_loop():
    """A slow VAD (or a large frame to decode) holds only its own session: the event loop keeps
    running other work (other sessions, /health, the timers) meanwhile."""
    import time

    class SlowVad(LoudVad):
        def probabilities(self, samples):
            time.sleep(0.3)
            return super().probabilities(samples)

    ticks = []

    async def main():
        sent = []

        async def send(event):
            sent.append(event)

        session = LiveSession(send, FakeEngine(), SlowVad)
        await session.start()
        await session.handle(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {
            "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": {"type": "server_vad"}}}}}))

        async def ticker():
            for _ in range(20):
                ticks.append(asyncio.get_running_loop().time())
                await asyncio.sleep(0.02)

        tick = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.05)  # the ticker runs
        for m in list(frames(speech(0.2), ms=100)):
            await session.handle(m)
        await tick
        await session.close()

    asyncio.run(main())
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < 0.2  # never held for the VAD's 0.3 s
