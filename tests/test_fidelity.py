"""Data fidelity: every value of a user's rows reaches the trainer as written, through embed -> cluster -> select ->
shard, `load_shard` and each `export --for` layout that keeps the rows' columns (README, "inspect DATA", what is kept
exactly). Arrow keeps one type per column: a whole number beside a fraction inside an object became a float (a tool
call's `{"days": 3}` trained as `{"days": 3.0}`), a number past 64 bits text, an object's keys the first row's order,
and an empty object could not be written. Nothing is dropped on the way: no system prompt, no rows nested under a key
of a JSON file."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cluster_curate as cc
from cluster_curate.layouts import KEEP_COLUMNS_TARGETS, source_records
from cluster_curate.loader import decoded_json, load_shard, read_manifest
from conftest import SHARED_DATA
from conftest import cli_in_process as _cli
from test_datasets import write_jsonl
from test_outputs import FAST
from test_tool_calling import xlam_rows

CODE_ALPACA = SHARED_DATA / "code_alpaca" / "code_alpaca_2k.json"


def same(a, b) -> bool:
    """Equal as JSON is written: the same types (1 is not 1.0, True is not 1), -0.0 is not 0.0, and an object's
    keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


def read_jsonl(path) -> list[dict]:
    """The records of a JSON Lines file (lines end at "\n" alone: text may hold U+2028, which splitlines splits at)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def kept(tmp_path, out, rows: list[dict]) -> dict[str, dict[int, dict]]:
    """What each reader of `out`'s shards gets for each row: {where: {row id: record}}. `load_shard` (every rank);
    `export --for` each layout that keeps the columns: the trainer layouts' file with its JSON-text columns
    decoded (their README names them), `jsonl` and `parquet` (the selected rows in dataset order, as written)."""
    shards = out / "shards"
    manifest = read_manifest(shards)
    selected = sorted(pq.read_table(out / "selection.parquet", columns=["id"]).column("id").to_pylist())
    got = {"load_shard": {}}
    for rank in range(manifest["num_shards"]):
        for row in load_shard(shards, rank=rank, world_size=manifest["num_shards"]):
            got["load_shard"][row["id"]] = row
    for layout in KEEP_COLUMNS_TARGETS:
        ex = tmp_path / f"ex-{layout}"
        cc.export(str(shards), trainer=layout, out=str(ex))
        if layout == "jsonl":
            records = read_jsonl(ex / "selected.jsonl")
        elif layout == "parquet":
            records = source_records(pq.read_table(ex / "selected.parquet"))
        else:
            table = pq.read_table(ex / "train.parquet")
            by_id = decoded_json(table.to_pylist(), manifest.get("json_columns") or ())
            got[layout] = {r["id"]: r for r in by_id}
            continue
        assert len(records) == len(selected), layout
        got[layout] = dict(zip(selected, records))
    return got


def as_kept(rows: list[dict]) -> list[dict]:
    """`rows` as README's "What is kept exactly" says a table keeps them: a column of numbers, whole and fractions,
    is one of floats (unless a float would round a whole number); every value inside objects and lists as written."""
    numbers = {}
    for row in rows:
        for column, value in row.items():
            numbers.setdefault(column, []).append(value)
    floats = [c for c, values in numbers.items()
              if all(type(v) in (int, float) for v in values if v is not None) and float in map(type, values)
              and all(abs(v) <= 2 ** 53 for v in values if type(v) is int)]
    return [{c: float(v) if c in floats and type(v) is int else v for c, v in row.items()} for row in rows]


def changed(rows: list[dict], got: dict[str, dict[int, dict]]) -> list[tuple]:
    """(reader, row id, column, written, read) of every value read otherwise than `as_kept` says. A column a row
    lacks reads as null (a table has every column in every row)."""
    rows = as_kept(rows)
    diffs = []
    for where, records in got.items():
        assert records, where
        for i, rec in records.items():
            for column, value in rows[i].items():
                name = column if column != "id" or where in ("jsonl", "parquet") else "source_id"
                if not same(value, rec.get(name)):
                    diffs.append((where, i, column, value, rec.get(name)))
            for column in rec.keys() - rows[i].keys():
                if column in {name for r in rows for name in r} and rec[column] is not None:
                    diffs.append((where, i, column, None, rec[column]))
    return diffs


def _run(tmp_path, rows: list[dict], *flags) -> None:
    write_jsonl(tmp_path / "data.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    r = _cli("run", "data.jsonl", "--out", "out", *FAST, "-q", *flags, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def code_alpaca(n: int) -> list[dict]:
    rows = json.loads(CODE_ALPACA.read_text(encoding="utf-8"))[:n] if CODE_ALPACA.exists() else []
    return rows + [{"instruction": f"Write a function that returns {i} squared.", "input": "",
                    "output": f"def f():\n    return {i} ** 2"} for i in range(n - len(rows))]


def test_values_arrow_would_change_reach_every_reader_as_written(tmp_path):
    """Code Alpaca rows with a metadata column, scores and ids: whole numbers beside fractions (in an object, a list
    and a column of their own), numbers past 2**53 and past 64 bits, -0.0, a NUL character, an emoji, keys with
    dots and spaces, empty objects and lists, null beside a missing key. Each came back changed: 3 as 3.0 inside
    an object, 2**60 + 1 as 2**60, a 65-bit id as text, and an empty object stopped `shard` with a traceback."""
    rows = code_alpaca(60)
    for i, row in enumerate(rows):
        row["meta"] = {"difficulty": i % 5 if i % 3 else i % 5 + 0.5, "big": 2 ** 60 + i, "zero": -0.0,
                       "note": "tab\there\u0000nul \U0001F600", "dot.key": {"sp ace": []}, "empty": {},
                       "tags": [i, 2.5] if i % 2 else [i]}
        if i % 4:
            row["meta"]["seen"] = None
        row["score"] = i if i % 2 else i / 4  # a float column: 3 as 3.0 (as_kept)
        row["rank"] = 2 ** 60 + i if i % 2 else i / 4  # a float would round 2**60 + 1
        row["hash"] = 2 ** 64 + i
        row["empty"] = {}
    _run(tmp_path, rows, "--fraction", "0.5")
    assert changed(rows, kept(tmp_path, tmp_path / "out", rows)) == []


def test_booleans_after_fractions_stay_booleans(tmp_path):
    """A column, an object's key and a list holding a fraction and then true or false (a flag column filled with
    0.0 where unknown): Arrow made the booleans 1.0 and 0.0, which every reader got (found by the property test
    below, on CI)."""
    rows = code_alpaca(30)
    for i, row in enumerate(rows):
        row["x_a"] = None if i < 20 else (0.0 if i % 2 == 0 else bool(i % 3))
        row["meta"] = {"flag": 0.5 if i < 25 else i % 2 == 0}
        row["votes"] = [0.5, i % 2 == 0]
    _run(tmp_path, rows, "--fraction", "0.9")
    assert changed(rows, kept(tmp_path, tmp_path / "out", rows)) == []


def test_to_hf_dataset_keeps_a_column_of_numbers_past_64_bits_as_json_text(tmp_path):
    """datasets' Json feature read whole numbers past 64 bits as text, or raised `Value is too big!` at a row: such
    a column stays JSON text there, said in a warning; the other JSON-text columns are read back as objects."""
    rows = code_alpaca(40)
    for i, row in enumerate(rows):
        row["big"] = 2 ** 70 + i if i % 2 else i
        row["meta"] = {"level": i % 3 if i % 2 else i / 2}
    _run(tmp_path, rows, "--fraction", "1.0")
    shard = load_shard(tmp_path / "out" / "shards", rank=0, world_size=2)
    assert set(shard.json_columns) == {"big", "meta"}
    with pytest.warns(UserWarning, match="column 'big' holds whole numbers past 64 bits"):
        ds = shard.to_hf_dataset()
    got = {r["id"]: r for r in ds}
    assert got and all(json.loads(r["big"]) == rows[r["id"]]["big"] and
                       r["meta"] == rows[r["id"]]["meta"] for r in got.values())


def test_an_objects_keys_keep_their_order(tmp_path):
    """Tool-call arguments whose keys come in another order from row to row (as a model wrote them) were one
    struct: every row's keys in the first row's order, which the call's rendered text changed with."""
    rows = code_alpaca(40)
    for i, row in enumerate(rows):
        row["call"] = {"name": "convert", "arguments": {"value": i, "unit": "km"} if i % 2 else
                       {"unit": "mi", "value": i}}
    _run(tmp_path, rows, "--fraction", "0.5")
    assert changed(rows, kept(tmp_path, tmp_path / "out", rows)) == []


