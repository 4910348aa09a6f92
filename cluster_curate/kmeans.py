"""Spherical k-means with faiss, and the assignment of rows to their nearest centroids (docs/architecture.md,
"Layers"): pure functions on numpy arrays, called by clustering.py (the `cluster` stage) and cluster_groups.py.

    model = kmeans_faiss(x, k, iters, seed, sample_size, gpus)    # k-means++ start, trained on a seeded sample
    labels, sims = assign_in_batches(x, model.centroids)          # every row, one batch at a time

faiss does the heavy lifting (BLAS GEMMs on CPU, CUDA on GPU); a change here that changes the clustering bumps
clustering.ALGORITHM_VERSION.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from cluster_curate.errors import CurateError


# Training sample: see training_sample_size().
SAMPLE_PER_CENTROID = 128
SAMPLE_MIN_PAIRS = 1 << 24
SAMPLE_RULE = (f"min(n, max({SAMPLE_PER_CENTROID} * k, ceil({SAMPLE_MIN_PAIRS} / k))): at least "
               f"{SAMPLE_PER_CENTROID} rows per centroid, and small k train on many more rows")

DEFAULT_BATCH_ROWS = 65536


def training_sample_size(n: int, k: int) -> int:
    """Rows k-means trains on: min(n, max(128·k, ceil(2^24 / k))).

    Why: faiss by default trains on at most 256 rows per centroid, which for the paper's small k (k = number
    of GPUs, say 4) means 1,024 rows of a million -- a rare group may not be in the sample at all. A cost
    floor fixes that: the work of one iteration is sample × k × d, so we spend at least 2^24 row-centroid
    pairs: k = 4 trains on 4.2M rows, k = 64 on 262k. For large k the sample is 128 rows per centroid, close
    to training on every row where 64 or 32 were not (benchmarks/results/code_figures.md). Every row is then assigned to its nearest centroid, in batches.
    """
    if n <= 0 or k <= 0:
        return 0
    return int(min(n, max(SAMPLE_PER_CENTROID * k, math.ceil(SAMPLE_MIN_PAIRS / k))))


def resolve_gpus(gpus: int | None) -> int:
    """Number of GPUs faiss should use: all it sees when None, never more than it sees."""
    from cluster_curate.faiss_build import import_faiss
    faiss = import_faiss()

    available = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if gpus is None:
        return available
    if gpus < 0:
        raise CurateError(f"--gpus must be >= 0, got {gpus}")
    if gpus > available:
        raise CurateError(f"--gpus {gpus}: faiss sees only {available} GPU(s)"
                          + (" (is faiss-gpu installed?)" if available == 0 else ""))
    return gpus


@dataclass
class KMeansModel:
    centroids: np.ndarray          # [k, d] float32, unit norm when spherical
    sample_size: int               # rows trained on
    train_objective: float         # mean similarity (spherical) or squared distance on the training sample
    objective_history: list = field(default_factory=list)


INIT_ROWS_PER_CENTROID = 8
INIT_MIN_ROWS = 4096
INIT_ROUNDS = 64


def _sq_distances(pool: np.ndarray, pool_sq: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances [len(pool), len(c)] (float32, clipped at 0), through one GEMM."""
    d2 = pool @ c.T
    d2 *= -2
    d2 += np.einsum("ij,ij->i", c, c)[None, :]
    d2 += pool_sq[:, None]
    return np.maximum(d2, 0, out=d2)


