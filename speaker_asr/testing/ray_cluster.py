"""A real Ray head on this machine, for the tests and the benchmark of ``transcribe --ray``
(speaker_asr/batch/ray_engine.py), inside a network namespace of its own that holds only
loopback.

Outside one, Ray registers and listens on the machine's interface address even with
``--node-ip-address=127.0.0.1``; inside one it binds 127.0.0.1. The head is started as root with
``unshare -n`` (loopback brought up, then ``exec ray start --head --block``), so its process id is
the namespace's first process; the drivers join that namespace with ``nsenter --net=...``
(:meth:`LoopbackRayHead.prefix`). :meth:`LoopbackRayHead.stop` ends the head by its own process id
(SIGTERM: ``ray start --block`` ends the cluster's processes), then any process still in the
namespace, each by its id.

Ray keeps its token (``~/.ray/auth_token``) under ``HOME``: the head and its drivers are given a
``home`` of their own (:meth:`LoopbackRayHead.env`), so that no stray token is left in the
user's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence


def unavailable() -> Optional[str]:
    """Why a loopback-only Ray head cannot run here (None: it can)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install -r requirements-ray.txt)"
    if os.geteuid() != 0:
        return "a network namespace of its own needs root (unshare -n)"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux, iproute2)"
    try:  # a sandbox may forbid new namespaces even to root
        probe = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -n could not run: {exc}"
    if probe.returncode != 0:
        return f"unshare -n is not allowed here: {probe.stderr.strip() or probe.returncode}"
    return None


def ray_command() -> str:
    """The ``ray`` command beside this Python."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else "ray"


def _namespace(pid: int) -> Optional[str]:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


class LoopbackRayHead:
    """``ray start --head`` on 127.0.0.1:``port`` in a loopback-only network namespace, with
    ``num_cpus`` CPUs, its logs in ``log_dir/ray-head.log``; :attr:`address` for ``--ray``."""

    def __init__(self, home: Path, log_dir: Path, port: int = 6379, num_cpus: int = 2,
                 env: Optional[dict] = None):
        self.home = Path(home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.num_cpus = num_cpus
        self.base_env = dict(os.environ if env is None else env)
        self.log_path = Path(log_dir) / "ray-head.log"
        self.proc: Optional[subprocess.Popen] = None
        self.netns: Optional[str] = None

    def env(self, **overrides: str) -> dict:
        """The environment for the head and its drivers: ``HOME`` theirs (Ray's token), no usage
        statistics, and ``overrides``."""
        env = dict(self.base_env)
        env.update(HOME=str(self.home), RAY_USAGE_STATS_ENABLED="0")
        env.update(overrides)
        return env

    def prefix(self) -> list[str]:
        """What to put in front of a command to run it in the head's namespace."""
        assert self.proc is not None, "start() the head first"
        return ["nsenter", f"--net=/proc/{self.proc.pid}/ns/net"]

    def start(self, timeout: float = 120.0) -> "LoopbackRayHead":
        script = (f"ip link set lo up && exec {ray_command()} start --head --block "
                  f"--node-ip-address=127.0.0.1 --port={self.port} --num-cpus={self.num_cpus} "
                  "--num-gpus=0 --include-dashboard=false --disable-usage-stats")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(["unshare", "-n", "sh", "-c", script], env=self.env(),
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Ray head exited ({self.proc.returncode}): see {self.log_path}")
            if self.netns is None:  # once unshare has made it (never this process's own)
                ns = _namespace(self.proc.pid)
                self.netns = ns if ns is not None and ns != _namespace(os.getpid()) else None
                if self.netns is None:
                    time.sleep(0.1)
                    continue
            done = subprocess.run([*self.prefix(), ray_command(), "status", f"--address={self.address}"],
                                  env=self.env(), capture_output=True, timeout=60)
            if done.returncode == 0:
                return self
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"the Ray head was not up within {timeout:g} s: see {self.log_path}")

    def run(self, args: Sequence[str], env: Optional[dict] = None, **kwargs) -> subprocess.CompletedProcess:
        """``args`` run to the end in the head's namespace."""
        return subprocess.run([*self.prefix(), *args], env=env or self.env(), **kwargs)

    def popen(self, args: Sequence[str], env: Optional[dict] = None, **kwargs) -> subprocess.Popen:
        return subprocess.Popen([*self.prefix(), *args], env=env or self.env(), **kwargs)

    def processes(self) -> list[int]:
        """The ids of the processes in the head's namespace."""
        if self.netns is None or self.netns == _namespace(os.getpid()):
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid() and _namespace(int(entry)) == self.netns:
                found.append(int(entry))
        return found

    def worker(self, title: str) -> Optional[int]:
        """The id of the first process in the namespace whose command line starts with ``title``
        (Ray names a busy actor's process ``ray::Class.method``)."""
        for pid in self.processes():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmdline.startswith(title):
                return pid
        return None

    def stop(self, timeout: float = 30.0) -> None:
        """End the head by its process id, then whatever is left in its namespace."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "LoopbackRayHead":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
