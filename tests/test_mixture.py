"""Data mixtures (io/mixture.py): several inputs of different formats as one dataset with global ids and
(source, source_row); mixture files with per-input reading options; typed original columns that must agree;
and floors / caps on each source's share of a selection (budget_sequence.py `source_bounded_take`)."""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate import selection as S
from cluster_curate.errors import CurateError
from cluster_curate.io.datasets import ReadOptions, open_dataset
from cluster_curate.io.mixture import Mixture, mixture_inputs, normalised_columns, parse_source_shares, source_bounds

from conftest import FIXTURES
from popular_datasets import magicoder
from test_datasets import write_jsonl
from test_input_formats import stack_exchange_paired_rows
from test_labelled_pairs import shp_rows

GSM_CSV = FIXTURES / "gsm8k" / "train-300.csv"
GSM_JSONL = FIXTURES / "gsm8k" / "train-300.jsonl"
ALPACA_PARQUET = FIXTURES / "code_alpaca" / "code_alpaca-300.parquet.d"
CHAT = FIXTURES / "chat" / "messages-300.jsonl"


def _three(tmp_path):
    for src in (GSM_CSV, CHAT):
        shutil.copy(src, tmp_path / src.name)
    shutil.copytree(ALPACA_PARQUET, tmp_path / "code.parquet")
    return [str(tmp_path / GSM_CSV.name), str(tmp_path / "code.parquet"), str(tmp_path / CHAT.name)]


def test_three_inputs_of_different_formats_read_as_one_dataset(tmp_path):
    paths = _three(tmp_path)
    mix = Mixture(mixture_inputs(paths))
    assert mix.names == ["train-300", "code", "messages-300"]
    assert mix.formats == {"train-300": "qa", "code": "alpaca", "messages-300": "messages"}
    examples, raws = [], []
    for batch in mix.iter_batches(128):
        examples.extend(batch.examples)
        raws.append(batch.raw)
    assert [ex.id for ex in examples] == list(range(900)) and mix.rows == 900
    table = pa.concat_tables([pa.Table.from_batches([r]) for r in raws], promote_options="permissive")
    assert table.column("id").to_pylist() == list(range(900))
    assert table.column("source").to_pylist() == ["train-300"] * 300 + ["code"] * 300 + ["messages-300"] * 300
    assert table.column("source_row").to_pylist() == list(range(300)) * 3
    # each row's original columns, as its input has them (the chat input's `messages` keeps its name apart)
    gsm_first = next(iter(__import__("csv").DictReader(open(GSM_CSV, newline=""))))
    assert table.slice(0, 1).select(["question", "answer"]).to_pylist()[0] == gsm_first
    code = pq.read_table(ALPACA_PARQUET).slice(5, 1).to_pylist()[0]
    assert {k: table.column(k)[305].as_py() for k in code} == code
    chat_row = json.loads(open(CHAT).readlines()[7])
    assert table.column("source_messages")[607].as_py() == chat_row["messages"]
    assert table.column("question")[305].as_py() is None  # an input without the column: null
    assert mix.offsets().tolist() == [0, 300, 600]
    record = mix.record()
    assert [(i["name"], i["rows"], i["first_id"], i["format"]) for i in record["inputs"]] == [
        ("train-300", 300, 0, "qa"), ("code", 300, 300, "alpaca"), ("messages-300", 300, 600, "messages")]
    schema = mix.check_columns()
    assert schema.names == ["question", "answer", "instruction", "input", "output", "source_messages"]
    # normalised columns: the same shape whatever the input's format
    cols = normalised_columns([examples[0], examples[305], examples[607]])
    assert cols["prompt"][0].as_py() == gsm_first["question"] and cols["response"][0].as_py() == gsm_first["answer"]
    assert cols["messages"][2].as_py() == [{"role": t["role"], "content": t["content"]} for t in chat_row["messages"]]
    system = [t["content"] for t in chat_row["messages"] if t["role"] == "system"]
    assert cols["system"][2].as_py() == (system[0] if system else None) and cols["system"][0].as_py() is None


def test_lineage_covers_every_input(tmp_path):
    paths = _three(tmp_path)
    before = Mixture(mixture_inputs(paths)).fingerprint()
    assert Mixture(mixture_inputs(paths)).fingerprint() == before
    with open(paths[2], "a") as f:  # one more row in the last input
        f.write(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"}]})
                + "\n")
    after = Mixture(mixture_inputs(paths))
    assert after.fingerprint() != before and after.num_rows() == 901
    # the order of the inputs is part of the identity (ids follow it)
    assert Mixture(mixture_inputs([paths[1], paths[0], paths[2]])).fingerprint() != after.fingerprint()


def test_mixture_file_with_per_input_options(tmp_path):
    bad = tmp_path / "math.jsonl"
    rows = [{"q": f"What is {i} + {i}?", "a": str(2 * i), "label": i} for i in range(6)]
    rows[2]["a"] = ""  # a bad row, skipped for this input only
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.table({"prompt": ["p1", "p2"], "completion": ["c1", "c2"], "label": ["x", "y"]}),
                   tmp_path / "other.parquet")
    mix_file = tmp_path / "mix.yaml"
    mix_file.write_text("inputs:\n"
                        "  - path: math.jsonl\n    prompt_field: q\n    response_field: a\n    on_bad_row: skip\n"
                        "    min_share: 0.25\n"
                        "  - path: other.parquet\n    name: other\n    rename: {label: label_text}\n")
    inputs = mixture_inputs([str(mix_file)])
    assert [(i.name, i.options.on_bad_row, i.min_share) for i in inputs] == [("math", "skip", 0.25),
                                                                             ("other", "error", None)]
    mix = Mixture(inputs)
    ids = [ex.id for b in mix.iter_batches() for ex in b.examples]
    assert ids == [0, 1, 3, 4, 5, 6, 7] and [r.id for r in mix.rejects] == [2]
    schema = mix.check_columns()
    assert schema.field("label").type == pa.int64() and schema.field("label_text").type == pa.string()
    assert schema.field("source_prompt").type == pa.string()  # an own `prompt` column is kept apart
    # without the rename the two `label` columns disagree: refused before any work, naming both inputs
    mix_file.write_text(mix_file.read_text().replace("    rename: {label: label_text}\n", ""))
    with pytest.raises(CurateError) as err:
        Mixture(mixture_inputs([str(mix_file)])).check_columns()
    assert "other.parquet: column 'label' is string, but input math has it as int64" in str(err.value)
    assert "rename: {label: label_other}" in str(err.value) and "\n" not in str(err.value)


def test_an_input_of_unknown_columns_is_told_the_mixture_file_keys(tmp_path):
    """--prompt-field would apply to every input, so the hint names a mixture file's per-input keys, which work."""
    pq.write_table(pa.table({"Question": ["What is 2 + 2?"], "Answer": ["4"]}), tmp_path / "caps.parquet")
    shutil.copy(GSM_CSV, tmp_path / "gsm.csv")
    with pytest.raises(CurateError, match=r"caps.parquet: unrecognised record format; .*give this input "
                                          r"`prompt_field: Question` and `response_field: Answer` \(or other "
                                          r"columns\) in a mixture file"):
        Mixture(mixture_inputs([str(tmp_path / "caps.parquet"), str(tmp_path / "gsm.csv")]))
    (tmp_path / "mix.yaml").write_text("inputs:\n  - path: caps.parquet\n    prompt_field: Question\n"
                                       "    response_field: Answer\n  - path: gsm.csv\n")
    mix = Mixture(mixture_inputs([str(tmp_path / "mix.yaml")]))
    assert mix.formats["gsm"] == "qa" and sum(len(b.examples) for b in mix.iter_batches()) == 301


def _spreadsheet_pairs(path, question="Question"):
    """Preference pairs as a spreadsheet's CSV export has them: headers of words with spaces."""
    gsm = list(csv.DictReader(open(GSM_CSV, newline="")))[:20]
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow([question, "Chosen response", "Rejected response"])
        out.writerows([r["question"], r["answer"], f"I would guess {i + 41}."] for i, r in enumerate(gsm))


