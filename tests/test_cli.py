"""``python -m speaker_asr``: transcribe a generated WAV in-process with the tiny models (every format in
one run, and ``--format txt`` on stdout through the handler), what the options become (a fake
handler, in this process), and the exit codes of bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import FAKE_TOKEN, GOLDEN, ROOT, cli_env, encode, tone



def run_cli(args, env, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "speaker_asr", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


CLIP_SECONDS = 4.0
STEM = "two voices"
# every format, the file each is written to by --output-dir
ALL_FILES = {"json": f"{STEM}.json", "verbose_json": f"{STEM}.verbose_json.json",
             "diarized_json": f"{STEM}.diarized_json.json", "srt": f"{STEM}.srt",
             "vtt": f"{STEM}.vtt", "rttm": f"{STEM}.rttm", "txt": f"{STEM}.txt"}


@pytest.fixture(scope="module")
def wav_path(tmp_path_factory):
    """Two 'voices' (tones at two pitches), 2 s each, as 16-bit WAV; a space in the name."""
    path = tmp_path_factory.mktemp("cli") / f"{STEM}.wav"
    path.write_bytes(encode(np.concatenate([tone(2.0, freq=180.0), tone(2.0, freq=320.0)])))
    return path


@pytest.fixture(scope="module")
def all_formats(tiny_models, wav_path, tmp_path_factory) -> dict[str, str]:
    """One transcription written in every format (the first speaker named Alice): format -> text."""
    out = tmp_path_factory.mktemp("cli-out") / "new" / "dir"  # created by the CLI
    proc = run_cli(["transcribe", wav_path, "--num-speakers", 2, "--language", "en",
                    "--format", "json,verbose_json,diarized_json", "--format", "srt,vtt,rttm,txt",
                    "--speaker-names", "Alice", "--output-dir", out], cli_env(tiny_models))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout == ""  # files only
    assert sorted(p.name for p in out.iterdir()) == sorted(ALL_FILES.values())
    return {fmt: (out / name).read_text(encoding="utf-8") for fmt, name in ALL_FILES.items()}


@pytest.fixture(scope="module")
def json_result(all_formats) -> dict:
    return json.loads(all_formats["json"])


@pytest.mark.subprocess
def test_transcribe_json(json_result, all_formats):
    assert all_formats["json"].startswith('{\n  "')  # indented
    assert isinstance(json_result["text"], str)
    assert json_result["language"] == "en"
    assert json_result["duration"] == pytest.approx(CLIP_SECONDS, abs=0.01)
    assert json_result["chunks"]
    for chunk in json_result["chunks"]:
        start, end = chunk["timestamp"]
        assert 0.0 <= start <= end <= CLIP_SECONDS + 0.01
        assert re.fullmatch(r"Alice|SPEAKER_\d\d", chunk["speaker"])
    assert json_result["speakers"]
    assert "Alice" in {turn["speaker"] for turn in json_result["speakers"]}  # --speaker-names


@pytest.mark.subprocess
@pytest.mark.parametrize("fmt", ["verbose_json", "diarized_json", "srt", "vtt", "rttm", "txt"])
def test_every_format_is_rendered_from_the_same_transcription(all_formats, json_result, fmt):
    from speaker_asr.formats import FORMATS, render

    expected = render(json_result, fmt)  # already renamed: rendering again keeps the names
    if FORMATS[fmt].is_text:
        assert all_formats[fmt] == expected["content"]  # the text itself, not JSON
    else:
        assert all_formats[fmt].startswith('{\n  "')
        written = json.loads(all_formats[fmt])
        written.pop("warnings", None)
        assert written == expected
    assert "Alice" in all_formats[fmt]


@pytest.mark.subprocess
def test_transcribe_txt_prints_one_line_per_speaker_turn(tiny_models, wav_path, all_formats,
                                                         json_result):
    """A single format is the handler's response_format: the same text as the run above."""
    proc = run_cli(["transcribe", wav_path, "--num-speakers", 2, "--language", "en", "--format", "txt",
                    "--speaker-names", "Alice"], cli_env(tiny_models))
    assert proc.returncode == 0, proc.stderr[-4000:]
    # same input, greedy decoding: the same turns as the run with every format
    assert proc.stdout == all_formats["txt"]
    lines = proc.stdout.rstrip("\n").split("\n")
    assert lines == [f"{turn['speaker']}: {' '.join(turn['text'].split())}"
                     for turn in json_result["speakers"] if turn["text"].strip()]
    assert all(re.match(r"(Alice|SPEAKER_\d\d): ", line) for line in lines)
    assert FAKE_TOKEN not in proc.stdout + proc.stderr


