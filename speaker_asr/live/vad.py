"""Server VAD for a live session: silero-vad's speech probabilities, and when a turn starts and
stops (OpenAI's ``server_vad``: ``threshold``, ``prefix_padding_ms``, ``silence_duration_ms``).

* :class:`SileroVad` -- one session's silero-vad model (the ``silero-vad`` package ships its
  weights in its wheel; TorchScript, a small part of one CPU core at real time:
  docs/measurements.md, "Figures behind the speed fixes' reasons"): 16 kHz float32
  samples in, one speech probability per window of :data:`WINDOW` samples out. The model is
  stateful (it carries context from one window to the next), so each session loads its own.
* :class:`TurnDetector` -- pure: the probabilities -> ``start`` and ``stop`` events at sample
  positions on the session's audio clock. A window at or above ``threshold`` is speech; speech
  ends after ``silence_duration_ms`` of windows below ``threshold - 0.15`` (silero's own
  hysteresis, ``neg_threshold`` in its ``VADIterator``), and a window between the two keeps
  the state it finds; once the turn has lasted :data:`LONG_TURN_MS`, a pause of
  :data:`LONG_TURN_SILENCE_MS` ends it (or ``silence_duration_ms`` when that is shorter). ``start`` is the first speech window's start less ``prefix_padding_ms``
  (never before what the session still holds: the caller clips it); ``stop`` is the end of the
  last speech window, sent once the silence has lasted ``silence_duration_ms``.

:class:`SessionVad` holds the two for one session: the model made once, when the session first
turns server VAD on, and a detector for its settings at each change.

The detector is pure (no torch) and unit-tested with hand-made probabilities; the silero model is
imported only when a session turns server VAD on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE

WINDOW = 512  # silero-vad's window at 16 kHz (32 ms)
# silero's VADIterator: speech ends below threshold - 0.15 (hysteresis against flicker)
HYSTERESIS = 0.15
# a turn that has gone on this long ends at a shorter pause: people in a meeting or on a call
# rarely leave silence_duration_ms between sentences (or between speakers), and without this an
# utterance would run to the 30 s cap: its text comes 30 s late and one item holds several
# speakers' words. 8 s and 200 ms: a sentence or two, and a breath between phrases (shorter
# gaps are inside words and between close words)
LONG_TURN_MS = 8_000
LONG_TURN_SILENCE_MS = 200


@dataclass(frozen=True)
class TurnEvent:
    """``kind``: ``start`` or ``stop``; ``sample``: where on the audio clock (16 kHz samples):
    the speech's start less the prefix padding, or the end of its last speech window."""

    kind: str
    sample: int


