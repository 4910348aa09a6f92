"""One declaration per option (docs/architecture.md, "Options").

Each command module declares its options once, as a tuple of `Option`s: name, type, default, choices (taken
from the stage's own registry or constants), help. From that one declaration come the click options of the
CLI (cli.py), the options `run` takes and passes to each stage, the defaults and checks of the Python API
(`resolve`), the options that decide `run`'s up-to-date check, and (`record=True`) the params recorded in
the artifact, hence its fingerprint (`recorded`). A command then reads `opts["name"]`.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["Option", "Argument", "CommandSpec", "lazy", "resolve", "recorded", "run_options", "read_options",
           "CountOrWord", "DATASET_OPTIONS", "OUTPUT_OPTIONS"]

from cluster_curate.errors import CurateError
from cluster_curate.registry import lazy

_UNSET = object()


def int_range(low: int, high: int | None = None):
    """An integer option's click type, refused outside [low, high] in click's one line."""
    import click
    return click.IntRange(min=low, max=high)


def float_range(low: float):
    """A float option's click type, refused below `low` in click's one line."""
    import click
    return click.FloatRange(min=low)


def seed_type():
    """A seed's click type: numpy refuses a seed outside [0, 2**32 - 1] (an INTERNAL ERROR deep in a stage)."""
    return int_range(0, 2**32 - 1)


@dataclass(frozen=True)
class Option:
    name: str                       # the keyword of the Python API (and the click parameter name)
    type: Any = None                # a Python type or a click ParamType; None: str
    default: Any = None
    help: str | Callable[[], str] = ""
    flags: tuple[str, ...] = ()     # CLI spellings; default ("--name-with-dashes",)
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None  # a callable: a registry's names
    is_flag: bool = False
    negatable: bool = False         # --x/--no-x (default may then be None: "decided by the command")
    shown_default: Any = _UNSET     # the effective default to show in --help when `default` is None (a callable:
                                    # read from the stage's constant, e.g. lazy(module, "DEFAULT_MAX_LENGTH"))
    show_default: bool = False
    required: bool = False
    metavar: str | None = None
    run: bool = True                # `run` takes it and passes it to this stage
    multiple: bool = False          # may be given several times (a tuple of values)
    joined: str | None = None       # may be given several times, its values joined with this into one (a list)
    record: bool = False            # recorded as given in the artifact's params (so in its fingerprint)
    deprecated: tuple[tuple[str, ...], ...] = ()  # old spellings kept for one release (they warn)
    path: bool = False              # names a file or folder: the CLI expands a leading `~` the shell left alone

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    def choice_list(self) -> list[str] | None:
        if self.choices is None:
            return None
        return list(self.choices() if callable(self.choices) else self.choices)

    def full_help(self) -> str:
        text = self.help() if callable(self.help) else self.help  # a callable: text from a registry
        if self.shown_default is _UNSET:
            return text
        shown = self.shown_default() if callable(self.shown_default) else self.shown_default
        return f"{text}  [default: {shown}]"

    def click_type(self):
        """The click type the CLI converts this option's text with (cli.py): BOOL for a flag, else the declared
        type, or the one click infers from the default (a Choice's values are `check`'s)."""
        import click
        if self.is_flag or self.negatable:
            return click.BOOL
        kind = click.types.convert_type(self.type, self.default)
        if isinstance(kind, click.types.FloatParamType):
            return _finite(kind)
        return kind

    def check(self, value):
        """The Python API's check of a value: converted by the option's click type as the CLI's text is, so that
        both accept the same values and record the same ones (a value the CLI converted stays as it is). An
        option given several times takes one path (a str or os.PathLike) as one value, not as its letters, and
        a list as a tuple."""
        if self.multiple and isinstance(value, (str, os.PathLike)):
            value = (value,)
        elif self.multiple and isinstance(value, list):
            value = tuple(value)
        choices = self.choice_list()
        if choices is not None and value is not None and value not in choices:
            flag = self.cli_flags[0]
            raise CurateError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")
        if value is None or choices is not None:
            return value
        if self.multiple and isinstance(value, tuple):
            return tuple(self._converted(v) for v in value)
        return self._converted(value)

    def _converted(self, value):
        """One API value as the option's click type makes the CLI's text: "0.3" or numpy's 0.3 a float, 2.0 or
        np.int64(2) an int (numpy's scalars were recorded as text, another fingerprint than the CLI's). A bool is
        no number (budget=True selected 1 row), nor is 10.5 a count (k=10.5 made 10 clusters)."""
        import numbers

        import click
        kind = self.click_type()
        if isinstance(kind, click.types.StringParamType):  # paths and names: taken as given
            return value
        flag = self.cli_flags[0]
        whole = isinstance(kind, (click.types.IntParamType, _CountOrWordBase))
        if whole or isinstance(kind, click.types.FloatParamType):
            if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
                raise CurateError(f"{flag}: {value!r} is not a number")
            if whole and isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
                if not float(value).is_integer():
                    raise CurateError(f"{flag}: {value!r} is not a whole number")
                value = int(value)
            elif isinstance(value, numbers.Integral):
                value = int(value)  # np.int64 as a Python int (json.dumps refuses numpy's)
        elif isinstance(kind, click.types.BoolParamType) and not isinstance(value, str):
            # click's takes a bool or its text; 1 and 0 (and numpy's bools) as the API always took them
            if not (isinstance(value, numbers.Number) or type(value).__name__ in ("bool", "bool_")) \
                    or value not in (False, True):
                raise CurateError(f"{flag}: {value!r} is not true or false")
            return bool(value)
        try:
            return kind.convert(value, None, None)
        except click.BadParameter as e:
            raise CurateError(f"{flag}: {e.message.rstrip('.')}") from None


