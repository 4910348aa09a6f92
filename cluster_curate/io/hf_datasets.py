"""Datasets read through Hugging Face `datasets` (docs/architecture.md, "Extension points"): a save_to_disk
directory or a hub id, as a container of Arrow batches. io/containers.py recognises such a source and opens
it here; `datasets` is imported only when one is read.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from cluster_curate.errors import CurateError


class HFDataset:
    """A `datasets.Dataset` (from save_to_disk or load_dataset), read as Arrow batches without loading it."""

    def __init__(self, hf, kind: str, files: list[Path], split: str | None = None):
        self.hf, self.kind, self.files = hf, kind, files
        self.split = split  # the split read, where it was chosen from several (a DatasetDict, a hub id)
        self.rows = len(hf)

    def batches(self, batch_rows: int = 2048) -> Iterator[pa.RecordBatch]:
        for table in self.hf.with_format("arrow").iter(batch_size=batch_rows):
            yield from table.to_batches()

    def count(self) -> int:
        return self.rows


_SPLIT_SAID: set[str] = set()  # the DatasetDicts whose split choice was said in this process


def load_from_disk(path: Path) -> HFDataset:
    """A datasets.save_to_disk directory (a DatasetDict: its train split, or its only one)."""
    import datasets
    try:
        if not json.loads((path / "state.json").read_text(encoding="utf-8")).get("_data_files", True):
            raise CurateError(f"{path}: dataset is empty (no rows)")
    except (OSError, ValueError, AttributeError):
        pass  # a DatasetDict, or a state.json we do not understand: let datasets judge
    try:
        obj = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001 - datasets raises many types; one line for the user
        raise CurateError(f"{path}: cannot load the datasets.save_to_disk directory ({str(e).splitlines()[0]})") from None
    if isinstance(obj, datasets.DatasetDict):
        splits = list(obj)
        split = "train" if "train" in obj else (splits[0] if len(splits) == 1 else None)
        if split is None:
            raise CurateError(f"{path}: a DatasetDict with splits {splits} and no 'train'; pass {path}/SPLIT")
        if len(splits) > 1 and str(path) not in _SPLIT_SAID:  # the other splits are left out: say so, once
            _SPLIT_SAID.add(str(path))
            from cluster_curate import console
            console.info(f"{path}: a DatasetDict of splits {', '.join(splits)}: reading '{split}' "
                         f"(pass {path}/SPLIT for another)")
        return HFDataset(obj[split], "hf-disk", [path], split)
    return HFDataset(obj, "hf-disk", [path], _split_of_folder(path))


def _split_of_folder(path: Path) -> str | None:
    """DIR/SPLIT of a DatasetDict saved with save_to_disk (its dataset_dict.json beside): SPLIT."""
    return path.name if (path.parent / "dataset_dict.json").is_file() else None


def load_hub(source: str, name: str, config: str | None, split: str) -> HFDataset:
    """A dataset id on the Hugging Face hub, from the local cache when the hub does not answer."""
    import datasets
    from huggingface_hub import constants

    from cluster_curate.io.hub import HUB_PROBE_SECONDS, hub_offline, hub_reachable
    offline = bool(datasets.config.HF_HUB_OFFLINE) or os.environ.get("HF_DATASETS_OFFLINE") == "1"
    # Without a network datasets retries for ~25 s before failing; a one-second probe first, and the cache
    # only when the hub does not answer.
    unreachable = not offline and not hub_reachable(constants.ENDPOINT)
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its retry warnings would print before our one-line error
    try:
        with hub_offline(unreachable):
            hf = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001
        first = (str(e).splitlines() or [type(e).__name__])[0]
        if offline or unreachable:
            why = (f"the hub ({constants.ENDPOINT}) did not answer within {HUB_PROBE_SECONDS:g} s" if unreachable
                   else "the hub is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE)")
            raise CurateError(f"{source}: no such file or directory, and not a cached Hugging Face dataset: {why} "
                              f"and {name!r} is not in the local cache; download it first or pass a local path") \
                from None
        raise CurateError(f"{source}: no such file or directory, and cannot load it as a Hugging Face dataset "
                          f"({first})") from None
    finally:
        hub_log.setLevel(level)
    files = [Path(c["filename"]) for c in hf.cache_files]
    return HFDataset(hf, "hf-hub", files, split)
