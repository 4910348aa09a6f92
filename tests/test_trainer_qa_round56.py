"""QA round 56, trainers run for real:

1. The README's HF recipe under `torchrun --nproc-per-node 2` on CPU: without `use_cpu=True` transformers reports
   NOT_PARALLEL, world size 1, and PlanTrainerMixin told the user to re-shard for 1 rank; with `ddp_backend="gloo"`
   alone it reports world size 2 but wraps no DDP, and each rank trained alone to weights of its own. The mixin now
   refuses both before the first step, saying how to make the Trainer data-parallel.
2. `ConsumedLog` outside torchrun logged every process as rank 0 (two plain processes reading shards 0 and 1
   emptied one log) and picked rank 0 with RANK set and no WORLD_SIZE, where load_shard refuses. It now logs as the
   shard the process read, refuses a log another process holds, and warns when it replaces an earlier run's log.
3. `export --for torchrun` (planned for 3 ranks) dealt by a bare DistributedSampler on 2 processes trained with no
   message; `cluster_curate.loader.distributed_sampler`, which the export's README names, refuses it.

One `torchrun --nproc-per-node 2` job (gloo, CPU) runs the scenarios of 1 and 3; it is this file, run as a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cluster_curate as cc
from cluster_curate import loader
from cluster_curate.errors import CurateError

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
       "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
M = 2


def _shards(root: Path, ranks: int) -> Path:
    from conftest import FIXTURES
    from shard_helpers import make_selection

    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    if not (root / "sel.parquet").exists():
        make_selection(root / "sel.parquet", data, k=3, fraction=0.04, n_tokens=True)  # 12 rows
    shards = root / f"shards-{ranks}"
    cc.shard(str(root / "sel.parquet"), str(data), str(shards), num_shards=ranks, micro_batch_size=M)
    return shards


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The torchrun job: exports for 2 ranks (hf) and for 3 (torchrun), a tiny Llama; each rank writes what each
    scenario said to OUT/SCENARIO-rank-R.txt."""
    from tiny_lm import build_llama

    root = tmp_path_factory.mktemp("r56")
    model = build_llama(root / "model", layers=1, hidden=32)
    cc.export(str(_shards(root, 2)), trainer="hf", out=str(root / "hf-2"), world_size=2, micro_batch_size=M)
    cc.export(str(_shards(root, 3)), trainer="torchrun", out=str(root / "torchrun-3"), world_size=3,
              micro_batch_size=M)
    cc.export(str(root / "shards-2"), trainer="torchrun", out=str(root / "torchrun-2"), world_size=2,
              micro_batch_size=M)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           __file__, str(model), str(root)], env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root


def _said(root: Path, scenario: str) -> list[str]:
    return [(root / f"{scenario}-rank-{r}.txt").read_text() for r in range(2)]


PARALLEL_HINT = ("each rank would train the whole dataset into its own weights; make the Trainer data-parallel "
                 "(on CPU: TrainingArguments(use_cpu=True, ddp_backend=\"gloo\"))")


@pytest.mark.slow
def test_the_readme_recipe_without_use_cpu_is_refused_as_not_parallel(job):
    """Not 're-run shard --num-shards 1': the job has 2 processes, the Trainer would train each alone."""
    assert _said(job, "hf-no-use-cpu") == [
        f"PlanTrainerMixin: this process is rank {r} of 2 (torch.distributed / torchrun) but its TrainingArguments "
        f"train it alone (parallel_mode not_parallel, world size 1): {PARALLEL_HINT}" for r in range(2)]


@pytest.mark.slow
def test_ddp_backend_gloo_alone_is_refused_where_it_trained_each_rank_alone(job):
    assert _said(job, "hf-gloo-only") == [
        f"PlanTrainerMixin: this process is rank {r} of 2 (torch.distributed / torchrun) but its TrainingArguments "
        f"train it alone (parallel_mode not_parallel, world size 2): {PARALLEL_HINT}" for r in range(2)]


@pytest.mark.slow
def test_the_torchrun_exports_sampler_refuses_another_world_size(job):
    assert _said(job, "sampler-3-on-2") == [
        f"{job / 'torchrun-3'}: written for 3 data-parallel ranks but this job has world size 2 (run it on 3 "
        "processes, or re-run `cluster-curate shard --num-shards 2` and export again)"] * 2


@pytest.mark.slow
def test_the_torchrun_exports_sampler_deals_each_rank_its_shard(job):
    """On the planned world size it is DistributedSampler(shuffle=False): rank r reads shard r's ids in order."""
    import pyarrow.parquet as pq

    ids = pq.read_table(job / "torchrun-2" / "train.parquet").column("id").to_pylist()
    said = [json.loads(s) for s in _said(job, "sampler-2-on-2")]
    for r in range(2):
        assert said[r] == [ids[i] for i in range(r, len(ids), 2)]
        assert said[r] == pq.read_table(job / "shards-2" / f"shard-0000{r}-of-00002.parquet").column("id").to_pylist()


