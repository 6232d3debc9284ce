"""Live transcription with speakers over OpenAI's Realtime transcription protocol (issue 31): the
pure logic, each piece unit-tested with hand-made inputs, and the session loop that the WebSocket
route (``/v1/realtime?intent=transcription``, speaker_asr/serving/realtime.py) drives:
:mod:`.session` (one session's state machine and its model calls) and :mod:`.vad` (silero-vad;
the turn detector). Those two import torch only when a model runs.

* :mod:`.events` -- the protocol's event shapes (OpenAI's Realtime API, GA): the client events
  parsed, with an error event that says what is wrong and what is allowed; the server events
  built; the session's configuration and how a ``session.update`` changes it.
* :mod:`.audio_format` -- appended audio frames (``audio/pcm``, ``audio/pcmu``, ``audio/pcma``)
  decoded to 16 kHz float32 mono, frame by frame, without clicks at frame boundaries.
* :mod:`.agreement` -- the local-agreement policy: which words of a growing utterance's
  successive decodes are sent as deltas (emitted once, never taken back).
* :mod:`.speakers` -- online speaker labels: each utterance's voice assigned to running
  centroids, known speakers by name, labels stable for the session.

No torch here: numpy, scipy and pydantic only.
"""
