"""Runs stages over artifacts: read inputs, check lineage, call a pure stage function, write the output.

Stages below (features/, clustering.py, selection.py, sharding.py) know nothing of files, CLI or ranks;
this module and cli.py do the I/O. Each stage has its own section (edit only your section).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import artifact_schema, json_default, sidecar_path, stable_hash

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


def _embed_defaults():
    from cluster_curate.distributed import DEFAULT_COMMIT_EVERY
    from cluster_curate.features.embed import DEFAULT_BATCH_TOKENS, DEFAULT_FEATURES, DEFAULT_MAX_LENGTH
    return DEFAULT_FEATURES, DEFAULT_MAX_LENGTH, DEFAULT_BATCH_TOKENS, DEFAULT_COMMIT_EVERY


@dataclass
class EmbedConfig:
    """Everything `embed` needs besides the data and the output (see `cluster-curate embed --help`)."""
    model: str = "proxy"
    features: str | None = None  # None: features.embed.DEFAULT_FEATURES
    feature_weights: str | None = None
    dim: int | None = None
    pool: str = "all"
    layers: str | None = None
    checkpoints: str | None = None
    text_field: str = "prompt"
    text_weighting: str = "tf"
    text_sample: int = 20000
    max_length: int | None = None  # None: DEFAULT_MAX_LENGTH
    batch_tokens: int | None = None  # None: DEFAULT_BATCH_TOKENS
    device: str | None = None
    dtype: str | None = None
    trust_remote_code: bool = False
    seed: int = 0
    num_shards: int = 1
    shard_index: int = 0
    commit_every: int | None = None  # None: DEFAULT_COMMIT_EVERY
    resume: bool = False
    proxy: object = field(default=None)  # features.proxy.ProxyOptions; None: defaults


def _embed_validate(cfg: EmbedConfig) -> list[str]:
    from cluster_curate.features.embed import MODEL_FEATURES, parse_features
    from cluster_curate.features.text import TEXT_FIELDS, TEXT_WEIGHTINGS
    features = parse_features(cfg.features)
    if cfg.dim is not None and cfg.dim <= 0:
        raise CurateError(f"--dim must be positive, got {cfg.dim}")
    if cfg.max_length is not None and cfg.max_length < 2:
        raise CurateError(f"--max-length must be at least 2, got {cfg.max_length}")
    if cfg.batch_tokens is not None and cfg.batch_tokens <= 0:
        raise CurateError(f"--batch-tokens must be positive, got {cfg.batch_tokens}")
    if cfg.pool not in ("all", "response"):
        raise CurateError(f"--pool must be 'all' or 'response', got {cfg.pool!r}")
    if cfg.text_field not in TEXT_FIELDS:
        raise CurateError(f"--text-field must be one of {', '.join(TEXT_FIELDS)}, got {cfg.text_field!r}")
    if cfg.text_weighting not in TEXT_WEIGHTINGS:
        raise CurateError(f"--text-weighting must be one of {', '.join(TEXT_WEIGHTINGS)}, "
                          f"got {cfg.text_weighting!r}")
    if cfg.text_sample < 2:
        raise CurateError(f"--text-sample must be at least 2, got {cfg.text_sample}")
    if cfg.checkpoints and "loss-trajectory" not in features:
        raise CurateError("--checkpoints is only used by --features loss-trajectory")
    if cfg.model != "proxy" and not any(f in MODEL_FEATURES for f in features):
        raise CurateError(f"--model {cfg.model} is not used by --features {','.join(features)} (no model); "
                          "add a model feature, e.g. --features text,gradient")
    if any(f in MODEL_FEATURES for f in features) and cfg.model != "proxy":
        from pathlib import Path
        spec = str(cfg.model)
        looks_local = spec.startswith(("/", ".", "~")) or spec.endswith(".gguf") or spec.count("/") > 1
        if looks_local and not Path(spec).expanduser().exists():  # fail before reading the data
            raise CurateError(f"--model {spec}: no such file or directory")
    if cfg.proxy is not None:
        cfg.proxy.validate()
    return features


def _embed_scan(ds, commit_every: int):
    """Pass 1: parse every row (bad input fails here, before any model work); count rows per chunk."""
    import numpy as np
    counts: dict[int, int] = {}
    parsed = 0
    for batch in ds.iter_batches():
        for ex in batch.examples:
            c = ex.id // commit_every
            counts[c] = counts.get(c, 0) + 1
        parsed += len(batch.examples)
    total = int(ds.rows or 0)
    n_chunks = -(-total // commit_every) if total else 0
    per_chunk = np.zeros(n_chunks, dtype=np.int64)
    for c, n in counts.items():
        per_chunk[c] = n
    return parsed, total, per_chunk


def _embed_sample(ds, k: int, seed: int, salt: int) -> list:
    """Pass 2: a seeded uniform sample of k parsed examples (the k smallest keys), in id order."""
    import numpy as np
    from cluster_curate.features.embed import BottomK, sample_keys
    keep = BottomK(k)
    for batch in ds.iter_batches():
        if not batch.examples:
            continue
        keys = sample_keys(np.array([ex.id for ex in batch.examples]), seed * 1000003 + salt)
        for ex, key in zip(batch.examples, keys.tolist()):
            keep.add(key, ex.id, ex)
    return keep.smallest(k)


def _embed_proxy(ds, out, cfg: EmbedConfig, layout, parsed: int, record: dict, device):
    """Train the proxy on a seeded sample (rank 0 of each piece, when no matching one is saved beside the
    output), then load it from disk on every process so all use the same weights. Returns (dir, seconds)."""
    import time
    from cluster_curate import console, distributed
    from cluster_curate.features import proxy as P
    opts = cfg.proxy
    directory = sidecar_path(out, "proxy")
    key = stable_hash({"dataset": record.get("fingerprint"), "options": opts.__dict__})
    seconds = 0.0
    existing = P.is_proxy_dir(directory) and P.read_proxy_config(directory).get("key") == key
    if layout.leader and not existing:
        import tokenizers  # noqa: F401 - library imports are start-up, not warm-up (any model needs them)
        import transformers  # noqa: F401
        from transformers import PreTrainedTokenizerFast  # noqa: F401
        t0 = time.perf_counter()
        sample = _embed_sample(ds, opts.sample_size(parsed), opts.seed, salt=1)
        with _Lazy() as lazy:
            def on_step(step, total, loss):
                lazy.bar("proxy warm-up", total, "steps").advance(1)
            from cluster_curate.features.models import resolve_device
            trained = P.train_proxy(sample, opts, device=resolve_device(device), on_step=on_step,
                                    dataset_rows=parsed)
        # Job-array pieces started together may all train it (deterministically): the first one saved wins.
        if not (P.is_proxy_dir(directory) and P.read_proxy_config(directory).get("key") == key):
            P.save_proxy(trained, directory, extra={"key": key, "dataset": record})
        seconds = time.perf_counter() - t0
        del sample
        import gc
        gc.collect()
        from cluster_curate.features.embed import release_free_memory
        release_free_memory()  # the sample and the tokenizer trainer's buffers, before the feature pass
        console.info(f"proxy: trained on {trained.log['rows']} rows, {trained.log['steps']} steps in "
                     f"{seconds:.1f}s (tokenizer {trained.log['tokenizer_seconds']:.1f}s, loss "
                     f"{trained.log['loss_first']:.2f} -> {trained.log['loss_last10']:.2f}); saved to {directory}")
    distributed.barrier(layout)
    if not P.is_proxy_dir(directory):  # a job-array piece whose leader did not train (cannot happen) or a race
        raise CurateError(f"{directory}: the proxy was not saved")
    return directory, seconds


class _Lazy:
    """A progress bar opened on first use (its total is only known then)."""

    def __enter__(self):
        from contextlib import ExitStack
        self._stack, self._bar = ExitStack(), None
        return self

    def bar(self, description, total, unit):
        from cluster_curate import console
        if self._bar is None:
            self._bar = self._stack.enter_context(console.progress(description, total=total, unit=unit))
        return self._bar

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)


def _embed_text(ds, out, cfg: EmbedConfig, layout, parsed: int, record: dict):
    from cluster_curate import distributed
    from cluster_curate.features.embed import DEFAULT_TEXT_DIM
    from cluster_curate.features.text import TextFeaturizer, example_text
    dim = cfg.dim or DEFAULT_TEXT_DIM
    path = sidecar_path(out, "text.npz")
    key = stable_hash({"dataset": record.get("fingerprint"), "dim": dim, "field": cfg.text_field, "seed": cfg.seed,
                       "weighting": cfg.text_weighting, "sample": cfg.text_sample,
                       "max_features": TextFeaturizer.max_features})
    key_file = sidecar_path(out, "text.key")
    existing = path.exists() and key_file.exists() and key_file.read_text() == key
    if layout.leader and not existing:
        sample = _embed_sample(ds, min(parsed, cfg.text_sample), cfg.seed, salt=2)
        feat = TextFeaturizer(dim=dim, field=cfg.text_field, weighting=cfg.text_weighting, seed=cfg.seed)
        feat.fit([example_text(ex, cfg.text_field) for ex in sample])
        feat.save(path)
        from cluster_curate.io.artifacts import atomic_write_bytes
        atomic_write_bytes(key_file, key.encode())
    distributed.barrier(layout)
    return TextFeaturizer.load(path)


def _embed_trajectory(cfg: EmbedConfig, proxy_dir, fm, device):
    """The checkpoint models of `loss-trajectory`: --checkpoints (proxy warm-up steps or model specs),
    else the proxy's own warm-up checkpoints."""
    from cluster_curate.features import proxy as P
    from cluster_curate.features.models import load_model
    items = [s.strip() for s in (cfg.checkpoints or "").split(",") if s.strip()]
    if not items:
        if proxy_dir is None:
            raise CurateError("--features loss-trajectory with a model other than the proxy needs --checkpoints "
                              "A,B,C (model paths or ids)")
        return [P.load_proxy(proxy_dir, s, device=fm.device) for s in P.proxy_checkpoint_steps(proxy_dir)], \
            [f"step {s}" for s in P.proxy_checkpoint_steps(proxy_dir)]
    models, names = [], []
    for item in items:
        if item.isdigit():
            if proxy_dir is None:
                raise CurateError(f"--checkpoints {item}: a step number only names a warm-up checkpoint of the proxy")
            models.append(P.load_proxy(proxy_dir, int(item), device=fm.device))
        elif P.is_proxy_dir(item):
            models.append(P.load_proxy(item, device=fm.device))
        else:
            models.append(load_model(item, device=str(fm.device), dtype=cfg.dtype,
                                     trust_remote_code=cfg.trust_remote_code))
        names.append(item)
    return models, names


