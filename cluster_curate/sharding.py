"""Allocation of a selection across data-parallel ranks: pure functions on numpy arrays.

Vocabulary. The selection has `s` rows (indexed 0..s-1 here; the caller maps them to dataset ids), each
with a cluster label and a token count. Training runs on N ranks with micro-batch M, so one synchronised
*global step* consumes B = N × M rows. A plan is a grid `rows[t, r, m]` (step t, rank r, slot m) of
selection indices; shard r is `rows[:, r, :]` read step by step, which is the order rank r consumes it.

How the default ("stratified") allocation is built, and why:

1. Which rows (`stratified_order`): inside each cluster the rows are shuffled, then the clusters are merged
   by the Webster/Sainte-Laguë divisor sequence (the j-th row of cluster c gets the key (j + ½) / s_c).
   Any prefix of this stream holds every cluster in proportion (within one row), so the remainder that
   `--remainder drop` leaves out (the tail) is spread over clusters, and `wrap` repeats its head. A mixture
   selection's floors and caps on its inputs' shares are kept too (`bounded_stream`): where the tail (head)
   would break one, as many rows of each input as keep them are left over (repeated), each input's last
   (first) in the stream.
2. Which step (`compose_steps`): with T steps, cluster c puts s_c // T rows in every step and its s_c % T
   extra rows in distinct steps, dealt round-robin along a golden-ratio order of the steps (so a
   cluster's extras are spread over the epoch, not bunched). Every step then holds floor or ceil of each
   cluster's share — the paper's "one of each cluster per step" generalised to any k, N and M: when
   k ≤ N × M every step holds every cluster, and when k is larger the clusters rotate evenly along the
   epoch. A repeat (`wrap`) never shares a step with its original.
3. Ranks (`balance_ranks`): inside each step, rows are dealt to ranks cluster by cluster (so a step's
   ranks see different clusters), then pairwise swaps between the most loaded rank and the others even out
   the token loads — first swaps inside a cluster (which keep every rank's cluster counts), then any swap.
   Finally each step's micro-batches go to the ranks that hold the fewest rows of their clusters so far
   (`assign_ranks`, a minimum-cost assignment per step, ties broken at random; past 128 ranks the labels
   are random per step), so a cluster's rows spread over the ranks along the epoch and each rank's mix
   follows the selection's (`rank_mix_tv`; random labels per step left it about what a random deal gives
   with many clusters). It moves whole micro-batches, so
   every token figure is unchanged; keeping every cluster within one row per rank would need swaps across
   micro-batches, which cost token balance (GSM8K's token imbalance mean 1.004-1.006 -> 1.007-1.008). All
   but `pair_by_length`'s dealing and `assign_ranks` (loops over rows and steps, about 2 s a million rows)
   is vectorised over steps: O(s log s) overall.

Length grouping (`length_window`, default 64 steps): inside each window of steps, a cluster's rows are
re-dealt to its slots in length order, so a step holds rows of similar length (its cluster counts do not
change), and the window's steps are then shuffled
(no short-to-long curriculum; like `group_by_length` mega-batches). Sums of tokens then balance even on
heavy-tailed lengths, and a trainer that pads a micro-batch to its longest row computes far fewer pad
tokens. That lines up each cluster's own lengths; across clusters (`pair_by_length`), the rows of the
clusters smaller than T (one row a step at most) are then re-dealt inside the window by their length among
all such rows, keeping every step's cluster counts, so that a step's rows are of similar length whatever their
cluster: where the ranks of a step cannot trade rows (micro-batch 1 or 2, or `padded`) this is what balances
them (benchmarks/results/shard_lengths.md); a window keeps its steps unless this lowers what they cost. Then
steps trade their longest rows for shorter ones of steps that cost more anyway (`_trade_longest_rows`, same
cluster counts), which reaches the rows of big clusters and small selections that the re-deal cannot place.
`--balance padded` is for such trainers: a step costs M × (longest row of the step) whatever the
split, so the lever is the step's composition (the grouping above), and inside a step the longest rows
are dealt one per rank. The window grows to hold ~16 rows of an average cluster when k is large.

`paper_allocation` reproduces the paper (rank r trains only on cluster r; needs k = N) and
`random_allocation` is the naive baseline; both produce the same grid so `balance_figures` (shard_balance.py)
compares all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cluster_curate.budget_sequence import share_bounds
from cluster_curate.errors import CurateError, counted
from cluster_curate.registry import Registry

# The version of this stage's algorithm: part of every artifact's fingerprint and of `run`'s up-to-date check.
# Bump it when the same inputs and options give a different output (docs/architecture.md, "Lineage").
ALGORITHM_VERSION = 9  # 2: pair_by_length; 3: its trades of a step's longest row; 4: a JSON-text column
# whose keys first differ in a later batch holds every row as its record wrote it (was Arrow's JSON of a struct);
# 5: --tokenizer counts each answer as a trainer tokenizes it after its prompt, end-of-turn tokens and all; 6: a JSON
# column whose objects or lists a Parquet type would change (whole numbers beside floats: 3 as 3.0; keys in another
# order; empty objects; whole numbers a float column would round) is JSON text, each row as its record wrote it;
# 7: a source column named like a renamed one (`source_id`, `source_weight`) gets one more `_` whatever the batch
# holds (io/datasets.py `reserved_rename`), and the manifest records every rename; 8: each step's micro-batches go
# to the ranks holding the fewest rows of their clusters so far (`assign_ranks`), not to random ranks; 9: the rows
# left over or repeated keep a mixture selection's source floors and caps (`bounded_stream`)
SHARD_COLUMNS = ("cluster", "step", "weight", "wrapped")  # what `shard` adds to every source row of a shard

BALANCES = ("tokens", "padded")
REMAINDERS = ("drop", "wrap")
# Steps per length-grouping window (0 = off). Grouping rows of similar length into the same steps is what
# lowers a padding trainer's compute, and it also lets sum-of-tokens balance hold on heavy-tailed lengths
# (benchmarks/results/code_figures.md); the window keeps it local, like HF's
# group_by_length mega-batches, so the epoch has no short-to-long curriculum.
DEFAULT_LENGTH_WINDOW = {"tokens": 64, "padded": 64}
# Trading rows between steps by length (pair_by_length): a window within this factor of its least cost is left as
# it is; a trade search spans at most this many steps, and stops when a round gains less than this share.
TRADE_ABOVE_LEAST = 1.02
TRADE_BLOCK = 32
TRADE_MIN_GAIN = 1e-3


# ------------------------------------------------------------------------------------------- weights

def loss_weights(cluster_sizes_in_data: np.ndarray, cluster_sizes_in_selection: np.ndarray) -> np.ndarray:
    """Per-cluster loss weight (n_c / n) ÷ (s_c / s) that restores the data's cluster proportions.

    Both arrays are aligned by cluster. With equal quotas (s_c = s / K) this is the paper's w = K·n_c / n.
    A cluster with no selected row gets weight 0 (it contributes no rows to weight)."""
    n_c = np.asarray(cluster_sizes_in_data, dtype=np.float64)
    s_c = np.asarray(cluster_sizes_in_selection, dtype=np.float64)
    if n_c.shape != s_c.shape:
        raise CurateError(f"cluster sizes: {n_c.shape[0]} clusters in the data but {s_c.shape[0]} in the selection")
    if (n_c < 0).any() or (s_c < 0).any():
        raise CurateError("cluster sizes must not be negative")
    n, s = n_c.sum(), s_c.sum()
    if n <= 0 or s <= 0:
        raise CurateError("cluster sizes: the data or the selection is empty")
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(s_c > 0, (n_c / n) / (s_c / s), 0.0)
    return w


# ---------------------------------------------------------------------------------------------- plan

@dataclass
class ShardPlan:
    """rows[t, r, m]: selection index at step t, rank r, slot m. wrapped[t, r, m]: that row is a repeat."""
    rows: np.ndarray
    wrapped: np.ndarray
    leftover: np.ndarray  # selection indices not in any shard (remainder "drop")
    allocation: str
    balance: str
    remainder: str
    info: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.rows.shape[0])

    @property
    def num_shards(self) -> int:
        return int(self.rows.shape[1])

    @property
    def micro_batch_size(self) -> int:
        return int(self.rows.shape[2])

    @property
    def rows_per_shard(self) -> int:
        return self.steps * self.micro_batch_size

    def shard_rows(self, rank: int) -> np.ndarray:
        """Selection indices of shard `rank`, in the order the rank consumes them."""
        return self.rows[:, rank, :].reshape(-1)


# ------------------------------------------------------------------------------------------ source bounds

@dataclass
class SourceBounds:
    """A mixture selection's floors and caps on its inputs (select's `source_shares`), which the rows a plan leaves
    over (drop) or repeats (wrap) are chosen to keep over the sharded rows. Per selection row: `source` (0..S-1)
    and `weight` in the bounds' unit (1: rows; tokens under a token budget). Per input: `low` and `high` shares
    (0 and 1: none) of `budget`, the selection's budget they bound (rows, or tokens)."""
    source: np.ndarray
    weight: np.ndarray
    low: np.ndarray
    high: np.ndarray
    budget: int

    def excess(self, kept: np.ndarray, budget: np.ndarray) -> np.ndarray:
        """How far each input's weight `kept[..., k]` is below its floor or above its cap out of `budget[...]`, the
        bounds rounded as select rounds them (budget_sequence.share_bounds); 0 within them."""
        low, high = share_bounds(self.low, self.high, np.asarray(budget, dtype=np.float64)[..., None])
        return np.maximum(low - kept, 0) + np.maximum(kept - high, 0)

    def broken(self, kept: np.ndarray, budget: float) -> list[tuple[int, float, str, float]]:
        """Per input out of its bounds with weight `kept[k]` of `budget`: (input, its share of the weight kept,
        "floor" or "cap", that bound)."""
        out = []
        floors = share_bounds(self.low, self.high, budget)[0]
        for k in np.flatnonzero(self.excess(kept, budget) > 0):
            below = kept[k] < floors[k]
            out.append((int(k), float(kept[k] / max(kept.sum(), 1)), "floor" if below else "cap",
                        float(self.low[k] if below else self.high[k])))
        return out

    def broken_by(self, rows: np.ndarray, wrapped: np.ndarray) -> list[tuple[int, float, str, float]]:
        """`broken` of a plan's rows (repeats counted again, the budget growing by their weight)."""
        w = self.weight[rows.reshape(-1)].astype(np.float64)
        kept = np.bincount(self.source[rows.reshape(-1)], weights=w, minlength=self.low.shape[0])
        return self.broken(kept, self.budget + w[wrapped.reshape(-1)].sum())


