"""The built-in `proxy` feature model: a small GPT (features/gpt.py) with a tokenizer trained on the data,
warmed up briefly on a seeded sample of the dataset itself, so `embed` needs no download.

    tok = train_tokenizer(texts, vocab_size=4096, kind="bpe")
    proxy = train_proxy(sample_examples, ProxyOptions(), device="cpu")     # -> TrainedProxy
    save_proxy(proxy, "E.proxy")                                           # reusable: --model E.proxy
    fm = load_proxy("E.proxy")                    # FeatureModel of the final weights
    fms = [load_proxy("E.proxy", step) for step in proxy_checkpoint_steps("E.proxy")]  # loss-trajectory

On disk (`<artifact>.proxy/`, written and read by io/proxy_store.py): config.json (marker `"model_type": "cluster-curate-proxy"`, the GPT config,
the options and training log), tokenizer files (PreTrainedTokenizerFast.save_pretrained, including the chat
template), model.safetensors (final weights) and checkpoints/step-NNNNNN.safetensors (the warm-up checkpoints
that `--features loss-trajectory` uses). Nothing is unpickled when loading.

Defaults (see ProxyOptions): a 3-layer, 128-wide model ("small"), a byte-level BPE tokenizer of 4,096 tokens,
5% of the rows (at least 128, at most 20,000; LESS warms up on 5%), one epoch over that sample with batches of
about 2,048 tokens. One epoch of forward+backward on 5% of the rows costs about 3 x 5% = 15% of a forward pass
over all rows; on small datasets, where the 128-row minimum is a large share, the steps are capped so that the
warm-up stays within about `budget` (0.15) of the feature pass (the limit is a quarter;
benchmarks/bench_embed_memory.py measures it).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cluster_curate.errors import CurateError, counted

if TYPE_CHECKING:  # torch is imported where a proxy is trained or loaded: `embed --features text` needs none
    import torch

    from cluster_curate.features.gpt import GPT, GPTConfig

PROXY_MARKER = "cluster-curate-proxy"
EOS = "<|endoftext|>"
PAD = "<|pad|>"
UNK = "<|unk|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
# Each turn is <|role|>content<|endoftext|>; the response therefore ends with the end token, which the loss
# and the features include (as an SFT loss does).
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] + '" + EOS + "' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")

SIZES = {  # name -> (n_layer, n_head, d_model)
    "tiny": (2, 2, 64),
    "small": (3, 4, 128),
    "base": (4, 4, 256),
}


@dataclass
class ProxyOptions:
    size: str = "small"  # tiny | small | base (SIZES)
    vocab_size: int = 4096
    tokenizer: str = "bpe"  # bpe (byte-level, never unknown) | word (whitespace words, digits split)
    sample: float = 0.05  # fraction of rows to warm up on ...
    min_rows: int = 128  # ... but at least this many (or all rows when fewer)
    max_rows: int = 20000  # ... and at most this many
    epochs: float = 1.0  # passes over the sample (ignored when steps is set)
    steps: int | None = None  # exact number of optimiser steps
    batch_tokens: int = 2048  # padded tokens per training step
    lr: float = 3e-3
    checkpoints: int = 3  # warm-up checkpoints kept (evenly spaced, the last is the final model)
    # Cost cap: the rows trained on (steps x rows per step) are at most budget / 3 of the dataset's rows, a
    # forward+backward costing about 3 forwards, so the warm-up costs at most `budget` of the feature pass
    # (0.15 leaves room for the tokenizer and the sample pass under the 0.25). Binding only on small
    # datasets, where the minimum sample is a large share of the rows. An explicit `steps` is not capped.
    budget: float = 0.15
    max_length: int = 512  # tokens per example; the prompt is truncated from the left
    seed: int = 0

    def validate(self) -> None:
        if self.size not in SIZES:
            raise CurateError(f"--proxy-size: unknown size {self.size!r} (choose from {', '.join(SIZES)})")
        if self.tokenizer not in ("bpe", "word"):
            raise CurateError(f"--proxy-tokenizer: must be 'bpe' or 'word', got {self.tokenizer!r}")
        if not 0 < self.sample <= 1:
            raise CurateError(f"--proxy-sample: must be in (0, 1], got {self.sample}")
        if self.steps is not None and self.steps <= 0:
            raise CurateError(f"--proxy-steps: must be positive, got {self.steps}")
        if self.epochs <= 0:
            raise CurateError(f"--proxy-epochs: must be positive, got {self.epochs}")
        if self.vocab_size < 64:
            raise CurateError(f"--proxy-vocab: must be at least 64, got {self.vocab_size}")
        if not 0 < self.budget <= 10:
            raise CurateError(f"--proxy-budget: must be in (0, 10], got {self.budget}")
        if self.checkpoints < 1:
            raise CurateError(f"--proxy-checkpoints: must be at least 1, got {self.checkpoints}")

    def sample_size(self, n_rows: int) -> int:
        """How many rows the warm-up uses out of n_rows."""
        return min(n_rows, max(self.min_rows, min(self.max_rows, math.ceil(self.sample * n_rows))))

    def checkpoint_steps(self, total: int) -> list[int]:
        """The warm-up steps whose weights are kept, of `total` steps (evenly spaced, the last is the final one)."""
        return sorted({max(1, round(total * (i + 1) / self.checkpoints)) for i in range(self.checkpoints)})

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        from cluster_curate.features.gpt import GPTConfig
        n_layer, n_head, d_model = SIZES[self.size]
        return GPTConfig(vocab_size=vocab_size, n_layer=n_layer, n_head=n_head, d_model=d_model,
                         max_len=self.max_length)


@dataclass
class TrainedProxy:
    gpt: GPT
    tokenizer: object  # transformers.PreTrainedTokenizerFast
    options: ProxyOptions
    checkpoints: dict[int, dict] = field(default_factory=dict)  # step -> state_dict (cpu copies)
    log: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- tokenizer

def train_tokenizer(texts, vocab_size: int = 4096, kind: str = "bpe"):
    """A PreTrainedTokenizerFast trained on `texts` (an iterable of str), with the proxy's chat template.

    `bpe`: byte-level BPE (any text encodes, no unknown token). `word`: whitespace/punctuation words with
    digits split one by one (numbers cannot blow up the vocabulary), rare words -> <|unk|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, EOS, UNK, *ROLE_TOKENS]
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                                     pre_tokenizers.Digits(individual_digits=True)])
        tok.decoder = decoders.WordPiece(prefix="##")  # joins with spaces; decoding is cosmetic here
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   unk_token=UNK, additional_special_tokens=ROLE_TOKENS,
                                   model_max_length=1 << 30)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def example_texts(examples):
    for ex in examples:
        for turn in ex.prompt:
            yield str(turn.get("content") or "")
        yield ex.response


