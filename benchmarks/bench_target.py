"""Evidence for targeted selection (issue 22): given a few examples of the task, does `select --target` spend the
budget on that task, and does it beat the label-free ways of doing so?

skill   The skill-mixture benchmark (benchmarks/skillmix.py, 5,000 rows, 12 long-tailed skills). A draw picks 3
        target skills: one frequent (upper, first_letter, copy_twice), one middle (compare .. length), one rare
        (minus1 .. triple). The target is 20 held-out test rows per target skill; the budget is 10% of the pool.
        The pool goes through the tool's commands (`embed`, `cluster`, `select` for the untargeted default);
        the target is embedded in the pool's space with `embed TARGET --like POOL` (the pool's text basis).
        Contenders: random; untargeted (`select --fraction 0.1`); topk-mean (top rows by cosine to the target
        mean); rds (RDS+: round-robin over target rows, each taking its next most similar row not yet taken);
        less (LESS-like: `lora-gradient` features, top rows by mean cosine to the target's gradients); tool-wW
        (targeting.select_targeted at --target-weight W and min_hits H, in process); tool (the default: `select
        --fraction 0.1 --target T`, T from `embed TARGET --like POOL`); oracle (the budget spread evenly over the target
        skills by the true labels, water-filled; random rows inside a skill).
        Selection measures: share of the budget on the target skills, and coverage of the oracle's per-skill
        counts (Σ min(count, oracle) / budget, and the worst target skill's count / the oracle's).
        With --train: the evidence harness's recipe (train_eval.TrainConfig, same epochs), target-skill macro
        accuracy on the other 80 test rows of each target skill, and accuracy on the other skills.
real    GSM8K train + Code Alpaca (the code at --code-share of the pool); the target is 50 held-out Code Alpaca
        rows; budget --real-fraction of the pool: the code share of each contender's selection.

Dev/test: --draws names the draws reported; the default of --target-weight was chosen on draws 0-3 and the
test draws 4-7 were run after that choice (see results/target.md).

    .venv/bin/python benchmarks/bench_target.py skill [--draws 0-3] [--train --seeds 0,1,2] [--no-less]
    .venv/bin/python benchmarks/bench_target.py real [--code-share 0.07] [--real-fraction 0.05] [--train random,tool]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import skillmix
import train_eval
from common import DATA, ROOT, cli, write_results

from cluster_curate import targeting as T
from cluster_curate.selection import water_fill_quotas

TIERS = {"frequent": ["upper", "first_letter", "copy_twice"],
         "middle": ["compare", "last_letter", "max3", "length"],
         "rare": ["minus1", "reverse", "plus1", "double", "triple"]}
TARGET_PER_SKILL, FRACTION = 20, 0.10


WEIGHTS = (1.0, 0.9, 0.75, 0.6, 0.5, 0.33, 0.1)
MIN_HITS = (0, 1, 2, 3)


def parse_range(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def draw_skills(draw: int) -> list[str]:
    rng = random.Random(7919 * draw + 1)
    return [rng.choice(TIERS[t]) for t in ("frequent", "middle", "rare")]


# ---------------------------------------------------------------------------------------------- features

def pool_matrix(path: Path) -> tuple[np.ndarray, np.ndarray]:
    from cluster_curate.io.readers import read_embeddings
    ids, x, _ = read_embeddings(path)
    return x, np.asarray(ids)


def embed_like(pool_path: Path, data: Path, log: list[str]) -> tuple[Path, np.ndarray]:
    """`embed DATA --like POOL`: the target's embeddings artifact and its rows (in file order)."""
    out = data.with_name(f"{data.stem}.like-{pool_path.stem}.parquet")
    cli(["embed", data, "--like", pool_path, "--out", out, "--overwrite"], log)
    return out, pool_matrix(out)[0]


def unit(x):
    return T._unit(x)


# ---------------------------------------------------------------------------------------------- contenders

def topk_mean(x, t, budget):
    score = unit(x) @ unit(t.mean(axis=0, keepdims=True))[0]
    return np.sort(np.lexsort((np.arange(len(x)), -score))[:budget])


