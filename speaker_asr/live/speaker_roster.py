"""A live session's speakers: the voices of its known speakers (``known_speaker_names`` with
their clips, embedded through the engine at ``session.update``) and its online labels
(:class:`~speaker_asr.live.online_labels.OnlineSpeakers`, made when the first item needs one, with
the known voices in it), kept in step with the session's ``speaker_match_threshold`` and
``max_speakers``."""

from __future__ import annotations

from typing import Optional

import numpy as np

from speaker_asr.scheduling import Priority
from speaker_asr.errors import RequestError
from speaker_asr.live.engine import LiveEngine
from speaker_asr.live.protocol import ProtocolError
from speaker_asr.live.online_labels import OnlineSpeakers

NAMES_PARAM = "session.speaker_asr.known_speaker_names"


class SessionSpeakers:
    """One session's speakers over its ``engine``; ``options``: the session's ``speaker_asr``
    settings (:class:`~speaker_asr.live.protocol.session.SpeakerOptions`)."""

    def __init__(self, engine: LiveEngine):
        self.engine = engine
        self.known: dict[str, np.ndarray] = {}  # known speaker's name -> voice
        self.online: Optional[OnlineSpeakers] = None

    def on(self, options) -> bool:
        """Whether items get speakers: ``speaker_labels`` asked for, and a voice model loaded."""
        return bool(options.speaker_labels) and self.engine.loaded.has_voices

    async def embed_known(self, options, event_id: Optional[str]) -> dict[str, np.ndarray]:
        """The known speakers' voices from their clips (a live speakers job); a bad clip, or no
        voice model, is a :class:`ProtocolError` naming the field."""
        names, refs = options.known_speaker_names, options.known_speaker_references
        if not names:
            return {}
        if not self.engine.loaded.has_voices:
            raise ProtocolError("known speakers need the diarization pipeline's voice model, and "
                                "this server has none loaded", param=NAMES_PARAM, event_id=event_id)
        try:
            return await self.engine.references(names, refs, priority=Priority.LIVE_SPEAKERS)
        except RequestError as exc:
            raise ProtocolError(str(exc), param="session.speaker_asr.known_speaker_references",
                                event_id=event_id) from None

    def update(self, known: dict[str, np.ndarray], options, event_id: Optional[str]) -> None:
        """The session's new settings: ``known`` the known voices now, the online labels given
        the new ones and the new threshold and ``max_speakers``."""
        if self.online is not None:
            for name, vector in known.items():
                if name not in self.known:
                    try:
                        self.online.add_known(name, vector)
                    except ValueError as exc:
                        raise ProtocolError(str(exc), param=NAMES_PARAM, event_id=event_id) from None
            self.online.threshold = self.threshold(options)
            self.online.max_speakers = options.max_speakers
        self.known = known

    def labels(self, options) -> OnlineSpeakers:
        """The session's online labels, made at the first call."""
        if self.online is None:
            self.online = OnlineSpeakers(self.threshold(options), options.max_speakers, known=self.known)
        return self.online

    def threshold(self, options) -> float:
        """The session's ``speaker_match_threshold``, else the server's."""
        return options.speaker_match_threshold if options.speaker_match_threshold is not None \
            else self.engine.loaded.match_threshold
