"""Data fidelity: every value of a user's rows reaches the trainer as written, and nothing is dropped on the way:
no rows nested under a key of a JSON file."""

from __future__ import annotations

import json

import pytest

from test_outputs import _cli


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
