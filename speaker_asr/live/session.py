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
    * An item is at most :data:`~speaker_asr.live.items.MAX_ITEM_S` (30 s: Whisper's window, what it sees at once). With
      server VAD an utterance that reaches it is committed there and a new item opens at once
      (``speech_stopped`` + ``committed`` + ``speech_started``, the same speech going on). With
      manual commits an append that would take the buffer past it is refused (an ``error``,
      code ``input_audio_buffer_full``) and its audio dropped: commit first.
    * Committed items wait for the model in a queue of at most :data:`MAX_PENDING_ITEMS`; while it
      is full the session stops reading the client's messages (:meth:`LiveSession.wait_for_room`), so
      audio sent faster than the model transcribes it waits in the client's socket (TCP
      backpressure) instead of in this process's memory. A real-time client never meets this
      unless the model cannot keep up; its items are then late, never lost.
    * Frames: at most ``max_frame_bytes`` of base64 per append (``LIVE_MAX_FRAME_BYTES``), larger
      ones refused with an ``error``.

Decoding and speakers (docs/architecture.md, "A live session, in one pass", walks them)
    * A growing item is decoded again as it grows (:mod:`.items`: when), on the model thread
      through the engine (:mod:`.engine`), each decode feeding
      :class:`~speaker_asr.live.agreement.LocalAgreement`, whose newly agreed words go out as
      ``delta`` events; at commit its final decode gives the last ``delta`` and ``completed``.
      A partial that cannot be the final stops at the commit; none starts while a final waits.
    * With ``speaker_labels`` and a diarization loaded (:mod:`.speaker_work`), a growing item
      is cut where another person takes over; once its text is out its speakers are found on
      the diarization thread and given the session's labels (:mod:`.labelling`) -> one
      ``segment`` event per speaker turn, before the next item. Items complete in order.
    * A model exception for an item: ``conversation.item.input_audio_transcription.failed`` for
      it (no internals; the traceback goes to the log); the session goes on. A failed partial
      decode is logged and skipped; a failure while finding speakers costs the item its
      segments only.
    * Items as OpenAI announces them: ``conversation.item.added`` right after ``committed`` (its
      transcript null), ``conversation.item.done`` after the item's last transcription event.
    * ``speaker_asr.session.finish`` (:meth:`LiveSession._end`): the buffer committed, every
      item finished, then with ``final_transcript`` the final pass (the file pipeline over the
      kept audio, its speakers in the live labels: :mod:`.final_pass`) as one
      ``transcript.text.done``; a failure of it, an ``error`` (``final_transcript_failed``).

Faults: a message that is not an event, bad base64, a bad frame or an unknown event get an
``error`` event and the session goes on. :meth:`LiveSession.close` (the client left, or the
session ends) cancels what is pending: queued model calls are dropped before they run, a running
final pass stops at its next progress step (it raises
:class:`~speaker_asr.live.final_pass.FinalPassCancelled`), nothing is
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
from typing import Any, Awaitable, Callable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig, ModelCapabilities
from speaker_asr.errors import RequestError
from speaker_asr.formats.openai_shapes import done_event
from speaker_asr.live.audio_format import AudioFormatError, FrameDecoder
from speaker_asr.live.final_pass import KeptAudio, Span, run_final_pass
from speaker_asr.live.items import MAX_ITEM_S, Item, partial_due
from speaker_asr.live.language import SessionLanguage
from speaker_asr.live.protocol import (FINISH, SERVER_ERROR, Cleared, Committed, DurationUsage,
                                       FailureDetail, InputAudioBufferAppend,
                                       InputAudioBufferClear, InputAudioBufferCommit, ItemAdded,
                                       ItemDone, ProtocolError, SessionCreated, SessionFinish,
                                       SessionUpdate, SessionUpdated, SpeechStarted, SpeechStopped,
                                       TranscriptDone, TranscriptionCompleted, TranscriptionDelta,
                                       TranscriptionFailed, TranscriptionSegment,
                                       TranscriptionSession, UserAudioItem, commit_empty_error,
                                       new_id, parse_client_event)
from speaker_asr.live.session_config import session_config
from speaker_asr.live.speaker_work import SpeakerWork
from speaker_asr.live.speakers import OnlineSpeakers
from speaker_asr.live.vad import TurnDetector
from speaker_asr.settings import DEFAULT_LIVE_MAX_SESSION_S

logger = logging.getLogger("server")

