"""Popular SFT datasets as users download them (rows shaped as each ships: tests/popular_datasets.py), read with
no flags: each is detected as its format with nothing lost (dolly's `context` in the prompt as alpaca's input,
Open-Orca's `system_prompt` as the system turn, LIMA's plain-text turns, every turn of a `messages` column beside
a `prompt` one, the column pairs no format names such as MetaMathQA's query -> response), or refused in one line
whose flags read it; and `run` + `export --for trl|llamafactory` give the trainer every part of the example."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest

import popular_datasets as P
from cluster_curate.errors import CurateError
from cluster_curate.io.fields import resolve_fields
from cluster_curate.io.records import to_example
from conftest import cli_in_process as _cli

# dataset -> (format detected, fields as inspect shows them); None: refused, with these flags in the message
DETECTED = {
    "OpenHermes-2.5": ("sharegpt", {"prompt": "conversations"}),
    "SlimOrca": ("sharegpt", {"prompt": "conversations"}),
    "OpenOrca": ("qa", {"prompt": "question", "response": "response", "system": "system_prompt"}),
    "dolly-15k": ("alpaca", {"prompt": "instruction", "response": "response", "input": "context"}),
    "NuminaMath-CoT": ("messages", {"prompt": "messages"}),
    "no_robots": ("messages", {"prompt": "messages"}),
    "ultrachat_200k": ("messages", {"prompt": "messages"}),
    "LIMA": ("sharegpt", {"prompt": "conversations"}),
    "tulu-3-sft-mixture": ("messages", {"prompt": "messages"}),
    "smoltalk": ("messages", {"prompt": "messages"}),
    "WizardLM-evol-instruct": ("sharegpt", {"prompt": "conversations"}),
    "MetaMathQA": ("prompt-completion", {"prompt": "query", "response": "response"}),
    "OpenMathInstruct-2": ("prompt-completion", {"prompt": "problem", "response": "generated_solution"}),
    "xP3": ("prompt-completion", {"prompt": "inputs", "response": "targets"}),
}
HINTED = {"OpenMathInstruct-1": "--prompt-field question --response-field generated_solution",
          "Magicoder-OSS-Instruct": "--prompt-field problem --response-field solution"}


def _text(prompt: list[dict], response: str) -> str:
    return "\n".join(t["content"] for t in prompt) + "\n" + response


def _parts(name: str, row: dict) -> list[str]:
    """Every text of the row that belongs in its training example (the metadata columns do not)."""
    turns = row.get("conversations") or row.get("messages")
    if turns is not None:
        return [t if isinstance(t, str) else t.get("value", t.get("content")) for t in turns]
    return [v for k, v in row.items() if k in ("system_prompt", "question", "response", "instruction", "context",
                                               "query", "problem", "solution", "generated_solution", "inputs",
                                               "targets") and v]


@pytest.mark.parametrize("name", list(P.DATASETS))
def test_each_dataset_is_read_with_no_flags_or_refused_with_flags_that_read_it_and_nothing_is_lost(name):
    rows = P.DATASETS[name]()
    columns = list(rows[0])
    assert name in DETECTED or name in HINTED
    if name in HINTED:
        with pytest.raises(CurateError) as refused:
            resolve_fields(columns, None, None, None, source="data.jsonl")
        flags = re.search(r"pass (--prompt-field \S+ --response-field \S+)", str(refused.value)).group(1)
        assert flags == HINTED[name], str(refused.value)
        prompt_field, response_field = flags.split()[1::2]
        fields = resolve_fields(columns, None, prompt_field, response_field, source="data.jsonl")
    else:
        fields = resolve_fields(columns, None, None, None, source="data.jsonl")
        fmt, shown = DETECTED[name]
        assert fields.format == fmt and {k: v for k, v in fields.as_dict().items() if k in shown} == shown
    for row in rows:
        prompt, response = to_example(row, fields)
        text = _text(prompt, response)
        assert all(part in text for part in _parts(name, row)), (name, row, prompt, response)
        if row.get("system_prompt"):
            assert prompt[0] == {"role": "system", "content": row["system_prompt"]}


def test_lima_conversations_are_the_user_and_the_assistant_in_turn():
    row = P.lima()[0]  # four turns
    fields = resolve_fields(list(row), None, None, None)
    prompt, response = to_example(row, fields)
    assert [t["role"] for t in prompt] == ["user", "assistant", "user"]
    assert [t["content"] for t in prompt] + [response] == row["conversations"]


def test_a_messages_column_beside_a_prompt_column_is_read_whole():
    """no_robots and ultrachat_200k keep the first question in `prompt` as well: the conversation is `messages`,
    every turn of it, the system turn included."""
    for rows in (P.no_robots(), P.ultrachat()):
        fields = resolve_fields(list(rows[0]), None, None, None)
        for row in rows:
            prompt, response = to_example(row, fields)
            assert prompt + [{"role": "assistant", "content": response}] == row["messages"]


@pytest.mark.parametrize("name", ["dolly-15k", "OpenOrca", "LIMA", "MetaMathQA", "OpenMathInstruct-1"])
def test_run_and_export_give_the_trainer_the_whole_example(tmp_path, name):
    """`run` with no flags (or the message's), then `export --for trl` (prompt / completion turns) and `--for
    llamafactory` (messages): each exported row holds the row's context, system prompt and every turn."""
    rows = P.DATASETS[name]()
    P.write(tmp_path / "data.jsonl", rows)
    flags = HINTED.get(name, "").split()
    if flags:  # refused before any work, in one line that gives the flags
        r = _cli("inspect", "data.jsonl", cwd=tmp_path)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and " ".join(flags) in r.stderr
    r = _cli("run", "data.jsonl", "--out", "out", *flags, "--fraction", "0.5", "--num-shards", "2",
             "--micro-batch-size", "2", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for trainer in ("trl", "llamafactory"):
        r = _cli("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        exported = pq.read_table(tmp_path / trainer / "train.parquet").to_pylist()
        assert len(exported) == 12
        for e in exported:
            turns = e["prompt"] + e["completion"] if trainer == "trl" else e["messages"]
            text = "\n".join(t["content"] for t in turns)
            assert turns[-1]["role"] == "assistant" and turns[-2]["role"] == "user"
            assert all(part in text for part in _parts(name, rows[e["id"]])), (e, rows[e["id"]])
            if rows[e["id"]].get("system_prompt"):
                assert turns[0] == {"role": "system", "content": rows[e["id"]]["system_prompt"]}
