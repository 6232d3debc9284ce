"""The live sessions' way to the models. :class:`LiveEngine` is what a session
(:class:`~speaker_asr.live.session.LiveSession`) needs of them: what is loaded, and the model
calls, each awaited, each with its priority (speaker_asr/scheduling/policy.py: a final decode
first, then the speakers, then partial decodes, file work last). A call picks where it runs; the
session says only what it asks and how urgent it is. :class:`RunnerEngine` is the server's: it
runs each call as a job of the models' scheduler, a decode or a language detection on the
runner's live calls (:meth:`ModelRunner.call <speaker_asr.serving.runner.ModelRunner.call>`),
an item's speakers on the diarization pool (beside the next decodes), and awaits it. What each
call does is :class:`speaker_asr.models.Models`' (the one models layer); this module only adds
the sessions' limits on a decode and the item's speakers in the session's terms. The tests'
engine (tests/live/test_live_session.py) decodes by the audio's length.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence, Union

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig, ModelCapabilities
from speaker_asr.diarization.frames import Activity
from speaker_asr.models import Decoded, Models
from speaker_asr.result import Result
from speaker_asr.scheduling import Priority
from speaker_asr.types import Diarization

# a decode makes at most this many tokens per second of audio (plus DECODE_MIN_TOKENS): speech
# runs at 3-6 tokens a second, and a decode that loops on a wrong language or a hallucination
# (Whisper repeats a phrase up to its 448-token limit, seconds of a CPU) stops there instead
DECODE_TOKENS_PER_S = 15
DECODE_MIN_TOKENS = 24

# a final pass's audio: the samples, or a function that gives them once its job starts
SessionAudio = Union[np.ndarray, Callable[[], np.ndarray]]


def decode_token_limit(samples: int) -> int:
    """The most tokens a live decode of ``samples`` of audio makes."""
    return DECODE_MIN_TOKENS + int(DECODE_TOKENS_PER_S * samples / SAMPLE_RATE)


@dataclass(frozen=True)
class Loaded:
    """What the server loaded, as a live session reads it. ``match_threshold``:
    ``SPEAKER_MATCH_THRESHOLD``, for a session that sets none; ``max_audio_seconds``:
    ``MAX_AUDIO_SECONDS``, the most a final pass keeps."""

    model_name: str
    capabilities: Optional[ModelCapabilities] = None
    has_voices: bool = False
    match_threshold: float = 0.5
    max_audio_seconds: Optional[float] = None
    multilingual: bool = False


class PartialDecodes:
    """The sessions' partial decodes in hand, across sessions (the ASR lane is theirs
    together): one session's final decode would wait behind another's partial (a draft of a
    growing utterance that can come later), so a final decode stops them first."""

    def __init__(self):
        self._cancels: set[threading.Event] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def running(self, cancel: threading.Event, preemptible: bool = True):
        """Held while a partial decode waits for the ASR lane or runs on it; a
        ``preemptible`` one is stopped by :meth:`preempt` (its ``cancel`` set)."""
        if not preemptible:
            yield
            return
        with self._lock:
            self._cancels.add(cancel)
        try:
            yield
        finally:
            with self._lock:
                self._cancels.discard(cancel)

    def preempt(self, keep: Optional[threading.Event] = None) -> None:
        """An item's final decode is next: every preemptible partial decode in hand (of any
        session) but ``keep`` stops at its next token."""
        with self._lock:
            cancels = list(self._cancels)
        for cancel in cancels:
            if cancel is not keep:
                cancel.set()


class LiveEngine(Protocol):
    """What a live session needs of the models: what is loaded (:attr:`loaded`), the partial
    decodes in hand across sessions (:attr:`partials`), whether live decodes wait (:meth:`busy`)
    and the model calls. Each call is awaited and picks its own place: the ASR's (a decode, a
    language detection) or the diarization's (an item's speakers, a voice, beside the next
    decodes); ``priority`` ranks it among the scheduler's jobs (its default is the call's usual
    rank). A call cancelled while it waits is dropped before it runs; once running, it stops at
    its next unit."""

    loaded: Loaded
    partials: PartialDecodes

    def busy(self) -> bool: ...  # whether live decodes wait or run: no partial decode then

    async def decode(self, audio: np.ndarray, config: InferenceConfig, previous: Optional[Decoded] = None,
                     cancel: Optional[threading.Event] = None, *,
                     priority: Priority = Priority.LIVE_FINAL) -> Decoded: ...

    async def language(self, audio: np.ndarray, *,
                       priority: Priority = Priority.LIVE_FINAL) -> Optional[str]: ...

    async def activity(self, audio: np.ndarray, *,
                       priority: Priority = Priority.LIVE_SPEAKERS) -> Optional[Activity]: ...

    async def utterance(self, audio: np.ndarray, config: InferenceConfig, *,
                        priority: Priority = Priority.LIVE_SPEAKERS) -> Optional[Diarization]: ...

    async def embed(self, audio: np.ndarray, *,
                    priority: Priority = Priority.LIVE_SPEAKERS) -> Optional[np.ndarray]: ...

    async def references(self, names: Sequence[str], clips: Sequence[Any], *,
                         priority: Priority = Priority.LIVE_SPEAKERS) -> dict[str, np.ndarray]: ...

    async def transcribe_session(self, audio: SessionAudio, config: InferenceConfig,
                                 progress: Callable[[Any], None], *,
                                 priority: Priority = Priority.FILE) -> Result: ...


class RunnerEngine(LiveEngine):
    """The live sessions' engine over the server's runner
    (:class:`speaker_asr.serving.runner.ModelRunner`) and the models it loaded
    (:attr:`~speaker_asr.serving.runner.ModelRunner.models`): each call a job of the models'
    scheduler, on the runner's live calls (:meth:`_call`) or on the diarization pool
    (:meth:`_beside_asr`)."""

    def __init__(self, runner):
        self.runner = runner
        self.partials = PartialDecodes()

    @property
    def models(self) -> Models:
        models = self.runner.models
        if models is None:
            raise RuntimeError("the server's handler has no models for live sessions")
        return models

    def unavailable(self) -> Optional[str]:
        """Why no live session can start on this server (None: one can)."""
        if self.runner.models is None:
            return "this server's handler has no models layer (speaker_asr.models.Models): live " \
                   "sessions need one"
        return None

    @property
    def loaded(self) -> Loaded:
        models = self.models
        return Loaded(models.model_name, models.capabilities, models.has_voices,
                      models.settings.speaker_match_threshold, models.settings.max_audio_seconds,
                      models.multilingual)

    def busy(self) -> bool:
        """Whether live decodes (of any session: final or partial) wait for the ASR lane or run
        on it: a partial decode would only queue behind them. File work does not count: partials
        go before it."""
        return self.models.scheduler.busy(Priority.LIVE_PARTIAL, lane="asr")

    def live_load(self, window_s: float = 60.0) -> float:
        """The share of the last ``window_s`` (at most a minute) that the live sessions' final
        decodes (and their language detection) held the ASR lane: what they need of it, measured."""
        return self.models.scheduler.load("asr", Priority.LIVE_SPEAKERS, window_s)

    # -- the calls ------------------------------------------------------------------------------

    async def decode(self, audio: np.ndarray, config: InferenceConfig, previous: Optional[Decoded] = None,
                     cancel: Optional[threading.Event] = None, *,
                     priority: Priority = Priority.LIVE_FINAL) -> Decoded:
        """The audio's transcript, with word times where the model has alignment heads (speakers
        are given by them). ``previous``: a decode of the same audio's beginning, whose tokens
        the model verifies as its draft. At most :func:`decode_token_limit` tokens. ``cancel``:
        set, the decode stops at its next token (an exception). ``priority``: a partial decode
        of a growing item is ``LIVE_PARTIAL``."""
        draft = previous.tokens if previous is not None else None
        limit = decode_token_limit(len(audio))
        return await self._call(lambda: self.models.decode(audio, config, draft=draft, max_new_tokens=limit,
                                                           cancel=cancel), priority)

    async def language(self, audio: np.ndarray, *,
                       priority: Priority = Priority.LIVE_FINAL) -> Optional[str]:
        """Whisper's language detection on the audio (its first 30 s): an item's decodes wait
        for it, so it ranks as a final decode."""
        return await self._call(lambda: self.models.detect_language(audio), priority)

    async def activity(self, audio: np.ndarray, *,
                       priority: Priority = Priority.LIVE_SPEAKERS) -> Optional[Activity]:
        """Which (local) speakers talk in each frame of a growing item's audio (the segmentation
        model alone); None where the diarization cannot run it alone."""
        return await self._beside_asr(lambda: self.models.activity(audio), priority)

    async def utterance(self, audio: np.ndarray, config: InferenceConfig, *,
                        priority: Priority = Priority.LIVE_SPEAKERS) -> Optional[Diarization]:
        """Who speaks in a committed item, with their voices (from its audio alone, no words
        needed; the session asks after the item's final decode, so the two never share the CPU);
        None without a diarization."""
        def utterance() -> Optional[Diarization]:
            models = self.models
            return models.diarize_utterance(audio, config) if models.diarizer is not None else None
        return await self._beside_asr(utterance, priority)

    async def embed(self, audio: np.ndarray, *,
                    priority: Priority = Priority.LIVE_SPEAKERS) -> Optional[np.ndarray]:
        """The voice vector of the audio as a whole (an item nobody was heard in); None with too
        little speech."""
        return await self._beside_asr(lambda: self.models.embed(audio), priority)

    async def references(self, names: Sequence[str], clips: Sequence[Any], *,
                         priority: Priority = Priority.LIVE_SPEAKERS) -> dict[str, np.ndarray]:
        """The known speakers' voices, ``names[i]``'s from ``clips[i]`` (a clip, a data URI or
        an URL), in one job; a bad clip is a :class:`~speaker_asr.errors.RequestError` naming
        it."""
        def references() -> dict[str, np.ndarray]:
            return {name: self.models.reference(i, name, clip)
                    for i, (name, clip) in enumerate(zip(names, clips))}
        return await self._call(references, priority)

    async def transcribe_session(self, audio: SessionAudio, config: InferenceConfig,
                                 progress: Callable[[Any], None], *,
                                 priority: Priority = Priority.FILE) -> Result:
        """The final pass: the file pipeline (:meth:`speaker_asr.models.Models.transcribe`) over
        a session's kept audio, as ``/v1/audio/transcriptions`` runs it. ``audio``: the samples,
        or a function that gives them once the job starts (on its thread: a session's kept
        audio stays 16-bit while the pass waits, and is made float32 off the event loop).
        ``progress`` hears its steps (and stops it by raising)."""
        def transcribe() -> Result:
            samples = audio() if callable(audio) else audio
            return self.models.transcribe(samples, config, progress=progress)
        return await self._call(transcribe, priority)

    # -- where a call runs ----------------------------------------------------------------------

    async def _call(self, fn: Callable[[], Any], priority: Priority) -> Any:
        """``fn()`` on the runner's live calls as a job of ``priority``, its units ordered by the
        models' scheduler. Cancelled: dropped while queued, stopped at its next unit once
        running."""
        return await self.runner.call(fn, priority)

    async def _beside_asr(self, fn: Callable[[], Any], priority: Priority) -> Any:
        """``fn()`` on the diarization pool as a job of ``priority``, beside the ASR lane's
        decodes: an item's speakers are found while the next item is decoded. Cancelled: dropped
        while queued, stopped at its next unit once running."""
        scheduler = self.models.scheduler
        job = scheduler.new_job(priority, "live speakers")
        with scheduler.working_for(job):  # the pool runs fn in this context
            future = self.models.on_diarization_thread(fn)
        try:
            # shielded: a cancel is handled below, where a running fn is stopped through its job
            return await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError:
            if not future.cancel():
                job.cancel("the live call was cancelled")
            raise
