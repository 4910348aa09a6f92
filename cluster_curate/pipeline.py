"""Runs stages over artifacts: read inputs, check lineage, call a pure stage function, write the output.

Stages below (features/, clustering.py, selection.py, sharding.py) know nothing of files, CLI or ranks;
this module and cli.py do the I/O. Each stage has its own section (edit only your section).
"""

from __future__ import annotations

# ============================================================================================ inspect

INSPECT_LISTED_REJECTS = 20  # rejected rows listed in the summary (all of them go to --rejects PATH)


def _length_stats(values) -> dict:
    import numpy as np
    a = np.asarray(values, dtype=np.int64)
    if a.size == 0:
        return {"min": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0, "mean": 0.0, "total": 0}
    p50, p90, p99 = (int(round(float(np.percentile(a, q)))) for q in (50, 90, 99))
    return {"min": int(a.min()), "p50": p50, "p90": p90, "p99": p99, "max": int(a.max()),
            "mean": round(float(a.mean()), 1), "total": int(a.sum())}


def _load_tokenizer(path: str):
    from pathlib import Path

    from cluster_curate.errors import CurateError
    if not Path(path).is_dir():
        raise CurateError(f"--tokenizer {path}: not a directory (pass a local Hugging Face tokenizer or model "
                          "directory, as written by save_pretrained)")
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - transformers raises many types; one line for the user
        raise CurateError(f"--tokenizer {path}: cannot load a tokenizer ({str(e).splitlines()[0]})") from None


def _token_counts(tokenizer, examples) -> tuple[list[int], list[int]]:
    """Prompt tokens (through the chat template when the tokenizer has one) and response tokens."""
    if getattr(tokenizer, "chat_template", None):
        prompts = tokenizer.apply_chat_template([e.prompt for e in examples], tokenize=False,
                                                add_generation_prompt=True)
    else:
        prompts = ["\n\n".join(t["content"] for t in e.prompt) for e in examples]
    p = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    r = tokenizer([e.response for e in examples], add_special_tokens=False)["input_ids"]
    return [len(x) for x in p], [len(x) for x in r]


def inspect_dataset(source: str, read_options, tokenizer: str | None = None, rejects_path: str | None = None,
                    overwrite: bool = False, batch_rows: int = 2048) -> dict:
    """Read a whole dataset once and describe it: container, format and field mapping, rows, rejected rows with
    reasons, prompt/response length distributions (characters; tokens with a tokenizer), exact duplicates.

    Bad rows are always collected (never raised) so the report lists all of them; the caller decides what a bad
    row means for its exit status (`result["first_reject"]`, `read_options.on_bad_row`)."""
    import dataclasses
    import hashlib
    import json

    from cluster_curate import console
    from cluster_curate.io.artifacts import check_writable
    from cluster_curate.io.datasets import open_dataset

    if rejects_path:
        check_writable(rejects_path, overwrite)
    tok = _load_tokenizer(tokenizer) if tokenizer else None
    ds = open_dataset(source, dataclasses.replace(read_options, on_bad_row="skip"))
    prompt_chars, response_chars, prompt_tokens, response_tokens = [], [], [], []
    seen_examples: set[bytes] = set()
    seen_prompts: set[bytes] = set()
    duplicates = duplicate_prompts = multi_turn = with_system = 0
    with console.progress("inspect", total=ds.rows) as bar:
        rejected_so_far = 0
        for batch in ds.iter_batches(batch_rows):
            for ex in batch.examples:
                prompt_chars.append(sum(len(t["content"]) for t in ex.prompt))
                response_chars.append(len(ex.response))
                with_system += any(t["role"] == "system" for t in ex.prompt)
                multi_turn += sum(t["role"] != "system" for t in ex.prompt) > 1
                prompt_key = json.dumps(ex.prompt, ensure_ascii=False, sort_keys=True).encode()
                pk = hashlib.blake2b(prompt_key, digest_size=16).digest()
                ek = hashlib.blake2b(prompt_key + b"\0" + ex.response.encode(), digest_size=16).digest()
                duplicate_prompts += pk in seen_prompts
                duplicates += ek in seen_examples
                seen_prompts.add(pk)
                seen_examples.add(ek)
            if tok is not None and batch.examples:
                p, r = _token_counts(tok, batch.examples)
                prompt_tokens += p
                response_tokens += r
            bar.advance(len(batch.examples) + len(ds.rejects) - rejected_so_far)  # rows, without building raw
            rejected_so_far = len(ds.rejects)
    if rejects_path:
        ds.write_rejects(rejects_path)
    lengths = {"prompt_chars": _length_stats(prompt_chars), "response_chars": _length_stats(response_chars)}
    if tok is not None:
        lengths["prompt_tokens"] = _length_stats(prompt_tokens)
        lengths["response_tokens"] = _length_stats(response_tokens)
    return {
        "source": ds.source,
        "container": ds.container,
        "format": ds.format,
        "fields": ds.fields,
        "rows": ds.rows,
        "examples": len(response_chars),
        "rejected": len(ds.rejects),
        "rejects": [r.to_dict() for r in ds.rejects[:INSPECT_LISTED_REJECTS]],
        "rejects_file": str(rejects_path) if rejects_path else None,
        "first_reject": str(ds.rejects[0]) if ds.rejects else None,
        "duplicates": duplicates,
        "duplicate_prompts": duplicate_prompts,
        "with_system_prompt": with_system,
        "multi_turn": multi_turn,
        "tokenizer": tokenizer,
        "lengths": lengths,
        "fingerprint": ds.fingerprint(),
    }


# ============================================================================================ embed

# ============================================================================================ cluster

# ============================================================================================ select

# ============================================================================================ shard

# ============================================================================================ run
