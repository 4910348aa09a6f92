"""`select`: quotas, within-cluster orders, dedup (selection.py) and the command over artifacts."""

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate import clustering as C
from cluster_curate import selection as S
from cluster_curate import within_orders as O
from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.io import artifacts as A
from cluster_curate.io import writer as W
from embeddings_factory import mixture, write_embeddings

sizes_st = st.lists(st.integers(0, 60), min_size=1, max_size=25)


# ------------------------------------------------------------------------------------------ quotas

@settings(max_examples=150, deadline=None)
@given(sizes=sizes_st, data=st.data(), p=st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0]))
def test_water_fill_quotas_properties(sizes, data, p):
    sizes = np.array(sizes)
    total = int(sizes.sum())
    budget = data.draw(st.integers(0, total + 10))
    q = S.water_fill_quotas(sizes, budget, p)
    assert q.sum() == min(budget, total)                  # the budget is met exactly (or all rows)
    assert (q >= 0).all() and (q <= sizes).all()          # no cluster gives more than it has
    unsat = q < sizes
    if p == 0 and unsat.any():
        assert q[unsat].max() - q[unsat].min() <= 1       # balanced: open clusters differ by at most one
        assert (sizes[~unsat] <= q[unsat].max() + 1).all()  # taken whole only if small (level, or level + 1)
    if p == 1 and budget < total and unsat.all() and (sizes > 0).all():
        ideal = sizes * budget / total
        assert np.abs(q - ideal).max() < 1                # proportional, rounded by largest remainder
    assert np.array_equal(q, S.water_fill_quotas(sizes, budget, p))


def test_water_fill_examples():
    assert S.water_fill_quotas([1, 5, 10, 100, 3], 30).tolist() == [1, 5, 10, 11, 3]
    assert S.water_fill_quotas([10, 10, 10], 7).tolist() == [3, 2, 2]          # +1 to the lowest number on ties
    assert S.water_fill_quotas([10, 20, 10], 7).tolist() == [2, 3, 2]          # ... after the largest
    assert S.water_fill_quotas([100, 300], 40, 1.0).tolist() == [10, 30]
    assert S.water_fill_quotas([4, 4], 100).tolist() == [4, 4]
    with pytest.raises(CurateError, match="balance-power"):
        S.water_fill_quotas([3], 1, 2.0)


def test_ratio_quotas_and_budget_args():
    assert S.ratio_quotas(np.array([7, 20, 0, 9]), 0.5).tolist() == [3, 3, 0, 3]
    assert S.ratio_quotas(np.array([100, 200]), 0.29).tolist() == [29, 29]     # no 28.999... rounding loss
    assert S.fraction_budget(10, 0.31) == 3 and S.fraction_budget(3, 0.1) == 1 and S.fraction_budget(7, 1.0) == 7
    for kwargs, msg in [({"fraction": 0.0}, r"--fraction must be in \(0, 1\]"),
                        ({"fraction": 1.5}, r"--fraction must be in \(0, 1\]"),
                        ({"budget": 0}, "--budget must be a positive"),
                        ({"budget": -3}, "--budget must be a positive"),
                        ({"per_cluster_ratio": 0.0}, r"--per-cluster-ratio must be in \(0, 1\]"),
                        ({"per_cluster_ratio": 1.01}, r"--per-cluster-ratio must be in \(0, 1\]"),
                        ({}, "exactly one"), ({"fraction": 0.5, "budget": 3}, "exactly one")]:
        with pytest.raises(CurateError, match=msg):
            S.check_budget_args(**kwargs)


# ------------------------------------------------------------------------------------------ select_rows

@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 400), k=st.integers(1, 12), seed=st.integers(0, 2 ** 32), data=st.data(),
       within=st.sampled_from(["random", "far", "near", "hard"]), p=st.sampled_from([0.0, 0.5, 1.0]))
