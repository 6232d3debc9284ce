"""speaker_asr/patches/diarization.py: pyannote's output unchanged, less work done (tiny random pipeline)."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import tone


def _load(tiny_models, speedups: bool, *skip: str, embeddings: str = "recipe", folder: str = "pyannote",
          **kwargs):
    """The tiny pipeline with the speed fixes (less those named in ``skip``) or without; every
    window embedded unless ``embeddings`` is "approximate"."""
    import contextlib

    from speaker_asr.diarization.pipeline import load_diarization_pipeline
    from speaker_asr.patches import registry

    with contextlib.ExitStack() as stack:
        for name in skip:
            stack.enter_context(registry.skipping(name, "skipped by the test"))
        return load_diarization_pipeline(str(tiny_models[folder]), None, kwargs.pop("device", "cpu"),
                                         speedups=speedups, embeddings=embeddings, **kwargs)


def _two_voices() -> np.ndarray:
    rng = np.random.default_rng(11)
    parts = [tone(s, freq=f) for s, f in ((4.0, 180.0), (3.0, 320.0), (5.0, 180.0), (4.0, 320.0))]
    audio = np.concatenate(parts)
    return (audio + 0.02 * rng.standard_normal(len(audio))).astype(np.float32)


def _rows_run(stock_pipeline):
    """Spy on the stock embedding class's call (the fast pipeline's subclass calls it too) and on
    embed_trunk_once's: how many times the embedding network runs on a window's audio (once per
    (window, speaker) row in pyannote's way, once per window in embed_trunk_once's)."""
    from speaker_asr.patches import diarization

    rows = []
    # the class that runs the network (skip_silent_embeddings' subclass only passes it the active rows)
    stock = next(c for c in type(stock_pipeline._embedding).__mro__ if "_skips_silent" not in vars(c))
    call, pooled = stock.__call__, diarization._pooled

    def counting(self, waveforms, masks=None):
        rows.append(len(waveforms))
        return call(self, waveforms, masks=masks)

    def counting_pooled(model, waveforms, masks, trunk=None):
        rows.append(len(waveforms))
        return pooled(model, waveforms, masks, trunk)

    def restore():
        stock.__call__ = call
        diarization._pooled = pooled

    stock.__call__ = counting
    diarization._pooled = counting_pooled
    return rows, restore


def test_speedups_keep_the_turns_and_skip_silent_slots(tiny_models):
    from speaker_asr.diarization.pipeline import diarize

    # the output-preserving fixes only (those that may change an output are tested on their own)
    stock, fast = _load(tiny_models, False), _load(tiny_models, True, "linear_clustering")
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


@pytest.mark.parametrize("skip", [pytest.param(("embed_trunk_once", "onnx_embedding_trunk"), marks=pytest.mark.heavy),
                                  ()], ids=["per-pair-embedding", "trunk-once-per-window"])
def test_shared_embeddings_embed_fewer_pairs_and_pool_the_rest(tiny_models, skip, monkeypatch):
    """The embedded pairs get the recipe's own embeddings; every other active pair the mean of
    its matches' in the embedded windows around it; silent pairs stay NaN."""
    from speaker_asr.diarization.window_plan import plan_windows
    from speaker_asr.patches import diarization

    monkeypatch.setattr(diarization, "SHARED_AFTER_S", 30.0)  # 48 s is "long" here

    recipe = _load(tiny_models, True, *skip)
    shared = _load(tiny_models, True, *skip, embeddings="approximate")
    assert shared.diarization_settings["embeddings"] == "approximate"
    audio = np.concatenate([_two_voices()] * 3)  # 48 s: 39 windows
    (every, masks_every, window), rows_every, _ = _clustering_inputs(recipe, audio)
    (embeddings, masks, _), rows, got = _clustering_inputs(shared, audio)
    np.testing.assert_array_equal(masks, masks_every)  # the same segmentation
    plan = plan_windows(masks, masks.shape[1] * window.step / window.duration, diarization.EMBEDDING_STRIDE)
    active = masks.sum(axis=1) > 0
    assert np.isfinite(embeddings[active]).all() and np.isnan(embeddings[~active]).all()
    # the own pairs: the recipe's embeddings (their masks chosen over the whole window)
    scale = np.nanmax(np.abs(every))
    np.testing.assert_allclose(embeddings[plan.own], every[plan.own], atol=1e-5 * scale)
    # a pooled pair points where its matches' (recipe) embeddings point on average
    pooled = active & ~plan.own
    assert pooled.any()  # few here: the tiny random segmentation tracks its "speakers" erratically
    for c, s in zip(*np.nonzero(pooled)):
        (e0, s0), (e1, s1) = plan.sources[c, s]
        w0, w1 = plan.weights[c, s]
        want = sum(w * every[e, t] / np.linalg.norm(every[e, t]) for w, e, t in ((w0, e0, s0), (w1, e1, s1)) if w)
        cos = want @ embeddings[c, s] / np.linalg.norm(want) / np.linalg.norm(embeddings[c, s])
        assert cos > 1 - 1e-5
    # less work: pairs (pyannote's way) or windows (the trunk once per window)
    # (the tiny random segmentation hears speech in few windows: each of them keeps an own pair)
    if skip:
        assert rows == plan.own.sum() < rows_every
    else:
        assert rows == len(plan.windows) <= rows_every
    assert all(t.end > t.start for t in got.turns)


