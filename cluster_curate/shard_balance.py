"""How well a shard plan balances, and the `shard` warning when it balances far worse than its micro-batch
allows (docs/architecture.md, "Layers"): pure functions on a plan (sharding.py) and the rows' token counts.

    figures = balance_figures(plan, lengths, clusters)      # token / padded imbalance, padding, cluster spread
    warning = balance_warning(figures, lengths, balance)    # a line for `shard`, or None

These only measure a plan; they change nothing in it (and so no artifact's bytes beyond the figures `shard`
records in its manifest).
"""

from __future__ import annotations

import numpy as np

from cluster_curate.sharding import ShardPlan, cluster_index


def _rank_loads(lengths: np.ndarray, balance: str) -> np.ndarray:
    """lengths[..., N, M] -> load per rank: sum of tokens, or M × longest (padded micro-batch)."""
    if balance == "padded":
        return lengths.max(-1) * lengths.shape[-1]
    return lengths.sum(-1)


def balance_figures(plan: ShardPlan, lengths: np.ndarray | None, clusters: np.ndarray,
                    sources: np.ndarray | None = None) -> dict:
    """How well a plan balances (README, "shard SELECTION", whose table defines each figure):

    token_imbalance     per step, max over ranks of the rank's tokens ÷ mean over ranks (mean, p95, max)
    padded_imbalance    the same with a rank's load = M × its longest row (for padding trainers)
    padding_efficiency  real tokens ÷ tokens computed when every rank pads to the step's longest row
    cluster_spread      per step, distinct clusters ÷ min(N × M, clusters in the selection) (mean, min)
    rank_mix_tv         per rank, total-variation distance between its cluster mix and the selection's (max,
                        mean, per rank; `random`: the max when the same rows are dealt at random)
    input_mix           a mixture's (`sources`: each row's input): the share of steps holding rows of more than
                        one input, and what a random allocation gives (1 - sum of each input's share ^ N × M)
    """
    clusters = np.asarray(clusters)
    s = clusters.shape[0]
    lengths = np.ones(s) if lengths is None else np.asarray(lengths, dtype=np.float64)
    rows = plan.rows
    t_count, n, m = rows.shape
    out: dict = {"steps": t_count, "num_shards": n, "micro_batch_size": m}
    if t_count == 0:
        return out
    L = lengths[rows]
    for name, mode in (("token_imbalance", "tokens"), ("padded_imbalance", "padded")):
        loads = _rank_loads(L, mode)
        mean = loads.mean(1)
        ratio = np.where(mean > 0, loads.max(1) / np.where(mean > 0, mean, 1), 1.0)
        out[name] = {"mean": float(ratio.mean()), "p95": float(np.percentile(ratio, 95)), "max": float(ratio.max())}
    out["padding_efficiency"] = float(L.sum() / (L.reshape(t_count, -1).max(1).sum() * n * m))
    out["idle_fraction"] = float(1 - L.sum(-1).mean(1).sum() / L.sum(-1).max(1).sum())

    labels, inv, counts = cluster_index(clusters)
    k = labels.shape[0]
    cl = inv[rows]                                              # [T, N, M] cluster index
    flat = np.sort(cl.reshape(t_count, -1), axis=1)
    distinct = 1 + (np.diff(flat, axis=1) != 0).sum(1)
    spread = distinct / min(n * m, k)
    out["cluster_spread"] = {"mean": float(spread.mean()), "min": float(spread.min()), "clusters": int(k)}

    whole = counts / counts.sum()
    tv = _rank_mix_tv(cl, whole)
    # the same rows dealt at random, beside it: what the ranks' mix would be without sharding.assign_ranks
    # (README, `rank_mix_tv`)
    dealt = cl.reshape(-1)[np.random.default_rng(0).permutation(cl.size)].reshape(cl.shape)
    out["rank_mix_tv"] = {"max": max(tv), "mean": float(np.mean(tv)), "per_rank": [round(x, 6) for x in tv],
                          "random": max(_rank_mix_tv(dealt, whole))}
    if sources is not None and np.unique(sources).shape[0] > 1:
        # pairing rows by length (sharding.pair_by_length) mixes fewer steps when length tells inputs apart
        src = np.asarray(sources)[rows].reshape(t_count, -1)
        share = np.bincount(np.asarray(sources)) / s
        out["input_mix"] = {"steps_mixing": float((src.min(1) != src.max(1)).mean()),
                            "random": float(1 - (share ** (n * m)).sum()), "inputs": int((share > 0).sum())}
    return out


