r"""Feature models: loading a causal LM (local directory, Hugging Face id, GGUF file, or the built-in proxy),
and turning examples into token ids with a known response span.

A `FeatureModel` is everything an extractor needs and nothing more: the module (for hooks), the tokenizer,
device and dtype, `hidden_fn` (the last-layer hidden states that the LM head sees, without computing any
logits) and `output_layer` (the LM head). Transformers models and the proxy GPT look the same through it.

Prompt/response layout (`encode_examples`):

* When the tokenizer has a chat template, the prompt is the template applied to the prompt turns with
  `add_generation_prompt=True`, and the whole is the template applied to the prompt turns plus
  `{"role": "assistant", "content": response}`. The response tokens are the part of the whole after the
  prompt: the response text, the end-of-turn token (e.g. `<|im_end|>`) and what the template puts after it (a
  newline), as TRL's SFTTrainer and DPOTrainer train on them (`answer_token_counts` counts alike). The whole
  text is tokenized once, as the model sees it in training, and split where the prompt text ends (fast
  tokenizers' offsets); so the prompt ids are always a prefix of the example's ids, and no spurious word-start
  token appears at the response's first word.
* Otherwise the documented plain template is used::

      [bos]### System:\n{system}\n\n### User:\n{user}\n\n### Assistant:\n{assistant}\n\n ... ### Assistant:\n
      {response}[eos]

  i.e. each prompt turn as `### {Role}:\n{content}\n\n`, then `### Assistant:\n`; the response is the
  response text followed by the EOS token (when the tokenizer has one). The scaffold and BOS are what the
  features read; a row's count (`whole_tokens`: embed's `n_tokens`) is `row_token_counts`', as `--tokenizer`
  counts: the turns' text, the answer and EOS, what a trainer without a template reads.

`max_length` (never more than the model's position limit: `settle_max_length`) truncates the prompt from the
left first (the response is what the features are about); only when the response alone does not fit is it cut
at the right, keeping one prompt token so that the first response token is still predicted. An example that keeps
no predicted response token is returned in the `skipped` list with a reason, never embedded as zeros.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from cluster_curate.errors import CurateError
from cluster_curate.features.tokenizer_files import ENCODE_SLICE, missing_tokenizer_files

PLAIN_ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant"}

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


@dataclass
class FeatureModel:
    module: torch.nn.Module
    tokenizer: object  # transformers.PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    name: str
    hidden_fn: Callable[[Tensor, Tensor], Tensor]
    output_layer: torch.nn.Linear
    # The longest sequence the model reads (its config's position limit; the proxy's max_len), None when it
    # declares none (e.g. a rotary model with no max_position_embeddings): settle_max_length keeps rows within it.
    max_positions: int | None = None
    # Extractors keep derived objects here (e.g. the default lora-gradient projector) so they are built once.
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def hidden_size(self) -> int:
        return int(self.output_layer.weight.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.output_layer.weight.shape[0])

    @property
    def pad_id(self) -> int:
        return pad_token_id(self.tokenizer)


# ----------------------------------------------------------------------------------------------- devices
def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise CurateError(f"--device {device!r}: not a torch device (use auto, cpu, cuda, cuda:N)") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CurateError(f"--device {device}: CUDA is not available on this machine (use --device cpu)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise CurateError(f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s), "
                          f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    # the other accelerators torch knows: only where this torch build and machine have them (an INTERNAL ERROR
    # at the first tensor moved there), and never `meta` (no data: a NotImplementedError)
    backend = {"mps": getattr(torch.backends, "mps", None), "xpu": getattr(torch, "xpu", None)}.get(dev.type)
    if dev.type not in ("cpu", "cuda") and not (backend is not None and backend.is_available()):
        raise CurateError(f"--device {device}: "
                          + (f"{dev.type.upper()} is not available in this torch build or machine"
                             if dev.type in ("mps", "xpu") else "not a device the features are computed on")
                          + " (use auto, cpu, cuda, cuda:N)")
    return dev


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on GPU (the precision fine-tuning runs in), float32 on CPU (bf16 matmuls are slow there)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise CurateError(f"--dtype {dtype!r}: expected auto, float32, bfloat16 or float16") from None


# ----------------------------------------------------------------------------------------------- loading
def hub_is_offline() -> bool:
    """Whether Hugging Face offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE): no download tried."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    if os.environ.get("TRANSFORMERS_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    try:
        import huggingface_hub.constants as hf_constants
        return bool(hf_constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover - very old huggingface_hub
        return False


def looks_like_local_path(spec: str) -> bool:
    """Whether a model spec (--model, --encoder, a --checkpoints item) that is not on disk names a missing local
    path rather than a Hugging Face hub id: hub ids are `name` or `org/name`; a spec starting with `/`, `.` or
    `~`, ending in `.gguf`, with two slashes or more, or a backslash, is a path, and so is one no hub id can be
    (`nope/`, as a shell's completion ends a folder; `my model`)."""
    if spec.startswith(("/", ".", "~")) or spec.endswith(".gguf") or spec.count("/") > 1 or "\\" in spec:
        return True
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(spec)
    except HFValidationError:
        return True
    return False


def require_gguf_extra(path: Path) -> None:
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise CurateError(f"--model {path}: loading a GGUF file needs the package(s) {', '.join(missing)}: "
                          "pip install the gguf extra ('.[cpu,gguf]' in the checkout, or the wheel with [cpu,gguf])")


def not_cached(spec: str, unreachable: bool, option: str = "--model") -> str:
    from cluster_curate.io.hub import HUB_PROBE_SECONDS, hub_endpoint
    why = (f"the hub ({hub_endpoint()}) did not answer within {HUB_PROBE_SECONDS:g} s" if unreachable
           else "the hub is offline (HF_HUB_OFFLINE=1)")
    return (f"{option} {spec}: not found locally or in the Hugging Face cache, and {why}: download it first or "
            "pass a local path")


def probe_hub(spec: str, kwargs: dict, option: str = "--model") -> bool:
    """Before transformers loads the hub id `spec` (not on disk; offline mode off): without a network it retries
    for ~50 s, so the hub is probed for a second, and when it does not answer the load reads the local cache only
    (`kwargs`' local_files_only) and a model that is not there is refused at once (`option` names it). Returns
    whether the hub was unreachable."""
    from cluster_curate.io.hub import hub_reachable
    unreachable = not hub_reachable()
    if unreachable:
        kwargs["local_files_only"] = True
        from huggingface_hub import try_to_load_from_cache
        if not isinstance(try_to_load_from_cache(spec, "config.json"), str):  # before importing transformers
            raise CurateError(not_cached(spec, True, option))
    return unreachable


@contextmanager
def _loading_bars(gguf: bool):
    """transformers' and huggingface_hub's tqdm bars (downloading, loading the weights, de-quantizing a GGUF file)
    on a terminal only, as the tool's own progress: in a log (stderr not a terminal) each is dozens of \\r-joined
    lines. transformers' GGUF reader draws tqdm itself: it is given transformers' switchable one."""
    from cluster_curate import console
    from transformers.utils import logging as tf_logging
    reader, reader_tqdm = None, None
    if gguf:
        from transformers import modeling_gguf_pytorch_utils as reader
        reader_tqdm, reader.tqdm = reader.tqdm, tf_logging.tqdm
    turn_off = tf_logging.is_progress_bar_enabled() and (console.QUIET or not sys.stderr.isatty())
    if turn_off:
        tf_logging.disable_progress_bar()  # huggingface_hub's too
    try:
        yield
    finally:
        if turn_off:  # only what this turned off is turned on again
            tf_logging.enable_progress_bar()
        if reader is not None:
            reader.tqdm = reader_tqdm


def check_tokenizer_files(path: Path, named: str) -> None:
    """A local model or encoder folder must hold its tokenizer: without one transformers either fails ("Couldn't
    instantiate the backend tokenizer from one of:") or, for some models (BERT), builds one of its 5 special
    tokens alone, which reads every word as [UNK] and gives every row one embedding, without a word."""
    missing = missing_tokenizer_files(path) if path.is_dir() else None
    if missing:
        raise CurateError(f"{named}: could not be loaded: no tokenizer in the folder ({missing}): save it beside "
                          "the model")


# the weight files save_pretrained writes (one file, or shards listed by an index)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def check_weight_files(path: Path, named: str) -> None:
    """A local model or encoder folder must hold its weights: a folder of its config alone (`config.save_pretrained`)
    reached transformers, whose "Error no file named model.safetensors ... found in directory" is no advice."""
    if path.is_dir() and not any((path / name).is_file() for name in WEIGHT_FILES):
        raise CurateError(f"{named}: the directory has no weights ({', '.join(WEIGHT_FILES[::2])}); save the model "
                          "with save_pretrained, not only its config")


def check_vocabulary(tokenizer, rows: int | None, named: str) -> None:
    """A tokenizer with more tokens than the model's input embedding has rows (one saved from another model) gives
    ids past its last row: an IndexError in the first batch, after the data was read. `rows`: the embedding's
    rows (`get_input_embeddings().num_embeddings`), or before loading the weights the config's vocab_size, which the
    weights must match to load."""
    if isinstance(rows, int) and 0 < rows < len(tokenizer):
        raise CurateError(f"{named}: its tokenizer has {len(tokenizer):,} tokens but the model's input embedding has "
                          f"{rows:,} rows (token ids from {rows:,} on have no row): give the tokenizer saved with "
                          "this model (save_pretrained both into one folder)")


def check_local_model(spec: str, named: str, trust_remote_code: bool = False) -> None:
    """What can be told of a local model folder before the data is read: its weights are there (check_weight_files)
    and its tokenizer fits its vocabulary (check_vocabulary, from its tokenizer and config alone); a folder that
    does not load otherwise is left to the loader, which says why."""
    path = Path(spec).expanduser()
    if not (path.is_dir() and (path / "config.json").is_file()):
        return
    check_weight_files(path, named)
    if missing_tokenizer_files(path):
        return
    from transformers import AutoConfig, AutoTokenizer
    try:
        config = AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
        text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
        rows = getattr(text, "vocab_size", None)
        if not isinstance(rows, int):
            return
        tokenizer = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - the loader reports it, in one line
        return
    check_vocabulary(tokenizer, rows, named)


def loading_error(e: Exception) -> str:
    """What transformers said when it could not load a model or encoder, in one line: its first line, with the next
    one where the first ends on a colon."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()] or [type(e).__name__]
    return lines[0] + (f" {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else "")


# config fields that bound the positions a causal LM reads, the first one set wins (transformers maps most models'
# own names onto max_position_embeddings: GPT-2's n_positions, GPT-J's, ...; MPT says max_seq_len, ChatGLM seq_length)
POSITION_LIMIT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_sequence_length",
                         "seq_length")


def position_limit(config) -> int | None:
    """The longest sequence a model's config says it reads (a learned position table's size: one more position is
    an index error in its embedding), or None when it declares none. A multimodal config: its text model's."""
    get_text = getattr(config, "get_text_config", None)
    if callable(get_text):
        try:
            config = get_text() or config
        except Exception:  # noqa: BLE001 - an odd config keeps its own fields
            pass
    for name in POSITION_LIMIT_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def settle_max_length(max_length: int | None, models: list) -> int | None:
    """The max length the model features are computed at: `max_length` (None: no cut), lowered to the shortest
    position limit of `models` (FeatureModels; None entries ignored) so that no row reaches a position the model
    does not have; rows longer than it are cut as --max-length cuts them (and said: embed_parts._cut_rows_note)."""
    limits = [fm.max_positions for fm in models if fm is not None and fm.max_positions]
    return min([max_length, *limits] if max_length is not None else limits, default=None)


