"""Preference pairs whose preferred answer a label column names row by row (`--label-field`): stanfordnlp/SHP
(`human_ref_A`, `human_ref_B`, `labels`) and PKU-Alignment/PKU-SafeRLHF (`response_0`, `response_1`,
`better_response_id`), read, curated and exported with every pair in the order its label gives, through the
`cluster-curate` command."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from test_datasets import write_jsonl
from test_export_verify import axolotl_pairs
from test_input_formats import GSM, _ok, _shards
from conftest import cli_in_process as _cli
from test_outputs import FAST

SHP_FLAGS = ["--prompt-field", "history", "--response-field", "human_ref_A", "--rejected-field", "human_ref_B"]
PKU_FLAGS = ["--response-field", "response_1", "--rejected-field", "response_0", "--label-field", "better_response_id"]
SMALL_RUN = [*FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size", "2", "-q"]


def _gsm(n: int) -> list[dict]:
    return [json.loads(line) for line in GSM.read_text().splitlines()[:n]]


def shp_rows(n: int = 40) -> list[dict]:
    """Rows shaped as stanfordnlp/SHP's (its columns, in its order and types: `labels` int64, 1 where human_ref_A
    is preferred, 0 where human_ref_B is): GSM8K's question, its answer the preferred one, on side A or B as the
    label says."""
    rows = []
    for i, r in enumerate(_gsm(n)):
        label = (i * 7 + 3) % 5 % 2  # both labels, not in a simple alternation
        worse = f"I would guess {i + 41}, but I did not work it out."
        rows.append({"post_id": f"t3_{i:05x}", "domain": "askmath_train", "upvote_ratio": 0.97,
                     "history": r["question"],
                     "c_root_id_A": f"c{i}a", "c_root_id_B": f"c{i}b", "created_at_utc_A": 1_600_000_000 + i,
                     "created_at_utc_B": 1_600_000_500 + i, "score_A": 40 if label else 9,
                     "score_B": 9 if label else 40, "human_ref_A": r["answer"] if label else worse,
                     "human_ref_B": worse if label else r["answer"], "labels": label, "seconds_difference": 500.0,
                     "score_ratio": 4.44})
    return rows


def pku_table(n: int = 40) -> pa.Table:
    """Rows shaped as PKU-Alignment/PKU-SafeRLHF's Parquet (`better_response_id` / `safer_response_id` int64, the
    index of the better / safer response; its harm categories a struct, its safety flags booleans)."""
    rows = []
    for i, r in enumerate(_gsm(n)):
        better = i % 3 % 2
        worse = f"Just say {i + 7}."
        answers = {better: r["answer"], 1 - better: worse}
        rows.append({"prompt": r["question"], "response_0": answers[0], "response_1": answers[1],
                     "prompt_source": "gsm8k", "response_0_source": "Alpaca-7B", "response_1_source": "Alpaca2-7B",
                     "is_response_0_safe": True, "is_response_1_safe": True,
                     "response_0_harm_category": {"Violence": False, "Privacy Violation": False},
                     "response_1_harm_category": {"Violence": False, "Privacy Violation": False},
                     "response_0_severity_level": 0, "response_1_severity_level": 0,
                     "better_response_id": better, "safer_response_id": 1 - better})
    return pa.Table.from_pylist(rows)


def _check_trl_pairs(path, expected: dict) -> int:
    """Every pair of `export --for trl`: the preferred answer chosen, the other rejected (id -> (question,
    preferred, other)); the number of pairs."""
    exported = pq.read_table(path).to_pylist()
    for row in exported:
        question, good, bad = expected[row["id"]]
        assert row["prompt"] == [{"role": "user", "content": question}]
        assert row["chosen"] == [{"role": "assistant", "content": good}], row["id"]
        assert row["rejected"] == [{"role": "assistant", "content": bad}], row["id"]
    return len(exported)


def _check_llamafactory_pairs(folder, expected: dict) -> int:
    entry = json.loads((folder / "dataset_info.json").read_text())["cluster_curate"]
    assert entry["ranking"] is True
    ranked = pq.read_table(folder / entry["file_name"]).to_pylist()
    for row in ranked:
        question, good, bad = expected[row["id"]]
        assert [(m["role"], m["content"]) for m in row["messages"]] == [("user", question)]
        assert (row["chosen"]["content"], row["rejected"]["content"]) == (good, bad), row["id"]
    return len(ranked)


def _check_axolotl_pairs(folder, expected: dict) -> int:
    """Every pair of `export --for axolotl`, as its DPO chat_template.default reads it: the preferred answer
    chosen, the other rejected (id -> (question, preferred, other)); the number of pairs."""
    pairs = axolotl_pairs(folder)
    for i, (prompt, good, bad) in pairs.items():
        assert (prompt, good, bad) == ([{"role": "user", "content": expected[i][0]}], *expected[i][1:]), i
    return len(pairs)


def test_shp_answer_columns_without_their_label_are_refused_before_any_work(tmp_path):
    """SHP's answers named as chosen and rejected columns (`--response-field human_ref_A --rejected-field
    human_ref_B`) were read as they stand, every pair labelled 0 inverted (DPO toward the worse answer); they
    are refused in one line naming --label-field labels, in either order, and so are PKU-SafeRLHF's. The
    message for SHP's columns without flags gives the flags."""
    write_jsonl(tmp_path / "shp.jsonl", shp_rows(20))
    pq.write_table(pku_table(20), tmp_path / "pku.parquet")
    swapped = ["--prompt-field", "history", "--response-field", "human_ref_B", "--rejected-field", "human_ref_A"]
    cases = [(["shp.jsonl", *SHP_FLAGS], "--label-field labels"),
             (["shp.jsonl", *swapped], "--label-field labels"),
             (["pku.parquet", *PKU_FLAGS[:4]], "--label-field better_response_id"),
             # the label given, the answers in the order that would invert every pair
             (["shp.jsonl", *swapped, "--label-field", "labels"], "--response-field human_ref_A --rejected-field "
                                                                  "human_ref_B --label-field labels")]
    for i, (argv, flag) in enumerate(cases):
        r = _cli("embed", *argv, "--out", f"e{i}.parquet", "--features", "text", "--dim", "8", "-q", cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (argv, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith(f"ERROR: {argv[0]}: ") and flag in line, (argv, line)
        assert not (tmp_path / f"e{i}.parquet").exists()
    for name, flags in (("shp.jsonl", "--prompt-field history --response-field human_ref_A --rejected-field "
                                      "human_ref_B --label-field labels"),
                        ("pku.parquet", "--prompt-field prompt --response-field response_1 --rejected-field "
                                        "response_0 --label-field better_response_id")):
        r = _cli("inspect", name, cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"pass {flags} (" in r.stderr, r.stderr


def test_shp_pairs_run_and_export_in_the_order_of_their_labels(tmp_path):
    """SHP with --label-field labels: inspect reads 40 pairs (the label among its fields), `run` curates them with
    the preferred answer as each example's response (what features, answer kinds and token counts see), the shards
    keep SHP's columns as written, and `export --for trl` / `--for llamafactory` write every pair preferred answer
    first, whichever side it was on (torchtune's and axolotl's DPO layouts too), and `--for hf`, which keeps the
    columns as written, says in its README where the chosen answer is; the Python API takes the option."""
    rows = shp_rows()
    write_jsonl(tmp_path / "shp.jsonl", rows)
    expected = {i: (r["history"], *((r["human_ref_A"], r["human_ref_B"]) if r["labels"] else
                                    (r["human_ref_B"], r["human_ref_A"]))) for i, r in enumerate(rows)}
    flags = [*SHP_FLAGS, "--label-field", "labels"]
    summary = json.loads(_ok("inspect", "shp.jsonl", *flags, "--json", cwd=tmp_path).stdout)
    assert (summary["format"], summary["examples"], summary["fields"]["label"]) == ("preference", 40, "labels")
    assert summary["lengths"]["rejected_chars"]["total"] == sum(len(bad) for _, _, bad in expected.values())
    import cluster_curate as cc  # the Python API takes it too
    api = cc.inspect(str(tmp_path / "shp.jsonl"), prompt_field="history", response_field="human_ref_A",
                     rejected_field="human_ref_B", label_field="labels")
    assert (api["fields"], api["lengths"]["rejected_chars"]) == \
        (summary["fields"], summary["lengths"]["rejected_chars"])
    from cluster_curate.io.datasets import ReadOptions, open_dataset  # what every stage reads
    ds = open_dataset(tmp_path / "shp.jsonl", ReadOptions(prompt_field="history", response_field="human_ref_A",
                                                          rejected_field="human_ref_B", label_field="labels"))
    examples = [e for b in ds.iter_batches(16) for e in b.examples]
    assert [(e.response, e.rejected) for e in examples] == [expected[i][1:] for i in range(40)]

    _ok("run", "shp.jsonl", "--out", "out", *flags, *SMALL_RUN, cwd=tmp_path)
    shards = _shards(tmp_path / "out" / "shards")
    assert shards.select([c for c in rows[0]]).to_pylist() == [rows[i] for i in shards.column("id").to_pylist()]
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)  # the label from the lineage
    pairs = _check_trl_pairs(tmp_path / "trl" / "train.parquet", expected)
    assert pairs == 20 and {rows[i]["labels"] for i in shards.column("id").to_pylist()} == {0, 1}
    _ok("export", "out/shards", "--for", "llamafactory", "--out", "lf", "-q", cwd=tmp_path)
    assert _check_llamafactory_pairs(tmp_path / "lf", expected) == 20
    _ok("export", "out/shards", "--for", "torchtune", "--out", "tt", "-q", cwd=tmp_path)
    for row in pq.read_table(tmp_path / "tt" / "train.parquet").to_pylist():
        assert (row["chosen"][-1]["content"], row["rejected"][-1]["content"]) == expected[row["id"]][1:]
    _ok("export", "out/shards", "--for", "axolotl", "--out", "ax", "-q", cwd=tmp_path)  # its DPO chat_template
    assert _check_axolotl_pairs(tmp_path / "ax", expected) == 20
    # a layout that keeps the columns as written says where the chosen answer is; a DPO layout needs no such word
    _ok("export", "out/shards", "--for", "hf", "--out", "hf", "-q", cwd=tmp_path)
    kept = pq.read_table(tmp_path / "hf" / "train.parquet").to_pylist()
    assert all(row["human_ref_A"] == rows[row["id"]]["human_ref_A"] for row in kept) and len(kept) == 20
    said = "the chosen answer is `human_ref_A` where `labels` is 1, `human_ref_B` where it is 0"
    assert said in (tmp_path / "hf" / "README.md").read_text()
    assert said not in (tmp_path / "trl" / "README.md").read_text()


def test_pku_saferlhf_parquet_pairs_embed_and_export_by_better_response_id(tmp_path):
    """PKU-SafeRLHF's Parquet (int64 ids): --response-field response_1 --rejected-field response_0 --label-field
    better_response_id embeds each pair's better answer as the example's response (the text feature's answer
    words), and the export follows the label; --label-field safer_response_id gives the other order."""
    table = pku_table()
    pq.write_table(table, tmp_path / "pku.parquet")
    rows = table.to_pylist()
    better = {i: (r["prompt"], r[f"response_{r['better_response_id']}"], r[f"response_{1 - r['better_response_id']}"])
              for i, r in enumerate(rows)}
    _ok("embed", "pku.parquet", *PKU_FLAGS, "--out", "e.parquet", "--features", "text", "--dim", "8", "-q",
        cwd=tmp_path)
    words = pq.read_table(tmp_path / "e.parquet", columns=["response_words"]).column("response_words").to_pylist()
    assert words == [len(better[i][1].split()) for i in range(40)]
    _ok("run", "pku.parquet", "--out", "out", *PKU_FLAGS, *SMALL_RUN, cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    assert _check_trl_pairs(tmp_path / "trl" / "train.parquet", better) == 20
    safer = {i: (q, bad, good) for i, (q, good, bad) in better.items()}
    _ok("run", "pku.parquet", "--out", "safe", *PKU_FLAGS[:4], "--label-field", "safer_response_id", *SMALL_RUN,
        cwd=tmp_path)
    _ok("export", "safe/shards", "--for", "trl", "--out", "trl-safe", "-q", cwd=tmp_path)
    assert _check_trl_pairs(tmp_path / "trl-safe" / "train.parquet", safer) == 20
    _ok("export", "safe/shards", "--for", "axolotl", "--out", "ax-safe", "-q", cwd=tmp_path)
    assert _check_axolotl_pairs(tmp_path / "ax-safe", safer) == 20


def test_helpsteer2_pairs_are_refused_until_their_strength_is_a_label(tmp_path):
    """nvidia/HelpSteer2's preference file orders a pair by the sign of `preference_strength` (-3..3; negative:
    response_1 preferred, 0 a tie), which is no label of 1 and 0: its answers named as a pair, with or without
    that column as the label, are refused in one line saying how to make a label; so are its columns as they
    are. With such a label column, every pair is read in its order."""
    rows = [{"split": "train", "prompt": r["question"], "response_1": r["answer"] if i % 3 == 1 else f"About {i}.",
             "response_2": f"About {i}." if i % 3 == 1 else r["answer"], "preference_strength": (0, -2, 3)[i % 3],
             "preference_statement": "@Response 1 is slightly better than @Response 2.",
             "preference_elaboration": "It works the problem out."} for i, r in enumerate(_gsm(30))]
    write_jsonl(tmp_path / "hs2.jsonl", rows)
    answers = ["--response-field", "response_1", "--rejected-field", "response_2"]
    for argv in ([], answers, [*answers, "--label-field", "preference_strength"]):
        r = _cli("inspect", "hs2.jsonl", *argv, cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert ("the sign of preference_strength names (response_1 where it is negative, response_2 where it is "
                "positive, a tie at 0)" in r.stderr and "write a column that is 1 where preference_strength is "
                "negative and 0 where it is positive" in r.stderr), r.stderr
    labelled = [dict(r, prefers_1=int(r["preference_strength"] < 0)) for r in rows if r["preference_strength"]]
    write_jsonl(tmp_path / "labelled.jsonl", labelled)
    from cluster_curate.io.datasets import ReadOptions, open_dataset
    ds = open_dataset(tmp_path / "labelled.jsonl", ReadOptions(response_field="response_1", rejected_field="response_2",
                                                               label_field="prefers_1"))
    examples = [e for b in ds.iter_batches(16) for e in b.examples]
    assert {r["prefers_1"] for r in labelled} == {0, 1}
    assert [(e.response, e.rejected) for e in examples] == [
        (r["response_1"], r["response_2"]) if r["prefers_1"] else (r["response_2"], r["response_1"]) for r in labelled]


def test_bad_labels_are_one_line_naming_the_row_and_field(tmp_path):
    """A label that is neither 1/true nor 0/false (null, 2, "tie", a tie's 0.5) is a bad row: one line naming the
    file, line and label column, before any work; --on-bad-row skip leaves it out into the rejects. A label column
    that does not exist, or that is an answer's, or a label with another format, is refused in one line."""
    for value, shown in ((None, "null"), (2, "2"), ("tie", '"tie"'), (0.5, "0.5")):
        rows = shp_rows(20)
        rows[6]["labels"] = value
        write_jsonl(tmp_path / "bad.jsonl", rows)
        r = _cli("embed", "bad.jsonl", *SHP_FLAGS, "--label-field", "labels", "--out", "e.parquet", "--features",
                 "text", "--dim", "8", "-q", cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith(f"ERROR: bad.jsonl:7: field 'labels': label {shown}: expected 1 (human_ref_A is the "
                               "chosen answer) or 0 (human_ref_B is)"), line
        assert not (tmp_path / "e.parquet").exists()
    rows = shp_rows(20)
    rows[3]["labels"], rows[4]["labels"] = True, False  # JSON booleans read as 1 and 0
    write_jsonl(tmp_path / "bool.jsonl", rows)
    _ok("embed", "bool.jsonl", *SHP_FLAGS, "--label-field", "labels", "--out", "b.parquet", "--features", "text",
        "--dim", "8", "-q", cwd=tmp_path)
    words = pq.read_table(tmp_path / "b.parquet", columns=["response_words"]).column("response_words").to_pylist()
    assert words[3:5] == [len(rows[3]["human_ref_A"].split()), len(rows[4]["human_ref_B"].split())]
    r = json.loads(_ok("embed", "bad.jsonl", *SHP_FLAGS, "--label-field", "labels", "--out", "s.parquet",
                       "--features", "text", "--dim", "8", "--on-bad-row", "skip", "--json", cwd=tmp_path).stdout)
    assert (r["rows_in_data"], r["bad_rows"], pq.read_table(tmp_path / "s.parquet").num_rows) == (20, 1, 19)
    answers = SHP_FLAGS[:4]  # the prompt and the response-field
    for argv, message in (([*SHP_FLAGS, "--label-field", "label"], "bad.jsonl: --label-field 'label': no such column"),
                          ([*SHP_FLAGS, "--label-field", "human_ref_B"],
                           "bad.jsonl: --label-field 'human_ref_B' is the rejected answer's column"),
                          ([*answers, "--label-field", "labels", "--format", "qa"],
                           "--label-field 'labels' says which answer of a preference pair is the chosen one: it goes "
                           "with --format preference, not qa")):
        r = _cli("inspect", "bad.jsonl", *argv, cwd=tmp_path)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert message in r.stderr, r.stderr


def test_a_mixture_input_reads_its_pairs_by_its_label_field(tmp_path):
    """A mixture file's `label_field` (beside `rejected_field`) orders one input's pairs; another input of TRL
    pairs is read as it is; the export follows each input's label. Without it, SHP's input is refused with the
    mixture file's keys."""
    rows = shp_rows(30)
    write_jsonl(tmp_path / "shp.jsonl", rows)
    trl = [{"prompt": r["question"], "chosen": r["answer"], "rejected": "No idea."} for r in _gsm(60)[30:]]
    write_jsonl(tmp_path / "trl.jsonl", trl)
    keys = "prompt_field: history, response_field: human_ref_A, rejected_field: human_ref_B"
    (tmp_path / "bad.yaml").write_text(f"inputs:\n  - {{path: shp.jsonl, {keys}}}\n  - {{path: trl.jsonl}}\n")
    r = _cli("inspect", "bad.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "label_field: labels" in r.stderr, r.stderr
    (tmp_path / "mix.yaml").write_text(f"inputs:\n  - {{path: shp.jsonl, {keys}, label_field: labels}}\n"
                                       "  - {path: trl.jsonl}\n")
    _ok("run", "mix.yaml", "--out", "out", *SMALL_RUN, cwd=tmp_path)
    _ok("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    where = {r["id"]: (str(r["source"]), r["source_row"])
             for r in _shards(tmp_path / "out" / "shards").select(["id", "source", "source_row"]).to_pylist()}
    exported = pq.read_table(tmp_path / "trl" / "train.parquet").to_pylist()
    assert {where[row["id"]][0] for row in exported} == {"shp", "trl"}
    for row in exported:
        name, i = where[row["id"]]
        if name == "shp":
            good, bad = ((rows[i]["human_ref_A"], rows[i]["human_ref_B"]) if rows[i]["labels"]
                         else (rows[i]["human_ref_B"], rows[i]["human_ref_A"]))
        else:
            good, bad = trl[i]["chosen"], trl[i]["rejected"]
        assert (row["chosen"][0]["content"], row["rejected"][0]["content"]) == (good, bad), (name, i)


def test_inspect_says_how_many_pairs_each_answer_column_gave_the_chosen_answer(tmp_path):
    """With --label-field, inspect (text and --json) counts the pairs whose chosen answer is the response
    column's (label 1) and those whose is the rejected column's (label 0: the two swapped); a bad label is a bad
    row, in neither count. A mixture's input says it in its row; an input without a label does not."""
    rows = shp_rows(40)
    rows[5]["labels"] = "tie"
    write_jsonl(tmp_path / "shp.jsonl", rows)
    from_a = sum(r["labels"] == 1 for r in rows)
    from_b = sum(r["labels"] == 0 for r in rows)
    assert from_a and from_b and from_a + from_b == 39
    flags = [*SHP_FLAGS, "--label-field", "labels", "--on-bad-row", "skip"]
    summary = json.loads(_ok("inspect", "shp.jsonl", *flags, "--json", cwd=tmp_path).stdout)
    assert (summary["examples"], summary["bad_rows"]) == (39, 1)
    assert summary["chosen_from"] == {"human_ref_A": from_a, "human_ref_B": from_b}
    text = _wide("inspect", "shp.jsonl", *flags, cwd=tmp_path)
    assert f"{from_a} chosen from human_ref_A (labels 1), {from_b} from human_ref_B (labels 0)" in text, text
    pq.write_table(pku_table(12), tmp_path / "pku.parquet")  # PKU-SafeRLHF: response_1 chosen where it is better
    pku = json.loads(_ok("inspect", "pku.parquet", "--prompt-field", "prompt", *PKU_FLAGS, "--json",
                         cwd=tmp_path).stdout)
    better = pku_table(12).column("better_response_id").to_pylist()
    assert pku["chosen_from"] == {"response_1": better.count(1), "response_0": better.count(0)}
    write_jsonl(tmp_path / "trl.jsonl", [{"prompt": r["question"], "chosen": r["answer"], "rejected": "No idea."}
                                         for r in _gsm(10)])
    unlabelled = json.loads(_ok("inspect", "trl.jsonl", "--json", cwd=tmp_path).stdout)
    assert "chosen_from" not in unlabelled
    keys = "prompt_field: history, response_field: human_ref_A, rejected_field: human_ref_B, label_field: labels"
    (tmp_path / "mix.yaml").write_text(f"inputs:\n  - {{path: shp.jsonl, {keys}, on_bad_row: skip}}\n"
                                       "  - {path: trl.jsonl}\n")
    mix = json.loads(_ok("inspect", "mix.yaml", "--json", cwd=tmp_path).stdout)
    assert [i.get("chosen_from") for i in mix["inputs"]] == [{"human_ref_A": from_a, "human_ref_B": from_b}, None]
    text = _wide("inspect", "mix.yaml", cwd=tmp_path)
    assert f"{from_a} chosen from human_ref_A (labels 1), {from_b} from human_ref_B (labels 0)" in text, text


def test_labels_read_from_a_csv_as_text_name_the_chosen_answer_as_numbers_do(tmp_path):
    """A CSV's columns are text: SHP's labels written as CSV were every one a bad row ('label "1": expected 1 ...').
    Their text, and true / false in any case, now reads as the number or boolean would; other text is still a bad
    row."""
    import pyarrow.csv as pacsv
    rows = shp_rows(30)
    from_a = sum(r["labels"] == 1 for r in rows)
    text = {1: ["1", "True", " true"], 0: ["0", "FALSE", "false"]}
    table = pa.Table.from_pylist([{**r, "labels": text[r["labels"]][i % 3]} for i, r in enumerate(rows)])
    pacsv.write_csv(table, tmp_path / "shp.csv")
    flags = [*SHP_FLAGS, "--label-field", "labels"]
    summary = json.loads(_ok("inspect", "shp.csv", *flags, "--json", cwd=tmp_path).stdout)
    assert (summary["container"], summary["examples"], summary["bad_rows"]) == ("csv", 30, 0)
    assert summary["chosen_from"] == {"human_ref_A": from_a, "human_ref_B": 30 - from_a}
    (tmp_path / "shp.csv").write_text((tmp_path / "shp.csv").read_text().replace('"FALSE"', '"maybe"', 1))
    r = _cli("inspect", "shp.csv", *flags, cwd=tmp_path)
    assert r.returncode == 2 and "field 'labels': label \"maybe\": expected 1" in r.stderr, r.stderr


def test_labels_of_a_float_column_written_as_csv_read_as_their_whole_numbers(tmp_path):
    """pandas writes a float label column's 1 and 0 as "1.0" and "0.0": such a CSV's labels were every one a bad row
    ('label "1.0": expected 1 ...'), though the JSON number 1.0 reads as 1. The text of a whole 1 or 0 now reads as
    that number; the text of any other number ("0.5", "1.5", "10.0") is still a bad row."""
    rows = shp_rows(30)
    from_a = sum(r["labels"] == 1 for r in rows)
    columns = ["history", "human_ref_A", "human_ref_B", "labels"]
    lines = [",".join(columns)] + [",".join(json.dumps(r[c]) for c in columns[:3]) + f",{r['labels']:.1f}"
                                   for r in rows]
    (tmp_path / "shp.csv").write_text("\n".join(lines) + "\n")
    assert lines[1].endswith((",1.0", ",0.0"))
    flags = [*SHP_FLAGS, "--label-field", "labels"]
    summary = json.loads(_ok("inspect", "shp.csv", *flags, "--json", cwd=tmp_path).stdout)
    assert (summary["examples"], summary["bad_rows"]) == (30, 0)
    assert summary["chosen_from"] == {"human_ref_A": from_a, "human_ref_B": 30 - from_a}
    for odd in ("0.5", "1.5", "10.0"):
        (tmp_path / "odd.csv").write_text("\n".join([*lines[:3], lines[3].rpartition(",")[0] + "," + odd,
                                                     *lines[4:]]) + "\n")
        r = _cli("inspect", "odd.csv", *flags, cwd=tmp_path)
        assert r.returncode == 2 and f"odd.csv: id 2: field 'labels': label \"{odd}\": expected 1" in r.stderr, r.stderr


def _wide(*argv, cwd) -> str:
    """What a command prints on a terminal wide enough for its tables' rows not to wrap."""
    r = _cli(*argv, cwd=cwd, COLUMNS="250")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_inspect_writes_the_labelled_pairs_counts_as_every_summary_writes_counts():
    """Summaries write counts with thousands separators (console._fmt); the labelled-pairs line wrote `1234`."""
    from cluster_curate.commands.inspect import _chosen_text
    assert _chosen_text({"human_ref_A": 1234, "human_ref_B": 5}, "labels") == \
        "1,234 chosen from human_ref_A (labels 1), 5 from human_ref_B (labels 0)"
