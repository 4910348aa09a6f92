"""The evidence harness: does the tool's ~31% train as well as the full data, in a third of the time?

For each variant of the skill-mixture benchmark (benchmarks/skillmix.py) and each contender, select ~31% of
the rows (a label-free contender goes through the tool's own commands: `cluster-curate embed / cluster /
select / shard`), train the same small GPT for the same number of EPOCHS on the selection (so a 31% subset
costs 31% of the steps), and score greedy exact match per skill on the held-out test set. Several seeds.

First the benchmark's own validity check (full data >= 0.85 macro; the oracle beats random on worst-skill
accuracy by >= 20 points, more than the seed spread; 3 seeds), then per contender: per-skill, macro and
worst-skill accuracy (mean ± std over seeds), the fraction of the oracle's advantage over random that it
recovers (macro and worst), training and curation time, how the selection covers the skills against the
oracle's counts, and the NMI between its clusters and the skills. Writes benchmarks/results/quality.md,
quality.json and PNG plots.

    python benchmarks/evidence.py                 # full mode: every contender, 2 variants, 3 seeds, 80 epochs
    python benchmarks/evidence.py --quick         # CI smoke test, <= 5 minutes
    python benchmarks/evidence.py --contenders full,random,oracle --variants short   # validity only
    python benchmarks/evidence.py --train-device cuda --jobs 12   # the training runs on a GPU
    python benchmarks/evidence.py --seeds 0,1,2 --train-seed-offset 100   # same selections, other inits/orders

Selections and runs are cached under --work (runs per device: one JSON per variant/contender/seed); --fresh
ignores the cache, --cached-only reports what is there.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import skillmix
import train_eval
from cluster_curate.selection import water_fill_quotas
from common import RESULTS, ROOT, cli, kinds_by_skill, parser, tool_cmd, tool_defaults, write_results

FRACTION = 0.31
SMOLLM2 = ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"  # `make smollm2`
# 80, not the 40 first proposed: at 40 epochs several 31% runs stopped with the training loss still falling
# (0.04-0.16 against < 0.001 once converged), so the seed decided the result more than the selection did.
EPOCHS = 80
CONVERGED_LOSS = 0.01  # final training loss above this: the run had not finished learning its rows


# ============================================================================================ the tool's CLI

def training_digest(sel: Selection, lr: float = train_eval.TrainConfig.lr, train_seed_offset: int = 0) -> str:
    """A run is decided by the rows in the order the trainer reads them (a shards directory: shard order),
    their weights when used, the recipe (its peak lr included) and the training seed (the file name's selection
    seed plus `train_seed_offset`); not by the contender's name or where its files are."""
    if sel.train_path:
        order = [[i, w] if sel.use_weights else i for i, w in train_eval.shard_order(sel.train_path)]
    else:
        order = sel.ids
    recipe = sorted(vars(train_eval.TrainConfig(lr=lr)).items())
    # offset 0 hashes as before the option existed, so the runs cached then still count
    key = [order, sel.use_weights, recipe] + ([train_seed_offset] if train_seed_offset else [])
    return hashlib.blake2b(json.dumps(key, default=str).encode(),
                           digest_size=8).hexdigest()


def tool_subcommands() -> set[str]:
    try:
        out = subprocess.run(tool_cmd() + ["--help"], capture_output=True, text=True, timeout=120).stdout
    except Exception:  # noqa: BLE001
        return set()
    names, in_cmds = set(), False
    for line in out.splitlines():
        if line.strip().startswith("Commands:"):
            in_cmds = True
            continue
        if in_cmds and line.startswith("  ") and line.strip():
            names.add(line.split()[0])
    return names


# ============================================================================================ selections

@dataclass
class Selection:
    ids: list[int]
    train_path: str | None = None  # a shards directory to train on (else the dataset restricted to ids)
    clusters: list[int] | None = None  # cluster of every row of the dataset (for NMI), by id
    curation_seconds: float = 0.0
    commands: list[str] = field(default_factory=list)
    use_weights: bool = False
    note: str = ""


def select_random(n: int, budget: int, seed: int) -> Selection:
    rng = np.random.default_rng(1000 + seed)
    return Selection(sorted(rng.choice(n, budget, replace=False).tolist()), note="uniform sample")


def select_oracle(skill: np.ndarray, budget: int, seed: int) -> Selection:
    """Water-filling quotas by the true skill labels, random rows inside a skill."""
    rng = np.random.default_rng(2000 + seed)
    groups = [np.flatnonzero(skill == s) for s in range(skill.max() + 1)]
    quotas = water_fill_quotas(np.array([len(g) for g in groups]), budget)
    ids = [int(i) for g, q in zip(groups, quotas) for i in rng.choice(g, q, replace=False)]
    return Selection(sorted(ids), clusters=skill.tolist(), note="water-filling by true skill")


def select_with_counts(skill: np.ndarray, names: list[str], like: Selection, seed: int) -> Selection:
    """Random rows inside each skill, as many of each skill as `like` holds: what its counts alone are worth."""
    rng = np.random.default_rng(1000 + seed)
    counts = np.bincount(skill[like.ids], minlength=len(names))
    ids = [int(i) for s in sorted(range(len(names)), key=names.__getitem__)  # skills drawn in name order
           for i in rng.choice(np.flatnonzero(skill == s), counts[s], replace=False)]
    return Selection(sorted(ids), clusters=skill.tolist(), note="random rows inside each skill, the default's counts")


def set_kinds_by_skill(clusters: Path, skill: np.ndarray) -> None:
    """Rewrite a clustering's kinds in place with perfect joins (common.kinds_by_skill)."""
    import pyarrow.parquet as pq
    table = pq.read_table(clusters)
    meta = json.loads(table.schema.metadata[b"cluster_curate"])
    groups = np.asarray(meta["params"]["groups"])
    group_of_row = groups[table.column("cluster").to_numpy()]
    kind, weights = kinds_by_skill(group_of_row, skill[table.column("id").to_numpy()], int(groups.max()) + 1)
    meta["params"].update(kind_of_group=kind.tolist(), kind_weights=weights.tolist())
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata,
                                                  b"cluster_curate": json.dumps(meta).encode()}), clusters)


