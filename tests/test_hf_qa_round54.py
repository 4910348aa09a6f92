"""PlanTrainerMixin on an export run with other sizes than its plan: `torchrun --nproc_per_node 3` on an export for 2
ranks, or per_device_train_batch_size=3 where the plan's micro-batch is 4, trained to rc=0 and only `verify` said
so afterwards (load_shard refuses such a job at once). The mixin now refuses before the first step: the rows a
planned step holds (the `step` column every trainer layout keeps, num_shards × micro_batch_size) must be the rows
the job deals a step (world size × per_device_train_batch_size). One process, a real Trainer on `export --for hf`."""

from __future__ import annotations

import pytest

import cluster_curate as cc
from cluster_curate.errors import CurateError
from conftest import FIXTURES
from shard_helpers import make_selection
from tiny_lm import build_llama


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny Llama and 12 selected GSM8K rows, sharded and exported for 2 ranks and for 1, micro-batch 2."""
    root = tmp_path_factory.mktemp("plan")
    model_dir = build_llama(root / "model", layers=1, hidden=32)
    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    make_selection(root / "sel.parquet", data, k=3, fraction=0.04, n_tokens=True)  # 12 rows
    for ranks in (1, 2):
        shards = root / f"shards-{ranks}"
        cc.shard(str(root / "sel.parquet"), str(data), str(shards), num_shards=ranks, micro_batch_size=2)
        cc.export(str(shards), trainer="hf", out=str(root / f"hf-{ranks}"), world_size=ranks, micro_batch_size=2)
    return root, model_dir


def _train(root, model_dir, export, out, batch, accumulation=1):
    """The README's HF Trainer recipe with PlanTrainerMixin, in this one process (world size 1)."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from cluster_curate.integrations.hf import ConsumedIdsCallback, PlanTrainerMixin
    from plan_trainers_job import encode_qa

    class PlanTrainer(PlanTrainerMixin, Trainer):
        pass

    model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    ds = datasets.load_dataset("parquet", data_files=str(root / export / "train.parquet"), split="train",
                               cache_dir=str(out / ".hf"))
    ds = ds.map(lambda r: encode_qa(tok, r["question"], r["answer"]))
    args = TrainingArguments(output_dir=str(out / "out"), per_device_train_batch_size=batch,
                             gradient_accumulation_steps=accumulation, num_train_epochs=1, learning_rate=1e-3,
                             train_sampling_strategy="sequential", report_to="none", logging_strategy="no",
                             save_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    PlanTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                data_collator=DataCollatorForSeq2Seq(tok, padding=True, label_pad_token_id=-100),
                callbacks=[ConsumedIdsCallback(out / "log")]).train()


@pytest.mark.parametrize("export, batch, planned", [("hf-2", 2, 4), ("hf-1", 3, 2)])
def test_a_job_other_than_the_plans_is_refused_before_the_first_step(built, tmp_path, export, batch, planned):
    """An export for 2 ranks trained on 1, and a per-device batch other than the plan's micro-batch: refused before
    on_train_begin (no step, no log), where they trained to the end."""
    root, model_dir = built
    with pytest.raises(CurateError) as e:
        _train(root, model_dir, export, tmp_path, batch=batch)
    assert str(e.value) == (
        f"PlanTrainerMixin: the train dataset was written for {planned} rows a step (its `step` column: num_shards "
        f"× micro_batch_size) but this job has world size 1 × per_device_train_batch_size {batch} = {batch} rows a "
        "step: run it on the ranks and per-device batch size its export's README.md names (\"Planned for N ranks × "
        f"micro-batch M\"), or re-run `cluster-curate shard --num-shards 1 --micro-batch-size {batch}` and export "
        "again")
    assert not (tmp_path / "log").exists()


@pytest.mark.slow
def test_the_plans_sizes_with_gradient_accumulation_train_and_verify(built, tmp_path):
    """Accumulating micro-batches does not change the micro-batch: the job follows the plan."""
    root, model_dir = built
    _train(root, model_dir, "hf-1", tmp_path, batch=2, accumulation=2)
    result = cc.verify(str(root / "shards-1"), log=str(tmp_path / "log"))
    assert result["ok"], result["report"]


def test_rows_per_planned_step_reads_the_step_column():
    import datasets

    from cluster_curate.integrations.hf import plan_rows_per_step

    assert plan_rows_per_step(datasets.Dataset.from_dict({"step": [0, 0, 0, 1, 1, 1], "id": list(range(6))})) == 3
    # an export repeated (concatenate_datasets([ds, ds])) still holds 3 rows a step; shuffled rows tell no plan
    # (verify's business), not 1 row a step
    repeated = datasets.Dataset.from_dict({"step": [0, 0, 0, 1, 1, 1] * 2, "id": list(range(6)) * 2})
    assert plan_rows_per_step(repeated) == 3
    assert plan_rows_per_step(datasets.Dataset.from_dict({"step": [1, 0, 1, 0, 2, 0, 2, 1, 2]})) is None
    # no plan to read: no `step` column (TRL packing, axolotl's tokenization), or steps of unequal sizes (rows taken
    # out or mixed in before training, which verify names), or no rows
    assert plan_rows_per_step(datasets.Dataset.from_dict({"id": [0, 1]})) is None
    assert plan_rows_per_step(datasets.Dataset.from_dict({"step": [0, 0, 1], "id": [0, 1, 2]})) is None
    assert plan_rows_per_step(datasets.Dataset.from_dict({"step": [0, None, 1, 1]})) is None
    assert plan_rows_per_step(datasets.Dataset.from_dict({"step": []})) is None
    assert plan_rows_per_step([{"step": 0}]) is None  # not a datasets.Dataset
    streamed = datasets.Dataset.from_dict({"step": [0, 0, 1, 1]}).to_iterable_dataset()
    assert plan_rows_per_step(streamed) is None  # no length to count: the Trainer deals it as it streams
