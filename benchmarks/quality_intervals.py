"""How sure a stored figure is: a bootstrap interval of the share of the oracle's advantage over random that a
contender recovers, read from stored results (no training).

- The single instance (`--runs`, `evidence.py` result directories): random, the oracle and every contender are
  trained on the same selection seeds, so a draw resamples seeds and keeps each seed's runs together. Several
  directories can be pooled (the same selections trained with other training seeds,
  `evidence.py --train-seed-offset`).
- The benchmark family (`--family`, a `bench_family_train.py` result): the figure is the median over the valid
  instances of each instance's share, so a draw resamples instances, then each instance's seeds. An instance
  whose oracle is less than 0.02 ahead of random has no share, as in that script.

The figures are (contender − random) / (oracle − random) on the mean macro and worst-skill accuracy, as the
harnesses report them, with the 2.5–97.5 percentiles of the draws and the share of draws below the target.

    python benchmarks/quality_intervals.py --runs quality_r25_short20,quality_r27_short20_t100 \\
        --contenders within-answers,default
    python benchmarks/quality_intervals.py --family family_train_test_answers_prop_short --contenders answers-prop \\
        --guard-worst 0.75
    python benchmarks/quality_intervals.py --family family_train_dev_worked_reference --variant worked \\
        --contenders answers                  # --undecided: also instances whose full-data run is to come
"""

from __future__ import annotations

import json

import numpy as np
from common import LEAST_ADVANTAGE, RESULTS, parser, write_results
from skillfamily import worst_gap_passed

METRICS = ("macro", "worst")


def per_seed(runs: list[str], variant: str, contenders: list[str]) -> dict:
    """{run: {contender: {metric: per-seed accuracies}}} for random, the oracle and each contender."""
    out = {}
    for run in runs:
        results = json.loads((RESULTS / run / "quality.json").read_text())["results"][variant]
        out[run] = {c: {m: np.asarray(results[c][f"per_seed_{m}"], float) for m in METRICS}
                    for c in ("random", "oracle", *contenders)}
    return out


def family_per_seed(stem: str, variant: str, contenders: list[str], undecided: bool = False) -> list[dict]:
    """Per valid instance of a bench_family_train result: {contender: {metric: per-seed accuracies}}. `undecided`:
    also the instances not yet decided ("?") whose worst-skill gap passed (skillfamily.worst_gap_passed: random's
    and at least two of the oracle's runs): context, while their full-data runs are to come."""
    d = json.loads((RESULTS / f"{stem}.json").read_text())
    runs = {tuple(k.split("-", 2)): v for k, v in d["runs"].items()}  # (instance, variant, contender)
    out = []
    for inst in sorted({i for i, v, _ in runs if v == variant}):
        valid = d["validity"].get(f"{inst}-{variant}")
        reference = {c: runs.get((inst, variant, c)) for c in ("random", "oracle")}
        if valid == "yes" or (undecided and valid == "?" and worst_gap_passed(reference)):
            out.append({c: {m: np.asarray([r[m] for r in runs[(inst, variant, c)]], float) for m in METRICS}
                        for c in ("random", "oracle", *contenders)})
    return out


def recovered(seeds: dict, contender: str, metric: str, idx: np.ndarray, least: float = -np.inf) -> float:
    """The share over the seeds at `idx`; NaN where the oracle is less than `least` ahead of random."""
    r, o, c = (seeds[k][metric][idx].mean() for k in ("random", "oracle", contender))
    return float((c - r) / (o - r)) if o - r >= least else float("nan")


def family_median(instances: list[dict], contender: str, metric: str, which: np.ndarray, rng=None) -> float:
    """The median over `which` instances of each one's share (its seeds resampled when `rng` is given)."""
    shares = []
    for i in which:
        s = instances[i]
        n = min(len(s[k][metric]) for k in ("random", "oracle", contender))
        idx = rng.integers(0, n, n) if rng is not None else np.arange(n)
        shares.append(recovered(s, contender, metric, idx, LEAST_ADVANTAGE))
    return float(np.nanmedian(shares))


