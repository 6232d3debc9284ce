"""Progress on stderr and in the server's log, for a batch run and within one long request.

A batch run: a tqdm bar on a terminal (recordings done of the total, hours of audio done,
real-time factor, ETA), one line per recording otherwise (a log file, CI, a pipe). Failures are
printed in both, with their reason, as they happen. The real-time factor is the run's wall time
over the audio it transcribed (0.05: twenty times faster than real time); the ETA is tqdm's, from
the recordings still to do.

Within one request: a :class:`Progress` event says how far one of its two stages has got -- the
ASR's 30 s windows decoded of the total, or the diarization's step (pyannote's segmentation,
speaker_counting, embeddings, discrete_diarization) with its batches done of the total. A caller
hands a :data:`ProgressCallback` to ``EndpointHandler.__call__`` / ``result`` (``progress=``);
it is called from the ASR's thread and from the diarization's, at once. :class:`RequestProgress`
gathers one request's events (thread-safe) and says when a line is due (throttled): the command
line shows it under the bar (``recording``) or as a line every 30 s at most, the server logs it
(serving/runner.py).
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Callable, Iterator, Literal, Optional

from speaker_asr.batch import FileResult, hours

# --------------------------------------------------------------------------- within one request

ASR = "asr"
DIARIZATION = "diarization"
WINDOWS = "windows"  # the ASR's step: 30 s windows decoded
# seconds between two progress lines of one recording on the command line without a terminal
# (the first one after as long: a short recording prints none)
LINE_INTERVAL_S = 30.0


@dataclass(frozen=True)
class Progress:
    """How far one stage of a request has got. ``stage``: :data:`ASR` (``step`` :data:`WINDOWS`:
    30 s windows decoded, ``done`` of ``total``) or :data:`DIARIZATION` (``step``: pyannote's --
    segmentation, speaker_counting, embeddings, discrete_diarization -- ``done`` of ``total``
    batches; a step without batches has ``total`` 0 and is reported when it ends)."""

    stage: Literal["asr", "diarization"]
    step: str
    done: int
    total: int

    def __post_init__(self):
        if self.done < 0 or self.total < 0:
            raise ValueError(f"progress counts cannot be negative: {self.done}/{self.total}")

    @property
    def fraction(self) -> float:
        """Of the step, 0 to 1 (1 for a step without batches: it is reported when it ends)."""
        return 1.0 if self.total == 0 else min(1.0, self.done / self.total)

    def describe(self) -> str:
        """``asr 12/480 windows``, ``diarization: embeddings 120/480``, ``diarization: speaker_counting``."""
        if self.stage == ASR:
            return f"asr {self.done}/{self.total} {self.step}"
        counts = f" {self.done}/{self.total}" if self.total else ""
        return f"{self.stage}: {self.step}{counts}"


# a request's progress sink: called from the ASR's thread and from the diarization's, at once
ProgressCallback = Callable[[Progress], None]


def takes_progress(call: Callable) -> bool:
    """Whether ``call`` (a handler) names a ``progress`` parameter: ``EndpointHandler`` does; a
    custom or stand-in handler without one is called as before, without progress."""
    try:
        return "progress" in inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False


class AsrWindows:
    """The ASR's windows of one request, reported to ``progress`` as they are decoded (0 of
    ``total`` at once). Called on the ASR's thread only."""

    def __init__(self, total: int, progress: ProgressCallback):
        self.total = max(1, total)
        self.done = 0
        self.progress = progress
        self._report()

    def _report(self) -> None:
        self.progress(Progress(ASR, WINDOWS, self.done, self.total))

    def _move(self, done: int) -> None:
        done = min(self.total, done)
        if done > self.done:
            self.done = done
            self._report()

    def decoded(self, windows: int) -> None:
        """``windows`` more decoded (a batch of chunked decoding)."""
        self._move(self.done + windows)

    def reached(self, fraction: float) -> None:
        """Decoding has reached ``fraction`` of the audio (Whisper's sequential long-form loop,
        which starts each window where the last complete segment ended): the windows' worth
        before it, the last one left for :meth:`finished`."""
        self._move(min(self.total - 1, int(fraction * self.total)))

    def finished(self) -> None:
        self._move(self.total)


