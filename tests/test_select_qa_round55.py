"""The select stage's QA round 55: the --target embeddings beside the output (replaced only with --overwrite, not
left behind by a selection made again without them), the far-from-the-pool warning measured on real data, and the
budget's wording after --decontaminate (tests build their own inputs from the fixtures and the shared data)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cluster_curate import targeting as T
from cluster_curate.io.artifacts import read_meta
from conftest import FIXTURES, SHARED_DATA, cli_in_process
from test_datasets import write_jsonl

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
CODE = FIXTURES / "code_alpaca" / "code_alpaca-300.json"


def _ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _summary(r) -> dict:
    return json.loads(_ok(r).stdout.strip().splitlines()[-1])


@pytest.fixture
def pool(tmp_path):
    """Clusters of 200 GSM8K and 100 Code Alpaca rows, and a target of 20 other Code Alpaca rows."""
    code = json.loads(CODE.read_text())
    rows = [json.loads(line) for line in GSM.read_text().splitlines()[:200]]
    rows += [{"question": r["instruction"], "answer": r["output"]} for r in code[:100] if r["output"].strip()]
    data = write_jsonl(tmp_path / "pool.jsonl", rows)
    emb, clusters = tmp_path / "emb.parquet", tmp_path / "clusters.parquet"
    _ok(cli_in_process("embed", data, "--out", emb, "--dim", "16", "-q"))
    _ok(cli_in_process("cluster", emb, "--out", clusters, "--k", "6", "-q"))
    target = write_jsonl(tmp_path / "target.jsonl", [r for r in code[200:230] if r["output"].strip()][:20])
    return {"data": data, "emb": emb, "clusters": clusters, "target": target}


# ------------------------------------------------------------------------------------------ defect 1


def test_target_embeddings_of_the_users_are_replaced_only_with_overwrite(tmp_path, pool):
    """`select --target RAW --out S` writes S.target.parquet: one already there (here the user's `embed --like`)
    was replaced silently, without --overwrite. Now refused in one line naming it and --overwrite, nothing
    written; with --overwrite replaced, and a run again on the same --out with --overwrite works."""
    out, side = tmp_path / "s.parquet", tmp_path / "s.target.parquet"
    _ok(cli_in_process("embed", pool["target"], "--like", pool["emb"], "--out", side, "-q"))
    before = side.read_bytes()
    r = cli_in_process("select", pool["clusters"], "--out", out, "--budget", "20", "--target", pool["target"])
    assert r.returncode != 0
    error = [line for line in r.stderr.splitlines() if line.startswith("ERROR")]
    assert error == [f"ERROR: {side}: already exists, and select writes the --target embeddings there (pass "
                     "--overwrite to replace it, or choose another --out)"], r.stderr
    assert side.read_bytes() == before and not out.exists()
    for _ in range(2):  # replaced; then select's own file replaced again
        _ok(cli_in_process("select", pool["clusters"], "--out", out, "--budget", "20", "--target", pool["target"],
                           "--overwrite", "-q"))
        assert read_meta(out).inputs["target"]["fingerprint"] == read_meta(side).fingerprint


def test_a_targeted_selection_that_fails_leaves_no_target_embeddings(tmp_path, pool):
    """The target is embedded before the selection: a selection refused after that (a token budget below the
    first row of the targeted order) must not leave S.target.parquet to refuse the same command, corrected,
    without --overwrite."""
    from cluster_curate.io.artifacts import read_artifact
    words = np.asarray(read_artifact(pool["emb"])[0].column("n_tokens").to_pylist())
    out, side = tmp_path / "s.parquet", tmp_path / "s.target.parquet"
    r = cli_in_process("select", pool["clusters"], "--out", out, "--token-budget", int(words.min()), "--target",
                       pool["target"])
    assert r.returncode != 0 and "less than the first row of the targeted order" in r.stderr, r.stderr
    assert not side.exists() and not out.exists()
    _ok(cli_in_process("select", pool["clusters"], "--out", out, "--budget", "20", "--target", pool["target"], "-q"))
    assert side.exists()


# ------------------------------------------------------------------------------------------ defect 2


def test_a_selection_made_again_without_raw_target_keeps_the_target_embeddings(tmp_path, pool):
    """The S.target.parquet an earlier `select --out S --target DATA` wrote is kept when S is made again without
    it: another selection may name it as its --target (review: removing it broke that selection's command)."""
    out, side = tmp_path / "s.parquet", tmp_path / "s.target.parquet"
    targeted = ("select", pool["clusters"], "--out", out, "--budget", "20", "--overwrite", "-q")
    _ok(cli_in_process(*targeted, "--target", pool["target"]))
    _ok(cli_in_process("select", pool["clusters"], "--out", tmp_path / "s2.parquet", "--budget", "20", "-q",
                       "--target", side))
    before = side.read_bytes()
    _ok(cli_in_process(*targeted))
    assert side.read_bytes() == before and "target" not in read_meta(out).inputs


# ------------------------------------------------------------------------------------------ defect 3


def _far(n_far: int, m: int) -> T.TargetSearch:
    far = np.zeros(m, dtype=bool)
    far[:n_far] = True
    return T.TargetSearch(owner=np.zeros(4, np.int32), relevance=np.zeros(4, np.float32),
                          nearest=np.zeros((m, 1), np.int64), nearest_sim=np.full((m, 1), 0.3, np.float32),
                          far=far, far_threshold=0.5)


def test_the_far_warning_starts_at_15_percent_of_the_target_and_two_rows():
    """FAR_WARN_SHARE was 0.5, and 12 of 40 Code Alpaca rows far from a GSM8K pool got no warning: 15% now
    (what targeting.FAR_WARN_SHARE measured: up to 13% for GSM8K test rows against a 7,000-row GSM8K pool), but
    never for a single row of many."""
    assert T.far_message(_far(5, 40)) is None  # 12.5%
    assert "6 of 40 target rows are far" in T.far_message(_far(6, 40))
    assert "(30% far; measured: up to 13% for a task a pool holds" in T.far_message(_far(12, 40))
    assert T.far_message(_far(1, 5)) is None  # 20%, but one row
    assert "2 of 5 target rows are far" in T.far_message(_far(2, 5))
    assert "the 1 target row is far" in T.far_message(_far(1, 1))


REAL_GSM, REAL_CODE = SHARED_DATA / "gsm8k", SHARED_DATA / "code_alpaca" / "code_alpaca_2k.json"


@pytest.mark.skipif(not REAL_CODE.exists(), reason=f"{SHARED_DATA} not present (the shared real datasets)")
def test_a_target_the_pool_lacks_is_warned_and_one_it_holds_is_not(tmp_path):
    """QA: 40 Code Alpaca rows as the target of a GSM8K-only pool of 3,000 rows: 12 far, no warning, every
    selected row GSM8K. Warned now; 40 GSM8K test rows against the same pool are not."""
    train = [json.loads(line) for line in (REAL_GSM / "train.jsonl").read_text().splitlines()[:3000]]
    test = [json.loads(line) for line in (REAL_GSM / "test.jsonl").read_text().splitlines()[:40]]
    code = json.loads(REAL_CODE.read_text())[1500:1540]
    data = write_jsonl(tmp_path / "gsm.jsonl", train)
    emb, clusters = tmp_path / "emb.parquet", tmp_path / "clusters.parquet"
    _ok(cli_in_process("embed", data, "--out", emb, "-q"))
    _ok(cli_in_process("cluster", emb, "--out", clusters, "-q"))
    warned = {}
    for name, rows in (("code", code), ("gsm", test)):
        target = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        s = _summary(cli_in_process("select", clusters, "--out", tmp_path / f"s_{name}.parquet", "--budget", "100",
                                    "--target", target, "--json"))
        warned[name] = [w for w in s["warnings"] if "may not contain the task" in w]
        assert s["target"]["rows"] == 40
    assert len(warned["code"]) == 1 and warned["gsm"] == [], warned


# ------------------------------------------------------------------------------------------ defects 4 and 5


def test_a_budget_larger_than_the_rows_decontamination_left_names_them(tmp_path, pool):
    """`--budget 290 --decontaminate EVAL` on 300 rows of which 20 ask EVAL's questions warned 'larger than the
    280 rows of the data': the data has 300; 280 are what --decontaminate left. Targeted too."""
    rows = [json.loads(line) for line in pool["data"].read_text().splitlines()]
    ev = write_jsonl(tmp_path / "eval.jsonl", [{"question": r["question"], "answer": "x"} for r in rows[:20]])
    expected = ("budget of 290 rows is larger than the 280 rows left after removing 20 rows --decontaminate "
                "matched: selecting all of them")
    base = ("select", pool["clusters"], "--out", tmp_path / "s.parquet", "--budget", "290", "--decontaminate", ev,
            "--json", "--overwrite")
    for extra in ((), ("--target", pool["target"])):
        s = _summary(cli_in_process(*base, *extra))
        assert s["selected"] == 280
        assert expected in s["warnings"], s["warnings"]
        # a token budget above what is left is refused, naming the rows left out (targeted: review, round 55)
        r = cli_in_process("select", pool["clusters"], "--out", tmp_path / "t.parquet", "--token-budget",
                           "99999999", "--decontaminate", ev, *extra)
        assert r.returncode == 2 and "left after removing 20 rows --decontaminate matched" in r.stderr, r.stderr


def test_a_fraction_of_one_row_is_said_in_the_singular(tmp_path, pool):
    r = _ok(cli_in_process("select", pool["clusters"], "--out", tmp_path / "s.parquet", "--fraction", "0.001"))
    assert re.search(r"--fraction 0\.001 = 1 row\b(?!s)", r.stdout), r.stdout
    s = _summary(cli_in_process("select", pool["clusters"], "--out", tmp_path / "s.parquet", "--fraction", "0.001",
                                "--overwrite", "--json"))
    assert s["selected"] == 1
