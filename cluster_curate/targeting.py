"""Targeted selection (`select --target`): spend the budget on the pool rows that look like a few examples of the
task the user cares about, keeping the tool's balance over clusters inside that relevant part. Pure functions
on numpy arrays (docs/architecture.md: pure stages).

    search  = search_target(pool, target)              # one pass over the pool's features
    sel     = select_targeted(clusters, search, ...)   # exact budget (rows, or tokens to within one row)
    service = target_service(pool, target, search, sel)  # how each target example is served

The relevance score, and why (benchmarks/results/target_skill_*.md measure each choice):
* Each target row ranks the pool by cosine; the pool is served round-robin over target rows, as RDS+ does:
  round r holds every target row's r-th nearest pool row (most similar first within a round), a row counted
  where it first appears. Why not the cosine to the target *mean* (or the mean cosine, as LESS scores one task):
  a target of 40 examples of one kind and 4 of another has a mean that sits on the first kind, so the second
  one's rows never rank (skill benchmark: the worst target skill gets 13-27% of the oracle's rows by the
  mean, 76-83% round-robin). Unlike RDS+, a target row whose next rows were taken by a near-copy of it does
  not reach deeper into its list: near-copies in the target share their turns instead of each taking its own
  (share of the budget on the target skills 98-99% against RDS+'s 88-91%).
* The round-robin still gives a pile of near-copies of one target example in the pool that example's turns,
  and a kind the pool spreads over many clusters the turns of all of them. So the budget is not spent straight
  down the round-robin order: its first ceil(budget / target_weight) rows are the *relevant part*, and the
  budget is spread over the clusters the target pulls from — those holding the nearest pool row of at least
  `min_hits` target rows (2: one is as likely a stray as a kind) — in proportion to those target rows
  (selection.weighted_quotas: every target example asks for the same share, wherever the pool keeps its
  kind), each cluster capped at its rows in the relevant part, taken in round-robin order. What those clusters
  cannot hold is filled in round-robin order. (`quota_by="cluster"`, an equal share per pulled cluster, was
  version 1's rule: it gave a frequent target kind that spans many clusters more than its share.)
* `target_weight` w in [0, 1] is the knob between the two ends: w = 1 is pure relevance (the relevant part is
  the budget itself: the round-robin order, cut at the budget); as w falls the relevant part widens and the
  balance decides more; w = 0 is the untargeted balance over clusters (every row relevant, random order
  inside a cluster: the same rows as `select --within random` without a target on clusters without groups
  or kinds; the targeted balance is over clusters alone).
* A budget in tokens T (`targeted_sequence`): the same rule with every count in tokens, as the untargeted token
  budget is the row water-filling in tokens: the relevant part is the round-robin order until T / w tokens,
  each pulled cluster's level in tokens in proportion to its target rows, capped at its tokens in the relevant
  part; that order is cut where the next row would pass T.
* Target rows far from every pool row (`far_threshold`) take their turns last: their nearest rows are not
  the task, only the least unlike it; when 15% of the target or more is far, a warning says the pool may not
  hold it (FAR_WARN_SHARE: measured on tasks the pool holds and tasks it lacks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from cluster_curate.budget_sequence import check_token_budget_args, take_sequence, token_budget_for
from cluster_curate.errors import CurateError, counted
from cluster_curate.selection import check_budget_args, fraction_budget, rows_left, water_fill_quotas, weighted_quotas
from cluster_curate.within_orders import random_keys

# Chosen on the skill benchmark's dev draws 0-3 (benchmarks/results/target_skill_dev.md): of weights 1 .. 0.33,
# 1-2 hits and quotas by cluster or by hits, 0.6 with 2 hits by hits covered the oracle's per-skill counts best
# (96%, worst target skill 87%; RDS+ 88% / 83%).
# Bump when a targeted selection changes for the same inputs (docs/architecture.md); 3: --decontaminate and the
# target's overlap check match each user turn of a chat
ALGORITHM_VERSION = 3
DEFAULT_TARGET_WEIGHT = 0.6
QUOTA_BY = ("hits", "cluster")  # hits: the default (see above); cluster: version 1's rule, for the benchmark
MIN_TARGET_HITS = 2  # a cluster holding the nearest pool row of a single target row is as likely a stray as a kind
BLOCK_ROWS = 32768
N_PROBES = 64  # pool rows whose own nearest neighbours calibrate what "near the pool" means
DEPTH_FACTOR, MIN_DEPTH = 8, 16
FAR_QUANTILE = 0.05
# The share of target rows far from the pool (at least 2 of them, or the only one) from which a warning says the pool
# may not hold the task. Measured with the default text features (round 55; benchmarks/results/target_*): target
# rows of a task the pool holds were far for 0-8% (GSM8K test rows against GSM8K pools of 500-3,000 rows, Code
# Alpaca rows against a code-only pool or one with 5-7% code, fixture chats against the rest of their file, skill
# benchmark draws), but for 9-13% against GSM8K pools of 7,000-7,473 rows (the share grows with the pool); rows of a
# task it lacks, for 16-55% (Code Alpaca against GSM8K-only pools of 2,000-7,000 rows; GSM8K rows against a
# code-only pool, 16-23%; target_real_nocode.md, 52%). 15% sits between the two, with little margin on either side:
# the warning gives the share, and both ranges. In a pool of a few hundred rows no share tells them apart: the
# fixture chats split by task (123-137 rows) put 0 of 20 rows of the other task far (the text basis fitted on so few
# rows sees little of a task it lacks).
FAR_WARN_SHARE = 0.15


def _unit(x: np.ndarray) -> np.ndarray:
    """float32 rows scaled to unit L2 norm (all-zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.where(norms > 0, norms, 1.0), dtype=np.float32)


