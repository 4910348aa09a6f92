"""The allocation stage on plain numpy arrays (cluster_curate.sharding)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate import sharding as S
from cluster_curate.shard_balance import balance_figures
from cluster_curate.errors import CurateError


def _data(s=1000, k=5, seed=0, skew=False):
    rng = np.random.default_rng(seed)
    p = np.arange(1, k + 1, dtype=float) if skew else np.ones(k)
    clusters = rng.choice(np.arange(10, 10 + k), size=s, p=p / p.sum())  # labels need not start at 0
    lengths = rng.integers(20, 400, size=s)
    return clusters, lengths


def _check_coverage(plan, s):
    """Each selection index once across shards (repeats marked) or in the leftover list, never both."""
    placed = plan.rows[~plan.wrapped]
    assert np.unique(placed).size == placed.size, "an index is placed twice without a repeat mark"
    assert np.intersect1d(placed, plan.leftover).size == 0
    assert np.array_equal(np.sort(np.concatenate([placed, plan.leftover])), np.arange(s))
    # repeats are repeats of placed rows
    assert np.isin(plan.rows[plan.wrapped], placed).all()


# ---------------------------------------------------------------------------------------------- weights

def test_loss_weights_formula_and_paper_equivalence():
    n_c = np.array([100, 300, 600])
    s_c = np.array([50, 50, 50])
    w = S.loss_weights(n_c, s_c)
    expected = (n_c / n_c.sum()) / (s_c / s_c.sum())
    assert np.allclose(w, expected)
    assert np.allclose(w, 3 * n_c / n_c.sum())  # equal quotas: the paper's K·|C|/n
    # proportional selection => every weight 1; the weighted selection reproduces the data's mix
    assert np.allclose(S.loss_weights(n_c, n_c // 10), 1.0)
    s_c2 = np.array([10, 40, 50])
    w2 = S.loss_weights(n_c, s_c2)
    assert np.allclose(w2 * s_c2 / (w2 * s_c2).sum(), n_c / n_c.sum())
    assert S.loss_weights(np.array([5, 5]), np.array([0, 3]))[0] == 0.0
    with pytest.raises(CurateError):
        S.loss_weights(np.array([1, 2]), np.array([1, 2, 3]))


# ------------------------------------------------------------------------------------------- invariants

@pytest.mark.parametrize("allocation", ["stratified", "random"])
@pytest.mark.parametrize("balance", ["tokens", "padded"])
@pytest.mark.parametrize("remainder", ["drop", "wrap"])
@pytest.mark.parametrize("n,m", [(1, 1), (1, 8), (4, 4), (7, 3), (16, 1)])
def test_every_row_once_or_leftover(allocation, balance, remainder, n, m):
    s = 1003
    clusters, lengths = _data(s=s, k=5, skew=True)
    plan = S.plan_steps(clusters, lengths, n, m, allocation=allocation, balance=balance, remainder=remainder, seed=3)
    assert plan.rows.shape == (plan.steps, n, m)
    _check_coverage(plan, s)
    b = n * m
    if remainder == "drop":
        assert plan.steps == s // b and plan.leftover.size == s % b and not plan.wrapped.any()
    else:
        assert plan.steps == -(-s // b) and plan.leftover.size == 0
        assert plan.wrapped.sum() == plan.steps * b - s
        for t in range(plan.steps):  # a repeat never shares a step with its original
            assert np.unique(plan.rows[t]).size == b


@settings(max_examples=40, deadline=None)
@given(s=st.integers(1, 400), k=st.integers(1, 12), n=st.integers(1, 6), m=st.integers(1, 5),
       remainder=st.sampled_from(["drop", "wrap"]), balance=st.sampled_from(["tokens", "padded"]),
       seed=st.integers(0, 10))
def test_invariants_property(s, k, n, m, remainder, balance, seed):
    rng = np.random.default_rng(seed)
    clusters = rng.integers(0, k, size=s)
    lengths = rng.integers(1, 1000, size=s)
    if n * m > s:
        with pytest.raises(CurateError, match="selection has only"):
            S.plan_steps(clusters, lengths, n, m, remainder=remainder, balance=balance, seed=seed)
        return
    plan = S.plan_steps(clusters, lengths, n, m, remainder=remainder, balance=balance, seed=seed)
    _check_coverage(plan, s)
    for t in range(plan.steps):  # a step never holds the same row twice
        assert np.unique(plan.rows[t]).size == n * m


def test_same_seed_same_plan_other_seed_differs():
    clusters, lengths = _data()
    a = S.plan_steps(clusters, lengths, 4, 4, seed=1)
    b = S.plan_steps(clusters, lengths, 4, 4, seed=1)
    c = S.plan_steps(clusters, lengths, 4, 4, seed=2)
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.leftover, b.leftover)
    assert not np.array_equal(a.rows, c.rows)


def test_too_big_a_step_is_refused():
    clusters, lengths = _data(s=30)
    with pytest.raises(CurateError, match="4 × 8 = 32 rows but the selection has only 30"):
        S.plan_steps(clusters, lengths, 4, 8)
    with pytest.raises(CurateError, match="at least 1"):
        S.plan_steps(clusters, lengths, 0, 1)


# ------------------------------------------------------------------------------------------ stratification

@pytest.mark.parametrize("remainder", ["drop", "wrap"])
@pytest.mark.parametrize("window", [0, 64])
def test_each_step_holds_each_clusters_share(remainder, window):
    """Every step holds floor or ceil of each cluster's share of a step (k ≤ N×M or not)."""
    for k, (n, m) in ((4, (4, 4)), (7, (3, 2)), (40, (2, 2))):
        clusters, lengths = _data(s=2003, k=k, skew=True)
        plan = S.plan_steps(clusters, lengths, n, m, length_window=window, remainder=remainder, seed=0)
        kept = plan.rows.reshape(plan.steps, -1)
        labels = np.unique(clusters)
        per_step = np.stack([(clusters[kept] == c).sum(1) for c in labels], 1)  # [T, k]
        share = per_step.sum(0) / plan.steps
        assert np.all(per_step >= np.floor(share)) and np.all(per_step <= np.ceil(share)), (k, n, m)


