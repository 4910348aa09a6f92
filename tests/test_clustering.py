"""`cluster`: the pure k-means stage (clustering.py) and the command over artifacts (commands/cluster.py / CLI)."""

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate import cluster_groups as G
from cluster_curate import clustering as C
from cluster_curate import kmeans as K
from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.io import artifacts as A
from cluster_curate.io import writer as W
from cluster_curate.io.readers import embedding_matrix
from embeddings_factory import embeddings_table, mixture, write_embeddings


def unit(x):
    x = np.array(x, dtype=np.float32)
    C.normalise_features(x)
    return x


# ------------------------------------------------------------------------------------------ features

def test_embedding_matrix_is_a_view_of_the_arrow_buffer():
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 4)
    m = embedding_matrix(arr)
    assert m.shape == (6, 4) and m.dtype == np.float32
    np.testing.assert_array_equal(m, x)
    assert m.__array_interface__["data"][0] == arr.values.buffers()[1].address  # no copy
    # a slice (non-zero offset) still lines up
    np.testing.assert_array_equal(embedding_matrix(arr.slice(2, 3)), x[2:5])
    # several chunks are joined; float64 and variable-size lists of equal length are accepted
    chunked = pa.chunked_array([arr.slice(0, 2), arr.slice(2, 4)])
    np.testing.assert_array_equal(embedding_matrix(chunked), x)
    as_list = pa.array([list(map(float, r)) for r in x], pa.list_(pa.float64()))
    np.testing.assert_array_equal(embedding_matrix(as_list), x)


def test_embedding_matrix_errors_name_the_row():
    ragged = pa.array([[1.0, 2.0], [1.0], [3.0, 4.0]], pa.list_(pa.float32()))
    with pytest.raises(CurateError, match="id 11 has 1 values"):
        embedding_matrix(ragged, ids=np.array([10, 11, 12]))
    missing = pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2))
    with pytest.raises(CurateError, match="missing vector at id 8"):
        embedding_matrix(missing, ids=np.array([7, 8]))
    with pytest.raises(CurateError, match="list of floats"):
        embedding_matrix(pa.array([1.0, 2.0]))


def test_normalise_in_place_and_center():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 8)).astype(np.float32) + 5
    x[3] = 0
    before = x.__array_interface__["data"][0]
    info = C.normalise_features(x, chunk_rows=128)
    assert x.__array_interface__["data"][0] == before
    norms = np.linalg.norm(x, axis=1)
    assert info == {"normalisation": "l2", "zero_rows": 1}
    assert norms[3] == 0 and np.allclose(np.delete(norms, 3), 1, atol=1e-5)
    y = rng.standard_normal((500, 8)).astype(np.float32) + 5
    expected = y - y.mean(axis=0)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert C.normalise_features(y, center=True, chunk_rows=64)["normalisation"] == "center+l2"
    np.testing.assert_allclose(y, expected, atol=1e-5)


def test_first_non_finite_row():
    x = np.zeros((100, 3), dtype=np.float32)
    assert C.first_non_finite_row(x) is None
    x[70, 1], x[90, 0] = np.inf, np.nan
    assert C.first_non_finite_row(x, chunk_rows=16) == 70


# ------------------------------------------------------------------------------------------ choices

