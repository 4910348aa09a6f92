"""Benchmark of `shard`: balance on GSM8K (ours vs random vs the paper's allocation, same run) and scale.

    python benchmarks/bench_shard.py                      # both parts (scale: 250k and 1M rows)
    python benchmarks/bench_shard.py --skip-scale         # GSM8K part only (~2 min)
    python benchmarks/bench_shard.py --scale-rows 100000  # a smaller scale check

Part 1, GSM8K (../shared/data/gsm8k/train.jsonl), 4 ranks, micro-batch 4. Clusters from the tool's own
pipeline when it is there (`embed --features text` -> `cluster --k 4` -> `select --per-cluster-ratio 0.5`;
token counts = the embeddings' n_tokens, whitespace words for the text features); otherwise k-means on
TF-IDF of the questions (scikit-learn) with regex word tokens. The table says which was used. Then one
selection, sharded three ways in the same run: --allocation stratified (ours, --balance tokens), random,
paper; plus ours with --balance padded. Targets (mean token imbalance <= 1.03, mean cluster spread >= 0.95,
per-rank cluster-mix TV distance <= 0.05) are for ours. Then the same with `cluster`'s default --k auto (many
clusters, each with at most a row or two a step; no paper row), where a rank's cluster mix rests on which ranks
take each step's micro-batches (sharding.assign_ranks): its rank_mix_tv is given beside a random deal of the same
rows (`rank_mix_tv_random`).

Part 2, scale: a synthetic instruction JSONL with Alpaca-like lengths (lognormal words; ~0.7 kB a row) and a
selection of every row in 64 clusters with n_tokens (as `select` writes it), sharded into 8 shards (M = 4).
Each size runs in a fresh process that reports its own wall time and peak RSS. Target: 1M rows <= 60 s, and
peak memory that does not grow with the text (compare 250k and 1M).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import DATA, RESULTS, parser, write_results

GSM8K = DATA / "gsm8k" / "train.jsonl"
TARGETS = {"token_imbalance_mean": 1.03, "cluster_spread_mean": 0.95, "rank_mix_tv_max": 0.05, "scale_seconds": 60}


# ------------------------------------------------------------------------------------------ GSM8K

def gsm8k_selection(work: Path, k: int | None = 4) -> tuple[Path, str]:
    """A selection of GSM8K with k clusters (None: `cluster`'s default, --k auto): via the tool's commands, else
    (k = 4 only) TF-IDF k-means. Returns (path, how)."""
    from cluster_curate import console
    console.configure(quiet=True)
    try:
        subprocess.run([sys.executable, "-m", "cluster_curate", "embed", str(GSM8K), "--out", str(work / "e.parquet"),
                        "--features", "text", "-q"], check=True)
        subprocess.run([sys.executable, "-m", "cluster_curate", "cluster", str(work / "e.parquet"), "--out",
                        str(work / "c.parquet"), *(["--k", str(k)] if k else []), "-q"], check=True)
        subprocess.run([sys.executable, "-m", "cluster_curate", "select", str(work / "c.parquet"), "--out",
                        str(work / "s.parquet"), "--per-cluster-ratio", "0.5", "-q"], check=True)
        return work / "s.parquet", (f"cluster-curate embed --features text | cluster --k {k or 'auto'} | select "
                                    "--per-cluster-ratio 0.5; tokens: embeddings n_tokens (whitespace words)")
    except subprocess.CalledProcessError as e:
        if k != 4:
            raise
        print(f"(tool pipeline unavailable: {e}; using TF-IDF k-means)", file=sys.stderr)
    import pyarrow as pa
    from sklearn.cluster import KMeans
    from sklearn.feature_extraction.text import TfidfVectorizer

    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.writer import write_artifact
    from cluster_curate.io.datasets import open_dataset
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines() if line.strip()]
    x = TfidfVectorizer(max_features=20000, stop_words="english").fit_transform([r["question"] for r in rows])
    labels = KMeans(4, n_init=3, random_state=0).fit_predict(x)
    sizes = np.bincount(labels, minlength=4)
    rng = np.random.default_rng(0)  # 31% of every cluster (TF-IDF clusters are too unequal for equal quotas)
    ids = np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == c), int(0.31 * sizes[c]), replace=False)
                                  for c in range(4)]))
    tokens = np.array([len(re.findall(r"\w+|[^\w\s]", rows[i]["question"] + " " + rows[i]["answer"])) for i in ids])
    rec = open_dataset(str(GSM8K)).record()
    meta = make_meta("selection", {"cluster_sizes": sizes.tolist(), "fraction": 0.31}, {}, rec)
    write_artifact(pa.table({"id": ids, "cluster": labels[ids], "rank_in_cluster": np.zeros(ids.size, np.int64),
                             "n_tokens": tokens}), work / "s.parquet", meta, overwrite=True)
    return work / "s.parquet", "TF-IDF (questions) + scikit-learn KMeans k=4; tokens: regex words+punctuation"


def bench_gsm8k(k: int | None = 4) -> dict:
    from cluster_curate.commands.shard import shard
    work = Path(tempfile.mkdtemp(prefix="bench-shard-gsm8k-"))
    selection, how = gsm8k_selection(work, k)
    runs = [("ours (stratified, tokens)", {"allocation": "stratified", "balance": "tokens"}),
            ("ours (stratified, padded)", {"allocation": "stratified", "balance": "padded"}),
            ("random", {"allocation": "random"}),
            ("paper (rank r = cluster r)", {"allocation": "paper"})][: None if k == 4 else 3]  # paper: k = N
    rows = []
    for name, kw in runs:
        m = shard(str(selection), str(GSM8K), str(work / name.split()[0]), num_shards=4, micro_batch_size=4,
                  overwrite=True, **kw)
        b = m["balance"]
        rows.append({"allocation": name, "rows_per_shard": m["rows_per_shard"], "steps": m["steps"],
                     "left_over": m["leftover_rows"],
                     "token_imbalance_mean": b["token_imbalance"]["mean"], "token_imbalance_p95": b["token_imbalance"]["p95"],
                     "padded_imbalance_mean": b["padded_imbalance"]["mean"], "padding_efficiency": b["padding_efficiency"],
                     "idle_fraction": b["idle_fraction"],
                     "cluster_spread_mean": b["cluster_spread"]["mean"], "cluster_spread_min": b["cluster_spread"]["min"],
                     "rank_mix_tv_max": b["rank_mix_tv"]["max"], "rank_mix_tv_random": b["rank_mix_tv"]["random"],
                     "seconds": m["seconds"]})
    ours = rows[0]
    met = {"token_imbalance_mean": ours["token_imbalance_mean"] <= TARGETS["token_imbalance_mean"],
           "cluster_spread_mean": ours["cluster_spread_mean"] >= TARGETS["cluster_spread_mean"],
           "rank_mix_tv_max": ours["rank_mix_tv_max"] <= TARGETS["rank_mix_tv_max"]}
    return {"clusters": how, "k": b["cluster_spread"]["clusters"], "selected_rows": int(m["selected_rows"]),
            "ranks": 4, "micro_batch_size": 4, "rows": rows, "targets_met": met}


# ------------------------------------------------------------------------------------------ scale

def make_scale_inputs(work: Path, n: int, seed: int = 0, text_scale: int = 1) -> tuple[Path, Path]:
    """Synthetic Alpaca-like JSONL (n rows; responses text_scale × longer) and a selection of all of it in 64
    clusters, with n_tokens."""
    import pyarrow as pa

    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.writer import write_artifact
    from cluster_curate.io.datasets import open_dataset
    rng = np.random.default_rng(seed)
    vocab = np.array(["the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "with", "as", "was", "on",
                      "function", "return", "value", "patient", "dose", "train", "model", "data", "number",
                      "compute", "explain", "because", "therefore", "example", "result", "answer"])
    data = work / f"data-{n}x{text_scale}.jsonl"
    k = 64
    labels = rng.integers(0, k, n)
    n_instr = np.clip(rng.lognormal(np.log(18), 0.7, n), 3, 400).astype(int)
    n_out = np.clip(rng.lognormal(np.log(85), 0.9, n), 5, 2000).astype(int) * text_scale
    with open(data, "w", encoding="utf-8") as f:
        for lo in range(0, n, 20_000):  # in chunks: the generator's memory must not inflate the measurement
            hi = min(n, lo + 20_000)
            text = vocab[rng.integers(0, len(vocab), int(n_instr[lo:hi].sum() + n_out[lo:hi].sum()))].tolist()
            pos = 0
            for i in range(lo, hi):
                a, b = n_instr[i], n_out[i]
                instr = " ".join(text[pos:pos + a]); pos += a
                out = " ".join(text[pos:pos + b]); pos += b
                f.write(json.dumps({"instruction": instr, "input": "", "output": out}) + "\n")
    rec = open_dataset(str(data)).record()
    sizes = np.bincount(labels, minlength=k)
    meta = make_meta("selection", {"cluster_sizes": sizes.tolist()}, {}, rec)
    sel = work / f"sel-{n}x{text_scale}.parquet"
    write_artifact(pa.table({"id": np.arange(n), "cluster": labels, "rank_in_cluster": np.zeros(n, np.int64),
                             "n_tokens": (n_instr + n_out) * 13 // 10}), sel, meta, overwrite=True)
    return data, sel


_CHILD = r"""
import json, resource, sys, time
from cluster_curate import console
from cluster_curate.commands.shard import shard
console.configure(quiet=True)
reader_cpu = None
if len(sys.argv) > 4:  # also time the dataset reader alone (its share of the CPU), before the run
    from cluster_curate.io.datasets import open_dataset
    c = time.process_time()
    ds = open_dataset(sys.argv[2])
    ds.record()
    for b in ds.iter_batches(4096):
        b.raw
    reader_cpu = time.process_time() - c
t = time.monotonic()
c0 = time.process_time()
m = shard(sys.argv[1], sys.argv[2], sys.argv[3], num_shards=8, micro_batch_size=4, overwrite=True)
ru = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM, not ru_maxrss: ru_maxrss survives exec and would count the parent's memory at fork time
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"seconds": time.monotonic() - t, "cpu_seconds": time.process_time() - c0, "reader_cpu_seconds": reader_cpu,
                  "peak_rss_mb": hwm / 1024,
                  "phases": m["seconds_by_phase"], "token_imbalance_mean": m["balance"]["token_imbalance"]["mean"],
                  "cluster_spread_mean": m["balance"]["cluster_spread"]["mean"],
                  "rank_mix_tv_max": m["balance"]["rank_mix_tv"]["max"], "rows_per_shard": m["rows_per_shard"]}))
