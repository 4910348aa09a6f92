"""QA round 53 (bad inputs): shard and export refuse a selected row broken since the data was embedded (--force),
verify reads damaged rank logs as one line, tells a micro-batch logged twice from shuffling, and says why a rank's
empty log fails; export of a missing folder says it does not exist."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES, cli_in_process
from shard_helpers import make_selection

N, M = 2, 2
BROKEN = {  # a selected row's line, broken since embed, and how the reader words it
    "cut short": (lambda line: line[:50], "invalid JSON (Unterminated string starting at: column 14)"),
    "an array": (lambda line: "[1, 2]", "expected a JSON object, found an array"),
    "latin-1": (lambda line: b'{"question": "caf\xe9", "answer": "x"}',
                "not valid UTF-8 text (byte 0xe9 at column 18); re-encode the file as UTF-8"),
    "null prompt": (lambda line: json.dumps({"question": None, "answer": "x"}), "field 'question': missing prompt"),
    "other fields": (lambda line: json.dumps({"foo": "bar"}), "field 'answer': missing response"),
}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """train-300.jsonl, a selection of it and its shards (N × M, two rows left over)."""
    tmp = tmp_path_factory.mktemp("qa53")
    data = tmp / "train.jsonl"
    data.write_bytes((FIXTURES / "gsm8k" / "train-300.jsonl").read_bytes())
    make_selection(tmp / "sel.parquet", data, k=3, fraction=0.3, n_tokens=True)
    ran = cli_in_process("shard", tmp / "sel.parquet", "--out", tmp / "shards", "-n", N, "-m", M, "-q")
    assert ran.returncode == 0, ran.stderr
    manifest = json.loads((tmp / "shards" / "manifest.json").read_text())
    sharded_ids = pq.read_table(tmp / "shards" / manifest["files"][0]["file"]).column("id").to_pylist()
    return {"tmp": tmp, "data": data, "sharded_id": sharded_ids[0], "leftover_id": manifest["leftover_ids"][0]}


def _broken(sharded, name: str, kind: str, row: int) -> Path:
    lines = sharded["data"].read_bytes().split(b"\n")
    broken = BROKEN[kind][0](lines[row].decode())
    lines[row] = broken if isinstance(broken, bytes) else broken.encode()
    path = sharded["tmp"] / name
    path.write_bytes(b"\n".join(lines))
    return path


@pytest.mark.parametrize("kind", BROKEN)
def test_shard_and_export_force_refuse_a_selected_row_broken_since(sharded, kind):
    """The data edited since embed, given with --force: shard wrote a selected row that no longer reads (cut short,
    an array, latin-1 bytes, its prompt null, other fields) into a shard as nulls, and export --for jsonl a left-over
    one into selected.jsonl, exit 0. Now the row's file:line and why, naming the selected (or left-over) id,
    nothing written, whatever --on-bad-row says (review: the pass stopped at any bad row, selected or not)."""
    tmp, reason = sharded["tmp"], BROKEN[kind][1]
    row = sharded["sharded_id"]
    broken = _broken(sharded, f"{kind}.jsonl", kind, row)
    for skip in ([], ["--on-bad-row", "skip"]):
        ran = cli_in_process("shard", tmp / "sel.parquet", "--data", broken, "--force", "--out", tmp / "o", "-n", N,
                             "-m", M, *skip, "-q")
        assert (ran.returncode, ran.stderr) == (2, f"ERROR: {broken}:{row + 1}: {reason} (selected id {row}: the "
                                                   "data changed since it was selected)\n")
    assert not (tmp / "o").exists()
    row = sharded["leftover_id"]
    broken = _broken(sharded, f"{kind}-left-over.jsonl", kind, row)
    ran = cli_in_process("export", tmp / "shards", "--for", "jsonl", "--data", broken, "--force", "--out", tmp / "x",
                         "-q")
    assert (ran.returncode, ran.stderr) == (2, f"ERROR: {broken}:{row + 1}: {reason} (left-over id {row}: the data "
                                               "changed since it was selected)\n")
    assert not (tmp / "x").exists()


def test_shard_and_export_force_copy_past_a_bad_row_nobody_selected(sharded):
    """Review: an unselected row that does not read (one embed skipped, or one broken since) stopped shard --force
    and export --force, where the raw pass copied the selected rows right; export has no --on-bad-row to pass."""
    tmp = sharded["tmp"]
    ids = set(pq.read_table(tmp / "sel.parquet").column("id").to_pylist())
    row = min(i for i in range(300) if i not in ids)
    broken = _broken(sharded, "unselected.jsonl", "cut short", row)
    ran = cli_in_process("shard", tmp / "sel.parquet", "--data", broken, "--force", "--out", tmp / "u", "-n", N,
                         "-m", M, "-q")
    assert ran.returncode == 0, ran.stderr
    ran = cli_in_process("export", tmp / "u", "--for", "jsonl", "--data", broken, "--force", "--out", tmp / "ux", "-q")
    assert ran.returncode == 0, ran.stderr
    lines = sharded["data"].read_text().splitlines()
    written = [json.loads(line) for line in (tmp / "ux" / "selected.jsonl").read_text().splitlines()]
    assert written == [json.loads(lines[i]) for i in sorted(ids)]


def test_shard_force_on_data_with_only_other_rows_changed_still_writes(sharded):
    """The check reads the data as examples only where it is not the data recorded: a row appended since (every
    selected row as it was) still shards and exports, the rows as the source holds them."""
    tmp = sharded["tmp"]
    changed = tmp / "appended.jsonl"
    changed.write_bytes(sharded["data"].read_bytes() + b'{"question": "q", "answer": "a"}\n')
    ran = cli_in_process("shard", tmp / "sel.parquet", "--data", changed, "--force", "--out", tmp / "ok", "-n", N,
                         "-m", M, "-q")
    assert ran.returncode == 0, ran.stderr
    ran = cli_in_process("export", tmp / "ok", "--for", "jsonl", "--out", tmp / "okx", "-q")
    assert ran.returncode == 0, ran.stderr
    lines = sharded["data"].read_text().splitlines()
    written = [json.loads(line) for line in (tmp / "okx" / "selected.jsonl").read_text().splitlines()]
    ids = sorted(pq.read_table(tmp / "sel.parquet").column("id").to_pylist())
    assert written == [json.loads(lines[i]) for i in ids]


def _logs(shards: Path, folder: Path) -> Path:
    """Every rank's log of the plan followed, as ConsumedLog writes it (ids, weights, a loss)."""
    from cluster_curate.commands.verify import planned_grid
    from cluster_curate.loader import ConsumedLog
    _, ids, weights = planned_grid(shards)
    for r in range(N):
        with ConsumedLog(folder, rank=r) as log:
            for t in range(ids.shape[0]):
                log.record(ids[t, r], weights[t, r], loss=0.5)
    return folder


