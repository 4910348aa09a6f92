"""An output never destroys an input, and `--overwrite` replaces only the tool's own earlier output of that kind
(or an empty directory): through the CLI and the Python API, on real files, nothing else is touched."""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.io import writer as W
from cluster_curate.io.artifacts import make_meta, read_meta
from cluster_curate.loader import read_manifest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"
EMBED = ["--features", "text", "--dim", "16"]
SHARD = ["--num-shards", "2", "--micro-batch-size", "2"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A `run` directory (embeddings, clusters, selection, shards) over 300 GSM8K rows; tests copy from it."""
    from click.testing import CliRunner
    d = tmp_path_factory.mktemp("safety") / "p"
    r = CliRunner().invoke(main, ["run", str(DATA), "--out", str(d), *EMBED, "--k", "6", "--fraction", "0.31",
                                  *SHARD, "-q"])
    assert r.exit_code == 0, r.output
    return d


def _snapshot(root: Path) -> dict:
    """Every path under root, with the bytes' hash of each file."""
    return {str(p.relative_to(root)): hashlib.blake2b(p.read_bytes(), digest_size=12).hexdigest() if p.is_file()
            else "dir" for p in sorted(root.rglob("*"))}


def _cli(runner, *args):
    return runner.invoke(main, [str(a) for a in args])


def _refused(result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"ERROR: {expected}"], result.output


def _user_dir(root: Path, data: Path | None = None) -> Path:
    """A directory of the user's: data, notes and a sub-folder."""
    root.mkdir(parents=True, exist_ok=True)
    if data is not None:
        shutil.copy(data, root / "data.jsonl")
    (root / "notes.txt").write_text("keep\n")
    (root / "sub").mkdir()
    (root / "sub" / "more.txt").write_text("keep too\n")
    return root


NOT_TOOL_DIR = ("a directory cluster-curate did not write ({}); --overwrite replaces only the tool's own outputs: "
                "choose a new or empty directory")


# ------------------------------------------------------------------------------- the first user's two cases

def test_shard_into_the_folder_that_holds_its_data_is_refused_and_touches_nothing(pipeline, tmp_path, cli_runner):
    ow = _user_dir(tmp_path / "ow", DATA)
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", ow / "data.jsonl", "--out", ow, *SHARD,
             "--overwrite")
    _refused(r, f"--out {ow}: holds the input {ow / 'data.jsonl'}; choose another --out")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command, option", [("embed", "--out"), ("inspect", "--rejects")])
def test_a_command_never_writes_over_its_own_input(tmp_path, cli_runner, command, option):
    data = tmp_path / "self.jsonl"
    shutil.copy(DATA, data)
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, command, data, option, data, *(EMBED if command == "embed" else ()), "--overwrite")
    _refused(r, f"{option} {data}: is the input {data}; choose another {option}")
    assert _snapshot(tmp_path) == before


def test_an_artifact_named_as_another_format_is_refused(tmp_path, cli_runner):
    r = _cli(cli_runner, "embed", DATA, "--out", tmp_path / "emb.csv", *EMBED)
    _refused(r, f"--out {tmp_path / 'emb.csv'}: an embeddings artifact is a Parquet file: name it emb.parquet")
    assert not any(tmp_path.iterdir())


def test_the_same_path_spelled_another_way_is_still_the_input(tmp_path, cli_runner, monkeypatch):
    (tmp_path / "d").mkdir()
    shutil.copy(DATA, tmp_path / "d" / "x.jsonl")
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "embed", "d/x.jsonl", "--out", str(tmp_path / "d" / ".." / "d" / "x.jsonl"), *EMBED,
             "--overwrite")
    assert r.exit_code == 2 and "is the input d/x.jsonl" in r.output
    assert _snapshot(tmp_path) == before


# ------------------------------------------------------------------------------- shard

