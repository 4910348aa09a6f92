"""Tool-calling chat data (OpenAI `tool_calls` and `tool` turns with a `tools` column, LLaMA-Factory's ShareGPT
with function_call / observation turns) through the `cluster-curate` command: read as examples whose text
holds the calls and the tool schemas, bad tool rows named in one line, and the selected rows exported unchanged."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from cluster_curate.io.datasets import ReadOptions, open_dataset
from test_datasets import write_jsonl
from conftest import cli_in_process as _cli

CITIES = ["Paris", "Oslo", "Lima", "Rome", "Quito", "Hanoi", "Accra", "Perth"]
TOPICS = ["weather", "time", "population", "currency", "altitude"]


def _schema(name: str, props: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"The {name} of a city.",
                                             "parameters": {"type": "object", "properties": props,
                                                            "required": list(props)}}}


def tool_rows(n: int) -> list[dict]:
    """OpenAI-style rows of three shapes: a call, its result and an answer (with a system prompt); a call as
    the answer (the model learns to call: xLAM style); a plain chat without calls. The tool schemas' properties
    and the turns' keys differ from row to row, as they do in real data."""
    rows = []
    for i in range(n):
        city, topic = CITIES[i % len(CITIES)], TOPICS[(i // len(CITIES)) % len(TOPICS)]
        name = f"get_{topic}"
        props = {"city": {"type": "string"}} if i % 2 else {"city": {"type": "string"},
                                                             "unit": {"type": "string", "enum": ["si", "us"]}}
        args = {"city": city} if i % 2 else {"city": city, "unit": "si"}
        question = f"What is the {topic} in {city}, case {i}? Please check {' and '.join(CITIES[:1 + i % 4])}."
        shape = i % 3
        if shape == 0:
            messages = [{"role": "system", "content": "You can call tools."},
                        {"role": "user", "content": question},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": f"call_{i}", "type": "function",
                             "function": {"name": name, "arguments": json.dumps(args)}}]},
                        {"role": "tool", "tool_call_id": f"call_{i}", "name": name,
                         "content": json.dumps({topic: i % 30})},
                        {"role": "assistant", "content": f"The {topic} in {city} is {i % 30}, case {i}."}]
        elif shape == 1:
            messages = [{"role": "user", "content": question},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}]
        else:
            messages = [{"role": "user", "content": f"Tell me about {city}, case {i}."},
                        {"role": "assistant", "content": f"{city} is a city, case {i}."},
                        {"role": "user", "content": question},
                        {"role": "assistant", "content": f"I do not know the {topic} of {city}."}]
        rows.append({"messages": messages, "tools": [_schema(name, props)]})
    return rows


def _inspect(path, *argv) -> dict:
    r = _cli("inspect", str(path), "--json", *argv)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_openai_tool_rows_are_read_with_their_calls_and_schemas(tmp_path):
    """Every row was rejected ('no user turn right before the last assistant turn (it follows a 'tool' turn)',
    or 'empty response' for a call as the answer), and a call in a context turn was dropped from the text."""
    path = write_jsonl(tmp_path / "tools.jsonl", tool_rows(30))
    summary = _inspect(path)
    assert (summary["examples"], summary["rejected"]) == (30, 0)
    assert summary["fields"]["tools"] == "tools"
    # the rendered schemas are no system prompt of the record's own: only the 10 rows that have one count
    assert (summary["with_system_prompt"], summary["with_tools"]) == (10, 30)

    ds = open_dataset(str(path))
    examples = [e for b in ds.iter_batches() for e in b.examples]
    first, called = examples[0], examples[1]
    call = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "si"}}'
    assert [t["role"] for t in first.prompt] == ["system", "user", "assistant", "tool"]
    assert first.prompt[2]["content"] == call              # the call in a context turn is text, not ""
    assert first.prompt[0]["content"].startswith("You can call tools.\n\n# Tools\n\n")
    assert '"unit": {"type": "string", "enum": ["si", "us"]}' in first.prompt[0]["content"]
    assert first.response == "The weather in Paris is 0, case 0."
    # a call as the response: the model learns to call the tool
    assert called.response == '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    assert [t["role"] for t in called.prompt] == ["system", "user"]


def test_a_calls_arguments_are_read_whatever_their_spacing(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "weather in Oslo?"},
                          {"role": "assistant", "tool_calls": [{"type": "function", "function": {
                              "name": "get_weather", "arguments": args}}]}]}
            for args in ('{"city":"Oslo"}', '{ "city" :  "Oslo" }', {"city": "Oslo"}, "not json")]
    ds = open_dataset(str(write_jsonl(tmp_path / "calls.jsonl", rows)))
    responses = [e.response for b in ds.iter_batches() for e in b.examples]
    same = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    assert responses == [same, same, same, '{"name": "get_weather", "arguments": "not json"}']


def test_llamafactory_sharegpt_tool_rows_are_read(tmp_path):
    """LLaMA-Factory's ShareGPT: function_call turns hold the call's JSON, observation turns the tool's result,
    `tools` the schemas as JSON text."""
    rows = [{"conversations": [{"from": "human", "value": f"Weather in {c}?"},
                               {"from": "function_call", "value": json.dumps({"name": "get_weather",
                                                                             "arguments": {"city": c}})},
                               {"from": "observation", "value": json.dumps({"temp": i})},
                               {"from": "gpt", "value": f"It is {i} degrees in {c}."}],
             "tools": json.dumps([_schema("get_weather", {"city": {"type": "string"}})])}
            for i, c in enumerate(CITIES)]
    path = write_jsonl(tmp_path / "lf.jsonl", rows)
    summary = _inspect(path)
    assert (summary["format"], summary["examples"], summary["with_tools"], summary["with_system_prompt"]) == (
        "sharegpt", 8, 8, 0)
    ds = open_dataset(str(path))
    ex = next(e for b in ds.iter_batches() for e in b.examples)
    assert [t["role"] for t in ex.prompt] == ["system", "user", "assistant", "tool"]
    assert ex.prompt[2]["content"] == '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert ex.response == "It is 0 degrees in Paris."


def test_hermes_style_sharegpt_rows_answering_a_tool_are_read(tmp_path):
    """Hermes function-calling: calls inside the gpt turn's text, results in `tool` turns; the answer after a
    tool's result was 'no user turn right before the last assistant turn'."""
    rows = [{"conversations": [
        {"from": "system", "value": "You are a function calling AI model. <tools> {\"name\": \"get_weather\"} </tools>"},
        {"from": "human", "value": f"Weather in {c}?"},
        {"from": "gpt", "value": f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{c}"}}}}\n</tool_call>'},
        {"from": "tool", "value": f'<tool_response>\n{{"temp": {i}}}\n</tool_response>'},
        {"from": "gpt", "value": f"It is {i} degrees in {c}."}]} for i, c in enumerate(CITIES)]
    summary = _inspect(write_jsonl(tmp_path / "hermes.jsonl", rows))
    assert (summary["format"], summary["examples"], summary["rejected"], summary["with_system_prompt"]) == (
        "sharegpt", 8, 0, 8)


def test_bad_tool_rows_are_one_line_naming_file_line_and_field(tmp_path):
    good = tool_rows(3)
    cases = {
        "no-name": ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]},
                    "field 'messages[2].tool_calls[0].function': no name"),
        "not-a-list": ({"role": "assistant", "tool_calls": {"name": "f"}},
                       "field 'messages[2].tool_calls': tool calls are an object, expected a list of calls"),
        "a-number": ({"role": "assistant", "tool_calls": [3]},
                     "field 'messages[2].tool_calls[0]': tool call is a number, expected an object"),
    }
    for name, (turn, expected) in cases.items():
        bad = json.loads(json.dumps(good[0]))
        bad["messages"][2] = turn
        path = write_jsonl(tmp_path / f"{name}.jsonl", [good[1], bad, good[2]])
        r = _cli("embed", str(path), "--out", str(tmp_path / f"{name}.parquet"), "--features", "text")
        assert r.returncode == 2
        line = r.stderr.strip().splitlines()[-1]
        assert f"{path}:2: {expected}" in line, r.stderr
        assert "Traceback" not in r.stderr
    bad = dict(good[0], tools=7)
    path = write_jsonl(tmp_path / "tools.jsonl", [bad])
    r = _cli("inspect", str(path))
    assert r.returncode != 0
    assert f"{path}:1: field 'tools': tools are a number, expected a list of tool schemas" in r.stderr, r.stderr


def test_a_prompt_must_hold_a_user_turn_and_end_with_a_user_or_tool_turn(tmp_path):
    user, tool = {"role": "user", "content": "q"}, {"role": "tool", "content": "t"}
    answer = {"role": "assistant", "content": "a"}
    rows = [{"messages": [user, tool, answer]},                       # fine: the model answers the tool
            {"messages": [user, answer, answer]},                     # follows an assistant turn
            {"messages": [{"role": "system", "content": "s"}, tool, answer]},   # no user turn at all
            {"messages": [user, {"role": "assistant", "content": None, "tool_calls": []}]}]   # empty
    ds = open_dataset(str(write_jsonl(tmp_path / "chat.jsonl", rows)), ReadOptions(on_bad_row="skip"))
    examples = [e for b in ds.iter_batches() for e in b.examples]
    assert [e.id for e in examples] == [0]
    assert [(r.id, r.field, r.reason) for r in ds.rejects] == [
        (1, "messages", "no user or tool turn right before the last assistant turn (it follows a 'assistant' turn)"),
        (2, "messages", "no user turn before the last assistant turn (roles before it: system, tool)"),
        (3, "messages[1]", "empty response (the last assistant turn is empty)")]


