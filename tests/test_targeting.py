"""Targeted selection (targeting.py): the search, the round-robin order, the budget, the balance, the errors."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cluster_curate import selection as S
from cluster_curate import targeting as T
from cluster_curate.errors import CurateError
from cluster_curate.within_orders import random_keys
from conftest import cli_in_process
from embeddings_factory import mixture


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _blobs(n=3000, groups=8, seed=0, d=16, noise=0.3):
    x, g = mixture(n, d=d, groups=groups, seed=seed, noise=noise)
    return x, g


def _target_from(x, g, groups, per, seed=1):
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.choice(np.flatnonzero(g == k), per, replace=False) for k in groups])
    return x[rows] + rng.standard_normal((len(rows), x.shape[1])).astype(np.float32) * 0.01, rows


def test_search_matches_brute_force_and_is_block_invariant():
    x, g = _blobs(700, d=8)
    t, _ = _target_from(x, g, [1, 4], 5)
    sim = _unit(x) @ _unit(t).T
    small = T.search_target(x, t, depth=7, block_rows=64)
    big = T.search_target(x, t, depth=7)
    assert np.array_equal(small.owner, big.owner) and np.array_equal(small.nearest, big.nearest)
    assert np.array_equal(big.owner, sim.argmax(axis=1))
    assert np.allclose(big.relevance, sim.max(axis=1), atol=1e-5)
    for j in range(len(t)):
        expect = np.lexsort((np.arange(len(x)), -sim[:, j]))[:7]
        assert np.allclose(sim[big.nearest[j], j], sim[expect, j], atol=1e-5)  # same similarities, most first
    assert not big.far.any()  # held-in target rows are near the pool


def test_round_robin_serves_every_target_row_in_turn():
    x, g = _blobs(2000)
    t, _ = _target_from(x, g, [0, 3, 5], 4)
    search = T.search_target(x, t, depth=50)
    rank = T.round_robin_rank(search)
    assert np.array_equal(np.sort(rank), np.arange(len(x)))  # a permutation
    first_round = np.unique(search.nearest[:, 0])
    assert set(np.flatnonzero(rank < len(first_round))) == set(first_round.tolist())
    pure = T.select_targeted(g, search, budget=150, target_weight=1.0)  # weight 1: the round-robin order itself
    assert np.array_equal(pure.rows, np.flatnonzero(rank < 150))


@pytest.mark.parametrize("weight", [1.0, 0.75, 0.5, 0.1, 0.0])
def test_exact_budget_and_deterministic(weight):
    x, g = _blobs(2500, seed=3)
    t, _ = _target_from(x, g, [2, 6], 10)
    clusters = g  # clusters = the blobs
    for budget in (1, 37, 250, 2500, 4000):
        search = T.search_target(x, t, depth=T.list_depth(budget, weight, len(t), len(x)))
        a = T.select_targeted(clusters, search, budget=budget, target_weight=weight, seed=5)
        b = T.select_targeted(clusters, T.search_target(x, t, depth=T.list_depth(budget, weight, len(t), len(x))),
                              budget=budget, target_weight=weight, seed=5)
        assert len(a.rows) == min(budget, len(x)) == a.quotas.sum()
        assert np.array_equal(a.rows, b.rows) and np.array_equal(a.rank_in_cluster, b.rank_in_cluster)
        assert len(np.unique(a.rows)) == len(a.rows)
        for c in np.unique(a.cluster):  # ranks in a cluster are 0..q-1
            assert sorted(a.rank_in_cluster[a.cluster == c]) == list(range(int((a.cluster == c).sum())))
    with pytest.raises(CurateError, match="exactly one"):
        T.select_targeted(clusters, search, budget=5, fraction=0.1)
    with pytest.raises(CurateError, match="--target-weight"):
        T.select_targeted(clusters, search, budget=5, target_weight=1.5)


def test_weight_zero_is_the_untargeted_selection():
    x, g = _blobs(3000, seed=4)
    t, _ = _target_from(x, g, [1], 10)
    ids = np.arange(100, 3100)
    search = T.search_target(x, t)
    for budget in (10, 300, 1200):
        targeted = T.select_targeted(g, search, budget=budget, target_weight=0.0, ids=ids, seed=9)
        plain = S.select_rows(g, budget=budget, ids=ids, seed=9)
        assert np.array_equal(targeted.rows, plain.rows)
        assert np.array_equal(targeted.rank_in_cluster, plain.rank_in_cluster)


def _share(sel, g, groups):
    return np.isin(g[sel.rows], groups).mean()


def test_budget_goes_to_the_target_kinds():
    x, g = _blobs(4000, groups=10, seed=5, noise=0.5)
    t, _ = _target_from(x, g, [2, 7], 10)
    search = T.search_target(x, t, depth=T.list_depth(400, T.DEFAULT_TARGET_WEIGHT, len(t), len(x)))
    sel = T.select_targeted(g, search, budget=400)
    assert _share(sel, g, [2, 7]) >= 0.95
    plain = S.select_rows(g, budget=400)
    assert _share(plain, g, [2, 7]) < 0.3
    counts = np.bincount(g[sel.rows], minlength=10)
    assert abs(int(counts[2]) - int(counts[7])) <= 0.2 * 400  # both kinds served


def test_a_dominant_target_kind_does_not_swamp_the_other():
    """40 target rows of kind A and 4 of kind B: the cosine to the target mean gives B (almost) nothing; the
    targeted default gives every target row the same share (B about 4/44 of the budget), version 1's rule
    (quota_by="cluster") the same share to each kind's cluster."""
    x, g = _blobs(6000, groups=10, seed=6, noise=0.6)
    ta, _ = _target_from(x, g, [3], 40, seed=2)
    tb, _ = _target_from(x, g, [8], 4, seed=3)
    t = np.concatenate([ta, tb])
    budget = 600
    search = T.search_target(x, t, depth=T.list_depth(budget, T.DEFAULT_TARGET_WEIGHT, len(t), len(x)))
    sel = T.select_targeted(g, search, budget=budget)
    b_share = np.mean(g[sel.rows] == 8)
    mean_score = _unit(x) @ _unit(t.mean(axis=0, keepdims=True))[0]
    top = np.argsort(-mean_score)[:budget]
    assert np.mean(g[top] == 8) < 0.01
    assert abs(b_share - 4 / 44) <= 0.02
    assert np.isin(g[sel.rows], [3, 8]).mean() >= 0.9
    by_cluster = T.select_targeted(g, search, budget=budget, quota_by="cluster")
    assert np.mean(g[by_cluster.rows] == 8) >= 0.35
    with pytest.raises(ValueError, match="quota_by"):
        T.select_targeted(g, search, budget=budget, quota_by="rows")


def test_near_copies_of_one_target_example_do_not_take_the_budget():
    """The pool holds 800 near-copies of one target example (a cluster of their own): the round-robin gives
    that example one turn in 18, and the default's balance over the clusters the target pulls from does not
    hand the copies' cluster a level of its own (one target row's nearest pool row is there, not two)."""
    x, g = _blobs(4000, groups=8, seed=7, noise=0.6)
    t, _ = _target_from(x, g, [1, 4, 6], 6, seed=4)
    rng = np.random.default_rng(0)
    copies = t[0] + rng.standard_normal((800, x.shape[1])).astype(np.float32) * 0.002
    pool = np.concatenate([x, copies])
    clusters = np.concatenate([g, np.full(800, 8)])  # the copies make a cluster of their own
    budget = 400
    search = T.search_target(pool, t, depth=T.list_depth(budget, T.DEFAULT_TARGET_WEIGHT, len(t), len(pool)))
    sel = T.select_targeted(clusters, search, budget=budget)
    assert np.mean(sel.rows >= 4000) <= 2 / 18
    assert np.isin(clusters[sel.rows], [1, 4, 6]).mean() >= 0.85
    nearest_target = search.relevance  # ranking by the cosine to the nearest target row instead: all copies
    assert np.mean(np.argsort(-nearest_target, kind="stable")[:budget] >= 4000) == 1.0


