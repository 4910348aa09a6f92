"""Typed readers of the artifacts (docs/architecture.md, "Artifacts"): each returns numpy arrays in id order
with the checks done here once -- required columns present, no nulls, no repeated id, the kind expected --
so that commands and stages receive aligned data and never look at files.

    embedding_matrix(column)         an Arrow list column of vectors as [n, d] float32 (a view when it can be)
    read_checked_meta(path, kind)    read_meta, an artifact file changed since it was written refused
    read_embeddings(path)            ids, [n, d] float32 matrix, meta (an incomplete job-array artifact refused)
    check_embeddings_complete(path)  refuse (or, with force, warn about) an embeddings directory missing parts
    read_embedding_columns(path, ..) small per-row columns aligned with given ids
    read_clusters(path)              ids, labels, similarity, k, groups, meta
    read_selection(path)             ids, clusters, n_tokens, meta
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cluster_curate.budget_sequence import Kinds
from cluster_curate.errors import CurateError, cannot_read
from cluster_curate.io import names
from cluster_curate.io.artifacts import (META_KEY, ArtifactMeta, artifact_files, artifact_schema, read_meta,
                                        read_parquet)


def read_columns(path, columns) -> pa.Table:
    """Some columns of every part of an artifact, joined in part order (no sort)."""
    try:
        tables = [read_parquet(f, columns) for f in artifact_files(path)]
    except (pa.ArrowInvalid, OSError, KeyError) as e:
        raise cannot_read(path, e, f"columns {', '.join(columns)}") from None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def require_columns(path, wanted, found) -> None:
    for col in wanted:
        if col not in found:
            raise CurateError(f"{path}: no '{col}' column (found {', '.join(found)})")


def id_order(path, ids: np.ndarray) -> np.ndarray | None:
    """The permutation that sorts `ids` (None when already strictly increasing); a repeated id is an error."""
    if np.all(ids[1:] > ids[:-1]):
        return None
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    dup = np.flatnonzero(s[1:] == s[:-1])
    if len(dup):
        raise CurateError(f"{path}: id {s[dup[0]]} appears more than once")
    return order


def align(sorted_ids: np.ndarray, wanted: np.ndarray, missing_message) -> np.ndarray | None:
    """Positions in `sorted_ids` of every id of `wanted` (None when the two are equal). A wanted id that is
    absent raises CurateError(missing_message(id))."""
    if len(sorted_ids) == len(wanted) and np.array_equal(sorted_ids, wanted):
        return None
    pos = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    missing = np.flatnonzero(sorted_ids[pos] != wanted)
    if len(missing):
        raise CurateError(missing_message(wanted[missing[0]]))
    return pos


def rows_changed(path) -> str | None:
    """`it holds 150 rows, written with 300`: an artifact file whose rows are not its metadata's `rows` (a file
    filtered and written again keeps the metadata: pyarrow carries it through), from its footer, so no row is read;
    in a directory, the first part whose rows are not its own metadata's (each part records its rows). None when
    they are those, or it is not an artifact (read_meta says why)."""
    from pathlib import Path

    import pyarrow.parquet as pq
    try:
        files = artifact_files(path)
    except CurateError:
        return None
    for f in files:
        try:
            footer = pq.read_metadata(f)  # the row count and the metadata in one read
            written = ArtifactMeta.from_json(footer.metadata[META_KEY].decode()).rows
        except (pa.ArrowInvalid, OSError, KeyError, TypeError, ValueError):
            continue
        if footer.num_rows != written:
            held = f"holds {footer.num_rows:,} rows, written with {written:,}"
            return f"{f.name} {held}" if Path(path).is_dir() else f"it {held}"
    return None


def sidecars_unlike_record(path) -> str | None:
    """`its centroids clusters.centroids.npy are missing`: why the files an artifact was written with beside it
    are not there as its metadata records them (None: they are, or it keeps none): a clusters artifact's
    centroids missing, or of another shape or bytes than it records (a kill between cluster's two renames, a
    file of another clustering); an embeddings artifact's fitted feature state (`text.npz` and its key) missing,
    which `--target` and `--like` read. Its .parquet alone would pass for a whole output."""
    import hashlib

    from cluster_curate.io.artifacts import own_sidecar, sidecar_path
    meta = read_meta(path)
    recorded = meta.params.get("centroids") if meta.kind == names.CLUSTERS else None
    if isinstance(recorded, dict):
        side = sidecar_path(path, recorded.get("sidecar") or names.CENTROIDS)
        try:
            data = side.read_bytes()
        except FileNotFoundError:
            return f"its centroids {side.name} are missing"
        if hashlib.blake2b(data, digest_size=12).hexdigest() != recorded.get("blake2b"):
            try:
                shape = list(np.load(side, mmap_mode="r").shape)
            except (OSError, ValueError):
                shape = "none: not a NumPy array"
            return (f"its centroids {side.name} are not the ones it records (shape {shape}, it records "
                    f"{recorded.get('shape')}: another clustering's)")
    if meta.kind == names.EMBEDDINGS and not meta.params.get("like"):  # --like reads the pool's, keeps none
        for kind in set(meta.params.get("features") or ()) & set(names.FEATURE_STATE_KINDS):
            pairs = [[sidecar_path(path, s) for s in names.feature_state(kind, previous)] for previous in (False, True)]
            if not any(state.is_file() and key.is_file() and own_sidecar(key, key.name) for state, key in pairs):
                missing = [f.name for f in pairs[0] if not f.is_file()]
                if not missing:
                    return f"its {kind} state's key {pairs[0][1].name} is not one cluster-curate wrote"
                return f"its {kind} state {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
    return None


def read_checked_meta(path, kind: str | tuple[str, ...] | None = None, force: bool = False) -> ArtifactMeta:
    """read_meta(path, kind), and an artifact file changed since it was written refused (rows_changed): its lineage
    would say other rows than it holds (a manifest's selected rows against its selection's). `force` (--force):
    used as it is, with a warning (a selection filtered by hand, say)."""
    meta = read_meta(path, kind)
    changed = rows_changed(path)
    if changed and not force:
        raise CurateError(f"{path}: changed since cluster-curate wrote it ({changed}); make it again with the "
                          "command that wrote it, or pass --force to use it as it is")
    if changed:
        from cluster_curate import console
        console.warn(f"{path}: changed since cluster-curate wrote it ({changed}); used as it is (--force)", once=True)
    return meta


# ----------------------------------------------------------------------------------------------- embeddings

def embedding_matrix(column: pa.Array | pa.ChunkedArray, ids: np.ndarray | None = None,
                     name: str = "embedding") -> np.ndarray:
    """An Arrow list column of vectors as a numpy [n, d] float32 array.

    A single-chunk fixed-size list of float32 without nulls becomes a view of Arrow's values buffer (no copy);
    several chunks are copied once into one matrix; other float types are converted. `ids` (same length) only
    serve to name the row in errors.
    """
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    chunks = [c for c in chunks if len(c)]
    n = sum(len(c) for c in chunks)
    if n == 0:
        return np.zeros((0, _list_size(column.type, name)), dtype=np.float32)
    if len(chunks) == 1:
        return _chunk_matrix(chunks[0], ids, name)
    d = _list_size(column.type, name) or _chunk_matrix(chunks[0], None, name).shape[1]
    out = np.empty((n, d), dtype=np.float32)
    start = 0
    for c in chunks:
        part_ids = None if ids is None else ids[start:start + len(c)]
        m = _chunk_matrix(c, part_ids, name)
        if m.shape[1] != d:
            raise CurateError(f"{name}: vectors of different lengths ({m.shape[1]} and {d})")
        out[start:start + len(c)] = m
        start += len(c)
    return out


def _list_size(t: pa.DataType, name: str) -> int:
    if pa.types.is_fixed_size_list(t):
        return t.list_size
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return 0  # variable-size list: the length is checked per row
    raise CurateError(f"{name}: expected a list of floats per row, found {t}")


def _chunk_matrix(arr: pa.Array, ids: np.ndarray | None, name: str) -> np.ndarray:
    def where(i: int) -> str:
        return f"id {ids[i]}" if ids is not None else f"row {i}"

    if arr.null_count:
        first = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise CurateError(f"{name}: missing vector at {where(first)}")
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = np.diff(arr.offsets.to_numpy())
        d = int(lengths[0]) if len(lengths) else 0
        bad = np.flatnonzero(lengths != d)
        if len(bad):
            raise CurateError(f"{name}: vector at {where(int(bad[0]))} has {lengths[bad[0]]} values, "
                              f"the first has {d}")
    else:
        raise CurateError(f"{name}: expected a list of floats per row, found {t}")
    values = arr.flatten()  # honours the array's offset; zero-copy for a fixed-size list without nulls
    if not pa.types.is_floating(values.type):
        raise CurateError(f"{name}: expected float values, found {values.type}")
    if values.null_count:
        first = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]) // max(d, 1)
        raise CurateError(f"{name}: null value inside the vector at {where(first)}")
    flat = values.to_numpy(zero_copy_only=False)
    if flat.dtype != np.float32:
        flat = flat.astype(np.float32)
    return flat.reshape(len(arr), d)


def _id_ranges(ids: np.ndarray, limit: int = 4) -> str:
    """Sorted ids as 'a-b, c, d-e, ...' (the first `limit` runs)."""
    if not len(ids):
        return ""
    breaks = np.flatnonzero(np.diff(ids) != 1)
    starts = np.concatenate(([ids[0]], ids[breaks + 1]))
    ends = np.concatenate((ids[breaks], [ids[-1]]))
    runs = [f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts[:limit], ends[:limit])]
    return ", ".join(runs) + (", ..." if len(starts) > limit else "")


def embeddings_incomplete(path) -> dict | None:
    """None unless `path` is an embeddings directory written by several workers (`embed --num-parts` /
    torchrun: `part-WWWWW-of-NNNNN.parquet`, distributed.ChunkedOutput) of which some parts are not written yet.
    Then {"parts", "of", "missing_parts", "rows", "dataset_rows", "missing_ids", "unlisted_duplicates"}
    (missing_ids: the dataset's ids in no part, in no written part's rejects list and not an exact duplicate the
    metadata lists, sorted; unlisted_duplicates: the exact duplicates past those listed, which may be among them)."""
    import json
    from pathlib import Path

    import pyarrow.parquet as pq
    p = Path(path)
    if not p.is_dir():
        return None  # a single file is written whole at the end of `embed`
    found = {}
    for f in p.glob(names.part_pattern()):
        part = names.part_of(f.name)
        if part:
            found.setdefault(part[1], []).append(part[0])
    if not found:
        return None
    workers = max(found)  # an --overwrite run with another layout removes the others' parts
    present = sorted(set(found[workers]))
    missing_parts = [names.part_file_name(w, workers) for w in range(workers) if w not in present]
    if not missing_parts:
        return None
    rows = sum(pq.ParquetFile(p / names.part_file_name(w, workers)).metadata.num_rows for w in present)
    try:
        meta = read_meta(path)
        dataset_rows = int(meta.dataset.get("rows"))
    except (CurateError, TypeError, ValueError):
        meta, dataset_rows = None, None
    duplicates = (meta.params.get("exact_duplicates") or {}) if meta is not None else {}
    listed = [i for i in duplicates.get("ids") or () if isinstance(i, int)]  # the first 10,000 of them
    missing_ids, unlisted = np.zeros(0, dtype=np.int64), max(0, int(duplicates.get("dropped") or 0) - len(listed))
    if dataset_rows:
        have = np.zeros(dataset_rows, dtype=bool)
        for w in present:
            ids = read_parquet(p / names.part_file_name(w, workers), ["id"]).column("id").to_numpy()
            have[ids[(ids >= 0) & (ids < dataset_rows)]] = True
            rejects = p / names.part_rejects_name(w, workers)
            if rejects.exists():  # rows reported instead of embedded are not missing
                for line in rejects.read_text().splitlines():
                    try:
                        i = int(json.loads(line)["id"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    if 0 <= i < dataset_rows:
                        have[i] = True
        listed = np.asarray(listed, dtype=np.int64)
        have[listed[(listed >= 0) & (listed < dataset_rows)]] = True  # exact copies: in no part of a whole run
        missing_ids = np.flatnonzero(~have)
    return {"parts": len(present), "of": workers, "missing_parts": missing_parts, "rows": rows,
            "dataset_rows": dataset_rows, "missing_ids": missing_ids, "unlisted_duplicates": unlisted}


def check_embeddings_complete(path, force: bool = False) -> None:
    """Refuse an embeddings artifact whose job-array / torchrun parts are not all written yet (one line, before
    any work); with `force`, warn once naming the rows that are missing and go on."""
    inc = embeddings_incomplete(path)
    if inc is None:
        return
    of_rows = f" of {inc['dataset_rows']:,}" if inc["dataset_rows"] else ""
    absent = f"{', '.join(inc['missing_parts'][:3])}{', ...' if len(inc['missing_parts']) > 3 else ''} missing"
    if not force:
        if inc["dataset_rows"] and not len(inc["missing_ids"]):  # parts that own no row (a dataset of few chunks)
            state = (f"{inc['parts']} of {inc['of']} parts written ({absent}, owning none of the "
                     f"{inc['dataset_rows']:,} rows)")
        else:
            state = f"{inc['rows']:,}{of_rows} rows embedded ({inc['parts']} of {inc['of']} parts written, {absent})"
        raise CurateError(f"{path}: incomplete: {state}; wait for the other pieces (embed --num-parts N "
                          "--part-index I) to finish, or pass --force to use what is there")
    from cluster_curate import console
    ids = inc["missing_ids"]
    # ids in no part and no rejects list, less the exact copies the metadata lists (embed leaves them out of all)
    extra = inc["unlisted_duplicates"]
    missing = (f"{len(ids):,} rows not embedded (ids {_id_ranges(ids)}"
               + (f"; {extra:,} exact duplicates past those the metadata lists among them" if extra else "") + ")"
               if len(ids)
               else "no rows missing (the missing parts own none)" if inc["dataset_rows"]
               else "the rows of the missing parts not embedded")
    message = (f"{path}: incomplete (--force): using {inc['rows']:,}{of_rows} rows ({inc['parts']} of {inc['of']} "
               f"parts written, {absent}); {missing}")
    console.warn(message)


def read_embeddings(path, *, force: bool = False, batch_rows: int = 65536, completeness_checked: bool = False):
    """The `embedding` column of an embeddings artifact as one [n, d] float32 matrix in id order, plus the
    sorted ids and the artifact's meta. Memory: the matrix plus one batch (each batch's vectors are a view of
    Arrow's buffer, copied once into place). Errors name the file and the first bad id. A directory of job-array
    parts not all written yet is refused (with `force`: a warning, and the rows there), unless the caller
    checked it already (`completeness_checked`: cluster, before any work; one warning per command)."""
    import pyarrow.parquet as pq

    meta = read_checked_meta(path, None if force else names.EMBEDDINGS, force)
    if not completeness_checked:
        check_embeddings_complete(path, force)
    files = artifact_files(path)
    require_columns(path, ("id", "embedding"), artifact_schema(path).names)
    file_ids = read_columns(path, ["id"]).column("id").to_numpy().astype(np.int64, copy=False)
    n = len(file_ids)
    if n == 0:
        raise CurateError(f"{path}: empty artifact (no rows)")
    order = id_order(path, file_ids)
    if order is None:
        ids, position = file_ids, None
    else:
        ids = file_ids[order]
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        del order
    x = None
    start = 0
    first_bad, n_bad = None, 0
    # Arrow holds about three batches while it decodes: keep a batch near 16 MB whatever the dimension, and
    # read pages as needed rather than a whole row group at once (pre_buffer=False), so the memory beyond the
    # matrix does not grow with the file
    etype = artifact_schema(path).field("embedding").type
    dim = etype.list_size if pa.types.is_fixed_size_list(etype) else 0
    read_rows = max(1024, min(batch_rows, (16 << 20) // (4 * dim))) if dim else batch_rows
    for f in files:
        reader = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 22)
        for batch in reader.iter_batches(batch_size=read_rows, columns=["id", "embedding"]):
            batch_ids = file_ids[start:start + batch.num_rows]
            block = embedding_matrix(batch.column("embedding"), ids=batch_ids, name=f"{f}: embedding")
            if x is None:
                if block.shape[1] == 0:
                    raise CurateError(f"{f}: embedding vectors are empty")
                x = np.empty((n, block.shape[1]), dtype=np.float32)
            elif block.shape[1] != x.shape[1]:
                raise CurateError(f"{f}: embedding of id {batch_ids[0]} has {block.shape[1]} values, "
                                  f"earlier rows have {x.shape[1]}")
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                n_bad += int(bad.sum())
                b = int(batch_ids[bad].min())
                first_bad = b if first_bad is None else min(first_bad, b)
            if position is None:
                x[start:start + batch.num_rows] = block
            else:
                x[position[start:start + batch.num_rows]] = block
            start += batch.num_rows
    if first_bad is not None:
        raise CurateError(f"{path}: embedding of id {first_bad} holds NaN or Inf"
                          + (f" ({n_bad} such rows in all)" if n_bad > 1 else ""))
    return ids, x, meta


def read_embeddings_for(path, ids: np.ndarray, *, force: bool = False, what: str = ""):
    """The feature rows of exactly `ids` (sorted), in that order."""
    e_ids, x, _ = read_embeddings(path, force=force)
    pos = align(e_ids, ids, lambda i: f"{path}: has no embedding for id {i}{what}")
    return x if pos is None else x[pos]


def read_embedding_columns(path, columns, ids):
    """Small per-row columns (n_tokens, loss, ...) of an embeddings artifact, aligned with the sorted `ids`.
    Returns {column: numpy array}; a column the artifact lacks is left out."""
    present = [c for c in columns if c in artifact_schema(path).names]
    if not present:
        return {}
    table = read_columns(path, ["id", *present])
    take = rows_of_ids(path, table.column("id").to_numpy(), ids)
    out = {}
    for c in present:
        values = table.column(c).to_numpy(zero_copy_only=False)  # nulls become NaN
        out[c] = values if take is None else values[take]
    return out


def rows_of_ids(path, e_ids: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """The row of each of the sorted `ids` in artifact `path`, whose id column is `e_ids` (None when the two are
    the same); an id it lacks raises CurateError."""
    order = None if np.all(e_ids[1:] > e_ids[:-1]) else np.argsort(e_ids, kind="stable")
    if order is not None:
        e_ids = e_ids[order]
    pos = align(e_ids, ids, lambda i: f"{path}: has no row for id {i}")
    return order if pos is None else (pos if order is None else order[pos])


def read_embedding_tokens(path, ids, force: bool = False):
    """n_tokens per selected id (ids sorted) from an embeddings artifact: (tokens or None, meta)."""
    meta = read_checked_meta(path, None if force else names.EMBEDDINGS, force)
    tokens = read_embedding_columns(path, ["n_tokens"], ids).get("n_tokens")
    if tokens is None:
        return None, meta
    if tokens.dtype.kind == "f" and np.isnan(tokens).any():
        raise CurateError(f"{path}: n_tokens is null for id {int(ids[np.isnan(tokens)][0])}")
    return tokens.astype(np.int64), meta


# ----------------------------------------------------------------------------------------------- clusters

@dataclass
class Clusters:
    ids: np.ndarray          # int64, sorted
    labels: np.ndarray       # cluster of each id, 0..k-1
    similarity: np.ndarray | None  # cosine to its centroid
    k: int
    groups: np.ndarray | None  # group of each cluster (`cluster --groups`), or None
    meta: ArtifactMeta
    kinds: Kinds | None = None  # kind of each group and its weight (`cluster --kinds`), or None


def read_clusters(path, *, force: bool = False, need_similarity: str | None = None) -> Clusters:
    """A clusters artifact in id order. need_similarity: the option that needs the similarity column (its
    absence is then an error naming it)."""
    meta = read_checked_meta(path, None if force else names.CLUSTERS, force)
    found = artifact_schema(path).names
    require_columns(path, ("id", "cluster"), found)
    if need_similarity and "similarity" not in found:
        raise CurateError(f"{path}: {need_similarity} needs its 'similarity' column")
    cols = ["id", "cluster"] + (["similarity"] if "similarity" in found else [])
    table = read_columns(path, cols)
    if table.num_rows == 0:
        raise CurateError(f"{path}: empty artifact (no rows)")
    for col in cols:
        if table.column(col).null_count:
            first = table.column(col).is_null().to_numpy(zero_copy_only=False).argmax()
            raise CurateError(f"{path}: row {first} has no '{col}'")
    ids = table.column("id").to_numpy()
    labels = table.column("cluster").to_numpy()
    sims = table.column("similarity").to_numpy() if "similarity" in cols else None
    del table
    order = id_order(path, ids)
    if order is not None:
        ids, labels = ids[order], labels[order]
        sims = None if sims is None else sims[order]
    k = int(meta.params.get("k") or (int(labels.max()) + 1))
    if labels.min() < 0 or labels.max() >= k:
        bad = int(np.flatnonzero((labels < 0) | (labels >= k))[0])
        raise CurateError(f"{path}: cluster {labels[bad]} of id {ids[bad]} is not in 0..{k - 1}")
    groups = meta.params.get("groups")
    kinds = None
    kind_of_group = meta.params.get("kind_of_group")
    # kinds that join no groups are the groups: select takes its grouped path, not the kinds' sequence
    if groups is not None and kind_of_group is not None and len(set(kind_of_group)) < len(kind_of_group):
        kinds = Kinds(np.asarray(kind_of_group, dtype=np.int64),
                      np.asarray(meta.params["kind_weights"], dtype=np.float64))
    return Clusters(ids, labels, sims, k, None if groups is None else np.asarray(groups, dtype=np.int64), meta,
                    kinds)


def read_cluster_sizes(path, labels, force: bool = False) -> np.ndarray:
    """Rows of each of `labels` in a clusters artifact (0 for a label it lacks)."""
    from cluster_curate.io.artifacts import read_artifact
    table, _ = read_artifact(path, kind=None if force else names.CLUSTERS, columns=["cluster"])
    found, counts = np.unique(table.column("cluster").to_numpy(), return_counts=True)
    lookup = dict(zip(found.tolist(), counts.tolist()))
    return np.array([lookup.get(int(c), 0) for c in labels], dtype=np.int64)


# ----------------------------------------------------------------------------------------------- selection

@dataclass
class Selection:
    ids: np.ndarray          # int64, sorted (a canonical order: the plan does not depend on the file's)
    clusters: np.ndarray     # int64 cluster of each id
    n_tokens: np.ndarray | None  # int64, when the selection has a complete n_tokens column
    meta: ArtifactMeta


def read_selection(path, *, force: bool = False) -> Selection:
    from cluster_curate.io.artifacts import read_artifact
    meta = read_checked_meta(path, None if force else names.SELECTION, force)
    table, _ = read_artifact(path)
    for col in ("id", "cluster"):
        if col not in table.column_names:
            raise CurateError(f"{path}: no '{col}' column (is it a selection artifact?)")
        if table.column(col).null_count:
            raise CurateError(f"{path}: column '{col}' has null values")
    ids = table.column("id").to_numpy().astype(np.int64)
    clusters = table.column("cluster").to_numpy().astype(np.int64)
    if ids.size == 0:
        raise CurateError(f"{path}: the selection is empty")
    if ids.min() < 0:
        raise CurateError(f"{path}: negative id {int(ids.min())}")
    uniq, first = np.unique(ids, return_index=True)
    if uniq.size != ids.size:
        dup = np.setdiff1d(np.arange(ids.size), first)[0]
        raise CurateError(f"{path}: id {int(ids[dup])} is selected twice (row {int(dup)})")
    order = np.argsort(ids)
    tokens = None
    if "n_tokens" in table.column_names and table.column("n_tokens").null_count == 0:
        tokens = table.column("n_tokens").to_numpy().astype(np.int64)[order]
    return Selection(ids[order], clusters[order], tokens, meta)
