"""QA round 56, `run`: an interrupted re-run leaves a folder that its readers refuse until `run` finishes it; a stage
whose sidecars (centroids, the text state) are missing or not the ones its artifact records is made again; an
interrupted embed of another --commit-every is refused before it is announced; run's own shards, their manifest
edited by hand, are made again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, cli_in_process
from process_helpers import at_default, cli_in_child, signal_stopped, stop_when

ROOT = Path(__file__).resolve().parents[1]
GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
FAST = ["--features", "text", "--dim", "16", "--k", "6", "--fraction", "0.3", "--num-shards", "2",
        "--micro-batch-size", "2"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(ROOT)]))

# the child stops itself (`signum`) as a file named `name` is about to be renamed into place (a stage's artifact, the
# shards' manifest in their folder being built): the moment a stage is being made, which no look from outside catches
_STOP_AT = """
import os, sys
_name, _signum = sys.argv.pop(1), int(sys.argv.pop(1))
def _stop(event, args):
    if event == "os.rename" and os.fspath(args[1]).endswith(_name):
        os.kill(os.getpid(), _signum)
sys.addaudithook(_stop)
"""


def _data(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(GSM.read_text().splitlines(keepends=True)[:n]))
    return path


def _run(tmp_path, *argv) -> subprocess.CompletedProcess:
    return cli_in_process("run", "data.jsonl", "--out", "r", *argv, cwd=tmp_path)


def _statuses(r) -> dict:
    assert r.returncode == 0, r.stderr
    return {s["stage"]: s.get("reason", s["status"]) for s in json.loads(r.stdout)["stages"]}


def _stopped_at(tmp_path, name: str, signum: int, *argv) -> subprocess.CompletedProcess:
    """`run` in a child that sends itself `signum` as it renames `name` into place."""
    reset = None if signum == signal.SIGKILL else at_default(signum)  # SIGKILL's disposition cannot be set
    return subprocess.run([*cli_in_child(_STOP_AT), name, str(int(signum)), "run", "data.jsonl", "--out", "r", *argv],
                          cwd=tmp_path, env=ENV, capture_output=True, text=True, preexec_fn=reset, timeout=600)


def _marked(tmp_path) -> list[str]:
    state = json.loads((tmp_path / "r" / "run-state.json").read_text())
    return [stage for stage in ("embed", "cluster", "select", "shard") if state.get(stage, {}).get("remaking")]


# ----------------------------------------------------------------------------------------------- 1

def test_a_rerun_interrupted_on_new_data_leaves_a_folder_its_readers_refuse_until_run_finishes_it(tmp_path):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    shards_before = json.loads((tmp_path / "r" / "shards" / "manifest.json").read_text())
    _data(tmp_path, 250)  # the data shrinks; the re-run is interrupted while cluster is made again
    r = _stopped_at(tmp_path, "clusters.parquet", signal.SIGINT, *FAST)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "interrupted"
    # embed was made again; cluster's previous output is whole, and it and the stages after it are marked
    assert _marked(tmp_path) == ["cluster", "select", "shard"]
    assert json.loads((tmp_path / "r" / "shards" / "manifest.json").read_text()) == shards_before
    said = ("not finished: `run` stopped while making its cluster stage again (r/run-state.json says so), and its "
            "outputs from there on are not all of one run; run `run` again to finish them (with what its last error "
            "asked for, if it stopped on one)")
    s = cli_in_process("shard", "r/selection.parquet", "--out", "s2", "--num-shards", "2", "--micro-batch-size", "2",
                       cwd=tmp_path)
    assert (s.returncode, s.stderr.strip()) == (2, f"ERROR: r/selection.parquet: {said}")
    from cluster_curate.errors import CurateError
    from cluster_curate.io.artifacts import check_run_finished
    for path in ("r", "r/shards", "r/clusters.parquet"):  # what export, verify and report read
        with pytest.raises(CurateError) as e:
            check_run_finished(tmp_path / path)
        assert str(e.value) == f"{tmp_path / path}: " + said.replace("r/", f"{tmp_path}/r/")
    check_run_finished(tmp_path / "r" / "embeddings.parquet")  # made again whole: read as it is
    # the same command again finishes it: every mark gone, the shards those of the 250 rows
    assert _statuses(_run(tmp_path, *FAST, "--json")) == {"embed": "up to date", "cluster": "its input changed",
                                                          "select": "its input changed", "shard": "its input changed"}
    assert _marked(tmp_path) == []
    check_run_finished(tmp_path / "r" / "shards")
    e = cli_in_process("export", "r/shards", "--for", "jsonl", "--out", "x", cwd=tmp_path)
    assert e.returncode == 0, e.stderr


def test_an_option_change_interrupted_in_shard_leaves_the_shards_refused_and_the_selection_readable(tmp_path):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    other = [a if a != "0.3" else "0.4" for a in FAST]
    r = _stopped_at(tmp_path, "manifest.json", signal.SIGINT, *other, "--overwrite")
    assert r.returncode == 130, r.stderr
    assert _marked(tmp_path) == ["shard"]
    from cluster_curate.errors import CurateError
    from cluster_curate.io.artifacts import check_run_finished
    with pytest.raises(CurateError, match=r"stopped while making its shard stage again"):
        check_run_finished(tmp_path / "r" / "shards")
    check_run_finished(tmp_path / "r" / "selection.parquet")  # select finished: its selection is whole
    assert _statuses(_run(tmp_path, *other, "--json")) == {"embed": "up to date", "cluster": "up to date",
                                                           "select": "up to date", "shard": "its input changed"}
    assert _marked(tmp_path) == []


def test_a_rerun_stopped_before_it_replaced_anything_leaves_the_folder_as_it_was(tmp_path):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    state = (tmp_path / "r" / "run-state.json").read_bytes()
    other = [a if a != "0.3" else "0.4" for a in FAST]
    r = _stopped_at(tmp_path, "selection.parquet", signal.SIGINT, *other, "--overwrite")
    assert r.returncode == 130, r.stderr
    assert (tmp_path / "r" / "run-state.json").read_bytes() == state  # the previous run's, whole: not marked
    e = cli_in_process("export", "r/shards", "--for", "jsonl", "--out", "x", cwd=tmp_path)
    assert e.returncode == 0, e.stderr


def test_export_verify_and_report_refuse_the_shards_of_an_unfinished_rerun(tmp_path):
    """export wrote 6,200 rows of a stopped re-run's previous shards (646 ids no longer in the data) without a word;
    `report --force` still shows the folder as it is."""
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    _data(tmp_path, 250)
    assert _stopped_at(tmp_path, "clusters.parquet", signal.SIGINT, *FAST).returncode == 130
    e = cli_in_process("export", "r/shards", "--for", "jsonl", "--out", "x", cwd=tmp_path)
    assert (e.returncode, "stopped while making its cluster stage again" in e.stderr) == (2, True), e.stderr
    for argv in (["verify", "r/shards", "--log", "logs"], ["report", "r"], ["report", "r/shards"]):
        (tmp_path / "logs").mkdir(exist_ok=True)
        e = cli_in_process(*argv, cwd=tmp_path)
        assert (e.returncode, "stopped while making its cluster stage again" in e.stderr) == (2, True), e.stderr
    assert "stopped while" not in cli_in_process("report", "r", "--force", cwd=tmp_path).stderr
    # the shards reached through `.` or a link are the same folder (review: both were exported)
    (tmp_path / "link").symlink_to(tmp_path / "r" / "shards")
    for shards, cwd in ((".", tmp_path / "r" / "shards"), ("link", tmp_path)):
        e = cli_in_process("export", shards, "--for", "jsonl", "--out", tmp_path / f"x-{shards}", cwd=cwd)
        assert (e.returncode, "stopped while making its cluster stage again" in e.stderr) == (2, True), e.stderr


# ----------------------------------------------------------------------------------------------- 2

def test_a_kill_between_clusters_two_renames_makes_cluster_stale_not_up_to_date(tmp_path):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    other = [a if a != "6" else "4" for a in FAST]
    r = _stopped_at(tmp_path, "clusters.parquet", signal.SIGKILL, *other, "--overwrite")
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert _marked(tmp_path) == ["cluster", "select", "shard"]  # a kill cleans nothing up: marked unfinished
    # the centroids of --k 4 beside the clusters of --k 6; run with --k 6 again: cluster is made again
    reasons = _statuses(_run(tmp_path, *FAST, "--json"))
    assert reasons["cluster"] == ("its centroids clusters.centroids.npy are not the ones it records (shape [4, 16], "
                                  "it records [6, 16]: another clustering's)")
    from cluster_curate.io.readers import sidecars_unlike_record
    assert sidecars_unlike_record(tmp_path / "r" / "clusters.parquet") is None
    assert _statuses(_run(tmp_path, *FAST, "--json")) == dict.fromkeys(("embed", "cluster", "select", "shard"),
                                                                       "up to date")


def test_missing_centroids_make_cluster_stale(tmp_path):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    (tmp_path / "r" / "clusters.centroids.npy").unlink()
    reasons = _statuses(_run(tmp_path, *FAST, "--json"))
    assert reasons["cluster"] == "its centroids clusters.centroids.npy are missing"
    assert (tmp_path / "r" / "clusters.centroids.npy").is_file()


@pytest.mark.parametrize("gone,said", [(("text.npz",), "its text state embeddings.text.npz is missing"),
                                       (("text.key",), "its text state embeddings.text.key is missing"),
                                       (("text.npz", "text.key"),
                                        "its text state embeddings.text.npz and embeddings.text.key are missing")])
def test_a_missing_text_state_makes_embed_stale_and_a_target_run_then_works(tmp_path, gone, said):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    for suffix in gone:
        (tmp_path / "r" / f"embeddings.{suffix}").unlink()
    reasons = _statuses(_run(tmp_path, *FAST, "--json"))
    assert reasons["embed"] == said
    (tmp_path / "target.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[-20:]))
    r = _run(tmp_path, *FAST, "--target", "target.jsonl", "--overwrite", "--json")
    assert _statuses(r)["embed"] == "up to date"


# ----------------------------------------------------------------------------------------------- 3

def test_an_interrupted_embed_of_another_commit_every_is_refused_before_it_is_announced(tmp_path):
    _data(tmp_path, 300)
    p = subprocess.Popen([sys.executable, "-m", "cluster_curate", "run", "data.jsonl", "--out", "r", *FAST,
                          "--commit-every", "50"], cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, preexec_fn=at_default(signal.SIGINT))
    stop_when(p, lambda: (tmp_path / "r" / "embeddings.partial" / "chunk-000000.parquet").exists(), interval=0.005)
    signal_stopped(p, signal.SIGINT)
    assert p.wait(timeout=300) == 130
    r = _run(tmp_path, *FAST, "--commit-every", "25")
    assert r.returncode == 2
    chunks = len(list((tmp_path / "r" / "embeddings.partial").glob("chunk-*.parquet")))
    assert r.stderr.strip() == ("ERROR: r/embeddings.partial: holds an interrupted run with other parameters or data "
                                f"(--commit-every 50 -> 25: {chunks} committed chunk{'s' * (chunks > 1)}); run as it "
                                "was (--commit-every 50, and the options it was made with) to resume it, or pass "
                                "--overwrite to start afresh")
    r = _run(tmp_path, *FAST, "--commit-every", "50", "--json")
    assert _statuses(r)["embed"] == f"not finished before ({chunks} committed chunk{'s' * (chunks > 1)} found)"


# ----------------------------------------------------------------------------------------------- 4

@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_runs_own_shards_with_a_manifest_edited_by_hand_are_made_again(tmp_path, overwrite):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    (tmp_path / "r" / "shards" / "manifest.json").write_text("{}\n")
    reasons = _statuses(_run(tmp_path, *FAST, *overwrite, "--json"))
    assert reasons["shard"] == "its output is missing or was changed"
    assert json.loads((tmp_path / "r" / "shards" / "manifest.json").read_text())["kind"] == "shard-manifest"


def test_a_file_of_the_users_in_runs_shards_is_still_refused(tmp_path):
    _data(tmp_path, 300)
    assert _run(tmp_path, *FAST).returncode == 0
    (tmp_path / "r" / "shards" / "manifest.json").write_text("{}\n")
    (tmp_path / "r" / "shards" / "notes.txt").write_text("mine\n")
    r = _run(tmp_path, *FAST, "--overwrite")
    assert r.returncode == 2 and "did not write" in r.stderr, r.stderr
    assert (tmp_path / "r" / "shards" / "notes.txt").read_text() == "mine\n"
