"""Balanced, budgeted selection from clusters (docs/architecture.md, "Layers"): pure functions on numpy arrays.

    quotas = water_fill_quotas(sizes, budget, balance_power)   # how many rows each cluster gives
    quotas = token_water_fill(...)                             # the same, for a budget in tokens (budget_sequence.py)
    order  = order_within_cluster(...)                         # which rows of a cluster come first (within_orders.py)
    keep   = dedup_within_cluster(...)                         # optional near-duplicate removal (within_orders.py)
    sel    = select_rows(...)                                  # all of the above, end to end

Everything is vectorised over rows (one sort of a 64-bit key per row), so ten million rows take seconds;
only `diverse` and `dedup` loop over clusters, and they need the feature vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cluster_curate.budget_sequence import TOKEN_MODES, Kinds, check_token_budget_args, source_bounded_rows, \
    take_sequence, token_budget_for, token_water_fill
from cluster_curate.errors import CurateError, counted, not_a_share
from cluster_curate.within_orders import AUTO, WITHIN, dedup_within_cluster, order_within_cluster

# The version of this stage's algorithm: part of every artifact's fingerprint and of `run`'s up-to-date check.
# Bump it when the same inputs and options give a different output (docs/architecture.md, "Lineage").
ALGORITHM_VERSION = 4  # 2: --decontaminate matches each user turn of a chat, not only its whole prompt;
# 3: --tokenizer counts each answer as a trainer tokenizes it after its prompt, end-of-turn tokens and all;
# 4: --dedup keeps two rows whose short answers differ

# ------------------------------------------------------------------------------------------ budgets

def check_budget_args(fraction: float | None = None, budget: int | None = None,
                      per_cluster_ratio: float | None = None) -> str:
    """Exactly one budget, in range. Returns the mode: 'fraction' | 'budget' | 'per-cluster-ratio'."""
    given = {"fraction": fraction, "budget": budget, "per-cluster-ratio": per_cluster_ratio}
    named = [k for k, v in given.items() if v is not None]
    if len(named) != 1:
        # no budget at all: name the token budgets too, which check_token_budget_args has already ruled out
        raise CurateError("give exactly one of --fraction F, --budget N, --per-cluster-ratio R"
                          + (f" (got {', '.join('--' + k for k in named)})" if named else
                             " (rows), or --token-budget T or --token-fraction F (tokens)"))
    mode = named[0]
    if mode == "fraction" and not (0 < fraction <= 1 and math.isfinite(fraction)):
        raise not_a_share("--fraction", fraction)
    if mode == "budget" and (budget is None or int(budget) != budget or budget <= 0):
        raise CurateError(f"--budget must be a positive number of rows, got {budget}")
    if mode == "per-cluster-ratio" and not (0 < per_cluster_ratio <= 1 and math.isfinite(per_cluster_ratio)):
        raise not_a_share("--per-cluster-ratio", per_cluster_ratio)
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

    return weighted_quotas(sizes, sizes.astype(np.float64) ** balance_power, budget)


def weighted_quotas(sizes: np.ndarray, weights: np.ndarray, budget: int) -> np.ndarray:
    """Quotas ∝ weights under the caps `sizes` (water-filling: a capped cluster's excess goes to the others),
    rounded by largest remainder (ties: larger cluster, then lower number). Clusters of weight 0 get nothing, so
    the quotas sum to exactly min(budget, Σ sizes of the clusters with weight > 0)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    sizes = np.where(weights > 0, sizes, 0)
    if budget >= int(sizes.sum()):
        return sizes.copy()
    idx = np.arange(len(sizes))
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
    dedup_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # positions --dedup dropped
    notes: list = field(default_factory=list)
    tokens_total: int | None = None       # tokens of all rows (when token counts were given)
    tokens_requested: int | None = None   # the token budget (token modes)
    tokens_selected: int | None = None    # tokens of the selected rows
    source_budget: int | None = None      # the budget (rows, or tokens) a mixture's floors and caps are shares of

    @property
    def dedup_dropped(self) -> int:
        return len(self.dedup_rows)


def select_rows(clusters: np.ndarray, *, k: int | None = None, ids: np.ndarray | None = None,
                similarity: np.ndarray | None = None, loss: np.ndarray | None = None,
                answers: np.ndarray | None = None,
                features: np.ndarray | None = None, fraction: float | None = None, budget: int | None = None,
                per_cluster_ratio: float | None = None, balance_power: float = 0.0, within: str = "random",
                dedup: float | None = None, seed: int = 0, groups: np.ndarray | None = None,
                kinds: Kinds | None = None, tokens: np.ndarray | None = None, token_budget: int | None = None,
                token_fraction: float | None = None, tokens_counted_by: str = "counted",
                sources: np.ndarray | None = None, source_min_share=None, source_max_share=None,
                source_names: list[str] | None = None, source_bound_origins: tuple[list, list] | None = None,
                answer_keys: np.ndarray | None = None, short_answers: np.ndarray | None = None,
                left_out: int = 0) -> Selection:
    """Select rows: quotas across clusters, then the first `quota` rows of each cluster in `within` order.

    clusters: int cluster per row (0..k-1). ids: row ids (for the random order; default 0..n-1).
    similarity: cosine to the row's centroid (far, near, diverse). loss: per row (hard). answers: an int per row,
    equal for equal answers (answers: taken in proportion inside each kind, else group, else cluster).
    features: unit rows aligned with `clusters` (diverse, dedup). dedup: cosine threshold; near-duplicates
    are removed before quotas are computed, so the budget is still met when enough distinct rows remain;
    answer_keys (answer_kinds.answer_key per row) and short_answers (a bool per row: a short answer): two short
    answers that differ are not near-duplicates (within_orders.dedup_within_cluster).
    groups: the group of each cluster (`cluster --groups`): budget quotas are water-filled over groups first.
    kinds: the kind of each group and its weight (`cluster --kinds`, with groups): over weighted kinds first.
    tokens: per row (int); with token_budget / token_fraction the budget is in tokens (`token_water_fill`),
    and whatever the budget the selection reports its tokens. tokens_counted_by: says how, in messages.
    sources: the input (0..S-1) of each row; source_min_share / source_max_share: per input, a share of the
    budget (rows, or tokens with a token budget) it must at least / at most give (NaN: no bound); the rows
    are then taken by `source_bounded_take` along the water-filling's sequence (`take_sequence`), all three
    in budget_sequence.py; source_bound_origins: where each floor and cap was set (for messages).
    left_out: rows --decontaminate left out before these (the notes name the rows a budget is counted on).
    """
    mode, order_entry = _budget_mode(within, fraction, budget, per_cluster_ratio, tokens, token_budget,
                                     token_fraction, features, dedup)
    clusters, k = _checked_clusters(clusters, k, features, tokens)
    n = len(clusters)
    sizes = np.bincount(clusters, minlength=k).astype(np.int64)
    kind_of_row = _kind_of_row(clusters, groups, kinds) if "answers" in order_entry.needs else None
    order = order_within_cluster(clusters, within, ids=ids, similarity=similarity, loss=loss, answers=answers,
                                 kind_of_row=kind_of_row, seed=seed, k=k)
    order, available, dedup_rows = _drop_near_duplicates(order, clusters, features, sizes, dedup, k, answer_keys,
                                                         short_answers)
    dropped = len(dedup_rows)
    n_available = int(available.sum())

    requested, tokens_requested = None, None
    if mode in TOKEN_MODES:
        tokens = np.asarray(tokens, dtype=np.int64)
        tokens_requested, quotas, notes = _token_quotas(mode, order, clusters, tokens, available, dropped,
                                                        token_budget, token_fraction, tokens_counted_by,
                                                        balance_power, groups, kinds, left_out)
    elif mode == "per-cluster-ratio":
        quotas, notes = ratio_quotas(available, per_cluster_ratio), []
        if quotas.sum() == 0:
            raise CurateError(f"--per-cluster-ratio {per_cluster_ratio} keeps 0 rows: the smallest cluster has "
                              f"{counted(int(available[available > 0].min()), 'row')}; raise the ratio or use "
                              "--fraction")
    else:
        requested, quotas, notes = _row_quotas(mode, n, order, clusters, available, dropped, fraction, budget,
                                               balance_power, groups, kinds, left_out)

    picked, source_budget = None, None
    if sources is not None and (source_min_share is not None or source_max_share is not None):
        check_source_bounds_order(mode, within, binding_source_bound(
            source_names or [], _listed(source_min_share), _listed(source_max_share), source_bound_origins or ([], []))
            or "a floor or cap on the sources")
        token_mode = mode in TOKEN_MODES
        weights = tokens if token_mode else np.ones(n, dtype=np.int64)
        given, left = (tokens_requested, int(tokens[order].sum())) if token_mode else (requested, n_available)
        unit = "tokens" if token_mode else "rows"
        # a budget cut to the rows there are: the bounds' errors say so, not name a budget that was never given
        has = "--dedup left" if dropped else "--decontaminate left" if left_out else "the data has"
        said = "" if left >= given else f" ({has} only {left:,} {unit}, so the budget of {given:,} became {left:,})"
        source_budget = min(given, left)
        picked = source_bounded_rows(order, clusters, sources, weights, source_budget,
                                     source_min_share, source_max_share, source_names, unit, balance_power, groups,
                                     kinds, source_bound_origins, said)
        quotas = np.bincount(clusters[picked], minlength=k).astype(np.int64)

    rank = _rank_in_cluster(order, clusters, available, quotas, picked, order_entry.picks, features)
    rows = np.flatnonzero(rank >= 0)
    token_totals = {}
    if tokens is not None:
        tokens = np.asarray(tokens, dtype=np.int64)
        token_totals = {"tokens_total": int(tokens.sum()), "tokens_selected": int(tokens[rows].sum()),
                        "tokens_requested": tokens_requested}
    return Selection(rows=rows, cluster=clusters[rows].astype(np.int32), rank_in_cluster=rank[rows].astype(np.int32),
                     sizes=sizes, available=available, quotas=quotas, mode=mode, requested=requested,
                     dedup_rows=dedup_rows, notes=notes, source_budget=source_budget, **token_totals)


def _kind_of_row(clusters: np.ndarray, groups, kinds: Kinds | None) -> np.ndarray:
    """Each row's kind (`cluster --kinds`), else its group, else its cluster."""
    if groups is None:
        return clusters
    group = np.asarray(groups)[clusters]
    return group if kinds is None else np.asarray(kinds.of_group)[group]


def _listed(shares) -> list:
    return [] if shares is None else list(shares)


def binding_source_bound(names: list[str], low, high, origins: tuple[list, list]) -> str | None:
    """The first floor above 0 or cap below 1 on a mixture's sources, said with where it was set (`origins`,
    io/mixture.source_bounds), as `source code: its floor 0.2 (mix.yaml: inputs[1].min_share)`; None when none binds:
    a floor of 0 and a cap of 1 bound nothing (they are how a mixture file's bounds are lifted)."""
    for what, values, froms, binds in (("floor", low, origins[0], lambda v: v > 0),
                                       ("cap", high, origins[1], lambda v: v < 1)):
        for name, v, origin in zip(names, values, froms):
            if v is not None and v == v and binds(v):  # NaN: none
                return f"source {name}: its {what} {v:g} ({origin})"
    return None


def check_source_bounds_order(mode: str, within: str, bound: str) -> None:
    """Floors and caps on a mixture's sources cut the water-filling order at the budget: a budget mode and a
    --within order that take one (`run` checks it before embed, where `auto` is not yet an order: each it can be
    takes one). `bound`: the first that binds (binding_source_bound)."""
    if mode == "per-cluster-ratio" or (within != AUTO and WITHIN.get(within).picks is not None):
        raise CurateError(f"{bound} needs a budget taken in water-filling order, not "
                          f"{'--per-cluster-ratio' if mode == 'per-cluster-ratio' else '--within ' + within}; lift "
                          "the bounds with --source-min-share 0 --source-max-share 1, or choose another budget or order")


def _budget_mode(within: str, fraction, budget, per_cluster_ratio, tokens, token_budget, token_fraction,
                 features, dedup):
    """The budget's mode and the `--within` entry, with every option checked before any work."""
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
    return mode, order_entry


def _checked_clusters(clusters, k: int | None, features, tokens) -> tuple[np.ndarray, int]:
    """The cluster labels as an array and k, checked against each other and the per-row inputs."""
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
    return clusters, k


def _drop_near_duplicates(order: np.ndarray, clusters: np.ndarray, features, sizes: np.ndarray,
                          dedup: float | None, k: int, answer_keys=None, short_answers=None
                          ) -> tuple[np.ndarray, np.ndarray, int]:
    """(order without the near-duplicates, rows left per cluster, the positions dropped); unchanged without
    `dedup`."""
    none = np.zeros(0, dtype=np.int64)
    if dedup is None:
        return order, sizes, none
    keep = dedup_within_cluster(features, order, sizes, dedup, answers=answer_keys, short=short_answers)
    dropped = np.flatnonzero(~keep)
    if not len(dropped):
        return order, sizes, none
    order = order[keep[order]]
    return order, np.bincount(clusters[order], minlength=k).astype(np.int64), dropped


def _token_quotas(mode: str, order: np.ndarray, clusters: np.ndarray, tokens: np.ndarray, available: np.ndarray,
                  dropped: int, token_budget, token_fraction, counted_by: str, balance_power: float,
                  groups, kinds, left_out: int = 0) -> tuple[int, np.ndarray, list[str]]:
    """(the token budget, quotas per cluster, notes) for `--token-budget` / `--token-fraction`; `left_out`:
    select_rows'."""
    notes = []
    requested = token_budget_for(int(tokens.sum()), token_budget, token_fraction, counted_by, left_out)
    left = int(tokens[order].sum())
    if requested > left:
        notes.append(f"token budget of {requested:,} is larger than the {counted(left, 'token')} left after "
                     f"removing {counted(dropped, 'near-duplicate')}: selecting all of them")
    quotas = token_water_fill(order, clusters, tokens, available, min(requested, left), balance_power, groups,
                              kinds)
    if quotas.sum() == 0:
        first_rows = tokens[order[np.cumsum(available)[available > 0] - available[available > 0]]]
        raise CurateError(f"--{mode}: {requested:,} tokens is less than any cluster's first row "
                          f"({int(first_rows.min()):,} tokens at least); raise it")
    return requested, quotas, notes


def rows_left(n_available: int, dropped: int = 0, left_out: int = 0) -> str:
    """The rows a budget too large is compared with, as its note names them: `the 500 rows of the data`, or those
    left after --decontaminate (`left_out`: commands/select.py leaves them out before) and --dedup (`dropped`)."""
    removed = ([f"{counted(left_out, 'row')} --decontaminate matched"] if left_out else []) + \
        ([counted(dropped, "near-duplicate")] if dropped else [])
    return (f"the {counted(n_available, 'row')} left after removing {' and '.join(removed)}" if removed else
            f"the {counted(n_available, 'row')} of the data")


def _row_quotas(mode: str, n: int, order: np.ndarray, clusters: np.ndarray, available: np.ndarray, dropped: int,
                fraction, budget, balance_power: float, groups, kinds, left_out: int = 0
                ) -> tuple[int, np.ndarray, list[str]]:
    """(the row budget, quotas per cluster, notes) for `--fraction` / `--budget`; `left_out`: select_rows'."""
    notes = []
    n_available = int(available.sum())
    requested = fraction_budget(n, fraction) if mode == "fraction" else int(budget)
    if requested > n_available:
        notes.append(f"budget of {counted(requested, 'row')} is larger than {rows_left(n_available, dropped, left_out)}"
                     ": selecting all of them")
    if kinds is not None:  # three levels, the top one weighted: the water-filling's own sequence, cut at the budget
        seq = take_sequence(order, clusters, np.ones(len(clusters), dtype=np.int64), balance_power, groups, kinds)
        quotas = np.bincount(clusters[seq[:min(requested, n_available)]], minlength=len(available)).astype(np.int64)
    elif groups is not None:
        quotas = grouped_quotas(available, groups, min(requested, n_available), balance_power)
    else:
        quotas = water_fill_quotas(available, min(requested, n_available), balance_power)
    return requested, quotas, notes


def _rank_in_cluster(order: np.ndarray, clusters: np.ndarray, available: np.ndarray, quotas: np.ndarray,
                     picked: np.ndarray | None, picks, features) -> np.ndarray:
    """Rank in its cluster per row position (0 = first pick, -1 = not selected): the `picked` rows (source
    bounds), else the rows an order's `picks` chooses, else the first `quota` rows of each cluster in `order`."""
    n = len(clusters)
    rank = np.full(n, -1, dtype=np.int64)
    if picked is not None:  # a cluster's selected rows, in its preference order (not always a prefix of it)
        is_picked = np.zeros(n, dtype=bool)
        is_picked[picked] = True
        in_order = is_picked[order]
        run = np.cumsum(in_order)
        seg_start = np.concatenate([[0], np.cumsum(available)[:-1]])
        before = np.concatenate([[0], run])[seg_start][clusters[order]]
        rank[order[in_order]] = (run - before - 1)[in_order]
    elif picks is not None:
        starts = np.concatenate([[0], np.cumsum(available)])
        for c in np.flatnonzero(quotas).tolist():
            rows = order[starts[c]:starts[c + 1]]  # near order: rows[0] is the most typical
            chosen = picks(features[rows], int(quotas[c]))
            rank[rows[chosen]] = np.arange(len(chosen))
    else:
        in_cluster = clusters[order]
        starts = np.concatenate([[0], np.cumsum(available)[:-1]])
        r = np.arange(len(order), dtype=np.int64)
        r -= starts[in_cluster]
        chosen = r < quotas[in_cluster]
        rank[order[chosen]] = r[chosen]
        del in_cluster, r, chosen
    return rank



def selection_summary_rows(sel: Selection, limit: int | None = 32) -> list[dict]:
    """Per cluster: size -> selected (all clusters when there are at most `limit`, else the smallest and
    largest clusters around a '...' row)."""
    return condensed(cluster_rows(sel.sizes, sel.quotas, sel.available if sel.dedup_dropped else None), limit)


def cluster_rows(sizes, quotas, available=None) -> list[dict]:
    """Every cluster's row of a selection's table, smallest first (ties by id): size, rows left by --dedup
    (`available`, when it dropped any), selected, kept (selected ÷ size; None for an empty cluster)."""
    sizes, quotas = np.asarray(sizes), np.asarray(quotas)
    out = []
    for c in np.lexsort((np.arange(len(sizes)), sizes)):
        row = {"cluster": int(c), "size": int(sizes[c])}
        if available is not None:
            row["after_dedup"] = int(available[c])
        row["selected"] = int(quotas[c])
        row["kept"] = round(float(quotas[c] / sizes[c]), 4) if sizes[c] else None
        out.append(row)
    return out


def condensed(rows: list[dict], limit: int | None = 32) -> list[dict]:
    """A table for a screen: all its rows when there are at most `limit`, else the first and last limit // 2
    around a row of '...' (in its first column)."""
    if limit is None or len(rows) <= limit:
        return rows
    first = next(iter(rows[0]))
    return rows[:limit // 2] + [{k: "..." if k == first else "" for k in rows[0]}] + rows[-(limit // 2):]
