"""The error that is the client's to fix.

:class:`RequestError` marks a mistake in the request -- its audio, its ``inputs`` or its
parameters -- with a message that says what is wrong and what is allowed. Servers answer it
``400`` with that message; any other exception is the server's fault and is answered ``500``
without its text (it can hold paths, tokens or library internals). It is a ``ValueError``, so
code that catches those (the Inference Endpoints toolkit answers everything ``400``) still works.

``param`` names the request parameter at fault when one is (``num_speakers``; ``inputs`` for the
audio itself), for APIs whose error object has a field for it (the OpenAI-compatible routes);
``code`` says what kind of mistake it is when an API names kinds (``unknown_parameter``).
"""

from __future__ import annotations

from typing import Optional


class RequestError(ValueError):
    """A mistake in the request; ``str(error)`` is safe and useful to send back. ``param``: the
    parameter at fault, when one is; ``code``: the kind of mistake (``unknown_parameter``), when
    one is named."""

    def __init__(self, message: str = "", param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.param = param
        self.code = code
