"""Live transcription with speakers over OpenAI's Realtime transcription protocol, driven by the
WebSocket route (``/v1/realtime?intent=transcription``, speaker_asr/serving/realtime.py, with its
bounds in speaker_asr/serving/live_limits.py -- :class:`SessionGuard`, :class:`ReadAhead` -- and
its WebSocket protocol in speaker_asr/serving/ws_protocol.py). The flow, step by step:
docs/architecture.md, "A live session, in one pass".

With I/O or models:

* :mod:`.session` -- :class:`LiveSession`, one session's parts held together: client events in,
  server events and model calls out;
* :mod:`.engine` -- :class:`LiveEngine`, what a session needs of the models, and the server's
  :class:`RunnerEngine` (its calls as jobs of the models' scheduler, with their priorities, through
  :class:`speaker_asr.models.Models`);
* :mod:`.decoding` -- :class:`DecodeScheduler`, the partial and final decodes;
* :mod:`.item_queue` -- :class:`ItemQueue`, the committed items in order and the back-pressure;
* :mod:`.item_diarization` -- :class:`SpeakerWork`, who speaks in the items, on the diarization
  thread (where a growing item changes hands; a committed item's speakers);
* :mod:`.speaker_roster` -- :class:`SessionSpeakers`, known speakers' voices and the online labels;
* :mod:`.vad` -- silero-vad, the turn detector and :class:`SessionVad`.

No I/O and no model, each unit-tested with hand-made inputs: :mod:`.protocol` (the events, the
session's configuration and ``session.update``), :mod:`.session_config` (the session as a
request's ``InferenceConfig``), :mod:`.buffer` (:class:`AudioBuffer`, the audio not committed),
:mod:`.items` (an utterance; when a growing one is decoded), :mod:`.language` (the session's
language), :mod:`.agreement` (which words of successive decodes are sent as deltas),
:mod:`.online_labels` (online speaker labels by running centroids), :mod:`.segment_events` (an
item's speakers in the session's labels, and their segment events), :mod:`.stats`
(:class:`SessionStats`, the counts and metrics), :mod:`.final_pass` (the end's offline pass and
its labels), :mod:`.audio_format` (appended frames -> 16 kHz float32 mono).

No torch at import: the models are speaker_asr/models.py's.
"""