def pick_within_bounds(candidates: np.ndarray, group: np.ndarray, count: np.ndarray, sign: int,
                       bounds: SourceBounds) -> tuple[np.ndarray, list[tuple[int, float, str, float]]]:
    """Which `count[g]` rows of each group g (`group` per candidate) to leave over (`sign` -1) or repeat (+1) so
    that the sharded rows keep the selection's source bounds. `candidates`: selection indices, each group's in
    order of preference (drop: the stream's last rows first; wrap: its first), of which each group's first
    `count[g]` are the pick with no bounds to keep. The bounds bound shares of the selection's budget less the
    weight left over (plus the weight repeated): select's own check, on what the shards hold. From the preferred
    pick, a row at a time moves from one input to another inside a group, the move that most lowers the inputs'
    total excess, until none is left or no move lowers it: with rows (the budget then fixed) and one group, only
    where no pick keeps every bound, since any excess then has another input that can give or take a row. Inside
    an input, its most preferred rows are picked. Returns (a mask over `candidates`: picked; per input still out of
    its bounds: (input, its share of the shards' weight, "floor" or "cap", that bound))."""
    n, n_src, n_groups = candidates.shape[0], bounds.low.shape[0], count.shape[0]
    cell = group * n_src + bounds.source[candidates].astype(np.int64)
    by_cell = np.lexsort((np.arange(n), cell))  # each (group, input)'s rows, in order of preference
    sizes = np.bincount(cell, minlength=n_groups * n_src).reshape(n_groups, n_src)
    start = np.concatenate(([0], np.cumsum(sizes)[:-1])).reshape(n_groups, n_src)
    cum = np.concatenate(([0.0], np.cumsum(bounds.weight[candidates][by_cell].astype(np.float64)), [np.nan]))
    rank = np.empty(n, dtype=np.int64)  # each candidate's place in its group's order of preference
    by_group = np.lexsort((np.arange(n), group))
    group_start = np.concatenate(([0], np.cumsum(np.bincount(group, minlength=n_groups))))
    rank[by_group] = np.arange(n) - group_start[group[by_group]]
    taken = np.bincount(cell[rank < count[group]], minlength=n_groups * n_src).reshape(n_groups, n_src)
    base = np.bincount(bounds.source, weights=bounds.weight.astype(np.float64), minlength=n_src)

    def state(x):
        picked = (cum[start + x] - cum[start]).sum(0)
        return base + sign * picked, bounds.budget + sign * picked.sum()

    kept, budget = state(taken)
    left = bounds.excess(kept, budget).sum()
    eye = np.eye(n_src)
    gs = np.flatnonzero(count)
    for _ in range(4 * int(count.sum()) + 16):  # each move lowers the excess; bounded all the same
        if left <= 0:
            break
        # every group's moves at once: [g, i, j] one more row of input i, one fewer of j, in group gs[g]
        at, here = start[gs] + taken[gs], taken[gs]
        more = np.where(here < sizes[gs], cum[at + 1] - cum[at], np.nan)
        fewer = np.where(here > 0, cum[at] - cum[np.maximum(at - 1, 0)], np.nan)
        moved = sign * (more[:, :, None, None] * eye[None, :, None, :] - fewer[:, None, :, None] * eye[None, None])
        e = bounds.excess(kept + moved, budget + sign * (more[:, :, None] - fewer[:, None, :])).sum(-1)
        e[np.isnan(e) | eye.astype(bool)[None]] = np.inf
        g, i, j = np.unravel_index(np.argmin(e), e.shape)
        if not e[g, i, j] < left:
            break
        left, g = e[g, i, j], gs[g]
        taken[g, i] += 1
        taken[g, j] -= 1
        kept, budget = state(taken)
    mask = np.zeros(n, dtype=bool)
    mask[by_cell] = np.arange(n) - np.repeat(start.reshape(-1), sizes.reshape(-1)) < np.repeat(taken.reshape(-1),
                                                                                                sizes.reshape(-1))
    return mask, bounds.broken(kept, budget)


