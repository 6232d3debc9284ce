"""Logging for the server: JSON log lines (JsonFormatter, configure_logging, LOG_LEVEL), scrubbed of
secrets (speaker_asr/redaction.py), the request id they carry, and ConfigError for an invalid
server setting."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, Optional

from speaker_asr.redaction import scrub

_request_id: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("request_id", default=None)


class ConfigError(ValueError):
    """A server setting (HOST, PORT, MAX_BODY_BYTES, MAX_QUEUE, API_KEY, LOG_LEVEL) is invalid."""


# --------------------------------------------------------------------------- logging


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id, extra ``fields``, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": scrub(record.getMessage()),
        }
        request_id = getattr(record, "request_id", None) or _request_id.get()
        if request_id:
            entry["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return scrub(json.dumps(entry, ensure_ascii=False, default=str))


_LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING,
           "info": logging.INFO, "debug": logging.DEBUG}
_json_logging = False


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for everything logged in this process (uvicorn, the handler, warnings),
    scrubbed of secrets."""
    global _json_logging
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])
    logging.captureWarnings(True)
    _json_logging = True


def _route_library_logs() -> None:
    """transformers writes through its own stderr handler and draws progress bars; send its
    messages through the JSON log instead (called before the models load)."""
    if not _json_logging:
        return
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_default_handler()
        hf_logging.enable_propagation()
        hf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover - transformers is a dependency of the handler
        pass
