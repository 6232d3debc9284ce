"""The endpoint handler end to end with tiny random models, loaded through the production
settings and from_pretrained paths (offline)."""

import json
import os

import numpy as np
import pytest

from helpers import TINY_MAX_NEW_TOKENS, b64, encode, tiny_settings, tone




def assert_schema(r: dict, diarized: bool = True):
    json.dumps(r)  # JSON-serialisable
    assert set(r) >= {"text", "chunks", "speakers", "language", "duration", "alignment"}
    assert isinstance(r["text"], str) and isinstance(r["duration"], float)
    previous = 0.0
    for c in r["chunks"]:
        start, end = c["timestamp"]
        assert 0.0 <= start <= end <= r["duration"] + 1e-6
        assert start >= previous - 1e-6
        previous = start
        assert ("speaker" in c) == diarized
    if diarized:
        for s in r["speakers"]:
            assert set(s) == {"speaker", "text", "timestamp"}
        # consecutive same-speaker chunks are merged
        labels = [s["speaker"] for s in r["speakers"]]
        assert all(a != b for a, b in zip(labels, labels[1:]))
    else:
        assert r["speakers"] == []
    # nothing is lost: the chunks hold the whole transcript
    assert "".join(c["text"] for c in r["chunks"]).strip() == r["text"].strip()


def test_base64_request(handler, speech_like_wav):
    r = handler({"inputs": b64(speech_like_wav), "parameters": {"num_speakers": 2}})
    assert_schema(r)
    assert r["text"].strip(), "the tiny model writes text"
    assert abs(r["duration"] - 12.0) < 0.01
    assert r["alignment"] == "word"
    assert {c["speaker"] for c in r["chunks"]} <= {"SPEAKER_00", "SPEAKER_01", None}


def test_every_input_form_gives_the_same_result(handler, speech_like_wav):
    def answer(data):  # assisted='auto' takes turns while it times both modes: the same text
        out = handler(data)
        assert set(out.pop("assisted")) == {"used", "reason"}
        return out

    expected = answer({"inputs": b64(speech_like_wav)})
    assert answer({"inputs": speech_like_wav}) == expected  # raw bytes (audio/* bodies)
    assert answer({"inputs": bytearray(speech_like_wav), "parameters": {}}) == expected
    assert answer({"inputs": "data:audio/wav;base64," + b64(speech_like_wav)}) == expected
    flac = encode(np.frombuffer(speech_like_wav[44:], "<i2").astype(np.float32) / 32768, fmt="FLAC")
    assert handler({"inputs": b64(flac)})["text"] == expected["text"]


def test_word_timestamps_on_request(handler, speech_like_wav):
    r = handler({"inputs": b64(speech_like_wav), "parameters": {"return_word_timestamps": True}})
    assert_schema(r)
    words = [w for c in r["chunks"] for w in c["words"]]
    assert words and "".join(w["word"] for w in words) == "".join(c["text"] for c in r["chunks"])
    for c in r["chunks"]:
        assert all(w["speaker"] == c["speaker"] for w in c["words"])
        assert c["timestamp"][0] == c["words"][0]["start"]


def test_assisted_equals_plain_greedy(handler, speech_like_wav):
    plain = handler({"inputs": b64(speech_like_wav), "parameters": {"assisted": False}})
    assisted = handler({"inputs": b64(speech_like_wav), "parameters": {"assisted": True}})
    assert assisted["text"] == plain["text"] and assisted["chunks"] == plain["chunks"]


def test_assistant_is_really_used(handler, speech_like_wav):
    calls = []
    hook = handler.models.asr.assistant.register_forward_hook(lambda *args: calls.append(1))
    try:
        handler({"inputs": b64(speech_like_wav), "parameters": {"assisted": True}})
        assert calls, "assisted=true must run the assistant (num_beams=1, decoder-only assistant)"
        calls.clear()
        handler({"inputs": b64(speech_like_wav), "parameters": {"assisted": False}})
        assert not calls, "plain decoding must not run the assistant"
        # assisted='auto' (the default), audio that fits one window: a fresh deployment times both
        # modes before it keeps the faster (assist_policy.py), the assistant first
        from speaker_asr.asr.assist_policy import AssistPolicy

        handler.models.asr.assist_policy = AssistPolicy()
        calls.clear()
        handler({"inputs": b64(speech_like_wav)})
        assert calls, "assisted='auto' tries the assistant on one-window audio"
        calls.clear()
        handler({"inputs": b64(speech_like_wav)})
        assert not calls, "assisted='auto' times plain decoding next"
    finally:
        hook.remove()


