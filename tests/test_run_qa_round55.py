"""QA round 55 on `run`, `inspect` and the option parser: data whose every row is bad refused by run as embed refuses
it, an --out that is a file, the data input that changed named, inspect's help saying what it lists and writes, the
split of a DatasetDict read in inspect's JSON, and option names with the same words in another order suggested
(tests build their own inputs)."""

from __future__ import annotations

import json

import pytest

from cluster_curate.commands.inspect import INSPECT_LISTED_REJECTS
from cluster_curate.summary_schema import check, schema_of
from conftest import FIXTURES, cli_in_process

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"


def _ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _sharegpt_speakers(path, n=400):
    """ShareGPT's human/gpt turns under `messages`: every row a bad row unless read as sharegpt."""
    path.write_text("".join(json.dumps({"messages": [{"role": "human", "content": f"question {i}"},
                                                      {"role": "gpt", "content": f"answer {i}"}]}) + "\n"
                            for i in range(n)))
    return path


# ------------------------------------------------------- defect 1: every row bad, refused by run as embed refuses it


@pytest.mark.parametrize("plan", [["--num-shards", "8", "--micro-batch-size", "4"], ["-n", "1", "-m", "1"],
                                  ["-n", "1", "--k", "5"]])
def test_run_refuses_data_whose_every_row_is_bad_with_embeds_message(tmp_path, plan):
    """`run --on-bad-row skip` on data of bad rows alone blamed the plan ("--fraction 0.31 of 0 rows selects at
    most 0; use fewer shards"), an impossible hint; embed says why and how to read them."""
    data = _sharegpt_speakers(tmp_path / "msg_hg.jsonl")
    embed = cli_in_process("embed", data.name, "--on-bad-row", "skip", "--out", "x.parquet", cwd=tmp_path)
    assert embed.returncode == 2
    assert "ShareGPT speakers: pass --format sharegpt --prompt-field messages" in embed.stderr
    r = cli_in_process("run", data.name, "--on-bad-row", "skip", "--out", "r", "--fraction", "0.31", *plan,
                       cwd=tmp_path)
    assert (r.returncode, r.stdout) == (2, "")
    listed = "listed in r/embeddings.rejects.jsonl"
    assert r.stderr.splitlines()[-1] == embed.stderr.splitlines()[-1].replace("listed in x.rejects.jsonl", listed)
    assert r.stderr.splitlines()[-1].startswith("ERROR: msg_hg.jsonl: all 400 rows are bad rows, skipped")
    assert len((tmp_path / "r" / "embeddings.rejects.jsonl").read_text().splitlines()) == 400
    assert not (tmp_path / "r" / "run-state.json").exists()
    # read as the message says, the same directory runs (the rejects list it left is embed's to replace)
    _ok(cli_in_process("run", data.name, "--format", "sharegpt", "--prompt-field", "messages", "--out", "r",
                       "--fraction", "0.31", "-n", "1", "-m", "1", "-q", cwd=tmp_path))
    assert not (tmp_path / "r" / "embeddings.rejects.jsonl").exists()


# ------------------------------------------------------------------------------ defect 2: --out naming a file


