"""Clustering speed and quality: the `cluster` path (faiss) against scikit-learn KMeans, in one run.

Target (issue 4): 200,000 x 256 float32, k = 512, 20 iterations, the same thread count for both: the faiss
path >= 10x faster than scikit-learn `KMeans(algorithm="lloyd", n_init=1)` at an objective within 1%.

Data: a 1,000-group Gaussian mixture with Zipf group sizes and per-group spread (rows L2-normalised, as
`cluster` normalises them), so clusters are uneven and overlap as real features do.

Rows of the table (all timed here, one thread each: OMP/OpenBLAS/faiss limited to --threads):
  sklearn, same init       KMeans(lloyd, n_init=1, max_iter=20, tol=0) on all rows, started from the very
                           centroids the faiss path starts from (k-means++ seeds, kmeans.initial_centroids)
  sklearn, k-means++       the same with scikit-learn's own default init (its greedy k-means++ is timed too)
  faiss, all rows          Euclidean Lloyd in faiss on every row, same init
  faiss, default sample    Euclidean Lloyd on the `cluster` training sample (128 rows per centroid), then
                           every row assigned: the `cluster` path with Euclidean centroids, same init
  faiss, 32 per centroid   the same on a 4x smaller sample (where the time would have to come from for 10x)
  cluster (spherical)      clustering.cluster_features exactly as `cluster` runs it (sample, k-means++ on it,
                           spherical Lloyd, batch assignment), init included in its time
Objective: SSE (sum of squared distances of every row to its nearest centroid, the k-means objective) over
all 200,000 rows, from each method's final centroids; the spherical run is also compared with sklearn on
mean cosine similarity (sklearn's centroids normalised).

    .venv/bin/python benchmarks/bench_cluster.py [--quick] [--threads 1] [--repeats 1]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

from common import RESULTS, parser, smoke_table, write_results
TARGET_SPEEDUP, TARGET_GAP = 10.0, 0.01


def main() -> None:
    ap = parser(__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per method (the median is reported)")
    ap.add_argument("--quick", action="store_true", help="20,000 x 64, k = 64: a smoke run")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--render-only", action="store_true", help="rewrite cluster.md from cluster.json")
    args = ap.parse_args()
    if args.render_only:
        saved = json.loads((RESULTS / "cluster.json").read_text())
        write_results("cluster", render(saved["rows"], saved["verdict"], saved["env"]), saved, command=False)
        return
    if args.quick:
        args.n, args.d, args.k = 20_000, 64, 64
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import faiss
    import numpy as np
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    from cluster_curate import clustering as C
    from cluster_curate import kmeans as K

    faiss.omp_set_num_threads(args.threads)
    x = mixture(args.n, args.d, groups=1000, seed=0)
    n, d, k, iters = args.n, args.d, args.k, args.iters

    def sse(centroids):
        index = faiss.IndexFlatL2(d)
        index.add(np.ascontiguousarray(centroids, dtype=np.float32))
        dist, _ = index.search(x, 1)
        return float(dist.sum(dtype=np.float64))

    def mean_cos(centroids):
        c = np.ascontiguousarray(centroids, dtype=np.float32).copy()
        C.normalise_features(c)
        _, sims = K.assign_in_batches(x, c)
        return float(sims.mean(dtype=np.float64))

    default_sample = K.training_sample_size(n, k)
    sample = K.training_sample(x, default_sample, seed=0)
    init = K.initial_centroids(sample, k, seed=0)

    def timed(fn):
        times, out = [], None
        for _ in range(args.repeats):
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times), times, out

    def faiss_euclidean(sample_size):
        model = K.kmeans_faiss(x, k, iters=iters, seed=0, sample_size=sample_size, gpus=0, spherical=False,
                               init=init)
        index = faiss.IndexFlatL2(d)
        index.add(model.centroids)
        for s in range(0, n, 65536):  # every row assigned, as `cluster` does
            index.search(x[s:s + 65536], 1)
        return model.centroids

    rows = []

    def record(name, sample_rows, init_note, secs, times, centroids, cos=None):
        rows.append({"method": name, "train rows": sample_rows, "init": init_note, "seconds": round(secs, 2),
                     "runs": [round(t, 2) for t in times], "sse": sse(centroids),
                     "mean_cos": mean_cos(centroids) if cos is None else cos})
        print(f"  {name}: {secs:.2f} s", flush=True)

    print(f"data: {n} x {d}, k = {k}, {iters} iterations, {args.threads} thread(s), sample {default_sample}",
          flush=True)
    with threadpool_limits(args.threads):
        secs, times, km = timed(lambda: KMeans(k, init=init, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd",
                                               random_state=0).fit(x))
        record("sklearn KMeans, same init", n, "same k-means++ seeds", secs, times, km.cluster_centers_)
        sk_iters = int(km.n_iter_)
        secs, times, km2 = timed(lambda: KMeans(k, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd",
                                                random_state=0).fit(x))
        record("sklearn KMeans, its k-means++", n, "sklearn greedy k-means++ (timed)", secs, times,
               km2.cluster_centers_)
    secs, times, cents = timed(lambda: faiss_euclidean(n))
    record("faiss, all rows", n, "same k-means++ seeds", secs, times, cents)
    secs, times, cents = timed(lambda: faiss_euclidean(default_sample))
    record("faiss, default sample (cluster path, Euclidean)", default_sample, "same k-means++ seeds", secs, times,
           cents)
    small = min(n, 32 * k)
    secs, times, cents = timed(lambda: faiss_euclidean(small))
    record("faiss, 32 rows per centroid", small, "same k-means++ seeds", secs, times, cents)
    secs, times, res = timed(lambda: C.cluster_features(x, k, iters=iters, seed=0, gpus=0))
    record("cluster (spherical, as shipped)", res.sample_size, "k-means++ on the sample (timed)", secs, times,
           res.centroids, cos=res.objective)

    base = rows[0]
    for r in rows:
        r["speedup_vs_sklearn_same_init"] = round(base["seconds"] / r["seconds"], 2)
        r["speedup_vs_sklearn_default"] = round(rows[1]["seconds"] / r["seconds"], 2)
        r["sse_gap_vs_sklearn"] = round(r["sse"] / base["sse"] - 1, 5)
        r["cos_gap_vs_sklearn"] = round(r["mean_cos"] / base["mean_cos"] - 1, 5)

    product, shipped, sk_default = rows[3], rows[-1], rows[1]
    shipped["cos_gap_vs_sklearn_default"] = round(shipped["mean_cos"] / sk_default["mean_cos"] - 1, 5)
    product["sse_gap_vs_sklearn_default"] = round(product["sse"] / sk_default["sse"] - 1, 5)
    verdict = {
        "shipped (spherical) speedup vs sklearn same init": shipped["speedup_vs_sklearn_same_init"],
        "shipped (spherical) speedup vs sklearn default": shipped["speedup_vs_sklearn_default"],
        "shipped (spherical) mean-cos gap vs sklearn same init": shipped["cos_gap_vs_sklearn"],
        "shipped (spherical) mean-cos gap vs sklearn default": shipped["cos_gap_vs_sklearn_default"],
        "Euclidean cluster path SSE gap vs sklearn default": product["sse_gap_vs_sklearn_default"],
        "speedup (cluster path vs sklearn, same init)": product["speedup_vs_sklearn_same_init"],
        "speedup (cluster path vs sklearn default)": product["speedup_vs_sklearn_default"],
        "objective gap (SSE)": product["sse_gap_vs_sklearn"],
        "target_speedup": TARGET_SPEEDUP, "target_gap": TARGET_GAP,
        "speed_met": product["speedup_vs_sklearn_same_init"] >= TARGET_SPEEDUP,
        "objective_met": abs(product["sse_gap_vs_sklearn"]) <= TARGET_GAP,
    }
    env = {"n": n, "d": d, "k": k, "iters": iters, "sklearn_iterations_run": sk_iters, "threads": args.threads,
           "repeats": args.repeats, "default_sample": default_sample, "faiss": faiss.__version__,
           "sklearn": __import__("sklearn").__version__, "numpy": np.__version__, "cpu": platform.processor() or
           platform.machine(), "cores": os.cpu_count(), "load_avg_at_end": os.getloadavg()[0],
           "gpus_seen_by_faiss": faiss.get_num_gpus()}
    md = render(rows, verdict, env)
    if args.quick:
        print(smoke_table(md))
    elif args.no_write:
        print(md)
    else:
        write_results("cluster", md, {"env": env, "rows": rows, "verdict": verdict}, command=False)


def mixture(n, d, groups, seed):
    """Zipf-sized Gaussian groups with spreads from 0.5x to 1.5x, L2-normalised rows (float32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, groups + 1)
    group = rng.choice(groups, size=n, p=w / w.sum())
    centres = rng.standard_normal((groups, d)).astype(np.float32)
    spread = rng.uniform(0.5, 1.5, groups).astype(np.float32)
    x = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 50_000):
        g = group[s:s + 50_000]
        x[s:s + 50_000] = centres[g] + rng.standard_normal((len(g), d), dtype=np.float32) * spread[g, None]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def render(rows, verdict, env) -> str:
    lines = [
        "# Clustering benchmark (issue 4)",
        "",
        f"{env['n']:,} x {env['d']} float32 (1,000-group Zipf mixture, L2-normalised), k = {env['k']}, "
        f"{env['iters']} iterations, **{env['threads']} thread** for every method "
        f"(faiss {env['faiss']}, scikit-learn {env['sklearn']}, {env['cores']} cores shared with other jobs; "
        f"load average {env['load_avg_at_end']:.1f} at the end). Median of {env['repeats']} run(s). "
        f"Objective: SSE of all rows to their nearest centroid (lower is better); gap relative to sklearn "
        f"with the same init.",
        "",
        "| method | train rows | init | seconds | speed-up vs sklearn (same init) | vs sklearn default | SSE | "
        "SSE gap | mean cos |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['train rows']:,} | {r['init']} | {r['seconds']:.2f} | "
                     f"{r['speedup_vs_sklearn_same_init']:.2f}x | {r['speedup_vs_sklearn_default']:.2f}x | "
                     f"{r['sse']:.1f} | {r['sse_gap_vs_sklearn']:+.2%} | {r['mean_cos']:.4f} |")
    lines += [
        "",
        f"Target: >= {TARGET_SPEEDUP:g}x at an objective within {TARGET_GAP:.0%}.",
        "",
        f"- Against scikit-learn as configured by the issue (`KMeans(algorithm='lloyd', n_init=1)`, its default "
        f"greedy k-means++ init, timed): the shipped spherical path is "
        f"**{verdict['shipped (spherical) speedup vs sklearn default']:.2f}x faster at "
        f"{verdict['shipped (spherical) mean-cos gap vs sklearn default']:+.2%} mean cosine** (its objective; "
        f"higher is better), the Euclidean cluster path {verdict['speedup (cluster path vs sklearn default)']:.2f}x "
        f"at {verdict['Euclidean cluster path SSE gap vs sklearn default']:+.2%} SSE: "
        f"**{'met' if verdict['shipped (spherical) speedup vs sklearn default'] >= TARGET_SPEEDUP and verdict['shipped (spherical) mean-cos gap vs sklearn default'] >= -TARGET_GAP else 'NOT met'}**.",
        f"- Against scikit-learn handed the very same starting centroids (iterations only): "
        f"**{verdict['speedup (cluster path vs sklearn, same init)']:.2f}x** (Euclidean, "
        f"{verdict['objective gap (SSE)']:+.2%} SSE) and "
        f"{verdict['shipped (spherical) speedup vs sklearn same init']:.2f}x (spherical, "
        f"{verdict['shipped (spherical) mean-cos gap vs sklearn same init']:+.2%} mean cosine): speed target "
        f"**{'met' if verdict['speed_met'] else 'NOT met'}**, objective target "
        f"{'met' if verdict['objective_met'] else 'NOT met'}.",
        "",
        "Why: on a CPU both libraries spend their time in the same SGEMM (n x k x d multiply-adds per "
        "iteration), so at equal threads faiss's per-iteration cost is close to scikit-learn's (compare "
        "'faiss, all rows'). Against sklearn's defaults most of the gain is its greedy k-means++ over all rows "
        f"(about {rows[1]['seconds'] - rows[0]['seconds']:.0f} s of its {rows[1]['seconds']:.0f} s here), which "
        "`cluster` runs on 8 rows per centroid with a matching objective. The rest comes from training on a "
        "sample and assigning the rest once; the "
        "sample is sized for quality (128 rows per centroid kept the objective within ~0.5% of training on "
        "everything), and 4x less (the 32-per-centroid row) is where a ~10x CPU speed-up would have to come "
        "from, at a visibly worse objective. On a GPU (faiss-gpu, used automatically) the same code runs "
        "the GEMMs on the device; this machine has none, so that is not measured here.",
        "",
        "The spherical row (what `cluster` ships: unit-length centroids, cosine) is judged on mean cosine "
        "similarity, its own objective (sklearn's centroids normalised for the comparison): "
        f"{verdict['shipped (spherical) speedup vs sklearn same init']:.2f}x faster than sklearn with the same "
        f"init at {verdict['shipped (spherical) mean-cos gap vs sklearn same init']:+.2%} mean cosine, and "
        f"{verdict['shipped (spherical) speedup vs sklearn default']:.2f}x faster than sklearn's default "
        f"(its greedy k-means++ over all rows) at {verdict['shipped (spherical) mean-cos gap vs sklearn default']:+.2%}"
        ". Its SSE is not comparable (unit-length centroids sit on the sphere, not at the cluster means). "
        "The Euclidean cluster path against sklearn's default: "
        f"{verdict['Euclidean cluster path SSE gap vs sklearn default']:+.2%} SSE.",
        "",
        f"sklearn ran {env['sklearn_iterations_run']} iterations (tol = 0). Command: "
        "`.venv/bin/python benchmarks/bench_cluster.py`",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
