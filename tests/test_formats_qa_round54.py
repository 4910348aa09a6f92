"""A file whose rows hold more than one schema (QA round 54): the format is what most of the first rows fit, not
what any one row's columns allow; a row of other columns is a bad row that says so, and the first rows' other
schema is said once before the work. Within one format, a row reads the other response (and input) column the
format names: alpaca's `output` or `response`, its `input` or dolly's `context`."""

from __future__ import annotations

import json

import pytest

from cluster_curate.errors import CurateError
from cluster_curate.io.datasets import ReadOptions
from conftest import FIXTURES
from conftest import cli_in_process as _cli
from test_datasets import read_all, write_jsonl

SKIP = ReadOptions(on_bad_row="skip")
GSM = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
ALPACA = json.loads((FIXTURES / "code_alpaca" / "code_alpaca-300.json").read_text())
QA_ROWS = [{"question": r["question"], "answer": r["answer"]} for r in GSM]
ALPACA_ROWS = [{"instruction": r["instruction"], "input": r["input"], "output": r["output"]} for r in ALPACA]
OTHER = "holds instruction/input/output, not the file's question/answer"


def _sprinkled(tmp_path, name="qa_sprinkled.jsonl"):
    """GSM8K's 300 rows with one Code Alpaca row at line 22."""
    return write_jsonl(tmp_path / name, QA_ROWS[:21] + ALPACA_ROWS[:1] + QA_ROWS[21:])


def test_one_row_of_another_schema_does_not_flip_the_files_format(tmp_path, api_warnings):
    p = _sprinkled(tmp_path)
    ds, _, ex = read_all(p, SKIP)
    assert (ds.format, ds.fields) == ("qa", {"prompt": "question", "response": "answer"})
    assert len(ex) == 300 and [e.response for e in ex] == [r["answer"] for r in QA_ROWS]
    assert [(r.id, r.location, r.field, r.reason) for r in ds.rejects] == [(21, f"{p}:22", "answer", OTHER)]
    assert api_warnings == [
        f"{p}: 199 of the first 200 rows hold the columns of format qa (question/answer), read so; {p}:22 holds "
        "instruction/input/output: rows like it are bad rows; split the file by format and give the parts "
        "as one mixture, which reads each as its own"]
    with pytest.raises(CurateError, match=rf"^{p}:22: field 'answer': {OTHER} \(id 21; pass --on-bad-row skip"):
        read_all(p)


def test_inspect_of_a_sprinkled_file_reads_its_rows_and_says_why_one_is_bad(tmp_path):
    _sprinkled(tmp_path)
    r = _cli("inspect", "qa_sprinkled.jsonl", "--json", "--on-bad-row", "skip", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["format"], out["rows"], out["examples"], out["rejected"]) == ("qa", 301, 300, 1)
    assert out["rejects"] == [{"id": 21, "location": "qa_sprinkled.jsonl:22", "field": "answer", "reason": OTHER}]
    assert "qa_sprinkled.jsonl:22 holds instruction/input/output: rows like it are bad rows" in r.stderr


def test_the_format_most_rows_fit_wins_and_ties_keep_the_detection_order(tmp_path, api_warnings):
    first = write_jsonl(tmp_path / "first.jsonl", ALPACA_ROWS[:3] + QA_ROWS[:5])  # the other schema comes first
    ds, _, ex = read_all(first, SKIP)
    assert ds.format == "qa" and [e.id for e in ex] == [3, 4, 5, 6, 7]
    assert [(r.id, r.reason) for r in ds.rejects] == [(0, OTHER), (1, OTHER), (2, OTHER)]
    tie = write_jsonl(tmp_path / "tie.jsonl", QA_ROWS[:2] + ALPACA_ROWS[:2])
    ds, _, ex = read_all(tie, SKIP)  # alpaca before qa, as a file of both columns in every row is read
    assert ds.format == "alpaca" and [e.id for e in ex] == [2, 3]
    assert [(r.id, r.reason) for r in ds.rejects] == [
        (i, "holds question/answer, not the file's instruction/input/output") for i in (0, 1)]
    assert api_warnings[-1] == (
        f"{tie}: 2 of the first 4 rows hold the columns of format alpaca (instruction/input/output), read so; {tie}:1 "
        "holds question/answer: rows like it are bad rows; split the file by format and give the parts "
        "as one mixture, which reads each as its own")


