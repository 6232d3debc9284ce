"""Centroid-linkage clustering of speaker embeddings in time and memory linear in their number.

pyannote's clustering step (the 3.1 recipe's ``AgglomerativeClustering``, and the AHC that seeds
community-1's VBx) runs scipy's centroid linkage over every active (window, speaker) embedding:
n^2/2 distances, about 2.5 GB and minutes for the 25,000-40,000 embeddings of a 4-hour meeting.
Here, above :data:`EXACT_LIMIT` embeddings:

1. the embeddings are cut, in time order, into blocks of at most :data:`BLOCK` rows; each block
   gets scipy's own centroid linkage, cut at the clustering threshold as pyannote cuts it. What
   it merges below the threshold (one speaker's windows close in time) is kept as it is;
2. the flat clusters of all blocks are merged by a centroid linkage that weighs each cluster by
   the embeddings it holds (:func:`weighted_centroid_linkage`: the distance between two clusters
   is the one between the means of their embeddings, exactly as in the full linkage), blockwise
   again while there are more than :data:`BLOCK` of them.

The result is one dendrogram over all n embeddings in scipy's format (:func:`blockwise_linkage`),
so the rest of pyannote's step -- the cut at the threshold, the minimum cluster size counted in
embeddings, the search for a given number of speakers, the assignment of every embedding to the
nearest centroid -- reads it as it reads scipy's. Memory is O(n + BLOCK^2), time O(n * BLOCK).
At or below :data:`EXACT_LIMIT` embeddings nothing changes: scipy's linkage, the same speakers.

numpy and scipy only (no torch); :mod:`speaker_asr.patches.diarization` installs it on a loaded
pipeline's clustering step.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

# at or below this many embeddings pyannote's own (quadratic) clustering runs, cheap there (0.06 GB
# of distances; its time: docs/measurements.md, "Long recordings"): about 45 minutes of meeting at
# the 3.1 recipe's 1-s step
EXACT_LIMIT = 4000
# rows per block of the first pass, and the most clusters one weighted linkage takes at once.
# Smaller blocks leave more of a block's stray embeddings (overlapped speech, between two voices)
# on their own, and across many blocks they can gather into a cluster pyannote's whole linkage does
# not make: on an hour of the kit's real speech, smaller blocks found an extra "speaker" of such
# embeddings, 2,000 the same voices as pyannote (docs/measurements.md, "Figures behind the speed
# fixes' reasons"; 16 MB of distances a block)
BLOCK = 2000


def effective_min_cluster_size(min_cluster_size: int, n: int) -> int:
    """pyannote's minimum cluster size for ``n`` embeddings: the recipe's, lowered to a tenth of
    the embeddings on very short recordings."""
    return min(int(min_cluster_size), max(1, round(0.1 * n)))


def weighted_centroid_linkage(points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Centroid linkage of ``points`` (m, d) each standing for ``weights`` (m,) embeddings.

    Returns (m - 1, 3) rows ``[a, b, distance]`` in merge order, ``a``/``b`` numbered as scipy
    does (leaves 0..m-1, the cluster made by row i is m + i). Two clusters' distance is the
    Euclidean distance between their weighted means, recomputed from the means after each merge;
    the closest pair is merged first (ties: the lower index). O(m^2) memory, O(m^2 d) time."""
    m = len(points)
    if m < 2:
        return np.zeros((0, 3))
    centroids = np.asarray(points, dtype=np.float64).copy()
    mass = np.asarray(weights, dtype=np.float64).copy()
    sq = np.einsum("ij,ij->i", centroids, centroids)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2.0 * centroids @ centroids.T, 0.0)
    np.fill_diagonal(dist, np.inf)
    nearest = np.argmin(dist, axis=1)
    nearest_d = dist[np.arange(m), nearest]
    ids = np.arange(m)
    alive = np.ones(m, dtype=bool)
    rows = np.zeros((m - 1, 3))
    for step in range(m - 1):
        i = int(np.argmin(nearest_d))
        j = int(nearest[i])
        if j < i:
            i, j = j, i
        rows[step] = (min(ids[i], ids[j]), max(ids[i], ids[j]), np.sqrt(dist[i, j]))
        # the merged cluster takes slot i; slot j is gone
        centroids[i] = (mass[i] * centroids[i] + mass[j] * centroids[j]) / (mass[i] + mass[j])
        mass[i] += mass[j]
        ids[i] = m + step
        alive[j] = False
        dist[j, :] = np.inf
        dist[:, j] = np.inf
        nearest_d[j] = np.inf
        diff = centroids[alive] - centroids[i]
        row = np.full(m, np.inf)
        row[alive] = np.einsum("ij,ij->i", diff, diff)
        row[i] = np.inf
        dist[i, :] = row
        dist[:, i] = row
        # who now has a nearer neighbour in i, and who lost theirs (it was i or j)
        closer = row < nearest_d
        nearest[closer] = i
        nearest_d[closer] = row[closer]
        lost = np.flatnonzero(alive & ~closer & ((nearest == i) | (nearest == j)))
        lost = lost[lost != i]
        if len(lost):
            nearest[lost] = np.argmin(dist[lost], axis=1)
            nearest_d[lost] = dist[lost, nearest[lost]]
        if alive.sum() > 1:
            nearest[i] = int(np.argmin(dist[i]))
            nearest_d[i] = dist[i, nearest[i]]
        else:
            nearest_d[i] = np.inf
    return rows


