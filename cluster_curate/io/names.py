"""Every artifact and file name the tool writes or looks for, in one table (docs/architecture.md, "Artifacts").

Light on purpose (no imports): the shard loader in a trainer imports it.
"""

from __future__ import annotations

# artifact kinds, as recorded in the metadata's `kind`
EMBEDDINGS, CLUSTERS, SELECTION = "embeddings", "clusters", "selection"
SHARD = "shard"  # the kind in each shard file's metadata
SHARD_MANIFEST_KIND = "shard-manifest"  # manifest.json's kind

# the stages of `run`, in order, and the artifact each one writes into `run --out DIR`
STAGES = ("embed", "cluster", "select", "shard")
RUN_OUTPUTS = {"embed": "embeddings.parquet", "cluster": "clusters.parquet", "select": "selection.parquet",
               "shard": "shards"}
# the same outputs by the name `report` gives them (a pipeline directory holds them under these names)
PIPELINE_NAMES = {"embeddings": RUN_OUTPUTS["embed"], "clusters": RUN_OUTPUTS["cluster"],
                  "selection": RUN_OUTPUTS["select"], "shards": RUN_OUTPUTS["shard"]}
RUN_STATE = "run-state.json"
RUN_STAGE_OF = {name: stage for stage, name in RUN_OUTPUTS.items()}  # the stage a run folder's output is named for

# inside a shard directory
MANIFEST = "manifest.json"
LEFTOVER = "leftover_ids.txt"

# inside an `export --for TRAINER` directory
EXPORT_DATA = "train.parquet"                                   # the global order, for a trainer
EXPORT_SELECTED = {"jsonl": "selected.jsonl", "parquet": "selected.parquet"}  # the selected rows, as they were
EXPORT_README = "README.md"
TRAINING_ARGS = "training_args.json"     # HF TrainingArguments / TRL SFTConfig keywords
DATALOADER_ARGS = "dataloader.json"      # DataLoader / sampler keywords of a hand-written loop
TRAINER_CONFIG = "config.yaml"           # torchtune / LLaMA-Factory / axolotl settings to merge
LLAMAFACTORY_DATASET_INFO = "dataset_info.json"

# sidecars: files beside an artifact, named by `sidecar_path(artifact, SUFFIX)` (c.parquet -> c.centroids.npy)
CENTROIDS = "centroids.npy"
PROXY = "proxy"
STAGING = "partial"
REJECTS = "rejects.jsonl"
TARGET_EMBEDDINGS = "target.parquet"  # select --target DATA: the target embedded like the pool, beside the selection
FEATURE_STATE_KINDS = ("text",)  # the kinds whose fitted state is a sidecar (feature_state)

# inside a part directory (an artifact written by several processes) and its staging directory
STAGING_PLAN = "plan.json"


def feature_state(kind: str, previous: bool = False) -> tuple[str, str]:
    """Sidecar suffixes of a feature kind's fitted state and of its key: text -> (text.npz, text.key); `previous`:
    those of the artifact in place while an `embed --overwrite` of other options runs (text.prev.npz, ...)."""
    kind = f"{kind}.prev" if previous else kind
    return f"{kind}.npz", f"{kind}.key"


def sidecars(kind: str | None) -> tuple[str, ...]:
    """The sidecar suffixes the command writing an artifact of `kind` may write beside it (each replaced or deleted
    there)."""
    return {EMBEDDINGS: (PROXY, STAGING, REJECTS, *(name for k in FEATURE_STATE_KINDS for previous in (False, True)
                                                    for name in feature_state(k, previous))),
            CLUSTERS: (CENTROIDS,), SELECTION: (TARGET_EMBEDDINGS,)}.get(kind, ())


def shard_file_name(index: int, num_shards: int) -> str:
    """DIR/shard-00000-of-00004.parquet (5-digit indices)."""
    return f"shard-{index:05d}-of-{num_shards:05d}.parquet"


def consumed_log_name(rank: int) -> str:
    """LOGDIR/rank-00000.jsonl: what one rank consumed (`verify --log LOGDIR`)."""
    return f"rank-{rank:05d}.jsonl"


def part_file_name(worker: int, workers: int) -> str:
    return f"part-{worker:05d}-of-{workers:05d}.parquet"


def part_of(name: str) -> tuple[int, int] | None:
    """(worker, workers) of a file named by part_file_name, else None."""
    if name.startswith("part-") and name.endswith(".parquet"):
        worker, _, workers = name[len("part-"):-len(".parquet")].partition("-of-")
        if worker.isdigit() and workers.isdigit():
            return int(worker), int(workers)
    return None


def part_pattern(workers: int | None = None) -> str:
    """The glob of a directory artifact's part files (`workers`: those of one layout alone)."""
    return "part-*.parquet" if workers is None else f"part-*-of-{workers:05d}.parquet"


PART_REJECTS_PATTERN = "rejects-*.jsonl"  # the glob of its parts' rejects lists (part_rejects_name)


def part_rejects_name(worker: int, workers: int) -> str:
    return f"rejects-{worker:05d}-of-{workers:05d}.jsonl"


def chunk_file_name(chunk: int) -> str:
    return f"chunk-{chunk:06d}.parquet"
