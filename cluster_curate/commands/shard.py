"""`shard S [--data DATA] --out D`: plan the allocation on ids and small columns, then stream the raw data once
and write N Parquet shards in planned order (bounded memory: io/shard_writer.py), manifest.json and
leftover_ids.txt, swapped into place as one directory."""

from __future__ import annotations

import time

from cluster_curate.io import names
from cluster_curate.options import (DATASET_OPTIONS, OUTPUT_OPTIONS, Argument, CommandSpec, Option, lazy,
                                    recorded, resolve, seed_type)

BATCH_ROWS = 4096  # raw rows read at a time
REMAINDER_WARN_SHARE = 0.05  # --remainder wrap's repeats or drop's left-over rows past it are warned about


def _allocation_help():
    from cluster_curate.sharding import ALLOCATION
    return ALLOCATION.help_text() + "."


OPTIONS = (
    Option("data", path=True, run=False, multiple=True,
           help="The raw dataset the selection was made from (every source column is kept); a mixture: each "
                "input (--data a.jsonl --data b.parquet, in the order embedded) or its mixture file. Default: "
                "the dataset or mixture the selection records, while it is unchanged."),
    Option("out", path=True, flags=("--out", "-o"), required=True, run=False,
           help="Output directory for the shards and manifest.json."),
    Option("num_shards", record=True, flags=("--num-shards", "-n"), type=int, required=True,
           help="Number of data-parallel ranks (one shard each)."),
    Option("micro_batch_size", record=True, flags=("--micro-batch-size", "-m"), type=int, default=1, show_default=True,
           help="Rows per rank per step; a global step is num-shards × micro-batch-size rows."),
    Option("allocation", record=True, default="stratified", choices=lazy("cluster_curate.sharding", "ALLOCATIONS"),
           show_default=True, help=_allocation_help),
    Option("balance", record=True, default="tokens", choices=lazy("cluster_curate.sharding", "BALANCES"),
           show_default=True,
           help="Rank load to balance: sum of tokens, or micro-batch size × longest row (trainers that pad)."),
    Option("length_window", record=True, type=int,
           help="Group rows of similar length into steps inside windows of this many steps, at least ⌈16·k / (N·M)⌉ "
                "(about 16 rows of each cluster) (0 = off; default 64)."),
    Option("pair_lengths", record=True, negatable=True, default=True, show_default=True,
           help="Inside a window, rows of similar length share a step across clusters too (each step keeps its "
                "cluster counts): what balances micro-batch 1 and 2; since length often tells inputs apart "
                "(code is longer), fewer steps mix inputs. --no-pair-lengths: clusters share steps regardless "
                "of length, as before this option (benchmarks/results/shard_lengths.md)."),
    Option("remainder", record=True, default="drop", choices=lazy("cluster_curate.sharding", "REMAINDERS"),
           show_default=True,
           help="Rows beyond a whole number of steps: drop (listed in the manifest and leftover_ids.txt) or "
                "wrap (add the last step's worth of repeats of the stream's first rows, marked in column "
                "`wrapped`, spread over the epoch like any row, never in the same step as their original, "
                "with their full weight). Past 5% of the selection either one is warned about."),
    Option("weights", record=True, default="cluster", choices=("cluster", "none"), show_default=True,
           help="Column `weight`: (n_c/n) ÷ (s_c/s), restoring the data's cluster proportions; none: 1."),
    Option("tokenizer", path=True,
           help="Local tokenizer directory or .gguf model: count tokens with it (one extra pass over the data). "
                "Default: the selection's n_tokens, else its embeddings', else whitespace words."),
    Option("embeddings", path=True, run=False,
           help="Embeddings artifact to take n_tokens from, made from the selection's dataset (default: the "
                "selection's own n_tokens, or its lineage's embeddings when reachable)."),
    Option("seed", record=True, type=seed_type(), default=0, show_default=True,
           help="Seeds the order of each cluster's rows in the stream (which rows a dropped remainder leaves out) "
                "and --allocation random's shuffle."),
    *DATASET_OPTIONS,
    *OUTPUT_OPTIONS,
)


