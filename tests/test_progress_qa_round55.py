"""Progress at scale (QA round 55): `cluster` told nothing between its k-means line and its summary (34 s at 200k
rows, hours at 10M), and `embed` nothing while it read the data and fitted the text basis (40 s at 200k). Each
phase now shows a bar (plain log lines off a terminal, checked here: the CLI runner's stderr is no terminal), with
a log line every console.LOG_EVERY_S seconds (0 here, so that a small input shows them); a phase over before its
first line is due says nothing, so that a refusal after it stays the one line on stderr."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cluster_curate import clustering as C
from cluster_curate import kmeans as K
from cluster_curate.cli import main
from embeddings_factory import mixture, write_embeddings


def _line(description: str, done: str, unit: str) -> re.Pattern:
    """A finished bar's log line (console._Plain)."""
    return re.compile(rf"^{re.escape(description)}: {re.escape(done)}/{re.escape(done)} {unit} "
                      rf"\([0-9.,e+-]+ {unit}/s so far, ETA 0s\)$", re.M)


def _faiss_in_one_call(sample, init, iters, seed, spherical):
    """What kmeans_faiss computed before: faiss's Clustering.train with niter = iters, in one call."""
    from cluster_curate.faiss_build import import_faiss
    faiss = import_faiss()
    n, d = sample.shape
    k = len(init)
    cp = faiss.ClusteringParameters()
    cp.niter, cp.seed, cp.spherical, cp.verbose = iters, seed, spherical, False
    cp.max_points_per_centroid, cp.min_points_per_centroid = n // k + 1, 1
    clus = faiss.Clustering(d, k, cp)
    faiss.copy_array_to_vector(np.ascontiguousarray(init, np.float32).ravel(), clus.centroids)
    clus.train(sample, faiss.IndexFlatIP(d) if spherical else faiss.IndexFlatL2(d))
    stats = clus.iteration_stats
    return (faiss.vector_float_to_array(clus.centroids).reshape(k, d),
            [float(stats.at(i).obj) / n for i in range(stats.size())])


def _rows(case: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if case == "repeated rows":  # clusters left empty (faiss splits others) and an early stop
        return rng.standard_normal((20, 16))[rng.integers(20, size=3000)]
    if case == "as many rows as clusters":  # faiss's corner case: the sample is the centroids
        return rng.standard_normal((30, 8))
    return mixture(4000, d=24, groups=12, seed=1, noise=0.8)[0]


@pytest.mark.parametrize("case, k, iters", [("blobs", 40, 20), ("repeated rows", 40, 20),
                                            ("as many rows as clusters", 30, 20), ("blobs", 7, 60)])
@pytest.mark.parametrize("spherical", [True, False])
def test_kmeans_told_per_iteration_is_faiss_training_bit_for_bit(case, k, iters, spherical):
    x = np.ascontiguousarray(_rows(case), dtype=np.float32)
    if spherical:
        C.normalise_features(x)
    init = K.initial_centroids(x, k, 0)
    want, history = _faiss_in_one_call(x, init, iters, 0, spherical)
    told = []
    model = K.kmeans_faiss(x, k, iters=iters, seed=0, sample_size=len(x), gpus=0, spherical=spherical, init=init,
                           on_iteration=told.append)
    assert np.array_equal(model.centroids, want) and model.objective_history == history
    # one call per iteration that ran: an early convergence does not count the iterations it left (review)
    assert told == [1] * len(model.objective_history) and len(told) <= iters


def test_assignment_tells_each_batch():
    x, _ = mixture(1000, d=8, groups=4)
    told = []
    K.assign_in_batches(x, x[:4], batch_rows=300, on_batch=told.append)
    assert told == [300, 300, 300, 100]


@pytest.fixture
def every_step(monkeypatch):
    from cluster_curate import console
    monkeypatch.setattr(console, "LOG_EVERY_S", 0.0)


@pytest.fixture
def emb(tmp_path):
    x, _ = mixture(600, d=12, groups=6, seed=0, noise=0.4)
    write_embeddings(tmp_path / "emb.parquet", x)
    return tmp_path / "emb.parquet"


def test_cluster_tells_the_training_and_the_assignment(emb, tmp_path, cli_runner, every_step):
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "c.parquet"), "--k", "8"],
                          catch_exceptions=False)
    assert r.exit_code == 0, r.output
    err = r.stderr
    head = "k-means: 600 rows x 12 dims, k = 8, training on 600 rows, 20 iterations, cpu\n"
    # converged early: the bar stops at the iterations that ran (it claimed all 20: review)
    train = re.compile(r"^k-means: train: ([0-9]+)/20 iterations \(", re.M)
    assign = _line("k-means: assign", "600", "rows")
    assert int(train.findall(err)[-1]) == max(int(n) for n in train.findall(err)) < 20, err
    assert head in err and train.search(err) and assign.search(err), err
    assert err.index(head) < train.search(err).start() < assign.search(err).start()
    assert re.search(r"^k-means: train: 1/20 iterations \(", err, re.M), err  # a line per iteration
    # --k auto cuts mixed clusters after k-means: said when it begins
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "a.parquet")], catch_exceptions=False)
    assert "k-means: cutting mixed clusters (2-means inside each of the 25)\n" in r.stderr, r.stderr


