"""Read any dataset container into examples, streaming.

CONTRACT (used by embed, shard, inspect, run; keep it stable):

    ds = open_dataset(source, ReadOptions(format=None, prompt_field=None, response_field=None, on_bad_row="error"))
    ds.source, ds.format, ds.fields          # detected (or forced) format and field mapping
    ds.record()                              # {"source", "fingerprint", "rows"} for artifact lineage
    for batch in ds.iter_batches(batch_rows=2048):
        batch.raw        # pa.RecordBatch: column `id` first, then every source column as read (rejected rows too)
        batch.examples   # list[Example] for the rows of this batch that parsed (rejects skipped when on_bad_row="skip")
    ds.rejects           # list[Reject] seen so far (skip mode); ds.write_rejects(path) writes them as JSONL

`id` is the 0-based row index in the source as read; it never changes downstream.
With on_bad_row="error" the first bad row raises CurateError naming file, line/row and field.

Details of the contract:
- Sources (`ds.container` says which): .jsonl (also .json holding JSON Lines), .json (a list of records, or an
  object mapping id -> record), .parquet (a file, or a directory of .parquet files read in sorted path order),
  .csv (every column read as text), .jsonl/.json/.csv compressed as .gz, a directory written by `datasets.save_to_disk` (a DatasetDict: the `train` split, or its only split;
  pass DIR/SPLIT for another), and a Hugging Face dataset id `NAME[@CONFIG][:SPLIT]` (or `hf:NAME...`) through
  `datasets.load_dataset` (split `train` by default).
- Rows: one per JSONL line that is not blank, per array element / mapping entry, per CSV/Parquet row. A bad row
  (invalid JSON, not an object, a missing or empty prompt/response, ...) still has its id, and still appears in
  `batch.raw` (its columns null when it could not be parsed), so ids of later rows never shift.
- `batch.raw` columns: `id` (int64) first, then the source columns in order of appearance. A source column
  called `id` is renamed `source_id`; the keys of a JSON mapping become a column `key`. For JSON sources the
  column types are inferred per batch, so a later batch may have a wider schema (a column that was all-null, a
  new column): combine batches with `pa.concat_tables(tables, promote_options="permissive")`.
- `ds.rows` is None until a full pass has run (known at once for Parquet and HF datasets);
  `ds.num_rows()` counts them if needed. `ds.record()` counts rows and hashes the bytes of the source
  (streamed blake2b: same bytes => same fingerprint).
- Skipped rows go, by convention, to `default_rejects_path(OUT)` beside a command's output: `OUT.rejects.jsonl`.
- Memory does not grow with the size of the source: every container is read in chunks
  (benchmarks/bench_reader_memory.py).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cluster_curate.errors import CurateError
from cluster_curate.io.formats import FieldMap, RecordError, resolve_fields, to_example

__all__ = ["Example", "Reject", "ReadOptions", "Batch", "Dataset", "open_dataset", "default_rejects_path",
           "file_fingerprint"]

_PEEK_ROWS = 200          # rows read at open time to detect the format
_CHUNK_BYTES = 1 << 20     # read size for JSON / CSV


@dataclass(frozen=True)
class Example:
    id: int
    prompt: list  # chat turns [{"role": "system"|"user"|"assistant", "content": str}, ...], last one "user"
    response: str


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
    on_bad_row: str = "error"  # "error" | "skip"


class Batch:
    """`raw` (Arrow, built on first access for JSON sources) and `examples`."""

    def __init__(self, raw: pa.RecordBatch | None = None, examples: list | None = None, raw_fn=None):
        self._raw, self._raw_fn = raw, raw_fn
        self.examples = examples if examples is not None else []

    @property
    def raw(self) -> pa.RecordBatch:
        if self._raw is None:
            self._raw = self._raw_fn()
            self._raw_fn = None
        return self._raw

    def __repr__(self) -> str:
        return f"Batch(examples={len(self.examples)})"


def default_rejects_path(out: str | os.PathLike) -> Path:
    """Where a command writing `out` puts its rejects: `OUT.rejects.jsonl` beside it (`x.parquet` -> `x.rejects.jsonl`,
    a directory `d` -> `d.rejects.jsonl`)."""
    p = Path(out)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name.rstrip("/")
    return p.with_name(f"{stem}.rejects.jsonl")


def file_fingerprint(path: Path) -> str:
    """blake2b of the bytes of a file, or of every file of a directory (with their relative paths), streamed."""
    h = hashlib.blake2b(digest_size=12)
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        try:
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
        except OSError as e:
            raise CurateError(f"{f}: cannot read ({e.strerror or e})") from None
    return h.hexdigest()


# ================================================================================================ sources
# A source yields chunks of rows. JSON-like sources yield `_Rows` (python dicts), columnar ones Arrow batches.

@dataclass
class _Row:
    line: int | None        # 1-based line where the record starts, when known
    record: dict | None     # None when the row could not be parsed
    error: str | None = None  # why it could not be parsed
    key: str | None = None  # the key of a JSON mapping entry


def _utf8_error(path, line: int, exc: UnicodeDecodeError, data: bytes, start: int) -> str:
    bad = data[exc.start:exc.start + 1].hex()
    col = exc.start - start + 1
    return f"{path}:{line}: not valid UTF-8 text (byte 0x{bad} at column {col}); re-encode the file as UTF-8"


def _open_binary(path: Path):
    """The file's bytes; .gz files are decompressed as they are read."""
    try:
        if path.name.lower().endswith(".gz"):
            import gzip
            with open(path, "rb"):
                pass  # permission / directory errors with our message
            return gzip.open(path, "rb")
        return open(path, "rb")
    except PermissionError:
        raise CurateError(f"{path}: cannot read the file (permission denied)") from None
    except IsADirectoryError:
        raise CurateError(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise CurateError(f"{path}: cannot read the file ({e.strerror or e})") from None


def _first_non_utf8_line(path: Path) -> str | None:
    """Locate the first line that is not UTF-8 (only called to explain an error)."""
    with _open_binary(path) as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return _utf8_error(path, lineno, e, line, 0)
    return None


class _JsonLines:
    kind = "jsonl"

    def __init__(self, path: Path):
        self.path = path

    def iter_rows(self) -> Iterator[_Row]:
        with _open_binary(self.path) as f:
            for lineno, data in enumerate(f, 1):
                if lineno == 1 and data.startswith(codecs.BOM_UTF8):
                    data = data[len(codecs.BOM_UTF8):]
                if not data.strip():
                    continue
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield _Row(lineno, None, _utf8_error(self.path, lineno, e, data, 0).split(": ", 1)[1])
                    continue
                try:
                    rec = json.loads(text.rstrip("\r\n"))
                except json.JSONDecodeError as e:
                    yield _Row(lineno, None, f"invalid JSON ({e.msg}: column {e.colno})")
                    continue
                if not isinstance(rec, dict):
                    yield _Row(lineno, None, f"expected a JSON object, found {_json_type(rec)}")
                    continue
                yield _Row(lineno, rec)

    def count(self) -> int:
        n = 0
        with _open_binary(self.path) as f:
            for data in f:
                if data.strip():
                    n += 1
        return n


def _json_type(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


_WS = re.compile(r"[ \t\n\r]*")


class _JsonDocument:
    """A top-level JSON array of records, or an object mapping id -> record, decoded one value at a time
    (json.JSONDecoder.raw_decode over a sliding text buffer), so memory holds one chunk plus one record."""

    kind = "json"

    def __init__(self, path: Path):
        self.path = path

    def iter_rows(self) -> Iterator[_Row]:
        path = self.path
        decoder = json.JSONDecoder()
        utf8 = codecs.getincrementaldecoder("utf-8")()
        f = _open_binary(path)
        buf, pos, eof = "", 0, False
        line, line_pos = 1, 0           # line number at buf[line_pos]
        chunk_size = _CHUNK_BYTES
        first = True

        def line_at(p: int) -> int:
            nonlocal line, line_pos
            if p > line_pos:
                line += buf.count("\n", line_pos, p)
                line_pos = p
            return line

        def refill() -> bool:
            """Append the next chunk (dropping what is consumed); False at end of file."""
            nonlocal buf, pos, eof, line_pos, chunk_size, first
            if eof:
                return False
            line_at(pos)
            data = f.read(max(chunk_size, len(buf) - pos))  # grows for records larger than a chunk
            if first and data.startswith(codecs.BOM_UTF8):
                data = data[len(codecs.BOM_UTF8):]
            first = False
            try:
                text = utf8.decode(data, final=not data)
            except UnicodeDecodeError as e:
                ln = line_at(len(buf)) + data.count(b"\n", 0, e.start)
                start = data.rfind(b"\n", 0, e.start) + 1
                raise CurateError(_utf8_error(path, ln, e, data, start)) from None
            buf = buf[pos:] + text
            line_pos -= pos
            pos = 0
            if not data:
                eof = True
                return False
            return True

        def skip_ws():
            nonlocal pos
            while True:
                pos = _WS.match(buf, pos).end()
                if pos < len(buf) or not refill():
                    return

        def invalid(p: int, msg: str):
            raise CurateError(f"{path}:{line_at(p)}: invalid JSON ({msg})")

        def decode_value():
            nonlocal pos
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError as e:
                    genuine = e.pos < len(buf) - 64 and not e.msg.startswith("Unterminated string")
                    if genuine or not refill():
                        invalid(e.pos, f"{e.msg}")
                    continue
                if end >= len(buf) and refill():  # a number may continue in the next chunk
                    continue
                pos = end
                return value

        try:
            skip_ws()
            if pos >= len(buf):
                return  # empty file
            opener = buf[pos]
            if opener not in "[{":
                invalid(pos, f"expected a JSON array of records or an object mapping ids to records, found {opener!r}")
            closer = "]" if opener == "[" else "}"
            pos += 1
            index = 0
            while True:
                skip_ws()
                if pos >= len(buf):
                    invalid(pos, f"unexpected end of file, expected {closer!r}")
                if buf[pos] == closer:
                    pos += 1
                    break
                if index:
                    if buf[pos] != ",":
                        invalid(pos, f"expected ',' or {closer!r} between records")
                    pos += 1
                    skip_ws()
                start_line = line_at(pos)
                key = None
                if opener == "{":
                    if pos >= len(buf) or buf[pos] != '"':
                        invalid(pos, "expected a string key")
                    key = decode_value()
                    skip_ws()
                    if pos >= len(buf) or buf[pos] != ":":
                        invalid(pos, "expected ':' after a key")
                    pos += 1
                    skip_ws()
                value = decode_value()
                index += 1
                if opener == "{" and index == 1 and not isinstance(value, dict):
                    # not a mapping of id -> record: one pretty-printed record, or records nested under a key
                    nested = " (records nested under this key? extract that list first)" if isinstance(value, list) else ""
                    raise CurateError(f"{path}: a JSON object whose values are not records (key {key!r} holds "
                                      f"{_json_type(value)}){nested}; expected a list of records, an object mapping "
                                      "ids to records, or JSON Lines")
                if isinstance(value, dict):
                    yield _Row(start_line, value, key=key)
                else:
                    what = f"the value of key {key!r}" if key is not None else "the array element"
                    yield _Row(start_line, None, f"{what} is {_json_type(value)}, expected a record (a JSON object)",
                               key=key)
            skip_ws()
            if pos < len(buf):
                invalid(pos, "extra data after the end of the top-level value")
        finally:
            f.close()

    def count(self) -> int:
        return sum(1 for _ in self.iter_rows())


def _looks_like_json_lines(path: Path) -> bool:
    """A .json file starting with '{' is JSON Lines when its first line is a whole object and more follows,
    or when that object is one record (not a mapping of id -> record)."""
    with _open_binary(path) as f:
        first = f.readline(1 << 20)
        while first and not first.strip():  # leading blank lines
            first = f.readline(1 << 20)
        if not first.endswith(b"\n") and len(first) == 1 << 20:
            return False  # one huge line: a mapping written on one line
        try:
            obj = json.loads(first.decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False
        if not isinstance(obj, dict):
            return False
        rest = f.read(4096)
        if rest.strip():
            return True
        return not (obj and all(isinstance(v, dict) for v in obj.values()))


class _Csv:
    kind = "csv"

    def __init__(self, path: Path):
        self.path = path

    def _reader(self):
        import pyarrow.csv as pacsv
        parse = pacsv.ParseOptions(newlines_in_values=True)
        read = pacsv.ReadOptions(block_size=_CHUNK_BYTES)
        with _open_binary(self.path):
            pass  # permission / directory errors with our message
        try:
            names = pacsv.open_csv(self._stream(), read_options=read, parse_options=parse).schema.names
            convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names})
            return pacsv.open_csv(self._stream(), read_options=read, parse_options=parse, convert_options=convert)
        except pa.ArrowInvalid as e:
            self._raise(e)

    def _stream(self):
        return pa.input_stream(str(self.path), compression="gzip" if self.path.name.lower().endswith(".gz") else None)

    def _raise(self, e: Exception):
        msg = str(e)
        if "UTF8" in msg or "UTF-8" in msg:
            located = _first_non_utf8_line(self.path)
            if located:
                raise CurateError(located) from None
        if "Empty CSV file" in msg:
            raise CurateError(f"{self.path}: dataset is empty (no rows)") from None
        raise CurateError(f"{self.path}: cannot parse CSV ({msg.splitlines()[0]})") from None

    def batches(self, batch_rows: int = 0) -> Iterator[pa.RecordBatch]:
        reader = self._reader()
        while True:
            try:
                b = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as e:
                self._raise(e)
            if b.num_rows:
                yield b

    def count(self) -> int:
        return sum(b.num_rows for b in self.batches())


class _Parquet:
    kind = "parquet"

    def __init__(self, path: Path):
        import pyarrow.parquet as pq
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.parquet")
                           if not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))
            if not files:
                raise CurateError(f"{path}: directory holds no .parquet files (and is not a datasets.save_to_disk "
                                  "directory)")
        else:
            files = [path]
        self.path, self.files = path, files
        self._pq = pq
        self.rows = sum(self._file(f).metadata.num_rows for f in files)

    def _file(self, f: Path):
        with _open_binary(f):
            pass
        try:
            return self._pq.ParquetFile(f, pre_buffer=False)  # pre-buffering holds more than a row group
        except (pa.ArrowInvalid, OSError) as e:
            raise CurateError(f"{f}: not a readable Parquet file ({str(e).splitlines()[0]})") from None

    def batches(self, batch_rows: int = 2048) -> Iterator[pa.RecordBatch]:
        for f in self.files:
            try:
                for b in self._file(f).iter_batches(batch_size=batch_rows):
                    if b.num_rows:
                        yield b
            except (pa.ArrowInvalid, OSError) as e:
                raise CurateError(f"{f}: cannot read Parquet data ({str(e).splitlines()[0]})") from None

    def count(self) -> int:
        return self.rows