# ============================================================================================ contenders

@dataclass
class Contender:
    name: str
    kind: str  # full | random | oracle | tool | features (harness-computed features fed to the tool's cluster)
    #            | counts (random rows inside each skill, the default's counts)
    desc: str
    embed: list[str] | None = None  # args of `embed DATA --out E` (kind tool); equal args share one artifact
    features: str | None = None  # harness feature name (kind features)
    cluster: list[str] = field(default_factory=list)  # args of `cluster E --out C`; {seed}
    select: list[str] = field(default_factory=list)  # args of `select C --out S`; {seed} {budget} {ratio}
    shard: list[str] | None = None  # args of `shard S --data DATA --out D`; {seed}
    use_weights: bool = False
    needs: tuple = ()  # subcommands that must exist
    kinds_from_labels: bool = False  # a label-using control: the clusters' kinds rewritten from the true skills

    def digest(self, defaults: dict) -> str:
        """Names a cached selection by what makes it: its arguments and the tool's defaults (not the
        description), so a changed contender, or a changed default, re-curates."""
        recipe = [self.kind, self.embed, self.features, self.cluster, self.select, self.shard, self.use_weights]
        if self.kind in ("tool", "features", "counts"):
            recipe.append(defaults)
        if self.kinds_from_labels:
            recipe.append("kinds from labels")
        return hashlib.blake2b(json.dumps(recipe, default=str).encode(), digest_size=6).hexdigest()


VALIDITY = ("full", "random", "oracle")
# contenders measured before `cluster --split-mixed` was the default keep it off, so their runs stay valid
NO_SPLIT = ["--no-split-mixed"]


