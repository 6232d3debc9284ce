#!/usr/bin/env python
"""Speaker-attribution evaluation: WER, cpWER, WDER and dropped words of the attribution algorithms
(eval/algorithms.py) on the same Whisper output and the same speaker turns, with reference turns
("oracle") and with the kit's pyannote pipeline, plus DER/JER of the pipeline. Run on demand:

    .venv/bin/python eval/evaluate.py --part meetings --models tiny.en,base --mode oracle,oracle4,pipeline
    .venv/bin/python eval/evaluate.py --part long --mode oracle,pipeline --out eval/results/long

Prints markdown tables (algorithm x file, pooled rows, what each rule changes with --ablate) and
writes latest.md and latest.json into --out. ASR and diarization outputs are cached under
eval/.cache (keyed by the audio, the model and the source of the ASR / diarization modules), so
re-scoring after a change to speaker_asr/attribution/ takes seconds. See eval/README.md.
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
from dataclasses import asdict, replace
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import numpy as np  # noqa: E402

from algorithms import Diar, endpoint, label, runners  # noqa: E402
from data import (MEETINGS_DIR, EvalFile, build_dataset, load_meeting_variants, load_meetings,  # noqa: E402
                  read_wav)
from longform import (SOLID_SPEECH_S, block_wder, build_long_recordings,  # noqa: E402
                      label_summary, returning_speakers, word_labels)
from speaker_asr.testing.scoring import (HypToken, RefToken, cpwer_counts, normalize_word, ratio,  # noqa: E402
                     wder_counts, wer_counts)
from speaker_asr.attribution.speakers import exclusive_turns  # noqa: E402
from speaker_asr.types import Turn  # noqa: E402

MODEL_DIRS = {"tiny.en": "whisper-tiny.en", "base": "whisper-base"}
# oracle: the reference turns, exclusive turns derived from them as for pyannote 3.x; oracle4: the
# reference turns with pyannote 4's kind of exclusive turns (who the pipeline hears where the
# reference has two speakers at once); pipeline: the kit's pipeline
MODES = ("oracle", "oracle4", "pipeline")
MODE_TEXT = {"oracle": "reference turns (exclusive derived, as for pyannote 3.x)",
             "oracle4": "reference turns (exclusive as pyannote 4 hears it)",
             "pipeline": "the kit's diarization"}
PARTS = ("original", "tuning", "heldout", "meetings", "meetings-hard", "long")

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
            from speaker_asr.settings import ModelSettings
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
    def __init__(self, models_dir: Path, embeddings: str = "recipe", segmentation: str = "float"):
        self.path = models_dir / "pyannote-campp-3.1"
        self.embeddings = embeddings  # DIARIZATION_EMBEDDINGS
        self.segmentation = segmentation  # the segmentation model's precision (float, int8)
        self._pipe = None
        self.seconds = 0.0

    @property
    def pipeline(self):
        if self._pipe is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
            from speaker_asr.diarization.pipeline import load_diarization_pipeline

            self._pipe = load_diarization_pipeline(str(self.path), None, embeddings=self.embeddings,
                                                   segmentation=self.segmentation)
            log(f"diarization: {self._pipe.diarization_settings['summary']}")
        return self._pipe

    def diarize(self, audio: np.ndarray, num_speakers: Optional[int]) -> dict:
        """The pipeline's turns and exclusive turns; on audio over 5 minutes its progress is
        logged (each step, and every tenth of the long ones)."""
        from speaker_asr.diarization.pipeline import diarize

        t = time.perf_counter()
        shown: set = set()

        def progress(step, artefact, file=None, total=None, completed=None):
            tenth = (10 * completed // total) if total and completed is not None else None
            if (step, tenth) not in shown:
                shown.add((step, tenth))
                log(f"  diarization: {step}" + (f" {10 * tenth} %" if tenth is not None else "")
                    + f" ({time.perf_counter() - t:.0f} s)")

        hook = progress if len(audio) > 300 * 16000 else None  # over 5 min at 16 kHz
        d = diarize(self.pipeline, audio, num_speakers=num_speakers, hook=hook)
        dt = time.perf_counter() - t
        self.seconds += dt
        conv = lambda turns: [[t.start, t.end, t.speaker] for t in turns]  # noqa: E731
        return {"turns": conv(d.turns), "seconds": round(dt, 2),
                "exclusive_turns": None if d.exclusive_turns is None else conv(d.exclusive_turns)}


class SentenceVoices:
    """The span embedder the endpoint hands the attribution (SENTENCE_VOICES), for one file: the
    pipeline's embedding model on the file's audio, each span's vector kept in the cache (by the
    pipeline folder, the audio and the embedding code)."""

    def __init__(self, diarizer: "Diarizer", audio: np.ndarray, cache: "Cache", key: str):
        self.diarizer, self.audio, self.cache, self.key = diarizer, audio, cache, key
        self.known: dict = cache.get("voices", key) or {}
        self.added = False

    def __call__(self, spans: list[tuple[float, float]]) -> list[Optional[np.ndarray]]:
        from speaker_asr.diarization.embeddings import embed_clip, embedding_model

        out = []
        for a, b in spans:
            k = f"{a:.3f}-{b:.3f}"
            if k not in self.known:
                model = embedding_model(self.diarizer.pipeline)
                v = embed_clip(model, self.audio[int(a * 16000):int(b * 16000)])
                self.known[k] = None if v is None else v.tolist()
                self.added = True
            out.append(None if self.known[k] is None else np.asarray(self.known[k]))
        return out

    def save(self) -> None:
        if self.added:
            self.cache.put("voices", self.key, self.known)
            self.added = False


def der(reference: list, hypothesis: list, metric: str = "der",
        duration: Optional[float] = None, spans: Optional[list] = None) -> Optional[float]:
    """pyannote.metrics DER (``metric="der"``) or JER (``"jer"``), collar 0, overlap scored, over
    ``[0, duration]`` when given, or over the (start, end) ``spans`` (the speakers mapped on those
    alone), else the extent of both."""
    try:
        from pyannote.core import Annotation, Segment, Timeline
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
    uem = Timeline([Segment(s, e) for s, e in spans]) if spans else \
        Timeline([Segment(0.0, duration)]) if duration else None
    return float(scorer(ann(reference), ann(hypothesis), uem=uem))


def best_speaker_map(reference: list, hypothesis: list) -> dict[str, str]:
    """Hypothesis label -> reference label, one-to-one, maximising the overlapping time."""
    from speaker_asr.assignment import best_pairs

    shared: dict[tuple[str, str], float] = {}
    for hs, he, h in hypothesis:
        for rs, re_, r in reference:
            overlap = min(he, re_) - max(hs, rs)
            if overlap > 0:
                shared[(h, r)] = shared.get((h, r), 0.0) + overlap
    return best_pairs(shared, sorted({t[2] for t in hypothesis}), sorted({t[2] for t in reference}))


def exclusive_as_heard(reference: list, heard: list, heard_turns: list) -> list[Turn]:
    """The reference turns made exclusive the way pyannote 4 makes its own: where the reference has
    several speakers at once, the one the pipeline's exclusive diarization ``heard`` there (its
    labels mapped to the reference's by overlap with its turns), when that is one of them; else
    :func:`exclusive_turns`' choice. Everywhere else the reference's one speaker."""
    ref = [Turn(*t) for t in reference]
    derived = exclusive_turns(ref)
    mapping = best_speaker_map(reference, heard_turns)
    heard_ref = [(s, e, mapping[h]) for s, e, h in heard if h in mapping]
    bounds = sorted({x for t in reference for x in t[:2]} | {x for t in heard_ref for x in t[:2]}
                    | {x for t in derived for x in (t.start, t.end)})
    out: list[Turn] = []
    for a, b in zip(bounds, bounds[1:]):
        mid = (a + b) / 2
        active = {t.speaker for t in ref if t.start <= mid < t.end}
        if not active:
            continue
        speaker = next(iter(active)) if len(active) == 1 else None
        if speaker is None:
            speaker = next((h for s, e, h in heard_ref if s <= mid < e and h in active), None)
        if speaker is None:
            speaker = next((t.speaker for t in derived if t.start <= mid < t.end), None)
        if speaker is None:
            continue
        if out and out[-1].speaker == speaker and abs(out[-1].end - a) < 1e-9:
            out[-1] = Turn(out[-1].start, b, speaker)
        else:
            out.append(Turn(a, b, speaker))
    return out


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


def score(ref: list[RefToken], hyp: list[HypToken]) -> tuple[dict, object]:
    out_toks = [t.text for t in hyp if not t.dropped]
    w = wer_counts([t.text for t in ref], out_toks)
    cp = cpwer_counts(ref, hyp)
    sp = wder_counts(ref, hyp)
    dropped = sum(1 for t in hyp if t.dropped or t.speaker is None)
    return {"ref_words": len(ref), "hyp_words": len(hyp),
            "wer_errors": w.errors, "cp_errors": cp and cp.errors, "cp_length": cp and cp.length,
            "spk_errors": sp.errors, "spk_scored": sp.scored,
            "dropped": dropped,
            "wer": ratio(w.errors, w.length), "cpwer": cp and ratio(cp.errors, cp.length),
            "wder": ratio(sp.errors, sp.scored), "dropped_rate": ratio(dropped, len(hyp)),
            "mapping": sp.mapping}, sp


def pool(rows: list[dict]) -> dict:
    s = lambda k: sum(r[k] for r in rows)  # noqa: E731
    return {"ref_words": s("ref_words"), "hyp_words": s("hyp_words"),
            "wer": ratio(s("wer_errors"), s("ref_words")),
            # cpWER where every file has one (meeteval refuses files with over 20 speakers)
            "cpwer": ratio(s("cp_errors"), s("cp_length")) if all(r["cp_length"] is not None for r in rows)
            else None,
            "wder": ratio(s("spk_errors"), s("spk_scored")), "dropped_rate": ratio(s("dropped"), s("hyp_words")),
            "spk_errors": s("spk_errors"), "spk_scored": s("spk_scored"), "dropped": s("dropped"),
            "files": len(rows)}


def _covered(start: float, end: float, turns: list[tuple[float, float, str]], speaker: str) -> float:
    """Fraction of [start, end] covered by ``speaker``'s turns (a zero-length word: 1 if inside)."""
    if end <= start:
        return 1.0 if any(s <= start <= e for s, e, spk in turns if spk == speaker) else 0.0
    cov = sum(max(0.0, min(end, e) - max(start, s)) for s, e, spk in turns if spk == speaker)
    return min(1.0, cov / (end - start))


