"""The `cluster-curate` command: parses options and calls pipeline functions. No logic of its own.

Each subcommand lives in its own section below (edit only your section). Shared option groups are
defined once here as decorators: `dataset_options` (how to read a raw dataset), `output_options`
(--overwrite/--force), and every command gets --quiet/--json through `command()`.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import click

from cluster_curate import __version__, console
from cluster_curate.errors import CurateError
from cluster_curate.io.datasets import ReadOptions


class _Group(click.Group):
    """Turns CurateError into `ERROR: ...` + exit 2, and any other exception into exit 1 with one line."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CurateError as e:
            click.echo(f"ERROR: {e}", err=True)
            sys.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
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
      embed DATA --out E          one learning-effect feature vector per example
      cluster E --out C           k-means (faiss) over the features
      select C --out S            a balanced, budgeted subset of every cluster
      shard S --data DATA --out D N equal, stratified, token-balanced Parquet shards
    `run` does all four; `inspect` looks at a dataset first; `report` explains any artifact.
    """


def command(*args, **kwargs):
    """`@command(...)`: a subcommand with --quiet and --json that configures the console before running."""

    def deco(fn):
        @main.command(*args, **kwargs)
        @click.option("--quiet", "-q", is_flag=True, help="Print nothing but errors (and the --json summary).")
        @click.option("--json", "json_mode", is_flag=True, help="Print the end-of-command summary as one JSON object.")
        @functools.wraps(fn)
        def wrapper(*a, quiet=False, json_mode=False, **kw):
            console.configure(quiet=quiet or json_mode, json_mode=json_mode)
            return fn(*a, **kw)

        return wrapper

    return deco


def dataset_options(fn):
    """Options that say how to read a raw dataset; shared by inspect, embed, shard and run.
    The decorated function receives them folded into one `read_options: ReadOptions` argument."""

    @click.option("--format", "fmt", default=None,
                  type=click.Choice(["auto", "alpaca", "prompt-completion", "qa", "messages", "sharegpt"]),
                  help="Record format (default: detected from the fields).")
    @click.option("--prompt-field", default=None, help="Field holding the prompt (overrides the format's).")
    @click.option("--response-field", default=None, help="Field holding the response (overrides the format's).")
    @click.option("--on-bad-row", type=click.Choice(["error", "skip"]), default="error", show_default=True,
                  help="Stop at the first bad row, or skip bad rows (counted, and written to a rejects JSONL).")
    @functools.wraps(fn)
    def wrapper(*a, fmt=None, prompt_field=None, response_field=None, on_bad_row="error", **kw):
        kw["read_options"] = ReadOptions(format=None if fmt in (None, "auto") else fmt, prompt_field=prompt_field,
                                         response_field=response_field, on_bad_row=on_bad_row)
        return fn(*a, **kw)

    return wrapper


def output_options(fn):
    """--overwrite and --force, shared by every command that writes an artifact."""
    fn = click.option("--force", is_flag=True,
                      help="Use inputs even if they come from different datasets or are of an unexpected kind.")(fn)
    fn = click.option("--overwrite", is_flag=True, help="Replace the output if it exists.")(fn)
    return fn


# ============================================================================================ inspect

@command("inspect", short_help="Describe a dataset: format, rows, bad rows, lengths, duplicates.")
@click.argument("data")
@dataset_options
@click.option("--tokenizer", metavar="PATH", default=None,
              help="A local Hugging Face tokenizer (or model) directory: also report lengths in tokens.")
@click.option("--rejects", "rejects_path", metavar="PATH", default=None,
              help="Write every rejected row with its reason to this JSONL file.")
@click.option("--overwrite", is_flag=True, help="Replace the --rejects file if it exists.")
def inspect_cmd(data, read_options, tokenizer, rejects_path, overwrite):
    """Read DATA once and describe it, before a long job.

    \b
    DATA is a .jsonl, .json (a list of records or a mapping id -> record), .parquet (file or directory),
    .csv, a datasets.save_to_disk directory, or a Hugging Face dataset id NAME[@CONFIG][:SPLIT].
    Reports the detected format and field mapping, rows, rejected rows with reasons, prompt/response
    length distributions (characters; tokens with --tokenizer), and exact duplicate examples.

    \b
    Bad rows are all listed. With the default --on-bad-row error the command then exits with status 2
    (like embed/shard/run, which would stop at the first one); with --on-bad-row skip it exits 0.
    """
    from cluster_curate.pipeline import inspect_dataset

    r = inspect_dataset(data, read_options, tokenizer=tokenizer, rejects_path=rejects_path, overwrite=overwrite)
    if console.JSON_MODE:
        console.summary("inspect", {k: v for k, v in r.items() if k != "first_reject"})
    else:
        for rej in r["rejects"]:
            field = f"field '{rej['field']}': " if rej["field"] else ""
            console.warn(f"rejected id {rej['id']}: {rej['location']}: {field}{rej['reason']}")
        if r["rejected"] > len(r["rejects"]):
            console.warn(f"... and {r['rejected'] - len(r['rejects'])} more rejected rows"
                         + ("" if r["rejects_file"] else " (pass --rejects PATH to write them all)"))
        fields = ", ".join(f"{k}={v}" for k, v in r["fields"].items())
        data_rows = {"source": r["source"], "container": r["container"], "format": r["format"],
                     "fields": fields, "rows": r["rows"], "examples": r["examples"], "rejected": r["rejected"]}
        if r["rejects_file"]:
            data_rows["rejects file"] = r["rejects_file"]
        data_rows.update({"exact duplicate examples": r["duplicates"], "duplicate prompts": r["duplicate_prompts"],
                          "with a system prompt": r["with_system_prompt"],
                          "multi-turn (context turns)": r["multi_turn"], "fingerprint": r["fingerprint"]})
        table = [{"length": name.replace("_", " "), **stats} for name, stats in r["lengths"].items()]
        console.summary(f"inspect {r['source']}", data_rows, table)
    if r["rejected"] and read_options.on_bad_row == "error":
        more = f"; {r['rejected']} bad rows in all" if r["rejected"] > 1 else ""
        raise CurateError(f"{r['first_reject']} (pass --on-bad-row skip to skip bad rows{more})")

# ============================================================================================ embed

# ============================================================================================ cluster

# ============================================================================================ select

# ============================================================================================ shard

# ============================================================================================ run

# ============================================================================================ report


if __name__ == "__main__":
    main()