def test_xlam_calls_whose_arguments_mix_whole_numbers_and_fractions_are_trained_as_written(tmp_path):
    """xLAM rows whose `answers` are the calls as objects (decoded before saving): `{"days": 3}` beside another
    row's `{"days": 1.5}` made one struct of floats, and `export --for trl` taught the model to call
    `{"days": 3.0}`."""
    rows = xlam_rows(48)
    for i, row in enumerate(rows):
        calls = json.loads(row["answers"])
        for call in calls:
            call["arguments"]["days"] = i % 7 if i % 3 else i % 7 + 0.5
        row["answers"] = calls
    _run(tmp_path, rows)
    r = _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert exported
    for row in exported:
        calls = [c["function"] for c in row["completion"][0]["tool_calls"]]
        assert [(c["name"], c["arguments"]) for c in calls] == [
            (c["name"], json.dumps(c["arguments"])) for c in rows[row["id"]]["answers"]]
    assert changed(rows, kept(tmp_path, tmp_path / "out", rows)) == []


@pytest.mark.parametrize("pairs", [False, True])
def test_conversational_prompts_whose_turns_differ_in_keys_reach_each_trainer_as_their_turns(tmp_path, pairs):
    """TRL's conversational prompt/completion (and preference pairs) where one row's user turn has a `name`: the
    shards keep `prompt` as JSON text, which every chat export (trl, llamafactory, torchtune, axolotl) wrapped, whole,
    in one user turn of every row: the system turns lost, the model trained on JSON."""
    rows = []
    for i, r in enumerate(code_alpaca(40)):
        user = {"role": "user", "content": r["instruction"], **({"name": "alice"} if i == 0 else {})}
        answer = [{"role": "assistant", "content": r["output"]}]
        rows.append({"prompt": [{"role": "system", "content": f"Be exact {i}."}, user],
                     **({"chosen": answer, "rejected": [{"role": "assistant", "content": f"No idea {i}."}]}
                        if pairs else {"completion": answer})})
    _run(tmp_path, rows, "--fraction", "0.5")
    for trainer in ("trl", "llamafactory", "torchtune", "axolotl"):
        r = _cli("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
        assert r.returncode == 0, (trainer, r.stderr)
        exported = pq.read_table(tmp_path / trainer / "train.parquet").to_pylist()
        assert exported, trainer
        for row in exported:
            turns = row.get("prompt") or row.get("messages") or row["chosen"]  # torchtune's pairs: whole chats
            assert [t["content"] for t in turns if t["role"] == "system"] == [f"Be exact {row['id']}."], (trainer,
                                                                                                          row)


def test_preference_pairs_keep_their_turns_scores_and_annotations(tmp_path):
    """UltraFeedback binarized rows as a tool like jq rewrites them (a score of 8.0 written 8, beside 7.5) with
    their annotations (whole numbers beside halves): the scores are a column of floats, the annotations and every
    turn of `chosen` / `rejected` as written, in every reader and in the pairs `export --for trl` writes."""
    from test_input_formats import ultrafeedback_rows
    rows = ultrafeedback_rows(40)
    for i, row in enumerate(rows):
        row["score_chosen"], row["score_rejected"] = (8 if i % 2 else 7.5), (2 if i % 3 else 2.5)
        row["annotations"] = {"helpfulness": i % 5 if i % 2 else i % 5 + 0.5, "honesty": {"rating": i % 4}}
    _run(tmp_path, rows, "--fraction", "0.5")
    assert changed(rows, kept(tmp_path, tmp_path / "out", rows)) == []
    r = _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert exported
    for row in exported:
        given = rows[row["id"]]
        assert row["prompt"] + row["chosen"] == given["chosen"] and row["rejected"] == given["rejected"][-1:]


@pytest.mark.skipif(not (SHARED_DATA / "gsm8k" / "train.jsonl").exists(),
                    reason="the shared real datasets are not here (6,000 GSM8K rows: two reader batches)")
@pytest.mark.parametrize("floats_first", [False, True])
def test_whole_numbers_and_floats_in_different_batches_are_kept_as_written(tmp_path, floats_first):
    """GSM8K rows with a `meta` object (and a `score` column) whose numbers are whole in the reader's first batch (of
    4096 rows) and floats in the next, or the other way round: Arrow promoted the batches' structs to one of floats
    (`{"difficulty": 3}` came back 3.0). The column of numbers is one of floats, as README says."""
    from shard_helpers import make_selection
    rows = read_jsonl(SHARED_DATA / "gsm8k" / "train.jsonl")[:6000]
    for i, row in enumerate(rows):
        fraction = (i < 4096) == floats_first
        row["score"] = i % 7 + 0.5 if fraction and i % 3 == 0 else float(i % 7) if fraction else i % 7
        row["meta"] = {"difficulty": row["score"], "steps": row["answer"].count("\n")}
    data = write_jsonl(tmp_path / "gsm8k.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, n_tokens=True)
    manifest = cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2,
                        micro_batch_size=7, remainder="drop")
    assert manifest["leftover_rows"] > 0 and manifest["json_columns"] == ["meta"]
    cc.export(str(tmp_path / "shards"), trainer="jsonl", out=str(tmp_path / "ex"))
    selected = sorted(pq.read_table(tmp_path / "sel.parquet", columns=["id"]).column("id").to_pylist())
    exported = read_jsonl(tmp_path / "ex" / "selected.jsonl")
    assert len(exported) == len(selected) == 3000
    rows = as_kept(rows)  # `score`: a column of floats
    assert [i for i, rec in zip(selected, exported) if not same(rec, rows[i])] == []
    loaded = [r for rank in (0, 1) for r in load_shard(tmp_path / "shards", rank=rank, world_size=2)]
    assert [r["id"] for r in loaded if not same(r["score"], rows[r["id"]]["score"])
            or not same(r["meta"], rows[r["id"]]["meta"])] == []



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
    is, naming the key that holds the rows and the jq that extracts them, on one line as indented (on one line under
    1 MiB it was one record: 'unrecognised record format; columns found: [meta, data]')."""
    rows = [{"question": f"What is {i} + {i}?", "answer": f"{2 * i}"} for i in range(30)]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"meta": {"question": "version", "answer": "1.0"}, "data": rows}, indent=indent))
    for skip in ([], ["--on-bad-row", "skip"]):
        r = _cli("inspect", str(path), *skip)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert "key 'data' holds a list of 30 records" in line, line
        assert "jq '.data' dataset.json > rows.json" in line, line
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({f"q{i}": row for i, row in enumerate(rows)}, indent=indent))
    r = _cli("inspect", str(mapping), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["examples"] == 30, r.stderr


def test_openhermes_system_prompt_column_is_the_conversations_system_turn(tmp_path):
    """OpenHermes-2.5 rows keep a system prompt in `conversations` (`from: system`, as SlimOrca does) or in their
    `system_prompt` column: the column's was dropped without a word, from the text embedded and counted and from
    the turns a trainer's export writes. Both are read now; a row whose system turn and column disagree is a bad
    row naming the column (neither is dropped)."""
    from popular_datasets import openhermes
    rows = openhermes(40)
    for i, row in enumerate(rows):
        if i % 3 == 1:
            row["system_prompt"] = f"You are a pirate; answer in rhyme, case {i}."
        elif i % 3 == 0 and i % 2:  # the conversation's own system turn, the same text in the column
            row["system_prompt"] = row["conversations"][0]["value"]
    expected = {i: (row["system_prompt"] or (row["conversations"][0]["value"] if i % 3 == 0 else None))
                for i, row in enumerate(rows)}
    _run(tmp_path, rows, "--fraction", "0.9")
    r = _cli("inspect", "data.jsonl", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["format"], summary["fields"].get("system")) == ("sharegpt", "system_prompt")
    assert summary["with_system_prompt"] == sum(map(bool, expected.values()))
    r = _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert {bool(expected[row["id"]]) for row in exported} == {True, False}
    for row in exported:
        system = [t["content"] for t in row["prompt"] if t["role"] == "system"]
        assert system == ([expected[row["id"]]] if expected[row["id"]] else []), row["id"]
    rows[3]["system_prompt"] = "Be terse."
    write_jsonl(tmp_path / "both.jsonl", rows)
    r = _cli("inspect", "both.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "both.jsonl:4: field 'system_prompt'" in r.stderr and "opens with a different system turn" in r.stderr


# ------------------------------------------------------------------------------------------------ property

_COLUMN = st.text("abcdefgh", min_size=1, max_size=5).map(lambda s: f"x_{s}")
_LEAF = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.integers(-9, 9)
         | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
_VALUE = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=10)
# a column's values: text (or null) in every row, or any JSON but text; a column holding text and other values is
# text (numbers as their JSON), as README's "What is kept exactly" says, and one of numbers is one of floats
_NOT_TEXT = _VALUE.filter(lambda v: not isinstance(v, str))
_COLUMNS = st.dictionaries(_COLUMN, st.sampled_from(["text", "json"]), max_size=4)


@st.composite
def _rows(draw) -> list[dict]:
    kinds = draw(_COLUMNS)
    rows = code_alpaca(draw(st.integers(10, 16)))
    for row in rows:
        for name, kind in kinds.items():
            if draw(st.booleans()) or name == next(iter(kinds)):  # some rows lack a column
                row[name] = draw(st.none() | st.text(max_size=12) if kind == "text" else _NOT_TEXT)
    return rows


def _property(tmp_path_factory, rows: list[dict]) -> None:
    tmp = tmp_path_factory.mktemp("fidelity")
    data = write_jsonl(tmp / "data.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    cc.run(str(data), str(tmp / "out"), features="text", dim=4, k=2, fraction=0.7, num_shards=2,
           micro_batch_size=2)
    assert changed(rows, kept(tmp, tmp / "out", rows)) == []


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@settings(max_examples=8, **_SETTINGS)
@given(rows=_rows())
def test_any_json_values_reach_every_reader_as_written(tmp_path_factory, rows):
    _property(tmp_path_factory, rows)


@pytest.mark.slow
@settings(max_examples=80, **_SETTINGS)
@given(rows=_rows())
def test_any_json_values_reach_every_reader_as_written_many(tmp_path_factory, rows):
    _property(tmp_path_factory, rows)
