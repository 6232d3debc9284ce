"""A tiny stand-in for the real-models kit (``../shared/real-models/build.sh``'s output), offline.

The same folder names and file formats as the kit, so that every script in ``bench/``, ``eval/``
and ``reliability/`` runs on it unchanged with ``REAL_MODELS_DIR`` (``--models-dir`` in eval/)
pointing here -- in seconds, with meaningless output (random weights, synthetic voices):

* ``whisper-tiny.en``, ``whisper-base``, ``whisper-base-2L-assistant``: tiny random Whisper
  models (:mod:`speaker_asr.testing.tiny_models`; English-only, multilingual, a 2-layer assistant)
  that write at most ``MAX_LENGTH`` tokens per window;
* ``pyannote-campp-3.1``: the tiny random 3.1-layout pipeline whose embedding checkpoint names a
  module of the folder, ``campp_embedding.CAMPPlusEmbedding`` (here a random XVectorMFCC), as
  the kit's CAM++ pipeline does: loading it needs the folder's own module
  (:func:`speaker_asr.diarization.pipeline.use_folder_modules`);
* ``segmentation-3.0``: that pipeline's segmentation checkpoint;
* ``ct2/whisper-tiny.en``, ``ct2/whisper-base``: the two Whisper models in CTranslate2's format,
  for faster-whisper (only where ctranslate2 is installed: requirements-scripts.txt brings it);
* in its ``audio`` folder: ``sample.wav`` (30 s, two synthetic voices taking turns) with
  ``sample.stm`` and ``sample.rttm``; ``librivox`` (five one-voice clips and their
  ``transcription``); ``polyai-minds14-0.wav`` (8.3 s, 8 kHz mu-law: the short clip
  ``../shared/audio`` holds, for ``SHARED_AUDIO_DIR``);
* ``meetings/standin_meeting``: one clip in ``../shared/real-meetings``' layout (the sample with
  word-level references and an overlapping turn), for ``eval/evaluate.py --meetings-dir``.

    python -m speaker_asr.testing.kit OUT_DIR
    REAL_MODELS_DIR=OUT_DIR SHARED_AUDIO_DIR=OUT_DIR/audio .venv/bin/python bench/benchmark.py --quick
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

from speaker_asr.testing.tiny_models import build_assistant, build_pyannote_pipeline, build_whisper

SR = 16_000
LIBRIVOX_PREFIX = "sense_and_sensibility_01_austen_64kb-"
LIBRIVOX_IDS = ("0870", "0880", "0890", "0920", "0930")
MAX_LENGTH = 48  # the kit's Whisper models' generation limit per window (prompt included)
WORDS = ("the report looks better than last month and we should call the supplier after lunch "
         "because the train was late again today").split()


def voice(seconds: float, f0: float, seed: int, sr: int = SR) -> np.ndarray:
    """A voice-like signal: harmonics of a wandering pitch, syllable-rate envelope, faint noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(seconds * sr))) / sr
    pitch = f0 * (1 + 0.08 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6)))
    phase = 2 * np.pi * np.cumsum(pitch) / sr
    signal = sum(np.sin(h * phase) / h for h in range(1, 8))
    envelope = (0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 6))) ** 2
    return (0.12 * signal * envelope + 0.003 * rng.standard_normal(len(t))).astype(np.float32)


def _text(seed: int, count: int) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), count)).capitalize() + "."


def write_sample(audio_dir: Path) -> None:
    """``sample.wav``: 30 s of two voices taking turns (about 3 s each, short pauses), with its
    STM (a sentence per turn) and RTTM (the turns)."""
    import soundfile as sf

    total, turns, t, speaker = 30.0, [], 0.4, 0
    while t < total - 1.0:
        length = min(2.6 + 0.5 * (len(turns) % 3), total - 0.2 - t)
        turns.append((round(t, 3), round(t + length, 3), ("Diane", "Sheila")[speaker]))
        t += length + 0.3
        speaker = 1 - speaker
    audio = np.zeros(int(total * SR), np.float32)
    for n, (start, end, name) in enumerate(turns):
        piece = voice(end - start, 210.0 if name == "Diane" else 125.0, seed=n)
        audio[int(start * SR):int(start * SR) + len(piece)] = piece
    sf.write(str(audio_dir / "sample.wav"), audio, SR, subtype="PCM_16")
    (audio_dir / "sample.stm").write_text("".join(
        f"sample 1 {name} {start:.3f} {end:.3f} {_text(n, 6)}\n" for n, (start, end, name) in enumerate(turns)))
    (audio_dir / "sample.rttm").write_text("".join(
        f"SPEAKER sample 1 {start:.3f} {end - start:.3f} <NA> <NA> speaker{90 + (name == 'Sheila')} <NA> <NA>\n"
        for start, end, name in turns))


