"""Every response format, end to end: produced by a live server (``python -m speaker_asr serve`` with the
tiny models) and by ``python -m speaker_asr transcribe``, read back with independent parsers -- ``srt``
(SubRip), ``webvtt-py`` (WebVTT, voice tags), pyannote's ``load_rttm`` (RTTM), ``json`` -- and
checked against the json response for the same audio and speaker names (greedy decoding: the same
transcript every time). The CLI's files must be what the server sends.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import srt
import webvtt

from helpers import ROOT, ServerProcess, b64, cli_env, encode, server_env, tone

# every test here starts the server (or the command line) as a process
pytestmark = pytest.mark.subprocess

CLIP_SECONDS = 4.0
PARAMS = {"language": "en", "num_speakers": 2}
NAMES = ["Alice", "Bob"]
TOLERANCE = 0.0015  # the text formats write milliseconds


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """Two 'voices' (tones at two pitches), 2 s each, as 16-bit WAV: (bytes, path)."""
    data = encode(np.concatenate([tone(2.0, freq=180.0), tone(2.0, freq=320.0)]))
    path = tmp_path_factory.mktemp("e2e-audio") / "two voices.wav"
    path.write_bytes(data)
    return data, path


@pytest.fixture(scope="module")
def live(tiny_models, clip, tmp_path_factory):
    """One server, and one CLI run (srt and vtt files) loading its models at the same time."""
    out = tmp_path_factory.mktemp("e2e-cli")
    cli = subprocess.Popen(
        [sys.executable, "-m", "speaker_asr", "transcribe", str(clip[1]), "--language", "en",
         "--num-speakers", "2", "--speaker-names", ",".join(NAMES), "--format", "srt,vtt",
         "--output-dir", str(out)],
        cwd=ROOT, env=cli_env(tiny_models), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    server = ServerProcess("formats", server_env(tiny_models), tmp_path_factory.mktemp("e2e-logs"))
    try:
        server.wait_health(lambda status, body: status == 200)
        yield server, cli, out
    finally:
        server.stop()
        if cli.poll() is None:
            cli.kill()
        cli.communicate()


@pytest.fixture(scope="module")
def server(live):
    return live[0]


def post_json(server, clip, **parameters) -> dict:
    r = server.post("/", json={"inputs": b64(clip[0]), "parameters": {**PARAMS, **parameters}})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    return r.json()


@pytest.fixture(scope="module")
def fetch(server, clip):
    """format -> the server's answer for the clip with speaker_names=NAMES (one request each)."""
    cache: dict[str, dict] = {}

    def get(fmt: str) -> dict:
        if fmt not in cache:
            cache[fmt] = post_json(server, clip, response_format=fmt, speaker_names=NAMES)
        return cache[fmt]

    return get


@pytest.fixture(scope="module")
def reference(fetch) -> dict:
    """The json response with the names: what every other format is checked against."""
    body = fetch("json")
    assert body["speakers"], body  # diarized: the formats below have speakers to show
    return body


def turns(response: dict) -> list[dict]:
    return [{"start": t["timestamp"][0], "end": t["timestamp"][1], "text": t["text"],
             "speaker": t["speaker"]} for t in response["speakers"]]


def text_body(fetch, fmt: str) -> str:
    body = fetch(fmt)
    assert set(body) <= {"format", "content", "duration", "warnings", "assisted"}, body
    assert set(body["assisted"]) == {"used", "reason"}  # the ASR ran: every format carries it
    assert body["format"] == fmt
    assert body["duration"] == pytest.approx(CLIP_SECONDS, abs=0.01)
    assert isinstance(body["content"], str)
    return body["content"]


def check_srt(content: str, names: set[str]) -> list[srt.Subtitle]:
    subs = list(srt.parse(content))
    assert subs
    assert [s.index for s in subs] == list(range(1, len(subs) + 1))
    for sub in subs:
        start, end = sub.start.total_seconds(), sub.end.total_seconds()
        assert 0.0 <= start < end <= CLIP_SECONDS + TOLERANCE, sub
        speaker, sep, text = sub.content.partition(": ")
        assert sep and speaker in names and text.strip(), sub  # "Alice: ..." on the first line
    assert srt.compose(subs, reindex=False) == content  # nothing the parser dropped
    return subs


def check_vtt(content: str, names: set[str]) -> list:
    assert content.startswith("WEBVTT\n")
    captions = webvtt.from_string(content).captions
    assert captions
    for c in captions:
        assert 0.0 <= c.start_in_seconds < c.end_in_seconds <= CLIP_SECONDS + TOLERANCE, c
        assert c.voice in names, c.raw_text  # <v Alice>
        assert c.text.strip()
    return captions


# --------------------------------------------------------------------------- server


def test_json_with_speaker_names(reference):
    assert isinstance(reference["text"], str) and reference["language"] == "en"
    assert reference["duration"] == pytest.approx(CLIP_SECONDS, abs=0.01)
    # the tiny models include an assistant: 'auto' on one-window audio is the policy's choice
    assert isinstance(reference["assisted"]["used"], bool)
    assert reference["assisted"]["reason"].startswith("auto: ")
    labels = {t["speaker"] for t in reference["speakers"]} | {c["speaker"] for c in reference["chunks"]}
    assert labels <= set(NAMES), labels  # num_speakers=2, two names: nobody keeps a label
    # the first speaker to appear (turns, chunks, words) is the first name
    times = [(t["timestamp"][0], t["speaker"]) for t in reference["speakers"]]
    times += [(c["timestamp"][0], c["speaker"]) for c in reference["chunks"]]
    assert min(times, key=lambda item: item[0])[1] == NAMES[0]
    if len(labels) == 2:
        assert labels == set(NAMES)


