"""What the long-audio scripts share (``reliability/long_audio.py``: the handler end to end;
``bench/long_audio.py``: time and memory per stage): N minutes of speech written to a file, the
models they load, and one measured run in a fresh subprocess.

* :func:`write_long_audio`: real speech from the real-models kit's ``audio`` folder (``sample.wav``
  and the LibriVox clips, 0.5 s apart, cycled) when present, else synthetic two-pitch tones, as
  FLAC or WAV, streamed block by block (4 h is 230 M samples);
* :func:`resolve_models` / :func:`model_settings`: ``real`` (the kit's whisper-tiny.en and
  pyannote-campp-3.1), ``tiny`` (the tiny random models, built once into the work folder), ``auto``
  (real where the kit has them);
* :func:`run_measured`: the measuring process, offline, with a time limit; its JSON, its exit and
  the ``ru_maxrss`` the parent saw for it.

The memory figures themselves come from :mod:`speaker_asr.testing.memory`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

SR = 16_000
GAP_S = 0.5  # silence between two clips
REAL_ASR = "whisper-tiny.en"  # folder names in the real-models kit
REAL_PIPELINE = "pyannote-campp-3.1"


# --------------------------------------------------------------------------- the audio


def speech_clips(audio_dir: Path) -> list[np.ndarray]:
    """The kit's recordings in ``audio_dir`` (``sample.wav``, ``librivox/*.wav``), 16 kHz mono
    float32, or [] when absent."""
    from speaker_asr.audio.decode import decode_audio

    audio_dir = Path(audio_dir)
    paths = [audio_dir / "sample.wav"] if (audio_dir / "sample.wav").exists() else []
    paths += sorted((audio_dir / "librivox").glob("*.wav")) if (audio_dir / "librivox").is_dir() else []
    clips = []
    for path in paths:
        try:
            clips.append(decode_audio(path.read_bytes()))
        except Exception as exc:  # a damaged file is skipped, not fatal
            print(f"skipping {path}: {exc}", file=sys.stderr)
    return clips


def synthetic_clips() -> list[np.ndarray]:
    """Two alternating 'voices': 3 s tones at 180 and 320 Hz with a syllable-rate envelope."""
    t = np.arange(3 * SR) / SR
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t)
    return [(0.3 * np.sin(2 * np.pi * f * t) * envelope).astype(np.float32) for f in (180.0, 320.0)]


def write_long_audio(path: Path, minutes: float, fmt: str, audio_dir: Path) -> dict[str, Any]:
    """N minutes of :func:`speech_clips` (else :func:`synthetic_clips`), cycled with 0.5 s gaps,
    written to ``path`` (16-bit ``fmt``: ``flac`` or ``wav``) block by block. What was written:
    ``source``, ``clips``, ``seconds``, ``bytes``, ``format``."""
    import soundfile as sf

    clips = speech_clips(audio_dir)
    source = "real speech" if clips else "synthetic tones"
    clips = clips or synthetic_clips()
    gap = np.zeros(int(GAP_S * SR), np.float32)
    total = int(round(minutes * 60 * SR))
    written = 0
    with sf.SoundFile(path, "w", samplerate=SR, channels=1, format=fmt.upper(), subtype="PCM_16") as f:
        i = 0
        while written < total:
            block = np.concatenate([clips[i % len(clips)], gap])[: total - written]
            f.write(block)
            written += len(block)
            i += 1
    return {"source": source, "clips": len(clips), "seconds": written / SR, "bytes": Path(path).stat().st_size,
            "format": fmt}


# --------------------------------------------------------------------------- the models


def resolve_models(models: str, real_dir: Path) -> str:
    """``auto`` -> ``real`` where ``real_dir`` holds whisper-tiny.en and pyannote-campp-3.1, else
    ``tiny``; ``real`` and ``tiny`` as they are."""
    if models != "auto":
        return models
    real_dir = Path(real_dir)
    have = (real_dir / REAL_ASR / "config.json").exists() and (real_dir / REAL_PIPELINE / "config.yaml").exists()
    return "real" if have else "tiny"


def model_settings(models: str, real_dir: Path, work: Path):
    """The handler's :class:`~speaker_asr.settings.ModelSettings` for ``real`` (``real_dir``'s
    whisper-tiny.en and pyannote-campp-3.1, whose loader makes the folder's campp_embedding.py
    importable), ``resnet34`` (the same whisper-tiny.en and the 3.1 recipe as production runs it:
    real segmentation-3.0 and a WeSpeaker ResNet34 of random weights, the same compute, built into
    ``work/resnet34-3.1``) or ``tiny`` (the tiny random English Whisper and pyannote pipeline, built
    once into ``work/tiny-models``); no assistant, device from the environment."""
    from speaker_asr.settings import ModelSettings

    if models in ("real", "resnet34"):
        pipeline = Path(real_dir) / REAL_PIPELINE
        if models == "resnet34":
            from speaker_asr.testing.tiny_models import build_resnet34_recipe

            pipeline = build_resnet34_recipe(Path(work) / "resnet34-3.1", Path(real_dir) / "segmentation-3.0",
                                             pipeline)
        return ModelSettings(asr_model=str(Path(real_dir) / REAL_ASR), assistant_model=None,
                             diarization_model=str(pipeline))
    from speaker_asr.testing.tiny_models import TINY_MAX_NEW_TOKENS, build_all_once

    tiny = build_all_once(Path(work) / "tiny-models")
    return ModelSettings(asr_model=str(tiny["whisper.en"]), assistant_model=None,
                         diarization_model=str(tiny["pyannote"]), max_new_tokens=TINY_MAX_NEW_TOKENS)


# --------------------------------------------------------------------------- the measured process


def run_measured(cmd: Sequence[str], out: Path, limit_s: float, cwd: Optional[Path] = None) -> dict[str, Any]:
    """Run ``cmd`` (a measuring process that writes its result as JSON to ``out``, atomically; as
    it goes, if it likes) offline, for at most ``limit_s`` seconds. Its result (on a timeout, what
    it had written by then) plus ``subprocess_s``, ``returncode`` (None: timed out),
    ``child_ru_maxrss_mb`` (the peak RSS the kernel reports for it; None when an earlier child of
    this process had a higher one) and, when it failed, ``error``; an ``error`` the child reported
    is extended with how far it got."""
    import resource

    out = Path(out)
    out.unlink(missing_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false")
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=limit_s)
        returncode, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired:
        returncode, stderr = None, ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result: dict[str, Any] = {"subprocess_s": time.perf_counter() - started, "returncode": returncode,
                              # RUSAGE_CHILDREN's ru_maxrss is the largest of any waited-for child so far
                              "child_ru_maxrss_mb": after / 1024 if after > before else None}
    if returncode is None:  # what a child that saves as it goes had written, then why it stopped
        if out.exists():
            result.update(json.loads(out.read_text()))
        result["error"] = f"timed out after {limit_s:.0f} s"
    elif returncode != 0 or not out.exists():
        result["error"] = f"exit code {returncode}: {stderr[-3000:]}"
    else:
        result.update(json.loads(out.read_text()))
        if "error" in result:
            result["error"] = (f"{result['error']} (after {result.get('wall_s', 0):.0f} s, peak RSS "
                               f"{result.get('peak_rss_mb', 0):.0f} MB)")
    return result


def add_child_arguments(parser) -> None:
    """The hidden options with which a long-audio script runs itself as the measured subprocess."""
    import argparse

    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--audio", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


def parse_minutes(parser, text: str) -> list[float]:
    """``--minutes``: comma-separated audio lengths, each in (0, 240] (MAX_AUDIO_SECONDS's 4 h)."""
    minutes = [float(m) for m in text.split(",") if m.strip()]
    if not minutes or any(not 0 < m <= 240 for m in minutes):
        parser.error("--minutes: lengths between 0 and 240")
    return minutes
