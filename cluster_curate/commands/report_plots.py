"""`report`'s plots (matplotlib, Agg). Each answers one question: how much of each cluster and group was kept,
and why (cluster_sizes); how even the ranks are (rank_loads); where the selection sits in feature space
(features_pca); how the inputs of a mixture shared the rows and tokens (source_shares). The figure builders
return the matplotlib figure so the tests can check what is drawn; plot_* save it as PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np

QUALITATIVE = "tab20"   # categorical colours: clusters and groups are names, not quantities
MAX_COLOURS = 18        # the 18 largest categories get a colour of their own, the rest one grey "other"
MAX_TICK_LABELS = 128   # up to this many clusters every bar is labelled with its cluster id


def _pyplot():
    """Imported with matplotlib's warnings held back: the ones it gives while importing are about its config and
    cache folders (a read-only HOME on a CI runner: two WARNING lines, even under --quiet, each `report`), and it
    falls back to a temporary folder, which the plots do not depend on."""
    import logging
    log = logging.getLogger("matplotlib")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    finally:
        log.setLevel(level)
    return plt


def _save(fig, out: Path) -> Path:
    """Drawn in memory, then written atomically (io/writer.py): a plot killed mid-write is not left truncated."""
    import io

    from cluster_curate.io.writer import atomic_write_bytes
    png = io.BytesIO()
    fig.savefig(png, dpi=110, format="png")
    _pyplot().close(fig)
    atomic_write_bytes(out, png.getvalue())
    return out


def cluster_order(sizes: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """Cluster ids in drawing order: by group (largest group first), then by size inside the group."""
    if groups is None:
        return np.argsort(-sizes, kind="stable")
    group_rows = np.bincount(groups, weights=sizes)
    return np.lexsort((-sizes, groups, -group_rows[groups]))  # the group id keeps two equal-size groups apart


def cluster_sizes_figure(sizes: np.ndarray, selected: np.ndarray | None, groups: np.ndarray | None = None):
    """Bars per cluster (labelled with the cluster id): rows in the data, rows selected; clusters of one group side
    by side on a shaded band. With groups, a second panel shows each group's rows, what it kept and the mean
    kept per group: a cluster gets its group's quota split over the group's clusters, which is
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
    ax.set_title(f"How much of each cluster was kept\n{k} clusters, {int(sizes.sum())} rows{kept}",
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
            # the mean, not any group's quota: groups below it are taken whole, so the others keep more than it
            gx.axhline(g_sel.sum() / n_groups, color="#cb181d", lw=1, ls="--",
                       label=f"mean selected per group ({g_sel.sum() / n_groups:.0f})")
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
    """Each input's share of the rows and tokens, in the data and in the selection
    (budget_sequence.source_accounting): one bar group per input."""
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
