"""`embed` orchestration: feature parsing, token-budget batching, text features, combinations, the proxy,
job-array pieces, reported rows and bad input. Fast tests (tiny models built here, the proxy with few steps);
the multi-process and kill/resume tests are in test_embed_slow.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.features import embed as E
from cluster_curate.features.text import DEFAULT_TEXT_WEIGHTING, TextFeaturizer, mask_numbers
from cluster_curate.io.artifacts import read_artifact
from cluster_curate.io.datasets import Example

from conftest import FIXTURES
from tiny_lm import build_llama

torch.set_num_threads(1)

MATH = ["Tom has {a} apples and buys {b} more. How many apples does he have?",
        "A train travels {a} km in {b} hours. What is its average speed?",
        "Sara saves {a} dollars a week for {b} weeks. How much has she saved?"]
CODE = ["Write a Python function that reverses a list of {a} items.",
        "Write a SQL query that selects the {a} most recent orders.",
        "Write a JavaScript function that debounces a callback by {b} ms."]


def _rows(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        pool = MATH if i % 2 == 0 else CODE
        q = pool[int(rng.integers(len(pool)))].format(a=int(rng.integers(2, 99)), b=int(rng.integers(2, 99)))
        rows.append({"instruction": q, "input": "", "output": f"The answer is {int(rng.integers(1, 999))}. Done."})
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _examples(rows: list[dict]) -> list[Example]:
    return [Example(i, [{"role": "user", "content": r["instruction"]}], r["output"]) for i, r in enumerate(rows)]


def _run(cli_runner, args, code=0):
    res = cli_runner.invoke(main, args, catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def _summary(res) -> dict:
    return json.loads(res.stdout.strip().splitlines()[-1])


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables (NaN losses count as equal)."""
    if a.column_names != b.column_names or a.num_rows != b.num_rows:
        return False
    return all(a.column(c).equals(b.column(c)) for c in a.column_names if c != "loss") and np.array_equal(
        a.column("loss").to_numpy(), b.column("loss").to_numpy(), equal_nan=True)


def _emb(table: pa.Table) -> np.ndarray:
    col = table.column("embedding").combine_chunks()
    return col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("llama") / "tiny")


# ------------------------------------------------------------------------------------------- parsing

def test_parse_features_and_weights():
    assert E.parse_features(None) == [E.DEFAULT_FEATURES]
    assert E.parse_features("text, gradient") == ["text", "gradient"]
    with pytest.raises(CurateError, match="unknown feature 'gradiant'"):
        E.parse_features("gradiant")
    with pytest.raises(CurateError, match="listed twice"):
        E.parse_features("text,text")
    assert E.parse_weights(None, 2) == [1.0, 1.0]
    assert E.parse_weights("2,0.5", 2) == [2.0, 0.5]
    with pytest.raises(CurateError, match="1 weight"):
        E.parse_weights("1", 2)
    with pytest.raises(CurateError, match=">= 0"):
        E.parse_weights("-1,1", 2)


def test_plan_batches_respects_budget_and_covers_every_row():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=500)
    batches = E.plan_batches(lengths, 1024)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(500))
    for b in batches:
        assert len(b) == 1 or max(lengths[b]) * len(b) <= 1024
    # length-sorted buckets: consecutive batches do not interleave lengths
    maxima = [max(lengths[b]) for b in batches]
    minima = [min(lengths[b]) for b in batches]
    assert all(maxima[i] <= minima[i + 1] for i in range(len(batches) - 1))
    assert E.plan_batches([5000, 3], 100) == [[1], [0]]  # too long for the budget: a batch of its own
    with pytest.raises(CurateError):
        E.plan_batches([1], 0)


def test_combine_blocks_normalises_and_weights():
    a = np.array([[3.0, 4.0], [0.0, 0.0]])
    b = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    single = E.combine_blocks([a])
    assert np.array_equal(single, a.astype(np.float32))  # one block: as computed
    out = E.combine_blocks([a, b], [2.0, 1.0])
    assert out.shape == (2, 5) and out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out[0, :2]), 2.0) and np.allclose(np.linalg.norm(out[0, 2:]), 1.0)
    assert np.all(out[1, :2] == 0)  # a zero row stays zero


def test_bottom_k_sample_is_seeded_and_streaming_invariant():
    ids = np.arange(1000)
    keys = E.sample_keys(ids, seed=3)
    assert len(set(keys.tolist())) == 1000
    one = E.BottomK(50)
    for i, k in zip(ids, keys):
        one.add(int(k), int(i), int(i))
    two = E.BottomK(50)  # other arrival order, same sample
    for i in ids[::-1]:
        two.add(int(keys[i]), int(i), int(i))
    assert one.smallest(50) == two.smallest(50) == sorted(one.smallest(50))
    other = E.BottomK(50)
    for i, k in zip(ids, E.sample_keys(ids, seed=4)):
        other.add(int(k), int(i), int(i))
    assert other.smallest(50) != one.smallest(50)


# ------------------------------------------------------------------------------------------- text

def test_text_features_deterministic_batch_invariant_and_sensible():
    rows = _rows(200)
    texts = [r["instruction"] for r in rows]
    f1 = TextFeaturizer(dim=16, seed=0).fit(texts)
    f2 = TextFeaturizer(dim=16, seed=0).fit(texts)
    a = f1.transform(texts)
    assert a.shape == (200, 16) and a.dtype == np.float32
    assert np.array_equal(a, f2.transform(texts))
    pieces = np.concatenate([f1.transform(texts[i:i + 7]) for i in range(0, 200, 7)])
    assert np.allclose(a, pieces, atol=1e-6)
    # numbers are masked: the same task with other numbers is the same vector
    assert mask_numbers("3 apples, $1,200.50 and 45%") == " numtok  apples,  numtok  and  numtok "
    same = f1.transform(["Tom has 3 apples and buys 4 more. How many apples does he have?",
                         "Tom has 71 apples and buys 12 more. How many apples does he have?"])
    assert np.allclose(same[0], same[1])
    # sensible: rows from the same template are closer than rows from another family
    n = a / np.linalg.norm(a, axis=1, keepdims=True)
    math_rows = [i for i in range(200) if i % 2 == 0]
    code_rows = [i for i in range(200) if i % 2 == 1]
    within = (n[math_rows] @ n[math_rows].T).mean()
    across = (n[math_rows] @ n[code_rows].T).mean()
    assert within > across + 0.3


def test_text_featurizer_keeps_only_the_directions_the_sample_has():
    # 3 distinct texts, repeated: the basis has 3 directions and the other columns stay zero, also for a text
    # the sample did not have (no direction of noise that would tell apart what the sample cannot)
    texts = ["reverse the list", "sort the numbers", "count the words"] * 20
    f = TextFeaturizer(dim=8).fit(texts)
    out = f.transform(texts[:3] + ["reverse the words"])
    assert out.shape == (4, 8) and not out[:, 3:].any() and out.any(axis=1).all()
    # and the 3 directions span those texts' tf rows: inner products kept (5 terms each, "the" shared)
    assert np.allclose(out[:3] @ out[:3].T, np.full((3, 3), 0.2) + 0.8 * np.eye(3), atol=1e-6)


