"""Channels as speakers (``multichannel``, ``diarize_channels``) through the handler with the tiny
random models: every word carries its channel, the formats follow the channels, names go in
channel order, and every bad input gets a 400 that says what is wrong. (Which words are kept where
is tests/attribution/test_channels.py; its accuracy on real meetings, eval/multichannel.py.)"""

import numpy as np
import pytest

from helpers import b64, encode, tone

from speaker_asr.audio.decode import decode_audio
from speaker_asr.config import MAX_CHANNELS, InferenceConfig, ModelCapabilities
from speaker_asr.errors import RequestError


def call(handler, audio: bytes, **parameters):
    return handler({"inputs": b64(audio), "parameters": parameters})


@pytest.fixture(scope="module")
def stereo_call() -> bytes:
    """A two-sided call: a low voice on the left, a high one on the right, each bleeding into the
    other side at -20 dB."""
    left = np.concatenate([tone(3.0, freq=180.0), np.zeros(3 * 16000, np.float32)])
    right = np.concatenate([np.zeros(3 * 16000, np.float32), tone(3.0, freq=320.0)])
    return encode(np.stack([left + 0.1 * right, right + 0.1 * left], axis=1))


def test_every_word_carries_its_channel_and_the_speakers_are_the_channels(handler, stereo_call):
    r = call(handler, stereo_call, multichannel=True, return_word_timestamps=True)
    assert r["channels"] == 2
    words = [w for c in r["chunks"] for w in c["words"]]
    assert words, r
    for c in r["chunks"]:
        assert c["speaker"] == f"CHANNEL_{c['channel']}"
        assert all(w["channel"] == c["channel"] and w["speaker"] == c["speaker"] for w in c["words"])
    assert all(s["speaker"] == f"CHANNEL_{s['channel']}" for s in r["speakers"])
    starts = [c["timestamp"][0] for c in r["chunks"]]
    assert starts == sorted(starts)  # merged in time order across the channels


def test_formats_follow_the_channels(handler, stereo_call):
    rttm = call(handler, stereo_call, multichannel=True, response_format="rttm")["content"]
    lines = [line.split() for line in rttm.splitlines()]
    assert lines and all(f[2] == str(int(f[7].rsplit("_", 1)[1]) + 1) for f in lines), rttm
    verbose = call(handler, stereo_call, multichannel=True, response_format="verbose_json",
                   return_word_timestamps=True)
    assert all("channel" in s for s in verbose["segments"])
    diarized = call(handler, stereo_call, multichannel=True, response_format="diarized_json")
    assert all(s["speaker"] == f"CHANNEL_{s['channel']}" for s in diarized["segments"])


def test_speaker_names_name_the_channels_in_order(handler, stereo_call):
    r = call(handler, stereo_call, multichannel=True, speaker_names=["Agent", "Customer"])
    assert {c["speaker"] for c in r["chunks"]} <= {"Agent", "Customer"}
    assert all(c["speaker"] == ("Agent", "Customer")[c["channel"]] for c in r["chunks"])
    srt = call(handler, stereo_call, multichannel=True, speaker_names=["Agent", "Customer"],
               response_format="srt")["content"]
    assert "CHANNEL_" not in srt


def test_diarize_channels_labels_speakers_per_channel(handler, stereo_call):
    r = call(handler, stereo_call, multichannel=True, diarize_channels=True)
    assert r["chunks"]
    for c in r["chunks"]:
        assert c["speaker"].startswith(f"CHANNEL_{c['channel']}_SPEAKER_"), c


def test_a_silent_channel_is_named_in_a_warning_and_has_no_words(handler):
    three = np.stack([tone(3.0, freq=180.0), np.zeros(3 * 16000, np.float32), tone(3.0, freq=320.0)], axis=1)
    r = call(handler, encode(three), multichannel=True)
    assert "channel 1 is silent: it has no words" in r["warnings"]
    assert all(c["channel"] != 1 for c in r["chunks"])


