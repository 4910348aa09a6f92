"""Lineage: finding the artifact an artifact was made from (docs/architecture.md, "Lineage").

Every artifact records its inputs as {"path", "kind", "fingerprint", "rows"}. `upstream` is the one way to
follow such a record: the recorded path as written, else relative to the artifact that records it, and only
when its fingerprint is still the recorded one (an artifact rewritten since is not silently used).
"""

from __future__ import annotations

from pathlib import Path

from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import ArtifactMeta, read_meta


def upstream(referrer, meta: ArtifactMeta | dict, name: str):
    """The input `name` recorded in `meta` (an artifact's meta, or a manifest dict) of the artifact at
    `referrer`: (path, its meta) when it is there and unchanged, else (None, why not)."""
    inputs = meta.get("inputs") if isinstance(meta, dict) else meta.inputs
    rec = (inputs or {}).get(name) or {}
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
