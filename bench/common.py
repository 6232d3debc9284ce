"""Shared helpers for the benchmark scripts: paths, deterministic inputs, WER, machine facts, RSS
(``rss_mb`` and ``lifetime_peak_rss_mb`` are speaker_asr/testing/memory.py's).

Nothing here is imported by the project; the project is imported from here (read-only use). The
scripts import this as ``common`` (their own folder is ``sys.path[0]`` when they run).

Paths: the real models from ``$REAL_MODELS_DIR`` (default ``~/.cache/real-models``), the short
clip from ``$SHARED_AUDIO_DIR`` (default ``../shared/audio``), results in ``$BENCH_RESULTS_DIR``
(default ``bench/results``), built inputs in ``$BENCH_DATA_DIR`` (default ``bench/data``).
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

# RSS now and the lifetime peak (ru_maxrss), as the reliability scripts read them; the scripts import them from here
from speaker_asr.testing.memory import max_rss_mb as lifetime_peak_rss_mb, rss_mb  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DATA = Path(os.environ.get("BENCH_DATA_DIR", BENCH / "data"))
RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR", BENCH / "results"))
REAL = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
SHARED_AUDIO = Path(os.environ.get("SHARED_AUDIO_DIR", ROOT.parent / "shared" / "audio"))
PIPELINE = REAL / "pyannote-campp-3.1"
SR = 16_000

MODELS = {
    "tiny.en": {"hf": REAL / "whisper-tiny.en", "ct2": REAL / "ct2" / "whisper-tiny.en",
                "multilingual": False, "assistant": None},
    "base": {"hf": REAL / "whisper-base", "ct2": REAL / "ct2" / "whisper-base",
             "multilingual": True, "assistant": REAL / "whisper-base-2L-assistant"},
}

# label -> target duration (s) of the concatenated inputs; None: a file used as it is
INPUTS = {"8s": None, "30s": None, "60s": 60.0, "10min": 600.0, "60min": 3600.0}
LONG_INPUTS = ("10min", "60min")
GAP_MIN_S = 0.3  # at least this much silence between concatenated utterances


def setup_env() -> None:
    """Offline, quiet. (The kit's pipeline folder names its own module, campp_embedding: its
    loader, ``load_diarization_pipeline``, makes the folder's modules importable.)"""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    warnings.filterwarnings("ignore")


# --------------------------------------------------------------------------- text / WER

def normalize(text: str) -> str:
    """The attribution evaluation's text normalization (speaker_asr/testing/scoring.py): lowercase, quotes
    straightened, dashes split, punctuation dropped, a few abbreviations spelled out."""
    from speaker_asr.testing.scoring import normalize_text

    return " ".join(normalize_text(text))


def wer(reference: Optional[str], hypothesis: str) -> Optional[float]:
    if not reference:
        return None
    import jiwer

    ref, hyp = normalize(reference), normalize(hypothesis)
    if not hyp:
        return 1.0
    return float(jiwer.wer(ref, hyp))


# --------------------------------------------------------------------------- inputs


def _read16k(path: Path) -> np.ndarray:
    import soundfile as sf

    audio, sr = sf.read(str(path), dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    if sr != SR:
        from scipy.signal import resample_poly
        from math import gcd

        g = gcd(SR, sr)
        audio = resample_poly(audio, SR // g, sr // g).astype(np.float32)
    return audio


def sample_reference() -> str:
    rows = [line.split(maxsplit=5) for line in (REAL / "audio" / "sample.stm").read_text().splitlines()
            if line.strip()]
    rows.sort(key=lambda r: float(r[3]))
    return " ".join(r[5] for r in rows)


def librivox_pieces() -> list[tuple[Path, str]]:
    folder = REAL / "audio" / "librivox"
    refs = {}
    for line in (folder / "transcription").read_text().splitlines():
        m = re.match(r"\s*<s>(.*)</s>\s*\((\S+)\)", line)
        if m:
            refs[m.group(2)] = m.group(1).strip()
    return [(folder / f"{key}.wav", text) for key, text in sorted(refs.items())
            if (folder / f"{key}.wav").exists()]


def concat_plan(target_s: float) -> list[tuple[Path, str]]:
    """Whole utterances cycled in a fixed order (five LibriVox clips, then the two-speaker sample)
    while they fit with the minimum gap; deterministic."""
    cycle = librivox_pieces() + [(REAL / "audio" / "sample.wav", sample_reference())]
    import soundfile as sf

    durations = {p: sf.info(str(p)).duration for p, _ in cycle}
    plan, total, i = [], 0.0, 0
    while True:
        path, text = cycle[i % len(cycle)]
        need = durations[path] + (GAP_MIN_S if plan else 0.0)
        if total + need > target_s:
            break
        plan.append((path, text))
        total += need
        i += 1
    return plan


def build_concat(label: str, target_s: float) -> tuple[Path, str]:
    """bench/data/concat-<label>.wav (16 kHz PCM16, exactly target_s long) and its reference text:
    the leftover time is spread evenly over the gaps, so no utterance is cut."""
    import soundfile as sf

    DATA.mkdir(parents=True, exist_ok=True)
    wav, ref = DATA / f"concat-{label}.wav", DATA / f"concat-{label}.txt"
    if wav.exists() and ref.exists():
        return wav, ref.read_text()
    plan = concat_plan(target_s)
    clips = [_read16k(p) for p, _ in plan]
    total = int(round(target_s * SR))
    speech = sum(len(c) for c in clips)
    gaps = max(len(clips) - 1, 1)
    gap = (total - speech) // gaps
    out = np.zeros(total, np.float32)
    pos = 0
    for c in clips:
        out[pos:pos + len(c)] = c
        pos += len(c) + gap
    tmp = wav.with_suffix(".tmp.wav")
    sf.write(str(tmp), out, SR, subtype="PCM_16")
    tmp.rename(wav)
    text = " ".join(t for _, t in plan)
    ref.write_text(text)
    (DATA / f"concat-{label}.json").write_text(json.dumps(
        {"target_s": target_s, "gap_s": gap / SR, "pieces": [p.name for p, _ in plan]}, indent=1))
    return wav, text


def get_input(label: str) -> tuple[Path, Optional[str]]:
    """(path, reference text or None) for an input label."""
    if label == "8s":
        return SHARED_AUDIO / "polyai-minds14-0.wav", None  # no reference transcript known
    if label == "30s":
        return REAL / "audio" / "sample.wav", sample_reference()
    if label in INPUTS and INPUTS[label]:
        return build_concat(label, INPUTS[label])
    raise SystemExit(f"unknown input {label!r}; known: {', '.join(INPUTS)}")


def wav_bytes(audio: np.ndarray) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, SR, format="WAV", subtype="PCM_16")
    return buf.getvalue()


# --------------------------------------------------------------------------- machine / memory


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return list(os.getloadavg())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))
    except OSError:
        pass
    return []


