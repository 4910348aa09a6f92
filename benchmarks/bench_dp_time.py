"""Training time with data parallelism: real torch.distributed (gloo, 2 CPU processes) training from the
tool's shards, full data vs the tool's 31%, and at 31% random vs paper vs the tool's allocation.

Data: the first --rows rows of GSM8K train (real, varied lengths: 58-423 word tokens here). Shards are made by
the tool's own CLI (timed: that is the curation cost):

  full            select --fraction 1.0 of everything, shard --allocation random (the usual DDP baseline)
  tool            the tool's defaults: embed (default features) -> cluster (k auto) -> select --fraction 0.31
                  -> shard --num-shards 2 --micro-batch-size M (default allocation: stratified, token-balanced)
  tool-random     the same 31% selection, shard --allocation random
  tool-padded     the same 31% selection, shard --balance padded (balances M x longest row, what a padding
                  trainer computes)
  tool-unpaired   the same 31% selection, shard --no-pair-lengths (the plan before rows of similar length were
                  paired across clusters; not in the default run: `--configs tool,tool-unpaired -m 1`)
  paper           the paper's recipe: embed --features gradient -> cluster --k 2 (= ranks) --max-size-factor 1.5
                  --groups none -> select --per-cluster-ratio r --within far (r chosen to give ~31%)
                  -> shard --allocation paper

Trainer (same for every configuration): GPT from cluster_curate/features/gpt.py (default 2 layers, d = 64,
4 heads), word-level tokens (benchmarks/train_eval.py's tokenizer, vocabulary from the whole data subset),
loss on response + end token scaled by the shard's `weight`, AdamW 3e-3 with warm-up + cosine, clip 1.0. Each
rank reads its own shard with cluster_curate.loader.load_shard and runs the planned micro-batches in order;
**a micro-batch of M rows is padded to its longest row** (one forward/backward per step, no gradient
accumulation). Gradients are averaged with one explicit all_reduce of a flat buffer per step (what DDP does,
but timed on its own). torch.set_num_threads(1) in every process.

Measured per run: wall time per epoch (between barriers), and per step on every rank: compute (forward +
backward), the all_reduce (= waiting for the other rank + the transfer), and, from an all_gather of the
per-step compute times, the straggler time sum over steps of (max over ranks - own compute). Deterministic
companions (noise-free): padded tokens per rank and step, and their imbalance. Every configuration runs
--repeats times, interleaved (rotated order), and the table quotes medians; the load average is recorded. So
does each curation command (median of --repeats; the first, cold-cache run is reported beside it); every repeat
starts without the command's output and sidecars, so none reuses a text basis or proxy fitted by the one before.

    python benchmarks/bench_dp_time.py                       # 2,000 rows, M = 4, 1 epoch, 3 repeats
    python benchmarks/bench_dp_time.py --rows 300 --repeats 1 --configs full,tool --embed-args=--features=text \
        --name dp_time_smoke                                  # the smoke test's tiny configuration

Writes benchmarks/results/<name>.md and .json (default name dp_time).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from common import DATA, RESULTS, cli as run_cli, default_features, parser, write_results

GSM8K = DATA / "gsm8k" / "train.jsonl"
FRACTION = 0.31
WORLD = 2
CONFIGS = ["full", "tool", "tool-random", "tool-padded", "paper"]
TARGETS = {"train_time_reduction": 0.696, "reduction_counting_curation": 0.60}


# ============================================================================================ curation (the CLI)

def curate(data: Path, work: Path, m: int, configs: list[str], embed_args: list[str], seed: int,
           repeats: int = 1) -> dict:
    """Make every configuration's shards with the tool's commands. Returns per configuration: shard dir,
    curation seconds (the commands a user of that configuration runs; each command run `repeats` times, the
    median, like the training epochs; the first, cold-cache run kept in `first_seconds`), the commands."""
    first: dict[str, float] = {}

    def cli(args: list, log: list[str]) -> float:
        out_path = Path(args[args.index("--out") + 1])
        times = []
        for i in range(repeats):
            clear_output(out_path)  # every repeat does a first run's work: no fitted text basis or proxy reused
            times.append(run_cli(args, log if i == 0 else []))
        first[log[-1]] = times[0]
        return float(np.median(times))
    out: dict[str, dict] = {}
    log: list[str] = []
    e, c, s = work / "embeddings.parquet", work / "clusters.parquet", work / "selection.parquet"
    common = ["--num-shards", WORLD, "--micro-batch-size", m, "--seed", seed, "--overwrite"]
    t_embed = cli(["embed", data, "--out", e, "--overwrite", "--seed", seed, *embed_args], log)
    t_cluster = cli(["cluster", e, "--out", c, "--overwrite", "--seed", seed], log)
    t_select = cli(["select", c, "--out", s, "--overwrite", "--fraction", FRACTION, "--seed", seed], log)
    base = log[:]
    shared = t_embed + t_cluster + t_select
    if any(x.startswith("tool") for x in configs):
        for name, extra in (("tool", []), ("tool-random", ["--allocation", "random"]),
                            ("tool-padded", ["--balance", "padded"]), ("tool-unpaired", ["--no-pair-lengths"])):
            if name not in configs:
                continue
            log = base[:]
            t = cli(["shard", s, "--data", data, "--out", work / name, *common, *extra], log)
            out[name] = {"dir": work / name, "curation_seconds": shared + t, "commands": log,
                         "seconds": {"embed": t_embed, "cluster": t_cluster, "select": t_select, "shard": t}}
    if "tool" in configs:
        # what the README's quick start runs: the same four stages in one process (`run`), same shards
        run_log: list[str] = []
        t_run = cli(["run", data, "--out", work / "tool-run", "--fraction", FRACTION, *common, *embed_args], run_log)
        if shard_ids(work / "tool-run" / "shards") != shard_ids(work / "tool"):
            raise RuntimeError("`run` made other shards than the four commands with the same options")
        out["tool"].update(run_seconds=t_run, run_command=run_log[0], first_run_seconds=first[run_log[0]])
    if "full" in configs:  # not curation: the baseline a user runs without the tool (its time is not counted)
        log = []
        t1 = cli(["select", c, "--out", work / "selection-all.parquet", "--overwrite", "--fraction", "1.0"], log)
        t2 = cli(["shard", work / "selection-all.parquet", "--data", data, "--out", work / "full", *common,
                  "--allocation", "random"], log)
        out["full"] = {"dir": work / "full", "curation_seconds": 0.0, "commands": base[:2] + log,
                       "seconds": {"select": t1, "shard": t2}, "note": "not counted (no curation in the baseline)"}
    if "paper" in configs:
        import pyarrow.parquet as pq
        log = []
        tp_embed, ep = t_embed, e
        if embed_args or default_features() != "gradient":  # the paper's feature, not whatever the default is
            ep = work / "embeddings-gradient.parquet"
            tp_embed = cli(["embed", data, "--out", ep, "--overwrite", "--seed", seed, "--features", "gradient"], log)
        else:
            log.append(base[0])
        cp, sp = work / "clusters-paper.parquet", work / "selection-paper.parquet"
        tc = cli(["cluster", ep, "--out", cp, "--overwrite", "--seed", seed, "--k", WORLD,
                  "--max-size-factor", "1.5", "--groups", "none"], log)
        sizes = np.bincount(np.asarray(pq.read_table(cp, columns=["cluster"]).column("cluster").to_numpy()))
        n = int(sizes.sum())
        ratio = min(1.0, math.floor(1000 * FRACTION * n / (WORLD * sizes[sizes > 0].min())) / 1000)
        ts = cli(["select", cp, "--out", sp, "--overwrite", "--per-cluster-ratio", ratio, "--within", "far",
                  "--seed", seed], log)
        tsh = cli(["shard", sp, "--data", data, "--out", work / "paper", *common, "--allocation", "paper"], log)
        out["paper"] = {"dir": work / "paper", "curation_seconds": tp_embed + tc + ts + tsh, "commands": log,
                        "seconds": {"embed": tp_embed, "cluster": tc, "select": ts, "shard": tsh},
                        "per_cluster_ratio": ratio, "cluster_sizes": sizes.tolist()}
    for v in out.values():
        if v["curation_seconds"]:
            v["first_curation_seconds"] = sum(first[c] for c in v["commands"])
        manifest = json.loads((Path(v["dir"]) / "manifest.json").read_text())
        v.update(rows=manifest["sharded_rows"], steps=manifest["steps"], dir=str(v["dir"]))
    return out


def clear_output(path: Path) -> None:
    """Remove a command's output and everything stored beside it (sidecars: the fitted text basis, the proxy
    model, run-state), which a later run with the same inputs would reuse instead of computing again."""
    for p in [path, *path.parent.glob(f"{path.name.removesuffix('.parquet')}.*")]:
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def shard_ids(shard_dir: Path) -> dict[str, list[int]]:
    """Every shard file's ids, in order: two shard directories with equal ids trained the same."""
    import pyarrow.parquet as pq
    return {f.name: pq.read_table(f, columns=["id"]).column("id").to_pylist()
            for f in sorted(Path(shard_dir).glob("*.parquet"))}


