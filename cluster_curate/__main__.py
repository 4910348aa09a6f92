"""`python -m cluster_curate` and the `cluster-curate` command (pyproject's entry point)."""

import os
import signal


def _stopped_while_starting(signum, frame):
    """Ctrl-C, SIGTERM or SIGHUP while the commands are being imported (a second or more on a busy machine):
    nothing is written yet, so the process ends at once with the line a running command ends with (cli.py),
    instead of a traceback of the import (Ctrl-C) or a silent death (SIGTERM, SIGHUP)."""
    try:  # after SIGHUP the terminal may be gone
        os.write(2, b"interrupted\n" if signum == signal.SIGINT
                 else f"terminated ({signal.Signals(signum).name})\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


def main():
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # a job started with it ignored keeps ignoring it
            signal.signal(signum, _stopped_while_starting)
    from cluster_curate import cli
    cli.ENTRY_POINT = True
    cli.main()


if __name__ == "__main__":
    main()
