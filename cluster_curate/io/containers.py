"""Containers: the file types a dataset comes in, each read as a stream of rows (docs/architecture.md,
"Extension points"). io/datasets.py turns those rows into examples.

A JSON-like container (`_JsonLines`, `_JsonDocument`) yields `JsonRow`s (python dicts with their line); a
columnar one (`_Csv` for CSV and TSV, `_Parquet`, `HFDataset` in io/hf_datasets.py) yields Arrow batches.
`open_container(source)` picks the container from the path (or the Hugging Face id). A new container: a class with
`kind`, `iter_rows()` or `batches(batch_rows)`, and `count()`, plus its case in `open_container`.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cluster_curate.errors import CurateError, cannot_read, counted
from cluster_curate.io import names
from cluster_curate.io.formats import lone_surrogate
from cluster_curate.io.hf_datasets import load_from_disk, load_hub

_CHUNK_BYTES = 1 << 20     # read size for JSON / CSV
_CSV_CHECKED: set[tuple] = set()  # the CSV files (path, size, time) _Csv._check_text and _check_quotes passed
_MAX_CSV_BLOCK = 1 << 30   # CSV: pyarrow's block must hold the longest row; it grows from _CHUNK_BYTES up to this


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
            raise cannot_read(f, e) from None
    return h.hexdigest()


# ================================================================================================ sources
# A source yields chunks of rows. JSON-like sources yield `JsonRow`s (python dicts), columnar ones Arrow batches.

@dataclass
class JsonRow:
    line: int | None        # 1-based line where the record starts, when known
    record: dict | None     # None when the row could not be parsed
    error: str | None = None  # why it could not be parsed
    key: str | None = None  # the key of a JSON mapping entry
    file: Path | None = None  # the file it is read from, in a directory of files (_JsonFiles)
    field: str | None = None  # the field that made it unreadable, when one did


def _lone_surrogate(line: int | None, value, key: str | None = None) -> JsonRow | None:
    """The bad row of a record holding a lone UTF-16 surrogate (lone_surrogate), or of a JSON mapping's entry whose
    key holds one (the key is left out of the row: Arrow's `key` column cannot hold it); None for neither."""
    found = isinstance(key, str) and lone_surrogate(key)
    if found:
        return JsonRow(line, None, f"the key ({key!r}) holding {found[1]}")
    found = lone_surrogate(value)
    if not found:
        return None
    field, why = found
    return JsonRow(line, None, why, key=key, field=field or None)


def utf8_error(path, line: int, exc: UnicodeDecodeError, data: bytes, start: int) -> str:
    bad = data[exc.start:exc.start + 1].hex()
    col = exc.start - start + 1
    return f"{path}:{line}: not valid UTF-8 text (byte 0x{bad} at column {col}); re-encode the file as UTF-8"


def _open_binary(path: Path):
    """The file's bytes; .gz files are decompressed as they are read. A UTF-16 file is refused here, for every
    text format: read as UTF-8 its first line is a bad row (a CSV's, one field too few) and so is every other."""
    try:
        if path.name.lower().endswith(".gz"):
            import gzip
            with open(path, "rb") as raw:  # permission / directory errors with our message
                magic = raw.read(2)
            if magic and magic != GZIP_MAGIC:  # else gzip's `Not a gzipped file (b'{"')`, and no fix
                raise CurateError(f"{path}: not gzip-compressed, but its name ends in .gz; rename it {path.name[:-3]}")
            f = gzip.open(path, "rb")
        else:
            f = open(path, "rb")
    except IsADirectoryError:
        raise CurateError(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise cannot_read(path, e) from None
    if f.peek(2)[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        f.close()
        raise CurateError(f"{path}: UTF-16 text (it starts with a UTF-16 byte-order mark); re-encode the file as "
                          "UTF-8")
    packed = next((why for magic, why in _PACKED.items() if f.peek(4)[:len(magic)] == magic), None)
    if packed:
        f.close()
        raise CurateError(f"{path}: " + packed.format(name=path.name))
    return f


# compressed bytes under a text file's name (a download saved as .jsonl): named with the fix, not as a line 1 that
# is "not valid UTF-8" or a file with "no readable record"
GZIP_MAGIC = b"\x1f\x8b"
_ZIP = "a zip archive, not text; extract it and give the file inside"
_ZSTD = "zstd-compressed, not text; decompress it (zstd -d) or recompress it as .gz"
_PACKED = {GZIP_MAGIC: "gzip-compressed, but its name does not end in .gz; rename it {name}.gz",
           b"PK\x03\x04": _ZIP, b"\x28\xb5\x2f\xfd": _ZSTD}
# the same, said by the name of a file compressed otherwise than with gzip (`train.jsonl.zst`), not "unknown file type"
_PACKED_SUFFIXES = {".zst": _ZSTD, ".zstd": _ZSTD, ".zip": _ZIP,
                    ".xz": "xz-compressed, not text; decompress it (xz -d) or recompress it as .gz",
                    ".bz2": "bzip2-compressed, not text; decompress it (bzip2 -d) or recompress it as .gz"}


def read_failure(path, e: BaseException) -> CurateError:
    """errors.cannot_read, and for a compressed file whose stream stops before its end (gzip's EOFError, pyarrow's
    "Truncated compressed stream": a copy or download stopped part-way) what to do: no reader can use it."""
    if isinstance(e, EOFError) or "Truncated compressed stream" in str(e):
        return CurateError(f"{path}: cannot read it: the compressed file is cut short (it ends before its "
                           "end-of-stream marker); copy or download it again")
    return cannot_read(path, e)


@contextmanager
def read_errors(source):
    """A failing read (a corrupt or truncated .gz file, a disk error) becomes one line naming `source`
    (read_failure)."""
    try:
        yield
    except (OSError, EOFError) as e:
        raise read_failure(source, e) from None


def _first_non_utf8_line(path: Path) -> str | None:
    """Locate the first line that is not UTF-8 (only called to explain an error)."""
    with _open_binary(path) as f:
        for lineno, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                return utf8_error(path, lineno, e, line, 0)
    return None


# json.loads(text) is JSONDecoder().decode: whitespace skipped, then this C scanner, then whitespace to the end
_SCAN = json.JSONDecoder().scan_once
# a value nested deeper than Python's recursion limit (about 1,000 arrays or objects): json's RecursionError
_TOO_DEEP = ("invalid JSON (nested too deeply: arrays or objects inside each other about 1,000 levels deep, more "
             "than this reader takes)")


class _JsonLines:
    kind = "jsonl"

    def __init__(self, path: Path):
        self.path = path

    def iter_rows(self) -> Iterator[JsonRow]:
        with _open_binary(self.path) as f:
            for lineno, data in enumerate(f, 1):
                data = _without_bom(data)
                if lineno == 1:
                    _refuse_whole_file_mistakes(self.path, data)
                if not data.strip():
                    continue
                try:
                    text = data.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    yield JsonRow(lineno, None, utf8_error(self.path, lineno, e, data, 0).split(": ", 1)[1])
                    continue
                try:  # the scanner json.loads ends in, without its three Python layers: a line that is one object
                    rec, end = _SCAN(text, 0)
                except (StopIteration, ValueError, RecursionError):
                    end = -1
                if end == len(text) and type(rec) is dict:
                    yield ("\\u" in text and _lone_surrogate(lineno, rec)) or JsonRow(lineno, rec)
                    continue
                try:  # anything else as json.loads reads it: its value, or its error
                    rec = json.loads(text)
                except json.JSONDecodeError as e:
                    yield JsonRow(lineno, None, f"invalid JSON ({e.msg}: column {e.colno})")
                    continue
                except RecursionError:
                    yield JsonRow(lineno, None, _TOO_DEEP)
                    continue
                if not isinstance(rec, dict):
                    yield JsonRow(lineno, None, f"expected a JSON object, found {_json_type(rec)}")
                    continue
                yield ("\\u" in text and _lone_surrogate(lineno, rec)) or JsonRow(lineno, rec)

    def count(self) -> int:
        n = 0
        with _open_binary(self.path) as f:
            for data in f:
                if _without_bom(data).strip():
                    n += 1
        return n


def _without_bom(line: bytes) -> bytes:
    """A JSON Lines line without the UTF-8 byte-order mark it may start with: the file's, or on a later line a joined
    file's (`cat a.jsonl b.jsonl`, each written with one). A BOM is no data, and outside any value there."""
    return line.removeprefix(codecs.BOM_UTF8)


def _refuse_whole_file_mistakes(path: Path, first_line: bytes) -> None:
    """A mistake of the whole file, seen on its first line: each line would be a bad row, and the error told to
    skip them (`--on-bad-row skip`), which leaves nothing."""
    if first_line.lstrip().startswith(b"["):
        raise CurateError(f"{path}: holds one JSON array, not JSON lines (one object per line); name it .json, "
                          "which reads either")


def _json_type(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


_WS = re.compile(r"[ \t\n\r]*")


class _JsonScanner:
    """A sliding text buffer over a JSON file, decoded chunk by chunk, that knows the line of any position."""

    def __init__(self, path: Path, f):
        self.path, self.f = path, f
        self.decoder = json.JSONDecoder()
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.eof = "", 0, False
        self.line, self.line_pos = 1, 0           # line number at buf[line_pos]
        self.first = True

    def line_at(self, p: int) -> int:
        if p > self.line_pos:
            self.line += self.buf.count("\n", self.line_pos, p)
            self.line_pos = p
        return self.line

    def refill(self) -> bool:
        """Append the next chunk (dropping what is consumed); False at end of file."""
        if self.eof:
            return False
        self.line_at(self.pos)
        data = self.f.read(max(_CHUNK_BYTES, len(self.buf) - self.pos))  # grows for records larger than a chunk
        if self.first and data.startswith(codecs.BOM_UTF8):
            data = data[len(codecs.BOM_UTF8):]
        self.first = False
        try:
            text = self.utf8.decode(data, final=not data)
        except UnicodeDecodeError as e:
            ln = self.line_at(len(self.buf)) + data.count(b"\n", 0, e.start)
            start = data.rfind(b"\n", 0, e.start) + 1
            raise CurateError(utf8_error(self.path, ln, e, data, start)) from None
        self.buf = self.buf[self.pos:] + text
        self.line_pos -= self.pos
        self.pos = 0
        if not data:
            self.eof = True
            return False
        return True

    def skip_ws(self) -> None:
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self.refill():
                return

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)

    def peek(self) -> str:
        return self.buf[self.pos]

    def expect(self, char: str, message: str) -> None:
        """Consume `char` (after the whitespace already skipped) or fail with `message`."""
        if self.at_end() or self.buf[self.pos] != char:
            self.invalid(self.pos, message)
        self.pos += 1

    def invalid(self, p: int, msg: str):
        raise CurateError(f"{self.path}:{self.line_at(p)}: invalid JSON ({msg})")

    def decode_value(self):
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                genuine = e.pos < len(self.buf) - 64 and not e.msg.startswith("Unterminated string")
                start = self.pos
                if genuine or not self.refill():  # refill at the end of the file still drops what is consumed
                    self.invalid(e.pos - (start - self.pos), f"{e.msg}")
                continue
            except RecursionError:  # no resynchronising inside a document: the file's error, at the value's line
                raise CurateError(f"{self.path}:{self.line_at(self.pos)}: {_TOO_DEEP}") from None
            if end >= len(self.buf) and self.refill():  # a number may continue in the next chunk
                continue
            self.pos = end
            return value


class _JsonDocument:
    """A top-level JSON array of records, or an object mapping id -> record, decoded one value at a time
    (json.JSONDecoder.raw_decode over a sliding text buffer), so memory holds one chunk plus one record."""

    kind = "json"

    def __init__(self, path: Path):
        self.path = path

    def iter_rows(self) -> Iterator[JsonRow]:
        f = _open_binary(self.path)
        try:
            sc = _JsonScanner(self.path, f)
            sc.skip_ws()
            if sc.at_end():
                return  # empty file
            opener = sc.peek()
            if opener not in "[{":
                sc.invalid(sc.pos, f"expected a JSON array of records or an object mapping ids to records, "
                                   f"found {opener!r}")
            closer = "]" if opener == "[" else "}"
            sc.pos += 1
            index = 0
            while True:
                sc.skip_ws()
                if sc.at_end():
                    sc.invalid(sc.pos, f"unexpected end of file, expected {closer!r}")
                if sc.peek() == closer:
                    sc.pos += 1
                    break
                if index:
                    sc.expect(",", f"expected ',' or {closer!r} between records")
                    sc.skip_ws()
                start_line = sc.line_at(sc.pos)
                key, value = self._entry(sc, opener)
                index += 1
                if index == 1 and opener == "{" and _pandas_column(value):
                    raise CurateError(f"{self.path}: pandas' column-oriented JSON (DataFrame.to_json()'s default: "
                                      f"each key, {key!r} first, a column mapping row numbers to values), which read "
                                      "as records would be transposed; write it with to_json(orient='records', "
                                      "lines=True) and give that file")
                if opener == "{" and not isinstance(value, dict) and (index == 1 or _record_lists({key: value})):
                    # a list of records after records: `{"meta": {...}, "data": [...]}`, no mapping of id -> record
                    raise self._not_records(sc, key, value)
                yield self._row(start_line, key, value)
            sc.skip_ws()
            if not sc.at_end():
                sc.invalid(sc.pos, "extra data after the end of the top-level value")
        finally:
            f.close()

    @staticmethod
    def _entry(sc: _JsonScanner, opener: str, value: bool = True):
        """(key, value) of the next array element or mapping entry (value=False: the key, the value left to read)."""
        key = None
        if opener == "{":
            if sc.at_end() or sc.peek() != '"':
                sc.invalid(sc.pos, "expected a string key")
            key = sc.decode_value()
            sc.skip_ws()
            sc.expect(":", "expected ':' after a key")
            sc.skip_ws()
        return key, sc.decode_value() if value else None

    def _not_records(self, sc: _JsonScanner, key: str, value) -> CurateError:
        """An object whose first value is no record: the rows nested under a key (SQuAD's `data`, splits), named
        with how many each holds and how to extract one (the rest of the object scanned a list element at a time),
        or one pretty-printed record. Which key holds the rows is not guessed: two are splits, not to be mixed
        (datasets' json loader is told its `field` too)."""
        lists = _record_lists({key: value})
        firsts = [value[0]] if isinstance(value, list) and value else []  # of its lists (_rows_under_a_key)
        while True:
            sc.skip_ws()
            if sc.at_end() or sc.peek() == "}":
                break
            sc.expect(",", "expected ',' or '}' between records")
            sc.skip_ws()
            name, _ = self._entry(sc, "{", value=False)
            if not sc.at_end() and sc.peek() == "[":
                length, first = _scan_list(sc)
                firsts += [first] if length else []
                if _is_record(first):
                    lists[name] = length
            else:
                sc.decode_value()
        if not _rows_under_a_key(firsts):  # none, or one chat record's tools beside its turns
            return CurateError(f"{self.path}: a JSON object whose values are not records (key {key!r} holds "
                               f"{_json_type(value)}); expected a list of records, an object mapping ids to "
                               "records, or JSON Lines")
        held = " and ".join(f"{name!r} ({counted(n, 'record')})" for name, n in lists.items())
        first = next(iter(lists))
        what = (f"key {first!r} holds a list of {counted(lists[first], 'record')}" if len(lists) == 1
                else f"keys {held} hold lists of records (one each, as splits?)")
        field = f".{first}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", first) else f".[{json.dumps(first)}]"
        name = self.path.name
        extract = (f"zcat {name} | jq '{field}'" if name.lower().endswith(".gz") else f"jq '{field}' {name}")
        return CurateError(f"{self.path}: one JSON object whose {what}: the rows nested under a key, which this "
                           f"reader does not guess; extract one list as its own file ({extract} > rows.json) and "
                           "give that file")

    def _row(self, start_line: int, key, value) -> JsonRow:
        if isinstance(value, dict):
            return _lone_surrogate(start_line, value, key) or JsonRow(start_line, value, key=key)
        what = f"the value of key {key!r}" if key is not None else "the array element"
        return JsonRow(start_line, None, f"{what} is {_json_type(value)}, expected a record (a JSON object)", key=key)

    def count(self) -> int:
        return sum(1 for _ in self.iter_rows())


def _scan_list(sc: _JsonScanner) -> tuple[int, object]:
    """Read past the JSON array at the scanner, one element at a time: (its length, its first element or None)."""
    sc.pos += 1  # '['
    length, first = 0, None
    while True:
        sc.skip_ws()
        if not sc.at_end() and sc.peek() == "]":
            sc.pos += 1
            return length, first
        if length:
            sc.expect(",", "expected ',' or ']' between values")
            sc.skip_ws()
        element = sc.decode_value()
        first = element if length == 0 else first
        length += 1


def _is_record(value) -> bool:
    """A list's first element that makes it a list of records: an object, not a chat's turn (one record holds its
    turns)."""
    return isinstance(value, dict) and not {"role", "from"} & value.keys()


def _record_lists(obj: dict) -> dict:
    """{key: length} of the values of a JSON object that are lists of records: rows nested under a key."""
    return {key: len(value) for key, value in obj.items() if isinstance(value, list) and value and _is_record(value[0])}


def _rows_under_a_key(firsts) -> bool:
    """Whether a JSON object, given the first elements of its lists, holds rows under a key (a list of records), so
    is no one record: a chat record (a list of turns, or of lists of turns: BFCL's `question`) is one, whatever list
    of objects sits beside its turns (its tools, BFCL's `function`)."""
    firsts = list(firsts)
    return any(_is_record(v) for v in firsts) and not any(_is_turn(v) for v in firsts)


def _is_turn(value) -> bool:
    """A list's first element that makes it a chat's turns: an object with a role (or ShareGPT's `from`), or a
    list of turns (one per turn of a multi-turn test)."""
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, dict) and not _is_record(value)


def _pandas_column(value) -> bool:
    """Whether the first value of a JSON object is a column of pandas' column-oriented JSON (DataFrame.to_json()'s
    default, `{"question": {"0": "q1", "1": "q2"}, ...}`): an object keyed by row numbers, no record's field names."""
    return isinstance(value, dict) and bool(value) and all(k.isascii() and k.isdigit() for k in value)


def _looks_like_json_lines(path: Path) -> bool:
    """A .json file starting with '{' is JSON Lines when its first line is a whole object and more follows,
    or when that object is one record: not a mapping of id -> record, nor rows under a key (SQuAD's `data`, splits:
    _JsonDocument names them, as it does indented and over 1 MiB) in an object whose own keys are no record
    format's (a record's list of objects, xLAM's `answers` and `tools`, a `choices` list, is no rows)."""
    from cluster_curate.io.fields import detect_format
    with _open_binary(path) as f:
        first = f.readline(1 << 20)
        while first and not first.strip():  # leading blank lines
            first = f.readline(1 << 20)
        if not first.endswith(b"\n") and len(first) == 1 << 20:
            return _long_first_object_is_a_record(path)  # or a mapping written on one line
        try:
            obj = json.loads(first.decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return False
        if not isinstance(obj, dict):
            return False
        rest = f.read(4096)
        if rest.strip():
            return True
        if obj and all(isinstance(v, dict) for v in obj.values()):
            return False
        return detect_format(obj) is not None or not _rows_under_a_key(
            v[0] for v in obj.values() if isinstance(v, list) and v)


def _long_first_object_is_a_record(path: Path) -> bool:
    """Whether the object a file starts with, on a line too long to read whole, is a record (JSON Lines), read one
    value at a time: it is not when its first value is a record (a mapping of id -> record) or it holds rows nested
    under a key (_rows_under_a_key; _JsonDocument names them)."""
    with _open_binary(path) as f:
        sc = _JsonScanner(path, f)
        sc.skip_ws()
        sc.pos += 1  # '{', as the caller saw
        firsts = []  # the first elements of its lists
        try:
            for index in itertools.count():
                sc.skip_ws()
                if sc.at_end() or sc.peek() == "}":
                    return not _rows_under_a_key(firsts)
                if index:
                    sc.expect(",", "expected ',' or '}'")
                    sc.skip_ws()
                _JsonDocument._entry(sc, "{", value=False)
                if not sc.at_end() and sc.peek() == "[":
                    length, first = _scan_list(sc)
                    firsts += [first] if length else []
                elif isinstance(sc.decode_value(), dict) and not index:
                    return False
        except CurateError:
            return False  # invalid JSON: named where _JsonDocument reads it


def _nuls_of_no_text(head: bytes) -> bool:
    """Whether the NULs in a file's first bytes, valid UTF-8, say it is no text: UTF-16 without its byte-order
    mark (a NUL beside each ASCII character: a few in a hundred bytes even in Cyrillic or Arabic, whose letters pass
    for UTF-8), binary data or a file padded with NULs (runs of them). A NUL character a value holds is one here
    and there."""
    return head.count(0) * 100 > len(head) or b"\0" * 8 in head


class _Csv:
    """CSV, or TSV when `delimiter` is a tab: the same pyarrow reader, quoting and errors."""

    def __init__(self, path: Path, delimiter: str = ","):
        self.path, self.delimiter = path, delimiter
        self.kind = "tsv" if delimiter == "\t" else "csv"

    def _reader(self, block: int):
        import pyarrow.csv as pacsv
        parse = pacsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=True)
        read = pacsv.ReadOptions(block_size=block)
        with _open_binary(self.path):
            pass  # permission / directory errors with our message
        st = os.stat(self.path)
        key = (os.path.realpath(self.path), st.st_size, st.st_mtime_ns)
        # once per file: a command opens a file more than once, and batches again for larger blocks
        quoted = key not in _CSV_CHECKED and self._check_text()
        try:
            names = pacsv.open_csv(self._stream(), read_options=read, parse_options=parse).schema.names
            self._check_separator(names)
            repeated = next((n for n in names if names.count(n) > 1), None)
            if repeated is not None:  # pyarrow reads it; a table with two columns of one name is no dataset
                raise CurateError(f"{self.path}:1: column {repeated!r} appears {names.count(repeated)} times in the "
                                  "header; give each column its own name (unnamed pandas index columns: write with "
                                  "to_csv(..., index=False))")
            if quoted:
                self._check_quotes()
            _CSV_CHECKED.add(key)
            convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names})
            return pacsv.open_csv(self._stream(), read_options=read, parse_options=parse, convert_options=convert)
        except (pa.ArrowInvalid, UnicodeDecodeError) as e:  # the latter: a header that is not UTF-8
            if _straddles(e):
                raise  # batches reads again with larger blocks
            header = self._header() if isinstance(e, pa.ArrowInvalid) else []
            if not any("\n" in h or "\r" in h for h in header):  # a header quote never closed: _check_quotes's
                self._check_separator(header)  # rows of another separator holding quoted line breaks fail here
            if quoted and isinstance(e, pa.ArrowInvalid):
                # a quote never closed in a row's first value ran on to the end: its row is one field, which
                # pyarrow refuses before the quotes are checked (as a row "a value holding a line break" broke)
                self._check_quotes()
            self._raise(e)

    def _check_text(self) -> bool:
        """Refuse bytes that are no text, which pyarrow reads as a header of one odd column (NUL bytes among bytes
        that are not UTF-8, or many or in runs: binary data, UTF-16 without its byte-order mark, padding
        (_nuls_of_no_text); or bytes that are not UTF-8, named by line). A NUL character in a value of UTF-8 text
        is read, as anywhere in the file.
        Returns whether the file holds a quote (_check_quotes)."""
        with _open_binary(self.path) as f:
            head = f.read(1 << 16)
            try:
                codecs.getincrementaldecoder("utf-8")().decode(head)  # a character cut at the end is no error
                utf8 = True
            except UnicodeDecodeError:
                utf8 = False
            if b"\0" in head and (not utf8 or _nuls_of_no_text(head)):  # else a NUL character in a value, kept
                raise CurateError(f"{self.path}: holds NUL bytes, so it is no UTF-8 text (binary data, or UTF-16 "
                                  "without its byte-order mark); write it as UTF-8 text")
            if not utf8:
                raise CurateError(_first_non_utf8_line(self.path) or f"{self.path}: not UTF-8 text")
            chunk = head
            while chunk and b'"' not in chunk:
                chunk = f.read(_CHUNK_BYTES)
            return bool(chunk)

    def _check_quotes(self) -> None:
        """Refuse, with the line, a quote never closed, or closed with more of the value after it: pyarrow lets that
        value run on over the rows after it, which would be lost as rows. Strict CSV (Python's csv module, the same
        quoting) refuses both."""
        import csv
        import io
        limit = csv.field_size_limit(2 ** 31 - 1)  # a long document in one value, which pyarrow reads
        try:
            with _open_binary(self.path) as f:
                rows = csv.reader(io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline=""),
                                  delimiter=self.delimiter, strict=True)
                start = 1  # the line the row being read starts on
                try:
                    for _ in rows:
                        start = rows.line_num + 1
                except csv.Error as e:
                    end, doubled = rows.line_num, 'and write each quote inside it twice ("")'
                    if "end of data" in str(e):
                        raise CurateError(f"{self.path}:{start}: a quote opens a value in this row and is never "
                                          "closed, so the rest of the file would be that one value; close it, "
                                          f"{doubled}") from None
                    if "expected after" in str(e):
                        where = (f"a quoted value opens in this row and closes on line {end}, where more text "
                                 "follows" if end > start else "more text follows a quoted value's closing quote")
                        raise CurateError(f"{self.path}:{start}: {where}; quote the whole value, {doubled}") from None
                    raise CurateError(f"{self.path}:{end}: cannot parse {self.kind.upper()} ({e})") from None
        finally:
            csv.field_size_limit(limit)

    def _stream(self):
        return pa.input_stream(str(self.path), compression="gzip" if self.path.name.lower().endswith(".gz") else None)

    def _raise(self, e: Exception):
        msg = str(e)
        if "UTF8" in msg or "UTF-8" in msg or isinstance(e, UnicodeDecodeError):
            located = _first_non_utf8_line(self.path)
            if located:
                raise CurateError(located) from None
        if _straddles(e):
            raise CurateError(f"{self.path}: a row is longer than {_MAX_CSV_BLOCK >> 20} MiB, the most this reader "
                              "takes in one row; write the data as JSON Lines or Parquet") from None
        if "Empty CSV file" in msg:
            raise CurateError(f"{self.path}: dataset is empty (no rows)") from None
        if "Expected" in msg and "columns" in msg:
            located = self._first_misshapen_row()
            if located:
                raise CurateError(located) from None
        raise CurateError(f"{self.path}: cannot parse {self.kind.upper()} ({msg.splitlines()[0]})") from None

    def _check_separator(self, header: list[str]) -> None:
        """A header read as one column that holds another separator: the file is separated by that one (a
        European spreadsheet's ';'), and each row would be one field, or a row holding a comma two."""
        other = next((d for d in ";|\t," if d != self.delimiter and len(header) == 1 and d in header[0]), None)
        if other:
            said = {"\t": "a tab", ",": "','"}
            fix = {"\t": "name it .tsv", ",": "name it .csv"}.get(other, "write it with commas (or tabs, as .tsv)")
            raise CurateError(f"{self.path}:1: the header is the one column {header[0][:60]!r}: the file is "
                              f"separated by {said.get(other, repr(other))}, not {said[self.delimiter]}; {fix}")

    def _header(self) -> list[str]:
        """The first row's fields as Python's csv module reads them (same quoting), for _check_separator where
        pyarrow refused the file before it gave its header."""
        import csv
        import io
        with _open_binary(self.path) as f:
            return next(csv.reader(io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline=""),
                                   delimiter=self.delimiter), [])

    def _first_misshapen_row(self) -> str | None:
        """Locate the first row whose number of fields is not the header's (only called to explain pyarrow's error,
        which names no line): Python's csv module, same quoting, counts lines."""
        import csv
        import io
        # the csv module refuses a value over 128 KiB (a long document), which pyarrow reads: no limit here; bytes
        # that are not UTF-8 are replaced, since this only counts lines and fields (the reader names them itself)
        limit = csv.field_size_limit(2 ** 31 - 1)
        try:
            with _open_binary(self.path) as f:
                text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline="")
                rows = csv.reader(text, delimiter=self.delimiter)
                header, line = next(rows, []), rows.line_num + 1
                for fields in rows:
                    if fields and len(fields) != len(header):
                        # too many: a separator inside a value; too few: a line break inside one (or a lost tab)
                        held = ("tab" if self.kind == "tsv" else "comma") if len(fields) > len(header) else \
                            "line break"
                        return (f"{self.path}:{line}: {len(fields)} field{'s' * (len(fields) != 1)} where the header "
                                f"has {len(header)} (a value holding a {held} must be quoted)")
                    line = rows.line_num + 1
        finally:
            csv.field_size_limit(limit)
        return None

    def batches(self, batch_rows: int = 0) -> Iterator[pa.RecordBatch]:
        block, reader, done, skip = _CHUNK_BYTES, None, 0, 0  # done: rows given; skip: of those, yet to read again
        while True:
            try:
                if reader is None:
                    reader = self._reader(block)
                b = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as e:
                if not _straddles(e) or block >= _MAX_CSV_BLOCK:
                    self._raise(e)
                # a row longer than pyarrow's block (a long document in one value): read again with larger blocks,
                # past the rows already given
                block, reader, skip = block * 4, None, done
                continue
            cut = min(skip, b.num_rows)
            b, skip = b.slice(cut), skip - cut
            if b.num_rows:
                done += b.num_rows
                yield b

    def count(self) -> int:
        return sum(b.num_rows for b in self.batches())