def test_select_rows_properties(n, k, seed, data, within, p):
    rng = np.random.default_rng(seed)
    clusters = rng.integers(0, k, n)
    ids = np.sort(rng.choice(10 * n, n, replace=False))
    sims = rng.random(n).astype(np.float32)
    loss = rng.random(n).astype(np.float32)
    budget = data.draw(st.integers(1, n + 5))
    kw = dict(k=k, ids=ids, similarity=sims, loss=loss, budget=budget, within=within, balance_power=p, seed=seed)
    sel = S.select_rows(clusters, **kw)
    assert len(sel.rows) == min(budget, n)
    assert len(np.unique(ids[sel.rows])) == len(sel.rows)                       # ids unique
    counts = np.bincount(sel.cluster, minlength=k)
    assert np.array_equal(counts, sel.quotas) and (counts <= sel.sizes).all()  # quotas honoured, never > size
    assert np.array_equal(sel.cluster, clusters[sel.rows])
    for c in range(k):
        assert sorted(sel.rank_in_cluster[sel.cluster == c].tolist()) == list(range(counts[c]))
    again = S.select_rows(clusters, **kw)                                      # same seed => same output
    assert np.array_equal(again.rows, sel.rows) and np.array_equal(again.rank_in_cluster, sel.rank_in_cluster)
    # the order is what it says: within each cluster, the selected rows are the best by the order's key
    key = {"random": None, "far": -sims, "near": sims, "hard": loss}[within]
    if key is not None:
        for c in range(k):
            picked = np.zeros(n, bool)
            picked[sel.rows[sel.cluster == c]] = True
            members = clusters == c
            if picked.any() and (members & ~picked).any():
                assert key[picked].min() >= key[members & ~picked].max()


def test_random_order_depends_on_ids_not_positions():
    rng = np.random.default_rng(0)
    n = 500
    ids = np.arange(n) * 3
    clusters = rng.integers(0, 5, n)
    a = S.select_rows(clusters, ids=ids, fraction=0.3, seed=11)
    perm = rng.permutation(n)
    b = S.select_rows(clusters[perm], ids=ids[perm], fraction=0.3, seed=11)
    assert set(ids[a.rows]) == set(ids[perm][b.rows])
    c = S.select_rows(clusters, ids=ids, fraction=0.3, seed=12)
    assert set(ids[a.rows]) != set(ids[c.rows])


def test_answers_order_takes_each_answer_in_proportion_inside_its_kind():
    rng = np.random.default_rng(1)
    n = 900
    clusters = np.repeat(np.arange(3), 300)
    # a skill with 10 answers (3 rows in 4) mixed with one whose answers are all different (1 in 4)
    rare = np.arange(n) % 4 == 0
    answers = np.where(rare, 100 + np.arange(n), rng.integers(0, 10, n))
    ids = np.arange(n) * 3
    for budget in (30, 90, 450):
        rare_share = []
        for seed in range(20):
            sel = S.select_rows(clusters, ids=ids, budget=budget, seed=seed, within="answers", answers=answers)
            plain = S.select_rows(clusters, ids=ids, budget=budget, seed=seed)
            assert np.array_equal(sel.quotas, plain.quotas)  # the same quotas: another order inside each cluster
            taken = np.zeros(n, bool)
            taken[sel.rows] = True
            for c in range(3):
                mine = clusters == c
                repeated = [a for a in np.unique(answers[mine & ~rare])]
                got = np.array([(taken & mine & (answers == a)).sum() for a in repeated])
                share = sel.quotas[c] * np.array([np.mean(answers[mine] == a) for a in repeated])
                assert (np.abs(got - share) < 2).all()  # its share of the quota, to a row (the rest move it)
                if got.max() >= 2:  # a second row of an answer only once every repeated answer has one
                    assert got.min() >= 1
            rare_share.append((taken & rare).sum() / budget)
        # the answers that occur once fill what the repeated ones leave, in the random order: nearly none of a
        # quota of 10 (10 repeated answers), their share of the cluster at a quota of 150
        assert np.mean(rare_share) < 0.1 if budget == 30 else abs(np.mean(rare_share) - 0.25) < 0.05 \
            if budget == 450 else True
    # kinds over clusters: the share is counted in the kind (its group when there are no kinds)
    groups = np.array([0, 0, 1])
    sel = S.select_rows(clusters, ids=ids, budget=90, seed=3, within="answers", answers=answers, groups=groups)
    order = O.order_within_cluster(clusters, "answers", ids=ids, answers=answers, kind_of_row=groups[clusters],
                                   seed=3)
    rank = np.empty(n, int)
    rank[order] = np.arange(n) - np.repeat([0, 300, 600], 300)
    assert set(sel.rows) == set(np.flatnonzero(rank < sel.quotas[clusters]))
    # rows whose answers are all different (most real data): exactly the random order
    for budget in (10, 93):
        unique = S.select_rows(clusters, ids=ids, budget=budget, seed=5, within="answers", answers=np.arange(n))
        assert np.array_equal(unique.rows, S.select_rows(clusters, ids=ids, budget=budget, seed=5).rows)
    with pytest.raises(CurateError, match="needs each row's answer"):
        S.select_rows(clusters, budget=2, within="answers")


