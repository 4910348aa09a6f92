"""Round 55 QA on mixtures: rows of one input that are exact copies of another input's rows are embedded once, as
the first input's; a share bound on that input then bounds them too, which embed now says (a cap of 0 on it made
the copies unselectable without a word)."""

from __future__ import annotations

import json

from conftest import FIXTURES, cli_in_process


def test_copies_across_inputs_are_said_with_the_input_they_count_for(tmp_path):
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
    (tmp_path / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:40]))
    other = rows[40:60] + rows[:3] + [rows[5]]  # 4 copies of math's rows
    (tmp_path / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    (tmp_path / "mix.yaml").write_text("inputs:\n  - {path: math.jsonl, name: math}\n"
                                       "  - {path: more.jsonl, name: more}\n")
    r = cli_in_process("embed", "mix.yaml", "--out", "e.parquet", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = [w for w in json.loads(r.stdout)["warnings"] if w.startswith("exact copies across inputs")]
    assert said == ["exact copies across inputs, embedded once as the first input's rows: 4 rows of input more are "
                    "copies of rows of input math (a share bound on that input counts them; --keep-duplicates keeps "
                    "every copy)"]
    (tmp_path / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[40:60] + rows[41:42]))
    r = cli_in_process("embed", "mix.yaml", "--out", "e.parquet", "--overwrite", "--json", cwd=tmp_path)
    assert not [w for w in json.loads(r.stdout)["warnings"] if "across inputs" in w]  # a copy inside one input