@dataclass
class TargetSearch:
    """Result of the one pass over the pool (positions are pool row positions)."""
    owner: np.ndarray           # int32 [n]: the nearest target row of every pool row
    relevance: np.ndarray       # float32 [n]: cosine to it
    nearest: np.ndarray         # int64 [m, depth]: each target row's nearest pool rows, most similar first
    nearest_sim: np.ndarray     # float32 [m, depth]
    far: np.ndarray             # bool [m]: nearest pool row below far_threshold (or an all-zero target row)
    far_threshold: float        # 95% of the pool's own rows have a nearest neighbour closer than this
    probe_sim: np.ndarray = field(repr=False, default=None)  # float32 [probes]: their nearest-neighbour cosines

    @property
    def n_target(self) -> int:
        return len(self.far)


def check_target_space(pool_dim: int, target: np.ndarray, *, pool_name: str = "pool", target_name: str = "target"):
    """The errors a target can have before any search: empty, wrong width, not finite."""
    target = np.asarray(target)
    if target.ndim != 2 or len(target) == 0:
        raise CurateError(f"{target_name}: the target has no rows")
    if target.shape[1] != pool_dim:
        raise CurateError(f"{target_name}: feature width {target.shape[1]} differs from {pool_name}'s {pool_dim}: "
                          "the target is not in the pool's feature space (embed it with `embed TARGET --like "
                          "POOL_EMBEDDINGS`)")
    bad = np.flatnonzero(~np.isfinite(target).all(axis=1))
    if len(bad):
        raise CurateError(f"{target_name}: row {int(bad[0])}: field embedding: not finite")


def list_depth(budget: int, target_weight: float, n_target: int, n: int) -> int:
    """How many nearest pool rows to keep per target row: DEPTH_FACTOR times its share of the relevant part
    (the round-robin reaches deeper into a list when other target rows took its first rows), at most n."""
    relevant = budget if target_weight <= 0 else math.ceil(budget / target_weight - 1e-9)
    return int(min(n, max(MIN_DEPTH, math.ceil(DEPTH_FACTOR * relevant / max(1, n_target)))))


