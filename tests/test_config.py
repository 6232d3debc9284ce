"""Request-parameter validation and settings: every rule with the message a user sees."""

import pytest

from speaker_asr.config import DEFAULT_BATCH_SIZE, InferenceConfig, ModelCapabilities
from speaker_asr.settings import ModelSettings

MULTI = ModelCapabilities(has_assistant=True, multilingual=True)
NO_ASSISTANT = ModelCapabilities(has_assistant=False, multilingual=True)
ENGLISH_ONLY = ModelCapabilities(has_assistant=False, multilingual=False, languages=frozenset({"en"}))


def check(params, caps=MULTI):
    return InferenceConfig.from_request(params, caps)


def rejects(params, *fragments, caps=MULTI):
    with pytest.raises(ValueError) as exc:
        check(params, caps)
    for f in fragments:
        assert f in str(exc.value), str(exc.value)
    return str(exc.value)


def test_defaults():
    cfg = check(None)
    assert cfg.task == "transcribe" and cfg.language is None and cfg.assisted == "auto"
    assert cfg.batch_size_for(False) == DEFAULT_BATCH_SIZE and cfg.chunk_length_s == 30


def test_unknown_parameter_names_the_typo_and_the_allowed_names():
    msg = rejects({"num_speaker": 2}, "unknown parameter 'num_speaker'", "did you mean 'num_speakers'")
    assert "min_speakers" in msg and "language" in msg


@pytest.mark.parametrize("params,fragment", [
    ({"num_speakers": "two"}, "'num_speakers': 'two'; expected an integer"),
    ({"num_speakers": 2.5}, "'num_speakers'"),
    ({"num_speakers": True}, "'num_speakers'"),
    ({"batch_size": "8"}, "'batch_size'"),
    ({"assisted": "yes"}, "'assisted'"),
    ({"language": 5}, "'language'"),
    ({"chunk_length_s": "30"}, "'chunk_length_s'"),
])
def test_types_are_checked(params, fragment):
    rejects(params, fragment)


@pytest.mark.parametrize("params,fragment", [
    ({"num_speakers": 0}, ">= 1"), ({"num_speakers": -2}, ">= 1"), ({"num_speakers": 33}, "<= 32"),
    ({"min_speakers": 0}, ">= 1"), ({"max_speakers": 100}, "<= 32"),
    ({"batch_size": 0}, ">= 1"), ({"batch_size": 65}, "<= 64"),
    ({"chunk_length_s": 0}, ">= 5"), ({"chunk_length_s": 0.001}, ">= 5"), ({"chunk_length_s": 31}, "<= 30"),
    ({"task": "summarize"}, "'transcribe' or 'translate'"),
])
def test_bounds(params, fragment):
    rejects(params, fragment)


def test_speaker_count_rules():
    rejects({"num_speakers": 2, "min_speakers": 1}, "either num_speakers or min_speakers/max_speakers")
    rejects({"num_speakers": 2, "max_speakers": 3}, "not both")
    rejects({"min_speakers": 3, "max_speakers": 2}, "min_speakers (3) must not exceed max_speakers (2)")
    cfg = check({"min_speakers": 2, "max_speakers": 2})
    assert (cfg.min_speakers, cfg.max_speakers) == (2, 2)


def test_assisted_rules():
    rejects({"assisted": True}, "needs an assistant model", "ASSISTANT_MODEL", caps=NO_ASSISTANT)
    rejects({"assisted": True, "batch_size": 8}, "batch_size 1", "batch_size=8")
    assert check({"assisted": True}).batch_size_for(True) == 1
    assert check({"assisted": True, "batch_size": 1}).batch_size_for(True) == 1
    rejects({"assisted": "yes"}, "true, false or 'auto'")


class StubPolicy:
    """An AssistPolicy stand-in: says what it was told to, counts its calls."""

    def __init__(self, decision):
        self.decision, self.calls = decision, 0

    def choose(self):
        self.calls += 1
        return self.decision


def test_auto_assisted_decides_by_length():
    from speaker_asr.types import ASSIST_AUTO_LEARNING, AssistDecision

    auto = check({})
    learning = AssistDecision(True, ASSIST_AUTO_LEARNING)

    def used(cfg, seconds, has_assistant=True):
        return cfg.assist_decision(seconds, has_assistant, StubPolicy(learning)).used

    assert used(auto, 8.0) and used(auto, 30.0)
    assert not used(auto, 30.5)  # several windows: batched wins
    # sequential long-form decodes one window at a time either way: the policy may pick
    assert check({"long_form": "sequential"}).assist_eligible(600.0, has_assistant=True)
    assert used(check({"long_form": "sequential"}), 600.0)
    assert not used(auto, 8.0, has_assistant=False)
    assert not used(check({"batch_size": 8}), 8.0)
    assert not used(check({"temperature": 0.3}), 8.0)
    assert check({"assisted": "auto"}, NO_ASSISTANT).assisted == "auto"  # fine without assistant
    assert used(check({"assisted": True}), 600.0)
    assert not used(check({"assisted": False}), 8.0)


