"""`export SHARDS --for TRAINER --out DIR`: the shards' global order in the layout and columns that trainer reads,
with the settings that keep the plan and a README of its traps (the layouts: cluster_curate/layouts.py)."""

from __future__ import annotations

from cluster_curate.errors import CurateError, cannot_read
from cluster_curate.options import (DATASET_OPTIONS, OUTPUT_OPTIONS, Argument, CommandSpec, Option, int_range, lazy,
                                    read_options, resolve)

OPTIONS = (
    Option("trainer", flags=("--for",), required=True, choices=lazy("cluster_curate.layouts", "TARGET_NAMES"),
           run=False, help="The trainer to write for: its layout (batch- or sample-interleaved), columns, settings."),
    Option("out", path=True, flags=("--out", "-o"), required=True, run=False, help="Output directory."),
    Option("world_size", type=int_range(1), flags=("--world-size", "-n"), run=False,
           help="The job's number of processes: refused unless it is the shards' --num-shards."),
    Option("micro_batch_size", type=int_range(1), flags=("--micro-batch-size", "-m"), run=False,
           help="The job's per-device batch size: refused unless it is the shards' --micro-batch-size."),
    Option("data", path=True, run=False, multiple=True,
           help="--for jsonl|parquet: the data to read the left-over rows from (a mixture: its mixture file, or each "
                "input in the order embedded); default: the dataset or mixture recorded in the manifest."),
    *(o for o in DATASET_OPTIONS if o.name != "on_bad_row"),
    *OUTPUT_OPTIONS,
)


def export(shards: str, *, trainer: str, out: str, **options) -> dict:
    """Write `out` for `trainer`: the data file, the settings that keep the plan, README.md. Returns a summary."""
    from pathlib import Path

    from cluster_curate import layouts
    from cluster_curate.io import names
    from cluster_curate.io.writer import atomic_write_bytes, staged_directory, write_parquet_atomic
    from cluster_curate.loader import read_manifest

    o = resolve(OPTIONS, dict(options, trainer=trainer, out=out), "export")
    tgt = layouts.target(trainer)
    if o["data"] and tgt.columns != "source":  # else silently ignored: the shards hold every row this layout writes
        sources = ", ".join(t.name for t in layouts.TARGETS.values() if t.columns == "source")
        raise CurateError(f"--data is only used by --for {sources.replace(', ', '|')} (the data of the selected rows "
                          f"left over from the shards); --for {tgt.name} writes the shards' rows: leave --data out")
    from cluster_curate.io.artifacts import check_run_finished
    check_run_finished(shards)  # a `run` folder's shards that its stopped re-run left the previous run's
    manifest = read_manifest(shards)
    layouts.check_job(manifest, o["world_size"], o["micro_batch_size"], str(shards))
    from cluster_curate.io.artifacts import EXPORT, check_not_inside_replaced, check_writable, output_inputs
    check_not_inside_replaced(out, f"--out {out}")  # as `report --out`: `shard --overwrite` would refuse it there
    check_writable(out, o["overwrite"], inputs=output_inputs(shards, o["data"]), kind=EXPORT)
    table = _read_shards(shards)
    leftovers = None
    if tgt.columns == "source":  # every selected row once: the shards' rows and the left-over ids, as many
        _check_selected_rows(table, manifest, str(shards))
        leftovers = _read_leftovers(manifest, o, str(shards))
    from cluster_curate.io.mixture import as_recorded
    read = as_recorded(manifest.get("dataset") or {}, read_options(o))  # the fields embed read, unless given now
    rows = layouts.layout_table(table, manifest, tgt, str(shards), leftovers, read)
    name = layouts.data_file(tgt)
    # DPO pairs: the trainer's DPO stage, and no weights in trl
    preference = layouts.is_preference(table, read, layouts.mixture_inputs(manifest))
    labels = layouts.pair_labels(table, read, layouts.mixture_inputs(manifest))
    files = layouts.config_files(tgt, manifest, str((Path(out) / name).resolve()), rows, preference, labels)
    weighted = tgt.weights_applied and not (preference and tgt.name == "trl")
    lines = layouts.json_lines(rows, str(shards)) if tgt.name == "jsonl" else None  # refused before any writing
    with staged_directory(out, EXPORT) as work:
        if lines is not None:
            atomic_write_bytes(work / name, lines)
        else:
            write_parquet_atomic(rows, work / name)
        for fname, text in files.items():
            atomic_write_bytes(work / fname, text.encode())
    from cluster_curate.console import Shown
    # jsonl, parquet: every selected row once; a trainer's layout: the planned steps, so not the rows left over
    # past the last whole step (--remainder drop), and wrap's repeats (README, "Training with your trainer")
    whole = tgt.columns == "source"
    left_over, repeats = (0, 0) if whole else (int(manifest["leftover_rows"]), int(manifest["wrapped_rows"]))
    why = (f"{left_over:,} (beyond the last whole step of {manifest['num_shards']} × {manifest['micro_batch_size']}, "
           f"shard --remainder drop: ids in {names.LEFTOVER}; --for jsonl|parquet write them)") if left_over else None
    return {"for": tgt.name, "out": out, "layout": tgt.layout or "dataset order", "rows": rows.num_rows,
            "selected_rows": Shown(int(manifest["selected_rows"]), label="selected rows"),
            "leftover_rows": Shown(left_over, why, "left over (not written)"),
            "wrapped_rows": Shown(repeats, label="wrapped (repeats)"),
            "columns": rows.column_names, "ranks": manifest["num_shards"],
            "micro_batch_size": Shown(manifest["micro_batch_size"], label="micro-batch size"),
            "steps": manifest["steps"],
            "loss_weights_applied": Shown(bool(weighted), "applied by the recipe" if weighted
                                          else "not applied by this trainer", "loss weights"),
            "files": [name, *files], "readme": str(Path(out) / names.EXPORT_README)}


