"""Known speakers (``known_speaker_names`` + ``known_speaker_references``) and
``return_speaker_embeddings`` through the handler, with the tiny random pipeline: the plumbing,
the errors and the cache. Whether real voices are named right is in test_real_models.py (the
kit's CAM++ pipeline) and eval/known_speakers.py."""

import math

import numpy as np
import pytest

from helpers import b64, encode, tone

from speaker_asr.errors import RequestError


def call(handler, audio: bytes, **parameters):
    return handler({"inputs": b64(audio), "parameters": parameters})


def labels(r: dict) -> set:
    return {c.get("speaker") for c in r["chunks"]} | {s["speaker"] for s in r["speakers"]}


@pytest.fixture(scope="module")
def voices(handler, speech_like_wav):
    """The tiny pipeline's speakers on the speech-like clip, with their voice embeddings."""
    r = call(handler, speech_like_wav, num_speakers=2, return_speaker_embeddings=True)
    return r


def test_speaker_embeddings_are_returned_per_label_as_unit_vectors(handler, voices):
    embeddings = voices["speaker_embeddings"]
    assert embeddings and set(embeddings) == {s["speaker"] for s in voices["speakers"]}
    dim = handler.models.diarizer.voices.dimension
    for label, v in embeddings.items():
        assert len(v) == dim
        assert math.sqrt(sum(x * x for x in v)) == pytest.approx(1.0, abs=1e-4)
    assert "known_speakers" not in voices  # nothing was asked to be named


def test_an_embedding_sent_back_names_its_speaker_in_every_format(handler, speech_like_wav, voices):
    """The voice-library round trip: keep a speaker's embedding from one call, send it as the
    reference of a name in the next: that speaker is named, everywhere."""
    first = sorted(voices["speaker_embeddings"])[0]
    ref = voices["speaker_embeddings"][first]
    r = call(handler, speech_like_wav, num_speakers=2, known_speaker_names=["Alice"],
             known_speaker_references=[ref], speaker_match_threshold=0.999)
    assert r["known_speakers"] == [{"name": "Alice", "speaker": "Alice",
                                    "similarity": pytest.approx(1.0, abs=1e-3)}]
    renamed = {s["speaker"] for s in voices["speakers"]} - {first} | {"Alice"}
    assert labels(r) == renamed
    assert [s["text"] for s in r["speakers"]] == [s["text"] for s in voices["speakers"]]
    for fmt in ("diarized_json", "verbose_json", "srt", "rttm"):
        out = call(handler, speech_like_wav, num_speakers=2, known_speaker_names=["Alice"],
                   known_speaker_references=[ref], speaker_match_threshold=0.999, response_format=fmt)
        assert out["known_speakers"][0]["speaker"] == "Alice"
        text = str(out.get("segments") or out.get("content"))
        assert "Alice" in text and first not in text, fmt


def test_a_threshold_above_the_similarity_names_nobody_and_says_how_close_it_came(handler, speech_like_wav, voices):
    first = sorted(voices["speaker_embeddings"])[0]
    flipped = [-x for x in voices["speaker_embeddings"][first]]  # the opposite voice
    r = call(handler, speech_like_wav, num_speakers=2, known_speaker_names=["Nobody"],
             known_speaker_references=[flipped], return_speaker_embeddings=True)
    entry = r["known_speakers"][0]
    assert entry["name"] == "Nobody" and entry["speaker"] is None
    assert entry["similarity"] < 0.5
    assert entry["embedding"] == pytest.approx(flipped, abs=1e-5)
    assert labels(r) == labels(voices)  # every speaker keeps its label


def test_reference_clips_are_embedded_once_per_clip(handler, speech_like_wav):
    clip = encode(tone(3.0, freq=300.0))
    cache = handler.models.diarizer.voices.cache
    before = (cache.hits, cache.misses)
    for _ in range(3):
        r = call(handler, speech_like_wav, known_speaker_names=["Tone"], known_speaker_references=[b64(clip)])
        assert r["known_speakers"][0]["name"] == "Tone"
    assert (cache.hits - before[0], cache.misses - before[1]) == (2, 1)
    # the same clip as a data URI is the same bytes: still cached
    call(handler, speech_like_wav, known_speaker_names=["Tone"],
         known_speaker_references=["data:audio/wav;base64," + b64(clip)])
    assert cache.misses - before[1] == 1


