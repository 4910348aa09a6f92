"""The one place files are written (docs/architecture.md, "Artifacts": Writing): every artifact, sidecar, manifest and
part goes through these functions, so every write is atomic (a temporary file in the same directory, then a
rename), an existing output is replaced only when asked, and the metadata is attached in one way.

A directory output (the shards) is built in a hidden temporary directory beside it and swapped into place
whole (`staged_directory`): a reader sees the old directory or the new one, never a mix. A writer killed without
clean-up (SIGKILL) leaves only hidden temporaries, which the output's next writer removes (`_remove_leftovers`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import (META_KEY, ArtifactMeta, check_creatable, check_writable, json_default,
                                         replace_refusal, written_at)


def with_meta(table: pa.Table, meta: ArtifactMeta) -> pa.Table:
    """`table` carrying the artifact metadata (key META_KEY), other schema metadata kept."""
    existing = dict(table.schema.metadata or {})
    existing[META_KEY] = meta.to_json().encode()
    return table.replace_schema_metadata(existing)


def file_metadata(meta: ArtifactMeta) -> dict[bytes, bytes]:
    return {META_KEY: meta.to_json().encode()}


# The names of the temporary files and folders below (mkstemp's and mkdtemp's, prefix `.NAME.`): a writer killed
# mid-write (SIGKILL, the OOM killer, a power cut) leaves them beside NAME.
_LEFTOVER = re.compile(r"^\.(.+)\.[a-z0-9_]{8}\.(tmp|old)$")

# A write the system refused for a reason of the user's to fix, not the tool's defect: why, and what to do.
_FREE = "free some space and run the same command again"
_REFUSED = {errno.ENOSPC: ("no space left on device", _FREE), errno.EDQUOT: ("disk quota exceeded", _FREE),
            errno.EFBIG: ("file too large (over the file system's or the process's file-size limit, ulimit -f)",
                          "raise the limit or write to another file system, and run the same command again"),
            errno.EROFS: ("read-only file system", "choose an output on a writable file system"),
            errno.EACCES: ("permission denied", "make it writable (chmod u+w) or choose another output"),
            errno.EPERM: ("operation not permitted", "make it writable (chmod u+w) or choose another output")}
_BY_PATH = {errno.EACCES, errno.EPERM}  # also a reader's errors: converted only when they name the output


def _refused(e: OSError, out: Path) -> tuple[str, str] | None:
    """(why, what to do) when `e` is a write of `out` the system refused (f.write's and pyarrow's errors name no
    file, pyarrow's carry the errno in their text only), else None."""
    if e.errno in _BY_PATH:
        named = Path(os.path.abspath(e.filename)) if e.filename else None
        ours = named is not None and any(q == out or (q.parent == out.parent and q.name.startswith(f".{out.name}."))
                                         for q in (named, *named.parents))  # it, in it, or its temporary
        return _REFUSED[e.errno] if ours else None
    if e.errno in _REFUSED:
        return _REFUSED[e.errno]
    text = str(e).lower()
    return next((r for code, r in _REFUSED.items() if code not in _BY_PATH and os.strerror(code).lower() in text),
                None)


@contextmanager
def _room_to_write(path: str | os.PathLike) -> Iterator[None]:
    """Any write under this block that the system refuses (a full disk or quota, a file-size limit, a folder made
    read-only meanwhile) ends the command with one line naming `path` and what to do. Every caller removes its
    temporary file first, so nothing half-written is left; the same command reruns once the cause is fixed."""
    try:
        yield
    except OSError as e:
        refused = _refused(e, Path(os.path.abspath(path)))
        if refused is None:
            raise
        # a file of a folder being staged is named as it will be found: NAME/file, not .NAME.xxxxxxxx.tmp/file
        shown = Path(*[m.group(1) if (m := _LEFTOVER.match(part)) and m.group(2) == "tmp" else part
                       for part in Path(path).parts])
        raise CurateError(f"{shown}: cannot write it: {refused[0]} (nothing half-written was kept; {refused[1]})") \
            from e


def umask_mode(directory: bool = False) -> int:
    """The mode a plain open() / mkdir() would give under the process umask (0644 / 0755 under 022)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def _public_temp(prefix: str, directory: Path) -> str:
    """A temporary file in `directory` with the umask's mode: mkstemp makes it 0600, and a file renamed into
    place keeps its mode, so a teammate's `report` or `shard` would get Permission denied."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    os.fchmod(fd, umask_mode())
    os.close(fd)
    return tmp


_LEFTOVERS: dict[Path, set[str]] = {}  # per folder, the leftovers found there when this process first wrote in it


def _remove_leftovers(target: Path) -> None:
    """Remove what a killed writer of `target` left beside it: its temporary file or folder (`.NAME.xxxxxxxx.tmp`)
    and a replaced folder on its way out (`.NAME.xxxxxxxx.old`). None is ever read (hidden names; a part
    directory's reader skips them), but a shards folder's may be gigabytes. Only those names, and only by the
    output's one writer (lock.held): the processes of a multi-rank embed write side by side, unlocked. A folder is
    listed once per process, before this process made a temporary file there."""
    from cluster_curate.io.lock import held
    if not held():
        return
    folder = target.parent
    if folder not in _LEFTOVERS:
        try:
            _LEFTOVERS[folder] = {n for n in os.listdir(folder) if _LEFTOVER.match(n)}
        except OSError:
            _LEFTOVERS[folder] = set()
    for name in [n for n in _LEFTOVERS[folder] if _LEFTOVER.match(n).group(1) == target.name]:
        _LEFTOVERS[folder].discard(name)
        _remove(folder / name)


def remove_leftovers(folder: Path, ours: Callable[[str], bool]) -> None:
    """Remove what killed writers left in `folder` (as _remove_leftovers) of the names `ours` picks, for a process
    that is not the output's one writer but holds the lock of those names (a worker of a multi-rank embed: its
    chunks, part and rejects), so that none is another process's at work."""
    try:
        left = [n for n in os.listdir(folder) if (m := _LEFTOVER.match(n)) and ours(m.group(1))]
    except OSError:
        return
    for name in left:
        _remove(folder / name)


def _remove(stale: Path) -> None:
    if stale.is_dir() and not stale.is_symlink():
        shutil.rmtree(stale, ignore_errors=True)
    else:
        stale.unlink(missing_ok=True)


@contextmanager
def _atomic_file(path: str | os.PathLike) -> Iterator[str]:
    """A temporary file beside `path` that becomes it when the block ends without an error, and is removed when
    it does not (through a link: at the link's target, artifacts.written_at, so the link stays)."""
    p = written_at(path)
    _remove_leftovers(p)
    with _room_to_write(p):
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = _public_temp(f".{p.name}.", p.parent)
        try:
            yield tmp
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with _atomic_file(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_json(path: str | os.PathLike, obj, *, indent: int | None = 2, sort_keys: bool = False,
               newline: bool = True) -> None:
    """Atomically write `obj` as JSON (numpy values converted)."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=json_default)
    atomic_write_bytes(path, (text + ("\n" if newline else "")).encode())


def write_lines(path: str | os.PathLike, lines) -> None:
    atomic_write_bytes(path, "".join(f"{line}\n" for line in lines).encode())


def _leaves(t: pa.DataType, path: str) -> Iterator[tuple[str, pa.DataType]]:
    """(Parquet column path, type) of each leaf under an Arrow type, named as pyarrow writes them."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _leaves(t.value_type, f"{path}.list.element")
    elif pa.types.is_map(t):
        yield from _leaves(t.key_type, f"{path}.key_value.key")
        yield from _leaves(t.item_type, f"{path}.key_value.value")
    elif pa.types.is_struct(t):
        for f in t:
            yield from _leaves(f.type, f"{path}.{f.name}")
    else:
        yield path, t


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet columns to dictionary-encode: all but the floating-point ones. Feature vectors and losses
    seldom repeat a value, so the writer fills a dictionary page before it falls back to plain values: 9x the
    write's time for a file no smaller (benchmarks/results/scale.md)."""
    return [path for f in schema for path, t in _leaves(f.type, f.name) if not pa.types.is_floating(t)]


def write_parquet_atomic(table: pa.Table, path: str | os.PathLike, **kwargs) -> None:
    """Write a Parquet file through a temporary file in the same directory, then rename it into place (through
    a link: at the link's target, artifacts.written_at)."""
    with _atomic_file(path) as tmp:
        pq.write_table(table, tmp, **{"use_dictionary": _dictionary_columns(table.schema), **kwargs})


@contextmanager
def parquet_stream(path: str | os.PathLike, schema: pa.Schema) -> Iterator[pq.ParquetWriter]:
    """A ParquetWriter on a temporary file that becomes `path` when the block ends without an error (tables
    written in pieces, memory one piece). A directory at `path` is replaced only when it is a former part
    artifact of the kind in `schema`'s metadata, or empty (artifacts.replace_refusal; the command checked it
    before any work: this is the second guard). Through a link: at the link's target (artifacts.written_at)."""
    target = written_at(path)
    if target.is_dir():
        _refuse_foreign(target, _schema_kind(schema))
        shutil.rmtree(target)
    with _atomic_file(target) as tmp, \
            pq.ParquetWriter(tmp, schema, use_dictionary=_dictionary_columns(schema)) as writer:
        yield writer


def write_artifact(table: pa.Table, path: str | os.PathLike, meta: ArtifactMeta, *, overwrite: bool = False) -> ArtifactMeta:
    """Write `table` as a single-file artifact carrying `meta`; returns the meta with `rows` filled in. With
    `overwrite`, only an artifact of the same kind (a file, or a directory of its parts) or an empty directory
    is replaced (artifacts.check_writable)."""
    check_writable(path, overwrite, kind=meta.kind)
    meta.rows = table.num_rows
    p = written_at(path)
    if p.is_dir():  # replacing a part-file artifact with a single file (check_writable allowed it just above)
        shutil.rmtree(p)
    write_parquet_atomic(with_meta(table, meta), p)
    return meta


def _schema_kind(schema: pa.Schema) -> str | None:
    """The artifact kind in a schema's metadata (None when it carries none)."""
    raw = (schema.metadata or {}).get(META_KEY)
    try:
        return ArtifactMeta.from_json(raw.decode()).kind if raw else None
    except (ValueError, TypeError):
        return None


def _refuse_foreign(directory: Path, kind: str | None) -> None:
    """The second guard of a write that replaces the directory `directory`: CurateError unless it is empty or
    the tool's own output of `kind` (artifacts.replace_refusal); nothing the tool did not write is deleted."""
    why = replace_refusal(directory, kind or "")  # no kind: only an empty directory
    if why:
        raise CurateError(f"{directory}: {why}")


def write_part(table: pa.Table, directory: str | os.PathLike, name: str, meta: ArtifactMeta) -> Path:
    """Write one part file of a directory artifact (each part carries the artifact's metadata, with its own rows)."""
    import dataclasses
    p = Path(directory) / name
    write_parquet_atomic(with_meta(table, dataclasses.replace(meta, rows=table.num_rows)), p)
    return p


def npy_bytes(array) -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


@contextmanager
def staged_directory(out: str | os.PathLike, kind: str | Callable[[Path], bool], *,
                     into_others: bool = False) -> Iterator[Path]:
    """Build a directory output in a temporary directory beside `out`; on success it replaces `out` (an
    existing one only goes once the new one is complete), on an error it is removed. Everything in it gets the
    umask's permissions: mkdtemp/mkstemp and some writers (safetensors) make private files, and outputs are for
    the job. An existing `out` is replaced only when it is an empty directory or the tool's own output of
    `kind` (SHARDS, EXPORT: artifacts.replace_refusal; or a test of the directory, e.g. the proxy's): the
    command checked it before any work (artifacts.check_writable), this is the second guard. `into_others`: a
    folder holding files of the user's stays, and the new files are renamed into it once all are written
    (report's plots: the earlier ones stay, all of them, when one cannot be written)."""
    out_dir = Path(out)
    if out_dir.is_symlink() and out_dir.is_dir():
        # a link to a folder elsewhere (a bigger disk): the new folder goes there, and the link stays. Swapped
        # at the link itself, the folder landed beside the link and the link was gone.
        out_dir = written_at(out_dir)
        check_creatable(out_dir)  # the new folder is built beside the one it replaces: one line if it cannot be
    into = False  # the new files go into the existing folder, one by one
    if out_dir.exists() or out_dir.is_symlink():
        if callable(kind):
            why = None if out_dir.is_dir() and (not any(out_dir.iterdir()) or kind(out_dir)) else \
                "not a directory cluster-curate wrote"
        else:
            why = replace_refusal(out_dir, kind)
        into = bool(why) and into_others and out_dir.is_dir()
        if why and not into:
            raise CurateError(f"{out_dir}: {why}")
    _remove_leftovers(out_dir)
    with _room_to_write(out_dir):  # what the block writes into `work` (shards, an export) is named by its folder
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
        try:
            yield work
            os.chmod(work, umask_mode(directory=True))
            for f in work.rglob("*"):
                os.chmod(f, umask_mode(directory=f.is_dir()))
            if not out_dir.exists():
                os.replace(work, out_dir)
            elif into:
                for f in sorted(work.iterdir()):
                    os.replace(f, out_dir / f.name)
                work.rmdir()
            elif _exchange(work, out_dir):  # the old folder is at `work` now
                shutil.rmtree(work, ignore_errors=True)
            else:
                trash = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
                try:
                    os.replace(out_dir, trash / "old")
                    try:
                        os.replace(work, out_dir)
                    except BaseException:
                        os.replace(trash / "old", out_dir)  # the old folder back in place
                        raise
                finally:
                    shutil.rmtree(trash, ignore_errors=True)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders `a` and `b` in one step (Linux renameat2 RENAME_EXCHANGE), so that no moment, nor a kill,
    finds `b` missing; False where the system or the file system cannot (the caller then renames twice)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, rename_exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))