@pytest.mark.subprocess
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


@pytest.mark.subprocess
@pytest.mark.parametrize("args, fragment", [
    (["transcribe", "{wav}", "--task", "dance"], "invalid choice"),
    (["transcribe", "{wav}", "--num-speakers", "0"], "must be 1 or more"),
    (["transcribe", "{wav}", "--language", "klingon"], "unknown language 'klingon'"),
    (["transcribe", "{wav}", "--num-speakers", "2", "--max-speakers", "3"], "either num_speakers"),
    (["transcribe", "{wav}", "--param", "speakers=2"], "unknown parameter 'speakers'"),
    (["transcribe", "{wav}", "--format", "srt,docx"], "unknown format 'docx'"),
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


@pytest.mark.subprocess
def test_model_load_failure_exits_1_without_the_token(tiny_models, wav_path):
    proc = run_cli(["transcribe", wav_path], cli_env(
        tiny_models, ASR_MODEL=f"/nonexistent/{FAKE_TOKEN}/whisper", DIARIZATION_MODEL="", ASSISTANT_MODEL=""))
    assert proc.returncode == 1
    assert "could not load the models" in proc.stderr
    assert FAKE_TOKEN not in proc.stderr


@pytest.mark.subprocess
def test_serve_refuses_a_bad_port_setting(tiny_models):
    proc = run_cli(["serve"], cli_env(tiny_models, PORT="eighty"), timeout=120)
    assert proc.returncode == 2
    assert "PORT='eighty' is not valid: use a whole number >= 0 and <= 65535" in proc.stderr


# --------------------------------------------------------------------------- options, in-process


class FakeHandler:
    """Stands in for handler.EndpointHandler: records each request and answers like the endpoint
    for the golden response (tests/golden/response.json: two speakers, words)."""

    calls: list[dict] = []

    def __call__(self, data: dict) -> dict:
        from speaker_asr import cli

        FakeHandler.calls.append(data)
        params = dict(data["parameters"])
        response = json.loads((GOLDEN / "response.json").read_text(encoding="utf-8"))
        response["warnings"] = ["a warning from the handler"]
        return cli.render_result(response, params.get("response_format", "json"),
                                 params.get("speaker_names"), params.get("task", "transcribe"))


@pytest.fixture
def fake(monkeypatch, tmp_path):
    FakeHandler.calls = []
    monkeypatch.setattr("speaker_asr.endpoint.EndpointHandler", FakeHandler)
    audio = tmp_path / "call.flac"
    audio.write_bytes(b"fLaC not really")  # the fake handler does not decode
    return SimpleNamespace(calls=FakeHandler.calls, audio=audio, dir=tmp_path)


def golden_render(fmt: str, names=None) -> dict:
    from speaker_asr.formats import render

    return render(json.loads((GOLDEN / "response.json").read_text(encoding="utf-8")), fmt,
                  speaker_names=names)


def test_options_become_request_parameters_and_the_text_is_written_raw(fake, capsys):
    from speaker_asr import cli

    out_dir = fake.dir / "subs"
    out_dir.mkdir()
    code = cli.main(["transcribe", str(fake.audio), "--format", "SRT", "--speaker-names", "Alice, Bob",
                     "--speaker-names", "Carol", "--prompt", "Ada Lovelace", "--word-timestamps",
                     "--num-speakers", "2", "--output", str(out_dir)])  # an existing directory
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert fake.calls == [{"inputs": b"fLaC not really", "parameters": {
        "num_speakers": 2, "prompt": "Ada Lovelace", "return_word_timestamps": True,
        "speaker_names": ["Alice", "Bob", "Carol"], "response_format": "srt"}}]
    assert [p.name for p in out_dir.iterdir()] == ["call.srt"]
    assert (out_dir / "call.srt").read_text(encoding="utf-8") == \
        golden_render("srt", ["Alice", "Bob", "Carol"])["content"]
    assert captured.out == ""
    assert "warning: a warning from the handler" in captured.err


def test_param_values_are_read_by_each_parameters_type(fake, capsys):
    """--param texts are read as the server reads a query string: by the parameter's declared
    type, never guessed from the text ("1984" stays a prompt; "4" is a batch size)."""
    from speaker_asr import cli

    code = cli.main(["transcribe", str(fake.audio), "--param", "prompt=1984", "--param", "batch_size=4",
                     "--param", "temperature=0.2", "--param", "temperature=0.4"])
    assert code == 0, capsys.readouterr().err
    assert fake.calls[0]["parameters"] == {"prompt": "1984", "batch_size": 4, "temperature": [0.2, 0.4],
                                           "response_format": "json"}
    assert cli.main(["transcribe", str(fake.audio), "--param", "batch_size=four"]) == 2
    assert "batch_size" in capsys.readouterr().err


def test_known_speakers_are_read_from_clip_files(fake, capsys):
    import base64

    from speaker_asr import cli

    alice, bob = fake.dir / "alice.wav", fake.dir / "bob.flac"
    alice.write_bytes(b"RIFF alice")
    bob.write_bytes(b"fLaC bob")
    code = cli.main(["transcribe", str(fake.audio), "--known-speaker", "Alice=" + str(alice),
                     "--known-speaker", " Bob = " + str(bob), "--speaker-match-threshold", "0.7",
                     "--speaker-embeddings", "-f", "diarized_json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert fake.calls[0]["parameters"] == {
        "known_speaker_names": ["Alice", "Bob"],
        "known_speaker_references": [base64.b64encode(b"RIFF alice").decode(), base64.b64encode(b"fLaC bob").decode()],
        "speaker_match_threshold": 0.7, "return_speaker_embeddings": True, "response_format": "diarized_json"}
    for bad, fragment in ((["--known-speaker", "Alice"], "NAME=CLIP"),
                          (["--known-speaker", f"Carol={fake.dir / 'missing.wav'}"], "cannot read"),
                          (["--known-speaker", f"SPEAKER_01={alice}"], "unnamed speaker")):
        assert cli.main(["transcribe", str(fake.audio), *bad]) == 2
        assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["json", "verbose_json", "diarized_json", "srt", "vtt", "rttm", "txt"])
def test_each_format_on_stdout(fake, capsys, fmt):
    from speaker_asr import cli

    assert cli.main(["transcribe", str(fake.audio), "-f", fmt, "--speaker-names", "Diane"]) == 0
    out = capsys.readouterr().out
    assert fake.calls[0]["parameters"] == {"response_format": fmt, "speaker_names": ["Diane"]}
    expected = golden_render(fmt, ["Diane"])
    if fmt in ("srt", "vtt", "rttm", "txt"):
        assert out == expected["content"]
    else:
        assert out.startswith('{\n  "') and out.endswith("}\n")
        written = json.loads(out)
        written.pop("warnings")
        written.setdefault("duration", expected.get("duration"))
        assert written == expected


def test_one_file_for_one_format(fake, capsys):
    from speaker_asr import cli

    path = fake.dir / "result.vtt"
    assert cli.main(["transcribe", str(fake.audio), "--format", "vtt", "-o", str(path)]) == 0
    assert capsys.readouterr().out == ""
    assert path.read_text(encoding="utf-8") == golden_render("vtt")["content"]


def test_several_formats_transcribe_once(fake, capsys):
    from speaker_asr import cli

    out = fake.dir / "out"
    assert cli.main(["transcribe", str(fake.audio), "--format", "verbose_json,rttm", "--format",
                     "diarized_json", "--format", "rttm", "--speaker-names", "Alice", "--param",
                     "language=en", "-d", str(out)]) == 0
    # one request, the plain response; each format rendered from it with the names
    assert [c["parameters"] for c in fake.calls] == [{"language": "en"}]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("call")) == \
        ["call.diarized_json.json", "call.rttm", "call.verbose_json.json"]
    assert (out / "call.rttm").read_text(encoding="utf-8") == golden_render("rttm", ["Alice"])["content"]
    verbose = json.loads((out / "call.verbose_json.json").read_text(encoding="utf-8"))
    verbose.pop("warnings")
    assert verbose == golden_render("verbose_json", ["Alice"])
    assert "warning: a warning from the handler" in capsys.readouterr().err


def test_output_names():
    from speaker_asr import cli

    assert cli.output_name("a b", "json", ["json"]) == "a b.json"
    assert cli.output_name("a", "verbose_json", ["verbose_json", "srt"]) == "a.json"
    assert cli.output_name("a", "verbose_json", ["json", "verbose_json"]) == "a.verbose_json.json"
    assert cli.output_name("a", "json", ["json", "verbose_json"]) == "a.json"
    assert {f: cli.output_name("x", f, [f]) for f in ("srt", "vtt", "rttm", "txt", "diarized_json")} \
        == {"srt": "x.srt", "vtt": "x.vtt", "rttm": "x.rttm", "txt": "x.txt", "diarized_json": "x.json"}
    args = cli.build_parser().parse_args(["transcribe", "-", "-f", "srt", "-d", "out"])
    assert cli.destinations(args, ["srt"]) == {"srt": Path("out") / "stdin.srt"}
    args = cli.build_parser().parse_args(["transcribe", "talks/a.mp3", "-f", "txt", "-o", "new/"])
    assert cli.destinations(args, ["txt"]) == {"txt": Path("new") / "a.txt"}  # a trailing / : a directory
    args = cli.build_parser().parse_args(["transcribe", "a.mp3", "-o", "result.json"])
    assert cli.destinations(args, ["json"]) == {"json": Path("result.json")}


def test_legacy_param_response_format(fake, capsys):
    from speaker_asr import cli

    assert cli.main(["transcribe", str(fake.audio), "--param", "response_format=txt",
                     "--param", "speaker_names=Ann,Ben"]) == 0
    assert capsys.readouterr().out == golden_render("txt", ["Ann", "Ben"])["content"]
    assert fake.calls[0]["parameters"] == {"response_format": "txt", "speaker_names": ["Ann", "Ben"]}


@pytest.mark.parametrize("args, fragment", [
    (["--format", "srt,vtt"], "need a directory to write them into"),
    (["--format", "srt,vtt", "-o", "{dir}/out.srt"], "need a directory to write them into"),
    (["--format", "srt", "--param", "response_format=vtt"], "disagree"),
    (["--param", "response_format=docx"], "unknown format 'docx'"),
    (["--speaker-names", "Alice,Alice"], "twice"),
    (["--speaker-names", "Alice,"], "speaker_names[1] must be a non-empty string"),
    (["--prompt", ""], "prompt"),
])
def test_bad_format_options_exit_2_before_the_handler(fake, capsys, args, fragment):
    from speaker_asr import cli

    code = cli.main(["transcribe", str(fake.audio), *(a.format(dir=fake.dir) for a in args)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert fragment in err and err.startswith("error: "), err
    assert fake.calls == []


def test_output_and_output_dir_are_exclusive(capsys):
    from speaker_asr import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["transcribe", "x.wav", "-o", "a.json", "-d", "out"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("args, fragment", [
    (["--speaker-names", "Alice,Alice"], "twice"),
    (["--param", "response_format=docx"], "unknown format 'docx'"),
    (["--token", "x"], "--token is for --url"),
    (["--url", "localhost:8080"], "is not an http:// or https:// URL"),
])
def test_one_file_and_a_batch_run_check_the_options_alike(fake, capsys, args, fragment):
    """One set-up serves both: the same option is refused with the same message, before the
    handler is loaded or anything is sent."""
    from speaker_asr import cli

    other = fake.dir / "other.flac"
    other.write_bytes(b"fLaC not really")
    one = cli.main(["transcribe", str(fake.audio), *args])
    err_one = capsys.readouterr().err
    many = cli.main(["transcribe", str(fake.audio), str(other), "-d", str(fake.dir / "out"), *args])
    err_many = capsys.readouterr().err
    assert one == many == 2, (err_one, err_many)
    assert fragment in err_one and err_one == err_many
    assert fake.calls == [] and not (fake.dir / "out").exists()
