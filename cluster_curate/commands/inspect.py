"""`inspect DATA`: read a dataset once and describe it, before a long job."""

from __future__ import annotations

from pathlib import Path

from cluster_curate.commands.common import load_tokenizer, token_counts
from cluster_curate.errors import CurateError
from cluster_curate.options import DATASET_OPTIONS, Argument, CommandSpec, Option, int_range, read_options, resolve

INSPECT_LISTED_REJECTS = 20  # rejected rows listed in the summary (all of them go to --rejects PATH)
INSPECT_LISTED_SAME_ANSWER = 20  # ids of the pairs whose two answers are the same, in the summary

OPTIONS = (
    *DATASET_OPTIONS,
    Option("tokenizer", path=True, metavar="PATH",
           help="A local Hugging Face tokenizer (or model) directory, or a .gguf model: also report lengths in "
                "tokens."),
    Option("rejects_path", path=True, flags=("--rejects",), metavar="PATH",
           help="Write every bad row's id, location (file:line, or id), field and reason to this JSONL file (not "
                "the row itself)."),
    Option("overwrite", is_flag=True, default=False,
           help="Replace the --rejects file if it is a rejects list this tool wrote."),
    Option("decontaminate", path=True, multiple=True, metavar="EVAL",
           help="Count the rows that ask a question of the evaluation set EVAL, as `select --decontaminate` "
                "would leave them out (the same prompt turns, system prompts and whitespace aside). May be given "
                "several times."),
    Option("decontaminate_ngrams", type=int_range(3), metavar="N",
           help="With --decontaminate: also count the rows whose prompt shares a run of N words with an EVAL "
                "prompt (as `select --decontaminate-ngrams`)."),
)
BATCH_ROWS = 2048


def _length_stats(values) -> dict:
    import numpy as np
    a = np.asarray(values, dtype=np.int64)
    if a.size == 0:
        return {"min": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0, "mean": 0.0, "total": 0}
    p50, p90, p99 = (int(round(float(np.percentile(a, q)))) for q in (50, 90, 99))
    return {"min": int(a.min()), "p50": p50, "p90": p90, "p99": p99, "max": int(a.max()),
            "mean": round(float(a.mean()), 1), "total": int(a.sum())}


class _Counts:
    """Lengths, duplicates and turn shapes, accumulated example by example."""

    def __init__(self):
        self.prompt_chars, self.response_chars, self.prompt_tokens, self.response_tokens = [], [], [], []
        self.rejected_chars, self.rejected_tokens = [], []  # preference pairs: the rejected answers
        self.same_answer: list[int] = []  # pairs whose rejected answer is the chosen one (exact_dedup.same_answer)
        self.seen_examples: set[bytes] = set()
        self.seen_prompts: set[bytes] = set()
        self.duplicates = self.duplicate_prompts = self.multi_turn = self.with_system = self.with_tools = 0

    def add(self, ex) -> None:
        from cluster_curate.exact_dedup import example_key, same_answer
        from cluster_curate.io.tool_calls import own_system_prompt
        self.prompt_chars.append(sum(len(t["content"]) for t in ex.prompt))
        self.response_chars.append(len(ex.response))
        if ex.rejected is not None:
            self.rejected_chars.append(len(ex.rejected))
            if same_answer(ex.response, ex.rejected):
                self.same_answer.append(ex.id)
        # the tool schemas rendered into a system turn are no system prompt: counted apart
        self.with_system += any(t["role"] == "system" and own_system_prompt(t).strip() for t in ex.prompt)
        self.with_tools += any("tools" in t for t in ex.prompt)
        self.multi_turn += sum(t["role"] != "system" for t in ex.prompt) > 1
        # the copies embed leaves out: the same normalised text (NFC, runs of whitespace as one space)
        pk, ek = example_key(ex.prompt, ""), example_key(ex.prompt, ex.response, ex.rejected)
        self.duplicate_prompts += pk in self.seen_prompts
        self.duplicates += ek in self.seen_examples
        self.seen_prompts.add(pk)
        self.seen_examples.add(ek)