def _straddles(e: Exception) -> bool:
    """pyarrow's CSV error for a row longer than its block size."""
    return "straddl" in str(e)


def _parquet_files(directory: Path) -> list[Path]:
    """The .parquet files in a directory and its folders, hidden ones (`.x`, `_x`) aside, in sorted path order."""
    return sorted(p for p in directory.rglob("*.parquet")
                  if not any(part.startswith((".", "_")) for part in p.relative_to(directory).parts))


# a split's name, as Hugging Face names split files and folders (`train`, `test_sft`, `validation_matched`), or with
# a qualifier before its word (`gsm8k_train`), once a part number (`-00000-of-00002`, `_3`, `0000`, `-v2`) is taken off
_SPLIT_WORD = r"train|training|test|testing|validation|valid|val|dev|eval|evaluation"
_SPLIT_NAME = re.compile(rf"(?P<word>{_SPLIT_WORD})(?P<after>(?:[_-][a-z][a-z0-9]*)*)", re.IGNORECASE)
_SPLIT_AFTER = re.compile(rf"(?P<before>[a-z0-9]+(?:[_-][a-z0-9]+)*)[_-](?P<word>{_SPLIT_WORD})", re.IGNORECASE)
_PART_NUMBER = re.compile(r"(?:-\d+-of-\d+|[-_.]?\d+|[-_]v\d+)$", re.IGNORECASE)
_HUB_PART = re.compile(r"-\d+-of-\d+$")
_HIVE_FOLDER = re.compile(r"([^=]+)=(.*)")
# a data file's type in its name (`.jsonl.gz`), taken off to leave the name a split is read from
_DATA_SUFFIX = re.compile(r"\.(?:parquet|jsonl|ndjson|json|csv|tsv)(?:\.gz)?$", re.IGNORECASE)


