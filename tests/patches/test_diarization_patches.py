"""speaker_asr/patches/diarization.py: pyannote's output unchanged, less work done (tiny random pipeline)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import tone


def _load(tiny_models, speedups: bool, *skip: str):
    """The tiny pipeline with the speed fixes (less those named in ``skip``) or without."""
    import contextlib

    from speaker_asr.diarization.pipeline import load_diarization_pipeline
    from speaker_asr.patches import registry

    with contextlib.ExitStack() as stack:
        for name in skip:
            stack.enter_context(registry.skipping(name, "skipped by the test"))
        return load_diarization_pipeline(str(tiny_models["pyannote"]), None, "cpu", speedups=speedups)


def _two_voices() -> np.ndarray:
    rng = np.random.default_rng(11)
    parts = [tone(s, freq=f) for s, f in ((4.0, 180.0), (3.0, 320.0), (5.0, 180.0), (4.0, 320.0))]
    audio = np.concatenate(parts)
    return (audio + 0.02 * rng.standard_normal(len(audio))).astype(np.float32)


def _rows_run(stock_pipeline):
    """Spy on the stock embedding class's call (the fast pipeline's subclass calls it too): how
    many (window, speaker) rows it computes."""
    rows = []
    stock = type(stock_pipeline._embedding)
    call = stock.__call__

    def counting(self, waveforms, masks=None):
        rows.append(len(waveforms))
        return call(self, waveforms, masks=masks)

    stock.__call__ = counting
    return rows, lambda: setattr(stock, "__call__", call)


def test_speedups_keep_the_turns_and_skip_silent_slots(tiny_models):
    from speaker_asr.diarization.pipeline import diarize

    # the output-preserving fixes only (the two that may change an output are tested on their own)
    stock, fast = _load(tiny_models, False), _load(tiny_models, True, "embed_fewer_windows", "linear_clustering")
    assert getattr(fast._embedding, "_skips_silent", False)
    assert not getattr(stock._embedding, "_skips_silent", False)
    assert fast.embedding_batch_size == 1 and stock.embedding_batch_size == 32
    audio = _two_voices()
    rows, restore = _rows_run(stock)
    try:
        want = diarize(stock, audio)
        stock_rows = sum(rows)
        rows.clear()
        got = diarize(fast, audio)
        fast_rows = sum(rows)
    finally:
        restore()
    assert got.turns == want.turns and got.exclusive_turns == want.exclusive_turns
    assert fast_rows < stock_rows, "the test audio must leave some window's speaker slot silent"
    # speaker-count constraints run through the same clustering
    assert diarize(fast, audio, num_speakers=2).turns == diarize(stock, audio, num_speakers=2).turns


def test_skipped_slots_get_nan_and_active_ones_their_embedding(tiny_models):
    import torch

    fast, stock = _load(tiny_models, True), _load(tiny_models, False)
    waveforms = 0.1 * torch.randn(3, 1, 32000, generator=torch.Generator().manual_seed(2))
    masks = torch.zeros(3, 100)
    masks[0, 10:60] = 1.0
    masks[2] = 1.0
    with torch.inference_mode():
        got, want = fast._embedding(waveforms, masks=masks), stock._embedding(waveforms, masks=masks)
        none = fast._embedding(waveforms[1:2], masks=masks[1:2])
    assert np.isnan(got[1]).all() and np.isnan(none).all() and none.shape == (1, got.shape[1])
    assert np.allclose(got[[0, 2]], want[[0, 2]], atol=1e-5)
    assert np.isfinite(got[[0, 2]]).all()


def test_joint_assignment_keeps_silent_slots_unless_they_are_nan_anyway(tiny_models):
    """With VBx-style constrained (joint) assignment a silent slot's embedding takes part in its
    window's assignment: the skip then applies only to a model that returns NaN for it anyway
    (WeSpeaker ResNet34 returns a finite vector for an all-zero mask)."""
    from speaker_asr.patches.diarization import skip_silent_embeddings

    pipeline = _load(tiny_models, False)
    pipeline.clustering.constrained_assignment = True
    assert not skip_silent_embeddings(pipeline)


@pytest.mark.parametrize("device,applies", [(None, True), ("cpu", True), ("cuda", False),
                                            ("cuda:1", False)])
def test_cpu_embedding_batch_only_on_cpu(tiny_models, device, applies):
    from speaker_asr.patches.diarization import cpu_embedding_batch

    pipeline = _load(tiny_models, False)
    assert cpu_embedding_batch(pipeline, device) is applies
    assert pipeline.embedding_batch_size == (1 if applies else 32)


def _clustering_inputs(pipeline, audio):
    """What the pipeline hands its clustering step for ``audio``: (embeddings, segmentations,
    sliding window), how many (window, speaker) rows the embedding model computed, and the
    diarization it gave."""
    from speaker_asr.diarization.pipeline import diarize

    seen = {}
    step = type(pipeline.clustering).__call__

    def call(self, *args, **kwargs):
        seen["inputs"] = (kwargs["embeddings"].copy(), kwargs["segmentations"].data.copy(),
                          kwargs["segmentations"].sliding_window)
        return step(self, *args, **kwargs)

    rows, restore = _rows_run(pipeline)
    type(pipeline.clustering).__call__ = call
    try:
        result = diarize(pipeline, audio)
    finally:
        restore()
        type(pipeline.clustering).__call__ = step
    return seen["inputs"], sum(rows), result


def test_long_recordings_slide_coarser_and_embed_fewer_windows(tiny_models, monkeypatch):
    from speaker_asr.patches import diarization

    monkeypatch.setattr(diarization, "LONG_RECORDING_S", 30.0)  # 48 s is "long" here
    recipe = _load(tiny_models, True, "embed_fewer_windows", "coarser_segmentation_step")
    fast = _load(tiny_models, True)
    audio = np.concatenate([_two_voices()] * 3)  # 48 s
    (every, masks_every, window_every), rows_every, _ = _clustering_inputs(recipe, audio)
    (embeddings, masks, window), rows, _ = _clustering_inputs(fast, audio)
    assert window.step == 2 * window_every.step and len(masks) < 0.6 * len(masks_every)
    # half the windows, half of them embedded (a quarter) unless a copy finds no match: the tiny
    # random segmentation tracks its "speakers" erratically, so fewer copies are found here
    assert rows < 0.6 * rows_every
    active = masks.sum(axis=1) > 0
    assert np.isfinite(embeddings[active]).all() and np.isnan(embeddings[~active]).all()
    # the embedded windows (every other one) have the embeddings pyannote computes for them
    step = diarization.EMBEDDING_STRIDE
    np.testing.assert_allclose(embeddings[::step][active[::step]], every[::2 * step][active[::step]], atol=1e-5)


def test_recordings_up_to_five_minutes_are_diarized_as_the_recipe_says(tiny_models):
    recipe = _load(tiny_models, True, "embed_fewer_windows", "coarser_segmentation_step")
    fast = _load(tiny_models, True)
    audio = np.concatenate([_two_voices()] * 3)
    (every, masks_every, _), rows_every, want = _clustering_inputs(recipe, audio)
    (embeddings, masks, _), rows, got = _clustering_inputs(fast, audio)
    assert rows == rows_every
    np.testing.assert_array_equal(masks, masks_every)
    np.testing.assert_array_equal(embeddings, every)
    assert got.turns == want.turns


def test_the_long_recording_length_is_a_setting(tiny_models):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    audio = np.concatenate([_two_voices()] * 2)  # 32 s
    short = load_diarization_pipeline(str(tiny_models["pyannote"]), None, "cpu", long_after_s=20.0)
    recipe = _load(tiny_models, True)  # 300 s: 32 s is short
    (_, masks, window), _, _ = _clustering_inputs(short, audio)
    (_, masks_recipe, window_recipe), _, _ = _clustering_inputs(recipe, audio)
    assert window.step == 2 * window_recipe.step and len(masks) < len(masks_recipe)