def inspect(data, **options) -> dict:
    """Describe a whole dataset: container, format and field mapping, rows, rejected rows with reasons,
    prompt/response length distributions (characters; tokens with a tokenizer), exact duplicates.

    Bad rows are always collected (never raised) so the report lists all of them; the caller decides what a bad
    row means for its exit status (`result["first_reject"]`, `on_bad_row`)."""
    import dataclasses

    from cluster_curate import console
    from cluster_curate.io.mixture import Mixture, is_mixture, open_inputs

    opts = resolve(OPTIONS, options, "inspect")
    rejects_path, tokenizer = opts["rejects_path"], opts["tokenizer"]
    evals = _evals(opts)  # each EVAL read first: its errors before the pass over the data
    if rejects_path:
        _check_rejects_path(rejects_path, opts["overwrite"], data)
    tok = load_tokenizer(tokenizer) if tokenizer else None
    read = read_options(opts)
    ds = open_inputs(data, read if is_mixture(data) else dataclasses.replace(read, on_bad_row="skip"))
    # each input's own on_bad_row (a mixture file's, else --on-bad-row) decides the exit status; its bad rows
    # are listed all the same (read with skip), and the mixture keeps its options (the fingerprint embed records)
    members = ds.datasets if isinstance(ds, Mixture) else [ds]
    policies = [inp.options.on_bad_row for inp in ds.inputs] if isinstance(ds, Mixture) else [read.on_bad_row]
    for d in members:
        d.opts = dataclasses.replace(d.opts, on_bad_row="skip")
    from cluster_curate.features.text import rejected_counts
    c = _Counts()
    asks = _Asks(evals, opts["decontaminate_ngrams"])
    with console.progress("inspect", total=ds.rows) as bar:
        for batch in ds.iter_batches(BATCH_ROWS):
            for ex in batch.examples:
                c.add(ex)
            asks.add(batch.examples)
            if tok is not None and batch.examples:
                p, r = token_counts(tok, batch.examples)
                c.prompt_tokens += p
                c.response_tokens += r
                rejected = rejected_counts(tok, batch.examples)
                if rejected is not None:
                    c.rejected_tokens += rejected.tolist()
            bar.advance(batch.num_rows)
    if rejects_path:
        ds.write_rejects(rejects_path)
    failing = _failing_rejects(ds, members, policies)
    lengths = {"prompt_chars": _length_stats(c.prompt_chars), "response_chars": _length_stats(c.response_chars)}
    if c.rejected_chars:  # preference pairs: `response` is the chosen answer; the rejected one is counted apart
        lengths["rejected_chars"] = _length_stats(c.rejected_chars)
    if tok is not None:
        lengths["prompt_tokens"] = _length_stats(c.prompt_tokens)
        lengths["response_tokens"] = _length_stats(c.response_tokens)
        if c.rejected_tokens:
            lengths["rejected_tokens"] = _length_stats(c.rejected_tokens)
    return {
        "source": ds.source, "container": ds.container, "format": ds.format, "fields": ds.fields,
        "rows": ds.rows, "examples": len(c.response_chars), "bad_rows": len(ds.rejects),
        "rejected": len(ds.rejects),  # bad_rows' former name (beside a pair's rejected answer), kept for one release
        "rejects": [r.to_dict() for r in ds.rejects[:INSPECT_LISTED_REJECTS]],
        "rejects_file": str(rejects_path) if rejects_path else None,
        "first_reject": str(failing[0]) if failing else None,
        "failing_rejects": len(failing),
        "duplicates": c.duplicates, "duplicate_prompts": c.duplicate_prompts,
        "with_system_prompt": c.with_system, "with_tools": c.with_tools, "multi_turn": c.multi_turn,
        "tokenizer": tokenizer,
        "lengths": lengths, "fingerprint": ds.fingerprint(),
        **({"same_answer_pairs": len(c.same_answer), "same_answer_ids": c.same_answer[:INSPECT_LISTED_SAME_ANSWER]}
           if c.rejected_chars else {}),
        **({"chosen_from": ds.chosen_from} if not isinstance(ds, Mixture) and ds.chosen_from else {}),
        **(_split_read(ds) if not isinstance(ds, Mixture) else {}),
        **({"inputs": _inputs(ds)} if isinstance(ds, Mixture) else {}),
        **({"decontamination": asks.records(opts["decontaminate"])} if evals else {}),
    }


def _split_read(ds) -> dict:
    """{"split": NAME}: the split of a Hugging Face dataset read (a DatasetDict's train split, or DIR/SPLIT; a hub
    id's). Reading a DatasetDict says which in a note, which --quiet hides; the JSON object says it too."""
    return {"split": ds.split} if ds.split else {}