def _records(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _selected_ids(selection) -> list[int]:
    import pyarrow.parquet as pq
    return sorted(pq.read_table(selection, columns=["id"]).column("id").to_pylist())


def test_selected_tool_rows_are_exported_unchanged(tmp_path):
    """`run`, then `export --for jsonl|parquet`: each record as it was read. Arrow made the turns one struct of
    every key and the schemas one struct of every property, so a user turn came back with `"tool_calls": null`
    and a schema of one property with `"unit": null` added; such columns are JSON text in the shards now."""
    import pyarrow.parquet as pq

    from cluster_curate.layouts import JSON_COLUMNS_KEY, source_records
    from test_outputs import FAST
    rows = tool_rows(90)
    write_jsonl(tmp_path / "tools.jsonl", rows)
    r = _cli("run", "tools.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    wanted = [rows[i] for i in _selected_ids(tmp_path / "out" / "selection.parquet")]
    for fmt in ("jsonl", "parquet"):
        r = _cli("export", "out/shards", "--for", fmt, "--out", f"ex-{fmt}", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    exported = _records(tmp_path / "ex-jsonl" / "selected.jsonl")
    assert len(exported) == len(wanted) > 20
    assert exported == wanted
    assert [list(r) for r in exported] == [list(r) for r in wanted]  # the same keys, in order
    table = pq.read_table(tmp_path / "ex-parquet" / "selected.parquet")
    assert json.loads(table.schema.metadata[JSON_COLUMNS_KEY]) == ["messages", "tools"]
    assert source_records(table) == wanted


def test_a_column_whose_keys_change_between_batches_is_exported_unchanged(tmp_path):
    """Plain chats first (turns of role and content, one struct; a tool of other properties), tool rows later: a
    batch of each shape, and left-over rows read back from the data. Merging the batches' structs added null keys
    to the plain turns. (A row without a column at all is another matter: a table gives it a null there.)"""
    import cluster_curate as cc
    from shard_helpers import make_selection
    plain = [{"messages": [{"role": "user", "content": f"Say {i}."}, {"role": "assistant", "content": f"{i}."}],
              "tools": [_schema("get_time", {"zone": {"type": "string"}})]} for i in range(40)]
    rows = plain + tool_rows(40)
    data = write_jsonl(tmp_path / "mixed.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.55, n_tokens=True)
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=4,
             batch_rows=16, remainder="drop")
    cc.export(str(tmp_path / "shards"), trainer="jsonl", out=str(tmp_path / "ex"))
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert manifest["leftover_rows"] > 0 and manifest["json_columns"] == ["messages", "tools"]
    assert _records(tmp_path / "ex" / "selected.jsonl") == [rows[i] for i in
                                                             _selected_ids(tmp_path / "sel.parquet")]


def _late_key_rows(n: int, case: str) -> list[dict]:
    """Alpaca rows with a `meta` object whose keys first differ at row 5000, in the reader's second batch of 4096:
    before it, the same two keys, a float score in every tenth row (`int_float`) or the keys in either order
    (`key_order`); from it, a third key in some rows."""
    rows = []
    for i in range(n):
        score = i % 7 + 0.5 if case == "int_float" and i % 10 == 0 else i % 7
        meta = {"src": f"s{i % 3}", "score": score}
        if case == "key_order" and i % 2:
            meta = {"score": score, "src": f"s{i % 3}"}
        if i >= 5000 and i % 4 == 0:
            meta["lang"] = "en"
        rows.append({"instruction": f"Add {i} and {i % 13}, case {i}.", "input": "", "output": f"{i + i % 13}.",
                     "meta": meta})
    return rows


def _shard_and_export_late_keys(tmp_path, case: str, **shard_options) -> tuple[list[dict], list[str]]:
    """The input's selected rows and the exported records (as JSON text: 1 and 1.0 differ there) after `shard`
    (left-over rows read back from the data) and `export --for jsonl`."""
    import cluster_curate as cc
    from shard_helpers import make_selection
    rows = _late_key_rows(6000, case)
    data = write_jsonl(tmp_path / "late.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, n_tokens=True)
    manifest = cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2,
                        micro_batch_size=7, remainder="drop", **shard_options)
    assert manifest["leftover_rows"] > 0 and manifest["json_columns"] == ["meta"]
    cc.export(str(tmp_path / "shards"), trainer="jsonl", out=str(tmp_path / "ex"))
    wanted = [json.dumps(rows[i]) for i in _selected_ids(tmp_path / "sel.parquet")]
    return wanted, [json.dumps(r) for r in _records(tmp_path / "ex" / "selected.jsonl")]


@pytest.mark.parametrize("case", ["int_float", "key_order"])
def test_a_json_text_column_whose_keys_first_differ_in_a_later_batch_is_exported_as_written(tmp_path, case):
    """The first batch's objects were one struct, turned into JSON text through Arrow: the struct's key order, and
    a float wherever another row of the batch had one (`{"src": "s1", "score": 1}` came back with `1.0`)."""
    wanted, exported = _shard_and_export_late_keys(tmp_path, case)
    assert len(exported) == len(wanted) == 3000
    assert [e for e, w in zip(exported, wanted) if e != w] == []


@pytest.mark.slow  # importing transformers takes seconds
def test_a_json_text_column_is_written_as_read_whatever_pass_ran_before(tmp_path):
    """`shard --tokenizer` reads the data once to count tokens before the write: the reader then already knew the
    column as JSON text, so the shards differed from those of a write pass that learned it part-way."""
    from test_input_formats import _word_tokenizer
    wanted, exported = _shard_and_export_late_keys(tmp_path, "int_float",
                                                   tokenizer=str(_word_tokenizer(tmp_path / "tok")))
    assert [e for e, w in zip(exported, wanted) if e != w] == []


def test_run_on_a_mixture_of_tool_rows_says_each_json_text_column_once(tmp_path, monkeypatch, api_warnings):
    """A mixture's columns are checked before embed and read again by shard: each file's JSON-text warning was
    given twice in one `run`. Each command says it once, and each call of the Python API is a command."""
    import cluster_curate as cc
    from test_outputs import FAST
    rows = tool_rows(120)
    write_jsonl(tmp_path / "a.jsonl", rows[:60])
    write_jsonl(tmp_path / "b.jsonl", rows[60:])
    r = _cli("run", "a.jsonl", "b.jsonl", "--out", "out", *FAST, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    given = json.loads(r.stdout)["warnings"]
    for source in ("a.jsonl", "b.jsonl"):
        for column in ("messages", "tools"):
            said = f"{source}: column {column!r} holds lists or objects whose items differ"
            assert r.stderr.count(said) == 1, r.stderr
            assert sum(w.startswith(said) for w in given) == 1, given
    monkeypatch.chdir(tmp_path)
    for out in ("shards-1", "shards-2"):
        before = len(api_warnings)
        cc.shard("out/selection.parquet", ["a.jsonl", "b.jsonl"], out, num_shards=2, micro_batch_size=2)
        assert sum("column 'messages' holds lists" in w for w in api_warnings[before:]) == 2, api_warnings  # a's, b's


def test_hf_shards_of_tool_rows_load_in_datasets_and_keep_the_calls(tmp_path):
    from datasets import Dataset

    import cluster_curate as cc
    from shard_helpers import make_selection
    rows = tool_rows(60)
    data = write_jsonl(tmp_path / "tools.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, n_tokens=True)
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=2)
    cc.export(str(tmp_path / "shards"), trainer="hf", out=str(tmp_path / "hf"), world_size=2, micro_batch_size=2)
    assert "- `messages`, `tools`: JSON text, one value per row" in (tmp_path / "hf" / "README.md").read_text()
    ds = Dataset.from_parquet(str(tmp_path / "hf" / "train.parquet"))
    assert len(ds) == 28  # 30 selected, 7 steps of 2 × 2
    by_id = {r["id"]: r for r in ds}
    for i, row in by_id.items():
        assert json.loads(row["messages"]) == rows[i]["messages"]   # the calls and tool turns as they were
        assert json.loads(row["tools"]) == rows[i]["tools"]


def test_the_loader_hands_back_tool_rows_as_the_input_held_them(tmp_path):
    """The shards keep `messages` and `tools` as JSON text (their objects differ in keys from row to row); a
    training script reading its shard through cluster_curate.loader (a torch DataLoader over the shard, its
    micro-batches, a datasets.Dataset) got that text where the input file held lists of dicts."""
    from torch.utils.data import DataLoader

    import cluster_curate as cc
    from cluster_curate.loader import load_shard
    from shard_helpers import make_selection
    rows = tool_rows(60)
    data = write_jsonl(tmp_path / "tools.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.5, n_tokens=True)
    manifest = cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2,
                        micro_batch_size=2)
    assert manifest["json_columns"] == ["messages", "tools"]
    for rank in (0, 1):
        shard = load_shard(tmp_path / "shards", rank=rank, world_size=2)
        loader = DataLoader(shard, batch_sampler=shard.batch_sampler(), collate_fn=list)
        seen = [row for batch in loader for row in batch]
        assert len(seen) == len(shard) == 14 and seen == list(shard)
        assert all((r["messages"], r["tools"]) == (rows[r["id"]]["messages"], rows[r["id"]]["tools"]) for r in seen)
        batches = list(shard.micro_batches(columns=["id", "messages"]))
        assert [m for b in batches for m in b["messages"]] == [rows[i]["messages"] for b in batches for i in b["id"]]
        ds = shard.to_hf_dataset()
        assert ds["id"] == [r["id"] for r in seen] and ds[3]["tools"] == rows[ds[3]["id"]]["tools"]
        assert [r["messages"] for r in ds] == [rows[i]["messages"] for i in ds["id"]]


# A chat template that renders tool schemas (into the system turn) and tool calls, as Qwen-style templates do;
# arguments are JSON text in the export (one Arrow type for every row), rendered as they are.
TOOLS_TEMPLATE = (  # transformers drops the newline right after a block tag: those are written {{ '\n' }}
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "# Tools{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}<|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}{{ '\\n' }}"
    "{%- if m.content %}{{ m.content }}{% endif %}"
    "{%- for call in m.tool_calls or [] %}{% if not loop.first or m.content %}{{ '\\n' }}{% endif %}"
    '<tool_call>{"name": "{{ call.function.name }}", "arguments": '
    "{{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}"
    "</tool_call>{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _run_export_trl_with_a_tool_model(tmp_path, name: str, rows: list[dict]):
    """`run` on `rows`, `export --for trl`, and a tiny Llama whose template renders tools and calls: (its
    directory, its tokenizer, the exported dataset as datasets reads it, its rows by id)."""
    import datasets
    from transformers import AutoTokenizer

    from test_outputs import FAST
    from tiny_lm import build_llama
    write_jsonl(tmp_path / name, rows)
    assert _cli("run", name, "--out", "out", *FAST, "-q", cwd=tmp_path).returncode == 0
    r = _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    model_dir = build_llama(tmp_path / "model", layers=1, hidden=32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = TOOLS_TEMPLATE
    tok.save_pretrained(model_dir)
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "trl" / "train.parquet"), split="train",
                               cache_dir=str(tmp_path / ".hf"))
    return model_dir, tok, ds, {row["id"]: row for row in ds}


def _sft_trainer(tmp_path, model_dir, tok, ds):
    """TRL's SFTTrainer on the exported rows `ds`, in their order: two steps of 2 rows on CPU."""
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer
    args = SFTConfig(output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, max_steps=2,
                     learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1, use_cpu=True,
                     disable_tqdm=True, dataloader_num_workers=0, seed=0, packing=False, shuffle_dataset=False,
                     max_length=None)
    return SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=ds,
                      processing_class=tok)


@pytest.mark.slow
def test_trl_sft_trainer_trains_on_the_exported_tool_calls(tmp_path):
    """`export --for trl` keeps the calls structured (`tool_calls`, a tool turn's `tool_call_id` / `name`) and the
    schemas in a `tools` column; TRL's SFTTrainer renders them through the chat template, learns the call when it
    is the completion, and trains."""
    rows = tool_rows(90)
    model_dir, tok, ds, by_id = _run_export_trl_with_a_tool_model(tmp_path, "tools.jsonl", rows)
    assert "`arguments | tojson` writes it as a quoted string" in (tmp_path / "trl" / "README.md").read_text()
    call_row = next(i for i in by_id if i % 3 == 1)          # a call as the completion
    result_row = next(i for i in by_id if i % 3 == 0)        # call, tool result, answer
    completion = by_id[call_row]["completion"][0]
    assert completion["content"] is None
    assert [c["function"] for c in completion["tool_calls"]] == [
        {"name": rows[call_row]["messages"][1]["tool_calls"][0]["function"]["name"],
         "arguments": rows[call_row]["messages"][1]["tool_calls"][0]["function"]["arguments"]}]
    tool_turn = by_id[result_row]["prompt"][3]
    assert (tool_turn["role"], tool_turn["tool_call_id"], tool_turn["name"]) == (
        "tool", f"call_{result_row}", rows[result_row]["tools"][0]["function"]["name"])
    assert json.loads(by_id[call_row]["tools"]) == rows[call_row]["tools"]

    trainer = _sft_trainer(tmp_path, model_dir, tok, ds)
    tokenized = {ds[i]["id"]: trainer.train_dataset[i] for i in range(len(ds))}

    def learnt(i):  # the text of the tokens the loss is on
        ex = tokenized[i]
        return tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label != -100])

    def context(i):
        ex = tokenized[i]
        return tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label == -100])

    args_text = rows[call_row]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert learnt(call_row).startswith('<tool_call>{"name": "get_')
    assert f'"arguments": {args_text}}}</tool_call>' in learnt(call_row)
    assert "# Tools\n" in context(call_row) and '"parameters"' in context(call_row)
    assert "<|im_start|>tool\n" in context(result_row) and "<tool_call>" in context(result_row)
    assert learnt(result_row).startswith(rows[result_row]["messages"][-1]["content"])
    out = trainer.train()
    assert out.global_step == 2 and out.training_loss > 0