# ============================================================================================ the DDP trainer

def _worker(rank: int, port: int, shard_dir: str, data: str, cfg: dict, result_path: str):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import train_eval
    from cluster_curate.features.gpt import GPT, GPTConfig, cosine_lr
    from cluster_curate.loader import load_shard

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=600))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD, timeout=timedelta(seconds=600))
    tok = train_eval.build_tokenizer(train_eval.load_rows(data), max_vocab=cfg["max_vocab"])
    shard = load_shard(shard_dir)  # rank / world size from torch.distributed
    prompt_col, response_col = cfg["prompt_field"], cfg["response_field"]
    batches = []  # pre-encoded micro-batches (not timed): ids, mask, targets, per-row weight
    for mb in shard.micro_batches(columns=[prompt_col, response_col, "weight"]):
        enc = [train_eval.encode_row(tok, train_eval.Row(0, p, r), cfg["max_len"])
               for p, r in zip(mb[prompt_col], mb[response_col])]
        ids, mask, targets = train_eval._loss_targets(enc, list(range(len(enc))))
        batches.append((ids, mask, targets, torch.tensor(mb["weight"], dtype=torch.float32),
                        int(mask.sum()), int(mask.numel())))

    torch.manual_seed(cfg["seed"])
    model = GPT(GPTConfig(vocab_size=len(tok), n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                          d_model=cfg["d_model"], max_len=cfg["max_len"]))
    params = [p for p in model.parameters()]
    for p in params:  # identical start on every rank
        dist.broadcast(p.data, 0)
    opt = torch.optim.AdamW(params, lr=cfg["lr"], betas=(0.9, 0.98), weight_decay=0.01)
    total = len(batches) * cfg["epochs"]
    compute, comm, update, epoch_seconds, losses = [], [], [], [], []
    step = 0
    model.train()
    for _ in range(cfg["epochs"]):
        dist.barrier()
        t_epoch = time.perf_counter()
        for ids, mask, targets, w, _, _ in batches:
            for g in opt.param_groups:
                g["lr"] = cosine_lr(step, total, cfg["lr"])
            t0 = time.perf_counter()
            logits = model(ids, mask)
            tok_loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-100,
                                       reduction="none").view(targets.shape)
            valid = (targets != -100).float()
            loss = (tok_loss * valid * w[:, None]).sum() / valid.sum().clamp(min=1)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            t1 = time.perf_counter()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)  # the synchronisation point: the faster rank waits here
            flat /= WORLD
            t2 = time.perf_counter()
            offset = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p))
                offset += n
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            t3 = time.perf_counter()
            compute.append(t1 - t0)
            comm.append(t2 - t1)
            update.append(t3 - t2)
            losses.append(float(loss.detach()))
            step += 1
        dist.barrier()
        epoch_seconds.append(time.perf_counter() - t_epoch)
    mine = {"rank": rank, "steps": step, "compute": compute, "allreduce": comm, "update": update,
            "epoch_seconds": epoch_seconds, "final_loss": float(np.mean(losses[-len(batches):])),
            "real_tokens": [b[4] for b in batches], "padded_tokens": [b[5] for b in batches]}
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, mine)
    if rank == 0:
        Path(result_path).write_text(json.dumps(gathered))
    dist.barrier()
    dist.destroy_process_group()