@pytest.mark.parametrize("params,seconds,has_assistant,expected", [
    ({"assisted": True}, 600.0, True, (True, "requested")),  # asked: whatever the length
    ({"assisted": False}, 8.0, True, (False, "not requested")),
    ({}, 8.0, False, (False, "no assistant model loaded")),
    ({}, 30.5, True, (False, "audio longer than one window")),
    ({"chunk_length_s": 10.0}, 12.0, True, (False, "audio longer than one window")),
    ({"temperature": 0.3}, 8.0, True, (False, "sampling temperature")),
    ({"temperature": [0.2, 0.4]}, 8.0, True, (False, "sampling temperature")),
    ({"batch_size": 8}, 8.0, True, (False, "batch_size above 1")),
    # several reasons: the first in this order (no assistant, length, temperature, batch size)
    ({"batch_size": 8, "temperature": 0.5}, 60.0, True, (False, "audio longer than one window")),
])
def test_assist_decision_says_why_without_asking_the_policy(params, seconds, has_assistant, expected):
    from speaker_asr.types import ASSIST_REASONS, AssistDecision

    policy = StubPolicy(AssistDecision(True, "must not be asked"))
    decision = check(params).assist_decision(seconds, has_assistant, policy)
    assert (decision.used, decision.reason) == expected and decision.reason in ASSIST_REASONS
    assert policy.calls == 0


def test_assist_decision_for_interchangeable_modes_is_the_policys():
    from speaker_asr.asr.assist_policy import AssistPolicy
    from speaker_asr.types import ASSIST_AUTO_PLAIN_FASTER, ASSIST_AUTO_LEARNING

    for params, seconds in (({}, 8.0), ({"temperature": [0.0, 0.2]}, 30.0), ({"batch_size": 1}, 1.0),
                            ({"long_form": "sequential"}, 600.0)):
        assert check(params).assist_decision(seconds, True, AssistPolicy()).reason == ASSIST_AUTO_LEARNING
    policy = AssistPolicy(min_samples=1, explore_every=0)
    policy.record(True, 10.0, 5.0)
    policy.record(False, 10.0, 2.0)
    decision = check({}).assist_decision(8.0, True, policy)
    assert (decision.used, decision.reason) == (False, ASSIST_AUTO_PLAIN_FASTER)


@pytest.mark.parametrize("given,code", [("en", "en"), ("English", "en"), ("french", "fr"), ("<|de|>", "de"),
                                        (" ES ", "es")])
def test_language_names_and_codes(given, code):
    assert check({"language": given}).language == code


def test_unknown_language_lists_the_allowed_codes():
    msg = rejects({"language": "xx"}, "unknown language 'xx'")
    assert "'en'" in msg and "fr" in msg


def test_english_only_model():
    assert check({"language": "english"}, ENGLISH_ONLY).language == "en"
    rejects({"language": "fr"}, "English-only", caps=ENGLISH_ONLY)
    rejects({"task": "translate"}, "English-only", caps=ENGLISH_ONLY)


def test_language_must_be_known_to_the_model():
    caps = ModelCapabilities(multilingual=True, languages=frozenset({"en", "fr"}))
    rejects({"language": "yue"}, "not supported by this model", caps=caps)


def test_parameters_must_be_an_object():
    rejects(["num_speakers", 2], "'parameters' must be a JSON object")


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("ASR_MODEL", "/models/whisper")
    monkeypatch.setenv("ASSISTANT_MODEL", "")
    monkeypatch.setenv("DIARIZATION_MODEL", "")
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    s = ModelSettings()
    assert s.asr_model == "/models/whisper"
    assert s.assistant_model is None and s.diarization_model is None  # empty disables
    assert s.token() == "hf_secret_value"
    assert "hf_secret_value" not in repr(s) and "hf_secret_value" not in str(s.model_dump())


