"""The select stage's QA round 53: near-duplicates of short answers, source bounds said as the bounds are, and
run's early check of a token budget (tests build their own inputs from the fixtures)."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from cluster_curate import within_orders as O
from cluster_curate.budget_sequence import source_bounded_take
from cluster_curate.errors import CurateError
from conftest import FIXTURES, ROOT, cli_in_process
from test_datasets import write_jsonl

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
CODE = FIXTURES / "code_alpaca" / "code_alpaca-300.json"
CAPITALS = [("France", "Paris"), ("Peru", "Lima"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Chile", "Santiago"), ("Canada", "Ottawa"),
            ("Norway", "Oslo"), ("Greece", "Athens"), ("Poland", "Warsaw"), ("Cuba", "Havana"),
            ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Portugal", "Lisbon"), ("Russia", "Moscow"),
            ("Thailand", "Bangkok"), ("Hungary", "Budapest"), ("Sweden", "Stockholm")]


def _ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r


# ------------------------------------------------------------------------------------------ defect 1: --dedup


def _capitals(tmp_path):
    """20 capital questions of different answers, two reworded copies of the first (the same answer, the second
    with its punctuation: "Paris." is "Paris"), 100 GSM8K rows."""
    rows = [{"question": f"What is the capital of {c}?", "answer": a} for c, a in CAPITALS]
    rows.append({"question": "What is the capital of France ?", "answer": "Paris"})
    rows.append({"question": "what is the capital of France?", "answer": "Paris."})
    rows += [json.loads(line) for line in GSM.read_text().splitlines()[:100]]
    return write_jsonl(tmp_path / "caps.jsonl", rows)


def _selected_questions(selection, data) -> list[str]:
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    return [rows[i]["question"] for i in pq.read_table(selection, columns=["id"])["id"].to_pylist()]


def test_dedup_keeps_different_short_answers_and_drops_the_same_one(tmp_path):
    """The text features weigh topic words down: the 20 capital questions were > 0.99 apart, and `--dedup 0.99`
    kept one of them. Two short answers that differ are not near-duplicates; the reworded copy with the same
    answer still is, and so is one whose answer differs in punctuation alone (review: compared by embed's
    answer_key, "Paris." was another answer), in run and in select --data."""
    data = _capitals(tmp_path)
    r = _ok(cli_in_process("run", data, "--out", tmp_path / "r1", "--fraction", "1.0", "--dedup", "0.99",
                           "--num-shards", "1", "--json"))
    summary = json.loads(r.stdout)["summaries"]["select"]
    assert summary["near_duplicates_dropped"] == 2
    kept = _selected_questions(tmp_path / "r1" / "selection.parquet", data)
    assert [q for q in kept if "capital" in q] == [f"What is the capital of {c}?" for c, _ in CAPITALS]
    r = _ok(cli_in_process("select", tmp_path / "r1" / "clusters.parquet", "--out", tmp_path / "s.parquet",
                           "--fraction", "1.0", "--dedup", "0.99", "--data", data, "--json"))
    assert json.loads(r.stdout)["near_duplicates_dropped"] == 2


def test_dedup_of_short_answers_block_by_block():
    """dedup_within_cluster with answers: a pair of short answers that differ is never dropped, in a block or
    against the kept rows; a pair with a long response keeps the cosine rule."""
    x = np.tile(np.array([[1.0, 0.0]], np.float32), (6, 1))  # every row a copy of every other
    answers = np.array([1, 2, 1, 3, 3, 4])
    short = np.array([True, True, True, True, False, False])
    for block in (1, 2, 6):
        keep = O.dedup_within_cluster(x, np.arange(6), np.array([6]), 0.9, block_rows=block, answers=answers,
                                      short=short)
        # row 2 repeats row 0's answer; row 4 (long) is a copy of row 0; row 5 (long) too
        assert keep.tolist() == [True, True, False, True, False, False]
    assert O.dedup_within_cluster(x, np.arange(6), np.array([6]), 0.9).tolist() == [True] + [False] * 5


# ------------------------------------------------------------------------------------------ defects 2 and 3: bounds


def _mixture(tmp_path, *, math_floor=None):
    """GSM8K and Code Alpaca, named math and code in a mixture file (math's floor `math_floor`)."""
    shutil.copy(GSM, tmp_path / "gsm.jsonl")
    shutil.copy(CODE, tmp_path / "code.json")
    floor = f", min_share: {math_floor}" if math_floor is not None else ""
    (tmp_path / "mix.yaml").write_text(f"inputs:\n  - {{path: gsm.jsonl, name: math{floor}}}\n"
                                       "  - {path: code.json, name: code}\n")
    return tmp_path / "mix.yaml"


def _line(stdout: str, label: str) -> str:
    """select's summary line `label`, on a screen wide enough for it to be one (run's: after embed's)."""
    shown = stdout[stdout.index("select →"):]
    return next(line for line in shown.splitlines() if f"│ {label} " in line).split("│")[2].strip()


def test_a_cap_under_a_token_budget_is_said_as_a_share_of_the_budget(tmp_path):
    """`--token-budget T --source-max-share code=0.4`: the cap is floor(0.4 T) tokens, and the selection is within
    one row of T, so code's share of the selection could be above 40% with the cap met. The line gives its share of
    the budget beside it and names the cap; --json and the manifest (token_share_of_selection) give them too."""
    mix = _mixture(tmp_path)
    budget = 12345
    args = ("run", mix, "--out", tmp_path / "r2", "--token-budget", budget, "--source-max-share", "code=0.4",
            "--num-shards", "1")
    shown = _ok(cli_in_process(*args, COLUMNS="400")).stdout
    select = json.loads(_ok(cli_in_process("select", tmp_path / "r2" / "clusters.parquet", "--out",
                                           tmp_path / "s.parquet", "--token-budget", budget, "--source-max-share",
                                           "code=0.4", "--json")).stdout)
    code = next(r for r in select["sources"] if r["source"] == "code")
    tokens, selected = code["selected_tokens"], select["tokens_selected"]["selected"]
    assert tokens <= 0.4 * budget and code["share_of_budget"] == {"share": round(tokens / budget, 4),
                                                                  "budget": budget, "unit": "tokens"}
    assert code["bounds"] == [{"bound": "cap", "share": 0.4, "from": "--source-max-share"}]
    assert _line(shown, "source code") == (
        f"{code['selected']:,} of {code['rows']:,} rows selected ({code['selected_share_rows']:.1%} of the "
        f"selection), {tokens:,} tokens ({tokens / selected:.1%} of the selection, {tokens / budget:.1%} of the "
        f"{budget:,}-token budget); cap 0.4 (--source-max-share)")
    manifest = json.loads((tmp_path / "r2" / "shards" / "manifest.json").read_text())
    shares = {r["source"]: r["token_share_of_selection"] for r in manifest["sources"]}
    assert shares["code"] == round(tokens / selected, 4)


def test_the_bounds_applied_are_named_with_where_they_came_from(tmp_path):
    """A floor the lineage records (the mixture file's at embed, the file since edited) is named as such, and a
    --source-min-share that replaces it says so, in the summary, --json and `report`."""
    mix = _mixture(tmp_path, math_floor=0.6)
    run = _ok(cli_in_process("run", mix, "--out", tmp_path / "r3", "--fraction", "0.3", "--num-shards", "1",
                             COLUMNS="400")).stdout
    assert _line(run, "source math").endswith(f"; floor 0.6 ({mix}: inputs[0].min_share)")
    mix.write_text(mix.read_text().replace("0.6", "0.2"))
    clusters = tmp_path / "r3" / "clusters.parquet"
    recorded = _ok(cli_in_process("select", clusters, "--out", tmp_path / "s3.parquet", "--fraction", "0.3",
                                  COLUMNS="400")).stdout
    assert _line(recorded, "source math").endswith("; floor 0.6 (the mixture file's min_share)")
    assert "floor" not in _line(recorded, "source code")
    replaced = _ok(cli_in_process("select", clusters, "--out", tmp_path / "s3b.parquet", "--fraction", "0.3",
                                  "--source-min-share", "0.1", "--json")).stdout
    math, code = json.loads(replaced)["sources"]
    assert math["bounds"] == [{"bound": "floor", "share": 0.1, "from": "--source-min-share", "replaced": 0.6,
                               "replaced_from": "the mixture file's min_share"}]
    assert code["bounds"] == [{"bound": "floor", "share": 0.1, "from": "--source-min-share"}]
    report = _ok(cli_in_process("report", tmp_path / "s3b.parquet", "--json")).stdout
    assert '"replaced_from": "the mixture file\'s min_share"' in report


# ------------------------------------------------------------------------------------------ defect 4: run's checks


def test_runs_early_refusal_of_a_token_budget_is_one_sentence(tmp_path):
    """The rows left after the exact duplicates and the words they hold, in one parenthesis, not two in a row."""
    rows = [json.loads(line) for line in GSM.read_text().splitlines()]
    data = write_jsonl(tmp_path / "dup.jsonl", rows + rows[:20])
    r = cli_in_process("run", data, "--out", tmp_path / "r4", "--token-budget", "40", "--num-shards", "4",
                       "--micro-batch-size", "4")
    assert r.returncode != 0 and not (tmp_path / "r4").exists()
    message = r.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"ERROR: one global step needs --num-shards × --micro-batch-size = 4 × 4 = 16 rows, but "
                        r"--token-budget 40 of 300 rows \(40 of their [\d,]+ words; of 320: 20 exact duplicates "
                        r"left out\) "
                        r"selects at most \d; use fewer shards, a smaller micro-batch or a larger budget", message), \
        message