def train_distributed(shard_dir: str, data: str, cfg: dict, result_path: Path, timeout: float = 1800) -> dict:
    """One 2-process gloo job; returns the per-rank records (rank 0 first)."""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    result_path.unlink(missing_ok=True)
    # the ranks meet at a store served here on a port the OS chose and that stays bound (as torchrun's agent
    # does): a port found free and let go before rank 0 bound it could be taken meanwhile by another job
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    ctx = mp.start_processes(_worker, args=(store.port, shard_dir, data, cfg, str(result_path)), nprocs=WORLD,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                raise RuntimeError(f"distributed job on {shard_dir} did not finish in {timeout:.0f} s")
    except mp.ProcessExitedException as e:
        # Seen once in ~50 jobs: a rank aborted ("terminate called without an active exception") while gloo was
        # shutting down, after rank 0 had written every rank's records. Those are complete: keep them, say so.
        if not result_path.exists():
            raise
        print(f"  note: {e} after the results were written (a crash at teardown); the run is kept", flush=True)
    return json.loads(result_path.read_text())


def summarise_run(ranks: list[dict]) -> dict:
    """Per-run figures from the per-rank records."""
    compute = np.array([r["compute"] for r in ranks])  # [rank, step]
    allreduce = np.array([r["allreduce"] for r in ranks])
    padded = np.array([r["padded_tokens"] for r in ranks], dtype=float)
    real = np.array([r["real_tokens"] for r in ranks], dtype=float)
    epochs = len(ranks[0]["epoch_seconds"])
    straggler = (compute.max(0) - compute).sum(1)  # per rank: sum over steps of (slowest - own)
    pad_gap = (padded.max(0) - padded).sum(1) * epochs
    return {
        "steps": [r["steps"] for r in ranks],
        "epoch_seconds": float(np.mean([max(r["epoch_seconds"][e] for r in ranks) for e in range(epochs)])),
        "compute_seconds": float(compute.sum(1).mean()),
        "allreduce_seconds": float(allreduce.sum(1).mean()),  # waiting + transfer, mean over ranks, per run
        "straggler_seconds": float(straggler.mean()),
        "straggler_fraction": float(straggler.sum() / (WORLD * compute.max(0).sum())),
        "padded_tokens_per_rank": float(padded.sum(1).mean()) * epochs,
        "padded_gap_tokens": float(pad_gap.mean()),
        "padded_idle_fraction": float((padded.max(0) - padded).sum() / (WORLD * padded.max(0).sum())),
        "padding_efficiency": float(real.sum() / padded.sum()),
        "final_loss": float(np.mean([r["final_loss"] for r in ranks])),
        "compute_per_step": np.round(compute, 6).tolist(),  # [rank][step], for the min-over-repeats floor
    }


# ============================================================================================ main

def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=2000, help="first N rows of GSM8K train")
    ap.add_argument("--data", default=str(GSM8K), help="a JSONL dataset with question/answer rows")
    ap.add_argument("--micro-batch-size", "-m", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--embed-args", default="", help="extra `embed` options for the tool's pipeline (default none: "
                                                     "the tool's default features)")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--max-vocab", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None)
    ap.add_argument("--name", default="dp_time", help="results file stem")
    ap.add_argument("--results-dir", default=str(RESULTS), help="where <name>.md / .json go")
    ap.add_argument("--rerender", action="store_true", help="rebuild <name>.md/.json from <name>.json's runs "
                                                            "(no curation, no training)")
    a = ap.parse_args(argv)
    if a.rerender:
        return rerender(a, argv)
    configs = [c for c in a.configs.split(",") if c]
    embed_args = shlex.split(a.embed_args.replace("=", " ")) if a.embed_args else []
    work = Path(a.work or tempfile.mkdtemp(prefix="dp_time_"))
    work.mkdir(parents=True, exist_ok=True)
    lines = [ln for ln in Path(a.data).read_text().splitlines() if ln.strip()][: a.rows]
    data = work / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    a.n_rows = len(lines)
    keys = list(json.loads(lines[0]))
    prompt_field, response_field = ("question", "answer") if "question" in keys else (keys[0], keys[1])
    loads = [os.getloadavg()[0]]
    print(f"{len(lines)} rows, M = {a.micro_batch_size}, {WORLD} ranks, configs {configs}; work {work}", flush=True)

    t0 = time.perf_counter()
    shards = curate(data, work, a.micro_batch_size, configs, embed_args, a.seed, a.repeats)
    print(f"curation done in {time.perf_counter() - t0:.0f} s: " +
          ", ".join(f"{k} {v['curation_seconds']:.1f} s" for k, v in shards.items()), flush=True)

    cfg = dict(max_vocab=a.max_vocab, max_len=512, n_layer=a.n_layer, n_head=4, d_model=a.d_model, lr=3e-3,
               epochs=a.epochs, seed=a.seed, prompt_field=prompt_field, response_field=response_field)
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    for rep in range(a.repeats):
        order = configs[rep % len(configs):] + configs[: rep % len(configs)]  # interleaved, rotated
        for name in order:
            load_before = os.getloadavg()[0]
            ranks = train_distributed(shards[name]["dir"], str(data), cfg, work / f"run-{name}-{rep}.json")
            s = summarise_run(ranks)
            s["load_avg"] = round((load_before + os.getloadavg()[0]) / 2, 2)
            loads.append(os.getloadavg()[0])
            runs[name].append(s)
            print(f"rep {rep} {name:12s} steps {s['steps']} epoch {s['epoch_seconds']:.1f} s  compute "
                  f"{s['compute_seconds']:.1f}  allreduce {s['allreduce_seconds']:.2f}  straggler "
                  f"{s['straggler_seconds']:.2f} s  load {s['load_avg']}", flush=True)
        # results so far after every repeat (a long run that is stopped still leaves its tables)
        write_report(a, argv, configs, shards, runs, loads, t0, rep + 1, final=rep + 1 == a.repeats)