def write_meeting(folder: Path, sample_dir: Path) -> None:
    """One clip in ../shared/real-meetings' layout, from the stand-in sample: ``audio.wav``,
    ``ref.rttm`` (the turns, with an overlapping backchannel added), ``ref.words.json`` (each
    turn's words spread over it) and ``info.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(sample_dir / "sample.wav", folder / "audio.wav")
    turns, words = [], []
    for line in (sample_dir / "sample.stm").read_text().splitlines():
        _, _, name, start, end, text = line.split(maxsplit=5)
        start, end, said = float(start), float(end), text.split()
        turns.append((start, end, name))
        step = (end - start) / len(said)
        words += [{"speaker": name, "start": round(start + k * step, 3),
                   "end": round(start + (k + 1) * step, 3), "word": w} for k, w in enumerate(said)]
    first = turns[0]
    turns.append((first[0] + 1.0, first[0] + 1.5, "Sheila" if first[2] == "Diane" else "Diane"))
    (folder / "ref.rttm").write_text("".join(
        f"SPEAKER {folder.name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {name} <NA> <NA>\n"
        for s, e, name in sorted(turns)))
    (folder / "ref.words.json").write_text(json.dumps(words, indent=1))
    (folder / "info.json").write_text(json.dumps({"ami": {"meeting": "STANDIN1"}}))


def write_librivox(folder: Path) -> None:
    """Five clips of one reader (2-5 s) and their transcription, in LibriVox's format."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for n, ident in enumerate(LIBRIVOX_IDS):
        sf.write(str(folder / f"{LIBRIVOX_PREFIX}{ident}.wav"), voice(2.0 + 0.7 * n, 150.0, seed=100 + n),
                 SR, subtype="PCM_16")
        lines.append(f"<s> {_text(100 + n, 5 + n).lower().rstrip('.')} </s> ({LIBRIVOX_PREFIX}{ident})")
    (folder / "transcription").write_text("\n".join(lines) + "\n")


def write_phone_clip(path: Path) -> None:
    """8.3 s of one voice as 8 kHz mono mu-law WAV (the shape of ../shared/audio's MINDS-14 clip)."""
    import soundfile as sf

    sf.write(str(path), voice(8.3, 180.0, seed=7, sr=8000), 8000, subtype="ULAW")


def folder_module_pipeline(out: Path, module: str = "campp_embedding", cls: str = "CAMPPlusEmbedding") -> Path:
    """The tiny random pipeline (:func:`build_pyannote_pipeline`, its cheap XVectorMFCC embedding)
    whose embedding checkpoint names ``module.cls``, defined in ``out/<module>.py``: a pipeline
    folder that ships its own model code, as the kit's CAM++ pipeline does."""
    import torch

    build_pyannote_pipeline(out, embedding="xvector")
    (out / f"{module}.py").write_text(
        f'"""The tiny stand-in kit\'s embedding model under the name the kit\'s CAM++ pipeline uses\n'
        f'(written by speaker_asr/testing/kit.py)."""\n\n'
        f"from pyannote.audio.models.embedding import XVectorMFCC\n\n\n"
        f"class {cls}(XVectorMFCC):\n    pass\n")
    checkpoint_path = out / "embedding" / "pytorch_model.bin"
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=False)
    checkpoint["pyannote.audio"]["architecture"] = {"module": module, "class": cls}
    torch.save(checkpoint, checkpoint_path)
    return out


def convert_to_ct2(model: Path, out: Path) -> bool:
    """A Whisper folder in CTranslate2's format (what faster-whisper loads), with its tokenizer and
    feature extractor; False where ctranslate2 is not installed."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        return False
    TransformersConverter(str(model), copy_files=["tokenizer.json", "preprocessor_config.json"]).convert(
        str(out), force=True)
    return True


def build_kit(root: Path) -> Path:
    """The stand-in kit in ``root`` (rebuilt from scratch); returns ``root``."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # random weights rarely stop by themselves: short windows (MAX_LENGTH tokens) keep every run short
    tiny_en = build_whisper(root / "whisper-tiny.en", multilingual=False, seed=3, max_length=MAX_LENGTH)
    base = build_whisper(root / "whisper-base", multilingual=True, max_length=MAX_LENGTH)
    build_assistant(base, root / "whisper-base-2L-assistant", decoder_layers=2)
    for model in (tiny_en, base):
        convert_to_ct2(model, root / "ct2" / model.name)
    pipeline = folder_module_pipeline(root / "pyannote-campp-3.1")
    (root / "segmentation-3.0").mkdir()
    shutil.copy2(pipeline / "segmentation" / "pytorch_model.bin", root / "segmentation-3.0" / "pytorch_model.bin")
    audio = root / "audio"
    audio.mkdir()
    write_sample(audio)
    write_librivox(audio / "librivox")
    write_phone_clip(audio / "polyai-minds14-0.wav")
    write_meeting(root / "meetings" / "standin_meeting", audio)
    (root / "MANIFEST").write_text("tiny random stand-in for the real-models kit (speaker_asr/testing/kit.py)\n")
    return root


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(build_kit(Path(sys.argv[1])))
