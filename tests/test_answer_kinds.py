"""Kinds of groups joined by what their rows answer (answer_kinds.py, `cluster --kinds answers`) and the
budget water-filled over weighted kinds (budget_sequence.take_sequence, `select`)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate import answer_kinds as AK
from cluster_curate import selection as S
from cluster_curate.budget_sequence import Kinds, take_sequence, token_water_fill
from cluster_curate.within_orders import order_within_cluster

from test_selection_tokens import _problem as token_problem

WORDS = ["pine", "moss", "rose", "tulip", "comet", "orbit", "ship", "dock"]


def letter_requests(n: int = 40, answers=None):
    """Clusters 0 and 1: one request in two wordings; 2: another request, one word apart from 0's wording."""
    prompts, responses, labels = [], [], []
    for c, (wording, answer) in enumerate([("the first letter of", lambda w: w[0]),
                                           ("which letter starts", lambda w: w[0]),
                                           ("the last letter of", lambda w: w[-1])]):
        for i in range(n):
            w, noun = WORDS[i % 8], WORDS[(3 * i + c) % 8]
            prompts.append(f"for the {noun} file, {wording}: {w}")
            responses.append(answer(w))
            labels.append(c)
    return prompts, responses, np.array(labels)


def reference_agreement(prompts, responses, labels, k, min_pairs=AK.MIN_PAIRS, min_overlap=AK.MIN_OVERLAP,
                        template_share=AK.TEMPLATE_SHARE) -> np.ndarray:
    """answer_agreement's definition, pair by pair with counters (the harness prototype of rounds 12-16)."""
    words = [set(AK._WORD.findall(p.lower())) for p in prompts]
    answers = [r.strip().lower() for r in responses]
    by_word = [defaultdict(Counter) for _ in range(k)]
    dist = [Counter() for _ in range(k)]
    members = [np.flatnonzero(labels == c) for c in range(k)]
    for c, m in enumerate(members):
        common = Counter(w for i in m for w in words[i])
        template = {w for w, n in common.items() if n >= template_share * len(m)}
        for i in m:
            dist[c][answers[i]] += 1
            for w in words[i] - template:
                by_word[c][w][answers[i]] += 1
    agree = np.zeros((k, k))
    for a in range(k):
        for b in range(a + 1, k):
            na, nb = len(members[a]), len(members[b])
            if not na or not nb:
                continue
            if sum(np.sqrt(v / na * dist[b].get(r, 0) / nb) for r, v in dist[a].items()) < min_overlap:
                continue
            chance = sum(v * dist[b].get(r, 0) for r, v in dist[a].items()) / (na * nb)
            same = pairs = 0
            for w in by_word[a].keys() & by_word[b].keys():
                same += sum(v * by_word[b][w].get(r, 0) for r, v in by_word[a][w].items())
                pairs += sum(by_word[a][w].values()) * sum(by_word[b][w].values())
            if pairs >= min_pairs:
                agree[a, b] = agree[b, a] = same / pairs - chance
    return agree