def test_bad_targets_are_one_line_errors():
    x, g = _blobs(200, d=8)
    with pytest.raises(CurateError, match="no rows"):
        T.search_target(x, np.zeros((0, 8), dtype=np.float32))
    with pytest.raises(CurateError, match=r"width 6 differs from pool's 8.*--like"):
        T.search_target(x, np.ones((3, 6), dtype=np.float32))
    bad = np.ones((3, 8), dtype=np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(CurateError, match="row 1: field embedding: not finite"):
        T.search_target(x, bad)


def test_target_far_from_the_pool_is_flagged_and_noted():
    rng = np.random.default_rng(0)
    x = np.abs(rng.standard_normal((1500, 16))).astype(np.float32)
    x[:, 8:] = 0  # the pool lives in the first 8 dimensions
    far_target = np.zeros((5, 16), dtype=np.float32)
    far_target[:, 8:] = rng.standard_normal((5, 8))
    search = T.search_target(x, far_target)
    assert search.far.all()
    sel = T.select_targeted(np.zeros(1500, dtype=np.int64), search, budget=50)
    assert len(sel.rows) == 50 and any("may not contain the task" in n for n in sel.notes)
    mixed = np.concatenate([far_target, x[:3] + 0.01])  # partly far: those rows take their turns last
    s2 = T.search_target(x, mixed)
    assert s2.far.tolist() == [True] * 5 + [False] * 3
    assert "5 of 8 target rows are far" in T.far_message(s2)  # most of the target: still warned
    assert T.far_message(T.search_target(x, x[:6] + 0.01)) is None
    zero = T.search_target(x, np.zeros((2, 16), dtype=np.float32))  # all-zero rows are far, not an error
    assert zero.far.all()


def test_target_service_reports_each_target_row_and_the_pulled_clusters():
    x, g = _blobs(3000, seed=8)
    t, _ = _target_from(x, g, [0, 5], 6)
    search = T.search_target(x, t, depth=T.list_depth(300, 0.5, len(t), len(x)))
    sel = T.select_targeted(g, search, budget=300)
    rep = T.target_service(x, t, search, sel, g)
    assert rep["target_rows"] == 12 and len(rep["per_target"]) == 12
    assert sum(r["selected_nearest_to_it"] for r in rep["per_target"]) == 300
    sim = _unit(x[sel.rows]) @ _unit(t).T
    for j, r in enumerate(rep["per_target"]):
        assert r["nearest_selected"][0] == sel.rows[int(np.argmax(sim[:, j]))]
        assert r["nearest_selected_cosine"][0] == pytest.approx(float(sim[:, j].max()), abs=1e-3)
    top = {c["cluster"] for c in rep["clusters"][:2]}
    assert top == {0, 5}
    assert sum(c["selected"] for c in rep["clusters"]) == 300


@pytest.mark.parametrize("weight", [0.6, 0.0])
def test_the_summary_names_the_clusters_the_budget_was_spread_over(weight):
    """The summary's 'clusters the target pulled from' counted every cluster holding a single target row's nearest
    pool row, though the budget is spread only over those holding at least MIN_TARGET_HITS (README: Balance):
    8 of 21 clusters it named in a GSM8K run got no rows from it. It names those the selection pulled from now,
    and none at --target-weight 0, the balance over every cluster alone."""
    from cluster_curate.commands.select import target_summary
    x, g = _blobs(3000, seed=8)
    t, _ = _target_from(x, g, [0, 5], 6)
    stray, _ = _target_from(x, g, [3], 1, seed=2)  # a single target row of its kind: a stray, not a kind
    t = np.concatenate([t, stray])
    search = T.search_target(x, t, depth=T.list_depth(300, max(weight, 0.1), len(t), len(x)))
    sel = T.select_targeted(g, search, budget=300, target_weight=weight)
    line = target_summary(T.target_service(x, t, search, sel, g), "t.jsonl")["clusters_the_target_pulled_from"]
    assert sel.hits[3] == 1 and sel.hits[0] >= 2 and sel.hits[5] >= 2
    if weight:
        assert sorted(line.value) == [0, 5] and line.text.startswith("2: ")
        assert sel.quotas[[0, 5]].sum() == 300  # the budget went there, none of it to the stray's cluster
    else:
        assert line.value == [] and line.text == "0 (--target-weight 0: the balance over every cluster alone)"


def _token_problem(seed=9):
    """Two target kinds, each in a blob of its own; rows' token counts spread from 1 to 2000."""
    x, g = _blobs(3000, groups=8, seed=seed, noise=0.5)
    t, _ = _target_from(x, g, [2, 5], 8, seed=seed)
    tokens = np.random.default_rng(seed).integers(1, 2001, len(x))
    return x, g, t, tokens


@pytest.mark.parametrize("weight", [1.0, 0.6, 0.2])
def test_token_budget_is_a_cut_of_the_targeted_order(weight):
    """S <= T < S + the next row's tokens, and every selected row comes before every unselected one in the
    targeted order (targeted_sequence); weight 1: that order is the round-robin order itself."""
    x, g, t, tokens = _token_problem()
    search = T.search_target(x, t, depth=400)
    rank = T.round_robin_rank(search)
    for budget in (2500, 60_000, 400_000, int(tokens.sum())):
        sel = T.select_targeted(g, search, token_budget=budget, tokens=tokens, target_weight=weight)
        chosen = np.zeros(len(x), dtype=bool)
        chosen[sel.rows] = True
        spent = int(tokens[sel.rows].sum())
        assert sel.tokens_selected == spent and sel.tokens_requested == budget and sel.requested is None
        relevant = rank < sel.relevant_rows
        hits = T.target_hits(search, g, 8)
        seq = T.targeted_sequence(rank, g, relevant & (hits[g] >= T.MIN_TARGET_HITS), tokens, hits)
        assert np.array_equal(np.sort(seq), np.arange(len(x)))  # every row, once
        assert chosen[seq].tolist() == sorted(chosen[seq].tolist(), reverse=True)  # a prefix of the order
        nxt = seq[len(sel.rows)] if len(sel.rows) < len(x) else None
        assert spent <= budget and (nxt is None or budget < spent + tokens[nxt])
        assert len(np.unique(sel.rows)) == len(sel.rows) == sel.quotas.sum()
        if weight == 1.0:  # pure relevance: the round-robin order, cut at T
            by_rank = np.argsort(rank)
            assert np.array_equal(sel.rows, np.sort(by_rank[:len(sel.rows)]))
            assert budget < spent + tokens[by_rank[len(sel.rows)]] if len(sel.rows) < len(x) else True
    fraction = T.select_targeted(g, search, token_fraction=0.1, tokens=tokens, target_weight=weight)
    assert fraction.tokens_requested == int(0.1 * tokens.sum())


def test_token_weight_zero_is_the_untargeted_token_selection():
    x, g, t, tokens = _token_problem(seed=4)
    ids = np.arange(100, 3100)
    search = T.search_target(x, t)
    for budget in (3000, 90_000, 700_000):
        targeted = T.select_targeted(g, search, token_budget=budget, tokens=tokens, target_weight=0.0, ids=ids,
                                     seed=9)
        plain = S.select_rows(g, token_budget=budget, tokens=tokens, ids=ids, seed=9)
        assert np.array_equal(targeted.rows, plain.rows)
        assert np.array_equal(targeted.rank_in_cluster, plain.rank_in_cluster)
        assert targeted.tokens_selected == plain.tokens_selected


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_targeted_token_budget_property(data):
    """Any pool, target, token counts (0 included), weight and T: the selection is a prefix of the targeted order
    with S <= T < S + the next row's tokens (or T is below the order's first row, refused)."""
    n = data.draw(st.integers(2, 90))
    m = data.draw(st.integers(1, 6))
    k = data.draw(st.integers(1, 6))
    rng = np.random.default_rng(data.draw(st.integers(0, 10 ** 6)))
    x = rng.standard_normal((n, 4)).astype(np.float32)
    clusters = rng.integers(0, k, n)
    tokens = rng.integers(0, data.draw(st.sampled_from([1, 5, 400])) + 1, n)
    weight = data.draw(st.sampled_from([1.0, 0.6, 0.3, 0.0]))
    assume(tokens.sum() > 0)
    budget = data.draw(st.integers(1, int(tokens.sum())))
    search = T.search_target(x, rng.standard_normal((m, 4)).astype(np.float32), depth=data.draw(st.integers(1, n)))
    if weight == 0:
        key = (random_keys(np.arange(n), 0) >> np.uint64(32)).astype(np.uint32)
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(key, kind="stable")] = np.arange(n)
        hits, open_ = None, np.ones(n, dtype=bool)
    else:
        rank = T.round_robin_rank(search)
        hits = T.target_hits(search, clusters, int(clusters.max()) + 1)
        open_ = hits[clusters] >= T.MIN_TARGET_HITS
    try:
        sel = T.select_targeted(clusters, search, token_budget=budget, tokens=tokens, target_weight=weight)
    except CurateError as e:
        assert "less than the first row of the targeted order" in str(e)
        return
    seq = T.targeted_sequence(rank, clusters, open_ & (rank < sel.relevant_rows), tokens, hits)
    chosen = np.zeros(n, dtype=bool)
    chosen[sel.rows] = True
    assert chosen[seq].tolist() == sorted(chosen[seq].tolist(), reverse=True)
    spent = int(tokens[sel.rows].sum())
    assert spent == sel.tokens_selected <= budget
    assert len(sel.rows) == n or budget < spent + tokens[seq[len(sel.rows)]]


def test_a_token_budget_balances_tokens_not_rows_over_the_pulled_clusters():
    """Two target kinds, one of long rows (200 tokens) and one of short (20): a row budget gives each kind half
    the rows (so the long kind most of the tokens); the same budget in tokens gives each half the tokens, so the
    short kind ten times the rows. Weight 0.1: a relevant part wide enough that no cap binds. At the default
    weight the short kind is capped at its tokens among the most relevant rows holding T / 0.6 tokens (the
    round-robin serves a row per turn, whatever its length), and the long kind takes the rest."""
    x, g, t, _ = _token_problem(seed=11)
    tokens = np.where(g == 2, 200, np.where(g == 5, 20, 50))
    search = T.search_target(x, t, depth=3000)
    rows = T.select_targeted(g, search, budget=40, target_weight=0.1)
    assert np.bincount(g[rows.rows], minlength=8)[[2, 5]].tolist() == [20, 20]
    budget = int(tokens[rows.rows].sum())
    by_tokens = T.select_targeted(g, search, token_budget=budget, tokens=tokens, target_weight=0.1)
    spent = np.bincount(g[by_tokens.rows], weights=tokens[by_tokens.rows], minlength=8)
    assert spent.sum() <= budget < spent.sum() + 200
    assert abs(spent[2] - spent[5]) <= 200  # equal tokens, to within a row
    counts = np.bincount(g[by_tokens.rows], minlength=8)
    assert counts[5] >= 8 * counts[2] >= 8
    # in each cluster the same round-robin order: the long kind's rows are the first of the row selection's
    assert set(by_tokens.rows[g[by_tokens.rows] == 2]) < set(rows.rows[g[rows.rows] == 2])
    capped = T.select_targeted(g, search, token_budget=budget, tokens=tokens)
    rank = T.round_robin_rank(search)
    relevant_short = tokens[(rank < capped.relevant_rows) & (g == 5)].sum()
    assert np.sum(tokens[capped.rows][g[capped.rows] == 5]) == relevant_short < budget / 2