def _keep(sim: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query (row of sim), its k largest values and their rows, in no particular order."""
    if sim.shape[1] <= k:
        return sim, rows
    part = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    return np.take_along_axis(sim, part, axis=1), np.take_along_axis(rows, part, axis=1)


def _sorted(sim: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Most similar first, ties to the lower row."""
    order = np.lexsort((rows, -sim), axis=1)
    return np.take_along_axis(sim, order, axis=1), np.take_along_axis(rows, order, axis=1)


def search_target(pool: np.ndarray, target: np.ndarray, *, depth: int = 16, n_probes: int = N_PROBES, seed: int = 0,
                  block_rows: int = BLOCK_ROWS) -> TargetSearch:
    """One pass over the pool, block by block, one matrix product per block (the exact inner-product search
    faiss's flat index does, in both directions at once): each pool row's nearest target row (owner, cosine),
    each target row's `depth` nearest pool rows, and the nearest-neighbour cosine of `n_probes` seeded pool
    rows (which calibrates `far`). Cosine = inner product of unit rows. O(n · (m + probes) · d)."""
    n, d = pool.shape
    check_target_space(d, target)
    t = _unit(target)
    m = len(t)
    zero_target = ~(np.abs(t).sum(axis=1) > 0)
    depth = max(1, min(depth, n))
    probes = np.sort(np.argsort(random_keys(np.arange(n), seed), kind="stable")[:min(n_probes, n)]) \
        if n > 1 else np.zeros(0, dtype=np.int64)
    queries = np.concatenate([t, _unit(pool[probes])]) if len(probes) else t
    best_sim = np.full((m, 0), -np.inf, dtype=np.float32)
    best_row = np.zeros((m, 0), dtype=np.int64)
    probe_best = np.full((len(probes), 0), -np.inf, dtype=np.float32)
    probe_row = np.zeros((len(probes), 0), dtype=np.int64)
    owner = np.zeros(n, dtype=np.int32)
    relevance = np.zeros(n, dtype=np.float32)
    live = np.flatnonzero(~zero_target)  # an all-zero target row is nobody's nearest
    for s in range(0, n, block_rows):
        xb = _unit(pool[s:s + block_rows])
        sim = queries @ xb.T  # [m + probes, block]
        if len(live):
            who = live[np.argmax(sim[live], axis=0)]
            owner[s:s + len(xb)] = who
            relevance[s:s + len(xb)] = sim[who, np.arange(len(xb))]
        rows = np.broadcast_to(np.arange(s, s + len(xb)), sim.shape)
        # the block's best first (a partition, not a sort), then merged with the best so far
        block_sim, block_row = _keep(sim[:m], rows[:m], depth)
        best_sim, best_row = _keep(np.concatenate([best_sim, block_sim], axis=1),
                                   np.concatenate([best_row, block_row], axis=1), depth)
        if len(probes):
            probe_best, probe_row = _keep(np.concatenate([probe_best, sim[m:]], axis=1),
                                          np.concatenate([probe_row, rows[m:]], axis=1), min(2, n))
    best_sim, best_row = _sorted(best_sim, best_row)
    probe_best, probe_row = _sorted(probe_best, probe_row)
    best_sim[zero_target] = 0.0
    probe_sim = np.zeros(0, dtype=np.float32)
    if len(probes):  # each probe's nearest other row
        first = np.argmax(probe_row != probes[:, None], axis=1)
        probe_sim = probe_best[np.arange(len(probes)), first].astype(np.float32)
    threshold = far_threshold(probe_sim)
    far = zero_target | (best_sim[:, 0] < threshold)
    return TargetSearch(owner=owner, relevance=relevance, nearest=best_row, nearest_sim=best_sim, far=far,
                        far_threshold=threshold, probe_sim=probe_sim)


def far_threshold(probe_sim: np.ndarray) -> float:
    """A target row is far from the pool when its nearest pool row is less similar than the nearest neighbour
    of 95% of the pool's own rows (the probes' 5th percentile), i.e. it is not like anything the pool holds
    the way pool rows are like one another. Without probes (a one-row pool): never far."""
    if len(probe_sim) == 0:
        return -np.inf
    return float(np.quantile(probe_sim.astype(np.float64), FAR_QUANTILE))


def round_robin_rank(search: TargetSearch) -> np.ndarray:
    """Position of every pool row in the round-robin order (0 = first), RDS+'s: round r holds each target row's
    r-th nearest pool row (most similar first within a round, then the lower row), a row counted where it first
    appears; target rows far from the pool take their turns after all others; rows in no list come last, by
    cosine to their nearest target row."""
    n = len(search.owner)
    m, depth = search.nearest.shape
    turn = np.broadcast_to(np.arange(depth), (m, depth))
    far = np.broadcast_to(search.far[:, None], (m, depth))
    rows, sims = search.nearest.ravel(), search.nearest_sim.ravel()
    order = np.lexsort((rows, -sims, turn.ravel(), far.ravel()))
    listed, first = np.unique(rows[order], return_index=True)
    listed = listed[np.argsort(first, kind="stable")]  # in order of first appearance
    rank = np.full(n, -1, dtype=np.int64)
    rank[listed] = np.arange(len(listed))
    rest = np.flatnonzero(rank < 0)
    rest = rest[np.lexsort((rest, -search.relevance[rest].astype(np.float64)))]
    rank[rest] = len(listed) + np.arange(len(rest))
    return rank


@dataclass
class TargetedSelection:
    rows: np.ndarray             # positions of the selected rows, ascending
    cluster: np.ndarray          # int32 per selected row
    rank_in_cluster: np.ndarray  # int32 per selected row, 0 = first pick of its cluster
    relevance: np.ndarray        # float32 per selected row: cosine to its nearest target row
    owner: np.ndarray            # int32 per selected row: that target row
    sizes: np.ndarray            # rows per cluster
    relevant: np.ndarray         # rows per cluster in the relevant part
    quotas: np.ndarray           # rows selected per cluster
    hits: np.ndarray             # target rows (not far) whose nearest pool row is in the cluster
    requested: int
    target_weight: float
    relevant_rows: int
    notes: list = field(default_factory=list)
    dedup_dropped: int = 0       # as selection.Selection (no near-duplicate removal here)
    tokens_total: int | None = None     # as selection.Selection (with a budget in tokens)
    tokens_requested: int | None = None
    tokens_selected: int | None = None

    @property
    def available(self) -> np.ndarray:
        return self.sizes


def check_target_weight(target_weight: float) -> float:
    if not (0 <= target_weight <= 1) or not math.isfinite(target_weight):
        raise CurateError(f"--target-weight must be between 0 and 1, got {target_weight}")
    return float(target_weight)


def select_targeted(clusters: np.ndarray, search: TargetSearch, *, fraction: float | None = None,
                    budget: int | None = None, target_weight: float = DEFAULT_TARGET_WEIGHT,
                    balance_power: float = 0.0, ids: np.ndarray | None = None, seed: int = 0,
                    k: int | None = None, min_hits: int = MIN_TARGET_HITS,
                    quota_by: str = QUOTA_BY[0], tokens: np.ndarray | None = None,
                    token_budget: int | None = None, token_fraction: float | None = None,
                    tokens_counted_by: str = "counted", left_out: int = 0) -> TargetedSelection:
    """The budget over the clusters of the relevant part (the first ceil(budget / target_weight) rows of the
    round-robin order) that the target pulls from, in proportion to the target rows each holds (quota_by
    "cluster": water-filled evenly); inside a cluster, rows in round-robin order. target_weight 0: the whole
    pool is relevant and a cluster's rows come in the seeded random order (same ids and seed: the rows of
    `select --within random` on clusters without groups or kinds). Sums to exactly min(budget, n).

    A budget in tokens (token_budget T or token_fraction, with `tokens` per row; budget_sequence's contract):
    the same rule with every count in tokens (`targeted_sequence`), cut where the next row would pass T, so
    the selected tokens S satisfy S <= T < S + the next row's tokens. left_out: as selection.select_rows'."""
    token_mode = check_token_budget_args(token_budget, token_fraction)
    if token_mode is None:
        mode = check_budget_args(fraction, budget, None)
    elif fraction is not None or budget is not None:
        raise CurateError(f"give one budget: --{token_mode} and --{'fraction' if budget is None else 'budget'} "
                          "were both given")
    elif tokens is None:
        raise CurateError(f"--{token_mode} needs a token count per row")
    if quota_by not in QUOTA_BY:
        raise ValueError(f"quota_by must be one of {QUOTA_BY}, got {quota_by!r}")
    w = check_target_weight(target_weight)
    clusters = np.asarray(clusters)
    n = len(clusters)
    if n == 0:
        raise CurateError("no rows to select from")
    if len(search.owner) != n or (tokens is not None and len(tokens) != n):
        raise ValueError("the target search and the tokens must cover the rows being selected")
    k = int(clusters.max()) + 1 if k is None else k
    notes: list[str] = []
    if w == 0:  # within_orders.order_within_cluster's random key: the untargeted order, not relevance
        key = (random_keys(np.arange(n) if ids is None else np.asarray(ids), seed) >> np.uint64(32)).astype(np.uint32)
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(key, kind="stable")] = np.arange(n)
    else:
        rank = round_robin_rank(search)
    requested = tokens_requested = None
    if token_mode:
        tokens = np.asarray(tokens, dtype=np.int64)
        tokens_requested = token_budget_for(int(tokens.sum()), token_budget, token_fraction, tokens_counted_by,
                                            left_out)
        # the relevant part in tokens: the most relevant rows until the next would pass T / w (at w = 1 the
        # budget itself, so pure relevance is the round-robin order cut at T)
        n_relevant = n if w == 0 else int(np.searchsorted(np.cumsum(tokens[np.argsort(rank)]),
                                                          tokens_requested / w + 1e-9, side="right"))
    else:
        requested = fraction_budget(n, fraction) if mode == "fraction" else int(budget)
        take = min(requested, n)
        if requested > n:
            notes.append(f"budget of {counted(requested, 'row')} is larger than {rows_left(n, left_out=left_out)}: "
                         "selecting all of them")
        n_relevant = n if w == 0 else min(n, math.ceil(take / w - 1e-9))
    relevant_mask = rank < n_relevant
    sizes = np.bincount(clusters, minlength=k).astype(np.int64)
    relevant = np.bincount(clusters[relevant_mask], minlength=k).astype(np.int64)
    hits = target_hits(search, clusters, k)
    # the clusters the target pulls from; the relevant rows elsewhere only fill what these cannot hold
    open_ = relevant if w == 0 else np.where(pulled_clusters(hits, w, min_hits), relevant, 0)
    by_hits = quota_by == "hits" and w > 0
    picked = np.zeros(n, dtype=bool)
    if token_mode:
        seq = targeted_sequence(rank, clusters, relevant_mask & (open_[clusters] > 0), tokens,
                                hits if by_hits else None, balance_power)
        n_take = int(np.searchsorted(np.cumsum(tokens[seq]), tokens_requested, side="right"))
        if n_take == 0:
            raise CurateError(f"--{token_mode}: {tokens_requested:,} tokens is less than the first row of the "
                              f"targeted order ({int(tokens[seq[0]]):,} tokens); raise it")
        picked[seq[:n_take]] = True
    else:
        if by_hits:
            quotas = weighted_quotas(open_, hits * open_.astype(np.float64) ** balance_power, take)
        else:
            quotas = water_fill_quotas(open_, take, balance_power)
        # each cluster's open rows in rank order; the first `quota` of them
        cand = np.flatnonzero(relevant_mask & (open_[clusters] > 0))
        cand = cand[np.lexsort((rank[cand], clusters[cand]))]
        in_cluster = clusters[cand]
        starts = np.concatenate([[0], np.cumsum(open_)[:-1]])
        r = np.arange(len(cand)) - starts[in_cluster]
        picked[cand[r < quotas[in_cluster]]] = True
        short = take - int(picked.sum())
        if short:  # the rest of the budget in round-robin order
            rest = np.flatnonzero(~picked)
            picked[rest[np.argsort(rank[rest], kind="stable")[:short]]] = True
    rows = np.flatnonzero(picked)
    quotas = np.bincount(clusters[rows], minlength=k).astype(np.int64)
    by_cluster = rows[np.lexsort((rank[rows], clusters[rows]))]
    rank_in = np.empty(n, dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(quotas)[:-1]])
    rank_in[by_cluster] = np.arange(len(rows)) - first[clusters[by_cluster]]
    message = far_message(search)
    if message:
        notes.append(message)
    token_totals = {} if tokens is None else {
        "tokens_total": int(np.sum(tokens)), "tokens_requested": tokens_requested,
        "tokens_selected": int(np.asarray(tokens, dtype=np.int64)[rows].sum())}
    return TargetedSelection(rows=rows, cluster=clusters[rows].astype(np.int32),
                             rank_in_cluster=rank_in[rows].astype(np.int32), hits=hits,
                             relevance=search.relevance[rows].astype(np.float32),
                             owner=search.owner[rows].astype(np.int32), sizes=sizes, relevant=relevant, quotas=quotas,
                             requested=requested, target_weight=w, relevant_rows=int(n_relevant), notes=notes,
                             **token_totals)


