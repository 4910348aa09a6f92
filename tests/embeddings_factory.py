"""Synthetic embeddings artifacts for the cluster / select tests (written through the real artifact layer)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cluster_curate.io import artifacts as A
from cluster_curate.io import writer as W


def mixture(n: int, d: int = 16, groups: int = 5, seed: int = 0, noise: float = 0.3,
            weights=None) -> tuple[np.ndarray, np.ndarray]:
    """n rows drawn from `groups` Gaussian blobs (unit-norm centres, isotropic noise); returns (x, group)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((groups, d)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    p = None if weights is None else np.asarray(weights, dtype=np.float64) / np.sum(weights)
    group = rng.choice(groups, size=n, p=p)
    x = centres[group] + rng.standard_normal((n, d)).astype(np.float32) * np.float32(noise / np.sqrt(d))
    return x.astype(np.float32), group


def embeddings_table(x: np.ndarray, ids=None, n_tokens=None, loss=None, with_loss: bool = True) -> pa.Table:
    n, d = x.shape
    ids = np.arange(n) if ids is None else np.asarray(ids)
    rng = np.random.default_rng(123)
    cols = {
        "id": pa.array(ids, pa.int64()),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(x, np.float32).ravel()), d),
        "n_tokens": pa.array(rng.integers(10, 500, n) if n_tokens is None else n_tokens, pa.int32()),
        "n_response_tokens": pa.array(rng.integers(1, 200, n), pa.int32()),
    }
    if with_loss:
        cols["loss"] = pa.array(rng.random(n).astype(np.float32) * 3 if loss is None else loss, pa.float32())
    return pa.table(cols)


def dataset_record(fingerprint: str = "synthetic", rows: int = 0) -> dict:
    return {"source": f"{fingerprint}.jsonl", "fingerprint": fingerprint, "rows": rows}


def write_embeddings(path, x: np.ndarray, *, fingerprint: str = "synthetic", kind: str = "embeddings",
                     parts: int = 1, **table_kw) -> A.ArtifactMeta:
    """Write x as an embeddings artifact (a file, or a directory of `parts` part files in shuffled order)."""
    table = embeddings_table(x, **table_kw)
    record = dataset_record(fingerprint, len(x))
    meta = A.make_meta(kind, {"features": "synthetic"}, {"data": record}, record)
    if parts == 1:
        return W.write_artifact(table, path, meta)
    bounds = np.linspace(0, len(x), parts + 1).astype(int)
    for i in range(parts):
        W.write_part(table.slice(bounds[i], bounds[i + 1] - bounds[i]), path, f"part-{i:05d}.parquet", meta)
    meta.rows = len(x)
    return meta