@settings(max_examples=30, deadline=None)
@given(s=st.integers(8, 600), k=st.integers(1, 60), n=st.integers(1, 8), remainder=st.sampled_from(["drop", "wrap"]),
       balance=st.sampled_from(["tokens", "padded"]), m=st.sampled_from([1, 2, 4]), seed=st.integers(0, 5))
def test_pairing_by_length_keeps_each_clusters_share(s, k, n, remainder, balance, m, seed):
    """Micro-batch 1 and --balance padded re-deal rows by length (pair_by_length): every step still holds floor
    or ceil of each cluster's share, and every row is placed once."""
    rng = np.random.default_rng(seed)
    clusters = rng.integers(0, k, size=s)
    lengths = np.round(rng.lognormal(4, 1, size=s) * (1 + clusters % 4))
    if n * m > s:
        return
    plan = S.plan_steps(clusters, lengths, n, m, remainder=remainder, balance=balance, seed=seed)
    _check_coverage(plan, s)
    kept = plan.rows.reshape(plan.steps, -1)
    per_step = np.stack([(clusters[kept] == c).sum(1) for c in np.unique(clusters)], 1)
    share = per_step.sum(0) / plan.steps
    assert np.all(per_step >= np.floor(share)) and np.all(per_step <= np.ceil(share))


def test_micro_batch_1_pairs_rows_of_similar_length_across_clusters():
    """With one row per rank, a step's cost is its longest row: clusters whose lengths differ (code beside
    short answers) must not share a step at different lengths. 40 clusters, each its own length scale."""
    from cluster_curate.shard_balance import length_packed_imbalance
    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 40, 3000)
    lengths = np.round(rng.lognormal(4, 0.5, 3000) * (1 + clusters % 5))
    figures = balance_figures(S.plan_steps(clusters, lengths, 8, 1, seed=0), lengths, clusters)
    unpaired = balance_figures(S.plan_steps(clusters, lengths, 8, 1, pair_lengths=False, seed=0), lengths, clusters)
    assert unpaired["token_imbalance"]["mean"] > 1.4
    # packing by length alone sorts all 3,000 rows; the plan sorts inside windows of 80 steps (640 rows)
    assert figures["token_imbalance"]["mean"] < length_packed_imbalance(lengths, 8, 1) + 0.06
    assert figures["padding_efficiency"] > 0.9 > unpaired["padding_efficiency"] + 0.2
    assert figures["cluster_spread"]["min"] == 1.0  # every step still holds 8 different clusters


