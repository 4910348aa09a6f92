"""Property tests for every reader (issue 20): random bytes, truncated files and random JSON shapes never raise
anything but a one-line CurateError, and never lose a row silently: every source row is either an example or a
reject with its id, ids are 0..rows-1 in order, and the raw batches hold every row."""

from __future__ import annotations

import gzip
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cluster_curate.errors import CurateError
from cluster_curate.io.datasets import ReadOptions, open_dataset
from conftest import FIXTURES

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])
SUFFIXES = [".jsonl", ".json", ".csv", ".parquet", ".jsonl.gz", ".csv.gz"]


def read_accounted(path, **opts) -> tuple[int, int, int] | None:
    """(rows, examples, rejects) after a full read in skip mode, or None for a clean CurateError; any other
    exception fails the test. Checks that no row went missing on the way."""
    try:
        ds = open_dataset(path, ReadOptions(on_bad_row="skip", **opts))
        ids, raw_ids = [], []
        for batch in ds.iter_batches(batch_rows=7):
            ids += [e.id for e in batch.examples]
            raw_ids += batch.raw.column("id").to_pylist()
    except CurateError as e:
        assert "\n" not in str(e) and str(e).strip(), repr(str(e))
        return None
    rejected = [r.id for r in ds.rejects]
    assert raw_ids == list(range(ds.rows)), "raw batches must hold every row, ids in order"
    assert sorted(ids + rejected) == list(range(ds.rows)), "every row is an example or a reject"
    assert not set(ids) & set(rejected)
    assert ds.num_rows() == ds.rows
    return ds.rows, len(ids), len(rejected)


def _non_blank_lines(data: bytes) -> int:
    return sum(1 for line in data.split(b"\n") if line.strip())


# ------------------------------------------------------------------------------------------------ random bytes

@SETTINGS
@given(data=st.binary(max_size=600), suffix=st.sampled_from(SUFFIXES))
@example(data=b"\x80\r", suffix=".csv")  # found by this test: a header that is not UTF-8 was a traceback
def test_random_bytes_never_crash_or_lose_rows(tmp_path_factory, data, suffix):
    p = tmp_path_factory.mktemp("bytes") / f"data{suffix}"
    p.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    got = read_accounted(p)
    if got is not None and suffix == ".jsonl":
        assert got[0] == _non_blank_lines(data.removeprefix(b"\xef\xbb\xbf"))


@SETTINGS
@given(lines=st.lists(st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b'{"question": "q", "answer": "a"}', b'{"question": "q"}', b"[1, 2]", b"{", b"null",
                     b'{"question": "q", "answer": ""}', b"\xff\xfe", b'"text"', b'{"question": 1, "answer": 2}'])),
    max_size=20))
def test_json_lines_made_of_random_lines(tmp_path_factory, lines):
    data = b"\n".join(line.replace(b"\n", b" ") for line in lines)
    p = tmp_path_factory.mktemp("lines") / "d.jsonl"
    p.write_bytes(data)
    got = read_accounted(p)
    if got is not None:
        assert got[0] == _non_blank_lines(data.removeprefix(b"\xef\xbb\xbf"))


# ------------------------------------------------------------------------------------------------ truncated files

def _valid_file(kind: str) -> bytes:
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()[:12]]
    if kind == ".jsonl":
        return "".join(json.dumps(r) + "\n" for r in rows).encode()
    if kind == ".json":
        return json.dumps(rows, indent=1).encode()
    if kind == ".csv":
        import pyarrow.csv as pacsv
        buf = io.BytesIO()
        pacsv.write_csv(pa.Table.from_pylist(rows), buf)
        return buf.getvalue()
    if kind == ".parquet":
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows), buf, row_group_size=4)
        return buf.getvalue()
    if kind in (".jsonl.gz", ".csv.gz"):
        return gzip.compress(_valid_file(kind[:-3]))
    raise AssertionError(kind)


VALID = {k: _valid_file(k) for k in SUFFIXES}


@SETTINGS
@given(suffix=st.sampled_from(SUFFIXES), cut=st.floats(0, 1, exclude_max=True))
def test_truncated_files_never_crash_or_lose_rows(tmp_path_factory, suffix, cut):
    whole = VALID[suffix]
    data = whole[: int(len(whole) * cut)]
    p = tmp_path_factory.mktemp("cut") / f"data{suffix}"
    p.write_bytes(data)
    got = read_accounted(p)
    if got is None:
        return
    rows, examples, _ = got
    if suffix == ".jsonl":
        assert rows == _non_blank_lines(data)
        assert examples >= data.count(b"\n")  # every complete line is a good record
    if suffix == ".parquet":
        assert rows == 12  # a Parquet file is readable only whole


# ------------------------------------------------------------------------------------------------ random JSON shapes

KEYS = ["question", "answer", "instruction", "input", "output", "prompt", "completion", "response", "messages",
        "conversations", "system", "id", "key", "role", "content", "from", "value"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                      max_leaves=12)
records = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)
shapes = st.lists(st.one_of(records, records, values), min_size=1, max_size=12)


@SETTINGS
@given(items=shapes, container=st.sampled_from(["jsonl", "array", "mapping"]))
@example(items=[{}], container="jsonl")  # found by this test: records without fields were a traceback
def test_random_json_shapes_never_crash_or_lose_rows(tmp_path_factory, items, container):
    d = tmp_path_factory.mktemp("shapes")
    if container == "jsonl":
        p = d / "d.jsonl"
        p.write_text("".join(json.dumps(v) + "\n" for v in items))
    elif container == "array":
        p = d / "d.json"
        p.write_text(json.dumps(items, indent=1))
    else:
        p = d / "d.json"
        p.write_text(json.dumps({f"r{i}": v for i, v in enumerate(items)}, indent=1))
    got = read_accounted(p)
    if got is not None:
        assert got[0] == len(items)


@SETTINGS
@given(items=st.lists(records, min_size=1, max_size=10))
def test_random_parquet_columns_never_crash_or_lose_rows(tmp_path_factory, items):
    """Columnar sources: whatever Arrow makes of the records (nested, mixed, null columns)."""
    try:
        table = pa.Table.from_pylist([{k: v for k, v in r.items()} for r in items])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        return  # not representable in one Arrow table: no such Parquet file exists
    if table.num_columns == 0:
        return
    p = tmp_path_factory.mktemp("pq") / "d.parquet"
    try:
        pq.write_table(table, p)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return
    got = read_accounted(p)
    if got is not None:
        assert got[0] == len(items)
