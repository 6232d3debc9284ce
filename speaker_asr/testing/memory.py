"""This process's memory, for the scripts that measure it (``bench/``, ``reliability/``): the
resident set size now, its peak so far (``ru_maxrss``), an address-space cap, and a sampler thread
that keeps the highest RSS seen while each named stage ran.

Linux only (``/proc/self/status``); nothing of the endpoint imports it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


def rss_mb() -> float:
    """This process's resident set size now (MiB; NaN where ``/proc`` has no VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def max_rss_mb() -> float:
    """This process's peak resident set size so far (MiB, ``ru_maxrss``)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cap_address_space(gigabytes: float) -> None:
    """Cap this process's address space: an allocation past it fails here (a ``MemoryError`` or
    a torch error) instead of the OOM killer picking some process on the machine."""
    import resource

    cap = int(gigabytes * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


class RssSampler:
    """VmRSS every ``interval`` s on a thread of its own: the overall peak (``peak``) and, for each
    stage between :meth:`begin` and :meth:`end` (or a call wrapped by :meth:`wrap`; stages may
    overlap), in ``stages[name]``: ``start_s`` / ``end_s`` (seconds since :meth:`start`),
    ``seconds``, ``rss_start_mb`` / ``rss_end_mb``, ``rss_peak_sampled_mb`` (the highest sample
    while it ran, its start and end included), ``ru_maxrss_start_mb`` / ``ru_maxrss_end_mb``, and
    ``rss_peak_mb``: the sampled peak, or ``ru_maxrss`` at its end where that rose while the stage
    ran (the process's peak was then reached during it: exact, not sampled)."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.t0 = time.perf_counter()
        self.active: set[str] = set()
        self.stages: dict[str, dict[str, float]] = {}
        self.peak = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def start(self) -> "RssSampler":
        self.t0 = time.perf_counter()
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
        """Take one sample now (it counts for every active stage); the RSS in MiB."""
        value = rss_mb()
        with self._lock:
            self.peak = max(self.peak, value)
            for name in self.active:
                stage = self.stages[name]
                stage["rss_peak_sampled_mb"] = max(stage["rss_peak_sampled_mb"], value)
        return value

    def begin(self, name: str) -> None:
        value = self.sample()
        with self._lock:
            self.active.add(name)
            self.stages[name] = {"start_s": time.perf_counter() - self.t0, "rss_start_mb": value,
                                 "rss_peak_sampled_mb": value, "ru_maxrss_start_mb": max_rss_mb()}

    def end(self, name: str) -> None:
        value = self.sample()
        maxrss = max_rss_mb()
        with self._lock:
            self.active.discard(name)
            stage = self.stages[name]
            stage["end_s"] = time.perf_counter() - self.t0
            stage["seconds"] = stage["end_s"] - stage["start_s"]
            stage["rss_end_mb"] = value
            stage["ru_maxrss_end_mb"] = maxrss
            rose = maxrss > stage["ru_maxrss_start_mb"]
            stage["rss_peak_mb"] = max(stage["rss_peak_sampled_mb"], maxrss if rose else 0.0)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """A copy of ``stages`` as it is now (a stage still running has no ``end_s`` yet)."""
        with self._lock:
            return {name: dict(stage) for name, stage in self.stages.items()}

    def wrap(self, name: str, fn: Callable) -> Callable:
        """``fn`` run as the stage ``name``."""

        def wrapped(*args, **kwargs):
            self.begin(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.end(name)

        return wrapped
