"""speaker_asr/diarization/clustering.py and its patch (linear_clustering): long recordings'
clustering in linear time and memory, the same speakers as pyannote's below EXACT_LIMIT."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from speaker_asr.diarization import clustering as linear
from speaker_asr.testing.windows import synthetic_windows

THRESHOLD = 0.7045654963945799  # the 3.1 recipe's


def _agglomerative(min_cluster_size: int = 12):
    from pyannote.audio.pipelines.clustering import AgglomerativeClustering

    step = AgglomerativeClustering(metric="cosine")
    step.instantiate({"method": "centroid", "min_cluster_size": min_cluster_size, "threshold": THRESHOLD})
    return step


def _linear(step):
    from speaker_asr.patches.diarization import linear_clustering

    class Holder:
        clustering = step

    assert linear_clustering(Holder()) is None
    return step


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.ravel().tolist(), b.ravel().tolist()))
    return len(pairs) == len(set(a.ravel().tolist())) == len(set(b.ravel().tolist()))


def _purity(found: np.ndarray, truth: np.ndarray) -> float:
    keep = truth >= 0
    found, truth = found[keep], truth[keep]
    return sum(collections.Counter(truth[found == k]).most_common(1)[0][1] for k in np.unique(found)) / len(found)


def test_weighted_linkage_with_unit_weights_is_scipys_centroid_linkage():
    from scipy.cluster.hierarchy import linkage

    x = np.random.default_rng(3).normal(size=(200, 8))
    ours = linear.weighted_centroid_linkage(x, np.ones(len(x)))
    np.testing.assert_allclose(ours, linkage(x, method="centroid")[:, :3], atol=1e-9)


def test_weighted_linkage_weighs_a_cluster_by_its_embeddings():
    # a cluster of 10 at 0 and single points at 1 and 3: 0+1 merge at 1; their centroid is
    # (10*0 + 1*1)/11, so the last merge is at 3 - 1/11 (unweighted it would be 2.5)
    rows = linear.weighted_centroid_linkage(np.array([[0.0], [1.0], [3.0]]), np.array([10.0, 1.0, 1.0]))
    np.testing.assert_allclose(rows[:, 2], [1.0, 3 - 1 / 11])


def test_blockwise_linkage_is_a_valid_dendrogram_counting_embeddings():
    from scipy.cluster.hierarchy import fcluster, is_valid_linkage

    w = synthetic_windows(600, voices=4, seed=1)
    x = w.embeddings[w.voices >= 0]
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    z = linear.blockwise_linkage(x, THRESHOLD, block=100)
    assert z.shape == (len(x) - 1, 4) and is_valid_linkage(z)
    assert z[-1, 3] == len(x)
    flat = fcluster(z, THRESHOLD, criterion="distance")
    assert _same_partition(flat, w.voices[w.voices >= 0])


def test_one_block_is_scipys_own_linkage_cut():
    from scipy.cluster.hierarchy import fcluster, linkage

    x = np.random.default_rng(5).normal(size=(300, 6))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for t in (0.5, 0.9, 1.2):
        ours = fcluster(linear.blockwise_linkage(x, t, block=1000), t, criterion="distance")
        theirs = fcluster(linkage(x, method="centroid"), t, criterion="distance")
        assert _same_partition(ours, theirs)


@pytest.mark.parametrize("kwargs", [{}, {"num_clusters": 4}, {"num_clusters": 7},
                                    {"min_clusters": 2, "max_clusters": 3}, {"min_clusters": 7, "max_clusters": 9}])
def test_blockwise_clustering_honours_speaker_constraints_as_pyannote_does(monkeypatch, kwargs):
    w = synthetic_windows(1500, voices=6, seed=2)
    stock, _, _ = _agglomerative()(embeddings=w.embeddings.copy(), segmentations=w.segmentations, **kwargs)
    monkeypatch.setattr(linear, "EXACT_LIMIT", 500)
    monkeypatch.setattr(linear, "BLOCK", 800)  # three blocks
    step = _linear(_agglomerative())
    hard, soft, centroids = step(embeddings=w.embeddings.copy(), segmentations=w.segmentations, **kwargs)
    found, theirs = hard.max() + 1, stock.max() + 1
    assert found == centroids.shape[0]
    wanted = kwargs.get("num_clusters", kwargs.get("min_clusters", 1))
    if wanted <= 6:  # reachable with the 6 voices there are: the same number as pyannote's
        assert found == theirs and (found == wanted or "num_clusters" not in kwargs)
    else:  # more speakers asked for than there are voices: as close to it as pyannote gets, or closer
        assert theirs <= found <= wanted
    if "max_clusters" in kwargs:
        assert found <= kwargs["max_clusters"]
    if not kwargs:
        assert hard.max() + 1 == 6 and _same_partition(hard[w.voices >= 0], w.voices[w.voices >= 0])


def test_below_the_limit_the_clustering_is_pyannotes_own():
    w = synthetic_windows(900, voices=5, seed=4, spread=1.0)
    stock = _agglomerative()(embeddings=w.embeddings.copy(), segmentations=w.segmentations)
    ours = _linear(_agglomerative())(embeddings=w.embeddings.copy(), segmentations=w.segmentations)
    for a, b in zip(stock, ours):
        np.testing.assert_array_equal(a, b)


def test_above_the_limit_the_same_speakers_as_pyannotes_clustering(monkeypatch):
    w = synthetic_windows(2400, voices=8, seed=6, returning=7)
    stock, _, _ = _agglomerative()(embeddings=w.embeddings.copy(), segmentations=w.segmentations)
    monkeypatch.setattr(linear, "EXACT_LIMIT", 300)
    ours, _, _ = _linear(_agglomerative())(embeddings=w.embeddings.copy(), segmentations=w.segmentations)
    active = w.voices >= 0
    assert _same_partition(stock[active], ours[active])
    assert ours.max() + 1 == 8 and _purity(ours, w.voices) == 1.0


def test_four_hours_of_windows_cluster_into_their_voices():
    # the 4-hour shape: 14,400 windows x 3 slots, 8 voices, one of them back only at the end
    w = synthetic_windows(14_400, voices=8, seed=0, returning=7)
    hard, _, centroids = _linear(_agglomerative())(embeddings=w.embeddings, segmentations=w.segmentations)
    assert hard.max() + 1 == 8 and centroids.shape[0] == 8
    assert _purity(hard, w.voices) > 0.999
    first, last = hard[:1000][w.voices[:1000] == 7], hard[-1000:][w.voices[-1000:] == 7]
    assert len(first) and len(last) and set(first.tolist()) == set(last.tolist())


def test_vbx_seeding_runs_blockwise_only_inside_a_patched_step(monkeypatch):
    from pyannote.audio.pipelines import clustering as module

    if not hasattr(module, "VBxClustering"):
        pytest.skip("pyannote.audio 3.3 has no VBx clustering (community-1 needs 4.x)")
    from speaker_asr.patches.diarization import linear_clustering

    class Plda:  # the PLDA's shape only: identity transform, unit within-class variance
        phi = np.ones(8)

        def __call__(self, x):
            return x[:, :8]

    def vbx():
        step = module.VBxClustering(plda=Plda())
        step.instantiate({"threshold": 0.6, "Fa": 0.07, "Fb": 0.8})
        return step

    w = synthetic_windows(800, voices=3, dim=16, seed=8, spread=0.3)
    bounds = {"min_clusters": 1, "max_clusters": 20}  # the pipeline always passes them
    stock, _, _ = vbx()(embeddings=w.embeddings.copy(), segmentations=w.segmentations, **bounds)
    step = vbx()

    class Holder:
        clustering = step

    assert linear_clustering(Holder()) is None
    calls = []
    blockwise = linear.blockwise_linkage
    monkeypatch.setattr(linear, "blockwise_linkage", lambda *a, **k: calls.append(len(a[0])) or blockwise(*a, **k))
    monkeypatch.setattr(linear, "EXACT_LIMIT", 300)
    hard, _, _ = step(embeddings=w.embeddings.copy(), segmentations=w.segmentations, **bounds)
    assert calls and calls[0] > 300
    assert _same_partition(hard[w.voices >= 0], stock[w.voices >= 0])
    # anyone else calling pyannote's linkage gets scipy's
    module.linkage(np.random.default_rng(0).normal(size=(400, 4)), method="centroid", metric="euclidean")
    assert len(calls) == 1


def test_the_patch_is_reported_and_switched_off_with_the_speedups(tiny_models):
    from speaker_asr.diarization.pipeline import load_diarization_pipeline

    on = load_diarization_pipeline(str(tiny_models["pyannote"]), None, "cpu", speedups=True)
    off = load_diarization_pipeline(str(tiny_models["pyannote"]), None, "cpu", speedups=False)
    report = {r.name: r for r in on.patch_report}
    assert report["linear_clustering"].applied and report["linear_clustering"].changes_output
    assert type(on.clustering).__name__ == "AbsorbingLinearAgglomerativeClustering"
    assert not {r.name: r for r in off.patch_report}["linear_clustering"].applied
    assert type(off.clustering).__name__ == "AgglomerativeClustering"


def _voices_and_strays(sizes: dict, dim: int = 32, seed: int = 5):
    """Unit embeddings around orthogonal voice directions; "stray" lies between voices 0 and 1
    (overlapped speech: 0.28 in cosine distance from voice 0, farther than the recipe merges),
    "newcomer" is a voice of its own. Returns (embeddings, clusters) with
    one cluster per group, in the order of ``sizes``."""
    rng = np.random.default_rng(seed)
    axes = np.eye(dim)
    centre = {"v0": axes[0], "v1": axes[1], "v2": axes[2], "stray": 0.72 * axes[0] + 0.694 * axes[1],
              "newcomer": axes[3]}
    x, c = [], []
    for k, (name, n) in enumerate(sizes.items()):
        x.append(centre[name] + 0.15 * rng.normal(size=(n, dim)) / np.sqrt(dim))
        c += [k] * n
    return np.vstack(x), np.array(c)


def test_a_stray_cluster_of_hours_of_audio_joins_its_voice_and_a_voice_of_its_own_stays():
    x, c = _voices_and_strays({"v0": 1500, "v1": 1200, "v2": 1000, "stray": 30, "newcomer": 30})
    got = linear.absorb_strays(x, c, min_cluster_size=12)
    # 3,760 embeddings: under 1 % (38) is small; the stray lies near v0, the newcomer near nothing
    assert len(np.unique(got)) == 4
    assert (got[c == 3] == got[c == 0][0]).all()
    assert len(set(got[c == 4].tolist())) == 1 and got[c == 4][0] not in got[c < 3]
    assert _same_partition(got[c < 3], c[c < 3])


def test_short_recordings_keep_the_recipes_clusters():
    # 8 minutes of meeting: about 700 embeddings, 1 % is under the recipe's 12: nothing changes
    x, c = _voices_and_strays({"v0": 300, "v1": 250, "v2": 150, "stray": 14})
    np.testing.assert_array_equal(linear.absorb_strays(x, c, min_cluster_size=12), c)


def test_absorbing_strays_never_goes_below_the_callers_minimum():
    x, c = _voices_and_strays({"v0": 2000, "v1": 1500, "stray": 30})
    assert len(np.unique(linear.absorb_strays(x, c, 12))) == 2
    np.testing.assert_array_equal(linear.absorb_strays(x, c, 12, min_clusters=3), c)


def test_the_pipeline_absorbs_strays_unless_the_speaker_count_is_given(monkeypatch):
    from speaker_asr.patches.diarization import absorb_stray_clusters

    step = _agglomerative()

    class Holder:
        clustering = step

    assert absorb_stray_clusters(Holder()) is None and absorb_stray_clusters(Holder()) is None
    assert type(step).__name__ == "AbsorbingAgglomerativeClustering"
    x, _ = _voices_and_strays({"v0": 1500, "v1": 1200, "v2": 1000, "stray": 30})
    free = step.cluster(x.copy(), min_clusters=1, max_clusters=20)
    stock = _agglomerative().cluster(x.copy(), min_clusters=1, max_clusters=20)
    assert len(np.unique(stock)) == 4 and len(np.unique(free)) == 3
    fixed = step.cluster(x.copy(), min_clusters=4, max_clusters=4, num_clusters=4)
    assert len(np.unique(fixed)) == 4