def is_causal_lm(config) -> bool:
    """Whether a model's config is a causal LM's with its LM head saved: its architecture is one (...ForCausalLM,
    ...LMHeadModel), or the class transformers loads as its type's causal LM (Gemma 3's ...ForConditionalGeneration;
    not BERT's BertModel, which would load as BertLMHeadModel with a head of random weights)."""
    archs = getattr(config, "architectures", None) or []
    if getattr(config, "is_decoder", False) or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    if "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {}):  # its own code's (ChatGLM, GLM-4)
        return True
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return bool(archs) and archs[0] == MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(config, "model_type", None))


def _model_source(spec: str, trust_remote_code: bool) -> tuple[str, dict, Path, bool]:
    """Where transformers loads the model spec from (a folder, a GGUF file's folder, a hub id) and with what
    kwargs, its local path, and whether the hub was found unreachable (probe_hub)."""
    path = Path(spec).expanduser()
    kwargs: dict = {"trust_remote_code": bool(trust_remote_code)}
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise CurateError(f"--model {spec}: no such GGUF file")
        require_gguf_extra(path)
        where, kwargs["gguf_file"] = str(path.parent), path.name
    elif path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise CurateError(f"--model {spec}: not a model directory (expected config.json, as written by "
                              f"save_pretrained) nor a .gguf file")
        check_weight_files(path, f"--model {spec}")
        where = str(path)
    elif looks_like_local_path(spec):
        raise CurateError(f"--model {spec}: no such file or directory")
    else:
        where = spec  # a hub id

    unreachable = False
    if where == spec and not path.exists() and not hub_is_offline():
        unreachable = probe_hub(spec, kwargs)
    return where, kwargs, path, unreachable


