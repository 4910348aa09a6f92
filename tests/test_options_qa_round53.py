"""QA round 53 on option checking and artifact reading: nan and inf refused by every float option, artifacts whose
row count is not their metadata's, and `inspect --rejects` replacing only its own file (tests build their own
inputs from the fixtures)."""

from __future__ import annotations

import json
import shutil

import click
import numpy as np
import pyarrow.parquet as pq
import pytest

from cluster_curate.commands import COMMANDS, spec
from cluster_curate.errors import CurateError
from cluster_curate.options import resolve
from conftest import FIXTURES, cli_in_process

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"


def _ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r


# ------------------------------------------------------------------------ defect 2: nan and inf in float options


def _float_options():
    """(command, option) for every option of every command whose value is a float."""
    return [(name, o) for name in COMMANDS for o in spec(name).options
            if isinstance(o.click_type(), click.types.FloatParamType)]


def test_the_walk_finds_the_float_options_of_each_stage():
    found = {(name, o.name) for name, o in _float_options()}
    assert {("cluster", "max_size_factor"), ("embed", "proxy_epochs"), ("embed", "proxy_sample"),
            ("select", "fraction"), ("select", "dedup"), ("run", "max_size_factor"),
            ("run", "proxy_epochs")} <= found


@pytest.mark.parametrize("value", ["nan", "inf", "1e999"])
def test_every_float_option_of_every_command_refuses_a_value_that_is_not_finite(tmp_path, value):
    for name, o in _float_options():
        flag = o.cli_flags[0]
        r = cli_in_process(name, flag, value, cwd=tmp_path)
        assert (r.returncode, r.stdout) == (2, ""), (name, flag, r.stderr)
        assert r.stderr == (f"ERROR: Invalid value for '{flag}': {value} is not a finite number "
                            f"(see python -m cluster_curate {name} --help)\n"), (name, flag)
        with pytest.raises(CurateError, match=rf"^{flag}: {value} is not a finite number$"):  # the Python API
            resolve(spec(name).options, {o.name: value}, name)
    assert not any(tmp_path.iterdir())


def test_run_refuses_an_infinite_size_cap_before_embedding(tmp_path):
    r = cli_in_process("run", GSM, "--out", tmp_path / "new", "--fraction", "0.3", "-n", "4",
                       "--max-size-factor", "inf")
    assert r.returncode == 2 and "'--max-size-factor': inf is not a finite number" in r.stderr
    assert not (tmp_path / "new").exists()


def test_a_finite_value_and_a_range_still_read_as_before():
    cluster = spec("cluster").options
    assert resolve(cluster, {"max_size_factor": "1.5"}, "cluster")["max_size_factor"] == 1.5
    with pytest.raises(CurateError, match=r"^--max-size-factor: 0.5 is not in the range x>=1.0$"):
        resolve(cluster, {"max_size_factor": 0.5}, "cluster")


