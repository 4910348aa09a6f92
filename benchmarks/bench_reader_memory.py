"""Peak memory of reading a dataset: it must not grow with the size of the file.

    python benchmarks/bench_reader_memory.py [--rows 50000 500000] [--containers jsonl json csv parquet]

For each container and size, a GSM8K-like file is generated (records cycled from fixtures/gsm8k with a row
number mixed in, about 600 bytes a row), then a fresh Python process opens it with `open_dataset`, reads every
batch (examples, and `batch.raw` as shard does) and reports its peak RSS (VmHWM) and the RSS after the
imports, before reading. Target: peak RSS of the 10x larger file within 1.25x of the smaller one (+ 32 MiB slack).
Writes benchmarks/results/reader_memory.md and .json (--name to change).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, parser, write_results

CHILD = r"""
import json, sys, time
import pyarrow  # imported before the baseline so it counts in both
from cluster_curate.io.datasets import open_dataset, ReadOptions
def status_mib(key):
    # VmHWM (peak RSS of this process image), not ru_maxrss: ru_maxrss survives fork+exec, so it would report
    # the parent's size when the parent is bigger
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
base = status_mib("VmRSS")
t = time.perf_counter()
ds = open_dataset(sys.argv[1], ReadOptions())
rows = examples = chars = 0
for batch in ds.iter_batches(2048):
    rows += batch.raw.num_rows
    examples += len(batch.examples)
    chars += sum(len(e.response) for e in batch.examples)
secs = time.perf_counter() - t
peak = status_mib("VmHWM")
print(json.dumps({"rows": rows, "examples": examples, "base_mib": base, "peak_mib": peak, "seconds": secs}))
"""


def generate(path: Path, container: str, n: int) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    seed = [json.loads(line) for line in open(ROOT / "fixtures" / "gsm8k" / "train-300.jsonl", encoding="utf-8")]

    def record(i: int) -> dict:
        r = seed[i % len(seed)]
        return {"question": f"[{i}] {r['question']}", "answer": r["answer"]}

    if container == "jsonl":
        with open(path, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps(record(i)) + "\n")
    elif container == "json":
        with open(path, "w", encoding="utf-8") as f:
            f.write("[\n")
            for i in range(n):
                f.write((",\n" if i else "") + json.dumps(record(i), indent=1))
            f.write("\n]\n")
    else:
        writer = None
        for start in range(0, n, 50_000):
            table = pa.Table.from_pylist([record(i) for i in range(start, min(n, start + 50_000))])
            if writer is None:
                writer = (pq.ParquetWriter(path, table.schema) if container == "parquet"
                          else pacsv.CSVWriter(path, table.schema))
            writer.write_table(table)
        writer.close()


def measure(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[50_000, 500_000])
    ap.add_argument("--containers", nargs="+", default=["jsonl", "json", "csv", "parquet"])
    ap.add_argument("--name", default="reader_memory", help="results file name (default: reader_memory)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_reader_") as tmp:
        for container in args.containers:
            for n in args.rows:
                path = Path(tmp) / f"data-{n}.{container}"
                generate(path, container, n)
                size = path.stat().st_size / 2**20
                r = measure(path)
                assert r["rows"] == n and r["examples"] == n, r
                r.update(container=container, n=n, file_mib=round(size, 1))
                results.append(r)
                print(f"{container:8s} {n:>9,d} rows {size:8.1f} MiB file: peak RSS {r['peak_mib']:7.1f} MiB "
                      f"(after imports {r['base_mib']:6.1f}), {r['seconds']:6.1f} s", flush=True)
                path.unlink()
    lines = ["# Reader memory (peak RSS while reading every batch)", "",
             f"`python benchmarks/bench_reader_memory.py --rows {' '.join(map(str, args.rows))} "
             f"--containers {' '.join(args.containers)}" + (f" --name {args.name}`" if args.name != "reader_memory" else "`"), "",
             "| container | rows | file MiB | RSS after imports MiB | peak RSS MiB | peak − imports MiB | seconds | rows/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['container']} | {r['n']:,} | {r['file_mib']} | {r['base_mib']:.1f} | {r['peak_mib']:.1f} | "
                     f"{r['peak_mib'] - r['base_mib']:.1f} | {r['seconds']:.1f} | {r['n'] / r['seconds']:,.0f} |")
    verdicts = []
    for c in args.containers:
        rs = sorted((r for r in results if r["container"] == c), key=lambda r: r["n"])
        if len(rs) >= 2:
            small, big = rs[0], rs[-1]
            ok = big["peak_mib"] <= 1.25 * small["peak_mib"] + 32
            verdicts.append(f"- {c}: {big['n'] // small['n']}x the rows -> peak RSS x{big['peak_mib'] / small['peak_mib']:.2f} "
                            f"({'PASS' if ok else 'FAIL'}: target <= 1.25x + 32 MiB)")
    lines += ["", "Target: memory does not grow with the file size.", *verdicts, ""]
    write_results(args.name, lines, results)


if __name__ == "__main__":
    main()
