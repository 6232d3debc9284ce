"""Seeded fuzzing of ``speaker_asr.audio.decode.decode_audio``: random bytes and mutated audio files.

    python reliability/fuzz_decoder.py --inputs 2000 --seed 0 [--workers 2] [--save DIR]

Every input is decoded in a worker process (its own process group, 4 GiB address-space limit)
with ``max_duration_s=60`` under a per-input time limit, and lands in one bucket:

* decoded  -- audio came back and is sane: float32, 1-D, finite, within [-1, 1], at most 61 s;
* refused  -- ``AudioDecodeError`` (the server answers 400 with its message);
* crash    -- any other exception (MemoryError included): the server would answer 500;
* bad output -- decoded, but not sane as above;
* hard crash -- the worker died (segfault, abort, killed);
* timeout  -- no answer within ``--timeout`` seconds (the worker and its ffmpeg are killed).

Inputs: random bytes; audio magic numbers (RIFF/WAVE with random header fields, fLaC, OggS, ID3,
MPEG frame sync, ftyp, EBML) followed by random bytes; and mutations of real files in many
encodings (WAV PCM 8/16/24/32, float, double, mu-law, A-law, stereo, 6 channels, 8-96 kHz, FLAC,
Ogg Vorbis/Opus, MP3, AIFF, AU, and M4A/WebM when ffmpeg is installed): byte flips, overwrites,
truncation, WAV header fields set to edge values (0, 1, 0xFFFF, 2^31-1, 2^32-1), chunk deletion
and duplication, splices of two files. The same seed gives the same inputs. Prints one line:

    fuzz_decoder: inputs=2000 decoded=.. refused=.. crashes=0 bad_outputs=0 hard_crashes=0 timeouts=0
"""

from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing as mp
import os
import random
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from _common import SR, finish

MAX_SECONDS = 60.0
ADDRESS_SPACE_LIMIT = 4 << 30
EDGE_U16 = (0, 1, 2, 3, 6, 8, 255, 0x7FFF, 0x8000, 0xFFFF)
EDGE_U32 = (0, 1, 7, 8000, 16000, 44100, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)


# --------------------------------------------------------------------------- seed files


