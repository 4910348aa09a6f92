"""One writer per output: an advisory lock (flock) held while a command writes (issue 20 #4).

A second command writing the same output fails at once with a line naming the holder, instead of both
running and the later rename silently winning. The lock file is hidden beside the output (`.NAME.lock`) and
removed when released, the folder's time set back when nothing else was written there (make and rsync go by it);
a lock whose holder died is free again (the kernel drops flock locks of dead processes).
`X.parquet` and a folder `X` share their sidecars (`X.partial`, `X.text.npz`): between commands that write sidecars
(embed, cluster, select) each one's lock covers the other.
A folder's lock covers what is in it: `embed --out cur/embeddings.parquet` is refused while `run --out cur`
writes, and `run --out cur` while a command writes something in `cur/`. The workers of a multi-process `embed`
write an output in parts, each under its part's lock (`.OUT.part-WWWWW-of-NNNNN.parquet.lock`): one is refused
while one process writes OUT, and that process while a worker writes a part of it; the workers do not refuse each
other. Writers started at the same moment: of those of one output, flock lets one take the lock; of two whose locks
cover each other (two files), each looks at the other's again once it holds its own, and the later gives way.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from cluster_curate.errors import CurateError

_HELD: set[Path] = set()  # the locks this process holds
_PART_LOCK = re.compile(r"\.(.+)\.(part-\d+-of-\d+\.parquet)\.lock")  # .OUT.PART.lock: _part_lock_path
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a file system that refuses flock (NFS, no lock service)
_WAIT = 5.0  # seconds: the most a writer waits for a holder to say who it is, or for a later one to give way


def held() -> bool:
    """Whether this process holds an output's lock: it is then that output's one writer (a command of one process,
    or `run`), so a temporary file beside what it writes is a dead writer's, not another process's at work."""
    return bool(_HELD)


def lock_path(out: str | os.PathLike) -> Path:
    """The lock of the output `out` where it is written: through links (a folder linked to another disk, two
    spellings of one folder) one output has one lock, as it has one place (artifacts.written_at)."""
    p = Path(os.path.realpath(out))
    return p.with_name(f".{p.name}.lock")


def _part_lock_path(out: Path, part: str) -> Path:
    """The lock of the part `part` of `out` (links resolved): beside `out`, which may be a file its leader
    replaces, named after it, where the writer of all of `out` looks for it (_covering_locks)."""
    return out.with_name(f".{out.name}.{part}.lock")


@contextmanager
def output_lock(out: str | os.PathLike, command: str, *, part: str | None = None, flag: str = "--out"):
    """Hold the lock of `out` for the block; CurateError at once when another process holds it, or one that
    covers it (_covering_locks). `part`: this process writes only that part of `out` (a worker of a multi-rank
    embed; named `out/part`), beside other workers: it holds the part's lock, and is not the one writer that `held`
    tells. The covering locks are looked at before this one is taken (nothing is made when one is held) and again
    once it is: two writers started at the same moment both pass the first look, and the later gives way."""
    from cluster_curate.io.artifacts import check_creatable
    check_creatable(out)
    real = Path(os.path.realpath(out))
    path = lock_path(out) if part is None else _part_lock_path(real, part)
    named = out if part is None else os.path.join(out, part)  # as typed: Path would drop a leading ./

    def refuse_if_covered(order: int | None = None) -> None:  # a folder's lock, a part's, the sidecar twin's
        _refuse_if_held(_covering_locks(real, part), named, order, flag=flag)
        _refuse_if_held(_twin_locks(real, command), named, order, only=SIDECAR_COMMANDS, flag=flag)
    refuse_if_covered()
    created = []  # directories made for the lock, removed again when the command leaves them empty
    folder = _folder_state(path.parent) if path.parent.exists() else None
    fd, order = _take(path, named, created, flag)
    if created:
        folder = None
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                "since": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": " ".join(sys.argv[1:])[:200], "order": order}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info).encode())
        refuse_if_covered(order)
        if part is None:
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


def _take(path: Path, named, created: list[Path], flag: str = "--out") -> tuple[int, int]:
    """The open lock file `path`, locked (flock: of two processes only one gets it, however close they come), and
    when (`order`: which of two writers of covering locks gives way, _refuse_if_held). CurateError naming the
    holder when another process holds it, or when the lock was not had within _WAIT seconds of retries (a holder
    yet to say who it is, a file replaced under it). Folders missing on the way are made and added to `created`."""
    import fcntl
    deadline = time.monotonic() + _WAIT
    holder = None  # the last holder seen, named when the lock cannot be had
    while time.monotonic() < deadline:  # bounded: a file or folder replaced under it at every look never hangs it
        for parent in reversed(path.parents):
            try:
                parent.mkdir()
                created.append(parent)
            except FileExistsError:
                pass  # there already, or made at this moment by another writer
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:
            continue  # a folder made for a lock by another writer, which removed it as it gave up
        try:
            _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, named)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if _alive(holder):
                break
            time.sleep(0.001)  # the holder has yet to say who it is, or another writer is looking at it
            continue
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino  # not a file its last holder just removed
        except FileNotFoundError:
            same = False
        if same:
            return fd, time.monotonic_ns()
        os.close(fd)
    raise CurateError(f"{named}: in use by another cluster-curate {_described(holder)}; wait for it to finish or "
                      f"choose another {flag}")


def _flock(fd: int, operation: int, named) -> None:
    """flock (BlockingIOError when another process holds it), or nothing, with a warning, where the file system
    refuses locks (ENOLCK: NFS without its lock service): the command then writes unguarded, as it says, where it
    was an INTERNAL ERROR."""
    import fcntl
    try:
        fcntl.flock(fd, operation)
    except BlockingIOError:
        raise
    except OSError as e:
        if e.errno not in _NO_LOCKS:
            raise
        from cluster_curate.console import warn
        warn(f"{named}: its file system refuses locks ({e.strerror}); going on without the check that no other "
             "cluster-curate writes it at the same time", once=True)


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


def _covering_locks(out: Path, part: str | None) -> list[Path]:
    """The other locks that cover files of `out` (links resolved): those of the folders around it (a `run` writing
    there), those in it, when it is a folder (commands writing a file in it), and, for a writer of all of `out`,
    its parts' (the workers of a multi-rank embed), for a worker writing `part` of it, the lock of all of `out`
    (not the other workers': they write beside it)."""
    around = [lock_path(folder) for folder in out.parents if folder != folder.parent]
    inside = sorted(out.glob(".*.lock")) if out.is_dir() else []
    whole = [lock_path(out)] if part else _part_locks(out)
    return [p for p in around + inside + whole if p.exists()]


def _part_locks(out: Path) -> list[Path]:
    """The locks of the workers writing parts of `out` (_part_lock_path)."""
    return sorted(out.parent.glob(f".{glob.escape(out.name)}.part-*-of-*.parquet.lock"))


# the commands that write sidecars beside their output, named after it less its .parquet (artifacts.sidecar_path)
SIDECAR_COMMANDS = ("embed", "cluster", "select")


def _twin_locks(out: Path, command: str) -> list[Path]:
    """The locks of the other output whose sidecars are `out`'s: `X.parquet` and a folder `X` share `X.partial`,
    `X.text.npz`, ... (a job-array piece writing `X/` and an `embed --out X.parquet`), and its parts'. Only between
    commands that write sidecars (_refuse_if_held's `only`): a `run` or `shard` folder `X` has none."""
    if command not in SIDECAR_COMMANDS:
        return []
    twin = out.with_name(out.name[:-len(".parquet")] if out.name.endswith(".parquet") else f"{out.name}.parquet")
    return [p for p in [lock_path(twin), *_part_locks(twin)] if p.exists()]


def _locked(lock: Path) -> Path:
    """What the holder of `lock` writes: NAME for `.NAME.lock`, OUT/PART for a part's (_part_lock_path)."""
    part = _PART_LOCK.fullmatch(lock.name)
    return lock.parent / part[1] / part[2] if part else lock.with_name(lock.name[1:-len(".lock")])


def _refuse_if_held(locks: list[Path], out, order: int | None = None, only: tuple[str, ...] | None = None,
                    flag: str = "--out") -> None:
    """CurateError naming the holder when another process holds one of `locks` (each tried, then let go). `order`:
    this process holds its own lock, taken then (_take); a holder that took its own later gives way (it looks, as
    this one does, once it holds its lock, and finds this one's held and earlier), so this one waits for it to.
    `only`: a holder of another command than these is no clash."""
    import fcntl
    for lock in locks:
        deadline = time.monotonic() + _WAIT
        while True:
            try:
                fd = os.open(lock, os.O_RDONLY)
            except OSError:
                break  # released meanwhile
            try:
                _flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, out)
                break
            except BlockingIOError:
                holder = _holder(fd)
            finally:
                os.close(fd)
            if only is not None and holder is not None and holder.get("command") not in only:
                break
            later = holder is not None and order is not None and (holder.get("order", -1), holder["pid"]) > (
                order, os.getpid())
            if (not _alive(holder) or later) and time.monotonic() < deadline:
                time.sleep(0.001)  # its holder has yet to say who it is, or is giving way to this one
                continue
            raise CurateError(f"{out}: in use by another cluster-curate {_described(holder)} writing {_locked(lock)}; "
                              f"wait for it to finish or choose another {flag}")


def _holder(fd: int) -> dict | None:
    """Who holds the lock file open as `fd`, as it wrote; None until it has (it writes once it holds it)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and "pid" in info else None


def _alive(holder: dict | None) -> bool:
    """Whether `holder` is a live process: what a lock file holds before its new holder has written is the last
    holder's, dead (a lock is left behind only by a killed process). Another machine's processes count as live."""
    if holder is None:
        return False
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return False
        except (PermissionError, TypeError, ValueError, OverflowError):
            pass  # another user's process, or not a pid: taken as said
    return True


def _described(holder: dict | None) -> str:
    if holder is None:
        return "(holder unknown)"
    return f"(`{holder.get('command')}`, pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')})"
