"""Budgets taken along the water-filling's sequence of rows (docs/architecture.md, "Layers"): a
budget in tokens, and per-source bounds on a budget in rows or tokens. Pure functions on numpy arrays.

    seq    = take_sequence(order, clusters, weights)              # the rows in the order water-filling takes them
    quotas = token_water_fill(...)                                 # rows per cluster for a budget in tokens
    rows   = source_bounded_rows(...)                              # the rows, each source within its share
    table  = source_accounting(names, sources, tokens, selected)   # each source's rows and tokens, before and after

With unit weights and p = 0 the sequence is exactly selection.water_fill_quotas (grouped_quotas with groups),
so these generalise the row quotas of selection.py, which calls them from `select_rows` (targeting.py takes
`take_sequence` for a targeted budget in tokens); a change here that changes what is selected bumps
selection.ALGORITHM_VERSION (and targeting's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cluster_curate.errors import CurateError, counted, not_a_share


TOKEN_MODES = ("token-budget", "token-fraction")


@dataclass(frozen=True)
class Kinds:
    """The level above the groups (`cluster --kinds`, answer_kinds.py): the kind of each group, and each kind's
    share of the budget relative to one group's. Budgets are water-filled over kinds by those weights first,
    then over the groups inside each kind, then over the clusters inside each group."""
    of_group: np.ndarray
    weight: np.ndarray


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
            raise not_a_share("--token-fraction", token_fraction)
        return "token-fraction"
    return None


def token_budget_for(total_tokens: int, token_budget: int | None = None, token_fraction: float | None = None,
                     counted_by: str = "counted", left_out: int = 0) -> int:
    """Tokens for `--token-budget T` (T itself) or `--token-fraction F` (floor(F·total)); a budget larger
    than the data is refused (a row budget is capped instead: here it usually means the wrong tokenizer).
    left_out: the rows --decontaminate left out before `total_tokens` was counted (named in the refusal)."""
    if token_budget is not None:
        if token_budget > total_tokens:
            whose = (f"the {total_tokens:,} tokens ({counted_by}) left after removing {counted(left_out, 'row')} "
                     "--decontaminate matched" if left_out else f"the data's {total_tokens:,} tokens ({counted_by})")
            raise CurateError(f"--token-budget {int(token_budget):,} is larger than {whose}; lower it or use "
                              "--token-fraction")
        return int(token_budget)
    return max(1 if total_tokens else 0, int(math.floor(token_fraction * total_tokens + 1e-9)))


def most_rows_within(tokens: np.ndarray, budget_tokens: int) -> int:
    """The most rows any selection of at most `budget_tokens` tokens holds (the smallest rows, whatever the order
    or the clusters); what a budget in tokens can buy, known before the selection is made."""
    return int(np.searchsorted(np.cumsum(np.sort(np.asarray(tokens, dtype=np.int64))), budget_tokens, side="right"))


def check_budget_buys_a_row(tokens: np.ndarray, budget_tokens: int, mode: str, counted_by: str) -> None:
    """A budget in tokens below every row selects nothing, in any order: refused (before the search of a
    targeted selection, and in `run` before the first stage)."""
    if len(tokens) and int(np.min(tokens)) > budget_tokens:
        raise CurateError(f"--{mode}: {budget_tokens:,} tokens is less than the smallest row "
                          f"({int(np.min(tokens)):,} tokens, {counted_by}); raise it")


def token_water_fill(order: np.ndarray, clusters: np.ndarray, tokens: np.ndarray, available: np.ndarray,
                     budget_tokens: int, balance_power: float = 0.0,
                     group_of_cluster: np.ndarray | None = None, kinds: Kinds | None = None) -> np.ndarray:
    """Rows per cluster (quotas) for a budget in tokens: `water_fill_quotas` with each cluster's quota in
    tokens. Each cluster gives its rows in `order` (positions grouped by cluster, `available[c]` rows each)
    while its running token total P stays under a common level λ·W_c^p (W_c: the cluster's tokens; p = 0:
    one level for all): rows are taken in `take_sequence` order until the next row would pass the budget, so
    the selected tokens S satisfy S ≤ T < S + (tokens of the next row), i.e. T is met to within one row.
    With unit tokens and p = 0 this is exactly `water_fill_quotas` (and `grouped_quotas` with groups)."""
    seq = take_sequence(order, clusters, tokens, balance_power, group_of_cluster, kinds)
    n_take = int(np.searchsorted(np.cumsum(np.asarray(tokens, dtype=np.int64)[seq]), budget_tokens, side="right"))
    return np.bincount(np.asarray(clusters)[seq[:n_take]], minlength=len(available)).astype(np.int64)


def take_sequence(order: np.ndarray, clusters: np.ndarray, weights: np.ndarray, balance_power: float = 0.0,
                  group_of_cluster: np.ndarray | None = None, kinds: Kinds | None = None,
                  cluster_share: np.ndarray | None = None) -> np.ndarray:
    """The row positions of `order` in the order the water-filling takes them: every row gets the key
    P / W_c^p (P: the running weight of its cluster up to and including it, in `order`; W_c: the cluster's
    weight; `cluster_share`, when given, replaces W_c^p: each cluster's level in proportion to its share, as
    selection.weighted_quotas), rows are sorted by key, ties to the cluster with more weight, then the lower
    cluster number.
    Any prefix of the sequence takes a prefix of each cluster's order. With groups: each group's rows are
    sequenced so over its clusters, then the groups are water-filled by their own running weights. With kinds
    (of the groups): each kind's rows are sequenced so over its groups, then the kinds are water-filled with
    their keys divided by their weights, so a prefix gives a kind of weight w about w times one group's share."""
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
    key_c = keys(prefix, w_c, c) if cluster_share is None else prefix / np.asarray(cluster_share, np.float64)[c]
    if group_of_cluster is None:
        seq = np.lexsort((c, -w_c[c], key_c))
    else:
        g = np.asarray(group_of_cluster, dtype=np.int64)[c]
        in_group = np.lexsort((c, -w_c[c], key_c, g))  # each group's rows, water-filled over its clusters
        prefix_g, w_g = levels(g[in_group], in_group)
        key_g = keys(prefix_g, w_g, g[in_group])
        if kinds is None:
            seq = in_group[np.lexsort((g[in_group], -w_g[g[in_group]], key_g))]
        else:  # each kind's rows, water-filled over its groups; then the kinds, by weight
            kind = np.asarray(kinds.of_group, dtype=np.int64)[g[in_group]]
            in_kind = np.lexsort((g[in_group], -w_g[g[in_group]], key_g, kind))
            seq, kind = in_group[in_kind], kind[in_kind]
            prefix_k, w_k = levels(kind, seq)
            key_k = keys(prefix_k, w_k, kind) / np.asarray(kinds.weight, dtype=np.float64)[kind]
            seq = seq[np.lexsort((kind, -w_k[kind], key_k))]
    return order[seq]


