"""Preference (DPO) pairs: the per-step token balance when the plan counts a pair's rejected answer, against a plan
made as for SFT data (prompt -> chosen alone), both measured on what a DPO step reads: prompt + chosen + rejected.

The pairs are Code Alpaca's (2,015 rows with an output): prompt = instruction (+ input), chosen = output, and the
rejected answer in two ways:
  independent  another row's output drawn at random: its length says nothing of the chosen one's (the case
               where ignoring it costs most)
  cut short    the chosen output cut to a random 30-100% of its words: a length that follows the chosen one's
Each is planned by `run` (default selection, --fraction 0.5, N ranks x micro-batch M) twice: read as preference
pairs (the tool's reading: n_tokens counts the rejected answer), and read as prompt -> chosen
(`--format prompt-completion --response-field chosen`: what a plan that ignores the rejected answer balances).
Token imbalance per step: the largest rank's load over the mean rank's, loads counted in words as the tool counts
them without a tokenizer; mean, 95th percentile and max over steps.

    .venv/bin/python benchmarks/bench_preference_balance.py [--num-shards 8] [--micro-batch-size 2]
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np

from common import DATA, cli, parser, write_results


def pairs(path: Path, rejected: str, seed: int = 0) -> int:
    """Write Code Alpaca as preference pairs, the rejected answer made as `rejected` says; returns the rows."""
    rng = random.Random(seed)
    rows = [r for r in json.loads((DATA / "code_alpaca" / "code_alpaca_2k.json").read_text()) if r["output"].strip()]
    outputs = [r["output"] for r in rows]
    with path.open("w") as f:
        for r in rows:
            if rejected == "independent":
                bad = rng.choice(outputs)
            else:
                words = r["output"].split()
                bad = " ".join(words[:max(1, round(len(words) * rng.uniform(0.3, 1.0)))])
            prompt = r["instruction"] + ("\n\n" + r["input"] if r.get("input") else "")
            f.write(json.dumps({"prompt": prompt, "chosen": r["output"], "rejected": bad}) + "\n")
    return len(rows)


def step_imbalance(shards: Path) -> dict:
    """Largest rank load / mean rank load per step, the load of a row being its prompt + chosen + rejected words."""
    import pyarrow.parquet as pq
    loads = []
    for f in sorted(shards.glob("*.parquet")):
        t = pq.read_table(f, columns=["step", "prompt", "chosen", "rejected"]).to_pydict()
        load = np.zeros(max(t["step"]) + 1)
        for s, *texts in zip(t["step"], t["prompt"], t["chosen"], t["rejected"]):
            load[s] += sum(len(x.split()) for x in texts)
        loads.append(load)
    ratio = np.max(loads, axis=0) / np.mean(loads, axis=0)
    return {"mean": float(ratio.mean()), "p95": float(np.percentile(ratio, 95)), "max": float(ratio.max())}


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--num-shards", type=int, default=8)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--rows", type=int, default=None, help="the first ROWS pairs only (a quick run)")
    p.add_argument("--results", default=None)
    args = p.parse_args(argv)
    log: list[str] = []
    table, payload = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for rejected in ("independent", "cut short"):
            data = tmp / f"{rejected.replace(' ', '_')}.jsonl"
            n = pairs(data, rejected)
            if args.rows:
                data.write_text("".join(data.read_text().splitlines(keepends=True)[:args.rows]))
                n = min(n, args.rows)
            for plan, reading in (("rejected counted (preference)", []),
                                  ("rejected ignored (prompt -> chosen)",
                                   ["--format", "prompt-completion", "--prompt-field", "prompt",
                                    "--response-field", "chosen"])):
                out = tmp / f"{data.stem}-{len(payload)}"
                cli(["run", data, "--out", out, "--fraction", "0.5", "--num-shards", args.num_shards,
                     "--micro-batch-size", args.micro_batch_size, *reading], log)
                got = step_imbalance(out / "shards")
                payload[f"{rejected} / {plan}"] = {"rows": n, **got}
                table.append(f"| {rejected} | {plan} | {got['mean']:.3f} | {got['p95']:.3f} | {got['max']:.3f} |")
    lines = [f"Token imbalance of a DPO step (prompt + chosen + rejected words), {args.num_shards} ranks x "
             f"micro-batch {args.micro_batch_size}, default selection of half the pairs",
             "", "| rejected answer | plan | mean | p95 | max |", "|---|---|---|---|---|", *table]
    write_results("preference_balance", lines, {"commands": log, "results": payload}, argv, args.results)


if __name__ == "__main__":
    main()
