"""`select C --out S`: a balanced, budgeted subset of every cluster."""

from __future__ import annotations

import time

from cluster_curate.errors import CurateError
from cluster_curate.io import names
from cluster_curate.options import OUTPUT_OPTIONS, Argument, CommandSpec, Option, lazy, recorded, resolve


def _order_help() -> str:
    from cluster_curate.selection import WITHIN
    return "Order inside a cluster: " + WITHIN.help_text() + "."


def _int_min0():
    import click
    return click.IntRange(min=0)


OPTIONS = (
    Option("out", flags=("--out", "-o"), required=True, run=False, help="Selection artifact to write (.parquet)."),
    Option("fraction", type=float, help="Budget as a fraction of all rows, in (0, 1]."),
    Option("budget", type=int, help="Budget as a number of rows (met exactly)."),
    Option("per_cluster_ratio", type=float,
           help="The paper's rule: every cluster keeps floor(R × smallest cluster size) rows, R in (0, 1]."),
    Option("balance_power", type=float, default=0.0, show_default=True,
           help="Quota ∝ size^p under the cluster sizes: 0 = balanced (water-filling), 1 = proportional."),
    Option("within", record=True, default="random", choices=lazy("cluster_curate.selection", "WITHIN_ORDERS"),
           show_default=True, help=_order_help),
    Option("embeddings", run=False,
           help="Embeddings artifact (features for diverse / --dedup, loss for hard, n_tokens for shard). "
                "Default: the one the clusters were made from, when it is still there."),
    Option("dedup", record=True, type=float, metavar="COSINE",
           help="Drop a row whose cosine similarity to an already kept row of its cluster exceeds COSINE "
                "(before quotas are filled)."),
    Option("seed", record=True, type=_int_min0(), default=0, show_default=True, help="Seeds the random order."),
    *OUTPUT_OPTIONS,
)


def _embeddings(o: dict, clusters: str, cmeta):
    """The embeddings artifact to use: --embeddings, else the clusters' own (when unchanged)."""
    from cluster_curate import console
    from cluster_curate.io.artifacts import check_same_dataset, read_meta
    from cluster_curate.io.lineage import upstream
    if o["embeddings"] is not None:
        emeta = read_meta(o["embeddings"], None if o["force"] else names.EMBEDDINGS)
        check_same_dataset({clusters: cmeta, o["embeddings"]: emeta}, force=o["force"])
        return o["embeddings"], emeta, None
    path, found = upstream(clusters, cmeta, "embeddings")
    if path is None:
        return None, None, found
    console.info(f"using the clusters' embeddings {path}")
    return path, found, None


def _inputs(o: dict, clusters: str, c, needs: set):
    """Per-row inputs of the order and dedup, aligned with the clusters' ids."""
    import numpy as np

    from cluster_curate.clustering import normalise_features
    from cluster_curate.io.readers import read_embedding_columns, read_embeddings_for
    emb_path, emeta, why_not = _embeddings(o, clusters, c.meta)
    if emb_path is None and needs & {"features", "loss"}:
        from cluster_curate.selection import WITHIN
        order_needs = WITHIN.get(o["within"]).needs
        what = f"--within {o['within']}" if "features" in order_needs or o["dedup"] is None else "--dedup"
        said = "the feature vectors" if "features" in needs else "the `loss` column"
        raise CurateError(f"{what} needs {said} of the embeddings artifact: pass --embeddings E ({why_not})")
    if emb_path is None and why_not and "records no" not in why_not:  # recorded, but gone or changed: say so
        from cluster_curate import console
        console.warn(f"{clusters}: {why_not}; the selection gets no n_tokens (shard then counts words unless given "
                     "--embeddings or --tokenizer); pass --embeddings E")
    extra = read_embedding_columns(emb_path, ["n_tokens", "loss"], c.ids) if emb_path is not None else {}
    loss = extra.get("loss")
    if "loss" in needs:
        if loss is None:
            raise CurateError(f"{emb_path}: --within {o['within']} needs a 'loss' column, and this artifact has none")
        if np.isnan(loss).all():
            raise CurateError(f"{emb_path}: --within {o['within']} needs loss values, and its 'loss' column is all "
                              "null/NaN")
    features = None
    if "features" in needs:
        features = read_embeddings_for(emb_path, c.ids, force=o["force"], what=f" of {clusters}")
        normalise_features(features, center=c.meta.params.get("normalisation") == "center+l2")
    return dict(emb_path=emb_path, emeta=emeta, why_not=why_not, loss=loss, features=features,
                n_tokens=extra.get("n_tokens"))


