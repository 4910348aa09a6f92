"""Data mixtures: several inputs read as one dataset (the `Dataset` contract of io/datasets.py).

    inputs = mixture_inputs(["math.jsonl", "code.parquet"], ReadOptions())   # or a mixture file (YAML/JSON)
    mix = Mixture(inputs)
    mix.record()           # lineage: every input's source (and absolute_path), fingerprint, rows and reading options
    for batch in mix.iter_batches():
        batch.examples     # ids global: input 0's rows first, then input 1's, ... (the order given)
        batch.raw          # `id`, `source`, `source_row`, then the input's own columns (renamed as asked)

Identity: `id` is the row's index in the concatenation of the inputs in the order given; `source` is the
input's name and `source_row` its 0-based row in that input, so (source, source_row) names the row in the
file it came from whatever else is mixed in. Every input keeps its own format detection and reading options.

Original columns (what the shards keep, docs/architecture.md "Artifacts"): typed, one column per name over all inputs
(null in the rows of an input that lacks it). Typed columns stay as they were written, need no decoding by a
trainer, and Parquet stores them column by column; the price is that inputs must agree on the type of a column
they share: `check_columns` refuses a disagreement before any work, naming both inputs, and the mixture file
can rename a column of one input (`rename: {label: label_text}`). A JSON-string column would have accepted
anything, but turns every typed value (timestamps, binary, nested lists) into text a trainer must parse; it is
used only where objects differ in keys anyway (one input's JSON text of them, or another input's other keys), or
where one input holds text and another lists or objects (xLAM's `tools`, JSON text as the Hub keeps it, beside an
OpenAI input's list of schemas): each value is then the JSON of what its input held, a text as a JSON string
(`text_as_json`), so that the loader hands every row back as its input held it.

Mixture file (YAML, or JSON with the same keys)::

    inputs:
      - path: math.jsonl              # relative to the mixture file
        name: math                    # default: the file name without its extensions
        format: alpaca                # per-input reading options: format, prompt_field, response_field (a
        on_bad_row: skip              #   dotted path reads nested objects and lists), rejected_field,
                                      #   label_field, on_bad_row
        rename: {label: math_label}   # original columns renamed for this input
        min_share: 0.2                # optional floor / cap on the selection's share of this input
        max_share: 0.6
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cluster_curate.errors import CurateError, cannot_read
from cluster_curate.io.containers import is_text
from cluster_curate.io.datasets import (RAW_RESERVED, Batch, Dataset, Example, ReadOptions, Reject, data_paths,
                                        open_dataset, original_name, recorded_source, same_shape)
from cluster_curate.io.datasets import reserved_rename as _reserved_rename
from cluster_curate.io.fields import ColumnsHint, FieldsRefusal, MissingColumn
from cluster_curate.io.shard_writer import json_text_array
from cluster_curate.io.tool_calls import own_system_prompt

MIXTURE_SUFFIXES = (".yaml", ".yml")
INPUT_KEYS = ("path", "name", "format", "prompt_field", "response_field", "rejected_field", "label_field", "on_bad_row",
              "rename", "min_share", "max_share")
# Columns every mixture row has (artifacts and shards); an input's own column of the same name is renamed
# `source_<name>` (as a single input's `id` becomes `source_id`; `reserved_rename`).
IDENTITY_COLUMNS = ("id", "source", "source_row")
NORMALISED_COLUMNS = ("prompt", "response", "messages", "system")


def valid_input_name(name: str) -> bool:
    """A letter (any script) or digit first, then those, their combining marks (हिंदी, or é written as e + U+0301
    as macOS names files), '_', '.' or '-': a name that NAME=SHARE, a column and a file name all hold."""
    import unicodedata
    return bool(name) and name[0].isalnum() and all(
        c.isalnum() or c in "._-" or unicodedata.category(c).startswith("M") for c in name)


@dataclass
class MixtureInput:
    path: str
    name: str
    options: ReadOptions = field(default_factory=ReadOptions)
    rename: dict = field(default_factory=dict)
    min_share: float | None = None
    max_share: float | None = None
    where: str = ""  # where it was declared, for messages ("mix.yaml: inputs[1]" or the argument)
    fields: dict = field(default_factory=dict)  # the column keys its mixture file gave it (prompt_field: ...)

    @property
    def in_mixture_file(self) -> bool:
        """Declared by a mixture file's entry (`mix.yaml: inputs[0]`), not as an argument of its own."""
        return self.where.endswith("]")

    def describe(self) -> dict:
        opts = self.options.given()
        return {"name": self.name, "path": self.path, **({"options": opts} if opts else {}),
                **({"rename": dict(self.rename)} if self.rename else {}),
                **({"min_share": self.min_share} if self.min_share is not None else {}),
                **({"max_share": self.max_share} if self.max_share is not None else {})}


def stored_rename(rename: dict) -> dict:
    """A mixture file's `rename`, keyed by the columns as a raw batch names them (the input's `id` is `source_id`
    there)."""
    return {_reserved_rename(old, RAW_RESERVED): new for old, new in rename.items()}