def _sklearn_text_features(texts, dim, weighting, max_features, min_df=1, seed=0):
    """The text feature as scikit-learn computes it (what TextFeaturizer did through it until it was
    replaced by its own few steps, to drop 1.3 s of import from every `embed`)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.preprocessing import normalize

    opts = dict(preprocessor=lambda text: mask_numbers(text.lower()), ngram_range=(1, 2),
                token_pattern=r"(?u)\b\w+\b", dtype=np.float64)
    vec = TfidfVectorizer(max_features=max_features, min_df=min_df, sublinear_tf=True,
                          use_idf=weighting == "tfidf", **opts)
    x = vec.fit_transform(texts)
    terms = np.asarray(vec.get_feature_names_out(), dtype=str)
    idf = vec.idf_ if weighting == "tfidf" else np.ones(len(terms))
    k = min(dim, x.shape[0] - 1, x.shape[1] - 1)
    c = TruncatedSVD(n_components=k, algorithm="randomized", n_iter=7, random_state=seed).fit(x).components_
    c = (c * np.sign(c[np.arange(k), np.abs(c).argmax(axis=1)])[:, None]).astype(np.float32)
    counts = CountVectorizer(vocabulary={t: i for i, t in enumerate(terms)}, **opts).transform(texts)
    counts.data = 1.0 + np.log(counts.data)
    rows = normalize(counts.multiply(idf[None, :]).tocsr(), norm="l2")
    return terms, idf, c, np.asarray(rows @ c.T.astype(np.float64), dtype=np.float32)


@pytest.mark.parametrize("source,field", [("gsm8k/train-300.jsonl", "question"),
                                          ("code_alpaca/code_alpaca-300.json", "instruction")])
@pytest.mark.parametrize("weighting,max_features,min_df", [("tf", 32768, 1), ("tfidf", 32768, 1), ("tf", 150, 1),
                                                           ("tfidf", 150, 2)])
def test_text_features_equal_scikit_learns(source, field, weighting, max_features, min_df):
    # real data; max_features 150 makes the cut among equally frequent terms, min_df 2 prunes rare ones
    path = FIXTURES / source
    recs = json.loads(path.read_text()) if path.suffix == ".json" else \
        [json.loads(line) for line in path.read_text().splitlines()]
    texts = [r[field] + ("\n" + r["input"] if r.get("input") else "") for r in recs]
    terms, idf, comps, rows = _sklearn_text_features(texts, 64, weighting, max_features, min_df)
    f = TextFeaturizer(dim=64, weighting=weighting, max_features=max_features, min_df=min_df).fit(texts)
    assert np.array_equal(f.vocabulary, terms) and np.array_equal(f.idf, idf)
    # the same random draws and subspace as scikit-learn (1.9.1: basis within 2e-9, all but 0.05% of the output
    # floats bit-identical); a tolerance, so that a later scikit-learn that reorders its float operations and
    # our factorisations on the short side (features/text.py) do not fail this test
    assert np.allclose(f.components, comps, atol=1e-5)
    assert np.allclose(f.transform(texts), rows, atol=1e-5)
    assert np.allclose(f.transform(texts[:1] + ["", "zqxjv vvkwp"]),
                       np.concatenate([rows[:1], np.zeros((2, 64), np.float32)]))


def test_text_featurizer_without_words():
    for texts in (["", "  ", "!!"], ["?"] * 5):
        f = TextFeaturizer(dim=8).fit(texts)
        assert np.array_equal(f.transform(texts + ["some words"]), np.zeros((len(texts) + 1, 8), np.float32))
    f = TextFeaturizer(dim=8, min_df=3).fit(["one two", "three four"])  # every term pruned
    assert f.transform(["one two"]).shape == (1, 8) and not f.transform(["one two"]).any()


def test_text_featurizer_round_trip_and_small_sample():
    texts = [r["instruction"] for r in _rows(30)]
    f = TextFeaturizer(dim=64, field="prompt", seed=1).fit(texts)  # fewer rows than dim: zero columns
    out = f.transform(texts)
    assert out.shape == (30, 64) and np.all(out[:, 40:] == 0)
    g = TextFeaturizer.from_bytes(f.to_bytes())
    assert np.array_equal(g.transform(texts), out) and g.dim == 64 and g.seed == 1


def test_text_featurizer_fitted_again_transforms_by_its_new_fit():
    # transform keeps the term index and the float64 projection of a fit between calls: a second fit of the
    # same featurizer must replace them, not transform by the first fit's
    rows = _rows(60)
    first = [r["instruction"] for r in rows[:30]]
    second = [r["output"] + " " + r["instruction"] for r in rows[30:]]
    f = TextFeaturizer(dim=8, seed=0).fit(first)
    by_first = f.transform(second)
    f.fit(second)
    fresh = TextFeaturizer(dim=8, seed=0).fit(second)
    assert np.array_equal(f.transform(second), fresh.transform(second))
    assert not np.array_equal(f.transform(second), by_first)


@pytest.mark.parametrize("weighting", ["tf", "slot"])
def test_text_counts_over_a_fixed_vocabulary_equal_the_growing_counts(weighting):
    # transform counts a chunk over the fitted words' ids, fit over the chunk's own: the same entries, counts and
    # slot weights, unknown terms left out (here: the columns the growing count adds for them), empty and
    # wordless rows too
    from cluster_curate.features.text import _fit_counts, _term_counts, _Words
    rows = _rows(80)
    f = TextFeaturizer(dim=8, weighting=weighting).fit([r["instruction"] for r in rows[:40]])
    texts = [r["instruction"] + " " + r["output"] for r in rows[40:]] + ["", "!!", "zqxjv numtok 7 sort"]
    x, w = _term_counts(texts, f._term_index())
    slots = (f.contexts.tolist(), f.context_weights.tolist()) if weighting == "slot" else ()
    gx, gw, grown = _fit_counts(_Words.of(texts), 10 ** 9, 1, *slots)
    assert len(grown) > len(f.vocabulary)  # some terms were unknown
    column = {t: i for i, t in enumerate(grown)}
    known = [column[t] for t in f.vocabulary.tolist()]  # every fitted term is in these texts too
    for got, want in ((x, gx), (w, gw)):
        if want is None:
            assert got is None
            continue
        want = want[:, known]
        want.sort_indices()
        assert got.shape == want.shape and got.has_sorted_indices
        for part in ("data", "indices", "indptr"):
            assert np.array_equal(getattr(got, part), getattr(want, part))
    assert x.nnz > 0 and not x[len(texts) - 3:len(texts) - 1].nnz  # "" and "!!" have no term


def test_text_weighting_tf_lets_the_task_words_outweigh_rare_topic_words(tmp_path):
    # two tasks worded by frequent words; every row also names two rare nouns (its topic)
    rng = np.random.default_rng(0)
    nouns = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 6)) for _ in range(20)]
    tasks = ["put the word in capitals for", "put the word backwards for"]
    task, a, b = rng.integers(0, 2, 400), rng.choice(nouns, 400), rng.choice(nouns, 400)
    texts = [f"{tasks[t]} the {x} team: {y}" for t, x, y in zip(task, a, b)]
    same_task = (task[:, None] == task[None]) & (a[:, None] != a[None]) & (b[:, None] != b[None])
    same_noun = (task[:, None] != task[None]) & (a[:, None] == a[None])
    found = {}
    for weighting in ("tfidf", "tf"):
        f = TextFeaturizer(dim=32, weighting=weighting, seed=0).fit(texts)
        assert np.all(f.idf == 1.0) == (weighting == "tf")
        x = f.transform(texts)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        sim = x @ x.T
        np.fill_diagonal(sim, -2)
        found[weighting] = (sim[same_task].mean() - sim[same_noun].mean(),
                            (task[sim.argmax(axis=1)] == task).mean())  # nearest neighbour does the same task
        g = TextFeaturizer.from_bytes(f.to_bytes())
        assert g.weighting == weighting and np.array_equal(g.transform(texts[:5]), f.transform(texts[:5]))
    # tfidf: a row is closer to another task on the same noun than to its own task; tf: the other way round
    assert found["tfidf"][0] < -0.2 and found["tf"][0] > 0
    assert found["tfidf"][1] < 0.9 and found["tf"][1] == 1.0
    with pytest.raises(ValueError, match="text weighting must be one of"):
        TextFeaturizer(weighting="bm25")


def test_slot_weighting_weighs_the_request_above_its_slot_fillers():
    """A frequent request and its rare twin share every template and differ by one word ("ten" / "two");
    every row names one of 24 topic nouns. tf weighs the twin word as it weighs a noun; slot weighs the
    noun (24 words fill its place) far below the twin word (2 words fill its place)."""
    rng = np.random.default_rng(1)
    nouns = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 6)) for _ in range(24)]
    frames = ["help the {n} crew: it reduced by {w}", "a {n} question: take {w} away", "{w} less, says the {n} clerk"]
    twin, frame, noun = rng.random(600) < 0.1, rng.integers(0, 3, 600), rng.choice(nouns, 600)
    texts = [frames[f].format(n=n, w="two" if t else "ten") for t, f, n in zip(twin, frame, noun)]
    same_frame = frame[:, None] == frame[None]
    twin_pair = same_frame & (twin[:, None] != twin[None]) & (noun[:, None] == noun[None])
    noun_pair = same_frame & (twin[:, None] == twin[None]) & (noun[:, None] != noun[None])
    gap = {}
    for weighting in ("tf", "slot"):
        f = TextFeaturizer(dim=64, weighting=weighting, seed=0).fit(texts)
        x = f.transform(texts)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        sim = x @ x.T
        gap[weighting] = sim[noun_pair].mean() - sim[twin_pair].mean()  # > 0: the twin word tells rows apart more
        g = TextFeaturizer.from_bytes(f.to_bytes())
        assert g.weighting == weighting and np.array_equal(g.transform(texts[:7]), f.transform(texts[:7]))
    assert abs(gap["tf"]) < 0.05 and gap["slot"] > 0.2
    # what the slot state holds: the noun's place (24 fillers) weighs (24 / floor) ** -alpha; the twin word's
    # (about 1.4 fillers: below the floor) is not stored, it weighs 1
    from cluster_curate.features.text import SLOT_ALPHA, SLOT_FLOOR
    f = TextFeaturizer(dim=64, weighting="slot", seed=0).fit(texts)
    table = dict(zip(f.contexts.tolist(), f.context_weights.tolist()))
    assert abs(table["<help the"] - (24 / SLOT_FLOOR) ** -SLOT_ALPHA) < 0.03 and "<reduced by" not in table


def test_slot_weighting_keeps_the_numbers_a_request_is_worded_with():
    """"take 10 from: 17" and "take 2 from: 17" are two requests: tf masks both numbers (the same row); slot keeps
    a number where few numbers ever stand (10 or 2 after "take") and masks the operand (any of 30)."""
    rng = np.random.default_rng(3)
    nouns = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 6)) for _ in range(12)]
    twin, noun, operand = rng.random(500) < 0.1, rng.choice(nouns, 500), rng.integers(1, 31, 500)
    texts = [f"a {n} question: take {2 if t else 10} from: {o}" for t, n, o in zip(twin, noun, operand)]
    for weighting, apart in (("tf", False), ("slot", True)):
        f = TextFeaturizer(dim=32, weighting=weighting, seed=0).fit(texts)
        x = f.transform(["a fork question: take 10 from: 17", "a fork question: take 2 from: 17",
                         "a fork question: take 10 from: 3"])
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        assert (x[0] @ x[1] < 0.9) == apart
        assert x[0] @ x[2] > 0.999  # the operand is masked either way


def test_slot_weighting_on_varied_text_is_tf():
    """Where no context repeats often enough to say how many words fill it, every word weighs 1: the tf feature,
    value for value."""
    rng = np.random.default_rng(2)
    words = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(400)]
    texts = [" ".join(rng.choice(words, 8)) for _ in range(120)]
    tf = TextFeaturizer(dim=32, weighting="tf", seed=0).fit(texts)
    slot = TextFeaturizer(dim=32, weighting="slot", seed=0).fit(texts)
    assert set(slot.contexts.tolist()) == {"<<s> <s>", "></s> </s>"}  # only the edges repeat; the other side decides
    assert np.array_equal(tf.transform(texts), slot.transform(texts))


def _masked_words(text: str) -> tuple[list[str], list[str] | None]:
    """The words of a text as the feature sees them, as they were found before they were taken as ids: the
    numbers of the lower-cased text replaced by " numtok " (the numbers kept in order), then `\\b\\w+\\b`; no
    numbers when the text itself holds the word "numtok" (the two cannot be paired)."""
    import re

    from cluster_curate.features.text import _NUMBER

    found = []
    words = re.findall(r"(?u)\b\w+\b", _NUMBER.sub(lambda m: found.append(m.group(0)) or " numtok ", text.lower()))
    return words, (found if words.count("numtok") == len(found) else None)


def _slot_reference(texts: list[str], min_context: int = 5, floor: float = 4.0):
    """The slot weighting word by word (how it was written before it was counted by ids): each word's two
    context keys, a Counter of fillers per key, values summed in the order they were first seen."""
    from collections import Counter, defaultdict

    _NUM = "numtok"

    def contexts(words):
        w = ["<s>", "<s>", *words, "</s>", "</s>"]
        return [(f"<{w[i - 2]} {w[i - 1]}", f">{w[i + 1]} {w[i + 2]}") for i in range(2, len(w) - 2)]

    def effective(values):
        q = np.fromiter(values, dtype=np.float64)
        q = q / q.sum()
        return float(np.exp(-(q * np.log(q)).sum()))

    fillers, numbers = defaultdict(Counter), defaultdict(Counter)
    for text in texts:
        words, found = _masked_words(text)
        k = 0
        for word, around in zip(words, contexts(words)):
            for key in around:
                fillers[key][word] += 1
            if word == _NUM and found is not None:
                for key in around:
                    numbers[key][found[k]] += 1
                k += 1
    table = {key: (effective(c.values()) / floor) ** -1.0 for key, c in sorted(fillers.items())
             if c.total() >= min_context and len(c) > 1 and effective(c.values()) > floor}
    table |= {"#" + key: 1.0 for key, c in sorted(numbers.items())
              if c.total() >= min_context and effective(c.values()) <= floor}

    def weighted(text):
        words, found = _masked_words(text)
        around = contexts(words)
        w = [max(table.get(a, 1.0), table.get(b, 1.0)) for a, b in around]
        if found is not None:
            literal, shown = iter(found), []
            for word, (a, b) in zip(words, around):
                if word == _NUM:
                    value = next(literal)
                    if "#" + a in table or "#" + b in table:
                        word = value
                shown.append(word)
            words = shown
        return words + [f"{a} {b}" for a, b in zip(words, words[1:])], w + [min(u, v) for u, v in zip(w, w[1:])]

    return table, weighted


def _terms_by_ids(texts: list[str], keys, weights) -> list[tuple[list[str], list[float]]]:
    """Each text's terms (words, then bigrams) and their occurrence weights as the feature takes them, by ids."""
    from cluster_curate.features.text import SlotCodes, _occurrences, _Words
    words = _Words.of(texts)
    index = {t: i for i, t in enumerate(words.tokens)}
    codes, rows, weight = _occurrences(words, SlotCodes.of(keys, weights, index, words.base))
    return [(list(map(words.term, codes[rows == i].tolist())), weight[rows == i].tolist()) for i in range(len(texts))]


