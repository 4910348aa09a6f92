"""Write rows that arrive in dataset order into N Parquet shards in *planned* order, with bounded memory.

The raw dataset is streamed once; each selected row arrives with its shard and its position in that shard.
Rows are buffered per (shard, position chunk) and spilled to Arrow IPC files in a temporary directory
when the buffers exceed `buffer_bytes`; at the end each shard is assembled chunk by chunk (read the
chunk's spill files, sort by position, append one row group). Peak memory is therefore about
`buffer_bytes` + one chunk (`chunk_bytes`), whatever the size of the text — an external bucket sort,
possible because every row's final position is known before the data is read.

JSON sources may widen their schema from batch to batch (a column all-null at first, a new column); the
shards are written with the union of all schemas seen (`promote_options="permissive"`), except that a column of
objects whose keys differ between batches, or that is JSON text in some batches (the reader's: io/datasets.py),
is JSON text throughout (`json_columns`): merging the structs would give every row every key.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cluster_curate.errors import CurateError

POSITION = "__position"  # each row's place in its shard, a column of ours beside the data's while it is sorted
# a data column named like ours, or like one renamed so, gets one more `_` while here: no two alike, undone on writing
_LIKE_POSITION = re.compile("_*" + re.escape(POSITION))


def _stored(name: str) -> str:
    return "_" + name if _LIKE_POSITION.fullmatch(name) else name


def _given(name: str) -> str:
    return name[1:] if name != POSITION and _LIKE_POSITION.fullmatch(name) else name


class ShardWriter:
    def __init__(self, tmp_dir: str | os.PathLike, num_shards: int, rows_per_shard: int, *,
                 chunk_bytes: int = 64 << 20, buffer_bytes: int = 128 << 20):
        self.tmp = Path(tmp_dir)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.num_shards, self.rows_per_shard = num_shards, rows_per_shard
        self.chunk_bytes, self.buffer_bytes = chunk_bytes, buffer_bytes
        self.chunk_rows: int | None = None  # decided from the first rows' size
        self.n_chunks = 0
        self._buffers: dict[int, list[pa.Table]] = {}
        self._buffered = 0
        self._segments: dict[int, list[Path]] = {}
        self._schemas: dict[pa.Schema, None] = {}
        self.json_columns: list[str] = []  # columns written as JSON text (schema())
        self.json_only: list[str] = []
        self._spills = 0
        self.rows_added = 0

    def add(self, table: pa.Table, shard: np.ndarray, position: np.ndarray) -> None:
        """Queue `table`'s rows: row i goes to shard[i] at position[i]."""
        if table.num_rows == 0:
            return
        if self.chunk_rows is None:
            per_row = max(1.0, table.nbytes / table.num_rows)
            self.chunk_rows = int(min(max(16, self.chunk_bytes // per_row), max(1, self.rows_per_shard)))
            self.n_chunks = -(-self.rows_per_shard // self.chunk_rows)
        if any(map(_LIKE_POSITION.fullmatch, table.column_names)):
            table = table.rename_columns([_stored(c) for c in table.column_names])
        table = table.append_column(POSITION, pa.array(position, pa.int64()))
        self._schemas.setdefault(table.schema, None)
        key = np.asarray(shard, dtype=np.int64) * self.n_chunks + np.asarray(position) // self.chunk_rows
        order = np.argsort(key, kind="stable")
        sorted_keys = key[order]
        table = table.take(pa.array(order))  # one copy, grouped by bucket; the buckets are slices of it
        bounds = np.concatenate(([0], np.flatnonzero(np.diff(sorted_keys)) + 1, [order.size]))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            part = table.slice(int(lo), int(hi - lo))
            self._buffers.setdefault(int(sorted_keys[lo]), []).append(part)
        self._buffered += table.nbytes
        self.rows_added += table.num_rows
        if self._buffered > self.buffer_bytes:
            self._spill()

    def _spill(self) -> None:
        for key in sorted(self._buffers):
            parts = self._buffers[key]
            # one IPC file per run of parts with the same schema (a JSON source may widen it)
            runs: list[list[pa.Table]] = []
            for part in parts:
                if runs and runs[-1][0].schema.equals(part.schema):
                    runs[-1].append(part)
                else:
                    runs.append([part])
            for i, run in enumerate(runs):
                p = self.tmp / f"spill-{key:08d}-{self._spills:06d}-{i:03d}.arrow"
                with pa.ipc.new_file(str(p), run[0].schema) as w:
                    for part in run:
                        w.write_table(part)
                self._segments.setdefault(key, []).append(p)
        self._buffers.clear()
        self._buffered = 0
        self._spills += 1
        pa.default_memory_pool().release_unused()  # give the spilled buffers back to the OS

    def _chunk_table(self, key: int) -> pa.Table | None:
        tables = [pa.ipc.open_file(str(p)).read_all() for p in self._segments.get(key, [])]
        tables += self._buffers.get(key, [])
        if not tables:
            return None
        if len(tables) == 1:
            return tables[0]
        target = self._stored_schema()
        if self.json_columns:  # permissive concatenation would merge structs of different keys
            return pa.concat_tables([_conform(t, target) for t in tables])
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowTypeError, pa.ArrowInvalid):  # a column that is a number in one batch, text in another
            return pa.concat_tables([_conform(t, target) for t in tables])

    def schema(self) -> pa.Schema:
        """The data's columns in the shards (`_stored_schema`, under their own names)."""
        unified = self._stored_schema()
        return pa.schema([f.with_name(_given(f.name)) for f in unified if f.name != POSITION])

    def _stored_schema(self) -> pa.Schema:
        """`unified_schema` of the batches seen, under the names they are stored by here."""
        unified, json_columns, json_only = unified_schema(list(self._schemas))
        self.json_columns, self.json_only = list(map(_given, json_columns)), list(map(_given, json_only))
        return unified

    def finish(self, paths: list[Path], columns: list[str], metadata: dict[bytes, bytes] | None = None,
               compression: str = "snappy", on_shard=None) -> None:
        """Assemble the shards at `paths` (one per shard) with `columns` in this order; `on_shard()` after each."""
        if self.chunk_rows is None:
            raise CurateError("no selected row was found in the data")
        unified = self._stored_schema()
        stored = pa.schema([unified.field(_stored(c)) for c in columns])
        target = pa.schema([f.with_name(c) for f, c in zip(stored, columns)], metadata=metadata)
        for shard, path in enumerate(paths):
            writer = pq.ParquetWriter(str(path), target, compression=compression)
            try:
                expected = 0
                for chunk in range(self.n_chunks):
                    key = shard * self.n_chunks + chunk
                    table = self._chunk_table(key)
                    if table is None:
                        continue
                    table = table.sort_by(POSITION)
                    pos = table.column(POSITION).to_numpy()
                    want = np.arange(expected, expected + table.num_rows)
                    if not np.array_equal(pos, want):
                        missing = np.setdiff1d(np.arange(expected, min(self.rows_per_shard, expected + self.chunk_rows)), pos)
                        raise CurateError(f"shard {shard}: position {int(missing[0]) if missing.size else int(pos[0])} "
                                          "received no row or two rows (internal plan/data mismatch)")
                    expected += table.num_rows
                    table = _conform(table, stored).rename_columns(columns)
                    writer.write_table(table, row_group_size=max(1, table.num_rows))
                    self._buffers.pop(key, None)
                    for p in self._segments.pop(key, []):
                        p.unlink(missing_ok=True)
                    del table
                    pa.default_memory_pool().release_unused()
                if expected != self.rows_per_shard:
                    raise CurateError(f"shard {shard}: {expected} rows written, {self.rows_per_shard} planned")
            finally:
                writer.close()
            if on_shard is not None:
                on_shard()


def nested_type(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t)


def _json_text(types: list[pa.DataType]) -> bool:
    """Whether a column of these types (one per batch) must be JSON text: lists or objects in some batches, and
    text in others or objects of other keys."""
    from cluster_curate.io.datasets import same_shape
    types = [t for t in types if not pa.types.is_null(t)]
    if not any(nested_type(t) for t in types):
        return False
    return any(pa.types.is_string(t) for t in types) or not all(same_shape(types[0], t) for t in types[1:])


def json_text_array(column) -> pa.Array:
    """A column of lists, objects or numbers as JSON text, one value per row."""
    return pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in column.to_pylist()],
                    pa.string())


def json_text_aligned(tables: list[pa.Table], json_columns=()) -> tuple[list[pa.Table], list[str]]:
    """Tables to concatenate, with each column that must be JSON text in all of them (`json_columns`, or lists or
    objects in one and text or objects of other keys in another, as `schema()` decides) made JSON text in each;
    and those columns' names."""
    types: dict[str, list[pa.DataType]] = {}
    for t in tables:
        for f in t.schema:
            types.setdefault(f.name, []).append(f.type)
    names = [n for n, ts in types.items() if _json_text(ts) or (n in json_columns and any(map(nested_type, ts)))]
    names += [n for n in json_columns if n in types and n not in names]
    out = []
    for t in tables:
        for n in names:
            held = t.schema.field(n).type if n in t.column_names else pa.string()
            if not (pa.types.is_string(held) or pa.types.is_null(held)):  # lists, objects, or numbers of a batch
                t = t.set_column(t.column_names.index(n), n, json_text_array(t.column(n)))
        out.append(t)
    return out, names


def _castable_to_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) \
        or pa.types.is_null(t)


