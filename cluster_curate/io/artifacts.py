"""Parquet artifacts: the contract between commands (docs/architecture.md, "Artifacts"): metadata and reading.

An artifact is one Parquet file or a directory of `part-*.parquet` files. Each carries the key-value
metadata `cluster_curate` (JSON) with:

    kind         "embeddings" | "clusters" | "selection" | ...
    version      tool version that wrote it
    algorithm    version of the stage's algorithm (ALGORITHM_VERSION of the stage's module)
    params       the parameters of the stage that made it
    inputs       {name: {"path", "kind", "fingerprint", "rows"}} for each input
    dataset      {"source", "fingerprint", "rows"} of the raw dataset at the root of the lineage; "source" as
                 written, and beside a relative one its "absolute_path" (io/datasets.recorded_source), in no hash
    rows         number of rows in this artifact
    fingerprint  hash of (kind, algorithm, params, inputs): same algorithm, inputs and parameters => same
                 fingerprint, and an algorithm that changes its output bumps its version

Writing is cluster_curate/io/writer.py; typed readers are cluster_curate/io/readers.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cluster_curate import __version__
from cluster_curate.errors import CurateError, cannot_read
from cluster_curate.io import names

META_KEY = b"cluster_curate"


def json_default(v: Any):
    """`json.dumps(default=...)` for numpy scalars and arrays (anything else becomes its str)."""
    import numpy as np
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def stable_hash(obj: Any) -> str:
    """Short deterministic hash of a JSON-serialisable object."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


@dataclass
class ArtifactMeta:
    kind: str
    params: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)
    dataset: dict = field(default_factory=dict)
    rows: int = 0
    version: str = __version__
    fingerprint: str = ""
    algorithm: int | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> "ArtifactMeta":
        data = json.loads(text)
        known = {k: data[k] for k in cls.__dataclass_fields__ if data.get(k) is not None}  # null reads as absent
        return cls(**known)

    def as_input(self, path: str | os.PathLike, beside: str | os.PathLike) -> dict:
        """How the downstream artifact at `beside` records this one among its inputs: the path relative to the
        folder that holds `beside` (docs/architecture.md, "Lineage"), so a pipeline folder copied or moved
        elsewhere, or used from another working directory, still finds its inputs, and the bytes of an artifact
        do not depend on where its folder is."""
        rel = os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(beside)))
        return {"path": rel, "kind": self.kind, "fingerprint": self.fingerprint, "rows": self.rows}


def make_meta(kind: str, params: dict, inputs: dict[str, dict], dataset: dict,
              algorithm: int | None = None) -> ArtifactMeta:
    """Metadata of a new artifact. `inputs` maps a name ("data", "embeddings", ...) to an input record:
    `meta.as_input(path, out)` for an artifact, the reader's `record()` for raw data. `algorithm`: the
    stage's ALGORITHM_VERSION (None only for artifacts made outside the stages, e.g. in tests)."""
    meta = ArtifactMeta(kind=kind, params=params, inputs={k: dict(v) for k, v in inputs.items()}, dataset=dict(dataset),
                        algorithm=algorithm)
    key = {"kind": kind, "params": params, "inputs": {k: v.get("fingerprint") for k, v in inputs.items()}}
    if algorithm is not None:
        key["algorithm"] = algorithm
    meta.fingerprint = stable_hash(key)
    return meta


# ----------------------------------------------------------------------------------------------- paths

