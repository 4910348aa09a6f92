"""The text feature's fit (`embed --features text`): our randomized SVD against scikit-learn's.

`TextFeaturizer.fit` counts word 1-2-grams and fits a 256-dimensional basis by randomized SVD. The basis used
to be scikit-learn's TruncatedSVD(algorithm="randomized", n_iter=7) step by step; it now does every dense
factorisation on the short side of the matrix (features/text.py). This measures, on real prompts (GSM8K
questions, then GSM8K and Code Alpaca together), the seconds of the basis fit both ways, median of --repeats,
in the same process, and how far the two bases and the transformed rows are apart.

    .venv/bin/python benchmarks/bench_text_fit.py [--repeats 3]
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from common import DATA, parser, write_results


def prompts() -> list[str]:
    gsm8k = [json.loads(line)["question"] for line in (DATA / "gsm8k" / "train.jsonl").read_text().splitlines()]
    alpaca = [r["instruction"] + ("\n" + r["input"] if r.get("input") else "")
              for r in json.loads((DATA / "code_alpaca" / "code_alpaca_2k.json").read_text())]
    return gsm8k + alpaca


def sklearn_basis(x, k: int, seed: int) -> np.ndarray:
    from sklearn.decomposition import TruncatedSVD
    return TruncatedSVD(n_components=k, algorithm="randomized", n_iter=7, random_state=seed).fit(x).components_


def measure(texts: list[str], repeats: int, dim: int = 256) -> dict:
    from cluster_curate.features.text import TextFeaturizer, _fit_counts, _randomized_svd_basis, _Words
    f = TextFeaturizer(dim=dim)
    t0 = time.perf_counter()
    counts, _, terms = _fit_counts(_Words.of(texts), f.max_features, f.min_df)
    count_s = time.perf_counter() - t0
    f.idf = np.ones(len(terms))
    x = f._weigh(counts)
    k = min(dim, x.shape[0] - 1, x.shape[1] - 1)

    def timed(fn):
        times, out = [], None
        for _ in range(repeats):
            t = time.perf_counter()
            out = fn(x, k, 0)
            times.append(time.perf_counter() - t)
        return out, statistics.median(times)
    ours, ours_s = timed(_randomized_svd_basis)
    theirs, theirs_s = timed(sklearn_basis)
    flip = np.sign(np.sum(ours * theirs, axis=1))  # each a singular vector up to its sign
    theirs = theirs * flip[:, None]
    rows_ours = np.asarray(x @ ours.T, dtype=np.float32)
    rows_theirs = np.asarray(x @ theirs.T, dtype=np.float32)
    return {"rows": len(texts), "terms": x.shape[1], "k": k, "count_seconds": count_s,
            "ours_seconds": ours_s, "sklearn_seconds": theirs_s, "speedup": theirs_s / ours_s,
            "basis_max_abs_diff": float(np.abs(ours - theirs).max()),
            "rows_max_abs_diff": float(np.abs(rows_ours - rows_theirs).max()),
            "rows_equal_fraction": float((rows_ours == rows_theirs).mean())}


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="2000,7473,0", help="first N prompts; 0 = all")
    a = ap.parse_args(argv)
    texts = prompts()
    results = []
    for n in (int(s) for s in a.sizes.split(",")):
        r = measure(texts[:n] if n else texts, a.repeats)
        results.append(r)
        print(f"{r['rows']:>6} rows {r['terms']:>6} terms: basis {r['ours_seconds']:.2f} s, scikit-learn "
              f"{r['sklearn_seconds']:.2f} s ({r['speedup']:.1f}x); counting {r['count_seconds']:.2f} s; "
              f"basis within {r['basis_max_abs_diff']:.1e}, rows within {r['rows_max_abs_diff']:.1e} "
              f"({100 * r['rows_equal_fraction']:.2f}% of floats equal)", flush=True)
    md = ["# Text feature fit: our randomized SVD vs scikit-learn's", "",
          f"`{' '.join(['python benchmarks/bench_text_fit.py', *(argv or [])])}`; median of {a.repeats}, "
          "both in one process, on GSM8K questions then GSM8K + Code Alpaca prompts (tf weighting, 256 "
          "dimensions, a vocabulary of at most 32,768 word 1-2-grams).", "",
          "| prompts | terms | ours (s) | scikit-learn (s) | speed-up | counting (s) | basis max abs diff | "
          "rows max abs diff | row floats equal |", "|---|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['rows']} | {r['terms']} | {r['ours_seconds']:.2f} | {r['sklearn_seconds']:.2f} | "
           f"{r['speedup']:.1f}x | {r['count_seconds']:.2f} | {r['basis_max_abs_diff']:.1e} | "
           f"{r['rows_max_abs_diff']:.1e} | {100 * r['rows_equal_fraction']:.2f}% |" for r in results]
    write_results("text_fit", md, {"argv": argv or [], "results": results}, argv, command=False)


if __name__ == "__main__":
    main()
