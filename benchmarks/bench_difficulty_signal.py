"""Is there a label-free signal of which skills are hard to learn? (Input that difficulty-aware quotas would need.)

No training: reads the oracle's per-skill test accuracy from the trained dev runs already on disk
(`family_train_dev_lr1e-3*.json`: one-word answers, lr 1e-3, 3 seeds, every skill at the same row count), so
difficulty = 1 - that accuracy. For each skill of each instance, statistics a tool could compute without labels
(here per TRUE skill, the ceiling: a tool's kinds only approximate the skills); the first five from the rows alone:
  diversity   distinct answers / rows
  entropy     answer entropy, bits
  copy        share of rows whose answer is a word of the prompt
  length      mean answer length, characters
  word_join   how well one prompt word predicts the answer (per row, the best share of that word's rows with the
              row's answer; the agreement the answer join in `cluster_curate/answer_kinds.py` looks for)
and two from the tool's own model view of the rows:
  proxy_loss    mean of the `loss` column `embed --features hidden` writes (response cross-entropy under the
                built-in proxy, warmed up briefly on a sample of the data; what `select --within hard` reads)
  heldout_loss  (round 30) the same column after a longer fit: the proxy trained on 31% of the rows (the budget)
                for --fit-epochs passes (at most about 10: `--proxy-budget` 10, its largest, caps the rows trained
                at 10/3 of the dataset's) or exactly --fit-steps steps, mean over the rows it did not train on:
                how much of a skill the fit has not learnt, the learnability estimate a tool could compute
Context, not a candidate: `rows`, the skill's row count. The oracle water-fills equal counts, so a skill rarer than
its share trains on fewer rows, and the statistics that divide by rows partly measure that.
Per instance: Spearman (statistic, difficulty) over its skills. Summary: median over instances and the number
with each sign, on the valid instances and on all. Writes benchmarks/results/difficulty_signal.md/.json.

    python benchmarks/bench_difficulty_signal.py [--runs 'benchmarks/results/family_train_dev_lr1e-3*.json'] [--results DIR]
    python benchmarks/bench_difficulty_signal.py --fit-steps 1000 --jobs 2 --name difficulty_signal_steps1000
"""

from __future__ import annotations

import glob
import json
import math
import re
import tempfile
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr

import bench_family as BF
import skillfamily
from bench_family_train import merged_runs
from common import parser, relative, write_results

STATISTICS = ("diversity", "entropy", "copy", "length", "word_join", "proxy_loss", "heldout_loss")
FIT_SHARE = 0.31  # the longer fit trains on this share of the rows: the benchmarks' budget
COLUMNS = (*STATISTICS, "rows")


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def skill_statistics(prompts: list[str], answers: list[str]) -> dict[str, float]:
    """The label-free statistics of one skill's rows that need no model, and its row count (see the module
    docstring)."""
    n = len(answers)
    answers = [a.strip().lower() for a in answers]
    words = [_words(p) for p in prompts]
    counts = Counter(answers)
    by_word = defaultdict(Counter)
    for a, ws in zip(answers, words):
        for w in ws:
            by_word[w][a] += 1
    total = {w: sum(c.values()) for w, c in by_word.items()}
    join = [max((by_word[w][a] / total[w] for w in ws if total[w] >= 2), default=0.0) for a, ws in zip(answers, words)]
    return {"diversity": len(counts) / n,
            "entropy": -sum(c / n * math.log2(c / n) for c in counts.values()),
            "copy": float(np.mean([a in ws for a, ws in zip(answers, words)])),
            "length": float(np.mean([len(a) for a in answers])),
            "word_join": float(np.mean(join)), "rows": n}


def proxy_loss(inst_dir: Path, n: int, args: list[str] = BF.TOOL_FEATURES["hidden"]) -> tuple[np.ndarray, np.ndarray]:
    """(ids embedded, each row's `loss` column) from `embed` with args (default `--features hidden`: the built-in
    proxy, tool defaults; what `select --within hard` reads); NaN for the exact duplicates embed leaves out."""
    t = pq.read_table(BF.tool_feature_file(inst_dir, args), columns=["id", "loss"])
    ids = t.column("id").to_numpy()
    loss = np.full(n, np.nan)
    loss[ids] = t.column("loss").to_numpy()
    return ids, loss


def fit_args(steps: int | None = None, epochs: float = 10, tokenizer: str = "bpe") -> list[str]:
    """`embed` options for the longer proxy fit (the cost cap lifted as far as it goes; exact steps are not capped)."""
    length = ["--proxy-steps", str(steps)] if steps else ["--proxy-epochs", str(epochs), "--proxy-budget", "10"]
    return ["--features", "hidden", "--proxy-sample", str(FIT_SHARE), *length, "--proxy-tokenizer", tokenizer]


def heldout_loss(inst_dir: Path, n: int, args: list[str]) -> np.ndarray:
    """Each row's `loss` after the fit `args` asks for; NaN for the rows the proxy trained on and for the exact
    duplicates embed leaves out."""
    from cluster_curate.commands.embed_parts import PROXY_SALT, sample_ids
    from cluster_curate.features.proxy import ProxyOptions
    ids, loss = proxy_loss(inst_dir, n, args)
    warm = ProxyOptions(sample=FIT_SHARE)  # as embed builds it from fit_args: its sample size and its seed
    loss[sample_ids(ids, warm.sample_size(len(ids)), warm.seed, PROXY_SALT)] = np.nan
    return loss


