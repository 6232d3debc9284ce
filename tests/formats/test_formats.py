"""Output writers (formats/): golden files, independent parsers, properties.

Golden files under tests/golden/ were written by hand from the cue rules in formats/_cues.py for the
fixed response tests/golden/response.json (2 speakers, words, punctuation, ``&`` and ``<``, a long
segment that must be split, a pause, a slow stretch over 7 s). Parsers: ``srt`` (SubRip),
``webvtt-py`` (WebVTT), pyannote's ``load_rttm``, ``json``.
"""

from __future__ import annotations

import copy
import html
import json
import subprocess
import sys

import pytest
import srt
import webvtt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from speaker_asr.formats import FORMATS, render
from speaker_asr.formats._common import width

from helpers import GOLDEN, ROOT
TEXT_FORMATS = {"srt": "srt", "vtt": "vtt", "rttm": "rttm", "txt": "txt"}
JSON_FORMATS = {"verbose_json": "verbose_json.json", "diarized_json": "diarized_json.json"}
NAMES = ["Alice", "Bob & Carol"]


def load_response() -> dict:
    return json.loads((GOLDEN / "response.json").read_text(encoding="utf-8"))


def without_words(response: dict) -> dict:
    response = copy.deepcopy(response)
    for chunk in response["chunks"]:
        chunk.pop("words", None)
    return response


def without_diarization(response: dict) -> dict:
    response = copy.deepcopy(response)
    response["speakers"] = []
    for chunk in response["chunks"]:
        chunk.pop("speaker", None)
        for word in chunk.get("words", []):
            word.pop("speaker", None)
    return response


