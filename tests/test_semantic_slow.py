"""`embed --features semantic` (the bundled all-MiniLM-L6-v2) across processes, for real: 2 torchrun processes
(gloo on CPU) and 2 job-array pieces give the 1-process artifact bit for bit, and a run killed with SIGKILL
after its first committed chunk, restarted with --resume, gives the artifact of an uninterrupted run bit for
bit. Slow (several Python processes, each loading the encoder)."""

from __future__ import annotations

import numpy as np
import pytest

from cluster_curate.io.artifacts import read_artifact

from test_embed_slow import _data, _emb, _embed, _kill_after_first_chunk

pytestmark = pytest.mark.slow
COMMON = ["--features", "text,semantic", "--dim", "16", "--batch-tokens", "2000"]


def _assert_bit_identical(a_path, b_path):
    a, ma = read_artifact(a_path, kind="embeddings")
    b, mb = read_artifact(b_path, kind="embeddings")
    assert a.column("id").to_pylist() == b.column("id").to_pylist()
    assert np.array_equal(_emb(a), _emb(b))  # bit for bit, not within a tolerance
    assert a.column("n_tokens").equals(b.column("n_tokens"))
    assert a.column("n_response_tokens").equals(b.column("n_response_tokens"))
    assert ma.fingerprint == mb.fingerprint and ma.params["semantic"] == mb.params["semantic"]


def test_semantic_two_processes_and_two_pieces_equal_one_process(tmp_path):
    data = _data(tmp_path, 90)
    common = [str(data), *COMMON, "--commit-every", "20"]
    one = _embed([*common, "--out", str(tmp_path / "one.parquet")])
    assert one["rows"] == 90 and one["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"
    two = _embed([*common, "--out", str(tmp_path / "two")], torchrun=2)
    assert two["process"] == "rank 0/2" and two["complete"] and two["artifact_rows"] == 90
    _assert_bit_identical(tmp_path / "one.parquet", tmp_path / "two")
    for i in range(2):
        _embed([*common, "--out", str(tmp_path / "pieces"), "--num-parts", "2", "--part-index", str(i)])
    _assert_bit_identical(tmp_path / "one.parquet", tmp_path / "pieces")


def test_semantic_resume_after_sigkill_is_bit_identical(tmp_path):
    data = _data(tmp_path, 240)
    out = tmp_path / "killed.parquet"
    common = [str(data), *COMMON, "--commit-every", "24"]
    committed = _kill_after_first_chunk([*common, "--out", str(out)], tmp_path / "killed.partial")
    assert not out.exists() and 1 <= len(committed) < 10
    resumed = _embed([*common, "--out", str(out), "--resume"])
    assert resumed["chunks_resumed"] >= len(committed) and resumed["rows"] == 240
    _embed([*common, "--out", str(tmp_path / "fresh.parquet")])
    _assert_bit_identical(out, tmp_path / "fresh.parquet")
