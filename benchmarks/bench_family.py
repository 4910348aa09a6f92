"""Selection-only quality on the benchmark family (benchmarks/skillfamily.py): many instances, no training.

For each instance of a split (dev or test; instances in seed order from the start of its range), embed the
prompts once through the tool (`cluster-curate embed`, the defaults), then select 31% with every candidate
mechanism and compare the selection's rows per skill with the oracle's (water-filling by the true skill labels):

- coverage      Σ_skill min(count, oracle count) / Σ oracle count
- worst ratio   min over skills of count / oracle count
- dominant      the most frequent skill's count / its oracle count (> 1: it took more than its share)
- twin recall   the rare member of each near-twin pair: count / oracle count (mean over the pairs)

Beside random, a second reference, `wording`: one perfect cluster per (skill, template) and quotas over them
without groups, the ceiling of a mechanism whose clusters follow the wording and whose groups never join two
wordings of one skill.

A mechanism is a clustering + grouping of the embeddings followed by the tool's own quota and in-cluster
selection (`selection.select_rows`); `default` repeats what `cluster` + `select --budget` do with their
defaults, and `--check-cli N` re-runs the first N instances' default through the tool's commands and checks
that the ids are the same. Writes benchmarks/results/family_<split>.md/.json. The mechanisms (MECHANISMS) are
the tool's options (flat, pair, nosplit) and prototypes tried for issue 18 (see family_notes.md): hierarchical
k-means, local and nested cuts (lost); `answers`, which joins the wordings of one request by what their rows
answer (a prototype here in rounds 12-16, ahead on dev and test at the selection level; in the package since
round 17 as `cluster --kinds answers`, its default since round 20: family_notes.md); `answer-sets`, which also
joins the wordings that agreement cannot see by their sets of answers (round 22, lost on the trained dev check);
`answers-spread`, `answers` with each cluster's rows taken one answer of its kind at a time (round 23, lost on the
trained dev check); `answers-prop`, `answers` with `select --within answers` (round 24: family_notes.md). `default`
names the groups
alone (`cluster --kinds none`, the default until round 20), the name the stored results use. `--check-cli N`
checks `answers` against the commands too (with --responses short).
FEATURE/MECHANISM runs a mechanism on a feature prototype or another tool feature (FEATURES; `semantic`, the
bundled sentence encoder) instead of the tool's text feature; FEATURE/groupby keeps the tool's clusters and
groups them on FEATURE. `--responses worked` shows the response-reading mechanisms the worked solutions (the
prompts are the same). `--real` runs the mechanisms on bench_source_mix's real mix instead (family_real.md).

    python benchmarks/bench_family.py --split dev --instances 50 [--mechanisms default,flat,...] [--seeds 0]
    python benchmarks/bench_family.py --split test --mechanisms default    # once per round, defaults frozen
    python benchmarks/bench_family.py --real --mechanisms default,pair --seeds 0,1,2
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"  # as common.cli runs the commands: k-means' float sums depend on the thread count
import numpy as np  # noqa: E402 (after the thread count is fixed)
import pyarrow.parquet as pq

import common
import skillfamily
from cluster_curate import answer_kinds as AK
from cluster_curate import cluster_groups as G
from cluster_curate import clustering as C
from cluster_curate import kmeans as K
from cluster_curate.budget_sequence import Kinds
from cluster_curate.features.text import DEFAULT_TEXT_WEIGHTING
from cluster_curate.io.artifacts import read_meta
from cluster_curate.io.readers import embedding_matrix
from cluster_curate.selection import select_rows, water_fill_quotas
from cluster_curate.within_orders import order_within_cluster

FRACTION = 0.31


# ============================================================================================ mechanisms

_KMEANS: dict = {}


def kmeans_split(x, seed, split=True):
    """`cluster`'s k-means with its defaults (k auto, mixed clusters split); the mechanisms that group the same
    clusters differently share one run per feature matrix and seed."""
    key = (id(x), x.shape, seed, split)
    if key not in _KMEANS:
        if len(_KMEANS) > 16:
            _KMEANS.clear()
        k = C.auto_k(len(x))
        res = C.cluster_features(x, k, seed=seed, sample_size=K.training_sample_size(len(x), k), gpus=0)
        if split:
            res, _ = G.split_mixed_clusters(x, res, G.group_cut_similarity(res, "pair"))
        _KMEANS[key] = (x, res)  # x is kept so that its id is not reused while cached
    return _KMEANS[key][1]


def mech_default(x, seed, inst, cut="row", split=True):
    res = kmeans_split(x, seed, split)
    return res.labels, G.group_clusters(res.centroids, min_similarity=G.group_cut_similarity(res, cut))


def mech_flat(x, seed, inst):
    return kmeans_split(x, seed).labels, None


def mech_pair(x, seed, inst):
    return mech_default(x, seed, inst, cut="pair")


def mech_nosplit(x, seed, inst):
    return mech_default(x, seed, inst, split=False)


def hkm_groups(res, seed, ratio):
    g = max(1, min(res.k, int(np.ceil(ratio * np.sqrt(res.k)))))
    top = C.cluster_features(np.ascontiguousarray(res.centroids), g, seed=seed, gpus=0)
    return G.numbered_by_first_appearance(top.labels)


def mech_hkm(x, seed, inst, ratio=1.0, nested=False):
    """Hierarchical k-means (ssl-data-curation's recipe, two levels): the level-1 clusters (default k and split),
    then k-means of their centroids into ceil(ratio * sqrt(k)) groups; quotas balanced at each level (nested:
    the row cut's groups as a level between the two)."""
    res = kmeans_split(x, seed)
    top = hkm_groups(res, seed, ratio)
    if not nested:
        return res.labels, top
    row = G.group_clusters(res.centroids, min_similarity=G.group_cut_similarity(res, "row"))
    return res.labels, np.stack([top, row])


# ============================================================================================ feature prototypes

def context_weighted(prompts: list[str], dim: int = 256, first_pass: np.ndarray | None = None):
    """Prototype of a text feature that weighs the words that say which kind a prompt is above the slot
    fillers (topic nouns, frame words, operands): a term's weight is 1 - cos(its context, the global context),
    where its context is the sum of the (unit) term vectors of the rows that hold it. A noun that goes with
    every kind of request has the global context (weight ~0); "ten" in "add ten" goes with one request.
    With first_pass (cluster labels), a term's weight is instead 1 - its normalised entropy over those clusters
    (each cluster by its own rate of the term). Terms: word unigrams + bigrams of the lower-cased prompt,
    numbers masked as the tool's text feature masks them."""
    import re

    from scipy import sparse
    from sklearn.decomposition import TruncatedSVD

    from cluster_curate.features.text import mask_numbers
    word = re.compile(r"(?u)\b\w+\b")
    vocab: dict[str, int] = {}
    indptr, indices = [0], []
    for p in prompts:
        p = p.lower()
        words = word.findall(mask_numbers(p))
        terms = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
        for t in set(terms):
            indices.append(vocab.setdefault(t, len(vocab)))
        indptr.append(len(indices))
    x = sparse.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(prompts), len(vocab)))
    if first_pass is not None:
        # how evenly a term spreads over the clusters of a first pass, each cluster by its own rate of the
        # term (so a dominant kind's many clusters do not make its words look common): a slot filler has the
        # same rate everywhere (weight ~0), a word of one kind of request is in few clusters
        k = int(first_pass.max()) + 1
        onehot = sparse.csr_matrix((np.ones(len(first_pass)), (first_pass, np.arange(len(first_pass)))),
                                   shape=(k, len(first_pass)))
        sizes = np.asarray(onehot.sum(1)).ravel()
        rate = (sparse.diags(1 / np.maximum(sizes, 1)) @ (onehot @ x)).toarray()  # [k, V]
        r = rate / np.maximum(rate.sum(0, keepdims=True), 1e-12)
        ent = -(np.where(r > 0, r * np.log(np.maximum(r, 1e-300)), 0.0)).sum(0)
        w = np.clip(1.0 - ent / np.log(max(k, 2)), 0.0, 1.0)
    else:
        norms = np.sqrt(np.asarray(x.sum(1)).ravel())
        xn = sparse.diags(1 / np.maximum(norms, 1e-12)) @ x
        ctx = (x.T @ xn).toarray()  # [V, V]: context of each term
        np.fill_diagonal(ctx, 0.0)
        g = np.asarray(xn.sum(0)).ravel()
        cos = ctx @ g / (np.linalg.norm(ctx, axis=1) * np.linalg.norm(g) + 1e-12)
        w = np.clip(1.0 - cos, 0.0, 1.0)
    xw = x @ sparse.diags(w)
    rn = np.sqrt(np.asarray(xw.multiply(xw).sum(1)).ravel())
    xw = sparse.diags(1 / np.maximum(rn, 1e-12)) @ xw
    d = min(dim, min(xw.shape) - 1)
    z = TruncatedSVD(d, random_state=0).fit_transform(xw).astype(np.float32)
    z = np.ascontiguousarray(z)
    C.normalise_features(z)
    return z


