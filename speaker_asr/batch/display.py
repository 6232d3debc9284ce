"""A batch run's progress on stderr: a tqdm bar of the recordings on a terminal, one line per
recording otherwise (one ``update`` keeps the count for both), and while a recording is
transcribed in this process, its request's progress (speaker_asr/progress.py) under the bar or
as a line every 30 s."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import IO, Iterator, Optional

from speaker_asr.batch.run import FileResult
from speaker_asr.progress import Progress, ProgressCallback, RequestProgress

# seconds between two progress lines of one recording on the command line without a terminal
# (the first one after as long: a short recording prints none)
LINE_INTERVAL_S = 30.0


def _audio(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h audio" if seconds >= 360 else f"{seconds:.0f} s audio"


class LineProgress:
    """One line per recording: ``12:00:03 [3/40] talks/a.wav: done, 61.2 s audio in 4.1 s -> ...``;
    while one is transcribed in this process (:meth:`recording`), a line every
    :data:`LINE_INTERVAL_S` at most: ``12:00:33 talks/a.wav: asr 2/480 windows, diarization:
    segmentation 310/1437 (31 s)`` (none for a recording done sooner)."""

    def __init__(self, total: int, stream: IO[str]):
        self.total = total
        self.stream = stream
        self.count = 0
        self.audio = 0.0
        self.started = time.monotonic()
        # progress lines come from the models' threads; re-entrant: a signal handler's note
        self._lock = threading.RLock()

    def _print(self, text: str) -> None:
        with self._lock:
            print(text, file=self.stream, flush=True)

    @contextmanager
    def recording(self, name: str) -> Iterator[ProgressCallback]:
        """The progress callback for one recording's request, while it runs."""
        state = RequestProgress(LINE_INTERVAL_S)

        def report(event: Progress) -> None:
            line = state.update(event)
            if line is not None:
                self._print(f"{time.strftime('%H:%M:%S')} {name}: {line.text} ({line.elapsed_s:.0f} s)")

        yield report

    def note(self, text: str) -> None:
        self._print(text)

    def update(self, result: FileResult) -> None:
        """Account for one recording as it finishes (both displays): the count and the audio
        done, then its line (:meth:`_status_line`) and its warnings. A skipped recording is not
        counted: the total is of the recordings to do."""
        if result.status == "skipped":
            return
        self.count += 1
        if result.status == "done":
            self.audio += result.duration or 0.0
        where = self._where(result)
        line = self._status_line(result)
        if line is not None:
            self._print(f"{where}: {line}")
        if result.status == "done":
            for warning in result.warnings:
                self._print(f"{where}: warning: {warning}")
        self._advanced()

    def _where(self, result: FileResult) -> str:
        """``12:00:03 [3/40] talks/a.wav``."""
        return f"{time.strftime('%H:%M:%S')} [{self.count}/{self.total}] {result.job.name}"

    def _status_line(self, result: FileResult) -> Optional[str]:
        """What is printed for the recording (after :meth:`_where`): every outcome here."""
        if result.status == "done":
            audio = f"{result.duration:.1f} s audio" if result.duration is not None else "audio"
            outputs = ", ".join(str(p) for p in result.outputs)
            return f"done, {audio} in {result.seconds or 0.0:.1f} s -> {outputs}"
        if result.status == "failed":
            return f"FAILED: {result.error}"
        return "not attempted"

    def _advanced(self) -> None:
        """After each recording counted (the bar moves)."""

    def close(self) -> None:
        pass


class BarProgress(LineProgress):
    """A tqdm bar of the recordings (``files``; none for a single recording); failures and notes
    are printed above it; while one is transcribed in this process (:meth:`recording`), a line
    under it says how far: ``talks/a.wav: asr 12/480 windows, diarization: embeddings 120/480``."""

    def __init__(self, total: int, stream: IO[str], files: bool = True):
        super().__init__(total, stream)
        from tqdm import tqdm

        self.bar = None
        if files:
            self.bar = tqdm(total=total, file=stream, unit="file", dynamic_ncols=True, smoothing=0.1,
                            desc="transcribing",
                            bar_format="{desc}: {n_fmt}/{total_fmt} files |{bar}| {postfix} "
                                       "[{elapsed}<{remaining}]")
            self.bar.set_postfix_str(_audio(0.0), refresh=False)

    def _print(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(text, file=self.stream)

    @contextmanager
    def recording(self, name: str) -> Iterator[ProgressCallback]:
        from tqdm import tqdm

        state = RequestProgress(0.0)
        lock = threading.Lock()
        line = tqdm(total=0, file=self.stream, position=1 if self.bar is not None else 0,
                    leave=False, dynamic_ncols=True, bar_format="{desc}")
        line.set_description_str(f"{name}: starting")

        def report(event: Progress) -> None:
            with lock:  # the ASR's and the diarization's threads: one redraw at a time, in order
                shown = state.update(event)
                if shown is not None:
                    line.set_description_str(f"{name}: {shown.text}")

        try:
            yield report
        finally:
            with lock:
                line.close()  # cleared (leave=False); a later redraw does nothing

    def _where(self, result: FileResult) -> str:
        return result.job.name

    def _status_line(self, result: FileResult) -> Optional[str]:
        """Only failures: the bar counts the rest."""
        return f"FAILED: {result.error}" if result.status == "failed" else None

    def _advanced(self) -> None:
        if self.bar is None:
            return
        wall = time.monotonic() - self.started
        rtf = f", RTF {wall / self.audio:.3f}" if self.audio > 0 else ""
        self.bar.set_postfix_str(_audio(self.audio) + rtf, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def progress_for(total: int, stream: Optional[IO[str]] = None, bar: Optional[bool] = None,
                 files: bool = True) -> LineProgress:
    """A bar when ``stream`` (stderr) is a terminal (or ``bar`` says so), lines otherwise.
    ``files`` false (a single recording): no bar of the recordings, only a recording's progress."""
    stream = stream or sys.stderr
    if bar is None:
        isatty = getattr(stream, "isatty", None)
        bar = bool(isatty and isatty())
    return BarProgress(total, stream, files=files) if bar else LineProgress(total, stream)
