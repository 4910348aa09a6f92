"""`verify SHARDS --log LOGDIR`: did every rank consume exactly its shard, in order? Reads what each rank logged
(cluster_curate.loader.ConsumedLog or the HF callback) and the planned grid, and checks one against the other
(cluster_curate/plan_check.py); the CLI exits 3 with a short table when the plan was not followed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cluster_curate.errors import CurateError, cannot_read, counted
from cluster_curate.options import Argument, CommandSpec, Option, resolve

OPTIONS = (
    Option("log", path=True, required=True, run=False, metavar="LOGDIR",
           help="Directory of rank-RRRRR.jsonl files, one line per micro-batch a rank trained on."),
)
MAX_PROBLEMS = 10  # problem lines shown
# the exit status of a plan not followed: neither 1 (an internal error: verify itself failed) nor 2 (bad input), so
# that a CI job tells a training that broke the plan from a check that did not run (README, "In a Makefile or CI")
PLAN_NOT_FOLLOWED = 3


def verify(shards: str, *, log: str, **options) -> dict:
    """Check the logs in `log` against the shards. Returns {ok, ranks (rows), problems, causes, report}."""
    from cluster_curate import plan_check
    resolve(OPTIONS, dict(options, log=log), "verify")
    manifest, ids, weights = planned_grid(shards)
    check = plan_check.check_plan(ids, read_consumed(log, int(manifest["num_shards"])), weights)
    from cluster_curate.console import Shown
    rows = [{"rank": rc.rank, "steps": Shown(rc.steps_logged, f"{rc.steps_logged:,}/{check.steps:,}"),
             "rows": rc.rows_logged, "in_plan": rc.in_plan,
             **{k.replace(" ", "_"): rc.counts[k] for k in plan_check.KINDS}} for rc in check.ranks]
    return {"ok": check.ok, "shards": shards, "log": log, "steps": check.steps, "ranks": rows, "problem_count": check.problem_count,
            "problems": check.problem_lines(),
            "causes": check.causes, "report": plan_check.format_check(check, MAX_PROBLEMS)}


def planned_grid(shard_dir: str | os.PathLike):
    """(manifest, ids[step, rank, slot], weights[step, rank, slot]) of a shard directory."""
    import numpy as np
    import pyarrow as pa

    from cluster_curate.io.artifacts import check_run_finished, read_parquet
    from cluster_curate.loader import read_manifest, shard_files
    check_run_finished(shard_dir)  # a `run` folder's shards that its stopped re-run left the previous run's
    manifest = read_manifest(shard_dir)
    n, m, steps = int(manifest["num_shards"]), int(manifest["micro_batch_size"]), int(manifest["steps"])
    ids = np.empty((steps, n, m), dtype=np.int64)
    weights = np.empty((steps, n, m), dtype=np.float64)
    for r, path in enumerate(shard_files(shard_dir, check_content=True)):
        try:
            t = read_parquet(path, columns=["id", "weight"])
        except (OSError, KeyError, pa.ArrowInvalid) as e:
            raise cannot_read(path, e, "the shard") from None
        if t.num_rows != steps * m:
            raise CurateError(f"{path}: {t.num_rows} rows, the manifest plans {steps * m}")
        ids[:, r, :] = t.column("id").to_numpy().reshape(steps, m)
        weights[:, r, :] = t.column("weight").to_numpy().reshape(steps, m)
    return manifest, ids, weights


def read_consumed(log_dir: str | os.PathLike, num_ranks: int) -> dict[int, list[dict] | None]:
    """rank -> its logged micro-batches (None when the rank wrote no log), for the plan's ranks and any beyond them
    (a job run on more processes: the plan not followed, plan_check says so). A bad line is a one-line error."""
    import re

    from cluster_curate.io.names import consumed_log_name
    d = Path(log_dir)
    if d.is_file():  # one rank's log: verify reads every rank's, from their folder
        raise CurateError(f"{log_dir}: a file; --log takes the folder of every rank's log (rank-NNNNN.jsonl): "
                          f"{d.parent}")
    if not d.is_dir():
        raise CurateError(f"{log_dir}: no such log directory")
    pattern = consumed_log_name(0).replace("00000", "*")
    logged = {int(m[1]): p for p in d.glob(pattern)
              if (m := re.fullmatch(r"rank-(\d+)\.jsonl", p.name)) and p.name == consumed_log_name(int(m[1]))}
    if not logged:
        # no rank logged here at all: the wrong folder (or a parent of the right one), not N ranks that never ran
        below = next((p.parent for depth in ("*/", "*/*/") for p in sorted(d.glob(depth + pattern))), None)
        raise CurateError(f"{log_dir}: no rank log here ({consumed_log_name(0)} ...)"
                          + (f"; found some in {below}: pass that as --log" if below else
                             "; pass the directory the training job's ConsumedLog or ConsumedIdsCallback wrote"))
    return {r: _read_log(logged[r]) if r in logged else None for r in sorted(set(range(num_ranks)) | set(logged))}


def _read_log(path: Path) -> list[dict]:
    from cluster_curate.io.containers import GZIP_MAGIC
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise CurateError(f"{path}: is a directory, expected a rank's log file") from None
    except OSError as e:
        raise cannot_read(path, e, "the log") from None
    if data.startswith(GZIP_MAGIC):  # else "line 1: not valid UTF-8"
        raise CurateError(f"{path}: gzip-compressed; decompress it (verify reads a rank's log as JSON lines)")
    return [_record(path, line_no, line) for line_no, line in enumerate(data.splitlines(), 1) if line.strip()]


def _record(path: Path, line_no: int, line: bytes) -> dict:
    from cluster_curate.io.containers import utf8_error  # the data readers' wording
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CurateError(utf8_error(path, line_no, e, line, 0)) from None
    except json.JSONDecodeError as e:
        raise CurateError(f"{path}:{line_no}: not JSON ({e.msg})") from None
    if not isinstance(rec, dict) or "ids" not in rec:
        raise CurateError(f"{path}:{line_no}: field ids: missing")
    ids = rec["ids"]
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
        raise CurateError(f"{path}:{line_no}: field ids: not a list of integers")
    if any(not -2 ** 63 <= i < 2 ** 63 for i in ids or ()):  # no shard holds it: ids are int64
        raise CurateError(f"{path}:{line_no}: field ids: a number past 64 bits, not an id")
    weights = rec.get("weights")
    if weights is not None and not (isinstance(weights, list) and all(isinstance(w, (int, float)) for w in weights)):
        raise CurateError(f"{path}:{line_no}: field weights: not a list of numbers")
    if any(isinstance(w, int) and abs(w) > sys.float_info.max for w in weights or ()):  # 1e400 reads as inf
        raise CurateError(f"{path}:{line_no}: field weights: a whole number past a float's range")
    return rec


def render(result: dict, options: dict) -> None:
    from cluster_curate import console
    data = {"plan followed": result["ok"], "shards": result["shards"], "log": result["log"]}
    if not result["ok"]:
        shown = result["problems"][:MAX_PROBLEMS]
        more = result["problem_count"] - len(shown)
        data["problems"] = "\n".join(shown + ([f"... {more} more"] if more > 0 else []))
        data["cause"] = "\n".join(result["causes"])
    console.summary(f"verify {result['log']} against {result['shards']}", data, result["ranks"])


def exit_status(result: dict, options: dict) -> None:
    if not result["ok"]:
        from cluster_curate import console
        if console.QUIET:  # the table is not printed: one line says why it exits 3
            import click
            first = result["problems"][0] if result["problems"] else (result["causes"] or ["-"])[0]
            click.echo(f"ERROR: {result['log']}: the plan was not followed "
                       f"({counted(result['problem_count'], 'problem')}; the first: {first}); run without --quiet for "
                       "the table and the likely cause", err=True)
        raise SystemExit(PLAN_NOT_FOLLOWED)


SPEC = CommandSpec(
    "verify", verify, (Argument("shards"),), OPTIONS, render,
    check=exit_status,
    short_help="Check that every rank consumed exactly its shard, in order (exit 3 if not).",
    help="""Check what each rank of a training job consumed (LOGDIR/rank-RRRRR.jsonl, one line per micro-batch:
    {"step": t, "ids": [...], "weights": [...]}) against the shards: per rank and step, any id out of order, on
    the wrong rank, out of plan, duplicated or missing, a weight other than planned, and the likely cause
    (shuffling, the wrong export layout, double sharding, packing). Exit 3 with a short table if the plan was not
    followed (1 is an internal error of verify itself, 2 bad input).

    \b
    Write the logs with cluster_curate.loader.ConsumedLog (a plain loop) or
    cluster_curate.integrations.hf.ConsumedIdsCallback (HF Trainer / TRL with PlanTrainerMixin; axolotl's
    export config adds it: --log OUTPUT_DIR/consumed).
    """)
