"""The events of OpenAI's Realtime API (GA) for a transcription session, as our live route speaks
them: the client events parsed (a bad one answered by an ``error`` event that says what is wrong
and what is allowed), the server events built, and the session's configuration.

Field names and shapes are the official ``openai`` SDK's (``openai.types.realtime``, checked
against openai 3.57: ``RealtimeTranscriptionSessionCreateRequest``, ``SessionUpdateEvent``, the
``InputAudioBuffer*``, ``ConversationItemAdded``/``Done`` and
``ConversationItemInputAudioTranscription*`` events, ``RealtimeErrorEvent``; ``transcript.text.done``
is not a realtime event: its shape is ``TranscriptionTextDoneEvent``'s, which the SDK's realtime
client hands over with its ``type`` and fields as they came) so that the SDK's own client reads
every server event into its types;
tests/live/test_live_events.py checks each one with the SDK's pydantic models. The wording of errors
follows what OpenAI's server answers (``Invalid value: 'x'. Supported values are: ...``,
``param`` as a dotted path such as ``session.audio.input.format.type``, the client's
``event_id`` echoed in ``error.event_id``).

Client events (:func:`parse_client_event`): ``session.update``, ``input_audio_buffer.append``,
``input_audio_buffer.commit``, ``input_audio_buffer.clear``, and ours,
``speaker_asr.session.finish`` (:class:`SessionFinish`). A transcription session makes no
responses, so the conversation events (``response.create``, ...) are refused by name, and the
beta protocol's ``transcription_session.update`` with a pointer to its GA replacement.

The session (:class:`TranscriptionSession`) is what ``session.created`` and ``session.updated``
show: the full, effective configuration. ``session.update`` changes only the fields it names
(:meth:`TranscriptionSession.apply`), nested objects field by field as OpenAI does (a
``turn_detection`` with only ``threshold`` keeps the other VAD settings); an audio ``format`` is
replaced whole (its ``rate`` belongs to its ``type``).

What this server does differently, each documented where it is decided:

* ``audio/pcm`` also at 16000 Hz (:data:`PCM_RATES`): Whisper's own rate, so a client that has
  16 kHz audio sends it without a resampling step on either side. OpenAI takes only 24000.
* ``session.speaker_asr`` (:class:`SpeakerOptions`): our options, under a key named after this
  server. OpenAI keeps adding fields to the session (``include``, ``transcription.delay``,
  ``keywords``); a generic name such as ``diarization`` might one day be one of theirs with
  another shape, a vendor-named key cannot. The SDK keeps unknown keys on its objects and sends
  a dict given to ``session.update`` as it is, so SDK clients can use it.
* ``turn_detection`` is ``server_vad`` or null (the client commits): no ``semantic_vad``.
  ``create_response``, ``interrupt_response`` and ``idle_timeout_ms`` are accepted and ignored
  (they steer model responses, which a transcription session never makes).
* ``noise_reduction`` is accepted and not applied: the effective session shows it null.
* ``include`` (log-probabilities), ``transcription.delay``, ``keywords`` and ``languages`` are
  refused by name (not available here) rather than ignored, so a client is never misled.
* ``audio.input.transcription`` cannot be null: this server always transcribes.
* ``speaker_asr.session.finish`` (a client event of ours, named after this server for the reason
  ``speaker_asr`` is) ends the session: what the buffer holds is committed, every item is
  finished, then, with ``session.speaker_asr.final_transcript``, the file pipeline's transcript
  of the session's audio goes out as one ``transcript.text.done`` event (:class:`TranscriptDone`:
  the shape of the last event of ``/v1/audio/transcriptions``' ``stream=true``, with
  ``segments``), and the server closes the socket (1000).
* A committed item is announced as OpenAI announces one (the SDK's ``ConversationItemAdded``:
  "when the input audio buffer is committed ... the item will be a user message containing the
  audio"): ``conversation.item.added`` right after ``input_audio_buffer.committed``, its
  ``input_audio`` content's ``transcript`` null; ``conversation.item.done`` after the item's last
  transcription event (completed or failed, and its segments), with the transcript (null when it
  failed) -- a client that keeps the items (the SDK's docs: the item "will include the full
  content ... except for audio data") holds the transcript.
* The ``conversation.item.input_audio_transcription.segment`` events carry our speaker labels
  (SPEAKER_00 ..., or a known speaker's name); their ``start``/``end`` are seconds on the
  session's audio clock (the clock of ``audio_start_ms``), so a client can place them without
  holding the item's start; with ``return_word_timestamps`` they also carry ``words``.

Pure: no torch. Reference clips are kept as given (base64 or embeddings); decoding and embedding
them, and checking ``language`` against the loaded Whisper, is the live route's work.

The package: :mod:`.vocabulary` (formats, event types, ids), :mod:`.errors` (``ProtocolError``
and validation errors in OpenAI's words), :mod:`.session` (the session's configuration and
``session.update``'s shapes), :mod:`.client` (client events, :func:`parse_client_event`),
:mod:`.server` (server events).
"""