def contenders() -> dict[str, Contender]:
    seed = ["--seed", "{seed}"]
    budget = ["--budget", "{budget}", *seed]
    random_order = [*budget, "--within", "random"]  # the in-cluster order of every default until round 32
    shard2 = ["--num-shards", "2", *seed]
    tool = ("embed", "cluster", "select", "shard")

    def default_but(name, desc, embed=(), cluster=(), select=(), shard=(), use_weights=False):
        """The tool's defaults (`embed`, `cluster`, `select --budget`, `shard --num-shards 2`) with one change."""
        return Contender(name, "tool", desc, embed=list(embed), cluster=[*cluster, *seed],
                         select=[*budget, *select], shard=[*shard2, *shard], use_weights=use_weights, needs=tool)

    def previous_but(name, desc, embed=(), **changes):
        """One change from an earlier default (until 2026-11-30: --text-weighting tfidf, --groups auto with the
        row cut, no split of mixed clusters), as these contenders were measured; pinned so that their runs stay
        comparable with one another."""
        text = "--features" not in embed or "text" in embed[embed.index("--features") + 1]
        note = ("one change from an earlier default: tfidf, row cut, no split" if text else
                "one change from an earlier default: no split; the text weighting does not apply")
        return default_but(name, f"{desc} [{note}]",
                           embed=[*embed, *(["--text-weighting", "tfidf"] if text else [])],
                           cluster=[*changes.pop("cluster", ()), "--group-cut", "row", *NO_SPLIT],
                           select=changes.pop("select", ["--within", "random"]), **changes)

    def control(name, features, desc, cluster=()):
        return Contender(name, "features", desc, features=features, cluster=[*cluster, *NO_SPLIT, *seed],
                         select=random_order, needs=tool[1:3])

    c = [
        Contender("full", "full", "all rows"),
        Contender("random", "random", "uniform random 31%"),
        Contender("oracle", "oracle", "water-filling quotas by the TRUE skill labels (not label-free)"),
        default_but("default", "the tool's defaults: embed (text, slot weighting), cluster (k auto, mixed clusters "
                    "split, --groups auto, --group-cut row, --kinds auto), select --budget (--within auto: the "
                    "answers order on one-word answers, random on worked solutions), "
                    "shard (token-balanced allocation); trained without the shards' weights"),
        Contender("paper", "tool", "the paper's recipe: gradient (proxy), K = 4 ranks, cap 1.5, per-cluster ratio, "
                  "far, allocation paper, weights", embed=["--features", "gradient"],
                  cluster=["--k", "4", "--max-size-factor", "1.5", "--groups", "none", *seed],
                  select=["--per-cluster-ratio", "{ratio}", "--within", "far", *seed],
                  shard=["--num-shards", "4", "--allocation", "paper", *seed], use_weights=True, needs=tool),
        Contender("text-k48", "tool", "the first probe: prompt TF-IDF, k = 48, flat quotas, random order",
                  embed=["--features", "text", "--text-weighting", "tfidf"],
                  cluster=["--k", "48", "--groups", "none", *seed], select=random_order, needs=tool[:3]),
        default_but("no-split", "default but cluster --no-split-mixed: the default until 2026-11-30 (round 5)",
                    cluster=NO_SPLIT),
        default_but("tfidf", "no-split but embed --text-weighting tfidf: the default until 2026-11-30 (round 4)",
                    embed=["--text-weighting", "tfidf"], cluster=NO_SPLIT),
        default_but("pair", "no-split but cluster --group-cut pair", cluster=["--group-cut", "pair", *NO_SPLIT]),
        default_but("flat-tf", "no-split but cluster --groups none: flat quotas over the clusters",
                    cluster=["--groups", "none", *NO_SPLIT]),
        default_but("tfidf+pair", "probe: no-split but embed --text-weighting tfidf and cluster --group-cut pair",
                    embed=["--text-weighting", "tfidf"], cluster=["--group-cut", "pair", *NO_SPLIT]),
        # the knobs of the one-at-a-time grid again, from the current default (their `previous_but` rows below
        # were measured from the previous one)
        default_but("far-tf", "default but select --within far (the paper's order)", select=["--within", "far"]),
        default_but("near-tf", "default but select --within near", select=["--within", "near"]),
        default_but("weights-tf", "default, trained with the shards' per-row weights (n_c/n)/(s_c/s)",
                    use_weights=True),
        default_but("semantic", "default but embed --features semantic (the bundled all-MiniLM-L6-v2, prompt)",
                    embed=["--features", "semantic"]),
        default_but("semantic-both", "default but embed --features semantic --text-field both (prompt + response)",
                    embed=["--features", "semantic", "--text-field", "both"]),
        default_but("text+semantic", "default but embed --features text,semantic (two L2-normalised blocks)",
                    embed=["--features", "text,semantic"]),
        default_but("kinds-none", "default but cluster --kinds none: the default until round 20 (2026-12-03)",
                    cluster=["--kinds", "none"]),
        default_but("within-answers", "default but select --within answers: one row of each repeated answer of a "
                    "kind before a second, then each in proportion (round 24, a candidate)",
                    select=["--within", "answers"]),
        default_but("within-random", "default but select --within random: the default until round 32",
                    select=["--within", "random"]),
        # label-using controls (round 28): how much of the default's figure its counts make, and what perfect
        # joins of its groups into kinds would give; trained on the selected rows in id order (no shards)
        Contender("default-counts", "counts", "control: random rows inside each skill, as many of each skill as "
                  "the default's selection of the same seed holds (uses the TRUE skill labels)", needs=tool),
        Contender("perfect-joins", "tool", "control: the default's clusters with each group's kind set to its rows' "
                  "most common skill (perfect joins; uses the TRUE skill labels), select --budget --within random",
                  embed=[], cluster=list(seed), select=random_order, needs=tool[:3], kinds_from_labels=True),
        default_but("tf", "default but embed --text-weighting tf: the default until round 10 (2026-12-02)",
                    embed=["--text-weighting", "tf"]),
        default_but("k-ranks-tf", "default but cluster --k 2 (the number of ranks, as the paper)",
                    cluster=["--k", "2"]),
        previous_but("flat", "flat quotas, cluster --groups none (the default until 2026-11-29)",
                     cluster=["--groups", "none"]),
        previous_but("gradient", "--features gradient (the paper's feature, proxy model)",
                     embed=["--features", "gradient"]),
        previous_but("lora-gradient", "--features lora-gradient (proxy)", embed=["--features", "lora-gradient"]),
        previous_but("loss-trajectory", "--features loss-trajectory (proxy checkpoints)",
                     embed=["--features", "loss-trajectory"]),
        previous_but("hidden", "--features hidden (mean over all tokens, proxy)", embed=["--features", "hidden"]),
        previous_but("hidden-response", "--features hidden --pool response (proxy)",
                     embed=["--features", "hidden", "--pool", "response"]),
        previous_but("text+gradient", "--features text,gradient (two L2-normalised blocks)",
                     embed=["--features", "text,gradient"]),
        previous_but("text-both", "--text-field both (TF-IDF over the prompt and the response)",
                     embed=["--text-field", "both"]),
        previous_but("gradient-nowarmup", "--features gradient from a proxy warmed up for 1 step (about its random "
                     "initial weights)", embed=["--features", "gradient", "--proxy-steps", "1"]),
        previous_but("gradient-smollm2", "--features gradient from the pretrained SmolLM2-135M (GGUF)",
                     embed=["--features", "gradient", "--model", str(SMOLLM2)]),
        previous_but("k-ranks", "k = 2 (the number of ranks, as the paper)", cluster=["--k", "2"]),
        previous_but("far", "--within far (the paper's order)", select=["--within", "far"]),
        previous_but("near", "--within near", select=["--within", "near"]),
        previous_but("weights", "trained with the shards' per-row weights (n_c/n)/(s_c/s)", use_weights=True),
        control("resp-tfidf", "response-tfidf", "control: TF-IDF of the RESPONSE (numbers masked), k auto, random "
                "order"),
        control("shape", "shape", "control: answer-shape stats (length, digits, letters, upper, spaces, symbols), "
                "k auto, random order"),
        control("text+shape", "text+shape", "probe: the previous default's prompt TF-IDF and the answer-shape "
                "stats as two L2-normalised blocks, cluster --groups auto (row cut)",
                cluster=["--groups", "auto", "--group-cut", "row"]),
    ]
    return {x.name: x for x in c}


# ============================================================================================ harness features

def harness_features(name: str, rows: list[train_eval.Row]) -> np.ndarray:
    import re
    if name == "response-tfidf":
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer
        texts = [re.sub(r"\d+", " 0 ", r.response) for r in rows]
        x = TfidfVectorizer(token_pattern=r"[^\s]+", ngram_range=(1, 2), lowercase=False).fit_transform(texts)
        dim = min(64, x.shape[1] - 1)
        return TruncatedSVD(dim, random_state=0).fit_transform(x).astype(np.float32)
    if name == "shape":
        feats = []
        for r in rows:
            s = r.response
            feats.append([len(s), len(s.split()), sum(ch.isdigit() for ch in s), sum(ch.isalpha() for ch in s),
                          sum(ch.isupper() for ch in s), s.count(" "), sum(not ch.isalnum() and not ch.isspace()
                                                                           for ch in s)])
        x = np.asarray(feats, dtype=np.float32)
        return (x - x.mean(0)) / (x.std(0) + 1e-6)
    if name == "text+shape":
        from cluster_curate.features.embed import combine_blocks
        from cluster_curate.features.text import TextFeaturizer
        prompts = [r.prompt for r in rows]
        return combine_blocks([TextFeaturizer(weighting="tfidf").fit(prompts).transform(prompts),
                               harness_features("shape", rows)])
    raise ValueError(name)


