"""What every benchmark script shares: the paths, the tool's CLI (run as a user would), the results writer
(Markdown + JSON under benchmarks/results/) and the argparse base.

Scripts run as `python benchmarks/NAME.py`, so this directory is on their import path; tests import the
scripts the same way (pyproject.toml's pytest `pythonpath`)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent  # benchmarks/
ROOT = HERE.parent  # the repository
RESULTS = HERE / "results"
DATA = ROOT.parent / "shared" / "data"  # real datasets (GSM8K, Code Alpaca), read in place, never copied
# the recovered share (contender - random) / (oracle - random) of a family instance: an oracle advantage under
# 0.02 (one test row in 50) is no advantage, and no share of it is reported
LEAST_ADVANTAGE = 0.02


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The argparse base of every script: its docstring as the help, kept as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


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


def kinds_by_skill(group_of_row, skill, n_groups: int):
    """(kind of each group, weights) for perfect joins, a label-using control: a group's kind is its rows' most
    common TRUE skill, numbered in order of first appearance as answer_kinds numbers kinds, and weighted as
    `cluster` weights kinds (answer_kinds.kind_weights)."""
    import numpy as np

    from cluster_curate.answer_kinds import kind_weights
    from cluster_curate.cluster_groups import numbered_by_first_appearance
    group_of_row, skill = np.asarray(group_of_row), np.asarray(skill)
    kind = numbered_by_first_appearance([np.bincount(skill[group_of_row == g]).argmax() for g in range(n_groups)])
    return kind, kind_weights(kind)


def default_features() -> str:
    """The tool's default --features (so a table names what was run)."""
    from cluster_curate.features.embed import DEFAULT_FEATURES
    return DEFAULT_FEATURES


def command_line(argv: list[str] | None = None) -> str:
    """How the running script was called, as a reader would retype it."""
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0].endswith(".py") else "SCRIPT.py"
    return " ".join([f"python benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])


def smoke_table(md: str) -> str:
    """A --quick run's printout: the first table of `md` alone (the text around it reads the full run's sizes and
    targets), and the command as it was called."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join([lines[0], "", *lines[start:end], "", "--quick: a smoke run at small sizes; the full run's text "
                      "and targets are left out.", f"Command: `{command_line()}`"]) + "\n"


def relative(text: str) -> str:
    """Absolute paths as seen from the repository (its parent as ..), so results name no machine's directories;
    only where a path starts (not inside another path or word)."""
    import re
    for prefix, to in ((ROOT, ""), (ROOT.parent, "../")):
        text = re.sub(r"(?<![\w./-])" + re.escape(str(prefix)) + "/", to, text)
    return text


def write_results(stem: str, lines: list[str] | str, payload: dict, argv: list[str] | None = None,
                  results: Path | str | None = None, quiet: bool = False, command: bool = True) -> Path:
    """Finish a benchmark: the table (lines, or Markdown text), the command line under it (unless `command` is
    False: a renderer that writes its own), printed and written to <results>/<stem>.md with the payload as
    <stem>.json (default benchmarks/results/). Returns the Markdown path."""
    text = lines if isinstance(lines, str) else "\n".join(lines)
    if command:
        text += f"\n\nCommand: `{command_line(argv)}`"
    text = relative(text.rstrip("\n") + "\n")
    payload = json.loads(relative(json.dumps(payload, default=str)))
    if not quiet:
        print(text)
    out = Path(results) if results is not None else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(text, encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    return out / f"{stem}.md"
