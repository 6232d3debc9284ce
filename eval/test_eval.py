"""Checks of the evaluation's scoring and baseline code (pure Python, no models, < 1 s), and a
smoke run of ``--part long`` on the tiny stand-in kit (random models, about 30 s; marker
``heavy``, which pytest.ini's default selection leaves to ``make test-scripts``):

    .venv/bin/python -m pytest eval/test_eval.py -q              # the checks
    .venv/bin/python -m pytest eval/test_eval.py -q -m heavy     # the smoke run
"""

import shutil

import numpy as np
import pytest

from speaker_asr.attribution.speakers import exclusive_turns
from speaker_asr.types import Turn
from algorithms import Diar, hf_original, max_overlap, runners  # noqa: E402
from speaker_asr.testing.scoring import (HypToken, RefToken, cpwer_counts, normalize_text, normalize_word,  # noqa: E402
                     wder_counts, wer_counts)


def ref_tokens(spec):
    out = []
    for u, (spk, text) in enumerate(spec):
        toks = normalize_text(text)
        out += [RefToken(t, spk, u, "middle") for t in toks]
    return out


def hyp_tokens(spec, dropped=()):
    return [HypToken(t, spk, dropped=t in dropped) for spk, text in spec for t in normalize_text(text)]


def test_normalize():
    assert normalize_word(" Mr.") == ["mister"]
    assert normalize_word("-disposed.") == ["disposed"]
    assert normalize_text("He was not an ill-disposed young man.") == \
        "he was not an ill disposed young man".split()
    assert normalize_word("didn\u2019t") == ["didn't"]
    assert normalize_word(" -") == []
    assert normalize_word("OK,") == ["okay"]


def test_wder_is_label_invariant_and_counts_wrong_words():
    ref = ref_tokens([("A", "hello there"), ("B", "hi how are you")])
    assert wder_counts(ref, hyp_tokens([("x", "hello there"), ("y", "hi how are you")])).errors == 0
    sp = wder_counts(ref, hyp_tokens([("x", "hello there hi"), ("y", "how are you")]))
    assert (sp.errors, sp.scored) == (1, 6)
    assert sp.mapping == {"x": "A", "y": "B"}
    # substituted words count, inserted/deleted ones do not
    sp = wder_counts(ref, hyp_tokens([("x", "hello where"), ("y", "hi how you")]))
    assert (sp.errors, sp.scored) == (0, 5)


def test_dropped_words_are_speaker_errors_and_deletions():
    ref = ref_tokens([("A", "one two"), ("B", "three four")])
    hyp = hyp_tokens([("x", "one two"), ("y", "three four")], dropped={"four"})
    sp = wder_counts(ref, hyp)
    assert (sp.errors, sp.scored) == (1, 4)
    assert wer_counts([r.text for r in ref], [h.text for h in hyp if not h.dropped]).errors == 1
    assert cpwer_counts(ref, hyp).errors == 1


def test_cpwer_equals_wer_when_speakers_are_right():
    ref = ref_tokens([("A", "a b c"), ("B", "d e"), ("A", "f")])
    hyp = hyp_tokens([("s1", "a b c"), ("s2", "d x"), ("s1", "f")])
    assert cpwer_counts(ref, hyp).errors == 1
    # one word moved to the other speaker costs a deletion and an insertion
    hyp = hyp_tokens([("s1", "a b"), ("s2", "c d e"), ("s1", "f")])
    assert cpwer_counts(ref, hyp).errors == 2


def _diar(turns):
    return Diar(turns, exclusive_turns(turns), heard=False)


def test_hf_original_reproduces_nearest_end_rule_and_drops_the_tail():
    turns = [Turn(0.0, 2.0, "A"), Turn(2.1, 3.0, "A"), Turn(3.2, 5.0, "B")]
    chunks = [(" one two", 0.0, 1.5), (" three", 1.5, 3.1), (" four", 3.2, 4.9), (" five", 5.5, 7.0)]
    toks = hf_original(chunks, None, _diar(turns), 7.0)
    # merged A turn ends where B starts (3.2): nearest chunk end 3.1 -> chunks 0-1 to A;
    # B's turn (end 5.0): nearest remaining end 4.9 -> chunk 2 to B; chunk 3 is dropped
    assert [(t.text, t.speaker, t.dropped) for t in toks] == [
        ("one", "A", False), ("two", "A", False), ("three", "A", False), ("four", "B", False),
        ("five", None, True)]


