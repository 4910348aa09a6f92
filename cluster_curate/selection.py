"""Balanced, budgeted selection from clusters (docs/architecture.md, "Stages"): pure functions on numpy arrays.

    quotas = water_fill_quotas(sizes, budget, balance_power)   # how many rows each cluster gives
    quotas = token_water_fill(...)                             # the same, for a budget in tokens
    order  = order_within_cluster(...)                         # which rows of a cluster come first
    keep   = dedup_within_cluster(...)                         # optional near-duplicate removal
    sel    = select_rows(...)                                  # all of the above, end to end

Everything is vectorised over rows (one sort of a 64-bit key per row), so ten million rows take seconds;
only `diverse` and `dedup` loop over clusters, and they need the feature vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cluster_curate.errors import CurateError
from cluster_curate.registry import Registry

# The version of this stage's algorithm: part of every artifact's fingerprint and of `run`'s up-to-date check.
# Bump it when the same inputs and options give a different output (docs/architecture.md, "Lineage").
ALGORITHM_VERSION = 1

# ------------------------------------------------------------------------------------------ budgets

def check_budget_args(fraction: float | None = None, budget: int | None = None,
                      per_cluster_ratio: float | None = None) -> str:
    """Exactly one budget, in range. Returns the mode: 'fraction' | 'budget' | 'per-cluster-ratio'."""
    given = {"fraction": fraction, "budget": budget, "per-cluster-ratio": per_cluster_ratio}
    named = [k for k, v in given.items() if v is not None]
    if len(named) != 1:
        raise CurateError("give exactly one of --fraction F, --budget N, --per-cluster-ratio R"
                          + (f" (got {', '.join('--' + k for k in named)})" if named else ""))
    mode = named[0]
    if mode == "fraction" and not (0 < fraction <= 1 and math.isfinite(fraction)):
        raise CurateError(f"--fraction must be in (0, 1], got {fraction}")
    if mode == "budget" and (budget is None or int(budget) != budget or budget <= 0):
        raise CurateError(f"--budget must be a positive number of rows, got {budget}")
    if mode == "per-cluster-ratio" and not (0 < per_cluster_ratio <= 1 and math.isfinite(per_cluster_ratio)):
        raise CurateError(f"--per-cluster-ratio must be in (0, 1], got {per_cluster_ratio}")
    return mode


def fraction_budget(n: int, fraction: float) -> int:
    """Rows for `--fraction F`: floor(F·n) (at least one row when n > 0)."""
    return min(n, max(1 if n else 0, int(math.floor(fraction * n + 1e-9))))


def water_fill_quotas(sizes: np.ndarray, budget: int, balance_power: float = 0.0) -> np.ndarray:
    """Per-cluster quotas that sum to exactly min(budget, Σ sizes), none above its cluster's size.

    balance_power p = 0 (balanced): find the level q with Σ min(size_c, q) = budget; clusters smaller than q
    are taken whole and the others get q or q + 1 (the +1s go to the largest clusters first, ties to the
    lowest cluster number). p > 0: quota ∝ size^p under the same caps (p = 1: proportional), rounded by
    largest remainder (ties: larger cluster, then lower number).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.ndim != 1 or (sizes < 0).any():
        raise ValueError("sizes must be a 1-d array of non-negative counts")
    if not 0 <= balance_power <= 1 or not math.isfinite(balance_power):
        raise CurateError(f"--balance-power must be between 0 and 1, got {balance_power}")
    if budget < 0:
        raise CurateError(f"budget must be >= 0, got {budget}")
    total = int(sizes.sum())
    if budget >= total:
        return sizes.copy()
    if budget == 0:
        return np.zeros_like(sizes)
    idx = np.arange(len(sizes))
    if balance_power == 0:
        s = np.sort(sizes)
        prefix = np.concatenate([[0], np.cumsum(s)])

        def filled(level: int) -> int:  # Σ min(size, level)
            j = int(np.searchsorted(s, level, side="left"))
            return int(prefix[j]) + level * (len(s) - j)

        lo, hi = 0, int(s[-1])
        while lo < hi:  # the largest level whose fill fits in the budget
            mid = (lo + hi + 1) // 2
            if filled(mid) <= budget:
                lo = mid
            else:
                hi = mid - 1
        quotas = np.minimum(sizes, lo)
        rest = budget - int(quotas.sum())  # < number of clusters larger than the level
        open_ = idx[sizes > lo]
        open_ = open_[np.lexsort((open_, -sizes[open_]))]
        quotas[open_[:rest]] += 1
        return quotas

    weights = sizes.astype(np.float64) ** balance_power
    lo, hi = 0.0, float((sizes / np.where(weights > 0, weights, 1)).max()) + 1.0
    for _ in range(200):  # bisection on t in Σ min(size, t·w) = budget
        mid = (lo + hi) / 2
        if np.minimum(sizes, mid * weights).sum() <= budget:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    ideal = np.minimum(sizes.astype(np.float64), lo * weights)
    quotas = np.minimum(np.floor(ideal + 1e-9).astype(np.int64), sizes)
    frac = ideal - quotas
    rest = budget - int(quotas.sum())
    if rest > 0:
        open_ = idx[quotas < sizes]
        open_ = open_[np.lexsort((open_, -sizes[open_], -frac[open_]))]
        quotas[open_[:rest]] += 1
    elif rest < 0:  # floating-point overshoot: take back from the smallest remainders
        held = idx[quotas > 0]
        held = held[np.lexsort((held, sizes[held], frac[held]))]
        quotas[held[:-rest]] -= 1
    return quotas


