"""`report`: what an artifact (or a whole pipeline directory) holds, as tables and PNG plots.

Tables come from the artifacts' metadata and small columns; plots are drawn with matplotlib (Agg):

    cluster_sizes.png   cluster sizes in the data and in the selection (sorted by size)
    features_pca.png    a 2-D PCA of the features coloured by cluster, selected rows marked
    rank_loads.png      per-step token load of each rank: the shard plan vs a random allocation
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

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


def _manifest(directory: Path) -> dict:
    from cluster_curate.loader import read_manifest
    return read_manifest(directory)


# -------------------------------------------------------------------------------------------- tables

def _meta_rows(path: Path, meta: ArtifactMeta) -> dict:
    return {"path": str(path), "kind": meta.kind, "rows": meta.rows, "version": meta.version,
            "dataset": f"{meta.dataset.get('source')} ({meta.dataset.get('fingerprint')})",
            "fingerprint": meta.fingerprint}


def describe(found: dict[str, Path]) -> list[tuple[str, dict, list[dict] | None]]:
    """(title, key/values, optional table rows) for each artifact, in pipeline order."""
    sections = []
    if "embeddings" in found:
        path = found["embeddings"]
        meta = read_meta(path)
        table, _ = read_artifact(path, columns=[c for c in ("n_tokens", "n_response_tokens", "loss")
                                                if c in artifact_schema(path).names])
        data = _meta_rows(path, meta)
        p = meta.params
        data.update({k: p[k] for k in ("model", "features", "dim", "seed", "max_length") if k in p})
        for col in table.column_names:
            v = table.column(col).to_numpy(zero_copy_only=False).astype(float)
            v = v[np.isfinite(v)]
            if v.size:
                data[col] = f"mean {v.mean():.1f}, p50 {np.median(v):.1f}, p95 {np.percentile(v, 95):.1f}, max {v.max():.1f}"
        sections.append(("embeddings", data, None))
    if "clusters" in found:
        path = found["clusters"]
        meta = read_meta(path)
        sizes = np.asarray(meta.params.get("sizes") or _cluster_sizes(path))
        data = _meta_rows(path, meta)
        split = meta.params.get("split_mixed")
        data.update({"k": meta.params.get("k"), "k rule": meta.params.get("k_rule"),
                     "mixed clusters cut": (f"{split['cuts']} (k-means k = {split['k_means']})" if split else "no"),
                     "sizes min / median / max": f"{sizes.min()} / {np.median(sizes):g} / {sizes.max()}",
                     "largest ÷ smallest": round(float(sizes.max() / max(sizes.min(), 1)), 2),
                     "objective": meta.params.get("objective"), "moved by the size cap": meta.params.get("moved")})
        sections.append(("clusters", data, None))
    if "selection" in found:
        path = found["selection"]
        meta = read_meta(path)
        p = meta.params
        data = _meta_rows(path, meta)
        data.update({"budget": f"--{p.get('mode')} {p.get('value')}", "selected": p.get("selected"),
                     "fraction of the data": p.get("fraction_selected"), "within": p.get("within"),
                     "clusters covered": f"{p.get('clusters_covered')} / {len(p.get('cluster_sizes') or [])}"})
        rows = None
        if p.get("cluster_sizes") and p.get("quotas"):
            sizes, quotas = np.asarray(p["cluster_sizes"]), np.asarray(p["quotas"])
            order = np.argsort(-sizes, kind="stable")
            rows = [{"cluster": int(c), "size": int(sizes[c]), "selected": int(quotas[c]),
                     "kept": f"{quotas[c] / max(sizes[c], 1):.0%}"} for c in order[:40]]
        sections.append(("selection", data, rows))
    if "shards" in found:
        m = _manifest(found["shards"])
        b = m.get("balance", {})
        data = {"path": str(found["shards"]), "shards": m.get("num_shards"), "micro batch": m.get("micro_batch_size"),
                "rows per shard": m.get("rows_per_shard"), "steps": m.get("steps"),
                "allocation": m.get("params", {}).get("allocation"), "leftover rows": m.get("leftover_rows"),
                "wrapped rows": m.get("wrapped_rows"), "token source": m.get("tokens", {}).get("source")}
        for key in ("token_imbalance", "padded_imbalance", "cluster_spread", "rank_mix_tv"):
            if key in b:
                data[key.replace("_", " ")] = ", ".join(f"{k} {v:.4g}" for k, v in b[key].items()
                                                         if isinstance(v, (int, float)))
        sections.append(("shards", data, None))
    return sections


def _cluster_sizes(path: Path) -> np.ndarray:
    table, _ = read_artifact(path, columns=["cluster"])
    return np.bincount(table.column("cluster").to_numpy())


# --------------------------------------------------------------------------------------------- plots

def plot_cluster_sizes(sizes: np.ndarray, selected: np.ndarray | None, out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = np.argsort(-sizes, kind="stable")
    x = np.arange(len(sizes))
    fig, ax = plt.subplots(figsize=(max(6, min(16, len(sizes) * 0.12 + 4)), 4))
    ax.bar(x, sizes[order], color="#c6dbef", label="in the data")
    if selected is not None:
        ax.bar(x, selected[order], color="#2171b5", width=0.6, label="selected")
    ax.set_xlabel("cluster (sorted by size)")
    ax.set_ylabel("rows")
    ax.set_title(f"Cluster sizes: {len(sizes)} clusters, {int(sizes.sum())} rows"
                 + (f", {int(selected.sum())} selected" if selected is not None else ""))
    if len(sizes) <= 40:
        ax.set_xticks(x, [str(c) for c in order], fontsize=7)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def pca_2d(x: np.ndarray) -> np.ndarray:
    x = x - x.mean(0, keepdims=True)
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    return x @ vt[:2].T


def plot_features_pca(features: np.ndarray, clusters: np.ndarray, selected: np.ndarray | None, out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xy = pca_2d(features.astype(np.float64))
    k = int(clusters.max()) + 1
    cmap = plt.get_cmap("tab20" if k <= 20 else "turbo")
    colours = cmap((clusters % 20) / 19 if k <= 20 else clusters / max(k - 1, 1))
    fig, ax = plt.subplots(figsize=(7, 6))
    size = 10 if len(xy) < 5000 else 3
    ax.scatter(xy[:, 0], xy[:, 1], c=colours, s=size, alpha=0.55, linewidths=0, label="not selected")
    if selected is not None and selected.any():
        ax.scatter(xy[selected, 0], xy[selected, 1], c=colours[selected], edgecolors="black", s=size * 3,
                   linewidths=0.6, label=f"selected ({int(selected.sum())})")
        ax.legend(loc="best")
    ax.set_title(f"Features, PCA to 2-D: {len(clusters)} rows, coloured by cluster (k = {k})")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def rank_loads(step_of_row: np.ndarray, rank_of_row: np.ndarray, tokens: np.ndarray, steps: int, ranks: int) -> np.ndarray:
    loads = np.zeros((steps, ranks))
    np.add.at(loads, (step_of_row, rank_of_row), tokens)
    return loads


def plot_rank_loads(planned: np.ndarray, random: np.ndarray, out: Path, max_steps: int = 120) -> Path:
    """planned/random: [steps, ranks] token loads. Each rank's load per step, and max ÷ mean per step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for ax, loads, name in ((axes[0], planned, "shard plan"), (axes[1], random, "random allocation")):
        shown = loads[:max_steps]
        for r in range(shown.shape[1]):
            ax.plot(shown[:, r], lw=0.9, label=f"rank {r}")
        ax.set_ylabel("tokens")
        ax.set_title(f"Token load of each rank per step: {name}")
        if shown.shape[1] <= 8:
            ax.legend(fontsize=7, ncol=min(8, shown.shape[1]), loc="upper right")
    for loads, name, colour in ((planned, "shard plan", "#2171b5"), (random, "random", "#cb181d")):
        shown = loads[:max_steps]
        ratio = shown.max(1) / np.maximum(shown.mean(1), 1e-9)
        axes[2].plot(ratio, color=colour, lw=1.0,
                     label=f"{name}: mean {np.mean(loads.max(1) / np.maximum(loads.mean(1), 1e-9)):.3f}")
    axes[2].axhline(1.0, color="grey", lw=0.6)
    axes[2].set_ylabel("max ÷ mean")
    axes[2].set_xlabel(f"step (first {min(max_steps, planned.shape[0])} of {planned.shape[0]})")
    axes[2].set_title("Token imbalance per step (the slowest rank sets the pace)")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def make_plots(found: dict[str, Path], out_dir: Path, seed: int = 0) -> list[Path]:
    """Draw every plot the given artifacts allow; returns the files written."""
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    sel_ids = sel_table = None
    if "selection" in found:
        sel_table, _ = read_artifact(found["selection"])
        sel_ids = sel_table.column("id").to_numpy()
    if "clusters" in found:
        ctable, cmeta = read_artifact(found["clusters"], columns=["id", "cluster"])
        labels = ctable.column("cluster").to_numpy()
        k = int(cmeta.params.get("k") or labels.max() + 1)
        sizes = np.bincount(labels, minlength=k)
        selected = None
        if sel_table is not None:
            selected = np.bincount(sel_table.column("cluster").to_numpy(), minlength=k)
        written.append(plot_cluster_sizes(sizes, selected, out_dir / "cluster_sizes.png"))
        if "embeddings" in found:
            from cluster_curate.io.readers import read_embeddings
            e_ids, x, _ = read_embeddings(found["embeddings"])
            ids = ctable.column("id").to_numpy()
            pos = np.searchsorted(e_ids, ids)
            rng = np.random.default_rng(seed)
            show = np.sort(rng.choice(len(ids), MAX_PCA_POINTS, replace=False)) if len(ids) > MAX_PCA_POINTS \
                else np.arange(len(ids))
            mask = np.isin(ids[show], sel_ids) if sel_ids is not None else None
            written.append(plot_features_pca(x[pos[show]], labels[show], mask, out_dir / "features_pca.png"))
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
)


