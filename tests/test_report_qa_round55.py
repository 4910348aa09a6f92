"""QA round 55, `report` on a selection: it accounts for every row as `select` and `embed` do.

The report of a selection made with --dedup left out the near-duplicates dropped, the notes, the `after_dedup`
column and the exact duplicates; the embeddings section left out the exact duplicates and the bad rows; a
--per-cluster-ratio selection lost its rule; "clusters covered" counted every cluster where select counts the
non-empty ones (keys `covered`, `clusters` against select's `covered`, `nonempty`); `kept` was unrounded."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cluster_curate.cli import main
from cluster_curate.summary_schema import check, schema_of

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"


def _json(runner, *args) -> dict:
    r = runner.invoke(main, [*map(str, args), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """200 GSM8K rows, 20 exact copies, 30 near copies (a sentence added), one bad row (no answer) skipped: embedded,
    clustered into 8."""
    from click.testing import CliRunner
    tmp = tmp_path_factory.mktemp("pool")
    rows = [json.loads(line) for line in DATA.read_text().splitlines()[:200]]
    rows += [dict(r) for r in rows[:20]] + [dict(r, question=r["question"] + " Please answer.") for r in rows[20:50]]
    rows.append({"question": "A question with no answer"})
    (tmp / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = CliRunner()
    embed = _json(runner, "embed", tmp / "d.jsonl", "--out", tmp / "e.parquet", "--features", "text", "--dim", 32,
                  "--on-bad-row", "skip")
    assert (embed["rows_in_data"], embed["bad_rows"], embed["exact_duplicates_dropped"], embed["rows"]) == (
        251, 1, 20, 230)
    _json(runner, "cluster", tmp / "e.parquet", "--out", tmp / "c.parquet", "--k", 8)
    return tmp, embed


def test_report_of_a_deduplicated_selection_says_every_row_select_and_embed_said(pool, cli_runner):
    tmp, embed = pool
    sel = _json(cli_runner, "select", tmp / "c.parquet", "--out", tmp / "s.parquet", "--budget", 230, "--dedup", 0.9)
    assert sel["near_duplicates_dropped"] > 0 and sel["notes"] and sel["selected"] < 230
    rep = _json(cli_runner, "report", tmp / "s.parquet")
    assert not check(rep, schema_of("report")), check(rep, schema_of("report"))
    s = rep["selection"]
    for key in ("selected", "kept", "exact_duplicates_left_out", "near_duplicates_dropped", "notes", "within",
                "within_auto"):
        assert s[key] == sel[key], key
    assert s["clusters_covered"] == dict(sel["clusters_covered"], clusters=8)
    assert s["exact_duplicates_left_out"] == 20 and s["kept"] == round(sel["selected"] / 230, 4)
    # the table: each cluster's rows, those --dedup left, those selected, as select's
    assert s["table"] == sel["per_cluster"]
    assert sum(r["after_dedup"] for r in s["table"]) == 230 - sel["near_duplicates_dropped"] == sel["selected"]
    e = rep["embeddings"]
    for key in ("rows_in_data", "bad_rows", "skipped_no_response", "exact_duplicates_dropped"):
        assert e[key] == embed[key], key
    assert e["rows"] + e["bad_rows"] + e["skipped_no_response"] + e["exact_duplicates_dropped"] == e["rows_in_data"]
    assert e["rejects"] == embed["rejects"] and Path(e["rejects"]).is_file()
    text = cli_runner.invoke(main, ["report", str(tmp / "s.parquet")]).stdout
    for line in (f"near-duplicates dropped │ {sel['near_duplicates_dropped']} (cosine > 0.9)",
                 "exact duplicates left out │ 20", "bad rows │ 1", "rows in the data │ 251"):
        assert " ".join(line.split()) in " ".join(text.split()), line
    assert " ".join(sel["notes"][0].split())[:60] in " ".join(text.replace("│", " ").split())


def test_report_of_a_per_cluster_ratio_selection_says_its_rule(pool, cli_runner):
    tmp, _ = pool
    sel = _json(cli_runner, "select", tmp / "c.parquet", "--out", tmp / "r.parquet", "--per-cluster-ratio", 0.5)
    rep = _json(cli_runner, "report", tmp / "r.parquet")["selection"]
    assert rep["rule"] == sel["rule"] and rep["rule"].startswith("floor(0.5 x smallest cluster")
    assert rep["kept"] == sel["kept"] and "notes" not in rep and "near_duplicates_dropped" not in rep


def test_clusters_covered_counts_the_clusters_decontamination_left_rows_in(pool, cli_runner, tmp_path):
    tmp, _ = pool
    clusters = pq.read_table(tmp / "c.parquet", columns=["id", "cluster"]).to_pydict()
    rows = [json.loads(line) for line in (tmp / "d.jsonl").read_text().splitlines()]
    emptied = clusters["cluster"][0]  # every question of one cluster is in the eval set: none of its rows left
    evals = [{"question": rows[i]["question"], "answer": "x"}
             for i, c in zip(clusters["id"], clusters["cluster"]) if c == emptied]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    sel = _json(cli_runner, "select", tmp / "c.parquet", "--out", tmp_path / "s.parquet", "--fraction", 0.5,
                "--decontaminate", tmp_path / "eval.jsonl")
    assert sel["clusters_covered"] == {"covered": 7, "nonempty": 7}
    rep = _json(cli_runner, "report", tmp_path / "s.parquet")["selection"]
    # select's keys and figures; `clusters` (every cluster, empty ones too) is kept for one release
    assert rep["clusters_covered"] == {"covered": 7, "nonempty": 7, "clusters": 8}
    assert rep["kept"] == sel["kept"] and isinstance(rep["kept"], float) and len(str(rep["kept"])) <= 6
    text = cli_runner.invoke(main, ["report", str(tmp_path / "s.parquet")]).stdout
    assert "clusters covered │ 7 / 7 (100.0%)" in " ".join(text.split())


def test_report_of_embeddings_whose_rejects_list_is_gone_counts_the_rows_not_embedded(pool, cli_runner, tmp_path):
    import shutil
    tmp, _ = pool
    shutil.copy(tmp / "e.parquet", tmp_path / "e.parquet")  # without its rejects list
    e = _json(cli_runner, "report", tmp_path / "e.parquet")["embeddings"]
    assert (e["rows_in_data"], e["rows_not_embedded"], e["exact_duplicates_dropped"]) == (251, 1, 20)
    assert "bad_rows" not in e and "rejects" not in e


# ----------------------------------------------------------------------------- the same lines, built once


def _lines(runner, *args) -> dict:
    """A command's summary tables as label -> text, one line each (a screen wide enough that nothing folds)."""
    r = runner.invoke(main, list(map(str, args)), env={"COLUMNS": "1000"})
    assert r.exit_code == 0, r.output
    cells = [[c.strip() for c in row.strip().strip("│").split("│")] for row in r.stdout.splitlines()
             if row.strip().startswith("│")]
    return {c[0]: c[1] for c in cells if len(c) == 2}


