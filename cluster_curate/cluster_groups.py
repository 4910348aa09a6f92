"""Groups of clusters and the split of mixed clusters (docs/architecture.md, "Layers"): pure functions
on a clustering's result, after k-means (clustering.py).

    groups = group_clusters(res.centroids, min_similarity=group_cut_similarity(res, "row"))   # cluster --groups
    res, cuts = split_mixed_clusters(x, res, group_cut_similarity(res, "pair"))            # cluster --split-mixed

Both correct what k-means does on skewed data (it spends its centroids where the rows are dense): a dominant
kind split into many clusters is joined back into one group for the quotas; two rare kinds sharing one cluster
are cut apart. Part of the `cluster` stage: a change here that changes its output bumps
clustering.ALGORITHM_VERSION.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from cluster_curate.clustering import ClusteringResult
from cluster_curate.errors import CurateError
from cluster_curate.kmeans import assign_in_batches, kmeans_faiss

# --groups auto: where the average-linkage tree of the centroids is cut (--group-cut); see group_cut_similarity().
GROUP_CUTS = {
    "row": "clusters join one group while their centroids are, on average, at least as similar to one another as "
           "a row is to its own centroid (the clustering's mean similarity)",
    "pair": "clusters join one group while their centroids are, on average, at least as similar to one another as "
            "two rows of one cluster are (size-weighted mean of each cluster's squared mean similarity)",
}

# --split-mixed: see split_mixed_clusters().
SPLIT_MIN_ROWS = 16
SPLIT_RULE = ("a cluster is cut in two (2-means inside it, then again inside each half) while both halves have at "
              f"least {SPLIT_MIN_ROWS} rows and their centroids are less similar than two rows of one cluster "
              "typically are (the pair cut)")


def split_mixed_clusters(x: np.ndarray, res: ClusteringResult, min_similarity: float,
                         min_rows: int = SPLIT_MIN_ROWS) -> tuple[ClusteringResult, int]:
    """Cut every cluster that holds two kinds of rows in two, recursively (SPLIT_RULE). Returns the refined
    result (k grows by the number of cuts; new clusters are numbered after the old ones) and that number.

    Why: k-means spends its centroids where the rows are dense, so the small kinds share clusters (two rare
    tasks whose prompts differ by one word land in one cluster, and then share one quota) while a dominant kind
    gets many. A cluster is cut only when its 2-means halves are less alike than two rows of one cluster
    typically are (`min_similarity`, the pair cut of group_cut_similarity): halves of one diverse kind stay
    together, because a centroid averages its rows' differences away. x: the L2-normalised rows that `res`
    clustered. The 2-means runs on the CPU: a cluster is small."""
    labels, sims = res.labels.copy(), res.similarity.copy()
    centroids = list(res.centroids)
    order = np.argsort(labels, kind="stable")
    queue = list(zip(range(res.k), np.split(order, np.cumsum(res.sizes)[:-1])))
    cuts = 0
    while queue:
        c, members = queue.pop()
        if len(members) < 2 * min_rows:
            continue
        rows = np.ascontiguousarray(x[members], dtype=np.float32)
        halves = kmeans_faiss(rows, 2, iters=res.iters, seed=res.seed, gpus=0).centroids
        half, sim = assign_in_batches(rows, halves)
        if np.bincount(half, minlength=2).min() < min_rows or float(halves[0] @ halves[1]) >= min_similarity:
            continue
        new = len(centroids)
        centroids[c] = halves[0]
        centroids.append(halves[1])
        labels[members[half == 1]] = new
        sims[members] = sim
        queue += [(c, members[half == 0]), (new, members[half == 1])]
        cuts += 1
    if not cuts:
        return res, 0
    k = len(centroids)
    return replace(res, labels=labels, similarity=sims, centroids=np.stack(centroids).astype(np.float32), k=k,
                   objective=float(sims.mean(dtype=np.float64)), sizes=np.bincount(labels, minlength=k)), cuts


def check_group_count(n_groups: int, k: int) -> None:
    """--groups G is a number of groups of the k clusters (also checked by `run` before embed, for a given --k)."""
    if not 1 <= n_groups <= k:
        raise CurateError(f"--groups {n_groups} must be between 1 and k = {k}")


def group_clusters(centroids: np.ndarray, n_groups: int | None = None,
                   min_similarity: float | None = None) -> np.ndarray:
    """Coarse groups of clusters: average-linkage agglomeration of the (unit) centroids on cosine distance, cut
    into `n_groups` groups, or where the average similarity between two groups falls below `min_similarity`
    (`--groups auto` passes group_cut_similarity()). Returns each cluster's group, numbered 0.. in order of first
    appearance.

    Why: k-means on skewed data splits a dominant kind of example into many clusters, so equal per-cluster
    quotas favour that kind; quotas water-filled over groups first (select) let its pieces share one quota.
    Why a similarity cut for auto: two clusters whose centroids are as close as a row typically is to its own
    centroid (GROUP_CUTS) are pieces of one kind, not two kinds. Deterministic (no seed): the same centroids give
    the same groups."""
    from scipy.cluster.hierarchy import fcluster, linkage

    k = len(centroids)
    if (n_groups is None) == (min_similarity is None):
        raise ValueError("give exactly one of n_groups and min_similarity")
    if n_groups is not None:
        check_group_count(n_groups, k)
    if k < 2:
        return np.zeros(k, dtype=np.int64)
    c = np.asarray(centroids, dtype=np.float64)
    distance = np.clip(1.0 - c @ c.T, 0.0, 2.0)
    condensed = distance[np.triu_indices(k, 1)]  # scipy's condensed order: row-major upper triangle
    tree = linkage(condensed, method="average")
    flat = (fcluster(tree, t=n_groups, criterion="maxclust") if n_groups is not None
            else fcluster(tree, t=1.0 - min_similarity, criterion="distance"))
    return numbered_by_first_appearance(flat)


def numbered_by_first_appearance(labels) -> np.ndarray:
    """Labels renumbered 0, 1, ... in the order each first appears: the numbering follows the order of what is
    labelled, not the label values (fcluster's, a join's) that produced it."""
    _, first, inverse = np.unique(np.asarray(labels), return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse.ravel()].astype(np.int64)


def group_cut_similarity(res: ClusteringResult, cut: str) -> float:
    """The similarity at which `--groups auto` cuts the tree of centroids (GROUP_CUTS[cut]).

    `pair` uses that the mean cosine between two unit rows of one cluster is |mean row|², and a cluster's mean
    similarity to its (unit, mean-direction) centroid is |mean row|: so it is Σ_c n_c·s_c² / n."""
    if cut == "row":
        return float(res.objective)
    if cut == "pair":
        sizes = res.sizes.astype(np.float64)
        sums = np.bincount(res.labels, weights=res.similarity.astype(np.float64), minlength=res.k)
        mean_sim = np.divide(sums, sizes, out=np.zeros_like(sums), where=sizes > 0)
        return float((sizes * mean_sim ** 2).sum() / max(sizes.sum(), 1.0))
    raise CurateError(f"--group-cut must be one of {', '.join(GROUP_CUTS)}, got {cut!r}")
