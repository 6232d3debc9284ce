"""Which approximation of the diarization's embeddings costs nothing measurable: each variant of
``DIARIZATION_EMBEDDINGS=approximate`` scored against the recipe's own computation.

    python eval/choose_approximate.py                        # joined8 and long32: choose
    python eval/choose_approximate.py --recordings long45    # the held-out one, once chosen
    python eval/choose_approximate.py --smoke                # CI: the tiny random pipeline

Every variant is simulated from one run of the recipe per recording: its segmentation and every
(window, speaker) embedding are recorded once (``eval/.cache/approximate/``). A variant then takes
from that record the embeddings it computes (its own windows': exactly what the recipe computes
for them, with the same masks), pools the others as speaker_asr/diarization/window_plan.py does,
and pyannote's clustering and reconstruction run for real on the result. So a variant costs
seconds here, and the figure "embedded" is the share of the recipe's embeddings it would compute
(its cost). The chosen variant is then checked end to end with the endpoint's own code
(``eval/evaluate.py --part long --diarization approximate``).

Printed per recording and variant: DER (pyannote.metrics, collar 0, overlap scored), the
speakers found against the recipe's, the embeddings computed, and DER's change from the recipe.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "eval"))

from speaker_asr.diarization import window_plan  # noqa: E402


@dataclass(frozen=True)
class Variant:
    """One way to approximate: ``stride`` (1: the recipe), pooled pairs whose two sources lie more
    than ``disagree`` apart (cosine distance; None: never) embedded from their own window,
    ``own_only``: the clustering trained on the embedded pairs alone (the pooled ones are only
    assigned to its clusters), its minimum cluster size scaled by their share when ``relative``."""

    name: str
    stride: int = 5
    disagree: Optional[float] = None
    own_only: bool = False
    relative: bool = False
    single: bool = True  # pool a pair matched on one side only (else embed it)


VARIANTS = [
    Variant("recipe", stride=1),
    Variant("stride5 (today)"),
    Variant("stride5 redo>0.5", disagree=0.5),
    Variant("stride5 redo>0.4", disagree=0.4),
    Variant("stride5 redo>0.3", disagree=0.3),
    Variant("stride5 redo>0.3 two-sided", disagree=0.3, single=False),
    Variant("stride5 own-train", own_only=True),
    Variant("stride5 own-train relative", own_only=True, relative=True),
    Variant("stride5 own-train relative redo>0.4", own_only=True, relative=True, disagree=0.4),
    Variant("stride3", stride=3),
    Variant("stride3 redo>0.4", stride=3, disagree=0.4),
    Variant("stride3 own-train relative", stride=3, own_only=True, relative=True),
    Variant("stride8 own-train relative", stride=8, own_only=True, relative=True),
]


@dataclass
class Record:
    """The recipe's run on one recording: the raw segmentation (pyannote's SlidingWindowFeature)
    and every (window, speaker) embedding (NaN where none)."""

    segmentation: object
    embeddings: np.ndarray
    seconds: dict = field(default_factory=dict)


def _sw(feature) -> dict:
    w = feature.sliding_window
    return {"start": w.start, "duration": w.duration, "step": w.step}


def record_path(cache: Path, key: str) -> Path:
    return cache / "approximate" / f"{key}.npz"


def recording_key(audio: np.ndarray, pipeline_dir: str) -> str:
    h = hashlib.sha1(np.ascontiguousarray(audio[::97]).tobytes())
    h.update(pipeline_dir.encode())
    return h.hexdigest()[:16]


def load_record(path: Path) -> Optional[Record]:
    if not path.is_file():
        return None
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    z = np.load(path, allow_pickle=False)
    sw = json.loads(str(z["window"]))
    seg = SlidingWindowFeature(z["segmentation"], SlidingWindow(**sw))
    return Record(seg, z["embeddings"], json.loads(str(z["seconds"])))


def save_record(path: Path, record: Record) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, segmentation=record.segmentation.data, embeddings=record.embeddings,
                        window=json.dumps(_sw(record.segmentation)), seconds=json.dumps(record.seconds))
    tmp.replace(path)


class Simulator:
    """The kit's pipeline (the recipe, the endpoint's speed fixes) whose segmentation and
    embeddings come from a :class:`Record` and whose embeddings follow a :class:`Variant`."""

    def __init__(self, pipeline_dir: str):
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
        from speaker_asr.diarization.pipeline import load_diarization_pipeline

        self.pipeline = load_diarization_pipeline(pipeline_dir, None, embeddings="recipe")
        self.pipeline_dir = pipeline_dir
        pipe = self.pipeline
        self.stock_segmentations = pipe.get_segmentations
        self.stock_embeddings = pipe.get_embeddings
        self.record: Optional[Record] = None
        self.variant: Optional[Variant] = None
        self.own: Optional[np.ndarray] = None  # the embedded pairs of the run in progress
        self.embedded = 0
        self.active = 0
        sim = self

        def get_segmentations(file, hook=None):
            return sim.record.segmentation

        def get_embeddings(file, binary_segmentations, exclude_overlap=False, hook=None):
            return sim.embeddings(binary_segmentations)

        pipe.get_segmentations = get_segmentations
        pipe.get_embeddings = get_embeddings
        clustering = pipe.clustering
        stock_filter = clustering.filter_embeddings
        stock_mcs = int(clustering.min_cluster_size)

        def filter_embeddings(embeddings, segmentations=None, min_active_ratio=0.2):
            out, chunk, speaker = stock_filter(embeddings, segmentations=segmentations,
                                               min_active_ratio=min_active_ratio)
            v = sim.variant
            clustering.min_cluster_size = stock_mcs
            if v is None or not v.own_only or sim.own is None:
                return out, chunk, speaker
            keep = sim.own[chunk, speaker]
            if v.relative and len(chunk):
                clustering.min_cluster_size = max(1, int(round(stock_mcs * keep.sum() / len(chunk))))
            return out[keep], chunk[keep], speaker[keep]

        clustering.filter_embeddings = filter_embeddings

    def compute(self, audio: np.ndarray) -> Record:
        """The recipe's run on ``audio``, recorded."""
        import torch

        from speaker_asr.audio.decode import SAMPLE_RATE

        pipe, got = self.pipeline, {}
        file = {"waveform": torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None],
                "sample_rate": SAMPLE_RATE}
        t = time.perf_counter()
        with torch.inference_mode():
            seg = self.stock_segmentations(file)
            got["segmentation_s"] = time.perf_counter() - t
            # segmentation-3.0 is a powerset model: its segmentation is binary as it is
            binary = seg
            t = time.perf_counter()
            shown = set()

            def progress(step, artefact, file=None, total=None, completed=None):
                tenth = 10 * completed // total if total and completed is not None else None
                if tenth not in shown:
                    shown.add(tenth)
                    print(f"  {step} {10 * (tenth or 0)} % ({time.perf_counter() - t:.0f} s)", flush=True)

            emb = self.stock_embeddings(file, binary, exclude_overlap=pipe.embedding_exclude_overlap,
                                        hook=progress)
            got["embeddings_s"] = time.perf_counter() - t
        return Record(seg, np.asarray(emb, dtype=np.float32), got)

    def embeddings(self, binary) -> np.ndarray:
        """The variant's embeddings of the recorded run."""
        full, v = self.record.embeddings, self.variant
        data = binary.data
        active = np.nan_to_num(data).sum(axis=1) > 0  # (windows, speakers)
        self.active = int(active.sum())
        if v.stride <= 1:
            self.own = None
            self.embedded = self.active
            return full.copy()
        window = binary.sliding_window
        plan = window_plan.plan_windows(data, data.shape[1] * window.step / window.duration, v.stride)
        own = plan.own.copy()
        if not v.single:
            own |= active & ((plan.weights > 0).sum(axis=2) < 2)
        out = np.full_like(full, np.nan)
        out[own] = full[own]
        if v.disagree is not None:
            src = plan.sources
            w, s = np.nonzero(active & ~own & ((plan.weights > 0).sum(axis=2) == 2))
            a = full[src[w, s, 0, 0], src[w, s, 0, 1]]
            b = full[src[w, s, 1, 0], src[w, s, 1, 1]]
            with np.errstate(invalid="ignore", divide="ignore"):
                cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            redo = ~(1 - cos <= v.disagree)  # NaN: redo
            own[w[redo], s[redo]] = True
            out[own] = full[own]
        plan.own = own
        plan.pool_into(out)
        missing = active & np.isnan(out).any(axis=2) & ~own
        out[missing] = full[missing]
        own |= missing
        self.own = own
        self.embedded = int((own & active).sum())
        return out

    def run(self, record: Record, variant: Variant):
        from speaker_asr.diarization.pipeline import diarize

        self.record, self.variant = record, variant
        audio = np.zeros(16000, dtype=np.float32)  # the record stands for the audio
        return diarize(self.pipeline, audio)