def slot_weighted(prompts: list[str], dim: int = 256, alpha: float = 0.5, min_context: int = 5,
                  floor: float = 1.0, numbers: bool = False, bounded: float | None = None):
    """Prototype of the slot weighting (the package's is features/text.py; this one, with scikit-learn's SVD
    and no sample, is how the variants in family_notes.md were compared): a context (two words on one side)
    seen at least `min_context` times has an effective number of fillers; an occurrence weighs
    (max(fillers of its less crowded context, floor) / floor) ** -alpha, a bigram the smaller weight of its
    words. With `numbers`, a number where at most `floor` values stand is kept as written. Sublinear tf, l2,
    truncated SVD to dim."""
    import re
    from collections import Counter, defaultdict

    from scipy import sparse
    from sklearn.decomposition import TruncatedSVD

    from cluster_curate.features.text import _NUMBER

    def effective(counter):
        n = sum(counter.values())
        if n < min_context:
            return 1.0
        q = np.array(list(counter.values()), dtype=float) / n
        return float(np.exp(-(q * np.log(q)).sum()))

    word = re.compile(r"(?u)\b\w+\b")
    docs, lits = [], []
    for p in prompts:
        found = []
        masked = _NUMBER.sub(lambda m: found.append(m.group(0)) or " numtok ", p.lower())
        docs.append(["<s>", "<s>"] + word.findall(masked) + ["</s>", "</s>"])
        lits.append(found if docs[-1].count("numtok") == len(found) else None)
    left, right = defaultdict(Counter), defaultdict(Counter)
    num_left, num_right = defaultdict(Counter), defaultdict(Counter)
    for w, found in zip(docs, lits):
        k = 0
        for i in range(2, len(w) - 2):
            left[w[i - 2], w[i - 1]][w[i]] += 1
            right[w[i + 1], w[i + 2]][w[i]] += 1
            if w[i] == "numtok" and found is not None:
                num_left[w[i - 2], w[i - 1]][found[k]] += 1
                num_right[w[i + 1], w[i + 2]][found[k]] += 1
                k += 1
    shown = list(docs)  # the words the terms are made of (contexts are looked up in the masked docs)
    if numbers:  # a number where at most `floor` values stand is part of the wording ("take 10 from"): kept
        keep_left = {c for c, v in num_left.items() if sum(v.values()) >= min_context and
                     effective(v) <= max(floor, 1.0) + 1e-9}
        keep_right = {c for c, v in num_right.items() if sum(v.values()) >= min_context and
                      effective(v) <= max(floor, 1.0) + 1e-9}
        for j, (w, found) in enumerate(zip(docs, lits)):
            if found is None:
                continue
            k, out = 0, list(w)
            for i in range(2, len(w) - 2):
                if w[i] == "numtok":
                    if (w[i - 2], w[i - 1]) in keep_left or (w[i + 1], w[i + 2]) in keep_right:
                        out[i] = found[k]
                    k += 1
            shown[j] = out

    eff_left = {k: effective(c) for k, c in left.items()}
    eff_right = {k: effective(c) for k, c in right.items()}
    same: dict = {}

    def bounded_slot(lk, rk):
        """bounded: a slot only where both sides see the same fillers (cosine of their counts >= bounded): a
        template's blank between fixed words, not a free continuation ("write a function to ___ ...")."""
        if bounded is None:
            return True
        if (lk, rk) not in same:
            a, b = left[lk], right[rk]
            if sum(a.values()) < min_context or sum(b.values()) < min_context:
                same[lk, rk] = False
            else:
                dot = sum(v * b.get(t, 0) for t, v in a.items())
                na = np.sqrt(sum(v * v for v in a.values()))
                nb = np.sqrt(sum(v * v for v in b.values()))
                same[lk, rk] = dot / (na * nb) >= bounded
        return same[lk, rk]
    vocab: dict[str, int] = {}
    indptr, indices, data = [0], [], []
    for w, sw in zip(docs, shown):
        words = sw[2:-2]
        wt = [(max(min(eff_left[w[i - 2], w[i - 1]], eff_right[w[i + 1], w[i + 2]]), floor) / floor) ** -alpha
              if bounded_slot((w[i - 2], w[i - 1]), (w[i + 1], w[i + 2])) else 1.0
              for i in range(2, len(w) - 2)]
        row: dict[int, list] = {}
        for t, v in list(zip(words, wt)) + [(f"{a} {b}", min(u, v)) for (a, u), (b, v) in
                                               zip(zip(words, wt), zip(words[1:], wt[1:]))]:
            j = vocab.setdefault(t, len(vocab))
            row.setdefault(j, []).append(v)
        for j, vs in row.items():
            indices.append(j)
            data.append(max(vs) * (1.0 + np.log(len(vs))))
        indptr.append(len(indices))
    x = sparse.csr_matrix((np.asarray(data), indices, indptr), shape=(len(prompts), len(vocab)))
    rn = np.sqrt(np.asarray(x.multiply(x).sum(1)).ravel())
    x = sparse.diags(1 / np.maximum(rn, 1e-12)) @ x
    d = min(dim, min(x.shape) - 1)
    z = np.ascontiguousarray(TruncatedSVD(d, random_state=0).fit_transform(x).astype(np.float32))
    C.normalise_features(z)
    return z