def test_two_wordings_of_one_request_agree_and_a_near_twin_does_not():
    prompts, responses, labels = letter_requests()
    agree = AK.answer_agreement(prompts, responses, labels, 3).toarray()
    assert agree[0, 1] > AK.JOIN > agree[0, 2] and agree[0, 1] == agree[1, 0]
    kinds = AK.answer_kinds(np.array([0, 1, 2]), agree)
    assert kinds.tolist() == [0, 0, 1]
    assert AK.kind_weights(kinds).tolist() == [2 ** AK.KIND_POWER, 1.0]
    # unique answers (most real data) agree with nothing: nothing is joined
    unique = AK.answer_agreement(prompts, [f"{r} {i}" for i, r in enumerate(responses)], labels, 3)
    assert unique.nnz == 0
    assert AK.answer_kinds(np.array([0, 1, 2]), unique).tolist() == [0, 1, 2]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_answer_agreement_is_the_pairwise_definition(data):
    k = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(1, 80))
    vocab = ["a", "b", "c", "d", "e", "1", "2", "x y"]
    prompts = [" ".join(data.draw(st.lists(st.sampled_from(vocab), min_size=1, max_size=5))) for _ in range(n)]
    responses = [data.draw(st.sampled_from(["yes", "no", " Yes", "7"])) for _ in range(n)]
    labels = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))
    min_pairs = data.draw(st.integers(1, 20))
    got = AK.answer_agreement(prompts, responses, labels, k, min_pairs=min_pairs, min_overlap=0.3).toarray()
    assert np.allclose(got, reference_agreement(prompts, responses, labels, k, min_pairs, 0.3), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_kinds_join_as_one_global_average_linkage_would(data):
    from scipy.cluster.hierarchy import fcluster, linkage
    k = data.draw(st.integers(2, 12))
    values = st.sampled_from([0.0, 0.0, 0.0, -0.2, 0.02, 0.04, 0.06, 0.3, 0.9])
    agree = np.zeros((k, k))
    for a in range(k):
        for b in range(a + 1, k):
            agree[a, b] = agree[b, a] = data.draw(values)
    groups = np.unique(np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=k, max_size=k))),
                       return_inverse=True)[1]
    kinds = AK.answer_kinds(groups, agree)
    # the reference: one linkage over all k clusters, then clusters, groups and joins as one graph
    joined = fcluster(linkage(np.clip(1 - agree, 0, 2)[np.triu_indices(k, 1)], method="average"),
                      t=1 - AK.JOIN, criterion="distance")
    same_kind = {(a, b) for a in range(k) for b in range(k) if kinds[groups[a]] == kinds[groups[b]]}
    parent = list(range(k))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i
    for a in range(k):
        for b in range(k):
            if groups[a] == groups[b] or joined[a] == joined[b]:
                parent[root(a)] = root(b)
    assert same_kind == {(a, b) for a in range(k) for b in range(k) if root(a) == root(b)}
    assert sorted(set(kinds.tolist())) == list(range(kinds.max() + 1))


def _problem(data):
    """The token tests' problem (clusters, their groups, an order), with kinds drawn over the groups."""
    clusters, _, groups, order, sizes = token_problem(data)
    n_groups = int(groups.max()) + 1
    kind_of_group = np.unique(np.array(data.draw(st.lists(st.integers(0, 2), min_size=n_groups,
                                                           max_size=n_groups))), return_inverse=True)[1]
    return clusters, groups, kind_of_group, order, sizes


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_kinds_of_one_group_each_at_weight_one_are_the_groups(data):
    clusters, groups, _, order, sizes = _problem(data)
    ones = np.ones(len(clusters), dtype=np.int64)
    singles = Kinds(np.arange(int(groups.max()) + 1), np.ones(int(groups.max()) + 1))
    assert np.array_equal(take_sequence(order, clusters, ones, 0.0, groups, singles),
                          take_sequence(order, clusters, ones, 0.0, groups))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_weighted_kinds_share_the_budget_by_weight(data):
    clusters, groups, kind_of_group, order, sizes = _problem(data)
    kinds = Kinds(kind_of_group, AK.kind_weights(kind_of_group))
    budget = data.draw(st.integers(1, len(clusters)))
    sel = S.select_rows(clusters, k=len(sizes), ids=np.arange(len(clusters)), budget=budget, groups=groups,
                        kinds=kinds)
    assert len(sel.rows) == budget and (sel.quotas <= sizes).all()
    kind_of_row = kind_of_group[groups[clusters[sel.rows]]]
    got = np.bincount(kind_of_row, minlength=len(kinds.weight))
    kind_sizes = np.bincount(kind_of_group[groups[clusters]], minlength=len(kinds.weight))
    # the weighted water-filling, up to the rounding of one row per kind
    assert np.abs(got - S.weighted_quotas(kind_sizes, kinds.weight, budget)).max() <= 1
    # inside a kind, its groups are water-filled: an unfilled group holds no fewer rows than a filled one's
    for kind in range(len(kinds.weight)):
        in_kind = np.flatnonzero(kind_of_group == kind)
        taken = np.array([np.isin(clusters[sel.rows], np.flatnonzero(groups == g)).sum() for g in in_kind])
        size = np.array([sizes[groups == g].sum() for g in in_kind])
        if (taken < size).any():
            assert taken[taken < size].min() >= taken.max() - 1


