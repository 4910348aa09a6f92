"""Helpers shared by several commands: the raw data behind an artifact (cluster and select read it), tokenizers
(inspect, select and shard count tokens), the checked copy of raw rows from data changed since (shard and export)
and timing."""

from __future__ import annotations

from contextlib import contextmanager

from cluster_curate.errors import CurateError, counted


def open_recorded_data(o: dict, name: str, record: dict, hint: str | None = None):
    """The raw data behind artifact `name`: --data, else the dataset (or mixture) its lineage `record` names (as
    written, at its recorded absolute path, else beside `name`: a folder moved with its data); it must be the one
    the artifact was made from when the artifact records one (--force: used as it is). None when there is neither.
    `hint` (why the caller reads it) is added to an error in reading or matching the data."""
    try:
        return _open_recorded(o, name, record or {})
    except CurateError as e:
        if hint is None:
            raise
        raise e.hinted(hint) from None


def _open_recorded(o: dict, name: str, record: dict):
    from pathlib import Path

    from cluster_curate.io.artifacts import check_dataset_matches
    from cluster_curate.io.datasets import data_paths
    from cluster_curate.io.mixture import is_mixture_record, open_lineage_data
    from cluster_curate.options import read_options
    found = relocated(record, Path(str(name)).parent)
    try:
        ds = open_lineage_data(o["data"], record if o["data"] else found, read_options(o))
    except CurateError as e:
        if o["data"] or not (record.get("source") or is_mixture_record(record)):
            raise  # --data given: its own error says which path
        raise CurateError(recorded_data_error(str(e), name, record)) from None
    if ds is not None and record.get("fingerprint"):
        # read where the record says (--data naming that place too): a mismatch is that data changed since
        same_place = not o["data"] or _resolved(data_paths(o["data"])) == _resolved(recorded_paths(found))
        given = _fingerprints(ds, o["force"])
        if not o["force"]:
            _check_same_inputs(record, name, ds, given, same_place)
        check_dataset_matches(record, name, given, o["force"], same_place)
        _known_rows(ds, record)
    return ds


def _known_rows(ds, record: dict) -> None:
    """The rows the record counted, for the data (or each mixture input) whose bytes are the recorded ones: the
    same bytes hold as many rows, and counting them again (`ds.record()`: shard's and export's lineage) was a
    pass over the data of its own."""
    from cluster_curate.io.mixture import Mixture, is_mixture_record
    pairs = zip(record["inputs"], ds.datasets) if isinstance(ds, Mixture) and is_mixture_record(record) else \
        [(record, ds)] if not isinstance(ds, Mixture) else []
    for rec, d in pairs:
        if d.rows is None and isinstance(rec.get("rows"), int) and rec.get("fingerprint") == d.fingerprint():
            d.rows = rec["rows"]


def _check_same_inputs(record: dict, name: str, ds, given: dict, same_place: bool) -> None:
    """A mixture other than the recorded one (or a mixture for one dataset, or one dataset for a mixture), said by
    the first input that differs and how (io/mixture.input_difference): two sources named alike and their
    fingerprints alone do not say it. Rows changed at the recorded place are check_dataset_matches' to say."""
    from cluster_curate.io.mixture import Mixture, input_difference, is_mixture_record
    if record["fingerprint"] == given["fingerprint"] or not (is_mixture_record(record) or isinstance(ds, Mixture)):
        return
    differs = input_difference(record, ds, contents=not same_place)
    if differs:
        raise CurateError(f"{name}: was made from {record.get('source')} (fingerprint {record['fingerprint']}), not "
                          f"from {given['source']} (fingerprint {given['fingerprint']}): {differs}, or pass --force "
                          "to use it anyway")


def _fingerprints(ds, forced: bool = False) -> dict:
    """The source and fingerprint of data as read now (a mixture's inputs' too), to check against a lineage record
    without the pass over the rows that a full record (`ds.record()`: their counts) may take; `forced` (--force):
    a mixture's inputs' names and first ids too, which must still be the record's (artifacts._check_same_ids)."""
    from cluster_curate.io.mixture import Mixture
    if forced and isinstance(ds, Mixture):
        return ds.record()
    inputs = [{"source": d.source, "fingerprint": d.fingerprint()} for d in ds.datasets] \
        if isinstance(ds, Mixture) else None
    return {"source": ds.source, "fingerprint": ds.fingerprint(), **({"inputs": inputs} if inputs else {})}


