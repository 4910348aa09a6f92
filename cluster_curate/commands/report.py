"""`report`: what an artifact (or a whole pipeline directory) holds, as tables and PNG plots.

Tables come from the artifacts' metadata and small columns; plots are drawn with matplotlib (Agg):

    cluster_sizes.png   how much of each cluster and group was kept (bars labelled with cluster ids, grouped)
    features_pca.png    where the selection sits in a 2-D PCA of the features; rows coloured by group
    rank_loads.png      how even the ranks are: per-step spread of their token loads, plan vs random
    source_shares.png   a mixture's inputs: their shares of rows and tokens before and after selection
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cluster_curate.console import Shown
from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import ArtifactMeta, artifact_schema, read_artifact, read_meta
from cluster_curate.io.names import MANIFEST, PIPELINE_NAMES
from cluster_curate.options import Argument, CommandSpec, Option
MAX_PCA_POINTS = 20000


def find_artifacts(paths: list[str]) -> dict[str, Path]:
    """Map each given path to its kind: an artifact, a shard directory, or a pipeline directory (all inside)."""
    found: dict[str, Path] = {}
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise CurateError(f"{p}: no such file or directory")
        if p.is_dir() and (p / MANIFEST).is_file():
            found["shards"] = p
        elif p.is_dir() and not list(p.glob("part-*.parquet")):  # a pipeline directory (`run --out`)
            inside = {k: p / name for k, name in PIPELINE_NAMES.items() if (p / name).exists()}
            if not inside:
                raise CurateError(f"{p}: holds no cluster-curate artifacts ({', '.join(PIPELINE_NAMES.values())})")
            for kind, q in inside.items():
                found.setdefault(kind, q)
        else:
            meta = read_meta(p)
            if meta.kind in found:
                raise CurateError(f"{p}: two '{meta.kind}' artifacts given ({found[meta.kind]} and {p})")
            found[meta.kind] = p
    # follow the lineage recorded in metadata for what was not given
    from cluster_curate.io.lineage import upstream
    if "shards" in found and "selection" not in found:
        path, _ = upstream(found["shards"], _manifest(found["shards"]), "selection")
        if path is not None:
            found["selection"] = Path(path)
    for kind, name in (("selection", "clusters"), ("clusters", "embeddings")):
        if kind in found and name not in found:
            path, _ = upstream(found[kind], read_meta(found[kind]), name)
            if path is not None:
                found[name] = Path(path)
    return found


# (downstream, the input it records, upstream): the pairs of artifacts that must belong together
_LINKS = (("shards", "selection", "selection"), ("selection", "clusters", "clusters"),
          ("clusters", "embeddings", "embeddings"))


def check_lineage(found: dict[str, Path], force: bool = False) -> None:
    """The artifacts of one report must be one pipeline (issue 20 #6): each given downstream artifact records
    the fingerprint of the upstream one given beside it, and all come from one dataset. --force draws anyway."""
    if force:
        return
    metas = {kind: (_manifest(p) if kind == "shards" else read_meta(p)) for kind, p in found.items()}

    def fingerprint(kind):
        m = metas[kind]
        return m.get("fingerprint") if isinstance(m, dict) else m.fingerprint

    for down, name, up in _LINKS:
        if down in found and up in found:
            m = metas[down]
            rec = ((m.get("inputs") if isinstance(m, dict) else m.inputs) or {}).get(name) or {}
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


def _manifest(directory: Path) -> dict:
    from cluster_curate.loader import read_manifest
    return read_manifest(directory)


# -------------------------------------------------------------------------------------------- tables

def _meta_rows(path: Path, meta: ArtifactMeta) -> dict:
    return {"path": str(path), "kind": meta.kind, "rows": meta.rows, "version": meta.version,
            "dataset": Shown({"source": meta.dataset.get("source"), "fingerprint": meta.dataset.get("fingerprint")},
                             f"{meta.dataset.get('source')} ({meta.dataset.get('fingerprint')})"),
            "fingerprint": meta.fingerprint}


def _target_section(meta: ArtifactMeta) -> tuple[str, dict, list[dict]]:
    """How a targeted selection (`select --target`) serves each target row, and the clusters it pulled from."""
    from cluster_curate.commands.select import target_summary
    service = meta.params["target_service"]
    data = target_summary(service, meta.inputs.get("target", {}).get("path"))
    data["far_threshold"] = Shown(service["far_threshold"], label="far threshold (cosine)")
    rows = [{"target_id": r["target_id"], "selected_nearest_to_it": r["selected_nearest_to_it"],
             "nearest_pool_cosine": r["nearest_pool_cosine"], "far": Shown(bool(r["far"]), "yes" if r["far"] else ""),
             "cluster": r["cluster"], "nearest_selected_ids": Shown(list(r["nearest_selected"]),
                                                                    " ".join(map(str, r["nearest_selected"]))),
             "their_cosines": Shown(list(r["nearest_selected_cosine"]),
                                    " ".join(f"{v:.3f}" for v in r["nearest_selected_cosine"]))}
            for r in service["per_target"][:60]]
    return "target", data, rows


def describe(found: dict[str, Path]) -> list[tuple[str, dict, list[dict] | None]]:
    """(title, key/values, optional table rows) for each artifact, in pipeline order; the keys are snake_case
    (the --json keys), a Shown value says how the table shows it."""
    sections = []
    if "embeddings" in found:
        path = found["embeddings"]
        meta = read_meta(path)
        table, _ = read_artifact(path, columns=[c for c in ("n_tokens", "n_response_tokens", "loss")
                                                if c in artifact_schema(path).names])
        data = _meta_rows(path, meta)
        p = meta.params
        data.update({k: p[k] for k in ("features", "dims", "dim_total", "seed", "max_length") if k in p})
        model = p.get("model")
        data["model"] = Shown(model, model or "none (no model feature)")  # the text feature has no model
        for col in table.column_names:
            v = table.column(col).to_numpy(zero_copy_only=False).astype(float)
            v = v[np.isfinite(v)]
            if v.size:
                stats = {"mean": v.mean(), "p50": np.median(v), "p95": np.percentile(v, 95), "max": v.max()}
                data[col] = Shown({k: round(float(x), 4) for k, x in stats.items()},
                                  ", ".join(f"{k} {x:.1f}" for k, x in stats.items()), col)
        sections.append(("embeddings", data, None))
    if "clusters" in found:
        path = found["clusters"]
        meta = read_meta(path)
        sizes = np.asarray(meta.params.get("sizes") or _cluster_sizes(path))
        data = _meta_rows(path, meta)
        split = meta.params.get("split_mixed")
        data.update({"k": meta.params.get("k"), "k_rule": meta.params.get("k_rule"),
                     "mixed_clusters_cut": Shown(split["cuts"] if split else 0,
                                                 f"{split['cuts']} (k-means k = {split['k_means']})" if split
                                                 else "no"),
                     "cluster_size": Shown({"min": int(sizes.min()), "median": float(np.median(sizes)),
                                            "max": int(sizes.max())},
                                           f"{sizes.min()} / {np.median(sizes):g} / {sizes.max()}",
                                           "sizes min / median / max"),
                     "max_over_min_size": Shown(round(float(sizes.max() / max(sizes.min(), 1)), 2),
                                                label="largest ÷ smallest"),
                     "objective": meta.params.get("objective"),
                     "moved_by_the_cap": Shown(meta.params.get("moved"), label="moved by the size cap")})
        sections.append(("clusters", data, None))
    if "selection" in found:
        path = found["selection"]
        meta = read_meta(path)
        p = meta.params
        data = _meta_rows(path, meta)
        data.update({"budget": Shown({"mode": p.get("mode"), "value": p.get("value"), "rows": p.get("requested")},
                                     f"--{p.get('mode')} {p.get('value')}"),
                     "selected": p.get("selected"),
                     "kept": Shown(p.get("fraction_selected"), label="kept (fraction of the data)"),
                     "within": p.get("within"),
                     "clusters_covered": Shown({"covered": p.get("clusters_covered"),
                                                "clusters": len(p.get("cluster_sizes") or [])},
                                               f"{p.get('clusters_covered')} / {len(p.get('cluster_sizes') or [])}")})
        rows = None
        if p.get("cluster_sizes") and p.get("quotas"):
            sizes, quotas = np.asarray(p["cluster_sizes"]), np.asarray(p["quotas"])
            order = np.argsort(-sizes, kind="stable")
            rows = [{"cluster": int(c), "size": int(sizes[c]), "selected": int(quotas[c]),
                     "kept": Shown(round(float(quotas[c] / max(sizes[c], 1)), 4),
                                   f"{quotas[c] / max(sizes[c], 1):.1%}")} for c in order[:40]]
        if p.get("tokens"):
            t = p["tokens"]
            data["tokens_selected"] = Shown({"selected": t["selected"], "total": t["total"],
                                             "counted_by": t["counted_by"]},
                                            f"{t['selected']:,} of {t['total']:,} (counted by {t['counted_by']})")
        sections.append(("selection", data, rows))
        if p.get("target_service"):
            sections.append(_target_section(meta))
        if p.get("sources"):  # a mixture: rows and tokens of each input, in the data and in the selection
            sections.append(("sources", {"inputs": len(p["sources"])}, p["sources"]))
    if "shards" in found:
        m = _manifest(found["shards"])
        b = m.get("balance", {})
        data = {"path": str(found["shards"]), "shards": m.get("num_shards"),
                "micro_batch_size": Shown(m.get("micro_batch_size"), label="micro batch"),
                "rows_per_shard": m.get("rows_per_shard"), "steps": m.get("steps"),
                "allocation": m.get("params", {}).get("allocation"), "leftover_rows": m.get("leftover_rows"),
                "wrapped_rows": m.get("wrapped_rows"), "token_source": m.get("tokens", {}).get("source")}
        for key in ("token_imbalance", "padded_imbalance", "cluster_spread", "rank_mix_tv"):
            if key in b:
                stats = {k: v for k, v in b[key].items() if isinstance(v, (int, float))}
                data[key] = Shown(stats, ", ".join(f"{k} {v:.4g}" for k, v in stats.items()))
        sections.append(("shards", data, m.get("sources")))
    return sections


def _cluster_sizes(path: Path) -> np.ndarray:
    table, _ = read_artifact(path, columns=["cluster"])
    return np.bincount(table.column("cluster").to_numpy())


# --------------------------------------------------------------------------------------------- plots
# Each plot answers one question: how much of each cluster and group was kept, and why (cluster_sizes); how
# even the ranks are (rank_loads); where the selection sits in feature space (features_pca). The figure
# builders return the matplotlib figure so the tests can check what is drawn; plot_* save it as PNG.

QUALITATIVE = "tab20"   # categorical colours: clusters and groups are names, not quantities
MAX_COLOURS = 18        # the 18 largest categories get a colour of their own, the rest one grey "other"
MAX_TICK_LABELS = 128   # up to this many clusters every bar is labelled with its cluster id


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path) -> Path:
    fig.savefig(out, dpi=110)
    _pyplot().close(fig)
    return out


def cluster_order(sizes: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """Cluster ids in drawing order: by group (largest group first), then by size inside the group."""
    if groups is None:
        return np.argsort(-sizes, kind="stable")
    group_rows = np.bincount(groups, weights=sizes)
    return np.lexsort((-sizes, groups, -group_rows[groups]))  # the group id keeps two equal-size groups apart


def cluster_sizes_figure(sizes: np.ndarray, selected: np.ndarray | None, groups: np.ndarray | None = None):
    """Bars per cluster (labelled with the cluster id): rows in the data, rows selected; clusters of one group side
    by side on a shaded band. With groups, a second panel shows each group's rows, what it kept and the equal
    share of the budget per group: a cluster gets its group's quota split over the group's clusters, which is
    why two clusters of one size can keep 3 and 16 rows."""
    plt = _pyplot()
    sizes = np.asarray(sizes)
    k = len(sizes)
    groups = None if groups is None else np.asarray(groups, dtype=np.int64)
    order = cluster_order(sizes, groups)
    x = np.arange(k)
    width = max(7.0, min(24.0, 0.17 * k + 3))
    panels = 2 if groups is not None else 1
    fig, axes = plt.subplots(panels, 1, figsize=(width, 4.2 * panels), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2][:panels]})
    ax = axes[0, 0]
    ax.bar(x, sizes[order], color="#c6dbef", width=0.85, label="rows in the data")
    if selected is not None:
        ax.bar(x, np.asarray(selected)[order], color="#08519c", width=0.55, label="rows selected")
    if groups is not None:
        g_drawn = groups[order]
        starts = np.flatnonzero(np.r_[True, g_drawn[1:] != g_drawn[:-1]])
        ends = np.r_[starts[1:], k]
        for i, (lo, hi) in enumerate(zip(starts, ends)):
            if i % 2:
                ax.axvspan(lo - 0.5, hi - 0.5, color="#f0f0f0", zorder=0)
        top = ax.secondary_xaxis("top")  # the group of each band, named above it
        top.set_xticks((starts + ends - 1) / 2, [f"g{g}" for g in g_drawn[starts]],
                       fontsize=7 if len(starts) <= 40 else 5, rotation=0 if len(starts) <= 24 else 90)
        top.tick_params(length=0, colors="#555555")
    if sizes.max() > 20 * max(sizes.min(), 1):
        ax.set_yscale("log")
        ax.set_ylabel("rows (log scale)")
    else:
        ax.set_ylabel("rows")
    ax.set_xlim(-0.7, k - 0.3)
    if k <= MAX_TICK_LABELS:
        ax.set_xticks(x, [str(int(c)) for c in order], fontsize=7 if k <= 64 else 5, rotation=90)
        ax.set_xlabel("cluster id" + (" (by group, then size)" if groups is not None else " (by size)"))
    else:
        ax.set_xticks([])
        ax.set_xlabel(f"{k} clusters" + (", by group, then size" if groups is not None else ", by size")
                      + " (too many to label; see the report's table)")
    kept = "" if selected is None else f", {int(np.sum(selected))} selected ({np.sum(selected) / sizes.sum():.0%})"
    ax.set_title(f"How much of each cluster was kept: {k} clusters, {int(sizes.sum())} rows{kept}",
                 pad=18 if groups is not None else 6)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    if groups is not None:
        gx = axes[1, 0]
        n_groups = int(groups.max()) + 1
        g_rows = np.bincount(groups, weights=sizes, minlength=n_groups)
        g_order = np.argsort(-g_rows, kind="stable")
        g_clusters = np.bincount(groups, minlength=n_groups)
        xs = np.arange(n_groups)
        gx.bar(xs, g_rows[g_order], color="#c6dbef", width=0.85, label="rows in the data")
        if selected is not None:
            g_sel = np.bincount(groups, weights=selected, minlength=n_groups)
            gx.bar(xs, g_sel[g_order], color="#08519c", width=0.55, label="rows selected")
            gx.axhline(g_sel.sum() / n_groups, color="#cb181d", lw=1, ls="--",
                       label=f"equal share per group ({g_sel.sum() / n_groups:.0f})")
        if g_rows.max() > 20 * max(g_rows.min(), 1):
            gx.set_yscale("log")
        labels = [f"g{g}\n{g_clusters[g]} cl." for g in g_order] if n_groups <= 40 else [f"g{g}" for g in g_order]
        gx.set_xticks(xs, labels, fontsize=7 if n_groups <= 40 else 5, rotation=0 if n_groups <= 24 else 90)
        gx.set_xlim(-0.7, n_groups - 0.3)
        gx.set_ylabel("rows")
        gx.set_xlabel("group of clusters (largest first) and its number of clusters")
        gx.set_title("Quotas go to groups first, then to the clusters inside each group")
        gx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def plot_cluster_sizes(sizes: np.ndarray, selected: np.ndarray | None, out: Path,
                       groups: np.ndarray | None = None) -> Path:
    return _save(cluster_sizes_figure(sizes, selected, groups), out)


def plot_source_shares(accounting: list[dict], out: Path) -> Path:
    """Each input's share of the rows and tokens, in the data and in the selection (io/mixture.py
    source_accounting): one bar group per input."""
    plt = _pyplot()
    names = [r["source"] for r in accounting]
    series = [("rows, data", "share_rows", "#c6dbef"), ("rows, selected", "selected_share_rows", "#2171b5"),
              ("tokens, data", "share_tokens", "#fdd0a2"), ("tokens, selected", "selected_share_tokens", "#d94801")]
    series = [s for s in series if all(s[1] in r for r in accounting)]
    x = np.arange(len(names))
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(names) + 2), 4))
    for i, (label, key, color) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [r[key] for r in accounting], width, label=label,
               color=color)
    ax.set_xticks(x, names)
    ax.set_ylabel("share")
    ax.set_title("Source shares before and after selection")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def pca_2d(x: np.ndarray) -> np.ndarray:
    x = x - x.mean(0, keepdims=True)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return x @ vt[:2].T


def category_colours(labels: np.ndarray):
    """Qualitative colours for categorical labels: the MAX_COLOURS largest categories (by rows) one colour each
    from tab20 without its greys, every other category one grey. Returns (rgba per row, [(label or None for
    other, colour)])."""
    plt = _pyplot()
    labels = np.asarray(labels)
    values, counts = np.unique(labels, return_counts=True)
    ranked = values[np.argsort(-counts, kind="stable")]
    pairs = [c for c in plt.get_cmap(QUALITATIVE).colors if len(set(np.round(c, 3))) > 1]  # grey means "other"
    palette = pairs[0::2] + pairs[1::2]  # tab20's strong colours first, then their light partners
    shown = ranked if len(ranked) <= MAX_COLOURS + 1 else ranked[:MAX_COLOURS]
    other = np.array([0.6, 0.6, 0.6, 1.0])
    lookup = {int(v): np.array([*palette[i % len(palette)], 1.0]) for i, v in enumerate(shown)}
    rgba = np.array([lookup.get(int(v), other) for v in labels]) if len(labels) else np.zeros((0, 4))
    legend = [(int(v), lookup[int(v)]) for v in shown]
    if len(ranked) > len(shown):
        legend.append((None, other))
    return rgba, legend


def features_pca_figure(features: np.ndarray, clusters: np.ndarray, selected: np.ndarray | None,
                        groups: np.ndarray | None = None):
    """Left: every row in grey, the selected rows on top (where the selection sits). Right: rows coloured by
    group of clusters (or by cluster without groups) with qualitative colours, the largest ones named."""
    plt = _pyplot()
    xy = pca_2d(np.asarray(features, dtype=np.float64))
    clusters = np.asarray(clusters)
    k = int(clusters.max()) + 1
    by_group = groups is not None
    labels = np.asarray(groups)[clusters] if by_group else clusters
    what = "group" if by_group else "cluster"
    rgba, legend = category_colours(labels)
    size = 10 if len(xy) < 5000 else 3
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 6), sharex=True, sharey=True)
    left.scatter(xy[:, 0], xy[:, 1], c="#d0d0d0", s=size, linewidths=0, label="not selected")
    if selected is not None and selected.any():
        left.scatter(xy[selected, 0], xy[selected, 1], c="#08519c", s=size * 1.6, linewidths=0,
                     label=f"selected ({int(selected.sum())} of {len(xy)})")
    left.set_title("Where the selection sits")
    left.legend(loc="upper left", bbox_to_anchor=(0.0, -0.08), fontsize=8, frameon=False, ncol=2)
    right.scatter(xy[:, 0], xy[:, 1], c=rgba, s=size, alpha=0.7, linewidths=0)
    n_cat = len(np.unique(labels))
    right.set_title(f"Coloured by {what} ({n_cat} {what}s" + (f" of {k} clusters" if by_group else "")
                    + (f"; the {MAX_COLOURS} largest named, the rest grey)" if legend[-1][0] is None else ")"))
    handles = [plt.Line2D([], [], ls="", marker="o", color=c, markersize=6) for _, c in legend]
    names = [f"{what} {v}" if v is not None else f"other {what}s" for v, _ in legend]
    right.legend(handles, names, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    for ax in (left, right):
        ax.set_xlabel("PC 1")
    left.set_ylabel("PC 2")
    fig.suptitle(f"Features, PCA to 2-D: {len(clusters)} rows")
    fig.tight_layout()
    return fig


def plot_features_pca(features: np.ndarray, clusters: np.ndarray, selected: np.ndarray | None, out: Path,
                      groups: np.ndarray | None = None) -> Path:
    return _save(features_pca_figure(features, clusters, selected, groups), out)


def rank_loads(step_of_row: np.ndarray, rank_of_row: np.ndarray, tokens: np.ndarray, steps: int, ranks: int) -> np.ndarray:
    loads = np.zeros((steps, ranks))
    np.add.at(loads, (step_of_row, rank_of_row), tokens)
    return loads


def _imbalance(loads: np.ndarray) -> np.ndarray:
    """max ÷ mean token load of each step (1 = every rank equal)."""
    return loads.max(1) / np.maximum(loads.mean(1), 1e-9)


def rank_loads_figure(planned: np.ndarray, random: np.ndarray, max_steps: int = 120):
    """How even the ranks are. Top: per step, the spread of the ranks' token loads (lightest to heaviest rank,
    a band) for the shard plan and for a random allocation. Middle: max ÷ mean per step. Bottom: each rank's
    total tokens. Whatever the number of ranks, one band per allocation instead of one line per rank."""
    from matplotlib.ticker import MaxNLocator
    plt = _pyplot()
    steps, ranks = planned.shape
    shown = min(max_steps, steps)
    xs = np.arange(shown)
    colours = {"shard plan": "#08519c", "random allocation": "#cb181d"}
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), gridspec_kw={"height_ratios": [3, 2, 2]})
    band, ratio_ax, total_ax = axes
    for loads, name in ((random, "random allocation"), (planned, "shard plan")):
        part = loads[:shown]
        band.fill_between(xs, part.min(1), part.max(1), color=colours[name], alpha=0.25, step="mid", lw=0,
                          label=f"{name}: lightest to heaviest rank")
        band.plot(xs, part.mean(1), color=colours[name], lw=1, drawstyle="steps-mid", label=f"{name}: mean")
        ratio = _imbalance(loads)
        ratio_ax.plot(xs, ratio[:shown], color=colours[name], lw=1, drawstyle="steps-mid",
                      label=f"{name}: mean {ratio.mean():.3f}, max {ratio.max():.3f}")
    band.set_ylabel("tokens per rank")
    band.set_title(f"Token load per step across {ranks} ranks (the slowest rank sets the pace)")
    ratio_ax.axhline(1.0, color="grey", lw=0.6)
    ratio_ax.set_ylabel("max ÷ mean")
    ratio_ax.set_title("Token imbalance per step")
    for ax in (band, ratio_ax):
        ax.set_xlim(-0.5, shown - 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(f"step (first {shown} of {steps})" if shown < steps else "step")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    r = np.arange(ranks)
    w = 0.4
    for off, loads, name in ((-w / 2, planned, "shard plan"), (w / 2, random, "random allocation")):
        total = loads.sum(0)
        total_ax.bar(r + off, total, width=w, color=colours[name],
                     label=f"{name}: heaviest ÷ mean {total.max() / max(total.mean(), 1e-9):.4f}")
    total_ax.set_xticks(r, [str(i) for i in r])
    total_ax.set_xlabel("rank")
    total_ax.set_ylabel("tokens, all steps")
    total_ax.set_title("Total tokens of each rank")
    total_ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    lo = min(planned.sum(0).min(), random.sum(0).min())
    total_ax.set_ylim(bottom=max(0.0, lo * 0.9))
    fig.tight_layout()
    return fig


def plot_rank_loads(planned: np.ndarray, random: np.ndarray, out: Path, max_steps: int = 120) -> Path:
    """planned/random: [steps, ranks] token loads."""
    return _save(rank_loads_figure(planned, random, max_steps), out)


def make_plots(found: dict[str, Path], out_dir: Path, seed: int = 0) -> list[Path]:
    """Draw every plot the given artifacts allow; returns the files written."""
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
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
            e_ids, x, _ = read_embeddings(found["embeddings"])
            ids = ctable.column("id").to_numpy()
            pos = np.searchsorted(e_ids, ids)
            rng = np.random.default_rng(seed)
            show = np.sort(rng.choice(len(ids), MAX_PCA_POINTS, replace=False)) if len(ids) > MAX_PCA_POINTS \
                else np.arange(len(ids))
            mask = np.isin(ids[show], sel_ids) if sel_ids is not None else None
            written.append(plot_features_pca(x[pos[show]], labels[show], mask, out_dir / "features_pca.png", groups))
    if "shards" in found:
        from cluster_curate import sharding
        m = _manifest(found["shards"])
        n, mb = m["num_shards"], m["micro_batch_size"]
        tokens_of = _token_lookup(found, sel_table)
        if tokens_of is not None:
            step_l, rank_l, tok_l = [], [], []
            for f in m["files"]:
                rank = int(f["file"].split("-")[1])
                t = pq.read_table(found["shards"] / f["file"], columns=["id", "step"])
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


def _token_lookup(found: dict[str, Path], sel_table):
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
    Option("out", flags=("--out", "-o"), help="Directory for the PNG plots (cluster sizes, features PCA, per-rank "
           "token loads)."),
    Option("seed", type=int, default=0, show_default=True, help="Seeds the random allocation drawn for comparison."),
    Option("force", is_flag=True, default=False,
           help="Report artifacts together even when their lineage says they do not belong together."),
)


def report(paths: list[str], out: str | None = None, seed: int = 0, force: bool = False) -> tuple[list, list[Path]]:
    """Tables (title, key/values, rows) of the given artifacts and those their lineage reaches, and the plots
    written into `out` (when given). Artifacts that do not belong together are refused unless `force`."""
    found = find_artifacts(list(paths))
    check_lineage(found, force)
    sections = describe(found)
    if out:
        from cluster_curate.io.artifacts import check_creatable
        check_creatable(Path(out) / "cluster_sizes.png")
    plots = make_plots(found, Path(out), seed) if out else []
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
    sections, plots = result
    for title, data, rows in sections:
        console.summary(title, data, rows)
    if plots:
        console.summary("plots", {p.name: str(p) for p in plots})


SPEC = CommandSpec(
    "report", report, (Argument("artifacts", nargs=-1),), OPTIONS, render, as_json=as_json,
    help="""Tables (and with --out, PNG plots) for artifacts or a whole `run` directory.

    \b
    Examples:
      cluster-curate report out/                       # every artifact of a pipeline directory
      cluster-curate report selection.parquet --out report/
    Upstream artifacts are found through the lineage in the metadata when they are still where they were.
    """)