def bounded_stream(order: np.ndarray, step_rows: int, remainder: str,
                   bounds: SourceBounds | None) -> tuple[np.ndarray, list]:
    """`order` rearranged so that cutting it into steps of `step_rows` (drop: leaving out its tail; wrap: repeating
    its head) keeps the selection's source bounds (`pick_within_bounds`): the rows picked go to the tail (drop) or
    the head (wrap), the others keep their order. Unchanged without bounds or a remainder. Returns (the stream,
    the bounds no pick keeps)."""
    s = order.shape[0]
    count = s % step_rows if remainder == "drop" else -s % step_rows
    if bounds is None or count == 0:
        return order, []
    drop = remainder == "drop"
    mask, broken = pick_within_bounds(order[::-1] if drop else order, np.zeros(s, dtype=np.int64),
                                      np.array([count]), -1 if drop else 1, bounds)
    if drop:
        mask = mask[::-1]
        return np.concatenate((order[~mask], order[mask])), broken
    return np.concatenate((order[mask], order[~mask])), broken


def min_length_window(k: int, b: int) -> int:
    """The fewest steps a --length-window window takes: about 16 rows of each of `k` clusters, in steps of `b`
    rows (a window of fewer has too few rows of a cluster to pair by length)."""
    return -(-16 * k // b)


def check_counts(num_shards: int, micro_batch_size: int) -> None:
    """At least one shard and one row a micro-batch."""
    if num_shards < 1:
        raise CurateError(f"--num-shards must be at least 1 (got {num_shards})")
    if micro_batch_size < 1:
        raise CurateError(f"--micro-batch-size must be at least 1 (got {micro_batch_size})")


def check_sizes(s: int, num_shards: int, micro_batch_size: int, selects: str | None = None) -> int:
    """The rows of one global step, refused unless `s` rows hold one (`selects`: how `run`'s preflight words a
    selection it has yet to make, whose budget may grow)."""
    check_counts(num_shards, micro_batch_size)
    b = num_shards * micro_batch_size
    if b > s:
        step = f"one global step needs --num-shards × --micro-batch-size = {num_shards} × {micro_batch_size} = {b} rows"
        raise CurateError(f"{step} but the selection has only {s}; use fewer shards or a smaller micro-batch"
                          if selects is None else
                          f"{step}, but {selects}; use fewer shards, a smaller micro-batch or a larger budget")
    return b


def cluster_index(clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the cluster labels present, each row's index into them, rows per label)."""
    labels, inverse, counts = np.unique(np.asarray(clusters), return_inverse=True, return_counts=True)
    return labels, inverse.reshape(-1), counts


def stratified_order(clusters: np.ndarray, rng: np.random.Generator, length: np.ndarray | None = None,
                     window: np.ndarray | None = None) -> np.ndarray:
    """A permutation of 0..s-1 in which every cluster is spread evenly (see the module docstring).

    Inside a cluster the order is random, or by `length` ascending (random among equal lengths).
    With `window` (a non-decreasing window number per row), the merge is done inside each window."""
    _, inv, _ = cluster_index(clusters)
    n = inv.shape[0]
    k = int(inv.max()) + 1 if n else 0
    group = inv if window is None else np.asarray(window, dtype=np.int64) * k + inv
    _, group, counts = np.unique(group, return_inverse=True, return_counts=True)
    tiebreak = rng.random(n)
    within = np.lexsort((tiebreak, group)) if length is None else np.lexsort((tiebreak, np.asarray(length), group))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    j = np.empty(n, dtype=np.int64)
    j[within] = np.arange(n) - starts[group[within]]
    key = (j + 0.5) / counts[group]
    cluster_priority = rng.permutation(k)[inv]  # fixed order among clusters on equal keys
    if window is None:
        return np.lexsort((cluster_priority, key))
    return np.lexsort((cluster_priority, key, window))


GOLDEN = (5 ** 0.5 - 1) / 2


def spread_permutation(t_count: int, rng: np.random.Generator) -> np.ndarray:
    """The steps 0..T-1 in golden-ratio order (random start): any run of this order is spread evenly over
    the epoch (three-distance theorem), so a cluster's extra rows dealt along a run are not bunched."""
    return np.argsort((np.arange(t_count) * GOLDEN + rng.random()) % 1.0, kind="stable")


def compose_steps(clusters: np.ndarray, t_count: int, rng: np.random.Generator, length: np.ndarray | None = None,
                  steps_per_window: int = 0) -> np.ndarray:
    """Which step each row goes to, so that every step holds floor or ceil of each cluster's share.

    clusters: cluster of each of the T × B rows to place. Cluster c with n_c rows puts n_c // T rows in every
    step, and its n_c % T (< T) extra rows in distinct steps along a run of `spread_permutation`; dealing
    the extras of all clusters round-robin over that order gives every step the same number of extras, so
    each step has exactly B rows. Rows are taken in random order inside a cluster; with `length` and
    `steps_per_window`, inside each window of steps a cluster's rows are re-dealt in length order (short
    rows to the window's first steps), so a step holds rows of similar length. Returns step[i] per row."""
    _, inv, counts = cluster_index(clusters)
    n, k = inv.shape[0], counts.shape[0]
    base, extra = counts // t_count, counts % t_count
    base_total = base * t_count
    base_cluster = np.repeat(np.arange(k), base_total)
    base_start = np.repeat(np.concatenate(([0], np.cumsum(base_total)[:-1])), base_total)
    base_step = (np.arange(base_cluster.shape[0]) - base_start) % t_count
    dealing = rng.permutation(k)
    extra_cluster = np.repeat(dealing, extra[dealing])
    extra_step = spread_permutation(t_count, rng)[np.arange(extra_cluster.shape[0]) % t_count]
    slot_cluster = np.concatenate((base_cluster, extra_cluster))
    slot_step = np.concatenate((base_step, extra_step))
    slots = np.lexsort((slot_step, slot_cluster))
    rows = np.lexsort((rng.random(n), inv))
    step = np.empty(n, dtype=np.int64)
    step[rows] = slot_step[slots]
    if length is not None and steps_per_window:
        window = step // steps_per_window
        tiebreak = rng.random(n)
        slots = np.lexsort((step, inv, window))                          # the group's steps, in step order
        rows = np.lexsort((tiebreak, np.asarray(length), inv, window))   # the group's rows, shortest first
        regrouped = np.empty(n, dtype=np.int64)
        regrouped[rows] = step[slots]
        step = regrouped
    return step


def _spaced_levels(q: np.ndarray, group: np.ndarray, gap: float) -> np.ndarray:
    """Per group (`group` non-decreasing, `q` ascending inside each group): levels as close to q as a spacing
    of at least `gap` between a group's consecutive levels allows — the mean of the lowest spaced sequence
    above q and the highest below it (both spaced, so their mean is too)."""
    n = q.shape[0]
    starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
    j = (np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))) * gap
    v = q - j
    offset = group * (4.0 + 2 * j.max(initial=0))  # each group above the last: running max/min stay inside it
    above = j + np.maximum.accumulate(v + offset) - offset
    below = j + np.minimum.accumulate((v + offset)[::-1])[::-1] - offset
    return (above + below) / 2