def _tone(seconds: float, sr: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    mono = (0.4 * np.sin(2 * np.pi * 330.0 * t)).astype(np.float32)
    return np.stack([mono] * channels, axis=1) if channels > 1 else mono


def _sf(audio: np.ndarray, sr: int, fmt: str, subtype: Optional[str] = None) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def seed_files() -> dict[str, bytes]:
    """Small valid files (0.3 s) in every encoding the decoder meets."""
    seeds = {}
    for subtype in ("PCM_16", "PCM_24", "PCM_32", "PCM_U8", "FLOAT", "DOUBLE", "ULAW", "ALAW"):
        seeds[f"wav-{subtype.lower()}"] = _sf(_tone(0.3, SR), SR, "WAV", subtype)
    for sr in (8000, 44100, 96000):
        seeds[f"wav-{sr}"] = _sf(_tone(0.3, sr), sr, "WAV", "PCM_16")
    seeds["wav-stereo"] = _sf(_tone(0.3, SR, 2), SR, "WAV", "PCM_16")
    seeds["wav-6ch"] = _sf(_tone(0.3, SR, 6), SR, "WAV", "PCM_16")
    seeds["flac"] = _sf(_tone(0.3, SR), SR, "FLAC")
    seeds["ogg-vorbis"] = _sf(_tone(0.3, SR), SR, "OGG", "VORBIS")
    seeds["ogg-opus"] = _sf(_tone(0.3, 48000), 48000, "OGG", "OPUS")
    seeds["mp3"] = _sf(_tone(0.3, 44100), 44100, "MP3")
    seeds["aiff"] = _sf(_tone(0.3, SR), SR, "AIFF", "PCM_16")
    seeds["au"] = _sf(_tone(0.3, SR), SR, "AU", "PCM_16")
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "in.wav"
            src.write_bytes(seeds["wav-pcm_16"])
            for ext, codec in (("m4a", ["-c:a", "aac"]), ("webm", ["-c:a", "libopus"])):
                out = Path(tmp) / f"out.{ext}"
                proc = subprocess.run([ffmpeg, "-nostdin", "-loglevel", "error", "-i", str(src), *codec, str(out)],
                                      capture_output=True, timeout=60)
                if proc.returncode == 0:
                    seeds[ext] = out.read_bytes()
    return seeds


# --------------------------------------------------------------------------- input generators


def _random_bytes(rng: random.Random, low: int = 0, high: int = 65536) -> bytes:
    size = int(2 ** rng.uniform(0, np.log2(max(2, high)))) if high else 0
    return rng.randbytes(max(low, size))


def gen_random(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    return _random_bytes(rng)


def gen_magic(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    magic = rng.choice([b"RIFF\x00\x00\x00\x00WAVE", b"RIFF\xff\xff\xff\xffWAVEfmt ", b"fLaC", b"OggS\x00\x02",
                        b"ID3\x04\x00\x00\x00\x00\x00\x00", b"\xff\xfb\x90\x64", b"\xff\xf1\x50\x80",
                        b"\x00\x00\x00\x20ftypM4A ", b"\x1a\x45\xdf\xa3", b"#!AMR\n", b".snd", b"FORM\x00\x00\x00\x00AIFF",
                        b"RF64\xff\xff\xff\xffWAVE", b"caff\x00\x01\x00\x00"])
    return magic + _random_bytes(rng, 0, 8192)


def wav_header(channels: int, rate: int, bits: int, fmt_tag: int, data_size: int,
               byte_rate: Optional[int] = None, block_align: Optional[int] = None) -> bytes:
    block_align = block_align if block_align is not None else (channels * bits // 8) & 0xFFFF
    byte_rate = byte_rate if byte_rate is not None else (rate * block_align) & 0xFFFFFFFF
    fmt = struct.pack("<HHIIHH", fmt_tag & 0xFFFF, channels & 0xFFFF, rate & 0xFFFFFFFF, byte_rate,
                      block_align & 0xFFFF, bits & 0xFFFF)
    riff_size = (4 + 8 + len(fmt) + 8 + data_size) & 0xFFFFFFFF
    return (b"RIFF" + struct.pack("<I", riff_size) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", data_size & 0xFFFFFFFF))


def gen_wav_fields(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    """A WAV header with edge-value fields over a little random data."""
    pick16 = lambda: rng.choice(EDGE_U16 + (rng.randrange(1 << 16),))  # noqa: E731
    pick32 = lambda: rng.choice(EDGE_U32 + (rng.randrange(1 << 32),))  # noqa: E731
    data = _random_bytes(rng, 0, 16384)
    header = wav_header(
        channels=rng.choice([1, 2, 6, pick16()]), rate=rng.choice([8000, 16000, 44100, pick32()]),
        bits=rng.choice([8, 16, 24, 32, 64, pick16()]), fmt_tag=rng.choice([1, 3, 6, 7, 0xFFFE, pick16()]),
        data_size=rng.choice([len(data), pick32()]),
        byte_rate=pick32() if rng.random() < 0.3 else None, block_align=pick16() if rng.random() < 0.3 else None)
    return header + data


def _seed(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    return seeds[rng.choice(sorted(seeds))]


def gen_flip(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    data = bytearray(_seed(rng, seeds))
    # mostly in the header, where the decoder makes its decisions
    for _ in range(rng.randint(1, 32)):
        pos = rng.randrange(min(len(data), 256)) if rng.random() < 0.7 else rng.randrange(len(data))
        if rng.random() < 0.5:
            data[pos] ^= 1 << rng.randrange(8)
        else:
            data[pos] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    return bytes(data)


def gen_truncate(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    data = _seed(rng, seeds)
    cut = rng.randrange(len(data)) if rng.random() < 0.5 else rng.randrange(min(len(data), 512))
    return data[:cut]


def gen_field_edit(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    """A WAV seed with one header field (RIFF size, channels, rate, byte rate, block align, bits,
    format tag, data size) set to an edge value."""
    data = bytearray(seeds[rng.choice([k for k in sorted(seeds) if k.startswith("wav-")])])
    at_data = data.find(b"data")
    fields = [(4, 4), (20, 2), (22, 2), (24, 4), (28, 4), (32, 2), (34, 2), (at_data + 4, 4)]
    for _ in range(rng.randint(1, 3)):
        offset, size = rng.choice(fields)
        value = rng.choice(EDGE_U16 if size == 2 else EDGE_U32)
        data[offset:offset + size] = value.to_bytes(size, "little")
    return bytes(data)


def gen_chunks(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    """Delete, duplicate or insert a block of bytes."""
    data = bytearray(_seed(rng, seeds))
    start = rng.randrange(len(data))
    length = rng.randint(1, min(4096, len(data) - start))
    action = rng.choice(["delete", "duplicate", "insert"])
    if action == "delete":
        del data[start:start + length]
    elif action == "duplicate":
        data[start:start] = data[start:start + length] * rng.randint(1, 50)
    else:
        data[start:start] = rng.randbytes(length)
    return bytes(data)


def gen_splice(rng: random.Random, seeds: dict[str, bytes]) -> bytes:
    a, b = _seed(rng, seeds), _seed(rng, seeds)
    return a[:rng.randrange(len(a))] + b[rng.randrange(len(b)):]


GENERATORS: dict[str, Callable[[random.Random, dict[str, bytes]], bytes]] = {
    "random": gen_random, "magic": gen_magic, "wav-fields": gen_wav_fields, "flip": gen_flip,
    "truncate": gen_truncate, "field-edit": gen_field_edit, "chunks": gen_chunks, "splice": gen_splice,
}
WEIGHTS = {"random": 1, "magic": 2, "wav-fields": 3, "flip": 4, "truncate": 2, "field-edit": 3, "chunks": 2,
           "splice": 1}


def generate(n: int, seed: int, seeds: dict[str, bytes]):
    rng = random.Random(seed)
    names = sorted(GENERATORS)
    weights = [WEIGHTS[name] for name in names]
    for i in range(n):
        name = rng.choices(names, weights)[0]
        yield i, name, GENERATORS[name](rng, seeds)


# --------------------------------------------------------------------------- the worker


def _worker(conn, max_seconds: float, quiet: bool) -> None:
    os.setpgid(0, 0)  # its own process group: a timeout kills it and its ffmpeg together
    if quiet:  # libmpg123 and libsndfile write notes on damaged input straight to fd 2
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    except (ValueError, OSError):
        pass
    from speaker_asr.audio.decode import AudioDecodeError, decode_audio

    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        try:
            audio = decode_audio(data, max_duration_s=max_seconds)
        except AudioDecodeError as exc:
            reply: tuple = ("refused", str(exc)[:300])
        except BaseException as exc:  # noqa: BLE001 - that is the point
            reply = ("crash", type(exc).__name__, str(exc)[:300], traceback.format_exc()[-2000:])
        else:
            finite = bool(np.all(np.isfinite(audio))) if audio.size else True
            peak = float(np.max(np.abs(audio))) if audio.size and finite else 0.0
            reply = ("decoded", str(audio.dtype), audio.ndim, int(audio.size), finite, peak)
        conn.send(reply)


class Worker:
    def __init__(self, ctx, max_seconds: float, quiet: bool = True):
        self.ctx, self.max_seconds, self.quiet = ctx, max_seconds, quiet
        self.job: Optional[tuple[int, str, bytes]] = None
        self.started = 0.0
        self._spawn()

    def _spawn(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.max_seconds, self.quiet),
                                daemon=True)
        self.proc.start()
        child.close()

    def submit(self, job: tuple[int, str, bytes]) -> None:
        self.job, self.started = job, time.monotonic()
        self.conn.send_bytes(job[2])

    def kill(self) -> None:
        """Kill the worker's process group (the worker and any ffmpeg it started), then respawn."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.is_alive():
            self.proc.kill()  # not yet its own group leader
        self.proc.join(10)
        self.conn.close()
        self._spawn()

    def close(self) -> None:
        self.conn.close()
        self.proc.join(5)
        if self.proc.is_alive():
            self.kill()
            self.proc.kill()


@dataclass
class Tally:
    counts: Counter
    by_generator: dict[str, Counter]
    findings: list[dict[str, Any]]


def classify(reply: tuple, max_seconds: float) -> tuple[str, Optional[str]]:
    kind = reply[0]
    if kind == "decoded":
        _, dtype, ndim, size, finite, peak = reply
        problems = []
        if dtype != "float32":
            problems.append(f"dtype {dtype}")
        if ndim != 1:
            problems.append(f"{ndim} dimensions")
        if not finite:
            problems.append("non-finite samples")
        if peak > 1.0 + 1e-6:
            problems.append(f"peak {peak}")
        if size > (max_seconds + 1) * SR:
            problems.append(f"{size / SR:.1f} s, over the {max_seconds:.0f} s limit")
        return ("bad_output", ", ".join(problems)) if problems else ("decoded", None)
    if kind == "refused":
        return "refused", None
    return "crash", f"{reply[1]}: {reply[2]}"


def run(n: int, seed: int, workers: int, timeout: float, max_seconds: float, budget_s: float,
        save: Optional[Path], quiet: bool = True) -> dict[str, Any]:
    seeds = seed_files()
    ctx = mp.get_context("fork")
    pool = [Worker(ctx, max_seconds, quiet) for _ in range(max(1, workers))]
    tally = Tally(Counter(), {}, [])
    refusals: Counter = Counter()
    jobs = generate(n, seed, seeds)
    started = time.monotonic()
    exhausted = stopped = False

    def record(job, outcome: str, detail: Optional[str], elapsed: float) -> None:
        index, generator, data = job
        tally.counts[outcome] += 1
        tally.by_generator.setdefault(generator, Counter())[outcome] += 1
        if outcome not in ("decoded", "refused"):
            digest = hashlib.sha1(data).hexdigest()[:12]
            tally.findings.append({"input": index, "generator": generator, "outcome": outcome,
                                   "detail": detail, "bytes": len(data), "sha1": digest,
                                   "seconds": round(elapsed, 2)})
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                (save / f"{outcome}-{index:05d}-{digest}.bin").write_bytes(data)

    try:
        while True:
            for w in pool:
                if w.job is None and not (exhausted or stopped):
                    if time.monotonic() - started > budget_s:
                        stopped = True
                        break
                    job = next(jobs, None)
                    if job is None:
                        exhausted = True
                    else:
                        w.submit(job)
            busy = [w for w in pool if w.job is not None]
            if not busy:
                break
            for w in busy:
                elapsed = time.monotonic() - w.started
                if w.conn.poll(0.01):
                    try:
                        reply = w.conn.recv()
                    except (EOFError, OSError):
                        record(w.job, "hard_crash", f"worker died (exit code {w.proc.exitcode})", elapsed)
                        w.job = None
                        w.kill()
                        continue
                    outcome, detail = classify(reply, max_seconds)
                    if outcome == "refused":
                        refusals[reply[1].split("(")[0].split(":")[0][:60]] += 1
                    record(w.job, outcome, detail, elapsed)
                    w.job = None
                elif not w.proc.is_alive():
                    record(w.job, "hard_crash", f"worker died (exit code {w.proc.exitcode})", elapsed)
                    w.job = None
                    w.kill()
                elif elapsed > timeout:
                    record(w.job, "timeout", f"no answer after {timeout:.0f} s", elapsed)
                    w.job = None
                    w.kill()
    finally:
        for w in pool:
            w.close()
    wall = time.monotonic() - started
    tried = sum(tally.counts.values())
    return {
        "inputs_requested": n, "inputs": tried, "seed": seed, "stopped_by_time_budget": stopped,
        "decoded": tally.counts["decoded"], "refused": tally.counts["refused"],
        "crashes": tally.counts["crash"], "bad_outputs": tally.counts["bad_output"],
        "hard_crashes": tally.counts["hard_crash"], "timeouts": tally.counts["timeout"],
        "wall_s": round(wall, 1), "inputs_per_s": round(tried / wall, 1) if wall else None,
        "seed_files": sorted(seeds), "by_generator": {k: dict(v) for k, v in sorted(tally.by_generator.items())},
        "refusal_messages": dict(refusals.most_common(12)), "findings": tally.findings,
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=2000, help="how many inputs (max 100000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30, help="seconds per input")
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="decode_audio's max_duration_s")
    parser.add_argument("--budget-minutes", type=float, default=30, help="stop starting new inputs after this")
    parser.add_argument("--save", type=Path, help="write every crashing / timing-out input here")
    parser.add_argument("--verbose", action="store_true", help="keep the codecs' notes on stderr")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    if not 1 <= args.inputs <= 100_000:
        parser.error("--inputs must be between 1 and 100000")
    result = run(args.inputs, args.seed, args.workers, args.timeout, args.max_seconds,
                 args.budget_minutes * 60, args.save, quiet=not args.verbose)
    for finding in result["findings"][:15]:
        print(f"  {finding}", flush=True)
    ok = not (result["crashes"] or result["bad_outputs"] or result["hard_crashes"] or result["timeouts"])
    summary = (f"inputs={result['inputs']} decoded={result['decoded']} refused={result['refused']} "
               f"crashes={result['crashes']} bad_outputs={result['bad_outputs']} "
               f"hard_crashes={result['hard_crashes']} timeouts={result['timeouts']} seed={args.seed} "
               f"wall={result['wall_s']}s" + (" (stopped by the time budget)" if result["stopped_by_time_budget"] else ""))
    return finish("fuzz_decoder", summary, result, args.json, ok)


if __name__ == "__main__":
    raise SystemExit(main())
