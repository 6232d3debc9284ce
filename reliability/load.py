"""Concurrent load of mixed valid and invalid requests against a live server, loopback only.

    python reliability/load.py                      # starts a server with the tiny models
    python reliability/load.py --url http://127.0.0.1:8080 --requests 50

Fires ``--requests`` (default 50) requests at once, about 60 % valid (WAV/FLAC/MP3, raw, base64
JSON and multipart, several parameters and response formats, each with its own audio length) and
40 % invalid (each with its own fault), while a poller checks /health every 0.25 s. Each answer is
checked against its own request: a valid one must be a 200 whose ``duration`` is that request's
audio length and whose X-Request-Id is its own; an invalid one the expected 4xx naming its own
fault. Prints one line:

    load: sent=50 ok=30 4xx=20 5xx=0 lost=0 mismatched=0 p50=..s p95=..s ... health=N/N

``lost`` = no answer (timeout, connection reset); ``mismatched`` = an answer that is not the one
its request should get; ``busy`` = refused by the server's bounded queue (503 with Retry-After,
``MAX_QUEUE``: correct backpressure, not a failure; the server this script starts gets
``MAX_QUEUE`` = ``--requests``, so that every request is answered). Exit code 1 when anything is
lost, mismatched, another 5xx, or /health failed.

Against ``--url`` only loopback addresses are accepted, and the size/length-limit cases are sent
only when ``--max-body-bytes`` / ``--max-audio-seconds`` say what the server's limits are.

This uses ``requests``. huggingface_hub's InferenceClient refuses every URL, loopback included,
while HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set in the client's environment (it reads them at
import): drive the server with it from a process without those variables.
"""

from __future__ import annotations

import argparse
import base64
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

import numpy as np

from _common import SR, finish, local_server, percentile

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def tone(seconds: float, sr: int = SR, freq: float = 220.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(round(seconds * sr))) / sr
    mono = (0.3 * np.sin(2 * np.pi * freq * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))).astype(np.float32)
    return np.stack([mono] * channels, axis=1) if channels > 1 else mono


def encode(audio: np.ndarray, sr: int = SR, fmt: str = "WAV", subtype: Optional[str] = None) -> bytes:
    import io

    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, sr, format=fmt, subtype=subtype)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class Job:
    index: int
    kind: str
    request: dict[str, Any]  # path, data / json / files, headers
    status: int  # expected
    duration: Optional[float] = None  # expected for a 200
    tolerance: float = 0.002
    fragments: tuple[str, ...] = ()  # expected in an error message
    # filled in
    response_status: Optional[int] = None
    latency: Optional[float] = None
    problem: Optional[str] = None
    lost: Optional[str] = None
    busy: bool = False  # 503 from a full queue (MAX_QUEUE), with Retry-After
    body: Any = field(default=None, repr=False)