def test_llamafactory_axolotl_and_torchtune_exports_of_tool_rows(tmp_path):
    """LLaMA-Factory: its sharegpt turns (function_call holding the call's JSON, observation the tool's result,
    alternating as its converter checks) and `tools` in dataset_info; axolotl: the calls as `tool_calls` and
    `field_tools`; torchtune, whose openai style has no tool calls: refused in one line, not dropped."""
    import pyarrow.parquet as pq

    from test_outputs import FAST
    rows = tool_rows(90)
    write_jsonl(tmp_path / "tools.jsonl", rows)
    assert _cli("run", "tools.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path).returncode == 0
    for trainer in ("llamafactory", "axolotl"):
        r = _cli("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr

    lf = {r["id"]: r for r in pq.read_table(tmp_path / "llamafactory" / "train.parquet").to_pylist()}
    result_row = next(i for i in lf if i % 3 == 0)
    call = rows[result_row]["messages"][2]["tool_calls"][0]["function"]
    assert lf[result_row]["messages"] == [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": rows[result_row]["messages"][1]["content"]},
        {"role": "function_call", "content": json.dumps({"name": call["name"],
                                                         "arguments": json.loads(call["arguments"])})},
        {"role": "observation", "content": rows[result_row]["messages"][3]["content"]},
        {"role": "assistant", "content": rows[result_row]["messages"][4]["content"]}]
    for row in lf.values():  # LLaMA-Factory skips a row whose turns do not alternate
        turns = row["messages"][1:] if row["messages"][0]["role"] == "system" else row["messages"]
        assert all(t["role"] in (("user", "observation"), ("assistant", "function_call"))[k % 2]
                   for k, t in enumerate(turns)) and len(turns) % 2 == 0
        assert json.loads(row["tools"]) == rows[row["id"]]["tools"]
    info = json.loads((tmp_path / "llamafactory" / "dataset_info.json").read_text())["cluster_curate"]
    assert info["columns"] == {"messages": "messages", "tools": "tools"}
    assert (info["tags"]["function_tag"], info["tags"]["observation_tag"]) == ("function_call", "observation")

    ax = {r["id"]: r for r in pq.read_table(tmp_path / "axolotl" / "train.parquet").to_pylist()}
    turn = ax[result_row]["messages"][2]
    assert (turn["role"], turn["content"], turn["tool_calls"][0]["function"]) == ("assistant", None, call)
    assert json.loads(ax[result_row]["tools"]) == rows[result_row]["tools"]
    config = (tmp_path / "axolotl" / "config.yaml").read_text()
    assert "    field_tools: tools\n" in config and "      tool_calls: tool_calls\n" in config

    r = _cli("export", "out/shards", "--for", "torchtune", "--out", "torchtune", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "holds tool calls or tool turns, which torchtune's openai conversation style does not carry" in r.stderr
    assert "export --for trl, axolotl or llamafactory keeps them" in r.stderr and " (id " in r.stderr
    assert not (tmp_path / "torchtune").exists()


def _axolotl_get_tools(tools):
    """axolotl's ChatTemplateStrategy._get_tools (prompt_strategies/chat_template.py, v0.18): a text is json.loads'ed;
    in a list only a dict's function `parameters` given as text is parsed; the list goes to apply_chat_template."""
    if isinstance(tools, str):
        tools = json.loads(tools)
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("function", {}).get("parameters"), str):
            tool["function"]["parameters"] = json.loads(tool["function"]["parameters"])
    return tools


def test_axolotl_export_tools_reach_the_chat_template_as_schemas(tmp_path):
    """`export --for axolotl` wrote `tools` as a list of one JSON text per tool: axolotl hands such a list on as it
    is, and transformers refuses it ("Tools should either be a JSON schema, or a callable function"). It is the
    JSON text of the list now: read as axolotl reads it, the template renders each row's schemas."""
    import pyarrow.parquet as pq

    import cluster_curate as cc
    from shard_helpers import make_selection
    from tiny_lm import build_tokenizer
    rows = tool_rows(24)
    data = write_jsonl(tmp_path / "tools.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=2, fraction=1.0, n_tokens=True)
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=2)
    cc.export(str(tmp_path / "shards"), trainer="axolotl", out=str(tmp_path / "ax"))
    tok = build_tokenizer(True)
    tok.chat_template = TOOLS_TEMPLATE
    exported = pq.read_table(tmp_path / "ax" / "train.parquet").to_pylist()
    assert len(exported) == 24
    for row in exported:
        tools = _axolotl_get_tools(row["tools"])
        turns = [{k: v for k, v in t.items() if v is not None} for t in row["messages"]]
        text = tok.apply_chat_template(turns, tools=tools, tokenize=False)
        assert tools == rows[row["id"]]["tools"] and f'"name": "{tools[0]["function"]["name"]}"' in text


def test_the_tool_schemas_are_no_part_of_a_rows_question(tmp_path):
    """A row's question (embed's prompt keys, which `select --decontaminate` compares) sets system turns aside,
    so the schemas rendered there with them: the same question asked with other tools is the same question. The
    example (what exact-copy removal compares) still differs. Decontamination's n-grams leave them out too."""
    from cluster_curate.decontamination import eval_ngrams, shares_ngram
    from cluster_curate.exact_dedup import example_key, prompt_keys
    base = tool_rows(2)[1]                     # a question and a call as its answer
    other_tools = dict(base, tools=[_schema("get_time", {"zone": {"type": "string"}})])
    no_tools = dict(base, tools=None)
    path = write_jsonl(tmp_path / "same.jsonl", [base, other_tools, no_tools])
    ds = open_dataset(str(path))
    examples = [e for b in ds.iter_batches() for e in b.examples]
    prompts = [e.prompt for e in examples]
    assert len(set(prompt_keys(prompts).tolist())) == 1
    assert len({example_key(e.prompt, e.response) for e in examples}) == 3
    schema_words = [[{"role": "user", "content": "The get_weather of a city. type object properties city type "
                                                 "string required"}]]
    assert not shares_ngram(prompts, eval_ngrams(schema_words, 4)[0], 4).any()
    question = [[t for t in prompts[0] if t["role"] == "user"]]
    assert shares_ngram(prompts, eval_ngrams(question, 4)[0], 4).all()


STRICT_TEMPLATE = ("{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
                   "{{ raise_exception('Only user, assistant and system roles are supported!') }}{% endif %}"
                   "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.slow
def test_a_chat_template_that_refuses_tool_turns_is_one_line(tmp_path):
    """Token counts (inspect --tokenizer) and model features (embed --model) render the prompt through the chat
    template; one that raises on a `tool` turn was an INTERNAL ERROR with jinja's message alone."""
    from tiny_lm import build_llama
    model = build_llama(tmp_path / "model", layers=1, hidden=32)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    tok.chat_template = STRICT_TEMPLATE
    tok.save_pretrained(model)
    path = write_jsonl(tmp_path / "tools.jsonl", tool_rows(6))
    expected = (f"ERROR: {model}: its chat template refuses the turns of row id 0 (roles system, user, assistant, "
                "tool): Only user, assistant and system roles are supported!; give a tokenizer whose template "
                "renders them")
    for argv in (["inspect", str(path), "--tokenizer", str(model)],
                 ["embed", str(path), "--out", str(tmp_path / "e.parquet"), "--features", "hidden", "--model",
                  str(model), "--device", "cpu"]):
        r = _cli(*argv)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1] == expected, r.stderr


def test_llamafactory_refuses_a_turn_of_text_and_calls(tmp_path):
    """LLaMA-Factory's function_call turn holds the calls alone: the text beside them would be lost."""
    import cluster_curate as cc
    from cluster_curate.errors import CurateError
    from shard_helpers import make_selection
    rows = tool_rows(24)
    for row in rows:
        for turn in row["messages"]:
            if turn.get("tool_calls"):
                turn["content"] = "Let me check."
    data = write_jsonl(tmp_path / "tools.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=2, fraction=1.0, n_tokens=True)
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=2)
    with pytest.raises(CurateError, match=r"shards: row \d+ \(id \d+\): an assistant turn holds text and tool calls; "
                                          r"LLaMA-Factory's function_call turn holds the calls alone: export --for "
                                          r"trl or axolotl keeps both"):
        cc.export(str(tmp_path / "shards"), trainer="llamafactory", out=str(tmp_path / "lf"))
    cc.export(str(tmp_path / "shards"), trainer="trl", out=str(tmp_path / "trl"))   # keeps both
    import pyarrow.parquet as pq
    turns = [t for r in pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
             for t in r["prompt"] + r["completion"] if t["tool_calls"]]
    assert turns and all(t["content"] == "Let me check." for t in turns)


def test_a_column_of_text_in_some_batches_and_objects_in_others_is_not_decoded(tmp_path):
    """A column of plain text in early rows and objects in later ones is mixed (text), not JSON: its text must come
    back as written ("17" stays "17"), never be parsed as JSON."""
    import cluster_curate as cc
    from shard_helpers import make_selection
    rows = [{"question": f"q{i} " * (i % 5 + 1), "answer": f"a{i}",
             "meta": ("17" if i % 2 else f"note {i}") if i < 20 else {"level": i}} for i in range(40)]
    data = write_jsonl(tmp_path / "mixed.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=2, fraction=0.55, n_tokens=True)
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=2,
             batch_rows=16)
    cc.export(str(tmp_path / "shards"), trainer="jsonl", out=str(tmp_path / "ex"))
    exported = _records(tmp_path / "ex" / "selected.jsonl")
    wanted = [rows[i] for i in _selected_ids(tmp_path / "sel.parquet")]
    assert [r["meta"] for r in exported] == [w["meta"] if isinstance(w["meta"], str) else json.dumps(w["meta"])
                                             for w in wanted]


def test_a_mixtures_system_column_is_the_records_own_system_prompt(tmp_path):
    """A mixture's shards add a normalised `system` column: the tool schemas rendered into the system turn were
    counted as a system prompt, so a row without one got the schemas there. Its original columns come back as
    they were (the messages' JSON text decoded)."""
    import pyarrow.parquet as pq

    from conftest import FIXTURES
    from test_outputs import FAST
    rows = tool_rows(90)
    write_jsonl(tmp_path / "tools.jsonl", rows)
    (tmp_path / "gsm.jsonl").write_text("".join((FIXTURES / "gsm8k" / "train-300.jsonl").read_text()
                                                .splitlines(keepends=True)[:90]))
    r = _cli("run", "tools.jsonl", "gsm.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shards = [r for f in sorted((tmp_path / "out" / "shards").glob("shard-*.parquet"))
              for r in pq.read_table(f).to_pylist() if r["source"] == "tools"]
    assert shards
    for row in shards:
        own = rows[row["source_row"]]["messages"][0]
        assert row["system"] == (own["content"] if own["role"] == "system" else None)
    assert _cli("export", "out/shards", "--for", "jsonl", "--out", "ex", "-q", cwd=tmp_path).returncode == 0
    exported = [r for r in _records(tmp_path / "ex" / "selected.jsonl") if r["source"] == "tools"]
    # under their own names: the export's `messages` is the input's, not the mixture's normalised one
    assert exported and all(r == {"source": "tools", "source_row": r["source_row"], **rows[r["source_row"]]}
                            for r in exported)


def test_a_sharegpt_system_column_is_the_conversations_system_prompt(tmp_path):
    """LLaMA-Factory's sharegpt keeps the system prompt in a `system` column beside `conversations`: it was not
    read (not in the text embedded and counted, not in the `messages` a trl export writes); a different system
    turn in the conversation as well is one line naming the row rather than one of them dropped."""
    import pyarrow.parquet as pq

    from test_outputs import FAST
    rows = [{"conversations": [{"from": "human", "value": f"Weather in {c}, case {i}?"},
                               {"from": "function_call", "value": json.dumps({"name": "get_weather",
                                                                             "arguments": {"city": c}})},
                               {"from": "observation", "value": json.dumps({"temp": i})},
                               {"from": "gpt", "value": f"It is {i} degrees in {c}."}],
             "system": "Answer in one sentence." if i % 2 else "",
             "tools": json.dumps([_schema("get_weather", {"city": {"type": "string"}})])}
            for i, c in enumerate(CITIES * 8)]
    write_jsonl(tmp_path / "lf.jsonl", rows)
    summary = _inspect(tmp_path / "lf.jsonl")
    assert (summary["fields"]["system"], summary["with_system_prompt"], summary["with_tools"]) == ("system", 32, 64)
    ex = [e for b in open_dataset(str(tmp_path / "lf.jsonl")).iter_batches() for e in b.examples][1]
    assert ex.prompt[0]["content"].startswith("Answer in one sentence.\n\n# Tools")

    assert _cli("run", "lf.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path).returncode == 0
    assert _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path).returncode == 0
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert {bool(rows[row["id"]]["system"]) for row in exported} == {True, False}
    for row in exported:
        turns = row["prompt"] + row["completion"]
        roles = [t["role"] for t in turns]
        if rows[row["id"]]["system"]:
            assert (turns[0]["role"], turns[0]["content"]) == ("system", "Answer in one sentence.")
        assert roles[-4:] == ["user", "assistant", "tool", "assistant"] and len(roles) == 4 + bool(
            rows[row["id"]]["system"])

    rows[3]["conversations"].insert(0, {"from": "system", "value": "Be terse."})
    write_jsonl(tmp_path / "both.jsonl", rows)
    r = _cli("inspect", "both.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "both.jsonl:4: field 'system'" in r.stderr and "opens with a different system turn" in r.stderr


def _present(value):
    """Turns without the keys Parquet gives them as null (a table's struct holds every turn's and call's keys)."""
    if isinstance(value, dict):
        return {k: _present(v) for k, v in value.items() if v is not None}
    return [_present(v) for v in value] if isinstance(value, list) else value


def test_a_mixtures_trainer_export_of_tool_rows_is_a_single_sources(tmp_path):
    """A mixture's shards hold the normalised `messages`, the calls and the tool schemas in them as text: `export
    --for trl` wrote an OpenAI chat's calls and an xLAM answer as the assistant's words, the schemas in the system
    turn (and before that, in a `tools` column as well). Each row is read as its input's record now: its export
    is the one a single source's shards give, calls in `tool_calls`, schemas once, in `tools`."""
    import pyarrow.parquet as pq

    import cluster_curate as cc
    from conftest import FIXTURES
    from shard_helpers import make_selection
    from test_outputs import FAST
    given = {"tools": tool_rows(90), "xlam": xlam_rows(60)}
    for name, rows in given.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
    (tmp_path / "gsm.jsonl").write_text("".join((FIXTURES / "gsm8k" / "train-300.jsonl").read_text()
                                                .splitlines(keepends=True)[:90]))
    r = _cli("run", "tools.jsonl", "xlam.jsonl", "gsm.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path).returncode == 0
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    manifest = json.loads((tmp_path / "out" / "shards" / "manifest.json").read_text())
    first = {i["name"]: i["first_id"] for i in manifest["dataset"]["inputs"]}

    single = {}  # each input alone, every row shard and exported
    for name in given:
        data = str(tmp_path / f"{name}.jsonl")
        make_selection(tmp_path / f"{name}-sel.parquet", data, k=2, fraction=1.0, n_tokens=True)
        cc.shard(str(tmp_path / f"{name}-sel.parquet"), data, str(tmp_path / f"{name}-shards"), num_shards=1,
                 micro_batch_size=1)
        cc.export(str(tmp_path / f"{name}-shards"), trainer="trl", out=str(tmp_path / f"{name}-trl"))
        single[name] = {r["id"]: r for r in pq.read_table(tmp_path / f"{name}-trl" / "train.parquet").to_pylist()}
    compared = {name: 0 for name in given}
    for row in exported:
        name = max((n for n in first if first[n] <= row["id"]), key=first.get)
        if name not in given:
            assert row.get("tools") is None and row["completion"][0]["tool_calls"] is None
            continue
        alone = single[name][row["id"] - first[name]]
        assert _present(row["prompt"]) == _present(alone["prompt"])
        assert _present(row["completion"]) == _present(alone["completion"])
        assert row["tools"] == alone["tools"] and row["tools"].count('"parameters"') >= 1
        assert not any("# Tools" in (t["content"] or "") for t in row["prompt"])  # the schemas once: in `tools`
        compared[name] += 1
    assert all(compared.values()), compared
    calls = [t for row in exported for t in row["prompt"] + row["completion"] if t["tool_calls"]]
    assert calls and all(t["content"] is None for t in calls)


def test_a_mixture_of_a_plain_chat_and_a_tool_chat_keeps_both_inputs_messages(tmp_path):
    """UltraChat-style chats (a typed `messages` column: role and content only) mixed with tool-calling chats
    (`tool_calls` in some turns only: JSON text in the shards) were refused before any work ('column 'messages'
    is string, but input chat has it as list<...>'): a column kept as JSON text by one input is JSON text for
    all, as one input's batches of other keys are. Each row loads as its input held it, and exports as its
    input alone would."""
    import pyarrow.parquet as pq

    from cluster_curate.loader import load_shard
    from conftest import FIXTURES
    from test_outputs import FAST
    chats = [json.loads(line) for line in (FIXTURES / "chat" / "messages-300.jsonl").read_text().splitlines()[:90]]
    tools = tool_rows(90)
    write_jsonl(tmp_path / "chat.jsonl", chats)
    write_jsonl(tmp_path / "tools.jsonl", tools)
    r = _cli("run", "chat.jsonl", "tools.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "shards" / "manifest.json").read_text())
    assert "source_messages" in manifest["json_columns"]
    held = {"chat": chats, "tools": tools}
    seen = set()
    for rank in range(manifest["num_shards"]):
        for row in load_shard(tmp_path / "out" / "shards", rank=rank, world_size=manifest["num_shards"]):
            assert row["source_messages"] == held[row["source"]][row["source_row"]]["messages"]
            seen.add(row["source"])
    assert seen == {"chat", "tools"}
    assert _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path).returncode == 0
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert any(t["tool_calls"] for row in exported for t in row["completion"])


def test_a_mixture_of_xlam_rows_and_openai_rows_with_tool_objects_keeps_each_inputs_tools(tmp_path):
    """xLAM rows (`tools`: the schemas' JSON text, as the Hub keeps them) mixed with OpenAI rows whose `tools` are a
    list of objects (a Parquet struct column) were refused before any work ("column 'tools' is list<...>, but
    input xlam has it as string"). The column is JSON text for both now, each value the JSON of what its input
    held (the xLAM text as a JSON string): the loader and `export --for jsonl` give every row back as its input
    held it, and each trainer export writes every row as its input alone exports it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import cluster_curate as cc
    from cluster_curate.loader import load_shard
    from shard_helpers import make_selection
    from test_outputs import FAST
    write_jsonl(tmp_path / "xlam.jsonl", xlam_rows(60))
    pq.write_table(pa.Table.from_pylist(tool_rows(60)), tmp_path / "tools.parquet")
    held = {"xlam": _records(tmp_path / "xlam.jsonl"), "tools": pq.read_table(tmp_path / "tools.parquet").to_pylist()}
    files = {"xlam": "xlam.jsonl", "tools": "tools.parquet"}
    assert FAST[-2] == "--micro-batch-size"  # 4: xLAM rows are left over too, read back by export --for jsonl
    r = _cli("run", *files.values(), "--out", "out", *FAST[:-1], "4", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    shards = tmp_path / "out" / "shards"
    manifest = json.loads((shards / "manifest.json").read_text())
    assert "tools" in manifest["json_columns"]
    seen = set()
    for rank in range(manifest["num_shards"]):
        for row in load_shard(shards, rank=rank, world_size=manifest["num_shards"]):
            assert row["tools"] == held[row["source"]][row["source_row"]]["tools"]
            seen.add(row["source"])
    assert seen == {"xlam", "tools"} and isinstance(held["xlam"][0]["tools"], str)
    first = {i["name"]: i["first_id"] for i in manifest["dataset"]["inputs"]}
    assert any(i < first["tools"] for i in manifest["leftover_ids"])
    cc.export(str(shards), trainer="jsonl", out=str(tmp_path / "jsonl"))
    selected = _records(tmp_path / "jsonl" / "selected.jsonl")
    assert len(selected) == manifest["selected_rows"]
    assert all(rec["tools"] == held[rec["source"]][rec["source_row"]]["tools"] for rec in selected)

    trainers = ("trl", "axolotl", "llamafactory")
    for trainer in trainers:
        cc.export(str(shards), trainer=trainer, out=str(tmp_path / trainer))
    for name, file in files.items():  # each input alone, every row sharded and exported
        data = str(tmp_path / file)
        make_selection(tmp_path / f"{name}-sel.parquet", data, k=2, fraction=1.0, n_tokens=True)
        cc.shard(str(tmp_path / f"{name}-sel.parquet"), data, str(tmp_path / f"{name}-shards"), num_shards=1,
                 micro_batch_size=1)
    for trainer in trainers:
        mixed = pq.read_table(tmp_path / trainer / "train.parquet").to_pylist()
        compared = {name: 0 for name in files}
        for name in files:
            cc.export(str(tmp_path / f"{name}-shards"), trainer=trainer, out=str(tmp_path / f"{name}-{trainer}"))
            alone = {r["id"]: r for r in pq.read_table(tmp_path / f"{name}-{trainer}" / "train.parquet").to_pylist()}
            for row in mixed:
                if max((n for n in first if first[n] <= row["id"]), key=first.get) != name:
                    continue
                expected = alone[row["id"] - first[name]]
                assert {k: _present(v) for k, v in row.items() if k not in ("id", "weight", "step")} == {
                    k: _present(v) for k, v in expected.items() if k not in ("id", "weight", "step")}, trainer
                compared[name] += 1
        assert all(compared.values()), (trainer, compared)


def test_one_inputs_own_source_row_column_keeps_its_tools_in_a_trainer_export(tmp_path):
    """Whether shards are a mixture's (normalised `messages` holding the schemas in the system turn) was told by
    a `source_row` column: rows re-packaged from another set that keep their own `source_row` lost their `tools`
    column in the trl export. The manifest (its dataset's inputs) now decides."""
    import pyarrow.parquet as pq

    from test_outputs import FAST
    rows = [{**row, "source": "xlam", "source_row": 1000 + i} for i, row in enumerate(tool_rows(90))]
    write_jsonl(tmp_path / "tools.jsonl", rows)
    assert _cli("run", "tools.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path).returncode == 0
    assert _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path).returncode == 0
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert exported and all(json.loads(row["tools"]) == rows[row["id"]]["tools"] for row in exported)
    assert not any("# Tools" in row["prompt"][0]["content"] for row in exported)  # the schemas once, in `tools`


def xlam_rows(n: int) -> list[dict]:
    """Rows as Salesforce/xlam-function-calling-60k has them: `id`, `query`, `answers` (the calls' JSON text: a list
    of {name, arguments}, one call or several) and `tools` (the schemas' JSON text, each parameter a map of
    description, type and default)."""
    rows = []
    for i in range(n):
        city, other, topic = CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)], TOPICS[i // 8 % len(TOPICS)]
        tools = [{"name": f"get_{topic}", "description": f"Fetches the {topic} of a city.",
                  "parameters": {"city": {"description": "The city's name.", "type": "str", "default": "Paris"}}},
                 {"name": "convert_units", "description": "Converts a value to other units.",
                  "parameters": {"value": {"description": "The value.", "type": "float", "default": ""},
                                 "unit": {"description": "The unit, e.g. 'si'.", "type": "str, optional",
                                          "default": "si"}}}]
        calls = [{"name": f"get_{topic}", "arguments": {"city": city}}]
        if i % 2:
            calls.append({"name": f"get_{topic}", "arguments": {"city": other}})
        asked = f"{city} and {other}" if i % 2 else city
        rows.append({"id": i, "query": f"What is the {topic} in {asked}? I need it for case {i}.",
                     "answers": json.dumps(calls), "tools": json.dumps(tools)})
    return rows


def test_xlam_rows_are_read_as_a_question_and_its_calls(tmp_path):
    """xLAM / APIGen rows (`query`, `answers`: the calls as JSON text, `tools`) were no detected format, and read
    with --prompt-field query --response-field answers their answer was the JSON text as written. They are
    detected now, the flags read them the same way, and the answer is the calls as text, as an OpenAI chat's
    calls read; a bad call is one line naming file, line and field."""
    rows = xlam_rows(8)
    write_jsonl(tmp_path / "xlam.jsonl", rows)
    for flags in ([], ["--prompt-field", "query", "--response-field", "answers"]):
        summary = _inspect(tmp_path / "xlam.jsonl", *flags)
        assert (summary["format"], summary["examples"], summary["rejected"], summary["with_tools"]) == ("xlam", 8, 0, 8)
        assert summary["fields"] == {"prompt": "query", "response": "answers", "tools": "tools"}
    examples = [e for b in open_dataset(str(tmp_path / "xlam.jsonl")).iter_batches() for e in b.examples]
    assert [t["role"] for t in examples[1].prompt] == ["system", "user"]
    assert examples[1].prompt[1]["content"] == rows[1]["query"]
    assert examples[1].prompt[0]["content"].startswith('# Tools\n\n{"name": "get_weather", "description"')
    assert examples[1].response == ('{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
                                    '{"name": "get_weather", "arguments": {"city": "Quito"}}')
    # the same calls in an OpenAI chat are the same text: features and token counts agree
    chat = [{"messages": [{"role": "user", "content": rows[1]["query"]},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"type": "function",
                               "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                              for c in json.loads(rows[1]["answers"])]}],
             "tools": json.loads(rows[1]["tools"])}]
    (same,) = [e for b in open_dataset(str(write_jsonl(tmp_path / "chat.jsonl", chat))).iter_batches()
               for e in b.examples]
    assert (same.prompt, same.response) == (examples[1].prompt, examples[1].response)

    cases = {"no-name": ('[{"arguments": {"city": "Oslo"}}]', "field 'answers[0]': no name"),
             "not-json": ('[{"name": "get_weather", ', "field 'answers': tool calls are text that is not valid JSON"),
             "an-object": ('{"name": "get_weather"}', "field 'answers': tool calls are an object, expected a list"),
             "no-call": ("[]", "field 'answers': an empty list of tool calls (an xLAM irrelevance row")}
    for name, (answers, expected) in cases.items():
        path = write_jsonl(tmp_path / f"{name}.jsonl", [rows[0], dict(rows[1], answers=answers), rows[2]])
        r = _cli("embed", str(path), "--out", str(tmp_path / f"{name}.parquet"), "--features", "text")
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert f"{path}:2: {expected}" in r.stderr.strip().splitlines()[-1], r.stderr


def xlam_irrelevance_rows(n: int) -> list[dict]:
    """Rows as MadeAgents/xlam-irrelevance-7.5k has them (one JSON array, `xlam-7.5k-irrelevancek.json`): xLAM's
    rows whose right tool was taken out of `tools`, relabelled `answers: "[]"` (no tool fits: call none)."""
    rows = xlam_rows(n)
    for r in rows:
        r["tools"] = json.dumps([t for t in json.loads(r["tools"]) if not t["name"].startswith("get_")])
        r["answers"] = "[]"
    return rows


def test_xlam_irrelevance_rows_are_refused_in_one_line_saying_why_and_how(tmp_path):
    """An xLAM irrelevance row (`answers: "[]"`) teaches "call no tool", which an OpenAI chat writes as a text
    reply: an assistant turn with no call and no text has no faithful form (the chat templates that trainers apply
    render it as an empty answer, or raise), so a trainer would learn to say nothing. Such a row is refused in one
    line naming the file, row and field, saying so and how to fix it, before any work (not a generic empty
    response); --on-bad-row skip leaves them out and counts them. The same question with a text answer is read."""
    path = tmp_path / "xlam-7.5k-irrelevancek.json"
    path.write_text(json.dumps([*xlam_rows(6), *xlam_irrelevance_rows(4)], indent=4))
    r = _cli("embed", str(path), "--out", str(tmp_path / "e.parquet"), "--features", "text", "--dim", "4")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    first = 1 + 6 * 6 + 1  # the line that opens row 6 (each row's object is 6 lines)
    assert line.startswith(f"ERROR: {path}:{first}: field 'answers': an empty list of tool calls (an xLAM "
                           "irrelevance row: no tool fits the query) has no chat form"), line
    assert "give such rows a text answer that says no tool fits" in line and "(id 6;" in line, line
    assert not (tmp_path / "e.parquet").exists()
    summary = _inspect(path, "--on-bad-row", "skip")
    assert (summary["format"], summary["examples"], summary["bad_rows"]) == ("xlam", 6, 4)
    # the fix the message gives: the question, its tools and a text answer, as an OpenAI chat writes it
    fixed = [{"messages": [{"role": "user", "content": r["query"]},
                           {"role": "assistant", "content": "None of the tools I have can look that up."}],
              "tools": json.loads(r["tools"])} for r in xlam_irrelevance_rows(4)]
    summary = _inspect(write_jsonl(tmp_path / "fixed.jsonl", fixed))
    assert (summary["format"], summary["examples"], summary["bad_rows"], summary["with_tools"]) == \
        ("messages", 4, 0, 4)


@pytest.mark.slow
def test_calls_kept_as_parquet_structs_keep_their_own_arguments(tmp_path):
    """xLAM rows whose answers were decoded before saving (a list of {name, arguments} objects, as
    `datasets.Dataset.from_list(...).to_parquet` keeps them) are Arrow structs: one type holds every call's
    argument names, and a call lacking one reads it as null. The calls were learnt (and exported) with every other
    call's arguments as nulls ({"city": "Oslo", "value": null, "unit": null}); a null there is a key the call
    never had."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import cluster_curate as cc
    from test_outputs import FAST
    rows = xlam_rows(40)
    for i, r in enumerate(rows):
        calls = json.loads(r["answers"])
        if i % 4 == 0:  # other calls with other (nested) arguments, as xLAM's tools differ from row to row
            calls = [{"name": "convert_units", "arguments": {"value": 3.5 + i, "unit": {"from": "km", "to": "mi"}}}]
        r["answers"] = calls
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "xlam.parquet")
    answers = pq.read_schema(tmp_path / "xlam.parquet").field("answers").type
    assert set(answers.value_type.field("arguments").type.names) == {"city", "value", "unit"}  # merged by Arrow
    r = _cli("run", "xlam.parquet", "--out", "out", *FAST, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cc.export(str(tmp_path / "out" / "shards"), trainer="trl", out=str(tmp_path / "trl"))
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert exported
    for row in exported:
        calls = [c["function"] for c in row["completion"][0]["tool_calls"]]
        given = rows[row["id"]]["answers"]
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [(c["name"], c["arguments"]) for c in given]


def test_tool_schemas_kept_as_parquet_structs_keep_their_own_parameters(tmp_path):
    """OpenAI-style rows whose `tools` are a list of objects in Parquet share one struct type: every tool's
    parameters held every other tool's properties as nulls ("city": null in a unit converter's schema), which
    the system turn and each trainer's `tools` column rendered. A schema given as objects loses its null keys."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import cluster_curate as cc
    from test_outputs import FAST
    rows = tool_rows(60)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "tools.parquet")
    r = _cli("run", "tools.parquet", "--out", "out", *FAST, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cc.export(str(tmp_path / "out" / "shards"), trainer="trl", out=str(tmp_path / "trl"))
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert exported and all(json.loads(row["tools"]) == rows[row["id"]]["tools"] for row in exported)
    assert _inspect(tmp_path / "tools.parquet")["lengths"] == _inspect(write_jsonl(tmp_path / "t.jsonl", rows))["lengths"]


def test_trl_sft_trainer_trains_on_exported_xlam_calls(tmp_path):
    """`run` then `export --for trl` of xLAM rows: the answer was written as the assistant's text (the JSON of
    the calls); it is the assistant turn's `tool_calls` now, the schemas a `tools` column, and TRL's SFTTrainer
    renders them through the chat template and learns the calls."""
    rows = xlam_rows(90)
    model_dir, tok, ds, by_id = _run_export_trl_with_a_tool_model(tmp_path, "xlam.jsonl", rows)
    two = next(i for i in by_id if i % 2)  # an answer of two calls
    for i, row in by_id.items():
        assert row["prompt"] == [{"role": "user", "content": rows[i]["query"], "tool_calls": None}]
        (answer,) = row["completion"]
        assert answer["content"] is None
        assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in answer["tool_calls"]] == [("function", c["name"], c["arguments"])
                                                   for c in json.loads(rows[i]["answers"])]
        assert json.loads(row["tools"]) == json.loads(rows[i]["tools"])

    trainer = _sft_trainer(tmp_path, model_dir, tok, ds)
    ex = next(trainer.train_dataset[k] for k in range(len(ds)) if ds[k]["id"] == two)
    learnt = tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label != -100])
    context = tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label == -100])
    first, second = json.loads(rows[two]["answers"])
    assert learnt.startswith(f'<tool_call>{{"name": "{first["name"]}", "arguments": {json.dumps(first["arguments"])}}}'
                             f'</tool_call>\n<tool_call>{{"name": "{second["name"]}"')
    assert "# Tools\n" in context and '"convert_units"' in context and rows[two]["query"] in context
    out = trainer.train()
    assert out.global_step == 2 and out.training_loss > 0