class TurnDetector:
    """Turns from per-window speech probabilities (see the module's docstring). Feed every window
    of the stream in order with :meth:`push`; :attr:`speaking` says whether a turn is open."""

    def __init__(self, threshold: float = 0.5, prefix_padding_ms: int = 300,
                 silence_duration_ms: int = 500, window: int = WINDOW,
                 long_turn_ms: int = LONG_TURN_MS, long_turn_silence_ms: int = LONG_TURN_SILENCE_MS):
        self.threshold = threshold
        self.low = max(0.0, threshold - HYSTERESIS)
        self.prefix = prefix_padding_ms * SAMPLE_RATE // 1000
        self.silence = silence_duration_ms * SAMPLE_RATE // 1000
        self.long_turn = long_turn_ms * SAMPLE_RATE // 1000
        self.long_silence = min(self.silence, long_turn_silence_ms * SAMPLE_RATE // 1000)
        self.window = window
        self.speaking = False
        self._turn_start = 0  # start of the open turn's first speech window
        self._last_speech_end = 0  # end of the last window at or above the threshold

    def _silence_needed(self) -> int:
        long = self._last_speech_end - self._turn_start >= self.long_turn
        return self.long_silence if long else self.silence

    def push(self, probabilities: Iterable[float], first_sample: int) -> list[TurnEvent]:
        """Windows of :attr:`window` samples, the first starting at ``first_sample``."""
        events: list[TurnEvent] = []
        at = first_sample
        for p in probabilities:
            end = at + self.window
            if p >= self.threshold:
                if not self.speaking:
                    self.speaking = True
                    self._turn_start = at
                    events.append(TurnEvent("start", max(0, at - self.prefix)))
                self._last_speech_end = end
            elif self.speaking and p < self.low and end - self._last_speech_end >= self._silence_needed():
                self.speaking = False
                events.append(TurnEvent("stop", self._last_speech_end))
            at = end
        return events

    def pause(self, now: int) -> int:
        """Samples since the open turn's last speech window ended, up to ``now`` (0 when no turn
        is open): how long the speaker has been quiet, not yet long enough to end the turn."""
        return max(0, now - self._last_speech_end) if self.speaking else 0

    def reset(self) -> None:
        self.speaking = False


class SileroVad:
    """One session's silero-vad: :meth:`probabilities` takes any number of 16 kHz samples and
    returns the probabilities of the windows they complete, with the sample on the stream where
    the first of them starts. :meth:`reset` starts a new stream (the buffer was cleared)."""

    def __init__(self, model=None):
        if model is None:
            model = load_model()
        self.model = model
        self._pending = np.zeros(0, dtype=np.float32)
        self._next = 0  # stream sample where self._pending starts

    def probabilities(self, samples: np.ndarray) -> tuple[list[float], int]:
        import torch

        first = self._next
        pending = np.concatenate([self._pending, np.asarray(samples, dtype=np.float32)])
        count = len(pending) // WINDOW
        probs: list[float] = []
        if count:
            with torch.inference_mode():
                for i in range(count):
                    window = torch.from_numpy(np.ascontiguousarray(pending[i * WINDOW:(i + 1) * WINDOW]))
                    probs.append(float(self.model(window, SAMPLE_RATE)))
        self._pending = pending[count * WINDOW:]
        self._next = first + count * WINDOW
        return probs, first

    def reset(self, at_sample: int) -> None:
        """A new stream from ``at_sample`` (the model's state and the partial window dropped)."""
        self.model.reset_states()
        self._pending = np.zeros(0, dtype=np.float32)
        self._next = at_sample


class SessionVad:
    """One session's server VAD: ``factory()`` makes its model (a :class:`SileroVad`, or a
    stand-in with ``probabilities`` and ``reset``), off its event loop, when the session first
    turns server VAD on; :attr:`detector` follows the session's ``turn_detection`` (None: the
    client commits)."""

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory
        self.model = None
        self.detector: Optional[TurnDetector] = None

    @property
    def on(self) -> bool:
        return self.detector is not None

    async def setup(self, turn_detection, clock: int) -> None:
        """The session's ``turn_detection`` (its ``server_vad`` settings, or None) from clock
        sample ``clock`` on."""
        if turn_detection is None:
            self.detector = None
            return
        if self.model is None:
            self.model = await asyncio.to_thread(self.factory)
        self.model.reset(clock)
        self.detector = TurnDetector(turn_detection.threshold, turn_detection.prefix_padding_ms,
                                     turn_detection.silence_duration_ms)

    def turns(self, samples: np.ndarray) -> list[TurnEvent]:
        """The turns the appended ``samples`` start and stop (server VAD on)."""
        probabilities, first = self.model.probabilities(samples)
        return self.detector.push(probabilities, first)

    def pause(self, clock: int) -> int:
        """The open turn's silence so far (:meth:`TurnDetector.pause`); 0 without server VAD."""
        return self.detector.pause(clock) if self.detector is not None else 0

    def reset(self, clock: int) -> None:
        """The buffer was cleared: no turn open, the model's stream anew from ``clock``."""
        if self.detector is not None:
            self.detector.reset()
            self.model.reset(clock)


def load_model(path: Optional[str] = None):
    """silero-vad's TorchScript model from its package (no download)."""
    import warnings

    from silero_vad import load_silero_vad

    with warnings.catch_warnings():  # torch.jit.load's deprecation notice
        warnings.simplefilter("ignore")
        return load_silero_vad(onnx=False)