def test_shared_embeddings_train_the_clustering_on_the_embedded_pairs_with_a_scaled_minimum(
        tiny_models, monkeypatch):
    """Where the diarization pooled pairs from their neighbours, the clustering is trained on the
    pairs embedded from their own audio (a pooled pair repeats its neighbours), its minimum
    cluster size scaled by their share of the recipe's training set; every pair, pooled or not,
    is then assigned to its clusters. Without pooled pairs, the recipe's training set and
    minimum; the step's own minimum is left as it was either way."""
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    from speaker_asr.patches import diarization

    clustering = _load(tiny_models, True, embeddings="approximate").clustering
    monkeypatch.setattr(clustering, "min_cluster_size", 12)
    # two people, 30 windows each, one clean speaker slot per window; two voices far apart
    windows, rng = 60, np.random.default_rng(3)
    data = np.zeros((windows, 100, 3), dtype=np.float32)
    data[:30, :, 0] = data[30:, :, 1] = 1.0
    voices = rng.standard_normal((2, 16))
    embeddings = np.full((windows, 3, 16), np.nan, dtype=np.float32)
    embeddings[:30, 0] = voices[0] + 0.1 * rng.standard_normal((30, 16))
    embeddings[30:, 1] = voices[1] + 0.1 * rng.standard_normal((30, 16))
    segmentations = SlidingWindowFeature(data, SlidingWindow(start=0.0, duration=10.0, step=1.0))
    seen = []
    cluster = type(clustering).cluster

    def spy(self, train, *args, **kwargs):
        seen.append((len(train), int(self.min_cluster_size)))
        return cluster(self, train, *args, **kwargs)

    monkeypatch.setattr(type(clustering), "cluster", spy)
    own = np.zeros((windows, 3), dtype=bool)
    own[::5] = data[::5].any(axis=1)  # every fifth window's speaker: 12 of the 60 pairs
    for embedded, want in ((own, (12, diarization.relative_min_cluster_size(12, 12, 60))), (None, (60, 12))):
        diarization._EMBEDDED.own = embedded
        try:
            hard, _, _ = clustering(embeddings=embeddings, segmentations=segmentations,
                                    num_clusters=None, min_clusters=1, max_clusters=np.inf)
        finally:
            diarization._EMBEDDED.own = None
        assert seen[-1] == want
        assert int(clustering.min_cluster_size) == 12
        people = hard[np.arange(windows), np.where(np.arange(windows) < 30, 0, 1)]
        assert len(set(people[:30])) == len(set(people[30:])) == 1 and people[0] != people[-1]
    assert diarization.relative_min_cluster_size(12, 12, 60) == 2
    assert diarization.relative_min_cluster_size(12, 1, 100) == 1


def _same_as_the_recipe(got, want):
    np.testing.assert_array_equal(got[0][0], want[0][0])
    assert got[1] == want[1] and got[2].turns == want[2].turns


def test_recordings_up_to_five_minutes_get_the_recipes_embeddings(tiny_models):
    audio = np.concatenate([_two_voices()] * 2)
    shared = _load(tiny_models, True, embeddings="approximate")
    assert {r.name: r.applied for r in shared.patch_report}["share_window_embeddings"]
    _same_as_the_recipe(_clustering_inputs(shared, audio), _clustering_inputs(_load(tiny_models, True), audio))


