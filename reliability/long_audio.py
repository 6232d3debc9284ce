"""Long audio end to end through the handler: wall time and memory.

    python reliability/long_audio.py --minutes 60            # the target
    python reliability/long_audio.py --minutes 2,5,10        # several lengths: memory growth per minute

Builds N minutes of audio -- real speech from $REAL_MODELS_DIR/audio (sample.wav and the LibriVox
clips, 0.5 s apart, repeated) when present, else synthetic two-pitch tones -- as a FLAC file (or
WAV with --format wav), then runs ``EndpointHandler(file bytes)`` in a fresh subprocess with the
real models when present (whisper-tiny.en + the pyannote-campp-3.1 pipeline) or the tiny random
ones (``--models tiny``). The subprocess reports:

* wall time of the request and the real-time factor;
* RSS after loading the models, the peak RSS (ru_maxrss, also read by the parent as the child's
  RUSAGE_CHILDREN peak), and the peak above the loaded models;
* for each stage -- decode, ASR, diarization (the last two run at the same time) -- when it ran
  and the highest RSS sampled (every 0.1 s) while it ran;
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
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from _common import REAL_ASR, REAL_AUDIO, REAL_PIPELINE, ROOT, SR, finish, peak_rss_mb, rss_mb, tiny_models

GAP_S = 0.5


# --------------------------------------------------------------------------- the audio


def speech_clips() -> list[np.ndarray]:
    """The real recordings, 16 kHz mono float32, or [] when absent."""
    import soundfile as sf

    from speaker_asr.audio.decode import decode_audio

    paths = []
    if (REAL_AUDIO / "sample.wav").exists():
        paths.append(REAL_AUDIO / "sample.wav")
    paths += sorted((REAL_AUDIO / "librivox").glob("*.wav")) if (REAL_AUDIO / "librivox").is_dir() else []
    clips = []
    for path in paths:
        try:
            clips.append(decode_audio(path.read_bytes()))
        except Exception as exc:  # a damaged file is skipped, not fatal
            print(f"skipping {path}: {exc}", file=sys.stderr)
    del sf
    return clips


def synthetic_clips() -> list[np.ndarray]:
    """Two alternating 'voices': 3 s tones at 180 and 320 Hz with a syllable-rate envelope."""
    t = np.arange(3 * SR) / SR
    envelope = 0.6 + 0.4 * np.sin(2 * np.pi * 4.0 * t)
    return [(0.3 * np.sin(2 * np.pi * f * t) * envelope).astype(np.float32) for f in (180.0, 320.0)]


def write_long_audio(path: Path, minutes: float, fmt: str) -> dict[str, Any]:
    """N minutes of the clips, cycled with 0.5 s gaps, streamed to ``path`` block by block."""
    import soundfile as sf

    clips = speech_clips()
    source = "real speech" if clips else "synthetic tones"
    clips = clips or synthetic_clips()
    gap = np.zeros(int(GAP_S * SR), np.float32)
    total = int(round(minutes * 60 * SR))
    written = 0
    subtype = "PCM_16"
    with sf.SoundFile(path, "w", samplerate=SR, channels=1, format=fmt.upper(), subtype=subtype) as f:
        i = 0
        while written < total:
            block = np.concatenate([clips[i % len(clips)], gap])[: total - written]
            f.write(block)
            written += len(block)
            i += 1
    return {"source": source, "clips": len(clips), "seconds": written / SR, "bytes": path.stat().st_size,
            "format": fmt}


# --------------------------------------------------------------------------- the child: one measured run


class RssSampler:
    """VmRSS every ``interval`` s: the overall peak and the peak while each stage ran."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.active: set[str] = set()
        self.stages: dict[str, dict[str, float]] = {}
        self.peak = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "RssSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> float:
        value = rss_mb()
        with self._lock:
            self.peak = max(self.peak, value)
            for name in self.active:
                stage = self.stages[name]
                stage["rss_peak_mb"] = max(stage["rss_peak_mb"], value)
        return value

    def wrap(self, name: str, fn):
        sampler = self

        def wrapped(*args, **kwargs):
            with sampler._lock:
                sampler.active.add(name)
                sampler.stages[name] = {"start_s": time.perf_counter() - T0, "rss_start_mb": rss_mb(),
                                        "rss_peak_mb": 0.0}
            try:
                return fn(*args, **kwargs)
            finally:
                value = sampler.sample()
                with sampler._lock:
                    sampler.active.discard(name)
                    stage = sampler.stages[name]
                    stage["end_s"] = time.perf_counter() - T0
                    stage["seconds"] = stage["end_s"] - stage["start_s"]
                    stage["rss_end_mb"] = value
        return wrapped


T0 = time.perf_counter()


