"""`report`: what an artifact (or a whole pipeline directory) holds, as tables and PNG plots.

Tables come from the artifacts' metadata and small columns; plots (PLOTS) are drawn with matplotlib (Agg).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from cluster_curate.console import Shown, min_median_max
from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import ArtifactMeta, artifact_schema, read_artifact, read_meta
from cluster_curate.io.names import MANIFEST, PIPELINE_NAMES, part_pattern
from cluster_curate.loader import read_manifest
from cluster_curate.options import Argument, CommandSpec, Option, resolve, seed_type
MAX_PCA_POINTS = 20000
# each plot's file and what it shows (the summary's `plots` table says it beside the name)
PLOTS = {
    "cluster_sizes.png": "how much of each cluster and group was kept (bars labelled with cluster ids, grouped)",
    "features_pca.png": "where the selection sits in a 2-D PCA of the features; rows coloured by group",
    "rank_loads.png": "how even the ranks are: per-step spread of their token loads, plan vs random",
    "source_shares.png": "a mixture's inputs: their shares of rows and tokens before and after selection",
}


def find_artifacts(paths: list[str]) -> tuple[dict[str, Path], list[str]]:
    """Map each given path to its kind: an artifact, a shard directory, or a pipeline directory (all inside), and
    those of their lineage; with a line for each recorded upstream artifact that could not be reached."""
    found: dict[str, Path] = {}
    unreached: list[str] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise CurateError(f"{p}: no such file or directory")
        if p.is_dir() and (p / MANIFEST).is_file():
            found["shards"] = p
        elif p.is_dir() and not list(p.glob(part_pattern())):  # a pipeline directory (`run --out`)
            inside = {k: p / name for k, name in PIPELINE_NAMES.items() if (p / name).exists()}
            if not inside:
                raise CurateError(f"{p}: holds no cluster-curate artifacts ({', '.join(PIPELINE_NAMES.values())})")
            for kind, q in inside.items():
                found.setdefault(kind, q)
        elif read_meta(p).kind == "shard":  # one rank's rows (or an export's): reported as its whole directory
            if not (p.parent / MANIFEST).is_file():
                raise CurateError(f"{p}: one shard's rows, with no {MANIFEST} beside it (a trainer export's data?); "
                                  "report the shard directory they were written in")
            found["shards"] = p.parent
        else:
            meta = read_meta(p)
            if meta.kind in found:
                raise CurateError(f"{p}: two '{meta.kind}' artifacts given ({found[meta.kind]} and {p})")
            found[meta.kind] = p
    # follow the lineage recorded in metadata for what was not given
    from cluster_curate.io.lineage import recorded_input, upstream
    for kind, name in (("shards", "selection"), ("selection", "clusters"), ("clusters", "embeddings")):
        if kind in found and name not in found:
            meta = read_manifest(found[kind]) if kind == "shards" else read_meta(found[kind])
            path, why = upstream(found[kind], meta, name)
            if path is not None:
                found[name] = Path(path)
            elif recorded_input(meta, name).get("path"):  # moved, copied or changed since: said, not left out
                unreached.append(f"{found[kind]}: its {name} artifact is not reported ({why}); pass it to report "
                                 "beside it")
    return found, unreached


# (downstream, the input it records, upstream): the pairs of artifacts that must belong together
_LINKS = (("shards", "selection", "selection"), ("selection", "clusters", "clusters"),
          ("clusters", "embeddings", "embeddings"))


def check_lineage(found: dict[str, Path], force: bool = False) -> None:
    """The artifacts of one report must be one pipeline (issue 20 #6): each given downstream artifact records
    the fingerprint of the upstream one given beside it, and all come from one dataset. --force draws anyway."""
    if force:
        return
    from cluster_curate.io.lineage import recorded_input
    metas = {kind: (read_manifest(p) if kind == "shards" else read_meta(p)) for kind, p in found.items()}

    def fingerprint(kind):
        m = metas[kind]
        return m.get("fingerprint") if isinstance(m, dict) else m.fingerprint

    for down, name, up in _LINKS:
        if down in found and up in found:
            rec = recorded_input(metas[down], name)
            if rec.get("fingerprint") and rec["fingerprint"] != fingerprint(up):
                raise CurateError(f"{found[down]}: was made from another {up} artifact than {found[up]} (recorded "
                                  f"fingerprint {rec['fingerprint']}, given {fingerprint(up)}); pass --force to "
                                  "report them together anyway")
    datasets = {kind: (m.get("dataset") if isinstance(m, dict) else m.dataset) or {} for kind, m in metas.items()}
    prints = {kind: d.get("fingerprint") for kind, d in datasets.items() if d.get("fingerprint")}
    kinds = list(prints)
    for b in kinds[1:]:
        a = kinds[0]
        if prints[b] != prints[a]:
            raise CurateError(f"{found[b]}: comes from a different dataset ({datasets[b].get('source')}, fingerprint "
                              f"{prints[b]}) than {found[a]} ({datasets[a].get('source')}, {prints[a]}); pass --force "
                              "to report them together anyway")


# -------------------------------------------------------------------------------------------- tables

def _meta_rows(path: Path, meta: ArtifactMeta) -> dict:
    return {"path": str(path), "kind": meta.kind, "rows": meta.rows, "version": meta.version,
            "dataset": Shown({"source": meta.dataset.get("source"), "fingerprint": meta.dataset.get("fingerprint")},
                             f"{meta.dataset.get('source')} ({meta.dataset.get('fingerprint')})"),
            "fingerprint": meta.fingerprint}


def _target_section(meta: ArtifactMeta) -> tuple[str, dict, list[dict]]:
    """How a targeted selection (`select --target`) serves each target row, and the clusters it pulled from."""
    from cluster_curate.commands.select import target_summary
    from cluster_curate.commands.select_parts import target_copies_line
    service = meta.params["target_service"]
    data = target_summary(service, meta.inputs.get("target", {}).get("path"))
    data["far_threshold"] = Shown(service["far_threshold"], label="far threshold (cosine)")
    if meta.params.get("target_copies"):  # a selection made before the check has none
        data["target_copies"] = target_copies_line(meta.params["target_copies"], meta.params.get("decontaminated"))
    rows = [{"target_id": r["target_id"], "selected_nearest_to_it": r["selected_nearest_to_it"],
             "nearest_pool_cosine": r["nearest_pool_cosine"], "far": Shown(bool(r["far"]), "yes" if r["far"] else ""),
             "cluster": r["cluster"], "nearest_selected_ids": Shown(list(r["nearest_selected"]),
                                                                    " ".join(map(str, r["nearest_selected"]))),
             "their_cosines": Shown(list(r["nearest_selected_cosine"]),
                                    " ".join(f"{v:.3f}" for v in r["nearest_selected_cosine"]))}
            for r in service["per_target"]]
    return "target", data, rows


def describe(found: dict[str, Path]) -> list[tuple[str, dict, list[dict] | None]]:
    """(title, key/values, optional table rows) for each artifact, in pipeline order; the keys are snake_case
    (the --json keys), a Shown value says how the table shows it."""
    sections = []
    for kind, describe_kind in (("embeddings", _describe_embeddings), ("clusters", _describe_clusters),
                                ("selection", _describe_selection), ("shards", _describe_shards)):
        if kind in found:
            describe_kind(found[kind], sections)
    return sections


def _describe_embeddings(path: Path, sections: list) -> None:
    meta = read_meta(path)
    table, _ = read_artifact(path, columns=[c for c in ("n_tokens", "n_response_tokens", "loss")
                                            if c in artifact_schema(path).names])
    data = _meta_rows(path, meta)
    from cluster_curate.io.readers import embeddings_incomplete
    inc = embeddings_incomplete(path)
    if inc is not None:  # cluster refuses it: its figures are those of the parts written
        data["incomplete"] = f"{inc['parts']} of {inc['of']} parts written"
        from cluster_curate import console
        console.warn(f"{path}: incomplete: {inc['parts']} of {inc['of']} parts written "
                     f"({', '.join(inc['missing_parts'][:3])}{', ...' if len(inc['missing_parts']) > 3 else ''} "
                     "missing); this report describes the rows embedded so far")
    p = meta.params
    if inc is None:  # where the data's rows went, as embed's summary says it
        data.update(_embedded_rows(path, meta))
    data.update({k: p[k] for k in ("features", "dims", "dim_total", "seed") if k in p})
    model, sem = p.get("model"), p.get("semantic")
    if "max_length" in p:
        data["max_length"] = _max_length_line(p)
    data["model"] = Shown(model, model or "none (no model feature)")  # the text feature has no model
    if sem:
        data["encoder"] = Shown(sem, f"{sem.get('encoder')} ({sem.get('pooling')} pooling, at most "
                                     f"{sem.get('max_length')} tokens, {sem.get('dim')} dims)")
    for col in table.column_names:
        counts = pa.types.is_integer(table.schema.field(col).type)  # token counts: whole numbers, as inspect's
        v = table.column(col).to_numpy(zero_copy_only=False).astype(float)
        v = v[np.isfinite(v)]
        if v.size:
            stats = {"mean": v.mean(), "p50": np.median(v), "p95": np.percentile(v, 95), "max": v.max()}
            stats = {k: int(round(float(x))) if counts and k != "mean" else round(float(x), 4)
                     for k, x in stats.items()}
            data[col] = Shown(stats, ", ".join(f"{k} {x:,}" if isinstance(x, int) else f"{k} {x:,.1f}"
                                               for k, x in stats.items()), col)
    sections.append(("embeddings", data, None))


def _max_length_line(p: dict) -> Shown:
    """The length texts were cut to: --max-length for a model's features (at most the model's position limit); for
    semantic alone the encoder's (its own limit, which --max-length only lowers: the default 1,024 is the model
    features'); else none. The rows the encoder cut are counted in embed's summary, not in the artifact."""
    given, sem = p["max_length"], p.get("semantic")
    if p.get("model"):
        said = [f"the model's position limit: {p['model_max_length']:,}"] if "model_max_length" in p else []
        if sem and sem["max_length"] < given:  # the encoder beside the model reads less
            said.append(f"the encoder reads at most {sem['max_length']:,}")
        return Shown(given, f"{given:,}" + (f" ({'; '.join(said)})" if said else ""))
    if sem:
        cut, own = sem["max_length"], sem.get("model_max_length", sem["max_length"])
        if cut < own:
            return Shown(cut, f"{cut:,} (--max-length; the encoder's own limit: {own:,})")
        from cluster_curate.commands.embed_parts import above_encoder_limit
        return Shown(cut, f"{cut:,} (the encoder's own limit{above_encoder_limit(given, sem)})")
    return Shown(given, f"{given:,} (not used: no model or encoder)")


def _embedded_rows(path: Path, meta: ArtifactMeta) -> dict:
    """The data's rows not embedded, under embed's --json keys and its summary's labels: the exact duplicates left
    out (the metadata), the bad rows and those with nothing to embed (the rejects list embed wrote beside the
    artifact, or in its directory one per part). Where that list is gone or does not add up, one count of both."""
    import json

    from cluster_curate.commands.embed import copies_line, rows_left_lines
    from cluster_curate.io import names
    from cluster_curate.io.artifacts import sidecar_path
    in_data = meta.dataset.get("rows")
    dropped = (meta.params.get("exact_duplicates") or {}).get("dropped")
    if in_data is None or dropped is None:  # an artifact made before embed recorded them
        return {}
    lists = sorted(path.glob(names.PART_REJECTS_PATTERN)) if path.is_dir() else [sidecar_path(path, names.REJECTS)]
    lists = [q for q in lists if q.is_file()]
    kinds = [json.loads(row).get("kind") for q in lists for row in q.read_text().splitlines() if row.strip()]
    bad, skipped = kinds.count("bad row"), kinds.count("nothing to embed")
    out = {"rows_in_data": Shown(in_data, f"{in_data:,}", "rows in the data")}
    missing = in_data - meta.rows - dropped
    if bad + skipped == missing:
        rejects = (str(lists[0]) if len(lists) == 1 else str(path)) if lists else None
        return out | rows_left_lines(bad, skipped, rejects, dropped, parts=len(lists) > 1)
    out["rows_not_embedded"] = Shown(missing, f"{missing:,} (bad rows or nothing to embed; no rejects list beside "
                                              "the artifact says which)", "not embedded")
    return out | {"exact_duplicates_dropped": copies_line(dropped)}


def _describe_clusters(path: Path, sections: list) -> None:
    from cluster_curate import clustering as C
    meta = read_meta(path)
    sizes = np.asarray(meta.params.get("sizes") or _cluster_sizes(path))
    data = _meta_rows(path, meta)
    split = meta.params.get("split_mixed")
    data.update({"k": meta.params.get("k"), "k_rule": meta.params.get("k_rule"),
                 "mixed_clusters_cut": Shown(split["cuts"] if split else 0,
                                             f"{split['cuts']} (k-means k = {split['k_means']})" if split
                                             else "no"),
                 "cluster_size": min_median_max(sizes, "sizes min / median / max"),
                 # cluster's rule and label: over the clusters holding rows, the empty ones a line of their own
                 "max_over_min_size": Shown(round(C.size_ratio(sizes), 2), label=C.SIZE_RATIO_LABEL),
                 "empty_clusters": int((sizes == 0).sum()),
                 "objective": meta.params.get("objective"),
                 "moved_by_the_cap": Shown(meta.params.get("moved"), label="moved by the size cap")})
    groups = meta.params.get("groups")
    if groups:  # as cluster's summary says them: a group of empty clusters alone holds no row
        n, holding = len(set(groups)), C.groups_holding_rows(groups, sizes)
        data["groups"] = Shown(n, f"{n:,}" + (f" ({holding:,} holding rows)" if holding < n else ""))
    sections.append(("clusters", data, None))


def _describe_selection(path: Path, sections: list) -> None:
    from cluster_curate.commands import select_parts as P
    from cluster_curate.commands.embed import copies_line
    meta = read_meta(path)
    p = meta.params
    data = _meta_rows(path, meta)
    sizes = np.asarray(p.get("cluster_sizes") or [], dtype=np.int64)
    kept, decontaminated = p.get("fraction_selected"), p.get("decontaminated")
    # select's lines, from what it recorded; `clusters` (every cluster, empty ones too) kept for one release
    data.update({"budget": Shown({"mode": p.get("mode"), "value": p.get("value"), "rows": p.get("requested")},
                                 f"--{p.get('mode')} {p.get('value')}"),
                 "selected": p.get("selected"), "kept": P.kept_line(kept, decontaminated),
                 "exact_duplicates_left_out": copies_line((p.get("exact_duplicates") or {}).get("dropped")),
                 **P.within_lines(p.get("within"), p.get("within_auto")),
                 "clusters_covered": P.covered_line(p.get("clusters_covered"), int((sizes > 0).sum()), len(sizes))})
    if p.get("mode") == "per-cluster-ratio" and sizes.size:
        data["rule"] = P.ratio_rule(p["value"], p.get("available_sizes") or sizes, p["quotas"], kept, decontaminated)
    if p.get("dedup") is not None:
        data["near_duplicates_dropped"] = P.near_duplicates_line(p.get("dedup_dropped"), p["dedup"], p.get("dedup_ids"))
    rows = None
    if p.get("cluster_sizes") and p.get("quotas"):  # every cluster (--json); render shows the ends of the table
        from cluster_curate.selection import cluster_rows
        available = p.get("available_sizes") if p.get("dedup_dropped") else None  # select's `after_dedup` column
        rows = [dict(r, kept=Shown(r["kept"], "-" if r["kept"] is None else f"{r['kept']:.1%}"))
                for r in cluster_rows(p["cluster_sizes"], p["quotas"], available)]
    if p.get("tokens"):
        t = p["tokens"]
        data["tokens_selected"] = Shown({"selected": t["selected"], "total": t["total"],
                                         "counted_by": t["counted_by"]},
                                        f"{t['selected']:,} of {t['total']:,} (counted by {t['counted_by']})")
    data.update(P.decontaminated_lines(decontaminated))
    data.update(P.notes_lines(p.get("notes") or []))
    sections.append(("selection", data, rows))
    if p.get("target_service"):
        sections.append(_target_section(meta))
    if p.get("sources"):  # a mixture: rows and tokens of each input, in the data and in the selection
        bounded = any(r.get("bounds") for r in p["sources"])
        sections.append(("sources", {"inputs": len(p["sources"])}, [_source_row(r, bounded) for r in p["sources"]]))


# A mixture's per-input columns (budget_sequence.source_accounting; the metadata keeps them sorted by name): the
# input, then what the data holds, then what the selection took, then the fraction of the input it kept.
_SOURCE_COLUMNS = ("source", "rows", "tokens", "share_rows", "share_tokens", "selected", "selected_tokens",
                   "selected_share_rows", "selected_share_tokens", "kept_rows", "kept_tokens")


def _source_row(row: dict, bounded: bool = False) -> dict:
    """The input's columns, with its floor and cap (a column where any input has one: `bounded`) and its share of
    the budget they bound, said as select's summary says them."""
    from cluster_curate.commands.select_parts import bounds_text
    shown = {**{k: row[k] for k in _SOURCE_COLUMNS if k in row}, **row}
    if row.get("share_of_budget"):
        b = row["share_of_budget"]
        shown["share_of_budget"] = Shown(b, f"{b['share']:.1%} of {b['budget']:,} {b['unit']}")
    if bounded:
        shown["bounds"] = Shown(row.get("bounds") or [], bounds_text(row.get("bounds") or []) or "-")
    return shown


