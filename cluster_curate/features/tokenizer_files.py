"""Whether a folder holds a tokenizer: one rule for --model, --encoder and --tokenizer folders, light to import
(checked with the options, before torch or transformers load)."""
from __future__ import annotations

from pathlib import Path

# texts per batched tokenizer call: a batch holds rich per-text encodings (offsets, masks) for all its texts at
# once, so memory is bounded by the slice, not the chunk
ENCODE_SLICE = 256


def missing_tokenizer_files(folder: Path) -> str | None:
    """What a directory lacks to hold a tokenizer (None: it holds one): a fast tokenizer's tokenizer.json, a
    sentencepiece or tiktoken model, a WordPiece vocab.txt, a BPE vocab.json with its merges.txt, or a
    tokenizer_config.json (ByT5's and CANINE's tokenizers have no vocabulary file: transformers says the rest)."""
    names = {f.name for f in folder.iterdir() if f.is_file()}
    if {"tokenizer.json", "vocab.txt", "tokenizer_config.json"} & names or \
            any(n.endswith((".model", ".tiktoken")) for n in names):
        return None
    if "vocab.json" in names:
        return None if "merges.txt" in names else "vocab.json without its merges.txt"
    return "no tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.txt, nor vocab.json with merges.txt"
