"""The live protocol's vocabulary: audio formats, event types, error types, the parameters refused
by name, and ids in OpenAI's style."""

from __future__ import annotations

import secrets



# -- vocabulary ------------------------------------------------------------------------------

PCM_RATE = 24_000  # the protocol's audio/pcm rate
PCM_RATES = (PCM_RATE, 16_000)  # 16000: this server's extension (Whisper's rate)
G711_RATE = 8_000  # audio/pcmu and audio/pcma
AUDIO_FORMAT_TYPES = ("audio/pcm", "audio/pcmu", "audio/pcma")
ALLOWED_FORMATS = ("audio/pcm (16-bit little-endian mono PCM; rate 24000, or 16000 on this server), "
                   "audio/pcmu (G.711 mu-law, 8000 Hz) or audio/pcma (G.711 A-law, 8000 Hz)")
# OpenAI's limit on one input_audio_buffer.append (the decoded audio)
MAX_APPEND_BYTES = 15 * 1024 * 1024
# bounds on the VAD's times: sanity, not a model limit (OpenAI documents none)
MAX_VAD_MS = 10_000

FINISH = "speaker_asr.session.finish"  # our client event: end the session (see SessionFinish)
CLIENT_EVENT_TYPES = ("session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
                      "input_audio_buffer.clear", FINISH)
# events of a conversation session (a model that answers): none apply to transcription
CONVERSATION_EVENT_TYPES = ("conversation.item.create", "conversation.item.delete",
                            "conversation.item.retrieve", "conversation.item.truncate",
                            "response.create", "response.cancel", "output_audio_buffer.clear")
# the beta protocol's names, with what replaced them in GA
BETA_EVENT_TYPES = {
    "transcription_session.update": "session.update with session.type 'transcription' (the GA "
                                    "protocol; this server does not speak the beta one)",
}

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"
# parameters of OpenAI's protocol that this server refuses by name, with why
NOT_AVAILABLE = {
    "session.include": "log-probabilities are not sent by this server; leave include out or empty",
    "session.audio.input.transcription.delay": "it tunes OpenAI's gpt-realtime-whisper; here the "
                                               "deltas come by local agreement of successive decodes",
    "session.audio.input.transcription.keywords": "use prompt for vocabulary and spellings",
    "session.audio.input.transcription.languages": "give one language, or none to detect it",
    "session.audio.output": "a transcription session makes no audio",
}


def new_id(prefix: str) -> str:
    """A fresh id in OpenAI's style: ``event_...``, ``item_...``, ``sess_...``."""
    return f"{prefix}_{secrets.token_hex(12)}"