def test_a_row_of_other_columns_past_the_first_rows_says_what_it_holds(tmp_path, api_warnings):
    p = write_jsonl(tmp_path / "late.jsonl", QA_ROWS + ALPACA_ROWS[:2] + [{"question": "Q?"}])
    ds, _, ex = read_all(p, SKIP)
    assert ds.format == "qa" and len(ex) == 300 and api_warnings == []
    assert [(r.id, r.location, r.field, r.reason) for r in ds.rejects] == [
        (300, f"{p}:301", "answer", OTHER), (301, f"{p}:302", "answer", OTHER),
        (302, f"{p}:303", "answer", "missing response")]  # no other columns: as before


def test_alpaca_reads_the_files_response_column_and_says_what_other_rows_hold(tmp_path):
    """alpaca's `output` or `response` is the file's, not each row's: dolly-style rows (instruction/context/response)
    in a file of instruction/input/output rows are bad rows that say what they hold, not "missing response" (a
    row's other column may be a model's draft beside the gold answer: never read in its place)."""
    dolly = [{"instruction": r["instruction"], "context": r["input"], "response": r["output"]}
             for r in ALPACA[100:200]]
    p = write_jsonl(tmp_path / "alp_mix.jsonl", ALPACA_ROWS[:100] + dolly)
    ds, _, ex = read_all(p, SKIP)
    assert (ds.format, ds.fields) == ("alpaca", {"prompt": "instruction", "response": "output", "input": "input"})
    assert [e.response for e in ex] == [r["output"] for r in ALPACA[:100]]
    assert {(r.field, r.reason) for r in ds.rejects} == {
        ("output", "holds instruction/context/response, not the file's instruction/input/output")}
    assert len(ds.rejects) == 100


def test_a_null_gold_answer_is_a_bad_row_not_the_other_columns_text(tmp_path):
    """qa's `answer` or `response`: a row whose `answer` is null beside a `response` (a model's draft) is a bad row
    saying what it holds; the draft is never trained on as its answer, fields given or not."""
    p = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q0", "answer": "a0", "response": None},
                                            {"question": "q1", "answer": None, "response": "draft"},
                                            {"question": "q2", "answer": None, "response": None}])
    ds, _, ex = read_all(p, SKIP)
    assert ds.fields == {"prompt": "question", "response": "answer"}
    assert [(e.id, e.response) for e in ex] == [(0, "a0")]
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (1, "answer", "holds question/response, not the file's question/answer"), (2, "answer", "missing response")]
    given = ReadOptions(prompt_field="question", response_field="answer", on_bad_row="skip")
    ds, _, ex = read_all(p, given)
    assert [e.id for e in ex] == [0] and [r.id for r in ds.rejects] == [1, 2]


def test_a_bad_row_of_the_files_own_columns_keeps_its_reason(tmp_path, api_warnings):
    """alpaca's input is optional: a row without it whose output is empty is an empty response, not a row of other
    columns; a row of prompt/response (prompt-completion's) in an alpaca file says what it holds."""
    p = write_jsonl(tmp_path / "alp.jsonl", ALPACA_ROWS[:3] + [{"instruction": "x", "output": ""},
                                                             {"prompt": "p", "response": "r"}])
    ds, _, ex = read_all(p, SKIP)
    assert ds.format == "alpaca" and [e.id for e in ex] == [0, 1, 2]
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (3, "output", "empty response"),
        (4, "output", "holds prompt/response, not the file's instruction/input/output")]
    assert api_warnings == [
        f"{p}: 4 of the first 5 rows hold the columns of format alpaca (instruction/input/output), read so; {p}:5 holds "
        "prompt/response: rows like it are bad rows; split the file by format and give the parts "
        "as one mixture, which reads each as its own"]
    forced = ReadOptions(format="alpaca", on_bad_row="skip")  # the format given: no vote, no warning; same reasons
    ds, _, _ = read_all(p, forced)
    assert [(r.id, r.reason) for r in ds.rejects][1:] == [
        (4, "holds prompt/response, not the file's instruction/input/output")] and len(api_warnings) == 1


def test_an_evaluation_set_of_one_odd_row_is_read_for_all_its_questions(tmp_path):
    """--decontaminate reads an evaluation set for its questions alone: one row of another schema made the whole set
    bad rows, and no question of it was looked for (0 of its 1 questions)."""
    _sprinkled(tmp_path, "eval.jsonl")
    r = _cli("inspect", FIXTURES / "gsm8k" / "train-300.jsonl", "--decontaminate", "eval.jsonl", "--on-bad-row",
             "skip", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "split the file by format and give each part as its own set" in r.stderr  # --decontaminate takes no mixture
    [asked] = json.loads(r.stdout)["decontamination"]
    assert (asked["path"], asked["questions"], asked["questions_in_pool"]) == ("eval.jsonl", 300, 300), asked
