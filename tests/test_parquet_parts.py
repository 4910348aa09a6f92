"""A directory of Parquet parts is one dataset only when its parts are: splits (`train/` beside `test/`, the hub's
`train-00000-of-00001.parquet` beside `test-...`) and hive `key=value` folders are refused before a row is read, and
a column stored with other types in other parts is read as one type, said, or refused up front in one line, never
changed silently or found only at the shard stage (README, "inspect DATA": containers, what is kept exactly)."""

from __future__ import annotations

import json
from datetime import date

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_curate.loader import load_shard
from conftest import FIXTURES
from conftest import cli_in_process as _cli

ROWS = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
N = 60  # rows a part
RUN = ["--features", "text", "--dim", "4", "--k", "2", "--fraction", "0.5", "--num-shards", "2", "-q"]


def base(lo: int = 0, n: int = N) -> dict:
    return {"question": [r["question"] for r in ROWS[lo:lo + n]], "answer": [r["answer"] for r in ROWS[lo:lo + n]]}


def parts(d, *columns: dict, names=("part-0.parquet", "part-1.parquet")):
    """A directory of parts, part i holding rows i*N.. and `columns[i]` beside them."""
    for i, (name, extra) in enumerate(zip(names, columns)):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({**base(i * N), **extra}), d / name)
    return d


def run(tmp_path, data, *more):
    return _cli("run", data, "--out", tmp_path / "out", *RUN, *more)


def shard_rows(tmp_path) -> dict[int, dict]:
    shards = tmp_path / "out" / "shards"
    return {r["id"]: r for rank in range(2) for r in load_shard(shards, rank=rank, world_size=2)}


def refused(r, *said: str) -> str:
    """The one line a refused command printed, which says each of `said`; nothing was embedded."""
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), r.stderr
    assert "INTERNAL" not in r.stderr and all(s in lines[0] for s in said), lines[0]
    return lines[0]


# ------------------------------------------------------------------------------------------------ layouts

@pytest.mark.parametrize("layout, give", [
    (("train/train-00000-of-00001.parquet", "test/test-00000-of-00001.parquet"), "train"),  # the hub's folders
    (("data/train-00000-of-00001.parquet", "data/test-00000-of-00001.parquet"),  # a hub snapshot's file names
     "data/train-00000-of-00001.parquet"),
    (("default/train/0000.parquet", "default/validation/0000.parquet"), "default/train"),  # the parquet converter
])
def test_a_directory_of_splits_is_refused_naming_them_and_the_path_to_give(tmp_path, layout, give):
    d = parts(tmp_path / "ds", {}, {}, names=layout)
    line = refused(run(tmp_path, d), f"{d}: a directory of Parquet splits", f"give one, e.g. {d / give}")
    assert all(part in line for part in layout)
    assert not (tmp_path / "out" / "embeddings.parquet").exists()
    r = _cli("inspect", d)
    refused(r, "a directory of Parquet splits")
    # the split given alone is read; so are a split's several parts, and parts no name calls a split
    assert run(tmp_path, d / give).returncode == 0
    one = parts(tmp_path / "one", {}, {}, names=[f"data/train-0000{i}-of-00002.parquet" for i in range(2)])
    assert _cli("inspect", one).returncode == 0
    parts(one, {}, {}, names=[f"data/test_sft-0000{i}-of-00002.parquet" for i in range(2)])  # the shell's pattern
    refused(_cli("inspect", one), "test_sft: data/test_sft-00000-of-00002.parquet and 1 more file",
            f"give one, e.g. {one / 'data' / 'train-*.parquet'}")
    # names that start with a split's word but hold no evaluation rows beside training ones are one dataset (a first
    # version refused them): two training sets, or evaluation sets alone
    for names in (("train-math.parquet", "train-code.parquet"), ("testing_tools.parquet", "eval_harness.parquet")):
        assert _cli("inspect", parts(tmp_path / names[0], {}, {}, names=names)).returncode == 0, names


def test_a_hive_partitioned_directory_is_refused_not_read_without_its_column(tmp_path):
    """pyarrow's write_dataset(partitioning=hive): the column `lang` lives in the folder names alone."""
    import pyarrow.dataset as pads
    d = tmp_path / "hive"
    pads.write_dataset(pa.table({**base(0, 2 * N), "lang": ["en", "fr"] * N}), d, format="parquet",
                       partitioning=["lang"], partitioning_flavor="hive")
    refused(run(tmp_path, d), f"{d}: a hive-partitioned Parquet directory (folders lang=en, lang=fr)",
            "column 'lang'")
    assert not (tmp_path / "out").exists() or not (tmp_path / "out" / "embeddings.parquet").exists()
    # files that hold the column themselves lose nothing: read (a first version refused them)
    own = tmp_path / "own"
    parts(own, {"lang": ["en"] * N}, {"lang": ["fr"] * N}, names=("lang=en/p.parquet", "lang=fr/p.parquet"))
    assert _cli("inspect", own).returncode == 0


