"""Long audio end to end through the handler: wall time and memory.

    python reliability/long_audio.py --minutes 60            # the target
    python reliability/long_audio.py --minutes 2,5,10        # several lengths: memory growth per minute

Builds N minutes of audio -- real speech from $REAL_MODELS_DIR/audio (sample.wav and the LibriVox
clips, 0.5 s apart, repeated) when present, else synthetic two-pitch tones -- as a FLAC file (or
WAV with --format wav; speaker_asr/testing/long_audio.py, which bench/long_audio.py uses too),
then runs ``EndpointHandler(file bytes)`` in a fresh subprocess with the real models when present
(whisper-tiny.en + the pyannote-campp-3.1 pipeline) or the tiny random ones (``--models tiny``).
The subprocess reports:

* wall time of the request and the real-time factor;
* RSS after loading the models, the peak RSS (ru_maxrss, also read by the parent as the child's
  RUSAGE_CHILDREN peak), and the peak above the loaded models;
* for each stage -- decode, ASR, diarization (the last two run at the same time) -- when it ran
  and the highest RSS while it ran (speaker_asr/testing/memory.py's sampler: every 0.1 s, exact
  where ru_maxrss rose during the stage);
* with ``--stage decode|asr|diarization`` that stage alone on the decoded audio, to attribute the
  memory exactly.

Several lengths give the growth of the peak per audio minute and its projection to 60 minutes
and to 4 hours (MAX_AUDIO_SECONDS's default). Prints one line per length:

    long_audio: minutes=10 models=real wall=...s rtf=... peak_rss=...MB above_loaded=...MB
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from _common import REAL, REAL_AUDIO, ROOT, SR, finish
from speaker_asr.testing.long_audio import (add_child_arguments, model_settings, parse_minutes, resolve_models,
                                             run_measured, write_long_audio)
from speaker_asr.testing.memory import RssSampler, cap_address_space, max_rss_mb, rss_mb


# --------------------------------------------------------------------------- the child: one measured run


def child(args) -> int:
    from speaker_asr import endpoint as handler_module

    if args.max_memory_gb:
        cap_address_space(args.max_memory_gb)
    from speaker_asr.text_parameters import parameters_from_text

    parameters = parameters_from_text(p.split("=", 1) for p in args.param)
    result: dict[str, Any] = {"models": args.models, "stage": args.stage, "rss_start_mb": rss_mb(),
                              "parameters": parameters}
    started = time.perf_counter()
    h = handler_module.EndpointHandler(settings=model_settings(args.models, REAL, args.work))
    result["load_s"] = time.perf_counter() - started
    gc.collect()
    result["rss_loaded_mb"] = rss_mb()
    result["peak_rss_at_load_mb"] = max_rss_mb()
    data = Path(args.audio).read_bytes()
    result["input_bytes"] = len(data)
    import resource
    import torch

    result["torch_threads"] = torch.get_num_threads()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    sampler = RssSampler().start()
    try:
        measure(args, h, handler_module, sampler, data, parameters, result)
    except Exception as exc:  # e.g. an allocation past --max-memory-gb: report what was reached
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    result["wall_s"] = time.perf_counter() - sampler.t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    sampler.stop()
    result["stages"] = sampler.stages
    result["peak_rss_mb"] = max_rss_mb()
    result["peak_rss_sampled_mb"] = sampler.peak
    result["peak_above_loaded_mb"] = result["peak_rss_mb"] - result["rss_loaded_mb"]
    if result.get("duration_s") and "error" not in result:
        result["rtf"] = result["wall_s"] / result["duration_s"]
    Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    return 0


def measure(args, h, handler_module, sampler: RssSampler, data: bytes, parameters: dict,
            result: dict[str, Any]) -> None:
    if args.stage == "all":
        # attribute time and memory to the stages the handler runs
        handler_module.preprocess_inputs = sampler.wrap("decode", handler_module.preprocess_inputs)
        from speaker_asr import pipeline as steps  # where the handler's steps call diarize

        steps.diarize = sampler.wrap("diarization", steps.diarize)
        h.models.asr.transcribe = sampler.wrap("asr", h.models.asr.transcribe)
        response = sampler.wrap("request", h)({"inputs": data, "parameters": parameters})
        result["duration_s"] = response.get("duration")
        result["words"] = len(response.get("text", "").split())
        result["chunks"] = len(response.get("chunks", []))
        result["speakers"] = len({s.get("speaker") for s in response.get("speakers", [])})
        result["warnings"] = response.get("warnings")
        result["text_head"] = response.get("text", "")[:160]
    else:
        from speaker_asr.config import InferenceConfig
        from speaker_asr.diarization.pipeline import diarize
        from speaker_asr.audio.inputs import preprocess_inputs

        audio = preprocess_inputs(data, max_duration_s=h.models.settings.max_audio_seconds)
        result["duration_s"] = len(audio) / SR
        if args.stage == "decode":
            del audio
            audio = sampler.wrap("decode", preprocess_inputs)(data, max_duration_s=h.models.settings.max_audio_seconds)
        else:
            del data
            gc.collect()
            result["rss_with_audio_mb"] = sampler.sample()
            if args.stage == "asr":
                config = InferenceConfig.from_request(parameters, h.models.capabilities)
                out = sampler.wrap("asr", h.models.asr.transcribe)(audio, config, word_timestamps=True)
                result["words"] = len(out.text.split())
            else:
                out = sampler.wrap("diarization", diarize)(h.models.diarizer.pipeline, audio)
                result["speakers"] = len({t.speaker for t in out.turns})


# --------------------------------------------------------------------------- the parent


def run_one(minutes: float, models: str, fmt: str, stage: str, work: Path, limit_s: float,
            extra: list[str]) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    audio = work / f"long-{minutes:g}min.{fmt}"
    info = write_long_audio(audio, minutes, fmt, REAL_AUDIO)
    out = work / f"long-{minutes:g}min-{stage}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--audio", str(audio), "--models", models,
           "--stage", stage, "--work", str(work), "--out", str(out), *extra]
    try:
        return {"minutes": minutes, "audio": info, **run_measured(cmd, out, limit_s, cwd=ROOT)}
    finally:
        audio.unlink(missing_ok=True)


def fit(results: list[dict[str, Any]]) -> Optional[dict[str, float]]:
    """Least-squares line of the peak above the loaded models against audio minutes."""
    points = [(r["minutes"], r["peak_above_loaded_mb"]) for r in results if "peak_above_loaded_mb" in r]
    if len(points) < 2:
        return None
    x, y = np.array(points).T
    slope, intercept = np.polyfit(x, y, 1)
    return {"mb_per_minute": float(slope), "intercept_mb": float(intercept),
            "projected_60min_above_loaded_mb": float(intercept + 60 * slope),
            "projected_240min_above_loaded_mb": float(intercept + 240 * slope)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", default="60", help="audio length(s) in minutes, comma-separated")
    parser.add_argument("--models", choices=("auto", "real", "resnet34", "tiny"), default="auto",
                        help="real: the kit's tiny.en + CAM++ pipeline; resnet34: tiny.en + the 3.1 "
                             "recipe's WeSpeaker ResNet34 (random weights: production's compute)")
    parser.add_argument("--format", choices=("flac", "wav"), default="flac")
    parser.add_argument("--stage", choices=("all", "decode", "asr", "diarization"), default="all")
    parser.add_argument("--limit-minutes", type=float, default=45, help="time limit of each run")
    parser.add_argument("--max-memory-gb", type=float, default=12,
                        help="address-space cap of the measured process (0: none): past it an allocation "
                             "fails there instead of the OOM killer picking a process on this machine")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a request parameter, e.g. batch_size=4 (repeatable)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "asr-reliability")
    parser.add_argument("--json", help="write the results here")
    add_child_arguments(parser)  # the measured subprocess
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    minutes = parse_minutes(parser, args.minutes)
    models = resolve_models(args.models, REAL)
    results = []
    for m in minutes:
        extra = [f"--max-memory-gb={args.max_memory_gb}"] + [f"--param={p}" for p in args.param]
        r = run_one(m, models, args.format, args.stage, args.work, args.limit_minutes * 60, extra)
        results.append(r)
        if "error" in r:
            print(f"long_audio: minutes={m:g} models={models} stage={args.stage} FAILED: {r['error'][-500:]}", flush=True)
            continue
        stages = " ".join(f"{name}={s['seconds']:.0f}s/{s['rss_peak_mb']:.0f}MB"
                          for name, s in r.get("stages", {}).items() if "seconds" in s)
        print(f"long_audio: minutes={m:g} models={models} stage={args.stage} source={r['audio']['source']!r} "
              f"wall={r['wall_s']:.1f}s rtf={r.get('rtf', float('nan')):.3f} load={r['load_s']:.1f}s "
              f"rss_loaded={r['rss_loaded_mb']:.0f}MB peak_rss={r['peak_rss_mb']:.0f}MB "
              f"above_loaded={r['peak_above_loaded_mb']:.0f}MB words={r.get('words')} speakers={r.get('speakers')} "
              f"[{stages}]", flush=True)
    line = fit(results)
    ok = all("error" not in r for r in results)
    done = [r for r in results if "error" not in r]
    biggest = max(done, key=lambda r: r["minutes"]) if done else None
    ran = ", ".join(f"{r['minutes']:g}" for r in done) or "nothing"
    summary = (f"ran {ran} min with {models} models; "
               + (f"longest {biggest['minutes']:g} min: wall={biggest['wall_s']:.0f}s peak_rss={biggest['peak_rss_mb']:.0f}MB "
                  f"above_loaded={biggest['peak_above_loaded_mb']:.0f}MB" if biggest else "")
               + (f"; growth {line['mb_per_minute']:.1f} MB/min -> 60 min ~{line['projected_60min_above_loaded_mb']:.0f}MB, "
                  f"240 min ~{line['projected_240min_above_loaded_mb']:.0f}MB above loaded" if line else ""))
    return finish("long_audio", summary, {"models": models, "stage": args.stage, "runs": results, "fit": line},
                  args.json, ok)


if __name__ == "__main__":
    raise SystemExit(main())
