"""What a training script imports to read its shard (written by `cluster-curate shard`).

    from cluster_curate.loader import load_shard
    shard = load_shard("shards/")              # rank / world size from torch.distributed when initialised
    for batch in shard.micro_batches():        # the planned micro-batches, in order: dict column -> list
        loss = (per_example_loss(batch) * torch.tensor(batch["weight"])).mean()

Every rank's shard has the same number of rows and micro-batches, so every rank runs the same number of
steps. The rows are already in the order the plan wants: do not shuffle them (a sampler is provided that
keeps the order, for DataLoader). A shard is plain Parquet: `datasets.load_dataset("parquet",
data_files=shard.path)` or `pyarrow.parquet.read_table(shard.path)` read it without this module, with one
difference: a column whose lists or objects differ in keys or types from row to row (tool-calling chats) is JSON
text in the file (the manifest's `json_columns`), which `Shard` hands back decoded, as the input file held it.

For trainers that shard one dataset themselves (HF Trainer / Accelerate: consecutive micro-batches dealt to
ranks round-robin), load every shard and reorder with `global_order`:

    ds = datasets.load_dataset("parquet", data_files=shard_files(d), split="train").select(global_order(d))
    # TrainingArguments(per_device_train_batch_size=M, train_sampling_strategy="sequential", ...)

(`cluster-curate export` writes that order, and the sample-interleaved one DistributedSampler needs, for each
trainer; `distributed_sampler(export_dir, ds)` is that sampler, refusing another world size.) `ConsumedLog`
records what a rank trained on, for `cluster-curate verify`.
"""

from __future__ import annotations

import json
import operator
import os
import warnings
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from cluster_curate.errors import CurateError, cannot_read, counted

from cluster_curate.io.names import MANIFEST, SHARD_MANIFEST_KIND  # noqa: E402 - light (no imports)


def read_manifest(directory: str | os.PathLike) -> dict:
    """The manifest.json of a shard directory (parameters, rows_per_shard, steps, leftover_ids, balance)."""
    path = Path(directory) / MANIFEST
    if not os.path.lexists(directory):  # not "no manifest.json" in a folder that is not there
        raise CurateError(f"{directory}: no such file or directory")
    if not path.is_file():
        raise CurateError(f"{directory}: no {MANIFEST} (not a directory written by `cluster-curate shard`)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CurateError(f"{path}: unreadable manifest ({e})") from None
    if manifest.get("kind") != SHARD_MANIFEST_KIND:
        raise CurateError(f"{path}: not a shard manifest (kind {manifest.get('kind')!r})")
    return manifest


class Shard:
    """One rank's shard: a map-style dataset (len / index -> row dict) plus the planned micro-batches."""

    def __init__(self, directory: str | os.PathLike, rank: int, manifest: dict, columns: Sequence[str] | None = None):
        self.directory, self.rank, self.manifest = Path(directory), rank, manifest
        self.num_shards = int(manifest["num_shards"])
        self.micro_batch_size = int(manifest["micro_batch_size"])
        self.steps = int(manifest["steps"])
        self.path = self.directory / manifest["files"][rank]["file"]
        _check_shard_sizes([str(self.path)], [manifest["files"][rank].get("bytes")], first_rank=rank)
        try:
            self.table: pa.Table = pq.read_table(self.path, columns=list(columns) if columns else None, memory_map=True)
        except (OSError, pa.ArrowInvalid, KeyError) as e:
            raise cannot_read(self.path, e, "the shard") from None
        if self.table.num_rows != manifest["rows_per_shard"]:
            raise CurateError(f"{self.path}: {self.table.num_rows} rows, the manifest says {manifest['rows_per_shard']}")
        # JSON text in the file (one Parquet type per column cannot hold objects of other keys): decoded when read
        self.json_columns = [c for c in manifest.get("json_columns") or () if c in self.table.column_names]

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return decoded_json(self.table.slice(index % len(self), 1).to_pylist(), self.json_columns)[0]

    @property
    def column_names(self) -> list[str]:
        return self.table.column_names

    def micro_batches(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, list]]:
        """The planned micro-batches in order (one per step): dict column -> list of micro_batch_size values."""
        table = self.table.select(list(columns)) if columns else self.table
        m = self.micro_batch_size
        for step in range(self.steps):
            batch = table.slice(step * m, m).to_pydict()
            for c in self.json_columns:
                if c in batch:
                    batch[c] = [_decoded(v) for v in batch[c]]
            yield batch

    def __iter__(self) -> Iterator[dict]:
        for batch in self.table.to_batches():
            yield from decoded_json(batch.to_pylist(), self.json_columns)

    def sampler(self):
        """A torch Sampler yielding 0..len-1 in the planned order (never shuffle a shard)."""
        from torch.utils.data import Sampler

        class PlannedOrder(Sampler):
            def __init__(self, n):
                self.n = n

            def __iter__(self):
                return iter(range(self.n))

            def __len__(self):
                return self.n

        return PlannedOrder(len(self))

    def batch_sampler(self):
        """A torch batch sampler yielding the planned micro-batches' indices (for DataLoader(batch_sampler=...))."""
        m, steps = self.micro_batch_size, self.steps
        from torch.utils.data import Sampler

        class PlannedMicroBatches(Sampler):
            def __iter__(self):
                return (list(range(s * m, (s + 1) * m)) for s in range(steps))

            def __len__(self):
                return steps

        return PlannedMicroBatches()

    def to_hf_dataset(self):
        """The shard as a `datasets.Dataset` (rows in planned order; use it unshuffled). The JSON-text columns are
        datasets' `Json` feature (datasets 4.7 and later), read back as the objects; before 4.7, JSON text."""
        import datasets
        ds = datasets.Dataset(self.table)
        if hasattr(datasets, "Json"):
            for c in self.json_columns:
                if _past_64_bits(self.table.column(c)):  # datasets' JSON reader raises "Value is too big!" there
                    warnings.warn(f"to_hf_dataset: column {c!r} holds whole numbers past 64 bits, which datasets' "
                                  "Json feature cannot read: kept as JSON text (json.loads each value; load_shard's "
                                  "rows hold them as written)", stacklevel=2)
                    continue
                ds = ds.cast_column(c, datasets.Json())
        return ds