def report(paths: list[str], out: str | None = None, seed: int = 0) -> tuple[list, list[Path]]:
    """Tables (title, key/values, rows) of the given artifacts and those their lineage reaches, and the plots
    written into `out` (when given)."""
    found = find_artifacts(list(paths))
    sections = describe(found)
    plots = make_plots(found, Path(out), seed) if out else []
    return sections, plots


def sections_as_json(sections) -> str:
    return json.dumps({title: {"summary": data, "table": rows} for title, data, rows in sections}, default=str)


def render(result, options: dict) -> None:
    from cluster_curate import console
    sections, plots = result
    if console.JSON_MODE:
        console.summary("report", {t: d for t, d, _ in sections} | {"plots": [str(p) for p in plots]})
        return
    for title, data, rows in sections:
        console.summary(title, data, rows)
    if plots:
        console.summary("plots", {p.name: str(p) for p in plots})


SPEC = CommandSpec(
    "report", report, (Argument("artifacts", nargs=-1),), OPTIONS, render,
    help="""Tables (and with --out, PNG plots) for artifacts or a whole `run` directory.

    \b
    Examples:
      cluster-curate report out/                       # every artifact of a pipeline directory
      cluster-curate report selection.parquet --out report/
    Upstream artifacts are found through the lineage in the metadata when they are still where they were.
    """)