@pytest.mark.parametrize("clip, fragment", [
    (encode(np.zeros(16000 * 4, np.float32)), "silent"),
    (encode(1e-4 * tone(4.0)), "silent"),
    (encode(tone(1.0)), "1.0 s long"),
    (encode(tone(31.5)), "31.5 s long"),
    (b"this is not audio at all, just text" * 20, "could not be read as audio"),
])
def test_bad_reference_clips_are_refused_before_any_decoding(handler, speech_like_wav, clip, fragment):
    with pytest.raises(RequestError) as err:
        call(handler, speech_like_wav, known_speaker_names=["Alice", "Bob"],
             known_speaker_references=[b64(encode(tone(3.0))), b64(clip)])
    message = str(err.value)
    assert "known_speaker_references[1] (for 'Bob')" in message and fragment in message, message


def test_malformed_known_speaker_requests_say_what_is_wrong(handler, speech_like_wav):
    good = b64(encode(tone(3.0)))
    cases = [
        ({"known_speaker_names": ["Alice"]}, "needs known_speaker_references"),
        ({"known_speaker_names": ["Alice", "Bob"], "known_speaker_references": [good]}, "1 entries for 2"),
        ({"known_speaker_names": ["A"] * 2, "known_speaker_references": [good] * 2}, "twice"),
        ({"known_speaker_names": [f"P{i}" for i in range(9)], "known_speaker_references": [good] * 9},
         "at most 8"),
        ({"known_speaker_names": ["SPEAKER_00"], "known_speaker_references": [good]}, "unnamed speaker"),
        ({"known_speaker_names": ["A"], "known_speaker_references": ["not base64!"]}, "not valid base64"),
        ({"known_speaker_names": ["A"], "known_speaker_references": [[0.1, 0.2]]}, "of 2 numbers"),
        ({"known_speaker_names": ["A"], "known_speaker_references": [good], "speaker_names": ["B"]},
         "not both"),
        ({"speaker_match_threshold": 0.4}, "known speakers"),
        ({"known_speaker_names": ["A"], "known_speaker_references": [good], "speaker_match_threshold": 2},
         "speaker_match_threshold"),
    ]
    for parameters, fragment in cases:
        with pytest.raises(RequestError) as err:
            handler({"inputs": b64(speech_like_wav), "parameters": parameters})
        assert fragment in str(err.value), (parameters, str(err.value))


def test_known_speakers_on_silence_name_nobody(handler):
    r = call(handler, encode(np.zeros(16000 * 3, np.float32)), known_speaker_names=["Alice"],
             known_speaker_references=[b64(encode(tone(3.0)))], return_speaker_embeddings=True)
    assert r["text"] == "" and r["speakers"] == []
    assert r["known_speakers"][0]["speaker"] is None and r["speaker_embeddings"] == {}


def test_without_diarization_known_speakers_are_refused():
    from speaker_asr.config import InferenceConfig, ModelCapabilities

    caps = ModelCapabilities(has_diarization=False)
    for parameters in ({"return_speaker_embeddings": True},
                       {"known_speaker_names": ["A"], "known_speaker_references": ["QUJD"]}):
        with pytest.raises(RequestError, match="DIARIZATION_MODEL"):
            InferenceConfig.from_request(parameters, caps)


def test_a_failing_embedding_model_keeps_the_transcript_and_the_speakers(handler, speech_like_wav, monkeypatch):
    def broken(audio, turns):
        raise RuntimeError("embedding model crashed")

    monkeypatch.setattr(handler.models.diarizer.voices, "centroids", broken)
    r = call(handler, speech_like_wav, num_speakers=2, known_speaker_names=["Alice"],
             known_speaker_references=[b64(encode(tone(3.0)))], return_speaker_embeddings=True)
    assert r["speakers"] and all(s["speaker"].startswith("SPEAKER_") for s in r["speakers"])
    assert r["known_speakers"][0]["speaker"] is None and r["speaker_embeddings"] == {}
    assert any("could not be compared" in w for w in r["warnings"])
