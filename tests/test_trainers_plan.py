"""Every trainer recipe of the README keeps the plan, proven on real runs: `torchrun --nproc-per-node 2` (gloo, CPU)
trains a tiny Llama (built here, save_pretrained, loaded by path) through the HF Trainer, TRL's SFTTrainer, a
plain DistributedSampler loop and an Accelerate loop, on what `export` wrote; `verify` checks each rank's logged
ids against the shards, and one step's weighted loss is recomputed by hand. The traps (the Trainer's default
shuffling sampler, TRL packing, a rank-local loader handed to accelerator.prepare, a batch-interleaved file under
DistributedSampler) must make `verify` fail,
naming the problem. All scenarios share one torchrun job (one start-up of the two processes)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from shard_helpers import make_selection
from tiny_lm import build_llama

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
WORLD, M = 2, 2
SCENARIOS = ["hf", "hf-sequential", "hf-random", "hf-resumed", "trl", "trl-packing", "trl-dpo", "axolotl",
             "axolotl-shuffled", "torchrun", "torchrun-on-hf-export", "accelerate", "accelerate-rank-local"]

# one worker runs the whole module: the other would wait the job out on its lock
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trainers-job")]


def _shards(tmp: Path, name: str, data: Path) -> Path:
    from cluster_curate.commands.shard import shard
    make_selection(tmp / f"{name}-sel.parquet", data, k=3, fraction=0.3, n_tokens=True)
    shard(str(tmp / f"{name}-sel.parquet"), str(data), str(tmp / name), num_shards=WORLD, micro_batch_size=M)
    return tmp / name


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The one torchrun job, run once per test session. The module's xdist group keeps its tests on one worker;
    the file lock in the session's base temporary directory shares the job when another --dist spreads them."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's base (popen-gwN) is inside the session's
        base = base.parent
    tmp = base / "trainers-job"  # not the parent of a plain session's base: that one is every session's
    paths = {"tmp": tmp, "model": tmp / "model", "qa": tmp / "shards", "chat": tmp / "chat-shards",
             "pref": tmp / "pref-shards", "logs": tmp / "logs"}
    with FileLock(str(tmp) + ".lock"):
        done = tmp / "done"
        if not done.exists():
            if tmp.exists():  # a job that failed earlier in this session: start over
                import shutil
                shutil.rmtree(tmp)
            tmp.mkdir()
            _run_job(tmp)
            done.write_text("ok")
    return paths


def _run_job(tmp: Path) -> None:
    import cluster_curate as cc

    model = build_llama(tmp / "model", layers=1, hidden=32)
    qa = _shards(tmp, "shards", FIXTURES / "gsm8k" / "train-300.jsonl")
    chat = _shards(tmp, "chat-shards", FIXTURES / "chat" / "messages-300.jsonl")
    for target in ("hf", "accelerate", "torchrun"):
        cc.export(str(qa), trainer=target, out=str(tmp / target), world_size=WORLD, micro_batch_size=M)
    for target in ("trl", "axolotl"):
        cc.export(str(chat), trainer=target, out=str(tmp / target), world_size=WORLD, micro_batch_size=M)
    from test_input_formats import preference_rows  # GSM8K questions, the right answer chosen, a wrong one rejected
    pref_data = tmp / "preference.jsonl"
    pref_data.write_text("".join(json.dumps(r) + "\n" for r in preference_rows(40, "conversational")))
    pref = _shards(tmp, "pref-shards", pref_data)
    cc.export(str(pref), trainer="trl", out=str(tmp / "trl-dpo"), world_size=WORLD, micro_batch_size=M)
    # this checkout's cluster_curate, not the one the environment may have installed (editable, elsewhere)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
           "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    start = time.monotonic()
    # --standalone: torchrun binds a port the OS chooses and keeps it; a port found free here and let go could be
    # taken by a test running beside this one before torchrun bound it
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(WORLD), str(ROOT / "tests" / "plan_trainers_job.py"),
                           str(model), str(tmp), str(tmp / "logs"), *SCENARIOS],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"torchrun job, {len(SCENARIOS)} scenarios: {time.monotonic() - start:.1f} s")


def _check(job, scenario, shards_key):
    import cluster_curate as cc
    result = cc.verify(str(job[shards_key]), log=str(job["logs"] / scenario))
    return result, result["report"]


def _total(result, kind):
    return sum(r[kind] for r in result["ranks"])


def _consumed(job, scenario, rank):
    from cluster_curate.commands.verify import read_consumed
    return read_consumed(job["logs"] / scenario, WORLD)[rank]


def _shard_ids(shards: Path, rank: int) -> list[int]:
    from cluster_curate.loader import shard_files
    return pq.read_table(shard_files(shards)[rank], columns=["id"]).column("id").to_pylist()


def _hand_loss(model_dir, rows_by_id, ids, encode, weighted: bool = True) -> float:
    """Step 0 of a rank, recomputed from the saved model: per example, the mean cross-entropy over its label
    tokens (each example alone, no padding); then the mean of weight × that over the micro-batch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    total = 0.0
    with torch.no_grad():
        for i in ids:
            enc = encode(tok, rows_by_id[i])
            logits = model(input_ids=torch.tensor([enc["input_ids"]])).logits[0, :-1]
            labels = torch.tensor(enc["labels"][1:])
            keep = labels != -100
            if keep.any():  # an example whose response was cut off entirely contributes 0
                w = rows_by_id[i]["weight"] if weighted else 1.0
                total += w * float(torch.nn.functional.cross_entropy(logits[keep], labels[keep]))
    return total / len(ids)


