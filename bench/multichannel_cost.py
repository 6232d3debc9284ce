#!/usr/bin/env python
"""What ``multichannel=true`` costs: time and memory of 2 and 4 channels against the same recording
downmixed (the default pipeline: ASR beside diarization), against one channel's ASR alone, and
against the channels decoded one window at a time (``batch_size`` 1) instead of in one batch.

The recording is one of the benchmark's inputs (``--input``, common.INPUTS: ``30s`` is the kit's
two-speaker sample, ``60s`` and longer the LibriVox clips and the sample joined), spread over the
channels: channel k holds every k-th stretch of it (so no two channels say the same), the others
bleeding in at -20 dB. Each configuration runs ``--repeats`` times in this process, alternating,
after one warm-up run; the table gives the median seconds and, from the warm-up, the peak
resident memory above what was resident before it (VmHWM reset before each run).

    .venv/bin/python bench/multichannel_cost.py --input 60s --repeats 3

The models are the kit's (``REAL_MODELS_DIR``): whisper tiny.en and its CAM++ 3.1 pipeline.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import sys
import time

import numpy as np

from common import (REAL, INPUTS, _read16k, fmt, get_input, machine, peak_rss_mb, reset_peak_rss,
                    setup_env, wav_bytes)

SR = 16_000


def channels_of(audio: np.ndarray, count: int) -> np.ndarray:
    """``(samples, count)``: channel k holds the k-th of ``count`` stretches of ``audio`` in turn
    (silence while the others talk), the others bleeding in at -20 dB."""
    own = np.zeros((len(audio), count), dtype=np.float32)
    piece = len(audio) // (count * 4)
    for i in range(0, len(audio), piece):
        own[i:i + piece, (i // piece) % count] = audio[i:i + piece]
    mixed = own + 0.1 * (own.sum(axis=1, keepdims=True) - own)
    return mixed / max(1.0, float(np.abs(mixed).max()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default="60s", choices=list(INPUTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--channels", default="2,4")
    args = ap.parse_args(argv)
    setup_env()
    from speaker_asr.endpoint import EndpointHandler
    from speaker_asr.settings import ModelSettings

    handler = EndpointHandler(settings=ModelSettings(
        asr_model=str(REAL / "whisper-tiny.en"),
        diarization_model=str(REAL / "pyannote-campp-3.1"), warmup=True))
    from speaker_asr.testing.memory import rss_mb

    loaded = rss_mb()
    path, _ = get_input(args.input)
    audio = _read16k(path)
    counts = [int(c) for c in args.channels.split(",")]
    runs = {"one channel, ASR only": (audio, {"multichannel": False}, "asr")}
    for n in counts:
        multi = channels_of(audio, n)
        runs[f"{n} channels downmixed, default"] = (multi.mean(axis=1), {}, "default")
        runs[f"{n} channels, multichannel"] = (multi, {"multichannel": True}, "multi")
        # the same, the channels' windows decoded one at a time instead of side by side
        runs[f"{n} channels, multichannel, batch_size 1"] = (multi, {"multichannel": True, "batch_size": 1},
                                                             "multi")
        runs[f"{n} channels, diarize_channels"] = (multi, {"multichannel": True, "diarize_channels": True},
                                                   "multi")

    def once(data: np.ndarray, parameters: dict, kind: str) -> float:
        started = time.perf_counter()
        if kind == "asr":  # one channel's ASR alone, as multichannel runs it per channel
            from speaker_asr.config import InferenceConfig

            config = InferenceConfig.from_request({}, handler.models.capabilities)
            with handler.models.asr_lane():
                handler.models.asr.transcribe(data, config, word_timestamps=True)
        else:
            handler({"inputs": base64.b64encode(wav_bytes(data)).decode(), "parameters": parameters})
        return time.perf_counter() - started

    times: dict[str, list[float]] = {name: [] for name in runs}
    peaks: dict[str, float] = {}
    for name, run in runs.items():  # warm-up, and each one's memory peak
        reset_peak_rss()
        before = rss_mb()
        once(*run)
        peaks[name] = max(0.0, (peak_rss_mb() or before) - before)
    for _ in range(args.repeats):
        for name, run in runs.items():
            times[name].append(once(*run))

    one = statistics.median(times["one channel, ASR only"])
    m = machine()
    print(f"multichannel cost: {args.input} ({len(audio) / SR:.1f} s of real speech), whisper tiny.en + the kit's CAM++ 3.1 "
          f"pipeline, median of {args.repeats}; {m.get('cpu_model')} (torch {m.get('cpu_capability', '?')}, "
          f"{m.get('torch_threads', '?')} threads); loaded models {loaded:.0f} MB")
    print()
    print("| run | median s | / one channel's ASR | peak MB added |")
    print("|---|---:|---:|---:|")
    for name in runs:
        med = statistics.median(times[name])
        print(f"| {name} | {fmt(med)} | {fmt(med / one)} | {peaks[name]:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