def load_handler(models: str, work: Path):
    from speaker_asr.config import ModelSettings
    from speaker_asr.endpoint import EndpointHandler
    from speaker_asr.testing.tiny_models import TINY_MAX_NEW_TOKENS

    if models == "real":  # the pipeline's loader makes its folder's campp_embedding.py importable
        settings = ModelSettings(asr_model=str(REAL_ASR), assistant_model=None,
                                 diarization_model=str(REAL_PIPELINE))
    else:
        tiny = tiny_models(work)
        settings = ModelSettings(asr_model=str(tiny["whisper.en"]), assistant_model=None,
                                 diarization_model=str(tiny["pyannote"]), max_new_tokens=TINY_MAX_NEW_TOKENS)
    return EndpointHandler(settings=settings)


def child(args) -> int:
    global T0
    from speaker_asr import endpoint as handler_module

    if args.max_memory_gb:
        import resource

        # an allocation past the cap fails in this process instead of waking the OOM killer
        cap = int(args.max_memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    parameters = dict(p.split("=", 1) for p in args.param)
    from speaker_asr.serving.negotiation import coerce_value

    parameters = {k: coerce_value(v) for k, v in parameters.items()}
    result: dict[str, Any] = {"models": args.models, "stage": args.stage, "rss_start_mb": rss_mb(),
                              "parameters": parameters}
    started = time.perf_counter()
    h = load_handler(args.models, args.work)
    result["load_s"] = time.perf_counter() - started
    gc.collect()
    result["rss_loaded_mb"] = rss_mb()
    result["peak_rss_at_load_mb"] = peak_rss_mb()
    data = Path(args.audio).read_bytes()
    result["input_bytes"] = len(data)
    sampler = RssSampler().start()
    import resource
    import torch

    result["torch_threads"] = torch.get_num_threads()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    T0 = time.perf_counter()
    try:
        measure(args, h, handler_module, sampler, data, parameters, result)
    except Exception as exc:  # e.g. an allocation past --max-memory-gb: report what was reached
        result["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    result["wall_s"] = time.perf_counter() - T0
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    sampler.stop()
    result["stages"] = sampler.stages
    result["peak_rss_mb"] = peak_rss_mb()
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
        h.asr.transcribe = sampler.wrap("asr", h.asr.transcribe)
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

        audio = preprocess_inputs(data, max_duration_s=h.settings.max_audio_seconds)
        result["duration_s"] = len(audio) / SR
        if args.stage == "decode":
            del audio
            audio = sampler.wrap("decode", preprocess_inputs)(data, max_duration_s=h.settings.max_audio_seconds)
        else:
            del data
            gc.collect()
            result["rss_with_audio_mb"] = sampler.sample()
            if args.stage == "asr":
                config = InferenceConfig.from_request(parameters, h.capabilities)
                out = sampler.wrap("asr", h.asr.transcribe)(audio, config, word_timestamps=True)
                result["words"] = len(out.text.split())
            else:
                out = sampler.wrap("diarization", diarize)(h.diarization, audio)
                result["speakers"] = len({t.speaker for t in out.turns})


# --------------------------------------------------------------------------- the parent


def run_one(minutes: float, models: str, fmt: str, stage: str, work: Path, limit_s: float,
            extra: list[str]) -> dict[str, Any]:
    import resource

    work.mkdir(parents=True, exist_ok=True)
    audio = work / f"long-{minutes:g}min.{fmt}"
    info = write_long_audio(audio, minutes, fmt)
    out = work / f"long-{minutes:g}min-{stage}.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
               TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--audio", str(audio), "--models", models,
           "--stage", stage, "--work", str(work), "--out", str(out), *extra]
    started = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit_s)
        returncode, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired:
        returncode, stderr = None, ""
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result: dict[str, Any] = {"minutes": minutes, "audio": info, "subprocess_s": elapsed, "returncode": returncode}
    # RUSAGE_CHILDREN's ru_maxrss is the largest of any waited-for child so far
    result["child_ru_maxrss_mb"] = after / 1024 if after > before else None
    if returncode is None:
        result["error"] = f"timed out after {limit_s:.0f} s"
    elif returncode != 0 or not out.exists():
        result["error"] = f"exit code {returncode}: {stderr[-3000:]}"
    else:
        result.update(json.loads(out.read_text()))
        if "error" in result:
            result["error"] = (f"{result['error']} (after {result['wall_s']:.0f} s, peak RSS "
                               f"{result['peak_rss_mb']:.0f} MB)")
    audio.unlink(missing_ok=True)
    return result


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
    parser.add_argument("--models", choices=("auto", "real", "tiny"), default="auto")
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
    # the measured subprocess
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--audio", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    minutes = [float(m) for m in args.minutes.split(",") if m.strip()]
    if not minutes or any(not 0 < m <= 240 for m in minutes):
        parser.error("--minutes: lengths between 0 and 240")
    models = args.models
    if models == "auto":
        models = "real" if (REAL_ASR / "config.json").exists() and (REAL_PIPELINE / "config.yaml").exists() else "tiny"
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