def rds_round_robin(x, t, budget):
    """RDS+'s selection: each target row ranks the pool by cosine; rounds over target rows, each taking its next
    row not yet taken, until the budget is spent."""
    sim = unit(x) @ unit(t).T  # [n, m]
    ranked = np.lexsort((np.broadcast_to(np.arange(len(x))[:, None], sim.shape), -sim), axis=0).T  # [m, n]
    taken = np.zeros(len(x), dtype=bool)
    picks, ptr = [], np.zeros(len(t), dtype=np.int64)
    while len(picks) < budget:
        for j in range(len(t)):
            while taken[ranked[j, ptr[j]]]:
                ptr[j] += 1
            i = ranked[j, ptr[j]]
            taken[i] = True
            picks.append(int(i))
            if len(picks) == budget:
                break
    return np.sort(np.asarray(picks))


def less_mean_cosine(x, t, budget):
    """LESS's score for one target task: the mean over target rows of the cosine of (projected LoRA) gradients."""
    score = (unit(x) @ unit(t).T).mean(axis=1)
    return np.sort(np.lexsort((np.arange(len(x)), -score))[:budget])


def oracle(skill, target_skills, budget, seed):
    rng = np.random.default_rng(3000 + seed)
    groups = [np.flatnonzero(skill == s) for s in target_skills]
    quotas = water_fill_quotas(np.array([len(g) for g in groups]), budget)
    return np.sort(np.concatenate([rng.choice(g, q, replace=False) for g, q in zip(groups, quotas)]))


def random_rows(n, budget, seed):
    return np.sort(np.random.default_rng(1000 + seed).choice(n, budget, replace=False))


# ---------------------------------------------------------------------------------------------- skill benchmark

def cached_cli(args: list, out: Path, log: list[str]) -> None:
    """Run a command unless its output exists (a cached run is still listed under the table)."""
    if out.exists():
        import shlex
        log.append("cluster-curate " + " ".join(shlex.quote(str(a)) for a in args))
    else:
        cli(args, log)


def prepare_pool(work: Path, variant: str, log: list[str], less: bool) -> dict:
    vdir = work / variant
    if not (vdir / "labels.json").exists():
        skillmix.write_benchmark(vdir, 5000, variant, seed=0, test_per_skill=100)
    data = vdir / "train.jsonl"
    out = {"dir": vdir, "data": data}
    for name, args in [("text", []), ("lora", ["--features", "lora-gradient"])] if less else [("text", [])]:
        emb = vdir / f"emb-{name}.parquet"
        cached_cli(["embed", data, "--out", emb, "--overwrite", *args], emb, log)
        out[name] = emb
    clusters = vdir / "clusters.parquet"
    cached_cli(["cluster", out["text"], "--out", clusters, "--overwrite"], clusters, log)
    out["clusters"] = clusters
    return out


def read_column(path: Path, column: str):
    from cluster_curate.io.artifacts import read_artifact
    table, _ = read_artifact(path)
    return np.asarray(table.column("id").to_pylist()), np.asarray(table.column(column).to_pylist())


def grid_name(weight: float, hits: int, quota_by: str) -> str:
    """The in-process grid's contender names: tool-wW-hH (quotas by hits, the default) or tool-wW-hH-cluster."""
    return f"tool-w{weight:g}-h{hits}" + ("" if quota_by == T.QUOTA_BY[0] else f"-{quota_by}")