def targeted_sequence(rank: np.ndarray, clusters: np.ndarray, open_rows: np.ndarray, tokens: np.ndarray,
                      hits: np.ndarray | None, balance_power: float = 0.0) -> np.ndarray:
    """Every pool row in the order a budget in tokens takes them: first the open rows (the relevant rows of the
    clusters the target pulls from) in the order budget_sequence.take_sequence's water-filling in tokens takes
    them, each cluster's in round-robin order, at a level in proportion to its target rows (hits; None: even,
    W_c^p), then every other row in round-robin order. Why build the whole order and cut it by tokens rather
    than turn T into a row budget (T / mean tokens per row): a cut of one order meets T to within one row, and
    the balance property is kept as it is stated, in tokens: each pulled cluster's share of the budget's tokens
    in proportion to its target rows, capped at its tokens in the relevant part (the row budget's rule, with
    rows counted in tokens, as the untargeted token budget does). With a row budget select_targeted takes the
    same rows up to the rounding of the quotas (largest remainder there, first come here)."""
    open_pos = np.flatnonzero(open_rows)
    share = None
    if hits is not None:  # weighted_quotas' weights hits · W_c^p, W_c in tokens; a cluster of weight 0 gets none
        relevant_tokens = np.bincount(clusters[open_pos], weights=tokens[open_pos], minlength=len(hits))
        share = hits * relevant_tokens ** balance_power
        open_pos = open_pos[share[clusters[open_pos]] > 0]
    open_pos = open_pos[np.lexsort((rank[open_pos], clusters[open_pos]))]
    seq = take_sequence(open_pos, clusters, tokens, balance_power, cluster_share=share)
    rest = np.ones(len(rank), dtype=bool)
    rest[open_pos] = False
    rest = np.flatnonzero(rest)
    return np.concatenate([seq, rest[np.argsort(rank[rest], kind="stable")]])