class _HFDataset:
    """A `datasets.Dataset` (from save_to_disk or load_dataset), read as Arrow batches without loading it."""

    def __init__(self, hf, kind: str, files: list[Path]):
        self.hf, self.kind, self.files = hf, kind, files
        self.rows = len(hf)

    def batches(self, batch_rows: int = 2048) -> Iterator[pa.RecordBatch]:
        for table in self.hf.with_format("arrow").iter(batch_size=batch_rows):
            yield from table.to_batches()

    def count(self) -> int:
        return self.rows


def _load_from_disk(path: Path):
    import datasets
    try:
        if not json.loads((path / "state.json").read_text(encoding="utf-8")).get("_data_files", True):
            raise CurateError(f"{path}: dataset is empty (no rows)")
    except (OSError, ValueError, AttributeError):
        pass  # a DatasetDict, or a state.json we do not understand: let datasets judge
    try:
        obj = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001 - datasets raises many types; one line for the user
        raise CurateError(f"{path}: cannot load the datasets.save_to_disk directory ({str(e).splitlines()[0]})") from None
    if isinstance(obj, datasets.DatasetDict):
        splits = list(obj)
        split = "train" if "train" in obj else (splits[0] if len(splits) == 1 else None)
        if split is None:
            raise CurateError(f"{path}: a DatasetDict with splits {splits} and no 'train'; pass {path}/SPLIT")
        obj = obj[split]
    return _HFDataset(obj, "hf-disk", [path])