def der(turns, rttm: list[tuple[float, float, str]]) -> float:
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    ref, hyp = Annotation(), Annotation()
    for i, (a, b, s) in enumerate(rttm):
        ref[Segment(a, b), i] = s
    for i, t in enumerate(turns):
        hyp[Segment(t.start, t.end), i] = t.speaker
    return 100 * DiarizationErrorRate(collar=0.0, skip_overlap=False)(ref, hyp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recordings", default="joined8,long32,group8",
                    help="of joined8, long32, long45 (eval/longform.py) and group8 (few people)")
    ap.add_argument("--variants", default="", help="names (comma-separated) of VARIANTS; default all")
    ap.add_argument("--cache", type=Path, default=ROOT / "eval" / ".cache")
    ap.add_argument("--out", type=Path, default=None, help="write the table (markdown) here too")
    ap.add_argument("--smoke", action="store_true", help="the tiny random pipeline on generated audio")
    args = ap.parse_args(argv)
    variants = [v for v in VARIANTS if not args.variants or v.name in args.variants.split(",")]
    if args.smoke:
        return smoke(variants)
    from data import MEETINGS_DIR, read_wav  # noqa: E402
    from longform import build_long_recordings  # noqa: E402

    models = Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models"))
    files, _ = build_long_recordings(MEETINGS_DIR, models, args.cache)
    wanted = args.recordings.split(",")
    if "group8" in wanted:
        files.append(build_group(MEETINGS_DIR, args.cache))
    files = sorted((f for f in files if f.id in wanted), key=lambda f: wanted.index(f.id))
    sim = Simulator(str(models / "pyannote-campp-3.1"))
    rows = []
    for f in files:
        audio = read_wav(f.audio)
        path = record_path(args.cache, recording_key(audio, sim.pipeline_dir))
        record = load_record(path)
        if record is None:
            print(f"recording the recipe's run on {f.id} ({len(audio) / 16000 / 60:.1f} min)...", flush=True)
            record = sim.compute(audio)
            save_record(path, record)
        reference = [(a, b, s) for a, b, s in _rttm(f)]
        base = None
        for v in variants:
            d = sim.run(record, v)
            score = der(d.turns, reference)
            speakers = len({t.speaker for t in d.turns})
            if v.stride == 1:
                base = (score, speakers)
            rows.append((f.id, v.name, score, speakers, sim.embedded, sim.active,
                         None if base is None else score - base[0]))
            print(f"{f.id:8s} {v.name:40s} DER {score:6.2f}  speakers {speakers:3d}  "
                  f"embedded {sim.embedded}/{sim.active} ({100 * sim.embedded / max(1, sim.active):.0f} %)"
                  + ("" if base is None else f"  ΔDER {score - base[0]:+.2f}"), flush=True)
    table = ["| recording | variant | DER | Δ recipe | speakers | embedded (share of the recipe's) |",
             "|---|---|---:|---:|---:|---:|"]
    for rid, name, score, speakers, emb, act, delta in rows:
        table.append(f"| {rid} | {name} | {score:.2f} | {'' if delta is None else f'{delta:+.2f}'} | "
                     f"{speakers} | {emb} of {act} ({100 * emb / max(1, act):.0f} %) |")
    print("\n".join(table))
    if args.out:
        import platform

        args.out.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# Approximate embeddings: the variants against the recipe's computation\n\n"
                  f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()}: "
                  f"`python eval/choose_approximate.py --recordings {args.recordings}` (the kit's "
                  "pipeline, CAM++; DER collar 0, overlap scored; \"embedded\": the (window, speaker) "
                  "pairs a variant computes, of the recipe's).\n\n")
        args.out.write_text(header + "\n".join(table) + "\n")
    return 0


