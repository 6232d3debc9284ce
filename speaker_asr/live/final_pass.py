"""The pure parts of a live session's final pass (``session.speaker_asr.final_transcript``): the
audio kept for it, and the offline speakers' labels put onto the live session's.

When the client ends a session (``speaker_asr.session.finish``) with ``final_transcript`` on,
the file pipeline (ASR + diarization + attribution, :meth:`speaker_asr.models.Models.transcribe`) runs
over the session's audio and its transcript goes out as one ``transcript.text.done`` event
(speaker_asr/live/session.py). What makes that possible:

* :class:`KeptAudio`: the session's audio from the moment ``final_transcript`` was turned on,
  as 16-bit chunks (2 bytes a sample at 16 kHz: 115 MB an hour, half of float32's), at most
  ``limit`` samples; what comes past the limit is counted, not kept, and the final transcript
  says so in a warning (:func:`overflow_warning`).
* :class:`FinalPassInput`: what the session keeps while ``final_transcript`` is on: that audio
  and the segments it sent (their live labels).
* :func:`speaker_mapping`: the offline pass labels its speakers afresh (SPEAKER_00 ... in order
  of first appearance over the whole recording); the live session has already shown the user
  its own labels. Each offline speaker takes the live label it shares the most time with (one
  to one: the assignment with the largest total overlap, Hungarian), so the same person keeps
  the same name; a speaker only the offline pass found gets a label no live speaker had.
* :func:`run_final_pass`: the pass itself through the session's engine, stopped when the session
  closes (:class:`FinalPassCancelled`).

No I/O of its own: numpy (scipy's assignment, imported when used), no torch.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Iterable, Optional, Sequence

import numpy as np

from speaker_asr.scheduling import Priority
from speaker_asr.assignment import best_pairs
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig
from speaker_asr.live.protocol import TranscriptionSegment
from speaker_asr.result import Result
from speaker_asr.speaker_names import first_free_label

# (start, end, speaker) in seconds on the session's audio clock
Span = tuple[float, float, Optional[str]]

_INT16_SCALE = 32768.0  # the live decoder's scale (speaker_asr/live/audio_format.py)


class KeptAudio:
    """The session's audio from clock sample ``origin`` on, for the final pass: 16-bit chunks
    (the appended frames as decoded, 16 kHz), at most ``limit`` samples; samples past it are
    counted in :attr:`dropped`."""

    def __init__(self, origin: int, limit: int):
        if limit < 0:
            raise ValueError(f"the kept audio's limit must be 0 or more samples, got {limit}")
        self.origin = origin
        self.limit = limit
        self.chunks: list[np.ndarray] = []
        self.samples = 0  # kept
        self.dropped = 0  # appended past the limit

    @property
    def seconds(self) -> float:
        return self.samples / SAMPLE_RATE

    @property
    def nbytes(self) -> int:
        return 2 * self.samples

    def append(self, samples: np.ndarray) -> None:
        """Float samples in [-1, 1) (the decoder's), kept as int16 up to the limit."""
        take = samples[:max(0, self.limit - self.samples)]
        self.dropped += len(samples) - len(take)
        if len(take):
            pcm = np.clip(np.round(np.asarray(take, dtype=np.float32) * _INT16_SCALE), -32768, 32767)
            self.chunks.append(pcm.astype(np.int16))
            self.samples += len(take)

    def silence_from(self, start: int) -> None:
        """The kept audio from clock sample ``start`` to its end made silent: the client cleared
        that audio (``input_audio_buffer.clear``), so the final pass must not transcribe it, and
        the rest keeps its place on the clock."""
        n = self.samples - max(0, start - self.origin)  # kept samples from ``start`` on
        for chunk in reversed(self.chunks):
            if n <= 0:
                break
            chunk[max(0, len(chunk) - n):] = 0
            n -= len(chunk)

    def audio(self) -> np.ndarray:
        """All of it as float32 (a new array: the file pipeline's input), written chunk by chunk
        (no int16 copy of the whole beside it)."""
        out = np.empty(self.samples, dtype=np.float32)
        at = 0
        for chunk in self.chunks:
            out[at:at + len(chunk)] = chunk
            at += len(chunk)
        out /= np.float32(_INT16_SCALE)
        return out

    def clear(self) -> None:
        self.chunks, self.samples = [], 0


class FinalPassInput:
    """What one session keeps for its final pass while ``final_transcript`` is on: its audio
    (:attr:`kept`, at most ``max_kept_s`` -- the route's ``LIVE_MAX_SESSION_S`` -- and the
    engine's ``max_audio_seconds``) and the segments it sent meanwhile (:attr:`spans`)."""

    def __init__(self, max_kept_s: float):
        self.max_kept_s = max_kept_s
        self.kept: Optional[KeptAudio] = None
        self.spans: list[Span] = []

    def keep(self, on: bool, clock: int, max_audio_seconds: Optional[float]) -> None:
        """``final_transcript`` turned on: the audio is kept from clock sample ``clock``; turned
        off: what was kept is dropped."""
        if on and self.kept is None:
            limit = self.max_kept_s
            if isinstance(max_audio_seconds, (int, float)):
                limit = min(limit, max_audio_seconds)
            self.kept, self.spans = KeptAudio(clock, int(limit * SAMPLE_RATE)), []
        elif not on and self.kept is not None:
            self.kept, self.spans = None, []

    def heard(self, samples: np.ndarray) -> None:
        if self.kept is not None:
            self.kept.append(samples)

    def cleared(self, start: int) -> None:
        """The client cleared the buffer from clock sample ``start``: the final pass must not
        hear it either."""
        if self.kept is not None:
            self.kept.silence_from(start)

    def sent(self, event) -> None:
        """A server event went out: a segment's span and speaker are noted."""
        if isinstance(event, TranscriptionSegment) and self.kept is not None:
            self.spans.append((event.start, event.end, event.speaker))

    def take(self) -> Optional[KeptAudio]:
        """The kept audio, no longer kept here (the pass runs on it, or the session closed)."""
        kept, self.kept = self.kept, None
        return kept


def overflow_warning(kept_s: float, dropped_s: float) -> str:
    """The final transcript's warning when the session's audio went past what is kept."""
    return (f"the final transcript covers the first {kept_s:.0f} s of the audio kept for it; the "
            f"{dropped_s:.0f} s after that were not kept (at most LIVE_MAX_SESSION_S, and the server's "
            "MAX_AUDIO_SECONDS, of audio are kept for a final pass)")


def overlaps(offline: Iterable[Span], live: Iterable[Span]) -> dict[tuple[str, str], float]:
    """``(offline speaker, live speaker) -> seconds they share`` (pairs that share some time;
    spans without a speaker are not counted)."""
    live = [(s, e, who) for s, e, who in live if who is not None and e > s]
    out: dict[tuple[str, str], float] = {}
    for start, end, speaker in offline:
        if speaker is None or end <= start:
            continue
        for s, e, who in live:
            shared = min(end, e) - max(start, s)
            if shared > 0:
                out[(speaker, who)] = out.get((speaker, who), 0.0) + shared
    return out


def speaker_mapping(offline: Sequence[Span], live: Sequence[Span], offline_order: Sequence[str],
                    keep: Iterable[str] = ()) -> dict[str, str]:
    """Offline speaker label -> the label the final transcript shows.

    ``offline``: the offline pass's speaker turns; ``live``: the segments the session sent
    (both on the session's clock); ``offline_order``: the offline speakers in order of first
    appearance (fresh labels are given in that order); ``keep``: offline labels that stay as
    they are (known speakers' names, matched by voice in the offline pass too).

    The other offline speakers take live labels one to one, maximising the total time shared
    (speaker_asr/assignment.py, over the pairs that share some time); a live label that is a kept
    name is not given to anyone else. An offline speaker left
    without one keeps its own label when no live speaker had it and no other speaker takes it,
    else gets the first ``SPEAKER_NN`` that is free. Speakers that keep their own label are left
    out of the mapping."""
    keep = set(keep)
    taken = set(keep) | {who for _, _, who in live if who is not None}
    sources = [s for s in offline_order if s not in keep]
    targets = sorted({who for _, _, who in live if who is not None} - keep)
    shared = overlaps(offline, live)
    mapping: dict[str, str] = {}
    if sources and targets and shared:  # over the pairs that share some time
        mapping.update(best_pairs(shared, sources, targets))
    used = taken | set(mapping.values())
    for s in sources:
        if s in mapping:
            continue
        if s not in used:
            used.add(s)
            continue
        mapping[s] = first_free_label(used)
        used.add(mapping[s])
    return {k: v for k, v in mapping.items() if k != v}


class FinalPassCancelled(Exception):
    """Raised in a running final pass (from its progress callback) once its session is closed:
    the models stop working for a client that is gone."""


async def run_final_pass(engine, kept: KeptAudio, config: InferenceConfig, closed: threading.Event,
                         live_spans: Sequence[Span]) -> Result:
    """The file pipeline over the kept audio (``engine.transcribe_session``: a file job of the
    models' scheduler), on the session's clock, a warning for what was not kept, its speakers
    named as the live session named them (``live_spans``: the segments it sent). Stops at its
    next progress step once ``closed`` is set."""
    seconds, dropped = kept.seconds, kept.dropped / SAMPLE_RATE

    def stop_if_closed(_progress=None) -> None:
        if closed.is_set():
            raise FinalPassCancelled("the live session was closed during its final pass")

    def audio() -> np.ndarray:  # read once the job starts: the kept chunks stay 16-bit while it waits
        samples = kept.audio()
        kept.clear()
        stop_if_closed()
        return samples

    result = await engine.transcribe_session(audio, config, stop_if_closed, priority=Priority.FILE)
    result = result.shifted(kept.origin / SAMPLE_RATE)
    if dropped:
        result = replace(result, warnings=[*result.warnings, overflow_warning(seconds, dropped)])
    keep = {k.speaker for k in result.known_speakers if k.speaker is not None}
    mapping = speaker_mapping([(t.start, t.end, t.speaker) for t in result.speaker_turns],
                              live_spans, result.speakers_in_order(), keep)
    return result.renamed(mapping)
