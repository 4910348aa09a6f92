"""Selection-level evidence for `cluster --groups` (quotas water-filled over groups of clusters first).

No training, so no training noise: on the skill-mixture benchmark (benchmarks/skillmix.py, both variants),
select 31% through the tool's own commands with flat quotas and with --groups G or auto, over several clustering
seeds, and compare how the selection covers the skills against the oracle's counts (water-filling by the
true skill labels): coverage = Σ_skill min(count, oracle count) / Σ oracle count; min ratio = the worst
skill's count ÷ the oracle's. Prints a table, writes benchmarks/results/group_quotas.md/.json.

    python benchmarks/bench_group_quotas.py [--seeds 0,1,2,3,4] [--groups auto,12,24,48] [--features text]

The text features read the prompt only, and both variants share their prompts: with text features the two
variants give the same selections (run one with --variants short).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import skillmix  # noqa: E402
from toolcli import cli  # noqa: E402

from cluster_curate.selection import water_fill_quotas  # noqa: E402

FRACTION = 0.31


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--groups", default="auto,12,24,48",
                    help="comma list of --groups values (G or auto) to compare with flat quotas")
    ap.add_argument("--features", default="text")
    ap.add_argument("--variants", default="short,worked")
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    results, log = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in a.variants.split(","):
            paths = skillmix.write_benchmark(Path(tmp) / variant, variant=variant)
            skills = np.array(json.loads(Path(paths["labels"]).read_text())["skill"])
            budget = int(len(skills) * FRACTION)
            oracle = water_fill_quotas(np.bincount(skills), budget)
            emb = Path(tmp) / variant / "emb.parquet"
            cli(["embed", paths["train"], "--out", emb, "--features", a.features, "-q"], log)
            modes = [("flat", [])] + [(f"groups {g}", ["--groups", g]) for g in a.groups.split(",")]
            for mode, extra in modes:
                cov, mins = [], []
                for seed in seeds:
                    c, s = Path(tmp) / variant / "c.parquet", Path(tmp) / variant / "s.parquet"
                    cli(["cluster", emb, "--out", c, "--seed", seed, "--overwrite", "-q", *extra], log)
                    cli(["select", c, "--out", s, "--budget", budget, "--seed", seed, "--overwrite", "-q"], log)
                    ids = pq.read_table(s, columns=["id"]).column("id").to_numpy()
                    cv, mn = skillmix.coverage(np.bincount(skills[ids], minlength=len(oracle)), oracle)
                    cov.append(cv)
                    mins.append(mn)
                results.append({"variant": variant, "features": a.features, "quotas": mode, "seeds": len(seeds),
                                "coverage_mean": float(np.mean(cov)), "coverage_std": float(np.std(cov)),
                                "min_ratio_mean": float(np.mean(mins)), "coverage_per_seed": cov})
            rnd = [skillmix.coverage(np.bincount(np.random.default_rng(s).choice(skills, budget, replace=False),
                                             minlength=len(oracle)), oracle)[0] for s in seeds]
            results.append({"variant": variant, "features": "-", "quotas": "random 31%", "seeds": len(seeds),
                            "coverage_mean": float(np.mean(rnd)), "coverage_std": float(np.std(rnd)),
                            "min_ratio_mean": float("nan"), "coverage_per_seed": rnd})
    lines = ["# Quotas over groups of clusters (`cluster --groups`): skill coverage of the selection", "",
             f"Skill-mixture benchmark (5,000 rows, 12 long-tailed skills), budget {FRACTION:.0%}, k = auto, "
             f"seeds {seeds} (clustering and selection). Coverage = Σ min(count, oracle count) / Σ oracle count.",
             "", "| variant | features | quotas | coverage (mean ± std) | worst skill ÷ oracle |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['variant']} | {r['features']} | {r['quotas']} | {r['coverage_mean']:.1%} ± "
                     f"{r['coverage_std']:.1%} | {r['min_ratio_mean']:.2f} |")
    lines += ["", "Command: `python benchmarks/bench_group_quotas.py " + " ".join(argv or sys.argv[1:]) + "`"]
    text = "\n".join(lines) + "\n"
    print(text)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "group_quotas.md").write_text(text)
    (out / "group_quotas.json").write_text(json.dumps({"results": results, "commands": log[:8]}, indent=1))


if __name__ == "__main__":
    main()
