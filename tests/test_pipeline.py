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


def test_an_utterances_speakers_come_from_one_segmentation_pass_with_their_voices(handler):
    """A live item's speakers (Models.diarize_utterance): the segmentation's frame activity over
    the item in one pass, its turns and exclusive turns, each speaker's voice from the pipeline's
    own embedding model; and the frame activity alone, on the diarization thread."""
    audio = two_voices()[:int(6.0 * 16000)]
    models = handler.models
    activity = models.activity(audio)
    assert activity is not None and activity.frames.shape[1] == 3 and activity.frames.dtype == bool
    assert abs(activity.duration - 6.0) < 0.2 and 0.01 < activity.step < 0.03
    found = models.diarize_utterance(audio, config())
    assert found.error is None and found.embedding_error is None
    assert all(0.0 <= t.start < t.end <= 6.0 + 1e-6 for t in found.turns)
    assert set(found.voices) == {t.speaker for t in found.exclusive_turns}
    assert all(v is None or abs(np.linalg.norm(v) - 1.0) < 1e-6 for v in found.voices.values())


def test_a_decode_stops_at_the_next_token_once_its_cancel_is_set(handler):
    """A live partial decode that its utterance's end made useless stops at once (the cancel
    event is checked at every generated token), and one cancelled before it starts never runs."""
    import threading

    import pytest

    from speaker_asr.asr.stopping import DecodeCancelled

    class SetAfter:
        """An event that reads as set from its ``n``-th look on (mid-decode)."""

        def __init__(self, n):
            self.n, self.looks = n, 0

        def is_set(self):
            self.looks += 1
            return self.looks >= self.n

    audio, cfg = two_voices()[:int(4.0 * 16000)], config(language="en")
    done = handler.models.decode(audio, cfg, max_new_tokens=20)
    assert done.text, "the tiny random model writes tokens until its limit"
    for n in (1, 4):
        cancel = SetAfter(n)
        with pytest.raises(DecodeCancelled):
            handler.models.decode(audio, cfg, max_new_tokens=20, cancel=cancel)
        assert cancel.looks == n  # stopped at the token after it was set, not at the end
    unset = threading.Event()
    assert handler.models.decode(audio, cfg, max_new_tokens=20, cancel=unset).text == done.text


def test_the_sentences_voices_are_embedded_on_the_diarization_model_and_a_fault_keeps_the_speakers(handler):
    from speaker_asr.models import PyannoteDiarizer
    from speaker_asr.settings import ModelSettings

    diarizer = handler.models.diarizer
    audio = two_voices()
    found = Diarization([Turn(0.0, 12.0, "SPEAKER_00")])
    models = Models(handler.models.asr, diarizer)
    embed = models._file_pipeline._sentence_embedder(audio, found)
    vectors = embed([(0.0, 3.0), (3.0, 6.0)])
    assert len(vectors) == 2 and all(abs(np.linalg.norm(v) - 1.0) < 1e-6 for v in vectors)
    # the setting off, no turns, or no embedding model: nothing to check the speakers with
    assert Models(handler.models.asr, diarizer, ModelSettings(sentence_voices=False))._file_pipeline._sentence_embedder(audio, found) is None
    assert models._file_pipeline._sentence_embedder(audio, Diarization()) is None
    assert Models(handler.models.asr, PyannoteDiarizer(diarizer.pipeline))._file_pipeline._sentence_embedder(audio, found) is None

    class Crashing:
        model = None

    broken = Models(handler.models.asr, PyannoteDiarizer(diarizer.pipeline, Crashing()))
    assert broken._file_pipeline._sentence_embedder(audio, found)([(0.0, 3.0)]) == [None]


def test_a_decode_with_a_token_limit_leaves_no_warning_in_the_log(handler):
    """Every live decode has a token limit, and Whisper checkpoints set ``max_length``: the
    log must not get transformers' "both set" warning once per decode."""
    import logging

    class Kept(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    kept = Kept()
    source = logging.getLogger("transformers.generation.utils")
    source.addHandler(kept)
    try:
        assert handler.models.asr.model.generation_config.max_length is not None
        handler.models.decode(two_voices()[:int(2.0 * 16000)], config(language="en"), max_new_tokens=5)
    finally:
        source.removeHandler(kept)
    assert not [m for m in kept.messages if "seem to have been set" in m], kept.messages