def test_shard_replaces_its_own_shards_and_an_empty_folder(pipeline, tmp_path, cli_runner):
    sel = pipeline / "selection.parquet"
    out = tmp_path / "shards"
    assert _cli(cli_runner, "shard", sel, "--data", DATA, "--out", out, *SHARD, "-q").exit_code == 0
    r = _cli(cli_runner, "shard", sel, "--data", DATA, "--out", out, "--num-shards", "3", "--micro-batch-size", "2",
             "--overwrite", "-q")
    assert r.exit_code == 0, r.output
    assert read_manifest(out)["num_shards"] == 3 and len(list(out.glob("shard-*.parquet"))) == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _cli(cli_runner, "shard", sel, "--data", DATA, "--out", empty, *SHARD, "--overwrite", "-q")
    assert r.exit_code == 0, r.output
    assert read_manifest(empty)["num_shards"] == 2


def test_shard_overwrite_refuses_a_folder_it_did_not_write(pipeline, tmp_path, cli_runner):
    mine = _user_dir(tmp_path / "mine")
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", DATA, "--out", mine, *SHARD, "--overwrite")
    _refused(r, f"--out {mine}: " + NOT_TOOL_DIR.format("no manifest.json"))
    assert _snapshot(tmp_path) == before
    # a manifest.json that is not the tool's is no licence either
    (mine / "manifest.json").write_text(json.dumps({"name": "my project"}))
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", DATA, "--out", mine, *SHARD, "--overwrite")
    _refused(r, f"--out {mine}: " + NOT_TOOL_DIR.format("its manifest.json is not a shard manifest"))
    assert _snapshot(tmp_path) == before


def test_shard_overwrite_refuses_its_own_folder_once_it_holds_a_file_of_the_user(pipeline, tmp_path, cli_runner):
    out = tmp_path / "shards"
    shutil.copytree(pipeline / "shards", out)
    (out / "logs").mkdir()
    (out / "logs" / "rank-00000.jsonl").write_text("{}\n")
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", DATA, "--out", out, *SHARD, "--overwrite")
    _refused(r, f"--out {out}: holds logs, which cluster-curate did not write; --overwrite replaces only the tool's "
                "own outputs: move it out or choose a new or empty directory")
    assert _snapshot(tmp_path) == before


def test_shard_refuses_the_data_of_a_mixture_file_inside_out(pipeline, tmp_path, cli_runner):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(DATA, out / "gsm.jsonl")
    mix = tmp_path / "mix.yaml"
    mix.write_text("inputs:\n  - path: out/gsm.jsonl\n")
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", mix, "--out", out, *SHARD, "--overwrite",
             "--force")
    assert r.exit_code == 2 and f"--out {out}: holds the input {out / 'gsm.jsonl'}" in r.output, r.output
    assert _snapshot(tmp_path) == before


# ------------------------------------------------------------------------------- single-file artifacts

def test_overwrite_replaces_only_an_artifact_of_the_same_kind(pipeline, tmp_path, cli_runner):
    emb = tmp_path / "e.parquet"
    shutil.copy(pipeline / "embeddings.parquet", emb)
    out = tmp_path / "c.parquet"
    r = _cli(cli_runner, "cluster", emb, "--out", out, "--k", "4", "-q")
    assert r.exit_code == 0, r.output
    r = _cli(cli_runner, "cluster", emb, "--out", out, "--k", "5", "--overwrite", "-q")  # its own clusters: replaced
    assert r.exit_code == 0, r.output
    assert read_meta(out, "clusters").params["k"] == 5
    notes = tmp_path / "notes.parquet"
    notes.write_bytes(b"my own bytes")
    table = tmp_path / "t.parquet"
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"id": [0, 1]}), table)  # a Parquet file, but not the tool's
    jsonl = tmp_path / "data.jsonl"
    shutil.copy(DATA, jsonl)
    before = _snapshot(tmp_path)
    for path in (notes, table, jsonl):
        r = _cli(cli_runner, "cluster", emb, "--out", path, "--k", "4", "--overwrite")
        _refused(r, f"--out {path}: not a file cluster-curate wrote (no 'cluster_curate' metadata); --overwrite "
                    "replaces only the tool's own outputs: choose another --out")
    r = _cli(cli_runner, "select", out, "--out", emb, "--fraction", "0.5", "--overwrite")
    _refused(r, f"--out {emb}: an embeddings artifact, not an earlier selection output; --overwrite replaces only "
                "the tool's own outputs of the same kind: choose another --out")
    r = _cli(cli_runner, "cluster", emb, "--out", emb, "--overwrite")
    _refused(r, f"--out {emb}: is the input {emb}; choose another --out")
    assert _snapshot(tmp_path) == before


