"""Parquet artifacts: the contract between commands (docs/architecture.md, "Artifacts"): metadata and reading.

An artifact is one Parquet file or a directory of `part-*.parquet` files. Each carries the key-value
metadata `cluster_curate` (JSON) with:

    kind         "embeddings" | "clusters" | "selection" | ...
    version      tool version that wrote it
    algorithm    version of the stage's algorithm (ALGORITHM_VERSION of the stage's module)
    params       the parameters of the stage that made it
    inputs       {name: {"path", "kind", "fingerprint", "rows"}} for each input
    dataset      {"source", "fingerprint", "rows"} of the raw dataset at the root of the lineage; "source" as
                 written, and beside a relative one its "absolute_path" (io/datasets.recorded_source), in no hash
    rows         number of rows in this artifact
    fingerprint  hash of (kind, algorithm, params, inputs): same algorithm, inputs and parameters => same
                 fingerprint, and an algorithm that changes its output bumps its version

Writing is cluster_curate/io/writer.py; typed readers are cluster_curate/io/readers.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from cluster_curate import __version__
from cluster_curate.errors import CurateError

META_KEY = b"cluster_curate"


def json_default(v: Any):
    """`json.dumps(default=...)` for numpy scalars and arrays (anything else becomes its str)."""
    import numpy as np
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def stable_hash(obj: Any) -> str:
    """Short deterministic hash of a JSON-serialisable object."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


@dataclass
class ArtifactMeta:
    kind: str
    params: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    dataset: dict = field(default_factory=dict)
    rows: int = 0
    version: str = __version__
    fingerprint: str = ""
    algorithm: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> "ArtifactMeta":
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if data.get(k) is not None}  # null reads as absent
        return cls(**known)

    def as_input(self, path: str | os.PathLike, beside: str | os.PathLike) -> dict:
        """How the downstream artifact at `beside` records this one among its inputs: the path relative to the
        folder that holds `beside` (docs/architecture.md, "Lineage"), so a pipeline folder copied or moved
        elsewhere, or used from another working directory, still finds its inputs, and the bytes of an artifact
        do not depend on where its folder is."""
        rel = os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(beside)))
        return {"path": rel, "kind": self.kind, "fingerprint": self.fingerprint, "rows": self.rows}


def make_meta(kind: str, params: dict, inputs: dict[str, dict], dataset: dict,
              algorithm: int | None = None) -> ArtifactMeta:
    """Metadata of a new artifact. `inputs` maps a name ("data", "embeddings", ...) to an input record:
    `meta.as_input(path, out)` for an artifact, the reader's `dataset_record()` for raw data. `algorithm`: the
    stage's ALGORITHM_VERSION (None only for artifacts made outside the stages, e.g. in tests)."""
    meta = ArtifactMeta(kind=kind, params=params, inputs={k: dict(v) for k, v in inputs.items()}, dataset=dict(dataset),
                        algorithm=algorithm)
    key = {"kind": kind, "params": params, "inputs": {k: v.get("fingerprint") for k, v in inputs.items()}}
    if algorithm is not None:
        key["algorithm"] = algorithm
    meta.fingerprint = stable_hash(key)
    return meta


# ----------------------------------------------------------------------------------------------- paths