# --------------------------------------------------------------------------------------------- training

# A warm-up of fewer optimiser steps leaves the proxy close to its random start: its model features say little.
FEW_STEPS = 10


def _few_steps(total: int, configured: int, rows: int, batches: int, dataset_rows: int | None,
               opts: ProxyOptions) -> str:
    steps = counted(total, "optimisation step")
    if total < configured:
        why = (f", not the {configured} of --proxy-epochs {opts.epochs:g} over its {rows}-row sample: on "
               f"{dataset_rows:,} rows --proxy-budget {opts.budget:g} caps its cost at {opts.budget:.0%} of the "
               "feature pass")
    else:
        why = (f": its {rows}-row sample makes {counted(batches, 'batch', 'batches')} of about "
               f"{opts.batch_tokens} tokens, x --proxy-epochs {opts.epochs:g}")
    return (f"proxy: the warm-up runs only {steps}{why}; a proxy this little trained is close to a random model "
            "and its features say little. With few rows use --features text (no model) or a real model (--model); "
            "--proxy-steps N trains it longer")


def check_checkpoint_steps(wanted, kept, whose: str) -> None:
    """`--checkpoints` step numbers `wanted` that are not among the warm-up checkpoints `kept` are a CurateError
    (`whose`: what keeps them, e.g. 'the warm-up (4 steps on 128 rows)')."""
    missing = [s for s in wanted if s not in kept]
    if missing:
        raise CurateError(f"--checkpoints {','.join(map(str, missing))}: no such warm-up checkpoint; {whose} keeps "
                          f"those at step{'s' if len(kept) != 1 else ''} {', '.join(map(str, kept))} "
                          "(--proxy-steps and --proxy-checkpoints choose them when the proxy is trained)")