def test_a_file_output_refuses_a_folder_in_its_place_unless_it_holds_the_tools_parts(pipeline, tmp_path, cli_runner):
    mine = _user_dir(tmp_path / "c.parquet")
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "cluster", pipeline / "embeddings.parquet", "--out", mine, "--k", "4", "--overwrite")
    _refused(r, f"--out {mine}: " + NOT_TOOL_DIR.format("no part-*.parquet files").replace(
        "choose a new or empty directory", "choose another --out"))  # an empty directory is no file's place either
    assert _snapshot(tmp_path) == before
    # parts of the tool's embeddings (as torchrun writes them) are replaced by a single file
    parts = tmp_path / "e"
    meta = make_meta("embeddings", {}, {}, {})
    W.write_part(pa.table({"id": [0]}), parts, "part-00000-of-00002.parquet", meta)
    W.write_part(pa.table({"id": [1]}), parts, "part-00001-of-00002.parquet", meta)
    (parts / "rejects-00000-of-00002.jsonl").write_text("")
    r = _cli(cli_runner, "embed", DATA, "--out", parts, *EMBED, "--overwrite", "-q")
    assert r.exit_code == 0, r.output
    assert parts.is_file() and read_meta(parts, "embeddings").rows == 300


def test_select_never_embeds_its_target_over_the_target(pipeline, tmp_path, cli_runner):
    target = tmp_path / "s.target.parquet"  # raw data under the name select gives the target's embeddings
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    pq.write_table(pj.read_json(DATA).slice(0, 20), target)
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "select", pipeline / "clusters.parquet", "--out", tmp_path / "s.parquet", "--target", target,
             "--fraction", "0.2")
    _refused(r, f"--out {tmp_path / 's.parquet'} (its file s.target.parquet): is the input {target}; choose "
                "another --out")
    assert _snapshot(tmp_path) == before


def test_no_input_is_where_a_command_writes_or_deletes_a_file_beside_its_output(pipeline, tmp_path, cli_runner):
    """An input named like a sidecar of the output (`OUT.rejects.jsonl`, the target embeddings' rejects) was
    deleted, exit 0: embed removes a stale rejects file beside its output when no row is rejected."""
    data = tmp_path / "e.rejects.jsonl"
    shutil.copy(DATA, data)
    target = tmp_path / "s.target.rejects.jsonl"
    target.write_text("".join(DATA.read_text().splitlines(keepends=True)[:5]))
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "embed", data, "--out", tmp_path / "e.parquet", *EMBED)
    _refused(r, f"--out {tmp_path / 'e.parquet'} (its file e.rejects.jsonl): is the input {data}; choose another "
                "--out")
    r = _cli(cli_runner, "select", pipeline / "clusters.parquet", "--out", tmp_path / "s.parquet", "--target",
             target, "--fraction", "0.2")
    _refused(r, f"{tmp_path / 's.target.parquet'} (the --target embeddings select writes beside --out) (its file "
                f"s.target.rejects.jsonl): is the input {target}; choose another --out")
    assert _snapshot(tmp_path) == before