def test_llamafactory_and_axolotl_exports_of_xlam_rows(tmp_path):
    """LLaMA-Factory gets a `function_call` turn holding the calls (a list for several), axolotl `tool_calls`:
    both wrote the answer's JSON text as an assistant turn."""
    import pyarrow.parquet as pq

    import cluster_curate as cc
    from shard_helpers import make_selection
    rows = xlam_rows(24)
    data = write_jsonl(tmp_path / "xlam.jsonl", rows)
    make_selection(tmp_path / "sel.parquet", data, k=2, fraction=1.0, n_tokens=True)
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=2)
    for trainer in ("llamafactory", "axolotl"):
        cc.export(str(tmp_path / "shards"), trainer=trainer, out=str(tmp_path / trainer))
    lf = pq.read_table(tmp_path / "llamafactory" / "train.parquet").to_pylist()
    ax = pq.read_table(tmp_path / "axolotl" / "train.parquet").to_pylist()
    assert len(lf) == len(ax) == 24
    for row in lf:
        calls = json.loads(rows[row["id"]]["answers"])
        assert row["messages"] == [{"role": "user", "content": rows[row["id"]]["query"]},
                                   {"role": "function_call", "content": json.dumps(calls[0] if len(calls) == 1
                                                                                   else calls)}]
        assert json.loads(row["tools"]) == json.loads(rows[row["id"]]["tools"])
    info = json.loads((tmp_path / "llamafactory" / "dataset_info.json").read_text())["cluster_curate"]
    assert info["tags"]["function_tag"] == "function_call" and info["columns"]["tools"] == "tools"
    for row in ax:
        answer = row["messages"][-1]
        assert (answer["role"], answer["content"]) == ("assistant", None)
        assert [c["function"]["name"] for c in answer["tool_calls"]] == [
            c["name"] for c in json.loads(rows[row["id"]]["answers"])]
        assert json.loads(row["tools"]) == json.loads(rows[row["id"]]["tools"])


