"""The request's steps (speaker_asr/pipeline.py, run by speaker_asr/models.py) with models handed in: the handler's tiny random
ones, or stand-ins for the diarization's voice model; no patching."""

import numpy as np

from helpers import tone

from speaker_asr.config import InferenceConfig
from speaker_asr.models import Models
from speaker_asr.pipeline import diarize_speakers, failure_warnings, heard_nobody, is_silent
from speaker_asr.types import Diarization, Transcript, Turn


def config(**parameters) -> InferenceConfig:
    return InferenceConfig.from_request(parameters, None)


def two_voices() -> np.ndarray:
    return np.concatenate([tone(3.0, freq=f) for f in (180.0, 320.0, 180.0, 320.0)])


class _BrokenVoices:
    def centroids(self, audio, turns):
        raise RuntimeError("embedding model crashed")


def test_diarization_step_relabels_every_turn_and_voice(handler):
    audio = two_voices()
    found = diarize_speakers(handler.models.diarizer.pipeline, handler.models.diarizer.voices, audio, config(num_speakers=2), True)
    labels = {t.speaker for t in found.exclusive_turns}
    assert labels and all(label.startswith("SPEAKER_") for label in labels)
    assert {t.speaker for t in found.turns} >= labels
    assert set(found.voices) == labels and found.embedding_error is None and found.error is None
    assert all(len(v) == handler.models.diarizer.voices.dimension for v in found.voices.values() if v is not None)
    assert diarize_speakers(handler.models.diarizer.pipeline, handler.models.diarizer.voices, audio, config(num_speakers=2),
                            False).voices == {}
    broken = diarize_speakers(handler.models.diarizer.pipeline, _BrokenVoices(), audio, config(num_speakers=2), True)
    assert broken.embedding_error == "RuntimeError" and broken.voices == {}
    assert broken.exclusive_turns == found.exclusive_turns


def test_without_diarization_the_result_has_no_speakers(handler):
    result = Models(handler.models.asr).transcribe(two_voices(), config(return_word_timestamps=True))
    assert result.segments and not result.diarized and result.speaker_turns == []
    assert result.with_words and all(w.speaker is None for s in result.segments for w in s.words)
    silent = Models(handler.models.asr).transcribe(np.zeros(16000, np.float32), config())
    assert silent.text == "" and silent.segments == [] and silent.warnings == []


def test_silence_and_nobody_heard():
    assert is_silent(np.zeros(0, np.float32), config(vad_filter=False))
    assert is_silent(np.zeros(100, np.float32), config())
    assert not is_silent(np.zeros(100, np.float32), config(vad_filter=False))
    words = Transcript(" Thank you.", [], "en")
    assert heard_nobody(Diarization(), words, config())
    assert not heard_nobody(Diarization(), words, config(vad_filter=False))
    assert not heard_nobody(Diarization(error="RuntimeError"), words, config())
    assert not heard_nobody(Diarization([Turn(0.0, 1.0, "SPEAKER_00")]), words, config())


def test_warnings_say_what_was_removed_and_what_failed():
    dropped = Transcript("", [], "en", dropped=["I'm Sheila. I'm Sheila."])
    assert failure_warnings(dropped, None) == [
        "removed 4 words Whisper wrote with no audio under them (a repetition after the speech): "
        "\"I'm Sheila. I'm Sheila.\" (set hallucination_filter=false to keep them)"]
    assert failure_warnings(Transcript("", [], "en"), Diarization(error="MemoryError")) == [
        "speaker diarization failed (MemoryError); the transcript has no speakers"]
    assert "could not be compared" in failure_warnings(
        Transcript("", [], "en"), Diarization(embedding_error="RuntimeError"))[0]
    assert failure_warnings(Transcript("", [], "en"), Diarization()) == []