# each kind of hint: (the input's file, its rows, the keys the mixture file gives it, the keys and the note the hint
# names, the fields they read)
_HINTS = {
    "prompt/response": ("magicoder.jsonl", magicoder, {}, {"prompt_field": "problem", "response_field": "solution"},
                        "or other columns", ("prompt-completion", "problem", "solution", None, None)),
    "+rejected": ("se.jsonl", stack_exchange_paired_rows, {},
                  {"prompt_field": "question", "response_field": "response_j", "rejected_field": "response_k"},
                  "or other columns; the chosen answer's, then the rejected one's",
                  ("preference", "question", "response_j", "response_k", None)),
    "+rejected, columns with spaces": (
        "sheet.csv", None, {},
        {"prompt_field": "Question", "response_field": "Chosen response", "rejected_field": "Rejected response"},
        "or other columns; the chosen answer's, then the rejected one's",
        ("preference", "Question", "Chosen response", "Rejected response", None)),
    "+label": ("shp.jsonl", shp_rows, {},
               {"prompt_field": "history", "response_field": "human_ref_A", "rejected_field": "human_ref_B",
                "label_field": "labels"},
               "labels is 1 where human_ref_A is the preferred answer, 0 where human_ref_B is",
               ("preference", "history", "human_ref_A", "human_ref_B", "labels")),
    "+label, the pair named without it": (
        "shp.jsonl", shp_rows, {"prompt_field": "history", "response_field": "human_ref_A",
                                "rejected_field": "human_ref_B"},
        {"response_field": "human_ref_A", "rejected_field": "human_ref_B", "label_field": "labels"},
        "labels 1: human_ref_A is the chosen answer, 0: human_ref_B is",
        ("preference", "history", "human_ref_A", "human_ref_B", "labels")),
    "+label, the pair named in the order that inverts it": (
        "shp.jsonl", shp_rows, {"prompt_field": "history", "response_field": "human_ref_B",
                                "rejected_field": "human_ref_A", "label_field": "labels"},
        {"response_field": "human_ref_A", "rejected_field": "human_ref_B", "label_field": "labels"},
        "this order would invert every pair", ("preference", "history", "human_ref_A", "human_ref_B", "labels")),
}


def _input_beside_gsm8k(tmp_path, name, make_rows, own_keys, **spreadsheet):
    """A mixture file of the input `name` (its rows from make_rows, else spreadsheet pairs) with its own keys,
    beside GSM8K's CSV."""
    if make_rows is None:
        _spreadsheet_pairs(tmp_path / name, **spreadsheet)
    else:
        write_jsonl(tmp_path / name, make_rows())
    shutil.copy(GSM_CSV, tmp_path / "gsm.csv")
    mix_file = tmp_path / "mix.yaml"
    entry = ", ".join(f"{key}: {value}" for key, value in {"path": name, **own_keys}.items())
    mix_file.write_text(f"inputs:\n  - {{{entry}}}\n  - path: gsm.csv\n")
    return mix_file


@pytest.mark.parametrize("kind", list(_HINTS))
def test_each_kind_of_fields_hint_names_a_mixture_input_its_keys(tmp_path, kind):
    """The columns a refusal of an input's fields suggests are worded as its keys in a mixture file, whatever the
    kind of hint (a prompt and a response; with the rejected answer; with the label that orders a pair): the flags
    would apply to every input. Those keys read the input; alone, the same input is told the flags. The wording was
    a regex over the flags' text, which missed a column name with a space in it and gave flags."""
    name, make_rows, own_keys, keys, note, fields = _HINTS[kind]
    mix_file = _input_beside_gsm8k(tmp_path, name, make_rows, own_keys)
    with pytest.raises(CurateError) as err:
        Mixture(mixture_inputs([str(mix_file)]))
    listed = [f"`{key}: {value}`" for key, value in keys.items()]
    flags = [f"--{key.removesuffix('_field')}-field" for key in keys]
    assert (f"give this input {', '.join(listed[:-1])} and {listed[-1]} ({note}) in a mixture file: "
            f"{', '.join(flags[:-1])} and {flags[-1]} apply to every input") in str(err.value), str(err.value)
    assert "pass --" not in str(err.value) and "\n" not in str(err.value)
    single = ReadOptions(**own_keys)
    with pytest.raises(CurateError) as err:
        open_dataset(tmp_path / name, single)
    hint = "pass " + " ".join(f"{flag} {shlex.quote(value)}" for flag, value in zip(flags, keys.values()))
    assert f"{hint} ({note})" in str(err.value), str(err.value)  # a column with a space quoted: it can be pasted
    assert shlex.split(hint)[2::2] == list(keys.values())
    entry = ", ".join(f"{key}: {value}" for key, value in {"path": name, **own_keys, **keys}.items())
    mix_file.write_text(f"inputs:\n  - {{{entry}}}\n  - path: gsm.csv\n")
    mix = Mixture(mixture_inputs([str(mix_file)]))
    read = mix.datasets[0].field_map
    assert (read.format, read.prompt, read.response, read.rejected, read.label) == fields
    assert mix.num_rows() == (len(make_rows()) if make_rows else 20) + 300


def _sharegpt_speakers(n: int = 20) -> list[dict]:
    """A `messages` column of ShareGPT speakers under `role` (human / gpt), as a conversion to OpenAI keys that
    kept the speakers leaves it: GSM8K's questions and answers."""
    gsm = list(csv.DictReader(open(GSM_CSV, newline="")))[:n]
    return [{"messages": [{"role": "human", "content": r["question"]}, {"role": "gpt", "content": r["answer"]}]}
            for r in gsm]


def _orca_dpo_pairs(n: int = 20) -> list[dict]:
    """Rows shaped as Intel/orca_dpo_pairs': `system`, `question`, `chosen`, `rejected`, plain text (no `prompt`
    column: read as whole conversations unless the question's column is named): GSM8K's, a wrong answer rejected."""
    gsm = list(csv.DictReader(open(GSM_CSV, newline="")))[:n]
    return [{"system": "You are an AI assistant. Solve the problem step by step.", "question": r["question"],
             "chosen": r["answer"], "rejected": f"I would guess {i + 41}."} for i, r in enumerate(gsm)]


# hints that were text with flags inside: (the input's file, its rows, the keys the mixture file gives it, how a
# mixture words the hint, how one input does, the keys that then read it, the fields they read)
_TEXT_HINTS = {
    "a pair with no prompt column": (
        "sheet.csv", None, {},
        "give this input `response_field: Chosen response` and `rejected_field: Rejected response` (the chosen "
        "answer's column, then the rejected one's) and `prompt_field: COLUMN` (unless each holds the whole "
        "conversation) in a mixture file: --response-field, --rejected-field and --prompt-field apply to every input",
        "pass --response-field 'Chosen response' --rejected-field 'Rejected response' (the chosen answer's column, "
        "then the rejected one's) and --prompt-field COLUMN, unless each holds the whole conversation",
        {"response_field": "Chosen response", "rejected_field": "Rejected response", "prompt_field": "Post"},
        ("preference", "Post", "Chosen response", "Rejected response")),
    "a prompt column and preference pairs": (
        "se.jsonl", stack_exchange_paired_rows, {"prompt_field": "question"},
        "(preference pairs? give this input `response_field: response_j` and `rejected_field: response_k` in a "
        "mixture file: --response-field and --rejected-field apply to every input)",
        "(preference pairs? pass --response-field response_j --rejected-field response_k)",
        {"response_field": "response_j", "rejected_field": "response_k"},
        ("preference", "question", "response_j", "response_k")),
    "ShareGPT speakers under role": (
        "speakers.jsonl", _sharegpt_speakers, {},
        "(roles: human, gpt; ShareGPT speakers: give this input `format: sharegpt` and `prompt_field: messages` in "
        "a mixture file: --format and --prompt-field apply to every input)",
        "(roles: human, gpt; ShareGPT speakers: pass --format sharegpt --prompt-field messages)",
        {"format": "sharegpt", "prompt_field": "messages"}, ("sharegpt", "messages", None, None)),
    "plain-text pairs with no prompt column": (
        "orca.jsonl", _orca_dpo_pairs, {},
        "add a `prompt` column (or give this input `prompt_field: COLUMN` in a mixture file: --prompt-field applies "
        "to every input), or give chosen and rejected",
        "add a `prompt` column (or pass --prompt-field COLUMN), or give chosen and rejected",
        {"prompt_field": "question"}, ("preference", "question", "chosen", "rejected")),
}


@pytest.mark.parametrize("kind", list(_TEXT_HINTS))
def test_hints_that_were_text_with_flags_name_a_mixture_input_its_keys(tmp_path, kind):
    """A pair whose prompt column the user names, preference pairs beside a named prompt column, and bad rows' hints
    (ShareGPT speakers in a `messages` column, plain-text pairs with no prompt) were hints of text with flags
    inside, which reached a mixture's input as flags that would apply to every input. They name its mixture file's
    keys now, which read it; alone, the same input is told the flags, as before."""
    name, make_rows, own_keys, as_keys, as_flags, keys, fields = _TEXT_HINTS[kind]
    mix_file = _input_beside_gsm8k(tmp_path, name, make_rows, own_keys, question="Post")
    with pytest.raises(CurateError) as err:
        list(Mixture(mixture_inputs([str(mix_file)])).iter_batches())
    # (--on-bad-row skip, a mixture file's default for every input, is a flag still)
    assert as_keys in str(err.value) and not re.search("pass --(?!on-bad-row)", str(err.value)), str(err.value)
    with pytest.raises(CurateError) as err:
        list(open_dataset(tmp_path / name, ReadOptions(**own_keys)).iter_batches())
    assert as_flags in str(err.value), str(err.value)
    entry = ", ".join(f"{key}: {value}" for key, value in {"path": name, **own_keys, **keys}.items())
    mix_file.write_text(f"inputs:\n  - {{{entry}}}\n  - path: gsm.csv\n")
    mix = Mixture(mixture_inputs([str(mix_file)]))
    read = mix.datasets[0].field_map
    assert (read.format, read.prompt, read.response, read.rejected) == fields
    assert sum(len(b.examples) for b in mix.iter_batches()) == (len(make_rows()) if make_rows else 20) + 300


