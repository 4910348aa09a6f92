"""Kinds: groups of clusters joined by what their rows answer (`cluster --kinds`, auto by default;
docs/architecture.md, "Layers"). Pure functions on the rows' texts and a clustering's labels, after the groups
(cluster_groups.py).

    agree = answer_agreement(prompts, responses, labels, k)   # sparse k x k
    kind_of_group = answer_kinds(groups, agree)                 # groups whose clusters agree form one kind
    weights = kind_weights(kind_of_group)                       # a kind of m groups: m ** KIND_POWER shares

Why: the clusters follow the wording of a prompt, so a request asked in 8 wordings gets 8 groups and 8 shares of
the budget while one asked in 2 gets 2. The prompts alone cannot say which wordings are one request (a frame
"quick ___ task: ..." is shared by several requests, a phrase by several wordings of one), but the answers can:
two wordings of one request give the same answer to the same input, two requests in one frame do not. Rows
whose answers are all different (most real data: GSM8K, code) agree with nothing, so nothing is joined and the
selection is the groups' own. Part of the `cluster` stage: a change here that changes its output bumps
clustering.ALGORITHM_VERSION.
"""

from __future__ import annotations

import re

import numpy as np

from cluster_curate.cluster_groups import numbered_by_first_appearance

# Two clusters agree when their rows give the same answer to a shared input word this much more often than two
# of their rows drawn at random do (average linkage of the clusters, cut there). The four constants were set
# before a sweep over 27 settings on the dev instances of benchmarks/skillfamily.py, which was flat around them
# (benchmarks/results/family_notes.md, round 12).
JOIN = 0.05
MIN_PAIRS = 20         # fewer row pairs sharing an input word: no evidence either way (agreement 0)
MIN_OVERLAP = 0.5      # two clusters whose answers overlap less (Bhattacharyya coefficient) are not one request
TEMPLATE_SHARE = 0.5   # a cluster's template words: those in at least this share of its rows; the rest are input
# A kind of m groups gets m ** KIND_POWER of one group's share: the joins are never complete, so with one share
# per kind (power 0, as perfect skill labels would give) a kind whose wordings were all found would lose to one
# whose wordings were not; power 1 is no join.
KIND_POWER = 0.5

KINDS_RULE = (f"groups whose clusters give the same answer to a shared input word at least {JOIN} more often than "
              f"chance (average linkage) form one kind; a kind of m groups gets m^{KIND_POWER} of a group's share")

_WORD = re.compile(r"[a-z]+|\d+")


def _counts(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]):
    import scipy.sparse as sp
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)


def answer_key(response: str) -> int:
    """A row's answer as an int64: equal for two responses equal after strip() and lower() (8 bytes of blake2b,
    so that `cluster` holds 8 bytes a row, not the texts, and the numbering is the same in every process)."""
    import hashlib
    return int.from_bytes(hashlib.blake2b(response.strip().lower().encode(), digest_size=8).digest(), "little",
                          signed=True)


def loose_answer_key(response: str) -> int:
    """answer_key of a response without the sentence punctuation after it and the quotes or brackets around it:
    equal for "Paris", "paris." and "(Paris)", while "-5" and "5", "<" and ">", "C++" and "C" stay apart (select
    --dedup's test of two short answers; the kinds and orders keep answer_key's strict equality). An answer of
    symbols alone is its own."""
    bare = response.strip().rstrip(_AFTER).strip(_AROUND).rstrip(_AFTER)
    return answer_key(bare if any(c.isalnum() for c in bare) else response)


_AFTER, _AROUND = ".!?,;: \t\n", "\"'`“”‘’()[]{}* \t\n"


def answer_columns(responses) -> tuple[np.ndarray, np.ndarray]:
    """(answer_key, whitespace words) of each response, as int64 arrays: what `cluster --kinds` needs of a row,
    computed by `embed` in its feature pass and kept in the embeddings artifact (features/embed.ANSWER_COLUMNS)."""
    responses = list(responses)
    return (np.fromiter((answer_key(r) for r in responses), dtype=np.int64, count=len(responses)),
            np.fromiter((len(r.split()) for r in responses), dtype=np.int64, count=len(responses)))


