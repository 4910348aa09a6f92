"""Throughput of the default `text` features (features/text.py, slot weighting, 256 dims): the part of `embed`
that grows with the rows, measured on real instruction text, this checkout against another (a baseline).

Rows: GSM8K train and the Code Alpaca sample (their prompts, the default --text-field), in that
order, repeated up to --rows. The basis is fitted on the first --sample rows (as `embed` fits it on a sample),
then every row is transformed in chunks of 2048 (embed's --commit-every). Each tree runs in a fresh process
per round, the trees interleaved round by round, and the median round is kept (the machine is shared: compare
the ratio, measured side by side). The features of both trees are compared bit for bit.

    python benchmarks/bench_text_transform.py --baseline /tmp/base-checkout   # e.g. `git archive HEAD~1`
    python benchmarks/bench_text_transform.py                                  # this checkout alone
    python benchmarks/bench_text_transform.py --baseline DIR --name text_transform_counts   # another results file
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import DATA, ROOT, parser, write_results

CHUNK = 2048


def texts(rows: int) -> list[str]:
    from cluster_curate.features.text import example_text
    from cluster_curate.io.datasets import ReadOptions, open_dataset
    base = []
    for path in (DATA / "gsm8k" / "train.jsonl", DATA / "code_alpaca" / "code_alpaca_2k.json"):
        ds = open_dataset(str(path), ReadOptions(on_bad_row="skip"))
        base += [example_text(ex, "prompt") for batch in ds.iter_batches() for ex in batch.examples]
    return [base[i % len(base)] for i in range(rows)]


def worker(rows: int, sample: int) -> dict:
    """One round in this process: fit, then transform every chunk; seconds and a hash of the features."""
    from cluster_curate.features.text import TextFeaturizer
    data = texts(rows)
    t0 = time.perf_counter()
    feat = TextFeaturizer(dim=256, weighting="slot", seed=0).fit(data[:sample])
    t1 = time.perf_counter()
    digest = hashlib.sha256()
    for i in range(0, rows, CHUNK):
        digest.update(feat.transform(data[i:i + CHUNK]).tobytes())
    t2 = time.perf_counter()
    return {"fit_s": t1 - t0, "transform_s": t2 - t1, "features_sha256": digest.hexdigest()}


def run_round(tree: Path, rows: int, sample: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--worker", "--rows", str(rows), "--sample", str(sample)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=30000)
    ap.add_argument("--sample", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout's root, timed side by side")
    ap.add_argument("--name", default="text_transform", help="results file stem (benchmarks/results/NAME.md)")
    ap.add_argument("--worker", action="store_true", help=argparse_hidden())
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.rows, args.sample)))
        return
    trees = {"this checkout": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name in reversed(trees):  # the baseline first in every round
            rounds[name].append(run_round(trees[name], args.rows, args.sample))
    rows = []
    for name, got in rounds.items():
        transform = statistics.median(r["transform_s"] for r in got)
        rows.append({"tree": name, "fit_s": round(statistics.median(r["fit_s"] for r in got), 2),
                     "transform_s": round(transform, 2), "rows_per_s": round(args.rows / transform),
                     "features_sha256": got[0]["features_sha256"][:16],
                     "rounds_transform_s": [round(r["transform_s"], 2) for r in got]})
    lines = ["# text features: transform throughput", "",
             f"{args.rows} rows of GSM8K + Code Alpaca text (repeated), basis fitted on {args.sample}, "
             f"chunks of {CHUNK}, 1 thread, median of {args.rounds} interleaved rounds.", "",
             "| tree | fit s | transform s | rows/s | transform s per round | features sha256 |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['tree']} | {r['fit_s']} | {r['transform_s']} | {r['rows_per_s']:,} | "
              f"{', '.join(map(str, r['rounds_transform_s']))} | {r['features_sha256']} |" for r in rows]
    payload = {"rows": args.rows, "sample": args.sample, "chunk": CHUNK, "results": rows}
    if args.baseline:
        ratio = rows[1]["transform_s"] / rows[0]["transform_s"]
        same = rows[0]["features_sha256"] == rows[1]["features_sha256"]
        lines += ["", f"Baseline / this checkout, transform: {ratio:.2f}x; features identical: {same}."]
        payload |= {"speedup": round(ratio, 3), "identical": same}
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines += ["", f"Load average at the end: {load}."]
    write_results(args.name, lines, payload, argv)


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