@pytest.mark.parametrize("n,m,balance", [(8, 1, "tokens"), (8, 2, "tokens"), (4, 4, "padded")])
def test_steps_trade_their_longest_rows_in_a_small_selection(monkeypatch, n, m, balance):
    """408 rows of 37 clusters (a cluster's ~11 rows must sit in distinct steps of ~50): the re-deal alone
    leaves steps whose longest row sets their cost; trading it with a step that costs more anyway lowers the
    imbalance, and every step keeps its cluster counts."""
    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 37, 408)
    lengths = np.round(rng.lognormal(4, 0.4, 408) * (1 + clusters % 3))
    traded = S.plan_steps(clusters, lengths, n, m, balance=balance, seed=0)
    monkeypatch.setattr(S, "TRADE_ABOVE_LEAST", np.inf)  # no window trades
    plain = S.plan_steps(clusters, lengths, n, m, balance=balance, seed=0)
    key = "token_imbalance" if balance == "tokens" else "padded_imbalance"
    before, after = (balance_figures(p, lengths, clusters)[key]["mean"] for p in (plain, traded))
    assert after < before - 0.005, (before, after)
    counts = [np.sort([np.bincount(clusters[p.rows[t]].ravel(), minlength=37) for t in range(p.steps)], 0)
              for p in (plain, traded)]
    assert np.array_equal(*counts)  # the same multiset of per-step cluster counts


def test_a_trade_moves_a_longest_row_to_a_step_that_costs_more_anyway():
    length = np.array([10.0, 100, 90, 95, 20, 30])
    inv = np.array([0, 1, 2, 3, 4, 5])
    sparse = np.ones(6, dtype=bool)
    # step 0 costs 100 (row 1), step 1 costs 95: row 1 for row 2 makes them 90 + 100 < 100 + 95
    grid = S._trade_longest_rows(np.array([[0, 1], [2, 3]]), length, inv, sparse, 0, 8)
    assert sorted(map(sorted, grid.tolist())) == [[0, 2], [1, 3]]
    # the same trade is refused when step 1 already holds row 1's cluster (and the clusters are small)
    inv = np.array([0, 1, 2, 1, 4, 5])
    grid = S._trade_longest_rows(np.array([[0, 1], [2, 3]]), length, inv, sparse, 0, 8)
    assert grid.tolist() == [[0, 1], [2, 3]]


def test_input_mix_says_what_pairing_by_length_costs_a_mixture():
    """Two inputs told apart by length (short answers, long code): pairing rows by length mixes fewer steps than
    the plan without it, and balance_figures says so beside what a random allocation gives."""
    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 40, 3000)
    source = (clusters % 2).astype(np.int64)  # even clusters: input 0 (short rows); odd: input 1 (long rows)
    lengths = np.round(rng.lognormal(4, 0.3, 3000) * (1 + 3 * source))
    paired, unpaired = (balance_figures(S.plan_steps(clusters, lengths, 8, 1, pair_lengths=p, seed=0), lengths,
                                        clusters, source)["input_mix"] for p in (True, False))
    assert paired["inputs"] == 2 and paired["random"] == pytest.approx(1 - 2 * 0.5 ** 8, abs=0.01)
    assert paired["steps_mixing"] < 0.5 < 0.9 < unpaired["steps_mixing"]
    assert "input_mix" not in balance_figures(S.plan_steps(clusters, lengths, 8, 1), lengths, clusters)