# ------------------------------------------------------------------------------------------------ column types

def test_text_in_every_encoding_across_parts_is_one_text_column(tmp_path):
    """A pandas Categorical (dictionary) in one part, plain text in another, a string_view in a third: all text,
    the whole pipeline through (the shard stage refused the first pair after embedding; a view crashed it)."""
    d = tmp_path / "ds"
    d.mkdir()
    pd.DataFrame({**base(0), "lang": pd.Categorical(["en", "fr"] * (N // 2))}).to_parquet(d / "part-0.parquet")
    pd.DataFrame({**base(N), "lang": ["de", "it"] * (N // 2)}).to_parquet(d / "part-1.parquet")
    pq.write_table(pa.table({**base(2 * N), "lang": pa.array(["es"] * N, pa.string_view())}), d / "part-2.parquet")
    r = run(tmp_path, d)
    assert r.returncode == 0, r.stderr
    rows = shard_rows(tmp_path)
    langs = ["en", "fr"] * (N // 2) + ["de", "it"] * (N // 2) + ["es"] * N
    assert rows and all(r["lang"] == langs[i] for i, r in rows.items())
    assert "WARNING" not in r.stderr


def test_a_string_view_column_reaches_the_shards_as_text(tmp_path):
    """One file's string_view column (Table.take has no kernel for it: the shard stage crashed) is read as text."""
    p = tmp_path / "d.parquet"
    tags = pa.array([f"v{i}" for i in range(2 * N)], pa.string_view())
    pq.write_table(pa.table({**base(0, 2 * N), "tag": tags}), p)
    r = run(tmp_path, p)
    assert r.returncode == 0, r.stderr
    rows = shard_rows(tmp_path)
    assert rows and all(r["tag"] == f"v{i}" for i, r in rows.items())
    shard = tmp_path / "out" / "shards" / "shard-00000-of-00002.parquet"
    assert pq.read_schema(shard).field("tag").type == pa.string()


def test_a_column_named_like_the_shard_writers_own_keeps_its_name_and_values(tmp_path):
    """A data column `__position` (the shard writer's own column's name; it crashed the write) and one named as
    the writer would rename it reach the shards under their own names, with their own values."""
    p = tmp_path / "d.parquet"
    pq.write_table(pa.table({**base(0, 2 * N), "__position": [1000 + i for i in range(2 * N)],
                             "___position": [-i for i in range(2 * N)]}), p)
    r = run(tmp_path, p)
    assert r.returncode == 0, r.stderr
    rows = shard_rows(tmp_path)
    assert rows and all(r["__position"] == 1000 + i and r["___position"] == -i for i, r in rows.items())
    names = pq.read_schema(tmp_path / "out" / "shards" / "shard-00000-of-00002.parquet").names
    assert names == ["id", "question", "answer", "__position", "___position", "cluster", "step", "weight", "wrapped"]


def test_numbers_beside_text_in_another_part_are_text_and_said(tmp_path):
    """As JSON input's column of numbers and text: text (95 as '95'), with JSON input's warning."""
    d = parts(tmp_path / "ds", {"note": pa.array(range(N), pa.int64())}, {"note": ["hello"] * N})
    r = run(tmp_path, d)
    assert r.returncode == 0, r.stderr
    assert "column 'note' holds text in some rows and other values in others" in r.stderr
    rows = shard_rows(tmp_path)
    assert rows and all(r["note"] == (str(i) if i < N else "hello") for i, r in rows.items())


@pytest.mark.parametrize("a, b, said", [
    (pa.array([b"\x00raw"] * N, pa.binary()), pa.array(["hello"] * N),
     "column 'note' holds text in some parts and bytes in others"),
    (pa.array(range(N), pa.int64()), pa.array([2 ** 63 + i for i in range(N)], pa.uint64()),
     "part-1.parquet: row 0: column 'note' holds 9223372036854775808 (uint64)"),
    (pa.array([0.5] * N, pa.float64()), pa.array([2 ** 53 + 1 + i for i in range(N)], pa.int64()),
     "part-1.parquet: row 0: column 'note' holds 9007199254740993 (int64)"),
    (pa.array([date(2024, 1, 1)] * N), pa.array([7] * N), "column 'note' has types that no one column holds"),
])
def test_what_no_one_type_holds_is_refused_before_embedding(tmp_path, a, b, said):
    """Bytes beside text (were bytes, the text rows too), numbers whose common type would change them (were an
    INTERNAL ERROR at the shard stage), dates beside numbers: one line, before any work."""
    d = parts(tmp_path / "ds", {"note": a}, {"note": b})
    refused(run(tmp_path, d), said)
    assert not (tmp_path / "out" / "embeddings.parquet").exists()


def test_booleans_beside_numbers_are_text_as_the_shards_made_them(tmp_path):
    """true in one part and 1 in another: text, each value's JSON text, with a warning, as before the parts were
    checked up front (a first version of that check refused it)."""
    d = parts(tmp_path / "ds", {"flag": pa.array([True] * N)}, {"flag": pa.array([1] * N)})
    r = run(tmp_path, d)
    assert r.returncode == 0 and "column 'flag' holds booleans in some parts and numbers in others" in r.stderr
    assert {row["flag"] for row in shard_rows(tmp_path).values()} <= {"true", "1"}


def test_numbers_of_other_widths_are_the_type_that_holds_them_all(tmp_path):
    """int8 beside uint8 (int16), int64 beside uint64 under 2**63 (int64), floats beside whole numbers under 2**53
    (floats, said): read as one type, every value as it was; parts that agree are read as they are."""
    d = parts(tmp_path / "ds", {"small": pa.array([-1] * N, pa.int8()), "big": pa.array(range(N), pa.int64()),
                                "x": pa.array([0.5] * N), "same": pa.array(range(N), pa.int32())},
              {"small": pa.array([255] * N, pa.uint8()), "big": pa.array([2 ** 62] * N, pa.uint64()),
               "x": pa.array([2 ** 53] * N, pa.int64()), "same": pa.array(range(N), pa.int32())})
    r = run(tmp_path, d)
    assert r.returncode == 0, r.stderr
    rows = shard_rows(tmp_path)
    assert all((r["small"], r["big"], r["x"]) == ((-1, i, 0.5) if i < N else (255, 2 ** 62, float(2 ** 53)))
               for i, r in rows.items())
    types = pq.read_schema(tmp_path / "out" / "shards" / "shard-00000-of-00002.parquet")
    assert [str(types.field(c).type) for c in ("small", "big", "x", "same")] == ["int16", "int64", "double", "int32"]


# ------------------------------------------------------------------------------------------------ property

_TYPES = {"int8": (pa.int8(), st.integers(-128, 127)), "int32": (pa.int32(), st.integers(-2 ** 31, 2 ** 31 - 1)),
          "int64": (pa.int64(), st.integers(-2 ** 63, 2 ** 63 - 1)),
          "uint64": (pa.uint64(), st.integers(0, 2 ** 64 - 1)),
          "float32": (pa.float32(), st.floats(width=32, allow_nan=False, allow_infinity=False)),
          "float64": (pa.float64(), st.floats(allow_nan=False, allow_infinity=False)),
          "string": (pa.string(), st.text(max_size=6)), "large_string": (pa.large_string(), st.text(max_size=6)),
          "dictionary": (pa.dictionary(pa.int8(), pa.string()), st.sampled_from(["a", "b", "3"])),
          "string_view": (pa.string_view(), st.text(max_size=6)), "bool": (pa.bool_(), st.booleans()),
          "binary": (pa.binary(), st.binary(max_size=4))}


@st.composite
def _part_columns(draw):
    """Per part: the type its column `x` is stored with, and 20 values of it (some null)."""
    kinds = draw(st.lists(st.sampled_from(sorted(_TYPES)), min_size=2, max_size=3))
    return [(kind, draw(st.lists(st.none() | _TYPES[kind][1], min_size=20, max_size=20))) for kind in kinds]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(columns=_part_columns())
def test_any_column_types_across_parts_are_read_as_written_or_refused_before_any_work(tmp_path_factory, columns):
    """Parts storing one column in any mix of types: refused in one line before a row is embedded, or every row
    reaches the shards with its value as written (a wider number; text where another part holds text: the value's
    JSON text, as README says of JSON input), never an INTERNAL ERROR nor a value changed otherwise."""
    tmp = tmp_path_factory.mktemp("parts")
    (tmp / "data").mkdir()
    given_x = []
    for i, (kind, values) in enumerate(columns):
        t = _TYPES[kind][0]
        x = pa.array(values, pa.string()).dictionary_encode() if kind == "dictionary" else pa.array(values, t)
        pq.write_table(pa.table({**base(i * 20, 20), "x": x}), tmp / "data" / f"part-{i}.parquet")
        given_x += values
    r = _cli("run", tmp / "data", "--out", tmp / "out", *RUN)
    if r.returncode != 0:
        refused(r)
        assert not (tmp / "out" / "embeddings.parquet").exists()
        return
    got = {i: row["x"] for i, row in shard_rows(tmp).items()}
    kinds = {kind for kind, _ in columns}
    numbers = {"int8", "int32", "int64", "uint64", "float32", "float64"}
    texts = bool(kinds & {"string", "large_string", "string_view", "dictionary"}) or (
        "bool" in kinds and bool(kinds & numbers))  # booleans beside numbers: text too
    for i, x in got.items():
        want = given_x[i]
        if want is None or x == want and type(x) is type(want):
            continue
        if texts and not isinstance(want, str):  # text beside it: its JSON text
            assert x == json.dumps(want), (i, want, x)
        else:  # a wider number type: the same number
            assert isinstance(want, (int, float)) and not isinstance(want, bool) and x == want, (i, want, x)