def test_known_speakers_work_with_channels(handler, stereo_call):
    r = call(handler, stereo_call, multichannel=True, return_speaker_embeddings=True)
    assert set(r["speaker_embeddings"]) <= {"CHANNEL_0", "CHANNEL_1"}
    voice = next((v for v in r["speaker_embeddings"].values() if v), None)
    if voice is None:
        pytest.skip("the tiny random models kept no word to embed")
    named = call(handler, stereo_call, multichannel=True, known_speaker_names=["Ann"],
                 known_speaker_references=[voice], speaker_match_threshold=0.999)
    assert named["known_speakers"][0]["speaker"] == "Ann"


@pytest.mark.parametrize("parameters, audio, words", [
    ({"multichannel": True}, "mono", ["1 channel", "mono", "multichannel"]),
    ({"multichannel": True, "num_speakers": 3}, "stereo", ["num_speakers=3", "2 channels"]),
    ({"multichannel": True, "max_speakers": 1}, "stereo", ["max_speakers=1", "2 channels"]),
    ({"multichannel": True, "diarize_channels": True, "num_speakers": 1}, "stereo", ["num_speakers=1", "2 or more"]),
    ({"diarize_channels": True}, "stereo", ["multichannel=true"]),
])
def test_bad_multichannel_requests_are_refused_with_what_is_wrong(handler, stereo_call, parameters, audio, words):
    data = encode(tone(2.0)) if audio == "mono" else stereo_call
    with pytest.raises(RequestError) as err:
        call(handler, data, **parameters)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_too_many_channels_are_refused_before_reading_the_samples():
    many = encode(np.zeros((1600, MAX_CHANNELS + 1), np.float32))
    with pytest.raises(RequestError, match=f"{MAX_CHANNELS + 1} channels; multichannel takes at most {MAX_CHANNELS}"):
        decode_audio(many, channels=True, max_channels=MAX_CHANNELS)
    config = InferenceConfig.from_request({"multichannel": True}, ModelCapabilities())
    with pytest.raises(RequestError, match="at most"):
        config.check_channels(MAX_CHANNELS + 1)


def test_decoding_keeps_each_channel_and_their_relative_levels(stereo_call):
    audio = decode_audio(stereo_call, channels=True)
    assert audio.shape == (2, 6 * 16000)
    left_first = np.abs(audio[0, :3 * 16000]).mean() / np.abs(audio[1, :3 * 16000]).mean()
    assert left_first == pytest.approx(10.0, rel=0.05)
    mono = decode_audio(stereo_call)
    assert mono.ndim == 1 and len(mono) == 6 * 16000


def test_decoding_keeps_channels_through_ffmpeg(stereo_call, tmp_path):
    import shutil
    import subprocess

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed")
    (tmp_path / "in.wav").write_bytes(stereo_call)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(tmp_path / "in.wav"), "-c:a", "aac",
                    str(tmp_path / "call.m4a")], check=True)
    audio = decode_audio((tmp_path / "call.m4a").read_bytes(), channels=True)
    assert audio.shape[0] == 2 and abs(audio.shape[1] - 6 * 16000) < 16000
    assert np.abs(audio[0, 8000:40000]).mean() > 5 * np.abs(audio[1, 8000:40000]).mean()


def test_the_options_and_form_fields_reach_the_parameters():
    from speaker_asr.cli_options import build_parser, request_parameters

    args = build_parser().parse_args(["transcribe", "call.wav", "--multichannel", "--diarize-channels"])
    assert request_parameters(args) == {"multichannel": True, "diarize_channels": True}
    assert InferenceConfig.parameters_from_strings({"multichannel": "true"}) == {"multichannel": True}


def test_each_channel_is_diarized_with_its_share_of_the_speaker_count():
    """diarize_channels: num_speakers counts every channel's speakers, so one channel's
    diarization gets at most that many less one per other channel, and never the whole count."""
    caps = ModelCapabilities()
    config = InferenceConfig.from_request({"multichannel": True, "diarize_channels": True,
                                           "num_speakers": 4}, caps)
    one = config.model_copy(update=config.channel_speakers(2))
    assert (one.num_speakers, one.min_speakers, one.max_speakers) == (None, None, 3)
    config = InferenceConfig.from_request({"multichannel": True, "diarize_channels": True,
                                           "min_speakers": 3}, caps)
    one = config.model_copy(update=config.channel_speakers(2))
    assert (one.num_speakers, one.min_speakers, one.max_speakers) == (None, None, None)


