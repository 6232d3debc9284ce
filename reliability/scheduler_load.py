"""Short work beside long work on one server: the models' scheduler (speaker_asr/scheduling/)
under the mix it exists for, against a server this script starts on 127.0.0.1 and stops by its
own pid.

    python reliability/scheduler_load.py                     # real tiny.en + pyannote-campp-3.1 (REAL_MODELS_DIR)
    python reliability/scheduler_load.py --long-seconds 180 --short-seconds 30 --json /tmp/scheduler.json
    python reliability/scheduler_load.py --models tiny --long-seconds 20 --short-seconds 4 --live-seconds 8

The audio is real speech (the AMI clips of ../shared/real-meetings when present, else
pyannote.audio's sample), joined and cut: a *long* file (``--long-seconds``), a *short* one
(``--short-seconds``, from another point) and a live session (``--live-seconds`` at real time,
20 ms frames of 24 kHz PCM, server VAD, speaker labels on). Phases, one after another:

* ``alone``: the long file, the short file and the live session, each with nothing else running:
  the baselines (the short file twice, its faster time kept);
* ``short_after_long``: the long file, and the short one sent ``--short-after`` (5) s later;
* ``live_beside_long``: the long file, and the live session started 2 s later;
* ``abandoned``: the long file sent by a client that gives up after ``--abandon-after`` (8) s
  (its connection closed), then the short file at once: the abandoned work must stop at its next
  unit instead of running to its end.

Reported: each latency against the same work alone (speech end -> ``completed`` p95 for the live
session) and whether the long file's answer is the same as alone. Checked (exit 1 otherwise):
the short file within ``--max-short-ratio`` (3) x alone, after the long one and after the
abandoned one; the long file within ``--max-long-ratio`` (1.5) x alone with the same answer; the
live p95 within max(2 x alone, alone + 1 s); every request answered.

Ends with a markdown table and one summary line; ``--json PATH`` keeps everything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

from _common import finish, percentile
from live_load import (default_audio, frames, log_entries, post_file, speech, start_server, stream,
                       wav_bytes)

PHASES = ("alone", "short_after_long", "live_beside_long", "abandoned")


def in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        out.update(fn(*args, **kwargs))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def live_p95(session) -> Optional[float]:
    m = session.measures()
    return percentile(m["end_to_completed"], 95)


def run_phases(url: str, server, long_wav: bytes, short_wav: bytes, live_frames: list[str],
               args) -> dict[str, Any]:
    res: dict[str, Any] = {}
    phases = [p for p in args.phases.split(",") if p]

    def live() -> Any:
        return asyncio.run(stream(url, live_frames, "live", drain_s=300))

    # alone: the baselines
    res["long_alone"] = post_file(url, long_wav, timeout=900.0)
    shorts = [post_file(url, short_wav), post_file(url, short_wav)]
    res["short_alone"] = min(shorts, key=lambda r: r["latency"])
    if "live_beside_long" in phases or "alone" in phases:
        session = live()
        res["live_alone"] = {"p95": live_p95(session), "measures": session.measures()}

    if "short_after_long" in phases:
        long_thread, long_out = in_thread(post_file, url, long_wav, timeout=900.0)
        time.sleep(args.short_after)
        res["short_after_long"] = {"short": post_file(url, short_wav)}
        long_thread.join()
        res["short_after_long"]["long"] = long_out

    if "live_beside_long" in phases:
        long_thread, long_out = in_thread(post_file, url, long_wav, timeout=900.0)
        time.sleep(2.0)
        session = live()
        long_thread.join()
        res["live_beside_long"] = {"p95": live_p95(session), "measures": session.measures(), "long": long_out}

    if "abandoned" in phases:
        gone = post_file(url, long_wav, timeout=args.abandon_after)
        short = post_file(url, short_wav)
        time.sleep(1.0)
        cancelled = [e for e in log_entries(server) if "cancel" in json.dumps(e).lower()]
        res["abandoned"] = {"long": gone, "short": short, "server_lines": cancelled[-3:]}
    return res


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def verdicts(res: dict[str, Any], args) -> list[tuple[str, str, Optional[float], Optional[float], float, bool]]:
    """(phase, what, seconds, ratio to alone, the bound, ok) rows."""
    rows = []
    long0, short0 = res["long_alone"], res["short_alone"]
    if "short_after_long" in res:
        s, l = res["short_after_long"]["short"], res["short_after_long"]["long"]
        rows.append(("short_after_long", "short file", s["latency"], ratio(s["latency"], short0["latency"]),
                     args.max_short_ratio, s["status"] == 200))
        rows.append(("short_after_long", "long file", l.get("latency"), ratio(l.get("latency"), long0["latency"]),
                     args.max_long_ratio, l.get("status") == 200 and l.get("answer") == long0["answer"]))
    if "live_beside_long" in res:
        alone = res["live_alone"]["p95"]
        p95 = res["live_beside_long"]["p95"]
        bound = max(2.0, (alone + 1.0) / alone) if alone else 2.0
        m = res["live_beside_long"]["measures"]
        l = res["live_beside_long"]["long"]
        rows.append(("live_beside_long", "live p95 speech end -> completed", p95, ratio(p95, alone), bound,
                     m["lost"] == 0 and m["completed"] > 0))
        rows.append(("live_beside_long", "long file", l.get("latency"), ratio(l.get("latency"), long0["latency"]),
                     float("inf"), l.get("status") == 200 and l.get("answer") == long0["answer"]))
    if "abandoned" in res:
        s = res["abandoned"]["short"]
        rows.append(("abandoned", "short file after the abandoned long one", s["latency"],
                     ratio(s["latency"], short0["latency"]), args.max_short_ratio, s["status"] == 200))
    return [(p, w, sec, r, bound, ok and r is not None and r <= bound) for p, w, sec, r, bound, ok in rows]


def fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", choices=("real", "tiny"), default="real",
                        help="real: REAL_MODELS_DIR's tiny.en and pyannote-campp-3.1; tiny: random test models")
    parser.add_argument("--audio", type=Path, nargs="*", help="WAV files or real-meetings folders")
    parser.add_argument("--long-seconds", type=float, default=180.0)
    parser.add_argument("--short-seconds", type=float, default=30.0)
    parser.add_argument("--live-seconds", type=float, default=60.0)
    parser.add_argument("--short-after", type=float, default=5.0, help="seconds after the long file")
    parser.add_argument("--abandon-after", type=float, default=8.0, help="the abandoning client's timeout")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma list of {', '.join(PHASES)}")
    parser.add_argument("--max-short-ratio", type=float, default=3.0)
    parser.add_argument("--max-long-ratio", type=float, default=1.5)
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="more server settings (e.g. SCHEDULE_FILE_ORDER=arrival: one request after another)")
    parser.add_argument("--work", type=Path, help="folder for the tiny models and the server log")
    parser.add_argument("--json", help="write the full result here")
    args = parser.parse_args(argv)
    unknown = set(p for p in args.phases.split(",") if p) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}; choose from {', '.join(PHASES)}")

    paths = args.audio or default_audio()
    total = args.long_seconds + args.short_seconds + args.live_seconds
    audio, _, names = speech(paths, total)
    n_long, n_short = int(args.long_seconds * 16000), int(args.short_seconds * 16000)
    long_wav = wav_bytes(audio[:n_long])
    short_wav = wav_bytes(audio[n_long:n_long + n_short])
    live_frames = frames(audio[n_long + n_short:])

    work = args.work or Path(tempfile.mkdtemp(prefix="scheduler-load-"))
    work.mkdir(parents=True, exist_ok=True)
    args.sessions, args.idle_timeout, args.send_timeout = 2, 60.0, 10.0  # start_server's limits
    server, ready = start_server(args, work)
    try:
        if not ready:
            return finish("scheduler_load", "the server did not start", {"log": str(work)}, args.json, False)
        res = run_phases(server.url, server, long_wav, short_wav, live_frames, args)
    finally:
        server.stop()

    rows = verdicts(res, args)
    lines = ["| phase | what | seconds | x alone | bound | ok |", "|---|---|---:|---:|---:|---|"]
    lines.append(f"| alone | long file ({args.long_seconds:g} s) | {fmt(res['long_alone']['latency'])} | 1 | - | "
                 f"{'yes' if res['long_alone']['status'] == 200 else 'no'} |")
    lines.append(f"| alone | short file ({args.short_seconds:g} s) | {fmt(res['short_alone']['latency'])} | 1 | - | "
                 f"{'yes' if res['short_alone']['status'] == 200 else 'no'} |")
    if "live_alone" in res:
        lines.append(f"| alone | live p95 speech end -> completed ({args.live_seconds:g} s) | "
                     f"{fmt(res['live_alone']['p95'])} | 1 | - | yes |")
    for phase, what, sec, r, bound, ok in rows:
        lines.append(f"| {phase} | {what} | {fmt(sec)} | {fmt(r)} | {fmt(bound) if bound != float('inf') else '-'} "
                     f"| {'yes' if ok else 'NO'} |")
    print("\n".join(lines))
    failed = [f"{p}: {w}" for p, w, *_, ok in rows if not ok]
    result = {"models": args.models, "audio": names, "phases": res, "rows": rows, "failed": failed}
    summary = f"checks={len(rows)} failed={len(failed)}" + (f" ({'; '.join(failed)})" if failed else "")
    return finish("scheduler_load", summary, result, args.json, not failed)


if __name__ == "__main__":
    sys.exit(main())