def _describe_shards(path: Path, sections: list) -> None:
    m = read_manifest(path)
    b = m.get("balance", {})
    data = {"path": str(path), "shards": m.get("num_shards"),
            "micro_batch_size": Shown(m.get("micro_batch_size"), label="micro batch"),
            "rows_per_shard": m.get("rows_per_shard"), "steps": m.get("steps"),
            "allocation": m.get("params", {}).get("allocation"), "leftover_rows": m.get("leftover_rows"),
            "wrapped_rows": m.get("wrapped_rows"), "token_source": m.get("tokens", {}).get("source")}
    for key in ("token_imbalance", "padded_imbalance", "cluster_spread", "rank_mix_tv", "input_mix"):
        if key in b:
            stats = {k: v for k, v in b[key].items() if isinstance(v, (int, float))}
            data[key] = Shown(stats, ", ".join(f"{k} {v:.4g}" for k, v in stats.items()))
    sections.append(("shards", data, m.get("sources")))


def _cluster_sizes(path: Path) -> np.ndarray:
    table, _ = read_artifact(path, columns=["cluster"])
    return np.bincount(table.column("cluster").to_numpy())


# --------------------------------------------------------------------------------------------- plots
# The drawing is in report_plots.py; this reads the artifacts and calls it.

def make_plots(found: dict[str, Path], out_dir: Path, seed: int = 0) -> list[Path]:
    """Draw every plot the given artifacts allow; returns the files written."""
    import pyarrow.parquet as pq

    from cluster_curate.commands.report_plots import (plot_cluster_sizes, plot_features_pca, plot_rank_loads,
                                                      plot_source_shares, rank_loads)

    written = []
    sel_ids = sel_table = None
    if "selection" in found:
        sel_table, sel_meta = read_artifact(found["selection"])
        sel_ids = sel_table.column("id").to_numpy()
        if sel_meta.params.get("sources"):  # a mixture: each input's share before and after
            written.append(plot_source_shares(sel_meta.params["sources"], out_dir / "source_shares.png"))
    if "clusters" in found:
        ctable, cmeta = read_artifact(found["clusters"], columns=["id", "cluster"])
        labels = ctable.column("cluster").to_numpy()
        k = int(cmeta.params.get("k") or labels.max() + 1)
        sizes = np.bincount(labels, minlength=k)
        selected = None
        if sel_table is not None:
            selected = np.bincount(sel_table.column("cluster").to_numpy(), minlength=k)
        groups = cmeta.params.get("groups")
        groups = None if groups is None else np.asarray(groups, dtype=np.int64)
        written.append(plot_cluster_sizes(sizes, selected, out_dir / "cluster_sizes.png", groups))
        if "embeddings" in found:
            from cluster_curate.io.readers import read_embeddings
            e_ids, x, _ = read_embeddings(found["embeddings"], force=True)  # a view: an incomplete one warns
            ids = ctable.column("id").to_numpy()
            pos = np.searchsorted(e_ids, ids)
            rng = np.random.default_rng(seed)
            show = np.sort(rng.choice(len(ids), MAX_PCA_POINTS, replace=False)) if len(ids) > MAX_PCA_POINTS \
                else np.arange(len(ids))
            mask = np.isin(ids[show], sel_ids) if sel_ids is not None else None
            written.append(plot_features_pca(x[pos[show]], labels[show], mask, out_dir / "features_pca.png", groups))
    if "shards" in found:
        from cluster_curate import sharding
        m = read_manifest(found["shards"])
        n, mb = m["num_shards"], m["micro_batch_size"]
        tokens_of = _token_lookup(sel_table)
        if tokens_of is not None:
            step_l, rank_l, tok_l = [], [], []
            from cluster_curate.loader import shard_files
            # each file the one shard wrote (else one line naming it, as export and verify say): a file gone was an
            # internal error, one changed since was drawn as the plan
            for rank, path in enumerate(shard_files(found["shards"], check_content=True)):
                t = pq.read_table(path, columns=["id", "step"])
                step_l.append(t.column("step").to_numpy())
                rank_l.append(np.full(t.num_rows, rank))
                tok_l.append(tokens_of(t.column("id").to_numpy()))
            planned = rank_loads(np.concatenate(step_l), np.concatenate(rank_l), np.concatenate(tok_l), m["steps"], n)
            clusters = sel_table.column("cluster").to_numpy()
            plan = sharding.random_allocation(clusters, n, mb, remainder=m["params"].get("remainder", "drop"),
                                              seed=seed)
            sel_tokens = tokens_of(sel_ids)
            random = sel_tokens[plan.rows].sum(-1)
            written.append(plot_rank_loads(planned, random, out_dir / "rank_loads.png"))
    return written


