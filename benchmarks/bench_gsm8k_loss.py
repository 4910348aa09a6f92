"""Real data: does the tool's 31% of GSM8K train a small model as well as the full data or a random 31%?

The measure is the held-out response loss on the GSM8K test split (a CPU model this small does not solve
GSM8K; the loss still tells which training rows teach more). Contenders, all trained with the same recipe
and the SAME number of epochs (so a 31% subset costs ~31% of the steps):

  full       every row of the training pool
  random     a uniform random 31% (harness, numpy; seeded)
  tool       the tool's default pipeline through its CLI: `embed` (default features; `embed --help` says
             which) -> `cluster` (k auto, groups auto) -> `select --budget B`
  tool-flat  the same with `cluster --groups none` (flat quotas over the clusters)
  tool-previous  the default until 2026-11-30: `embed --text-weighting tfidf`, `cluster --group-cut row
                 --no-split-mixed --kinds none`
  tool-nokinds  the default until 2026-12-03: `cluster --kinds none` (groups are not joined by their answers)
  tool-tf, tool-slot  the default pipeline with `embed --text-weighting tf` / `slot` (one is the default)

Trainer: benchmarks/train_eval.py (word-level tokens, GPT from cluster_curate/features/gpt.py, AdamW,
warm-up + cosine, batches of 32 bucketed by length, loss on response + end token), 1 thread per run. The
vocabulary comes from the whole pool + the test rows (identical for every contender). The pool is the first
--rows rows of train.jsonl (0 = all 7,473) so the run fits a shared 2-core machine; --test-rows of test.jsonl.

    python benchmarks/bench_gsm8k_loss.py                 # pool 3,000, 2 epochs, seed 0 (~12 min here)
    python benchmarks/bench_gsm8k_loss.py --rows 0 --seeds 0,1 --epochs 3    # the whole train split
    python benchmarks/bench_gsm8k_loss.py --quick         # smoke: 400 rows, 1 epoch

Writes benchmarks/results/gsm8k_loss.md and .json (the exact commands are in both).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import train_eval
from common import DATA, cli, default_features, parser, tool_defaults, write_results

GSM8K = DATA / "gsm8k"
FRACTION = 0.31
# name -> (extra `embed` arguments, extra `cluster` arguments)
TOOL_CONTENDERS = {"tool": ([], []), "tool-flat": ([], ["--groups", "none"]),
                   "tool-previous": (["--text-weighting", "tfidf"],
                                     ["--group-cut", "row", "--no-split-mixed", "--kinds", "none"]),
                   "tool-nokinds": ([], ["--kinds", "none"]),
                   "tool-tf": (["--text-weighting", "tf"], []), "tool-slot": (["--text-weighting", "slot"], [])}








def curate(data: Path, work: Path, budget: int, embed_args: list[str], cluster_args: list[str], seed: int) -> dict:
    """The tool's pipeline up to the selection; returns ids, per-command seconds and the commands.
    Cached in work/curation.json (a rerun with more training seeds does not curate again)."""
    work.mkdir(parents=True, exist_ok=True)
    cache = work / "curation.json"
    defaults = json.loads(json.dumps(tool_defaults(), default=str))  # as the cache file holds them
    if cache.exists():
        cached = json.loads(cache.read_text())
        if (cached.get("budget"), cached.get("embed_args"), cached.get("cluster_args"),
                cached.get("defaults")) == (budget, embed_args, cluster_args, defaults):
            return cached
    log: list[str] = []
    e, c, s = work / "embeddings.parquet", work / "clusters.parquet", work / "selection.parquet"
    secs = {"embed": cli(["embed", data, "--out", e, "--overwrite", "--seed", seed, *embed_args], log),
            "cluster": cli(["cluster", e, "--out", c, "--overwrite", "--seed", seed, *cluster_args], log),
            "select": cli(["select", c, "--out", s, "--overwrite", "--budget", budget, "--seed", seed], log)}
    import pyarrow.parquet as pq
    ids = sorted(pq.read_table(s, columns=["id"]).column("id").to_pylist())
    k = len(set(pq.read_table(c, columns=["cluster"]).column("cluster").to_pylist()))
    out = {"ids": ids, "seconds": secs, "curation_seconds": sum(secs.values()), "commands": log, "k": k,
           "budget": budget, "embed_args": embed_args, "cluster_args": cluster_args, "defaults": defaults}
    cache.write_text(json.dumps(out))
    return out


def train_one(job: dict) -> dict:
    """Worker: train on the given ids of the pool, evaluate held-out response loss (cached in job["cache"])."""
    cache = Path(job["cache"])
    if cache.exists():
        return json.loads(cache.read_text())
    os.environ["OMP_NUM_THREADS"] = "1"
    pool = train_eval.load_rows(job["pool"])
    test = train_eval.load_rows(job["test"])
    keep = set(job["ids"]) if job["ids"] is not None else None
    rows = [r for r in pool if keep is None or r.id in keep]
    cfg = train_eval.TrainConfig(epochs=job["epochs"], seed=job["seed"], n_layer=job["n_layer"],
                                 d_model=job["d_model"], n_head=4, max_len=512, threads=1)
    res = train_eval.run(rows, test, pool + test, cfg, max_vocab=job["max_vocab"], generate=False)
    res.update(name=job["name"], seed=job["seed"])
    cache.write_text(json.dumps(res))
    return res


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=3000, help="training pool: first N rows of train.jsonl (0 = all)")
    ap.add_argument("--test-rows", type=int, default=300)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seeds", default="0", help="training seeds (and random-subset seeds) of the 31%% contenders")
    ap.add_argument("--full-seeds", default=None, help="training seeds of `full` (default: --seeds)")
    ap.add_argument("--curation-seed", type=int, default=0, help="seed of the tool's commands (one curation)")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--max-vocab", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2, help="training runs at once (1 thread each)")
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="smoke: 400 rows, 100 test rows, 1 epoch")
    ap.add_argument("--name", default="gsm8k_loss", help="results file stem")
    a = ap.parse_args(argv)
    if a.quick:
        a.rows, a.test_rows, a.epochs = 400, 100, 1
    seeds = [int(s) for s in a.seeds.split(",")]
    full_seeds = [int(s) for s in a.full_seeds.split(",")] if a.full_seeds else seeds
    import tempfile
    work = Path(a.work or tempfile.mkdtemp(prefix="gsm8k_loss_"))
    work.mkdir(parents=True, exist_ok=True)
    train_lines = [ln for ln in (GSM8K / "train.jsonl").read_text().splitlines() if ln.strip()]
    test_lines = [ln for ln in (GSM8K / "test.jsonl").read_text().splitlines() if ln.strip()]
    pool_lines = train_lines[: a.rows] if a.rows else train_lines
    pool, test = work / "train.jsonl", work / "test.jsonl"
    pool.write_text("\n".join(pool_lines) + "\n")
    test.write_text("\n".join(test_lines[: a.test_rows]) + "\n")
    n = len(pool_lines)
    budget = round(FRACTION * n)
    feats = default_features()
    print(f"pool {n} rows, budget {budget}, test {a.test_rows}, epochs {a.epochs}, seeds {seeds}, "
          f"default features: {feats}; work {work}", flush=True)
    load0 = os.getloadavg()

    base = dict(pool=str(pool), test=str(test), epochs=a.epochs, n_layer=a.n_layer, d_model=a.d_model,
                max_vocab=a.max_vocab)
    tag = f"r{n}-t{a.test_rows}-e{a.epochs}-L{a.n_layer}-d{a.d_model}-v{a.max_vocab}"

    def job(name, seed, ids):
        return dict(base, name=name, seed=seed, ids=ids, cache=str(work / f"run-{name}-s{seed}-{tag}.json"))
    results, curation = [], {}
    t_all = time.perf_counter()
    with ProcessPoolExecutor(a.workers) as ex:
        futs = []
        for seed in full_seeds:
            futs.append(ex.submit(train_one, job("full", seed, None)))
        for seed in seeds:
            rng = np.random.default_rng(1000 + seed)
            futs.append(ex.submit(train_one, job("random", seed, sorted(rng.choice(n, budget, replace=False).tolist()))))
        # curation (once, --curation-seed) runs while the baselines train
        cs = a.curation_seed
        for name, (embed_args, cluster_args) in TOOL_CONTENDERS.items():
            cur = curate(pool, work / f"{name}-s{cs}", budget, embed_args, cluster_args, cs)
            curation[name] = {k: v for k, v in cur.items() if k != "ids"}
            print(f"curated {name} (seed {cs}): {len(cur['ids'])} rows, k={cur['k']}, "
                  f"{cur['curation_seconds']:.1f} s", flush=True)
            for seed in seeds:
                futs.append(ex.submit(train_one, job(name, seed, cur["ids"])))
        for f in futs:
            r = f.result()
            print(f"{r['name']:9s} seed {r['seed']}: test loss {r['test_loss']:.4f} rows {r['rows']} "
                  f"steps {r['steps']} train {r['train_seconds']:.0f} s", flush=True)
            results.append(r)
    load1 = os.getloadavg()

    names = ["full", "random", *TOOL_CONTENDERS]
    summary = {}
    for name in names:
        rs = [r for r in results if r["name"] == name]
        losses = [r["test_loss"] for r in rs]
        cur = [curation[name]["curation_seconds"]] if name.startswith("tool") else [0.0]
        summary[name] = {"test_loss_mean": float(np.mean(losses)), "test_loss_std": float(np.std(losses)),
                         "test_losses": losses, "rows": rs[0]["rows"], "steps": rs[0]["steps"],
                         "train_seconds_median": float(np.median([r["train_seconds"] for r in rs])),
                         "final_train_loss_mean": float(np.mean([r["final_train_loss"] for r in rs])),
                         "curation_seconds_median": float(np.median(cur))}
    gap = summary["random"]["test_loss_mean"] - summary["full"]["test_loss_mean"]
    for name in TOOL_CONTENDERS:
        d = summary["random"]["test_loss_mean"] - summary[name]["test_loss_mean"]
        summary[name]["closes_gap_random_to_full"] = float(d / gap) if gap else float("nan")

    meta = {"pool_rows": n, "budget": budget, "test_rows": a.test_rows, "epochs": a.epochs, "seeds": seeds,
            "full_seeds": full_seeds, "curation_seed": a.curation_seed,
            "model": f"GPT n_layer={a.n_layer} d_model={a.d_model} n_head=4, word tokens, vocab <= {a.max_vocab}",
            "default_features": feats, "load_avg_start_end": [round(load0[0], 1), round(load1[0], 1)],
            "wall_seconds": round(time.perf_counter() - t_all, 1),
            "command": "python benchmarks/bench_gsm8k_loss.py " + " ".join(shlex.quote(x) for x in (argv or sys.argv[1:]))}
    lines = ["# GSM8K: held-out response loss after training on full / random 31% / the tool's 31%", "",
             f"Pool: first {n} rows of GSM8K train (budget {budget} = 31%), held-out: first {a.test_rows} rows of "
             f"GSM8K test. {meta['model']}; {a.epochs} epochs for every contender (batch 32, AdamW 3e-3, cosine); "
             f"training seeds {seeds} (full: {full_seeds}; random: a new subset per seed; the tool's selections: "
             f"one curation, seed {a.curation_seed}). The tool's default features (`embed --help`): **{feats}**. Machine: 2 shared cores, "
             f"load average {meta['load_avg_start_end'][0]} -> {meta['load_avg_start_end'][1]}; "
             f"{a.workers} training runs at once, 1 thread each (times are indicative only).", "",
             f"Command: `{meta['command']}`", "",
             "| contender | rows | steps | test loss (mean ± std over seeds) | per seed | closes random→full gap | "
             "final train loss | train s | curation s |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|"]
    for name in names:
        s = summary[name]
        close = f"{100 * s['closes_gap_random_to_full']:.0f}%" if "closes_gap_random_to_full" in s else ""
        lines.append(f"| {name} | {s['rows']} | {s['steps']} | {s['test_loss_mean']:.4f} ± {s['test_loss_std']:.4f} "
                     f"| {', '.join(f'{x:.4f}' for x in s['test_losses'])} | {close} | {s['final_train_loss_mean']:.4f} | {s['train_seconds_median']:.0f} | "
                     f"{s['curation_seconds_median']:.0f} |")
    lines += ["", "Commands run for the tool's selections:", ""]
    for key, cur in curation.items():
        lines += [f"- {key} (k = {cur['k']}; " + ", ".join(f"{c} {t:.1f} s" for c, t in cur["seconds"].items()) + "):"]
        lines += [f"  - `{c}`" for c in cur["commands"]]
    write_results(a.name, lines, {"meta": meta, "summary": summary, "runs": results, "curation": curation},
                  command=False)


if __name__ == "__main__":
    main()