def golden(name: str) -> str:
    return (GOLDEN / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- golden files


@pytest.mark.parametrize("fmt", sorted(TEXT_FORMATS))
def test_golden_text(fmt):
    assert render(load_response(), fmt) == {"format": fmt, "content": golden(f"response.{TEXT_FORMATS[fmt]}")}


@pytest.mark.parametrize("fmt", sorted(JSON_FORMATS))
def test_golden_json(fmt):
    out = render(load_response(), fmt)
    assert out == json.loads(golden(f"response.{JSON_FORMATS[fmt]}"))
    assert list(out) == list(json.loads(golden(f"response.{JSON_FORMATS[fmt]}")))  # key order too


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_golden_without_words(fmt):
    """No words: cues from the chunks' text, times interpolated by character position."""
    assert render(without_words(load_response()), fmt)["content"] == golden(f"response-nowords.{fmt}")


@pytest.mark.parametrize("fmt", ["srt", "vtt", "rttm", "txt"])
def test_golden_named(fmt):
    out = render(load_response(), fmt, speaker_names=NAMES)
    assert out["content"] == golden(f"response-named.{fmt}")


def test_json_is_the_response_and_input_is_never_changed():
    response = load_response()
    before = copy.deepcopy(response)
    for fmt in FORMATS:
        render(response, fmt, speaker_names=NAMES)
    assert response == before
    out = render(response, "json")
    assert out == before and out is not response


def test_json_speaker_names_everywhere():
    out = render(load_response(), "json", speaker_names=NAMES)
    assert [s["speaker"] for s in out["speakers"]] == ["Alice", "Bob & Carol", "Alice", "Bob & Carol"]
    assert [c["speaker"] for c in out["chunks"]] == ["Alice", "Bob & Carol", "Alice", "Bob & Carol"]
    assert {w["speaker"] for w in out["chunks"][0]["words"]} == {"Alice"}
    assert {w["speaker"] for w in out["chunks"][1]["words"]} == {"Bob & Carol"}
    verbose = render(load_response(), "verbose_json", speaker_names=NAMES)
    assert [s["speaker"] for s in verbose["segments"]] == ["Alice", "Bob & Carol", "Alice", "Bob & Carol"]
    assert verbose["words"][5] == {"word": "Hi!", "start": 2.4, "end": 2.7, "speaker": "Bob & Carol"}
    diarized = render(load_response(), "diarized_json", speaker_names=["Alice"])
    assert [s["speaker"] for s in diarized["segments"]] == ["Alice", "SPEAKER_01", "Alice", "SPEAKER_01"]


def test_speaker_names_follow_first_appearance_not_label():
    response = load_response()
    # swap the labels: SPEAKER_01 now speaks first
    swap = {"SPEAKER_00": "SPEAKER_01", "SPEAKER_01": "SPEAKER_00"}
    for item in response["speakers"] + response["chunks"] + [w for c in response["chunks"] for w in c["words"]]:
        item["speaker"] = swap[item["speaker"]]
    out = render(response, "txt", speaker_names=["First", "Second"])["content"].splitlines()
    assert out[0].startswith("First: Hello") and out[1].startswith("Second: Hi!")


# --------------------------------------------------------------------------- independent parsers


def test_srt_parses_and_round_trips():
    content = render(load_response(), "srt")["content"]
    subs = list(srt.parse(content))
    assert len(subs) == 7
    assert srt.compose(subs, reindex=False) == content  # canonical SubRip
    assert subs[0].content == "SPEAKER_00: Hello there, Tom & Jerry."
    assert subs[2].content == "SPEAKER_00: Well, let me tell you a\nrather long story about subtitles,"
    assert (subs[2].start.total_seconds(), subs[2].end.total_seconds()) == (4.5, 8.2)
    assert subs[6].content == "SPEAKER_01: I will read slowly."


def test_vtt_parses_voice_tags_survive_and_text_unescapes():
    captions = webvtt.from_string(render(load_response(), "vtt")["content"]).captions
    assert [c.voice for c in captions] == ["SPEAKER_00", "SPEAKER_01"] + ["SPEAKER_00"] * 3 + ["SPEAKER_01"] * 2
    assert html.unescape(captions[0].text) == "Hello there, Tom & Jerry."
    assert html.unescape(captions[1].text) == "Hi! Is 3 < 4?"
    assert captions[2].text == "Well, let me tell you a rather\nlong story about subtitles,"
    assert (captions[3].start, captions[3].end) == ("00:00:08.400", "00:00:11.400")
    named = webvtt.from_string(render(load_response(), "vtt", speaker_names=NAMES)["content"]).captions
    assert [html.unescape(c.voice) for c in named][:2] == ["Alice", "Bob & Carol"]


def test_rttm_loads_with_pyannote(tmp_path):
    from pyannote.database.util import load_rttm

    path = tmp_path / "out.rttm"
    path.write_text(render(load_response(), "rttm")["content"], encoding="utf-8")
    annotation = load_rttm(str(path))["audio"]
    turns = [(round(s.start, 3), round(s.end, 3), label) for s, _, label in annotation.itertracks(yield_label=True)]
    assert turns == [(0.0, 2.0, "SPEAKER_00"), (2.4, 4.0, "SPEAKER_01"), (4.5, 15.0, "SPEAKER_00"),
                     (16.0, 24.5, "SPEAKER_01")]
    assert sorted(annotation.labels()) == ["SPEAKER_00", "SPEAKER_01"]


@pytest.mark.parametrize("fmt", ["json", "verbose_json", "diarized_json"])
def test_json_formats_survive_json(fmt):
    out = render(load_response(), fmt)
    assert json.loads(json.dumps(out, allow_nan=False)) == out


# --------------------------------------------------------------------------- no diarization, edge cases


def test_without_diarization():
    response = without_diarization(load_response())
    srt_text = render(response, "srt")["content"]
    assert "SPEAKER" not in srt_text
    # one speaker throughout: cues run across chunks, still split at pauses and by length and time
    assert srt_text.startswith("1\n00:00:00,000 --> 00:00:04,000\nHello there, Tom & Jerry. Hi! Is 3 < 4?\n\n")
    vtt_text = render(response, "vtt")["content"]
    assert "<v" not in vtt_text
    assert all(c.voice is None for c in webvtt.from_string(vtt_text).captions)
    assert render(response, "rttm")["content"] == ""
    assert render(response, "txt")["content"] == response["text"].strip() + "\n"
    verbose = render(response, "verbose_json", task="translate", temperature=[0.2, 0.4])
    assert (verbose["task"], verbose["language"]) == ("translate", "english")
    assert len(verbose["segments"]) == 4 and all(s["speaker"] is None for s in verbose["segments"])
    assert {s["temperature"] for s in verbose["segments"]} == {0.2}  # the first of the list
    assert verbose["words"][0] == {"word": "Hello", "start": 0.0, "end": 0.4, "speaker": None}
    assert "words" not in render(without_words(response), "verbose_json")
    diarized = render(response, "diarized_json")
    assert [s["text"] for s in diarized["segments"]][1] == "Hi! Is 3 < 4?"
    assert render(response, "json", speaker_names=NAMES) == response  # nothing to name


def test_empty_response():
    response = {"text": "", "chunks": [], "speakers": [], "language": "en", "duration": 0.0}
    assert render(response, "srt")["content"] == ""
    assert render(response, "vtt")["content"] == "WEBVTT\n"
    assert render(response, "rttm")["content"] == "" and render(response, "txt")["content"] == ""
    assert render(response, "verbose_json")["segments"] == []
    assert render(response, "diarized_json")["segments"] == []


def test_null_speaker_chunks():
    """Diarization on but no turns found: speaker null everywhere."""
    response = {"text": " Hello. Bye.",
                "chunks": [{"text": " Hello.", "timestamp": [0.0, 1.0], "speaker": None},
                           {"text": " Bye.", "timestamp": [1.0, 2.0], "speaker": None}],
                "speakers": [{"speaker": None, "text": "Hello. Bye.", "timestamp": [0.0, 2.0]}],
                "language": "en", "duration": 2.0}
    assert render(response, "txt")["content"] == "Hello. Bye.\n"
    assert render(response, "rttm")["content"] == ""
    assert render(response, "srt")["content"] == "1\n00:00:00,000 --> 00:00:02,000\nHello. Bye.\n\n"
    assert render(response, "vtt")["content"] == "WEBVTT\n\n00:00:00.000 --> 00:00:02.000\nHello. Bye.\n"
    assert render(response, "verbose_json", speaker_names=["A"])["segments"][0]["speaker"] is None


def test_overlapping_and_zero_length_chunks_give_valid_cues():
    response = {"text": " a b c d",
                "chunks": [{"text": " a", "timestamp": [1.0, 3.0], "speaker": "SPEAKER_00"},
                           {"text": " b", "timestamp": [2.0, 2.0], "speaker": "SPEAKER_01"},
                           {"text": " c", "timestamp": [2.0, 2.0], "speaker": "SPEAKER_00"},
                           {"text": " d", "timestamp": [1.5, 4.0], "speaker": "SPEAKER_01"}],
                "speakers": [], "language": "en", "duration": 4.0}
    subs = list(srt.parse(render(response, "srt")["content"]))
    assert [s.content for s in subs] == ["SPEAKER_00: a", "SPEAKER_01: b", "SPEAKER_00: c", "SPEAKER_01: d"]
    assert_cues_valid([(s.start.total_seconds(), s.end.total_seconds()) for s in subs])


def test_long_word_and_wide_characters_are_split():
    word = "x" * 100
    cjk = "漢字" * 40  # 80 characters, 160 columns
    response = {"text": f" {word} {cjk}",
                "chunks": [{"text": f" {word}", "timestamp": [0.0, 2.0]},
                           {"text": f" {cjk}", "timestamp": [2.0, 6.0]}],
                "speakers": [], "language": "en", "duration": 6.0}
    captions = webvtt.from_string(render(response, "vtt")["content"]).captions
    lines = [line for c in captions for line in c.text.split("\n")]
    assert all(width(line) <= 42 for line in lines) and all(len(c.text.split("\n")) <= 2 for c in captions)
    assert "".join(lines) == word + cjk


def test_control_characters_and_newlines_never_break_cues():
    response = {"text": " one\ntwo\x00 three", "chunks": [{"text": " one\n\ntwo\x00 three", "timestamp": [0.0, 1.0],
                                                           "speaker": "SPEAKER_00"}],
                "speakers": [{"speaker": "SPEAKER_00", "text": "one\n\ntwo\x00 three", "timestamp": [0.0, 1.0]}],
                "language": "en", "duration": 1.0}
    assert render(response, "srt")["content"] == "1\n00:00:00,000 --> 00:00:01,000\nSPEAKER_00: one two three\n\n"
    assert render(response, "txt")["content"] == "SPEAKER_00: one two three\n"


def test_line_break_prefers_sentence_end_over_comma():
    text = " Hello there. Hi, how are you? I am fine & you?"
    response = {"text": text, "chunks": [{"text": text, "timestamp": [0.0, 6.0]}], "speakers": [],
                "language": "en", "duration": 6.0}
    assert render(response, "vtt")["content"] == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:06.000\nHello there. Hi, how are you?\nI am fine &amp; you?\n")


def test_long_segment_without_words_is_split_by_length():
    text = " " + " ".join(f"word{i}" for i in range(60))
    response = {"text": text, "chunks": [{"text": text, "timestamp": [0.0, 30.0], "speaker": "SPEAKER_00"}],
                "speakers": [{"speaker": "SPEAKER_00", "text": text.strip(), "timestamp": [0.0, 30.0]}],
                "language": "en", "duration": 30.0}
    subs = list(srt.parse(render(response, "srt")["content"]))
    assert len(subs) > 3
    assert all((s.end - s.start).total_seconds() <= 7.0 for s in subs)
    assert all(len(line) <= 42 for s in subs for line in s.content.split("\n"))
    assert " ".join(s.content.removeprefix("SPEAKER_00: ").replace("\n", " ") for s in subs) == text.strip()


def test_speaker_entries_are_derived_from_the_chunks_words_keep_their_speakers():
    """Speaker entries that do not follow the chunks (e.g. split per word, by another tool) are
    not read: the turns come from the chunks, and each word keeps its own speaker."""
    words = [{"word": " a", "start": 0.0, "end": 0.5, "speaker": "SPEAKER_00"},
             {"word": " b", "start": 0.5, "end": 1.0, "speaker": "SPEAKER_01"}]
    response = {"text": " a b", "chunks": [{"text": " a b", "timestamp": [0.0, 1.0], "speaker": "SPEAKER_00",
                                            "words": words}],
                "speakers": [{"speaker": "SPEAKER_00", "text": "a", "timestamp": [0.0, 0.5]},
                             {"speaker": "SPEAKER_01", "text": "b", "timestamp": [0.5, 1.0]}],
                "language": "en", "duration": 1.0}
    verbose = render(response, "verbose_json")
    assert [(s["text"], s["speaker"]) for s in verbose["segments"]] == [(" a b", "SPEAKER_00")]
    assert [(w["word"], w["speaker"]) for w in verbose["words"]] == [("a", "SPEAKER_00"), ("b", "SPEAKER_01")]
    assert render(response, "rttm")["content"] == "SPEAKER audio 1 0.000 1.000 <NA> <NA> SPEAKER_00 <NA> <NA>\n"
    assert render(response, "vtt")["content"] == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:00.500\n<v SPEAKER_00>a\n\n"
        "00:00:00.500 --> 00:00:01.000\n<v SPEAKER_01>b\n")