def _check_rejects_path(path, overwrite: bool, data) -> None:
    """--rejects PATH, before the pass: a file (a folder cannot be replaced by one: it failed after the whole pass),
    and with --overwrite only a rejects list the tool wrote is replaced, as a rejects file beside an output is
    (by its first line: JSON with `id` and `reason`), never a file of the user's."""
    from cluster_curate.io import names
    from cluster_curate.io.artifacts import KEEP_ONLY, check_writable, output_inputs, own_sidecar
    p = Path(path)
    if p.is_dir():
        raise CurateError(f"--rejects {p}: is a directory, expected a file; name the file to write (e.g. "
                          f"{p / names.REJECTS})")
    if p.exists() and not p.is_file():  # --overwrite would put a file in its place (/dev/null replaced)
        raise CurateError(f"--rejects {p}: not a regular file (a device or a pipe); name a file to write")
    check_writable(p, overwrite, inputs=output_inputs(data), label=f"--rejects {p}")
    if p.exists() and not own_sidecar(p, names.REJECTS):
        raise CurateError(f"--rejects {p}: not a rejects list cluster-curate wrote; {KEEP_ONLY}: move it, or "
                          "choose another --rejects")


def _evals(o: dict) -> list:
    """Each --decontaminate set: (its prompt keys, fingerprint, n-grams and how many were boilerplate)."""
    from cluster_curate.commands.select_parts import check_decontaminate_options, questions_of
    from cluster_curate.decontamination import eval_ngrams
    check_decontaminate_options(o)
    n = o["decontaminate_ngrams"]
    out = []
    for path in o["decontaminate"] or ():
        asked, fingerprint, prompts = questions_of(path, o, "--decontaminate", with_prompts=n is not None)
        out.append((asked, fingerprint, *(eval_ngrams(prompts, n) if n else (None, 0))))
    return out


class _Asks:
    """What the rows ask (decontamination.RowQuestions, and their shared-n-gram hits per EVAL set), example by
    example."""

    def __init__(self, evals: list, n: int | None):
        self.evals, self.n, self.questions, self.ids, self.near = evals, n, [], [], [[] for _ in evals]

    def add(self, examples: list) -> None:
        if not self.evals or not examples:
            return
        from cluster_curate.decontamination import RowQuestions, shares_ngram
        prompts = [ex.prompt for ex in examples]
        self.questions.append(RowQuestions.of(prompts))
        self.ids += [ex.id for ex in examples]
        for near, (_, _, grams, _) in zip(self.near, self.evals):
            if self.n:
                near.append(shares_ngram(prompts, grams, self.n))

    def records(self, paths) -> list[dict]:
        import numpy as np

        from cluster_curate.decontamination import RowQuestions, set_record
        pool = RowQuestions.joined(self.questions)
        ids = np.asarray(self.ids, dtype=np.int64)
        return [set_record(path, fingerprint, asked, pool, ids,
                           np.concatenate(near) if self.n and near else None, self.n, boilerplate)[1]
                for path, (asked, fingerprint, _, boilerplate), near in zip(paths, self.evals, self.near)]


def _failing_rejects(ds, members, policies) -> list:
    """The rejected rows of the inputs whose on_bad_row is error (ids global, as listed), in reading order."""
    if len(members) == 1:
        return list(ds.rejects) if policies[0] == "error" else []
    out, offset = [], 0
    for d, policy in zip(members, policies):
        if policy == "error":
            out += [r for r in ds.rejects if offset <= r.id < offset + int(d.rows or 0)]
        offset += int(d.rows or 0)
    return out


def _inputs(mix) -> list[dict]:
    """A mixture's inputs, one row each (after the reading pass); then the shards' typed columns are checked
    (inputs that disagree on a column's type are an error here, as in embed and shard)."""
    rows = [{"input": inp.name, "source": d.source, "format": d.format, "rows": d.rows, "bad_rows": len(d.rejects),
             "rejected": len(d.rejects), "first_id": int(first), "fields": d.fields,  # (rejected: as above)
             **({"chosen_from": d.chosen_from} if d.chosen_from else {}), **_split_read(d)}
            for inp, d, first in zip(mix.inputs, mix.datasets, mix.offsets())]
    mix.check_columns()
    return rows