@pytest.mark.parametrize("text, message", [
    ("inputs: []\n", "field 'inputs': expected a non-empty list"),
    ("inputs:\n  - path: a.jsonl\n    formt: qa\n", r"inputs\[0\]: unknown field 'formt'"),
    ("inputs:\n  - name: a\n", r"inputs\[0\].path: required"),
    ("inputs:\n  - path: a.jsonl\n    max_share: 1.5\n", r"inputs\[0\].max_share: expected a share"),
    ("inputs:\n  - path: a.jsonl\n  - path: sub/a.jsonl\n", "input name 'a' is also the name of"),
    # the same file twice was told to name the two apart, as if they were two files
    ("inputs:\n  - path: a.jsonl\n  - path: ./a.jsonl\n",
     r"mix.yaml: inputs\[1\]: given twice \(also as .*mix.yaml: inputs\[0\]\); give each input once"),
    ("inputs:\n  - path: a.jsonl\n    on_bad_row: ignore\n", r"inputs\[0\].on_bad_row: must be"),
    ("inputs: [\n", r"mix.yaml:\d+: not a valid YAML/JSON mixture file"),
])
def test_bad_mixture_files_are_one_line(tmp_path, text, message):
    (tmp_path / "mix.yaml").write_text(text)
    with pytest.raises(CurateError, match=message) as err:
        mixture_inputs([str(tmp_path / "mix.yaml")])
    assert "\n" not in str(err.value)


def test_a_mixture_files_keys_are_named_in_its_refusals_before_any_work(tmp_path, cli_runner, monkeypatch):
    """What a mixture file's entry says wrong is named by its file and key, before embed reads a row: a rename
    onto a column the input has or onto a mixture's own column (both columns one name: an INTERNAL ERROR at shard,
    after embed, cluster and select), an unknown format and a column a key names that is not there (both were worded as flags, which apply
    to every input), an input whose columns cannot be guessed (told flags, which broke the other input), and a
    path that is not there beside the file but is in the working directory (read from there: the same file read
    other data from elsewhere)."""
    from cluster_curate.cli import main
    mx = tmp_path / "mx"
    (mx / "data").mkdir(parents=True)
    rows = [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:20]]
    write_jsonl(mx / "data" / "math.jsonl", rows)
    write_jsonl(mx / "data" / "again.jsonl", rows)  # the second input (math.jsonl twice is one input given twice)
    write_jsonl(mx / "data" / "odd.jsonl", [{"problem_text": r["question"], "solution_text": r["answer"]}
                                            for r in rows])
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "here.jsonl", rows)  # in the working directory, not beside the mixture file
    monkeypatch.chdir(tmp_path)
    cases = {
        "{path: data/math.jsonl, rename: {question: answer}}":
            "inputs[0].rename: input math's columns 'question' and 'answer' would both be 'answer'; rename to a "
            "name none of its other columns has",
        "{path: data/math.jsonl, rename: {answer: id}}":  # was an INTERNAL ERROR at shard: two `id` columns
            "inputs[0].rename: answer: id names one of the mixture's own columns (id, source, source_row, prompt, ",
        "{path: data/math.jsonl, rename: {answer: source}}":
            "inputs[0].rename: answer: source names one of the mixture's own columns",
        "{path: data/math.jsonl, format: qax}": "inputs[0].format: unknown format 'qax'; choose one of alpaca, ",
        "{path: data/math.jsonl, response_field: nope}":
            f"inputs[0].response_field: 'nope': no such column in {mx / 'data' / 'math.jsonl'}; columns found: "
            "[question, answer]",
        "{path: data/odd.jsonl}": "give this input `prompt_field: COLUMN` and `response_field: COLUMN` (",
        "{path: data/here.jsonl}": "inputs[0].path: data/here.jsonl is relative to the mixture file, and "
                                   f"{mx / 'data' / 'here.jsonl'} does not exist",
    }
    for entry, said in cases.items():
        (mx / "mix.yaml").write_text(f"inputs:\n  - {entry}\n  - {{path: data/again.jsonl}}\n")
        r = cli_runner.invoke(main, ["run", str(mx / "mix.yaml"), "--out", str(tmp_path / "out"), "--budget", "10",
                                     "-n", "2"], env={"COLUMNS": "250"})
        assert r.exit_code == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) <= 2, (entry, r.stderr)
        assert not (tmp_path / "out").exists(), entry
    swap = "{path: data/math.jsonl, rename: {question: answer, answer: question}}"  # a swap stays fine
    (mx / "mix.yaml").write_text(f"inputs:\n  - {swap}\n")
    assert cli_runner.invoke(main, ["inspect", str(mx / "mix.yaml"), "-q"]).exit_code == 0


def test_a_file_given_twice_on_the_command_line_is_named_a_repeat(tmp_path):
    """`run a.jsonl a.jsonl`: 'input name 'a' is also the name of a.jsonl; name them apart in a mixture file'."""
    shutil.copy(GSM_CSV, tmp_path / "gsm.csv")
    with pytest.raises(CurateError, match=r"gsm.csv: given twice \(also as .*gsm.csv\); give each input once"):
        mixture_inputs([str(tmp_path / "gsm.csv"), str(tmp_path / ".." / tmp_path.name / "gsm.csv")])


def test_source_share_options():
    names = ["math", "code", "chat"]
    assert parse_source_shares("0.1", names, "--source-min-share") == {"math": 0.1, "code": 0.1, "chat": 0.1}
    assert parse_source_shares("0.1,code=0.3", names, "--source-min-share") == {"math": 0.1, "code": 0.3,
                                                                                 "chat": 0.1}
    with pytest.raises(CurateError, match="no input named 'poetry'"):
        parse_source_shares("poetry=0.2", names, "--source-max-share")
    with pytest.raises(CurateError, match="between 0 and 1"):
        parse_source_shares("math=2", names, "--source-max-share")
    # one given twice alike is one
    assert parse_source_shares("0.1,code=0.3,code=0.3", names, "--source-min-share") == {
        "math": 0.1, "code": 0.3, "chat": 0.1}
    # a share that would be dropped without a word (the last one won): refused, in one line
    for spec, said in (("0.6,0.1", "two shares for every input (0.6 and 0.1)"),
                       ("math=0.7,math=0.2", "two shares for input math (0.7 and 0.2)"),
                       ("=0.9", "'=0.9' names no input"),
                       # the last share won: a share alone after named ones read as every input's, theirs too
                       ("code=0.5,0.9", "a share alone (0.9) after named ones; write it first (0.9,code=0.5)")):
        with pytest.raises(CurateError, match=re.escape(f"--source-min-share {spec!r}: {said}")):
            parse_source_shares(spec, names, "--source-min-share")


def test_run_takes_shares_in_any_order_and_refuses_caps_too_tight_before_any_work(tmp_path, cli_runner):
    """The same shares written in another order were 'other select options' (refused; re-selected with
    --overwrite); caps that cannot fill the budget were refused by select, after embed and cluster had run."""
    rows = [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:60]]
    write_jsonl(tmp_path / "math.jsonl", rows[:30])
    write_jsonl(tmp_path / "code.jsonl", rows[30:])
    out, data = tmp_path / "o", [tmp_path / "math.jsonl", tmp_path / "code.jsonl"]
    common = ["run", *data, "--out", out, "--budget", "20", "--num-shards", "2", "--features", "text", "--k", "4",
              "--json"]
    _cli(cli_runner, [*common, "--source-min-share", "math=0.5", "--source-min-share", "code=0.2"])
    for spec in ("code=0.2,math=0.5", "math=0.50, code=0.2"):
        again = json.loads(_cli(cli_runner, [*common, "--source-min-share", spec]).stdout)
        assert [s["status"] for s in again["stages"]] == ["up to date"] * 4
    res = _cli(cli_runner, [*common[:-1], "--source-min-share", "math=0.6,code=0.2"], code=2)
    assert "other select options (--source-min-share math=0.5,code=0.2 -> math=0.6,code=0.2)" in res.output
    fresh = tmp_path / "fresh"
    res = _cli(cli_runner, ["run", *data, "--out", fresh, "--budget", "55", "--num-shards", "2",
                            "--source-max-share", "code=0.4"], code=2)  # math's 30 and code's 0.4 x 55 = 22
    assert res.output.strip() == ("ERROR: the sources' caps allow at most 52 rows, less than the budget of 55 "
                                  "(set by --source-max-share for code); raise them where they are set, or lower "
                                  "the budget")
    assert not fresh.exists()
    # with --dedup the rows left are known only at select, which cuts the budget to them: not refused up front
    # (a first version of the check refused what select then took). math: 30 rows and a near copy of each
    write_jsonl(tmp_path / "math.jsonl", rows[:30] + [{**r, "question": r["question"] + " Answer carefully."}
                                                      for r in rows[:30]])
    write_jsonl(tmp_path / "code.jsonl", [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[60:100]])
    argv = ["run", *data, "--out", fresh, "--budget", "90", "--num-shards", "2", "--features", "text",
            "--source-max-share", "math=0.5"]  # math 45 + code 40 < 90 before --dedup; 30 + 40 = 70 after
    assert "caps allow at most 85 rows" in _cli(cli_runner, argv, code=2).output
    summary = json.loads(_cli(cli_runner, [*argv, "--dedup", "0.8", "--json"]).stdout)["summaries"]["select"]
    assert summary["selected"] == 70, summary


