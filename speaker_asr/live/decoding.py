"""When a live session's items are decoded, through the engine (:mod:`speaker_asr.live.engine`:
on the ASR lane, a final decode ranked ``LIVE_FINAL``, a partial of a growing utterance
``LIVE_PARTIAL``): the partial decodes of the growing item and each committed item's final
decode.

* A growing item is decoded again as it grows (:func:`~speaker_asr.live.items.partial_due`:
  when) while the model is free and no final decode waits; each decode feeds the item's
  :class:`~speaker_asr.live.agreement.LocalAgreement`, whose newly agreed words go out as a
  ``delta`` while the item still grows. A partial of the item from its start is kept
  (:class:`~speaker_asr.live.items.PartialDecode`): it is the draft of the next, and the final
  decode itself when it heard all the item's speech.
* At commit the running partial stops unless it can be the item's final decode (:meth:`settle`);
  its delta goes out before the item's completion. The final decode (:meth:`final`) is then
  that partial, or a decode of the item's audio with the last partial as its draft.
* Every decode of an item runs in its language (:mod:`speaker_asr.live.language`): the
  session's, or the one detected at the item's first decode.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Awaitable, Callable, NamedTuple, Optional

import numpy as np

from speaker_asr.scheduling import Priority
from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig
from speaker_asr.live.buffer import AudioBuffer
from speaker_asr.live.engine import LiveEngine
from speaker_asr.live.items import MAX_ITEM_S, Item, LastDecode, PartialDecode, partial_due
from speaker_asr.live.language import SessionLanguage
from speaker_asr.live.protocol import TranscriptionDelta
from speaker_asr.models import Decoded

logger = logging.getLogger("server")


class PartialRun(NamedTuple):
    """The partial decode running: its item, the clock sample its audio ends at, and the flag
    that stops it (an utterance that ended makes it useless unless it is that utterance's final
    decode)."""

    item: Item
    end: int
    cancel: threading.Event


class DecodeScheduler:
    """One session's decodes. ``config()``: the session's config now; ``send``: the session's
    way out for the partials' ``delta`` events; ``growing(item)``: whether ``item`` is still the
    item being spoken (a partial of one committed meanwhile sends nothing: its final decode
    closes it)."""

    def __init__(self, engine: LiveEngine, language: SessionLanguage, config: Callable[[], InferenceConfig],
                 send: Callable[[TranscriptionDelta], Awaitable[None]], growing: Callable[[Item], bool]):
        self.engine = engine
        self.language = language
        self._config = config
        self._send = send
        self._growing = growing
        self.partial: Optional[asyncio.Task] = None  # the partial decode's task
        self._running: Optional[PartialRun] = None
        self.finals = 0  # committed items whose final decode has not ended: no partial before it
        self._last = LastDecode(0.0, 0.0)

    def committed(self) -> None:
        """An item was committed: its final decode comes before any partial."""
        self.finals += 1

    def maybe_partial(self, item: Item, buffer: AudioBuffer, pause: int) -> None:
        """A partial decode of the growing item when the model is free and one is due (``pause``:
        the silence heard since its speech's last window); it is timed (word times, as the final
        decode) and kept, as the final decode when it heard all the speech."""
        if (self.partial is not None and not self.partial.done()) or self.finals or self.engine.busy():
            return
        clock = buffer.clock
        due = partial_due(item, clock, pause, time.monotonic(), self._last)
        if due is None:
            return
        # a decode for a new pause (partial_due's pause branch) may be the utterance's final
        # decode: another session's final does not stop it. Any other is a draft of growing speech
        # (``pause`` is then a fraction of a VAD window, rarely 0: frames and windows do not align)
        in_pause = due.paused_at != item.paused_at
        item.partial_at, item.paused_at = due.partial_at, due.paused_at
        audio = buffer.audio(max(item.start, clock - int(MAX_ITEM_S * SAMPLE_RATE)), clock).copy()
        self.partial = asyncio.ensure_future(self._run_partial(item, audio, clock, preemptible=not in_pause))

    async def _run_partial(self, item: Item, audio: np.ndarray, end: int, preemptible: bool = True) -> None:
        """A decode of the item's audio up to clock sample ``end`` (kept for the final)."""
        whole = end - len(audio) == item.start  # the item from its start (not its last 30 s)
        # a decode of the whole item is the draft of this one
        previous = item.last_partial.decoded if item.last_partial is not None and whole else None
        started, cancel = time.monotonic(), threading.Event()
        self._running = PartialRun(item, end, cancel)
        try:
            config = await self.item_config(item, audio)
            with self.engine.partials.running(cancel, preemptible):
                # one made in a pause may be the final: it is ranked as one
                decoded = await self.engine.decode(audio, config, previous, cancel,
                                                   priority=Priority.LIVE_PARTIAL if preemptible
                                                   else Priority.LIVE_FINAL)
        except asyncio.CancelledError:
            raise
        except Exception:
            if not cancel.is_set():
                logger.warning("a partial decode failed (skipped)", exc_info=True)
            return
        finally:
            self._running = None
            ended = time.monotonic()
            self._last = LastDecode(ended, ended - started)
        if whole:  # the final may use it
            item.last_partial = PartialDecode(end, decoded)
        if not self._growing(item):  # committed meanwhile: its final decode closes it
            return
        delta = item.agreement.update(decoded.words)
        if delta:
            await self._send(TranscriptionDelta(item_id=item.id, delta=delta.text))

    async def item_config(self, item: Item, audio: np.ndarray) -> InferenceConfig:
        """The session's config, with the item's language where the session gives none and the
        model is multilingual (:mod:`speaker_asr.live.language`): detected at the item's first
        decode, the same for all its decodes."""
        if item.language is None:
            item.language = await self.language.for_item(
                audio, self._config().language,
                lambda heard: self.engine.language(heard, priority=Priority.LIVE_FINAL))
        config = self._config()
        if not item.language or item.language == config.language:
            return config
        return config.model_copy(update={"language": item.language})

    async def settle(self, item: Item) -> None:
        """Before the committed ``item``'s final decode: a running partial that cannot be its
        final decode stops now; one that can is awaited, and its delta goes out before the
        item's completion."""
        running = self._running
        own_final = running is not None and running.item is item and item.covers(running.end)
        self.engine.partials.preempt(keep=running.cancel if own_final else None)
        if self.partial is None or self.partial.done():
            return
        if running is not None and not own_final:
            running.cancel.set()
        try:
            await asyncio.shield(self.partial)
        except Exception:
            pass

    async def final(self, item: Item, audio: np.ndarray) -> Decoded:
        """The committed item's final decode (after :meth:`settle`): a partial that heard all its
        speech, or a decode of its audio (a partial that heard past the item's cut drafts the
        words before it all the same)."""
        try:
            config = await self.item_config(item, audio)
            decoded = item.final_decode()
            if decoded is None:
                previous = item.last_partial.decoded if item.last_partial is not None else None
                decoded = await self.engine.decode(audio, config, previous, priority=Priority.LIVE_FINAL)
            return decoded
        finally:
            self.finals -= 1

    def stop(self) -> None:
        """The session closes: a running partial stops at its next token."""
        if self._running is not None:
            self._running.cancel.set()