def write_embeddings(x: np.ndarray, rows: list[train_eval.Row], data: Path, out: Path, name: str) -> None:
    """An embeddings artifact made by the harness (same contract as `embed`'s), so `cluster` can take it."""
    import pyarrow as pa

    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.writer import write_artifact
    from cluster_curate.io.datasets import ReadOptions, open_dataset
    ds = open_dataset(str(data), ReadOptions())
    for _ in ds.iter_batches():
        pass
    record = ds.record()
    ids = np.array([r.id for r in rows], dtype=np.int64)
    flat = pa.array(x.astype(np.float32).ravel())
    table = pa.table({"id": ids, "embedding": pa.FixedSizeListArray.from_arrays(flat, x.shape[1]),
                      "n_tokens": np.array([len(train_eval.words(r.prompt + " " + r.response)) for r in rows],
                                           dtype=np.int64),
                      "n_response_tokens": np.array([len(train_eval.words(r.response)) for r in rows], dtype=np.int64),
                      "loss": np.zeros(len(rows), dtype=np.float32)})
    meta = make_meta("embeddings", {"features": f"harness:{name}", "dim": int(x.shape[1])}, {"data": record}, record)
    write_artifact(table, out, meta, overwrite=True)


# ============================================================================================ curation

def read_ids(path: Path, column: str = "cluster") -> tuple[list[int], list[int]]:
    from cluster_curate.io.artifacts import read_artifact
    table, _ = read_artifact(path)
    return table.column("id").to_pylist(), table.column(column).to_pylist()


def embed_key(args: list[str], defaults: dict) -> str:
    """Names a cached embed by its arguments and `embed`'s defaults (a changed default re-embeds)."""
    return hashlib.blake2b(json.dumps([args, defaults.get("embed")], default=str).encode(),
                           digest_size=6).hexdigest()


def selection_path(vdir: Path, c: Contender, seed: int, defaults: dict) -> Path:
    """Where a contender's selection for a seed is cached, named by what makes it (Contender.digest)."""
    return vdir / "sel" / c.name / f"seed{seed}-{c.digest(defaults)}.json"


def cached_curate(c: Contender, seed: int, vdir: Path, data: Path, rows: list[train_eval.Row], labels: dict,
                  budget: int, defaults: dict, fresh: bool = False) -> Selection:
    """The contender's selection for a seed: the cached one (unless `fresh`), else curated and cached."""
    path = selection_path(vdir, c, seed, defaults)
    if path.exists() and not fresh:
        return Selection(**json.loads(path.read_text()))
    print(f"[{vdir.name}] curate {c.name} seed {seed}", file=sys.stderr, flush=True)
    sel = curate(c, seed, data, rows, labels, budget, vdir, defaults)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sel.__dict__))
    return sel


def curate(c: Contender, seed: int, data: Path, rows: list[train_eval.Row], labels: dict, budget: int,
           vdir: Path, defaults: dict) -> Selection:
    """A contender's selection for a seed, made anew (default-counts reads the default's cached one); the tool's
    artifacts go under the variant's folder vdir."""
    work = vdir / "artifacts"
    n = len(rows)
    skill = np.asarray(labels["skill"])
    if c.kind == "full":
        return Selection(list(range(n)), note="all rows")
    if c.kind == "random":
        return select_random(n, budget, seed)
    if c.kind == "oracle":
        return select_oracle(skill, budget, seed)
    if c.kind == "counts":
        # the default's cached selection of this seed
        like = cached_curate(contenders()["default"], seed, vdir, data, rows, labels, budget, defaults)
        return select_with_counts(skill, labels["skills"], like, seed)
    d = work / c.name
    d.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    secs = 0.0
    emb = d / "embeddings.parquet"
    if c.kind == "tool":
        # features depend neither on the seed nor on the later stages: one embed per distinct set of options
        e = work / ("embed-" + embed_key(c.embed, defaults))
        e.mkdir(parents=True, exist_ok=True)
        emb = e / "embeddings.parquet"
        if not (e / "embed.json").exists():  # written last: an embed killed midway is redone
            secs_embed = cli(["embed", data, "--out", emb, "--overwrite", *c.embed], log)
            (e / "embed.json").write_text(json.dumps({"seconds": secs_embed, "command": log[-1]}))
        meta = json.loads((e / "embed.json").read_text())
        secs += meta["seconds"]
        if meta["command"] not in log:
            log.insert(0, meta["command"])
    else:
        t0 = time.perf_counter()
        write_embeddings(harness_features(c.features, rows), rows, data, emb, c.features)
        secs += time.perf_counter() - t0
        log.append(f"(harness) {c.features} features -> {emb}")
    fmt = {"seed": seed, "budget": budget}
    clusters = d / f"clusters-s{seed}.parquet"
    secs += cli(["cluster", emb, "--out", clusters, "--overwrite", *[a.format(**fmt) for a in c.cluster]], log)
    if c.kinds_from_labels:
        set_kinds_by_skill(clusters, skill)
        log.append(f"(harness) each group's kind set to its rows' most common skill -> {clusters}")
    cid, cl = read_ids(clusters)
    by_id = dict(zip(cid, cl))
    if any("{ratio}" in a for a in c.select):  # the paper's r, chosen so that the budget is ~31%
        sizes = np.bincount(np.asarray(cl))
        sizes = sizes[sizes > 0]
        fmt["ratio"] = f"{min(1.0, (budget / len(sizes) + 0.999) / sizes.min()):.6f}"
    sel = d / f"selection-s{seed}.parquet"
    secs += cli(["select", clusters, "--out", sel, "--overwrite", *[a.format(**fmt) for a in c.select]], log)
    ids, _ = read_ids(sel)
    train_path = None
    if c.shard is not None:
        shards = d / f"shards-s{seed}"
        secs += cli(["shard", sel, "--data", data, "--out", shards, "--overwrite",
                     *[a.format(**fmt) for a in c.shard]], log)
        train_path = str(shards)
        ids = sorted(r.id for r in train_eval.load_rows(shards))
    return Selection(sorted(int(i) for i in ids), train_path=train_path, clusters=[by_id.get(i, -1) for i in range(n)],
                     curation_seconds=secs, commands=log, use_weights=c.use_weights)


# ============================================================================================ training

