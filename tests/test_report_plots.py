"""The report's plots (issue 20 #16) at the sizes where they used to fail: 64 and 87 clusters, 8 ranks.
Each figure is checked for what it must show, on the matplotlib objects that draw it."""

from __future__ import annotations

import numpy as np
import pytest

from cluster_curate.commands import report_plots as R


def _clusters(k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 90, k)
    groups = rng.integers(0, 9, k)
    selected = np.minimum(sizes, rng.integers(2, 20, k))
    return sizes, selected, groups


@pytest.mark.parametrize("with_groups", [True, False])
def test_cluster_sizes_bars_are_labelled_with_cluster_ids_at_64_clusters(with_groups):
    sizes, selected, groups = _clusters(64)
    fig = R.cluster_sizes_figure(sizes, selected, groups if with_groups else None)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    order = R.cluster_order(sizes, groups if with_groups else None)
    assert labels == [str(c) for c in order] and sorted(map(int, labels)) == list(range(64))
    bars = ax.containers[0]  # rows in the data, in the drawn order: the bar labelled c is cluster c
    assert [int(b.get_height()) for b in bars] == [int(sizes[int(c)]) for c in labels]
    assert [int(b.get_height()) for b in ax.containers[1]] == [int(selected[int(c)]) for c in labels]
    if with_groups:
        drawn = groups[order]
        assert all(np.diff(np.flatnonzero(np.r_[True, drawn[1:] != drawn[:-1]])) > 0)  # each group contiguous
        assert len(np.unique(drawn)) == len(np.flatnonzero(np.r_[True, drawn[1:] != drawn[:-1]]))
        gx = fig.axes[-1] if len(fig.axes) == 2 else next(a for a in fig.axes if "groups first" in a.get_title())
        share = [line for line in gx.get_lines() if line.get_linestyle() == "--"]
        assert share and share[0].get_ydata()[0] == pytest.approx(selected.sum() / (groups.max() + 1))
        g_sel = np.bincount(groups, weights=selected)
        assert sorted(int(b.get_height()) for b in gx.containers[1]) == sorted(g_sel.astype(int))


def test_rank_loads_at_8_ranks_integer_steps_and_legends_beside_the_axes():
    rng = np.random.default_rng(1)
    planned = 1000 + rng.normal(0, 10, (37, 8))
    random = 1000 + rng.normal(0, 150, (37, 8))
    fig = R.rank_loads_figure(planned, random)
    fig.canvas.draw()
    band, ratio_ax, total_ax = fig.axes
    assert len(band.get_lines()) == 2  # one mean line per allocation, not one line per rank
    for ax in (band, ratio_ax):
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        box, legend = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= box.x1 - 1, ax.get_title()  # the legend never covers the data
    assert [t.get_text() for t in total_ax.get_xticklabels()] == [str(r) for r in range(8)]
    ratio = [line for line in ratio_ax.get_lines() if "shard plan" in line.get_label()][0]
    assert np.allclose(ratio.get_ydata(), planned.max(1) / planned.mean(1))


@pytest.mark.parametrize("k,with_groups", [(87, False), (64, True), (12, False)])
def test_features_pca_uses_qualitative_colours(k, with_groups):
    import matplotlib.pyplot as plt
    rng = np.random.default_rng(2)
    clusters = rng.integers(0, k, 600)
    clusters[:k] = np.arange(k)
    groups = rng.integers(0, 11, k) if with_groups else None
    features = rng.standard_normal((600, 16))
    selected = rng.random(600) < 0.3
    fig = R.features_pca_figure(features, clusters, selected, groups)
    right = fig.axes[1]
    colours = {tuple(np.round(c, 4)) for c in right.collections[0].get_facecolors()[:, :3]}
    palette = {tuple(np.round(c, 4)) for c in plt.get_cmap("tab20").colors}
    grey = (0.6, 0.6, 0.6)
    assert colours <= palette | {grey}, "categorical colours only (no continuous colormap)"
    n_categories = len(np.unique(groups[clusters] if with_groups else clusters))
    assert len(colours) == min(n_categories, R.MAX_COLOURS + (n_categories == R.MAX_COLOURS + 1)) + \
        (n_categories > R.MAX_COLOURS + 1)
    names = [t.get_text() for t in right.get_legend().get_texts()]
    assert len(names) <= R.MAX_COLOURS + 1 and (names[-1].startswith("other") == (n_categories > R.MAX_COLOURS + 1))
    left = fig.axes[0]
    assert left.collections[1].get_offsets().shape[0] == selected.sum()  # the selection, on top of every row


def test_plots_are_written_as_png(tmp_path):
    sizes, selected, groups = _clusters(64)
    outs = [R.plot_cluster_sizes(sizes, selected, tmp_path / "c.png", groups),
            R.plot_rank_loads(np.ones((5, 8)), np.ones((5, 8)) * 2, tmp_path / "r.png"),
            R.plot_features_pca(np.random.default_rng(0).standard_normal((200, 4)), np.arange(200) % 64,
                                None, tmp_path / "f.png")]
    for p in outs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_group_panels_line_is_not_called_an_equal_share():
    """The dashed line at selected ÷ groups was labelled 'equal share per group (85)' while water-filling gave
    the groups it did not take whole 102 each: no group's quota is that line."""
    sizes, selected, groups = _clusters(64)
    fig = R.cluster_sizes_figure(sizes, selected, groups)
    legend = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    mean = np.bincount(groups, weights=selected).sum() / (groups.max() + 1)
    assert legend[0] == f"mean selected per group ({mean:.0f})"
