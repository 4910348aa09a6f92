"""The shard stage's QA round 55: the rows a plan leaves over (or repeats) keep the selection's floors and caps on a
mixture's inputs over the sharded rows, and a bound no choice of them keeps is warned about (tests build their own
inputs from the fixtures)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from cluster_curate import sharding as S
from conftest import FIXTURES, cli_in_process

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
CODE = FIXTURES / "code_alpaca" / "code_alpaca-300.json"


def _ok(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _rows(source: np.ndarray, low, high, budget: int | None = None, weight=None) -> S.SourceBounds:
    return S.SourceBounds(source, np.ones(source.shape[0], dtype=np.int64) if weight is None else weight,
                          np.array(low, dtype=np.float64), np.array(high, dtype=np.float64),
                          source.shape[0] if budget is None else budget)


def _held(plan, source, n_src=3) -> np.ndarray:
    return np.bincount(source[plan.rows.reshape(-1)], minlength=n_src)


# 100 selected rows in 5 clusters, input 0 (40 rows) in clusters 0 and 1, inputs 1 and 2 (30 each) in the others:
# steps of 8 rows leave 4 over, of which the stream's tail (spread over clusters) holds one or two of input 0
CLUSTERS = np.repeat(np.arange(5), 20)
SOURCE = np.repeat([0, 1, 2], [40, 30, 30])


@pytest.mark.parametrize("allocation", ["stratified", "random"])
def test_the_rows_left_over_keep_a_cap_that_the_streams_tail_breaks(allocation):
    """Input 0's cap 0.375 of the 96 sharded rows is 36: all 4 rows left over must be its, and they are its last 4
    in the stream (the stratified stream, or the shuffle), whatever the seed; without bounds the tail broke it."""
    bounds = _rows(SOURCE, [0, 0, 0], [0.375, 1, 1])
    broke = 0
    for seed in range(6):
        plain = S.plan_steps(CLUSTERS, None, 2, 4, allocation=allocation, seed=seed)
        broke += _held(plain, SOURCE)[0] > 36
        plan = S.plan_steps(CLUSTERS, None, 2, 4, allocation=allocation, seed=seed, bounds=bounds)
        rng = np.random.default_rng(seed)
        stream = S.stratified_order(CLUSTERS, rng) if allocation == "stratified" else rng.permutation(100)
        assert sorted(plan.leftover.tolist()) == sorted(stream[SOURCE[stream] == 0][-4:].tolist())
        assert _held(plan, SOURCE).tolist() == [36, 30, 30] and plan.info == {}
        assert np.unique(plan.rows).shape[0] == 96  # every row once
    assert broke  # the defect: the stream's tail alone left input 0 above its cap


def test_bounds_the_tail_already_keeps_change_nothing():
    """Floors and caps the stream's tail keeps leave the plan as it is without them, row for row."""
    for allocation, remainder in [("stratified", "drop"), ("stratified", "wrap"), ("random", "drop"),
                                  ("random", "wrap")]:
        plain = S.plan_steps(CLUSTERS, np.arange(100) % 7 + 1, 2, 4, allocation=allocation, remainder=remainder)
        plan = S.plan_steps(CLUSTERS, np.arange(100) % 7 + 1, 2, 4, allocation=allocation, remainder=remainder,
                            bounds=_rows(SOURCE, [0.2, 0, 0], [0.5, 1, 1]))
        assert (plan.rows == plain.rows).all() and (plan.wrapped == plain.wrapped).all()
        assert (plan.leftover == plain.leftover).all() and plan.info == {}


def test_a_floor_and_cap_together_leave_over_each_inputs_share():
    """Input 0 between 0.39 and 0.4 (38 of 96 rows), inputs 1 and 2 at least 0.3 (29 each): 2 rows of input 0 and
    one each of the others are left over, the one choice that keeps every bound."""
    bounds = _rows(SOURCE, [0.39, 0.3, 0.3], [0.4, 1, 1])
    for seed in range(4):
        plan = S.plan_steps(CLUSTERS, None, 2, 4, seed=seed, bounds=bounds)
        assert np.bincount(SOURCE[plan.leftover], minlength=3).tolist() == [2, 1, 1]


