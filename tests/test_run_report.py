"""`run` (the whole pipeline, resumable) and `report` (tables and plots), driven as a user would:
click's runner and real subprocesses, including a SIGKILL during `embed`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cluster_curate.cli import main
from process_helpers import stop_when

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"
FAST = ["--features", "text", "--dim", "32", "--k", "8", "--fraction", "0.31", "--num-shards", "2",
        "--micro-batch-size", "2"]


def _run(runner, out, *extra):
    result = runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, *extra])
    assert result.exit_code == 0, result.output
    return result


def _shard_tables(directory: Path) -> list:
    return [pq.read_table(f).replace_schema_metadata(None) for f in sorted(directory.glob("shard-*.parquet"))]


def test_run_writes_every_stage_then_skips_what_is_up_to_date(cli_runner, tmp_path):
    out = tmp_path / "curated"
    _run(cli_runner, out)
    for name in ("embeddings.parquet", "clusters.parquet", "selection.parquet", "shards/manifest.json",
                 "run-state.json"):
        assert (out / name).exists(), name
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    assert manifest["selected_rows"] == 93  # 31% of 300, exactly

    again = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--json"])
    assert again.exit_code == 0, again.output
    summary = json.loads(again.stdout)
    assert [s["status"] for s in summary["stages"]] == ["up to date"] * 4

    # a changed selection option replaces a run: refused without --overwrite (issue 20 #4), nothing touched
    changed = [a if a != "0.31" else "0.5" for a in FAST]
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    refused = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *changed, "--json"])
    assert refused.exit_code == 2 and "holds a run made with other select options (--fraction 0.31 -> 0.5); pass " \
        "--overwrite" in refused.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    # an option recorded only when off its old value (--kinds) is named by its value on both sides
    kinds = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--kinds", "none"])
    assert kinds.exit_code == 2 and "other cluster options (--kinds auto -> none)" in kinds.stderr
    # options of two stages changed: both named, as --overwrite replaces both (it named the first stage's alone)
    two = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *changed[:-1], "1"])
    assert two.exit_code == 2 and "other select options (--fraction 0.31 -> 0.5) and shard options " \
        "(--micro-batch-size 2 -> 1); pass --overwrite" in two.stderr
    # with --overwrite it redoes select and shard only
    third = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *changed, "--overwrite", "--json"])
    status = {s["stage"]: s["status"] for s in json.loads(third.stdout)["stages"]}
    assert status == {"embed": "up to date", "cluster": "up to date", "select": "ran", "shard": "ran"}
    assert json.loads((out / "shards" / "manifest.json").read_text())["selected_rows"] == 150


def test_options_given_at_the_value_a_stage_takes_without_them_keep_a_run_up_to_date(cli_runner, tmp_path):
    """`--features text`, `--commit-every 2048`, `--batch-tokens 16384`, `--dim 256` (text), `--length-window 64`:
    each the value its stage settles when it is not given, and each refused as 'other options (--features (not
    given) -> text)', pushing a user to --overwrite and a run from scratch; so was leaving one out after giving it.
    They are the same run now, and another value is still a change, named with the value the stage took."""
    base = ["run", str(DATA), "--out", str(tmp_path / "c"), "--k", "8", "--fraction", "0.31", "-n", "2", "--json"]
    assert cli_runner.invoke(main, base).exit_code == 0
    for given in (["--features", "text"], ["--commit-every", "2048"], ["--batch-tokens", "16384"], ["--dim", "256"],
                  ["--max-length", "1024"], ["--proxy-size", "small"], ["--length-window", "64"]):
        r = cli_runner.invoke(main, [*base, *given])
        assert r.exit_code == 0, (given, r.output)
        assert [s["status"] for s in json.loads(r.stdout)["stages"]] == ["up to date"] * 4, given
    r = cli_runner.invoke(main, [*base, "--dim", "128"])
    assert r.exit_code == 2 and "other embed options (--dim 256 -> 128); pass --overwrite" in r.stderr, r.stderr
    given = ["run", str(DATA), "--out", str(tmp_path / "g"), *FAST, "--length-window", "64"]
    assert cli_runner.invoke(main, given).exit_code == 0
    r = cli_runner.invoke(main, [*given[:-2], "--json"])  # left out after it was given
    assert r.exit_code == 0 and [s["status"] for s in json.loads(r.stdout)["stages"]] == ["up to date"] * 4


def test_run_reruns_a_stage_whose_default_changed_and_refuses_a_changed_choice(cli_runner, tmp_path):
    from cluster_curate.commands.run import RunState

    out = tmp_path / "curated"
    _run(cli_runner, out)
    path = out / "run-state.json"
    state = json.loads(path.read_text())
    assert "fraction" in state["select"]["given"] and "within" not in state["select"]["given"]

    def recorded_as(within: str, given: bool | None) -> None:
        """The record a run with `--within within` would have left, given or by default (None: made before run
        noted which options were given)."""
        record = json.loads(json.dumps(state))
        select = record["select"]
        select["option_values"]["within"] = within
        select["options"] = RunState.request("select", select["option_values"], None, 0)["options"]
        for stage in record.values():
            if given is None:
                del stage["given"]
        if given:
            select["given"].append("within")
        path.write_text(json.dumps(record))

    def again(*extra):
        return cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, *extra, "--json"])

    # a directory from before the default became auto, recorded with or without which options were defaults
    for given in (None, False):
        recorded_as("random", given)
        result = again()
        assert result.exit_code == 0, result.output
        stages = {s["stage"]: s for s in json.loads(result.stdout)["stages"]}
        assert [stages[s]["status"] for s in ("embed", "cluster", "select")] == ["up to date", "up to date", "ran"]
        assert stages["select"]["reason"] == "its default changed (--within random -> auto)"
        assert json.loads(path.read_text())["select"]["option_values"]["within"] == "auto"
    # --within random given then is the user's choice: taking the default now replaces it, which is refused
    recorded_as("random", True)
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    refused = again()
    assert refused.exit_code == 2 and "other select options (--within random -> auto); pass --overwrite" in \
        refused.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before
    path.write_text(json.dumps(state))
    # the default's value given is the same run; another value given is a replacement
    assert [s["status"] for s in json.loads(again("--within", "auto").stdout)["stages"]] == ["up to date"] * 4
    assert "(--within auto -> random)" in again("--within", "random").stderr


def test_run_state_takes_a_former_default_recorded_without_defaults_as_a_default(tmp_path):
    from cluster_curate.commands.run import RunState

    (tmp_path / "run-state.json").write_text(json.dumps({  # as a directory from before --kinds existed left it
        "cluster": {"option_values": {"k": "auto", "seed": 0}},
        "embed": {"option_values": {"text_weighting": "tf", "dim": 32}}}))
    state = RunState(tmp_path)
    now = RunState.request("cluster", {"k": "auto", "seed": 0, "kinds": "auto"}, None, 1, frozenset({"seed"}))
    assert state.option_changes("cluster", now) == ({}, {"kinds": ("none", "auto")})
    embed = RunState.request("embed", {"text_weighting": "slot", "dim": 64}, None, 1, frozenset({"dim"}))
    assert state.changed_options("embed", embed) == {"dim": (32, 64), "text_weighting": ("tf", "slot")}
    # --dim 64 was given now: the user's change; --text-weighting was left at its default, which moved
    assert state.option_changes("embed", embed) == ({"dim": (32, 64)}, {"text_weighting": ("tf", "slot")})
    chosen = RunState.request("embed", {"text_weighting": "slot", "dim": 32}, None, 1, frozenset({"text_weighting"}))
    assert state.option_changes("embed", chosen)[1] == {}  # --text-weighting slot given: the user's choice


def test_run_redoes_a_stage_whose_output_was_removed(cli_runner, tmp_path):
    out = tmp_path / "curated"
    _run(cli_runner, out)
    (out / "clusters.parquet").unlink()
    result = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--json"])
    status = {s["stage"]: s["status"] for s in json.loads(result.stdout)["stages"]}
    assert status["embed"] == "up to date" and status["cluster"] == "ran"


def test_run_redoes_shards_whose_files_were_swapped_rewritten_or_removed(cli_runner, tmp_path):
    """The manifest alone said the shards were up to date: a training would then read another rank's plan. Nor
    did a manifest edited since, or its left-over ids removed: export then wrote fewer rows than were selected."""
    out = tmp_path / "curated"
    _run(cli_runner, out)
    shards = sorted((out / "shards").glob("shard-*.parquet"))
    manifest, leftover = out / "shards" / "manifest.json", out / "shards" / "leftover_ids.txt"
    assert json.loads(manifest.read_text())["leftover_rows"] >= 1
    written = [p.read_bytes() for p in (*shards, manifest, leftover)]
    for change in ("swap", "rewrite", "remove", "manifest", "leftover"):
        if change == "swap":
            shards[0].write_bytes(written[1])
            shards[1].write_bytes(written[0])
        elif change == "rewrite":
            shards[1].write_bytes(written[1] + b"\0")
        elif change == "remove":
            shards[0].unlink()
        elif change == "manifest":
            manifest.write_text(json.dumps({**json.loads(written[2]), "leftover_ids": []}))
        else:
            leftover.unlink()
        result = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--json"])
        stages = {s["stage"]: s for s in json.loads(result.stdout)["stages"]}
        assert [stages[s]["status"] for s in ("embed", "cluster", "select", "shard")] == ["up to date"] * 3 + ["ran"]
        assert stages["shard"]["reason"] == "its output is missing or was changed", change
        assert [p.read_bytes() for p in (*shards, manifest, leftover)] == written, change  # the same shards again


def test_shards_recorded_by_the_manifests_fingerprint_alone_stay_up_to_date(cli_runner, tmp_path):
    """A directory whose run recorded the shards by their manifest's fingerprint alone (before the manifest's bytes
    counted) is not sharded again for that."""
    out = tmp_path / "curated"
    _run(cli_runner, out)
    state = json.loads((out / "run-state.json").read_text())
    state["shard"]["fingerprint"] = json.loads((out / "shards" / "manifest.json").read_text())["fingerprint"]
    (out / "run-state.json").write_text(json.dumps(state))
    result = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--json"])
    assert [s["status"] for s in json.loads(result.stdout)["stages"]] == ["up to date"] * 4


def test_run_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "a"}\n{"question": oops}\n')
    proc = subprocess.run([sys.executable, "-m", "cluster_curate", "run", str(bad), "--out", str(tmp_path / "o"),
                           *FAST], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{bad}:2: invalid JSON" in proc.stderr


def test_internal_error_exits_1_without_traceback(cli_runner, tmp_path, monkeypatch):
    from cluster_curate import selection

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(selection, "select_rows", boom)
    result = cli_runner.invoke(main, ["run", str(DATA), "--out", str(tmp_path / "o"), *FAST])
    assert result.exit_code == 1
    assert "INTERNAL ERROR: RuntimeError: disk on fire" in result.stderr
    assert "Traceback" not in result.output


def test_quiet_prints_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cluster_curate", "run", str(DATA), "--out", str(tmp_path / "o"),
                           *FAST, "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""


def test_report_tables_and_plots(cli_runner, tmp_path):
    out = tmp_path / "curated"
    _run(cli_runner, out)
    result = cli_runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "rep"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["embeddings"]["rows"] == 300
    assert data["clusters"]["k"] == 8 and data["clusters"]["mixed_clusters_cut"] == 0  # a given k is kept
    assert data["selection"]["selected"] == 93
    assert data["shards"]["shards"] == 2
    plots = {Path(p).name for p in data["plots"]}
    assert plots == {"cluster_sizes.png", "features_pca.png", "rank_loads.png"}
    for p in data["plots"]:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(p).stat().st_size > 10_000


def test_report_plots_of_shards_gone_or_changed_are_one_line(cli_runner, tmp_path):
    """A shard file removed was an INTERNAL ERROR of the plots, and one rewritten since was drawn as the plan: each
    file is checked against the manifest first, as export and verify check it."""
    out = tmp_path / "curated"
    _run(cli_runner, out)
    first = sorted((out / "shards").glob("shard-*.parquet"))[0]
    pq.write_table(pq.read_table(first).slice(0, 2), first)
    result = cli_runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 2 and f"{first}: not the file `shard` wrote for rank 0" in result.stderr, result.output
    first.unlink()
    result = cli_runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 2 and f"{first}: cannot read the shard" in result.stderr, result.output
    assert not (tmp_path / "rep").exists()


def test_report_out_for_an_artifact_without_plots_says_so_and_leaves_no_folder(cli_runner, tmp_path):
    out = tmp_path / "curated"
    _run(cli_runner, out)
    result = cli_runner.invoke(main, ["report", str(out / "embeddings.parquet"), "--out", str(tmp_path / "rep"),
                                      "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["plots"] == [] and data["embeddings"]["rows"] == 300
    assert any("no plot for embeddings alone" in w for w in data["warnings"])
    assert not (tmp_path / "rep").exists()
    # the Python API (no output lock around it) leaves none of the folders it made either
    from cluster_curate import report
    assert report([str(out / "embeddings.parquet")], out=str(tmp_path / "new" / "rep"))[1] == []
    assert not (tmp_path / "new").exists()
    # into an earlier report's folder: its plots stay, as the warning says nothing was written there
    assert cli_runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "rep")]).exit_code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()}
    assert "cluster_sizes.png" in before
    again = cli_runner.invoke(main, ["report", str(out / "embeddings.parquet"), "--out", str(tmp_path / "rep")])
    assert again.exit_code == 0 and "nothing written there" in again.stderr, again.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").iterdir()} == before


def test_report_follows_lineage_from_the_shards(cli_runner, tmp_path):
    out = tmp_path / "curated"
    _run(cli_runner, out)
    result = cli_runner.invoke(main, ["report", str(out / "shards"), "--json"])
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)) >= {"embeddings", "clusters", "selection", "shards"}


def test_report_of_one_shard_file_reports_its_directory_and_an_export_is_refused(cli_runner, tmp_path):
    """A shard file (or an export's data, which is a shard's kind) printed nothing and exited 0: no section
    describes one rank's file. Its directory's report is given; an export's, with no manifest beside it, is refused
    in a line saying what to report."""
    out = tmp_path / "curated"
    _run(cli_runner, out)
    shard = sorted((out / "shards").glob("shard-*.parquet"))[0]
    result = cli_runner.invoke(main, ["report", str(shard), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["shards"]["shards"] == 2
    assert cli_runner.invoke(main, ["export", str(out / "shards"), "--for", "hf", "--out", str(tmp_path / "e"),
                                    "-q"]).exit_code == 0
    refused = cli_runner.invoke(main, ["report", str(tmp_path / "e" / "train.parquet")])
    assert refused.exit_code == 2 and refused.stderr.strip() == (
        f"ERROR: {tmp_path / 'e' / 'train.parquet'}: one shard's rows, with no manifest.json beside it (a trainer "
        "export's data?); report the shard directory they were written in")


def test_a_report_into_a_folder_of_the_users_leaves_no_plot_of_an_earlier_report(cli_runner, tmp_path):
    """Plots go into a folder holding the user's own files beside them; an earlier report's plot that the new one
    does not draw (rank_loads.png, after a report of the selection alone) stayed, as if it were the new one's."""
    out, rep = tmp_path / "curated", tmp_path / "rep"
    _run(cli_runner, out)
    rep.mkdir()
    (rep / "notes.txt").write_text("mine")
    assert cli_runner.invoke(main, ["report", str(out), "--out", str(rep), "-q"]).exit_code == 0
    assert {p.name for p in rep.iterdir()} == {"notes.txt", "cluster_sizes.png", "features_pca.png", "rank_loads.png"}
    assert cli_runner.invoke(main, ["report", str(out / "selection.parquet"), "--out", str(rep), "-q"]).exit_code == 0
    assert {p.name for p in rep.iterdir()} == {"notes.txt", "cluster_sizes.png", "features_pca.png"}


