"""A live session's speaker work: who speaks in its items, found on the diarization thread
beside its decodes (through the engine, :mod:`speaker_asr.live.engine`), and the ``segment``
events that carry them. The session (:mod:`speaker_asr.live.session`) calls it at two points:

* while an item grows, :meth:`SpeakerWork.look` every
  :data:`~speaker_asr.live.items.ACTIVITY_INTERVAL_S` of new audio: the segmentation model over
  the item so far (a few milliseconds); where another person has taken over
  (:func:`~speaker_asr.diarization.frames.speaker_change`) the item notes the point
  (``change_at``) and the session cuts it there, so that an item follows the speakers as a line
  of captions does;
* once a committed item's text is out, :meth:`SpeakerWork.segments`: its speakers and their
  voices (:meth:`~speaker_asr.live.engine.LiveEngine.utterance`: one segmentation pass over it,
  a fraction of the whole pipeline's cost), its words attributed to them
  (:func:`~speaker_asr.live.segment_events.item_speakers`), given the session's labels
  (:mod:`speaker_asr.live.segment_events`), one event per speaker turn. (Found after the final decode,
  not beside it: beside it the two would share the CPU and the text would come later.)

:meth:`SpeakerWork.close` cancels what is pending.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

import numpy as np

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.config import InferenceConfig
from speaker_asr.diarization.frames import speaker_change
from speaker_asr.live.engine import LiveEngine
from speaker_asr.live.items import LOOK_S, Item, activity_due
from speaker_asr.live.segment_events import item_speakers, segment_event, turns_by_diarization, turns_by_voice
from speaker_asr.live.protocol import TranscriptionSegment
from speaker_asr.live.online_labels import OnlineSpeakers
from speaker_asr.models import Decoded

logger = logging.getLogger("server")


class SpeakerWork:
    """One session's speaker work over its ``engine``."""

    def __init__(self, engine: LiveEngine):
        self.engine = engine
        self.made = 0  # segment events made so far (their ids)
        self._look: Optional[asyncio.Task] = None
        self._no_activity = False  # the diarization cannot run its segmentation alone

    def look(self, item: Item, clock: int, audio: Callable[[int, int], np.ndarray]) -> None:
        """A look at who speaks in the growing ``item`` (``audio(start, end)``: its audio
        between two clock samples; its last :data:`~speaker_asr.live.items.LOOK_S` up to clock
        sample ``clock``) when one is due (:func:`~speaker_asr.live.items.activity_due`) and none
        is running; a hand-over sets the item's ``change_at``."""
        if self._no_activity or (self._look is not None and not self._look.done()):
            return
        due = activity_due(item, clock)
        if due is not None:
            item.activity_at = due
            start = max(item.start, clock - int(LOOK_S * SAMPLE_RATE))
            self._look = asyncio.ensure_future(self._looked(item, start, audio(start, clock).copy()))

    async def _looked(self, item: Item, start: int, audio: np.ndarray) -> None:
        try:
            activity = await self.engine.activity(audio)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("a look at a live item's speakers failed (skipped)", exc_info=True)
            return
        if activity is None:
            self._no_activity = True
            return
        cut = speaker_change(activity)
        if cut is not None and item.end is None and item.change_at is None:
            item.change_at = start + int(round(cut * SAMPLE_RATE))

    async def segments(self, item: Item, audio: np.ndarray, decoded: Decoded, transcript: str,
                       speakers: OnlineSpeakers, config: InferenceConfig,
                       with_words: bool) -> list[TranscriptionSegment]:
        """The item's segment events: its own diarization's speakers (on the diarization
        thread), its words attributed to them, in the session's labels
        (:func:`~speaker_asr.live.segment_events.turns_by_diarization`), or, when it heard nobody or
        could not decide a speaker (no voice long enough at the session's start), the whole
        item's voice (:func:`~speaker_asr.live.segment_events.turns_by_voice`); one event per speaker
        turn. A model error here costs the item its segments only (logged): its text is
        out already."""
        seconds = len(audio) / SAMPLE_RATE
        try:
            found = item_speakers(await self.engine.utterance(audio, config), decoded.transcript, seconds)
            turns = turns_by_diarization(speakers, found) if found is not None else []
            if not turns:  # nobody heard, or no voice to decide by: the whole item's voice
                embedding = None
                if speakers.needs_embedding(seconds) or not speakers.labels:
                    embedding = await self.engine.embed(audio)
                turns = turns_by_voice(speakers, embedding, seconds, transcript, decoded.words)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("live speakers of %s failed", item.id)
            return []
        events = []
        for turn in turns:
            events.append(segment_event(item.id, self.made, item.start / SAMPLE_RATE, seconds, turn,
                                        with_words))
            self.made += 1
        return events

    async def close(self) -> None:
        """Everything pending cancelled and awaited."""
        if self._look is not None:
            self._look.cancel()
            try:
                await self._look
            except BaseException:
                pass