@pytest.mark.parametrize("kwargs, message", [
    ({"token_budget": 10 ** 12}, r"--token-budget 1,000,000,000,000 is larger than the data's [\d,]+ tokens \(words\)"),
    ({"token_budget": 100, "budget": 5}, "give one budget: --token-budget and --budget"),
    ({"token_budget": 100, "token_fraction": 0.5}, "got both"),
    ({"token_fraction": 0}, r"--token-fraction must be in \(0, 1\]"),
    ({"token_budget": 100, "tokens": None}, "--token-budget needs a token count per row"),
    ({"token_budget": 1}, "less than the first row of the targeted order"),
])
def test_bad_targeted_token_budgets_are_one_line(kwargs, message):
    x, g, t, tokens = _token_problem()
    search = T.search_target(x, t)
    kwargs = {"tokens": tokens + 1, **kwargs}
    with pytest.raises(CurateError, match=message) as err:
        T.select_targeted(g, search, tokens_counted_by="words", **kwargs)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ the commands

MATH = "Tom has {a} apples and buys {b} more. How many apples does he have?"
CODE = "Write a Python function that reverses a list of {a} items."
CITY = "Name the capital city of country number {a} on the map."


def _rows(n, seed=0, templates=(MATH, MATH, MATH, MATH, CITY, CODE)):
    rng = np.random.default_rng(seed)
    return [{"instruction": templates[i % len(templates)].format(a=int(rng.integers(2, 999)),
                                                              b=int(rng.integers(2, 999))),
             "output": f"The answer is {int(rng.integers(1, 999))}.", "kind": "code" if i % len(templates) == 5
             else "math" if i % len(templates) < 4 else "city"} for i in range(n)]


def _write(path, rows):
    import json
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cli(cli_runner, args, code=0):
    from cluster_curate.cli import main
    res = cli_runner.invoke(main, [*map(str, args)])
    assert res.exit_code == code, res.output
    return res


@pytest.fixture
def pool(tmp_path, cli_runner):
    rows = _rows(360)
    data = _write(tmp_path / "pool.jsonl", rows)
    emb, clusters = tmp_path / "emb.parquet", tmp_path / "clusters.parquet"
    _cli(cli_runner, ["embed", data, "--out", emb, "--dim", "16", "-q"])
    _cli(cli_runner, ["cluster", emb, "--out", clusters, "--k", "6", "-q"])
    return {"rows": rows, "data": data, "emb": emb, "clusters": clusters}


def _selected(path):
    from cluster_curate.io.artifacts import read_artifact
    table, meta = read_artifact(path)
    return table, meta


def test_select_target_spends_the_budget_on_the_target_task(tmp_path, cli_runner, pool):
    import json
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])  # 10 rows
    out = tmp_path / "sel.parquet"
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", out, "--budget", "40", "--target", target, "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    table, meta = _selected(out)
    kinds = [pool["rows"][i]["kind"] for i in table.column("id").to_pylist()]
    assert table.num_rows == 40 and kinds.count("code") >= 36  # 60 code rows in the pool, 1 row in 6
    assert {"nearest_target", "relevance"} <= set(table.column_names)
    service = meta.params["target_service"]
    assert service["target_rows"] == 10 and sum(r["selected_nearest_to_it"] for r in service["per_target"]) == 40
    assert meta.inputs["target"]["rows"] == 10 and summary["target"]["rows"] == 10
    from cluster_curate.summary_schema import check, schema_of
    assert check(summary, schema_of("select")) == []  # the --json schema with --target's keys
    assert (tmp_path / "sel.target.parquet").exists()
    # the same again: the same rows; through the target's embeddings artifact: the same rows
    again = tmp_path / "again.parquet"
    _cli(cli_runner, ["select", pool["clusters"], "--out", again, "--budget", "40", "--target",
                      tmp_path / "sel.target.parquet", "-q"])
    assert _selected(again)[0].column("id").equals(table.column("id"))
    # --target-weight 0: the untargeted selection (a given --k makes clusters without groups or kinds)
    plain, zero = tmp_path / "plain.parquet", tmp_path / "zero.parquet"
    _cli(cli_runner, ["select", pool["clusters"], "--out", plain, "--budget", "40", "--within", "random", "-q"])
    _cli(cli_runner, ["select", pool["clusters"], "--out", zero, "--budget", "40", "--target", target,
                      "--target-weight", "0", "-q"])
    assert _selected(zero)[0].column("id").equals(_selected(plain)[0].column("id"))
    # report shows how each target row is served
    rep = _cli(cli_runner, ["report", out, "--json"])
    sections = json.loads(rep.stdout.strip().splitlines()[-1])
    assert check(sections, schema_of("report")) == []
    titles = [s["title"] for s in sections] if isinstance(sections, list) else list(sections)
    assert "target" in titles


def test_select_target_bad_input_is_one_line(tmp_path, cli_runner, pool):
    target = _write(tmp_path / "target.jsonl", _rows(6, seed=3))
    nested = _write(tmp_path / "nested.jsonl", [{"data": r} for r in _rows(6, seed=3)])
    base = ["select", pool["clusters"], "--out", tmp_path / "s.parquet"]
    for extra, message in [
        (["--per-cluster-ratio", "0.5", "--target", target],
         "give --fraction, --budget, --token-budget or --token-fraction, not --per-cluster-ratio"),
        (["--fraction", "0.1", "--target", target, "--within", "far"], "--within: not used with --target"),
        (["--fraction", "0.1", "--target-weight", "0.5"], "--target-weight is only used with --target"),
        (["--fraction", "0.1", "--target-weight", "0"], "--target-weight is only used with --target"),
        (["--fraction", "0.1", "--decontaminate-ngrams", "13"], "--decontaminate-ngrams is only used with "
                                                                  "--decontaminate"),
        (["--fraction", "0.1", "--decontaminate", target, "--decontaminate-ngrams", "2"], "--decontaminate-ngrams"),
        (["--fraction", "0.1", "--target", target, "--target-weight", "2"], "--target-weight must be between"),
        (["--fraction", "0.1", "--target", tmp_path / "nope.jsonl"], "no such file"),
        (["--token-fraction", "0.1", "--fraction", "0.1", "--target", target], "give one budget"),
        (["--token-budget", "10000000", "--target", target], "is larger than the data's"),
        (["--fraction", "0.1", "--target", nested], "a target is read in its own format, not with the data's "
                                                     "--prompt-field / --response-field; embed it with its fields"),
    ]:
        res = _cli(cli_runner, base + extra, code=2)
        assert message in res.output and "Traceback" not in res.output, res.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = _cli(cli_runner, base + ["--fraction", "0.1", "--target", empty], code=2)
    assert "ERROR:" in res.output and "Traceback" not in res.output
    own = tmp_path / "own.parquet"  # embedded on its own: its own text basis, another feature space
    _cli(cli_runner, ["embed", target, "--out", own, "--dim", "16", "-q"])
    res = _cli(cli_runner, base + ["--fraction", "0.1", "--target", own], code=2)
    assert "not embedded in the pool's feature space" in res.output
    assert not (tmp_path / "s.parquet").exists()


def test_select_target_far_from_the_pool_warns(tmp_path, cli_runner, pool):
    far = _write(tmp_path / "far.jsonl", [{"instruction": f"zebra quantum violin {w}", "output": "x"}
                                          for w in ("opera", "glacier", "nebula", "saxophone")])
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "s.parquet", "--budget", "20",
                            "--target", far])
    assert "far from the pool" in res.output and "may not contain the task" in res.output
    assert _selected(tmp_path / "s.parquet")[0].num_rows == 20


