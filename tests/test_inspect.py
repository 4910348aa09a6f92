"""`cluster-curate inspect`: through click's CliRunner, and through a real subprocess for exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from cluster_curate.cli import main

from conftest import FIXTURES, ROOT, make_unreadable
from test_datasets import BAD_INPUTS, CODE_ALPACA, GOOD_FIXTURES, GSM8K, write_jsonl


def run(cli_runner, *args):
    result = cli_runner.invoke(main, ["inspect", *map(str, args)])
    assert "Traceback" not in result.output
    return result


def run_json(cli_runner, *args) -> dict:
    result = run(cli_runner, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("rel", sorted(GOOD_FIXTURES))
def test_inspect_every_fixture(cli_runner, rel):
    container, fmt = GOOD_FIXTURES[rel]
    r = run_json(cli_runner, FIXTURES / rel)
    assert (r["rows"], r["examples"], r["rejected"], r["format"], r["container"]) == (300, 300, 0, fmt, container)
    assert r["lengths"]["prompt_chars"]["min"] > 0 and r["lengths"]["response_chars"]["max"] >= 1
    assert r["duplicates"] == 0


def test_inspect_table_on_a_terminal(cli_runner):
    result = run(cli_runner, FIXTURES / "chat" / "messages-300.jsonl")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for expected in ("format", "messages", "rows", "300", "prompt chars", "response chars", "p90",
                     "multi-turn (context turns)", "prompt=messages, response=messages"):
        assert expected in out, expected
    lines = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3}
    assert lines["with a system prompt"] == "200" and lines["multi-turn (context turns)"] == "100"


def test_inspect_counts_exact_duplicates(cli_runner, tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "a"}, {"question": "q", "answer": "a"},
                                           {"question": "q", "answer": "b"}, {"question": "r", "answer": "a"},
                                           {"question": "q", "answer": "a"}])
    r = run_json(cli_runner, p)
    assert (r["duplicates"], r["duplicate_prompts"]) == (2, 3)
    assert r["lengths"]["response_chars"] == {"min": 1, "p50": 1, "p90": 1, "p99": 1, "max": 1, "mean": 1.0,
                                              "total": 5}
    # the copies embed leaves out: the same text after NFC and runs of whitespace (as exact_dedup keys them)
    p = write_jsonl(tmp_path / "n.jsonl", [{"question": "e\u0301cole  caf\u00e9", "answer": "a"},
                                           {"question": "\u00e9cole caf\u00e9", "answer": "a"},
                                           {"question": "x", "answer": "hello   world"},
                                           {"question": "x", "answer": "hello world"}])
    r = run_json(cli_runner, p)
    assert (r["duplicates"], r["duplicate_prompts"]) == (2, 2)


@pytest.mark.parametrize("name,opts,pattern", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_inspect_bad_inputs_exit_2_with_one_error_line(cli_runner, name, opts, pattern):
    p = FIXTURES / "bad" / name
    args = ["--on-bad-row", opts["on_bad_row"]] if opts else []
    result = run(cli_runner, *args, p)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == 1, result.stderr
    msg = errors[0][len("ERROR: "):]
    # a bad row: inspect lists them all, then fails with the first one (same text as embed/shard would print,
    # without the `(id N; ` note)
    pattern = pattern.replace(r"\(id 3; ", r"\(").replace(r"\(id 2;", r"\(").format(p=re.escape(str(p)))
    assert re.search(pattern, msg), msg


def test_inspect_skip_writes_rejects_and_exits_0(cli_runner, tmp_path):
    out = tmp_path / "rejects.jsonl"
    src = FIXTURES / "bad" / "empty_response.jsonl"
    r = run_json(cli_runner, "--on-bad-row", "skip", "--rejects", out, src)
    assert (r["rows"], r["examples"], r["rejected"], r["output"]) == (8, 6, 2, str(out))
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == r["rejects"] == [
        {"id": 2, "location": f"{src}:3", "field": "answer", "reason": "empty response"},
        {"id": 4, "location": f"{src}:5", "field": "answer", "reason": "missing response"}]
    again = run(cli_runner, "--on-bad-row", "skip", "--rejects", out, src)
    assert again.exit_code == 2 and "already exists (pass --overwrite" in again.stderr
    assert run(cli_runner, "--on-bad-row", "skip", "--rejects", out, "--overwrite", src).exit_code == 0
    table = run(cli_runner, "--on-bad-row", "skip", src)
    assert table.exit_code == 0
    assert "rejected id 2" in table.stderr and "field 'answer': empty response" in table.stderr


def test_inspect_error_mode_still_reports_everything(cli_runner):
    result = run(cli_runner, "--json", FIXTURES / "bad" / "empty_response.jsonl")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["rejected"] == 2
    assert "2 bad rows in all" in result.stderr


def test_inspect_field_overrides(cli_runner):
    p = FIXTURES / "bad" / "unknown_format.jsonl"
    r = run_json(cli_runner, "--prompt-field", "text", "--response-field", "label", p)
    assert (r["format"], r["fields"], r["examples"]) == ("prompt-completion", {"prompt": "text", "response": "label"}, 2)
    # the prompt named on the column the format reads the response from: refused (it read the answer as both)
    r = run(cli_runner, "--format", "qa", "--prompt-field", "answer", FIXTURES / "gsm8k" / "train-300.jsonl")
    assert r.exit_code == 2 and "--prompt-field 'answer' is the response's column too" in r.stderr


def test_inspect_hub_id_offline(cli_runner, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    result = run(cli_runner, "nobody/no-such-set")
    assert result.exit_code == 2
    assert "hub is offline" in result.stderr and "not in the local cache" in result.stderr


def _word_tokenizer(tmp_path, chat_template=None):
    """A real word-level tokenizer (whitespace split), saved and then loaded by path as a user would."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    if chat_template:
        fast.chat_template = chat_template
    path = tmp_path / ("tok-chat" if chat_template else "tok")
    fast.save_pretrained(path)
    return path