def diagnose_errors(f: EvalFile, ref: list[RefToken], hyp: list[HypToken], sp, alg: str,
                    anchor_wrong: Optional[set] = None) -> list[dict]:
    """One record per word-level speaker error, with what may explain it."""
    ref_turns = list(f.turns)
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
        out.append({"file": f.id, "algorithm": alg, "word": h.text, "ref_word": r.text,
                    "word_time": [round(start, 2), round(end, 2)],
                    "ref_speaker": r.speaker, "hyp_speaker": h.speaker,
                    "hyp_speaker_mapped": sp.mapping.get(h.speaker), "position": r.pos,
                    "utterance": [u.start, u.end], "utterance_text": u.text,
                    "own_turn_coverage": round(own, 2), "cause": cause,
                    "anchor_right": anchor_wrong is not None and i not in anchor_wrong,
                    "correct_speaker_label": inverse.get(r.speaker)})
    return out


def changes(ref: list[RefToken], a: tuple, b: tuple) -> dict:
    """What algorithm b does to algorithm a's output: words whose speaker differs, and of those
    the reference words b fixes and breaks (after each one's own best speaker mapping)."""
    (ha, sa), (hb, sb) = a, b
    wrong_a, wrong_b = {i for i, _ in sa.wrong}, {i for i, _ in sb.wrong}
    ref_of = {j: i for i, j, _ in sb.pairs}
    changed = sum(1 for x, y in zip(ha, hb) if x.speaker != y.speaker)
    fixed = len({i for i in wrong_a - wrong_b if i in ref_of.values()})
    broke = len({i for i in wrong_b - wrong_a if i in ref_of.values()})
    return {"changed": changed, "fixed": fixed, "broke": broke}


