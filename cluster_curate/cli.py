"""The `cluster-curate` command: a thin layer over the Python API (docs/architecture.md, "Commands").

Each command is declared in cluster_curate/commands/<name>.py (its function, arguments, options and how its
result is printed); this module turns each declaration into a click command and turns errors into one line.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback

import click

from cluster_curate import __version__, console
from cluster_curate.commands import COMMANDS, spec
from cluster_curate.errors import CurateError
from cluster_curate.io.containers import reads_through_hf_datasets
from cluster_curate.options import CommandSpec, Option


def _let_pyarrow_skip_pandas(*sources: str) -> None:
    """pyarrow imports pandas (a third of a short command's time; benchmarks/results/code_figures.md) the first
    time it converts any array, only
    to ask whether that array is a pandas object; the commands never hand it one. So pyarrow's one probe is made to
    find no pandas. pandas still imports, and pyarrow's to_pandas/from_pandas import it when called; only pa.array
    no longer recognises a pandas object in this process, and to_pylist can no longer give a nanosecond timestamp,
    time or duration (pyarrow makes those pandas objects; it raises instead): code that hands rows' values to Python
    converts those itself (layouts.plain_rows). Hence not when a source is read through Hugging Face
    `datasets` (which hands pyarrow pandas objects), and not once pandas is imported (nothing left to save)."""
    if "pandas" in sys.modules or any(reads_through_hf_datasets(s) for s in sources):
        return

    class _RefusePandas:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.partition(".")[0] == "pandas":
                raise ModuleNotFoundError("pandas is not imported by cluster-curate's commands", name=name)

    sys.meta_path.insert(0, _RefusePandas)
    try:
        import pyarrow as pa
        pa.array([0])  # pyarrow tries the import once and remembers the answer
    finally:
        sys.meta_path.remove(_RefusePandas)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a job's time limit, `timeout`, `kill`, torchrun stopping its workers) or SIGHUP (the terminal or
    ssh session closed) raised as an interruption, so the writers clean up as on Ctrl-C: by default Python dies
    at once, leaving their temporary files and the output's lock file in the user's folder, and saying nothing."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# what the summaries and messages write outside ASCII, as ASCII: under a locale that is not UTF-8 (LC_ALL=C with
# PYTHONUTF8=0) printing them raised UnicodeEncodeError after the outputs were written (exit 1 for a done job)
_ASCII = {"\u2192": "->", "\u00d7": "x", "\u00f7": "/", "\u2026": "...", "\u2014": "-", "\u2013": "-",
          "\u2264": "<=", "\u2265": ">=", "\u2248": "~", "\u2212": "-", "\u00b1": "+/-"}


def _as_ascii(error: UnicodeEncodeError) -> tuple[str, int]:
    text = error.object[error.start:error.end]
    return "".join(_ASCII.get(c, "?") for c in text), error.end


def _streams_writable_in_any_locale() -> None:
    import codecs
    codecs.register_error("cluster_curate_ascii", _as_ascii)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            "\u2192\u00d7".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="cluster_curate_ascii")


def _terminate(signum, frame):
    raise _Terminated(signum)


def _dash_file_hint(e: click.UsageError, argv) -> str:
    """`embed -data.jsonl`: click reads a file named with a leading dash as options (`No such option: -d`)."""
    if not isinstance(e, click.NoSuchOption):
        return ""
    path = next((a for a in argv if a.startswith(e.option_name) and os.path.exists(a)), None)
    return f" To name the file {path}, write ./{path}" if path else ""


def _suggest_reordered(e: click.UsageError) -> None:
    """`--budget-tokens`: click suggests the options spelled alike (difflib: `--batch-tokens`, `--budget`), not
    `--token-budget`, the same words in another order (a plural as its singular), which is how a user recalling
    an option's words gets it wrong. Those are suggested too."""
    if not isinstance(e, click.NoSuchOption) or e.ctx is None or not e.option_name.startswith("--"):
        return

    def words(flag: str) -> list[str]:
        return sorted(w.removesuffix("s") for w in flag[2:].replace("_", "-").split("-"))
    flags = [f for p in e.ctx.command.params if isinstance(p, click.Option) and not p.hidden
             for f in (*p.opts, *p.secondary_opts) if f.startswith("--")]
    reordered = [f for f in flags if words(f) == words(e.option_name)]
    if reordered:
        e.possibilities = list(dict.fromkeys([*reordered, *(e.possibilities or [])]))


# Set by the `cluster-curate` entry point (__main__): the process ends with the command, so the signal handlers
# are its to change; a caller that invokes `main` in its own process keeps its own.
ENTRY_POINT = False


class _Group(click.Group):
    """Turns CurateError into `ERROR: ...` + exit 2, and any other exception into exit 1 with one line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """A usage error (unknown option, bad value, missing argument) is one line too, exit 2, instead of
        click's usage block; --help and --version as usual."""
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "cluster-curate"
            _suggest_reordered(e)
            message = " ".join(e.format_message().split())  # click lists choices on lines of their own
            message += _dash_file_hint(e, sys.argv[1:] if args is None else args)
            click.echo(f"ERROR: {message} (see {where} --help)", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        # from here on an interruption is an exception the writers clean up after (__main__ ended the process
        # at once while it was still importing)
        _streams_writable_in_any_locale()
        signal.signal(signal.SIGTERM, _terminate)
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # under nohup it stays ignored
            signal.signal(signal.SIGHUP, _terminate)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            rv = super().invoke(ctx)
            if ENTRY_POINT:  # done and said: an interruption now (Ctrl-C as it exits) must not make it a failure
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_IGN)
            return rv
        except CurateError as e:
            click.echo(f"ERROR: {e}", err=True)
            sys.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt as e:
            signum = e.signum if isinstance(e, _Terminated) else signal.SIGINT
            try:  # after SIGHUP the terminal may be gone: the exit status still says what happened
                click.echo(f"terminated ({signal.Signals(signum).name})" if signum != signal.SIGINT else "interrupted",
                           err=True)
            except OSError:
                pass
            sys.exit(128 + signum)
        except BrokenPipeError:
            # the reader of stdout went away (`| head`): the summary comes after the outputs are written, so
            # nothing is lost; end silently with 1, as rich does when the tables meet a closed pipe, and keep
            # the interpreter from complaining again when it flushes stdout on exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except Exception as e:  # noqa: BLE001 - the last line of defence: never a bare traceback
            if os.environ.get("CLUSTER_CURATE_DEBUG"):
                traceback.print_exc()
            click.echo(f"INTERNAL ERROR: {type(e).__name__}: {e} (set CLUSTER_CURATE_DEBUG=1 for the traceback; "
                       "please report it)", err=True)
            sys.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="cluster-curate")
