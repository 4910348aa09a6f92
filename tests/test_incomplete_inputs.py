"""Inputs that are not all there: an `embed` job array read before every piece has finished (refused, or used
with --force and a warning naming the missing rows), and recorded data that moved (the error says the path came
from the artifact's lineage and that --data is the way out)."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES
from conftest import cli_in_process as _cli

pytestmark = pytest.mark.slow  # pipelines of several commands

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
EMBED = ["--features", "text", "--dim", "16", "--commit-every", "16"]


def _ok(*argv, cwd):
    r = _cli(*argv, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


def test_a_job_array_piece_run_with_other_options_is_refused_not_mixed_in(tmp_path):
    """A piece run with another --dim (or --model, --features: any option or data of the plan) wrote its part
    beside the first piece's, and `cluster` read the two feature spaces as one artifact without a word. It is
    refused in one line, its part not written; --overwrite starts the artifact over with its options."""
    (tmp_path / "d.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:120]))
    _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "0", *EMBED, "-q", cwd=tmp_path)
    other = [a if a != "16" else "24" for a in EMBED[:4]] + EMBED[4:]  # --dim 24
    r = _cli("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "1", *other, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == (
        "ERROR: emb: holds parts of a run with other parameters or data; every part of a job runs the same command "
        "(pass --overwrite to start the artifact over, or use a fresh output)"), r.stderr
    assert sorted(p.name for p in (tmp_path / "emb").iterdir()) == ["part-00000-of-00002.parquet"]
    _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "1", *other, "--overwrite", "-q",
        cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "emb").iterdir()) == ["part-00001-of-00002.parquet"]
    _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "0", *other, "-q", cwd=tmp_path)
    _ok("cluster", "emb", "--out", "c.parquet", "--k", "4", "-q", cwd=tmp_path)  # one feature space, whole


def test_a_job_array_embedding_is_refused_until_every_piece_is_written(tmp_path):
    (tmp_path / "d.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:120]))
    (tmp_path / "t.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[200:240]))
    _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "0", *EMBED, "-q", cwd=tmp_path)

    r = _cli("cluster", "emb", "--out", "c.parquet", "--k", "4", cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ERROR: emb: incomplete: 64 of 120 rows embedded (1 of 2 parts written, "
                                               "part-00001-of-00002.parquet missing)"), r.stderr
    assert "--force" in err[0] and "--part-index" in err[0]
    assert not (tmp_path / "c.parquet").exists()

    r = _ok("cluster", "emb", "--out", "cf.parquet", "--k", "4", "--force", "--json", cwd=tmp_path)
    d = json.loads(r.stdout)
    assert d["rows"] == 64
    assert [w for w in d["warnings"] if "incomplete" in w] == [
        "emb: incomplete (--force): using 64 of 120 rows (1 of 2 parts written, part-00001-of-00002.parquet "
        "missing); 56 rows not embedded (ids 16-31, 48-63, 80-95, 112-119)"]

    # select reads the pool's vectors: refused too, and --force goes on with the warning once
    r = _cli("select", "cf.parquet", "--out", "s.parquet", "--fraction", "0.3", "--within", "diverse", cwd=tmp_path)
    assert r.returncode == 2 and "emb: incomplete" in r.stderr
    r = _ok("select", "cf.parquet", "--out", "s.parquet", "--fraction", "0.3", "--within", "diverse", "--force",
            "--json", cwd=tmp_path)
    assert sum("incomplete" in w for w in json.loads(r.stdout)["warnings"]) == 1

    # embed --like reads the pool's feature space (written by piece 0), not its rows: fine; an incomplete target
    # artifact is refused by select --target
    _ok("embed", "t.jsonl", "--like", "emb", "--out", "t_emb.parquet", "-q", cwd=tmp_path)
    _ok("embed", "t.jsonl", "--like", "emb", "--out", "t_parts", "--num-parts", "2", "--part-index", "0",
        "--commit-every", "8", "-q", cwd=tmp_path)

    _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "1", *EMBED, "-q", cwd=tmp_path)
    r = _ok("cluster", "emb", "--out", "c.parquet", "--k", "4", "--json", cwd=tmp_path)
    d = json.loads(r.stdout)
    assert d["rows"] == 120 and not any("incomplete" in w for w in d["warnings"])
    r = _cli("select", "c.parquet", "--out", "st.parquet", "--budget", "20", "--target", "t_parts", cwd=tmp_path)
    assert r.returncode == 2 and "t_parts: incomplete: 24 of 40 rows embedded" in r.stderr, r.stderr
    _ok("select", "c.parquet", "--out", "st.parquet", "--budget", "20", "--target", "t_emb.parquet", "-q",
        cwd=tmp_path)


def test_the_rows_a_missing_part_holds_are_told_from_the_exact_duplicates_no_part_embeds(tmp_path):
    """Review: the ids in no written part were said to hold exact duplicates where the data has none, and, where it
    has some, listed those with the missing part's rows. The duplicates the metadata lists are left out of them."""
    lines = GSM.read_text().splitlines(keepends=True)
    (tmp_path / "d.jsonl").write_text("".join(lines[:120] + lines[:8]))  # ids 120-127 copies of 0-7
    for part in ("0", "1"):
        _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", part, *EMBED, "-q", cwd=tmp_path)
    (tmp_path / "emb" / "part-00001-of-00002.parquet").unlink()
    d = json.loads(_ok("cluster", "emb", "--out", "c.parquet", "--k", "4", "--force", "--json", cwd=tmp_path).stdout)
    assert [w for w in d["warnings"] if "incomplete" in w] == [
        "emb: incomplete (--force): using 64 of 128 rows (1 of 2 parts written, part-00001-of-00002.parquet "
        "missing); 56 rows not embedded (ids 16-31, 48-63, 80-95, 112-119)"]