def _finite(kind):
    """A float option's click type that also refuses nan and inf, with the same bounds (--help shows the same
    range): click's float and FloatRange(min=1) take them (nan compares false with any bound), and a stage then
    failed deep in its work (int(nan) in the size cap), after embed in `run`."""
    import click
    finite_float, finite_range = _finite_types()
    if isinstance(kind, click.FloatRange):
        return finite_range(kind.min, kind.max, kind.min_open, kind.max_open, kind.clamp)
    return finite_float()


@functools.cache
def _finite_types() -> tuple[type, type]:
    """(float, FloatRange) click types that refuse nan and inf: made on first use, as click is imported."""
    import click

    class Finite:
        def convert(self, value, param, ctx):
            number = super().convert(value, param, ctx)
            if not math.isfinite(number):
                self.fail(f"{value} is not a finite number", param, ctx)
            return number

    class FiniteFloatRange(Finite, click.FloatRange):
        pass

    class FiniteFloat(Finite, click.types.FloatParamType):
        pass
    return FiniteFloat, FiniteFloatRange


@dataclass(frozen=True)
class Argument:
    name: str
    help: str = ""
    nargs: int = 1


@dataclass(frozen=True)
class CommandSpec:
    """A command: its Python function, its declared inputs and options, and how its result is printed."""
    name: str
    function: Callable[..., Any]                 # the Python API: function(*arguments, **options)
    arguments: tuple[Argument, ...]
    options: tuple[Option, ...]
    render: Callable[[Any, dict], None]          # render(result, options): the summary, for the CLI
    short_help: str = ""
    help: str = ""
    extra: dict = field(default_factory=dict)    # keyword -> callable: values the CLI passes besides options
    algorithm: Callable[[], Any] | None = None   # the stage's ALGORITHM_VERSION, or a function of its options to it
    table: str = "table"                         # --json: the key of the rows of a (summary, rows) result
    as_json: Callable[[Any], dict] | None = None  # --json: the summary of a result of another shape
    check: Callable[[Any, dict], None] | None = None  # after the summary (either form): raise for a failure

    def algorithm_version(self, options: dict) -> int:
        """The ALGORITHM_VERSION this stage's artifact records with these options (`run`'s up-to-date check)."""
        found = self.algorithm()
        return found(options) if callable(found) else found

    def summary(self, result) -> dict:
        """The summary of a result for --json (console.json_object adds the common keys)."""
        if self.as_json is not None:
            return self.as_json(result)
        if isinstance(result, tuple):
            data, rows = result
            return {**data, self.table: rows}
        return result