def _check(o: dict):
    from cluster_curate import selection as S
    mode = S.check_budget_args(o["fraction"], o["budget"], o["per_cluster_ratio"])
    if o["dedup"] is not None and not 0 < o["dedup"] <= 1:
        raise CurateError(f"--dedup must be a cosine similarity in (0, 1], got {o['dedup']}")
    if not 0 <= o["balance_power"] <= 1:
        raise CurateError(f"--balance-power must be between 0 and 1, got {o['balance_power']}")
    return mode


def select(clusters: str, out: str, summary_limit: int | None = 32, **options) -> tuple[dict, list[dict]]:
    """Read a clusters artifact (and the embeddings when an order, dedup or n_tokens needs them), choose the
    rows, write the selection artifact. Returns the summary dict and the per-cluster table."""
    import pyarrow as pa

    from cluster_curate import console
    from cluster_curate import selection as S
    from cluster_curate.io.artifacts import check_writable, make_meta
    from cluster_curate.io.readers import read_clusters
    from cluster_curate.io.writer import write_artifact

    t0 = time.perf_counter()
    o = resolve(OPTIONS, dict(options, out=out), "select")
    mode = _check(o)
    order = S.WITHIN.get(o["within"])
    check_writable(out, o["overwrite"])
    c = read_clusters(clusters, force=o["force"],
                      need_similarity=f"--within {o['within']}" if "similarity" in order.needs else None)
    needs = set(order.needs) | ({"features"} if o["dedup"] is not None else set())
    x = _inputs(o, clusters, c, needs)
    sel = S.select_rows(c.labels, k=c.k, ids=c.ids, similarity=c.similarity, loss=x["loss"], features=x["features"],
                        fraction=o["fraction"], budget=o["budget"], per_cluster_ratio=o["per_cluster_ratio"],
                        balance_power=o["balance_power"], within=o["within"], dedup=o["dedup"], seed=o["seed"],
                        groups=c.groups)
    x["features"] = None
    for note in sel.notes:
        console.warn(note)
    columns = {"id": pa.array(c.ids[sel.rows], pa.int64()), "cluster": pa.array(sel.cluster, pa.int32()),
               "rank_in_cluster": pa.array(sel.rank_in_cluster, pa.int32())}
    if x["n_tokens"] is not None:
        picked = x["n_tokens"][sel.rows]
        columns["n_tokens"] = pa.array(picked, from_pandas=True) if picked.dtype.kind == "f" else pa.array(picked)
    params = _params(o, mode, sel, c)
    inputs = {"clusters": c.meta.as_input(clusters, out)}
    if x["emeta"] is not None:
        inputs["embeddings"] = x["emeta"].as_input(x["emb_path"], out)
    write_artifact(pa.table(columns), out, make_meta(names.SELECTION, params, inputs, c.meta.dataset,
                                                     S.ALGORITHM_VERSION),
                   overwrite=o["overwrite"])
    summary = _summary(o, mode, sel, c, x, out)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    return summary, S.selection_summary_rows(sel, limit=summary_limit)


