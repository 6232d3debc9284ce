"""A live session's committed items on their way to the model, in order, and the back-pressure
on its client: at most :data:`MAX_PENDING_ITEMS` wait; while that many do, the route takes no
message of the session's (:meth:`ItemQueue.wait_for_room`). The route's
:class:`~speaker_asr.serving.live_limits.ReadAhead` reads on for it up to
``LIVE_READ_AHEAD_BYTES`` (so that the client's pings are answered), and past that audio sent
faster than the model transcribes it waits in the client's socket (TCP backpressure). No I/O of
its own: the session hands it the work an item gets."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Optional

import numpy as np

from speaker_asr.live.items import Item

logger = logging.getLogger("server")

MAX_PENDING_ITEMS = 3  # committed items waiting for the model before the session stops reading


class ItemQueue:
    """``finish(item, audio)``: what each committed item gets, one at a time in commit order (its
    final decode and its events); an exception there ends that item's work only (a send that
    failed: the connection is going)."""

    def __init__(self, finish: Callable[[Item, np.ndarray], Awaitable[None]]):
        self._finish = finish
        self._queue: asyncio.Queue = asyncio.Queue()
        self.pending = 0  # committed items not yet finished
        self._room = asyncio.Event()
        self._room.set()
        self.worker: Optional[asyncio.Task] = None

    def start(self) -> None:
        self.worker = asyncio.ensure_future(self._work())

    def put(self, item: Item, audio: np.ndarray) -> None:
        self.pending += 1
        if self.pending >= MAX_PENDING_ITEMS:
            self._room.clear()
        self._queue.put_nowait((item, audio))

    async def wait_for_room(self) -> None:
        await self._room.wait()

    async def join(self) -> None:
        """Wait until every item put is finished."""
        await self._queue.join()

    def clear(self) -> None:
        """Drop the items still waiting (the session closed)."""
        while not self._queue.empty():
            self._queue.get_nowait()

    async def _work(self) -> None:
        while True:
            item, audio = await self._queue.get()
            try:
                await self._finish(item, audio)
            except asyncio.CancelledError:
                raise
            except Exception:  # a send that failed: the connection is going
                logger.debug("live item not finished", exc_info=True)
            finally:
                del audio
                self.pending -= 1
                if self.pending < MAX_PENDING_ITEMS:
                    self._room.set()
                self._queue.task_done()
