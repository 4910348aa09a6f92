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

THIS FILE IS A MINIMAL FIRST VERSION (JSONL + JSON list, Alpaca and question/answer). The foundation
issue completes it (all containers and formats, streaming, bad input) without changing the contract.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cluster_curate.errors import CurateError


@dataclass(frozen=True)
class Example:
    id: int
    prompt: list  # chat turns [{"role": "system"|"user"|"assistant", "content": str}, ...], last one "user"
    response: str


@dataclass
class Reject:
    id: int
    location: str  # "file:line" or "file:row N"
    field: str | None
    reason: str

    def to_dict(self) -> dict:
        return {"id": self.id, "location": self.location, "field": self.field, "reason": self.reason}


@dataclass
class ReadOptions:
    format: str | None = None
    prompt_field: str | None = None
    response_field: str | None = None
    on_bad_row: str = "error"  # "error" | "skip"


@dataclass
class Batch:
    raw: pa.RecordBatch
    examples: list = field(default_factory=list)


def file_fingerprint(path: Path) -> str:
    h = hashlib.blake2b(digest_size=12)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    return h.hexdigest()


def _alpaca(rec: dict, opts: ReadOptions):
    instruction = rec.get(opts.prompt_field or "instruction")
    extra = rec.get("input") or ""
    prompt = f"{instruction}\n\n{extra}" if extra else instruction
    response = rec.get(opts.response_field) if opts.response_field else rec.get("output", rec.get("response"))
    return [{"role": "user", "content": prompt}], response, opts.prompt_field or "instruction", opts.response_field or ("output" if "output" in rec else "response")


def _qa(rec: dict, opts: ReadOptions):
    pf, rf = opts.prompt_field or "question", opts.response_field or "answer"
    return [{"role": "user", "content": rec.get(pf)}], rec.get(rf), pf, rf


FORMATS = {"alpaca": _alpaca, "qa": _qa}


def detect_format(keys: set) -> str:
    if "instruction" in keys:
        return "alpaca"
    if "question" in keys and "answer" in keys:
        return "qa"
    raise CurateError(f"unrecognised format: columns {sorted(keys)}; pass --format or --prompt-field/--response-field")


class Dataset:
    def __init__(self, source: str, opts: ReadOptions):
        self.source, self.opts = source, opts
        self.path = Path(source)
        if not self.path.exists():
            raise CurateError(f"{source}: no such file or directory")
        self.rejects: list[Reject] = []
        self.rows: int | None = None
        self.format = opts.format
        self.fields: dict = {}

    def record(self) -> dict:
        return {"source": str(self.source), "fingerprint": file_fingerprint(self.path), "rows": self.rows}

    def _records(self) -> Iterator[tuple[str, dict]]:
        if self.path.suffix == ".jsonl":
            with open(self.path, encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            yield f"{self.path}:{lineno}", json.loads(line)
                        except json.JSONDecodeError as e:
                            raise CurateError(f"{self.path}:{lineno}: invalid JSON ({e})") from None
        else:
            for i, rec in enumerate(json.loads(self.path.read_text(encoding="utf-8"))):
                yield f"{self.path}:row {i}", rec

    def iter_batches(self, batch_rows: int = 2048) -> Iterator[Batch]:
        self.rejects = []
        buf: list[tuple[str, dict]] = []
        next_id = 0
        for item in self._records():
            buf.append(item)
            if len(buf) == batch_rows:
                yield self._make_batch(buf, next_id)
                next_id += len(buf)
                buf = []
        if buf:
            yield self._make_batch(buf, next_id)
            next_id += len(buf)
        self.rows = next_id

    def _make_batch(self, items, first_id) -> Batch:
        examples = []
        for i, (loc, rec) in enumerate(items):
            if self.format is None:
                self.format = detect_format(set(rec))
            prompt, response, pf, rf = FORMATS[self.format](rec, self.opts)
            self.fields = {"prompt": pf, "response": rf}
            if not isinstance(response, str) or not response.strip():
                reject = Reject(first_id + i, loc, rf, "missing or empty response")
                if self.opts.on_bad_row != "skip":
                    raise CurateError(f"{loc}: field '{rf}': missing or empty response")
                self.rejects.append(reject)
                continue
            examples.append(Example(first_id + i, prompt, response))
        raw = pa.RecordBatch.from_pylist([{"id": first_id + i, **rec} for i, (_, rec) in enumerate(items)])
        return Batch(raw, examples)

    def write_rejects(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for r in self.rejects:
                f.write(json.dumps(r.to_dict()) + "\n")


def open_dataset(source: str, opts: ReadOptions | None = None) -> Dataset:
    return Dataset(source, opts or ReadOptions())