def is_mixture_file(arg: str) -> bool:
    """A YAML file, or a JSON document whose top level is an object with `inputs` (a dataset is not)."""
    p = Path(arg)
    if p.suffix.lower() in MIXTURE_SUFFIXES:
        return True
    if p.suffix.lower() == ".json" and p.is_file() and p.stat().st_size < (1 << 20):
        try:
            with open(p, "rb") as f:
                head = f.read(4096).lstrip()
            if not head.startswith(b"{"):
                return False
            doc = json.loads(p.read_text(encoding="utf-8"))  # as read_mixture_file reads it, whatever the locale
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):  # the data's reader says what is wrong
            return False
        return isinstance(doc, dict) and isinstance(doc.get("inputs"), list)
    return False


def default_name(path: str) -> str:
    """math.jsonl -> math; train.jsonl.gz -> train; a directory -> its name; hf:org/name:split -> name."""
    base = re.split(r"[/:@]", path.rstrip("/").removeprefix("hf:"))
    stem, previous = base[-1] or path, None
    while stem != previous:  # x.jsonl.gz, x.parquet.d
        previous = stem
        for suffix in (".gz", ".d", ".jsonl", ".json", ".parquet", ".csv", ".tsv", ".hf"):
            stem = stem.removesuffix(suffix)
    return stem or path