def build_jobs(n: int, seed: int, max_body: Optional[int], max_audio_s: Optional[float]) -> list[Job]:
    """n requests, valid and invalid interleaved; every valid one has its own audio length
    (0.4 s + 0.05 s * i, so a swapped answer shows) and every invalid one a fault."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    invalid_kinds = ["bad-language", "bad-parameter", "negative-speakers", "min-above-max", "bad-base64",
                     "not-audio", "text-plain", "empty-body", "truncated-header"]
    if max_body:
        invalid_kinds.append("over-body-limit")
    if max_audio_s:
        invalid_kinds.append("over-audio-limit")
    valid_kinds = ["raw-wav", "json-base64", "multipart", "flac", "mp3-44k", "stereo-48k", "verbose-json",
                   "srt", "words", "silence"]
    for i in range(n):
        ident = f"load-{i:03d}"
        if i % 5 in (1, 3):  # 40 % invalid
            kind = invalid_kinds[(i // 2) % len(invalid_kinds)]
            clip = encode(tone(0.5))
            if kind == "bad-language":
                code = f"q{i}x"
                job = Job(i, kind, {"json": {"inputs": b64(clip), "parameters": {"language": code}}}, 400,
                          fragments=(f"unknown language '{code}'",))
            elif kind == "bad-parameter":
                job = Job(i, kind, {"path": f"/?param_{i}=1", "data": clip,
                                    "headers": {"Content-Type": "audio/wav"}}, 400,
                          fragments=(f"unknown parameter 'param_{i}'",))
            elif kind == "negative-speakers":
                job = Job(i, kind, {"json": {"inputs": b64(clip), "parameters": {"num_speakers": -i}}}, 400,
                          fragments=(f"'num_speakers': -{i};",))
            elif kind == "min-above-max":
                job = Job(i, kind, {"json": {"inputs": b64(clip),
                                             "parameters": {"min_speakers": 2 + i % 30, "max_speakers": 1 + i % 30}}},
                          400, fragments=(f"min_speakers ({2 + i % 30}) must not exceed max_speakers ({1 + i % 30})",))
            elif kind == "bad-base64":
                job = Job(i, kind, {"json": {"inputs": "@@" + "A" * (i + 1)}}, 400, fragments=("not valid base64",))
            elif kind == "not-audio":
                job = Job(i, kind, {"json": {"inputs": b64(f"request {i} is text, not audio".encode() * 20)}},
                          400, fragments=("could not decode the audio",))
            elif kind == "text-plain":
                job = Job(i, kind, {"data": f"hello {i}".encode(), "headers": {"Content-Type": "text/plain"}},
                          415, fragments=("text/plain",))
            elif kind == "empty-body":
                job = Job(i, kind, {"data": b"", "headers": {"Content-Type": "audio/wav"}}, 400,
                          fragments=("empty",))
            elif kind == "truncated-header":
                job = Job(i, kind, {"data": clip[:20 + i % 20], "headers": {"Content-Type": "audio/wav"}}, 400,
                          fragments=("could not decode the audio",))
            elif kind == "over-body-limit":
                job = Job(i, kind, {"data": bytes([0x52]) * (max_body + 1 + i),
                                    "headers": {"Content-Type": "audio/wav"}}, 413, fragments=("MAX_BODY_BYTES",))
            else:  # over-audio-limit: a small 8 kHz 8-bit file that lasts longer than the limit
                seconds = float(max_audio_s) + 1 + i % 5
                job = Job(i, kind, {"data": encode(tone(seconds, sr=8000), sr=8000, subtype="PCM_U8"),
                                    "headers": {"Content-Type": "audio/wav"}}, 400,
                          fragments=(f"audio is {seconds:.1f} s long",))
        else:
            kind = valid_kinds[rng.randrange(len(valid_kinds))]
            seconds = round(0.4 + 0.05 * i, 3)
            freq = 120.0 + 7.0 * i
            wav = encode(tone(seconds, freq=freq))
            job = Job(i, kind, {}, 200, duration=seconds)
            if kind == "raw-wav":
                job.request = {"path": "/?language=en", "data": wav, "headers": {"Content-Type": "audio/wav"}}
            elif kind == "json-base64":
                job.request = {"json": {"inputs": b64(wav), "parameters": {"num_speakers": 1 + i % 2}}}
            elif kind == "multipart":
                job.request = {"path": "/predict", "files": {"file": (f"{ident}.wav", wav, "audio/wav")},
                               "data": {"max_speakers": "2", "model": "whisper-1"}}
            elif kind == "flac":
                job.request = {"data": encode(tone(seconds, freq=freq), fmt="FLAC"),
                               "headers": {"Content-Type": "audio/flac"}}
            elif kind == "mp3-44k":
                job.request = {"data": encode(tone(seconds, sr=44100, freq=freq), sr=44100, fmt="MP3"),
                               "headers": {"Content-Type": "audio/mpeg"}}
                job.tolerance = 0.02  # codec priming/padding; still < half the 0.05 s spacing
            elif kind == "stereo-48k":
                job.request = {"data": encode(tone(seconds, sr=48000, freq=freq, channels=2), sr=48000),
                               "headers": {"Content-Type": "audio/wav"}}
            elif kind == "verbose-json":
                job.request = {"path": "/?response_format=verbose_json", "data": wav,
                               "headers": {"Content-Type": "audio/wav"}}
            elif kind == "srt":
                job.request = {"json": {"inputs": b64(wav), "parameters": {"response_format": "srt"}}}
            elif kind == "words":
                job.request = {"json": {"inputs": b64(wav), "parameters": {"return_word_timestamps": True}}}
            else:  # silence: the transcript must be empty
                job.request = {"data": encode(np.zeros(int(round(seconds * SR)), np.float32)),
                               "headers": {"Content-Type": "audio/wav"}}
        job.request.setdefault("headers", {})["X-Request-Id"] = ident
        jobs.append(job)
    return jobs


def check(job: Job, response) -> Optional[str]:
    """Why this answer is not the one ``job`` should get (None when it is)."""
    if response.headers.get("x-request-id") != f"load-{job.index:03d}":
        return f"X-Request-Id {response.headers.get('x-request-id')!r} is not this request's"
    if (response.status_code == 503 and response.headers.get("retry-after")
            and "MAX_QUEUE" in response.text):
        job.busy = True  # the bounded queue refused it: backpressure, not a wrong answer
        return None
    if response.status_code != job.status:
        return f"status {response.status_code}, expected {job.status}: {response.text[:200]}"
    try:
        body = response.json()
    except ValueError:
        return f"not JSON: {response.text[:200]}"
    if job.status != 200:
        message = str(body.get("error", ""))
        missing = [f for f in job.fragments if f not in message]
        return f"error {message[:200]!r} lacks {missing}" if missing else None
    duration = body.get("duration")
    if not isinstance(duration, (int, float)) or abs(duration - job.duration) > job.tolerance:
        return f"duration {duration}, this request's audio lasts {job.duration}"
    if job.kind == "silence" and (body.get("text") or body.get("chunks")):
        return f"silence gave a transcript: {body.get('text')!r}"
    if "warnings" in body and any("diarization failed" in w for w in body["warnings"]):
        return f"diarization failed: {body['warnings']}"
    return None


def run_load(url: str, jobs: list[Job], timeout: float, health_interval: float = 0.25) -> dict[str, Any]:
    import requests

    def session() -> requests.Session:
        s = requests.Session()
        s.trust_env = False  # loopback: never through a proxy
        return s

    barrier = threading.Barrier(len(jobs) + 1)

    def send(job: Job) -> None:
        request = dict(job.request)
        path = request.pop("path", "/")
        http = session()
        try:
            barrier.wait(60)
        except threading.BrokenBarrierError:
            pass
        started = time.perf_counter()
        try:
            response = http.post(url + path, timeout=timeout, **request)
        except Exception as exc:
            job.lost = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        finally:
            job.latency = time.perf_counter() - started
        job.response_status = response.status_code
        job.problem = check(job, response)

    health: list[tuple[Optional[int], float]] = []
    stop = threading.Event()

    def poll_health() -> None:
        http = session()
        while not stop.is_set():
            started = time.perf_counter()
            try:
                status = http.get(url + "/health", timeout=10).status_code
            except Exception:
                status = None
            health.append((status, time.perf_counter() - started))
            stop.wait(health_interval)

    threads = [threading.Thread(target=send, args=(job,), daemon=True) for job in jobs]
    for t in threads:
        t.start()
    poller = threading.Thread(target=poll_health, daemon=True)
    poller.start()
    started = time.perf_counter()
    barrier.wait(60)
    for t in threads:
        t.join(timeout + 30)
    wall = time.perf_counter() - started
    stop.set()
    poller.join(15)
    for job, t in zip(jobs, threads):
        if t.is_alive() and not job.lost:
            job.lost = "no answer (the client thread is still waiting)"
    answered = [j for j in jobs if j.response_status is not None]
    latencies = [j.latency for j in answered]
    health_ok = [s for s, _ in health if s == 200]
    return {
        "url": url,
        "sent": len(jobs),
        "valid_sent": sum(1 for j in jobs if j.status == 200),
        "invalid_sent": sum(1 for j in jobs if j.status != 200),
        "ok": sum(1 for j in answered if j.response_status == 200),
        "4xx": sum(1 for j in answered if 400 <= j.response_status < 500),
        "5xx": sum(1 for j in answered if j.response_status >= 500 and not j.busy),
        "busy": sum(1 for j in answered if j.busy),
        "lost": sum(1 for j in jobs if j.lost),
        "mismatched": sum(1 for j in answered if j.problem),
        "latency_p50_s": percentile(latencies, 50),
        "latency_p95_s": percentile(latencies, 95),
        "latency_max_s": max(latencies) if latencies else None,
        "invalid_latency_p50_s": percentile([j.latency for j in answered if j.status != 200], 50),
        "valid_latency_p50_s": percentile([j.latency for j in answered if j.status == 200], 50),
        "latency_p50_by_kind_s": {kind: percentile([j.latency for j in answered if j.kind == kind], 50)
                                  for kind in sorted({j.kind for j in answered})},
        "health_polls": len(health),
        "health_ok": len(health_ok),
        "health_max_latency_s": max((s for _, s in health), default=None),
        "wall_s": wall,
        "problems": [{"request": f"load-{j.index:03d}", "kind": j.kind, "lost": j.lost, "problem": j.problem}
                     for j in jobs if j.lost or j.problem or ((j.response_status or 0) >= 500 and not j.busy)],
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server on a loopback address (default: start one)")
    parser.add_argument("--requests", type=int, default=50, help="how many requests, all at once (max 200)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds each request may take")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-body-bytes", type=int, help="the --url server's MAX_BODY_BYTES (adds 413 cases)")
    parser.add_argument("--max-audio-seconds", type=float,
                        help="the --url server's MAX_AUDIO_SECONDS (adds too-long cases)")
    parser.add_argument("--work", type=Path, help="folder for the tiny models and the server log")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 200:
        parser.error("--requests must be between 1 and 200")

    server = None
    if args.url:
        host = urlparse(args.url).hostname or ""
        if host not in LOOPBACK and not host.startswith("127."):
            parser.error(f"--url must be a loopback address (127.0.0.1, localhost, ::1), not {host!r}")
        url, max_body, max_audio = args.url.rstrip("/"), args.max_body_bytes, args.max_audio_seconds
    else:
        max_body, max_audio = 1_000_000, 30.0
        work = args.work or Path(tempfile.gettempdir()) / "asr-reliability"
        # every request fits the queue: each must get its own answer
        server = local_server(work, MAX_BODY_BYTES=str(max_body), MAX_AUDIO_SECONDS=str(int(max_audio)),
                              MAX_QUEUE=str(args.requests), LOG_LEVEL="info")
        url = server.url
        print(f"started {url}: ready after {server.wait_ready():.1f} s (log {server.log_path})", flush=True)
    try:
        jobs = build_jobs(args.requests, args.seed, max_body, max_audio)
        result = run_load(url, jobs, args.timeout)
        if server is not None:
            result["server_alive"] = server.proc.poll() is None
            result["server_log_has_traceback"] = "Traceback" in server.log()
    finally:
        if server is not None:
            server.stop()
    ok = (result["lost"] == 0 and result["mismatched"] == 0 and result["5xx"] == 0
          and result["health_ok"] == result["health_polls"] and result.get("server_alive", True))
    for p in result["problems"][:10]:
        print(f"  {p}", flush=True)

    def s(v: Optional[float]) -> str:
        return "-" if v is None else f"{v:.2f}s"

    summary = (f"sent={result['sent']} ok={result['ok']} 4xx={result['4xx']} 5xx={result['5xx']} "
               f"lost={result['lost']} mismatched={result['mismatched']} busy={result['busy']} "
               f"p50={s(result['latency_p50_s'])} p95={s(result['latency_p95_s'])} "
               f"max={s(result['latency_max_s'])} invalid_p50={s(result['invalid_latency_p50_s'])} "
               f"health={result['health_ok']}/{result['health_polls']} "
               f"(max {s(result['health_max_latency_s'])}) wall={s(result['wall_s'])}")
    return finish("load", summary, result, args.json, ok)


if __name__ == "__main__":
    raise SystemExit(main())
