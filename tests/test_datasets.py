"""The dataset reader: every container and format, ids, streaming, bad input, fingerprints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate.errors import CurateError
from cluster_curate.io import containers, names
from cluster_curate.io.artifacts import sidecar_path
from cluster_curate.io.datasets import ReadOptions, open_dataset

from conftest import FIXTURES, SHARED_DATA, make_unreadable

SKIP = ReadOptions(on_bad_row="skip")

# fixture path -> (container, format)
GOOD_FIXTURES = {
    "gsm8k/train-300.jsonl": ("jsonl", "qa"),
    "gsm8k/train-300.csv": ("csv", "qa"),
    "gsm8k/train-300.parquet": ("parquet", "qa"),
    "code_alpaca/code_alpaca-300.json": ("json", "alpaca"),
    "code_alpaca/code_alpaca-300-by-id.json": ("json", "alpaca"),
    "code_alpaca/code_alpaca-300-response.jsonl": ("jsonl", "alpaca"),
    "code_alpaca/code_alpaca-300.parquet.d": ("parquet", "alpaca"),
    "code_alpaca/code_alpaca-300.hf": ("hf-disk", "alpaca"),
    "code_alpaca/prompt-completion-300.jsonl": ("jsonl", "prompt-completion"),
    "chat/messages-300.jsonl": ("jsonl", "messages"),
    "chat/sharegpt-300.json": ("json", "sharegpt"),
}


def read_all(source, opts=None, batch_rows=64):
    ds = open_dataset(source, opts or ReadOptions())
    batches = list(ds.iter_batches(batch_rows))
    return ds, batches, [e for b in batches for e in b.examples]


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ containers & formats

@pytest.mark.parametrize("rel", sorted(GOOD_FIXTURES))
def test_every_fixture_reads(rel):
    container, fmt = GOOD_FIXTURES[rel]
    ds, batches, examples = read_all(FIXTURES / rel)
    assert (ds.container, ds.format) == (container, fmt)
    assert ds.rows == 300 and len(examples) == 300 and not ds.rejects
    assert [e.id for e in examples] == list(range(300))
    ids = pa.concat_arrays([b.raw.column("id") for b in batches]).to_pylist()
    assert ids == list(range(300))
    assert all(b.raw.schema.names[0] == "id" and b.raw.schema.field("id").type == pa.int64() for b in batches)
    for e in examples:
        assert e.prompt[-1]["role"] == "user" and e.prompt[-1]["content"].strip()
        assert isinstance(e.response, str) and e.response.strip()
        assert all(set(t) == {"role", "content"} for t in e.prompt)
    assert ds.record() == {"source": str(FIXTURES / rel), "fingerprint": ds.fingerprint(), "rows": 300}


def test_containers_of_the_same_data_give_the_same_examples():
    _, _, jsonl = read_all(FIXTURES / "gsm8k/train-300.jsonl")
    for other in ("gsm8k/train-300.csv", "gsm8k/train-300.parquet"):
        assert read_all(FIXTURES / other, batch_rows=7)[2] == jsonl
    _, _, alpaca = read_all(FIXTURES / "code_alpaca/code_alpaca-300.json")
    for other in ("code_alpaca-300-by-id.json", "code_alpaca-300.parquet.d", "code_alpaca-300.hf",
                  "code_alpaca-300-response.jsonl"):
        assert read_all(FIXTURES / "code_alpaca" / other, batch_rows=100)[2] == alpaca
    # prompt-completion was made by joining instruction and input exactly as the alpaca format does
    assert read_all(FIXTURES / "code_alpaca/prompt-completion-300.jsonl")[2] == alpaca


def test_raw_keeps_every_source_column_and_renames_a_source_id():
    ds, batches, _ = read_all(FIXTURES / "chat/sharegpt-300.json", batch_rows=1000)
    raw = batches[0].raw
    assert raw.schema.names == ["id", "source_id", "conversations"]
    assert raw.column("source_id").to_pylist()[:2] == ["conv-0", "conv-1"]
    _, batches, _ = read_all(FIXTURES / "code_alpaca/code_alpaca-300-by-id.json", batch_rows=1000)
    assert batches[0].raw.schema.names == ["id", "key", "instruction", "input", "output"]
    assert batches[0].raw.column("key").to_pylist()[:2] == ["ca-0000", "ca-0001"]


def test_alpaca_prompt_joins_instruction_and_input(tmp_path):
    p = write_jsonl(tmp_path / "a.jsonl", [
        {"instruction": "Sort it.", "input": "3 1 2", "output": "1 2 3"},
        {"instruction": "Say hi.", "input": "", "output": "hi", "system": "Be brief."},
    ])
    _, _, ex = read_all(p)
    assert ex[0].prompt == [{"role": "user", "content": "Sort it.\n\n3 1 2"}]
    assert ex[1].prompt == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    assert ex[0].response == "1 2 3"


def test_messages_last_assistant_is_the_response_and_earlier_turns_are_context(tmp_path):
    conv = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"}, {"role": "user", "content": [{"type": "text", "text": "q2"}]},
            {"role": "assistant", "content": "a2"}, {"role": "user", "content": "thanks"}]
    p = write_jsonl(tmp_path / "m.jsonl", [{"messages": conv}])
    ds, _, ex = read_all(p)
    assert ds.format == "messages"
    assert ex[0].response == "a2"
    assert ex[0].prompt == [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
                            {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]


def test_sharegpt_speakers(tmp_path):
    conv = [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    bad = [{"from": "human", "value": "q"}, {"from": "robot", "value": "a"}]
    p = tmp_path / "s.json"
    p.write_text(json.dumps([{"conversations": conv}, {"conversations": bad}]))
    ds, _, ex = read_all(p, SKIP)
    assert ds.format == "sharegpt"
    assert ex[0].prompt == [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert ex[0].response == "a"
    assert [(r.id, r.field) for r in ds.rejects] == [(1, "conversations[1].from")]
    assert "unknown speaker 'robot'" in ds.rejects[0].reason


def test_messages_as_json_text_in_a_csv(tmp_path):
    conv = json.dumps([{"role": "user", "content": "q, with a comma"}, {"role": "assistant", "content": "a\nb"}])
    p = tmp_path / "m.csv"
    pa_table = pa.table({"messages": [conv]})
    import pyarrow.csv as pacsv
    pacsv.write_csv(pa_table, p)
    _, _, ex = read_all(p)
    assert ex[0].prompt == [{"role": "user", "content": "q, with a comma"}] and ex[0].response == "a\nb"


def test_format_and_field_overrides(tmp_path):
    p = write_jsonl(tmp_path / "x.jsonl", [{"query": "q", "reply": "r", "question": "Q", "answer": "A"}])
    assert read_all(p)[0].format == "qa"
    ds, _, ex = read_all(p, ReadOptions(prompt_field="query", response_field="reply"))
    assert ds.fields == {"prompt": "query", "response": "reply"}
    assert ex[0].prompt[-1]["content"] == "q" and ex[0].response == "r"
    ds, _, ex = read_all(p, ReadOptions(format="qa", response_field="reply"))
    assert (ex[0].prompt[-1]["content"], ex[0].response) == ("Q", "r")
    # a custom pair of columns on data that matches no format
    p2 = write_jsonl(tmp_path / "y.jsonl", [{"text": "t", "label": "l"}])
    ds, _, ex = read_all(p2, ReadOptions(prompt_field="text", response_field="label"))
    assert ds.format == "prompt-completion" and ex[0].response == "l"
    with pytest.raises(CurateError, match=r"--prompt-field 'nope': no such column; columns found: \[text, label\]$"):
        open_dataset(p2, ReadOptions(prompt_field="nope", response_field="label"))


def test_field_options_name_the_option_at_fault(tmp_path):
    """Issue 20 #17: --prompt-field alone, --response-field NOPE, and a hint that works for upper-case columns."""
    rows = [{"QUESTION": "q?", "CONTEXTS": ["c1", "c2"], "LONG_ANSWER": "long", "final_decision": "yes"}]
    p = write_jsonl(tmp_path / "pubmedqa.jsonl", rows)
    # the hint names the columns that would work, not --format qa (which needs 'question')
    with pytest.raises(CurateError, match=r"unrecognised record format; columns found: \[QUESTION, CONTEXTS, "
                                          r"LONG_ANSWER, final_decision\]\. pass --prompt-field QUESTION "
                                          r"--response-field LONG_ANSWER"):
        open_dataset(p)
    ds, _, ex = read_all(p, ReadOptions(prompt_field="QUESTION", response_field="LONG_ANSWER"))
    assert (ex[0].prompt[-1]["content"], ex[0].response) == ("q?", "long")
    # --prompt-field alone: the one column that looks like a response is taken, and said in ds.fields
    ds, _, ex = read_all(p, ReadOptions(prompt_field="QUESTION"))
    assert ds.fields == {"prompt": "QUESTION", "response": "LONG_ANSWER"} and ex[0].response == "long"
    q = write_jsonl(tmp_path / "plain.jsonl", [{"text": "t", "label": "l"}])
    with pytest.raises(CurateError, match=r"--prompt-field text needs --response-field COLUMN too \(no column looks "
                                          r"like one\); columns found: \[text, label\]$"):
        open_dataset(q, ReadOptions(prompt_field="text"))
    with pytest.raises(CurateError, match=r"pubmedqa.jsonl: --response-field 'NOPE': no such column; columns found"):
        open_dataset(p, ReadOptions(prompt_field="QUESTION", response_field="NOPE"))
    with pytest.raises(CurateError, match=r"--response-field 'NOPE': no such column"):
        open_dataset(p, ReadOptions(format="qa", response_field="NOPE"))


