"""Data fidelity: every value of a user's rows reaches the trainer as written, and nothing is dropped on the way:
no rows nested under a key of a JSON file; a row holding text that no UTF-8 file can hold is a bad row."""

from __future__ import annotations

import json

import pytest

from conftest import SHARED_DATA
from test_datasets import write_jsonl
from test_outputs import FAST, _cli

CODE_ALPACA = SHARED_DATA / "code_alpaca" / "code_alpaca_2k.json"


def code_alpaca(n: int) -> list[dict]:
    rows = json.loads(CODE_ALPACA.read_text(encoding="utf-8"))[:n] if CODE_ALPACA.exists() else []
    return rows + [{"instruction": f"Write a function that returns {i} squared.", "input": "",
                    "output": f"def f():\n    return {i} ** 2"} for i in range(n - len(rows))]


def test_a_lone_surrogate_is_a_bad_row_naming_its_line_and_field(tmp_path):
    """A `\\ud83d` escape without its pair is no character (no UTF-8 text holds it): the reader's Arrow column
    raised UnicodeEncodeError, a traceback. It is a bad row, named in one line before any work."""
    lines = [json.dumps(r) for r in code_alpaca(30)]
    lines[3] = lines[3].replace('"output": "', '"output": "broken \\ud83d emoji ', 1)
    write_jsonl(tmp_path / "data.jsonl", lines)
    r = _cli("embed", "data.jsonl", "--out", "e.parquet", "--features", "text", "--dim", "4", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("ERROR: data.jsonl:4: field 'output': a lone UTF-16 surrogate ('\\ud83d')"), line
    assert not (tmp_path / "e.parquet").exists()
    r = _cli("run", "data.jsonl", "--out", "out", *FAST, "--on-bad-row", "skip", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rejects = [json.loads(x) for x in (tmp_path / "out" / "embeddings.rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["field"]) for x in rejects] == [(3, "output")]


@pytest.mark.parametrize("indent", [2, None])
def test_a_json_object_of_metadata_and_a_list_of_rows_is_refused_naming_the_key(tmp_path, indent):
    """`{"meta": {...}, "data": [...]}`: read as a mapping of id -> record (its first value is an object), `meta`
    was a row and `data` one bad row, whose records were left out with --on-bad-row skip (counted as one). Hugging
    Face's json loader reads such a file as one row, or its rows with field="data": it is refused as SQuAD's shape
    is, naming the key that holds the rows and the jq that extracts them; on one line, it is one record (as there)."""
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{2 * i}"} for i in range(30)]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"meta": {"question": "version", "answer": "1.0"}, "data": rows}, indent=indent))
    for skip in ([], ["--on-bad-row", "skip"]):
        r = _cli("inspect", str(path), *skip)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        (line,) = r.stderr.strip().splitlines()
        if indent:
            assert "key 'data' holds a list of 30 records" in line, line
            assert "jq '.data' dataset.json > rows.json" in line, line
        else:
            assert "columns found: [meta, data]" in line, line
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({f"q{i}": row for i, row in enumerate(rows)}, indent=indent))
    r = _cli("inspect", str(mapping), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["examples"] == 30, r.stderr