def test_an_input_named_in_any_script_is_taken_and_a_space_says_how_to_name_it(tmp_path, cli_runner):
    """`données.jsonl` was refused: 'use letters, digits, ...' (é is a letter), and the message did not say that a
    mixture file names an input."""
    rows = [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:40]]
    write_jsonl(tmp_path / "données.jsonl", rows[:20])
    write_jsonl(tmp_path / "b c.jsonl", rows[20:])
    out = tmp_path / "o"
    _cli(cli_runner, ["run", tmp_path / "données.jsonl", GSM_JSONL, "--out", out,
                      "--budget", "10", "--num-shards", "1", "--features", "text", "--source-min-share",
                      "données=0.5", "-q"])
    shard = pq.read_table(next((out / "shards").glob("shard-*.parquet")))
    assert shard.column("source").to_pylist().count("données") >= 5
    from cluster_curate.io.mixture import valid_input_name
    assert all(valid_input_name(n) for n in ("données", "donne\u0301es", "हिंदी", "math-v2.1", "日本語"))
    assert not any(valid_input_name(n) for n in ("b c", "_x", "a=b", "a,b", ""))
    res = _cli(cli_runner, ["run", tmp_path / "données.jsonl", tmp_path / "b c.jsonl", "--out", tmp_path / "o2",
                            "--budget", "10", "--num-shards", "1"], code=2)
    assert res.output.strip() == (f"ERROR: {tmp_path / 'b c.jsonl'}: input name 'b c': use letters, digits, '.', '_' "
                                  f"or '-' (a file's name is its input's name: give it another in a mixture file, "
                                  f"`inputs: [{{path: {tmp_path / 'b c.jsonl'}, name: ...}}]`)")


def test_a_share_given_twice_for_one_input_is_refused_before_any_work(tmp_path, cli_runner):
    """`--source-min-share math=0.7 --source-min-share math=0.2` kept 0.2 alone (math got 28% of a selection its
    user floored at 70%), and recorded it as intended."""
    write_jsonl(tmp_path / "a.jsonl", [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:20]])
    write_jsonl(tmp_path / "b.jsonl", [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[20:40]])
    res = _cli(cli_runner, ["run", tmp_path / "a.jsonl", tmp_path / "b.jsonl", "--out", tmp_path / "o", "--budget",
                            "10", "--num-shards", "1", "--source-min-share", "a=0.7", "--source-min-share", "a=0.2"],
               code=2)
    assert res.output.strip() == ("ERROR: --source-min-share 'a=0.7,a=0.2': two shares for input a (0.7 and 0.2); "
                                  "give one")
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------- source shares

@settings(max_examples=120, deadline=None)
@given(st.data())
def test_source_bounds_are_met_exactly_or_refused(data):
    n = data.draw(st.integers(4, 150))
    k = data.draw(st.integers(1, 6))
    n_src = data.draw(st.integers(1, 3))
    clusters = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
    sources = np.array(data.draw(st.lists(st.integers(0, n_src - 1), min_size=n, max_size=n)))
    budget = data.draw(st.integers(1, n))
    lo = [data.draw(st.sampled_from([np.nan, 0.1, 0.3, 0.5])) for _ in range(n_src)]
    hi = [data.draw(st.sampled_from([np.nan, 0.2, 0.5, 0.9])) for _ in range(n_src)]
    names = ["a", "b", "c"][:n_src]
    try:
        sel = S.select_rows(clusters, budget=budget, sources=sources, source_min_share=lo, source_max_share=hi,
                            source_names=names, seed=3)
    except CurateError as e:
        assert any(w in str(e) for w in ("floor", "caps")), e
        return
    per = np.bincount(sources[sel.rows], minlength=n_src)
    assert per.sum() == budget  # the budget exactly
    for s in range(n_src):
        if not np.isnan(lo[s]):
            assert per[s] >= np.ceil(lo[s] * budget - 1e-9)
        if not np.isnan(hi[s]):
            assert per[s] <= np.floor(hi[s] * budget + 1e-9)
    # ranks are each cluster's selected rows in its order
    for c in np.unique(sel.cluster):
        assert sorted(sel.rank_in_cluster[sel.cluster == c].tolist()) == list(range(int((sel.cluster == c).sum())))


def test_source_bounds_keep_the_water_filling_and_work_in_tokens():
    rng = np.random.default_rng(0)
    n = 600
    sources = np.repeat([0, 1, 2], [400, 150, 50])  # a dominant input
    clusters = rng.integers(0, 8, n)
    free = S.select_rows(clusters, budget=120, seed=1)
    # unbounded, the water-filling over clusters gives the sources about their sizes' shares
    share = np.bincount(sources[free.rows], minlength=3) / 120
    assert share[0] > 0.5
    bounded = S.select_rows(clusters, budget=120, seed=1, sources=sources, source_max_share=[0.4, np.nan, np.nan],
                            source_min_share=[np.nan, np.nan, 0.25], source_names=["a", "b", "c"])
    per = np.bincount(sources[bounded.rows], minlength=3)
    assert per.sum() == 120 and per[0] == 48 and per[2] >= 30
    # without bounds the same code path gives the same rows as the plain water-filling (p = 0)
    same = S.select_rows(clusters, budget=120, seed=1, sources=sources, source_min_share=[np.nan] * 3,
                         source_names=["a", "b", "c"])
    assert np.array_equal(same.rows, free.rows) and np.array_equal(same.quotas, free.quotas)
    tokens = rng.integers(20, 400, n)
    t = S.select_rows(clusters, token_budget=30_000, tokens=tokens, seed=1, sources=sources,
                      source_min_share=[np.nan, np.nan, 0.2], source_names=["a", "b", "c"])
    per_tokens = np.bincount(sources[t.rows], weights=tokens[t.rows], minlength=3)
    assert 0 <= 30_000 - per_tokens.sum() < tokens.max() and per_tokens[2] >= 0.2 * 30_000
    # a floor and cap in tokens closer than one row: 'its floor (6,000 tokens) is above its cap (6,003 tokens)'
    with pytest.raises(CurateError, match=r"^source c: no number of its rows, taken in the selection's order, holds "
                                          r"between its floor \(6,000 tokens\) and its cap \(6,003 tokens\): the "
                                          r"fewest that reach the floor hold 6,014 tokens; set the two further apart$"):
        S.select_rows(clusters, token_budget=30_000, tokens=tokens, seed=1, sources=sources,
                      source_min_share=[np.nan, np.nan, 0.2], source_max_share=[np.nan, np.nan, 0.2001],
                      source_names=["a", "b", "c"])
    with pytest.raises(CurateError, match="source c: its floor is 60 rows and it has only 50 rows"):
        S.select_rows(clusters, budget=120, sources=sources, source_min_share=[np.nan, np.nan, 0.5],
                      source_names=["a", "b", "c"])
    with pytest.raises(CurateError, match="the sources' caps allow at most 110 rows, less than the budget of 120"):
        S.select_rows(clusters, budget=120, sources=sources, source_max_share=[0.25, 0.25, np.nan],
                      source_names=["a", "b", "c"])
    # where each bound was set (io/mixture.source_bounds) is named in the message
    low, high, low_from, high_from = source_bounds("c=0.5", None, ["a", "b", "c"], [None, None, None],
                                                   [0.25, None, None], ["mix.yaml: inputs[0]", "b.jsonl", "x"])
    assert (low_from, high_from) == ([None, None, "--source-min-share"], ["mix.yaml: inputs[0].max_share", None, None])
    with pytest.raises(CurateError, match=r"source a: its floor 0.5 \(--source-min-share\) is above its cap 0.25 "
                                          r"\(mix.yaml: inputs\[0\].max_share\)"):  # select's and run's one check
        source_bounds("a=0.5", None, ["a", "b", "c"], [None] * 3, [0.25, None, None], ["mix.yaml: inputs[0]", "b", "c"])
    with pytest.raises(CurateError, match=r"source c: its floor is 60 rows \(--source-min-share\) and it has only 50"):
        S.select_rows(clusters, budget=120, sources=sources, source_min_share=[np.nan, np.nan, 0.5],
                      source_names=["a", "b", "c"], source_bound_origins=(low_from, high_from))
    with pytest.raises(CurateError, match=r"caps allow at most 110 rows, less than the budget of 120 \(set by "
                                          r"mix.yaml: inputs\[0\].max_share for a; --source-max-share for b\)"):
        S.select_rows(clusters, budget=120, sources=sources, source_max_share=[0.25, 0.25, np.nan],
                      source_names=["a", "b", "c"],
                      source_bound_origins=([None] * 3, ["mix.yaml: inputs[0].max_share", "--source-max-share", None]))


