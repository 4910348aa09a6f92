"""Trained accuracy on instances of the benchmark family: do the cheap selection measures predict it?

For each instance (benchmarks/skillfamily.py, dev or test range, in seed order), each response style and
each contender, select 31% (random, the oracle's water-filling by the true skill, a label-free mechanism of
bench_family.py: the tool's feature and clustering functions, the tool's quotas; or answers-perfect, a control:
`answers` with one kind per true skill), train the small GPT of
benchmarks/train_eval.py from scratch for the same number of epochs, and score exact match per skill on a
held-out test set of new prompts (worked style: the final answer). Also `full` (all rows, 1 seed) for the
instance's validity check: full >= 0.85 macro, oracle - random worst-skill >= 0.20 and above the seed spread.
A test prompt is a new wording of an operand its skill has in the training rows (--test-operands seen): the
word-level GPT cannot spell, pluralise or add numbers it never saw done, so with free operands (`new`) the
full data itself scored 0.54 and 0.84 on dev instances 1001 and 1000. --only-valid trains in stages: random and
oracle first, full only where their worst-skill gap passes, the label-free contenders only where the instance is
valid.

Per instance: macro and worst-skill accuracy, recovered share of the oracle's advantage over random, and
the cheap measures of the same selections; over all (instance, contender) pairs the Spearman rank correlation
of cheap against trained measures. Runs are cached (one JSON per run under --work) and resumable; --time-limit
stops starting new runs. Writes benchmarks/results/family_train_<split>.md/.json, which also stores every run's
results: --merge joins several such files (chunks of a range run apart, or a lost cache) into one table.

    python benchmarks/bench_family_train.py --split test --instances 8 --contenders random,oracle,full --jobs 2
    python benchmarks/bench_family_train.py --split test --instances 8 --only-valid --jobs 2 \
        --contenders random,oracle,full,default,gradient/paper,hidden/default
    python benchmarks/bench_family_train.py --split test --skip 8 --instances 3 ...   # instances 2008-2010
    python benchmarks/bench_family_train.py --split test --merge A.json,B.json --name family_train_test
    python benchmarks/bench_family_train.py --quick     # CI smoke: 1 instance, 2 epochs, tiny test set
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

import bench_family as BF
import common
import skillfamily
import train_eval
from cluster_curate.budget_sequence import Kinds
from cluster_curate.selection import water_fill_quotas

LABEL_FREE = ("default", "pair", "hkm2")


LEARN_STEPS = 1000  # answers-learn's proxy fit: bench_difficulty_signal's heldout_loss after this many steps
LEARN_CLIP = (0.5, 2.0)  # answers-learn: a kind's share moves by at most this factor


def learnability_kinds(kinds: Kinds, group_of_row, ids, data_dir: Path, n: int) -> Kinds:
    """answers-learn (round 30 prototype, lost on the test split in round 31; family_notes.md): each kind's weight
    times its held-out loss relative to the median kind's, clipped to LEARN_CLIP. Held-out loss: the `loss` column
    of the tool's embed after a proxy fit of LEARN_STEPS steps on 31% of the style's rows, over the rows outside
    that sample (bench_difficulty_signal.heldout_loss; n: the rows of its train.jsonl); a kind with none keeps its
    weight."""
    from bench_difficulty_signal import fit_args, heldout_loss
    loss = heldout_loss(data_dir, n, fit_args(steps=LEARN_STEPS))[ids]
    kind_of_row = np.asarray(kinds.of_group)[group_of_row]
    n_kinds = len(kinds.weight)
    held = ~np.isnan(loss)
    count = np.bincount(kind_of_row[held], minlength=n_kinds)
    mean = np.bincount(kind_of_row[held], weights=loss[held], minlength=n_kinds) / np.maximum(count, 1)
    scale = np.where(count > 0, np.clip(mean / np.median(mean[count > 0]), *LEARN_CLIP), 1.0)
    return Kinds(kinds.of_group, np.asarray(kinds.weight, dtype=np.float64) * scale)


def selection(name: str, ids, x, skills, labels, seed: int, budget: int, inst_dir: Path | None = None,
              data_dir: Path | None = None) -> list[int]:
    """The rows a contender selects: full, random, oracle, a mechanism of bench_family on the tool's default
    feature, or FEATURE/MECHANISM with FEATURE one of bench_family.TOOL_FEATURES (e.g. tool-tf/default; MECHANISM
    `paper`: the paper's recipe, e.g. gradient/paper). A mechanism that reads the responses (`answers`) reads
    those of data_dir's train.jsonl: the style trained on."""
    if name == "full":
        return ids.tolist()
    if name == "random":
        return sorted(np.random.default_rng(1000 + seed).choice(ids, budget, replace=False).tolist())
    if name == "oracle":
        rng = np.random.default_rng(2000 + seed)
        groups = [ids[skills == s] for s in range(len(labels["skills"]))]
        quotas = water_fill_quotas(np.array([len(g) for g in groups]), budget)
        return sorted(int(i) for g, q in zip(groups, quotas) for i in rng.choice(g, q, replace=False))
    feature, _, mechanism = name.rpartition("/")
    if mechanism == "paper":  # FEATURE/paper: the paper's recipe on that feature, through the tool's commands
        return BF.paper_recipe_ids(BF.tool_feature_file(inst_dir, BF.TOOL_FEATURES[feature]), seed, budget,
                                   []).tolist()
    z = BF.tool_feature(inst_dir, BF.TOOL_FEATURES[feature]) if feature else None
    # answers-perfect, a control (round 28): `answers` with perfect joins, one kind per TRUE skill;
    # answers-learn, a prototype (round 30; lost on test, round 31): `answers` with each kind's share scaled by its
    # held-out proxy loss
    base = "answers" if mechanism in ("answers-perfect", "answers-learn") else mechanism
    texts = None
    if base in BF.TEXT_MECHANISMS:  # the rows' prompts and responses too: those of the style trained on
        rows = [json.loads(line) for line in ((data_dir or inst_dir) / "train.jsonl").read_text().splitlines()]
        texts = BF.instance_texts(rows, ids)
    clusters, groups = BF.call_mechanism(base, x, seed, labels, z, texts)
    if mechanism == "answers-perfect":
        groups = (groups[0], Kinds(*common.kinds_by_skill(groups[0][clusters], skills, int(groups[0].max()) + 1)))
    if mechanism == "answers-learn":
        groups = (groups[0], learnability_kinds(groups[1], groups[0][clusters], ids, data_dir or inst_dir, len(rows)))
    return sorted(ids[BF.select(clusters, ids, budget, seed, groups)].tolist())


def run_digest(ids: list[int], epochs: int, seed: int, recipe: dict) -> str:
    """A training run's cache key: its rows, epochs, seed and the recipe beyond train_eval's defaults (none: the
    key of rounds 10-12, so that their runs are found again)."""
    return hashlib.blake2b(json.dumps([ids, epochs, seed] + ([recipe] if recipe else [])).encode(),
                           digest_size=8).hexdigest()


def train_one(inst_dir: str, ids: list[int], seed: int, epochs: int, score: str, device: str = "cpu",
              recipe: dict | None = None) -> dict:
    rows = train_eval.load_rows(Path(inst_dir) / "train.jsonl", "skill")
    test = train_eval.load_rows(Path(inst_dir) / "test.jsonl", "skill")
    keep = set(ids)
    train = [r for r in rows if r.id in keep]
    cfg = train_eval.TrainConfig(epochs=epochs, seed=seed, device=device, **(recipe or {}))
    res = train_eval.run(train, test, rows + test, cfg, score=score)
    keep = ("macro", "worst", "per_skill", "final_train_loss", "train_seconds", "rows", "device")
    return {k: res[k] for k in keep}


REFERENCE = ("random", "oracle", "full")  # what an instance's validity rests on
# The family's peak learning rate. At train_eval's 3e-3, 31 of 57 runs on test instances 2004-2012 ended with a
# last-epoch loss above 1e-3 (up to 7e-2), and within a contender the higher that loss, the lower the accuracy
# (Spearman -0.61); at 1e-3 no run has (benchmarks/results/family_notes.md, round 13).
LR = 1e-3


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--split", choices=sorted(skillfamily.SPLITS), default="dev")
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--skip", type=int, default=0, help="instances at the start of the range left out (run before)")
    ap.add_argument("--variants", default="short,worked")
    ap.add_argument("--contenders", default="random,oracle,full," + ",".join(LABEL_FREE))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=80)
    ap.add_argument("--lr", type=float, default=LR, help="peak learning rate (3e-3: the runs of rounds 10-12)")
    ap.add_argument("--test-per-skill", type=int, default=50)
    ap.add_argument("--test-operands", choices=skillfamily.TEST_OPERANDS, default="seen",
                    help="seen: a test prompt's operand is one its skill has in the training rows")
    ap.add_argument("--jobs", type=int, default=1, help="training runs in parallel (1 thread each on a CPU)")
    ap.add_argument("--train-device", default="cpu", help="cpu, or cuda (the same float32 recipe)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds after which no new run starts")
    ap.add_argument("--only-valid", action="store_true",
                    help="train in stages: random and oracle; full where their worst-skill gap passes; the "
                         "label-free contenders where the instance is valid")
    ap.add_argument("--quick", action="store_true", help="CI smoke: 1 instance, short, 2 epochs, 5 test rows/skill")
    ap.add_argument("--work", default=str(common.ROOT / "out" / "family-train"))
    ap.add_argument("--results", default=None, help="where the tables go (default benchmarks/results)")
    ap.add_argument("--name", default=None, help="results file stem (default family_train_<split>)")
    ap.add_argument("--merge", default=None, metavar="A.json,B.json",
                    help="train nothing: one table from the runs stored in these results files")
    a = ap.parse_args(argv)
    if a.quick:
        a.instances, a.variants, a.seeds, a.epochs, a.test_per_skill = 1, "short", "0", 2, 5
        a.contenders = "random,oracle,default"
    if a.merge:
        return report(a, merged_runs(a.merge.split(","), recipe_of(a)), argv)
    work = Path(a.work)
    seeds = [int(s) for s in a.seeds.split(",")]
    names = a.contenders.split(",")
    recipe = {} if a.lr == train_eval.TrainConfig.lr else {"lr": a.lr}  # beyond train_eval's defaults
    log: list[str] = []
    instances = {}  # (instance seed, variant) -> what its runs need
    for inst_seed in skillfamily.SPLITS[a.split][a.skip: a.skip + a.instances]:
        emb_dir = work / f"i{inst_seed}"
        ids, x, skills, labels = BF.prepare(inst_seed, emb_dir.parent, log)  # prompts: same in both styles
        budget = int(round(BF.FRACTION * len(ids)))
        oracle = water_fill_quotas(np.bincount(skills, minlength=len(labels["skills"])), budget)
        for variant in a.variants.split(","):
            key = {"seed": inst_seed, "variant": variant, "test_per_skill": a.test_per_skill,
                   "test_operands": a.test_operands}
            vdir = work / f"i{inst_seed}-{variant}{'' if a.test_operands == 'new' else '-' + a.test_operands}"
            if not (vdir / "key.json").exists() or json.loads((vdir / "key.json").read_text()) != key:
                skillfamily.write_instance(vdir, inst_seed, variant, a.test_per_skill, a.test_operands)
                (vdir / "key.json").write_text(json.dumps(key))
            instances[(inst_seed, variant)] = (ids, x, skills, labels, budget, oracle, emb_dir, vdir)
    # --only-valid trains in stages, each on the instances the one before left possible: random and oracle;
    # full where their worst-skill gap passes; the label-free contenders where the instance is valid
    stages = ([[n for n in names if n in ("random", "oracle")], [n for n in names if n == "full"],
               [n for n in names if n not in REFERENCE]] if a.only_valid else [names])
    plan = []  # (instance seed, variant, contender, seed, cache path, cheap metrics)
    t0 = time.perf_counter()
    for stage, stage_names in enumerate(stages):
        if not stage_names:
            continue
        jobs = []
        for (inst_seed, variant), (ids, x, skills, labels, budget, oracle, emb_dir, vdir) in instances.items():
            if stage:
                state = skillfamily.validity(cached_runs(plan, inst_seed, variant))
                if state == "no" or (stage == 2 and state != "yes"):
                    print(f"instance {inst_seed} {variant}: validity {state}, not trained on "
                          f"{', '.join(stage_names)}", flush=True)
                    continue
            for name in stage_names:
                for seed in ([0] if name == "full" else seeds):
                    sel = selection(name, ids, x, skills, labels, seed, budget, emb_dir, vdir)
                    counts = np.bincount(skills[np.searchsorted(ids, sel)], minlength=len(oracle))
                    cheap = BF.cheap_metrics(counts, oracle, labels["twins"])
                    path = vdir / "runs" / f"{name.replace('/', '+')}-s{seed}-e{a.epochs}-" \
                                          f"{run_digest(sel, a.epochs, seed, recipe)}.json"
                    plan.append((inst_seed, variant, name, seed, path, cheap))
                    if not path.exists():
                        order = (seed, name == "full", inst_seed, variant, names.index(name))
                        jobs.append((order, path, (str(vdir), sel, seed, a.epochs, "final" if variant == "worked"
                                                   else "exact", a.train_device, recipe)))
        # seed by seed, the full-data runs (the longest) after the 31% runs: a run stopped by --time-limit leaves
        # whole comparisons on as many instances as it reached
        jobs = [j[1:] for j in sorted(jobs, key=lambda j: j[0])]
        print(f"{len(jobs)} training runs to do, {sum(p[4].exists() for p in plan)} cached", flush=True)
        run_jobs(jobs, a.jobs, None if a.time_limit is None else a.time_limit - (time.perf_counter() - t0))
    report(a, done_runs(plan), argv)


