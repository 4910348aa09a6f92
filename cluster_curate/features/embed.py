"""Embedding orchestration, as functions of examples and models (no files, no ranks, no CLI).

* `parse_features` / `parse_weights`: the `--features` list and `--feature-weights`.
* `plan_batches`: token-budget batches from length-sorted buckets (`--batch-tokens`).
* `Embedder.embed(examples)`: the feature rows of a list of examples (one chunk of the dataset), in the order
  given, plus the examples that keep no response token (reported, never embedded as zeros).

Feature blocks: every entry of `--features` is one block: `gradient`, `lora-gradient`, `hidden` and
`loss-trajectory` come from a model (features/extractors.py), `semantic` from an encoder of its own
(features/semantic.py), `text` needs none (features/text.py). With one
block the embedding is that block as computed. With several, each block is L2-normalised row by row and
multiplied by its weight (`--feature-weights`, default 1 each) before concatenation, so a block's share of a
cosine similarity is weight² / Σ weight² whatever its dimension or scale.

Batching changes a row only at float32 rounding: each block is a pure function of the example (right padding +
attention mask; the text basis is fitted beforehand), so the result is the same whatever the batch size,
`--batch-tokens` or the number of processes, but for the rounding of a padded batch's reductions (README, "embed")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cluster_curate.errors import CurateError
from cluster_curate.registry import Registry, lazy

# The default of `--features`, chosen by the evidence harness (benchmarks/results/quality.md): on the
# skill-mixture benchmark prompt TF-IDF clusters cover the rare skills better than the paper's gradient
# feature, and it costs seconds instead of a model pass. `--features gradient` reproduces the paper.
DEFAULT_FEATURES = "text"
DEFAULT_TEXT_DIM = 256
# The version of the embed stage's algorithms (every feature kind, the text basis, the proxy): part of every artifact's fingerprint and of `run`'s up-to-date check.
# Bump it when the same inputs and options give a different output (docs/architecture.md, "Lineage").
# 2: tool-calling chats read (calls, tool turns, `tools` schemas); ShareGPT's `system` column. 3: xLAM rows read as
# their calls (`--prompt-field query --response-field answers` read the answers' JSON text as written); calls and
# tool schemas kept as Parquet / Hugging Face structs lose the null keys Arrow gave them from other rows; a pair's
# explicit `prompt` turns may end with a tool's result (a bad row before). 4: alpaca's input is dolly-15k's `context`
# column where there is no `input`, and a `system_prompt` column (Open-Orca) is the system turn: both were dropped; a
# pair's rejected answer counts in n_tokens with its chat template's end-of-turn tokens, as the chosen one does
# (models.answer_token_counts). 5: a chosen answer's tokens (loss, model features, n_tokens) keep what the chat
# template puts after its end-of-turn token (a newline), as TRL trains on it and counts the rejected answer. 6:
# OpenHermes-2.5's `system_prompt` column beside ShareGPT `conversations` is the system turn (it was dropped). 7:
# the text basis's last step by the QR of its [rows, k + 10] product (features/text._randomized_svd_basis): the
# same basis to 1e-12, a few of its float32 values at the last bit. 8: NaN in a text field is a missing value (it
# was the text "nan"), a label column's text ("1", "true", a CSV's) names the chosen answer (a bad row before), and
# a causal LM's n_tokens / n_response_tokens count a row longer than --max-length whole (they were its cut length).
# 9: a model without a chat template counts n_tokens as --tokenizer does (models.row_token_counts: the text and EOS;
# it counted the BOS and the `### User:` scaffold its features read). Only embeddings that read a causal LM record 9
# (algorithm_version): those of text and semantic alone, and the fitted text basis and proxy, are made as 8 made
# them (FEATURES_VERSION), so an upgrade does not embed them again
ALGORITHM_VERSION = 9
FEATURES_VERSION = 8
# What `cluster --kinds` and `select --within answers` need of each embedded row's response (answer_kinds.
# answer_key, its words), computed in the feature pass so that they need not read the raw data again. Not a
# version bump: the features are the same, and embeddings written without these columns stay valid (those
# commands read the data instead), so an upgrade re-embeds nothing. `--resume` keeps them apart (embed_parts).
ANSWER_COLUMNS = ("answer_key", "response_words")
# The question each row asks (exact_dedup.prompt_keys), kept likewise: `select --decontaminate` (and --target's
# check) finds the rows that ask an evaluation set's question without reading the data (embeddings without it:
# it reads the data).
PROMPT_KEY_COLUMN = "prompt_key"  # what prompt_keys hashes changes its meaning: then rename the column (older
# embeddings then lack it, and select reads the data), since the embed version does not cover it
# And each user turn's, for a row whose prompt holds more than that turn (exact_dedup.user_turn_keys: a list, null
# for the other rows), so that a chat that goes on from an evaluation question is found too. Embeddings written
# before it: select reads the data, as without prompt_key (a column added, as above: no version bump).
PROMPT_TURN_KEYS_COLUMN = "prompt_turn_keys"
KEPT_COLUMNS = (*ANSWER_COLUMNS, PROMPT_KEY_COLUMN, PROMPT_TURN_KEYS_COLUMN)

# Feature kinds (docs/architecture.md, "Extension points"). `uses_model`: computed from the model's forward
# (and backward) pass by features/extractors.extract(kind); otherwise `prepare()` gives a function
# (context) -> featurizer (commands/embed_parts.PrepareContext: options, a seeded sample, state shared by every
# process) whose `transform_examples(examples)` gives the block; with `encoder=True` the featurizer runs a
# model of its own and its `rows(examples, batch_tokens, on_batch)` gives the block with its own token counts
# (features/semantic.SemanticRows), used when no causal-LM feature counts them. `dim(d)`: the block's width
# from d = {"dim", "hidden_size", "n_checkpoints", "text_dim", "lora_dim", "semantic_dim"}. Add one: its code
# + a line here.
FEATURE_KINDS = Registry("--features")
FEATURE_KINDS.register("gradient", "the paper's: mean over response positions of (p(gold) - 1) * h_t (h_t: "
                       "the last hidden state), the response loss's gradient w.r.t. the output-layer rows of the gold "
                       "tokens (random projection to --dim)", uses_model=True,
                       dim=lambda d: d["dim"] or d["hidden_size"])
FEATURE_KINDS.register("lora-gradient", "gradient of LoRA adapters on the linear layers (--layers)",
                       uses_model=True, dim=lambda d: d["dim"] or d["lora_dim"])
FEATURE_KINDS.register("hidden", "mean hidden state (--pool)", uses_model=True,
                       dim=lambda d: d["dim"] or d["hidden_size"])
FEATURE_KINDS.register("loss-trajectory", "the loss at each warm-up checkpoint (--checkpoints)", uses_model=True,
                       dim=lambda d: d["n_checkpoints"])
FEATURE_KINDS.register("text", "word 1-2-grams of --text-field weighted as --text-weighting says + randomized "
                       "SVD (no model)", uses_model=False,
                       dim=lambda d: d["text_dim"] or d["dim"] or DEFAULT_TEXT_DIM,
                       prepare=lazy("cluster_curate.features.text", "prepare_text"))
FEATURE_KINDS.register("semantic", "sentence embedding of --text-field by an encoder (--encoder; default the "
                       "bundled all-MiniLM-L6-v2), pooled as its config says, L2-normalised", uses_model=False,
                       dim=lambda d: d["semantic_dim"],
                       prepare=lazy("cluster_curate.features.semantic", "prepare_semantic"), encoder=True)
MODEL_FEATURES = tuple(e.name for e in FEATURE_KINDS if e.uses_model)


def algorithm_version(features) -> int:
    """The version embeddings of `features` record: ALGORITHM_VERSION where one reads a causal LM, else
    FEATURES_VERSION (what changed since touched those alone)."""
    return ALGORITHM_VERSION if set(features) & set(MODEL_FEATURES) else FEATURES_VERSION
ALL_FEATURES = FEATURE_KINDS.names
DEFAULT_BATCH_TOKENS = 16384
DEFAULT_MAX_LENGTH = 1024


def parse_features(spec: str | list[str] | None) -> list[str]:
    """'text,gradient' -> ['text', 'gradient']; unknown or repeated names are a CurateError."""
    if spec is None:
        spec = DEFAULT_FEATURES
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s and s.strip()]
    if not names:
        raise CurateError("--features: empty list")
    for n in names:
        if n not in ALL_FEATURES:
            raise CurateError(f"--features: unknown feature {n!r} (choose from {', '.join(ALL_FEATURES)})")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CurateError(f"--features: {', '.join(dup)} listed twice")
    return names


def parse_weights(spec: str | list[float] | None, n_blocks: int) -> list[float]:
    if spec is None or spec == "":
        return [1.0] * n_blocks
    try:
        weights = [float(s) for s in (spec.split(",") if isinstance(spec, str) else spec)]
    except ValueError:
        raise CurateError(f"--feature-weights {spec!r}: expected comma-separated numbers") from None
    if len(weights) != n_blocks:
        raise CurateError(f"--feature-weights: {len(weights)} weight(s) for {n_blocks} feature block(s)")
    if any(not np.isfinite(w) or w < 0 for w in weights) or not any(w > 0 for w in weights):
        raise CurateError(f"--feature-weights {spec!r}: weights must be finite, >= 0, and not all 0")
    return weights


def plan_batches(lengths, batch_tokens: int, max_rows: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of at most `batch_tokens` padded tokens (rows × longest row), taken
    from the lengths sorted ascending (ties by index), so rows of similar length share a batch and little
    is padding. A row longer than the budget gets a batch of its own. Deterministic."""
    if batch_tokens <= 0:
        raise CurateError(f"--batch-tokens must be positive, got {batch_tokens}")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order.tolist():
        width = int(lengths[i])  # ascending: the newest row is the longest
        if current and (width * (len(current) + 1) > batch_tokens or (max_rows and len(current) >= max_rows)):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def block_dims(features: list[str], *, hidden_size: int | None = None, dim: int | None = None,
               n_checkpoints: int = 0, text_dim: int | None = None, lora_dim: int | None = None,
               semantic_dim: int | None = None) -> dict[str, int]:
    """Output width of each feature block: gradient/hidden = `dim` or the hidden size; lora-gradient = `dim`
    or the extractor's default; loss-trajectory = one column per checkpoint; text = its SVD width; semantic =
    the encoder's hidden size."""
    d = {"dim": dim, "hidden_size": hidden_size, "n_checkpoints": n_checkpoints, "text_dim": text_dim,
         "lora_dim": lora_dim, "semantic_dim": semantic_dim}
    return {kind: int(FEATURE_KINDS.get(kind).dim(d)) for kind in features}


