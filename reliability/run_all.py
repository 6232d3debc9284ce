"""Every reliability check, one after another, and one summary.

    python reliability/run_all.py                          # matrix, fuzz 2000, load 50, long audio 10 min
    python reliability/run_all.py --long-minutes 60 --fuzz-inputs 5000
    python reliability/run_all.py --skip long              # any of: matrix fuzz load long
    python reliability/run_all.py --matrix-args "-k empty-body" --fuzz-inputs 20 --load-requests 4 \
        --long-minutes 0.25 --long-args "--models tiny"    # every step, in about a minute

Runs, each in its own process with a time limit:

1. ``pytest tests/serving/test_reliability.py`` -- the bad-input matrix, concurrency and token checks;
2. ``fuzz_decoder.py`` -- random and mutated bytes through the decoder;
3. ``load.py`` -- concurrent mixed requests against a local server with the tiny models;
4. ``long_audio.py`` -- N minutes end to end through the handler (real models when present).

and prints:

    cases tried/passed, fuzz inputs/crashes, concurrent requests sent/lost/mismatched, peak RSS
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

from _common import ROOT

HERE = Path(__file__).resolve().parent
STEPS = ("matrix", "fuzz", "load", "long")


def run(cmd: list[str], limit_s: float) -> tuple[Optional[int], float, str]:
    started = time.perf_counter()
    print(f"$ {' '.join(cmd)}", flush=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, timeout=limit_s, capture_output=True, text=True)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, time.perf_counter() - started, out
    output = proc.stdout + proc.stderr
    # the scripts' own summary lines, as they come
    for line in proc.stdout.splitlines():
        if line.startswith(("load:", "fuzz_decoder:", "long_audio:", "  {")) or " passed" in line or " failed" in line:
            print(f"  {line}", flush=True)
    return proc.returncode, time.perf_counter() - started, output


MATRIX_TESTS = "tests/serving/test_reliability.py"


def matrix(work: Path, limit_s: float, pytest_args: list[str]) -> dict[str, Any]:
    report = work / "matrix.xml"
    report.unlink(missing_ok=True)
    code, seconds, output = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 MATRIX_TESTS, f"--junitxml={report}", *pytest_args], limit_s)
    result: dict[str, Any] = {"returncode": code, "seconds": seconds}
    if report.exists():
        cases = ET.parse(report).getroot().iter("testcase")
        counts = {"tried": 0, "passed": 0, "failed": 0, "xfailed": 0, "skipped": 0}
        failed = []
        for case in cases:
            counts["tried"] += 1
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
                failed.append(case.get("name"))
            elif case.find("skipped") is not None:
                kind = case.find("skipped").get("type", "")
                counts["xfailed" if "xfail" in kind else "skipped"] += 1
            else:
                counts["passed"] += 1
        result.update(counts, failed_cases=failed)
    else:
        result["error"] = output[-2000:]
    return result


def script(name: str, args: list[str], work: Path, limit_s: float) -> dict[str, Any]:
    out = work / f"{name}.json"
    out.unlink(missing_ok=True)
    code, seconds, output = run([sys.executable, str(HERE / f"{name}.py"), *args, f"--json={out}"], limit_s)
    result: dict[str, Any] = {"returncode": code, "seconds": seconds}
    if out.exists():
        result.update(json.loads(out.read_text()))
    else:
        result["error"] = "timed out" if code is None else output[-2000:]
    return result


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz-inputs", type=int, default=2000)
    parser.add_argument("--fuzz-seed", type=int, default=0)
    parser.add_argument("--load-requests", type=int, default=50)
    parser.add_argument("--long-minutes", default="10", help="long_audio.py --minutes (comma list allowed)")
    parser.add_argument("--long-args", default="", help="more long_audio.py options, e.g. '--models tiny'")
    parser.add_argument("--matrix-args", default="", help="more pytest options for the matrix, e.g. '-k empty-body'")
    parser.add_argument("--skip", action="append", default=[], choices=STEPS)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "asr-reliability")
    parser.add_argument("--json", help="write every result here")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)

    results: dict[str, Any] = {}
    if "matrix" not in args.skip:
        results["matrix"] = matrix(args.work, 15 * 60, shlex.split(args.matrix_args))
    if "fuzz" not in args.skip:
        results["fuzz"] = script("fuzz_decoder", [f"--inputs={args.fuzz_inputs}", f"--seed={args.fuzz_seed}",
                                                  f"--save={args.work / 'fuzz-findings'}"], args.work, 60 * 60)
    if "load" not in args.skip:
        results["load"] = script("load", [f"--requests={args.load_requests}", f"--work={args.work}"],
                                 args.work, 30 * 60)
    if "long" not in args.skip:
        results["long"] = script("long_audio", [f"--minutes={args.long_minutes}", f"--work={args.work}",
                                                *shlex.split(args.long_args)], args.work, 4 * 60 * 60)

    print("\nreliability summary", flush=True)
    ok = True
    if "matrix" in results:
        m = results["matrix"]
        if "tried" in m:
            print(f"  bad-input matrix + concurrency + token ({MATRIX_TESTS}): cases tried {m['tried']}, "
                  f"passed {m['passed']}, xfailed {m['xfailed']}, failed {m['failed']}"
                  + (f" {m['failed_cases']}" if m["failed_cases"] else "") + f" ({m['seconds']:.0f} s)")
            ok &= m["failed"] == 0
        else:
            print(f"  matrix: did not run: {m.get('error', '')[-300:]}")
            ok = False
    if "fuzz" in results:
        f = results["fuzz"]
        if "inputs" in f:
            kinds = sorted({x["detail"] for x in f.get("findings", [])})
            print(f"  decoder fuzz: inputs {f['inputs']} (seed {f['seed']}), crashes {f['crashes']}, "
                  f"bad outputs {f['bad_outputs']}, hard crashes {f['hard_crashes']}, timeouts {f['timeouts']}"
                  + (f" -- {kinds[:3]}" if kinds else "") + f" ({f['wall_s']:.0f} s)")
            ok &= f["passed"]
        else:
            print(f"  fuzz: did not finish: {f.get('error', '')[-300:]}")
            ok = False
    if "load" in results:
        lo = results["load"]
        if "sent" in lo:
            p = lambda v: "-" if v is None else f"{v:.1f} s"  # noqa: E731
            print(f"  concurrent load: sent {lo['sent']}, ok {lo['ok']}, 4xx {lo['4xx']}, 5xx {lo['5xx']}, "
                  f"lost {lo['lost']}, mismatched {lo['mismatched']}, latency p50 {p(lo['latency_p50_s'])} "
                  f"p95 {p(lo['latency_p95_s'])}, /health {lo['health_ok']}/{lo['health_polls']} ok")
            ok &= lo["passed"]
        else:
            print(f"  load: did not finish: {lo.get('error', '')[-300:]}")
            ok = False
    if "long" in results:
        la = results["long"]
        for r in la.get("runs", []):
            if "error" in r:
                print(f"  long audio {r['minutes']:g} min ({la.get('models')} models): FAILED {r['error'][:300]}")
            else:
                print(f"  long audio {r['minutes']:g} min ({la.get('models')} models, {r['audio']['source']}): "
                      f"wall {r['wall_s']:.0f} s (RTF {r['rtf']:.2f}), peak RSS {r['peak_rss_mb']:.0f} MB, "
                      f"{r['peak_above_loaded_mb']:.0f} MB above the loaded models ({r['rss_loaded_mb']:.0f} MB)")
        if la.get("fit"):
            print(f"  long audio growth: {la['fit']['mb_per_minute']:.1f} MB per audio minute")
        if "runs" not in la:
            print(f"  long audio: did not finish: {la.get('error', '')[-300:]}")
        ok &= bool(la.get("runs")) and all("error" not in r for r in la["runs"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    print(f"  overall: {'ok' if ok else 'FAILURES (see above)'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
