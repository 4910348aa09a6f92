"""Peak memory of `cluster-curate embed` against the number of rows, and the proxy warm-up's cost.

Targets (issue 3):
  * memory is bounded by the batch, not the data: peak RSS for 1,000 and for 20,000 GSM8K rows differ by
    less than 15%;
  * the proxy warm-up (sample pass + tokenizer + training + saving) costs at most a quarter of the feature
    pass on the same data.

Each run is a fresh subprocess (`python -m cluster_curate embed ... --json`, the built-in proxy, `gradient`
features, defaults otherwise) and its peak RSS is ru_maxrss of that child alone. The 20,000-row file cycles
GSM8K train + test (8,792 distinct rows). Warm-up vs feature seconds come from the command's own summary
(`warmup_seconds`, `feature_seconds`) and are measured in the same process, one after the other.

    .venv/bin/python benchmarks/bench_embed_memory.py [--sizes 1000,20000] [--proxy-size tiny]
                                                      [--warmup-rows 7473] [--warmup-proxy-size small]

Single-threaded (OMP_NUM_THREADS=1): the machine is shared, compare ratios measured in the same run.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

import common

DATA = common.DATA / "gsm8k"


def gsm8k_rows(n: int, tmp: Path) -> Path:
    lines = []
    for name in ("train.jsonl", "test.jsonl"):
        with open(DATA / name) as f:
            lines.extend(line for line in f if line.strip())
    path = tmp / f"gsm8k_{n}.jsonl"
    path.write_text("".join(islice(cycle(lines), n)))
    return path


def run_embed(data: Path, out: Path, extra: list[str]) -> dict:
    """One embed run in a child process: its summary plus the child's own peak RSS and wall time."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    # gradient named: the default features became `text`, which trains no proxy (its --proxy-size is refused)
    cmd = [sys.executable, "-m", "cluster_curate", "embed", str(data), "--out", str(out), "--json",
           "--features", "gradient", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"embed failed ({res.returncode}):\n{res.stderr[-3000:]}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak_kb < before:  # pragma: no cover - ru_maxrss of children is a running maximum
        peak_kb = before
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    return {"summary": summary, "peak_rss_mb": peak_kb / 1024, "wall_s": wall}


def one_child(data: Path, out: Path, extra: list[str]) -> dict:
    """Run in a dedicated grandchild so RUSAGE_CHILDREN's running maximum covers this run only."""
    code = ("import json;from bench_embed_memory import run_embed;from pathlib import Path;"
            "print(json.dumps(run_embed(Path(%r),Path(%r),%r)))" % (str(data), str(out), extra))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=common.HERE)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--sizes", default="1000,20000")
    ap.add_argument("--proxy-size", default="tiny", help="proxy of the memory runs (speed only; memory is bounded "
                                                         "by the batch either way)")
    ap.add_argument("--warmup-rows", type=int, default=7473, help="rows of the warm-up cost run (GSM8K train)")
    ap.add_argument("--warmup-proxy-size", default="small", help="proxy of the warm-up cost run (the default)")
    ap.add_argument("--skip-warmup", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    rows = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for n in sizes:
            data = gsm8k_rows(n, tmp)
            r = one_child(data, tmp / f"e{n}.parquet", ["--proxy-size", args.proxy_size])
            s = r["summary"]
            rows.append({"run": f"memory {n}", "rows": n, "proxy": args.proxy_size, "peak_rss_mb": round(r["peak_rss_mb"], 1),
                         "wall_s": round(r["wall_s"], 1), "warmup_s": s["warmup_seconds"],
                         "feature_s": s["feature_seconds"], "rows_per_s": s["rows_per_s"],
                         "tokens_per_s": s["tokens_per_s"],
                         "warmup_over_features": round(s["warmup_seconds"] / s["feature_seconds"], 3)})
            print(rows[-1], flush=True)
        if not args.skip_warmup:
            data = tmp / "train.jsonl"
            with open(DATA / "train.jsonl") as f:
                data.write_text("".join(islice(f, args.warmup_rows)))
            r = one_child(data, tmp / "w.parquet", ["--proxy-size", args.warmup_proxy_size])
            s = r["summary"]
            rows.append({"run": "warm-up cost", "rows": s["rows"], "proxy": args.warmup_proxy_size,
                         "peak_rss_mb": round(r["peak_rss_mb"], 1), "wall_s": round(r["wall_s"], 1),
                         "warmup_s": s["warmup_seconds"], "feature_s": s["feature_seconds"],
                         "rows_per_s": s["rows_per_s"], "tokens_per_s": s["tokens_per_s"],
                         "warmup_over_features": round(s["warmup_seconds"] / s["feature_seconds"], 3)})
            print(rows[-1], flush=True)

    mem = [r for r in rows if r["run"].startswith("memory")]
    growth = (max(r["peak_rss_mb"] for r in mem) / min(r["peak_rss_mb"] for r in mem) - 1) if len(mem) > 1 else 0.0
    warm = [r for r in rows if r["run"] == "warm-up cost"]
    verdict = {
        "rss_growth": round(growth, 4), "rss_target": "< 0.15", "rss_ok": growth < 0.15,
        "warmup_over_features": warm[0]["warmup_over_features"] if warm else None, "warmup_target": "<= 0.25",
        "warmup_ok": (warm[0]["warmup_over_features"] <= 0.25) if warm else None,
    }
    cols = list(rows[0])
    header = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    table = header + "".join("| " + " | ".join(str(r[c]) for c in cols) + " |\n" for r in rows)
    print()
    print(table)
    print(json.dumps(verdict))
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs (shared), torch single-threaded"
    common.write_results("embed_memory", (
        "# embed: peak memory vs rows, and the proxy warm-up's cost\n\n"
        f"`{' '.join(['python', *sys.argv])}` on {machine}.\n\n"
        "Each row is one `cluster-curate embed` process (built-in proxy, `gradient`, defaults otherwise); peak "
        "RSS is that process's ru_maxrss. Memory runs cycle GSM8K train+test to the row count.\n\n"
        + table + "\n"
        f"* Peak RSS growth from the smallest to the largest run: **{growth:.1%}** (target < 15%).\n"
        + (f"* Proxy warm-up / feature pass on {warm[0]['rows']} GSM8K rows ({warm[0]['proxy']} proxy): "
           f"**{warm[0]['warmup_over_features']:.2f}** (target <= 0.25).\n" if warm else "")),
        {"rows": rows, "verdict": verdict, "machine": machine, "command": " ".join(sys.argv)}, quiet=True,
        command=False)


if __name__ == "__main__":
    main()
