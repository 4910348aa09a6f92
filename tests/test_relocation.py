"""Lineage that does not depend on where things are (issue 20 #6, #7, #12): a pipeline folder copied elsewhere
works from another working directory, reads its own inputs (never another folder's), artifacts are the same
bytes whatever the output folder, and `report` refuses artifacts that do not belong together. Raw data given by a
relative path is found again from another working directory."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from cluster_curate.io.artifacts import read_meta
from conftest import FIXTURES
from conftest import cli_in_process as _cli

pytestmark = pytest.mark.slow  # a few pipelines each

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
ALPACA = FIXTURES / "code_alpaca" / "code_alpaca-300.json"
FAST = ["--features", "text", "--dim", "16", "--k", "6", "--fraction", "0.31", "--num-shards", "2",
        "--micro-batch-size", "2"]


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
    # with the default order the copy's n_tokens still reach shard (not the words of a pass over the data)
    _ok("select", rel / "clusters.parquet", "--out", "s2.parquet", "--fraction", "0.31", "-q", cwd=elsewhere)
    r = _ok("shard", "s2.parquet", "--data", data, "--out", "sh", "--num-shards", "2", "--micro-batch-size", "2",
            "--json", cwd=elsewhere)
    assert "no token counts in the selection" not in r.stderr  # the selection's, found through the copy's lineage
    manifest = json.loads((elsewhere / "sh" / "manifest.json").read_text())
    assert manifest["tokens"]["source"] == "selection n_tokens: whitespace words (no model tokenizer)", \
        manifest["tokens"]  # text features: the embeddings' n_tokens are words, as select said and shard says now
    # report follows the copy's lineage from the shards back to its embeddings
    r = _ok("report", rel, "--out", "rep", "--json", cwd=elsewhere)
    assert sorted(p.name for p in (elsewhere / "rep").iterdir()) == ["cluster_sizes.png", "features_pca.png",
                                                                     "rank_loads.png"]
    # a shard folder copied away from its selection: what report cannot reach is said, not silently left out
    shutil.copytree(elsewhere / "sh", tmp_path / "copied-sh")
    r = _ok("report", tmp_path / "copied-sh", "--json", cwd=tmp_path)
    assert "shards" in json.loads(r.stdout) and "selection" not in json.loads(r.stdout)
    assert r.stderr.strip() == (f"WARNING: {tmp_path / 'copied-sh'}: its selection artifact is not reported (the recorded "
                                "selection s2.parquet is not there); pass it to report beside it"), r.stderr
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


# ------------------------------------------------------------------------------------------ data by a relative path
# `embed DATA` records DATA as written (what summaries show), and where a relative DATA was (`absolute_path`): a
# later command run from another working directory still finds the data while it is where it was.

EMBED = ["--features", "text", "--dim", "16"]


def _invoke(*argv, code=0):
    from click.testing import CliRunner

    from cluster_curate.cli import main
    res = CliRunner().invoke(main, [str(a) for a in argv])
    assert res.exit_code == code, res.output
    return res


def _summary(res) -> dict:
    return json.loads(res.stdout.strip().splitlines()[-1])


def _gsm_rows(path: Path, start: int = 0, rows: int = 120) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(GSM.read_text().splitlines(keepends=True)[start:start + rows]))
    return path


def _cluster_reads_answers(clusters_arg, out: Path) -> None:
    """`cluster --kinds auto` (the default) read the answers of the data the embeddings record."""
    summary = _summary(_invoke("cluster", clusters_arg, "--out", out, "--k", "6", "--json"))
    assert "kinds_why_not" not in summary, summary["kinds_why_not"]
    assert "kind_of_group" in read_meta(out).params


def _embedded_in_a(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """Folders a (data.jsonl, embedded from there as `embed data.jsonl --out e.parquet`; the working directory)
    and b (empty)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _gsm_rows(a / "data.jsonl")
    b.mkdir()
    monkeypatch.chdir(a)
    _invoke("embed", "data.jsonl", "--out", "e.parquet", *EMBED, "-q")
    return a, b


def test_cluster_reads_the_answers_of_data_embedded_by_a_relative_path_from_another_directory(tmp_path, monkeypatch):
    a, b = _embedded_in_a(tmp_path, monkeypatch)
    record = read_meta(a / "e.parquet").dataset
    assert record["source"] == "data.jsonl" and record["absolute_path"] == str(a / "data.jsonl")
    monkeypatch.chdir(b)
    _cluster_reads_answers("../a/e.parquet", b / "c.parquet")
    # the clusters pass the record on: select --tokenizer reads the same data from here too
    from tiny_lm import build_tokenizer
    build_tokenizer(chat_template=True).save_pretrained(tmp_path / "tok")
    res = _invoke("select", "c.parquet", "--out", "s.parquet", "--token-fraction", "0.3", "--tokenizer",
                  tmp_path / "tok", "--json")
    assert _summary(res)["tokens_counted_by"] == f"tokenizer {tmp_path / 'tok'} (exact)"
    # gone from where it was: one line naming the data as written, as before
    (a / "data.jsonl").rename(a / "moved.jsonl")
    res = _invoke("select", "c.parquet", "--out", "s2.parquet", "--token-fraction", "0.3", "--tokenizer",
                  tmp_path / "tok", "-q", code=2)
    assert res.output.strip() == (f"ERROR: data.jsonl (the dataset c.parquet records; recorded from "
                                  f"{a / 'data.jsonl'}): no such file or directory; pass --data DATA")


