"""Lineage that does not depend on where things are (issue 20 #6, #7, #12): a pipeline folder copied elsewhere
works from another working directory, reads its own inputs (never another folder's), artifacts are the same
bytes whatever the output folder, and `report` refuses artifacts that do not belong together."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster_curate.io.artifacts import read_meta
from conftest import FIXTURES

pytestmark = pytest.mark.slow  # a few pipelines as real subprocesses

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
ALPACA = FIXTURES / "code_alpaca" / "code_alpaca-300.json"
FAST = ["--features", "text", "--dim", "16", "--k", "6", "--fraction", "0.31", "--num-shards", "2",
        "--micro-batch-size", "2"]


def _cli(*argv, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    r = subprocess.run([sys.executable, "-m", "cluster_curate", *map(str, argv)], cwd=cwd, capture_output=True,
                       text=True, env=env, timeout=300)
    return r


def _ok(*argv, cwd):
    r = _cli(*argv, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


def _digests(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_artifacts_are_the_same_bytes_whatever_the_output_folder(tmp_path):
    (tmp_path / "data.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:120]))
    for out in ("a/p", "b/deeper/still/p"):
        _ok("run", "data.jsonl", "--out", out, *FAST, "-q", cwd=tmp_path)
    a, b = _digests(tmp_path / "a" / "p"), _digests(tmp_path / "b" / "deeper" / "still" / "p")
    assert a == b and len(a) >= 10
    rec = read_meta(tmp_path / "a" / "p" / "clusters.parquet").inputs["embeddings"]
    assert rec["path"] == "embeddings.parquet"  # relative to the folder holding the artifact


def test_a_copied_pipeline_folder_works_from_another_directory(tmp_path):
    data = tmp_path / "data" / "gsm.jsonl"
    data.parent.mkdir()
    data.write_text("".join(GSM.read_text().splitlines(keepends=True)[:120]))
    _ok("run", data, "--out", "p", *FAST, "-q", cwd=tmp_path)
    moved = tmp_path / "reloc" / "p"
    shutil.copytree(tmp_path / "p", moved)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the embeddings of the original folder change: the copy must read its own, never these
    _ok("embed", ALPACA, "--out", tmp_path / "p" / "embeddings.parquet", "--features", "text", "--dim", "16",
        "--overwrite", "-q", cwd=tmp_path)
    rel = Path("..") / "reloc" / "p"
    _ok("select", rel / "clusters.parquet", "--out", "s.parquet", "--fraction", "0.31", "--within", "diverse", "-q",
        cwd=elsewhere)
    sel = read_meta(elsewhere / "s.parquet")
    assert sel.inputs["embeddings"]["fingerprint"] == read_meta(moved / "embeddings.parquet").fingerprint
    assert sel.inputs["embeddings"]["path"] == "../reloc/p/embeddings.parquet"
    # with the default order the copy's n_tokens still reach shard: tokens, not whitespace words
    _ok("select", rel / "clusters.parquet", "--out", "s2.parquet", "--fraction", "0.31", "-q", cwd=elsewhere)
    r = _ok("shard", "s2.parquet", "--data", data, "--out", "sh", "--num-shards", "2", "--micro-batch-size", "2",
            "--json", cwd=elsewhere)
    assert "whitespace" not in r.stderr
    manifest = json.loads((elsewhere / "sh" / "manifest.json").read_text())
    assert manifest["tokens"]["source"] == "selection n_tokens", manifest["tokens"]
    # report follows the copy's lineage from the shards back to its embeddings
    r = _ok("report", rel, "--out", "rep", "--json", cwd=elsewhere)
    assert sorted(p.name for p in (elsewhere / "rep").iterdir()) == ["cluster_sizes.png", "features_pca.png",
                                                                     "rank_loads.png"]
    # the original folder now holds embeddings of another dataset: report refuses to mix them
    r = _cli("report", tmp_path / "p" / "embeddings.parquet", moved / "clusters.parquet", cwd=elsewhere)
    assert r.returncode == 2 and "was made from another embeddings artifact than" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--force" in r.stderr
    r = _cli("report", tmp_path / "p" / "embeddings.parquet", moved / "clusters.parquet", "--force", "--json",
             cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    # a recorded input that is gone is said, not silently dropped (the selection then has no n_tokens)
    (moved / "embeddings.parquet").unlink()
    r = _ok("select", rel / "clusters.parquet", "--out", "s3.parquet", "--fraction", "0.31", cwd=elsewhere)
    assert "the recorded embeddings embeddings.parquet is not there; the selection gets no n_tokens" in r.stderr