def _train_job(args) -> dict:
    variant_dir, sel_ids, train_path, use_weights, seed, epochs, score, lr, device = args
    rows = train_eval.load_rows(Path(variant_dir) / "train.jsonl", "skill")
    test = train_eval.load_rows(Path(variant_dir) / "test.jsonl", "skill")
    if train_path:
        train_rows = train_eval.load_rows(train_path, "skill")
    else:
        keep = set(sel_ids)
        train_rows = [r for r in rows if r.id in keep]
    cfg = train_eval.TrainConfig(epochs=epochs, seed=seed, use_weights=use_weights, device=device, lr=lr)
    return train_eval.run(train_rows, test, rows + test, cfg, score=score)


def run_jobs(todo: list, jobs: int, time_limit: float | None, save) -> int:
    """Run the training jobs (in the given order, `jobs` at a time), saving each as it ends. With a time limit,
    no job starts after it has passed (those still running finish). Returns the number not run."""
    t0 = time.perf_counter()
    if jobs <= 1:
        for n, (key, job) in enumerate(todo):
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                return len(todo) - n
            save(key, _train_job(job))
        return 0
    import multiprocessing as mp
    # CUDA cannot be used in a forked child of a process that touched it: start CUDA workers fresh
    ctx = mp.get_context("spawn" if any(job[-1].startswith("cuda") for _, job in todo) else "fork")
    not_run = 0
    with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        futures = {pool.submit(_train_job, job): key for key, job in todo}
        for fut in as_completed(futures):
            if fut.cancelled():
                continue
            try:
                res = fut.result()
            except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
                print(f"{futures[fut][:2]}: training failed: {e!r}", file=sys.stderr, flush=True)
                not_run += 1
                continue
            save(futures[fut], res)
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                not_run += sum(f.cancel() for f in futures)
    return not_run


# ============================================================================================ metrics

def nmi(a, b) -> float:
    from sklearn.metrics import normalized_mutual_info_score
    return float(normalized_mutual_info_score(a, b))


def summarise(variant: str, names: list[str], runs: dict, sels: dict, labels: dict) -> dict:
    skills = labels["skills"]
    skill = np.asarray(labels["skill"])
    out = {}
    for name in names:
        rs = runs.get(name) or []
        if not sels.get(name):
            continue
        counts = np.mean([np.bincount(skill[np.asarray(sl.ids)], minlength=len(skills)) for sl in sels[name]], 0)
        cl = [sl.clusters for sl in sels[name] if sl.clusters is not None]
        v = {
            "curation_seconds": float(np.median([sl.curation_seconds for sl in sels[name]])),
            "rows": float(np.mean([len(sl.ids) for sl in sels[name]])),
            "counts": counts.tolist(),
            "nmi_skill": float(np.mean([nmi(c, skill) for c in cl])) if cl else None,
            "nmi_skill_template": (float(np.mean([nmi(c, skill * 4 + np.asarray(labels["template"])) for c in cl]))
                                   if cl else None),
            "selections": len(sels[name]), "seeds": len(rs), "commands": sels[name][0].commands,
            "trained": bool(rs),
        }
        if rs:
            per = {s: [r["per_skill"][s] for r in rs] for s in skills}
            macro = [r["macro"] for r in rs]
            worst = [r["worst"] for r in rs]
            v.update({
                "macro": float(np.mean(macro)), "macro_std": float(np.std(macro)),
                "worst": float(np.mean(worst)), "worst_std": float(np.std(worst)),
                "per_skill": {s: float(np.mean(x)) for s, x in per.items()},
                "train_seconds": float(np.median([r["train_seconds"] for r in rs])),
                "devices": "+".join(sorted({r["device"] for r in rs})),
                "test_loss": float(np.mean([r["test_loss"] for r in rs])),
                "seed_list": [r["seed"] for r in rs],
                "final_train_losses": [r["final_train_loss"] for r in rs],
                "per_seed_macro": macro, "per_seed_worst": worst,
                "converged": sum(r["final_train_loss"] <= CONVERGED_LOSS for r in rs),
            })
        out[name] = v
    return relate(out)


def relate(out: dict) -> dict:
    """Coverage against the oracle's counts and the share of the oracle's advantage over random recovered."""
    if "oracle" in out:
        for v in out.values():
            v["coverage"], v["min_count_ratio"] = skillmix.coverage(v["counts"], out["oracle"]["counts"])
    if out.get("oracle", {}).get("trained") and out.get("random", {}).get("trained"):
        o, r = out["oracle"], out["random"]
        for v in out.values():
            if not v["trained"]:
                continue
            for m in ("macro", "worst"):
                gap = o[m] - r[m]
                v[f"recovered_{m}"] = float((v[m] - r[m]) / gap) if abs(gap) > 1e-9 else None
    return out


def read_baselines(path: Path, a) -> dict:
    """An earlier results file of this run's recipe (read before any training: a mismatch ends the run there)."""
    prev = json.loads(path.read_text())
    same = {k: prev["config"].get(k) for k in ("rows", "epochs", "test_per_skill")}
    # recorded since each option exists
    same["lr"] = prev["config"].get("lr", train_eval.TrainConfig.lr)
    same["train_seed_offset"] = prev["config"].get("train_seed_offset", 0)
    ours = {k: getattr(a, k) for k in same}
    if same != ours:
        sys.exit(f"--baselines {path}: recipe {same} differs from this run's "
                 f"({', '.join(f'{k} {v:g}' for k, v in ours.items())})")
    return prev


def add_baselines(results: dict, prev: dict, path: Path) -> None:
    """Full, random and oracle taken from an earlier results file of the same recipe (rows, epochs, test set,
    training code), when this run did not train them: their selections do not depend on the tool, so a
    contender-only run can still be related to them. Marked `stored` in the report."""
    for variant, res in results.items():
        stored = prev["results"].get(variant, {})
        for name in reversed(VALIDITY):
            if not res.get(name, {}).get("trained") and stored.get(name, {}).get("trained"):
                results[variant] = res = {name: {**stored[name], "stored": str(path)}, **res}
        relate(res)