def artifact_files(path: str | os.PathLike) -> list[Path]:
    """The Parquet file(s) that make up an artifact: the file itself, or a directory's sorted parts."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        if (p / names.RUN_STATE).exists():  # its first file (clusters.parquet) was read as the artifact
            outputs = [name for name in names.RUN_OUTPUTS.values() if name.endswith(".parquet") and (p / name).exists()]
            raise CurateError(f"{p}: is a `run` folder, not one artifact: give the file in it that the command "
                              f"reads ({', '.join(str(p / name) for name in outputs) or 'none written yet'})")
        parts = sorted(q for q in p.glob("*.parquet") if not q.name.startswith("."))
        if not parts:
            raise CurateError(f"{p}: directory holds no .parquet files")
        return parts
    raise CurateError(f"{p}: no such file or directory")


def artifact_schema(path: str | os.PathLike) -> pa.Schema:
    """The Arrow schema of an artifact (of its first part), without reading any rows."""
    return pq.read_schema(artifact_files(path)[0])


def sidecar_path(path: str | os.PathLike, suffix: str) -> Path:
    """A file stored beside an artifact, e.g. sidecar_path('c.parquet', 'centroids.npy') -> 'c.centroids.npy'."""
    p = Path(path)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
    return p.with_name(f"{stem}.{suffix}")


def check_writable(path: str | os.PathLike, overwrite: bool, *, inputs=(), kind: str | None = None,
                   label: str | None = None) -> None:
    """Before any work: `path` is none of the command's `inputs` and holds none of them (output_inputs), is not
    in the way (or may be replaced) and can be created (check_creatable). With `kind` (an artifact kind, SHARDS,
    EXPORT) an existing output is replaced, with `overwrite`, only when it is the tool's own output of that kind
    or an empty directory (replace_refusal; not for a one-file artifact, which would become a file of the
    directory's name), and one it would not replace is refused saying so, with or without `overwrite`:
    `--overwrite` never deletes what cluster-curate did not write, nor does a sidecar the command of that kind
    writes beside it (names.sidecars). `label` names the output in messages (default `--out PATH`)."""
    p = Path(path)
    label = label or f"--out {p}"
    check_not_input(p, inputs, label)
    for suffix in names.sidecars(kind):  # written (or a stale one deleted) beside the output: no input may be there,
        side = sidecar_path(p, suffix)  # nor a file of the user's under that name
        check_not_input(side, inputs, f"{label} (its file {side.name})")  # a folder (staging, proxy) replaced whole
        if (side.exists() or side.is_symlink()) and not own_sidecar(side, suffix):
            raise CurateError(f"{side}: not a file cluster-curate wrote, and {label} writes (or removes) one of that "
                              f"name beside it; {KEEP_ONLY}: move it, or choose another --out")
    if kind in _PARQUET_KINDS and p.is_dir() and not p.is_symlink() and not any(p.iterdir()):
        # replaced (--overwrite), it became a file of that name: one process writes these as one Parquet file
        raise CurateError(f"{label}: an empty directory, but {_article(kind)} {kind} artifact is written as one "
                          f"Parquet file: give a file, e.g. {p / f'{kind}.parquet'}")
    if p.exists() or p.is_symlink():
        # whose it is first: "pass --overwrite" for what --overwrite will not replace leads nowhere
        why = replace_refusal(p, kind) if kind is not None else None
        if why:
            raise CurateError(f"{label}: {'' if overwrite else 'already exists: '}{why}")
        if not overwrite:
            raise CurateError(f"{p}: already exists (pass --overwrite to replace it)")
        if p.is_dir() and (reason := _cannot_write_in(p)):  # replaced whole: its entries are moved or deleted
            raise CurateError(f"{p}: cannot replace it: cannot write in it ({reason}); make it writable "
                              f"(chmod u+w {p}) or choose another --out")
    if kind in _PARQUET_KINDS and p.suffix.lower() in _DATA_SUFFIXES:
        raise CurateError(f"{label}: {_article(kind)} {kind} artifact is a Parquet file: name it "
                          f"{p.with_suffix('.parquet').name}")
    check_creatable(p)
    if p.is_symlink():
        check_creatable(written_at(p))  # the output is written where the link points (io/writer.py)


def own_sidecar(path: Path, suffix: str) -> bool:
    """Whether a file where a command keeps a sidecar is one it wrote, by its first bytes: a rejects list (JSON lines
    with `id` and `reason`), a fitted state's key (a hex digest), NumPy's .npy / .npz, an artifact; the staging and
    proxy sidecars are folders (a proxy one empty or the proxy's)."""
    if suffix in (names.STAGING, names.PROXY) or path.is_dir():
        from cluster_curate.io import proxy_store
        return path.is_dir() and (suffix == names.STAGING or not any(path.iterdir()) or proxy_store.is_proxy_dir(path))
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return True  # unreadable: the write that follows says why
    if suffix == names.REJECTS:
        first = head.split(b"\n", 1)[0].strip()
        try:
            row = json.loads(first) if first else {"id": 0, "reason": ""}
        except ValueError:
            return False
        return isinstance(row, dict) and {"id", "reason"} <= set(row)
    if suffix.endswith(".key"):
        return re.fullmatch(rb"[0-9a-f]{8,64}", head.strip()) is not None
    if suffix.endswith(".npy"):
        return head.startswith(b"\x93NUMPY")
    if suffix.endswith(".npz"):
        return head.startswith(b"PK")
    return replace_refusal(path, names.EMBEDDINGS) is None if suffix == names.TARGET_EMBEDDINGS else True


def written_at(path: str | os.PathLike) -> Path:
    """Where an output named `path` is written: through a link (to a file or a folder on another disk), at the
    link's target, so the link stays and points at the new output; else `path` itself. The temporary file or
    folder is made beside the target (a rename works only within one file system)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def check_creatable(path: str | os.PathLike) -> None:
    """One line (CurateError) unless `path`, and the temporary and sidecar files beside it, can be created:
    every existing ancestor is a directory, and the nearest one is writable."""
    p = Path(path)
    where = Path(os.path.abspath(p)).parent
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise CurateError(f"{p}: cannot create it: {where} is a file, not a directory")
    reason = _cannot_write_in(where)
    if reason:
        raise CurateError(f"{p}: cannot create it: cannot write in {where} ({reason}); make it writable or choose "
                          "another output")


def _cannot_write_in(folder: Path) -> str | None:
    """Why no file can be created in `folder` (None: one can). Probed by creating a file there, because permission
    bits do not tell (root, read-only mounts, /proc, /sys): one without a name where the file system makes them
    (O_TMPFILE), which leaves the folder's time alone (make and rsync go by it), else a hidden one, then removed."""
    import errno
    import tempfile
    try:
        os.close(os.open(folder, getattr(os, "O_TMPFILE", 0) | os.O_WRONLY, 0o600))
        return None
    except OSError as e:
        cannot = e
    if cannot.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):  # no O_TMPFILE on this file system
        try:
            fd, probe = tempfile.mkstemp(prefix=".cluster-curate-probe-", dir=folder)
            os.close(fd)
            os.unlink(probe)
            return None
        except OSError as e:
            cannot = e
    return "permission denied" if isinstance(cannot, PermissionError) else (cannot.strerror or str(cannot)).lower()


# ------------------------------------------------------------------------------ what --overwrite replaces

SHARDS, EXPORT = "shards", "export"  # the directory outputs check_writable knows, besides the artifact kinds
_PARQUET_KINDS = (names.EMBEDDINGS, names.CLUSTERS, names.SELECTION)
_DATA_SUFFIXES = {".csv", ".tsv", ".json", ".jsonl", ".txt", ".yaml", ".yml", ".gz", ".npy", ".npz", ".arrow"}
KEEP_ONLY = "--overwrite replaces only the tool's own outputs"
_PART_FILE = re.compile(r"^part-.+\.parquet$")
_PART_SIDE = re.compile(r"^rejects-\d+-of-\d+\.jsonl$"  # a worker's rejects; a part or rejects file being written
                        r"|^\.(part-.+\.parquet|rejects-\d+-of-\d+\.jsonl)\.(.+\.)?tmp$")
_SHARD_FILE = re.compile(r"^shard-\d+-of-\d+\.parquet$")


def output_inputs(*sources) -> list[str]:
    """The local paths a command reads, for check_writable's `inputs`: each argument a path, a list of paths or
    None; a mixture file stands for itself and the inputs it names; `hf:` ids are no paths."""
    from cluster_curate.io.datasets import data_paths
    out: list[str] = []
    for src in sources:
        for s in data_paths(src):
            if not s or s.startswith("hf:"):
                continue
            out.append(s)
            try:
                from cluster_curate.io.mixture import is_mixture_file, read_mixture_file
                if Path(s).is_file() and is_mixture_file(s):
                    out.extend(i.path for i in read_mixture_file(s) if not i.path.startswith("hf:"))
            except CurateError:
                pass  # a bad mixture file is reported where it is read
    return out


def check_not_input(path: str | os.PathLike, inputs, label: str, *, holds: bool = True) -> None:
    """One line unless the output `path` is none of `inputs` and (`holds`: an output replaced whole) holds none
    of them, compared as resolved absolute paths: replacing it would destroy an input."""
    out = Path(os.path.realpath(path))
    option = label.split(" ", 1)[0] if label.startswith("--") else "--out"  # "--rejects PATH" -> --rejects
    for src in inputs:
        s = Path(os.path.realpath(src))
        if s == out:
            raise CurateError(f"{label}: is the input {src}; choose another {option}")
        if holds and out in s.parents and os.path.lexists(src):
            raise CurateError(f"{label}: holds the input {src}; choose another {option}")
        if s in out.parents and out.suffix.lower() in ("", ".parquet") and _is_data_dir(s):
            raise CurateError(f"{label}: is inside the input directory {src}, which is read whole (a data "
                              f"directory's files are its rows: the next read would take this output in); choose "
                              f"another {option}")


def _is_data_dir(d: Path) -> bool:
    """A directory given as an input and read whole (a Parquet dataset, a save_to_disk folder, a folder of JSON
    files, a --tokenizer's), not one of the tool's own folders (a `run` folder, shards, an artifact's parts),
    where outputs go beside the inputs."""
    if not d.is_dir() or (d / names.RUN_STATE).exists() or (d / names.MANIFEST).exists():
        return False
    try:
        read_meta(d)
    except CurateError:
        return True
    return False


def replace_refusal(path: str | os.PathLike, kind: str) -> str | None:
    """Why the existing `path` may not be replaced by an output of `kind` (None: it may): only an empty
    directory or the tool's own output of that kind is replaced. An artifact kind: a Parquet file carrying
    that kind's metadata, or a directory of such part files (and the workers' rejects); SHARDS: a directory
    with the tool's manifest.json, its shards and leftover_ids.txt; EXPORT: the files `export` writes, with
    its README.md."""
    p = Path(path)
    if p.is_dir():
        entries = sorted(q.name for q in p.iterdir())
        if not entries:
            return None
        own = _own_folder(p, entries)
        if own and kind and own[0] != kind:  # "did not write" would be untrue
            return (f"{own[1]} cluster-curate wrote, not an earlier {kind} output; {KEEP_ONLY} of the same kind: "
                    "choose another --out")
        if kind == SHARDS:
            return _shards_refusal(p, entries)
        if kind == EXPORT:
            return _export_refusal(p, entries)
        return _parts_refusal(p, entries, kind)
    if kind in (SHARDS, EXPORT):
        return f"a file, not a directory cluster-curate wrote; {KEEP_ONLY}: choose a new or empty directory"
    if not p.is_file():
        return f"not a file cluster-curate wrote; {KEEP_ONLY}: choose another --out"
    if cut_short(p):
        return None  # no reader can use it: it is made again in its place
    try:
        meta = read_meta(p)
    except (CurateError, ValueError, TypeError):
        return (f"not a file cluster-curate wrote (no '{META_KEY.decode()}' metadata); {KEEP_ONLY}: choose "
                "another --out")
    if meta.kind != kind:
        return (f"{_article(meta.kind)} {meta.kind} artifact, not an earlier {kind} output; {KEEP_ONLY} of the "
                "same kind: choose another --out")
    return None


_NEW_DIRECTORY = "choose a new or empty directory"
_NEW_OUT = "choose another --out"  # an artifact's parts: one process writes a file, and no empty directory


def _not_written(what: str, choose: str = _NEW_DIRECTORY) -> str:
    return f"a directory cluster-curate did not write ({what}); {KEEP_ONLY}: {choose}"


def _foreign(names_: list[str], choose: str = _NEW_DIRECTORY) -> str:
    more = f" and {len(names_) - 1} more" if len(names_) > 1 else ""
    return (f"holds {names_[0]}{more}, which cluster-curate did not write; {KEEP_ONLY}: move "
            f"{'them' if more else 'it'} out or {choose}")


def _parts_refusal(p: Path, entries: list[str], kind: str) -> str | None:
    parts = [n for n in entries if _PART_FILE.match(n)]
    if not parts:
        return _not_written("no part-*.parquet files", _NEW_OUT)
    foreign = [n for n in entries if n not in parts and not _PART_SIDE.match(n)]
    if foreign:
        return _foreign(foreign, _NEW_OUT)
    for name in parts:
        if cut_short(p / name):
            continue
        try:
            meta = read_meta(p / name)
        except (CurateError, ValueError, TypeError):
            return _not_written(f"{name} has no '{META_KEY.decode()}' metadata", _NEW_OUT)
        if meta.kind != kind:
            return f"holds {meta.kind} parts, not an earlier {kind} output; {KEEP_ONLY} of the same kind: {_NEW_OUT}"
    return None


def _own_folder(p: Path, entries: list[str]) -> tuple[str, str] | None:
    """The kind and name of one of the tool's own folders that holds no artifact's parts (a `run` folder, shards,
    an export), None for any other directory."""
    if names.RUN_STATE in entries:
        return "run", "a `run` folder"
    if _not_shards(p, entries) is None:
        return SHARDS, "a shards directory"
    if _not_export(p, entries) is None:
        return EXPORT, "an export directory"
    return None


def _shards_refusal(p: Path, entries: list[str]) -> str | None:
    why = _not_shards(p, entries)
    if why:
        return _not_written(why)
    foreign = [n for n in entries if n not in (names.MANIFEST, names.LEFTOVER) and not _SHARD_FILE.match(n)]
    return _foreign(foreign) if foreign else None


def _not_shards(p: Path, entries: list[str]) -> str | None:
    """Why `p` is not a shards directory `shard` wrote (None: it is one)."""
    if names.MANIFEST not in entries:
        return f"no {names.MANIFEST}"
    try:
        manifest = json.loads((p / names.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("kind") != names.SHARD_MANIFEST_KIND:
        return f"its {names.MANIFEST} is not a shard manifest"
    return None


_EXPORT_DATA = (names.EXPORT_DATA, *names.EXPORT_SELECTED.values())


def _export_refusal(p: Path, entries: list[str]) -> str | None:
    why = _not_export(p, entries)
    if why:
        return _not_written(why)
    known = {*_EXPORT_DATA, names.EXPORT_README, names.TRAINING_ARGS, names.DATALOADER_ARGS, names.TRAINER_CONFIG,
             names.LLAMAFACTORY_DATASET_INFO}
    foreign = [n for n in entries if n not in known]
    return _foreign(foreign) if foreign else None


def _not_export(p: Path, entries: list[str]) -> str | None:
    """Why `p` is not a directory `export` wrote (None: it is one): its README.md says what it exported."""
    head = ""
    if names.EXPORT_README in entries:
        try:
            with open(p / names.EXPORT_README, encoding="utf-8") as f:
                head = f.readline()
        except (OSError, UnicodeDecodeError):
            pass
    if any(head.startswith(f"# `{d}` for ") for d in _EXPORT_DATA):
        return None
    return f"no {names.EXPORT_README} of an export"


def replaced_whole_around(path) -> tuple[str, Path] | None:
    """The shards or export directory that holds `path`, if any, as (kind, directory): `--overwrite` replaces
    such a directory whole, and refuses one holding files it did not write, so nothing else goes inside."""
    for parent in Path(os.path.abspath(path)).parents:
        if parent.is_dir():
            entries = [q.name for q in parent.iterdir()]
            for kind, not_it in ((SHARDS, _not_shards), (EXPORT, _not_export)):
                if not not_it(parent, entries):
                    return kind, parent
    return None


def check_not_inside_replaced(path, label: str) -> None:
    """One line (CurateError) when the output `path` is inside a shards or export directory (replaced_whole_around):
    the next `shard`, `run` or `export --overwrite` of that directory would refuse it as a file it did not write."""
    around = replaced_whole_around(path)
    if around:
        raise CurateError(f"{label}: inside the {around[0]} directory {around[1]}, which `--overwrite` "
                          "replaces whole (and refuses with files of yours in it); choose a folder beside it")


def only_shard_files(p: Path) -> bool:
    """Whether every entry of the directory `p` has a name `shard` writes (manifest.json, leftover_ids.txt, its
    shard files), whatever is in them: a `run` folder's own shards, with a manifest edited by hand, are emptied
    and written again."""
    return all(n in (names.MANIFEST, names.LEFTOVER) or _SHARD_FILE.match(n) for n in os.listdir(p))


# a stage's record in run-state.json while `run` makes it, or a stage before it, again: set on them all before the
# first output is touched and dropped as each is made (or found up to date), so a stopped run leaves the folder
# marked unfinished (check_run_finished), while the interrupted stage's previous output stays whole
RUN_REMAKING = "remaking"


def check_run_finished(path) -> None:
    """One line (CurateError) when `path` is a `run` folder, or one of its outputs (names.RUN_OUTPUTS beside its
    run-state.json), that `run` began to make again, with a stage before it, and did not finish: its outputs
    from that stage on mix the previous inputs' and options' with the new ones (an interrupted re-run)."""
    p = Path(path)
    if p.name not in names.RUN_STAGE_OF and not (p / names.RUN_STATE).is_file():
        p = p.resolve()  # `.`, or a link, by its own name names no stage
    if (p / names.RUN_STATE).is_file():  # the folder: its shards are what is read
        p = p / names.RUN_OUTPUTS["shard"]
    stage = names.RUN_STAGE_OF.get(p.name)
    state = p.parent / names.RUN_STATE
    if stage is None or not state.is_file():
        return
    try:
        stages = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # `run` writes it atomically: not one of its own
    unfinished = [s for s in names.STAGES[:names.STAGES.index(stage) + 1]
                  if isinstance(stages, dict) and isinstance(stages.get(s), dict) and stages[s].get(RUN_REMAKING)]
    if unfinished:
        raise CurateError(f"{path}: not finished: `run` stopped while making its {unfinished[0]} stage again "
                          f"({state} says so), and its outputs from there on are not all of one run; run `run` again "
                          "to finish them (with what its last error asked for, if it stopped on one)")


# ----------------------------------------------------------------------------------------------- read

def read_meta(path: str | os.PathLike, kind: str | tuple[str, ...] | None = None) -> ArtifactMeta:
    """Metadata of an artifact (of its first part, every other part checked to be of the same command); checks the
    kind when given."""
    files = artifact_files(path)
    metas = [_part_meta(f) for f in files]  # each part's: one damaged, or of another run, is named
    if META_KEY not in metas[0]:
        raise CurateError(f"{path}: not a cluster-curate artifact (no '{META_KEY.decode()}' metadata)")
    meta = ArtifactMeta.from_json(metas[0][META_KEY].decode())
    if len(files) > 1:
        for f, m in zip(files[1:], metas[1:]):
            if names.part_of(f.name) is None:  # a folder of other files (a `run` folder): not parts of one artifact
                continue
            other = ArtifactMeta.from_json(m[META_KEY].decode()) if META_KEY in m else None
            if other is None or (other.fingerprint, other.params, other.dataset) != (meta.fingerprint, meta.params,
                                                                                     meta.dataset):
                raise CurateError(f"{f}: a part of another run than {files[0].name} (other parameters or data): "
                                  "every part of an artifact comes from one command; embed all of it again")
        meta.rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if kind is not None:
        kinds = (kind,) if isinstance(kind, str) else tuple(kind)
        if meta.kind not in kinds:
            raise CurateError(f"{path}: is {_article(meta.kind)} '{meta.kind}' artifact, expected "
                              f"{' or '.join(repr(k) for k in kinds)}")
    return meta


def _part_meta(path: Path) -> dict:
    """A Parquet file's key-value metadata, or one line: unreadable, cut short (damaged) or not Parquet."""
    try:
        return pq.read_schema(path).metadata or {}
    except PermissionError as e:
        raise cannot_read(path, e) from None
    except (pa.ArrowInvalid, OSError) as e:
        if cut_short(path):
            raise damaged(path) from None
        raise CurateError(f"{path}: not a readable Parquet file ({e})") from None


def cut_short(path: str | os.PathLike) -> bool:
    """Whether `path` is a Parquet file cut short (a full disk in another tool, a copy stopped part-way): it
    begins as every Parquet file does (PAR1) but lacks the footer that ends a whole one, which holds its schema
    and metadata; or it is empty. No reader can use it, so an output's --overwrite makes it again in its place."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(4)
            f.seek(max(size - 4, 0))
            tail = f.read(4)
    except OSError:
        return False
    return size == 0 or (head == _PARQUET_MAGIC and (size < 12 or tail != _PARQUET_MAGIC))


_PARQUET_MAGIC = b"PAR1"


def damaged(path: str | os.PathLike) -> CurateError:
    """The error of an artifact cut short (cut_short), naming the stage that makes it again where its name is a
    `run` folder's (`select ... --overwrite`), and in a `run` folder the same `run`, which re-runs such a stage."""
    p = Path(path)
    stage = names.RUN_STAGE_OF.get(p.name)
    again = f"`{stage} ... --overwrite`" if stage else "the command that wrote it, with --overwrite"
    if (p.parent / names.RUN_STATE).is_file():
        again += ", or the same `run`"
    size = p.stat().st_size
    how = "empty" if size == 0 else f"cut short at {size:,} bytes, no Parquet footer"
    return CurateError(f"{p}: damaged: {how} (a full disk or a copy stopped part-way); make it again: {again}")


def _article(word: str) -> str:
    return "an" if word[:1].lower() in tuple("aeiou") else "a"


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """pq.read_table of one file, without importing pyarrow.dataset (a share of every command's start:
    benchmarks/results/code_figures.md). Unlike ParquetFile.read alone, a column the file lacks raises, as read_table does."""
    f = pq.ParquetFile(path)
    names = set(f.schema_arrow.names)  # schema_arrow converts the Parquet schema anew on every access
    missing = [c for c in columns or () if c not in names]
    if missing:
        raise pa.ArrowInvalid(f"no column {', '.join(map(repr, missing))} in {path}")
    return f.read(columns=columns)


def read_artifact(path: str | os.PathLike, kind: str | tuple[str, ...] | None = None,
                  columns: list[str] | None = None) -> tuple[pa.Table, ArtifactMeta]:
    """Read a whole artifact (file or part directory) as one table, sorted by `id` when parts are joined."""
    meta = read_meta(path, kind)
    files = artifact_files(path)
    try:
        tables = [read_parquet(f, columns) for f in files]
    except (pa.ArrowInvalid, OSError, KeyError) as e:
        raise cannot_read(path, e, "the artifact") from None
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(files) > 1 and "id" in table.column_names:
        table = table.sort_by("id")
    return table.replace_schema_metadata(None), meta


def check_same_dataset(metas: dict[str, ArtifactMeta], force: bool = False) -> dict:
    """All inputs must descend from the same raw dataset; returns that dataset record.

    `metas` maps a display name (usually the path) to its meta. With force=True a mismatch is allowed.
    """
    items = list(metas.items())
    first_name, first = items[0]
    for name, meta in items[1:]:
        a, b = first.dataset.get("fingerprint"), meta.dataset.get("fingerprint")
        if a != b and not force:
            raise CurateError(
                f"{name}: comes from a different dataset than {first_name} "
                f"({meta.dataset.get('source')!s} fingerprint {b} vs {first.dataset.get('source')!s} fingerprint {a}); "
                "pass --force to use them together anyway")
    return first.dataset


def _check_same_ids(recorded: dict, name: str, dataset: dict) -> None:
    """--force takes changed data, but not a mixture whose ids name other rows: a mixture's ids count on from
    input to input, so inputs in another order, or one holding another number of rows before the last, put other
    rows under the ids the artifact names (shard would write them, with another row's cluster and weight)."""
    def layout(record):
        return [(i.get("name"), i.get("first_id")) for i in record["inputs"]]
    full = all("first_id" in i for i in dataset["inputs"])  # a full record (commands/common._fingerprints)
    if full and layout(recorded) != layout(dataset):
        def said(record):
            return ", ".join(f"{n} from id {f}" for n, f in layout(record))
        paths = " ".join(str(i.get("path") or i.get("name")) for i in recorded["inputs"])
        raise CurateError(f"{name}: its ids name the rows of the inputs {said(recorded)}, and the data given holds "
                          f"{said(dataset)}: other rows under the same ids, which --force cannot use; give the inputs "
                          f"as they were embedded, in this order: {paths}")


def check_dataset_matches(recorded: dict, name: str, dataset: dict, force: bool = False,
                          same_place: bool = False, way_out: str | None = None) -> None:
    """An artifact whose lineage records the raw data `recorded` must come from `dataset` (its source and
    fingerprint; a mixture's, its inputs' too). `same_place`: `dataset` was read where `recorded` says, so that a
    mismatch is that data changed since (one wording wherever it is found: the recorded data, or --data naming it;
    of a mixture, the first input that changed). `way_out`: what to pass instead of the data (the artifact is the
    option to mend: `--embeddings E`), else --data."""
    from cluster_curate.io.mixture import is_mixture_record
    if recorded.get("fingerprint") == dataset.get("fingerprint"):
        return
    mixture = is_mixture_record(recorded)
    if force:
        if mixture and is_mixture_record(dataset):
            _check_same_ids(recorded, name, dataset)
        return
    if same_place:
        what, now, then = f"the {'mixture' if mixture else 'dataset'}", dataset, recorded
        if mixture and len(dataset.get("inputs") or ()) == len(recorded["inputs"]):
            changed = [(i, d) for i, d in zip(recorded["inputs"], dataset["inputs"])
                       if i.get("fingerprint") != d.get("fingerprint")]
            if changed:
                then, now = changed[0]
                what = f"input {then.get('name')} of the mixture"
        from cluster_curate.errors import DataChanged
        raise DataChanged(
            f"{now.get('source')} ({what} {Path(str(name)).name} records) has changed since (fingerprint "
            f"{now.get('fingerprint')}, {then.get('fingerprint')} when recorded); pass --data DATA (the data it was "
            "made from), or --force to use it as it is now", str(now.get("source")))
    inputs = [str(i.get("path") or i.get("name")) for i in recorded["inputs"]] if mixture else []
    # a mixture's inputs given one short or in another order: say what it was made from, in order
    hint = f"--data once per input, in this order: {' '.join(inputs)} (or its mixture file), or " if inputs else ""
    hint = f"{way_out}, or " if way_out else hint
    raise CurateError(
        f"{name}: was made from {recorded.get('source')} (fingerprint {recorded.get('fingerprint')}), "
        f"not from {dataset.get('source')} (fingerprint {dataset.get('fingerprint')}); pass {hint}--force to use "
        "it anyway")
