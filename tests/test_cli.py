"""``python -m cli``: transcribe a generated WAV in-process with the tiny models (json and txt
output), and the exit codes of bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, TINY_MAX_NEW_TOKENS, encode, tone

FAKE_TOKEN = "hf_fake_SECRET123"


def cli_env(tiny_models, **overrides) -> dict:
    env = dict(os.environ)
    env.update(ASR_MODEL=str(tiny_models["whisper"]), ASSISTANT_MODEL=str(tiny_models["assistant"]),
               DIARIZATION_MODEL=str(tiny_models["pyannote"]), MAX_NEW_TOKENS=str(TINY_MAX_NEW_TOKENS),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false", HF_TOKEN=FAKE_TOKEN)
    env.update(overrides)
    return env


def run_cli(args, env, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


CLIP_SECONDS = 4.0


@pytest.fixture(scope="module")
def wav_path(tmp_path_factory):
    """Two 'voices' (tones at two pitches), 2 s each, as 16-bit WAV; a space in the name."""
    path = tmp_path_factory.mktemp("cli") / "two voices.wav"
    path.write_bytes(encode(np.concatenate([tone(2.0, freq=180.0), tone(2.0, freq=320.0)])))
    return path


@pytest.fixture(scope="module")
def json_result(tiny_models, wav_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli-out") / "result.json"
    proc = run_cli(["transcribe", wav_path, "--num-speakers", 2, "--language", "en", "--output", out],
                   cli_env(tiny_models))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout == ""  # --output: nothing on stdout
    return json.loads(out.read_text())


def test_transcribe_json(json_result):
    assert isinstance(json_result["text"], str)
    assert json_result["language"] == "en"
    assert json_result["duration"] == pytest.approx(CLIP_SECONDS, abs=0.01)
    assert json_result["chunks"]
    for chunk in json_result["chunks"]:
        start, end = chunk["timestamp"]
        assert 0.0 <= start <= end <= CLIP_SECONDS + 0.01
        assert re.fullmatch(r"SPEAKER_\d\d", chunk["speaker"])
    assert json_result["speakers"]


def test_transcribe_txt_prints_one_line_per_speaker_turn(tiny_models, wav_path, json_result):
    proc = run_cli(["transcribe", wav_path, "--num-speakers", 2, "--language", "en", "--format", "txt"],
                   cli_env(tiny_models))
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.rstrip("\n").split("\n")
    # same input, greedy decoding: the same turns as the json run
    assert lines == [f"{turn['speaker']}: {turn['text']}" for turn in json_result["speakers"]]
    assert all(re.match(r"SPEAKER_\d\d: ", line) for line in lines)
    assert FAKE_TOKEN not in proc.stdout + proc.stderr


def test_format_text_without_speakers_is_the_plain_text():
    import cli

    assert cli.format_text({"text": " hello there ", "speakers": []}) == "hello there"
    assert cli.format_text({"text": "a b", "speakers": [
        {"speaker": "SPEAKER_00", "text": "a", "timestamp": [0, 1]},
        {"speaker": "SPEAKER_01", "text": " b", "timestamp": [1, 2]}]}) == "SPEAKER_00: a\nSPEAKER_01: b"
    # response_format=srt/vtt/txt/rttm: the handler's text as it is
    assert cli.format_text({"format": "srt", "content": "1\n00:00:00,000 --> 00:00:01,000\nA: hi\n\n"}) \
        == "1\n00:00:00,000 --> 00:00:01,000\nA: hi"


def test_audio_the_handler_refuses_exits_2_with_its_message(tiny_models, tmp_path):
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("these are meeting notes, not a recording\n")
    proc = run_cli(["transcribe", not_audio],
                   cli_env(tiny_models, ASSISTANT_MODEL="", DIARIZATION_MODEL=""))
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "decode" in last, last
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["transcribe", "{wav}", "--task", "dance"], "invalid choice"),
    (["transcribe", "{wav}", "--num-speakers", "0"], "must be 1 or more"),
    (["transcribe", "{wav}", "--language", "klingon"], "unknown language 'klingon'"),
    (["transcribe", "{wav}", "--num-speakers", "2", "--max-speakers", "3"], "either num_speakers"),
    (["transcribe", "{wav}", "--param", "speakers=2"], "unknown parameter 'speakers'"),
    (["transcribe", "/nonexistent/audio.wav"], "cannot read /nonexistent/audio.wav"),
    (["transcribe"], "required: FILE"),
])
def test_bad_arguments_exit_2_before_loading_models(tiny_models, wav_path, args, fragment):
    # DEVICE=nonsense would fail any model load: these must be refused before that
    env = cli_env(tiny_models, DEVICE="nonsense")
    proc = run_cli([a.format(wav=wav_path) for a in args], env, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert fragment in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


def test_model_load_failure_exits_1_without_the_token(tiny_models, wav_path):
    proc = run_cli(["transcribe", wav_path], cli_env(
        tiny_models, ASR_MODEL=f"/nonexistent/{FAKE_TOKEN}/whisper", DIARIZATION_MODEL="", ASSISTANT_MODEL=""))
    assert proc.returncode == 1
    assert "could not load the models" in proc.stderr
    assert FAKE_TOKEN not in proc.stderr


def test_serve_refuses_a_bad_port_setting(tiny_models):
    proc = run_cli(["serve"], cli_env(tiny_models, PORT="eighty"), timeout=120)
    assert proc.returncode == 2
    assert "PORT='eighty' is not an integer" in proc.stderr