def _read_shards(shards: str):
    """All shards concatenated, rank 0 first."""
    import pyarrow as pa

    from cluster_curate.io.artifacts import read_parquet
    from cluster_curate.loader import shard_files
    tables = []
    for path in shard_files(shards, check_content=True):
        try:
            tables.append(read_parquet(path))
        except (OSError, pa.ArrowInvalid) as e:
            raise cannot_read(path, e, "the shard") from None
    return pa.concat_tables(tables, promote_options="permissive")


def _check_selected_rows(table, manifest: dict, source: str) -> None:
    """--for jsonl|parquet write each selected row once: the shards' rows (a `--remainder wrap` repeat once) and
    the manifest's leftover_ids, distinct and as many as its selected_rows; else one line before the data is read
    or anything written (a manifest edited since `shard` wrote it: rows silently missing or written twice)."""
    from pathlib import Path

    import numpy as np
    import pyarrow.compute as pc

    from cluster_curate.io import names
    ids = table.column("id")
    if "wrapped" in table.column_names:
        ids = ids.filter(pc.invert(table.column("wrapped")))
    ids = ids.to_numpy()
    leftover = np.array([int(i) for i in manifest.get("leftover_ids") or []], dtype=np.int64)
    selected, written = int(manifest["selected_rows"]), len(ids) + len(leftover)
    twice = written - np.unique(np.concatenate([ids, leftover])).size
    if written == selected and not twice:
        return
    said = f" (leftover_rows says {manifest['leftover_rows']:,})" if "leftover_rows" in manifest else ""
    raise CurateError(f"{Path(source) / names.MANIFEST}: selected_rows {selected:,}, but the shards hold {len(ids):,} "
                      f"rows and leftover_ids {len(leftover):,}{said}: "
                      + (f"{twice:,} of them twice" if twice else f"{written:,} rows to write, not {selected:,}")
                      + "; the manifest was changed since `shard` wrote it: write the shards again")


