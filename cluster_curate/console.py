"""What the user sees: progress (rich bar on a terminal, plain log lines otherwise, nothing when quiet)
and end-of-command summaries (a rich table, or one JSON object with --json)."""

from __future__ import annotations

import json
import numbers
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.cells import cell_len
from rich.table import Table

from cluster_curate.errors import counted  # noqa: F401  (commands word their summaries with console.counted)
from cluster_curate.io.artifacts import json_default

# Set once by the CLI from --quiet / --json; stages only call progress() and info().
QUIET = False
JSON_MODE = False

_err = Console(stderr=True, highlight=False, soft_wrap=True)  # log lines never wrapped mid-path
WARNINGS: list[str] = []  # the warnings printed since the command began (the `warnings` of its --json object)
_SAID_ONCE: set[str] = set()  # the warn(once=True) and info(once=True) messages given since the command began


def configure(quiet: bool = False, json_mode: bool = False) -> None:
    global QUIET, JSON_MODE
    QUIET, JSON_MODE = quiet, json_mode


def _said_before(message: str) -> bool:
    """Whether `message` was said (with once=True) since the command began; it counts as said from now on."""
    if message in _SAID_ONCE:
        return True
    _SAID_ONCE.add(message)
    return False


def info(message: str, once: bool = False) -> None:
    """A log line on stderr (stdout is kept for the summary / JSON); `once`: as warn's."""
    if once and _said_before(message):
        return
    if not QUIET:
        _err.print(escape(message))


def rate_text(per_second: float) -> str:
    """A rate as read at a glance: whole numbers from 10 up, 2 significant digits below (a slow model's 0.43
    rows/s is not 0)."""
    return f"{per_second:,.0f}" if per_second >= 9.5 or per_second == 0 else f"{per_second:.2g}"


def begin_command() -> None:
    """A command begins (the CLI's, or a call of the Python API): its once-warnings are said again."""
    _SAID_ONCE.clear()


def warn(message: str, once: bool = False) -> None:
    """`once`: a note about the data that each reading of it would repeat (run's stages and a mixture's checks
    open the same file again): said once per command."""
    if once and _said_before(message):
        return
    WARNINGS.append(message)
    _err.print(f"[yellow]WARNING:[/yellow] {escape(message)}")


@dataclass(frozen=True)
class Shown:
    """A summary value with a display form: `value` is what --json and the Python API's reader want (numbers,
    a dict of numbers), `text` what the table shows (default: the value formatted), `label` the table's key
    (default: the snake_case key with spaces). E.g. Shown({"min": 1, "median": 14, "max": 61}, "1 / 14 / 61",
    "cluster size min / median / max")."""
    value: object
    text: str | None = None
    label: str | None = None
    hidden: bool = False  # JSON only (the table says it in another line)
    in_json: bool = True  # False: a line for the table only (its value is in another key)


def min_median_max(values, label: str) -> Shown:
    """Counts' min / median / max (cluster sizes, quotas), as a table shows counts: `217 / 390.5 / 1,909`."""
    import numpy as np
    v = np.asarray(values)
    lo, mid, hi = (int(v.min()), float(np.median(v)), int(v.max())) if v.size else (0, 0.0, 0)
    return Shown({"min": lo, "median": mid, "max": hi}, f"{lo:,} / {mid:,.{0 if mid.is_integer() else 1}f} / {hi:,}",
                 label)


def line(text: str) -> Shown:
    """A table line whose figures --json gives under another key."""
    return Shown(None, text, in_json=False)


def machine(obj):
    """`obj` with every Shown replaced by its value, and a path as a string (the --json form: an API caller's
    pathlib.Path `out`, echoed by the summary, is no JSON)."""
    if isinstance(obj, Shown):
        return machine(obj.value)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, dict):
        return {k: machine(v) for k, v in obj.items() if not (isinstance(v, Shown) and not v.in_json)}
    if isinstance(obj, (list, tuple)):
        return [machine(v) for v in obj]
    return obj