def test_the_sampler_outside_a_job_is_refused(tmp_path, monkeypatch):
    """One plain process on an export for 3: world size 1, refused as load_shard refuses it."""
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    cc.export(str(_shards(tmp_path, 3)), trainer="torchrun", out=str(tmp_path / "tr"), world_size=3,
              micro_batch_size=M)
    with pytest.raises(CurateError) as e:
        loader.distributed_sampler(tmp_path / "tr", list(range(18)))
    assert str(e.value) == (f"{tmp_path / 'tr'}: written for 3 data-parallel ranks but this job has world size 1 "
                            "(run it on 3 processes, or re-run `cluster-curate shard --num-shards 1` and export "
                            "again)")
    # a tensor- or pipeline-parallel job passes its data-parallel rank and world size, as to load_shard
    sampler = loader.distributed_sampler(tmp_path / "tr", list(range(18)), rank="2", world_size=3)
    assert list(sampler) == list(range(2, 18, 3))
    with pytest.raises(CurateError, match="rank 3 out of range"):
        loader.distributed_sampler(tmp_path / "tr", list(range(18)), rank=3, world_size=3)
    assert "cluster_curate.loader.distributed_sampler(EXPORT_DIR, ds)" in (tmp_path / "tr" / "README.md").read_text()


# -------------------------------------------------------------------------------------------- 2. ConsumedLog

PLAIN = textwrap.dedent("""
    import sys
    from cluster_curate.loader import ConsumedLog, load_shard
    shard = load_shard(sys.argv[1], rank=sys.argv[2])
    with ConsumedLog(sys.argv[3]) as log:
        for b in shard.micro_batches(["id", "weight"]):
            log.record(b["id"], b["weight"])
""")


def _plain_env():
    return {k: v for k, v in ENV.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}


def test_two_plain_processes_log_as_the_shards_they_read(tmp_path):
    """`python train.py 0` and `python train.py 1` (no torchrun): rank-00000 and rank-00001, and verify passes,
    where both wrote rank-00000.jsonl (the second emptying the first) and verify blamed a shuffling sampler."""
    shards = _shards(tmp_path, 2)
    for r in range(2):
        subprocess.run([sys.executable, "-c", PLAIN, str(shards), str(r), str(tmp_path / "log")], env=_plain_env(),
                       check=True, timeout=120)
    assert sorted(p.name for p in (tmp_path / "log").iterdir()) == ["rank-00000.jsonl", "rank-00001.jsonl"]
    result = cc.verify(str(shards), log=str(tmp_path / "log"))
    assert result["ok"], result["report"]


