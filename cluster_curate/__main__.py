"""`python -m cluster_curate` and the `cluster-curate` command (pyproject's entry point)."""

import os
import signal


def _stopped_while_starting(signum, frame):
    """Ctrl-C or SIGTERM while the commands are being imported (a second or more on a busy machine): nothing is
    written yet, so the process ends at once with the line a running command ends with (cli.py), instead of a
    traceback of the import (Ctrl-C) or a silent death (SIGTERM)."""
    os.write(2, b"interrupted\n" if signum == signal.SIGINT else b"terminated (SIGTERM)\n")
    os._exit(128 + signum)


def main():
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # a job started with it ignored keeps ignoring it
            signal.signal(signum, _stopped_while_starting)
    from cluster_curate.cli import main as cli_main
    cli_main()


if __name__ == "__main__":
    main()