def test_token_budget_and_source_bounds_follow_the_kinds():
    rng = np.random.default_rng(0)
    clusters = np.repeat(np.arange(6), [40, 40, 40, 10, 10, 60])
    groups = np.array([0, 1, 2, 3, 3, 4])
    kinds = Kinds(np.array([0, 0, 0, 1, 2]), np.array([3 ** 0.5, 1.0, 1.0]))
    tokens = rng.integers(5, 50, len(clusters))
    order = order_within_cluster(clusters, "random", seed=0, k=6)
    budget = int(tokens.sum() * 0.3)
    quotas = token_water_fill(order, clusters, tokens, np.bincount(clusters), budget, 0.0, groups, kinds)
    taken = np.concatenate([order[clusters[order] == c][:q] for c, q in enumerate(quotas)])
    assert 0 <= budget - tokens[taken].sum() < tokens.max()
    # the kind of three groups gets about √3 of a group's share, not three
    share = np.bincount(kinds.of_group[groups[clusters[taken]]], weights=tokens[taken])
    assert 1.3 < share[0] / share[2] < 2.2
    sources = (clusters == 5).astype(np.int64)
    sel = S.select_rows(clusters, ids=np.arange(len(clusters)), budget=60, groups=groups, kinds=kinds,
                        sources=sources, source_min_share=[np.nan, 0.5], source_names=["a", "b"])
    assert len(sel.rows) == 60 and (sources[sel.rows] == 1).sum() >= 30


# ------------------------------------------------------------------------------------------ the commands

