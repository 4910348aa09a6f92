"""Orders inside a cluster (docs/architecture.md, "Extension points"): which rows of a cluster `select` takes
first, as pure functions on numpy arrays.

    order = order_within_cluster(clusters, within, ...)   # rows grouped by cluster, each in `--within` order
    keep  = dedup_within_cluster(features, order, ...)    # optional near-duplicate removal, along that order
    picks = k_center_greedy(x, quota)                     # `diverse`: a cluster's rows chosen by their features
    order, keys, short = auto_order(answers, words)       # `--within auto` (the default): answers or random

An order is one sort of a key per row (vectorised); only `diverse` and `dedup` loop over clusters, and they
need the feature vectors. selection.py takes each cluster's quota of rows in this order; a change here that
changes what is selected bumps selection.ALGORITHM_VERSION.
"""

from __future__ import annotations

import numpy as np

from cluster_curate.errors import CurateError
from cluster_curate.registry import Registry


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a uint64 array (wrapping arithmetic)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def random_keys(ids: np.ndarray, seed: int) -> np.ndarray:
    """A pseudo-random uint64 per id that depends only on (id, seed): the random order of a row does not
    depend on where it sits in the file or on the other rows."""
    salt = _mix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]
    z = np.asarray(ids).astype(np.uint64)
    z *= _GOLDEN
    z += salt
    return _mix64(z)


def _float_key(values: np.ndarray, descending: bool) -> np.ndarray:
    """uint32 whose unsigned order is the float order of `values` (NaN always last)."""
    v = np.asarray(values, dtype=np.float32).copy()
    nan = np.isnan(v)
    if descending:
        np.negative(v, out=v)
    v[nan] = np.inf
    bits = v.view(np.uint32)
    return np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(0x80000000))


# ------------------------------------------------------------------------------------------ in-cluster orders
# An order is a sort key per row (ascending: preferred first) from the row's inputs; `needs` names the inputs
# it reads (similarity: the clusters artifact's column; loss, features: the embeddings artifact's). An order
# with `picks(features, quota) -> positions` chooses a cluster's rows itself from its rows in key order
# (diverse). Add one: a key function + a line here.

WITHIN = Registry("--within")


def _random_key(*, ids, seed, **_):
    return (random_keys(ids, seed) >> np.uint64(32)).astype(np.uint32)


WITHIN.register("random", "a seeded random order", _random_key, needs=(), picks=None)
WITHIN.register("far", "farthest from the centroid first (the paper's choice)",
                lambda *, similarity, **_: _float_key(similarity, descending=False), needs=("similarity",),
                picks=None)
WITHIN.register("near", "nearest to the centroid first (most typical)",
                lambda *, similarity, **_: _float_key(similarity, descending=True), needs=("similarity",),
                picks=None)
WITHIN.register("diverse", "greedy k-center inside the cluster, starting from the most typical row (needs "
                "embeddings)", lambda *, similarity, **_: _float_key(similarity, descending=True),
                needs=("similarity", "features"), picks=lambda x, quota: k_center_greedy(x, quota, first=0))
WITHIN.register("hard", "highest loss first (the embeddings artifact's `loss`)",
                lambda *, loss, **_: _float_key(loss, descending=True), needs=("loss",), picks=None)


def answer_share_key(*, ids, seed, answers, kind_of_row, **_):
    """`answers`: each answer of a kind spaced evenly through the order. A row's value is (its rank among the rows
    of its kind with its answer, in the random order, + u) / m, for the m rows of that answer and u the random key
    (in [0, 1)) of its first row; rows are taken lowest value first (ties: the random order). So a cluster with
    quota share t of its kind takes about t * m rows of each answer, rounded up for a repeated answer (its u is
    the least of m random keys): one row of every repeated answer before a second of any (one row per operand of
    a request answered by memory), then each in proportion, while answers that occur once are taken in the
    random order in what is left (benchmarks/results/family_notes.md, round 24). Rows whose answers are all
    different (most real data) have value u, their own random key: exactly the random order."""
    r = random_keys(ids, seed)
    n = len(r)
    order = np.lexsort((r, answers, kind_of_row))
    k, a = kind_of_row[order], answers[order]
    new = np.r_[True, (k[1:] != k[:-1]) | (a[1:] != a[:-1])]
    start = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    size = np.diff(np.r_[start, n])[group]
    u = (r[order][start] >> np.uint64(11)).astype(np.float64)[group] / 2.0 ** 53
    value = np.empty(n)
    value[order] = (np.arange(n) - start[group] + u) / size
    key = np.empty(n, dtype=np.int64)
    key[np.lexsort((r, value))] = np.arange(n)
    return key


