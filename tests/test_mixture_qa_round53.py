"""Mixtures, QA round 53: a `--data` mixture refused by name only (what differs from the recorded one is said), the
same file twice in a mixture file (refused as on the command line), and a column value a float cannot hold named
by its file's line."""

from __future__ import annotations

import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster_curate.errors import CurateError
from cluster_curate.io.mixture import Mixture, mixture_inputs

from conftest import FIXTURES, cli_in_process
from test_datasets import write_jsonl

GSM_JSONL = FIXTURES / "gsm8k" / "train-300.jsonl"
CODE_JSON = FIXTURES / "code_alpaca" / "code_alpaca-300.json"


def _gsm_rows(n: int) -> list[dict]:
    return [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:n]]


def _two_inputs(tmp_path):
    """gsm.jsonl (GSM8K, qa) and code.json (Code Alpaca, a JSON array): 30 rows each."""
    write_jsonl(tmp_path / "gsm.jsonl", _gsm_rows(30))
    (tmp_path / "code.json").write_text(json.dumps(json.loads(CODE_JSON.read_text())[:30], indent=1))


def _cli(*args, code=0, cwd=None):
    res = cli_in_process(*args, cwd=cwd)
    assert res.returncode == code, res.stdout + res.stderr
    return res


# ----------------------------------------------------------------------------------------------- defect 5
def test_shard_given_a_mixture_read_otherwise_names_the_input_and_what_differs(tmp_path):
    """`embed a.jsonl b.json --on-bad-row skip`, then `shard --data mix.yaml` listing the same files without
    `on_bad_row`: refused as 'made from mixture of a, b (fingerprint X), not from mixture of a, b (fingerprint Y);
    pass ... (or its mixture file)', two names alike and a mixture file that fails the same way. The refusal names
    the first input that differs and how (recorded vs given), and what to write; the mixture file then mended is
    taken."""
    _two_inputs(tmp_path)
    _cli("run", "gsm.jsonl", "code.json", "--on-bad-row", "skip", "--out", "o", "--fraction", "0.5", "--num-shards",
         "1", "--features", "text", "--dim", "16", "--k", "4", "-q", cwd=tmp_path)
    shard = ["shard", "o/selection.parquet", "--data", "mix.yaml", "--out", "sh", "--num-shards", "1"]
    (tmp_path / "other").mkdir()
    write_jsonl(tmp_path / "other" / "gsm.jsonl", _gsm_rows(31)[1:])  # other rows under the same name
    cases = {  # the mixture file's entries: what the refusal says differs (a pattern)
        # each input's reading option: both read with --on-bad-row skip, neither entry says so
        "  - {path: gsm.jsonl}\n  - {path: code.json}\n": re.escape(
            "inputs gsm, code: on_bad_row skip recorded, error given (give their entries `on_bad_row: skip`, or pass "
            "--on-bad-row skip)"),
        # the first input that differs, each of its options
        "  - {path: gsm.jsonl, on_bad_row: skip}\n  - {path: code.json, format: alpaca}\n": re.escape(
            "input code: on_bad_row skip recorded, error given; format unset recorded, alpaca given (give its entry "
            "`on_bad_row: skip` and leave `format` out of its entry)"),
        "  - {path: gsm.jsonl, on_bad_row: skip, rename: {answer: solution}}\n"
        "  - {path: code.json, on_bad_row: skip}\n":
            re.escape('input gsm: rename {} recorded, {"answer": "solution"} given (leave `rename` out of its entry)'),
        # another file of the same name
        "  - {path: other/gsm.jsonl, on_bad_row: skip}\n  - {path: code.json, on_bad_row: skip}\n":
            r"input gsm: other/gsm.jsonl holds other rows than gsm.jsonl recorded \(fingerprint \w+, \w+ recorded; "
            r"pass --data once per input, in this order: gsm.jsonl code.json\)",
    }
    for entries, said in cases.items():
        (tmp_path / "mix.yaml").write_text("inputs:\n" + entries)
        res = _cli(*shard, code=2, cwd=tmp_path)
        assert re.fullmatch(r"ERROR: o/selection.parquet: was made from mixture of gsm, code \(fingerprint \w+\), not "
                            r"from mixture of gsm, code \(fingerprint \w+\): " + said +
                            r", or pass --force to use it anyway\n", res.stderr), (entries, res.stderr)
        assert not (tmp_path / "sh").exists()
    # other names, or another order: the names say what differs, and what to give
    for entries in ("  - {path: gsm.jsonl, on_bad_row: skip}\n  - {path: code.json, name: py, on_bad_row: skip}\n",
                    "  - {path: code.json, on_bad_row: skip}\n  - {path: gsm.jsonl, on_bad_row: skip}\n",
                    "  - {path: gsm.jsonl, on_bad_row: skip}\n"):
        (tmp_path / "mix.yaml").write_text("inputs:\n" + entries)
        res = _cli(*shard, code=2, cwd=tmp_path)
        assert "; pass --data once per input, in this order: gsm.jsonl code.json (or its mixture file), or --force " \
               "to use it anyway\n" in res.stderr, (entries, res.stderr)
    (tmp_path / "mix.yaml").write_text("inputs:\n  - {path: gsm.jsonl}\n  - {path: code.json}\n")
    _cli(*shard, "--on-bad-row", "skip", "-q", cwd=tmp_path)  # what the refusal said to pass
    assert json.loads((tmp_path / "sh" / "manifest.json").read_text())["dataset"]["source"] == "mixture of gsm, code"