"""


def bench_scale(sizes: list[int], long_text_rows: int | None) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-shard-scale-"))
    out = []
    configs = [(n, 1) for n in sizes] + ([(long_text_rows, 4)] if long_text_rows else [])
    try:
        for n, text_scale in configs:
            t = time.monotonic()
            data, sel = make_scale_inputs(work, n, text_scale=text_scale)
            gen = time.monotonic() - t
            env = dict(os.environ, OMP_NUM_THREADS="1")
            extra = ["reader"] if (n, text_scale) == configs[0] else []
            load_before = os.getloadavg()[0]
            r = subprocess.run([sys.executable, "-c", _CHILD, str(sel), str(data), str(work / f"out-{n}x{text_scale}")]
                               + extra, check=True, capture_output=True, text=True, env=env)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            shard_bytes = sum(p.stat().st_size for p in (work / f"out-{n}x{text_scale}").glob("*.parquet"))
            out.append({"rows": n, "text": f"x{text_scale}", "data_mb": data.stat().st_size / 2**20,
                        "shards_mb": shard_bytes / 2**20, "generate_seconds": gen,
                        "load_avg": round((load_before + os.getloadavg()[0]) / 2, 1), **res})
            for p in list(work.glob(f"*-{n}x{text_scale}*")):
                subprocess.run(["rm", "-rf", str(p)], check=True)
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=True)
    return out


# ------------------------------------------------------------------------------------------ report

def _fmt(v):
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _table(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main():
    ap = parser(__doc__)
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-gsm8k", action="store_true")
    ap.add_argument("--scale-rows", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--long-text-rows", type=int, default=250_000,
                    help="also shard this many rows with 4x longer responses (memory must not follow the text); 0: skip")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result: dict = {"targets": TARGETS}
    md = ["# bench_shard", "", f"Run: `python benchmarks/bench_shard.py {' '.join(sys.argv[1:])}`".rstrip() + ",",
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs (shared machine).", ""]
    if not args.skip_gsm8k:
        cols = ["allocation", "rows_per_shard", "steps", "left_over", "token_imbalance_mean", "token_imbalance_p95",
                "padded_imbalance_mean", "padding_efficiency", "idle_fraction", "cluster_spread_mean",
                "cluster_spread_min", "rank_mix_tv_max", "rank_mix_tv_random", "seconds"]
        g = result["gsm8k"] = bench_gsm8k(4)
        text = _table(g["rows"], cols)
        print(f"\nGSM8K: {g['selected_rows']} selected rows, 4 ranks x micro-batch 4; clusters: {g['clusters']}")
        print(text)
        print("targets met by ours:", g["targets_met"])
        md += ["## Balance on GSM8K (4 ranks, micro-batch 4, same run)", "",
               f"Selection: {g['selected_rows']} rows. Clusters and tokens: {g['clusters']}.", "",
               "Targets for ours: mean token imbalance <= 1.03, mean cluster spread >= 0.95, per-rank cluster-mix "
               "TV distance <= 0.05 (`rank_mix_tv_random`: the same rows dealt at random).", "", text, "",
               f"Targets met: {g['targets_met']}", ""]
        # --k auto (cluster's default): many clusters, each with at most one row a step
        g = result["gsm8k_k_auto"] = bench_gsm8k(None)
        ours_auto = next(r for r in g["rows"] if r["allocation"].startswith("ours (stratified, tokens"))
        text = _table(g["rows"], cols)
        print(f"\nGSM8K, --k auto ({g['k']} clusters): {g['selected_rows']} selected rows")
        print(text)
        md += [f"## The same with `cluster --k auto` ({g['k']} clusters, more than a step's 16 rows)", "",
               f"Selection: {g['selected_rows']} rows. Clusters and tokens: {g['clusters']}.", "",
               "Each step's micro-batches go to the ranks holding the fewest rows of their clusters so far "
               f"(sharding.assign_ranks): ours has `rank_mix_tv_max` {ours_auto['rank_mix_tv_max']:.4f} against "
               f"{ours_auto['rank_mix_tv_random']:.4f} for a random deal of the same rows (README, `rank_mix_tv`). "
               "No paper row: it needs k = 4 clusters.", "", text, "",
               f"Targets met: {g['targets_met']}", ""]
    if not args.skip_scale:
        s = bench_scale(args.scale_rows, args.long_text_rows)
        result["scale"] = s
        cols = ["rows", "text", "data_mb", "shards_mb", "seconds", "cpu_seconds", "load_avg", "peak_rss_mb", "phases",
                "token_imbalance_mean",
                "cluster_spread_mean", "rank_mix_tv_max"]
        for r in s:
            r["phases"] = ", ".join(f"{k} {v:.1f}s" for k, v in r["phases"].items())
            r["data_mb"], r["shards_mb"] = round(r["data_mb"], 1), round(r["shards_mb"], 1)
            r["seconds"], r["peak_rss_mb"] = round(r["seconds"], 1), round(r["peak_rss_mb"])
            r["cpu_seconds"] = round(r["cpu_seconds"], 1)
        text = _table(s, cols)
        print("\nScale: all rows selected, 64 clusters, 8 shards x micro-batch 4 (fresh process per size)")
        print(text)
        md += ["## Scale (8 shards, micro-batch 4, 64 clusters, n_tokens in the selection)", "",
               "Synthetic Alpaca-like JSONL (lognormal word counts, ~0.85 kB a row; `x4`: responses 4x longer); every row selected. Wall time, "
               "CPU time (user+sys: what the wall time would be on an idle core) and peak RSS of a fresh process "
               "running `shard`; `phases` splits the wall time. Target: 1M rows <= 60 s; memory bounded by the "
               "spill buffer (128 MB) + one position chunk (64 MB) + the reader's batch, not by the text.", "",
               text, ""]
        first = s[0]
        if first.get("reader_cpu_seconds"):
            share = first["reader_cpu_seconds"] / first["cpu_seconds"]
            md += [f"The dataset reader alone (open, fingerprint, iterate with raw rows) took "
                   f"{first['reader_cpu_seconds']:.1f} s CPU of the {first['cpu_seconds']:.1f} s CPU of the "
                   f"{first['rows']:,}-row run (~{share:.0%}; measured in the same process just before it; the "
                   "rest is the plan, the bucketing and the Parquet writes). `load_avg` is the machine's 1-minute load average around the run (2 cores shared "
                   "by other jobs): wall time above CPU time is time spent waiting for a core.", ""]
    write_results("shard", md, result, quiet=True, command=False)
    print(f"\nwrote {RESULTS / 'shard.md'} and {RESULTS / 'shard.json'}")


if __name__ == "__main__":
    main()