DAMAGED = {  # rank 1's log damaged as a copy or a crash leaves it, and verify's line
    "a directory": (lambda p: (p.unlink(), p.mkdir()), "{p}: is a directory, expected a rank's log file"),
    "gzip'd": (lambda p: p.write_bytes(gzip.compress(p.read_bytes())),
               "{p}: gzip-compressed; decompress it (verify reads a rank's log as JSON lines)"),
    "latin-1 appended": (lambda p: p.write_bytes(p.read_bytes() + b'{"step": 99, "ids": [1], "note": "caf\xe9"}\n'),
                         "{p}:{last}: not valid UTF-8 text (byte 0xe9 at column 38); re-encode the file as UTF-8"),
    "an id past 64 bits": (lambda p: _edit_line(p, 2, ids=[10 ** 30]),
                           "{p}:3: field ids: a number past 64 bits, not an id"),
    "a weight past a float": (lambda p: _edit_line(p, 1, weights=[10 ** 400, 1]),
                              "{p}:2: field weights: a whole number past a float's range"),
}


def _edit_line(path: Path, at: int, **fields) -> None:
    lines = path.read_text().splitlines()
    lines[at] = json.dumps({**json.loads(lines[at]), **fields})
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("damage", DAMAGED)
def test_verify_reads_a_damaged_rank_log_as_one_line(sharded, tmp_path, damage):
    """A rank's log that is a directory, gzip'd, with latin-1 bytes appended, or with an id or a weight too large for
    its type was an INTERNAL ERROR (IsADirectoryError, UnicodeDecodeError, OverflowError), exit 1. Now one line
    naming the file (and line), exit 2, as malformed JSON already was."""
    logs = _logs(sharded["tmp"] / "shards", tmp_path / "logs")
    path = logs / "rank-00001.jsonl"
    last = len(path.read_text().splitlines()) + 1
    fix, said = DAMAGED[damage]
    fix(path)
    ran = cli_in_process("verify", sharded["tmp"] / "shards", "--log", logs)
    assert (ran.returncode, ran.stderr) == (2, f"ERROR: {said.format(p=path, last=last)}\n")


