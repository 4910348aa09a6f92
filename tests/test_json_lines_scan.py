"""JSON Lines rows are decoded by json's C scanner directly (io/containers.py `_SCAN`), a line that is anything but
one object by json.loads: every row, and so every shard, is what json.loads of each line gave."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cluster_curate as cc
from cluster_curate.io import containers
from shard_helpers import make_dataset, make_selection
from test_datasets import write_jsonl
from test_input_formats import preference_rows
from test_tool_calling import _late_key_rows, tool_rows

JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=8)


def _as_json_loads(line: bytes):
    """What json.loads made of a line (the reader before the scanner): its record, or its error's text; a record
    holding a lone surrogate, which no UTF-8 text holds, is a bad row (test_fidelity.py); a byte-order mark a line
    starts with is no data (a file joined after another with `cat`), on any line as on the first."""
    try:
        value = json.loads(line.decode("utf-8").removeprefix("\ufeff").rstrip("\r\n"))
    except json.JSONDecodeError as e:
        return f"invalid JSON ({e.msg}: column {e.colno})"
    if not isinstance(value, dict):
        return f"expected a JSON object, found {containers._json_type(value)}"
    lone = containers._lone_surrogate(None, value)
    return lone.error if lone else value


def _rows(path):
    return [r.record if r.record is not None else r.error for r in containers._JsonLines(path).iter_rows()]


EDGE_LINES = [b'{"a": 1}', b'  {"a": 1}', b'{"a": 1}  ', b'{"a": 1}\r', b'{"a": 1} {"b": 2}', b'{"a": 1}, 2',
              b'{"a": NaN, "b": -Infinity}', b'{"a": 1e400, "b": 123456789012345678901234567890}',
              b'{"a": 1, "a": 2}', b'{"a": "\\ud800"}', b'{"a": "\\u00e9\xc3\xa9"}', b'\xef\xbb\xbf{"a": 1}',
              b'[{"a": 1}]', b'"text"', b'null', b'{"a": [1, {"b": {}}]', b'{"a": "x\\q"}', b'{"a":\t{"b": []}}',
              b'\t{"a": 1}\t\r', b'{}']


def test_edge_lines_read_as_json_loads_reads_them(tmp_path):
    """Whitespace around an object, text after it, NaN, huge numbers, repeated keys, lone surrogates, a byte-order
    mark on a later line, values that are not objects, and broken JSON: each row's record or error as json.loads
    makes them."""
    p = tmp_path / "edge.jsonl"
    p.write_bytes(b'{"first": true}\n' + b"\n".join(EDGE_LINES) + b"\n")
    assert _rows(p) == [{"first": True}] + [_as_json_loads(line) for line in EDGE_LINES]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(JSON_VALUES, st.sampled_from(["", " ", "\t", "\r"]), st.booleans()), min_size=1,
                       max_size=12))
def test_random_json_lines_read_as_json_loads_reads_them(tmp_path_factory, values):
    lines = [(json.dumps(v, indent=None if compact else 1).replace("\n", " ") + pad).encode()
             for v, pad, compact in values]
    p = tmp_path_factory.mktemp("scan") / "d.jsonl"
    p.write_bytes(b'{"first": 0}\n' + b"\n".join(lines))
    got = _rows(p)
    assert got[1:] == [_as_json_loads(line) for line in lines if line.strip()]


def _through_json_loads(monkeypatch):
    """The reader as it was: every line through json.loads (the scanner finds nothing)."""
    def nothing(text, at):
        raise StopIteration(at)
    monkeypatch.setattr(containers, "_SCAN", nothing)


def _shard_files(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".parquet"}


DATASETS = {
    # the messages' turns differ in keys (tool_calls, tool_call_id): JSON text columns
    "tool-calls": lambda: tool_rows(300),
    # TRL's conversational preference pairs: lists of turns in prompt, chosen and rejected
    "preference-pairs": lambda: preference_rows(200, "conversational"),
    # an object column whose keys first differ in the second batch of 4096: read twice (datasets.settled_pass)
    "late-keys": lambda: _late_key_rows(6000, "int_float"),
}


@pytest.mark.parametrize("name", [*DATASETS, "nested-meta"])
def test_shards_are_the_bytes_that_json_loads_rows_gave(tmp_path, monkeypatch, name):
    """The shards (rows, order, schema, metadata: the files' bytes) and the manifest of a shard over each JSON
    Lines shape, read with the scanner and through json.loads."""
    data = tmp_path / "data.jsonl"
    if name == "nested-meta":
        make_dataset(data, 500, extra={"tags": lambda i: [f"t{i % 4}"] * (i % 3), "score": lambda i: i / 7})
    else:
        write_jsonl(data, DATASETS[name]())
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, n_tokens=True)

    def shard(out):
        manifest = cc.shard(str(tmp_path / "sel.parquet"), str(data), str(out), num_shards=2, micro_batch_size=3)
        return {k: v for k, v in manifest.items() if k not in ("out", "seconds", "seconds_by_phase")}

    scanned = shard(tmp_path / "scanned")
    with monkeypatch.context() as m:
        _through_json_loads(m)
        loaded = shard(tmp_path / "loaded")
    assert scanned == loaded
    assert _shard_files(tmp_path / "scanned") == _shard_files(tmp_path / "loaded")
    assert sum(pq.read_metadata(tmp_path / "scanned" / f).num_rows for f in _shard_files(tmp_path / "scanned")) \
        == scanned["sharded_rows"] > 0
