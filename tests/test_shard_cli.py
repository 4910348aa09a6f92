"""`cluster-curate shard` end to end: files, invariants, determinism, errors, loading."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster_curate import sharding
from cluster_curate.commands.shard import shard
from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.loader import load_shard, read_manifest
from shard_helpers import make_dataset, make_selection


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("data") / "data.jsonl", 600)


def _run(cli_runner, *args):
    result = cli_runner.invoke(main, ["shard", *map(str, args)])
    return result


def _shards(out):
    manifest = read_manifest(out)
    return manifest, [pq.read_table(out / f["file"]) for f in manifest["files"]]


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_end_to_end_invariants(tmp_path, data, cli_runner):
    sel = make_selection(tmp_path / "sel.parquet", data, k=4, fraction=0.5)
    out = tmp_path / "shards"
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", out, "-n", "4", "-m", "4", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["shards"] == 4
    manifest, tables = _shards(out)
    assert [f["file"] for f in manifest["files"]] == [f"shard-0000{i}-of-00004.parquet" for i in range(4)]
    # equal rows, whole steps
    assert {t.num_rows for t in tables} == {manifest["rows_per_shard"]}
    assert manifest["rows_per_shard"] == manifest["steps"] * 4
    # every selected id exactly once across shards, or left over (in the manifest and the file beside it)
    placed = np.concatenate([t.column("id").to_numpy() for t in tables])
    leftover = np.array(manifest["leftover_ids"], dtype=np.int64)
    assert np.unique(placed).size == placed.size
    assert np.array_equal(np.sort(np.concatenate([placed, leftover])), sel["ids"])
    assert leftover.size == 300 - (300 // 16) * 16
    assert [int(x) for x in (out / "leftover_ids.txt").read_text().split()] == manifest["leftover_ids"]
    # full original rows + id, cluster, step, weight, wrapped
    source = [json.loads(line) for line in data.read_text().splitlines()]
    assert tables[0].column_names == ["id", "question", "answer", "meta", "cluster", "step", "weight", "wrapped"]
    for t in tables:
        for row in t.slice(0, 20).to_pylist():
            src = source[row["id"]]
            assert (row["question"], row["answer"], row["meta"]) == (src["question"], src["answer"], src["meta"])
            assert row["cluster"] == sel["clusters"][np.searchsorted(sel["ids"], row["id"])]
        steps = t.column("step").to_numpy()
        assert np.array_equal(steps, np.repeat(np.arange(manifest["steps"]), 4))
        assert not any(t.column("wrapped").to_pylist())
    # balance figures are in the manifest
    b = manifest["balance"]
    assert b["cluster_spread"]["mean"] >= 0.95 and b["token_imbalance"]["mean"] < 1.1
    # rank_mix_tv means little alone: the table gives what a random deal of the same rows gets beside it
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "again", "-n", "4", "-m", "4")
    assert f"{b['rank_mix_tv']['max']:.4f} (random {b['rank_mix_tv']['random']:.4f})" in r.output, r.output
    assert summary["rank_mix_tv_max"] == round(b["rank_mix_tv"]["max"], 4)  # --json: the number, as before
    assert manifest["tokens"]["source"].startswith("whitespace")


def test_a_length_window_under_its_floor_is_said(tmp_path, data, cli_runner):
    """A window of fewer steps than hold about 16 rows of each cluster is raised to that floor: windows of 1, 2 or
    16 steps gave the same shards, and nothing said so."""
    make_selection(tmp_path / "sel.parquet", data, k=6, fraction=0.5, n_tokens=True)
    said = []
    for window in ("1", "48"):
        r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / f"w{window}", "-n", "2",
                 "-m", "1", "--length-window", window)
        assert r.exit_code == 0, r.output
        said.append(r.stderr)
    assert "WARNING: --length-window 1: windows of 48 steps here, the fewest that hold about 16 rows of each of " \
        "the 6 clusters" in said[0] and "--length-window" not in said[1]


def test_order_in_each_shard_is_the_planned_order(tmp_path, data, cli_runner):
    sel = make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.4, n_tokens=True)
    out = tmp_path / "shards"
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", out, "-n", "3", "-m", "2", "--seed", "7")
    assert r.exit_code == 0, r.output
    manifest, tables = _shards(out)
    assert manifest["tokens"]["source"] == "selection n_tokens"
    plan = sharding.plan_steps(sel["clusters"], sel["tokens"], 3, 2, seed=7)
    for rank, t in enumerate(tables):
        assert np.array_equal(t.column("id").to_numpy(), sel["ids"][plan.shard_rows(rank)])


def test_no_pair_lengths_is_recorded_and_gives_the_plan_without_pairing(tmp_path, data, cli_runner):
    """--no-pair-lengths: the plan of plan_steps(pair_lengths=False), recorded in the manifest (so `run` re-shards
    when it changes); the default pairs (k = 40 clusters of a few rows each, micro-batch 1: pairing applies)."""
    sel = make_selection(tmp_path / "sel.parquet", data, k=40, fraction=0.5, n_tokens=True)
    ids = {}
    for name, flag in (("paired", []), ("unpaired", ["--no-pair-lengths"])):
        r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / name, "-n", "4", "-q",
                 *flag)
        assert r.exit_code == 0, r.output
        manifest, tables = _shards(tmp_path / name)
        assert manifest["params"]["pair_lengths"] is (not flag)
        ids[name] = [t.column("id").to_numpy() for t in tables]
        plan = sharding.plan_steps(sel["clusters"], sel["tokens"], 4, 1, pair_lengths=not flag)
        assert all(np.array_equal(ids[name][r], sel["ids"][plan.shard_rows(r)]) for r in range(4))
    assert any(not np.array_equal(a, b) for a, b in zip(ids["paired"], ids["unpaired"]))


def test_same_seed_gives_byte_identical_shards(tmp_path, data, cli_runner):
    make_selection(tmp_path / "sel.parquet", data, k=4, fraction=0.5)
    hashes = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / name, "-n", "2", "-m", "3",
                 "--seed", seed, "-q")
        assert r.exit_code == 0, r.output
        hashes.append([_sha(p) for p in sorted((tmp_path / name).glob("*.parquet"))]
                      + [_sha(tmp_path / name / "leftover_ids.txt")])
    assert hashes[0] == hashes[1]
    assert hashes[0] != hashes[2]
    manifest = read_manifest(tmp_path / "a")
    assert [f["sha256"] for f in manifest["files"]] == hashes[0][:2]


def test_wrap_tops_up_with_marked_repeats(tmp_path, data, cli_runner):
    sel = make_selection(tmp_path / "sel.parquet", data, k=4, fraction=0.5)
    out = tmp_path / "shards"
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", out, "-n", "4", "-m", "4",
             "--remainder", "wrap", "-q")
    assert r.exit_code == 0, r.output
    manifest, tables = _shards(out)
    t = pa.concat_tables(tables)
    ids, wrapped = t.column("id").to_numpy(), t.column("wrapped").to_numpy(zero_copy_only=False)
    assert manifest["leftover_ids"] == [] and manifest["steps"] == -(-300 // 16)
    assert np.array_equal(np.sort(ids[~wrapped]), sel["ids"])      # every id once, unmarked
    assert wrapped.sum() == manifest["wrapped_rows"] == manifest["steps"] * 16 - 300
    assert np.isin(ids[wrapped], ids[~wrapped]).all()
    assert "--remainder wrap repeats" not in r.output  # 4 repeats: the last step filled
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "many", "-n", "16", "-m", "4",
             "--remainder", "wrap", "-q")
    assert r.exit_code == 0 and "--remainder wrap repeats 20 rows (7% of the 300 selected)" in r.output, r.output
    # README: repeats sit where their cluster's share puts them along the epoch (not all in the last step), with
    # their row's full weight
    t = pa.concat_tables(_shards(tmp_path / "many")[1])
    wrapped = t.column("wrapped").to_numpy(zero_copy_only=False)
    assert np.unique(t.column("step").to_numpy()[wrapped]).size > 1
    ids, weights = t.column("id").to_numpy(), t.column("weight").to_numpy()
    weight = dict(zip(ids[~wrapped], weights[~wrapped]))
    assert all(weight[i] == w for i, w in zip(ids[wrapped], weights[wrapped]))


def test_drop_past_5_percent_is_said_with_the_ids_file_and_the_way_out(tmp_path, data, cli_runner):
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5)  # 300 rows, unequal clusters
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "few", "-n", "4", "-m", "4",
             "-q")
    assert r.exit_code == 0 and "--remainder drop" not in r.output, r.output  # 12 rows (4%): one partial step
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "d", "-n", "7", "-m", "4", "-q")
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())  # the console wraps long lines
    assert "--remainder drop leaves out 20 rows (7% of the 300 selected; ids in " in said, said
    assert "leftover_ids.txt" in said and "--remainder wrap" in said and "a multiple of 7 × 4 = 28 rows" in said
    assert read_manifest(tmp_path / "d")["leftover_rows"] == 20
    # the paper's allocation drops every cluster down to the smallest: said too, with its own way out
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "p", "-n", "3", "-m", "2",
             "--allocation", "paper", "-q")
    assert r.exit_code == 0, r.output
    left = read_manifest(tmp_path / "p")["leftover_rows"]
    said = " ".join(r.output.split())
    assert f"--remainder drop leaves out {left} rows (" in said and "smallest cluster" in said, said


def test_weights_formula_and_none(tmp_path, data, cli_runner):
    sel = make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, equal_quotas=True)
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "w", "-n", "3", "-m", "2", "-q")
    assert r.exit_code == 0, r.output
    t = pa.concat_tables(_shards(tmp_path / "w")[1])
    n_c, s_c = sel["sizes"], np.bincount(sel["clusters"], minlength=3)
    expected = (n_c / n_c.sum()) / (s_c / s_c.sum())
    assert np.allclose(t.column("weight").to_numpy(), expected[t.column("cluster").to_numpy()])
    assert np.allclose(expected, 3 * n_c / n_c.sum())  # equal quotas: the paper's K·|C|/n
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "n", "-n", "3", "-m", "2",
             "--weights", "none", "-q")
    assert r.exit_code == 0, r.output
    assert set(pa.concat_tables(_shards(tmp_path / "n")[1]).column("weight").to_pylist()) == {1.0}


def test_paper_allocation_and_its_error(tmp_path, data, cli_runner):
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, equal_quotas=True)
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "p", "-n", "3", "-m", "2",
             "--allocation", "paper", "-q")
    assert r.exit_code == 0, r.output
    manifest, tables = _shards(tmp_path / "p")
    for rank, t in enumerate(tables):
        assert set(t.column("cluster").to_pylist()) == {rank}
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "q", "-n", "4",
             "--allocation", "paper")
    assert r.exit_code == 2 and "needs as many clusters as shards" in r.output
    assert "the selection has 3 clusters and --num-shards is 4 (cluster with --k 4)" in r.output  # what to do
    assert not (tmp_path / "q").exists()


def test_one_shard_and_more_shards_than_clusters(tmp_path, data, cli_runner):
    sel = make_selection(tmp_path / "sel.parquet", data, k=2, fraction=0.3)
    for name, n in (("one", 1), ("many", 7)):
        r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / name, "-n", n, "-m", "2", "-q")
        assert r.exit_code == 0, r.output
        manifest, tables = _shards(tmp_path / name)
        assert len(tables) == n and {t.num_rows for t in tables} == {manifest["rows_per_shard"]}
        placed = np.concatenate([t.column("id").to_numpy() for t in tables])
        assert np.array_equal(np.sort(np.concatenate([placed, manifest["leftover_ids"]])), sel["ids"])


def test_errors_are_one_line(tmp_path, data, cli_runner):
    make_selection(tmp_path / "sel.parquet", data, k=2, fraction=0.05)  # 30 rows
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "x", "-n", "8", "-m", "4")
    assert r.exit_code == 2 and "8 × 4 = 32 rows but the selection has only 30" in r.output
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "ok", "-n", "2", "-q")
    assert r.exit_code == 0, r.output
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "ok", "-n", "2")
    assert r.exit_code == 2 and "--overwrite" in r.output
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "ok", "-n", "3", "--overwrite", "-q")
    assert r.exit_code == 0 and read_manifest(tmp_path / "ok")["num_shards"] == 3
    assert not list(tmp_path.glob(".ok.*"))  # no temporary directories left behind
    # a selection made from another dataset
    other = make_dataset(tmp_path / "other.jsonl", 50, seed=5)
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", other, "--out", tmp_path / "y", "-n", "2")
    assert r.exit_code == 2 and "--force" in r.output
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", other, "--out", tmp_path / "y", "-n", "2", "--force")
    assert r.exit_code == 2 and "is not" in r.output and "Traceback" not in r.output
    # not a selection
    r = _run(cli_runner, data, "--data", data, "--out", tmp_path / "z", "-n", "2")
    assert r.exit_code == 2 and "ERROR" in r.output
    # no cluster sizes anywhere: weights need them, --weights none does not
    make_selection(tmp_path / "nosizes.parquet", data, k=2, fraction=0.2, cluster_sizes=False)
    r = _run(cli_runner, tmp_path / "nosizes.parquet", "--data", data, "--out", tmp_path / "w", "-n", "2")
    assert r.exit_code == 2 and "--weights none" in r.output
    r = _run(cli_runner, tmp_path / "nosizes.parquet", "--data", data, "--out", tmp_path / "w", "-n", "2",
             "--weights", "none", "-q")
    assert r.exit_code == 0, r.output


def test_cluster_sizes_from_the_clusters_artifact(tmp_path, data, cli_runner):
    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.writer import write_artifact
    from cluster_curate.io.datasets import open_dataset
    rec = open_dataset(str(data)).record()
    clusters = np.random.default_rng(0).integers(0, 3, rec["rows"])
    cpath = tmp_path / "clusters.parquet"
    write_artifact(pa.table({"id": np.arange(rec["rows"]), "cluster": clusters}), cpath,
                   make_meta("clusters", {}, {}, rec))
    sel = make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.3, cluster_sizes=False,
                         clusters_path=str(cpath))
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "s", "-n", "2", "-q")
    assert r.exit_code == 0, r.output
    manifest = read_manifest(tmp_path / "s")
    assert manifest["cluster_sizes_source"].startswith("clusters artifact")
    assert [c["in_data"] for c in manifest["clusters"]] == np.bincount(clusters, minlength=3).tolist()
    assert sel is not None


def test_tokens_from_the_embeddings_artifact(tmp_path, data, cli_runner):
    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.writer import write_artifact
    from cluster_curate.io.datasets import open_dataset
    rec = open_dataset(str(data)).record()
    n_tokens = np.arange(rec["rows"]) % 97 + 5
    epath = tmp_path / "emb.parquet"
    write_artifact(pa.table({"id": np.arange(rec["rows"]), "n_tokens": n_tokens}), epath, make_meta("embeddings", {}, {}, rec))
    sel = make_selection(tmp_path / "sel.parquet", data, k=2, fraction=0.3, embeddings_path=str(epath))
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "s", "-n", "2", "-q")
    assert r.exit_code == 0, r.output
    manifest = read_manifest(tmp_path / "s")
    assert manifest["tokens"]["source"] == f"embeddings n_tokens ({epath})"
    assert manifest["tokens"]["total"] == int(n_tokens[sel["ids"]].sum())
    assert manifest["inputs"]["embeddings"]["kind"] == "embeddings"
    make_selection(tmp_path / "sel2.parquet", data, k=2, fraction=0.3)  # no lineage: --embeddings E
    r = _run(cli_runner, tmp_path / "sel2.parquet", "--data", data, "--out", tmp_path / "s2", "-n", "2",
             "--embeddings", epath, "-q")
    assert r.exit_code == 0 and read_manifest(tmp_path / "s2")["tokens"]["source"].startswith("embeddings")
    # --embeddings of another dataset: that option is what to mend (it said 'pass --data ...')
    other = open_dataset(str(make_dataset(tmp_path / "other.jsonl", rec["rows"], seed=1))).record()
    opath = tmp_path / "other-emb.parquet"  # the same ids 0..n-1, of other rows
    write_artifact(pa.table({"id": np.arange(rec["rows"]), "n_tokens": n_tokens}), opath,
                   make_meta("embeddings", {}, {}, other))
    r = _run(cli_runner, tmp_path / "sel2.parquet", "--data", data, "--out", tmp_path / "s3", "-n", "2",
             "--embeddings", opath)
    assert r.exit_code == 2 and r.output.strip().endswith(
        "pass --embeddings of the data the selection was made from, or --force to use it anyway"), r.output


@pytest.mark.slow  # importing transformers takes most of its ~9 s
def test_tokenizer_counts(tmp_path, data, cli_runner):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "alpha": 1, "beta": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    make_selection(tmp_path / "sel.parquet", data, k=2, fraction=0.2)
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "s", "-n", "2",
             "--tokenizer", tmp_path / "tok", "-q")
    assert r.exit_code == 0, r.output
    manifest = read_manifest(tmp_path / "s")
    assert manifest["tokens"]["source"] == f"tokenizer {tmp_path / 'tok'}"
    # Whitespace pre-tokenizer splits "#12?" into pieces, so there are more tokens than words
    source = [json.loads(line) for line in data.read_text().splitlines()]
    t = pa.concat_tables(_shards(tmp_path / "s")[1])
    words = sum(len(source[i]["question"].split()) + len(source[i]["answer"].split()) for i in t.column("id").to_pylist())
    assert manifest["tokens"]["total"] > words * (t.num_rows / (t.num_rows + len(manifest["leftover_ids"]))) * 0.99
    # an explicit --tokenizer wins over the selection's own n_tokens
    make_selection(tmp_path / "sel2.parquet", data, k=2, fraction=0.2, n_tokens=True)
    r = _run(cli_runner, tmp_path / "sel2.parquet", "--data", data, "--out", tmp_path / "s2", "-n", "2", "-q")
    assert r.exit_code == 0 and read_manifest(tmp_path / "s2")["tokens"]["source"] == "selection n_tokens"
    r = _run(cli_runner, tmp_path / "sel2.parquet", "--data", data, "--out", tmp_path / "s3", "-n", "2",
             "--tokenizer", tmp_path / "tok", "-q")
    assert r.exit_code == 0 and read_manifest(tmp_path / "s3")["tokens"]["source"].startswith("tokenizer")


def test_bounded_buffers_spill_and_widening_schema(tmp_path):
    """Tiny buffers force spills and many position chunks; a column null at first and a new column later."""
    data = make_dataset(tmp_path / "d.jsonl", 400, extra={"note": lambda i: None if i < 150 else f"n{i}",
                                                          "weight": lambda i: i * 0.5})
    sel = make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.6)
    small = shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "small"), num_shards=2, micro_batch_size=3,
                  batch_rows=64, chunk_bytes=2_000, buffer_bytes=5_000)
    big = shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "big"), num_shards=2, micro_batch_size=3)
    assert small["renamed_source_columns"] == {"weight": "source_weight"}
    for f_small, f_big in zip(small["files"], big["files"]):
        a, b = pq.read_table(tmp_path / "small" / f_small["file"]), pq.read_table(tmp_path / "big" / f_big["file"])
        assert a.equals(b)
        assert pq.ParquetFile(tmp_path / "small" / f_small["file"]).num_row_groups > 1
    t = pq.read_table(tmp_path / "small" / small["files"][0]["file"])
    assert t.schema.field("note").type == pa.string() and "source_weight" in t.column_names
    src = {i: i * 0.5 for i in sel["ids"].tolist()}
    assert all(src[i] == w for i, w in zip(t.column("id").to_pylist(), t.column("source_weight").to_pylist()))


def test_loading_with_datasets_pyarrow_and_the_loader(tmp_path, data, cli_runner):
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5)
    out = tmp_path / "shards"
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", out, "-n", "2", "-m", "4", "-q")
    assert r.exit_code == 0, r.output
    manifest = read_manifest(out)
    import datasets
    files = sorted(str(p) for p in out.glob("shard-*.parquet"))
    ds = datasets.load_dataset("parquet", data_files={"train": files[1]}, split="train",
                               cache_dir=str(tmp_path / "hf-cache"))
    expected = pq.read_table(files[1])
    assert len(ds) == manifest["rows_per_shard"] and ds["id"] == expected.column("id").to_pylist()
    shard = load_shard(out, rank=1, world_size=2)
    batches = list(shard.micro_batches())
    assert len(batches) == manifest["steps"] and all(len(b["id"]) == 4 for b in batches)
    assert sum((b["id"] for b in batches), []) == expected.column("id").to_pylist()
    assert [b["step"][0] for b in batches] == list(range(manifest["steps"]))
    assert shard[0]["id"] == expected.column("id")[0].as_py() and len(shard) == expected.num_rows
    assert list(shard.batch_sampler())[1] == [4, 5, 6, 7]
    assert shard.to_hf_dataset()["id"] == expected.column("id").to_pylist()
    # one dataset for trainers that deal micro-batches to ranks round-robin (HF Trainer / Accelerate)
    from cluster_curate.loader import global_order, shard_files
    whole = datasets.load_dataset("parquet", data_files={"train": shard_files(out)}, split="train",
                                  cache_dir=str(tmp_path / "hf-cache")).select(global_order(out))
    per_rank = {0: [], 1: []}
    for b in range(len(whole) // 4):
        per_rank[b % 2] += whole[b * 4:(b + 1) * 4]["id"]
    assert per_rank[1] == expected.column("id").to_pylist()
    assert per_rank[0] == pq.read_table(files[0]).column("id").to_pylist()
    with pytest.raises(CurateError, match="written for 2 ranks but this job has world size 4"):
        load_shard(out, rank=0, world_size=4)
    with pytest.raises(CurateError, match="no manifest.json"):
        load_shard(tmp_path)
    # a plain process (no torchrun, no process group) read shard 0 of the 2 without a word: half the selection
    with pytest.raises(CurateError, match=r"holds 2 shards, one per rank.*torchrun --nproc-per-node 2, or pass rank="):
        load_shard(out)


def test_load_shard_takes_the_environments_rank_and_warns_of_another(tmp_path, data, cli_runner, monkeypatch):
    """`load_shard(d, rank=<torchrun's RANK, a str>)` raised a TypeError, and rank=1.0 too. A str of digits is a
    rank now, anything but an int or one is refused in one line naming the argument; a rank given that is not the
    environment's RANK, where there is a shard per process, is read with a warning that on several nodes the global
    RANK is the one to pass (LOCAL_RANK would have each node train the same shards); with fewer shards than
    processes (tensor parallelism) the rank is the data-parallel group's, without one."""
    import re
    import warnings
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5)
    out = tmp_path / "shards"
    assert _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", out, "-n", "2", "-m", "4",
                "-q").exit_code == 0
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the environment's own values: no warning
        assert load_shard(out, rank="1").rank == 1
        assert load_shard(out, rank=" 1", world_size="2").rank == 1
    with pytest.warns(UserWarning, match=r"load_shard: rank=0 where RANK=1: on several nodes pass the global RANK "
                                         r"\(LOCAL_RANK would have each node train the same shards\)"):
        assert load_shard(out, rank=0).rank == 0  # said, not refused
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with warnings.catch_warnings():  # tensor parallel 2 x data parallel 2: the rank is the data-parallel group's
        warnings.simplefilter("error")
        assert load_shard(out, rank=1, world_size=2).rank == 1
    for name, bad in (("rank", 1.0), ("rank", "one"), ("rank", "-1"), ("rank", True), ("world_size", 2.0)):
        with pytest.raises(CurateError, match=rf"^load_shard: {name}={re.escape(repr(bad))} is not a whole number: "
                                              rf"pass an int, or a str of digits as torchrun's {name.upper()} "
                                              r"holds it$"):
            load_shard(out, **{name: bad})