def test_a_file_of_yours_where_a_command_keeps_a_sidecar_is_never_replaced(pipeline, tmp_path, cli_runner):
    """`OUT.rejects.jsonl` or `OUT.text.key` of the user's were replaced by embed's (exit 0, even without
    --overwrite); the tool's own from an earlier run are replaced as before."""
    data = DATA
    for name, text in (("out.rejects.jsonl", "my notes\n"), ("out.text.key", "my key\n"),
                       ("out.text.npz", "not numpy")):
        (tmp_path / name).write_text(text)
        before = _snapshot(tmp_path)
        for extra in ([], ["--overwrite"]):
            r = _cli(cli_runner, "embed", data, "--out", tmp_path / "out.parquet", *EMBED, *extra)
            _refused(r, f"{tmp_path / name}: not a file cluster-curate wrote, and --out {tmp_path / 'out.parquet'} "
                        "writes (or removes) one of that name beside it; --overwrite replaces only the tool's own "
                        "outputs: move it, or choose another --out")
            assert _snapshot(tmp_path) == before
        (tmp_path / name).unlink()
    for _ in range(2):  # its own sidecars, of the first run, replaced by the second
        assert _cli(cli_runner, "embed", data, "--out", tmp_path / "out.parquet", *EMBED, "--overwrite",
                    "-q").exit_code == 0
    (tmp_path / "out.partial").write_text("mine")  # a file where embed stages its chunks: an INTERNAL ERROR
    r = _cli(cli_runner, "embed", data, "--out", tmp_path / "out.parquet", *EMBED, "--overwrite")
    assert r.exit_code == 2 and "out.partial: not a file cluster-curate wrote" in r.output, r.output
    (tmp_path / "out.partial").unlink()
    (tmp_path / "in.partial").mkdir()  # data inside the staging folder, which embed replaces: it was deleted
    shutil.copy(DATA, tmp_path / "in.partial" / "d.jsonl")
    r = _cli(cli_runner, "embed", tmp_path / "in.partial" / "d.jsonl", "--out", tmp_path / "in.parquet", *EMBED)
    _refused(r, f"--out {tmp_path / 'in.parquet'} (its file in.partial): holds the input "
                f"{tmp_path / 'in.partial' / 'd.jsonl'}; choose another --out")
    assert (tmp_path / "in.partial" / "d.jsonl").read_bytes() == DATA.read_bytes()
    (tmp_path / "c.centroids.npy").write_text("mine")
    r = _cli(cli_runner, "cluster", pipeline / "embeddings.parquet", "--out", tmp_path / "c.parquet", "--k", "4")
    assert r.exit_code == 2 and "c.centroids.npy: not a file cluster-curate wrote" in r.output


# ------------------------------------------------------------------------------- export and report

def test_export_replaces_its_own_export_only(pipeline, tmp_path, cli_runner):
    shards = pipeline / "shards"
    out = tmp_path / "exp"
    assert _cli(cli_runner, "export", shards, "--for", "hf", "--out", out, "-q").exit_code == 0
    r = _cli(cli_runner, "export", shards, "--for", "torchrun", "--out", out, "--overwrite", "-q")
    assert r.exit_code == 0, r.output
    assert (out / "README.md").read_text().startswith("# `train.parquet` for torchrun")
    (out / "my-notes.md").write_text("keep\n")
    mine = _user_dir(tmp_path / "mine")
    (mine / "README.md").write_text("# my project\n")
    before = _snapshot(tmp_path)
    r = _cli(cli_runner, "export", shards, "--for", "hf", "--out", out, "--overwrite")
    _refused(r, f"--out {out}: holds my-notes.md, which cluster-curate did not write; --overwrite replaces only the "
                "tool's own outputs: move it out or choose a new or empty directory")
    r = _cli(cli_runner, "export", shards, "--for", "hf", "--out", mine, "--overwrite")
    _refused(r, f"--out {mine}: " + NOT_TOOL_DIR.format("no README.md of an export"))
    r = _cli(cli_runner, "export", shards, "--for", "hf", "--out", shards, "--overwrite")
    _refused(r, f"--out {shards}: is the input {shards}; choose another --out")
    assert _snapshot(tmp_path) == before


