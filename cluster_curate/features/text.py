"""`--features text`: a model-free feature. Word unigrams + bigrams (numbers replaced by one token, except
where the slot weighting finds them part of the wording), weighted by sublinear TF (`slot`: times how few words
stand in each word's place; `tfidf`: times IDF), reduced to `dim` by truncated SVD.

Streaming: the vocabulary, IDF weights and SVD basis are fitted once on a seeded sample of the data
(`TextFeaturizer.fit`); any number of rows are then transformed batch by batch (`transform`), so memory
is bounded by the sample and the batch, and a row's vector never depends on which batch it is in.
The fitted state is plain arrays (`to_bytes()` / `from_bytes()`), kept beside the artifact without pickle
(`prepare_text`) so that other processes and later runs use exactly the same basis.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from itertools import count, filterfalse, repeat

import numpy as np

TEXT_FIELDS = ("prompt", "response", "both")
# tf: every word by its (sublinear) count alone, so the words that say what the task is ("reverse", "how
# many", "write a function") are not outweighed by the topic's rare nouns; tfidf: rare words (names, topics)
# weigh most; slot: a word by how few words can stand where it stands (`slot_contexts`), so a template's slot
# fillers (the topic noun in "the ___ clerk") weigh less than the words that say which request it is ("ten" in
# "reduced by ten").
TEXT_WEIGHTINGS = ("tf", "tfidf", "slot")
# slot, by measurement on the benchmark family's dev split and the real-data check (benchmarks/results/
# family_notes.md); tf until round 10. `embed --text-weighting` declares the same default (test_embed checks it).
DEFAULT_TEXT_WEIGHTING = "slot"
# slot: a context (two words on one side) says how many words can fill it once it was seen this often in the
# fit sample; an occurrence weighs (fillers of its more telling context / SLOT_FLOOR) ** -SLOT_ALPHA, at most 1
SLOT_MIN_CONTEXT = 5
SLOT_ALPHA = 1.0
SLOT_FLOOR = 4.0

# Numbers (integers, decimals, thousands separators, a leading sign or currency) become one token, so
# "2 apples + 3 apples" and "7 apples + 9 apples" look the same: the feature is about the kind of task.
_NUMBER = re.compile(r"[-+$]?\d+(?:[.,:/]\d+)*%?")
NUMBER_TOKEN = " numtok "
_NUM = NUMBER_TOKEN.strip()


def mask_numbers(text: str) -> str:
    return _NUMBER.sub(NUMBER_TOKEN, text)


def example_text(example, field: str) -> str:
    """The text of an Example (datasets.Example) that the feature looks at."""
    prompt = "\n".join(str(turn.get("content") or "") for turn in example.prompt)
    if field == "prompt":
        return prompt
    if field == "response":
        return example.response
    if field == "both":
        return prompt + "\n" + example.response
    raise ValueError(f"text field must be one of {TEXT_FIELDS}, got {field!r}")


def word_counts(example) -> tuple[int, int]:
    """(words in prompt + response, words in response): the token counts a text-only run reports. A preference
    pair's training step reads the prompt with each answer, so its first count adds the rejected answer's words."""
    prompt = sum(len(str(turn.get("content") or "").split()) for turn in example.prompt)
    response = len(example.response.split())
    rejected = len(example.rejected.split()) if getattr(example, "rejected", None) else 0
    return prompt + response + rejected, response


def rejected_counts(tokenizer, examples) -> np.ndarray | None:
    """Tokens of each example's rejected answer (a preference pair's; 0 for other rows) after its prompt, as a DPO
    trainer tokenizes prompt + rejected (`models.answer_token_counts`: end-of-turn tokens included, as they are
    in the chosen answer's count), to add to its prompt + response tokens; None when no example has one."""
    from cluster_curate.features.models import answer_token_counts
    pairs = [i for i, ex in enumerate(examples) if getattr(ex, "rejected", None)]
    if not pairs:
        return None
    counts = np.zeros(len(examples), dtype=np.int64)
    counts[pairs] = answer_token_counts(tokenizer, [examples[i] for i in pairs], [examples[i].rejected for i in pairs])
    return counts


@dataclass
class TextFeaturizer:
    """Sublinear TF (`weighting` tfidf: times IDF), l2, of masked word 1-2-grams -> truncated SVD to `dim`
    -> float32.

    max_features bounds the vocabulary (and so the SVD basis: dim x max_features floats)."""

    dim: int = 256
    field: str = "prompt"
    weighting: str = DEFAULT_TEXT_WEIGHTING
    seed: int = 0
    max_features: int = 32768
    min_df: int = 1
    vocabulary: np.ndarray | None = None  # str terms, column order
    idf: np.ndarray | None = None  # float64 [V]
    components: np.ndarray | None = None  # float32 [dim, V]
    contexts: np.ndarray | None = None  # slot: str context keys ("<a b": the two words before, ">a b": after)
    context_weights: np.ndarray | None = None  # slot: float64, the weight of a word in each (others weigh 1)

    def __post_init__(self):
        if self.field not in TEXT_FIELDS:
            raise ValueError(f"text field must be one of {TEXT_FIELDS}, got {self.field!r}")
        if self.weighting not in TEXT_WEIGHTINGS:
            raise ValueError(f"text weighting must be one of {TEXT_WEIGHTINGS}, got {self.weighting!r}")
        if self.dim <= 0:
            raise ValueError(f"dim must be positive, got {self.dim}")

    # --------------------------------------------------------------------------------------- fit
    def fit(self, texts: list[str]) -> "TextFeaturizer":
        """Fit vocabulary, IDF and the SVD basis on a sample of texts (deterministic given the seed).

        When the sample has fewer usable directions than `dim`, the extra output columns are zero
        (they carry nothing), so the output width is always `dim`."""
        if self.weighting == "slot":
            self.contexts, self.context_weights = slot_contexts(texts)
        counts, slot, terms = _fit_counts(texts, self.max_features, self.min_df, self._slot_table())
        if counts is None:  # empty vocabulary: nothing but stop-characters in the sample
            self.vocabulary, self.idf = np.array(["numtok"]), np.ones(1)
            self.components = np.zeros((self.dim, 1), dtype=np.float32)
            return self
        self.vocabulary = np.asarray(terms, dtype=str)
        if self.weighting == "tfidf":  # smooth IDF: log((1 + n) / (1 + df)) + 1
            df = np.bincount(counts.indices, minlength=counts.shape[1]).astype(np.float64) + 1.0
            self.idf = np.log(np.full_like(df, counts.shape[0] + 1) / df) + 1.0
        else:
            self.idf = np.ones(len(terms))
        x = self._weigh(counts, slot)
        k = min(self.dim, x.shape[0] - 1, x.shape[1] - 1)
        comps = np.zeros((self.dim, x.shape[1]), dtype=np.float32)
        if k >= 1:
            c = _randomized_svd_basis(x, k, seed=self.seed)  # fewer than k rows when x has fewer directions
            # Sign convention (largest-|.| coordinate positive) so the basis does not flip between fits.
            signs = np.sign(c[np.arange(len(c)), np.abs(c).argmax(axis=1)])
            signs[signs == 0] = 1
            comps[:len(c)] = (c * signs[:, None]).astype(np.float32)
        self.components = comps
        return self

    @property
    def fitted(self) -> bool:
        return self.components is not None

    # --------------------------------------------------------------------------------- transform
    def transform(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim]; each row depends only on its own text and the fitted state."""
        if not self.fitted:
            raise RuntimeError("TextFeaturizer.transform called before fit")
        x = self._tfidf(texts)
        return np.asarray(x @ self._projection(), dtype=np.float32)

    def _tfidf(self, texts: list[str]):
        return self._weigh(*_count_matrix(texts, self._term_index(), slots=self._slot_table()))

    def _term_index(self) -> dict:
        """term -> column, built once per fitted vocabulary (not once per chunk: 32,768 terms)."""
        cached = getattr(self, "_terms_at", None)
        if cached is None or cached[0] is not self.vocabulary:
            self._terms_at = (self.vocabulary, {t: i for i, t in enumerate(self.vocabulary.tolist())})
        return self._terms_at[1]

    def _projection(self) -> np.ndarray:
        """components.T as float64 in C order, made once per fitted basis: a sparse @ dense product copies a
        dense operand that is not C-ordered (the transposed view), 64 MiB per chunk at 256 x 32,768."""
        cached = getattr(self, "_projects", None)
        if cached is None or cached[0] is not self.components:
            self._projects = (self.components, np.ascontiguousarray(self.components.T, dtype=np.float64))
        return self._projects[1]

    def _slot_table(self) -> "SlotTable | None":
        """The slot state as lookups (built once per fitted state)."""
        if self.weighting != "slot":
            return None
        cached = getattr(self, "_slots", None)
        if cached is None or cached[0] is not self.contexts:
            self._slots = (self.contexts, SlotTable.of(self.contexts.tolist(), self.context_weights.tolist()))
        return self._slots[1]

    def _weigh(self, counts, slot=None):
        """Counts -> sublinear TF (x IDF; slot weighting: x `slot`, the term's largest occurrence weight in the
        row, a matrix of the same entries), each row scaled to unit l2 norm (all-zero rows stay zero)."""
        x = counts.astype(np.float64)
        x.data = np.log(x.data) + 1.0
        x.data *= self.idf[x.indices]
        if slot is not None:
            x.data *= slot.data
        row_len = np.diff(x.indptr)
        # sequential sums of squares per row (bincount adds in data order), as sklearn's normalize does
        norm = np.sqrt(np.bincount(np.repeat(np.arange(x.shape[0]), row_len), weights=x.data * x.data,
                                   minlength=x.shape[0]))
        x.data /= np.repeat(norm, row_len)
        return x

    # ------------------------------------------------------------------------------ persistence
    def state(self) -> dict[str, np.ndarray]:
        slots = {"contexts": self.contexts, "context_weights": self.context_weights} if self.weighting == "slot" else {}
        return {"vocabulary": self.vocabulary, "idf": self.idf, "components": self.components,
                "config": np.array([self.dim, self.seed, self.max_features, self.min_df], dtype=np.int64),
                "field": np.array([self.field]), "weighting": np.array([self.weighting]), **slots}

    def to_bytes(self) -> bytes:
        """The fitted state as an .npz of plain arrays (read back with allow_pickle=False)."""
        import io
        buf = io.BytesIO()
        np.savez(buf, **self.state())
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "TextFeaturizer":
        import io
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            dim, seed, max_features, min_df = (int(v) for v in z["config"])
            slots = {k: z[k] for k in ("contexts", "context_weights") if k in z.files}
            return cls(dim=dim, field=str(z["field"][0]), weighting=str(z["weighting"][0]), seed=seed,
                       max_features=max_features, min_df=min_df,
                       vocabulary=z["vocabulary"], idf=z["idf"], components=z["components"], **slots)

    def transform_examples(self, examples: list) -> np.ndarray:
        """The feature block of examples (the text of each chosen by `field`)."""
        if not examples:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.transform([example_text(ex, self.field) for ex in examples])


_WORD = re.compile(r"(?u)\b\w+\b")


def _preprocess(text: str) -> str:
    return mask_numbers(text.lower())


def _terms(text: str) -> list[str]:
    """Word unigrams, then bigrams, of the masked, lower-cased text."""
    words = _WORD.findall(_preprocess(text))
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


_PAD = ("<s>", "<s>")  # never a word (\w+ has no "<"), so a context at the text's edge is its own
_END = ("</s>", "</s>")


def _pairs(words: list[str]) -> list[str]:
    """Each two neighbouring words of the padded text, "a b": the word at i has the context pairs[i] on its left
    and pairs[i + 3] on its right (a context key is "<" or ">" + its pair), and pairs[2:-2] are its bigrams."""
    padded = [*_PAD, *words, *_END]
    return list(map(" ".join, zip(padded, padded[1:])))


def _masked_words(text: str) -> tuple[list[str], list[str] | None]:
    """The masked words of a text (as `_terms` sees them) and the number each `numtok` stands for, in order
    (None when the text itself holds the word "numtok", so the two cannot be paired)."""
    found: list[str] = []
    words = _WORD.findall(_NUMBER.sub(lambda m: found.append(m.group(0)) or NUMBER_TOKEN, text.lower()))
    return words, (found if words.count(_NUM) == len(found) else None)


def _effective_number(counts) -> float:
    """exp of the entropy of a distribution given by counts: how many values stand there, evenly counted."""
    c = np.fromiter(counts, dtype=np.float64)
    q = c / c.sum()
    return float(np.exp(-(q * np.log(q)).sum()))


def _by_context(seen: Counter, side: str) -> dict[str, list[int]]:
    """(pair, value) counts -> context key ("<" or ">" + pair) -> its values' counts, in order of first sight."""
    by: dict[str, list[int]] = {}
    for (pair, _), n in seen.items():
        by.setdefault(side + pair, []).append(n)
    return by


def slot_contexts(texts: list[str], min_context: int = SLOT_MIN_CONTEXT, alpha: float = SLOT_ALPHA,
                  floor: float = SLOT_FLOOR) -> tuple[np.ndarray, np.ndarray]:
    """The fitted state of the slot weighting, from contexts seen at least min_context times in the sample:
    * where more than `floor` words stand (the effective number), the weight (number / floor) ** -alpha of a
      word there. A template's fixed word has one filler, a twin request's "ten" / "two" about one (neither is
      stored: weight 1), a topic noun in "the ___ clerk" as many as there are nouns; a context seen fewer times
      says nothing (varied real text: mostly weight 1, the tf feature);
    * where a number stands and at most `floor` numbers do ("take 10 from", "take 2 from"), key "#" + context,
      weight 1: the number there is part of the request and is kept as it is written, where an operand's
      place (any number) stays masked.
    Counted as (context pair, word) pairs by Counter (its loop is C's), per side, so that each context's
    fillers keep the order in which they were first seen (their effective number sums in that order)."""
    left, right, number_left, number_right = Counter(), Counter(), Counter(), Counter()
    for text in texts:
        words, found = _masked_words(text)
        pairs = _pairs(words)
        left.update(zip(pairs, words))
        right.update(zip(pairs[3:], words))
        if found:
            at = [i for i, word in enumerate(words) if word == _NUM]
            number_left.update(zip([pairs[i] for i in at], found))
            number_right.update(zip([pairs[i + 3] for i in at], found))
    fillers = _by_context(left, "<") | _by_context(right, ">")
    numbers = _by_context(number_left, "<") | _by_context(number_right, ">")
    keys, weights = [], []
    for key in sorted(fillers):
        c = fillers[key]
        if sum(c) >= min_context and len(c) > 1 and (number := _effective_number(c)) > floor:
            keys.append(key)
            weights.append((number / floor) ** -alpha)
    for key in sorted(numbers):
        c = numbers[key]
        if sum(c) >= min_context and _effective_number(c) <= floor:
            keys.append("#" + key)
            weights.append(1.0)
    return np.asarray(keys, dtype=str), np.asarray(weights, dtype=np.float64)


@dataclass(frozen=True)
class SlotTable:
    """The slot state as lookups by a context's pair ("a b"): a word's weight where the context is on its left
    or right (`slot_contexts`' "<" and ">" keys), and the contexts that keep a number (its "#" keys)."""

    left: dict
    right: dict
    number_left: frozenset
    number_right: frozenset

    @classmethod
    def of(cls, keys: list[str], weights: list[float]) -> "SlotTable":
        side = {k: {} for k in ("<", ">", "#<", "#>")}
        for key, weight in zip(keys, weights):
            cut = 2 if key[0] == "#" else 1
            side[key[:cut]][key[cut:]] = weight
        return cls(side["<"], side[">"], frozenset(side["#<"]), frozenset(side["#>"]))


def _weighted_terms(text: str, slots: SlotTable) -> tuple[list[str], list[float]]:
    """_terms and each occurrence's slot weight: a word by the more telling of its two contexts (the larger
    weight; an unknown context weighs 1), a bigram by the smaller of its words'; a number written as it is
    where either of its contexts keeps numbers (else masked)."""
    words, found = _masked_words(text)
    pairs = _pairs(words)
    on_left = map(slots.left.get, pairs[:len(words)], repeat(1.0))
    w = list(map(max, on_left, map(slots.right.get, pairs[3:], repeat(1.0))))
    bigrams = pairs[2:-2]
    if found and (slots.number_left or slots.number_right):
        shown = False
        for i, value in zip([i for i, word in enumerate(words) if word == _NUM], found):
            if pairs[i] in slots.number_left or pairs[i + 3] in slots.number_right:
                words[i], shown = value, True
        if shown:
            bigrams = list(map(" ".join, zip(words, words[1:])))
    return words + bigrams, w + list(map(min, w, w[1:]))


_BLOCK = 4096


def _count_matrix(texts: list[str], vocabulary: dict, grow: bool = False, slots: SlotTable | None = None):
    """CSR float64 [len(texts), len(vocabulary)] of term counts, column indices sorted within each row.
    With grow, unseen terms are added to `vocabulary` (index = order of first appearance). With slots
    (the slot weighting), also each entry's largest occurrence weight, as a matrix of the same entries (else
    None).

    Only the term lists are made text by text; the counts and largest weights are taken with numpy over the
    whole list (a dict loop per term was most of `embed`'s time): each row's entries end sorted by column, and
    a count or a largest weight does not depend on the order of a term's occurrences."""
    from scipy import sparse

    columns, weights, lengths = [np.zeros(0, dtype=np.int64)], [np.zeros(0)], []
    held_columns, held_weights = [], []  # a block's, made arrays every _BLOCK texts (Python numbers are large)
    for done, text in enumerate(texts, 1):
        if slots is None:
            terms = _terms(text)
        else:
            terms, w = _weighted_terms(text, slots)
            held_weights.extend(w)
        if grow:  # unseen terms, in order of first appearance
            vocabulary.update(zip(filterfalse(vocabulary.__contains__, dict.fromkeys(terms)),
                                  count(len(vocabulary))))
        held_columns.extend(map(vocabulary.get, terms, repeat(-1)))
        lengths.append(len(terms))
        if done % _BLOCK == 0 or done == len(texts):
            columns.append(np.asarray(held_columns, dtype=np.int64))
            weights.append(np.asarray(held_weights, dtype=np.float64))
            held_columns, held_weights = [], []
    n, width = len(texts), max(len(vocabulary), 1)
    column = np.concatenate(columns)
    known = column >= 0
    # one key per occurrence of a known term, (row, column) in one integer; equal keys, sorted, are one entry
    key = np.repeat(np.arange(n, dtype=np.int64), lengths)[known] * width + column[known]
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, dtype=np.int64)
    entry = key[starts]
    indices = (entry % width).astype(np.int32)
    indptr = np.r_[0, np.cumsum(np.bincount(entry // width, minlength=n))].astype(np.int64)
    counts = np.diff(np.r_[starts, key.size]).astype(np.float64)
    shape = (n, len(vocabulary))
    x = sparse.csr_matrix((counts, indices, indptr), shape=shape)
    w = None
    if slots is not None:
        best = np.maximum.reduceat(np.concatenate(weights)[known][order], starts) if starts.size \
            else np.zeros(0, dtype=np.float64)
        w = sparse.csr_matrix((best, indices.copy(), indptr.copy()), shape=shape)
    for m in (x, w):  # already sorted: sort_indices only records it
        if m is not None:
            m.sort_indices()
    return x, w


def _fit_counts(texts: list[str], max_features: int, min_df: int, slots: dict | None = None):
    """(counts over the kept terms, their slot weights (None unless slots), the kept terms in alphabetical
    order), or (None, None, None) when no term is kept. Terms in fewer than min_df texts are dropped, then the
    max_features most frequent are kept.

    This is scikit-learn's CountVectorizer.fit_transform, step by step (the same data order within rows
    and the same tie-break among equally frequent terms), so the features equal those it gave; importing
    scikit-learn alone was most of a short `embed` (benchmarks/results/code_figures.md)."""
    vocabulary: dict[str, int] = {}
    x, w = _count_matrix(texts, vocabulary, grow=True, slots=slots)
    if not vocabulary:
        return None, None, None
    terms = sorted(vocabulary)
    alphabetical = np.empty(len(terms), dtype=x.indices.dtype)
    alphabetical[[vocabulary[t] for t in terms]] = np.arange(len(terms))
    x.indices = alphabetical[x.indices]
    if w is not None:
        w.indices = x.indices.copy()
    keep = np.bincount(x.indices, minlength=len(terms)) >= min_df
    if keep.sum() > max_features:
        frequency = np.bincount(x.indices, weights=x.data, minlength=len(terms))
        top = np.zeros(len(terms), dtype=bool)
        top[np.flatnonzero(keep)[(-frequency[keep]).argsort()[:max_features]]] = True
        keep = top
    if not keep.any():
        return None, None, None
    kept = np.flatnonzero(keep)
    return x[:, kept], (None if w is None else w[:, kept]), [terms[j] for j in kept]


def _randomized_svd_basis(x, k: int, seed: int) -> np.ndarray:
    """[<= k, n_features] top right singular vectors of sparse x (only those x has: a sample of repeated
    texts has fewer directions than k). Halko et al.'s randomized SVD, 10 extra directions, 7 power
    iterations, from scikit-learn's random draws: the basis equals TruncatedSVD(algorithm="randomized",
    n_iter=7, random_state=seed)'s to about 1e-9.

    Every dense factorisation is on x's short side (its rows, when a sample of up to --text-sample texts
    meets a 32,768-term vocabulary). scikit-learn also LU-factors the [terms, k + 10] product in every
    power iteration and QR-factors it at the end, most of the fit's time for the same subspace
    (benchmarks/results/code_figures.md)."""
    from scipy import linalg

    transposed = x.shape[0] < x.shape[1]
    tall, wide = (x.T.tocsr(), x) if transposed else (x, x.T.tocsr())  # tall: [long side, short side]
    q = np.random.RandomState(seed).normal(size=(tall.shape[1], k + 10))
    for _ in range(7):
        # one LU per iteration, not one per product: between two LUs the spectrum is squared, which loses
        # only directions under 1e-8 of the largest, far below the top k + 10 of a text sample
        q, _ = linalg.lu(wide @ (tall @ q), permute_l=True, check_finite=False)
    q, _ = linalg.qr(q, mode="economic", check_finite=False)
    # an orthonormal basis u = y r of range(y = x q), from the small Gram matrix (well conditioned: q is
    # orthonormal); u is never formed: both of its products are taken through y
    y = tall @ q
    s2, w = linalg.eigh(y.T @ y, check_finite=False)
    kept = s2 > s2[-1] * 1e-12  # the directions x has
    r = w[:, kept] / np.sqrt(s2[kept])
    u_hat, _, vt = linalg.svd(((wide @ y) @ r).T, full_matrices=False, lapack_driver="gesdd")
    return (y @ (r @ u_hat[:, :k])).T if transposed else vt[:k]


def prepare_text(ctx):
    """The text feature of an `embed` run (features/embed.FEATURE_KINDS' `prepare`): its basis is fitted on a
    seeded sample of --text-sample rows, once, and shared with every process (`ctx.shared`)."""
    from cluster_curate.features.embed import ALGORITHM_VERSION, DEFAULT_TEXT_DIM
    o = ctx.opts
    dim = o["dim"] or DEFAULT_TEXT_DIM
    key = {"dataset": ctx.dataset_fingerprint, "dim": dim, "field": o["text_field"], "seed": o["seed"],
           "weighting": o["text_weighting"], "sample": o["text_sample"],
           "max_features": TextFeaturizer.max_features, "algorithm": ALGORITHM_VERSION}

    def fit() -> bytes:
        chosen = ctx.sample(min(ctx.parsed, o["text_sample"]), salt=2)
        feat = TextFeaturizer(dim=dim, field=o["text_field"], weighting=o["text_weighting"], seed=o["seed"])
        feat.fit([example_text(ex, o["text_field"]) for ex in chosen])
        return feat.to_bytes()

    return TextFeaturizer.from_bytes(ctx.shared(key, fit))