def test_source_accounting_and_its_plot(tmp_path):
    from cluster_curate.budget_sequence import source_accounting
    from cluster_curate.commands.report_plots import plot_source_shares

    source = np.array([0, 0, 0, 1, 1, 2])
    tokens = np.array([10, 10, 20, 5, 5, 50])
    selected = np.array([True, False, True, True, False, True])
    acc = source_accounting(["math", "code", "chat"], source, tokens, selected)
    assert acc[0] == {"source": "math", "rows": 3, "share_rows": 0.5, "tokens": 40, "share_tokens": 0.4,
                      "selected": 2, "kept_rows": 0.6667, "selected_share_rows": 0.5, "selected_tokens": 30,
                      "kept_tokens": 0.75, "selected_share_tokens": 0.3529}
    assert [r["selected"] for r in acc] == [2, 1, 1] and acc[2]["selected_share_tokens"] == 0.5882
    png = plot_source_shares(acc, tmp_path / "source_shares.png")
    assert png.stat().st_size > 5000


def test_a_mixture_reopens_from_its_record(tmp_path):
    from cluster_curate.io.datasets import Dataset
    from cluster_curate.io.mixture import inputs_from_record, open_inputs

    paths = _three(tmp_path)
    assert isinstance(open_inputs(paths[:1]), Dataset)  # one input: read as before
    mix = open_inputs(paths)
    again = Mixture(inputs_from_record(mix.record()))
    assert again.fingerprint() == mix.fingerprint() and again.names == mix.names


def test_one_predicate_tells_a_mixtures_lineage_record_from_one_datasets(tmp_path):
    """A mixture's lineage record (its `inputs`) against one dataset's, as every reader of a record asks it
    (reopening the data, export's chat columns from the manifest, shard's and select's per-input figures)."""
    from cluster_curate.io.mixture import is_mixture_record, open_inputs, source_index

    paths = _three(tmp_path)
    mixture, single = open_inputs(paths).record(), open_inputs(paths[:1]).record()
    assert is_mixture_record(mixture) and [i["first_id"] for i in mixture["inputs"]] == [0, 300, 600]
    assert not is_mixture_record(single) and not is_mixture_record({}) and not is_mixture_record(None)
    assert source_index(single, [0, 299]) is None and source_index(mixture, [0, 299, 300]).tolist() == [0, 0, 1]


# ------------------------------------------------------------------------------------------- through the commands

def _cli(cli_runner, args, code=0):
    from cluster_curate.cli import main
    res = cli_runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def test_exact_copies_across_inputs_keep_the_lowest_id(tmp_path, cli_runner):
    """The chat fixture re-renders GSM8K and Code Alpaca rows: by default embed keeps the first input's copy."""
    from cluster_curate.io.artifacts import read_artifact

    paths = _three(tmp_path)
    _cli(cli_runner, ["embed", *paths, "--out", tmp_path / "e.parquet", "-q"])
    t, meta = read_artifact(tmp_path / "e.parquet")
    dropped = meta.params["exact_duplicates"]["dropped"]
    assert dropped > 0 and t.num_rows == 900 - dropped
    kept = set(t.column("id").to_pylist())
    copies = set(meta.params["exact_duplicates"]["ids"])
    assert not kept & copies and kept | copies == set(range(900)) and min(copies) >= 600


