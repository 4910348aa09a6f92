"""Selection-level evidence for the text weighting (`embed --text-weighting`) and the quotas over groups of
clusters (`cluster --groups`, `--group-cut`).

No training, so no training noise: on the skill-mixture benchmark (benchmarks/skillmix.py), select 31% through
the tool's own commands for every text weighting x quota mode, over several clustering seeds and benchmark data
seeds, and compare how the selection covers the skills against the oracle's counts (water-filling by the true
skill labels): coverage = Σ_skill min(count, oracle count) / Σ oracle count; worst skill = the worst skill's
count ÷ the oracle's. Prints a table, writes benchmarks/results/group_quotas.md/.json.

    python benchmarks/bench_group_quotas.py [--seeds 0,1,2,3,4] [--data-seeds 0,1,2] [--weightings tf,tfidf]
        [--quotas none,row,pair,24,row:nosplit]

Quota modes: none = flat quotas over the clusters; row / pair = `--groups auto --group-cut row|pair`; a number G
= `--groups G`; a `:nosplit` suffix adds `--no-split-mixed` (k auto splits mixed clusters by default). The text
features read the prompt only, and the two variants share their prompts, so the short variant stands for both.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import skillmix
from cluster_curate.selection import water_fill_quotas
from common import cli, parser, write_results

FRACTION = 0.31


def quota_mode(mode: str) -> tuple[str, list[str]]:
    """(the table's label, the `cluster` arguments) of a quota mode: none, row, pair or a number of groups,
    optionally with `:nosplit` (`cluster --no-split-mixed`; without it, the default split of mixed clusters)."""
    mode, _, split = mode.partition(":")
    extra = ["--no-split-mixed"] if split == "nosplit" else []
    if mode == "none":
        return "flat (`" + " ".join(["--groups", "none", *extra]) + "`)", ["--groups", "none", *extra]
    args = ["--groups", "auto", "--group-cut", mode] if mode in ("row", "pair") else ["--groups", mode]
    return "`" + " ".join([*args, *extra]) + "`", [*args, *extra]


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="clustering and selection seeds")
    ap.add_argument("--data-seeds", default="0,1,2", help="benchmark data seeds (0 is the one evidence.py trains on)")
    ap.add_argument("--weightings", default="tf,tfidf")
    ap.add_argument("--quotas", default="none,row,pair,none:nosplit,row:nosplit,pair:nosplit")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    data_seeds = [int(s) for s in a.data_seeds.split(",")]
    results, log = [], []
    with tempfile.TemporaryDirectory() as tmp:
        per = {}  # (weighting, mode) -> list of (coverage, worst ratio, ratios per skill)
        rnd = []
        for ds in data_seeds:
            d = Path(tmp) / f"data{ds}"
            paths = skillmix.write_benchmark(d, variant="short", seed=ds)
            skills = np.array(json.loads(Path(paths["labels"]).read_text())["skill"])
            budget = int(len(skills) * FRACTION)
            oracle = water_fill_quotas(np.bincount(skills), budget)
            rnd += [skillmix.coverage(np.bincount(np.random.default_rng(s).choice(skills, budget, replace=False),
                                                  minlength=len(oracle)), oracle) for s in seeds]
            for weighting in a.weightings.split(","):
                emb = d / f"emb-{weighting}.parquet"
                cli(["embed", paths["train"], "--out", emb, "--text-weighting", weighting, "-q"], log)
                for mode in a.quotas.split(","):
                    _, cluster_args = quota_mode(mode)
                    for seed in seeds:
                        c, s = d / "c.parquet", d / "s.parquet"
                        cli(["cluster", emb, "--out", c, "--seed", seed, "--overwrite", "-q", *cluster_args], log)
                        cli(["select", c, "--out", s, "--budget", budget, "--seed", seed, "--overwrite", "-q"], log)
                        ids = pq.read_table(s, columns=["id"]).column("id").to_numpy()
                        counts = np.bincount(skills[ids], minlength=len(oracle))
                        per.setdefault((weighting, mode), []).append(
                            (*skillmix.coverage(counts, oracle), (counts / oracle).tolist()))
        for (weighting, mode), runs in per.items():
            cov = [r[0] for r in runs]
            ratios = np.mean([r[2] for r in runs], axis=0)
            results.append({"weighting": weighting, "quotas": mode, "runs": len(runs),
                            "coverage_mean": float(np.mean(cov)), "coverage_std": float(np.std(cov)),
                            "worst_ratio_mean": float(np.mean([r[1] for r in runs])),
                            "ratio_per_skill_mean": dict(zip(skillmix.SKILL_NAMES, ratios.round(3).tolist()))})
        results.append({"weighting": "-", "quotas": "random 31%", "runs": len(rnd),
                        "coverage_mean": float(np.mean([r[0] for r in rnd])),
                        "coverage_std": float(np.std([r[0] for r in rnd])),
                        "worst_ratio_mean": float(np.mean([r[1] for r in rnd])), "ratio_per_skill_mean": None})
    rare = skillmix.SKILL_NAMES[-3:]
    lines = ["# Text weighting and quotas over groups of clusters: skill coverage of the selection", "",
             f"Skill-mixture benchmark (5,000 rows, 12 long-tailed skills, short variant), budget {FRACTION:.0%}, "
             f"k = auto; benchmark data seeds {data_seeds} x clustering/selection seeds {seeds}. Coverage = "
             "Σ min(count, oracle count) / Σ oracle count; worst skill = min over skills of count ÷ oracle count "
             f"(mean over runs); then the count ÷ oracle of the dominant skill and of the 3 rarest ({', '.join(rare)}).",
             "", f"| text weighting | quotas | coverage (mean ± std) | worst skill ÷ oracle | "
             f"{skillmix.SKILL_NAMES[0]} | {' | '.join(rare)} |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = r["ratio_per_skill_mean"]
        cells = [f"{ratio[s]:.2f}" for s in [skillmix.SKILL_NAMES[0], *rare]] if ratio else ["–"] * 4
        label = r["quotas"] if r["weighting"] == "-" else quota_mode(r["quotas"])[0]
        lines.append(f"| {r['weighting']} | {label} | "
                     f"{r['coverage_mean']:.1%} ± {r['coverage_std']:.1%} | {r['worst_ratio_mean']:.2f} | "
                     + " | ".join(cells) + " |")
    write_results("group_quotas", lines, {"results": results, "commands": log[:8]}, argv)


if __name__ == "__main__":
    main()