def validity(res: dict) -> dict:
    """The benchmark's own check (it must tell a good selection from a bad one before it judges anything):
    (1) the full data reaches >= 0.85 macro accuracy; (2) the oracle beats random on worst-skill accuracy by
    >= 20 points, and by more than either one's spread over seeds (max - min). Each over >= 3 seeds."""
    full, rnd, orc = (res.get(n, {}) for n in VALIDITY)
    if not all(v.get("trained") for v in (full, rnd, orc)):
        return {"decided": False, "why": "full, random and oracle have not all been trained"}
    spread = max(max(v["per_seed_worst"]) - min(v["per_seed_worst"]) for v in (rnd, orc))
    gap = orc["worst"] - rnd["worst"]
    seeds = min(len(v["per_seed_worst"]) for v in (full, rnd, orc))
    checks = {"full_macro": full["macro"], "full_ok": full["macro"] >= 0.85, "worst_gap": gap, "seed_spread": spread,
              "gap_ok": gap >= 0.20 and gap > spread, "seeds": seeds, "seeds_ok": seeds >= 3,
              "unconverged": {n: v["seeds"] - v["converged"] for n, v in res.items()
                              if v.get("trained") and v["converged"] < v["seeds"]}}
    checks["valid"] = checks["full_ok"] and checks["gap_ok"] and checks["seeds_ok"]
    checks["decided"] = True
    return checks


# ============================================================================================ report

def fmt_pm(m, s):
    return f"{m:.3f} ± {s:.3f}"


def pct(x):
    return "–" if x is None else f"{100 * x:.0f}%"


def validity_line(v: dict) -> str:
    if not v["decided"]:
        return f"validity not decided: {v['why']}"
    verdict = "VALID" if v["valid"] else "NOT VALID"
    return (f"{verdict}: full macro {v['full_macro']:.3f} (needs >= 0.85: {'met' if v['full_ok'] else 'not met'}); "
            f"oracle - random worst-skill gap {100 * v['worst_gap']:.0f} points against a seed spread of "
            f"{100 * v['seed_spread']:.0f} (needs >= 20 and above the spread: {'met' if v['gap_ok'] else 'not met'}); "
            f"{v['seeds']} seeds" + ("" if v["seeds_ok"] else " (needs 3)")
            + (f"; runs that did not converge (final training loss > {CONVERGED_LOSS}): "
               + ", ".join(f"{n} {k}" for n, k in v["unconverged"].items()) if v["unconverged"] else ""))


def write_report(results: dict, valid: dict, contender_defs: dict, args, out_dir: Path, elapsed: float,
                 payload: dict) -> Path:
    """quality.md (the tables, then quality_notes.md as written by hand) and quality.json (`payload`)."""
    mode = "quick" if args.quick else "full"
    lines = ["# Evidence: quality of the tool's selection on the skill-mixture benchmark", "",
             f"Generated by `python benchmarks/evidence.py {' '.join(args.argv)}` ({mode} mode) in "
             f"{elapsed / 60:.1f} min. {args.rows} rows, {args.epochs} epochs for every contender (peak lr "
             f"{args.lr:g}), seeds "
             f"{args.seeds} (column *seeds*: how many actually ran)"
             + (f", each trained with the training seed {args.train_seed_offset} above its selection seed"
                if args.train_seed_offset else "") + f", budget {FRACTION:.0%} "
             f"({round(FRACTION * args.rows)} rows); the column *device* says where each contender's runs trained "
             "(the same float32 recipe; CPU runs use 1 thread).", "",
             "Accuracy is greedy exact match on a held-out test set of the same number of rows per skill "
             "(worked variant: the final answer after `Answer:`), mean ± std over seeds. "
             "*recovered* = (contender − random) / (oracle − random), on macro and on worst-skill accuracy. "
             "*coverage* = Σ min(count, oracle count) / Σ oracle count over skills; *min ratio* = the worst "
             "skill's count ÷ the oracle's. NMI between the contender's clusters and the true skills "
             "(and skill × template). A contender whose selections were made but not trained shows only the "
             "selection columns.", ""]
    skills = skillmix.SKILL_NAMES
    for variant, res in results.items():
        if not res:
            continue
        trained = {n: v for n, v in res.items() if v["trained"]}
        lines += [f"## Variant `{variant}`", "", f"**Validity:** {validity_line(valid[variant])}.", "",
                  "| contender | rows | seeds | macro | worst skill | recovered macro | recovered worst | coverage "
                  "| min ratio | NMI skill | NMI skill×tmpl | curation s | train s | device |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, v in res.items():
            nm = "–" if v.get("nmi_skill") is None else f"{v['nmi_skill']:.2f}"
            nt = "–" if v.get("nmi_skill_template") is None else f"{v['nmi_skill_template']:.2f}"
            acc = (f"{fmt_pm(v['macro'], v['macro_std'])} | {fmt_pm(v['worst'], v['worst_std'])} | "
                   f"{pct(v.get('recovered_macro'))} | {pct(v.get('recovered_worst'))}") if v["trained"] \
                else "not trained | – | – | –"
            stored = " (stored)" if v.get("stored") else ""
            lines.append(f"| {name}{stored} | {v['rows']:.0f} | {v['seeds']} | {acc} | {pct(v.get('coverage'))} | "
                         f"{v.get('min_count_ratio', float('nan')):.2f} | {nm} | {nt} | {v['curation_seconds']:.1f} | "
                         f"{v['train_seconds'] if v['trained'] else float('nan'):.0f} | {v.get('devices', '–')} |")
        if trained:
            lines += ["", "Per-skill accuracy (mean over seeds); skills in decreasing frequency:", "",
                      "| contender | " + " | ".join(skills) + " |", "|---" * (len(skills) + 1) + "|"]
            for name, v in trained.items():
                lines.append(f"| {name} | " + " | ".join(f"{v['per_skill'][s]:.2f}" for s in skills) + " |")
            lines += ["", f"Per-seed results (macro / worst skill / final training loss; a run whose training loss "
                      f"stays above {CONVERGED_LOSS} did not finish learning its rows):", ""]
            for name, v in trained.items():
                per_seed = "; ".join(f"seed {s_}: {m:.3f} / {w:.2f} / {tl:.4f}" for s_, m, w, tl in
                                     zip(v["seed_list"], v["per_seed_macro"], v["per_seed_worst"],
                                         v["final_train_losses"]))
                lines.append(f"- {name}: {per_seed}")
        lines += ["", "Rows selected per skill (mean over selections):", "",
                  "| contender | " + " | ".join(skills) + " |", "|---" * (len(skills) + 1) + "|"]
        for name, v in res.items():
            lines.append(f"| {name} | " + " | ".join(f"{c:.0f}" for c in v["counts"]) + " |")
        if trained:
            lines += ["", f"![per-skill accuracy]({variant}_per_skill.png)", "", f"![time]({variant}_time.png)"]
        lines += ["", "Contenders and the exact commands (seed 0; curation seconds include each command's "
                  "Python start-up):", ""]
        for name, v in res.items():
            lines.append(f"- **{name}**: {contender_defs[name].desc}")
            for cmd in v["commands"]:
                lines.append(f"  - `{cmd}`")
        lines.append("")
    notes = out_dir / "quality_notes.md"
    if notes.exists():
        lines += ["", notes.read_text()]
    return write_results("quality", lines, payload, results=out_dir, quiet=True, command=False)


def plot(results: dict, out_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for variant, res in results.items():
        if not res:
            continue
        skills = skillmix.SKILL_NAMES
        names = [n for n, v in res.items() if v["trained"]]
        if not names:
            continue
        fig, ax = plt.subplots(figsize=(min(18, max(10, 0.12 * (len(skills) + 2) * len(names))), 5.5))
        w = 0.8 / len(names)
        x = np.arange(len(skills) + 2)
        for i, name in enumerate(names):
            v = res[name]
            vals = [v["per_skill"][s] for s in skills] + [v["macro"], v["worst"]]
            ax.bar(x + i * w - 0.4 + w / 2, vals, w, label=name)
        ax.set_xticks(x, skills + ["MACRO", "WORST"], rotation=30, ha="right")
        ax.set_ylabel("exact-match accuracy")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"Per-skill accuracy by contender ({variant} variant; skills by decreasing frequency)")
        ax.legend(ncol=min(7, len(names)), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28))
        fig.tight_layout()
        p = out_dir / f"{variant}_per_skill.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
        fig, ax = plt.subplots(figsize=(8, 3.5))
        tr = [res[n]["train_seconds"] for n in names]
        cu = [res[n]["curation_seconds"] for n in names]
        ax.barh(names, tr, label="training (median s)")
        ax.barh(names, cu, left=tr, label="curation (s)")
        devices = {d for n in names for d in res[n]["devices"].split("+")}
        ax.set_xlabel("seconds (training on 1 CPU thread)" if devices == {"cpu"} else
                      f"seconds (training on {' or '.join(sorted(devices))}: see quality.md's device column)")
        ax.invert_yaxis()
        ax.legend(fontsize=8)
        ax.set_title(f"Training + curation wall time ({variant} variant)")
        fig.tight_layout()
        p = out_dir / f"{variant}_time.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