def _cli(runner, args, code=0):
    from cluster_curate.cli import main
    res = runner.invoke(main, [str(a) for a in args])
    assert res.exit_code == code, res.output
    return res


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A benchmark-family instance (templated requests with repeated answers) and its embeddings."""
    import skillfamily
    from click.testing import CliRunner
    d = tmp_path_factory.mktemp("family")
    skillfamily.write_instance(d, 1002, "short", test_per_skill=1)
    _cli(CliRunner(), ["embed", d / "train.jsonl", "--out", d / "e.parquet", "-q"])
    return d


def test_cluster_kinds_answers_records_the_kinds_select_uses(family, tmp_path, cli_runner):
    d = family
    # without --data: the dataset the embeddings record
    res = _cli(cli_runner, ["cluster", d / "e.parquet", "--out", tmp_path / "c.parquet", "--kinds", "answers", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    meta = json.loads(pq.read_schema(tmp_path / "c.parquet").metadata[b"cluster_curate"])["params"]
    groups, kind_of_group = np.array(meta["groups"]), np.array(meta["kind_of_group"])
    assert summary["kinds"] == kind_of_group.max() + 1 < summary["groups"]
    assert summary["groups_joined"] == summary["groups"] - summary["kinds"]
    # the recorded kinds are the pure functions' on the artifact's clusters and the data's texts
    rows = [json.loads(line) for line in (d / "train.jsonl").read_text().splitlines()]
    t = pq.read_table(tmp_path / "c.parquet")
    ids, labels = t.column("id").to_numpy(), t.column("cluster").to_numpy()
    agree = AK.answer_agreement([rows[i]["instruction"] for i in ids], [rows[i]["output"] for i in ids], labels,
                                meta["k"])
    assert np.array_equal(AK.answer_kinds(groups, agree), kind_of_group)
    assert np.allclose(meta["kind_weights"], AK.kind_weights(kind_of_group))
    res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s.parquet", "--fraction", "0.31",
                            "--within", "random", "--json"])
    assert "kinds of groups first" in json.loads(res.stdout.strip().splitlines()[-1])["quotas"]
    chosen = pq.read_table(tmp_path / "s.parquet").column("id").to_numpy()
    sel = S.select_rows(labels, ids=ids, fraction=0.31, groups=groups,
                        kinds=Kinds(kind_of_group, np.array(meta["kind_weights"])))
    assert np.array_equal(np.sort(chosen), np.sort(ids[sel.rows]))


def test_select_within_answers_reads_the_responses_and_orders_inside_the_kinds(family, tmp_path, cli_runner):
    """`select --within answers` reads the responses (from the recorded dataset, or --data) and takes what
    select_rows takes with them; the same quotas as the random order, other rows. The default (`auto`) is the
    answers order on these one-word answers. Without the data: one line, or for `auto` the random order and a
    warning."""
    import shutil
    d = family
    _cli(cli_runner, ["cluster", d / "e.parquet", "--out", tmp_path / "c.parquet", "-q"])
    chosen, summary = {}, {}
    for name, within in (("recorded", ["--within", "answers"]), ("given", ["--within", "answers", "--data",
                                                                            d / "train.jsonl"]),
                         ("random", ["--within", "random"]), ("auto", [])):
        res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / f"{name}.parquet", "--json",
                                "--fraction", "0.31", *within])
        chosen[name] = pq.read_table(tmp_path / f"{name}.parquet")
        summary[name] = json.loads(res.stdout.strip().splitlines()[-1])
        assert summary[name]["within"] == ("random" if name == "random" else "answers")
    assert chosen["recorded"].equals(chosen["given"]) and chosen["auto"].equals(chosen["recorded"])
    rows = [json.loads(line) for line in (d / "train.jsonl").read_text().splitlines()]
    auto = json.loads(pq.read_schema(tmp_path / "auto.parquet").metadata[b"cluster_curate"])["params"]
    assert auto["within"] == "auto" and auto["within_auto"]["order"] == "answers"
    assert auto["within_auto"]["short_answers"] == auto["within_auto"]["rows"] == summary["auto"]["rows"]
    assert "within_auto" not in summary["recorded"] and summary["auto"]["within_auto"] == auto["within_auto"]
    rows = [json.loads(line) for line in (d / "train.jsonl").read_text().splitlines()]
    t = pq.read_table(tmp_path / "c.parquet")
    ids, labels = t.column("id").to_numpy(), t.column("cluster").to_numpy()
    meta = json.loads(pq.read_schema(tmp_path / "c.parquet").metadata[b"cluster_curate"])["params"]
    kinds = Kinds(np.array(meta["kind_of_group"]), np.array(meta["kind_weights"]))
    sel = S.select_rows(labels, ids=ids, fraction=0.31, groups=np.array(meta["groups"]), kinds=kinds,
                        within="answers", answers=np.array([AK.answer_key(rows[i]["output"]) for i in ids]))
    got = chosen["recorded"].column("id").to_numpy()
    assert np.array_equal(np.sort(got), np.sort(ids[sel.rows]))
    rand = chosen["random"].column("id").to_numpy()
    assert len(got) == len(rand) and set(got) != set(rand)
    per_cluster = {n: np.bincount(chosen[n].column("cluster").to_numpy(), minlength=meta["k"]) for n in chosen}
    assert np.array_equal(per_cluster["recorded"], per_cluster["random"])
    shutil.copy(d / "train.jsonl", tmp_path / "train.jsonl")  # the data gone: one line naming what to pass
    _cli(cli_runner, ["embed", tmp_path / "train.jsonl", "--out", tmp_path / "e2.parquet", "-q"])
    _cli(cli_runner, ["cluster", tmp_path / "e2.parquet", "--out", tmp_path / "c2.parquet", "-q"])
    (tmp_path / "train.jsonl").unlink()
    res = _cli(cli_runner, ["select", tmp_path / "c2.parquet", "--out", tmp_path / "s2.parquet", "--fraction", "0.31",
                            "--within", "answers"], code=2)
    error = [line for line in res.output.strip().splitlines() if line.startswith("ERROR")]
    assert len(error) == 1 and "train.jsonl" in error[0] and "pass --data" in error[0]
    assert not (tmp_path / "s2.parquet").exists()
    output = {name: _cli(cli_runner, ["select", tmp_path / "c2.parquet", "--out", tmp_path / f"{name}.parquet",
                                      "--fraction", "0.31", *within]).output
              for name, within in (("auto2", []), ("random2", ["--within", "random"]))}
    assert pq.read_table(tmp_path / "auto2.parquet").equals(pq.read_table(tmp_path / "random2.parquet"))
    warned = [line for line in output["auto2"].splitlines() if "--within auto" in line]
    assert len(warned) == 1 and "train.jsonl" in warned[0] and "random order" in warned[0], output["auto2"]
    # clusters that record no dataset: one line that says once what to pass
    t = pq.read_table(tmp_path / "c2.parquet")
    meta = json.loads(t.schema.metadata[b"cluster_curate"])
    pq.write_table(t.replace_schema_metadata({b"cluster_curate": json.dumps({**meta, "dataset": None})}),
                   tmp_path / "c3.parquet")
    res = _cli(cli_runner, ["select", tmp_path / "c3.parquet", "--out", tmp_path / "s3.parquet", "--fraction", "0.31",
                            "--within", "answers", "--force"], code=2)
    error = [line for line in res.output.strip().splitlines() if line.startswith("ERROR")]
    assert len(error) == 1 and "record no dataset" in error[0] and error[0].count("pass --data") == 1, error
    assert not (tmp_path / "s3.parquet").exists()


def test_cluster_kinds_data_given_or_recorded_give_the_same_kinds(family, tmp_path, cli_runner):
    def params(name, *args, embeddings=family / "e.parquet"):
        _cli(cli_runner, ["cluster", embeddings, "--out", tmp_path / name, "-q", *args])
        return json.loads(pq.read_schema(tmp_path / name).metadata[b"cluster_curate"])["params"]
    given = params("given.parquet", "--kinds", "answers", "--data", family / "train.jsonl")
    assert given["kind_of_group"] == params("recorded.parquet", "--kinds", "answers")["kind_of_group"]
    assert params("default.parquet")["kind_of_group"] == given["kind_of_group"]  # --kinds auto: the data is there
    assert "kind_of_group" not in params("none.parquet", "--kinds", "none")
    # embeddings that record no dataset take --data as it is, as select takes it for such clusters
    t = pq.read_table(family / "e.parquet")
    meta = json.loads(t.schema.metadata[b"cluster_curate"])
    pq.write_table(t.replace_schema_metadata({b"cluster_curate": json.dumps({**meta, "dataset": None})}),
                   tmp_path / "bare.parquet")
    bare = params("bare-given.parquet", "--kinds", "answers", "--data", family / "train.jsonl",
                  embeddings=tmp_path / "bare.parquet")
    assert bare["kind_of_group"] == given["kind_of_group"]


def _without_answer_columns(src, dst):
    """An embeddings artifact as embed wrote it before it kept the answers (algorithm 1: no KEPT_COLUMNS)."""
    from cluster_curate.features.embed import KEPT_COLUMNS
    t = pq.read_table(src)
    meta = json.loads(t.schema.metadata[b"cluster_curate"])
    pq.write_table(t.drop(list(KEPT_COLUMNS)).replace_schema_metadata(
        {b"cluster_curate": json.dumps({**meta, "algorithm": 1})}), dst)


def test_embeddings_keep_the_answers_cluster_would_read(family):
    """embed keeps each row's answer key and response words (features/embed.ANSWER_COLUMNS): what cluster's
    pass over the data computed for the embedded rows."""
    t = pq.read_table(family / "e.parquet")
    rows = [json.loads(line) for line in (family / "train.jsonl").read_text().splitlines()]
    ids = t.column("id").to_numpy()
    keys, words = AK.answer_columns([rows[i]["output"] for i in ids])
    assert np.array_equal(t.column("answer_key").to_numpy(), keys)
    assert np.array_equal(t.column("response_words").to_numpy(), words)
    assert keys.tolist() == [AK.answer_key(rows[i]["output"]) for i in ids]


def test_cluster_kinds_from_the_kept_answers_are_those_of_a_pass_over_the_data(family, tmp_path, cli_runner,
                                                                                monkeypatch):
    """cluster takes the answers from the embeddings (no pass over the data; the prompts are read only where
    two clusters answer alike, as here); embeddings written before they were kept, or --data, read the data:
    the same clusters, kinds and short answers."""
    _without_answer_columns(family / "e.parquet", tmp_path / "old.parquet")
    from cluster_curate.commands import cluster as C
    calls = []
    stored = C._stored_answers
    monkeypatch.setattr(C, "_stored_answers", lambda *a: calls.append(stored(*a) is not None) or stored(*a))
    params = {}
    for name, embeddings, args in (("kept", family / "e.parquet", []), ("old", tmp_path / "old.parquet", []),
                                   ("data", family / "e.parquet", ["--data", family / "train.jsonl"])):
        _cli(cli_runner, ["cluster", embeddings, "--out", tmp_path / f"c-{name}.parquet", "-q", *args])
        params[name] = json.loads(pq.read_schema(tmp_path / f"c-{name}.parquet").metadata[b"cluster_curate"])["params"]
    assert calls == [True, False, False]
    kinds = params["kept"]["kind_of_group"]
    assert max(kinds) + 1 < len(set(params["kept"]["groups"]))  # some groups joined: the prompts were read
    assert params["kept"] == params["old"] == params["data"]


def test_cluster_kinds_from_the_kept_answers_do_not_read_the_rows(fixtures_dir, tmp_path, monkeypatch):
    """Unique answers (GSM8K): no two clusters answer alike, so cluster reads no row of the data (it opens and
    checks it as before), and its kinds are those of an artifact without the kept answers."""
    import cluster_curate as cc
    from cluster_curate.io.datasets import Dataset
    data = fixtures_dir / "gsm8k" / "train-300.jsonl"
    cc.embed(str(data), str(tmp_path / "e.parquet"))
    _without_answer_columns(tmp_path / "e.parquet", tmp_path / "old.parquet")
    cc.cluster(str(tmp_path / "old.parquet"), str(tmp_path / "old-c.parquet"))

    def no_rows(self, *a, **k):
        raise AssertionError("the data was read")
    monkeypatch.setattr(Dataset, "iter_batches", no_rows)
    cc.cluster(str(tmp_path / "e.parquet"), str(tmp_path / "c.parquet"))
    got, old = (json.loads(pq.read_schema(tmp_path / n).metadata[b"cluster_curate"])["params"]
                for n in ("c.parquet", "old-c.parquet"))
    assert got["kinds"] == "answers" and got == old
    assert pq.read_table(tmp_path / "c.parquet").equals(pq.read_table(tmp_path / "old-c.parquet"))


def test_select_answers_from_the_kept_answers_are_those_of_a_pass_over_the_data(family, tmp_path, cli_runner,
                                                                                 monkeypatch):
    """select --within answers / auto takes the answers from the clusters' embeddings (the data opened and checked,
    its rows not read); clusters of embeddings written before they were kept, --data, or --embeddings given read
    the data: the same selection."""
    from cluster_curate.io.datasets import Dataset
    _without_answer_columns(family / "e.parquet", tmp_path / "old.parquet")
    for name in ("e", "old"):
        src = family / "e.parquet" if name == "e" else tmp_path / "old.parquet"
        _cli(cli_runner, ["cluster", src, "--out", tmp_path / f"c-{name}.parquet", "-q"])
    passes = []
    iter_batches = Dataset.iter_batches
    monkeypatch.setattr(Dataset, "iter_batches", lambda self, *a, **k: passes.append(1) or iter_batches(self, *a, **k))
    chosen = {}
    for name, clusters, args in (("kept", "c-e", []), ("kept-auto", "c-e", ["--within", "auto"]),
                                 ("old", "c-old", []), ("data", "c-e", ["--data", family / "train.jsonl"]),
                                 ("embeddings", "c-e", ["--embeddings", family / "e.parquet"])):
        passes.clear()
        res = _cli(cli_runner, ["select", tmp_path / f"{clusters}.parquet", "--out", tmp_path / f"s-{name}.parquet",
                                "--fraction", "0.31", "--json", *(args or ["--within", "answers"])])
        assert json.loads(res.stdout.strip().splitlines()[-1])["within"] == "answers"
        assert bool(passes) == (name not in ("kept", "kept-auto")), name
        chosen[name] = pq.read_table(tmp_path / f"s-{name}.parquet")
    assert all(chosen["kept"].equals(t) for t in chosen.values())


def test_cluster_kinds_auto_without_groups_says_why_none(family, tmp_path, cli_runner):
    """The default joins kinds where it can; without groups the clustering is --kinds none's and says why."""
    res = _cli(cli_runner, ["cluster", family / "e.parquet", "--out", tmp_path / "c.parquet", "--json",
                            "--groups", "none"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert "kinds" not in summary and "no groups to join" in summary["kinds_why_not"]
    _cli(cli_runner, ["cluster", family / "e.parquet", "--out", tmp_path / "n.parquet", "-q", "--kinds", "none",
                      "--groups", "none"])
    meta = {name: json.loads(pq.read_schema(tmp_path / name).metadata[b"cluster_curate"])["params"]
            for name in ("c.parquet", "n.parquet")}
    assert meta["c.parquet"] == meta["n.parquet"]


def test_kinds_that_join_nothing_select_the_groups_rows(fixtures_dir, tmp_path, cli_runner):
    """Unique answers (GSM8K) join nothing: the selection is exactly the groups' one, also where the sequence
    and the quotas round differently (--balance-power 0.5)."""
    data = fixtures_dir / "gsm8k" / "train-300.jsonl"
    _cli(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "-q"])
    chosen = {}
    for kinds in ("none", "answers"):
        _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / f"c-{kinds}.parquet", "-q",
                          "--kinds", kinds])
        _cli(cli_runner, ["select", tmp_path / f"c-{kinds}.parquet", "--out", tmp_path / f"s-{kinds}.parquet", "-q",
                          "--fraction", "0.31", "--balance-power", "0.5"])
        chosen[kinds] = pq.read_table(tmp_path / f"s-{kinds}.parquet").column("id").to_pylist()
    meta = json.loads(pq.read_schema(tmp_path / "c-answers.parquet").metadata[b"cluster_curate"])["params"]
    assert meta["kind_of_group"] == list(range(len(meta["kind_of_group"])))
    assert chosen["answers"] == chosen["none"]


