"""Acting on a running command at a given moment (a chunk committed, a temporary on disk, its imports begun) on a
loaded machine: a look at the command, then a signal, raced the command, which ran on in between (a SIGKILL after
more chunks than the test allows, a signal after the command had finished). The command is stopped first and
looked at while it cannot move, so the state the test acts on is the state it saw."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def stop_when(process: subprocess.Popen, look: Callable[[], T], interval: float = 0.0, timeout: float = 300) -> T:
    """Stop `process` (SIGSTOP) once `look()` returns something true, and return what it returned while the
    process was stopped: a look that holds is made again after the stop took hold (the signal is only sent, so waitpid
    WUNTRACED waits for it), and if it no longer holds the process goes on. `interval`: seconds between looks
    (0: a tight loop, for a state that lasts a moment). The caller signals the stopped process (SIGKILL, or
    another signal then SIGCONT). AssertionError, with the command's stderr, if it ends first or the state is not
    seen within `timeout` seconds (the command is killed then: a hung command never hangs the suite)."""
    deadline = time.monotonic() + timeout
    while process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            _, err = process.communicate(timeout=60)
            raise AssertionError(f"not seen within {timeout:g} s; the command was killed: {err}")
        if not look():
            if interval:  # a tight loop gives up no time slice: a short-lived state is missed less often
                time.sleep(interval)
            continue
        process.send_signal(signal.SIGSTOP)
        _, status = os.waitpid(process.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):  # it ended before the stop took hold
            process.returncode = os.waitstatus_to_exitcode(status)
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
