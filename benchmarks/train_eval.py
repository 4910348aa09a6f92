"""Train the small GPT from scratch on CPU on given rows (a dataset, a subset of its ids, or the tool's shards)
and score it: greedy exact match per category, and held-out response loss.

The same recipe for every contender (so a 31% subset really costs 31% of the steps): word-level tokens
(numbers, words, punctuation: one token each), GPT(n_layer=3, d_model=128, n_head=4) from
cluster_curate/features/gpt.py, loss on response + end token, AdamW lr 3e-3, betas (0.9, 0.98), weight decay
0.01, warm-up 3%, cosine to 10%, clip 1.0, batch 32 bucketed by length, a fixed number of EPOCHS.

Any dataset the tool reads works (JSONL/JSON/Parquet; Alpaca, prompt/completion, question/answer,
messages); `--skill-field` names a category column to score per category. A directory of the tool's shards
(`shard-*.parquet` + manifest.json) is read whole; its `weight` column scales each row's loss with
`--use-weights`.

    python benchmarks/train_eval.py --train DATA_OR_SHARDS --test TEST [--skill-field skill] [--epochs 80]
        [--seed 0] [--ids IDS.json] [--use-weights] [--score exact|final] [--json OUT.json]
"""

from __future__ import annotations

import json
import math
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import common
from cluster_curate.features.gpt import GPT, GPTConfig, cosine_lr

TOKEN_RE = re.compile(r"\d+|[^\W\d_]+|[^\w\s]|_")
PAD, UNK, SEP, EOS = "<pad>", "<unk>", "<sep>", "<eos>"


def words(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


# ============================================================================================ data

@dataclass
class Row:
    id: int
    prompt: str
    response: str
    skill: str | None = None
    weight: float = 1.0


def _prompt_text(turns) -> str:
    if isinstance(turns, str):
        return turns
    return "\n".join(str(t.get("content", "")) for t in turns)


def _parse_record(rec: dict, prompt_field: str | None, response_field: str | None):
    """Fallback parser (used when the tool's reader cannot open the source): the common SFT layouts."""
    if prompt_field and response_field:
        return str(rec[prompt_field]), str(rec[response_field])
    if "messages" in rec or "conversations" in rec:
        turns = rec.get("messages") or rec.get("conversations")
        turns = [{"role": t.get("role", t.get("from")), "content": t.get("content", t.get("value"))} for t in turns]
        last = max(i for i, t in enumerate(turns) if t["role"] in ("assistant", "gpt"))
        return _prompt_text(turns[:last]), str(turns[last]["content"])
    for p, r in (("instruction", "output"), ("instruction", "response"), ("prompt", "completion"),
                 ("prompt", "response"), ("question", "answer")):
        if p in rec and r in rec:
            prompt = str(rec[p])
            if p == "instruction" and rec.get("input"):
                prompt = f"{prompt}\n\n{rec['input']}"
            return prompt, str(rec[r])
    raise ValueError(f"cannot find prompt/response fields among {sorted(rec)}")


def _records_pyarrow(path: Path, columns: list[str] | None = None) -> list[dict]:
    import pyarrow.parquet as pq
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    recs = []
    for f in files:
        recs.extend(pq.read_table(f, columns=columns).to_pylist())
    return recs


def shard_order(path: str | Path) -> list[tuple[int, float]]:
    """(id, weight) of a shards directory's rows in the order load_rows reads them, without their text."""
    return [(int(r["id"]), float(r["weight"]) if r.get("weight") is not None else 1.0)
            for r in _records_pyarrow(Path(path), columns=["id", "weight"])]


def load_rows(path: str | Path, skill_field: str | None = None, prompt_field: str | None = None,
              response_field: str | None = None) -> list[Row]:
    """Rows of a dataset (through the tool's reader when it can read it) or of a directory of shards
    (every shard, in shard order; `id` and `weight` columns kept)."""
    path = Path(path)
    recs = None
    if not (path.is_dir() and (path / "manifest.json").exists()):
        try:
            from cluster_curate.io.datasets import ReadOptions, open_dataset
            ds = open_dataset(str(path), ReadOptions(prompt_field=prompt_field, response_field=response_field))
            rows = []
            for batch in ds.iter_batches():
                raw = {r["id"]: r for r in batch.raw.to_pylist()}
                for ex in batch.examples:
                    rec = raw[ex.id]
                    rows.append(Row(ex.id, _prompt_text(ex.prompt), ex.response,
                                    None if skill_field is None else str(rec.get(skill_field)),
                                    float(rec.get("weight") or 1.0) if "weight" in rec else 1.0))
            return rows
        except Exception:  # noqa: BLE001 - the reader is still growing; fall back to the plain layouts
            recs = None
    recs = _records_pyarrow(path)
    rows = []
    for i, rec in enumerate(recs):
        prompt, response = _parse_record(rec, prompt_field, response_field)
        rows.append(Row(int(rec.get("id", i)), prompt, response,
                        None if skill_field is None else str(rec.get(skill_field)),
                        float(rec["weight"]) if rec.get("weight") is not None else 1.0))
    return rows


# ============================================================================================ tokenizer

class WordTokenizer:
    def __init__(self, texts, max_vocab: int = 8000, min_count: int = 1):
        counts = Counter(t for text in texts for t in words(text))
        kept = [w for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if c >= min_count]
        self.itos = [PAD, UNK, SEP, EOS] + kept[: max_vocab - 4]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(w, 1) for w in words(text)]

    def decode(self, ids) -> list[str]:
        return [self.itos[i] for i in ids]