# --------------------------------------------------------------------------- long recordings


def long_summary(files: list[EvalFile], blocks: dict, diar_out: dict, der_rows: list[dict],
                 rows: list[dict], words: dict, models: list[str]) -> dict:
    """--part long: per recording and model the speakers, DER/JER, WER and WDER, and the
    returning speakers (eval/longform.py's :func:`returning_speakers`, on the pipeline's turns
    mapped by :func:`best_speaker_map`, and on ours' words); DER and ours' WDER over the return
    blocks alone. ``words``: (model, file) -> {"labels": longform.word_labels' counts,
    "return_wder": longform.block_wder's counts}, from the pipeline mode."""
    recordings, speakers = [], []
    for f in files:
        d = diar_out.get(f.id)
        dr = next((r for r in der_rows if r["file"] == f.id), {})
        mapping = best_speaker_map(list(f.turns), d["turns"]) if d else {}
        spans = [(b.start, b.end) for b in blocks[f.id] if b.role == "return"]
        for m in models:
            mine = {(r["mode"], r["algorithm"]): r for r in rows if r["model"] == m and r["file"] == f.id}
            mine_words = words.get((m, f.id), {})
            returning = returning_speakers(f, blocks[f.id], d["turns"], mapping, mine_words.get("labels")) \
                if d else []
            for r in returning:
                r["model"] = m
            speakers += returning
            designed = [r for r in returning if r["role"] == "return"]
            filler = [r for r in returning if r["role"] != "return"]
            wder = {f"{mode}/{alg}": {"wder": r["wder"], "errors": r["spk_errors"], "scored": r["spk_scored"]}
                    for (mode, alg), r in mine.items() if alg in ("ours", "anchor")}
            recordings.append({
                "file": f.id, "model": m, "minutes": f.duration / 60,
                "blocks": len(blocks[f.id]), "filler_blocks": sum(b.role == "filler" for b in blocks[f.id]),
                "ref_speakers": len({t[2] for t in f.turns}), "speakers_found": dr.get("speakers"),
                "der": dr.get("der"), "jer": dr.get("jer"),
                "return_der": der(list(f.turns), d["turns"], spans=spans) if d else None,
                "return_wder": mine_words.get("return_wder"),
                "wer": next(iter(mine.values()))["wer"] if mine else None, "wder": wder,
                "returning": len(designed), "kept": sum(bool(r["kept"]) for r in designed),
                "theirs": sum(bool(r["theirs"]) for r in designed),
                "kept_words": sum(bool(r["kept_words"]) for r in designed),
                "solid": sum(r["min_speech_s"] >= SOLID_SPEECH_S for r in designed),
                "solid_kept": sum(bool(r["kept"]) for r in designed if r["min_speech_s"] >= SOLID_SPEECH_S),
                "filler_speakers": len(filler), "filler_kept": sum(bool(r["kept"]) for r in filler)})
    return {"recordings": recordings, "speakers": speakers}


