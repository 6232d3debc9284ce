"""Long audio, stage by stage: wall time and peak memory of each of the endpoint's steps.

    .venv/bin/python bench/long_audio.py                                  # 2 minutes, every stage
    .venv/bin/python bench/long_audio.py --minutes 10,60 --json /tmp/long.json
    .venv/bin/python bench/long_audio.py --minutes 10,60,240 --stages diarization

For each length: N minutes of real speech (speaker_asr/testing/long_audio.py, which
reliability/long_audio.py builds its audio with: the kit's sample and LibriVox clips, 0.5 s apart,
cycled; synthetic tones where the kit has no audio) written as FLAC, then a **fresh subprocess**
loads the handler (``EndpointHandler``: whisper-tiny.en + pyannote-campp-3.1 from
``$REAL_MODELS_DIR``; ``--models resnet34``: the same whisper-tiny.en and the 3.1 recipe with
its WeSpeaker ResNet34, random weights, production's compute; the tiny random models with
``--models tiny``) and runs the endpoint's
steps **one after the other** (the handler runs the ASR and the diarization side by side; here
each stage has the process to itself, so its time and memory are its own):

* ``decode``: the file's bytes -> 16 kHz float32 (``speaker_asr.audio.inputs.preprocess_inputs``);
* ``asr``: the handler's transcriber with word timestamps, alone (``h.models.asr.transcribe``);
* inside ``speaker_asr.diarization.pipeline.diarize``, marked by pyannote's progress hook and a
  wrapper around the pipeline's ``clustering``: ``segmentation`` (the segmentation model over
  every window, binarization and the per-frame speaker count: up to pyannote's
  ``speaker_counting`` step), ``embeddings`` (up to the clustering call), ``clustering`` (that
  call, exactly), ``reconstruction`` (everything after it to the end of ``diarize()``: the
  discrete diarization, the annotations, exclusive turns, centroids);
* ``attribution``: what ``speaker_asr/pipeline.py`` does with the transcript and the diarization
  from there (``diarize_speakers``' speaker labels, ``attribute``);
* ``voices``: the sentences' voices checking the attributed words' speakers (``SENTENCE_VOICES``:
  ``speakers_by_sentence`` with the diarization's embedding model on each sentence's audio).

``--stages diarization`` runs decode and the four diarization stages only (the lengths where end
to end takes too long). Memory: ``speaker_asr/testing/memory.py``'s sampler thread (RSS every
0.1 s) keeps the highest RSS while each stage ran, exact where ``ru_maxrss`` rose during it;
``ru_maxrss`` is recorded too. Prints a markdown table, one row per length, and a last row with
the growth per audio hour (least-squares slopes over the lengths run); writes the JSON to
``--json`` (default ``bench/results/long_audio-<time>.json``) and the table beside it (``.md``).
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np

from common import REAL, RESULTS, ROOT, SR, loadavg, machine, setup_env
from speaker_asr.testing.long_audio import (REAL_ASR, REAL_PIPELINE, add_child_arguments, model_settings,
                                            parse_minutes, resolve_models, run_measured, write_long_audio)
from speaker_asr.testing.memory import RssSampler, cap_address_space, max_rss_mb, rss_mb

DIARIZATION_STAGES = ("segmentation", "embeddings", "clustering", "reconstruction")
STAGES = {"all": ("decode", "asr", *DIARIZATION_STAGES, "attribution", "voices"),
          "diarization": ("decode", *DIARIZATION_STAGES)}
LABELS = {"decode": "decode", "asr": "ASR", "segmentation": "segmentation", "embeddings": "embeddings",
          "clustering": "clustering", "reconstruction": "reconstruction", "attribution": "attribution",
          "voices": "sentence voices"}


# --------------------------------------------------------------------------- the child: one length


class DiarizationStages:
    """pyannote's steps inside one ``diarize()`` call as stages of ``sampler``: ``segmentation``
    from the call to pyannote's ``speaker_counting`` hook, ``embeddings`` from there to the
    clustering call, ``clustering`` that call (the pipeline's ``clustering`` wrapped on the
    instance), ``reconstruction`` from its return to the end of ``diarize()``; then the stage
    ``after`` begins (None: none). ``events``: each hook step's calls and the seconds of its
    first and last call. ``on_stage_end`` is called after each stage ends."""

    def __init__(self, sampler: RssSampler, after: Optional[str] = None, on_stage_end=lambda: None):
        self.sampler, self.after, self.on_stage_end = sampler, after, on_stage_end
        self.current: Optional[str] = None
        self.events: dict[str, dict[str, float]] = {}

    def switch(self, name: Optional[str]) -> None:
        if self.current is not None:
            self.sampler.end(self.current)
            self.on_stage_end()
        self.current = name
        if name is not None:
            self.sampler.begin(name)

    def hook(self, step: str, artefact=None, file=None, total=None, completed=None) -> None:
        now = time.perf_counter() - self.sampler.t0
        event = self.events.setdefault(step, {"calls": 0, "first_s": now})
        event["calls"] += 1
        event["last_s"] = now
        if step == "speaker_counting":
            self.switch("embeddings")

    def diarize(self, pipeline, audio: np.ndarray, **kwargs):
        """``speaker_asr.diarization.pipeline.diarize`` with the stages marked."""
        from speaker_asr.diarization.pipeline import diarize

        clustering = pipeline.clustering

        def timed_clustering(*args, **kw):
            self.switch("clustering")
            try:
                return clustering(*args, **kw)
            finally:
                self.switch("reconstruction")

        # a plain attribute of the instance: found before pyannote's sub-pipeline of that name
        pipeline.clustering = timed_clustering
        self.switch("segmentation")
        kwargs.pop("hook", None)  # the request's progress hook (none here): this one marks the stages
        try:
            return diarize(pipeline, audio, hook=self.hook, **kwargs)
        finally:
            self.switch(self.after)
            pipeline.__dict__.pop("clustering", None)  # the sub-pipeline again (del would remove it)


def run_stages(which: str, h, audio_path: Path, sampler: RssSampler, result: dict[str, Any], save) -> None:
    """The stages of ``which`` (all | diarization) one after the other, on ``sampler``; ``save()``
    after each."""
    from speaker_asr import pipeline as steps
    from speaker_asr.attribution.response import attribute
    from speaker_asr.attribution.sentence_voices import speakers_by_sentence
    from speaker_asr.audio.inputs import preprocess_inputs
    from speaker_asr.config import InferenceConfig

    config = InferenceConfig.from_request({}, h.models.capabilities)  # a request's defaults
    data = audio_path.read_bytes()
    result["input_bytes"] = len(data)
    audio = sampler.wrap("decode", preprocess_inputs)(data, max_duration_s=h.models.settings.max_audio_seconds)
    del data
    result["duration_s"] = len(audio) / SR
    save()
    if which == "diarization":
        stages = DiarizationStages(sampler, on_stage_end=save)
        found = stages.diarize(h.models.diarizer.pipeline, audio)
        result["speakers"] = len({t.speaker for t in found.turns})
        result["diarization_events"] = stages.events
        return
    transcript = sampler.wrap("asr", h.models.asr.transcribe)(audio, config, word_timestamps=True)
    result["words"] = len(transcript.words or [])
    save()
    stages = DiarizationStages(sampler, after="attribution", on_stage_end=save)
    steps.diarize = stages.diarize  # what diarize_speakers calls (a fresh process: never restored)
    # what Pipeline runs on the two: diarize_speakers (diarize(), then the speakers' labels), attribute()
    found = steps.diarize_speakers(h.models.diarizer.pipeline, h.models.diarizer.voices, audio, config, with_voices=False)
    attributed = attribute(transcript, len(audio) / SR, found, with_words=True)
    sampler.end("attribution")
    save()
    # the step SENTENCE_VOICES adds to the attribution, on its words, with the endpoint's span
    # embedder (the diarization's embedding model on each sentence's audio)
    spans_embedded: list[int] = []

    def embed(spans: list[tuple[float, float]]) -> list:
        spans_embedded.append(len(spans))
        return h.models.diarizer.embed_spans(audio, spans)

    words = [w for s in attributed.segments for w in s.words]
    voiced = sampler.wrap("voices", speakers_by_sentence)(words, embed, config.num_speakers or config.max_speakers,
                                                         {t.speaker for t in found.turns}).words
    result["sentences_embedded"] = sum(spans_embedded)
    result["words_moved_by_voices"] = sum(a.speaker != b.speaker for a, b in zip(words, voiced))
    result["speakers"] = len({t.speaker for t in found.turns})
    result["segments"] = len(attributed.segments)
    result["diarization_events"] = stages.events


def child(args) -> int:
    setup_env()
    if args.max_memory_gb:
        cap_address_space(args.max_memory_gb)
    import resource

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from speaker_asr.endpoint import EndpointHandler

    result: dict[str, Any] = {"models": args.models, "stages_run": args.stages, "machine": machine(),
                              "rss_start_mb": rss_mb()}
    started = time.perf_counter()
    h = EndpointHandler(settings=model_settings(args.models, REAL, args.work))
    result["load_s"] = time.perf_counter() - started
    gc.collect()
    result["rss_loaded_mb"] = rss_mb()
    result["ru_maxrss_loaded_mb"] = max_rss_mb()
    result["torch_threads"] = torch.get_num_threads()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    sampler = RssSampler().start()

    def save(final: bool = False) -> None:
        """The result so far, to --out (atomically): a run stopped by its time limit still
        reports the stages it finished."""
        after = resource.getrusage(resource.RUSAGE_SELF)
        result["cpu_s"] = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
        stages = sampler.snapshot()
        result["stages"] = {name: stages[name] for name in STAGES[args.stages] if name in stages}
        ended = [s for s in stages.values() if "end_s" in s]
        if ended:
            result["wall_s"] = max(s["end_s"] for s in ended) - min(s["start_s"] for s in stages.values())
        result["ru_maxrss_mb"] = max_rss_mb()
        result["peak_rss_sampled_mb"] = sampler.peak
        # the process's peak after loading: ru_maxrss where it rose (exact), else the highest sample
        rose = result["ru_maxrss_mb"] > result["ru_maxrss_loaded_mb"]
        result["peak_rss_mb"] = max([sampler.peak, result["ru_maxrss_mb"] if rose else 0.0]
                                    + [s["rss_peak_mb"] for s in ended])
        result["peak_above_loaded_mb"] = result["peak_rss_mb"] - result["rss_loaded_mb"]
        if final and result.get("duration_s") and "wall_s" in result and "error" not in result:
            result["rtf"] = result["wall_s"] / result["duration_s"]
        out = Path(args.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2, default=str))
        tmp.replace(out)

    try:
        run_stages(args.stages, h, Path(args.audio), sampler, result, save)
    except Exception as exc:  # e.g. an allocation past --max-memory-gb: report what was reached
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        for name in list(sampler.active):
            sampler.end(name)
    sampler.stop()
    save(final=True)
    return 0


# --------------------------------------------------------------------------- the parent


def run_one(minutes: float, args, models: str) -> dict[str, Any]:
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    audio = work / f"long-{minutes:g}min.{args.format}"
    info = write_long_audio(audio, minutes, args.format, REAL / "audio")
    out = work / f"long-{minutes:g}min-{args.stages}.json"
    limit_s = 60 * (args.limit_minutes or max(30.0, 3 * minutes))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--audio", str(audio), "--models", models,
           "--stages", args.stages, "--work", str(work), "--out", str(out),
           f"--max-memory-gb={args.max_memory_gb}", f"--threads={args.threads or 0}"]
    try:
        return {"minutes": minutes, "audio": info, **run_measured(cmd, out, limit_s, cwd=ROOT)}
    finally:
        audio.unlink(missing_ok=True)


def slope_per_hour(points: list[tuple[float, float]]) -> Optional[float]:
    """Least-squares slope of y against audio minutes, per audio hour; None below two lengths."""
    if len({x for x, _ in points}) < 2:
        return None
    x, y = np.array(points, dtype=float).T
    return float(np.polyfit(x / 60.0, y, 1)[0])


def growth(runs: list[dict[str, Any]], stages: tuple[str, ...]) -> dict[str, Optional[float]]:
    """Seconds and MB per audio hour: each stage's time and peak, the total time, the peak and the
    peak above the loaded models."""
    done = [r for r in runs if "error" not in r]
    out: dict[str, Optional[float]] = {}
    for name in stages:
        have = [r for r in done if name in r.get("stages", {})]
        out[f"{name}_s"] = slope_per_hour([(r["minutes"], r["stages"][name]["seconds"]) for r in have])
        out[f"{name}_mb"] = slope_per_hour([(r["minutes"], r["stages"][name]["rss_peak_mb"]) for r in have])
    for key in ("wall_s", "peak_rss_mb", "peak_above_loaded_mb"):
        out[key] = slope_per_hour([(r["minutes"], r[key]) for r in done if key in r])
    return out


def secs(x: Optional[float], sign: bool = False) -> str:
    if x is None:
        return "–"
    digits = 2 if abs(x) < 10 else 1 if abs(x) < 1000 else 0
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def mb(x: Optional[float], sign: bool = False) -> str:
    return "–" if x is None else f"{x:+.0f}" if sign else f"{x:.0f}"


def header_cells(stages: tuple[str, ...]) -> list[str]:
    return (["minutes"] + [f"{LABELS[s]} s / MB" for s in stages]
            + ["total s", "RTF", "loaded MB", "peak MB", "peak above loaded MB"])


def table(runs: list[dict[str, Any]], stages: tuple[str, ...]) -> list[str]:
    """The markdown table: one row per length, then the growth per audio hour."""
    cells = header_cells(stages)
    lines = ["| " + " | ".join(cells) + " |", "|" + "|".join("---:" for _ in cells) + "|"]
    for r in runs:
        row = [f"{r['minutes']:g}"]
        for name in stages:
            s = r.get("stages", {}).get(name)
            row.append(f"{secs(s['seconds'])} / {mb(s['rss_peak_mb'])}" if s and "seconds" in s else "–")
        failed = "error" in r
        row += ["failed" if failed else secs(r.get("wall_s")), "–" if failed or "rtf" not in r else f"{r['rtf']:.3f}",
                mb(r.get("rss_loaded_mb")), mb(r.get("peak_rss_mb")), mb(r.get("peak_above_loaded_mb"))]
        lines.append("| " + " | ".join(row) + " |")
    g = growth(runs, stages)
    row = ["per audio hour"]
    for name in stages:
        s, m = g[f"{name}_s"], g[f"{name}_mb"]
        row.append("–" if s is None else f"{secs(s, True)} / {mb(m, True)}")
    row += [secs(g["wall_s"], True), "–", "–", mb(g["peak_rss_mb"], True), mb(g["peak_above_loaded_mb"], True)]
    lines.append("| " + " | ".join(row) + " |")
    return lines


def voices_share(run: dict[str, Any]) -> Optional[float]:
    """The sentence voices' time over the diarization's (its four stages), where both ran."""
    stages = run.get("stages", {})
    if "seconds" not in stages.get("voices", {}) or any("seconds" not in stages.get(n, {})
                                                        for n in DIARIZATION_STAGES):
        return None
    return stages["voices"]["seconds"] / sum(stages[n]["seconds"] for n in DIARIZATION_STAGES)


def code_version() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" + local changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def report(runs: list[dict[str, Any]], args, models: str, started: datetime, load: tuple) -> str:
    stages = STAGES[args.stages]
    done = [r for r in runs if "machine" in r]
    m = done[0]["machine"] if done else machine()
    threads = done[0].get("torch_threads") if done else m.get("torch_threads")
    model_names = {"real": f"{REAL_ASR} + {REAL_PIPELINE} from {REAL}",
                   "resnet34": f"{REAL_ASR} + the 3.1 recipe as production runs it (real segmentation-3.0, "
                               "WeSpeaker ResNet34 with random weights: production's compute, meaningless "
                               "speakers)"}.get(models, "the tiny random models (numbers meaningless)")
    source = runs[0]["audio"]["source"] if runs else "–"
    lines = [
        "# Long audio, per stage (bench/long_audio.py)", "",
        f"Run {started.strftime('%Y-%m-%d %H:%M UTC')}, code {code_version()}: "
        f"`python bench/long_audio.py {shlex.join(args.argv)}`",
        f"CPU: {m.get('cpu_model')} ({m.get('nproc')} cores; torch CPU capability {m.get('cpu_capability')}, "
        f"torch on {threads} thread(s)); torch {m.get('torch')}, transformers {m.get('transformers')}, "
        f"pyannote.audio {m.get('pyannote.audio')}",
        f"Models: {model_names}. Audio: {source}, {args.format.upper()}. Stages one after the other in a "
        f"fresh process per length ({'every stage' if args.stages == 'all' else 'decode and diarization only'}); "
        f"load average {load[0]:.2f} at the start, {load[1]:.2f} at the end.",
        "",
        *table(runs, stages),
        "",
        "s / MB: the stage's wall time and the highest RSS while it ran. total s: first stage's start to "
        "the last one's end; RTF: total / audio duration. loaded MB: RSS with the models loaded, before "
        "the request; peak MB: the highest RSS after that (ru_maxrss where it rose); per audio hour: "
        "least-squares slope over the lengths run (two or more).",
        "",
    ]
    for r in runs:
        facts = [f"{r[k]} {k}" for k in ("words", "speakers") if k in r]
        facts += [f"models loaded in {r['load_s']:.1f} s"] if "load_s" in r else []
        facts += [f"CPU {r['cpu_s']:.1f} s in {r['wall_s']:.1f} s of stages"] if "cpu_s" in r and "wall_s" in r else []
        share = voices_share(r)
        facts += [f"sentence voices {100 * share:.1f} % of the diarization's time "
                  f"({r['sentences_embedded']} sentences embedded, {r['words_moved_by_voices']} words moved)"
                  ] if share is not None else []
        lines.append(f"* {r['minutes']:g} min: " + ", ".join(facts) + (f"; **failed**: {r['error'][-800:]}"
                                                                       if "error" in r else ""))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", default="2", help="audio lengths in minutes, comma-separated (at most 240)")
    parser.add_argument("--stages", choices=tuple(STAGES), default="all",
                        help="all: every stage; diarization: decode and the diarization's stages only")
    parser.add_argument("--models", choices=("auto", "real", "resnet34", "tiny"), default="auto",
                        help=f"real: $REAL_MODELS_DIR's {REAL_ASR} + {REAL_PIPELINE}; resnet34: "
                             f"{REAL_ASR} + the 3.1 recipe's WeSpeaker ResNet34 (random weights, the "
                             "same compute); tiny: random; auto: real where present")
    parser.add_argument("--format", choices=("flac", "wav"), default="flac")
    parser.add_argument("--limit-minutes", type=float, default=0,
                        help="time limit of each length's run (0: 3x the audio length, at least 30 min)")
    parser.add_argument("--max-memory-gb", type=float, default=0,
                        help="address-space cap of the measured process (0: none)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-long-audio",
                        help="the audio files (deleted after each run) and each run's JSON")
    parser.add_argument("--json", type=Path, help="the results (default bench/results/long_audio-<time>.json; "
                                                  "the table goes beside it as .md)")
    add_child_arguments(parser)  # the measured subprocess
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.child:
        return child(args)
    minutes = parse_minutes(parser, args.minutes)
    models = resolve_models(args.models, REAL)
    started = datetime.now(timezone.utc)
    load_start = loadavg()[0]
    runs = []
    for m in minutes:
        print(f"[{time.strftime('%H:%M:%S')}] {m:g} min, stages {args.stages}, {models} models ...",
              file=sys.stderr, flush=True)
        runs.append(run_one(m, args, models))
    text = report(runs, args, models, started, (load_start, loadavg()[0]))
    print(text, flush=True)
    out = args.json or RESULTS / f"long_audio-{started.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"script": "bench/long_audio.py", "argv": sys.argv[1:], "models": models,
                               "stages": args.stages, "runs": runs,
                               "growth_per_hour": growth(runs, STAGES[args.stages])}, indent=2, default=str))
    out.with_suffix(".md").write_text(text + "\n")
    print(f"\nJSON: {out}", file=sys.stderr)
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
