"""Checks of the evaluation's scoring and baseline code (pure Python, no models, < 1 s):

    .venv/bin/python -m pytest eval/test_eval.py -q
"""

from speaker_asr.attribution.speakers import exclusive_turns
from speaker_asr.types import Turn
from algorithms import Diar, hf_original, max_overlap, runners  # noqa: E402
from metrics import (HypToken, RefToken, cpwer_counts, normalize_text, normalize_word,  # noqa: E402
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