def _yes(x) -> str:
    return "n/a" if x is None else "**yes**" if x else "no"


def render_long(long: dict) -> list[str]:
    lines = ["## Long recordings: does a speaker keep one label? (part long)", "",
             "Each appearance of a speaker (a block of the recording where they have reference "
             "turns) gets the pipeline's label that covers most of their speech there (speech "
             "where no other reference speaker talks, when there is 0.3 s of it); a speaker "
             "**kept** their label when every appearance got the same one; **theirs** when the "
             "best one-to-one mapping of labels to reference speakers (speaking time, the whole "
             "recording) maps that label to them. The same on ours' words: the hypothesis "
             "speaker most of their aligned reference words got in each appearance. DER and JER: "
             "pyannote.metrics, collar 0, overlap scored, the whole recording. WDER: ours "
             "(errors / words scored). Most of a recording is filler (the same few clips again "
             "and again); the return blocks columns score the return blocks alone (DER: the "
             "speakers mapped on them alone; WDER: the whole recording's mapping).", "",
             "| recording | min | blocks (filler) | speakers true / found | DER | JER | model | WER "
             "| WDER ours | WDER anchor | WDER ours, reference turns | return blocks: DER "
             "| return blocks: WDER ours | return speakers kept "
             "| kept, >= 2 s each | kept in words | filler speakers kept |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def w(rec, key):
        x = rec["wder"].get(key)
        return "n/a" if not x or x["wder"] is None else f"{pct2(x['wder'])} ({x['errors']}/{x['scored']})"

    def rw(x):
        return "n/a" if not x or not x[1] else f"{pct2(x[0] / x[1])} ({x[0]}/{x[1]})"

    for r in long["recordings"]:
        lines.append(
            f"| {r['file']} | {r['minutes']:.1f} | {r['blocks']} ({r['filler_blocks']}) "
            f"| {r['ref_speakers']} / {r['speakers_found'] if r['speakers_found'] is not None else 'n/a'} "
            f"| {pct(r['der'])} | {pct(r['jer'])} | {r['model']} | {pct(r['wer'])} "
            f"| {w(r, 'pipeline/ours')} | {w(r, 'pipeline/anchor')} | {w(r, 'oracle/ours')} "
            f"| {pct(r['return_der'])} | {rw(r['return_wder'])} "
            f"| {r['kept']} of {r['returning']} (theirs {r['theirs']}) | {r['solid_kept']} of {r['solid']} "
            f"| {r['kept_words']} of {r['returning']} | {r['filler_kept']} of {r['filler_speakers']} |")
    lines.append("")

    def apps_text(apps):
        if len(apps) <= 4:
            return ", ".join(f"{a['start_min']:.1f} ({a['unit']}, {a['speech_s']:.1f} s)" for a in apps)
        return (f"{len(apps)} x, {min(a['speech_s'] for a in apps):.1f}-"
                f"{max(a['speech_s'] for a in apps):.1f} s each")

    def labels_text(apps):
        if len(apps) <= 4:
            return ", ".join("none" if a["label"] is None else
                             f"{a['label']} ({100 * a['share']:.0f} %, = {a['mapped'] or '-'})" for a in apps)
        return label_summary(apps)

    for role, title in (("return", "Returning speakers: the same people with other utterances, 20+ min later"),
                        ("filler", "Filler speakers: the same clips again and again")):
        sel = [r for r in long["speakers"] if (r["role"] == "return") == (role == "return")]
        if not sel:
            continue
        lines += [f"### {title}", "",
                  "| recording | model | speaker | returns with | appearances: start min (block, speech) "
                  "| longest gap min | label per appearance (share, mapped to) | kept | theirs "
                  "| words: label per appearance | kept in words |",
                  "|---|---|---|---|---|---:|---|---|---|---|---|"]
        for r in sel:
            lines.append(
                f"| {r['file']} | {r['model']} | {r['speaker']} | {r['returns_with']} "
                f"| {apps_text(r['appearances'])} | {r['longest_gap_min']:.1f} "
                f"| {labels_text(r['appearances'])} | {_yes(r['kept'])} | {_yes(r['theirs'])} "
                f"| {label_summary(r['appearances'], 'word_label')} | {_yes(r['kept_words'])} |")
        lines.append("")
    return lines


# --------------------------------------------------------------------------- report


def pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def pct2(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}"


def render(result: dict) -> str:
    meta = result["meta"]
    lines = ["# Speaker-attribution evaluation", "",
             f"Run {meta['date']} on {meta['host']}, code at {meta['git']}: part {meta['part']}; "
             f"models {', '.join(meta['models'])}; modes {', '.join(meta['modes'])}; "
             f"{len(result['files'])} files, {meta['audio_seconds']:.0f} s of audio, "
             f"{sum(f['ref_words'] for f in result['files'])} reference words; speaker count "
             f"{meta['num_speakers']} to the pipeline; wall time {meta['wall_seconds']:.0f} s "
             f"({meta['cached']} ASR/diarization results came from the cache -- computing all of "
             f"them took ASR {meta['asr_compute_seconds']:.0f} s + diarization "
             f"{meta['diarization_compute_seconds']:.0f} s). torch {meta['torch']}, transformers "
             f"{meta['transformers']}, pyannote.audio {meta['pyannote']}."
             + (f" ASR long_form: {meta['long_form']}." if meta.get("long_form", "chunked") != "chunked" else "")
             + (f" ASR dtype: {meta['dtype']}." if meta.get("dtype") else "")
             + (f" ASR quantization: {meta['quantization']}." if meta.get("quantization") else "")
             + (f" Diarization embeddings: {meta['diarization']}." if meta.get("diarization", "recipe") != "recipe" else "")
             + (f" Segmentation: {meta['segmentation']}." if meta.get("segmentation", "float") != "float" else "")
             + (f" `before`: the attribution at {meta['before']}." if meta.get("before") else ""),
             "",
             "All numbers in %. WER/cpWER on normalized words; WDER = reference words aligned as "
             "correct/substituted whose speaker is wrong after the best speaker mapping (errors / "
             "words scored in the last column); dropped = ASR words left without a speaker. "
             "Every algorithm gets the same words and the same turns."
             + (" cpWER n/a: a file has more than 20 speakers, which meeteval refuses to score."
                if any(r["cpwer"] is None and r["ref_words"] for r in result["rows"]) else ""), ""]
    if result.get("long"):
        lines += render_long(result["long"])
    lines += ["## Pooled over files", "",
              "| model | turns | algorithm | WER | cpWER | WDER | dropped | speaker errors | vs anchor |",
              "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in result["pooled"]:
        anchor = next((q for q in result["pooled"] if q["model"] == p["model"]
                       and q["mode"] == p["mode"] and q["algorithm"] == "anchor"), None)
        vs = (f"{p['wder'] / anchor['wder']:.2f}x" if anchor and anchor["wder"] and p["wder"] is not None
              else "")
        lines.append(f"| {p['model']} | {p['mode']} | {label(p['algorithm'])} | {pct(p['wer'])} "
                     f"| {pct(p['cpwer'])} | {pct2(p['wder'])} | {pct2(p['dropped_rate'])} "
                     f"| {p['spk_errors']}/{p['spk_scored']} | {vs} |")
    lines.append("")
    if result.get("rules"):
        lines += ["## What each rule changes (ours with every rule vs ours without that one)", "",
                  "| model | turns | rule | words changed | fixed | broken | WDER without it | with it |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        for r in result["rules"]:
            lines.append(f"| {r['model']} | {r['mode']} | {r['rule']} | {r['changed']} | {r['fixed']} "
                         f"| {r['broke']} | {pct2(r['wder_without'])} | {pct2(r['wder_with'])} |")
        lines.append("")
    for model in meta["models"]:
        for mode in meta["modes"]:
            rows = [r for r in result["rows"] if r["model"] == model and r["mode"] == mode]
            if not rows:
                continue
            lines += [f"## {model}, {MODE_TEXT[mode]}: per file", "",
                      "| file | algorithm | WER | cpWER | WDER | dropped | speaker errors |",
                      "|---|---|---:|---:|---:|---:|---:|"]
            for r in rows:
                lines.append(f"| {r['file']} | {label(r['algorithm'])} | {pct(r['wer'])} "
                             f"| {pct(r['cpwer'])} | {pct2(r['wder'])} | {pct2(r['dropped_rate'])} "
                             f"| {r['spk_errors']}/{r['spk_scored']} |")
            lines.append("")
    if result["der"]:
        lines += [f"## Diarization: the kit's pipeline (speaker count {meta['num_speakers']})", "",
                  "| file | DER (collar 0) | JER (collar 0) | speakers found | reference speakers |",
                  "|---|---:|---:|---:|---:|"]
        for d in result["der"]:
            lines.append(f"| {d['file']} | {pct(d['der'])} | {pct(d.get('jer'))} | {d['speakers']} "
                         f"| {d['ref_speakers']} |")
        total = sum(d["speech"] for d in result["der"])
        if total:
            lines.append(f"| **speech-weighted** | {pct(sum(d['der'] * d['speech'] for d in result['der']) / total)} "
                         f"| {pct(sum(d['jer'] * d['speech'] for d in result['der']) / total)} "
                         f"| {sum(d['speakers'] for d in result['der'])} "
                         f"| {sum(d['ref_speakers'] for d in result['der'])} |")
        lines.append("")
    for model, d in result["diagnostics"].items():
        for mode, p in d.get("parity", {}).items():
            lines.append(f"- {model} {mode}: ours vs the endpoint's `build_response`: "
                         + (f"same speaker for all {p['words']} words" if not p["mismatches"]
                            else f"**{p['mismatches']} of {p['words']} words differ** "
                                 f"({', '.join(p['files'])})"))
        for mode, c in d.get("causes", {}).items():
            lines.append(f"- {model} {mode}, ours: errors by cause: "
                         + (", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"))
    lines.append("")
    errs = [e for d in result["diagnostics"].values() for e in d["errors"]]
    if errs and meta["part"] == "long":
        lines += [f"Our {len(errs)} word-level speaker errors with reference turns are in latest.json "
                  "(diagnostics).", ""]
    elif errs:
        lines += ["## Our word-level speaker errors with reference turns", "",
                  "| model | turns | file | word (ref) | word time | utterance (pos) | ref spk | "
                  "own-turn coverage | cause | anchor right |", "|---|---|---|---|---|---|---|---:|---|---|"]
        for e in errs:
            lines.append(
                f"| {e['model']} | {e['mode']} | {e['file']} | {e['word']} ({e['ref_word']}) "
                f"| {e['word_time'][0]:.2f}-{e['word_time'][1]:.2f} "
                f"| {e['utterance'][0]:.2f}-{e['utterance'][1]:.2f} ({e['position']}) "
                f"| {e['ref_speaker']} | {e['own_turn_coverage']:.2f} | {e['cause']} "
                f"| {'yes' if e['anchor_right'] else ''} |")
        lines.append("")
    lines += ["## Data", "", "| file | duration s | speakers | utterances | ref words | description |",
              "|---|---:|---:|---:|---:|---|"]
    for f in result["files"]:
        lines.append(f"| {f['id']} | {f['duration']:.1f} | {f['num_speakers']} | {f['utterances']} "
                     f"| {f['ref_words']} | {f['description']} |")
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def diarizations(f: EvalFile, mode: str, d: Optional[dict]) -> Diar:
    """The turns each mode gives the attribution."""
    if mode == "pipeline":
        turns = [Turn(*t) for t in d["turns"]]
        exclusive = d["exclusive_turns"]
        if exclusive is None:  # pyannote 3.x
            return Diar(turns, exclusive_turns(turns), heard=False)
        return Diar(turns, [Turn(*t) for t in exclusive])
    turns = [Turn(*t) for t in f.turns]
    if mode == "oracle4":
        heard = d["exclusive_turns"] if d["exclusive_turns"] is not None else d["turns"]
        return Diar(turns, exclusive_as_heard(list(f.turns), heard, d["turns"]))
    return Diar(turns, exclusive_turns(turns), heard=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None,
                    help="comma list: tiny.en, base, or Whisper folders (default tiny.en,base; "
                         "tiny.en for --part long)")
    ap.add_argument("--mode", default="oracle,pipeline",
                    help=f"comma list of {', '.join(MODES)} (default oracle,pipeline)")
    ap.add_argument("--part", default="original", choices=PARTS,
                    help="original: the sample + d1-d5; tuning: the sample + generated dialogues to "
                         "choose rules on; heldout: generated dialogues never tuned on "
                         "(eval/generate.py); meetings: the real AMI clips (--meetings-dir); long: "
                         "30-45 min recordings of that real speech where speakers come back after "
                         "20+ min (eval/longform.py)")
    ap.add_argument("--count", type=int, default=12, help="generated dialogues per part")
    ap.add_argument("--meetings-dir", type=Path, default=MEETINGS_DIR,
                    help=f"real meeting clips for --part meetings and long (default {MEETINGS_DIR})")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="--part long: shorter recordings of the same structure, at most about this "
                         "long (a smoke run; default: full length, 32 and 45 min)")
    ap.add_argument("--files", default="all", help="comma list of file ids, or all")
    ap.add_argument("--num-speakers", choices=("known", "unknown"), default=None,
                    help="give the pipeline the true speaker count (default: known for the "
                         "generated parts, unknown for meetings and long, as a user calls the endpoint)")
    ap.add_argument("--before", metavar="REV", default=None,
                    help="add the attribution of git revision REV as algorithm 'before'")
    ap.add_argument("--ablate", action="store_true",
                    help="also run ours without each of its rules, and tabulate what each changes")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("REAL_MODELS_DIR") or "~/.cache/real-models").expanduser(),
                    help="real models folder (default $REAL_MODELS_DIR or ~/.cache/real-models)")
    ap.add_argument("--cache-dir", type=Path, default=HERE / ".cache")
    ap.add_argument("--out", type=Path, default=HERE / "results",
                    help="folder for latest.md / latest.json")
    ap.add_argument("--no-cache", action="store_true", help="recompute ASR and diarization")
    ap.add_argument("--rebuild-data", action="store_true", help="regenerate the dialogues")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--diarization", default="recipe", choices=("recipe", "approximate"),
                    help="DIARIZATION_EMBEDDINGS: recipe (the endpoint's default: every window's "
                         "speakers embedded) or approximate (every fifth window's, the others pooled)")
    ap.add_argument("--segmentation", default="float", choices=("float", "int8"),
                    help="the segmentation model's precision on CPU: float (default: the model's own "
                         "float32 scores) or int8 (opt-in: its LSTM's weights quantized, "
                         "speaker_asr/patches/diarization_onnx.py)")
    ap.add_argument("--sentence-voices", default="on", choices=("on", "off"),
                    help="SENTENCE_VOICES: the sentences' voices check the speakers (default on, "
                         "the endpoint's default; needs the pipeline's embedding model in every mode)")
    ap.add_argument("--long-form", default="chunked", choices=("chunked", "sequential"),
                    help="the endpoint's long_form parameter for the ASR (default chunked, its default)")
    ap.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                    help="the endpoint's TORCH_DTYPE for the ASR (default: its own default for the device)")
    ap.add_argument("--quantization", default=None, choices=("int8",),
                    help="the endpoint's QUANTIZATION for the ASR (CPU; default: none)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="variant of the original dialogues: their seeds + this (other gaps, overlaps, "
                         "backchannels and noise; same scripts and voices). 0: the default set")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    if args.max_minutes is not None and args.part != "long":
        ap.error("--max-minutes is for --part long")
    if args.models is None:
        args.models = "tiny.en" if args.part == "long" else "tiny.en,base"
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        ap.error(f"unknown mode(s) {bad}; use {', '.join(MODES)}")
    models_dir = args.models_dir.expanduser()
    for m in models:
        if not (model_path(models_dir, m) / "config.json").is_file():
            ap.error(f"no Whisper model {m!r} at {model_path(models_dir, m)}")
    known_count = (args.num_speakers or ("unknown" if args.part in ("meetings", "meetings-hard", "long")
                                      else "known")) == "known"
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cache = Cache(args.cache_dir, not args.no_cache)
    algs = runners(args.before, args.ablate)

    # data (LibriVox cuts need Whisper base word timestamps; built once, then cached)
    blocks: dict = {}
    if args.part == "meetings":
        files = load_meetings(args.meetings_dir)
    elif args.part == "meetings-hard":
        files = load_meeting_variants(args.meetings_dir, Path(args.cache_dir) / "meetings-hard")
    elif args.part == "long":
        files, blocks = build_long_recordings(args.meetings_dir, models_dir, args.cache_dir,
                                              args.max_minutes, rebuild=args.rebuild_data, log=log)
    else:
        base_asr: dict[str, Asr] = {}

        def base_words():
            base_asr.setdefault("b", Asr(model_path(models_dir, "base")))
            return base_asr["b"].words

        files = build_dataset(models_dir, args.cache_dir, base_words, rebuild=args.rebuild_data,
                              log=log, seed_offset=args.seed_offset, part=args.part,
                              count=args.count)
    if args.files != "all":
        wanted = {x.strip() for x in args.files.split(",")}
        files = [f for f in files if f.id in wanted]
        if not files:
            ap.error(f"no files match {args.files}")
    audio = {f.id: read_wav(f.audio) for f in files}
    audio_sha = {f.id: _sha(audio[f.id].tobytes()) for f in files}

    # ASR (cached)
    asr_out: dict[tuple[str, str], dict] = {}
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
        del runner

    # diarization (cached)
    diar_out: dict[str, dict] = {}
    der_rows = []
    diarizer = Diarizer(models_dir, embeddings=args.diarization, segmentation=args.segmentation)
    voices: dict[str, SentenceVoices] = {}
    if args.sentence_voices == "on":
        voices_sha = _sha(_source_sha("speaker_asr/diarization/embeddings.py"))
        for f in files:
            voices[f.id] = SentenceVoices(diarizer, audio[f.id], cache,
                                          _sha("voices", diarizer.path.resolve(), audio_sha[f.id], voices_sha))
    if {"pipeline", "oracle4"} & set(modes):
        # what can change the turns: the loading, the patches, the clustering and the setting
        diar_sha = _sha(*(_source_sha(f"speaker_asr/{name}") for name in (
            "diarization/pipeline.py", "diarization/window_plan.py", "patches/diarization.py",
            "patches/diarization_onnx.py", "patches/registry.py", "diarization/clustering.py")),
            args.diarization, *(("int8",) if args.segmentation == "int8" else ()))
        for f in files:
            count = f.num_speakers if known_count else None
            key = _sha("diar", diarizer.path.resolve(), audio_sha[f.id], count, diar_sha)
            r = cache.get("diar", key)
            cached += r is not None
            if r is None:
                log(f"diarization {f.id} ({f.duration:.0f} s)...")
                r = diarizer.diarize(audio[f.id], count)
                cache.put("diar", key, r)
            diar_out[f.id] = r
            speech = sum(e - s for s, e, _ in f.turns)
            der_rows.append({"file": f.id, "der": der(f.turns, r["turns"], duration=f.duration),
                             "jer": der(f.turns, r["turns"], "jer", duration=f.duration),
                             "speakers": len({t[2] for t in r["turns"]}),
                             "ref_speakers": len({t[2] for t in f.turns}), "speech": speech})

    # the sentences' voices are embedded during the scoring, when the words have speakers
    # scoring
    refs = {f.id: reference_tokens(f) for f in files}
    rows, pooled, rules = [], [], []
    diagnostics: dict[str, dict] = {}
    long_words: dict[tuple[str, str], dict] = {}  # --part long, pipeline: (model, file) -> ours' words
    for m in models:
        diag = {"errors": [], "causes": {}, "parity": {}}
        for mode in modes:
            per_alg: dict[str, list[dict]] = {a: [] for a in algs}
            outputs_by_file: dict[str, dict] = {}
            parity = {"words": 0, "mismatches": 0, "files": []}
            causes: dict[str, int] = {}
            for f in files:
                r = asr_out[(m, f.id)]
                diar = replace(diarizations(f, mode, diar_out.get(f.id)), embed=voices.get(f.id),
                               max_speakers=f.num_speakers if known_count else None)
                chunks = [tuple(c) for c in r["chunks"]]
                words = [tuple(w) for w in r["words"] or []]
                outputs = {}
                for alg, run in algs.items():
                    hyp = run(chunks, words, diar, f.duration)
                    row, sp = score(refs[f.id], hyp)
                    outputs[alg] = (hyp, sp)
                    row.update(model=m, mode=mode, file=f.id, algorithm=alg)
                    rows.append(row)
                    per_alg[alg].append(row)
                outputs_by_file[f.id] = outputs
                if blocks and mode == "pipeline":
                    long_words[(m, f.id)] = {
                        "labels": word_labels(f, blocks[f.id], refs[f.id], *outputs["ours"]),
                        "return_wder": block_wder(f, blocks[f.id], refs[f.id], outputs["ours"][1])}
                # ours must give every word the speaker the endpoint's build_response gives it
                he = endpoint(chunks, words, diar, f.duration)
                hd = outputs["ours"][0]
                mism = sum(1 for a, b in zip(he, hd) if a.speaker != b.speaker) + abs(len(he) - len(hd))
                parity["words"] += len(hd)
                parity["mismatches"] += mism
                if mism:
                    parity["files"].append(f.id)
                errs = diagnose_errors(f, refs[f.id], *outputs["ours"], "ours",
                                       {i for i, _ in outputs["anchor"][1].wrong})
                for e in errs:
                    causes[e["cause"]] = causes.get(e["cause"], 0) + 1
                    e["model"], e["mode"] = m, mode
                if mode != "pipeline":
                    diag["errors"] += errs
            for alg, rs in per_alg.items():
                p = pool(rs)
                p.update(model=m, mode=mode, algorithm=alg)
                pooled.append(p)
            for alg in algs:
                if not alg.startswith("ours-"):
                    continue
                total = {"changed": 0, "fixed": 0, "broke": 0}
                for f in files:
                    c = changes(refs[f.id], outputs_by_file[f.id][alg], outputs_by_file[f.id]["ours"])
                    for k in total:
                        total[k] += c[k]
                rules.append({"model": m, "mode": mode, "rule": alg[5:], **total,
                              "wder_without": pool(per_alg[alg])["wder"],
                              "wder_with": pool(per_alg["ours"])["wder"]})
            diag["parity"][mode] = parity
            diag["causes"][mode] = causes
            if parity["mismatches"]:
                log(f"WARNING: {m} {mode}: ours and the endpoint's build_response disagree on "
                    f"{parity['mismatches']} words ({', '.join(parity['files'])})")
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
                 "seed_offset": args.seed_offset, "part": args.part, "long_form": args.long_form,
                 "dtype": args.dtype, "before": args.before,
                 "num_speakers": "given" if known_count else "unknown",
                 "quantization": args.quantization and f"{args.quantization} ({int8_form} form)",
                 "diarization": args.diarization, "segmentation": args.segmentation,
                 "audio_seconds": sum(f.duration for f in files),
                 "wall_seconds": time.perf_counter() - t0, "cached": cached,
                 "asr_compute_seconds": sum(r.get("seconds") or 0 for r in asr_out.values()),
                 "diarization_compute_seconds": sum(r.get("seconds") or 0 for r in diar_out.values()),
                 "git": _git_state(),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "pyannote": pyannote_version},
        "files": [{"id": f.id, "duration": f.duration, "num_speakers": f.num_speakers,
                   "utterances": len(f.utterances), "ref_words": len(refs[f.id]),
                   "description": f.description} for f in files],
        "pooled": pooled, "rules": rules, "rows": rows, "der": der_rows,
        "diagnostics": diagnostics,
        "long": long_summary(files, blocks, diar_out, der_rows, rows, long_words, models) if blocks else None,
        "asr": {f"{m}/{fid}": {"text": r["text"], "seconds": r.get("seconds"), "words": r["words"]}
                for (m, fid), r in asr_out.items()},
        "diarization": diar_out,
        "references": {f.id: [asdict(u) for u in f.utterances] for f in files},
        "blocks": {k: [asdict(b) for b in v] for k, v in blocks.items()},
    }
    md = render(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(md)
    for v in voices.values():
        v.save()
    (args.out / "latest.json").write_text(json.dumps(result, indent=1, default=str))
    print(md)
    log(f"wrote {args.out / 'latest.md'} and latest.json in {result['meta']['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
