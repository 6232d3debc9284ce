"""The default Inference Endpoints image, emulated: the REAL toolkit webservice serving handler.py.

Runs in the venv that ``make test-endpoints`` builds with the image's pins and then the image
entrypoint's ``pip install -r requirements.txt`` (tests/endpoints_image/image_venv.py); skipped in
the main environment. Every audio file of the toolkit's own test set goes through every way a user
calls the endpoint: base64 JSON with parameters (with ``HF_TASK=automatic-speech-recognition``,
where the toolkit decodes the base64 itself, and without), base64 JSON alone, the raw file with
query parameters, and ``huggingface_hub.InferenceClient``. With the real models of
``../shared/real-models`` (whisper tiny.en + the CAM++ 3.1 pipeline) the 30 s two-speaker sample
must come back as its words with two speakers.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from endpoints_image.toolkit_server import TOOLKIT_AUDIO, toolkit_server

pytestmark = pytest.mark.skipif(
    os.environ.get("TOOLKIT_SERVER") != "1",
    reason="runs where the toolkit's own packages are installed (make test-endpoints sets TOOLKIT_SERVER=1)")

REAL = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
CONTENT_TYPES = {".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg", ".ogg": "audio/ogg",
                 ".webm": "audio/webm", ".m4a": "audio/m4a", ".amr": "audio/amr"}
# the files' lengths as ffmpeg decodes them (samples at 16 kHz); decoders differ by a few tens of
# ms at the edges (mp3 encoder padding)
DURATIONS = {"sample1.wav": 13.69, "sample1.flac": 13.69, "sample1.ogg": 13.69, "sample1.mp3": 13.69,
             "sample1.webm": 13.69, "sample.m4a": 30.14, "sample.amr": 30.12, "long_sample.mp3": 113.36}
FILES = sorted(p.name for p in TOOLKIT_AUDIO.iterdir()) if TOOLKIT_AUDIO.is_dir() else []


def test_every_toolkit_audio_file_is_covered():
    assert FILES, f"no audio files in {TOOLKIT_AUDIO}"
    assert set(FILES) == set(DURATIONS), "a new toolkit audio file: add its length here"
    assert {Path(f).suffix for f in FILES} <= set(CONTENT_TYPES)


def inference_client(url: str, content_type: str, path: Path, extra_body: Optional[dict] = None) -> dict:
    """huggingface_hub's InferenceClient, in its own process (inference_client.py says why)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    args = [sys.executable, str(Path(__file__).with_name("inference_client.py")), url, content_type,
            str(path)] + ([json.dumps(extra_body)] if extra_body else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _b64(name: str) -> str:
    return base64.b64encode((TOOLKIT_AUDIO / name).read_bytes()).decode()


def _check(response, name: str, words: bool):
    assert response.status_code == 200, response.text[:500]
    body = response.json()
    assert isinstance(body["text"], str) and body["chunks"], body
    assert abs(body["duration"] - DURATIONS[name]) < 0.3, (body["duration"], DURATIONS[name])
    assert body["speakers"] and all(c["speaker"].startswith("SPEAKER_") for c in body["chunks"])
    for chunk in body["chunks"]:
        start, end = chunk["timestamp"]
        assert 0 <= start <= end <= body["duration"] + 1e-6
        assert ("words" in chunk) == words
        for w in chunk.get("words", []):
            assert w["speaker"] == chunk["speaker"] and start - 1e-6 <= w["start"] <= w["end"]
    return body


@pytest.fixture(scope="module", params=["automatic-speech-recognition", None], ids=["HF_TASK=asr", "no-HF_TASK"])
def server(request, tiny_models):
    from helpers import TINY_MAX_NEW_TOKENS

    env = {"HF_TASK": request.param, "ASR_MODEL": str(tiny_models["whisper"]),
           "ASSISTANT_MODEL": str(tiny_models["assistant"]),
           "DIARIZATION_MODEL": str(tiny_models["pyannote"]),
           "MAX_NEW_TOKENS": str(TINY_MAX_NEW_TOKENS)}
    with toolkit_server(env) as url:
        yield url


@pytest.mark.parametrize("name", FILES)
def test_base64_json_with_parameters(server, name):
    import requests

    response = requests.post(server, json={"inputs": _b64(name), "parameters": {
        "return_word_timestamps": True, "language": "en"}}, timeout=300)
    _check(response, name, words=True)


@pytest.mark.parametrize("name", FILES)
def test_raw_file_with_query_parameters(server, name):
    import requests

    response = requests.post(f"{server}/?return_word_timestamps=true&max_speakers=3&language=en",
                             data=(TOOLKIT_AUDIO / name).read_bytes(),
                             headers={"Content-Type": CONTENT_TYPES[Path(name).suffix]}, timeout=300)
    _check(response, name, words=True)


@pytest.mark.parametrize("name", ["sample1.flac", "sample.m4a"])
def test_base64_json_alone(server, name):
    import requests

    response = requests.post(server, json={"inputs": _b64(name)}, timeout=300)
    _check(response, name, words=False)


@pytest.mark.parametrize("name", ["sample1.wav", "sample1.mp3", "sample.amr"])
def test_inference_client(server, name):
    """huggingface_hub's InferenceClient, given a Content-Type (inference_client.py says why):
    the typed output keeps every field on its chunk objects."""
    content_type = CONTENT_TYPES[Path(name).suffix]
    out = inference_client(server, content_type, TOOLKIT_AUDIO / name)
    assert isinstance(out["text"], str) and out["chunks"] and out["speakers"]
    assert all(c["speaker"].startswith("SPEAKER_") for c in out["chunks"])
    worded = inference_client(server, content_type, TOOLKIT_AUDIO / name, {"return_word_timestamps": True})
    assert all(c["words"] for c in worded["chunks"])


def test_client_mistakes_are_400_with_a_reason(server):
    import requests

    bad = requests.post(server, json={"inputs": _b64("sample1.wav"), "parameters": {"num_speakers": 0}},
                        timeout=60)
    assert bad.status_code == 400 and "num_speakers" in bad.json()["error"]
    unknown = requests.post(server, json={"inputs": _b64("sample1.wav"), "parameters": {"colour": "red"}},
                            timeout=60)
    assert unknown.status_code == 400 and "colour" in unknown.json()["error"]
    not_audio = requests.post(server, data=b"\x00" * 4000, headers={"Content-Type": "audio/wav"}, timeout=60)
    assert not_audio.status_code == 400 and not_audio.json()["error"]


@pytest.mark.skipif(not (REAL / "pyannote-campp-3.1" / "config.yaml").is_file(),
                    reason=f"real models absent: PYTHON=.venv/bin/python ../shared/real-models/build.sh ({REAL})")
def test_real_models_two_speaker_sample():
    """whisper tiny.en + the CAM++ 3.1 pipeline (real weights) on pyannote's 30 s sample: its words,
    two speakers, through requests and InferenceClient."""
    import requests

    pipeline = REAL / "pyannote-campp-3.1"
    env = {"HF_TASK": "automatic-speech-recognition", "ASR_MODEL": str(REAL / "whisper-tiny.en"),
           "ASSISTANT_MODEL": "", "DIARIZATION_MODEL": str(pipeline)}
    audio = (REAL / "audio" / "sample.wav").read_bytes()
    reference = [line.split(maxsplit=5)[-1] for line in (REAL / "audio" / "sample.stm").read_text().splitlines()
                 if line.strip() and not line.startswith(";;")]
    expected = {w.strip(".,?!").lower() for line in reference for w in line.split()}
    # the pipeline's campp_embedding.py: importable through its loader, nothing on PYTHONPATH
    with toolkit_server(env) as url:
        body = requests.post(url, json={"inputs": base64.b64encode(audio).decode(),
                                        "parameters": {"return_word_timestamps": True}}, timeout=600).json()
        via_client = inference_client(url, "audio/wav", REAL / "audio" / "sample.wav")
        # known speakers on this image's pyannote (3.x): clips of Diane and Sheila from the
        # sample's first 17.8 s name them, a LibriVox reader's clip names nobody
        named = requests.post(url, json={"inputs": base64.b64encode(audio).decode(), "parameters": {
            "known_speaker_names": ["Diane", "Sheila", "Reader"],
            "known_speaker_references": [_clip(audio, 10.78, 14.18), _clip(audio, 14.45, 17.77),
                                         _reader_clip()]}}, timeout=600)
    assert named.status_code == 200, named.text
    known = {k["name"]: k["speaker"] for k in named.json()["known_speakers"]}
    assert known == {"Diane": "Diane", "Sheila": "Sheila", "Reader": None}, named.json()["known_speakers"]
    assert {c["speaker"] for c in named.json()["chunks"]} == {"Diane", "Sheila"}
    words = [w for c in body["chunks"] for w in c["words"]]
    heard = {w["word"].strip(" .,?!").lower() for w in words}
    assert len(heard & expected) >= 0.7 * len(heard), (sorted(heard - expected), body["text"])
    assert len(words) > 60
    assert {w["speaker"] for w in words} == {"SPEAKER_00", "SPEAKER_01"}
    assert {c["speaker"] for c in via_client["chunks"]} == {"SPEAKER_00", "SPEAKER_01"}
    assert via_client["text"] == body["text"]


def _clip(wav: bytes, start: float, end: float) -> str:
    import io

    import soundfile as sf

    audio, sr = sf.read(io.BytesIO(wav), dtype="float32")
    buf = io.BytesIO()
    sf.write(buf, audio[int(start * sr):int(end * sr)], sr, format="WAV")
    return base64.b64encode(buf.getvalue()).decode()


def _reader_clip() -> str:
    clips = sorted((REAL / "audio" / "librivox").glob("*.wav"))
    return _clip(clips[0].read_bytes(), 0.0, 6.0)