def _not_loaded(spec: str, where: str, path: Path, unreachable: bool, trust_remote_code: bool, e: Exception) -> str:
    """What transformers said when it could not load `spec`, in one line."""
    if where == spec and not path.exists() and (unreachable or hub_is_offline()):
        return not_cached(spec, unreachable)
    first = loading_error(e)
    if trust_remote_code is False and "trust_remote_code" in str(e):
        first += " (pass --trust-remote-code if you trust this model's code)"
    return f"--model {spec}: could not be loaded: {first}"


def load_tokenizer(spec: str, *, trust_remote_code: bool = False):
    """The tokenizer of a model spec as load_model loads it, from its tokenizer files alone (a GGUF file's
    metadata), no weights: what a checkpoint's token ids mean, told before its weights load."""
    spec = str(spec)
    where, kwargs, path, unreachable = _model_source(spec, trust_remote_code)
    from transformers import AutoTokenizer

    check_tokenizer_files(path, f"--model {spec}")
    try:
        with _loading_bars(gguf="gguf_file" in kwargs):
            return AutoTokenizer.from_pretrained(where, **kwargs)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises, the user gets one line
        raise CurateError(_not_loaded(spec, where, path, unreachable, trust_remote_code, e)) from None


def not_a_causal_lm(spec: str, architecture: str, features=None) -> str:
    """The refusal of a model that is no causal LM with its head (an encoder, a decoder saved without its head), in
    the words of the `features` it was given for (None: any that reads the head)."""
    if features is not None and not set(features) & {"gradient", "lora-gradient", "loss-trajectory"}:
        why = ("--features hidden pools the hidden states of a causal LM's decoder, which reads the text left to "
               "right as a trainer's model does (its loss column comes from the LM head), not an encoder's")
    else:
        why = "its features would come from a head of random weights"
    return (f"--model {spec}: is a {architecture}, not a causal LM with its LM head (a ...ForCausalLM); {why}; for "
            f"its sentence embeddings use --features semantic --encoder {spec}")