def test_slot_state_and_terms_equal_the_word_by_word_counts(fixtures_dir):
    """slot_contexts and the terms count words by integer ids with numpy: the same keys, the same weights bit for
    bit (a context's fillers summed in the order first seen), the same terms and occurrence weights as counting
    word by word, on real GSM8K and Code Alpaca prompts (numbers kept and masked, a text holding the word
    "numtok", an empty text)."""
    from cluster_curate.features.text import slot_contexts
    gsm8k = [json.loads(line)["question"] for line in (fixtures_dir / "gsm8k" / "train-300.jsonl").open()]
    code = [r["instruction"] + " " + r["input"]
            for r in json.loads((fixtures_dir / "code_alpaca" / "code_alpaca-300.json").read_text())]
    texts = gsm8k + code + ["the numtok of 3 and 4", "", "take 10 from 17"] + [f"take {n} from 5" for n in (2, 10) * 4]
    keys, weights = slot_contexts(texts)
    table, weighted = _slot_reference(texts)
    assert keys.tolist() == list(table) and weights.tolist() == list(table.values())
    assert any(k.startswith("#") for k in table) and any(w < 1 for w in table.values())
    assert _terms_by_ids(texts, keys.tolist(), weights.tolist()) == list(map(weighted, texts))


def test_effective_numbers_of_many_contexts_are_each_one_summed_alone():
    """The slot state's effective numbers, taken for every context at once, equal bit for bit those of each
    context's counts summed alone (numpy's pairwise sum: add.reduceat sums in another order, which differed in
    the last bits at 9 and 200 fillers), at every length from one filler to thousands."""
    from cluster_curate.features.text import _effective_numbers

    def alone(c):
        q = np.asarray(c, dtype=np.float64)
        q = q / q.sum()
        return float(np.exp(-(q * np.log(q)).sum()))

    rng = np.random.default_rng(0)
    lengths = np.r_[np.arange(1, 300), 511, 512, 513, 4099, rng.integers(1, 40, 2000)]
    rng.shuffle(lengths)
    counts = rng.integers(1, 5000, lengths.sum())
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    got = _effective_numbers(counts, starts)
    assert got.tolist() == [alone(counts[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist())]


_PIECES = ["the", "take", "from", "ten", "Σ", "ΣΑΣ", "straße", "İstanbul", "½", "x²", "numtok", "NUMTOK", "a_b",
           "3", "10", "-2.5", "$1,000", "50%", "1/2", "٣٤", "x٣y", "abc123def", "7numtok", "+-3", "4.", ".5", "$"]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=12)
                .flatmap(lambda parts: st.sampled_from([" ", "", "\n", ", "]).map(lambda sep: sep.join(parts))),
                max_size=40),
       st.integers(1, 4), st.sampled_from([1.0, 1.5, 4.0]))