def test_report_rejects_what_is_not_an_artifact(cli_runner, tmp_path):
    result = cli_runner.invoke(main, ["report", str(DATA)])
    assert result.exit_code == 2
    assert "not a" in result.stderr


@pytest.mark.slow
def test_run_killed_during_embed_resumes_to_the_same_shards(tmp_path):
    """SIGKILL while `embed` is committing chunks, run again: the shards equal an uninterrupted run's."""
    opts = ["--features", "hidden", "--proxy-size", "tiny", "--proxy-steps", "10", "--commit-every", "20",
            "--batch-tokens", "512", "--k", "6", "--fraction", "0.31", "--num-shards", "2", "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "cluster_curate", "run", str(DATA)]
    reference = tmp_path / "reference"
    subprocess.run(cmd + ["--out", str(reference)] + opts, check=True, env=env, timeout=600)

    out = tmp_path / "killed"
    proc = subprocess.Popen(cmd + ["--out", str(out)] + opts, env=env, stderr=subprocess.PIPE, text=True)
    partial = out / "embeddings.partial"
    stop_when(proc, lambda: len(list(partial.glob("chunk-*.parquet"))) >= 2, interval=0.05)
    proc.kill()
    proc.communicate(timeout=60)
    committed = len(list(partial.glob("chunk-*.parquet")))
    assert 2 <= committed < 15 and not (out / "embeddings.parquet").exists()

    subprocess.run(cmd + ["--out", str(out)] + opts, check=True, env=env, timeout=600)
    got, want = _shard_tables(out / "shards"), _shard_tables(reference / "shards")
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        assert a.equals(b)


_IMPORTS_AFTER_COMMAND = """
import json, sys
from cluster_curate.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
imported = "pandas" in sys.modules
import pandas, pyarrow as pa
try:
    converts = pa.table({"a": [1, 2]}).to_pandas().shape == (2, 1)
except ImportError:
    converts = False
print(json.dumps({"imported": imported, "usable": pandas.DataFrame({"a": [1]}).shape == (1, 1),
                  "pyarrow_converts": converts}))
"""


def _imports_after(*args) -> dict:
    proc = subprocess.run([sys.executable, "-c", _IMPORTS_AFTER_COMMAND, *map(str, args), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_commands_on_local_files_never_import_pandas(tmp_path):
    """pyarrow would import pandas (a third of a short command's time) only to ask whether arrays are pandas
    objects; the commands let it find none, and pandas still imports for whoever needs it afterwards."""
    out = tmp_path / "o"
    assert _imports_after("run", DATA, "--out", out, *FAST) == {"imported": False, "usable": True,
                                                                "pyarrow_converts": True}
    assert _imports_after("select", out / "clusters.parquet", "--out", tmp_path / "s.parquet",
                          "--fraction", "0.5")["imported"] is False
    assert pq.read_table(tmp_path / "s.parquet").num_rows == 150
    assert _imports_after("shard", tmp_path / "s.parquet", "--data", DATA, "--out", tmp_path / "sh",
                          "--num-shards", "2")["imported"] is False
    assert sum(t.num_rows for t in _shard_tables(tmp_path / "sh")) == 150


def test_commands_on_hf_datasets_keep_pyarrow_pandas_conversions(tmp_path):
    """`datasets` hands pyarrow pandas objects (its CSV and JSON builders), so its inputs leave pyarrow as it is."""
    import datasets

    saved = tmp_path / "saved"
    datasets.Dataset.from_json(str(DATA)).save_to_disk(str(saved))
    result = _imports_after("embed", saved, "--out", tmp_path / "e.parquet", "--features", "text", "--dim", "8")
    assert result == {"imported": True, "usable": True, "pyarrow_converts": True}
    assert pq.read_table(tmp_path / "e.parquet").num_rows == 300


def test_run_after_an_upgrade_reruns_the_changed_stage_and_says_why(cli_runner, tmp_path, monkeypatch):
    from cluster_curate import selection
    out = tmp_path / "curated"
    _run(cli_runner, out)
    before = json.loads((out / "selection.parquet").parent.joinpath("run-state.json").read_text())
    monkeypatch.setattr(selection, "ALGORITHM_VERSION", selection.ALGORITHM_VERSION + 1)
    again = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--json"])
    assert again.exit_code == 0, again.output
    stages = {s["stage"]: s for s in json.loads(again.stdout)["stages"]}
    assert [stages[s]["status"] for s in ("embed", "cluster", "select", "shard")] == ["up to date"] * 2 + ["ran"] * 2
    v = selection.ALGORITHM_VERSION
    assert stages["select"]["reason"] == f"its algorithm changed (version {v - 1} -> {v})"
    assert stages["shard"]["reason"] == "its input changed"  # the selection's fingerprint holds the version
    meta = pq.read_schema(out / "selection.parquet").metadata[b"cluster_curate"]
    assert json.loads(meta)["algorithm"] == v
    after = json.loads((out / "run-state.json").read_text())
    assert after["select"]["fingerprint"] != before["select"]["fingerprint"]
    assert after["cluster"] == before["cluster"]


def test_targeted_run_follows_targetings_algorithm_version(cli_runner, tmp_path, monkeypatch):
    """A targeted selection records targeting's version: run redoes it when that version changes (it compared
    selection's, which a targeted selection does not use), and not when only selection's does."""
    from cluster_curate import selection, targeting
    target = tmp_path / "target.jsonl"
    target.write_text("".join(DATA.read_text().splitlines(keepends=True)[:20]))
    out = tmp_path / "curated"
    _run(cli_runner, out, "--target", target)
    monkeypatch.setattr(selection, "ALGORITHM_VERSION", selection.ALGORITHM_VERSION + 1)
    same = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--target", str(target), "--json"])
    assert [s["status"] for s in json.loads(same.stdout)["stages"]] == ["up to date"] * 4, same.output
    monkeypatch.setattr(targeting, "ALGORITHM_VERSION", targeting.ALGORITHM_VERSION + 1)
    again = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--target", str(target), "--json"])
    stages = {s["stage"]: s for s in json.loads(again.stdout)["stages"]}
    v = targeting.ALGORITHM_VERSION
    assert stages["select"]["reason"] == f"its algorithm changed (version {v - 1} -> {v})", again.output
    assert stages["shard"]["status"] == "ran"
    assert json.loads(pq.read_schema(out / "selection.parquet").metadata[b"cluster_curate"])["algorithm"] == v
    # a state written before select's version followed --target (selection's recorded): the artifact's own decides
    state = json.loads((out / "run-state.json").read_text())
    state["select"]["algorithm"] = selection.ALGORITHM_VERSION
    (out / "run-state.json").write_text(json.dumps(state))
    old = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--target", str(target), "--json"])
    assert [s["status"] for s in json.loads(old.stdout)["stages"]] == ["up to date"] * 4, old.output
    # --target dropped: its options changed (the two versions differ too, but that is not why it runs again)
    plain = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--overwrite", "--json"])
    stages = {s["stage"]: s for s in json.loads(plain.stdout)["stages"]}
    assert stages["select"]["reason"] == "its options changed", plain.output


def test_run_refuses_a_stage_output_its_run_state_does_not_record(cli_runner, tmp_path):
    """`embed ... --out DIR/embeddings.parquet` (a Makefile's stage), then `run DATA --out DIR`: run said 'embed: not
    run before' and replaced it without --overwrite (README, Artifacts)."""
    out = tmp_path / "curated"
    made = cli_runner.invoke(main, ["embed", str(DATA), "--out", str(out / "embeddings.parquet"), "--features", "text",
                                    "--dim", "16", "-q"])
    assert made.exit_code == 0, made.output
    before = (out / "embeddings.parquet").read_bytes()
    refused = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST])
    assert refused.exit_code == 2 and refused.stderr.strip().splitlines() == [
        f"ERROR: {out / 'embeddings.parquet'}: an output that no run-state.json beside it records (made by a stage's "
        "own command?); pass --overwrite to replace it, or choose another --out"]
    assert (out / "embeddings.parquet").read_bytes() == before and not (out / "run-state.json").exists()
    replaced = _run(cli_runner, out, "--overwrite", "--json")
    assert [s["status"] for s in json.loads(replaced.stdout)["stages"]] == ["ran"] * 4
    assert [s["status"] for s in json.loads(_run(cli_runner, out, "--json").stdout)["stages"]] == ["up to date"] * 4


def test_a_killed_run_resumes_its_own_chunks_and_keeps_those_another_option_would_discard(cli_runner, tmp_path):
    """A run killed during embed, run again with another embed option: its committed chunks were thrown away without
    a word (`embed` alone refuses). Refused by embed, the chunks kept; run again as it was, it resumes them and says
    so (it said 'embed: not run before')."""
    out = tmp_path / "curated"
    argv = ["run", str(DATA), "--out", str(out), *FAST, "--commit-every", "5"]
    proc = subprocess.Popen([sys.executable, "-m", "cluster_curate", *argv, "--quiet"], stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    partial = out / "embeddings.partial"
    stop_when(proc, lambda: list(partial.glob("chunk-*.parquet")), interval=0.01)
    proc.kill()
    proc.communicate(timeout=60)
    chunks = {p.name: p.read_bytes() for p in partial.glob("chunk-*.parquet")}
    refused = cli_runner.invoke(main, [a if a != "32" else "16" for a in argv])  # --dim 16
    found = f"{len(chunks)} committed chunk{'s' if len(chunks) > 1 else ''} found"
    assert refused.exit_code == 2 and refused.stderr.strip().splitlines() == [
        f"run: embed: not finished before ({found})",
        f"ERROR: {partial}: holds an interrupted run with other parameters or data (--dim 32 -> 16); the same command "
        "resumes it (embed's --resume, run as it was), or pass --overwrite to start afresh"]
    assert {p.name: p.read_bytes() for p in partial.glob("chunk-*.parquet")} == chunks
    resumed = cli_runner.invoke(main, [*argv, "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert f"run: embed: not finished before ({found})" in resumed.stderr
    summary = json.loads(resumed.stdout)
    assert [s["status"] for s in summary["stages"]] == ["ran"] * 4
    assert summary["summaries"]["embed"]["chunks_resumed"] == len(chunks)


def test_run_keeps_the_committed_chunks_of_an_embed_command_it_does_not_record(cli_runner, tmp_path):
    """`embed ... --out DIR/embeddings.parquet` killed, then `run DATA --out DIR`: its embed threw the chunks away
    where their plan was not its own (here --commit-every); run with that plan, it resumes them."""
    out = tmp_path / "curated"
    proc = subprocess.Popen([sys.executable, "-m", "cluster_curate", "embed", str(DATA), "--out",
                             str(out / "embeddings.parquet"), "--features", "text", "--dim", "32", "--commit-every",
                             "5", "--quiet"], stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    partial = out / "embeddings.partial"
    stop_when(proc, lambda: list(partial.glob("chunk-*.parquet")), interval=0.01)
    proc.kill()
    proc.communicate(timeout=60)
    chunks = sorted(partial.glob("chunk-*.parquet"))
    refused = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST])
    assert refused.exit_code == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        f"ERROR: {partial}: holds an interrupted run with other parameters or data (--commit-every "), refused.stderr
    assert sorted(partial.glob("chunk-*.parquet")) == chunks
    resumed = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--commit-every", "5", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["summaries"]["embed"]["chunks_resumed"] == len(chunks)


def test_json_keeps_progress_on_stderr_and_stdout_holds_the_object_alone(tmp_path):
    """README, JSON output: progress and warnings go to stderr; --json printed no progress at all (a long model
    run said nothing), while --quiet still silences it."""
    cmd = [sys.executable, "-m", "cluster_curate", "run", str(DATA), *FAST]
    proc = subprocess.run([*cmd, "--out", str(tmp_path / "o"), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["command"] == "run" and len(proc.stdout.strip().splitlines()) == 1
    assert "run: embed: not run before" in proc.stderr and "embed: 300/300 rows" in proc.stderr
    quiet = subprocess.run([*cmd, "--out", str(tmp_path / "q"), "--json", "--quiet"], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["command"] == "run"


def test_a_selection_short_of_a_step_is_replaced_by_the_rerun_with_a_larger_budget(cli_runner, tmp_path):
    """--dedup leaves fewer rows than preflight could count: the selection is made, then refused against one global
    step. The rerun with a larger budget replaces it without --overwrite (the embeddings and clusters kept), where
    the run-state record of the failed stage had been dropped and its output refused as one run did not make."""
    rows = [json.loads(line) for line in DATA.read_text().splitlines()[:4]]
    rows += [dict(rows[0], question=f"{rows[0]['question']} (case {i})") for i in range(296)]  # near copies
    data = tmp_path / "near.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["run", str(data), "--out", str(tmp_path / "r"), "--fraction", "0.1", "--dedup", "0.9", "-n", "2"]
    short = cli_runner.invoke(main, [*base, "--micro-batch-size", "4"])
    assert short.exit_code == 2 and "(the embeddings and clusters are kept for the rerun)" in short.stderr
    assert (tmp_path / "r" / "selection.parquet").exists() and not (tmp_path / "r" / "shards").exists()
    again = cli_runner.invoke(main, [*base, "--micro-batch-size", "2", "--json"])
    assert again.exit_code == 0, again.output
    status = {s["stage"]: s["status"] for s in json.loads(again.stdout)["stages"]}
    assert status == {"embed": "up to date", "cluster": "up to date", "select": "ran", "shard": "ran"}


def test_data_changed_while_run_runs_says_run_again(cli_runner, tmp_path, monkeypatch):
    """The data edited after embed read it: cluster's refusal advised --data or --force, which run has not for a
    stage; run says what happened and that running it again mends it, and so it does."""
    import dataclasses

    from cluster_curate.commands import run as run_module
    data = tmp_path / "data.jsonl"
    data.write_text(DATA.read_text())
    real = run_module.stage_specs

    def edited_after_embed():
        specs = real()

        def embed_then_edit(*args, **kwargs):
            result = specs["embed"].function(*args, **kwargs)
            data.write_text(data.read_text().replace("Natalia", "Natalie", 1))  # another user's edit, meanwhile
            return result
        return {**specs, "embed": dataclasses.replace(specs["embed"], function=embed_then_edit)}

    monkeypatch.setattr(run_module, "stage_specs", edited_after_embed)
    out = tmp_path / "curated"
    r = cli_runner.invoke(main, ["run", str(data), "--out", str(out), *FAST])
    assert r.exit_code == 2 and r.stderr.strip().splitlines()[-1] == (
        f"ERROR: {data}: changed while run was running (after embed read it); run the same command again: the "
        "stages run again on the data as it is now"), r.output
    monkeypatch.setattr(run_module, "stage_specs", real)
    again = cli_runner.invoke(main, ["run", str(data), "--out", str(out), *FAST, "--json"])
    assert again.exit_code == 0, again.output
    stages = {s["stage"]: s for s in json.loads(again.stdout)["stages"]}
    assert stages["embed"]["status"] == "ran" and stages["shard"]["status"] == "ran"


def test_run_given_the_default_encoder_with_text_features_is_the_same_run(cli_runner, tmp_path):
    """README (`run`): `--encoder all-MiniLM-L6-v2` at its default is the same run; it was refused outright with
    text features ("only used by --features semantic"), so a Makefile's EMBED_OPTS broke the run."""
    out = tmp_path / "curated"
    _run(cli_runner, out)
    again = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--encoder", "all-MiniLM-L6-v2",
                                     "--json"])
    assert again.exit_code == 0, again.output
    assert [s["status"] for s in json.loads(again.stdout)["stages"]] == ["up to date"] * 4
    other = cli_runner.invoke(main, ["run", str(DATA), "--out", str(out), *FAST, "--encoder", "other-encoder"])
    assert other.exit_code == 2 and "--encoder other-encoder is only used by --features semantic" in other.stderr


def test_a_mixture_input_changed_while_run_runs_is_named(cli_runner, tmp_path, monkeypatch):
    import dataclasses

    from cluster_curate.commands import run as run_module
    lines = DATA.read_text().splitlines(keepends=True)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(lines[:150]))
    second.write_text("".join(lines[150:]))
    real = run_module.stage_specs

    def edited_after_embed():
        specs = real()

        def embed_then_edit(*args, **kwargs):
            result = specs["embed"].function(*args, **kwargs)
            second.write_text(second.read_text().replace("How", "Now", 1))
            return result
        return {**specs, "embed": dataclasses.replace(specs["embed"], function=embed_then_edit)}

    monkeypatch.setattr(run_module, "stage_specs", edited_after_embed)
    r = cli_runner.invoke(main, ["run", str(first), str(second), "--out", str(tmp_path / "cur"), *FAST])
    assert r.exit_code == 2 and r.stderr.strip().splitlines()[-1].startswith(
        f"ERROR: {second}: changed while run was running (after embed read it)"), r.output