def artifact_files(path: str | os.PathLike) -> list[Path]:
    """The Parquet file(s) that make up an artifact: the file itself, or a directory's sorted parts."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        parts = sorted(q for q in p.glob("*.parquet") if not q.name.startswith("."))
        if not parts:
            raise CurateError(f"{p}: directory holds no .parquet files")
        return parts
    raise CurateError(f"{p}: no such file or directory")


def artifact_schema(path: str | os.PathLike) -> pa.Schema:
    """The Arrow schema of an artifact (of its first part), without reading any rows."""
    return pq.read_schema(artifact_files(path)[0])


def sidecar_path(path: str | os.PathLike, suffix: str) -> Path:
    """A file stored beside an artifact, e.g. sidecar_path('c.parquet', 'centroids.npy') -> 'c.centroids.npy'."""
    p = Path(path)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
    return p.with_name(f"{stem}.{suffix}")


def check_writable(path: str | os.PathLike, overwrite: bool) -> None:
    """Before any work: `path` is not in the way (or may be replaced) and can be created (check_creatable)."""
    p = Path(path)
    if p.exists() and not overwrite:
        raise CurateError(f"{p}: already exists (pass --overwrite to replace it)")
    check_creatable(p)


def check_creatable(path: str | os.PathLike) -> None:
    """One line (CurateError) unless `path`, and the temporary and sidecar files beside it, can be created:
    every existing ancestor is a directory, and the nearest one is writable. Probed by creating and removing a
    hidden file there, because permission bits do not tell (root, read-only mounts, /proc, /sys)."""
    import tempfile

    p = Path(path)
    where = Path(os.path.abspath(p)).parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise CurateError(f"{p}: cannot create it: {where} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".cluster-curate-probe-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        reason = "permission denied" if isinstance(e, PermissionError) else (e.strerror or str(e)).lower()
        raise CurateError(f"{p}: cannot create it: cannot write in {where} ({reason})") from None


# ----------------------------------------------------------------------------------------------- read

def read_meta(path: str | os.PathLike, kind: str | tuple[str, ...] | None = None) -> ArtifactMeta:
    """Metadata of an artifact (of its first part); checks the kind when given."""
    files = artifact_files(path)
    try:
        schema_meta = pq.read_schema(files[0]).metadata or {}
    except (pa.ArrowInvalid, OSError) as e:
        raise CurateError(f"{files[0]}: not a readable Parquet file ({e})") from None
    if META_KEY not in schema_meta:
        raise CurateError(f"{path}: not a cluster-curate artifact (no '{META_KEY.decode()}' metadata)")
    meta = ArtifactMeta.from_json(schema_meta[META_KEY].decode())
    if len(files) > 1:
        meta.rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if kind is not None:
        kinds = (kind,) if isinstance(kind, str) else tuple(kind)
        if meta.kind not in kinds:
            raise CurateError(f"{path}: is {_article(meta.kind)} '{meta.kind}' artifact, expected "
                              f"{' or '.join(repr(k) for k in kinds)}")
    return meta


def _article(word: str) -> str:
    return "an" if word[:1].lower() in tuple("aeiou") else "a"


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """pq.read_table of one file, without importing pyarrow.dataset (a share of every command's start:
    benchmarks/results/code_figures.md). Unlike ParquetFile.read alone, a column the file lacks raises, as read_table does."""
    f = pq.ParquetFile(path)
    names = set(f.schema_arrow.names)  # schema_arrow converts the Parquet schema anew on every access
    missing = [c for c in columns or () if c not in names]
    if missing:
        raise pa.ArrowInvalid(f"no column {', '.join(map(repr, missing))} in {path}")
    return f.read(columns=columns)


def read_artifact(path: str | os.PathLike, kind: str | tuple[str, ...] | None = None,
                  columns: list[str] | None = None) -> tuple[pa.Table, ArtifactMeta]:
    """Read a whole artifact (file or part directory) as one table, sorted by `id` when parts are joined."""
    meta = read_meta(path, kind)
    files = artifact_files(path)
    try:
        tables = [read_parquet(f, columns) for f in files]
    except (pa.ArrowInvalid, OSError, KeyError) as e:
        raise CurateError(f"{path}: cannot read artifact ({e})") from None
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(files) > 1 and "id" in table.column_names:
        table = table.sort_by("id")
    return table.replace_schema_metadata(None), meta


def iter_artifact_batches(path: str | os.PathLike, columns: list[str] | None = None,
                          batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
    """Stream an artifact's rows part by part (no global sort)."""
    for f in artifact_files(path):
        yield from pq.ParquetFile(f).iter_batches(batch_size=batch_rows, columns=columns)


def check_same_dataset(metas: dict[str, ArtifactMeta], force: bool = False) -> dict:
    """All inputs must descend from the same raw dataset; returns that dataset record.

    `metas` maps a display name (usually the path) to its meta. With force=True a mismatch is allowed.
    """
    items = list(metas.items())
    first_name, first = items[0]
    for name, meta in items[1:]:
        a, b = first.dataset.get("fingerprint"), meta.dataset.get("fingerprint")
        if a != b and not force:
            raise CurateError(
                f"{name}: comes from a different dataset than {first_name} "
                f"({meta.dataset.get('source')!s} fingerprint {b} vs {first.dataset.get('source')!s} fingerprint {a}); "
                "pass --force to use them together anyway")
    return first.dataset


def check_dataset_matches(meta: ArtifactMeta, name: str, dataset: dict, force: bool = False) -> None:
    """An artifact must come from `dataset` (a record made by the dataset reader)."""
    if meta.dataset.get("fingerprint") != dataset.get("fingerprint") and not force:
        raise CurateError(
            f"{name}: was made from {meta.dataset.get('source')} (fingerprint {meta.dataset.get('fingerprint')}), "
            f"not from {dataset.get('source')} (fingerprint {dataset.get('fingerprint')}); pass --force to use it anyway")
