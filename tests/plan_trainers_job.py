"""Launched by tests/test_trainers_plan.py under `torchrun --nproc-per-node 2` (gloo, CPU): trains the tiny Llama of
tests/tiny_lm.py through each trainer recipe of the README ("Training with your trainer") on the data that
`export` wrote, and logs what every rank consumed (LOGROOT/SCENARIO/rank-*.jsonl) for `verify`.

    torchrun --nproc-per-node 2 tests/plan_trainers_job.py MODEL EXPORTS LOGROOT SCENARIO [SCENARIO ...]

EXPORTS/<target>/ is `export --for <target>` of the shards (hf, trl, accelerate, torchrun, axolotl; shards/ and
chat-shards/ beside them; trl-dpo/: `export --for trl` of preference pairs). The scenarios run one after the other in the same two processes (one start-up)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

M = 2          # the shards' --micro-batch-size
MAX_TOKENS = 256


def encode_qa(tok, question: str, answer: str) -> dict:
    """Prompt tokens masked (-100), the response and EOS trained on; cut at MAX_TOKENS."""
    prompt = tok(question + "\n", add_special_tokens=False)["input_ids"]
    response = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = (prompt + response)[:MAX_TOKENS]
    labels = ([-100] * len(prompt) + response)[:MAX_TOKENS]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels}


def encode_chat_like_trl(tok, prompt: list, completion: list) -> dict:
    """What TRL's SFTTrainer makes of a conversational prompt/completion row: the chat template over prompt
    (with the generation prompt) and over prompt + completion; the loss on the tokens after their common prefix."""
    p = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    pc = tok.apply_chat_template(prompt + completion, tokenize=True, return_dict=True)["input_ids"]
    k = 0
    while k < min(len(p), len(pc)) and p[k] == pc[k]:
        k += 1
    return {"input_ids": pc, "attention_mask": [1] * len(pc), "labels": [-100] * k + pc[k:]}


def pad_batch(rows: list[dict], pad_id: int) -> dict:
    width = max(len(r["input_ids"]) for r in rows)
    out = {"input_ids": [], "attention_mask": [], "labels": []}
    for r in rows:
        gap = width - len(r["input_ids"])
        out["input_ids"].append(r["input_ids"] + [pad_id] * gap)
        out["attention_mask"].append(r["attention_mask"] + [0] * gap)
        out["labels"].append(r["labels"] + [-100] * gap)
    return {k: torch.tensor(v) for k, v in out.items()}


def qa_collate(tok):
    def collate(rows):
        batch = pad_batch([encode_qa(tok, r["question"], r["answer"]) for r in rows], tok.pad_token_id)
        batch["id"] = [r["id"] for r in rows]
        batch["weight"] = torch.tensor([r["weight"] for r in rows], dtype=torch.float32)
        return batch
    return collate


def _load(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)


def _parquet(path):
    import datasets
    return datasets.load_dataset("parquet", data_files=str(path), split="train",
                                 cache_dir=str(Path(path).parent / ".hf"))


def _args(cls, out, **kw):
    return cls(**{**dict(output_dir=str(out), per_device_train_batch_size=M, num_train_epochs=1, learning_rate=1e-3,
                         report_to="none", save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
                         dataloader_num_workers=0, seed=0, ddp_backend="gloo"), **kw})


def run_hf(model_dir, exports, log_dir, strategy=None, resume=None, **kw):
    """HF Trainer + PlanTrainerMixin on `export --for hf`, accumulating 2 micro-batches per optimizer step. With
    `strategy`, the Trainer's own sampler for that train_sampling_strategy ("sequential": the version's switch;
    "random": the default, which shuffles). `resume`: a checkpoint to resume from; `kw`: TrainingArguments."""
    from transformers import DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from cluster_curate.integrations.hf import ConsumedIdsCallback, PlanTrainerMixin

    class PlanTrainer(PlanTrainerMixin, Trainer):
        pass

    class OwnSamplerTrainer(PlanTrainerMixin, Trainer):
        _get_train_sampler = Trainer._get_train_sampler

    model, tok = _load(model_dir)
    ds = _parquet(exports / "hf" / "train.parquet")
    ds = ds.map(lambda r: encode_qa(tok, r["question"], r["answer"]))
    cls = PlanTrainer if strategy is None else OwnSamplerTrainer
    args = _args(TrainingArguments, log_dir / "out", train_sampling_strategy=strategy or "sequential",
                 gradient_accumulation_steps=2 if strategy is None else 1, **kw)
    trainer = cls(model=model, args=args, train_dataset=ds, processing_class=tok,
                  data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100),
                  callbacks=[ConsumedIdsCallback(log_dir)])
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))


def run_hf_resumed(model_dir, exports, log_dir):
    """The HF recipe stopped one optimizer step after its checkpoint at step 2 (as a crash would), then resumed from
    that checkpoint to the end of the epoch: the log keeps what was trained up to the checkpoint and goes on."""
    run_hf(model_dir, exports, log_dir, max_steps=3, save_strategy="steps", save_steps=2)
    run_hf(model_dir, exports, log_dir, resume=log_dir / "out" / "checkpoint-2")


def run_trl(model_dir, exports, log_dir, packing=False):
    """TRL SFTTrainer + PlanTrainerMixin on `export --for trl` (conversational prompt/completion)."""
    from trl import SFTConfig, SFTTrainer

    from cluster_curate.integrations.hf import ConsumedIdsCallback, PlanTrainerMixin

    class PlanSFTTrainer(PlanTrainerMixin, SFTTrainer):
        pass

    model, tok = _load(model_dir)
    ds = _parquet(exports / "trl" / "train.parquet")
    extra = {"packing": True, "max_length": 2048} if packing else {"packing": False, "max_length": None}
    args = _args(SFTConfig, log_dir / "out", train_sampling_strategy="sequential", shuffle_dataset=False, **extra)
    trainer = PlanSFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                             callbacks=[ConsumedIdsCallback(log_dir)])
    trainer.train()


def run_trl_dpo(model_dir, exports, log_dir):
    """TRL DPOTrainer + PlanTrainerMixin on `export --for trl` of preference pairs (prompt/chosen/rejected), with
    the settings the export wrote (training_args.json)."""
    import json

    from trl import DPOConfig, DPOTrainer

    from cluster_curate.integrations.hf import ConsumedIdsCallback, PlanTrainerMixin

    class PlanDPOTrainer(PlanTrainerMixin, DPOTrainer):
        pass

    model, tok = _load(model_dir)
    ds = _parquet(exports / "trl-dpo" / "train.parquet")
    written = json.loads((exports / "trl-dpo" / "training_args.json").read_text())
    args = _args(DPOConfig, log_dir / "out", **{k: v for k, v in written.items() if k != "per_device_train_batch_size"})
    trainer = PlanDPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                             callbacks=[ConsumedIdsCallback(log_dir)])
    trainer.train()


def run_axolotl(model_dir, exports, log_dir, shuffled=False):
    """`export --for axolotl` (SFT) as axolotl reads its config.yaml: the plugin, trainer_cls and dataset type it
    names, resolved as axolotl resolves them (tests/axolotl_stand_ins.py: axolotl is not installed; its trainer is
    a transformers Trainer), the rows tokenized as axolotl does, the plugin's callbacks on the trainer; OUTPUT_DIR
    is `log_dir`. With `shuffled`, the trap: `shuffle_merged_datasets` left at axolotl's default (true), which
    shuffles the tokenized dataset (`ds.shuffle(seed=cfg.seed)`) before the trainer sees it."""
    import types

    import yaml
    from transformers import DataCollatorForSeq2Seq, TrainingArguments

    import axolotl_stand_ins as axolotl

    axolotl.install(sys.modules.__setitem__)
    cfg = yaml.safe_load((exports / "axolotl" / "config.yaml").read_text())
    model, tok = _load(model_dir)
    (entry,) = cfg["datasets"]
    ds = axolotl.tokenize_dataset(axolotl.load_strategy(entry["type"], tok, cfg, entry), _parquet(entry["path"]))
    if shuffled:
        ds = ds.shuffle(seed=42)
    plugin = axolotl.load_plugin(cfg["plugins"][0])
    trainer_cls = axolotl.get_cls_from_module_str(cfg["trainer_cls"])
    args = _args(TrainingArguments, log_dir)
    assert args.per_device_train_batch_size == cfg["micro_batch_size"]
    trainer = trainer_cls(model=model, args=args, train_dataset=ds, processing_class=tok,
                          data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100),
                          callbacks=plugin.add_callbacks_pre_trainer(types.SimpleNamespace(output_dir=str(log_dir)),
                                                                     model))
    trainer.train()


def run_torchrun(model_dir, exports, log_dir, target="torchrun"):
    """A plain DDP loop: DistributedSampler(shuffle=False) over `export --for torchrun` (or, the trap, over the
    batch-interleaved `export --for hf`)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from cluster_curate.integrations.hf import weighted_causal_lm_loss
    from cluster_curate.loader import ConsumedLog

    model, tok = _load(model_dir)
    ds = _parquet(exports / target / "train.parquet")
    sampler = DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=dist.get_rank(), shuffle=False)
    loader = DataLoader(ds, batch_size=M, sampler=sampler, collate_fn=qa_collate(tok))
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    with ConsumedLog(log_dir) as log:
        for batch in loader:
            out = ddp(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            loss = weighted_causal_lm_loss(out.logits, batch["labels"], batch["weight"])
            loss.backward()
            opt.step()
            opt.zero_grad()
            log.record(batch["id"], batch["weight"], loss.detach())


def run_accelerate(model_dir, exports, shards, log_dir, rank_local=False):
    """An Accelerate loop: one DataLoader over `export --for accelerate`, dealt by accelerator.prepare; with
    `rank_local`, the trap: each rank's own shard handed to prepare (sharded a second time)."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    from cluster_curate.integrations.hf import weighted_causal_lm_loss
    from cluster_curate.loader import load_shard
    from cluster_curate.loader import ConsumedLog

    acc = Accelerator(cpu=True)
    model, tok = _load(model_dir)
    data = (load_shard(shards, rank=acc.process_index, world_size=acc.num_processes) if rank_local
            else _parquet(exports / "accelerate" / "train.parquet"))
    loader = DataLoader(data, batch_size=M, shuffle=False, collate_fn=qa_collate(tok))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt, loader = acc.prepare(model, opt, loader)
    with ConsumedLog(log_dir, rank=acc.process_index) as log:
        for batch in loader:
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            loss = weighted_causal_lm_loss(out.logits, batch["labels"], batch["weight"])
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            log.record(batch["id"], batch["weight"], loss.detach())


SCENARIOS = {
    "hf": lambda a: run_hf(a.model, a.exports, a.log),
    "hf-sequential": lambda a: run_hf(a.model, a.exports, a.log, strategy="sequential"),
    "hf-random": lambda a: run_hf(a.model, a.exports, a.log, strategy="random"),
    "hf-resumed": lambda a: run_hf_resumed(a.model, a.exports, a.log),
    "trl": lambda a: run_trl(a.model, a.exports, a.log),
    "trl-packing": lambda a: run_trl(a.model, a.exports, a.log, packing=True),
    "trl-dpo": lambda a: run_trl_dpo(a.model, a.exports, a.log),
    "axolotl": lambda a: run_axolotl(a.model, a.exports, a.log),
    "axolotl-shuffled": lambda a: run_axolotl(a.model, a.exports, a.log, shuffled=True),
    "torchrun": lambda a: run_torchrun(a.model, a.exports, a.log),
    "torchrun-on-hf-export": lambda a: run_torchrun(a.model, a.exports, a.log, target="hf"),
    "accelerate": lambda a: run_accelerate(a.model, a.exports, a.exports / "shards", a.log),
    "accelerate-rank-local": lambda a: run_accelerate(a.model, a.exports, a.exports / "shards", a.log, rank_local=True),
}


class _Run:
    def __init__(self, model, exports, log):
        self.model, self.exports, self.log = model, exports, log


def main(argv):
    import torch.distributed as dist

    torch.set_num_threads(1)
    model, exports, log_root, *scenarios = argv
    dist.init_process_group("gloo")
    for name in scenarios:
        torch.manual_seed(0)
        SCENARIOS[name](_Run(model, Path(exports), Path(log_root) / name))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
    # Every scenario's logs are written: leave without interpreter finalization, which can abort while Gloo's
    # threads still hold Python references (see test_distributed_training.py's workers).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