def test_select_auto_on_worked_solutions_is_the_random_order_and_trusts_what_cluster_read(fixtures_dir, tmp_path,
                                                                                         cli_runner):
    """GSM8K's responses are worked solutions: `--within auto` takes the random order. Where `cluster` read the
    answers (its kinds) it does not read the data again, so it needs none; else it reads it itself."""
    import shutil
    shutil.copy(fixtures_dir / "gsm8k" / "train-300.jsonl", tmp_path / "train.jsonl")
    _cli(cli_runner, ["embed", tmp_path / "train.jsonl", "--out", tmp_path / "e.parquet", "-q"])
    for kinds in ("auto", "none"):
        _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / f"c-{kinds}.parquet", "-q",
                          "--kinds", kinds])
    recorded = json.loads(pq.read_schema(tmp_path / "c-auto.parquet").metadata[b"cluster_curate"])["params"]
    assert recorded["short_answers"] == {"rows": 0, "max_words": 4, "repeat": False}
    summary = {}
    for name, clusters, within in (("read", "c-none", []), ("auto", "c-auto", []),
                                   ("random", "c-auto", ["--within", "random"])):
        res = _cli(cli_runner, ["select", tmp_path / f"{clusters}.parquet", "--out", tmp_path / f"{name}.parquet",
                                "--fraction", "0.31", "--json", *within])
        summary[name] = json.loads(res.stdout.strip().splitlines()[-1])
        if name == "read":
            (tmp_path / "train.jsonl").unlink()  # from here on the data is gone
    assert summary["auto"]["within"] == summary["read"]["within"] == "random" and not summary["auto"]["warnings"]
    assert summary["auto"]["within_auto"]["why"].endswith("(read by `cluster`)")
    assert summary["read"]["within_auto"]["short_answers"] == 0
    assert "cluster" not in summary["read"]["within_auto"]["why"]
    rows = {n: pq.read_table(tmp_path / f"{n}.parquet").column("id").to_pylist() for n in summary}
    assert rows["auto"] == rows["random"] == rows["read"]