def grouped_quotas(sizes: np.ndarray, group_of_cluster: np.ndarray, budget: int,
                   balance_power: float = 0.0) -> np.ndarray:
    """Two-level water-filling: the budget over groups of clusters first, then each group's quota over its
    clusters. Sums to exactly min(budget, Σ sizes); no cluster above its size."""
    sizes = np.asarray(sizes, dtype=np.int64)
    groups = np.asarray(group_of_cluster, dtype=np.int64)
    if groups.shape != sizes.shape:
        raise CurateError(f"{groups.shape[0]} group labels for {sizes.shape[0]} clusters")
    group_sizes = np.bincount(groups, weights=sizes, minlength=int(groups.max()) + 1).astype(np.int64)
    group_quotas = water_fill_quotas(group_sizes, budget, balance_power)
    quotas = np.zeros_like(sizes)
    for g in np.flatnonzero(group_quotas):
        members = np.flatnonzero(groups == g)
        quotas[members] = water_fill_quotas(sizes[members], int(group_quotas[g]), balance_power)
    return quotas


def ratio_quotas(sizes: np.ndarray, ratio: float) -> np.ndarray:
    """The paper's rule: every non-empty cluster keeps floor(ratio × smallest non-empty cluster size)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    nonempty = sizes[sizes > 0]
    if len(nonempty) == 0:
        return np.zeros_like(sizes)
    q = int(math.floor(ratio * int(nonempty.min()) + 1e-9))
    return np.where(sizes > 0, q, 0).astype(np.int64)


# ------------------------------------------------------------------------------------------ token budgets
TOKEN_MODES = ("token-budget", "token-fraction")


def check_token_budget_args(token_budget: int | None = None, token_fraction: float | None = None) -> str | None:
    """At most one token budget, in range. Returns 'token-budget' | 'token-fraction' | None (rows)."""
    if token_budget is not None and token_fraction is not None:
        raise CurateError("give one of --token-budget T, --token-fraction F (got both)")
    if token_budget is not None:
        if int(token_budget) != token_budget or token_budget <= 0:
            raise CurateError(f"--token-budget must be a positive number of tokens, got {token_budget}")
        return "token-budget"
    if token_fraction is not None:
        if not (0 < token_fraction <= 1 and math.isfinite(token_fraction)):
            raise CurateError(f"--token-fraction must be in (0, 1], got {token_fraction}")
        return "token-fraction"
    return None


def token_budget_for(total_tokens: int, token_budget: int | None = None, token_fraction: float | None = None,
                     counted_by: str = "counted") -> int:
    """Tokens for `--token-budget T` (T itself) or `--token-fraction F` (floor(F·total)); a budget larger
    than the data is refused (a row budget is capped instead: here it usually means the wrong tokenizer)."""
    if token_budget is not None:
        if token_budget > total_tokens:
            raise CurateError(f"--token-budget {int(token_budget):,} is larger than the data's {total_tokens:,} "
                              f"tokens ({counted_by}); lower it or use --token-fraction")
        return int(token_budget)
    return max(1 if total_tokens else 0, int(math.floor(token_fraction * total_tokens + 1e-9)))


def token_water_fill(order: np.ndarray, clusters: np.ndarray, tokens: np.ndarray, available: np.ndarray,
                     budget_tokens: int, balance_power: float = 0.0,
                     group_of_cluster: np.ndarray | None = None) -> np.ndarray:
    """Rows per cluster (quotas) for a budget in tokens: `water_fill_quotas` with each cluster's quota in
    tokens. Each cluster gives its rows in `order` (positions grouped by cluster, `available[c]` rows each)
    while its running token total P stays under a common level λ·W_c^p (W_c: the cluster's tokens; p = 0:
    one level for all): rows are taken in `take_sequence` order until the next row would pass the budget, so
    the selected tokens S satisfy S ≤ T < S + (tokens of the next row), i.e. T is met to within one row.
    With unit tokens and p = 0 this is exactly `water_fill_quotas` (and `grouped_quotas` with groups)."""
    seq = take_sequence(order, clusters, tokens, available, balance_power, group_of_cluster)
    n_take = int(np.searchsorted(np.cumsum(np.asarray(tokens, dtype=np.int64)[seq]), budget_tokens, side="right"))
    return np.bincount(np.asarray(clusters)[seq[:n_take]], minlength=len(available)).astype(np.int64)


def take_sequence(order: np.ndarray, clusters: np.ndarray, weights: np.ndarray, available: np.ndarray,
                  balance_power: float = 0.0, group_of_cluster: np.ndarray | None = None) -> np.ndarray:
    """The row positions of `order` in the order the water-filling takes them: every row gets the key
    P / W_c^p (P: the running weight of its cluster up to and including it, in `order`; W_c: the cluster's
    weight), rows are sorted by key, ties to the cluster with more weight, then the lower cluster number.
    Any prefix of the sequence takes a prefix of each cluster's order. With groups: each group's rows are
    sequenced so over its clusters, then the groups are water-filled by their own running weights."""
    order = np.asarray(order)
    c = np.asarray(clusters)[order].astype(np.int64)
    t = np.asarray(weights)[order].astype(np.int64)
    if (t < 0).any():
        raise CurateError("token counts must be >= 0")
    if not len(order):
        return order.astype(np.int64)

    def levels(unit: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Running weight of each row inside its unit (rows in `seq` order, units contiguous) and each
        unit's total."""
        tt = t[seq]
        cum = np.cumsum(tt)
        totals = np.bincount(unit, weights=tt, minlength=int(unit.max()) + 1)
        first = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]])
        base = np.repeat(cum[first] - tt[first], np.diff(np.r_[first, len(unit)]))
        return cum - base, totals.astype(np.float64)

    def keys(prefix: np.ndarray, totals: np.ndarray, unit: np.ndarray) -> np.ndarray:
        if balance_power == 0:
            return prefix.astype(np.float64)
        w = totals[unit] ** balance_power
        return prefix / np.where(w > 0, w, 1.0)

    # clusters: `order` already has them contiguous, each in preference order
    prefix, w_c = levels(c, np.arange(len(order)))
    key_c = keys(prefix, w_c, c)
    if group_of_cluster is None:
        seq = np.lexsort((c, -w_c[c], key_c))
    else:
        g = np.asarray(group_of_cluster, dtype=np.int64)[c]
        in_group = np.lexsort((c, -w_c[c], key_c, g))  # each group's rows, water-filled over its clusters
        prefix_g, w_g = levels(g[in_group], in_group)
        key_g = keys(prefix_g, w_g, g[in_group])
        seq = in_group[np.lexsort((g[in_group], -w_g[g[in_group]], key_g))]
    return order[seq]