NESTED = ReadOptions(prompt_field="data.question", response_field="data.answer")


def nest_gsm8k(n: int = 300) -> list[dict]:
    """GSM8K rows as many hub datasets export them: the fields inside an object (with a key read by neither)."""
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k/train-300.jsonl").read_text().splitlines()[:n]]
    return [{"data": {"question": r["question"], "answer": r["answer"], "level": i % 3}} for i, r in enumerate(rows)]


def test_nested_fields_in_jsonl_parquet_and_hf_struct_columns(tmp_path):
    """`--prompt-field data.question` reads the key of a nested object (a JSON record, a Parquet or `datasets`
    struct column) as the flat column reads the same text; the raw rows keep the nested column as it was."""
    import datasets
    rows = nest_gsm8k(50)
    write_jsonl(tmp_path / "n.jsonl", rows)
    (tmp_path / "n.json").write_text(json.dumps(rows, indent=1))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "n.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "n.hf"))
    flat = tmp_path / "flat.jsonl"
    flat.write_text("".join((FIXTURES / "gsm8k/train-300.jsonl").read_text().splitlines(keepends=True)[:50]))
    expected = read_all(flat)[2]
    for name, container in (("n.jsonl", "jsonl"), ("n.json", "json"), ("n.parquet", "parquet"), ("n.hf", "hf-disk")):
        ds, batches, examples = read_all(tmp_path / name, NESTED, batch_rows=16)
        assert (ds.container, ds.format) == (container, "prompt-completion") and examples == expected, name
        assert ds.fields == {"prompt": "data.question", "response": "data.answer"}
        assert ds.record()["options"] == {"prompt_field": "data.question", "response_field": "data.answer"}
        raw = pa.Table.from_batches([b.raw for b in batches])
        assert raw.column_names == ["id", "data"] and raw.column("data").to_pylist() == [r["data"] for r in rows]
    # a leaf that is a number is text, as a flat column's; a conversation column may be nested too
    p = write_jsonl(tmp_path / "leaf.jsonl", [{"data": {"question": "q", "answer": 17},
                                               "chat": {"turns": [{"role": "user", "content": "u"},
                                                                  {"role": "assistant", "content": "a"}]}}])
    assert read_all(p, NESTED)[2][0].response == "17"
    ex = read_all(p, ReadOptions(format="messages", prompt_field="chat.turns"))[2][0]
    assert (ex.prompt, ex.response) == ([{"role": "user", "content": "u"}], "a")


def test_nested_alpaca_reads_the_input_beside_its_instruction(tmp_path):
    """`--format alpaca --prompt-field data.instruction`: the input is `data.input`, as the flat `input` column is
    beside `instruction` (it was silently left out of the prompt); a row without that key has no input."""
    flat = json.loads((FIXTURES / "code_alpaca" / "code_alpaca-300.json").read_text())[:60]
    rows = [{"data": r} for r in flat]
    del rows[1]["data"]["input"]
    expected = [dict(r) for r in flat]
    expected[1]["input"] = ""
    write_jsonl(tmp_path / "flat.jsonl", expected)
    write_jsonl(tmp_path / "n.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "n.parquet")
    nested = ReadOptions(format="alpaca", prompt_field="data.instruction", response_field="data.output")
    assert any(r["input"] for r in expected)
    for name in ("n.jsonl", "n.parquet"):
        ds, _, examples = read_all(tmp_path / name, nested)
        assert ds.fields["input"] == "data.input" and examples == read_all(tmp_path / "flat.jsonl")[2], name


def test_a_missing_step_of_a_nested_path_is_a_bad_row_naming_the_path(tmp_path):
    p = write_jsonl(tmp_path / "n.jsonl", [
        {"data": {"question": "q0", "answer": "a0"}},
        {"data": {"question": "q1"}},
        {"data": None},
        {"data": "text"},
        {"other": 1},
        {"data": {"question": "q5", "answer": {"text": "a5"}}},
        {"data": {"question": "q6", "answer": None}},
    ])
    with pytest.raises(CurateError, match=rf"^{p}:2: field 'data.answer': missing \('data' has no key 'answer'\) "
                                          r"\(id 1; pass --on-bad-row skip to skip bad rows\)$"):
        read_all(p, NESTED)
    ds, _, examples = read_all(p, ReadOptions(**{**NESTED.given(), "on_bad_row": "skip"}))
    assert [e.id for e in examples] == [0]
    assert [(r.id, r.location, r.field, r.reason) for r in ds.rejects] == [
        (1, f"{p}:2", "data.answer", "missing ('data' has no key 'answer')"),
        (2, f"{p}:3", "data.answer", "missing ('data' is null, not an object)"),
        (3, f"{p}:4", "data.answer", "missing ('data' is text, not an object)"),
        (4, f"{p}:5", "data.answer", "missing (the record has no key 'data')"),
        (5, f"{p}:6", "data.answer", "response is an object, expected text"),
        (6, f"{p}:7", "data.answer", "missing response")]
    # a struct column: a null struct, a null leaf
    pq.write_table(pa.Table.from_pylist([{"data": {"question": "q0", "answer": "a0"}}, {"data": None},
                                         {"data": {"question": "q2", "answer": None}}]), tmp_path / "n.parquet")
    ds, _, examples = read_all(tmp_path / "n.parquet", ReadOptions(**{**NESTED.given(), "on_bad_row": "skip"}))
    assert [e.id for e in examples] == [0] and [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (1, "data.answer", "missing ('data' is null, not an object)"), (2, "data.answer", "missing response")]
    # a path whose first key is no column at all is the option's error, at open time
    with pytest.raises(CurateError, match=r"--prompt-field 'dta.question': no such column; columns found: \[data\]"):
        open_dataset(tmp_path / "n.parquet", ReadOptions(prompt_field="dta.question", response_field="data.answer"))


def test_a_column_whose_name_holds_a_dot_wins_over_the_nested_path(tmp_path):
    """`data.question` names the column of that name where there is one (JSON key or Parquet column), and the
    nested path only where there is none."""
    rows = [{"data.question": "literal", "data": {"question": "nested", "answer": "a"}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    for path in (write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "d.parquet"):
        assert read_all(path, NESTED)[2][0].prompt[-1]["content"] == "literal", path
    p = write_jsonl(tmp_path / "mixed.jsonl", [rows[0], {"data": {"question": "nested", "answer": "a"}}])
    assert [e.prompt[-1]["content"] for e in read_all(p, NESTED)[2]] == ["literal", "nested"]


def test_list_of_texts_as_part_of_the_prompt(tmp_path):
    """PubMedQA: CONTEXTS (a list of paragraphs) then QUESTION make the prompt; JSONL and Parquet alike."""
    rows = [{"QUESTION": "q?", "CONTEXTS": ["c1", "c2"], "LONG_ANSWER": "long"},
            {"QUESTION": "q2?", "CONTEXTS": [], "LONG_ANSWER": "l2"},
            {"QUESTION": "q3?", "CONTEXTS": ["c", 3], "LONG_ANSWER": "l3"}]
    p = write_jsonl(tmp_path / "p.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows[:2]), tmp_path / "p.parquet")
    opts = ReadOptions(prompt_field="CONTEXTS,QUESTION", response_field="LONG_ANSWER", on_bad_row="skip")
    for path in (p, tmp_path / "p.parquet"):
        ds, _, ex = read_all(path, opts)
        assert ds.fields["prompt"] == "CONTEXTS,QUESTION"
        assert [e.prompt[-1]["content"] for e in ex] == ["c1\n\nc2\n\nq?", "q2?"]
    assert [(r.id, r.field) for r in ds.rejects] == [] and len(ex) == 2
    ds, _, ex = read_all(p, opts)
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (2, "CONTEXTS", "prompt is a list holding a number, expected text or a list of texts")]
    with pytest.raises(CurateError, match=r"--prompt-field 'CONTEXT': no such column"):
        open_dataset(p, ReadOptions(prompt_field="CONTEXT,QUESTION", response_field="LONG_ANSWER"))


def test_a_numeric_response_stays_a_number_in_the_raw_columns(tmp_path):
    """Issue 20 #17: `"answer": 17` is text for the features, and 17 (a number) in the rows that shards copy."""
    p = write_jsonl(tmp_path / "n.jsonl", [{"question": "a", "answer": 17}, {"question": "b", "answer": 2.5}])
    ds = open_dataset(p)
    (batch,) = list(ds.iter_batches())
    assert [e.response for e in batch.examples] == ["17", "2.5"]
    assert batch.raw.column("answer").to_pylist() == [17.0, 2.5]
    assert pa.types.is_floating(batch.raw.schema.field("answer").type)


def test_a_json_file_holding_json_lines(tmp_path):
    p = write_jsonl(tmp_path / "lines.json", [{"question": "a", "answer": "b"}, {"question": "c", "answer": "d"}])
    ds, _, ex = read_all(p)
    assert ds.container == "jsonl" and len(ex) == 2
    lead = tmp_path / "lead.json"
    lead.write_text("\n\n" + p.read_text())
    assert read_all(lead)[0].container == "jsonl" and read_all(lead)[0].rows == 2
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"question": "a", "answer": "b"}))
    assert read_all(one)[0].rows == 1