def test_run_out_naming_a_file_says_out_is_a_directory(tmp_path):
    afile = tmp_path / "runs" / "afile"
    afile.parent.mkdir()
    afile.write_text("mine\n")
    r = cli_in_process("run", GSM, "--out", "runs/afile", "--fraction", "0.3", "-n", "2", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("ERROR: --out runs/afile: is a file; run's --out is a directory, for the artifacts of "
                        "every stage: name a directory (a new one is made)\n")
    assert afile.read_text() == "mine\n" and sorted(p.name for p in afile.parent.iterdir()) == ["afile"]


# ------------------------------------------------------------------------ defect 3: the data input that changed


def _two_inputs(tmp_path):
    rows = [json.loads(line) for line in GSM.read_text().splitlines()]
    (tmp_path / "m1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:150]))
    (tmp_path / "m2.json").write_text(json.dumps(rows[150:]))


def _reasons(r) -> dict:
    return {s["stage"]: s.get("reason") for s in json.loads(_ok(r).stdout)["stages"]}


def test_run_names_the_data_input_whose_content_changed(tmp_path):
    _two_inputs(tmp_path)
    args = ("run", "m1.jsonl", "m2.json", "--out", "rm2", "--fraction", "0.3", "-n", "2", "--json")
    _ok(cli_in_process(*args, cwd=tmp_path))
    m1 = tmp_path / "m1.jsonl"
    m1.write_text(m1.read_text().replace("Natalia", "Natasha"))
    assert _reasons(cli_in_process(*args, cwd=tmp_path))["embed"] == "its input changed (m1.jsonl: its content changed)"
    m1.write_text(m1.read_text().replace("Natasha", "Nadia"))
    m2 = tmp_path / "m2.json"
    m2.write_text(m2.read_text().replace('"question": "', '"question": "Q: '))
    assert _reasons(cli_in_process(*args, cwd=tmp_path))["embed"] == \
        "its input changed (m1.jsonl, m2.json: their content changed)"
    assert _reasons(cli_in_process(*args, cwd=tmp_path))["embed"] is None  # up to date


def test_run_names_a_single_input_that_changed_and_inputs_given_otherwise(tmp_path):
    _two_inputs(tmp_path)
    one = ("run", "m1.jsonl", "--out", "r", "--fraction", "0.3", "-n", "2", "--json")
    _ok(cli_in_process(*one, cwd=tmp_path))
    m1 = tmp_path / "m1.jsonl"
    m1.write_text(m1.read_text().replace("Natalia", "Natasha"))
    assert _reasons(cli_in_process(*one, cwd=tmp_path))["embed"] == "its input changed (m1.jsonl: its content changed)"
    m1.write_text(m1.read_text().replace("Natasha", "Nadia"))  # the same file spelled ./m1.jsonl (review)
    spelled = ("run", "./m1.jsonl", *one[2:])
    assert _reasons(cli_in_process(*spelled, cwd=tmp_path))["embed"] == \
        "its input changed (m1.jsonl: its content changed)"
    both = ("run", "m1.jsonl", "m2.json", "--out", "r", "--fraction", "0.3", "-n", "2", "--json")
    assert _reasons(cli_in_process(*both, cwd=tmp_path))["embed"] == \
        "its input changed (the data inputs changed: ./m1.jsonl before, m1.jsonl, m2.json now)"


def test_a_run_directory_recorded_without_each_inputs_fingerprint_says_its_input_changed(tmp_path):
    """A run-state.json written before run noted each input's fingerprint: the change is not named, as before."""
    _two_inputs(tmp_path)
    args = ("run", "m1.jsonl", "--out", "r", "--fraction", "0.3", "-n", "2", "--json")
    _ok(cli_in_process(*args, cwd=tmp_path))
    state = tmp_path / "r" / "run-state.json"
    recorded = json.loads(state.read_text())
    assert [p[0] for p in recorded["embed"]["input_parts"]["data"]] == ["m1.jsonl"]
    del recorded["embed"]["input_parts"]
    state.write_text(json.dumps(recorded))
    assert _reasons(cli_in_process(*args, cwd=tmp_path))["embed"] is None  # still up to date
    m1 = tmp_path / "m1.jsonl"
    m1.write_text(m1.read_text().replace("Natalia", "Natasha"))
    assert _reasons(cli_in_process(*args, cwd=tmp_path))["embed"] == "its input changed"


# --------------------------------------------------------------- defect 4: inspect's help says what it lists


def test_inspect_help_says_how_many_bad_rows_it_lists_and_what_the_rejects_file_holds(tmp_path):
    data = _sharegpt_speakers(tmp_path / "bad.jsonl", n=INSPECT_LISTED_REJECTS + 5)
    r = cli_in_process("inspect", data, "--on-bad-row", "skip", "--rejects", tmp_path / "rej.jsonl")
    _ok(r)
    listed = [line for line in r.stderr.splitlines() if line.startswith("rejected id ")]
    assert len(listed) == INSPECT_LISTED_REJECTS
    assert "... and 5 more rejected rows" in r.stderr
    written = [json.loads(line) for line in (tmp_path / "rej.jsonl").read_text().splitlines()]
    assert len(written) == INSPECT_LISTED_REJECTS + 5
    assert {tuple(row) for row in written} == {("id", "location", "field", "reason")}
    said = " ".join(_ok(cli_in_process("inspect", "--help")).stdout.split())
    assert "Bad rows are all listed" not in said and "Write every rejected row" not in said
    assert (f"The first {INSPECT_LISTED_REJECTS} bad rows are listed with their reasons (--rejects PATH writes "
            "them all)") in said
    assert ("Write every bad row's id, location (file:line, or id), field and reason to this JSONL file (not the "
            "row itself).") in said


# ------------------------------------------------------ defect 5: the split of a DatasetDict in inspect's JSON


def test_inspect_json_records_the_split_it_read_of_a_datasetdict(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"question": [f"What is {i} + 1?" for i in range(6)], "answer": [f"{i + 1}" for i in range(6)]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
                         ).save_to_disk(str(tmp_path / "dd"))
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "one"))
    r = _ok(cli_in_process("inspect", tmp_path / "dd", "--quiet", "--json"))
    assert r.stderr == ""  # the note is --quiet's to hide: the object says it
    assert json.loads(r.stdout)["split"] == "train"
    assert not check(json.loads(r.stdout), schema_of("inspect"))
    assert json.loads(_ok(cli_in_process("inspect", tmp_path / "dd" / "test", "-q", "--json")).stdout)["split"] == \
        "test"
    assert "split" not in json.loads(_ok(cli_in_process("inspect", tmp_path / "one", "-q", "--json")).stdout)
    assert "split" not in json.loads(_ok(cli_in_process("inspect", GSM, "-q", "--json")).stdout)
    mixture = json.loads(_ok(cli_in_process("inspect", tmp_path / "dd", GSM, "-q", "--json")).stdout)
    assert [i.get("split") for i in mixture["inputs"]] == ["train", None]
    assert not check(mixture, schema_of("inspect"))
    assert "split" not in mixture


# --------------------------------------------------- defect 6: the same words in another order are suggested


@pytest.mark.parametrize("command, typed, expected", [  # click lists them in name order
    ("run", "--budget-tokens", "(Did you mean one of: '--batch-tokens', '--budget', '--token-budget'?)"),
    ("select", "--budget-tokens", "(Did you mean one of: '--budget', '--token-budget'?)"),
    ("run", "--fraction-token", "(Did you mean one of: '--batch-tokens', '--fraction', '--token-fraction'?)"),
    ("run", "--field-prompt", "Did you mean '--prompt-field'?"),
    ("run", "--field_prompt", "Did you mean '--prompt-field'?"),
])
def test_an_unknown_option_suggests_the_options_with_its_words_in_another_order(command, typed, expected):
    r = cli_in_process(command, typed, "1000")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"ERROR: No such option '{typed}'. {expected} (see python -m cluster_curate {command} --help)\n"


def test_an_unknown_option_without_such_a_reordering_keeps_clicks_suggestions():
    r = cli_in_process("run", "--fractoin", "0.3")
    assert r.stderr == ("ERROR: No such option '--fractoin'. (Did you mean one of: '--fraction', "
                        "'--token-fraction'?) (see python -m cluster_curate run --help)\n")