# ------------------------------------------------- defect 7: an artifact rewritten with other rows than it was written


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A `run` over the 300 GSM8K rows (never changed by the tests: each copies what it edits)."""
    d = tmp_path_factory.mktemp("pipeline")
    _ok(cli_in_process("run", GSM, "--out", d / "r", "--fraction", "0.3", "-n", "4", "-q"))
    return d / "r"


def _halved(src, dst):
    """`src` written again with its first half of rows: pyarrow keeps the file's metadata (cluster_curate's too)."""
    table = pq.read_table(src)
    pq.write_table(table.slice(0, table.num_rows // 2), dst)
    return table.num_rows


@pytest.mark.parametrize("command, artifact, argv", [
    ("shard", "selection", ["--data", GSM, "--out", "out", "-n", "4"]),
    ("select", "clusters", ["--out", "out.parquet", "--fraction", "0.3"]),
    ("cluster", "embeddings", ["--out", "out.parquet"]),
    ("cluster", "embeddings", ["--out", "out.parquet", "--kinds", "answers", "--data", GSM]),
])
def test_an_artifact_rewritten_with_half_its_rows_is_refused_before_any_work(run_dir, tmp_path, command, artifact,
                                                                              argv):
    rows = _halved(run_dir / f"{artifact}.parquet", tmp_path / "half.parquet")
    r = cli_in_process(command, "half.parquet", *argv, cwd=tmp_path)
    assert (r.returncode, r.stderr) == (2, f"ERROR: half.parquet: changed since cluster-curate wrote it (it holds "
                                           f"{rows // 2} rows, written with {rows}); make it again with the command "
                                           "that wrote it, or pass --force to use it as it is\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["half.parquet"]


def test_a_selection_filtered_by_hand_is_sharded_with_force(run_dir, tmp_path):
    """Review: a selection with rows taken out by hand (pyarrow keeps its metadata) sharded before the row check;
    it is refused now, and --force, the switch for "I know", shards the rows it holds, with a warning."""
    _halved(run_dir / "selection.parquet", tmp_path / "half.parquet")
    r = _ok(cli_in_process("shard", "half.parquet", "--data", GSM, "--out", "out", "-n", "2", "--force",
                           cwd=tmp_path))
    assert "half.parquet: changed since cluster-curate wrote it" in r.stderr and "used as it is (--force)" in r.stderr
    held = pq.read_table(tmp_path / "half.parquet").column("id").to_pylist()
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["selected_rows"] == len(held)


def test_run_makes_again_an_output_rewritten_with_half_its_rows(run_dir, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(run_dir, d)
    _halved(run_dir / "embeddings.parquet", d / "embeddings.parquet")
    r = _ok(cli_in_process("run", GSM, "--out", d, "--fraction", "0.3", "-n", "4", "--json"))
    stages = {s["stage"]: (s["status"], s.get("reason")) for s in json.loads(r.stdout)["stages"]}
    assert stages == {"embed": ("ran", "its output was changed (it holds 150 rows, written with 300)"),
                      "cluster": ("up to date", None), "select": ("up to date", None), "shard": ("up to date", None)}
    assert pq.ParquetFile(d / "embeddings.parquet").metadata.num_rows == 300


def test_the_parts_of_a_job_array_and_a_resumed_embedding_still_read(tmp_path):
    from cluster_curate import distributed as D
    from cluster_curate.features import embed as E
    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.readers import read_embeddings

    embed = ["--features", "text", "--dim", "16", "--commit-every", "64", "-q"]
    for part in ("0", "1"):
        _ok(cli_in_process("embed", GSM, "--out", "parts", "--num-parts", "2", "--part-index", part, *embed,
                           cwd=tmp_path))
    _ok(cli_in_process("cluster", "parts", "--out", "c.parquet", "--k", "4", "-q", cwd=tmp_path))
    part = tmp_path / "parts" / "part-00000-of-00002.parquet"  # review: a part rewritten with fewer rows was used
    written = pq.read_table(part)
    pq.write_table(written.slice(0, 100), part)
    r = cli_in_process("cluster", "parts", "--out", "c2.parquet", "--k", "4", "-q", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (2, f"ERROR: parts: changed since cluster-curate wrote it ({part.name} holds "
                                           f"100 rows, written with {written.num_rows}); make it again with the "
                                           "command that wrote it, or pass --force to use it as it is\n")

    def chunk(ids):
        return E.chunk_table(E.ChunkResult(ids=np.array(ids), embedding=np.ones((len(ids), 3), np.float32),
                                           n_tokens=np.array(ids) + 1, n_response_tokens=np.array(ids),
                                           loss=np.zeros(len(ids), np.float32)))
    out, plan = tmp_path / "e.parquet", {"params": {"x": 1}, "dataset": "fp"}
    D.ChunkedOutput(out, D.detect(), plan, 2).commit(0, chunk([0, 1]), [], {})  # then interrupted
    resumed = D.ChunkedOutput(out, D.detect(), plan, 2, resume=True)
    resumed.commit(1, chunk([2, 3]), [], {})
    resumed.finish(make_meta("embeddings", {}, {}, {"fingerprint": "fp"}), 2, E.empty_chunk_table(3))
    ids, x, meta = read_embeddings(out)
    assert ids.tolist() == [0, 1, 2, 3] and meta.rows == 4


# ------------------------------------------- defect 9: inspect --rejects replaces only a rejects list the tool wrote


@pytest.fixture
def bad_line(tmp_path):
    lines = GSM.read_text().splitlines(keepends=True)[:20]
    lines[3] = "not json\n"
    (tmp_path / "bad.jsonl").write_text("".join(lines))
    return tmp_path


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_inspect_refuses_a_directory_as_its_rejects_file_before_the_pass(bad_line, overwrite):
    (bad_line / "rjdir").mkdir()
    r = cli_in_process("inspect", "bad.jsonl", "--on-bad-row", "skip", "--rejects", "rjdir", *overwrite, cwd=bad_line)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("ERROR: --rejects rjdir: is a directory, expected a file; name the file to write (e.g. "
                        "rjdir/rejects.jsonl)\n")
    assert list((bad_line / "rjdir").iterdir()) == []


def test_inspect_overwrite_replaces_its_own_rejects_list_and_no_file_of_the_users(bad_line):
    (bad_line / "notes.txt").write_text("keep\n")
    r = cli_in_process("inspect", "bad.jsonl", "--on-bad-row", "skip", "--rejects", "notes.txt", "--overwrite",
                       cwd=bad_line)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("ERROR: --rejects notes.txt: not a rejects list cluster-curate wrote; --overwrite replaces "
                        "only the tool's own outputs: move it, or choose another --rejects\n")
    assert (bad_line / "notes.txt").read_text() == "keep\n"

    _ok(cli_in_process("inspect", "bad.jsonl", "--on-bad-row", "skip", "--rejects", "rj.jsonl", "-q", cwd=bad_line))
    first = (bad_line / "rj.jsonl").read_text()
    assert json.loads(first)["location"] == "bad.jsonl:4"
    (bad_line / "bad.jsonl").write_text(GSM.read_text())  # no bad row now: the list is replaced by an empty one
    _ok(cli_in_process("inspect", "bad.jsonl", "--rejects", "rj.jsonl", "--overwrite", "-q", cwd=bad_line))
    assert (bad_line / "rj.jsonl").read_text() == ""
    _ok(cli_in_process("inspect", "bad.jsonl", "--rejects", "rj.jsonl", "--overwrite", "-q", cwd=bad_line))


# ----------------------------------------------------------------------------------------------------- minor ones


def test_a_job_array_whose_missing_part_owns_no_row_says_so(tmp_path):
    _ok(cli_in_process("embed", GSM, "--out", "emb", "--num-parts", "2", "--features", "text", "--dim", "16", "-q",
                       cwd=tmp_path))  # one chunk of 300 rows: part 1 owns none
    r = cli_in_process("cluster", "emb", "--out", "c.parquet", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (2, "ERROR: emb: incomplete: 1 of 2 parts written (part-00001-of-00002.parquet "
                                           "missing, owning none of the 300 rows); wait for the other pieces (embed "
                                           "--num-parts N --part-index I) to finish, or pass --force to use what is "
                                           "there\n")


def test_kinds_from_data_shorter_than_the_embedded_ids_name_the_data(run_dir, tmp_path):
    (tmp_path / "short.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:100]))
    r = cli_in_process("cluster", run_dir / "embeddings.parquet", "--out", "c.parquet", "--kinds", "answers",
                       "--data", "short.jsonl", "--force", "-q", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (2, "ERROR: short.jsonl: has no row with id 100, which was embedded; pass the "
                                           "dataset that was embedded (and its reading options)\n")