def test_the_response_says_whether_the_assistant_drafted_and_why(handler, speech_like_wav, caplog):
    import logging

    from speaker_asr.asr.assist_policy import AssistPolicy

    def ask(wav=speech_like_wav, **parameters):
        return handler({"inputs": b64(wav), "parameters": parameters})

    assert ask(assisted=True)["assisted"] == {"used": True, "reason": "requested"}
    assert ask(assisted=False)["assisted"] == {"used": False, "reason": "not requested"}
    handler.models.asr.assist_policy = AssistPolicy(min_samples=1, explore_every=0)
    caplog.set_level(logging.INFO, logger="speaker_asr.asr.transcriber")
    # 'auto' on one-window audio: the policy times both modes (assisted first), then keeps the
    # faster; each plain decode says why in one INFO line
    first, second = ask(), ask()
    assert first["assisted"] == {"used": True, "reason": "auto: timing both modes"}
    assert second["assisted"] == {"used": False, "reason": "auto: timing both modes"}
    lines = [r.getMessage() for r in caplog.records if "assisted='auto'" in r.getMessage()]
    assert lines == ["assisted='auto': decoding without the assistant (auto: timing both modes)"]
    assert ask()["assisted"]["reason"] in ("auto: assisted measured faster", "auto: plain measured faster")
    # (audio longer than one window: test_long_audio_is_chunked_and_batched)
    assert ask(temperature=0.4)["assisted"] == {"used": False, "reason": "sampling temperature"}
    # every format carries it, as the other notes (duration, warnings)
    assert ask(assisted=False, response_format="srt")["assisted"] == {"used": False, "reason": "not requested"}
    # silence: the ASR did not run, nothing to say
    assert "assisted" not in ask(encode(np.zeros(16000 * 3, np.float32)))


def test_long_audio_is_chunked_and_batched(handler, caplog):
    import logging

    audio = np.concatenate([tone(15.0, freq=200.0), tone(17.0, freq=350.0)])
    calls = []
    hook = handler.models.asr.assistant.register_forward_hook(lambda *args: calls.append(1))
    caplog.set_level(logging.INFO, logger="speaker_asr.asr.transcriber")
    try:
        r = handler({"inputs": b64(encode(audio)), "parameters": {"batch_size": 2, "chunk_length_s": 10}})
    finally:
        hook.remove()
    assert_schema(r)
    assert abs(r["duration"] - 32.0) < 0.01
    # 'auto' (the default) decodes it plain, says why in the response and in one INFO line
    assert r["assisted"] == {"used": False, "reason": "audio longer than one window"}
    assert [rec.levelno for rec in caplog.records if "audio longer than one window" in rec.getMessage()] \
        == [logging.INFO]
    assert not calls, "assisted='auto' decodes audio longer than a window batched, without the assistant"


def test_long_form_sequential_and_chunked(handler):
    """long_form 'sequential': Whisper's own long-form loop over the whole input (one generate
    call on all of its frames), words timed across the whole file; 'chunked' (the default) cuts
    it into windows. Both keep the schema and the words-equal-transcript rule."""
    audio = np.concatenate([tone(15.0, freq=200.0), tone(17.0, freq=350.0)])
    model = handler.models.asr.model
    frames = []
    original = model.generate

    def spy(*args, **kwargs):
        features = next(x for x in (kwargs.get("input_features"), kwargs.get("inputs"), *args)
                        if x is not None)
        frames.append(features.shape[-1])
        return original(*args, **kwargs)

    model.generate = spy
    try:
        results = {}
        for mode in ("sequential", "chunked"):
            frames.clear()
            r = handler({"inputs": b64(encode(audio)),
                         "parameters": {"long_form": mode, "return_word_timestamps": True}})
            assert_schema(r)
            words = [w for c in r["chunks"] for w in c["words"]]
            assert "".join(w["word"] for w in words) == "".join(c["text"] for c in r["chunks"])
            assert all(0.0 <= w["start"] <= w["end"] <= r["duration"] for w in words)
            results[mode] = list(frames)
    finally:
        del model.generate
    # sequential: one call on all 32 s (3200 frames; 3000 is one window); chunked: 30 s windows
    assert results["sequential"] == [3200], results
    assert results["chunked"] and max(results["chunked"]) == 3000, results