def dim_above_hidden(features: list[str], dim: int | None, hidden_size: int | None) -> str | None:
    """The warning of a --dim above the model's hidden size for gradient / hidden (as text's above what its sample
    holds): their projected rows still span only hidden-size directions. None where it is not."""
    widened = [kind for kind in features if kind in ("gradient", "hidden")]
    if widened and dim and hidden_size and dim > hidden_size:
        return (f"--dim {dim}: the {' and '.join(widened)} vectors have the model's hidden size, {hidden_size}; "
                f"projected to {dim} dims they span only {hidden_size} directions (give at most --dim {hidden_size}, "
                "or leave it out)")
    return None


def combine_blocks(blocks: list[np.ndarray], weights: list[float] | None = None) -> np.ndarray:
    """One block: as is. Several: row-wise L2-normalised, scaled by the weights, concatenated (float32).
    An all-zero row of a block stays zero (no division by zero)."""
    if len(blocks) == 1:
        return np.ascontiguousarray(blocks[0], dtype=np.float32)
    weights = weights or [1.0] * len(blocks)
    out = []
    for block, w in zip(blocks, weights):
        b = np.asarray(block, dtype=np.float64)
        norms = np.linalg.norm(b, axis=1, keepdims=True)
        out.append((b / np.where(norms > 0, norms, 1.0) * w).astype(np.float32))
    return np.ascontiguousarray(np.concatenate(out, axis=1))


