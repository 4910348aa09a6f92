"""k-means over learning-effect features (docs/architecture.md, "Layers"): pure functions on numpy arrays.

The stage, in the order commands/cluster.py calls it (the matrix comes from io/readers.read_embeddings; the
k-means itself is in kmeans.py; the groups of clusters and the split of mixed ones in cluster_groups.py):

    normalise_features(x, center=False)      # in place: (optionally mean-centred, then) L2-normalised rows
    result = cluster_features(x, k, ...)     # spherical k-means trained on a sample, every row assigned in
                                             # batches, optional soft cap on cluster sizes

Spherical k-means (unit-norm centroids, cosine similarity) on L2-normalised rows, whatever produced the
features: the paper mean-centres on one GPU and L2-normalises on several, so the same data got two different
clusterings; here the normalisation is one explicit choice (`center`) recorded in the artifact.

Nothing here knows about files or the CLI.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from cluster_curate.errors import CurateError
from cluster_curate.kmeans import DEFAULT_BATCH_ROWS, assign_in_batches, kmeans_faiss, resolve_gpus

# --k auto: see auto_k().
# The version of this stage's algorithm: part of every artifact's fingerprint and of `run`'s up-to-date check.
# Bump it when the same inputs and options give a different output (docs/architecture.md, "Lineage").
ALGORITHM_VERSION = 1
AUTO_K_RULE = "ceil(sqrt(n)), at most n // 2 (at least 1)"

# Soft cap: a row that does not fit moves to the nearest of this many closest other centroids with room.
CAP_CANDIDATES = 8


# ------------------------------------------------------------------------------------------ choices

def auto_k(n: int) -> int:
    """The `--k auto` rule: k = ceil(sqrt(n)), at most n // 2, at least 1.

    Why: selection gives every cluster a similar quota, so a rare skill is only protected if it gets a
    cluster of its own. k-means with k close to the number of natural groups tends to split a dominant group
    into several clusters and lump rare groups together (a probe on skill-mixture data), so k should be
    *larger* than the number of groups one expects. sqrt(n) is sqrt(2) x the classic k ~ sqrt(n/2) rule of
    thumb: 8 clusters of ~6 rows at n = 50, 100 clusters at 10k, 1,000 at 1M, 7,072 at 50M -- more than the
    tens to hundreds of skills an instruction dataset usually mixes, while clusters stay large enough
    (sqrt(n) rows on average) for a within-cluster ranking to mean something. n // 2 keeps at least two rows
    per cluster on average for tiny inputs.
    """
    if n <= 0:
        raise CurateError("cannot choose k for an empty input")
    return max(1, min(n // 2, math.ceil(math.sqrt(n))))


# ------------------------------------------------------------------------------------------ features

def first_non_finite_row(x: np.ndarray, chunk_rows: int = DEFAULT_BATCH_ROWS) -> int | None:
    """Index of the first row holding NaN or ±Inf, or None (checked in chunks: no full-size mask)."""
    for s in range(0, len(x), chunk_rows):
        bad = ~np.isfinite(x[s:s + chunk_rows]).all(axis=1)
        if bad.any():
            return s + int(np.argmax(bad))
    return None


def normalise_features(x: np.ndarray, center: bool = False, chunk_rows: int = DEFAULT_BATCH_ROWS) -> dict:
    """In place: subtract the column mean (when `center`), then scale every row to unit L2 norm.

    Rows of norm zero stay zero (similarity 0 to every centroid); how many is returned, with the name of
    the normalisation ("l2" or "center+l2"). Works chunk by chunk so no second [n, d] array is made.
    """
    if x.dtype != np.float32 or not x.flags.c_contiguous or not x.flags.writeable:
        raise ValueError("normalise_features needs a writeable C-contiguous float32 matrix")
    if center and len(x):
        total = np.zeros(x.shape[1], dtype=np.float64)
        for s in range(0, len(x), chunk_rows):
            total += x[s:s + chunk_rows].sum(axis=0, dtype=np.float64)
        mean = (total / len(x)).astype(np.float32)
        for s in range(0, len(x), chunk_rows):
            x[s:s + chunk_rows] -= mean
    zero_rows = 0
    for s in range(0, len(x), chunk_rows):
        block = x[s:s + chunk_rows]
        norms = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64)).astype(np.float32)
        zero = norms == 0
        zero_rows += int(zero.sum())
        norms[zero] = 1.0
        block /= norms[:, None]
    return {"normalisation": "center+l2" if center else "l2", "zero_rows": zero_rows}


def mean_resultant_length(x: np.ndarray, chunk_rows: int = DEFAULT_BATCH_ROWS) -> float:
    """Norm of the mean of unit rows, in [0, 1]: near 1 when all features share one dominant direction
    (gradient features often do), so that cosine similarities are all close to 1 and only `--center`
    lets k-means see the differences."""
    if len(x) == 0:
        return 0.0
    total = np.zeros(x.shape[1], dtype=np.float64)
    for s in range(0, len(x), chunk_rows):
        total += x[s:s + chunk_rows].sum(axis=0, dtype=np.float64)
    return float(np.linalg.norm(total / len(x)))


# ------------------------------------------------------------------------------------------ soft cap

def size_cap(n: int, k: int, max_size_factor: float) -> int:
    """ceil(A·n/k): the most rows a cluster may hold under `--max-size-factor A` (A >= 1 so all rows fit)."""
    if max_size_factor < 1.0:
        raise CurateError(f"--max-size-factor must be >= 1 (k clusters of at most A·n/k rows must hold all "
                          f"n rows), got {max_size_factor}")
    # the small epsilon keeps 1.5 * 300 / 3 = 150.00000000000003 from becoming 151
    return int(math.ceil(max_size_factor * n / k - 1e-9))


def cap_cluster_sizes(x: np.ndarray, centroids: np.ndarray, labels: np.ndarray, similarity: np.ndarray,
                      max_size: int, candidates: int = CAP_CANDIDATES, gpus: int = 0,
                      batch_rows: int = DEFAULT_BATCH_ROWS) -> tuple[np.ndarray, np.ndarray, int]:
    """Soft cap: no cluster keeps more than `max_size` rows. Returns (labels, similarity, moved).

    In an over-full cluster the `max_size` rows most similar to its centroid stay; the others (its periphery)
    move. They are placed greedily, most confident first (highest similarity to their nearest other
    centroid), each to the nearest of its `candidates` closest other centroids that still has room, or
    failing that to the most similar centroid anywhere that has room. Deterministic (ties by row index).
    """
    k = len(centroids)
    n = len(labels)
    if max_size * k < n:
        raise CurateError(f"a cap of {max_size} rows on {k} clusters cannot hold {n} rows")
    sizes = np.bincount(labels, minlength=k)
    full = np.flatnonzero(sizes > max_size)
    if len(full) == 0:
        return labels, similarity, 0
    labels = labels.copy()
    similarity = similarity.copy()

    # rows of the over-full clusters, each cluster's rows by similarity to its centroid (best first)
    members = np.flatnonzero(np.isin(labels, full))
    members = members[np.lexsort((members, -similarity[members], labels[members]))]
    member_labels = labels[members]
    first = np.searchsorted(member_labels, member_labels, side="left")
    leaving = members[np.arange(len(members)) - first >= max_size]

    room = (max_size - np.minimum(sizes, max_size)).astype(np.int64)
    room[full] = 0
    cand, cand_sim = assign_in_batches(x, centroids, batch_rows, gpus, rows=leaving, topk=candidates + 1)
    if cand.ndim == 1:
        cand, cand_sim = cand[:, None], cand_sim[:, None]
    own = labels[leaving][:, None]
    not_own = cand != own
    # best other centroid's similarity, for the processing order
    best_other = np.where(not_own, cand_sim, -np.inf).max(axis=1)
    order = np.lexsort((leaving, -best_other))

    room_list = room.tolist()
    cand_list, sim_list, own_list = cand.tolist(), cand_sim.tolist(), labels[leaving].tolist()
    new_label = np.empty(len(leaving), dtype=np.int32)
    new_sim = np.empty(len(leaving), dtype=np.float32)
    fallback = []
    for i in order.tolist():
        o, placed, tried = own_list[i], False, 0
        for c, s in zip(cand_list[i], sim_list[i]):
            if c == o or c < 0:
                continue
            tried += 1
            if tried > candidates:
                break
            if room_list[c] > 0:
                room_list[c] -= 1
                new_label[i], new_sim[i], placed = c, s, True
                break
        if not placed:
            fallback.append(i)
    if fallback:
        # rare (only when all `candidates` nearest centroids are full): most similar centroid with room
        room = np.asarray(room_list, dtype=np.int64)
        fb = np.asarray(fallback)
        for s in range(0, len(fb), batch_rows):
            part = fb[s:s + batch_rows]
            sims = x[leaving[part]] @ centroids.T
            for j, i in enumerate(part.tolist()):
                row = np.where(room > 0, sims[j], -np.inf)
                c = int(np.argmax(row))
                room[c] -= 1
                new_label[i], new_sim[i] = c, sims[j, c]
    labels[leaving] = new_label
    similarity[leaving] = new_sim
    return labels, similarity, int(len(leaving))


# ------------------------------------------------------------------------------------------ the stage

@dataclass
class ClusteringResult:
    labels: np.ndarray             # [n] int32
    similarity: np.ndarray         # [n] float32: cosine to the assigned centroid
    centroids: np.ndarray          # [k, d] float32, unit norm
    k: int
    sample_size: int
    iters: int
    seed: int
    gpus: int
    cap: int | None                # max rows per cluster, None without a cap
    moved: int                     # rows moved by the cap
    objective: float               # mean cosine similarity to the assigned centroid, all rows (after the cap)
    objective_uncapped: float      # the same before the cap
    train_objective: float         # mean cosine similarity on the training sample (faiss's last iteration)
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _no_progress(description: str, total: float | None = None, unit: str = "rows"):
    """cluster_features' default `progress`: console.progress's interface, showing nothing."""
    return nullcontext(SimpleNamespace(advance=lambda n=1, **_: None))


def cluster_features(x: np.ndarray, k: int, iters: int = 20, seed: int = 0, sample_size: int | None = None,
                     gpus: int | None = None, max_size_factor: float | None = None,
                     batch_rows: int = DEFAULT_BATCH_ROWS, progress=_no_progress) -> ClusteringResult:
    """Spherical k-means on L2-normalised rows x (see normalise_features): train on a sample, assign every
    row in batches, then apply the soft cap when `max_size_factor` is given. `progress`: console.progress (a
    bar over the training's iterations, then one over the assignment's rows), or nothing shown by default."""
    n = len(x)
    if n == 0:
        raise CurateError("no rows to cluster")
    if not 1 <= k <= n:
        raise CurateError(f"k = {k} is larger than the number of rows ({n})" if k > n else f"k must be >= 1, got {k}")
    if iters < 1:
        raise CurateError(f"--iters must be >= 1, got {iters}")
    cap = size_cap(n, k, max_size_factor) if max_size_factor is not None else None
    ngpu = resolve_gpus(gpus)
    with progress("k-means: train", total=iters, unit="iterations") as bar:
        model = kmeans_faiss(x, k, iters=iters, seed=seed, sample_size=sample_size, gpus=ngpu,
                             on_iteration=bar.advance)
    with progress("k-means: assign", total=n, unit="rows") as bar:
        labels, sims = assign_in_batches(x, model.centroids, batch_rows, ngpu, on_batch=bar.advance)
    uncapped = float(sims.mean(dtype=np.float64))
    moved = 0
    if cap is not None:
        labels, sims, moved = cap_cluster_sizes(x, model.centroids, labels, sims, cap, gpus=ngpu,
                                                batch_rows=batch_rows)
    return ClusteringResult(labels=labels, similarity=sims, centroids=model.centroids, k=k,
                            sample_size=model.sample_size, iters=iters, seed=seed, gpus=ngpu, cap=cap, moved=moved,
                            objective=float(sims.mean(dtype=np.float64)), objective_uncapped=uncapped,
                            train_objective=model.train_objective, sizes=np.bincount(labels, minlength=k))


# ------------------------------------------------------------------------------------------ reporting

SIZE_BINS = [(0.0, 0.25), (0.25, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, math.inf)]




def size_stats(sizes: np.ndarray) -> dict:
    """Cluster-size spread in numbers a reader can take in at a glance: min / median / max, max ÷ min, and
    how many clusters fall in each band of size relative to the mean (n / k)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    k, n = len(sizes), int(sizes.sum())
    mean = n / k if k else 0.0
    rel = sizes / mean if mean else np.zeros(k)
    hist = {}
    for lo, hi in SIZE_BINS:
        label = f"{lo:g}-{hi:g}x mean" if hi != math.inf else f">={lo:g}x mean"
        hist[label] = int(((rel >= lo) & (rel < hi)).sum())
    return {
        "min": int(sizes.min()) if k else 0,
        "median": float(np.median(sizes)) if k else 0.0,
        "max": int(sizes.max()) if k else 0,
        "mean": mean,
        "max_over_min": size_ratio(sizes),
        "empty": int((sizes == 0).sum()),
        "histogram": hist,
    }


