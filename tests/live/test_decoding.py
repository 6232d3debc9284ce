"""speaker_asr/live/decoding.py: which partial decodes a committed item's final decode stops
(DecodeScheduler.settle). The model thread is shared by every session, so a final decode stops
every preemptible partial in hand first, all but the committing item's own partial when that one
heard all the item's speech and nothing after it: that partial *is* the final decode, and
stopping it would throw the decode away and make the final wait for a new one."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from speaker_asr.config import InferenceConfig
from speaker_asr.live.buffer import AudioBuffer
from speaker_asr.live.decoding import DecodeScheduler
from speaker_asr.live.engine import LiveEngine, Loaded, PartialDecodes
from speaker_asr.live.items import Item
from speaker_asr.live.language import SessionLanguage
from speaker_asr.models import Decoded
from speaker_asr.scheduling import Priority
from speaker_asr.types import Word

SR = 16_000
WAIT_S = 5.0  # for a decode to start or a settle to end: far above what either takes


class RecordingPartials(PartialDecodes):
    """The engine's partial decodes in hand, noting the ``keep`` of every preemption."""

    def __init__(self):
        super().__init__()
        self.kept = []

    def preempt(self, keep=None):
        self.kept.append(keep)
        super().preempt(keep)


class HeldEngine(LiveEngine):
    """A LiveEngine whose decode runs on a thread of its own until it is stopped (its cancel
    set: it fails, as the model's decode does at its next token) or let go (:attr:`release`)."""

    loaded = Loaded("fake-whisper")

    def __init__(self):
        self.partials = RecordingPartials()
        self.started = threading.Event()
        self.release = threading.Event()
        self.cancels = []  # the cancel flag of every decode
        self.priorities = []  # the priority of every decode
        self.stopped = []  # whether each decode ended by its cancel

    def busy(self):
        return False

    async def decode(self, audio, config, previous=None, cancel=None, *, priority=Priority.LIVE_FINAL):
        self.priorities.append(priority)
        return await asyncio.to_thread(self._decode, audio, cancel)

    def _decode(self, audio, cancel):
        self.cancels.append(cancel)
        self.started.set()
        deadline = time.monotonic() + WAIT_S
        while not self.release.is_set() and time.monotonic() < deadline:
            if cancel is not None and cancel.is_set():
                self.stopped.append(True)
                raise RuntimeError("the decode was stopped at its next token")
            time.sleep(0.002)
        self.stopped.append(False)
        n = int(len(audio) / SR * 2)  # two words a second
        words = [Word(f" w{i}", i * 0.5, i * 0.5 + 0.4) for i in range(n)]
        return Decoded("".join(w.text for w in words).strip(), words)


async def _partial_running(engine, scheduler, item, buffer, pause=0):
    """``item``'s partial decode of the buffer's audio so far, started and on the model thread
    (``pause``: the silence heard at its end, in samples; none: a growing utterance's,
    preemptible)."""
    scheduler.maybe_partial(item, buffer, pause=pause)
    assert scheduler.partial is not None, "no partial decode was due"
    assert await asyncio.to_thread(engine.started.wait, WAIT_S)
    return engine.cancels[-1]


def _scheduler(engine):
    # every item here is committed by the time its partial ends: no delta goes out
    return DecodeScheduler(engine, SessionLanguage(multilingual=False), InferenceConfig,
                           send=lambda delta: asyncio.sleep(0), growing=lambda item: False)


def _commit(scheduler, item, speech_end, end):
    item.speech_end, item.end = speech_end, end
    scheduler.committed()


def test_the_items_own_partial_that_heard_all_its_speech_is_kept_and_becomes_its_final_decode():
    async def main():
        engine, buffer, item = HeldEngine(), AudioBuffer(), Item("item_1", start=0)
        scheduler = _scheduler(engine)
        buffer.append(np.zeros(2 * SR, np.float32))
        own = await _partial_running(engine, scheduler, item, buffer)
        other_session = threading.Event()  # another session's partial of a growing utterance
        with engine.partials.running(other_session):
            # the speech ended just before the audio the partial heard, and the item is cut there
            _commit(scheduler, item, speech_end=2 * SR - 800, end=2 * SR)
            settle = asyncio.ensure_future(scheduler.settle(item))
            await asyncio.sleep(0.1)
            assert engine.partials.kept == [own]
            assert other_session.is_set() and not own.is_set()
            # the final decode waits for this partial rather than decoding the item again
            assert not settle.done()
            engine.release.set()
            await asyncio.wait_for(settle, WAIT_S)
        assert engine.stopped == [False] and not own.is_set()
        assert item.final_decode() is not None and item.final_decode().text == "w0 w1 w2 w3"
        assert engine.priorities == [Priority.LIVE_PARTIAL]

    asyncio.run(main())