def test_select_target_finds_the_targets_questions_in_the_pool(tmp_path, cli_runner, pool):
    """An evaluation set given as the target: pool rows that ask one of its questions (the same prompt,
    whitespace aside, whatever the answer) are what the relevance order takes first. They are counted and
    warned of, or left out with --decontaminate; from the keys embed keeps, else from the raw data."""
    import json

    import pyarrow.parquet as pq
    code = [i for i, r in enumerate(pool["rows"]) if r["kind"] == "code"]
    asked = code[:8]  # 8 pool questions in the target: 5 word for word, 3 with other spacing and answers
    target_rows = [dict(pool["rows"][i]) for i in asked[:5]] + \
        [{"instruction": "  " + pool["rows"][i]["instruction"].replace(" ", "  ") + "\n", "output": "Other."}
         for i in asked[5:]] + [r for r in _rows(60, seed=5) if r["kind"] == "code"]
    target = _write(tmp_path / "eval.jsonl", target_rows)
    base = ["select", pool["clusters"], "--budget", "40", "--target", target, "--json"]
    res = _cli(cli_runner, [*base, "--out", tmp_path / "s.parquet"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    copies = summary["target_copies"]
    assert copies["checked"] and copies["pool_rows"] == 8 and copies["target_questions_in_pool"] == 8
    table, meta = _selected(tmp_path / "s.parquet")
    chosen = set(table.column("id").to_pylist())
    assert copies["selected"] == len(chosen & set(asked)) >= 6 and set(copies["ids"]) == chosen & set(asked)
    assert "ask a question of the target" in res.stderr and "--decontaminate TARGET leaves them out" in res.stderr
    assert meta.params["target_copies"] == copies
    from cluster_curate.summary_schema import check, schema_of
    assert check(summary, schema_of("select")) == []
    rep = json.loads(_cli(cli_runner, ["report", tmp_path / "s.parquet", "--json"]).stdout.strip().splitlines()[-1])
    assert rep["target"]["target_copies"] == copies
    # left out: the budget is spent on the other rows, and the summary says so
    res = _cli(cli_runner, [*base, "--out", tmp_path / "x.parquet", "--decontaminate", target])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    left_out = _selected(tmp_path / "x.parquet")[0]
    assert left_out.num_rows == 40 and not set(left_out.column("id").to_pylist()) & set(asked)
    assert summary["decontaminated"]["rows_left_out"] == 8 and sorted(summary["decontaminated"]["sets"][0]["ids"]) \
        == sorted(asked)
    assert summary["target_copies"]["pool_rows"] == 0 and "ask a question of the target" not in res.stderr
    assert summary["rows"] == len(pool["rows"]) - 8 and check(summary, schema_of("select")) == []
    # embeddings written before embed kept the prompt keys: the same rows found by reading the data
    t = pq.read_table(pool["emb"])
    pq.write_table(t.drop(["prompt_key"]).replace_schema_metadata(t.schema.metadata), pool["emb"])
    res = _cli(cli_runner, [*base, "--out", tmp_path / "o.parquet"])
    assert json.loads(res.stdout.strip().splitlines()[-1])["target_copies"] == copies
    # the pool's data gone: not looked for (said), or a one-line error where they must be left out
    pool["data"].rename(tmp_path / "moved.jsonl")
    res = _cli(cli_runner, [*base, "--out", tmp_path / "g.parquet"])
    gone = json.loads(res.stdout.strip().splitlines()[-1])["target_copies"]
    assert not gone["checked"] and "no such file" in gone["why_not"]
    res = _cli(cli_runner, [*base, "--out", tmp_path / "e.parquet", "--decontaminate", target], code=2)
    assert "--decontaminate reads the rows' prompts" in res.output and "no such file" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "e.parquet").exists()


def test_decontaminate_leaves_out_an_evaluation_sets_questions(tmp_path, cli_runner, pool):
    """select --decontaminate EVAL (any selection, several sets): the rows asking a question of EVAL are left
    out before the budget; EVAL may be raw data in its own format or its embeddings; run passes it to select,
    re-selects when EVAL's content changes, and refuses a bad EVAL row before its first stage."""
    import json
    math_ = [i for i, r in enumerate(pool["rows"]) if r["kind"] == "math"]
    city = [i for i, r in enumerate(pool["rows"]) if r["kind"] == "city"]
    eval_a = _write(tmp_path / "a.jsonl", [pool["rows"][i] for i in math_[:30]] + _rows(12, seed=9))
    eval_b = tmp_path / "b.csv"  # another format, other field names
    eval_b.write_text("question,answer\n" + "".join(f'"{pool["rows"][i]["instruction"]}",x\n' for i in city[:10]))
    out = tmp_path / "s.parquet"
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", out, "--fraction", "0.5", "--decontaminate", eval_a,
                            "--decontaminate", eval_b, "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    ids = set(_selected(out)[0].column("id").to_pylist())
    asked = [{pool["rows"][i]["instruction"] for i in part} for part in (math_[:30], city[:10])]
    asking = [{i for i, r in enumerate(pool["rows"]) if r["instruction"] in q} for q in asked]  # pool repeats some
    assert not ids & (asking[0] | asking[1]) and len(ids) == summary["budget"]["rows"]
    assert summary["rows"] == len(pool["rows"]) - len(asking[0] | asking[1])
    shown = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "shown.parquet", "--fraction", "0.5",
                              "--decontaminate", eval_a, "--decontaminate", eval_b]).stdout
    left = len(asking[0] | asking[1])  # the table's rows: those left, and where the others went
    shown = " ".join(shown.replace("│", " ").split())  # a cell's text wraps onto the lines below it
    assert f"rows {summary['rows']} ({len(pool['rows'])} clustered, {left} left out by --decontaminate)" in shown
    sets = summary["decontaminated"]["sets"]
    assert [(s["rows"], s["questions_in_pool"]) for s in sets] == [(len(a), len(q)) for a, q in zip(asking, asked)]
    assert sets[0]["questions"] == len(asked[0] | {r["instruction"] for r in _rows(12, seed=9)})
    from cluster_curate.summary_schema import check, schema_of
    assert check(summary, schema_of("select")) == []
    rep = json.loads(_cli(cli_runner, ["report", out, "--json"]).stdout.strip().splitlines()[-1])
    assert rep["selection"]["decontaminated"] == summary["decontaminated"] and check(rep, schema_of("report")) == []
    # the same set as its embeddings (`embed EVAL --like`): the keys it kept, the same rows
    eval_emb = tmp_path / "a_emb.parquet"
    _cli(cli_runner, ["embed", eval_a, "--like", pool["emb"], "--out", eval_emb, "-q"])
    _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "s2.parquet", "--fraction", "0.5",
                      "--decontaminate", eval_emb, "--decontaminate", eval_b, "-q"])
    assert set(_selected(tmp_path / "s2.parquet")[0].column("id").to_pylist()) == ids
    # reworded: no copy, but a run of 10 words shared with --decontaminate-ngrams 10
    code = [i for i, r in enumerate(pool["rows"]) if r["kind"] == "code"][:3]
    reworded = _write(tmp_path / "c.jsonl", [{"instruction": pool["rows"][i]["instruction"] + " Use recursion, please.",
                                              "output": "x"} for i in code])
    asking_c = {i for i, r in enumerate(pool["rows"]) if r["instruction"] in {pool["rows"][j]["instruction"]
                                                                             for j in code}}
    base = ["select", pool["clusters"], "--fraction", "0.5", "--decontaminate", reworded, "--json"]
    plain = json.loads(_cli(cli_runner, [*base, "--out", tmp_path / "c0.parquet"]).stdout.strip().splitlines()[-1])
    assert plain["decontaminated"]["rows_left_out"] == 0
    res = _cli(cli_runner, [*base, "--out", tmp_path / "c1.parquet", "--decontaminate-ngrams", "10"])
    near = json.loads(res.stdout.strip().splitlines()[-1])["decontaminated"]["sets"][0]
    assert (near["copies"], near["ngram_rows"], near["ngram"]) == (0, len(asking_c), 10)
    assert not set(_selected(tmp_path / "c1.parquet")[0].column("id").to_pylist()) & asking_c
    for bad, message in [(tmp_path / "none.jsonl", "no such file"), (pool["clusters"], "holds no examples"),
                         (pool["data"], f"every one of the {len(pool['rows'])} rows asks a question of it")]:
        res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "bad.parquet", "--fraction", "0.5",
                                "--decontaminate", bad], code=2)
        assert "--decontaminate" in res.output and message in res.output and "Traceback" not in res.output
    # run: passed to select, up to date while EVAL is unchanged, selected again when it changes
    args = ["run", pool["data"], "--out", tmp_path / "curated", "--dim", "16", "--k", "6", "--fraction", "0.5",
            "--decontaminate", eval_a, "--num-shards", "2", "--json"]
    first = json.loads(_cli(cli_runner, args).stdout)
    assert first["summaries"]["select"]["decontaminated"]["rows_left_out"] == len(asking[0])
    again = json.loads(_cli(cli_runner, args).stdout)
    assert [s["status"] for s in again["stages"]] == ["up to date"] * 4
    _write(eval_a, [pool["rows"][i] for i in city[:10]])
    third = json.loads(_cli(cli_runner, args).stdout)
    assert {s["stage"]: s["status"] for s in third["stages"]} == {"embed": "up to date", "cluster": "up to date",
                                                                 "select": "ran", "shard": "ran"}
    assert third["summaries"]["select"]["decontaminated"]["rows_left_out"] == len(asking[1])
    eval_a.write_text('{"instruction": "fine", "output": "x"}\n{"output": "an answer to no question"}\n')
    res = _cli(cli_runner, [*args[:3], tmp_path / "fresh", *args[4:]], code=2)
    assert "a.jsonl:2: field 'instruction': missing prompt" in res.output and not (tmp_path / "fresh").exists()


def test_run_target_end_to_end_and_up_to_date(tmp_path, cli_runner, pool):
    import json
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    out = tmp_path / "curated"
    args = ["run", pool["data"], "--out", out, "--dim", "16", "--k", "6", "--budget", "30", "--target", target,
            "--num-shards", "2", "--json"]
    first = json.loads(_cli(cli_runner, args).stdout)
    assert first["summaries"]["select"]["target_copies"]["checked"]  # from the keys embed kept
    table, _ = _selected(out / "selection.parquet")
    kinds = [pool["rows"][i]["kind"] for i in table.column("id").to_pylist()]
    assert kinds.count("code") >= 27
    assert (out / "shards" / "manifest.json").exists()
    again = json.loads(_cli(cli_runner, args).stdout)
    assert [s["status"] for s in again["stages"]] == ["up to date"] * 4
    _write(target, [r for r in _rows(60, seed=6) if r["kind"] == "code"])  # another target: select again
    third = json.loads(_cli(cli_runner, args).stdout)
    assert {s["stage"]: s["status"] for s in third["stages"]}["select"] == "ran"


def test_run_opens_and_hashes_a_raw_target_once(tmp_path, cli_runner, pool, monkeypatch):
    """run's preflight opened the raw --target to parse it, and its up-to-date check opened it again to hash it
    (select, when it runs, embeds it as embed reads any data). An up-to-date rerun now opens it once, for both."""
    from cluster_curate.io import datasets
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    args = ["run", pool["data"], "--out", tmp_path / "curated", "--dim", "16", "--k", "6", "--budget", "30",
            "--target", target, "--num-shards", "2", "-q"]
    _cli(cli_runner, args)
    opened, hashed = [], []
    open_dataset, file_fingerprint = datasets.open_dataset, datasets.file_fingerprint
    monkeypatch.setattr(datasets, "open_dataset", lambda path, *a, **k: opened.append(str(path)) or
                        open_dataset(path, *a, **k))
    monkeypatch.setattr(datasets, "file_fingerprint", lambda path: hashed.append(str(path)) or file_fingerprint(path))
    _cli(cli_runner, args)
    assert opened.count(str(target)) == 1 and hashed.count(str(target)) == 1, (opened, hashed)


