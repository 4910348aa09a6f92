"""`embed TARGET --like POOL`: the target in the pool's feature space (rows in both get the pool's own features),
and what cannot be reproduced is refused (commands/embed.py, features/like.py)."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.features.like import like_record, same_space
from cluster_curate.io import artifacts as A
from cluster_curate.io import names
from cluster_curate.io.writer import write_artifact
from cluster_curate.io.readers import read_embeddings
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


def _cli(cli_runner, args, code=0):
    res = cli_runner.invoke(main, [*map(str, args), "-q"])
    assert res.exit_code == code, res.output
    return res


def _by_id(path) -> dict[int, np.ndarray]:
    ids, x, _ = read_embeddings(path)
    return dict(zip(ids.tolist(), x))


@pytest.mark.parametrize("weighting", ["tf", "slot"])
def test_text_target_rows_in_the_pool_get_the_pools_features(tmp_path, cli_runner, weighting):
    pool_rows = _rows(80)
    emb = tmp_path / "pool.parquet"
    _cli(cli_runner, ["embed", _write(tmp_path / "pool.jsonl", pool_rows), "--out", emb, "--dim", "12",
                      "--text-weighting", weighting])
    shared = [pool_rows[i] for i in (3, 9, 14, 40, 41, 55, 60, 70, 71, 79)]
    target = _write(tmp_path / "target.jsonl", _rows(5, seed=1) + shared[::-1])  # new rows, then pool rows
    out = tmp_path / "target.parquet"
    _cli(cli_runner, ["embed", target, "--like", emb, "--out", out])
    got, expected = _by_id(out), _by_id(emb)
    by_text = {r["instruction"]: i for i, r in enumerate(pool_rows)}
    for k, r in enumerate(shared[::-1]):
        assert np.array_equal(got[5 + k], expected[by_text[r["instruction"]]])  # bit for bit
    meta = A.read_meta(out)
    assert meta.params["like"] == like_record(emb, A.read_meta(emb)) and meta.params["dims"] == {"text": 12}
    assert not A.sidecar_path(out, names.feature_state('text')[0]).exists()  # nothing fitted on the target
    # a target embedded on its own fits its own basis: another space for the same rows, refused by same_space
    own = tmp_path / "own.parquet"
    _cli(cli_runner, ["embed", target, "--out", own, "--dim", "12", "--text-weighting", weighting])
    assert not np.allclose(_by_id(own)[5], got[5])
    with pytest.raises(CurateError, match="embed TARGET --like POOL_EMBEDDINGS"):
        same_space(A.read_meta(emb), A.read_meta(own))
    same_space(A.read_meta(emb), meta)


def test_refuses_what_it_cannot_reproduce(tmp_path, cli_runner):
    emb = tmp_path / "pool.parquet"
    target = _write(tmp_path / "t.jsonl", _rows(4, seed=2))
    _cli(cli_runner, ["embed", _write(tmp_path / "pool.jsonl", _rows(40)), "--out", emb, "--dim", "8"])
    res = _cli(cli_runner, ["embed", target, "--like", emb, "--out", tmp_path / "a.parquet", "--dim", "16"], code=2)
    assert "--dim 16: --like" in res.output and "where it is 8" in res.output
    # a pool embedded at the default --dim: it said 'where it is unset', as if any --dim would do
    default = tmp_path / "default.parquet"
    _cli(cli_runner, ["embed", tmp_path / "pool.jsonl", "--out", default])
    res = _cli(cli_runner, ["embed", target, "--like", default, "--out", tmp_path / "a.parquet", "--dim", "16"], code=2)
    assert "where it is the default (text 256 dims); leave --dim out" in res.output, res.output
    A.sidecar_path(emb, names.feature_state('text')[1]).write_text("another fit")
    res = _cli(cli_runner, ["embed", target, "--like", emb, "--out", tmp_path / "b.parquet"], code=2)
    assert "not the text state" in res.output and "Traceback" not in res.output
    A.sidecar_path(emb, names.feature_state('text')[0]).unlink()
    res = _cli(cli_runner, ["embed", target, "--like", emb, "--out", tmp_path / "c.parquet"], code=2)
    assert "text state" in res.output and "is missing: cannot reproduce" in res.output
    record = {"source": "x.jsonl", "fingerprint": "x", "rows": 1}
    traj = tmp_path / "traj.parquet"
    write_artifact(pa.table({"id": pa.array([0], pa.int64())}), traj,
                     A.make_meta("embeddings", {"features": ["loss-trajectory"], "model": "proxy"}, {"data": record},
                                 record))
    res = _cli(cli_runner, ["embed", target, "--like", traj, "--out", tmp_path / "d.parquet"], code=2)
    assert "loss-trajectory: embedding other data --like it is not supported" in res.output
    assert not any((tmp_path / f"{x}.parquet").exists() for x in "abcd")  # nothing half-written


def test_model_features_like_the_pool(tmp_path, cli_runner):
    llama = build_llama(tmp_path / "llama")
    pool_rows = _rows(24)
    emb = tmp_path / "pool.parquet"
    _cli(cli_runner, ["embed", _write(tmp_path / "pool.jsonl", pool_rows), "--out", emb, "--features",
                      "text,gradient", "--model", llama, "--dim", "16", "--seed", "3"])
    out = tmp_path / "t.parquet"
    _cli(cli_runner, ["embed", _write(tmp_path / "t.jsonl", [pool_rows[5], pool_rows[17]]), "--like", emb,
                      "--out", out])
    got, expected = _by_id(out), _by_id(emb)
    assert np.allclose(got[0], expected[5], atol=1e-5) and np.allclose(got[1], expected[17], atol=1e-5)
    assert A.read_meta(out).params["dims"] == {"text": 16, "gradient": 16}


def _meta(params, rows=10):
    record = {"source": "d.jsonl", "fingerprint": "d", "rows": rows}
    return A.make_meta("embeddings", params, {"data": record}, record)


def test_same_space_checks():
    text = {"model": None, "features": ["text"], "dim": 8, "dims": {"text": 8}, "seed": 0}
    pool = _meta(text)
    target = _meta(dict(text, like=like_record("pool.parquet", pool)), rows=3)
    same_space(pool, target)
    with pytest.raises(CurateError, match="another embeddings artifact than the pool's"):
        same_space(_meta(dict(text, seed=1)), target)
    model = {"model": "org/model", "features": ["hidden"], "dim": 16, "dims": {"hidden": 16}, "seed": 0}
    same_space(_meta(model), _meta(model, rows=3))  # nothing fitted on the pool: same options, same space
    with pytest.raises(CurateError, match="field dim: 32 differs from the pool's 16"):
        same_space(_meta(model), _meta(dict(model, dim=32, dims={"hidden": 32}), rows=3))


def test_proxy_features_like_the_pool(tmp_path, cli_runner):
    """--like reuses the proxy trained on the pool (saved beside it), and refuses when it was re-trained since."""
    pool_rows = _rows(40)
    emb = tmp_path / "pool.parquet"
    _cli(cli_runner, ["embed", _write(tmp_path / "pool.jsonl", pool_rows), "--out", emb, "--features", "hidden",
                      "--dim", "8", "--proxy-size", "tiny", "--proxy-steps", "3", "--proxy-vocab", "300"])
    out = tmp_path / "t.parquet"
    _cli(cli_runner, ["embed", _write(tmp_path / "t.jsonl", pool_rows[7:9]), "--like", emb, "--out", out])
    got, expected = _by_id(out), _by_id(emb)
    assert np.allclose(got[0], expected[7], atol=1e-5) and np.allclose(got[1], expected[8], atol=1e-5)
    config = A.sidecar_path(emb, names.PROXY) / "config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps(dict(saved, key="another training")))
    res = _cli(cli_runner, ["embed", tmp_path / "t.jsonl", "--like", emb, "--out", tmp_path / "u.parquet"], code=2)
    assert "not the proxy" in res.output and "Traceback" not in res.output


def test_an_overwrite_stopped_before_its_end_leaves_the_pools_text_state(tmp_path, cli_runner, monkeypatch):
    """`embed --overwrite` of other options fitted its text state beside the artifact in place, then stopped: the
    artifact was the old one, its state the new one's, and `--like` refused the pool (re-embedding was the only way
    out). The state in place is kept until the new artifact is whole."""
    from cluster_curate.commands import embed_parts
    pool = _write(tmp_path / "pool.jsonl", _rows(80))
    emb = tmp_path / "pool.parquet"
    _cli(cli_runner, ["embed", pool, "--out", emb, "--dim", "12"])
    target = _write(tmp_path / "target.jsonl", _rows(5, seed=1))
    _cli(cli_runner, ["embed", target, "--like", emb, "--out", tmp_path / "t1.parquet"])
    before = emb.read_bytes()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(embed_parts, "feature_pass", stopped)
    res = cli_runner.invoke(main, ["embed", str(pool), "--out", str(emb), "--dim", "8", "--overwrite", "-q"])
    assert res.exit_code == 130 and emb.read_bytes() == before, res.output
    monkeypatch.undo()
    assert A.sidecar_path(emb, "text.prev.key").exists()  # the new state beside it, the artifact's kept
    _cli(cli_runner, ["embed", target, "--like", emb, "--out", tmp_path / "t2.parquet"])
    assert _by_id(tmp_path / "t2.parquet").keys() == _by_id(tmp_path / "t1.parquet").keys()
    assert all(np.array_equal(a, b) for a, b in zip(_by_id(tmp_path / "t1.parquet").values(),
                                                    _by_id(tmp_path / "t2.parquet").values()))
    _cli(cli_runner, ["embed", pool, "--out", emb, "--dim", "8", "--overwrite"])  # whole: the kept state goes
    assert sorted(p.name for p in tmp_path.glob("pool.*")) == ["pool.jsonl", "pool.parquet", "pool.text.key",
                                                               "pool.text.npz"]
    _cli(cli_runner, ["embed", target, "--like", emb, "--out", tmp_path / "t3.parquet"])
