"""Lineage: finding the artifact an artifact was made from (docs/architecture.md, "Lineage").

Every artifact records its inputs as {"path", "kind", "fingerprint", "rows"}. `upstream` is the one way to
follow such a record: the recorded path as written, else relative to the artifact that records it, and only
when its fingerprint is still the recorded one (an artifact rewritten since is not silently used).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import ArtifactMeta, read_meta


def recorded_input(meta: ArtifactMeta | dict, name: str) -> dict:
    """What an artifact's meta (or a shard manifest) records of its input `name`: {path, fingerprint}, or {}."""
    inputs = meta.get("inputs") if isinstance(meta, dict) else meta.inputs
    return (inputs or {}).get(name) or {}


def upstream(referrer, meta: ArtifactMeta | dict, name: str):
    """The input `name` recorded in `meta` (an artifact's meta, or a manifest dict) of the artifact at
    `referrer`: (path, its meta) when it is there and unchanged, else (None, why not)."""
    rec = recorded_input(meta, name)
    path = rec.get("path")
    what = "shard manifest" if isinstance(meta, dict) else f"{meta.kind} artifact"
    if not path:
        return None, f"the {what} records no {name} input"
    # relative to the folder holding the referrer (what as_input records), then as written (older artifacts)
    candidates = [Path(path)] if Path(path).is_absolute() else [Path(referrer).parent / path, Path(path)]
    for cand in candidates:
        if cand.exists():
            try:
                found = read_meta(cand)
            except CurateError as e:
                return None, str(e)
            if rec.get("fingerprint") and found.fingerprint != rec.get("fingerprint"):
                return None, (f"{cand} has changed since (fingerprint {found.fingerprint}, not "
                              f"{rec['fingerprint']})")
            return str(cand), found
    return None, f"the recorded {name} {path} is not there"


def model_fingerprint(spec) -> str | None:
    """A cheap fingerprint of a local model's files (a folder's own files, or a .gguf file): each one's name, size,
    and its first and last MiB, so that weights saved again under the same path (a checkpoint written over) are
    another model, and a copy of the folder is the same one. None for what is no local path (a hub id, the proxy:
    recorded by their own keys). Torch-free: `run` calls it before any stage, for every run."""
    path = Path(str(spec)).expanduser()
    files = sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith(".")) if path.is_dir() \
        else [path] if path.is_file() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name if path.is_dir() else ''}\0{size}\0".encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
            if size > 2 << 20:
                fh.seek(-(1 << 20), os.SEEK_END)
                h.update(fh.read())
    return h.hexdigest()[:16]