def build_tokenizer(rows_for_vocab: list[Row], max_vocab: int = 8000) -> WordTokenizer:
    return WordTokenizer([t for r in rows_for_vocab for t in (r.prompt, r.response)], max_vocab=max_vocab)


def encode_row(tok: WordTokenizer, row: Row, max_len: int):
    """(ids, number of prompt tokens incl. <sep>); the prompt is cut from the left if the row is too long."""
    p = tok.encode(row.prompt) + [tok.stoi[SEP]]
    r = tok.encode(row.response) + [tok.stoi[EOS]]
    r = r[: max_len - 1]
    p = p[-(max_len - len(r)):]
    return p + r, len(p)


# ============================================================================================ train

@dataclass
class TrainConfig:
    epochs: int = 80
    batch_size: int = 32
    lr: float = 3e-3
    betas: tuple = (0.9, 0.98)
    weight_decay: float = 0.01
    warmup_frac: float = 0.03
    floor_frac: float = 0.1
    clip: float = 1.0
    n_layer: int = 3
    d_model: int = 128
    n_head: int = 4
    max_len: int = 256
    seed: int = 0
    use_weights: bool = False
    threads: int = 1
    device: str = "cpu"  # the recipe is the same on "cuda" (float32, no TF32); only the arithmetic's order differs