_HF_ID = re.compile(r"^(hf:)?(?P<name>[A-Za-z0-9][\w.-]*(/[\w.-]+)?)(@(?P<config>[\w.-]+))?(:(?P<split>[\w.\[\]:%-]+))?$")
_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt", ".tsv", ".gz", ".arrow", ".ndjson")


def _load_hub(source: str, m: re.Match):
    import datasets
    name, config, split = m.group("name"), m.group("config"), m.group("split") or "train"
    offline = bool(datasets.config.HF_HUB_OFFLINE) or os.environ.get("HF_DATASETS_OFFLINE") == "1"
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its retry warnings would print before our one-line error
    try:
        hf = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001
        first = (str(e).splitlines() or [type(e).__name__])[0]
        if offline:
            raise CurateError(f"{source}: no such file or directory, and not a cached Hugging Face dataset: the hub "
                              f"is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE) and {name!r} is not in the local "
                              "cache; download it first or pass a local path") from None
        raise CurateError(f"{source}: no such file or directory, and cannot load it as a Hugging Face dataset "
                          f"({first})") from None
    finally:
        hub_log.setLevel(level)
    files = [Path(c["filename"]) for c in hf.cache_files]
    return _HFDataset(hf, "hf-hub", files)


def _is_saved_hf_dataset(path: Path) -> bool:
    return (path / "state.json").exists() or (path / "dataset_dict.json").exists()