def test_embed_says_where_each_inputs_rows_went(tmp_path, cli_runner):
    """A mixture's embed summary counts each input's rows: embedded + bad + exact copies (+ rows without a response
    token) = its rows in the data. Only the totals were said, so select's `code: 1,111 of 2,015 rows` (Code Alpaca's
    2k sample has 2,017 rows, 2 of them with an empty output) left a user to guess where an input's rows went."""
    from cluster_curate.io.artifacts import read_artifact

    paths = _three(tmp_path)
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
    rows[7]["answer"] = ""  # a bad row of the first input
    paths[0] = str(tmp_path / "gsm.jsonl")
    (tmp_path / "gsm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _cli(cli_runner, ["embed", *paths, "--out", tmp_path / "e.parquet", "--on-bad-row", "skip", "--json"])
    summary = json.loads(res.stdout)
    t, meta = read_artifact(tmp_path / "e.parquet")
    sources = {s["source"]: s for s in summary["sources"]}
    assert list(sources) == ["gsm", "code", "messages-300"]
    for s in sources.values():
        assert s["rows_in_data"] == 300
        assert s["rows"] + s["bad_rows"] + s["exact_duplicates_dropped"] + s["skipped_no_response"] == 300
    assert sources["gsm"]["bad_rows"] == 1 and sum(s["bad_rows"] for s in sources.values()) == summary["bad_rows"]
    assert sources["messages-300"]["exact_duplicates_dropped"] == meta.params["exact_duplicates"]["dropped"] > 0
    embedded = np.bincount(np.asarray(t.column("id")) // 300, minlength=3)
    assert [s["rows"] for s in sources.values()] == embedded.tolist()
    text = _cli(cli_runner, ["embed", *paths, "--out", tmp_path / "e.parquet", "--on-bad-row", "skip",
                             "--overwrite"]).stdout
    assert "299 of 300 rows embedded (1 bad row)" in " ".join(text.replace("│", " ").split())


def test_a_job_array_piece_with_no_row_has_the_mixtures_columns(tmp_path, cli_runner):
    """More pieces than chunks: the pieces that own no chunk still carry `source` and `source_row`, so every
    part of a mixture's embeddings has one schema (readers that take the first part's schema see them all)."""
    from cluster_curate.io.artifacts import read_artifact

    gsm = tmp_path / "g.jsonl"
    gsm.write_text("".join((FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(keepends=True)[:30]))
    code = FIXTURES / "code_alpaca" / "code_alpaca-300.json"
    for i in range(3):
        _cli(cli_runner, ["embed", gsm, code, "--out", tmp_path / "e", "--dim", "16", "--commit-every", "200",
                          "--num-parts", "3", "--part-index", i, "-q"])
    parts = sorted((tmp_path / "e").glob("part-*.parquet"))
    rows = [pq.ParquetFile(p).metadata.num_rows for p in parts]
    assert len(parts) == 3 and 0 in rows and sum(rows) > 0
    schemas = [pq.read_schema(p).remove_metadata() for p in parts]
    assert all(s.equals(schemas[0]) for s in schemas) and {"source", "source_row"} <= set(schemas[0].names)
    table, _ = read_artifact(tmp_path / "e")
    assert set(table.column("source").to_pylist()) == {"g", "code_alpaca-300"}


def test_a_share_option_given_twice_bounds_both_inputs(tmp_path, cli_runner):
    """`--source-min-share a=0.5 --source-min-share code=0.3` kept the last alone (click's way with an option given
    twice): train-300 got 4 of 30 rows, its floor silently dropped. Each time adds its bounds, as one comma list
    would (a later one for the same input wins, as in the list); select and run alike."""
    paths = _three(tmp_path)
    args = ["--budget", "30", "--source-min-share", "train-300=0.5", "--source-min-share", "code=0.3",
            "--source-max-share", "messages-300=0.1", "--source-max-share", "code=0.4"]
    res = json.loads(_cli(cli_runner, ["run", *paths, "--out", tmp_path / "c", "-n", "2", "--k", "6", *args,
                                       "--json"]).stdout)
    assert res["stages"][2]["status"] == "ran"
    from cluster_curate.io.artifacts import read_artifact
    _, meta = read_artifact(tmp_path / "c" / "selection.parquet")
    got = {r["source"]: r["selected"] for r in meta.params["sources"]}
    assert got["train-300"] >= 15 and 9 <= got["code"] <= 12 and got["messages-300"] <= 3 and sum(got.values()) == 30
    state = json.loads((tmp_path / "c" / "run-state.json").read_text())["select"]["option_values"]
    assert (state["source_min_share"], state["source_max_share"]) == ("train-300=0.5,code=0.3",
                                                                      "messages-300=0.1,code=0.4")
    from cluster_curate.cli import main
    shown = cli_runner.invoke(main, ["select", str(tmp_path / "c" / "clusters.parquet"), "--out",
                                     str(tmp_path / "s.parquet"), *args], env={"COLUMNS": "250"}).stdout  # no wrap
    _, alone = read_artifact(tmp_path / "s.parquet")
    assert {r["source"]: r["selected"] for r in alone.params["sources"]} == got
    for r in alone.params["sources"]:  # each share from the counts (the recorded one is rounded to 4 decimals)
        assert f"{r['selected']} of {r['rows']} rows selected ({r['selected'] / 30:.1%} of the selection)" in shown


def test_a_mixture_files_bound_is_lifted_by_a_floor_of_0_and_a_cap_of_1(tmp_path, cli_runner):
    """A file's `min_share` barred --per-cluster-ratio and --within diverse on its clusters for good: a floor of 0
    and a cap of 1 (README's way to lift the file's bounds) still counted as bounds, and the refusal named options
    that were never given. They bound nothing now; the refusal names the bound and where it was set."""
    paths = _three(tmp_path)
    (tmp_path / "mix.yaml").write_text(f"inputs:\n  - path: {paths[0]}\n  - path: {paths[1]}\n    min_share: 0.2\n")
    _cli(cli_runner, ["run", tmp_path / "mix.yaml", "--out", tmp_path / "c", "--budget", "30", "-n", "2", "--k", "6",
                      "-q"])
    clusters, lifted = tmp_path / "c" / "clusters.parquet", ["--source-min-share", "0", "--source-max-share", "1"]
    for i, budget in enumerate((["--per-cluster-ratio", "0.3"], ["--budget", "30", "--within", "diverse"])):
        out = tmp_path / f"s{i}.parquet"
        refused = _cli(cli_runner, ["select", clusters, "--out", out, *budget], code=2)
        assert ("ERROR: source code: its floor 0.2 (the mixture file's min_share) needs a budget taken in "
                "water-filling order, not ") in refused.output, refused.output
        _cli(cli_runner, ["select", clusters, "--out", out, *budget, *lifted, "-q"])
    _cli(cli_runner, ["run", tmp_path / "mix.yaml", "--out", tmp_path / "c", "--per-cluster-ratio", "0.3", "-n", "2",
                      "--k", "6", *lifted, "--overwrite", "-q"])


def test_run_reads_a_mixture_files_bounds_as_they_are_now(tmp_path, cli_runner):
    """An edited `min_share` was ignored: every stage 'up to date', the selection at the old floor (select read the
    bounds embed had recorded). run reads the file each time and selects again; select alone reads the file's with
    --data, naming the file's key where it refuses."""
    paths = _three(tmp_path)
    mix = tmp_path / "mix.yaml"
    mix.write_text(f"inputs:\n  - path: {paths[0]}\n  - path: {paths[1]}\n    min_share: 0.5\n")
    run = ["run", mix, "--out", tmp_path / "c", "--budget", "40", "-n", "2", "--k", "6", "--json"]

    def code_rows(result) -> int:
        sources = json.loads(result.stdout)["summaries"]["select"]["sources"]
        return next(s["selected"] for s in sources if s["source"] == "code")

    assert code_rows(_cli(cli_runner, run)) >= 20
    mix.write_text(mix.read_text().replace("min_share: 0.5", "min_share: 0.75"))
    again = _cli(cli_runner, run)
    assert [(s["stage"], s["status"]) for s in json.loads(again.stdout)["stages"]] == [
        ("embed", "up to date"), ("cluster", "up to date"), ("select", "ran"), ("shard", "ran")]
    assert json.loads(again.stdout)["stages"][2]["reason"] == (
        "its input changed (the mixture file's min_share / max_share changed)")
    assert code_rows(again) >= 30
    assert [s["status"] for s in json.loads(_cli(cli_runner, run).stdout)["stages"]] == ["up to date"] * 4
    bounded = mix.read_text()
    mix.write_text(bounded.replace("    min_share: 0.75\n", ""))  # taken out: the floor embed recorded is not kept
    again = _cli(cli_runner, run)
    assert [s["status"] for s in json.loads(again.stdout)["stages"]][2:] == ["ran", "ran"]
    fresh = _cli(cli_runner, [*run[:3], tmp_path / "fresh", *run[4:]])
    assert code_rows(again) == code_rows(fresh) < 30
    assert [s["status"] for s in json.loads(_cli(cli_runner, run).stdout)["stages"]] == ["up to date"] * 4
    mix.write_text(bounded.replace("min_share: 0.75", "min_share: 0.95"))
    refused = _cli(cli_runner, ["select", tmp_path / "c" / "clusters.parquet", "--out", tmp_path / "s.parquet",
                                "--budget", "400", "--data", mix], code=2)
    assert f"source code: its floor is 380 rows ({mix}: inputs[1].min_share)" in refused.stderr, refused.stderr
    _cli(cli_runner, ["run", paths[0], "--out", tmp_path / "one", "--budget", "40", "-n", "2", "--k", "6", "-q"])
    refused = _cli(cli_runner, ["select", tmp_path / "one" / "clusters.parquet", "--out", tmp_path / "s1.parquet",
                                "--budget", "40", "--data", mix], code=2)  # its bounds were ignored without a word
    assert f"--data {mix}: a mixture file, and the clusters were made from one dataset" in refused.stderr


def test_a_bad_row_of_a_later_input_is_named_by_its_id_in_the_mixture(tmp_path):
    """A later input's bad row was named by its row in that input as its `id` (`id 2` for the mixture's id 22), and
    its hint named --on-bad-row alone; the row in a columnar input is its row there, and its id the mixture's."""
    rows = [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:20]]
    write_jsonl(tmp_path / "a.jsonl", rows)
    bad = [dict(r) for r in rows[:5]]
    bad[2]["answer"] = ""
    write_jsonl(tmp_path / "b.jsonl", bad)
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "b.parquet")
    for name, where in (("b.jsonl", f"{tmp_path / 'b.jsonl'}:3"),
                        ("b.parquet", f"{tmp_path / 'b.parquet'}: row 2 (id 22)")):
        mix = Mixture(mixture_inputs([str(tmp_path / "a.jsonl"), str(tmp_path / name)]))
        with pytest.raises(CurateError) as err:
            [b.examples for b in mix.iter_batches()]
        assert str(err.value).startswith(f"{where}: field 'answer': empty response ("), str(err.value)
        assert ("(id 22; " if name == "b.jsonl" else "(") + "pass --on-bad-row skip, or give the input " \
            "`on_bad_row: skip` in its mixture file, to skip bad rows)" in str(err.value)
        skipping = Mixture(mixture_inputs([str(tmp_path / "a.jsonl"), str(tmp_path / name)],
                                          ReadOptions(on_bad_row="skip")))
        assert [b.examples for b in skipping.iter_batches()] and [r.id for r in skipping.rejects] == [22]


def test_force_takes_changed_inputs_but_not_ids_that_name_other_rows(tmp_path, cli_runner):
    """`shard --data` naming a mixture's inputs in another order is refused with the order to give them and
    `--force to use it anyway`: with --force it wrote other rows under the selected ids (a code row where a GSM8K
    row was selected, with that row's cluster and weight), and so did an input holding fewer rows before the last.
    --force takes an input whose rows changed in place, as it always has."""
    paths = _three(tmp_path)
    _cli(cli_runner, ["run", *paths, "--out", tmp_path / "c", "--budget", "60", "-n", "2", "--k", "6", "-q"])
    sel = tmp_path / "c" / "selection.parquet"
    swapped = [paths[1], paths[0], paths[2]]
    res = _cli(cli_runner, ["shard", sel, *(a for p in swapped for a in ("--data", p)), "--out", tmp_path / "s",
                            "-n", "2", "--force"], code=2)
    assert ("selection.parquet: its ids name the rows of the inputs train-300 from id 0, code from id 300, "
            "messages-300 from id 600, and the data given holds code from id 0, train-300 from id 300, messages-300 "
            "from id 600: other rows under the same ids, which --force cannot use; give the inputs as they were "
            f"embedded, in this order: {' '.join(paths)}") in res.stderr, res.stderr
    assert not (tmp_path / "s").exists()
    rows = list(csv.reader(open(paths[0], newline="")))
    with open(paths[0], "w", newline="") as f:
        csv.writer(f).writerows(rows[:-5])  # 5 rows fewer: the later inputs' ids move
    res = _cli(cli_runner, ["shard", sel, "--out", tmp_path / "s", "-n", "2", "--force"], code=2)
    assert "and the data given holds train-300 from id 0, code from id 295, messages-300 from id 595" in res.stderr
    with open(paths[0], "w", newline="") as f:
        csv.writer(f).writerows(rows[:-1] + [[rows[-1][0] + " Please.", rows[-1][1]]])  # a row changed in place
    _cli(cli_runner, ["shard", sel, "--out", tmp_path / "s", "-n", "2", "--force", "-q"])
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["selected_rows"] == 60


def test_three_input_mixture_through_run(tmp_path, cli_runner):
    import csv

    from cluster_curate.io.artifacts import read_artifact

    paths = _three(tmp_path)
    out = tmp_path / "curated"
    args = ["run", *paths, "--out", out, "--fraction", "0.3", "--num-shards", "2", "--micro-batch-size", "2",
            "--source-min-share", "train-300=0.3", "--keep-duplicates", "--json"]
    res = json.loads(_cli(cli_runner, args).stdout.strip().splitlines()[-1])
    assert [s["status"] for s in res["stages"]] == ["ran"] * 4
    # every artifact row carries (source, source_row), consistent with the global id
    offsets = {"train-300": 0, "code": 300, "messages-300": 600}
    for name in ("embeddings.parquet", "clusters.parquet", "selection.parquet"):
        t, meta = read_artifact(out / name)
        assert [i["name"] for i in meta.dataset["inputs"]] == list(offsets)
        assert all(i == offsets[s] + r for i, s, r in zip(t.column("id").to_pylist(), t.column("source").to_pylist(),
                                                           t.column("source_row").to_pylist()))
    sel, smeta = read_artifact(out / "selection.parquet")
    per = {r["source"]: r for r in smeta.params["sources"]}
    assert sum(r["selected"] for r in per.values()) == 270 and per["train-300"]["selected"] == 81  # ceil(0.3 x 270)
    assert [r["rows"] for r in per.values()] == [300, 300, 300]
    # shards: one table for any trainer, the originals kept value for value
    shards = pa.concat_tables([pq.read_table(p) for p in sorted((out / "shards").glob("shard-*.parquet"))])
    assert shards.column_names[:7] == ["id", "source", "source_row", "prompt", "response", "messages", "system"]
    gsm = list(csv.DictReader(open(GSM_CSV, newline="")))
    code = pq.read_table(ALPACA_PARQUET).to_pylist()
    chat = [json.loads(line) for line in open(CHAT)]
    for row in shards.to_pylist():
        s, r = row["source"], row["source_row"]
        if s == "train-300":
            assert {"question": row["question"], "answer": row["answer"]} == gsm[r]
            assert row["prompt"] == gsm[r]["question"] and row["messages"][-1]["content"] == gsm[r]["answer"]
        elif s == "code":
            assert {k: row[k] for k in code[r]} == code[r] and row["response"] == code[r]["output"]
        else:
            assert row["source_messages"] == chat[r]["messages"] and row["messages"] == chat[r]["messages"]
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    assert {m["source"]: m["selected_rows"] for m in manifest["sources"]} == {k: v["selected"] for k, v in per.items()}
    # an unchanged run is up to date; changing one input re-makes everything downstream of it
    again = json.loads(_cli(cli_runner, args).stdout.strip().splitlines()[-1])
    assert [s["status"] for s in again["stages"]] == ["up to date"] * 4
    with open(paths[2], "a") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "Name a prime."},
                                         {"role": "assistant", "content": "7"}]}) + "\n")
    changed = json.loads(_cli(cli_runner, args).stdout.strip().splitlines()[-1])
    assert [s["status"] for s in changed["stages"]] == ["ran"] * 4
    t, meta = read_artifact(out / "embeddings.parquet")
    assert t.num_rows == 901 and meta.dataset["inputs"][2]["rows"] == 301