def write_report(a, argv, configs, shards, runs, loads, t0, repeats_done, final):
    med = lambda xs: float(np.median(xs))  # noqa: E731
    summary = {}
    for name in configs:
        rs = runs[name]
        summary[name] = {
            "rows": shards[name]["rows"], "steps": shards[name]["steps"],
            "steps_per_rank_all_equal": all(len(set(r["steps"])) == 1 for r in rs),
            "epoch_seconds": med([r["epoch_seconds"] for r in rs]),
            "epoch_seconds_all": [round(r["epoch_seconds"], 2) for r in rs],
            "allreduce_seconds": med([r["allreduce_seconds"] for r in rs]),
            "straggler_seconds": med([r["straggler_seconds"] for r in rs]),
            "straggler_seconds_all": [round(r["straggler_seconds"], 2) for r in rs],
            "straggler_fraction": med([r["straggler_fraction"] for r in rs]),
            "compute_seconds": med([r["compute_seconds"] for r in rs]),
            "padded_tokens_per_rank": rs[0]["padded_tokens_per_rank"],
            "padded_gap_tokens": rs[0]["padded_gap_tokens"],
            "padded_idle_fraction": rs[0]["padded_idle_fraction"],
            "padding_efficiency": rs[0]["padding_efficiency"],
            "curation_seconds": shards[name]["curation_seconds"],
            "curation_breakdown": {k: round(v, 2) for k, v in shards[name]["seconds"].items()},
            "first_curation_seconds": shards[name].get("first_curation_seconds"),
            "run_seconds": shards[name].get("run_seconds"),
            "first_run_seconds": shards[name].get("first_run_seconds"),
            "final_loss": med([r["final_loss"] for r in rs]),
        }
        # Noise floor: every repeat runs the same steps on the same rows, so the minimum over repeats of each
        # (rank, step) compute time filters out preemption by other jobs; from it, the step time floor
        # (sum over steps of the slowest rank) and the straggler floor (sum of slowest - own, mean over ranks).
        floor = np.min(np.stack([np.asarray(r["compute_per_step"]) for r in rs]), axis=0)
        summary[name]["floor_seconds"] = float(floor.max(0).sum()) * a.epochs
        summary[name]["straggler_floor_seconds"] = float((floor.max(0) - floor).sum(1).mean()) * a.epochs
    verdict = {}
    if "full" in summary and "tool" in summary:
        full, tool = summary["full"], summary["tool"]
        e = a.epochs
        verdict["train_time_reduction"] = 1 - tool["epoch_seconds"] / full["epoch_seconds"]
        denom = (1 - TARGETS["reduction_counting_curation"]) * full["epoch_seconds"] - tool["epoch_seconds"]
        # the four commands one by one, and `run` (the same stages in one process, as the README's quick start);
        # median seconds, and the first, cold-cache run (what a user's one run costs)
        for suffix, median, cold in (("", "curation_seconds", "first_curation_seconds"),
                                     ("_run", "run_seconds", "first_run_seconds")):
            if tool.get(median) is None:
                continue
            verdict[f"reduction_counting_curation{suffix}"] = 1 - (tool["epoch_seconds"] * e + tool[median]) / (
                full["epoch_seconds"] * e)
            if tool.get(cold) is not None:
                verdict[f"reduction_counting_cold_curation{suffix}"] = 1 - (
                    tool["epoch_seconds"] * e + tool[cold]) / (full["epoch_seconds"] * e)
            verdict[f"epochs_to_meet_curation_target{suffix}"] = (tool[median] / denom) if denom > 0 else None
        verdict["padded_tokens_reduction"] = 1 - tool["padded_tokens_per_rank"] / full["padded_tokens_per_rank"]
        # what was kept, in rows and in the tokens the model trains on (real tokens = padded x pad efficiency)
        real = {n: summary[n]["padded_tokens_per_rank"] * summary[n]["padding_efficiency"] for n in ("tool", "full")}
        verdict["row_fraction"] = tool["rows"] / full["rows"]
        verdict["token_fraction"] = real["tool"] / real["full"]
        verdict["floor_time_reduction"] = 1 - tool["floor_seconds"] / full["floor_seconds"]
        # paired: the two configurations' epochs of the same repeat ran minutes apart, under similar load
        paired = [1 - t["epoch_seconds"] / f["epoch_seconds"] for t, f in zip(runs["tool"], runs["full"])]
        verdict["train_time_reduction_paired"] = [round(x, 4) for x in paired]
        verdict["train_time_reduction_paired_median"] = float(np.median(paired))
    if "tool" in summary:
        for other in ("tool-random", "paper"):
            if other in summary:
                verdict[f"straggler_tool_less_than_{other}"] = summary["tool"]["straggler_seconds"] < summary[other]["straggler_seconds"]
                verdict[f"padded_gap_tool_less_than_{other}"] = summary["tool"]["padded_gap_tokens"] < summary[other]["padded_gap_tokens"]
                verdict[f"straggler_floor_tool_less_than_{other}"] = (
                    summary["tool"]["straggler_floor_seconds"] < summary[other]["straggler_floor_seconds"])
    meta = {"rows": a.n_rows, "micro_batch_size": a.micro_batch_size, "world": WORLD, "epochs": a.epochs,
            "repeats": repeats_done, "embed_args": a.embed_args,
            "model": f"GPT n_layer={a.n_layer} d_model={a.d_model} n_head=4, word tokens, vocab <= {a.max_vocab}",
            "load_avg_min_max": [round(min(loads), 2), round(max(loads), 2)],
            "command": "python benchmarks/bench_dp_time.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:])),
            "wall_seconds": round(time.perf_counter() - t0, 1)}
    md = render(meta, summary, verdict, shards, configs)
    if final:
        print("\n" + md)
    write_results(a.name, md, {"meta": meta, "summary": summary, "verdict": verdict, "runs": runs, "targets": TARGETS,
                               "commands": {k: v["commands"] for k, v in shards.items()},
                               "shards": {k: {x: y for x, y in v.items() if x != "commands"}
                                          for k, v in shards.items()}},
                  results=a.results_dir, quiet=True, command=False)