def test_verbose_json(fetch, reference):
    body = fetch("verbose_json")
    assert {"task", "language", "duration", "text", "segments", "usage"} <= set(body)
    assert body["task"] == "transcribe" and body["language"] == "english"  # OpenAI's shape
    assert body["duration"] == pytest.approx(CLIP_SECONDS, abs=0.01)
    assert body["text"] == reference["text"].strip()
    # Whisper's segments, split where the speaker changes: the json response's chunks
    assert [s["id"] for s in body["segments"]] == list(range(len(reference["chunks"])))
    for seg, chunk in zip(body["segments"], reference["chunks"]):
        assert (seg["start"], seg["end"], seg["text"], seg["speaker"]) == \
            (*chunk["timestamp"], chunk["text"], chunk["speaker"])
        assert seg["speaker"] in NAMES
    assert "words" not in body  # not asked for
    assert set(body["assisted"]) == {"used", "reason"}  # beside usage, as the other notes


def test_diarized_json(fetch, reference):
    body = fetch("diarized_json")
    assert body["duration"] == pytest.approx(CLIP_SECONDS, abs=0.01)
    assert set(body["assisted"]) == {"used", "reason"}
    assert body["text"] == reference["text"].strip()
    assert len(body["segments"]) == len(reference["speakers"])
    for i, (seg, turn) in enumerate(zip(body["segments"], turns(reference))):
        assert seg["type"] == "transcript.text.segment"
        assert seg["id"] == f"seg_{i}"
        assert (seg["start"], seg["end"], seg["text"], seg["speaker"]) == \
            (turn["start"], turn["end"], turn["text"], turn["speaker"])
        assert seg["speaker"] in NAMES


def test_srt(fetch, reference):
    subs = check_srt(text_body(fetch, "srt"), set(NAMES))
    # the cues cover the speaker turns, in order
    first, last = reference["speakers"][0]["timestamp"], reference["speakers"][-1]["timestamp"]
    assert subs[0].start.total_seconds() == pytest.approx(first[0], abs=TOLERANCE)
    assert subs[-1].end.total_seconds() == pytest.approx(last[1], abs=TOLERANCE)
    assert [s.start for s in subs] == sorted(s.start for s in subs)


def test_vtt_voice_tags(fetch, reference):
    captions = check_vtt(text_body(fetch, "vtt"), set(NAMES))
    assert captions[0].start_in_seconds == pytest.approx(reference["speakers"][0]["timestamp"][0],
                                                         abs=TOLERANCE)
    assert captions[0].voice == reference["speakers"][0]["speaker"]


def test_rttm(fetch, reference, tmp_path):
    from pyannote.database.util import load_rttm

    path = tmp_path / "out.rttm"
    path.write_text(text_body(fetch, "rttm"), encoding="utf-8")
    annotations = load_rttm(str(path))
    assert list(annotations) == ["audio"]
    got = sorted((seg.start, seg.end, label)
                 for seg, _, label in annotations["audio"].itertracks(yield_label=True))
    want = sorted((t["start"], t["end"], t["speaker"]) for t in turns(reference) if t["end"] > t["start"])
    assert got and len(got) == len(want)
    for (gs, ge, gl), (ws, we, wl) in zip(got, want):
        assert gl == wl and gl in NAMES
        assert gs == pytest.approx(ws, abs=TOLERANCE) and ge == pytest.approx(we, abs=TOLERANCE)


def test_txt(fetch, reference):
    content = text_body(fetch, "txt")
    assert content.endswith("\n")
    lines = content.rstrip("\n").split("\n")
    assert all(re.fullmatch(r"(Alice|Bob): \S.*", line) for line in lines), lines
    assert lines == [f"{t['speaker']}: {' '.join(t['text'].split())}"
                     for t in turns(reference) if t["text"].strip()]


def test_raw_audio_vtt_with_repeated_query_names(server, clip, fetch):
    r = server.post("/?response_format=vtt&speaker_names=A&speaker_names=B&language=en&num_speakers=2",
                    data=clip[0], headers={"Content-Type": "audio/wav"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["format"] == "vtt"
    captions = check_vtt(body["content"], {"A", "B"})
    # the same cues as the JSON request, with the query's names
    reference = webvtt.from_string(text_body(fetch, "vtt")).captions
    short = dict(zip(NAMES, ["A", "B"]))
    assert [(c.start, c.end, c.text, c.voice) for c in captions] == \
        [(c.start, c.end, c.text, short[c.voice]) for c in reference]


# --------------------------------------------------------------------------- command line


def test_cli_writes_srt_and_vtt_files_like_the_server(live, fetch):
    _, cli, out = live
    stdout, stderr = cli.communicate(timeout=600)
    assert cli.returncode == 0, stderr[-4000:]
    assert stdout == ""
    assert sorted(p.name for p in out.iterdir()) == ["two voices.srt", "two voices.vtt"]
    srt_text = (out / "two voices.srt").read_text(encoding="utf-8")
    vtt_text = (out / "two voices.vtt").read_text(encoding="utf-8")
    check_srt(srt_text, set(NAMES))
    check_vtt(vtt_text, set(NAMES))
    # the same models, audio and parameters: the files are what the server sends
    assert srt_text == text_body(fetch, "srt")
    assert vtt_text == text_body(fetch, "vtt")