def test_first_fit_deals_one_row_of_a_cluster_per_step_and_trades_when_stuck():
    inv = np.array([0, 1, 1])  # rows 0 (cluster 0), 1 and 2 (cluster 1)
    # step 0 has room for 1, step 1 for 2: row 2 finds only step 1, which holds cluster 1, so it trades with row 0
    dealt = S._first_fit(np.array([0, 1, 2]), np.array([0, 1]), np.array([1, 2]), inv)
    assert dealt.tolist() == [1, 1, 0]
    # one step with room for two rows of one cluster: no trade exists
    assert S._first_fit(np.array([1, 2]), np.array([0]), np.array([2]), inv) is None


def test_spaced_levels_are_spaced_and_stay_where_they_can():
    q = np.array([0.1, 0.1, 0.1, 0.5, 0.9, 0.2, 0.6])
    group = np.array([0, 0, 0, 0, 0, 1, 1])
    level = S._spaced_levels(q, group, 0.1)
    assert np.all(np.diff(level[:5]) >= 0.1 - 1e-12) and np.all(np.diff(level[5:]) >= 0.1 - 1e-12)
    assert np.allclose(level[:3], [0.0, 0.1, 0.2])  # three at 0.1 spread around it
    assert np.allclose(level[3:], q[3:])              # already spaced: unchanged


def test_equal_quotas_give_exactly_equal_steps():
    clusters = np.repeat(np.arange(4), 100)
    plan = S.plan_steps(clusters, np.random.default_rng(0).integers(1, 300, 400), 4, 2, seed=0)
    for t in range(plan.steps):
        assert np.array_equal(np.bincount(clusters[plan.rows[t]].ravel(), minlength=4), [2, 2, 2, 2])


def test_clusters_rotate_when_more_clusters_than_step_rows():
    """k > N×M and clusters no bigger than the number of steps: every step holds N×M distinct clusters."""
    clusters = np.repeat(np.arange(40), 25)  # 1000 rows, 40 clusters, B = 8 -> 125 steps
    plan = S.plan_steps(clusters, None, 4, 2, seed=0)
    figures = balance_figures(plan, None, clusters)
    assert figures["cluster_spread"]["min"] == 1.0


def test_no_cluster_bunched_along_the_stream():
    clusters, lengths = _data(s=4000, k=6, skew=True)
    plan = S.plan_steps(clusters, lengths, 4, 4, length_window=0, seed=0)
    stream = clusters[plan.rows.reshape(plan.steps, -1)].ravel()
    quarters = np.array_split(stream, 4)
    for c in np.unique(clusters):
        per_quarter = np.array([(q == c).sum() for q in quarters])
        ideal = np.array([q.size for q in quarters]) * (clusters == c).mean()
        assert np.all(np.abs(per_quarter - ideal) <= 4), (c, per_quarter, ideal)  # of ~200 a quarter


def test_ranks_share_the_mix_and_token_load():
    clusters, lengths = _data(s=4000, k=8)
    plan = S.plan_steps(clusters, lengths, 4, 4, seed=0)
    ours = balance_figures(plan, lengths, clusters)
    rand = balance_figures(S.random_allocation(clusters, 4, 4, seed=0), lengths, clusters)
    assert ours["token_imbalance"]["mean"] <= 1.03 < rand["token_imbalance"]["mean"]
    assert ours["cluster_spread"]["mean"] >= 0.99
    assert ours["rank_mix_tv"]["max"] <= 0.05
    # a step's ranks see different clusters: no rank holds two rows of a cluster while another rank has none
    step_cl = clusters[plan.rows]
    spread_ok = 0
    for t in range(plan.steps):
        per_rank = [set(step_cl[t, r]) for r in range(4)]
        spread_ok += len(set.union(*per_rank)) == len(set(step_cl[t].ravel()))
    assert spread_ok == plan.steps