@pytest.mark.slow
def test_inspect_token_lengths(cli_runner, tmp_path):
    src = FIXTURES / "chat" / "messages-300.jsonl"
    rows = [json.loads(line)["messages"] for line in src.read_text().splitlines()]
    response_words = sorted(len(m[-1]["content"].split()) for m in rows)
    prompt_words = [sum(len(t["content"].split()) for t in m[:-1]) for m in rows]

    r = run_json(cli_runner, "--tokenizer", _word_tokenizer(tmp_path), src)
    assert r["lengths"]["response_tokens"]["max"] == response_words[-1]
    assert r["lengths"]["response_tokens"]["total"] == sum(response_words)
    assert r["lengths"]["prompt_tokens"]["total"] == sum(prompt_words)
    # with a chat template, the prompt is counted as the model will see it: one marker per turn + the generation one
    template = "{% for m in messages %}<{{ m.role }}> {{ m.content }} {% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    r = run_json(cli_runner, "--tokenizer", _word_tokenizer(tmp_path, template), src)
    assert r["lengths"]["prompt_tokens"]["total"] == sum(prompt_words) + sum(len(m) - 1 for m in rows) + len(rows)
    bad = run(cli_runner, "--tokenizer", tmp_path / "nope", src)
    assert bad.exit_code == 2 and "--tokenizer" in bad.stderr and "not a directory" in bad.stderr


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present (the shared real datasets are not here)")
def test_inspect_real_gsm8k(cli_runner):
    r = run_json(cli_runner, GSM8K)
    assert (r["rows"], r["examples"], r["rejected"], r["format"]) == (7473, 7473, 0, "qa")


@pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present (the shared real datasets are not here)")
def test_inspect_counts_an_evaluation_sets_questions(cli_runner, tmp_path):
    """inspect --decontaminate EVAL counts the rows that ask EVAL's questions, as select --decontaminate would
    leave them out (copies whatever the answer; with --decontaminate-ngrams, shared runs of words too)."""
    test = [json.loads(line) for line in (GSM8K.parent / "test.jsonl").read_text().splitlines()[:40]]
    rows = [json.loads(line) for line in GSM8K.read_text().splitlines()[:200]]
    rows += [test[0], {"question": test[1]["question"], "answer": "Another.\n#### 1"},
             {"question": test[2]["question"] + " Show your work.", "answer": test[2]["answer"]}]
    data = tmp_path / "pool.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = tmp_path / "eval.csv"  # another format
    evals.write_text("question,answer\n" + "".join(f'"{t["question"]}",x\n' for t in test))
    (d,) = run_json(cli_runner, data, "--decontaminate", evals)["decontamination"]
    assert (d["rows"], d["questions_in_pool"], d["questions"], d["ids"]) == (2, 2, 40, [200, 201])
    r = run_json(cli_runner, data, "--decontaminate", evals, "--decontaminate-ngrams", "13")
    (d,) = r["decontamination"]
    assert (d["rows"], d["copies"], d["ngram_rows"], d["ids"]) == (3, 2, 1, [200, 201, 202])
    from cluster_curate.summary_schema import check, schema_of
    assert check(r, schema_of("inspect")) == []
    shown = run(cli_runner, data, "--decontaminate", evals)
    assert "2 rows ask 2 of its 40" in shown.output and "ids 200, 201" in shown.output
    bad = run(cli_runner, data, "--decontaminate-ngrams", "13")
    assert bad.exit_code == 2 and "only used with --decontaminate" in bad.stderr


def test_inspect_names_an_evaluation_set_as_its_file_is_named(cli_runner, tmp_path):
    """The table's line for an evaluation set keeps its file name: BFCL's `BFCL_v3_simple.json`, not 'BFCL v3
    simple.json' (a summary key's underscores are shown as spaces; a file name is no key)."""
    question = "Find the area of a triangle with a base of 10 units and height of 5 units."
    evals = tmp_path / "BFCL_v3_simple.json"  # JSON lines, as BFCL writes them
    evals.write_text(json.dumps({"id": "simple_0", "question": [[{"role": "user", "content": question}]],
                                 "function": [{"name": "calculate_triangle_area", "parameters": {}}]}) + "\n")
    data = write_jsonl(tmp_path / "pool.jsonl", [{"instruction": question, "output": "25 square units."},
                                                 {"instruction": "Say hi.", "output": "Hi."}])
    shown = run(cli_runner, data, "--decontaminate", evals)
    assert shown.exit_code == 0, shown.output
    assert "questions of BFCL_v3_simple.json" in shown.output and "BFCL v3" not in shown.output


@pytest.mark.skipif(not CODE_ALPACA.exists(), reason=f"{CODE_ALPACA} not present (the shared real datasets are not here)")
def test_inspect_real_code_alpaca(cli_runner):
    r = run_json(cli_runner, "--on-bad-row", "skip", CODE_ALPACA)
    assert (r["rows"], r["examples"], r["rejected"], r["format"]) == (2017, 2015, 2, "alpaca")
    assert [x["id"] for x in r["rejects"]] == [237, 1859]
    strict = run(cli_runner, CODE_ALPACA)
    assert strict.exit_code == 2
    assert f"ERROR: {CODE_ALPACA}:1187: field 'output': empty response" in strict.stderr


# ------------------------------------------------------------------------------------------ a real process