def resolve(options: Sequence[Option], given: dict, command: str) -> dict:
    """`given` completed with the declared defaults; an unknown name is an error naming the known ones."""
    known = {o.name: o for o in options}
    for old, new in _deprecated_names(options).items():
        if old in given:
            warnings.warn(f"{command}: {old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)
            given = {(new if k == old else k): v for k, v in given.items()}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise CurateError(f"{command}: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    resolved = {name: o.check(given.get(name, o.default)) for name, o in known.items()}
    for name, o in known.items():  # those `run` does not take may be left out: run resolves a stage's without them
        if o.required and resolved[name] is None and (name in given or o.run):
            raise CurateError(f"{command}: missing option {o.cli_flags[0]}")
    return resolved


def _deprecated_names(options: Sequence[Option]) -> dict[str, str]:
    out = {}
    for o in options:
        for spelling in o.deprecated:
            out[spelling[0].lstrip("-").replace("-", "_")] = o.name
    return out


def cli_defaulted() -> frozenset[str]:
    """The options the running click command took at their defaults: not given on its command line (a
    CommandSpec.extra for a command that treats a default differently from the same value given)."""
    import click
    ctx = click.get_current_context()
    defaults = (click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)
    given = {name for name in ctx.params if ctx.get_parameter_source(name) not in defaults}
    given |= {name.removeprefix("_deprecated_") for name in given}  # a deprecated spelling gives its option
    return frozenset(ctx.params) - given


def recorded(options: Sequence[Option], opts: dict) -> dict:
    """The artifact params of the options declared `record=True`, in declaration order. A command adds what
    it derives (the chosen k, the parsed feature list, ...) to these."""
    return {o.name: opts[o.name] for o in options if o.record}


def named_changes(changed: dict, most: int | None = None) -> str:
    """`--within random -> auto, ...`: options that changed ({name: (before, now)}), as a reason or an error names
    them (values as the user writes them: `(not given)` and `on`/`off`, not Python's None/True/False)."""
    def shown(v):
        if v is None or (isinstance(v, (list, tuple)) and not v):
            return "(not given)"
        if isinstance(v, (list, tuple)):  # an option given several times (--decontaminate A --decontaminate B)
            return " ".join(map(str, v))
        return ("on" if v else "off") if isinstance(v, bool) else v
    return ", ".join(f"--{k.replace('_', '-')} {shown(old)} -> {shown(new)}"
                     for k, (old, new) in list(changed.items())[:most])


def run_options(spec: CommandSpec) -> list[Option]:
    """The options of `spec` that `run` takes for it."""
    return [o for o in spec.options if o.run]


class _CountOrWordBase:
    """What CountOrWord's click types are (a count: Option.check refuses 10.5 for one)."""


class CountOrWord:
    """A positive count (of `what`), or one of a few words: --k N|auto, --groups G|auto|none (a click type)."""

    def __new__(cls, what: str, words: tuple[str, ...]):
        import click

        class _CountOrWord(_CountOrWordBase, click.ParamType):
            name = "|".join(("N",) + words)

            def convert(self, value, param, ctx):
                if isinstance(value, int):  # the API's (k=0 is refused as --k 0 is)
                    n = value
                elif str(value).lower() in words:
                    return str(value).lower()
                else:
                    try:
                        n = int(value)
                    except ValueError:
                        quoted = [repr(w) for w in words]
                        choices = ", ".join(quoted[:-1]) + " or " + quoted[-1] if len(quoted) > 1 else quoted[0]
                        self.fail(f"expected a number of {what}{',' if len(quoted) > 1 else ' or'} {choices}, "
                                  f"got {value!r}", param, ctx)
                if n < 1:
                    self.fail(f"must be >= 1, got {n}", param, ctx)
                return n

        return _CountOrWord()


def _formats():
    return ["auto", *lazy("cluster_curate.io.formats", "FORMATS")()]


# How to read a raw dataset: shared by inspect, embed, shard and run (folded into one ReadOptions).
DATASET_OPTIONS = (
    Option("fmt", flags=("--format",), choices=_formats,
           help="Record format (default: detected from the fields). `preference`: DPO pairs (`chosen` and "
                "`rejected`, with or without `prompt`; detected by those columns)."),
    Option("prompt_field", help="Field holding the prompt (overrides the format's). A dotted path (data.question) "
                                "reads into nested objects, a whole number into a list (conversations.0.value), "
                                "unless a column has that very name: then the column."),
    Option("response_field", help="Field holding the response (overrides the format's); a dotted path (data.answer) "
                                  "as for --prompt-field. Preference pairs: the chosen answer."),
    Option("rejected_field", help="Preference pairs: the field holding the rejected answer (default: `rejected`; "
                                  "e.g. response_k beside --response-field response_j); implies --format preference."),
    Option("label_field", help="Preference pairs: the field saying, row by row, which answer is the chosen one: 1 or "
                               "true, --response-field's; 0 or false, --rejected-field's (SHP: labels, PKU-SafeRLHF: "
                               "better_response_id); implies --format preference."),
    Option("on_bad_row", default="error", choices=("error", "skip"), show_default=True,
           help="Stop at the first bad row, or skip bad rows (counted, and written to a rejects JSONL)."),
)

# Every command that writes an artifact. `run` has its own (it passes --force on and decides --overwrite).
OUTPUT_OPTIONS = (
    Option("overwrite", is_flag=True, default=False, run=False,
           help="Replace the output if it is this tool's earlier output of that kind (or an empty directory)."),
    Option("force", is_flag=True, default=False, run=False,
           help="Use inputs even if they come from different datasets or are of an unexpected kind."),
)


def read_options(opts: dict):
    """The ReadOptions of DATASET_OPTIONS' values."""
    from cluster_curate.io.datasets import ReadOptions
    fmt = opts.get("fmt")
    return ReadOptions(format=None if fmt in (None, "auto") else fmt, prompt_field=opts.get("prompt_field"),
                       response_field=opts.get("response_field"), rejected_field=opts.get("rejected_field"),
                       label_field=opts.get("label_field"), on_bad_row=opts.get("on_bad_row") or "error")