@pytest.mark.parametrize("k", [4, 60])
def test_each_ranks_cluster_mix_follows_the_selection_with_many_clusters_too(k):
    """With many clusters (k = 60 > N × M = 16: `cluster --k auto`'s case) one random rank label per step gave a
    rank a cluster mix no better than a random deal (rank_mix_tv 0.16-0.20 against 0.16-0.18 on 930 GSM8K rows).
    assign_ranks gives each step's micro-batches to the ranks holding the fewest rows of their clusters: each
    cluster's rows spread over the ranks, well below the random deal the manifest gives beside it, with every
    token figure the same as with random labels (the same micro-batches)."""
    clusters, lengths = _data(s=960, k=k)
    plan = S.plan_steps(clusters, lengths, 4, 4, seed=0)
    figures = balance_figures(plan, lengths, clusters)
    tv = figures["rank_mix_tv"]
    rows = plan.rows.reshape(-1)[np.random.default_rng(0).permutation(plan.rows.size)].reshape(plan.rows.shape)
    dealt = S.ShardPlan(rows, plan.wrapped, plan.leftover, "random", "none", "drop")
    assert tv["random"] == pytest.approx(balance_figures(dealt, lengths, clusters)["rank_mix_tv"]["max"])
    assert tv["max"] < 0.5 * tv["random"], tv
    per_rank = np.stack([np.bincount(clusters[plan.rows[:, r].reshape(-1)], minlength=k) for r in range(4)])
    assert (per_rank.max(0) - per_rank.min(0)).max() <= 4, per_rank  # each cluster's rows within a few per rank
    # the labels alone moved: each step holds the same micro-batches as random labels give
    labels = S.assign_ranks
    try:
        S.assign_ranks = lambda groups, k, rng: np.argsort(rng.random(groups.shape[:2]), axis=1)
        random_labels = S.plan_steps(clusters, lengths, 4, 4, seed=0)
    finally:
        S.assign_ranks = labels
    assert [sorted(map(sorted, step.tolist())) for step in plan.rows] == \
        [sorted(map(sorted, step.tolist())) for step in random_labels.rows]
    assert balance_figures(random_labels, lengths, clusters)["token_imbalance"] == figures["token_imbalance"]


def test_past_max_assigned_ranks_the_labels_are_random_and_every_row_still_dealt(monkeypatch):
    """A minimum-cost assignment per step is O(N³) (1,024 ranks × 1 on 200k rows took 23 s and 1.7 GB, its
    tie-breaking noise drawn for every step at once): past MAX_ASSIGNED_RANKS the labels are random per step."""
    monkeypatch.setattr(S, "MAX_ASSIGNED_RANKS", 2)
    clusters, lengths = _data(s=480, k=60)
    plan = S.plan_steps(clusters, lengths, 4, 2, seed=0)
    _check_coverage(plan, 480)
    monkeypatch.undo()
    assert [sorted(map(sorted, step.tolist())) for step in plan.rows] == \
        [sorted(map(sorted, step.tolist())) for step in S.plan_steps(clusters, lengths, 4, 2, seed=0).rows]


def test_padded_groups_lengths():
    clusters, lengths = _data(s=4000, k=4)
    padded = balance_figures(S.plan_steps(clusters, lengths, 4, 4, balance="padded", seed=0), lengths, clusters)
    plain = balance_figures(S.plan_steps(clusters, lengths, 4, 4, length_window=0, seed=0), lengths, clusters)
    assert padded["padding_efficiency"] > plain["padding_efficiency"] + 0.1
    assert padded["padded_imbalance"]["mean"] < plain["padded_imbalance"]["mean"]
    assert padded["cluster_spread"]["mean"] >= 0.99


def test_one_shard_and_more_shards_than_clusters():
    clusters, lengths = _data(s=500, k=3)
    one = S.plan_steps(clusters, lengths, 1, 4, seed=0)
    assert one.rows.shape == (125, 1, 4)
    _check_coverage(one, 500)
    assert balance_figures(one, lengths, clusters)["token_imbalance"]["max"] == 1.0
    many = S.plan_steps(clusters, lengths, 10, 2, seed=0)  # N = 10 > k = 3
    _check_coverage(many, 500)
    assert balance_figures(many, lengths, clusters)["cluster_spread"]["mean"] == 1.0


