"""Read any dataset container into examples, streaming.

CONTRACT (used by embed, shard, inspect, run; keep it stable):

    ds = open_dataset(source, ReadOptions(format=None, prompt_field=None, response_field=None, on_bad_row="error"))
    ds.source, ds.format, ds.fields          # detected (or forced) format and field mapping
    ds.record()                              # {"source", "fingerprint", "rows"} for artifact lineage (and
                                             # "absolute_path" when source is relative: recorded_source(record))
    for batch in ds.iter_batches(batch_rows=2048):
        batch.raw        # pa.RecordBatch: column `id` first, then every source column as read (rejected rows too)
        batch.examples   # list[Example] for the rows of this batch that parsed (rejects skipped when on_bad_row="skip")
        batch.num_rows   # its source rows, rejected ones too (without building `raw`)
    ds.rejects           # list[Reject] seen so far (skip mode); ds.write_rejects(path) writes them as JSONL

`id` is the 0-based row index in the source as read; it never changes downstream.
With on_bad_row="error" the first bad row raises CurateError naming file, line/row and field.
With prompts_only=True (an evaluation set read for its questions, as --decontaminate reads it: io/formats.py) a
row needs no response: its Example's response is then "", and a `turns` column of questions is read too.

Details of the contract:
- Sources (`ds.container` says which): .jsonl (also .json holding JSON Lines), .json (a list of records, or an
  object mapping id -> record), .parquet (a file, or a directory of .parquet files read in sorted path order),
  .csv and .tsv (every column read as text), .jsonl/.json/.csv/.tsv compressed as .gz, a directory of .jsonl/.json
  files (the files directly in it, in sorted name order; a bad row names its own file), a directory written by
  `datasets.save_to_disk` (a DatasetDict: the `train` split, or its only split; pass DIR/SPLIT for another), and a
  Hugging Face dataset id `NAME[@CONFIG][:SPLIT]` (or `hf:NAME...`) through `datasets.load_dataset` (split `train`
  by default).
- Rows: one per JSONL line that is not blank, per array element / mapping entry, per CSV/TSV/Parquet row. A bad row
  (invalid JSON, not an object, a missing or empty prompt/response, ...) still has its id, and still appears in
  `batch.raw` (its columns null when it could not be parsed), so ids of later rows never shift.
- `batch.raw` columns: `id` (int64) first, then the source columns in order of appearance. A source column
  called `id` is renamed `source_id` (and one called `source_id` `_source_id`, ...: `reserved_rename`, undone by
  `original_name`); the keys of a JSON mapping become a column `key`. For JSON sources the
  column types are inferred per batch, so a later batch may have a wider schema (a column that was all-null, a
  new column): combine batches with `pa.concat_tables(tables, promote_options="permissive")`. A column whose
  values mix text and other types is text; one of other values that one Arrow type would change (README, "inspect
  DATA", what is kept exactly: lists and objects whose keys, key order or items' types differ from row to row or
  from an earlier batch's, whole numbers beside floats inside them, empty objects, numbers past 64 bits) is JSON
  text from then on (`ds.json_columns`): one struct of every key would add null keys to the records, one float
  type make 3 3.0.
  Its earlier batches' lists and structs are not the records' JSON (Arrow's key order, 1 as 1.0):
  `ds.late_text_columns` names, after a pass, the columns it learned to be text part-way, and the next pass makes
  them text from the first row (`settled_pass`: shard's write and export's left-over rows read again;
  shard_writer.json_text_aligned turns structs into JSON text where one pass is all there is).
- Detection (no field option given): of JSON rows, the format that reads the most of the first rows
  (`fields.most_read_format`), warned of where some of them hold another format's columns; such a row is a bad
  row saying what it holds (`holds instruction/input/output, not the file's question/answer`).
- `ds.rows` is None until a full pass has run (known at once for Parquet and HF datasets);
  `ds.num_rows()` counts them if needed. `ds.record()` counts rows and hashes the bytes of the source
  (streamed blake2b: same bytes => same fingerprint).
- Skipped rows go beside a command's output, `OUT.rejects.jsonl` (`sidecar_path(OUT, names.REJECTS)`, written by
  `ds.write_rejects`).
- Memory does not grow with the size of the source: every container is read in chunks
  (benchmarks/bench_reader_memory.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from itertools import chain, islice, repeat
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cluster_curate.errors import CurateError
from cluster_curate.io.containers import JsonRow, file_fingerprint, open_container, read_errors
from cluster_curate.io.hf_datasets import HFDataset
from cluster_curate.io.fields import (ColumnsHint, detect_format, held_columns, most_read_format, read_columns,
                                     reads_row, resolve_fields)
from cluster_curate.io.formats import FORMATS, FieldMap, RecordError
from cluster_curate.io.preference import labelled_fields, to_preference
from cluster_curate.io.records import to_example

__all__ = ["Example", "Reject", "ReadOptions", "Batch", "Dataset", "open_dataset",
           "file_fingerprint", "recorded_source", "data_paths"]

_PEEK_ROWS = 200          # rows read at open time to detect the format


@dataclass(frozen=True)
class Example:
    id: int
    prompt: list  # chat turns [{"role": "system"|"user"|"assistant", "content": str}, ...], last one "user"
    response: str
    rejected: str | None = None  # a preference pair's rejected response (the response is the chosen one)


@dataclass
class Reject:
    id: int
    location: str  # "file:line" or "file: id N"
    field: str | None
    reason: str

    def to_dict(self) -> dict:
        return {"id": self.id, "location": self.location, "field": self.field, "reason": self.reason}

    def __str__(self) -> str:
        what = f"field '{self.field}': " if self.field else ""
        return f"{self.location}: {what}{self.reason}"


@dataclass
class ReadOptions:
    format: str | None = None
    prompt_field: str | None = None
    response_field: str | None = None
    rejected_field: str | None = None  # preference pairs: the rejected answer's column (default `rejected`)
    label_field: str | None = None  # preference pairs: the column naming the chosen answer (preference.labelled_fields)
    on_bad_row: str = "error"  # "error" | "skip"
    prompts_only: bool = False  # questions alone, a row needs no response: an evaluation set (formats.py)
    # rows no model is trained on (an evaluation set): a folder of splits is read whole, not refused
    # (containers._refuse_splits guards training data). Not how rows are read: neither recorded nor hashed
    not_trained: bool = False

    def _how_read(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "not_trained"}

    def given(self) -> dict:
        """The options not at their defaults, as a lineage record keeps them (to read the data again as it was)."""
        return {k: v for k, v in self._how_read().items() if v is not None and v is not False
                and not (k == "on_bad_row" and v == "error")}

    def hashed(self) -> dict:
        """Every option, as a fingerprint hashes them: one added later is left out at its default (`rejected_field`,
        `label_field` None), so what was made before it keeps its fingerprint."""
        return {k: v for k, v in self._how_read().items()
                if not (k in ("rejected_field", "label_field") and v is None)}


class Batch:
    """`raw` (Arrow, built on first access for JSON sources), `examples` and `num_rows` (the source rows it
    holds, bad ones too: known without building `raw`, which a pass that only counts rows must not pay for)."""

    def __init__(self, raw: pa.RecordBatch | None = None, examples: list | None = None, raw_fn=None,
                 num_rows: int | None = None):
        self._raw, self._raw_fn = raw, raw_fn
        self.examples = examples if examples is not None else []
        self.num_rows = raw.num_rows if raw is not None else num_rows

    @property
    def raw(self) -> pa.RecordBatch:
        if self._raw is None:
            self._raw = self._raw_fn()
            self._raw_fn = None
        return self._raw

    def __repr__(self) -> str:
        return f"Batch(examples={len(self.examples)})"


# ================================================================================================ dataset

def reserved_rename(name: str, reserved: tuple[str, ...]) -> str:
    """A source column's stored name beside columns of ours (`reserved`): X in reserved becomes `source_X`, and a
    column already named like that (`_`*k + `source_X`) gets one more `_`. A function of the name alone, so every
    batch and pass names a column alike, no two columns get one name, and `original_name` undoes it."""
    if name in reserved:
        return f"source_{name}"
    if name.lstrip("_") in {f"source_{r}" for r in reserved}:
        return "_" + name
    return name


def original_name(stored: str, reserved: tuple[str, ...]) -> str:
    """The source column `reserved_rename(_, reserved)` stored as `stored`."""
    if stored.startswith("_") and stored.lstrip("_") in {f"source_{r}" for r in reserved}:
        return stored[1:]
    if stored in {f"source_{r}" for r in reserved}:
        return stored.removeprefix("source_")
    return stored


SKIP_HINT = "pass --on-bad-row skip to skip bad rows"  # a bad row's hint (a mixture input's: mixture.SKIP_HINT)
RAW_RESERVED = ("id",)  # a raw batch's own column: the row index


def _rename_id(names: list[str]) -> dict[str, str]:
    """Source column -> raw column name: a source `id` becomes `source_id` (our `id` is the row index), a source
    `source_id` `_source_id` (reserved_rename)."""
    return {n: reserved_rename(n, RAW_RESERVED) for n in names}


def _as_text(values: list) -> pa.Array:
    """Values as text: strings kept, anything else as its JSON."""
    return pa.array([v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values],
                    type=pa.string())


def _column_array(values: list) -> tuple[pa.Array, bool]:
    """The column as Arrow, and whether its values had to become text: mixed types, numbers past 64 bits, or
    values Arrow's type would change (`_arrow_changes`: a record changed)."""
    try:
        array = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        # mixed types in one column (e.g. a number here, a string there): keep it as JSON text
        return _as_text(values), True
    if _may_change(array.type) and _arrow_changes(values, array.type, column=True):
        return _as_text(values), True
    return array, False


