"""A run's account: the :class:`Manifest` (a JSON line per recording) and the :class:`Summary`."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from speaker_asr.batch.errors import STATUSES
from speaker_asr.batch.run import FileResult

logger = logging.getLogger("speaker_asr.batch")


class Manifest:
    """One JSON object per line (:meth:`FileResult.to_json`), each written and flushed as its
    recording finishes, so an interrupted run's manifest holds what it did."""

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        if self.path.parent != Path(""):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

    def write(self, result: FileResult) -> None:
        self._file.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "Manifest":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def hours_text(seconds: float) -> str:
    """``5400`` -> ``1.50 h``; under an hour also in minutes."""
    if seconds < 3600:
        return f"{seconds / 3600:.2f} h ({seconds / 60:.1f} min)"
    return f"{seconds / 3600:.2f} h"


@dataclass
class Summary:
    """Counts, failures (recording, reason), audio transcribed and wall time of a run."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    failures: list[tuple[str, str]] = field(default_factory=list)
    audio_seconds: float = 0.0
    wall_seconds: float = 0.0
    stopped_because: Optional[str] = None
    interrupted: bool = False

    def add(self, result: FileResult) -> None:
        self.counts[result.status] += 1
        if result.status == "failed":
            self.failures.append((result.job.name, result.error or "unknown error"))
        if result.status == "done" and result.duration:
            self.audio_seconds += result.duration

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> bool:
        """Every recording is transcribed (done now or before)."""
        return self.counts["failed"] == 0 and self.counts["not_attempted"] == 0

    def rtf(self) -> Optional[float]:
        """Wall time over audio time (0.1: ten times faster than real time)."""
        return self.wall_seconds / self.audio_seconds if self.audio_seconds > 0 else None

    def lines(self) -> list[str]:
        c = self.counts
        total = self.total
        out = [f"{total} recording{'s' if total != 1 else ''}: done {c['done']}, skipped {c['skipped']} "
               f"(already done), failed {c['failed']}"
               + (f", not attempted {c['not_attempted']}" if c["not_attempted"] else "")
               + f"; wall time {self.wall_seconds:.1f} s"]
        if c["done"]:
            rtf = self.rtf()
            out.append(f"audio transcribed: {hours_text(self.audio_seconds)}"
                       + (f", real-time factor {rtf:.3f} (wall time / audio time)" if rtf is not None else ""))
        if self.failures:
            out.append("failed:")
            out.extend(f"  {name}: {reason}" for name, reason in self.failures)
        if self.stopped_because:
            out.append(f"stopped: {self.stopped_because}")
        if self.interrupted:
            out.append("interrupted: what is done is written in full")
        if c["not_attempted"] or c["failed"]:
            out.append("run the same command again to retry the rest (finished recordings are skipped)")
        return out