def reads_through_hf_datasets(source: str) -> bool:
    """Whether open_dataset(source) reads with Hugging Face `datasets`: a save_to_disk directory or a hub id
    (a path that does not exist counts: it is a hub id or an error)."""
    path = Path(source).expanduser()
    try:
        return not path.exists() or (path.is_dir() and _is_saved_hf_dataset(path))
    except OSError:
        return True


def _open_source(source: str):
    path = Path(source).expanduser()
    try:
        exists = path.exists()
    except PermissionError:
        raise CurateError(f"{source}: cannot access the path (permission denied)") from None
    except OSError as e:
        raise CurateError(f"{source}: cannot access the path ({e.strerror or e})") from None
    if not exists:
        m = _HF_ID.match(source)
        if m and (source.startswith("hf:") or not (source.lower().endswith(_FILE_SUFFIXES)
                                                    or source.startswith((".", "/", "~")))):
            return path, _load_hub(source, m)
        raise CurateError(f"{source}: no such file or directory")
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise CurateError(f"{path}: cannot read the directory (permission denied)")
        if _is_saved_hf_dataset(path):
            return path, _load_from_disk(path)
        return path, _Parquet(path)
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    if name.endswith((".jsonl", ".ndjson")):
        return path, _JsonLines(path)
    if name.endswith(".json"):
        return path, (_JsonLines(path) if _looks_like_json_lines(path) else _JsonDocument(path))
    if name.endswith(".parquet") and not path.name.lower().endswith(".gz"):
        return path, _Parquet(path)
    if name.endswith(".csv"):
        return path, _Csv(path)
    if name.endswith(".arrow"):
        raise CurateError(f"{path}: a bare .arrow file; pass the datasets.save_to_disk directory that holds it")
    raise CurateError(f"{path}: unknown file type; expected .jsonl, .json, .parquet, .csv (.jsonl/.json/.csv may be "
                      ".gz-compressed), a directory of "
                      "Parquet files, a datasets.save_to_disk directory or a Hugging Face dataset id")


