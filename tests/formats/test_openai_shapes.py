"""OpenAI's shapes (speaker_asr/formats/openai_shapes.py) written from hand-made results, checked
field by field; parsed into the official SDK's own types where it is installed; and the /v1 form
reader (speaker_asr/serving/openai_form.py: ``parse_fields``) on hand-made forms."""

from __future__ import annotations

import json
import sys

import pytest

from speaker_asr.formats import render_response
from speaker_asr.formats.openai_shapes import (ModelCard, Options, done_event, error_object, model_list,
                                               plain_text, render, sse, stream_events)
from speaker_asr.formats.verbose_json import compression_ratio
from speaker_asr.result import KnownSpeaker, Result
from speaker_asr.types import Segment, Word


def two_speakers(with_words: bool = True, **changes) -> Result:
    """Alice says "Hello there." (with Bob over "there."), then Bob says "Yes." and "Right."."""
    segments = [Segment(" Hello there.", 0.0, 1.2, "Alice",
                        [Word(" Hello", 0.0, 0.5, "Alice"), Word(" there.", 0.5, 1.2, "Alice", ["Bob"])]),
                Segment(" Yes.", 1.2, 1.6, "Bob", [Word(" Yes.", 1.2, 1.6, "Bob")]),
                Segment(" Right.", 1.8, 2.4, "Bob", [Word(" Right.", 1.8, None, "Bob")])]
    if not with_words:
        segments = [Segment(s.text, s.start, s.end, s.speaker) for s in segments]
    values = dict(text=" Hello there. Yes. Right.", segments=segments,
                  language="en", duration=2.5,
                  alignment="word", diarized=True, with_words=with_words)
    values.update(changes)
    return Result(**values)


def undiarized() -> Result:
    segments = [Segment(" One two.", 0.0, 1.0), Segment(" Three.", 1.0, 1.5)]
    return Result(" One two. Three.", segments, "fr", 1.5, "word")


OPTIONS = Options(model="whisper-large-v3", language_names={"en": "english", "fr": "french"})


def opts(**changes) -> Options:
    values = dict(model=OPTIONS.model, language_names=OPTIONS.language_names)
    values.update(changes)
    return Options(**values)


def test_json_is_the_text_with_usage_and_the_model():
    assert render(two_speakers(), OPTIONS) == {
        "text": "Hello there. Yes. Right.", "usage": {"type": "duration", "seconds": 2.5},
        "model": "whisper-large-v3"}
    # what every format carries when there is any: warnings, known speakers, embeddings
    noted = two_speakers(warnings=["careful"], known_speakers=[KnownSpeaker("Alice", "Alice", 0.91)])
    out = render(noted, opts(model=None))
    assert out["warnings"] == ["careful"] and "model" not in out
    assert out["known_speakers"] == [{"name": "Alice", "speaker": "Alice", "similarity": 0.91}]


def test_text_srt_vtt_are_plain_text():
    assert render(two_speakers(), opts(response_format="text")) == "Hello there. Yes. Right.\n"
    assert plain_text(two_speakers(text="  ")) == ""
    result = two_speakers()
    # Bob's two segments are 0.2 s apart: one cue; "Right." has no end, so it ends where it starts
    assert render(result, opts(response_format="srt")) == (
        "1\n00:00:00,000 --> 00:00:01,200\nAlice: Hello there.\n\n"
        "2\n00:00:01,200 --> 00:00:01,800\nBob: Yes. Right.\n\n")
    assert render(result, opts(response_format="vtt")) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.200\n<v Alice>Hello there.\n"
        "\n00:00:01.200 --> 00:00:01.800\n<v Bob>Yes. Right.\n")