def _split_of(relative: Path) -> tuple[str, str, tuple[str, str] | None, Path] | None:
    """The split a data file's path names, its word (`train`, `test`, ...), the qualifier its file name gives the
    word ((before, after), lower-case; ('', '') for the word alone; None where the name is a split whatever it
    carries: the hub's part-numbered file, a folder's) and the path to give for it: its file name's (the hub's
    `data/train-00000-of-00002.parquet`, `test.jsonl`, `gsm8k_test.jsonl`), else its innermost folder's that is one
    (the parquet converter's `default/test/0000.parquet`); the folder named for it where there is one, else the
    file. None for no split."""
    folders = [(_PART_NUMBER.sub("", part), Path(*relative.parts[:i + 1]))
               for i, part in enumerate(relative.parts[:-1])]
    stem = _DATA_SUFFIX.sub("", relative.name)
    base = _PART_NUMBER.sub("", stem)
    m = _SPLIT_NAME.fullmatch(base) or _SPLIT_AFTER.fullmatch(base)
    if m:
        parts = m.groupdict()
        qualifier = None if _HUB_PART.search(stem) else tuple(
            (parts.get(k) or "").lower().replace("-", "_").strip("_") for k in ("before", "after"))
    else:
        base = next((name for name, _ in reversed(folders) if _SPLIT_NAME.fullmatch(name)), None)
        if base is None:
            return None
        m, qualifier = _SPLIT_NAME.fullmatch(base), None
    where = next((where for name, where in reversed(folders) if name.lower() == base.lower()), relative)
    return base, m.group("word").lower(), qualifier, where