def test_a_floor_no_prefix_meets_under_no_cap_names_the_budget():
    """A source with no cap is bounded by the budget: the message named 'its cap (12 tokens)'."""
    seq, sources, tokens = np.arange(3), np.array([0, 0, 1]), np.array([10, 10, 1])
    with pytest.raises(CurateError) as e:
        source_bounded_take(seq, sources, tokens, 12, np.array([11, 0]), np.array([12, 12]), ["math", "code"],
                            "tokens", (["--source-min-share", None], [None, None]))
    assert str(e.value) == ("source math: no number of its rows, taken in the selection's order, holds between its "
                            "floor (11 tokens, --source-min-share) and the budget (12 tokens): the fewest that reach "
                            "the floor hold 20 tokens; set the two further apart")


def test_readme_says_what_run_checks_early_and_what_target_refuses():
    """README: the early check is of the shortest rows (the take order comes after cluster); --target refuses
    --dedup as it refuses a mixture's bounds."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert ("a token budget that cannot hold one global step of `--num-shards` × `--micro-batch-size` rows even of "
            "the data's shortest rows is refused there") in readme
    not_with = readme[readme.index("- Not with `--target`:"):]
    assert "nor `--dedup`" in not_with[:not_with.index("The target's bad rows")]


@pytest.mark.parametrize("a, b, same", [
    ("Paris", "Paris.", True), ("paris", "PARIS!", True), ("Paris", "(Paris)", True), ("Paris", '"Paris."', True),
    ("(B)", "B", True), ("<", ">", False), ("<", "=", False), ("-5", "5", False), ("1/2", "12", False),
    ("3:00", "300", False), ("C++", "C", False), ("C#", "C", False), ("A+", "A-", False), ("?", "!", False)])
def test_two_short_answers_are_one_but_for_the_punctuation_after_or_around_them(a, b, same):
    """Review: dropping every symbol made '<', '>' and '=' one answer (a comparison task kept one row of three
    kinds), and '-5' and '5'; only the sentence punctuation after an answer and the quotes or brackets around it
    are set aside now."""
    from cluster_curate.answer_kinds import loose_answer_key
    assert (loose_answer_key(a) == loose_answer_key(b)) is same