def test_report_into_a_folder_of_the_user_writes_only_its_plots(pipeline, tmp_path, cli_runner):
    rep = _user_dir(tmp_path / "rep")
    before = _snapshot(rep)
    r = _cli(cli_runner, "report", pipeline, "--out", rep, "-q")
    assert r.exit_code == 0, r.output
    after = _snapshot(rep)
    assert {k: v for k, v in after.items() if k in before} == before
    assert {k for k in after if k not in before} and all(k.endswith(".png") for k in after if k not in before)
    sel = tmp_path / "selection.parquet"
    shutil.copy(pipeline / "selection.parquet", sel)
    r = _cli(cli_runner, "report", sel, "--out", sel)
    _refused(r, f"--out {sel}: is the input {sel}; choose another --out")
    # not inside a shards directory, which `shard --overwrite` replaces whole and would then refuse
    before = _snapshot(pipeline)
    r = _cli(cli_runner, "report", pipeline, "--out", pipeline / "shards" / "report")
    _refused(r, f"--out {pipeline / 'shards' / 'report'}: inside the shards directory {pipeline / 'shards'}, which "
                "`--overwrite` replaces whole (and refuses with files of yours in it); choose a folder beside it")
    assert _snapshot(pipeline) == before


# ------------------------------------------------------------------------------- run

def test_run_with_its_data_inside_its_folder_keeps_the_data_and_the_users_files(tmp_path, cli_runner):
    d = _user_dir(tmp_path / "r", DATA)
    before = _snapshot(d)
    args = ["run", d / "data.jsonl", "--out", d, *EMBED, "--k", "6", *SHARD, "-q"]
    r = _cli(cli_runner, *args, "--fraction", "0.31")
    assert r.exit_code == 0, r.output
    r = _cli(cli_runner, *args, "--fraction", "0.5", "--overwrite")  # its stages replace their own outputs
    assert r.exit_code == 0, r.output
    assert read_manifest(d / "shards")["selected_rows"] == 150
    after = _snapshot(d)
    assert {k: v for k, v in after.items() if k in before} == before


def test_run_refuses_a_users_file_where_a_later_stage_writes_before_the_first_stage(tmp_path, cli_runner):
    """A `shards/` folder or a `selection.parquet` of the user's in run's folder: embed, cluster and select ran
    (hours, with a model) before shard refused to replace it. Refused before any stage now, nothing written."""
    for name, mine in (("shards", "mine.txt"), ("selection.parquet", None)):
        d = tmp_path / name.split(".")[0]
        if mine:
            (d / name).mkdir(parents=True)
            (d / name / mine).write_text("keep\n")
        else:
            d.mkdir()
            pq.write_table(pa.table({"x": [1]}), d / name)
        before = _snapshot(d)
        r = _cli(cli_runner, "run", DATA, "--out", d, *EMBED, "--k", "6", "--fraction", "0.31", *SHARD)
        stage = "shard" if mine else "select"
        why = (NOT_TOOL_DIR.format("no manifest.json") if mine else
               "not a file cluster-curate wrote (no 'cluster_curate' metadata); --overwrite replaces only the tool's "
               "own outputs: choose another --out")
        _refused(r, f"run's {stage} output {d / name}: {why}")
        assert _snapshot(d) == before


# ------------------------------------------------------------------------------- the Python API and the writer

def test_python_api_refuses_the_same(pipeline, tmp_path):
    import cluster_curate as cc
    ow = _user_dir(tmp_path / "ow", DATA)
    before = _snapshot(tmp_path)
    with pytest.raises(CurateError, match=r"holds the input .*data\.jsonl; choose another --out"):
        cc.shard(str(pipeline / "selection.parquet"), data=str(ow / "data.jsonl"), out=str(ow), num_shards=2,
                 micro_batch_size=2, overwrite=True)
    with pytest.raises(CurateError, match=r"is the input .*data\.jsonl"):
        cc.embed(str(ow / "data.jsonl"), out=str(ow / "data.jsonl"), features="text", dim=16, overwrite=True)
    with pytest.raises(CurateError, match=r"no manifest\.json"):
        cc.shard(str(pipeline / "selection.parquet"), data=str(DATA), out=str(ow), num_shards=2, micro_batch_size=2,
                 overwrite=True)
    assert _snapshot(tmp_path) == before


