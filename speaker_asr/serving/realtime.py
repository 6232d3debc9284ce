"""``/v1/realtime?intent=transcription``: live transcription with speakers over OpenAI's Realtime
protocol (a WebSocket; the session itself is :class:`speaker_asr.live.session.LiveSession`).

The connection is accepted first (echoing the ``realtime`` subprotocol when the client offers it,
as OpenAI does), so that a refusal can say why in OpenAI's ``error`` event before the close:

* ``API_KEY`` set: the key comes in ``Authorization: Bearer <key>`` (the SDK's way) or in the
  ``openai-insecure-api-key.<key>`` subprotocol (browsers cannot set headers); a missing or
  wrong one: ``error`` (code ``missing_api_key`` / ``invalid_api_key``), close 1008;
* an ``intent`` other than ``transcription``: ``error`` (code ``invalid_intent``), close 1008
  (this server makes no model responses, only transcripts);
* the model not loaded yet (or failed): ``error`` (code ``model_not_ready``), close 1013;
* ``MAX_SESSIONS`` sessions open already: ``error`` (code ``session_limit_reached``), close 1013;
* the open sessions' final decodes, measured, would keep the model busy past ``LIVE_MAX_LOAD``
  with one more: ``error`` (code ``server_at_capacity``), close 1013;
  the open sessions go on.

Then ``session.created``, and every message goes to the session; a session that reaches
``LIVE_MAX_SESSION_S`` gets ``error`` (code ``session_expired``) and a close (1000). A client
that leaves (or a send that fails) ends the session: its pending model calls are dropped.
``speaker_asr.session.finish`` ends it the client's way: the session finishes its items (and the
final pass, with ``final_transcript``) while the route keeps reading the socket -- to see a
client that leaves meanwhile, whose work is then dropped -- and the route closes with 1000.
The finishing is not cut by ``LIVE_MAX_SESSION_S``: it is bounded work on audio already
received. A session also ends on the bounds of speaker_asr/serving/live_limits.py (every event
goes out through its :class:`~speaker_asr.serving.live_limits.SessionGuard`): no audio for
``LIVE_IDLE_TIMEOUT_S``, a client that reads nothing (``LIVE_SEND_TIMEOUT_S``), the server's stop
(:meth:`RealtimeRoute.shut_down`).

Every session (and every refusal) ends with one JSON line on the ``server.access`` logger, as a
request does (``live session``: its id, how it ended, seconds of audio, items, ``total_ms``;
never the key), and is counted in ``/metrics`` (``asr_live_*``, speaker_asr/serving/metrics.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Optional

from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.live.engine import RunnerEngine
from speaker_asr.live.session import LiveSession
from speaker_asr.serving.api_key import ApiKey, bearer
from speaker_asr.scheduling.scheduler import LOAD_WINDOW_S
from speaker_asr.serving.live_limits import (CLOSE_WAIT_S, POLICY_VIOLATION, TRY_AGAIN_LATER, LiveLimits,
                                             ReadAhead, SessionEnd, SessionGuard, capacity_refusal,
                                             end_connection)
from speaker_asr.settings import DEFAULT_LIVE_IDLE_TIMEOUT_S, DEFAULT_LIVE_SEND_TIMEOUT_S

logger = logging.getLogger("server")
access_logger = logging.getLogger("server.access")

REALTIME = "/v1/realtime"
SUBPROTOCOL = "realtime"
KEY_SUBPROTOCOL = "openai-insecure-api-key."


# a live session's load is measured over at least this much of its time before a new session is
# refused by it: a few items' final decodes
MIN_LOAD_WINDOW_S = 10.0


class RealtimeRoute:
    """The route and the count of open sessions."""

    def __init__(self, runner, api_key: Optional[str], max_sessions: int, max_session_s: float,
                 max_frame_bytes: int, vad_factory=None, metrics=None, limits: Optional[LiveLimits] = None):
        self.runner = runner
        # the idle and send bounds, and the server's stop (speaker_asr/serving/live_limits.py)
        self.limits = limits or LiveLimits(DEFAULT_LIVE_IDLE_TIMEOUT_S, DEFAULT_LIVE_SEND_TIMEOUT_S)
        self.stopping = asyncio.Event()
        self.metrics = metrics  # speaker_asr.serving.metrics.Metrics, or None
        self.engine = RunnerEngine(runner)
        self.key = ApiKey(api_key)
        self.max_sessions = max_sessions
        self.max_session_s = max_session_s
        self.max_frame_chars = -(-max_frame_bytes // 3) * 4
        self.open = 0
        self._open_since: list[float] = []  # when each open session started (monotonic)
        if vad_factory is None:
            from speaker_asr.live.vad import SileroVad

            vad_factory = SileroVad
        self.vad_factory = vad_factory

    def routes(self) -> list[WebSocketRoute]:
        return [WebSocketRoute(REALTIME.removeprefix("/v1"), self.endpoint)]

    def _key_problem(self, websocket: WebSocket) -> Optional[tuple[str, str]]:
        """The API key's problem (serving/api_key.py): it comes as a bearer header or, from a
        browser (which cannot set headers), in a subprotocol."""
        given, _ = bearer(websocket.headers.get("authorization"))
        for offered in websocket.scope.get("subprotocols") or []:
            if offered.startswith(KEY_SUBPROTOCOL) and given is None:
                given = offered[len(KEY_SUBPROTOCOL):]
        return self.key.problem(given, "send 'Authorization: Bearer <API_KEY>' (the openai SDK sends "
                                       "its api_key so) or the subprotocol "
                                       "'openai-insecure-api-key.<API_KEY>'")

    async def endpoint(self, websocket: WebSocket) -> None:
        started = time.monotonic()
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        refusal = self._refusal(websocket)
        if refusal is not None:
            code, message, close_code, kind = refusal
            await end_connection(websocket, SessionEnd("refused", code, kind, message, close_code))
            if self.metrics is not None:
                self.metrics.live_session_refused(code)
            self._log(None, "refused", started, code=code)
            return
        self.open += 1
        opened = time.monotonic()
        self._open_since.append(opened)
        if self.metrics is not None:
            self.metrics.live_session_started()
        guard = SessionGuard(websocket, self.limits, self.stopping)
        session = LiveSession(guard.send, self.engine, self.vad_factory, self.max_frame_chars,
                              metrics=self.metrics, max_kept_s=self.max_session_s)
        outcome = "client_closed"
        try:
            outcome = await guard.run(self._serve(websocket, session, guard), session)
        except (WebSocketDisconnect, RuntimeError, OSError):
            outcome = "client_closed"  # a send or a receive on a closed socket
        except Exception:
            outcome = "failed"
            logger.exception("live session failed")
            await end_connection(websocket, SessionEnd(outcome, None, "server_error", "The server had an error "
                                                       "while processing your session.", 1011))
        finally:
            self.open -= 1
            self._open_since.remove(opened)
            await session.close()
            if self.metrics is not None:
                self.metrics.live_session_ended(outcome)
            self._log(session, outcome, started)

    async def shut_down(self, wait_s: float = CLOSE_WAIT_S + 1.0) -> None:
        """The server stops: every open session gets its error event (``server_shutting_down``)
        and a close (1012); returns once they have ended, or after ``wait_s``."""
        self.stopping.set()
        deadline = time.monotonic() + wait_s
        while self.open and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def _refusal(self, websocket: WebSocket) -> Optional[tuple[str, str, int, str]]:
        """Why this connection gets no session: (error code, message, close code, error type)."""
        problem = self._key_problem(websocket)
        if problem is not None:
            return (*problem, POLICY_VIOLATION, "invalid_request_error")
        intent = websocket.query_params.get("intent")
        if intent != "transcription":
            return ("invalid_intent", f"Invalid value: {intent!r} for 'intent'. This server serves "
                    "transcription sessions only: connect to /v1/realtime?intent=transcription.",
                    POLICY_VIOLATION, "invalid_request_error")
        why = self.runner.not_ready()
        if why is not None:
            return "model_not_ready", why.reason, TRY_AGAIN_LATER, "server_error"
        unavailable = self.engine.unavailable()
        if unavailable is not None:
            return "model_not_ready", unavailable, TRY_AGAIN_LATER, "server_error"
        if self.open >= self.max_sessions:
            return ("session_limit_reached",
                    f"This server is at its limit of {self.max_sessions} live session"
                    f"{'s' if self.max_sessions != 1 else ''} at once (MAX_SESSIONS); try again when one "
                    "has ended.", TRY_AGAIN_LATER, "server_error")
        busy = self._over_capacity()
        if busy:
            return "server_at_capacity", busy, TRY_AGAIN_LATER, "server_error"
        return None

    def _over_capacity(self) -> Optional[str]:
        """Why one more session would be more than the open ones leave room for (None: it
        fits, or there is not yet enough to go on): their final decodes' measured share of the
        ASR lane since the oldest of them started (at most the last minute; units of sessions
        already closed before that left out), once that is ``MIN_LOAD_WINDOW_S`` or more."""
        if not self.open or not self._open_since:
            return None
        measured = time.monotonic() - min(self._open_since)
        if measured < MIN_LOAD_WINDOW_S:
            return None
        window = min(measured, LOAD_WINDOW_S)
        return capacity_refusal(self.engine.live_load(window), self.open, self.limits.max_load, window)

    async def _serve(self, websocket: WebSocket, session: LiveSession, guard: SessionGuard) -> str | SessionEnd:
        """The session's messages until it ends; how it ended (metrics.LIVE_OUTCOMES), or the
        end the guard closes it with (its expiry)."""
        deadline = time.monotonic() + self.max_session_s
        await session.start()
        # read on while the session holds back, so that the client's pings are answered and
        # its leaving is seen (the guard then ends the session wherever the route waits)
        inbox = ReadAhead(websocket, self.limits.read_ahead_bytes, on_disconnect=guard.client_left)
        receiving: Optional[asyncio.Future] = None
        try:
            while True:
                ending = session.ending
                if ending is None:  # a finishing session is not cut at the deadline
                    try:
                        await asyncio.wait_for(session.wait_for_room(), max(0.0, deadline - time.monotonic()))
                    except asyncio.TimeoutError:
                        return self._expiry()
                if receiving is None:
                    receiving = asyncio.ensure_future(inbox.get())
                waiters = {receiving} if ending is None else {receiving, ending}
                done, _ = await asyncio.wait(
                    waiters, timeout=None if ending is not None else max(0.0, deadline - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    return self._expiry()
                if ending is not None and ending in done:
                    outcome = ending.result()  # a send that failed raises here: the client left
                    await websocket.close(1000)
                    return outcome
                message, receiving = receiving.result(), None
                if message["type"] == "websocket.disconnect":
                    return "client_closed"
                text = message.get("text")
                await session.handle(text if text is not None else message.get("bytes") or b"")
        finally:
            if receiving is not None and not receiving.done():
                receiving.cancel()
            inbox.close()

    def _expiry(self) -> SessionEnd:
        return SessionEnd("expired", "session_expired", "invalid_request_error", "Your session hit the maximum "
                          f"duration of {self.max_session_s:g} seconds (LIVE_MAX_SESSION_S).", 1000)

    def _log(self, session: Optional[LiveSession], outcome: str, started: float,
             code: Optional[str] = None) -> None:
        """One line per session on the access log (speaker_asr/serving/logging_setup.py's JSON);
        its ``request_id`` is the session's id (a fresh one for a refusal), as every access
        line has one."""
        session_id = session.id if session is not None else None
        fields = {"path": REALTIME, "session_id": session_id, "outcome": outcome,
                  "total_ms": round((time.monotonic() - started) * 1000, 1)}
        if session is not None:
            fields.update(audio_seconds=round(session.clock / SAMPLE_RATE, 3),
                          items_completed=session.stats.items_completed, items_failed=session.stats.items_failed,
                          final_transcript=session.final_transcript)
        if code is not None:
            fields["code"] = code
        access_logger.info("live session", extra={"fields": fields,
                                                  "request_id": session_id or uuid.uuid4().hex})
