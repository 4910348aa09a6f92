"""Evaluation questions in the training pool (`select --decontaminate EVAL`): pure functions on prompts.

Exact copies need no text here: embed keeps each row's exact_dedup.prompt_keys and, for a row of more turns than
one user turn, each user turn's (exact_dedup.user_turn_keys); a row is a copy when one of them is one of EVAL's
keys (RowQuestions.asking), so a chat that opens with an evaluation question and goes on is one. A reworded copy
(a sentence added, another wording around the same question) is caught by shared word n-grams, as GPT-3's and
NeMo Curator's task decontamination do:

    grams = eval_ngrams([ex.prompt for ex in eval_rows], n=13)    # the set of EVAL's n-grams
    hit = shares_ngram([ex.prompt for ex in pool_rows], grams)    # bool per pool row

Words: lower-cased runs of letters and digits (punctuation and spacing aside). Only the user's turns count (a
system prompt shared by every row is no question). An n-gram that more than BOILERPLATE_SHARE of EVAL's prompts
hold (at least BOILERPLATE_MIN) is a template's wording, not a question's, and is left out: otherwise every pool
row with the same template would match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_WORD = re.compile(r"\w+")
BOILERPLATE_SHARE, BOILERPLATE_MIN = 0.01, 5
# ids of the rows a set's questions are found in, recorded in full up to this many (the count is always exact), as
# embed records the exact duplicates it left out (commands/embed_parts.LISTED_COPIES)
LISTED_IDS = 10_000


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


@dataclass(frozen=True)
class RowQuestions:
    """What rows ask, in their order: each row's prompt key (`keys`) and the user turns' keys of the rows that have
    them (exact_dedup.user_turn_keys), flat: `turn_keys[j]` is a turn of the row at `turn_rows[j]`."""
    keys: np.ndarray  # int64 per row
    turn_rows: np.ndarray  # int64 per turn key: its row's position
    turn_keys: np.ndarray  # int64

    @classmethod
    def of(cls, prompts: list[list[dict]]) -> RowQuestions:
        """What the rows of these prompts ask."""
        from cluster_curate.exact_dedup import prompt_keys, user_turn_keys
        turn_keys = user_turn_keys(prompts)
        rows = [i for i, turns in enumerate(turn_keys) if turns for _ in turns]
        flat = [k for turns in turn_keys if turns for k in turns]
        return cls(prompt_keys(prompts), np.asarray(rows, np.int64), np.asarray(flat, np.int64))

    @classmethod
    def joined(cls, parts: list[RowQuestions]) -> RowQuestions:
        """The rows of `parts`, one part after the other."""
        starts = np.cumsum([0] + [len(p.keys) for p in parts])[:-1]
        flat = lambda arrays: np.concatenate([np.zeros(0, np.int64), *arrays])  # noqa: E731
        return cls(flat([p.keys for p in parts]), flat([p.turn_rows + s for p, s in zip(parts, starts)]),
                   flat([p.turn_keys for p in parts]))

    def asking(self, asked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row, whether it asks one of the questions `asked` (prompt keys): its whole prompt, or one of its user
        turns; and which of them the rows ask."""
        whole, turn = np.isin(self.keys, asked), np.isin(self.turn_keys, asked)
        hit = whole.copy()
        hit[self.turn_rows[turn]] = True
        return hit, np.union1d(self.keys[whole], self.turn_keys[turn])

    def take(self, keep: np.ndarray) -> RowQuestions:
        """The rows where `keep` (bool per row) is true."""
        position = np.cumsum(keep) - 1
        turns = keep[self.turn_rows]
        return RowQuestions(self.keys[keep], position[self.turn_rows[turns]], self.turn_keys[turns])


def set_record(path, fingerprint: str, asked: np.ndarray, pool: RowQuestions, ids: np.ndarray, near=None,
               n: int | None = None, boilerplate: int = 0, listed: int = LISTED_IDS) -> tuple[np.ndarray, dict]:
    """One EVAL set against the rows (what they ask, `pool`, and their `ids`; `near`: their shared-n-gram hits):
    which rows ask one of its questions (`asked`: its unique prompt keys), and what select and inspect say of
    it: `rows` counts them all, `ids` lists the first `listed`."""
    copy, found = pool.asking(asked)
    hit = copy if near is None else copy | near
    record = {"path": str(path), "fingerprint": fingerprint, "questions": int(asked.size),
              "questions_in_pool": int(found.size), "rows": int(hit.sum()),
              "ids": np.asarray(ids)[hit][:listed].tolist()}
    if n:
        record.update(copies=int(copy.sum()), ngram_rows=int((hit & ~copy).sum()), ngram=n,
                      boilerplate_ngrams=boilerplate)
    return hit, record