def rerender(a, argv):
    """Tables again from a finished run's JSON (after a change to the report), same runs, same command."""
    old = json.loads((Path(a.results_dir) / f"{a.name}.json").read_text())
    meta = old["meta"]
    configs = list(old["summary"])
    shards = old.get("shards") or {
        k: {"rows": v["rows"], "steps": v["steps"], "curation_seconds": v["curation_seconds"],
            "seconds": v["curation_breakdown"]} for k, v in old["summary"].items()}
    for k in shards:
        shards[k]["commands"] = old["commands"][k]
    if "paper" in shards and "per_cluster_ratio" not in shards["paper"]:
        for c in shards["paper"]["commands"]:
            if "--per-cluster-ratio" in c:
                shards["paper"]["per_cluster_ratio"] = float(c.split("--per-cluster-ratio ")[1].split()[0])
                shards["paper"]["cluster_sizes"] = "(not recorded)"
    if "full" in shards and "note" not in shards["full"]:
        shards["full"]["note"] = "not counted (no curation in the baseline)"
    a.n_rows, a.micro_batch_size, a.epochs = meta["rows"], meta["micro_batch_size"], meta["epochs"]
    a.repeats = meta["repeats"]
    a.embed_args = meta.get("embed_args", "")
    model = meta["model"]
    a.n_layer = int(model.split("n_layer=")[1].split()[0])
    a.d_model = int(model.split("d_model=")[1].split()[0])
    a.max_vocab = int(model.split("vocab <= ")[1].split()[0])
    t0 = time.perf_counter() - meta["wall_seconds"]
    cmd = meta["command"].split("bench_dp_time.py", 1)[1].split()
    write_report(a, cmd, configs, shards, old["runs"], meta["load_avg_min_max"], t0, a.repeats, final=True)