@pytest.mark.parametrize("speech_end, end", [(3 * SR - 800, 3 * SR), (SR - 800, SR)],
                         ids=["ended-before-the-speech", "heard-past-the-cut"])
def test_the_items_own_partial_that_does_not_cover_it_is_stopped(speech_end, end):
    """A partial that ended before the item's speech did (the item grew after it started) lacks
    words; one that heard past the item's cut has the next item's: neither can be its final."""
    async def main():
        engine, buffer, item = HeldEngine(), AudioBuffer(), Item("item_1", start=0)
        scheduler = _scheduler(engine)
        buffer.append(np.zeros(2 * SR, np.float32))
        own = await _partial_running(engine, scheduler, item, buffer)  # heard up to 2 s
        buffer.append(np.zeros(SR, np.float32))
        _commit(scheduler, item, speech_end, end)
        settle = asyncio.ensure_future(scheduler.settle(item))
        await asyncio.sleep(0.1)
        assert engine.partials.kept == [None] and own.is_set()
        await asyncio.wait_for(settle, WAIT_S)  # the stopped partial ends at once, unreleased
        assert engine.stopped == [True] and item.final_decode() is None

    asyncio.run(main())


def test_another_items_partial_is_stopped():
    """The growing item's partial decode, when an earlier item is committed, is a draft that
    can be made again later: the final decode does not wait for it."""
    async def main():
        engine, buffer = HeldEngine(), AudioBuffer()
        scheduler = _scheduler(engine)
        committed, growing = Item("item_1", start=0), Item("item_2", start=SR)
        buffer.append(np.zeros(3 * SR, np.float32))
        running = await _partial_running(engine, scheduler, growing, buffer)
        # the committed item's cut and speech end lie where the running partial ends: it would
        # cover them, were it of that item
        _commit(scheduler, committed, speech_end=3 * SR - 800, end=3 * SR)
        settle = asyncio.ensure_future(scheduler.settle(committed))
        await asyncio.sleep(0.1)
        assert engine.partials.kept == [None] and running.is_set()
        await asyncio.wait_for(settle, WAIT_S)  # the stopped partial ends at once, unreleased
        assert engine.stopped == [True]

    asyncio.run(main())


def test_with_no_partial_of_its_own_a_final_decode_still_stops_the_other_sessions_partials():
    async def main():
        engine, item = HeldEngine(), Item("item_1", start=0)
        scheduler = _scheduler(engine)
        other_session = threading.Event()
        with engine.partials.running(other_session):
            _commit(scheduler, item, speech_end=2 * SR - 800, end=2 * SR)
            await asyncio.wait_for(scheduler.settle(item), WAIT_S)
        assert engine.partials.kept == [None] and other_session.is_set()
        assert engine.cancels == []  # nothing was decoded

    asyncio.run(main())


def test_a_growing_utterances_partial_ranks_below_a_final_decode_and_one_made_in_a_pause_as_one():
    """The ASR lane's jobs: a partial of a growing utterance is ``LIVE_PARTIAL`` (a final decode
    of any session goes first); a partial made in a pause may be the item's final decode, and a
    decode at commit is one: both ``LIVE_FINAL``, and neither is stopped by another's final."""
    async def main():
        engine, buffer, item = HeldEngine(), AudioBuffer(), Item("item_1", start=0)
        scheduler = _scheduler(engine)
        engine.release.set()  # every decode ends at once
        buffer.append(np.zeros(2 * SR, np.float32))
        # mid-speech the silence heard is a fraction of a VAD window (frames and windows do not
        # align), not 0: still a draft of growing speech
        await _partial_running(engine, scheduler, item, buffer, pause=300)
        await asyncio.wait_for(scheduler.partial, WAIT_S)
        buffer.append(np.zeros(SR, np.float32))
        engine.started.clear()
        paused = await _partial_running(engine, scheduler, item, buffer, pause=SR // 2)
        engine.partials.preempt()  # another session's final decode
        await asyncio.wait_for(scheduler.partial, WAIT_S)
        assert not paused.is_set() and engine.stopped == [False, False]
        _commit(scheduler, item, speech_end=3 * SR + 800, end=4 * SR)  # speech past the partials
        decoded = await asyncio.wait_for(scheduler.final(item, np.zeros(4 * SR, np.float32)), WAIT_S)
        assert decoded.text == "w0 w1 w2 w3 w4 w5 w6 w7"
        assert engine.priorities == [Priority.LIVE_PARTIAL, Priority.LIVE_FINAL, Priority.LIVE_FINAL]

    asyncio.run(main())