def _resolved(paths: list[str]) -> list:
    """Local paths as the files they name (a hub id as written)."""
    from pathlib import Path
    return [p if p.startswith("hf:") else Path(p).expanduser().resolve() for p in paths]


def recorded_paths(record: dict) -> list[str]:
    """The paths a lineage record's data is read from (each input's, for a mixture)."""
    from cluster_curate.io.datasets import recorded_source
    from cluster_curate.io.mixture import is_mixture_record
    items = record["inputs"] if is_mixture_record(record) else [record] if record.get("source") else []
    return [p for p in (recorded_source(i) for i in items) if p]


def relocated(record: dict, beside) -> dict:
    """`record` with each recorded path that is not there (as written, nor at its absolute path) but is relative
    to `beside` or the folder above it pointed there: a folder moved with its data (`run data.jsonl --out r` in
    it: r/'s artifacts and the data one level apart)."""
    import os
    from pathlib import Path

    from cluster_curate.io.datasets import recorded_source
    from cluster_curate.io.mixture import is_mixture_record
    up = Path(os.path.normpath(os.path.join(beside, os.pardir)))  # '..' above '.' (an artifact named alone)

    def move(item: dict) -> dict:
        path = recorded_source(item)
        if path and not path.startswith("hf:") and not os.path.exists(path) and not os.path.isabs(path):
            there = next((p for p in (Path(beside) / path, up / path) if p.exists()), None)
            if there is not None:
                return {**item, "source": str(there)}
        return item

    if is_mixture_record(record):
        return {**record, "inputs": [move(i) for i in record["inputs"]]}
    return move(record) if record.get("source") else record


def ids_not_read(source, missing, whose: str, made: str) -> CurateError:
    """One line naming the first of the `missing` ids (`whose`: selected, left-over, clustered) that a pass over the
    data at `source` did not read, and asking whether `made` ('was the selection') was made from that data."""
    return CurateError(f"{source}: {whose} id {int(missing[0])} is not a readable example of this dataset "
                       f"({counted(len(missing), whose + ' id')} missing; {made} made from {source}?)")


def check_every_id_read(ds, ids, found) -> None:
    """One line naming the first of `ids` that the pass over `ds` did not find (found: a bool per id)."""
    import numpy as np
    if not found.all():
        raise ids_not_read(ds.source, ids[np.flatnonzero(~found)], "clustered", "were the clusters")


class NoDatasetRecorded(CurateError):
    """An artifact records no raw dataset, and no --data was given: what can do without the data (`--within auto`,
    `--dedup`'s answers, `--kinds auto`) goes on without it and without a warning (there is nothing gone to say)."""


def open_clusters_data(o: dict, clusters: str, c, why: str = "--tokenizer", hint: str | None = None):
    """The raw data behind clusters artifact `clusters` (c: as read_clusters read it; open_recorded_data, with its
    `hint`; the record-less case already says what to pass)."""
    ds = open_recorded_data(o, clusters, c.meta.dataset, hint)
    if ds is None:
        raise NoDatasetRecorded(f"{why} needs the raw data: pass --data DATA (the clusters record no dataset)")
    return ds


def reads_as_recorded(o: dict, record: dict | None) -> bool:
    """Whether the data behind an artifact whose lineage records the dataset `record`, opened now by
    open_recorded_data, is read as `embed` read it: no --data, no --force (data changed since is then read as it
    is now), and no reading option given now that differs from the recorded ones (a mixture's inputs keep theirs
    whatever is given; --on-bad-row changes no embedded row). Then what embed kept of each embedded row (the
    embeddings' answer columns, features/embed.ANSWER_COLUMNS) is what a pass over the data would read."""
    from cluster_curate.io.mixture import is_mixture_record
    from cluster_curate.options import read_options
    record = record or {}
    if o.get("data") or o.get("force") or not (record.get("source") or is_mixture_record(record)):
        return False
    if is_mixture_record(record):
        return True
    given = {k: v for k, v in read_options(o).given().items() if k != "on_bad_row"}
    return all((record.get("options") or {}).get(k) == v for k, v in given.items())