class DiarizationHook:
    """pyannote's progress hook -- ``hook(step_name, artefact, file=..., total=..., completed=...)``,
    called after each step and within the long ones after each batch -- as :class:`Progress`
    events of stage :data:`DIARIZATION` for ``progress`` (an event repeated is left out)."""

    def __init__(self, progress: ProgressCallback):
        self.progress = progress
        self._totals: dict[str, int] = {}
        self._last: Optional[Progress] = None

    def __call__(self, step_name: str, artefact=None, file=None, total: Optional[int] = None,
                 completed: Optional[int] = None, **_) -> None:
        if total is not None and completed is not None:
            total = max(0, int(total))
            self._totals[step_name] = total
            event = Progress(DIARIZATION, step_name, max(0, min(int(completed), total)), total)
        else:  # the step's end (its artefact): all of its batches
            total = self._totals.get(step_name, 0)
            event = Progress(DIARIZATION, step_name, total, total)
        if event != self._last:
            self._last = event
            self.progress(event)


@dataclass(frozen=True)
class ProgressLine:
    """What a due progress line says: each stage's latest event (the ASR first), and the seconds
    since the request started."""

    stages: tuple[Progress, ...]
    elapsed_s: float

    @property
    def text(self) -> str:
        """``asr 120/480 windows, diarization: embeddings 30/120``."""
        return ", ".join(event.describe() for event in self.stages)

    def fields(self) -> dict:
        """For a JSON log line: ``{"progress": {"asr": {"step", "done", "total"}, ...}, "elapsed_s"}``."""
        return {"progress": {e.stage: {"step": e.step, "done": e.done, "total": e.total}
                             for e in self.stages},
                "elapsed_s": round(self.elapsed_s, 1)}


class RequestProgress:
    """One request's progress, fed :meth:`update` from the ASR's and the diarization's threads
    (under a lock), and throttled: :meth:`update` returns a :class:`ProgressLine` when one is due
    -- ``interval_s`` after the start or the last line, and only when something moved since that
    line: a stage began, began a new step, or advanced by at least ``min_step`` of its step (0:
    any advance). ``interval_s`` 0: every change."""

    def __init__(self, interval_s: float, min_step: float = 0.0,
                 clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.min_step = min_step
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self._latest: dict[str, Progress] = {}
        self._shown: dict[str, Progress] = {}
        self._last_line = self.started

    def update(self, event: Progress) -> Optional[ProgressLine]:
        with self._lock:
            self._latest[event.stage] = event
            now = self.clock()
            if now - self._last_line < self.interval_s or not self._moved():
                return None
            self._last_line = now
            self._shown = dict(self._latest)
            return self._line(now)

    def latest(self) -> ProgressLine:
        """The latest of each stage now, due or not."""
        with self._lock:
            return self._line(self.clock())

    def _moved(self) -> bool:
        for stage, event in self._latest.items():
            shown = self._shown.get(stage)
            if shown is None or shown.step != event.step:
                return True
            # (a hair under min_step: 13/100 - 3/100 is 0.0999... in floating point)
            if event != shown and event.fraction - shown.fraction >= self.min_step - 1e-9:
                return True
        return False

    def _line(self, now: float) -> ProgressLine:
        order = sorted(self._latest.values(), key=lambda e: (e.stage != ASR, e.stage))
        return ProgressLine(tuple(order), now - self.started)


# --------------------------------------------------------------------------- on stderr


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


__all__ = ["ASR", "DIARIZATION", "AsrWindows", "BarProgress", "DiarizationHook", "LineProgress",
           "Progress", "ProgressCallback", "ProgressLine", "RequestProgress", "hours",
           "progress_for", "takes_progress"]