def test_assisted_sequential_long_form_equals_plain(handler):
    """Audio longer than a window, long_form 'sequential': the assistant drafts every window (batch
    1, Whisper's own long-form loop) and the greedy text is the plain text."""
    audio = np.concatenate([tone(15.0, freq=200.0), tone(17.0, freq=350.0)])
    calls = []
    hook = handler.models.asr.assistant.register_forward_hook(lambda *args: calls.append(1))
    try:
        plain = handler({"inputs": b64(encode(audio)),
                         "parameters": {"long_form": "sequential", "assisted": False}})
        assert not calls
        assisted = handler({"inputs": b64(encode(audio)),
                            "parameters": {"long_form": "sequential", "assisted": True}})
    finally:
        hook.remove()
    assert calls, "the assistant did not run"
    assert assisted["text"] == plain["text"]
    assert [c["text"] for c in assisted["chunks"]] == [c["text"] for c in plain["chunks"]]


@pytest.mark.parametrize("params,fragment", [
    ({"num_speaker": 2}, "did you mean 'num_speakers'"),
    ({"num_speakers": "two"}, "expected an integer"),
    ({"assisted": True, "batch_size": 4}, "batch_size 1"),
    ({"language": "klingon"}, "unknown language"),
    ({"min_speakers": 3, "max_speakers": 2}, "must not exceed"),
])
def test_invalid_parameters(handler, speech_like_wav, params, fragment):
    with pytest.raises(ValueError, match=fragment):
        handler({"inputs": b64(speech_like_wav), "parameters": params})


@pytest.mark.parametrize("data,fragment", [
    ({"inputs": "!!!"}, "not valid base64"), ({}, "missing 'inputs'"), ({"inputs": ""}, "empty"),
    ({"inputs": b64(b"just some text, not audio" * 20)}, "could not decode"),
    (["not", "a", "dict"], "JSON object"),
])
def test_invalid_inputs(handler, data, fragment):
    with pytest.raises(ValueError, match=fragment):
        handler(data)


def test_silence_gives_an_empty_transcript(handler):
    for audio in (np.zeros(16000 * 3, np.float32), np.zeros(160, np.float32)):
        r = handler({"inputs": b64(encode(audio))})
        assert_schema(r)
        assert r["text"] == "" and r["chunks"] == [] and r["speakers"] == []
    # with the gate off, the model runs (and the tiny random model writes something)
    r = handler({"inputs": b64(encode(np.zeros(16000 * 3, np.float32))), "parameters": {"vad_filter": False}})
    assert_schema(r)
    assert r["text"].strip()


def respond(handler, diarization, wav: bytes, **parameters) -> dict:
    """The json answer of the handler's pipeline steps with another diarization handed in (and
    the handler's Whisper)."""
    from speaker_asr.audio.decode import decode_audio
    from speaker_asr.config import InferenceConfig
    from speaker_asr.models import Models, PyannoteDiarizer

    config = InferenceConfig.from_request(parameters, handler.models.capabilities)
    return Models(handler.models.asr, PyannoteDiarizer(diarization)).transcribe(decode_audio(wav), config).to_json()


class _NoSpeech:
    """A diarization pipeline whose segmentation model hears nobody (pyannote 3's output)."""

    def __call__(self, file, **kwargs):
        from pyannote.core import Annotation

        return Annotation()


