"""One live transcription session (OpenAI's Realtime protocol, ``intent=transcription``): the
client's events in, the server's events out. The WebSocket route
(speaker_asr/serving/realtime.py) accepts the connection and feeds every text message to
:meth:`LiveSession.handle`; everything else is here.

The audio
    Appended frames are decoded to 16 kHz (:class:`~speaker_asr.live.audio_format.FrameDecoder`)
    onto the session's *audio clock* (samples since the session began; every ``*_ms`` and every
    segment time is on it). The session holds only the *buffer*: the audio not yet committed.

Turns
    * ``turn_detection: null``: the client commits (``input_audio_buffer.commit``).
    * ``server_vad``: silero-vad (:mod:`.vad`) on every 32 ms window as it arrives. While no one
      speaks the buffer keeps only ``prefix_padding_ms``; speech opens an item
      (``speech_started``, ``audio_start_ms`` including the padding), and ``silence_duration_ms``
      of silence closes it (after 8 s of speech a 200 ms pause does:
      :data:`~speaker_asr.live.vad.LONG_TURN_MS`) (``speech_stopped`` at the end of the last speech window, then
      ``committed``; the item's audio runs to the stop point plus ``silence_duration_ms``
      at most, the silence heard).

Bounds (each documented in docs/serving.md, "Live")
    * An item is at most :data:`MAX_ITEM_S` (30 s: Whisper's window, what it sees at once). With
      server VAD an utterance that reaches it is committed there and a new item opens at once
      (``speech_stopped`` + ``committed`` + ``speech_started``, the same speech going on). With
      manual commits an append that would take the buffer past it is refused (an ``error``,
      code ``input_audio_buffer_full``) and its audio dropped: commit first.
    * Committed items wait for the model in a queue of at most :data:`MAX_PENDING_ITEMS`; while it
      is full the session stops reading the client's messages (:meth:`LiveSession.room`), so
      audio sent faster than the model transcribes it waits in the client's socket (TCP
      backpressure) instead of in this process's memory. A real-time client never meets this
      unless the model cannot keep up; its items are then late, never lost.
    * Frames: at most ``max_frame_bytes`` of base64 per append (``LIVE_MAX_FRAME_BYTES``), larger
      ones refused with an ``error``.

Decoding (on the server's one model thread, :class:`LiveEngine`; never two model calls at once)
    * While an item grows (server VAD), its audio (the last 30 s at most) is decoded again every
      :data:`PARTIAL_INTERVAL_S` seconds of new audio (and after the model rested
      :data:`PARTIAL_REST` times as long as the last partial took) and once in each pause of at
      least :data:`PAUSE_DECODE_S`, skipped when the model is busy with anything else (another
      session's item, a file request) or this session's previous partial. Partial decodes have
      word times, as the final one: when the utterance ends, the last partial whose audio holds
      all its speech (it began after the speech's last window; the pause's decode makes that
      likely) is its final decode, so the text is ready when the VAD commits. Each decode feeds
      :class:`~speaker_asr.live.agreement.LocalAgreement`, whose newly agreed words go out as
      ``delta`` events.
    * At commit: the item's full decode (with word times where the model has alignment heads)
      -> the last ``delta`` and ``completed`` at once. Then, with ``speaker_labels`` and a
      diarization pipeline loaded, who speaks in it, on the diarization's own thread (beside
      the next decodes, as a file request's diarization runs beside its ASR): the pipeline on
      the item's audio finds its voices, the file route's attribution gives them its words,
      and :meth:`~speaker_asr.live.speakers.OnlineSpeakers.assign_group` links each voice to
      the session's speakers (two voices of one item never to one speaker) -> one ``segment``
      event per speaker turn (``start``/``end`` on the audio clock). When the pipeline hears
      nobody, the item's voice as a whole (the embedding model) decides one speaker. Items
      complete in order.
    * A model exception for an item: ``conversation.item.input_audio_transcription.failed`` for
      it (no internals; the traceback goes to the log); the session goes on. A failed partial
      decode is logged and skipped; a failure while finding speakers costs the item its
      segments only.

Items as OpenAI announces them: ``conversation.item.added`` right after ``committed`` (its
transcript null), ``conversation.item.done`` after the item's last transcription event (with the
transcript; null when it failed).

The end (``speaker_asr.session.finish``, :meth:`LiveSession._end`)
    What the buffer holds is committed (with server VAD, an open utterance; the padding kept
    while no one speaks is not an item), every committed item is finished (its last event, then
    ``conversation.item.done``), then, with ``session.speaker_asr.final_transcript``, the final
    pass: the file pipeline over the audio kept since it was turned on
    (:class:`~speaker_asr.live.final_pass.KeptAudio`), on the model thread like every other
    model call, with the session's language, prompt and speaker options; its speakers take the
    live session's labels where they are the same people
    (:func:`~speaker_asr.live.final_pass.speaker_mapping`), its times are on the session's
    clock, and it goes out as one ``transcript.text.done`` (the shape of the file route's last
    stream event, with ``segments``: :func:`speaker_asr.formats.openai_shapes.done_event`). A
    failure of the pass: an ``error`` event (code ``final_transcript_failed``, no internals).
    The route then closes the socket (1000). Client events after it get an ``error``.

Faults: a message that is not an event, bad base64, a bad frame or an unknown event get an
``error`` event and the session goes on. :meth:`LiveSession.close` (the client left, or the
session ends) cancels what is pending: queued model calls are dropped before they run, a running
final pass stops at its next progress step (it raises :class:`FinalPassCancelled`), nothing is
kept.

What the session counts (:attr:`LiveSession.items`, the audio clock) and, with ``metrics``, each
item's latency from its commit to its ``completed`` event and the seconds of audio received go
to the server's metrics (speaker_asr/serving/metrics.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig, ModelCapabilities
from speaker_asr.errors import RequestError
from speaker_asr.formats.openai_shapes import done_event
from speaker_asr.live.agreement import LocalAgreement
from speaker_asr.live.audio_format import AudioFormatError, FrameDecoder
from speaker_asr.live.events import (FINISH, SERVER_ERROR, Cleared, Committed, DurationUsage,
                                     FailureDetail, InputAudioBufferAppend, InputAudioBufferClear,
                                     InputAudioBufferCommit, ItemAdded, ItemDone, ProtocolError,
                                     SegmentWord, SessionCreated, SessionFinish, SessionUpdate,
                                     SessionUpdated, SpeechStarted, SpeechStopped, TranscriptDone,
                                     TranscriptionCompleted, TranscriptionDelta, TranscriptionFailed,
                                     TranscriptionSegment, TranscriptionSession, UserAudioItem,
                                     commit_empty_error, new_id, parse_client_event)
from speaker_asr.live.final_pass import KeptAudio, Span, overflow_warning, speaker_mapping
from speaker_asr.live.speakers import OnlineSpeakers
from speaker_asr.live.vad import TurnDetector
from speaker_asr.result import Result, SpeakerTurn
from speaker_asr.types import Transcript, Word

logger = logging.getLogger("server")

MAX_ITEM_S = 30.0  # Whisper's window: an item's most audio
MAX_PENDING_ITEMS = 3  # committed items waiting for the model before the session stops reading
PARTIAL_INTERVAL_S = 1.0  # new audio between two partial decodes of a growing item
PAUSE_DECODE_S = 0.096  # a pause this long (3 VAD windows) gets a partial decode the final may reuse
# the model rests between two cadence partials at least this times as long as the last decode
# took: a decode that ends an utterance then rarely waits behind one (pause decodes do not wait)
PARTIAL_REST = 1.0
# a multilingual model without a session language: each item's language is detected on the
# speech heard so far with it (the last 30 s), and once that was this long the session keeps it,
# as the file route detects one language per file on its first 30 s (detection on a second of
# speech, or on ten, picked Welsh for an English meeting with Whisper base, which then looped)
LANGUAGE_LOCK_S = 30.0
# a decode makes at most this many tokens per second of audio (plus DECODE_MIN_TOKENS): speech
# runs at 3-6 tokens a second, and a decode that loops on a wrong language or a hallucination
# (Whisper repeats a phrase to its 448-token limit: 16 s on a CPU with base) stops there instead
DECODE_TOKENS_PER_S = 15
DECODE_MIN_TOKENS = 24
MIN_PARTIAL_S = 0.5  # an item shorter than this is not decoded before its commit
MIN_COMMIT_MS = 100.0  # OpenAI's smallest commit
DEFAULT_MATCH_THRESHOLD = 0.5  # speaker_match_threshold when neither the session nor SPEAKER_MATCH_THRESHOLD says
DEFAULT_MAX_KEPT_S = 3600.0  # audio kept for a final pass when the route says nothing (LIVE_MAX_SESSION_S's default)
# how a session ended, as the route counts it (speaker_asr/serving/metrics.py)
FINISHED, FINAL_PASS_FAILED = "finished", "final_pass_failed"


class FinalPassCancelled(Exception):
    """Raised in a running final pass (from its progress callback) once its session is closed:
    the model thread stops working for a client that is gone."""


@dataclass
class Decoded:
    """A decode of an item's audio: its text and words (times from the item's start; words
    without times when the model has no alignment heads)."""

    text: str
    words: list[Word]
    transcript: Optional[Transcript] = None  # the ASR's own result (None from a stand-in engine)
    tokens: Optional[list[int]] = None  # the tokens the model generated: the next decode's draft


@dataclass
class Voices:
    """Who speaks in an item, as its own diarization found them: ``turns``, the item's words
    attributed to them as the file route attributes them (the transcript's speaker turns, times
    from the item's start; a turn's ``speaker`` is a label of this item only, or None where the
    diarization heard nobody); per label, its ``voice`` (a unit vector, None when it had no
    speech alone to embed) and ``seconds`` of speech alone."""

    turns: list[SpeakerTurn]
    voice: dict[str, Optional[list[float]]]
    seconds: dict[str, float]


class LiveEngine:
    """The model side of the live sessions: every call runs on the server's model thread through
    the runner (:class:`speaker_asr.serving.runner.ModelRunner`), one at a time with the file
    requests. ``handler``: the loaded :class:`~speaker_asr.endpoint.EndpointHandler` (its
    ``asr``, ``voices``, ``capabilities``, ``settings``)."""

    def __init__(self, runner):
        self.runner = runner

    @property
    def handler(self):
        return self.runner.handler

    @property
    def capabilities(self):
        return getattr(self.handler, "capabilities", None)

    @property
    def has_voices(self) -> bool:
        return getattr(self.handler, "voices", None) is not None

    @property
    def model_name(self) -> Optional[str]:
        settings = getattr(self.handler, "settings", None)
        return getattr(settings, "asr_model", None)

    @property
    def match_threshold(self) -> float:
        settings = getattr(self.handler, "settings", None)
        value = getattr(settings, "speaker_match_threshold", None)
        return float(value) if isinstance(value, (int, float)) else DEFAULT_MATCH_THRESHOLD

    async def beside(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the diarization's thread (:meth:`speaker_asr.pipeline.Pipeline.beside`),
        beside the model thread's decodes: an item's speakers are found while the next item is
        decoded. Cancelled while queued: dropped before it runs."""
        future = self.handler.pipeline.beside(fn)
        try:
            return await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError:
            future.cancel()
            raise

    def busy(self) -> bool:
        waiting, running = self.runner.counts()
        return waiting + running > 0

    @property
    def max_audio_seconds(self) -> Optional[float]:
        """The file pipeline's limit on one recording (``MAX_AUDIO_SECONDS``): a final pass keeps
        no more."""
        settings = getattr(self.handler, "settings", None)
        value = getattr(settings, "max_audio_seconds", None)
        return float(value) if isinstance(value, (int, float)) else None

    async def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the model thread. Cancelled while queued: dropped before it runs."""
        job = self.runner.submit(None, lambda data, progress=None: fn())
        done = asyncio.wrap_future(job.future)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            self.runner.drop(job)
            # a call already running ends on its own; nobody reads its outcome now
            done.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    # -- on the model thread ----------------------------------------------------------------

    def decode(self, audio: np.ndarray, config: InferenceConfig,
               previous: Optional[Decoded] = None) -> Decoded:
        """The audio's transcript, with word times where the model has alignment heads (speakers
        are given by them; they cost a decode a few percent). ``previous``: a decode of the same
        audio's beginning, whose tokens the model verifies as its draft
        (speaker_asr/patches/draft_decoding.py: the same text in fewer decoder steps)."""
        from speaker_asr.patches.draft_decoding import DraftTokens

        asr = self.handler.asr
        words_mode = bool(getattr(asr, "has_alignment_heads", False))
        draft = DraftTokens(given=previous.tokens if previous is not None else None)
        if draft.given:  # the previous decode drafts better than an assistant model could
            config = config.model_copy(update={"assisted": False})
        cap = DECODE_MIN_TOKENS + int(DECODE_TOKENS_PER_S * len(audio) / SAMPLE_RATE)
        transcript = asr.transcribe(audio, config, word_timestamps=words_mode, record=False, draft=draft,
                                    max_new_tokens=cap)
        text = (transcript.text or "").strip()
        words = [w for w in (transcript.words or []) if w.text.strip()]
        if not words and text:  # no alignment heads: the words without times
            words = [Word(" " + part, None, None) for part in text.split()]
        return Decoded(text, words, transcript, draft.generated)

    @property
    def multilingual(self) -> bool:
        return bool(getattr(self.handler.asr, "multilingual", False))

    def language(self, audio: np.ndarray) -> Optional[str]:
        """Whisper's language detection on the audio (its first 30 s)."""
        return self.handler.asr.detect_language(audio)

    def embed(self, audio: np.ndarray) -> Optional[np.ndarray]:
        from speaker_asr.diarization.embeddings import embed_clip

        return embed_clip(self.handler.voices.model, audio)

    def voices(self, audio: np.ndarray, decoded: Decoded, config: InferenceConfig) -> Optional[Voices]:
        """Who speaks in the item: the diarization pipeline on its audio (the file route's
        :func:`~speaker_asr.pipeline.diarize_speakers`, with each speaker's voice) and its words
        attributed to them by the file route's :func:`~speaker_asr.attribution.response.attribute`.
        None when the diarization heard nobody or failed (the caller embeds the whole item)."""
        from speaker_asr.attribution.response import attribute
        from speaker_asr.attribution.turns import one_at_a_time
        from speaker_asr.pipeline import diarize_speakers

        if decoded.transcript is None or self.handler.diarization is None:
            return None
        found = diarize_speakers(self.handler.diarization, self.handler.voices, audio, config, with_voices=True)
        if found.error is not None or found.embedding_error is not None or not found.turns:
            return None
        result = attribute(decoded.transcript, len(audio) / SAMPLE_RATE, found, with_words=True)
        seconds: dict[str, float] = {}
        for turn in one_at_a_time(found):
            seconds[turn.speaker] = seconds.get(turn.speaker, 0.0) + max(0.0, turn.end - turn.start)
        return Voices(result.speaker_turns, dict(found.voices), seconds)

    def reference(self, index: int, name: str, ref) -> np.ndarray:
        return self.handler.voices.reference(index, name, ref)

    def transcribe_session(self, audio: np.ndarray, config: InferenceConfig,
                           progress: Callable[[Any], None]) -> Result:
        """The final pass: the file pipeline (:class:`speaker_asr.pipeline.Pipeline`: the ASR
        beside the diarization, attribution, known speakers) over a session's kept audio, as
        ``/v1/audio/transcriptions`` runs it. ``progress`` hears its steps (and stops it by
        raising)."""
        return self.handler.pipeline(audio, config, progress=progress)