def _share(value, where: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise CurateError(f"{where}.{key}: expected a share between 0 and 1, got {value!r}")
    return float(value)


def read_mixture_file(path: str, defaults: ReadOptions | None = None) -> list[MixtureInput]:
    """The inputs a mixture file lists (see the module docstring). Errors name the file and the field."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CurateError(f"{path}: no such mixture file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise cannot_read(path, e) from None
    try:
        doc = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise CurateError(f"{where}: not a valid YAML/JSON mixture file ({getattr(e, 'problem', None) or e})") \
            from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list) or not doc["inputs"]:
        raise CurateError(f"{path}: field 'inputs': expected a non-empty list of inputs")
    unknown = [k for k in doc if k != "inputs"]
    if unknown:
        raise CurateError(f"{path}: unknown field '{unknown[0]}' (a mixture file has 'inputs')")
    defaults = defaults or ReadOptions()
    out = []
    for i, item in enumerate(doc["inputs"]):
        where = f"{path}: inputs[{i}]"
        if isinstance(item, str):
            item = {"path": item}
        if not isinstance(item, dict):
            raise CurateError(f"{where}: expected a path or a mapping with 'path'")
        bad = [k for k in item if k not in INPUT_KEYS]
        if bad:
            raise CurateError(f"{where}: unknown field '{bad[0]}' (expected {', '.join(INPUT_KEYS)})")
        if not isinstance(item.get("path"), str) or not item["path"]:
            raise CurateError(f"{where}.path: required (the input's file, directory or hf: id)")
        src = item["path"]
        local = (p.parent / src) if not Path(src).is_absolute() and not src.startswith("hf:") else Path(src)
        if not src.startswith("hf:"):
            if not local.exists() and Path(src).exists():  # the working directory's: the same mixture file would
                # read other data from elsewhere; refused, as its paths are the file's (README, "Mixtures")
                raise CurateError(f"{where}.path: {src} is relative to the mixture file, and {local} does not exist "
                                  f"({src} from the working directory is not read); write the path from "
                                  f"{p.parent}, or an absolute one")
            src = str(local)
        rename = item.get("rename") or {}
        if not isinstance(rename, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                   for k, v in rename.items()):
            raise CurateError(f"{where}.rename: expected a mapping of column names to new names")
        taken = next(((k, v) for k, v in rename.items() if v in IDENTITY_COLUMNS + NORMALISED_COLUMNS), None)
        if taken:  # the shards would hold two columns of that name
            raise CurateError(f"{where}.rename: {taken[0]}: {taken[1]} names one of the mixture's own columns "
                              f"({', '.join(IDENTITY_COLUMNS + NORMALISED_COLUMNS)}); choose another name")
        for key in ("format", "prompt_field", "response_field", "rejected_field", "label_field", "on_bad_row", "name"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise CurateError(f"{where}.{key}: expected a string, got {item[key]!r}")
        opts = ReadOptions(format=item.get("format", defaults.format),
                           prompt_field=item.get("prompt_field", defaults.prompt_field),
                           response_field=item.get("response_field", defaults.response_field),
                           rejected_field=item.get("rejected_field", defaults.rejected_field),
                           label_field=item.get("label_field", defaults.label_field),
                           on_bad_row=item.get("on_bad_row", defaults.on_bad_row))
        if opts.on_bad_row not in ("error", "skip"):
            raise CurateError(f"{where}.on_bad_row: must be 'error' or 'skip', not {opts.on_bad_row!r}")
        from cluster_curate.io.formats import FORMATS
        if item.get("format") is not None and item["format"] not in FORMATS:
            raise CurateError(f"{where}.format: unknown format {item['format']!r}; choose one of {', '.join(FORMATS)}")
        out.append(MixtureInput(path=src, name=item.get("name") or default_name(item["path"]), options=opts,
                                rename=dict(rename), min_share=_share(item.get("min_share"), where, "min_share"),
                                max_share=_share(item.get("max_share"), where, "max_share"), where=where,
                                fields={k: item[k] for k in _FIELD_KEYS if item.get(k) is not None}))
    return out


def mixture_inputs(sources: list[str] | str, options: ReadOptions | None = None) -> list[MixtureInput]:
    """The inputs of a command's DATA arguments: each a dataset, or a mixture file listing several."""
    sources = data_paths(sources)
    if not sources:
        raise CurateError("no input given")
    options = options or ReadOptions()
    inputs: list[MixtureInput] = []
    for arg in sources:
        if is_mixture_file(arg):
            inputs.extend(read_mixture_file(arg, options))
        else:
            inputs.append(MixtureInput(path=arg, name=default_name(arg), options=options, where=arg))
    seen: dict[str, MixtureInput] = {}
    for k, inp in enumerate(inputs):
        if not valid_input_name(inp.name):
            raise CurateError(f"{inp.where}: input name {inp.name!r}: use letters, digits, '.', '_' or '-'"
                              + ("" if inp.in_mixture_file else f" (a file's name is its input's name: give it "
                                 f"another in a mixture file, `inputs: [{{path: {inp.path}, name: ...}}]`)"))
        again = next((other for other in inputs[:k] if _same_file(inp.path, other.path) and _read_alike(inp, other)),
                     None)
        if again is not None:  # every row twice, each an exact copy (not a naming problem, whatever the names)
            raise CurateError(f"{inp.where}: given twice (also as {again.where}); give each input once"
                              + (" (or read it otherwise in each entry: another format or field)"
                                 if inp.in_mixture_file else ""))
        if inp.name in seen:
            raise CurateError(f"{inp.where}: input name {inp.name!r} is also the name of {seen[inp.name].where}; "
                              f"name them apart in a mixture file (name: ...)")
        seen[inp.name] = inp
        if inp.min_share is not None and inp.max_share is not None and inp.min_share > inp.max_share:
            raise CurateError(f"{inp.where}: min_share {inp.min_share} is above max_share {inp.max_share}")
    return inputs


def _same_file(a: str, b: str) -> bool:
    """One file or folder however it is written (`./a.jsonl`, `../d/a.jsonl`, a symlink to it)."""
    import os
    try:
        return os.path.samefile(os.path.expanduser(a), os.path.expanduser(b))
    except OSError:  # one is not there (a hub id): the paths as written, resolved
        try:
            return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
        except (OSError, RuntimeError):
            return a == b


def _read_alike(a: MixtureInput, b: MixtureInput) -> bool:
    """Whether two inputs of one file read the same examples from it: two views of one file (another format or
    field) are a mixture; another on_bad_row alone reads the same rows."""
    def view(inp):
        return {k: v for k, v in inp.options.hashed().items() if k != "on_bad_row"}
    return view(a) == view(b)


# the mixture's own columns an input's (raw) column may be named like: its `id` is `source_id` already
MIXTURE_RESERVED = IDENTITY_COLUMNS[1:] + NORMALISED_COLUMNS


def reserved_rename(name: str) -> str:
    """An input's own column that would collide with a mixture column gets the `source_` prefix, and one named like
    that already one more `_` (io/datasets.py `reserved_rename`: no two columns of an input get one name)."""
    return _reserved_rename(name, MIXTURE_RESERVED)


_FIELD_KEYS = ("prompt_field", "response_field", "rejected_field", "label_field")


def _open_input(item: MixtureInput):
    """One input of a mixture. The columns a refusal of its fields, or a bad row's hint, suggests are its mixture
    file's keys: a --prompt-field (--format, --rejected-field, --label-field) would apply to every input; a column
    its file's key names and it lacks is named as that key."""
    try:
        ds = open_dataset(item.path, item.options)
    except FieldsRefusal as e:
        raise CurateError(e.worded(_as_keys)) from None
    except MissingColumn as e:
        key = e.option[2:].replace("-", "_")  # --response-field: response_field
        if item.fields.get(key) != e.column:
            raise  # given by a flag, for every input
        raise CurateError(f"{item.where}.{key}: {e.column!r}: no such column in {item.path}; columns found: "
                          f"[{e.columns}]") from None
    ds.hint_wording = _as_keys  # a bad row's hint too
    ds.skip_hint = MIXTURE_SKIP_HINT
    return ds


MIXTURE_SKIP_HINT = "pass --on-bad-row skip, or give the input `on_bad_row: skip` in its mixture file, to skip bad rows"


def _as_keys(hint: ColumnsHint) -> str:
    """A hint's columns as this input's keys in a mixture file (`prompt_field: A`), and why not as flags."""
    named = [("format", hint.format)] * bool(hint.format) + [(f"{field}_field", c) for field, c in hint.fields]
    keys = _listed([f"`{key}: {value}`" for key, value in named]) + (f" ({hint.note})" if hint.note else "")
    if hint.left_to_user:
        field, when = hint.left_to_user
        named.append((f"{field}_field", "COLUMN"))
        keys += f" and `{field}_field: COLUMN` ({when})"
    flags = _listed([f"--{key.replace('_', '-')}" for key, _ in named])
    return f"give this input {keys} in a mixture file: {flags} appl{'ies' if len(named) == 1 else 'y'} to every input"


def _listed(items: list[str]) -> str:
    """['a', 'b', 'c'] -> 'a, b and c'."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


class Mixture:
    """Several inputs as one dataset: same interface as io/datasets.Dataset (`iter_batches`, `rows`,
    `num_rows`, `record`, `fingerprint`, `rejects`, `write_rejects`), plus `names`, `formats` and `offsets()`."""

    def __init__(self, inputs: list[MixtureInput]):
        if not inputs:
            raise CurateError("a mixture needs at least one input")
        self.inputs = list(inputs)
        self.datasets = [_open_input(i) for i in self.inputs]  # each detects its own format
        self.names = [i.name for i in self.inputs]
        self.source = "mixture of " + ", ".join(self.names)
        self.format = "mixture"
        self.container = "mixture"
        self.fields = {i.name: ds.fields for i, ds in zip(self.inputs, self.datasets)}
        self.formats = {i.name: ds.format for i, ds in zip(self.inputs, self.datasets)}
        self.rejects: list[Reject] = []
        self._fingerprint: str | None = None
        self._skip_ids: frozenset[int] = frozenset()
        # per input, its columns of plain text that are JSON text in the mixture (check_columns): written as JSON
        # strings, so that decoding gives the text back
        self.text_as_json: list[set[str]] = [set() for _ in self.inputs]

    # ------------------------------------------------------------------------------------------- sizes
    @property
    def rows(self) -> int | None:
        sizes = [ds.rows for ds in self.datasets]
        return None if any(s is None for s in sizes) else int(sum(sizes))

    def num_rows(self) -> int:
        return int(sum(ds.num_rows() for ds in self.datasets))

    def offsets(self) -> np.ndarray:
        """The global id of each input's first row (counts the rows when no pass has run)."""
        return np.concatenate([[0], np.cumsum([ds.num_rows() for ds in self.datasets])[:-1]]).astype(np.int64)

    # ------------------------------------------------------------------------------------------- lineage
    def fingerprint(self) -> str:
        """Over every input's bytes, name, position and reading options: any change re-makes what follows."""
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=12)
            for inp, ds in zip(self.inputs, self.datasets):
                h.update(json.dumps([inp.name, ds.fingerprint(), inp.options.hashed(), inp.rename],
                                    sort_keys=True).encode() + b"\0")
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def record(self) -> dict:
        offsets = self.offsets()
        return {"source": self.source, "fingerprint": self.fingerprint(), "rows": self.num_rows(),
                "inputs": [{**inp.describe(), "source": ds.source, **ds.location(), "format": ds.format,
                            "fingerprint": ds.fingerprint(), "rows": ds.num_rows(), "first_id": int(first)}
                           for inp, ds, first in zip(self.inputs, self.datasets, offsets)]}

    # ------------------------------------------------------------------------------------------- reading
    @property
    def skip_ids(self) -> frozenset[int]:
        return self._skip_ids

    @skip_ids.setter
    def skip_ids(self, ids) -> None:
        """Global ids left out of `examples` (embed: exact copies), handed to each input as its own rows."""
        self._skip_ids = frozenset(ids)
        bounds = np.append(self.offsets(), self.num_rows())
        for ds, lo, hi in zip(self.datasets, bounds[:-1].tolist(), bounds[1:].tolist()):
            ds.skip_ids = frozenset(i - lo for i in self._skip_ids if lo <= i < hi)

    def iter_batches(self, batch_rows: int = 2048, examples: bool = True) -> Iterator[Batch]:
        """Each input's batches in turn, ids made global; raw batches get `source` and `source_row`."""
        self.rejects = []
        offset = 0
        for k, (inp, ds) in enumerate(zip(self.inputs, self.datasets)):
            ds.id_offset = offset  # a bad row is named by its id here
            for b in ds.iter_batches(batch_rows, examples):
                exs = ([Example(ex.id + offset, ex.prompt, ex.response, ex.rejected) for ex in b.examples]
                       if offset else b.examples)
                yield Batch(examples=exs, raw_fn=(lambda b=b, k=k, offset=offset: self._raw(b.raw, k, offset)),
                            num_rows=b.num_rows)
            self.rejects.extend(Reject(r.id + offset, r.location, r.field, r.reason) for r in ds.rejects)
            offset += int(ds.rows)

    def _raw(self, raw: pa.RecordBatch, k: int, offset: int) -> pa.RecordBatch:
        local = raw.column(0)
        names = [self._column_name(k, n) for n in raw.schema.names[1:]]
        columns = [json_text_array(c) if n in self.text_as_json[k] else c for n, c in zip(names, raw.columns[1:])]
        return pa.RecordBatch.from_arrays(
            [pc.add(local, pa.scalar(offset, pa.int64())),
             pa.DictionaryArray.from_arrays(pa.nulls(raw.num_rows, pa.int32()).fill_null(k),
                                            pa.array(self.names, pa.string())),
             local, *columns],
            names=list(IDENTITY_COLUMNS) + names)

    @property
    def json_columns(self) -> list[str]:
        """The inputs' columns kept as JSON text (io/datasets.py, Dataset.json_columns), by their names here, and
        those of one input's text and another's objects (`text_as_json`)."""
        return list(dict.fromkeys([*(self._column_name(k, n) for k, ds in enumerate(self.datasets)
                                     for n in ds.json_columns), *(n for names in self.text_as_json for n in names)]))

    @property
    def late_text_columns(self) -> list[str]:
        """The inputs' columns their last pass learned to be text part-way (Dataset.late_text_columns)."""
        return list(dict.fromkeys(self._column_name(k, n) for k, ds in enumerate(self.datasets)
                                  for n in ds.late_text_columns))

    def _column_name(self, k: int, name: str) -> str:
        return reserved_rename(stored_rename(self.inputs[k].rename).get(name, name))

    write_rejects = Dataset.write_rejects  # every input's rejects, as one input's are written

    # ------------------------------------------------------------------------------------------- columns
    def check_columns(self, batch_rows: int = 8192) -> pa.Schema:
        """The original columns of every input as one typed schema (after renames), or a one-line error
        naming the column, both inputs and their types. Columnar inputs give their schema at once; JSON and
        CSV inputs are read once (raw rows only: a column's type there is what the values make it)."""
        from cluster_curate.io.shard_writer import nested_type
        owner: dict[str, tuple[str, pa.DataType, bool]] = {}  # name -> (input, type, holds lists or objects)
        texts: dict[str, list[int]] = {}  # name -> the inputs that hold plain text there
        whole: dict[str, list[tuple[int, str, pa.DataType]]] = {}  # name -> the inputs holding whole numbers there
        for k, (inp, ds) in enumerate(zip(self.inputs, self.datasets)):
            schema = _input_schema(ds, batch_rows)
            json_text = {self._column_name(k, n) for n in ds.json_columns}  # known once its rows are read
            originals = [original_name(n, RAW_RESERVED) for n in schema.names]  # as the input names them
            renamed = [n for n in inp.rename if n not in originals]
            if renamed:
                raise CurateError(f"{inp.where}.rename: input {inp.name} has no column '{renamed[0]}' "
                                  f"(its columns: {', '.join(originals)})")
            after: dict[str, list[str]] = {}  # each column's name in the shards -> the input's columns it names
            for n in schema.names:
                after.setdefault(self._column_name(k, n), []).append(n)
            both = next((named for named in after.values() if len(named) > 1), None)
            if both:  # the shards cannot hold two columns of one name (an INTERNAL ERROR at shard, after select)
                raise CurateError(f"{inp.where}.rename: input {inp.name}'s columns "
                                  f"{' and '.join(repr(original_name(n, RAW_RESERVED)) for n in both)} "
                                  f"would both be '{self._column_name(k, both[0])}'; rename to a name none of its "
                                  "other columns has")
            for f in schema:
                name = self._column_name(k, f.name)
                objects = nested_type(f.type) or name in json_text  # lists or objects, or their JSON text
                if pa.types.is_null(f.type):
                    owner.setdefault(name, (inp.name, f.type, False))
                    continue
                if is_text(f.type) and not objects:
                    texts.setdefault(name, []).append(k)
                if pa.types.is_integer(f.type):
                    whole.setdefault(name, []).append((k, f.name, f.type))
                prev = owner.get(name)
                if prev is None or pa.types.is_null(prev[1]):
                    owner[name] = (inp.name, f.type, objects)
                elif prev[2] != objects and is_text(prev[1] if objects else f.type):
                    # text in one input, lists or objects (or their JSON text) in another: JSON text for every
                    # input, the text as a JSON string (`text_as_json`)
                    owner[name] = (inp.name, pa.string(), True)
                elif prev[1] != f.type and prev[2] and objects and (
                        is_text(prev[1]) or is_text(f.type) or not same_shape(prev[1], f.type)):
                    # objects of other keys (tool_calls in some turns only) or one input's JSON text of them: JSON
                    # text in every input's rows, as in one input's batches (io/shard_writer.py `json_columns`),
                    # each row loaded back as its input held it
                    owner[name] = (inp.name, pa.string(), True)
                elif prev[1] != f.type and not objects and _one_kind(prev[1], f.type):
                    # one kind stored in two widths (pandas writes large_string, a JSON input has string): the wider
                    owner[name] = (prev[0], _one_kind(prev[1], f.type), False)
                elif prev[1] != f.type:
                    raise CurateError(f"{inp.path}: column '{f.name}' is {f.type}, but input {prev[0]} has it as "
                                      f"{prev[1]}; the shards keep one typed column per name: rename one of them "
                                      f"in a mixture file (rename: {{{f.name}: {f.name}_{inp.name}}})")
        for name, held in whole.items():
            if pa.types.is_floating(owner[name][1]):  # whole numbers in some inputs, fractions in others
                self._check_fit(name, held, owner[name][1], batch_rows)
        self.text_as_json = [{n for n, ks in texts.items() if owner[n][2] and k in ks} for k in range(len(self.inputs))]
        return pa.schema([pa.field(n, t) for n, (_, t, _) in owner.items()])

    def _check_fit(self, name: str, held: list, target: pa.DataType, batch_rows: int) -> None:
        """Whole numbers beside fractions are read as `target` (3 as 3.0), as one input's or Parquet parts' column of
        both is (io/containers); an input's whole number a float would round is refused, naming its line (its row in
        a columnar input)."""
        from cluster_curate import console
        from cluster_curate.io.containers import always_fits, fits_as
        for k, column, held_type in held:
            if always_fits(held_type, target):
                continue
            for b in self.datasets[k].iter_batches(batch_rows, examples=False):
                values = b.raw.column(column)
                if not fits_as(values, target):
                    bad = next(i for i in range(len(values)) if not fits_as(values.slice(i, 1), target))
                    row = b.raw.column(0)[bad].as_py()  # the row in its input: named by its line where it has one
                    where = self.datasets[k].line_of(row) or f"{self.inputs[k].path}: row {row}"
                    raise CurateError(f"{where}: column '{column}' "
                                      f"holds {values[bad].as_py()} ({held_type}), which the {target} that column is "
                                      "beside the other inputs' fractions cannot hold as written; rename one of them "
                                      f"in a mixture file (rename: {{{column}: {column}_{self.inputs[k].name}}})")
        inputs = ", ".join(self.inputs[k].name for k, _, _ in held)
        console.info(f"column {name!r} holds whole numbers in input {inputs} and fractions in another: read as "
                     f"{target} in every input, as a column of both is (3 as 3.0)", once=True)