def test_a_dataset_given_for_a_mixture_or_a_mixture_for_a_dataset_is_named_as_such(tmp_path):
    """One dataset recorded and a mixture file of that one file given (or the other way round) were 'made from X
    (fingerprint A), not from Y (fingerprint B)' alone: a mixture's fingerprint is never a dataset's."""
    _two_inputs(tmp_path)
    _cli("run", "gsm.jsonl", "--out", "o", "--fraction", "0.5", "--num-shards", "1", "--features", "text", "--dim",
         "16", "--k", "4", "-q", cwd=tmp_path)
    (tmp_path / "mix.yaml").write_text("inputs:\n  - {path: gsm.jsonl}\n")
    res = _cli("shard", "o/selection.parquet", "--data", "mix.yaml", "--out", "sh", "--num-shards", "1", code=2,
               cwd=tmp_path)
    assert re.fullmatch(r"ERROR: o/selection.parquet: was made from gsm.jsonl \(fingerprint \w+\), not from mixture of "
                        r"gsm \(fingerprint \w+\): one dataset recorded, a mixture given \(pass --data gsm.jsonl\), or "
                        r"pass --force to use it anyway\n", res.stderr), res.stderr


# ----------------------------------------------------------------------------------------------- defect 6
def test_the_same_file_twice_is_refused_alike_from_a_mixture_file_and_the_command_line(tmp_path):
    """A mixture file naming one file twice (`./a.jsonl` and `../d/a.jsonl`, other names) was read as 2x the rows,
    every row an exact copy, while the command line refused it; a symlink was taken on the command line too. The same
    file is refused wherever it is given twice, naming both entries; two entries that read it otherwise (another
    format or column) are two views of it, a mixture."""
    d = tmp_path / "d"
    d.mkdir()
    write_jsonl(d / "gsm.jsonl", _gsm_rows(20))
    os.symlink(d / "gsm.jsonl", d / "link.jsonl")
    (d / "m.yaml").write_text("inputs:\n  - {path: ./gsm.jsonl, name: a}\n  - {path: ../d/gsm.jsonl, name: b}\n")
    with pytest.raises(CurateError) as err:
        mixture_inputs([str(d / "m.yaml")])
    assert str(err.value) == (f"{d / 'm.yaml'}: inputs[1]: given twice (also as {d / 'm.yaml'}: inputs[0]); give each "
                              "input once (or read it otherwise in each entry: another format or field)")
    # another on_bad_row alone reads the same rows
    (d / "m.yaml").write_text("inputs:\n  - {path: gsm.jsonl, name: a}\n  - {path: gsm.jsonl, name: b, on_bad_row: "
                              "skip}\n")
    with pytest.raises(CurateError) as err:
        mixture_inputs([str(d / "m.yaml")])
    assert str(err.value).startswith(f"{d / 'm.yaml'}: inputs[1]: given twice (also as {d / 'm.yaml'}: inputs[0])")
    with pytest.raises(CurateError) as err:
        mixture_inputs([str(d / "gsm.jsonl"), str(d / "link.jsonl")])
    assert str(err.value) == (f"{d / 'link.jsonl'}: given twice (also as {d / 'gsm.jsonl'}); give each input once")
    res = _cli("inspect", "gsm.jsonl", "link.jsonl", code=2, cwd=d)
    assert res.stderr == "ERROR: link.jsonl: given twice (also as gsm.jsonl); give each input once\n", res.stderr
    # two views of one file (other prompt and response fields): a mixture
    (d / "m.yaml").write_text("inputs:\n  - {path: gsm.jsonl, name: a}\n  - {path: gsm.jsonl, name: b, "
                              "prompt_field: answer, response_field: question}\n")
    mix = Mixture(mixture_inputs([str(d / "m.yaml")]))
    assert mix.names == ["a", "b"] and mix.num_rows() == 40


# ----------------------------------------------------------------------------------------------- defect 8
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_value_a_float_column_cannot_hold_is_named_by_its_files_line(tmp_path, suffix):
    """An int past 2**53 beside another input's float column was named `big.jsonl: row 7: ...`, where every other
    message of a JSON input names `big.jsonl:LINE`; a Parquet input keeps `row N` (it has no lines)."""
    rows = [{"question": f"{n}+{n}?", "answer": str(2 * n), "score": n} for n in range(8)]
    rows[7]["score"] = 2 ** 53 + 1
    big = tmp_path / f"big{suffix}"
    if suffix == ".jsonl":  # a blank line before it: row 7 is on line 9, not 8
        big.write_text("".join(json.dumps(r) + "\n" + ("\n" if n == 2 else "") for n, r in enumerate(rows)))
    else:  # a JSON array, one record a line after its `[`: row 7 on line 9
        big.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    line = 9
    pq.write_table(pa.table({"question": ["2*2?", "3*3?"], "answer": ["4", "9"], "score": [0.5, 1.5]}),
                   tmp_path / "f.parquet")
    res = _cli("inspect", big.name, "f.parquet", code=2, cwd=tmp_path)
    assert res.stderr.startswith(f"ERROR: {big.name}:{line}: column 'score' holds {2 ** 53 + 1} (int64), which the "
                                 "double that column is beside"), res.stderr