def test_settings_defaults_are_hub_ids(monkeypatch):
    for var in ("ASR_MODEL", "ASSISTANT_MODEL", "DIARIZATION_MODEL", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    s = ModelSettings()
    assert s.asr_model == "openai/whisper-large-v3"
    assert s.assistant_model is None
    assert s.diarization_model == "pyannote/speaker-diarization-3.1"
    assert not s.diarization_telemetry


def test_warmup_setting(monkeypatch):
    monkeypatch.delenv("WARMUP", raising=False)
    assert ModelSettings().warmup is True  # on unless turned off
    for value, expected in (("false", False), ("0", False), ("true", True)):
        monkeypatch.setenv("WARMUP", value)
        assert ModelSettings().warmup is expected


def test_decoding_guards():
    cfg = check({"temperature": [0.0, 0.2, 0.4], "compression_ratio_threshold": 2.4,
                 "logprob_threshold": -1.0, "no_speech_threshold": 0.6})
    assert cfg.temperature == [0.0, 0.2, 0.4]
    rejects({"temperature": [0.4, 0.2]}, "increasing list")
    rejects({"temperature": 1.5}, "in [0, 1]")
    rejects({"temperature": []}, "non-empty")
    rejects({"no_speech_threshold": 0.6}, "together with logprob_threshold")
    rejects({"logprob_threshold": 1.0}, "'logprob_threshold'")
    rejects({"assisted": True, "temperature": 0.5}, "first temperature must be 0")


def test_prompt_and_formats():
    assert check({"prompt": "Kubernetes, Alice, Bob"}).prompt == "Kubernetes, Alice, Bob"
    rejects({"prompt": ""}, "'prompt'")
    rejects({"prompt": "x" * 801}, "'prompt'")
    assert check({"response_format": "srt"}).response_format == "srt"
    rejects({"response_format": "docx"}, "'srt'", "'vtt'")
    rejects({"speaker_names": "Alice"}, "'speaker_names'")
    rejects({"speaker_names": ["Alice", "Alice"]}, "speaker_names")


def test_default_batch_size_follows_the_device():
    from speaker_asr.config import DEFAULT_CPU_BATCH_SIZE

    cfg = InferenceConfig()
    assert cfg.batch_size_for(False, DEFAULT_CPU_BATCH_SIZE) == DEFAULT_CPU_BATCH_SIZE < DEFAULT_BATCH_SIZE
    assert cfg.batch_size_for(True, DEFAULT_CPU_BATCH_SIZE) == 1
    assert InferenceConfig(batch_size=16).batch_size_for(False, DEFAULT_CPU_BATCH_SIZE) == 16


def test_long_form_rules():
    assert check({}).long_form == "chunked"
    assert check({"long_form": "sequential"}).long_form == "sequential"
    rejects({"long_form": "sequential", "batch_size": 8}, "one window at a time", "batch_size=8",
            "long_form 'chunked'")
    rejects({"long_form": "sequential", "chunk_length_s": 10.0}, "30 s window", "chunk_length_s=10")
    rejects({"long_form": "sliding"}, "expected 'chunked' or 'sequential'")


def test_parameters_given_as_text_are_read_by_their_declared_types():
    from speaker_asr.errors import RequestError

    read = InferenceConfig.parameters_from_strings
    assert read({"prompt": "1984", "language": "2", "num_speakers": "2", "temperature": "0.2",
                 "assisted": "auto", "vad_filter": "false", "speaker_names": "Ann"}) == {
        "prompt": "1984", "language": "2", "num_speakers": 2, "temperature": 0.2, "assisted": "auto",
        "vad_filter": False, "speaker_names": ["Ann"]}
    assert read({"temperature": ["0", "0.4"], "assisted": "true", "known_speaker_names": ["A", "B"]}) == {
        "temperature": [0.0, 0.4], "assisted": True, "known_speaker_names": ["A", "B"]}
    for bad, fragments, code in (({"num_speakers": "two"}, ("invalid value for 'num_speakers': 'two'",
                                                            "an integer >= 1 and <= 32"), None),
                                 ({"temperature": "inf"}, ("'temperature'", "a number in [0, 1]"), None),
                                 ({"num_speakers": ["1", "2"]}, ("'num_speakers'",), None),
                                 ({"speakers": "2"}, ("unknown parameter 'speakers'", "did you mean"),
                                  "unknown_parameter")):
        with pytest.raises(RequestError) as err:
            read(bad)
        assert all(f in str(err.value) for f in fragments), str(err.value)
        assert err.value.code == code and err.value.param == next(iter(bad))


def test_unknown_parameter_error_carries_its_code():
    from speaker_asr.errors import RequestError

    with pytest.raises(RequestError) as err:
        InferenceConfig.from_request({"speakers": 2}, ModelCapabilities())
    assert err.value.code == "unknown_parameter" and err.value.param == "speakers"
    with pytest.raises(RequestError) as err:
        InferenceConfig.from_request({"num_speakers": 0}, ModelCapabilities())
    assert err.value.code is None


def test_server_settings_from_environment(monkeypatch):
    from speaker_asr.settings import ServerSettings

    for var in ("HOST", "PORT", "MAX_BODY_BYTES", "MAX_QUEUE", "API_KEY", "LOG_LEVEL"):
        monkeypatch.delenv(var, raising=False)
    s = ServerSettings.from_env()
    assert (s.host, s.port, s.max_body_bytes, s.max_queue, s.key(), s.log_level) == (
        "0.0.0.0", 8080, 100 * 1024 * 1024, 8, None, "info")
    monkeypatch.setenv("PORT", "abc")
    with pytest.raises(ValueError, match=r"PORT='abc' is not valid: use a whole number >= 0 and <= 65535"):
        ServerSettings.from_env()
    assert ServerSettings.from_env(port=9000).port == 9000
    monkeypatch.setenv("PORT", "")
    monkeypatch.setenv("API_KEY", "k" * 8)
    with pytest.raises(ValueError, match="API_KEY is 8 characters long") as err:
        ServerSettings.from_env()
    assert "k" * 8 not in str(err.value)