def _first_fit(order: np.ndarray, steps: np.ndarray, room: np.ndarray, inv: np.ndarray) -> np.ndarray | None:
    """Deal rows (in `order`) to `steps` (ascending, `room` rows each): each row to the first step with room
    that does not hold its cluster yet. A row that finds none trades places with the latest dealt row that
    can. Returns the step index per position of `order`, or None when no trade exists."""
    room = room.copy()
    held: list[set] = [set() for _ in steps]
    out = np.empty(order.shape[0], dtype=np.int64)
    first = 0
    for p, row in enumerate(order):
        c = int(inv[row])
        i = first
        while i < steps.shape[0] and (room[i] == 0 or c in held[i]):
            i += 1
        if i == steps.shape[0]:
            i = first  # every later step with room holds c: trade with an earlier row
            for q in range(p - 1, -1, -1):
                i2, c2 = out[q], int(inv[order[q]])
                if i2 != i and c not in held[i2] and c2 not in held[i]:
                    held[i2].discard(c2)
                    held[i2].add(c)
                    held[i].add(c2)
                    out[q], i = i, i2
                    break
            else:
                return None
            room[first] -= 1
        else:
            held[i].add(c)
            room[i] -= 1
        out[p] = i
        while first < steps.shape[0] and room[first] == 0:
            first += 1
    return out


def pair_by_length(step: np.ndarray, clusters: np.ndarray, t_count: int, length: np.ndarray,
                   steps_per_window: int, num_shards: int = 0) -> np.ndarray:
    """Re-deal, inside each window of steps, the rows of the clusters that have fewer rows than steps, so that
    a step holds rows of similar length across clusters, not only within each (compose_steps).

    Why: when each step holds one row of many different clusters (k > N × M, the usual case), the clusters'
    own length orders do not line up, so a step mixes short and long rows; with few rows per rank (micro-batch
    1 or 2) the ranks cannot trade them, and the ranks with short rows wait. Here the window's rows of those
    clusters are ordered by their length rank among all of them, spaced so that one cluster's rows can sit in
    distinct steps (`_spaced_levels`), and dealt in that order to the same slots, at most one row of a cluster
    per step (`_first_fit`): every step keeps its row count and each cluster its 0-or-1 share, so nothing
    else the plan promises changes. A window keeps its steps unless the re-deal lowers what they cost at
    least (`_step_cost`): with N × M rows to trade, a step usually costs its tokens ÷ N either way, and the
    plan stays as it was. Then, in a window that costs more than its least (packing its rows by length alone,
    or its tokens ÷ N), steps trade their longest rows (`_trade_in_window`). step: step per row
    (compose_steps); num_shards: 0 for `padded`; returns the steps."""
    _, inv, counts = cluster_index(clusters)
    sparse = (counts < t_count)[inv]
    b = step.shape[0] // t_count  # rows a step
    step = step.copy()
    window = step // steps_per_window
    by_window = np.argsort(window, kind="stable")
    bounds = np.flatnonzero(np.diff(window[by_window])) + 1
    for in_window in np.split(by_window, bounds):
        cost, least = _step_cost(step[in_window], length[in_window], num_shards)
        if cost <= least:  # nothing can lower the cost
            continue
        rows = in_window[sparse[in_window]]
        if rows.size >= 2:
            cost = _redeal_by_length(step, in_window, rows, length, inv, b, num_shards, cost)
        packed = np.sort(length[in_window])[b - 1::b].sum()  # what the steps' longest rows sum to at least
        if cost > TRADE_ABOVE_LEAST * max(packed, least):
            _trade_in_window(step, in_window, length, inv, sparse, num_shards)
    return step