def machine() -> dict:
    info = {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "cpu_flags": cpu_flags(),
            "python": platform.python_version(), "platform": platform.platform()}
    try:
        mem = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
        info["mem_gib"] = round(int(mem) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        try:
            from speaker_asr.asr.quantization import native_bfloat16_math

            native, why = native_bfloat16_math()
            info["bfloat16"] = ("native" if native else "emulated") + f" ({why})"
        except ImportError:
            pass
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    for name in ("pyannote.audio", "faster-whisper", "ctranslate2"):
        try:
            from importlib.metadata import version

            info[name] = version(name)
        except Exception:
            pass
    return info


def _status_kb(field: str) -> Optional[int]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_mb() -> Optional[float]:
    """VmHWM: the peak since the process started or since :func:`reset_peak_rss`."""
    kb = _status_kb("VmHWM")
    if kb is None:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return kb / 1024


def reset_peak_rss() -> bool:
    """Linux: writing 5 to /proc/self/clear_refs resets VmHWM to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- timing


class Timers:
    """Accumulated wall time per name, by wrapping callables (functions, bound methods)."""

    def __init__(self, keep_spans: tuple = ()):
        self.keep_spans = set(keep_spans)
        self.total: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.spans: dict[str, list[tuple[float, float]]] = {}
        self._patched: list[tuple[object, str, object, bool]] = []

    def wrap(self, fn, name: str):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                end = time.perf_counter()
                self.total[name] = self.total.get(name, 0.0) + end - t
                self.calls[name] = self.calls.get(name, 0) + 1
                if name in self.keep_spans:
                    self.spans.setdefault(name, []).append((t, end))

        timed.__wrapped__ = fn
        return timed

    def patch(self, owner, attr: str, name: str) -> bool:
        """Replace ``owner.attr`` by a timed wrapper; False (nothing patched) when it is missing."""
        if owner is None or not hasattr(owner, attr):
            return False
        had_own = attr in getattr(owner, "__dict__", {})
        original = getattr(owner, attr)
        self._patched.append((owner, attr, owner.__dict__.get(attr) if had_own else None, had_own))
        setattr(owner, attr, self.wrap(original, name))
        return True

    def unpatch(self) -> None:
        for owner, attr, original, had_own in reversed(self._patched):
            if had_own:
                setattr(owner, attr, original)
            else:
                try:
                    delattr(owner, attr)
                except AttributeError:
                    pass
        self._patched.clear()

    def reset(self) -> None:
        self.total.clear()
        self.calls.clear()
        self.spans.clear()

    def union_s(self, *names: str) -> float:
        """Wall time covered by the spans of ``names`` together (overlaps counted once)."""
        spans = sorted(s for n in names for s in self.spans.get(n, []))
        covered, end = 0.0, None
        for a, b in spans:
            if end is None or a > end:
                covered += b - a
                end = b
            elif b > end:
                covered += b - end
                end = b
        return covered

    def get(self, name: str) -> Optional[float]:
        return self.total.get(name)


def fmt(x, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)