_LISTS = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)


def _may_change(t: pa.DataType) -> bool:
    """Whether an Arrow type holds objects or floats (at any depth of lists), which `_arrow_changes` checks."""
    if pa.types.is_struct(t) or pa.types.is_floating(t):
        return True
    return any(f(t) for f in _LISTS) and _may_change(t.value_type)


def settled_pass(ds, read_pass):
    """`read_pass()`, one pass over `ds` (a Dataset or a Mixture) that builds its raw columns, and once more when
    that pass learned a column to be JSON text part-way (`ds.late_text_columns`): its earlier batches came as
    Arrow's lists and structs, whose JSON is not the records' (key order, 1 as 1.0), and the second pass makes the
    column text from the first row. Returns what the last pass returned."""
    out = read_pass()
    return read_pass() if ds.late_text_columns else out


def same_shape(a: pa.DataType, b: pa.DataType, inside: bool = False) -> bool:
    """Whether two Arrow types give their objects the same keys, in the same order, and the numbers inside their
    objects and lists the same kind (whole or float) wherever both hold them (a null type, all nulls, fits
    anything): permissive promotion merges two structs into one of every key, and whole numbers with floats into
    floats (3 as 3.0), so a struct of other keys or a float where the other has integers is another shape of
    record, not a wider type. A column of numbers is one of floats (README, "inspect DATA", what is kept)."""
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        names = [a.field(i).name for i in range(a.num_fields)]
        return names == [b.field(i).name for i in range(b.num_fields)] and all(
            same_shape(a.field(i).type, b.field(i).type, True) for i in range(a.num_fields))
    if any(f(a) for f in _LISTS) and any(f(b) for f in _LISTS):
        return same_shape(a.value_type, b.value_type, True)
    whole_beside_float = (pa.types.is_integer(a) and pa.types.is_floating(b)) or (
        pa.types.is_floating(a) and pa.types.is_integer(b))
    return not (inside and whole_beside_float)