def pulled_clusters(hits, target_weight: float, min_hits: int = MIN_TARGET_HITS) -> np.ndarray:
    """Per cluster (of `hits`, target_hits' counts): whether the target pulls from it, the budget spread over it
    by its target rows: it holds the nearest pool row of at least `min_hits` target rows. None at target_weight 0,
    the balance over every cluster alone (the module docstring)."""
    return (np.asarray(hits) >= min_hits) & (target_weight > 0)


def target_hits(search: TargetSearch, clusters: np.ndarray, k: int) -> np.ndarray:
    """Per cluster: the target rows whose nearest pool row is in it (far target rows count only when all are)."""
    near = ~search.far if not search.far.all() else np.ones(search.n_target, dtype=bool)
    return np.bincount(np.asarray(clusters)[search.nearest[near, 0]], minlength=k).astype(np.int64)


def far_message(search: TargetSearch, target_name: str = "target") -> str | None:
    """The warning for a target a good part of which is far from the pool (None when it is not): FAR_WARN_SHARE of
    its rows or more (see there), and 2 rows at least unless all are far (one row of many is as likely a stray)."""
    n_far, m = int(search.far.sum()), search.n_target
    if m == 0 or n_far < FAR_WARN_SHARE * m or n_far < min(2, m):
        return None
    best = float(np.max(search.nearest_sim[:, 0]))
    which = ("the 1 target row is" if m == 1 else f"all {m} target rows are") if n_far == m else \
        f"{n_far} of {m} target rows {'is' if n_far == 1 else 'are'}"
    return (f"{target_name}: {which} far from the pool (nearest pool row less similar than {search.far_threshold:.3f}, "
            f"which 95% of pool rows exceed with their own nearest neighbour; best {best:.3f}): the pool may not "
            f"contain the task ({n_far / m:.0%} far; measured: up to 13% for a task a pool holds, 16% and more for one "
            "it lacks)")