def _params(o, mode, sel, c) -> dict:
    n, chosen = len(c.ids), len(sel.rows)
    return {
        "exact_duplicates": c.meta.params.get("exact_duplicates"),  # left out at embed
        **recorded(OPTIONS, o),
        "mode": mode, "value": o[mode.replace("-", "_")], "requested": sel.requested, "selected": chosen, "rows": n,
        "fraction_selected": chosen / n, "balance_power": o["balance_power"] if mode != "per-cluster-ratio" else None,
        "dedup_dropped": sel.dedup_dropped, "k": c.k,
        "cluster_sizes": sel.sizes.tolist(), "quotas": sel.quotas.tolist(),
        "available_sizes": sel.available.tolist() if o["dedup"] is not None else None,
        "quotas_over_groups": c.groups is not None and mode != "per-cluster-ratio",
        "clusters_covered": int((sel.quotas > 0).sum()), "notes": sel.notes,
    }


def _summary(o, mode, sel, c, x, out) -> dict:
    import numpy as np
    n, chosen = len(c.ids), len(sel.rows)
    value = o[mode.replace("-", "_")]
    nonempty, covered = int((sel.sizes > 0).sum()), int((sel.quotas > 0).sum())
    q = sel.quotas[sel.sizes > 0]
    summary = {
        "out": out, "rows": n, "clusters": c.k,
        "budget": f"--{mode} {value}" + (f" = {sel.requested} rows" if mode == "fraction" else ""),
        "selected": chosen, "fraction of the data": round(chosen / n, 4),
        "exact duplicates left out": (c.meta.params.get("exact_duplicates") or {}).get("dropped"),
        "clusters covered": f"{covered} / {nonempty} ({covered / max(nonempty, 1):.1%})",
        "per-cluster quota min / median / max": f"{int(q.min())} / {float(np.median(q)):g} / {int(q.max())}",
        "within": o["within"],
    }
    if mode == "per-cluster-ratio":
        m, r = int(sel.available[sel.available > 0].min()), o["per_cluster_ratio"]
        summary["rule"] = (f"floor({r} x smallest cluster {m}) = {int(q.max())} rows per cluster: "
                           f"{chosen / n:.1%} of the data (below {r:g}: clusters are larger than the smallest)")
    else:
        summary["balance power"] = o["balance_power"]
        if c.groups is not None:
            summary["quotas"] = f"over {max(c.groups) + 1} groups of clusters first, then the clusters inside each"
    if o["dedup"] is not None:
        summary["near-duplicates dropped"] = f"{sel.dedup_dropped} (cosine > {o['dedup']})"
    summary["n_tokens column"] = ("yes" if x["n_tokens"] is not None
                                  else f"no ({x['why_not'] or 'embeddings have no n_tokens'})")
    for i, note in enumerate(sel.notes):
        summary[f"note {i + 1}" if len(sel.notes) > 1 else "note"] = note
    return summary


def _summary_limit():
    """The CLI's table: every cluster in JSON, the smallest and largest 16 on a screen."""
    from cluster_curate import console
    return None if console.JSON_MODE else 32


def render(result, options: dict) -> None:
    from cluster_curate import console
    summary, rows = result
    console.summary(f"select → {summary['out']}", summary, rows)


SPEC = CommandSpec(
    "select", select, (Argument("clusters"),), OPTIONS, render,
    extra={"summary_limit": _summary_limit},
    algorithm=lazy("cluster_curate.selection", "ALGORITHM_VERSION"),
    help="""A balanced, budgeted subset of every cluster: --fraction F | --budget N | --per-cluster-ratio R.

    \b
    Quotas by water-filling: small clusters are taken whole, the rest of the budget is spread evenly.
    Writes `id`, `cluster`, `rank_in_cluster` (+ `n_tokens` when the embeddings are reachable).
    Examples:
      cluster-curate select clusters.parquet --out sel.parquet --fraction 0.31
      cluster-curate select clusters.parquet --out sel.parquet --per-cluster-ratio 0.5 --within far   # the paper
      cluster-curate select clusters.parquet --out sel.parquet --budget 20000 --dedup 0.95 --embeddings emb.parquet
    """)
