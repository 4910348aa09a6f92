"""Synthetic raw datasets and selection artifacts for the shard tests (no select command needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from cluster_curate.io.artifacts import make_meta, read_meta
from cluster_curate.io.writer import write_artifact
from cluster_curate.io.datasets import open_dataset


def make_dataset(path: Path, n: int, seed: int = 0, extra: dict | None = None) -> Path:
    """A question/answer JSONL with lengths that vary, a nested column and any `extra` columns."""
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "apples", "pencils", "sum", "total", "price", "train"]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            q = " ".join(rng.choice(words, int(rng.integers(3, 40)))) + f" #{i}?"
            a = " ".join(rng.choice(words, int(rng.integers(2, 120)))) + f" #### {i}"
            rec = {"question": q, "answer": a, "meta": {"source": f"s{i % 3}", "level": int(i % 5)}}
            for k, v in (extra or {}).items():
                rec[k] = v(i) if callable(v) else v
            f.write(json.dumps(rec) + "\n")
    return path


def make_selection(path: Path, data: Path, *, k: int = 4, fraction: float = 0.5, seed: int = 0,
                   n_tokens: bool = False, cluster_sizes: bool = True, equal_quotas: bool = False,
                   clusters_path: str | None = None, embeddings_path: str | None = None) -> dict:
    """A `selection` artifact over `data`: random clusters, a random subset (equal quotas when asked).

    Returns {"ids", "clusters", "sizes" (n_c per cluster 0..k-1), "tokens" (when n_tokens)}."""
    rec = open_dataset(str(data)).record()
    n = rec["rows"]
    rng = np.random.default_rng(seed)
    p = np.arange(1, k + 1, dtype=float)
    all_clusters = rng.choice(k, size=n, p=p / p.sum())
    sizes = np.bincount(all_clusters, minlength=k)
    if equal_quotas:
        q = int(sizes.min() * fraction)
        ids = np.sort(np.concatenate([rng.choice(np.flatnonzero(all_clusters == c), q, replace=False) for c in range(k)]))
    else:
        ids = np.sort(rng.choice(n, int(n * fraction), replace=False))
    clusters = all_clusters[ids]
    cols = {"id": pa.array(ids, pa.int64()), "cluster": pa.array(clusters, pa.int64()),
            "rank_in_cluster": pa.array(np.zeros(ids.size, dtype=np.int64))}
    tokens = None
    if n_tokens:
        tokens = rng.integers(10, 500, size=ids.size)
        cols["n_tokens"] = pa.array(tokens, pa.int64())
    # a shuffled row order: shard must not depend on how the selection file is sorted
    perm = rng.permutation(ids.size)
    table = pa.table(cols).take(pa.array(perm))
    params = {"fraction": fraction, "seed": seed}
    if cluster_sizes:
        params["cluster_sizes"] = sizes.tolist()
    def recorded(p, kind, fallback):  # an input as the tool records it: with the fingerprint it has now
        return {"path": p, "kind": kind, "fingerprint": read_meta(p).fingerprint if p else fallback, "rows": n}
    inputs = {"clusters": recorded(clusters_path, "clusters", "c0")}
    inputs["clusters"]["path"] = clusters_path or "gone.parquet"
    if embeddings_path:
        inputs["embeddings"] = recorded(embeddings_path, "embeddings", "e0")
    write_artifact(table, path, make_meta("selection", params, inputs, rec), overwrite=True)
    return {"ids": ids, "clusters": clusters, "sizes": sizes, "tokens": tokens}
