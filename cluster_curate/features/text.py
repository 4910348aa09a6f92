"""`--features text`: a model-free feature. Sublinear TF (or TF-IDF) of word unigrams + bigrams (numbers
replaced by one token), reduced to `dim` by truncated SVD.

Streaming: the vocabulary, IDF weights and SVD basis are fitted once on a seeded sample of the data
(`TextFeaturizer.fit`); any number of rows are then transformed batch by batch (`transform`), so memory
is bounded by the sample and the batch, and a row's vector never depends on which batch it is in.
The fitted state is plain arrays (`state()` / `from_state()`), saved beside the artifact without pickle
so that other processes and later runs use exactly the same basis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

TEXT_FIELDS = ("prompt", "response", "both")
# tf (the default, by measurement: benchmarks/results/quality.md and source_mix.md): every word by its
# (sublinear) count alone, so the words that say what the task is ("reverse", "how many", "write a function")
# are not outweighed by the topic's rare nouns; tfidf: rare words (names, topics) weigh most.
TEXT_WEIGHTINGS = ("tf", "tfidf")

# Numbers (integers, decimals, thousands separators, a leading sign or currency) become one token, so
# "2 apples + 3 apples" and "7 apples + 9 apples" look the same: the feature is about the kind of task.
_NUMBER = re.compile(r"[-+$]?\d+(?:[.,:/]\d+)*%?")
NUMBER_TOKEN = " numtok "


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
    """(words in prompt + response, words in response): the token counts a text-only run reports."""
    prompt = sum(len(str(turn.get("content") or "").split()) for turn in example.prompt)
    response = len(example.response.split())
    return prompt + response, response


@dataclass
class TextFeaturizer:
    """Sublinear TF (`weighting` tfidf: times IDF), l2, of masked word 1-2-grams -> truncated SVD to `dim`
    -> float32.

    max_features bounds the vocabulary (and so the SVD basis: dim x max_features floats)."""

    dim: int = 256
    field: str = "prompt"
    weighting: str = "tf"
    seed: int = 0
    max_features: int = 32768
    min_df: int = 1
    vocabulary: np.ndarray | None = None  # str terms, column order
    idf: np.ndarray | None = None  # float64 [V]
    components: np.ndarray | None = None  # float32 [dim, V]

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
        from sklearn.decomposition import TruncatedSVD

        vec = self._vectorizer_cls()(preprocessor=_preprocess, ngram_range=(1, 2), max_features=self.max_features,
                                     min_df=self.min_df, sublinear_tf=True, use_idf=self.weighting == "tfidf",
                                     dtype=np.float64,
                                     token_pattern=r"(?u)\b\w+\b")
        try:
            x = vec.fit_transform(texts)
        except ValueError:  # empty vocabulary: nothing but stop-characters in the sample
            x = None
        if x is None or x.shape[1] == 0:
            self.vocabulary, self.idf = np.array(["numtok"]), np.ones(1)
            self.components = np.zeros((self.dim, 1), dtype=np.float32)
            return self
        terms = vec.get_feature_names_out()
        self.vocabulary = np.asarray(terms, dtype=str)
        self.idf = vec.idf_.astype(np.float64) if self.weighting == "tfidf" else np.ones(len(terms))
        k = min(self.dim, x.shape[0] - 1, x.shape[1] - 1)
        comps = np.zeros((self.dim, x.shape[1]), dtype=np.float32)
        if k >= 1:
            svd = TruncatedSVD(n_components=k, algorithm="randomized", n_iter=7, random_state=self.seed)
            svd.fit(x)
            c = svd.components_
            # Sign convention (largest-|.| coordinate positive) so the basis does not flip between fits.
            signs = np.sign(c[np.arange(k), np.abs(c).argmax(axis=1)])
            signs[signs == 0] = 1
            comps[:k] = (c * signs[:, None]).astype(np.float32)
        self.components = comps
        return self

    @staticmethod
    def _vectorizer_cls():
        from sklearn.feature_extraction.text import TfidfVectorizer
        return TfidfVectorizer

    @property
    def fitted(self) -> bool:
        return self.components is not None

    # --------------------------------------------------------------------------------- transform
    def transform(self, texts: list[str]) -> np.ndarray:
        """float32 [len(texts), dim]; each row depends only on its own text and the fitted state."""
        if not self.fitted:
            raise RuntimeError("TextFeaturizer.transform called before fit")
        x = self._tfidf(texts)
        return np.asarray(x @ self.components.T.astype(np.float64), dtype=np.float32)

    def _tfidf(self, texts: list[str]):
        from sklearn.feature_extraction.text import CountVectorizer
        from sklearn.preprocessing import normalize

        counts = CountVectorizer(preprocessor=_preprocess, ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b",
                                 vocabulary={t: i for i, t in enumerate(self.vocabulary.tolist())},
                                 dtype=np.float64).transform(texts)
        counts.data = 1.0 + np.log(counts.data)  # sublinear tf, as in the fit
        counts = counts.multiply(self.idf[None, :]).tocsr()
        return normalize(counts, norm="l2", copy=False)

    # ------------------------------------------------------------------------------ persistence
    def state(self) -> dict[str, np.ndarray]:
        return {"vocabulary": self.vocabulary, "idf": self.idf, "components": self.components,
                "config": np.array([self.dim, self.seed, self.max_features, self.min_df], dtype=np.int64),
                "field": np.array([self.field]), "weighting": np.array([self.weighting])}

    def save(self, path) -> None:
        """Write the fitted state as an .npz of plain arrays (loaded with allow_pickle=False)."""
        import io
        from cluster_curate.io.artifacts import atomic_write_bytes
        buf = io.BytesIO()
        np.savez(buf, **self.state())
        atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path) -> "TextFeaturizer":
        with np.load(path, allow_pickle=False) as z:
            dim, seed, max_features, min_df = (int(v) for v in z["config"])
            return cls(dim=dim, field=str(z["field"][0]), weighting=str(z["weighting"][0]), seed=seed,
                       max_features=max_features, min_df=min_df,
                       vocabulary=z["vocabulary"], idf=z["idf"], components=z["components"])


def _preprocess(text: str) -> str:
    return mask_numbers(text.lower())
