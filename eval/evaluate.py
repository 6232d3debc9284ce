#!/usr/bin/env python
"""Speaker-attribution evaluation: WER, cpWER, WDER and dropped words of four alignment algorithms
on the same Whisper output, with oracle and with pyannote diarization. Run on demand, not in CI:

    .venv/bin/python eval/evaluate.py --models tiny.en,base --mode oracle,pipeline

Prints markdown tables (algorithm x file, plus pooled rows) and writes eval/results/latest.md and
eval/results/latest.json. ASR and diarization outputs are cached under eval/.cache (keyed by the
audio, the model and the source of the ASR / diarization modules), so re-scoring after a
change to alignment.py takes seconds. See eval/README.md.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import numpy as np  # noqa: E402

from algorithms import ALGORITHMS, RUNNERS, endpoint  # noqa: E402
from speaker_asr.types import Turn
from data import EvalFile, build_dataset, read_wav  # noqa: E402
from metrics import (HypToken, RefToken, cpwer_counts, normalize_word, ratio,  # noqa: E402
                     wder_counts, wer_counts)

MODEL_DIRS = {"tiny.en": "whisper-tiny.en", "base": "whisper-base"}
MODES = ("oracle", "pipeline")
OURS = ("word", "word_smooth")
WORD_LEVEL = ("word_raw", "word_plain", "word", "word_smooth")
BASELINES = ("hf_original", "chunk_overlap")
TARGET_WDER = 0.015
TARGET_CP_GAP = 0.01


def _git_state() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "speaker_asr/attribution",
                                "speaker_asr/asr", "speaker_asr/diarization", "speaker_asr/config.py"],
                               cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + (" + uncommitted changes to " + ", ".join(l.split()[-1] for l in dirty.splitlines())
                       if dirty else "")
    except Exception:
        return "?"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def _sha(*parts) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _source_sha(name: str) -> str:
    return _sha((ROOT / name).read_bytes())


class Cache:
    def __init__(self, root: Path, enabled: bool):
        self.root, self.enabled = root, enabled

    def get(self, kind: str, key: str):
        path = self.root / kind / f"{key}.json"
        if self.enabled and path.is_file():
            return json.loads(path.read_text())
        return None

    def put(self, kind: str, key: str, value) -> None:
        path = self.root / kind / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


# --------------------------------------------------------------------------- models


def model_path(models_dir: Path, name: str) -> Path:
    p = Path(name).expanduser()
    if p.is_dir():
        return p
    return models_dir / MODEL_DIRS.get(name, name)


class Asr:
    """Whisper through the project's WhisperTranscriber, loaded on first use."""

    def __init__(self, path: Path, long_form: str = "chunked", dtype: Optional[str] = None,
                 quantization: Optional[str] = None):
        self.path = path
        self.long_form = long_form
        self.dtype = dtype
        self.quantization = quantization
        self._tr = None
        self.seconds = 0.0

    def _load(self):
        if self._tr is None:
            from speaker_asr.config import ModelSettings
            from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

            settings = ModelSettings(asr_model=str(self.path), assistant_model=None,
                                     diarization_model=None, torch_dtype=self.dtype,
                                     quantization=self.quantization)
            self._tr = WhisperTranscriber(settings, *resolve_device(settings))
        return self._tr

    def transcribe(self, audio: np.ndarray) -> dict:
        from speaker_asr.config import InferenceConfig

        tr = self._load()
        t = time.perf_counter()
        r = tr.transcribe(audio, InferenceConfig(language="en", long_form=self.long_form),
                          word_timestamps=True)
        dt = time.perf_counter() - t
        self.seconds += dt
        return {"text": r.text, "language": r.language, "seconds": round(dt, 2),
                "chunks": [[c.text, c.start, c.end] for c in r.chunks],
                "words": None if r.words is None else [[w.text, w.start, w.end] for w in r.words]}

    def words(self, audio: np.ndarray):
        return [tuple(w) for w in (self.transcribe(audio)["words"] or [])]


