"""Real model, real mixture (for a GPU machine, about 10 minutes on one H200): fine-tune the pretrained
SmolLM2-135M on GSM8K + Code Alpaca (code at --code-share of the rows) with the full data, a random 31% and the
tool's 31% (its defaults end to end through `cluster-curate embed / cluster / select`), 1 seed each, the same
number of epochs, and report the held-out response loss per source.

The model is the GGUF file of `make smollm2`, loaded through transformers (`from_pretrained(dir,
gguf_file=...)`, dequantised to float32, then trained in bfloat16 autocast). Loss on the response tokens only;
AdamW lr 5e-5, warm-up 3%, cosine, batch --batch-size, sequences cut at --max-len tokens. Held out: the GSM8K
test split (first --test-rows) and Code Alpaca rows outside the training pool (--test-rows // 4).

    make smollm2
    python benchmarks/bench_smollm2_mix.py --device cuda            # pool 4,000 rows, 2 epochs
    python benchmarks/bench_smollm2_mix.py --device cpu --quick     # smoke: 64 rows, 1 step each
    python benchmarks/bench_smollm2_mix.py --device cpu --quick --model DIR   # the same with another model

Writes benchmarks/results/smollm2_mix.md and .json. Data: ../shared/data (GSM8K: MIT; Code Alpaca: CC BY-NC
4.0), read in place.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import common

SMOLLM2 = common.ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
FRACTION = 0.31


def load_mix(pool_rows: int, code_share: float, test_rows: int, seed: int = 0):
    """(pool, held-out) lists of {"instruction", "output", "source"}; code rows are `code_share` of the pool."""
    gsm = [json.loads(line) for line in (common.DATA / "gsm8k" / "train.jsonl").open()]
    gsm_test = [json.loads(line) for line in (common.DATA / "gsm8k" / "test.jsonl").open()][:test_rows]
    code = [r for r in json.loads((common.DATA / "code_alpaca" / "code_alpaca_2k.json").read_text())
            if r["output"].strip()]
    rng = random.Random(seed)
    rng.shuffle(code)
    n_code = round(pool_rows * code_share)
    as_row = lambda r: {"instruction": r["instruction"] + ("\n" + r["input"] if r.get("input") else ""),  # noqa: E731
                        "output": r["output"], "source": "code"}
    pool = [{"instruction": r["question"], "output": r["answer"], "source": "gsm8k"} for r in gsm[:pool_rows - n_code]]
    pool += [as_row(r) for r in code[:n_code]]
    rng.shuffle(pool)
    held = [{"instruction": r["question"], "output": r["answer"], "source": "gsm8k"} for r in gsm_test]
    held += [as_row(r) for r in code[n_code:n_code + max(1, test_rows // 4)]]
    return pool, held


def tool_selection(pool: list[dict], budget: int, work: Path, log: list) -> list[int]:
    data = work / "pool.jsonl"
    data.write_text("".join(json.dumps({k: r[k] for k in ("instruction", "output")}) + "\n" for r in pool))
    common.cli(["embed", data, "--out", work / "e.parquet", "--overwrite"], log)
    common.cli(["cluster", work / "e.parquet", "--out", work / "c.parquet", "--overwrite"], log)
    common.cli(["select", work / "c.parquet", "--out", work / "s.parquet", "--budget", budget, "--overwrite"], log)
    return sorted(pq.read_table(work / "s.parquet", columns=["id"]).column("id").to_pylist())


def load_model(path: Path, device: str):
    """A GGUF file (dequantised to float32) or a model folder, as `embed --model` takes either."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not path.exists():
        raise SystemExit(f"{path} is missing" + (": run `make smollm2`" if path == SMOLLM2 else ""))
    where = dict(pretrained_model_name_or_path=path.parent, gguf_file=path.name) if path.is_file() else dict(
        pretrained_model_name_or_path=path)
    tok = AutoTokenizer.from_pretrained(**where)
    model = AutoModelForCausalLM.from_pretrained(**where, dtype=torch.float32).to(device)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, model


def encode(tok, rows: list[dict], max_len: int):
    out = []
    for r in rows:
        p = tok(r["instruction"] + "\n", add_special_tokens=False)["input_ids"]
        a = tok(r["output"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids = (p + a)[:max_len]
        out.append((ids, min(len(p), len(ids))))
    return out


def batches(encoded, batch_size: int, rng: random.Random):
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i][0]), rng.random()))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(chunks)
    return chunks


def collate(encoded, idx, pad_id: int, device: str):
    import torch
    t = max(len(encoded[i][0]) for i in idx)
    ids = torch.full((len(idx), t), pad_id, dtype=torch.long)
    labels = torch.full((len(idx), t), -100, dtype=torch.long)
    mask = torch.zeros((len(idx), t), dtype=torch.long)
    for b, i in enumerate(idx):
        s, n_prompt = encoded[i]
        ids[b, :len(s)] = torch.tensor(s)
        mask[b, :len(s)] = 1
        labels[b, n_prompt:len(s)] = torch.tensor(s[n_prompt:])
    return ids.to(device), mask.to(device), labels.to(device)


