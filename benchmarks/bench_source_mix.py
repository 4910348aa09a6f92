"""Real data, selection level: does a rare kind of example keep its share when it is mixed into a dominant one?

Mixes the first 3,000 GSM8K train questions (math word problems) with a few Code Alpaca instructions (a rare
second kind, 2-9% of rows), selects 31% through the tool's own commands, and counts the code rows kept. With a
budget of 31%, quotas that treat the two kinds as two groups keep (nearly) every code row; flat quotas over
clusters keep about as many as the code clusters' share of all clusters. Compares the text weightings
(`embed --text-weighting`) and the quota modes (`cluster --groups none`, `--group-cut row|pair`, the row cut
without the split of mixed clusters) over several seeds. No training: no training noise, and the label (the
source) is known.

    python benchmarks/bench_source_mix.py [--code 60,150,300] [--seeds 0,1,2,3,4]

Writes benchmarks/results/source_mix.md and .json. Data: ../shared/data (GSM8K: MIT; Code Alpaca: CC BY-NC 4.0,
see its DATA_LICENSE), read in place, not copied.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from cluster_curate.io.artifacts import read_meta
from common import DATA, cli, parser, write_results

GSM8K_ROWS = 3000
FRACTION = 0.31
QUOTAS = {"flat": ["--groups", "none"], "row": ["--group-cut", "row"], "pair": ["--group-cut", "pair"],
          "row, no split": ["--group-cut", "row", "--no-split-mixed"]}


def write_mix(path: Path, n_code: int, seed: int = 0) -> np.ndarray:
    """GSM8K questions + n_code Code Alpaca instructions (non-empty outputs), shuffled; returns is-code per row."""
    gsm = [json.loads(line) for line in (DATA / "gsm8k" / "train.jsonl").open()][:GSM8K_ROWS]
    code = [r for r in json.loads((DATA / "code_alpaca" / "code_alpaca_2k.json").read_text()) if r["output"].strip()]
    rng = random.Random(seed)
    rows = [{"instruction": r["question"], "output": r["answer"], "code": 0} for r in gsm]
    rows += [{"instruction": r["instruction"] + ("\n" + r["input"] if r["input"] else ""), "output": r["output"],
              "code": 1} for r in rng.sample(code, n_code)]
    rng.shuffle(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return np.array([r["code"] for r in rows])


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--code", default="60,150,300", help="Code Alpaca rows mixed in (comma list)")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="clustering and selection seeds")
    ap.add_argument("--weightings", default="tf,tfidf")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    results, log = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n_code in [int(x) for x in a.code.split(",")]:
            data = tmp / f"mix{n_code}.jsonl"
            is_code = write_mix(data, n_code)
            budget = int(len(is_code) * FRACTION)
            for weighting in a.weightings.split(","):
                emb = tmp / f"emb{n_code}-{weighting}.parquet"
                cli(["embed", data, "--out", emb, "--text-weighting", weighting, "-q"], log)
                for mode, args in QUOTAS.items():
                    kept, groups, cuts = [], [], []
                    for seed in seeds:
                        c, s = tmp / "c.parquet", tmp / "s.parquet"
                        cli(["cluster", emb, "--out", c, "--seed", seed, "--overwrite", "-q", *args], log)
                        cli(["select", c, "--out", s, "--budget", budget, "--seed", seed, "--overwrite", "-q"], log)
                        ids = pq.read_table(s, columns=["id"]).column("id").to_numpy()
                        kept.append(int(is_code[ids].sum()))
                        p = read_meta(c).params
                        groups.append(max(p["groups"]) + 1 if p["groups"] else p["k"])
                        cuts.append((p.get("split_mixed") or {}).get("cuts", 0))
                    results.append({"code_rows": n_code, "rows": len(is_code), "budget": budget,
                                    "weighting": weighting, "quotas": mode, "kept_per_seed": kept,
                                    "kept_share_mean": float(np.mean(kept) / n_code),
                                    "kept_share_min": float(min(kept) / n_code), "groups_per_seed": groups,
                                    "cuts_per_seed": cuts})
    lines = ["# Real data: a rare kind mixed into a dominant one (GSM8K + Code Alpaca), share of it selected", "",
             f"First {GSM8K_ROWS} GSM8K train questions + N Code Alpaca instructions; budget {FRACTION:.0%}; seeds "
             f"{seeds}. *kept* = code rows in the selection ÷ N (mean, and worst seed); groups = the groups "
             "(or clusters, for flat quotas) `select` shares the budget over; cuts = mixed clusters `cluster` cut in "
             "two (`--split-mixed`, the default with k auto).", "",
             "| N code rows | text weighting | quotas | kept (mean) | kept (worst seed) | per seed | groups per seed | "
             "cuts per seed |", "|---:|---|---|---:|---:|---|---|---|"]
    for r in results:
        lines.append(f"| {r['code_rows']} | {r['weighting']} | {r['quotas']} | {r['kept_share_mean']:.0%} | "
                     f"{r['kept_share_min']:.0%} | {', '.join(map(str, r['kept_per_seed']))} | "
                     f"{', '.join(map(str, r['groups_per_seed']))} | {', '.join(map(str, r['cuts_per_seed']))} |")
    write_results("source_mix", lines, {"results": results, "commands": log[:6]}, argv)


if __name__ == "__main__":
    main()
