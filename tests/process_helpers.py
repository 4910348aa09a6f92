"""Acting on a running command at a given moment (a chunk committed, a temporary on disk, its imports begun) on a
loaded machine: a look at the command, then a signal, raced the command, which ran on in between (a SIGKILL after
more chunks than the test allows, a signal after the command had finished). The command is stopped first and
looked at while it cannot move, so the state the test acts on is the state it saw. A state that lasts milliseconds
(a temporary about to be renamed) is missed by any look from outside: there the command stops itself
(cli_in_child, with an audit hook: tests/test_hard_failures.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def stop_when(process: subprocess.Popen, look: Callable[[], T], interval: float, timeout: float = 300) -> T:
    """Stop `process` (SIGSTOP) once `look()` returns something true, and return what it returned while the
    process was stopped: a look that holds is made again after the stop took hold (the signal is only sent, so
    waitpid WUNTRACED waits for it), and if it no longer holds the process goes on. `interval`: seconds between
    looks. The caller signals the stopped process (SIGKILL, or another signal then SIGCONT). AssertionError, with
    the command's stderr, if it ends first or the state is not seen within `timeout` seconds (the command is killed
    then: a hung command never hangs the suite)."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            _, err = process.communicate(timeout=60)
            raise AssertionError(f"not seen within {timeout:g} s; the command was killed: {err}")
        if not look():
            time.sleep(interval)
            continue
        process.send_signal(signal.SIGSTOP)
        if not wait_stopped(process):
            break
        seen = look()
        if seen:
            return seen
        process.send_signal(signal.SIGCONT)  # gone between the looks (a temporary renamed into place): go on
    _, err = process.communicate(timeout=60)
    raise AssertionError(f"the command ended (exit {process.returncode}) before it could be stopped: {err}")


def signal_stopped(process: subprocess.Popen, signum: int) -> None:
    """Send `signum` to a process stop_when stopped, then let it go on to handle it (a stopped process handles
    only SIGKILL)."""
    process.send_signal(signum)
    process.send_signal(signal.SIGCONT)


def at_default(*signums: int) -> Callable[[], None]:
    """A preexec_fn that gives the command `signums` at their default disposition, as a terminal starts it. One
    ignored where the suite runs (a shell's background job ignores SIGINT and SIGQUIT, nohup SIGHUP) would be
    ignored by the command too, by design (__main__.py), and a test sending it would see the command run on."""
    def reset() -> None:
        for signum in signums:
            signal.signal(signum, signal.SIG_DFL)
    return reset


def wait_stopped(process: subprocess.Popen) -> bool:
    """Wait until `process` has stopped (a SIGSTOP is only sent: it runs on until the signal takes hold): True, or
    False when it ended first (its exit status then kept on `process`)."""
    _, status = os.waitpid(process.pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        return True
    process.returncode = os.waitstatus_to_exitcode(status)
    return False


def cli_in_child(setup: str) -> list[str]:
    """The command line of a python child that runs `setup` (Python: a hook, or a stand-in at a boundary the test
    cannot make real), then cluster-curate on the arguments that follow it, as the `cluster-curate` command does."""
    return [sys.executable, "-c", f"{setup}\nimport sys\nsys.argv[0] = 'cluster-curate'\n"
                                  "from cluster_curate.__main__ import main\nmain()\n"]