# Seconds between two log lines of one progress (tests set 0 to see every step of a small input).
LOG_EVERY_S = 5.0


@dataclass
class _Plain:
    """Progress for non-terminals: a log line at most every LOG_EVERY_S seconds, and one at the end (only when
    it said something before, for a step made `quiet_when_short`)."""
    description: str
    total: float | None
    unit: str
    done: float = 0.0
    start: float = 0.0
    last: float = 0.0
    quiet_when_short: bool = False
    said: bool = False

    def advance(self, n: float = 1, **_):
        self.done += n
        now = time.monotonic()
        ended = self.total and self.done >= self.total and (self.said or not self.quiet_when_short)
        if now - self.last >= LOG_EVERY_S or ended:
            self.last, self.said = now, True
            rate = self.done / max(now - self.start, 1e-9)
            eta = f", ETA {((self.total - self.done) / rate):.0f}s" if self.total and rate > 0 else ""
            total = f"/{_fmt(float(self.total))}" if self.total else ""  # 1,000,000, not :g's 1e+06
            # "so far": the rate of this step's work up to now, not a command summary's end-to-end rate
            print(f"{self.description}: {_fmt(float(self.done))}{total} {self.unit} ({rate_text(rate)} {self.unit}/s "
                  f"so far{eta})",
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
def progress(description: str, total: float | None = None, unit: str = "rows", quiet_when_short: bool = False):
    """`with progress("embed", total=n) as bar: bar.advance(k)` — bar / log lines / nothing.
    `quiet_when_short`: no log line for a step over before the first one is due, and on a terminal a bar that
    goes when it ends (a phase before a check that may refuse the command: its refusal stays the one line)."""
    if QUIET:
        yield _Silent()
        return
    if not _err.is_terminal:
        now = time.monotonic()
        yield _Plain(description, total, unit, start=now, last=now, quiet_when_short=quiet_when_short)
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
                  _Rate(), TimeElapsedColumn(), TimeRemainingColumn(), console=_err,
                  transient=quiet_when_short) as p:
        yield _Rich(p, p.add_task(description, total=total))


def summary(title: str, data: dict, rows: list[dict] | None = None) -> None:
    """End-of-command summary for a reader: key/value pairs (+ an optional table of rows). A Shown value
    gives its own label and text; a snake_case key is shown with spaces, as a row's keys are its columns' headers. (--json
    prints json_object() instead, cli.py.)"""
    if QUIET or JSON_MODE:
        return
    console = Console(highlight=False)
    pairs = [_shown(k, v) for k, v in data.items() if not (isinstance(v, Shown) and v.hidden)]
    t = Table(title=escape(title), show_header=False, title_justify="left")
    t.add_column("key", style="bold", overflow="fold")
    t.add_column("value", overflow="fold")  # fold: a long path goes on on the next line, not cut with "…"
    wide = _fit(t, [[k for k, _ in pairs], [v for _, v in pairs]], console.width, header=False)
    for label, text in pairs:
        t.add_row(escape(label), escape(text))
    console.print(t, width=wide, crop=False)
    if rows:
        keys = list(dict.fromkeys(k for r in rows for k in r))  # every row's columns, by key, in first-seen order
        headers = [str(k).replace("_", " ") for k in keys]
        cells = [[_shown("", r[k])[1] if k in r else "" for k in keys] for r in rows]
        columns = [[h] + [c[i] for c in cells] for i, h in enumerate(headers)]
        for part in _column_groups(columns, console.width):  # a table too wide for the screen: in parts
            rt = Table(show_header=True)
            for i in part:
                rt.add_column(escape(headers[i]), justify="right", overflow="fold")
            wide = _fit(rt, [columns[i] for i in part], console.width)
            for c in cells:
                rt.add_row(*(escape(c[i]) for i in part))
            console.print(rt, width=wide, crop=False)