def test_word_level_runners_keep_every_word():
    turns = [Turn(0.0, 1.0, "A"), Turn(1.0, 2.0, "B")]
    words = [(" Hi", 0.1, 0.4), (" there.", 0.4, 0.9), (" Yes.", 1.1, 1.5), (" extra", None, None)]
    chunks = [(" Hi there.", 0.0, 1.0), (" Yes. extra", 1.0, None)]
    for name, run in runners(ablate=True).items():
        toks = run(chunks, words, _diar(turns), 2.0)
        assert [t.text for t in toks] == ["hi", "there", "yes", "extra"], name
    toks = runners()["ours"](chunks, words, _diar(turns), 2.0)
    assert [t.speaker for t in toks] == ["A", "A", "B", "B"]


def test_the_anchor_is_max_overlap_else_the_nearest_turn():
    """WhisperX's assign_word_speakers(fill_nearest=True), as it is meant."""
    from speaker_asr.types import Word

    turns = [Turn(0.0, 1.0, "A"), Turn(0.8, 3.0, "B"), Turn(5.0, 6.0, "A")]
    words = [Word("a", 0.1, 0.5), Word("b", 0.6, 1.4), Word("c", 3.2, 3.5), Word("d", 4.5, 4.8),
             Word("e", 5.5, 5.5)]
    assert [w.speaker for w in max_overlap(words, turns)] == ["A", "B", "B", "A", "A"]
    assert [w.speaker for w in max_overlap(words, [])] == [None] * 5


def test_oracle4_exclusive_turns_follow_who_the_pipeline_heard():
    from evaluate import exclusive_as_heard

    reference = [(0.0, 10.0, "A"), (4.0, 6.0, "B")]
    # the pipeline (its own labels) heard B loudest in the overlap: B keeps it
    heard_turns = [(0.0, 10.0, "x"), (4.0, 6.0, "y")]
    heard = [(0.0, 4.0, "x"), (4.0, 6.0, "y"), (6.0, 10.0, "x")]
    assert [(t.start, t.end, t.speaker) for t in exclusive_as_heard(reference, heard, heard_turns)] == [
        (0.0, 4.0, "A"), (4.0, 6.0, "B"), (6.0, 10.0, "A")]
    # it heard A loudest there: A keeps the whole stretch
    heard = [(0.0, 10.0, "x")]
    assert [(t.start, t.end, t.speaker) for t in exclusive_as_heard(reference, heard, heard_turns)] == [
        (0.0, 10.0, "A")]


def test_generated_parts_are_disjoint_and_reproducible():
    """The tuning and held-out dialogues share no seed and no script sentence, and a part is the
    same every time it is generated (so the split is fixed once)."""
    import numpy as np

    from generate import SENTENCES, generated_specs, phone_quality

    tuning, heldout = generated_specs("tuning", 12), generated_specs("heldout", 12)
    assert generated_specs("tuning", 12) == tuning
    assert not {s["seed"] for s in tuning} & {s["seed"] for s in heldout}
    said = {part: {text for s in specs for _, text in s["script"] if text in SENTENCES}
            for part, specs in (("tuning", tuning), ("heldout", heldout))}
    assert said["tuning"] and said["heldout"] and not said["tuning"] & said["heldout"]
    counts = {len(s["speakers"]) for s in tuning + heldout}
    assert min(counts) == 2 and max(counts) >= 4
    assert any(s["phone"] for s in tuning) and any(s["inside_backchannel_prob"] for s in tuning)
    tone = (0.3 * np.sin(2 * np.pi * 300 * np.arange(16000) / 16000)).astype(np.float32)
    phone = phone_quality(tone)
    assert len(phone) == len(tone) and abs(float(np.std(phone)) - float(np.std(tone))) < 0.03