def recipe_of(a) -> dict:
    """What makes runs comparable across results files: the training recipe and the test set."""
    return {"epochs": a.epochs, "lr": a.lr, "test_per_skill": a.test_per_skill, "test_operands": a.test_operands,
            "seeds": a.seeds}


def merged_runs(paths: list[str], recipe: dict) -> dict:
    """The runs stored in several results files, as one runs dict. A file from before the recipe was stored is
    taken at its word; one with another recipe, or two files with different runs for one key, is an error."""
    runs: dict = {}
    for path in paths:
        if not Path(path).is_file():
            raise SystemExit(f"{path}: no such results file")
        data = json.loads(Path(path).read_text())
        if data.get("recipe", recipe) != recipe:
            raise SystemExit(f"{path}: recipe {data['recipe']} is not this run's {recipe}")
        for key, got in data["runs"].items():
            inst, variant, name = key.split("-", 2)
            k = (int(inst), variant, name)
            if runs.get(k, got) != got:
                raise SystemExit(f"{path}: runs of {key} differ from an earlier file's")
            runs[k] = got
    return runs


def done_runs(plan) -> dict:
    """(instance seed, variant, contender) -> the results of its runs in plan that are done, with the cheap
    metrics of their selections (every contender of plan is a key, with no runs done an empty list)."""
    runs: dict = {}
    for inst, variant, name, seed, path, cheap in plan:
        runs.setdefault((inst, variant, name), [])
        if path.exists():
            runs[(inst, variant, name)].append({**json.loads(path.read_text()),
                                                **{f"cheap_{k}": v for k, v in cheap.items()}})
    return runs