def test_an_evaluation_chat_awaiting_the_answer_to_a_tools_result_is_all_question(tmp_path):
    """A --decontaminate set of tool-calling chats that end with the tool's result (awaiting the assistant's
    answer) was read as its turns before the call: the user's turn alone, which no training row whose prompt goes
    on to the call and its result asks, so none of its copies in the pool were found."""
    rows = tool_rows(30)
    write_jsonl(tmp_path / "tools.jsonl", rows)
    asked = [i for i in range(30) if i % 3 == 0]  # the rows with a call, its result and an answer
    evals = [{"messages": [t for t in rows[i]["messages"][:-1] if t["role"] != "system"]} for i in asked]
    write_jsonl(tmp_path / "eval.jsonl", evals)
    (record,) = _inspect(tmp_path / "tools.jsonl", "--decontaminate", str(tmp_path / "eval.jsonl"))["decontamination"]
    assert (record["questions"], record["questions_in_pool"], record["ids"]) == (10, 10, asked)


def test_decontamination_ngrams_read_the_users_turns_alone(tmp_path):
    """--decontaminate-ngrams reads the user's turns (README, decontamination.py), but read every turn but the
    system's: a tool's result (or a call) that shared a run of words with an evaluation question left out a row
    that does not ask it."""
    passage = "the quick brown fox jumps over the lazy dog near the old river bank at dawn"
    rows = tool_rows(30)
    rows[0]["messages"][3]["content"] = json.dumps({"snippet": passage})        # a tool's result quotes it
    rows[2]["messages"][2]["content"] = f"Tell me: {passage}, case 2."          # a user asks it
    write_jsonl(tmp_path / "tools.jsonl", rows)
    write_jsonl(tmp_path / "eval.jsonl", [{"prompt": f"Summarise: {passage}."}])
    (record,) = _inspect(tmp_path / "tools.jsonl", "--decontaminate", str(tmp_path / "eval.jsonl"),
                         "--decontaminate-ngrams", "8")["decontamination"]
    assert (record["copies"], record["ngram_rows"], record["ids"]) == (0, 1, [2])