WITHIN.register("answers", "one row of each repeated answer of a kind before a second, then each answer in "
                "proportion to its rows (reads the responses: --data, else the recorded dataset)", answer_share_key,
                needs=("answers",), picks=None)
WITHIN_ORDERS = WITHIN.names
AUTO = "auto"  # the default: resolved per dataset by auto_order, never passed to select_rows
WITHIN_CHOICES = (AUTO, *WITHIN_ORDERS)
_NEEDS_MESSAGE = {"similarity": "--within {} needs the similarity column of the clusters artifact",
                  "answers": "--within {} needs each row's answer (its response) and its kind",
                  "loss": "--within {} needs a `loss` column (from the embeddings artifact)"}


# `--within auto`: a response of at most this many words is an answer (a label, a number, a name); a longer one
# (a worked solution, code, prose) is a text of its own. Placed between the two response styles of the benchmark
# family (one-word answers: 1-3 words a row; worked solutions: 5 or more), not tuned on an outcome.
SHORT_ANSWER_WORDS = 4


def auto_order(answers: np.ndarray, words: np.ndarray) -> tuple[str, np.ndarray | None, int]:
    """`--within auto`, from each row's answer key and its response's word count: ("answers", keys, s) when two
    of the s short responses (<= SHORT_ANSWER_WORDS words) share an answer, where a longer response counts as an
    answer of its own; else ("random", None, s), the same rows the answers order would take on such data (every
    answer different). Why per style: spreading repeated answers lifted one-word answers on the benchmark family's
    dev and test splits and on the single instance, and cost the worst skill with worked solutions, whose
    repeated responses are whole solutions (benchmarks/results/family_notes.md, rounds 24-26 and 32)."""
    answers, short = np.asarray(answers), np.asarray(words) <= SHORT_ANSWER_WORDS
    codes = np.unique(answers[short], return_inverse=True)[1].ravel()
    if len(codes) == 0 or codes.max() + 1 == len(codes):  # no answer repeats
        return "random", None, len(codes)
    keys = np.empty(len(answers), dtype=np.int64)
    keys[short] = codes
    keys[~short] = codes.max() + 1 + np.arange(int((~short).sum()))
    return "answers", keys, len(codes)


def group_by_cluster(clusters: np.ndarray, k: int | None = None) -> np.ndarray:
    """Row positions grouped by cluster, ascending, rows of a cluster in position order (a stable sort;
    a radix sort when the cluster numbers fit in 16 bits)."""
    clusters = np.asarray(clusters)
    k = int(clusters.max()) + 1 if k is None and len(clusters) else (k or 0)
    small = clusters.astype(np.uint16) if k <= 1 << 16 else clusters
    return np.argsort(small, kind="stable")


def order_within_cluster(clusters: np.ndarray, within: str, *, ids: np.ndarray | None = None,
                         similarity: np.ndarray | None = None, loss: np.ndarray | None = None,
                         answers: np.ndarray | None = None, kind_of_row: np.ndarray | None = None,
                         seed: int = 0, k: int | None = None) -> np.ndarray:
    """Row positions grouped by cluster (ascending), each cluster's rows in preference order.

    random: by random_keys(id, seed); far: lowest similarity to the centroid first; near: highest first;
    hard: highest loss first (NaN last); answers: answer_share_key (answers: an int per row, equal for equal
    answers; kind_of_row: the kind, else group, else cluster of each row). Ties go to the lower row position.
    (`diverse` depends on the quota, see k_center_greedy; its base order here is `near`.)
    """
    n = len(clusters)
    entry = WITHIN.get(within)
    inputs = {"ids": np.arange(n) if ids is None else ids, "similarity": similarity, "loss": loss,
              "answers": answers, "kind_of_row": np.asarray(clusters) if kind_of_row is None else kind_of_row}
    for need in entry.needs:
        if need in _NEEDS_MESSAGE and inputs[need] is None:
            raise CurateError(_NEEDS_MESSAGE[need].format(within))
    key = entry.value(seed=seed, **inputs)
    clusters = np.asarray(clusters)
    order = group_by_cluster(clusters, k)
    # then each cluster's segment by key: sorting k short segments costs less than one sort of n rows
    grouped_key = key[order]
    del key
    sizes = np.bincount(clusters, minlength=k or 0)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):
        if e - s > 1:
            seg = order[s:e]
            seg[:] = seg[np.argsort(grouped_key[s:e], kind="stable")]
    return order