def _one_kind(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The wider of two types of one kind of value: text in any width (string, large_string, string_view), whole
    numbers in signed widths, or numbers (a float beside whole numbers: Mixture._check_fit refuses one it would
    round); else None (an unsigned 64-bit beside a signed whole number is another type of column: refused)."""
    if is_text(a) and is_text(b):
        return pa.large_string() if pa.types.is_large_string(a) or pa.types.is_large_string(b) else pa.string()
    signed = [pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32()) for t in (a, b)]
    if all(signed):
        return pa.int64()
    numbers = [pa.types.is_floating(t) or pa.types.is_integer(t) for t in (a, b)]
    if all(numbers) and (pa.types.is_floating(a) or pa.types.is_floating(b)):
        return pa.float64()
    return None


def _input_schema(ds, batch_rows: int) -> pa.Schema:
    """One input's own columns (without `id`), unified over its batches as the shard writer does."""
    schemas = {}
    for b in ds.iter_batches(batch_rows, examples=False):
        schemas.setdefault(b.raw.schema, None)
    try:
        unified = pa.unify_schemas(list(schemas), promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
        raise CurateError(f"{ds.source}: its columns change type between rows ({str(e).splitlines()[0]})") from None
    return pa.schema([f for f in unified if f.name != "id"])


# ----------------------------------------------------------------------------------------------- shares
def parse_source_shares(spec: str | None, names: list[str], option: str) -> dict[str, float]:
    """`--source-min-share 0.1` (every input), `math=0.2,code=0.1`, or both (`0.1,code=0.3`: code's, then every
    other input's) -> {name: share}. Two shares for every input or for one input, and a share alone after named
    ones, are refused: one of them would be dropped, or read otherwise than before, without a word (the option
    given again is joined into one comma list, cli.py)."""
    if spec is None or str(spec).strip() == "":
        return {}
    spec = str(spec).strip()
    named: dict[str, float] = {}
    every: float | None = None  # a share alone: every input's not named
    for part in spec.split(","):
        part = part.strip()
        try:
            name, is_pair, share = share_item(part)
        except ValueError:
            raise CurateError(f"{option} {spec!r}: expected a share (0.1) or name=share pairs (math=0.2)") from None
        if not 0 <= share <= 1:
            raise CurateError(f"{option} {spec!r}: shares are between 0 and 1, got {share}")
        if is_pair and not name:
            raise CurateError(f"{option} {spec!r}: {part!r} names no input; write name=share (math=0.2), or the "
                              "share alone for every input")
        if not is_pair:
            if every is not None and every != share:
                raise CurateError(f"{option} {spec!r}: two shares for every input ({every:g} and {share:g}); give "
                                  "one, and name=share for the inputs that differ (0.1,code=0.3)")
            if named:  # read as every input's before, named ones included: say which is meant
                raise CurateError(f"{option} {spec!r}: a share alone ({share:g}) after named ones; write it first "
                                  f"({share:g},{','.join(f'{n}={v:g}' for n, v in named.items())}) for the inputs "
                                  "not named, or name every input")
            every = share
        elif name not in names:
            raise CurateError(f"{option}: no input named {name!r} (inputs: {', '.join(names)})")
        elif named.get(name, share) != share:
            raise CurateError(f"{option} {spec!r}: two shares for input {name} ({named[name]:g} and {share:g}); "
                              "give one")
        else:
            named[name] = share
    return {**(dict.fromkeys(names, every) if every is not None else {}), **named}


def share_item(part: str) -> tuple[str, bool, float]:
    """One item of a share option, `math=0.2` or `0.1` -> (its name, whether it names one, the share); ValueError
    where the share is no number."""
    name, is_pair, value = part.strip().rpartition("=")
    return name.strip(), bool(is_pair), float(value)


def source_bounds(min_spec, max_spec, names: list[str], min_shares, max_shares,
                  wheres: list[str] | None = None) -> tuple[list, list, list, list]:
    """Each input's floor and cap share: --source-min-share / --source-max-share where they name it, else the
    mixture file's `min_share` / `max_share` (`min_shares`, `max_shares`: per input, None for none). Returns
    (floors, caps, where each floor came from, where each cap came from): the option, or the mixture file's key
    (`wheres`: each input's place in its file, MixtureInput.where: `mix.yaml: inputs[1].min_share`; None, as
    read back from a lineage record: `the mixture file's min_share`), None where there is no bound. A floor
    above its cap (an option against the file's other bound) is refused here, naming where each was set."""
    bounds, origins = [], []
    for spec, option, shares, key in ((min_spec, "--source-min-share", min_shares, "min_share"),
                                      (max_spec, "--source-max-share", max_shares, "max_share")):
        given = parse_source_shares(spec, names, option)
        bounds.append([given.get(n, v) for n, v in zip(names, shares)])
        origins.append([option if n in given else None if v is None else f"{w}.{key}" if w else
                        f"the mixture file's {key}" for n, v, w in zip(names, shares, wheres or [None] * len(names))])
    for name, lo, hi, lo_from, hi_from in zip(names, *bounds, *origins):
        if lo is not None and hi is not None and lo > hi:
            raise CurateError(f"source {name}: its floor {lo:g} ({lo_from}) is above its cap {hi:g} ({hi_from})")
    return bounds[0], bounds[1], origins[0], origins[1]


def normalised_columns(examples: list[Example]) -> dict[str, pa.Array]:
    """The trainer-facing columns of examples (in order), the same for every input format: `prompt` (the
    last user turn), `response`, `system` (null without one; tool schemas are not one) and `messages` (every prompt
    turn, then the response as the assistant's: one chat-template input for any input format; tool calls and
    schemas as text, as the pipeline reads them)."""
    turn = pa.struct([("role", pa.string()), ("content", pa.string())])
    prompt, system, messages = [], [], []
    for ex in examples:
        users = [t for t in ex.prompt if t.get("role") == "user"]
        prompt.append(str(users[-1].get("content") or "") if users else "")
        sys_turns = [t for t in ex.prompt if t.get("role") == "system"]
        # the record's own system prompt: tool schemas rendered into the system turn are none
        # (tool_calls.with_tool_schemas)
        own = own_system_prompt(sys_turns[0]) if sys_turns else None
        system.append(None if own is not None and "tools" in sys_turns[0] and not own.strip() else own)
        messages.append([{"role": str(t["role"]), "content": str(t.get("content") or "")} for t in ex.prompt]
                        + [{"role": "assistant", "content": ex.response}])
    return {"prompt": pa.array(prompt, pa.string()),
            "response": pa.array([ex.response for ex in examples], pa.string()),
            "messages": pa.array(messages, pa.list_(turn)), "system": pa.array(system, pa.string())}


def open_inputs(sources: list[str] | str, options: ReadOptions | None = None):
    """What a command's DATA arguments open: one dataset as before (a Dataset: ids are its rows), or a
    Mixture when several inputs (or a mixture file) are given."""
    if not is_mixture(sources):
        return open_dataset(data_paths(sources)[0], options or ReadOptions())
    return Mixture(mixture_inputs(sources, options))


def is_mixture(sources) -> bool:
    """Whether DATA opens as a Mixture: several inputs, or one mixture file."""
    paths = data_paths(sources)
    return len(paths) != 1 or is_mixture_file(paths[0])


def is_mixture_record(record: dict | None) -> bool:
    """Whether a lineage record of the raw data (an artifact's `dataset`, a shard manifest's) is a mixture's
    (Mixture.record(): its `inputs`, each with its name, source, options and first id), not one dataset's."""
    return bool((record or {}).get("inputs"))


def inputs_from_record(record: dict) -> list[MixtureInput]:
    """The inputs a mixture's lineage record names (`Mixture.record()`), to open them again (select
    --tokenizer, report) as they were read."""
    out = []
    for i, item in enumerate(record["inputs"]):
        opts = ReadOptions(**{"on_bad_row": "error", **(item.get("options") or {})})
        out.append(MixtureInput(path=recorded_source(item), name=item["name"], options=opts,
                                rename=item.get("rename", {}),
                                min_share=item.get("min_share"), max_share=item.get("max_share"),
                                where=f"recorded input {item['name']}"))
    return out


@dataclass
class _Entry:
    """One input as a lineage record holds it, or as given now: what a mixture's fingerprint hashes, and where."""
    name: str
    path: str
    fingerprint: str | None
    options: dict  # ReadOptions.given()
    rename: dict
    in_mixture_file: bool = False


def input_difference(recorded: dict, data, contents: bool = True) -> str | None:
    """What tells the data a lineage record names (`recorded`: a mixture's, or one dataset's) from `data` as opened
    now (a Mixture or a Dataset), one of them a mixture, where their inputs have the same names in the same order
    (else the names say it): the first input that differs and how, recorded vs given (its rows unless `contents` is
    False, its rename, its reading options: with every input that differs alike), and what to write instead; else
    that one is a mixture and the other not. None where nothing but that the fingerprints differ tells them apart."""
    if is_mixture_record(recorded):
        was = [_Entry(i.get("name"), str(i.get("path") or i.get("source")), i.get("fingerprint"),
                      i.get("options") or {}, i.get("rename") or {}) for i in recorded["inputs"]]
    else:
        was = [_Entry(default_name(recorded["source"]), recorded["source"], recorded.get("fingerprint"),
                      recorded.get("options") or {}, {})]
    if isinstance(data, Mixture):
        now = [_Entry(i.name, i.path, ds.fingerprint(), i.options.given(), i.rename, i.in_mixture_file)
               for i, ds in zip(data.inputs, data.datasets)]
    else:
        now = [_Entry(default_name(data.source), data.source, data.fingerprint(), data.opts.given(), {})]
    if [e.name for e in was] != [e.name for e in now]:
        return None  # other inputs, or in another order: their names say so (artifacts.check_dataset_matches)
    pass_data = f"pass --data {was[0].path}" if len(was) == 1 else \
        f"pass --data once per input, in this order: {' '.join(e.path for e in was)}"
    for then, given in zip(was, now):
        if contents and then.fingerprint != given.fingerprint:
            return (f"input {then.name}: {given.path} holds other rows than {then.path} recorded (fingerprint "
                    f"{given.fingerprint}, {then.fingerprint} recorded; {pass_data})")
        if then.rename != given.rename:
            fix = f"give its entry `rename: {json.dumps(then.rename)}`" if then.rename else \
                "leave `rename` out of its entry"
            return (f"input {then.name}: rename {json.dumps(then.rename)} recorded, {json.dumps(given.rename)} given "
                    f"({fix})")
        differs = _options_difference(then.options, given.options, given.in_mixture_file)
        if differs:  # named with every input that differs alike (--on-bad-row skip given to embed: all of them)
            alike = [t.name for t, g in zip(was, now) if _options_difference(t.options, g.options, g.in_mixture_file)
                     == differs]
            if len(alike) > 1 and given.in_mixture_file:
                return f"inputs {', '.join(alike)}: {differs.replace('its entry', 'their entries')}"
            return f"input {then.name}: {differs}"
    if not is_mixture_record(recorded):
        return f"one dataset recorded, a mixture given ({pass_data})"
    if not isinstance(data, Mixture):
        return f"a mixture recorded, one dataset given ({pass_data}, or its mixture file)"
    return None


def _options_difference(then: dict, given: dict, in_mixture_file: bool) -> str | None:
    """`on_bad_row skip recorded, error given (...)`: the reading options of one input, recorded and given (as
    ReadOptions.given() keeps them), where they differ, with what gives the recorded ones: its mixture file's
    entry's keys, else the flags."""
    default = ReadOptions()
    keys = [k for k in dict.fromkeys([*then, *given]) if then.get(k) != given.get(k)]
    if not keys:
        return None

    def said(options, key):
        value = options.get(key, getattr(default, key))
        return "unset" if value is None else value
    what = "; ".join(f"{k} {said(then, k)} recorded, {said(given, k)} given" for k in keys)
    put, drop = [k for k in keys if k in then], [k for k in keys if k not in then]
    flag = {k: "--" + k.replace("_", "-") for k in keys}
    if in_mixture_file:
        fixes = ([f"give its entry `{', '.join(f'{k}: {then[k]}' for k in put)}`"] if put else []) \
            + ([f"leave {_listed([f'`{k}`' for k in drop])} out of its entry"] if drop else [])
    else:
        fixes = ([f"pass {' '.join(f'{flag[k]} {then[k]}' for k in put)}"] if put else []) \
            + ([f"leave out {' '.join(flag[k] for k in drop)}"] if drop else [])
    fix = " and ".join(fixes)
    if in_mixture_file and keys == ["on_bad_row"]:  # the flag is every entry's default
        fix += f", or pass --on-bad-row {said(then, 'on_bad_row')}"
    return f"{what} ({fix})"


def as_recorded(record: dict, options: ReadOptions) -> ReadOptions:
    """The reading options a single dataset's lineage record keeps (format, fields, on_bad_row), under those given
    now; a mixture's record keeps them per input."""
    return ReadOptions(**{**(record.get("options") or {}), **options.given()})


def open_lineage_data(data, record: dict, options: ReadOptions):
    """The raw data behind an artifact: `data` (a command's --data) when given, else the dataset or mixture its
    lineage `record` names; None when there is neither. The recorded data is read as it was (a mixture's inputs
    with their options, one dataset with the reading options it records, under those given now), and so is
    `data` that names the recorded dataset, or a mixture's recorded inputs in their order (with no reading
    option given now): stage by stage, `embed --on-bad-row skip` need not be repeated."""
    single = record.get("source") and not is_mixture_record(record)
    as_read = as_recorded(record, options) if single else options
    if data:
        paths = [Path(p).resolve() for p in data_paths(data)]
        if single:
            same = paths == [Path(recorded_source(record)).resolve()]
            return open_inputs(data, as_read if same else options)
        if is_mixture_record(record) and not options.given() and \
                paths == [Path(recorded_source(item)).resolve() for item in record["inputs"]]:
            return Mixture(inputs_from_record(record))  # the recorded inputs, each as it was read
        return open_inputs(data, options)
    if is_mixture_record(record):
        return Mixture(inputs_from_record(record))
    if single:
        return open_inputs(recorded_source(record), as_read)
    return None


def source_index(record: dict | None, ids) -> np.ndarray | None:
    """Each id's input (its index in the mixture's inputs), from the inputs' first ids a mixture's lineage
    record holds; None for a single dataset."""
    first = _first_ids(record)
    return None if first is None else np.searchsorted(first, np.asarray(ids), side="right") - 1


def _first_ids(record: dict | None) -> np.ndarray | None:
    if not is_mixture_record(record):
        return None
    return np.array([i["first_id"] for i in record["inputs"]], dtype=np.int64)


def with_source_columns(table: pa.Table, record: dict) -> pa.Table:
    """An artifact's rows with `source` (the input's name) and `source_row` (its row in that input) after
    `id`, from the inputs' first ids a mixture's lineage record holds; unchanged for a single dataset."""
    ids = table.column("id").to_numpy()
    index = source_index(record, ids)
    if index is None:
        return table
    at = table.column_names.index("id") + 1
    table = table.add_column(at, "source", pa.DictionaryArray.from_arrays(
        pa.array(index, pa.int32()), pa.array([i["name"] for i in record["inputs"]], pa.string())))
    return table.add_column(at + 1, "source_row", pa.array(ids - _first_ids(record)[index], pa.int64()))
