"""Live sessions (``/v1/realtime?intent=transcription``) under load and faults, against a server
this script starts on 127.0.0.1 and stops by its own pid; bounded in count and time.

    python reliability/live_load.py                         # real tiny.en + pyannote-campp-3.1 (REAL_MODELS_DIR)
    python reliability/live_load.py --sessions 2 --seconds 90 --json /tmp/live-load.json
    python reliability/live_load.py --models tiny --seconds 10 --audio sample.wav   # a minute or two

The server gets ``MAX_SESSIONS`` = ``--sessions`` and short limits of its own so that each fault
ends in seconds (``LIVE_IDLE_TIMEOUT_S`` = ``--idle-timeout``, ``LIVE_SEND_TIMEOUT_S`` =
``--send-timeout``); its RSS (``/proc/<pid>/status``) is sampled every 0.25 s throughout. Then,
one phase after another (``--phases``; each with its own time limit):

* ``alone``: one session streams the speech at real time (20 ms frames of 24 kHz PCM, server VAD
  at OpenAI's defaults, speaker labels on), then ``speaker_asr.session.finish``; and the file
  request (``POST /``, ``--file-seconds`` of the same speech as a WAV) three times with nothing
  else running: the baselines;
* ``concurrent``: ``--sessions`` sessions at once, each the same speech from another point (every
  session hears the same utterances, at other times); one more connection meanwhile must be refused
  (``session_limit_reached``);
* ``mixed``: the same sessions while file requests arrive one after another: both sides' latencies;
* ``flood``: one session sending its frames 10x faster than real time (beside a real-time one when
  ``--sessions`` >= 2): every committed item completed, all its audio counted by the server;
* ``malformed``: bad JSON, bad base64, a PCM frame of an odd byte count, an unknown event, a JSON
  array, an empty and a binary message, an append over ``LIVE_MAX_FRAME_BYTES``: an ``error``
  event each, then the session still transcribes; a message over the WebSocket's size limit:
  close 1009;
* ``no_read``: a client that floods events (each answered by an ``error``) and reads nothing, its
  receive buffer small: the server's memory must stay bounded and the session end by itself (its
  line in the server's log); a new session is taken afterwards;
* ``disconnect``: a client that drops its connection mid-utterance (no close frame), beside a
  real-time session: the session ends, the neighbour completes every item;
* ``idle``: a client that never sends audio: an ``error`` event and a close within the idle timeout;
* ``sigterm``: ``--sessions`` sessions streaming and a file request in flight, then SIGTERM to the
  server: every session gets a closing event or close code, the process exits within 10 s.

Latencies, per session: **speech end -> completed**, from the frame that carried the end of the
item's speech (``speech_stopped``'s ``audio_end_ms``) leaving the client to the item's
``completed`` (the VAD's 500 ms wait included); **speaker lag**, from ``completed`` to the item's
first ``segment`` (the event that carries its speaker; speakers come after the text). Checked
(exit code 1 otherwise): concurrent p95 within ``--max-ratio`` (2) x the lone session's, every
committed item completed or failed (none lost), every fault answered by an error event or a close
code, no session left open, the server's RSS within ``--max-growth-mb`` above its loaded size, the
file requests answered, SIGTERM's exit within 10 s.

Ends with a markdown table (phase by phase) and one summary line; ``--json PATH`` keeps
everything (each session's events with their arrival times included).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import math
import os
import re
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from _common import REAL, ROOT, SR, finish, percentile

MEETINGS = ROOT.parent / "shared" / "real-meetings"
# the AMI clips with the most speech, in the order sessions take them
DEFAULT_CLIPS = ("EN2001e", "EN2009b", "EN2005a", "EN2004a", "EN2001a", "EN2006b")
RATE = 24_000  # what the client sends: OpenAI's audio/pcm
FRAME_MS = 20
COMPLETED = "conversation.item.input_audio_transcription.completed"
FAILED = "conversation.item.input_audio_transcription.failed"
SEGMENT = "conversation.item.input_audio_transcription.segment"
PHASES = ("alone", "concurrent", "mixed", "flood", "malformed", "no_read", "disconnect", "idle", "sigterm")
SIGTERM_EXIT_S = 10.0


# --------------------------------------------------------------------------- audio


def read16k(path: Path) -> np.ndarray:
    import soundfile as sf
    from scipy.signal import resample_poly

    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    if rate != SR:
        g = math.gcd(SR, rate)
        audio = resample_poly(audio, SR // g, rate // g).astype(np.float32)
    return audio


def speech(paths: list[Path], seconds: float) -> tuple[np.ndarray, list[int], list[str]]:
    """The recordings joined (1 s apart) and cut to (or repeated up to) ``seconds``; the sample
    where each recording starts (a session starts at one of them) and their names."""
    parts, starts, names, at = [], [], [], 0
    for path in paths:
        audio = read16k(path / "audio.wav" if path.is_dir() else path)
        starts.append(at)
        names.append(path.name)
        parts += [audio, np.zeros(SR, np.float32)]
        at += len(audio) + SR
    joined = np.concatenate(parts)
    total = int(seconds * SR)
    if len(joined) < total:
        joined = np.tile(joined, -(-total // len(joined)))
    return joined[:total], [s for s in starts if s < total] or [0], names


def default_audio() -> list[Path]:
    """The real AMI clips (../shared/real-meetings) when present, else pyannote.audio's own sample
    (real speech, two speakers; it ships in the package)."""
    if MEETINGS.is_dir():
        found = [next(iter(sorted(MEETINGS.glob(f"ami_{name}_*"))), None) for name in DEFAULT_CLIPS]
        found = [p for p in found if p is not None and (p / "audio.wav").exists()]
        if found:
            return found
    import pyannote.audio

    return [Path(pyannote.audio.__file__).parent / "sample" / "sample.wav"]


def frames(audio16k: np.ndarray) -> list[str]:
    """The ``input_audio_buffer.append`` messages of 20 ms of 24 kHz PCM, encoded once."""
    from scipy.signal import resample_poly

    pcm = (np.clip(resample_poly(audio16k.astype(np.float64), 3, 2), -1, 1) * 32767).round().astype("<i2").tobytes()
    step = RATE * FRAME_MS // 1000 * 2
    return [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm[i:i + step]).decode()})
            for i in range(0, len(pcm), step)]


def wav_bytes(audio16k: np.ndarray) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio16k, SR, format="WAV", subtype="PCM_16")
    return buf.getvalue()


SESSION_UPDATE = json.dumps({"type": "session.update", "session": {
    "type": "transcription",
    "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
                        "turn_detection": {"type": "server_vad"}}},
    "speaker_asr": {"speaker_labels": True}}})


# --------------------------------------------------------------------------- server memory


class RssWatch:
    """The server's RSS every ``interval`` s (from /proc/<pid>/status) on a thread of its own."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-watch")

    def rss(self) -> Optional[float]:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:  # the process has ended
            return None
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self.rss()
            if value is not None:
                self.samples.append((time.monotonic(), value))
            self._stop.wait(self.interval)

    def start(self) -> "RssWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def between(self, start: float, end: float) -> dict[str, Optional[float]]:
        values = [v for t, v in self.samples if start <= t <= end]
        if not values:
            return {"start_mb": None, "peak_mb": None, "end_mb": None}
        return {"start_mb": round(values[0], 1), "peak_mb": round(max(values), 1), "end_mb": round(values[-1], 1)}


