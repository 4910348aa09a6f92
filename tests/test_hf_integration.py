"""ConsumedIdsCallback on a Trainer resumed from a checkpoint, when the accumulation does not divide an epoch's
micro-batches: the Trainer ends each epoch's last accumulation early (6 micro-batches at 4 a step are 2 steps), so
step 2 is 6 micro-batches trained, not 8. The log kept 8 lines (2 of the second epoch, which the resumed run trained
again) and `verify` failed a run that followed the plan. One process, a real Trainer on `export --for hf`."""

from __future__ import annotations

import pytest

import cluster_curate as cc
from cluster_curate.integrations.hf import trained_micro_batches
from conftest import FIXTURES
from shard_helpers import make_selection
from tiny_lm import build_llama


@pytest.mark.parametrize("step, accumulation, per_epoch, trained", [
    (2, 4, 6, 6), (3, 4, 6, 10), (4, 4, 6, 12), (5, 2, 10, 10), (6, 2, 10, 12), (3, 4, None, 12), (0, 4, 6, 0)])
def test_trained_micro_batches_counts_each_epochs_short_last_step(step, accumulation, per_epoch, trained):
    assert trained_micro_batches(step, accumulation, per_epoch) == trained


@pytest.mark.slow
def test_a_run_resumed_at_an_epochs_end_keeps_its_log_to_that_step(tmp_path):
    import datasets
    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from cluster_curate.commands.verify import read_consumed
    from cluster_curate.integrations.hf import ConsumedIdsCallback, PlanTrainerMixin
    from cluster_curate.loader import shard_files
    from plan_trainers_job import encode_qa

    class PlanTrainer(PlanTrainerMixin, Trainer):
        pass

    model_dir = build_llama(tmp_path / "model", layers=1, hidden=32)
    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.04, n_tokens=True)  # 12 rows: 6 micro-batches
    cc.shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "shards"), num_shards=1, micro_batch_size=2)
    cc.export(str(tmp_path / "shards"), trainer="hf", out=str(tmp_path / "hf"), world_size=1, micro_batch_size=2)

    def train(**kw):
        model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
        ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "hf" / "train.parquet"), split="train",
                                   cache_dir=str(tmp_path / ".hf"))
        ds = ds.map(lambda r: encode_qa(tok, r["question"], r["answer"]))
        resume = kw.pop("resume", None)
        args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2,
                                 gradient_accumulation_steps=4, num_train_epochs=2, learning_rate=1e-3,
                                 report_to="none", logging_strategy="no", use_cpu=True, disable_tqdm=True,
                                 dataloader_num_workers=0, seed=0, **kw)
        PlanTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                    data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100),
                    callbacks=[ConsumedIdsCallback(tmp_path / "log")]).train(resume_from_checkpoint=resume)

    # stopped one step into the second epoch (as a crash would), after the checkpoint at the first epoch's end
    train(max_steps=3, save_strategy="steps", save_steps=2)
    train(resume=str(tmp_path / "out" / "checkpoint-2"), save_strategy="no")
    shard = pq.read_table(shard_files(tmp_path / "shards")[0], columns=["id"]).column("id").to_pylist()
    log = read_consumed(tmp_path / "log", 1)[0]
    assert [i for rec in log for i in rec["ids"]] == shard + shard
    result = cc.verify(str(tmp_path / "shards"), log=str(tmp_path / "log"))
    assert result["ok"], result["report"]


def test_padding_free_micro_batches_weight_each_example(tmp_path):
    """TRL's `padding_free=True` hands the loss one row of the micro-batch's examples end to end: the weights were
    broadcast over that row's one pooled loss (weights (3, 0, 0) trained all three examples). Each example's loss
    is its segment's now, as the padded micro-batch gives it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from cluster_curate.integrations.hf import weighted_causal_lm_loss
    model_dir = build_llama(tmp_path / "model", layers=1, hidden=32)
    model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    texts = ["How many clips did Natalia sell?", "The answer is 72. #### 72", "def add(a, b):\n    return a + b"]
    examples = [{"input_ids": tok(t)["input_ids"], "completion_mask": [0, 0] + [1] * (len(tok(t)["input_ids"]) - 2)}
                for t in texts]
    padded = DataCollatorForLanguageModeling(tok.pad_token_id)(examples)
    flat = DataCollatorForLanguageModeling(tok.pad_token_id, padding_free=True)(examples)
    assert flat["input_ids"].shape[0] == 1
    with torch.no_grad():
        padded_logits = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
        # each example attending to itself alone, as flash attention does on the row (the CPU's does not)
        flat_logits = torch.cat([model(input_ids=torch.tensor([e["input_ids"]])).logits for e in examples], 1)
    for weights in ([3.0, 0.0, 0.0], [1.0, 2.0, 0.5]):
        weight = torch.tensor(weights)
        expected = weighted_causal_lm_loss(padded_logits, padded["labels"], weight)
        got = weighted_causal_lm_loss(flat_logits, flat["labels"], weight, flat["position_ids"])
        assert float(got) == pytest.approx(float(expected), rel=1e-5), weights