# ------------------------------------------------------------------------------------------ reporting

def target_service(pool: np.ndarray, target: np.ndarray, search: TargetSearch, sel: TargetedSelection,
                   clusters: np.ndarray, *, k: int = 3) -> dict:
    """How the selection serves each target example (selected rows it owns, its nearest selected rows and their
    cosine) and which clusters the target pulled from (target rows whose nearest pool row is there, relevant
    rows, selected rows), for the summary and `report`."""
    import faiss

    t = _unit(target)
    picked = sel.rows
    kk = min(k, len(picked))
    if kk:
        sim, idx = faiss.knn(t, _unit(pool[picked]), kk, metric=faiss.METRIC_INNER_PRODUCT)
        near_rows, near_sim = picked[idx], sim
    else:
        near_rows = np.zeros((len(t), 0), dtype=np.int64)
        near_sim = np.zeros((len(t), 0), dtype=np.float32)
    owned = np.bincount(sel.owner, minlength=len(t))
    per_target = [{"target_row": j, "selected_nearest_to_it": int(owned[j]),
                   "nearest_pool_cosine": round(float(search.nearest_sim[j, 0]), 4),
                   "far": bool(search.far[j]),
                   "cluster": int(clusters[search.nearest[j, 0]]),
                   "nearest_selected": near_rows[j].tolist(),
                   "nearest_selected_cosine": [round(float(v), 4) for v in near_sim[j]]}
                  for j in range(len(t))]
    hits = sel.hits
    pulled = np.flatnonzero((hits > 0) | (sel.quotas > 0))
    pulled = pulled[np.lexsort((pulled, -sel.quotas[pulled], -hits[pulled]))]
    per_cluster = [{"cluster": int(c), "size": int(sel.sizes[c]), "target_rows": int(hits[c]),
                    "relevant": int(sel.relevant[c]), "selected": int(sel.quotas[c])} for c in pulled]
    served = owned > 0
    return {"target_rows": len(t), "served": int(served.sum()), "far": int(search.far.sum()),
            "far_threshold": round(float(search.far_threshold), 4), "relevant_rows": sel.relevant_rows,
            "target_weight": sel.target_weight, "per_target": per_target, "clusters": per_cluster}
