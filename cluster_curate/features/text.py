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
from dataclasses import dataclass
from itertools import chain, count, repeat

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
    def fit(self, texts: list[str], on_step=None) -> "TextFeaturizer":
        """Fit vocabulary, IDF and the SVD basis on a sample of texts (deterministic given the seed).

        When the sample has fewer usable directions than `dim`, the extra output columns are zero
        (they carry nothing), so the output width is always `dim`; the basis holds the usable ones alone (at
        `--dim 100000` on 120 rows it was 2 GB of zeros). on_step(1): after each of its FIT_STEPS steps (fewer
        when there is no SVD to make)."""
        step = on_step or (lambda n=1: None)
        words, keys, weights = _Words.of(texts), None, None
        if self.weighting == "slot":
            self.contexts, self.context_weights = _slot_state(words)
            keys, weights = self.contexts.tolist(), self.context_weights.tolist()
        counts, slot, terms = _fit_counts(words, self.max_features, self.min_df, keys, weights)
        del words  # its arrays, 40 bytes a word of the sample, would stay through the SVD: the fit's peak
        if counts is None:  # empty vocabulary: nothing but stop-characters in the sample
            self.vocabulary, self.idf = np.array(["numtok"]), np.ones(1)
            self.components = np.zeros((0, 1), dtype=np.float32)
            return self
        self.vocabulary = np.asarray(terms, dtype=str)
        if self.weighting == "tfidf":  # smooth IDF: log((1 + n) / (1 + df)) + 1
            df = np.bincount(counts.indices, minlength=counts.shape[1]).astype(np.float64) + 1.0
            self.idf = np.log(np.full_like(df, counts.shape[0] + 1) / df) + 1.0
        else:
            self.idf = np.ones(len(terms))
        x = self._weigh(counts, slot)
        step(1)
        k = min(self.dim, x.shape[0] - 1, x.shape[1] - 1)
        comps = np.zeros((0, x.shape[1]), dtype=np.float32)
        if x.shape[0] == 1:
            # one row (a dataset of one example): its one direction is its own unit row, what the SVD would give
            # (k above is the randomized SVD's bound, 0 here: the row was all zero)
            comps = x.toarray().astype(np.float32)
        elif k >= 1:
            # fewer than k rows when x has fewer directions
            c = _randomized_svd_basis(x, k, seed=self.seed, on_step=step)
            # Sign convention (largest-|.| coordinate positive) so the basis does not flip between fits.
            signs = np.sign(c[np.arange(len(c)), np.abs(c).argmax(axis=1)])
            signs[signs == 0] = 1
            comps = (c * signs[:, None]).astype(np.float32)
        self.components = comps
        return self

    def zero_reason(self, text: str, sample_rows: int | None = None) -> str:
        """Why the row of `text` is all zero (`transform`), in words after "their text": no word at all, only
        numbers (masked to one token), no term of the fitted vocabulary, or terms the basis has no direction along
        (`sample_rows`: the rows it was fitted on, when known: k directions from N rows, at most N - 1)."""
        tokens = _TOKEN.findall(text.lower())
        if not tokens:
            return "holds no word the text feature counts (only punctuation, symbols or spaces, e.g. '?')"
        if all(_NUMBER.fullmatch(t) for t in tokens):
            return "holds only numbers, which the text feature masks (every number reads as one token)"
        if not self._tfidf([text]).nnz:
            fitted = f" (fitted on {sample_rows:,} sampled rows)" if sample_rows else ""
            return f"holds no word or word pair of the text feature's vocabulary{fitted}"
        if sample_rows and len(self.components) >= sample_rows - 1:
            return (f"has words the text basis has no direction for: too few rows to fit the text basis: "
                    f"{sample_rows:,} (it has {len(self.components)} direction(s))")
        return f"has words the text basis has no direction for (it has {len(self.components)} direction(s))"

    @property
    def fitted(self) -> bool:
        return self.components is not None

    # --------------------------------------------------------------------------------- transform
    def transform(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim]; each row depends only on its own text and the fitted state."""
        if not self.fitted:
            raise RuntimeError("TextFeaturizer.transform called before fit")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, :len(self.components)] = self._tfidf(texts) @ self._projection()
        return out

    def _tfidf(self, texts: list[str]):
        return self._weigh(*_term_counts(texts, self._term_index()))

    def _term_index(self) -> "TermIndex":
        """The fitted vocabulary and slot state by word ids, built once per fitted state (not once per chunk:
        32,768 terms)."""
        cached = getattr(self, "_terms_at", None)
        if cached is None or cached[0] is not self.vocabulary or cached[1] is not self.contexts:
            slots = (self.contexts.tolist(), self.context_weights.tolist()) if self.weighting == "slot" else ()
            self._terms_at = (self.vocabulary, self.contexts, TermIndex.of(self.vocabulary.tolist(), *slots))
        return self._terms_at[2]

    def _projection(self) -> np.ndarray:
        """components.T as float64 in C order, made once per fitted basis: a sparse @ dense product copies a
        dense operand that is not C-ordered (the transposed view), 64 MiB per chunk at 256 x 32,768."""
        cached = getattr(self, "_projects", None)
        if cached is None or cached[0] is not self.components:
            self._projects = (self.components, np.ascontiguousarray(self.components.T, dtype=np.float64))
        return self._projects[1]

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


# One regex pass gives the words of the lower-cased, masked text (`\b\w+\b` of mask_numbers' output): a number
# as it is written, or a run of word characters without a digit. Every digit starts a number and no number holds
# a letter, so the runs are the masked text's other words; numbers are masked afterwards, by id.
_TOKEN = re.compile(_NUMBER.pattern + r"|[^\W\d]+")
_PAD, _END = "<s>", "</s>"  # never a token (no "<"), so a context at the text's edge is its own
_PAD_ID, _END_ID, _NUM_ID = 0, 1, 2  # the first ids of every word index: _PAD, _END, _NUM
_BLOCK = 4096  # texts whose token strings are held at once


class _Index(dict):
    """token -> id, an unseen token taking the next id (map(index.__getitem__, tokens) loops in C)."""

    def __missing__(self, token: str) -> int:
        self[token] = new = len(self)
        return new


@dataclass
class _Words:
    """Texts as word ids: each token's id as written (`ids`: a number keeps its own) and masked (`masked`: a
    number is numtok), its text (`row`), its two contexts as pair codes a * base + b (`left`: the two masked words
    before it, `right`: after, the text padded with _PAD and _END), and whether it is a number that can be shown
    (`shows`: its text does not hold the word "numtok" itself, so numtoks and numbers pair up). `tokens`: the
    strings of the ids (None over a fitted index, `of(known=...)`)."""

    tokens: list | None
    base: int
    lengths: np.ndarray
    row: np.ndarray
    ids: np.ndarray
    masked: np.ndarray
    shows: np.ndarray
    left: np.ndarray
    right: np.ndarray

    @classmethod
    def of(cls, texts: list[str], known: dict | None = None) -> "_Words":
        """The words of texts, by ids of their own (tokens in order of first sight) or, with `known`, by its ids
        (a word it lacks: len(known))."""
        index = _Index(zip((_PAD, _END, _NUM), count()))
        ids, lengths = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for at in range(0, len(texts), _BLOCK):
            found = list(map(_TOKEN.findall, map(str.lower, texts[at:at + _BLOCK])))
            lengths.append(np.fromiter(map(len, found), dtype=np.int64, count=len(found)))
            ids.append(np.fromiter(map(index.__getitem__, chain.from_iterable(found)), dtype=np.int64))
        ids, lengths, tokens = np.concatenate(ids), np.concatenate(lengths), list(index)
        number = np.fromiter((_NUMBER.match(t) is not None for t in tokens), dtype=bool, count=len(tokens))
        row = np.repeat(np.arange(len(texts)), lengths)
        literal = np.zeros(len(texts), dtype=bool)
        literal[row[ids == _NUM_ID]] = True
        shows = number[ids] & ~literal[row]
        masked = np.where(number[ids], _NUM_ID, ids)
        base = len(tokens)
        if known is not None:
            base = len(known) + 1
            to_known = np.fromiter(map(known.get, tokens, repeat(base - 1)), dtype=np.int64, count=len(tokens))
            tokens, ids, masked = None, to_known[ids], to_known[masked]
        at = np.arange(len(ids)) + 2 + 4 * row  # each text padded by two _PAD before and two _END after
        padded = np.full(len(ids) + 4 * len(texts), _PAD_ID, dtype=np.int64)
        padded[at] = masked
        ends = np.cumsum(lengths) + 4 * np.arange(len(texts)) + 2
        padded[ends] = padded[ends + 1] = _END_ID
        return cls(tokens, base, lengths, row, ids, masked, shows, padded[at - 2] * base + padded[at - 1],
                   padded[at + 1] * base + padded[at + 2])

    def pair(self, code: int) -> str:
        """The pair "a b" of a context code."""
        return f"{self.tokens[code // self.base]} {self.tokens[code % self.base]}"

    def term(self, code: int) -> str:
        """The term of a term code (`_occurrences`)."""
        return self.tokens[code] if code < self.base else self.pair(code - self.base)


def _lookup(codes: np.ndarray, keys: np.ndarray, values: np.ndarray, default) -> np.ndarray:
    """values[i] where codes equal sorted keys[i], default elsewhere."""
    if not keys.size:
        return np.full(codes.shape, default, dtype=values.dtype)
    at = np.minimum(np.searchsorted(keys, codes), keys.size - 1)
    return np.where(keys[at] == codes, values[at], default)


def _effective_numbers(counts: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """exp of the entropy of each distribution given by counts[starts[i]:starts[i + 1]]: how many values stand
    there, evenly counted. The segments of one length are the rows of one array, each summed as numpy sums it
    alone (pairwise; add.reduceat sums in another order), so a number is the one its counts give by themselves."""
    lengths = np.diff(np.r_[starts, counts.size])
    numbers = np.empty(starts.size, dtype=np.float64)
    for n in np.unique(lengths).tolist():
        at = np.flatnonzero(lengths == n)
        c = counts[starts[at, None] + np.arange(n)].astype(np.float64)
        q = c / c.sum(axis=1, keepdims=True)
        numbers[at] = np.exp(-(q * np.log(q)).sum(axis=1))
    return numbers


def _fillers(context: np.ndarray, filler: np.ndarray):
    """Each context seen with its fillers' counts in the order first seen (their effective number sums in that
    order): (the contexts, where each one's counts start, the counts)."""
    contexts, which = np.unique(context, return_inverse=True)
    width = int(filler.max()) + 1 if filler.size else 1
    pairs, first, counts = np.unique(which * width + filler, return_index=True, return_counts=True)
    which = pairs // width
    order = np.lexsort((first, which))
    which, counts = which[order], counts[order]
    starts = np.flatnonzero(np.r_[True, which[1:] != which[:-1]]) if which.size else np.zeros(0, dtype=np.int64)
    return contexts[which[starts]], starts, counts


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
    Keys sorted; a context's fillers summed in the order first seen."""
    return _slot_state(_Words.of(texts), min_context, alpha, floor)


def _slot_state(words: _Words, min_context: int = SLOT_MIN_CONTEXT, alpha: float = SLOT_ALPHA,
                floor: float = SLOT_FLOOR) -> tuple[np.ndarray, np.ndarray]:
    """slot_contexts of texts as _Words: contexts and (context, word) pairs counted by id with numpy, and only
    the contexts seen often enough made strings."""
    fillers, numbers = [], []
    shown = words.shows
    for side, context in (("<", words.left), (">", words.right)):
        codes, starts, counts = _fillers(context, words.masked)
        if starts.size:
            number, seen = _effective_numbers(counts, starts), np.add.reduceat(counts, starts)
            kept = (seen >= min_context) & (np.diff(np.r_[starts, counts.size]) > 1) & (number > floor)
            fillers += [(side + words.pair(code), (n / floor) ** -alpha)
                        for code, n in zip(codes[kept].tolist(), number[kept].tolist())]
        codes, starts, counts = _fillers(context[shown], words.ids[shown])
        if starts.size:
            seen = np.add.reduceat(counts, starts)
            kept = (seen >= min_context) & (_effective_numbers(counts, starts) <= floor)
            numbers += [("#" + side + words.pair(code), 1.0) for code in codes[kept].tolist()]
    keys, weights = zip(*sorted(fillers), *sorted(numbers)) if fillers or numbers else ((), ())
    return np.asarray(keys, dtype=str), np.asarray(weights, dtype=np.float64)


@dataclass(frozen=True)
class SlotCodes:
    """The slot state over a word index (`_Words`' pair codes, sorted): a word's weight where the context is on
    its left or right (`slot_contexts`' "<" and ">" keys), and the contexts that keep a number (its "#" keys)."""

    left: tuple
    right: tuple
    number_left: np.ndarray
    number_right: np.ndarray

    @classmethod
    def of(cls, keys: list[str], weights: list[float], words: dict, base: int) -> "SlotCodes":
        """A key whose words `words` lacks is left out: no text over that index has its context."""
        side = {k: {} for k in ("<", ">", "#<", "#>")}
        for key, weight in zip(keys, weights):
            cut = 2 if key[0] == "#" else 1
            a, b = key[cut:].split(" ")
            if a in words and b in words:
                side[key[:cut]][words[a] * base + words[b]] = weight

        def table(by: dict) -> tuple[np.ndarray, np.ndarray]:
            codes = np.fromiter(by, dtype=np.int64, count=len(by))
            order = np.argsort(codes)
            return codes[order], np.fromiter(by.values(), dtype=np.float64, count=len(by))[order]

        return cls(table(side["<"]), table(side[">"]), table(side["#<"])[0], table(side["#>"])[0])


@dataclass(frozen=True)
class TermIndex:
    """A fitted vocabulary (and slot state) by word ids, built once per fitted state: `words` (every word of a
    term or a context), the terms' sorted codes (a word: its id; a bigram a b: (a + 1) * base + b) and columns."""

    words: dict
    codes: np.ndarray
    columns: np.ndarray
    word_columns: np.ndarray  # by word id (an unknown word's too): its column as a term alone, -1 when none
    slots: SlotCodes | None

    @classmethod
    def of(cls, vocabulary: list[str], keys: list[str] | None = None, weights: list[float] | None = None):
        words = _Index(zip((_PAD, _END, _NUM), count()))
        terms = [list(map(words.__getitem__, term.split(" "))) for term in vocabulary]
        for key in keys or ():
            list(map(words.__getitem__, key.lstrip("#")[1:].split(" ")))
        base = len(words) + 1
        codes = np.fromiter(((t[0] + 1) * base + t[1] if len(t) == 2 else t[0] for t in terms), dtype=np.int64,
                            count=len(terms))
        order = np.argsort(codes)
        word_columns = np.full(base, -1, dtype=np.int64)
        alone = codes < base
        word_columns[codes[alone]] = np.flatnonzero(alone)
        slots = None if keys is None else SlotCodes.of(keys, weights, words, base)
        return cls(dict(words), codes[order], order, word_columns, slots)


def _occurrences(words: _Words, slots: SlotCodes | None):
    """Each term occurrence of the texts (words, then their bigrams) as (code: a word's id, a bigram's (a + 1) *
    base + b; its text; its slot weight, None without slots). The slot weight of a word is that of the more
    telling of its two contexts (the larger; an unknown context weighs 1), of a bigram the smaller of its words';
    a number is written as it is where either of its contexts keeps numbers (else masked)."""
    shown, weight = words.masked, None
    if slots is not None:
        weight = np.maximum(_lookup(words.left, *slots.left, 1.0), _lookup(words.right, *slots.right, 1.0))
        at = np.flatnonzero(words.shows)
        at = at[np.isin(words.left[at], slots.number_left) | np.isin(words.right[at], slots.number_right)]
        shown = words.masked.copy()
        shown[at] = words.ids[at]
    inner = words.row[1:] == words.row[:-1]  # neighbours in one text: a bigram
    codes = np.concatenate([shown, ((shown[:-1] + 1) * words.base + shown[1:])[inner]])
    rows = np.concatenate([words.row, words.row[1:][inner]])
    if weight is not None:
        weight = np.concatenate([weight, np.minimum(weight[:-1], weight[1:])[inner]])
    return codes, rows, weight


def _term_counts(texts: list[str], index: TermIndex):
    """(term counts, largest slot weights or None) of texts over a fitted vocabulary (`_count_matrix`)."""
    words = _Words.of(texts, index.words)
    codes, rows, weight = _occurrences(words, index.slots)
    n = words.ids.size  # the words' codes, their ids, come first: looked up by id, the bigrams' by search
    column = np.concatenate([index.word_columns[codes[:n]], _lookup(codes[n:], index.codes, index.columns, -1)])
    return _count_matrix(column, rows, weight, len(texts), len(index.columns))


def _count_matrix(column: np.ndarray, row: np.ndarray, weight: np.ndarray | None, n: int, width: int):
    """CSR float64 [n, width] of term counts, column indices sorted within each row, from each occurrence's
    column (-1: not in the vocabulary) and row; with weight (the slot weighting), also each entry's largest
    occurrence weight, as a matrix of the same entries (else None). A count or a largest weight does not depend
    on the order of a term's occurrences."""
    from scipy import sparse

    known = column >= 0
    stride = max(width, 1)
    # one key per occurrence of a known term, (row, column) in one integer; equal keys, sorted, are one entry
    key = row[known] * stride + column[known]
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, dtype=np.int64)
    entry = key[starts]
    indices = (entry % stride).astype(np.int32)
    indptr = np.r_[0, np.cumsum(np.bincount(entry // stride, minlength=n))].astype(np.int64)
    counts = np.diff(np.r_[starts, key.size]).astype(np.float64)
    x = sparse.csr_matrix((counts, indices, indptr), shape=(n, width))
    w = None
    if weight is not None:
        best = np.maximum.reduceat(weight[known][order], starts) if starts.size else np.zeros(0, dtype=np.float64)
        w = sparse.csr_matrix((best, indices.copy(), indptr.copy()), shape=(n, width))
    for m in (x, w):  # already sorted: sort_indices only records it
        if m is not None:
            m.sort_indices()
    return x, w


def _fit_counts(words: _Words, max_features: int, min_df: int, keys: list[str] | None = None,
                weights: list[float] | None = None):
    """(counts over the kept terms, their slot weights (None without the slot state keys, weights), the kept
    terms in alphabetical order), or (None, None, None) when no term is kept. Terms in fewer than min_df texts
    are dropped, then the max_features most frequent are kept.

    This is scikit-learn's CountVectorizer.fit_transform, step by step (the same data order within rows: by
    each term's first appearance, text by text, words before bigrams; the same tie-break among equally frequent
    terms), so the features equal those it gave; importing scikit-learn alone was most of a short `embed`
    (benchmarks/results/code_figures.md)."""
    slots = None if keys is None else SlotCodes.of(keys, weights, dict(zip(words.tokens, count())), words.base)
    codes, rows, weight = _occurrences(words, slots)
    if not codes.size:
        return None, None, None
    # each occurrence's place in the term lists (each text's words, then its bigrams) read text after text
    length = words.lengths
    start = np.cumsum(length) - length
    term_start = np.cumsum(np.maximum(2 * length - 1, 0)) - np.maximum(2 * length - 1, 0)
    word_at = term_start[words.row] + np.arange(words.row.size) - start[words.row]
    inner = words.row[1:] == words.row[:-1]
    place = np.concatenate([word_at, (word_at + length[words.row])[:-1][inner]])
    stream = np.empty_like(codes)
    stream[place] = codes
    distinct, first, inverse = np.unique(stream, return_index=True, return_inverse=True)
    appearing = np.argsort(first)  # the vocabulary in order of first appearance: a term's column while counting
    column_of = np.empty(distinct.size, dtype=np.int64)
    column_of[appearing] = np.arange(distinct.size)
    x, w = _count_matrix(column_of[inverse][place], rows, weight, int(words.lengths.size), distinct.size)
    found = list(map(words.term, distinct[appearing].tolist()))
    alphabetical = sorted(range(len(found)), key=found.__getitem__)
    terms = [found[i] for i in alphabetical]
    rank = np.empty(len(terms), dtype=x.indices.dtype)
    rank[alphabetical] = np.arange(len(terms))
    x.indices = rank[x.indices]
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


SVD_POWER_ITERATIONS = 7
FIT_STEPS = 1 + SVD_POWER_ITERATIONS + 1  # progress: the weighted counts, the SVD's power iterations, its basis


def _randomized_svd_basis(x, k: int, seed: int, on_step=None) -> np.ndarray:
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
    step = on_step or (lambda n=1: None)
    q = np.random.RandomState(seed).normal(size=(tall.shape[1], k + 10))
    for _ in range(SVD_POWER_ITERATIONS):
        # one LU per iteration, not one per product: between two LUs the spectrum is squared, which loses
        # only directions under 1e-8 of the largest, far below the top k + 10 of a text sample
        q, _ = linalg.lu(wide @ (tall @ q), permute_l=True, check_finite=False)
        step(1)
    q, _ = linalg.qr(q, mode="economic", check_finite=False)
    # an orthonormal basis u = y r of range(y = x q), from the small Gram matrix (well conditioned: q is
    # orthonormal); u is never formed: both of its products are taken through y
    y = tall @ q
    s2, w = linalg.eigh(y.T @ y, check_finite=False)
    kept = s2 > s2[-1] * 1e-12  # the directions x has
    r = w[:, kept] / np.sqrt(s2[kept])
    b = (wide @ y) @ r  # wide @ u: [short side, k + 10]
    if not transposed:
        basis = linalg.svd(b.T, full_matrices=False, lapack_driver="gesdd")[2][:k]
    else:
        # b's right singular vectors are those of its [k + 10, k + 10] R factor: the SVD of b.T also formed its
        # [k + 10, rows] factor, thrown away; the same basis to 1e-12, 0.3 s instead of 1.1 s at 20,000 rows
        u_hat = linalg.svd(np.linalg.qr(b, mode="r").T, full_matrices=False, lapack_driver="gesdd")[0]
        basis = (y @ (r @ u_hat[:, :k])).T
    step(1)
    return basis


def prepare_text(ctx):
    """The text feature of an `embed` run (features/embed.FEATURE_KINDS' `prepare`): its basis is fitted on a
    seeded sample of --text-sample rows, once, and shared with every process (`ctx.shared`)."""
    from cluster_curate.features.embed import DEFAULT_TEXT_DIM, FEATURES_VERSION
    o = ctx.opts
    dim = o["dim"] or DEFAULT_TEXT_DIM
    key = {"dataset": ctx.dataset_fingerprint, "dim": dim, "field": o["text_field"], "seed": o["seed"],
           "weighting": o["text_weighting"], "sample": o["text_sample"],
           "max_features": TextFeaturizer.max_features, "algorithm": FEATURES_VERSION}

    def fit() -> bytes:
        from cluster_curate import console
        chosen = ctx.sample(min(ctx.parsed, o["text_sample"]), salt=2)
        feat = TextFeaturizer(dim=dim, field=o["text_field"], weighting=o["text_weighting"], seed=o["seed"])
        with console.progress(f"text: fit the basis ({len(chosen):,} rows: vocabulary, {o['text_weighting']} "
                              f"weights, a {dim}-dim SVD)", total=FIT_STEPS, unit="steps",
                              quiet_when_short=True) as bar:
            feat.fit([example_text(ex, o["text_field"]) for ex in chosen], on_step=bar.advance)
        if o["dim"] and len(feat.components) < dim / 2:  # a --dim far past what the data holds (a typo's 0)
            console.warn(f"--dim {dim}: the text sample ({len(chosen):,} rows, {len(feat.vocabulary):,} terms) has "
                         f"{len(feat.components)} directions; the other {dim - len(feat.components):,} columns are "
                         "zero in every row")
        return feat.to_bytes()

    return TextFeaturizer.from_bytes(ctx.shared(key, fit))
