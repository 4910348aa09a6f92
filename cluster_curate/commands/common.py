"""Helpers shared by several commands: tokenizers (inspect and shard count tokens) and timing."""

from __future__ import annotations

from cluster_curate.errors import CurateError


def load_tokenizer(path: str):
    from pathlib import Path

    if not Path(path).is_dir():
        raise CurateError(f"--tokenizer {path}: not a directory (pass a local Hugging Face tokenizer or model "
                          "directory, as written by save_pretrained)")
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - transformers raises many types; one line for the user
        raise CurateError(f"--tokenizer {path}: cannot load a tokenizer ({str(e).splitlines()[0]})") from None


def token_counts(tokenizer, examples) -> tuple[list[int], list[int]]:
    """Prompt tokens (through the chat template when the tokenizer has one) and response tokens."""
    if getattr(tokenizer, "chat_template", None):
        prompts = tokenizer.apply_chat_template([e.prompt for e in examples], tokenize=False,
                                                add_generation_prompt=True)
    else:
        prompts = ["\n\n".join(t["content"] for t in e.prompt) for e in examples]
    p = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    r = tokenizer([e.response for e in examples], add_special_tokens=False)["input_ids"]
    return [len(x) for x in p], [len(x) for x in r]