@pytest.mark.parametrize("args, message", [
    (["--data", "DATA", "--groups", "none"], "--kinds answers joins groups of clusters: not with --groups none"),
    (["--data", "MISSING"], "MISSING"),
    (["--data", "OTHER"], "was made from"),
    (["--kinds", "auto", "--data", "MISSING"], "MISSING"),  # a --data given is read or refused, also by auto
])
def test_cluster_kinds_bad_use_is_one_line(family, tmp_path, cli_runner, fixtures_dir, args, message):
    swap = {"DATA": family / "train.jsonl", "OTHER": fixtures_dir / "gsm8k" / "train-300.jsonl",
            "MISSING": tmp_path / "missing.jsonl"}
    kinds = [] if "--kinds" in args else ["--kinds", "answers"]
    res = _cli(cli_runner, ["cluster", family / "e.parquet", "--out", tmp_path / "c.parquet", *kinds,
                            *[swap.get(a, a) for a in args]], code=2)
    assert str(swap.get(message, message)) in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "c.parquet").exists()


def test_cluster_kinds_without_the_recorded_data_says_what_to_pass(tmp_path, cli_runner):
    import shutil

    import skillfamily
    skillfamily.write_instance(tmp_path, 1002, "short", test_per_skill=1)
    _cli(cli_runner, ["embed", tmp_path / "train.jsonl", "--out", tmp_path / "e.parquet", "-q"])
    shutil.move(tmp_path / "train.jsonl", tmp_path / "moved.jsonl")
    res = _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "c.parquet", "--kinds", "answers"],
               code=2)
    out = res.output.strip()
    assert "train.jsonl" in out and "--data DATA" in out and len(out.splitlines()) == 1
    assert not (tmp_path / "c.parquet").exists()
    _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "c.parquet", "-q", "--kinds", "answers",
                      "--data", tmp_path / "moved.jsonl"])
    # the default (auto) clusters without kinds, and warns and says why
    res = _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "auto.parquet", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert "kinds" not in summary and "train.jsonl" in summary["kinds_why_not"]
    assert "--data DATA" in summary["kinds_why_not"] and "--data DATA" in res.stderr
    meta = json.loads(pq.read_schema(tmp_path / "auto.parquet").metadata[b"cluster_curate"])["params"]
    assert "kind_of_group" not in meta