def test_parquet_directory_across_files_and_batches(tmp_path):
    d = tmp_path / "parts"
    d.mkdir()
    for i, n in enumerate([5, 0, 8]):
        pq.write_table(pa.table({"prompt": [f"p{i}-{j}" for j in range(n)], "completion": ["c"] * n},
                                schema=pa.schema([("prompt", pa.string()), ("completion", pa.string())])),
                       d / f"part-{i}.parquet")
    ds, batches, ex = read_all(d, batch_rows=4)
    assert [b.raw.num_rows for b in batches] == [4, 4, 4, 1]
    assert [e.prompt[0]["content"] for e in ex][:6] == ["p0-0", "p0-1", "p0-2", "p0-3", "p0-4", "p2-0"]
    assert [e.id for e in ex] == list(range(13)) and ds.rows == 13


def test_a_directory_of_json_lines_and_json_files_reads_every_file_in_name_order(tmp_path):
    """An evaluation suite's directory of .jsonl / .json files (JSON lines, or one JSON array, .gz too) is one
    dataset: its files in sorted name order, ids running on, a bad row located by its own file and line, the files
    of its folders not read; a directory holding none of them is refused saying what it holds."""
    import gzip
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()[:9]]
    d = tmp_path / "gsm8k"
    (d / "answers").mkdir(parents=True)
    write_jsonl(d / "b.json", rows[3:6])  # JSON lines in a .json file
    (d / "a.json").write_text(json.dumps(rows[:3], indent=2))  # one JSON array
    (d / "c.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows[6:]).encode()))
    write_jsonl(d / "answers" / "a.jsonl", [{"id": 0, "ground_truth": "72"}])
    (d / "README.md").write_text("GSM8K\n")
    ds, batches, ex = read_all(d, batch_rows=4)
    assert ds.container == "json-files" and ds.rows == ds.num_rows() == 9 and [e.id for e in ex] == list(range(9))
    assert [e.prompt[0]["content"] for e in ex] == [r["question"] for r in rows]
    assert pa.concat_tables([pa.Table.from_batches([b.raw]) for b in batches]).column("answer").to_pylist() == \
        [r["answer"] for r in rows]
    write_jsonl(d / "b.json", [rows[3], {"question": "Q?"}, rows[5]])
    with pytest.raises(CurateError, match=rf"^{d / 'b.json'}:2: field 'answer': missing response \(id 4;"):
        read_all(d)
    ds, _, ex = read_all(d, SKIP)
    assert len(ex) == 8 and [(r.id, r.location) for r in ds.rejects] == [(4, f"{d / 'b.json'}:2")]
    for held, files in [("1 .md, 1 .txt, 1 folder", ["notes.txt", "README.md", "sub/"]), ("it is empty", [])]:
        other = tmp_path / f"other{len(files)}"
        other.mkdir()
        for name in files:
            (other / name).mkdir() if name.endswith("/") else (other / name).write_text("x\n")
        with pytest.raises(CurateError) as e:
            open_dataset(other)
        assert str(e.value) == f"{other}: directory holds no data files to read ({held}); expected .parquet files, " \
                               ".jsonl or .json files directly in it, or a datasets.save_to_disk directory"


def test_mixed_type_column_kept_as_text(tmp_path):
    p = write_jsonl(tmp_path / "mixed.jsonl", [{"question": "a", "answer": "b", "meta": 1},
                                               {"question": "c", "answer": "d", "meta": "x"}])
    _, batches, _ = read_all(p)
    assert batches[0].raw.column("meta").to_pylist() == ["1", "x"]


# ------------------------------------------------------------------------------------------ ids and bad rows

def test_rejected_rows_keep_their_ids(tmp_path):
    p = FIXTURES / "bad" / "empty_response.jsonl"
    ds, batches, ex = read_all(p, SKIP, batch_rows=3)
    assert ds.rows == 8
    assert [e.id for e in ex] == [0, 1, 3, 5, 6, 7]
    assert [(r.id, r.location, r.field) for r in ds.rejects] == [
        (2, f"{p}:3", "answer"), (4, f"{p}:5", "answer")]
    assert [r.reason for r in ds.rejects] == ["empty response", "missing response"]
    raw = pa.Table.from_batches([b.raw for b in batches])  # raw keeps the rejected rows
    assert raw.column("id").to_pylist() == list(range(8))
    out = sidecar_path(tmp_path / "emb.parquet", names.REJECTS)
    assert out == tmp_path / "emb.rejects.jsonl"
    ds.write_rejects(out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [r.to_dict() for r in ds.rejects] and lines[0]["id"] == 2


def test_unparseable_rows_stay_in_raw_with_null_columns():
    p = FIXTURES / "bad" / "invalid_json.jsonl"
    ds, batches, ex = read_all(p, SKIP)
    raw = batches[0].raw.to_pylist()
    assert raw[3] == {"id": 3, "question": None, "answer": None}
    assert [e.id for e in ex] == [0, 1, 2, 4, 5, 6]
    assert ds.rejects[0].location == f"{p}:4" and ds.rejects[0].reason.startswith("invalid JSON (")


def test_iterating_twice_gives_the_same_rejects():
    ds = open_dataset(FIXTURES / "bad" / "empty_response.jsonl", SKIP)
    for _ in range(2):
        list(ds.iter_batches())
        assert [r.id for r in ds.rejects] == [2, 4]


BAD_INPUTS = [
    # (path under fixtures/bad or a special name, options, expected message regex)
    ("invalid_json.jsonl", {}, r"^{p}:4: invalid JSON \(Expecting ',' delimiter: column 46\) \(id 3; pass --on-bad-row skip"),
    ("empty_response.jsonl", {}, r"^{p}:3: field 'answer': empty response \(id 2;"),
    ("messages_bad.jsonl", {}, r"^{p}:2: field 'messages\[1\]': empty response"),
    ("not_object.jsonl", {}, r"^{p}:2: expected a JSON object, found an array"),
    ("unknown_format.jsonl", {}, r"^{p}: unrecognised record format; columns found: \[text, label\]\. pass "
                                 r"--prompt-field COLUMN --response-field COLUMN"),
    ("empty.jsonl", {}, r"^{p}: dataset is empty \(no rows\)$"),
    ("blank_lines.jsonl", {}, r"^{p}: dataset is empty"),
    ("empty_list.json", {}, r"^{p}: dataset is empty"),
    ("header_only.csv", {}, r"^{p}: dataset is empty"),
    ("latin1.jsonl", {}, r"^{p}:2: not valid UTF-8 text \(byte 0xe9 at column 18\); re-encode the file as UTF-8"),
    ("latin1.csv", {}, r"^{p}:3: not valid UTF-8 text \(byte 0xe9 at column 4\)"),
    ("truncated.json", {"on_bad_row": "skip"}, r"^{p}:5: invalid JSON \(Expecting value\)$"),
    ("unknown.txt", {}, r"^{p}: unknown file type"),
    ("does-not-exist.jsonl", {}, r"^{p}: no such file or directory$"),
]


@pytest.mark.parametrize("name,opts,pattern", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_inputs_raise_one_clear_line(name, opts, pattern):
    import re
    p = FIXTURES / "bad" / name
    with pytest.raises(CurateError) as info:
        read_all(p, ReadOptions(**opts))
    msg = str(info.value)
    assert "\n" not in msg
    assert re.search(pattern.format(p=re.escape(str(p))), msg), msg


def test_a_chat_row_without_a_usable_last_turn_says_what_it_holds(tmp_path):
    """A tool-calling conversation (user, tool, assistant) and a `messages` column with ShareGPT roles (human/gpt)
    were 'no user turn right before the last assistant turn' and 'no assistant turn in the conversation', with no
    word of what was there or of --format sharegpt, which reads the second. (A tool's result before the answer is
    fine now: tests/test_tool_calling.py; two assistant turns in a row are not.)"""
    p = write_jsonl(tmp_path / "chat.jsonl", [
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "t"},
                      {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "human", "content": "q"}, {"role": "gpt", "content": "a"}]}])
    ds = open_dataset(p, SKIP)
    list(ds.iter_batches())
    assert [r.reason for r in ds.rejects] == [
        "no user or tool turn right before the last assistant turn (it follows a 'assistant' turn)",
        "missing response: no assistant turn in the conversation (roles: human, gpt; ShareGPT speakers: pass "
        "--format sharegpt --prompt-field messages)"]
    _, _, fixed = read_all(p, ReadOptions(format="sharegpt", prompt_field="messages", on_bad_row="skip"))
    assert [e.response for e in fixed] == ["a"]