def _only_plots(folder: Path) -> bool:
    """Whether `folder` holds report's plots alone: an earlier report's, replaced whole by the new one."""
    return all(p.name in PLOTS for p in folder.iterdir())


class _NothingDrawn(Exception):
    """No plot for the artifacts given: the staged folder is dropped, not swapped in."""


def _draw_into(out: Path, found: dict[str, Path], seed: int) -> list[Path]:
    """The plots drawn into `out` all at once: staged beside it and swapped in (into a folder of the user's:
    renamed in once all are written), so that a plot the system refuses to write (a full disk, a file-size limit)
    leaves the earlier report's plots, none of them replaced, and a kill leaves them whole (io/writer.py)."""
    from cluster_curate.io.writer import staged_directory
    created = [d for d in (out, *out.parents) if not d.exists()]  # what the swap makes, deepest first
    try:
        with staged_directory(out, _only_plots, into_others=True) as work:
            drawn = make_plots(found, work, seed)
            if not drawn:  # nothing swapped in: an earlier report's plots stay (the warning: nothing written)
                raise _NothingDrawn
    except _NothingDrawn:
        for d in created:
            if d.is_dir():
                d.rmdir()  # no folder left behind for nothing
        return []
    for name in set(PLOTS) - {p.name for p in drawn}:  # an earlier report's, in a folder holding the user's files
        (out / name).unlink(missing_ok=True)
    return [out / p.name for p in drawn]