def _spy_pipe(monkeypatch, asr) -> list:
    """Every call of the ASR pipeline from now on: (inputs, generate_kwargs)."""
    calls = []

    class Spy:
        def __init__(self, real):
            self.real = real

        def __call__(self, inputs, **kwargs):
            calls.append((inputs, kwargs.get("generate_kwargs", {})))
            return self.real(inputs, **kwargs)

        def __getattr__(self, name):
            return getattr(self.real, name)

    monkeypatch.setattr(asr, "pipe", Spy(asr.pipe))
    return calls


@pytest.mark.parametrize("seconds", [6.0, 45.0])  # one window each; chunked long-form
def test_the_channels_are_decoded_in_one_batch_and_their_loops_cut(handler, monkeypatch, seconds):
    asr = handler.models.asr
    config = InferenceConfig.from_request({"multichannel": True, "return_word_timestamps": True},
                                          handler.models.capabilities)
    channels = np.stack([tone(seconds, freq=f) for f in (180.0, 320.0, 250.0)])
    alone = [asr.transcribe(c, config, word_timestamps=True) for c in channels]
    calls = _spy_pipe(monkeypatch, asr)
    events = []
    result = handler.models.transcribe(channels, config, progress=events.append)
    assert len(calls) == 1 and len(calls[0][0]) == 3  # one pass, the three channels side by side
    assert "stopping_criteria" in calls[0][1]  # a channel whose decode loops is ended there
    asr_events = [e for e in events if e.stage == "asr"]
    windows = 3 * asr.window_count(channels.shape[1], config, seconds > config.chunk_length_s)
    assert asr_events[0].done == 0 and asr_events[-1].done == asr_events[-1].total == windows
    # the same words as each channel decoded alone
    batched = asr.transcribe_many(list(channels), config, word_timestamps=True)
    assert [[w.text for w in t.words] for t in batched] == [[w.text for w in t.words] for t in alone]
    # the assistant (loaded here) drafts at batch 1: "auto" leaves it out for the batch, and says so
    assert result.assisted.used is False and result.assisted.reason == (
        "channels decoded in one batch" if seconds <= config.chunk_length_s else "audio longer than one window")


def test_channels_in_different_languages_are_decoded_each_in_its_own(handler, monkeypatch):
    asr = handler.models.asr
    config = InferenceConfig.from_request({"multichannel": True}, handler.models.capabilities)
    languages = iter(["en", "fr"])
    monkeypatch.setattr(asr, "detect_language", lambda audio: next(languages))
    calls = _spy_pipe(monkeypatch, asr)
    out = asr.transcribe_many([tone(4.0, freq=180.0), tone(4.0, freq=320.0)], config)
    assert [kwargs.get("language") for _, kwargs in calls] == ["en", "fr"]
    assert [t.language for t in out] == ["en", "fr"]


def test_the_recordings_language_is_detected_once_on_all_its_channels(handler, monkeypatch):
    """Detected channel by channel, a channel holding mostly the others' bleed took another
    language: the channels share the one detected on their sum."""
    asr = handler.models.asr
    config = InferenceConfig.from_request({"multichannel": True}, handler.models.capabilities)
    heard = []
    monkeypatch.setattr(asr, "detect_language", lambda audio: heard.append(audio.copy()) or "fr")
    calls = _spy_pipe(monkeypatch, asr)
    channels = np.stack([tone(4.0, freq=180.0), 0.5 * tone(4.0, freq=320.0)])
    result = handler.models.transcribe(channels, config)
    assert len(heard) == 1 and np.allclose(heard[0], channels.mean(axis=0))
    assert [kwargs.get("language") for _, kwargs in calls] == ["fr"] and result.language == "fr"