def _arrow_changes(values: list, t: pa.DataType, column: bool = False) -> bool:
    """Whether Arrow's type `t` for these values (a `column`'s, or those at one place of its objects and lists)
    would change them: objects there with other keys, or the same keys in another order (one struct holds every
    key, in one order: null keys added, a rendered tool call's arguments reordered), whole numbers beside floats
    inside objects and lists (one float type: a call's `{"days": 3}` as 3.0; a column of numbers is one of floats,
    unless a float would round a whole number past 2**53), true or false after a float (1.0 and 0.0), or objects
    with no key at all (a struct Parquet cannot write). Places that hold no object and no float are not walked."""
    if pa.types.is_floating(t):  # the types seen first: a map at C speed over long lists of floats
        kinds = set(map(type, values))
        if bool in kinds:  # Arrow reads false after a float as 0.0
            return True
        if int not in kinds:
            return False
        return not column or any(type(v) is int and abs(v) > 2 ** 53 for v in values)
    values = [v for v in values if v is not None]
    if pa.types.is_struct(t):
        if t.num_fields == 0 or len({tuple(v) for v in values}) > 1:
            return True
        return any(_arrow_changes([v.get(f.name) for v in values], f.type) for f in t if _may_change(f.type))
    if _may_change(t):  # a list of (lists of) objects or floats: their items, a list where they are walked again
        items = chain.from_iterable(values)
        return _arrow_changes(items if pa.types.is_floating(t.value_type) else list(items), t.value_type)
    return False


