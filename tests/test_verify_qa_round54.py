"""QA round 54 (verify on the logs real runs write): a run resumed into a fresh log folder, a job on more or fewer
processes than shards, a micro-batch missing from a log, the wrong export layout over several epochs, and a
micro-batch logged twice under two step numbers. Each log is written by ConsumedLog as a training loop (or the HF
callback, which uses it) writes it, the rows dealt by torch's and accelerate's own samplers; a damaged log is a
real one edited as a user's would be."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, cli_in_process
from shard_helpers import make_selection

N, M = 2, 3  # three rows a micro-batch: the two wrong layouts deal different orders (at N = M they are alike)
BEYOND = ("the job ran on more processes than the 2 the shards were planned for (rank 2 logged): launch it on 2, "
          "or shard again with --num-shards for the processes you have")
NO_LOG = "a rank wrote no log: was the job run on the planned number of processes, each logging?"
SKIPPED = ("rank(s) 0 logged no line for some micro-batches (its step numbers jump past them): lines taken out of "
           "the log, or a run resumed from a checkpoint past the end of the log it kept")
LAYOUT = {"batch": "the data is batch-interleaved but the trainer dealt samples: export it --for the trainer you run "
                   "(torchrun/torchtune)",
          "sample": "the data is sample-interleaved but the trainer dealt micro-batches: export it --for the trainer "
                    "you run (hf/trl/accelerate)"}


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """Shards of a selection of train-300.jsonl (N × M) and their planned grid: ids and weights[step, rank, slot]."""
    from cluster_curate.commands.verify import planned_grid
    tmp = tmp_path_factory.mktemp("qa54")
    make_selection(tmp / "sel.parquet", FIXTURES / "gsm8k" / "train-300.jsonl", k=3, fraction=0.3, n_tokens=True)
    ran = cli_in_process("shard", tmp / "sel.parquet", "--out", tmp / "shards", "-n", N, "-m", M, "-q")
    assert ran.returncode == 0, ran.stderr
    _, ids, weights = planned_grid(tmp / "shards")
    assert ids.shape[0] > 8  # room for the steps the tests take out
    return {"shards": str(tmp / "shards"), "ids": ids, "weights": weights}


def _write(folder, batches: dict[int, list], resume_at: int = 0, twice: tuple[int, int] | None = None):
    """Each rank's micro-batches (ids) logged by ConsumedLog as a training loop does; `twice`: (rank, k) whose
    k-th micro-batch the loop recorded twice."""
    from cluster_curate.loader import ConsumedLog
    for r, rank_batches in batches.items():
        with ConsumedLog(folder, rank=r, resume_at=resume_at) as log:
            for k, b in enumerate(rank_batches):
                for _ in range(2 if twice == (r, k) else 1):
                    log.record(b, loss=1.0)
    return str(folder)


def _in_plan(g, epochs=1, start=0):
    return {r: [g[t % g.shape[0], r] for t in range(start, epochs * g.shape[0])] for r in range(N)}


def _export(g, layout):
    from cluster_curate.loader import interleaved_order
    steps, n, m = g.shape
    return g.transpose(1, 0, 2).reshape(-1)[interleaved_order(n, steps, m, layout)]


def _dealt(file_ids, processes: int, dealing: str, epochs: int) -> dict[int, list]:
    """What each of `processes` ranks trains on, epoch after epoch, from an export file: dealt by samples (torch's
    DistributedSampler(shuffle=False), micro-batches of M from it) or by micro-batches (accelerate's
    BatchSamplerShard, as the HF Trainer's prepared loader deals them, even_batches)."""
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler
    rows = file_ids.tolist()
    out = {}
    for r in range(processes):
        if dealing == "sample":
            sampler = DistributedSampler(rows, num_replicas=processes, rank=r, shuffle=False)
            loader = DataLoader(rows, batch_size=M, sampler=sampler, collate_fn=list)
        else:
            from accelerate.data_loader import BatchSamplerShard
            loader = [[rows[i] for i in b] for b in BatchSamplerShard(
                BatchSampler(SequentialSampler(rows), M, drop_last=False), processes, r, even_batches=True)]
        out[r] = [list(b) for _ in range(epochs) for b in loader]
    return out


def _verify(plan, log):
    from cluster_curate.commands.verify import verify
    return verify(plan["shards"], log=log)


def _counts(rank: dict) -> tuple:
    return rank["in_plan"], rank["out_of_order"], rank["wrong_rank"], rank["duplicated"], rank["missing"], \
        rank["short_epoch"]


@pytest.mark.parametrize("resume_at", [3, "epoch 2"])
def test_a_run_resumed_into_a_fresh_log_folder_is_checked_from_its_checkpoint(plan, tmp_path, resume_at):
    """HF Trainer resume_from_checkpoint (or ConsumedLog(resume_at=...)) into a log folder without the earlier lines
    numbered them from 0, not from the checkpoint's micro-batch, and verify blamed a filter on length before
    dealing ("rows were taken out before dealing"). Now the lines are numbered from the checkpoint, checked in
    their places, and verify says the log starts there."""
    from cluster_curate.commands.verify import read_consumed
    g = plan["ids"]
    steps = g.shape[0]
    start = 3 if resume_at == 3 else steps + 2
    log = _write(tmp_path / "resumed", _in_plan(g, epochs=1 if start < steps else 2, start=start), resume_at=start)
    assert [rec["step"] for rec in read_consumed(log, N)[1]][:2] == [start, start + 1]
    got = _verify(plan, log)
    assert not got["ok"]
    assert got["problems"] == [f"rank {r}: missing: the log starts at step {start}: the {start} micro-batches before "
                               f"it ({start * M} ids) are not in this folder" for r in range(N)]
    rows = (steps - start % steps) * M
    assert [_counts(rank) for rank in got["ranks"]] == [(rows, 0, 0, 0, start * M, 0)] * N
    assert got["causes"] == [f"the log of rank(s) 0, 1 starts at step {start}: the lines before it are not in this "
                             "folder (a run resumed from a checkpoint into a fresh log folder): put the earlier run's "
                             "lines before them to verify the whole run"]


def test_a_log_kept_short_of_the_checkpoint_goes_on_at_the_checkpoint(plan, tmp_path):
    """A resume past the end of the log it kept (2 lines of 3 trained): the next line is the checkpoint's step, the
    one between is told missing, not every later line out of order."""
    g = plan["ids"]
    steps = g.shape[0]
    _write(tmp_path / "log", {r: [g[t, r] for t in range(2)] for r in range(N)})
    log = _write(tmp_path / "log", {0: [g[t, 0] for t in range(3, steps)]}, resume_at=3)
    _write(tmp_path / "log", {1: [g[t, 1] for t in range(2, steps)]}, resume_at=2)
    got = _verify(plan, log)
    assert got["problems"] == [f"rank 0 step 2: missing: micro-batch not logged ({M} ids): the log goes from step 1 "
                               "to step 3"]
    assert got["causes"] == [SKIPPED]


def test_a_job_on_more_processes_than_shards_says_where_the_rows_went(plan, tmp_path):
    """An HF job on 3 processes for 2 shards: the rows rank 2 consumed were counted as lost ("N planned rows reached
    no rank ... a filter on length"). Now no length filter; the cause says rank 2 logged them."""
    g = plan["ids"]
    dealt = _dealt(_export(g, "batch"), 3, "batch", epochs=1)
    got = _verify(plan, _write(tmp_path / "n3", dealt))
    planned_ranks = {i for r in range(N) for b in dealt[r] for i in b}
    went = {i for b in dealt[2] for i in b} - planned_ranks
    assert went and got["causes"] == [BEYOND, f"{len(went)} planned rows reached none of the 2 planned ranks: "
                                              "rank 2 logged them"]


@pytest.mark.parametrize("epochs", [1, 2])
def test_a_job_on_fewer_processes_names_that_alone(plan, tmp_path, epochs):
    """An HF job on 1 process for 2 shards (it reads the whole export in order): "a rank wrote no log" and also "a
    shuffling sampler ... or the wrong export layout", which did not apply. Now the one cause."""
    g = plan["ids"]
    got = _verify(plan, _write(tmp_path / "n1", _dealt(_export(g, "batch"), 1, "batch", epochs)))
    assert not got["ok"] and got["causes"] == [NO_LOG]


@pytest.mark.parametrize("epochs, line", [(1, 4), (2, 4), (2, "epoch 2")])
def test_a_micro_batch_missing_from_a_log_is_told_where_it_is(plan, tmp_path, epochs, line):
    """One line taken out of a rank's log (step numbers 3, 5): "out of order" on every later row and a shuffling or
    packing cause (over 2 epochs, a short epoch too). Now one missing micro-batch, where it is, and the lines after
    it checked in their places, as a duplicated line is."""
    g = plan["ids"]
    steps = g.shape[0]
    log = _write(tmp_path / "log", _in_plan(g, epochs))
    at = 4 if line == 4 else steps + 4
    path = tmp_path / "log" / "rank-00000.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:at] + lines[at + 1:]))
    got = _verify(plan, log)
    assert got["problems"] == [f"rank 0 step {at}: missing: micro-batch not logged ({M} ids): the log goes from step "
                               f"{at - 1} to step {at + 1}"]
    assert _counts(got["ranks"][0]) == ((epochs * steps - 1) * M, 0, 0, 0, M, 0)
    assert got["causes"] == [SKIPPED]


@pytest.mark.parametrize("epochs, skipped", [(1, 4), (2, 4), (2, "epoch 2")])
def test_a_micro_batch_a_loop_skipped_before_logging_is_told_where_it_is(plan, tmp_path, epochs, skipped):
    """A loop that went on to the next micro-batch before ConsumedLog.record (one not trained, or its line not
    written): the step numbers go on without it, and every later row was out of order. Now one missing
    micro-batch where it is: the lines after it are the next ones planned."""
    g = plan["ids"]
    steps = g.shape[0]
    at = 4 if skipped == 4 else steps + 4
    batches = _in_plan(g, epochs)
    del batches[1][at]
    got = _verify(plan, _write(tmp_path / "log", batches))
    assert got["problems"] == [f"rank 1 step {at}: missing: micro-batch not logged ({M} ids): log line {at + 1} is "
                               "the next one planned"]
    assert _counts(got["ranks"][1]) == ((epochs * steps - 1) * M, 0, 0, 0, M, 0)
    assert got["causes"] == ["rank(s) 1 logged no line for some micro-batches, its step numbers going on without "
                             "them: a loop that went on to the next micro-batch before ConsumedLog.record (the "
                             "micro-batch skipped, or its line not written)"]


@pytest.mark.parametrize("layout, dealing", [("batch", "sample"), ("sample", "batch")])
@pytest.mark.parametrize("epochs", [1, 2, 3])
def test_the_wrong_export_layout_is_named_over_any_number_of_epochs(plan, tmp_path, layout, dealing, epochs):
    """An export of one layout dealt the other way: the specific cause on a 1-epoch log, "a shuffling sampler ...
    or the wrong export layout" on a longer one (its epochs were compared with one epoch dealt). Now the same one."""
    g = plan["ids"]
    got = _verify(plan, _write(tmp_path / "log", _dealt(_export(g, layout), N, dealing, epochs)))
    assert not got["ok"] and got["causes"] == [LAYOUT[layout]]


def test_the_wrong_layout_with_a_micro_batch_missing_is_named_with_it(plan, tmp_path):
    """The two at once: the layout dealt the wrong way over 2 epochs, one line taken out of rank 0's log."""
    g = plan["ids"]
    log = _write(tmp_path / "log", _dealt(_export(g, "batch"), N, "sample", epochs=2))
    path = tmp_path / "log" / "rank-00000.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:4] + lines[5:]))
    got = _verify(plan, log)
    assert got["causes"] == [SKIPPED, LAYOUT["batch"]]
    assert f"rank 0 step 4: missing: micro-batch not logged ({M} ids): the log goes from step 3 to step 5" \
        in got["problems"]


def test_a_micro_batch_logged_again_under_a_new_step_number_is_told_truly(plan, tmp_path):
    """ConsumedLog.record called twice for one micro-batch logs its ids under two step numbers (4 and 5): every
    later line was out of order; with the first line mis-numbered (5 and 5), "step 5's micro-batch", the ids being
    step 4's; and the cause said "the same step and ids on two lines" of both. Now each says what is there."""
    g = plan["ids"]
    steps = g.shape[0]
    log = _write(tmp_path / "log", _in_plan(g), twice=(0, 4))
    got = _verify(plan, log)
    assert got["problems"] == [f"rank 0 step 5: duplicated: step 4's micro-batch ({M} ids) logged again on log line 6 "
                               "as step 5"]
    assert _counts(got["ranks"][0]) == (steps * M, 0, 0, M, 0, 0)
    assert got["causes"] == ["a micro-batch was logged twice under two step numbers (the same ids on two lines in a "
                             "row): ConsumedLog.record called twice for one micro-batch, or a loop that trained it "
                             "twice"]
    path = tmp_path / "log" / "rank-00000.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[4]["step"] = 5  # the first of the two mis-numbered too: both lines say step 5
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = _verify(plan, log)
    assert got["problems"] == [f"rank 0 step 5: duplicated: step 4's micro-batch ({M} ids) logged again on log line 6"]
    assert _counts(got["ranks"][0]) == (steps * M, 0, 0, M, 0, 0)
    assert "the same step and ids on two lines" in got["causes"][0]


def test_verify_quiet_says_in_one_line_why_it_exits_3(plan, tmp_path):
    """verify -q on a plan not followed printed nothing at all (exit 3 alone); a CI log now gets one line."""
    g = plan["ids"]
    log = _write(tmp_path / "log", _in_plan(g))
    path = tmp_path / "log" / "rank-00000.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:4] + lines[5:]))
    r = cli_in_process("verify", plan["shards"], "--log", log, "-q")
    assert r.returncode == 3 and r.stdout == "", r.stdout
    assert r.stderr.splitlines() == [
        f"ERROR: {log}: the plan was not followed (1 problem; the first: rank 0 step 4: missing: micro-batch not "
        f"logged ({M} ids): the log goes from step 3 to step 5); run without --quiet for the table and the likely "
        "cause"]
    assert cli_in_process("verify", plan["shards"], "--log", _write(tmp_path / "ok", _in_plan(g)), "-q").stderr == ""


@pytest.mark.parametrize("epochs", [1, 2])
def test_a_whole_epoch_in_another_order_is_not_read_as_a_skip_or_a_repeat(plan, tmp_path, epochs):
    """Every micro-batch logged once an epoch, in another order (here rotated by one): the guesses for a log whose
    step numbers hide a skip or a repeat read it as step 0 not logged and a short epoch. No micro-batch is missing
    or repeated: the order is another, and the cause is the shuffling one alone."""
    g = plan["ids"]
    steps = g.shape[0]
    order = [(t + 1) % steps for t in range(steps)] * epochs
    got = _verify(plan, _write(tmp_path / "log", {r: [g[t, r] for t in order] for r in range(N)}))
    assert {p.split(": ")[1] for p in got["problems"]} == {"out of order"}, got["problems"][:3]
    assert got["causes"] == ["each rank read its own rows in another order: a shuffling or length-grouping sampler, "
                             "or packing (TRL's best-fit-decreasing packing sorts longest first)"]