def test_auto_k_rule():
    assert [C.auto_k(n) for n in (1, 2, 3, 4, 10, 50)] == [1, 1, 1, 2, 4, 8]
    assert C.auto_k(10_000) == 100 and C.auto_k(1_000_000) == 1000 and C.auto_k(50_000_000) == 7072
    ks = [C.auto_k(n) for n in range(1, 5000)]
    assert all(b >= a for a, b in zip(ks, ks[1:]))            # never fewer clusters for more data
    assert all(k <= max(1, n // 2) for n, k in zip(range(1, 5000), ks))
    with pytest.raises(CurateError):
        C.auto_k(0)


def test_training_sample_size_rule():
    # small k: far more than faiss's 256 per centroid (k = 4 of a million: all of it up to the floor)
    assert K.training_sample_size(1_000_000, 4) == 1_000_000
    assert K.training_sample_size(10_000_000, 4) == math.ceil(2 ** 24 / 4)
    assert K.training_sample_size(1_000_000, 64) == 2 ** 18
    # large k: 128 rows per centroid
    assert K.training_sample_size(10_000_000, 4096) == 128 * 4096
    assert K.training_sample_size(200_000, 512) == 65_536
    assert K.training_sample_size(50, 8) == 50


# ------------------------------------------------------------------------------------------ k-means

def test_kmeans_recovers_separated_groups():
    x, group = mixture(2000, d=16, groups=5, seed=1, noise=0.2)
    C.normalise_features(x)
    res = C.cluster_features(x, 5, iters=20, seed=0)
    # every cluster is one group and every group one cluster
    pairs = set(zip(res.labels.tolist(), group.tolist()))
    assert len(pairs) == 5
    np.testing.assert_allclose(np.linalg.norm(res.centroids, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(res.similarity, np.einsum("ij,ij->i", x, res.centroids[res.labels]), atol=1e-5)
    assert res.objective == pytest.approx(float(res.similarity.mean()), rel=1e-6)
    assert res.sizes.sum() == 2000 and res.moved == 0 and res.cap is None


def test_kmeans_same_seed_same_result_and_sampling():
    x, _ = mixture(3000, d=8, groups=7, seed=2, noise=0.6)
    C.normalise_features(x)
    a = C.cluster_features(x, 12, seed=3, sample_size=1000)
    b = C.cluster_features(x, 12, seed=3, sample_size=1000)
    assert a.sample_size == 1000
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    np.testing.assert_array_equal(a.similarity, b.similarity)


def test_assign_in_batches_matches_brute_force():
    rng = np.random.default_rng(0)
    x = unit(rng.standard_normal((777, 6)))
    cents = unit(rng.standard_normal((9, 6)))
    labels, sims = K.assign_in_batches(x, cents, batch_rows=100)
    full = x @ cents.T
    np.testing.assert_array_equal(labels, full.argmax(axis=1))
    np.testing.assert_allclose(sims, full.max(axis=1), atol=1e-5)
    rows = np.array([5, 700, 3])
    top, top_sims = K.assign_in_batches(x, cents, batch_rows=2, rows=rows, topk=3)
    np.testing.assert_array_equal(top, np.argsort(-full[rows], axis=1)[:, :3])


def test_kmeans_rejects_bad_k():
    x = unit(np.random.default_rng(0).standard_normal((10, 3)))
    with pytest.raises(CurateError, match="larger than the number of rows"):
        C.cluster_features(x, 11)
    with pytest.raises(CurateError, match="max-size-factor"):
        C.cluster_features(x, 2, max_size_factor=0.9)


# ------------------------------------------------------------------------------------------ soft cap

def test_cap_moves_the_periphery_to_the_nearest_centroid_with_room():
    # one big group and three small ones: k = 4 with a cap of 1.0·n/k forces moves out of the big one
    x, group = mixture(800, d=8, groups=4, seed=5, noise=0.3, weights=[70, 10, 10, 10])
    C.normalise_features(x)
    res = C.cluster_features(x, 4, seed=0, max_size_factor=1.0)
    plain = C.cluster_features(x, 4, seed=0)
    assert res.cap == 200 and res.sizes.max() <= 200 and res.sizes.sum() == 800
    changed = res.labels != plain.labels
    assert res.moved == int(changed.sum()) > 0
    # moved rows left an over-full cluster, and the rows that stayed there are its most typical ones
    for c in np.unique(plain.labels[changed]):
        stayed = plain.similarity[(plain.labels == c) & ~changed]
        left = plain.similarity[(plain.labels == c) & changed]
        assert stayed.min() >= left.max()
    full = x @ res.centroids.T
    np.testing.assert_allclose(res.similarity, full[np.arange(800), res.labels], atol=1e-5)
    assert res.objective <= res.objective_uncapped


@settings(max_examples=25, deadline=None)
@given(n=st.integers(20, 300), k=st.integers(2, 15), factor=st.sampled_from([1.0, 1.1, 1.5, 2.0]),
       seed=st.integers(0, 10 ** 6), candidates=st.integers(1, 8))
def test_cap_property(n, k, factor, seed, candidates):
    k = min(k, n)
    rng = np.random.default_rng(seed)
    x = unit(rng.standard_normal((n, 4)) + np.array([3, 0, 0, 0]) * (rng.random((n, 1)) < 0.7))
    cents = unit(rng.standard_normal((k, 4)))
    labels, sims = K.assign_in_batches(x, cents)
    cap = C.size_cap(n, k, factor)
    new, new_sims, moved = C.cap_cluster_sizes(x, cents, labels, sims, cap, candidates=candidates, batch_rows=7)
    sizes = np.bincount(new, minlength=k)
    assert sizes.max() <= cap and sizes.sum() == n
    assert moved == int((new != labels).sum())
    np.testing.assert_allclose(new_sims, (x @ cents.T)[np.arange(n), new], atol=1e-5)
    # clusters that were not over the cap lose nobody
    before = np.bincount(labels, minlength=k)
    for c in np.flatnonzero(before <= cap):
        assert set(np.flatnonzero(labels == c)) <= set(np.flatnonzero(new == c))


def test_size_cap_arithmetic_and_stats():
    assert C.size_cap(300, 3, 1.5) == 150 and C.size_cap(301, 3, 1.5) == 151 and C.size_cap(10, 3, 1.0) == 4
    s = C.size_stats(np.array([1, 10, 10, 100, 0]))  # mean 24.2
    assert (s["min"], s["median"], s["max"], s["empty"]) == (0, 10.0, 100, 1)
    assert s["max_over_min"] == 100.0 and sum(s["histogram"].values()) == 5
    assert s["histogram"][">=4x mean"] == 1 and s["histogram"]["0-0.25x mean"] == 2
    assert s["histogram"]["0.25-0.5x mean"] == 2


# ------------------------------------------------------------------------------------------ the command

def run_cli(cli_runner, *args):
    result = cli_runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result


@pytest.fixture
def emb(tmp_path):
    x, group = mixture(600, d=12, groups=6, seed=0, noise=0.4, weights=[30, 20, 10, 5, 3, 2])
    path = tmp_path / "emb.parquet"
    write_embeddings(path, x)
    return path, x


def test_cluster_command_writes_artifact_centroids_and_lineage(tmp_path, cli_runner, emb):
    path, x = emb
    out = tmp_path / "clusters.parquet"
    r = run_cli(cli_runner, "cluster", path, "--out", out, "--k", 8, "--max-size-factor", 1.5, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["k"] == 8 and summary["rows"] == 600 and "moved_by_the_cap" in summary
    assert {row["size_band"] for row in summary["size_bands"]} >= {"1-2x mean"}

    table, meta = A.read_artifact(out, kind="clusters")
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("cluster").type == pa.int32()
    assert table.schema.field("similarity").type == pa.float32()
    assert table.column("id").to_pylist() == list(range(600))
    emeta = A.read_meta(path)
    assert meta.inputs["embeddings"]["fingerprint"] == emeta.fingerprint
    assert meta.dataset == emeta.dataset
    p = meta.params
    assert (p["k"], p["k_rule"], p["iters"], p["seed"], p["normalisation"]) == (8, "given", 20, 0, "l2")
    assert p["sample_size"] == 600 and p["max_size_factor"] == 1.5 and p["max_cluster_size"] == 113
    assert p["moved"] == summary["moved_by_the_cap"] and max(p["sizes"]) <= 113

    centroids = np.load(A.sidecar_path(out, "centroids.npy"), allow_pickle=False)
    assert centroids.shape == (8, 12) and p["centroids"]["sidecar"] == "centroids.npy"
    xn = x.copy()
    C.normalise_features(xn)
    labels = table.column("cluster").to_numpy()
    np.testing.assert_allclose(table.column("similarity").to_numpy(),
                               np.einsum("ij,ij->i", xn, centroids[labels]), atol=1e-5)
    assert p["objective"] == pytest.approx(float(table.column("similarity").to_numpy().mean()), rel=1e-5)


def test_cluster_auto_k_parts_and_determinism(tmp_path, cli_runner):
    x, _ = mixture(500, d=8, groups=4, seed=4, noise=0.5)
    single, parts = tmp_path / "one.parquet", tmp_path / "parts"
    write_embeddings(single, x)
    write_embeddings(parts, x, parts=3)
    # parts written out of order on disk must give the same clustering as the single file
    (parts / "part-00000.parquet").rename(parts / "part-00009.parquet")
    outs = []
    for i, src in enumerate([single, single, parts]):
        out = tmp_path / f"c{i}.parquet"
        assert run_cli(cli_runner, "cluster", src, "--out", out, "--seed", 7, "-q").exit_code == 0
        outs.append(A.read_artifact(out))
    (t0, m0), (t1, m1), (t2, _) = outs
    assert m0.params["k"] == C.auto_k(500) == 23 and m0.params["k_rule"].startswith("auto")
    assert t0.equals(t1) and m0.params == m1.params and m0.fingerprint == m1.fingerprint
    assert t0.equals(t2)


def test_cluster_center_option(tmp_path, cli_runner, emb):
    path, _ = emb
    out = tmp_path / "c.parquet"
    assert run_cli(cli_runner, "cluster", path, "--out", out, "--k", 3, "--center", "-q").exit_code == 0
    assert A.read_meta(out).params["normalisation"] == "center+l2"


def test_cluster_group_cut_option(tmp_path, cli_runner, emb):
    path, _ = emb
    rules = {}
    for cut in ("row", "pair"):
        out = tmp_path / f"{cut}.parquet"
        assert run_cli(cli_runner, "cluster", path, "--out", out, "--k", 12, "--group-cut", cut, "-q").exit_code == 0
        p = A.read_meta(out).params
        rules[cut] = p["groups_rule"]
        assert p["groups_rule"].startswith(f"auto ({cut}): ") and len(p["groups"]) == 12
    assert float(rules["pair"].rsplit("= ", 1)[1]) <= float(rules["row"].rsplit("= ", 1)[1])
    r = run_cli(cli_runner, "cluster", path, "--out", tmp_path / "x.parquet", "--group-cut", "median")
    assert r.exit_code == 2 and "'median' is not one of 'row', 'pair'" in r.output


@pytest.mark.parametrize("case", ["k_too_big", "nan", "inf", "empty", "wrong_kind", "no_column", "exists"])
def test_cluster_bad_input(tmp_path, cli_runner, case):
    x, _ = mixture(40, d=4, groups=2, seed=0)
    path = tmp_path / "e.parquet"
    out = tmp_path / "c.parquet"
    args = ["cluster", path, "--out", out]
    if case == "k_too_big":
        write_embeddings(path, x)
        args += ["--k", 41]
        expect = "--k 41 is larger than the number of rows (40)"
    elif case in ("nan", "inf"):
        x[[17, 30], 2] = np.nan if case == "nan" else np.inf
        write_embeddings(path, x, ids=np.arange(100, 140))
        expect = "embedding of id 117 holds NaN or Inf (2 such rows in all)"
    elif case == "empty":
        write_embeddings(path, x[:0])
        expect = "empty artifact"
    elif case == "wrong_kind":
        write_embeddings(path, x, kind="clusters")
        expect = "is a 'clusters' artifact, expected 'embeddings'"
    elif case == "no_column":
        meta = A.make_meta("embeddings", {}, {}, {"fingerprint": "f"})
        W.write_artifact(pa.table({"id": [0, 1]}), path, meta)
        expect = "no 'embedding' column"
    else:
        write_embeddings(path, x)
        out.write_bytes(b"x")
        expect = "already exists"
    r = cli_runner.invoke(main, [str(a) for a in args])
    assert r.exit_code == 2, r.output
    assert expect in r.stderr and "Traceback" not in r.output
    assert not A.sidecar_path(out, "centroids.npy").exists()


def test_cluster_force_accepts_other_kind_with_embeddings(tmp_path, cli_runner):
    x, _ = mixture(60, d=4, groups=2, seed=0)
    path = tmp_path / "e.parquet"
    write_embeddings(path, x, kind="features")
    out = tmp_path / "c.parquet"
    assert run_cli(cli_runner, "cluster", path, "--out", out, "--k", 2, "--force", "-q").exit_code == 0
    assert A.read_meta(out).rows == 60


def test_gpus_option_is_checked():
    with pytest.raises(CurateError, match="faiss sees only"):
        K.resolve_gpus(K.resolve_gpus(None) + 1)
    assert K.resolve_gpus(0) == 0


def test_embeddings_with_duplicate_ids_are_refused(tmp_path):
    from cluster_curate.io.readers import read_embeddings
    x, _ = mixture(10, d=4, groups=2)
    d = tmp_path / "parts"
    meta = A.make_meta("embeddings", {}, {}, {"fingerprint": "f"})
    W.write_part(embeddings_table(x[:5], ids=[5, 6, 7, 8, 9]), d, "part-1.parquet", meta)
    W.write_part(embeddings_table(x[5:], ids=[0, 1, 2, 3, 7]), d, "part-0.parquet", meta)
    with pytest.raises(CurateError, match="id 7 appears more than once"):
        read_embeddings(d)
    assert pq.read_table(d / "part-0.parquet").num_rows == 5


def test_shared_direction_is_measured_and_warned(tmp_path, cli_runner):
    assert C.mean_resultant_length(unit([[1, 0], [-1, 0]])) == pytest.approx(0)
    assert C.mean_resultant_length(unit([[1, 0], [1, 0.01]])) == pytest.approx(1, abs=1e-4)
    rng = np.random.default_rng(0)
    x = (np.array([10.0] + [0.0] * 7) + rng.standard_normal((200, 8))).astype(np.float32)  # one shared direction
    path = tmp_path / "e.parquet"
    write_embeddings(path, x)
    r = cli_runner.invoke(main, ["cluster", str(path), "--out", str(tmp_path / "c.parquet"), "--k", "3", "-q"])
    assert r.exit_code == 0 and "consider --center" in " ".join(r.stderr.split())
    assert A.read_meta(tmp_path / "c.parquet").params["mean_resultant_length"] > 0.9


@pytest.mark.parametrize("n", [2, 50, 51])
def test_auto_k_runs_on_tiny_inputs(n):
    x, _ = mixture(n, d=6, groups=3, seed=n)
    C.normalise_features(x)
    res = C.cluster_features(x, C.auto_k(n), max_size_factor=1.5)
    assert res.sizes.sum() == n and res.sizes.max() <= C.size_cap(n, res.k, 1.5)
    assert len(res.centroids) == C.auto_k(n)


def test_group_clusters_merges_the_pieces_of_one_kind():
    from cluster_curate.selection import grouped_quotas, water_fill_quotas
    # one dominant kind (70% of rows) that k = 12 splits into many clusters, three rare kinds
    x, kind = mixture(2000, d=16, groups=4, seed=5, weights=[0.7, 0.1, 0.1, 0.1])
    C.normalise_features(x)
    res = C.cluster_features(x, 12, seed=0)
    majority = np.array([np.bincount(kind[res.labels == c], minlength=4).argmax() for c in range(12)])
    assert (majority == majority[np.argmax(res.sizes)]).sum() >= 6
    auto = G.group_clusters(res.centroids, min_similarity=res.objective)
    # auto: exactly one group per kind, numbered in order of first appearance
    assert len(set(zip(auto.tolist(), majority.tolist()))) == 4 == auto.max() + 1
    assert list(dict.fromkeys(auto.tolist())) == [0, 1, 2, 3]
    per_kind = lambda q: np.bincount(majority, weights=q, minlength=4)  # noqa: E731
    assert per_kind(water_fill_quotas(res.sizes, 400)).max() >= 200
    assert per_kind(grouped_quotas(res.sizes, auto, 400)).tolist() == [100, 100, 100, 100]
    # a count cuts the same tree; one group for everything, and k = 1, are fine
    assert G.group_clusters(res.centroids, n_groups=4).tolist() == auto.tolist()
    assert G.group_clusters(res.centroids, n_groups=1).tolist() == [0] * 12
    assert G.group_clusters(res.centroids[:1], min_similarity=0.5).tolist() == [0]
    with pytest.raises(CurateError, match="--groups 13 must be between 1 and k = 12"):
        G.group_clusters(res.centroids, n_groups=13)


def test_group_cut_similarity_row_and_pair():
    x, _ = mixture(1500, d=16, groups=4, seed=6, noise=0.6, weights=[0.55, 0.25, 0.15, 0.05])
    C.normalise_features(x)
    res = C.cluster_features(x, 16, seed=1)
    row, pair = G.group_cut_similarity(res, "row"), G.group_cut_similarity(res, "pair")
    assert row == pytest.approx(res.objective)
    # pair: the mean cosine of two rows of one cluster, |mean of its unit rows|², size-weighted over clusters
    direct = sum(np.linalg.norm(x[res.labels == c].mean(axis=0)) ** 2 * (res.labels == c).sum()
                 for c in range(16)) / len(x)
    assert pair == pytest.approx(direct, abs=0.02)
    assert row ** 2 <= pair <= row  # Jensen below, similarities <= 1 above
    # a lower cut joins more: pair gives no more groups than row
    n_groups = [G.group_clusters(res.centroids, min_similarity=t).max() + 1 for t in (row, pair)]
    assert n_groups[1] <= n_groups[0]
    with pytest.raises(CurateError, match="--group-cut must be one of row, pair"):
        G.group_cut_similarity(res, "centroid")


def test_group_clusters_tolerates_a_zero_centroid():
    c = np.array([[1, 0, 0], [0.99, 0.141, 0], [0, 0, 0], [0, 1, 0]], dtype=np.float32)
    assert G.group_clusters(c, min_similarity=0.9).tolist() == [0, 0, 1, 2]


def _two_rare_kinds_in_one_cluster(seed=0):
    """Three dense common kinds and two rare ones, clustered with k = 4: k-means must put two kinds together."""
    x, kind = mixture(1200, d=16, groups=5, seed=seed, noise=0.3, weights=[0.4, 0.3, 0.2, 0.06, 0.04])
    C.normalise_features(x)
    return x, kind, C.cluster_features(x, 4, seed=seed)


def test_split_mixed_clusters_cuts_a_cluster_that_holds_two_kinds():
    x, kind, res = _two_rare_kinds_in_one_cluster()
    purity = lambda labels: sum(np.bincount(kind[labels == c]).max() for c in np.unique(labels)) / len(kind)
    assert purity(res.labels) < 0.97  # the premise: some cluster mixes kinds
    out, cuts = G.split_mixed_clusters(x, res, G.group_cut_similarity(res, "pair"))
    assert cuts >= 1 and out.k == res.k + cuts == len(out.centroids) == len(out.sizes)
    assert purity(out.labels) > 0.99
    # every kind now has a cluster of its own, and the bookkeeping matches the rows
    assert len({np.bincount(kind[out.labels == c]).argmax() for c in range(out.k)}) == 5
    np.testing.assert_array_equal(out.sizes, np.bincount(out.labels, minlength=out.k))
    np.testing.assert_allclose(out.similarity, (x * out.centroids[out.labels]).sum(1), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out.centroids, axis=1), 1, atol=1e-5)
    assert out.objective == pytest.approx(out.similarity.mean(), abs=1e-6) and out.objective > res.objective
    # deterministic
    again, _ = G.split_mixed_clusters(x, res, G.group_cut_similarity(res, "pair"))
    np.testing.assert_array_equal(again.labels, out.labels)


def test_split_mixed_clusters_leaves_one_kind_and_small_halves_alone():
    x, kind, _ = _two_rare_kinds_in_one_cluster()
    pure = C.cluster_features(x, 5, seed=0)  # one cluster per kind: halves of a kind are alike
    out, cuts = G.split_mixed_clusters(x, pure, G.group_cut_similarity(pure, "pair"))
    assert cuts == 0 and out is pure
    # a kind of 10 rows inside a cluster of another kind: halves of fewer than SPLIT_MIN_ROWS rows are not cut
    big, rare = np.flatnonzero(kind == 0)[:200], np.flatnonzero(kind == 3)[:10]
    rows = np.concatenate([big, rare])
    one = C.cluster_features(x[rows], 1, seed=0)
    assert G.split_mixed_clusters(x[rows], one, G.group_cut_similarity(one, "pair"))[1] == 0
    assert G.split_mixed_clusters(x[rows], one, G.group_cut_similarity(one, "pair"), min_rows=8)[1] == 1


def test_cluster_split_mixed_option(tmp_path, cli_runner):
    x, _, _ = _two_rare_kinds_in_one_cluster()
    path = tmp_path / "e.parquet"
    write_embeddings(path, x)
    params = {}
    for name, args in {"auto": [], "given": ["--k", 4], "given+split": ["--k", 4, "--split-mixed"],
                       "off": ["--no-split-mixed"]}.items():
        out = tmp_path / f"{name}.parquet"
        r = run_cli(cli_runner, "cluster", path, "--out", out, *args)
        assert r.exit_code == 0, r.output
        params[name] = p = A.read_meta(out).params
        assert p["k"] == len(p["sizes"]) == len(p["groups"]) == len(np.load(A.sidecar_path(out, "centroids.npy")))
        labels = A.read_artifact(out)[0].column("cluster").to_numpy()
        assert labels.max() < p["k"]
        r = run_cli(cli_runner, "select", out, "--out", tmp_path / f"{name}-sel.parquet", "--fraction", 0.3, "-q")
        assert r.exit_code == 0, r.output
    assert params["given"]["split_mixed"] is None and params["given"]["k"] == 4
    assert params["off"]["split_mixed"] is None and params["off"]["k"] == C.auto_k(len(x))
    split = params["given+split"]["split_mixed"]
    assert split["k_means"] == 4 and split["cuts"] >= 1 and params["given+split"]["k"] == 4 + split["cuts"]
    assert split["rule"].startswith("a cluster is cut in two") and split["min_rows"] == G.SPLIT_MIN_ROWS
    assert params["auto"]["split_mixed"]["k_means"] == C.auto_k(len(x))


def test_uneven_sizes_warning_fires_only_when_there_is_something_to_do():
    """Issue 20 #9: over-clustering with --k auto gives uneven sizes on normal data (demo: ratio 61; real
    data 10-13) and says nothing; one dominant cluster, or a given small k without groups, warns."""
    from cluster_curate.clustering import uneven_sizes_warning
    # the demo's clusters (`make demo`, GSM8K fixture, k auto = 18): largest ÷ smallest 61
    demo = np.array([14, 27, 25, 6, 15, 1, 14, 15, 10, 15, 61, 22, 13, 8, 22, 12, 10, 10])
    assert uneven_sizes_warning(demo, k_given=False, grouped=True) is None
    assert uneven_sizes_warning(demo, k_given=False, grouped=False) is None
    real = np.r_[np.full(30, 40), np.full(7, 4)]  # ratio 10
    assert uneven_sizes_warning(real, k_given=False, grouped=True) is None
    dominant = np.r_[900, np.full(20, 10)]
    w = uneven_sizes_warning(dominant, k_given=False, grouped=True)
    assert w.startswith("one cluster holds 82% of the rows (900 of 1100, k = 21)") and "--center" in w
    paper = np.array([400, 300, 250, 20])  # k = 4 ranks, given
    w = uneven_sizes_warning(paper, k_given=True, grouped=False)
    assert "given --k 4 (largest ÷ smallest = 20)" in w and "--balance-power" in w
    assert uneven_sizes_warning(paper, k_given=True, grouped=True) is None  # groups take the quotas first
    assert uneven_sizes_warning(np.array([5, 5, 5, 5]), k_given=True, grouped=False) is None
    assert uneven_sizes_warning(np.array([7]), k_given=True, grouped=False) is None
    assert uneven_sizes_warning(np.array([10, 0, 1, 9]), k_given=True, grouped=False) is None  # empty ignored


def test_empty_clusters_are_apart_from_the_size_ratio_and_the_groups_holding_rows(tmp_path, cli_runner):
    """300 rows of 5 distinct vectors (60 copies each) in k auto = 18 clusters: 13 are empty. cluster said
    "max / min size 1" beside sizes 0 / 0 / 60 while report said 60 for the same artifact, and "13 groups" with rows
    per group min 0 counted groups of empty clusters alone. Both give the ratio over the clusters holding rows,
    labelled so, the empty ones on a line of their own, and say how many groups hold rows."""
    x = np.repeat(np.abs(np.random.default_rng(0).standard_normal((5, 16))).astype(np.float32), 60, axis=0)
    path, out = tmp_path / "emb.parquet", tmp_path / "c.parquet"
    write_embeddings(path, x)
    s = json.loads(run_cli(cli_runner, "cluster", path, "--out", out, "--json").stdout)
    assert (s["k"], s["empty_clusters"], s["cluster_size"]["max"], s["max_over_min_size"]) == (18, 13, 60, 1.0)
    p = A.read_meta(out).params
    groups, holding = len(set(p["groups"])), len({g for g, n in zip(p["groups"], p["sizes"]) if n})
    assert holding == 5 < groups
    table = " ".join(run_cli(cli_runner, "cluster", path, "--out", out, "--overwrite").output.split())
    assert "largest ÷ smallest non-empty │ 1 │" in table and "empty clusters │ 13 │" in table
    assert f"groups │ {groups} groups of clusters, {holding} holding rows │" in table
    assert json.loads(run_cli(cli_runner, "report", out, "--json").stdout)["clusters"]["max_over_min_size"] == 1.0
    report = " ".join(run_cli(cli_runner, "report", out).output.split())
    assert "largest ÷ smallest non-empty │ 1 │" in report and "empty clusters │ 13 │" in report
    assert f"groups │ {groups} ({holding} holding rows) │" in report


def test_a_sample_size_below_k_is_raised_to_k_with_a_warning_and_recorded_so(tmp_path, cli_runner, emb):
    """--sample-size 10 with k = 20 trained on 20 rows (one per centroid at least) without a word, and the params
    said the size was "given (--sample-size)": warned in one line, before the k-means, and recorded as raised."""
    path, _ = emb
    out = tmp_path / "c.parquet"
    r = run_cli(cli_runner, "cluster", path, "--out", out, "--k", 20, "--sample-size", 10, "--groups", "none",
                "--kinds", "none")
    assert r.exit_code == 0, r.output
    assert ("WARNING: --sample-size 10 is below k = 20: k-means trains on at least one row per centroid, so on 20 "
            "rows") in " ".join(r.output.split())
    p = A.read_meta(out).params
    assert p["sample_size"] == 20 and p["sample_rule"] == "given (--sample-size 10), raised to k = 20"
    r = run_cli(cli_runner, "cluster", path, "--out", out, "--k", 20, "--sample-size", 100, "--overwrite", "-q",
                "--groups", "none", "--kinds", "none")
    assert "--sample-size" not in r.output and A.read_meta(out).params["sample_rule"] == "given (--sample-size)"