def test_trls_conversational_prompt_completion_is_read_as_a_conversation(tmp_path):
    """`prompt`/`completion` as lists of turns (TRL's conversational format, and what `export --for trl` writes)
    were every one a bad row: "field 'completion': response is a list, expected text"."""
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "q"}
    p = write_jsonl(tmp_path / "trl.jsonl", [
        {"prompt": [system, user], "completion": [{"role": "assistant", "content": "a"}]},
        {"prompt": "plain q", "completion": [{"role": "assistant", "content": "b"}]},
        {"prompt": [user], "completion": [{"role": "user", "content": "no answer"}]}])
    ds, _, ex = read_all(p, SKIP)
    assert ds.format == "prompt-completion"
    assert [(e.prompt, e.response) for e in ex] == [([system, user], "a"),
                                                    ([{"role": "user", "content": "plain q"}], "b")]
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (2, "completion", "missing response: no assistant turn in the completion")]


def test_a_prompt_list_holding_a_null_is_a_bad_row_not_an_internal_error(tmp_path):
    """{"instruction": [null], "output": "x"} was an INTERNAL ERROR ('NoneType' object has no attribute 'strip')."""
    p = write_jsonl(tmp_path / "n.jsonl", [{"instruction": [None], "output": "x"}, {"instruction": "q", "output": "a"}])
    ds, _, ex = read_all(p, SKIP)
    assert len(ex) == 1 and [r.reason for r in ds.rejects] == [
        "prompt is a list holding null, expected text or a list of texts"]


def test_non_utf8_inside_a_json_document_names_the_line(tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b'[\n{"question": "a", "answer": "b"},\n{"question": "caf\xe9", "answer": "b"}\n]\n')
    with pytest.raises(CurateError, match=r"x.json:3: not valid UTF-8 text \(byte 0xe9 at column 18\)"):
        read_all(p)


def test_unreadable_file(tmp_path, monkeypatch):
    p = write_jsonl(tmp_path / "secret.jsonl", [{"question": "a", "answer": "b"}])
    make_unreadable(p, monkeypatch)
    with pytest.raises(CurateError, match=r"secret.jsonl: cannot read it \(permission denied\); make it readable"):
        read_all(p)


def test_hub_id_offline_and_not_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    import datasets
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(CurateError, match=r"nobody/no-such-set:train: .*hub is offline.*not in the local cache"):
        open_dataset("nobody/no-such-set:train")


def test_skip_mode_collects_every_bad_row_kind(tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [
        {"question": "q0", "answer": "a0"}, "{oops", {"question": "q2", "answer": ""}, '"just a string"',
        {"question": "", "answer": "a4"}, {"question": "q5", "answer": ["a", "list"]}, {"question": "q6", "answer": 7},
    ])
    ds, _, ex = read_all(p, SKIP)
    assert [e.id for e in ex] == [0, 6] and ex[1].response == "7"
    assert [(r.id, r.field) for r in ds.rejects] == [(1, None), (2, "answer"), (3, None), (4, "question"),
                                                     (5, "answer")]


# ------------------------------------------------------------------------------------------ streaming JSON document

records = st.lists(st.fixed_dictionaries({
    "question": st.text(min_size=1, alphabet=st.characters(blacklist_categories=("Cs",))).filter(str.strip),
    "answer": st.text(min_size=1).filter(str.strip),
    "n": st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=False, allow_infinity=False), st.none()),
}), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(recs=records, chunk=st.integers(1, 40), indent=st.sampled_from([None, 1, 4]), mapping=st.booleans())
def test_streamed_json_document_matches_json_load(tmp_path_factory, recs, chunk, indent, mapping):
    d = tmp_path_factory.mktemp("doc")
    p = d / "doc.json"
    obj = {f"k{i}": r for i, r in enumerate(recs)} if mapping else recs
    p.write_text(json.dumps(obj, indent=indent, ensure_ascii=False), encoding="utf-8")
    old = containers._CHUNK_BYTES
    containers._CHUNK_BYTES = chunk  # tiny chunks: records, strings and numbers straddle chunk boundaries
    try:
        rows = list(containers._JsonDocument(p).iter_rows())
    finally:
        containers._CHUNK_BYTES = old
    assert [r.record for r in rows] == recs
    if mapping:
        assert [r.key for r in rows] == list(obj)
    text = p.read_text(encoding="utf-8")
    if indent is None:
        assert all(r.line == 1 for r in rows)
    else:
        assert rows[-1].line <= text.count("\n") + 1 and [r.line for r in rows] == sorted(r.line for r in rows)


def test_json_document_reports_the_line_of_each_record(tmp_path):
    p = FIXTURES / "code_alpaca" / "code_alpaca-300.json"
    lines = p.read_text(encoding="utf-8").splitlines()
    rows = list(containers._JsonDocument(p).iter_rows())
    for r in rows[:20] + rows[-5:]:
        assert lines[r.line - 1].strip() == "{"


# ------------------------------------------------------------------------------------------ fingerprint

def test_fingerprint_is_a_content_hash(tmp_path):
    src = FIXTURES / "gsm8k" / "train-300.jsonl"
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    shutil.copyfile(src, a)
    shutil.copyfile(src, b)
    ra, rb = open_dataset(a).record(), open_dataset(b).record()
    assert ra["fingerprint"] == rb["fingerprint"] and ra["rows"] == 300 and ra["source"] != rb["source"]
    b.write_bytes(b.read_bytes().replace(b"Natalia", b"Natalie", 1))
    assert open_dataset(b).record()["fingerprint"] != ra["fingerprint"]
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    shutil.copytree(FIXTURES / "code_alpaca" / "code_alpaca-300.parquet.d", d1)
    shutil.copytree(FIXTURES / "code_alpaca" / "code_alpaca-300.parquet.d", d2)
    assert open_dataset(d1).record() == {**open_dataset(d2).record(), "source": str(d1)}


def test_rows_counted_without_a_full_read():
    ds = open_dataset(FIXTURES / "chat" / "sharegpt-300.json")
    assert ds.rows is None and ds.num_rows() == 300
    assert open_dataset(FIXTURES / "gsm8k" / "train-300.parquet").rows == 300


# ------------------------------------------------------------------------------------------ real datasets

GSM8K = SHARED_DATA / "gsm8k" / "train.jsonl"
CODE_ALPACA = SHARED_DATA / "code_alpaca" / "code_alpaca_2k.json"


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present (the shared real datasets are not here)")
def test_real_gsm8k():
    ds, _, ex = read_all(GSM8K, batch_rows=2048)
    assert (ds.format, ds.rows, len(ex), len(ds.rejects)) == ("qa", 7473, 7473, 0)
    assert ex[0].prompt[0]["content"].startswith("Natalia sold clips") and ex[0].response.endswith("#### 72")


@pytest.mark.skipif(not CODE_ALPACA.exists(), reason=f"{CODE_ALPACA} not present (the shared real datasets are not here)")
def test_real_code_alpaca_has_two_empty_outputs():
    ds, _, ex = read_all(CODE_ALPACA, SKIP, batch_rows=500)
    assert (ds.container, ds.format, ds.rows, len(ex)) == ("json", "alpaca", 2017, 2015)
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [(237, "output", "empty response"),
                                                               (1859, "output", "empty response")]
    expected = json.loads(CODE_ALPACA.read_text(encoding="utf-8"))
    assert ex[0].prompt[0]["content"] == expected[0]["instruction"] + "\n\n" + expected[0]["input"]
    assert ex[-1].response == expected[-1]["output"]
    with pytest.raises(CurateError, match=r"code_alpaca_2k.json:1187: field 'output': empty response \(id 237;"):
        read_all(CODE_ALPACA)


def test_json_object_that_is_not_a_mapping_of_records(tmp_path):
    p = tmp_path / "record.json"
    p.write_text('{\n "instruction": "a",\n "output": "b"\n}\n')
    with pytest.raises(CurateError, match=r"record.json: a JSON object whose values are not records \(key "
                                          r"'instruction' holds a string\)"):
        open_dataset(p)