def test_a_question_answered_through_a_tool_call_is_asked_by_its_row(tmp_path):
    """A row's prompt that holds the user's question, the assistant's call and the tool's result asks that question
    (its prompt key covers the call too): inspect --decontaminate, as select's, finds it by its user turn, as it
    does a row that asks it alone and a chat that asks it in a later turn."""
    rows = tool_rows(6)
    questions = [[t["content"] for t in r["messages"] if t["role"] == "user"][-1] for r in rows[:3]]
    data = write_jsonl(tmp_path / "tools.jsonl", rows)
    evals = write_jsonl(tmp_path / "eval.jsonl", [{"question": q} for q in questions])
    (asked,) = _inspect(data, "--decontaminate", str(evals))["decontamination"]
    assert (asked["rows"], sorted(asked["ids"]), asked["questions_in_pool"]) == (3, [0, 1, 2], 3)


# BFCL's rows as its files hold them (JSON lines in files named .json): `question`, one list of {role, content}
# turns per turn of the test (a multi-turn test's turn that adds a function holds none); `function`, the schemas
BFCL_SIMPLE = [
    {"id": "simple_0", "question": [[{"role": "user", "content": "Find the area of a triangle with a base of 10 units "
                                                                 "and height of 5 units."}]],
     "function": [{"name": "calculate_triangle_area", "description": "Calculate the area of a triangle given its base "
                                                                     "and height.",
                   "parameters": {"type": "dict", "properties": {
                       "base": {"type": "integer", "description": "The base of the triangle."},
                       "height": {"type": "integer", "description": "The height of the triangle."}},
                       "required": ["base", "height"]}}]},
    {"id": "live_simple_1-1-0", "question": [[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Quito, case 4? Please check Paris."}]],
     "function": [_schema("get_weather", {"city": {"type": "string"}})["function"]]}]
BFCL_MULTI = [
    {"id": "multi_turn_miss_func_0",
     "question": [[{"role": "user", "content": "Move 'final_report.pdf' within the document directory to 'temp', "
                                               "creating it if needed."}],
                  [],
                  [{"role": "user", "content": "What is the weather in Perth, case 7? Please check Paris and Oslo "
                                               "and Lima and Rome."}]],
     "initial_config": {"GorillaFileSystem": {"root": {"alex": {"type": "directory", "contents": {}}}}},
     "path": ["GorillaFileSystem.mv"], "involved_classes": ["GorillaFileSystem"], "missed_function": {"1": ["cp"]}}]


def _bfcl_pool() -> list[dict]:
    """30 tool rows (tool_rows), of which row 1 asks simple_0, row 4 live_simple's user turn and row 7 the
    multi-turn test's last turn."""
    rows = tool_rows(30)
    rows[1]["messages"][0]["content"] = BFCL_SIMPLE[0]["question"][0][0]["content"]
    return rows


def test_a_bfcl_evaluation_set_is_read_for_its_users_questions(tmp_path):
    """BFCL's files (BFCL_SIMPLE, BFCL_MULTI) were refused by --decontaminate ('prompt is a list holding a list').
    Each user turn is a question of its own now, a system turn beside it none."""
    write_jsonl(tmp_path / "tools.jsonl", _bfcl_pool())
    write_jsonl(tmp_path / "simple.jsonl", BFCL_SIMPLE)
    write_jsonl(tmp_path / "multi.jsonl", BFCL_MULTI)
    summary = _inspect(tmp_path / "tools.jsonl", "--decontaminate", str(tmp_path / "simple.jsonl"),
                       "--decontaminate", str(tmp_path / "multi.jsonl"))
    by_set = {r["path"].rsplit("/", 1)[-1]: r for r in summary["decontamination"]}
    # row 4 asks live_simple's user turn (its system prompt aside), row 7 the multi-turn test's last turn alone
    assert (by_set["simple.jsonl"]["questions"], by_set["simple.jsonl"]["ids"]) == (2, [1, 4])
    assert (by_set["multi.jsonl"]["questions"], by_set["multi.jsonl"]["ids"]) == (2, [7])

    bad = dict(BFCL_MULTI[0], question=[[{"role": "user", "content": "Move it."}], [{"content": "No role."}]])
    write_jsonl(tmp_path / "bad.jsonl", [BFCL_MULTI[0], bad])
    r = _cli("inspect", "tools.jsonl", "--decontaminate", "bad.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "bad.jsonl:2: field 'question[1][0].role': turn has no role" in r.stderr, r.stderr


def test_a_bfcl_data_directory_is_one_evaluation_set(tmp_path):
    """BFCL ships a directory of files named .json that hold JSON lines, its answers in a folder beside them
    (`possible_answer/`, {id, ground_truth}): --decontaminate DIR was refused ('holds no .parquet files'). Every
    file directly in it is read now (its folders are not), select leaves out the rows that ask any of their
    questions, a bad row names its file and line, and a directory with no such files is refused saying what it
    holds."""
    import pyarrow.parquet as pq
    write_jsonl(tmp_path / "tools.jsonl", _bfcl_pool())
    bfcl = tmp_path / "bfcl_eval" / "data"
    (bfcl / "possible_answer").mkdir(parents=True)
    write_jsonl(bfcl / "BFCL_v3_simple.json", BFCL_SIMPLE)
    write_jsonl(bfcl / "BFCL_v3_multi_turn_miss_func.json", BFCL_MULTI)
    write_jsonl(bfcl / "possible_answer" / "BFCL_v3_simple.json",
                [{"id": "simple_0", "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5]}}]}])
    (asked,) = _inspect(tmp_path / "tools.jsonl", "--decontaminate", str(bfcl))["decontamination"]
    assert (asked["questions"], asked["ids"]) == (4, [1, 4, 7])
    emb, clusters, selected = (tmp_path / name for name in ("e.parquet", "c.parquet", "s.parquet"))
    for argv in (["embed", "tools.jsonl", "--out", emb, "--dim", "8"], ["cluster", emb, "--out", clusters, "--k", "2"],
                 ["select", clusters, "--fraction", "1", "--decontaminate", bfcl, "--out", selected]):
        r = _cli(*map(str, argv), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    kept = pq.read_table(selected, columns=["id"]).column("id").to_pylist()
    assert sorted(kept) == sorted(set(range(30)) - {1, 4, 7})

    bad = dict(BFCL_MULTI[0], question=[[{"role": "user", "content": "Move it."}], [{"content": "No role."}]])
    write_jsonl(bfcl / "BFCL_v3_multi_turn_miss_func.json", [BFCL_MULTI[0], bad])
    r = _cli("inspect", "tools.jsonl", "--decontaminate", str(bfcl), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{bfcl / 'BFCL_v3_multi_turn_miss_func.json'}:2: field 'question[1][0].role': turn has no role" \
        in r.stderr, r.stderr
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("BFCL\n")
    (tmp_path / "docs" / "scores.csv").write_text("model,score\n")
    r = _cli("inspect", "tools.jsonl", "--decontaminate", "docs", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "--decontaminate docs: directory holds no .parquet, .jsonl or .json files, which a directory is read for " \
        "(1 .csv, 1 .md); give its CSV/TSV file: docs/scores.csv" in r.stderr, r.stderr


def _call(name: str, city: str, call_id: str | None = None) -> dict:
    return {**({"id": call_id} if call_id else {}), "type": "function",
            "function": {"name": name, "arguments": json.dumps({"city": city})}}


def tool_pairs(shape: str, n: int = 4) -> list[dict]:
    """DPO pairs with tool calling, as OpenAI conversations: `implicit`, chosen and rejected sharing [user, a call,
    its result] and answering it differently; `calls`, answers that are each a call; `explicit`, a `prompt` column
    of turns holding the call and its result, beside one-turn answers."""
    rows = []
    for i in range(n):
        city = CITIES[i % len(CITIES)]
        asked = [{"role": "user", "content": f"Is it warm in {city}, case {i}?"},
                 {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", city, f"call_{i}")]},
                 {"role": "tool", "tool_call_id": f"call_{i}", "name": "get_weather", "content": f'{{"c": {i}}}'}]
        good = {"role": "assistant", "content": f"Yes, {i} degrees in {city}."}
        bad = {"role": "assistant", "content": "I cannot tell."}
        if shape == "calls":
            asked = asked[:1]
            good = {"role": "assistant", "content": None, "tool_calls": [_call("get_weather", city)]}
            bad = {"role": "assistant", "content": None, "tool_calls": [_call("get_time", city)]}
        tools = [_schema(name, {"city": {"type": "string"}}) for name in ("get_weather", "get_time")]
        rows.append({"prompt": asked, "chosen": [good], "rejected": [bad], "tools": tools} if shape == "explicit"
                    else {"chosen": asked + [good], "rejected": asked + [bad], "tools": tools})
    return rows


@pytest.mark.parametrize("shape", ["implicit", "calls", "explicit"])
def test_dpo_exports_keep_a_pairs_tool_calls_structured(shape):
    """A DPO pair's calls and tool results reach the trl and llamafactory exports as the SFT exports write them:
    `tool_calls` and a tool turn's `tool_call_id` / `name` (trl), function_call / observation turns (llamafactory,
    whose ranking answers may be function_call turns); they were the calls' JSON as the assistant's text, the tool
    turn without its id. TRL's chat templating renders the call in the prompt (or as the answer) as the template
    renders calls."""
    from trl import maybe_apply_chat_template

    from cluster_curate.errors import CurateError
    from cluster_curate.layouts import chat_columns, uses_tools
    from tiny_lm import build_tokenizer
    rows = tool_pairs(shape)
    table = pa.Table.from_pylist([{**r, "id": i, "step": i, "weight": 1.0} for i, r in enumerate(rows)])
    asked = rows[0]["prompt"] if shape == "explicit" else rows[0]["chosen"][:-1]
    good, bad = rows[0]["chosen"][-1], rows[0]["rejected"][-1]

    trl = chat_columns(table, "prompt-completion").to_pylist()[0]
    present = [{k: v for k, v in t.items() if v is not None} for t in trl["prompt"] + trl["chosen"] + trl["rejected"]]
    assert present == [{k: v for k, v in t.items() if v is not None} for t in asked + [good, bad]]

    lf = chat_columns(table, "messages", trainer="llamafactory").to_pylist()[0]
    as_lf = [{"role": "function_call", "content": json.dumps({"name": t["tool_calls"][0]["function"]["name"],
                                                              "arguments": {"city": CITIES[0]}})}
             if t.get("tool_calls") else {"role": "observation" if t["role"] == "tool" else t["role"],
                                          "content": t["content"]} for t in asked + [good, bad]]
    assert lf["messages"] + [lf["chosen"], lf["rejected"]] == as_lf
    # its function_call tag in dataset_info.json, without which LLaMA-Factory skips the row, schemas or none
    assert uses_tools(chat_columns(table.drop_columns(["tools"]), "messages", trainer="llamafactory"))
    # torchtune's preference_dataset cannot hold them: refused, naming the DPO layouts that keep them
    with pytest.raises(CurateError, match=r"row 0 \(id 0\): holds tool calls .* --for trl or llamafactory keeps"):
        chat_columns(table.drop_columns(["tools"]), "messages", trainer="torchtune")
    # nor axolotl's DPO chat_template strategy, which keeps each turn's role and content alone: refused, schemas or
    # none, never exported without the calls
    for pairs in (table, table.drop_columns(["tools"])):
        with pytest.raises(CurateError, match=r"row 0 \(id 0\): holds tool calls or tool turns, which axolotl's DPO "
                                              r"chat_template .* --for trl or llamafactory keeps them"):
            chat_columns(pairs, "messages", trainer="axolotl")

    tok = build_tokenizer(True)
    tok.chat_template = TOOLS_TEMPLATE
    rendered = maybe_apply_chat_template({k: trl[k] for k in ("prompt", "chosen", "rejected")}, tok,
                                         tools=json.loads(trl["tools"]))
    call = f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{CITIES[0]}"}}}}</tool_call>'
    assert call in (rendered["chosen"] if shape == "calls" else rendered["prompt"])
    if shape == "calls":
        assert '<tool_call>{"name": "get_time"' in rendered["rejected"]
    else:
        assert '<|im_start|>tool\n{"c": 0}' in rendered["prompt"]


def test_export_axolotl_refuses_pairs_with_tool_calls_in_one_line(tmp_path):
    """axolotl's DPO chat_template strategy reads each turn's role and content alone (no calls, no tool ids, no
    schemas for the template): `export --for axolotl` of tool-calling pairs stops in one line naming the row and
    the layouts that keep them, and writes nothing."""
    from test_outputs import FAST
    write_jsonl(tmp_path / "pairs.jsonl", tool_pairs("implicit", 24))
    assert _cli("run", "pairs.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path).returncode == 0
    r = _cli("export", "out/shards", "--for", "axolotl", "--out", "ax", cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("ERROR: out/shards: row 0 (id ") and "axolotl's DPO chat_template strategy" in lines[0]
    assert "export --for trl or llamafactory keeps them" in lines[0]
    assert not (tmp_path / "ax").exists()


@pytest.mark.slow
def test_trl_dpo_trainer_trains_on_an_exported_pairs_tool_calls(tmp_path):
    """TRL's DPOTrainer on the trl export of tool-calling pairs (`run`, `export --for trl`): its tokenized prompt
    holds the call and the tool's result as the template renders them, the answers that are calls too, and it
    trains (DPO's loss at step 0 is log 2)."""
    import math

    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer
    rows = tool_pairs("implicit", 24) + tool_pairs("calls", 24)[12:]
    model_dir, tok, ds, by_id = _run_export_trl_with_a_tool_model(tmp_path, "pairs.jsonl", rows)
    args = DPOConfig(output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, max_steps=1, report_to="none",
                     save_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, max_length=None)
    trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=ds,
                         processing_class=tok)
    tokenized = {ex["id"]: ex for ex in trainer.train_dataset}
    assert min(tokenized) < 24 <= max(tokenized)  # pairs of both shapes selected
    for i, ex in tokenized.items():
        city = CITIES[(i if i < 24 else i - 12) % len(CITIES)]  # rows[24:] are the call pairs 12 on
        call = f'<tool_call>{{"name": "get_weather", "arguments": {{"city": "{city}"}}}}</tool_call>'
        if i < 24:  # the call and its result in the prompt
            assert f"{call}<|im_end|>\n<|im_start|>tool\n" in tok.decode(ex["prompt_ids"])
        else:  # the calls as the answers
            assert tok.decode(ex["chosen_ids"]).startswith(call)
            assert tok.decode(ex["rejected_ids"]).startswith('<tool_call>{"name": "get_time"')
    out = trainer.train()
    assert out.global_step == 1 and out.training_loss == pytest.approx(math.log(2), rel=1e-4)


GLAIVE_SYSTEM = "You are a helpful assistant with access to the following functions. Use them if required -"


def _glaive_schema(name: str, params: list[str]) -> dict:
    return {"name": name, "description": f"Get the {name.split('_', 1)[1].replace('_', ' ')}",
            "parameters": {"type": "object", "properties": {p: {"type": "string", "description": f"The {p}"}
                                                            for p in params}, "required": params}}


def glaive_rows(n: int) -> tuple[list[dict], list[dict]]:
    """Rows as glaiveai/glaive-function-calling-v2 has them (`system`: "SYSTEM: ..." then the schemas pretty-printed
    one after another; `chat`: a USER: / ASSISTANT: / FUNCTION RESPONSE: transcript, turns three newlines apart,
    assistant turns ended by <|endoftext|>, a call's arguments JSON text in single quotes), in three shapes: a call,
    its result and the answer; two schemas, a refusal, then a call as the answer; no functions, a plain chat. And
    the same conversations as OpenAI-messages rows."""
    glaive, openai = [], []
    for i in range(n):
        currency = ["USD", "GBP", "JPY", "CHF"][i % 4]
        if i % 3 == 0:
            tools = [_glaive_schema("get_exchange_rate", ["base_currency", "target_currency"])]
            args, rate = json.dumps({"base_currency": currency, "target_currency": "EUR"}), round(0.5 + i / 100, 2)
            question = f"Hi, I need to know the exchange rate from {currency} to EUR for invoice {i}."
            answer = f"The current exchange rate from {currency} to EUR is {rate}."
            chat = (f"USER: {question}\n\n\nASSISTANT: <functioncall> {{\"name\": \"get_exchange_rate\", "
                    f"\"arguments\": '{args}'}} <|endoftext|>\n\n\nFUNCTION RESPONSE: {{\"exchange_rate\": {rate}}}"
                    f"\n\n\nASSISTANT: {answer} <|endoftext|>\n\n\n")
            turns = [{"role": "user", "content": question},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"type": "function", "function": {"name": "get_exchange_rate", "arguments": args}}]},
                     {"role": "tool", "content": json.dumps({"exchange_rate": rate})},
                     {"role": "assistant", "content": answer}]
        elif i % 3 == 1:
            tools = [_glaive_schema("get_news", ["category"]), _glaive_schema("calculate_tip", ["bill", "percent"])]
            args = json.dumps({"bill": str(40 + i), "percent": "15"})
            asked, refused = f"Can you order a pizza for table {i}?", "I'm sorry, I can't order food for you."
            question = f"Then what is the tip on a bill of {40 + i} dollars at 15%?"
            chat = (f"USER: {asked}\n\n\nASSISTANT: {refused} <|endoftext|>\n\n\nUSER: {question}\n\n\nASSISTANT: "
                    f"<functioncall> {{\"name\": \"calculate_tip\", \"arguments\": '{args}'}} <|endoftext|>\n\n\n")
            turns = [{"role": "user", "content": asked}, {"role": "assistant", "content": refused},
                     {"role": "user", "content": question},
                     {"role": "assistant", "content": None, "tool_calls": [
                         {"type": "function", "function": {"name": "calculate_tip", "arguments": args}}]}]
        else:
            tools = None
            question, answer = f"What is a good name for puppy number {i}?", f"How about Biscuit the {i}th?"
            chat = f"USER: {question}\n\n\nASSISTANT: {answer} <|endoftext|>\n\n\n"
            turns = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        system = (f"SYSTEM: {GLAIVE_SYSTEM}\n" + "\n\n".join(json.dumps(t, indent=4) for t in tools) + "\n" if tools
                  else "SYSTEM: You are a helpful assistant, with no access to external functions.\n")
        own = GLAIVE_SYSTEM if tools else "You are a helpful assistant, with no access to external functions."
        glaive.append({"system": system, "chat": chat})
        openai.append({"messages": [{"role": "system", "content": own}, *turns], **({"tools": tools} if tools else {})})
    return glaive, openai


def test_glaive_rows_are_read_and_exported_as_the_openai_chat_they_transcribe(tmp_path):
    """glaive-function-calling-v2's rows (`system`, `chat`: text transcripts) were an unrecognised record format.
    They are detected as `glaive` and read as the OpenAI chat they transcribe: the same examples, and `run` then
    `export --for trl / axolotl / llamafactory` write the same files (calls structured, the schemas a tools
    column) as for that chat given as OpenAI messages; torchtune refuses both alike."""
    import pyarrow.parquet as pq

    from test_outputs import FAST
    glaive, openai = glaive_rows(60)
    write_jsonl(tmp_path / "glaive.jsonl", glaive)
    write_jsonl(tmp_path / "openai.jsonl", openai)
    summary = _inspect(tmp_path / "glaive.jsonl")
    assert (summary["format"], summary["examples"], summary["rejected"], summary["with_tools"]) == ("glaive", 60, 0, 40)
    assert summary["fields"] == {"prompt": "chat", "response": "chat (last assistant turn)", "system": "system"}
    read = [[(e.prompt, e.response) for b in open_dataset(str(tmp_path / name)).iter_batches() for e in b.examples]
            for name in ("glaive.jsonl", "openai.jsonl")]
    assert read[0] == read[1]
    assert read[0][1][1] == '{"name": "calculate_tip", "arguments": {"bill": "41", "percent": "15"}}'
    for name in ("glaive", "openai"):
        r = _cli("run", f"{name}.jsonl", "--out", f"{name}-out", *FAST, "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        for trainer in ("trl", "axolotl", "llamafactory"):
            r = _cli("export", f"{name}-out/shards", "--for", trainer, "--out", f"{name}-{trainer}", "-q", cwd=tmp_path)
            assert r.returncode == 0, r.stderr
    for trainer in ("trl", "axolotl", "llamafactory"):
        exported = [pq.read_table(tmp_path / f"{name}-{trainer}" / "train.parquet") for name in ("glaive", "openai")]
        assert exported[0].num_rows and exported[0].to_pylist() == exported[1].to_pylist(), trainer
    trl = pq.read_table(tmp_path / "glaive-trl" / "train.parquet").to_pylist()
    call = next(row for row in trl if row["id"] % 3 == 1)["completion"][0]
    assert (call["content"], call["tool_calls"][0]["function"]["name"]) == (None, "calculate_tip")
    assert json.loads(next(row for row in trl if row["id"] % 3 == 1)["tools"])[1]["name"] == "calculate_tip"
    refusals = [_cli("export", f"{name}-out/shards", "--for", "torchtune", "--out", "tt", cwd=tmp_path)
                for name in ("glaive", "openai")]
    assert [r.returncode for r in refusals] == [2, 2]
    said = [r.stderr.strip().splitlines()[-1] for r in refusals]
    assert said[0].replace("glaive-out", "openai-out") == said[1] and "holds tool calls" in said[0]


def test_bad_glaive_rows_are_one_line_naming_file_line_and_field(tmp_path):
    glaive, _ = glaive_rows(3)
    chat = glaive[0]["chat"]
    cases = {
        "call-not-json": (dict(glaive[0], chat=chat.replace("'}", "'")),
                          "field 'chat[1]': a <functioncall> that is not {\"name\": ..., \"arguments\": ...}"),
        "arguments-not-json": (dict(glaive[0], chat=chat.replace('"EUR"}', '"EUR"')),
                               "field 'chat[1]': the <functioncall>'s arguments are not valid JSON"),
        "no-name": (dict(glaive[0], chat=chat.replace('"name": "get_exchange_rate", ', "")),
                    "field 'chat[1]': a <functioncall> that is not"),
        "no-speaker": (dict(glaive[0], chat="Hello there.\n\n\n" + chat),
                       "field 'chat': text before the first turn: a transcript opens with USER:"),
        "no-answer": (dict(glaive[0], chat=chat.split("\n\n\nASSISTANT:")[0]),
                      "field 'chat': missing response: no assistant turn in the conversation"),
        "bad-schema": (dict(glaive[0], system=glaive[0]["system"].replace('"name":', '"name"', 1)),
                       "field 'system': tool schema 1 is not valid JSON"),
    }
    for name, (bad, expected) in cases.items():
        path = write_jsonl(tmp_path / f"{name}.jsonl", [glaive[1], bad, glaive[2]])
        r = _cli("embed", str(path), "--out", str(tmp_path / f"{name}.parquet"), "--features", "text")
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert f"{path}:2: {expected}" in r.stderr.strip().splitlines()[-1], (name, r.stderr)
        assert not (tmp_path / f"{name}.parquet").exists()


@pytest.mark.slow
def test_trl_sft_trainer_trains_on_exported_glaive_calls(tmp_path):
    """`run` then `export --for trl` of glaive rows: TRL's SFTTrainer renders the transcript's calls through the
    chat template as structured calls (not "<functioncall>" text) and the schemas from the tools column, learns
    a call where it is the answer, and trains."""
    glaive, openai = glaive_rows(90)
    model_dir, tok, ds, by_id = _run_export_trl_with_a_tool_model(tmp_path, "glaive.jsonl", glaive)
    trainer = _sft_trainer(tmp_path, model_dir, tok, ds)
    call_row = next(k for k in range(len(ds)) if ds[k]["id"] % 3 == 1)
    ex = trainer.train_dataset[call_row]
    learnt = tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label != -100])
    context = tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label == -100])
    args = openai[ds[call_row]["id"]]["messages"][-1]["tool_calls"][0]["function"]["arguments"]
    assert learnt.startswith(f'<tool_call>{{"name": "calculate_tip", "arguments": {args}}}</tool_call>')
    assert "# Tools\n" in context and '"get_news"' in context and GLAIVE_SYSTEM in context
    assert "<functioncall>" not in context + learnt and "<|endoftext|>" not in context + learnt
    out = trainer.train()
    assert out.global_step == 2 and out.training_loss > 0
