"""speaker_asr/serving/ws_protocol.py's check of the uvicorn internals its protocol relies on: with
the installed uvicorn, live_protocol() builds the subclass; with a uvicorn whose sans-I/O protocol
lacks a method or an attribute set in its __init__, it returns None (uvicorn's own protocol then
serves) and says so in one WARNING line naming uvicorn's version and what is missing."""

from __future__ import annotations

import logging

import pytest

uvicorn = pytest.importorskip("uvicorn")
sansio = pytest.importorskip("uvicorn.protocols.websockets.websockets_sansio_impl")

from speaker_asr.serving import ws_protocol  # noqa: E402

Protocol = sansio.WebSocketsSansIOProtocol


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_the_installed_uvicorn_has_everything_the_subclass_relies_on(caplog):
    caplog.set_level(logging.WARNING, logger="server")
    assert ws_protocol.missing_internals(Protocol) == []
    cls = ws_protocol.live_protocol()
    assert cls is not None and issubclass(cls, Protocol)
    assert warnings(caplog) == []


def test_a_missing_method_falls_back_to_uvicorns_protocol_and_says_so(caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="server")
    monkeypatch.delattr(Protocol, "keepalive_timeout")
    assert ws_protocol.live_protocol() is None
    said = warnings(caplog)
    assert len(said) == 1, said
    assert said[0].startswith(f"uvicorn {uvicorn.__version__}'s WebSocketsSansIOProtocol lacks keepalive_timeout,")
    assert "uvicorn's default protocol" in said[0]


def _init_without_read_paused_nor_pong_timer(self, config, server_state, app_state, _loop=None):
    self.transport = None
    self.loop = _loop
    self.handshake_complete = self.close_sent = self.disconnected = False
    self.close_timer: object = None
    self.close_timeout = 10.0
    self.writable = None
    self.ping_timeout = config.ws_ping_timeout


def test_a_missing_instance_attribute_is_found_in_inits_source(caplog, monkeypatch):
    """Attributes set in __init__ are on instances only: the check reads them from its source."""
    caplog.set_level(logging.WARNING, logger="server")
    monkeypatch.setattr(Protocol, "__init__", _init_without_read_paused_nor_pong_timer)
    assert ws_protocol.missing_internals(Protocol) == ["read_paused", "pong_timer"]
    assert ws_protocol.live_protocol() is None
    said = warnings(caplog)
    assert len(said) == 1 and "lacks read_paused, pong_timer, which" in said[0], said


def test_an_unreadable_init_is_not_taken_on_trust(monkeypatch):
    monkeypatch.setattr(ws_protocol.inspect, "getsource", lambda obj: (_ for _ in ()).throw(OSError("no source")))
    assert ws_protocol.missing_internals(Protocol) == ["a readable __init__ (its attributes cannot be checked)"]


def test_a_uvicorn_without_the_sansio_implementation_gives_none(monkeypatch, caplog):
    import sys

    caplog.set_level(logging.WARNING, logger="server")
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.websockets.websockets_sansio_impl", None)
    assert ws_protocol.live_protocol() is None
    assert warnings(caplog) == []


def test_the_server_falls_back_to_auto_when_there_is_none(monkeypatch):
    """app.uvicorn_server hands uvicorn "auto" (its default WebSocket protocol) for a None."""
    from speaker_asr.serving import app

    monkeypatch.setattr(app, "live_protocol", lambda: None)
    settings = app.server_settings(port=0)
    server = app.uvicorn_server(app.create_app(handler_factory=lambda: (lambda data: {}), settings=settings),
                                settings)
    assert server.config.ws == "auto"