def skill_draw(pool: dict, draw: int, seeds: list[int], less: bool, log: list[str], weights, min_hits,
               quota_by=T.QUOTA_BY[:1]) -> dict:
    vdir = pool["dir"]
    labels = json.loads((vdir / "labels.json").read_text())
    names = labels["skills"]
    # the pool is the rows `embed` kept (exact copies left out, the lowest id kept); contenders work on positions
    x, ids = pool_matrix(pool["text"])
    skill = np.asarray(labels["skill"])[ids]
    n = len(ids)
    budget = round(FRACTION * n)
    targets = draw_skills(draw)
    test = [json.loads(line) for line in (vdir / "test.jsonl").read_text().splitlines()]
    rng = random.Random(draw)
    target_rows = []
    for s in targets:
        rows = [r for r in test if r["skill"] == s]
        rng.shuffle(rows)
        target_rows += rows[:TARGET_PER_SKILL]
    tpath = vdir / f"target-d{draw}.jsonl"
    tpath.write_text("".join(json.dumps(r) + "\n" for r in target_rows))
    t_emb, t = embed_like(pool["text"], tpath, log)
    cid, cl = read_column(pool["clusters"], "cluster")
    clusters = np.empty(n, dtype=np.int64)
    clusters[np.searchsorted(ids, cid)] = cl
    budget_depth = T.list_depth(budget, min(weights), len(t), n)
    with threadpool_limits(1):  # the commands' arithmetic (common.cli runs them on one thread), so the same ties
        search = T.search_target(x, t, depth=budget_depth)
    sels: dict[str, dict[int, np.ndarray]] = {}
    for seed in seeds:
        sel_path = vdir / f"untargeted-s{seed}.parquet"
        cached_cli(["select", pool["clusters"], "--out", sel_path, "--overwrite", "--fraction", str(FRACTION),
                    "--seed", str(seed)], sel_path, log)
        sels.setdefault("random", {})[seed] = random_rows(n, budget, seed)
        sels.setdefault("untargeted", {})[seed] = np.searchsorted(ids, np.sort(read_column(sel_path, "cluster")[0]))
        sels.setdefault("topk-mean", {})[seed] = topk_mean(x, t, budget)
        sels.setdefault("rds", {})[seed] = rds_round_robin(x, t, budget)
        if less:
            xl, lora_ids = pool_matrix(pool["lora"])
            assert (lora_ids == ids).all()
            sels.setdefault("less", {})[seed] = less_mean_cosine(xl, embed_like(pool["lora"], tpath, log)[1], budget)
        tool = vdir / f"targeted-d{draw}-s{seed}.parquet"  # the tool's default, through its command
        cli(["select", pool["clusters"], "--out", tool, "--overwrite", "--fraction", str(FRACTION), "--seed", str(seed),
             "--target", t_emb], log)
        sels.setdefault("tool", {})[seed] = np.searchsorted(ids, np.sort(read_column(tool, "cluster")[0]))
        for w in weights:  # the grid, in process (min_hits is not an option of the command)
            for hits in min_hits:
                for by in quota_by:
                    sel = T.select_targeted(clusters, search, budget=budget, target_weight=w, seed=seed,
                                            min_hits=hits, quota_by=by)
                    sels.setdefault(grid_name(w, hits, by), {})[seed] = sel.rows
        sels.setdefault("oracle", {})[seed] = oracle(skill, [names.index(s) for s in targets], budget, seed)
    tidx = [names.index(s) for s in targets]
    ocounts = np.array([np.sum(skill[sels["oracle"][seeds[0]]] == s) for s in tidx], dtype=float)
    measures = {}
    for name, by_seed in sels.items():
        shares, covs, worsts = [], [], []
        for rows in by_seed.values():
            counts = np.array([np.sum(skill[rows] == s) for s in tidx], dtype=float)
            shares.append(counts.sum() / budget)
            covs.append(np.minimum(counts, ocounts).sum() / ocounts.sum())
            worsts.append((counts / ocounts).min())
        measures[name] = {"share": float(np.mean(shares)), "coverage": float(np.mean(covs)),
                          "worst": float(np.mean(worsts)),
                          "counts": [int(np.sum(skill[by_seed[seeds[0]]] == s)) for s in tidx]}
    return {"draw": draw, "targets": targets, "budget": budget, "oracle_counts": ocounts.tolist(),
            "far": int(search.far.sum()), "measures": measures,
            "selections": {k: {s: ids[v].tolist() for s, v in by.items()} for k, by in sels.items()},
            "target_ids": [int(r["id"]) if "id" in r else None for r in target_rows],
            "target_instructions": [r["instruction"] for r in target_rows]}