# A table never cuts a number (issue: digits folded away at 80 columns): each column is at least as wide as its
# widest word (a number, a fingerprint, a header's word); only paths, which may be longer than a screen, fold
# at any character. Rich's own narrowing of a table too wide for the console ignores that, so the widths are
# set here; a table that cannot fit is split into parts by columns (_column_groups), each repeating the first.

def _min_width(texts: list[str]) -> int:
    words = [w for t in texts for w in t.split() if "/" not in w and "\\" not in w]
    return max([cell_len(w) for w in words] + [1])


def _table_width(widths: list[int]) -> int:
    return sum(widths) + 3 * len(widths) + 1  # one space either side of each cell, a border between and around


def _fit(table: Table, columns: list[list[str]], width: int, header: bool = True) -> int:
    """Fixed widths for the table's columns (each a list of its texts, its header first if `header`): each its
    widest line, narrowed widest-first (wrapping at spaces, paths folding) where the console is narrower: the
    headers first, then the cells, never below _min_width. Returns the width to print it at: the console's, or
    where the console is too narrow for even that, the table's own (wider than the screen, but whole)."""
    def lines(texts):
        return [cell_len(line) for t in texts for line in t.splitlines()] + [1]

    widths = [max(lines(col)) for col in columns]
    floors = [_min_width(col) for col in columns]
    cells = [max(f, *lines(col[1:])) for f, col in zip(floors, columns)] if header else floors
    for floor in (cells, floors):  # a header wraps before a cell does
        while _table_width(widths) > width:
            over = [i for i, (w, f) in enumerate(zip(widths, floor)) if w > f]
            if not over:
                break
            widths[max(over, key=lambda i: widths[i])] -= 1
    for column, w in zip(table.columns, widths):
        column.width = w
    return max(width, _table_width(widths))


def _column_groups(columns: list[list[str]], width: int) -> list[list[int]]:
    """The columns (their indices) of each part of a table: all at once when they fit the console at their
    _min_width, else the first column (the row's name: its cluster, source, ...) and as many of the next as
    fit, then the first again with the next ones, ..."""
    floors = [_min_width(col) for col in columns]
    if _table_width(floors) <= width or len(columns) <= 2:
        return [list(range(len(columns)))]
    parts, part = [], [0]
    for i in range(1, len(columns)):
        if len(part) > 1 and _table_width([floors[j] for j in part + [i]]) > width:
            parts.append(part)
            part = [0]
        part.append(i)
    return parts + [part]


def json_object(command: str, data: dict, seconds: float, warnings: list[str] | None = None) -> dict:
    """The --json object of a command (the schema in README, "JSON output"): the common keys `command`,
    `version`, `output` (the artifact written, else null), `seconds`, `warnings` (the warnings printed), then
    the command's summary with every Shown value replaced by its value."""
    from cluster_curate import __version__
    body = machine(data)
    output = body.pop("out", None) if "output" not in body else body.pop("output")
    took = body.pop("seconds", None)
    return {"command": command, "version": __version__, "output": None if output is None else str(output),
            "seconds": round(seconds if took is None else took, 3),
            "warnings": list(WARNINGS if warnings is None else warnings), **body}


def print_json(obj: dict) -> None:
    print(json.dumps(obj, default=json_default, sort_keys=False))


def _shown(key, v) -> tuple[str, str]:
    if key == "out":  # what --json calls `output` (json_object), by one name on every screen too
        key = "output"
    if isinstance(v, Shown):
        return (v.label or str(key).replace("_", " ")), (v.text if v.text is not None else _fmt(v.value))
    if key == "seed":  # a value to pass back as --seed, not a count: 1234, not 1,234
        return "seed", str(v)
    return str(key).replace("_", " "), _fmt(v)


def _fmt(v) -> str:
    if isinstance(v, bool):  # a table is read by people: "plan followed  no", not Python's False
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):  # counts as the messages write them (errors.counted): 7,473
        return f"{v:,}"
    if isinstance(v, float):  # 4 significant digits, and a large one whole, not 1.235e+05
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=json_default)
    return str(v)