def main():
    """Curate a fine-tuning dataset and allocate it across data-parallel GPUs.

    \b
    The pipeline, each stage reading and writing Parquet artifacts:
      embed DATA --out E            one feature vector per example (--features)
      cluster E --out C             k-means (faiss) over the features
      select C --out S              a balanced, budgeted subset of every cluster
      shard S --out D               N equal, stratified, token-balanced shards
    `run` does all four; `inspect` looks at a dataset first; `report` explains any
    artifact; `export` writes the shards in a trainer's layout, and `verify`
    checks, after training, that each rank consumed its shard.
    """


def _click_option(o: Option) -> list[click.Option]:
    """The click option of a declaration, plus a hidden one per deprecated spelling."""
    kw = dict(default=o.default, help=o.full_help(), required=o.required, show_default=o.show_default)
    if o.required:  # click >= 8.3 counts an explicit default=None as a value, so a required option went unchecked
        del kw["default"]
    if o.metavar:
        kw["metavar"] = o.metavar
    if o.multiple:
        kw["multiple"] = True
    if o.joined:  # --source-min-share a=0.1 --source-min-share b=0.2: both, where click kept the last alone
        kw["multiple"], kw["callback"] = True, lambda ctx, param, values: o.joined.join(values) if values else None
    if o.is_flag:
        kw["is_flag"] = True
    elif o.choices is not None:
        kw["type"] = click.Choice(o.choice_list())
    elif o.type is not None:
        kw["type"] = o.click_type()
    flags = list(o.cli_flags)
    if o.negatable:
        flags = [f"{flags[0]}/--no-{flags[0][2:]}"]
    out = [click.Option(flags + [o.name], **kw)]
    for spelling in o.deprecated:
        out.append(click.Option(list(spelling) + [f"_deprecated_{o.name}"], type=kw.get("type"), default=None,
                                hidden=True, expose_value=True))
    return out