class Diarizer:
    def __init__(self, models_dir: Path):
        self.path = models_dir / "pyannote-campp-3.1"
        self._pipe = None
        self.seconds = 0.0

    def diarize(self, audio: np.ndarray, num_speakers: int) -> dict:
        if self._pipe is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
            if str(self.path) not in sys.path:
                sys.path.insert(0, str(self.path))
            from speaker_asr.diarization.pipeline import load_diarization_pipeline

            self._pipe = load_diarization_pipeline(str(self.path), None)
        from speaker_asr.diarization.pipeline import diarize

        t = time.perf_counter()
        d = diarize(self._pipe, audio, num_speakers=num_speakers)
        dt = time.perf_counter() - t
        self.seconds += dt
        conv = lambda turns: [[t.start, t.end, t.speaker] for t in turns]  # noqa: E731
        return {"turns": conv(d.turns), "seconds": round(dt, 2),
                "exclusive_turns": None if d.exclusive_turns is None else conv(d.exclusive_turns)}


def der(reference: list, hypothesis: list, metric: str = "der") -> Optional[float]:
    """pyannote.metrics DER (``metric="der"``) or JER (``"jer"``), collar 0, overlap scored."""
    try:
        from pyannote.core import Annotation, Segment
        from pyannote.metrics.diarization import DiarizationErrorRate, JaccardErrorRate
    except ImportError:
        return None

    def ann(turns):
        a = Annotation()
        for i, (s, e, spk) in enumerate(turns):
            a[Segment(s, e), i] = spk
        return a

    scorer = DiarizationErrorRate(collar=0.0, skip_overlap=False) if metric == "der" \
        else JaccardErrorRate(collar=0.0, skip_overlap=False)
    return float(scorer(ann(reference), ann(hypothesis)))


# --------------------------------------------------------------------------- scoring


def reference_tokens(f: EvalFile) -> list[RefToken]:
    out = []
    for u_idx, u in enumerate(f.utterances):
        toks = [t for w in u.text.split() for t in normalize_word(w)]
        for k, t in enumerate(toks):
            pos = "only" if len(toks) == 1 else "first" if k == 0 else \
                "last" if k == len(toks) - 1 else "middle"
            out.append(RefToken(t, u.speaker, u_idx, pos))
    return out


def score(ref: list[RefToken], hyp: list[HypToken]) -> dict:
    out_toks = [t.text for t in hyp if not t.dropped]
    w = wer_counts([t.text for t in ref], out_toks)
    cp = cpwer_counts(ref, hyp)
    sp = wder_counts(ref, hyp)
    dropped = sum(1 for t in hyp if t.dropped or t.speaker is None)
    return {"ref_words": len(ref), "hyp_words": len(hyp),
            "wer_errors": w.errors, "cp_errors": cp.errors, "cp_length": cp.length,
            "spk_errors": sp.errors, "spk_scored": sp.scored,
            "dropped": dropped,
            "wer": ratio(w.errors, w.length), "cpwer": ratio(cp.errors, cp.length),
            "wder": ratio(sp.errors, sp.scored), "dropped_rate": ratio(dropped, len(hyp)),
            "mapping": sp.mapping}, sp


def pool(rows: list[dict]) -> dict:
    s = lambda k: sum(r[k] for r in rows)  # noqa: E731
    return {"ref_words": s("ref_words"), "hyp_words": s("hyp_words"),
            "wer": ratio(s("wer_errors"), s("ref_words")), "cpwer": ratio(s("cp_errors"), s("cp_length")),
            "wder": ratio(s("spk_errors"), s("spk_scored")), "dropped_rate": ratio(s("dropped"), s("hyp_words")),
            "spk_errors": s("spk_errors"), "spk_scored": s("spk_scored"), "dropped": s("dropped")}


def _covered(start: float, end: float, turns: list[tuple[float, float, str]], speaker: str) -> float:
    """Fraction of [start, end] covered by ``speaker``'s turns (a zero-length word: 1 if inside)."""
    if end <= start:
        return 1.0 if any(s <= start <= e for s, e, spk in turns if spk == speaker) else 0.0
    cov = sum(max(0.0, min(end, e) - max(start, s)) for s, e, spk in turns if spk == speaker)
    return min(1.0, cov / (end - start))


