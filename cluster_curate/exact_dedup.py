"""Exact duplicates: examples with the same normalised prompt and response (and rejected answer, for a preference
pair) (issue 20 #8).

Near-copies are the clusters' business (equal quotas, `--dedup COS`); exact copies are not a kind of lesson
but the same lesson twice, so by default only one of them may be selected: the lowest id, the others listed.

    keys = [example_key(ex.prompt, ex.response) for ex in examples]   # 16 bytes per example
    keep, copy_of = first_of_each(ids, keys)                           # pure, on arrays

Normalisation: Unicode NFC, runs of whitespace as one space, leading/trailing whitespace dropped, per turn
(role kept). Case and punctuation are kept: in code and maths they change the meaning.
"""

from __future__ import annotations

import hashlib
import unicodedata

import numpy as np

KEY_BYTES = 16


def normalise_text(text: str) -> str:
    # str.split() cuts at the characters re's \s matches (str.isspace) and drops them at both ends: a run of
    # whitespace as one space, the ends stripped, without a regex pass
    return " ".join(unicodedata.normalize("NFC", text).split())


def same_answer(chosen: str, rejected: str | None) -> bool:
    """Whether a preference pair's rejected answer is its chosen one (normalised as copies are): a DPO loss on such
    a pair is zero, its tokens teach nothing (real HH-RLHF and UltraFeedback hold some)."""
    return rejected is not None and normalise_text(chosen) == normalise_text(rejected)


def _prompt_hash(prompt: list[dict]):
    h = hashlib.blake2b(digest_size=KEY_BYTES)
    for turn in prompt:
        h.update(turn["role"].encode() + b"\x1f" + normalise_text(turn["content"]).encode() + b"\x1e")
    return h


def example_key(prompt: list[dict], response: str, rejected: str | None = None) -> bytes:
    """A 16-byte digest of the normalised prompt turns (role and content) and response, and of a preference pair's
    rejected answer (pairs that share prompt and chosen answer but reject different ones are not copies)."""
    h = _prompt_hash(prompt)
    h.update(b"\x1d" + normalise_text(response).encode())
    if rejected is not None:
        h.update(b"\x1c" + normalise_text(rejected).encode())
    return h.digest()


def prompt_keys(prompts: list[list[dict]]) -> np.ndarray:
    """int64 per prompt: the first 8 bytes of a digest of its normalised turns alone, system turns aside, so two
    examples that ask the same thing, whatever their answers and system prompts, share it (`select
    --decontaminate` finds the rows that ask an evaluation set's question, which seldom has the training chats'
    system prompt; embed keeps it per row). A chance match of two prompts: about n·m / 2^64."""
    digests = b"".join(_prompt_hash([t for t in p if t["role"] != "system"]).digest()[:8] for p in prompts)
    return np.frombuffer(digests, dtype="<i8").astype(np.int64) if prompts else np.zeros(0, np.int64)


def user_turn_keys(prompts: list[list[dict]]) -> list[list[int] | None]:
    """Per prompt, the prompt_keys of each of its user turns alone, where it holds more than that one turn (system
    turns aside: a multi-turn chat, a tool call and its result): an evaluation question a chat asks in its first
    turn, then goes on from, is still asked (`select --decontaminate`). None for a prompt of one user turn, whose
    prompt key is that turn's (most rows: embed keeps nothing more for them)."""
    users = [_user_turns(p) for p in prompts]
    keys = iter(prompt_keys([turn for turns in users if turns for turn in turns]).tolist())
    return [None if turns is None else [next(keys) for _ in turns] for turns in users]


def _user_turns(prompt: list[dict]) -> list[list[dict]] | None:
    """A prompt's user turns, each a prompt by itself, where it holds other turns than one user turn (system aside)."""
    turns = [t for t in prompt if t["role"] != "system"]
    return ([[t] for t in turns if t["role"] == "user"] or None) if len(turns) > 1 else None


def first_of_each(ids: np.ndarray, keys) -> tuple[np.ndarray, np.ndarray]:
    """keep[i]: row i is the lowest id among the rows with its key; copy_of[i]: that lowest id (= ids[i] when
    kept). `keys`: a sequence of bytes, or an [n, KEY_BYTES] uint8 array. Order of the rows does not matter."""
    ids = np.asarray(ids, dtype=np.int64)
    if isinstance(keys, np.ndarray):
        k = np.ascontiguousarray(keys, dtype=np.uint8).reshape(len(ids), -1)
    else:
        k = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(ids), -1) if len(ids) else \
            np.zeros((0, KEY_BYTES), np.uint8)
    if len(ids) == 0:
        return np.zeros(0, bool), ids.copy()
    if len(np.unique(ids)) != len(ids):
        raise ValueError("ids must be unique")
    packed = k.view(np.dtype((np.void, k.shape[1]))).ravel()
    order = np.lexsort((ids, packed))  # by key, then id: the first row of each run is the one kept
    first = np.r_[True, packed[order][1:] != packed[order][:-1]]
    run = np.cumsum(first) - 1
    keeper = ids[order][first][run]
    copy_of = np.empty_like(ids)
    copy_of[order] = keeper
    return copy_of == ids, copy_of