def embed(data: str, out: str, cfg: EmbedConfig, read_options=None, *, overwrite: bool = False,
          force: bool = False) -> dict:
    """`cluster-curate embed`: one feature row per parsed example of `data` into the embeddings artifact
    `out` (a file; a directory of parts when several processes share the run). Returns the summary."""
    import json
    import time

    from cluster_curate import console, distributed
    from cluster_curate.features import proxy as P
    from cluster_curate.features.embed import (DEFAULT_TEXT_DIM, MODEL_FEATURES, Embedder, block_dims,
                                               bound_host_memory, chunk_table, parse_weights, release_free_memory)
    from cluster_curate.io.artifacts import atomic_write_bytes, make_meta
    from cluster_curate.io.datasets import open_dataset

    t_start = time.perf_counter()
    bound_host_memory()
    default_features, default_max_length, default_batch_tokens, default_commit = _embed_defaults()
    cfg.features = default_features if cfg.features is None else cfg.features
    cfg.max_length = default_max_length if cfg.max_length is None else cfg.max_length
    cfg.batch_tokens = default_batch_tokens if cfg.batch_tokens is None else cfg.batch_tokens
    cfg.commit_every = default_commit if cfg.commit_every is None else cfg.commit_every
    if cfg.proxy is None:
        cfg.proxy = P.ProxyOptions()
    cfg.proxy.seed, cfg.proxy.max_length = cfg.seed, cfg.max_length
    features = _embed_validate(cfg)
    weights = parse_weights(cfg.feature_weights, len(features))
    uses_model = any(f in MODEL_FEATURES for f in features)

    layout = distributed.detect(cfg.num_shards, cfg.shard_index)
    if layout.torchrun and not layout.leader:  # one progress bar and one summary: rank 0's
        console.configure(quiet=True, json_mode=False)
    device = distributed.device_for(layout, cfg.device)
    # under torchrun device_for has already turned auto into this rank's GPU when there is one
    distributed.init(layout, use_cuda=str(device or "").startswith("cuda"))
    try:
        ds = open_dataset(data, read_options)
        parsed, total_rows, per_chunk = _embed_scan(ds, cfg.commit_every)
        record = ds.record()
        if parsed == 0:
            raise CurateError(f"{data}: no row parsed; nothing to embed")

        # ---- models and fitted state, shared by every process through files beside the output
        fm, proxy_dir, warmup_s, model_name, trajectory, trajectory_names = None, None, 0.0, None, [], []
        t_load = time.perf_counter()
        if uses_model:
            from cluster_curate.features.models import load_model, resolve_device
            if cfg.model == "proxy":
                proxy_dir, warmup_s = _embed_proxy(ds, out, cfg, layout, parsed, record, device)
                fm = P.load_proxy(proxy_dir, device=resolve_device(device))
                model_name = "proxy"
            elif P.is_proxy_dir(cfg.model):
                proxy_dir = cfg.model
                fm = P.load_proxy(proxy_dir, device=resolve_device(device))
                model_name = f"proxy:{cfg.model}"
            else:
                fm = load_model(cfg.model, device=device, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code)
                model_name = cfg.model
            if "loss-trajectory" in features:
                trajectory, trajectory_names = _embed_trajectory(cfg, proxy_dir, fm, device)
        text = _embed_text(ds, out, cfg, layout, parsed, record) if "text" in features else None
        prepare_s = time.perf_counter() - t_load

        projectors, lora_dim = {}, None
        if fm is not None:
            from cluster_curate.features.extractors import DEFAULT_LORA_DIM, lora_projector
            from cluster_curate.features.projection import derive_seed, random_projection_torch
            for kind in ("gradient", "hidden"):
                if kind in features and cfg.dim:
                    projectors[kind] = random_projection_torch(fm.hidden_size, cfg.dim,
                                                               derive_seed(cfg.seed, kind)).to(fm.device)
            if "lora-gradient" in features:
                lora_dim = cfg.dim or DEFAULT_LORA_DIM
                projectors["lora-gradient"] = lora_projector(fm, lora_dim, cfg.seed, cfg.layers)
        dims = block_dims(features, hidden_size=fm.hidden_size if fm else None, dim=cfg.dim,
                          n_checkpoints=len(trajectory), text_dim=text.dim if text else DEFAULT_TEXT_DIM,
                          lora_dim=lora_dim)
        embedder = Embedder(features=features, fm=fm, text=text, trajectory=trajectory, projectors=projectors,
                            weights=weights, pool=cfg.pool, layers=cfg.layers, max_length=cfg.max_length,
                            batch_tokens=cfg.batch_tokens, dims=dict(dims))

        params = {"model": model_name, "features": features, "feature_weights": weights if len(features) > 1 else None,
                  "dim": cfg.dim, "dims": dims, "dim_total": int(sum(dims.values())), "pool": cfg.pool,
                  "layers": cfg.layers, "checkpoints": trajectory_names or None, "text_field": cfg.text_field,
                  "text_weighting": cfg.text_weighting if text else None,
                  "text_sample": cfg.text_sample if text else None, "max_length": cfg.max_length, "seed": cfg.seed,
                  "dtype": str(fm.dtype).replace("torch.", "") if fm else None,
                  "proxy": dict(cfg.proxy.__dict__) if model_name == "proxy" else None,
                  "proxy_key": P.read_proxy_config(proxy_dir).get("key") if proxy_dir else None,
                  "loss": "mean response-token cross-entropy" if fm else "NaN: no model (text features only)",
                  "n_tokens": "model tokens" if fm else "whitespace words (no model tokenizer)"}
        meta = make_meta("embeddings", params, {"data": record}, record)
        output = distributed.ChunkedOutput(out, layout, {"params": params, "dataset": record.get("fingerprint")},
                                           cfg.commit_every, resume=cfg.resume, overwrite=overwrite)

        # ---- pass 3: the features, chunk by chunk (each chunk committed as soon as it is done)
        todo = [c for c in range(len(per_chunk)) if output.todo(c)]
        todo_set = set(todo)
        todo_rows = int(per_chunk[todo].sum()) if todo else 0
        done_rows, done_tokens, skipped_now = 0, 0, 0
        t_feat = time.perf_counter()
        with console.progress("embed", total=todo_rows, unit="rows") as bar:
            def on_batch(rows, tokens):
                nonlocal done_rows, done_tokens
                done_rows += rows
                done_tokens += tokens
                rate = done_tokens / max(time.perf_counter() - t_feat, 1e-9)
                bar.advance(rows, description=f"embed ({rate:,.0f} tokens/s)")

            def flush(chunk, examples):
                nonlocal skipped_now
                result = embedder.embed(examples, on_batch=on_batch)
                skipped = [{"id": int(i), "reason": r} for i, r in result.skipped]
                skipped_now += len(skipped)
                if skipped:
                    bar.advance(len(skipped))
                output.commit(chunk, chunk_table(result), skipped)
                del result
                release_free_memory()

            current, buf = None, []
            for batch in ds.iter_batches():
                for ex in batch.examples:
                    c = output.chunk_of(ex.id)
                    if c != current:
                        if current is not None and current in todo_set:
                            flush(current, buf)
                        for gap in range((current + 1) if current is not None else 0, c):
                            if gap in todo_set:  # chunks with no parsed row still get (empty) parts
                                flush(gap, [])
                        current, buf = c, []
                    if c in todo_set:
                        buf.append(ex)
            last = current if current is not None else -1
            if current is not None and current in todo_set:
                flush(current, buf)
            for gap in range(last + 1, len(per_chunk)):
                if gap in todo_set:
                    flush(gap, [])
        feature_s = time.perf_counter() - t_feat

        # ---- finish: reported rows, then the artifact
        mine = [c for c in range(len(per_chunk)) if layout.owns(c)]
        skipped_rows = output.skipped_rows(mine)
        bad_rows = [r.to_dict() for r in ds.rejects if layout.owns(output.chunk_of(r.id))]
        result = output.finish(meta, len(per_chunk))
        rejects_path = output.rejects_path()
        reported = [dict(r, kind="bad row") for r in bad_rows] + [dict(r, kind="no response token")
                                                                 for r in skipped_rows]
        if reported:
            reported.sort(key=lambda r: r["id"])
            atomic_write_bytes(rejects_path, "".join(json.dumps(r) + "\n" for r in reported).encode())
        elif rejects_path.exists():
            rejects_path.unlink()
        seconds = time.perf_counter() - t_start
        summary = {
            "output": result["path"], "process": layout.describe(), "rows": result["rows"],
            "artifact_rows": result["artifact_rows"], "parts": result["parts"], "complete": result["complete"],
            "rows_in_data": total_rows, "skipped_no_response": len(skipped_rows), "bad_rows": len(bad_rows),
            "rejects": str(rejects_path) if reported else None, "model": model_name or "none",
            "features": ",".join(features), "dims": dims, "dim": int(sum(dims.values())),
            "device": str(fm.device) if fm else "cpu", "chunks_computed": len(todo),
            "chunks_resumed": len(mine) - len([c for c in mine if c in todo_set]),
            "seconds": round(seconds, 3), "warmup_seconds": round(warmup_s, 3),
            "prepare_seconds": round(prepare_s, 3), "feature_seconds": round(feature_s, 3),
            "rows_per_s": round(done_rows / max(feature_s, 1e-9), 1),
            "tokens_per_s": round(done_tokens / max(feature_s, 1e-9), 1),
        }
        if proxy_dir is not None:
            summary["proxy"] = str(proxy_dir)
        if skipped_rows:
            shown = ", ".join(str(r["id"]) for r in skipped_rows[:10])
            console.warn(f"{len(skipped_rows)} row(s) kept no response token and were not embedded (ids {shown}"
                         f"{', ...' if len(skipped_rows) > 10 else ''}); listed in {rejects_path}")
        return summary
    finally:
        distributed.shutdown(layout)