MAX_PENDING_ITEMS = 3  # committed items waiting for the model before the session stops reading
MIN_COMMIT_MS = 100.0  # OpenAI's smallest commit
# how a session ended, as the route counts it (speaker_asr/serving/metrics.py)
FINISHED, FINAL_PASS_FAILED = "finished", "final_pass_failed"


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
                 max_frame_chars: int = 1 << 20, metrics=None, max_kept_s: float = DEFAULT_LIVE_MAX_SESSION_S):
        self._send = send
        self.metrics = metrics
        self.max_kept_s = max_kept_s
        self.engine = engine
        self.vad_factory = vad_factory
        self.max_frame_chars = max_frame_chars
        self.session = TranscriptionSession.new(engine.model_name)
        self.decoder = FrameDecoder.for_format(self.session.format)
        self.config = session_config(self.session, self._capabilities())
        self.clock = 0  # samples appended since the session began (16 kHz)
        self.buffer = np.zeros(0, dtype=np.float32)
        self.buffer_start = 0  # clock sample of self.buffer[0]
        self.vad = None
        self.detector: Optional[TurnDetector] = None
        self.item: Optional[Item] = None  # the item being spoken (server VAD)
        self.previous_item_id: Optional[str] = None
        self.speakers: Optional[OnlineSpeakers] = None
        self.known: dict[str, np.ndarray] = {}
        self.queue: asyncio.Queue = asyncio.Queue()
        self.pending = 0  # committed items not yet completed
        self._room = asyncio.Event()
        self._room.set()
        self._partial: Optional[asyncio.Task] = None
        # the running partial decode's item, audio end and cancel flag (an utterance that ended
        # makes it useless unless it is that utterance's final decode)
        self._partial_of: Optional[tuple[Item, int, threading.Event]] = None
        self._finals = 0  # committed items whose final decode has not ended: no partial before it
        self.speaker_work = SpeakerWork(engine)  # who speaks in the items
        self._decoded = (0.0, 0.0)  # the last partial decode: (monotonic time it ended, seconds)
        self.language = SessionLanguage(engine.multilingual)
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
        if self._partial_of is not None:
            self._partial_of[2].set()
        await self.speaker_work.close()
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
        sent (:meth:`_count_sent`)."""
        await self._send(event)
        self._count_sent(event)

    def _count_sent(self, event) -> None:
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

    async def wait_for_room(self) -> None:
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
        config = session_config(session, self._capabilities(), event_id=event.event_id)
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
            self.language.forget()
        self.session, self.config = session, config
        self._keep_audio(options.final_transcript)
        if vad_changed:
            await self._setup_vad()
        await self.send(SessionUpdated(session=self.session))

    def _keep_audio(self, final_transcript: bool) -> None:
        """``final_transcript`` turned on: the audio is kept from here (at most ``max_kept_s`` and
        the engine's ``max_audio_seconds``); turned off: what was kept is dropped."""
        if final_transcript and self.kept is None:
            limit = self.max_kept_s
            most = self.engine.max_audio_seconds
            if isinstance(most, (int, float)):
                limit = min(limit, most)
            self.kept, self.live_spans = KeptAudio(self.clock, int(limit * SAMPLE_RATE)), []
        elif not final_transcript and self.kept is not None:
            self.kept, self.live_spans = None, []

    def _capabilities(self):
        caps = self.engine.capabilities
        return caps if caps is not None else ModelCapabilities()

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
            if item.change_at is not None:  # another person took over: the item ends where they began
                await self._split(item, item.change_at)
            elif self.clock - item.start >= MAX_ITEM_S * SAMPLE_RATE:  # the longest item: split here
                await self._split(item, self.clock)
            else:
                if self._labels_on():
                    self.speaker_work.look(item, self.clock, self._audio)
                self._maybe_partial(item)

    async def _split(self, item: Item, at: int) -> None:
        """The growing ``item`` ends at clock sample ``at`` and the speech goes on in a new one
        (``speech_stopped`` + ``committed`` + ``speech_started``)."""
        item.speech_end = at
        await self.send(SpeechStopped(audio_end_ms=_ms(at), item_id=item.id))
        await self._commit(item, at)
        self.item = Item(new_id("item"), at)
        await self.send(SpeechStarted(audio_start_ms=_ms(at), item_id=self.item.id))

    def _labels_on(self) -> bool:
        return bool(self.session.speaker_asr.speaker_labels) and self.engine.has_voices

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
        item.end = end
        self.language.heard(audio, self.config.language)
        item.previous_id = self.previous_item_id
        await self.send(Committed(item_id=item.id, previous_item_id=item.previous_id))
        await self.send(ItemAdded(previous_item_id=item.previous_id, item=UserAudioItem.of(item.id)))
        self.previous_item_id = item.id
        self._finals += 1
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
        """A partial decode of the growing item when the model is free and one is due
        (:func:`~speaker_asr.live.items.partial_due`); it is timed (word times, as the final
        decode) and kept, as the final decode when it heard all the speech."""
        if (self._partial is not None and not self._partial.done()) or self._finals or self.engine.busy():
            return
        pause = self.detector.pause(self.clock) if self.detector is not None else 0
        if not partial_due(item, self.clock, pause, time.monotonic(), self._decoded):
            return
        audio = self._audio(max(item.start, self.clock - int(MAX_ITEM_S * SAMPLE_RATE)), self.clock).copy()
        self._partial = asyncio.ensure_future(self._run_partial(item, audio, self.clock))

    async def _run_partial(self, item: Item, audio: np.ndarray, end: int) -> None:
        """A decode of the item's audio up to clock sample ``end`` (kept for the final)."""
        whole = end - len(audio) == item.start  # the item from its start (not its last 30 s)
        # a decode of the whole item is the draft of this one
        previous = item.last_partial[1] if item.last_partial is not None and whole else None
        started, cancel = time.monotonic(), threading.Event()
        self._partial_of = (item, end, cancel)
        try:
            config = await self._item_config(item, audio)
            decoded = await self.engine.run(lambda: self.engine.decode(audio, config, previous, cancel))
        except asyncio.CancelledError:
            raise
        except Exception:
            if not cancel.is_set():
                logger.warning("a partial decode failed (skipped)", exc_info=True)
            return
        finally:
            self._partial_of = None
            ended = time.monotonic()
            self._decoded = (ended, ended - started)
        if whole:  # the final may use it
            item.last_partial = (end, decoded)
        if self.item is not item:  # committed meanwhile: its final decode closes it
            return
        delta = item.agreement.update(decoded.words)
        if delta:
            await self.send(TranscriptionDelta(item_id=item.id, delta=delta.text))

    async def _item_config(self, item: Item, audio: np.ndarray) -> InferenceConfig:
        """The session's config, with the item's language where the session gives none and the
        model is multilingual (:mod:`speaker_asr.live.language`): detected at the item's first
        decode, the same for all its decodes."""
        if item.language is None:
            item.language = await self.language.for_item(
                audio, self.config.language,
                lambda heard: self.engine.run(lambda: self.engine.language(heard)))
        if not item.language or item.language == self.config.language:
            return self.config
        return self.config.model_copy(update={"language": item.language})

    async def _work(self) -> None:
        """Committed items, in order: final decode, voice -> delta, completed, segment."""
        while True:
            item, audio = await self.queue.get()
            try:
                if self._partial is not None and not self._partial.done():
                    running = self._partial_of
                    if running is not None and not (running[0] is item and item.covers(running[1])):
                        running[2].set()  # it cannot be this item's final decode: it stops now
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
            decoded = item.final_decode()  # a partial decoded after its last speech: all of it
            if decoded is None:
                # (a partial that heard past the item's cut drafts the words before it all the same)
                previous = item.last_partial[1] if item.last_partial is not None else None
                decoded = await self.engine.run(lambda: self.engine.decode(audio, config, previous))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("live transcription of %s failed", item.id, exc_info=exc)
            await self.send(TranscriptionFailed(item_id=item.id, error=FailureDetail(
                type="server_error", code=None,
                message="The server had an error while transcribing this item.")))
            return
        finally:
            self._finals -= 1
        finish = item.agreement.finish(decoded.words)
        if finish.delta:
            await self.send(TranscriptionDelta(item_id=item.id, delta=finish.delta))
        transcript = decoded.text if not decoded.words else finish.transcript
        await self.send(TranscriptionCompleted(item_id=item.id, transcript=transcript,
                                               usage=DurationUsage(seconds=round(seconds, 3))))
        if transcript and options.speaker_labels and self.engine.has_voices:
            for event in await self.speaker_work.segments(item, audio, decoded, transcript, self._speakers(options),
                                                          self.config, options.return_word_timestamps):
                await self.send(event)

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
            config = session_config(self.session, self._capabilities(), final_pass=True)
            result = await run_final_pass(self.engine, kept, config, self._closed, self.live_spans)
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

    def _speakers(self, options) -> OnlineSpeakers:
        if self.speakers is None:
            self.speakers = OnlineSpeakers(self._threshold(options), options.max_speakers, known=self.known)
        return self.speakers


def _ms(sample: int) -> int:
    return int(round(sample * 1000 / SAMPLE_RATE))


def _given(update) -> set:
    return set(update.model_fields_set) if update is not None else set()
