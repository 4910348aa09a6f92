"""Benchmark: does the shard plan pair rows of similar length where a step's ranks cannot trade rows?

    python benchmarks/bench_shard_lengths.py --baseline /tmp/base-checkout   # ~3 min

With micro-batch 1 each rank holds one row of a step, so the step costs its longest row whatever the split
(and with 2 the ranks have little to trade); with `--balance padded` a rank costs M × its longest row. Then
the step's composition (which rows share it) is what balances the load (sharding.pair_by_length). This script measures it on real selections, made by
the tool's own pipeline with default options (`embed`, `cluster`, `select --fraction 0.31`; tokens: the
selection's n_tokens):
  mixture   GSM8K train + Code Alpaca 2k (../shared/data)
  gsm8k     GSM8K train alone
  code      Code Alpaca 2k alone
  gsm8k-test  GSM8K's test split alone (a small selection: fewer rows to pair)
For each, the plan (sharding.plan_steps, what `shard` runs) at several shard counts and micro-batches, 3 seeds
each (median), in this checkout and in --baseline (another checkout's root, in a child process):
token imbalance mean (per step: the most loaded rank ÷ the mean rank), what packing the same rows by length
alone reaches (shard_balance.length_packed_imbalance: the floor for any plan), padding efficiency, and the
cluster spread (distinct clusters per step ÷ the most a step can hold; the plan's promise, must stay 1.00).
Last, the plan's time on 1M synthetic rows (64 and 2,000 clusters at micro-batch 1, 64 at 2), this checkout vs baseline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import DATA, ROOT, cli, parser, write_results

# (shards, micro-batch, --balance, --length-window (None: the default; 0: no length grouping at all), pairing)
CONFIGS = [(8, 1, "tokens", None, True), (8, 1, "tokens", None, False), (8, 1, "tokens", 0, True),
           (4, 1, "tokens", None, True), (2, 1, "tokens", None, True), (8, 2, "tokens", None, True),
           (4, 2, "tokens", None, True), (8, 4, "tokens", None, True), (4, 4, "tokens", None, True),
           (8, 4, "padded", None, True), (4, 4, "padded", None, True)]
SEEDS = (0, 1, 2)

_CHILD = r"""
import json, sys, time
import numpy as np, pyarrow.parquet as pq
from cluster_curate.sharding import plan_steps
from cluster_curate.shard_balance import balance_figures, length_packed_imbalance
job = json.loads(sys.argv[1])
out = {}
def mixing(plan, source):  # the share of steps that hold rows of more than one input
    s = source[plan.rows].reshape(plan.steps, -1)
    return float((s.min(1) != s.max(1)).mean())
for name, path in job["selections"].items():
    t = pq.read_table(path)  # a mixture's selection has a `source` column
    c, L = t["cluster"].to_numpy(), t["n_tokens"].to_numpy().astype(float)
    names = t["source"].to_pylist() if "source" in t.column_names else [""] * c.size
    source = np.unique(np.asarray(names, dtype=str), return_inverse=True)[1].reshape(-1)
    for n, m, balance, window, pair in job["configs"]:
        runs = []
        # the baseline has no pairing to turn off: its plan is the one --no-pair-lengths reproduces
        kw = {} if pair else {"pair_lengths": False}
        for seed in job["seeds"]:
            try:
                plan = plan_steps(c, L, n, m, balance=balance, length_window=window, seed=seed, **kw)
            except TypeError:
                plan = plan_steps(c, L, n, m, balance=balance, length_window=window, seed=seed)
            f = balance_figures(plan, L, c)
            runs.append([f["token_imbalance"]["mean"], f["padded_imbalance"]["mean"], f["padding_efficiency"],
                         f["cluster_spread"]["min"], mixing(plan, source),
                         mixing(plan_steps(c, L, n, m, allocation="random", seed=seed), source)])
        out[f"{name} {n} {m} {balance} {window} {pair}"] = {"median": np.median(runs, 0).tolist(), "rows": int(c.size),
                                                     "clusters": int(np.unique(c).size),
                                                     "inputs": int(source.max()) + 1,
                                                     "packed": length_packed_imbalance(L, n, m, balance)}
rng = np.random.default_rng(1)
for k, m in job["scale"]:
    c = rng.integers(0, k, job["scale_rows"])
    L = np.exp(rng.normal(4, 0.8, c.size)).round() + 1
    t0 = time.process_time()
    f = balance_figures(plan_steps(c, L, 8, m, seed=0), L, c)
    out[f"scale {k} {m}"] = {"cpu_seconds": time.process_time() - t0, "token_imbalance": f["token_imbalance"]["mean"]}