# how `cluster` and `report` label size_ratio (the empty clusters are a line of their own)
SIZE_RATIO_LABEL = "largest ÷ smallest non-empty"


def size_ratio(sizes) -> float:
    """Largest ÷ smallest size of the clusters that hold rows (NaN when none does): the empty ones are counted
    apart (size_stats' `empty`), since against an empty cluster any spread is infinite (or, divided by 1, the
    largest size, a figure of nothing)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    nonzero = sizes[sizes > 0]
    return float(sizes.max() / nonzero.min()) if len(nonzero) else float("nan")


def groups_holding_rows(group_of, sizes) -> int:
    """How many groups of clusters hold rows: a group made only of empty clusters holds none (and no quota)."""
    group_of, sizes = np.asarray(group_of, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    return len(np.unique(group_of[sizes > 0]))


# Above this share of the rows in one cluster (with at least DOMINANT_MIN_K clusters) the features hardly
# separate the data: most of it gets one cluster's quota.
DOMINANT_SHARE = 0.5
DOMINANT_MIN_K = 4
# With a given --k (the paper's k = number of ranks), a largest ÷ smallest above this makes equal quotas take
# the small clusters whole and thin the large ones out hard.
GIVEN_K_MAX_OVER_MIN = 10.0


def uneven_sizes_warning(sizes: np.ndarray, k_given: bool, grouped: bool) -> str | None:
    """The cluster-size warning, only when it asks for something (issue 20 #9), else None.

    `--k auto` over-clusters on purpose (more clusters than natural groups, so rare ones get their own), and
    then uneven sizes are expected: the demo has largest ÷ smallest 61 and real datasets 10-13 with nothing
    to fix. What remains worth a warning: (1) one cluster holding most rows, whatever the k rule, which means
    the features barely separate the data; (2) a given, small --k without groups, where equal quotas decide
    the mix and uneven sizes change it most."""
    sizes = np.asarray(sizes, dtype=np.int64)
    k, n = len(sizes), int(sizes.sum())
    if k < 2 or n == 0:
        return None
    largest = int(sizes.max())
    if k >= DOMINANT_MIN_K and largest > DOMINANT_SHARE * n:
        return (f"one cluster holds {largest / n:.0%} of the rows ({largest} of {n}, k = {k}): the features barely "
                "separate the data, so most of it gets one cluster's quota; try --center, other --features, "
                "or --max-size-factor")
    ratio = size_ratio(sizes)
    if k_given and not grouped and ratio > GIVEN_K_MAX_OVER_MIN:
        return (f"cluster sizes are very uneven for a given --k {k} (largest ÷ smallest = {ratio:.0f}): equal "
                "quotas will take the small clusters whole and thin out the large ones; consider "
                "--max-size-factor, or --balance-power in select")
    return None
