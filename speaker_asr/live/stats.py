"""What a live session counts of the events it sends: its items by how their transcription ended
(for the route's log line, speaker_asr/serving/realtime.py) and, with the server's metrics
(speaker_asr/serving/metrics.py), each item's latency from its commit to its ``completed`` event
and the seconds of audio received. No I/O."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from speaker_asr.live.protocol import Committed, TranscriptionCompleted, TranscriptionFailed


@dataclass
class SessionStats:
    """``metrics``: the server's :class:`~speaker_asr.serving.metrics.Metrics` (``live_audio``,
    ``live_item``), or None. Beside the counts it keeps, per item in flight, when its commit was
    sent (its latency) and its transcript once it has one (for its ``conversation.item.done``)."""

    metrics: Any = None
    items_completed: int = 0
    items_failed: int = 0
    committed_at: dict[str, float] = field(default_factory=dict)  # item id -> when its commit was sent
    transcripts: dict[str, Optional[str]] = field(default_factory=dict)  # item id -> its transcript

    def heard(self, seconds: float) -> None:
        """Audio received (appended frames, decoded)."""
        if self.metrics is not None:
            self.metrics.live_audio(seconds)

    def sent(self, event) -> None:
        """A server event went out: commit times, items by outcome, each item's transcript."""
        if isinstance(event, Committed):
            self.committed_at[event.item_id] = time.monotonic()
        elif isinstance(event, (TranscriptionCompleted, TranscriptionFailed)):
            completed = isinstance(event, TranscriptionCompleted)
            if completed:
                self.items_completed += 1
            else:
                self.items_failed += 1
            self.transcripts[event.item_id] = event.transcript if completed else None
            committed = self.committed_at.pop(event.item_id, None)
            if self.metrics is not None and committed is not None:
                self.metrics.live_item("completed" if completed else "failed", time.monotonic() - committed)

    def transcript(self, item_id: str) -> Optional[str]:
        """The item's transcript (None when it failed), forgotten once asked for: the item is done."""
        return self.transcripts.pop(item_id, None)