def test_the_writer_never_deletes_a_folder_it_did_not_write(tmp_path):
    meta = make_meta("embeddings", {}, {}, {})
    mine = _user_dir(tmp_path / "mine")
    before = _snapshot(tmp_path)
    with pytest.raises(CurateError, match="no part-"):
        W.write_artifact(pa.table({"id": [0]}), mine, meta, overwrite=True)
    schema = pa.schema([("id", pa.int64())]).with_metadata(W.file_metadata(meta))
    with pytest.raises(CurateError, match="no part-"):
        with W.parquet_stream(mine, schema):
            pass
    from cluster_curate.io.artifacts import SHARDS
    from cluster_curate.io.proxy_store import is_proxy_dir
    for kind in (SHARDS, is_proxy_dir):
        with pytest.raises(CurateError, match="did not write|not a directory cluster-curate wrote"):
            with W.staged_directory(mine, kind):
                pass
    notes = tmp_path / "mine" / "notes.txt"
    with pytest.raises(CurateError, match="not a file cluster-curate wrote"):
        W.write_artifact(pa.table({"id": [0]}), notes, meta, overwrite=True)
    assert _snapshot(tmp_path) == before
    # the tool's own artifact is replaced; an empty folder is not turned into a file of its name
    e = tmp_path / "e.parquet"
    W.write_artifact(pa.table({"id": [0]}), e, meta)
    W.write_artifact(pa.table({"id": [0, 1]}), e, meta, overwrite=True)
    assert read_meta(e).rows == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(CurateError, match="an empty directory, but an embeddings artifact is written as one Parquet"):
        W.write_artifact(pa.table({"id": [0]}), tmp_path / "empty", meta, overwrite=True)
    assert (tmp_path / "empty").is_dir()


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")  # what f.write and pyarrow raise: no file named


def test_a_full_disk_is_one_line_naming_the_output_and_leaves_no_temporary_file(pipeline, tmp_path, cli_runner,
                                                                                monkeypatch):
    """A disk that fills up mid-write was an INTERNAL ERROR `[Errno 28] No space left on device`, naming no
    file; it is the user's to fix: one line naming the output, nothing half-written beside it."""
    before = _snapshot(tmp_path)
    monkeypatch.setattr(pq, "write_table", _disk_full)
    r = _cli(cli_runner, "embed", DATA, "--out", tmp_path / "e.parquet", *EMBED, "--commit-every", "1000000")
    assert r.exit_code == 2, r.output
    last = r.output.strip().splitlines()[-1]  # the chunk being committed
    assert last.startswith(f"ERROR: {tmp_path / 'e.'}") and ": cannot write it: no space left on device" in last, last
    monkeypatch.setattr(pq.ParquetWriter, "write_table", _disk_full)
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", DATA, "--out", tmp_path / "shards", *SHARD)
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1].startswith(f"ERROR: {tmp_path / 'shards'}: cannot write it: "
                                                        "no space left on device"), r.output
    monkeypatch.undo()
    left = {k for k in _snapshot(tmp_path) if k not in before and ".partial" not in k and not k.startswith("e.")}
    assert left == set(), left  # embed keeps only its committed chunks (for --resume) and its text model
    r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", DATA, "--out", tmp_path / "shards", *SHARD)
    assert r.exit_code == 0, r.output  # room again: the same command succeeds