def _redeal_by_length(step: np.ndarray, in_window: np.ndarray, rows: np.ndarray, length: np.ndarray,
                      inv: np.ndarray, b: int, num_shards: int, cost: float) -> float:
    """In place: the window's `rows` (of clusters smaller than T) re-dealt by length, kept only if that lowers
    the window's cost (`cost`, what it is now); returns the window's cost after."""
    steps, room = np.unique(step[rows], return_counts=True)
    q = np.empty(rows.size)
    # equal lengths keep the stream's order (random inside a cluster); nothing is drawn, so a window that
    # keeps its steps leaves the plan exactly as it was
    q[np.argsort(length[rows], kind="stable")] = (np.arange(rows.size) + 0.5) / rows.size
    by_cluster = np.lexsort((q, inv[rows]))
    level = np.empty(rows.size)
    level[by_cluster] = _spaced_levels(q[by_cluster], inv[rows][by_cluster], b / in_window.size)
    order = rows[np.lexsort((q, level))]
    dealt = _first_fit(order, steps, room, inv)
    if dealt is None:
        return cost
    kept = step[order]
    step[order] = steps[dealt]
    after = _step_cost(step[in_window], length[in_window], num_shards)[0]
    if after >= cost:
        step[order] = kept
        return cost
    return after


def _trade_in_window(step: np.ndarray, in_window: np.ndarray, length: np.ndarray, inv: np.ndarray,
                       sparse: np.ndarray, num_shards: int, max_rounds: int = 64) -> None:
    """In place, inside one window: trade a step's longest row for a row of another step wherever that lowers
    what the two steps cost (`_cost`), so that the rows the re-deal left alone (the big clusters') or could not
    place near their length (a cluster's rows must sit in distinct steps, which a small selection feels most)
    stop setting a step's cost. Trades pay between steps of neighbouring cost, so the search runs on blocks of
    steps in the order of their longest row: that bounds the work when a window grows to thousands of steps."""
    steps, at = np.unique(step[in_window], return_inverse=True)
    grid = in_window[np.argsort(at, kind="stable")].reshape(steps.shape[0], -1)  # [step, slot] -> row
    by_cost = np.argsort(length[grid].max(1), kind="stable")
    for block in np.array_split(by_cost, -(-by_cost.shape[0] // TRADE_BLOCK)):
        grid[block] = _trade_longest_rows(grid[block], length, inv, sparse, num_shards, max_rounds)
    step[grid] = steps[:, None]


def _trade_longest_rows(grid: np.ndarray, length: np.ndarray, inv: np.ndarray, sparse: np.ndarray,
                        num_shards: int, max_rounds: int) -> np.ndarray:
    """grid[step, slot] (rows): returns it after the trades. A trade keeps every step's cluster counts: two rows
    of one cluster, or rows of two clusters smaller than T (`sparse`) that the other step does not hold. Each
    round proposes, for every step, its best trade, and makes the proposals that share no step with a better
    one: vectorised over the steps."""
    grid = grid.copy()
    t_b, b = grid.shape
    _, local = np.unique(inv[grid], return_inverse=True)
    local = local.reshape(t_b, b)                                    # the block's clusters, numbered 0..u-1
    sparse_local = np.zeros(int(local.max()) + 1, dtype=bool)
    sparse_local[local] = sparse[grid]
    held = np.zeros((t_b, sparse_local.shape[0]), dtype=bool)
    ix = np.arange(t_b)
    for _ in range(max_rounds):
        held[:] = False
        held[ix[:, None], local] = True
        g = length[grid]
        top, low = g.argmax(1), g.argmin(1)
        longest, shortest, total = g[ix, top], g[ix, low], g.sum(1)
        c_top = local[ix, top]
        rest = g.copy()
        rest[ix, top] = -np.inf
        second = rest.max(1)
        rest[ix, top] = np.inf
        rest_low = rest.min(1)  # a's shortest once its longest is gone (inf when b = 1)
        rest[ix, top] = longest
        rest[ix, low] = np.inf
        second_low = rest.min(1)
        slot = np.arange(b)
        # step a gives its longest row x to step b and takes row (b, j) of length y: what the two steps cost
        # less after it
        x, y = longest[:, None, None], g[None]
        now = _cost(longest, shortest, total, num_shards, b)
        gain = (now[:, None, None] + now[None, :, None]
                - _cost(np.maximum(second[:, None, None], y), np.minimum(rest_low[:, None, None], y),
                        total[:, None, None] - x + y, num_shards, b)
                - _cost(np.maximum(np.where(slot == top[:, None], second[:, None], longest[:, None])[None], x),
                        np.minimum(np.where(slot == low[:, None], second_low[:, None], shortest[:, None])[None], x),
                        total[None, :, None] - y + x, num_shards, b))
        same = local[None] == c_top[:, None, None]
        other = (sparse_local[c_top][:, None, None] & sparse_local[local][None]
                 & ~held[:, c_top].T[:, :, None] & ~held[ix[:, None, None], local[None]])
        ok = (same | other) & (ix[:, None] != ix[None, :])[:, :, None]
        gain = np.where(ok, gain, 0.0).reshape(t_b, -1)
        best = gain.argmax(1)
        gain = gain[ix, best]
        a = np.flatnonzero(gain > 0)
        if a.size == 0:
            break
        partner, j = np.divmod(best[a], b)
        # a proposal is made when neither of its steps is in a better one (equal gains: the lower step first)
        rank = np.empty(a.size, dtype=np.int64)
        rank[np.lexsort((a, -gain[a]))] = np.arange(a.size)
        first = np.full(t_b, a.size)
        np.minimum.at(first, a, rank)
        np.minimum.at(first, partner, rank)
        made = (first[a] == rank) & (first[partner] == rank)
        if gain[a[made]].sum() < TRADE_MIN_GAIN * now.sum():
            break  # what is left to gain does not pay for the search
        a, partner, j = a[made], partner[made], j[made]
        grid[a, top[a]], grid[partner, j] = grid[partner, j], grid[a, top[a]].copy()
        local[a, top[a]], local[partner, j] = local[partner, j], local[a, top[a]].copy()
    return grid


def _cost(longest, shortest, total, num_shards: int, b: int):
    """What a step of b rows costs at least: its longest row (a trainer that pads to it, `num_shards` 0), or
    the larger of the rank that holds the longest row (and M - 1 others, each at least the shortest) and the
    step's tokens ÷ N (sum-of-tokens balance)."""
    if not num_shards:
        return longest
    return np.maximum(longest + (b // num_shards - 1) * shortest, total / num_shards)


def _step_cost(step: np.ndarray, length: np.ndarray, num_shards: int) -> tuple[float, float]:
    """(sum over steps of what the slowest rank costs at least (`_cost`), the least that sum can be: with
    `num_shards`, the window's tokens ÷ N)."""
    _, at = np.unique(step, return_inverse=True)
    longest = np.zeros(int(at.max()) + 1)
    np.maximum.at(longest, at, length)
    shortest = np.full(longest.shape[0], np.inf)
    np.minimum.at(shortest, at, length)
    total = np.bincount(at, weights=length)
    cost = _cost(longest, shortest, total, num_shards, step.shape[0] // longest.shape[0])
    return float(cost.sum()), float(total.sum() / num_shards) if num_shards else 0.0


def _separate_repeats(steps: np.ndarray, repeat: np.ndarray, clusters: np.ndarray, rng: np.random.Generator) -> None:
    """In place: a step must not hold a row and its repeat; swap the repeat with a row of the same cluster
    from another step (which keeps every step's cluster counts)."""
    t_count, b = steps.shape
    for t in range(t_count):
        values, counts = np.unique(steps[t], return_counts=True)
        for x in values[counts > 1]:
            j = int(np.flatnonzero((steps[t] == x) & repeat[t])[0])
            same = (clusters[steps] == clusters[x]) & ~np.isin(steps, steps[t])
            same[t] = False
            same &= ~(steps == x).any(1)[:, None]
            cand = np.argwhere(same)
            if cand.size == 0:
                continue  # cannot happen when a step is smaller than the selection; keep the plan valid anyway
            t2, j2 = cand[rng.integers(cand.shape[0])]
            steps[t, j], steps[t2, j2] = steps[t2, j2], steps[t, j]
            repeat[t, j], repeat[t2, j2] = repeat[t2, j2], repeat[t, j]


def assign_steps(order: np.ndarray, step_rows: int, remainder: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut a stream into global steps of `step_rows`: returns (steps[T, B], wrapped[T, B], leftover)."""
    if remainder not in REMAINDERS:
        raise CurateError(f"--remainder must be one of {', '.join(REMAINDERS)} (got {remainder!r})")
    s = order.shape[0]
    if remainder == "drop" or s % step_rows == 0:
        t = s // step_rows
        steps = order[: t * step_rows].reshape(t, step_rows)
        return steps, np.zeros(steps.shape, dtype=bool), order[t * step_rows:].copy()
    t = -(-s // step_rows)
    extra = t * step_rows - s
    topped = np.concatenate((order, np.resize(order, extra)))  # repeats from the start of the stream
    wrapped = np.zeros(topped.shape[0], dtype=bool)
    wrapped[s:] = True
    return topped.reshape(t, step_rows), wrapped.reshape(t, step_rows), order[:0].copy()


def _swap_refine(pos: np.ndarray, lengths: np.ndarray, clusters: np.ndarray, same_cluster: bool,
                 max_rounds: int) -> np.ndarray:
    """Improve a per-step split by swaps between the most loaded rank and any other (sum of tokens).

    pos[T, N, M] indexes the step's columns; returns the improved pos. Vectorised over steps: each
    round makes at most one swap per step, the one that most lowers the larger of the two ranks."""
    t_count, n, m = pos.shape
    if n < 2:
        return pos
    step_ix = np.arange(t_count)
    active = step_ix
    for _ in range(max_rounds):
        if active.size == 0:
            break
        p = pos[active]
        tix = step_ix[: active.size]
        L = np.take_along_axis(lengths[active], p.reshape(active.size, -1), 1).reshape(p.shape)
        C = np.take_along_axis(clusters[active], p.reshape(active.size, -1), 1).reshape(p.shape)
        loads = L.sum(-1)
        a = loads.argmax(1)
        load_a = loads[tix, a]
        La, Ca = L[tix, a], C[tix, a]                              # [t, M]
        d = La[:, None, :, None] - L[:, :, None, :]                # [t, N, M_a, M_b]: tokens moved a -> b
        new_pair = np.maximum(load_a[:, None, None, None] - d, loads[:, :, None, None] + d)
        ok = (d > 0) & (np.arange(n)[None, :] != a[:, None])[:, :, None, None]
        if same_cluster:
            ok &= Ca[:, None, :, None] == C[:, :, None, :]
        new_pair = np.where(ok, new_pair, np.inf)
        flat = new_pair.reshape(active.size, -1)
        best = flat.argmin(1)
        better = flat[tix, best] < load_a
        if not better.any():
            break
        b, i, j = np.unravel_index(best[better], (n, m, m))
        steps, ra = active[better], a[better]
        held_a = pos[steps, ra, i].copy()
        pos[steps, ra, i] = pos[steps, b, j]
        pos[steps, b, j] = held_a
        active = steps
    return pos


def balance_ranks(steps: np.ndarray, lengths: np.ndarray, clusters: np.ndarray, num_shards: int,
                  balance: str = "tokens", rng: np.random.Generator | None = None,
                  max_rounds: int = 64) -> np.ndarray:
    """Split each step's B = N × M rows into N micro-batches of M so token loads balance.

    steps[T, B]: selection indices; lengths, clusters: per selection index. Returns rows[T, N, M]."""
    if balance not in BALANCES:
        raise CurateError(f"--balance must be one of {', '.join(BALANCES)} (got {balance!r})")
    rng = rng or np.random.default_rng(0)
    t_count, b = steps.shape
    n = num_shards
    m = b // n
    step_len = np.asarray(lengths, dtype=np.float64)[steps]
    _, cl_inv, cl_counts = cluster_index(clusters)
    step_cl = cl_inv[steps]
    if balance == "padded":
        # longest rows one per rank, then the next N, ...: every rank's padded length is near the step's max
        order = np.argsort(-step_len, axis=1, kind="stable")
        pos = order.reshape(t_count, m, n).transpose(0, 2, 1).copy()
    else:
        # deal cluster by cluster (longest first within a cluster) in snake order over ranks, so each rank
        # gets its share of every cluster and a mix of long and short rows; then swap to even the loads
        order = np.lexsort((-step_len, step_cl), axis=1) if t_count else np.zeros((0, b), dtype=np.int64)
        snake = np.arange(b).reshape(m, n)
        snake[1::2] = snake[1::2, ::-1]
        rank_of_slot = np.empty(b, dtype=np.int64)
        rank_of_slot[snake.reshape(-1)] = np.tile(np.arange(n), m)
        slot_in_rank = np.argsort(np.argsort(rank_of_slot, kind="stable"), kind="stable") % m
        pos = np.empty((t_count, n, m), dtype=np.int64)
        pos[:, rank_of_slot, slot_in_rank] = order
        # in chunks of steps: the swap search holds [steps, N, M, M] temporaries, keep them bounded
        chunk = max(1, (1 << 20) // max(1, n * m * m))
        for lo in range(0, t_count, chunk):
            part = slice(lo, lo + chunk)
            for same_cluster in (True, False):
                pos[part] = _swap_refine(pos[part], step_len[part], step_cl[part], same_cluster=same_cluster,
                                         max_rounds=max_rounds)
    groups = np.take_along_axis(step_cl, pos.reshape(t_count, -1), 1).reshape(t_count, n, m)  # each row's cluster
    pos = pos[np.arange(t_count)[:, None], assign_ranks(groups, cl_counts.size, rng)]
    return np.take_along_axis(steps, pos.reshape(t_count, -1), 1).reshape(t_count, n, m)


MAX_ASSIGNED_RANKS = 128  # assign_ranks: 1M rows on 128 ranks × 1 take about 8 s here (1,024 ranks: 80 s)


def assign_ranks(groups: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """groups[T, N, M]: the cluster of each row of each step's N micro-batches -> which micro-batch each rank
    takes, [T, N]. Step by step, the rank holding the fewest rows of a micro-batch's clusters so far takes it (a
    minimum-cost assignment), so each cluster's rows spread evenly over the ranks along the epoch: one random
    label per step left a rank's cluster mix no better than a random deal with many clusters (rank_mix_tv). The
    step's micro-batches, hence every token figure, are unchanged; seeded noise breaks ties, so that no rank is
    systematically the heavy one."""
    from scipy.optimize import linear_sum_assignment
    t_count, n, m = groups.shape
    if n > MAX_ASSIGNED_RANKS:  # each step's assignment is O(N³): past this many ranks, random labels
        return np.argsort(rng.random((t_count, n)), axis=1)
    held = np.zeros((k, n))  # rows of each cluster each rank holds so far
    taken = np.empty((t_count, n), dtype=np.int64)
    for t in range(t_count):
        noise = rng.random((n, n)) * 1e-3  # below one row: ties only (drawn per step: memory stays N²)
        group, rank = linear_sum_assignment(held[groups[t]].sum(1) + noise)  # cost[micro-batch, rank]
        taken[t, rank] = group
        np.add.at(held, (groups[t, group].reshape(-1), np.repeat(rank, m)), 1)
    return taken


def plan_steps(clusters: np.ndarray, lengths: np.ndarray | None, num_shards: int, micro_batch_size: int = 1, *,
               allocation: str = "stratified", balance: str = "tokens", remainder: str = "drop",
               length_window: int | None = None, pair_lengths: bool = True, seed: int = 0,
               bounds: SourceBounds | None = None) -> ShardPlan:
    """The whole allocation: stream order, steps, ranks. `lengths` (tokens per row) may be None (all equal).
    `bounds`: a mixture selection's floors and caps on its inputs, which the rows left over or repeated keep where
    they can (those no choice keeps: `info["bounds_broken"]`, pick_within_bounds)."""
    clusters = np.asarray(clusters)
    s = clusters.shape[0]
    if allocation not in ALLOCATIONS:
        raise CurateError(f"--allocation must be one of {', '.join(ALLOCATIONS)} (got {allocation!r})")
    if balance not in BALANCES:
        raise CurateError(f"--balance must be one of {', '.join(BALANCES)} (got {balance!r})")
    if remainder not in REMAINDERS:
        raise CurateError(f"--remainder must be one of {', '.join(REMAINDERS)} (got {remainder!r})")
    lengths = np.ones(s) if lengths is None else np.asarray(lengths, dtype=np.float64)
    if lengths.shape[0] != s:
        raise CurateError(f"token counts: {lengths.shape[0]} values for {s} selected rows")
    return ALLOCATION.get(allocation).value(clusters, lengths, num_shards, micro_batch_size, balance=balance,
                                            remainder=remainder, length_window=length_window,
                                            pair_lengths=pair_lengths, seed=seed, bounds=bounds)


def check_length_window(length_window: int | None) -> None:
    if length_window is not None and length_window < 0:
        raise CurateError(f"--length-window must be 0 (off) or a number of steps (got {length_window})")


def stratified_allocation(clusters: np.ndarray, lengths: np.ndarray, num_shards: int, micro_batch_size: int, *,
                          balance: str, remainder: str, length_window: int | None, pair_lengths: bool = True,
                          seed: int, bounds: SourceBounds | None = None) -> ShardPlan:
    """Every step holds each cluster's share (floor or ceil), steps grouped by length inside windows, ranks
    token-balanced inside each step."""
    s = clusters.shape[0]
    b = check_sizes(s, num_shards, micro_batch_size)
    if length_window is None:
        length_window = DEFAULT_LENGTH_WINDOW[balance]
    check_length_window(length_window)
    rng = np.random.default_rng(seed)
    # which rows: the dropped remainder is the tail of a stratified stream (spread over clusters); the wrap
    # repeats are its head, each input's own where the selection's source bounds need (bounded_stream)
    order, broken = bounded_stream(stratified_order(clusters, rng), b, remainder, bounds)
    t_count = s // b if remainder == "drop" else -(-s // b)
    if remainder == "drop":
        kept, leftover = order[: t_count * b], order[t_count * b:].copy()
    else:
        kept, leftover = np.concatenate((order, order[: t_count * b - s])), order[:0].copy()
    repeat = np.arange(kept.shape[0]) >= s
    # where: every step holds each cluster's share, floor or ceil (compose_steps)
    k = np.unique(clusters).shape[0]
    steps_per_window = max(length_window, min_length_window(k, b)) if length_window else 0
    step_of = compose_steps(clusters[kept], t_count, rng, lengths[kept] if length_window else None, steps_per_window)
    if length_window and pair_lengths:
        step_of = pair_by_length(step_of, clusters[kept], t_count, lengths[kept], steps_per_window,
                                 num_shards if balance == "tokens" else 0)
    by_step = np.argsort(step_of, kind="stable").reshape(t_count, b)
    steps, wrapped = kept[by_step], repeat[by_step]
    if length_window:  # shuffle the steps inside each window: no short-to-long curriculum
        step_perm = np.lexsort((rng.random(t_count), np.arange(t_count) // steps_per_window))
        steps, wrapped = steps[step_perm], wrapped[step_perm]
    if wrapped.any():
        _separate_repeats(steps, wrapped, clusters, rng)
    rows = balance_ranks(steps, lengths, clusters, num_shards, balance=balance, rng=rng)
    # carry the repeat marks along with the rows (a step never holds an index twice)
    wrapped_rows = np.zeros(rows.shape, dtype=bool)
    for t in np.unique(np.nonzero(wrapped)[0]):
        wrapped_rows[t] = np.isin(rows[t], steps[t][wrapped[t]])
    return ShardPlan(rows, wrapped_rows, leftover, "stratified", balance, remainder, _bounds_info(broken))


def paper_allocation(clusters: np.ndarray, num_shards: int, micro_batch_size: int = 1, *, remainder: str = "drop",
                     seed: int = 0, bounds: SourceBounds | None = None) -> ShardPlan:
    """The paper's allocation: rank r trains only on cluster r (clusters in label order). Needs k = N.

    Every rank gets the same number of rows: with "drop" the smallest cluster (rounded down to a whole
    micro-batch) sets it and the rest of each cluster is left over; with "wrap" every cluster is topped up
    to the largest (rounded up) with repeats of its own first rows."""
    clusters = np.asarray(clusters)
    labels, inv, counts = cluster_index(clusters)
    if labels.shape[0] != num_shards:
        raise CurateError(f"--allocation paper gives rank r the rows of cluster r, so it needs as many clusters as "
                          f"shards: the selection has {counted(labels.shape[0], 'cluster')} and --num-shards is "
                          f"{num_shards} (cluster with --k {num_shards})")
    check_sizes(clusters.shape[0], num_shards, micro_batch_size)
    if remainder not in REMAINDERS:
        raise CurateError(f"--remainder must be one of {', '.join(REMAINDERS)} (got {remainder!r})")
    m = micro_batch_size
    per_rank = (counts.min() // m) * m if remainder == "drop" else -(-counts.max() // m) * m
    if per_rank == 0:
        raise CurateError(f"--allocation paper: the smallest cluster has {counted(int(counts.min()), 'row')}, fewer "
                          f"than one micro-batch of {m}; use --remainder wrap or a smaller --micro-batch-size")
    rng = np.random.default_rng(seed)
    members = np.argsort(inv, kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)))
    t_count = per_rank // m
    rows = np.empty((t_count, num_shards, m), dtype=np.int64)
    wrapped = np.zeros(rows.shape, dtype=bool)
    leftover = []
    mines = [rng.permutation(members[starts[r]:starts[r + 1]]) for r in range(num_shards)]
    mines, broken = _paper_bounded(mines, per_rank, remainder, bounds)
    for r, mine in enumerate(mines):
        if mine.shape[0] >= per_rank:
            take, rep = mine[:per_rank], np.zeros(per_rank, dtype=bool)
            leftover.append(mine[per_rank:])
        else:
            take = np.resize(mine, per_rank)
            rep = np.arange(per_rank) >= mine.shape[0]
        rows[:, r, :] = take.reshape(t_count, m)
        wrapped[:, r, :] = rep.reshape(t_count, m)
    left = np.sort(np.concatenate(leftover)) if leftover else np.zeros(0, dtype=np.int64)
    if bounds is not None and wrapped.any():  # each cluster topped up with its own rows: said, not chosen
        broken = bounds.broken_by(rows, wrapped)
    return ShardPlan(rows, wrapped, left, "paper", "none", remainder, _bounds_info(broken))


def _paper_bounded(mines: list[np.ndarray], per_rank: int, remainder: str, bounds: SourceBounds | None):
    """Each cluster's rows (`mines`) rearranged so that the `len - per_rank` it leaves over (its tail) keep the
    selection's source bounds (pick_within_bounds, a group per cluster). A wrap's repeats are left as they are:
    each cluster is topped up with its own rows, which may repeat some more than once (the bounds they break are
    said: paper_allocation)."""
    counts = np.array([max(mine.shape[0] - per_rank, 0) for mine in mines])
    if bounds is None or remainder != "drop" or not counts.any():
        return mines, []
    candidates = np.concatenate([mine[::-1] for mine in mines])
    group = np.repeat(np.arange(len(mines)), [mine.shape[0] for mine in mines])
    mask, broken = pick_within_bounds(candidates, group, counts, -1, bounds)
    out = []
    for r, mine in enumerate(mines):
        dropped = mask[group == r][::-1]
        out.append(np.concatenate((mine[~dropped], mine[dropped])))
    return out, broken


def _bounds_info(broken: list) -> dict:
    """ShardPlan.info: the source bounds no choice of the rows left over or repeated keeps (pick_within_bounds)."""
    return {"bounds_broken": broken} if broken else {}


def random_allocation(clusters: np.ndarray, num_shards: int, micro_batch_size: int = 1, *, remainder: str = "drop",
                      seed: int = 0, bounds: SourceBounds | None = None) -> ShardPlan:
    """The naive baseline: shuffle the selection and deal it out, with no regard to clusters or tokens."""
    s = np.asarray(clusters).shape[0]
    b = check_sizes(s, num_shards, micro_batch_size)
    order, broken = bounded_stream(np.random.default_rng(seed).permutation(s), b, remainder, bounds)
    steps, wrapped, leftover = assign_steps(order, b, remainder)
    shape = (steps.shape[0], num_shards, micro_batch_size)
    return ShardPlan(steps.reshape(shape), wrapped.reshape(shape), leftover, "random", "none", remainder,
                     _bounds_info(broken))


# An allocation: (clusters, lengths, num_shards, micro_batch_size, *, balance, remainder, length_window,
# pair_lengths, seed, bounds) -> ShardPlan. `balances`: it uses --balance / --length-window / --pair-lengths
# (recorded as None otherwise). Add one: a function + a line here.
ALLOCATION = Registry("--allocation")
ALLOCATION.register("stratified", "every step holds every cluster's share, token-balanced across ranks",
                    stratified_allocation, balances=True)
ALLOCATION.register("paper", "rank r gets only cluster r (needs k = num-shards)",
                    lambda c, _lengths, n, m, *, remainder, seed, bounds=None, **_: paper_allocation(
                        c, n, m, remainder=remainder, seed=seed, bounds=bounds), balances=False)
ALLOCATION.register("random", "a plain shuffle (baseline)",
                    lambda c, _lengths, n, m, *, remainder, seed, bounds=None, **_: random_allocation(
                        c, n, m, remainder=remainder, seed=seed, bounds=bounds), balances=False)
ALLOCATIONS = ALLOCATION.names