def test_the_incomplete_warning_is_given_once_by_each_command_also_in_one_python_process(tmp_path, monkeypatch,
                                                                                             api_warnings):
    """cluster checked the parts twice (before any work, and again when reading the vectors), and hid the second
    warning by looking it up among the warnings already given: a second cc.cluster (or select) on the same
    artifact in one Python process then gave none. Each command now checks once and warns once."""
    import cluster_curate as cc
    (tmp_path / "d.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:120]))
    _ok("embed", "d.jsonl", "--out", "emb", "--num-parts", "2", "--part-index", "0", *EMBED, "-q", cwd=tmp_path)
    monkeypatch.chdir(tmp_path)
    for out in ("c1.parquet", "c2.parquet"):
        before = len(api_warnings)
        cc.cluster("emb", out, k=4, force=True)
        assert sum("emb: incomplete (--force)" in w for w in api_warnings[before:]) == 1, api_warnings
    before = len(api_warnings)
    cc.select("c2.parquet", "s.parquet", fraction=0.3, within="diverse", force=True)
    assert sum("emb: incomplete (--force)" in w for w in api_warnings[before:]) == 1, api_warnings


def test_moved_recorded_data_says_where_the_path_came_from_and_suggests_data(tmp_path):
    proj = tmp_path / "proj_a"
    proj.mkdir()
    (proj / "data.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:120]))
    _ok("run", "data.jsonl", "--out", "cur", "--features", "text", "--dim", "16", "--k", "6", "--fraction", "0.3",
        "--num-shards", "2", "--micro-batch-size", "2", "-q", cwd=proj)
    shutil.move(proj, tmp_path / "proj_b")
    # the folder moved with its data: the data is found beside it (commands/common.relocated)
    _ok("cluster", "proj_b/cur/embeddings.parquet", "--out", "c0.parquet", "--k", "4", "--kinds", "answers", "-q",
        cwd=tmp_path)
    shutil.move(tmp_path / "proj_b" / "data.jsonl", tmp_path / "elsewhere.jsonl")  # moved apart: not found
    r = _cli("cluster", "proj_b/cur/embeddings.parquet", "--out", "c.parquet", "--k", "4", "--kinds", "answers",
             cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith(f"ERROR: data.jsonl (the dataset embeddings.parquet records; recorded from "
                               f"{proj / 'data.jsonl'}): no such file or directory; pass --data DATA"), r.stderr
    # --data is the way out; from inside the moved folder the relative path is found again
    _ok("cluster", "proj_b/cur/embeddings.parquet", "--out", "c.parquet", "--k", "4", "--kinds", "answers",
        "--data", "elsewhere.jsonl", "-q", cwd=tmp_path)
    shutil.move(tmp_path / "elsewhere.jsonl", tmp_path / "proj_b" / "data.jsonl")
    _ok("cluster", "cur/embeddings.parquet", "--out", "c2.parquet", "--k", "4", "--kinds", "answers", "-q",
        cwd=tmp_path / "proj_b")
    # from inside the moved run folder, the artifact named alone: its data is one folder up (the folder of a bare
    # name is '.', whose parent was '.' again)
    _ok("shard", "selection.parquet", "--out", "../s", "--num-shards", "2", "-q", cwd=tmp_path / "proj_b" / "cur")