def answer_agreement(prompts, responses, labels: np.ndarray, k: int, min_pairs: int = MIN_PAIRS,
                     min_overlap: float = MIN_OVERLAP, template_share: float = TEMPLATE_SHARE):
    """Symmetric sparse k x k (scipy COO, no diagonal): for two clusters, the share of their row pairs that
    share an input word and give the same answer, less the share of all their row pairs that give the same
    answer; stored only where at least `min_pairs` row pairs share an input word and the two clusters' answer
    distributions overlap by at least `min_overlap` (Bhattacharyya coefficient). A row's input words are
    input_words(); its answer is its response, stripped and lower-cased.
    `responses`: the rows' responses, or their answer_key()s; `prompts`: the rows' prompts, or a function that
    returns them, called only when two clusters answer alike (never on most real data).
    Everything is a sparse product, so rows with unique answers cost next to nothing."""
    import scipy.sparse as sp
    labels = np.asarray(labels, dtype=np.int64)
    keys = np.asarray([r if isinstance(r, (int, np.integer)) else answer_key(r) for r in responses], dtype=np.int64)
    ans = numbered_by_first_appearance(keys)
    n_answers = int(ans.max(initial=-1)) + 1
    size = np.bincount(labels, minlength=k).astype(np.float64)
    answers = _counts(labels, ans, (k, n_answers))  # cluster x answer
    root = answers.multiply(1.0 / np.maximum(size, 1.0)[:, None]).tocsr()
    root.data = np.sqrt(root.data)
    overlap = sp.triu(root @ root.T, k=1).tocoo()
    near = overlap.data >= min_overlap
    a, b = overlap.row[near], overlap.col[near]
    if not len(a):  # no two clusters answer alike (unique answers: most real data); the prompts' words are not read
        return sp.coo_matrix((k, k))
    rr, ww, n_words = input_words(prompts() if callable(prompts) else prompts, labels, k, template_share)
    _, word_answer = np.unique(ww * n_answers + ans[rr], return_inverse=True)
    by_word_answer = _counts(labels[rr], word_answer.ravel(), (k, int(word_answer.max(initial=-1)) + 1))
    by_word = _counts(labels[rr], ww, (k, n_words))
    pairs = np.asarray((by_word @ by_word.T).tocsr()[a, b]).ravel()
    same = np.asarray((by_word_answer @ by_word_answer.T).tocsr()[a, b]).ravel()
    chance = np.asarray((answers @ answers.T).tocsr()[a, b]).ravel() / (size[a] * size[b])
    ok = pairs >= min_pairs
    value = same[ok] / pairs[ok] - chance[ok]
    a, b = a[ok], b[ok]
    return sp.coo_matrix((np.r_[value, value], (np.r_[a, b], np.r_[b, a])), shape=(k, k))


def input_words(prompts, labels: np.ndarray, k: int, template_share: float = TEMPLATE_SHARE):
    """(rows, words, number of words): the rows' input words as two parallel arrays (row, word number). A row's
    input words are its prompt's words (lower-case letter runs and digit runs) that are not its cluster's
    template words (in at least `template_share` of the cluster's rows)."""
    labels = np.asarray(labels, dtype=np.int64)
    size = np.bincount(labels, minlength=k).astype(np.float64)
    vocab: dict[str, int] = {}
    rr, ww = [], []
    for i, prompt in enumerate(prompts):
        for w in set(_WORD.findall(prompt.lower())):
            rr.append(i)
            ww.append(vocab.setdefault(w, len(vocab)))
    rr, ww = np.asarray(rr, dtype=np.int64), np.asarray(ww, dtype=np.int64)
    rows_with = _counts(labels[rr], ww, (k, len(vocab))).tocoo()
    is_template = rows_with.data >= template_share * size[rows_with.row]
    template = rows_with.row[is_template].astype(np.int64) * len(vocab) + rows_with.col[is_template]
    keep = ~np.isin(labels[rr] * len(vocab) + ww, template)
    return rr[keep], ww[keep], len(vocab)


def answer_kinds(groups: np.ndarray, agreement, join: float = JOIN) -> np.ndarray:
    """The kind of each group: clusters are joined by average linkage on 1 − agreement, cut at 1 − `join`, and
    a kind is a connected set of groups and joins. Numbered 0.. in order of first appearance.

    Exact without a k x k matrix: two clusters that agree on nothing are at distance 1, above the cut, so the
    linkage runs inside each connected component of the agreement graph alone and gives the same joins."""
    import scipy.sparse as sp
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.sparse.csgraph import connected_components
    groups = np.asarray(groups, dtype=np.int64)
    k = len(groups)
    agree = sp.csr_matrix(agreement)
    positive = agree.multiply(agree > 0)
    n_comp, comp = connected_components(positive, directed=False)
    joined = np.arange(k)  # a cluster's join: the lowest cluster of its joined set
    for c in np.flatnonzero(np.bincount(comp, minlength=n_comp) > 1):
        members = np.flatnonzero(comp == c)
        distance = np.clip(1.0 - agree[members][:, members].toarray(), 0.0, 2.0)
        flat = fcluster(linkage(distance[np.triu_indices(len(members), 1)], method="average"), t=1.0 - join,
                        criterion="distance")
        for f in np.unique(flat):
            joined[members[flat == f]] = members[flat == f].min()
    n_groups = int(groups.max(initial=-1)) + 1
    edges = sp.coo_matrix((np.ones(k), (groups, n_groups + joined)), shape=(n_groups + k, n_groups + k))
    kind = connected_components(edges, directed=False)[1][:n_groups]
    return numbered_by_first_appearance(kind)


def kind_weights(kind_of_group: np.ndarray, power: float = KIND_POWER) -> np.ndarray:
    """Each kind's share relative to one group's: (groups in it) ** power."""
    return np.bincount(np.asarray(kind_of_group, dtype=np.int64)).astype(np.float64) ** power