def test_verify_tells_a_micro_batch_logged_twice_from_shuffling(sharded, tmp_path):
    """One line of a rank's log repeated (the same step and ids, as a resumed run that kept the lines after its
    checkpoint logs them): every later line was one place off the plan, read as `out of order` and a second epoch
    begun, and blamed on a shuffling sampler. Now one duplicated micro-batch, where it is, and why; a whole second
    epoch and a log with repeated step numbers but other ids are as before."""
    from cluster_curate.commands.verify import verify
    from cluster_curate.plan_check import check_plan
    logs = _logs(sharded["tmp"] / "shards", tmp_path / "logs")
    path = logs / "rank-00001.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3] + lines[2:]))
    got = verify(str(sharded["tmp"] / "shards"), log=str(logs))
    rank = got["ranks"][1]
    assert not got["ok"] and (rank["in_plan"], rank["duplicated"], rank["out_of_order"], rank["short_epoch"],
                              rank["missing"]) == (len(lines) * M, M, 0, 0, 0)
    assert got["problems"] == [f"rank 1 step 3: duplicated: step 2's micro-batch ({M} ids) logged again on log "
                               "line 4"]
    assert got["causes"] == ["a micro-batch was logged twice (the same step and ids on two lines): trained twice "
                             "after a resume from a checkpoint whose log kept the lines after it (ConsumedLog(..., "
                             "resume_at=the micro-batches trained before the checkpoint)), or ConsumedLog.record "
                             "called twice for one micro-batch"]
    g = np.arange(4 * N * M).reshape(4, N, M)
    again = {r: [{"step": t % 4, "ids": g[t % 4, r].tolist()} for t in range(8)] for r in range(N)}
    assert check_plan(g, again).ok  # two epochs, step numbers starting again: no repeat
    again[0].insert(5, dict(again[0][4]))  # step 0 of epoch 2 logged twice
    c = check_plan(g, again)
    assert c.problem_lines() == [f"rank 0 step 5: duplicated: step 0's micro-batch ({M} ids) logged again on log "
                                 "line 6"] and c.ranks[0].counts["duplicated"] == M
    accumulated = {r: [{"step": t // 2, "ids": g[t, r].tolist()} for t in range(4)] for r in range(N)}
    assert check_plan(g, accumulated).ok  # a step number per optimizer step: other ids, not a repeat


def test_verify_names_the_cause_of_one_rank_log_empty(sharded, tmp_path):
    """One rank's log opened and never fed: its planned ids missing, and an empty `cause`. Now it is named."""
    from cluster_curate.commands.verify import verify
    logs = _logs(sharded["tmp"] / "shards", tmp_path / "logs")
    (logs / "rank-00001.jsonl").write_text("")
    got = verify(str(sharded["tmp"] / "shards"), log=str(logs))
    assert got["causes"] == ["rank(s) 1 logged no micro-batch (an empty log): stopped before its first step, or "
                             "nothing fed its log (ConsumedLog.record never called there)"]
    assert got["report"].endswith(f"cause: {got['causes'][0]}")


def test_export_of_a_missing_folder_says_it_does_not_exist(tmp_path):
    """`export nope/` said "no manifest.json (not a directory written by shard)" of a path that is not there."""
    ran = cli_in_process("export", tmp_path / "nope", "--for", "hf", "--out", tmp_path / "x")
    assert (ran.returncode, ran.stderr) == (2, f"ERROR: {tmp_path / 'nope'}: no such file or directory\n")
    (tmp_path / "empty").mkdir()
    ran = cli_in_process("export", tmp_path / "empty", "--for", "hf", "--out", tmp_path / "x")
    assert ran.stderr == (f"ERROR: {tmp_path / 'empty'}: no manifest.json (not a directory written by "
                          "`cluster-curate shard`)\n")
