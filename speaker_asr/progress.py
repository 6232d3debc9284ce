"""How a batch run shows its progress on stderr: a tqdm bar on a terminal (recordings done of
the total, hours of audio done, real-time factor, ETA), one line per recording otherwise (a log
file, CI, a pipe). Failures are printed in both, with their reason, as they happen.

The real-time factor is the run's wall time over the audio it transcribed (0.05: twenty times
faster than real time); the ETA is tqdm's, from the recordings still to do.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Optional

from speaker_asr.batch import FileResult, hours


def _audio(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h audio" if seconds >= 360 else f"{seconds:.0f} s audio"


class LineProgress:
    """One line per recording: ``12:00:03 [3/40] talks/a.wav: done, 61.2 s audio in 4.1 s -> ...``."""

    def __init__(self, total: int, stream: IO[str]):
        self.total = total
        self.stream = stream
        self.count = 0
        self.audio = 0.0
        self.started = time.monotonic()

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def note(self, text: str) -> None:
        self._print(text)

    def update(self, result: FileResult) -> None:
        if result.status == "skipped":
            return
        self.count += 1
        stamp = time.strftime("%H:%M:%S")
        where = f"{stamp} [{self.count}/{self.total}] {result.job.name}"
        seconds = result.seconds or 0.0
        if result.status == "done":
            self.audio += result.duration or 0.0
            audio = f"{result.duration:.1f} s audio" if result.duration is not None else "audio"
            outputs = ", ".join(str(p) for p in result.outputs)
            self._print(f"{where}: done, {audio} in {seconds:.1f} s -> {outputs}")
            for warning in result.warnings:
                self._print(f"{where}: warning: {warning}")
        elif result.status == "failed":
            self._print(f"{where}: FAILED: {result.error}")
        else:
            self._print(f"{where}: not attempted")

    def close(self) -> None:
        pass


class BarProgress(LineProgress):
    """A tqdm bar; failures and notes are printed above it."""

    def __init__(self, total: int, stream: IO[str]):
        super().__init__(total, stream)
        from tqdm import tqdm

        self.bar = tqdm(total=total, file=stream, unit="file", dynamic_ncols=True, smoothing=0.1,
                        desc="transcribing",
                        bar_format="{desc}: {n_fmt}/{total_fmt} files |{bar}| {postfix} "
                                   "[{elapsed}<{remaining}]")
        self.bar.set_postfix_str(_audio(0.0), refresh=False)

    def _print(self, text: str) -> None:
        self.bar.write(text, file=self.stream)

    def update(self, result: FileResult) -> None:
        if result.status == "skipped":
            return
        self.count += 1
        if result.status == "done":
            self.audio += result.duration or 0.0
            for warning in result.warnings:
                self._print(f"{result.job.name}: warning: {warning}")
        elif result.status == "failed":
            self._print(f"{result.job.name}: FAILED: {result.error}")
        wall = time.monotonic() - self.started
        rtf = f", RTF {wall / self.audio:.3f}" if self.audio > 0 else ""
        self.bar.set_postfix_str(_audio(self.audio) + rtf, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def progress_for(total: int, stream: Optional[IO[str]] = None, bar: Optional[bool] = None) -> LineProgress:
    """A bar when ``stream`` (stderr) is a terminal (or ``bar`` says so), lines otherwise."""
    stream = stream or sys.stderr
    if bar is None:
        isatty = getattr(stream, "isatty", None)
        bar = bool(isatty and isatty())
    return BarProgress(total, stream) if bar else LineProgress(total, stream)


__all__ = ["BarProgress", "LineProgress", "hours", "progress_for"]