# --------------------------------------------------------------------------- validation


def test_unknown_format_names_the_allowed_ones():
    with pytest.raises(ValueError) as err:
        render(load_response(), "docx")
    for name in FORMATS:
        assert name in str(err.value)
    assert render(load_response(), " SRT ")["format"] == "srt"


@pytest.mark.parametrize("names, message", [
    ("Alice", "list of strings"),
    (["Alice", ""], r"speaker_names\[1\] must be a non-empty string"),
    (["Alice", "  "], r"speaker_names\[1\] must be a non-empty string"),
    (["Alice", 3], r"speaker_names\[1\] must be a non-empty string"),
    (["Alice", "Alice"], "twice"),
    (["Alice", " Alice "], "twice"),
    ([f"n{i}" for i in range(33)], "at most 32"),
    (["Al\nice"], "line breaks"),
    (["SPEAKER_01"], "also the label of a speaker"),
])
def test_bad_speaker_names(names, message):
    with pytest.raises(ValueError, match=message):
        render(load_response(), "json", speaker_names=names)


def test_speaker_names_edge_cases():
    assert render(load_response(), "txt", speaker_names=[])["content"] == golden("response.txt")
    many = render(load_response(), "txt", speaker_names=[f"n{i}" for i in range(32)])["content"]
    assert many.startswith("n0: Hello") and "\nn1: Hi!" in many
    assert render(load_response(), "txt", speaker_names=[" Alice "])["content"].startswith("Alice: ")