def test_der_and_jer_score_diarization_on_hand_made_turns():
    from evaluate import der

    ref = [(0.0, 2.0, "A"), (2.0, 4.0, "B")]
    assert der(ref, [(0.0, 2.0, "x"), (2.0, 4.0, "y")]) == 0.0  # labels are mapped
    assert der(ref, [(0.0, 2.0, "x"), (2.0, 4.0, "y")], "jer") == 0.0
    # one speaker for everything: half the speech on the wrong speaker
    assert abs(der(ref, [(0.0, 4.0, "x")]) - 0.5) < 1e-9
    assert der(ref, [(0.0, 4.0, "x")], "jer") > 0.4


def test_returning_speakers_kept_means_one_label_in_every_appearance():
    """An appearance's label is the hypothesis label covering most of the speaker's speech in
    that block where nobody else talks; kept = the same label in every appearance; theirs = the
    mapping gives that label to them; the gap runs from the end of their speech in one appearance
    to its start in the next."""
    from data import EvalFile
    from longform import Block, returning_speakers

    blocks = [Block(0, "u1", "return", 0.0, 60.0, 0.0), Block(1, "f", "filler", 61.0, 1300.0, 0.0),
              Block(2, "u2", "return", 1301.0, 1400.0, 0.0)]
    turns = [(1.0, 20.0, "A"), (5.0, 25.0, "B"), (70.0, 1290.0, "C"), (1310.0, 1330.0, "A"),
             (1340.0, 1350.0, "B")]
    f = EvalFile("x", "x.wav", 1400.0, 3, [], turns)
    # A: x in both (in block 0 the overlap with B, labelled y, is not A's clear speech); B: y, then x
    hyp = [(1.0, 5.0, "x"), (5.0, 25.0, "y"), (70.0, 1290.0, "z"), (1310.0, 1330.0, "x"),
           (1340.0, 1350.0, "x")]
    rows = {r["speaker"]: r for r in returning_speakers(f, blocks, hyp, {"x": "A", "y": "B", "z": "C"})}
    assert set(rows) == {"A", "B"}  # C has one appearance
    a, b = rows["A"], rows["B"]
    assert [x["label"] for x in a["appearances"]] == ["x", "x"] and a["kept"] and a["theirs"]
    assert a["appearances"][0]["share"] == 1.0 and a["appearances"][0]["speech_s"] == 19.0
    assert abs(a["longest_gap_min"] - (1310.0 - 20.0) / 60) < 1e-9
    assert a["returns_with"] == "other utterances" and a["role"] == "return"
    assert [x["label"] for x in b["appearances"]] == ["y", "x"] and not b["kept"] and not b["theirs"]
    assert [x["mapped"] for x in b["appearances"]] == ["B", "A"]


def stand_in_kit(tmp_path):
    """The tiny stand-in for the real-models kit (speaker_asr/testing/kit.py): random tiny.en,
    the CAM++ pipeline folder's layout, the sample; its folder."""
    from speaker_asr.testing.kit import MAX_LENGTH, folder_module_pipeline, write_sample
    from speaker_asr.testing.tiny_models import build_whisper

    kit = tmp_path / "kit"
    build_whisper(kit / "whisper-tiny.en", multilingual=False, seed=3, max_length=MAX_LENGTH)
    folder_module_pipeline(kit / "pyannote-campp-3.1")
    (kit / "audio").mkdir()
    write_sample(kit / "audio")
    return kit


def script_env(root) -> dict:
    """The environment an eval script runs in here: the repository importable, offline, one thread."""
    import os

    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH")))),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYANNOTE_METRICS_ENABLED="false",
                TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