def k_center_greedy(x: np.ndarray, n_pick: int, first: int = 0) -> np.ndarray:
    """Greedy k-center (farthest-first traversal) on unit rows: start at `first`, then repeatedly take the
    row least similar to everything taken so far. Returns positions into x, in pick order. O(n_pick·m·d)."""
    m = len(x)
    n_pick = min(n_pick, m)
    picks = np.empty(n_pick, dtype=np.int64)
    if n_pick == 0:
        return picks
    picks[0] = first
    nearest = x @ x[first]  # similarity of every row to its most similar picked row
    nearest[first] = np.inf
    for i in range(1, n_pick):
        j = int(np.argmin(nearest))
        picks[i] = j
        np.maximum(nearest, x @ x[j], out=nearest)
        nearest[j] = np.inf
    return picks


def dedup_within_cluster(features: np.ndarray, order: np.ndarray, sizes: np.ndarray, threshold: float,
                         block_rows: int = 512, answers: np.ndarray | None = None,
                         short: np.ndarray | None = None) -> np.ndarray:
    """Near-duplicate removal: walking each cluster's rows in `order`, a row is dropped when its cosine
    similarity to a row already kept in its cluster exceeds `threshold` (features are unit rows), unless both
    rows' responses are short answers (`short`, a bool per row) and their `answers` (an int per row, equal for
    equal answers) differ: a near-duplicate gives the same answer, and the text features weigh a question's topic
    words down, so "What is the capital of France?" and "... of Peru?" are above 0.99 apart.

    Returns a bool mask over rows (True = kept). Exact greedy, computed block by block with matrix
    products: O(Σ_c size_c · kept_c · d).
    """
    n, d = features.shape
    keep = np.ones(n, dtype=bool)
    if threshold >= 1:  # no cosine exceeds 1: identical rows' float32 products (1.0000001, or 0.9999999) must not
        return keep     # drop some of them and keep others
    by_answer = answers is not None and short is not None and bool(np.asarray(short).any())
    starts = np.concatenate([[0], np.cumsum(sizes)])
    thr = np.float32(threshold)
    for c in range(len(sizes)):
        rows = order[starts[c]:starts[c + 1]]
        if len(rows) < 2:
            continue
        kept = np.empty((min(len(rows), 4 * block_rows), d), dtype=np.float32)
        kept_rows = np.empty(len(rows), dtype=np.int64)  # their row positions (their answers, for by_answer)
        n_kept = 0
        for b in range(0, len(rows), block_rows):
            block_rows_idx = rows[b:b + block_rows]
            xb = features[block_rows_idx]
            drop = np.zeros(len(xb), dtype=bool)
            for k0 in range(0, n_kept, 8192):
                k1 = min(n_kept, k0 + 8192)
                close = xb @ kept[k0:k1].T > thr
                if by_answer:
                    close &= ~_other_short_answers(block_rows_idx, kept_rows[k0:k1], answers, short)
                drop |= close.any(axis=1)
            close = np.triu(xb @ xb.T > thr, 1)
            if by_answer:
                close &= ~_other_short_answers(block_rows_idx, block_rows_idx, answers, short)
            for i in np.flatnonzero(close.any(axis=1)).tolist():
                if not drop[i]:
                    drop |= close[i]
            new = xb[~drop]
            if n_kept + len(new) > len(kept):
                grown = np.empty((min(len(rows), max(2 * len(kept), n_kept + len(new))), d), dtype=np.float32)
                grown[:n_kept] = kept[:n_kept]
                kept = grown
            kept[n_kept:n_kept + len(new)] = new
            kept_rows[n_kept:n_kept + len(new)] = block_rows_idx[~drop]
            n_kept += len(new)
            keep[block_rows_idx[drop]] = False
    return keep


def _other_short_answers(a: np.ndarray, b: np.ndarray, answers: np.ndarray, short: np.ndarray) -> np.ndarray:
    """Per pair of rows (a × b, positions): both responses short answers, and different ones."""
    return (short[a][:, None] & short[b][None, :]) & (answers[a][:, None] != answers[b][None, :])
