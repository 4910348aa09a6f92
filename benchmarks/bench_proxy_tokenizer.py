"""Which tokenizer should the built-in proxy train: byte-level BPE or words? Measured, not guessed.

Data: a mixture of GSM8K (math word problems) and Code Alpaca (coding instructions), N rows of each, in one
JSONL with the source as a hidden label. For each tokenizer, `cluster-curate embed` with the default proxy
(`gradient` features), then:
  * tokens per row and the share of <|unk|> tokens (speed and lossless-ness),
  * warm-up and feature seconds,
  * 10-NN source purity of the features (cosine): how often an example's nearest neighbours come from its
    own source, a coarse check that the features group what teaches the same thing.

    .venv/bin/python benchmarks/bench_proxy_tokenizer.py [--rows 1000]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import common

DATA = common.DATA


def mixture(n: int, path: Path) -> np.ndarray:
    rows, labels = [], []
    with open(DATA / "gsm8k" / "train.jsonl") as f:
        for line, _ in zip(f, range(n)):
            r = json.loads(line)
            rows.append({"instruction": r["question"], "input": "", "output": r["answer"]})
            labels.append(0)
    code = json.loads((DATA / "code_alpaca" / "code_alpaca_2k.json").read_text())[:n]
    rows.extend({"instruction": r["instruction"], "input": r.get("input", ""), "output": r["output"]} for r in code)
    labels.extend([1] * len(code))
    order = np.random.default_rng(0).permutation(len(rows))
    path.write_text("".join(json.dumps(rows[i]) + "\n" for i in order))
    return np.asarray(labels)[order]


def knn_purity(x: np.ndarray, labels: np.ndarray, k: int = 10) -> float:
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    nn = np.argpartition(-sims, k, axis=1)[:, :k]
    return float((labels[nn] == labels[:, None]).mean())


def main() -> None:
    ap = common.parser(__doc__)
    ap.add_argument("--rows", type=int, default=1000, help="rows of each source")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    results = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        data = tmp / "mix.jsonl"
        labels = mixture(args.rows, data)
        for kind in ("bpe", "word"):
            out = tmp / f"{kind}.parquet"
            res = subprocess.run([sys.executable, "-m", "cluster_curate", "embed", str(data), "--out", str(out),
                                  "--proxy-tokenizer", kind, "--on-bad-row", "skip", "--json"], capture_output=True, text=True, env=env)
            if res.returncode:
                raise SystemExit(res.stderr[-2000:])
            s = json.loads(res.stdout.strip().splitlines()[-1])
            from cluster_curate.features.models import encode_examples
            from cluster_curate.io.proxy_store import load_proxy_gpt
            from cluster_curate.io.artifacts import read_artifact
            from cluster_curate.io.datasets import open_dataset
            table, _ = read_artifact(out)
            col = table.column("embedding").combine_chunks()
            x = col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)
            _, tok = load_proxy_gpt(tmp / f"{kind}.proxy")
            from cluster_curate.io.datasets import ReadOptions
            examples = [ex for b in open_dataset(str(data), ReadOptions(on_bad_row="skip")).iter_batches()
                        for ex in b.examples][:500]
            enc, _ = encode_examples(tok, examples, 1024)
            ids = np.concatenate([e.input_ids for e in enc])
            unk = float(np.mean(ids == tok.unk_token_id)) if tok.unk_token_id is not None else 0.0
            results.append({"tokenizer": kind, "tokens_per_row": round(float(table.column("n_tokens").to_numpy().mean()), 1),
                            "unk_share": round(unk, 4), "warmup_s": s["warmup_seconds"],
                            "feature_s": s["feature_seconds"], "knn10_source_purity": round(knn_purity(x, labels[table.column("id").to_numpy()]), 4)})
            print(results[-1], flush=True)
        text = tmp / "text.parquet"
        subprocess.run([sys.executable, "-m", "cluster_curate", "embed", str(data), "--out", str(text), "--features",
                        "text", "--on-bad-row", "skip", "-q"], check=True, env=env)
        from cluster_curate.io.artifacts import read_artifact
        t, _ = read_artifact(text)
        col = t.column("embedding").combine_chunks()
        results.append({"tokenizer": "(text features, reference)", "tokens_per_row": None, "unk_share": None,
                        "warmup_s": None, "feature_s": None,
                        "knn10_source_purity": round(knn_purity(col.values.to_numpy().reshape(len(col), -1),
                                                                 labels[t.column("id").to_numpy()]), 4)})
    cols = list(results[0])
    table_md = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n" + "".join(
        "| " + " | ".join(str(r[c]) for c in cols) + " |\n" for r in results)
    common.write_results("proxy_tokenizer", f"# Proxy tokenizer: byte-level BPE vs words\n\nGSM8K + Code Alpaca, "
                         f"{args.rows} rows each, default proxy, `gradient` features.\n\n" + table_md,
                         {"rows_per_source": args.rows, "results": results})


if __name__ == "__main__":
    main()