def _column_names(part: Path) -> list[str]:
    """A part's columns from its footer; none where it cannot be read (the reader names that file later)."""
    import pyarrow.parquet as pq
    try:
        return pq.read_schema(part).names
    except (pa.ArrowInvalid, OSError):
        return []


def _refuse_layouts(directory: Path, parts: list[Path], trained: bool = True) -> None:
    """A Parquet directory whose folders or file names carry what its rows do not: hive `key=value` folders (the
    column's values; reading the files alone would drop it), or splits of data `trained` on (_refuse_splits)."""
    relative = [p.relative_to(directory) for p in parts]
    hive = sorted({part for r in relative for part in r.parts[:-1] if _HIVE_FOLDER.fullmatch(part)})
    keys = sorted({_HIVE_FOLDER.fullmatch(h).group(1) for h in hive})
    if keys and all(set(keys) <= set(_column_names(p)) for p in parts):
        hive = []  # the files hold the column themselves: nothing is dropped
    if hive:
        shown = ", ".join(hive[:3]) + " and more" * (len(hive) > 3)
        raise CurateError(f"{directory}: a hive-partitioned Parquet directory (folders {shown}): column"
                          f"{'s' * (len(keys) > 1)} {', '.join(map(repr, keys))} {'are' if len(keys) > 1 else 'is'} "
                          "in the folder names, not in the files, and reading the files would drop it; write the "
                          f"rows with it into one file (pq.write_table(pq.read_table({str(directory)!r}), "
                          "'data.parquet')) and give that")
    if trained:
        _refuse_splits(directory, parts)