def _past_64_bits(column) -> bool:
    """Whether a JSON-text column holds a whole number outside int64 (its text has 19 digits or more in a row)."""
    import pyarrow.compute as pc

    def walk(v):
        if isinstance(v, dict):
            return any(map(walk, v.values()))
        if isinstance(v, list):
            return any(map(walk, v))
        return type(v) is int and not -2 ** 63 <= v < 2 ** 63

    candidates = column.filter(pc.fill_null(pc.match_substring_regex(column, r"\d{19}"), False))
    return any(walk(json.loads(v)) for v in candidates.to_pylist() if v is not None)


def decoded_json(records: list[dict], columns: Sequence[str]) -> list[dict]:
    """`records` (changed in place) with each of `columns` held as JSON text decoded: the lists and objects as
    the input file held them."""
    for rec in records:
        for c in columns:
            if c in rec:
                rec[c] = _decoded(rec[c])
    return records


def _decoded(value):
    """A JSON-text column's value as the input held it (null stays None)."""
    return json.loads(value) if isinstance(value, str) else value


def shard_files(directory: str | os.PathLike, *, check_content: bool = False) -> list[str]:
    """Paths of all shards, rank 0 first (the manifest's order). check_content: each file must be the one shard
    wrote (the sha256 its manifest records), else a one-line error naming it, for the commands that read a whole
    shard directory once (export, verify); a training's start is not made to hash its data, only to check each
    file's size."""
    manifest = read_manifest(directory)
    paths = [str(Path(directory) / f["file"]) for f in manifest["files"]]
    if check_content:
        _check_shard_content(paths, [f.get("sha256") for f in manifest["files"]])
    else:
        _check_shard_sizes(paths, [f.get("bytes") for f in manifest["files"]])
    return paths


def _check_shard_sizes(paths: list[str], recorded: list[int | None], first_rank: int = 0) -> None:
    """The cheap half of _check_shard_content, for a training's start: a shard left from another run (the same
    rows per shard, other rows) or rewritten since has, almost always, another size."""
    for rank, (path, expected) in enumerate(zip(paths, recorded), start=first_rank):
        if expected is None:  # a manifest written by hand, or by a version that recorded none
            continue
        try:
            actual = os.path.getsize(path)
        except OSError as e:
            raise cannot_read(path, e, "the shard") from None
        if actual != expected:
            raise CurateError(f"{path}: not the file `shard` wrote for rank {rank} ({actual:,} bytes, the manifest "
                              f"records {expected:,}: the file was changed, replaced, swapped or renamed since); "
                              "write the shards again or put the files back")


