"""Evaluation questions in the training pool (`select --decontaminate EVAL`): pure functions on prompts.

Exact copies need no text here: embed keeps each row's exact_dedup.prompt_keys, and a row is a copy when its
key is one of EVAL's. A reworded copy (a sentence added, another wording around the same question) is caught
by shared word n-grams, as GPT-3's and NeMo Curator's task decontamination do:

    grams = eval_ngrams([ex.prompt for ex in eval_rows], n=13)    # the set of EVAL's n-grams
    hit = shares_ngram([ex.prompt for ex in pool_rows], grams)    # bool per pool row

Words: lower-cased runs of letters and digits (punctuation and spacing aside). Only the user's turns count (a
system prompt shared by every row is no question). An n-gram that more than BOILERPLATE_SHARE of EVAL's prompts
hold (at least BOILERPLATE_MIN) is a template's wording, not a question's, and is left out: otherwise every pool
row with the same template would match.
"""

from __future__ import annotations

import re

import numpy as np

_WORD = re.compile(r"\w+")
BOILERPLATE_SHARE, BOILERPLATE_MIN = 0.01, 5


def _words(prompt: list[dict]) -> list[str]:
    """The words of the user's turns (not a system prompt, nor an assistant's turn, a tool call or a tool's
    result: what a row asks)."""
    return [w for turn in prompt if turn.get("role") == "user" for w in _WORD.findall(turn["content"].lower())]


def _ngrams(words: list[str], n: int) -> set[str]:
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def eval_ngrams(prompts: list[list[dict]], n: int) -> tuple[set[str], int]:
    """The word n-grams of EVAL's prompts, less the boilerplate ones; returns (the set, how many were left out
    as boilerplate). A prompt shorter than n words has none (its exact copies are caught by its key). Shares are
    of EVAL's distinct questions (the same words): a question EVAL asks several times (several references or
    samples per question) is one question, not a template."""
    counts: dict[str, int] = {}
    distinct = {tuple(_words(p)) for p in prompts}
    for words in distinct:
        for g in _ngrams(list(words), n):
            counts[g] = counts.get(g, 0) + 1
    most = max(BOILERPLATE_MIN, int(BOILERPLATE_SHARE * len(distinct)))
    kept = {g for g, c in counts.items() if c <= most}
    return kept, len(counts) - len(kept)


def shares_ngram(prompts: list[list[dict]], grams: set[str], n: int) -> np.ndarray:
    """Per prompt, whether one of its word n-grams is in `grams`."""
    return np.fromiter((not grams.isdisjoint(_ngrams(_words(p), n)) for p in prompts), dtype=bool,
                       count=len(prompts))


def set_record(path, fingerprint: str, asked: np.ndarray, keys: np.ndarray, ids: np.ndarray, near=None,
               n: int | None = None, boilerplate: int = 0, listed: int = 20) -> tuple[np.ndarray, dict]:
    """One EVAL set against the rows (their prompt keys `keys` and `ids`; `near`: their shared-n-gram hits):
    which rows ask one of its questions (`asked`: its unique prompt keys), and what select and inspect say of
    it."""
    copy = np.isin(keys, asked)
    hit = copy if near is None else copy | near
    record = {"path": str(path), "fingerprint": fingerprint, "questions": int(asked.size),
              "questions_in_pool": int(np.unique(keys[copy]).size), "rows": int(hit.sum()),
              "ids": np.asarray(ids)[hit][:listed].tolist()}
    if n:
        record.update(copies=int(copy.sum()), ngram_rows=int((hit & ~copy).sum()), ngram=n,
                      boilerplate_ngrams=boilerplate)
    return hit, record