def test_verbose_json_segments_words_and_speakers():
    out = render(two_speakers(), opts(response_format="verbose_json", words=True, temperature=0.2))
    assert list(out)[:5] == ["task", "language", "duration", "text", "segments"]
    assert (out["task"], out["language"], out["duration"], out["text"]) == \
        ("transcribe", "english", 2.5, "Hello there. Yes. Right.")
    first, second, third = out["segments"]
    assert first == {"id": 0, "seek": 0, "start": 0.0, "end": 1.2, "text": " Hello there.",
                     "tokens": [], "temperature": 0.2, "avg_logprob": None,
                     "compression_ratio": compression_ratio(" Hello there."), "no_speech_prob": None,
                     "speaker": "Alice"}
    assert (second["id"], second["seek"], second["speaker"], third["start"]) == (1, 120, "Bob", 1.8)
    assert out["words"] == [
        {"word": "Hello", "start": 0.0, "end": 0.5, "speaker": "Alice"},
        {"word": "there.", "start": 0.5, "end": 1.2, "speaker": "Alice", "overlap": ["Bob"]},
        {"word": "Yes.", "start": 1.2, "end": 1.6, "speaker": "Bob"},
        {"word": "Right.", "start": 1.8, "end": 1.8, "speaker": "Bob"},  # a missing end is its start
    ]
    assert out["usage"] == {"type": "duration", "seconds": 2.5} and out["model"] == "whisper-large-v3"


def test_verbose_json_granularities():
    words_only = render(two_speakers(), opts(response_format="verbose_json", words=True, segments=False))
    assert "segments" not in words_only and len(words_only["words"]) == 4
    segments_only = render(two_speakers(), opts(response_format="verbose_json"))
    assert "words" not in segments_only and len(segments_only["segments"]) == 3


def test_verbose_json_without_diarization_translation_and_unknown_language_names():
    out = render(undiarized(), opts(response_format="verbose_json"))
    assert out["language"] == "french"
    assert [s["speaker"] for s in out["segments"]] == [None, None]
    out = render(undiarized(), Options(response_format="verbose_json"))
    assert out["language"] == "french"  # no names given: Whisper's own (transformers' table)
    out = render(undiarized(), opts(response_format="verbose_json", language_names={}))
    assert out["language"] == "fr"  # a code without a name: the code
    out = render(undiarized(), opts(response_format="verbose_json", task="translate"))
    assert out["task"] == "translate" and out["language"] == "english"  # the translation's
    silent = Result("", [], None, 0.0)
    assert render(silent, opts(response_format="verbose_json"))["language"] is None


@pytest.mark.parametrize("fmt", ["verbose_json", "diarized_json"])
def test_one_writer_per_name_on_both_routes(fmt):
    """POST / (formats.render_response) and /v1 write verbose_json and diarized_json alike: the
    same object, /v1 adding only the model that ran."""
    result = two_speakers(warnings=["careful"], known_speakers=[KnownSpeaker("Alice", "Alice", 0.91)])
    v1 = render(result, opts(response_format=fmt, words=True))
    assert v1.pop("model") == "whisper-large-v3"
    assert render_response(result, fmt) == v1
    assert list(render_response(result, fmt)) == list(v1)


def test_diarized_json_one_segment_per_speaker_turn():
    out = render(two_speakers(), opts(response_format="diarized_json"))
    assert out == {
        "task": "transcribe", "duration": 2.5, "text": "Hello there. Yes. Right.",
        "segments": [
            {"type": "transcript.text.segment", "id": "seg_0", "start": 0.0, "end": 1.2,
             "text": "Hello there.", "speaker": "Alice"},
            {"type": "transcript.text.segment", "id": "seg_1", "start": 1.2, "end": 2.4,
             "text": "Yes. Right.", "speaker": "Bob"}],
        "usage": {"type": "duration", "seconds": 2.5}, "model": "whisper-large-v3"}
    out = render(undiarized(), opts(response_format="diarized_json"))
    assert [(s["text"], s["speaker"]) for s in out["segments"]] == [("One two.", None), ("Three.", None)]


def test_stream_events_rebuild_the_text_and_end_with_one_done():
    events = stream_events(two_speakers(warnings=["w"]), OPTIONS)
    assert [e["type"] for e in events] == ["transcript.text.delta", "transcript.text.segment",
                                           "transcript.text.delta", "transcript.text.segment",
                                           "transcript.text.done"]
    assert events[0] == {"type": "transcript.text.delta", "delta": "Hello there.", "segment_id": "seg_0"}
    assert events[3] == {"type": "transcript.text.segment", "id": "seg_1", "start": 1.2, "end": 2.4,
                         "text": "Yes. Right.", "speaker": "Bob"}
    assert "".join(e["delta"] for e in events if e["type"] == "transcript.text.delta") == \
        events[-1]["text"] == "Hello there. Yes. Right."
    assert events[-1]["warnings"] == ["w"]
    assert stream_events(Result("", [], None, 0.0), OPTIONS) == [
        {"type": "transcript.text.done", "text": ""}]
    wire = sse(events[0])
    assert wire.startswith(b"data: ") and wire.endswith(b"\n\n") and b"\n" not in wire[:-2]
    assert json.loads(wire[6:]) == events[0]