def test_json_object_with_the_rows_under_a_key_names_the_key_and_how_to_extract_it(tmp_path):
    """A .json file of one object holding the rows under a key (SQuAD's `{"version", "data": [...]}`, written on
    one line of megabytes; splits as `{"train": [...], "test": [...]}`, pretty-printed) is refused before any work in
    one line that names the key(s) holding lists of records, how many each holds, and the jq command that extracts
    one; which key holds the rows is not guessed (two keys are splits that must not be mixed, as datasets' json
    loader asks for its `field`). A one-line chat record (its turns a list of objects) is still one record."""
    from conftest import cli_in_process as _cli
    gsm = [json.loads(line) for line in GSM8K.read_text().splitlines()[:5]] if GSM8K.exists() else [
        {"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}. " * 25 + f"\n#### {2 * i}"}
        for i in range(5)]  # (as long as GSM8K's rows: 1,000 copies of the 5 make a line over 1 MiB)
    many = gsm * 1000  # a line longer than the 1 MiB a one-line record is read within
    cases = {"squad.json": ({"version": "v2.0", "data": many}, None, "key 'data' holds a list of 5,000 records",
                            "jq '.data' squad.json > rows.json"),
             "pretty.json": ({"version": "v2.0", "data": gsm}, 2, "key 'data' holds a list of 5 records",
                             "jq '.data' pretty.json > rows.json"),
             "splits.json": ({"train": gsm, "test": gsm[:2]}, 2, "keys 'train' (5 records) and 'test' (2 records) "
                             "hold lists of records", "jq '.train' splits.json > rows.json"),
             "splits-oneline.json": ({"train": many, "test": gsm[:2]}, None, "keys 'train' (5,000 records) and "
                                     "'test' (2 records) hold lists of records", "jq '.train' splits-oneline.json > "
                                                                                 "rows.json")}
    for name, (doc, indent, keys, extract) in cases.items():
        (tmp_path / name).write_text(json.dumps(doc, indent=indent) + "\n")
        with pytest.raises(CurateError) as e:
            open_dataset(tmp_path / name)
        message = str(e.value)
        assert message.startswith(f"{tmp_path / name}: one JSON object whose {keys}") and extract in message, message
        r = _cli("embed", name, "--out", "e.parquet", "--features", "text", "--dim", "4", cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"ERROR: {message.replace(str(tmp_path / name), name)}"], r.stderr
        assert not (tmp_path / "e.parquet").exists()
    chat = {"messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]}
    (tmp_path / "chat.json").write_text(json.dumps(chat) + "\n")
    _, _, examples = read_all(tmp_path / "chat.json")
    assert [(e.prompt, e.response) for e in examples] == [([{"role": "user", "content": "Hi?"}], "Hello.")]


def test_json_objects_with_rows_under_a_key_are_named_on_one_line_as_indented_and_a_record_with_calls_is_one(
        tmp_path):
    """SQuAD's `{"version", "data": [...]}` or splits `{"train": [...], "test": [...]}` are refused naming the key,
    indented and on one line: under 1 MiB a one-line one was read as one record ('unrecognised record format;
    columns found: [train, test]', whose field-flag hint gave a 1-row dataset). A one-line record of a format's
    columns whose fields hold lists of objects is still one record (xLAM's calls and tools, a `choices` list), and
    so is a chat's tools beside its turns, over 1 MiB (read a value at a time) too."""
    rows = [{"question": "q", "answer": "a"}, {"question": "q2", "answer": "a2"}]
    for name, doc, said in (("squad.json", {"version": "v2.0", "data": rows}, "key 'data' holds a list of 2 records"),
                            ("splits.json", {"train": rows, "test": rows[:1]},
                             "keys 'train' (2 records) and 'test' (1 record) hold lists of records")):
        for indent in (1, None):
            (tmp_path / name).write_text(json.dumps(doc, indent=indent) + "\n")
            with pytest.raises(CurateError) as e:
                open_dataset(tmp_path / name)
            assert str(e.value).startswith(f"{tmp_path / name}: one JSON object whose {said}"), str(e.value)
    (tmp_path / "one.jsonl.json").write_text(json.dumps(rows[0]) + "\n")  # JSON Lines of one row: one record
    assert [e.response for e in read_all(tmp_path / "one.jsonl.json")[2]] == ["a"]
    xlam = {"query": "Weather in Paris?", "answers": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            "tools": [{"name": "get_weather", "description": "w", "parameters": {"city": {"type": "str"}}}]}
    (tmp_path / "xlam.json").write_text(json.dumps(xlam) + "\n")
    assert len(list(containers.open_container(str(tmp_path / "xlam.json"))[1].iter_rows())) == 1
    choices = {"prompt": "2+2?", "completion": "4", "choices": [{"text": "4", "index": 0}]}
    (tmp_path / "choices.json").write_text(json.dumps(choices) + "\n")
    assert [e.response for e in read_all(tmp_path / "choices.json")[2]] == ["4"]
    # rows that hold a `name` and a `description` beside their fields are rows all the same, indented or not
    named = {"version": 1, "data": [{"name": "n", "description": "d", **r} for r in rows]}
    for indent in (1, None):
        (tmp_path / "named.json").write_text(json.dumps(named, indent=indent) + "\n")
        with pytest.raises(CurateError, match="key 'data' holds a list of 2 records"):
            open_dataset(tmp_path / "named.json")
    chat = {"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Sunny."}],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}]}
    (tmp_path / "chat.json").write_text(json.dumps(chat) + "\n")
    assert [e.response for e in read_all(tmp_path / "chat.json")[2]] == ["Sunny."]
    (tmp_path / "chat.json").write_text(json.dumps(chat, indent=1))  # one record indented: no rows under 'tools'
    with pytest.raises(CurateError, match=r"chat.json: a JSON object whose values are not records \(key 'messages' "
                                          r"holds an array\)"):
        open_dataset(tmp_path / "chat.json")
    bfcl = {"id": "simple_0", "question": [[{"role": "user", "content": "Area of a triangle, base 10, height 5?"}]],
            "function": [{"name": "triangle_area", "parameters": {}}]}  # BFCL's test: turns per turn, its tools
    (tmp_path / "bfcl.json").write_text(json.dumps(bfcl) + "\n")
    assert len(list(containers.open_container(str(tmp_path / "bfcl.json"))[1].iter_rows())) == 1
    # over 1 MiB (read a value at a time), where the list of tools was taken for rows under the key 'tools'
    chat["messages"][0]["content"] = "Weather? " * 150_000
    (tmp_path / "long-chat.json").write_text(json.dumps(chat) + "\n")
    assert [e.response for e in read_all(tmp_path / "long-chat.json")[2]] == ["Sunny."]


def test_rows_under_a_key_of_a_gz_file_are_extracted_through_zcat(tmp_path):
    """jq cannot read a .gz file: the hint for `sq.json.gz` was `jq '.data' sq.json.gz > rows.json`; it is
    `zcat sq.json.gz | jq '.data' > rows.json`. One list holds '1 record', not '1 records'; a key jq's `.KEY` cannot
    name is quoted."""
    import gzip
    doc = {"version": "v2.0", "data": [{"question": "q", "answer": "a"}]}
    (tmp_path / "sq.json.gz").write_bytes(gzip.compress(json.dumps(doc, indent=1).encode()))
    with pytest.raises(CurateError, match=r"key 'data' holds a list of 1 record: .*\(zcat sq\.json\.gz \| jq '\.data' "
                                          r"> rows\.json\) and give that file$"):
        open_dataset(tmp_path / "sq.json.gz")
    (tmp_path / "dash.json").write_text(json.dumps({"v": 1, "my-rows": doc["data"]}, indent=1))
    with pytest.raises(CurateError, match=r"\(jq '\.\[\"my-rows\"\]' dash\.json > rows\.json\)"):
        open_dataset(tmp_path / "dash.json")