def render(r: dict, options: dict) -> None:
    import click

    from cluster_curate import console
    for rej in r["rejects"] if not console.QUIET else []:  # click.echo: one unwrapped line per row
        field = f"field '{rej['field']}': " if rej["field"] else ""
        click.echo(f"rejected id {rej['id']}: {rej['location']}: {field}{rej['reason']}", err=True)
    if r["bad_rows"] > len(r["rejects"]) and not console.QUIET:
        click.echo(f"... and {r['bad_rows'] - len(r['rejects'])} more rejected rows"
                   + ("" if r["rejects_file"] else " (pass --rejects PATH to write them all)"), err=True)
    # a mixture's fields are per input (a dict of dicts): its inputs table lists them, one row each
    fields = "per input (below)" if r.get("inputs") else _fields_text(r["fields"])
    data_rows = {"source": r["source"], "container": r["container"], "format": r["format"],
                 "fields": fields, "rows": r["rows"], "examples": r["examples"],
                 "bad rows": r["bad_rows"]}  # not "rejected": a preference pair's rejected answer is another thing
    if r["rejects_file"]:
        data_rows["rejects file"] = r["rejects_file"]
    data_rows.update({"exact duplicate examples": r["duplicates"], "duplicate prompts": r["duplicate_prompts"],
                      "with a system prompt": r["with_system_prompt"],
                      **({"with tool schemas": r["with_tools"]} if r["with_tools"] else {}),
                      "multi-turn (context turns)": r["multi_turn"], "fingerprint": r["fingerprint"]})
    if "same_answer_pairs" in r:  # preference pairs: a DPO loss on these is zero
        n, ids = r["same_answer_pairs"], r["same_answer_ids"]
        shown = ", ".join(map(str, ids[:10])) + (", ..." if n > 10 else "")
        data_rows["pairs with the same answer"] = f"{n} (ids {shown})" if n else 0
    if "chosen_from" in r:
        data_rows["labelled pairs"] = _chosen_text(r["chosen_from"], r["fields"]["label"])
    from cluster_curate.commands.select_parts import eval_set_text
    for d in r.get("decontamination", []):
        ids = ", ".join(map(str, d["ids"][:5])) + (", ..." if d["rows"] > 5 else "")
        # labelled by its name, as select's summary labels a set: the value keeps the width (--json: the path);
        # a label of its own, since a key's underscores are shown as spaces and a file name's are not a key's
        label = f"questions of {Path(d['path']).name}"
        data_rows[label] = console.Shown(None, eval_set_text(d) + (f" (ids {ids})" if d["rows"] else ""), label)
    table = [{"length": name.replace("_", " "), **stats} for name, stats in r["lengths"].items()]
    console.summary(f"inspect {r['source']}", data_rows, table)
    if r.get("inputs"):
        console.summary("inputs", {"inputs": len(r["inputs"])},
                        [{**{k: v for k, v in i.items() if k not in ("rejected", "chosen_from")},
                          "fields": _fields_text(i["fields"]),
                          **({"labelled pairs": _chosen_text(i.get("chosen_from"), i["fields"].get("label"))}
                             if any("chosen_from" in j for j in r["inputs"]) else {})}
                         for i in r["inputs"]])


def _fields_text(fields: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in fields.items())


def _chosen_text(chosen_from: dict | None, label: str | None) -> str:
    """Labelled pairs by the column of their chosen answer: {response column: n (label 1), rejected column: n}."""
    if not chosen_from:
        return "-"
    (kept, n_kept), (swapped, n_swapped) = chosen_from.items()
    return f"{n_kept:,} chosen from {kept} ({label} 1), {n_swapped:,} from {swapped} ({label} 0)"


def as_json(r: dict) -> dict:
    """--json: the result as it is (the rejects file is the output), without the first reject's message."""
    return {"output": r["rejects_file"], **{k: v for k, v in r.items()
                                             if k not in ("first_reject", "failing_rejects", "rejects_file")}}


def exit_status(r: dict, options: dict) -> None:
    """A bad row is an error (exit 2) after the report, unless its input skips bad rows: --on-bad-row skip, or a
    mixture file input's own `on_bad_row: skip` (which --on-bad-row does not override)."""
    if r.get("first_reject"):
        failing = r.get("failing_rejects", r["bad_rows"])
        more = f"; {failing} bad rows in all" if failing > 1 else ""
        from cluster_curate.io.datasets import SKIP_HINT
        from cluster_curate.io.mixture import MIXTURE_SKIP_HINT
        hint = MIXTURE_SKIP_HINT if r.get("inputs") else SKIP_HINT
        raise CurateError(f"{r['first_reject']} ({hint}{more})")


SPEC = CommandSpec(
    "inspect", inspect, (Argument("data", nargs=-1),), OPTIONS, render, as_json=as_json, check=exit_status,
    short_help="Describe a dataset: format, rows, bad rows, lengths, duplicates.",
    help=f"""Read DATA once and describe it, before a long job.

    \b
    DATA is a .jsonl, .json (a list of records or a mapping id -> record), .parquet (file or directory),
    .csv, .tsv (each text file also .gz), a datasets.save_to_disk directory, or a Hugging Face dataset id
    NAME[@CONFIG][:SPLIT].
    Reports the detected format and field mapping, rows, rejected rows with reasons, prompt/response
    length distributions (characters; tokens with --tokenizer), and exact duplicate examples.

    \b
    The first {INSPECT_LISTED_REJECTS} bad rows are listed with their reasons (--rejects PATH writes them all).
    With the default --on-bad-row error the command then exits with status 2 (like embed/shard/run, which
    would stop at the first one); with --on-bad-row skip it exits 0.
    """)