def test_data_defaults_to_the_dataset_the_selection_records(tmp_path, data, cli_runner, monkeypatch):
    """--data left out: the dataset the selection's lineage records, found as written, at its recorded absolute
    path, or beside the selection; the shards are the same bytes as with --data. Gone or changed: one line naming
    the recorded path and --data, the same line whether --data names it or not."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_bytes(data.read_bytes())
    make_selection(tmp_path / "sel.parquet", Path("d.jsonl"), k=3, fraction=0.5)  # recorded as written: relative
    for name, given in (("given", ["--data", "d.jsonl"]), ("found", [])):
        r = _run(cli_runner, "sel.parquet", *given, "--out", name, "-n", "2", "-m", "2", "-q")
        assert r.exit_code == 0, r.output
    digests = [{p.name: _sha(p) for p in (tmp_path / n).iterdir()} for n in ("given", "found")]
    assert digests[0] == digests[1] and "manifest.json" in digests[0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the relative path is found at its recorded absolute path
    r = _run(cli_runner, "../sel.parquet", "--out", "sh", "-n", "2", "-m", "2", "-q")
    assert r.exit_code == 0, r.output
    assert read_manifest(elsewhere / "sh")["fingerprint"] == read_manifest(tmp_path / "given")["fingerprint"]
    moved = tmp_path / "moved"  # data and selection moved together: the data is found beside the selection
    moved.mkdir()
    for f in ("d.jsonl", "sel.parquet"):
        (tmp_path / f).rename(moved / f)
    r = _run(cli_runner, moved / "sel.parquet", "--out", "sh2", "-n", "2", "-m", "2", "-q")
    assert r.exit_code == 0, r.output
    assert read_manifest(elsewhere / "sh2")["fingerprint"] == read_manifest(tmp_path / "given")["fingerprint"]
    with open(moved / "d.jsonl", "a") as f:  # changed since
        f.write(json.dumps({"question": "q?", "answer": "a", "meta": {"i": -1}}) + "\n")
    r = _run(cli_runner, moved / "sel.parquet", "--out", "sh3", "-n", "2")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert f"{moved / 'd.jsonl'} (the dataset sel.parquet records) has changed since (fingerprint " in r.output
    assert "when recorded); pass --data DATA (the data it was made from), or --force to use it as it is now" in r.output
    # --data naming that same file finds the same change: the same line (was 'sel.parquet: was made from d.jsonl
    # (fingerprint …), not from …/d.jsonl (fingerprint …)', as if it were another file)
    given = _run(cli_runner, moved / "sel.parquet", "--data", moved / "d.jsonl", "--out", "sh3", "-n", "2")
    assert given.exit_code == 2 and given.output == r.output, given.output
    (moved / "d.jsonl").unlink()  # gone
    r = _run(cli_runner, moved / "sel.parquet", "--out", "sh3", "-n", "2")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "d.jsonl (the dataset sel.parquet records" in r.output and "pass --data DATA" in r.output, r.output
    assert not (elsewhere / "sh3").exists()


def test_shard_does_not_count_the_rows_of_the_recorded_data_again(tmp_path, data, cli_runner, monkeypatch):
    """The manifest's record of the data counted its rows, a pass over a JSON Lines file of its own, where the
    selection's lineage had counted the same bytes: shard read the data three times (its fingerprint, the count,
    the rows). The recorded count is taken where the bytes are the recorded ones."""
    from cluster_curate.io import containers
    make_selection(tmp_path / "sel.parquet", data, k=4, fraction=0.5)

    def count(self):
        raise AssertionError("the rows were counted again")
    for source in [c for c in vars(containers).values() if isinstance(c, type) and "count" in vars(c)]:
        monkeypatch.setattr(source, "count", count)
    r = _run(cli_runner, tmp_path / "sel.parquet", "--data", data, "--out", tmp_path / "shards", "-n", "2")
    assert r.exit_code == 0, r.output
    assert read_manifest(tmp_path / "shards")["inputs"]["data"]["rows"] == 600