def interval(seeds, contender: str, metric: str, draws: int, guard: float, rng) -> dict:
    """The figure, its 95% bootstrap interval and the share of draws below `guard`; `seeds`: one instance's
    per-seed results (a dict), or the family's valid instances (a list)."""
    if isinstance(seeds, list):
        n = len(seeds)
        point = family_median(seeds, contender, metric, np.arange(n))
        boot = np.array([family_median(seeds, contender, metric, rng.integers(0, n, n), rng) for _ in range(draws)])
    else:
        n = len(seeds["random"][metric])
        point = recovered(seeds, contender, metric, np.arange(n))
        boot = np.array([recovered(seeds, contender, metric, rng.integers(0, n, n)) for _ in range(draws)])
    low, high = np.nanpercentile(boot, [2.5, 97.5])
    return {"units": n, "recovered": point, "low": float(low), "high": float(high),
            "below_guard": float(np.mean(boot < guard))}


def main(argv=None):
    p = parser(__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--runs", help="evidence.py result directories under benchmarks/results/, comma-separated.")
    src.add_argument("--family", help="bench_family_train.py results under benchmarks/results/ (a stem), "
                     "comma-separated.")
    p.add_argument("--contenders", default="default")
    p.add_argument("--variant", default="short")
    p.add_argument("--guard", type=float, default=0.85, help="The macro share a target asks for (default 0.85).")
    p.add_argument("--guard-worst", type=float, default=None, help="The worst-skill share (default: --guard).")
    p.add_argument("--undecided", action="store_true", help="With --family: also the instances whose validity "
                   "waits for their full-data run (random's and the oracle's runs passed), marked as such.")
    p.add_argument("--draws", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default="quality_intervals")
    p.add_argument("--results", default=None, help="Where to write the table (default benchmarks/results/).")
    a = p.parse_args(argv)
    contenders = a.contenders.split(",")
    guards = {"macro": a.guard, "worst": a.guard if a.guard_worst is None else a.guard_worst}
    rng = np.random.default_rng(a.seed)
    if a.family:
        groups = {stem: family_per_seed(stem, a.variant, contenders, a.undecided) for stem in a.family.split(",")}
        if len(groups) > 1:  # results on disjoint instances: their instances together
            groups["pooled"] = [inst for g in list(groups.values()) for inst in g]
        unit, how = "instances", ("the median over valid instances and those whose validity waits for a "
                                  "full-data run" if a.undecided else "the median over valid instances") + (
            "; bootstrap over instances, then seeds")
    else:
        runs = a.runs.split(",")
        by_run = per_seed(runs, a.variant, contenders)
        groups = dict(by_run)
        if len(runs) > 1:  # the same seeds' runs of every draw side by side: one unit per (draw, seed)
            groups["pooled"] = {c: {m: np.concatenate([by_run[r][c][m] for r in runs]) for m in METRICS}
                                for c in by_run[runs[0]]}
        unit, how = "seeds", "bootstrap over seeds"
    rows = {g: {c: {m: interval(s, c, m, a.draws, guards[m], rng) for m in METRICS} for c in contenders}
            for g, s in groups.items()}
    pct = lambda x: f"{100 * x:.0f}%"  # noqa: E731
    lines = [f"Recovered share of the oracle's advantage over random ({a.variant}), {how} ({a.draws:,} draws; "
             f"95% interval; share of draws below {pct(guards['macro'])} macro, {pct(guards['worst'])} worst skill)",
             "", f"| results | contender | {unit} | macro | 95% | below | worst skill | 95% | below |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g, by_c in rows.items():
        for c, v in by_c.items():
            cells = [f"{100 * v[m]['recovered']:.1f}% | {pct(v[m]['low'])}–{pct(v[m]['high'])} | "
                     f"{v[m]['below_guard']:.2f}" for m in METRICS]
            lines.append(f"| {g} | {c} | {v['macro']['units']} | " + " | ".join(cells) + " |")
    return write_results(a.name, lines, {"config": vars(a), "intervals": rows}, argv, results=a.results)


if __name__ == "__main__":
    main()