# --------------------------------------------------------------------------- one session


@dataclass
class Session:
    """One client's view of a live session: every event with the time it came, when each frame
    left, and how the connection ended."""

    name: str
    events: list[tuple[float, dict]] = field(default_factory=list)
    frame_sent: list[float] = field(default_factory=list)
    frames_total: int = 0
    session_id: Optional[str] = None
    close_code: Optional[int] = None
    close_reason: str = ""
    problem: Optional[str] = None
    started: float = 0.0
    ended: float = 0.0

    def of(self, kind: str) -> list[tuple[float, dict]]:
        return [(t, e) for t, e in self.events if e.get("type") == kind]

    def sent_at(self, audio_ms: float) -> Optional[float]:
        if not self.frame_sent:
            return None
        k = min(len(self.frame_sent) - 1, max(0, math.ceil(audio_ms / FRAME_MS) - 1))
        return self.frame_sent[k]

    def error_codes(self) -> list[str]:
        return [str(e.get("error", {}).get("code")) for _, e in self.of("error")]

    def measures(self) -> dict[str, Any]:
        completed = {e["item_id"]: t for t, e in self.of(COMPLETED)}
        failed = {e["item_id"] for _, e in self.of(FAILED)}
        committed = [e["item_id"] for _, e in self.of("input_audio_buffer.committed")]
        stopped = {e["item_id"]: e["audio_end_ms"] for _, e in self.of("input_audio_buffer.speech_stopped")}
        first_segment: dict[str, float] = {}
        for t, e in self.of(SEGMENT):
            first_segment.setdefault(e["item_id"], t)
        end_to_completed, lag = [], []
        for item, t in completed.items():
            sent = self.sent_at(stopped[item]) if item in stopped else None
            if sent is not None:
                end_to_completed.append(t - sent)
            if item in first_segment:
                lag.append(first_segment[item] - t)
        lost = [i for i in committed if i not in completed and i not in failed]
        return {"items": len(committed), "completed": len(completed), "failed": len(failed), "lost": len(lost),
                "end_to_completed": end_to_completed, "speaker_lag": lag,
                "segments": len(self.of(SEGMENT)), "errors": self.error_codes(),
                "close_code": self.close_code, "close_reason": self.close_reason,
                "frames_sent": len(self.frame_sent), "frames_total": self.frames_total}


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"


def connect(url: str, **kwargs):
    from websockets.asyncio.client import connect as ws_connect

    return ws_connect(ws_url(url), proxy=None, open_timeout=30, max_size=None, **kwargs)