print(json.dumps(out))
"""


def selections(work: Path) -> dict[str, str]:
    """The selections, made by the tool's own commands (default options, 31%)."""
    inputs = {"mixture": [DATA / "gsm8k" / "train.jsonl", DATA / "code_alpaca" / "code_alpaca_2k.json"],
              "gsm8k": [DATA / "gsm8k" / "train.jsonl"], "code": [DATA / "code_alpaca" / "code_alpaca_2k.json"],
              "gsm8k-test": [DATA / "gsm8k" / "test.jsonl"]}
    log: list[str] = []
    out = {}
    for name, data in inputs.items():
        d = work / name
        cli(["embed", *data, "--out", d / "e.parquet", "--on-bad-row", "skip"], log)
        cli(["cluster", d / "e.parquet", "--out", d / "c.parquet"], log)
        cli(["select", d / "c.parquet", "--out", d / "s.parquet", "--fraction", "0.31"], log)
        out[name] = str(d / "s.parquet")
    return out


def measure(tree: Path, job: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
    # cwd too: `python -c` puts the working directory first on the import path
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(job)], capture_output=True, text=True, env=env,
                       cwd=tree)
    if r.returncode:
        raise SystemExit(f"the measurement failed in {tree}:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def revision(tree: Path) -> str:
    r = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=commit %h (%cs)"], capture_output=True,
                       text=True)
    return r.stdout.strip() or f"the checkout at {tree.name}"


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--baseline", type=Path, required=True, help="another checkout's root (the plan before)")
    ap.add_argument("--scale-rows", type=int, default=1_000_000)
    ap.add_argument("--name", default="shard_lengths")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-shard-lengths-") as tmp:
        job = {"selections": selections(Path(tmp)), "configs": CONFIGS, "seeds": SEEDS,
               "scale_rows": args.scale_rows, "scale": [[64, 1], [2000, 1], [64, 2]]}
        here, base = measure(ROOT, job), measure(args.baseline.resolve(), job)
    lines = ["# pairing rows of similar length across clusters (small micro-batches, --balance padded)", "",
             f"Baseline (before): {revision(args.baseline)}. Selections by the tool's own commands with default "
             "options (`embed` → `cluster` → `select --fraction 0.31`); tokens: the selection's n_tokens. Medians "
             f"of seeds {', '.join(map(str, SEEDS))}. `packed`: packing the same rows by length alone, ignoring "
             "clusters (the floor for any plan). `--no-pair-lengths` turns off the pairing across clusters "
             "(round 35's plan); `--length-window 0` turns off all length grouping.", "",
             "`steps mixing inputs` (the mixture only): the share of steps that hold rows of both inputs, with "
             "the same share under `--allocation random` for reference: rows of similar length share a step, and "
             "length tells the inputs apart (code is longer), so pairing by length mixes fewer steps; every step "
             "still holds as many distinct clusters as before (`cluster spread`).", "",
             "| selection | rows | clusters | shards × micro-batch | options | packed | token imbalance before → now "
             "| padded imbalance before → now | padding efficiency before → now | cluster spread min before → now "
             "| steps mixing inputs before → now (random) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, h in here.items():
        if key.startswith("scale"):
            continue
        b = base[key]
        name, n, m, balance, window, pair = key.split()
        arrow = lambda i, f="{:.3f}": f"{f.format(b['median'][i])} → {f.format(h['median'][i])}"  # noqa: E731
        options = f"--balance {balance}" + ("" if window == "None" else f" --length-window {window}") + \
            ("" if pair == "True" else " --no-pair-lengths")
        mixed = f"{arrow(4, '{:.2f}')} ({h['median'][5]:.2f})" if h["inputs"] > 1 else "—"
        lines.append(f"| {name} | {h['rows']:,} | {h['clusters']} | {n} × {m} | {options} | {h['packed']:.3f} | "
                     f"{arrow(0)} | {arrow(1)} | {arrow(2)} | {arrow(3, '{:.2f}')} | {mixed} |")
    lines += ["", f"Plan time on {args.scale_rows:,} synthetic rows (lognormal lengths), 8 shards, "
              "CPU seconds of one run in a child process:", "",
              "| clusters | micro-batch | before s | now s | token imbalance before → now |", "|---|---|---|---|---|"]
    for key, h in here.items():
        if key.startswith("scale"):
            b = base[key]
            lines.append(f"| {key.split()[1]} | {key.split()[2]} | {b['cpu_seconds']:.1f} | {h['cpu_seconds']:.1f} | "
                         f"{b['token_imbalance']:.3f} → {h['token_imbalance']:.3f} |")
    write_results(args.name, lines, {"now": here, "baseline": base}, argv)


if __name__ == "__main__":
    sys.exit(main())