def train_and_score(rows, held, a, seed: int) -> dict:
    import torch
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok, model = load_model(Path(a.model), a.device)
    enc = encode(tok, rows, a.max_len)
    steps = a.max_steps or a.epochs * math.ceil(len(enc) / a.batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    warm = max(1, int(0.03 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 *
                                              (1 + math.cos(math.pi * min(1.0, s / steps))))
    amp = dict(device_type="cuda", dtype=torch.bfloat16) if a.device.startswith("cuda") else None
    model.train()
    t0, step, last = time.perf_counter(), 0, float("nan")
    while step < steps:
        for idx in batches(enc, a.batch_size, rng):
            ids, mask, labels = collate(enc, idx, tok.pad_token_id, a.device)
            with torch.autocast(**amp) if amp else torch.enable_grad():
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            last = float(loss.detach())
            if step >= steps:
                break
    train_s = time.perf_counter() - t0
    model.eval()
    per = {}
    with torch.no_grad():
        for source in sorted({r["source"] for r in held}):
            e = encode(tok, [r for r in held if r["source"] == source], a.max_len)
            total, count = 0.0, 0
            for s in range(0, len(e), a.batch_size):
                ids, mask, labels = collate(e, list(range(s, min(s + a.batch_size, len(e)))), tok.pad_token_id,
                                            a.device)
                with torch.autocast(**amp) if amp else torch.no_grad():
                    logits = model(input_ids=ids, attention_mask=mask).logits.float()
                lp = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                                       labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum")
                total += float(lp)
                count += int((labels[:, 1:] != -100).sum())
            per[source] = total / max(1, count)
    return {"rows": len(rows), "steps": steps, "final_train_loss": last, "train_seconds": train_s,
            "held_out_loss": per}


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--rows", type=int, default=4000, help="training pool (GSM8K + code)")
    ap.add_argument("--code-share", type=float, default=0.07, help="share of code rows in the pool (0.05-0.10)")
    ap.add_argument("--test-rows", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=None, help="cap the steps (smoke runs)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=384)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="smoke: 64 pool rows, 16 held out, 1 step per run")
    ap.add_argument("--model", default=str(SMOLLM2), help="the GGUF file or model folder to fine-tune")
    ap.add_argument("--results", default=None, help="where the table goes (default benchmarks/results)")
    a = ap.parse_args(argv)
    if a.quick:
        a.rows, a.test_rows, a.max_steps, a.batch_size = 64, 16, 1, 4
    pool, held = load_mix(a.rows, a.code_share, a.test_rows, a.seed)
    budget = round(FRACTION * len(pool))
    log: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        tool_ids = tool_selection(pool, budget, Path(tmp), log)
        curate_s = time.perf_counter() - t0
    random_ids = sorted(np.random.default_rng(a.seed).choice(len(pool), budget, replace=False).tolist())
    contenders = {"full": list(range(len(pool))), "random 31%": random_ids, "tool 31%": tool_ids}
    results = {}
    for name, ids in contenders.items():
        rows = [pool[i] for i in ids]
        res = train_and_score(rows, held, a, a.seed)
        res["code_rows"] = sum(r["source"] == "code" for r in rows)
        results[name] = res
        print(f"{name}: {json.dumps(res)}", flush=True)
    sources = sorted(next(iter(results.values()))["held_out_loss"])
    model = "SmolLM2-135M" if Path(a.model) == SMOLLM2 else Path(a.model).name
    lines = [f"# {model} fine-tuned on GSM8K + Code Alpaca: held-out response loss per source", "",
             f"Pool {len(pool)} rows ({a.code_share:.0%} code), budget {budget} ({FRACTION:.0%}); {a.epochs} epochs "
             f"(same for every contender), batch {a.batch_size}, lr {a.lr}, seed {a.seed}, device {a.device}; tool "
             f"curation {curate_s:.1f} s.", "",
             "| contender | rows | code rows | steps | " + " | ".join(f"held-out loss {s}" for s in sources)
             + " | train s |", "|---|---|---|---|" + "---|" * len(sources) + "---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['rows']} | {r['code_rows']} | {r['steps']} | "
                     + " | ".join(f"{r['held_out_loss'][s]:.4f}" for s in sources) + f" | {r['train_seconds']:.0f} |")
    lines += ["", "Tool commands:", *[f"- `{c}`" for c in log]]
    common.write_results("smollm2_mix" + ("_quick" if a.quick else ""), lines, {"config": vars(a), "results": results,
                                                                           "commands": log}, argv, a.results)


if __name__ == "__main__":
    main()