def _rttm(f):
    if getattr(f, "rttm", None) is not None:
        return f.rttm
    from data import read_rttm

    return read_rttm(Path(f.audio).with_suffix(".rttm"))


# one group of people over several minutes: the four clips of AMI meeting EN2001 (the same
# people, other stretches of their meeting), each as recorded and as eval/data.py's far, noisy
# and level-moving variants: the long recordings above have 17-21 people, this one few, where a
# smaller minimum cluster size could split someone in two
GROUP_CLIPS = ("EN2001a", "EN2001b", "EN2001d", "EN2001e")
GROUP_KINDS = ("", "far", "noisy", "levels")
GROUP_GAP_S = 0.5


@dataclass
class Built:
    id: str
    audio: str
    rttm: list


def build_group(meetings_dir: Path, cache: Path) -> Built:
    """The ``group8`` recording (8 min): GROUP_CLIPS x GROUP_KINDS, GROUP_GAP_S apart, with the
    clips' reference turns."""
    from data import load_meeting, meeting_variant, read_wav, write_wav

    folders = {p.name.split("_")[1]: p for p in Path(meetings_dir).iterdir() if (p / "ref.rttm").is_file()}
    pieces, turns, at = [], [], 0.0
    gap = np.zeros(int(GROUP_GAP_S * 16000), np.float32)
    for kind in GROUP_KINDS:
        for clip in GROUP_CLIPS:
            f = load_meeting(folders[clip])
            audio = read_wav(f.audio)
            if kind:
                seed = int(hashlib.sha256(f"{clip}/{kind}/group".encode()).hexdigest()[:8], 16)
                audio = meeting_variant(audio, kind, seed)
            turns += [(at + a, at + b, spk) for a, b, spk in f.turns]
            pieces += [audio, gap]
            at += (len(audio) + len(gap)) / 16000
    path = cache / "approximate" / "group8.wav"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        write_wav(path, np.concatenate(pieces))
    return Built("group8", str(path), turns)


def smoke(variants) -> int:
    """The tiny random pipeline on a few seconds of generated audio: every variant runs."""
    import tempfile

    from speaker_asr.testing.tiny_models import build_pyannote_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_pyannote_pipeline(Path(tmp) / "pipeline")
        sim = Simulator(str(folder))
        rng = np.random.default_rng(0)
        audio = (0.1 * rng.standard_normal(16000 * 40)).astype(np.float32)
        record = sim.compute(audio)
        for v in variants:
            d = sim.run(record, v)
            print(f"smoke {v.name}: {len(d.turns)} turns, embedded {sim.embedded}/{sim.active}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
