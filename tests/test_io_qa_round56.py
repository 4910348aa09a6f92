"""Reading text as a first-time user's odd files hold it (QA round 56): a lone UTF-16 surrogate escaped inside JSON
text that a field holds (a call's arguments, a `tools` column, xLAM's answers, a CSV column read by a nested path),
or in a JSON mapping's key, is a bad row naming its line and field, as one in a record's own text is, not a
UnicodeEncodeError where the text is hashed or written; a NUL character in a CSV value is read wherever it is (UTF-16
without its byte-order mark still refused); a byte-order mark at the start of a later JSON Lines line (two files
joined with cat) is read as the first line's is."""

from __future__ import annotations

import csv
import io
import json

import pytest

from cluster_curate.errors import CurateError
from cluster_curate.exact_dedup import example_key
from cluster_curate.io.datasets import ReadOptions, open_dataset
from conftest import FIXTURES
from conftest import cli_in_process as _cli
from test_datasets import read_all, write_jsonl

GSM = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
LONE = ("a lone UTF-16 surrogate ('\\ud800'), half of a pair: no character, and no UTF-8 text can hold it; write the "
        "character itself, or both halves of its escape")


def chat(g: dict) -> dict:
    return {"messages": [{"role": "user", "content": g["question"]}, {"role": "assistant", "content": g["answer"]}]}


def with_odd_row(path, rows: list, odd) -> object:
    """`rows` with `odd` as line 21 (id 20), as JSON Lines."""
    return write_jsonl(path, [*rows[:20], odd, *rows[20:]])