@dataclass
class Item:
    """A committed (or growing) utterance."""

    id: str
    start: int  # audio clock sample of its first sample
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    partial_at: int = 0  # samples it had at its last partial decode
    paused_at: int = -1  # the speech end (clock sample) of the pause its last pause decode was for
    speech_end: Optional[int] = None  # where its speech ended (server VAD's stop), once committed
    timed: Optional[tuple[int, Decoded]] = None  # its last partial decode: (audio end, result)
    previous_id: Optional[str] = None  # the item committed before it
    language: Optional[str] = None  # detected for it (a multilingual model, no session language)


class LiveSession:
    """One WebSocket session. ``send``: an async function taking a server event. ``engine``:
    :class:`LiveEngine` (or a stand-in with the same methods). ``vad_factory``: a new
    :class:`~speaker_asr.live.vad.SileroVad`-like object (``probabilities``, ``reset``) for a
    session that turns server VAD on. ``metrics``: the server's
    :class:`~speaker_asr.serving.metrics.Metrics` (``live_audio``, ``live_item``), or None.
    ``max_kept_s``: the most audio kept for a final pass (the route's ``LIVE_MAX_SESSION_S``).
    :attr:`ending`: the task of ``speaker_asr.session.finish`` once it came (its result: how
    the session ended, :data:`FINISHED` or :data:`FINAL_PASS_FAILED`)."""

    def __init__(self, send: Callable[[Any], Awaitable[None]], engine, vad_factory: Callable[[], Any],
                 max_frame_chars: int = 1 << 20, metrics=None, max_kept_s: float = DEFAULT_MAX_KEPT_S):
        self._send = send
        self.metrics = metrics
        self.max_kept_s = max_kept_s
        self.engine = engine
        self.vad_factory = vad_factory
        self.max_frame_chars = max_frame_chars
        self.session = TranscriptionSession.new(engine.model_name)
        self.decoder = FrameDecoder.for_format(self.session.format)
        self.config = self._config(self.session)
        self.clock = 0  # samples appended since the session began (16 kHz)
        self.buffer = np.zeros(0, dtype=np.float32)
        self.buffer_start = 0  # clock sample of self.buffer[0]
        self.vad = None
        self.detector: Optional[TurnDetector] = None
        self.item: Optional[Item] = None  # the item being spoken (server VAD)
        self.previous_item_id: Optional[str] = None
        self.speakers: Optional[OnlineSpeakers] = None
        self.known: dict[str, np.ndarray] = {}
        self.segments = 0
        self.queue: asyncio.Queue = asyncio.Queue()
        self.pending = 0  # committed items not yet completed
        self._room = asyncio.Event()
        self._room.set()
        self._partial: Optional[asyncio.Task] = None
        self._decoded = (0.0, 0.0)  # the last partial decode: (monotonic time it ended, seconds)
        self._language: Optional[str] = None  # the session's detected language, once kept
        self._heard = np.zeros(0, dtype=np.float32)  # committed speech, the last 30 s, until then
        self._worker: Optional[asyncio.Task] = None
        self.items = {"completed": 0, "failed": 0}  # items by how their transcription ended
        self._committed_at: dict[str, float] = {}  # item id -> when its commit was sent
        self._transcripts: dict[str, Optional[str]] = {}  # item id -> transcript, for item.done
        self.kept: Optional[KeptAudio] = None  # final_transcript: the audio for the final pass
        self.live_spans: list[Span] = []  # final_transcript: the segments sent, for its labels
        self.ending: Optional[asyncio.Task] = None
        self._closed = threading.Event()  # read by a final pass running on the model thread

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._worker = asyncio.ensure_future(self._work())
        await self._setup_vad()
        await self.send(SessionCreated(session=self.session))

    async def close(self) -> None:
        """Everything pending is cancelled (queued model calls dropped, a running final pass
        stopped at its next step)."""
        self._closed.set()
        tasks = (self.ending, self._partial, self._worker)
        for task in tasks:
            if task is not None and not task.done():
                task.cancel()
        for task in tasks:
            if task is not None:
                try:
                    await task
                except BaseException:
                    pass
        self.buffer = np.zeros(0, dtype=np.float32)
        self.kept = None
        while not self.queue.empty():
            self.queue.get_nowait()

    async def send(self, event) -> None:
        """Every server event goes out here; what the session counts of them is noted once it is
        sent (:meth:`_note`)."""
        await self._send(event)
        self._note(event)

    def _note(self, event) -> None:
        """Commit times (each item's latency to its ``completed``), items by outcome, each
        item's transcript (for its ``conversation.item.done``) and, for a final pass, the
        segments with their speakers."""
        if isinstance(event, Committed):
            self._committed_at[event.item_id] = time.monotonic()
        elif isinstance(event, (TranscriptionCompleted, TranscriptionFailed)):
            status = "completed" if isinstance(event, TranscriptionCompleted) else "failed"
            self.items[status] += 1
            self._transcripts[event.item_id] = event.transcript if status == "completed" else None
            committed = self._committed_at.pop(event.item_id, None)
            if self.metrics is not None and committed is not None:
                self.metrics.live_item(status, time.monotonic() - committed)
        elif isinstance(event, TranscriptionSegment) and self.kept is not None:
            self.live_spans.append((event.start, event.end, event.speaker))

    async def room(self) -> None:
        """Wait until the committed items' queue has room (see the module's docstring)."""
        await self._room.wait()

    async def drain(self) -> None:
        """Wait until every committed item is done (tests, a client that commits and waits)."""
        await self.queue.join()

    # -- client events -----------------------------------------------------------------------

    async def handle(self, message) -> None:
        """One client message; a bad one is answered with an ``error`` event."""
        try:
            event = parse_client_event(message)
            if self.ending is not None:
                raise ProtocolError(f"The session is ending ({FINISH} was received): no more events are "
                                    "taken. The server closes the connection once the last items (and "
                                    "the final transcript, if asked for) are sent.", param="type",
                                    code="session_ending", event_id=event.event_id)
            if isinstance(event, SessionFinish):
                self.ending = asyncio.ensure_future(self._end())
            elif isinstance(event, InputAudioBufferAppend):
                await self._append(event)
            elif isinstance(event, InputAudioBufferCommit):
                await self._commit_manual(event.event_id)
            elif isinstance(event, InputAudioBufferClear):
                await self._clear()
            elif isinstance(event, SessionUpdate):
                await self._update(event)
        except ProtocolError as exc:
            await self.send(exc.event())

    async def _update(self, event: SessionUpdate) -> None:
        session = self.session.apply(event.session, event.event_id)
        try:
            config = self._config(session)
        except RequestError as exc:
            param = {"language": "session.audio.input.transcription.language",
                     "prompt": "session.audio.input.transcription.prompt"}.get(exc.param or "", exc.param)
            raise ProtocolError(str(exc), param=param, event_id=event.event_id) from None
        options = session.speaker_asr
        known = self.known
        if "known_speaker_names" in _given(event.session.speaker_asr):
            known = await self._known(options, event.event_id)
        if self.speakers is not None:
            for name, vector in known.items():
                if name not in self.known:
                    try:
                        self.speakers.add_known(name, vector)
                    except ValueError as exc:
                        raise ProtocolError(str(exc), param="session.speaker_asr.known_speaker_names",
                                            event_id=event.event_id) from None
            self.speakers.threshold = self._threshold(options)
            self.speakers.max_speakers = options.max_speakers
        self.known = known
        if session.format != self.session.format:
            self.decoder = FrameDecoder.for_format(session.format)
        vad_changed = session.turn_detection != self.session.turn_detection
        if config.language != self.config.language:
            self._language = None
        self.session, self.config = session, config
        self._keep(options.final_transcript)
        if vad_changed:
            await self._setup_vad()
        await self.send(SessionUpdated(session=self.session))

    def _keep(self, final_transcript: bool) -> None:
        """``final_transcript`` turned on: the audio is kept from here (at most ``max_kept_s`` and
        the engine's ``max_audio_seconds``); turned off: what was kept is dropped."""
        if final_transcript and self.kept is None:
            limit = self.max_kept_s
            most = getattr(self.engine, "max_audio_seconds", None)
            if isinstance(most, (int, float)):
                limit = min(limit, most)
            self.kept, self.live_spans = KeptAudio(self.clock, int(limit * SAMPLE_RATE)), []
        elif not final_transcript and self.kept is not None:
            self.kept, self.live_spans = None, []

    def _capabilities(self):
        caps = self.engine.capabilities
        return caps if caps is not None else ModelCapabilities()

    def _config(self, session: TranscriptionSession) -> InferenceConfig:
        t = session.audio.input.transcription
        params: dict[str, Any] = {"assisted": False}
        if t.language:
            params["language"] = t.language
        if t.prompt:
            params["prompt"] = t.prompt
        return InferenceConfig.from_request(params, self._capabilities())

    def _final_config(self) -> InferenceConfig:
        """The final pass's request, as the file API takes it: the session's language and
        prompt, and its speaker options (``max_speakers``, the known speakers and their
        threshold); the file route's defaults otherwise."""
        t, options = self.session.audio.input.transcription, self.session.speaker_asr
        params: dict[str, Any] = {}
        if t.language:
            params["language"] = t.language
        if t.prompt:
            params["prompt"] = t.prompt
        if options.max_speakers is not None:
            params["max_speakers"] = options.max_speakers
        if options.known_speaker_names:
            params["known_speaker_names"] = list(options.known_speaker_names)
            params["known_speaker_references"] = list(options.known_speaker_references)
        if options.speaker_match_threshold is not None:
            params["speaker_match_threshold"] = options.speaker_match_threshold
        return InferenceConfig.from_request(params, self._capabilities())

    async def _known(self, options, event_id: Optional[str]) -> dict[str, np.ndarray]:
        names, refs = options.known_speaker_names, options.known_speaker_references
        if not names:
            return {}
        if not self.engine.has_voices:
            raise ProtocolError("known speakers need the diarization pipeline's voice model, and "
                                "this server has none loaded", param="session.speaker_asr.known_speaker_names",
                                event_id=event_id)

        def embed_all():
            return {name: self.engine.reference(i, name, ref) for i, (name, ref) in enumerate(zip(names, refs))}
        try:
            return await self.engine.run(embed_all)
        except RequestError as exc:
            raise ProtocolError(str(exc), param="session.speaker_asr.known_speaker_references",
                                event_id=event_id) from None

    def _threshold(self, options) -> float:
        return options.speaker_match_threshold if options.speaker_match_threshold is not None \
            else self.engine.match_threshold

    async def _setup_vad(self) -> None:
        vad = self.session.turn_detection
        if vad is None:
            self.detector = None
            if self.item is not None:  # turning VAD off mid-speech: the audio stays in the buffer
                self.item = None
            return
        if self.vad is None:
            self.vad = await asyncio.to_thread(self.vad_factory)
        self.vad.reset(self.clock)
        self.detector = TurnDetector(vad.threshold, vad.prefix_padding_ms, vad.silence_duration_ms)

    # -- audio -------------------------------------------------------------------------------

    async def _append(self, event: InputAudioBufferAppend) -> None:
        if len(event.audio) > self.max_frame_chars:
            raise ProtocolError(f"The audio frame is too large ({len(event.audio)} base64 characters; "
                                f"this server takes at most {self.max_frame_chars} per "
                                "input_audio_buffer.append, LIVE_MAX_FRAME_BYTES): send smaller frames "
                                "(20-100 ms each is usual).", param="audio", code="invalid_value",
                                event_id=event.event_id)
        try:
            samples = self.decoder.decode(event.audio)
        except AudioFormatError as exc:
            raise ProtocolError.from_request_error(exc, event.event_id) from None
        if self.detector is None and len(self.buffer) + len(samples) > MAX_ITEM_S * SAMPLE_RATE:
            raise ProtocolError(f"The input audio buffer is full: it holds {len(self.buffer) / SAMPLE_RATE:.2f} s "
                                f"and an item is at most {MAX_ITEM_S:g} s (what Whisper sees at once). "
                                "Commit the buffer (input_audio_buffer.commit) before appending more; "
                                "this frame was dropped.", param="audio", code="input_audio_buffer_full",
                                event_id=event.event_id)
        if not len(samples):
            return
        self.buffer = np.concatenate([self.buffer, samples])
        self.clock += len(samples)
        if self.kept is not None:
            self.kept.append(samples)
        if self.metrics is not None:
            self.metrics.live_audio(len(samples) / SAMPLE_RATE)
        if self.detector is not None:
            await self._vad(samples)

    async def _vad(self, samples: np.ndarray) -> None:
        probs, first = self.vad.probabilities(samples)
        for turn in self.detector.push(probs, first):
            if turn.kind == "start":
                start = max(turn.sample, self.buffer_start)
                self._trim(start)
                self.item = Item(new_id("item"), start)
                await self.send(SpeechStarted(audio_start_ms=_ms(start), item_id=self.item.id))
            elif self.item is not None:
                item = self.item
                item.speech_end = turn.sample
                await self.send(SpeechStopped(audio_end_ms=_ms(turn.sample), item_id=item.id))
                await self._commit(item, self.clock)
        if self.item is None:  # silence: keep the prefix padding only
            keep = self.detector.prefix + 2 * len(samples)
            self._trim(max(self.buffer_start, self.clock - keep))
        else:
            item = self.item
            if self.clock - item.start >= MAX_ITEM_S * SAMPLE_RATE:  # the longest item: split here
                await self.send(SpeechStopped(audio_end_ms=_ms(self.clock), item_id=item.id))
                await self._commit(item, self.clock)
                self.item = Item(new_id("item"), self.clock)
                await self.send(SpeechStarted(audio_start_ms=_ms(self.clock), item_id=self.item.id))
            else:
                self._maybe_partial(item)

    def _trim(self, start: int) -> None:
        """Drop the buffer's audio before clock sample ``start``."""
        if start > self.buffer_start:
            self.buffer = self.buffer[start - self.buffer_start:].copy()
            self.buffer_start = start

    def _audio(self, start: int, end: int) -> np.ndarray:
        return self.buffer[max(0, start - self.buffer_start):max(0, end - self.buffer_start)]

    async def _commit_manual(self, event_id: Optional[str]) -> None:
        if self.item is not None:  # server VAD mid-speech: the client commits what is there
            item = self.item
            await self._commit(item, self.clock, event_id)
            return
        held_ms = len(self.buffer) * 1000.0 / SAMPLE_RATE
        if held_ms < MIN_COMMIT_MS:
            await self.send(commit_empty_error(held_ms, event_id))
            return
        await self._commit(Item(new_id("item"), self.buffer_start), self.clock, event_id)

    async def _commit(self, item: Item, end: int, event_id: Optional[str] = None) -> None:
        audio = self._audio(item.start, end).copy()
        if len(audio) * 1000.0 / SAMPLE_RATE < MIN_COMMIT_MS:
            if event_id is not None:
                await self.send(commit_empty_error(len(audio) * 1000.0 / SAMPLE_RATE, event_id))
            self.item = None
            return
        self._trim(end)
        self.item = None
        if self._detects_language():
            self._heard = np.concatenate([self._heard, audio])[-int(MAX_ITEM_S * SAMPLE_RATE):]
        item.previous_id = self.previous_item_id
        await self.send(Committed(item_id=item.id, previous_item_id=item.previous_id))
        await self.send(ItemAdded(previous_item_id=item.previous_id, item=UserAudioItem.of(item.id)))
        self.previous_item_id = item.id
        self.pending += 1
        if self.pending >= MAX_PENDING_ITEMS:
            self._room.clear()
        self.queue.put_nowait((item, audio))

    async def _clear(self) -> None:
        if self.kept is not None:  # the final pass must not hear it either
            self.kept.silence_from(self.buffer_start)
        self.decoder.flush()
        self.buffer = np.zeros(0, dtype=np.float32)
        self.buffer_start = self.clock
        self.item = None
        if self.detector is not None:
            self.detector.reset()
            self.vad.reset(self.clock)
        await self.send(Cleared())

    # -- decoding ----------------------------------------------------------------------------

    def _maybe_partial(self, item: Item) -> None:
        """A partial decode of the growing item, when the model is free: once in each pause of at
        least :data:`PAUSE_DECODE_S`, else one every :data:`PARTIAL_INTERVAL_S` of new audio. Each
        is timed (word times, as the final decode) and kept: when the utterance ends, a partial
        whose audio holds all its speech (it began after the speech's last window) *is* its final
        decode, so the text is ready when the VAD commits; the pause's decode makes that likely."""
        grown = self.clock - item.start
        if grown < MIN_PARTIAL_S * SAMPLE_RATE:
            return
        if (self._partial is not None and not self._partial.done()) or self.engine.busy():
            return
        pause = self.detector.pause(self.clock) if self.detector is not None else 0
        speech_end = self.clock - pause
        if pause >= PAUSE_DECODE_S * SAMPLE_RATE and item.paused_at != speech_end:
            item.paused_at = speech_end
        elif grown - item.partial_at < PARTIAL_INTERVAL_S * SAMPLE_RATE \
                or time.monotonic() - self._decoded[0] < PARTIAL_REST * self._decoded[1]:
            return
        item.partial_at = grown
        audio = self._audio(max(item.start, self.clock - int(MAX_ITEM_S * SAMPLE_RATE)), self.clock).copy()
        self._partial = asyncio.ensure_future(self._run_partial(item, audio, self.clock))

    async def _run_partial(self, item: Item, audio: np.ndarray, end: int) -> None:
        """A decode of the item's audio up to clock sample ``end`` (kept for the final)."""
        whole = end - len(audio) == item.start  # the item from its start (not its last 30 s)
        # a decode of the whole item is the draft of this one
        previous = item.timed[1] if item.timed is not None and whole else None
        started = time.monotonic()
        try:
            config = await self._item_config(item, audio)
            decoded = await self.engine.run(lambda: self.engine.decode(audio, config, previous))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("a partial decode failed (skipped)", exc_info=True)
            return
        finally:
            ended = time.monotonic()
            self._decoded = (ended, ended - started)
        if whole:  # the final may use it
            item.timed = (end, decoded)
        if self.item is not item:  # committed meanwhile: its final decode closes it
            return
        delta = item.agreement.update(decoded.words)
        if delta:
            await self.send(TranscriptionDelta(item_id=item.id, delta=delta.text))

    def _detects_language(self) -> bool:
        """Whether items still get their language detected: a multilingual model, no session
        language and none kept yet (:data:`LANGUAGE_LOCK_S`)."""
        return (not self.config.language and self._language is None
                and getattr(self.engine, "multilingual", False))

    async def _item_config(self, item: Item, audio: np.ndarray) -> InferenceConfig:
        """The session's config, with the item's language where the session gives none and the
        model is multilingual (:data:`LANGUAGE_LOCK_S`): detected at the item's first decode, the
        same for all its decodes."""
        if self.config.language or not getattr(self.engine, "multilingual", False):
            return self.config
        if item.language is None:
            if not self._detects_language():
                item.language = self._language
            else:
                heard = np.concatenate([self._heard, audio])[-int(MAX_ITEM_S * SAMPLE_RATE):]
                item.language = await self.engine.run(lambda: self.engine.language(heard))
                if item.language and len(heard) >= LANGUAGE_LOCK_S * SAMPLE_RATE:
                    self._language, self._heard = item.language, np.zeros(0, dtype=np.float32)
        return self.config.model_copy(update={"language": item.language}) if item.language else self.config

    async def _work(self) -> None:
        """Committed items, in order: final decode, voice -> delta, completed, segment."""
        while True:
            item, audio = await self.queue.get()
            try:
                if self._partial is not None and not self._partial.done():
                    try:  # its delta goes out before the item's completion
                        await asyncio.shield(self._partial)
                    except Exception:
                        pass
                await self._finish(item, audio)
                await self.send(ItemDone(previous_item_id=item.previous_id, item=UserAudioItem.of(
                    item.id, self._transcripts.pop(item.id, None))))
            except asyncio.CancelledError:
                raise
            except Exception:  # a send that failed: the connection is going
                logger.debug("live item not finished", exc_info=True)
            finally:
                del audio
                self.pending -= 1
                if self.pending < MAX_PENDING_ITEMS:
                    self._room.set()
                self.queue.task_done()

    async def _finish(self, item: Item, audio: np.ndarray) -> None:
        """The item's final decode -> its last ``delta`` and ``completed`` (sent as soon as the
        text is there); then, with speaker labels on, who speaks in it -> its ``segment`` events."""
        options = self.session.speaker_asr
        seconds = len(audio) / SAMPLE_RATE
        try:
            config = await self._item_config(item, audio)
            if item.timed is not None and item.speech_end is not None and item.timed[0] >= item.speech_end:
                decoded = item.timed[1]  # decoded after its last speech: all of it
            else:
                previous = item.timed[1] if item.timed is not None else None
                decoded = await self.engine.run(lambda: self.engine.decode(audio, config, previous))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("live transcription of %s failed", item.id, exc_info=exc)
            await self.send(TranscriptionFailed(item_id=item.id, error=FailureDetail(
                type="server_error", code=None,
                message="The server had an error while transcribing this item.")))
            return
        finish = item.agreement.finish(decoded.words)
        if finish.delta:
            await self.send(TranscriptionDelta(item_id=item.id, delta=finish.delta))
        transcript = decoded.text if not decoded.words else finish.transcript
        await self.send(TranscriptionCompleted(item_id=item.id, transcript=transcript,
                                               usage=DurationUsage(seconds=round(seconds, 3))))
        if transcript and options.speaker_labels and self.engine.has_voices:
            for event in await self._speakers_of(item, audio, decoded, transcript, options):
                await self.send(event)

    async def _speakers_of(self, item: Item, audio: np.ndarray, decoded: Decoded, transcript: str,
                           options) -> list[TranscriptionSegment]:
        """The item's segment events: its own diarization's speakers (:meth:`LiveEngine.voices`)
        given the session's labels by their voices (:meth:`OnlineSpeakers.assign_group`), one
        event per speaker turn; when the diarization heard nobody, the whole item's voice decides
        one speaker (a stretch too short to be decided by voice takes the previous speaker; the
        session's first one is embedded all the same: someone must open the first label). A
        model error here costs the item its segments only (logged): its text is out already."""
        config, seconds = self.config, len(audio) / SAMPLE_RATE
        speakers = self._speakers(options)
        try:
            found: Optional[Voices] = await self.engine.beside(lambda: self.engine.voices(audio, decoded, config))
            if found is None:
                embed = speakers.needs_embedding(seconds) or not speakers.labels
                embedding = await self.engine.beside(lambda: self.engine.embed(audio)) if embed else None
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("live speakers of %s failed", item.id)
            return []
        if found is None:
            duration = seconds if speakers.labels else max(seconds, speakers.min_duration_s)
            speaker = speakers.assign(embedding, duration).speaker
            if speaker is None:  # no voice vector before anyone was heard
                return []
            turns = [SpeakerTurn(speaker, transcript, 0.0, seconds, list(decoded.words))]
        else:
            labels = [label for label in found.seconds if found.seconds[label] > 0] or list(found.voice)
            chosen = speakers.assign_group([(found.voice.get(label), found.seconds.get(label, 0.0))
                                            for label in labels])
            names = {label: a.speaker for label, a in zip(labels, chosen)}
            lead = max(labels, key=lambda label: found.seconds.get(label, 0.0), default=None)
            fallback = names.get(lead) or speakers.previous
            turns = [replace(t, speaker=names.get(t.speaker) or fallback) for t in found.turns if t.text]
            if any(t.speaker is None for t in turns):
                return []
            turns = _merged(turns)
        return [self._segment(item, turn, seconds, options) for turn in turns]

    # -- the end -----------------------------------------------------------------------------

    async def _end(self) -> str:
        """``speaker_asr.session.finish``: commit what the buffer holds, finish every item, then
        the final pass if asked for. Returns how the session ended (:data:`FINISHED`,
        :data:`FINAL_PASS_FAILED`); the route closes the socket."""
        if self.item is not None or (self.detector is None
                                     and len(self.buffer) * 1000.0 / SAMPLE_RATE >= MIN_COMMIT_MS):
            await self._commit_manual(None)
        await self.drain()
        kept, self.kept = self.kept, None
        if kept is None:
            return FINISHED
        try:
            result = await self._final_pass(kept)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("the final pass of live session %s failed", self.session.id, exc_info=exc)
            await self.send(ProtocolError(
                "The server had an error while making the final transcript; the live transcript "
                "stands.", code="final_transcript_failed", type=SERVER_ERROR).event())
            return FINAL_PASS_FAILED
        await self.send(TranscriptDone(**done_event(result, segments=True)))
        return FINISHED

    async def _final_pass(self, kept: KeptAudio) -> Result:
        """The file pipeline over the kept audio (on the model thread), on the session's clock,
        its speakers named as the live session named them."""
        config = self._final_config()
        seconds, dropped = kept.seconds, kept.dropped / SAMPLE_RATE
        closed = self._closed

        def stop_if_closed(_progress=None) -> None:
            if closed.is_set():
                raise FinalPassCancelled("the live session was closed during its final pass")

        def run() -> Result:
            audio = kept.audio()
            kept.clear()
            stop_if_closed()
            return self.engine.transcribe_session(audio, config, stop_if_closed)

        result = (await self.engine.run(run)).shifted(kept.origin / SAMPLE_RATE)
        if dropped:
            result = replace(result, warnings=[*result.warnings, overflow_warning(seconds, dropped)])
        keep = {k.speaker for k in result.known_speakers if k.speaker is not None}
        mapping = speaker_mapping([(t.start, t.end, t.speaker) for t in result.speaker_turns],
                                  self.live_spans, result.speakers_in_order(), keep)
        return result.renamed(mapping)

    def _speakers(self, options) -> OnlineSpeakers:
        if self.speakers is None:
            self.speakers = OnlineSpeakers(self._threshold(options), options.max_speakers, known=self.known)
        return self.speakers

    def _segment(self, item: Item, turn: SpeakerTurn, seconds: float, options) -> TranscriptionSegment:
        origin = item.start / SAMPLE_RATE

        def at(t: float) -> float:  # word times clipped to the item's audio (a model may overshoot)
            return round(origin + min(max(0.0, t), seconds), 3)

        timed = [w for w in turn.words if w.start is not None and w.end is not None]
        start = at(timed[0].start) if timed else at(turn.start)
        end = at(timed[-1].end) if timed else at(turn.end)
        words = None
        if options.return_word_timestamps:
            words = [SegmentWord(word=w.text.strip(), start=at(w.start), end=at(w.end)) for w in timed]
        self.segments += 1
        return TranscriptionSegment(item_id=item.id, id=f"seg_{self.segments - 1}", start=start,
                                    end=max(start, end), text=turn.text.strip(), speaker=turn.speaker,
                                    words=words)


def _merged(turns: list[SpeakerTurn]) -> list[SpeakerTurn]:
    """Consecutive turns that got one session speaker joined (two of the item's own speakers
    may turn out to be one)."""
    out: list[SpeakerTurn] = []
    for t in turns:
        if out and out[-1].speaker == t.speaker:
            last = out[-1]
            out[-1] = SpeakerTurn(t.speaker, (last.text + " " + t.text.strip()).strip(), last.start,
                                  max(last.end, t.end), last.words + t.words)
        else:
            out.append(t)
    return out


def _ms(sample: int) -> int:
    return int(round(sample * 1000 / SAMPLE_RATE))


def _given(update) -> set:
    return set(update.model_fields_set) if update is not None else set()