def _batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Bucketed by length: sort by length (random tie-break), cut into batches, shuffle the batch order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def _pad(seqs: list[list[int]]):
    t = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), t, dtype=torch.long)
    mask = torch.zeros(len(seqs), t, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = True
    return ids, mask


def _loss_targets(encoded, batch):
    """Targets for next-token loss on response tokens + <eos> only (-100 elsewhere)."""
    seqs = [encoded[i][0] for i in batch]
    ids, mask = _pad(seqs)
    targets = torch.full_like(ids, -100)
    for b, i in enumerate(batch):
        s, n_prompt = encoded[i]
        targets[b, n_prompt - 1:len(s) - 1] = torch.tensor(s[n_prompt:])
    return ids, mask, targets


def train(rows: list[Row], tok: WordTokenizer, cfg: TrainConfig, log=None) -> tuple[GPT, dict]:
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    dev = torch.device(cfg.device)
    model = GPT(GPTConfig(vocab_size=len(tok), n_layer=cfg.n_layer, n_head=cfg.n_head, d_model=cfg.d_model,
                          max_len=cfg.max_len)).to(dev)
    encoded = [encode_row(tok, r, cfg.max_len) for r in rows]
    weights = torch.tensor([r.weight if cfg.use_weights else 1.0 for r in rows], dtype=torch.float32, device=dev)
    lengths = [len(e[0]) for e in encoded]
    steps_per_epoch = math.ceil(len(rows) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=cfg.betas)
    model.train()
    step, t0, losses, epoch_losses = 0, time.perf_counter(), [], []
    for epoch in range(cfg.epochs):
        for batch in _batches(lengths, cfg.batch_size, rng):
            ids, mask, targets = (t.to(dev) for t in _loss_targets(encoded, batch))
            for g in opt.param_groups:
                g["lr"] = cosine_lr(step, total, cfg.lr, cfg.warmup_frac, cfg.floor_frac)
            logits = model(ids, mask)
            tok_loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-100,
                                       reduction="none").view(targets.shape)
            valid = (targets != -100).float()
            w = weights[batch][:, None] * valid
            loss = (tok_loss * w).sum() / valid.sum().clamp(min=1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            epoch_losses.append(loss.detach())  # no .item() here: on a GPU it would wait for every step
            step += 1
        losses.append(float(torch.stack(epoch_losses).mean()))
        epoch_losses.clear()
        if log:
            log(f"epoch {epoch + 1}/{cfg.epochs} loss {losses[-1]:.4f}")
    return model, {"steps": step, "train_seconds": time.perf_counter() - t0,
                   "final_train_loss": losses[-1] if losses else float("nan")}


# ============================================================================================ evaluate

def final_answer(tokens: list[str], marker: list[str]) -> list[str]:
    """Tokens after the last occurrence of `marker` (the whole sequence when it is absent)."""
    for i in range(len(tokens) - len(marker), -1, -1):
        if tokens[i:i + len(marker)] == marker:
            return tokens[i + len(marker):]
    return tokens if not marker else []


@torch.no_grad()
def greedy_answers(model: GPT, tok: WordTokenizer, rows: list[Row], max_new: int, batch_size: int = 256):
    """Greedy decoding, batched by exact prompt length (no padding, so identical to one-by-one decoding)."""
    model.eval()
    dev = next(model.parameters()).device
    eos = tok.stoi[EOS]
    prompts = [(tok.encode(r.prompt) + [tok.stoi[SEP]])[-(model.cfg.max_len - max_new):] for r in rows]
    out: list[list[int]] = [[] for _ in rows]
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    for _, idx in sorted(by_len.items()):
        for s in range(0, len(idx), batch_size):
            chunk = idx[s:s + batch_size]
            ids = torch.tensor([prompts[i] for i in chunk], device=dev)
            done = torch.zeros(len(chunk), dtype=torch.bool)
            for _ in range(max_new):
                nxt = model(ids)[:, -1].argmax(-1).cpu()
                for b, i in enumerate(chunk):
                    if not done[b]:
                        if int(nxt[b]) == eos:
                            done[b] = True
                        else:
                            out[i].append(int(nxt[b]))
                if bool(done.all()):
                    break
                ids = torch.cat([ids, nxt[:, None].to(dev)], dim=1)
    return out


@torch.no_grad()
def response_loss(model: GPT, tok: WordTokenizer, rows: list[Row], max_len: int, batch_size: int = 64) -> float:
    """Mean next-token loss over response tokens + <eos> of held-out rows."""
    model.eval()
    dev = next(model.parameters()).device
    encoded = [encode_row(tok, r, max_len) for r in rows]
    total, count = 0.0, 0
    order = sorted(range(len(rows)), key=lambda i: len(encoded[i][0]))
    for s in range(0, len(order), batch_size):
        batch = order[s:s + batch_size]
        ids, mask, targets = (t.to(dev) for t in _loss_targets(encoded, batch))
        logits = model(ids, mask)
        total += float(F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-100,
                                       reduction="sum"))
        count += int((targets != -100).sum())
    return total / max(1, count)