class Dataset:
    """An opened dataset: container + detected format. Iterate with `iter_batches`."""

    def __init__(self, source: str, opts: ReadOptions):
        self.source, self.opts = str(source), opts
        if opts.on_bad_row not in ("error", "skip"):
            raise CurateError(f"--on-bad-row must be 'error' or 'skip', not {opts.on_bad_row!r}")
        with read_errors(self.source):
            self.path, self._src = open_container(str(source), trained=not opts.not_trained)
        self.container = self._src.kind
        self.split: str | None = getattr(self._src, "split", None)  # a Hugging Face dataset's split read
        self.rejects: list[Reject] = []
        # a mixture's input: its first row's id among all inputs, and how a bad row is skipped there (io/mixture.py)
        self.id_offset, self.skip_hint = 0, SKIP_HINT
        self.chosen_from: dict[str, int] = {}  # labelled pairs: {answer column: pairs whose chosen answer it holds}
        self.rows: int | None = getattr(self._src, "rows", None)
        self._fingerprint: str | None = None
        self._key_column = "key"
        self._column_types: dict[str, pa.DataType] = {}  # JSON sources: each column's type in the batches so far
        self.text_columns: list[str] = []  # JSON columns kept as text because their values mix types
        # ... of which those holding no text (lists and objects whose types or keys differ from row to row, numbers
        # a Parquet type would change): JSON text (`json_columns`, raw names), unless a row holds plain text there
        # (`_plain_columns`)
        self._json_flagged: list[str] = []
        self._plain_columns: set[str] = set()
        # this pass: the columns a batch built as lists, objects or floats (whose Arrow text is not their JSON), and
        # those of them a later batch made text
        self._built_typed: set[str] = set()
        self.late_text_columns: list[str] = []
        self.skip_ids: frozenset[int] = frozenset()  # rows left out of `examples` (embed: exact copies)
        # how a bad row's hint of columns is worded: flags for one input, a mixture file's keys (io/mixture.py)
        self.hint_wording = ColumnsHint.as_flags
        with read_errors(self.source):
            self.field_map: FieldMap = self._detect()
        self.format = self.field_map.format
        self.fields = self.field_map.as_dict()

    @property
    def json_columns(self) -> list[str]:
        """The raw columns kept as JSON text whose every value so far is a list or an object: `export --for jsonl`
        writes them back as they were. A column that also holds plain text is text, never decoded."""
        return [c for c in self._json_flagged if c not in self._plain_columns]

    # ------------------------------------------------------------------------------------------- detection
    def _detect(self) -> FieldMap:
        if self.rows == 0:
            raise CurateError(f"{self.source}: dataset is empty (no rows)")
        if not hasattr(self._src, "iter_rows"):
            names = None
            for b in self._src.batches():
                names = b.schema.names
                break
            if names is None:
                raise CurateError(f"{self.source}: dataset is empty (no rows)")
        else:
            # bad rows are reported by iter_batches, in order; here they only matter when nothing else is readable
            seen: dict[str, None] = {}
            shapes: dict[frozenset, list] = {}  # the columns a row holds values in -> [rows, the first (id, row)]
            n = 0
            first_bad = None
            for row in self._src.iter_rows():
                n += 1
                if row.record is None:
                    first_bad = first_bad or (n - 1, row)
                else:
                    seen.update(dict.fromkeys(row.record))
                    shapes.setdefault(frozenset(held_columns(row.record)), [0, (n - 1, row)])[0] += 1
                if n >= _PEEK_ROWS and seen:
                    break
            if n == 0:
                raise CurateError(f"{self.source}: dataset is empty (no rows)")
            if not seen and first_bad is None:
                raise CurateError(f"{self.source}: the records have no fields (the first {n} rows are empty "
                                  "JSON objects)")
            if not seen:
                id_, row = first_bad
                if n == 1 or self.opts.on_bad_row != "skip":
                    self._raise_row(id_, row, row.field, row.error)
                raise CurateError(f"{self.source}: no readable record in the first {n} rows (the first: "
                                  f"{self._message(id_, row, row.field, row.error, hint=False)})")
            names = list(seen)
            if "key" in names:
                self._key_column = "source_key"
        o = self.opts
        # JSON rows (their keys may differ from row to row) whose fields no option names
        voted = hasattr(self._src, "iter_rows") and not (o.format or o.prompt_field or o.response_field
                                                         or o.rejected_field or o.label_field)
        fmt = o.format
        if voted:
            names, fmt = self._most_read(names, shapes)
        try:
            fields = resolve_fields(names, fmt, o.prompt_field, o.response_field, source=self.source,
                                    prompts_only=o.prompts_only, rejected_field=o.rejected_field,
                                    label_field=o.label_field)
        except CurateError:
            self._refuse_own_artifact()  # else told to pass --prompt-field for a file of ids and vectors
            raise
        if voted and fields.format in FORMATS:  # not questions alone (turns), read whatever else a row holds
            self._warn_other_schema(fields, shapes, n)
        return fields

    def _most_read(self, names: list[str], shapes: dict[frozenset, list]) -> tuple[list[str], str | None]:
        """The columns and format to detect from: the format that reads the most of the first rows (a row of
        another schema among them does not make the others bad rows), from the columns of the rows it reads;
        (`names`, None) where that is the format all the columns give (the file reads as it always has)."""
        fmt, _ = most_read_format({cols: rows for cols, (rows, _) in shapes.items()})
        if fmt is None or fmt == detect_format(names) or fmt not in FORMATS:  # turns (questions alone): detected
            return names, None
        held = set().union(*(cols for cols in shapes if reads_row(fmt, cols)))
        return [c for c in names if c in held], fmt

    def _warn_other_schema(self, fields: FieldMap, shapes: dict[frozenset, list], n: int) -> None:
        """Say once, before the work, where the first rows hold another format's columns: those rows are bad
        rows (`_other_columns` says so of each)."""
        fit = sum(rows for cols, (rows, _) in shapes.items() if reads_row(fields.format, cols))
        other = sorted(first for cols, (_, first) in shapes.items()
                       if not reads_row(fields.format, cols) and detect_format(cols))
        if not other:
            return
        id_, row = other[0]
        from cluster_curate import console
        console.warn(f"{self.source}: {fit} of the first {n} rows hold the columns of format {fields.format} "
                     f"({'/'.join(read_columns(fields))}), read so; {self._location(id_, row)} holds "
                     f"{_shown(held_columns(row.record))}: rows like it are bad rows; split the file by format and "
                     + ("give each part as its own set" if self.opts.prompts_only else
                        "give the parts as one mixture, which reads each as its own"), once=True)

    def _other_columns(self, rec: dict) -> str | None:
        """A bad row's reason where it lacks a column the file is read from and holds another format's: not
        "missing response" of a row that holds an answer in another column."""
        held, fields = held_columns(rec), self.field_map
        needed = [c for c in read_columns(fields) if c != fields.input]  # alpaca's input is optional
        if all(c in held or c.split(".")[0] in held for c in needed) or detect_format(held) is None:
            return None
        return f"holds {_shown(held)}, not the file's {'/'.join(read_columns(fields))}"

    def _refuse_own_artifact(self) -> None:
        """Embeddings, clusters or a selection given where the raw data goes (`shard sel --data emb.parquet`)."""
        from cluster_curate.io import names
        from cluster_curate.io.artifacts import read_meta
        if self.container != "parquet":
            return
        path = Path(self.path)
        run = path.is_dir() and (path / names.RUN_STATE).exists()  # a `run` folder: its embeddings say the data
        try:
            meta = read_meta(path / names.RUN_OUTPUTS["embed"] if run else path)
        except CurateError:
            return
        if meta.kind in (names.EMBEDDINGS, names.CLUSTERS, names.SELECTION):
            what = "`run` folder" if run else f"'{meta.kind}' artifact"
            raise CurateError(f"{self.source}: is a cluster-curate {what}, not data: give the dataset it was made "
                              f"from ({meta.dataset.get('source')})")

    # ------------------------------------------------------------------------------------------- lineage
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            if isinstance(self._src, HFDataset) and self._src.kind == "hf-hub":
                files = [f for f in self._src.files if f.exists()]
                if files:
                    h = hashlib.blake2b(digest_size=12)
                    for f in sorted(files):
                        h.update(file_fingerprint(f).encode())
                    self._fingerprint = h.hexdigest()
                else:
                    self._fingerprint = hashlib.blake2b(self._src.hf._fingerprint.encode(), digest_size=12).hexdigest()
            else:
                self._fingerprint = file_fingerprint(self.path)
        return self._fingerprint

    def num_rows(self) -> int:
        """Rows in the source (bad rows included): known after a pass, else counted now."""
        if self.rows is None:
            with read_errors(self.source):
                self.rows = self._src.count()
        return self.rows

    def location(self) -> dict:
        """{"absolute_path": ...} of a local source written relative to the working directory, else {}. Recorded
        beside `source` (as written: what summaries and messages show) so that a command run from another
        directory still finds the data (`recorded_source`); no fingerprint hashes it."""
        if self.container == "hf-hub":
            return {}
        resolved = os.path.abspath(self.path)
        return {} if resolved == self.source else {"absolute_path": resolved}

    def record(self) -> dict:
        read = self.opts.given()
        return {"source": self.source, **self.location(), "fingerprint": self.fingerprint(), "rows": self.num_rows(),
                **({"options": read} if read else {})}

    # ------------------------------------------------------------------------------------------- reading
    def _location(self, id_: int, row: JsonRow | None) -> str:
        """Where a row is: its file (the source, or one file of a directory) and line, else its id (columnar)."""
        if row is None or row.line is None:
            return f"{self.source}: " + (f"row {id_} (id {id_ + self.id_offset})" if self.id_offset else f"id {id_}")
        return f"{row.file or self.source}:{row.line}"

    def line_of(self, id_: int) -> str | None:
        """`file:line` where row `id_` starts, as a bad row's message names it; None where the source has no lines
        (Parquet, Arrow: its messages name the row). Reads the rows up to it: for a message, not a pass."""
        if not hasattr(self._src, "iter_rows"):
            return None
        with read_errors(self.source):
            row = next(islice(self._src.iter_rows(), id_, None), None)
        return None if row is None or row.line is None else self._location(id_, row)

    def _message(self, id_: int, row: JsonRow | None, field: str | None, reason: str, hint: bool = True) -> str:
        what = f"field '{field}': " if field else ""
        lined = row is not None and row.line is not None
        notes = ([f"id {id_ + self.id_offset}"] if lined else []) + ([self.skip_hint] if hint else [])
        return f"{self._location(id_, row)}: {what}{reason}" + (f" ({'; '.join(notes)})" if notes else "")

    def _raise_row(self, id_: int, row: JsonRow | None, field: str | None, reason: str):
        raise CurateError(self._message(id_, row, field, reason, hint=self.opts.on_bad_row != "skip"))

    def _bad(self, id_: int, row: JsonRow | None, field: str | None, reason: str) -> None:
        if self.opts.on_bad_row != "skip":
            self._raise_row(id_, row, field, reason)
        self.rejects.append(Reject(id_, self._location(id_, row), field, reason))

    def _convert(self, id_: int, row: JsonRow | None, rec: dict, examples: list) -> None:
        if id_ in self.skip_ids:
            return
        try:
            if self.field_map.rejected:
                fields = labelled_fields(rec, self.field_map)  # the row's answers in the order of its label, if any
                examples.append(Example(id_, *to_preference(rec, fields)))
                if self.field_map.label:
                    self.chosen_from[fields.response or fields.prompt] += 1
                return
            prompt, response = to_example(rec, self.field_map)
        except RecordError as e:
            self._bad(id_, row, e.field, self._other_columns(rec) or e.worded(self.hint_wording))
            return
        examples.append(Example(id_, prompt, response))

    def iter_batches(self, batch_rows: int = 2048, examples: bool = True) -> Iterator[Batch]:
        """Batches of up to `batch_rows` source rows, in order. Resets `rejects` and `chosen_from`; sets `rows` at
        the end. examples=False: raw rows only (no Example conversion, no row checks), for a pass that only copies
        rows already validated (shard); a third of the reader's time on columnar sources."""
        if batch_rows < 1:
            raise ValueError("batch_rows must be >= 1")
        self.rejects = []
        fm = self.field_map
        self.chosen_from = dict.fromkeys((fm.response or fm.prompt, fm.rejected), 0) if fm.label else {}
        self._built_typed, self.late_text_columns = set(), []
        with read_errors(self.source):
            if hasattr(self._src, "iter_rows"):
                yield from self._iter_json(batch_rows, examples)
            else:
                yield from self._iter_arrow(batch_rows, examples)

    def _iter_json(self, batch_rows: int, examples: bool = True) -> Iterator[Batch]:
        next_id = 0
        buf: list[JsonRow] = []
        for row in self._src.iter_rows():
            buf.append(row)
            if len(buf) == batch_rows:
                yield self._json_batch(buf, next_id, examples)
                next_id += len(buf)
                buf = []
        if buf:
            yield self._json_batch(buf, next_id, examples)
            next_id += len(buf)
        self.rows = next_id

    def _json_batch(self, rows: list[JsonRow], first_id: int, convert: bool = True) -> Batch:
        examples: list[Example] = []
        for i, row in enumerate(rows if convert else ()):
            if row.record is None:
                self._bad(first_id + i, row, row.field, row.error)
            else:
                self._convert(first_id + i, row, row.record, examples)
        return Batch(examples=examples, raw_fn=lambda: self._json_raw(rows, first_id), num_rows=len(rows))

    def _json_raw(self, rows: list[JsonRow], first_id: int) -> pa.RecordBatch:
        names: dict[str, None] = {}
        keyed = any(r.key is not None for r in rows)
        records = [{} if r.record is None else r.record for r in rows]
        for record in records:
            names.update(dict.fromkeys(record))
        rename = _rename_id(list(names))
        cols = {"id": pa.array(range(first_id, first_id + len(rows)), type=pa.int64())}
        if keyed:
            cols[self._key_column] = pa.array([r.key for r in rows], type=pa.string())
        for name in names:
            values = list(map(dict.get, records, repeat(name)))  # None where a row lacks it (or was not read)
            array, mixed = _column_array(values)
            before = self._column_types.setdefault(name, array.type)
            nested = all(isinstance(v, (list, dict)) for v in values if v is not None)
            # no value is text: their JSON text reads back as they were (README, "inspect DATA", what is kept)
            decoded = not any(isinstance(v, str) for v in values)
            if not decoded:
                self._plain_columns.add(rename[name])
            known_text = rename[name] in self._json_flagged or name in self.text_columns
            if not mixed and decoded and (known_text or not same_shape(before, array.type)):
                # text in an earlier batch (of this pass or one before), or objects of other keys (floats where it
                # had whole numbers) than an earlier batch's: text here too, each value's JSON as the record holds it
                array, mixed = _as_text(values), True
            if mixed or (before != array.type and pa.types.is_string(array.type) != pa.types.is_string(before)
                         and not pa.types.is_null(before) and not pa.types.is_null(array.type)):
                self._mixed_column(name, decoded, nested, rename[name])
                if decoded and not pa.types.is_string(array.type):  # values after text in an earlier batch
                    array = _as_text(values)
            if pa.types.is_string(array.type) and name in self._built_typed:
                if rename[name] not in self.late_text_columns:
                    self.late_text_columns.append(rename[name])
            elif (nested or _may_change(array.type)) and not pa.types.is_null(array.type):
                self._built_typed.add(name)
            cols[rename[name]] = array
        return pa.RecordBatch.from_pydict(cols)

    def _mixed_column(self, name: str, decoded: bool, nested: bool, raw_name: str) -> None:
        """Say once (per command: console.warn's `once`) that a column holds text and other values, lists or
        objects whose items differ in type or keys (`nested`), or other values one Parquet type would change
        (`decoded`: no text among them): Parquet keeps one type per column, so the shards store it as text (a
        number 17 as '17', a list as its JSON), JSON text that readers decode where no value was text."""
        if decoded and raw_name not in self._json_flagged:
            self._json_flagged.append(raw_name)
        if name in self.text_columns:
            return
        self.text_columns.append(name)
        from cluster_curate import console
        if nested:
            console.warn(f"{self.source}: column {name!r} holds lists or objects whose items differ in type or keys "
                         "from row to row (e.g. a message `content` that is a list of parts where others are text, "
                         "`tool_calls` in some turns only); shards keep the column as JSON text, which `export --for "
                         "jsonl` writes back as it was", once=True)
        elif decoded:
            console.warn(f"{self.source}: column {name!r} holds numbers no Parquet type keeps as written (whole "
                         "numbers past 64 bits, or past 2**53 beside fractions, which a float rounds) or beside "
                         "booleans, lists or objects; shards keep the column as JSON text, which load_shard and "
                         "`export --for jsonl|parquet` give back as written", once=True)
        else:
            console.warn(f"{self.source}: column {name!r} holds text in some rows and other values in others; "
                         "shards keep it as text (numbers and lists as their JSON text)", once=True)

    def _iter_arrow(self, batch_rows: int, convert: bool = True) -> Iterator[Batch]:
        next_id = 0
        fm = self.field_map
        fields = [f for f in (*fm.prompt_columns, fm.response, fm.input, fm.system, fm.rejected, fm.label, fm.tools)
                  if f]
        needed = dict.fromkeys(c for f in fields for c in (f, f.split(".")[0]))  # a nested path reads its root
        for b in _rebatch(self._src.batches(batch_rows), batch_rows):
            n = b.num_rows
            examples: list[Example] = []
            present = [c for c in needed if c in b.schema.names]
            records = b.select(present).to_pylist() if convert else ()
            for i, rec in enumerate(records):
                self._convert(next_id + i, None, rec, examples)
            names = b.schema.names
            rename = _rename_id(names)
            raw = pa.RecordBatch.from_arrays([pa.array(range(next_id, next_id + n), type=pa.int64()), *b.columns],
                                             names=["id", *(rename[c] for c in names)])
            next_id += n
            yield Batch(raw, examples)
        self.rows = next_id

    def write_rejects(self, path) -> Path:
        """All rejects as JSONL ({id, location, field, reason} per line), written atomically."""
        from cluster_curate.io.writer import atomic_write_bytes
        data = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in self.rejects)
        atomic_write_bytes(path, data.encode("utf-8"))
        return Path(path)