def test_shared_embeddings_that_embed_every_window_are_the_recipes(tiny_models, monkeypatch):
    """The shared path with every window on its grid (stride 1) is the recipe's computation: each
    window's masks chosen as pyannote chooses them, each window embedded from its own audio. Its
    embeddings and turns are then the recipe's bit for bit (CPU batches of one window: the same
    arithmetic). The patch refuses stride 1 at load (nothing to gain there), so it is loaded at
    its own stride and the grid narrowed to every window when it runs."""
    from speaker_asr.diarization import window_plan
    from speaker_asr.patches import diarization

    audio = np.concatenate([_two_voices()] * 2)  # 32 s: 23 windows
    want = _clustering_inputs(_load(tiny_models, True), audio)
    plan_windows, plans = window_plan.plan_windows, []

    def planned(masks, frames_per_step, stride):  # the patch takes it at load: replaced before
        plans.append((stride, plan_windows(masks, frames_per_step, stride)))
        return plans[-1][1]

    monkeypatch.setattr(window_plan, "plan_windows", planned)
    monkeypatch.setattr(diarization, "SHARED_AFTER_S", 0.0)  # 32 s is "long" here
    shared = _load(tiny_models, True, embeddings="approximate")
    assert {r.name: r.applied for r in shared.patch_report}["share_window_embeddings"]
    monkeypatch.setattr(diarization, "EMBEDDING_STRIDE", 1)
    got = _clustering_inputs(shared, audio)
    # the shared path ran, with every active pair embedded from its own window
    assert [stride for stride, _ in plans] == [1]
    active = np.nan_to_num(got[0][1]).sum(axis=1) > 0
    assert active.any() and np.array_equal(plans[0][1].own, active)
    _same_as_the_recipe(got, want)


@pytest.mark.heavy  # half a minute: make test-scripts
def test_the_embedding_network_runs_once_per_window_with_pyannotes_embeddings(tiny_models):
    """WeSpeaker ResNet34 (the 3.1 recipe's): one run per window, pooled per speaker, gives the
    embeddings pyannote computes one (window, speaker) pair at a time, and so the same turns."""
    audio = np.concatenate([_two_voices()] * 2)
    pairwise = _load(tiny_models, True, "embed_trunk_once", "onnx_embedding_trunk")
    for skip in (("onnx_embedding_trunk",), ()):  # torch's trunk, then ONNX Runtime's
        once = _load(tiny_models, True, *skip)
        assert {r.name: r.applied for r in once.patch_report}["embed_trunk_once"]
        (want, masks, _), pair_rows, want_d = _clustering_inputs(pairwise, audio)
        (got, _, _), window_rows, got_d = _clustering_inputs(once, audio)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, atol=1e-5 * np.nanmax(np.abs(want)))
        assert got_d.turns == want_d.turns and got_d.exclusive_turns == want_d.exclusive_turns
        speaking = int((masks.sum(axis=1) > 0).any(axis=1).sum())
        assert window_rows == speaking < pair_rows


def test_the_embedding_speedups_say_where_they_do_not_apply(tiny_models, tmp_path):
    from speaker_asr.testing.tiny_models import build_pyannote_pipeline

    # another embedding model: its mask does not only weight a pooling
    folders = {"xvector": build_pyannote_pipeline(tmp_path / "xvector", embedding="xvector")}
    xvector = _load(folders, True, folder="xvector")
    report = {r.name: r for r in xvector.patch_report}
    assert not report["embed_trunk_once"].applied and "WeSpeaker" in report["embed_trunk_once"].reason
    assert report["onnx_embedding_trunk"].reason == "embed_trunk_once did not apply"
    # on a GPU the trunk stays torch's, and every window is embedded (the recipe's computation)
    from speaker_asr.patches import diarization, diarization_onnx

    pipeline = _load(tiny_models, False)
    assert diarization.embed_trunk_once(pipeline) is None
    assert "runs on cuda" in diarization_onnx.onnx_embedding_trunk(pipeline, "cuda")
    assert "runs on cuda:0" in diarization.share_window_embeddings(pipeline, "cuda:0")


def test_which_embeddings_are_computed_is_one_setting_and_reported(tiny_models):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    shared, recipe = _load(tiny_models, True, embeddings="approximate"), _load(tiny_models, True)
    assert shared.diarization_settings["embeddings"] == "approximate"
    assert "every 5th window" in shared.diarization_settings["summary"]
    assert "approximate past 300 s" in shared.diarization_settings["summary"]
    assert shared.diarization_settings["shared_after_s"] == 300
    assert recipe.diarization_settings == {
        "embeddings": "recipe", "shared_after_s": None, "segmentation": "float",
        "summary": "every window's speakers embedded, as pyannote's recipe does (DIARIZATION_EMBEDDINGS=recipe)"}
    unplaced = load_diarization_pipeline(str(tiny_models["pyannote"]), None, None, embeddings="approximate")
    assert unplaced.diarization_settings["embeddings"] == "approximate"  # no device given: the CPU
    with pytest.raises(ValueError, match="expected one of recipe, approximate"):
        load_diarization_pipeline(str(tiny_models["pyannote"]), None, "cpu", embeddings="fast")


