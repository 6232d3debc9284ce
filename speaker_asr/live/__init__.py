"""Live transcription with speakers over OpenAI's Realtime transcription protocol, driven by the
WebSocket route (``/v1/realtime?intent=transcription``, speaker_asr/serving/realtime.py):

* :mod:`.session` -- one session's state machine: client events in, server events and model
  calls out (docs/architecture.md, "A live session, in one pass");
* :mod:`.engine` -- its model calls, onto the model thread or the diarization thread, through
  :class:`speaker_asr.models.Models`;
* :mod:`.item_diarization` -- who speaks in the items, found on the diarization thread while the
  audio arrives (where a growing item changes hands; a committed item's speakers);
* :mod:`.vad` -- silero-vad and the turn detector.

The rest holds no I/O and no model, each piece unit-tested with hand-made inputs:
:mod:`.protocol` (the events, the session's configuration and ``session.update``),
:mod:`.session_config` (the session as a request's ``InferenceConfig``), :mod:`.items` (an
utterance; when a growing one is decoded), :mod:`.language` (the session's language),
:mod:`.agreement` (which words of successive decodes are sent as deltas),
:mod:`.online_labels` and :mod:`.segment_events` (online speaker labels; an item's speakers and segment
events), :mod:`.final_pass` (the end's offline pass and its labels), :mod:`.audio_format`
(appended frames -> 16 kHz float32 mono).

No torch at import: the models are speaker_asr/models.py's.
"""