def test_select_target_refuses_a_mixtures_floors_and_skips_bad_target_rows(tmp_path, cli_runner):
    """--target does not meet a mixture's floors or caps, so they are refused, not left unmet silently (lifted
    with --source-min-share 0); the target's bad rows follow --on-bad-row as the pool's do."""
    import json

    rows = _rows(360)
    math = _write(tmp_path / "math.jsonl", [r for r in rows if r["kind"] != "code"])
    code = _write(tmp_path / "code.jsonl", [r for r in rows if r["kind"] == "code"])
    (tmp_path / "mix.yaml").write_text(f"inputs:\n  - path: {math}\n  - path: {code}\n    min_share: 0.3\n")
    run = tmp_path / "run"
    _cli(cli_runner, ["run", tmp_path / "mix.yaml", "--out", run, "--dim", "16", "--k", "6", "--fraction", "0.2",
                      "--num-shards", "2", "--micro-batch-size", "2", "-q"])
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"]
                    + [{"instruction": "Write a loop.", "output": ""}])  # an empty response: a bad row
    base = ["select", run / "clusters.parquet", "--out", tmp_path / "s.parquet", "--budget", "40", "--target", target]
    for bounds, said in (([], "source code: its floor 0.3 (the mixture file's min_share) is not met by --target"),
                         (["--source-min-share", "0", "--source-max-share", "math=0.5"],  # the file's, or given
                          "source math: its cap 0.5 (--source-max-share) is not met by --target")):
        res = _cli(cli_runner, base + ["--on-bad-row", "skip", *bounds], code=2)
        assert said in res.output, res.output
    res = _cli(cli_runner, base + ["--source-min-share", "0"], code=2)
    assert "target.jsonl:11: field 'output': empty response" in res.output
    res = _cli(cli_runner, base + ["--source-min-share", "0", "--on-bad-row", "skip", "--json"])
    table, meta = _selected(tmp_path / "s.parquet")
    assert table.num_rows == 40 and len(meta.params["target_service"]["per_target"]) == 10
    assert len((tmp_path / "s.target.rejects.jsonl").read_text().splitlines()) == 1  # the skipped row, visibly
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    # and said: the summary's target counts the 10 rows embedded, and the rejects file was written silently
    (warning,) = [w for w in summary["warnings"] if w.startswith("--target")]
    assert "1 bad row skipped (--on-bad-row skip)" in warning and warning.endswith("s.target.rejects.jsonl")
    # each input's rows before and after, as without --target: the code target takes code rows
    sources = {s["source"]: s for s in summary["sources"]}
    assert meta.params["sources"] == list(sources.values())
    assert sources["math"]["selected"] + sources["code"]["selected"] == 40
    assert sources["code"]["selected"] > sources["math"]["selected"]
    assert sources["code"]["rows"] == sum(r["kind"] == "code" for r in rows)


def test_run_reads_the_target_in_its_own_format_not_with_the_datas_fields(tmp_path, cli_runner):
    """--prompt-field names the data's column; the target's format is its own (run refused it before any stage)."""
    rows = [{"q": r["instruction"], "a": r["output"]} for r in _rows(240)]
    data = _write(tmp_path / "q.jsonl", rows)
    target = _write(tmp_path / "t.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    _cli(cli_runner, ["run", data, "--out", tmp_path / "r", "--prompt-field", "q", "--response-field", "a",
                      "--dim", "16", "--k", "6", "--budget", "40", "--target", target, "--num-shards", "2",
                      "--micro-batch-size", "2", "-q"])
    table, meta = _selected(tmp_path / "r" / "selection.parquet")
    assert table.num_rows == 40 and len(meta.params["target_service"]["per_target"]) == 10


def test_select_target_token_budget(tmp_path, cli_runner, pool):
    """`select --target --token-budget`: the selected tokens (the embeddings' n_tokens: words) within one row of
    T, reported as the untargeted token budget reports them; the artifact says how they were counted."""
    import json

    from cluster_curate.summary_schema import check, schema_of
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    words = np.array([len(f"{r['instruction']} {r['output']}".split()) for r in pool["rows"]])
    budget = 500
    out = tmp_path / "sel.parquet"
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", out, "--token-budget", budget, "--target", target,
                            "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert check(summary, schema_of("select")) == []
    table, meta = _selected(out)
    n_tokens = np.array(table.column("n_tokens").to_pylist())
    assert np.array_equal(n_tokens, words[table.column("id").to_numpy()])  # the embeddings' counts are words
    spent = int(n_tokens.sum())
    assert spent <= budget < spent + words.max()
    assert summary["budget"] == {"mode": "token-budget", "value": budget, "rows": None, "tokens": budget}
    assert summary["tokens_selected"] == {"selected": spent, "total": int(words.sum())}
    assert summary["tokens_counted_by"].startswith("the embeddings' n_tokens")
    assert meta.params["tokens"]["selected"] == spent and meta.params["mode"] == "token-budget"
    kinds = [pool["rows"][i]["kind"] for i in table.column("id").to_pylist()]
    assert kinds.count("code") >= 0.9 * len(kinds)
    # --token-fraction, and as many rows as the targeted row budget when T is what those rows hold
    rows_out = tmp_path / "rows.parquet"
    _cli(cli_runner, ["select", pool["clusters"], "--out", rows_out, "--budget", "30", "--target", target,
                      "--target-weight", "1", "-q"])
    by_rows = _selected(rows_out)[0]
    held = int(words[by_rows.column("id").to_numpy()].sum())
    same = tmp_path / "same.parquet"
    _cli(cli_runner, ["select", pool["clusters"], "--out", same, "--token-budget", held, "--target", target,
                      "--target-weight", "1", "-q"])  # weight 1: both are the round-robin order, cut
    # (the same number of rows; which of the pool's many equally near rows come first depends on the search's
    # list depth, sized from the budget in rows)
    assert _selected(same)[0].num_rows == by_rows.num_rows == 30
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "f.parquet", "--token-fraction", "0.05",
                            "--target", target, "--json"])
    assert json.loads(res.stdout.strip().splitlines()[-1])["budget"]["tokens"] == int(0.05 * words.sum())


@pytest.mark.parametrize("budget_in", ["tokens", "rows"])
def test_select_target_token_budget_counts_with_the_tokenizer(tmp_path, cli_runner, pool, budget_in):
    """--tokenizer: the trainer's exact counts decide the cut and become the selection's n_tokens (shard's); with a
    budget in rows they are still counted and reported, as without --target."""
    import json

    from transformers import AutoTokenizer

    from cluster_curate.commands.common import token_counts
    from cluster_curate.io.datasets import open_dataset
    from tiny_lm import build_tokenizer
    tok_dir = tmp_path / "tok"
    build_tokenizer(chat_template=True).save_pretrained(tok_dir)
    examples = [ex for b in open_dataset(str(pool["data"])).iter_batches() for ex in b.examples]
    exact = np.sum(token_counts(AutoTokenizer.from_pretrained(tok_dir), examples), axis=0)
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    budget = int(exact.sum() * 0.05) if budget_in == "tokens" else 12
    flag = {"tokens": "--token-budget", "rows": "--budget"}[budget_in]
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "s.parquet", flag, budget,
                            "--tokenizer", tok_dir, "--target", target, "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["tokens_counted_by"] == f"tokenizer {tok_dir} (exact)"
    table, _ = _selected(tmp_path / "s.parquet")
    ids = table.column("id").to_numpy()
    assert table.column("n_tokens").to_pylist() == exact[ids].tolist()
    if budget_in == "tokens":
        assert 0 <= budget - exact[ids].sum() < exact.max()
    else:
        assert len(ids) == budget
    assert summary["tokens_selected"] == {"selected": int(exact[ids].sum()), "total": int(exact.sum())}


