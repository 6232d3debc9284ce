#!/usr/bin/env python
"""Known speakers on real and generated dialogues: do reference clips name the right speakers?

For every file of a part (``--part tuning``: pyannote's two-speaker sample + generated dialogues;
``--part heldout``: generated dialogues with other seeds and sentences, see generate.py;
``--part original``: the sample + d1-d5; ``--part sample``: the sample alone, in seconds, nothing
generated):

* each speaker's **reference clip** is cut from the file's first half: that speaker's turns there,
  joined, at most 10 s, at least 2 s (a speaker with less has no clip);
* a **stranger's clip** is cut the same way from another file, from a voice that is not in this one;
* the **second half** is diarized by the kit's pipeline (``num_speakers`` = the true count there)
  and named with those clips through the endpoint's own code (``SpeakerVoices``,
  ``speaker_centroids``, ``match_speakers``).

A name is **right** when the speaker it went to is mostly (by exclusive speech) the clip's speaker,
**wrong** when it went to someone else, **missed** when it went to nobody although its speaker
talks in the second half. A file is all right when no name is wrong or missed and the stranger
names nobody. Diarizations and voice vectors are cached (eval/.cache/voices), so a threshold sweep
takes seconds:

    .venv/bin/python eval/known_speakers.py --part tuning --thresholds 0.4,0.5,0.6,0.7

The models come from ``--models-dir`` (the kit built by ../shared/real-models/build.sh; its
``pyannote-campp-3.1`` pipeline brings its own ``campp_embedding.py``, which the pipeline's loader
makes importable); ``python -m speaker_asr.testing.kit DIR`` builds a tiny random stand-in for it
(a smoke run: meaningless numbers). The generated parts need espeak-ng and the LibriVox pieces
that eval/evaluate.py cuts and caches in ``--cache-dir`` on its first run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

from data import build_dataset, load_sample, read_wav  # eval/ is sys.path[0] when this runs

SR = 16000
MIN_CLIP_S, MAX_CLIP_S = 2.0, 10.0


def voice_of(f) -> dict[str, str]:
    """Turn label -> the voice that speaks it (espeak voice, reader pitch, or the label itself)."""
    out = {}
    for u in f.utterances:
        out.setdefault(u.speaker, getattr(u, "source", None) or f"{f.id}/{u.speaker}")
    # the sample's turns (RTTM labels) are not the transcript's names: its voices are its own
    for _, _, label in f.turns:
        out.setdefault(label, f"{f.id}/{label}")
    return out


def first_half_clips(f, audio: np.ndarray) -> dict[str, np.ndarray]:
    half = len(audio) / SR / 2
    clips = {}
    for label in sorted({t[2] for t in f.turns}):
        # exclusive speech only: parts of the turn that no other turn overlaps
        parts = []
        for s, e, spk in f.turns:
            if spk != label or e > half:
                continue
            others = [(a, b) for a, b, x in f.turns if x != label and b > s and a < e]
            cuts, t = [], s
            for a, b in sorted(others):
                if a > t:
                    cuts.append((t, a))
                t = max(t, b)
            if t < e:
                cuts.append((t, e))
            parts += [audio[int(a * SR):int(b * SR)] for a, b in cuts if b - a >= 0.2]
        clip = np.concatenate(parts)[: int(MAX_CLIP_S * SR)] if parts else np.zeros(0, np.float32)
        if len(clip) >= MIN_CLIP_S * SR:
            clips[label] = clip
    return clips


def second_half_truth(f, duration: float) -> dict[str, float]:
    """Seconds each true speaker talks in the second half."""
    half = duration / 2
    out: dict[str, float] = {}
    for s, e, spk in f.turns:
        if e > half:
            out[spk] = out.get(spk, 0.0) + e - max(s, half)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", default="tuning", choices=("sample", "original", "tuning", "heldout"))
    ap.add_argument("--count", type=int, default=24, help="generated dialogues per part")
    ap.add_argument("--thresholds", default=None,
                    help="comma list of similarity thresholds (default: the server's default)")
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("REAL_MODELS_DIR", Path.home() / ".cache" / "real-models")))
    ap.add_argument("--cache-dir", type=Path, default=HERE / ".cache")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "known-speakers")
    ap.add_argument("--oracle", action="store_true",
                    help="the reference speaker turns instead of the pipeline's diarization (shows "
                         "what the naming does when the diarization is right)")
    args = ap.parse_args(argv)

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["PYANNOTE_METRICS_ENABLED"] = "false"
    pipeline_dir = args.models_dir / "pyannote-campp-3.1"
    from speaker_asr.attribution.naming import match_speakers
    from speaker_asr.settings import DEFAULT_SPEAKER_MATCH_THRESHOLD
    from speaker_asr.diarization import embeddings as E
    from speaker_asr.diarization.pipeline import diarize, load_diarization_pipeline

    thresholds = ([float(x) for x in args.thresholds.split(",")] if args.thresholds
                  else [DEFAULT_SPEAKER_MATCH_THRESHOLD])

    def no_transcriber():
        raise SystemExit(f"the LibriVox pieces are not in {args.cache_dir}: run eval/evaluate.py with "
                         "the same --cache-dir once (it cuts them, verified with Whisper base)")

    files = [load_sample(args.models_dir)] if args.part == "sample" else build_dataset(
        args.models_dir, args.cache_dir, no_transcriber, part=args.part, count=args.count,
        log=lambda *a: None)
    source = "".join((ROOT / p).read_text() for p in (
        "speaker_asr/diarization/embeddings.py", "speaker_asr/diarization/pipeline.py"))
    code_sha = hashlib.sha256(source.encode()).hexdigest()[:12]
    cache = args.cache_dir / "voices"
    cache.mkdir(parents=True, exist_ok=True)
    pipe = None
    started = time.perf_counter()

    audios = {f.id: read_wav(f.audio) for f in files}
    clips = {f.id: first_half_clips(f, audios[f.id]) for f in files}
    voices = {f.id: voice_of(f) for f in files}
    # strangers: the first clip (file order) of a voice this file does not have
    strangers = {}
    for f in files:
        mine = set(voices[f.id].values())
        for g in files:
            pick = next((lbl for lbl in clips[g.id] if voices[g.id][lbl] not in mine), None)
            if g.id != f.id and pick is not None:
                strangers[f.id] = (f"{g.id}/{pick}", clips[g.id][pick])
                break

    records = []
    for f in files:
        audio = audios[f.id]
        duration = len(audio) / SR
        truth = second_half_truth(f, duration)
        key = hashlib.sha256(audio.tobytes() + code_sha.encode() + (b"oracle" if args.oracle else b"")
                             ).hexdigest()[:16]
        path = cache / f"{f.id}-{key}.json"
        if path.exists():
            rec = json.loads(path.read_text())
        else:
            if pipe is None:
                pipe = load_diarization_pipeline(str(pipeline_dir), None)
                model = E.embedding_model(pipe)
            part = audio[len(audio) // 2:]
            half = duration / 2
            if args.oracle:
                from speaker_asr.attribution.speakers import exclusive_turns
                from speaker_asr.types import Turn

                turns = exclusive_turns([Turn(max(s - half, 0.0), e - half, f"found-{spk}")
                                         for s, e, spk in f.turns if e > half])
            else:
                d = diarize(pipe, part, num_speakers=len(truth))
                from speaker_asr.attribution.turns import speakers_alone

                turns = speakers_alone(d)
            centroids = E.speaker_centroids(model, part, turns)
            # which true speaker each found speaker mostly is (exclusive speech)
            overlap: dict[str, dict[str, float]] = {}
            for t in turns:
                for s, e, spk in f.turns:
                    o = min(e - half, t.end) - max(s - half, t.start)
                    if o > 0:
                        overlap.setdefault(t.speaker, {}).setdefault(spk, 0.0)
                        overlap[t.speaker][spk] += o
            refs = {lbl: E.embed_clip(model, c) for lbl, c in clips[f.id].items()}
            stranger = strangers.get(f.id)
            rec = {"file": f.id, "truth": truth,
                   "found": {s: {"true": max(o, key=o.get), "purity": o[max(o, key=o.get)] / sum(o.values())}
                             for s, o in overlap.items()},
                   "centroids": {s: None if v is None else v.tolist() for s, v in centroids.items()},
                   "references": {lbl: None if v is None else v.tolist() for lbl, v in refs.items()},
                   "stranger": None if stranger is None else
                   {"from": stranger[0], "vector": (lambda v: None if v is None else v.tolist())(
                       E.embed_clip(model, stranger[1]))}}
            path.write_text(json.dumps(rec))
        records.append(rec)

    rows = []
    for th in thresholds:
        for rec in records:
            refs = {lbl: v for lbl, v in rec["references"].items() if v is not None}
            named = dict(refs)
            if rec["stranger"] and rec["stranger"]["vector"] is not None:
                named["stranger"] = rec["stranger"]["vector"]
            matches = match_speakers(rec["centroids"], named, th)
            right = wrong = missed = 0
            stranger_named = False
            for m in matches:
                if m.name == "stranger":
                    stranger_named = m.speaker is not None
                    continue
                if m.speaker is None:
                    missed += rec["truth"].get(m.name, 0.0) > 0
                elif rec["found"].get(m.speaker, {}).get("true") == m.name:
                    right += 1
                else:
                    wrong += 1
            rows.append({"threshold": th, "file": rec["file"], "speakers": len(rec["truth"]),
                         "references": len(refs), "right": right, "wrong": wrong, "missed": missed,
                         "stranger_named": stranger_named,
                         "all_right": wrong == 0 and missed == 0 and not stranger_named,
                         "purity": round(min((x["purity"] for x in rec["found"].values()), default=0), 2),
                         "similarities": {m.name: m.similarity and round(m.similarity, 3) for m in matches}})

    lines = [f"# Known speakers: {args.part} part ({len(records)} files)"
             + (", oracle speaker turns" if args.oracle else ""), "",
             f"Run {time.strftime('%Y-%m-%d %H:%M')}, {time.perf_counter() - started:.0f} s. References: each "
             "speaker's exclusive speech in the first half (2-10 s); the second half diarized by the kit's "
             "CAM++ 3.1 pipeline with num_speakers given; one stranger's clip (a voice from another file) "
             "per file.", "",
             "| threshold | files all right | names right | wrong | missed | strangers named |",
             "|---:|---:|---:|---:|---:|---:|"]
    for th in thresholds:
        sel = [r for r in rows if r["threshold"] == th]
        lines.append(f"| {th:g} | {sum(r['all_right'] for r in sel)}/{len(sel)} | {sum(r['right'] for r in sel)} | "
                     f"{sum(r['wrong'] for r in sel)} | {sum(r['missed'] for r in sel)} | "
                     f"{sum(r['stranger_named'] for r in sel)}/{sum(1 for r in records if r['stranger'])} |")
    th = thresholds[0] if len(thresholds) == 1 else DEFAULT_SPEAKER_MATCH_THRESHOLD
    lines += ["", f"Per file at threshold {th:g} (purity: the least pure found speaker's share of its "
              "main true speaker):", "",
              "| file | speakers | clips | right | wrong | missed | stranger named | purity | similarities |",
              "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        if r["threshold"] == th:
            lines.append(f"| {r['file']} | {r['speakers']} | {r['references']} | {r['right']} | {r['wrong']} | "
                         f"{r['missed']} | {'yes' if r['stranger_named'] else 'no'} | {r['purity']:.2f} | "
                         f"{', '.join(f'{k} {v}' for k, v in r['similarities'].items())} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.part}{'-oracle' if args.oracle else ''}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
