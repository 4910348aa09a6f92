"""Cost of targeted selection (issue 22): `select --target` adds at most one `embed` of the target plus a pass over
the pool's features. Measured at 1M pool rows x 256 dims, 100 target rows, 4,096 clusters, --fraction 0.1.

Steps timed (median of --repeats, on arrays already in memory):
  pass        one pass over the pool's features: every row scaled to unit length, block by block (what any
              reader of the features does at least once; the reference)
  assign      one assignment of every pool row to its nearest of 4,096 centroids (faiss), as `cluster` does
              in each pass (timed on 50k rows, scaled)
  untargeted  selection.select_rows (the `select` stage without a target)
  search      targeting.search_target (the one pass: each pool row's nearest target row, each target row's
              nearest pool rows to the depth the default --target-weight needs, the probes' nearest neighbours)
  select      targeting.select_targeted (round-robin order, water-filling over the relevant part)
  service     targeting.target_service (nearest selected rows per target row, pulled clusters)
The features: Gaussian blobs around 4,096 centres (the cluster labels), the target drawn around 5 of them.

    .venv/bin/python benchmarks/bench_target_cost.py [--rows 1000000] [--dim 256] [--targets 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from common import write_results

from cluster_curate import selection as S
from cluster_curate import targeting as T

K = 4096


def synthetic(n: int, d: int, m: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((K, d)).astype(np.float32)
    clusters = rng.integers(0, K, n).astype(np.int32)
    x = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 65536):  # in blocks: no float64 temporaries of the whole pool
        c = clusters[s:s + 65536]
        x[s:s + len(c)] = centres[c] + rng.standard_normal((len(c), d), dtype=np.float32)
    target = centres[rng.integers(0, 5, m)] + rng.standard_normal((m, d), dtype=np.float32)
    return x, clusters, target


def timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def one_pass(x):
    total = 0.0
    for s in range(0, len(x), T.BLOCK_ROWS):
        total += float(T._unit(x[s:s + T.BLOCK_ROWS])[:, 0].sum())
    return total


def assign_pass(x, sample: int = 50_000, seed: int = 0) -> float:
    """Seconds `cluster`'s assignment of every row to its nearest of K centroids would take (faiss, exact inner
    product), timed on `sample` rows and scaled to all: the compute-bound pass the pool's features already get."""
    import faiss
    rng = np.random.default_rng(seed)
    centroids = T._unit(rng.standard_normal((K, x.shape[1])).astype(np.float32))
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(centroids)
    rows = T._unit(x[:sample])
    t0 = time.perf_counter()
    index.search(rows, 1)
    return (time.perf_counter() - t0) * len(x) / len(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--targets", type=int, default=100)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import os
    x, clusters, target = synthetic(args.rows, args.dim, args.targets)
    sec = {}
    sec["pass"], _ = timed(lambda: one_pass(x), args.repeats)
    sec["assign (scaled from 50k rows)"] = assign_pass(x)
    sec["untargeted"], _ = timed(lambda: S.select_rows(clusters, k=K, fraction=args.fraction), args.repeats)
    depth = T.list_depth(S.fraction_budget(args.rows, args.fraction), T.DEFAULT_TARGET_WEIGHT, args.targets, args.rows)
    sec["search"], search = timed(lambda: T.search_target(x, target, depth=depth), args.repeats)
    sec["select"], sel = timed(lambda: T.select_targeted(clusters, search, fraction=args.fraction, k=K),
                               args.repeats)
    sec["service"], service = timed(lambda: T.target_service(x, target, search, sel, clusters), args.repeats)
    added = sec["search"] + sec["select"] + sec["service"] - sec["untargeted"]
    lines = [f"# Targeted selection cost: {args.rows:,} pool rows x {args.dim} dims, {args.targets} target rows, "
             f"{K} clusters, --fraction {args.fraction}", "",
             f"{os.cpu_count()} CPU cores (shared); median of {args.repeats}. The search is one matrix product per "
             f"block of pool rows with the {args.targets} target rows and {T.N_PROBES} probes "
             f"({2 * args.rows * (args.targets + T.N_PROBES) * args.dim / 1e9:.0f} GFLOP), lists {depth} deep.", "",
             "| step | seconds |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in sec.items()]
    lines += ["", f"Added by the target (search + select + service - untargeted): {added:.2f} s = "
              f"{added / sec['pass']:.1f}x one normalising pass over the pool's features ({sec['pass']:.2f} s, "
              "memory-bound); "
              f"{added / sec['assign (scaled from 50k rows)']:.2f}x one assignment of the pool to {K} centroids "
              "(what `cluster` does in each of its passes). The search reads every pool row once and takes "
              f"{args.targets + T.N_PROBES} inner products per row.",
              f"Selected {len(sel.rows):,} rows (budget {sel.requested:,}); relevant part {sel.relevant_rows:,} rows; "
              f"{service['served']}/{args.targets} target rows served."]
    write_results("target_cost", lines,
                  {"args": vars(args), "seconds": sec, "added_seconds": added,
                   "selected": int(len(sel.rows)), "served": service["served"]}, argv)


if __name__ == "__main__":
    main()
