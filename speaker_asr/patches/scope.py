"""A value that holds for one thread during one block: how a request tells a patch what it may do
(one pass per chunked window, the bfloat16 projection) without changing the model's state."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator


class RequestScope:
    """``with scope.set(value):`` -- within the block, on this thread, ``scope.get()`` is
    ``value``; elsewhere and afterwards it is what it was (``default`` at first)."""

    def __init__(self, default: Any):
        self.default = default
        self._local = threading.local()

    def get(self) -> Any:
        return getattr(self._local, "value", self.default)

    @contextlib.contextmanager
    def set(self, value: Any) -> Iterator[None]:
        previous = self.get()
        self._local.value = value
        try:
            yield
        finally:
            self._local.value = previous