def _refuse_splits(directory: Path, files: list[Path]) -> None:
    """A directory whose data files are splits, a training one beside an evaluation one (test, validation, dev,
    eval), by their names or folders: read as one dataset, the evaluation rows would be trained on. One rule for
    every format (Parquet, JSON, CSV); which split to read is not guessed, as a JSON file's splits are not
    (_JsonDocument._not_records): refused naming them and the path that gives the training split."""
    found = [(r, _split_of(r)) for r in (f.relative_to(directory) for f in files)]
    found = [(r, split) for r, split in found if split]
    train_qualifiers = {qualifier for _, (_, word, qualifier, _) in found if word.startswith("train")}
    splits: dict[str, list[tuple[Path, Path]]] = {}
    kinds: dict[str, str] = {}
    for r, (name, word, qualifier, where) in found:
        if not word.startswith("train") and qualifier not in (None, ("", "")) and qualifier not in train_qualifiers:
            continue  # an evaluation word with words no training file carries names no split (`dev_notes`)
        splits.setdefault(name.lower(), []).append((r, where))
        kinds[name.lower()] = "train" if word.startswith("train") else "eval"
    # `train-math` beside `train-code`, or `test` beside `validation`, holds no evaluation rows to be trained on
    # beside training ones
    if set(kinds.values()) != {"train", "eval"}:
        return
    held = "; ".join(f"{name}: {split[0][0]}" + f" and {counted(len(split) - 1, 'more file')}" * (len(split) > 1)
                     for name, split in splits.items())
    name = "train" if "train" in splits else next(name for name, kind in kinds.items() if kind == "train")
    (first, where), split = splits[name][0], splits[name]
    if where != first:  # a split folder
        give = directory / where
    elif len(split) == 1:
        give = directory / first
    else:  # a split's files by name: the shell's pattern for them, one per file type (`.jsonl`, `.jsonl.gz`)
        stem = _DATA_SUFFIX.sub("", first.name)
        prefix = stem[:len(_PART_NUMBER.sub("", stem)) + 1]  # `train-`, unless a file of the split lacks the `-`
        prefix = prefix if all(r.name.startswith(prefix) for r, _ in split) else prefix[:-1]
        suffixes = dict.fromkeys(_DATA_SUFFIX.search(r.name).group() for r, _ in split)
        give = " ".join(str(directory / first.parent / f"{prefix}*{suffix}") for suffix in suffixes)
    formats = {{".parquet": "Parquet", ".csv": "CSV", ".tsv": "TSV"}.get(
        _DATA_SUFFIX.search(f.name).group().lower().removesuffix(".gz"), "JSON") for f in files}
    what = formats.pop() if len(formats) == 1 else "data"
    raise CurateError(f"{directory}: a directory of {what} splits ({held}), which read as one dataset would be "
                      f"mixed (an evaluation split's rows trained on); which split is read is not guessed: give one, "
                      f"e.g. {give}")