# ------------------------------------------------------------------------------------------ paper

def test_paper_allocation_rank_r_gets_cluster_r():
    clusters = np.concatenate([np.full(40, 7), np.full(37, 3), np.full(45, 9)])
    plan = S.plan_steps(clusters, None, 3, 4, allocation="paper", seed=0)
    labels = [3, 7, 9]
    for r in range(3):
        assert set(clusters[plan.shard_rows(r)]) == {labels[r]}
    assert plan.rows_per_shard == 36 and plan.leftover.size == 122 - 3 * 36
    _check_coverage(plan, 122)
    wrap = S.plan_steps(clusters, None, 3, 4, allocation="paper", remainder="wrap", seed=0)
    assert wrap.rows_per_shard == 48
    _check_coverage(wrap, 122)
    assert wrap.wrapped.sum() == 3 * 48 - 122


def test_paper_allocation_needs_k_equal_n():
    clusters = np.repeat(np.arange(3), 10)
    with pytest.raises(CurateError, match="3 clusters and --num-shards is 4"):
        S.plan_steps(clusters, None, 4, 1, allocation="paper")
    with pytest.raises(CurateError, match="fewer than one micro-batch"):
        S.plan_steps(np.array([0] * 20 + [1] * 2), None, 2, 4, allocation="paper")


def test_bad_options():
    clusters, lengths = _data(s=100)
    for kw in ({"allocation": "x"}, {"balance": "x"}, {"remainder": "x"}, {"length_window": -1}):
        with pytest.raises(CurateError):
            S.plan_steps(clusters, lengths, 2, 2, **kw)
    with pytest.raises(CurateError, match="token counts"):
        S.plan_steps(clusters, lengths[:5], 2, 2)


def test_length_packed_imbalance_is_what_the_micro_batch_allows():
    from cluster_curate.shard_balance import length_packed_imbalance
    assert length_packed_imbalance(np.full(64, 100.0), 8, 2) == pytest.approx(1.0)
    # 4 rows, 2 ranks, M = 2: sorted 4, 3, 2, 1 dealt in snake order -> ranks (4 + 1, 3 + 2): 5 vs 5
    assert length_packed_imbalance(np.array([1.0, 4.0, 2.0, 3.0]), 2, 2) == pytest.approx(1.0)
    # M = 1: the two rows of a step are the two ranks: 4 vs 3 and 2 vs 1
    assert length_packed_imbalance(np.array([1.0, 4.0, 2.0, 3.0]), 2, 1) == pytest.approx((4 / 3.5 + 2 / 1.5) / 2)
    assert length_packed_imbalance(np.array([5.0]), 2, 1) == 1.0  # not one whole step


def test_balance_warning_names_the_micro_batch_when_the_plan_is_far_from_what_it_allows():
    """Issue 20 #10: 8 shards at micro-batch 1 on heavy-tailed lengths (the README's old Makefile example) warn,
    naming --micro-batch-size; micro-batch 4 balances to within 5% of length-only packing and says nothing."""
    from cluster_curate.shard_balance import balance_warning
    from cluster_curate.sharding import plan_steps
    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 6, 900)  # every step holds every cluster: lengths cannot be paired across them
    lengths = np.round(rng.lognormal(5, 0.6, 900) * (1 + clusters % 3))
    plan = plan_steps(clusters, lengths, 8, 1)
    w = balance_warning(balance_figures(plan, lengths, clusters), lengths)
    assert w is not None and w.startswith("token imbalance mean 1.") and "with 8 shards and micro-batch 1" in w
    assert "--micro-batch-size if your trainer's per-device batch is larger (e.g. 4" in w
    plan = plan_steps(clusters, lengths, 8, 4)
    figures = balance_figures(plan, lengths, clusters)
    assert figures["token_imbalance"]["mean"] < 1.05
    assert balance_warning(figures, lengths) is None
    assert balance_warning(figures, None) is None
    padded = plan_steps(clusters, lengths, 8, 4, balance="padded")
    assert balance_warning(balance_figures(padded, lengths, clusters), lengths, balance="padded") is None
