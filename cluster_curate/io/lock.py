"""One writer per output: an advisory lock (flock) held while a command writes (issue 20 #4).

A second command writing the same output fails at once with a line naming the holder, instead of both
running and the later rename silently winning. The lock file is hidden beside the output (`.NAME.lock`) and
removed when released; a lock whose holder died is free again (the kernel drops flock locks of dead processes).
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


def lock_path(out: str | os.PathLike) -> Path:
    p = Path(os.path.abspath(out))
    return p.with_name(f".{p.name}.lock")


@contextmanager
def output_lock(out: str | os.PathLike, command: str):
    """Hold the lock of `out` for the block; CurateError at once when another process holds it."""
    import fcntl

    from cluster_curate.io.artifacts import check_creatable
    check_creatable(out)
    path = lock_path(out)
    created = []  # directories made for the lock, removed again when the command leaves them empty
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir()
            created.append(parent)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise CurateError(f"{out}: in use by another cluster-curate {holder}; wait for it to finish or "
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
        yield
    finally:
        try:
            path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        for parent in reversed(created):
            try:
                parent.rmdir()  # only when empty: a failed command leaves no folder behind
            except OSError:
                break


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "(holder unknown)"
    return f"(`{info.get('command')}`, pid {info.get('pid')} on {info.get('host')}, since {info.get('since')})"