def tool_arguments(path):
    return with_odd_row(path, [chat(g) for g in GSM[:40]], {"messages": [
        {"role": "user", "content": "call a tool"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"x": "\\ud800"}'}}]}]})


def tools_text(path):
    return with_odd_row(path, [chat(g) for g in GSM[:40]], {
        **chat(GSM[40]), "tools": '[{"type": "function", "function": {"name": "f", "description": "d\\ud800"}}]'})


def xlam_answers(path):
    tools = json.dumps([{"name": "solve", "description": "d", "parameters": {}}])
    rows = [{"query": g["question"], "answers": json.dumps([{"name": "solve", "arguments": {"t": "a"}}]),
             "tools": tools} for g in GSM[:40]]
    return with_odd_row(path, rows, {"query": "q", "answers": '[{"name": "solve", "arguments": {"t": "\\ud800"}}]',
                                     "tools": tools})


def nested_csv(path):
    rows = [{"data": json.dumps({"q": g["question"], "a": g["answer"]})} for g in GSM[:40]]
    rows.insert(20, {"data": '{"q": "csv nested \\ud800 surrogate", "a": "ans"}'})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["data"])
    w.writeheader()
    w.writerows(rows)
    path = path.with_suffix(".csv")
    path.write_text(buf.getvalue())
    return path


NESTED = {"prompt_field": "data.q", "response_field": "data.a"}


# ------------------------------------------------------------------------------ 1: a lone surrogate in JSON text

@pytest.mark.parametrize("make, field, where, opts", [
    (tool_arguments, "messages[1].tool_calls[0].function.arguments", "x", {}),
    (tools_text, "tools", "[0].function.description", {}),
    (xlam_answers, "answers", "[0].arguments.t", {}),
    (nested_csv, "data", "q", NESTED),
], ids=["tool-arguments", "tools", "xlam-answers", "nested-csv"])
def test_a_lone_surrogate_in_json_text_a_field_holds_is_a_bad_row(tmp_path, make, field, where, opts):
    """The reader parses such text itself, and its value was not checked as a record's is: the example's text
    held the surrogate, and hashing it (exact_dedup.example_key) raised UnicodeEncodeError even under
    --on-bad-row skip. It is a bad row naming the line and the field holding the text."""
    path = make(tmp_path / "data.jsonl")
    at, note = (f"{path}: id 20", "") if path.suffix == ".csv" else (f"{path}:21", "id 20; ")  # a CSV row: its id
    with pytest.raises(CurateError) as e:
        read_all(path, ReadOptions(**opts))
    assert str(e.value) == (f"{at}: field '{field}': JSON text holding, at {where}, {LONE} ({note}pass --on-bad-row "
                            "skip to skip bad rows)"), str(e.value)
    ds, batches, examples = read_all(path, ReadOptions(on_bad_row="skip", **opts))
    assert [(r.id, r.location, r.field) for r in ds.rejects] == [(20, at, field)]
    assert len(examples) == 40 and 20 not in [x.id for x in examples]
    for x in examples:
        example_key(x.prompt, x.response)  # every example's text is UTF-8 text
    assert sum(b.raw.num_rows for b in batches) == 41


def test_a_lone_surrogate_in_a_call_s_arguments_is_skipped_by_inspect_and_embed(tmp_path):
    """The commands QA ran: INTERNAL ERROR: UnicodeEncodeError; now the row is skipped and written as a reject."""
    tool_arguments(tmp_path / "data.jsonl")
    r = _cli("inspect", "data.jsonl", "--on-bad-row", "skip", "--rejects", "insp.rejects.jsonl", cwd=tmp_path)
    assert r.returncode == 0 and "INTERNAL" not in r.stderr, r.stderr
    r = _cli("embed", "data.jsonl", "--out", "e.parquet", "--features", "text", "--dim", "4", "--on-bad-row", "skip",
             cwd=tmp_path)
    assert r.returncode == 0 and "INTERNAL" not in r.stderr, r.stderr
    rejects = [json.loads(x) for x in (tmp_path / "e.rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["field"]) for x in rejects] == [(20, "messages[1].tool_calls[0].function.arguments")]


def test_a_lone_surrogate_in_a_record_s_key_is_named_by_the_key_not_as_the_field(tmp_path):
    """The field a bad row named was the key itself, holding the surrogate: the rejects file (UTF-8) could not be
    written. The key is named in the reason, escaped, at the object holding it."""
    rows = [{"question": g["question"], "answer": g["answer"]} for g in GSM[:40]]
    path = with_odd_row(tmp_path / "data.jsonl", rows, '{"question": "q", "answer": "a", "meta": {"k\\ud800": 1}}')
    ds, _, examples = read_all(path, ReadOptions(on_bad_row="skip"))
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [(20, "meta", f"a key ('k\\ud800') holding {LONE}")]
    ds.write_rejects(tmp_path / "r.jsonl")
    assert len(examples) == 40


def test_a_sharegpt_function_call_turn_escaping_a_lone_surrogate_is_a_bad_row(tmp_path):
    """LLaMA-Factory's call is JSON text a trainer's turns parse into `tool_calls`: export crashed on it
    (UnicodeEncodeError), and a first mend exported it silently as the assistant's plain text (review). A bad row
    at read, naming the turn."""
    call = '{"name": "f", "arguments": {"x": "\\ud800"}}'
    rows = [{"conversations": [{"from": "human", "value": g["question"]}, {"from": "gpt", "value": g["answer"]}]}
            for g in GSM[:40]]
    rows.insert(20, {"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": call}]})
    path = write_jsonl(tmp_path / "lf.jsonl", rows)
    ds, _, examples = read_all(path, ReadOptions(format="sharegpt", on_bad_row="skip"))
    assert [(r.id, r.field) for r in ds.rejects] == [(20, "conversations[1].value")] and len(examples) == 40
    assert ds.rejects[0].reason == f"JSON text holding, at arguments.x, {LONE}"


# ------------------------------------------------------------------------------ 2: a lone surrogate in a mapping's key

def test_a_lone_surrogate_in_a_json_mapping_s_key_is_a_bad_row_at_read(tmp_path):
    """The key (the `key` column) was attached to the row unchecked: inspect, embed, cluster and select read it,
    and shard's Parquet could not write it (UnicodeEncodeError). A bad row at read, naming the key escaped."""
    m = {f"k{i}": {"question": g["question"], "answer": g["answer"]} for i, g in enumerate(GSM[:40])}
    path = tmp_path / "map.json"
    path.write_text(json.dumps(m).replace('"k5"', '"k\\ud800"'))
    with pytest.raises(CurateError) as e:
        read_all(path)
    assert str(e.value) == (f"{path}:1: the key ('k\\ud800') holding {LONE} (id 5; pass --on-bad-row skip to "
                            "skip bad rows)"), str(e.value)
    ds, batches, examples = read_all(path, ReadOptions(on_bad_row="skip"))
    assert [(r.id, r.field) for r in ds.rejects] == [(5, None)] and len(examples) == 39
    keys = [k for b in batches for k in b.raw.column("key").to_pylist()]
    assert keys[:5] == [f"k{i}" for i in range(5)] and keys[5] is None and len(keys) == 40


# ------------------------------------------------------------------------------ 3: NUL in a CSV value

def nul_csv(path, at: int):
    rows = [{"question": g["question"], "answer": g["answer"]} for g in GSM[:200]]
    rows.insert(at, {"question": "NUL\x00 inside a quoted cell", "answer": "ans \x00 nul"})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["question", "answer"])
    w.writeheader()
    w.writerows(rows)
    path.write_bytes(buf.getvalue().encode())
    return path


@pytest.mark.parametrize("at", [3, 180], ids=["first-64KiB", "later"])
def test_a_nul_character_in_a_csv_value_is_read_wherever_it_is(tmp_path, at):
    """In the first 64 KiB it refused the whole file as 'no UTF-8 text (binary data, or UTF-16 ...)', later it
    was read: the same file is read either way, its NUL kept (README: text character for character)."""
    path = nul_csv(tmp_path / "nul.csv", at)
    assert b"\0" in path.read_bytes()[: 1 << 16] if at == 3 else b"\0" not in path.read_bytes()[: 1 << 16]
    ds, batches, examples = read_all(path)
    assert len(examples) == 201 and not ds.rejects
    odd = next(x for x in examples if x.id == at)
    assert odd.prompt[-1]["content"] == "NUL\x00 inside a quoted cell" and odd.response == "ans \x00 nul"


def test_utf16_without_its_byte_order_mark_is_still_refused_whatever_it_holds(tmp_path):
    """NULs beside each ASCII character (UTF-16), runs of them (padding) or a file of them are no UTF-8 text; the
    message is unchanged."""
    text = "question,answer\n" + "".join(f'"{g["question"]}","{g["answer"]}"\n'.replace('""', "") for g in GSM[:50])
    russian = "question,answer\n" + "".join(f"Сколько будет два плюс два {i},Ответ четыре потому что {i}\n"
                                            for i in range(300))
    cases = (("le.csv", text.encode("utf-16-le")), ("be.csv", text.encode("utf-16-be")),
             # Cyrillic's UTF-16 bytes pass for UTF-8: NULs only beside its ASCII (review of the first mend)
             ("ru.csv", russian.encode("utf-16-le")),
             ("nul-tail.csv", text.encode() + b"\0" * 4096),  # a download cut short, padded with NULs
             ("zeros.csv", b"\0" * 100_000))
    for name, data in cases:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CurateError, match=r"holds NUL bytes, so it is no UTF-8 text \(binary data, or UTF-16 "
                                              r"without its byte-order mark\); write it as UTF-8 text$"):
            open_dataset(tmp_path / name)