def test_run_kinds_answers_reads_its_own_data_and_stays_up_to_date(family, tmp_path, cli_runner):
    args = ["run", family / "train.jsonl", "--out", tmp_path / "r", "--fraction", "0.31", "--num-shards", "2",
            "--json"]
    _cli(cli_runner, args + ["--kinds", "answers"])
    meta = json.loads(pq.read_schema(tmp_path / "r" / "clusters.parquet").metadata[b"cluster_curate"])["params"]
    assert meta["kinds"] == "answers" and meta["kind_of_group"]
    res = _cli(cli_runner, args + ["--kinds", "answers"])
    assert all(s["status"] == "up to date" for s in json.loads(res.stdout.strip().splitlines()[-1])["stages"])
    # --kinds none (the default before round 20) is not part of the recorded request: run directories made
    # before the option existed stay up to date with it; the default, auto, clusters them again
    plain = ["run", family / "train.jsonl", "--out", tmp_path / "plain", "--fraction", "0.31", "--num-shards", "2",
             "--json"]
    _cli(cli_runner, plain + ["--kinds", "none"])
    state = json.loads((tmp_path / "plain" / "run-state.json").read_text())
    assert "kinds" not in state["cluster"]["option_values"]
    res = _cli(cli_runner, plain, code=2)  # the default (auto) replaces its clusters: only with --overwrite
    assert "--kinds none -> auto" in res.output and "--overwrite" in res.output
    res = _cli(cli_runner, plain + ["--overwrite"])
    stages = {s["stage"]: s["status"] for s in json.loads(res.stdout.strip().splitlines()[-1])["stages"]}
    assert stages["embed"] == "up to date" and stages["cluster"] == "ran"
    meta = json.loads(pq.read_schema(tmp_path / "plain" / "clusters.parquet").metadata[b"cluster_curate"])["params"]
    assert meta["kinds"] == "answers" and meta["kind_of_group"]


def test_python_api_takes_one_data_path(family, tmp_path):
    import cluster_curate
    from cluster_curate import console
    summary, _ = cluster_curate.cluster(str(family / "e.parquet"), str(tmp_path / "c.parquet"), kinds="answers",
                                        data=str(family / "train.jsonl"))
    assert summary["kinds"].value < summary["groups"].value
    console.configure(quiet=True)
    result = cluster_curate.run(str(family / "train.jsonl"), str(tmp_path / "r"), fraction=0.31, num_shards=2,
                                kinds="answers")  # run passes cluster its data as given: one path, not its letters
    assert result["summaries"]["cluster"]["kinds"] < result["summaries"]["cluster"]["groups"]