def evaluate(model: GPT, tok: WordTokenizer, test: list[Row], score: str = "exact",
             marker: str = "Answer:", max_new: int | None = None, generate: bool = True) -> dict:
    result = {"test_loss": response_loss(model, tok, test, model.cfg.max_len)}
    if not generate:
        return result
    marker_toks = words(marker) if score == "final" else []
    if max_new is None:
        max_new = max(len(tok.encode(r.response)) for r in test) + 2
    preds = greedy_answers(model, tok, test, max_new)
    per: dict[str, list[int]] = {}
    for r, p in zip(test, preds):
        gold = words(r.response)
        got = tok.decode(p)
        ok = final_answer(got, marker_toks) == final_answer(gold, marker_toks) if score == "final" else got == gold
        per.setdefault(r.skill if r.skill is not None else "all", []).append(int(ok))
    acc = {k: float(np.mean(v)) for k, v in sorted(per.items())}
    result.update({"per_skill": acc, "macro": float(np.mean(list(acc.values()))),
                   "worst": float(min(acc.values())),
                   "micro": float(np.mean([x for v in per.values() for x in v]))})
    return result


def run(train_rows: list[Row], test_rows: list[Row], vocab_rows: list[Row], cfg: TrainConfig,
        score: str = "exact", marker: str = "Answer:", max_vocab: int = 8000, generate: bool = True,
        log=None) -> dict:
    """Train on `train_rows`, evaluate on `test_rows`; the vocabulary comes from `vocab_rows` (the same for
    every contender of a comparison, so every model has the same size)."""
    tok = build_tokenizer(vocab_rows, max_vocab=max_vocab)
    model, info = train(train_rows, tok, cfg, log=log)
    t0 = time.perf_counter()
    res = evaluate(model, tok, test_rows, score=score, marker=marker, generate=generate)
    info.update(res)
    info.update({"rows": len(train_rows), "eval_seconds": time.perf_counter() - t0, "vocab": len(tok),
                 "parameters": model.num_parameters(), "epochs": cfg.epochs, "seed": cfg.seed,
                 "device": cfg.device})
    return info


def main(argv=None):
    ap = common.parser(__doc__)
    ap.add_argument("--train", required=True, help="dataset file, or a directory of the tool's shards")
    ap.add_argument("--test", required=True, help="held-out dataset (same format)")
    ap.add_argument("--vocab-from", default=None,
                    help="dataset whose tokens make the vocabulary (default: the training rows + the test rows)")
    ap.add_argument("--ids", default=None, help="JSON list of ids of --train to keep (a selection)")
    ap.add_argument("--skill-field", default=None, help="category column to score per category")
    ap.add_argument("--prompt-field", default=None)
    ap.add_argument("--response-field", default=None)
    ap.add_argument("--epochs", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--use-weights", action="store_true", help="scale each row's loss by its `weight` column")
    ap.add_argument("--score", choices=["exact", "final"], default="exact")
    ap.add_argument("--marker", default="Answer:", help="with --score final: the answer follows its last occurrence")
    ap.add_argument("--no-generate", action="store_true", help="only the held-out response loss")
    ap.add_argument("--max-vocab", type=int, default=8000)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (same recipe, float32)")
    ap.add_argument("--json", default=None, help="write the result here")
    a = ap.parse_args(argv)
    rows = load_rows(a.train, a.skill_field, a.prompt_field, a.response_field)
    if a.ids:
        keep = set(json.loads(Path(a.ids).read_text()))
        rows = [r for r in rows if r.id in keep]
    test = load_rows(a.test, a.skill_field, a.prompt_field, a.response_field)
    vocab_rows = load_rows(a.vocab_from, None, a.prompt_field, a.response_field) if a.vocab_from else rows
    cfg = TrainConfig(epochs=a.epochs, seed=a.seed, use_weights=a.use_weights, max_len=a.max_len, threads=a.threads,
                      device=a.device)
    res = run(rows, test, vocab_rows + test, cfg, score=a.score, marker=a.marker, max_vocab=a.max_vocab,
              generate=not a.no_generate, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