def _read_leftovers(manifest: dict, o: dict, source: str):
    """The raw rows of the manifest's left-over ids (in no shard), from --data (a dataset, a mixture file or each
    input of a mixture) or else the data the shards were made from, read and checked as shard read it
    (common.open_recorded_data: --force, the data as it is now). A mixture's rows get the normalised columns its
    shards have. None when there are none."""
    import pyarrow as pa

    from cluster_curate.commands.common import (bad_rows_skipped, ids_not_read, open_recorded_data,
                                                refuse_unreadable, rows_checked)
    from cluster_curate.errors import counted
    from cluster_curate.io.datasets import settled_pass
    from cluster_curate.io.mixture import Mixture
    ids = sorted(int(i) for i in manifest.get("leftover_ids") or [])
    if not ids:
        return None
    rows, are = counted(len(ids), "selected row"), "is" if len(ids) == 1 else "are"
    # the data shard read (its inputs), else the selection's (older manifests)
    recorded = manifest.get("inputs", {}).get("data") or manifest.get("dataset") or {}
    ds = open_recorded_data(o, source, recorded, f"the {rows} left over, in no shard, {are} read from it")
    if ds is None:
        raise CurateError(f"{source}: {rows} {are} left over (not in any shard) and the shards record no dataset; "
                          "pass --data DATA (the data they were made from)")
    mixture = isinstance(ds, Mixture)  # its shards carry the normalised prompt/response/messages/system columns
    if mixture:  # which inputs' text is JSON text in the shards (io/mixture.py `text_as_json`), as shard wrote it
        ds.check_columns()
    wanted = pa.array(ids, pa.int64())
    checked = rows_checked(recorded, ds)  # data changed since (--force): a left-over row broken since is refused
    with bad_rows_skipped(ds, checked):
        parts = settled_pass(ds, lambda: _leftover_parts(ds, wanted, mixture, checked))
    if checked:
        refuse_unreadable(ds, ids, "left-over")
    found = {i for t in parts for i in t.column("id").to_pylist()}
    missing = [i for i in ids if i not in found]  # data changed since, used with --force: no row silently lost
    if missing:
        raise ids_not_read(ds.source, missing, "left-over", "were the shards")
    import json

    from cluster_curate.io.shard_writer import json_text_aligned
    from cluster_curate.layouts import JSON_COLUMNS_KEY, concat_rows
    parts, _ = json_text_aligned(parts, ds.json_columns)  # batches where a column's objects had other keys, or text
    table = concat_rows(parts)  # batches of other types (numbers, then text), as shard joined them
    return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                          JSON_COLUMNS_KEY: json.dumps(ds.json_columns).encode()})


def _leftover_parts(ds, wanted: pa.Array, mixture: bool, checked: bool) -> list[pa.Table]:
    """The rows of `wanted` ids, one table per batch that holds some (a mixture's with its normalised columns);
    `checked` (shard_parts.rows_checked): read as examples too, a row skipped as bad left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cluster_curate.commands.common import readable_rows
    parts = []
    for b in ds.iter_batches(examples=mixture or checked):
        t = pa.Table.from_batches([readable_rows(b) if checked else b.raw])
        t = t.filter(pc.is_in(t.column("id"), value_set=wanted))
        if not t.num_rows:
            continue
        if mixture:
            from cluster_curate.io.mixture import normalised_columns
            by_id = {ex.id: ex for ex in b.examples}
            at = t.column_names.index("source_row") + 1
            cols = normalised_columns([by_id[int(i)] for i in t.column("id").to_pylist()])
            for k, (name, column) in enumerate(cols.items()):
                t = t.add_column(at + k, name, column)
        parts.append(t)
    return parts


def render(result: dict, options: dict) -> None:
    from cluster_curate import console
    console.summary(f"export --for {result['for']} → {result['out']}",
                    {k: (", ".join(v) if isinstance(v, list) else v) for k, v in result.items() if k != "out"})


SPEC = CommandSpec(
    "export", export, (Argument("shards"),), OPTIONS, render,
    short_help="Write the shards' plan for a trainer (HF, TRL, Accelerate, torchrun, torchtune, ...).",
    help="""Write the shards' global order for TRAINER: batch-interleaved for trainers that deal whole micro-batches
    to ranks (hf, trl, accelerate, llamafactory, axolotl), sample-interleaved for DistributedSampler (torchrun,
    torchtune), in the columns the trainer reads, with `id`, `weight`, `step` kept; next to it the settings that
    keep the order and README.md with the trainer's traps. jsonl / parquet: just the selected rows, as they were.

    \b
    Run the job on exactly the shards' --num-shards processes, per-device batch
    their --micro-batch-size (--world-size, --micro-batch-size: checked against
    them); check it with `cluster-curate verify SHARDS --log LOGDIR`.
    """)