def test_pandas_column_oriented_json_is_refused_not_read_transposed(tmp_path):
    """pandas' DataFrame.to_json() writes `{"question": {"0": "q1", ...}, "answer": {...}}` by default: read as an
    object mapping ids to records, each column was a record of the row numbers ('columns found: [0, 1, 2]', and
    `--prompt-field 0 --response-field 1` gave 2 examples of prompt 'q1', response 'q2'). It is refused in one line
    with the fix, on one line or indented; to_json(orient='index'), a mapping of row -> record, reads as before."""
    import pandas as pd
    from conftest import cli_in_process as _cli
    df = pd.DataFrame({"question": ["q1", "q2", "q3"], "answer": ["a1", "a2", "a3"]})
    for name, indent in (("pd.json", None), ("pd-indented.json", 1)):
        df.to_json(tmp_path / name, indent=indent)
        for opts in (None, ReadOptions(prompt_field="0", response_field="1")):
            with pytest.raises(CurateError, match=rf"^{tmp_path / name}: pandas' column-oriented JSON \(DataFrame"
                                                  r"\.to_json\(\)'s default: .*; write it with to_json\(orient="
                                                  r"'records', lines=True\) and give that file$"):
                read_all(tmp_path / name, opts)
    r = _cli("inspect", "pd.json", "--prompt-field", "0", "--response-field", "1", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "column-oriented" in r.stderr, r.stderr
    df.to_json(tmp_path / "index.json", orient="index")
    assert [e.response for e in read_all(tmp_path / "index.json")[2]] == ["a1", "a2", "a3"]


def test_a_row_nested_too_deeply_is_a_bad_row_not_an_internal_error(tmp_path):
    """A value of arrays inside arrays 1,500 deep made json raise RecursionError: an INTERNAL ERROR. In JSON Lines
    it is a bad row, skippable; in a JSON document, where nothing after it can be read, the file's error at its
    line."""
    deep = "[" * 1500 + "]" * 1500
    p = tmp_path / "deep.jsonl"
    p.write_text('{"question": "q1", "answer": "a1"}\n{"question": "q2", "answer": "a2", "x": ' + deep + "}\n")
    with pytest.raises(CurateError, match=rf"^{p}:2: invalid JSON \(nested too deeply: .*\) \(id 1; pass "
                                          r"--on-bad-row skip"):
        read_all(p)
    ds, _, ex = read_all(p, SKIP)
    assert [e.response for e in ex] == ["a1"] and [r.location for r in ds.rejects] == [f"{p}:2"]
    for name, text in (("deep.json", '[\n{"question": "q1", "answer": "a1"},\n{"x": ' + deep + "}\n]\n"),
                       ("one.json", '{"question": "q", "answer": "a", "x": ' + deep + "}\n")):
        (tmp_path / name).write_text(text)
        for opts in (None, SKIP):
            with pytest.raises(CurateError, match=rf"^{tmp_path / name}:{text.count(chr(10)) - 1 or 1}: invalid "
                                                  r"JSON \(nested too deeply: "):
                read_all(tmp_path / name, opts)
    from cluster_curate.io.mixture import is_mixture_file
    assert not is_mixture_file(str(tmp_path / "one.json"))  # asked first of a .json: it raised RecursionError too


def test_json_document_syntax_errors_near_its_end_name_their_line(tmp_path):
    """An error within the last 64 characters of the text read reads on to the end of the file first (a record may
    continue there), which dropped what was consumed from the buffer the error's position was in: the line named
    was past the error ('bad3.json:4' for line 3, 13 in a 12-line file, a trailing comma on line 1 as line 2). Each
    is the line json.loads names, near the end of the file or not."""
    rows = [json.dumps({"question": f"q{i}", "answer": f"a{i}"}) for i in range(10)]
    cases = {"near_end.json": "[\n" + ",\n".join(rows[:1] + [rows[1].replace(", ", " ")] + rows[2:3]) + "\n]\n",
             "late.json": "[\n" + ",\n".join(rows[:8] + [rows[8].replace(", ", " ")] + rows[9:]) + "\n]\n",
             "mid.json": "[\n" + ",\n".join(rows[:3] + [rows[3].replace(", ", " ")] + rows[4:]) + "\n]\n",
             "comma.json": "[" + rows[0] + ",]\n",
             "unterminated.json": "[\n" + rows[0] + ',\n{"question": "q1\n]\n'}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(json.JSONDecodeError) as expected:
            json.loads(text)
        with pytest.raises(CurateError, match=rf"^{tmp_path / name}:{expected.value.lineno}: invalid JSON "):
            read_all(tmp_path / name)


def test_raw_batches_combine_when_a_column_widens(tmp_path):
    p = write_jsonl(tmp_path / "w.jsonl", [{"question": "a", "answer": "b", "note": None},
                                           {"question": "c", "answer": "d", "note": "n", "extra": 1}])
    _, batches, _ = read_all(p, batch_rows=1)
    assert batches[0].raw.schema.field("note").type == pa.null()
    table = pa.concat_tables([pa.Table.from_batches([b.raw]) for b in batches], promote_options="permissive")
    assert table.to_pylist() == [{"id": 0, "question": "a", "answer": "b", "note": None, "extra": None},
                                 {"id": 1, "question": "c", "answer": "d", "note": "n", "extra": 1}]


def test_save_to_disk_dataset_dict_and_empty(tmp_path):
    import datasets
    rows = {"question": ["a", "b"], "answer": ["1", "2"]}
    other = {"question": ["c"], "answer": ["3"]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(other)}
                         ).save_to_disk(str(tmp_path / "dd"))
    ds, _, ex = read_all(tmp_path / "dd")
    assert ds.container == "hf-disk" and [e.response for e in ex] == ["1", "2"]
    assert [e.response for e in read_all(tmp_path / "dd" / "test")[2]] == ["3"]
    with pytest.raises(CurateError, match=rf"^{tmp_path / 'dd' / 'validation'}: the datasets.save_to_disk directory "
                                          rf"{tmp_path / 'dd'} has no split 'validation' \(its splits: train, test\)$"):
        open_dataset(tmp_path / "dd" / "validation")  # was the message of a hub id not in the cache
    datasets.DatasetDict({"a": datasets.Dataset.from_dict(rows), "b": datasets.Dataset.from_dict(other)}
                         ).save_to_disk(str(tmp_path / "ab"))
    with pytest.raises(CurateError, match=r"ab: a DatasetDict with splits \['a', 'b'\] and no 'train'; pass .*ab/SPLIT"):
        open_dataset(tmp_path / "ab")
    datasets.Dataset.from_dict({"question": [], "answer": []}).save_to_disk(str(tmp_path / "empty"))
    with pytest.raises(CurateError, match=r"empty: dataset is empty \(no rows\)"):
        open_dataset(tmp_path / "empty")


def test_gzip_compressed_text_files(tmp_path):
    import gzip
    for rel in ("gsm8k/train-300.jsonl", "gsm8k/train-300.csv", "code_alpaca/code_alpaca-300.json"):
        src = FIXTURES / rel
        gz = tmp_path / (src.name + ".gz")
        gz.write_bytes(gzip.compress(src.read_bytes(), mtime=0))
        assert read_all(gz)[2] == read_all(src)[2]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes((tmp_path / "train-300.jsonl.gz").read_bytes()[:3000])
    # what unreadable data says (errors.cannot_read), and a text file named .gz what its opposite says
    with pytest.raises(CurateError, match=r"cut.jsonl.gz: cannot read it: the compressed file is cut short \(it ends "
                                          r"before its end-of-stream marker\); copy or download it again$"):
        read_all(cut)
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_text('{"question": "a", "answer": "b"}\n')
    with pytest.raises(CurateError, match=r"fake.jsonl.gz: not gzip-compressed, but its name ends in .gz; rename it "
                                          r"fake.jsonl$"):
        read_all(fake)


def write_tsv(csv_path: Path, tsv_path: Path) -> Path:
    """The same table as a tab-separated file (pyarrow quotes the values that need it, as pandas does)."""
    import pyarrow.csv as pacsv
    pacsv.write_csv(pacsv.read_csv(csv_path), tsv_path, pacsv.WriteOptions(delimiter="\t"))
    return tsv_path


def test_tsv_reads_as_the_same_data_in_csv(tmp_path):
    import gzip
    csv_path = FIXTURES / "gsm8k/train-300.csv"
    tsv = write_tsv(csv_path, tmp_path / "train-300.tsv")
    assert "\t" in tsv.read_text().splitlines()[0] and "," in tsv.read_text()  # commas stay inside values
    gz = tmp_path / "train-300.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.read_bytes(), mtime=0))
    csv_ds, csv_batches, csv_examples = read_all(csv_path, batch_rows=7)
    for path in (tsv, gz):
        ds, batches, examples = read_all(path, batch_rows=7)
        assert (ds.container, ds.format, ds.rows) == ("tsv", "qa", 300)
        assert examples == csv_examples
        assert [b.raw for b in batches] == [b.raw for b in csv_batches]


def test_tsv_bad_rows_name_file_line_and_field(tmp_path):
    """An empty field is a bad row as in a CSV (by id: a quoted value may span lines); a row with a tab too many
    names its line (pyarrow's message names none), counting the lines of quoted values before it."""
    p = tmp_path / "x.tsv"
    p.write_text('question\tanswer\nq0\ta0\n"q1\non two lines"\t\nq2\ta2\n')
    with pytest.raises(CurateError, match=rf"^{p}: id 1: field 'answer': empty response \(pass --on-bad-row skip"):
        read_all(p)
    ds, _, examples = read_all(p, SKIP)
    assert [e.id for e in examples] == [0, 2] and [str(r) for r in ds.rejects] == [
        f"{p}: id 1: field 'answer': empty response"]
    p.write_text('question\tanswer\nq0\ta0\n"q1\non two lines"\ta1\nq2\ta2\tstray\n')
    for opts in (None, SKIP):  # the file cannot be parsed past it: not a row to skip
        with pytest.raises(CurateError, match=rf"^{p}:5: 3 fields where the header has 2 \(a value holding a tab "
                                              r"must be quoted\)$"):
            read_all(p, opts)
    p.write_text('question\tanswer\nq0\ta0\nq1 on\ntwo lines\ta1\n')  # a line break in a value left unquoted
    with pytest.raises(CurateError, match=rf"^{p}:3: 1 field where the header has 2 \(a value holding a line break "
                                          r"must be quoted\)$"):
        read_all(p)
    c = tmp_path / "x.csv"
    c.write_text('question,answer\nq0,a0\nq1,a1,stray\n')
    with pytest.raises(CurateError, match=rf"^{c}:3: 3 fields where the header has 2 \(a value holding a comma"):
        read_all(c)


