"""One live transcription session (OpenAI's Realtime protocol, ``intent=transcription``): the
client's events in, the server's events and model calls out. The WebSocket route
(speaker_asr/serving/realtime.py) feeds every message to :meth:`LiveSession.handle`.

The flow is described once: what a client sees (events, turns, bounds, the end) in
docs/serving.md, "Live"; which part of the code does each step in docs/architecture.md, "A live
session, in one pass". Here the session holds its parts together, each with one job:
:class:`~speaker_asr.live.buffer.AudioBuffer` (the audio not committed, on the session's *audio
clock*: samples since it began, 16 kHz, which every ``*_ms`` and segment time is on),
:class:`~speaker_asr.live.vad.SessionVad` (turns), :class:`~speaker_asr.live.decoding.DecodeScheduler`
(partial and final decodes), :class:`~speaker_asr.live.item_queue.ItemQueue` (committed items in
order), :class:`~speaker_asr.live.speaker_roster.SessionSpeakers` and
:class:`~speaker_asr.live.item_diarization.SpeakerWork` (who speaks), and
:class:`~speaker_asr.live.final_pass.FinalPassInput` (the audio kept for a final pass).
:meth:`LiveSession.close` cancels what is pending: queued model calls are dropped before they
run, a running final pass stops at its next progress step, nothing is kept.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Awaitable, Callable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import ModelCapabilities
from speaker_asr.formats.openai_shapes import done_event
from speaker_asr.live.audio_format import AudioFormatError, FrameDecoder
from speaker_asr.live.buffer import AudioBuffer
from speaker_asr.live.decoding import DecodeScheduler
from speaker_asr.live.engine import LiveEngine
from speaker_asr.live.final_pass import FinalPassInput, run_final_pass
from speaker_asr.live.item_queue import ItemQueue
from speaker_asr.live.items import MAX_ITEM_S, Item
from speaker_asr.live.language import SessionLanguage
from speaker_asr.live.protocol import (FINISH, SERVER_ERROR, Cleared, Committed, DurationUsage,
                                       FailureDetail, InputAudioBufferAppend,
                                       InputAudioBufferClear, InputAudioBufferCommit, ItemAdded,
                                       ItemDone, ProtocolError, SessionCreated, SessionFinish,
                                       SessionUpdate, SessionUpdated, SpeechStarted, SpeechStopped,
                                       TranscriptDone, TranscriptionCompleted, TranscriptionDelta,
                                       TranscriptionFailed, TranscriptionSession, UserAudioItem,
                                       commit_empty_error, new_id, parse_client_event)
from speaker_asr.live.session_config import session_config
from speaker_asr.live.speaker_roster import SessionSpeakers
from speaker_asr.live.item_diarization import SpeakerWork
from speaker_asr.live.stats import SessionStats
from speaker_asr.live.vad import SessionVad
from speaker_asr.settings import DEFAULT_LIVE_MAX_SESSION_S

logger = logging.getLogger("server")

MIN_COMMIT_MS = 100.0  # OpenAI's smallest commit
# how a session ended, as the route counts it (speaker_asr/serving/metrics.py)
FINISHED, FINAL_PASS_FAILED = "finished", "final_pass_failed"


class LiveSession:
    """One WebSocket session. ``send``: an async function taking a server event. ``engine``: the
    models (:class:`~speaker_asr.live.engine.LiveEngine`). ``vad_factory``: a new
    :class:`~speaker_asr.live.vad.SileroVad`-like object (``probabilities``, ``reset``) for a
    session that turns server VAD on. ``metrics``: the server's
    :class:`~speaker_asr.serving.metrics.Metrics` (``live_audio``, ``live_item``), or None.
    ``max_kept_s``: the most audio kept for a final pass (the route's ``LIVE_MAX_SESSION_S``).
    :attr:`ending`: the task of ``speaker_asr.session.finish`` once it came (its result: how
    the session ended, :data:`FINISHED` or :data:`FINAL_PASS_FAILED`)."""

    def __init__(self, send: Callable[[Any], Awaitable[None]], engine: LiveEngine, vad_factory: Callable[[], Any],
                 max_frame_chars: int = 1 << 20, metrics=None, max_kept_s: float = DEFAULT_LIVE_MAX_SESSION_S):
        self._send = send
        self.engine = engine
        self.max_frame_chars = max_frame_chars
        self.session = TranscriptionSession.new(engine.loaded.model_name)
        self.decoder = FrameDecoder.for_format(self.session.format)
        self.config = session_config(self.session, _capabilities(engine))
        self.audio = AudioBuffer()
        self.vad = SessionVad(vad_factory)
        self.item: Optional[Item] = None  # the item being spoken (server VAD)
        self.previous_item_id: Optional[str] = None
        self.speakers = SessionSpeakers(engine)
        self.queue = ItemQueue(self._finish)  # committed items, in order
        self.decoding = DecodeScheduler(engine, SessionLanguage(engine.loaded.multilingual), lambda: self.config,
                                        self.send, lambda item: self.item is item)
        self.speaker_work = SpeakerWork(engine)  # who speaks in the items
        self.stats = SessionStats(metrics)
        self.final = FinalPassInput(max_kept_s)  # final_transcript: the audio and segments kept
        self.ending: Optional[asyncio.Task] = None
        self._closed = threading.Event()  # read by a final pass running on a live call's thread

    # -- lifecycle and what the route reads ----------------------------------------------------

    async def start(self) -> None:
        self.queue.start()
        await self.vad.setup(self.session.turn_detection, self.audio.clock)
        await self.send(SessionCreated(session=self.session))

    async def close(self) -> None:
        """Everything pending is cancelled (queued model calls dropped, a running final pass
        stopped at its next step)."""
        self._closed.set()
        self.decoding.stop()
        await self.speaker_work.close()
        tasks = (self.ending, self.decoding.partial, self.queue.worker)
        for task in tasks:
            if task is not None and not task.done():
                task.cancel()
        for task in tasks:
            if task is not None:
                try:
                    await task
                except BaseException:
                    pass
        self.audio.clear()
        self.final.take()
        self.queue.clear()

    async def send(self, event) -> None:
        """Every server event goes out here; what the session counts of them is noted once it is
        sent (:meth:`SessionStats.sent <speaker_asr.live.stats.SessionStats.sent>`, and a
        segment's speaker for the final pass)."""
        await self._send(event)
        self.stats.sent(event)
        self.final.sent(event)

    async def wait_for_room(self) -> None:
        """Wait until the committed items' queue has room (:meth:`ItemQueue.wait_for_room`)."""
        await self.queue.wait_for_room()

    async def drain(self) -> None:
        """Wait until every committed item is done (tests, a client that commits and waits)."""
        await self.queue.join()

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def clock(self) -> int:
        """Samples appended since the session began (16 kHz)."""
        return self.audio.clock

    def unfinished_items(self) -> list[str]:
        """The ids of the items committed whose ``completed`` (or ``failed``) has not gone out, in
        commit order."""
        return list(self.stats.committed_at)  # the stats count each item from its commit to its end

    @property
    def pending(self) -> int:
        """Committed items not yet completed."""
        return self.queue.pending

    @property
    def final_transcript(self) -> bool:
        """Whether the session asks for a final pass at its end."""
        return self.session.speaker_asr.final_transcript

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
        config = session_config(session, _capabilities(self.engine), event_id=event.event_id)
        options = session.speaker_asr
        known = self.speakers.known
        if "known_speaker_names" in _given(event.session.speaker_asr):
            known = await self.speakers.embed_known(options, event.event_id)
        self.speakers.update(known, options, event.event_id)
        if session.format != self.session.format:
            self.decoder = FrameDecoder.for_format(session.format)
        vad_changed = session.turn_detection != self.session.turn_detection
        if config.language != self.config.language:
            self.decoding.language.forget()
        self.session, self.config = session, config
        self.final.keep(options.final_transcript, self.audio.clock, self.engine.loaded.max_audio_seconds)
        if vad_changed:
            await self.vad.setup(self.session.turn_detection, self.audio.clock)
            if not self.vad.on:  # turning VAD off mid-speech: the audio stays in the buffer
                self.item = None
        await self.send(SessionUpdated(session=self.session))

    # -- audio -------------------------------------------------------------------------------

    async def _append(self, event: InputAudioBufferAppend) -> None:
        if len(event.audio) > self.max_frame_chars:
            raise ProtocolError(f"The audio frame is too large ({len(event.audio)} base64 characters; "
                                f"this server takes at most {self.max_frame_chars} per "
                                "input_audio_buffer.append, LIVE_MAX_FRAME_BYTES): send smaller frames "
                                "(20-100 ms each is usual).", param="audio", code="invalid_value",
                                event_id=event.event_id)
        try:
            # base64, resampling and (below) the VAD off the event loop: a large append must
            # not hold every other session, /health and the timers
            samples = await asyncio.to_thread(self.decoder.decode, event.audio)
        except AudioFormatError as exc:
            raise ProtocolError.from_request_error(exc, event.event_id) from None
        if not self.vad.on and len(self.audio) + len(samples) > MAX_ITEM_S * SAMPLE_RATE:
            raise ProtocolError(f"The input audio buffer is full: it holds {len(self.audio) / SAMPLE_RATE:.2f} s "
                                f"and an item is at most {MAX_ITEM_S:g} s (what Whisper sees at once). "
                                "Commit the buffer (input_audio_buffer.commit) before appending more; "
                                "this frame was dropped.", param="audio", code="input_audio_buffer_full",
                                event_id=event.event_id)
        if not len(samples):
            return
        self.audio.append(samples)
        self.final.heard(samples)
        self.stats.heard(len(samples) / SAMPLE_RATE)
        if self.vad.on:
            await self._turns(samples)

    async def _turns(self, samples: np.ndarray) -> None:
        """Server VAD over the appended ``samples``: items open at speech, close at its end (or
        where another person takes over, or at :data:`~speaker_asr.live.items.MAX_ITEM_S`, the
        speech going on in a new item); the growing item gets its looks and partials."""
        audio = self.audio
        for turn in await asyncio.to_thread(self.vad.turns, samples):
            if turn.kind == "start":
                start = max(turn.sample, audio.start)
                audio.trim(start)
                self.item = Item(new_id("item"), start)
                await self.send(SpeechStarted(audio_start_ms=_ms(start), item_id=self.item.id))
            elif self.item is not None:
                item = self.item
                item.speech_end = turn.sample
                await self.send(SpeechStopped(audio_end_ms=_ms(turn.sample), item_id=item.id))
                await self._commit(item, audio.clock)
        if self.item is None:  # silence: keep the prefix padding only
            keep = self.vad.detector.prefix + 2 * len(samples)
            audio.trim(max(audio.start, audio.clock - keep))
            return
        item = self.item
        cut = item.change_at  # another person took over: the item ends where they began
        if cut is None and audio.clock - item.start >= MAX_ITEM_S * SAMPLE_RATE:
            cut = audio.clock  # the longest item: split here
        if cut is None:
            if self.speakers.on(self.session.speaker_asr):
                self.speaker_work.look(item, audio.clock, audio.audio)
            self.decoding.maybe_partial(item, audio, self.vad.pause(audio.clock))
            return
        # the item ends at ``cut`` and the speech goes on in a new one
        item.speech_end = cut
        await self.send(SpeechStopped(audio_end_ms=_ms(cut), item_id=item.id))
        await self._commit(item, cut)
        self.item = Item(new_id("item"), cut)
        await self.send(SpeechStarted(audio_start_ms=_ms(cut), item_id=self.item.id))

    async def _commit_manual(self, event_id: Optional[str], by_client: bool = True) -> None:
        """The client's commit (or the finish's: ``by_client=False``, which commits only). Under
        server VAD mid-speech the item ends where the audio stands (``speech_stopped``,
        ``committed``) and, the speaker
        still speaking, the speech goes on in a new item (``speech_started``), as at an item's
        longest: the turn detector opens no turn until this one stops, so without the new item
        every word up to the next pause would be lost. A commit of less than
        :data:`MIN_COMMIT_MS` is refused and the item goes on."""
        item = self.item
        if item is not None:
            at = self.audio.clock
            if by_client and (at - item.start) * 1000.0 / SAMPLE_RATE < MIN_COMMIT_MS:
                await self.send(commit_empty_error((at - item.start) * 1000.0 / SAMPLE_RATE, event_id))
                return
            if by_client:
                item.speech_end = at
                await self.send(SpeechStopped(audio_end_ms=_ms(at), item_id=item.id))
            await self._commit(item, at, event_id)
            if by_client and self.vad.detector.speaking:
                self.item = Item(new_id("item"), at)
                await self.send(SpeechStarted(audio_start_ms=_ms(at), item_id=self.item.id))
            return
        held_ms = self.audio.held_ms
        if held_ms < MIN_COMMIT_MS:
            await self.send(commit_empty_error(held_ms, event_id))
            return
        await self._commit(Item(new_id("item"), self.audio.start), self.audio.clock, event_id)

    async def _commit(self, item: Item, end: int, event_id: Optional[str] = None) -> None:
        audio = self.audio.audio(item.start, end).copy()
        if len(audio) * 1000.0 / SAMPLE_RATE < MIN_COMMIT_MS:
            if event_id is not None:
                await self.send(commit_empty_error(len(audio) * 1000.0 / SAMPLE_RATE, event_id))
            self.item = None
            return
        self.audio.trim(end)
        self.item = None
        item.end = end
        self.decoding.language.heard(audio, self.config.language)
        item.previous_id = self.previous_item_id
        await self.send(Committed(item_id=item.id, previous_item_id=item.previous_id))
        await self.send(ItemAdded(previous_item_id=item.previous_id, item=UserAudioItem.of(item.id)))
        self.previous_item_id = item.id
        self.decoding.committed()
        self.queue.put(item, audio)

    async def _clear(self) -> None:
        self.final.cleared(self.audio.start)  # the final pass must not hear it either
        self.decoder.flush()
        self.audio.clear()
        self.item = None
        self.vad.reset(self.audio.clock)
        await self.send(Cleared())

    # -- a committed item --------------------------------------------------------------------

    async def _finish(self, item: Item, audio: np.ndarray) -> None:
        """The item's final decode -> its last ``delta`` and ``completed`` (sent as soon as the
        text is there); then, with speaker labels on, who speaks in it -> its ``segment`` events;
        then ``conversation.item.done``. A failed decode: ``failed`` for it."""
        await self.decoding.settle(item)
        options = self.session.speaker_asr
        seconds = len(audio) / SAMPLE_RATE
        try:
            decoded = await self.decoding.final(item, audio)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("live transcription of %s failed", item.id, exc_info=exc)
            await self.send(TranscriptionFailed(item_id=item.id, error=FailureDetail(
                type="server_error", code=None,
                message="The server had an error while transcribing this item.")))
        else:
            finish = item.agreement.finish(decoded.words)
            if finish.delta:
                await self.send(TranscriptionDelta(item_id=item.id, delta=finish.delta))
            transcript = decoded.text if not decoded.words else finish.transcript
            await self.send(TranscriptionCompleted(item_id=item.id, transcript=transcript,
                                                   usage=DurationUsage(seconds=round(seconds, 3))))
            if transcript and self.speakers.on(options):
                for event in await self.speaker_work.segments(
                        item, audio, decoded, transcript, self.speakers.labels(options), self.config,
                        options.return_word_timestamps):
                    await self.send(event)
        await self.send(ItemDone(previous_item_id=item.previous_id, item=UserAudioItem.of(
            item.id, self.stats.transcript(item.id))))

    # -- the end -----------------------------------------------------------------------------

    async def _end(self) -> str:
        """``speaker_asr.session.finish``: commit what the buffer holds, finish every item, then
        the final pass if asked for. Returns how the session ended (:data:`FINISHED`,
        :data:`FINAL_PASS_FAILED`); the route closes the socket."""
        if self.item is not None or (not self.vad.on and self.audio.held_ms >= MIN_COMMIT_MS):
            await self._commit_manual(None, by_client=False)
        await self.drain()
        kept = self.final.take()
        if kept is None:
            return FINISHED
        try:
            config = session_config(self.session, _capabilities(self.engine), final_pass=True)
            result = await run_final_pass(self.engine, kept, config, self._closed, self.final.spans)
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


def _capabilities(engine: LiveEngine) -> ModelCapabilities:
    caps = engine.loaded.capabilities
    return caps if caps is not None else ModelCapabilities()


def _ms(sample: int) -> int:
    return int(round(sample * 1000 / SAMPLE_RATE))


def _given(update) -> set:
    return set(update.model_fields_set) if update is not None else set()
