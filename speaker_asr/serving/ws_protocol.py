"""The WebSocket protocol our server runs under uvicorn (:func:`speaker_asr.serving.app.serve`):
uvicorn's own (websockets' sans-I/O implementation), which drops a connection whose peer takes
nothing where uvicorn's waits for it.

uvicorn ends a connection with ``transport.close()``, which waits until everything written has
left; a peer that reads nothing never takes it, so the socket, its buffers and the protocol stay
(the last in uvicorn's open connections, which its shutdown waits for) until that peer goes. Here
the connection is aborted instead where nothing more can reach the peer:

* a close the app sends while the connection takes no more (above uvicorn's high-water mark):
  the close frame would wait behind what the peer has not read (the live route closes so a
  session whose client reads nothing: speaker_asr/serving/live_limits.py);
* a close handshake whose peer has not answered within uvicorn's close timeout while data is
  still waiting to go out, and the keepalive's timeout (no pong) in the same state;
* the server's shutdown, :data:`SHUTDOWN_ABORT_S` after the close frame, where it has not left.

And its keepalive does not fail a connection the app is holding back reading from (the live
route stops reading while a session's queue of items is full, so that audio sent ahead of real
time waits in the client's socket): the pong to its ping is among the frames not read yet, so
its timeout waits until the server reads again. (A dead peer is still found: once the server
reads, the pong is due; and a live session without audio ends at ``LIVE_IDLE_TIMEOUT_S``.)

A peer that reads, and is read from, keeps uvicorn's behaviour exactly.

The subclass relies on uvicorn internals no release promises to keep (:data:`UVICORN_METHODS`,
:data:`UVICORN_ATTRIBUTES`), so :func:`live_protocol` checks that each one is there before it
builds the subclass, and otherwise leaves the serving to uvicorn's own protocol.
"""

from __future__ import annotations

import ast
import inspect
import logging
import textwrap
from typing import Any, Optional

logger = logging.getLogger("server")

# after the shutdown's close frame, what has not left by then never will: the peer reads nothing
SHUTDOWN_ABORT_S = 1.0

# what LiveWebSocketProtocol takes from uvicorn's WebSocketsSansIOProtocol: the methods it
# overrides (uvicorn's keepalive schedules ``self.keepalive_timeout``) ...
UVICORN_METHODS = ("send", "keepalive_timeout", "shutdown")
# ... and the attributes uvicorn's __init__ sets that it reads or sets
UVICORN_ATTRIBUTES = ("transport", "loop", "read_paused", "pong_timer", "close_timer", "close_sent",
                      "writable", "handshake_complete", "disconnected", "ping_timeout", "close_timeout")


def _assigned_in_init(cls: type) -> Optional[set[str]]:
    """The ``self.NAME`` attributes the ``__init__`` of ``cls`` and its bases assign (read from
    their source: they exist on instances only), or None where no source can be read."""
    names: set[str] = set()
    read = False
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError, SyntaxError):
            continue
        read = True
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            else:
                continue
            for target in targets:
                for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(one, ast.Attribute) and isinstance(one.value, ast.Name) \
                            and one.value.id == "self":
                        names.add(one.attr)
    return names if read else None


def missing_internals(cls: type) -> list[str]:
    """What of :data:`UVICORN_METHODS` and :data:`UVICORN_ATTRIBUTES` ``cls`` lacks (empty where
    the subclass can be built on it)."""
    missing = [name for name in UVICORN_METHODS if not callable(getattr(cls, name, None))]
    assigned = _assigned_in_init(cls)
    if assigned is None:
        return missing + ["a readable __init__ (its attributes cannot be checked)"]
    return missing + [name for name in UVICORN_ATTRIBUTES if name not in assigned and not hasattr(cls, name)]


def live_protocol() -> Optional[type]:
    """:class:`LiveWebSocketProtocol`'s class, or None where this uvicorn has no sans-I/O
    WebSocket implementation, or one without what the subclass relies on (one WARNING line names
    uvicorn's version and what is missing). uvicorn's default protocol then serves, as it does
    under a plain ``uvicorn speaker_asr.serving.app:app``."""
    try:
        from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    except ImportError:
        return None
    missing = missing_internals(WebSocketsSansIOProtocol)
    if missing:
        import uvicorn

        logger.warning("uvicorn %s's WebSocketsSansIOProtocol lacks %s, which "
                       "speaker_asr/serving/ws_protocol.py relies on: WebSockets are served by "
                       "uvicorn's default protocol (a client that reads nothing is waited for, not "
                       "dropped)", getattr(uvicorn, "__version__", "?"), ", ".join(missing))
        return None

    class LiveWebSocketProtocol(WebSocketsSansIOProtocol):
        def _abort_if_stuck(self) -> None:
            """Abort where data is still waiting to go out (the peer takes none of it)."""
            if self.transport is not None and self.transport.get_write_buffer_size() > 0:
                self.transport.abort()

        async def send(self, message: Any) -> None:
            if (message.get("type") == "websocket.close" and self.handshake_complete and not self.disconnected
                    and not self.close_sent and not self.writable.is_set()):
                self.close_sent = True
                self.transport.abort()
                return
            await super().send(message)
            if message.get("type") == "websocket.close" and self.close_timer is not None:
                # uvicorn's timer closes gracefully, which a peer that takes nothing never ends
                self.close_timer.cancel()
                self.close_timer = self.loop.call_later(self.close_timeout, self._close_or_abort)

        def _close_or_abort(self) -> None:
            self.close_timer = None
            self._abort_if_stuck()
            self.transport.close()

        def keepalive_timeout(self) -> None:
            if self.read_paused and not self.transport.is_closing():
                # the app is holding back reading (a live session's queue of items is full:
                # TCP backpressure on a client that sends ahead of real time): the pong is
                # behind the client's frames the server has not read, so none can have come
                self.pong_timer = self.loop.call_later(self.ping_timeout, self.keepalive_timeout)
                return
            super().keepalive_timeout()
            self._abort_if_stuck()

        def shutdown(self) -> None:
            super().shutdown()
            if self.transport is not None and not self.disconnected:
                self.loop.call_later(SHUTDOWN_ABORT_S, self._abort_if_stuck)

    return LiveWebSocketProtocol
