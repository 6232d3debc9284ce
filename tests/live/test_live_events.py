"""The Realtime (GA) transcription events (speaker_asr/live/protocol/) from hand-made messages:
client events parsed or refused with OpenAI's error object, the session changed by
session.update, and every server event read back by the official SDK's own types."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from speaker_asr.formats.openai_shapes import done_event

from speaker_asr.live.protocol import (CLIENT_EVENT_TYPES, Cleared, Committed, DurationUsage, ErrorEvent,
                                     FailureDetail, InputAudioBufferAppend, InputAudioBufferClear,
                                     InputAudioBufferCommit, ItemAdded, ItemDone, ProtocolError,
                                     SegmentWord, SessionCreated, SessionFinish, SessionUpdate,
                                     SessionUpdated, SpeechStarted, SpeechStopped, TranscriptDone,
                                     TranscriptionCompleted, TranscriptionDelta, TranscriptionFailed,
                                     TranscriptionSegment, TranscriptionSession, UserAudioItem,
                                     commit_empty_error, parse_client_event, server_error)


def refused(message) -> dict:
    """The error object a bad client event is answered with."""
    with pytest.raises(ProtocolError) as caught:
        parse_client_event(message)
    event = caught.value.event().to_json()
    assert event["type"] == "error" and event["event_id"].startswith("event_")
    return event["error"]


def update(session: dict, event_id: str = "evt_1") -> SessionUpdate:
    event = parse_client_event(json.dumps({"type": "session.update", "event_id": event_id,
                                           "session": {"type": "transcription", **session}}))
    assert isinstance(event, SessionUpdate)
    return event


# -- client events ------------------------------------------------------------------------------

def test_the_client_events_parse_from_json_text_and_bytes():
    append = parse_client_event('{"type": "input_audio_buffer.append", "audio": "AAA=", "event_id": "a1"}')
    assert isinstance(append, InputAudioBufferAppend) and append.audio == "AAA=" and append.event_id == "a1"
    assert isinstance(parse_client_event(b'{"type": "input_audio_buffer.commit"}'), InputAudioBufferCommit)
    assert isinstance(parse_client_event({"type": "input_audio_buffer.clear"}), InputAudioBufferClear)
    assert update({}).session.type == "transcription"
    finish = parse_client_event('{"type": "speaker_asr.session.finish", "event_id": "f1"}')
    assert isinstance(finish, SessionFinish) and finish.event_id == "f1"
    assert refused({"type": "speaker_asr.session.finish", "final": True})["code"] == "unknown_parameter"


def test_an_unknown_type_lists_the_known_ones_and_echoes_the_clients_event_id():
    error = refused('{"type": "input_audio_buffer.apend", "event_id": "c7"}')
    assert error == {
        "type": "invalid_request_error", "code": "invalid_value", "param": "type", "event_id": "c7",
        "message": "Invalid value: 'input_audio_buffer.apend'. Supported values are: 'session.update', "
                   "'input_audio_buffer.append', 'input_audio_buffer.commit', 'input_audio_buffer.clear', "
                   "and 'speaker_asr.session.finish'. Did you mean 'input_audio_buffer.append'?"}
    assert all(t in refused('{"type": "ping"}')["message"] for t in CLIENT_EVENT_TYPES)


def test_beta_and_conversation_events_are_refused_with_what_to_do_instead():
    beta = refused({"type": "transcription_session.update", "session": {}})
    assert "beta protocol" in beta["message"] and "session.type 'transcription'" in beta["message"]
    assert "no conversation or responses" in refused({"type": "response.create"})["message"]


def test_messages_that_are_not_events_say_so():
    assert refused("{not json")["code"] == "invalid_json"
    assert refused(b"\xff\xfe")["code"] == "invalid_json"
    assert refused("[1, 2]") == {"type": "invalid_request_error", "code": "invalid_type", "param": None,
                                 "event_id": None, "message": "Invalid type for the event: expected a "
                                 "JSON object with a 'type', but got an array."}
    missing = refused({"audio": "AAA="})
    assert missing["code"] == "missing_required_parameter" and missing["param"] == "type"
    assert refused({"type": 3})["code"] == "invalid_type"


def test_fields_are_checked_strictly_and_named_by_their_path():
    assert refused({"type": "input_audio_buffer.append", "audio": 5, "event_id": "e5"}) == {
        "type": "invalid_request_error", "code": "invalid_type", "param": "audio", "event_id": "e5",
        "message": "Invalid type for 'audio': expected a string, but got an integer."}
    assert refused({"type": "input_audio_buffer.append"})["message"] == "Missing required parameter: 'audio'."
    unknown = refused({"type": "input_audio_buffer.commit", "item_id": "x"})
    assert unknown["code"] == "unknown_parameter"
    assert unknown["message"] == "Unknown parameter: 'item_id'. Allowed here: event_id, type."


@pytest.mark.parametrize("session, param, words", [
    ({"type": "realtime"}, "session.type", "this endpoint serves transcription sessions"),
    ({"audio": {"input": {"format": {"type": "audio/wav"}}}}, "session.audio.input.format.type",
     "audio/pcm (16-bit little-endian mono PCM; rate 24000, or 16000 on this server), audio/pcmu "
     "(G.711 mu-law, 8000 Hz) or audio/pcma (G.711 A-law, 8000 Hz)"),
    ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 44100}}}},
     "session.audio.input.format.rate", "Supported values are: 24000 (the protocol's) and 16000"),
    ({"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}},
     "session.audio.input.format.rate", "audio/pcmu is G.711 at 8000 Hz"),
    ({"audio": {"input": {"format": "pcm16"}}}, "session.audio.input.format", "In the GA protocol it is an object"),
    ({"audio": {"input": {"format": None}}}, "session.audio.input.format", "Give a format: audio/pcm"),
    ({"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}},
     "session.audio.input.turn_detection.type", "Supported values are: 'server_vad'"),
    ({"audio": {"input": {"turn_detection": {"threshold": 0.3}}}},
     "session.audio.input.turn_detection.type", "Missing required parameter"),
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 1.5}}}},
     "session.audio.input.turn_detection.threshold", "less than or equal to 1"),
    ({"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": None}}}},
     "session.audio.input.turn_detection.silence_duration_ms", "leave silence_duration_ms out to keep it"),
    ({"audio": {"input": {"transcription": None}}}, "session.audio.input.transcription",
     "This server always transcribes"),
    ({"audio": {"input": {"transcription": {"modle": "whisper-1"}}}},
     "session.audio.input.transcription.modle", "Did you mean 'model'? Allowed here: model, language, prompt"),
    ({"audio": {"input": {"transcription": {"delay": "low"}}}}, "session.audio.input.transcription.delay",
     "is not available on this server"),
    ({"audio": {"input": {"transcription": {"prompt": "x" * 801}}}}, "session.audio.input.transcription.prompt",
     "at most 800 characters"),
    ({"audio": {"output": {"voice": "alloy"}}}, "session.audio.output", "makes no audio"),
    ({"include": ["item.input_audio_transcription.logprobs"]}, "session.include", "Log-probabilities"),
    ({"speaker_asr": {"max_speakers": True}}, "session.speaker_asr.max_speakers",
     "expected an integer, but got a boolean"),
    ({"speaker_asr": {"known_speaker_references": [3]}}, "session.speaker_asr.known_speaker_references[0]",
     "expected a string or an array, but got an integer"),
    ({"speaker_asr": {"diarize": True}}, "session.speaker_asr.diarize", "Allowed here: speaker_labels"),
])
def test_a_bad_session_update_names_the_field_and_what_is_allowed(session, param, words):
    error = refused({"type": "session.update", "event_id": "u1", "session": {"type": "transcription", **session}})
    assert error["param"] == param and error["event_id"] == "u1"
    assert words in error["message"], error["message"]


# -- the session ----------------------------------------------------------------------------------

def test_a_new_session_shows_its_defaults():
    session = TranscriptionSession.new("openai/whisper-large-v3")
    shown = session.to_json()
    assert shown["id"].startswith("sess_") and shown["object"] == "realtime.transcription_session"
    assert shown["type"] == "transcription" and shown["include"] is None
    assert shown["audio"] == {"input": {
        "format": {"type": "audio/pcm", "rate": 24000},
        "transcription": {"model": "openai/whisper-large-v3", "language": None, "prompt": None},
        "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                           "silence_duration_ms": 500},
        "noise_reduction": None}}
    assert shown["speaker_asr"] == {"speaker_labels": True, "max_speakers": None,
                                    "speaker_match_threshold": None, "known_speaker_names": [],
                                    "return_word_timestamps": False, "final_transcript": False}
    assert session.format.sample_rate == 24000


def test_an_update_changes_only_the_fields_it_names():
    session = TranscriptionSession.new("m")
    changed = session.apply(update({"audio": {"input": {
        "transcription": {"language": "fr"},
        "turn_detection": {"type": "server_vad", "threshold": 0.7}}}}).session)
    assert changed.id == session.id
    assert changed.audio.input.transcription.model_dump() == {"model": "m", "language": "fr", "prompt": None}
    assert changed.turn_detection.model_dump() == {"type": "server_vad", "threshold": 0.7,
                                                   "prefix_padding_ms": 300, "silence_duration_ms": 500}
    assert changed.format == session.format and changed.speaker_asr == session.speaker_asr
    # null turns the VAD off; a later object turns it on again from the defaults
    off = changed.apply(update({"audio": {"input": {"turn_detection": None}}}).session)
    assert off.turn_detection is None and off.audio.input.transcription.language == "fr"
    on = off.apply(update({"audio": {"input": {"turn_detection": {"type": "server_vad",
                                                                   "silence_duration_ms": 800}}}}).session)
    assert (on.turn_detection.threshold, on.turn_detection.silence_duration_ms) == (0.5, 800)
    # a field given as null is cleared
    assert on.apply(update({"audio": {"input": {"transcription": {"language": None}}}}).session) \
        .audio.input.transcription.language is None


def test_a_format_is_replaced_whole_and_16_khz_pcm_is_our_extension():
    session = TranscriptionSession.new()
    mulaw = session.apply(update({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}).session)
    assert mulaw.to_json()["audio"]["input"]["format"] == {"type": "audio/pcmu"}  # no rate kept from pcm
    assert mulaw.format.sample_rate == 8000
    pcm16k = mulaw.apply(update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}).session)
    assert pcm16k.to_json()["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
    pcm = pcm16k.apply(update({"audio": {"input": {"format": {"type": "audio/pcm"}}}}).session)
    assert pcm.format.sample_rate == 24000
    assert mulaw.apply(update({"audio": {"input": {"format": {"type": "audio/pcma"}}}}).session) \
        .format.type == "audio/pcma"


def test_accepted_but_not_applied_settings_do_not_show_in_the_effective_session():
    session = TranscriptionSession.new().apply(update({"audio": {"input": {
        "noise_reduction": {"type": "near_field"},
        "turn_detection": {"type": "server_vad", "create_response": True, "interrupt_response": False,
                           "idle_timeout_ms": 5000}}}}).session)
    shown = session.to_json()["audio"]["input"]
    assert shown["noise_reduction"] is None
    assert set(shown["turn_detection"]) == {"type", "threshold", "prefix_padding_ms", "silence_duration_ms"}


def test_known_speakers_follow_the_v1_rules_and_their_clips_are_never_echoed():
    clip = "UklGRg==" * 10
    session = TranscriptionSession.new().apply(update({"speaker_asr": {
        "known_speaker_names": [" Alice ", "Bob"], "known_speaker_references": [clip, [0.1, 0.2]],
        "max_speakers": 3, "return_word_timestamps": True}}).session)
    assert session.speaker_asr.known_speaker_names == ["Alice", "Bob"]
    assert session.speaker_asr.known_speaker_references == [clip, [0.1, 0.2]]
    shown = json.dumps(SessionUpdated(session=session).to_json())
    assert clip not in shown and "known_speaker_references" not in shown
    assert session.to_json()["speaker_asr"]["known_speaker_names"] == ["Alice", "Bob"]
    # another update keeps them (the clips too), two empty lists remove them
    kept = session.apply(update({"speaker_asr": {"speaker_labels": False}}).session)
    assert kept.speaker_asr.known_speaker_references == [clip, [0.1, 0.2]]
    gone = kept.apply(update({"speaker_asr": {"known_speaker_names": [], "known_speaker_references": []}}).session)
    assert gone.speaker_asr.known_speaker_names == [] and gone.speaker_asr.known_speaker_references == []


@pytest.mark.parametrize("speakers, param, words", [
    ({"known_speaker_names": ["Bob"]}, "session.speaker_asr.known_speaker_references", "in the same update"),
    ({"known_speaker_names": ["A", "B"], "known_speaker_references": ["x"]},
     "session.speaker_asr.known_speaker_names", "1 entries for 2 known_speaker_names"),
    ({"known_speaker_names": ["SPEAKER_01"], "known_speaker_references": ["x"]},
     "session.speaker_asr.known_speaker_names", "looks like the label of an unnamed speaker"),
    ({"known_speaker_names": ["A", "A"], "known_speaker_references": ["x", "y"]},
     "session.speaker_asr.known_speaker_names", "twice"),
    ({"known_speaker_names": ["A", "B"], "known_speaker_references": ["x", "y"], "max_speakers": 1},
     "session.speaker_asr.max_speakers", "counts the known speakers too: give at least 2"),
])
def test_rules_across_fields_are_checked_when_the_update_is_applied(speakers, param, words):
    with pytest.raises(ProtocolError) as caught:
        TranscriptionSession.new().apply(update({"speaker_asr": speakers}, "u2").session, event_id="u2")
    error = caught.value.event().error
    assert (error.param, error.event_id, error.type) == (param, "u2", "invalid_request_error")
    assert words in error.message, error.message


# -- server events --------------------------------------------------------------------------------

def server_events() -> list:
    session = TranscriptionSession.new("openai/whisper-large-v3")
    return [
        SessionCreated(session=session), SessionUpdated(session=session),
        SpeechStarted(audio_start_ms=1200, item_id="item_1"), SpeechStopped(audio_end_ms=3400, item_id="item_1"),
        Committed(item_id="item_1"), Committed(item_id="item_2", previous_item_id="item_1"), Cleared(),
        ItemAdded(item=UserAudioItem.of("item_1")),
        ItemDone(previous_item_id="item_0", item=UserAudioItem.of("item_1", "Hello there.")),
        TranscriptionDelta(item_id="item_1", delta="Hello"),
        TranscriptionCompleted(item_id="item_1", transcript="Hello there.", usage=DurationUsage(seconds=2.2)),
        TranscriptionFailed(item_id="item_1", error=FailureDetail(type="server_error", message="failed")),
        TranscriptionSegment(item_id="item_1", id="seg_0", start=1.2, end=3.4, text="Hello there.",
                             speaker="SPEAKER_00"),
        TranscriptionSegment(item_id="item_1", id="seg_1", start=1.2, end=3.4, text="Hello there.",
                             speaker="Alice", words=[SegmentWord(word="Hello", start=1.2, end=1.6)]),
        TranscriptDone(**done_event(two_speakers(), segments=True)),
        commit_empty_error(50.0, "c3"), server_error(),
    ]


def two_speakers():
    from speaker_asr.result import Result
    from speaker_asr.types import Segment

    return Result(" Hi. Hello.", [Segment(" Hi.", 0.0, 1.0, "SPEAKER_00"), Segment(" Hello.", 1.0, 2.0, "Alice")],
                  "en", 2.0, diarized=True, warnings=["w"])


def test_server_events_have_their_shapes_and_fresh_ids():
    events = [e.to_json() for e in server_events()]
    assert len({e["event_id"] for e in events}) == len(events)
    by_type = {e["type"]: e for e in events}
    first, second = (e for e in events if e["type"] == "input_audio_buffer.committed")
    assert first["previous_item_id"] is None and second["previous_item_id"] == "item_1"  # written, null
    assert by_type["conversation.item.input_audio_transcription.completed"]["usage"] == {
        "type": "duration", "seconds": 2.2}
    delta = by_type["conversation.item.input_audio_transcription.delta"]
    assert delta == {"event_id": delta["event_id"], "type": "conversation.item.input_audio_transcription.delta",
                     "item_id": "item_1", "content_index": 0, "delta": "Hello"}
    plain, worded = (e for e in events if e["type"].endswith(".segment"))
    assert "words" not in plain and worded["words"] == [{"word": "Hello", "start": 1.2, "end": 1.6}]
    assert events[-2]["error"] == {
        "type": "invalid_request_error", "code": "input_audio_buffer_commit_empty", "param": None,
        "event_id": "c3", "message": "Error committing input audio buffer: buffer too small. Expected at "
                                     "least 100ms of audio, but buffer only has 50.00ms of audio."}
    assert events[-1]["error"]["type"] == "server_error" and events[-1]["error"]["event_id"] is None
    assert json.loads(server_events()[0].to_text())["type"] == "session.created"
    added, done = by_type["conversation.item.added"], by_type["conversation.item.done"]
    assert added["previous_item_id"] is None and added["item"] == {
        "id": "item_1", "object": "realtime.item", "type": "message", "status": "completed", "role": "user",
        "content": [{"type": "input_audio", "transcript": None}]}
    assert done["item"]["content"][0]["transcript"] == "Hello there."
    final = by_type["transcript.text.done"]
    assert final == {"event_id": final["event_id"], "type": "transcript.text.done", "text": "Hi. Hello.",
                     "segments": [{"type": "transcript.text.segment", "id": "seg_0", "start": 0.0, "end": 1.0,
                                   "text": "Hi.", "speaker": "SPEAKER_00"},
                                  {"type": "transcript.text.segment", "id": "seg_1", "start": 1.0, "end": 2.0,
                                   "text": "Hello.", "speaker": "Alice"}],
                     "warnings": ["w"]}


# our extensions, kept by the SDK as extra fields
EXTRA = {"SessionCreatedEvent": set(), "SessionUpdatedEvent": set(),
         "ConversationItemInputAudioTranscriptionSegment": {"words"}}


def test_the_official_sdk_reads_every_server_event_into_its_own_types():
    """What the SDK's client does with each message (``parse_event``: ``construct_type_unchecked``
    on RealtimeServerEvent), and its pydantic models' own validation of the same JSON."""
    pytest.importorskip("openai.types.realtime")
    import openai.types.realtime as sdk
    from openai._models import construct_type_unchecked
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent

    expected = {"session.created": sdk.SessionCreatedEvent, "session.updated": sdk.SessionUpdatedEvent,
                "input_audio_buffer.speech_started": sdk.InputAudioBufferSpeechStartedEvent,
                "input_audio_buffer.speech_stopped": sdk.InputAudioBufferSpeechStoppedEvent,
                "input_audio_buffer.committed": sdk.InputAudioBufferCommittedEvent,
                "input_audio_buffer.cleared": sdk.InputAudioBufferClearedEvent,
                "conversation.item.added": sdk.ConversationItemAdded,
                "conversation.item.done": sdk.ConversationItemDone,
                "conversation.item.input_audio_transcription.delta":
                    sdk.ConversationItemInputAudioTranscriptionDeltaEvent,
                "conversation.item.input_audio_transcription.completed":
                    sdk.ConversationItemInputAudioTranscriptionCompletedEvent,
                "conversation.item.input_audio_transcription.failed":
                    sdk.ConversationItemInputAudioTranscriptionFailedEvent,
                "conversation.item.input_audio_transcription.segment":
                    sdk.ConversationItemInputAudioTranscriptionSegment,
                "error": sdk.RealtimeErrorEvent}
    for event in server_events():
        message = json.loads(event.to_text())
        parsed = construct_type_unchecked(value=message, type_=RealtimeServerEvent)
        if message["type"] == "transcript.text.done":  # not a realtime event: see the test below
            continue
        cls = expected[message["type"]]
        assert type(parsed) is cls
        validated = cls.model_validate(message)  # required fields, types, literals
        extra = set(validated.model_extra or {})
        assert extra <= EXTRA.get(cls.__name__, set()), (cls.__name__, extra)
    created = sdk.SessionCreatedEvent.model_validate(server_events()[0].to_json())
    assert isinstance(created.session, sdk.RealtimeTranscriptionSessionCreateRequest)
    assert set(created.session.model_extra) == {"id", "object", "speaker_asr"}
    audio_input = created.session.audio.input
    assert audio_input.format.rate == 24000 and audio_input.turn_detection.type == "server_vad"
    assert audio_input.transcription.model == "openai/whisper-large-v3"