def tool_feature_file(inst_dir: Path, args: list[str], inputs: list | None = None) -> Path:
    """The tool's own `embed` with other options: its output file, cached beside the instance (made when missing,
    and always for inputs: the data, default the instance's train.jsonl)."""
    emb = inst_dir / ("emb" + "".join(args).replace("-", "_") + (f"-{len(inputs)}in" if inputs else "") + ".parquet")
    if not emb.exists() or inputs:
        common.cli(["embed", *(inputs or [inst_dir / "train.jsonl"]), "--out", emb, "--overwrite", *args], [])
    return emb


def tool_feature(inst_dir: Path, args: list[str], inputs: list | None = None) -> np.ndarray:
    """The rows of tool_feature_file, unit length."""
    emb = tool_feature_file(inst_dir, args, inputs)
    t = pq.read_table(emb)
    x = np.ascontiguousarray(embedding_matrix(t.column("embedding")), dtype=np.float32).copy()
    C.normalise_features(x)
    return x


TOOL_FEATURES = {"tfidf": ["--text-weighting", "tfidf"], "tool-slot": ["--text-weighting", "slot"],  # embed options
                 "tool-tf": ["--text-weighting", "tf"],
                 "gradient": ["--features", "gradient"], "hidden": ["--features", "hidden"],  # the proxy model
                 "semantic": ["--features", "semantic"],  # the bundled sentence encoder
                 "text-semantic": ["--features", "text,semantic"]}
FEATURES = {  # name -> fn(prompts, the tool's text feature rows, instance directory[, inputs])
    **{name: (lambda args: lambda prompts, x, d, inputs=None: tool_feature(d, args, inputs))(args)
       for name, args in TOOL_FEATURES.items()},
    "ctx": lambda prompts, x, d: context_weighted(prompts),
    "spread": lambda prompts, x, d: context_weighted(prompts, first_pass=kmeans_split(x, 0).labels),
    "slot": lambda prompts, x, d: slot_weighted(prompts),
    "slot1": lambda prompts, x, d: slot_weighted(prompts, alpha=1.0),
    "slot0": lambda prompts, x, d: slot_weighted(prompts, alpha=0.0),  # control: the same path, tf weights
    "slot1f4": lambda prompts, x, d: slot_weighted(prompts, alpha=1.0, floor=4.0),
    "slot1f8": lambda prompts, x, d: slot_weighted(prompts, alpha=1.0, floor=8.0),
    "slotf4": lambda prompts, x, d: slot_weighted(prompts, alpha=0.5, floor=4.0),
    "slot1f4n": lambda prompts, x, d: slot_weighted(prompts, alpha=1.0, floor=4.0, numbers=True),
    "slot1f4nb": lambda prompts, x, d: slot_weighted(prompts, alpha=1.0, floor=4.0, numbers=True, bounded=0.5),
}

def relative_groups(centroids: np.ndarray, tightness: np.ndarray) -> np.ndarray:
    """Prototype (lost on dev and on real data; kept here, not in the package): average linkage of the centroids
    on their similarity relative to the two clusters' own spread, S_ab / sqrt(t_a * t_b), cut where that ratio
    falls below 1 on average. t_c: cluster c's mean row-to-centroid similarity to some power (2: the mean
    similarity of two of its rows)."""
    from scipy.cluster.hierarchy import fcluster, linkage
    k = len(centroids)
    if k < 2:
        return np.zeros(k, dtype=np.int64)
    c = np.asarray(centroids, dtype=np.float64)
    t = np.sqrt(np.maximum(np.asarray(tightness, dtype=np.float64), 1e-12))
    distance = 2.0 - np.clip((c @ c.T) / np.outer(t, t), -2.0, 2.0)  # ratio 1 is distance 1
    flat = fcluster(linkage(distance[np.triu_indices(k, 1)], method="average"), t=1.0, criterion="distance")
    return G.numbered_by_first_appearance(flat)  # as group_clusters numbers its groups


def mech_local(x, seed, inst, power=2.0):
    res = kmeans_split(x, seed)
    sums = np.bincount(res.labels, weights=res.similarity.astype(np.float64), minlength=res.k)
    mean_sim = sums / np.maximum(res.sizes, 1)
    return res.labels, relative_groups(res.centroids, mean_sim ** power)