@settings(max_examples=40, deadline=None)
@given(n=st.integers(20, 300), n_answers=st.integers(1, 40), long_share=st.sampled_from([0.0, 0.3, 1.0]),
       seed=st.integers(0, 2**31 - 1))
def test_auto_order_is_the_answers_order_over_short_responses(n, n_answers, long_share, seed):
    """`--within auto`: short responses keep their answers (the same selection as their answer keys), a
    longer response is an answer of its own (even where two are equal), and with no short answer repeated the
    order is the random one."""
    rng = np.random.default_rng(seed)
    clusters = rng.integers(0, 4, n)
    raw = rng.integers(0, n_answers, n) * 7919 - 10**12  # answer keys: any int64, equal for equal answers
    long = rng.random(n) < long_share
    words = np.where(long, O.SHORT_ANSWER_WORDS + 1 + rng.integers(0, 50, n),
                     rng.integers(1, O.SHORT_ANSWER_WORDS + 1, n))
    order, keys, n_short = O.auto_order(raw, words)
    assert n_short == (words <= O.SHORT_ANSWER_WORDS).sum()
    short = ~long
    if len(np.unique(raw[short])) == short.sum():
        assert order == "random" and keys is None
        return
    assert order == "answers"
    same = keys[:, None] == keys[None, :]
    assert np.array_equal(same[np.ix_(short, short)], (raw[:, None] == raw[None, :])[np.ix_(short, short)])
    assert same.sum() == n + (same[np.ix_(short, short)].sum() - short.sum())  # a long row equals only itself
    singles = np.where(long, 10**15 + np.arange(n), raw)
    for budget in (n // 5, n // 2):
        got = S.select_rows(clusters, k=4, budget=budget, seed=seed % 7, within="answers", answers=keys).rows
        assert np.array_equal(got, S.select_rows(clusters, k=4, budget=budget, seed=seed % 7, within="answers",
                                                 answers=singles).rows)


def test_auto_order_on_one_word_answers_worked_solutions_and_nothing_short():
    one_word = np.arange(30) % 5  # five answers, six rows each
    order, keys, _ = O.auto_order(one_word, np.ones(30, int))
    assert order == "answers" and np.array_equal(keys, one_word)
    # worked solutions that repeat whole: each its own answer, so nothing repeats and the order is random
    assert O.auto_order(one_word, np.full(30, O.SHORT_ANSWER_WORDS + 1)) == ("random", None, 0)
    assert O.auto_order(np.arange(30), np.ones(30, int)) == ("random", None, 30)  # every answer different
    assert O.auto_order(np.zeros(0, np.int64), np.zeros(0, int)) == ("random", None, 0)


def test_hard_puts_nan_loss_last_and_ranks_by_loss():
    clusters = np.zeros(5, int)
    loss = np.array([0.5, np.nan, 2.0, 1.0, np.nan], dtype=np.float32)
    sel = S.select_rows(clusters, loss=loss, budget=4, within="hard")
    assert dict(zip(sel.rows.tolist(), sel.rank_in_cluster.tolist())) == {2: 0, 3: 1, 0: 2, 1: 3}
    with pytest.raises(CurateError, match="needs a `loss` column"):
        S.select_rows(clusters, budget=2, within="hard")


def test_per_cluster_ratio_is_the_papers_rule():
    clusters = np.repeat(np.arange(3), [10, 40, 50])
    sel = S.select_rows(clusters, per_cluster_ratio=0.5, within="random")
    assert sel.quotas.tolist() == [5, 5, 5] and len(sel.rows) == 15
    with pytest.raises(CurateError, match="keeps 0 rows"):
        S.select_rows(clusters, per_cluster_ratio=0.05)


def test_budget_larger_than_data_selects_all_and_says_so():
    clusters = np.array([0, 0, 1])
    sel = S.select_rows(clusters, budget=10)
    assert len(sel.rows) == 3 and "larger than the 3 rows" in sel.notes[0]


@pytest.mark.parametrize("dedup, said", [
    (0.99, "--dedup left only 40 rows, so the budget of 100 became 40"),
    (None, "the data has only 200 rows, so the budget of 300 became 200"),
])
def test_a_source_bound_names_the_budget_the_user_gave_when_the_rows_are_fewer(dedup, said):
    """--dedup leaving fewer rows than the budget made a source bound's error name a budget the user never gave
    ('less than the budget of 160' for --budget 800): it says where that budget came from."""
    rng = np.random.default_rng(0)
    distinct = rng.normal(size=(40, 8)).astype(np.float32)
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    which = np.repeat(np.arange(40), 5)  # each row 5 times: --dedup 0.99 keeps one of each
    budget = 100 if dedup else 300
    with pytest.raises(CurateError) as e:
        S.select_rows(which % 2, budget=budget, features=distinct[which], dedup=dedup,
                      sources=(which >= 20).astype(int), source_max_share=np.array([0.1, np.nan]),
                      source_names=["code", "math"])
    assert "caps allow at most" in str(e.value) and said in str(e.value), str(e.value)


def test_k_center_greedy():
    pts = np.array([[1, 0], [0.99, 0.141], [0, 1], [-1, 0], [0.7071, 0.7071]], dtype=np.float32)
    pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    picks = O.k_center_greedy(pts, 3, first=0)
    assert picks.tolist() == [0, 3, 2]          # start, then the opposite point, then the one between
    assert O.k_center_greedy(pts, 10).tolist()[:5] == [0, 3, 2, 4, 1]


def test_diverse_selection_spreads_inside_a_cluster():
    rng = np.random.default_rng(0)
    # one cluster: 95 rows in a tight blob and 5 scattered outliers; diverse takes the outliers early
    blob = np.array([1, 0, 0], np.float32) + 0.01 * rng.standard_normal((95, 3)).astype(np.float32)
    far = rng.standard_normal((5, 3)).astype(np.float32)
    x = np.vstack([blob, far]).astype(np.float32)
    C.normalise_features(x)
    sims = x @ np.array([1, 0, 0], np.float32)
    sel = S.select_rows(np.zeros(100, int), similarity=sims, features=x, budget=6, within="diverse")
    first = sel.rows[np.argsort(sel.rank_in_cluster)]
    assert first[0] == int(np.argmax(sims))      # starts from the most typical row
    assert set(first[1:].tolist()) == set(range(95, 100))
    with pytest.raises(CurateError, match="needs the feature vectors"):
        S.select_rows(np.zeros(3, int), similarity=np.ones(3), budget=1, within="diverse")


def test_dedup_is_greedy_against_kept_rows():
    # a ~ b and b ~ c above the threshold, a and c below: walking a, b, c keeps a and c
    a, b, c = (np.array([np.cos(t), np.sin(t)], np.float32) for t in (0.0, 0.3, 0.6))
    d = np.array([0, 1], np.float32)
    x = np.vstack([a, b, c, d, a]).astype(np.float32)
    thr = float(np.cos(0.4))
    order = np.arange(5)
    keep = O.dedup_within_cluster(x, order, np.array([5]), thr, block_rows=2)
    assert keep.tolist() == [True, False, True, True, False]
    # select: dedup happens before quotas, and the budget is still met from the distinct rows
    sims = x @ a
    sel = S.select_rows(np.zeros(5, int), similarity=sims, features=x, budget=3, within="near", dedup=thr)
    assert sel.dedup_dropped == 2 and sorted(sel.rows.tolist()) == [0, 2, 3]
    with pytest.raises(CurateError, match="--dedup needs the feature vectors"):
        S.select_rows(np.zeros(5, int), budget=3, dedup=0.9)


def test_dedup_1_drops_no_copy_whatever_float32_rounding_makes_of_it():
    """No cosine exceeds 1, but identical unit rows' float32 products come out at 1.0000001 for some and 0.9999999
    for others: `--dedup 1` dropped a seed-dependent part of 30 planted copies ('9 (cosine > 1.0)', then 8). It
    drops none; a threshold under 1 drops every copy."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 64)).astype(np.float32)
    C.normalise_features(x)
    x = np.vstack([x, x[:30]])  # 30 exact copies
    above_one = int(((x[60:] * x[:30]).sum(axis=1, dtype=np.float32) > np.float32(1)).sum())
    assert 0 < above_one < 30  # the rounding the test is about, on these rows
    order, sizes = np.arange(90), np.array([90])
    assert O.dedup_within_cluster(x, order, sizes, 1.0).all()
    assert O.dedup_within_cluster(x, order, sizes, 0.999).tolist() == [True] * 60 + [False] * 30


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10 ** 6), thr=st.sampled_from([0.5, 0.8, 0.95]), block=st.integers(1, 9))
def test_dedup_matches_a_plain_loop(seed, thr, block):
    rng = np.random.default_rng(seed)
    n = 40
    x = rng.standard_normal((n, 3)).astype(np.float32)
    C.normalise_features(x)
    clusters = rng.integers(0, 3, n)
    order = O.order_within_cluster(clusters, "random", seed=seed, k=3)
    sizes = np.bincount(clusters, minlength=3)
    keep = O.dedup_within_cluster(x, order, sizes, thr, block_rows=block)
    expected = np.ones(n, bool)
    for c in range(3):
        kept = []
        for r in order[clusters[order] == c]:
            if any(float(x[r] @ x[j]) > np.float32(thr) for j in kept):
                expected[r] = False
            else:
                kept.append(r)
    assert np.array_equal(keep, expected)


def test_summary_rows_are_condensed_for_many_clusters():
    clusters = np.arange(100) % 50
    sel = S.select_rows(clusters, budget=50)
    rows = S.selection_summary_rows(sel, limit=10)
    assert len(rows) == 11 and rows[5]["cluster"] == "..."
    assert len(S.selection_summary_rows(sel, limit=None)) == 50


# ------------------------------------------------------------------------------------------ the command

def make_chain(directory, cli_runner):
    """embeddings -> clusters, through the real commands."""
    x, _ = mixture(400, d=8, groups=5, seed=3, noise=0.5, weights=[40, 30, 15, 10, 5])
    x[10] = x[11]  # an exact duplicate pair
    emb = directory / "emb.parquet"
    write_embeddings(emb, x, n_tokens=np.arange(400) + 1000)
    clusters = directory / "clusters.parquet"
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(clusters), "--k", "6", "-q"])
    assert r.exit_code == 0, r.output
    return emb, clusters


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """One embeddings -> clusters chain shared by the read-only command tests."""
    from click.testing import CliRunner
    return make_chain(tmp_path_factory.mktemp("chain"), CliRunner())


def invoke(cli_runner, *args):
    return cli_runner.invoke(main, [str(a) for a in args])


def test_select_command_writes_selection_with_lineage(tmp_path, cli_runner, chain):
    emb, clusters = chain
    out = tmp_path / "sel.parquet"
    r = invoke(cli_runner, "select", clusters, "--out", out, "--fraction", 0.31, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["selected"] == 124 and summary["kept"] == 0.31
    assert summary["clusters_covered"] == {"covered": 6, "nonempty": 6} and len(summary["per_cluster"]) == 6

    table, meta = A.read_artifact(out, kind="selection")
    assert table.column_names == ["id", "cluster", "rank_in_cluster", "n_tokens"]
    assert table.schema.field("cluster").type == pa.int32() and table.schema.field("rank_in_cluster").type == pa.int32()
    ids = table.column("id").to_numpy()
    assert len(ids) == 124 and len(np.unique(ids)) == 124 and (np.diff(ids) > 0).all()
    np.testing.assert_array_equal(table.column("n_tokens").to_numpy(), ids + 1000)
    ctable, cmeta = A.read_artifact(clusters)
    labels = ctable.column("cluster").to_numpy()
    np.testing.assert_array_equal(table.column("cluster").to_numpy(), labels[ids])
    p = meta.params
    assert p["mode"] == "fraction" and p["value"] == 0.31 and p["requested"] == 124 and p["within"] == "auto"
    # the embeddings' dataset is gone: `auto` reads no responses and takes the random order, and says so
    assert p["within_auto"]["order"] == summary["within"] == "random"
    assert "synthetic.jsonl" in p["within_auto"]["why"] == summary["within_auto"]["why"]
    assert [w for w in summary["warnings"] if "--within auto" in w and "random order" in w]
    assert p["cluster_sizes"] == np.bincount(labels, minlength=6).tolist()
    assert sum(p["quotas"]) == 124 and p["dedup_dropped"] == 0 and p["seed"] == 0
    assert meta.inputs["clusters"]["fingerprint"] == cmeta.fingerprint
    assert meta.inputs["embeddings"]["fingerprint"] == A.read_meta(emb).fingerprint
    assert meta.dataset == cmeta.dataset

    again = tmp_path / "again.parquet"
    assert invoke(cli_runner, "select", clusters, "--out", again, "--fraction", 0.31, "-q").exit_code == 0
    t2, m2 = A.read_artifact(again)
    assert t2.equals(table) and m2.fingerprint == meta.fingerprint


@pytest.mark.parametrize("args", [["--per-cluster-ratio", 0.5, "--within", "far"],
                                  ["--budget", 50, "--within", "diverse"],
                                  ["--budget", 50, "--within", "hard", "--balance-power", 1],
                                  ["--budget", 399, "--within", "near", "--dedup", 0.9999]])
def test_select_orders_and_options(tmp_path, cli_runner, chain, args):
    emb, clusters = chain
    out = tmp_path / "sel.parquet"
    r = invoke(cli_runner, "select", clusters, "--out", out, "--embeddings", emb, *args, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    table, meta = A.read_artifact(out)
    if args[0] == "--per-cluster-ratio":
        smallest = min(meta.params["cluster_sizes"])
        assert set(meta.params["quotas"]) == {int(0.5 * smallest)}
        assert "below 0.5" in summary["rule"] and summary["kept"] < 0.5
    elif "--dedup" in args:
        dropped = meta.params["dedup_dropped"]
        assert dropped >= 1 and table.num_rows == min(399, 400 - dropped)
        assert not {10, 11} <= set(table.column("id").to_pylist())  # the exact duplicates are not both kept
        assert "near_duplicates_dropped" in summary
    else:
        assert table.num_rows == 50


def test_select_refuses_embeddings_from_another_dataset(tmp_path, cli_runner, chain):
    _, clusters = chain
    x, _ = mixture(400, d=8, groups=5, seed=3)
    other = tmp_path / "other.parquet"
    write_embeddings(other, x, fingerprint="another-dataset")
    out = tmp_path / "sel.parquet"
    r = invoke(cli_runner, "select", clusters, "--out", out, "--budget", 10, "--embeddings", other)
    assert r.exit_code == 2 and "different dataset" in r.stderr and "--force" in r.stderr
    r = invoke(cli_runner, "select", clusters, "--out", out, "--budget", 10, "--embeddings", other, "--force", "-q")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args,expect", [
    (["--fraction", 0], r"--fraction must be in (0, 1], got 0.0"),
    (["--fraction", 1.2], r"--fraction must be in (0, 1], got 1.2"),
    (["--fraction", 31], r"--fraction must be in (0, 1], got 31.0 (31 reads as a percentage: write 0.31)"),
    (["--token-fraction", 50], r"--token-fraction must be in (0, 1], got 50.0 (50 reads as a percentage: write 0.5)"),
    (["--budget", 0], "--budget must be a positive number of rows, got 0"),
    (["--per-cluster-ratio", 1.5], r"--per-cluster-ratio must be in (0, 1], got 1.5"),
    (["--fraction", 0.2, "--budget", 3], "give exactly one of"),
    ([], "give exactly one of"),
    (["--budget", 5, "--balance-power", 2], "--balance-power must be between 0 and 1"),
    (["--budget", 5, "--dedup", 1.5], "--dedup must be a cosine similarity in (0, 1]"),
])
def test_select_bad_arguments(tmp_path, cli_runner, chain, args, expect):
    _, clusters = chain
    r = invoke(cli_runner, "select", clusters, "--out", tmp_path / "s.parquet", *args)
    assert r.exit_code == 2 and expect in r.stderr and "Traceback" not in r.output


def test_select_budget_larger_than_data(tmp_path, cli_runner, chain):
    _, clusters = chain
    r = invoke(cli_runner, "select", clusters, "--out", tmp_path / "s.parquet", "--budget", 1000, "--json")
    assert r.exit_code == 0
    summary = json.loads(r.stdout)
    assert summary["selected"] == 400 and "selecting all of them" in summary["notes"][0]
    assert "selecting all of them" in " ".join(r.stderr.split())  # (the console wraps lines)


def test_select_needs_reachable_embeddings(tmp_path, cli_runner):
    emb, clusters = make_chain(tmp_path, cli_runner)
    out = tmp_path / "s.parquet"
    emb.unlink()
    for args, what in [(["--within", "hard"], "--within hard needs the `loss` column"),
                       (["--dedup", 0.9], "--dedup needs the feature vectors"),
                       (["--within", "diverse"], "--within diverse needs the feature vectors")]:
        r = invoke(cli_runner, "select", clusters, "--out", out, "--budget", 10, *args)
        assert r.exit_code == 2 and what in r.stderr and "pass --embeddings" in r.stderr, r.stderr
    # without them the plain orders still work, just without n_tokens
    r = invoke(cli_runner, "select", clusters, "--out", out, "--budget", 10, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["n_tokens_column"] is False
    assert A.read_artifact(out)[0].column_names == ["id", "cluster", "rank_in_cluster"]


def test_select_hard_without_loss_column(tmp_path, cli_runner):
    x, _ = mixture(50, d=4, groups=2)
    emb = tmp_path / "e.parquet"
    write_embeddings(emb, x, with_loss=False)
    clusters = tmp_path / "c.parquet"
    assert invoke(cli_runner, "cluster", emb, "--out", clusters, "--k", 2, "-q").exit_code == 0
    r = invoke(cli_runner, "select", clusters, "--out", tmp_path / "s.parquet", "--budget", 5, "--within", "hard")
    assert r.exit_code == 2 and "needs a 'loss' column" in r.stderr


def test_select_refuses_non_clusters_input(tmp_path, cli_runner, chain):
    emb, _ = chain
    r = invoke(cli_runner, "select", emb, "--out", tmp_path / "s.parquet", "--budget", 5)
    assert r.exit_code == 2 and "is an 'embeddings' artifact, expected 'clusters'" in r.stderr


@pytest.mark.parametrize("case", ["null_cluster", "empty", "out_of_range"])
def test_select_bad_clusters_artifact(tmp_path, cli_runner, case):
    path = tmp_path / "c.parquet"
    record = {"source": "d", "fingerprint": "f", "rows": 3}
    k = 2
    if case == "null_cluster":
        table, expect = pa.table({"id": [0, 1, 2], "cluster": pa.array([0, None, 1], pa.int32())}), "row 1 has no 'cluster'"
    elif case == "empty":
        table, expect = pa.table({"id": pa.array([], pa.int64()), "cluster": pa.array([], pa.int32())}), "empty artifact"
    else:
        table, expect = pa.table({"id": [0, 1, 2], "cluster": pa.array([0, 5, 1], pa.int32())}), "cluster 5 of id 1 is not in 0..1"
    W.write_artifact(table, path, A.make_meta("clusters", {"k": k}, {}, record))
    r = invoke(cli_runner, "select", path, "--out", tmp_path / "s.parquet", "--budget", 1)
    assert r.exit_code == 2 and expect in r.stderr, r.stderr


# ------------------------------------------------------------------------------ quotas over groups

@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=30), st.data())
def test_grouped_quotas_exact_capped_and_balanced_over_groups(sizes, data):
    from cluster_curate.selection import grouped_quotas
    sizes = np.array(sizes, dtype=np.int64)
    groups = np.array(data.draw(st.lists(st.integers(0, 4), min_size=len(sizes), max_size=len(sizes))))
    budget = data.draw(st.integers(0, int(sizes.sum()) + 5))
    q = grouped_quotas(sizes, groups, budget)
    assert q.sum() == min(budget, sizes.sum())
    assert (q <= sizes).all() and (q >= 0).all()
    # over groups: the unsaturated groups' totals differ by at most one
    g_sizes = np.bincount(groups, weights=sizes).astype(int)
    g_q = np.bincount(groups, weights=q, minlength=len(g_sizes)).astype(int)
    open_ = g_q < g_sizes
    if open_.sum() > 1:
        assert g_q[open_].max() - g_q[open_].min() <= 1


def test_groups_shift_quota_from_a_split_dominant_kind_to_the_rare_ones():
    from cluster_curate.selection import grouped_quotas, water_fill_quotas
    # one dominant kind split into 6 clusters (group 0), two rare kinds with one cluster each
    sizes = np.array([100] * 6 + [40, 40])
    groups = np.array([0] * 6 + [1, 2])
    flat = water_fill_quotas(sizes, 60)
    two_level = grouped_quotas(sizes, groups, 60)
    assert flat[:6].sum() == 46 and flat[6:].tolist() == [7, 7]
    assert two_level[:6].sum() == 20
    assert two_level[6:].tolist() == [20, 20]


def test_cluster_groups_flow_into_select(tmp_path, cli_runner):
    from cluster_curate.io.artifacts import read_meta
    emb = tmp_path / "e.parquet"
    write_embeddings(emb, mixture(400, d=16, groups=8, seed=3)[0])
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "c.parquet"), "--k", "12",
                                 "--groups", "4"])
    assert r.exit_code == 0, r.output
    cmeta = read_meta(tmp_path / "c.parquet")
    assert len(cmeta.params["groups"]) == 12 and set(cmeta.params["groups"]) <= set(range(4))
    r = cli_runner.invoke(main, ["select", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "s.parquet"),
                                 "--budget", "100", "--json"])
    assert r.exit_code == 0, r.output
    smeta = read_meta(tmp_path / "s.parquet")
    assert smeta.params["selected"] == 100 and smeta.params["quotas_over_groups"] is True
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "c2.parquet"), "--k", "12",
                                 "--groups", "13"])
    assert r.exit_code == 2 and "--groups 13 must be between 1 and k = 12" in r.stderr
    # auto (the default): the 12 clusters of 8 blobs merge back into about 8 groups; none: flat quotas
    for value in ("auto", "none", None):
        out = tmp_path / f"c-{value}.parquet"
        r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(out), "--k", "12",
                                     *(["--groups", value] if value else [])])
        assert r.exit_code == 0, r.output
        params = read_meta(out).params
        if value == "none":
            assert params["groups"] is None
        else:
            assert 6 <= max(params["groups"]) + 1 <= 10 and params["groups_rule"].startswith("auto (row): ")
            assert "groups of clusters (average linkage" in " ".join(r.output.split())
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "c3.parquet"), "--groups", "some"])
    assert r.exit_code == 2 and "expected a number of groups, 'auto' or 'none'" in r.stderr