def test_the_final_transcript_is_the_sdks_transcript_done_and_its_realtime_client_hands_it_over():
    """``transcript.text.done`` is the file stream's event (``TranscriptionTextDoneEvent``, its
    segments ``TranscriptionDiarizedSegment``); the realtime client, which does not know the
    type, constructs it as some event class without failing, its ``type`` and fields as sent."""
    pytest.importorskip("openai.types.realtime")
    from openai._models import construct_type_unchecked
    from openai.types.audio import TranscriptionDiarizedSegment, TranscriptionTextDoneEvent
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent

    message = json.loads(TranscriptDone(**done_event(two_speakers(), segments=True)).to_text())
    validated = TranscriptionTextDoneEvent.model_validate(message)
    assert validated.text == "Hi. Hello." and set(validated.model_extra) == {"event_id", "segments", "warnings"}
    for segment in message["segments"]:
        TranscriptionDiarizedSegment.model_validate(segment)
    parsed = construct_type_unchecked(value=message, type_=RealtimeServerEvent)
    assert parsed.type == "transcript.text.done" and parsed.text == "Hi. Hello."
    assert [s["speaker"] for s in parsed.segments] == ["SPEAKER_00", "Alice"]


def test_16_khz_pcm_reaches_sdk_clients_though_the_sdk_types_only_24000():
    """The SDK's client constructs events without validating them, so a session at 16 kHz (our
    extension) reaches it; its strict validation would refuse that rate (``Literal[24000]``)."""
    pytest.importorskip("openai.types.realtime")
    import openai.types.realtime as sdk
    from openai._models import construct_type_unchecked
    from openai.types.realtime.realtime_server_event import RealtimeServerEvent

    session = TranscriptionSession.new().apply(update({"audio": {"input": {"format": {"type": "audio/pcm",
                                                                                      "rate": 16000}}}}).session)
    message = json.loads(SessionUpdated(session=session).to_text())
    parsed = construct_type_unchecked(value=message, type_=RealtimeServerEvent)
    assert isinstance(parsed, sdk.SessionUpdatedEvent) and parsed.session.audio.input.format.rate == 16000


