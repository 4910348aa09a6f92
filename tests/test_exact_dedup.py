"""Exact duplicates (issue 20 #8): same normalised prompt and response; the lowest id is kept."""

from __future__ import annotations

import re
import sys
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate.exact_dedup import example_key, first_of_each, normalise_text


def _key(q: str, a: str, role: str = "user") -> bytes:
    return example_key([{"role": role, "content": q}], a)


def test_200_rows_each_present_twice_keep_the_lowest_id():
    rng = np.random.default_rng(0)
    n = 200
    ids = np.arange(2 * n)
    keys = [_key(f"question {i % n}", f"answer {i % n}") for i in ids]
    perm = rng.permutation(2 * n)  # row order does not matter
    keep, copy_of = first_of_each(ids[perm], [keys[i] for i in perm])
    kept = np.sort(ids[perm][keep])
    assert kept.tolist() == list(range(n))
    assert np.array_equal(copy_of, ids[perm] % n)


def test_normalisation_whitespace_and_unicode_yes_case_and_role_no():
    base = _key("What is 2 + 2?", "4")
    assert _key("  What is\t2 +\n\n2? ", "4 ") == base
    assert _key("caf\u00e9", "x") == _key("cafe\u0301", "x")  # NFC: one character or e + combining accent
    assert _key("what is 2 + 2?", "4") != base  # case is kept (code, maths)
    assert _key("What is 2 + 2?", "4", role="system") != base
    assert example_key([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "c") != \
        example_key([{"role": "user", "content": "a b"}], "c")  # turn boundaries count
    assert _key("q", "a b") != _key("q a", "b")  # the prompt/response boundary counts


def test_normalised_text_is_the_regex_runs_of_whitespace_as_one_space_stripped():
    """normalise_text splits at str.isspace, as re's \\s matched: every code point is whitespace to both or neither,
    and texts of any characters normalise as the regex pass did (the keys of the copies are unchanged)."""
    space = re.compile(r"\s+")
    assert [c for c in map(chr, range(sys.maxunicode + 1)) if bool(space.fullmatch(c)) != c.isspace()] == []
    for text in [" a\u00a0 b\u2028c\x1fd\x85 ", "e\u0301\t\t\n", "", " \u3000 ", "x\x0b\x0cy\r\n"]:
        assert normalise_text(text) == space.sub(" ", unicodedata.normalize("NFC", text)).strip()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab é\u0301\t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2028\u3000"))))
def test_normalised_random_text_is_the_regex_pass(text):
    assert normalise_text(text) == re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip()


def test_empty_and_unique():
    keep, copy_of = first_of_each(np.zeros(0, np.int64), [])
    assert keep.size == 0 and copy_of.size == 0
    keep, _ = first_of_each(np.array([5, 3]), [_key("a", "b"), _key("a", "c")])
    assert keep.tolist() == [True, True]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 6)), min_size=1, max_size=60,
                unique_by=lambda t: t[0]))
def test_keeps_exactly_the_lowest_id_of_each_key(rows):
    ids = np.array([r[0] for r in rows])
    keys = [_key(str(r[1]), "a") for r in rows]
    keep, copy_of = first_of_each(ids, keys)
    by_key: dict[int, list[int]] = {}
    for i, v in rows:
        by_key.setdefault(v, []).append(i)
    assert sorted(ids[keep].tolist()) == sorted(min(v) for v in by_key.values())
    for (i, v), c in zip(rows, copy_of):
        assert c == min(by_key[v])


@pytest.mark.slow
def test_a_dataset_of_rows_each_present_twice(tmp_path):
    """Issue 20 #8: 200 rows each present twice (the issue's example, where 92 of 124 shard rows were copies):
    by default no copy reaches the shards; the count and ids are in the summary, the metadata of every artifact
    and the manifest; --keep-duplicates opts out."""
    import json

    import pyarrow.parquet as pq

    from cluster_curate.io.artifacts import read_meta
    from conftest import FIXTURES, cli_in_process
    rows = (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(keepends=True)[:200]
    data = tmp_path / "twice.jsonl"
    data.write_text("".join(rows + rows))
    fast = ["--features", "text", "--dim", "16", "--fraction", "0.31", "--num-shards", "2", "--micro-batch-size", "2"]
    r = cli_in_process("run", data, "--out", tmp_path / "p", *fast, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)["summaries"]
    assert summary["embed"]["exact_duplicates_dropped"] == 200
    assert "200 exact duplicate(s)" in r.stderr and "--keep-duplicates" in r.stderr
    expected = {"dropped": 200, "ids": list(range(200, 400)), "kept": False}
    for name in ("embeddings.parquet", "clusters.parquet", "selection.parquet"):
        assert read_meta(tmp_path / "p" / name).params["exact_duplicates"] == expected, name
    manifest = json.loads((tmp_path / "p" / "shards" / "manifest.json").read_text())
    assert manifest["exact_duplicates"] == expected
    ids = [i for f in sorted((tmp_path / "p" / "shards").glob("shard-*.parquet"))
           for i in pq.read_table(f).column("id").to_pylist()]
    assert ids and max(ids) < 200  # only the lowest id of each pair
    r = cli_in_process("run", data, "--out", tmp_path / "k", *fast, "--keep-duplicates", "--json")
    assert r.returncode == 0, r.stderr
    assert read_meta(tmp_path / "k" / "embeddings.parquet").rows == 400
    assert json.loads((tmp_path / "k" / "shards" / "manifest.json").read_text())["exact_duplicates"] == {
        "dropped": 0, "kept": True}


def test_prompt_keys_match_the_same_question_whatever_the_answer():
    from cluster_curate.exact_dedup import prompt_keys
    ask = [{"role": "user", "content": "Add ten to 7."}]
    keys = prompt_keys([ask, [{"role": "user", "content": "  Add  ten\nto 7. "}],
                        [{"role": "system", "content": "You are a tutor."}, *ask],
                        [{"role": "user", "content": "Add two to 7."}],
                        [{"role": "assistant", "content": "Add ten to 7."}], [*ask, *ask]])
    assert keys.dtype == np.int64 and keys[0] == keys[1] == keys[2] and len(set(keys.tolist())) == 4
    assert prompt_keys([]).shape == (0,)
