"""Throughput and memory of `embed --features semantic` (the bundled all-MiniLM-L6-v2) against `text` and
`hidden` with the built-in proxy, on GSM8K rows, at 1 and 2 threads (issue 19).

Each measurement is one `cluster-curate embed DATA --features F --json` process, as a user runs it, with
OMP_NUM_THREADS / MKL_NUM_THREADS set to the thread count; its peak RSS is the process's own ru_maxrss
(reported by a launcher at exit). Rates come from the command's own summary: `rows_per_s` is the feature pass
(rows / feature_seconds; for `hidden` the proxy warm-up is apart, in `warmup_seconds`), and the end-to-end
rate is rows / wall seconds of the whole process (start-up, model load, warm-up, writing included).

Memory flat in rows: `semantic` at --memory-rows sizes (GSM8K train rows, cycled), 1 thread; the target is a
peak RSS growth below 15% from the smallest to the largest (as for the other model features).

The machine is shared (2 cores, several sessions): wall-clock rates measure the contention as much as the
feature, and 2 threads may not get 2 cores; so the process's CPU seconds (user + system, every thread) are
reported too, and rows per CPU second (whole process: start-up, load, warm-up included) is the figure that
compares features on a loaded machine. The load average at the end is printed with the table.

    .venv/bin/python benchmarks/bench_semantic.py [--rows 2000] [--threads 1,2] [--features semantic,text,hidden]
                                                  [--memory-rows 1000,4000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
FEATURE_ARGS = {"semantic": ["--features", "semantic"], "text": ["--features", "text"],
                "hidden": ["--features", "hidden"]}  # hidden: the default --model proxy
# Reports the child's own peak RSS: ru_maxrss of RUSAGE_CHILDREN is a maximum over every child so far.
LAUNCHER = ("import atexit, resource, runpy, sys\n"
            "def report():\n"
            "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
            "    sys.stderr.write('PEAK_RSS_KB=%d CPU_S=%.3f\\n' % (r.ru_maxrss, r.ru_utime + r.ru_stime))\n"
            "atexit.register(report)\n"
            "sys.argv = ['cluster-curate'] + sys.argv[1:]\n"
            "runpy.run_module('cluster_curate', run_name='__main__')\n")


def gsm8k_file(n: int, tmp: Path) -> Path:
    with open(GSM8K) as f:
        lines = [line for line in f if line.strip()]
    path = tmp / f"gsm8k_{n}.jsonl"
    path.write_text("".join(islice(cycle(lines), n)))
    return path


def run_embed(data: Path, out: Path, feature: str, threads: int, extra: list[str]) -> dict:
    from common import _compile_package
    _compile_package()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [sys.executable, "-c", LAUNCHER, "embed", str(data), "--out", str(out), "--overwrite", "--json",
           *FEATURE_ARGS[feature], *extra]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"embed failed ({res.returncode}): {' '.join(cmd[3:])}\n{res.stderr[-3000:]}")
    summary = json.loads([line for line in res.stdout.splitlines() if line.startswith("{")][-1])
    usage = [dict(kv.split("=") for kv in line.split()) for line in res.stderr.splitlines()
             if line.startswith("PEAK_RSS_KB=")][-1]
    cpu = float(usage["CPU_S"])
    return {"feature": feature, "threads": threads, "rows": summary["rows"], "wall_s": round(wall, 2),
            "feature_s": summary.get("feature_seconds"), "warmup_s": summary.get("warmup_seconds"),
            "rows_per_s": summary.get("rows_per_s"), "tokens_per_s": summary.get("tokens_per_s"),
            "end_to_end_rows_per_s": round(summary["rows"] / wall, 1), "cpu_s": round(cpu, 1),
            "rows_per_cpu_s": round(summary["rows"] / cpu, 1), "peak_rss_mb": round(int(usage["PEAK_RSS_KB"]) / 1024, 1),
            "dim": summary.get("dim"), "device": summary.get("device"),
            "command": "cluster-curate " + " ".join(cmd[3:]).replace(str(data), data.name)}


def main() -> None:
    from common import write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--features", default="semantic,text,hidden")
    ap.add_argument("--memory-rows", default="1000,4000")
    ap.add_argument("--quick", action="store_true", help="200 rows, 1 thread, memory 200,400 (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.threads, args.memory_rows = 200, "1", "200,400"
    threads = [int(t) for t in args.threads.split(",") if t]
    features = [f for f in args.features.split(",") if f]
    memory_rows = [int(n) for n in args.memory_rows.split(",") if n]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_semantic_") as tmp:
        tmp = Path(tmp)
        data = gsm8k_file(args.rows, tmp)
        runs = []
        for t in threads:  # interleaved by thread count: the machine's load drifts
            for f in features:
                runs.append(run_embed(data, tmp / f"{f}-{t}.parquet", f, t, []))
                print(json.dumps(runs[-1]), flush=True)
        memory = []
        if "semantic" in features:
            for n in memory_rows:
                memory.append(run_embed(gsm8k_file(n, tmp), tmp / f"mem-{n}.parquet", "semantic", 1, []))
                print(json.dumps(memory[-1]), flush=True)
    load = os.getloadavg()
    lines = ["# embed: `semantic` throughput and memory", "",
             f"`python benchmarks/bench_semantic.py` on {platform.machine()}, {os.cpu_count()} CPUs (shared), "
             f"GSM8K train rows. One `cluster-curate embed` process per row of the table; rows/s of the feature "
             f"pass from the command's summary, end to end = rows / wall seconds of the process.", "",
             "| features | threads | rows | feature rows/s | tokens/s | end-to-end rows/s | wall s | warm-up s "
             "| process CPU s | rows per CPU s | peak RSS MB | dim |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['feature']} | {r['threads']} | {r['rows']} | {r['rows_per_s']} | {r['tokens_per_s']} | "
                     f"{r['end_to_end_rows_per_s']} | {r['wall_s']} | {r['warmup_s']} | {r['cpu_s']} | "
                     f"{r['rows_per_cpu_s']} | {r['peak_rss_mb']} | {r['dim']} |")
    payload = {"runs": runs, "memory": memory, "load_average": load, "seconds": round(time.perf_counter() - started)}
    if memory:
        growth = memory[-1]["peak_rss_mb"] / memory[0]["peak_rss_mb"] - 1
        payload["memory_growth"] = growth
        lines += ["", "Memory (semantic, 1 thread):", "", "| rows | peak RSS MB | feature rows/s |", "|---|---|---|"]
        lines += [f"| {m['rows']} | {m['peak_rss_mb']} | {m['rows_per_s']} |" for m in memory]
        lines += ["", f"* Peak RSS growth from {memory[0]['rows']:,} to {memory[-1]['rows']:,} rows: "
                      f"**{growth:.1%}** (target < 15%)."]
    lines += ["", "tokens/s counts what each feature processes (`semantic`: the encoded `--text-field`, special "
                  "tokens included; `hidden`: the proxy's BPE tokens of prompt + response; `text`: words): compare "
                  "rows/s.",
              "", f"Load average at the end: {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}; {payload['seconds']} s."]
    write_results("semantic", lines, payload, sys.argv[1:])


if __name__ == "__main__":
    main()