def shard(selection: str, data=None, out: str | None = None, *, chunk_bytes: int = 64 << 20,
          buffer_bytes: int = 128 << 20, batch_rows: int = BATCH_ROWS, **options) -> dict:
    """Write the shards, manifest.json and leftover_ids.txt of `selection` into the directory `out` (required:
    resolve refuses it missing); `data` None, as --data left out: the dataset or mixture the selection records.
    Returns the manifest (plus timings, which manifest.json leaves out: it is deterministic)."""

    from cluster_curate import sharding
    from cluster_curate.commands import shard_parts as parts
    from cluster_curate.commands.common import open_recorded_data, recorded_paths
    from cluster_curate.errors import CurateError
    from cluster_curate.io.artifacts import SHARDS, check_run_finished, check_writable, output_inputs
    from cluster_curate.io.mixture import Mixture, source_index
    from cluster_curate.io.readers import read_selection
    from cluster_curate.shard_balance import balance_figures, balance_warning

    t0 = time.monotonic()
    o = resolve(OPTIONS, dict(options, data=data, out=out), "shard")
    check_writable(out, o["overwrite"], inputs=output_inputs(selection, data, o["embeddings"], o["tokenizer"]),
                   kind=SHARDS)
    check_run_finished(selection)  # a `run` folder's selection that its stopped re-run left the previous run's
    sel = read_selection(selection, force=o["force"])
    ds = open_recorded_data(o, selection, sel.meta.dataset)  # --data, else the selection's; read as its data was
    if ds is None:
        raise CurateError(f"{selection}: records no dataset; pass --data DATA (the data it was made from)")
    if isinstance(ds, Mixture):  # one typed column per name in the shards: refused before any work
        ds.check_columns()
    dataset = ds.record()
    if not data:  # the recorded data is an input too: never the output
        check_writable(out, o["overwrite"], inputs=output_inputs(recorded_paths(dataset)), kind=SHARDS)
    inputs = {"selection": sel.meta.as_input(selection, out), "data": dataset}
    tokens, token_source = parts.selected_token_counts(o, selection, sel, ds, inputs)
    t_plan = time.monotonic()
    bounds, bounds_said = parts.source_bounds(sel, tokens)
    plan = sharding.plan_steps(sel.clusters, tokens, o["num_shards"], o["micro_batch_size"],
                               allocation=o["allocation"], balance=o["balance"], remainder=o["remainder"],
                               length_window=o["length_window"], pair_lengths=o["pair_lengths"], seed=o["seed"],
                               bounds=bounds)
    _warn_bounds(o, plan, bounds_said)
    k = len(set(sel.clusters.tolist()))
    floor = sharding.min_length_window(k, o["num_shards"] * o["micro_batch_size"])
    if o["length_window"] and o["length_window"] < floor:  # else silently other windows than asked
        from cluster_curate import console
        console.warn(f"--length-window {o['length_window']}: windows of {floor} steps here, the fewest that hold "
                     f"about 16 rows of each of the {k} clusters")
    # warned about here, recorded in the manifest
    figures = balance_figures(plan, tokens, sel.clusters, source_index(sel.meta.dataset, sel.ids))
    if o["allocation"] == "stratified":  # the others are baselines: their balance is what they are for
        warning = balance_warning(figures, tokens, o["balance"])
        if warning:
            from cluster_curate import console
            console.warn(warning)
    _warn_remainder(o, out, plan, len(sel.ids))
    weights = parts.cluster_weights(o, selection, sel)
    t_stream = time.monotonic()
    params = _params(o, token_source)
    manifest, t_assemble, t_done = parts.write(o, sel, ds, plan, weights, params, inputs, dataset, tokens, figures,
                                               chunk_bytes=chunk_bytes, buffer_bytes=buffer_bytes,
                                               batch_rows=batch_rows)
    manifest["out"] = out  # this and the timings are not in manifest.json, which is deterministic
    manifest["seconds"] = round(time.monotonic() - t0, 3)
    manifest["seconds_by_phase"] = {"inputs_and_tokens": round(t_plan - t0, 3), "plan": round(t_stream - t_plan, 3),
                                    "stream_data": round(t_assemble - t_stream, 3),
                                    "assemble_shards": round(t_done - t_assemble, 3)}
    return manifest


def _warn_remainder(o: dict, out: str, plan, selected: int) -> None:
    """--remainder wrap's repeats, or drop's left-over rows, past REMAINDER_WARN_SHARE of the selection: a few make up
    or cut the last step; many change the data's mix, or silently train on part of the selection (many shards on
    few rows, or the paper's allocation on uneven clusters)."""
    import os

    from cluster_curate import console
    n, m = o["num_shards"], o["micro_batch_size"]
    repeats = int(plan.wrapped.sum())
    if repeats > REMAINDER_WARN_SHARE * selected:
        console.warn(f"--remainder wrap repeats {console.counted(repeats, 'row')} ({repeats / selected:.0%} of "
                     f"the {selected:,} selected) to fill whole steps of {n} × {m}: fewer shards, a smaller "
                     "micro-batch or a larger budget repeat fewer")
    dropped = int(plan.leftover.shape[0])
    if dropped <= REMAINDER_WARN_SHARE * selected:
        return
    if o["allocation"] == "paper":
        why = "so that every rank gets as many rows as the smallest cluster has"
        fix = "--remainder wrap (tops every cluster up to the largest), or clusters of equal size"
    else:
        why = f"to make whole steps of {n} × {m}"
        fix = f"--remainder wrap, or a budget that is a multiple of {n} × {m} = {n * m} rows"
    console.warn(f"--remainder drop leaves out {console.counted(dropped, 'row')} ({dropped / selected:.0%} of the "
                 f"{selected:,} selected; ids in {os.path.join(out, names.LEFTOVER)}) {why}: try {fix}")


