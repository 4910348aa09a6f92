"""The phases of `shard` (commands/shard.py): token counts, loss weights, and the streamed write."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from cluster_curate.errors import CurateError
from cluster_curate.io import names


def selected_token_counts(o: dict, selection: str, sel, ds, inputs: dict):
    """Tokens per selected id: an explicit --tokenizer or --embeddings first, then the selection's n_tokens,
    then the embeddings of its lineage, then whitespace words (said in the manifest)."""
    from cluster_curate import console
    from cluster_curate.io.artifacts import check_dataset_matches
    from cluster_curate.io.lineage import upstream
    from cluster_curate.io.readers import read_embedding_tokens
    tokenizer, embeddings = o["tokenizer"], o["embeddings"]
    if not tokenizer and not embeddings and sel.n_tokens is not None:
        what = _selection_counts(selection, sel.meta)  # whitespace words (the default text features), model tokens
        return sel.n_tokens, "selection n_tokens" + (f": {what}" if what else "")
    if tokenizer and sel.n_tokens is not None and _counted_by(sel.meta.params, tokenizer):
        console.info(f"token counts: the selection's n_tokens, counted by --tokenizer {tokenizer} (unchanged since)")
        return sel.n_tokens, f"tokenizer {tokenizer}"  # what counting them again here would give, and say
    if not tokenizer:
        candidates = [embeddings] if embeddings else []
        if not embeddings:  # the embeddings this selection descends from, when still there and unchanged
            path, _ = upstream(selection, sel.meta, "embeddings")
            if path is None:
                cl_path, cmeta = upstream(selection, sel.meta, "clusters")
                if cl_path is not None:
                    path, _ = upstream(cl_path, cmeta, "embeddings")
            candidates += [path] if path else []
        for cand in candidates:
            tokens, emb_meta = read_embedding_tokens(cand, sel.ids, o["force"])
            # another dataset's embeddings hold the same ids 0..n-1: their counts would balance the wrong rows
            check_dataset_matches(emb_meta.dataset, cand, inputs["data"], o["force"], way_out=None if cand !=
                                  embeddings else "--embeddings of the data the selection was made from")
            if tokens is not None:
                inputs["embeddings"] = emb_meta.as_input(cand, o["out"])
                return tokens, f"embeddings n_tokens ({cand})"
            if cand == embeddings:
                raise CurateError(f"{cand}: no 'n_tokens' column")
    from cluster_curate.commands.common import count_tokens_pass, ids_not_read
    tokens = count_tokens_pass(ds, sel.ids, tokenizer, "shard: count tokens")
    missing = np.flatnonzero(tokens < 0)
    if missing.size:
        raise ids_not_read(ds.source, sel.ids[missing], "selected", "was the selection")
    if tokenizer:
        return tokens, f"tokenizer {tokenizer}"
    console.warn("no token counts in the selection or its embeddings and no --tokenizer: balancing on "
                 "whitespace-separated words (recorded in the manifest as token_source)")
    return tokens, "whitespace words (no n_tokens, embeddings or --tokenizer)"


def _selection_counts(selection, meta) -> str | None:
    """What the selection's n_tokens count, in words: what select counted them with, else what its embeddings
    say of theirs (their params' n_tokens: whitespace words, model tokens, ...); None when neither is known."""
    from cluster_curate.io.lineage import upstream
    counted = (meta.params.get("tokens") or {}).get("counted_by")
    if counted:
        return counted.removeprefix("the embeddings' n_tokens: ")
    path, cmeta = upstream(selection, meta, "clusters")
    path, emeta = upstream(path, cmeta, "embeddings") if path is not None else (None, None)
    return emeta.params.get("n_tokens") if path is not None else None


def _counted_by(params: dict, tokenizer: str) -> bool:
    """Whether select counted the selection's n_tokens with this --tokenizer, whose files have not changed since
    (`run --tokenizer T` passes T to both: counting every selected row again here gave the same numbers)."""
    from cluster_curate.commands.common import tokenizer_stamp
    t = params.get("tokens") or {}
    return (t.get("counted_by") == f"tokenizer {tokenizer} (exact)" and t.get("tokenizer_stamp") is not None
            and t["tokenizer_stamp"] == tokenizer_stamp(tokenizer))


def source_bounds(sel, tokens):
    """The floors and caps select applied to a mixture's inputs (params `source_shares`: shares of its budget, rows
    or tokens as `share_of_budget` says), which the rows the plan leaves over or repeats keep
    (sharding.pick_within_bounds), and how a warning names them: (SourceBounds, {"names", "origins": per input
    where each bound was set, "unit"}); (None, None) where select bounded none. Tokens are the selection's
    n_tokens (what select counted), else `tokens`."""
    from cluster_curate.io.mixture import source_index
    from cluster_curate.sharding import SourceBounds
    shares, figures = sel.meta.params.get("source_shares"), sel.meta.params.get("sources") or []
    source = source_index(sel.meta.dataset, sel.ids)
    budget = next((r["share_of_budget"] for r in figures if r.get("share_of_budget")), None)
    if not shares or source is None or budget is None:
        return None, None
    weight = np.ones(sel.ids.shape[0], dtype=np.int64) if budget["unit"] == "rows" else (
        sel.n_tokens if sel.n_tokens is not None else np.asarray(tokens, dtype=np.int64))
    share = (lambda values, none: np.array([none if v is None else v for v in values], dtype=np.float64))
    said = {"names": [i["name"] for i in sel.meta.dataset["inputs"]], "unit": budget["unit"],
            "origins": {r["source"]: {b["bound"]: b["from"] for b in r.get("bounds") or []} for r in figures}}
    return SourceBounds(source, weight, share(shares["min"], 0.0), share(shares["max"], 1.0),
                        int(budget["budget"])), said


@dataclass
class Weights:
    labels: np.ndarray      # the selected cluster labels
    selected: np.ndarray    # s_c
    in_data: np.ndarray | None  # n_c
    per_cluster: np.ndarray  # w_c
    sizes_source: str | None
    per_row: np.ndarray     # weight of each selected row


def _cluster_sizes(selection: str, meta, labels, force: bool):
    """n_c per selected cluster label in the full data: the selection's `cluster_sizes` parameter, else counted
    from the clusters artifact it was made from (when unchanged). (None, None) when neither is available."""
    from cluster_curate.io.lineage import upstream
    from cluster_curate.io.readers import read_cluster_sizes
    sizes = meta.params.get("cluster_sizes")
    if sizes is not None:
        lookup = ({int(k): int(v) for k, v in sizes.items()} if isinstance(sizes, dict)
                  else {i: int(v) for i, v in enumerate(sizes)})
        missing = [int(c) for c in labels if int(c) not in lookup]
        if missing:
            raise CurateError(f"selection: params.cluster_sizes has no size for cluster {missing[0]}")
        return np.array([lookup[int(c)] for c in labels], dtype=np.int64), "selection params"
    src, _ = upstream(selection, meta, "clusters")
    if src:
        return read_cluster_sizes(src, labels, force), f"clusters artifact {meta.inputs['clusters']['path']}"
    return None, None


def cluster_weights(o: dict, selection: str, sel) -> Weights:
    from cluster_curate import sharding
    labels, s_c = np.unique(sel.clusters, return_counts=True)
    n_c, source = _cluster_sizes(selection, sel.meta, labels, o["force"])
    if o["weights"] == "none":
        w_c = np.ones(labels.shape[0])
    else:
        if n_c is None:
            raise CurateError(f"{selection}: cannot compute loss weights: no params.cluster_sizes and its clusters "
                              "artifact is not reachable (pass --weights none to train unweighted)")
        w_c = sharding.loss_weights(n_c, s_c)
    return Weights(labels, s_c, n_c, w_c, source, w_c[np.searchsorted(labels, sel.clusters)])


@dataclass
class Cells:
    """Where each selected id goes: (shard, position) per plan cell; repeats (--remainder wrap) listed apart."""
    shard: np.ndarray
    pos: np.ndarray
    row: np.ndarray
    wrapped: np.ndarray
    lookup: np.ndarray   # id -> its (first) cell, -1 when not planned
    repeats: dict
    repeat_ids: np.ndarray


def _cells(plan, ids) -> Cells:
    t_count, n, m = plan.rows.shape
    shard = np.broadcast_to(np.arange(n)[None, :, None], plan.rows.shape).reshape(-1)
    pos = (np.arange(t_count)[:, None, None] * m + np.arange(m)[None, None, :]).repeat(n, 1).reshape(-1)
    row = plan.rows.reshape(-1)
    wrapped = plan.wrapped.reshape(-1)
    lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    lookup[ids[row[~wrapped]]] = np.flatnonzero(~wrapped)
    repeats: dict[int, list[int]] = {}
    for cell in np.flatnonzero(wrapped):
        repeats.setdefault(int(ids[row[cell]]), []).append(int(cell))
    return Cells(shard, pos, row, wrapped, lookup, repeats, np.array(sorted(repeats), dtype=np.int64))


def _batch_rows(raw, cells: Cells, sel, weights: Weights, m: int, renamed: dict, examples=None):
    """The rows of one raw batch that the plan places, with the shard columns added: (rows, cells) or None.
    examples (a mixture's batch): the normalised prompt/response/messages/system columns follow `source_row`."""
    import pyarrow as pa
    bid = raw.column("id").to_numpy().astype(np.int64)
    inside = bid < cells.lookup.shape[0]
    where = np.full(bid.shape[0], -1, dtype=np.int64)
    where[inside] = cells.lookup[bid[inside]]
    take = np.flatnonzero(where >= 0)
    extra_take, extra_cells = [], []
    if cells.repeats:
        for i in np.flatnonzero(np.isin(bid, cells.repeat_ids)):
            for cell in cells.repeats[int(bid[i])]:
                extra_take.append(int(i))
                extra_cells.append(cell)
    if take.size == 0 and not extra_take:
        return None
    at = np.concatenate([where[take], np.array(extra_cells, dtype=np.int64)])
    take = np.concatenate([take, np.array(extra_take, dtype=np.int64)])
    rows = pa.Table.from_batches([raw]).take(pa.array(take))
    if examples is not None:
        from cluster_curate.io.mixture import normalised_columns
        by_id = {ex.id: ex for ex in examples}
        at_col = rows.column_names.index("source_row") + 1
        for i, (name, column) in enumerate(normalised_columns([by_id[int(j)] for j in bid[take]]).items()):
            rows = rows.add_column(at_col + i, name, column)
    from cluster_curate.io.datasets import reserved_rename
    from cluster_curate.sharding import SHARD_COLUMNS
    for name in rows.column_names:  # `weight` -> `source_weight`, `source_weight` -> `_source_weight`: no two alike
        stored = reserved_rename(name, SHARD_COLUMNS)
        if stored != name:
            renamed[name] = stored
    if renamed:
        rows = rows.rename_columns([renamed.get(c, c) for c in rows.column_names])
    sel_row = cells.row[at]
    rows = rows.append_column("cluster", pa.array(sel.clusters[sel_row], pa.int64()))
    rows = rows.append_column("step", pa.array(cells.pos[at] // m, pa.int64()))
    rows = rows.append_column("weight", pa.array(weights.per_row[sel_row], pa.float64()))
    rows = rows.append_column("wrapped", pa.array(cells.wrapped[at], pa.bool_()))
    return rows, at


def _stream(sel, ds, plan, weights, writer, batch_rows):
    """Stream the raw data once, writing the placed rows into per-shard buckets."""
    from cluster_curate import console
    cells = _cells(plan, sel.ids)
    m = plan.rows.shape[2]
    renamed: dict[str, str] = {}
    source_columns: dict[str, None] = {}
    found = np.zeros(sel.ids.shape[0], dtype=bool)
    from cluster_curate.io.mixture import Mixture
    normalise = isinstance(ds, Mixture)  # a mixture's shards get the normalised columns: examples needed
    from cluster_curate.commands.common import bad_rows_skipped, readable_rows, refuse_unreadable, rows_checked
    checked = rows_checked(sel.meta.dataset, ds)  # data changed since (--force): its rows read as examples too
    with console.progress("shard: read the data", total=ds.rows) as bar, bad_rows_skipped(ds, checked):
        for batch in ds.iter_batches(batch_rows, examples=normalise or checked):
            bar.advance(batch.num_rows)
            placed = _batch_rows(readable_rows(batch) if checked else batch.raw, cells, sel, weights, m, renamed,
                                 batch.examples if normalise else None)
            if placed is None:
                continue
            rows, at = placed
            source_columns.update(dict.fromkeys(c for c in rows.column_names))
            writer.add(rows, cells.shard[at], cells.pos[at])
            found[cells.row[at]] = True
    if checked:
        refuse_unreadable(ds, sel.ids, "selected")
    planned = np.unique(cells.row)
    missing = planned[~found[planned]]
    if missing.size:
        from cluster_curate.commands.common import ids_not_read
        raise ids_not_read(ds.source, sel.ids[missing], "selected", "was the selection")
    return renamed, source_columns


def write(o, sel, ds, plan, weights: Weights, params, inputs, dataset, tokens, figures: dict, *, chunk_bytes,
          buffer_bytes, batch_rows):
    """Everything of the shard directory, built beside it and swapped into place whole; `figures` are the plan's
    shard_balance.balance_figures, recorded in the manifest."""
    import shutil

    from cluster_curate import sharding
    from cluster_curate.io.artifacts import SHARDS, make_meta
    from cluster_curate.io.datasets import settled_pass
    from cluster_curate.io.shard_writer import ShardWriter
    from cluster_curate.io.writer import file_metadata, staged_directory, write_json, write_lines
    from cluster_curate.sharding import SHARD_COLUMNS
    n = plan.rows.shape[1]
    with staged_directory(o["out"], SHARDS) as work:
        def stream():
            shutil.rmtree(work / "spill", ignore_errors=True)  # a first pass's, when it is read again
            writer = ShardWriter(work / "spill", n, plan.rows_per_shard, chunk_bytes=chunk_bytes,
                                 buffer_bytes=buffer_bytes)
            return writer, *_stream(sel, ds, plan, weights, writer, batch_rows)

        writer, renamed, source_columns = settled_pass(ds, stream)
        meta = make_meta(names.SHARD, params, inputs, sel.meta.dataset or dataset, sharding.ALGORITHM_VERSION)
        meta.rows = plan.rows_per_shard
        files = [names.shard_file_name(r, n) for r in range(n)]
        columns = ["id"] + [c for c in source_columns if c not in ("id",) + SHARD_COLUMNS] + list(SHARD_COLUMNS)
        t_assemble = time.monotonic()
        from cluster_curate import console
        with console.progress("shard: write the shards", total=n, unit="shards", quiet_when_short=True) as bar:
            writer.finish([work / f for f in files], columns, file_metadata(meta), on_shard=lambda: bar.advance(1))
        t_done = time.monotonic()
        shutil.rmtree(work / "spill", ignore_errors=True)
        leftover_ids = np.sort(sel.ids[plan.leftover]).tolist()
        write_lines(work / names.LEFTOVER, leftover_ids)
        manifest = _manifest(meta, params, inputs, sel, plan, weights, tokens, figures,
                             _source_renames(ds, columns[1:-len(SHARD_COLUMNS)]), columns,
                             [(f, work / f) for f in files], leftover_ids, _json_columns(ds, writer, renamed))
        write_json(work / names.MANIFEST, manifest)
    return manifest, t_assemble, t_done


def _source_renames(ds, stored: list[str]) -> dict[str, str]:
    """{a source column's name: its name in the shards} where they differ (manifest `renamed_source_columns`, which
    export undoes): shard's own columns (`weight` -> `source_weight`) and, for one dataset, the reader's `id`
    (`source_id`); io/datasets.py `reserved_rename`. A mixture's columns by their names in the mixture."""
    from cluster_curate.io.datasets import RAW_RESERVED, original_name
    from cluster_curate.io.mixture import Mixture
    from cluster_curate.sharding import SHARD_COLUMNS
    out = {}
    for name in stored:
        raw = original_name(name, SHARD_COLUMNS)
        source = raw if isinstance(ds, Mixture) else original_name(raw, RAW_RESERVED)
        if source != name:
            out[source] = name
    return out


def _json_columns(ds, writer, renamed: dict) -> list[str]:
    """The shards' columns that hold JSON text of lists and objects (types or keys that differ from row to row):
    `export --for jsonl` writes them back as they were."""
    import pyarrow as pa
    given = {renamed.get(c, c) for c in getattr(ds, "json_columns", ())} | set(writer.json_only)
    return [f.name for f in writer.schema() if f.name in given and pa.types.is_string(f.type)]


def _manifest(meta, params, inputs, sel, plan, w: Weights, tokens, figures, renamed, columns, files, leftover_ids,
              json_columns=()):
    from cluster_curate import __version__
    from cluster_curate.loader import file_sha256
    n, m = plan.rows.shape[1], plan.rows.shape[2]
    in_data = w.in_data if w.in_data is not None else [None] * len(w.labels)
    return {
        "kind": names.SHARD_MANIFEST_KIND, "version": __version__, "algorithm": meta.algorithm,
        "fingerprint": meta.fingerprint,
        "params": params, "inputs": inputs, "dataset": meta.dataset, "num_shards": n, "micro_batch_size": m,
        "rows_per_shard": plan.rows_per_shard, "steps": plan.steps, "global_batch_rows": n * m,
        "selected_rows": int(sel.ids.size), "sharded_rows": int(plan.rows.size),
        "exact_duplicates": sel.meta.params.get("exact_duplicates"),
        "selection": {k: sel.meta.params.get(k) for k in ("mode", "value", "selected", "fraction_selected", "k",
                                                           "within", "seed")},  # how the rows were chosen
        "wrapped_rows": int(plan.wrapped.sum()), "leftover_rows": len(leftover_ids), "leftover_ids": leftover_ids,
        "leftover_file": names.LEFTOVER, "renamed_source_columns": renamed, "columns": columns,
        **({"json_columns": list(json_columns)} if json_columns else {}),
        "files": [{"file": name, "rows": plan.rows_per_shard, "bytes": p.stat().st_size,
                   "sha256": file_sha256(p)} for name, p in files],
        "clusters": [{"cluster": int(c), "selected": int(s), "in_data": None if nc is None else int(nc),
                      "weight": float(wc)} for c, s, nc, wc in zip(w.labels, w.selected, in_data, w.per_cluster)],
        "cluster_sizes_source": w.sizes_source,
        "tokens": {"source": params["token_source"], "total": int(tokens.sum()), "mean": float(tokens.mean())},
        "balance": figures,
        **_sources(meta.dataset, sel, plan, tokens),
    }


def _sources(dataset: dict, sel, plan, tokens) -> dict:
    """A mixture's accounting per input: selected rows and tokens, and how many of them the shards hold."""
    from cluster_curate.budget_sequence import source_accounting
    from cluster_curate.io.mixture import is_mixture_record
    if not is_mixture_record(dataset):
        return {}
    inputs = dataset["inputs"]
    first = np.array([i["first_id"] for i in inputs], dtype=np.int64)
    source = np.searchsorted(first, sel.ids, side="right") - 1
    sharded = np.zeros(sel.ids.shape[0], dtype=bool)
    sharded[np.unique(plan.rows)] = True
    rows = source_accounting([i["name"] for i in inputs], source, tokens, sharded)
    # what is trained on, repeats (--remainder wrap) included: the shares the selection's floors and caps bound
    held = plan.rows.reshape(-1)
    held_rows = np.bincount(source[held], minlength=len(inputs))
    held_tokens = np.bincount(source[held], weights=np.asarray(tokens, np.float64)[held], minlength=len(inputs))
    # share_of_selection is of rows; a token budget's floors and caps are shares of tokens: both, beside each other
    return {"sources": [{"source": r["source"], "selected_rows": r["rows"], "selected_tokens": r["tokens"],
                         "share_of_selection": r["share_rows"], "token_share_of_selection": r["share_tokens"],
                         "sharded_rows": r["selected"], "sharded_tokens": r["selected_tokens"],
                         "left_over_rows": r["rows"] - r["selected"],
                         "share_of_shards": round(held_rows[i] / max(held_rows.sum(), 1), 4),
                         "token_share_of_shards": round(held_tokens[i] / max(held_tokens.sum(), 1), 4)}
                        for i, r in enumerate(rows)]}