def mech_nested(x, seed, inst, cuts=("pair", "row")):
    """Quotas down two cuts of the same tree of centroids: the pair cut's groups, then the row cut's inside."""
    res = kmeans_split(x, seed)
    return res.labels, np.stack([G.group_clusters(res.centroids, min_similarity=G.group_cut_similarity(res, c))
                                 for c in cuts])


def mech_split_by(x, seed, inst, z, cut="row"):
    """k-means on the tool's feature x (no split), then the split of mixed clusters judged on another feature z
    of the same rows (one that does not see the slot fillers), centroids recomputed in x, groups cut in x."""
    from dataclasses import replace
    k = C.auto_k(len(x))
    res = C.cluster_features(x, k, seed=seed, sample_size=K.training_sample_size(len(x), k), gpus=0)
    zcent = _unit(np.stack([z[res.labels == c].mean(0) if res.sizes[c] else z[0] * 0 for c in range(k)]))
    zsim = np.einsum("ij,ij->i", z, zcent[res.labels]).astype(np.float32)
    zres = replace(res, centroids=zcent.astype(np.float32), similarity=zsim, objective=float(zsim.mean()))
    zres, _ = G.split_mixed_clusters(z, zres, G.group_cut_similarity(zres, "pair"))
    labels = zres.labels
    k = int(labels.max()) + 1
    cent = _unit(np.stack([x[labels == c].mean(0) for c in range(k)]))
    sims = np.einsum("ij,ij->i", x, cent[labels]).astype(np.float32)
    res = replace(res, labels=labels, similarity=sims, centroids=cent.astype(np.float32), k=k,
                  objective=float(sims.mean(dtype=np.float64)), sizes=np.bincount(labels, minlength=k))
    return labels, G.group_clusters(res.centroids, min_similarity=G.group_cut_similarity(res, cut))


def _unit(m):
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


def mech_group_by(x, seed, inst, z, cut="row"):
    """The tool's clusters (k-means and the split on x), grouped on another feature z of the same rows: each
    cluster's centroid in z (the mean of its z rows) and the cut computed in z, as group_cut_similarity does in
    x. Why: the clusters follow the wording (one per template), and a feature that knows two wordings ask for the
    same thing (a sentence encoder) can join them where x cannot."""
    from dataclasses import replace
    res = kmeans_split(x, seed)
    zcent = _unit(np.stack([z[res.labels == c].mean(0) for c in range(res.k)]))
    zsim = np.einsum("ij,ij->i", z, zcent[res.labels]).astype(np.float32)
    zres = replace(res, centroids=zcent.astype(np.float32), similarity=zsim, objective=float(zsim.mean()))
    return res.labels, G.group_clusters(zres.centroids, min_similarity=G.group_cut_similarity(zres, cut))


# ------------------------------------------------------- answers: wordings of one kind joined by what they answer

def mech_answers(x, seed, inst, texts, power=AK.KIND_POWER, cap=None):
    """`cluster --kinds answers` (answer_kinds.py): the tool's clusters and row-cut groups; groups whose clusters
    give the same answers to the same inputs form one kind, weighted by its groups ** power in `select` (the
    package's KIND_POWER unless given: the answers-pNN variants; with cap, at most cap groups are counted: the
    answers-capC variants). Until round 16 this was a prototype here; the
    package's selections differ from it by 0-3 rows of ~920 (rounding ties of the weighted water-filling) on dev
    instances 1002-1003."""
    res = kmeans_split(x, seed)
    groups = G.group_clusters(res.centroids, min_similarity=G.group_cut_similarity(res, "row"))
    kind_of_group = AK.answer_kinds(groups, AK.answer_agreement(*texts, res.labels, res.k))
    weights = AK.kind_weights(kind_of_group, power)
    if cap is not None:
        weights = np.minimum(weights, float(cap) ** power)
    return res.labels, (groups, Kinds(kind_of_group, weights))


def answer_numbers(responses) -> np.ndarray:
    """Each row's answer as a number 0..A-1 (equal for responses equal after strip() and lower(): AK.answer_key)."""
    return np.unique(np.asarray([AK.answer_key(r) for r in responses]), return_inverse=True)[1].ravel()


