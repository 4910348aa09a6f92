"""Selection-only quality on the benchmark family (benchmarks/skillfamily.py): many instances, no training.

For each instance of a split (dev or test; instances in seed order from the start of its range), embed the
prompts once through the tool (`cluster-curate embed`, the defaults), then select 31% with every candidate
mechanism and compare the selection's rows per skill with the oracle's (water-filling by the true skill labels):

- coverage      Σ_skill min(count, oracle count) / Σ oracle count
- worst ratio   min over skills of count / oracle count
- dominant      the most frequent skill's count / its oracle count (> 1: it took more than its share)
- twin recall   the rare member of each near-twin pair: count / oracle count (mean over the pairs)

A mechanism is a clustering + grouping of the embeddings followed by the tool's own quota and in-cluster
selection (`selection.select_rows`); `default` repeats what `cluster` + `select --budget` do with their
defaults, and `--check-cli N` re-runs the first N instances' default through the tool's commands and checks
that the ids are the same. Writes benchmarks/results/family_<split>.md/.json.

    python benchmarks/bench_family.py --split dev --instances 50 [--mechanisms default,flat,...] [--seeds 0]
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import common
import skillfamily
from cluster_curate import clustering as C
from cluster_curate.selection import select_rows, water_fill_quotas

FRACTION = 0.31


# ============================================================================================ mechanisms

def kmeans_split(x, seed, split=True):
    k = C.auto_k(len(x))
    res = C.cluster_features(x, k, seed=seed, sample_size=C.training_sample_size(len(x), k), gpus=0)
    if split:
        res, _ = C.split_mixed_clusters(x, res, C.group_cut_similarity(res, "pair"))
    return res


def mech_default(x, seed, inst, cut="row", split=True):
    res = kmeans_split(x, seed, split)
    return res.labels, C.group_clusters(res.centroids, min_similarity=C.group_cut_similarity(res, cut))


def mech_flat(x, seed, inst):
    return kmeans_split(x, seed).labels, None


def mech_pair(x, seed, inst):
    return mech_default(x, seed, inst, cut="pair")


def mech_nosplit(x, seed, inst):
    return mech_default(x, seed, inst, split=False)


def mech_hkm(x, seed, inst, ratio=1.0):
    """Hierarchical k-means (ssl-data-curation's recipe, two levels): the level-1 clusters (default k and split),
    then k-means of their centroids into ceil(ratio * sqrt(k)) groups; quotas balanced at each level."""
    res = kmeans_split(x, seed)
    g = max(1, min(res.k, int(np.ceil(ratio * np.sqrt(res.k)))))
    top = C.cluster_features(np.ascontiguousarray(res.centroids), g, seed=seed, gpus=0)
    _, first, inv = np.unique(top.labels, return_index=True, return_inverse=True)
    return res.labels, np.argsort(np.argsort(first))[inv]


MECHANISMS = {
    "default": mech_default,
    "flat": mech_flat,
    "pair": mech_pair,
    "nosplit": mech_nosplit,
    "hkm": mech_hkm,
    "hkm2": lambda x, s, i: mech_hkm(x, s, i, ratio=2.0),
}


# ============================================================================================ metrics

def cheap_metrics(counts: np.ndarray, oracle: np.ndarray, twins: list) -> dict:
    ratio = counts / oracle
    return {"coverage": float(np.minimum(counts, oracle).sum() / oracle.sum()), "worst": float(ratio.min()),
            "dominant": float(ratio[0]),  # an instance lists its skills most frequent first
            "twin": float(np.mean([ratio[r] for _, r in twins])) if twins else float("nan")}


def prepare(seed: int, work: Path, log: list) -> tuple:
    """(ids, unit feature rows, skill of each row, instance description) of one instance (embedded once)."""
    d = work / f"i{seed}"
    emb = d / "emb.parquet"
    if not emb.exists():
        skillfamily.write_instance(d, seed, "short", test_per_skill=1)
        common.cli(["embed", d / "train.jsonl", "--out", emb, "--overwrite"], log)
    labels = json.loads((d / "labels.json").read_text())
    t = pq.read_table(emb)
    ids = t.column("id").to_numpy()
    x = np.ascontiguousarray(C.embedding_matrix(t.column("embedding"), ids), dtype=np.float32).copy()
    C.normalise_features(x)
    return ids, x, np.asarray(labels["skill"])[ids], labels


def run_mechanism(name, ids, x, skills, labels, seed, budget):
    clusters, groups = MECHANISMS[name](x, seed, labels)
    sel = select_rows(clusters, ids=ids, budget=budget, seed=seed, groups=groups)
    return ids[sel.rows]


def cli_default_ids(seed: int, work: Path, budget: int, log: list) -> np.ndarray:
    d = work / f"i{seed}"
    common.cli(["cluster", d / "emb.parquet", "--out", d / "c.parquet", "--overwrite"], log)
    common.cli(["select", d / "c.parquet", "--out", d / "s.parquet", "--budget", budget, "--overwrite"], log)
    return np.sort(pq.read_table(d / "s.parquet", columns=["id"]).column("id").to_numpy())


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--split", choices=sorted(skillfamily.SPLITS), default="dev")
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--mechanisms", default=",".join(MECHANISMS))
    ap.add_argument("--seeds", default="0", help="clustering/selection seeds")
    ap.add_argument("--check-cli", type=int, default=2, help="instances whose default is checked against the CLI")
    ap.add_argument("--work", default=str(common.ROOT / "out" / "family"))
    a = ap.parse_args(argv)
    work = Path(a.work)
    mechs = a.mechanisms.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    log: list[str] = []
    per_instance, t0 = [], time.perf_counter()
    for i, inst_seed in enumerate(skillfamily.SPLITS[a.split][: a.instances]):
        ids, x, skills, labels = prepare(inst_seed, work, log)
        budget = int(round(FRACTION * len(ids)))
        n_skills = len(labels["skills"])
        oracle = water_fill_quotas(np.bincount(skills, minlength=n_skills), budget)
        twins = labels["twins"]
        row = {"seed": inst_seed, "rows": len(ids), "skills": n_skills, "zipf": labels["zipf"], "twins": twins,
               "metrics": {}}
        rng = np.random.default_rng(inst_seed)
        rnd = [cheap_metrics(np.bincount(skills[rng.choice(len(ids), budget, replace=False)],
                                         minlength=n_skills), oracle, twins) for _ in seeds]
        row["metrics"]["random"] = {k: float(np.mean([r[k] for r in rnd])) for k in rnd[0]}
        for m in mechs:
            runs = []
            for s in seeds:
                sel = run_mechanism(m, ids, x, skills, labels, s, budget)
                runs.append(cheap_metrics(np.bincount(skills[np.searchsorted(ids, sel)], minlength=n_skills),
                                          oracle, twins))
                if m == "default" and s == 0 and i < a.check_cli:
                    cli_ids = cli_default_ids(inst_seed, work, budget, log)
                    if not np.array_equal(cli_ids, np.sort(sel)):
                        raise SystemExit(f"instance {inst_seed}: the default mechanism differs from the CLI's")
            row["metrics"][m] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        per_instance.append(row)
        print(f"[{a.split} {inst_seed}] " + "  ".join(f"{m} {v['coverage']:.3f}/{v['worst']:.2f}/{v['dominant']:.2f}"
                                                   f"/{v['twin']:.2f}" for m, v in row["metrics"].items()),
              flush=True)
    names = ["random", *mechs]
    summary = {}
    for m in names:
        vals = {k: np.array([r["metrics"][m][k] for r in per_instance]) for k in ("coverage", "worst", "dominant",
                                                                                  "twin")}
        summary[m] = {**{f"{k}_mean": float(np.nanmean(v)) for k, v in vals.items()},
                      **{f"{k}_median": float(np.nanmedian(v)) for k, v in vals.items()},
                      "coverage_min": float(vals["coverage"].min()), "worst_min": float(vals["worst"].min()),
                      "wins_coverage_vs_default": int(sum(r["metrics"][m]["coverage"] > r["metrics"]["default"]
                                                          ["coverage"] for r in per_instance))
                      if "default" in mechs else None}
    lines = [f"# Benchmark family, {a.split} split: selection-only skill coverage ({len(per_instance)} instances)", "",
             f"Instances: seeds {per_instance[0]['seed']}–{per_instance[-1]['seed']} of the {a.split} range "
             f"({skillfamily.SPLITS[a.split].start}–{skillfamily.SPLITS[a.split].stop - 1}), taken in order; "
             f"budget {FRACTION:.0%}; clustering/selection seeds {seeds}. Against the oracle's per-skill counts "
             "(water-filling by the true skill): coverage = Σ min(count, oracle) / Σ oracle; worst = min count ÷ "
             "oracle; dominant = the most frequent skill's count ÷ oracle; twin = the rare near twin's count ÷ "
             "oracle (mean over pairs).", "",
             "| mechanism | coverage mean | coverage median | coverage min | worst mean | worst min | dominant mean "
             "| twin mean | instances above default (coverage) |", "|---|---|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        lines.append(f"| {m} | {s['coverage_mean']:.1%} | {s['coverage_median']:.1%} | {s['coverage_min']:.1%} | "
                     f"{s['worst_mean']:.2f} | {s['worst_min']:.2f} | {s['dominant_mean']:.2f} | "
                     f"{s['twin_mean']:.2f} | {s['wins_coverage_vs_default'] if m != 'default' else '–'} |")
    lines += ["", "Per instance (coverage / worst / dominant / twin):", "",
              "| seed | rows | skills | zipf | " + " | ".join(names) + " |", "|---" * (4 + len(names)) + "|"]
    for r in per_instance:
        lines.append(f"| {r['seed']} | {r['rows']} | {r['skills']} | {r['zipf']:.2f} | " + " | ".join(
            f"{r['metrics'][m]['coverage']:.3f} / {r['metrics'][m]['worst']:.2f} / {r['metrics'][m]['dominant']:.2f}"
            f" / {r['metrics'][m]['twin']:.2f}" for m in names) + " |")
    lines += ["", f"Wall time {time.perf_counter() - t0:.0f} s."]
    common.write_results(f"family_{a.split}", lines, {"summary": summary, "instances": per_instance,
                                                      "commands": log[:4]}, argv)


if __name__ == "__main__":
    main()