@pytest.mark.parametrize("at", [2, 250])
def test_json_lines_read_a_nul_the_same_wherever_it_is(tmp_path, at):
    """JSON Lines agree: an escaped NUL is read, a raw NUL byte (invalid JSON) is a bad row, early or late."""
    rows = [{"question": g["question"], "answer": g["answer"]} for g in GSM[:300]]
    rows[at] = '{"question": "nul\\u0000escaped", "answer": "a"}'
    rows[at + 1] = '{"question": "nul\x00raw", "answer": "a"}'
    ds, _, examples = read_all(write_jsonl(tmp_path / "d.jsonl", rows), ReadOptions(on_bad_row="skip"))
    assert next(x for x in examples if x.id == at).prompt[-1]["content"] == "nul\x00escaped"
    assert [(r.id, r.reason) for r in ds.rejects] == [(at + 1, "invalid JSON (Invalid control character at: column "
                                                               "18)")]


# ------------------------------------------------------------------------------ 4: a BOM on a later line

def test_a_byte_order_mark_on_a_later_json_lines_line_is_read_as_the_first_one_is(tmp_path):
    """Two files each with a BOM joined with cat: line 51 was a bad row, 'invalid JSON (Unexpected UTF-8 BOM
    (decode using utf-8-sig): column 1)', Python's advice. A BOM is no data: read, as on line 1."""
    qa = [json.dumps({"question": g["question"], "answer": g["answer"]}) for g in GSM[:100]]
    path = tmp_path / "joined.jsonl"
    path.write_text("\ufeff" + "\n".join(qa[:50]) + "\n" + "\ufeff" + "\n".join(qa[50:]) + "\n\ufeff\n",
                    encoding="utf-8")
    ds, _, examples = read_all(path)
    assert not ds.rejects and [x.prompt[-1]["content"] for x in examples] == [g["question"] for g in GSM[:100]]
    assert ds.num_rows() == ds.rows == 100  # a line that is a BOM alone is blank, counted as read
    assert open_dataset(path).num_rows() == 100


def test_a_lone_surrogate_in_a_csv_chat_or_glaive_schemas_is_a_bad_row(tmp_path):
    """Two more readers of JSON text a field holds: a CSV `messages` column (io/turns.py) and glaive's tool schemas
    in its system prompt (io/glaive.py) crashed with UnicodeEncodeError as the others did."""
    from test_tool_calling import glaive_rows
    rows = [{"messages": json.dumps(chat(g)["messages"])} for g in GSM[:40]]
    rows.insert(20, {"messages": '[{"role": "user", "content": "q \\ud800"}, {"role": "assistant", "content": "a"}]'})
    path = tmp_path / "chats.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["messages"])
        w.writeheader()
        w.writerows(rows)
    ds, _, examples = read_all(path, ReadOptions(on_bad_row="skip"))
    assert [(r.id, r.field) for r in ds.rejects] == [(20, "messages")] and len(examples) == 40
    assert ds.rejects[0].reason == f"JSON text holding, at [0].content, {LONE}"
    glaive = glaive_rows(6)[0]
    glaive[3]["system"] = glaive[3]["system"].replace('"Get the exchange rate"', '"Get the rate \\ud800"')
    assert "\\ud800" in glaive[3]["system"]
    path = write_jsonl(tmp_path / "glaive.jsonl", glaive)
    ds, _, examples = read_all(path, ReadOptions(on_bad_row="skip"))
    assert [(r.id, r.field) for r in ds.rejects] == [(3, "system")] and len(examples) == 5
    assert ds.rejects[0].reason == f"tool schema 1 holding, at description, {LONE}"
    for x in examples:
        example_key(x.prompt, x.response)