# ============================================================================================ main

def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="CI smoke test: small data, few epochs, 1 seed")
    ap.add_argument("--variants", default="short,worked")
    ap.add_argument("--contenders", default=None, help="comma list (default: all whose subcommands exist)")
    ap.add_argument("--seeds", default=None, help="comma list of training/selection seeds (default 0,1,2)")
    ap.add_argument("--train-seed-offset", type=int, default=0,
                    help="train selection seed s with training seed s + this (the model's init and batch order "
                         "change, the selections do not): tells a selection that is hard to fit from an unlucky "
                         "training seed")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--test-per-skill", type=int, default=None)
    ap.add_argument("--lr", type=float, default=train_eval.TrainConfig.lr,
                    help="the small GPT's peak learning rate (the stored results: 3e-3; 1e-3 converges every run "
                         "of the benchmark family, family_notes.md, round 13)")
    ap.add_argument("--jobs", type=int, default=1, help="training runs in parallel (1 thread each)")
    ap.add_argument("--train-device", default="cpu",
                    help="where the small GPT trains: cpu (1 thread per run) or cuda (same recipe, float32); runs "
                         "are cached per device")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds after which no new training run starts (cached runs are kept; rerun to go on)")
    ap.add_argument("--work", default=None, help="cache of datasets, artifacts and runs (default out/evidence[-quick])")
    ap.add_argument("--results", default=str(RESULTS), help="where quality.md/json and PNGs go")
    ap.add_argument("--fresh", action="store_true", help="ignore cached runs")
    ap.add_argument("--baselines", default=None,
                    help="an earlier quality.json of the same recipe: its full/random/oracle stand in for those "
                         "this run does not train (they do not depend on the tool)")
    ap.add_argument("--curate-only", action="store_true", help="make (and cache) the selections, train nothing")
    ap.add_argument("--no-curate", action="store_true",
                    help="train on the cached selections only (those missing are skipped), e.g. on a GPU machine")
    ap.add_argument("--cached-only", action="store_true",
                    help="compute nothing: report the cached selections and runs (whatever seeds exist)")
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.rows = a.rows or (1200 if a.quick else 5000)
    a.epochs = a.epochs or (8 if a.quick else EPOCHS)
    a.test_per_skill = a.test_per_skill or (30 if a.quick else 100)
    a.seeds = [int(s) for s in (a.seeds or ("0" if a.quick else "0,1,2")).split(",")]
    work = Path(a.work or ROOT / "out" / ("evidence-quick" if a.quick else "evidence"))
    baselines = read_baselines(Path(a.baselines), a) if a.baselines else None
    out_dir = Path(a.results)
    out_dir.mkdir(parents=True, exist_ok=True)
    defs = contenders()
    defaults = tool_defaults()
    available = tool_subcommands()
    quick_set = ["full", "random", "oracle", "text-k48", "default"]
    if not SMOLLM2.exists() and "gradient-smollm2" in defs and not a.contenders:
        print(f"skip gradient-smollm2: {SMOLLM2} is missing (make smollm2)", file=sys.stderr)
        defs.pop("gradient-smollm2")
    wanted = a.contenders.split(",") if a.contenders else (quick_set if a.quick else list(defs))
    names = []
    for n in wanted:
        missing = [s for s in defs[n].needs if s not in available]
        if missing:
            print(f"skip {n}: the tool has no {', '.join(missing)} yet", file=sys.stderr)
        else:
            names.append(n)
    budget = round(FRACTION * a.rows)
    t_start = time.perf_counter()
    device_tag = "" if a.train_device == "cpu" else f"-{a.train_device.split(':')[0]}"
    variants, todo, job_keys = {}, [], {}
    for variant in a.variants.split(","):
        vdir = work / variant
        key = {"rows": a.rows, "test": a.test_per_skill, "variant": variant}
        if not (vdir / "key.json").exists() or json.loads((vdir / "key.json").read_text()) != key:
            skillmix.write_benchmark(vdir, a.rows, variant, seed=0, test_per_skill=a.test_per_skill)
            (vdir / "key.json").write_text(json.dumps(key))
        data = vdir / "train.jsonl"
        rows = train_eval.load_rows(data, "skill")
        labels = json.loads((vdir / "labels.json").read_text())
        score = "final" if variant == "worked" else "exact"
        sels: dict[str, list[Selection]] = {}
        job_keys[variant] = []
        for name in names:
            sels[name] = []
            for seed in a.seeds:
                if (a.cached_only or a.no_curate) and (a.fresh or
                                                       not selection_path(vdir, defs[name], seed, defaults).exists()):
                    print(f"[{variant}] {name} seed {seed}: no cached selection, skipped", file=sys.stderr)
                    continue
                sel = cached_curate(defs[name], seed, vdir, data, rows, labels, budget, defaults, fresh=a.fresh)
                sels[name].append(sel)
                # a cached run is keyed by everything that decides it (training_digest) and named by the device
                # it ran on; the recipe is the same on every device, so a run from any device counts, and so does
                # the same training made under another contender's name
                digest = training_digest(sel, a.lr, a.train_seed_offset)
                run_cache = vdir / "runs" / name / f"seed{seed}-e{a.epochs}{device_tag}-{digest}.json"
                cached = [run_cache] if run_cache.exists() else sorted(
                    (vdir / "runs").glob(f"*/seed{seed}-e{a.epochs}*-{digest}.json"))
                if cached and not a.fresh:
                    job_keys[variant].append((name, cached[0]))
                elif not a.cached_only:
                    job_keys[variant].append((name, run_cache))
                    todo.append(((variant, name, run_cache), (str(vdir), sel.ids, sel.train_path, sel.use_weights,
                                                              seed + a.train_seed_offset, a.epochs, score, a.lr,
                                                              a.train_device)))
        variants[variant] = (sels, labels)
    if a.curate_only and not a.cached_only:
        return
    # the contenders in the order asked for (validity first: full, random, oracle), seed by seed, so that a
    # run cut short by --time-limit has complete comparisons rather than one contender's every seed
    order = {n: i for i, n in enumerate(names)}
    todo.sort(key=lambda kj: (kj[0][1] not in VALIDITY, kj[1][4], order[kj[0][1]], kj[0][0]))
    print(f"{len(todo)} training runs to do on {a.train_device}, "
          f"{sum(map(len, job_keys.values())) - len(todo)} cached", file=sys.stderr, flush=True)

    def save(key, res):
        variant, name, path = key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res))
        print(f"[{variant}] {name} seed {res['seed']}: macro {res['macro']:.3f} worst {res['worst']:.3f} "
              f"loss {res['final_train_loss']:.4f} ({res['train_seconds']:.0f} s)", file=sys.stderr, flush=True)

    not_run = run_jobs(todo, a.jobs, a.time_limit, save)
    if not_run:
        print(f"{not_run} training runs not run (--time-limit, or failed as printed above)", file=sys.stderr,
              flush=True)
    results, valid = {}, {}
    for variant, (sels, labels) in variants.items():
        runs = {}
        for name, path in job_keys[variant]:
            if path.exists():
                run = json.loads(path.read_text())
                run.setdefault("device", "cuda" if "-cuda-" in path.name else "cpu")
                runs.setdefault(name, []).append(run)
        results[variant] = summarise(variant, names, runs, sels, labels)
    if a.baselines:
        add_baselines(results, baselines, Path(a.baselines))
    for variant in results:
        valid[variant] = validity(results[variant])
    elapsed = time.perf_counter() - t_start
    plot(results, out_dir)
    path = write_report(results, valid, defs, a, out_dir, elapsed,
                        {"config": dict(vars(a)), "validity": valid, "results": results})
    for variant, res in results.items():
        print(f"\n== {variant} == {validity_line(valid[variant])}")
        print(f"{'contender':14s} {'rows':>5s} {'macro':>13s} {'worst':>13s} {'rec.macro':>9s} {'rec.worst':>9s} "
              f"{'cov':>5s} {'NMI':>5s} {'cur s':>6s} {'train s':>7s}")
        for name, v in res.items():
            nm = "–" if v.get("nmi_skill") is None else f"{v['nmi_skill']:.2f}"
            if v["trained"]:
                acc = (f"{fmt_pm(v['macro'], v['macro_std']):>13s} {fmt_pm(v['worst'], v['worst_std']):>13s} "
                       f"{pct(v.get('recovered_macro')):>9s} {pct(v.get('recovered_worst')):>9s}")
            else:
                acc = f"{'not trained':>13s} {'':>13s} {'':>9s} {'':>9s}"
            print(f"{name:14s} {v['rows']:5.0f} {acc} {pct(v.get('coverage')):>5s} {nm:>5s} "
                  f"{v['curation_seconds']:6.1f} {v.get('train_seconds', float('nan')):7.0f}")
    print(f"\nwrote {path} ({elapsed / 60:.1f} min)")


if __name__ == "__main__":
    main()
