"""Selection at scale: `select --fraction 0.31` over 1M and 10M rows in 4,096 clusters.

Target (issue 4): 10 million rows, 4,096 clusters, --fraction 0.31: <= 20 s and <= 2 GB peak memory on this
machine, and linear growth (1M vs 10M).

Each measurement runs in its own subprocess so that its peak RSS (ru_maxrss) is its own:
  function   selection.select_rows on numpy arrays (ids, cluster, similarity already in memory; the
             peak includes those inputs), default order `random`; also `far` at 10M
  command    commands.select.select: read the clusters artifact (Parquet), select, write the
             selection artifact -- what `cluster-curate select C --out S --fraction 0.31` does, minus the
             CLI start-up
The clusters artifact is synthetic (written through the artifact layer beforehand, not timed): cluster
sizes from a log-normal spread (largest / smallest ~ 30x), similarity uniform.

    .venv/bin/python benchmarks/bench_select.py [--sizes 1000000,10000000] [--repeats 1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from common import RESULTS, ROOT, parser, smoke_table, write_results
K, FRACTION = 4096, 0.31
TARGET_SECONDS, TARGET_MB = 20.0, 2048.0


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def synthetic(n: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 0.7, K)
    clusters = np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(n)).astype(np.int32)
    clusters = np.minimum(clusters, K - 1)
    similarity = rng.random(n, dtype=np.float32)
    return np.arange(n, dtype=np.int64), clusters, similarity


def child_write(n: int, path: str) -> dict:
    import pyarrow as pa

    from cluster_curate.io import artifacts as A
    from cluster_curate.io import writer as W
    ids, clusters, sim = synthetic(n)
    record = {"source": "synthetic", "fingerprint": f"synthetic-{n}", "rows": n}
    meta = A.make_meta("clusters", {"k": K}, {"embeddings": {"path": "none", "fingerprint": "none", "rows": n}},
                       record)
    W.write_artifact(pa.table({"id": ids, "cluster": clusters, "similarity": sim}), path, meta, overwrite=True)
    return {"written": path}


def child_function(n: int, within: str) -> dict:
    from cluster_curate import selection as S
    base = rss_mb()
    ids, clusters, sim = synthetic(n)
    inputs = rss_mb()
    t = time.perf_counter()
    sel = S.select_rows(clusters, k=K, ids=ids, similarity=sim, fraction=FRACTION, within=within, seed=0)
    secs = time.perf_counter() - t
    return {"seconds": secs, "selected": int(len(sel.rows)), "rss_before_inputs_mb": base,
            "rss_with_inputs_mb": inputs, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_command(n: int, path: str, out: str) -> dict:
    from cluster_curate import console
    from cluster_curate.commands.select import select
    console.configure(quiet=True)
    base = rss_mb()
    t = time.perf_counter()
    # the synthetic artifact records no data: the default order (`auto`) would warn and take the random one
    summary, _ = select(path, out, fraction=FRACTION, within="random", overwrite=True)
    secs = time.perf_counter() - t
    return {"seconds": secs, "selected": summary["selected"], "rss_after_imports_mb": base,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(*args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--repeats", type=int, default=1, help="runs per size and kind (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="100k and 1M rows, not written to results/")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--render-only", action="store_true", help="rewrite select.md from select.json")
    args = ap.parse_args()
    if args.render_only:
        saved = json.loads((RESULTS / "select.json").read_text())
        write_results("select", render(saved["rows"], saved["verdict"], saved.get("repeats", 3),
                                       saved.get("load_avg_at_end")), saved, command=False)
        return
    if args.child:
        kind, n, *rest = args.child
        fn = {"write": child_write, "function": child_function, "command": child_command}[kind]
        print(json.dumps(fn(int(n), *rest)))
        return
    sizes = [100_000, 1_000_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_select_") as tmp:
        for n in sizes:
            path, out = os.path.join(tmp, f"clusters-{n}.parquet"), os.path.join(tmp, f"sel-{n}.parquet")
            run_child("write", n, path)
            kinds = [("function", "random"), ("command", None)] + ([("function", "far")] if n == max(sizes) else [])
            for kind, within in kinds:
                runs = [run_child(kind, n, within) if kind == "function" else run_child(kind, n, path, out)
                        for _ in range(args.repeats)]
                secs = statistics.median(r["seconds"] for r in runs)
                peak = max(r["peak_mb"] for r in runs)
                rows.append({"rows": n, "what": f"select_rows (--within {within})" if kind == "function"
                             else "command: read + select + write", "seconds": round(secs, 2),
                             "runs": [round(r["seconds"], 2) for r in runs], "peak_mb": round(peak, 1),
                             "selected": runs[0]["selected"], "detail": runs[0]})
                print(f"  {n:>11,} {rows[-1]['what']}: {secs:.2f} s, peak {peak:.0f} MB", flush=True)
    big, small = max(sizes), min(sizes)
    growth = {}
    for what in {r["what"] for r in rows}:
        t = {r["rows"]: r["seconds"] for r in rows if r["what"] == what}
        if big in t and small in t and small != big:
            growth[what] = round(t[big] / t[small], 2)
    at_big = [r for r in rows if r["rows"] == big]
    verdict = {
        "rows": big, "target_seconds": TARGET_SECONDS, "target_peak_mb": TARGET_MB,
        "command_seconds": next(r["seconds"] for r in at_big if r["what"].startswith("command")),
        "command_peak_mb": next(r["peak_mb"] for r in at_big if r["what"].startswith("command")),
        "size_ratio": big / small, "time_ratio": growth,
    }
    verdict["met"] = verdict["command_seconds"] <= TARGET_SECONDS and verdict["command_peak_mb"] <= TARGET_MB
    md = render(rows, verdict, args.repeats)
    if args.quick:
        print(smoke_table(md))
    else:
        write_results("select", md, {"rows": rows, "verdict": verdict, "repeats": args.repeats,
                                     "load_avg_at_end": os.getloadavg()[0]}, command=False)


def render(rows, verdict, repeats, load=None) -> str:
    load = os.getloadavg()[0] if load is None else load
    lines = [
        "# Selection benchmark (issue 4)",
        "",
        f"`--fraction {FRACTION}` over {K:,} clusters (log-normal sizes), default order `random` unless said; "
        f"each measurement in its own subprocess (peak = its ru_maxrss, Python and pyarrow included); median "
        f"of {repeats} run(s); 2 cores shared with other jobs (load average {load:.1f} at the "
        "end).",
        "",
        "| rows | what | seconds | peak MB | selected |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['rows']:,} | {r['what']} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | {r['selected']:,} |")
    lines += [
        "",
        f"Target at {verdict['rows']:,} rows: <= {TARGET_SECONDS:g} s and <= {TARGET_MB:g} MB. The command (read + "
        f"select + write): **{verdict['command_seconds']:.2f} s, {verdict['command_peak_mb']:.0f} MB peak**: "
        f"{'met' if verdict['met'] else 'NOT met'}.",
        "",
        f"Growth from {min(r['rows'] for r in rows):,} to {verdict['rows']:,} rows "
        f"({verdict['size_ratio']:.0f}x the rows): "
        + ", ".join(f"{k} {v:.1f}x the time" for k, v in sorted(verdict["time_ratio"].items()))
        + ". Linear would be 10x. The command grows less because fixed costs (opening and writing files) weigh "
          "more at 1M; the function alone grows a little more than 10x because its arrays stop fitting in the "
          "CPU cache (1M rows: 4-8 MB per array; 10M: 40-80 MB, fresh pages) and its per-cluster sorts are "
          "O(n log(n/k)) at fixed k; memory grows linearly (~50 bytes per row).",
        "",
        "Command: `.venv/bin/python benchmarks/bench_select.py`",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
