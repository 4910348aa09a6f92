"""A target embedded in the pool's feature space (features/like.py): rows in both get the pool's own features."""

import json
from pathlib import Path

import numpy as np
import pytest

from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.features.like import embedder_like, like_record, same_space
from cluster_curate.io import artifacts as A
from cluster_curate.io.datasets import open_dataset
from tiny_lm import build_llama

MATH = "Tom has {a} apples and buys {b} more. How many apples does he have?"
CODE = "Write a Python function that reverses a list of {a} items."


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        q = (MATH if i % 3 else CODE).format(a=int(rng.integers(2, 99)), b=int(rng.integers(2, 99)))
        out.append({"instruction": q, "output": f"The answer is {int(rng.integers(1, 999))}."})
    return out


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _embed(cli_runner, args):
    res = cli_runner.invoke(main, ["embed", *map(str, args), "-q"], catch_exceptions=False)
    assert res.exit_code == 0, res.output


def _pool_rows(path) -> dict[int, np.ndarray]:
    table, _ = A.read_artifact(path)
    col = table.column("embedding").combine_chunks()
    x = col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)
    return dict(zip(table.column("id").to_pylist(), x))


def _examples(path):
    return [e for b in open_dataset(str(path)).iter_batches() for e in b.examples]


def test_text_target_rows_in_the_pool_get_the_pools_features(tmp_path, cli_runner):
    pool_rows = _rows(80)
    pool = _write(tmp_path / "pool.jsonl", pool_rows)
    emb = tmp_path / "pool.parquet"
    _embed(cli_runner, [pool, "--out", emb, "--dim", "12"])
    # the target: 10 pool rows (in another order, among new rows)
    shared = [pool_rows[i] for i in (3, 9, 14, 40, 41, 55, 60, 70, 71, 79)]
    target = _write(tmp_path / "target.jsonl", _rows(5, seed=1) + shared[::-1])
    embedder, meta = embedder_like(emb)
    res = embedder.embed(_examples(target))
    got = dict(zip(res.ids.tolist(), res.embedding))
    by_text = {r["instruction"]: i for i, r in enumerate(pool_rows)}
    expected = _pool_rows(emb)
    for k, r in enumerate(shared[::-1]):
        assert np.array_equal(got[5 + k], expected[by_text[r["instruction"]]])  # bit for bit
    assert res.embedding.shape == (15, 12)
    # a target embedded on its own fits its own basis: a different space for the same rows
    own = tmp_path / "own.parquet"
    _embed(cli_runner, [target, "--out", own, "--dim", "12"])
    assert not np.allclose(_pool_rows(own)[5], got[5])


def test_refuses_what_it_cannot_reproduce(tmp_path, cli_runner):
    emb = tmp_path / "pool.parquet"
    _embed(cli_runner, [_write(tmp_path / "pool.jsonl", _rows(40)), "--out", emb, "--dim", "8"])
    key = A.sidecar_path(emb, "text.key")
    key.write_text("another fit")
    with pytest.raises(CurateError, match="not the text basis this embeddings artifact was made with"):
        embedder_like(emb)
    A.sidecar_path(emb, "text.npz").unlink()
    with pytest.raises(CurateError, match="text basis .* is missing: cannot reproduce"):
        embedder_like(emb)
    record = {"source": "x.jsonl", "fingerprint": "x", "rows": 1}
    other = tmp_path / "traj.parquet"
    meta = A.make_meta("embeddings", {"features": ["loss-trajectory"], "model": "proxy"}, {"data": record}, record)
    import pyarrow as pa
    A.write_artifact(pa.table({"id": pa.array([0], pa.int64())}), other, meta)
    with pytest.raises(CurateError, match="loss-trajectory: embedding other data --like it is not supported"):
        embedder_like(other)


def test_model_features_like_the_pool(tmp_path, cli_runner):
    llama = build_llama(tmp_path / "llama")
    pool_rows = _rows(24)
    pool = _write(tmp_path / "pool.jsonl", pool_rows)
    emb = tmp_path / "pool.parquet"
    _embed(cli_runner, [pool, "--out", emb, "--features", "text,gradient", "--model", llama, "--dim", "16",
                        "--seed", "3"])
    target = _write(tmp_path / "target.jsonl", [pool_rows[5], pool_rows[17]])
    embedder, _ = embedder_like(emb)
    res = embedder.embed(_examples(target))
    expected = _pool_rows(emb)
    assert np.allclose(res.embedding[0], expected[5], atol=1e-5)
    assert np.allclose(res.embedding[1], expected[17], atol=1e-5)


def _meta(params, rows=10):
    record = {"source": "d.jsonl", "fingerprint": "d", "rows": rows}
    return A.make_meta("embeddings", params, {"data": record}, record)


def test_same_space_checks():
    text = {"model": None, "features": ["text"], "dim": 8, "dims": {"text": 8}, "seed": 0, "text_field": "prompt",
            "text_weighting": "tf"}
    pool = _meta(text)
    target = _meta(dict(text, like=like_record("pool.parquet", pool)), rows=3)
    same_space(pool, target)  # embedded --like this pool
    with pytest.raises(CurateError, match="embed TARGET --like POOL_EMBEDDINGS"):
        same_space(pool, _meta(text, rows=3))  # its own text basis
    other_pool = _meta(dict(text, seed=1))
    with pytest.raises(CurateError, match="a different embeddings artifact than the pool's"):
        same_space(other_pool, target)
    model = {"model": "org/model", "features": ["hidden"], "dim": 16, "dims": {"hidden": 16}, "seed": 0}
    same_space(_meta(model), _meta(model, rows=3))  # nothing fitted on the pool: same options, same space
    with pytest.raises(CurateError, match="field dim: 32 differs from the pool's 16"):
        same_space(_meta(model), _meta(dict(model, dim=32, dims={"hidden": 32}), rows=3))