def test_a_log_another_process_is_writing_is_refused_not_emptied(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys
        from cluster_curate.loader import ConsumedLog
        log = ConsumedLog(sys.argv[1], rank=0)
        log.record([7, 8])
        print("open", flush=True)
        sys.stdin.read()
        log.close()
    """), str(tmp_path)], env=_plain_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        with pytest.raises(CurateError) as e:
            loader.ConsumedLog(tmp_path, rank=0)
        assert str(e.value) == (f"{tmp_path / 'rank-00000.jsonl'}: another process is writing this log: two "
                                "processes log as rank 0 (pass each the rank= of the shard it reads)")
        assert (tmp_path / "rank-00000.jsonl").read_text() == '{"step": 0, "ids": [7, 8]}\n'
    finally:
        holder.communicate("", timeout=60)


def test_rank_without_world_size_logs_as_the_shard_load_shard_read(tmp_path, monkeypatch):
    """RANK=1 without WORLD_SIZE is no job: load_shard refuses a folder of 2 without rank=, and ConsumedLog logs
    as the rank it was given there (it picked rank 0)."""
    monkeypatch.setattr(loader, "_RANKS_READ", set())
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", "1")
    shards = _shards(tmp_path, 2)
    with pytest.raises(CurateError, match="this process is no rank of a job"):
        loader.load_shard(shards)
    loader.load_shard(shards, rank=os.environ["RANK"])
    with loader.ConsumedLog(tmp_path / "log") as log:
        assert log.path == tmp_path / "log" / "rank-00001.jsonl"


def test_one_process_reading_two_shards_names_the_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_RANKS_READ", set())
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    shards = _shards(tmp_path, 2)
    loader.load_shard(shards, rank=1)
    with loader.ConsumedLog(tmp_path / "log") as log:
        assert log.rank == 1
    loader.load_shard(shards, rank=0)
    with pytest.raises(CurateError) as e:
        loader.ConsumedLog(tmp_path / "log")
    assert str(e.value) == (f"ConsumedLog({str(tmp_path / 'log')!r}): this process read shards [0, 1] with "
                            "load_shard: pass rank= (the shard this log is for)")


def test_an_earlier_runs_log_is_replaced_with_a_warning_and_a_resume_keeps_it(tmp_path):
    from cluster_curate import console

    with loader.ConsumedLog(tmp_path, rank=0) as log:
        log.record([1, 2])
        log.record([3, 4])
    del console.WARNINGS[:]
    with loader.ConsumedLog(tmp_path, rank=0, resume_at=1) as log:  # the trim rule: no warning
        log.record([5, 6])
    assert console.WARNINGS == []
    assert [json.loads(x)["ids"] for x in (tmp_path / "rank-00000.jsonl").read_text().splitlines()] == [[1, 2], [5, 6]]
    with loader.ConsumedLog(tmp_path, rank=0) as log:
        log.record([9, 9])
    assert console.WARNINGS == [f"{tmp_path / 'rank-00000.jsonl'}: replaced the log of 2 micro-batches an earlier "
                                "run wrote (a run resumed from a checkpoint keeps its lines: the Trainer's "
                                "resume_from_checkpoint, or resume_at= in a loop of your own)"]
    assert (tmp_path / "rank-00000.jsonl").read_text() == '{"step": 0, "ids": [9, 9]}\n'


# ------------------------------------------------------------------------------------ the torchrun job itself

def _job(model_dir: str, root: str) -> None:
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from cluster_curate.integrations.hf import PlanTrainerMixin
    from plan_trainers_job import encode_qa

    torch.set_num_threads(1)
    root = Path(root)
    rank = int(os.environ["RANK"])

    def said(scenario, text):
        (root / f"{scenario}-rank-{rank}.txt").write_text(text)

    class PlanTrainer(PlanTrainerMixin, Trainer):
        pass

    model, tok = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    ds = datasets.load_dataset("parquet", data_files=str(root / "hf-2" / "train.parquet"), split="train",
                               cache_dir=str(root / f".hf-{rank}"))
    ds = ds.map(lambda r: encode_qa(tok, r["question"], r["answer"]))
    # the README's recipe as written (no use_cpu), then with ddp_backend="gloo" alone: refused before a step
    for scenario, kw in (("hf-no-use-cpu", {}), ("hf-gloo-only", {"ddp_backend": "gloo"})):
        args = TrainingArguments(output_dir=str(root / scenario), per_device_train_batch_size=M, max_steps=1,
                                 train_sampling_strategy="sequential", report_to="none", save_strategy="no",
                                 disable_tqdm=True, **kw)
        try:
            PlanTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                        data_collator=DataCollatorForSeq2Seq(tok, label_pad_token_id=-100)).train()
            said(scenario, "trained")
        except CurateError as e:
            said(scenario, str(e))
    for scenario, export in (("sampler-3-on-2", "torchrun-3"), ("sampler-2-on-2", "torchrun-2")):
        data = datasets.load_dataset("parquet", data_files=str(root / export / "train.parquet"), split="train",
                                     cache_dir=str(root / f".hf-{rank}"))
        try:
            sampler = loader.distributed_sampler(root / export, data)
            said(scenario, json.dumps([data[i]["id"] for i in sampler]))
        except CurateError as e:
            said(scenario, str(e))


if __name__ == "__main__":
    _job(*sys.argv[1:])
    # leave without interpreter finalization, which can abort while Gloo's threads hold Python references
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_a_persistent_dataloader_worker_does_not_hold_the_log_against_its_own_process(tmp_path):
    """A DataLoader worker forked while a log is open inherited flock's lock and kept it after the log closed: the
    process's next log (a second run, a retry) was refused as "another process is writing this log". A record lock
    (lockf) is not inherited."""
    from torch.utils.data import DataLoader
    log = loader.ConsumedLog(tmp_path, rank=0)
    workers = DataLoader(list(range(8)), batch_size=2, num_workers=1, persistent_workers=True)
    for batch in workers:
        log.record(batch.tolist())
    log.close()
    with loader.ConsumedLog(tmp_path, rank=0, resume_at=4) as again:  # the worker is still alive
        again.record([9, 9])
    assert len((tmp_path / "rank-00000.jsonl").read_text().splitlines()) == 5
    del workers


def test_a_file_system_without_locks_logs_unchecked(tmp_path, monkeypatch):
    """Lustre without -o flock (ENOSYS), NFS without lockd (ENOLCK): the lock's OSError crashed the training at
    on_train_begin. The log is written without the check."""
    import errno
    import fcntl

    def no_locks(*_):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "lockf", no_locks)
    with loader.ConsumedLog(tmp_path, rank=0) as log:
        log.record([1, 2])
    assert (tmp_path / "rank-00000.jsonl").read_text().count("\n") == 1