def test_what_the_sdk_client_sends_is_parsed():
    """The SDK's ``connection.session.update(...)`` / ``input_audio_buffer.append(...)`` send
    ``json.dumps(maybe_transform(event, RealtimeClientEventParam))``: the same here."""
    pytest.importorskip("openai.types.realtime")
    from openai._utils import maybe_transform
    from openai.types.realtime.realtime_client_event_param import RealtimeClientEventParam

    def sent(event: dict) -> str:
        return json.dumps(maybe_transform(event, RealtimeClientEventParam))

    session = {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 24000}, "noise_reduction": {"type": "near_field"},
        "transcription": {"model": "whisper-1", "language": "en", "prompt": ""},
        "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                           "silence_duration_ms": 500}}},
        "speaker_asr": {"known_speaker_names": ["Alice"], "known_speaker_references": ["UklGRg=="]}}
    event = parse_client_event(sent({"type": "session.update", "session": session}))
    applied = TranscriptionSession.new("served").apply(event.session)
    assert applied.audio.input.transcription.model == "whisper-1"
    assert applied.audio.input.transcription.prompt is None  # an empty prompt is no prompt
    assert applied.speaker_asr.known_speaker_names == ["Alice"]
    assert isinstance(parse_client_event(sent({"type": "input_audio_buffer.append", "audio": "AAA=",
                                               "event_id": "x"})), InputAudioBufferAppend)
    assert isinstance(parse_client_event(sent({"type": "input_audio_buffer.commit"})), InputAudioBufferCommit)
    assert isinstance(parse_client_event(sent({"type": "input_audio_buffer.clear"})), InputAudioBufferClear)
    # ours: the SDK's connection.send takes any dict and sends it as it is
    assert isinstance(parse_client_event(sent({"type": "speaker_asr.session.finish"})), SessionFinish)
    final = {"type": "transcription", "speaker_asr": {"final_transcript": True}}
    assert TranscriptionSession.new().apply(
        parse_client_event(sent({"type": "session.update", "session": final})).session).speaker_asr.final_transcript


def test_error_events_are_plain_server_events():
    event = ProtocolError("bad", param="audio", code="invalid_value", event_id="c1").event()
    assert isinstance(event, ErrorEvent)
    assert event.to_json()["error"] == {"type": "invalid_request_error", "code": "invalid_value",
                                        "message": "bad", "param": "audio", "event_id": "c1"}


def test_the_live_package_imports_no_torch():
    code = ("import sys; import speaker_asr.live.protocol, speaker_asr.live.audio_format, "
            "speaker_asr.live.agreement, speaker_asr.live.online_labels, speaker_asr.live.final_pass; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