def _rank_mix_tv(cl: np.ndarray, whole: np.ndarray) -> list[float]:
    """cl[T, N, M] cluster indices -> per rank, the total-variation distance of its cluster mix from `whole`."""
    t_count, n, m = cl.shape
    mix = [np.bincount(cl[:, r, :].reshape(-1), minlength=whole.shape[0]) / (t_count * m) for r in range(n)]
    return [0.5 * float(np.abs(x - whole).sum()) for x in mix]


# ------------------------------------------------------------------------------------------- balance warning
# `shard` warns when the plan's mean imbalance is more than this above what the micro-batch allows: 0.05 =
# every step waits 5% longer for its slowest rank than it has to.
BALANCE_SLACK = 0.05


def length_packed_imbalance(lengths: np.ndarray, num_shards: int, micro_batch_size: int,
                            balance: str = "tokens") -> float:
    """What the micro-batch allows: the mean per-step imbalance when the same rows are packed by length alone
    (sorted, N × M consecutive rows per step, dealt to ranks in snake order), ignoring clusters. A plan cannot
    do much better with M rows per rank; M = 1 leaves the ranks of a step nothing to trade."""
    n, m = num_shards, micro_batch_size
    b = n * m
    lengths = np.sort(np.asarray(lengths, dtype=np.float64))[::-1]
    t_count = lengths.shape[0] // b
    if t_count == 0:
        return 1.0
    grid = lengths[: t_count * b].reshape(t_count, m, n)       # slot j = (row j // n, column j % n)
    grid[:, 1::2, :] = grid[:, 1::2, ::-1]                      # snake: every other round dealt backwards
    loads = _rank_loads(grid.transpose(0, 2, 1), balance)      # [T, N]
    mean = loads.mean(1)
    return float(np.mean(np.where(mean > 0, loads.max(1) / np.where(mean > 0, mean, 1), 1.0)))


def balance_warning(figures: dict, lengths: np.ndarray | None, balance: str = "tokens",
                    slack: float = BALANCE_SLACK) -> str | None:
    """The `shard` warning when the plan balances far worse than its micro-batch allows (issue 20 #10), naming
    the option that helps; None when the balance is as good as M allows (within `slack`) or lengths are unknown.
    figures: balance_figures() of the plan.

    Only for `--balance tokens`: with `padded` a step costs M × its longest row, so keeping every cluster in
    every step (the point of the plan) costs 1.2-1.4 against length-only packing at any M; no option fixes it."""
    if lengths is None or balance != "tokens" or not figures.get("steps"):
        return None
    got = figures["token_imbalance"]["mean"]
    n, m = figures["num_shards"], figures["micro_batch_size"]
    allowed = length_packed_imbalance(lengths, n, m, balance)
    if got <= allowed + slack:
        return None
    if m < 8:
        fix = (f"a larger --micro-batch-size if your trainer's per-device batch is larger (e.g. "
               f"{m * 4 if m == 1 else m * 2}: more rows per rank in a step give the ranks rows to trade)")
    else:
        fix = "a longer --length-window (steps of similar-length rows balance more easily)"
    return (f"token imbalance mean {got:.3f} (max {figures['token_imbalance']['max']:.2f}) with {n} shards and "
            f"micro-batch {m}, "
            f"while packing these rows by length alone reaches {allowed:.3f}: each step waits for its slowest rank; "
            f"try {fix}")
