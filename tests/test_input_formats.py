"""TSV files and nested fields (`--prompt-field data.question`) through the `cluster-curate` command: the same
selection as the same data in CSV, lineage that reads the data again the same way, and shards that carry the
original columns unchanged."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cluster_curate.io.artifacts import read_meta
from conftest import FIXTURES
from conftest import cli_in_process as _cli
from test_datasets import nest_gsm8k, write_jsonl, write_tsv
from test_export_verify import axolotl_pairs
from test_outputs import FAST

GSM_CSV = FIXTURES / "gsm8k" / "train-300.csv"
GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
CODE_ALPACA = FIXTURES / "code_alpaca" / "code_alpaca-300.json"
NESTED = ["--prompt-field", "data.question", "--response-field", "data.answer"]


def _ids(path) -> list[int]:
    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


def test_a_tsv_runs_end_to_end_as_the_same_data_in_csv(tmp_path):
    shutil.copy(GSM_CSV, tmp_path / "train.csv")
    write_tsv(GSM_CSV, tmp_path / "train.tsv")
    r = _cli("inspect", "train.tsv", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {k: json.loads(r.stdout)[k] for k in ("container", "format", "rows", "examples")} == {
        "container": "tsv", "format": "qa", "rows": 300, "examples": 300}
    for name in ("train.csv", "train.tsv"):
        r = _cli("run", name, "--out", name + ".out", *FAST, "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    csv_out, tsv_out = tmp_path / "train.csv.out", tmp_path / "train.tsv.out"
    assert _ids(tsv_out / "selection.parquet") == _ids(csv_out / "selection.parquet")
    for shard in sorted((csv_out / "shards").glob("shard-*.parquet")):
        assert pq.read_table(tsv_out / "shards" / shard.name).equals(pq.read_table(shard))


def _ok(*argv, cwd):
    r = _cli(*argv, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


def _shards(folder) -> pa.Table:
    return pa.concat_tables(pq.read_table(f) for f in sorted(folder.glob("shard-*.parquet")))


def test_nested_fields_run_end_to_end_as_the_same_data_flat(tmp_path):
    """`run --prompt-field data.question --response-field data.answer` selects what the flat columns select; the
    lineage keeps the fields, so `shard` and `export` read the data again that way unasked; the shards carry the
    nested column as it was."""
    shutil.copy(GSM, tmp_path / "flat.jsonl")
    rows = nest_gsm8k()
    write_jsonl(tmp_path / "nested.jsonl", rows)
    _ok("run", "flat.jsonl", "--out", "flat", *FAST, "-q", cwd=tmp_path)
    _ok("run", "nested.jsonl", "--out", "nested", *NESTED, *FAST, "-q", cwd=tmp_path)
    assert _ids(tmp_path / "nested" / "selection.parquet") == _ids(tmp_path / "flat" / "selection.parquet")
    options = {"prompt_field": "data.question", "response_field": "data.answer"}
    assert read_meta(tmp_path / "nested" / "embeddings.parquet").dataset["options"] == options
    shards = _shards(tmp_path / "nested" / "shards")
    assert shards.column("data").to_pylist() == [rows[i]["data"] for i in shards.column("id").to_pylist()]
    # the later stages by themselves, given the data but no field: the recorded ones
    _ok("shard", "nested/selection.parquet", "--data", "nested.jsonl", "--out", "again", "--num-shards", "2",
        "--micro-batch-size", "2", "-q", cwd=tmp_path)
    assert _shards(tmp_path / "again").equals(shards)
    _ok("export", "nested/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    trl = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert all(r["completion"][0]["content"] == rows[r["id"]]["data"]["answer"] for r in trl) and trl


def test_a_missing_nested_path_is_skipped_into_the_rejects(tmp_path):
    rows = nest_gsm8k(60)
    del rows[3]["data"]["answer"]
    rows[7]["data"] = None
    write_jsonl(tmp_path / "nested.jsonl", rows)
    _ok("embed", "nested.jsonl", "--out", "e.parquet", *NESTED, "--on-bad-row", "skip", "--features", "text",
        "--dim", "8", "-q", cwd=tmp_path)
    rejects = [json.loads(line) for line in (tmp_path / "e.rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["location"], r["field"], r["reason"]) for r in rejects] == [
        (3, "nested.jsonl:4", "data.answer", "missing ('data' has no key 'answer')"),
        (7, "nested.jsonl:8", "data.answer", "missing ('data' is null, not an object)")]
    assert pq.read_metadata(tmp_path / "e.parquet").num_rows == 58


def test_a_list_index_in_a_nested_path_reads_an_item_and_an_index_out_of_range_is_a_bad_row(tmp_path):
    """`--prompt-field turns.0.value --response-field turns.1.value` (a list of turns, as chat exports hold
    them): a path read objects only, and every row was a bad row ('turns' is a list, not an object). A whole
    number now indexes the list (JSON, Parquet list columns, JSON text in a CSV), selecting what the flat columns
    select; a row whose list is too short is a bad row naming its line and the path."""
    shutil.copy(GSM, tmp_path / "flat.jsonl")
    rows = [{"turns": [{"from": "human", "value": r["data"]["question"]},
                       {"from": "gpt", "value": r["data"]["answer"]}]} for r in nest_gsm8k()]
    write_jsonl(tmp_path / "turns.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "turns.parquet")
    (tmp_path / "turns.csv").write_text("turns\n" + "".join('"' + json.dumps(r["turns"]).replace('"', '""') + '"\n'
                                                            for r in rows))
    turns = ["--prompt-field", "turns.0.value", "--response-field", "turns.1.value"]
    _ok("run", "flat.jsonl", "--out", "flat", *FAST, "-q", cwd=tmp_path)
    _ok("run", "turns.jsonl", "--out", "turns", *turns, *FAST, "-q", cwd=tmp_path)
    assert _ids(tmp_path / "turns" / "selection.parquet") == _ids(tmp_path / "flat" / "selection.parquet")
    for name in ("turns.parquet", "turns.csv"):
        r = _ok("inspect", name, *turns, "--json", cwd=tmp_path)
        assert json.loads(r.stdout)["examples"] == 300, name
    del rows[4]["turns"][1]
    write_jsonl(tmp_path / "short.jsonl", rows)
    r = _cli("embed", "short.jsonl", "--out", "e.parquet", *turns, "--features", "text", "--dim", "8", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "ERROR: short.jsonl:5: field 'turns.1.value': missing ('turns' has 1 item, no item 1) (id 4; pass --on-bad-row "
        "skip to skip bad rows)"], r.stderr
    assert not (tmp_path / "e.parquet").exists()


def test_a_mixture_file_with_a_tsv_input_and_dotted_fields(tmp_path):
    """One input a TSV, the other nested JSON Lines read through the mixture file's prompt_field / response_field:
    each keeps its own columns in the shards (null in the other's rows), beside the normalised prompt and response."""
    write_tsv(GSM_CSV, tmp_path / "math.tsv")
    code = [{"data": {"question": r["instruction"], "answer": r["output"]}}
            for r in json.loads((FIXTURES / "code_alpaca" / "code_alpaca-300.json").read_text())[:100]]
    write_jsonl(tmp_path / "code.jsonl", code)
    (tmp_path / "mix.yaml").write_text("inputs:\n  - {path: math.tsv}\n"
                                       "  - {path: code.jsonl, prompt_field: data.question, response_field: "
                                       "data.answer}\n")
    _ok("run", "mix.yaml", "--out", "out", *FAST, "-q", cwd=tmp_path)
    inputs = read_meta(tmp_path / "out" / "embeddings.parquet").dataset["inputs"]
    assert [(i["name"], i["format"], i.get("options")) for i in inputs] == [
        ("math", "qa", None),
        ("code", "prompt-completion", {"prompt_field": "data.question", "response_field": "data.answer"})]
    shards = _shards(tmp_path / "out" / "shards").to_pylist()
    assert {r["source"] for r in shards} == {"math", "code"}
    for r in shards:
        if r["source"] == "code":
            original = code[r["source_row"]]["data"]
            assert r["data"] == original and r["question"] is None
            assert (r["prompt"], r["response"]) == (original["question"], original["answer"])
        else:
            assert r["data"] is None and r["question"] == r["prompt"]


def test_export_reads_a_nested_path_from_shards_that_keep_the_column_as_json_text(tmp_path):
    """A skipped bad row whose `data` is text makes the column mixed, so the shards keep it as JSON text (with a
    warning); `export` reads the recorded `data.answer` from that text as from the object (it refused every row:
    'data' is text, not an object)."""
    rows = nest_gsm8k(60)
    rows[5]["data"] = "not an object"
    write_jsonl(tmp_path / "nested.jsonl", rows)
    r = _ok("run", "nested.jsonl", "--out", "out", *NESTED, "--on-bad-row", "skip", *FAST, cwd=tmp_path)
    assert "column 'data' holds text in some rows" in r.stderr
    shards = _shards(tmp_path / "out" / "shards")
    assert pa.types.is_string(shards.schema.field("data").type)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    trl = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert trl and all(r["completion"][0]["content"] == rows[r["id"]]["data"]["answer"] for r in trl)
    assert all(r["prompt"][-1]["content"] == rows[r["id"]]["data"]["question"] for r in trl)


# ------------------------------------------------------------------------------------ preference pairs (DPO)

def preference_rows(n: int = 40, form: str = "standard") -> list[dict]:
    """GSM8K questions with their right answer chosen and a wrong one rejected, in one of TRL's preference forms:
    `standard` (prompt, chosen, rejected as text), `conversational` (explicit prompt, lists of turns) or `implicit`
    (chosen and rejected the whole conversations)."""
    out = []
    for line in GSM.read_text().splitlines()[:n]:
        r = json.loads(line)
        final = int(r["answer"].split("####")[-1].strip().replace(",", ""))
        wrong = f"The answer is {final + 1}."
        user = [{"role": "user", "content": r["question"]}]
        if form == "standard":
            out.append({"prompt": r["question"], "chosen": r["answer"], "rejected": wrong})
        elif form == "conversational":
            out.append({"prompt": user, "chosen": [{"role": "assistant", "content": r["answer"]}],
                        "rejected": [{"role": "assistant", "content": wrong}]})
        else:
            out.append({"chosen": user + [{"role": "assistant", "content": r["answer"]}],
                        "rejected": user + [{"role": "assistant", "content": wrong}]})
    return out


def test_preference_pairs_in_each_trl_form_read_as_the_chosen_example_with_the_rejected_beside_it(tmp_path):
    from cluster_curate.io.datasets import open_dataset
    gsm = [json.loads(line) for line in GSM.read_text().splitlines()[:40]]
    for form in ("standard", "conversational", "implicit"):
        rows = preference_rows(40, form)
        write_jsonl(tmp_path / f"{form}.jsonl", rows)
        ds = open_dataset(tmp_path / f"{form}.jsonl")
        assert ds.format == "preference"
        examples = [e for b in ds.iter_batches(16) for e in b.examples]
        assert [e.prompt for e in examples] == [[{"role": "user", "content": g["question"]}] for g in gsm]
        assert [e.response for e in examples] == [g["answer"] for g in gsm]
        assert examples[0].rejected == f"The answer is {int(gsm[0]['answer'].split('####')[-1]) + 1}."
        r = _ok("inspect", f"{form}.jsonl", "--json", cwd=tmp_path)
        summary = json.loads(r.stdout)
        assert (summary["format"], summary["examples"]) == ("preference", 40)
        assert summary["fields"]["rejected"] == "rejected"


def _embed_refuses_each(tmp_path, cases: dict) -> None:
    """Each case, name -> (rows, message): embed refuses its file in one line that starts with the message, and
    writes nothing."""
    for name, (rows, message) in cases.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
        r = _cli("embed", f"{name}.jsonl", "--out", f"{name}.parquet", "--features", "text", "--dim", "8", "-q",
                 cwd=tmp_path)
        assert r.returncode == 2, (name, r.stderr)
        assert r.stderr.startswith("ERROR: " + message), (name, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert not (tmp_path / f"{name}.parquet").exists()


def test_bad_preference_rows_are_one_line_naming_file_line_and_field(tmp_path):
    cases = {}
    rows = preference_rows(20)
    del rows[3]["rejected"]
    cases["no-rejected"] = (rows, "no-rejected.jsonl:4: field 'rejected': missing rejected response")
    rows = preference_rows(20)
    rows[5]["rejected"] = ""
    cases["empty-rejected"] = (rows, "empty-rejected.jsonl:6: field 'rejected': missing rejected response")
    rows = preference_rows(20, "implicit")
    rows[2]["rejected"][0] = {"role": "user", "content": "What is 2 + 2?"}
    cases["other-prompt"] = (rows, "other-prompt.jsonl:3: field 'rejected': its turns before the last assistant "
                                   "turn differ from chosen's")
    rows = [{"chosen": r["chosen"], "rejected": r["rejected"]} for r in preference_rows(20)]
    cases["no-prompt"] = (rows, "no-prompt.jsonl:1: field 'chosen': plain text with no prompt column to answer: "
                                "add a `prompt` column")
    _embed_refuses_each(tmp_path, cases)


def test_a_preference_run_keeps_prompt_chosen_and_rejected_and_export_jsonl_gives_the_records_back(tmp_path):
    import datasets
    for form in ("standard", "implicit"):
        rows = preference_rows(40, form)
        write_jsonl(tmp_path / f"{form}.jsonl", rows)
        _ok("run", f"{form}.jsonl", "--out", form, *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size",
            "2", "-q", cwd=tmp_path)
        shards = sorted(str(p) for p in (tmp_path / form / "shards").glob("shard-*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=shards, split="train", cache_dir=str(tmp_path / ".hf"))
        wanted = ["prompt", "chosen", "rejected"] if form == "standard" else ["chosen", "rejected"]
        assert [c for c in ds.column_names if c in ("prompt", "chosen", "rejected")] == wanted
        assert len(ds) == 20
        by_prompt = {json.dumps(r["chosen"]): r for r in rows}
        for shard_row in ds:
            assert {c: shard_row[c] for c in wanted} == {c: by_prompt[json.dumps(shard_row["chosen"])][c]
                                                         for c in wanted}
        _ok("export", f"{form}/shards", "--for", "jsonl", "--out", f"{form}-export", "-q", cwd=tmp_path)
        back = [json.loads(line) for line in (tmp_path / f"{form}-export" / "selected.jsonl").read_text().splitlines()]
        assert len(back) == 20 and all(r in rows for r in back)
        assert back == [r for r in rows if r in back]  # dataset order, records unchanged


def ultrafeedback_rows(n: int = 40) -> list[dict]:
    """Rows shaped as UltraFeedback binarized's and Capybara DPO's: a `prompt` column (the first question), `chosen`
    and `rejected` the whole conversations (lists of turns), their scores. The odd rows are multi-turn (Capybara),
    the even ones a question and its answer (UltraFeedback)."""
    rows = []
    for i in range(n):
        first, again = f"What is the capital of country {i}?", f"And its population, case {i}?"
        turns = [{"role": "user", "content": first}]
        if i % 2:
            turns += [{"role": "assistant", "content": f"It is city {i}."}, {"role": "user", "content": again}]
        rows.append({"prompt": first, "prompt_id": str(i),
                     "chosen": turns + [{"role": "assistant", "content": f"About {i} million, {i}."}],
                     "rejected": turns + [{"role": "assistant", "content": "No idea."}],
                     "score_chosen": 8.0, "score_rejected": 2.0})
    return rows


def test_a_chosen_conversation_beside_a_prompt_column_is_the_prompt_of_the_pair(tmp_path):
    """Capybara DPO and UltraFeedback binarized keep a `prompt` column (the first question) and `chosen` /
    `rejected` as the whole conversation: the prompt was the prompt column alone, so a multi-turn pair lost its
    middle turns and the last answer was set against the first question (also in the trl export). The prompt is
    now chosen's turns before its answer; a prompt column that is not its first question is a bad row."""
    import pyarrow.parquet as pq
    rows = ultrafeedback_rows()
    write_jsonl(tmp_path / "pairs.jsonl", rows)
    _ok("run", "pairs.jsonl", "--out", "out", *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size", "2",
        "-q", cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert {row["id"] % 2 for row in exported} == {0, 1}
    for row in exported:
        turns = rows[row["id"]]["chosen"]
        assert [(t["role"], t["content"]) for t in row["prompt"]] == [(t["role"], t["content"]) for t in turns[:-1]]
        assert row["chosen"][0]["content"] == turns[-1]["content"] and row["rejected"][0]["content"] == "No idea."

    rows[5]["prompt"] = "Something else entirely?"
    write_jsonl(tmp_path / "other.jsonl", rows)
    r = _cli("inspect", "other.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "ERROR: other.jsonl:6: field 'prompt': differs from the first user turn of chosen" in r.stderr


def test_a_column_read_as_both_question_and_answer_is_refused_in_one_line(tmp_path):
    """Anthropic HH's pairs (plain-text chosen / rejected transcripts, no prompt column) were refused with a hint
    to pass --prompt-field COLUMN; `--prompt-field chosen` was then taken: every transcript became both the
    prompt and its own answer, with no word. So was `--prompt-field question --response-field question`. HH's
    transcripts are read without --prompt-field now, which the message says."""
    rows = [{"chosen": f"\n\nHuman: What is {i} + {i}?\n\nAssistant: {2 * i}.",
             "rejected": f"\n\nHuman: What is {i} + {i}?\n\nAssistant: I do not know."} for i in range(20)]
    write_jsonl(tmp_path / "hh.jsonl", rows)
    shutil.copy(GSM, tmp_path / "gsm.jsonl")
    cases = [(["hh.jsonl", "--prompt-field", "chosen"], "hh.jsonl: --prompt-field 'chosen' is the chosen answer's "
                                                         "column: its answer would be part of its own question; name a column of "
                                                         "the prompt alone, or pass no --prompt-field"),
             (["hh.jsonl", "--format", "preference", "--prompt-field", "rejected"], "is the rejected answer's column"),
             (["gsm.jsonl", "--prompt-field", "question", "--response-field", "question"],
              "gsm.jsonl: --response-field 'question' is a --prompt-field column too"),
             (["gsm.jsonl", "--prompt-field", "question,answer", "--response-field", "answer"],
              "--response-field 'answer' is a --prompt-field column too")]
    for argv, message in cases:
        r = _cli("inspect", *argv, cwd=tmp_path)
        assert r.returncode == 2, (argv, r.stdout)
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("ERROR: ") and message in line and "Traceback" not in r.stderr


def hh_rows(n: int = 40) -> list[dict]:
    """Rows shaped as Anthropic/hh-rlhf's: `chosen` and `rejected` plain-text transcripts, each turn opened by a blank
    line and `Human:` or `Assistant:`, no prompt column. Every third is multi-turn; answers hold paragraphs (a blank
    line inside a turn) and a "Human:" that opens no turn; some transcripts end with spaces or a newline, as some of
    the dataset's do. Returns the rows and, per row, (prompt turns, chosen answer, rejected answer)."""
    rows, expected = [], []
    for i in range(n):
        question = f"How long should I boil an egg for recipe {i}?"
        turns = [("Human", question)]
        if i % 3 == 0:
            turns += [("Assistant", f"Soft or hard? My notes say:\nHuman: {i} minutes. Human: fine."),
                      ("Human", "Hard, please.")]
        good = f"For a hard egg, about {8 + i % 5} minutes.\n\nThen cool it in cold water."
        bad = "Eggs cannot be boiled."
        said = "".join(f"\n\n{who}: {text}" for who, text in turns)
        tail = " \n" if i % 4 == 1 else ""
        rows.append({"chosen": f"{said}\n\nAssistant: {good}{tail}", "rejected": f"{said}\n\nAssistant: {bad}"})
        expected.append(([{"role": "user" if who == "Human" else "assistant", "content": text} for who, text in turns],
                         good, bad))
    return rows, expected


def test_a_format_the_columns_are_not_names_the_format_they_are(tmp_path):
    """`--format qa` on Code Alpaca's rows said "needs column 'question' and 'answer'" and suggested
    `--prompt-field instruction --response-field output`, which leaves alpaca's `input` out: the columns are
    alpaca's, and the message says so."""
    shutil.copy(CODE_ALPACA, tmp_path / "code.json")
    r = _cli("inspect", "code.json", "--format", "qa", cwd=tmp_path)
    assert r.returncode == 2, r.stdout
    (line,) = r.stderr.strip().splitlines()
    assert line == ("ERROR: code.json: format qa needs columns 'question' and 'answer', not found; columns found: "
                    "[instruction, input, output]. these columns are format alpaca's: pass --format alpaca, or leave "
                    "--format out")


def test_anthropic_hh_transcripts_read_as_the_prompt_turns_and_the_two_answers(tmp_path):
    """Anthropic HH-RLHF's pairs (plain-text transcripts, no prompt column) were refused as plain text with no
    prompt; they are read as TRL reads an implicit prompt: the turns before the last answer are the prompt, shared
    by chosen and rejected; inspect counts them."""
    from trl.data_utils import extract_prompt
    from cluster_curate.io.datasets import open_dataset
    rows, expected = hh_rows()
    write_jsonl(tmp_path / "hh.jsonl", rows)
    ds = open_dataset(tmp_path / "hh.jsonl")
    assert (ds.format, ds.field_map.prompt, ds.field_map.response, ds.field_map.rejected) == (
        "preference", "chosen", None, "rejected")
    examples = [e for b in ds.iter_batches(16) for e in b.examples]
    assert [(e.prompt, e.response, e.rejected) for e in examples] == expected
    for row, e in zip(rows, examples):  # the answers TRL's extract_prompt splits off the text, without its spaces
        assert extract_prompt(row)["chosen"].strip() == e.response
    summary = json.loads(_ok("inspect", "hh.jsonl", "--json", cwd=tmp_path).stdout)
    assert (summary["format"], summary["examples"], summary["rejected"], summary["multi_turn"]) == (
        "preference", 40, 0, 14)


def test_anthropic_hh_transcripts_with_crlf_line_ends_read_as_the_lf_form(tmp_path):
    """HH transcripts whose line ends are CRLF (a file that went through Windows tools or a CSV export) were
    refused as plain text with no prompt column, every row; they read as the same pairs as the LF form."""
    from cluster_curate.io.datasets import open_dataset
    rows, expected = hh_rows()
    write_jsonl(tmp_path / "hh.jsonl", [{k: v.replace("\n", "\r\n") for k, v in row.items()} for row in rows])
    examples = [e for b in open_dataset(tmp_path / "hh.jsonl").iter_batches(16) for e in b.examples]
    assert [(e.prompt, e.response, e.rejected) for e in examples] == expected


def test_bad_anthropic_hh_rows_are_one_line_naming_file_line_and_field(tmp_path):
    """An empty last answer (as some of HH's are), a rejected transcript with another prompt, and a plain-text
    pair without the transcript's markers or a prompt column: one line each, before any work. The empty answer's
    field was `chosen[1]`, an index into a text that has none: it is named by its turn's number and speaker."""
    cases = {}
    rows, _ = hh_rows(20)
    rows[4]["chosen"] = rows[4]["chosen"].rpartition("\n\nAssistant:")[0] + "\n\nAssistant: "
    cases["empty-answer"] = (rows, "empty-answer.jsonl:5: field 'chosen (transcript turn 2: Assistant)': empty "
                                   "response (the last assistant turn is empty)")
    rows, _ = hh_rows(20)
    rows[3]["rejected"] = rows[3]["rejected"].replace("Hard, please.", "Soft, please.")
    cases["other-prompt"] = (rows, "other-prompt.jsonl:4: field 'rejected': its turns before the last assistant "
                                   "turn differ from chosen's")
    rows = [{"chosen": f"It takes {i} minutes.", "rejected": "Eggs cannot be boiled."} for i in range(20)]
    cases["no-markers"] = (rows, "no-markers.jsonl:1: field 'chosen': plain text with no prompt column to answer: "
                                 "add a `prompt` column (or pass --prompt-field COLUMN), or give chosen and rejected "
                                 "as lists of chat turns or as Anthropic HH transcripts")
    _embed_refuses_each(tmp_path, cases)


def test_anthropic_hh_pairs_run_and_export_as_conversational_dpo_and_ranking_data(tmp_path):
    """`run` on HH's transcripts, then `export --for trl`: TRL's conversational prompt / chosen / rejected turns
    (the chat template renders them, not the "Human:" text); `--for llamafactory`: a ranking dataset."""
    from trl.data_utils import is_conversational, maybe_extract_prompt
    rows, expected = hh_rows()
    write_jsonl(tmp_path / "hh.jsonl", rows)
    _ok("run", "hh.jsonl", "--out", "out", *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size", "2",
        "-q", cwd=tmp_path)
    assert [c for c in _shards(tmp_path / "out" / "shards").column_names if c in ("chosen", "rejected")] == [
        "chosen", "rejected"]  # the transcripts kept as they were
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert len(exported) == 20 and {row["id"] % 3 == 0 for row in exported} == {True, False}
    for row in exported:
        prompt, good, bad = expected[row["id"]]
        pair = {c: row[c] for c in ("prompt", "chosen", "rejected")}
        assert is_conversational(pair) and maybe_extract_prompt(pair) == pair  # TRL takes the prompt as given
        assert pair == {"prompt": prompt, "chosen": [{"role": "assistant", "content": good}],
                        "rejected": [{"role": "assistant", "content": bad}]}
    _ok("export", "out/shards", "--for", "llamafactory", "--out", "lf", "-q", cwd=tmp_path)
    entry = json.loads((tmp_path / "lf" / "dataset_info.json").read_text())["cluster_curate"]
    assert entry["ranking"] is True
    for row in pq.read_table(tmp_path / "lf" / entry["file_name"]).to_pylist():
        prompt, good, bad = expected[row["id"]]
        assert [m["role"] for m in row["messages"]] == [t["role"] for t in prompt]
        assert (row["chosen"]["content"], row["rejected"]["content"]) == (good, bad)


def stack_exchange_paired_rows(n: int = 40) -> list[dict]:
    """Rows shaped as lvwerra/stack-exchange-paired's: `question`, the preferred answer `response_j` and the other
    one `response_k` (GSM8K's questions and answers, a wrong answer rejected)."""
    out = []
    for i, line in enumerate(GSM.read_text().splitlines()[:n]):
        r = json.loads(line)
        out.append({"qid": 1000 + i, "question": r["question"], "date": f"2012/03/{i % 28 + 1:02d}",
                    "metadata": [f"https://math.stackexchange.com/questions/{1000 + i}"],
                    "response_j": r["answer"], "response_k": f"I would guess {i + 41}."})
    return out


def test_shp_pairs_are_refused_with_the_rule_of_their_labels(tmp_path):
    """stanfordnlp/SHP orders each pair by its `labels` column (1: human_ref_A preferred, 0: human_ref_B), so no
    column is the chosen answer: its hint was the generic one ('pass --prompt-field COLUMN --response-field
    COLUMN'), which led to training on the rejected answer of every pair labelled 0. It now names the flags that
    read them in the order of their labels (tests/test_labelled_pairs.py)."""
    rows = [{"post_id": f"t{i}", "domain": "askscience_train", "upvote_ratio": 0.99, "history": r["question"],
             "c_root_id_A": f"a{i}", "c_root_id_B": f"b{i}", "created_at_utc_A": 1_600_000_000 + i,
             "created_at_utc_B": 1_600_000_100 + i, "score_A": 12 if i % 2 else 3, "score_B": 3 if i % 2 else 12,
             "human_ref_A": r["answer"] if i % 2 else "No idea.", "human_ref_B": "No idea." if i % 2 else r["answer"],
             "labels": i % 2, "seconds_difference": 100.0, "score_ratio": 4.0}
            for i, r in enumerate(json.loads(line) for line in GSM.read_text().splitlines()[:8])]
    write_jsonl(tmp_path / "shp.jsonl", rows)
    r = _cli("inspect", "shp.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("ERROR: shp.jsonl: unrecognised record format"), line
    assert ("pass --prompt-field history --response-field human_ref_A --rejected-field human_ref_B --label-field "
            "labels (labels is 1 where human_ref_A is the preferred answer, 0 where human_ref_B is)" in line), line


def test_rejected_field_reads_pairs_whose_answers_have_other_names(tmp_path):
    """StackExchange-paired keeps its pairs in `response_j` / `response_k`, others in `chosen_response` /
    `rejected_response`: refused with a hint that named no flag for the rejected answer (and took them for
    questions alone), and no flag could read them. The hint names the flags, `--rejected-field` reads them (with
    --response-field the chosen answer), the lineage keeps it for export, and the Python API takes it too."""
    import cluster_curate as cc
    rows = stack_exchange_paired_rows()
    write_jsonl(tmp_path / "se.jsonl", rows)
    # argilla/ultrafeedback-binarized-preferences' columns: the ratings and models of each answer beside it
    write_jsonl(tmp_path / "named.jsonl", [{"source": "gsm8k", "instruction": r["question"], "chosen_avg_rating": 5.0,
                                            "rejected_avg_rating": 1.5, "chosen_model": "a", "rejected_model": "b",
                                            "chosen_response": r["response_j"], "rejected_response": r["response_k"]}
                                           for r in rows])
    for name, flags in (("se.jsonl", "--prompt-field question --response-field response_j --rejected-field "
                                     "response_k"),
                        ("named.jsonl", "--prompt-field instruction --response-field chosen_response "
                                        "--rejected-field rejected_response")):
        r = _cli("inspect", name, cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert f"pass {flags} (or other columns" in line, line
        summary = json.loads(_ok("inspect", name, *flags.split(), "--json", cwd=tmp_path).stdout)
        assert (summary["format"], summary["examples"], summary["fields"]["rejected"]) == (
            "preference", 40, flags.split()[-1])
    flags = ["--prompt-field", "question", "--response-field", "response_j", "--rejected-field", "response_k"]
    _ok("run", "se.jsonl", "--out", "out", *flags, *FAST[:-6], "--fraction", "0.5", "-n", "2",
        "--micro-batch-size", "2", "-q", cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)  # the fields from the lineage
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert len(exported) == 20
    for row in exported:
        source = rows[row["id"]]
        assert row["prompt"] == [{"role": "user", "content": source["question"]}]
        assert row["chosen"] == [{"role": "assistant", "content": source["response_j"]}]
        assert row["rejected"] == [{"role": "assistant", "content": source["response_k"]}]
    summary = cc.inspect(str(tmp_path / "se.jsonl"), prompt_field="question", response_field="response_j",
                         rejected_field="response_k")
    assert (summary["format"], summary["fields"]["rejected"], summary["lengths"]["rejected_chars"]["total"]) == (
        "preference", "response_k", sum(len(r["response_k"]) for r in rows))


def test_a_rejected_field_is_checked_before_any_work_in_one_line(tmp_path):
    """A --rejected-field that names no column, the chosen answer's or the prompt's column, or goes with another
    format is refused before embedding, in one line, in a mixture too."""
    write_jsonl(tmp_path / "se.jsonl", stack_exchange_paired_rows(20))
    shutil.copy(tmp_path / "se.jsonl", tmp_path / "se2.jsonl")
    pair = ["--prompt-field", "question", "--response-field", "response_j"]
    cases = [(["se.jsonl", *pair, "--rejected-field", "response_x"],
              "se.jsonl: --rejected-field 'response_x': no such column; columns found: [qid, question, date, "
              "metadata, response_j, response_k]"),
             (["se.jsonl", *pair, "--rejected-field", "response_j"],
              "se.jsonl: the chosen and the rejected answer would both be column 'response_j'"),
             (["se.jsonl", *pair, "--rejected-field", "question"],
              "se.jsonl: --prompt-field 'question' is the rejected answer's column"),
             (["se.jsonl", *pair, "--rejected-field", "response_k", "--format", "qa"],
              "--rejected-field 'response_k' names a preference pair's rejected answer: it goes with --format "
              "preference, not qa"),
             (["se.jsonl", "se2.jsonl", *pair, "--rejected-field", "response_x"],
              "se.jsonl: --rejected-field 'response_x': no such column")]
    for i, (argv, message) in enumerate(cases):
        r = _cli("embed", *argv, "--out", f"e{i}.parquet", "--features", "text", "--dim", "8", "-q", cwd=tmp_path)
        assert r.returncode == 2, (argv, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("ERROR: ") and message in line and "Traceback" not in r.stderr, (argv, line)
        assert not (tmp_path / f"e{i}.parquet").exists()


def test_what_was_made_before_rejected_and_label_field_keeps_its_fingerprint_and_stays_up_to_date(tmp_path):
    """--rejected-field and --label-field at their defaults are not part of what fingerprints and run's up-to-date
    check hash: a mixture keeps the fingerprint it had before the options existed (so its embeddings and what
    follows stay valid), and a run directory records neither (so one made before stays up to date)."""
    import hashlib
    from cluster_curate.io.mixture import Mixture, mixture_inputs
    for name in ("a.jsonl", "b.jsonl"):
        shutil.copy(GSM, tmp_path / name)
    mix = Mixture(mixture_inputs([str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]))
    before = hashlib.blake2b(digest_size=12)  # the fingerprint as it was computed before the option
    for inp, ds in zip(mix.inputs, mix.datasets):
        options = {"format": None, "prompt_field": None, "response_field": None, "on_bad_row": "error",
                   "prompts_only": False}
        before.update(json.dumps([inp.name, ds.fingerprint(), options, {}], sort_keys=True).encode() + b"\0")
    assert mix.fingerprint() == before.hexdigest()
    _ok("run", "a.jsonl", "--out", "out", *FAST, "-q", cwd=tmp_path)
    state = json.loads((tmp_path / "out" / "run-state.json").read_text())
    assert "response_field" in state["embed"]["option_values"]
    assert not {"rejected_field", "label_field"} & set(state["embed"]["option_values"])
    r = json.loads(_ok("run", "a.jsonl", "--out", "out", *FAST, "--json", cwd=tmp_path).stdout)
    assert {s["status"] for s in r["stages"]} == {"up to date"}, r["stages"]


def test_preference_pairs_keep_their_tool_schemas(tmp_path):
    """Tool-calling DPO pairs keep their schemas in a `tools` column, which TRL's DPOTrainer renders through the
    chat template: it was not read (not in the embedded and counted text, inspect's with_tools 0) and the trl and
    llamafactory exports left it out without a word. torchtune's DPO layout, which cannot hold them, refuses."""
    import pyarrow.parquet as pq
    schemas = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    asked = [[{"role": "user", "content": f"What is the weather in city {i}?"}] for i in range(40)]
    forms = {"explicit": [{"prompt": p, "chosen": [{"role": "assistant", "content": f"Calling it for {i}."}],
                           "rejected": [{"role": "assistant", "content": "No."}], "tools": json.dumps(schemas)}
                          for i, p in enumerate(asked)],
             "implicit": [{"chosen": p + [{"role": "assistant", "content": f"Calling it for {i}."}],
                           "rejected": p + [{"role": "assistant", "content": "No."}], "tools": json.dumps(schemas)}
                          for i, p in enumerate(asked)]}
    for form, rows in forms.items():
        write_jsonl(tmp_path / f"{form}.jsonl", rows)
        summary = json.loads(_ok("inspect", f"{form}.jsonl", "--json", cwd=tmp_path).stdout)
        assert (summary["fields"]["tools"], summary["with_tools"], summary["with_system_prompt"]) == ("tools", 40, 0)
        _ok("run", f"{form}.jsonl", "--out", form, *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size",
            "2", "-q", cwd=tmp_path)
        for trainer, prompt_column in (("trl", "prompt"), ("llamafactory", "messages")):
            _ok("export", f"{form}/shards", "--for", trainer, "--out", f"{form}-{trainer}", "-q", cwd=tmp_path)
            exported = pq.read_table(tmp_path / f"{form}-{trainer}" / "train.parquet").to_pylist()
            assert len(exported) == 20
            for row in exported:  # the schemas once, for the template; the prompt as it was
                assert json.loads(row["tools"]) == schemas
                assert [(t["role"], t["content"]) for t in row[prompt_column]] == [
                    ("user", asked[row["id"]][0]["content"])]
        info = json.loads((tmp_path / f"{form}-llamafactory" / "dataset_info.json").read_text())["cluster_curate"]
        assert info["columns"]["tools"] == "tools"
        # torchtune's preference_dataset has no place for them: refused, naming the row, not dropped
        r = _cli("export", f"{form}/shards", "--for", "torchtune", "--out", f"{form}-tt", cwd=tmp_path)
        (line,) = r.stderr.strip().splitlines()
        assert r.returncode == 2 and "holds tool calls or tool turns, which torchtune's" in line, r.stderr
        assert line.startswith("ERROR: ") and ": row " in line and not (tmp_path / f"{form}-tt").exists()


def _word_tokenizer(path):
    """A real word-level tokenizer (whitespace split, no chat template), saved and loaded by path."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(path)
    return path


def _trl_dpo_token_ids(model_dir, rows: list[dict]) -> dict:
    """TRL's DPOTrainer's tokenization of text pairs given as chat turns (as `export --for trl` writes them):
    `prompt_ids`, `chosen_ids`, `rejected_ids`, each a list in the rows' order."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer
    turns = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}],
                                "chosen": [{"role": "assistant", "content": r["chosen"]}],
                                "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in rows])
    args = DPOConfig(output_dir=str(model_dir / "dpo"), report_to="none", use_cpu=True, max_length=None,
                     disable_tqdm=True)
    trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=turns,
                         processing_class=AutoTokenizer.from_pretrained(model_dir))
    return trainer.train_dataset.to_dict()


@pytest.mark.slow  # a tiny Llama and a tiny BERT embed, and TRL's DPOTrainer
def test_a_preference_row_counts_its_prompt_chosen_and_rejected_tokens(tmp_path):
    """A DPO step runs the prompt with each answer: the row's n_tokens (embed: words, a model's tokenizer), select's
    and shard's counts with --tokenizer, all add the rejected answer; n_response_tokens stays the chosen one's.
    With a chat template, each answer counts as TRL's DPOTrainer tokenizes it after the prompt: the rejected one
    was its text alone, without the template's end-of-turn tokens that the chosen one's count held."""
    from tiny_lm import build_llama
    from transformers import AutoTokenizer
    rows = preference_rows(40)
    write_jsonl(tmp_path / "pref.jsonl", rows)
    # the same pairs without their rejected answers: what an SFT run of the chosen answers counts
    write_jsonl(tmp_path / "sft.jsonl", [{"prompt": r["prompt"], "completion": r["chosen"]} for r in rows])
    words = [len(r["prompt"].split()) + len(r["chosen"].split()) + len(r["rejected"].split()) for r in rows]

    _ok("embed", "pref.jsonl", "--out", "e.parquet", "--features", "text", "--dim", "8", "-q", cwd=tmp_path)
    e = pq.read_table(tmp_path / "e.parquet").to_pydict()
    assert e["n_tokens"] == [words[i] for i in e["id"]]
    assert e["n_response_tokens"] == [len(rows[i]["chosen"].split()) for i in e["id"]]

    model = build_llama(tmp_path / "llama", layers=1, hidden=32)
    trl = _trl_dpo_token_ids(model, rows)
    rejected = [len(ids) for ids in trl["rejected_ids"]]  # the old count, the text alone, left out `<|im_end|>\n`
    for name in ("pref", "sft"):
        _ok("embed", f"{name}.jsonl", "--out", f"{name}-model.parquet", "--model", str(model), "--features", "hidden",
            "--max-length", "512", "-q", cwd=tmp_path)
    pref = pq.read_table(tmp_path / "pref-model.parquet").to_pydict()
    sft = pq.read_table(tmp_path / "sft-model.parquet").to_pydict()
    assert pref["id"] == sft["id"] == list(range(40))
    assert [a - b for a, b in zip(pref["n_tokens"], sft["n_tokens"])] == rejected
    assert pref["n_response_tokens"] == sft["n_response_tokens"]
    # the model's counts are TRL's: the chosen answer with the template's end of turn and the newline after it
    whole = [i for i in pref["id"] if len(trl["prompt_ids"][i]) + len(trl["chosen_ids"][i]) <= 512]  # not cut
    assert len(whole) >= 20
    assert [pref["n_response_tokens"][i] for i in whole] == [len(trl["chosen_ids"][i]) for i in whole]
    assert [pref["n_tokens"][i] for i in whole] == [
        sum(len(trl[f"{part}_ids"][i]) for part in ("prompt", "chosen", "rejected")) for i in whole]
    from tiny_encoder import build_bert  # an encoder feature counts with the encoder's tokenizer
    bert = build_bert(tmp_path / "bert")
    rejected = [len(ids) for ids in AutoTokenizer.from_pretrained(bert)([r["rejected"] for r in rows],
                                                                       add_special_tokens=False)["input_ids"]]
    for name in ("pref", "sft"):
        _ok("embed", f"{name}.jsonl", "--out", f"{name}-enc.parquet", "--features", "semantic", "--encoder",
            str(bert), "-q", cwd=tmp_path)
    pref = pq.read_table(tmp_path / "pref-enc.parquet").to_pydict()
    sft = pq.read_table(tmp_path / "sft-enc.parquet").to_pydict()
    assert [a - b for a, b in zip(pref["n_tokens"], sft["n_tokens"])] == rejected

    _ok("cluster", "e.parquet", "--out", "c.parquet", "--k", "4", "-q", cwd=tmp_path)
    _ok("select", "c.parquet", "--out", "s.parquet", "--fraction", "0.5", "-q", cwd=tmp_path)
    _word_tokenizer(tmp_path / "tok")
    _ok("shard", "s.parquet", "--data", "pref.jsonl", "--out", "shards", "--tokenizer", "tok", "--num-shards", "2",
        "--micro-batch-size", "2", "-q", cwd=tmp_path)
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    ids = pq.read_table(tmp_path / "s.parquet", columns=["id"]).column("id").to_pylist()
    assert manifest["tokens"]["total"] == sum(words[i] for i in ids)
    summary = json.loads(_ok("inspect", "pref.jsonl", "--tokenizer", "tok", "--json", cwd=tmp_path).stdout)
    assert summary["lengths"]["rejected_tokens"]["total"] == sum(len(r["rejected"].split()) for r in rows)
    assert summary["lengths"]["rejected_chars"]["total"] == sum(len(r["rejected"]) for r in rows)
    assert summary["lengths"]["response_tokens"]["total"] == sum(len(r["chosen"].split()) for r in rows)
    # the model's tokenizer, whose chat template a DPO trainer applies: each part counted as TRL tokenizes it
    inspected = _ok("inspect", "pref.jsonl", "--tokenizer", str(model), "--json", cwd=tmp_path)
    lengths = json.loads(inspected.stdout)["lengths"]
    assert [lengths[f"{part}_tokens"]["total"] for part in ("prompt", "response", "rejected")] == [
        sum(len(ids) for ids in trl[f"{part}_ids"]) for part in ("prompt", "chosen", "rejected")]


def test_pairs_with_one_prompt_and_chosen_but_other_rejected_answers_are_not_exact_copies(tmp_path):
    """UltraFeedback-style data holds several pairs per prompt that share the chosen answer: each is its own
    lesson (a different mistake to prefer against), so embed's exact-copy filter keeps them all; a pair written
    twice is still a copy."""
    rows = preference_rows(20)
    rows += [dict(rows[0], rejected="The answer is 0."), dict(rows[1], rejected="I do not know."), dict(rows[2])]
    write_jsonl(tmp_path / "pref.jsonl", rows)
    r = _ok("embed", "pref.jsonl", "--out", "e.parquet", "--features", "text", "--dim", "8", "--json", cwd=tmp_path)
    assert _ids(tmp_path / "e.parquet") == list(range(22))  # row 22 repeats row 2 whole: the only copy
    assert json.loads(r.stdout)["exact_duplicates_dropped"] == 1
    inspect = json.loads(_ok("inspect", "pref.jsonl", "--json", cwd=tmp_path).stdout)
    assert (inspect["duplicates"], inspect["duplicate_prompts"]) == (1, 3)


def _mixture_pairs(folder, trl: str) -> list[tuple[str, int, dict]]:
    """(input, its row, the exported pair) of each row of `export --for trl` of a mixture's shards."""
    shards = _shards(folder / "shards").select(["id", "source", "source_row"]).to_pylist()
    where = {r["id"]: (str(r["source"]), r["source_row"]) for r in shards}
    return [(*where[row["id"]], {c: row[c] for c in ("prompt", "chosen", "rejected")})
            for row in pq.read_table(folder.parent / trl / "train.parquet").to_pylist()]


@pytest.mark.slow  # a mixture's runs and exports
def test_a_mixture_of_pairs_in_three_shapes_exports_each_pair_with_its_prompt_turns_and_both_answers(tmp_path):
    """UltraFeedback / Capybara pairs (a prompt column, chosen and rejected whole conversations, several turns),
    Anthropic HH transcripts and GSM8K text pairs in one mixture. Export read a mixture's pairs from the shards'
    normalised `prompt` (the last user question) and the columns named `chosen` / `rejected`: a multi-turn pair
    was refused (its prompt column is the first question), an HH transcript became the answer whole, and the
    UltraFeedback input (whose list columns must be renamed beside the others' text) was refused. Each row is
    read now as its input's record: the pair that input exported alone gives."""
    uf, (hh, hh_expected), std = ultrafeedback_rows(30), hh_rows(30), preference_rows(30)
    write_jsonl(tmp_path / "uf.jsonl", [dict(r, messages=r["chosen"]) for r in uf])  # UltraFeedback has `messages`
    write_jsonl(tmp_path / "hh.jsonl", hh)
    write_jsonl(tmp_path / "gsm.jsonl", std)
    (tmp_path / "mix.yaml").write_text("inputs:\n  - path: uf.jsonl\n    rename: {chosen: uf_chosen, rejected: "
                                       "uf_rejected}\n  - path: hh.jsonl\n  - path: gsm.jsonl\n")
    expected = {"uf": [([{"role": t["role"], "content": t["content"]} for t in r["chosen"][:-1]],
                        r["chosen"][-1]["content"], r["rejected"][-1]["content"]) for r in uf],
                "hh": hh_expected,
                "gsm": [([{"role": "user", "content": r["prompt"]}], r["chosen"], r["rejected"]) for r in std]}
    _ok("run", "mix.yaml", "--out", "out", *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size", "2",
        "-q", cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    pairs = _mixture_pairs(tmp_path / "out", "trl")
    assert len(pairs) == _shards(tmp_path / "out" / "shards").num_rows  # every selected pair
    assert {name for name, _, _ in pairs} == {"uf", "hh", "gsm"}
    assert {row % 2 for name, row, _ in pairs if name == "uf"} == {0, 1}  # multi-turn pairs among them
    for name, row, pair in pairs:
        prompt, good, bad = expected[name][row]
        assert pair == {"prompt": prompt, "chosen": [{"role": "assistant", "content": good}],
                        "rejected": [{"role": "assistant", "content": bad}]}, (name, row)
    assert "DPO" in (tmp_path / "trl" / "README.md").read_text()
    for name in expected:  # each input curated alone gives the same pair for a row both selected
        _ok("run", f"{name}.jsonl", "--out", f"{name}-alone", *FAST[:-6], "--fraction", "0.8", "-n", "1",
            "--micro-batch-size", "1", "-q", cwd=tmp_path)
        _ok("export", f"{name}-alone/shards", "--for", "trl", "--out", f"{name}-trl", "-q", cwd=tmp_path)
        alone = {row["id"]: {c: row[c] for c in ("prompt", "chosen", "rejected")}
                 for row in pq.read_table(tmp_path / f"{name}-trl" / "train.parquet").to_pylist()}
        both = [(pair, alone[row]) for source, row, pair in pairs if source == name and row in alone]
        assert both and all(mixed == single for mixed, single in both), name
    _ok("export", "out/shards", "--for", "llamafactory", "--out", "lf", "-q", cwd=tmp_path)
    entry = json.loads((tmp_path / "lf" / "dataset_info.json").read_text())["cluster_curate"]
    ranked = pq.read_table(tmp_path / "lf" / entry["file_name"]).to_pylist()
    assert entry["ranking"] is True and len(ranked) == len(pairs)
    by_id = {r["id"]: r for r in ranked}
    for (name, row, pair), trl_row in zip(pairs, pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()):
        lf = by_id[trl_row["id"]]
        assert (lf["messages"], [lf["chosen"]], [lf["rejected"]]) == (pair["prompt"], pair["chosen"], pair["rejected"])
    _ok("export", "out/shards", "--for", "axolotl", "--out", "ax", "-q", cwd=tmp_path)
    ax = axolotl_pairs(tmp_path / "ax")  # axolotl's DPO chat_template.default dataset, in the planned order
    assert list(ax) == pq.read_table(tmp_path / "trl" / "train.parquet").column("id").to_pylist()
    for (name, row, _), (prompt, good, bad) in zip(pairs, ax.values()):
        assert (prompt, good, bad) == expected[name][row], (name, row)


def test_a_mixture_whose_pairs_are_renamed_is_exported_as_pairs_not_as_the_chosen_answers(tmp_path):
    """Two inputs of pairs whose `chosen` / `rejected` a mixture file renames (no column of the shards named so):
    `export --for trl` wrote SFT prompt / completion of the chosen answers and SFT settings, and `--for
    torchtune` took them, both dropping every rejected answer without a word (torchtune's DPO layout now holds the
    pairs trl's does)."""
    std, (hh, _) = preference_rows(30), hh_rows(30)
    write_jsonl(tmp_path / "gsm.jsonl", std)
    write_jsonl(tmp_path / "hh.jsonl", hh)
    (tmp_path / "mix.yaml").write_text("inputs:\n  - path: gsm.jsonl\n    rename: {chosen: good, rejected: bad}\n"
                                       "  - path: hh.jsonl\n    rename: {chosen: hh_chosen, rejected: hh_rejected}\n")
    _ok("run", "mix.yaml", "--out", "out", *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size", "2",
        "-q", cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    pairs = _mixture_pairs(tmp_path / "out", "trl")
    assert len(pairs) == _shards(tmp_path / "out" / "shards").num_rows and {name for name, _, _ in pairs} == {
        "gsm", "hh"}
    for name, row, pair in pairs:
        bad = std[row]["rejected"] if name == "gsm" else "Eggs cannot be boiled."
        assert pair["rejected"] == [{"role": "assistant", "content": bad}]
    assert "max_length" in json.loads((tmp_path / "trl" / "training_args.json").read_text())
    assert "packing" not in json.loads((tmp_path / "trl" / "training_args.json").read_text())  # DPOConfig's
    _ok("export", "out/shards", "--for", "torchtune", "--out", "tt", "-q", cwd=tmp_path)  # its DPO layout, same pairs
    conversations = {r["id"]: r for r in pq.read_table(tmp_path / "tt" / "train.parquet").to_pylist()}
    trl_rows = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert len(conversations) == len(trl_rows)
    for row in trl_rows:
        tt = conversations[row["id"]]
        assert (tt["chosen"], tt["rejected"]) == (row["prompt"] + row["chosen"], row["prompt"] + row["rejected"])

    shutil.copy(GSM, tmp_path / "sft.jsonl")  # beside rows of another format, a DPO layout is refused, naming it
    (tmp_path / "sft-mix.yaml").write_text("inputs:\n  - path: sft.jsonl\n  - path: hh.jsonl\n"
                                           "    rename: {chosen: hh_chosen, rejected: hh_rejected}\n")
    _ok("run", "sft-mix.yaml", "--out", "sft-out", *FAST, "-q", cwd=tmp_path)
    r = _cli("export", "sft-out/shards", "--for", "trl", "--out", "sft-trl", cwd=tmp_path)
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "input sft holds no preference pairs (format qa)" in line, r.stderr


def test_a_mixture_reads_each_inputs_pairs_with_its_own_rejected_field(tmp_path):
    """--rejected-field (or a mixture file's `rejected_field`) was refused in a mixture, export finding a mixture's
    pairs only in columns named `chosen` / `rejected`. Each input's pairs are read with its own fields now:
    StackExchange-paired (`response_j` / `response_k`), argilla's `chosen_response` / `rejected_response` (whose
    `source` column the mixture renames `source_source`) and TRL's text pairs export together, each pair right."""
    se, std = stack_exchange_paired_rows(30), preference_rows(30)
    named = [{"source": "gsm8k", "instruction": r["prompt"], "chosen_avg_rating": 5.0, "rejected_avg_rating": 1.5,
              "chosen_response": r["chosen"], "rejected_response": f"Perhaps {i}."} for i, r in enumerate(std)]
    for name, rows in (("se.jsonl", se), ("named.jsonl", named), ("gsm.jsonl", std)):
        write_jsonl(tmp_path / name, rows)
    (tmp_path / "mix.yaml").write_text(
        "inputs:\n  - {path: se.jsonl, prompt_field: question, response_field: response_j, rejected_field: response_k}\n"
        "  - {path: named.jsonl, prompt_field: instruction, response_field: chosen_response,\n"
        "     rejected_field: rejected_response}\n  - path: gsm.jsonl\n")
    summary = json.loads(_ok("inspect", "mix.yaml", "--json", cwd=tmp_path).stdout)
    assert [i["fields"]["rejected"] for i in summary["inputs"]] == ["response_k", "rejected_response", "rejected"]
    expected = {"se": [(r["question"], r["response_j"], r["response_k"]) for r in se],
                "named": [(r["instruction"], r["chosen_response"], r["rejected_response"]) for r in named],
                "gsm": [(r["prompt"], r["chosen"], r["rejected"]) for r in std]}
    _ok("run", "mix.yaml", "--out", "out", *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size", "2",
        "-q", cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    pairs = _mixture_pairs(tmp_path / "out", "trl")
    assert len(pairs) == _shards(tmp_path / "out" / "shards").num_rows
    assert {name for name, _, _ in pairs} == {"se", "named", "gsm"}
    for name, row, pair in pairs:
        prompt, good, bad = expected[name][row]
        assert pair == {"prompt": [{"role": "user", "content": prompt}],
                        "chosen": [{"role": "assistant", "content": good}],
                        "rejected": [{"role": "assistant", "content": bad}]}, (name, row)
    r = _cli("inspect", "se.jsonl", "gsm.jsonl", cwd=tmp_path)  # the hint names a mixture file's keys
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and ("give this input `prompt_field: question`, `response_field: response_j` and "
                                  "`rejected_field: response_k` (or other columns; the chosen answer's") in line, line
    # --rejected-field given to several inputs reads each of them so
    shutil.copy(tmp_path / "se.jsonl", tmp_path / "se2.jsonl")
    flags = ["--prompt-field", "question", "--response-field", "response_j", "--rejected-field", "response_k"]
    summary = json.loads(_ok("inspect", "se.jsonl", "se2.jsonl", *flags, "--json", cwd=tmp_path).stdout)
    assert [(i["format"], i["fields"]["rejected"]) for i in summary["inputs"]] == [("preference", "response_k")] * 2


def test_pairs_whose_chosen_and_rejected_answers_are_the_same_are_counted_and_warned_about_once(tmp_path):
    """Real HH-RLHF and UltraFeedback hold pairs whose two answers are the same (a DPO loss of zero: tokens that
    teach nothing); they were taken without a word. inspect counts them, embed and run warn once in one line with
    the count and the ids, and keep them (a well-formed row; --on-bad-row does not apply)."""
    (hh, _), uf = hh_rows(30), ultrafeedback_rows(30)
    for i in (4, 17):  # HH: the same transcript twice, but for a trailing space
        hh[i]["rejected"] = hh[i]["chosen"].rstrip() + " "
    uf[9]["rejected"] = uf[9]["chosen"]  # UltraFeedback: a tie, both answers the same
    write_jsonl(tmp_path / "hh.jsonl", hh)
    write_jsonl(tmp_path / "uf.jsonl", uf)
    summary = json.loads(_ok("inspect", "hh.jsonl", "--json", cwd=tmp_path).stdout)
    assert (summary["same_answer_pairs"], summary["same_answer_ids"]) == (2, [4, 17])
    table = _ok("inspect", "hh.jsonl", cwd=tmp_path).stdout
    assert "pairs with the same answer" in table and "2 (ids 4, 17)" in table
    assert "same_answer_pairs" not in json.loads(_ok("inspect", str(GSM), "--json", cwd=tmp_path).stdout)

    (tmp_path / "mix.yaml").write_text("inputs:\n  - path: hh.jsonl\n  - path: uf.jsonl\n"
                                       "    rename: {chosen: uf_chosen, rejected: uf_rejected}\n")
    r = _ok("embed", "mix.yaml", "--out", "e.parquet", "--features", "text", "--dim", "8", "--json", cwd=tmp_path)
    warned = [w for w in json.loads(r.stdout)["warnings"] if "same" in w]
    assert warned == ["3 preference pair(s) whose chosen and rejected answers are the same (spacing aside): a DPO "
                      "loss on them is zero, they cost tokens and teach nothing; kept (ids 4, 17, 39; `inspect` "
                      "counts them)"], warned
    assert _ids(tmp_path / "e.parquet") == list(range(60))  # kept
    r = _ok("run", "hh.jsonl", "--out", "out", *FAST, cwd=tmp_path)
    assert [line for line in r.stderr.splitlines() if "answers are the same" in line] == [
        "WARNING: 2 preference pair(s) whose chosen and rejected answers are the same (spacing aside): a DPO loss on "
        "them is zero, they cost tokens and teach nothing; kept (ids 4, 17; `inspect` counts them)"]


def test_a_multi_rank_embed_warns_of_same_answer_pairs_and_exact_copies_once(tmp_path):
    """Every rank reads the whole data before it embeds its chunks, so each counted every pair whose answers are
    the same, and each exact copy, and printed the same warnings: one per process under torchrun. The leader says
    them, once, with the counts over the whole data (and a mixture's note on its pairs beside other rows)."""
    import subprocess
    import sys

    from test_embed_slow import _env
    hh, _ = hh_rows(30)
    for i in (4, 17):
        hh[i]["rejected"] = hh[i]["chosen"].rstrip() + " "
    hh.append(dict(hh[2]))  # an exact copy of row 2
    write_jsonl(tmp_path / "hh.jsonl", hh)
    write_jsonl(tmp_path / "gsm.jsonl", [json.loads(line) for line in GSM.read_text().splitlines()[:10]])
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                        "cluster_curate", "embed", "hh.jsonl", "gsm.jsonl", "--out", "e", "--features", "text", "--dim",
                        "8", "--commit-every", "8"], capture_output=True, text=True, env=_env(), cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if line.startswith("WARNING:")]
    assert len(warned) == 3, warned
    assert warned[0].startswith("WARNING: the mixture holds preference pairs (input hh)")
    assert warned[1].startswith("WARNING: 1 exact duplicate(s)") and "ids 30" in warned[1]
    assert warned[2].startswith("WARNING: 2 preference pair(s) whose chosen and rejected answers are the same")


def test_a_mixture_of_pairs_and_rows_of_one_answer_is_said_once_before_any_work(tmp_path):
    """A mixture of preference pairs and rows of one answer was embedded and sharded without a word, and only
    `export --for trl` (or any chat layout) refused it, after the whole pipeline; no command before export knows
    which layout the user wants, so embed and run say once, before the feature pass, what each export will do
    (and the exports do it). A mixture of pairs alone says nothing."""
    hh, _ = hh_rows(20)
    write_jsonl(tmp_path / "hh.jsonl", hh)
    shutil.copy(GSM, tmp_path / "gsm.jsonl")
    r = _ok("run", "gsm.jsonl", "hh.jsonl", "--out", "out", *FAST, cwd=tmp_path)
    said = [line for line in r.stderr.splitlines() if "holds preference pairs" in line]
    assert said == ["WARNING: the mixture holds preference pairs (input hh) and rows of one answer (input gsm): "
                    "export --for trl, llamafactory, torchtune, axolotl (DPO) will refuse its shards, a pairwise loss "
                    "needing both answers in every row; --for hf, accelerate, torchrun, jsonl, parquet keep every row "
                    "with its columns. To train DPO on the pairs, curate them apart"], r.stderr
    assert r.stderr.index(said[0]) < r.stderr.index("\nembed: ")  # before the feature pass
    for refused in ("trl", "llamafactory", "torchtune", "axolotl"):
        r = _cli("export", "out/shards", "--for", refused, "--out", refused, cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and not (tmp_path / refused).exists(), r.stderr
        assert "input gsm holds no preference pairs" in lines[0] and "--for hf, accelerate" in lines[0], lines[0]
    _ok("export", "out/shards", "--for", "jsonl", "--out", "jsonl", cwd=tmp_path)
    shutil.copy(tmp_path / "hh.jsonl", tmp_path / "hh2.jsonl")
    r = _ok("embed", "hh.jsonl", "hh2.jsonl", "--out", "e.parquet", "--features", "text", "--dim", "8", "--json",
            cwd=tmp_path)
    assert not [w for w in json.loads(r.stdout)["warnings"] if "holds preference pairs" in w]


def test_a_conversation_whose_prompt_holds_no_text_is_a_bad_row_as_an_empty_text_prompt_is(tmp_path):
    """`{"question": "", "answer": "a"}` is a bad row ('empty prompt'); a chat whose user turns hold no text (empty,
    null, spaces, an image part alone) was an example of an empty prompt, with no word, in messages, ShareGPT and
    TRL's conversational prompts (prompt-completion and preference). It is a bad row naming the column now; a
    conversation with some prompt text (a system turn, an earlier user turn) beside an empty turn is still read."""
    image = [{"type": "image_url", "image_url": {"url": "u"}}]
    answer = {"role": "assistant", "content": "a cat"}
    cases = {
        "messages": ([{"messages": [{"role": "user", "content": c}, answer]} for c in ("", None, "  ", image)],
                     "messages"),
        "sharegpt": ([{"conversations": [{"from": "human", "value": c}, {"from": "gpt", "value": "g"}]}
                      for c in ("", None, " \n")], "conversations"),
        "trl": ([{"prompt": [{"role": "system", "content": ""}, {"role": "user", "content": c}],
                  "completion": [answer]} for c in ("", None, image)], "prompt"),
        "pairs": ([{"prompt": [{"role": "user", "content": c}], "chosen": "a", "rejected": "b"}
                   for c in ("", image)], "prompt"),
        "implicit": ([{"chosen": [{"role": "user", "content": c}, answer],
                       "rejected": [{"role": "user", "content": c}, {"role": "assistant", "content": "a dog"}]}
                      for c in ("", None)], "chosen")}
    for name, (rows, field) in cases.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
        r = _cli("embed", f"{name}.jsonl", "--out", f"{name}.parquet", "--features", "text", "--dim", "8", "-q",
                 cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (name, r.stderr)
        assert r.stderr.startswith(f"ERROR: {name}.jsonl:1: field '{field}': empty prompt (no text in its user "
                                   "turns)"), (name, r.stderr)
        summary = json.loads(_ok("inspect", f"{name}.jsonl", "--on-bad-row", "skip", "--json", cwd=tmp_path).stdout)
        assert (summary["examples"], summary["bad_rows"]) == (0, len(rows)), name
    write_jsonl(tmp_path / "some.jsonl", [
        {"messages": [{"role": "system", "content": "Describe the picture."}, {"role": "user", "content": image},
                      answer]},
        {"messages": [{"role": "user", "content": "What is this?"}, {"role": "assistant", "content": "A cat."},
                      {"role": "user", "content": ""}, answer]}])
    write_jsonl(tmp_path / "some-sharegpt.jsonl", [
        {"conversations": [{"from": "system", "value": "Greet."}, {"from": "human", "value": ""},
                           {"from": "gpt", "value": "Hello!"}]}])
    for name, n in (("some", 2), ("some-sharegpt", 1)):
        summary = json.loads(_ok("inspect", f"{name}.jsonl", "--json", cwd=tmp_path).stdout)
        assert (summary["examples"], summary["bad_rows"]) == (n, 0), name


def test_a_pair_of_dotted_paths_into_a_conversation_column_reads_those_items_not_a_conversation(tmp_path):
    """README's `--prompt-field conversations.0.value --response-field conversations.1.value`: the columns were
    detected as format sharegpt (`messages.0.content`: messages), which read the path as a conversation, and every
    row was a bad row ('conversation is text that is not valid JSON'); a flat pair of columns named beside a
    `messages` column read the messages, the response column never. A pair of fields named is a prompt and a
    response now (format prompt-completion), whatever conversation column the record holds too."""
    qa = [json.loads(line) for line in GSM.read_text().splitlines()[:20]]
    write_jsonl(tmp_path / "sharegpt.jsonl", [{"conversations": [{"from": "human", "value": r["question"]},
                                                                 {"from": "gpt", "value": r["answer"]}]} for r in qa])
    write_jsonl(tmp_path / "messages.jsonl", [{"messages": [{"role": "user", "content": r["question"]},
                                                            {"role": "assistant", "content": r["answer"]}]}
                                              for r in qa])
    write_jsonl(tmp_path / "beside.jsonl", [{"messages": [{"role": "user", "content": "hi"},
                                                          {"role": "assistant", "content": "hello"}],
                                             "q": r["question"], "a": r["answer"]} for r in qa])
    shutil.copy(GSM, tmp_path / "gsm.jsonl")
    flat = json.loads(_ok("inspect", "gsm.jsonl", "--json", cwd=tmp_path).stdout)
    for name, prompt, response in (("sharegpt", "conversations.0.value", "conversations.1.value"),
                                   ("messages", "messages.0.content", "messages.1.content"), ("beside", "q", "a")):
        r = _ok("inspect", f"{name}.jsonl", "--prompt-field", prompt, "--response-field", response, "--json",
                cwd=tmp_path)
        summary = json.loads(r.stdout)
        assert (summary["format"], summary["fields"]) == ("prompt-completion", {"prompt": prompt,
                                                                                "response": response}), name
        assert (summary["examples"], summary["bad_rows"]) == (20, 0), name
        for kind in ("prompt_chars", "response_chars"):
            assert summary["lengths"][kind]["max"] == max(len(r["question" if kind == "prompt_chars" else "answer"])
                                                          for r in qa), (name, kind)
    assert flat["format"] == "qa"
    # one field named, or a --format, reads the conversation column as before
    assert json.loads(_ok("inspect", "messages.jsonl", "--prompt-field", "messages", "--json",
                          cwd=tmp_path).stdout)["format"] == "messages"
    # one item of the turns named alone read the path as a conversation: every row bad ('not valid JSON')
    for flag, path, other in (("--prompt-field", "conversations.0.value", "--response-field"),
                              ("--response-field", "conversations.1.value", "--prompt-field")):
        r = _cli("inspect", "sharegpt.jsonl", flag, path, cwd=tmp_path)
        assert r.returncode == 2 and r.stderr.strip() == (
            f"ERROR: sharegpt.jsonl: {flag} {path} names one item of a conversation (sharegpt): name the other item "
            f"too ({other}, a dotted path as well), or the conversation's column alone"), r.stderr
    # a prompt's column named alone beside the turns is read as the conversation: each row's message says it holds
    # plain text (it said 'not valid JSON')
    r = _cli("inspect", "beside.jsonl", "--prompt-field", "q", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
        f"ERROR: beside.jsonl:1: field 'q': conversation is plain text ({qa[0]['question'][:37] + '...'!r}), not a "
        "list of turns"), r.stderr


def test_one_field_flag_naming_the_column_the_format_reads_for_the_other_field_is_refused(tmp_path):
    """`--response-field question` on GSM8K's columns made format qa read `question` as both the prompt and the
    response (`--prompt-field answer` the same), where both flags naming one column are refused: the one flag is
    refused too now, in one line, naming the flag to add. alpaca's `--response-field input` no longer reads the
    input into the prompt too."""
    shutil.copy(GSM, tmp_path / "gsm.jsonl")
    for argv, message in ((["--response-field", "question"],
                           "gsm.jsonl: --response-field 'question' is the prompt's column too (format qa reads its "
                           "prompt from it): the answer would be part of its own question; pass --prompt-field "
                           "COLUMN too"),
                          (["--prompt-field", "answer"],
                           "gsm.jsonl: --prompt-field 'answer' is the response's column too (format qa reads its "
                           "response from it): the answer would be part of its own question; pass --response-field "
                           "COLUMN too")):
        for command in (["inspect"], ["embed", "--out", "e.parquet", "--features", "text", "--dim", "8"]):
            r = _cli(*command[:1], "gsm.jsonl", *command[1:], *argv, cwd=tmp_path)
            assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"ERROR: {message}"], (argv, r.stderr)
            assert not (tmp_path / "e.parquet").exists()
    write_jsonl(tmp_path / "alpaca.jsonl", [{"instruction": f"Repeat {i}.", "input": f"word{i}", "output": "x"}
                                            for i in range(10)])
    summary = json.loads(_ok("inspect", "alpaca.jsonl", "--response-field", "input", "--json", cwd=tmp_path).stdout)
    assert summary["fields"] == {"prompt": "instruction", "response": "input"}
    assert summary["lengths"]["prompt_chars"]["max"] == len("Repeat 0.")


def test_sharegpt_speakers_under_a_messages_column_are_told_the_format_that_reads_them(tmp_path):
    """ShareGPT turns ({from, value}) under `messages` were 'turn has no role' with no word of the format that reads
    them, which the same speakers under `role` get; both get the hint now."""
    write_jsonl(tmp_path / "chat.jsonl", [{"messages": [{"from": "human", "value": "hi"},
                                                        {"from": "gpt", "value": "hello"}]}])
    r = _cli("inspect", "chat.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
        "ERROR: chat.jsonl:1: field 'messages[0].role': turn has no role (ShareGPT speakers as from/value: pass "
        "--format sharegpt --prompt-field messages) ("), r.stderr
    summary = json.loads(_ok("inspect", "chat.jsonl", "--format", "sharegpt", "--prompt-field", "messages", "--json",
                             cwd=tmp_path).stdout)
    assert (summary["examples"], summary["bad_rows"]) == (1, 0)