def test_a_wraps_repeats_keep_a_cap():
    """`--remainder wrap` adds 4 repeats to 100 rows: input 0's cap 0.4 of 104 is 41, so at most one repeat is its
    (the stream's head holds one or two); each repeat is of a row the shards already hold once."""
    bounds = _rows(SOURCE, [0, 0, 0], [0.4, 1, 1])
    for seed in range(6):
        plan = S.plan_steps(CLUSTERS, None, 2, 4, remainder="wrap", seed=seed, bounds=bounds)
        assert _held(plan, SOURCE)[0] <= 41 and plan.wrapped.sum() == 4 and plan.info == {}
        assert np.isin(plan.rows[plan.wrapped], plan.rows[~plan.wrapped]).all()


def test_token_bounds_are_kept_in_tokens():
    """Under a token budget the bounds are of tokens: input 0's rows are long (9 tokens), the others' 1, and its cap
    0.86 of the 420-token budget (361) holds its 360. Of the budget less what is left over, 4 short rows leave it
    above the cap (357 of 416), as one long row and 3 short do (350 of 408): 2 of its long rows are left over."""
    weight = np.where(SOURCE == 0, 9, 1)
    budget = int(weight.sum())
    broke = 0
    for seed in range(6):
        plain = S.plan_steps(CLUSTERS, weight, 2, 4, seed=seed)
        broke += (SOURCE[plain.leftover] == 0).sum() < 2
        plan = S.plan_steps(CLUSTERS, weight, 2, 4, seed=seed,
                            bounds=_rows(SOURCE, [0, 0, 0], [0.86, 1, 1], budget=budget, weight=weight))
        left = weight[plan.leftover].sum()
        held = np.bincount(SOURCE[plan.rows.reshape(-1)], weights=weight[plan.rows.reshape(-1)], minlength=3)
        assert held[0] <= np.floor(0.86 * (budget - left)) and plan.info == {}
        assert (SOURCE[plan.leftover] == 0).sum() == 2
    assert broke


def test_paper_allocations_left_over_rows_keep_a_floor():
    """`--allocation paper` leaves over each cluster's rows past the smallest's: which of them, inside each cluster,
    keeps input 1's floor 0.3 (10 of the 32 selected rows; at least 8 of the 24 sharded rows, so at most 2 of the 8
    rows cluster 1 leaves over, where a random pick left over about 4)."""
    clusters = np.repeat([0, 1], [12, 20])
    source = np.array([0] * 12 + [0] * 10 + [1] * 10)
    bounds = _rows(source, [0, 0.3], [1, 1])
    broke = 0
    for seed in range(6):
        broke += np.bincount(source[S.plan_steps(clusters, None, 2, 4, allocation="paper", seed=seed).rows.reshape(
            -1)], minlength=2)[1] < 8
        plan = S.plan_steps(clusters, None, 2, 4, allocation="paper", seed=seed, bounds=bounds)
        assert np.bincount(source[plan.rows.reshape(-1)], minlength=2)[1] >= 8 and plan.info == {}
        assert (np.bincount(clusters[plan.rows.reshape(-1)]) == [12, 12]).all()
    assert broke


def test_a_bound_no_choice_keeps_is_named():
    """Input 0 held to exactly 0.4 (floor and cap): of 96 sharded rows that is 38.4, which no count of rows is."""
    plan = S.plan_steps(CLUSTERS, None, 2, 4, seed=0, bounds=_rows(SOURCE, [0.4, 0, 0], [0.4, 1, 1]))
    (broken,) = plan.info["bounds_broken"]
    assert broken[0] == 0 and broken[2] in ("floor", "cap") and broken[3] == 0.4
    assert broken[1] == _held(plan, SOURCE)[0] / 96