# ============================================================================================ cluster

def _read_columns(path, columns):
    """Some columns of every part of an artifact, joined in part order (no sort)."""
    import pyarrow as pa

    from cluster_curate.io.artifacts import artifact_files, read_parquet
    try:
        tables = [read_parquet(f, columns) for f in artifact_files(path)]
    except (pa.ArrowInvalid, OSError, KeyError) as e:
        raise CurateError(f"{path}: cannot read columns {', '.join(columns)} ({e})") from None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def load_embedding_matrix(path, *, force: bool = False, batch_rows: int = 65536):
    """The `embedding` column of an embeddings artifact as one [n, d] float32 matrix in id order, plus the
    sorted ids and the artifact's meta. Memory: the matrix plus one batch (each batch's vectors are a view of
    Arrow's buffer, copied once into place). Errors name the file and the first bad id."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cluster_curate.clustering import embedding_matrix
    from cluster_curate.io.artifacts import artifact_files, read_meta

    meta = read_meta(path, None if force else "embeddings")
    files = artifact_files(path)
    names = artifact_schema(path).names
    for col in ("id", "embedding"):
        if col not in names:
            raise CurateError(f"{path}: no '{col}' column (found {', '.join(names)})")
    file_ids = _read_columns(path, ["id"]).column("id").to_numpy().astype(np.int64, copy=False)
    n = len(file_ids)
    if n == 0:
        raise CurateError(f"{path}: empty artifact (no rows)")
    in_order = bool(np.all(file_ids[1:] > file_ids[:-1]))
    if in_order:
        ids, position = file_ids, None
    else:
        order = np.argsort(file_ids, kind="stable")
        ids = file_ids[order]
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if len(dup):
            raise CurateError(f"{path}: id {ids[dup[0]]} appears more than once")
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        del order
    x = None
    start = 0
    first_bad, n_bad = None, 0
    # Arrow holds about three batches while it decodes: keep a batch near 16 MB whatever the dimension, and
    # read pages as needed rather than a whole row group at once (pre_buffer=False), so the memory beyond the
    # matrix does not grow with the file (400k x 256: 1.3 GB peak with the defaults, matrix + ~0.1 GB so)
    etype = artifact_schema(path).field("embedding").type
    dim = etype.list_size if pa.types.is_fixed_size_list(etype) else 0
    read_rows = max(1024, min(batch_rows, (16 << 20) // (4 * dim))) if dim else batch_rows
    for f in files:
        reader = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 22)
        for batch in reader.iter_batches(batch_size=read_rows, columns=["id", "embedding"]):
            batch_ids = file_ids[start:start + batch.num_rows]
            block = embedding_matrix(batch.column("embedding"), ids=batch_ids, name=f"{f}: embedding")
            if x is None:
                if block.shape[1] == 0:
                    raise CurateError(f"{f}: embedding vectors are empty")
                x = np.empty((n, block.shape[1]), dtype=np.float32)
            elif block.shape[1] != x.shape[1]:
                raise CurateError(f"{f}: embedding of id {batch_ids[0]} has {block.shape[1]} values, "
                                  f"earlier rows have {x.shape[1]}")
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                n_bad += int(bad.sum())
                b = int(batch_ids[bad].min())
                first_bad = b if first_bad is None else min(first_bad, b)
            if position is None:
                x[start:start + batch.num_rows] = block
            else:
                x[position[start:start + batch.num_rows]] = block
            start += batch.num_rows
    if first_bad is not None:
        raise CurateError(f"{path}: embedding of id {first_bad} holds NaN or Inf"
                          + (f" ({n_bad} such rows in all)" if n_bad > 1 else ""))
    return ids, x, meta


def read_embedding_columns(path, columns, ids):
    """Small per-row columns (n_tokens, loss, ...) of an embeddings artifact, aligned with the sorted `ids`.
    Returns {column: numpy array}; a column the artifact lacks is left out."""
    import numpy as np

    present = [c for c in columns if c in artifact_schema(path).names]
    if not present:
        return {}
    table = _read_columns(path, ["id", *present])
    e_ids = table.column("id").to_numpy()
    order = None if np.all(e_ids[1:] > e_ids[:-1]) else np.argsort(e_ids, kind="stable")
    if order is not None:
        e_ids = e_ids[order]
    if len(e_ids) == len(ids) and np.array_equal(e_ids, ids):
        take = order
    else:
        pos = np.minimum(np.searchsorted(e_ids, ids), len(e_ids) - 1)
        missing = np.flatnonzero(e_ids[pos] != ids)
        if len(missing):
            raise CurateError(f"{path}: has no row for id {ids[missing[0]]}")
        take = pos if order is None else order[pos]
    out = {}
    for c in present:
        col = table.column(c)
        values = col.to_numpy(zero_copy_only=False)  # nulls become NaN
        out[c] = values if take is None else values[take]
    return out


def _npy_bytes(array) -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def load_centroids(clusters_path):
    """The centroids saved beside a clusters artifact ([k, d] float32), read without pickle."""
    import numpy as np

    from cluster_curate.io.artifacts import sidecar_path
    p = sidecar_path(clusters_path, "centroids.npy")
    if not p.exists():
        raise CurateError(f"{clusters_path}: its centroids file {p} is missing")
    try:
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise CurateError(f"{p}: not a readable .npy array ({e})") from None


def cluster_embeddings(embeddings: str, out: str, *, k="auto", iters: int = 20, seed: int = 0, center: bool = False,
                       max_size_factor: float | None = None, sample_size: int | None = None,
                       gpus: int | None = None, batch_rows: int = 65536, groups: int | str | None = "auto",
                       group_cut: str = "row", split_mixed: bool | None = None, overwrite: bool = False,
                       force: bool = False) -> tuple[dict, list[dict]]:
    """`cluster`: read an embeddings artifact, k-means it, write the clusters artifact (+ centroids beside it).
    Returns the summary dict and the size-band table."""
    import hashlib
    import math
    import time

    import numpy as np
    import pyarrow as pa

    from cluster_curate import clustering as C
    from cluster_curate import console
    from cluster_curate.io.artifacts import (atomic_write_bytes, check_writable, make_meta, sidecar_path,
                                             write_artifact)

    t0 = time.perf_counter()
    check_writable(out, overwrite)
    if iters < 1:
        raise CurateError(f"--iters must be >= 1, got {iters}")
    if seed < 0:
        raise CurateError(f"--seed must be >= 0, got {seed}")
    if group_cut not in C.GROUP_CUTS:
        raise CurateError(f"--group-cut must be one of {', '.join(C.GROUP_CUTS)}, got {group_cut!r}")
    ngpu = C.resolve_gpus(gpus)
    ids, x, emeta = load_embedding_matrix(embeddings, force=force, batch_rows=batch_rows)
    n, d = x.shape
    if split_mixed is None:  # by default the split belongs to choosing k: a given k is kept
        split_mixed = k in (None, "auto")
    if k in (None, "auto"):
        k, k_rule = C.auto_k(n), f"auto: {C.AUTO_K_RULE}"
    else:
        k, k_rule = int(k), "given"
        if k < 1:
            raise CurateError(f"--k must be >= 1 or 'auto', got {k}")
        if k > n:
            raise CurateError(f"{embeddings}: --k {k} is larger than the number of rows ({n})")
    norm = C.normalise_features(x, center=center, chunk_rows=batch_rows)
    if norm["zero_rows"]:
        console.warn(f"{embeddings}: {norm['zero_rows']} rows have an all-zero embedding (similarity 0 to every "
                     "centroid)")
    shared_direction = C.mean_resultant_length(x, chunk_rows=batch_rows)
    if shared_direction > 0.9 and not center:
        console.warn(f"{embeddings}: the features share one dominant direction (length of the mean unit vector "
                     f"{shared_direction:.3f}; cosine similarities are all near 1): consider --center")
    size = C.training_sample_size(n, k) if sample_size is None else int(min(max(sample_size, k), n))
    device = f"{ngpu} GPU(s)" if ngpu else "cpu"
    console.info(f"k-means: {n} rows x {d} dims, k = {k}, training on {size} rows, {iters} iterations, {device}")
    res = C.cluster_features(x, k, iters=iters, seed=seed, sample_size=size, gpus=ngpu,
                             max_size_factor=max_size_factor, batch_rows=batch_rows)
    split = None
    if split_mixed:
        cut = C.group_cut_similarity(res, "pair")
        res, cuts = C.split_mixed_clusters(x, res, cut)
        split = {"rule": f"{C.SPLIT_RULE} = {cut:.4f}", "min_similarity": cut, "min_rows": C.SPLIT_MIN_ROWS,
                 "k_means": k, "cuts": cuts}
    del x
    stats = C.size_stats(res.sizes)
    if groups == "auto":
        cut = C.group_cut_similarity(res, group_cut)
        group_of = C.group_clusters(res.centroids, min_similarity=cut)
        groups_rule = f"auto ({group_cut}): {C.GROUP_CUTS[group_cut]} = {cut:.4f}"
    elif groups in (None, "none"):
        group_of, groups_rule = None, None
    else:
        group_of, groups_rule = C.group_clusters(res.centroids, n_groups=int(groups)), "given"

    centroid_bytes = _npy_bytes(res.centroids)
    centroids_file = sidecar_path(out, "centroids.npy")
    params = {
        "k": res.k, "k_rule": k_rule, "split_mixed": split, "iters": iters, "seed": seed,
        "normalisation": norm["normalisation"], "spherical": True, "dim": d, "sample_size": res.sample_size,
        "sample_rule": "given (--sample-size)" if sample_size is not None else C.SAMPLE_RULE,
        "max_size_factor": max_size_factor, "max_cluster_size": res.cap, "moved": res.moved,
        "cap_candidates": C.CAP_CANDIDATES if max_size_factor is not None else None,
        "objective": res.objective, "objective_before_cap": res.objective_uncapped,
        "objective_kind": "mean cosine similarity to the assigned centroid (higher is better)",
        "train_objective": res.train_objective, "device": device, "zero_rows": norm["zero_rows"],
        "mean_resultant_length": round(shared_direction, 6),
        "sizes": res.sizes.tolist(),
        "groups": None if group_of is None else group_of.tolist(), "groups_rule": groups_rule,
        # the file is sidecar_path(artifact, "centroids.npy"); its name is not recorded so that the same
        # inputs give the same metadata whatever the output is called
        "centroids": {"sidecar": "centroids.npy", "shape": list(res.centroids.shape), "dtype": "float32",
                      "blake2b": hashlib.blake2b(centroid_bytes, digest_size=12).hexdigest()},
    }
    meta = make_meta("clusters", params, {"embeddings": emeta.as_input(embeddings)}, emeta.dataset)
    table = pa.table({"id": pa.array(ids, pa.int64()), "cluster": pa.array(res.labels, pa.int32()),
                      "similarity": pa.array(res.similarity, pa.float32())})
    # the centroids first: an artifact never exists without them
    atomic_write_bytes(centroids_file, centroid_bytes)
    write_artifact(table, out, meta, overwrite=overwrite)

    summary = {
        "out": out,
        "rows": n,
        "dim": d,
        "k": res.k,
        "k rule": f"auto = ceil(sqrt({n}))" + (f", capped at {k}" if k < math.ceil(math.sqrt(n)) else "")
                  if k_rule != "given" else "given (--k)",
        "mixed clusters cut": (f"{split['cuts']} (k-means k = {k}; halves less similar than "
                               f"{split['min_similarity']:.4f})") if split else
                              "no (--no-split-mixed)" if k_rule != "given" else "no (a given --k is kept)",
        "normalisation": norm["normalisation"],
        "trained on": f"{res.sample_size} rows ({'all' if res.sample_size == n else f'{res.sample_size / n:.1%}'})",
        "iterations": iters,
        "seed": seed,
        "device": device,
        "objective (mean cosine)": round(res.objective, 5),
        "cluster size min / median / max": f"{stats['min']} / {stats['median']:g} / {stats['max']}",
        "max / min size": round(stats["max_over_min"], 2),
        "empty clusters": stats["empty"],
    }
    if group_of is not None:
        group_sizes = np.bincount(group_of, weights=res.sizes).astype(int)
        summary["groups"] = (f"{len(group_sizes)} groups of clusters (average linkage of the centroids; "
                             f"{groups_rule}), rows per group min / median / max {group_sizes.min()} / "
                             f"{np.median(group_sizes):g} / {group_sizes.max()}")
    if res.cap is not None:
        summary["size cap"] = f"{res.cap} rows (--max-size-factor {max_size_factor})"
        summary["moved by the cap"] = res.moved
        summary["objective before the cap"] = round(res.objective_uncapped, 5)
    summary["centroids"] = str(centroids_file)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    mean = n / res.k
    rows = []
    for (label, count), (lo, hi) in zip(stats["histogram"].items(), C.SIZE_BINS):
        in_band = (res.sizes >= lo * mean) & (res.sizes < hi * mean)
        rows.append({"size band": label, "clusters": count, "rows": int(res.sizes[in_band].sum())})
    if stats["max_over_min"] > 10:
        console.warn(f"cluster sizes are very uneven (largest / smallest = {stats['max_over_min']:.0f}): equal quotas "
                     "will take small clusters whole; consider --max-size-factor or --balance-power")
    return summary, rows


# ============================================================================================ select

def _recorded_embeddings(clusters: str, cmeta):
    """The embeddings artifact a clusters artifact was made from, when it is still there and unchanged:
    (path, meta) or (None, reason)."""
    from pathlib import Path

    from cluster_curate.io.artifacts import read_meta
    rec = (cmeta.inputs or {}).get("embeddings") or {}
    path = rec.get("path")
    if not path:
        return None, "the clusters artifact records no embeddings input"
    candidates = [Path(path)]
    if not Path(path).is_absolute():
        candidates.append(Path(clusters).parent / path)
    for cand in candidates:
        if cand.exists():
            try:
                meta = read_meta(cand)
            except CurateError as e:
                return None, str(e)
            if rec.get("fingerprint") and meta.fingerprint != rec.get("fingerprint"):
                return None, f"{cand} has changed since clustering (fingerprint {meta.fingerprint}, not {rec['fingerprint']})"
            return str(cand), meta
    return None, f"the clusters' recorded embeddings {path} is not there"


def select_from_clusters(clusters: str, out: str, *, fraction: float | None = None, budget: int | None = None,
                         per_cluster_ratio: float | None = None, balance_power: float = 0.0,
                         within: str = "random", embeddings: str | None = None, dedup: float | None = None,
                         seed: int = 0, summary_limit: int | None = 32, overwrite: bool = False,
                         force: bool = False) -> tuple[dict, list[dict]]:
    """`select`: read a clusters artifact (and the embeddings when an order, dedup or n_tokens needs them),
    choose the rows, write the selection artifact. Returns the summary dict and the per-cluster table."""
    import time

    import numpy as np
    import pyarrow as pa

    from cluster_curate import console
    from cluster_curate import selection as S
    from cluster_curate.clustering import normalise_features
    from cluster_curate.io.artifacts import check_same_dataset, check_writable, make_meta, read_meta, write_artifact

    t0 = time.perf_counter()
    mode = S.check_budget_args(fraction, budget, per_cluster_ratio)
    if within not in S.WITHIN_ORDERS:
        raise CurateError(f"--within must be one of {', '.join(S.WITHIN_ORDERS)}, got {within!r}")
    if dedup is not None and not 0 < dedup <= 1:
        raise CurateError(f"--dedup must be a cosine similarity in (0, 1], got {dedup}")
    if not 0 <= balance_power <= 1:
        raise CurateError(f"--balance-power must be between 0 and 1, got {balance_power}")
    check_writable(out, overwrite)

    cmeta = read_meta(clusters, None if force else "clusters")
    names = artifact_schema(clusters).names
    for col in ("id", "cluster"):
        if col not in names:
            raise CurateError(f"{clusters}: no '{col}' column (found {', '.join(names)})")
    if within in ("far", "near", "diverse") and "similarity" not in names:
        raise CurateError(f"{clusters}: --within {within} needs its 'similarity' column")
    cols = ["id", "cluster"] + (["similarity"] if "similarity" in names else [])
    table = _read_columns(clusters, cols)
    if table.num_rows == 0:
        raise CurateError(f"{clusters}: empty artifact (no rows)")
    for col in cols:
        if table.column(col).null_count:
            first = table.column(col).is_null().to_numpy(zero_copy_only=False).argmax()
            raise CurateError(f"{clusters}: row {first} has no '{col}'")
    ids = table.column("id").to_numpy()
    labels = table.column("cluster").to_numpy()
    sims = table.column("similarity").to_numpy() if "similarity" in cols else None
    del table
    if not np.all(ids[1:] > ids[:-1]):
        order = np.argsort(ids, kind="stable")
        ids, labels = ids[order], labels[order]
        sims = None if sims is None else sims[order]
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if len(dup):
            raise CurateError(f"{clusters}: id {ids[dup[0]]} appears more than once")
    k = int(cmeta.params.get("k") or (int(labels.max()) + 1))
    if labels.min() < 0 or labels.max() >= k:
        bad = int(np.flatnonzero((labels < 0) | (labels >= k))[0])
        raise CurateError(f"{clusters}: cluster {labels[bad]} of id {ids[bad]} is not in 0..{k - 1}")

    need_features = within == "diverse" or dedup is not None
    need_loss = within == "hard"
    emb_path, emeta, why_not = None, None, None
    if embeddings is not None:
        emeta = read_meta(embeddings, None if force else "embeddings")
        check_same_dataset({clusters: cmeta, embeddings: emeta}, force=force)
        emb_path = embeddings
    else:
        emb_path, found = _recorded_embeddings(clusters, cmeta)
        if emb_path is None:
            why_not = found
        else:
            emeta = found
            console.info(f"using the clusters' embeddings {emb_path}")
    if emb_path is None and (need_features or need_loss):
        what = "--within diverse" if within == "diverse" else "--dedup" if dedup is not None else "--within hard"
        needs = "the feature vectors" if need_features else "the `loss` column"
        raise CurateError(f"{what} needs {needs} of the embeddings artifact: pass --embeddings E ({why_not})")

    extra = {}
    if emb_path is not None:
        extra = read_embedding_columns(emb_path, ["n_tokens", "loss"], ids)
    loss = extra.get("loss")
    if need_loss:
        if loss is None:
            raise CurateError(f"{emb_path}: --within hard needs a 'loss' column, and this artifact has none")
        if np.isnan(loss).all():
            raise CurateError(f"{emb_path}: --within hard needs loss values, and its 'loss' column is all null/NaN")
    features = None
    if need_features:
        e_ids, features, _ = load_embedding_matrix(emb_path, force=force)
        if len(e_ids) != len(ids) or not np.array_equal(e_ids, ids):
            pos = np.minimum(np.searchsorted(e_ids, ids), len(e_ids) - 1)
            missing = np.flatnonzero(e_ids[pos] != ids)
            if len(missing):
                raise CurateError(f"{emb_path}: has no embedding for id {ids[missing[0]]} of {clusters}")
            features = features[pos]
        normalise_features(features, center=cmeta.params.get("normalisation") == "center+l2")

    groups = cmeta.params.get("groups")  # `cluster --groups`: quotas over groups of clusters first
    sel = S.select_rows(labels, k=k, ids=ids, similarity=sims, loss=loss, features=features, fraction=fraction,
                        budget=budget, per_cluster_ratio=per_cluster_ratio, balance_power=balance_power,
                        within=within, dedup=dedup, seed=seed,
                        groups=None if groups is None else np.asarray(groups, dtype=np.int64))
    del features
    for note in sel.notes:
        console.warn(note)

    n, chosen = len(ids), len(sel.rows)
    columns = {"id": pa.array(ids[sel.rows], pa.int64()), "cluster": pa.array(sel.cluster, pa.int32()),
               "rank_in_cluster": pa.array(sel.rank_in_cluster, pa.int32())}
    n_tokens = extra.get("n_tokens")
    if n_tokens is not None:
        picked = n_tokens[sel.rows]
        columns["n_tokens"] = pa.array(picked, from_pandas=True) if picked.dtype.kind == "f" else pa.array(picked)
    value = {"fraction": fraction, "budget": budget, "per-cluster-ratio": per_cluster_ratio}[mode]
    nonempty = int((sel.sizes > 0).sum())
    covered = int((sel.quotas > 0).sum())
    params = {
        "mode": mode, "value": value, "requested": sel.requested, "selected": chosen, "rows": n,
        "fraction_selected": chosen / n, "balance_power": balance_power if mode != "per-cluster-ratio" else None,
        "within": within, "seed": seed, "dedup": dedup, "dedup_dropped": sel.dedup_dropped, "k": k,
        "cluster_sizes": sel.sizes.tolist(), "quotas": sel.quotas.tolist(),
        "available_sizes": sel.available.tolist() if dedup is not None else None,
        "quotas_over_groups": groups is not None and mode != "per-cluster-ratio",
        "clusters_covered": covered, "notes": sel.notes,
    }
    inputs = {"clusters": cmeta.as_input(clusters)}
    if emeta is not None:
        inputs["embeddings"] = emeta.as_input(emb_path)
    meta = make_meta("selection", params, inputs, cmeta.dataset)
    write_artifact(pa.table(columns), out, meta, overwrite=overwrite)

    q = sel.quotas[sel.sizes > 0]
    summary = {
        "out": out,
        "rows": n,
        "clusters": k,
        "budget": f"--{mode} {value}" + (f" = {sel.requested} rows" if mode == "fraction" else ""),
        "selected": chosen,
        "fraction of the data": round(chosen / n, 4),
        "clusters covered": f"{covered} / {nonempty} ({covered / max(nonempty, 1):.1%})",
        "per-cluster quota min / median / max": f"{int(q.min())} / {float(np.median(q)):g} / {int(q.max())}",
        "within": within,
    }
    if mode == "per-cluster-ratio":
        m = int(sel.available[sel.available > 0].min())
        summary["rule"] = (f"floor({per_cluster_ratio} x smallest cluster {m}) = {int(q.max())} rows per cluster: "
                           f"{chosen / n:.1%} of the data (below {per_cluster_ratio:g}: clusters are larger than "
                           "the smallest)")
    else:
        summary["balance power"] = balance_power
        if groups is not None:
            summary["quotas"] = f"over {max(groups) + 1} groups of clusters first, then the clusters inside each"
    if dedup is not None:
        summary["near-duplicates dropped"] = f"{sel.dedup_dropped} (cosine > {dedup})"
    summary["n_tokens column"] = "yes" if n_tokens is not None else f"no ({why_not or 'embeddings have no n_tokens'})"
    for i, note in enumerate(sel.notes):
        summary[f"note {i + 1}" if len(sel.notes) > 1 else "note"] = note
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    return summary, S.selection_summary_rows(sel, limit=summary_limit)


# ============================================================================================ shard

SHARD_COLUMNS = ("cluster", "step", "weight", "wrapped")  # added to every source row of a shard
SHARD_MANIFEST = "manifest.json"
SHARD_LEFTOVER = "leftover_ids.txt"


def shard_file_name(index: int, num_shards: int) -> str:
    """DESIGN.md: DIR/shard-00000-of-00004.parquet (5-digit indices)."""
    return f"shard-{index:05d}-of-{num_shards:05d}.parquet"


def _selection_cluster_sizes(meta, clusters_labels, force: bool):
    """n_c per selected cluster label in the full data: the selection's `cluster_sizes` parameter, else counted
    from the clusters artifact it was made from. None when neither is available."""
    import numpy as np

    from cluster_curate.io.artifacts import read_artifact
    sizes = meta.params.get("cluster_sizes")
    if sizes is not None:
        if isinstance(sizes, dict):
            lookup = {int(k): int(v) for k, v in sizes.items()}
        else:
            lookup = {i: int(v) for i, v in enumerate(sizes)}
        missing = [int(c) for c in clusters_labels if int(c) not in lookup]
        if missing:
            from cluster_curate.errors import CurateError
            raise CurateError(f"selection: params.cluster_sizes has no size for cluster {missing[0]}")
        return np.array([lookup[int(c)] for c in clusters_labels], dtype=np.int64), "selection params"
    src = (meta.inputs or {}).get("clusters", {}).get("path")
    if src:
        from pathlib import Path
        if Path(src).exists():
            table, _ = read_artifact(src, kind=None if force else "clusters", columns=["cluster"])
            labels, counts = np.unique(table.column("cluster").to_numpy(), return_counts=True)
            lookup = dict(zip(labels.tolist(), counts.tolist()))
            return np.array([lookup.get(int(c), 0) for c in clusters_labels], dtype=np.int64), f"clusters artifact {src}"
    return None, None


def _embeddings_tokens(path, ids, force: bool):
    """n_tokens per selected id (ids sorted) from an embeddings artifact (None when it has no such column)."""
    import numpy as np

    from cluster_curate.io.artifacts import read_meta
    meta = read_meta(path, None if force else "embeddings")
    tokens = read_embedding_columns(path, ["n_tokens"], ids).get("n_tokens")
    if tokens is None:
        return None, meta
    if tokens.dtype.kind == "f" and np.isnan(tokens).any():
        raise CurateError(f"{path}: n_tokens is null for id {int(ids[np.isnan(tokens)][0])}")
    return tokens.astype(np.int64), meta


def _count_tokens_pass(ds, ids, tokenizer_path, batch_rows):
    """Tokens per selected id by reading the data once: with a tokenizer, prompt (chat template when it has
    one) + response tokens; without, whitespace-separated words of prompt and response."""
    import numpy as np

    from cluster_curate import console
    from cluster_curate.features.text import word_counts
    tok = _load_tokenizer(tokenizer_path) if tokenizer_path else None
    where = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    where[ids] = np.arange(ids.shape[0])
    counts = np.full(ids.shape[0], -1, dtype=np.int64)
    with console.progress("shard: count tokens", total=ds.rows) as bar:
        for batch in ds.iter_batches(batch_rows):
            chosen = [e for e in batch.examples if e.id < where.shape[0] and where[e.id] >= 0]
            if chosen:
                if tok is not None:
                    p, r = _token_counts(tok, chosen)
                    n = [a + b for a, b in zip(p, r)]
                else:
                    n = [word_counts(e)[0] for e in chosen]  # the same words a text-only embed counts
                counts[where[[e.id for e in chosen]]] = n
            bar.advance(batch.raw.num_rows)
    return counts


def shard_selection(selection: str, data: str, out: str, num_shards: int, micro_batch_size: int = 1, *,
                    read_options=None, allocation: str = "stratified", balance: str = "tokens",
                    remainder: str = "drop", weights: str = "cluster", length_window: int | None = None,
                    seed: int = 0, tokenizer: str | None = None, embeddings: str | None = None,
                    overwrite: bool = False, force: bool = False, batch_rows: int = 4096,
                    chunk_bytes: int = 64 << 20, buffer_bytes: int = 128 << 20) -> dict:
    """`shard`: plan the allocation on ids and small columns, then stream the raw data once and write
    N Parquet shards in planned order (bounded memory: cluster_curate/io/shard_writer.py), plus
    manifest.json and leftover_ids.txt. Returns the manifest."""
    import json
    import os
    import shutil
    import tempfile
    import time
    from pathlib import Path

    import numpy as np
    import pyarrow as pa

    from cluster_curate import __version__, console, sharding
    from cluster_curate.io.artifacts import (META_KEY, atomic_write_bytes, check_dataset_matches, make_meta,
                                             read_artifact, read_meta)
    from cluster_curate.io.datasets import ReadOptions, open_dataset
    from cluster_curate.io.shard_writer import ShardWriter

    t0 = time.monotonic()
    out_dir = Path(out)
    if out_dir.exists() and not overwrite:
        raise CurateError(f"{out_dir}: already exists (pass --overwrite to replace it)")
    if weights not in ("cluster", "none"):
        raise CurateError(f"--weights must be 'cluster' or 'none' (got {weights!r})")

    # ---- the plan, on ids and small columns only
    sel_meta = read_meta(selection, None if force else "selection")
    table, _ = read_artifact(selection)
    for col in ("id", "cluster"):
        if col not in table.column_names:
            raise CurateError(f"{selection}: no '{col}' column (is it a selection artifact?)")
        if table.column(col).null_count:
            raise CurateError(f"{selection}: column '{col}' has null values")
    ids = table.column("id").to_numpy().astype(np.int64)
    clusters = table.column("cluster").to_numpy().astype(np.int64)
    if ids.size == 0:
        raise CurateError(f"{selection}: the selection is empty")
    if ids.min() < 0:
        raise CurateError(f"{selection}: negative id {int(ids.min())}")
    uniq, first = np.unique(ids, return_index=True)
    if uniq.size != ids.size:
        dup = np.setdiff1d(np.arange(ids.size), first)[0]
        raise CurateError(f"{selection}: id {int(ids[dup])} is selected twice (row {int(dup)})")
    # a canonical row order, so the plan does not depend on how the selection file happens to be sorted
    order = np.argsort(ids)
    ids, clusters = ids[order], clusters[order]

    ds = open_dataset(data, read_options or ReadOptions())
    dataset = ds.record()
    check_dataset_matches(sel_meta, selection, dataset, force)
    inputs = {"selection": sel_meta.as_input(selection), "data": dataset}

    # token counts: an explicit --tokenizer or --embeddings first, then the selection's n_tokens, then the
    # embeddings of its lineage, then whitespace words (said in the manifest)
    tokens, token_source = None, None
    if not tokenizer and not embeddings and "n_tokens" in table.column_names and table.column("n_tokens").null_count == 0:
        tokens, token_source = table.column("n_tokens").to_numpy().astype(np.int64)[order], "selection n_tokens"
    if tokens is None and not tokenizer:
        candidates = [embeddings] if embeddings else []
        if not embeddings:  # the embeddings this selection descends from, when still where they were
            cl_path = (sel_meta.inputs or {}).get("clusters", {}).get("path")
            emb_path = (sel_meta.inputs or {}).get("embeddings", {}).get("path")
            if not emb_path and cl_path and Path(cl_path).exists():
                emb_path = (read_meta(cl_path).inputs or {}).get("embeddings", {}).get("path")
            if emb_path and not Path(emb_path).exists() and (Path(selection).parent / emb_path).exists():
                emb_path = str(Path(selection).parent / emb_path)
            candidates += [emb_path] if emb_path and Path(emb_path).exists() else []
        for cand in candidates:
            tokens, emb_meta = _embeddings_tokens(cand, ids, force)
            if tokens is not None:
                token_source = f"embeddings n_tokens ({cand})"
                inputs["embeddings"] = emb_meta.as_input(cand)
                break
            if cand == embeddings:
                raise CurateError(f"{cand}: no 'n_tokens' column")
    if tokens is None:
        tokens = _count_tokens_pass(ds, ids, tokenizer, batch_rows)
        missing = np.flatnonzero(tokens < 0)
        if missing.size:
            raise CurateError(f"{data}: selected id {int(ids[missing[0]])} is not a readable example of this dataset "
                              f"({missing.size} selected ids missing; was the selection made from {data}?)")
        token_source = f"tokenizer {tokenizer}" if tokenizer else "whitespace words (no n_tokens, embeddings or --tokenizer)"
        if not tokenizer:
            console.warn("no token counts in the selection or its embeddings and no --tokenizer: balancing on "
                         "whitespace-separated words (recorded in the manifest as token_source)")

    t_plan = time.monotonic()
    plan = sharding.plan_steps(clusters, tokens, num_shards, micro_batch_size, allocation=allocation,
                               balance=balance, remainder=remainder, length_window=length_window, seed=seed)
    labels, s_c = np.unique(clusters, return_counts=True)
    n_c, sizes_source = _selection_cluster_sizes(sel_meta, labels, force)
    if weights == "none":
        w_c = np.ones(labels.shape[0])
    else:
        if n_c is None:
            raise CurateError(f"{selection}: cannot compute loss weights: no params.cluster_sizes and its clusters "
                              "artifact is not reachable (pass --weights none to train unweighted)")
        w_c = sharding.loss_weights(n_c, s_c)
    cl_index = np.searchsorted(labels, clusters)
    row_weight = w_c[cl_index]
    figures = sharding.balance_figures(plan, tokens, clusters)

    # ---- where each selected id goes: (shard, position); repeats (--remainder wrap) listed apart
    t_count, n, m = plan.rows.shape
    cell_shard = np.broadcast_to(np.arange(n)[None, :, None], plan.rows.shape).reshape(-1)
    cell_pos = (np.arange(t_count)[:, None, None] * m + np.arange(m)[None, None, :]).repeat(n, 1).reshape(-1)
    cell_row = plan.rows.reshape(-1)
    cell_wrapped = plan.wrapped.reshape(-1)
    lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)   # id -> its (first) cell
    lookup[ids[cell_row[~cell_wrapped]]] = np.flatnonzero(~cell_wrapped)
    repeats: dict[int, list[int]] = {}
    for cell in np.flatnonzero(cell_wrapped):
        repeats.setdefault(int(ids[cell_row[cell]]), []).append(int(cell))
    repeat_ids = np.array(sorted(repeats), dtype=np.int64)

    # ---- stream the raw data once, writing rows into per-shard buckets
    t_stream = time.monotonic()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        writer = ShardWriter(work / "spill", n, plan.rows_per_shard, chunk_bytes=chunk_bytes, buffer_bytes=buffer_bytes)
        renamed: dict[str, str] = {}
        source_columns: dict[str, None] = {}
        found = np.zeros(ids.shape[0], dtype=bool)
        with console.progress("shard: write", total=ds.rows) as bar:
            # raw rows only: the selected ids were validated when embedded, and the fingerprint ties them to DATA
            for batch in ds.iter_batches(batch_rows, examples=False):
                raw = batch.raw
                bar.advance(raw.num_rows)
                bid = raw.column("id").to_numpy().astype(np.int64)
                inside = bid < lookup.shape[0]
                cells = np.full(bid.shape[0], -1, dtype=np.int64)
                cells[inside] = lookup[bid[inside]]
                take = np.flatnonzero(cells >= 0)
                extra_take, extra_cells = [], []
                if repeats:
                    for i in np.flatnonzero(np.isin(bid, repeat_ids)):
                        for cell in repeats[int(bid[i])]:
                            extra_take.append(int(i))
                            extra_cells.append(cell)
                if take.size == 0 and not extra_take:
                    continue
                take = np.concatenate([take, np.array(extra_take, dtype=np.int64)])
                cells = np.concatenate([cells[take[: take.size - len(extra_take)]], np.array(extra_cells, dtype=np.int64)])
                rows = pa.Table.from_batches([raw]).take(pa.array(take))
                for name in rows.column_names:
                    if name in SHARD_COLUMNS:
                        renamed[name] = f"source_{name}"
                if renamed:
                    rows = rows.rename_columns([renamed.get(c, c) for c in rows.column_names])
                source_columns.update(dict.fromkeys(rows.column_names))
                sel_row = cell_row[cells]
                rows = rows.append_column("cluster", pa.array(clusters[sel_row], pa.int64()))
                rows = rows.append_column("step", pa.array(cell_pos[cells] // m, pa.int64()))
                rows = rows.append_column("weight", pa.array(row_weight[sel_row], pa.float64()))
                rows = rows.append_column("wrapped", pa.array(cell_wrapped[cells], pa.bool_()))
                writer.add(rows, cell_shard[cells], cell_pos[cells])
                found[sel_row] = True
        planned = np.unique(cell_row)
        missing = planned[~found[planned]]
        if missing.size:
            raise CurateError(f"{data}: selected id {int(ids[missing[0]])} is not in this dataset ({missing.size} "
                              f"selected ids missing; was the selection made from {data}?)")

        params = {"num_shards": n, "micro_batch_size": m, "allocation": allocation,
                  "balance": balance if allocation == "stratified" else None,
                  "length_window": (length_window if length_window is not None
                                    else sharding.DEFAULT_LENGTH_WINDOW.get(balance)) if allocation == "stratified" else None,
                  "remainder": remainder, "weights": weights, "seed": seed, "token_source": token_source}
        meta = make_meta("shard", params, inputs, sel_meta.dataset or dataset)
        meta.rows = plan.rows_per_shard
        file_meta = {META_KEY: meta.to_json().encode()}
        names = [shard_file_name(r, n) for r in range(n)]
        columns = ["id"] + [c for c in source_columns if c not in ("id",) + SHARD_COLUMNS] + list(SHARD_COLUMNS)
        t_assemble = time.monotonic()
        writer.finish([work / name for name in names], columns, file_meta)
        t_done = time.monotonic()
        shutil.rmtree(work / "spill", ignore_errors=True)

        leftover_ids = np.sort(ids[plan.leftover]).tolist()
        atomic_write_bytes(work / SHARD_LEFTOVER, "".join(f"{i}\n" for i in leftover_ids).encode())
        import hashlib
        files = []
        for name in names:
            h = hashlib.sha256((work / name).read_bytes()).hexdigest()
            files.append({"file": name, "rows": plan.rows_per_shard, "sha256": h})
        manifest = {
            "kind": "shard-manifest",
            "version": __version__,
            "fingerprint": meta.fingerprint,
            "params": params,
            "inputs": inputs,
            "dataset": meta.dataset,
            "num_shards": n,
            "micro_batch_size": m,
            "rows_per_shard": plan.rows_per_shard,
            "steps": plan.steps,
            "global_batch_rows": n * m,
            "selected_rows": int(ids.size),
            "sharded_rows": int(plan.rows.size),
            "wrapped_rows": int(plan.wrapped.sum()),
            "leftover_rows": len(leftover_ids),
            "leftover_ids": leftover_ids,
            "leftover_file": SHARD_LEFTOVER,
            "renamed_source_columns": renamed,
            "columns": columns,
            "files": files,
            "clusters": [{"cluster": int(c), "selected": int(s), "in_data": None if n_c is None else int(nc),
                          "weight": float(w)} for c, s, nc, w in
                         zip(labels, s_c, n_c if n_c is not None else [None] * len(labels), w_c)],
            "cluster_sizes_source": sizes_source,
            "tokens": {"source": token_source, "total": int(tokens.sum()), "mean": float(tokens.mean())},
            "balance": figures,
        }
        atomic_write_bytes(work / SHARD_MANIFEST, (json.dumps(manifest, indent=2, default=json_default) + "\n").encode())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(work, 0o777 & ~umask)  # mkdtemp/mkstemp make private files; shards are for the whole job
        for f in (SHARD_MANIFEST, SHARD_LEFTOVER):
            os.chmod(work / f, 0o666 & ~umask)
        # swap the finished directory into place (an existing one only goes once the new one is complete)
        if out_dir.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
            os.replace(out_dir, trash / "old")
            os.replace(work, out_dir)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest["seconds"] = round(time.monotonic() - t0, 3)  # not in manifest.json, which is deterministic
    manifest["seconds_by_phase"] = {"inputs_and_tokens": round(t_plan - t0, 3), "plan": round(t_stream - t_plan, 3),
                                    "stream_data": round(t_assemble - t_stream, 3),
                                    "assemble_shards": round(t_done - t_assemble, 3)}
    return manifest


# ============================================================================================ run

RUN_OUTPUTS = {"embed": "embeddings.parquet", "cluster": "clusters.parquet", "select": "selection.parquet",
               "shard": "shards"}
RUN_STATE = "run-state.json"


def output_fingerprint(stage: str, path) -> str | None:
    """Fingerprint of a stage's finished output, or None when it is missing or incomplete."""
    from pathlib import Path

    from cluster_curate.io.artifacts import read_meta

    p = Path(path)
    try:
        if stage == "shard":
            from cluster_curate.loader import read_manifest
            return read_manifest(p).get("fingerprint") if p.is_dir() else None
        return read_meta(p).fingerprint if p.exists() else None
    except CurateError:
        return None


class RunState:
    """What `run` did last time in DIR: per stage, a hash of (options, input fingerprint) and the output's
    fingerprint. A stage is up to date when both still match, so a re-run (or a run after a crash) only
    redoes the stages whose inputs, parameters or outputs changed."""

    def __init__(self, directory):
        import json
        from pathlib import Path

        self.path = Path(directory) / RUN_STATE
        self.stages = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def request(self, stage: str, options: dict, input_fingerprint: str) -> str:
        from cluster_curate.io.artifacts import stable_hash
        return stable_hash({"stage": stage, "options": options, "input": input_fingerprint})

    def is_current(self, stage: str, request: str, output) -> bool:
        rec = self.stages.get(stage)
        return bool(rec and rec["request"] == request and rec["fingerprint"] == output_fingerprint(stage, output))

    def record(self, stage: str, request: str, output) -> None:
        import json

        from cluster_curate.io.artifacts import atomic_write_bytes
        self.stages[stage] = {"request": request, "fingerprint": output_fingerprint(stage, output)}
        atomic_write_bytes(self.path, json.dumps(self.stages, indent=1, sort_keys=True).encode())