def test_slot_state_and_terms_by_ids_equal_the_word_by_word_on_any_text(texts, min_context, floor):
    # numbers of every form, digits of other scripts, letters that lower-case to two or by their context, "numtok"
    # written in the text, glued to a number or a word, empty texts; thresholds low, so that contexts are kept
    from cluster_curate.features.text import slot_contexts
    keys, weights = slot_contexts(texts, min_context=min_context, floor=floor)
    table, weighted = _slot_reference(texts, min_context, floor)
    assert keys.tolist() == list(table) and weights.tolist() == list(table.values())
    assert _terms_by_ids(texts, keys.tolist(), weights.tolist()) == list(map(weighted, texts))


def test_cli_text_features(tmp_path, cli_runner):
    rows = _rows(60)
    rows[7] = {"instruction": "no output here"}  # a bad row: reported with --on-bad-row skip
    data = _write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "e.parquet"
    res = _run(cli_runner, ["embed", str(data), "--out", str(out), "--features", "text", "--dim", "8",
                            "--on-bad-row", "skip", "--json"])
    s = _summary(res)
    assert s["rows"] == 59 and s["bad_rows"] == 1 and s["model"] == "none" and s["dim"] == 8
    table, meta = read_artifact(out, kind="embeddings")
    assert table.column_names == ["id", "embedding", "n_tokens", "n_response_tokens", "loss", "answer_key",
                                  "response_words", "prompt_key", "prompt_turn_keys"]
    assert table.column("prompt_turn_keys").null_count == 59  # one user turn each: its prompt key is that turn's
    assert table.column("id").to_pylist() == [i for i in range(60) if i != 7]
    assert np.isnan(table.column("loss").to_numpy()).all()  # no model, no loss
    assert meta.params["features"] == ["text"] and meta.params["dims"] == {"text": 8}
    assert meta.dataset["rows"] == 60
    # the float columns are written plain (a dictionary of values that seldom repeat made the write 9x slower),
    # the integer ones dictionary-encoded as before
    import pyarrow.parquet as pq
    group = pq.ParquetFile(out).metadata.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)}
    assert "RLE_DICTIONARY" not in encodings["embedding.list.element"] + encodings["loss"]
    assert "RLE_DICTIONARY" in encodings["id"] and "RLE_DICTIONARY" in encodings["prompt_turn_keys.list.element"]
    rejects = [json.loads(x) for x in Path(s["rejects"]).read_text().splitlines()]
    assert [r["id"] for r in rejects] == [7] and rejects[0]["kind"] == "bad row"
    # same command again, fresh output: identical artifact (seeded)
    out2 = tmp_path / "e2.parquet"
    _run(cli_runner, ["embed", str(data), "--out", str(out2), "--features", "text", "--dim", "8",
                      "--on-bad-row", "skip", "-q"])
    t2, m2 = read_artifact(out2)
    assert _same(t2, table) and m2.fingerprint == meta.fingerprint
    # existing output needs --overwrite
    res = _run(cli_runner, ["embed", str(data), "--out", str(out), "--features", "text", "-q",
                            "--on-bad-row", "skip"], code=2)
    assert "--overwrite" in res.output
    # --text-weighting tfidf: recorded with the artifact, and other vectors than the default tf
    out3 = tmp_path / "e3.parquet"
    _run(cli_runner, ["embed", str(data), "--out", str(out3), "--features", "text", "--dim", "8",
                      "--text-weighting", "tfidf", "--on-bad-row", "skip", "-q"])
    t3, m3 = read_artifact(out3)
    assert m3.params["text_weighting"] == "tfidf" and meta.params["text_weighting"] == DEFAULT_TEXT_WEIGHTING == "slot"
    from cluster_curate.commands.embed import OPTIONS
    assert next(o for o in OPTIONS if o.name == "text_weighting").default == DEFAULT_TEXT_WEIGHTING
    assert not _same(t3, table)
    res = _run(cli_runner, ["embed", str(data), "--out", str(out3), "--text-weighting", "bm25"], code=2)
    assert "'bm25' is not one of 'tf', 'tfidf', 'slot'" in res.output