def _take_deprecated(spec: CommandSpec, kw: dict) -> None:
    ctx = click.get_current_context()
    for o in spec.options:
        for spelling in o.deprecated:
            value = kw.pop(f"_deprecated_{o.name}", None)
            if value is not None and ctx.get_parameter_source(o.name) == click.core.ParameterSource.COMMANDLINE:
                raise CurateError(f"{spelling[0]} (deprecated) and {o.cli_flags[0]} both given; give "
                                  f"{o.cli_flags[0]} alone")
            if value is not None:
                console.warn(f"{spelling[0]} is deprecated (removed in the next release): use {o.cli_flags[0]}")
                kw[o.name] = value


def _expand_home(value):
    """`~/x` as the shell would expand it. The shell leaves `--out=~/x` (and a quoted '~/x') alone, and the
    readers expand `~` while the writers did not: a folder named `~` was made in the working directory, then
    pyarrow, which expands it, failed to find the chunk it had just written there (an INTERNAL ERROR)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_expand_home(v) for v in value)
    return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value


def _check_encodable(value) -> None:
    """pyarrow takes a path as UTF-8 text, Python as the locale's bytes: under a locale that is not UTF-8 (LC_ALL=C
    with PYTHONUTF8=0, a Latin-1 one) a path outside ASCII is not the same file to both (an INTERNAL ERROR
    `surrogates not allowed` when pyarrow opened it, or a file written under a garbled name). Refused at once."""
    for path in value if isinstance(value, (tuple, list)) else [value]:
        if isinstance(path, str) and os.fsencode(path) != path.encode("utf-8", "replace"):  # as pyarrow sees it
            shown = os.fsencode(path).decode("utf-8", "backslashreplace")
            raise CurateError(f"{shown}: this path is not ASCII and the locale's encoding is "
                              f"{sys.getfilesystemencoding()}, not UTF-8; run with LC_ALL=C.UTF-8 (or PYTHONUTF8=1)")


def _as_utf8(value):
    """A column name (`--response-field respuesta_é`) as the UTF-8 its bytes spell: under a locale that is not
    UTF-8 Python keeps an argument's bytes outside ASCII as surrogates, and no column of data read as UTF-8 has
    that name. Bytes that are not UTF-8 are left as they came."""
    if isinstance(value, str) and not value.isascii():
        try:
            return os.fsencode(value).decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def _one_writer(command: str, kw: dict):
    """The output's lock (io/lock.py) for a command writing one output; `run` takes its own, and the processes
    of a torchrun or job-array embed write one directory together (each its part)."""
    from contextlib import nullcontext

    from cluster_curate.distributed import torchrun_processes
    from cluster_curate.io.lock import output_lock
    shared = torchrun_processes() > 1 or (kw.get("num_parts") or 1) > 1  # one torchrun process writes alone
    written, flag = (kw.get("out"), "--out") if kw.get("out") else (kw.get("rejects_path"), "--rejects")
    if command == "run" or not written or shared:
        return nullcontext()
    if flag == "--rejects" and os.path.exists(written) and not os.path.isfile(written) and not os.path.isdir(written):
        return nullcontext()  # a device or a pipe: refused by inspect (no lock file can be made beside /dev/stdout)
    return output_lock(written, command, flag=flag)


def _repeated_options(params, args) -> list[tuple[str, list[str]]]:
    """The single-valued options given more than once with different values, each with its values in order:
    click keeps the last silently (two --target files: the first was dropped without a word). The last still
    wins, as a Makefile's later override expects; the caller says so."""
    once = {flag: p for p in params if isinstance(p, click.Option) and not (p.multiple or p.is_flag or p.count)
            for flag in p.opts}
    # a flag and its negation (`--split-mixed --no-split-mixed`): the flag given is the value
    flags = {flag: p for p in params if isinstance(p, click.Option) and p.is_flag and p.secondary_opts
             for flag in (*p.opts, *p.secondary_opts)}
    given: dict[str, tuple[str, list[str]]] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        tok, value = args[i], None
        if tok in flags:
            tok = value = tok
        elif tok.startswith("--") and "=" in tok:
            tok, value = tok.split("=", 1)
        elif tok in once and i + 1 < len(args):
            value, i = args[i + 1], i + 1
        elif tok[:1] == "-" and tok[1:2] != "-" and tok[:2] in once and len(tok) > 2:  # -n2
            tok, value = tok[:2], tok[2:]
        param = once.get(tok) or flags.get(tok)
        if param is not None and value is not None:
            given.setdefault(param.name, (tok, []))[1].append(value)
        i += 1
    return [(flag, values) for flag, values in given.values() if len(set(values)) > 1]