def answer_blind(prompts, responses, labels, k):
    """(own, overlap) for mech_answer_sets: each cluster's agreement with itself (over its ordered pairs of
    distinct rows, per shared input word, the share that give the same answer, less the share of all its pairs
    that do; NaN under AK.MIN_PAIRS pairs) and the k x k overlap of the clusters' answer distributions
    (Bhattacharyya coefficient, as answer_agreement's)."""
    import scipy.sparse as sp
    labels = np.asarray(labels, dtype=np.int64)
    ans = answer_numbers(responses)
    n_answers = int(ans.max()) + 1
    size = np.bincount(labels, minlength=k).astype(np.float64)
    answers = sp.csr_matrix((np.ones(len(ans)), (labels, ans)), shape=(k, n_answers))
    rr, ww, n_words = AK.input_words(prompts, labels, k)
    cell = np.unique((labels[rr] * n_words + ww) * n_answers + ans[rr], return_counts=True)
    word = np.unique(labels[rr] * n_words + ww, return_counts=True)
    pairs = np.bincount(word[0] // n_words, weights=word[1] * (word[1] - 1.0), minlength=k)
    same = np.bincount(cell[0] // n_answers // n_words, weights=cell[1] * (cell[1] - 1.0), minlength=k)
    chance = (np.asarray(answers.multiply(answers).sum(1)).ravel() - size) / np.maximum(size * (size - 1), 1.0)
    own = np.where(pairs >= AK.MIN_PAIRS, same / np.maximum(pairs, 1.0) - chance, np.nan)
    root = answers.multiply(1.0 / np.maximum(size, 1.0)[:, None]).tocsr()
    root.data = np.sqrt(root.data)
    return own, (root @ root.T).toarray()


def mech_answer_sets(x, seed, inst, texts):
    """Prototype (round 22, lost on the trained dev check: family_notes.md): `answers`, and then the groups that
    it left a kind of their own and whose clusters are all answer-blind (own agreement <= AK.JOIN: one shared
    input word does not fix their answers, as in a sum of two numbers or a comparison, so agreement cannot see
    their joins) are joined to each other where any two of their clusters' answer distributions overlap >=
    AK.MIN_OVERLAP. In the package at commit 9198eb3 as `cluster --kinds answer-sets` (the same kinds on dev
    1000-1049 x 3 seeds), taken out again after the dev check."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components
    labels, (groups, kinds) = mech_answers(x, seed, inst, texts)
    kind = kinds.of_group
    own, overlap = answer_blind(*texts, labels, len(groups))
    n_groups = len(kind)
    blind_group = np.bincount(groups, weights=~(own <= AK.JOIN), minlength=n_groups) == 0
    open_group = blind_group & (np.bincount(kind, minlength=n_groups)[kind] == 1)
    a, b = np.nonzero(np.triu(overlap >= AK.MIN_OVERLAP, 1))
    ga, gb = groups[a], groups[b]
    link = open_group[ga] & open_group[gb] & (ga != gb)
    comp = connected_components(sp.coo_matrix((np.ones(int(link.sum())), (ga[link], gb[link])),
                                              shape=(n_groups, n_groups)), directed=False)[1]
    lowest = np.full(n_groups, n_groups)
    np.minimum.at(lowest, comp, kind)
    kind = G.numbered_by_first_appearance(np.where(open_group, lowest[comp], kind))
    return labels, (groups, Kinds(kind, AK.kind_weights(kind)))


def spread_order_key(kind_of_row, answers, ids, seed):
    """Prototype within-cluster order (round 23) as select_rows' `hard` key: a row's rank among the rows of its kind
    with its answer (in the seeded random order), then the random order; so each cluster takes one row of each
    answer its kind has not yet shown before a second row of any. Unique answers (real data): the random order.
    The `hard` order reads its key as float32, so inside one rank the random part keeps about 24 bits (at rank r,
    24 - log2(r + 1)); rows it cannot tell apart go to the lower position, as any `hard` tie does. Kept as it is:
    the round-23 runs are cached by these selections."""
    from cluster_curate.within_orders import random_keys
    n = len(answers)
    r = random_keys(ids, seed)
    order = np.lexsort((r, answers, kind_of_row))
    k, a = kind_of_row[order], answers[order]
    new = np.r_[True, (k[1:] != k[:-1]) | (a[1:] != a[:-1])]
    rank = np.empty(n)
    rank[order] = np.arange(n) - np.maximum.accumulate(np.where(new, np.arange(n), 0))
    return -(rank + (r >> np.uint64(11)).astype(np.float64) / 2.0 ** 53)


def mech_answers_spread(x, seed, inst, texts):
    """`answers`, and inside each cluster one row of each answer of its kind before a second (spread_order_key):
    the same quotas, other rows."""
    labels, (groups, kinds) = mech_answers(x, seed, inst, texts)
    kind_of_row, answers = np.asarray(kinds.of_group)[groups[labels]], answer_numbers(texts[1])
    return labels, (groups, kinds, lambda ids, s: {"within": "hard",
                                                   "loss": spread_order_key(kind_of_row, answers, ids, s)})


def mech_answers_prop(x, seed, inst, texts, answer=lambda response: response):
    """`answers` with `select --within answers` (within_orders.answer_share_key; a harness prototype in round 24,
    the same selections as the package's on the 102 dev and test selections it was checked on): one row of each
    repeated answer of a kind before a second, then each answer in proportion. The same quotas, other rows.
    `answer`: what of a response is its answer (answers-final: final_answer)."""
    labels, (groups, kinds) = mech_answers(x, seed, inst, texts)
    answers = answer_numbers([answer(r) for r in texts[1]])
    return labels, (groups, kinds, lambda ids, s: {"within": "answers", "answers": answers})


def final_answer(response: str) -> str:
    """The answer a response ends with: the text after its last `Answer:` (the family's worked solutions end
    `... Answer: X`), else the whole response. answers-final (a prototype, round 33) is answers-prop keyed by it:
    on worked solutions it spreads what a solution ends with, as answers-prop spreads one-word answers."""
    _, marker, tail = response.rpartition("Answer:")
    return tail if marker else response


MECHANISMS = {
    "splitby": mech_split_by,  # FEATURE/splitby: the split judged on FEATURE
    "groupby": mech_group_by,  # FEATURE/groupby: the tool's clusters, grouped on FEATURE
    "groupby-pair": lambda x, s, i, z: mech_group_by(x, s, i, z, cut="pair"),
    "default": mech_default,
    "flat": mech_flat,
    "pair": mech_pair,
    "nosplit": mech_nosplit,
    "hkm": mech_hkm,
    "hkm2": lambda x, s, i: mech_hkm(x, s, i, ratio=2.0),
    "local": mech_local,  # cut relative to each pair of clusters' own pair similarity
    "local-row": lambda x, s, i: mech_local(x, s, i, power=1.0),  # ... relative to its row similarity
    "nested": mech_nested,
    "nested-hkm2": lambda x, s, i: mech_hkm(x, s, i, ratio=2.0, nested=True),
    "local3": lambda x, s, i: mech_local(x, s, i, power=3.0),
    "answers": mech_answers,
    "answer-sets": mech_answer_sets,  # prototype, round 22
    "answers-spread": mech_answers_spread,  # prototype, round 23, lost
    "answers-prop": mech_answers_prop,  # round 24: select --within answers
    "answers-final": lambda x, s, i, t: mech_answers_prop(x, s, i, t, answer=final_answer),  # round 33, lost
    # answers-pNN: a kind of m groups gets m ** (NN / 100) shares (answers: KIND_POWER = 0.5; 1 would be the
    # groups' own quotas); trained on dev in round 19 (family_notes.md)
    **{f"answers-p{p}": (lambda x, s, i, t, p=p: mech_answers(x, s, i, t, power=p / 100)) for p in (65, 75, 85)},
    # answers-capC: a kind of m groups gets min(m, C) ** 0.5 shares (round 30: a kind's group count grows with its
    # rows, so the dominant skill's one kind of many groups took the most shares)
    **{f"answers-cap{c}": (lambda x, s, i, t, c=c: mech_answers(x, s, i, t, cap=c)) for c in (4, 6, 9)},
}
TWO_FEATURES = ("splitby", "groupby", "groupby-pair")  # FEATURE/these: mechanism(x, seed, inst, FEATURE's rows)
# these: mechanism(x, seed, inst, (prompts, responses))
TEXT_MECHANISMS = ("answers", "answer-sets", *(m for m in MECHANISMS if m.startswith("answers-")))
TEXTS = "(texts)"  # feats(TEXTS): the rows' (prompts, responses)


# ============================================================================================ metrics

def cheap_metrics(counts: np.ndarray, oracle: np.ndarray, twins: list) -> dict:
    ratio = counts / oracle
    return {"coverage": float(np.minimum(counts, oracle).sum() / oracle.sum()), "worst": float(ratio.min()),
            "dominant": float(ratio[0]),  # an instance lists its skills most frequent first
            "twin": float(np.mean([ratio[r] for _, r in twins])) if twins else float("nan")}


def wording_reference(ids, skills, labels, budget, seeds, twins, oracle) -> dict:
    """The ceiling of clusters that follow the wording: one perfect cluster per (skill, template), quotas
    water-filled over them with no groups. A label-free mechanism whose clusters are pure templates (what the
    tool's are) reaches this unless its groups join the templates of one skill."""
    cells = np.unique(skills * 1000 + np.asarray(labels["template"])[ids], return_inverse=True)[1]
    runs = [cheap_metrics(np.bincount(skills[select_rows(cells, ids=ids, budget=budget, seed=s).rows],
                                      minlength=len(oracle)), oracle, twins) for s in seeds]
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def instance_texts(rows: list[dict], ids) -> tuple[list[str], list[str]]:
    """(prompts, responses) of an instance's rows at ids: what the response-reading mechanisms see."""
    return [rows[i]["instruction"] for i in ids], [rows[i]["output"] for i in ids]


def prepare(seed: int, work: Path, log: list) -> tuple:
    """(ids, unit feature rows, skill of each row, instance description) of one instance (embedded once)."""
    d = work / f"i{seed}"
    emb = d / "emb.parquet"
    if not emb.exists() or read_meta(emb).params.get("text_weighting") != DEFAULT_TEXT_WEIGHTING:  # the defaults
        skillfamily.write_instance(d, seed, "short", test_per_skill=1)
        common.cli(["embed", d / "train.jsonl", "--out", emb, "--overwrite"], log)
    labels = json.loads((d / "labels.json").read_text())
    t = pq.read_table(emb)
    ids = t.column("id").to_numpy()
    x = np.ascontiguousarray(embedding_matrix(t.column("embedding"), ids), dtype=np.float32).copy()
    C.normalise_features(x)
    return ids, x, np.asarray(labels["skill"])[ids], labels


def call_mechanism(clustering, x, seed, inst, z=None, texts=None):
    """(clusters, groups) of MECHANISMS[clustering], given what it reads: the tool's feature rows x, FEATURE's
    rows z (None: no FEATURE/ prefix) and the rows' (prompts, responses). A TWO_FEATURES mechanism gets both x
    and z; any other runs on z where there is one; a TEXT_MECHANISMS one also gets the texts."""
    if clustering in TWO_FEATURES:  # one step on the tool's feature x, another on FEATURE
        return MECHANISMS[clustering](x, seed, inst, z)
    rows = x if z is None else z
    if clustering in TEXT_MECHANISMS:
        return MECHANISMS[clustering](rows, seed, inst, texts)
    return MECHANISMS[clustering](rows, seed, inst)


def run_mechanism(name, ids, x, skills, labels, seed, budget, feats):
    """name: CLUSTERING (on the tool's text feature) or FEATURE/CLUSTERING (a harness feature prototype)."""
    feature, _, clustering = name.rpartition("/")
    clusters, groups = call_mechanism(clustering, x, seed, labels, feats(feature) if feature else None,
                                      feats(TEXTS) if clustering in TEXT_MECHANISMS else None)
    return ids[select(clusters, ids, budget, seed, groups)]


def nested_quotas(sizes: np.ndarray, levels: list, budget: int) -> np.ndarray:
    """Prototype: water-filling down a hierarchy, the coarsest groups first (levels: the group of every cluster
    at each level, coarsest first), then each group's quota over the next level inside it, then the clusters."""
    if not levels:
        return water_fill_quotas(sizes, budget)
    top = np.asarray(levels[0])
    group_quota = water_fill_quotas(np.bincount(top, weights=sizes).astype(np.int64), budget)
    quotas = np.zeros_like(sizes)
    for g in np.flatnonzero(group_quota):
        m = np.flatnonzero(top == g)
        quotas[m] = nested_quotas(sizes[m], [np.unique(lv[m], return_inverse=True)[1] for lv in levels[1:]],
                                  int(group_quota[g]))
    return quotas


def select(clusters, ids, budget, seed, groups):
    """Row positions selected: the tool's select_rows (random order in a cluster; groups, or (groups, Kinds)
    as mech_answers gives them), or for several levels of groups the same random order under nested_quotas."""
    if isinstance(groups, tuple) and len(groups) == 3:  # (groups, Kinds, (ids, seed) -> the order's arguments)
        return select_rows(clusters, ids=ids, budget=budget, seed=seed, groups=groups[0], kinds=groups[1],
                           **groups[2](ids, seed)).rows
    if isinstance(groups, tuple):
        return select_rows(clusters, ids=ids, budget=budget, seed=seed, groups=groups[0], kinds=groups[1]).rows
    if groups is None or np.ndim(groups) == 1:
        return select_rows(clusters, ids=ids, budget=budget, seed=seed, groups=groups).rows
    k = int(clusters.max()) + 1
    sizes = np.bincount(clusters, minlength=k).astype(np.int64)
    quotas = nested_quotas(sizes, list(groups), budget)
    order = order_within_cluster(clusters, "random", ids=ids, seed=seed, k=k)
    rank = np.arange(len(order)) - np.concatenate([[0], np.cumsum(sizes)[:-1]])[clusters[order]]
    return np.sort(order[rank < quotas[clusters[order]]])


def paper_recipe_ids(emb: Path, seed: int, budget: int, log: list) -> np.ndarray:
    """The paper's recipe through the tool's commands, as the evidence harness runs it (its `paper` contender):
    k = 4 (the ranks), clusters capped at 1.5x the mean, flat quotas, the per-cluster ratio r that keeps ~31%
    (the budget is not exact), the far order."""
    c, s = emb.with_name(emb.stem + f"-paper-c{seed}.parquet"), emb.with_name(emb.stem + f"-paper-s{seed}.parquet")
    common.cli(["cluster", emb, "--out", c, "--overwrite", "--k", "4", "--max-size-factor", "1.5", "--groups", "none",
                "--seed", seed], log)
    sizes = np.bincount(pq.read_table(c, columns=["cluster"]).column("cluster").to_numpy())
    sizes = sizes[sizes > 0]
    ratio = min(1.0, (budget / len(sizes) + 0.999) / sizes.min())
    common.cli(["select", c, "--out", s, "--overwrite", "--per-cluster-ratio", f"{ratio:.6f}", "--within", "far",
                "--seed", seed], log)
    return np.sort(pq.read_table(s, columns=["id"]).column("id").to_numpy())


def cli_ids(seed: int, work: Path, budget: int, log: list, data: Path | None = None,
            within: tuple = ("--within", "random")) -> np.ndarray:
    """The ids the tool's commands select with `--kinds none` (the mechanism `default`, the default until round
    20), or with `--kinds answers --data data`; in the random order (the default until round 32), or with
    `within=()` the tool's default order (`auto`: the mechanism `answers-prop` on one-word answers)."""
    d = work / f"i{seed}"
    kinds = ["--kinds", "none"] if data is None else ["--kinds", "answers", "--data", data]
    common.cli(["cluster", d / "emb.parquet", "--out", d / "c.parquet", "--overwrite", *kinds], log)
    common.cli(["select", d / "c.parquet", "--out", d / "s.parquet", "--budget", budget, "--overwrite", *within], log)
    return np.sort(pq.read_table(d / "s.parquet", columns=["id"]).column("id").to_numpy())


def real_data_check(mechs: list[str], seeds: list[int], work: Path, argv, results, name: str = "family_real") -> None:
    """The real-data check of a mechanism (bench_source_mix's mix: 3,000 GSM8K questions + 60/150/300 Code Alpaca
    instructions): the share of the code rows that a 31% selection keeps, per seed."""
    import bench_source_mix
    from cluster_curate.features.text import example_text
    from cluster_curate.io.mixture import open_inputs
    log, rows = [], []
    work.mkdir(parents=True, exist_ok=True)
    for n_code in (60, 150, 300):
        inputs = bench_source_mix.write_mix(work, n_code)  # GSM8K's rows first, then the code rows
        emb = work / f"mix{n_code}.parquet"
        common.cli(["embed", *inputs, "--out", emb, "--overwrite"], log)
        t = pq.read_table(emb)
        ids = t.column("id").to_numpy()
        is_code = ids >= bench_source_mix.GSM8K_ROWS
        assert (ids == np.arange(len(ids))).all() and is_code.sum() == n_code  # no exact copies left out
        budget = int(len(ids) * FRACTION)
        x = np.ascontiguousarray(embedding_matrix(t.column("embedding"), ids), dtype=np.float32).copy()
        C.normalise_features(x)
        examples = [ex for b in open_inputs([str(i) for i in inputs]).iter_batches() for ex in b.examples]
        prompts = [example_text(ex, "prompt") for ex in examples]
        texts = (prompts, [example_text(ex, "response") for ex in examples])
        for m in mechs:
            feature, _, clustering = m.rpartition("/")
            z = (FEATURES[feature](prompts, x, work, inputs) if feature in TOOL_FEATURES else
                 FEATURES[feature](prompts, x, work) if feature else None)
            kept = []
            for s in seeds:
                clusters, groups = call_mechanism(clustering, x, s, None, z, texts)
                kept.append(int(is_code[select(clusters, ids, budget, s, groups)].sum()))  # ids are 0..n-1
            rows.append({"code_rows": n_code, "mechanism": m, "kept": kept})
            print(f"[real {n_code}] {m}: {kept}", flush=True)
    lines = ["# Real-data check of the family's mechanisms: GSM8K + Code Alpaca, share of the code rows kept", "",
             f"bench_source_mix's mix (3,000 GSM8K questions + N Code Alpaca instructions), budget {FRACTION:.0%}, "
             f"seeds {seeds}; the mechanisms of bench_family on the tool's default feature.", "",
             "| N code rows | mechanism | kept (mean) | kept (worst seed) | per seed |", "|---:|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['code_rows']} | {r['mechanism']} | {np.mean(r['kept']) / r['code_rows']:.0%} | "
                     f"{min(r['kept']) / r['code_rows']:.0%} | {', '.join(map(str, r['kept']))} |")
    common.write_results(name, lines, {"results": rows, "commands": log[:3]}, argv, results)


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--split", choices=sorted(skillfamily.SPLITS), default="dev")
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--mechanisms", default=",".join(m for m in MECHANISMS if m not in TWO_FEATURES),
                    help="CLUSTERING or FEATURE/CLUSTERING names (TWO_FEATURES ones only with a FEATURE/)")
    ap.add_argument("--seeds", default="0", help="clustering/selection seeds")
    ap.add_argument("--check-cli", type=int, default=2, help="instances whose default is checked against the CLI")
    ap.add_argument("--work", default=str(common.ROOT / "out" / "family"))
    ap.add_argument("--results", default=None, help="where the tables go (default benchmarks/results)")
    ap.add_argument("--name", default=None, help="results file stem (default family_<split>)")
    ap.add_argument("--responses", choices=skillfamily.VARIANTS, default="short",
                    help="the response style that mechanisms reading the responses (answers) see")
    ap.add_argument("--real", action="store_true", help="the real-data check of the mechanisms instead "
                    "(GSM8K + Code Alpaca: share of the rare source kept; writes family_real.md)")
    a = ap.parse_args(argv)
    work = Path(a.work)
    mechs = a.mechanisms.split(",")
    if bare := [m for m in mechs if m in TWO_FEATURES]:
        ap.error(f"--mechanisms {bare[0]}: judged on a second feature; name it FEATURE/{bare[0]}")
    seeds = [int(s) for s in a.seeds.split(",")]
    if a.real:
        return real_data_check(mechs, seeds, work / "real", argv, a.results, a.name or "family_real")
    log: list[str] = []
    per_instance, t0 = [], time.perf_counter()
    for i, inst_seed in enumerate(skillfamily.SPLITS[a.split][: a.instances]):
        ids, x, skills, labels = prepare(inst_seed, work, log)
        cache: dict = {}

        def feats(name, seed=inst_seed):
            if name not in cache:
                rows = [json.loads(line) for line in (work / f"i{seed}" / "train.jsonl").read_text().splitlines()]
                if name == TEXTS and a.responses == "worked":  # the same prompts, in the same order
                    rows = skillfamily.generate(skillfamily.draw_instance(seed), "worked", test_per_skill=1)[0]
                texts = instance_texts(rows, ids)
                cache[name] = texts if name == TEXTS else FEATURES[name](texts[0], x, work / f"i{seed}")
            return cache[name]
        budget = int(round(FRACTION * len(ids)))
        n_skills = len(labels["skills"])
        oracle = water_fill_quotas(np.bincount(skills, minlength=n_skills), budget)
        twins = labels["twins"]
        row = {"seed": inst_seed, "rows": len(ids), "skills": n_skills, "zipf": labels["zipf"], "twins": twins,
               "metrics": {}}
        rng = np.random.default_rng(inst_seed)
        rnd = [cheap_metrics(np.bincount(skills[rng.choice(len(ids), budget, replace=False)],
                                         minlength=n_skills), oracle, twins) for _ in seeds]
        row["metrics"]["random"] = {k: float(np.mean([r[k] for r in rnd])) for k in rnd[0]}
        row["metrics"]["wording"] = wording_reference(ids, skills, labels, budget, seeds, twins, oracle)
        for m in mechs:
            runs = []
            for s in seeds:
                if m.endswith("/paper"):  # FEATURE/paper: the paper's recipe on a tool feature, through the CLI
                    sel = paper_recipe_ids(tool_feature_file(work / f"i{inst_seed}",
                                                             TOOL_FEATURES[m.rpartition("/")[0]]), s, budget, log)
                else:
                    sel = run_mechanism(m, ids, x, skills, labels, s, budget, feats)
                runs.append(cheap_metrics(np.bincount(skills[np.searchsorted(ids, sel)], minlength=n_skills),
                                          oracle, twins))
                # train.jsonl holds the one-word answers, where the CLI's default order (`auto`) is answers-prop's
                if (m == "default" or (m in ("answers", "answers-prop") and a.responses == "short")) and s == 0 \
                        and i < a.check_cli:
                    data = None if m == "default" else work / f"i{inst_seed}" / "train.jsonl"  # short responses
                    within = () if m == "answers-prop" else ("--within", "random")
                    if not np.array_equal(cli_ids(inst_seed, work, budget, log, data, within), np.sort(sel)):
                        raise SystemExit(f"instance {inst_seed}: the {m} mechanism differs from the CLI's")
            row["metrics"][m] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
        per_instance.append(row)
        print(f"[{a.split} {inst_seed}] " + "  ".join(f"{m} {v['coverage']:.3f}/{v['worst']:.2f}/{v['dominant']:.2f}"
                                                   f"/{v['twin']:.2f}" for m, v in row["metrics"].items()),
              flush=True)
    names = ["random", "wording", *mechs]
    summary = {}
    for m in names:
        vals = {k: np.array([r["metrics"][m][k] for r in per_instance]) for k in ("coverage", "worst", "dominant",
                                                                                  "twin")}
        summary[m] = {**{f"{k}_mean": float(np.nanmean(v)) for k, v in vals.items()},
                      **{f"{k}_median": float(np.nanmedian(v)) for k, v in vals.items()},
                      "coverage_min": float(vals["coverage"].min()), "worst_min": float(vals["worst"].min()),
                      "wins_coverage_vs_default": int(sum(r["metrics"][m]["coverage"] > r["metrics"]["default"]
                                                          ["coverage"] for r in per_instance))
                      if "default" in mechs else None}
    lines = [f"# Benchmark family, {a.split} split: selection-only skill coverage ({len(per_instance)} instances)", "",
             f"Instances: seeds {per_instance[0]['seed']}–{per_instance[-1]['seed']} of the {a.split} range "
             f"({skillfamily.SPLITS[a.split].start}–{skillfamily.SPLITS[a.split].stop - 1}), taken in order; "
             f"budget {FRACTION:.0%}; clustering/selection seeds {seeds}. Against the oracle's per-skill counts "
             "(water-filling by the true skill): coverage = Σ min(count, oracle) / Σ oracle; worst = min count ÷ "
             "oracle; dominant = the most frequent skill's count ÷ oracle; twin = the rare near twin's count ÷ "
             "oracle (mean over pairs). `wording`: a reference, not a mechanism: perfect clusters, one per (skill, "
             "template), quotas water-filled over them without groups.", "",
             "| mechanism | coverage mean | coverage median | coverage min | worst mean | worst min | dominant mean "
             "| twin mean | instances above default (coverage) |", "|---|---|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        lines.append(f"| {m} | {s['coverage_mean']:.1%} | {s['coverage_median']:.1%} | {s['coverage_min']:.1%} | "
                     f"{s['worst_mean']:.2f} | {s['worst_min']:.2f} | {s['dominant_mean']:.2f} | "
                     f"{s['twin_mean']:.2f} | {s['wins_coverage_vs_default'] if m != 'default' else '–'} |")
    lines += ["", "Per instance (coverage / worst / dominant / twin):", "",
              "| seed | rows | skills | zipf | " + " | ".join(names) + " |", "|---" * (4 + len(names)) + "|"]
    for r in per_instance:
        lines.append(f"| {r['seed']} | {r['rows']} | {r['skills']} | {r['zipf']:.2f} | " + " | ".join(
            f"{r['metrics'][m]['coverage']:.3f} / {r['metrics'][m]['worst']:.2f} / {r['metrics'][m]['dominant']:.2f}"
            f" / {r['metrics'][m]['twin']:.2f}" for m in names) + " |")
    lines += ["", f"Wall time {time.perf_counter() - t0:.0f} s."]
    common.write_results(a.name or f"family_{a.split}", lines, {"summary": summary, "instances": per_instance,
                                                      "commands": log[:4]}, argv, a.results)


if __name__ == "__main__":
    main()