# ------------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("args, message", [
    (["--features", "gradiant"], "unknown feature 'gradiant'"),
    (["--dim", "0"], "--dim must be positive"),
    (["--dim", "-3", "--features", "text"], "--dim must be positive"),
    (["--features", "gradient", "--model", "./no/such/model"], "no such file or directory"),
    (["--features", "gradient", "--model", "/no/such/model.gguf"], "no such"),
    (["--model", "/no/such/model.gguf"], "is not used by --features text"),
    (["--batch-tokens", "0"], "--batch-tokens must be positive"),
    (["--features", "text,gradient", "--feature-weights", "1"], "1 weight(s) for 2"),
    (["--num-parts", "2", "--part-index", "2"], "--part-index must be in"),
    (["--proxy-sample", "0"], "--proxy-sample"),
    # options no feature reads, silently ignored before (as --dim and --device no feature reads are refused)
    (["--max-length", "16"], "--max-length 16 is not used by --features text (no model or encoder runs)"),
    (["--proxy-size", "tiny"], "--proxy-size tiny is only used by the proxy model trained here, and --features text "
                               "runs no model"),
    (["--features", "gradient", "--model", "/m.gguf", "--proxy-steps", "5"], "--proxy-steps 5 is only used by the "
                                                                             "proxy model trained here, and --model "
                                                                             "/m.gguf is used instead"),
])
def test_bad_options_give_clear_errors(tmp_path, cli_runner, args, message):
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(10))
    res = _run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), *args], code=2)
    assert "ERROR:" in res.output and message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "e.parquet").exists()


def test_an_out_written_as_a_folder_is_refused_for_one_process(tmp_path, cli_runner):
    """`--out e_dir/` in one process wrote a plain Parquet file named e_dir (only torchrun or --num-parts write a
    folder of parts): refused in one line, before the data is read; with --num-parts it is that folder."""
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(10))
    res = _run(cli_runner, ["embed", str(data), "--out", f"{tmp_path / 'e_dir'}/"], code=2)
    assert res.output.strip() == (f"ERROR: --out {tmp_path / 'e_dir'}/: a folder, but one process writes the "
                                  "embeddings as one .parquet file (a folder of parts under torchrun or with "
                                  f"--num-parts): give a file, e.g. --out {tmp_path / 'e_dir'}.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]
    _run(cli_runner, ["embed", str(data), "--out", f"{tmp_path / 'e_dir'}/", "--num-parts", "2", "--part-index",
                      "0", "-q"])
    assert (tmp_path / "e_dir").is_dir()


def test_rows_whose_text_features_are_all_zero_are_kept_and_warned_of(tmp_path, cli_runner):
    """A prompt of only "?", "..." or a zero-width space holds no word the text feature counts: its vector is all
    zero, which embed wrote without a word (only cluster warned, later). Warned at embed with their count and ids;
    kept (a row, not a bad one)."""
    rows = _rows(30)
    for i, prompt in ((4, "?"), (11, "..."), (25, "\u200b")):
        rows[i]["instruction"] = prompt
    data = _write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "e.parquet"
    res = _run(cli_runner, ["embed", str(data), "--out", str(out), "--dim", "8", "--commit-every", "10"])
    said = " ".join(res.output.split())
    assert ("WARNING: 3 row(s) have an all-zero embedding: their text holds no word the text feature counts (only "
            "punctuation, symbols or spaces, e.g. '?'); kept, but cluster finds them similar to no centroid (ids 4, "
            "11, 25)") in said
    table, _ = read_artifact(out)
    assert table.num_rows == 30 and (~_emb(table).any(axis=1)).sum() == 3


def test_missing_data_is_a_clear_error(tmp_path, cli_runner):
    res = _run(cli_runner, ["embed", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "e.parquet")], code=2)
    assert "nope.jsonl" in res.output


def test_every_row_bad_is_refused_with_the_first_reason_and_listed(tmp_path, cli_runner):
    """Every row bad and skipped: the refusal said "no row parsed" (both were parsed, both were bad), with no
    reason and no rejects file; now it says so, with the first row's reason, and lists them as a run that goes
    on does (OUT.rejects.jsonl)."""
    data = _write_jsonl(tmp_path / "allbad.jsonl", [{"instruction": "q", "output": ""},
                                                     {"instruction": "", "output": "a"}])
    out = tmp_path / "ab.parquet"
    res = _run(cli_runner, ["embed", str(data), "--out", str(out), "--on-bad-row", "skip"], code=2)
    (line,) = res.output.strip().splitlines()
    assert line == (f"ERROR: {data}: all 2 rows are bad rows, skipped (--on-bad-row skip): nothing to embed; the "
                    f"first: {data}:1: field 'output': empty response; listed in {tmp_path / 'ab.rejects.jsonl'}")
    rejects = [json.loads(x) for x in (tmp_path / "ab.rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["kind"]) for r in rejects] == [(0, "bad row"), (1, "bad row")]
    assert not out.exists()
    _write_jsonl(data, [{"instruction": "q", "output": ""}])
    res = _run(cli_runner, ["embed", str(data), "--out", str(out), "--on-bad-row", "skip"], code=2)
    assert f"its only row is a bad row, skipped (--on-bad-row skip): nothing to embed; the row: {data}:1" in res.output


def test_a_dim_far_past_the_datas_directions_is_warned_and_stores_no_zeros(tmp_path, cli_runner):
    """`--dim 100000` on 120 rows (a typo's extra 0) wrote a 2 GB basis of zeros beside the embeddings, without a
    word: the basis holds the directions the data has, the output is still --dim wide (zeros past them), and a
    --dim more than twice those directions is warned."""
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(30))
    res = _run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "--dim", "20000", "--json"])
    s = _summary(res)
    assert [w for w in s["warnings"] if w.startswith("--dim 20000: the text sample (30 rows")] and \
        s["warnings"][0].endswith("columns are zero in every row")
    assert (tmp_path / "e.text.npz").stat().st_size < 200_000  # 20000 x terms float32 zeros before: 9+ MB
    from cluster_curate.io.readers import embedding_matrix
    x = embedding_matrix(read_artifact(tmp_path / "e.parquet")[0].column("embedding"))
    assert x.shape == (30, 20000) and np.count_nonzero(np.abs(x).sum(0)) < 30


def test_skipped_bad_rows_are_warned_under_quiet_and_json(tmp_path, cli_runner):
    """Rows skipped as bad were told only in a summary line that --quiet and --json hide (select warns of a
    --target's): now one warning with the count and the rejects file; a mixture input that lost every row gets a
    warning of its own."""
    rows = _rows(30)
    rows[3] = rows[5] = {"instruction": "no output here"}
    data = _write_jsonl(tmp_path / "d.jsonl", rows)
    said = (f"{data}: 2 bad rows skipped (--on-bad-row skip), so not embedded; listed in "
            f"{tmp_path / 'e.rejects.jsonl'}")
    res = _run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "--dim", "8",
                            "--on-bad-row", "skip", "--quiet"])
    assert res.stderr.strip() == f"WARNING: {said}"
    res = _run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "--dim", "8",
                            "--on-bad-row", "skip", "--json", "--overwrite"])
    assert _summary(res)["warnings"] == [said]
    good = _write_jsonl(tmp_path / "good.jsonl", _rows(30))
    _write_jsonl(tmp_path / "allbad.jsonl", [{"instruction": "q", "output": ""}, {"instruction": "", "output": "a"}])
    mix = tmp_path / "mix.yaml"
    mix.write_text(f"inputs:\n  - path: {good}\n  - path: {tmp_path / 'allbad.jsonl'}\n    on_bad_row: skip\n")
    res = _run(cli_runner, ["embed", str(mix), "--out", str(tmp_path / "m.parquet"), "--dim", "8", "--json"])
    s = _summary(res)
    assert s["bad_rows"] == 2 and s["rows"] == 30
    assert s["warnings"] == [
        # named per input, by what skipped them: the mixture file's key, no flag was given
        f"mixture of good, allbad: 2 bad rows of input allbad skipped (its mixture file's on_bad_row: skip), so not "
        f"embedded; listed in "
        f"{tmp_path / 'm.rejects.jsonl'}",
        "source allbad: none of its 2 rows embedded (2 bad rows), so nothing of it can be selected"]