def test_the_done_event_can_carry_every_segment_of_the_stream():
    result = two_speakers(warnings=["w"])
    events = stream_events(result, OPTIONS)
    done = done_event(result, segments=True)
    assert done == {**events[-1], "segments": [e for e in events if e["type"] == "transcript.text.segment"]}
    assert list(done) == ["type", "text", "segments", "warnings"]
    assert done_event(result) == events[-1]


def test_errors_and_models():
    assert error_object("bad", 400, "language", "invalid_value") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "language",
                  "code": "invalid_value"}}
    assert error_object("x", 503)["error"]["type"] == "server_error"
    assert error_object("x", 500)["error"]["type"] == "server_error"
    assert error_object("x", 401)["error"] == {"message": "x", "type": "invalid_request_error",
                                               "param": None, "code": None}
    assert model_list([ModelCard("openai/whisper-large-v3", 1700000000, "openai")]) == {
        "object": "list", "data": [{"id": "openai/whisper-large-v3", "object": "model",
                                    "created": 1700000000, "owned_by": "openai"}]}


def test_the_shapes_import_no_torch():
    import subprocess

    code = ("import sys; import speaker_asr.formats.openai_shapes, speaker_asr.serving.openai_api; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_sdk_parses_every_shape_into_its_own_types():
    types = pytest.importorskip("openai.types.audio")
    from openai._models import construct_type

    result = two_speakers(known_speakers=[KnownSpeaker("Alice", "Alice", 0.9)])
    plain = construct_type(type_=types.Transcription, value=render(result, OPTIONS))
    assert plain.text == "Hello there. Yes. Right." and plain.usage.seconds == 2.5
    verbose = construct_type(type_=types.TranscriptionVerbose,
                             value=render(result, opts(response_format="verbose_json", words=True)))
    assert isinstance(verbose.segments[0], types.TranscriptionSegment)
    assert verbose.segments[1].speaker == "Bob" and verbose.words[1].end == 1.2
    diarized = construct_type(type_=types.TranscriptionDiarized,
                              value=render(result, opts(response_format="diarized_json")))
    assert [s.speaker for s in diarized.segments] == ["Alice", "Bob"]
    assert diarized.segments[0].type == "transcript.text.segment"
    events = [construct_type(type_=types.TranscriptionStreamEvent, value=e)
              for e in stream_events(result, OPTIONS)]
    assert [type(e).__name__ for e in events] == [
        "TranscriptionTextDeltaEvent", "TranscriptionTextSegmentEvent",
        "TranscriptionTextDeltaEvent", "TranscriptionTextSegmentEvent", "TranscriptionTextDoneEvent"]


# --------------------------------------------------------------------------- the form


def form(*pairs, audio=b"RIFF....WAVE"):
    from speaker_asr.serving.negotiation import Upload

    return [("file", Upload("a.wav", audio)), *pairs]


def parse(*pairs, task="transcribe", **kwargs):
    from speaker_asr.serving.openai_form import parse_fields

    return parse_fields(form(*pairs, **kwargs), task)


def refused(*pairs, param=None, fragments=(), task="transcribe"):
    from speaker_asr.serving.negotiation import HttpError

    with pytest.raises(HttpError) as err:
        parse(*pairs, task=task)
    assert err.value.status == 400
    assert err.value.param == param, (err.value.param, err.value.message)
    for fragment in fragments:
        assert fragment in err.value.message, err.value.message
    return err.value


def test_openai_fields_become_our_parameters():
    from speaker_asr.serving.negotiation import Upload

    r = parse(("model", "whisper-1"), ("language", "en"), ("prompt", "1984"), ("temperature", "0"),
              ("response_format", "verbose_json"), ("timestamp_granularities[]", "word"),
              ("timestamp_granularities[]", "segment"), ("known_speaker_names[]", " Alice "),
              ("known_speaker_references[]", "data:audio/wav;base64,QUJD"),
              ("known_speaker_names[]", "true"),
              ("known_speaker_references[]", Upload("bob.wav", b"ABC")),
              ("num_speakers", "2"), ("assisted", "false"), ("include[]", "logprobs"),
              ("chunking_strategy", "auto"))
    assert r.parameters == {"task": "transcribe", "language": "en", "prompt": "1984",
                            "temperature": 0.0, "return_word_timestamps": True,
                            "known_speaker_names": ["Alice", "true"],
                            "known_speaker_references": ["data:audio/wav;base64,QUJD", "QUJD"],
                            "num_speakers": 2, "assisted": False}
    assert (r.response_format, r.words, r.segments, r.stream, r.model) == \
        ("verbose_json", True, True, False, "whisper-1")
    assert r.audio == b"RIFF....WAVE"


def test_defaults_translations_keywords_languages_and_chunking_objects():
    r = parse()
    assert r.parameters == {"task": "transcribe"}
    assert (r.response_format, r.words, r.segments, r.stream, r.model) == ("json", False, True, False, None)
    r = parse(("stream", "true"), ("keywords[]", "Kubernetes"), ("keywords[]", "Grafana"),
              ("prompt", "Ops meeting."), ("languages[]", "de"), task="translate")
    assert r.stream and r.parameters == {"task": "translate", "language": "de",
                                         "prompt": "Ops meeting. Kubernetes, Grafana"}
    assert "language" not in parse(("languages[]", "de"), ("languages[]", "fr")).parameters
    # the SDK sends an object as bracketed keys; JSON works too
    parse(("chunking_strategy[type]", "server_vad"), ("chunking_strategy[threshold]", "0.5"),
          ("chunking_strategy[silence_duration_ms]", "500"))
    parse(("chunking_strategy", json.dumps({"type": "server_vad", "prefix_padding_ms": 300})))
    only_words = parse(("response_format", "verbose_json"), ("timestamp_granularities[]", "word"))
    assert only_words.words and not only_words.segments
    r = parse(("parameters", json.dumps({"min_speakers": 2, "max_speakers": 3})))
    assert r.parameters == {"task": "transcribe", "min_speakers": 2, "max_speakers": 3}


def test_bad_forms_name_the_field_and_what_is_allowed():
    from speaker_asr.serving.negotiation import HttpError, Upload
    from speaker_asr.serving.openai_form import parse_fields

    with pytest.raises(HttpError) as err:
        parse_fields([("model", "whisper-1")], "transcribe")
    assert err.value.param == "file" and err.value.code == "missing_required_parameter"
    refused(("file", "not a file"), param="file", fragments=["file upload"])
    with pytest.raises(HttpError, match="empty"):
        parse(audio=b"")
    refused(("response_format", "rttm"), param="response_format", fragments=["json, text, srt"])
    refused(("temperature", "hot"), param="temperature", fragments=["from 0 to 1"])
    refused(("temperature", "1.5"), param="temperature")
    refused(("stream", "maybe"), param="stream", fragments=["true or false"])
    refused(("stream", "true"), ("response_format", "srt"), param="stream")
    refused(("timestamp_granularities[]", "word"), param="timestamp_granularities",
            fragments=["verbose_json"])
    refused(("timestamp_granularities[]", "char"), ("response_format", "verbose_json"),
            param="timestamp_granularities", fragments=["word, segment"])
    refused(("chunking_strategy", "manual"), param="chunking_strategy", fragments=["'auto'"])
    refused(("chunking_strategy[type]", "server_vad"), ("chunking_strategy[threshold]", "2"),
            param="chunking_strategy", fragments=["[0, 1]"])
    refused(("chunking_strategy[speed]", "1"), param="chunking_strategy", fragments=["unknown field"])
    error = refused(("num_speaker", "2"), param="num_speaker",
                    fragments=["unknown field 'num_speaker'", "did you mean 'num_speakers'",
                               "timestamp_granularities[]", "min_speakers"])
    assert error.code == "unknown_parameter" and "return_word_timestamps" not in error.message
    refused(("task", "translate"), param="task", fragments=["/v1/audio/translations"])
    refused(("return_word_timestamps", "true"), param="return_word_timestamps",
            fragments=["timestamp_granularities[]=word"])
    refused(("language", "en"), ("language", "fr"), param="language", fragments=["twice"])
    refused(("language", "en"), ("parameters", '{"language": "fr"}'), param="language")
    refused(("parameters", "[1]"), param="parameters")
    refused(("audio", Upload("x.wav", b"x")), param="audio", fragments=["'file'"])