def _train_job(job) -> dict:
    vdir, ids, held_out, seed, epochs, key = job
    rows = train_eval.load_rows(Path(vdir) / "train.jsonl", "skill")
    test = [r for r in train_eval.load_rows(Path(vdir) / "test.jsonl", "skill") if r.prompt not in held_out]
    keep = set(ids)
    cfg = train_eval.TrainConfig(epochs=epochs, seed=seed)
    r = train_eval.run([x for x in rows if x.id in keep], test, rows + test, cfg)
    r = {k: r[k] for k in ("per_skill", "macro", "train_seconds", "rows") if k in r}
    Path(key).write_text(json.dumps(r))
    return r


def train_draw(pool: dict, res: dict, names: list[str], seeds: list[int], epochs: int, cache: Path,
               jobs: int) -> dict:
    """Train on each selection (the harness's recipe); score the target skills on their test rows that are not
    in the target, the other skills on all of theirs. Runs cached by draw, contender, seed and rows."""
    import hashlib
    from concurrent.futures import ProcessPoolExecutor
    cache.mkdir(parents=True, exist_ok=True)
    held_out = set(res["target_instructions"])
    todo, keys = [], {}
    for name in names:
        for seed in seeds:
            ids = sorted(res["selections"][name][seed])
            digest = hashlib.blake2b(json.dumps(ids).encode(), digest_size=6).hexdigest()
            key = cache / f"d{res['draw']}-s{seed}-e{epochs}-{digest}.json"
            keys[name, seed] = key
            if not key.exists():
                todo.append((str(pool["dir"]), ids, held_out, seed, epochs, str(key)))
    if todo:
        with ProcessPoolExecutor(jobs) as ex:
            list(ex.map(_train_job, todo))
    out = {}
    for (name, seed), key in keys.items():
        acc = json.loads(key.read_text())["per_skill"]
        tgt = float(np.mean([acc[s] for s in res["targets"]]))
        other = float(np.mean([v for s, v in acc.items() if s not in res["targets"]]))
        out.setdefault(name, []).append({"seed": seed, "target": tgt, "other": other})
        print(f"  d{res['draw']} {name} s{seed}: target {tgt:.3f} other {other:.3f}", file=sys.stderr, flush=True)
    return out