async def stream(url: str, messages: list[str], name: str, speed: float = 1.0, finish_session: bool = True,
                 drain_s: float = 120.0, drop_after: Optional[float] = None,
                 ping_interval: Optional[float] = 20.0) -> Session:
    """One session: ``messages`` (appends) sent on a fixed schedule at ``speed`` x real time, then
    the finish (our extension: the server commits what is open, finishes every item, closes with
    1000); every event kept. ``drop_after``: seconds after the first ``speech_started`` at
    which the client drops the connection without a close frame (mid-utterance).
    ``ping_interval``: the client's own keepalive (websockets' default; None: none)."""
    from websockets.exceptions import ConnectionClosed

    out = Session(name, frames_total=len(messages))
    try:
        async with connect(url, ping_interval=ping_interval) as ws:
            async def receive():
                try:
                    async for message in ws:
                        event = json.loads(message)
                        out.events.append((time.perf_counter(), event))
                        if event.get("type") == "session.created":
                            out.session_id = event["session"]["id"]
                except ConnectionClosed:
                    pass

            receiver = asyncio.ensure_future(receive())
            await ws.send(SESSION_UPDATE)
            out.started = start = time.perf_counter()
            dropped = False
            for k, message in enumerate(messages):
                delay = start + k * FRAME_MS / 1000 / speed - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if receiver.done():
                    break
                if drop_after is not None:
                    begun = out.of("input_audio_buffer.speech_started")
                    if begun and time.perf_counter() - begun[0][0] >= drop_after:
                        ws.transport.abort()  # gone, as a crashed client or a pulled cable: no close frame
                        dropped = True
                        break
                await ws.send(message)
                out.frame_sent.append(time.perf_counter())
            if not dropped and finish_session and not receiver.done():
                await ws.send(json.dumps({"type": "speaker_asr.session.finish"}))
            try:
                await asyncio.wait_for(receiver, drain_s if not dropped else 5)
            except asyncio.TimeoutError:
                out.problem = f"no close within {drain_s:g} s of the audio's end"
            out.close_code, out.close_reason = ws.close_code, ws.close_reason or ""
    except ConnectionClosed as exc:
        out.close_code = exc.rcvd.code if exc.rcvd else None
        out.close_reason = exc.rcvd.reason if exc.rcvd else ""
    except Exception as exc:  # a refused or broken connection is a result, not a crash of the run
        out.problem = f"{type(exc).__name__}: {exc}"[:300]
    out.ended = time.perf_counter()
    return out


# --------------------------------------------------------------------------- file requests


def post_file(url: str, wav: bytes, timeout: float = 300.0) -> dict[str, Any]:
    """``POST /`` with the WAV: its status, latency, the answer (text and speaker turns) or the
    error's first 300 characters (a client timeout: the exception's name)."""
    import requests

    http = requests.Session()
    http.trust_env = False  # loopback: never through a proxy
    started = time.perf_counter()
    try:
        r = http.post(url + "/", data=wav, headers={"Content-Type": "audio/wav"}, timeout=timeout)
        status, body = r.status_code, r.text
    except Exception as exc:
        status, body = None, f"{type(exc).__name__}: {exc}"
    answer = None
    if status == 200:
        doc = json.loads(body)
        answer = {"text": doc.get("text"),
                  "speakers": [(t.get("speaker"), t.get("text")) for t in doc.get("speakers") or []]}
    return {"status": status, "latency": time.perf_counter() - started, "answer": answer,
            "body": body[:300] if status != 200 else ""}


async def file_requests(url: str, wav: bytes, until: asyncio.Event, gap_s: float = 0.5) -> list[dict]:
    """File requests one after another (the next ``gap_s`` after each answer) until ``until``."""
    done = []
    while not until.is_set():
        done.append(await asyncio.to_thread(post_file, url, wav))
        try:
            await asyncio.wait_for(until.wait(), gap_s)
        except asyncio.TimeoutError:
            pass
    return done


# --------------------------------------------------------------------------- the server


def start_server(args, work: Path):
    from speaker_asr.testing.long_audio import REAL_ASR, REAL_PIPELINE
    from speaker_asr.testing.server import ServerProcess, tiny_env

    limits = dict(MAX_SESSIONS=str(args.sessions), LIVE_IDLE_TIMEOUT_S=str(args.idle_timeout),
                  LIVE_SEND_TIMEOUT_S=str(args.send_timeout), LOG_LEVEL="info", PYTHONUNBUFFERED="1",
                  HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
                  TOKENIZERS_PARALLELISM="false")
    if args.models == "real":
        env = dict(os.environ, ASR_MODEL=str(REAL / REAL_ASR), DIARIZATION_MODEL=str(REAL / REAL_PIPELINE),
                   ASSISTANT_MODEL="", **limits)
    else:
        from speaker_asr.testing.tiny_models import build_all_once

        env = tiny_env(build_all_once(work / "tiny-models"), **limits)
    env.pop("API_KEY", None)
    env.pop("HOST", None)
    env.pop("PORT", None)
    env.update(dict(setting.split("=", 1) for setting in args.server_env))
    server = ServerProcess("live-load-server", env, work)
    ready = server.wait_ready(timeout=600)
    return server, ready


def log_entries(server) -> list[dict]:
    """The server's JSON log lines."""
    entries = []
    for line in server.log().splitlines():
        if line.startswith("{"):
            try:
                entries.append(json.loads(line))
            except ValueError:
                pass
    return entries


def session_line(server, session_id: Optional[str]) -> Optional[dict]:
    """The access log's line of a live session that has ended (its outcome), or None."""
    if session_id is None:
        return None
    for entry in log_entries(server):
        if entry.get("msg") == "live session" and entry.get("session_id") == session_id:
            return entry
    return None


