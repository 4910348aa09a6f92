"""Running the tool's own commands from a benchmark, as a user would (one shared place for all scripts)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path


def tool_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "cluster-curate"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "cluster_curate"]


def cli(args: list, log: list[str]) -> float:
    """One `cluster-curate` command (1 thread, quiet); returns its wall time; the command is appended to `log`."""
    args = [str(a) for a in args]
    log.append("cluster-curate " + " ".join(shlex.quote(a) for a in args))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               CLUSTER_CURATE_DEBUG="1")
    t0 = time.perf_counter()
    proc = subprocess.run(tool_cmd() + args + ["-q"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {log[-1]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def default_features() -> str:
    """The tool's default --features (so a table names what was run)."""
    from cluster_curate.features.embed import DEFAULT_FEATURES
    return DEFAULT_FEATURES