# ================================================================================================ dataset

@contextmanager
def _read_errors(source: str):
    """A failing read (a corrupt or truncated .gz file, a disk error) becomes one line naming the source."""
    try:
        yield
    except (OSError, EOFError) as e:
        detail = (e.strerror if isinstance(e, OSError) and e.strerror else str(e)) or type(e).__name__
        raise CurateError(f"{source}: cannot read ({detail})") from None


def _rename_id(names: list[str]) -> dict[str, str]:
    """Source column -> raw column name: a source `id` becomes `source_id` (our `id` is the row index)."""
    out = {}
    for n in names:
        if n == "id":
            new = "source_id"
            while new in names:
                new = "_" + new
            out[n] = new
        else:
            out[n] = n
    return out


def _column_array(values: list) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        # mixed types in one column (e.g. a number here, a string there): keep it as JSON text
        return pa.array([v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                         for v in values], type=pa.string())


class Dataset:
    """An opened dataset: container + detected format. Iterate with `iter_batches`."""

    def __init__(self, source: str, opts: ReadOptions):
        self.source, self.opts = str(source), opts
        if opts.on_bad_row not in ("error", "skip"):
            raise CurateError(f"--on-bad-row must be 'error' or 'skip', not {opts.on_bad_row!r}")
        with _read_errors(self.source):
            self.path, self._src = _open_source(str(source))
        self.container = self._src.kind
        self.rejects: list[Reject] = []
        self.rows: int | None = getattr(self._src, "rows", None)
        self._fingerprint: str | None = None
        self._key_column = "key"
        with _read_errors(self.source):
            self.field_map: FieldMap = self._detect()
        self.format = self.field_map.format
        self.fields = self.field_map.as_dict()

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
            n = 0
            first_bad = None
            for row in self._src.iter_rows():
                n += 1
                if row.record is None:
                    first_bad = first_bad or (n - 1, row)
                else:
                    seen.update(dict.fromkeys(row.record))
                if n >= _PEEK_ROWS and seen:
                    break
            if n == 0:
                raise CurateError(f"{self.source}: dataset is empty (no rows)")
            if not seen:
                id_, row = first_bad
                if n == 1 or self.opts.on_bad_row != "skip":
                    self._raise_row(id_, row, None, row.error)
                raise CurateError(f"{self.source}: no readable record in the first {n} rows (the first: "
                                  f"{self._message(id_, row.line, None, row.error, hint=False)})")
            names = list(seen)
            if "key" in names:
                self._key_column = "source_key"
        return resolve_fields(names, self.opts.format, self.opts.prompt_field, self.opts.response_field,
                              source=self.source)

    # ------------------------------------------------------------------------------------------- lineage
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            if isinstance(self._src, _HFDataset) and self._src.kind == "hf-hub":
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
            with _read_errors(self.source):
                self.rows = self._src.count()
        return self.rows

    def record(self) -> dict:
        return {"source": self.source, "fingerprint": self.fingerprint(), "rows": self.num_rows()}

    # ------------------------------------------------------------------------------------------- reading
    def _location(self, id_: int, line: int | None) -> str:
        return f"{self.source}:{line}" if line is not None else f"{self.source}: id {id_}"

    def _message(self, id_: int, line: int | None, field: str | None, reason: str, hint: bool = True) -> str:
        what = f"field '{field}': " if field else ""
        notes = ([f"id {id_}"] if line is not None else []) + (["pass --on-bad-row skip to skip bad rows"] if hint else [])
        return f"{self._location(id_, line)}: {what}{reason}" + (f" ({'; '.join(notes)})" if notes else "")

    def _raise_row(self, id_: int, row_or_line, field: str | None, reason: str):
        line = row_or_line.line if isinstance(row_or_line, _Row) else row_or_line
        raise CurateError(self._message(id_, line, field, reason, hint=self.opts.on_bad_row != "skip"))

    def _bad(self, id_: int, line: int | None, field: str | None, reason: str) -> None:
        if self.opts.on_bad_row != "skip":
            self._raise_row(id_, line, field, reason)
        self.rejects.append(Reject(id_, self._location(id_, line), field, reason))

    def _convert(self, id_: int, line: int | None, rec: dict, examples: list) -> None:
        try:
            prompt, response = to_example(rec, self.field_map)
        except RecordError as e:
            self._bad(id_, line, e.field, e.reason)
            return
        examples.append(Example(id_, prompt, response))

    def iter_batches(self, batch_rows: int = 2048, examples: bool = True) -> Iterator[Batch]:
        """Batches of up to `batch_rows` source rows, in order. Resets `rejects`; sets `rows` at the end.
        examples=False: raw rows only (no Example conversion, no row checks), for a pass that only copies rows
        already validated (shard); a third of the reader's time on columnar sources."""
        if batch_rows < 1:
            raise ValueError("batch_rows must be >= 1")
        self.rejects = []
        with _read_errors(self.source):
            if hasattr(self._src, "iter_rows"):
                yield from self._iter_json(batch_rows, examples)
            else:
                yield from self._iter_arrow(batch_rows, examples)

    def _iter_json(self, batch_rows: int, examples: bool = True) -> Iterator[Batch]:
        next_id = 0
        buf: list[_Row] = []
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

    def _json_batch(self, rows: list[_Row], first_id: int, convert: bool = True) -> Batch:
        examples: list[Example] = []
        for i, row in enumerate(rows if convert else ()):
            if row.record is None:
                self._bad(first_id + i, row.line, None, row.error)
            else:
                self._convert(first_id + i, row.line, row.record, examples)
        return Batch(examples=examples, raw_fn=lambda: self._json_raw(rows, first_id))

    def _json_raw(self, rows: list[_Row], first_id: int) -> pa.RecordBatch:
        names: dict[str, None] = {}
        keyed = any(r.key is not None for r in rows)
        for r in rows:
            if r.record is not None:
                names.update(dict.fromkeys(r.record))
        rename = _rename_id(list(names))
        cols = {"id": pa.array(range(first_id, first_id + len(rows)), type=pa.int64())}
        if keyed:
            cols[self._key_column] = pa.array([r.key for r in rows], type=pa.string())
        for name in names:
            cols[rename[name]] = _column_array([None if r.record is None else r.record.get(name) for r in rows])
        return pa.RecordBatch.from_pydict(cols)

    def _iter_arrow(self, batch_rows: int, convert: bool = True) -> Iterator[Batch]:
        next_id = 0
        fm = self.field_map
        needed = [c for c in (fm.prompt, fm.response, fm.input, fm.system) if c]
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


def open_dataset(source, opts: ReadOptions | None = None) -> Dataset:
    """Open a dataset (see the module docstring); detects the format from its first rows."""
    return Dataset(str(source), opts or ReadOptions())
