"""A batch run's errors: the run's (:class:`BatchError`, :class:`RunError`), a recording's
(:class:`FileError`, :class:`Unavailable`) and an interruption; and the statuses a recording ends in."""

from __future__ import annotations

import logging
from typing import Optional


logger = logging.getLogger("speaker_asr.batch")


STATUSES = ("done", "skipped", "failed", "not_attempted")


class BatchError(ValueError):
    """What was asked cannot be done (a path that does not exist, two recordings writing the same
    output): nothing was transcribed. The message says what and how to fix it."""


class FileError(Exception):
    """One recording could not be transcribed; ``str(error)`` says why (safe to show: no token).
    ``refused``: the input's own fault (bad audio, too long, too large: an HTTP 4xx), which the
    single-file command line exits 2 for."""

    def __init__(self, message: str, *, refused: bool = False, attempts: Optional[int] = None):
        super().__init__(message)
        self.refused = refused
        self.attempts = attempts


class Unavailable(FileError):
    """The service did not take the file within the retry budget (503s, connection errors, ...)."""


class RunError(Exception):
    """The run cannot go on: the models did not load, the endpoint refused the token, the URL is
    not an endpoint. ``str(error)`` says why."""


class Interrupted(Exception):
    """The run is stopping: the file was put down before it was sent (it is not attempted)."""