def train_proxy(examples: list, options: ProxyOptions | None = None, *, device: str | torch.device = "cpu",
                on_step=None, dataset_rows: int | None = None, check_kept=None, warn=None) -> TrainedProxy:
    """Train the tokenizer and the GPT on `examples` (the warm-up sample, already chosen).

    Loss: cross-entropy on response tokens (the end token included), AdamW + cosine schedule, batches of
    about `batch_tokens` padded tokens from length-sorted buckets in a seeded random order.
    `on_step(step, total, loss)` is called after each step (progress). `dataset_rows` (the rows the
    features will be computed on) caps the steps by `options.budget` unless `options.steps` is given.
    `check_kept(steps, whose)` is told the warm-up steps whose weights will be kept before training, to refuse
    them then (--checkpoints naming another step; one checkpoint for a loss-trajectory), not after it.
    `warn(message)` is told, before training, when the warm-up gets fewer than FEW_STEPS steps it was not asked
    for (--proxy-steps), and why."""
    import torch
    import torch.nn.functional as F

    from cluster_curate.features.embed import plan_batches
    from cluster_curate.features.gpt import GPT, cosine_lr
    from cluster_curate.features.models import collate, encode_examples

    opts = options or ProxyOptions()
    opts.validate()
    if not examples:
        raise CurateError("proxy: no example to warm up on")
    t0 = time.perf_counter()
    tokenizer = train_tokenizer(example_texts(examples), opts.vocab_size, opts.tokenizer)
    t_tok = time.perf_counter() - t0
    encoded, _dropped = encode_examples(tokenizer, examples, opts.max_length)
    if not encoded:
        raise CurateError("proxy: no warm-up example keeps a response token after truncation (raise --max-length)")

    torch.manual_seed(opts.seed)
    gpt = GPT(opts.gpt_config(len(tokenizer))).to(device)
    gpt.train()
    decay = [p for n, p in gpt.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in gpt.named_parameters() if p.dim() < 2]
    optim = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                              lr=opts.lr, betas=(0.9, 0.95))
    batches = plan_batches([e.n_tokens for e in encoded], opts.batch_tokens)
    total = opts.steps if opts.steps is not None else max(1, round(opts.epochs * len(batches)))
    configured = total
    if opts.steps is None and dataset_rows:
        rows_per_step = len(encoded) / len(batches)
        total = max(1, min(total, int(opts.budget * dataset_rows / 3 / rows_per_step)))
    keep = opts.checkpoint_steps(total)
    if check_kept is not None:
        check_kept(keep, f"the warm-up ({counted(total, 'step')} on {counted(len(encoded), 'row')})")
    if opts.steps is None and total < FEW_STEPS and warn is not None:
        warn(_few_steps(total, configured, len(encoded), len(batches), dataset_rows, opts))
    rng = random.Random(opts.seed)
    order: list[int] = []
    checkpoints: dict[int, dict] = {}
    losses: list[float] = []
    n_tokens = 0
    pad_id = tokenizer.pad_token_id
    for step in range(1, total + 1):
        if not order:
            order = list(range(len(batches)))
            rng.shuffle(order)
        rows = [encoded[i] for i in batches[order.pop()]]
        batch = collate(rows, pad_id, device)
        for g in optim.param_groups:
            g["lr"] = cosine_lr(step - 1, total, opts.lr)
        hidden = gpt.hidden_states(batch["input_ids"], batch["attention_mask"])
        targets = batch["labels"][:, 1:]
        rows = targets != -100  # logits only where a response token is predicted: the rest is never used
        loss = F.cross_entropy(gpt.lm_head(hidden[:, :-1][rows]).float(), targets[rows])
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        optim.step()
        losses.append(loss.item())
        n_tokens += int(batch["attention_mask"].sum())
        if step in keep:
            checkpoints[step] = {k: v.detach().to("cpu", copy=True) for k, v in gpt.state_dict().items()}
        if on_step is not None:
            on_step(step, total, losses[-1])
    gpt.eval()
    log = {"rows": len(encoded), "steps": total, "tokens": n_tokens, "tokenizer_seconds": round(t_tok, 3),
           "seconds": round(time.perf_counter() - t0, 3), "loss_first": losses[0], "loss_last": losses[-1],
           "loss_last10": sum(losses[-10:]) / len(losses[-10:]), "checkpoint_steps": sorted(checkpoints)}
    return TrainedProxy(gpt, tokenizer, opts, checkpoints, log)