from __future__ import annotations

from speaker_asr.live.protocol.vocabulary import (ALLOWED_FORMATS, AUDIO_FORMAT_TYPES,
                                                  BETA_EVENT_TYPES, CLIENT_EVENT_TYPES,
                                                  CONVERSATION_EVENT_TYPES, FINISH, G711_RATE,
                                                  INVALID_REQUEST, MAX_APPEND_BYTES, MAX_VAD_MS,
                                                  NOT_AVAILABLE, PCM_RATE, PCM_RATES, SERVER_ERROR,
                                                  new_id)
from speaker_asr.live.protocol.errors import (ErrorEvent, InvalidField, ProtocolError, RealtimeError,
                                              ServerEventBase, json_type, protocol_error)
from speaker_asr.live.protocol.session import (Audio, AudioFormat, AudioInput, AudioInputUpdate,
                                               AudioUpdate, NoiseReductionUpdate, ServerVad,
                                               ServerVadUpdate, SessionConfigUpdate,
                                               SpeakerOptions, SpeakerOptionsUpdate, StrictModel,
                                               Transcription, TranscriptionSession, without_none)
from speaker_asr.live.protocol.client import (ClientEvent, InputAudioBufferAppend,
                                              InputAudioBufferClear, InputAudioBufferCommit,
                                              SessionFinish, SessionUpdate, parse_client_event)
from speaker_asr.live.protocol.server import (Cleared, Committed, DurationUsage, FailureDetail,
                                              InputAudioContent, ItemAdded, ItemDone, SegmentWord,
                                              ServerEvent,
                                              SessionCreated, SessionUpdated, SpeechStarted,
                                              SpeechStopped, TranscriptDone,
                                              TranscriptionCompleted, TranscriptionDelta,
                                              TranscriptionFailed, TranscriptionSegment,
                                              UserAudioItem, commit_empty_error, server_error)

__all__ = ["ServerEventBase", "ALLOWED_FORMATS", "AUDIO_FORMAT_TYPES", "BETA_EVENT_TYPES", "CLIENT_EVENT_TYPES",
           "CONVERSATION_EVENT_TYPES", "FINISH", "G711_RATE", "INVALID_REQUEST", "MAX_APPEND_BYTES",
           "MAX_VAD_MS", "NOT_AVAILABLE", "PCM_RATE", "PCM_RATES", "SERVER_ERROR", "new_id",
           "InvalidField", "ProtocolError", "json_type", "protocol_error", "Audio", "AudioFormat",
           "AudioInput", "AudioInputUpdate", "AudioUpdate", "NoiseReductionUpdate", "ServerVad",
           "ServerVadUpdate", "SessionConfigUpdate", "SpeakerOptions", "SpeakerOptionsUpdate",
           "StrictModel", "Transcription", "TranscriptionSession", "without_none", "ClientEvent",
           "InputAudioBufferAppend", "InputAudioBufferClear", "InputAudioBufferCommit", "SessionFinish",
           "SessionUpdate", "parse_client_event", "Cleared", "Committed", "DurationUsage", "ErrorEvent",
           "FailureDetail", "InputAudioContent", "ItemAdded", "ItemDone", "RealtimeError", "SegmentWord",
           "ServerEvent", "SessionCreated", "SessionUpdated", "SpeechStarted", "SpeechStopped",
           "TranscriptDone", "TranscriptionCompleted", "TranscriptionDelta", "TranscriptionFailed",
           "TranscriptionSegment", "UserAudioItem", "commit_empty_error", "server_error"]