# the kinds of type that hold the same values: one column whatever its encoding in each part (a pandas Categorical
# is a dictionary; a view, which Table.take cannot take rows of, is read as the plain type)
_VIEWS = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def _plain(t: pa.DataType, decode: bool = True) -> pa.DataType:
    if decode and pa.types.is_dictionary(t):
        t = t.value_type
    return _VIEWS.get(t, t)


def is_text(t: pa.DataType) -> bool:
    """Text in any of Arrow's encodings but a dictionary's: string, large_string, string_view."""
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _as_text(column: pa.Array) -> pa.Array:
    """A part's values of a column that other parts hold as text: as JSON input's column of text and other values
    is (io/datasets.py _as_text), numbers, booleans, lists and objects as their JSON text (3.0 stays "3.0", which
    Arrow's cast writes "3"); other values (dates, decimals) as Arrow writes them."""
    t = column.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_nested(t):
        return pa.array([None if v is None else json.dumps(v, ensure_ascii=False, default=str)
                         for v in column.to_pylist()], pa.string())  # default: a date or bytes inside an object
    return column.cast(pa.string())


class _Parquet:
    kind = "parquet"

    def __init__(self, path: Path, files: list[Path] | None = None):
        """A Parquet file, or a directory (`path`) of Parquet `files`."""
        import pyarrow.parquet as pq
        files = files or [path]
        self.path, self.files = path, files
        self._pq = pq
        footers = {}  # each part's rows and schema; not its open file: a directory may hold thousands
        for f in files:
            pf = self._file(f)
            footers[f] = pf.metadata.num_rows, pf.schema_arrow
        self.rows = sum(rows for rows, _ in footers.values())
        # an empty part's types hold no value (pandas writes an empty `object` column as null, or as text)
        held = {f: schema for f, (rows, schema) in footers.items() if rows} or {f: s for f, (_, s) in footers.items()}
        self._read_as = self._column_types(held)

    def _file(self, f: Path):
        with _open_binary(f):
            pass
        try:
            pf = self._pq.ParquetFile(f, pre_buffer=False)  # pre-buffering holds more than a row group
        except (pa.ArrowInvalid, OSError) as e:
            raise CurateError(f"{f}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
        names = pf.schema_arrow.names
        repeated = next((n for n in names if names.count(n) > 1), None)
        if repeated is not None:  # as in a CSV header: a table with two columns of one name is no dataset
            raise CurateError(f"{f}: column {repeated!r} appears {names.count(repeated)} times; give each column "
                              "its own name")
        return pf

    def _column_types(self, schemas: dict[Path, pa.Schema]) -> dict[str, pa.DataType]:
        """{column: the type it is read as} for the columns read as another type than a part stores: every part's
        footer checked before a row is read, so that each batch of a column has one type (the shards one column),
        and what no one type holds is refused here, not after embedding. Views are read as their plain type (Table
        .take has none for them); encodings of text (dictionary, large, view) as text; numbers of other widths as
        the one type that holds both, when it holds every value; text beside other values as text, said as JSON
        input's is. Nested columns are left as they are: their shapes are the shard writer's (JSON text where they
        differ)."""
        by_name: dict[str, dict[Path, pa.DataType]] = {}
        for f, schema in schemas.items():
            for field in schema:
                by_name.setdefault(field.name, {})[f] = field.type
        read_as = {}
        for name, types in by_name.items():
            stored = {f: _plain(t, decode=False) for f, t in types.items() if not pa.types.is_null(t)}
            if len(set(stored.values())) <= 1:  # the parts agree (one file does): as stored, views aside
                viewed = [t for t in types.values() if _plain(t, decode=False) != t]
                if viewed:
                    read_as[name] = _plain(viewed[0], decode=False)
                continue
            plain = {f: _plain(t) for f, t in stored.items()}
            target = self._common_type(name, plain)
            if target is not None:
                read_as[name] = target
        return read_as

    def _common_type(self, name: str, plain: dict[Path, pa.DataType]) -> pa.DataType | None:
        """The type all parts' `name` column is read as (`plain`: its type in each part, encodings taken off), or
        None to read each part's as it is (nested columns: the shard writer's); refuses what no type holds."""
        distinct = set(plain.values())
        if len(distinct) == 1:
            return distinct.pop()
        where = {t: next(f for f, held in plain.items() if held == t) for t in distinct}

        def said(t):  # `int64 in part-0.parquet`
            return f"{t} in {where[t].relative_to(self.path)}"

        text = [t for t in distinct if is_text(t)]
        binary = [t for t in distinct if _is_binary(t)]
        if text and binary:
            raise CurateError(f"{self.path}: column {name!r} holds text in some parts and bytes in others "
                              f"({said(text[0])}, {said(binary[0])}): one column holds one of them; write it with "
                              "one type in every part (text, or bytes)")
        if text:
            if len(text) < len(distinct):
                from cluster_curate import console
                others = ", ".join(said(t) for t in sorted(distinct, key=str) if not is_text(t))
                console.warn(f"{self.path}: column {name!r} holds text in some rows and other values in others "
                             f"({said(text[0])}, {others}); shards keep it as text (numbers and lists as their "
                             "JSON text)", once=True)
            return pa.large_string() if pa.large_string() in distinct else pa.string()
        if binary and len(binary) == len(distinct):
            return pa.large_binary() if pa.large_binary() in distinct else pa.binary()
        try:
            target = pa.unify_schemas([pa.schema([(name, t)]) for t in distinct],
                                      promote_options="permissive").field(name).type
        except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            first, second = sorted(distinct, key=str)[:2]
            if all(pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t) for t in distinct):
                # true in one part, 1 in another: text, as the shards made such a column before (and said so)
                from cluster_curate import console
                console.warn(f"{self.path}: column {name!r} holds booleans in some parts and numbers in others "
                             f"({said(first)}, {said(second)}); shards keep it as text (each value's JSON text)",
                             once=True)
                return pa.string()
            raise CurateError(f"{self.path}: column {name!r} has types that no one column holds ({said(first)}, "
                              f"{said(second)}); write it with one type in every part") from None
        if any(map(pa.types.is_nested, distinct)):
            return None
        for f, t in plain.items():
            if t != target and not always_fits(t, target):
                self._check_fits(f, name, t, target, where[target] if target in where else None)
        if pa.types.is_floating(target) and any(pa.types.is_integer(t) for t in distinct):
            from cluster_curate import console
            held = ", ".join(said(t) for t in sorted(distinct, key=str))
            console.info(f"{self.path}: column {name!r} holds whole numbers in some parts and fractions in others "
                         f"({held}): read as {target}, as a column of both is (3 as 3.0)", once=True)
        return target

    def _check_fits(self, f: Path, name: str, held: pa.DataType, target: pa.DataType, other: Path | None) -> None:
        """Refuse a part whose `name` values `target` does not hold as they are (a uint64 past 2**63 beside int64,
        an int64 past 2**53 beside floats, which would round it), naming its first such row."""
        row = 0
        for b in self._file(f).iter_batches(batch_size=8192, columns=[name]):
            col = b.column(0)
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            try:
                col.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                bad = next(i for i in range(len(col)) if not fits_as(col.slice(i, 1), target))
                beside = f"the {target} that column is{f' in {other.relative_to(self.path)}' if other else ''}"
                raise CurateError(f"{f}: row {row + bad}: column {name!r} holds {col[bad].as_py()!r} ({held}), "
                                  f"which {beside} cannot hold as written; write the column with one type in every "
                                  "part (as text, if no number type holds every value)") from None
            row += len(col)

    def batches(self, batch_rows: int = 2048) -> Iterator[pa.RecordBatch]:
        for f in self.files:
            try:
                for b in self._file(f).iter_batches(batch_size=batch_rows):
                    if b.num_rows:
                        yield self._read_types(b)
            except (pa.ArrowInvalid, OSError) as e:
                raise cannot_read(f, e, "its Parquet data") from None

    def _read_types(self, b: pa.RecordBatch) -> pa.RecordBatch:
        """`b` with each column of `_read_as` in its type there."""
        changed = {i: self._read_as[n] for i, n in enumerate(b.schema.names)
                   if n in self._read_as and b.schema.types[i] != self._read_as[n]}
        if not changed:
            return b
        columns = list(b.columns)
        for i, target in changed.items():
            col = columns[i]
            if pa.types.is_dictionary(col.type):
                col = col.dictionary_decode()
            columns[i] = col if col.type == target else (
                _as_text(col) if is_text(target) and not is_text(_plain(col.type)) else col).cast(target)
        return pa.RecordBatch.from_arrays(columns, names=b.schema.names)

    def count(self) -> int:
        return self.rows