def initial_centroids(sample: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Greedy k-means++ seeding on a random subset of max(8·k, 4096) rows of the training sample.

    Each new centre is the best of 2 + ln(k) candidates drawn ∝ D² (the one that lowers the total squared
    distance most: scikit-learn's greedy k-means++), in at most 64 rounds: exact for k <= 64; larger k pick
    ceil(k/64) centres per round and update the distances with one matrix product, like k-means||.

    Why not faiss's default (k random rows): with k close to the number of natural groups a random start
    often puts two centroids in one group and leaves two groups to share one, and 20 Lloyd iterations do not
    undo it; the greedy trials lower the final objective further (benchmarks/results/code_figures.md).
    The cost, ~8·k²·d·(2 + ln k) multiply-adds in GEMMs, stays a small share of the training. Returned
    explicitly so that a benchmark can hand the very same start to another implementation.
    """
    rng = np.random.default_rng([seed, 1])
    m = min(len(sample), max(INIT_ROWS_PER_CENTROID * k, INIT_MIN_ROWS))
    pool = sample if m == len(sample) else sample[np.sort(rng.choice(len(sample), size=m, replace=False))]
    pool = np.ascontiguousarray(pool, dtype=np.float32)
    pool_sq = np.einsum("ij,ij->i", pool, pool)
    per_round = -(-k // INIT_ROUNDS)
    trials = 2 + int(math.log(k))
    chosen = [int(rng.integers(m))]
    taken = np.zeros(m, dtype=bool)
    taken[chosen] = True
    dist = np.full(m, np.inf, dtype=np.float32)
    new = np.array(chosen)
    while True:
        np.minimum(dist, _sq_distances(pool, pool_sq, pool[new]).min(axis=1), out=dist)
        dist[new] = 0
        want = min(per_round, k - len(chosen))
        if want == 0:
            break
        total = float(dist.sum(dtype=np.float64))
        if total <= 0:  # fewer distinct rows than centres: take unused rows (or repeat rows)
            unused = np.flatnonzero(~taken)
            new = unused[:want] if len(unused) >= want else rng.choice(m, size=want)
        else:
            cand = rng.choice(m, size=want * trials, p=dist.astype(np.float64) / total)
            potential = np.empty(len(cand))
            for s in range(0, len(cand), 256):  # what each candidate would leave of the total
                potential[s:s + 256] = np.minimum(_sq_distances(pool, pool_sq, pool[cand[s:s + 256]]),
                                                  dist[:, None]).sum(axis=0, dtype=np.float64)
            best = cand.reshape(want, trials)[np.arange(want), potential.reshape(want, trials).argmin(axis=1)]
            new = np.unique(best[~taken[best]])  # two picks of one row count once; later rounds fill up
        taken[new] = True
        chosen.extend(int(j) for j in new)
    return pool[np.asarray(chosen[:k])].copy()


def training_sample(x: np.ndarray, sample_size: int, seed: int) -> np.ndarray:
    """The rows k-means trains on: all of x (no copy) or a seeded random subset in row order (a copy)."""
    n = len(x)
    if sample_size >= n:
        return x
    rng = np.random.default_rng([seed, 0])
    return x[np.sort(rng.choice(n, size=sample_size, replace=False))]


def kmeans_faiss(x: np.ndarray, k: int, iters: int = 20, seed: int = 0, sample_size: int | None = None,
                 gpus: int | None = None, spherical: bool = True, init: np.ndarray | None = None,
                 on_iteration=None) -> KMeansModel:
    """Train k-means with faiss on a sample of x (see training_sample_size for the default size).

    spherical=True: centroids are renormalised after every iteration and rows are compared by inner product
    (cosine for unit rows). gpus: number of GPUs (None = all faiss sees, 0 = CPU); the code path is the same,
    faiss only puts its flat index on the GPU(s). init: starting centroids (default: initial_centroids).
    on_iteration(n): called as iterations finish (n = 1; none for the iterations an early convergence leaves).
    """
    from cluster_curate.faiss_build import import_faiss
    faiss = import_faiss()

    n, d = x.shape
    if not 1 <= k <= n:
        raise CurateError(f"k = {k} is not between 1 and the number of rows ({n})")
    size = training_sample_size(n, k) if sample_size is None else int(min(max(sample_size, k), n))
    sample = np.ascontiguousarray(training_sample(x, size, seed), dtype=np.float32)
    init = initial_centroids(sample, k, seed) if init is None else np.ascontiguousarray(init, dtype=np.float32)
    ngpu = resolve_gpus(gpus)
    # the only GPU-specific line: the same flat index, on the GPU(s) (faiss.Kmeans(gpu=1) would take all)
    index = faiss.IndexFlatIP(d) if spherical else faiss.IndexFlatL2(d)
    if ngpu > 0:
        index = faiss.index_cpu_to_all_gpus(index, ngpu=ngpu)
    with _faiss_threads(None if ngpu else size * k * d):
        centroids, objectives = _lloyd(faiss, sample, init, iters, seed, spherical, index,
                                       on_iteration or (lambda n: None))
    history = [obj / size for obj in objectives]
    return KMeansModel(centroids=np.ascontiguousarray(centroids, dtype=np.float32), sample_size=size,
                       train_objective=history[-1] if history else float("nan"), objective_history=history)


def _lloyd(faiss, sample: np.ndarray, init: np.ndarray, iters: int, seed: int, spherical: bool, index,
           on_iteration) -> tuple[np.ndarray, list[float]]:
    """faiss's Clustering.train with niter = iters, run one iteration per call so that progress can be told
    between iterations (a long training was minutes of silence), with the same centroids and objectives bit for
    bit (tests/test_progress_qa_round55.py). Two things a one-iteration call cannot do are done here instead:
    the spherical renormalisation (faiss renormalises a call's input centroids, and renormalising unit rows again
    changes their last bits, so each call gets them raw and they are renormalised here with faiss's own
    fvec_renorm_L2, once, as faiss would), and the early stop on an unchanged objective (faiss >= 1.14.2,
    ClusteringParameters.early_stop_threshold). Returns the centroids and each iteration's summed objective."""
    size, d = sample.shape
    k = len(init)
    cp = faiss.ClusteringParameters()
    cp.niter, cp.seed, cp.spherical, cp.verbose = 1, int(seed) & 0x7FFFFFFF, False, False
    # we chose the sample: stop faiss from subsampling it again or warning about its size
    cp.max_points_per_centroid, cp.min_points_per_centroid = size // k + 1, 1
    threshold = getattr(cp, "early_stop_threshold", None)
    centroids = np.array(init, dtype=np.float32, order="C")
    if spherical:
        faiss.normalize_L2(centroids)
    objectives: list[float] = []
    for i in range(iters):
        clus = faiss.Clustering(d, k, cp)
        faiss.copy_array_to_vector(centroids.ravel(), clus.centroids)
        clus.train(sample, index)
        out = faiss.vector_float_to_array(clus.centroids).reshape(k, d)
        objectives.append(float(clus.iteration_stats.at(0).obj))
        on_iteration(1)  # an iteration's objective recorded: the bar counts what ran, not what was asked
        if size == k:  # faiss's corner case: the sample is the centroids, as they are, after no iteration
            return out, objectives
        centroids = np.ascontiguousarray(out)
        if spherical:
            faiss.normalize_L2(centroids)
        if threshold is not None and i > 0:  # faiss's test, in its float32 arithmetic
            prev, obj = np.float32(objectives[-2]), np.float32(objectives[-1])
            if prev != 0 and float(np.abs(prev - obj) / np.abs(prev)) <= threshold:
                break  # converged: the bar stops at the iterations that ran
    return centroids, objectives


# Below this many multiply-adds per k-means iteration (~30 ms on one core) faiss runs on one thread: OpenMP's
# per-iteration barriers cost more than they save on small inputs, and far more on a busy machine
# (benchmarks/results/code_figures.md).
SMALL_WORK = 1 << 26


@contextmanager
def _faiss_threads(work: int | None):
    """One faiss thread while the block runs when `work` (multiply-adds per pass) is small; None: leave as is."""
    from cluster_curate.faiss_build import import_faiss
    faiss = import_faiss()

    if work is None or work >= SMALL_WORK or not hasattr(faiss, "omp_set_num_threads"):
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _ip_index(centroids: np.ndarray, gpus: int):
    from cluster_curate.faiss_build import import_faiss
    faiss = import_faiss()

    index = faiss.IndexFlatIP(centroids.shape[1])
    if gpus > 0:
        index = faiss.index_cpu_to_all_gpus(index, ngpu=gpus)
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    return index


def assign_in_batches(x: np.ndarray, centroids: np.ndarray, batch_rows: int = DEFAULT_BATCH_ROWS,
                      gpus: int = 0, rows: np.ndarray | None = None, topk: int = 1, on_batch=None):
    """Nearest centroid(s) by inner product for every row of x (or only `rows`), `batch_rows` at a time.

    Returns (labels, similarities): int32 / float32 of shape [m] for topk = 1, [m, topk] otherwise, best
    first. Memory beyond x: the outputs and one batch. on_batch(rows): called after each batch.
    """
    index = _ip_index(centroids, gpus)
    m = len(x) if rows is None else len(rows)
    topk = min(topk, len(centroids))
    labels = np.empty((m, topk), dtype=np.int32)
    sims = np.empty((m, topk), dtype=np.float32)
    with _faiss_threads(None if gpus else min(m, batch_rows) * len(centroids) * x.shape[1]):
        for s in range(0, m, batch_rows):
            e = min(s + batch_rows, m)
            block = x[s:e] if rows is None else x[rows[s:e]]
            dist, idx = index.search(np.ascontiguousarray(block, dtype=np.float32), topk)
            labels[s:e] = idx
            sims[s:e] = dist
            if on_batch is not None:
                on_batch(e - s)
    if topk == 1:
        return labels[:, 0].copy(), sims[:, 0].copy()
    return labels, sims