def test_a_header_naming_a_column_twice_is_refused_at_open(tmp_path):
    """pandas' df.to_csv(sep='\\t') of a table with two unnamed index levels writes the header '\\t\\tquestion\\t...':
    two columns named ''. pyarrow reads them; the shard writer could not (an internal error after embed, cluster
    and select had run), so the reader refuses the file when it opens it."""
    import pandas as pd
    df = pd.DataFrame({"question": ["q0", "q1"], "answer": ["a0", "a1"]}, index=pd.MultiIndex.from_arrays([[0, 1],
                                                                                                          [0, 0]]))
    for name, sep in (("x.tsv", "\t"), ("x.csv", ",")):
        df.to_csv(tmp_path / name, sep=sep)
        with pytest.raises(CurateError, match=rf"^{tmp_path / name}:1: column '' appears 2 times in the header; "):
            open_dataset(tmp_path / name)


def test_a_misshapen_row_after_a_value_over_128_kib_is_still_located(tmp_path):
    """A long document in a value (pyarrow reads it), or bytes that are not UTF-8, before the misshapen row do not
    stop the search for it: Python's csv module, which locates it, has a field size limit of 128 KiB, and its
    text reader stopped at the bad bytes (both were internal errors)."""
    import csv
    limit = csv.field_size_limit()
    p = tmp_path / "long.tsv"
    p.write_text("question\tanswer\nq0\t" + "a" * 200_000 + "\nq1\ta1\tstray\n")
    with pytest.raises(CurateError, match=rf"^{p}:3: 3 fields where the header has 2 \(a value holding a tab"):
        read_all(p)
    assert csv.field_size_limit() == limit  # the process's limit is left as it was
    # and bytes that are not UTF-8 before it, past the file's start (where they are named first: _Csv._check_text)
    p.write_bytes(b"question\tanswer\nq0\t" + b"a" * 70_000 + b"\nq1\ta\xff1\nq2\ta2\tstray\n")
    with pytest.raises(CurateError, match=rf"^{p}:4: 3 fields where the header has 2 \(a value holding a tab"):
        read_all(p)


def test_a_quote_never_closed_or_closed_inside_a_value_is_refused_with_its_line_not_read_as_one_value(tmp_path):
    """pyarrow lets a quoted value run on over the rows after it: an unclosed quote at the start of a value made
    every later row part of it (2 rows read of 4, no bad row), and a quote closed before more text joined the value
    to what followed. Strict CSV refuses both, naming the row the value opens in; whole quoted values, line breaks
    and doubled quotes in them, read as before."""
    cases = {
        "open.csv": ('question,answer\nWhat is 1+1?,2\nWhat is 2+2?,"4\nWhat is 3+3?,6\nWhat is 4+4?,8\n',
                     ":3: a quote opens a value in this row and is never closed, so the rest of the file would be "
                     'that one value; close it, and write each quote inside it twice ("")'),
        "after.csv": ('question,answer\nWhat is 1+1?,2\nWhat is 2+2?,"4" or four\nWhat is 3+3?,6\n',
                      ":3: more text follows a quoted value's closing quote; quote the whole value, and write each "
                      'quote inside it twice ("")'),
        "later.csv": ('question,answer\nq1,"a\nq2,b\nq3,c"d\nq4,e\n',
                      ":2: a quoted value opens in this row and closes on line 4, where more text follows; quote the "
                      "whole value"),
        "said.tsv": ('question\tanswer\nq1\t"Hello," she said.\n', ":2: more text follows a quoted value's closing "
                     "quote"),
        # in a row's first value, the row is one field, which pyarrow refused first: '1 field where the header has
        # 2 (a value holding a line break must be quoted)'
        "first.csv": ('question,answer\n"q1,a1\nq2,a2\nq3,a3\n', ":2: a quote opens a value in this row and is never "
                      "closed"),
        "first.tsv": ('question\tanswer\n"q1\ta1\nq2\ta2\nq3\ta3\n', ":2: a quote opens a value in this row and is "
                      "never closed"),
    }
    for name, (text, said) in cases.items():
        (tmp_path / name).write_text(text)
        for opts in (None, SKIP):  # the file cannot be read past it: not a row to skip
            with pytest.raises(CurateError) as e:
                read_all(tmp_path / name, opts)
            assert str(e.value).startswith(f"{tmp_path / name}{said}"), str(e.value)
    ok = tmp_path / "ok.csv"
    ok.write_text('question,answer\nq1,"two\nlines, and ""quotes"""\nq2,"whole, quoted"\nq3,a "quote" inside\n')
    assert [e.response for e in read_all(ok)[2]] == ['two\nlines, and "quotes"', "whole, quoted", 'a "quote" inside']


def test_csv_bytes_that_are_no_text_are_named_as_such_not_as_a_misshapen_header(tmp_path):
    """Binary data, or UTF-16 without its byte-order mark, named .csv was 'the header is the one column ...:
    separated by a tab' or a row of too few fields; its NUL bytes say what it is. Bytes that are not UTF-8 in the
    header are named by line, as later ones are."""
    (tmp_path / "img.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00,\t;" * 40)
    (tmp_path / "u16.tsv").write_bytes("question\tanswer\nq\ta\n".encode("utf-16-le"))
    for name in ("img.csv", "u16.tsv"):
        with pytest.raises(CurateError, match=rf"^{tmp_path / name}: holds NUL bytes, so it is no UTF-8 text "
                                              r"\(binary data, or UTF-16 without its byte-order mark\); write it as "
                                              r"UTF-8 text$"):
            open_dataset(tmp_path / name)
    (tmp_path / "head.csv").write_bytes(b"question,r\xe9ponse\nq,a\n")
    with pytest.raises(CurateError, match=rf"^{tmp_path / 'head.csv'}:1: not valid UTF-8 text \(byte 0xe9 at column "
                                          r"11\)"):
        open_dataset(tmp_path / "head.csv")


def test_a_csv_value_longer_than_a_read_block_is_read_in_place(tmp_path):
    """A quoted value over pyarrow's 1 MiB read block (a long document) was refused ('straddling object straddles
    two block boundaries (try to increase block size?)'), as a first row or after thousands; the reader reads again
    with larger blocks, past the rows it gave, and every row comes once, in order."""
    import csv
    with open(tmp_path / "long.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "answer"])
        w.writerow(["q0", "word " * 500_000])  # 2.5 MB, in the first block
        for i in range(1, 20_001):
            w.writerow([f"q{i}", f"a{i}"])
        w.writerow(["q20001", "word,\n" * 700_000])  # 4.2 MB after 20,000 rows, with commas and line breaks
        w.writerow(["q20002", "last"])
    ds, batches, ex = read_all(tmp_path / "long.csv", batch_rows=4096)
    assert [e.id for e in ex] == list(range(20_003)) and ds.rows == 20_003
    assert [e.prompt[0]["content"] for e in ex] == [f"q{i}" for i in range(20_003)]
    assert (ex[0].response, ex[20_001].response, ex[-1].response) == ("word " * 500_000, "word,\n" * 700_000, "last")


def test_a_json_file_of_json_lines_whose_first_record_is_over_1_mib_reads_as_json_lines(tmp_path):
    """A .json file reads either JSON Lines or one document; a first line over 1 MiB was taken for a mapping of
    id -> record written on one line, and refused ('a JSON object whose values are not records'). The object's
    values, read one at a time, tell: a first value that is no record makes it one."""
    long = "w " * 600_000
    p = tmp_path / "long.json"
    p.write_text(json.dumps({"question": "q1", "answer": long}) + "\n" + json.dumps({"question": "q2", "answer": "a2"})
                 + "\n")
    ds, _, ex = read_all(p)
    assert (ds.container, [e.response for e in ex]) == ("jsonl", [long, "a2"])
    p.write_text(json.dumps({"question": "q1", "answer": long}))  # one record, no line end
    assert [e.response for e in read_all(p)[2]] == [long]
    p.write_text(json.dumps({f"id{i}": {"question": f"q{i}", "answer": "w " * 1000} for i in range(600)}))
    ds, _, ex = read_all(p)  # a mapping of id -> record on one line of 1.2 MB, as before
    assert (ds.container, len(ex)) == ("json", 600)


def test_a_parquet_file_naming_a_column_twice_is_refused_at_open(tmp_path):
    """pyarrow writes such a file; reading it was an INTERNAL ERROR (KeyError: 'Field "answer" exists 2 times')."""
    table = pa.Table.from_arrays([pa.array(["q1", "q2"]), pa.array(["a1", "a2"]), pa.array(["x", "y"])],
                                 names=["question", "answer", "answer"])
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(CurateError, match=rf"^{tmp_path / 'dup.parquet'}: column 'answer' appears 2 times; give each "
                                          r"column its own name$"):
        open_dataset(tmp_path / "dup.parquet")


def test_nan_in_a_text_field_is_a_missing_value_not_the_text_nan(tmp_path):
    """json.dump of pandas' records writes a missing value as NaN, which JSON readers take: its answer was the text
    'NaN' (the same row's empty CSV cell or Parquet null is a bad row). NaN is missing now, in a column and in a
    message's content; an infinite number is no text either."""
    p = tmp_path / "nan.jsonl"
    p.write_text('{"question": "q0", "answer": "a0"}\n{"question": "q1", "answer": NaN}\n'
                 '{"question": "q2", "answer": Infinity}\n{"question": NaN, "answer": "a3"}\n{"question": "q4", '
                 '"answer": 4.5}\n')
    ds, _, ex = read_all(p, SKIP)
    assert [(e.id, e.response) for e in ex] == [(0, "a0"), (4, "4.5")]
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (1, "answer", "missing response"), (2, "answer", "response is inf, expected text"),
        (3, "question", "missing prompt")]
    m = tmp_path / "m.jsonl"
    m.write_text('{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": NaN}]}\n'
                 '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n')
    ds, _, ex = read_all(m, SKIP)
    assert [e.id for e in ex] == [1] and [r.id for r in ds.rejects] == [0]