def test_no_speech_found_by_diarization_drops_hallucinations(handler, speech_like_wav):
    r = respond(handler, _NoSpeech(), speech_like_wav)
    assert r["text"] == "" and r["chunks"] == [] and r["speakers"] == []
    assert "no speech detected" in r["warnings"][0] and "vad_filter=false" in r["warnings"][0]
    kept = respond(handler, _NoSpeech(), speech_like_wav, vad_filter=False)
    assert kept["text"].strip() and all(c["speaker"] is None for c in kept["chunks"])


def test_very_short_audio_does_not_crash(handler):
    r = handler({"inputs": b64(encode(tone(0.01)))})  # 10 ms
    assert_schema(r)


def test_zero_length_audio(handler):
    r = handler({"inputs": b64(encode(np.zeros(0, np.float32)))})
    assert r["text"] == "" and r["chunks"] == [] and r["duration"] == 0.0


def test_language_given_is_reported(handler, speech_like_wav):
    assert handler({"inputs": b64(speech_like_wav), "parameters": {"language": "French"}})["language"] == "fr"


def test_handler_from_environment_without_diarization(tiny_models, speech_like_wav, monkeypatch):
    from speaker_asr.endpoint import EndpointHandler

    monkeypatch.setenv("ASR_MODEL", str(tiny_models["whisper.en"]))
    monkeypatch.setenv("DIARIZATION_MODEL", "")
    monkeypatch.setenv("MAX_NEW_TOKENS", str(TINY_MAX_NEW_TOKENS))
    monkeypatch.delenv("ASSISTANT_MODEL", raising=False)
    monkeypatch.delenv("WARMUP", raising=False)  # the default: on
    h = EndpointHandler("")
    assert set(h.models.warm_up_seconds) == {"plain"}  # warmed up: no assistant, no diarization
    r = h({"inputs": b64(speech_like_wav)})
    assert_schema(r, diarized=False)
    assert r["language"] == "en" and r["alignment"] == "segment"
    assert r["assisted"] == {"used": False, "reason": "no assistant model loaded"}
    assert h({"inputs": b64(speech_like_wav), "parameters": {"assisted": False}})["assisted"] == \
        {"used": False, "reason": "not requested"}
    r = h({"inputs": b64(speech_like_wav), "parameters": {"return_word_timestamps": True}})
    assert r["alignment"] == "word" and all("speaker" not in w for c in r["chunks"] for w in c["words"])
    with pytest.raises(ValueError, match="English-only"):
        h({"inputs": b64(speech_like_wav), "parameters": {"language": "de"}})
    with pytest.raises(ValueError, match="English-only"):
        h({"inputs": b64(speech_like_wav), "parameters": {"task": "translate"}})
    with pytest.raises(ValueError, match="ASSISTANT_MODEL"):
        h({"inputs": b64(speech_like_wav), "parameters": {"assisted": True}})


def test_pyannote_telemetry_is_off(handler):
    assert os.environ["PYANNOTE_METRICS_ENABLED"] == "false"
    from speaker_asr.compat import pyannote_major

    if pyannote_major() < 4:
        pytest.skip("pyannote.audio 3.x has no telemetry")
    from pyannote.audio.telemetry.metrics import is_metrics_enabled

    assert not is_metrics_enabled()


def test_gated_diarization_model_fails_at_init_with_instructions(tiny_models, monkeypatch):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    secret = "hf_fake_SECRET_token_123"
    with pytest.raises(RuntimeError) as exc:
        load_diarization_pipeline("pyannote/speaker-diarization-3.1", secret)
    msg = str(exc.value)
    assert "pyannote/speaker-diarization-3.1" in msg and "pyannote/segmentation-3.0" in msg
    assert "HF_TOKEN" in msg and secret not in msg


def test_missing_local_model_folder(tmp_path):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    with pytest.raises(RuntimeError, match="without config.yaml"):
        load_diarization_pipeline(str(tmp_path), None)
    with pytest.raises(RuntimeError, match="no such file"):
        load_diarization_pipeline(str(tmp_path / "nope" / "config.yaml"), None)


def test_pipeline_yaml_file_path_is_accepted(tiny_models):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    assert load_diarization_pipeline(str(tiny_models["pyannote"] / "config.yaml"), None) is not None