def source_bounded_take(seq: np.ndarray, sources: np.ndarray, weights: np.ndarray, budget: int,
                        low: np.ndarray, high: np.ndarray, names: list[str] | None = None,
                        unit: str = "rows") -> np.ndarray:
    """The rows to select when each source s must give at least low[s] and at most high[s] (in weight units:
    rows, or tokens) of a budget: every source takes its rows in `seq` order (the water-filling's), and the
    unbounded sources share what the bounds leave by the same order. Formally, with m_s(τ) the weight of
    source s among seq[:τ], each source takes its shortest prefix reaching min(max(m_s(τ), low), high) (at
    least low, at most high), and τ is the largest cut whose total is within the budget: with unit weights
    the total is the budget exactly, with tokens within one row. Returns the selected row positions (in
    `seq` order); a budget the bounds cannot meet is refused with the reason."""
    names = names or [str(i) for i in range(len(low))]
    seq = np.asarray(seq)
    s = np.asarray(sources)[seq].astype(np.int64)
    w = np.asarray(weights)[seq].astype(np.int64)
    n_src = len(low)
    pos = [np.flatnonzero(s == k) for k in range(n_src)]            # each source's rows, in seq order
    cum = [np.cumsum(w[p]) for p in pos]                             # their running weight
    avail = np.array([int(c[-1]) if len(c) else 0 for c in cum], dtype=np.int64)
    floor_rows = np.array([int(np.searchsorted(c, lo, side="left")) + 1 if lo > 0 else 0
                           for c, lo in zip(cum, low)], dtype=np.int64)  # shortest prefix with weight >= low
    cap_rows = np.array([int(np.searchsorted(c, hi, side="right")) for c, hi in zip(cum, high)], dtype=np.int64)
    for k in range(n_src):
        if low[k] > avail[k]:
            raise CurateError(f"source {names[k]}: its floor is {int(low[k]):,} {unit} and it has only "
                              f"{int(avail[k]):,} {unit} to select from")
        if floor_rows[k] > cap_rows[k]:
            raise CurateError(f"source {names[k]}: its floor ({int(low[k]):,} {unit}) is above its cap "
                              f"({int(high[k]):,} {unit})")

    def taken(tau: int) -> np.ndarray:
        m = np.array([int(np.searchsorted(p, tau, side="left")) for p in pos], dtype=np.int64)  # rows < tau
        return np.minimum(np.maximum(m, floor_rows), cap_rows)

    def total(rows: np.ndarray) -> int:
        return int(sum(int(c[r - 1]) for c, r in zip(cum, rows) if r > 0))

    floors = total(taken(0))
    if floors > budget:
        raise CurateError(f"the sources' floors need {floors:,} {unit}, more than the budget of {budget:,}")
    most = total(taken(len(seq)))
    if budget - most >= (1 if unit == "rows" else max(int(w.max()), 1)):  # tokens: within one row is met
        raise CurateError(f"the sources' caps allow at most {most:,} {unit}, less than the budget of {budget:,}")
    lo, hi = 0, len(seq)
    while lo < hi:  # the largest cut within the budget
        mid = (lo + hi + 1) // 2
        if total(taken(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    rows = taken(lo)
    return seq[np.sort(np.concatenate([p[:r] for p, r in zip(pos, rows)]))]


# ------------------------------------------------------------------------------------------ orders

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


WITHIN.register("random", "a seeded random order (the default)", _random_key, needs=(), picks=None)
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
WITHIN_ORDERS = WITHIN.names
_NEEDS_MESSAGE = {"similarity": "--within {} needs the similarity column of the clusters artifact",
                  "loss": "--within {} needs a `loss` column (from the embeddings artifact)"}


def group_by_cluster(clusters: np.ndarray, k: int | None = None) -> np.ndarray:
    """Row positions grouped by cluster, ascending, rows of a cluster in position order (a stable sort;
    a radix sort when the cluster numbers fit in 16 bits)."""
    clusters = np.asarray(clusters)
    k = int(clusters.max()) + 1 if k is None and len(clusters) else (k or 0)
    small = clusters.astype(np.uint16) if k <= 1 << 16 else clusters
    return np.argsort(small, kind="stable")


def order_within_cluster(clusters: np.ndarray, within: str, *, ids: np.ndarray | None = None,
                         similarity: np.ndarray | None = None, loss: np.ndarray | None = None,
                         seed: int = 0, k: int | None = None) -> np.ndarray:
    """Row positions grouped by cluster (ascending), each cluster's rows in preference order.

    random: by random_keys(id, seed); far: lowest similarity to the centroid first; near: highest first;
    hard: highest loss first (NaN last). Ties go to the lower row position. (`diverse` depends on the
    quota, see k_center_greedy; its base order here is `near`.)
    """
    n = len(clusters)
    entry = WITHIN.get(within)
    inputs = {"ids": np.arange(n) if ids is None else ids, "similarity": similarity, "loss": loss}
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
                         block_rows: int = 512) -> np.ndarray:
    """Near-duplicate removal: walking each cluster's rows in `order`, a row is dropped when its cosine
    similarity to a row already kept in its cluster exceeds `threshold` (features are unit rows).

    Returns a bool mask over rows (True = kept). Exact greedy, computed block by block with matrix
    products: O(Σ_c size_c · kept_c · d).
    """
    n, d = features.shape
    keep = np.ones(n, dtype=bool)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    thr = np.float32(threshold)
    for c in range(len(sizes)):
        rows = order[starts[c]:starts[c + 1]]
        if len(rows) < 2:
            continue
        kept = np.empty((min(len(rows), 4 * block_rows), d), dtype=np.float32)
        n_kept = 0
        for b in range(0, len(rows), block_rows):
            block_rows_idx = rows[b:b + block_rows]
            xb = features[block_rows_idx]
            drop = np.zeros(len(xb), dtype=bool)
            for k0 in range(0, n_kept, 8192):
                drop |= (xb @ kept[k0:min(n_kept, k0 + 8192)].T).max(axis=1) > thr
            close = np.triu(xb @ xb.T > thr, 1)
            for i in np.flatnonzero(close.any(axis=1)).tolist():
                if not drop[i]:
                    drop |= close[i]
            new = xb[~drop]
            if n_kept + len(new) > len(kept):
                grown = np.empty((min(len(rows), max(2 * len(kept), n_kept + len(new))), d), dtype=np.float32)
                grown[:n_kept] = kept[:n_kept]
                kept = grown
            kept[n_kept:n_kept + len(new)] = new
            n_kept += len(new)
            keep[block_rows_idx[drop]] = False
    return keep


# ------------------------------------------------------------------------------------------ the stage

@dataclass
class Selection:
    rows: np.ndarray               # positions of the selected rows, ascending
    cluster: np.ndarray            # int32, per selected row
    rank_in_cluster: np.ndarray    # int32, 0 = first pick of its cluster
    sizes: np.ndarray              # rows per cluster
    available: np.ndarray          # rows per cluster after near-duplicate removal (= sizes without dedup)
    quotas: np.ndarray             # rows selected per cluster
    mode: str
    requested: int | None          # the budget asked for (None for --per-cluster-ratio)
    dedup_dropped: int = 0
    notes: list = field(default_factory=list)
    tokens_total: int | None = None       # tokens of all rows (when token counts were given)
    tokens_requested: int | None = None   # the token budget (token modes)
    tokens_selected: int | None = None    # tokens of the selected rows


def select_rows(clusters: np.ndarray, *, k: int | None = None, ids: np.ndarray | None = None,
                similarity: np.ndarray | None = None, loss: np.ndarray | None = None,
                features: np.ndarray | None = None, fraction: float | None = None, budget: int | None = None,
                per_cluster_ratio: float | None = None, balance_power: float = 0.0, within: str = "random",
                dedup: float | None = None, seed: int = 0, groups: np.ndarray | None = None,
                tokens: np.ndarray | None = None, token_budget: int | None = None,
                token_fraction: float | None = None, tokens_counted_by: str = "counted",
                sources: np.ndarray | None = None, source_min_share=None, source_max_share=None,
                source_names: list[str] | None = None) -> Selection:
    """Select rows: quotas across clusters, then the first `quota` rows of each cluster in `within` order.

    clusters: int cluster per row (0..k-1). ids: row ids (for the random order; default 0..n-1).
    similarity: cosine to the row's centroid (far, near, diverse). loss: per row (hard).
    features: unit rows aligned with `clusters` (diverse, dedup). dedup: cosine threshold; near-duplicates
    are removed before quotas are computed, so the budget is still met when enough distinct rows remain.
    groups: the group of each cluster (`cluster --groups`): budget quotas are water-filled over groups first.
    tokens: per row (int); with token_budget / token_fraction the budget is in tokens (`token_water_fill`),
    and whatever the budget the selection reports its tokens. tokens_counted_by: says how, in messages.
    sources: the input (0..S-1) of each row; source_min_share / source_max_share: per input, a share of the
    budget (rows, or tokens with a token budget) it must at least / at most give (NaN: no bound); the rows
    are then taken by `source_bounded_take` along the water-filling's sequence (`take_sequence`).
    """
    mode = check_token_budget_args(token_budget, token_fraction)
    order_entry = WITHIN.get(within)
    if mode is None:
        mode = check_budget_args(fraction, budget, per_cluster_ratio)
    else:
        rows_given = [k for k, v in {"fraction": fraction, "budget": budget,
                                     "per-cluster-ratio": per_cluster_ratio}.items() if v is not None]
        if rows_given:
            raise CurateError(f"give one budget: --{mode} and --{rows_given[0]} were both given")
        if tokens is None:
            raise CurateError(f"--{mode} needs a token count per row")
        if order_entry.picks is not None:
            raise CurateError(f"--within {within} picks rows for a row quota; with --{mode} use an order "
                              f"({', '.join(e.name for e in WITHIN if e.picks is None)})")
    if "features" in order_entry.needs and features is None:
        raise CurateError(f"--within {within} needs the feature vectors: pass --embeddings E")
    if dedup is not None:
        if not (0 < dedup <= 1):
            raise CurateError(f"--dedup must be a cosine similarity in (0, 1], got {dedup}")
        if features is None:
            raise CurateError("--dedup needs the feature vectors: pass --embeddings E")
    clusters = np.asarray(clusters)
    n = len(clusters)
    if n == 0:
        raise CurateError("no rows to select from")
    if clusters.min() < 0:
        raise CurateError(f"cluster numbers must be >= 0, found {int(clusters.min())}")
    k = int(clusters.max()) + 1 if k is None else k
    if clusters.max() >= k:
        raise CurateError(f"cluster number {int(clusters.max())} is not below k = {k}")
    if features is not None and len(features) != n:
        raise ValueError("features must have one row per cluster row")
    if tokens is not None and len(tokens) != n:
        raise ValueError("tokens must have one count per cluster row")
    sizes = np.bincount(clusters, minlength=k).astype(np.int64)
    notes: list[str] = []

    order = order_within_cluster(clusters, within, ids=ids, similarity=similarity, loss=loss, seed=seed, k=k)
    available, dropped = sizes, 0
    if dedup is not None:
        keep = dedup_within_cluster(features, order, sizes, dedup)
        dropped = int(n - keep.sum())
        if dropped:
            order = order[keep[order]]
            available = np.bincount(clusters[order], minlength=k).astype(np.int64)
    n_available = int(available.sum())

    requested, tokens_requested = None, None
    if mode in TOKEN_MODES:
        tokens = np.asarray(tokens, dtype=np.int64)
        tokens_requested = token_budget_for(int(tokens.sum()), token_budget, token_fraction, tokens_counted_by)
        left = int(tokens[order].sum())
        if tokens_requested > left:
            notes.append(f"token budget of {tokens_requested:,} is larger than the {left:,} tokens left after "
                         f"removing {dropped} near-duplicates: selecting all of them")
        quotas = token_water_fill(order, clusters, tokens, available, min(tokens_requested, left), balance_power,
                                  groups)
        if quotas.sum() == 0:
            first_rows = tokens[order[np.cumsum(available)[available > 0] - available[available > 0]]]
            raise CurateError(f"--{mode}: {tokens_requested:,} tokens is less than any cluster's first row "
                              f"({int(first_rows.min()):,} tokens at least); raise it")
    elif mode == "per-cluster-ratio":
        quotas = ratio_quotas(available, per_cluster_ratio)
        if quotas.sum() == 0:
            raise CurateError(f"--per-cluster-ratio {per_cluster_ratio} keeps 0 rows: the smallest cluster has "
                              f"{int(available[available > 0].min())} rows; raise the ratio or use --fraction")
    else:
        requested = fraction_budget(n, fraction) if mode == "fraction" else int(budget)
        if requested > n_available:
            what = f"the {n_available} rows left after removing {dropped} near-duplicates" if dropped else \
                f"the {n_available} rows of the data"
            notes.append(f"budget of {requested} rows is larger than {what}: selecting all of them")
        if groups is not None:
            quotas = grouped_quotas(available, groups, min(requested, n_available), balance_power)
        else:
            quotas = water_fill_quotas(available, min(requested, n_available), balance_power)

    bounded = sources is not None and (source_min_share is not None or source_max_share is not None)
    if bounded:
        if mode == "per-cluster-ratio" or order_entry.picks is not None:
            raise CurateError(f"--source-min-share / --source-max-share need a budget taken in water-filling order: "
                              f"not with {'--per-cluster-ratio' if mode == 'per-cluster-ratio' else '--within ' + within}")
        token_mode = mode in TOKEN_MODES
        weights = tokens if token_mode else np.ones(n, dtype=np.int64)
        target = min(tokens_requested, int(tokens[order].sum())) if token_mode else min(requested, n_available)
        n_src = int(np.max(sources)) + 1 if source_names is None else len(source_names)
        share_lo = np.nan_to_num(np.asarray(source_min_share if source_min_share is not None else [np.nan] * n_src,
                                            dtype=np.float64), nan=0.0)
        share_hi = np.nan_to_num(np.asarray(source_max_share if source_max_share is not None else [np.nan] * n_src,
                                            dtype=np.float64), nan=1.0)
        low = np.ceil(share_lo * target - 1e-9).astype(np.int64)
        high = np.floor(share_hi * target + 1e-9).astype(np.int64)
        seq = take_sequence(order, clusters, weights, available, balance_power, groups)
        picked = source_bounded_take(seq, sources, weights, target, low, high, source_names,
                                     "tokens" if token_mode else "rows")
        quotas = np.bincount(clusters[picked], minlength=k).astype(np.int64)

    rank = np.full(n, -1, dtype=np.int64)  # rank in cluster per row position; -1 = not selected
    if bounded:  # a cluster's selected rows, in its preference order (not always a prefix of it)
        is_picked = np.zeros(n, dtype=bool)
        is_picked[picked] = True
        in_order = is_picked[order]
        run = np.cumsum(in_order)
        seg_start = np.concatenate([[0], np.cumsum(available)[:-1]])
        before = np.concatenate([[0], run])[seg_start][clusters[order]]
        rank[order[in_order]] = (run - before - 1)[in_order]
    elif order_entry.picks is not None:
        starts = np.concatenate([[0], np.cumsum(available)])
        for c in np.flatnonzero(quotas).tolist():
            rows = order[starts[c]:starts[c + 1]]  # near order: rows[0] is the most typical
            picks = order_entry.picks(features[rows], int(quotas[c]))
            rank[rows[picks]] = np.arange(len(picks))
    else:
        in_cluster = clusters[order]
        starts = np.concatenate([[0], np.cumsum(available)[:-1]])
        r = np.arange(len(order), dtype=np.int64)
        r -= starts[in_cluster]
        chosen = r < quotas[in_cluster]
        rank[order[chosen]] = r[chosen]
        del in_cluster, r, chosen
    rows = np.flatnonzero(rank >= 0)
    token_totals = {}
    if tokens is not None:
        tokens = np.asarray(tokens, dtype=np.int64)
        token_totals = {"tokens_total": int(tokens.sum()), "tokens_selected": int(tokens[rows].sum()),
                        "tokens_requested": tokens_requested}
    return Selection(rows=rows, cluster=clusters[rows].astype(np.int32), rank_in_cluster=rank[rows].astype(np.int32),
                     sizes=sizes, available=available, quotas=quotas, mode=mode, requested=requested,
                     dedup_dropped=dropped, notes=notes, **token_totals)


def selection_summary_rows(sel: Selection, limit: int | None = 32) -> list[dict]:
    """Per cluster: size -> selected (all clusters when there are at most `limit`, else the smallest and
    largest clusters around a '...' row)."""
    k = len(sel.sizes)
    by_size = np.lexsort((np.arange(k), sel.sizes))
    if limit is not None and k > limit:
        half = limit // 2
        shown = list(by_size[:half]) + [None] + list(by_size[-half:])
    else:
        shown = list(by_size)
    out = []
    for c in shown:
        if c is None:
            out.append({"cluster": "...", "size": "", "after_dedup": "", "selected": "", "kept": ""})
            continue
        row = {"cluster": int(c), "size": int(sel.sizes[c])}
        if sel.dedup_dropped:
            row["after_dedup"] = int(sel.available[c])
        row["selected"] = int(sel.quotas[c])
        row["kept"] = round(float(sel.quotas[c] / sel.sizes[c]), 4) if sel.sizes[c] else None
        out.append(row)
    if not sel.dedup_dropped:
        for r in out:
            r.pop("after_dedup", None)
    return out