def test_onnx_segmentation_gives_torchs_scores_and_turns(tiny_models):
    import torch

    from speaker_asr.diarization.pipeline import diarize

    audio = np.concatenate([_two_voices()] * 2)
    torch_seg = _load(tiny_models, True, "onnx_segmentation")
    onnx_seg = _load(tiny_models, True)
    assert {r.name: r.applied for r in onnx_seg.patch_report}["onnx_segmentation"]
    waveforms = torch.from_numpy(np.resize(audio, 2 * 160000).reshape(2, 1, -1).astype(np.float32))
    with torch.inference_mode():
        want = torch_seg._segmentation.model(waveforms).numpy()
        got = onnx_seg._segmentation.model(waveforms).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max())
    a, b = diarize(torch_seg, audio), diarize(onnx_seg, audio)
    assert a.turns == b.turns and a.exclusive_turns == b.exclusive_turns


def test_int8_segmentation_only_when_asked_and_reported(tiny_models, monkeypatch):
    """segmentation="int8" quantizes the ONNX segmentation model's LSTM: only when asked for,
    said in the settings (with its load probe's figures); the default stays float32 (torch's
    scores to rounding); where int8 cannot apply the float32 model runs and the summary says why."""
    import torch

    from speaker_asr.diarization.pipeline import diarize, load_diarization_pipeline
    from speaker_asr.patches import diarization_onnx

    default, int8 = _load(tiny_models, True), _load(tiny_models, True, segmentation="int8")
    torch_seg = _load(tiny_models, True, "onnx_segmentation")
    assert default.diarization_settings["segmentation"] == "float"
    assert "int8" not in default.diarization_settings["summary"]
    assert "segmentation_probe" not in default.diarization_settings
    assert default.segmentation_precision == {"precision": "float", "asked": "float"}
    settings = int8.diarization_settings
    assert settings["segmentation"] == "int8" and "; segmentation int8 (LSTM weights" in settings["summary"]
    probe = settings["segmentation_probe"]
    assert set(probe) == {"argmax_changed", "mean_prob_diff", "max_prob_diff"}
    assert probe["argmax_changed"] <= diarization_onnx.INT8_MAX_ARGMAX_CHANGED
    assert {r.name: r.applied for r in int8.patch_report}["onnx_segmentation"]
    # the same float32 torch model underneath; int8's scores close to it, float32's equal to rounding
    audio = np.concatenate([_two_voices()] * 2)
    waveforms = torch.from_numpy(np.resize(audio, 2 * 160000).reshape(2, 1, -1).astype(np.float32))
    with torch.inference_mode():
        want = torch_seg._segmentation.model(waveforms).numpy()
        floats = default._segmentation.model(waveforms).numpy()
        got = int8._segmentation.model(waveforms).numpy()
    np.testing.assert_allclose(floats, want, atol=1e-5 * np.abs(want).max())
    assert not np.allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())  # int8 is not float32
    assert diarization_onnx.segmentation_difference(got, want)["mean_prob_diff"] < 0.05
    assert diarize(int8, audio).turns  # the pipeline runs on it
    # asked for but not applied: the float32 model (or torch), and the summary says why
    off = _load(tiny_models, False, segmentation="int8")
    assert off.diarization_settings["segmentation"] == "float"
    assert "int8 not applied (DIARIZATION_SPEEDUPS=false)" in off.diarization_settings["summary"]
    assert "runs on cuda" in diarization_onnx.onnx_segmentation(off, "cuda", "int8")
    assert off.segmentation_precision == {"precision": "float", "asked": "int8", "why_not": "the pipeline runs on cuda"}

    def broken(model):
        raise RuntimeError("no quantizer here")

    monkeypatch.setattr(diarization_onnx, "_int8_lstm", broken)
    failed = _load(tiny_models, True, segmentation="int8")
    assert {r.name: r.applied for r in failed.patch_report}["onnx_segmentation"]  # float32 ONNX
    assert failed.diarization_settings["segmentation"] == "float"
    assert "int8 not applied (its int8 quantization or run failed (RuntimeError: no quantizer here))" \
        in failed.diarization_settings["summary"]
    with torch.inference_mode():
        np.testing.assert_allclose(failed._segmentation.model(waveforms).numpy(), want, atol=1e-5 * np.abs(want).max())
    with pytest.raises(ValueError, match="expected one of float, int8"):
        load_diarization_pipeline(str(tiny_models["pyannote"]), None, "cpu", segmentation="int4")