def _flat_roots(rows: np.ndarray, n: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """For a linkage over ``n`` leaves: which of its rows lie inside the flat clusters that
    scipy's ``fcluster(criterion="distance")`` makes at ``threshold`` (every merge below them at
    most ``threshold`` too), and each leaf's flat cluster as the node id of its top."""
    count = len(rows)
    inside = np.zeros(count, dtype=bool)
    subtree_max = np.zeros(count)
    for r in range(count):  # children come before parents
        a, b, d = int(rows[r, 0]), int(rows[r, 1]), rows[r, 2]
        worst = d
        for child in (a, b):
            if child >= n:
                worst = max(worst, subtree_max[child - n])
        subtree_max[r] = worst
        inside[r] = worst <= threshold
    top = np.arange(n + count)  # each node's top within its flat cluster
    for r in range(count - 1, -1, -1):
        if not inside[r]:
            continue
        node = n + r
        for child in (int(rows[r, 0]), int(rows[r, 1])):
            top[child] = top[node]
    return inside, top[:n]


def blockwise_linkage(embeddings: np.ndarray, threshold: float, block: Optional[int] = None) -> np.ndarray:
    """A centroid-linkage dendrogram over all ``embeddings`` (n, d), unit-normalised or not, in
    scipy's format: (n - 1, 4) rows ``[a, b, distance, size]``, ``size`` counted in embeddings.

    Blocks of ``block`` consecutive rows are linked by scipy's centroid linkage and cut
    at ``threshold``; the merges inside each block's flat clusters are kept, then the clusters
    are merged by :func:`weighted_centroid_linkage`, a block at a time while more than ``block``
    remain, until one is left. Its cut at ``threshold`` is each block's cut joined where blocks'
    clusters lie closer than ``threshold``."""
    from scipy.cluster.hierarchy import linkage  # scipy's own, never pyannote's module attribute

    block = BLOCK if block is None else block
    x = np.asarray(embeddings, dtype=np.float64)
    n = len(x)
    out = np.zeros((max(n - 1, 0), 4))
    size = np.ones(2 * n - 1) if n else np.zeros(0)
    sums = np.zeros((2 * n - 1, x.shape[1])) if n else np.zeros((0, x.shape[1]))
    sums[:n] = x
    filled = 0

    def append(a: int, b: int, distance: float) -> int:
        nonlocal filled
        node = n + filled
        out[filled] = (a, b, distance, size[a] + size[b])
        size[node] = size[a] + size[b]
        sums[node] = sums[a] + sums[b]
        filled += 1
        return node

    # first pass: scipy's linkage inside each block, kept below the threshold
    roots: list[int] = []
    for start in range(0, n, block):
        part = x[start:start + block]
        k = len(part)
        if k == 1:
            roots.append(start)
            continue
        z = linkage(part, method="centroid", metric="euclidean")
        inside, tops = _flat_roots(z[:, :3], k, threshold)
        local = list(range(start, start + k))  # local node id -> global node id
        local += [-1] * (k - 1)
        for r in np.flatnonzero(inside):
            a, b = int(z[r, 0]), int(z[r, 1])
            local[k + r] = append(local[a], local[b], float(z[r, 2]))
        roots += sorted({local[t] for t in tops})
    # then the blocks' clusters, weighted by their embeddings, until one is left
    while len(roots) > 1:
        level: list[int] = []
        whole = len(roots) <= block
        for start in range(0, len(roots), block):
            group = roots[start:start + block]
            if len(group) == 1:
                level += group
                continue
            weights = size[group]
            rows = weighted_centroid_linkage(sums[group] / weights[:, None], weights)
            local = list(group) + [-1] * (len(group) - 1)
            if whole:
                inside = np.ones(len(rows), dtype=bool)
                tops = np.full(len(group), 2 * len(group) - 2)
            else:
                inside, tops = _flat_roots(rows, len(group), threshold)
            for r in np.flatnonzero(inside):
                a, b = int(rows[r, 0]), int(rows[r, 1])
                local[len(group) + r] = append(local[a], local[b], float(rows[r, 2]))
            level += sorted({local[t] for t in tops})
        if len(level) == len(roots):  # nothing merged below the threshold: wider groups
            block *= 2
        roots = level
    return out


def num_large_by_step(dendrogram: np.ndarray, n: int, min_cluster_size: int) -> np.ndarray:
    """How many clusters of at least ``min_cluster_size`` embeddings there are after each row of
    ``dendrogram`` is merged (in row order): what pyannote counts when it cuts the dendrogram by
    iteration index to find a given number of speakers, here for every row in O(n)."""
    size = np.concatenate([np.ones(n), dendrogram[:, 3]])
    large = int(min_cluster_size <= 1) * n
    counts = np.zeros(len(dendrogram), dtype=np.int64)
    for r, (a, b) in enumerate(dendrogram[:, :2].astype(np.int64)):
        large -= int(size[a] >= min_cluster_size) + int(size[b] >= min_cluster_size)
        large += int(size[n + r] >= min_cluster_size)
        counts[r] = large
    return counts


def cluster_centroid(embeddings: np.ndarray, threshold: float, min_cluster_size: int,
                     min_clusters: int, max_clusters: int, num_clusters: Optional[int],
                     metric: str = "cosine", block: Optional[int] = None) -> np.ndarray:
    """pyannote's ``AgglomerativeClustering.cluster`` decision (centroid method) on the blockwise
    dendrogram: 0-based cluster of each of the (n, d) ``embeddings``.

    As pyannote decides: unit-normalise; cut at ``threshold``; clusters of fewer than
    ``min_cluster_size`` embeddings are small; if the number of large clusters is outside
    [``min_clusters``, ``max_clusters``], or differs from ``num_clusters`` when given, the cut is
    moved to the merge step whose count of large clusters is nearest the target (ties: the step
    whose distance is nearest ``threshold``); each small cluster joins the large cluster with the
    nearest centroid."""
    from scipy.cluster.hierarchy import fcluster
    from scipy.spatial.distance import cdist

    x = np.asarray(embeddings, dtype=np.float64)
    n = len(x)
    min_cluster_size = effective_min_cluster_size(min_cluster_size, n)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    dendrogram = blockwise_linkage(x, threshold, block=block)
    clusters = fcluster(dendrogram, threshold, criterion="distance") - 1
    unique, counts = np.unique(clusters, return_counts=True)
    num_large = int((counts >= min_cluster_size).sum())
    if num_large < min_clusters:
        num_clusters = min_clusters
    elif num_large > max_clusters:
        num_clusters = max_clusters
    if num_clusters is not None and num_large != num_clusters:
        large_after = num_large_by_step(dendrogram, n, min_cluster_size)
        eligible = dendrogram[:, 3] >= min_cluster_size  # pyannote skips the other steps
        if eligible.any():
            miss = np.abs(large_after - num_clusters).astype(np.float64)
            miss[~eligible] = np.inf
            best = np.flatnonzero(miss == miss.min())
            step = int(best[np.argmin(np.abs(dendrogram[best, 2] - threshold))])
        else:
            step = n - 2
        by_step = dendrogram.copy()
        by_step[:, 2] = np.arange(n - 1)
        clusters = fcluster(by_step, step, criterion="distance") - 1
        unique, counts = np.unique(clusters, return_counts=True)
    large = unique[counts >= min_cluster_size]
    if len(large) == 0:
        return np.zeros(n, dtype=np.int64)
    small = unique[counts < min_cluster_size]
    if len(small):
        large_centroids = np.vstack([x[clusters == k].mean(axis=0) for k in large])
        small_centroids = np.vstack([x[clusters == k].mean(axis=0) for k in small])
        nearest = np.argmin(cdist(large_centroids, small_centroids, metric=metric), axis=0)
        remap = np.arange(clusters.max() + 1)
        remap[small] = large[nearest]
        clusters = remap[clusters]
    return np.unique(clusters, return_inverse=True)[1]


# A cluster holding less than this share of a long recording's clustered embeddings is a stray
# (overlapped speech, the edge of a turn) when its centroid lies within STRAY_DISTANCE (cosine
# distance) of a larger cluster's: it joins that cluster. The recipe's fixed minimum cluster size
# (12 embeddings) is what lets such strays through on hours of audio, where they gather in
# proportion to the recording; a share of the recording grows with it. Below
# MIN_CLUSTER_SIZE / STRAY_SHARE embeddings (about 15-20 minutes of meeting) the share is under
# the recipe's minimum and nothing changes. A voice of its own lies farther than STRAY_DISTANCE
# from every other and keeps its label, however little it says. Measured with the kit's CAM++ on
# real speech (eval/README.md): the strays of a 4-hour recording lay 0.32 and 0.42 from
# their voice, same-person fragments 0.28-0.34; distinct people 0.50-0.98 apart.
STRAY_SHARE = 0.01
STRAY_DISTANCE = 0.45


def absorb_strays(embeddings: np.ndarray, clusters: np.ndarray, min_cluster_size: int,
                  min_clusters: int = 1, share: Optional[float] = None,
                  distance: Optional[float] = None) -> np.ndarray:
    """``clusters`` (n,) of the (n, d) ``embeddings`` after a cluster smaller than
    max(``min_cluster_size``, ``share`` x n) embeddings whose centroid lies within ``distance``
    (cosine; defaults :data:`STRAY_SHARE`, :data:`STRAY_DISTANCE`) of a larger cluster's centroid has joined the nearest such cluster; smallest first,
    never leaving fewer than ``min_clusters`` clusters. The clusters left are numbered 0.. in the
    order of their old numbers; every other embedding keeps its cluster."""
    share = STRAY_SHARE if share is None else share
    distance = STRAY_DISTANCE if distance is None else distance
    clusters = np.asarray(clusters)
    n = len(clusters)
    if n == 0:
        return clusters
    floor = max(effective_min_cluster_size(min_cluster_size, n), int(np.ceil(share * n)))
    unique, counts = np.unique(clusters, return_counts=True)
    large = unique[counts >= floor]
    small = unique[counts < floor][np.argsort(counts[counts < floor], kind="stable")]
    if len(large) == 0 or len(small) == 0:
        return clusters
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.asarray(embeddings, dtype=np.float64)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)

    def centre(k) -> np.ndarray:
        c = np.nanmean(x[clusters == k], axis=0)
        return c / (np.linalg.norm(c) or 1.0)

    centres = np.vstack([centre(k) for k in large])
    out = clusters.copy()
    left = len(unique)
    for k in small:
        if left <= min_clusters:
            break
        d = 1.0 - centres @ centre(k)
        j = int(np.argmin(d))
        if d[j] < distance:
            out[clusters == k] = large[j]
            left -= 1
    return np.unique(out, return_inverse=True)[1].astype(clusters.dtype, copy=False)