# ------------------------------------------------------------------------------------------- model features

def test_features_identical_whatever_the_batch_size(llama_dir):
    from cluster_curate.features.models import load_model
    from cluster_curate.features.projection import random_projection_torch

    fm = load_model(str(llama_dir), device="cpu")
    rows = _rows(24)
    texts = [r["instruction"] for r in rows]
    text = TextFeaturizer(dim=8).fit(texts)
    feats = ["text", "gradient", "hidden"]
    results = []
    for budget in (40, 300, 100000):
        emb = E.Embedder(features=feats, fm=fm, featurizers={"text": text}, weights=[1.0, 2.0, 0.5], max_length=128,
                         projectors={"gradient": random_projection_torch(fm.hidden_size, 16, 0)},
                         batch_tokens=budget, dims=E.block_dims(feats, hidden_size=fm.hidden_size, text_dim=8))
        emb.dims["gradient"] = 16
        results.append(emb.embed(_examples(rows)))
    base = results[0]
    assert base.embedding.shape == (24, 8 + 16 + fm.hidden_size)
    assert list(base.ids) == list(range(24))
    for r in results[1:]:
        assert np.array_equal(r.ids, base.ids) and np.array_equal(r.n_tokens, base.n_tokens)
        assert np.allclose(r.embedding, base.embedding, atol=1e-5)
        assert np.allclose(r.loss, base.loss, atol=1e-5)
    # block norms follow the weights
    assert np.allclose(np.linalg.norm(base.embedding[:, 8:24], axis=1), 2.0, atol=1e-5)
    # one example alone gives the same row as inside a batch
    single = E.Embedder(features=["gradient"], fm=fm, max_length=128, batch_tokens=100000,
                        dims={"gradient": fm.hidden_size}).embed(_examples(rows)[5:6])
    batch = E.Embedder(features=["gradient"], fm=fm, max_length=128, batch_tokens=100000,
                       dims={"gradient": fm.hidden_size}).embed(_examples(rows))
    assert np.allclose(single.embedding[0], batch.embedding[5], atol=1e-5)


def test_cli_model_pieces_equal_single_run_and_report_truncated_rows(tmp_path, cli_runner, llama_dir):
    rows = _rows(40)
    rows[3]["instruction"] = "word " * 300  # long prompt: truncated from the left, still embedded
    data = _write_jsonl(tmp_path / "d.jsonl", rows)
    common = ["--model", str(llama_dir), "--features", "gradient,hidden", "--max-length", "64",
              "--commit-every", "7", "--batch-tokens", "500", "--device", "cpu"]
    single = tmp_path / "single.parquet"
    s = _summary(_run(cli_runner, ["embed", str(data), "--out", str(single), *common, "--json"]))
    assert s["rows"] == 40 and s["chunks_computed"] == 6
    t_single, m_single = read_artifact(single)
    assert m_single.params["model"] == str(llama_dir)
    pieces = tmp_path / "pieces"
    for i in range(3):
        _run(cli_runner, ["embed", str(data), "--out", str(pieces), *common, "--num-shards", "3",
                          "--shard-index", str(i), "--batch-tokens", str(200 + 100 * i), "-q"])
    assert sorted(p.name for p in pieces.glob("*.parquet")) == [f"part-0000{i}-of-00003.parquet" for i in range(3)]
    assert not (tmp_path / "pieces.partial").exists()
    t_pieces, m_pieces = read_artifact(pieces, kind="embeddings")
    assert m_pieces.rows == 40 and m_pieces.fingerprint == m_single.fingerprint
    assert t_pieces.column("id").to_pylist() == t_single.column("id").to_pylist()
    assert np.allclose(_emb(t_pieces), _emb(t_single), atol=1e-5)
    for col in ("n_tokens", "n_response_tokens"):
        assert t_pieces.column(col).equals(t_single.column(col))
    # the long prompt was truncated from the left to --max-length, and still embedded; n_tokens counts every row
    # whole, as a trainer reads it (it was the cut length: token budgets and shard balance saw 64 for 1,500), and
    # the rows cut are said
    from transformers import AutoTokenizer

    from cluster_curate.features.models import encode_examples
    from cluster_curate.io.datasets import open_dataset
    examples = [e for b in open_dataset(str(data)).iter_batches() for e in b.examples]
    whole, _ = encode_examples(AutoTokenizer.from_pretrained(llama_dir), examples, None)
    n_tokens = dict(zip(t_single.column("id").to_pylist(), t_single.column("n_tokens").to_pylist()))
    assert n_tokens == {e.id: e.n_tokens for e in whole} and n_tokens[3] > 300
    cut = sum(e.n_tokens > 64 for e in whole)
    assert any(f"{cut} row(s) longer than --max-length 64 tokens: the model's features see them cut" in w
               for w in s["warnings"]), s["warnings"]


def test_chunks_carry_reported_rows_and_resume_skips_committed_chunks(tmp_path):
    from cluster_curate import distributed as D
    from cluster_curate.io.artifacts import make_meta

    lay = D.detect()
    plan = {"params": {"x": 1}, "dataset": "fp"}
    out = tmp_path / "e.parquet"
    o = D.ChunkedOutput(out, lay, plan, 10)
    res = E.ChunkResult(ids=np.array([12, 11]), embedding=np.ones((2, 3), np.float32), n_tokens=np.array([5, 6]),
                        n_response_tokens=np.array([2, 3]), loss=np.array([0.5, 0.25], np.float32))
    o.commit(1, E.chunk_table(res), [{"id": 13, "reason": "no response token"}], {"model_cut": 1, "truncated": 0})
    empty = E.ChunkResult(ids=np.zeros(0, np.int64), embedding=np.zeros((0, 3), np.float32),
                          n_tokens=np.zeros(0, np.int64), n_response_tokens=np.zeros(0, np.int64),
                          loss=np.zeros(0, np.float32))
    o.commit(0, E.chunk_table(empty), [], {"model_cut": 2})
    # a resumed run with the same plan keeps them, and their counts (the rows cut, said after a resume); another
    # plan is refused
    again = D.ChunkedOutput(out, lay, plan, 10, resume=True)
    assert not again.todo(0) and not again.todo(1) and again.todo(2)
    assert again.skipped_rows() == [{"id": 13, "reason": "no response token"}]
    assert again.counts() == {"model_cut": 3, "truncated": 0} and again.counts([0]) == {"model_cut": 2}
    with pytest.raises(CurateError, match="other parameters"):
        D.ChunkedOutput(out, lay, {"params": {"x": 2}, "dataset": "fp"}, 10, resume=True)
    meta = make_meta("embeddings", {"dim_total": 3}, {}, {"fingerprint": "fp"})
    result = again.finish(meta, 2, E.empty_chunk_table(3))
    table, m = read_artifact(out, kind="embeddings")
    assert result["rows"] == 2 and m.rows == 2 and table.column("id").to_pylist() == [11, 12]
    assert not again.staging.exists()