def _token_lookup(sel_table):
    """id -> token count, from the selection's n_tokens column (None when unavailable)."""
    if sel_table is None or "n_tokens" not in sel_table.column_names:
        return None
    ids = sel_table.column("id").to_numpy()
    tok = sel_table.column("n_tokens").to_numpy(zero_copy_only=False).astype(np.float64)
    order = np.argsort(ids)
    ids, tok = ids[order], tok[order]

    def lookup(q: np.ndarray) -> np.ndarray:
        return tok[np.searchsorted(ids, q)]

    return lookup


OPTIONS = (
    Option("out", path=True, flags=("--out", "-o"),
           help="Directory for the PNG plots (cluster sizes, features PCA, per-rank token loads)."),
    Option("seed", type=seed_type(), default=0, show_default=True,
           help="Seeds the random allocation drawn for comparison."),
    Option("force", is_flag=True, default=False,
           help="Report artifacts together even when their lineage says they do not belong together."),
)


def report(paths, out: str | None = None, **options) -> tuple[list, list[Path]]:
    """Tables (title, key/values, rows) of the given artifacts (one path, or a list) and those their lineage
    reaches, and the plots written into `out` (when given). Artifacts that do not belong together are refused
    unless `force`."""
    paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]  # not its letters
    o = resolve(OPTIONS, dict(options, out=out), "report")
    seed, force = o["seed"], o["force"]
    found, unreached = find_artifacts(paths)
    if not force:  # a `run` folder its stopped re-run left half made again (--force reports it as it is)
        from cluster_curate.io.artifacts import check_run_finished
        for p in found.values():
            check_run_finished(p)
    check_lineage(found, force)
    sections = describe(found)
    if out:
        from cluster_curate.io.artifacts import (check_creatable, check_not_input, check_not_inside_replaced,
                                                 output_inputs)
        inputs = output_inputs(paths, [str(p) for p in found.values()])
        check_not_input(out, inputs, f"--out {out}", holds=False)  # only its plots are written there
        check_not_inside_replaced(out, f"--out {out}")
        for plot in PLOTS:
            check_not_input(Path(out) / plot, inputs, f"--out {out}")
        check_creatable(Path(out) / "cluster_sizes.png")
    from cluster_curate import console
    for line in unreached:  # once the report is going ahead: a refusal stays its one line
        console.warn(line)
    plots = _draw_into(Path(out), found, seed) if out else []
    if out and not plots:
        console.warn(f"--out {out}: no plot for {', '.join(found)} alone (the plots are drawn from clusters, a "
                     "mixture's selection and shards with token counts); nothing written there")
    return sections, plots


