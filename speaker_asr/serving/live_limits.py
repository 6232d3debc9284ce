"""The bounds a live session (speaker_asr/serving/realtime.py) keeps against clients that stop
taking part, and the server's own stop: :class:`SessionGuard`, one per session.

* **A client that reads nothing.** Every server event goes out through :meth:`SessionGuard.send`,
  one at a time. Once the connection's buffers are full (the kernel's socket buffers, then
  uvicorn's, which stops taking messages above its high-water mark), a send waits; one that has
  waited ``LIVE_SEND_TIMEOUT_S`` ends the session (``client_not_reading``): what the server holds
  for a stuck client stays what those buffers hold, and its place among ``MAX_SESSIONS`` is given
  back. (A client that stops reading at a trickle of events is closed sooner by the WebSocket
  keepalive: uvicorn pings every 20 s and closes with 1011 when no pong comes within 20 s.)
* **A client that sends no audio.** ``LIVE_IDLE_TIMEOUT_S`` without an appended sample, while the
  server is waiting for the client (not while it has items in hand or holds back reading, nor
  while the session finishes), ends the session (``session_idle_timeout``).
* **The server stopping** (SIGTERM: :func:`speaker_asr.serving.app.serve`): every session ends at
  once: each item committed and not yet done gets ``conversation.item.input_audio_transcription.failed``
  (code ``server_shutting_down``), then the error event (``server_shutting_down``) and close 1012
  ("service restart": reconnect later).
* **A server that is behind.** While a session's queue of items is full the route takes no
  message; :class:`ReadAhead` goes on reading the connection for it, up to
  ``LIVE_READ_AHEAD_BYTES``, and only then stops (TCP backpressure: the rest waits in the
  client's socket). Reading is what answers the client's WebSocket pings: a client whose pings go
  unanswered gives up (websockets' default: after 20 s) and loses the items still in hand.

A session that ends so gets an ``error`` event saying why and what is allowed, then a close with
its code; both are given :data:`CLOSE_WAIT_S` at most (a client that reads nothing takes neither).
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Optional, Union

from speaker_asr.live.protocol import SERVER_ERROR, FailureDetail, ProtocolError, TranscriptionFailed
from speaker_asr.settings import DEFAULT_LIVE_MAX_LOAD, DEFAULT_LIVE_READ_AHEAD_BYTES

# the error event and the close of a session that ends on a bound: a client that reads nothing
# takes neither, so they may not hold the route (nor the server's stop) longer than this
CLOSE_WAIT_S = 2.0
WATCH_INTERVAL_S = 0.25  # how often the idle clock is read
# close codes: the client broke a rule; the server restarts (reconnect later); it is busy or not
# ready (try again later)
POLICY_VIOLATION, SERVICE_RESTART, TRY_AGAIN_LATER = 1008, 1012, 1013
# how a session that ended on a bound is counted (speaker_asr/serving/metrics.py's LIVE_OUTCOMES)
IDLE, NOT_READING, SHUTDOWN, CLIENT_CLOSED = "idle", "client_not_reading", "server_shutdown", "client_closed"


class ClientNotReading(Exception):
    """A server event waited ``LIVE_SEND_TIMEOUT_S`` to go out: the client reads nothing."""


@dataclass(frozen=True)
class LiveLimits:
    """``LIVE_IDLE_TIMEOUT_S``, ``LIVE_SEND_TIMEOUT_S``, ``LIVE_READ_AHEAD_BYTES`` and
    ``LIVE_MAX_LOAD`` (speaker_asr/settings.py)."""

    idle_timeout_s: float
    send_timeout_s: float
    read_ahead_bytes: int = DEFAULT_LIVE_READ_AHEAD_BYTES
    max_load: float = DEFAULT_LIVE_MAX_LOAD


def capacity_refusal(load: float, sessions: int, max_load: float, window_s: float) -> Optional[str]:
    """Why one more live session would be more than the model can serve in time (None: it
    fits): the ``sessions`` open keep the model busy ``load`` of the time with their final
    decodes (measured over the last ``window_s``), and one more like them would take that past
    ``max_load`` (``LIVE_MAX_LOAD``)."""
    if sessions <= 0 or load <= 0:
        return None
    need = load / sessions * (sessions + 1)
    if need <= max_load:
        return None
    return (f"This server's {sessions} live session{'s' if sessions != 1 else ''} keep its speech model busy "
            f"{load:.0%} of the time with their final decodes (measured over their last {window_s:.0f} s); one "
            f"more would need about {need:.0%}, past LIVE_MAX_LOAD ({max_load:.0%}), and every session's "
            "captions would fall behind. Try again when a session has ended, or use another server.")


class ReadAhead:
    """A session's messages, read from its Starlette ``websocket`` ahead of the route: at most
    ``max_bytes`` of them wait here (a message is counted by its length), and always one; past
    that the reading stops until the route takes one (:meth:`get`). ``max_bytes=0`` reads one
    message ahead only: the reading stops as soon as the route holds back. The disconnect (or a
    receive that failed) is the last message; ``on_disconnect()`` is called as it is read, while
    the route may be holding back (a session whose client left has its work stopped at once)."""

    def __init__(self, websocket, max_bytes: int, on_disconnect: Callable[[], None] = lambda: None):
        self.websocket = websocket
        self.max_bytes = max_bytes
        self.on_disconnect = on_disconnect
        self.held = 0  # what waits here, in bytes (characters of a text message)
        self._messages: collections.deque = collections.deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            await self._room.wait()
            try:
                message = await self.websocket.receive()
            except asyncio.CancelledError:
                raise
            except Exception:  # the connection is gone
                message = {"type": "websocket.disconnect", "code": 1006}
            size = len(message.get("text") or message.get("bytes") or b"")
            self._messages.append((message, size))
            self.held += size
            if self.held >= self.max_bytes:
                self._room.clear()
            self._arrived.set()
            if message["type"] == "websocket.disconnect":
                self.on_disconnect()
                return

    async def get(self) -> dict:
        """The next message (ASGI's ``websocket.receive`` or ``websocket.disconnect``)."""
        while not self._messages:
            self._arrived.clear()
            await self._arrived.wait()
        message, size = self._messages.popleft()
        self.held -= size
        if self.held < self.max_bytes or not self._messages:
            self._room.set()
        return message

    def close(self) -> None:
        self._task.cancel()
        self._messages.clear()


@dataclass(frozen=True)
class SessionEnd:
    """Why a session ended on a bound: how it is counted, the error event's code, type and
    message, and the close code."""

    outcome: str
    code: str
    kind: str
    message: str
    close_code: int


def idle_end(limits: LiveLimits) -> SessionEnd:
    return SessionEnd(IDLE, "session_idle_timeout", "invalid_request_error",
                      f"No audio came for {limits.idle_timeout_s:g} seconds (LIVE_IDLE_TIMEOUT_S): the session "
                      "is closed. Send input_audio_buffer.append events while the session is open (silence "
                      "counts), or connect again when there is audio.", 1000)


def not_reading_end(limits: LiveLimits) -> SessionEnd:
    return SessionEnd(NOT_READING, "client_not_reading", "invalid_request_error",
                      f"The server could not send an event for {limits.send_timeout_s:g} seconds "
                      "(LIVE_SEND_TIMEOUT_S): the client reads nothing. Read the server's events as they "
                      "come; the session is closed.", POLICY_VIOLATION)


SHUTDOWN_END = SessionEnd(SHUTDOWN, "server_shutting_down", SERVER_ERROR,
                          "The server is shutting down: the session is closed. Connect again (to this "
                          "server once it is back, or to another).", SERVICE_RESTART)
# the client went away (its disconnect was read, or a send to it failed): nothing to tell it
CLIENT_LEFT = SessionEnd(CLIENT_CLOSED, "", "", "", 1000)


async def end_connection(websocket, end: SessionEnd, with_event: bool = True) -> None:
    """The one way a live connection is ended with a reason: ``end``'s error event (unless
    ``with_event`` is False: a client that reads nothing takes none), then the close with its
    code, each within :data:`CLOSE_WAIT_S` (a client that reads nothing takes neither: the
    server (speaker_asr/serving/ws_protocol.py) then drops the connection at the close). The
    refusals before a session, its bounds and its end on a fault all go through here."""
    if with_event:
        event = ProtocolError(end.message, code=end.code, type=end.kind).event()
        try:
            await asyncio.wait_for(websocket.send_text(event.to_text()), CLOSE_WAIT_S)
        except Exception:  # gone, or reading nothing: the close is tried all the same
            pass
    try:
        await asyncio.wait_for(websocket.close(end.close_code, end.code), CLOSE_WAIT_S)
    except Exception:
        pass


class SessionGuard:
    """One session's sends and bounds over its Starlette ``websocket``: :meth:`send` (the
    session's way out), and :meth:`run`, which runs the route's serving of the session until it
    ends by itself or a bound ends it first. ``stopping``: the route's event set when the
    server stops. :meth:`client_left` (a send that failed calls it, and the route's
    :class:`ReadAhead` when it reads the disconnect) ends the session at once, wherever the
    route is waiting: its queued work is dropped, not done for nobody."""

    def __init__(self, websocket, limits: LiveLimits, stopping: asyncio.Event):
        self.websocket = websocket
        self.limits = limits
        self.stopping = stopping
        self._lock = asyncio.Lock()
        self._stuck = asyncio.Event()  # a send timed out
        self._left = asyncio.Event()  # the client is gone
        self.closed = False  # the session's end was decided: nothing more goes out but it

    def client_left(self) -> None:
        self._left.set()

    async def send(self, event) -> None:
        """One server event; :class:`ClientNotReading` when it waited ``LIVE_SEND_TIMEOUT_S``
        (and for every send after that: the session is ending); a send that fails (the client is
        gone) raises its error and ends the session."""
        if self._stuck.is_set() or self.closed:
            raise ClientNotReading("the session is closing")
        async with self._lock:
            try:
                await asyncio.wait_for(self.websocket.send_text(event.to_text()), self.limits.send_timeout_s)
            except asyncio.TimeoutError:
                self._stuck.set()
                raise ClientNotReading(f"a send waited {self.limits.send_timeout_s:g} s") from None
            except Exception:
                if not self._stuck.is_set():  # not a send behind the one that timed out
                    self._left.set()
                raise

    async def run(self, serving: Awaitable[Union[str, SessionEnd]], session) -> str:
        """``serving`` (the route's loop over the session's messages; it returns how the session
        ended, or a :class:`SessionEnd` to end it with) until it returns, or until a bound ends
        the session first: then it is cancelled, the client gets the error event and the close
        (:func:`end_connection`), and the bound's outcome is returned."""
        task = asyncio.ensure_future(serving)
        watch = asyncio.ensure_future(self._watch(session))
        try:
            await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
            end: Optional[SessionEnd] = None
            if task.done() and not self._stuck.is_set():
                try:
                    outcome = task.result()
                except ClientNotReading:  # a send of the route's own timed out
                    pass
                else:
                    if not isinstance(outcome, SessionEnd):
                        return outcome
                    end = outcome
            if end is None:
                end = (not_reading_end(self.limits) if self._stuck.is_set() or not watch.done()
                       else watch.result())
        finally:
            watch.cancel()
        # asyncio.wait_for before Python 3.12 returns its result instead of raising when the
        # cancel comes as its awaitable finishes (the route's wait for room does): cancel again
        # until the serving has stopped, for a bounded time (the close below ends it anyway)
        for _ in range(int(CLOSE_WAIT_S / 0.05)):
            if task.done():
                break
            task.cancel()
            await asyncio.wait({task}, timeout=0.05)
        if task.done() and not task.cancelled():
            task.exception()  # cancelled, or the send that timed out: nobody reads it
        if end is SHUTDOWN_END:
            await self._fail_unfinished(session)
        await self.close(end)
        return end.outcome

    async def _fail_unfinished(self, session) -> None:
        """The server stops: each item committed and not yet done gets its ``failed`` event
        (``server_shutting_down``) before the session's end, so that no item is dropped unsaid;
        nothing else of the session's goes out from here on."""
        self.closed = True
        if self._stuck.is_set() or self._left.is_set():
            return
        for item_id in session.unfinished_items():
            event = TranscriptionFailed(item_id=item_id, error=FailureDetail(
                type=SERVER_ERROR, code=SHUTDOWN_END.code,
                message="The server is shutting down before this item was transcribed: send its audio "
                        "again (to this server once it is back, or to another)."))
            try:
                await asyncio.wait_for(self.websocket.send_text(event.to_text()), CLOSE_WAIT_S)
            except Exception:  # gone, or reading nothing: the end is tried all the same
                return
            session.stats.sent(event)  # counted as the item's failure

    async def _watch(self, session) -> SessionEnd:
        """The first bound the session reaches: the client gone, a send that timed out, the
        server's stop, or ``LIVE_IDLE_TIMEOUT_S`` without audio while the server waits for the
        client."""
        stuck = asyncio.ensure_future(self._stuck.wait())
        stop = asyncio.ensure_future(self.stopping.wait())
        left = asyncio.ensure_future(self._left.wait())
        try:
            clock, quiet_since = session.clock, time.monotonic()
            while True:
                done, _ = await asyncio.wait({stuck, stop, left}, timeout=WATCH_INTERVAL_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                if stuck in done:  # a client that reads nothing is dropped; said so before it is gone
                    return not_reading_end(self.limits)
                if left in done:
                    return CLIENT_LEFT
                if stop in done:
                    return SHUTDOWN_END
                now = time.monotonic()
                # audio came, or the server has items in hand (it may be holding back reading)
                # or is finishing the session: the client is not idle
                if session.clock != clock or session.pending or session.ending is not None:
                    clock, quiet_since = session.clock, now
                elif now - quiet_since >= self.limits.idle_timeout_s:
                    return idle_end(self.limits)
        finally:
            for waiter in (stuck, stop, left):
                waiter.cancel()

    async def close(self, end: SessionEnd) -> None:
        """The session ends on ``end``: nothing more goes out but its error event and close
        (:func:`end_connection`; neither where the client is gone, no event where it reads
        nothing)."""
        self.closed = True
        if end is not CLIENT_LEFT:
            await end_connection(self.websocket, end, with_event=not self._stuck.is_set())