def _subprocess(*args):
    return subprocess.run([sys.executable, "-m", "cluster_curate", "inspect", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_subprocess_exit_codes_and_no_traceback(tmp_path):
    bad = FIXTURES / "bad" / "invalid_json.jsonl"
    r = _subprocess(bad)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    assert r.stderr.strip().splitlines()[-1].startswith(f"ERROR: {bad}:4: invalid JSON (")

    r = _subprocess(tmp_path / "missing.jsonl")
    assert r.returncode == 2 and r.stderr.strip() == f"ERROR: {tmp_path / 'missing.jsonl'}: no such file or directory"

    r = _subprocess("--json", "--on-bad-row", "skip", bad)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert json.loads(r.stdout)["rejected"] == 1


def test_inspect_unreadable_file(cli_runner, tmp_path, monkeypatch):
    p = write_jsonl(tmp_path / "secret.jsonl", [{"question": "a", "answer": "b"}])
    make_unreadable(p, monkeypatch)
    result = run(cli_runner, p)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"ERROR: {p}: cannot read it (permission denied); make it readable (chmod u+r) "
                                     "or run as a user who may read it")


def test_inspect_mixture_exit_status_follows_each_inputs_on_bad_row(cli_runner, tmp_path):
    """A mixture file input's own `on_bad_row: skip` is honoured as embed and run honour it; --on-bad-row is the
    default of the inputs that set none. Every bad row is listed either way."""
    import shutil
    bad = FIXTURES / "bad" / "empty_response.jsonl"  # 2 bad rows
    shutil.copy(bad, tmp_path / "bad.jsonl")
    shutil.copy(bad, tmp_path / "bad2.jsonl")
    shutil.copy(FIXTURES / "gsm8k" / "train-300.jsonl", tmp_path / "good.jsonl")
    mix = tmp_path / "mix.yaml"
    mix.write_text("inputs:\n  - {path: good.jsonl, name: math}\n  - {path: bad.jsonl, name: bad, on_bad_row: skip}\n")
    ok = run(cli_runner, mix)
    assert ok.exit_code == 0, ok.output
    assert not [ln for ln in ok.output.splitlines() if ln.startswith("ERROR")]
    assert ok.stderr.count("rejected id") == 2  # listed, not an error
    # the other input sets none: the command line's default (error) is its own, and only its rows fail
    mix.write_text("inputs:\n  - {path: bad.jsonl, name: bad, on_bad_row: skip}\n  - {path: bad2.jsonl, name: b2}\n")
    res = run(cli_runner, "--json", mix)
    assert res.exit_code == 2 and json.loads(res.stdout)["rejected"] == 4
    errors = [line for line in res.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and errors[0].startswith("ERROR: ") and "bad2.jsonl" in errors[0]
    assert "2 bad rows in all" in errors[0] and "on_bad_row: skip" in errors[0]
    assert run(cli_runner, "--on-bad-row", "skip", mix).exit_code == 0
    # an input's own `on_bad_row: error` is not overridden by --on-bad-row skip
    mix.write_text("inputs:\n  - {path: good.jsonl}\n  - {path: bad.jsonl, on_bad_row: error}\n")
    assert run(cli_runner, "--on-bad-row", "skip", mix).exit_code == 2
    # several inputs on the command line: --on-bad-row for each
    assert run(cli_runner, tmp_path / "good.jsonl", tmp_path / "bad.jsonl").exit_code == 2
    assert run(cli_runner, "--on-bad-row", "skip", tmp_path / "good.jsonl", tmp_path / "bad.jsonl").exit_code == 0


def test_inspect_mixture_table_shows_fields_per_input_not_a_python_dict(cli_runner):
    """`inspect a.jsonl b.json` printed `fields  a={'prompt': 'question', ...}, b={...}` in its summary (a Python
    dict, wrapped over lines); the inputs table below has them per input, so the summary points there."""
    result = run(cli_runner, FIXTURES / "gsm8k" / "train-300.jsonl", FIXTURES / "code_alpaca" / "code_alpaca-300.json")
    assert result.exit_code == 0, result.output
    lines = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in result.stdout.splitlines()
             if line.count("│") == 3}
    assert lines["fields"] == "per input (below)"
    assert "{'prompt'" not in result.stdout and "prompt=question, response=answer" in result.stdout


def test_a_dataset_dict_says_which_split_it_reads(cli_runner, tmp_path):
    """`inspect dd/` of a save_to_disk DatasetDict with train and test read 'train' without a word: a user who
    meant the test split, or all of it, could not tell from any output. Now one line, once per command."""
    import datasets
    rows = {"question": ["a", "b"], "answer": ["1", "2"]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
                         ).save_to_disk(str(tmp_path / "dd"))
    result = run(cli_runner, tmp_path / "dd")
    assert result.exit_code == 0, result.output
    said = f"dd: a DatasetDict of splits train, test: reading 'train' (pass {tmp_path / 'dd'}/SPLIT for another)"
    assert result.stderr.count(said) == 1, result.stderr
    assert "DatasetDict" not in run(cli_runner, tmp_path / "dd" / "test").stderr


def test_inspect_labels_bad_rows_apart_from_a_pairs_rejected_answers(tmp_path, cli_runner):
    """A preference file's table: the count of bad rows is not labelled 'rejected' beside the rejected answers'
    lengths, and a row of tool schemas shows only where some row has them."""
    pairs = tmp_path / "pairs.jsonl"
    write_jsonl(pairs, [{"prompt": f"What is {i} + {i}?", "chosen": str(2 * i), "rejected": str(2 * i + 1)}
                        for i in range(6)] + [{"prompt": "What is 9 + 9?", "chosen": "18", "rejected": ""}])
    table = run(cli_runner, "--on-bad-row", "skip", pairs)
    assert table.exit_code == 0, table.output
    lines = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in table.stdout.splitlines()
             if line.count("│") >= 3}
    assert lines["bad rows"] == "1" and "rejected" not in lines and "with tool schemas" not in lines
    assert lines["rejected chars"].split()[0] == "1"  # the rejected answers' lengths, min 1 character
    tools = tmp_path / "tools.jsonl"
    write_jsonl(tools, [{"instruction": "Weather in Oslo?", "output": "Cold.",
                         "tools": [{"type": "function", "function": {"name": "weather"}}]}])
    lines = run(cli_runner, tools).stdout
    assert re.search(r"with tool schemas\s+│\s+1\s", lines), lines