async def wait_session_line(server, session_id: Optional[str], timeout: float) -> Optional[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = session_line(server, session_id)
        if entry is not None:
            return entry
        await asyncio.sleep(0.25)
    return None


def open_sessions(server) -> Optional[float]:
    import requests

    http = requests.Session()
    http.trust_env = False
    try:
        text = http.get(server.url + "/metrics", timeout=10).text
    except Exception:
        return None
    match = re.search(r"^asr_live_sessions_open (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


# --------------------------------------------------------------------------- the phases


@dataclass
class Phase:
    name: str
    what: str
    started: float = 0.0
    ended: float = 0.0
    sessions: list[Session] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    measured: Optional[tuple[str, ...]] = None  # the sessions whose latencies the table shows (None: all)

    def live(self, names: Optional[tuple[str, ...]] = None) -> dict[str, Any]:
        chosen = [s for s in self.sessions if names is None or s.name in names]
        ms = [s.measures() for s in chosen]
        e2c = [x for m in ms for x in m["end_to_completed"]]
        lag = [x for m in ms for x in m["speaker_lag"]]
        return {"items": sum(m["items"] for m in ms), "completed": sum(m["completed"] for m in ms),
                "failed": sum(m["failed"] for m in ms), "lost": sum(m["lost"] for m in ms),
                "e2c_p50": percentile(e2c, 50), "e2c_p95": percentile(e2c, 95), "e2c_max": max(e2c, default=None),
                "lag_p50": percentile(lag, 50), "lag_p95": percentile(lag, 95),
                "per_session_e2c_p95": [percentile(m["end_to_completed"], 95) for m in ms]}


def check_streamed(phase: Phase, s: Session, expect_close: int = 1000) -> None:
    """A session that streamed and finished: closed by the server with ``expect_close``, no
    error event, every committed item completed or failed."""
    m = s.measures()
    if s.problem:
        phase.problems.append(f"{s.name}: {s.problem}")
    if m["close_code"] != expect_close:
        phase.problems.append(f"{s.name}: closed with {m['close_code']} {m['close_reason']!r}, expected {expect_close}")
    if m["errors"]:
        phase.problems.append(f"{s.name}: error events {m['errors']}")
    if m["lost"]:
        phase.problems.append(f"{s.name}: {m['lost']} of {m['items']} committed items never completed")
    if m["items"] == 0:
        phase.problems.append(f"{s.name}: no item committed (the VAD heard no speech)")


class Run:
    def __init__(self, args, server, audio: np.ndarray, starts: list[int]):
        self.args, self.server, self.url = args, server, server.url
        self.audio, self.starts = audio, starts
        self.phases: list[Phase] = []
        n = len(audio)
        # session i hears the same speech from another recording's start (or another point)
        offsets = [starts[i % len(starts)] if len(starts) >= args.sessions else (i * n // args.sessions)
                   for i in range(max(args.sessions, 2))]
        self.rotations = [frames(np.roll(audio, -o)) for o in offsets]
        clip = audio[:int(args.file_seconds * SR)]
        self.file_wav, self.file_seconds = wav_bytes(clip), len(clip) / SR
        self.drain_s = max(60.0, args.seconds)

    def phase(self, name: str, what: str) -> Phase:
        p = Phase(name, what, started=time.monotonic())
        self.phases.append(p)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {what}", flush=True)
        return p

    async def sessions(self, count: int, speed: float = 1.0, prefix: str = "s") -> list[Session]:
        return list(await asyncio.gather(*(stream(self.url, self.rotations[i], f"{prefix}{i}", speed,
                                                  drain_s=self.drain_s) for i in range(count))))

    async def settle(self, phase: Phase, timeout: float = 30.0) -> None:
        """Wait until the server has no session open (every session of the phase has ended)."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = await asyncio.to_thread(open_sessions, self.server)
            if value == 0:
                return
            await asyncio.sleep(0.25)
        phase.problems.append(f"{value} session(s) still open on the server {timeout:g} s after the phase")

    # -- baselines and load ----------------------------------------------------------------------

    async def alone(self) -> None:
        p = self.phase("alone", "1 session at real time; then the file request alone, 3 times")
        p.sessions = await self.sessions(1)
        check_streamed(p, p.sessions[0])
        for _ in range(3):
            p.files.append(await asyncio.to_thread(post_file, self.url, self.file_wav))
        self.check_files(p)
        await self.settle(p)

    async def concurrent(self) -> None:
        n = self.args.sessions
        p = self.phase("concurrent", f"{n} sessions at real time at once; one more connection refused")

        async def one_more():
            await asyncio.sleep(3)
            extra = await stream(self.url, self.rotations[0][:50], "extra", drain_s=10)
            codes = extra.error_codes()
            p.extra["over_limit"] = {"errors": codes, "close_code": extra.close_code}
            if codes != ["session_limit_reached"] or extra.close_code != 1013:
                p.problems.append(f"session {n + 1} of MAX_SESSIONS={n}: errors {codes}, close "
                                  f"{extra.close_code}; expected session_limit_reached and 1013")

        results = await asyncio.gather(self.sessions(n), one_more())
        p.sessions = results[0]
        for s in p.sessions:
            check_streamed(p, s)
        await self.settle(p)

    async def mixed(self) -> None:
        n = self.args.sessions
        p = self.phase("mixed", f"{n} sessions at real time while file requests of {self.file_seconds:g} s "
                                f"arrive one after another")
        stop = asyncio.Event()
        files = asyncio.ensure_future(file_requests(self.url, self.file_wav, stop))
        p.sessions = await self.sessions(n)
        stop.set()
        p.files = await files
        for s in p.sessions:
            check_streamed(p, s)
        self.check_files(p)
        await self.settle(p)

    def check_files(self, p: Phase) -> None:
        bad = [f for f in p.files if f["status"] != 200]
        if not p.files:
            p.problems.append("no file request was answered")
        for f in bad:
            p.problems.append(f"file request: status {f['status']} {f['body']}")

    # -- faults ----------------------------------------------------------------------------------

    async def flood(self) -> None:
        p = self.phase("flood", "1 session sending 10x faster than real time"
                       + (", 1 at real time beside it" if self.args.sessions >= 2 else ""))
        # its pings would wait behind its own audio, which the server reads at the model's pace
        # (TCP backpressure): a client sending ahead of real time keeps no keepalive timeout
        jobs = [stream(self.url, self.rotations[0], "flood10x", speed=10.0, drain_s=self.drain_s * 2,
                       ping_interval=None)]
        if self.args.sessions >= 2:
            jobs.append(stream(self.url, self.rotations[1], "beside", drain_s=self.drain_s))
        p.sessions = list(await asyncio.gather(*jobs))
        for s in p.sessions:
            check_streamed(p, s)
        flood = p.sessions[0]
        entry = await wait_session_line(self.server, flood.session_id, 10)
        sent_s = len(flood.frame_sent) * FRAME_MS / 1000
        fm = flood.measures()
        last_completed = max((t for t, _ in flood.of(COMPLETED)), default=None)
        p.extra["flood"] = {"audio_sent_s": round(sent_s, 2),
                            "audio_counted_by_server_s": entry.get("audio_seconds") if entry else None,
                            "send_wall_s": round(flood.frame_sent[-1] - flood.started, 2) if flood.frame_sent else None,
                            "last_completed_s": round(last_completed - flood.started, 2) if last_completed else None,
                            **{k: fm[k] for k in ("items", "completed", "failed", "lost")}}
        if len(p.sessions) > 1:
            p.measured = ("beside",)  # the flood's own latencies count from frames sent ahead of time
        p.notes.append(f"10x: {sent_s:.0f} s of audio sent in {p.extra['flood']['send_wall_s']} s, "
                       f"{fm['completed']}/{fm['items']} items completed, the last "
                       f"{p.extra['flood']['last_completed_s']} s after the start; server counted "
                       f"{p.extra['flood']['audio_counted_by_server_s']} s"
                       + ("; latencies: the real-time session beside it" if p.measured else ""))
        if entry is None or abs(entry.get("audio_seconds", 0) - sent_s) > 0.05:
            p.problems.append(f"flood: the server counted {entry and entry.get('audio_seconds')} s of the "
                              f"{sent_s:.2f} s sent")
        await self.settle(p)

    async def malformed(self) -> None:
        p = self.phase("malformed", "bad JSON, bad base64, odd PCM, unknown event, array, empty, binary, "
                                    "oversized append; then a message over the WebSocket limit")
        too_large = "A" * (self.args.max_frame_bytes // 3 * 4 + 4096)  # over LIVE_MAX_FRAME_BYTES, under ws_max_size
        cases = [("not JSON", "{not json"), ("bad base64", json.dumps({"type": "input_audio_buffer.append", "audio": "!!!!"})),
                 ("odd PCM", json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()})),
                 ("unknown event", json.dumps({"type": "response.create"})),
                 ("JSON array", json.dumps([1, 2])), ("empty", ""), ("binary", b"\x00\x01binary"),
                 ("no type", json.dumps({"audio": "AAAA"})),
                 ("oversized append", json.dumps({"type": "input_audio_buffer.append", "audio": too_large}))]
        s = Session("malformed")
        answered: dict[str, Any] = {}
        try:
            async with connect(self.url) as ws:
                created = json.loads(await asyncio.wait_for(ws.recv(), 30))
                s.session_id = created.get("session", {}).get("id")
                await ws.send(json.dumps({"type": "session.update", "session": {
                    "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
                                                                 "turn_detection": None}}}}))
                await asyncio.wait_for(ws.recv(), 30)
                for label, message in cases:
                    await ws.send(message)
                    event = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    answered[label] = event.get("error", {}).get("code") if event.get("type") == "error" \
                        else f"no error: {event.get('type')}"
                for message in self.rotations[0][:100]:  # 2 s of speech, then a commit: still transcribing
                    await ws.send(message)
                await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
                while True:
                    event = json.loads(await asyncio.wait_for(ws.recv(), 120))
                    s.events.append((time.perf_counter(), event))
                    if event.get("type") in (COMPLETED, FAILED):
                        break
        except Exception as exc:
            p.problems.append(f"malformed: {type(exc).__name__}: {exc}"[:300])
        p.extra["answers"] = answered
        for label, code in answered.items():
            if code is None or str(code).startswith("no error"):
                p.problems.append(f"malformed {label}: {code}")
        if not s.of(COMPLETED):
            p.problems.append("malformed: the session did not transcribe after the bad messages")
        # one message over the WebSocket's own size limit (ws_max_size): the transport closes with 1009
        huge = "A" * (self.args.max_frame_bytes // 3 * 4 + 128 * 1024)
        close = None
        try:
            async with connect(self.url) as ws:
                await asyncio.wait_for(ws.recv(), 30)
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": huge}))
                try:
                    while True:
                        await asyncio.wait_for(ws.recv(), 30)
                except Exception:
                    pass
                close = ws.close_code
        except Exception as exc:
            p.problems.append(f"over the WebSocket limit: {type(exc).__name__}: {exc}"[:300])
        p.extra["over_ws_limit_close"] = close
        if close != 1009:
            p.problems.append(f"a message over the WebSocket limit: close {close}, expected 1009")
        p.notes.append(f"{len(answered)} bad messages, {sum(1 for c in answered.values() if c and not str(c).startswith('no error'))}"
                       f" error events; over the ws limit: close {close}")
        await self.settle(p)

    async def no_read(self) -> None:
        limit = self.args.send_timeout + 50
        p = self.phase("no_read", f"a client flooding events and reading nothing (4 KiB receive buffer), "
                                  f"{limit:g} s at most")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        host, port = self.url.removeprefix("http://").split(":")
        sock.connect((host, int(port)))
        sent, session_id, ended = 0, None, None
        started = time.monotonic()
        # each gets an error event; 20 ms of silence a second keeps the session from being idle
        message = json.dumps({"type": "response.create", "event_id": "x" * 4000})  # echoed: 4.4 kB back
        silence = json.dumps({"type": "input_audio_buffer.append",
                              "audio": base64.b64encode(bytes(RATE * FRAME_MS // 1000 * 2)).decode()})
        send_error = None
        from websockets.exceptions import ConnectionClosed

        try:
            async with connect(self.url, sock=sock, max_queue=1) as ws:
                created = json.loads(await asyncio.wait_for(ws.recv(), 30))
                session_id = created.get("session", {}).get("id")
                checked = last_audio = 0.0
                # stuck, but connected: only the server may end this session
                while time.monotonic() - started < limit:
                    try:
                        quiet = time.monotonic() - last_audio >= 1.0
                        await asyncio.wait_for(ws.send(silence if quiet else message), 0.5)
                        sent += 1
                        if quiet:
                            last_audio = time.monotonic()
                    except asyncio.TimeoutError:  # the server stopped reading: it is waiting on us
                        pass
                    except ConnectionClosed as exc:  # the server dropped the connection
                        send_error = f"{type(exc).__name__}: {exc}"[:200]
                        ended = time.monotonic() - started
                        break
                    if time.monotonic() - checked > 0.5:
                        checked = time.monotonic()
                        if session_line(self.server, session_id) is not None:
                            ended = checked - started
                            break
                    if sent % 100 == 0:
                        await asyncio.sleep(0)
                ws.transport.abort()  # leave without a closing handshake (it would wait for us to read)
        except Exception as exc:  # the server dropped the connection
            send_error = send_error or f"{type(exc).__name__}: {exc}"[:200]
        entry = await wait_session_line(self.server, session_id, 15)
        p.extra.update(messages_sent=sent, ended_after_s=ended, client_saw=send_error,
                       server_outcome=entry and entry.get("outcome"))
        if ended is None and send_error is None:
            p.problems.append(f"a client that reads nothing: the server had not ended its session after "
                              f"{limit:g} s ({sent} messages sent)")
        p.notes.append(f"{sent} messages sent unread; session ended after "
                       f"{'-' if ended is None else f'{ended:.1f} s'} ({entry and entry.get('outcome')})")
        # the slot is free again: a new session starts
        check = await stream(self.url, self.rotations[0][:25], "after", finish_session=True, drain_s=30)
        if not check.session_id:
            p.problems.append(f"no new session after the stuck one: {check.error_codes()} {check.problem}")
        await self.settle(p)

    async def disconnect(self) -> None:
        p = self.phase("disconnect", "a client dropping its connection mid-utterance"
                       + (", a real-time session beside it" if self.args.sessions >= 2 else ""))
        jobs = [stream(self.url, self.rotations[0], "dropped", drop_after=1.0)]
        if self.args.sessions >= 2:
            jobs.append(stream(self.url, self.rotations[1], "beside", drain_s=self.drain_s))
        p.sessions = list(await asyncio.gather(*jobs))
        dropped = p.sessions[0]
        entry = await wait_session_line(self.server, dropped.session_id, 15)
        p.extra["dropped_outcome"] = entry and entry.get("outcome")
        if entry is None:
            p.problems.append("the dropped client's session did not end within 15 s")
        if not dropped.of("input_audio_buffer.speech_started"):
            p.problems.append("the dropped client heard no speech_started before it left")
        for s in p.sessions[1:]:
            check_streamed(p, s)
        p.notes.append(f"dropped after {len(dropped.frame_sent) * FRAME_MS / 1000:.1f} s of audio, "
                       f"mid-item; server outcome {entry and entry.get('outcome')}")
        await self.settle(p)

    async def idle(self) -> None:
        timeout = self.args.idle_timeout
        p = self.phase("idle", f"a client that never sends audio (LIVE_IDLE_TIMEOUT_S={timeout:g})")
        s = Session("idle")
        started = time.perf_counter()
        try:
            async with connect(self.url) as ws:
                try:
                    while time.perf_counter() - started < timeout + 30:
                        event = json.loads(await asyncio.wait_for(ws.recv(), timeout + 30))
                        s.events.append((time.perf_counter(), event))
                except Exception:
                    pass
                s.close_code, s.close_reason = ws.close_code, ws.close_reason or ""
        except Exception as exc:
            s.problem = f"{type(exc).__name__}: {exc}"[:300]
        s.ended = time.perf_counter()
        p.sessions = [s]
        waited = s.ended - started
        p.extra.update(errors=s.error_codes(), close_code=s.close_code, ended_after_s=round(waited, 2))
        if s.close_code is None or not s.error_codes():
            p.problems.append(f"an idle client: errors {s.error_codes()}, close {s.close_code} after {waited:.1f} s "
                              f"(expected an error event and a close within {timeout:g} s)")
        elif waited > timeout + 5:
            p.problems.append(f"an idle client was closed after {waited:.1f} s, the timeout is {timeout:g} s")
        p.notes.append(f"errors {s.error_codes()}, close {s.close_code} after {waited:.1f} s")
        await self.settle(p)

    async def sigterm(self) -> None:
        n = self.args.sessions
        p = self.phase("sigterm", f"{n} sessions streaming and a file request in flight, then SIGTERM")
        jobs = [asyncio.ensure_future(stream(self.url, self.rotations[i], f"s{i}", drain_s=30)) for i in range(n)]
        long_wav = wav_bytes(self.audio[:int(min(len(self.audio) / SR, 60) * SR)])
        file_job = asyncio.ensure_future(asyncio.to_thread(post_file, self.url, long_wav, 60))
        await asyncio.sleep(min(8.0, self.args.seconds / 2))
        sent = time.monotonic()
        os.kill(self.server.proc.pid, signal.SIGTERM)
        exit_s = None
        while time.monotonic() - sent < 30:
            if self.server.proc.poll() is not None:
                exit_s = time.monotonic() - sent
                break
            await asyncio.sleep(0.05)
        p.sessions = list(await asyncio.gather(*jobs))
        p.files = [await file_job]
        p.extra.update(exit_s=exit_s, returncode=self.server.proc.returncode,
                       sessions=[{"errors": s.error_codes(), "close_code": s.close_code,
                                  "close_reason": s.close_reason} for s in p.sessions],
                       file=p.files[0])
        if exit_s is None or exit_s > SIGTERM_EXIT_S:
            p.problems.append(f"SIGTERM: the server exited after {exit_s if exit_s is None else round(exit_s, 1)} s "
                              f"(at most {SIGTERM_EXIT_S:g})")
        for s in p.sessions:
            if s.close_code is None and not s.error_codes():
                p.problems.append(f"SIGTERM: {s.name} got neither a closing event nor a close code ({s.problem})")
        p.notes.append(f"exit after {'-' if exit_s is None else f'{exit_s:.1f} s'}; sessions: "
                       + ", ".join(f"{s.error_codes() or 'no error event'} close {s.close_code}" for s in p.sessions)
                       + f"; file request: {p.files[0]['status']}")


# --------------------------------------------------------------------------- report


def fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(run: Run, rss: RssWatch) -> list[str]:
    lines = ["| phase | what | items completed / committed | speech end -> completed p50 / p95 s "
             "| speaker lag p50 / p95 s | file request p50 / p95 s (n) | server RSS start / peak / end MB "
             "| faults seen | problems |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in run.phases:
        live = p.live(p.measured)
        lat = [f["latency"] for f in p.files if f["status"] == 200]
        mem = rss.between(p.started, p.ended)
        items = f"{live['completed']} / {live['items']}" + (f" ({live['failed']} failed)" if live["failed"] else "")
        lines.append(f"| {p.name} | {p.what} | {items if live['items'] else '-'} "
                     f"| {fmt(live['e2c_p50'])} / {fmt(live['e2c_p95'])} | {fmt(live['lag_p50'])} / {fmt(live['lag_p95'])} "
                     f"| {fmt(percentile(lat, 50))} / {fmt(percentile(lat, 95))} ({len(lat)}) "
                     f"| {fmt(mem['start_mb'], 0)} / {fmt(mem['peak_mb'], 0)} / {fmt(mem['end_mb'], 0)} "
                     f"| {'; '.join(p.notes) or '-'} | {len(p.problems)} |")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", choices=("auto", "real", "tiny"), default="auto",
                        help="real: $REAL_MODELS_DIR's whisper-tiny.en + pyannote-campp-3.1; tiny: the tiny random "
                             "models; auto: real where present")
    parser.add_argument("--sessions", type=int, default=2, help="MAX_SESSIONS, and the sessions at once (1-8)")
    parser.add_argument("--seconds", type=float, default=90.0, help="seconds of speech each session streams (5-600)")
    parser.add_argument("--audio", type=Path, nargs="*", help="WAV files or real-meetings folders (default: the AMI "
                        "clips of ../shared/real-meetings, else pyannote.audio's sample)")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument("--file-seconds", type=float, default=5.0, help="the file request's audio (seconds)")
    # the client that reads nothing sends no audio the server gets to (it is stuck behind the
    # unread events): the idle timeout must leave room for the buffers to fill and the send timeout
    parser.add_argument("--idle-timeout", type=float, default=10.0, help="the server's LIVE_IDLE_TIMEOUT_S")
    parser.add_argument("--send-timeout", type=float, default=3.0, help="the server's LIVE_SEND_TIMEOUT_S")
    parser.add_argument("--max-frame-bytes", type=int, default=1024 * 1024,
                        help="the server's LIVE_MAX_FRAME_BYTES (its default)")
    parser.add_argument("--max-ratio", type=float, default=2.0,
                        help="concurrent p95 speech end -> completed may be at most this x the lone session's")
    parser.add_argument("--max-growth-mb", type=float, default=1500.0,
                        help="the server's RSS may rise at most this far above its loaded size")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="another setting for the server (repeatable)")
    parser.add_argument("--limit-minutes", type=float, default=30.0, help="the whole run's time limit")
    parser.add_argument("--work", type=Path, help="folder for the tiny models and the server log")
    parser.add_argument("--json", help="write the full result here")
    args = parser.parse_args(argv)
    if not 1 <= args.sessions <= 8:
        parser.error("--sessions must be between 1 and 8")
    if not 5 <= args.seconds <= 600:
        parser.error("--seconds must be between 5 and 600")
    phases = [name.strip() for name in args.phases.split(",") if name.strip()]
    unknown = [name for name in phases if name not in PHASES]
    if unknown:
        parser.error(f"--phases: unknown {unknown}; use any of {', '.join(PHASES)}")
    if "sigterm" in phases and phases[-1] != "sigterm":
        phases = [n for n in phases if n != "sigterm"] + ["sigterm"]  # it ends the server
    from speaker_asr.testing.long_audio import resolve_models

    args.models = resolve_models(args.models, REAL)
    work = args.work or Path(tempfile.gettempdir()) / "asr-live-load"
    work.mkdir(parents=True, exist_ok=True)
    paths = args.audio or default_audio()
    audio, starts, names = speech(paths, args.seconds)

    started_wall = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_before = os.getloadavg()
    server, ready_s = start_server(args, work)
    print(f"server {server.url} (pid {server.proc.pid}, {args.models} models) ready after {ready_s:.1f} s; "
          f"log {server.log_path}", flush=True)
    rss = RssWatch(server.proc.pid).start()
    time.sleep(1.0)
    loaded_mb = rss.rss()
    run = Run(args, server, audio, starts)
    loads = [os.getloadavg()]
    try:
        async def all_phases():
            for name in phases:
                task = getattr(run, name)()
                try:
                    await asyncio.wait_for(task, args.limit_minutes * 60)
                except asyncio.TimeoutError:
                    run.phases[-1].problems.append(f"{name}: not done within the run's time limit")
                run.phases[-1].ended = time.monotonic()
                loads.append(os.getloadavg())
                print(f"    {name}: {len(run.phases[-1].problems)} problem(s) "
                      f"{run.phases[-1].problems[:3]}", flush=True)

        asyncio.run(all_phases())
    finally:
        rss.stop()
        log = server.log()
        server.stop()  # by its pid (SIGTERM, then SIGKILL after 20 s); after the sigterm phase, only its log
    tracebacks = log.count("Traceback")

    problems = [f"{p.name}: {x}" for p in run.phases for x in p.problems]
    by = {p.name: p for p in run.phases}
    ratio = None
    if "alone" in by and "concurrent" in by:
        alone_p95, conc = by["alone"].live()["e2c_p95"], by["concurrent"].live()
        worst = max((x for x in conc["per_session_e2c_p95"] if x is not None), default=None)
        if alone_p95 and worst is not None:
            ratio = worst / alone_p95
            if ratio > args.max_ratio:
                problems.append(f"concurrent: the slowest session's p95 {worst:.2f} s is {ratio:.2f}x the lone "
                                f"session's {alone_p95:.2f} s (at most {args.max_ratio:g}x)")
    peak = max((v for _, v in rss.samples), default=None)
    if loaded_mb and peak and peak - loaded_mb > args.max_growth_mb:
        problems.append(f"server RSS peaked at {peak:.0f} MB, {peak - loaded_mb:.0f} MB above its loaded "
                        f"{loaded_mb:.0f} MB (at most {args.max_growth_mb:g})")
    if tracebacks:
        problems.append(f"{tracebacks} traceback(s) in the server's log ({server.log_path})")

    lines = table(run, rss)
    print()
    print(f"live_load: {args.models} models, MAX_SESSIONS={args.sessions}, {args.seconds:g} s of speech per "
          f"session ({', '.join(names)}), started {started_wall}, load average "
          f"{load_before[0]:.2f} at the start, {', '.join(f'{l[0]:.2f}' for l in loads[1:])} after each phase")
    print(f"server RSS after loading {fmt(loaded_mb, 0)} MB, peak {fmt(peak, 0)} MB")
    print()
    print("\n".join(lines))
    print()
    for x in problems:
        print(f"  problem: {x}")
    result = {"models": args.models, "sessions": args.sessions, "seconds": args.seconds, "audio": names,
              "started": started_wall, "load_average": {"start": load_before, "after_phases": loads[1:]},
              "server_ready_s": ready_s, "loaded_rss_mb": loaded_mb, "peak_rss_mb": peak,
              "concurrent_vs_alone_p95": ratio, "tracebacks": tracebacks, "problems": problems,
              "rss": [(round(t - rss.samples[0][0], 2), v) for t, v in rss.samples] if rss.samples else [],
              "phases": [{"name": p.name, "what": p.what, "seconds": round(p.ended - p.started, 1),
                          "live": p.live(), "files": p.files, "notes": p.notes, "problems": p.problems,
                          "extra": p.extra, "rss": rss.between(p.started, p.ended),
                          "sessions": [{"name": s.name, "session_id": s.session_id,
                                        **{k: v for k, v in s.measures().items()},
                                        "events": [(round(t - s.started, 3), e) for t, e in s.events]}
                                       for s in p.sessions]} for p in run.phases]}
    alone = by.get("alone").live() if "alone" in by else {}
    conc = by.get("concurrent").live() if "concurrent" in by else {}
    summary = (f"phases={len(run.phases)} problems={len(problems)} alone_p95={fmt(alone.get('e2c_p95'))}s "
               f"concurrent_p95={fmt(conc.get('e2c_p95'))}s ratio={fmt(ratio)} "
               f"rss_loaded={fmt(loaded_mb, 0)}MB rss_peak={fmt(peak, 0)}MB "
               f"sigterm_exit={fmt(by['sigterm'].extra.get('exit_s'), 1) if 'sigterm' in by else '-'}s")
    return finish("live_load", summary, result, args.json, not problems)


if __name__ == "__main__":
    raise SystemExit(main())
