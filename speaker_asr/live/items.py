"""A live session's items (its utterances) and when a growing one is decoded before its commit.
No I/O: :func:`partial_due` is told the clock, the pause the turn detector hears and when the
last partial decode ended, and says whether a decode is due (and what the item then notes); the
caller notes it and starts the decode (speaker_asr/live/decoding.py). :func:`activity_due` says
the same of a look at the item's speakers (speaker_asr/live/item_diarization.py).

While an item grows (server VAD), its audio (the last 30 s at most) is decoded again every
:data:`PARTIAL_INTERVAL_S` seconds of new audio (once the model rested :data:`PARTIAL_REST` times
as long as the last partial took) and once in each pause of at least :data:`PAUSE_DECODE_S`. When
the utterance ends, the last partial whose audio holds all its speech (it began after the
speech's last window; the pause's decode makes that likely) is its final decode, so the text is
ready when the VAD commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from speaker_asr.audio.decode import SAMPLE_RATE
from speaker_asr.diarization.frames import CHANGE_AFTER_S, CHANGE_BEFORE_S
from speaker_asr.live.agreement import LocalAgreement
from speaker_asr.models import Decoded

MAX_ITEM_S = 30.0  # Whisper's window: an item's most audio
PARTIAL_INTERVAL_S = 1.0  # new audio between two partial decodes of a growing item
PAUSE_DECODE_S = 0.096  # a pause this long (3 VAD windows) gets a partial decode the final may reuse
# the model rests between two cadence partials at least this times as long as the last decode
# took: a decode that ends an utterance then rarely waits behind one (pause decodes do not wait)
PARTIAL_REST = 1.0
MIN_PARTIAL_S = 0.5  # an item shorter than this is not decoded before its commit
# a growing item's speaker activity is looked at again after this much new audio (the
# segmentation model over the item, cheap beside a decode: docs/measurements.md, "Figures behind
# the speed fixes' reasons")
ACTIVITY_INTERVAL_S = 0.2
# a look at a growing item's speakers takes its last seconds at most (a hand-over is found in its
# last CHANGE_BEFORE_S + CHANGE_AFTER_S; the look's cost stays that of a short item)
LOOK_S = 8.0


class PartialDecode(NamedTuple):
    """A partial decode of an item from its start: the clock sample its audio ended at, and it."""

    end: int
    decoded: Decoded


class LastDecode(NamedTuple):
    """The session's last partial decode: when it ended (monotonic time) and the seconds it took."""

    ended: float
    seconds: float


class PartialDue(NamedTuple):
    """A partial decode is due (:func:`partial_due`): what the item notes as it starts."""

    partial_at: int  # the item's samples at this decode
    paused_at: int  # the speech end of the pause its last pause decode was for


@dataclass
class Item:
    """A committed (or growing) utterance."""

    id: str
    start: int  # audio clock sample of its first sample
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    partial_at: int = 0  # samples it had at its last partial decode
    paused_at: int = -1  # the speech end (clock sample) of the pause its last pause decode was for
    speech_end: Optional[int] = None  # where its speech ended (server VAD's stop), once committed
    last_partial: Optional[PartialDecode] = None  # its last partial decode from its start
    previous_id: Optional[str] = None  # the item committed before it
    language: Optional[str] = None  # detected for it (a multilingual model, no session language)
    end: Optional[int] = None  # the clock sample its audio ends at, once committed
    activity_at: int = 0  # samples it had when its speaker activity was last looked at
    change_at: Optional[int] = None  # the clock sample where another person took over (to cut at)

    def final_decode(self) -> Optional[Decoded]:
        """Its last partial decode when that heard all its speech and nothing after its audio
        (it ended after the speech's end, not after the item's cut): the final decode then, with
        no decode at commit."""
        if self.last_partial is not None and self.covers(self.last_partial.end):
            return self.last_partial.decoded
        return None

    def covers(self, end: int) -> bool:
        """Whether a decode of its audio up to clock sample ``end`` heard all its speech and
        nothing after its audio: ``end`` lies between its speech's end and its cut (its audio's
        end, once committed)."""
        return self.speech_end is not None and self.speech_end <= end <= (self.end if self.end is not None else end)


def activity_due(item: Item, clock: int) -> Optional[int]:
    """Whether the growing ``item``'s speaker activity is looked at again at clock sample
    ``clock``: once it is long enough to have changed hands (a speaker alone for
    ``CHANGE_BEFORE_S``, another for ``CHANGE_AFTER_S``), then after each
    :data:`ACTIVITY_INTERVAL_S` of new audio. When due, the item's length, which the caller notes
    as its ``activity_at``; None when not."""
    grown = clock - item.start
    if grown < (CHANGE_BEFORE_S + CHANGE_AFTER_S) * SAMPLE_RATE \
            or grown - item.activity_at < ACTIVITY_INTERVAL_S * SAMPLE_RATE:
        return None
    return grown


def partial_due(item: Item, clock: int, pause: int, now: float, last_decode: LastDecode) -> Optional[PartialDue]:
    """Whether the growing ``item`` gets a partial decode at clock sample ``clock`` (the caller
    checked that the model is free): ``pause`` is the silence heard since its speech's last
    window (samples), ``last_decode`` the session's last partial. When due, what the caller
    notes on the item (its ``partial_at``, and its ``paused_at``, new for a pause's decode);
    None when not."""
    grown = clock - item.start
    if grown < MIN_PARTIAL_S * SAMPLE_RATE:
        return None
    speech_end = clock - pause
    if pause >= PAUSE_DECODE_S * SAMPLE_RATE and item.paused_at != speech_end:
        return PartialDue(grown, speech_end)
    if grown - item.partial_at < PARTIAL_INTERVAL_S * SAMPLE_RATE \
            or now - last_decode.ended < PARTIAL_REST * last_decode.seconds:
        return None
    return PartialDue(grown, item.paused_at)