def _warn_bounds(o: dict, plan, said: dict | None) -> None:
    """The selection's source floors and caps that no choice of the rows left over (or repeated) keeps over the
    sharded rows (sharding.pick_within_bounds): one warning naming each input, its share and the bound (`said`:
    shard_parts.source_bounds)."""
    broken = plan.info.get("bounds_broken")
    if not broken:
        return
    from cluster_curate import console
    names_, origins, unit = said["names"], said["origins"], said["unit"]
    what = "left over" if o["remainder"] == "drop" else "repeated"
    said = []
    for k, share, bound, value in broken:
        origin = origins.get(names_[k], {}).get(bound)
        said.append(f"source {names_[k]} is {share:.1%} of the shards' {unit}, "
                    f"{'below its floor' if bound == 'floor' else 'above its cap'} {value:g}"
                    + (f" ({origin})" if origin else ""))
    console.warn(f"--remainder {o['remainder']}: no choice of the rows {what} keeps the selection's source bounds: "
                 + "; ".join(said))


def _params(o: dict, token_source: str) -> dict:
    from cluster_curate import sharding
    balances = sharding.ALLOCATION.get(o["allocation"]).balances
    window = o["length_window"] if o["length_window"] is not None else sharding.DEFAULT_LENGTH_WINDOW.get(o["balance"])
    params = recorded(OPTIONS, o)  # declaration order: manifest.json keeps it
    params.update(balance=o["balance"] if balances else None, length_window=window if balances else None,
                  pair_lengths=o["pair_lengths"] if balances and window else None, token_source=token_source)
    return params


def summary(m: dict) -> dict:
    """The summary of a manifest (the table, and --json): every figure once, defined in README."""
    import os

    from cluster_curate.console import Shown
    b, out = m["balance"], m["out"]

    def pick(key, *stats):
        return {s: round(float(b[key][s]), 4) for s in stats}

    token, spread = pick("token_imbalance", "mean", "p95"), pick("cluster_spread", "mean", "min")
    tv = b["rank_mix_tv"]
    mixed = {} if "input_mix" not in b else {"input_mix": Shown(  # a mixture's: what pairing by length costs it
        pick("input_mix", "steps_mixing", "random"),
        f"{b['input_mix']['steps_mixing']:.2f} (random {b['input_mix']['random']:.2f})", "steps mixing inputs")}
    return {
        "out": out,
        "shards": m["num_shards"],
        "rows_per_shard": Shown(m["rows_per_shard"], label="rows per shard"),
        "steps": m["steps"],
        "micro_batch_size": Shown(m["micro_batch_size"], label="micro-batch size"),
        "selected_rows": Shown(m["selected_rows"], label="selected rows"),
        "leftover_rows": Shown(m["leftover_rows"], label="left over (dropped)"),
        "wrapped_rows": Shown(m["wrapped_rows"], label="wrapped (repeats)"),
        "allocation": m["params"]["allocation"],
        "token_source": Shown(m["tokens"]["source"], label="token source"),
        "token_imbalance": Shown(token, f"{token['mean']:.4f} / {token['p95']:.4f}", "token imbalance mean / p95"),
        "padded_imbalance_mean": Shown(round(b["padded_imbalance"]["mean"], 4), label="padded imbalance mean"),
        "padding_efficiency": Shown(round(b["padding_efficiency"], 4), label="padding efficiency"),
        "cluster_spread": Shown(spread, f"{spread['mean']:.4f} / {spread['min']:.4f}", "cluster spread mean / min"),
        "rank_mix_tv_max": Shown(round(tv["max"], 4), f"{tv['max']:.4f}" + (  # older manifests: no random
            f" (random {tv['random']:.4f})" if "random" in tv else ""), "rank mix TV max"),
        **mixed,
        "seconds": m["seconds"],
        "manifest": str(os.path.join(out, names.MANIFEST)),
    }


def render(m: dict, options: dict) -> None:
    from cluster_curate import console
    console.summary(f"shard → {m['out']}", summary(m))


SPEC = CommandSpec(
    "shard", shard, (Argument("selection"),), OPTIONS, render, as_json=summary,
    algorithm=lazy("cluster_curate.sharding", "ALGORITHM_VERSION"),
    help="""Allocate a selection across N data-parallel ranks: N equal Parquet shards (full source rows plus `id`,
    `cluster`, `step`, `weight`, `wrapped`) in the order each rank consumes them, and manifest.json. A mixture's
    shards also have `source`, `source_row` and the normalised `prompt`, `response`, `messages`, `system`.

    \b
    Load a shard with datasets.load_dataset("parquet", data_files=...) or cluster_curate.loader.load_shard.
    """)