def recorded_data_error(message: str, name: str, record: dict) -> str:
    """An error in opening the data an artifact's lineage records, said as such: the path is the one `name`
    records (and where it was recorded from, when that was another place), and --data is the way out. E.g.
    `data.jsonl (the dataset clusters.parquet records; recorded from /old/data.jsonl): no such file or
    directory; pass --data DATA`."""
    from pathlib import Path

    from cluster_curate.io.datasets import recorded_source
    from cluster_curate.io.mixture import is_mixture_record
    mixture = is_mixture_record(record)
    items = [(f"input {i.get('name')} of the mixture", i) for i in record["inputs"]] if mixture else \
        [("the dataset", record)]
    hint = "; pass --data DATA" + (" (each input, in the order recorded)" if mixture else "")
    for what, item in items:
        absolute = item.get("absolute_path")
        for path in dict.fromkeys(str(p) for p in (recorded_source(item), item.get("source"), absolute) if p):
            if message.startswith(f"{path}: ") or message.startswith(f"{path} "):
                where = f"; recorded from {absolute}" if absolute and absolute != path else ""
                rest = message[len(path):]
                said = "" if rest.startswith(": --") else hint  # an option of this command's is what to mend
                return f"{path} ({what} {Path(str(name)).name} records{where}){rest}{said}"
    return f"{name}: its recorded data: {message}{hint}"


def check_tokenizer_path(path: str | None) -> None:
    """--tokenizer names a directory or a .gguf file: checked with the options, before any stage's work."""
    from pathlib import Path

    p = Path(path) if path is not None else None
    if p is not None and not (p.is_dir() or (p.is_file() and p.suffix == ".gguf")):
        raise CurateError(f"--tokenizer {path}: not a directory nor a .gguf file (pass a local Hugging Face "
                          "tokenizer or model directory, as written by save_pretrained, or a .gguf model)")
    if p is not None and p.is_dir():
        from cluster_curate.features.tokenizer_files import missing_tokenizer_files
        missing = missing_tokenizer_files(p)
        if missing:  # else transformers says so only when select loads it, after embed and cluster
            found = sorted(f.name for f in p.iterdir())
            holds = f"it holds {', '.join(found[:4])}{', ...' if len(found) > 4 else ''}" if found else "it is empty"
            raise CurateError(f"--tokenizer {path}: no tokenizer in this directory ({missing}; {holds}); pass the "
                              "directory a tokenizer's save_pretrained wrote, or a .gguf model")


def tokenizer_stamp(path: str) -> str:
    """A tokenizer's files told apart cheaply (where they are, their names, sizes and modification times; a .gguf
    file's own): select records it beside the counts it made, and shard reuses those while it is unchanged."""
    from pathlib import Path

    from cluster_curate.io.artifacts import stable_hash
    p = Path(path).resolve()
    files = [p] if p.is_file() else sorted(f for f in p.iterdir() if f.is_file())
    return stable_hash([str(p)] + [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files])


def load_tokenizer(path: str):
    """A local tokenizer: a Hugging Face tokenizer or model directory, or the tokenizer inside a .gguf file (the
    same file `embed --model` takes)."""
    from pathlib import Path

    check_tokenizer_path(path)
    p, where = Path(path), {}
    if p.is_file() and p.suffix == ".gguf":
        from cluster_curate.features.models import require_gguf_extra
        require_gguf_extra(p)
        p, where = p.parent, {"gguf_file": p.name}
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(p), trust_remote_code=False, **where)
    except Exception as e:  # noqa: BLE001 - transformers raises many types; one line for the user
        raise CurateError(f"--tokenizer {path}: cannot load a tokenizer ({str(e).splitlines()[0]})") from None
    # it counts, never feeds a model: a row longer than the model's limit is counted whole, without transformers'
    # "longer than the specified maximum sequence length ... indexing errors" warning, which names no row
    tok.model_max_length = 1 << 62
    return tok


