"""patches/registry.py: every change to transformers' and pyannote's internals goes through one
registry, in a fixed order, decided at load, with a report of what applied and why not."""

from __future__ import annotations

import pytest

from helpers import tiny_settings
from speaker_asr.compat import transformers_major as _transformers_major


@pytest.fixture(scope="module")
def transcribers(tiny_models):
    from speaker_asr.asr.transcriber import WhisperTranscriber, resolve_device

    out = {}
    for fast in (True, False):
        settings = tiny_settings(tiny_models, generation_speedups=fast)
        out[fast] = WhisperTranscriber(settings, *resolve_device(settings))
    return out


def test_every_patch_applies_on_the_pinned_versions(transcribers):
    """transformers 5 (requirements-pyannote4.txt + the Makefile's torch): every Whisper and
    assistant patch applies; the bfloat16 projection only where the CPU computes bfloat16."""
    from speaker_asr.patches.registry import PATCHES
    from speaker_asr.patches.whisper import native_bfloat16

    report = transcribers[True].patch_report
    assert [(r.target, r.name) for r in report] == [(p.target, p.name) for p in PATCHES
                                                    if p.target in ("whisper", "assistant")]
    for r in report:
        if r.name == "fast_lm_head" and not native_bfloat16():
            # CI's and some dev CPUs are AVX2 only: the bfloat16 projection stays off there
            assert not r.applied and "bfloat16 is emulated" in r.reason
    if _transformers_major() < 5:
        skipped = {r.name for r in report if not r.applied}
        allowed = {"lean_decoder", "decoder_attention_at_load"}
        if not native_bfloat16():
            allowed.add("fast_lm_head")
        assert skipped <= allowed, report
        return
    for r in report:
        if r.name == "fast_lm_head" and not native_bfloat16():
            assert not r.applied and "bfloat16 is emulated" in r.reason
        else:
            assert r.applied, r


def test_generation_speedups_false_is_transformers_stock(transcribers):
    stock = transcribers[False]
    assert all(not r.applied and r.reason == "GENERATION_SPEEDUPS=false" for r in stock.patch_report)
    # nothing wrapped or swapped: the model's methods are transformers' own
    for name in ("_retrieve_segment", "_extract_token_timestamps", "_retrieve_logit_processors"):
        assert name not in vars(stock.model), name
    assert type(stock.model.proj_out).forward is stock.model.proj_out.forward.__func__
    assert stock.fast_lm_head is False and stock.lean_decoder is False


def test_diarization_patches_are_reported_and_switch_off(tiny_models):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    fast = load_diarization_pipeline(str(tiny_models["pyannote"]), None, speedups=True)
    report = {r.name: r for r in fast.patch_report}
    assert [(r.name, r.applied) for r in fast.patch_report] == [
        ("skip_silent_embeddings", True), ("cpu_embedding_batch", True), ("embed_trunk_once", True),
        ("onnx_embedding_trunk", True), ("onnx_segmentation", True), ("share_window_embeddings", False),
        ("linear_clustering", True), ("absorb_stray_clusters", True)]
    assert report["share_window_embeddings"].changes_output
    # the approximation is an opt-in, and says so
    assert fast.diarization_settings["embeddings"] == "recipe"
    assert report["share_window_embeddings"].reason == "DIARIZATION_EMBEDDINGS=recipe"
    approximate = load_diarization_pipeline(str(tiny_models["pyannote"]), None, embeddings="approximate")
    assert {r.name: r.applied for r in approximate.patch_report}["share_window_embeddings"]
    stock = load_diarization_pipeline(str(tiny_models["pyannote"]), None, speedups=False)
    assert all(not r.applied and r.reason == "DIARIZATION_SPEEDUPS=false" for r in stock.patch_report)
    assert stock.embedding_batch_size == 32


def test_the_handler_reports_every_patch(handler):
    from speaker_asr.patches.registry import PATCHES, describe

    assert [(r.target, r.name) for r in handler.models.patch_report] == [(p.target, p.name) for p in PATCHES]
    line = describe(handler.models.patch_report)
    assert "whisper.chunk_windows: " in line and "diarization.cpu_embedding_batch: applied" in line


def test_patch_order_and_declarations_are_fixed():
    from speaker_asr.patches.registry import PATCHES

    names = [(p.target, p.name) for p in PATCHES]
    assert len(names) == len(set(names))
    whisper = [n for t, n in names if t == "whisper"]
    # the lean decoder probes the decoder as the other patches leave it: it comes last
    assert whisper[-1] == "lean_decoder" and whisper[0] == "chunk_windows"
    # word times from the alignment heads wrap fast_dtw's extraction, and the decoder keeps its own
    # attention only once they no longer need every step's attention weights
    assert whisper.index("fast_dtw") < whisper.index("alignment_heads_only") \
        < whisper.index("decoder_attention_at_load")
    assert [p.name for p in PATCHES if p.changes_output] == ["chunk_windows", "alignment_heads_only",
                                                             "share_window_embeddings", "linear_clustering",
                                                             "absorb_stray_clusters"]
    diarization = [n for t, n in names if t == "diarization"]
    # the pairs a window leaves to its neighbours are skipped as silent ones: that is decided first
    assert diarization.index("skip_silent_embeddings") < diarization.index("share_window_embeddings")
    # the trunk is run once per window before ONNX Runtime takes it over, and the embedded pairs
    # of share_window_embeddings come from that step
    assert diarization.index("embed_trunk_once") < diarization.index("onnx_embedding_trunk") \
        < diarization.index("share_window_embeddings")
    assert all(p.versions and p.summary for p in PATCHES)


def test_skipping_one_patch_is_scoped_to_the_block():
    from speaker_asr.patches import registry

    before = registry.PATCHES
    with registry.skipping("fast_dtw", "measured without it"):
        skipped = [p for p in registry.PATCHES if p.name == "fast_dtw"]
        assert skipped and all(p.install(None, {}) == "measured without it" for p in skipped)
        assert [p.name for p in registry.PATCHES] == [p.name for p in before]
    assert registry.PATCHES is before
    with pytest.raises(ValueError, match="no patch named"):
        with registry.skipping("no_such_patch", "x"):
            pass