def test_inspect_mixture_writes_rejects_of_every_input(cli_runner, tmp_path):
    """--rejects with several inputs writes the mixture's rejects, ids and lines as one input's are written."""
    import shutil
    bad = tmp_path / "bad.jsonl"
    shutil.copy(FIXTURES / "bad" / "empty_response.jsonl", bad)  # 8 rows, 2 bad
    good = FIXTURES / "gsm8k" / "train-300.jsonl"
    out = tmp_path / "rejects.jsonl"
    r = run_json(cli_runner, "--on-bad-row", "skip", "--rejects", out, good, bad)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == r["rejects"]
    assert [(x["id"], x["location"], x["field"]) for x in written] == [
        (302, f"{bad}:3", "answer"), (304, f"{bad}:5", "answer")]


def test_inspect_rejects_into_a_device_or_pipe_is_refused_and_leaves_it(cli_runner, tmp_path):
    """--rejects /dev/null --overwrite replaced the device with a regular file (an empty first line passed as a
    rejects list the tool wrote); /dev/stdout waited on a lock it could not make. A pipe stands for both here (a
    test must not risk /dev/null): refused at once."""
    import os
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    src = FIXTURES / "bad" / "empty_response.jsonl"
    r = run(cli_runner, "--on-bad-row", "skip", "--rejects", fifo, "--overwrite", src)  # a device reads alike
    assert r.exit_code == 2 and r.stderr.strip() == (f"ERROR: --rejects {fifo}: not a regular file (a device or a "
                                                     "pipe); name a file to write"), r.output
    assert fifo.is_fifo()