def diagnose_errors(f: EvalFile, ref: list[RefToken], hyp: list[HypToken], sp, alg: str,
                    other_wrong: Optional[set] = None) -> list[dict]:
    """One record per word-level speaker error, with what may explain it."""
    ref_turns = [(u.start, u.end, u.speaker) for u in f.utterances]
    inverse = {v: k for k, v in sp.mapping.items()}
    out = []
    for i, j in sp.wrong:
        r, h = ref[i], hyp[j]
        u = f.utterances[r.utt]
        start, end = h.start or 0.0, h.end or 0.0
        own = _covered(start, end, ref_turns, r.speaker)
        mid = (start + end) / 2
        talking = {spk for s, e, spk in ref_turns if s <= mid <= e}
        if len(talking) > 1:
            cause = "overlapped speech"
        elif own < 0.5:
            cause = "word time outside its turn"
        else:
            cause = "other"
        if other_wrong is not None and (i, j) not in other_wrong:
            cause = "smoothing (right without)"
        out.append({"file": f.id, "algorithm": alg, "word": h.text, "ref_word": r.text,
                    "word_time": [round(start, 2), round(end, 2)],
                    "ref_speaker": r.speaker, "hyp_speaker": h.speaker,
                    "hyp_speaker_mapped": sp.mapping.get(h.speaker), "position": r.pos,
                    "utterance": [u.start, u.end], "utterance_text": u.text,
                    "own_turn_coverage": round(own, 2), "cause": cause,
                    "correct_speaker_label": inverse.get(r.speaker)})
    return out


def boundary_timing(files: list[EvalFile], per_file: dict) -> dict:
    """Whisper word times at utterance edges vs the exact edges (generated dialogues only):
    start offset of each utterance's first word, end offset of its last word (seconds; negative =
    earlier than the true edge)."""
    starts, ends = [], []
    for f in files:
        if f.id == "sample" or f.id not in per_file:
            continue
        ref, hyp, sp = per_file[f.id]
        for i, j, eq in sp.pairs:
            if not eq or hyp[j].start is None:
                continue
            u = f.utterances[ref[i].utt]
            if ref[i].pos in ("first", "only"):
                starts.append(hyp[j].start - u.start)
            if ref[i].pos in ("last", "only"):
                ends.append(hyp[j].end - u.end)

    def stats(x):
        if not x:
            return {}
        a = np.array(x)
        return {"n": len(a), "median": round(float(np.median(a)), 3),
                "p10": round(float(np.percentile(a, 10)), 3),
                "p90": round(float(np.percentile(a, 90)), 3),
                "early_gt_0.2s": int((a < -0.2).sum()), "late_gt_0.2s": int((a > 0.2).sum())}

    return {"first_word_start": stats(starts), "last_word_end": stats(ends)}


# --------------------------------------------------------------------------- report


def pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def pct2(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def render(result: dict) -> str:
    meta = result["meta"]
    lines = ["# Speaker-attribution evaluation", "",
             f"Run {meta['date']} on {meta['host']}, code at {meta['git']}: models {', '.join(meta['models'])}; modes "
             f"{', '.join(meta['modes'])}; {len(result['files'])} files, "
             f"{meta['audio_seconds']:.0f} s of audio; wall time {meta['wall_seconds']:.0f} s "
             f"(ASR {meta['asr_seconds']:.0f} s, diarization {meta['diarization_seconds']:.0f} s, "
             f"data {meta['data_seconds']:.0f} s; {meta['cached']} ASR/diarization results came from "
             f"the cache -- computing all of them took ASR {meta['asr_compute_seconds']:.0f} s + "
             f"diarization {meta['diarization_compute_seconds']:.0f} s). "
             f"torch {meta['torch']}, transformers {meta['transformers']}, "
             f"pyannote.audio {meta['pyannote']}."
             + (f" Held-out dialogues: seeds + {meta['seed_offset']}." if meta.get("seed_offset") else "")
             + (f" ASR long_form: {meta['long_form']}." if meta.get("long_form", "chunked") != "chunked" else "")
             + (f" ASR dtype: {meta['dtype']}." if meta.get("dtype") else "")
             + (f" ASR quantization: {meta['quantization']}." if meta.get("quantization") else ""),
             "",
             "All numbers in %. WER/cpWER on normalized words; WDER = reference words aligned as "
             "correct/substituted whose speaker is wrong after the best speaker mapping; dropped = "
             "ASR words missing from the output or left without a speaker.", ""]
    if result["targets"]:
        lines += ["## Targets (oracle diarization, pooled over all files)", "",
                  "| model | algorithm | WDER <= 1.5 | no dropped words | cpWER - WER <= 1 pt | "
                  "WDER < (a) and (b) | WDER without the sample |", "|---|---|---|---|---|---|---:|"]
        for t in result["targets"]:
            mark = lambda ok: "**pass**" if ok else "**MISS**"  # noqa: E731
            lines.append(
                f"| {t['model']} | {ALGORITHMS[t['algorithm']]} | {pct2(t['wder'])} {mark(t['wder_ok'])} "
                f"| {pct2(t['dropped_rate'])} {mark(t['dropped_ok'])} "
                f"| {t['cp_gap'] * 100:+.2f} {mark(t['cp_ok'])} "
                f"| (a) {pct2(t['wder_a'])}, (b) {pct2(t['wder_b'])} {mark(t['better_ok'])} "
                f"| {pct2(t['wder_dialogues'])} |")
        lines.append("")
    lines += ["## Pooled over files", "",
              "| model | mode | algorithm | WER | cpWER | WDER | dropped | speaker errors |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    for p in result["pooled"]:
        lines.append(f"| {p['model']} | {p['mode']} | {ALGORITHMS[p['algorithm']]} | {pct(p['wer'])} "
                     f"| {pct(p['cpwer'])} | {pct2(p['wder'])} | {pct2(p['dropped_rate'])} "
                     f"| {p['spk_errors']}/{p['spk_scored']} |")
    lines.append("")
    for model in meta["models"]:
        for mode in meta["modes"]:
            rows = [r for r in result["rows"] if r["model"] == model and r["mode"] == mode]
            if not rows:
                continue
            lines += [f"## {model}, {mode} diarization: per file", "",
                      "| file | algorithm | WER | cpWER | WDER | dropped | speaker errors |",
                      "|---|---|---:|---:|---:|---:|---:|"]
            for r in rows:
                lines.append(f"| {r['file']} | {ALGORITHMS[r['algorithm']]} | {pct(r['wer'])} "
                             f"| {pct(r['cpwer'])} | {pct2(r['wder'])} | {pct2(r['dropped_rate'])} "
                             f"| {r['spk_errors']}/{r['spk_scored']} |")
            for p in result["pooled"]:
                if p["model"] == model and p["mode"] == mode:
                    lines.append(f"| **pooled** | {ALGORITHMS[p['algorithm']]} | {pct(p['wer'])} "
                                 f"| {pct(p['cpwer'])} | {pct2(p['wder'])} | {pct2(p['dropped_rate'])} "
                                 f"| {p['spk_errors']}/{p['spk_scored']} |")
            lines.append("")
    if result["der"]:
        lines += ["## Diarization (pipeline mode): pyannote-campp-3.1 with num_speakers given", "",
                  "| file | DER (collar 0) | JER (collar 0) | speakers found |", "|---|---:|---:|---:|"]
        for d in result["der"]:
            lines.append(f"| {d['file']} | {pct(d['der'])} | {pct(d.get('jer'))} | {d['speakers']} |")
        lines.append("")
    diag = result["diagnostics"]
    if diag:
        lines += ["## Where the word-level alignment errs", ""]
        for model, d in diag.items():
            lines.append(f"**{model}** -- Whisper word times at utterance edges (generated "
                         "dialogues, exact edges; seconds, negative = early):")
            lines.append("")
            for kind, bt in d["boundary_timing"].items():
                fs, le = bt.get("first_word_start", {}), bt.get("last_word_end", {})
                if fs and le:
                    lines.append(
                        f"- {kind} word times: first word start - utterance start: median "
                        f"{fs['median']:+.2f}, p10 {fs['p10']:+.2f}, p90 {fs['p90']:+.2f} (n={fs['n']}; "
                        f"{fs['early_gt_0.2s']} > 0.2 s early, {fs['late_gt_0.2s']} > 0.2 s late); "
                        f"last word end - utterance end: median {le['median']:+.2f}, "
                        f"p10 {le['p10']:+.2f}, p90 {le['p90']:+.2f} (n={le['n']}; "
                        f"{le['early_gt_0.2s']} > 0.2 s early, {le['late_gt_0.2s']} > 0.2 s late)")
            for mode, p in d.get("parity", {}).items():
                lines.append(f"- {mode}: (d) vs the endpoint's `build_response`: "
                             + ("same speaker for all " f"{p['words']} words" if not p["mismatches"]
                                else f"**{p['mismatches']} of {p['words']} words differ** "
                                     f"({', '.join(p['files'])})"))
            for mode, sm in d["smoothing"].items():
                lines.append(f"- smoothing ({mode}): changed {sm['changed']} words: fixed {sm['fixed']}, "
                             f"broke {sm['broke']}, wrong either way {sm['neutral']}")
            for mode, causes in d["causes"].items():
                for alg, c in causes.items():
                    lines.append(f"- {mode} {ALGORITHMS[alg]}: errors by cause: "
                                 + (", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"))
            lines.append("")
        errs = [e for d in diag.values() for e in d["errors"]]
        if errs:
            lines += ["Word-level speaker errors, oracle diarization ((c) and (d)):", "",
                      "| model | alg | file | word (ref) | word time | utterance (pos) | ref spk | "
                      "own-turn coverage | cause |", "|---|---|---|---|---|---|---|---:|---|"]
            for e in errs:
                lines.append(
                    f"| {e['model']} | {e['algorithm']} | {e['file']} | {e['word']} ({e['ref_word']}) "
                    f"| {e['word_time'][0]:.2f}-{e['word_time'][1]:.2f} "
                    f"| {e['utterance'][0]:.2f}-{e['utterance'][1]:.2f} ({e['position']}) "
                    f"| {e['ref_speaker']} | {e['own_turn_coverage']:.2f} | {e['cause']} |")
            lines.append("")
    lines += ["## Data", "", "| file | duration s | speakers | utterances | ref words | description |",
              "|---|---:|---:|---:|---:|---|"]
    for f in result["files"]:
        lines.append(f"| {f['id']} | {f['duration']:.1f} | {f['num_speakers']} | {f['utterances']} "
                     f"| {f['ref_words']} | {f['description']} |")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny.en,base",
                    help="comma list: tiny.en, base, or Whisper folders (default tiny.en,base)")
    ap.add_argument("--mode", default="oracle,pipeline", help="comma list of oracle, pipeline")
    ap.add_argument("--files", default="all", help="comma list of file ids (sample,d1..d5) or all")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("REAL_MODELS_DIR") or "~/.cache/real-models").expanduser(),
                    help="real models folder (default $REAL_MODELS_DIR or ~/.cache/real-models)")
    ap.add_argument("--cache-dir", type=Path, default=HERE / ".cache")
    ap.add_argument("--out", type=Path, default=HERE / "results",
                    help="folder for latest.md / latest.json")
    ap.add_argument("--no-cache", action="store_true", help="recompute ASR and diarization")
    ap.add_argument("--rebuild-data", action="store_true", help="regenerate the dialogues")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--long-form", default="chunked", choices=("chunked", "sequential"),
                    help="the endpoint's long_form parameter for the ASR (default chunked, its default)")
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                    help="the endpoint's TORCH_DTYPE for the ASR (default: its own default for the device)")
    ap.add_argument("--quantization", default=None, choices=("int8",),
                    help="the endpoint's QUANTIZATION for the ASR (CPU; default: none)")
    ap.add_argument("--part", default="original", choices=("original", "tuning", "heldout"),
                    help="original: the sample + d1-d5; tuning: the sample + generated dialogues to "
                         "choose rules on; heldout: generated dialogues never tuned on (eval/generate.py)")
    ap.add_argument("--count", type=int, default=12, help="generated dialogues per part")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="held-out variant of the dialogues: their seeds + this (other gaps, overlaps, "
                         "backchannels and noise; same scripts and voices). 0: the default set")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; use oracle and/or pipeline")
    models_dir = args.models_dir.expanduser()
    for m in models:
        if not (model_path(models_dir, m) / "config.json").is_file():
            ap.error(f"no Whisper model {m!r} at {model_path(models_dir, m)}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cache = Cache(args.cache_dir, not args.no_cache)

    # data (LibriVox cuts need Whisper base word timestamps; built once, then cached)
    td = time.perf_counter()
    base_asr: dict[str, Asr] = {}

    def base_words():
        base_asr.setdefault("b", Asr(model_path(models_dir, "base")))
        return base_asr["b"].words

    files = build_dataset(models_dir, args.cache_dir, base_words, rebuild=args.rebuild_data, log=log,
                          seed_offset=args.seed_offset, part=args.part, count=args.count)
    data_seconds = time.perf_counter() - td
    if args.files != "all":
        wanted = {x.strip() for x in args.files.split(",")}
        files = [f for f in files if f.id in wanted]
        if not files:
            ap.error(f"no files match {args.files}")
    audio = {f.id: read_wav(f.audio) for f in files}
    audio_sha = {f.id: _sha(audio[f.id].tobytes()) for f in files}

    # ASR (cached)
    asr_out: dict[tuple[str, str], dict] = {}
    asr_seconds = 0.0
    cached = 0
    # the ASR output depends on these sources (the hallucination filter runs inside transcribe)
    whisper_sha = _sha(*(_source_sha(n) for n in (
        "speaker_asr/asr/transcriber.py", "speaker_asr/asr/hallucination.py",
        "speaker_asr/patches/whisper.py", "speaker_asr/asr/quantization.py",
        "speaker_asr/patches/chunk_windows.py", "speaker_asr/patches/word_alignment.py",
        "speaker_asr/patches/registry.py")))
    # the int8 form depends on the CPU (and its ISA switches): part of the cache key and the report
    int8_form = None
    if args.quantization:
        from speaker_asr.asr.quantization import choose_int8_path

        int8_form = choose_int8_path(args.dtype)[0]
    for m in models:
        path = model_path(models_dir, m)
        runner = Asr(path, args.long_form, args.dtype, args.quantization)
        for f in files:
            key = _sha("asr", path.resolve(), (path / "model.safetensors").stat().st_size
                       if (path / "model.safetensors").exists() else 0, audio_sha[f.id], whisper_sha,
                       *([args.long_form] if args.long_form != "chunked" else []),
                       *([args.dtype] if args.dtype else []),
                       *([args.quantization, int8_form] if args.quantization else []))
            r = cache.get("asr", key)
            cached += r is not None
            if r is None:
                log(f"ASR {m} {f.id} ({f.duration:.0f} s)...")
                r = runner.transcribe(audio[f.id])
                cache.put("asr", key, r)
            asr_out[(m, f.id)] = r
        asr_seconds += runner.seconds
        del runner

    # diarization (cached)
    diar_out: dict[str, dict] = {}
    diar_seconds = 0.0
    der_rows = []
    if "pipeline" in modes:
        diarizer = Diarizer(models_dir)
        diar_sha = _source_sha("speaker_asr/diarization/pipeline.py")
        for f in files:
            key = _sha("diar", diarizer.path.resolve(), audio_sha[f.id], f.num_speakers, diar_sha)
            r = cache.get("diar", key)
            cached += r is not None
            if r is None:
                log(f"diarization {f.id} ({f.duration:.0f} s)...")
                r = diarizer.diarize(audio[f.id], f.num_speakers)
                cache.put("diar", key, r)
            diar_out[f.id] = r
            der_rows.append({"file": f.id, "der": der(f.turns, r["turns"]),
                             "jer": der(f.turns, r["turns"], "jer"),
                             "speakers": len({t[2] for t in r["turns"]})})
        diar_seconds = diarizer.seconds

    # scoring
    refs = {f.id: reference_tokens(f) for f in files}
    rows, pooled, targets = [], [], []
    diagnostics: dict[str, dict] = {}
    for m in models:
        diag = {"errors": [], "smoothing": {}, "causes": {}, "boundary_timing": {}}
        for mode in modes:
            per_alg: dict[str, list[dict]] = {a: [] for a in ALGORITHMS}
            word_level: dict[str, tuple] = {}
            smoothing = {"changed": 0, "fixed": 0, "broke": 0, "neutral": 0}
            causes: dict[str, dict[str, int]] = {a: {} for a in WORD_LEVEL if a in RUNNERS}
            parity = {"words": 0, "mismatches": 0, "files": []}
            raw_level: dict[str, tuple] = {}
            for f in files:
                r = asr_out[(m, f.id)]
                if mode == "oracle":
                    turns = [Turn(s, e, spk) for s, e, spk in f.turns]
                else:
                    d = diar_out[f.id]
                    raw = d["exclusive_turns"] if d["exclusive_turns"] is not None else d["turns"]
                    turns = [Turn(s, e, spk) for s, e, spk in raw]
                chunks = [tuple(c) for c in r["chunks"]]
                words = [tuple(w) for w in r["words"]] if r["words"] is not None else None
                outputs = {}
                for alg, run in RUNNERS.items():
                    if alg in WORD_LEVEL and words is None:
                        continue
                    hyp = run(chunks, words, turns, f.duration)
                    row, sp = score(refs[f.id], hyp)
                    outputs[alg] = (hyp, sp)
                    row.update(model=m, mode=mode, file=f.id, algorithm=alg)
                    rows.append(row)
                    per_alg[alg].append(row)
                if all(a in outputs for a in OURS):
                    (hc, sc), (hd, sd) = outputs["word"], outputs["word_smooth"]
                    word_level[f.id] = (refs[f.id], hc, sc)
                    raw_level[f.id] = (refs[f.id], *outputs.get("word_raw", outputs["word"]))
                    # (d) must give every word the speaker the endpoint's build_response gives it
                    he = endpoint(chunks, words, turns, f.duration)
                    mism = sum(1 for a, b in zip(he, hd) if a.speaker != b.speaker) \
                        + abs(len(he) - len(hd))
                    parity["words"] += len(hd)
                    parity["mismatches"] += mism
                    if mism:
                        parity["files"].append(f.id)
                    wrong_c = {i for i, _ in sc.wrong}
                    wrong_d = {i for i, _ in sd.wrong}
                    ref_of_hyp = {j: i for i, j, _ in sd.pairs}
                    for j, (a, b) in enumerate(zip(hc, hd)):
                        if a.speaker != b.speaker:
                            smoothing["changed"] += 1
                            i = ref_of_hyp.get(j)
                            if i is None:
                                smoothing["neutral"] += 1
                            elif i in wrong_c and i not in wrong_d:
                                smoothing["fixed"] += 1
                            elif i not in wrong_c and i in wrong_d:
                                smoothing["broke"] += 1
                            else:
                                smoothing["neutral"] += 1
                    for alg in causes:
                        hyp, sp = outputs[alg]
                        errs = diagnose_errors(f, refs[f.id], hyp, sp, alg,
                                               set(sc.wrong) if alg == "word_smooth" else None)
                        for e in errs:
                            causes[alg][e["cause"]] = causes[alg].get(e["cause"], 0) + 1
                            e["model"], e["mode"] = m, mode
                        if mode == "oracle" and alg in OURS:
                            diag["errors"] += errs
            for alg, rs in per_alg.items():
                if rs:
                    p = pool(rs)
                    p.update(model=m, mode=mode, algorithm=alg)
                    pooled.append(p)
            diag["smoothing"][mode] = smoothing
            diag["causes"][mode] = causes
            diag.setdefault("parity", {})[mode] = parity
            if parity["mismatches"]:
                log(f"WARNING: {m} {mode}: (d) and the endpoint's build_response disagree on "
                    f"{parity['mismatches']} words ({', '.join(parity['files'])})")
            if not diag["boundary_timing"]:
                diag["boundary_timing"] = {"raw": boundary_timing(files, raw_level),
                                           "tidied": boundary_timing(files, word_level)}
            if mode == "oracle":
                pm = {p["algorithm"]: p for p in pooled if p["model"] == m and p["mode"] == "oracle"}
                for alg in OURS:
                    if alg not in pm:
                        continue
                    p = pm[alg]
                    wa, wb = pm["hf_original"]["wder"], pm["chunk_overlap"]["wder"]
                    dialogue_rows = [r for r in per_alg[alg] if r["file"] != "sample"]
                    targets.append({
                        "model": m, "algorithm": alg, "wder": p["wder"], "dropped_rate": p["dropped_rate"],
                        "cp_gap": (p["cpwer"] or 0) - (p["wer"] or 0), "wder_a": wa, "wder_b": wb,
                        "wder_dialogues": pool(dialogue_rows)["wder"] if dialogue_rows else None,
                        "wder_ok": p["wder"] is not None and p["wder"] <= TARGET_WDER,
                        "dropped_ok": p["dropped"] == 0,
                        "cp_ok": (p["cpwer"] or 0) - (p["wer"] or 0) <= TARGET_CP_GAP + 1e-12,
                        "better_ok": p["wder"] is not None and p["wder"] < wa and p["wder"] < wb})
        diagnostics[m] = diag

    import torch
    import transformers

    try:
        from importlib.metadata import version

        pyannote_version = version("pyannote.audio")
    except Exception:
        pyannote_version = "?"
    result = {
        "meta": {"date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
                 "host": f"{platform.machine()}, {os.cpu_count()} CPUs"
                         + (", CUDA" if torch.cuda.is_available() else ""),
                 "models": models, "modes": modes, "models_dir": str(models_dir),
                 "seed_offset": args.seed_offset, "part": args.part, "long_form": args.long_form, "dtype": args.dtype,
                 "quantization": args.quantization and f"{args.quantization} ({int8_form} form)",
                 "audio_seconds": sum(f.duration for f in files),
                 "wall_seconds": time.perf_counter() - t0, "asr_seconds": asr_seconds,
                 "diarization_seconds": diar_seconds, "data_seconds": data_seconds,
                 "cached": cached,
                 "asr_compute_seconds": sum(r.get("seconds") or 0 for r in asr_out.values()),
                 "diarization_compute_seconds": sum(r.get("seconds") or 0 for r in diar_out.values()),
                 "git": _git_state(),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "pyannote": pyannote_version},
        "files": [{"id": f.id, "duration": f.duration, "num_speakers": f.num_speakers,
                   "utterances": len(f.utterances), "ref_words": len(refs[f.id]),
                   "description": f.description} for f in files],
        "targets": targets, "pooled": pooled, "rows": rows, "der": der_rows,
        "diagnostics": diagnostics,
        "asr": {f"{m}/{fid}": {"text": r["text"], "seconds": r.get("seconds")}
                for (m, fid), r in asr_out.items()},
        "references": {f.id: [asdict(u) for u in f.utterances] for f in files},
    }
    md = render(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(md)
    (args.out / "latest.json").write_text(json.dumps(result, indent=1, default=str))
    print(md)
    log(f"wrote {args.out / 'latest.md'} and latest.json in {result['meta']['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