def test_cluster_progress_is_quiet_under_quiet_and_json_keeps_stdout_one_object(emb, tmp_path, cli_runner,
                                                                                  every_step):
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "c.parquet"), "--k", "8",
                                 "--kinds", "none", "-q"], catch_exceptions=False)
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == "", r.stderr
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "j.parquet"), "--k", "8",
                                 "--kinds", "none", "--json"], catch_exceptions=False)
    assert json.loads(r.stdout)["k"] == 8  # one JSON object: the progress is on stderr (README, "JSON output")
    assert re.search(r"^k-means: train: [0-9]+/20 iterations \(", r.stderr, re.M), r.stderr


def test_cluster_tells_the_reading_of_the_answers_and_the_prompts(tmp_path, cli_runner, every_step):
    import skillfamily
    skillfamily.write_instance(tmp_path, 1002, "short", test_per_skill=1)
    data = tmp_path / "train.jsonl"
    r = cli_runner.invoke(main, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "-q"],
                          catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = len(data.read_text().splitlines())
    # the answers the embeddings keep: the data is read only for the prompts, when clusters answer alike
    r = cli_runner.invoke(main, ["cluster", str(tmp_path / "e.parquet"), "--out", str(tmp_path / "c.parquet")],
                          catch_exceptions=False)
    assert r.exit_code == 0, r.output
    err = r.stderr
    assert re.search(r"^kinds: comparing the answers of the \d+ clusters$", err, re.M), err
    assert _line("kinds: read the prompts", f"{rows:,}", "rows").search(err), err
    assert "kinds: comparing the prompts' words in the clusters that give the same answers\n" in err
    # --data given: its answers are read before k-means
    r = cli_runner.invoke(main, ["cluster", str(tmp_path / "e.parquet"), "--out", str(tmp_path / "d.parquet"),
                                 "--data", str(data)], catch_exceptions=False)
    read = _line("kinds: read the answers", f"{rows:,}", "rows").search(r.stderr)
    assert read and read.start() < r.stderr.index("k-means: "), r.stderr


def test_embed_tells_the_reading_the_sample_and_the_fit(tmp_path, cli_runner, fixtures_dir, every_step):
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [json.loads(line) for line in (fixtures_dir / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
    data = tmp_path / "train.parquet"  # a count known before the read (a JSON file's is not: lines every 5 s)
    pq.write_table(pa.Table.from_pylist(rows), data)
    r = cli_runner.invoke(main, ["embed", str(data), "--out", str(tmp_path / "e.parquet")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    err = r.stderr
    said = [_line("embed: read the data", "300", "rows"),
            _line("text: draw a 300-row sample", "300", "rows"),
            _line("text: fit the basis (300 rows: vocabulary, slot weights, a 256-dim SVD)", "9", "steps"),
            _line("embed", "300", "rows")]
    found = [s.search(err) if isinstance(s, re.Pattern) else re.search(re.escape(s), err) for s in said]
    assert all(found) and [m.start() for m in found] == sorted(m.start() for m in found), err
    r = cli_runner.invoke(main, ["embed", str(data), "--out", str(tmp_path / "q.parquet"), "-q"],
                          catch_exceptions=False)
    assert r.exit_code == 0 and r.stderr == "", r.stderr


def test_a_short_phase_says_nothing_off_a_terminal_so_a_refusal_stays_one_line(emb, tmp_path, cli_runner,
                                                                                fixtures_dir):
    """At the usual interval, phases over in less than LOG_EVERY_S print no line (the feature pass's own line
    stays as it was): a refusal after the text fit, e.g. a job-array piece run with other options, is still the
    only line on stderr."""
    r = cli_runner.invoke(main, ["cluster", str(emb), "--out", str(tmp_path / "c.parquet"), "--k", "8",
                                 "--kinds", "none"], catch_exceptions=False)
    assert r.exit_code == 0 and "k-means: train" not in r.stderr and "k-means: assign" not in r.stderr, r.stderr
    data = tmp_path / "d.jsonl"
    gsm = fixtures_dir / "gsm8k" / "train-300.jsonl"
    data.write_text("".join(gsm.read_text().splitlines(keepends=True)[:120]))
    argv = ["embed", str(data), "--out", str(tmp_path / "e"), "--num-parts", "2", "--features", "text"]
    ok = cli_runner.invoke(main, [*argv, "--part-index", "0", "--dim", "16", "-q"], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    r = cli_runner.invoke(main, [*argv, "--part-index", "1", "--dim", "24"])
    assert r.exit_code == 2 and r.stderr.startswith("ERROR: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_shard_tells_the_writing_of_the_shards(tmp_path, cli_runner, fixtures_dir, every_step):
    """`shard`'s bar covered the read of the data only; assembling the shards (most of its time at 200k rows on 64
    shards) said nothing."""
    data = fixtures_dir / "gsm8k" / "train-300.jsonl"
    out = tmp_path / "r"
    r = cli_runner.invoke(main, ["run", str(data), "--out", str(out), "--fraction", "0.5", "-n", "3"],
                          catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert _line("shard: write the shards", "3", "shards").search(r.stderr), r.stderr