def instance_signal(seed: int, oracle_runs: list[dict], test_per_skill: int, work: Path, fit: list[str]) -> dict:
    """Per skill: statistics and difficulty; per statistic: Spearman against difficulty."""
    acc = defaultdict(list)
    for run in oracle_runs:
        for skill, v in run["per_skill"].items():
            acc[skill].append(v)
    inst = work / f"i{seed}"
    paths = skillfamily.write_instance(inst, seed, "short", test_per_skill)
    train = [json.loads(line) for line in paths["train"].read_text().splitlines()]
    n = len(train)
    rows = defaultdict(list)
    for r, x, h in zip(train, proxy_loss(inst, n)[1], heldout_loss(inst, n, fit)):
        rows[r["skill"]].append((r, x, h))
    names = sorted(acc)
    table = {k: {**skill_statistics([r["instruction"] for r, *_ in rows[k]], [r["output"] for r, *_ in rows[k]]),
                 "proxy_loss": float(np.nanmean([x for _, x, _ in rows[k]])),
                 "heldout_loss": float(np.nanmean([h for *_, h in rows[k]])),
                 "difficulty": 1 - float(np.mean(acc[k]))} for k in names}
    rho = {s: float(spearmanr([table[k][s] for k in names], [table[k]["difficulty"] for k in names]).correlation)
           for s in COLUMNS}
    return {"skills": table, "rho": rho}


def summarise(rhos: list[dict]) -> dict:
    out = {}
    for s in COLUMNS:
        r = np.array([x[s] for x in rhos if not math.isnan(x[s])])
        out[s] = {"median": float(np.median(r)) if len(r) else float("nan"), "positive": int((r > 0).sum()),
                  "negative": int((r < 0).sum()), "n": len(r)}
    return out


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--runs", default="benchmarks/results/family_train_dev_lr1e-3*.json",
                    help="glob of bench_family_train.py results holding the oracle's one-word runs")
    ap.add_argument("--results", default=None, help="folder for the table (default benchmarks/results)")
    ap.add_argument("--name", default="difficulty_signal", help="results file stem")
    ap.add_argument("--fit-epochs", type=float, default=10, help="heldout_loss: passes of the longer proxy fit")
    ap.add_argument("--fit-steps", type=int, default=None, help="heldout_loss: exact optimiser steps instead")
    ap.add_argument("--fit-tokenizer", choices=("bpe", "word"), default="bpe", help="heldout_loss: its tokenizer")
    ap.add_argument("--jobs", type=int, default=1, help="instances at once (each runs embed on 1 thread)")
    a = ap.parse_args(argv)
    fit = fit_args(a.fit_steps, a.fit_epochs, a.fit_tokenizer)
    paths = sorted(glob.glob(a.runs))
    if not paths:
        raise SystemExit(f"no results files match {a.runs}")
    results = [json.loads(Path(p).read_text()) for p in paths]
    recipe = results[0]["recipe"]
    runs = merged_runs(paths, recipe)  # refuses files of another recipe, or disagreeing runs
    validity = {k: v for d in results for k, v in d["validity"].items()}
    seeds = sorted(inst for inst, variant, name in runs if (variant, name) == ("short", "oracle"))
    if not seeds:
        raise SystemExit(f"no one-word oracle runs in {a.runs}")
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(a.jobs) as pool:
        jobs = {seed: pool.submit(instance_signal, seed, runs[(seed, "short", "oracle")], recipe["test_per_skill"],
                                  Path(tmp), fit) for seed in seeds}
        per = {seed: job.result() for seed, job in jobs.items()}
    valid = [seed for seed in seeds if validity.get(f"{seed}-short") == "yes"]
    summary = {"valid": summarise([per[s]["rho"] for s in valid]), "all": summarise([per[s]["rho"] for s in seeds])}
    lines = ["# A label-free signal of skill difficulty?", "",
             f"Difficulty = 1 - the oracle's per-skill accuracy (one-word answers, {recipe}); statistics per true "
             "skill from the training rows; Spearman over the skills of each instance. Round 29's rule, set before "
             "the run: a statistic worth setting quotas on has a median |rho| >= 0.5 over the valid instances, "
             "with the same sign on >= 6 of 8. heldout_loss (round 30, the same rule): `cluster-curate embed "
             f"{' '.join(fit)}`, the mean over the rows the proxy did not train on.", "",
             "| instance | valid | skills | " + " | ".join(COLUMNS) + " |", "|---|---|---|" + "---|" * len(COLUMNS)]
    for seed in seeds:
        lines.append(f"| {seed} | {validity.get(f'{seed}-short', '?')} | {len(per[seed]['skills'])} | "
                     + " | ".join(f"{per[seed]['rho'][s]:+.2f}" for s in COLUMNS) + " |")
    for label, sm in summary.items():
        lines.append(f"| median ({label}) | | | " + " | ".join(
            f"{sm[s]['median']:+.2f} ({sm[s]['positive']}+ / {sm[s]['negative']}-)" for s in COLUMNS) + " |")
    write_results(a.name, lines, {"runs": relative(a.runs), "recipe": recipe, "fit": fit, "summary": summary,
                                  "instances": per}, argv, results=a.results)


if __name__ == "__main__":
    main()