# ------------------------------------------------------------------------------------------- proxy

def test_proxy_trains_saves_and_reloads(tmp_path):
    from cluster_curate.features import proxy as P
    from cluster_curate.io import proxy_store as store
    from cluster_curate.features.extractors import extract
    from cluster_curate.features.models import collate, encode_examples

    examples = _examples(_rows(40))
    opts = P.ProxyOptions(size="tiny", vocab_size=300, steps=4, checkpoints=2, batch_tokens=512, max_length=128)
    trained = P.train_proxy(examples, opts)
    assert trained.log["steps"] == 4 and sorted(trained.checkpoints) == [2, 4]
    assert trained.log["loss_last"] < trained.log["loss_first"]
    tok = trained.tokenizer
    enc, _ = encode_examples(tok, examples[:3], 128)
    # chat template: the response ends with the end token, which is part of the response span
    assert enc[0].input_ids[-1] == tok.eos_token_id
    assert tok.decode(enc[0].input_ids[enc[0].response_start:-1]).strip() == examples[0].response
    d = store.save_proxy(trained, tmp_path / "e.proxy")
    assert store.is_proxy_dir(d) and store.proxy_checkpoint_steps(d) == [2, 4]
    fm = store.load_proxy(d, device="cpu")
    batch = collate(enc, fm.pad_id, fm.device)
    from cluster_curate.features.models import wrap_gpt
    live = wrap_gpt(trained.gpt, tok, device="cpu")
    a = extract(fm, batch, "gradient")["embedding"]
    b = extract(live, batch, "gradient")["embedding"]
    assert np.array_equal(a, b)  # the saved proxy is exactly the trained one
    first = extract(store.load_proxy(d, 2, device="cpu"), batch, "loss-trajectory")["loss"]
    last = extract(store.load_proxy(d, 4, device="cpu"), batch, "loss-trajectory")["loss"]
    assert not np.allclose(first, last)
    with pytest.raises(CurateError, match="no warm-up checkpoint at step 3"):
        store.load_proxy(d, 3)
    with pytest.raises(CurateError, match="not a saved cluster-curate proxy"):
        store.load_proxy(tmp_path)


def test_word_tokenizer_option():
    from cluster_curate.features import proxy as P
    tok = P.train_tokenizer([r["instruction"] for r in _rows(50)], vocab_size=200, kind="word")
    ids = tok("Tom has 12345 apples", add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids[:2] and len(ids) >= 7  # digits are split one by one


@pytest.mark.parametrize("extra, said", [
    (["--proxy-steps", "1"], "the warm-up (--proxy-steps 1) keeps one checkpoint (1)"),
    (["--proxy-steps", "3", "--checkpoints", "3"], "--checkpoints names one checkpoint (3)"),
    (["--proxy-steps", "4", "--proxy-checkpoints", "1"], "the warm-up (--proxy-steps 4) keeps one checkpoint (4)"),
    ([], "the warm-up (1 step on 50 rows) keeps one checkpoint (1)")], ids=lambda v: (" ".join(v) or "default") if isinstance(v, list) else None)
def test_a_loss_trajectory_of_one_checkpoint_is_refused_before_the_warm_up(tmp_path, cli_runner, extra, said):
    """A warm-up of one step (300 rows at the default budget) kept one checkpoint: a loss-trajectory of one
    dimension, the same for every row once normalised, and `cluster` put every row in one cluster, exit 0. The
    checkpoints kept are known before the proxy trains: refused then, not after its warm-up was paid for."""
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(50))
    res = _run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "--features",
                            "loss-trajectory", "--proxy-size", "tiny", "--proxy-vocab", "300", "--max-length", "128",
                            *extra], code=2)
    assert f"ERROR: --features loss-trajectory: {said}: one loss per row" in res.output
    assert "proxy: trained" not in res.output and sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]


def test_a_checkpoint_model_beside_the_proxy_is_refused_before_the_warm_up(tmp_path, cli_runner):
    """Every checkpoint of loss-trajectory is fed --model's token ids; the proxy's tokenizer is trained here, so a
    model given as a checkpoint beside it read the proxy's ids: an IndexError after the warm-up (a smaller
    vocabulary), or silently meaningless losses (a larger one). Refused before the proxy trains."""
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(50))
    lm = build_llama(tmp_path / "lm", layers=1, hidden=32)
    res = _run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "--features", "loss-trajectory",
                            "--proxy-size", "tiny", "--proxy-steps", "3", "--checkpoints", f"{lm},{lm}"], code=2)
    assert res.output.startswith(f"ERROR: --checkpoints {lm}: a model with a tokenizer of its own, but every "
                                 "checkpoint is fed --model's token ids")
    assert f"pass it as --model too (--model {lm})" in res.output and "proxy: trained" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "lm"]


def test_checkpoints_must_read_the_token_ids_of_the_model(tmp_path, cli_runner):
    """--model A --checkpoints A,B: B is fed A's token ids. A checkpoint with another tokenizer (an INTERNAL ERROR
    IndexError when its vocabulary was smaller) or an embedding smaller than A's vocabulary is refused before any
    forward pass, naming it; one made from A (same tokenizer, other weights) gives one loss column each."""
    from tiny_lm import build_tokenizer
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(20))
    a = build_llama(tmp_path / "a", layers=1, hidden=32)
    other_weights = build_llama(tmp_path / "a2", layers=1, hidden=32, seed=1)
    other_tokenizer = build_llama(tmp_path / "v", layers=1, hidden=32)
    build_tokenizer(vocab_size=280).save_pretrained(other_tokenizer)
    smaller = build_llama(tmp_path / "s", layers=1, hidden=32)
    from transformers import AutoModelForCausalLM
    shrunk = AutoModelForCausalLM.from_pretrained(smaller)
    shrunk.resize_token_embeddings(280)
    shrunk.save_pretrained(smaller)
    out = tmp_path / "e.parquet"
    embed = ["embed", str(data), "--out", str(out), "--features", "loss-trajectory", "--model", str(a)]
    res = _run(cli_runner, [*embed, "--checkpoints", f"{a},{other_tokenizer}"], code=2)
    assert res.output.strip() == (f"ERROR: --checkpoints {other_tokenizer}: its tokenizer has 280 tokens, not 300 "
                                  f"(--model {a}'s), and every checkpoint is fed --model's token ids: pass it as "
                                  f"--model too (--model {other_tokenizer}), or give checkpoints made from --model")
    res = _run(cli_runner, [*embed, "--checkpoints", f"{a},{smaller}"], code=2)
    assert f"ERROR: --checkpoints {smaller}: its embedding has 280 rows, fewer than the 300 token ids" in res.output
    assert not out.exists()
    s = _summary(_run(cli_runner, [*embed, "--checkpoints", f"{a},{other_weights}", "--json"]))
    assert s["rows"] == 20 and s["dims"] == {"loss-trajectory": 2}


