"""What the user sees: progress (rich bar on a terminal, plain log lines otherwise, nothing when quiet)
and end-of-command summaries (a rich table, or one JSON object with --json)."""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cluster_curate.io.artifacts import json_default

# Set once by the CLI from --quiet / --json; stages only call progress() and info().
QUIET = False
JSON_MODE = False

_err = Console(stderr=True, highlight=False, soft_wrap=True)  # log lines never wrapped mid-path
_captured: list | None = None  # summaries collected instead of printed (see capture())


def configure(quiet: bool = False, json_mode: bool = False) -> None:
    global QUIET, JSON_MODE
    QUIET, JSON_MODE = quiet, json_mode


def info(message: str) -> None:
    """A log line on stderr (stdout is kept for the summary / JSON)."""
    if not QUIET:
        _err.print(escape(message))


def warn(message: str) -> None:
    _err.print(f"[yellow]WARNING:[/yellow] {escape(message)}")


@dataclass
class _Plain:
    """Progress for non-terminals: a log line at most every few seconds."""
    description: str
    total: float | None
    unit: str
    done: float = 0.0
    start: float = 0.0
    last: float = 0.0

    def advance(self, n: float = 1, **_):
        self.done += n
        now = time.monotonic()
        if now - self.last >= 5 or (self.total and self.done >= self.total):
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            eta = f", ETA {((self.total - self.done) / rate):.0f}s" if self.total and rate > 0 else ""
            total = f"/{self.total:g}" if self.total else ""
            print(f"{self.description}: {self.done:g}{total} {self.unit} ({rate:.1f} {self.unit}/s{eta})",
                  file=sys.stderr, flush=True)


class _Silent:
    def advance(self, n: float = 1, **_):
        pass


class _Rich:
    def __init__(self, progress, task):
        self._p, self._t = progress, task

    def advance(self, n: float = 1, **fields):
        self._p.update(self._t, advance=n, **fields)


@contextmanager
def progress(description: str, total: float | None = None, unit: str = "rows"):
    """`with progress("embed", total=n) as bar: bar.advance(k)` — bar / log lines / nothing."""
    if QUIET:
        yield _Silent()
        return
    if not _err.is_terminal:
        now = time.monotonic()
        yield _Plain(description, total, unit, start=now, last=now)
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    class _Rate(TextColumn):
        def __init__(self):
            super().__init__("")

        def render(self, task):
            speed = task.finished_speed or task.speed
            from rich.text import Text
            return Text(f"{speed:,.0f} {unit}/s" if speed else "")

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                  _Rate(), TimeElapsedColumn(), TimeRemainingColumn(), console=_err, transient=False) as p:
        yield _Rich(p, p.add_task(description, total=total))


@contextmanager
def capture():
    """Collect the summaries printed inside the block as (title, data, rows) instead of printing them
    (`run --json` prints one JSON object for all its stages)."""
    global _captured
    previous, _captured = _captured, []
    try:
        yield _captured
    finally:
        _captured = previous


def summary(title: str, data: dict, rows: list[dict] | None = None) -> None:
    """End-of-command summary: key/value pairs (+ an optional table of rows) or one JSON object."""
    if _captured is not None:
        _captured.append((title, data, rows))
        return
    if JSON_MODE:
        out = dict(data)
        if rows is not None:
            out["table"] = rows
        print(json.dumps(out, default=json_default, sort_keys=False))
        return
    if QUIET:
        return
    console = Console(highlight=False)
    t = Table(title=escape(title), show_header=False, title_justify="left")
    t.add_column("key", style="bold")
    t.add_column("value")
    for k, v in data.items():
        t.add_row(escape(str(k)), escape(_fmt(v)))
    console.print(t)
    if rows:
        rt = Table(show_header=True)
        for col in rows[0]:
            rt.add_column(escape(str(col)), justify="right")
        for r in rows:
            rt.add_row(*(escape(_fmt(v)) for v in r.values()))
        console.print(rt)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=json_default)
    return str(v)