def test_shards_through_a_link_to_a_folder_elsewhere_go_there_and_keep_the_link(pipeline, tmp_path, cli_runner):
    """`ln -s /scratch/shards shards; shard ... --out shards --overwrite`: the new folder was swapped in at the
    link, so the shards landed beside it (the small disk), the link was gone and the scratch folder left empty."""
    (tmp_path / "scratch" / "shards").mkdir(parents=True)
    link = tmp_path / "shards"
    link.symlink_to(tmp_path / "scratch" / "shards", target_is_directory=True)
    for num_shards in ("2", "4"):  # into the empty folder, then over its own shards
        r = _cli(cli_runner, "shard", pipeline / "selection.parquet", "--data", DATA, "--out", link, "--overwrite",
                 "--num-shards", num_shards, "--micro-batch-size", "2")
        assert r.exit_code == 0, r.output
        assert link.is_symlink() and read_manifest(link)["num_shards"] == int(num_shards)
        assert read_manifest(tmp_path / "scratch" / "shards")["num_shards"] == int(num_shards)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scratch", "shards"]
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == ["shards"]  # no staging folder left


def test_single_file_outputs_through_a_link_to_a_file_elsewhere_go_there_and_keep_the_link(pipeline, tmp_path,
                                                                                            cli_runner):
    """`ln -s /scratch/s.parquet s.parquet; select ... --out s.parquet --overwrite`: the new file was renamed over
    the link, so it landed beside it (the small disk), the link was gone and the old file left behind. Every
    single-file output now goes where the link points, as a folder output does, and the link stays."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for name, source in (("e.parquet", "embeddings.parquet"), ("c.parquet", "clusters.parquet"),
                         ("s.parquet", "selection.parquet")):
        shutil.copy(pipeline / source, scratch / name)
        (tmp_path / name).symlink_to(scratch / name)
    for argv in (["embed", DATA, "--out", tmp_path / "e.parquet", *EMBED],
                 ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "c.parquet", "--k", "5"],
                 ["select", tmp_path / "c.parquet", "--out", tmp_path / "s.parquet", "--budget", "40"]):
        r = _cli(cli_runner, *argv, "--overwrite")
        assert r.exit_code == 0, r.output
    for name, rows in (("e.parquet", 300), ("c.parquet", 300), ("s.parquet", 40)):
        assert (tmp_path / name).is_symlink() and read_meta(scratch / name).rows == rows
    assert read_meta(scratch / "c.parquet").params["k"] == 5
    beside = {p.name for p in tmp_path.iterdir()} - {"scratch", "e.parquet", "c.parquet", "s.parquet"}
    assert all(not n.endswith(".parquet") and not n.startswith(".") for n in beside), beside  # only sidecars
    assert sorted(p.name for p in scratch.iterdir()) == ["c.parquet", "e.parquet", "s.parquet"]  # no temporary


# ------------------------------------------------------------------------------- select's files beside its output

def test_select_names_what_a_folder_or_the_pools_own_embeddings_given_as_examples_are(pipeline, tmp_path,
                                                                                      cli_runner):
    """`--decontaminate DIR` of a folder holding artifacts was said to be 'a clusters artifact' (its first file's
    kind), and `--target` the pool's own embeddings 'not embedded in the pool's feature space'."""
    base = ["select", pipeline / "clusters.parquet", "--out", tmp_path / "s.parquet", "--budget", "50"]
    folder = tmp_path / "mine"  # a folder of the user's that holds artifacts among other files
    folder.mkdir()
    for name in ("clusters.parquet", "embeddings.parquet"):
        shutil.copy(pipeline / name, folder / name)
    shutil.copy(DATA, folder / "pool.jsonl")
    r = _cli(cli_runner, *base, "--decontaminate", folder)
    assert r.exit_code == 2 and "artifact" not in r.output and r.output.startswith(f"ERROR: --decontaminate "
                                                                                    f"{folder}"), r.output
    r = _cli(cli_runner, *base, "--target", pipeline / "embeddings.parquet")
    assert r.exit_code == 2 and r.output.splitlines()[-1] == (
        f"ERROR: --target {pipeline / 'embeddings.parquet'}: is the pool's own embeddings (those the clusters were "
        "made from): give a few examples of the task instead"), r.output
    assert not (tmp_path / "s.parquet").exists()