def test_mixture_inputs_that_disagree_on_a_column_type_are_one_line(tmp_path, cli_runner):
    (tmp_path / "a.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2", "level": 1}) + "\n")
    pq.write_table(pa.table({"question": ["2+2?"], "answer": ["4"], "level": ["easy"]}), tmp_path / "b.parquet")
    res = _cli(cli_runner, ["run", tmp_path / "a.jsonl", tmp_path / "b.parquet", "--out", tmp_path / "o",
                            "--fraction", "0.5", "--num-shards", "1"], code=2)
    errors = [line for line in res.output.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "column 'level' is string, but input a has it as int64" in errors[0]
    assert not (tmp_path / "o" / "embeddings.parquet").exists()


def test_mixture_inputs_storing_one_kind_of_value_in_other_widths_are_one_column(tmp_path, cli_runner):
    """A JSON Lines input beside a Parquet file pandas wrote (its text as large_string, its whole numbers int64 where
    another file has int32) was refused on `question`, then on `answer` after a rename: one kind of value, kept
    as it is in the wider type. A string beside a whole number is still refused (test above)."""
    import pandas as pd
    rows = [json.loads(line) for line in GSM_JSONL.read_text().splitlines()[:80]]
    write_jsonl(tmp_path / "a.jsonl", [{**r, "level": i % 3} for i, r in enumerate(rows[:30])])
    pd.DataFrame([{**r, "level": i % 3} for i, r in enumerate(rows[30:60], 30)]).to_parquet(tmp_path / "b.parquet")
    pq.write_table(pa.table({"question": [r["question"] for r in rows[60:]], "answer": [r["answer"] for r in rows[60:]],
                             "level": pa.array(range(20), pa.int32())}), tmp_path / "c.parquet")
    assert pq.read_schema(tmp_path / "b.parquet").field("question").type == pa.large_string()
    out = tmp_path / "o"
    _cli(cli_runner, ["run", tmp_path / "a.jsonl", tmp_path / "b.parquet", tmp_path / "c.parquet", "--out", out,
                      "--fraction", "1.0", "--num-shards", "1", "--features", "text", "--dim", "4", "--k", "2", "-q"])
    _cli(cli_runner, ["export", out / "shards", "--for", "jsonl", "--out", tmp_path / "rows", "-q"])
    got = [json.loads(line) for line in (tmp_path / "rows" / "selected.jsonl").read_text().splitlines()]
    given = ([{**r, "level": i % 3} for i, r in enumerate(rows[:60])]
             + [{"question": r["question"], "answer": r["answer"], "level": i} for i, r in enumerate(rows[60:])])
    assert [{k: r[k] for k in ("question", "answer", "level")} for r in got] == given


def test_mixture_whole_numbers_beside_fractions_are_one_float_column_as_in_parquet_parts(tmp_path, cli_runner):
    """A score of whole numbers in one input and fractions in another was refused (rename it) while Parquet parts
    holding the same read it as a float (io/containers): one rule now, a float, said once; a whole number the float
    would round is refused before any work, naming its input, row and value."""
    (tmp_path / "i.jsonl").write_text("".join(json.dumps({"question": f"{n}+{n}?", "answer": str(2 * n), "score": n})
                                              + "\n" for n in range(6)))
    pq.write_table(pa.table({"question": ["2*2?", "3*3?"], "answer": ["4", "9"], "score": [0.5, 1.5]}),
                   tmp_path / "f.parquet")
    out = tmp_path / "o"
    res = _cli(cli_runner, ["run", tmp_path / "i.jsonl", tmp_path / "f.parquet", "--out", out, "--fraction", "1.0",
                            "--num-shards", "1", "--features", "text", "--dim", "4", "--k", "2"])
    assert "column 'score' holds whole numbers in input i and fractions in another: read as double" in res.output
    shard = pq.read_table(next((out / "shards").glob("shard-*.parquet")))
    assert shard.schema.field("score").type == pa.float64()
    assert sorted(zip(shard.column("source").to_pylist(), shard.column("score").to_pylist())) == \
        [("f", 0.5), ("f", 1.5)] + [("i", float(n)) for n in range(6)]
    pq.write_table(pa.table({"question": ["1+1?", "9+9?"], "answer": ["2", "18"],
                             "score": pa.array([1, 2 ** 53 + 1], pa.int64())}), tmp_path / "big.parquet")
    res = _cli(cli_runner, ["run", tmp_path / "big.parquet", tmp_path / "f.parquet", "--out", tmp_path / "o2",
                            "--fraction", "1.0", "--num-shards", "1"], code=2)
    errors = [line for line in res.output.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].endswith(
        f"big.parquet: row 1: column 'score' holds {2 ** 53 + 1} (int64), which the double that column is beside the "
        "other inputs' fractions cannot hold as written; rename one of them in a mixture file (rename: "
        "{score: score_big})")
    assert not (tmp_path / "o2").exists()


def test_mixture_objects_of_the_same_keys_and_other_types_are_one_line_before_any_work(tmp_path, cli_runner):
    """Objects whose keys differ between inputs are JSON text in the shards; objects of the same keys whose values
    disagree in type are no other shape of record: refused before embed, as a flat column's types are."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2", "meta": {"level": 1}}) + "\n")
    pq.write_table(pa.table({"question": ["2+2?"], "answer": ["4"], "meta": [{"level": "easy"}]}),
                   tmp_path / "b.parquet")
    res = _cli(cli_runner, ["run", tmp_path / "a.jsonl", tmp_path / "b.parquet", "--out", tmp_path / "o",
                            "--fraction", "0.5", "--num-shards", "1"], code=2)
    errors = [line for line in res.output.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "column 'meta' is struct<level: string>, but input a has it as" in errors[0]
    assert not (tmp_path / "o" / "embeddings.parquet").exists()


def test_mixture_shards_export_for_a_trainer_and_as_the_selected_rows(tmp_path, cli_runner):
    """A mixture's shards go through `export` like one dataset's: TRL's columns in the planned order, and the
    selected rows, each with its source and its own input's columns alone."""
    paths = _three(tmp_path)[:2]
    out = tmp_path / "curated"
    _cli(cli_runner, ["run", *paths, "--out", out, "--fraction", "0.3", "--num-shards", "2",
                      "--micro-batch-size", "2", "-q"])
    shards = pa.concat_tables([pq.read_table(p) for p in sorted((out / "shards").glob("shard-*.parquet"))])
    _cli(cli_runner, ["export", out / "shards", "--for", "trl", "--out", tmp_path / "trl", "-q"])
    trl = pq.read_table(tmp_path / "trl" / "train.parquet")
    assert {"prompt", "completion", "id", "weight"} <= set(trl.column_names)
    assert sorted(trl.column("id").to_pylist()) == sorted(shards.column("id").to_pylist())
    _cli(cli_runner, ["export", out / "shards", "--for", "jsonl", "--out", tmp_path / "rows", "-q"])
    rows = [json.loads(line) for line in (tmp_path / "rows" / "selected.jsonl").read_text().splitlines()]
    assert len(rows) == len(set(shards.column("id").to_pylist()))
    assert {r["source"] for r in rows} == {"train-300", "code"}
    assert {tuple(r) for r in rows} == {("source", "source_row", "question", "answer"),
                                        ("source", "source_row", "instruction", "input", "output")}


def test_a_rename_names_an_inputs_columns_as_its_file_does(tmp_path, cli_runner):
    """`rename: {id: qid}` names the input's own `id` column (a raw batch holds it as `source_id`): it was refused
    as 'no column id (its columns: question, answer, source_id)'. The shards and the export keep it as `qid`."""
    rows = [{**json.loads(line), "id": f"q{i}"} for i, line in enumerate(GSM_JSONL.read_text().splitlines()[:30])]
    write_jsonl(tmp_path / "math.jsonl", rows)
    shutil.copytree(ALPACA_PARQUET, tmp_path / "code.parquet")
    mix = tmp_path / "mix.yaml"
    mix.write_text("inputs:\n  - {path: math.jsonl, rename: {id: qid}}\n  - {path: code.parquet}\n")
    assert "qid" in Mixture(mixture_inputs([str(mix)])).check_columns().names
    _cli(cli_runner, ["run", mix, "--out", tmp_path / "out", "--budget", "20", "-n", "2", "-q"])
    _cli(cli_runner, ["export", tmp_path / "out" / "shards", "--for", "jsonl", "--out", tmp_path / "rows", "-q"])
    got = [json.loads(line) for line in (tmp_path / "rows" / "selected.jsonl").read_text().splitlines()]
    math = [r for r in got if r["source"] == "math"]
    assert math and all(r == {"source": "math", "source_row": r["source_row"], "question": rows[r["source_row"]][
        "question"], "answer": rows[r["source_row"]]["answer"], "qid": rows[r["source_row"]]["id"]} for r in math)
    mix.write_text("inputs:\n  - {path: math.jsonl, rename: {idx: qid}}\n  - {path: code.parquet}\n")
    with pytest.raises(CurateError, match=r"input math has no column 'idx' \(its columns: question, answer, id\)"):
        Mixture(mixture_inputs([str(mix)])).check_columns()


def test_mixture_shards_with_left_over_rows_export_the_selected_rows(tmp_path, cli_runner):
    """`export --for jsonl|parquet` reads a mixture's left-over rows (in no shard) from the mixture its manifest
    records, each input with its own options, or from its mixture file given as --data."""
    import csv

    _three(tmp_path)
    mix = tmp_path / "mix.yaml"
    mix.write_text("inputs:\n  - {path: train-300.csv, name: math}\n"
                   "  - {path: code.parquet, name: code, on_bad_row: skip, min_share: 0.3}\n")
    out = tmp_path / "curated"
    _cli(cli_runner, ["run", mix, "--out", out, "--fraction", "0.25", "--num-shards", "2",
                      "--micro-batch-size", "2", "--keep-duplicates", "-q"])
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    assert manifest["leftover_ids"]  # selected rows `--remainder drop` left out of the shards
    mix_figures = manifest["balance"]["input_mix"]  # a mixture's: the share of steps holding both inputs
    assert mix_figures["inputs"] == 2 and 0 <= mix_figures["steps_mixing"] <= 1 and 0 < mix_figures["random"] < 1
    reported = json.loads(_cli(cli_runner, ["report", out, "--json"]).output.strip().splitlines()[-1])
    assert reported["shards"]["input_mix"] == mix_figures  # and `report` shows it
    selected = pq.read_table(out / "selection.parquet", columns=["id", "source", "source_row"]).sort_by("id")
    gsm = list(csv.DictReader(open(GSM_CSV, newline="")))
    code = pq.read_table(ALPACA_PARQUET).to_pylist()
    runs = {"none": [], "mixture file": ["--data", mix],  # and its inputs' paths: read as recorded (names, options)
            "inputs": ["--data", tmp_path / "train-300.csv", "--data", tmp_path / "code.parquet"]}
    for label, data in runs.items():
        _cli(cli_runner, ["export", out / "shards", "--for", "jsonl", "--out", tmp_path / f"rows-{label}", "-q",
                          *data])
        rows = [json.loads(line) for line in (tmp_path / f"rows-{label}" / "selected.jsonl").read_text().splitlines()]
        # the original records in id order, value for value and nothing else, left-overs included
        assert rows == [{**r, **(gsm[r["source_row"]] if r["source"] == "math" else code[r["source_row"]])}
                        for r in selected.select(["source", "source_row"]).to_pylist()], label
    _cli(cli_runner, ["export", out / "shards", "--for", "parquet", "--out", tmp_path / "pq", "-q"])
    assert [{k: v for k, v in r.items() if v is not None}  # one table: null in the other input's columns
            for r in pq.read_table(tmp_path / "pq" / "selected.parquet").to_pylist()] == [
        json.loads(line) for line in (tmp_path / "rows-none" / "selected.jsonl").read_text().splitlines()]
    # the inputs in another order are another mixture: refused, with what to pass instead
    res = _cli(cli_runner, ["export", out / "shards", "--for", "jsonl", "--out", tmp_path / "x",
                            "--data", tmp_path / "code.parquet", "--data", tmp_path / "train-300.csv"], code=2)
    assert (f"shards: was made from mixture of math, code (fingerprint {manifest['dataset']['fingerprint']}), not "
            "from mixture of code, train-300") in res.output, res.output  # shard's line: what to pass, in order
    assert (f"pass --data once per input, in this order: {tmp_path / 'train-300.csv'} {tmp_path / 'code.parquet'} (or "
            "its mixture file), or --force to use it anyway (the 2 selected rows left over") in res.output, res.output


def test_shard_given_one_input_of_a_mixture_says_which_inputs_in_which_order(tmp_path, cli_runner):
    """`shard sel --data a.jsonl` for a selection of `a.jsonl b.json` said only 'was made from mixture of a, b ...,
    not from a.jsonl ...; pass --force': not that --data is given once per input, nor in which order."""
    paths = _three(tmp_path)[:2]
    out = tmp_path / "curated"
    _cli(cli_runner, ["run", *paths, "--out", out, "--fraction", "0.3", "--num-shards", "2", "-q"])
    for inputs in ([paths[0]], [paths[1], paths[0]]):
        res = _cli(cli_runner, ["shard", out / "selection.parquet", *[a for p in inputs for a in ("--data", p)],
                                "--out", tmp_path / "sh", "--num-shards", "2"], code=2)
        assert f"pass --data once per input, in this order: {paths[0]} {paths[1]} (or its mixture file), or " \
               "--force to use it anyway" in res.output, res.output


@pytest.mark.parametrize("by_file", [False, True], ids=["inputs", "mixture-file"])
def test_shard_without_data_reads_the_mixture_the_selection_records(tmp_path, cli_runner, monkeypatch, by_file):
    """--data left out: a mixture's inputs (or its file), given by relative paths, are found from another working
    directory and from a moved folder; the shards are the same as `run`'s, which passed the data itself."""
    work = tmp_path / "work"
    work.mkdir()
    names = [Path(p).name for p in _three(work)[:2]]
    monkeypatch.chdir(work)
    if by_file:
        (work / "mix.yaml").write_text("inputs:\n" + "".join(f"  - path: {n}\n" for n in names))
    _cli(cli_runner, ["run", *(["mix.yaml"] if by_file else names), "--out", "curated", "--features", "text", "--dim",
                      "16", "--k", "6", "--fraction", "0.3", "--num-shards", "2", "-q"])
    ran = json.loads((work / "curated" / "shards" / "manifest.json").read_text())
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    _cli(cli_runner, ["shard", "../work/curated/selection.parquet", "--out", "sh", "--num-shards", "2", "-q"])
    shard_ids = [pq.read_table(tmp_path / "b" / "sh" / f["file"]).column("id").to_pylist() for f in ran["files"]]
    assert shard_ids == [pq.read_table(work / "curated" / "shards" / f["file"]).column("id").to_pylist()
                         for f in ran["files"]]
    assert json.loads((tmp_path / "b" / "sh" / "manifest.json").read_text())["fingerprint"] == ran["fingerprint"]
    work.rename(tmp_path / "moved")  # the folder with its data: found beside the selection
    _cli(cli_runner, ["shard", "../moved/curated/selection.parquet", "--out", "sh2", "--num-shards", "2", "-q"])
    assert json.loads((tmp_path / "b" / "sh2" / "manifest.json").read_text())["fingerprint"] == ran["fingerprint"]
    changed = tmp_path / "moved" / names[0]  # one input changed since: named as a missing one is, not the mixture
    changed.write_text(changed.read_text() + '"What is 1 + 1?","1 + 1 = 2\n#### 2"\n')
    res = _cli(cli_runner, ["shard", "../moved/curated/selection.parquet", "--out", "sh3", "--num-shards", "2"], code=2)
    assert re.fullmatch(r"ERROR: \.\./moved/train-300.csv \(input train-300 of the mixture selection.parquet records\) "
                        r"has changed since \(fingerprint \w+, \w+ when recorded\); pass --data DATA \(the data it "
                        r"was made from\), or --force to use it as it is now\n", res.output), res.output