@pytest.mark.parametrize("options", [("--budget", 230, "--dedup", 0.9),
                                     ("--per-cluster-ratio", 0.5, "--within", "random")])
def test_report_says_selects_lines_word_for_word(pool, cli_runner, tmp_path, options):
    """Each line `select` said of how it chose (kept, copies, coverage, within, the ratio's rule, --dedup, the
    notes) is the line `report` says of the artifact: one wording, from one place, for both."""
    tmp, _ = pool
    sel = _lines(cli_runner, "select", tmp / "c.parquet", "--out", tmp_path / "s.parquet", *options)
    rep = _lines(cli_runner, "report", tmp_path / "s.parquet")
    shared = [k for k in sel if k.startswith(("kept", "exact duplicates", "clusters covered", "within", "rule",
                                              "near-duplicates", "note"))]
    assert len(shared) == (6 if "--dedup" in options else 5), sel  # the dedup one: a note
    assert {k: rep.get(k) for k in shared} == {k: sel[k] for k in shared}


def test_report_says_embeds_lines_of_the_rows_not_embedded_word_for_word(pool, cli_runner, tmp_path):
    tmp, _ = pool
    out = tmp_path / "e.parquet"
    emb = _lines(cli_runner, "embed", tmp / "d.jsonl", "--out", out, "--features", "text", "--dim", 32,
                 "--on-bad-row", "skip")
    rep = _lines(cli_runner, "report", out)
    shared = ["bad rows", "rejects file", "exact duplicates left out"]
    assert {k: rep.get(k) for k in shared} == {k: emb[k] for k in shared} == {
        "bad rows": "1", "rejects file": emb["rejects file"], "exact duplicates left out": "20"}
    assert "skipped (nothing to embed)" not in rep and "skipped (nothing to embed)" not in emb  # none: no line


# ----------------------------------------------------------------------------------- semantic's max length


@pytest.mark.parametrize("given, shown", [
    ((), "256 (the encoder's own limit)"),  # the default is the model features' length, as embed says
    (("--max-length", 1000), "256 (the encoder's own limit, below --max-length 1000)"),
    (("--max-length", 64), "64 (--max-length; the encoder's own limit: 256)")])
def test_report_of_semantic_embeddings_says_the_length_the_encoder_cut_to(cli_runner, tmp_path, given, shown):
    """`report` said `max length 1,024` (the model features' default) of embeddings whose encoder cut at 256: it
    says the length the encoder read, and what --max-length did there."""
    data = tmp_path / "g.jsonl"
    data.write_text("".join(DATA.read_text().splitlines(True)[:6]))
    out = tmp_path / "e.parquet"
    _json(cli_runner, "embed", data, "--out", out, "--features", "semantic", *given)
    rep = _json(cli_runner, "report", out)
    assert rep["embeddings"]["max_length"] == int(shown.split()[0])
    assert not check(rep, schema_of("report")), check(rep, schema_of("report"))  # `encoder` was not in it
    assert _lines(cli_runner, "report", out)["max length"] == shown


def test_report_of_text_embeddings_says_max_length_is_not_used(pool, cli_runner):
    tmp, _ = pool
    assert _lines(cli_runner, "report", tmp / "e.parquet")["max length"] == "1,024 (not used: no model or encoder)"