def test_the_absolute_path_changes_no_fingerprint(tmp_path, monkeypatch):
    from cluster_curate.io.artifacts import make_meta
    _gsm_rows(tmp_path / "a" / "data.jsonl")
    monkeypatch.chdir(tmp_path)
    _invoke("embed", "a/data.jsonl", "--out", "rel.parquet", *EMBED, "-q")
    _invoke("embed", tmp_path / "a" / "data.jsonl", "--out", "abs.parquet", *EMBED, "-q")
    rel, absolute = read_meta(tmp_path / "rel.parquet"), read_meta(tmp_path / "abs.parquet")
    assert rel.dataset["absolute_path"] == str(tmp_path / "a" / "data.jsonl")
    assert "absolute_path" not in absolute.dataset  # an absolute DATA is recorded as before
    assert rel.fingerprint == absolute.fingerprint
    bare = {k: v for k, v in rel.inputs["data"].items() if k != "absolute_path"}
    assert make_meta(rel.kind, rel.params, {"data": bare}, bare, rel.algorithm).fingerprint == rel.fingerprint


def _as_written_before(artifact: Path) -> None:
    """Rewrite `artifact` as an earlier version wrote it: no `absolute_path` in its records."""
    import pyarrow.parquet as pq

    from cluster_curate.io.artifacts import META_KEY
    table = pq.read_table(artifact)
    meta = json.loads(table.schema.metadata[META_KEY])
    for rec in (meta["dataset"], meta["inputs"]["data"], *meta["dataset"].get("inputs", ())):
        rec.pop("absolute_path", None)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, META_KEY: json.dumps(meta)}), artifact)


def test_an_artifact_without_the_absolute_path_reads_its_data_as_before(tmp_path, monkeypatch):
    a, b = _embedded_in_a(tmp_path, monkeypatch)
    _as_written_before(a / "e.parquet")
    _cluster_reads_answers("e.parquet", a / "c.parquet")  # from where it was embedded
    monkeypatch.chdir(b)  # from elsewhere: found beside the embeddings, which sit in the folder it was read from
    _cluster_reads_answers("../a/e.parquet", b / "c.parquet")
    (a / "data.jsonl").rename(a / "moved.jsonl")  # gone: kinds off, saying why and what to pass
    res = _invoke("cluster", "../a/e.parquet", "--out", "c2.parquet", "--k", "6", "--json")
    why = _summary(res)["kinds_why_not"]
    assert "answers were not read (data.jsonl (the dataset e.parquet records): no such file or directory; " \
        "pass --data DATA)" in why


@pytest.mark.parametrize("inputs", [["mix.yaml"], ["math.jsonl", "more.jsonl"]], ids=["mixture-file", "two-inputs"])
def test_a_mixture_embedded_by_relative_paths_is_found_from_another_directory(tmp_path, monkeypatch, inputs):
    a, b = tmp_path / "a", tmp_path / "b"
    _gsm_rows(a / "math.jsonl", 0, 60)
    _gsm_rows(a / "more.jsonl", 60, 60)
    (a / "mix.yaml").write_text("inputs:\n  - path: math.jsonl\n  - path: more.jsonl\n")
    b.mkdir()
    monkeypatch.chdir(a)
    _invoke("embed", *inputs, "--out", "e.parquet", *EMBED, "-q")
    recorded = read_meta(a / "e.parquet").dataset["inputs"]
    assert [(i["source"], i["absolute_path"]) for i in recorded] == [("math.jsonl", str(a / "math.jsonl")),
                                                                     ("more.jsonl", str(a / "more.jsonl"))]
    monkeypatch.chdir(b)
    _cluster_reads_answers("../a/e.parquet", b / "c.parquet")


def test_export_reads_left_over_rows_of_data_sharded_by_a_relative_path_from_another_directory(tmp_path,
                                                                                                 monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    _gsm_rows(a / "data" / "gsm.jsonl")
    b.mkdir()
    monkeypatch.chdir(a)
    _invoke("run", "data/gsm.jsonl", "--out", "p", *FAST, "-q")
    manifest = json.loads((a / "p" / "shards" / "manifest.json").read_text())
    assert manifest["leftover_ids"] and manifest["inputs"]["data"]["source"] == "data/gsm.jsonl"
    monkeypatch.chdir(b)
    _invoke("export", "../a/p/shards", "--for", "jsonl", "--out", "x", "-q")
    rows = (b / "x" / "selected.jsonl").read_text().splitlines()
    source = (a / "data" / "gsm.jsonl").read_text().splitlines()
    assert set(manifest["leftover_ids"]) <= {i for i, line in enumerate(source) if line in rows}


def test_recorded_source_tries_the_path_as_written_then_the_absolute_one(tmp_path, monkeypatch):
    from cluster_curate.io.datasets import recorded_source
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "d.jsonl").write_text("{}\n")
    here = {"source": "d.jsonl", "absolute_path": str(tmp_path / "a" / "d.jsonl")}
    monkeypatch.chdir(tmp_path)
    assert recorded_source(here) == str(tmp_path / "a" / "d.jsonl")  # not here: where it was
    (tmp_path / "d.jsonl").write_text("{}\n")
    assert recorded_source(here) == "d.jsonl"  # as written first: a folder's own copy, as before
    assert recorded_source({"source": "gone.jsonl", "absolute_path": str(tmp_path / "gone.jsonl")}) == "gone.jsonl"
    assert recorded_source({"source": "org/name", "fingerprint": "f"}) == "org/name"  # a hub id, no path
    assert recorded_source({"source": "x.jsonl", "absolute_path": 3}) == "x.jsonl"  # a bad record: as written
