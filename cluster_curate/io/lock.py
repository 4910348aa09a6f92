"""One writer per output: an advisory lock (flock) held while a command writes (issue 20 #4).

A second command writing the same output fails at once with a line naming the holder, instead of both
running and the later rename silently winning. The lock file is hidden beside the output (`.NAME.lock`) and
removed when released, the folder's time set back when nothing else was written there (make and rsync go by it);
a lock whose holder died is free again (the kernel drops flock locks of dead processes).
A folder's lock covers what is in it: `embed --out cur/embeddings.parquet` is refused while `run --out cur`
writes, and `run --out cur` while a command writes something in `cur/`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from cluster_curate.errors import CurateError

_HELD: set[Path] = set()  # the locks this process holds


def held() -> bool:
    """Whether this process holds an output's lock: it is then that output's one writer (a command of one process,
    or `run`), so a temporary file beside what it writes is a dead writer's, not another process's at work."""
    return bool(_HELD)


def lock_path(out: str | os.PathLike) -> Path:
    """The lock of the output `out` where it is written: through links (a folder linked to another disk, two
    spellings of one folder) one output has one lock, as it has one place (artifacts.written_at)."""
    p = Path(os.path.realpath(out))
    return p.with_name(f".{p.name}.lock")


@contextmanager
def output_lock(out: str | os.PathLike, command: str, *, sole_writer: bool = True, shown=None):
    """Hold the lock of `out` for the block; CurateError at once when another process holds it, naming `shown`
    (default `out`). `sole_writer=False`: files beside `out` are written by other processes too (a worker of a
    multi-rank embed, which holds its part's lock): this one is not the one writer that `held` tells."""
    import fcntl

    from cluster_curate.io.artifacts import check_creatable
    check_creatable(out)
    path = lock_path(out)
    named = out if shown is None else shown
    _refuse_if_held(_covering_locks(Path(os.path.realpath(out))), named)
    created = []  # directories made for the lock, removed again when the command leaves them empty
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir()
            created.append(parent)
    folder = None if created else _folder_state(path.parent)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise CurateError(f"{named}: in use by another cluster-curate {holder}; wait for it to finish or "
                              "choose another --out") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino  # not a file its last holder just removed
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                "since": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": " ".join(sys.argv[1:])[:200]}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        if sole_writer:
            _HELD.add(path)
        yield
    finally:
        _HELD.discard(path)
        try:
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        if folder is not None:
            _keep_time(path.parent, *folder)
        for parent in reversed(created):
            try:
                parent.rmdir()  # only when empty: a failed command leaves no folder behind
            except OSError:
                break


def _folder_state(folder: Path) -> tuple[int, dict[str, int]]:
    """A folder's time and its entries (name: inode; a file renamed into place is another inode)."""
    mtime = os.stat(folder).st_mtime_ns
    with os.scandir(folder) as entries:
        return mtime, {e.name: e.inode() for e in entries}


def _keep_time(folder: Path, mtime: int, entries: dict[str, int]) -> None:
    """The folder's time set back to `mtime` when its entries are those it had: the lock file came and went, and
    nothing else was written there, which make -j and rsync would take for a change (a `run` with nothing to do)."""
    try:
        if _folder_state(folder)[1] == entries:
            os.utime(folder, ns=(os.stat(folder).st_atime_ns, mtime))
    except OSError:
        pass  # a folder we may no longer change: its time is only a hint


def _covering_locks(out: Path) -> list[Path]:
    """The other locks that cover files of `out` (links resolved): those of the folders around it (a `run` writing
    there) and those in it, when it is a folder (commands writing a file in it)."""
    around = [lock_path(folder) for folder in out.parents if folder != folder.parent]
    inside = sorted(out.glob(".*.lock")) if out.is_dir() else []
    return [p for p in around + inside if p.exists()]


def _refuse_if_held(locks: list[Path], out) -> None:
    """CurateError naming the holder when another process holds one of `locks` (each tried, then let go)."""
    import fcntl
    for lock in locks:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue  # released meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CurateError(f"{out}: in use by another cluster-curate {_holder(fd)} writing "
                              f"{lock.with_name(lock.name[1:-len('.lock')])}; wait for it to finish or choose "
                              "another --out") from None
        finally:
            os.close(fd)


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "(holder unknown)"
    return f"(`{info.get('command')}`, pid {info.get('pid')} on {info.get('host')}, since {info.get('since')})"