# ------------------------------------------------------------------------------------------------ the command


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """GSM8K and Code Alpaca, named math and code in a mixture file, embedded and clustered by `run`."""
    tmp = tmp_path_factory.mktemp("mix")
    shutil.copy(GSM, tmp / "gsm.jsonl")
    shutil.copy(CODE, tmp / "code.json")
    (tmp / "mix.yaml").write_text("inputs:\n  - {path: gsm.jsonl, name: math}\n  - {path: code.json, name: code}\n")
    _ok(cli_in_process("run", tmp / "mix.yaml", "--out", tmp / "r", "--fraction", "0.2", "--num-shards", "1"))
    return tmp / "r" / "clusters.parquet"


def _held_by_source(out) -> dict:
    counts: dict[str, int] = {}
    for path in sorted(out.glob("shard-*.parquet")):
        for name in pq.read_table(path, columns=["source"]).column("source").to_pylist():
            counts[name] = counts.get(name, 0) + 1
    return counts


def test_shard_keeps_the_floor_select_met(clusters, tmp_path):
    """`select --fraction 0.2 --source-min-share math=0.45` takes 54 math rows of 120; 4 shards × 8 rows hold 96,
    of which math must be at least ceil(0.45 × 96) = 44: the stream's tail left it 41 (42.7%), silently. The
    manifest's figures are the shards' (share_of_shards, sharded_rows, left_over_rows), and no warning."""
    sel = tmp_path / "s.parquet"
    _ok(cli_in_process("select", clusters, "--out", sel, "--fraction", "0.2", "--source-min-share", "math=0.45"))
    r = _ok(cli_in_process("shard", sel, "--out", tmp_path / "sh", "-n", "4", "--micro-batch-size", "8"))
    assert "source bounds" not in r.stderr, r.stderr  # (the warning of 24 rows left over is shard's)
    held = _held_by_source(tmp_path / "sh")
    assert held["math"] >= 44 and held["math"] + held["code"] == 96
    manifest = json.loads((tmp_path / "sh" / "manifest.json").read_text())
    by = {s["source"]: s for s in manifest["sources"]}
    for name, s in by.items():
        assert s["sharded_rows"] == held[name] and s["share_of_shards"] == round(held[name] / 96, 4)
        assert s["left_over_rows"] == s["selected_rows"] - held[name]
    left = [int(i) for i in (tmp_path / "sh" / "leftover_ids.txt").read_text().split()]
    assert len(left) == 24 and sum(s["left_over_rows"] for s in by.values()) == 24


def test_shard_warns_of_a_bound_no_choice_keeps(clusters, tmp_path):
    """Math held to exactly 0.45 (floor and cap) of 120 rows: 54. Of the 96 sharded rows 0.45 is 43.2, which no
    count of rows is: one warning names the input, its share of the shards and the bound it breaks."""
    sel = tmp_path / "s.parquet"
    _ok(cli_in_process("select", clusters, "--out", sel, "--fraction", "0.2", "--source-min-share", "math=0.45",
                       "--source-max-share", "math=0.45"))
    r = _ok(cli_in_process("shard", sel, "--out", tmp_path / "sh", "-n", "4", "--micro-batch-size", "8",
                           COLUMNS="400"))
    held = _held_by_source(tmp_path / "sh")["math"]
    bound = "below its floor 0.45 (--source-min-share)" if held < 43.2 else "above its cap 0.45 (--source-max-share)"
    warned = [line for line in r.stderr.splitlines() if "source bounds" in line]
    assert len(warned) == 1, r.stderr
    assert warned[0].endswith(f"source math is {held / 96:.1%} of the shards' rows, {bound}"), r.stderr


def test_a_paper_wraps_repeats_that_break_a_floor_are_named():
    """Review: `--allocation paper --remainder wrap` tops each cluster up with its own rows, which no choice keeps
    input 1's floor with here (cluster 0, all input 0, is repeated up to cluster 1's size): named, not silent."""
    clusters = np.repeat([0, 1], [4, 20])
    source = np.array([0] * 4 + [1] * 20)
    plan = S.plan_steps(clusters, None, 2, 4, allocation="paper", remainder="wrap", seed=0,
                        bounds=_rows(source, [0, 0.7], [1, 1]))
    (broken,) = plan.info["bounds_broken"]
    assert broken == (1, 0.5, "floor", 0.7)  # 20 of the 40 rows, repeats counted