def always_fits(held: pa.DataType, target: pa.DataType) -> bool:
    """Whether `target` holds every value of type `held` as it is (no need to read them): a wider integer, or a
    float whose mantissa holds every integer or float of `held`."""
    if pa.types.is_integer(held) and pa.types.is_integer(target):
        signed = pa.types.is_signed_integer
        return (signed(held) == signed(target) and target.bit_width >= held.bit_width) or (
            signed(target) and not signed(held) and target.bit_width > held.bit_width)
    if pa.types.is_floating(target):
        mantissa = {16: 11, 32: 24, 64: 53}[target.bit_width]
        if pa.types.is_integer(held):
            return held.bit_width < mantissa
        return pa.types.is_floating(held) and held.bit_width <= target.bit_width
    return False


def fits_as(value: pa.Array, target: pa.DataType) -> bool:
    try:
        value.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")


def _json_file(path: Path):
    """The container of a JSON-like file: .jsonl and .ndjson are JSON Lines; a .json file is JSON Lines or one
    JSON document (an array, or an object mapping ids to records), as its first line shows."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".json") and not _looks_like_json_lines(path):
        return _JsonDocument(path)
    return _JsonLines(path)


class _JsonFiles:
    """A directory of JSON Lines and JSON files (an evaluation suite's files, BFCL's `BFCL_v3_simple.json`, ...; a
    dataset cut into files): the files directly in it, in sorted name order, each read as that file alone is, its
    rows naming their file. Folders inside are not read: an evaluation suite keeps its answers and tool documents
    there (BFCL's `possible_answer/`), which hold no questions."""

    kind = "json-files"

    def __init__(self, path: Path, files: list[Path]):
        self.path, self.files = path, files

    def iter_rows(self) -> Iterator[JsonRow]:
        for f in self.files:
            with read_errors(f):  # a file that fails part-way named, not the directory
                for row in _json_file(f).iter_rows():
                    row.file = f
                    yield row

    def count(self) -> int:
        n = 0
        for f in self.files:
            with read_errors(f):
                n += _json_file(f).count()
        return n


def _directory(path: Path, trained: bool = True):
    """The container of a directory that is no save_to_disk dataset: its Parquet files (in its folders too), else
    the JSON Lines and JSON files directly in it, either refused when they are splits of data `trained` on
    (_refuse_splits); one with neither is refused, saying what it holds and, where it holds CSV files or data files
    in its folders (a hub snapshot's `data/train.jsonl`), what to give."""
    parts = _parquet_files(path)
    if parts:
        others = sorted(str(p.relative_to(path)) for p in path.rglob("*") if _is_other_data_file(p)
                        and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))
        if others:  # read as a Parquet dataset, they would be left out without a word
            held = f"{', '.join(others[:3])}{' and more' * (len(others) > 3)}"
            pq_held = f"{parts[0].relative_to(path)}{f' and {len(parts) - 1} more' * (len(parts) > 1)}"
            raise CurateError(f"{path}: a directory of .parquet files ({pq_held}) that also holds {held}, which a "
                              "Parquet directory's reading leaves out; give the files as DATA (several files are read "
                              "as one dataset), or move them out")
        _refuse_layouts(path, parts, trained)
        return _Parquet(path, parts)
    files = sorted(f for f in path.iterdir() if not f.name.startswith((".", "_")))
    json_files = [f for f in files if f.is_file() and f.name.lower().removesuffix(".gz").endswith(_JSON_SUFFIXES)]
    others = [f for f in files if _is_other_data_file(f) and f not in json_files]
    if json_files and others:  # read as JSON files, the others would be left out without a word
        held = ", ".join(f.name for f in (json_files + others)[:4]) + " and more" * (len(json_files + others) > 4)
        raise CurateError(f"{path}: directory holds files of more than one type, and reading one would leave the "
                          f"others out; it holds {held}: give the files as DATA (several files are read as one "
                          "dataset)")
    if json_files:
        if trained:
            _refuse_splits(path, json_files)
        return _JsonFiles(path, json_files)
    kinds: dict[str, int] = {}
    for f in files:
        kind = "folder" if f.is_dir() else (f.suffix.lower() or "file without a suffix")
        kinds[kind] = kinds.get(kind, 0) + 1
    held = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "it is empty"
    if others:  # CSV / TSV: each file is read as a dataset of its own, and several as DATA (io/mixture.py)
        if trained:
            _refuse_splits(path, others)
        as_data = " as DATA (several files are read as one dataset)"
        if len(others) == 1:
            give = f"its CSV/TSV file{as_data * trained}: {others[0]}"
        elif not trained:  # a --target or --decontaminate set: one path, not DATA's several
            give = f"one of its CSV/TSV files, e.g. {others[0]}"
        else:
            suffixes = sorted({_DATA_SUFFIX.search(f.name).group().lower() for f in others})
            give = f"its CSV/TSV files{as_data}: " + " ".join(f"{path}{os.sep}*{s}" for s in suffixes)
        raise CurateError(f"{path}: directory holds no .parquet, .jsonl or .json files, which a directory is read "
                          f"for ({held}); give {give}")
    nested = sorted(p for p in path.rglob("*") if _is_other_data_file(p)
                    and not any(part.startswith((".", "_")) for part in p.relative_to(path).parts))
    if nested:  # a hub snapshot's `data/train.jsonl` beside its README.md: named, with the path to give
        if trained:
            _refuse_splits(path, nested)
        folders = {p.parent for p in nested}
        if len(nested) == 1:
            give = f"it: {nested[0]}"
        elif len(folders) == 1 and all(p.name.lower().removesuffix(".gz").endswith(_JSON_SUFFIXES) for p in nested):
            give = f"their folder: {folders.pop()}"
        else:
            give = f"them as DATA (several files are read as one dataset), e.g. {nested[0]}"
        shown = ", ".join(str(p.relative_to(path)) for p in nested[:3]) + \
            f" and {len(nested) - 3} more" * (len(nested) > 3)
        raise CurateError(f"{path}: directory holds no data files directly in it ({held}), and only a Parquet "
                          f"directory's folders are read; its folders hold {shown}: give {give}")
    raise CurateError(f"{path}: directory holds no data files to read ({held}); expected .parquet files, .jsonl or "
                      ".json files directly in it, or a datasets.save_to_disk directory")