def token_counts(tokenizer, examples) -> tuple[list[int], list[int]]:
    """Prompt tokens (through the chat template when the tokenizer has one) and response tokens, as a trainer
    tokenizes the response after the prompt (`models.row_token_counts`, embed's n_tokens' rule too)."""
    from cluster_curate.features.models import row_token_counts
    return row_token_counts(tokenizer, examples)


def examples_of_ids(ds, ids, label: str, batch_rows: int = 4096):
    """One pass over the data, with a progress bar: (positions in `ids`, examples) per batch, for its rows whose
    id is in `ids`."""
    import numpy as np

    from cluster_curate import console
    where = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    where[ids] = np.arange(ids.shape[0])
    with console.progress(label, total=ds.rows) as bar:
        for batch in ds.iter_batches(batch_rows):
            chosen = [e for e in batch.examples if e.id < where.shape[0] and where[e.id] >= 0]
            if chosen:
                yield where[[e.id for e in chosen]], chosen
            bar.advance(batch.num_rows)


def count_tokens_pass(ds, ids, tokenizer_path, label: str, batch_rows: int = 4096):
    """Tokens per selected id by reading the data once: with a tokenizer, prompt (chat template when it has
    one) + response tokens; without, whitespace-separated words of prompt and response; a preference pair adds
    its rejected answer's. -1 for an id that is not a readable example of `ds`."""
    import numpy as np

    from cluster_curate.features.text import rejected_counts, word_counts
    tok = load_tokenizer(tokenizer_path) if tokenizer_path else None
    counts = np.full(ids.shape[0], -1, dtype=np.int64)
    for pos, chosen in examples_of_ids(ds, ids, label, batch_rows):
        if tok is not None:
            p, r = token_counts(tok, chosen)
            rejected = rejected_counts(tok, chosen)  # a preference pair: its rejected answer's tokens too
            counts[pos] = [a + b for a, b in zip(p, r)] if rejected is None else \
                [a + b + int(c) for a, b, c in zip(p, r, rejected)]
        else:
            counts[pos] = [word_counts(e)[0] for e in chosen]  # the same words a text-only embed counts
    return counts


def rows_checked(record: dict | None, ds) -> bool:
    """Whether a pass that copies raw rows must read them as examples too: the data is not the one the artifact
    records (--force; or none recorded). The recorded data's selected ids were readable examples when embedded, and
    its fingerprint ties them to it; data changed since may hold a selected row broken since (cut short, not an
    object, its prompt gone), which raw rows alone would copy as nulls."""
    return not record or record.get("fingerprint") != ds.fingerprint()


@contextmanager
def bad_rows_skipped(ds, skipped: bool = True):
    """Every bad row skipped for the pass (each input's reading options restored after): the rows_checked pass reads
    them as examples to find the selected (or left-over) ones that no longer read, which refuse_unreadable names;
    an unselected bad row (one embed skipped, or one edited since) stops nothing, as the raw pass never did."""
    import dataclasses

    from cluster_curate.io.mixture import Mixture
    inputs = (ds.datasets if isinstance(ds, Mixture) else [ds]) if skipped else []
    given = [d.opts for d in inputs]
    for d in inputs:
        d.opts = dataclasses.replace(d.opts, on_bad_row="skip")
    try:
        yield
    finally:
        for d, opts in zip(inputs, given):
            d.opts = opts


def readable_rows(batch):
    """A batch's raw rows that were read as examples: a bad row skipped (--on-bad-row skip) left out."""
    import pyarrow as pa
    import pyarrow.compute as pc
    raw = batch.raw
    if len(batch.examples) == raw.num_rows:
        return raw
    return raw.filter(pc.is_in(raw.column("id"), value_set=pa.array([e.id for e in batch.examples], pa.int64())))


def refuse_unreadable(ds, ids, whose: str) -> None:
    """One line for the first of `ids` (`whose`: selected, left-over) that the pass over `ds` skipped as a bad row
    (bad_rows_skipped): its file:line and why, not a row of nulls."""
    import numpy as np
    wanted = set(np.asarray(ids).tolist())
    bad = next((r for r in ds.rejects if r.id in wanted), None)
    if bad is not None:
        raise CurateError(f"{bad} ({whose} id {bad.id}: the data changed since it was selected)")