@dataclass
class ChunkResult:
    """Rows of one chunk, in the order of the examples given (those embedded)."""
    ids: np.ndarray  # int64 [n]
    embedding: np.ndarray  # float32 [n, D]
    n_tokens: np.ndarray  # int64 [n]
    n_response_tokens: np.ndarray  # int64 [n]
    loss: np.ndarray  # float32 [n]; NaN when no model is used
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (id, reason): no response token
    tokens: int = 0  # real (unpadded) tokens processed
    truncated: int = 0  # rows whose text an encoder feature cut to its max length
    truncated_ids: list = field(default_factory=list)  # their ids
    model_cut: int = 0  # rows cut to --max-length for the causal LM's features (n_tokens counts them whole)
    answer_key: np.ndarray | None = None  # int64 [n]: answer_kinds.answer_key of each row's response
    response_words: np.ndarray | None = None  # int64 [n]: whitespace words of each row's response
    prompt_key: np.ndarray | None = None  # int64 [n]: exact_dedup.prompt_keys of each row's prompt
    prompt_turn_keys: list | None = None  # [n]: exact_dedup.user_turn_keys of each row's prompt (None: one turn)


@dataclass
class Embedder:
    """Computes the feature blocks of examples.

    fm: the FeatureModel (None when only `text` is asked for). trajectory: FeatureModels whose losses make
    the `loss-trajectory` block (one column each; they read fm's token ids, so they share its tokenizer:
    commands/embed_parts._trajectory refuses others). featurizers: per kind that
    uses no model (`text`), its fitted featurizer (transform_examples; `semantic`: its encoder, rows).
    projectors: per model block, what `extract` gets as projector."""

    features: list[str]
    fm: object = None
    featurizers: dict = field(default_factory=dict)
    trajectory: list = field(default_factory=list)
    projectors: dict = field(default_factory=dict)
    weights: list[float] | None = None
    pool: str = "all"
    layers: str | None = None
    max_length: int | None = DEFAULT_MAX_LENGTH
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    dims: dict = field(default_factory=dict)  # block -> output width (block_dims); checked by `embed`

    def __post_init__(self):
        if any(f in MODEL_FEATURES for f in self.features) and self.fm is None:
            raise ValueError("model features need a FeatureModel")
        for kind in self.features:
            if not FEATURE_KINDS.get(kind).uses_model and kind not in self.featurizers:
                raise ValueError(f"the {kind} feature needs a fitted featurizer")
        if "loss-trajectory" in self.features and not self.trajectory:
            raise ValueError("loss-trajectory needs at least one checkpoint model")

    @property
    def uses_model(self) -> bool:
        return any(f in MODEL_FEATURES for f in self.features)

    @property
    def encoder_kinds(self) -> list[str]:
        return [f for f in self.features if getattr(FEATURE_KINDS.get(f), "encoder", False)]

    def embed(self, examples: list, on_batch=None) -> ChunkResult:
        """Feature rows of `examples`. `on_batch(rows, tokens)` is called after each model batch."""
        if self.uses_model:  # torch and the extractors only there: a text-only run never imports torch
            rows = self._model_pass(examples, on_batch)
        elif self.encoder_kinds:  # the encoder's tokenizer counts the tokens
            kept = list(examples)
            rows = _Rows(kept=kept, loss=np.full(len(kept), np.nan, dtype=np.float32))
        else:
            rows = _word_counted(examples, on_batch)
        for kind in self.encoder_kinds:
            self._add_encoder_block(rows, kind, on_batch)
        embedding = combine_blocks(self._blocks(rows), self.weights)
        ids = np.array([ex.id for ex in rows.kept], dtype=np.int64)
        from cluster_curate.answer_kinds import answer_columns
        from cluster_curate.exact_dedup import prompt_keys, user_turn_keys
        answer_key, response_words = answer_columns([ex.response for ex in rows.kept])
        prompts = [ex.prompt for ex in rows.kept]
        return ChunkResult(ids=ids, embedding=embedding, n_tokens=rows.n_tokens, n_response_tokens=rows.n_resp,
                           loss=rows.loss.astype(np.float32), skipped=list(rows.skipped), tokens=rows.tokens,
                           truncated=rows.truncated, truncated_ids=rows.truncated_ids, model_cut=rows.model_cut,
                           answer_key=answer_key, response_words=response_words, prompt_key=prompt_keys(prompts),
                           prompt_turn_keys=user_turn_keys(prompts))

    def _model_pass(self, examples: list, on_batch) -> _Rows:
        """The causal-LM blocks and the loss of `examples`, in batches of about `batch_tokens` tokens."""
        import torch

        from cluster_curate.features.models import collate, encode_examples

        encoded, skipped = encode_examples(self.fm.tokenizer, examples, self.max_length)
        kept_ids = {e.id for e in encoded}
        n = len(encoded)
        n_tokens = np.array([e.n_tokens for e in encoded], dtype=np.int64)  # as the model reads them (batches)
        whole = np.array([e.whole_tokens for e in encoded], dtype=np.int64)  # as a trainer does: not cut
        kept = [ex for ex in examples if ex.id in kept_ids]
        from cluster_curate.features.text import rejected_counts
        rejected = rejected_counts(self.fm.tokenizer, kept)  # a preference pair's row counts its rejected answer
        rows = _Rows(kept=kept, loss=np.full(n, np.nan, dtype=np.float32),
                     n_tokens=whole if rejected is None else whole + rejected,
                     n_resp=np.array([e.whole_response_tokens for e in encoded], dtype=np.int64), skipped=skipped,
                     model_cut=sum(e.truncated for e in encoded))
        parts: dict[str, list] = {f: [] for f in self.features if f in MODEL_FEATURES}
        positions: list[np.ndarray] = []
        for idx in plan_batches(n_tokens, self.batch_tokens):
            batch = collate([encoded[i] for i in idx], self.fm.pad_id, self.fm.device)
            self._extract_batch(batch, idx, parts, rows.loss)
            positions.append(np.asarray(idx, dtype=np.int64))
            batch_tokens = int(n_tokens[idx].sum())
            rows.tokens += batch_tokens
            if on_batch is not None:
                on_batch(len(idx), batch_tokens)
            del batch
        if n and self.fm.device.type == "cuda":
            torch.cuda.synchronize(self.fm.device)
        where = np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)
        for kind, chunks in parts.items():
            rows.blocks[kind] = _in_example_order(chunks, where, self.dims.get(kind, 0))
        return rows

    def _extract_batch(self, batch, idx: list[int], parts: dict[str, list], loss: np.ndarray) -> None:
        """One batch: its rows of every model block appended to `parts`, its loss written into `loss[idx]`."""
        from cluster_curate.features.extractors import extract

        for kind in parts:
            if kind == "loss-trajectory":
                cols = [extract(m, batch, "loss-trajectory")["loss"] for m in self.trajectory]
                parts[kind].append(np.stack(cols, axis=1).astype(np.float32))
                continue
            out = extract(self.fm, batch, kind, pool=self.pool, projector=self.projectors.get(kind),
                          layers=self.layers)
            parts[kind].append(out["embedding"])
            loss[idx] = out["loss"]
        if all(k == "loss-trajectory" for k in parts):  # the main model's loss is still wanted
            loss[idx] = extract(self.fm, batch, "loss-trajectory")["loss"]

    def _add_encoder_block(self, rows: _Rows, kind: str, on_batch) -> None:
        """The block of an encoder feature (`semantic`) into `rows`; a row it finds no text in is reported and
        left out of every block."""
        # with a causal-LM feature its batches advanced the rows already; the encoder adds its tokens
        report = on_batch if on_batch is None or not self.uses_model else (lambda n, t: on_batch(0, t))
        encoded = self.featurizers[kind].rows(rows.kept, self.batch_tokens, report)
        if not self.uses_model:
            rows.n_tokens, rows.n_resp, rows.tokens = encoded.n_tokens, encoded.n_response_tokens, encoded.tokens
        else:
            rows.tokens += encoded.tokens
        if encoded.skipped:
            gone = {i for i, _ in encoded.skipped}
            keep = np.array([ex.id not in gone for ex in rows.kept], dtype=bool)
            rows.kept = [ex for ex in rows.kept if ex.id not in gone]
            rows.loss = rows.loss[keep]
            if self.uses_model:
                rows.n_tokens, rows.n_resp = rows.n_tokens[keep], rows.n_resp[keep]
                rows.blocks = {k: v[keep] for k, v in rows.blocks.items()}
            rows.skipped = sorted([*rows.skipped, *encoded.skipped])
        rows.blocks[kind] = encoded.embedding
        rows.truncated += int(encoded.truncated.sum())
        rows.truncated_ids += [ex.id for ex, cut in zip(rows.kept, encoded.truncated.tolist()) if cut]

    def _blocks(self, rows: _Rows) -> list[np.ndarray]:
        """Every feature's block in `features` order (a kind without a model: its featurizer, now), each as
        wide as the first chunk's."""
        blocks = []
        for kind in self.features:
            if kind in rows.blocks:
                block = rows.blocks[kind]
            else:
                block = self.featurizers[kind].transform_examples(rows.kept)
            if kind in self.dims and block.shape[1] != self.dims[kind]:
                raise RuntimeError(f"{kind}: block of width {block.shape[1]}, expected {self.dims[kind]}")
            self.dims[kind] = int(block.shape[1])
            blocks.append(block)
        return blocks