def test_run_target_token_budget_end_to_end(tmp_path, pool):
    """`run --target --token-budget` through the real CLI: checked up front, then embed, cluster, select, shard;
    the shards hold exactly the selection, whose tokens are within one row of T; an oversized T is one line."""
    import json

    import pyarrow.parquet as pq
    target = _write(tmp_path / "target.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    words = np.array([len(f"{r['instruction']} {r['output']}".split()) for r in pool["rows"]])
    out = tmp_path / "curated"
    args = ["run", pool["data"], "--out", out, "--dim", "16", "--k", "6", "--token-budget", 600, "--target", target,
            "--num-shards", "2", "--micro-batch-size", "2", "--json"]
    proc = cli_in_process(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    selected = json.loads(proc.stdout)["summaries"]["select"]
    assert selected["budget"]["tokens"] == 600 and selected["target"]["rows"] == 10
    ids = pq.read_table(out / "selection.parquet").column("id").to_numpy()
    spent = int(words[ids].sum())
    assert spent == selected["tokens_selected"]["selected"] and 600 - words.max() < spent <= 600
    kinds = [pool["rows"][i]["kind"] for i in ids]
    assert kinds.count("code") >= 0.9 * len(kinds)
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    assert manifest["num_shards"] == 2
    sharded = set()
    for f in sorted((out / "shards").glob("shard-*.parquet")):
        sharded |= set(pq.read_table(f, columns=["id"]).column("id").to_pylist())
    leftover = (out / "shards" / "leftover_ids.txt")
    sharded |= {int(v) for v in leftover.read_text().split()} if leftover.exists() else set()
    assert sharded == set(ids.tolist())
    again = cli_in_process(*args, cwd=tmp_path)
    assert [s["status"] for s in json.loads(again.stdout)["stages"]] == ["up to date"] * 4
    for extra, message in ((["--token-budget", 10 ** 7], "is larger than the data's"),
                           (["--token-budget", 600, "--fraction", "0.1"], "give one budget"),
                           (["--token-budget", 600, "--num-shards", "400"], "one global step needs")):
        bad = cli_in_process("run", pool["data"], "--out", tmp_path / "bad", "--dim", "16", "--k", "6",
                             "--num-shards", "2", "--target", target, *extra, cwd=tmp_path)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert bad.stderr.count("ERROR") == 1 and message in bad.stderr.strip().splitlines()[-1], bad.stderr
    assert not (tmp_path / "bad" / "selection.parquet").exists()


def test_run_names_a_changed_decontaminate_as_the_user_wrote_it(tmp_path, cli_runner, pool):
    """A run folder made with --decontaminate, run again without it (or with another set): the refusal named the
    change in Python's words ("--decontaminate ['a.jsonl'] -> ()"); now as the command line writes it."""
    eval_a = _write(tmp_path / "a.jsonl", pool["rows"][:5])
    args = ["run", pool["data"], "--out", tmp_path / "curated", "--dim", "16", "--k", "6", "--fraction", "0.5",
            "--num-shards", "2", "-q"]
    _cli(cli_runner, [*args, "--decontaminate", eval_a])
    res = _cli(cli_runner, args, code=2)
    assert f"--decontaminate {eval_a} -> (not given)" in res.output and "[" not in res.output
    res = _cli(cli_runner, [*args, "--decontaminate", eval_a, "--decontaminate", eval_a], code=2)
    assert f"--decontaminate {eval_a} -> {eval_a} {eval_a}" in res.output


def test_python_api_takes_one_decontaminate_path_as_a_str_or_path(tmp_path, pool):
    """cluster_curate.select(..., decontaminate="eval.jsonl") read the letters of the path as sets ("--decontaminate
    e: no such file"), and a pathlib.Path failed with a TypeError; now one path is one set, as a list of them is."""
    import cluster_curate
    eval_a = _write(tmp_path / "a.jsonl", pool["rows"][:5])
    asking = {i for i, r in enumerate(pool["rows"]) if r["instruction"] in {x["instruction"] for x in pool["rows"][:5]}}
    for n, given in enumerate([str(eval_a), eval_a, [str(eval_a)], (eval_a,)]):
        summary, _ = cluster_curate.select(str(pool["clusters"]), str(tmp_path / f"s{n}.parquet"), fraction=0.5,
                                           decontaminate=given)
        record = summary["decontaminated"].value
        assert record["rows_left_out"] == len(asking) and [s["path"] for s in record["sets"]] == [str(eval_a)]


def test_kept_says_which_rows_it_is_a_fraction_of_after_decontaminate(tmp_path, pool):
    """After --decontaminate left rows out, `kept` (selected / rows) is a fraction of the rows left, which the
    summary and `report` called 'the rows embedded'; now they say so, and say 'embedded' where none were left out."""
    import cluster_curate
    eval_a = _write(tmp_path / "a.jsonl", pool["rows"][:30])
    clean = _write(tmp_path / "clean.jsonl", [{"instruction": "A question the pool does not ask", "output": "x"}])
    for given, label in [(eval_a, "kept (fraction of the rows --decontaminate left)"),
                         (clean, "kept (fraction of the rows embedded)")]:
        out = tmp_path / f"{given.stem}.parquet"
        summary, _ = cluster_curate.select(str(pool["clusters"]), str(out), fraction=0.5, decontaminate=[str(given)])
        assert summary["kept"].label == label
        assert summary["kept"].value == round(summary["selected"] / summary["rows"], 4)
        sections, _ = cluster_curate.report([str(out)])
        (data,) = [d for title, d, _ in sections if title == "selection"]
        assert data["kept"].label == label


def test_decontaminate_warns_of_the_evaluation_rows_it_skipped(tmp_path, cli_runner, pool):
    """--on-bad-row skip with an EVAL holding bad rows: their questions were silently not looked for (the
    summary counted the questions read); now a warning says how many rows were skipped and the first."""
    import json
    eval_a = tmp_path / "a.jsonl"
    eval_a.write_text("".join(json.dumps(r) + "\n" for r in pool["rows"][:3])
                      + '{"output": "an answer to no question"}\nnot json\n')
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "s.parquet", "--fraction", "0.5",
                            "--decontaminate", eval_a, "--on-bad-row", "skip", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    (warning,) = [w for w in summary["warnings"] if "--decontaminate" in w]
    assert "2 bad rows skipped" in warning and "a.jsonl:4" in warning
    assert summary["decontaminated"]["sets"][0]["questions"] == 3


@pytest.mark.parametrize("n, line", [(2, "2 is not in the range x>=3"), (0, "0 is not in the range x>=3"),
                                     (-3, "-3 is not in the range x>=3"), (13.5, "13.5 is not a whole number"),
                                     ("a dozen", "'a dozen' is not a valid integer range"),
                                     (True, "True is not a number")])
def test_python_api_refuses_a_decontaminate_ngrams_the_cli_refuses(tmp_path, pool, n, line):
    """The CLI refuses --decontaminate-ngrams below 3; the Python API took 2 or 1 (leaving out almost every row:
    1,585 of 1,590 GSM8K rows share a 2-word run with its test set), ignored 0 and negatives, and raised TypeError
    for a float or a str. Now the CLI's type's line naming the option (options.resolve), before any work, for
    select and run alike ("13" is 13, as on the CLI)."""
    import cluster_curate
    eval_a = _write(tmp_path / "a.jsonl", pool["rows"][:5])
    with pytest.raises(CurateError) as e:
        cluster_curate.select(str(pool["clusters"]), str(tmp_path / "s.parquet"), fraction=0.5,
                              decontaminate=[str(eval_a)], decontaminate_ngrams=n)
    assert str(e.value) == f"--decontaminate-ngrams: {line}"
    with pytest.raises(CurateError) as e:
        cluster_curate.run(str(pool["data"]), str(tmp_path / "r"), fraction=0.5, decontaminate=[str(eval_a)],
                           decontaminate_ngrams=n, num_shards=2)
    assert str(e.value) == f"--decontaminate-ngrams: {line}"
    assert not (tmp_path / "s.parquet").exists() and not (tmp_path / "r").exists()


def test_decontaminate_takes_a_hub_id_as_any_data_does(tmp_path, pool, monkeypatch):
    """EVAL as a Hugging Face id without `hf:` (`org/evalset`, read as any data reads it, from the cache when
    offline) was refused as 'no such file or directory' before it was tried; now it is read."""
    import datasets

    import cluster_curate
    from cluster_curate.io import containers
    from cluster_curate.io.hf_datasets import HFDataset
    rows = pool["rows"][:5]
    cached = _write(tmp_path / "cached.jsonl", rows)  # stands for the hub cache's files
    asked = []
    monkeypatch.setattr(containers, "load_hub", lambda source, name, config, split: asked.append((name, split)) or
                        HFDataset(datasets.Dataset.from_list(rows), "hf-hub", [cached]))
    asking = {i for i, r in enumerate(pool["rows"]) if r["instruction"] in {x["instruction"] for x in rows}}
    summary, _ = cluster_curate.select(str(pool["clusters"]), str(tmp_path / "s.parquet"), fraction=0.5,
                                       decontaminate="org/evalset:test")
    assert summary["decontaminated"].value["rows_left_out"] == len(asking) and asked[0] == ("org/evalset", "test")


def test_run_says_which_named_input_changed(tmp_path, cli_runner, pool):
    """run selected again when an EVAL's (or the target's) content changed, saying only 'its input changed', as
    for new data; now it names the set or target whose content changed."""
    import json
    eval_a, eval_b = _write(tmp_path / "a.jsonl", pool["rows"][:5]), _write(tmp_path / "b.jsonl", pool["rows"][5:9])
    target = _write(tmp_path / "t.jsonl", [r for r in _rows(60, seed=5) if r["kind"] == "code"])
    args = ["run", pool["data"], "--out", tmp_path / "curated", "--dim", "16", "--k", "6", "--budget", "30",
            "--decontaminate", eval_a, "--decontaminate", eval_b, "--target", target, "--num-shards", "2", "--json"]
    _cli(cli_runner, args)
    reasons = []
    for path, rows in ((eval_b, pool["rows"][5:8]), (target, [r for r in _rows(60, seed=6) if r["kind"] == "code"])):
        _write(path, rows)
        stages = {s["stage"]: s for s in json.loads(_cli(cli_runner, args).stdout)["stages"]}
        assert stages["embed"]["status"] == stages["cluster"]["status"] == "up to date"
        reasons.append(stages["select"]["reason"])
    assert reasons == [f"its input changed (--decontaminate {eval_b}: its content changed)",
                       f"its input changed (--target {target}: its content changed)"]


def test_a_one_row_target_is_worded_in_the_singular(tmp_path, cli_runner, pool):
    """A target of one row far from the pool: the summary said 'T: 1 rows', '(1 target rows, ...)' and the warning
    'all 1 target rows are far from the pool'; now in the singular (console.counted)."""
    import json
    target = _write(tmp_path / "one.jsonl", [{"instruction": "Translate this sonnet about the sea into Latin verse "
                                              "keeping its rhyme", "output": "Mare..."}])
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "s.parquet", "--budget", "20",
                            "--target", target, "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert any("the 1 target row is far from the pool" in w for w in summary["warnings"]), summary["warnings"]
    from cluster_curate.commands.select import target_summary
    from cluster_curate.io.artifacts import read_meta
    lines = target_summary(read_meta(tmp_path / "s.parquet").params["target_service"], target)
    assert lines["target"].text.startswith(f"{target}: 1 row, 1 served")
    # a single target row pulls from no cluster (README: Balance): the summary says so
    assert lines["clusters_the_target_pulled_from"].text == ("0 (no cluster holds the nearest pool row of 2 target "
                                                             "rows or more: the budget went in relevance order)")


def test_a_targets_exact_duplicates_and_bad_rows_are_worded_as_the_targets(tmp_path, cli_runner, pool):
    """A --target holding exact duplicate rows warned in the pool's words ('not embedded, so never selected: ids
    ...'): these are target rows, never selected, with the target's ids; now the warning names the target and
    says they are left out of it. Its bad rows are warned of once (select's warning; not again by its embed)."""
    import json
    rows = [r for r in _rows(60, seed=5) if r["kind"] == "code"]  # 10 rows
    target = _write(tmp_path / "tdup.jsonl", rows + rows[:2] + [{"instruction": "Write a loop.", "output": ""}])
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "s.parquet", "--budget", "20",
                            "--target", target, "--on-bad-row", "skip", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["target"]["rows"] == 10
    assert [w for w in summary["warnings"] if str(target) in w or "never selected" in w] == [
        f"--target {target}: 2 exact duplicate(s) (same normalised prompt and response as a lower id) left out of "
        "the target: its ids 10, 11",
        f"--target {target}: 1 bad row skipped (--on-bad-row skip), so not served as target rows; listed in "
        f"{tmp_path / 's.target.rejects.jsonl'}"]


def test_run_says_a_step_is_not_filled_because_decontaminate_left_rows_out(tmp_path, cli_runner, pool):
    """A budget that fills one global step of the data but not of the rows --decontaminate leaves: run embedded
    and clustered, then failed after select naming the rows selected alone. Now preflight counts the rows that ask
    an EVAL's question and refuses before the first stage; what only select can know (n-gram matches) is said
    after it, with how many rows were left and why."""
    import re
    eval_a = _write(tmp_path / "a.jsonl", pool["rows"][:30])
    asked = {r["instruction"] for r in pool["rows"][:30]}
    asking = sum(r["instruction"] in asked for r in pool["rows"])
    left = len(pool["rows"]) - asking
    args = ["run", pool["data"], "--out", tmp_path / "curated", "--dim", "16", "--k", "6", "--budget", "350",
            "--num-shards", "2", "--micro-batch-size", "175", "--decontaminate", eval_a]
    res = _cli(cli_runner, args, code=2)
    assert f"--budget 350 of {left:,} rows (of {len(pool['rows'])}: {asking} rows ask a --decontaminate set's " \
        f"questions) selects at most {left:,}" in res.output and not (tmp_path / "curated").exists()
    fits = ["--budget", str(left), "--micro-batch-size", str(left // 2)]  # a step preflight allows, n-grams break
    res = _cli(cli_runner, [*args, *fits, "--decontaminate-ngrams", "4"], code=2)
    found = re.search(r"selected (\d+) of the (\d+) rows left after (\d+) rows --decontaminate left out", res.output)
    assert found and found[1] == found[2] and int(found[3]) > asking and int(found[1]) < left, res.output


def test_decontaminate_asks_which_split_of_a_datasetdict(tmp_path, cli_runner, pool):
    """A save_to_disk DatasetDict of train and test given as EVAL: data reads its 'train' split, which is seldom
    the evaluation set (and may be the pool itself); --decontaminate asks for the split, and DIR/test reads it."""
    datasets = pytest.importorskip("datasets")
    asked = [pool["rows"][i] for i in range(0, 60, 6)]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(pool["rows"][:50]),
                          "test": datasets.Dataset.from_list(asked)}).save_to_disk(str(tmp_path / "dd"))
    base = ["select", pool["clusters"], "--out", tmp_path / "s.parquet", "--fraction", "0.5"]
    res = _cli(cli_runner, [*base, "--decontaminate", tmp_path / "dd"], code=2)
    assert "a DatasetDict of splits train, test; name the evaluation split" in res.output
    assert str(tmp_path / "dd" / "test") in res.output and not (tmp_path / "s.parquet").exists()
    import json
    res = _cli(cli_runner, [*base, "--decontaminate", tmp_path / "dd" / "test", "--json"])
    (s,) = json.loads(res.stdout.strip().splitlines()[-1])["decontaminated"]["sets"]
    assert s["questions"] == len({r["instruction"] for r in asked}) and s["rows"] >= len(asked)


def test_decontaminate_takes_evaluation_sets_of_questions_without_answers(tmp_path, cli_runner, pool):
    """IFEval (`prompt` and its instructions), MT-Bench (`turns`: consecutive user questions), Arena-Hard (`turns`
    of {content}), a CSV of questions and chats that end with the user's turn were refused ('unrecognised
    record format', or every row bad: no response); their questions are now read and left out as a GSM8K test
    set's are. Each MT-Bench turn is a question: a pool row asking turn 2 alone is found too."""
    import json

    from cluster_curate.summary_schema import check, schema_of
    text = [r["instruction"] for r in pool["rows"]]
    math_, city, code = ([i for i, r in enumerate(pool["rows"]) if r["kind"] == k] for k in ("math", "city", "code"))
    rewrite = "Rewrite your previous response. Start every sentence with the letter A."
    sets = {
        "ifeval.jsonl": [{"key": 1000 + i, "prompt": text[i], "instruction_id_list": ["punctuation:no_comma"],
                          "kwargs": [{}]} for i in math_[:5]] + [{"key": 2000, "prompt": "Write a haiku about rain.",
                                                                   "instruction_id_list": [], "kwargs": []}],
        "mt_bench.jsonl": [{"question_id": 81 + j, "category": "writing", "turns": [text[i], rewrite]}
                           for j, i in enumerate(city[:3])]
        + [{"question_id": 90, "category": "coding",
            "turns": ["Compose a travel blog post about Hawaii.", text[code[0]]]}],
        "arena_hard.jsonl": [{"question_id": f"{i:032x}", "cluster": "Python lists", "turns": [{"content": text[i]}]}
                             for i in code[1:3]],
        "chat.jsonl": [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text[i]}]}
                       for i in math_[5:7]],
    }
    paths = [_write(tmp_path / name, rows) for name, rows in sets.items()]
    questions = tmp_path / "questions.csv"  # questions alone, no answer column
    questions.write_text("question\n" + "".join(f'"{text[i]}"\n' for i in city[3:5]))
    paths.append(questions)
    asked = [{text[i] for i in math_[:5]}, {text[i] for i in (*city[:3], code[0])}, {text[i] for i in code[1:3]},
             {text[i] for i in math_[5:7]}, {text[i] for i in city[3:5]}]
    asking = [{i for i, t in enumerate(text) if t in q} for q in asked]  # the pool repeats some questions
    out = tmp_path / "s.parquet"
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", out, "--fraction", "0.5", "--json",
                            *[a for p in paths for a in ("--decontaminate", p)]])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    records = summary["decontaminated"]["sets"]
    assert [(r["rows"], r["questions_in_pool"]) for r in records] == [(len(a), len(q)) for a, q in zip(asking, asked)]
    # MT-Bench: 4 rows of 2 turns, the rewrite asked thrice: 6 questions
    assert [r["questions"] for r in records] == [6, 6, 2, 2, 2]
    everything = set().union(*asking)
    ids = set(_selected(out)[0].column("id").to_pylist())
    assert not ids & everything and summary["rows"] == len(text) - len(everything)
    from cluster_curate.commands.select_parts import eval_set_text  # the summary's and report's words
    assert eval_set_text(records[1]) == f"{len(asking[1])} rows ask 4 of its 6 questions"
    assert check(summary, schema_of("select")) == []
    rep = json.loads(_cli(cli_runner, ["report", out, "--json"]).stdout.strip().splitlines()[-1])
    assert rep["selection"]["decontaminated"] == summary["decontaminated"] and check(rep, schema_of("report")) == []
    # inspect counts the same rows
    res = _cli(cli_runner, ["inspect", pool["data"], "--decontaminate", paths[0], "--decontaminate", paths[1],
                            "--json"])
    assert json.loads(res.stdout)["decontamination"] == records[:2]
    # a reworded IFEval prompt: found by --decontaminate-ngrams, as with an answered set
    reworded = _write(tmp_path / "ifeval_reworded.jsonl", [{"key": 1, "prompt": f"Please help. {text[code[3]]} Be "
                                                            "concise.", "instruction_id_list": [], "kwargs": []}])
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "n.parquet", "--fraction", "0.5", "--json",
                            "--decontaminate", reworded, "--decontaminate-ngrams", "10"])
    (near,) = json.loads(res.stdout.strip().splitlines()[-1])["decontaminated"]["sets"]
    same = {i for i, t in enumerate(text) if t == text[code[3]]}
    assert (near["copies"], near["ngram_rows"], near["questions"]) == (0, len(same), 1)
    assert not set(_selected(tmp_path / "n.parquet")[0].column("id").to_pylist()) & same


