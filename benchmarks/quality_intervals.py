"""How sure a stored `evidence.py` figure is: a bootstrap interval of the share of the oracle's advantage over
random that a contender recovers, read from stored results (no training).

The harness trains random, the oracle and every contender on the same selection seeds, so a bootstrap draw
resamples seeds and keeps each seed's three runs together. Several result directories can be pooled (the same
selections trained with other training seeds, `evidence.py --train-seed-offset`). The figures it prints are
(contender − random) / (oracle − random) on the mean macro and worst-skill accuracy, as `evidence.py` reports
them, with the 2.5–97.5 percentiles of 10,000 draws and the share of draws below the guard.

    python benchmarks/quality_intervals.py --runs quality_r25_short20,quality_r27_short20_t100 \\
        --contenders within-answers,default --variant short
"""

from __future__ import annotations

import json

import numpy as np
from common import RESULTS, parser, write_results

METRICS = ("macro", "worst")


def per_seed(runs: list[str], variant: str, contenders: list[str]) -> dict:
    """{run: {contender: {metric: per-seed accuracies}}} for random, the oracle and each contender."""
    out = {}
    for run in runs:
        results = json.loads((RESULTS / run / "quality.json").read_text())["results"][variant]
        out[run] = {c: {m: np.asarray(results[c][f"per_seed_{m}"], float) for m in METRICS}
                    for c in ("random", "oracle", *contenders)}
    return out


def recovered(seeds: dict, contender: str, metric: str, idx: np.ndarray) -> float:
    r, o, c = (seeds[k][metric][idx].mean() for k in ("random", "oracle", contender))
    return float((c - r) / (o - r))


def interval(seeds: dict, contender: str, metric: str, draws: int, guard: float, rng) -> dict:
    n = len(seeds["random"][metric])
    boot = np.array([recovered(seeds, contender, metric, rng.integers(0, n, n)) for _ in range(draws)])
    low, high = np.percentile(boot, [2.5, 97.5])
    return {"seeds": n, "recovered": recovered(seeds, contender, metric, np.arange(n)), "low": float(low),
            "high": float(high), "below_guard": float(np.mean(boot < guard))}


def main(argv=None):
    p = parser(__doc__)
    p.add_argument("--runs", required=True, help="Result directories under benchmarks/results/, comma-separated.")
    p.add_argument("--contenders", default="default")
    p.add_argument("--variant", default="short")
    p.add_argument("--guard", type=float, default=0.85, help="The share a target asks for (default 0.85).")
    p.add_argument("--draws", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="quality_intervals")
    p.add_argument("--results", default=None, help="Where to write the table (default benchmarks/results/).")
    a = p.parse_args(argv)
    runs, contenders = a.runs.split(","), a.contenders.split(",")
    rng = np.random.default_rng(a.seed)
    by_run = per_seed(runs, a.variant, contenders)
    groups = {run: by_run[run] for run in runs}
    if len(runs) > 1:  # the same seeds' runs of every draw side by side: one unit per (draw, seed)
        groups["pooled"] = {c: {m: np.concatenate([by_run[r][c][m] for r in runs]) for m in METRICS}
                            for c in by_run[runs[0]]}
    rows = {g: {c: {m: interval(s, c, m, a.draws, a.guard, rng) for m in METRICS} for c in contenders}
            for g, s in groups.items()}
    pct = lambda x: f"{100 * x:.0f}%"  # noqa: E731
    lines = [f"Recovered share of the oracle's advantage over random ({a.variant}), bootstrap over seeds "
             f"({a.draws:,} draws; 95% interval; share of draws below {pct(a.guard)})", "",
             "| results | contender | seeds | macro | 95% | below | worst skill | 95% | below |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g, by_c in rows.items():
        for c, v in by_c.items():
            cells = [f"{100 * v[m]['recovered']:.1f}% | {pct(v[m]['low'])}–{pct(v[m]['high'])} | "
                     f"{v[m]['below_guard']:.2f}" for m in METRICS]
            lines.append(f"| {g} | {c} | {v['macro']['seeds']} | " + " | ".join(cells) + " |")
    return write_results(a.name, lines, {"config": vars(a), "intervals": rows}, argv, results=a.results)


if __name__ == "__main__":
    main()