@dataclass
class _Rows:
    """A chunk's rows while `Embedder.embed` builds them: the examples kept, their counts and loss, the blocks
    computed so far (by kind), the skipped (id, reason), the tokens processed and the rows truncated."""
    kept: list
    loss: np.ndarray
    n_tokens: np.ndarray | None = None
    n_resp: np.ndarray | None = None
    blocks: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    tokens: int = 0
    truncated: int = 0
    truncated_ids: list = field(default_factory=list)
    model_cut: int = 0  # rows longer than --max-length, cut for the causal LM's features


def _word_counted(examples: list, on_batch) -> _Rows:
    """Rows with no model and no encoder: their tokens are whitespace words."""
    from cluster_curate.features.text import word_counts

    kept = list(examples)
    counts = [word_counts(ex) for ex in kept]
    n_tokens = np.array([c[0] for c in counts], dtype=np.int64).reshape(-1)
    rows = _Rows(kept=kept, loss=np.full(len(kept), np.nan, dtype=np.float32), n_tokens=n_tokens,
                 n_resp=np.array([c[1] for c in counts], dtype=np.int64).reshape(-1), tokens=int(n_tokens.sum()))
    if on_batch is not None and kept:
        on_batch(len(kept), rows.tokens)
    return rows


def _in_example_order(chunks: list[np.ndarray], where: np.ndarray, width: int) -> np.ndarray:
    """A model block's batches, stacked back into the order of the examples (`where`: their positions)."""
    if not chunks:
        return np.zeros((0, width), dtype=np.float32)
    stacked = np.concatenate(chunks, axis=0)
    block = np.empty_like(stacked)
    block[where] = stacked
    return block