def _shown(columns: list[str], most: int = 8) -> str:
    """A row's columns as a message names them: a/b/c, the first `most` of many."""
    return "/".join(columns[:most]) + (f"/... ({len(columns)} columns)" if len(columns) > most else "")


def _rebatch(batches: Iterator[pa.RecordBatch], size: int) -> Iterator[pa.RecordBatch]:
    """Arrow batches of exactly `size` rows (the last one shorter)."""
    pending: list[pa.RecordBatch] = []
    have = 0
    for b in batches:
        if pending and b.schema != pending[0].schema:  # e.g. Parquet part files with different schemas
            yield _concat(pending)
            pending, have = [], 0
        while b.num_rows:
            take = min(size - have, b.num_rows)
            pending.append(b.slice(0, take))
            have += take
            b = b.slice(take)
            if have == size:
                yield _concat(pending)
                pending, have = [], 0
    if pending:
        yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def data_paths(data) -> list[str]:
    """A command's DATA (one path, several, or None) as a list of strings."""
    return [str(data)] if isinstance(data, (str, os.PathLike)) else [str(d) for d in (data or ())]


def recorded_source(record: dict) -> str:
    """The source a lineage record names, to open it again: as written while that is there (a hub id, or a path
    read from the directory it was written in, opens as before), else the absolute path recorded beside it when
    that is there (a relative path read from another working directory)."""
    source = str(record.get("source") or "")
    resolved = record.get("absolute_path")
    if isinstance(resolved, str) and not os.path.exists(os.path.expanduser(source)) and os.path.exists(resolved):
        return resolved
    return source


def open_dataset(source, opts: ReadOptions | None = None) -> Dataset:
    """Open a dataset (see the module docstring); detects the format from its first rows."""
    return Dataset(str(source), opts or ReadOptions())
