"""Real data, selection level: does a rare kind of example keep its share when it is mixed into a dominant one?

Mixes the first 3,000 GSM8K train questions (math word problems) with a few Code Alpaca instructions (a rare
second kind, 2-9% of rows) as a two-input mixture (`embed gsm8k.jsonl codeN.json`, each input in its own
format), selects 31% through the tool's own commands, and counts the code rows kept (the selection's `source`
column). With a budget of 31%, quotas that treat the two kinds as two groups keep (nearly) every code row; flat
quotas over clusters keep about as many as the code clusters' share of all clusters. Compares the text
weightings (`embed --text-weighting`; `--weightings semantic,semantic-both,text+semantic`: the semantic feature
over the prompt, prompt+response, and beside text) and the quota modes (`cluster --groups none`, `--group-cut
row|pair`, the row cut without the split of mixed clusters, the row cut with `--kinds none`) over several seeds.
No training: no training noise, and the label (the source) is known.

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
          "row, no split": ["--group-cut", "row", "--no-split-mixed"],
          "row, kinds none": ["--group-cut", "row", "--kinds", "none"]}  # the default until 2026-12-03


def write_mix(tmp: Path, n_code: int, seed: int = 0) -> list[Path]:
    """The two inputs of a mixture (the tool's multi-input path: ids are GSM8K's rows, then the code rows):
    GSM8K questions as they are (qa format), and n_code Code Alpaca instructions (non-empty outputs, alpaca)."""
    gsm = [json.loads(line) for line in (DATA / "gsm8k" / "train.jsonl").open()][:GSM8K_ROWS]
    code = [r for r in json.loads((DATA / "code_alpaca" / "code_alpaca_2k.json").read_text()) if r["output"].strip()]
    paths = [tmp / "gsm8k.jsonl", tmp / f"code{n_code}.json"]
    paths[0].write_text("".join(json.dumps(r) + "\n" for r in gsm))
    paths[1].write_text(json.dumps(random.Random(seed).sample(code, n_code)))
    return paths


# embed options per compared feature (`--weightings`): the text weightings, and the semantic contenders
EMBEDS = {"tf": ["--text-weighting", "tf"], "tfidf": ["--text-weighting", "tfidf"], "slot": ["--text-weighting", "slot"],
          "semantic": ["--features", "semantic"], "semantic-both": ["--features", "semantic", "--text-field", "both"],
          "text+semantic": ["--features", "text,semantic"]}


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--code", default="60,150,300", help="Code Alpaca rows mixed in (comma list)")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="clustering and selection seeds")
    ap.add_argument("--weightings", default="slot,tf,tfidf", help="embed options compared (EMBEDS; slot: the default)")
    ap.add_argument("--stem", default="source_mix", help="results file name")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    results, log = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n_code in [int(x) for x in a.code.split(",")]:
            inputs = write_mix(tmp, n_code)
            budget = int((GSM8K_ROWS + n_code) * FRACTION)
            for weighting in a.weightings.split(","):
                emb = tmp / f"emb{n_code}-{weighting}.parquet"
                cli(["embed", *inputs, "--out", emb, *EMBEDS[weighting], "-q"], log)
                for mode, args in QUOTAS.items():
                    kept, groups, cuts = [], [], []
                    for seed in seeds:
                        c, s = tmp / "c.parquet", tmp / "s.parquet"
                        cli(["cluster", emb, "--out", c, "--seed", seed, "--overwrite", "-q", *args], log)
                        cli(["select", c, "--out", s, "--budget", budget, "--seed", seed, "--overwrite", "-q"], log)
                        source = pq.read_table(s, columns=["source"]).column("source").to_pylist()
                        kept.append(source.count(inputs[1].stem))
                        p = read_meta(c).params
                        groups.append(max(p["groups"]) + 1 if p["groups"] else p["k"])
                        cuts.append((p.get("split_mixed") or {}).get("cuts", 0))
                    results.append({"code_rows": n_code, "rows": GSM8K_ROWS + n_code, "budget": budget,
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
    write_results(a.stem, lines, {"results": results, "commands": log[:6]}, argv)


if __name__ == "__main__":
    main()