def test_run_decontaminate_takes_questions_alone_and_refuses_a_row_without_one_before_embed(tmp_path, cli_runner,
                                                                                           pool):
    """run reads each EVAL before its first stage: an IFEval-shaped set (no answers) is taken, and its questions
    left out; a row without a prompt is refused there, with one line naming the file, the line and the field."""
    import json
    math_ = [i for i, r in enumerate(pool["rows"]) if r["kind"] == "math"][:4]
    rows = [{"key": 1000 + j, "prompt": pool["rows"][i]["instruction"], "instruction_id_list": [], "kwargs": []}
            for j, i in enumerate(math_)]
    ifeval = _write(tmp_path / "ifeval.jsonl", rows)
    asking = {i for i, r in enumerate(pool["rows"]) if r["instruction"] in {x["prompt"] for x in rows}}
    args = ["run", pool["data"], "--out", tmp_path / "curated", "--dim", "16", "--k", "6", "--fraction", "0.5",
            "--decontaminate", ifeval, "--num-shards", "2", "--json"]
    first = json.loads(_cli(cli_runner, args).stdout)
    assert first["summaries"]["select"]["decontaminated"]["rows_left_out"] == len(asking) >= 4
    _write(ifeval, rows + [{"key": 2000, "instruction_id_list": ["detectable_format:title"], "kwargs": [{}]}])
    res = _cli(cli_runner, [*args[:3], tmp_path / "fresh", *args[4:]], code=2)
    assert f"--decontaminate {ifeval}:5: field 'prompt': missing prompt" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "fresh").exists()


