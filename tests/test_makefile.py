"""README's Makefile block, run by real `make -j2` on a real dataset: each stage a file target, a second `make` a
no-op that leaves every output's time alone, a changed option re-running its stage and those after it only."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, ROOT

pytestmark = [pytest.mark.slow,  # real subprocesses
              pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")]

OUTPUTS = ["embeddings.parquet", "clusters.parquet", "selection.parquet", "shards/manifest.json"]


def readme_makefile() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## In a Makefile or CI", 1)[1]
    return re.search(r"```make\n(.*?)```", section, re.S).group(1)


def _make(cwd: Path, variables: dict[str, str], target: str | None = None) -> subprocess.CompletedProcess:
    """`make -j2 NAME=VALUE... [TARGET]` (none: the Makefile's default goal) with `cluster-curate` on PATH as this
    checkout's command."""
    bin_dir = cwd / "bin"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        (bin_dir / "cluster-curate").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cluster_curate "$@"\n')
        (bin_dir / "cluster-curate").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MAKEFLAGS")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    argv = ["make", "-j2", *(f"{name}={value}" for name, value in variables.items()), *([target] if target else [])]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def _times(out: Path) -> dict[str, int]:
    return {name: (out / name).stat().st_mtime_ns for name in OUTPUTS}


def test_the_readme_makefile_runs_each_stage_once_and_reruns_only_what_an_option_change_touches(tmp_path):
    """The block as README gives it, run by a plain `make` (its default goal, no target named): its first target
    was the embeddings, so `make` built them alone and `make SELECT_OPTS=...` re-ran nothing, silently."""
    (tmp_path / "Makefile").write_text(readme_makefile())
    shutil.copy(FIXTURES / "gsm8k" / "train-300.jsonl", tmp_path / "train.jsonl")
    opts = {"DATA": "train.jsonl", "OUT": "out", "EMBED_OPTS": "--features text --dim 16",
            "SELECT_OPTS": "--fraction 0.31", "SHARD_OPTS": "--num-shards 2 --micro-batch-size 2"}
    first = _make(tmp_path, opts)
    assert first.returncode == 0, first.stderr
    assert re.findall(r"^cluster-curate (\w+)", first.stdout, re.M) == ["embed", "cluster", "select", "shard"], \
        first.stdout
    out = tmp_path / "out"
    assert pq.read_metadata(out / "selection.parquet").num_rows == 93  # 31% of 300
    assert len(list((out / "shards").glob("shard-*.parquet"))) == 2
    made = _times(out)

    again = _make(tmp_path, opts)
    assert again.returncode == 0, again.stderr
    assert "cluster-curate" not in again.stdout, again.stdout
    assert _times(out) == made

    # an option make cannot see in any file's time: the selection must follow it, and only it and shard re-run
    changed = _make(tmp_path, opts | {"SELECT_OPTS": "--fraction 0.2"})
    assert changed.returncode == 0, changed.stderr
    assert pq.read_metadata(out / "selection.parquet").num_rows == 60
    ran = re.findall(r"^cluster-curate (\w+)", changed.stdout, re.M)
    assert ran == ["select", "shard"], changed.stdout
    now = _times(out)
    assert [now[n] == made[n] for n in OUTPUTS] == [True, True, False, False]


RUN_MAKEFILE = """\
out/shards/manifest.json: FORCE
\tcluster-curate run train.jsonl --out out --overwrite --features text --dim 16 --fraction 0.31 \\
\t  --num-shards 2 --micro-batch-size 2
out/hf/train.parquet: out/shards/manifest.json
\tcluster-curate export out/shards --for hf --out out/hf --overwrite
.PHONY: FORCE
FORCE:
"""


def test_a_rule_that_always_calls_run_rebuilds_what_follows_only_when_run_remade_it(tmp_path):
    """README, "In a Makefile or CI": `run` skips by content and leaves an up-to-date output's time alone, so a
    rule that always calls it does not make the targets after it stale (a touched DATA included)."""
    (tmp_path / "Makefile").write_text(RUN_MAKEFILE)
    shutil.copy(FIXTURES / "gsm8k" / "train-300.jsonl", tmp_path / "train.jsonl")
    first = _make(tmp_path, {}, "out/hf/train.parquet")
    assert first.returncode == 0, first.stderr
    assert re.findall(r"^cluster-curate (\w+)", first.stdout, re.M) == ["run", "export"]
    made = _times(tmp_path / "out")
    (tmp_path / "train.jsonl").touch()
    again = _make(tmp_path, {}, "out/hf/train.parquet")
    assert again.returncode == 0, again.stderr
    assert re.findall(r"^cluster-curate (\w+)", again.stdout, re.M) == ["run"], again.stdout
    assert _times(tmp_path / "out") == made


FOLDER_MAKEFILE = """\
out: FORCE
\tcluster-curate run train.jsonl --out out --features text --dim 16 --fraction 0.31 --num-shards 2 \\
\t  --micro-batch-size 2
summary.json: out
\tcluster-curate report out --json > summary.json
.PHONY: FORCE
FORCE:
"""


def test_a_run_with_nothing_to_do_leaves_its_folder_and_the_one_around_it_as_they_were(tmp_path):
    """A `run` folder as a prerequisite: a `run` with nothing to do changed its time (a probe for write access
    made and removed in it) and that of the folder around it (the lock file `.out.lock`), so make remade what
    depends on it, and rsync saw a change that was none."""
    (tmp_path / "Makefile").write_text(FOLDER_MAKEFILE)
    shutil.copy(FIXTURES / "gsm8k" / "train-300.jsonl", tmp_path / "train.jsonl")
    first = _make(tmp_path, {}, "summary.json")
    assert first.returncode == 0, first.stderr
    assert re.findall(r"^cluster-curate (\w+)", first.stdout, re.M) == ["run", "report"]
    folders = {f: f.stat().st_mtime_ns for f in (tmp_path, tmp_path / "out")}
    again = _make(tmp_path, {}, "summary.json")
    assert again.returncode == 0, again.stderr
    assert re.findall(r"^cluster-curate (\w+)", again.stdout, re.M) == ["run"], again.stdout
    assert {f: f.stat().st_mtime_ns for f in folders} == folders