def source_bounded_take(seq: np.ndarray, sources: np.ndarray, weights: np.ndarray, budget: int,
                        low: np.ndarray, high: np.ndarray, names: list[str] | None = None,
                        unit: str = "rows", origins: tuple[list, list] | None = None,
                        budget_said: str = "") -> np.ndarray:
    """The rows to select when each source s must give at least low[s] and at most high[s] (in weight units:
    rows, or tokens) of a budget: every source takes its rows in `seq` order (the water-filling's), and the
    unbounded sources share what the bounds leave by the same order. Formally, with m_s(τ) the weight of
    source s among seq[:τ], each source takes its shortest prefix reaching min(max(m_s(τ), low), high) (at
    least low, at most high), and τ is the largest cut whose total is within the budget: with unit weights
    the total is the budget exactly, with tokens within one row. Returns the selected row positions (in
    `seq` order); a budget the bounds cannot meet is refused with the reason, naming where each bound in it
    was set (`origins`: per source, where its floor and its cap came from, io/mixture.source_bounds), and where
    the budget came from when it is not the one given (`budget_said`: ` (--dedup left only ...)`)."""
    names = names or [str(i) for i in range(len(low))]
    floor_from, cap_from = origins or ([None] * len(low), [None] * len(low))

    def said(labels: list, k: int, form: str = ", {}") -> str:
        return form.format(labels[k]) if labels[k] else ""

    def set_by(labels: list, bounded) -> str:
        named = [f"{labels[k]} for {names[k]}" for k in range(len(low)) if bounded[k] and labels[k]]
        return f" (set by {'; '.join(named)})" if named else ""
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
            raise CurateError(f"source {names[k]}: its floor is {int(low[k]):,} {unit}"
                              f"{said(floor_from, k, ' ({})')} and it has only {int(avail[k]):,} {unit} to select from")
        if floor_rows[k] > cap_rows[k]:
            # a source with no cap below the budget is bounded by the budget, not by a cap it does not have
            floor, cap = (f"its floor ({int(low[k]):,} {unit}{said(floor_from, k)})",
                          f"the budget ({budget:,} {unit})" if high[k] >= budget else
                          f"its cap ({int(high[k]):,} {unit}{said(cap_from, k)})")
            if low[k] <= high[k]:  # tokens: no prefix of its rows lands in between
                raise CurateError(f"source {names[k]}: no number of its rows, taken in the selection's order, holds "
                                  f"between {floor} and {cap}: the fewest that reach the floor hold "
                                  f"{int(cum[k][floor_rows[k] - 1]):,} {unit}; set the two further apart")
            raise CurateError(f"source {names[k]}: {floor} is above {cap}")

    def taken(tau: int) -> np.ndarray:
        m = np.array([int(np.searchsorted(p, tau, side="left")) for p in pos], dtype=np.int64)  # rows < tau
        return np.minimum(np.maximum(m, floor_rows), cap_rows)

    def total(rows: np.ndarray) -> int:
        return int(sum(int(c[r - 1]) for c, r in zip(cum, rows) if r > 0))

    floors = total(taken(0))
    if floors > budget:
        raise CurateError(f"the sources' floors need {floors:,} {unit}, more than the budget of {budget:,}"
                          + budget_said + set_by(floor_from, low > 0))
    most = total(taken(len(seq)))
    if budget - most >= (1 if unit == "rows" else max(int(w.max()), 1)):  # tokens: within one row is met
        raise CurateError(f"the sources' caps allow at most {most:,} {unit}, less than the budget of {budget:,}"
                          + budget_said + set_by(cap_from, high < avail))
    lo, hi = 0, len(seq)
    while lo < hi:  # the largest cut within the budget
        mid = (lo + hi + 1) // 2
        if total(taken(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    rows = taken(lo)
    return seq[np.sort(np.concatenate([p[:r] for p, r in zip(pos, rows)]))]



def share_bounds(low_share, high_share, budget):
    """The weight (rows or tokens) that a floor and a cap on a share of `budget` allow: at least
    ceil(low × budget), at most floor(high × budget), a float's last bit aside; as arrays, broadcast."""
    return np.ceil(low_share * budget - 1e-9), np.floor(high_share * budget + 1e-9)


def source_bounded_rows(order: np.ndarray, clusters: np.ndarray, sources: np.ndarray, weights: np.ndarray,
                        target: int, min_share, max_share, names: list[str] | None,
                        unit: str, balance_power: float = 0.0,
                        group_of_cluster: np.ndarray | None = None, kinds: Kinds | None = None,
                        origins: tuple[list, list] | None = None, budget_said: str = "") -> np.ndarray:
    """The selected row positions when each source gives at least `min_share` and at most `max_share` of the
    `target` (per source, NaN: no bound; None: no bound for any source): `source_bounded_take` along the
    water-filling's `take_sequence` (`origins`: where each bound was set, `budget_said`: where `target` came from,
    for its messages)."""
    n_src = int(np.max(sources)) + 1 if names is None else len(names)
    share_lo = np.nan_to_num(np.asarray(min_share if min_share is not None else [np.nan] * n_src,
                                        dtype=np.float64), nan=0.0)
    share_hi = np.nan_to_num(np.asarray(max_share if max_share is not None else [np.nan] * n_src,
                                        dtype=np.float64), nan=1.0)
    low, high = (bound.astype(np.int64) for bound in share_bounds(share_lo, share_hi, target))
    seq = take_sequence(order, clusters, weights, balance_power, group_of_cluster, kinds)
    return source_bounded_take(seq, sources, weights, target, low, high, names, unit, origins, budget_said)


def source_accounting(names: list[str], source_index: np.ndarray, tokens: np.ndarray | None = None,
                      selected: np.ndarray | None = None) -> list[dict]:
    """Per input: rows and tokens, and with `selected` (a mask over the same rows) what the selection kept,
    with each input's share of the whole before and after (the summaries', manifest's and report's table)."""
    idx = np.asarray(source_index, dtype=np.int64)
    n_src = len(names)
    rows = np.bincount(idx, minlength=n_src)
    tok = None if tokens is None else np.bincount(idx, weights=np.asarray(tokens, dtype=np.float64),
                                                  minlength=n_src)
    out = []
    for s, name in enumerate(names):
        row = {"source": name, "rows": int(rows[s]), "share_rows": round(rows[s] / max(rows.sum(), 1), 4)}
        if tok is not None:
            row.update(tokens=int(tok[s]), share_tokens=round(tok[s] / max(tok.sum(), 1), 4))
        out.append(row)
    if selected is not None:
        sel = np.asarray(selected, dtype=bool)
        s_rows = np.bincount(idx[sel], minlength=n_src)
        s_tok = None if tokens is None else np.bincount(idx[sel], weights=np.asarray(tokens, np.float64)[sel],
                                                         minlength=n_src)
        for s, row in enumerate(out):
            row.update(selected=int(s_rows[s]), kept_rows=round(s_rows[s] / max(rows[s], 1), 4),
                       selected_share_rows=round(s_rows[s] / max(s_rows.sum(), 1), 4))
            if s_tok is not None:
                row.update(selected_tokens=int(s_tok[s]), kept_tokens=round(s_tok[s] / max(tok[s], 1), 4),
                           selected_share_tokens=round(s_tok[s] / max(s_tok.sum(), 1), 4))
    return out