def chunk_table(result: ChunkResult):
    """The embeddings artifact's rows for a chunk (docs/architecture.md, "Artifacts"), sorted by id."""
    import pyarrow as pa

    order = np.argsort(result.ids, kind="stable")
    emb = np.ascontiguousarray(result.embedding[order], dtype=np.float32)
    dim = emb.shape[1] if emb.ndim == 2 else 0
    values = pa.array(emb.reshape(-1), type=pa.float32())
    columns = {
        "id": pa.array(result.ids[order], type=pa.int64()),
        "embedding": pa.FixedSizeListArray.from_arrays(values, dim),
        "n_tokens": pa.array(result.n_tokens[order], type=pa.int64()),
        "n_response_tokens": pa.array(result.n_response_tokens[order], type=pa.int64()),
        "loss": pa.array(result.loss[order], type=pa.float32()),
    }
    for name in KEPT_COLUMNS:
        values = getattr(result, name)
        if name == PROMPT_TURN_KEYS_COLUMN and values is not None:
            columns[name] = pa.array([values[i] for i in order], type=pa.list_(pa.int64()))
        elif values is not None:
            columns[name] = pa.array(np.asarray(values)[order], type=pa.int64())
    return pa.table(columns)


def empty_chunk_table(dim: int):
    """The embeddings artifact's columns with no row (the part of a worker that owns no chunk)."""
    none = np.empty(0, np.int64)
    return chunk_table(ChunkResult(none, np.empty((0, dim), np.float32), none, none, np.empty(0, np.float32),
                                   **{name: none for name in KEPT_COLUMNS}))


