"""A live session's configuration as the file pipeline's request: the one mapping from the
session's vocabulary (:class:`~speaker_asr.live.protocol.TranscriptionSession`) to
:class:`~speaker_asr.config.InferenceConfig`, for the items' decodes and for the final pass, with
a mistake named by the session field it came from. No I/O."""

from __future__ import annotations

from typing import Any

from speaker_asr.config import InferenceConfig, ModelCapabilities
from speaker_asr.errors import RequestError
from speaker_asr.live.protocol import ProtocolError, TranscriptionSession

# the request parameter -> the session's field it comes from
SESSION_FIELDS = {"language": "session.audio.input.transcription.language",
                  "prompt": "session.audio.input.transcription.prompt",
                  "max_speakers": "session.speaker_asr.max_speakers",
                  "known_speaker_names": "session.speaker_asr.known_speaker_names",
                  "known_speaker_references": "session.speaker_asr.known_speaker_references",
                  "speaker_match_threshold": "session.speaker_asr.speaker_match_threshold"}


def session_parameters(session: TranscriptionSession, final_pass: bool = False) -> dict[str, Any]:
    """The request parameters of the session's decodes: its language and prompt, no assistant
    (a live decode is drafted by the previous one); for the final pass, the file route's
    defaults with the session's language, prompt and speaker options (``max_speakers``, the known
    speakers and their threshold)."""
    t, options = session.audio.input.transcription, session.speaker_asr
    params: dict[str, Any] = {} if final_pass else {"assisted": False}
    if t.language:
        params["language"] = t.language
    if t.prompt:
        params["prompt"] = t.prompt
    if final_pass:
        if options.max_speakers is not None:
            params["max_speakers"] = options.max_speakers
        if options.known_speaker_names:
            params["known_speaker_names"] = list(options.known_speaker_names)
            params["known_speaker_references"] = list(options.known_speaker_references)
        if options.speaker_match_threshold is not None:
            params["speaker_match_threshold"] = options.speaker_match_threshold
    return params


def session_config(session: TranscriptionSession, capabilities: ModelCapabilities,
                   final_pass: bool = False, event_id=None) -> InferenceConfig:
    """:func:`session_parameters` validated against the loaded models; a mistake (a language
    the model does not write, a prompt too long) is a :class:`ProtocolError` naming the session
    field (and the client's ``event_id``)."""
    try:
        return InferenceConfig.from_request(session_parameters(session, final_pass), capabilities)
    except RequestError as exc:
        raise ProtocolError(str(exc), param=SESSION_FIELDS.get(exc.param or "", exc.param),
                            event_id=event_id) from None