def test_bad_task_and_response():
    with pytest.raises(ValueError, match="transcribe, translate"):
        render(load_response(), "json", task="summarize")
    with pytest.raises(ValueError, match="must be a dict"):
        render([], "json")


def test_formats_import_no_torch():
    code = "import sys, speaker_asr.formats; bad = {'torch', 'numpy', 'pyannote'} & {m.split('.')[0] for m in sys.modules}; " \
           "assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# --------------------------------------------------------------------------- properties

SPEAKERS = ["SPEAKER_00", "SPEAKER_01", "SPEAKER_02"]
word_body = st.text(st.characters(categories=("L", "N", "P", "S", "M"), include_characters="&<>"),
                    min_size=1, max_size=12)
long_body = st.text(st.sampled_from("ab漢"), min_size=30, max_size=90)


@st.composite
def responses(draw):
    """Responses of the handler's shape: with or without diarization and words, null speakers,
    words whose speaker differs from their chunk's, zero-length and long words, pauses; with
    ``messy`` times, unordered and overlapping too."""
    diarized, with_words, messy = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    times = st.floats(0, 40, allow_nan=False).map(lambda x: round(x, 3))
    clock, chunks = 0.0, []
    for _ in range(draw(st.integers(0, 6))):
        speaker = draw(st.sampled_from(SPEAKERS + [None])) if diarized else None
        start, words = clock, []
        for _ in range(draw(st.integers(0, 10))):
            body = draw(st.one_of(word_body, word_body, word_body, long_body))
            text = draw(st.sampled_from([" ", " ", ""])) + body
            if messy:
                w0, w1 = draw(times), draw(times)
            else:
                clock += draw(st.sampled_from([0.0, 0.1, 0.3, 2.0]))
                w0, w1 = round(clock, 3), round(clock + draw(st.sampled_from([0.0, 0.2, 0.5, 3.0])), 3)
                clock = w1
            word = {"word": text, "start": w0, "end": w1}
            if diarized:
                word["speaker"] = draw(st.sampled_from(SPEAKERS + [None])) if draw(st.booleans()) else speaker
            words.append(word)
        chunk = {"text": "".join(w["word"] for w in words) or draw(st.sampled_from(["", " "])),
                 "timestamp": [draw(times), draw(times)] if messy else [round(start, 3), round(clock, 3)]}
        if diarized:
            chunk["speaker"] = speaker
        if with_words:
            chunk["words"] = words
        chunks.append(chunk)
    speakers = []
    if diarized:
        for chunk in chunks:
            if speakers and speakers[-1]["speaker"] == chunk["speaker"]:
                speakers[-1]["text"] += chunk["text"]
                speakers[-1]["timestamp"][1] = max(speakers[-1]["timestamp"][1], chunk["timestamp"][1])
            else:
                speakers.append({"speaker": chunk["speaker"], "text": chunk["text"],
                                 "timestamp": list(chunk["timestamp"])})
        for entry in speakers:
            entry["text"] = entry["text"].strip()
    return {"text": "".join(c["text"] for c in chunks), "chunks": chunks, "speakers": speakers,
            "language": "en", "duration": round(clock, 3)}