def test_prompt_conditions_decoding_and_is_not_echoed(handler, speech_like_wav):
    plain = handler({"inputs": b64(speech_like_wav)})
    prompted = handler({"inputs": b64(speech_like_wav), "parameters": {"prompt": "Kubernetes Zanzibar"}})
    assert_schema(prompted)
    assert prompted["text"] != plain["text"]  # the prompt reaches the decoder
    assert "Kubernetes" not in prompted["text"] and "Zanzibar" not in prompted["text"]


def test_temperature_fallback_guards_run(handler, speech_like_wav):
    from speaker_asr.compat import transformers_major as _transformers_major

    guards = {"temperature": [0.0, 0.5], "compression_ratio_threshold": 1.05, "logprob_threshold": -0.01}
    assert_schema(handler({"inputs": b64(speech_like_wav), "parameters": guards}))
    with_no_speech = {**guards, "no_speech_threshold": 0.5}
    if _transformers_major() >= 5:
        assert_schema(handler({"inputs": b64(speech_like_wav), "parameters": with_no_speech}))
    else:  # transformers 4.51's pipeline crashes on it: refused up front with the reason
        with pytest.raises(ValueError, match="no_speech_threshold is not available"):
            handler({"inputs": b64(speech_like_wav), "parameters": with_no_speech})


def test_srt_with_speaker_names_parses(handler, speech_like_wav):
    import srt

    r = handler({"inputs": b64(speech_like_wav), "parameters": {
        "response_format": "srt", "speaker_names": ["Alice", "Bob"], "num_speakers": 2}})
    assert r["format"] == "srt"
    cues = list(srt.parse(r["content"]))
    assert cues and all(c.content.split(":")[0] in ("Alice", "Bob") for c in cues)
    assert "SPEAKER_0" not in r["content"]


def test_diarization_fault_keeps_the_transcript_with_a_warning(handler, speech_like_wav):
    r = respond(handler, _Broken(), speech_like_wav)
    assert r["text"].strip() and r["chunks"]
    assert all(c["speaker"] is None for c in r["chunks"])
    assert r["warnings"] == ["speaker diarization failed (RuntimeError); the transcript has no speakers"]


class _Broken:
    """A diarization pipeline that fails mid-request, as a GPU fault would."""

    def __call__(self, *args, **kwargs):
        raise RuntimeError("CUDA error: device-side assert (simulated)")


def test_audio_longer_than_the_limit_is_rejected(tiny_models, speech_like_wav):
    from speaker_asr.endpoint import EndpointHandler

    h = EndpointHandler(settings=tiny_settings(tiny_models, max_audio_seconds=5, diarization_model=None,
                                               assistant_model=None))
    with pytest.raises(ValueError, match="limit is 5 s"):
        h({"inputs": b64(speech_like_wav)})


def test_json_body_handed_over_as_audio_bytes_is_read_as_json(handler, speech_like_wav):
    """InferenceClient with a Content-Type header for its raw uploads sends its base64 JSON (when
    given extra_body) under that same audio type: the Endpoints toolkit hands it over as bytes."""
    body = json.dumps({"inputs": b64(speech_like_wav),
                       "parameters": {"return_word_timestamps": True}}).encode()
    out = handler({"inputs": body})
    assert_schema(out)
    assert all("words" in c for c in out["chunks"])
    assert out == handler({"inputs": b64(speech_like_wav), "parameters": {"return_word_timestamps": True}})


def test_unwrap_json_body_only_touches_json_requests_in_bytes():
    from speaker_asr.audio.inputs import unwrap_json_body

    wav = {"inputs": b"RIFF....WAVEfmt ", "parameters": {"a": 1}}
    assert unwrap_json_body(wav) is wav
    assert unwrap_json_body({"inputs": b"{not json"}) == {"inputs": b"{not json"}
    no_inputs = {"inputs": b'{"audio": "x"}'}
    assert unwrap_json_body(no_inputs) is no_inputs
    text = {"inputs": '{"inputs": "x"}'}  # a string is base64 (or a data URI), never JSON
    assert unwrap_json_body(text) is text
    body = json.dumps({"inputs": "QUJD", "parameters": {"language": "en", "num_speakers": 2}}).encode()
    # query-string parameters win over the body's
    assert unwrap_json_body({"inputs": body, "parameters": {"num_speakers": 3}}) == {
        "inputs": "QUJD", "parameters": {"language": "en", "num_speakers": 3}}
    assert unwrap_json_body({"inputs": body}) == {
        "inputs": "QUJD", "parameters": {"language": "en", "num_speakers": 2}}