def bound_host_memory(mmap_threshold: int = 1 << 20) -> bool:
    """Keep the process's memory bounded by the batch on glibc (Linux).

    Batches of varying shapes make glibc raise its mmap threshold dynamically (up to 32 MiB), after which
    freed tensor buffers stay in the heap and fragment it: the peak RSS of a long run then grows with the
    number of batches (benchmarks/results/code_figures.md). A fixed threshold makes every buffer
    above it an mmap that is returned to the system when freed. Returns whether the setting was applied."""
    import ctypes
    import ctypes.util
    import sys
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8
        # Few arenas: the tokenizers' worker threads would otherwise each keep an arena of freed memory.
        libc.mallopt(M_ARENA_MAX, 2)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)))
    except (OSError, AttributeError):
        return False


def release_free_memory() -> None:
    """Give freed heap pages back to the system (glibc malloc_trim); a no-op elsewhere."""
    import ctypes
    import ctypes.util
    import sys
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


def sample_keys(ids, seed: int) -> np.ndarray:
    """A seeded pseudo-random uint64 key per id (splitmix64): a row is in a seeded sample when its key is
    among the smallest. The same row gets the same key in every process, whatever the batching."""
    x = (np.asarray(ids, dtype=np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) % (1 << 64)))
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x


class BottomK:
    """Keeps the k items with the smallest keys seen in a stream (a seeded uniform sample of size k),
    in memory proportional to k. `items()` returns them in id order."""

    def __init__(self, k: int):
        import heapq
        self.k, self._heap, self._push = k, [], heapq
        self.seen = 0

    def add(self, key: int, item_id: int, item) -> None:
        self.seen += 1
        if self.k <= 0:
            return
        entry = (-int(key), -int(item_id), item)  # max-heap on (key, id) via negation
        if len(self._heap) < self.k:
            self._push.heappush(self._heap, entry)
        elif entry[:2] > self._heap[0][:2]:
            self._push.heapreplace(self._heap, entry)

    def smallest(self, n: int) -> list:
        """The n smallest-key items (n <= k), in id order."""
        best = sorted(self._heap, key=lambda e: (-e[0], -e[1]))[:n]
        return [e[2] for e in sorted(best, key=lambda e: -e[1])]