def render(meta: dict, summary: dict, verdict: dict, shards: dict, configs: list[str]) -> str:
    out = [f"# Training time with data parallelism ({meta['world']} gloo ranks on CPU, GSM8K)", "",
           f"{meta['rows']} GSM8K train rows; micro-batch M = {meta['micro_batch_size']} rows per rank per step, "
           f"each micro-batch padded to its longest row (no gradient accumulation); {meta['model']}; "
           f"{meta['epochs']} epoch(s) per run; every configuration run {meta['repeats']}x interleaved, "
           f"medians quoted. 1 thread per process; the machine's 2 cores are shared with other jobs: 1-min load "
           f"average {meta['load_avg_min_max'][0]}-{meta['load_avg_min_max'][1]} during the runs, so absolute times "
           f"are noisy (the padded-token columns are deterministic).", "",
           f"Command: `{meta['command']}`", "",
           "| configuration | rows | steps/rank | epoch s (median) | all runs | compute s/rank | all_reduce s/rank "
           "| straggler s/rank | straggler % | floor s | straggler floor s/rank | padded tok/rank | "
           "padded gap tok/rank | padded idle % | pad eff | curation s | same steps all ranks |",
           "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name in configs:
        s = summary[name]
        out.append(f"| {name} | {s['rows']} | {s['steps']} | {s['epoch_seconds']:.1f} | "
                   f"{', '.join(f'{x:.1f}' for x in s['epoch_seconds_all'])} | {s['compute_seconds']:.1f} | "
                   f"{s['allreduce_seconds']:.2f} | {s['straggler_seconds']:.2f} | {100 * s['straggler_fraction']:.1f} | "
                   f"{s['floor_seconds']:.1f} | {s['straggler_floor_seconds']:.2f} | "
                   f"{s['padded_tokens_per_rank']:.0f} | {s['padded_gap_tokens']:.0f} | "
                   f"{100 * s['padded_idle_fraction']:.1f} | {s['padding_efficiency']:.3f} | "
                   f"{s['curation_seconds']:.1f} | {'yes' if s['steps_per_rank_all_equal'] else 'NO'} |")
    out += ["", "Columns: *compute* = forward + backward, summed over the epoch; *all_reduce* = time inside the "
            "gradient all_reduce (waiting for the other rank + the transfer); *straggler* = sum over steps of "
            "(slowest rank's compute - own compute), from an all_gather of per-step compute times, mean over ranks; "
            "*straggler %* = that over the ranks' total step time; *floor* = the same steps with each (rank, step) compute time "
            "taken as its minimum over the repeats (filters out preemption by other jobs): *floor s* = sum over steps "
            "of the slowest rank, *straggler floor* = sum of (slowest - own), mean over ranks; *padded gap* = the same with padded tokens "
            "(M x longest row) instead of seconds (deterministic); *pad eff* = real / padded tokens.", ""]
    if verdict:
        out += ["## Targets", ""]
        if "train_time_reduction" in verdict:
            v = verdict
            out.append(f"- Training time, tool's 31% vs full data: **{100 * v['train_time_reduction']:.1f}% less** per "
                       f"epoch (target >= {100 * TARGETS['train_time_reduction']:.1f}%: "
                       f"{'met' if v['train_time_reduction'] >= TARGETS['train_time_reduction'] else 'NOT met'}); "
                       f"per repeat (paired) median {100 * v['train_time_reduction_paired_median']:.1f}% less "
                       f"({', '.join(f'{100 * x:.1f}' for x in v['train_time_reduction_paired'])}); "
                       f"noise floor {100 * v['floor_time_reduction']:.1f}% less; "
                       f"padded tokens per rank {100 * v['padded_tokens_reduction']:.1f}% less.")
            out.append(f"- Kept: {100 * v['row_fraction']:.1f}% of the rows, {100 * v['token_fraction']:.1f}% of the "
                       f"tokens; the time saved per epoch ({100 * v['train_time_reduction']:.1f}%) against the rows "
                       f"dropped ({100 * (1 - v['row_fraction']):.1f}%) and the tokens dropped "
                       f"({100 * (1 - v['token_fraction']):.1f}%).")
            for suffix, what in (("", "the four commands one by one"),
                                 ("_run", "`run`, the same four stages in one command (the README's quick start)")):
                if f"reduction_counting_curation{suffix}" not in v:
                    continue
                r, e2m = v[f"reduction_counting_curation{suffix}"], v[f"epochs_to_meet_curation_target{suffix}"]
                cold = v.get(f"reduction_counting_cold_curation{suffix}")
                out.append(f"- Counting curation, {what} ({meta['epochs']} epoch(s) trained): **{100 * r:.1f}% less** "
                           f"(target >= {100 * TARGETS['reduction_counting_curation']:.0f}%: "
                           f"{'met' if r >= TARGETS['reduction_counting_curation'] else 'NOT met'}); "
                           + (f"the target is met from {e2m:.1f} epochs of this training on (curation is a fixed "
                              "cost, training scales with epochs and model size)." if e2m is not None else
                              "not reachable at any number of epochs with these per-epoch times.")
                           + (f" With each command's first run instead of the median (cold disk caches, as a "
                              f"user's one run): {100 * cold:.1f}% less." if cold is not None else ""))
        for other in ("tool-random", "paper"):
            k = f"straggler_tool_less_than_{other}"
            if k in verdict:
                out.append(f"- Straggler time, tool vs {other}: {summary['tool']['straggler_seconds']:.2f} vs "
                           f"{summary[other]['straggler_seconds']:.2f} s/rank ({'met' if verdict[k] else 'NOT met'}); "
                           f"floor {summary['tool']['straggler_floor_seconds']:.2f} vs "
                           f"{summary[other]['straggler_floor_seconds']:.2f} s/rank "
                           f"({'less' if verdict[f'straggler_floor_tool_less_than_{other}'] else 'NOT less'}); "
                           f"padded gap {summary['tool']['padded_gap_tokens']:.0f} vs "
                           f"{summary[other]['padded_gap_tokens']:.0f} tokens/rank "
                           f"({'less' if verdict[f'padded_gap_tool_less_than_{other}'] else 'NOT less'}).")
    out += ["", "## Commands (curation, timed)", ""]
    for name in configs:
        sh = shards[name]
        extra = f" (per-cluster ratio {sh['per_cluster_ratio']}, cluster sizes {sh['cluster_sizes']})" if "per_cluster_ratio" in sh else ""
        cold = (f", first run (cold caches) {sh['first_curation_seconds']:.1f} s"
                if sh.get("first_curation_seconds") is not None else "")
        out.append(f"- **{name}**: {sh['curation_seconds']:.1f} s" + cold
                   + (f" ({sh['note']})" if "note" in sh else "") + extra + " — "
                   + ", ".join(f"{k} {v:.1f} s" for k, v in sh["seconds"].items()))
        out += [f"  - `{c}`" for c in sh["commands"]]
        if sh.get("run_seconds") is not None:
            out += [f"  - or in one command, the same shards: {sh['run_seconds']:.1f} s, first run (cold caches) "
                    f"{sh['first_run_seconds']:.1f} s", f"    - `{sh['run_command']}`"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