def unified_schema(schemas: list[pa.Schema]) -> tuple[pa.Schema, list[str], list[str]]:
    """The union of batches' schemas, with the columns that are JSON text in it and those of them that came as
    lists or objects in every batch: a column whose type differs between batches in a way Arrow cannot promote
    (numbers in one JSON batch, text in a later one) becomes text, as within one batch (the reader has warned about
    it); one of objects that is JSON text in some batches or has other keys in others becomes JSON text."""
    fields: dict[str, list[pa.Field]] = {}
    for schema in schemas:
        for f in schema:
            fields.setdefault(f.name, []).append(f)
    json_columns = [name for name, same_name in fields.items() if _json_text([f.type for f in same_name])]
    json_only = [name for name in json_columns
                 if all(nested_type(f.type) or pa.types.is_null(f.type) for f in fields[name])]
    if not json_columns:
        try:
            return pa.unify_schemas(schemas, promote_options="permissive"), [], []
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            pass
    unified = []
    for name, same_name in fields.items():
        if name in json_columns:
            unified.append(pa.field(name, pa.string()))
            continue
        try:
            unified.append(pa.unify_schemas([pa.schema([f]) for f in same_name],
                                            promote_options="permissive").field(name))
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            if not all(_castable_to_text(f.type) for f in same_name):
                raise CurateError(f"the data's column {_given(name)!r} changes type between rows "
                                  f"({', '.join(sorted({str(f.type) for f in same_name}))}) and cannot be "
                                  "combined in one Parquet shard") from None
            unified.append(pa.field(name, pa.string()))
    return pa.schema(unified), json_columns, json_only


def joined_tables(tables: list[pa.Table]) -> pa.Table:
    """Tables of one dataset's rows read apart as one table, joined as the shards join their batches
    (`unified_schema`)."""
    target = unified_schema([t.schema for t in tables])[0]
    return pa.concat_tables([_conform(t, target) for t in tables])


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` with exactly `target`'s columns (missing ones as nulls), in order and types."""
    arrays = []
    for field in target:
        if field.name in table.column_names:
            col = table.column(field.name)
            if col.type != field.type and pa.types.is_string(field.type) and nested_type(col.type):
                col = json_text_array(col)  # a JSON-text column: a batch where it came as lists or objects
            arrays.append(col if col.type == field.type else col.cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=target)