def skill_main(a):
    work = Path(a.work)
    log: list[str] = []
    pool = prepare_pool(work, "short", log, a.less)
    seeds = [int(s) for s in a.seeds.split(",")]
    results = []
    for draw in parse_range(a.draws):
        t0 = time.perf_counter()
        res = skill_draw(pool, draw, seeds, a.less, log, [float(w) for w in a.weights.split(",")],
                         [int(h) for h in a.min_hits.split(",")], a.quota_by.split(","))
        res["seconds"] = time.perf_counter() - t0
        if a.train:
            res["trained"] = train_draw(pool, res, a.train.split(","), seeds, a.epochs, work / "runs", a.jobs)
        results.append(res)
        print(f"draw {draw} {res['targets']}: " + ", ".join(f"{k} {v['share']:.2f}" for k, v in res["measures"].items()),
              file=sys.stderr, flush=True)
    names = list(results[0]["measures"])
    lines = [f"# Targeted selection on the skill benchmark (short variant, 5,000 rows, budget {FRACTION:.0%}, "
             f"target {TARGET_PER_SKILL} held-out rows per target skill)", "",
             f"Draws {a.draws}, selection seeds {a.seeds}. Share: of the budget on the 3 target skills. Coverage: "
             "Σ min(count, oracle count) / oracle total over the target skills. Worst: the worst target skill's "
             "count ÷ the oracle's.", "",
             "| contender | share | coverage | worst |", "|---|---:|---:|---:|"]
    for name in names:
        m = [r["measures"][name] for r in results]
        lines.append(f"| {name} | {np.mean([v['share'] for v in m]):.3f} | {np.mean([v['coverage'] for v in m]):.3f} "
                     f"| {np.mean([v['worst'] for v in m]):.3f} |")
    lines += ["", "Per draw (rows on each target skill, seed " + str(seeds[0]) + "):", "",
              "| draw | targets (pool rows) | oracle | " + " | ".join(names) + " |",
              "|---|---|---|" + "---|" * len(names)]
    labels = json.loads((pool["dir"] / "labels.json").read_text())
    sizes = np.bincount(labels["skill"], minlength=len(labels["skills"]))
    for r in results:
        tg = ", ".join(f"{s} ({sizes[labels['skills'].index(s)]})" for s in r["targets"])
        lines.append(f"| {r['draw']} | {tg} | {'/'.join(str(int(c)) for c in r['oracle_counts'])} | "
                     + " | ".join("/".join(str(c) for c in r["measures"][n]["counts"]) for n in names) + " |")
    if a.train:
        tnames = a.train.split(",")
        lines += ["", f"Trained ({a.epochs} epochs, the evidence harness's recipe; mean ± std over draws × seeds):", "",
                  "| contender | target-skill macro | other skills | runs |", "|---|---:|---:|---:|"]
        for name in tnames:
            runs = [x for r in results for x in r["trained"][name]]
            tv, ov = [x["target"] for x in runs], [x["other"] for x in runs]
            lines.append(f"| {name} | {np.mean(tv):.3f} ± {np.std(tv):.3f} | {np.mean(ov):.3f} ± {np.std(ov):.3f} "
                         f"| {len(runs)} |")
    lines += ["", "Commands run:", ""] + [f"    {c}" for c in dict.fromkeys(log)]
    payload = {"args": {k: v for k, v in vars(a).items() if k != "func"},
               "results": [{k: v for k, v in r.items() if k not in ("selections", "target_instructions")}
                           for r in results]}
    write_results(a.stem or "target_skill", lines, payload, a.argv)


# ---------------------------------------------------------------------------------------------- real data

