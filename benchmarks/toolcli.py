"""Running the tool's own commands from a benchmark, as a user would (one shared place for all scripts)."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path


def tool_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "cluster-curate"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "cluster_curate"]


@functools.cache
def _compile_package() -> None:
    """The package's bytecode, as `pip install` writes it. This machine sets PYTHONDONTWRITEBYTECODE=1, so with
    the editable install every timed command would otherwise compile each of the tool's modules again."""
    import compileall

    import cluster_curate
    compileall.compile_dir(Path(cluster_curate.__file__).parent, quiet=1)


def cli(args: list, log: list[str]) -> float:
    """One `cluster-curate` command (1 thread, quiet); returns its wall time; the command is appended to `log`."""
    _compile_package()
    args = [str(a) for a in args]
    log.append("cluster-curate " + " ".join(shlex.quote(a) for a in args))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               CLUSTER_CURATE_DEBUG="1")
    t0 = time.perf_counter()
    proc = subprocess.run(tool_cmd() + args + ["-q"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {log[-1]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def tool_defaults() -> dict:
    """The default of every option of embed / cluster / select / shard, as the installed tool declares them
    (part of a cache key, so that a changed default re-curates)."""
    import click

    from cluster_curate.cli import main
    return {cmd: {p.name: p.default for p in main.commands[cmd].params if isinstance(p, click.Option)}
            for cmd in ("embed", "cluster", "select", "shard") if cmd in main.commands}


def default_features() -> str:
    """The tool's default --features (so a table names what was run)."""
    from cluster_curate.features.embed import DEFAULT_FEATURES
    return DEFAULT_FEATURES


def write_results(stem: str, script: str, lines: list[str], payload: dict, argv: list[str] | None) -> None:
    """Finish a benchmark: the command line under the table, print it, write results/<stem>.md and .json."""
    import json
    lines = [*lines, "", "Command: `" + " ".join([f"python benchmarks/{script}", *(argv or sys.argv[1:])]) + "`"]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=1))