@pytest.mark.heavy  # make test-scripts: 16 s on a quiet machine, 80-90 s on a busy one
def test_long_part_smoke(tmp_path):
    """``evaluate.py --part long`` on the tiny stand-in kit at 1 minute: both recordings built
    (the meeting clips the recipe names made from the kit's stand-in clip, speakers shared within
    an AMI series as EN2001a/e share theirs), ASR, diarization, scoring, and the tables with the
    returning speakers and their kept column. Random models: the numbers mean nothing."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from longform import UNITS
    from speaker_asr.testing.kit import write_librivox, write_meeting

    root = Path(__file__).resolve().parent.parent
    kit = stand_in_kit(tmp_path)
    write_librivox(kit / "audio" / "librivox")
    standin = tmp_path / "standin"
    write_meeting(standin, kit / "audio")
    for meeting in sorted({u["meeting"] for u in UNITS.values() if "meeting" in u}):
        clip = tmp_path / "meetings" / meeting
        clip.mkdir(parents=True)
        (clip / "audio.wav").write_bytes((standin / "audio.wav").read_bytes())
        series = lambda name: f"{meeting[:6]}-{name}"  # noqa: E731
        words = json.loads((standin / "ref.words.json").read_text())
        (clip / "ref.words.json").write_text(json.dumps([dict(w, speaker=series(w["speaker"])) for w in words]))
        rttm = [line.split() for line in (standin / "ref.rttm").read_text().splitlines()]
        (clip / "ref.rttm").write_text("".join(" ".join(f[:7] + [series(f[7])] + f[8:]) + "\n" for f in rttm))
        (clip / "info.json").write_text(json.dumps({"ami": {"meeting": meeting}}))
    env = script_env(root)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "eval/evaluate.py", "--part", "long", "--max-minutes", "1",
                           "--models-dir", str(kit), "--meetings-dir", str(tmp_path / "meetings"),
                           "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--threads", "1"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = proc.stdout

    def table(header: str) -> list[list[str]]:
        lines = text.splitlines()
        assert header in lines, text[-3000:]
        rows = []
        for line in lines[lines.index(header) + 2:]:
            if not line.startswith("|"):
                break
            rows.append([c.strip() for c in line.strip("|").split("|")])
        return rows

    summary = table("| recording | min | blocks (filler) | speakers true / found | DER | JER | model | WER "
                    "| WDER ours | WDER anchor | WDER ours, reference turns | return blocks: DER "
                    "| return blocks: WDER ours | return speakers kept "
                    "| kept, >= 2 s each | kept in words | filler speakers kept |")
    assert [(r[0], r[6]) for r in summary] == [("long32", "tiny.en"), ("long45", "tiny.en"), ("joined8", "tiny.en")]
    assert all(float(r[1]) <= 1.5 for r in summary), summary
    header = ("| recording | model | speaker | returns with | appearances: start min (block, speech) "
              "| longest gap min | label per appearance (share, mapped to) | kept | theirs "
              "| words: label per appearance | kept in words |")
    returning = table(header)
    speakers = {(r[0], r[2]) for r in returning}
    assert {("long32", "EN2001-Diane"), ("long32", "Diane"), ("long45", "EN2006-Diane"),
            ("long45", "LibriVox-reader")} <= speakers, speakers
    assert all(r[3] == "other utterances" and r[7] in ("**yes**", "no") for r in returning), returning
    assert all("EN2001a" in r[4] and "EN2001e" in r[4] for r in returning if r[2].startswith("EN2001")), returning
    result = json.loads((out / "latest.json").read_text())
    assert {r["file"] for r in result["long"]["recordings"]} == {"long32", "long45", "joined8"}
    assert (out / "latest.md").read_text().startswith("# Speaker-attribution evaluation")
    built = next((tmp_path / "cache" / "data").glob("long-*"))
    assert (built / "long32.rttm").read_text().startswith("SPEAKER long32 1 ")
    assert json.loads((built / "long45.words.json").read_text())[0]["speaker"].startswith("EN2006-")


@pytest.mark.heavy  # make test-scripts
def test_choose_voice_rule_smoke(tmp_path):
    """eval/choose_voice_rule.py --quick on the tiny stand-in kit: two stand-in meeting clips and
    their harder variants, both turn kinds; every clip gets a held-out choice and the tables come
    out. Random models: the numbers mean nothing."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from speaker_asr.testing.kit import write_meeting

    root = Path(__file__).resolve().parent.parent
    kit = stand_in_kit(tmp_path)
    for name in ("ami_EN0001a", "ami_EN0002a"):
        write_meeting(tmp_path / "meetings" / name, kit / "audio")
        info = tmp_path / "meetings" / name / "info.json"
        info.write_text(json.dumps({"ami": {"meeting": name[4:]}}))
    env = script_env(root)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "eval/choose_voice_rule.py", "--quick", "--parts", "meetings,meetings-hard",
                           "--models", "tiny.en", "--models-dir", str(kit), "--meetings-dir", str(tmp_path / "meetings"),
                           "--cache-dir", str(tmp_path / "cache"), "--out", str(out)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "## Held out: each clip scored with the rule chosen on the others" in proc.stdout
    result = json.loads((out / "voice-rule.json").read_text())
    assert set(result["result"]["held"]) == {"EN0001a", "EN0002a"}
    parts = {r["part"] for r in result["rows"]}
    assert parts == {"meetings", "meetings-hard"}
    files = {r["file"] for r in result["rows"] if r["part"] == "meetings-hard"}
    assert files == {f"{m}-{k}" for m in ("EN0001a", "EN0002a") for k in ("far", "noisy", "levels", "crosstalk")}


@pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")),
                    reason="the generated parts' voices need espeak-ng and sox (make install brings them as root)")
def test_generated_voices_are_16k_mono_speech():
    """The generated dialogues' two kinds of voice (eval/data.py): espeak-ng's speech and a
    pitch-shifted copy, each 16 kHz mono float32 of about the same length."""
    from data import SAMPLE_RATE, espeak, pitch_shift

    speech = espeak("hello there, how are you", "en-us+f3", 165)
    assert speech.dtype == np.float32 and speech.ndim == 1
    assert 0.5 * SAMPLE_RATE < len(speech) < 5 * SAMPLE_RATE
    assert np.abs(speech).max() > 0.05
    shifted = pitch_shift(speech, -350)
    assert shifted.ndim == 1 and abs(len(shifted) - len(speech)) < 0.05 * SAMPLE_RATE


@pytest.mark.skipif(not (shutil.which("espeak-ng") and shutil.which("sox")),
                    reason="the generated parts' voices need espeak-ng and sox (make install brings them as root)")
def test_a_generated_dialogue_gives_each_speakers_own_voice(tmp_path):
    """build_dialogue's ``tracks`` (eval/multichannel.py's channels): one per speaker, each its
    own turns and backchannels only, and together the mix before its room noise."""
    from data import NOISE_RMS, build_dialogue, read_wav

    spec = {"id": "tracks", "seed": 7, "description": "two voices overlapping",
            "speakers": {"A": ("tts", "en-us+m1", 170), "B": ("tts", "en-gb+f3", 160)},
            "script": [("A", "Can we move the meeting to Thursday?"), ("B", "That works for me."),
                       ("A", "Then let's wait for her.")],
            "gap": (0.0, 0.2), "overlap_prob": 1.0, "inside_backchannel_prob": 0.0}
    tracks: dict = {}
    f = build_dialogue(spec, {}, tmp_path, tracks)
    mix = read_wav(f.audio)
    assert sorted(tracks) == ["A", "B"] and all(len(t) == len(mix) for t in tracks.values())
    noise = np.random.default_rng(spec["seed"] + 1).normal(0, NOISE_RMS, len(mix))
    assert np.allclose(tracks["A"] + tracks["B"] + noise, mix, atol=1e-4)
    for name, track in tracks.items():  # each track holds its speaker's utterances, nothing else
        own = np.zeros(len(mix), bool)
        for u in f.utterances:
            if u.speaker == name:
                own[int(u.start * 16000):int(u.end * 16000) + 1] = True
                assert np.abs(track[int(u.start * 16000):int(u.end * 16000)]).max() > 0.01
        assert not np.any(track[~own])


def test_the_multichannel_analog_gives_each_word_to_its_speaker_and_pads_only_the_gaps():
    """eval/multichannel.py's channels from a mix: a word's own time is its speaker's even where
    the padding around the previous person's word reaches into it (a quick reply), and words said
    over another person's are cut out of every channel."""
    from multichannel import SR, owners

    words = [{"speaker": "A", "start": 0.0, "end": 1.0, "word": "so"},
             {"speaker": "B", "start": 1.1, "end": 1.5, "word": "yes"},
             {"speaker": "A", "start": 2.0, "end": 2.5, "word": "and"},
             {"speaker": "B", "start": 2.2, "end": 2.4, "word": "mm"}]
    owner = owners(words, ["A", "B"], 3 * SR, pad=0.15)
    at = lambda t: int(owner[int(t * SR)])  # noqa: E731
    assert at(1.12) == 1 and at(1.05) == 0  # B's reply is B's from its first sample; the gap padded
    assert at(1.6) == 1 and at(1.8) == -1  # B's pad after the reply, then nobody
    assert at(2.3) == -2 and at(2.1) == -2  # the overlapping words cut out
