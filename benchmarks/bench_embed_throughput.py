"""Throughput of the model features (features/extractors.py) against plain passes of the same model.

Targets (issue 3), measured on the same GSM8K batches in one run, per model:
  * `gradient` >= 0.9x a plain forward pass (model(...) with its full logits, no grad);
  * `lora-gradient` >= 0.75x a plain forward+backward training step (loss over response tokens, backward
    with weight gradients; no optimiser step, which only makes the reference faster);
  * `lora-gradient` >= 5x the naive way at the same output dimension: per-example backward for the weight
    gradients of the same linear layers, flattened, then a dense Gaussian projection to D dims.

Models: the proxy-size GPT (features/gpt.py, the `small` proxy: 3 layers, d_model 128, vocab 4096), a
small Llama from a transformers config (4 layers, hidden 256, vocab 32000), and SmolLM2-135M-Instruct
(GGUF, `make smollm2`) when present. Weights are random except SmolLM2's (speed does not depend on them).

The naive projection is timed with one [CHUNK, D] Gaussian block reused along the flattened gradient and all
the batch's per-example gradients projected together (one GEMM per block): the same FLOPs as a dense
[P, D] matrix, which would not fit in memory (P x D x 4 bytes is 19 GB for the proxy at D = 8192), with far
better cache behaviour than streaming a real one. The naive time is therefore a lower bound, and it is
measured on the first rows of the first batch, in one round (its cost is per example and it is far from its
target), and compared per token.

Timing: torch.set_num_threads(1); methods are interleaved round by round and the median round is kept
(the machine is shared: compare the ratios, which are measured side by side).

    .venv/bin/python benchmarks/bench_embed_throughput.py [--quick] [--no-smollm2]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import common

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cluster_curate.features.extractors import extract, lora_projector, select_linear_layers  # noqa: E402
from cluster_curate.features.models import collate, encode_examples, load_model, wrap_gpt  # noqa: E402
from cluster_curate.io.datasets import Example  # noqa: E402

GSM8K = common.DATA / "gsm8k" / "train.jsonl"
SMOLLM2 = common.ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
CHUNK = 4096
TARGETS = {"gradient_vs_forward": 0.9, "lora_vs_train_step": 0.75, "lora_vs_naive": 5.0}


def gsm8k_examples(n: int) -> list[Example]:
    rows = []
    with open(GSM8K) as f:
        for i, line in enumerate(f):
            if i >= n:
                break
            r = json.loads(line)
            rows.append(Example(i, [{"role": "user", "content": r["question"]}], r["answer"]))
    return rows


def bpe_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<pad>")


# ------------------------------------------------------------------------------------------- reference passes
def plain_forward(fm, batch):
    with torch.no_grad():
        if hasattr(fm.module, "hidden_states"):  # the proxy GPT
            return fm.module(batch["input_ids"], batch["attention_mask"])
        return fm.module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def response_loss(fm, model, batch):
    if hasattr(model, "hidden_states"):
        logits = model(batch["input_ids"], batch["attention_mask"])
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100)
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss


def train_step(fm, batch):
    model = fm.module
    model.requires_grad_(True)
    try:
        response_loss(fm, model, batch).backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.requires_grad_(False)


def naive_lora(fm, batch, layer_names: list[str], dim: int, block: torch.Tensor):
    """Per-example backward for the weight gradients of the layers, flattened, then a dense projection."""
    model = fm.module
    modules = dict(model.named_modules())
    weights = [modules[n].weight for n in layer_names]
    for w in weights:
        w.requires_grad_(True)
    try:
        flat = []
        for i in range(batch["input_ids"].shape[0]):
            n = int(batch["attention_mask"][i].sum())
            one = {k: batch[k][i:i + 1, :n] for k in ("input_ids", "attention_mask", "labels")}
            grads = torch.autograd.grad(response_loss(fm, model, one), weights)
            flat.append(torch.cat([g.flatten() for g in grads]))
        g = torch.stack(flat)                                   # [B, P]
        out = torch.zeros(g.shape[0], dim)
        for start in range(0, g.shape[1], CHUNK):
            part = g[:, start:start + CHUNK]
            out += part @ block[:part.shape[1]]
        return out
    finally:
        for w in weights:
            w.requires_grad_(False)


# ------------------------------------------------------------------------------------------- one model
def bench_model(label: str, fm, examples, *, batch_size: int, lora_dim: int, layers, naive_rows: int,
                rounds: int, max_length: int) -> dict:
    enc, skipped = encode_examples(fm.tokenizer, examples, max_length)
    enc.sort(key=lambda e: e.n_tokens)  # length-sorted buckets, as `embed` batches them
    batches = [collate(enc[i:i + batch_size], fm.pad_id, fm.device) for i in range(0, len(enc), batch_size)]
    tokens = [int(b["attention_mask"].sum()) for b in batches]
    projector = lora_projector(fm, lora_dim, seed=0, layers=layers)
    names = [n for n, _ in select_linear_layers(fm, layers)]
    n_params = sum(dict(fm.module.named_modules())[n].weight.numel() for n in names)
    block = torch.randn(CHUNK, lora_dim) / lora_dim ** 0.5
    # naive: the first `naive_rows` rows (its cost is per example), measured per token
    naive_batch = {k: v[:naive_rows] if k != "n_response_tokens" else v for k, v in batches[0].items()}

    methods = {
        "forward": (lambda b: plain_forward(fm, b), range(len(batches))),
        "gradient": (lambda b: extract(fm, b, "gradient"), range(len(batches))),
        "train_step": (lambda b: train_step(fm, b), range(len(batches))),
        "lora-gradient": (lambda b: extract(fm, b, "lora-gradient", projector=projector), range(len(batches))),
        "naive": (lambda b: naive_lora(fm, naive_batch, names, lora_dim, block), [0]),
    }
    for m, (fn, idx) in methods.items():  # warm-up (allocator, lazy init); naive is slow enough without
        if m != "naive":
            fn(batches[list(idx)[0]])
    times: dict[str, list[float]] = {m: [] for m in methods}
    for r in range(rounds):
        for m, (fn, idx) in methods.items():
            if m == "naive" and r > 0:
                continue  # the slowest method by far (and far from its target): one round
            t0 = time.perf_counter()
            for i in idx:
                fn(batches[i])
            times[m].append(time.perf_counter() - t0)
    res = {"model": label, "name": fm.name, "rows": len(enc), "skipped": len(skipped), "batches": len(batches),
           "batch_size": batch_size, "tokens": sum(tokens), "hidden": fm.hidden_size, "vocab": fm.vocab_size,
           "lora_layers": len(names), "lora_params": n_params, "lora_dim": lora_dim,
           "naive_rows": int(naive_batch["input_ids"].shape[0]), "methods": {}}
    for m, (fn, idx) in methods.items():
        if m == "naive":
            tok, rows = int(naive_batch["attention_mask"].sum()), int(naive_batch["input_ids"].shape[0])
        else:
            tok = sum(tokens[i] for i in idx)
            rows = sum(int(batches[i]["input_ids"].shape[0]) for i in idx)
        sec = statistics.median(times[m])
        res["methods"][m] = {"seconds": sec, "tokens_per_s": tok / sec, "rows_per_s": rows / sec,
                             "rounds": len(times[m])}
    thr = {m: v["tokens_per_s"] for m, v in res["methods"].items()}
    res["ratios"] = {"gradient_vs_forward": thr["gradient"] / thr["forward"],
                     "lora_vs_train_step": thr["lora-gradient"] / thr["train_step"],
                     "lora_vs_naive": thr["lora-gradient"] / thr["naive"]}
    res["pass"] = {k: res["ratios"][k] >= TARGETS[k] for k in TARGETS}
    return res


def main() -> None:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rows and rounds (a smoke run)")
    ap.add_argument("--no-smollm2", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rounds = args.rounds or (2 if args.quick else 3)
    n_rows = 8 if args.quick else 24
    examples = gsm8k_examples(max(n_rows, 2000))
    texts = [ex.prompt[0]["content"] + "\n" + ex.response for ex in examples]
    tok = bpe_tokenizer(texts, 4096)
    examples = examples[:n_rows]
    results = []
    started = time.perf_counter()

    from cluster_curate.features.gpt import GPT, GPTConfig
    gpt = GPT(GPTConfig(vocab_size=len(tok), n_layer=3, n_head=4, d_model=128, max_len=1024))
    results.append(bench_model("proxy GPT (3L, d128, V4096)", wrap_gpt(gpt, tok), examples, batch_size=8,
                               lora_dim=8192, layers=None, naive_rows=8, rounds=rounds, max_length=1024))
    print_row(results[-1])

    import tempfile

    from transformers import LlamaConfig, LlamaForCausalLM
    with tempfile.TemporaryDirectory() as tmp:
        cfg = LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                          tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id)
        LlamaForCausalLM(cfg).save_pretrained(tmp)
        tok.save_pretrained(tmp)
        fm = load_model(tmp, device="cpu")
        results.append(bench_model("small Llama (4L, h256, V32000)", fm, examples, batch_size=8, lora_dim=4096,
                                   layers=None, naive_rows=4, rounds=rounds, max_length=1024))
        print_row(results[-1])
        del fm

    if SMOLLM2.is_file() and not args.no_smollm2:
        fm = load_model(str(SMOLLM2), device="cpu")
        results.append(bench_model("SmolLM2-135M-Instruct (GGUF)", fm, examples[:4], batch_size=4,
                                   lora_dim=2048, layers=None, naive_rows=1, rounds=2, max_length=1024))
        print_row(results[-1])
    else:
        print(f"SmolLM2 skipped: {SMOLLM2} absent (make smollm2)" if not args.no_smollm2 else "SmolLM2 skipped")

    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor() or
            platform.machine(), "loadavg_end": os.getloadavg(), "wall_s": time.perf_counter() - started,
            "quick": args.quick, "targets": TARGETS}
    write_table(results, meta)


def print_row(r: dict) -> None:
    m, q = r["methods"], r["ratios"]
    print(f"\n{r['model']}: {r['rows']} GSM8K rows, {r['tokens']} tokens, batches of {r['batch_size']}; "
          f"lora over {r['lora_layers']} layers ({r['lora_params'] / 1e6:.2f}M weights) -> {r['lora_dim']} dims")
    print(f"  {'method':<15}{'tokens/s':>10}{'rows/s':>9}")
    for name, v in m.items():
        extra = f"   (on {r['naive_rows']} rows)" if name == "naive" else ""
        print(f"  {name:<15}{v['tokens_per_s']:>10.1f}{v['rows_per_s']:>9.3f}{extra}")
    for k, v in q.items():
        print(f"  {k:<22}{v:>7.2f}x  target >= {TARGETS[k]}x  {'PASS' if r['pass'][k] else 'FAIL'}")


def write_table(results: list[dict], meta: dict) -> None:
    lines = ["# embed feature throughput", "",
             "`benchmarks/bench_embed_throughput.py` (CPU, torch.set_num_threads(1), shared machine: ratios are "
             "measured side by side in one run, median of interleaved rounds).", "",
             "| model | rows | tokens | forward tok/s | gradient tok/s | train step tok/s | lora-gradient tok/s "
             "| naive tok/s | gradient / forward (>= 0.9) | lora / train step (>= 0.75) | lora / naive (>= 5) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        m, q = r["methods"], r["ratios"]
        lines.append(f"| {r['model']} | {r['rows']} | {r['tokens']} | {m['forward']['tokens_per_s']:.0f} | "
                     f"{m['gradient']['tokens_per_s']:.0f} | {m['train_step']['tokens_per_s']:.0f} | "
                     f"{m['lora-gradient']['tokens_per_s']:.0f} | {m['naive']['tokens_per_s']:.1f} | "
                     f"{q['gradient_vs_forward']:.2f}x | {q['lora_vs_train_step']:.2f}x | {q['lora_vs_naive']:.1f}x |")
    lines += ["", "lora-gradient: LoGra-style hooks, one backward per batch, projected to `lora_dim` "
              "(all linear layers but the LM head; proxy 8192, small Llama 4096, SmolLM2 2048). "
              "Naive: per-example backward + dense projection at the same dim (timed on the first rows, one round; "
              "a lower bound, see the script's docstring).", "",
              f"Run: torch {meta['torch']}, {meta['wall_s']:.0f} s wall, load average at the end "
              f"{', '.join(f'{x:.1f}' for x in meta['loadavg_end'])}."]
    common.write_results("embed_throughput", lines, {"meta": meta, "results": results}, quiet=True)
    print(f"\nwrote {common.RESULTS / 'embed_throughput.md'} and .json ({meta['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