def cached_runs(plan, inst_seed, variant) -> dict:
    """contender -> the results of its runs in plan that are done, for one (instance, variant)."""
    return {k[2]: v for k, v in done_runs([p for p in plan if p[:2] == (inst_seed, variant)]).items() if v}


def run_jobs(jobs, n_jobs: int, time_limit: float | None):
    """Train (cache path, train_one args) jobs, n_jobs at a time; none starts after time_limit seconds."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=n_jobs) as ex:
        pending = {}
        it = iter(jobs)
        while True:
            while len(pending) < n_jobs and (time_limit is None or time.perf_counter() - t0 < time_limit):
                nxt = next(it, None)
                if nxt is None:
                    break
                pending[ex.submit(train_one, *nxt[1])] = nxt[0]
            if not pending:
                break
            done = next(as_completed(pending))
            path = pending.pop(done)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(done.result()))
            print(f"{path.parent.parent.name} {path.stem}: macro {done.result()['macro']:.3f}", flush=True)


def report(a, runs: dict, argv):
    """The tables from runs: (instance seed, variant, contender) -> the done runs' results (contenders in the
    order they first appear in)."""
    from scipy.stats import spearmanr
    lines = [f"# Benchmark family, {a.split} split: trained accuracy ({a.epochs} epochs, peak lr {a.lr:g})", "",
             "Per instance and response style: macro / worst-skill exact match (mean over seeds), recovered share "
             "of the oracle's advantage over random (macro / worst), validity (full ≥ 0.85 macro; oracle − random "
             "worst ≥ 0.20 and above the seed spread). Test prompts: new wordings, with "
             + ("operands their skill has in the training rows." if a.test_operands == "seen" else "any operand."), "",
             "| instance | style | valid | contender | seeds | macro | worst | recovered macro / worst | coverage "
             "(cheap) | worst ratio (cheap) |", "|---|---|---|---|---|---|---|---|---|---|"]
    table, pairs, validities, gap_passed = [], [], {}, {}
    for inst, variant in sorted({k[:2] for k in runs}):
        got = {n: runs.get((inst, variant, n), []) for n in dict.fromkeys(k[2] for k in runs)}
        mean = {n: (np.mean([r["macro"] for r in v]), np.mean([r["worst"] for r in v])) for n, v in got.items() if v}
        valid = skillfamily.validity(got)
        validities[(inst, variant)] = valid
        gap_passed[(inst, variant)] = skillfamily.worst_gap_passed(got)
        for n, v in got.items():
            if not v:
                continue
            rec = "–"
            if n not in ("random", "oracle", "full") and "random" in mean and "oracle" in mean:
                adv = [mean["oracle"][i] - mean["random"][i] for i in (0, 1)]
                r_m, r_w = ((mean[n][i] - mean["random"][i]) / adv[i] if adv[i] >= common.LEAST_ADVANTAGE
                            else float("nan")
                            for i in (0, 1))
                rec = " / ".join("–" if r != r else f"{r:.0%}" for r in (r_m, r_w))
                table.append({"instance": inst, "variant": variant, "contender": n, "valid": valid,
                              "recovered_macro": r_m, "recovered_worst": r_w})
            cov = np.mean([r["cheap_coverage"] for r in v])
            wr = np.mean([r["cheap_worst"] for r in v])
            if n != "full":
                pairs.append((valid, cov, wr, mean[n][0], mean[n][1]))
            lines.append(f"| {inst} | {variant} | {valid} | {n} | {len(v)} | {mean[n][0]:.3f} | {mean[n][1]:.3f} | "
                         f"{rec} | {cov:.1%} | {wr:.2f} |")
    n_valid = sum(v == "yes" for v in validities.values())
    lines += ["", f"Valid: {n_valid} of {len(validities)} (instance, style) pairs "
              f"({', '.join(f'{i} {v}: {ok}' for (i, v), ok in sorted(validities.items()))})."]
    summary = []
    for n in dict.fromkeys(r["contender"] for r in table):
        # none valid yet: those whose worst-skill gap passed, their full-data run to come, indicatively; never one
        # that failed the check (on the gap or on full data), or whose gap is still to be judged
        rec = [r for r in table if r["contender"] == n and (
            r["valid"] == "yes" if n_valid else r["valid"] == "?" and gap_passed[(r["instance"], r["variant"])])]
        m = np.array([r["recovered_macro"] for r in rec], dtype=float)
        w = np.array([r["recovered_worst"] for r in rec], dtype=float)
        if len(m):
            summary.append({"contender": n, "instances": len(m), "median_macro": float(np.nanmedian(m)),
                            "worst_macro": float(np.nanmin(m)), "below_half": int(np.sum(m < 0.5)),
                            "median_worst": float(np.nanmedian(w)) if np.isfinite(w).any() else float("nan")})
    if summary:
        lines += ["", "Recovered share of the oracle's advantage over random, over the "
                  + ("valid instances:" if n_valid else "instances still to be decided, none valid yet (so: indicative "
                                                     "only):"), "",
                  "| contender | instances | macro: median | macro: worst instance | macro below 50% | "
                  "worst skill: median |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['contender']} | {r['instances']} | {r['median_macro']:.0%} | {r['worst_macro']:.0%} | "
                  f"{r['below_half']} | " + ("–" if r["median_worst"] != r["median_worst"] else
                                             f"{r['median_worst']:.0%}") + " |" for r in summary]
    # the rank correlation of cheap against trained measures, over the valid instances' selections and over all
    corr = {}
    for scope, use in (("valid", [p[1:] for p in pairs if p[0] == "yes"]), ("all", [p[1:] for p in pairs])):
        if len(use) < 3:
            continue
        p = np.array(use)
        corr[scope] = {"coverage~macro": float(spearmanr(p[:, 0], p[:, 2])[0]),
                       "worst_ratio~worst": float(spearmanr(p[:, 1], p[:, 3])[0]),
                       "coverage~worst": float(spearmanr(p[:, 0], p[:, 3])[0]), "pairs": len(use)}
        lines += ["", f"Spearman rank correlation over {len(use)} (instance, style, contender) selections"
                  f"{' of valid instances' if scope == 'valid' else ''}: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in corr[scope].items() if k != "pairs") + "."]
    common.write_results(a.name or f"family_train_{a.split}{'_quick' if a.quick else ''}", lines,
                         {"recipe": recipe_of(a), "recovered": table, "summary": summary, "spearman": corr,
                          "validity": {f"{i}-{v}": ok for (i, v), ok in validities.items()},
                          "runs": {f"{k[0]}-{k[1]}-{k[2]}": v for k, v in runs.items() if v}}, argv, a.results)


if __name__ == "__main__":
    main()