def load_model(spec: str, *, device: str | None = None, dtype: str | None = None,
               trust_remote_code: bool = False, features=None, own_ids: bool = True) -> FeatureModel:
    """Load a causal LM as a FeatureModel.

    spec: a local directory saved with `save_pretrained`, a Hugging Face hub id (from the local cache when
    offline), or a `.gguf` file (dequantized by transformers; needs the `gguf` extra). The module is put in
    eval mode with its parameters frozen; feature extraction never trains it. `features`: the model features it is
    loaded for (what a refusal says). `own_ids`: it reads its own tokenizer's ids, which must have embedding rows
    (a --checkpoints model reads --model's: embed_parts._trajectory checks those).
    """
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    spec = str(spec)
    where, kwargs, path, unreachable = _model_source(spec, trust_remote_code)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    check_tokenizer_files(path, f"--model {spec}")
    try:
        with _loading_bars(gguf="gguf_file" in kwargs):
            config = AutoConfig.from_pretrained(where, **kwargs)
            if config.architectures and not is_causal_lm(config):
                # AutoModelForCausalLM would load it with an LM head of random weights (BERT's BertLMHeadModel, a
                # causal LM saved without its head), and every feature would be of those
                raise CurateError(not_a_causal_lm(spec, config.architectures[0], features))
            tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(where, dtype=dt, **kwargs)
    except CurateError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever transformers raises, the user gets one line
        raise CurateError(_not_loaded(spec, where, path, unreachable, trust_remote_code, e)) from None

    if own_ids:
        check_vocabulary(tokenizer, model.get_input_embeddings().num_embeddings, f"--model {spec}")
    # rows are cut here at the config's position limit (settle_max_length, said in its own warning) and counted
    # whole: transformers' "longer than the specified maximum sequence length ... indexing errors" would be untrue
    tokenizer.model_max_length = 1 << 62
    model.to(dev)
    model.eval()
    model.requires_grad_(False)
    output_layer = model.get_output_embeddings()
    if not isinstance(output_layer, torch.nn.Linear):
        raise CurateError(f"--model {spec}: its output layer is {type(output_layer).__name__}, not a linear "
                          f"LM head; only causal LMs with a linear head are supported")
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None or decoder is model:
        decoder = model.base_model
    if decoder is model:
        raise CurateError(f"--model {spec}: cannot find the decoder stack under its LM head")

    def hidden_fn(input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    name = spec if not path.exists() else str(path.resolve())
    return FeatureModel(module=model, tokenizer=tokenizer, device=dev, dtype=dt, name=name,
                        hidden_fn=hidden_fn, output_layer=output_layer, max_positions=position_limit(model.config))


# texts two tokenizers must split alike to read token ids alike: words, numbers, code's spacing, accents, CJK, emoji
TOKENIZER_PROBES = ("How many clips did Natalia sell? The answer is 72. #### 72",
                    "def add(a, b):\n    return a + b  # the sum", "Café naïve, ¿por qué? 数学 🙂")


def tokenizer_difference(reference, other) -> str | None:
    """How `other` reads token ids otherwise than `reference` (a model fed `reference`'s ids then reads other
    words, or ids past its vocabulary), in words, or None when they agree: their sizes, their vocabularies (token
    -> id) and the ids of a few probe texts (which catch another normaliser or pre-tokenizer on one vocabulary).
    More tokens are no difference where `reference`'s keep their ids (a fine-tuned checkpoint that added one)."""
    if len(other) < len(reference):
        return f"its tokenizer has {len(other):,} tokens, not {len(reference):,}"
    vocab = other.get_vocab()
    if any(vocab.get(token) != i for token, i in reference.get_vocab().items()):
        return "its tokenizer has another vocabulary"
    for text in TOKENIZER_PROBES:
        if other.encode(text, add_special_tokens=False) != reference.encode(text, add_special_tokens=False):
            return f"its tokenizer splits {text[:24]!r}... into other tokens"
    return None


def wrap_gpt(gpt, tokenizer, device: str | torch.device | None = None, name: str = "proxy") -> FeatureModel:
    """The proxy GPT (features/gpt.py) as a FeatureModel. Moves it to `device` (default: where it already
    is) and puts it in eval mode; the parameters are left as they are (the caller may keep training)."""
    dev = next(gpt.parameters()).device if device is None else resolve_device(device)
    gpt.to(dev)
    gpt.eval()
    return FeatureModel(module=gpt, tokenizer=tokenizer, device=dev, dtype=next(gpt.parameters()).dtype,
                        name=name, hidden_fn=gpt.hidden_states, output_layer=gpt.lm_head,
                        max_positions=getattr(getattr(gpt, "cfg", None), "max_len", None))


# ----------------------------------------------------------------------------------------------- encoding
@dataclass
class Encoded:
    id: int
    input_ids: list[int]
    response_start: int       # index in input_ids of the first response token
    n_tokens: int             # len(input_ids) after truncation
    n_response_tokens: int    # response tokens the loss/features use (each has a predecessor position)
    truncated: bool
    whole_tokens: int = 0     # prompt + response tokens before truncation: what a trainer reads (n_tokens column;
    # without a chat template, `row_token_counts`: the text, not the plain template's scaffold)
    whole_response_tokens: int = 0  # likewise, of the response


def pad_token_id(tokenizer) -> int:
    """The id used for right padding: pad, else eos, else 0. Padded positions are masked, so any id works."""
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0


def _eos_id(tokenizer) -> int | None:
    value = getattr(tokenizer, "eos_token_id", None)
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(value)


def plain_prompt_text(prompt: list[dict]) -> str:
    parts = []
    for turn in prompt:
        role = PLAIN_ROLE_NAMES.get(turn["role"], str(turn["role"]).capitalize())
        parts.append(f"### {role}:\n{turn['content']}\n\n")
    parts.append("### Assistant:\n")
    return "".join(parts)


def _has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


@contextmanager
def template_refusals(tokenizer, examples: list):
    """A chat template that raises on some turns (a tool turn where it knows only user / assistant / system, a
    system turn it does not support) becomes one line naming the tokenizer, the first such row and its roles."""
    from jinja2 import TemplateError
    try:
        yield
    except TemplateError as error:
        where, roles = "a row", ""
        for ex in examples:
            try:
                tokenizer.apply_chat_template(list(ex.prompt), tokenize=False, add_generation_prompt=True)
            except TemplateError:
                where, roles = f"row id {ex.id}", ", ".join(dict.fromkeys(t["role"] for t in ex.prompt))
                break
        name = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
        raise CurateError(f"{name}: its chat template refuses the turns of {where}"
                          + (f" (roles {roles})" if roles else "") + f": {error}; give a tokenizer whose template "
                          "renders them") from None


def _render(tokenizer, prompt: list[dict], response: str) -> tuple[str, str]:
    """(prompt text, whole text); the whole text starts with the prompt text."""
    if not _has_chat_template(tokenizer):
        prompt_text = plain_prompt_text(prompt)
        return prompt_text, prompt_text + response
    prompt_text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    full_text = tokenizer.apply_chat_template(prompt + [{"role": "assistant", "content": response}],
                                              tokenize=False)
    if not full_text.startswith(prompt_text):
        # Templates that rewrite earlier turns once an answer follows (rare): split at the common prefix.
        n = 0
        for a, b in zip(prompt_text, full_text):
            if a != b:
                break
            n += 1
        prompt_text = full_text[:n]
    return prompt_text, full_text


PROBED_ANSWERS = 16  # the rows whose answers answer_token_counts counts both ways, to choose how to count them all


def answer_token_counts(tokenizer, examples: list, answers: list[str], prompts: list[str] | None = None) -> list[int]:
    """Tokens of each answer as a trainer tokenizes it after its example's prompt (TRL's DPOTrainer: prompt +
    chosen and prompt + rejected, each less the prompt; its SFTTrainer alike): with a chat template, the template
    of prompt + answer beyond the template of the prompt with the generation prompt (`prompts`, when the caller
    has rendered them), end-of-turn tokens and all; without one, the answer's tokens and EOS (which TRL appends to
    a plain answer)."""
    if not _has_chat_template(tokenizer):
        eos = int(_eos_id(tokenizer) is not None)
        return [n + eos for n in _lengths(tokenizer, list(answers))]
    with template_refusals(tokenizer, examples):
        if prompts is None:
            prompts = tokenizer.apply_chat_template([list(ex.prompt) for ex in examples], tokenize=False,
                                                    add_generation_prompt=True)
        wholes = tokenizer.apply_chat_template([[*ex.prompt, {"role": "assistant", "content": answer}]
                                                for ex, answer in zip(examples, answers)], tokenize=False)
    # the template's text after the prompt's: its answer, tokenized alone (what TRL's common prefix of the two
    # tokenizations leaves, as a template's prompt ends at a special token or a newline; a template that rewrites
    # the prompt once an answer follows: the whole, less that common prefix)
    after = [whole.startswith(asked) for asked, whole in zip(prompts, wholes)]
    rests = [whole[len(asked):] if a else "" for a, asked, whole in zip(after, prompts, wholes)]

    def token_ids(texts: list[str]) -> list[list[int]]:
        return [ids for s in range(0, len(texts), ENCODE_SLICE)
                for ids in tokenizer(texts[s:s + ENCODE_SLICE], add_special_tokens=False)["input_ids"]]

    def in_context(rows: list[int]) -> list[int]:  # TRL's count: the whole's tokens past the prompt's common prefix
        return [len(w) - next((j for j, (a, b) in enumerate(zip(p, w)) if a != b), min(len(p), len(w)))
                for p, w in zip(token_ids([prompts[i] for i in rows]), token_ids([wholes[i] for i in rows]))]

    # a tokenizer that reads a text alone otherwise than after the prompt (a prefix space added to it: one token
    # more) is counted in context throughout, as the first rows show
    probed = [i for i in range(min(PROBED_ANSWERS, len(rests))) if after[i]]
    if in_context(probed) != [len(ids) for ids in token_ids([rests[i] for i in probed])]:
        return in_context(list(range(len(rests))))
    counts = [len(ids) for ids in token_ids(rests)]
    apart = [i for i in range(len(rests)) if not after[i]]
    for i, n in zip(apart, in_context(apart)):
        counts[i] = n
    return counts


def row_token_counts(tokenizer, examples: list) -> tuple[list[int], list[int]]:
    """Prompt and answer tokens of each example as a trainer reads them: `--tokenizer`'s count, and embed's
    `n_tokens` without a chat template (with one, `encode_examples` counts the same tokens). The prompt is the
    chat template of its turns with the generation prompt when the tokenizer has one; without one, its turns'
    text joined by blank lines (not the `### User:` scaffold nor the BOS that `encode_examples` gives the
    model's features: a trainer without a template reads the text). The answer is counted by
    `answer_token_counts` (end-of-turn tokens; without a template, the text and EOS)."""
    templated = None  # the prompts through the chat template, rendered once for both counts
    if _has_chat_template(tokenizer):
        with template_refusals(tokenizer, examples):
            templated = tokenizer.apply_chat_template([list(ex.prompt) for ex in examples], tokenize=False,
                                                      add_generation_prompt=True)
    prompts = templated or ["\n\n".join(t["content"] for t in ex.prompt) for ex in examples]
    return _lengths(tokenizer, list(prompts)), answer_token_counts(tokenizer, examples,
                                                                   [ex.response for ex in examples], templated)


def _lengths(tokenizer, texts: list[str]) -> list[int]:
    """Tokens of each text alone, ENCODE_SLICE texts at a time: only their counts are kept (a chunk's ids at once
    held half as much memory again as the features' encoding)."""
    return [len(ids) for s in range(0, len(texts), ENCODE_SLICE)
            for ids in tokenizer(texts[s:s + ENCODE_SLICE], add_special_tokens=False)["input_ids"]]


def _split_ids(tokenizer, prompt_texts: list[str], full_texts: list[str]) -> list[tuple[list[int], list[int]]]:
    """Tokenize each whole text once, as the model sees it in training, and split it where the prompt text
    ends (a token that starts inside the prompt belongs to the prompt). Tokenizers without offsets
    (slow tokenizers) tokenize the prompt and the rest separately instead."""
    out = []
    if getattr(tokenizer, "is_fast", False):
        # In slices: a batched call holds rich per-text encodings (offsets, masks) for all its texts at once,
        # ~45 kB per GSM8K row, which would make memory grow with the number of examples encoded together.
        for s in range(0, len(full_texts), ENCODE_SLICE):
            enc = tokenizer(full_texts[s:s + ENCODE_SLICE], add_special_tokens=False, return_offsets_mapping=True)
            for ids, offsets, prompt_text in zip(enc["input_ids"], enc["offset_mapping"], prompt_texts[s:]):
                boundary = len(prompt_text)
                start = bisect.bisect_left([a for a, _ in offsets], boundary)
                out.append((list(ids[:start]), list(ids[start:])))
        return out
    for prompt_text, full_text in zip(prompt_texts, full_texts):
        rest = full_text[len(prompt_text):]
        p = tokenizer(prompt_text, add_special_tokens=False)["input_ids"] if prompt_text else []
        r = tokenizer(rest, add_special_tokens=False)["input_ids"] if rest else []
        out.append((list(p), list(r)))
    return out


def _truncate(ex_id: int, prompt_ids: list[int], response_ids: list[int], max_length: int | None
              ) -> Encoded | tuple[int, str]:
    if not response_ids:
        return (int(ex_id), "the response is empty after tokenization")
    truncated = False
    whole, whole_response = len(prompt_ids) + len(response_ids), len(response_ids) - (0 if prompt_ids else 1)
    if max_length is not None and len(prompt_ids) + len(response_ids) > max_length:
        truncated = True
        keep_prompt = max(max_length - len(response_ids), 1 if prompt_ids else 0)
        prompt_ids = prompt_ids[len(prompt_ids) - keep_prompt:] if keep_prompt else []
        response_ids = response_ids[:max(max_length - len(prompt_ids), 0)]
    ids = prompt_ids + response_ids
    start = len(prompt_ids)
    n_resp = len(ids) - max(start, 1)  # the first token of a sequence has no predecessor
    if n_resp <= 0:
        why = (f"--max-length {max_length} leaves no response token" if truncated
               else "the response has no token after the prompt")
        return (int(ex_id), why)
    return Encoded(id=int(ex_id), input_ids=ids, response_start=start, n_tokens=len(ids),
                   n_response_tokens=n_resp, truncated=truncated, whole_tokens=whole if truncated else len(ids),
                   whole_response_tokens=whole_response if truncated else n_resp)


def encode_examples(tokenizer, examples: list, max_length: int | None
                    ) -> tuple[list[Encoded], list[tuple[int, str]]]:
    """Encode examples (see the module docstring for the layout). Returns (encodings, skipped) where
    skipped holds (id, reason) for examples that keep no response token. Tokenization is batched."""
    if max_length is not None and max_length < 2:
        raise CurateError(f"--max-length {max_length}: must be at least 2 (one prompt and one response token)")
    if not examples:
        return [], []
    with template_refusals(tokenizer, examples):
        rendered = [_render(tokenizer, list(ex.prompt), ex.response) for ex in examples]
    splits = _split_ids(tokenizer, [p for p, _ in rendered], [f for _, f in rendered])
    plain = not _has_chat_template(tokenizer)
    bos = getattr(tokenizer, "bos_token_id", None) if plain else None
    eos = _eos_id(tokenizer) if plain else None
    encoded, skipped = [], []
    for ex, (prompt_ids, response_ids) in zip(examples, splits):
        if bos is not None:
            prompt_ids = [int(bos)] + prompt_ids
        if eos is not None:
            response_ids = response_ids + [eos]
        result = _truncate(ex.id, prompt_ids, response_ids, max_length)
        (encoded if isinstance(result, Encoded) else skipped).append(result)
    if plain and encoded:  # the features read the scaffold above; a trainer without a template, the text and EOS
        kept = {e.id for e in encoded}
        for e, p, r in zip(encoded, *row_token_counts(tokenizer, [ex for ex in examples if ex.id in kept])):
            e.whole_tokens = p + r
    return encoded, skipped


def collate(encoded: list[Encoded], pad_id: int, device) -> dict:
    """Right-padded batch: input_ids, attention_mask [B, T] and labels [B, T] (the token ids on response
    positions, -100 elsewhere; as in transformers, position t's logits predict labels[t + 1]).
    Also `ids` (example ids, a list) and `n_response_tokens` [B]."""
    if not encoded:
        raise ValueError("collate() needs at least one example")
    width = max(e.n_tokens for e in encoded)
    b = len(encoded)
    input_ids = torch.full((b, width), int(pad_id), dtype=torch.long)
    attention_mask = torch.zeros((b, width), dtype=torch.long)
    labels = torch.full((b, width), -100, dtype=torch.long)
    for i, e in enumerate(encoded):
        row = torch.tensor(e.input_ids, dtype=torch.long)
        input_ids[i, :e.n_tokens] = row
        attention_mask[i, :e.n_tokens] = 1
        first = max(e.response_start, 1)
        labels[i, first:e.n_tokens] = row[first:]
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": attention_mask.to(device),
        "labels": labels.to(device),
        "ids": [e.id for e in encoded],
        "n_response_tokens": torch.tensor([e.n_response_tokens for e in encoded], dtype=torch.long),
    }