def test_mt_bench_turns_are_found_alone_and_in_a_chat_with_ngrams(tmp_path, cli_runner):
    """A pool of chats: a row asking MT-Bench's first turn, or its second, alone is a copy (each turn is a
    question), and so is a chat that holds both turns with its own answers between them (each of its user turns
    is compared; it shared no prompt key with the set, and only --decontaminate-ngrams found it)."""
    import json
    q1 = ("Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
          "and must-see attractions.")
    q2 = "Rewrite your previous response. Start every sentence with the letter A."
    mt = _write(tmp_path / "mt_bench.jsonl", [{"question_id": 81, "category": "writing", "turns": [q1, q2]}])
    # the Hub's copy (HuggingFaceH4/mt_bench_prompts) holds the turns as a list in `prompt`
    hub = _write(tmp_path / "mt_bench_prompts.jsonl", [{"prompt": [q1, q2], "prompt_id": 81, "category": "writing",
                                                        "reference": []}])

    def chat(*turns):
        return {"messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                             for i, t in enumerate(turns)]}
    rows = [chat(q1, "Aloha! Last month I ..."), chat(q2, "A fine idea."),
            chat(q1, "Aloha! Last month I ...", q2, "A trip to Hawaii ..."),
            chat("Compose a short poem about the sea.", "Waves ..."), chat("What is 12 * 12?", "144")]
    data = _write(tmp_path / "pool.jsonl", rows)
    for eval_set in (mt, hub):
        base = ["inspect", data, "--decontaminate", eval_set, "--json"]
        (exact,) = json.loads(_cli(cli_runner, base).stdout)["decontamination"]
        assert (exact["questions"], exact["questions_in_pool"], exact["rows"], exact["ids"]) == (2, 2, 3, [0, 1, 2])
        (near,) = json.loads(_cli(cli_runner, [*base, "--decontaminate-ngrams", "8"]).stdout)["decontamination"]
        assert (near["copies"], near["ngram_rows"], near["ids"]) == (3, 0, [0, 1, 2])


def test_embedding_questions_alone_is_refused_in_one_line_that_says_to_give_them_as_they_are(tmp_path, cli_runner,
                                                                                             pool):
    """An EVAL given as embeddings (`embed EVAL --like`) cannot be made of questions alone (embed needs responses);
    the refusal told to pass --prompt-field and --response-field, which such a set cannot: it now says that
    --decontaminate takes the set as it is."""
    ifeval = _write(tmp_path / "ifeval.jsonl", [{"key": 1000, "prompt": "Write a haiku about rain.",
                                                 "instruction_id_list": [], "kwargs": []}])
    mt_bench = _write(tmp_path / "mt_bench.jsonl", [{"question_id": 81, "turns": ["Compose a poem.", "Shorter."]}])
    for path in (ifeval, mt_bench):
        res = _cli(cli_runner, ["embed", path, "--like", pool["emb"], "--out", tmp_path / "e.parquet"], code=2)
        (line,) = res.output.strip().splitlines()
        assert line.startswith(f"ERROR: {path}: unrecognised record format") and "Traceback" not in res.output
        assert "no column looks like a response" in line and "--decontaminate as they are" in line
        assert not (tmp_path / "e.parquet").exists()


def test_every_row_decontaminate_and_the_target_copies_find_is_in_the_metadata(tmp_path, cli_runner, pool):
    """--decontaminate with 25 of the pool's questions listed the first 20 ids of the rows it left out (in --json,
    `report` and the metadata), with nothing saying the list was cut; the target's copies the same. Now every id
    (up to decontamination.LISTED_IDS), and the text lines show the first ones and say where the others are."""
    import json
    evals = _write(tmp_path / "eval.jsonl", [{"instruction": r["instruction"], "output": "x"}
                                            for r in pool["rows"][:25]])
    asking = sorted(i for i, r in enumerate(pool["rows"]) if r["instruction"] in
                    {r["instruction"] for r in pool["rows"][:25]})
    base = ["select", pool["clusters"], "--fraction", "1"]
    out = tmp_path / "d.parquet"
    summary = json.loads(_cli(cli_runner, [*base, "--out", out, "--decontaminate", evals, "--json"])
                         .stdout.strip().splitlines()[-1])
    (record,) = summary["decontaminated"]["sets"]
    assert record["rows"] == len(asking) and sorted(record["ids"]) == asking
    assert _selected(out)[1].params["decontaminated"]["sets"][0]["ids"] == record["ids"]
    said = f"first 20 of {len(asking)}; all in the artifact's metadata"
    for args in ([*base, "--out", tmp_path / "d2.parquet", "--decontaminate", evals], ["report", out]):
        shown = " ".join(_cli(cli_runner, args).stdout.replace("│", " ").split())
        assert said in shown and f"ids {', '.join(map(str, record['ids'][:3]))}" in shown, shown
    out = tmp_path / "t.parquet"
    summary = json.loads(_cli(cli_runner, [*base, "--out", out, "--target", evals, "--json"])
                         .stdout.strip().splitlines()[-1])
    copies = summary["target_copies"]
    assert copies["selected"] == len(asking) and sorted(copies["ids"]) == asking
    assert _selected(out)[1].params["target_copies"]["ids"] == copies["ids"]
    for args in ([*base, "--out", tmp_path / "t2.parquet", "--target", evals], ["report", out]):
        shown = " ".join(_cli(cli_runner, args).stdout.replace("│", " ").split())
        assert said in shown, shown


def test_decontamination_ids_past_the_cap_say_how_many_are_listed():
    """Past LISTED_IDS rows the metadata keeps the first LISTED_IDS ids, and the line says so."""
    import numpy as np

    from cluster_curate.commands.select_parts import listed_ids
    from cluster_curate.decontamination import LISTED_IDS, RowQuestions, set_record
    n = LISTED_IDS + 5
    pool = RowQuestions(np.full(n, 7, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    _, record = set_record("eval.jsonl", "f", np.array([7]), pool, np.arange(n))
    assert record["rows"] == n and record["ids"] == list(range(LISTED_IDS))
    assert listed_ids(record["ids"], n) == (f"ids {', '.join(map(str, range(20)))}: first 20 of {n:,}; the first "
                                            f"{LISTED_IDS:,} in the artifact's metadata")
    assert listed_ids([4, 9], 2) == "ids 4, 9"


def test_balance_power_with_per_cluster_ratio_is_said(tmp_path, cli_runner, pool):
    """--balance-power was silently ignored with --per-cluster-ratio (one count for every cluster): said in a
    warning, not refused (scripts and `run` folders made with it still run). With --target it is read (the
    targeted quotas weigh the clusters by it)."""
    base = ["select", pool["clusters"], "--out", tmp_path / "s.parquet", "--per-cluster-ratio", "0.5"]
    res = _cli(cli_runner, [*base, "--balance-power", "0.5"])
    assert "WARNING: --balance-power is not used with --per-cluster-ratio (every cluster keeps the same number of " \
           "rows)" in res.output
    (tmp_path / "s.parquet").unlink()
    assert "balance-power" not in _cli(cli_runner, base).output


def test_a_data_select_does_not_read_must_still_be_there(tmp_path, cli_runner, pool):
    """--data that does not exist was accepted in silence where select had no need to read it (a row budget,
    n_tokens in the embeddings): refused in one line, as a --data that select reads is. A copy of the data
    elsewhere is still taken (a first version opened it without the recorded reading options, and refused it)."""
    import os
    import shutil
    copy = tmp_path / "moved" / os.path.basename(pool["data"])
    copy.parent.mkdir()
    shutil.copy(pool["data"], copy)
    for budget in (["--budget", "100"], ["--token-budget", "500"]):
        base = ["select", pool["clusters"], "--out", tmp_path / "s.parquet"]
        res = _cli(cli_runner, [*base, *budget, "--data", tmp_path / "nope.jsonl"], code=2)
        assert res.output.strip() == f"ERROR: {tmp_path / 'nope.jsonl'}: no such file or directory", res.output
        assert not (tmp_path / "s.parquet").exists()
        _cli(cli_runner, [*base, *budget, "--data", copy, "-q"])
        (tmp_path / "s.parquet").unlink()


def test_a_target_is_detected_as_decontaminate_detects_it_and_questions_alone_are_said_plainly(tmp_path, cli_runner,
                                                                                           pool):
    """A target CSV of `Question,Answer` was 'unrecognised' where --decontaminate reads its `Question`: detected the
    same way now, its answers found by name. A target of questions alone was refused with advice to pass
    --response-field, which it has none for: said plainly instead."""
    import json
    rows = [r for r in _rows(30, seed=5) if r["kind"] == "math"]
    caps = tmp_path / "caps.csv"
    caps.write_text("Question,Answer\n" + "".join(f'"{r["instruction"]}","{r["output"]}"\n' for r in rows))
    out = tmp_path / "s.parquet"
    summary = json.loads(_cli(cli_runner, ["select", pool["clusters"], "--out", out, "--budget", "20", "--target", caps,
                                           "--json"]).stdout.strip().splitlines()[-1])
    assert summary["target"]["rows"] == len(rows)
    tmeta = _selected(tmp_path / "s.target.parquet")[1]
    assert tmeta.dataset["options"] == {"prompt_field": "Question"}, tmeta.dataset  # `Answer` then found by name
    chosen = _selected(out)[0].column("id").to_pylist()
    assert sum(pool["rows"][i]["kind"] == "math" for i in chosen) == 20
    alone = _write(tmp_path / "alone.jsonl", [{"question": r["instruction"]} for r in rows])
    res = _cli(cli_runner, ["select", pool["clusters"], "--out", tmp_path / "a.parquet", "--budget", "20",
                            "--target", alone], code=2)
    (line,) = [x for x in res.output.splitlines() if x.startswith("ERROR")]
    assert line.startswith(f"ERROR: --target {alone}: the target has no responses (no response column among: "
                           "question)") and "--response-field" not in line, res.output