def assert_cues_valid(spans):
    for start, end in spans:
        assert start < end
    for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
        assert s0 < s1 and e0 <= s1


def in_order(needles: list[str], haystack: str) -> bool:
    """Every needle found in the haystack, each after the previous one (whitespace ignored)."""
    hay, at = "".join(haystack.split()), 0
    for needle in needles:
        found = hay.find("".join(needle.split()), at)
        if found < 0:
            return False
        at = found + len("".join(needle.split()))
    return True


def expected_words(response) -> list[str]:
    out = []
    for chunk in response["chunks"]:
        pieces = [w["word"] for w in chunk["words"]] if chunk.get("words") else [chunk["text"]]
        out += [p for piece in pieces for p in piece.split()]
    return out


def strip_prefix(text: str) -> str:
    for name in SPEAKERS:
        if text.startswith(name + ": "):
            return text[len(name) + 2:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(responses())
def test_property_every_format_renders_with_valid_ordered_cues(response):
    before = copy.deepcopy(response)
    outputs = {fmt: render(response, fmt) for fmt in FORMATS}
    assert response == before
    for fmt, out in outputs.items():
        json.dumps(out, allow_nan=False)
        if fmt in TEXT_FORMATS:
            assert set(out) == {"format", "content"} and out["format"] == fmt
    words = expected_words(response)

    subs = list(srt.parse(outputs["srt"]["content"]))
    assert_cues_valid([(s.start.total_seconds(), s.end.total_seconds()) for s in subs])
    assert all(s.content.strip() and len(s.content.split("\n")) <= 2 for s in subs)
    assert all(width(line) <= 42 for s in subs for line in s.content.split("\n"))
    assert in_order(words, "".join(strip_prefix(s.content) for s in subs))

    captions = webvtt.from_string(outputs["vtt"]["content"]).captions
    assert_cues_valid([(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in captions])
    assert all(c.voice in SPEAKERS + [None] for c in captions)
    texts = [html.unescape(c.text) for c in captions]
    assert all(t.strip() and len(t.split("\n")) <= 2 for t in texts)
    assert all(width(line) <= 42 for t in texts for line in t.split("\n"))
    assert in_order(words, "".join(texts))

    assert in_order(words, outputs["txt"]["content"])

    verbose = outputs["verbose_json"]
    assert [s["text"] for s in verbose["segments"]] == [c["text"] for c in response["chunks"]]
    if any("words" in c for c in response["chunks"]):
        assert [w["word"] for w in verbose["words"]] == \
            [w["word"].strip() for c in response["chunks"] for w in c["words"] if w["word"].strip()]
    else:
        assert "words" not in verbose
    turns = [s for s in response["speakers"] if s["text"].strip()] if response["speakers"] else \
        [c for c in response["chunks"] if c["text"].strip()]
    assert [s["id"] for s in outputs["diarized_json"]["segments"]] == [f"seg_{i}" for i in range(len(turns))]
    assert [s["text"] for s in outputs["diarized_json"]["segments"]] == [t["text"].strip() for t in turns]


@settings(max_examples=100, deadline=None)
@given(responses(), st.lists(st.text(st.characters(categories=("L", "N", "Zs", "P")), min_size=1, max_size=20)
                             .filter(str.strip), max_size=4, unique_by=str.strip))
def test_property_speaker_names_and_rttm(response, names):
    try:
        named = render(response, "json", speaker_names=names)
    except ValueError as err:  # only a name clashing with a kept label may fail
        assert "also the label" in str(err)
        return
    labels = {c.get("speaker") for c in named["chunks"]} - {None}
    assert len(labels) == len({c.get("speaker") for c in response["chunks"]} - {None})
    content = render(response, "rttm", speaker_names=names)["content"]
    # parsed by the NIST field layout (10 space-separated fields, the 8th is the speaker), not with
    # pyannote's pandas-based loader: pandas reads names such as "None" or "NA" as missing values
    rows = [line.split(" ") for line in content.splitlines()]
    assert all(len(row) == 10 and row[0] == "SPEAKER" and all(row) for row in rows)
    assert {row[7] for row in rows} <= {"_".join(n.split()) for n in names} | set(SPEAKERS)
    expected = [s for s in named["speakers"] if s["speaker"] is not None
                and round(s["timestamp"][1] * 1000) > round(s["timestamp"][0] * 1000)]
    assert len(rows) == len(expected)