def test_cli_proxy_end_to_end_and_reuse(tmp_path, cli_runner):
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(50))
    out = tmp_path / "e.parquet"
    proxy = ["--proxy-size", "tiny", "--proxy-steps", "3", "--proxy-vocab", "300", "--max-length", "128"]
    s = _summary(_run(cli_runner, ["embed", str(data), "--out", str(out), *proxy,
                                   "--features", "gradient,loss-trajectory", "--json"]))
    assert s["rows"] == 50 and s["model"] == "proxy" and s["dims"] == {"gradient": 64, "loss-trajectory": 3}
    # the phases add up to no more than the whole: the proxy's warm-up is part of the preparation
    assert 0 < s["warmup_seconds"] <= s["prepare_seconds"]
    assert 0 < s["scan_seconds"] + s["prepare_seconds"] + s["feature_seconds"] <= s["seconds"] + 0.01
    assert Path(s["proxy"]) == tmp_path / "e.proxy" and (tmp_path / "e.proxy" / "model.safetensors").exists()
    table, meta = read_artifact(out)
    assert np.isfinite(table.column("loss").to_numpy()).all()
    assert meta.params["proxy"]["steps"] == 3 and meta.params["proxy_key"]
    # reuse the saved proxy by path: the same features
    out2 = tmp_path / "again.parquet"
    _run(cli_runner, ["embed", str(data), "--out", str(out2), "--model", str(tmp_path / "e.proxy"),
                      "--features", "gradient,loss-trajectory", "--max-length", "128", "-q"])
    t2, m2 = read_artifact(out2)
    assert np.allclose(_emb(t2), _emb(table), atol=1e-6)
    assert m2.params["model"].startswith("proxy:")
    # --overwrite retrains only when the proxy options change; same options reuse the saved proxy
    s3 = _summary(_run(cli_runner, ["embed", str(data), "--out", str(out), *proxy, "--overwrite",
                                    "--features", "gradient,loss-trajectory", "--json"]))
    assert s3["warmup_seconds"] == 0.0
    t3, _ = read_artifact(out)
    assert _same(t3, table)


def test_sample_ids_names_the_rows_the_streamed_sample_takes(tmp_path):
    """A reader of the proxy's loss column tells its warm-up rows apart with sample_ids: the same rows the
    streamed sample takes, for any seed and size."""
    from cluster_curate.commands.embed_parts import PROXY_SALT, sample, sample_ids
    from cluster_curate.io.datasets import ReadOptions, open_dataset

    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"instruction": f"say {i}", "output": str(i)}) + "\n" for i in range(300)))
    ds = open_dataset(str(path), ReadOptions())
    ids = [ex.id for batch in ds.iter_batches() for ex in batch.examples]
    for seed, k in ((0, 93), (7, 10), (3, 300)):
        streamed = [ex.id for ex in sample(ds, k, seed, PROXY_SALT)]
        assert len(streamed) == k and streamed == sample_ids(ids, k, seed, PROXY_SALT).tolist()
    assert sample_ids(ids, 93, 0, PROXY_SALT).tolist() != sample_ids(ids, 93, 0, PROXY_SALT + 1).tolist()


def test_a_warm_up_of_a_few_steps_is_told_with_its_reason_and_what_to_do(tmp_path, cli_runner):
    """On 50 rows the proxy's budget cap left its warm-up one optimisation step, without a word: a proxy close
    to a random model. Now a warning says how many steps, why (few rows, --proxy-budget) and what to do; an
    explicit --proxy-steps is the user's choice and is not warned about."""
    data = _write_jsonl(tmp_path / "d.jsonl", _rows(50))
    common = ["--proxy-size", "tiny", "--proxy-vocab", "300", "--max-length", "128", "--features", "gradient"]
    s = _summary(_run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), *common, "--json"]))
    few = [w for w in s["warnings"] if w.startswith("proxy: the warm-up runs only 1 optimisation step, not the ")]
    assert len(few) == 1, s["warnings"]
    assert "on 50 rows --proxy-budget 0.15 caps its cost" in few[0] and "--features text" in few[0] \
        and "--model" in few[0] and "--proxy-steps N" in few[0]
    s = _summary(_run(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e2.parquet"), *common,
                                   "--proxy-steps", "3", "--json"]))
    assert not [w for w in s["warnings"] if "warm-up" in w], s["warnings"]


def test_the_parts_of_an_artifact_come_from_one_command_and_a_damaged_one_is_named(cli_runner, tmp_path):
    """A finished job-array piece embedded again with other data and --overwrite replaced its own part alone: the
    artifact held parts of two datasets, and cluster and report took it. Every reader of the parts now refuses it
    (until every piece has run again); a part cut short was an INTERNAL ERROR (ArrowInvalid) where a single file's is the
    one-line 'damaged'."""
    import shutil
    lines = (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "a.jsonl").write_text("".join(lines[:60]))
    (tmp_path / "b.jsonl").write_text("".join(lines[:40]))
    piece = ["--out", str(tmp_path / "e"), "--features", "text", "--dim", "16", "--commit-every", "20", "--num-parts",
             "2", "-q"]
    for i in (0, 1):
        r = cli_runner.invoke(main, ["embed", str(tmp_path / "a.jsonl"), *piece, "--part-index", str(i)])
        assert r.exit_code == 0, r.output
    shutil.copytree(tmp_path / "e", tmp_path / "damaged")
    part = tmp_path / "damaged" / "part-00001-of-00002.parquet"
    part.write_bytes(part.read_bytes()[:2000])
    r = cli_runner.invoke(main, ["cluster", str(tmp_path / "damaged"), "--out", str(tmp_path / "c.parquet")])
    assert r.exit_code == 2 and r.stderr.startswith(f"ERROR: {part}: damaged: cut short at 2,000 bytes"), r.output
    # a piece run again with --overwrite replaces its own part (the others are re-made by theirs, when the whole job
    # is run again): what reads the parts before then refuses them
    r = cli_runner.invoke(main, ["embed", str(tmp_path / "b.jsonl"), *piece, "--part-index", "1", "--overwrite"])
    assert r.exit_code == 0, r.output
    said = (f"{tmp_path / 'e' / 'part-00001-of-00002.parquet'}: a part of another run than part-00000-of-00002.parquet "
            "(other parameters or data): every part of an artifact comes from one command; embed all of it again")
    for command in (["cluster", str(tmp_path / "e"), "--out", str(tmp_path / "c.parquet")],
                    ["report", str(tmp_path / "e")]):
        r = cli_runner.invoke(main, command)
        assert r.exit_code == 2 and said in r.stderr, r.output
    r = cli_runner.invoke(main, ["embed", str(tmp_path / "b.jsonl"), *piece, "--part-index", "0", "--overwrite"])
    assert r.exit_code == 0, r.output  # every piece run again: one run's parts
    r = cli_runner.invoke(main, ["cluster", str(tmp_path / "e"), "--out", str(tmp_path / "c.parquet"), "--k", "3"])
    assert r.exit_code == 0, r.output


def test_report_says_an_artifact_of_parts_is_incomplete(cli_runner, tmp_path):
    """`report` of a job array's artifact with one of two parts written said its rows and dataset, exit 0, no
    warning, where cluster refuses it as incomplete."""
    import json
    lines = (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "a.jsonl").write_text("".join(lines[:60]))
    r = cli_runner.invoke(main, ["embed", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "e"), "--features",
                                 "text", "--dim", "16", "--commit-every", "20", "--num-parts", "2", "--part-index",
                                 "0", "-q"])
    assert r.exit_code == 0, r.output
    r = cli_runner.invoke(main, ["report", str(tmp_path / "e"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["warnings"] == [
        f"{tmp_path / 'e'}: incomplete: 1 of 2 parts written (part-00001-of-00002.parquet missing); this report "
        "describes the rows embedded so far"]