def _rows(path: Path) -> dict[int, dict]:
    return {r["id"]: r for r in pq.read_table(path).to_pylist()}


def _assert_plan_held(job, scenario, shards_key, encode, data_file):
    check, table = _check(job, scenario, shards_key)
    assert check["ok"], table
    rows = _rows(data_file)
    for rank in range(WORLD):
        log = _consumed(job, scenario, rank)
        assert [i for rec in log for i in rec["ids"]] == _shard_ids(job[shards_key], rank)  # shard r, in order
        assert all(len(rec["ids"]) == M for rec in log)
        assert [w for rec in log for w in rec["weights"]] == pytest.approx([rows[i]["weight"] for rec in log
                                                                            for i in rec["ids"]])
    first = _consumed(job, scenario, 0)[0]
    assert first["loss"] == pytest.approx(_hand_loss(job["model"], rows, first["ids"], encode), rel=1e-4)
    # the weights matter at this tolerance: the unweighted mean is another number
    unweighted = _hand_loss(job["model"], rows, first["ids"], encode, weighted=False)
    assert first["loss"] != pytest.approx(unweighted, rel=1e-3)


def _qa(tok, row):
    from plan_trainers_job import encode_qa
    return encode_qa(tok, row["question"], row["answer"])


def _chat(tok, row):
    from plan_trainers_job import encode_chat_like_trl
    return encode_chat_like_trl(tok, row["prompt"], row["completion"])


def test_hf_trainer_with_the_mixin_keeps_the_plan(job):
    _assert_plan_held(job, "hf", "qa", _qa, job["tmp"] / "hf" / "train.parquet")


def test_hf_trainer_sequential_switch_keeps_the_plan(job):
    _assert_plan_held(job, "hf-sequential", "qa", _qa, job["tmp"] / "hf" / "train.parquet")


def test_hf_trainer_resumed_from_a_checkpoint_keeps_the_plan_and_its_log(job):
    """A run resumed from its checkpoint wiped each rank's log (ConsumedIdsCallback opened it afresh), and verify
    blamed a rank that 'consumed only 1/2 of its own shard'. The log keeps the micro-batches up to the checkpoint
    (not the one step trained after it and again on resuming), and the whole run verifies as the plan."""
    _assert_plan_held(job, "hf-resumed", "qa", _qa, job["tmp"] / "hf" / "train.parquet")
    for rank in range(WORLD):
        assert [r["step"] for r in _consumed(job, "hf-resumed", rank)] == list(range(len(_consumed(job, "hf", rank))))


def test_trl_sft_trainer_keeps_the_plan(job):
    _assert_plan_held(job, "trl", "chat", _chat, job["tmp"] / "trl" / "train.parquet")


def test_trl_dpo_trainer_keeps_the_plan(job):
    """DPOTrainer with the mixin on `export --for trl` of preference pairs: each rank trains exactly its shard's
    pairs in order, M per step; the loss is DPO's own (at step 0 the policy is its reference: log 2 for every pair),
    not a weighted cross-entropy, and the weights are only logged (the export's README says so)."""
    check, table = _check(job, "trl-dpo", "pref")
    assert check["ok"], table
    rows = _rows(job["tmp"] / "trl-dpo" / "train.parquet")
    assert {"prompt", "chosen", "rejected"} <= set(next(iter(rows.values())))
    for rank in range(WORLD):
        log = _consumed(job, "trl-dpo", rank)
        assert [i for rec in log for i in rec["ids"]] == _shard_ids(job["pref"], rank)  # shard r, in order
        assert all(len(rec["ids"]) == M for rec in log)
        assert [w for rec in log for w in rec["weights"]] == pytest.approx([rows[i]["weight"] for rec in log
                                                                            for i in rec["ids"]])
        assert log[0]["loss"] == pytest.approx(math.log(2), rel=1e-5)
    assert "`weight` is NOT applied" in (job["tmp"] / "trl-dpo" / "README.md").read_text()