def _check_shard_content(paths: list[str], recorded: list[str | None]) -> None:
    """A file changed, replaced or swapped with another since shard wrote it would pass for a plan it is not."""
    for rank, (path, expected) in enumerate(zip(paths, recorded)):
        if expected is None:  # a manifest written by hand, or by a version that recorded none
            continue
        try:
            actual = file_sha256(path)
        except OSError as e:
            raise cannot_read(path, e, "the shard") from None
        if actual == expected:
            continue
        other = recorded.index(actual) if actual in recorded else None
        raise CurateError(f"{path}: not the file `shard` wrote for rank {rank} ("
                          + (f"it holds rank {other}'s shard, {Path(paths[other]).name}: the files were swapped or "
                             "renamed" if other is not None else "its sha256 is not the manifest's: the file was "
                             "changed or replaced")
                          + " since); write the shards again or put the files back")


def file_sha256(path) -> str:
    """sha256 of a file, read in 16 MiB blocks (a shard can be larger than memory would like)."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


LAYOUTS = ("batch", "sample")


def interleaved_order(num_shards: int, steps: int, micro_batch_size: int, layout: str = "batch") -> list[int]:
    """Row indices into the concatenation of the shards (rank 0 first, each `steps` × `micro_batch_size` rows) in
    the order a trainer that shards one dataset itself must read them so that rank r gets exactly shard r:

    - "batch" (batch-interleaved): step 0 of rank 0, step 0 of rank 1, ..., step 1 of rank 0, ... — for
      frameworks that deal whole micro-batches round-robin (Accelerate, HF Trainer with a sequential sampler and
      per_device_train_batch_size = micro_batch_size: process p gets batches p, p + N, ...);
    - "sample" (sample-interleaved): row 0 of rank 0, row 0 of rank 1, ..., row 1 of rank 0, ... — for
      `torch.utils.data.DistributedSampler(shuffle=False)`, which deals single indices r, r + N, ..."""
    n, m, per_shard = num_shards, micro_batch_size, steps * micro_batch_size
    if layout == "batch":
        return [r * per_shard + t * m + j for t in range(steps) for r in range(n) for j in range(m)]
    if layout == "sample":
        return [r * per_shard + i for i in range(per_shard) for r in range(n)]
    raise CurateError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")


def global_order(directory: str | os.PathLike, layout: str = "batch") -> list[int]:
    """`interleaved_order` for a shard directory: row indices into the concatenation of `shard_files(directory)`
    (batch-interleaved by default: step 0 of rank 0, step 0 of rank 1, ..., step 1 of rank 0, ...)."""
    manifest = read_manifest(directory)
    return interleaved_order(int(manifest["num_shards"]), int(manifest["steps"]), int(manifest["micro_batch_size"]),
                             layout)


def load_shard(directory: str | os.PathLike, rank: int | None = None, world_size: int | None = None,
               columns: Sequence[str] | None = None) -> Shard:
    """Open shard `rank` of a shard directory. Rank and world size default to torch.distributed's (or torchrun's
    environment); a single process outside both reads a folder of one shard, and must name the rank of a folder
    of several (reading shard 0 alone would train on 1/N of the selection without a word). The world size must
    equal the number of shards. Each is an int or, as the environment holds it, a str of digits."""
    rank, world_size = _whole("rank", rank), _whole("world_size", world_size)
    manifest = read_manifest(directory)
    n = int(manifest["num_shards"])
    _warn_unlike_the_environment(rank, n)
    from cluster_curate.distributed import trainer_rank_and_world
    found = trainer_rank_and_world()
    if rank is None:
        if found is None and n > 1:
            raise CurateError(f"{directory}: holds {n} shards, one per rank, and this process is no rank of a job "
                              f"(no torch.distributed group, no RANK/WORLD_SIZE): start it with torchrun "
                              f"--nproc-per-node {n}, or pass rank= to read one shard")
        rank, found_world = found if found is not None else (0, 1)
        if world_size is None:
            world_size = found_world
    elif world_size is None and found is not None:
        world_size = found[1]
    if world_size is not None and world_size != n:
        raise CurateError(f"{directory}: written for {n} ranks but this job has world size {world_size} "
                          f"(re-run `cluster-curate shard --num-shards {world_size}`)")
    if not 0 <= rank < n:
        raise CurateError(f"{directory}: rank {rank} out of range (the directory has {n} shards)")
    if found is None:  # no job to name the rank: ConsumedLog logs as the shard this process reads
        _RANKS_READ.add(rank)
    return Shard(directory, rank, manifest, columns)


_RANKS_READ: set[int] = set()  # the shards load_shard opened in this process outside a job, for ConsumedLog


def distributed_sampler(export_dir: str | os.PathLike, dataset, rank: int | None = None,
                        world_size: int | None = None):
    """The `DistributedSampler(shuffle=False)` that `export --for torchrun` plans, over `dataset`
    (its train.parquet): rank and world size from torch.distributed (with tensor or pipeline parallelism pass the
    data-parallel `rank` and `world_size`, as to load_shard), which must be the `num_replicas` its
    dataloader.json records, as load_shard refuses another world size (a bare DistributedSampler deals the
    sample-interleaved rows to however many ranks run, other shards' rows to each, and says nothing)."""
    from torch.utils.data import DistributedSampler

    from cluster_curate.distributed import trainer_rank_and_world
    from cluster_curate.io.names import DATALOADER_ARGS
    path = Path(export_dir) / DATALOADER_ARGS
    try:
        planned = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise cannot_read(path, e, "the export's sampler settings (export --for torchrun writes it)") from None
    n = planned.get("num_replicas") if isinstance(planned, dict) else None
    if type(n) is not int or n < 1:
        raise CurateError(f"{path}: field `num_replicas` is {n!r}, not a number of ranks: export it again")
    rank, world_size = _whole("rank", rank), _whole("world_size", world_size)
    found = trainer_rank_and_world() or (0, 1)
    rank, world = found[0] if rank is None else rank, found[1] if world_size is None else world_size
    if world != n:
        raise CurateError(f"{export_dir}: written for {n} data-parallel ranks but this job has world size {world} "
                          f"(run it on {n} processes, or re-run `cluster-curate shard --num-shards {world}` and "
                          "export again)")
    if not 0 <= rank < n:
        raise CurateError(f"{export_dir}: rank {rank} out of range (it was written for {n} ranks)")
    return DistributedSampler(dataset, num_replicas=n, rank=rank, shuffle=False, drop_last=False)


_ENVIRONMENT = {"rank": "RANK", "world_size": "WORLD_SIZE"}  # the variables torchrun sets, named in messages


def _whole(name: str, value) -> int | None:
    """load_shard's rank= / world_size=: an int, or a str of digits (torchrun's variable passed as it is)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value)
    if not isinstance(value, (bool, str)):
        try:
            return operator.index(value)  # an int, numpy's too; not a float (1.0 would hide a computed rank's error)
        except TypeError:
            pass
    raise CurateError(f"load_shard: {name}={value!r} is not a whole number: pass an int, or a str of digits as "
                      f"torchrun's {_ENVIRONMENT[name]} holds it")


def _warn_unlike_the_environment(rank: int | None, shards: int) -> None:
    """A rank given that is not torchrun's RANK where there is a shard per process (data parallelism alone): on
    several nodes, LOCAL_RANK passed as the rank gives each node's processes the same shards. Said, not refused: a
    script may mean another one. With tensor or pipeline parallelism (fewer shards than processes) the rank is the
    data-parallel group's, which RANK is not."""
    from cluster_curate.distributed import detect, launched_by_torchrun
    if rank is None or not launched_by_torchrun():
        return
    try:
        env = detect()
    except CurateError:  # a malformed variable: trainer_rank_and_world or the rank given decides, as before
        return
    if env.world_size == shards and rank != env.rank:
        warnings.warn(f"load_shard: rank={rank} where RANK={env.rank}: on several nodes pass the global RANK "
                      "(LOCAL_RANK would have each node train the same shards)", stacklevel=3)


# ------------------------------------------------------------------- what the job consumed, for `verify`

def log_file(log_dir: str | os.PathLike, rank: int) -> Path:
    from cluster_curate.io.names import consumed_log_name
    return Path(log_dir) / consumed_log_name(rank)


class ConsumedLog:
    """Appends one line per consumed micro-batch to LOGDIR/rank-RRRRR.jsonl (rank from torch.distributed or
    torchrun's environment unless given; outside both, the shard this process read with load_shard, else 0). A
    log another process is writing is refused; one an earlier run left is replaced with a warning. Use it in a
    plain training loop:

        log = ConsumedLog("consumed/")
        for batch in loader:
            ...
            log.record(batch["id"], batch["weight"], loss)    # `cluster-curate verify SHARDS --log consumed/`
    """

    def __init__(self, log_dir: str | os.PathLike, rank: int | None = None, resume_at: int = 0):
        """`resume_at`: the micro-batches trained before a run resumed from a checkpoint: the log keeps its first
        `resume_at` lines (those after them were trained after the checkpoint and are trained again) and goes on
        after them, numbered from `resume_at` where it kept fewer; 0, a new run, starts it afresh."""
        rank = _log_rank(log_dir) if rank is None else rank
        self.rank = rank
        self.path = log_file(log_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # opened without truncating, and locked first: a second process logging as this rank would else empty
        # the first one's log, and verify would blame the sampler
        earlier = _OPEN_LOGS.pop(self.path.resolve(), None)
        if earlier is not None:  # this process's own log left open (a training that raised, then run again)
            earlier.close()
        self._f = open(self.path, "a+", encoding="utf-8")
        try:
            _lock(self._f, self.path, rank)
            self._f.seek(0)
            lines = self._f.read().splitlines(keepends=True)
        except BaseException:
            self._f.close()
            raise
        kept = lines[:resume_at]
        if lines and not resume_at:
            from cluster_curate.console import warn
            warn(f"{self.path}: replaced the log of {counted(len(lines), 'micro-batch', 'micro-batches')} an "
                 "earlier run wrote (a run resumed from a checkpoint keeps its lines: the Trainer's "
                 "resume_from_checkpoint, or resume_at= in a loop of your own)")
        self._f.seek(0)
        self._f.truncate()
        self._f.writelines(kept)
        self._f.flush()
        _OPEN_LOGS[self.path.resolve()] = self._f
        # the checkpoint's micro-batch, also where fewer lines were kept (a fresh log folder): verify places each
        # line by its step and tells the ones not in this log
        self.step = resume_at

    def record(self, ids, weights=None, loss=None) -> None:
        rec = {"step": self.step, "ids": None if ids is None else [int(i) for i in _as_list(ids)]}
        if weights is not None:
            rec["weights"] = [float(w) for w in _as_list(weights)]
        if loss is not None:
            rec["loss"] = float(loss)
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        self.step += 1

    def close(self) -> None:
        if _OPEN_LOGS.get(self.path.resolve()) is self._f:
            del _OPEN_LOGS[self.path.resolve()]
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_OPEN_LOGS: dict[Path, object] = {}  # the logs this process holds open (and locked), by path


def _log_rank(log_dir) -> int:
    """ConsumedLog's rank where none is given: the job's, else the one shard load_shard read in this process
    (two plain processes reading shards 0 and 1 would else both log as rank 0; RANK without WORLD_SIZE is no job,
    and load_shard needs rank= there), else 0 (a folder of one shard, or one process on an export)."""
    from cluster_curate.distributed import trainer_rank_and_world
    found = trainer_rank_and_world()
    if found is not None:
        return found[0]
    if len(_RANKS_READ) == 1:
        return next(iter(_RANKS_READ))
    if _RANKS_READ:
        raise CurateError(f"ConsumedLog({str(log_dir)!r}): this process read shards {sorted(_RANKS_READ)} with "
                          "load_shard: pass rank= (the shard this log is for)")
    return 0


def _lock(f, path: Path, rank: int) -> None:
    """An exclusive lock on an open log for as long as it is open: a POSIX record lock, which a forked DataLoader
    worker does not inherit (flock's would outlive the log in a persistent worker and refuse this process's next
    log). Where the file system keeps no locks (ENOLCK, ENOSYS: Lustre or NFS without them), or off POSIX, no
    check."""
    try:
        import fcntl
    except ImportError:
        return
    try:
        fcntl.lockf(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: another process holds it
        raise CurateError(f"{path}: another process is writing this log: two processes log as rank {rank} (pass "
                          "each the rank= of the shard it reads)") from None
    except OSError:
        return


def _as_list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)
