"""Ranks, world size and part files: the only module that knows about them.

Two ways to split an `embed` run, which combine:

* `torchrun` (any number of nodes and processes): RANK / WORLD_SIZE / LOCAL_RANK come from the environment;
  a process group is initialised (nccl on GPU, gloo on CPU) for barriers only.
* job-array pieces (`embed --num-parts K --part-index i`): independent processes, no communication, all writing
  into the same output directory.

Worker w of W = num_parts × world_size (w = part_index × world_size + rank) owns the chunks c with
c mod W = w, where chunk c is the ids [c·E, (c+1)·E) for E = `--commit-every`. Chunks are the unit of work
and of commitment: a finished chunk is written atomically to the staging directory `<out>.partial/` as
`chunk-CCCCCC.parquet`, so a killed run restarted with `--resume` skips the chunks already there and the
result equals an uninterrupted run (the rows of a chunk do not depend on who computed them).

Finishing: a single process (W = 1) merges the chunks, in id order, into the single-file artifact `<out>`.
Several workers each merge their own chunks into `<out>/part-WWWWW-of-NNNNN.parquet` (a directory artifact
that `read_artifact` reads as one table sorted by id); under torchrun, rank 0 waits for the others at a
barrier, checks every part is there and removes the staging directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cluster_curate.errors import CurateError
from cluster_curate.io import names
from cluster_curate.io.artifacts import ArtifactMeta, read_parquet, sidecar_path
from cluster_curate.io.writer import atomic_write_bytes, file_metadata, parquet_stream, write_parquet_atomic

DEFAULT_COMMIT_EVERY = 2048  # rows per committed chunk: what a crash can lose, and what a worker holds at once
_CHUNK_RE = re.compile(r"^chunk-(\d{6,})\.parquet$")


@dataclass(frozen=True)
class Layout:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    num_shards: int = 1
    shard_index: int = 0
    torchrun: bool = False

    @property
    def worker(self) -> int:
        return self.shard_index * self.world_size + self.rank

    @property
    def workers(self) -> int:
        return self.num_shards * self.world_size

    @property
    def multi(self) -> bool:
        return self.workers > 1

    @property
    def leader(self) -> bool:
        """Rank 0 of this piece: prepares shared state (the proxy, the text basis) and finishes."""
        return self.rank == 0

    def owns(self, chunk: int) -> bool:
        return chunk % self.workers == self.worker

    def part_name(self) -> str:
        return names.part_file_name(self.worker, self.workers)

    def describe(self) -> str:
        bits = []
        if self.torchrun:
            bits.append(f"rank {self.rank}/{self.world_size}")
        if self.num_shards > 1:
            bits.append(f"piece {self.shard_index}/{self.num_shards}")
        return ", ".join(bits) or "single process"


def launched_by_torchrun() -> bool:
    """Whether torchrun started this process (it sets RANK and WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def torchrun_processes() -> int:
    """How many processes the torchrun that started this one started (1 outside torchrun; a malformed WORLD_SIZE
    counts as 1 here, and detect() says what is wrong with it)."""
    try:
        return int(os.environ["WORLD_SIZE"]) if launched_by_torchrun() else 1
    except ValueError:
        return 1


def detect(num_shards: int = 1, shard_index: int = 0) -> Layout:
    """The layout of this process from torchrun's environment and the job-array options."""
    if num_shards < 1:
        raise CurateError(f"--num-parts must be at least 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise CurateError(f"--part-index must be in [0, {num_shards - 1}], got {shard_index}")
    env = os.environ
    torchrun = launched_by_torchrun()
    try:
        rank = int(env.get("RANK", 0)) if torchrun else 0
        world = int(env.get("WORLD_SIZE", 1)) if torchrun else 1
        local = int(env.get("LOCAL_RANK", rank)) if torchrun else 0
    except ValueError:
        raise CurateError("RANK / WORLD_SIZE / LOCAL_RANK must be integers (as torchrun sets them)") from None
    return Layout(rank=rank, world_size=world, local_rank=local, num_shards=num_shards, shard_index=shard_index,
                  torchrun=torchrun and world > 1)


def trainer_rank_and_world() -> tuple[int, int] | None:
    """A training process's (rank, world size), for the shard loader: from torch.distributed when initialised, else from torchrun's RANK/WORLD_SIZE, else None."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # torch is optional for reading shards
        pass
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def init(layout: Layout, use_cuda: bool = False) -> None:
    """Initialise the process group under torchrun (nccl when each rank drives a GPU, gloo otherwise)."""
    if not layout.torchrun:
        return
    import torch
    import torch.distributed as dist
    if dist.is_initialized():
        return
    backend = "nccl" if use_cuda and torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(layout.local_rank)
    dist.init_process_group(backend=backend)


def device_for(layout: Layout, device: str | None) -> str | None:
    """Under torchrun with CUDA, `auto` means this rank's GPU (cuda:LOCAL_RANK)."""
    if layout.torchrun and (device in (None, "auto")):
        import torch
        if torch.cuda.is_available():
            return f"cuda:{layout.local_rank % torch.cuda.device_count()}"
    return device


def barrier(layout: Layout) -> None:
    if layout.torchrun:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.barrier()


def leader_prepares(layout: Layout, is_ready, prepare) -> None:
    """State every process shares (the proxy, a fitted featurizer), made once: the leader of this piece runs
    `prepare()` (which writes it beside the output) unless `is_ready()`, then every rank waits at a barrier
    so that all of them load the same files afterwards."""
    if layout.leader and not is_ready():
        prepare()
    barrier(layout)


def worker_lock(layout: Layout, out: str | os.PathLike):
    """The lock a worker of a multi-rank embed holds while it runs (io/lock.py): its part's, beside the output
    (`.OUT.part-WWWWW-of-NNNNN.parquet.lock`: the output may be a file its leader replaces), so that another
    process of the same part is refused and what a killed run of this worker left is this worker's to remove
    (ChunkedOutput). The workers write side by side: none is the output's one writer, and none runs while one
    process writes the output, nor that process while one of them runs (io/lock.py). One process: the command
    holds the output's lock (cli.py), none here."""
    from contextlib import nullcontext

    from cluster_curate.io.lock import output_lock
    if not layout.multi:
        return nullcontext()
    return output_lock(out, "embed", part=layout.part_name())


def shutdown(layout: Layout) -> None:
    if layout.torchrun:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------- output

def plan_changes(old, new: dict, options=(), most: int = 3) -> str:
    """What differs between two chunk plans, as a user changed it (`--dim (not given) -> 64`, `the data`); of the
    plans' params, those named in `options` (the others follow from them)."""
    from cluster_curate.options import named_changes
    if not isinstance(old, dict):
        return "its plan unreadable"
    said = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "params" and isinstance(a, dict) and isinstance(b, dict):
            said += [named_changes({k: (a.get(k), b.get(k))}) for k in sorted(set(a) | set(b))
                     if a.get(k) != b.get(k) and k in options] or ["its options"]
        elif key == "dataset":
            said.append("the data")
        elif key == "algorithm":
            said.append(f"the feature algorithm {a} -> {b} (another release)")
        else:
            said.append(named_changes({key: (a, b)}))
    return ", ".join(said[:most]) + (f" and {len(said) - most} more" if len(said) > most else "")


def committed_chunks(out) -> list[int]:
    """The chunks an interrupted run committed in the staging folder beside the artifact `out` (what --resume keeps;
    `run` says how many it found)."""
    staging = sidecar_path(out, names.STAGING)
    if not staging.is_dir():
        return []
    return sorted(int(m.group(1)) for p in staging.iterdir() if (m := _CHUNK_RE.match(p.name)))


class ChunkedOutput:
    """Where an `embed` worker commits its chunks and how the artifact is finished (see module docstring).

    plan: a JSON-able record of everything that decides the rows (parameters, dataset fingerprint,
    commit_every); `--resume` only continues a staging directory with the same plan."""

    def __init__(self, out: str | os.PathLike, layout: Layout, plan: dict, commit_every: int, *,
                 resume: bool = False, overwrite: bool = False, options=()):
        if commit_every < 1:
            raise CurateError(f"--commit-every must be at least 1, got {commit_every}")
        self.out, self.layout, self.commit_every = Path(out), layout, commit_every
        self.plan = dict(plan, commit_every=commit_every)
        self.options = options  # the plan's params a user gives, named when --resume finds others (plan_changes)
        self.staging = sidecar_path(self.out, names.STAGING)
        self.resume = resume
        self._prepare_output(overwrite)
        if layout.multi:
            self._remove_stale()
        self._open_staging(overwrite)

    # -------------------------------------------------------------------------------- set-up
    def _prepare_output(self, overwrite: bool) -> None:
        """Refuse an output that is there without --overwrite; with it, remove what another layout left there (a
        file where parts go, parts and rejects of another number of processes)."""
        from cluster_curate.io.artifacts import check_creatable
        out, lay = self.out, self.layout
        check_creatable(out)
        if not lay.multi:
            if out.exists() and not overwrite:
                raise CurateError(f"{out}: already exists (pass --overwrite to replace it)")
            return
        if out.exists() and not out.is_dir():
            if not overwrite:
                raise CurateError(f"{out}: exists and is not a directory; a multi-process run writes a directory "
                                  "of parts (pass --overwrite to replace it)")
            if lay.leader and lay.shard_index == 0:
                out.unlink()
        mine = out / lay.part_name()
        if mine.exists() and not overwrite:
            raise CurateError(f"{mine}: already exists (pass --overwrite to replace it)")
        others = [p for p in out.glob(names.part_pattern())] if out.is_dir() else []
        stale = [p for p in others if not p.name.endswith(f"-of-{lay.workers:05d}.parquet")]
        if stale and not overwrite:
            raise CurateError(f"{out}: holds parts of a run with another number of processes ({stale[0].name}); "
                              "pass --overwrite or use a fresh output")
        for p in stale + [q for q in out.glob(names.PART_REJECTS_PATTERN) if not q.name.endswith(f"-of-{lay.workers:05d}.jsonl")]:
            p.unlink(missing_ok=True)  # --overwrite: files of another layout would mix with ours

    def _remove_stale(self) -> None:
        """Remove what a killed run of this worker left: the temporaries of its chunks, part and rejects. Only its
        own, under its lock (worker_lock): the other workers' may be at work beside it; the staging folder, theirs
        included, goes once the artifact is complete (_cleanup_if_done)."""
        from cluster_curate.io.writer import remove_leftovers
        lay = self.layout
        remove_leftovers(self.out, {lay.part_name(), names.part_rejects_name(lay.worker, lay.workers)}.__contains__)
        remove_leftovers(self.staging, lambda name: (m := _CHUNK_RE.match(name)) is not None
                         and lay.owns(int(m.group(1))))

    def _open_staging(self, overwrite: bool) -> None:
        plan_file = self.staging / names.STAGING_PLAN
        lay = self.layout
        if plan_file.exists():
            try:
                old = json.loads(plan_file.read_text())
            except (OSError, ValueError):
                old = None
            if lay.multi and old != self.plan and self._others_written():
                # a part of a job array run with another --model, --features, ... or data: its parts would be read
                # as one artifact of two feature spaces
                if not overwrite:
                    raise CurateError(f"{self.out}: holds parts of a run with other parameters or data; every part "
                                      "of a job runs the same command (pass --overwrite to start the artifact over, "
                                      "or use a fresh output)")
                for q in [*self.out.glob(names.part_pattern()), *self.out.glob(names.PART_REJECTS_PATTERN)]:
                    q.unlink(missing_ok=True)
                shutil.rmtree(self.staging)
                old = None
            mine = [c for c in self.committed() if lay.owns(c)]
            if mine and not overwrite and not self.resume:  # committed work is discarded only when asked
                same = "of this command" if old == self.plan else "with other parameters or data"
                raise CurateError(f"{self.staging}: holds {len(mine)} committed chunk(s) of an interrupted run {same}; "
                                  + ("pass --resume to continue it or " if old == self.plan else "")
                                  + "--overwrite to start over")
            if old != self.plan:
                if self.resume and not overwrite:
                    raise CurateError(f"{self.staging}: holds an interrupted run with other parameters or data "
                                      f"({plan_changes(old, self.plan, self.options)}); the same command resumes it (embed's --resume, "
                                      "run as it was), or pass --overwrite to start afresh")
                if not lay.multi:
                    shutil.rmtree(self.staging)
        elif self.staging.exists() and not lay.multi:
            shutil.rmtree(self.staging)
        self.staging.mkdir(parents=True, exist_ok=True)
        if not plan_file.exists() or json.loads(plan_file.read_text()) != self.plan:
            atomic_write_bytes(plan_file, json.dumps(self.plan, sort_keys=True, indent=1).encode())
        if not self.resume:  # a fresh run recomputes this worker's chunks
            for c in self.committed():
                if lay.owns(c):
                    self._chunk_path(c).unlink(missing_ok=True)

    def _others_written(self) -> bool:
        """Whether other workers of this layout wrote a part or committed a chunk here."""
        lay = self.layout
        parts = [p for p in self.out.glob(names.part_pattern(lay.workers)) if p.name != lay.part_name()]
        return bool(parts) or any(not lay.owns(c) for c in self.committed())

    # -------------------------------------------------------------------------------- chunks
    def chunk_of(self, row_id: int) -> int:
        return int(row_id) // self.commit_every

    def _chunk_path(self, chunk: int) -> Path:
        return self.staging / names.chunk_file_name(chunk)

    def committed(self) -> list[int]:
        return committed_chunks(self.out)

    def todo(self, chunk: int) -> bool:
        """Whether this worker must compute `chunk` (it owns it and it is not committed yet)."""
        return self.layout.owns(chunk) and not (self.resume and self._chunk_path(chunk).exists())

    def commit(self, chunk: int, table: pa.Table, skipped: list[dict], counts: dict | None = None) -> None:
        """Write a finished chunk atomically; `skipped` (rows reported instead of embedded) and `counts` (e.g. rows
        cut) ride along in the chunk's metadata so that a resumed run still reports them."""
        meta = {b"skipped": json.dumps(skipped).encode(), b"counts": json.dumps(counts or {}).encode()}
        table = table.replace_schema_metadata(meta)
        write_parquet_atomic(table, self._chunk_path(chunk))

    def _my_chunks(self) -> list[int]:
        return [c for c in self.committed() if self.layout.owns(c)]

    def _chunk_metadata(self, chunks: list[int] | None, key: bytes, empty: bytes) -> list:
        return [json.loads((pq.read_schema(self._chunk_path(c)).metadata or {}).get(key, empty))
                for c in (self._my_chunks() if chunks is None else chunks)]

    def skipped_rows(self, chunks: list[int] | None = None) -> list[dict]:
        return [row for rows in self._chunk_metadata(chunks, b"skipped", b"[]") for row in rows]

    def counts(self, chunks: list[int] | None = None) -> dict[str, int]:
        """The chunks' `counts` added up (a chunk committed before they were kept counts none)."""
        total: dict[str, int] = {}
        for counts in self._chunk_metadata(chunks, b"counts", b"{}"):
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
        return total

    # -------------------------------------------------------------------------------- finish
    def finish(self, meta: ArtifactMeta, expected_chunks: int, empty: pa.Table) -> dict:
        """Merge this worker's chunks into the artifact (single file, or this worker's part), in id order;
        `empty` (the step's columns, no row) is the part of a worker that owns no chunk.
        Returns {"path", "rows", "parts"}. Under torchrun, rank 0 then waits for every rank and cleans up."""
        lay = self.layout
        mine = [c for c in range(expected_chunks) if lay.owns(c)]
        missing = [c for c in mine if not self._chunk_path(c).exists()]
        if missing:
            raise CurateError(f"{self.staging}: chunks {missing[:5]} were not computed; run again with --resume")
        rows = self._merge(mine, meta, empty)
        result = {"path": str(self.out), "rows": rows, "parts": 1, "complete": True, "artifact_rows": rows}
        for c in mine:
            self._chunk_path(c).unlink(missing_ok=True)
        if lay.multi:
            barrier(lay)
            if lay.leader and lay.torchrun:
                expected = [names.part_file_name(lay.shard_index * lay.world_size + r, lay.workers)
                            for r in range(lay.world_size)]
                absent = [n for n in expected if not (self.out / n).exists()]
                if absent:
                    raise CurateError(f"{self.out}: parts {absent} are missing after all ranks finished")
            parts = sorted(self.out.glob(names.part_pattern(lay.workers)))
            result["parts"] = len(parts)
            result["complete"] = len(parts) == lay.workers
            result["artifact_rows"] = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
            self._cleanup_if_done()
        else:
            shutil.rmtree(self.staging, ignore_errors=True)
        return result

    def _merge(self, chunks: list[int], meta: ArtifactMeta, empty: pa.Table) -> int:
        """Stream the chunks into one Parquet file with the artifact's metadata (memory: one chunk)."""
        tables = (read_parquet(self._chunk_path(c)).replace_schema_metadata(None) for c in chunks)
        first = next(tables, None)
        target = self.out / self.layout.part_name() if self.layout.multi else self.out
        if first is None:  # this worker owns no row: still write an empty part so the layout is complete
            first = empty
        rows = 0
        meta.rows = sum(pq.ParquetFile(self._chunk_path(c)).metadata.num_rows for c in chunks)
        schema = first.schema.with_metadata(file_metadata(meta))
        with parquet_stream(target, schema) as writer:
            for t in (first, *tables):
                writer.write_table(t.cast(schema))
                rows += t.num_rows
        return rows

    def _cleanup_if_done(self) -> None:
        """The worker that completes the set of parts removes the staging directory."""
        parts = list(self.out.glob(names.part_pattern(self.layout.workers)))
        if len(parts) == self.layout.workers:
            shutil.rmtree(self.staging, ignore_errors=True)

    def rejects_path(self) -> Path:
        """Where this worker lists the rows it reports instead of embedding (JSONL)."""
        if self.layout.multi:
            return self.out / names.part_rejects_name(self.layout.worker, self.layout.workers)
        return sidecar_path(self.out, names.REJECTS)