def test_axolotl_plugin_logs_a_run_that_verify_accepts(job):
    """`export --for axolotl` trained as its config.yaml says (plugin, trainer_cls, dataset type, resolved as axolotl
    resolves them): each rank logged its shard's ids in order, M per step, under OUTPUT_DIR/consumed, and `verify`
    accepts the run; no weight is logged (axolotl's loss is its own)."""
    check, table = _check(job, "axolotl/consumed", "chat")
    assert check["ok"], table
    for rank in range(WORLD):
        log = _consumed(job, "axolotl/consumed", rank)
        assert [i for rec in log for i in rec["ids"]] == _shard_ids(job["chat"], rank)
        assert all(len(rec["ids"]) == M and "weights" not in rec for rec in log)


def test_axolotl_shuffled_merged_dataset_fails_verify(job):
    """The same run with `shuffle_merged_datasets` at axolotl's default: the rows reach other ranks, and the
    plugin's log shows it."""
    check, table = _check(job, "axolotl-shuffled/consumed", "chat")
    assert not check["ok"]
    assert _total(check, "wrong_rank") > 0 and "shuffling sampler" in table


def test_torchrun_distributed_sampler_keeps_the_plan(job):
    _assert_plan_held(job, "torchrun", "qa", _qa, job["tmp"] / "torchrun" / "train.parquet")


def test_accelerate_loop_keeps_the_plan(job):
    _assert_plan_held(job, "accelerate", "qa", _qa, job["tmp"] / "accelerate" / "train.parquet")


def test_default_trainer_sampler_fails_verify(job):
    check, table = _check(job, "hf-random", "qa")
    assert not check["ok"]
    assert _total(check, "wrong_rank") > 0
    assert "shuffling sampler" in table and "train_sampling_strategy='random'" in table


def test_trl_packing_fails_verify(job):
    check, table = _check(job, "trl-packing", "chat")
    assert not check["ok"]
    assert "packing" in table
    log = _consumed(job, "trl-packing", 0)
    assert any(len(rec["ids"]) > M for rec in log)  # several examples per packed row
    assert -1 not in [i for rec in log for i in rec["ids"]]  # every packed segment was traced to its example


def test_rank_local_loader_in_accelerate_fails_verify(job):
    check, table = _check(job, "accelerate-rank-local", "qa")
    assert not check["ok"]
    assert f"only 1/{WORLD} of its own shard" in table and "accelerator.prepare" in table
    for rank in range(WORLD):
        consumed = [i for rec in _consumed(job, "accelerate-rank-local", rank) for i in rec["ids"]]
        own = _shard_ids(job["qa"], rank)
        assert set(consumed) <= set(own) and len(consumed) == len(own) // WORLD  # silent loss of half the shard


def test_wrong_layout_under_distributed_sampler_fails_verify(job):
    check, table = _check(job, "torchrun-on-hf-export", "qa")
    assert not check["ok"]
    # with 2 ranks and micro-batches of 2 the two wrong layouts consume the same order: verify says it is one
    # of them (the wrong export for the trainer) without naming an opposite cause beside it
    assert "the wrong export layout" in table and "ambiguous" in table and "sample-interleaved but" not in table


def test_mixin_refuses_length_grouping(tmp_path):
    """The plan already groups lengths; a length-grouping sampler would reorder it, so the mixin says so."""
    import datasets
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from cluster_curate.integrations.hf import PlanTrainerMixin

    class PlanTrainer(PlanTrainerMixin, Trainer):
        pass

    model = AutoModelForCausalLM.from_pretrained(build_llama(tmp_path / "m", layers=1, hidden=32))
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]], "labels": [[1, 2, 3]], "id": [0], "weight": [1.0]})
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                             train_sampling_strategy="group_by_length")
    with pytest.raises(ValueError, match="reorders the planned rows"):
        PlanTrainer(model=model, args=args, train_dataset=ds)


def test_a_row_without_an_id_is_refused_in_words():
    """A dataset mixed in beside the export (axolotl's `datasets:` list holds both) gives rows whose id is None:
    the collator said `TypeError: 'NoneType' object cannot be interpreted as an integer` from torch.tensor."""
    from transformers import default_data_collator

    from cluster_curate.integrations.hf import _KeepPlanColumns

    collate = _KeepPlanColumns(default_data_collator)
    assert collate([{"input_ids": [1, 2], "id": 4}, {"input_ids": [3, 4], "id": 5}])["id"].tolist() == [4, 5]
    with pytest.raises(ValueError, match="rows of another dataset are mixed with the export's"):
        collate([{"input_ids": [1, 2], "id": 4}, {"input_ids": [3, 4], "id": None}])