def as_json(result) -> dict:
    """--json: one key per section (its key/values, and its table as `table`), `plots`, `output` the plot folder."""
    sections, plots = result
    out = {"output": str(plots[0].parent) if plots else None}
    for title, data, rows in sections:
        out[title] = dict(data, **({"table": rows} if rows is not None else {}))
    return out | {"plots": [str(p) for p in plots]}


def render(result, options: dict) -> None:
    from cluster_curate import console
    from cluster_curate.selection import condensed
    sections, plots = result
    for title, data, rows in sections:
        console.summary(title, data, rows and condensed(rows))  # a long table's first and last rows
    if plots:
        # each file named once, as it is on disk (the folder in the title), beside what it shows
        console.summary(f"plots → {plots[0].parent}", {p.name: Shown(PLOTS[p.name], label=p.name) for p in plots})


SPEC = CommandSpec(
    "report", report, (Argument("artifacts", nargs=-1),), OPTIONS, render, as_json=as_json,
    help="""Tables (and with --out, PNG plots) for artifacts or a whole `run` directory.

    \b
    Examples:
      cluster-curate report out/                       # every artifact of a pipeline directory
      cluster-curate report selection.parquet --out report/
    Upstream artifacts are found through the lineage in the metadata when they are still where they were.
    """)