def test_pyannote3_config_resolves_what_3x_cannot_read(tmp_path):
    """pyannote.audio 3.x reads a yaml file with checkpoint paths: no folder, no $model/, no plda."""
    import yaml

    from speaker_asr.diarization.pipeline import pyannote3_config

    folder = tmp_path / "pipeline"
    (folder / "segmentation").mkdir(parents=True)
    (folder / "segmentation" / "pytorch_model.bin").write_bytes(b"x")
    config = {"pipeline": {"name": "pyannote.audio.pipelines.SpeakerDiarization", "params": {
        "segmentation": "$model/segmentation", "embedding": "pyannote/wespeaker-voxceleb-resnet34-LM",
        "plda": "$model/plda", "clustering": "AgglomerativeClustering"}},
        "params": {"clustering": {"threshold": 0.7}}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    for given in (folder, folder / "config.yaml"):
        resolved = yaml.safe_load(open(pyannote3_config(given)).read())
        params = resolved["pipeline"]["params"]
        assert params["segmentation"] == str((folder / "segmentation" / "pytorch_model.bin").resolve())
        assert params["embedding"] == "pyannote/wespeaker-voxceleb-resnet34-LM"  # a hub id stays
        assert "plda" not in params and resolved["params"] == config["params"]
    # a file 3.x can read as it is, and a folder's own 3.x variant, are used unchanged
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"pipeline": {"name": "x", "params": {"segmentation": "a/b.bin"}}}))
    assert pyannote3_config(plain) == str(plain)
    (folder / "config-pyannote3.yaml").write_text("pipeline: {}\n")
    assert pyannote3_config(folder) == str(folder / "config-pyannote3.yaml")