class _OptionsOnce(click.Command):
    def parse_args(self, ctx, args):
        ctx.meta["repeated_options"] = _repeated_options(self.params, args)
        return super().parse_args(ctx, args)


def _command(spec: CommandSpec) -> click.Command:
    """A click command built from a command's declaration (commands/*.py): its arguments, its options, and
    --quiet/--json; it calls the command's Python function and prints the result with its render()."""

    def callback(quiet=False, json_mode=False, **kw):
        console.configure(quiet=quiet, json_mode=json_mode)  # --json: progress on stderr still (README)
        console.WARNINGS.clear()
        console.begin_command()
        t0 = time.perf_counter()
        for flag, values in click.get_current_context().meta.get("repeated_options", ()):
            console.warn(f"{flag} given {len(values)} times: the last, {values[-1]}, is used (not "
                         f"{', '.join(dict.fromkeys(v for v in values[:-1] if v != values[-1]))})")
        _take_deprecated(spec, kw)
        for name in (*(a.name for a in spec.arguments), *(o.name for o in spec.options if o.path)):
            if name in kw:
                kw[name] = _expand_home(kw[name])
                _check_encodable(kw[name])
        for name in (o.name for o in spec.options if o.name.endswith("_field")):  # columns of data read as UTF-8
            if name in kw:
                kw[name] = _as_utf8(kw[name])
        data = kw.get("data")  # one input, or several (a DATA... argument, --data given more than once)
        from cluster_curate.io.datasets import data_paths
        _let_pyarrow_skip_pandas(*data_paths(data))
        args = [kw.pop(a.name) for a in spec.arguments]
        extra = {k: v() for k, v in spec.extra.items()}
        with _one_writer(spec.name, kw):
            result = spec.function(*args, **kw, **extra)
        if console.JSON_MODE:  # every command's object from one place (README, "JSON output"); rank 0's only
            console.print_json(console.json_object(spec.name, spec.summary(result), time.perf_counter() - t0))
        else:
            spec.render(result, kw)
        if spec.check is not None:
            spec.check(result, kw)

    params: list[click.Parameter] = []
    for a in spec.arguments:
        params.append(click.Argument([a.name], nargs=a.nargs, required=True,
                                     # readable=False: an unreadable DATA gets the readers' line, which says what to do
                                     type=click.Path(readable=False) if a.nargs != 1 else None))
    for o in spec.options:
        params += _click_option(o)
    params += [click.Option(["--quiet", "-q"], is_flag=True,
                            help="Print nothing but warnings and errors (and the --json summary)."),
               click.Option(["--json", "json_mode"], is_flag=True,
                            help="Print the end-of-command summary as one JSON object.")]
    return _OptionsOnce(spec.name, callback=callback, params=params, help=spec.help,
                        short_help=spec.short_help or None)


for _name in COMMANDS:
    main.add_command(_command(spec(_name)))


if __name__ == "__main__":
    main()