def real_main(a):
    work = Path(a.work) / "real"
    work.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    gsm = [json.loads(line) for line in Path(a.gsm8k).read_text().splitlines() if line.strip()]
    code = json.loads(Path(a.code_alpaca).read_text())
    rng = random.Random(0)
    rng.shuffle(code)
    target, code_test, code_pool = code[:a.targets], code[a.targets:a.targets + a.code_test], code[a.targets + a.code_test:]
    n_gsm = len(gsm)
    n_code = min(len(code_pool), round(a.code_share / (1 - a.code_share) * n_gsm))
    pool_rows = [{"instruction": r["question"], "output": r["answer"], "source": "gsm8k"} for r in gsm]
    pool_rows += [{"instruction": _code_prompt(r), "output": r["output"], "source": "code"} for r in code_pool[:n_code]]
    random.Random(1).shuffle(pool_rows)
    data = work / f"pool-{a.code_share:g}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in pool_rows))
    tpath = work / "target.jsonl"
    tpath.write_text("".join(json.dumps({"instruction": _code_prompt(r), "output": r["output"]}) + "\n" for r in target))
    emb, clusters_path = work / f"emb-{a.code_share:g}.parquet", work / f"clusters-{a.code_share:g}.parquet"
    cli(["embed", data, "--out", emb, "--overwrite"], log)
    cli(["cluster", emb, "--out", clusters_path, "--overwrite"], log)
    is_code = np.array([r["source"] == "code" for r in pool_rows])
    n = len(pool_rows)
    budget = round(a.real_fraction * n)
    x, _ = pool_matrix(emb)
    t_emb, t = embed_like(emb, tpath, log)
    cid, cl = read_column(clusters_path, "cluster")
    clusters = np.empty(n, dtype=np.int64)
    clusters[cid] = cl
    t0 = time.perf_counter()
    weights = [float(w) for w in a.weights.split(",")]
    with threadpool_limits(1):  # as in skill_draw
        search = T.search_target(x, t, depth=T.list_depth(budget, min(weights), len(t), n))
    search_s = time.perf_counter() - t0
    sels = {}
    for seed in (0, 1, 2):
        sp = work / f"untargeted-{a.code_share:g}-s{seed}.parquet"
        cli(["select", clusters_path, "--out", sp, "--overwrite", "--fraction", str(a.real_fraction),
             "--seed", str(seed)], log)
        sels.setdefault("random", []).append(random_rows(n, budget, seed))
        sels.setdefault("untargeted", []).append(np.sort(read_column(sp, "cluster")[0]))
        tool = work / f"targeted-{a.code_share:g}-s{seed}.parquet"
        cli(["select", clusters_path, "--out", tool, "--overwrite", "--fraction", str(a.real_fraction),
             "--seed", str(seed), "--target", t_emb], log)
        sels.setdefault("tool", []).append(np.sort(read_column(tool, "cluster")[0]))
        sels.setdefault("topk-mean", []).append(topk_mean(x, t, budget))
        sels.setdefault("rds", []).append(rds_round_robin(x, t, budget))
        for w in weights:
            for hits in [int(h) for h in a.min_hits.split(",")]:
                for by in a.quota_by.split(","):
                    sels.setdefault(grid_name(w, hits, by), []).append(T.select_targeted(
                        clusters, search, budget=budget, target_weight=w, seed=seed, min_hits=hits, quota_by=by).rows)
    lines = [f"# Targeted selection on GSM8K + Code Alpaca ({n:,} rows, code {is_code.mean():.1%} = {is_code.sum()} rows; "
             f"budget {a.real_fraction:.0%} = {budget} rows; target {a.targets} held-out Code Alpaca rows)", "",
             f"Far target rows: {int(search.far.sum())}/{len(t)} (threshold {search.far_threshold:.3f}); "
             f"search {search_s:.2f} s. Warning: {T.far_message(search) or 'none'}.", "",
             "| contender | code share of the selection | code rows selected / all code rows |", "|---|---:|---:|"]
    payload = {"args": {k: v for k, v in vars(a).items() if k != "func"}, "rows": n, "code_rows": int(is_code.sum()),
               "budget": budget, "far": int(search.far.sum()), "share": {}}
    for name, by in sels.items():
        share = float(np.mean([is_code[r].mean() for r in by]))
        recall = float(np.mean([is_code[r].sum() / max(1, is_code.sum()) for r in by]))
        payload["share"][name] = share
        lines.append(f"| {name} | {share:.3f} | {recall:.3f} |")
    if a.train:
        test_path = work / "code-test.jsonl"
        test_path.write_text("".join(json.dumps({"instruction": _code_prompt(r), "output": r["output"]}) + "\n"
                                     for r in code_test))
        losses = real_train(data, test_path, {k: sels[k] for k in a.train.split(",")}, a, work / "runs")
        payload["code_loss"] = losses
        lines += ["", f"Trained ({a.train_epochs} epochs, the GSM8K loss benchmark's small recipe: {a.n_layer} layers x "
                  f"{a.d_model}, word vocabulary {a.max_vocab}), held-out response loss on {len(code_test)} other Code "
                  "Alpaca rows (mean ± std over selection seeds):", "",
                  "| contender | held-out code loss | runs |", "|---|---:|---:|"]
        for name, vals in losses.items():
            lines.append(f"| {name} | {np.mean(vals):.3f} ± {np.std(vals):.3f} | {len(vals)} |")
    lines += ["", "Commands run:", ""] + [f"    {c}" for c in dict.fromkeys(log)]
    write_results(a.stem or f"target_real_{a.code_share:g}", lines, payload, a.argv)


def _code_prompt(r: dict) -> str:
    return r["instruction"] + ("\n" + r["input"] if r.get("input") else "")


def _loss_job(job) -> float:
    pool = train_eval.load_rows(job["pool"])
    test = train_eval.load_rows(job["test"])
    keep = set(job["ids"])
    cfg = train_eval.TrainConfig(epochs=job["epochs"], seed=job["seed"], n_layer=job["n_layer"], d_model=job["d_model"],
                                 n_head=4, max_len=512, threads=1)
    res = train_eval.run([r for r in pool if r.id in keep], test, pool + test, cfg, max_vocab=job["max_vocab"],
                         generate=False)
    Path(job["cache"]).write_text(json.dumps(res))
    return float(res["test_loss"])