def test_concurrent_calls_never_run_the_model_at_once(handler, speech_like_wav, monkeypatch):
    """Callers' own threads (the toolkit's request threads) share the models through the
    scheduler's ASR lane: their decodes interleave step by step, but no two threads are ever
    inside the model at once, and each gets the answer it gets alone."""
    import threading
    import time

    # plain decoding: assisted="auto" may pick either way per call, and the random tiny assistant's
    # verified drafts can round a near tie the other way
    request = {"inputs": b64(speech_like_wav), "parameters": {"assisted": False}}
    alone = handler(dict(request))
    active, peak, lock = [0], [0], threading.Lock()
    encoder = handler.models.asr.model.get_encoder()
    forward = encoder.forward

    def counted(*args, **kwargs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        try:
            return forward(*args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(encoder, "forward", counted)
    results = []
    threads = [threading.Thread(target=lambda: results.append(handler(dict(request)))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3 and peak[0] == 1
    assert all(r == alone for r in results)


def test_client_mistakes_are_request_errors(handler, speech_like_wav):
    from speaker_asr.errors import RequestError

    for bad in ({"inputs": "not base64!"}, {"inputs": b64(b"\x00" * 3000)},
                {"inputs": b64(speech_like_wav), "parameters": {"num_speakers": 0}},
                {"inputs": b64(speech_like_wav), "parameters": {"response_format": "docx"}},
                {"inputs": b64(speech_like_wav), "parameters": {"speaker_names": ["A", "A"]}},
                ["not", "a", "dict"]):
        with pytest.raises(RequestError):
            handler(bad)


# --------------------------------------------------------------------------- warm-up at load


@pytest.fixture(scope="module")
def warm_and_cold(tiny_models):
    """Two fresh handlers of the tiny models (assistant and pyannote pipeline included): one warmed
    up at load (the default), one with warmup=False; and what each load decoded and diarized
    (through the classes' own methods, spied on during the loads only)."""
    import threading

    from speaker_asr import pipeline as steps
    from speaker_asr.asr.transcriber import WhisperTranscriber
    from speaker_asr.endpoint import EndpointHandler

    transcribe, diarize = WhisperTranscriber.transcribe, steps.diarize
    seen: list = []

    def spy_transcribe(self, audio, cfg, word_timestamps=False, progress=None, **kwargs):
        seen.append({"step": "asr", "assisted": cfg.assisted, "words": word_timestamps,
                     "record": kwargs.get("record", True), "progress": progress,
                     "seconds": len(audio) / 16000})
        return transcribe(self, audio, cfg, word_timestamps, progress, **kwargs)

    def spy_diarize(pipeline, audio, *args, **kwargs):
        seen.append({"step": "diarization", "thread": threading.current_thread().name,
                     "hook": kwargs.get("hook"), "seconds": len(audio) / 16000})
        return diarize(pipeline, audio, *args, **kwargs)

    handlers, loads = {}, {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(WhisperTranscriber, "transcribe", spy_transcribe)
        mp.setattr(steps, "diarize", spy_diarize)
        for warm in (True, False):
            seen.clear()
            handlers[warm] = EndpointHandler(settings=tiny_settings(tiny_models, warmup=warm))
            loads[warm] = list(seen)
    return handlers, loads


def test_warm_up_runs_plain_assisted_and_diarization_unrecorded(warm_and_cold):
    handlers, loads = warm_and_cold
    from speaker_asr.pipeline import WARM_UP_SECONDS

    warm = handlers[True]
    asr = [c for c in loads[True] if c["step"] == "asr"]
    assert [c["assisted"] for c in asr] == [False, True]  # plain, then with the assistant
    assert all(c["words"] and c["record"] is False and c["progress"] is None
               and c["seconds"] == WARM_UP_SECONDS for c in asr)
    diarizations = [c for c in loads[True] if c["step"] == "diarization"]
    # the scheduler's checkpoints, and no progress reported
    assert len(diarizations) == 1 and diarizations[0]["hook"].progress is None
    assert diarizations[0]["seconds"] == WARM_UP_SECONDS
    # on the pipeline's worker thread, where requests diarize (GPU libraries set up per thread)
    assert diarizations[0]["thread"].startswith("diarization")
    assert set(warm.models.warm_up_seconds) == {"plain", "assisted", "diarization", "utterance"}
    assert all(s >= 0 for s in warm.models.warm_up_seconds.values())
    # assisted="auto" starts from nothing: the warm-up's slow first decodes are not its timings
    assert all(v["timings"] == 0 for v in warm.models.asr.assist_policy.snapshot().values())


def test_warmup_false_skips_the_warm_up(warm_and_cold):
    handlers, loads = warm_and_cold
    assert loads[False] == [] and handlers[False].models.warm_up_seconds is None


def test_warm_up_changes_no_output(warm_and_cold, speech_like_wav):
    """The first request after a warm-up answers what it answers without one (text, words,
    speakers), with assisted='auto' (the policy's first choice is the same: it has no timings)
    and with the assistant or without."""
    handlers, _ = warm_and_cold
    for parameters in ({"return_word_timestamps": True}, {"assisted": False, "num_speakers": 2}):
        first = {warm: h({"inputs": b64(speech_like_wav), "parameters": parameters})
                 for warm, h in handlers.items()}
        assert first[True]["text"].strip()
        assert first[True] == first[False]


def test_a_model_failing_in_the_warm_up_fails_the_load(tiny_models, monkeypatch, caplog):
    """What the models say is not looked at, but an exception in one (a CUDA error) is not hidden:
    the load fails, with a line that names the warm-up and the way around it."""
    from speaker_asr.asr.transcriber import WhisperTranscriber
    from speaker_asr.endpoint import EndpointHandler

    def broken(self, *args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(WhisperTranscriber, "transcribe", broken)
    with caplog.at_level("ERROR", logger="handler"), pytest.raises(RuntimeError, match="CUDA error"):
        EndpointHandler(settings=tiny_settings(tiny_models, assistant_model="", diarization_model="",
                                               warmup=True))
    assert any("warm-up failed" in r.getMessage() and "WARMUP=false" in r.getMessage()
               for r in caplog.records)