_HF_ID = re.compile(r"^(hf:)?(?P<name>[A-Za-z0-9][\w.-]*(/[\w.-]+)?)(@(?P<config>[\w.-]+))?(:(?P<split>[\w.\[\]:%-]+))?$")
_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt", ".tsv", ".gz", ".arrow", ".ndjson")


# the metadata a folder keeps beside its Parquet files (Hugging Face's, a run's or export's own), not rows
_DATASET_METADATA = {"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json", names.RUN_STATE,
                     names.MANIFEST, names.TRAINING_ARGS, names.DATALOADER_ARGS, names.STAGING_PLAN}


def _is_other_data_file(path: Path) -> bool:
    """Whether `path` in a Parquet dataset directory is rows in another file type (.jsonl, .csv, ...)."""
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    return path.is_file() and name.endswith((".jsonl", ".ndjson", ".json", ".csv", ".tsv")) and \
        name not in _DATASET_METADATA


def _is_saved_hf_dataset(path: Path) -> bool:
    return (path / "state.json").exists() or (path / "dataset_dict.json").exists()


def looks_like_hub_id(source: str) -> bool:
    """Whether a path that does not exist is read as a Hugging Face dataset id (`NAME[@CONFIG][:SPLIT]`, or with
    `hf:`) rather than refused as a missing file: no file suffix, not a relative or absolute path."""
    return bool(_HF_ID.match(source)) and (source.startswith("hf:") or not (
        source.lower().endswith(_FILE_SUFFIXES) or source.startswith((".", "/", "~"))))


def is_missing(source: str) -> bool:
    """Whether data named `source` is neither there (`~` expanded, as open_container reads it) nor a hub id: what
    a command refuses before any work, as open_container would once it reads it."""
    return not Path(source).expanduser().exists() and not looks_like_hub_id(source)


def reads_through_hf_datasets(source: str) -> bool:
    """Whether open_dataset(source) reads with Hugging Face `datasets`: a save_to_disk directory or a hub id
    (a path that does not exist counts: it is a hub id or an error)."""
    path = Path(source).expanduser()
    try:
        return not path.exists() or (path.is_dir() and _is_saved_hf_dataset(path))
    except OSError:
        return True


def open_container(source: str, trained: bool = True):
    """The path and container of `source`; `trained`: its rows are trained on, so a folder of splits is refused
    (_refuse_splits), where an evaluation set's is read whole."""
    path = Path(source).expanduser()
    try:
        exists = path.exists()
    except PermissionError:
        raise CurateError(f"{source}: cannot access the path (permission denied)") from None
    except OSError as e:
        raise CurateError(f"{source}: cannot access the path ({e.strerror or e})") from None
    if not exists:
        if (path.parent / "dataset_dict.json").is_file():  # DIR/SPLIT of a saved DatasetDict, not a hub id
            try:
                splits = ", ".join(json.loads((path.parent / "dataset_dict.json").read_text())["splits"])
            except (OSError, ValueError, KeyError, TypeError):
                splits = "unreadable"
            raise CurateError(f"{source}: the datasets.save_to_disk directory {path.parent} has no split "
                              f"{path.name!r} (its splits: {splits})")
        m = _HF_ID.match(source)
        if m and looks_like_hub_id(source):
            return path, load_hub(source, m.group("name"), m.group("config"), m.group("split") or "train")
        raise CurateError(f"{source}: no such file or directory")
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise cannot_read(path, PermissionError(), "the directory")
        if _is_saved_hf_dataset(path):
            return path, load_from_disk(path)
        return path, _directory(path, trained)
    if not path.is_file():  # a named pipe, a device: the data is read more than once; a pipe is empty the 2nd time
        raise CurateError(f"{source}: not a regular file (a pipe or a device), and the data is read more than once; "
                          "write it to a file first")
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    if name.endswith(_JSON_SUFFIXES):
        return path, _json_file(path)
    if name.endswith(".parquet") and not path.name.lower().endswith(".gz"):
        return path, _Parquet(path)
    if name.endswith(".csv"):
        return path, _Csv(path)
    if name.endswith(".tsv"):
        return path, _Csv(path, delimiter="\t")
    if name.endswith(".arrow"):
        raise CurateError(f"{path}: a bare .arrow file; pass the datasets.save_to_disk directory that holds it")
    if path.suffix.lower() in _PACKED_SUFFIXES:
        raise CurateError(f"{path}: {_PACKED_SUFFIXES[path.suffix.lower()]}")
    raise CurateError(f"{path}: unknown file type; expected .jsonl, .json, .parquet, .csv, .tsv (each but .parquet "
                      "may be .gz-compressed), a directory of Parquet, JSON Lines or JSON files, a "
                      "datasets.save_to_disk directory or a Hugging Face dataset id")