def real_train(pool: Path, test: Path, sels: dict, a, cache: Path) -> dict:
    """Held-out code response loss after training on each selection (seed i of a contender: its seed-i selection,
    training seed i); runs cached by rows and recipe."""
    import hashlib
    from concurrent.futures import ProcessPoolExecutor
    cache.mkdir(parents=True, exist_ok=True)
    jobs, keys = [], []
    for name, by_seed in sels.items():
        for seed, ids in enumerate(by_seed[:a.train_seeds]):
            ids = sorted(int(i) for i in ids)
            digest = hashlib.blake2b(json.dumps([ids, a.train_epochs, a.n_layer, a.d_model, a.max_vocab,
                                                 str(pool), str(test)]).encode(), digest_size=6).hexdigest()
            key = cache / f"s{seed}-{digest}.json"
            keys.append((name, key))
            if not key.exists():
                jobs.append({"pool": str(pool), "test": str(test), "ids": ids, "seed": seed, "epochs": a.train_epochs,
                             "n_layer": a.n_layer, "d_model": a.d_model, "max_vocab": a.max_vocab, "cache": str(key)})
    if jobs:
        with ProcessPoolExecutor(a.jobs) as ex:
            list(ex.map(_loss_job, jobs))
    out: dict[str, list[float]] = {}
    for name, key in keys:
        out.setdefault(name, []).append(float(json.loads(key.read_text())["test_loss"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("skill")
    s.add_argument("--draws", default="0-3")
    s.add_argument("--seeds", default="0,1,2")
    s.add_argument("--no-less", dest="less", action="store_false")
    s.add_argument("--train", default=None, help="comma list of contenders to train")
    s.add_argument("--epochs", type=int, default=80, help="the evidence harness's EPOCHS")
    s.add_argument("--jobs", type=int, default=1, help="training runs in parallel (1 thread each)")
    s.set_defaults(func=skill_main)
    r = sub.add_parser("real")
    r.add_argument("--gsm8k", default=str(DATA / "gsm8k" / "train.jsonl"), help="GSM8K train.jsonl")
    r.add_argument("--code-alpaca", default=str(DATA / "code_alpaca" / "code_alpaca_2k.json"),
                   help="Code Alpaca JSON list")
    r.add_argument("--code-share", type=float, default=0.07)
    r.add_argument("--real-fraction", type=float, default=0.10)
    r.add_argument("--targets", type=int, default=50)
    r.add_argument("--code-test", type=int, default=200, help="other Code Alpaca rows: the held-out code loss")
    r.add_argument("--train", default=None, help="comma list of contenders to train (held-out code loss)")
    r.add_argument("--train-seeds", type=int, default=3)
    r.add_argument("--train-epochs", type=int, default=2, help="as benchmarks/bench_gsm8k_loss.py")
    r.add_argument("--n-layer", type=int, default=2)
    r.add_argument("--d-model", type=int, default=64)
    r.add_argument("--max-vocab", type=int, default=2000)
    r.add_argument("--jobs", type=int, default=2)
    r.set_defaults(func=real_main)
    for p in (s, r):
        p.add_argument("--quota-by", default=T.QUOTA_BY[0],
                       help="targeting quota_by values (hits: the default; cluster: tool-wW-hH-cluster)")
        p.add_argument("--weights", default=",".join(f"{w:g}" for w in WEIGHTS), help="--target-weight values (tool-wW-hH)")
        p.add_argument("--min-hits", default=",".join(str(h) for h in MIN_HITS), help="min_hits values")
        p.add_argument("--work", default=str(ROOT / "out" / "target"))
        p.add_argument("--stem", default=None, help="results file name (default target_skill / target_real_SHARE)")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.func(a)


if __name__ == "__main__":
    main()