def test_raw_only_pass_copies_rows_without_checking_them(tmp_path):
    """shard's pass: raw rows (bad ones included, as nulls/values) and no Example conversion or raising."""
    p = tmp_path / "d.jsonl"
    p.write_text('{"question": "q0", "answer": "a0"}\n{"question": "q1", "answer": ""}\n'
                 '{"question": "q2", "answer": "a2"}\n')
    ds = open_dataset(str(p), ReadOptions())
    batches = list(ds.iter_batches(2, examples=False))
    assert [b.examples for b in batches] == [[], []]
    raw = pa.Table.from_batches([b.raw for b in batches])
    assert raw.column("id").to_pylist() == [0, 1, 2]
    assert raw.column("answer").to_pylist() == ["a0", "", "a2"]
    assert ds.rejects == [] and ds.rows == 3
    with pytest.raises(CurateError, match="answer"):
        list(open_dataset(str(p), ReadOptions()).iter_batches(2))


def test_reads_through_hf_datasets(tmp_path):
    import datasets

    from cluster_curate.io.containers import reads_through_hf_datasets

    jsonl = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "a"}])
    (tmp_path / "parquet").mkdir()
    datasets.Dataset.from_dict({"question": ["q"], "answer": ["a"]}).save_to_disk(str(tmp_path / "saved"))
    assert not reads_through_hf_datasets(str(jsonl)) and not reads_through_hf_datasets(str(tmp_path / "parquet"))
    assert reads_through_hf_datasets(str(tmp_path / "saved"))
    assert reads_through_hf_datasets("openai/gsm8k@main:train") and reads_through_hf_datasets(str(tmp_path / "gone"))


def test_a_column_mixing_numbers_and_text_is_said_and_reaches_the_shards_as_text(tmp_path, capfd):
    """Numbers in one JSON batch and text in a later one: the reader warns once, naming the column, and the
    shard writer stores the column as text instead of failing after the whole pass."""
    import numpy as np

    from cluster_curate.io.shard_writer import ShardWriter
    rows = [{"question": f"q{i}", "answer": i if i < 3 else f"a{i}"} for i in range(6)]
    ds = open_dataset(write_jsonl(tmp_path / "mixed.jsonl", rows))
    batches = [batch.raw for batch in ds.iter_batches(3)]
    assert [str(b.schema.field("answer").type) for b in batches] == ["int64", "string"]
    assert ds.text_columns == ["answer"]
    assert capfd.readouterr().err.count("column 'answer' holds text in some rows") == 1
    writer = ShardWriter(tmp_path / "tmp", num_shards=1, rows_per_shard=6)
    for b in batches:
        table = pa.Table.from_batches([b])
        writer.add(table, np.zeros(table.num_rows, dtype=np.int64), table.column("id").to_numpy())
    writer.finish([tmp_path / "s.parquet"], ["id", "question", "answer"])
    assert pq.read_table(tmp_path / "s.parquet").column("answer").to_pylist() == ["0", "1", "2", "a3", "a4", "a5"]
    # a column of numbers only stays numbers: no warning
    ds = open_dataset(write_jsonl(tmp_path / "n.jsonl", [{"question": "q", "answer": 1}] * 4))
    assert [str(b.raw.schema.field("answer").type) for b in ds.iter_batches(2)] == ["int64", "int64"]
    assert ds.text_columns == [] and "holds text" not in capfd.readouterr().err


def test_a_pass_over_the_examples_counts_its_rows_without_building_the_raw_columns(tmp_path, capfd):
    """select's passes over the rows (and shard's token count) move their progress bar by each batch's rows,
    a bad one included: on a JSON source that count needs no raw Arrow batch (every column typed, one that
    mixes numbers and text made text, and said), which only shard's write of the source columns builds."""
    import numpy as np

    from cluster_curate.commands.common import examples_of_ids
    rows = [{"messages": [{"role": "system", "content": "You are a careful math tutor."},
                          {"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": f"{i} + {i} = {2 * i}.\n#### {2 * i}"}],
             "difficulty": i % 5 if i % 2 else "hard"} for i in range(10)]
    rows[5] = "{not json"
    ds = open_dataset(write_jsonl(tmp_path / "chats.jsonl", rows), SKIP)
    read = [e.id for _, chosen in examples_of_ids(ds, np.arange(0, 10, 3), "read", batch_rows=4) for e in chosen]
    assert read == [0, 3, 6, 9] and ds.rows == 10
    assert ds.text_columns == [] and "holds text" not in capfd.readouterr().err  # no raw batch was built
    batches = list(ds.iter_batches(4))
    assert [b.num_rows for b in batches] == [4, 4, 2] and ds.text_columns == []
    assert [b.raw.num_rows for b in batches] == [4, 4, 2] and ds.text_columns == ["difficulty"]


@pytest.mark.slow
def test_a_hub_id_without_a_network_fails_in_about_a_second(tmp_path):
    """Issue 20 #17: a hub that does not answer (a socket that listens and never replies) is given one second,
    then the local cache only: one line, exit 2, instead of datasets' ~25 s of retries (transformers': ~50 s)."""
    import os
    import socket
    import subprocess
    import sys
    import time
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the backlog; nothing is ever sent back
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{silent.getsockname()[1]}", HF_HOME=str(tmp_path / "hf"))

    def timed(args, run_env):
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "cluster_curate", *args], env=run_env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2, r.stderr
        return r, time.monotonic() - t0

    try:
        for args in (["inspect", "nobody/no-such-set"],
                     ["embed", str(FIXTURES / "gsm8k" / "train-300.jsonl"), "--out", str(tmp_path / "e.parquet"),
                      "--features", "hidden", "--model", "nobody/no-such-model"]):
            # the same failure offline, no hub asked: the start-up and the cache lookup on this machine, now (a
            # fixed bound of 15 s, written on a quiet machine, was 19 s on a loaded one)
            _, start_up = timed(args, dict(env, HF_HUB_OFFLINE="1"))
            r, seconds = timed(args, env)
            (line,) = r.stderr.strip().splitlines()
            assert "did not answer within 1 s" in line and ("not in the local cache" in line
                                                            or "not found locally or in the Hugging Face cache" in line)
            # the 1 s probe on top, and what the load changes from one start-up to the next; the retries alone
            # took 25-50 s
            assert seconds < start_up + 15, (seconds, start_up)
    finally:
        silent.close()
    assert not (tmp_path / "e.parquet").exists()


def test_a_chat_column_whose_content_changes_type_is_said_as_such(tmp_path, capfd):
    """One message `content` given as a list of parts: every row is still a list of messages, so the warning
    says the items differ in type (not that some rows hold text), and the column becomes JSON text."""
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(4)]
    rows[2]["messages"][0]["content"] = [{"type": "text", "text": "q2"}]
    ds = open_dataset(write_jsonl(tmp_path / "chat.jsonl", rows))
    batch = next(iter(ds.iter_batches()))
    assert pa.types.is_string(batch.raw.schema.field("messages").type) and ds.text_columns == ["messages"]
    err = capfd.readouterr().err
    assert "column 'messages' holds lists or objects whose items differ in type" in err and "holds text" not in err
