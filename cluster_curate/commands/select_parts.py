"""Parts of `select` (commands/select.py): the examples it reads beside the clusters -- the --target's and each
--decontaminate set's, in their own formats or as embeddings -- and their questions among the clusters' rows
(exact_dedup.prompt_keys, kept by embed; decontamination.py's word n-grams)."""

from __future__ import annotations

import numbers
from pathlib import Path

from cluster_curate.commands.common import check_every_id_read, open_clusters_data
from cluster_curate.errors import CurateError, counted
from cluster_curate.io import names


def target_embeddings_meta(target: str, option: str = "--target"):
    """The meta of a --target (or a --decontaminate set: `option`) that is an embeddings artifact (read as it
    is), else None: raw data, which select embeds --like the pool (read with target_read_options)."""
    from cluster_curate.io.artifacts import artifact_files, read_meta
    try:
        if Path(target).is_dir() and any(names.part_of(f.name) is None for f in artifact_files(target)):
            return None  # a folder of files (the working directory), not one artifact's parts: its first file's
            # kind is not the folder's
        meta = read_meta(target)
    except CurateError:
        return None
    if meta.kind in (names.CLUSTERS, names.SELECTION):  # ids without text: read as data, 'unrecognised format'
        raise CurateError(f"{option} {target}: is a '{meta.kind}' artifact, which holds no examples: give its "
                          "raw data, or its embeddings (`embed DATA --like POOL_EMBEDDINGS`)")
    return meta if meta.kind == names.EMBEDDINGS else None  # a shard file is raw data with its metadata


def target_read_options(o: dict):
    """How a raw --target or --decontaminate set is read: its own format and fields (detected; the data's
    --prompt-field does not apply), with the data's --on-bad-row; not trained on, so a folder of its splits is
    read whole (io/datasets.py ReadOptions.not_trained)."""
    from cluster_curate.io.datasets import ReadOptions
    return ReadOptions(on_bad_row=o["on_bad_row"], not_trained=True)


def open_target(target: str, o: dict, option: str = "--target", pool_meta=None):
    """A raw --target opened as select embeds it (target_read_options), or a --decontaminate set (`option`) read
    for its questions alone (no response needed: io/formats.py, prompts_only). Fields it cannot detect are not
    the data's to give, so the message says how to read it (embedded by itself; an evaluation set: the columns
    it is read from) instead of naming --prompt-field. A target detected only as an evaluation set is (a
    `Question` column: _target_as_questions), with its answers found by name; `pool_meta`: the pool's embeddings,
    whose features say whether questions alone could be embedded."""
    from dataclasses import replace

    from cluster_curate.io.datasets import open_dataset
    from cluster_curate.io.fields import UnrecognisedFormat
    questions = option == "--decontaminate"
    try:
        return open_dataset(target, replace(target_read_options(o), prompts_only=questions))
    except UnrecognisedFormat as e:
        if questions:
            raise CurateError(f"{option} {e.headline}: an evaluation set is read for its questions, in "
                              "its own format: a column `prompt`, `question`, `instruction`, `problem` or `query` "
                              "(answers, if any, beside it), a chat in `messages` or `conversations`, or the user's "
                              "`turns`; rename its question column to one of these") from None
        found = _target_as_questions(target, o, option, e.columns, pool_meta)
        if found is not None:
            return found
        what, name = "a target", "TARGET"
        raise CurateError(f"{option} {e.headline}: {what} is read in its own format, not with the "
                          "data's --prompt-field / --response-field; embed it with its fields (`cluster-curate embed "
                          f"{name} --like EMBEDDINGS --prompt-field ... --response-field ... --out T.parquet`) and "
                          f"pass {option} T.parquet") from None


def _target_as_questions(target: str, o: dict, option: str, columns: str, pool_meta):
    """A target whose columns the data's detection does not read, found as --decontaminate finds an evaluation
    set's question (io/fields.resolve_fields with prompts_only: `Question`, `problem`, ...), then read with that
    column as the prompt, its answer column found by name (`Answer`). None where no question is found either;
    a target with questions alone is refused in one line that says so (embed reads a response per row); `columns`:
    the target's, as its refusal showed them."""
    from dataclasses import replace

    from cluster_curate.io.datasets import open_dataset
    from cluster_curate.io.fields import NoResponseColumn
    from cluster_curate.io.formats import TURNS
    try:
        asked = open_dataset(target, replace(target_read_options(o), prompts_only=True))
    except CurateError:
        return None
    prompt = asked.fields["prompt"]
    if asked.format != TURNS and "," not in prompt:
        try:
            return open_dataset(target, replace(target_read_options(o), prompt_field=prompt))
        except NoResponseColumn:
            pass
    among = f"no response column among: {columns}"
    params = pool_meta.params if pool_meta is not None else {}
    features = params.get("features") or []
    if any(f not in ("text", "semantic") for f in features) or params.get("text_field", "prompt") != "prompt":
        raise CurateError(f"{option} {target}: the target needs responses for --features {','.join(features)} "
                          f"({among})")
    # the pool's features read the prompt alone, but embed (which select runs on the target) reads a response per
    # row whatever the features
    raise CurateError(f"{option} {target}: the target has no responses ({among}), and `embed` reads one per row: "
                      "give the target with its answers")


def check_decontaminate_options(o: dict) -> None:
    """--decontaminate's paths and --decontaminate-ngrams, before any reading (select, and inspect's)."""
    from cluster_curate.io.containers import is_missing
    for path in o["decontaminate"] or ():  # a hub id (as any data takes it) is read, from the cache when offline
        if not str(path).strip():  # Path("") is the working directory, read as data or embeddings
            raise CurateError("--decontaminate: an empty path; give the evaluation set's file, folder or hub id")
        if is_missing(str(path)):
            raise CurateError(f"--decontaminate {path}: no such file or directory")
        _check_one_split(path)
    n = o["decontaminate_ngrams"]
    if n is not None and (isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 3):  # as the CLI's type
        raise CurateError(f"--decontaminate-ngrams must be a whole number of words, at least 3 (got {n!r})")
    if n is not None and not o["decontaminate"]:
        raise CurateError("--decontaminate-ngrams is only used with --decontaminate")


def _check_one_split(path) -> None:
    """A save_to_disk DatasetDict of several splits as --decontaminate: data is read from its 'train' split, which
    is seldom the evaluation set (and may be the pool itself), so the split is to be named."""
    import json
    try:
        splits = json.loads((Path(path) / "dataset_dict.json").read_text(encoding="utf-8")).get("splits") or []
    except (OSError, ValueError, AttributeError):
        return
    if len(splits) > 1:
        named = "test" if "test" in splits else next((s for s in splits if s != "train"), splits[0])
        raise CurateError(f"--decontaminate {path}: a DatasetDict of splits {', '.join(splits)}; name the evaluation "
                          f"split, e.g. --decontaminate {Path(path) / named}")


def _kept_prompt_keys(path):
    """The prompt_key column embed keeps (features/embed.PROMPT_KEY_COLUMN) of every row of embeddings `path`, or
    None where it was written without it."""
    import numpy as np

    from cluster_curate.features.embed import PROMPT_KEY_COLUMN
    from cluster_curate.io.artifacts import artifact_schema
    from cluster_curate.io.readers import read_columns
    if PROMPT_KEY_COLUMN not in artifact_schema(path).names:
        return None
    return read_columns(path, [PROMPT_KEY_COLUMN]).column(0).to_numpy().astype(np.int64, copy=False)


def _kept_questions(path, ids):
    """What the rows `ids` (sorted) of embeddings `path` ask, from the columns embed keeps (PROMPT_KEY_COLUMN and
    PROMPT_TURN_KEYS_COLUMN), or None where it was written without them or lacks one of the ids."""
    import numpy as np
    import pyarrow.compute as pc

    from cluster_curate.decontamination import RowQuestions
    from cluster_curate.features.embed import PROMPT_KEY_COLUMN, PROMPT_TURN_KEYS_COLUMN
    from cluster_curate.io.artifacts import artifact_schema
    from cluster_curate.io.readers import read_columns, rows_of_ids
    if not {PROMPT_KEY_COLUMN, PROMPT_TURN_KEYS_COLUMN} <= set(artifact_schema(path).names):
        return None
    table = read_columns(path, ["id", PROMPT_KEY_COLUMN, PROMPT_TURN_KEYS_COLUMN])
    e_ids = table.column("id").to_numpy()
    try:
        rows = rows_of_ids(path, e_ids, ids)
    except CurateError:  # an id these embeddings lack (--embeddings of another run): the data has it
        return None
    keys = table.column(PROMPT_KEY_COLUMN).to_numpy(zero_copy_only=False)
    keys = np.asarray(keys if rows is None else keys[rows], dtype=np.int64)
    turns = table.column(PROMPT_TURN_KEYS_COLUMN).combine_chunks()  # null but for rows of several turns
    turn_ids = e_ids[pc.list_parent_indices(turns).to_numpy()]
    position = np.minimum(np.searchsorted(ids, turn_ids), len(ids) - 1)
    ours = ids[position] == turn_ids  # rows of the embeddings that the clusters lack have none here
    return RowQuestions(keys, position[ours], pc.list_flatten(turns).to_numpy()[ours].astype(np.int64, copy=False))


def questions_of(path: str, o: dict, option: str, with_prompts: bool = False, warn_skipped: bool = True):
    """The prompt keys of the questions in `path` (unique int64), its fingerprint, and (`with_prompts`) their
    prompts: the keys its embeddings artifact keeps, else from its raw rows (the data itself, read in its own
    format -- a --decontaminate set for its questions alone, answers optional (open_target), MT-Bench's turns
    each a question (_each_turn) -- or the data its embeddings record). An error in reading it names `option`;
    rows --on-bad-row skip left out are warned of (`warn_skipped`: run's preflight reads it before select
    does)."""
    try:
        return _questions_of(path, o, option, with_prompts, warn_skipped)
    except CurateError as e:
        said = str(e)
        if said.startswith(option):
            raise
        raise CurateError(f"{option} {said}" if said.startswith(str(path)) else f"{option} {path}: {said}") from None


def _questions_of(path: str, o: dict, option: str, with_prompts: bool, warn_skipped: bool):
    import numpy as np

    from cluster_curate.exact_dedup import prompt_keys
    from cluster_curate.io.formats import TURNS
    from cluster_curate.io.mixture import open_lineage_data
    meta = target_embeddings_meta(path, option)
    if meta is None:
        ds = open_target(path, o, option)
    else:
        kept = None if with_prompts else _kept_prompt_keys(path)
        if kept is not None:
            return np.unique(kept), meta.fingerprint, None
        try:
            ds = open_lineage_data(None, meta.dataset or {}, target_read_options(o))
        except CurateError as e:
            raise CurateError(f"{option} {path}: its recorded data: {e}") from None
        if ds is None:
            raise CurateError(f"{option} {path}: records no dataset")
    prompts = [ex.prompt for batch in ds.iter_batches() for ex in batch.examples]
    if ds.format in (TURNS, "prompt-completion", "qa"):
        prompts = _each_turn(prompts)
    if ds.rejects and warn_skipped:  # its questions are not looked for in the pool: say so, as embed does
        from cluster_curate import console
        console.warn(f"{option} {path}: {counted(len(ds.rejects), 'bad row')} skipped (--on-bad-row skip), so "
                     f"{'its question is' if len(ds.rejects) == 1 else 'their questions are'} not looked for; the "
                     f"first: {ds.rejects[0]}")
    return (np.unique(prompt_keys(prompts)), ds.fingerprint() if meta is None else meta.fingerprint,
            prompts if with_prompts else None)


def _each_turn(prompts: list) -> list:
    """MT-Bench's turns (a `turns` column, or a list of texts in `prompt`: consecutive user turns), BFCL's
    multi-turn tests: each user turn is a question a row may ask by itself (a system turn beside them is none:
    prompt keys and n-grams set it aside). A prompt with a turn of another role (context) is one question."""
    out = []
    for p in prompts:
        asked = [turn for turn in p if turn["role"] != "system"]
        out += [[turn] for turn in asked] if all(turn["role"] == "user" for turn in asked) else [p]
    return out


def _pool_questions(o: dict, clusters: str, c, emb_path, why: str):
    """What the clusters' rows ask (decontamination.RowQuestions, aligned with c.ids): from the columns the
    embeddings keep, else from one pass over the pool's raw data (`why`: what needs it, for the error when it
    cannot be read)."""
    kept = None if emb_path is None else _kept_questions(emb_path, c.ids)
    if kept is not None:
        return kept
    return _read_pool(o, clusters, c, why, f"{why} reads the rows' prompts, which these embeddings do not keep")[0]


def _read_pool(o: dict, clusters: str, c, why: str, hint: str, grams: list = (), n: int | None = None):
    """One pass over the pool's raw data: what the clusters' rows ask (RowQuestions, aligned with c.ids), and per
    EVAL set's word n-grams `grams`, per row, whether its prompt shares one (`why`, `hint`: for the error when the
    data cannot be read)."""
    import numpy as np

    from cluster_curate.commands.common import examples_of_ids
    from cluster_curate.decontamination import RowQuestions, shares_ngram
    ds = open_clusters_data(o, clusters, c, why, hint=None if o.get("data") else hint)
    parts, positions = [], []
    hits = np.zeros((len(grams), len(c.ids)), dtype=bool)
    found = np.zeros(len(c.ids), dtype=bool)
    label = f"select: the rows' questions{f' and their {n}-word runs' if grams else ''}"
    for pos, chosen in examples_of_ids(ds, c.ids, label):
        prompts = [e.prompt for e in chosen]
        parts.append(RowQuestions.of(prompts))
        positions.append(pos)
        for i, g in enumerate(grams):
            hits[i, pos] = shares_ngram(prompts, g, n)
        found[pos] = True
    check_every_id_read(ds, c.ids, found)
    read = RowQuestions.joined(parts)  # in reading order: placed at the rows' positions in c.ids
    where = np.concatenate([np.zeros(0, np.int64), *positions])
    keys = np.zeros(len(c.ids), dtype=np.int64)
    keys[where] = read.keys
    return RowQuestions(keys, where[read.turn_rows], read.turn_keys), hits


IDS_SHOWN = 20  # ids a summary line shows of the rows a set (or the target) asks; the metadata lists more


def listed_ids(ids: list, rows: int) -> str:
    """`ids 4, 9`, or past IDS_SHOWN `ids 300, ..., 319: first 20 of 40; all in the artifact's metadata` (which
    lists the first decontamination.LISTED_IDS of them)."""
    text = ("id " if rows == 1 else "ids ") + ", ".join(map(str, ids[:IDS_SHOWN]))
    if rows <= IDS_SHOWN:
        return text
    where = "all" if len(ids) >= rows else f"the first {len(ids):,}"
    return f"{text}: first {IDS_SHOWN} of {rows:,}; {where} in the artifact's metadata"


def decontaminate(o: dict, clusters: str, c, x: dict, evals: list):
    """--decontaminate: the clusters' rows that ask a question of an evaluation set (exact_dedup.prompt_keys;
    with --decontaminate-ngrams, also decontamination.shares_ngram) left out, from c and from x's per-row
    arrays, before anything is counted; what the rows ask stays in x["pool_questions"] (target_copies reads it
    there). `evals`: questions_of each set, with its prompts for the n-grams. Returns (c, what the artifact
    records: per set, its questions, how many the pool asks and by which rows; None without the option)."""
    from dataclasses import replace

    import numpy as np

    from cluster_curate.decontamination import eval_ngrams, set_record
    if not o["decontaminate"]:
        return c, None
    n = o["decontaminate_ngrams"]
    grams = [eval_ngrams(prompts, n) for _, _, prompts in evals] if n else []
    if n:  # the n-grams are in the rows' prompts: the one pass over them gives their questions too
        pool, near = _read_pool(o, clusters, c, "--decontaminate-ngrams",
                                "--decontaminate-ngrams reads the rows' prompts", [g for g, _ in grams], n)
    else:
        pool, near = _pool_questions(o, clusters, c, x["emb_path"], "--decontaminate"), None
    keep, sets = np.ones(len(c.ids), dtype=bool), []
    for i, (path, (asked, fingerprint, _)) in enumerate(zip(o["decontaminate"], evals)):
        hit, record = set_record(path, fingerprint, asked, pool, c.ids, near[i] if n else None, n,
                                 grams[i][1] if n else 0)
        sets.append(record)
        keep &= ~hit
    if not keep.any():
        raise nothing_left(o["decontaminate"], len(c.ids))
    x["pool_questions"] = pool
    if not keep.all():
        c = replace(c, ids=c.ids[keep], labels=c.labels[keep],
                    similarity=None if c.similarity is None else c.similarity[keep])
        x.update({k: x[k][keep] for k in ("n_tokens", "loss", "features", "answers", "dedup_keys", "dedup_short")
                  if x.get(k) is not None})
        x["pool_questions"] = pool.take(keep)
    return c, {"rows_left_out": int((~keep).sum()), "sets": sets}


def nothing_left(paths, rows: int) -> CurateError:
    """The error when --decontaminate leaves out every row (select, and run's preflight before the first stage)."""
    return CurateError(f"--decontaminate {' '.join(map(str, paths))}: every one of the {counted(rows, 'row')} asks "
                       "a question of it; nothing is left to select")


# The summary's lines that `report` says again of a selection, each built here once from what the selection records
# (select._params): the summary passes its own figures, report the metadata's.

def rows_left_out(decontaminated: dict | None) -> int:
    """The rows --decontaminate left out before the budget was counted (its record; 0 without it)."""
    return (decontaminated or {}).get("rows_left_out") or 0


def kept_line(fraction: float | None, decontaminated: dict | None):
    """`kept`, selected / rows (rounded; the metadata keeps the exact fraction): of the rows embedded, or of those
    --decontaminate left (the budget is counted on them)."""
    from cluster_curate.console import Shown
    left = rows_left_out(decontaminated)
    return Shown(None if fraction is None else round(fraction, 4),
                 label=f"kept (fraction of the rows {'--decontaminate left' if left else 'embedded'})")


def covered_line(covered: int | None, nonempty: int, clusters: int | None = None):
    """`clusters_covered`: the clusters selected from of those holding rows (report adds `clusters`, every one)."""
    from cluster_curate.console import Shown
    value = {"covered": covered, "nonempty": nonempty} | ({} if clusters is None else {"clusters": clusters})
    return Shown(value, f"{covered} / {nonempty} ({(covered or 0) / max(nonempty, 1):.1%})")


def within_lines(within: str | None, auto: dict | None) -> dict:
    """`within`: the order given, or the one --within auto chose and why (a selection made before it recorded why:
    the order alone), with --within auto's record (`within_auto`, shown in that line)."""
    from cluster_curate.console import Shown
    if not auto:
        return {"within": within}
    return {"within": Shown(auto["order"], f"auto: {auto['order']}" + (f" ({auto['why']})" if "why" in auto else "")),
            "within_auto": Shown(auto, hidden=True)}


def ratio_rule(ratio: float, available, quotas, kept: float, decontaminated: dict | None) -> str:
    """--per-cluster-ratio's rule in words: floor(ratio x the smallest cluster left after --dedup, `available`) rows
    from each, `kept` (selected / rows) of the data or of the rows --decontaminate left."""
    import numpy as np
    available = np.asarray(available)
    rows_from = "rows --decontaminate left" if rows_left_out(decontaminated) else "data"
    return (f"floor({ratio} x smallest cluster {int(available[available > 0].min())}) = "
            f"{counted(int(np.max(quotas)), 'row')} per cluster: {kept:.1%} of the {rows_from} (below {ratio:g}: "
            "clusters are larger than the smallest)")


def near_duplicates_line(dropped: int | None, threshold: float, ids: list | None = None):
    """`near_duplicates_dropped` by --dedup THRESHOLD, with the first of their `ids` (the selection's
    params.dedup_ids lists them)."""
    from cluster_curate.commands.embed_parts import ids_shown
    from cluster_curate.console import Shown
    dropped = int(dropped or 0)
    listed = f"{ids_shown((ids or [])[:5], dropped)}, listed in the selection's params.dedup_ids" if ids else ""
    return Shown(dropped, f"{dropped:,} (cosine > {threshold}){listed}", "near-duplicates dropped")


def notes_lines(notes: list[str]) -> dict:
    """The selection's notes on its budget (--json `notes`), a line each."""
    from cluster_curate.console import Shown, line
    if not notes:
        return {}
    lines = {"notes": Shown(list(notes), hidden=True)}
    for i, note in enumerate(notes):
        lines[f"note {i + 1}" if len(notes) > 1 else "note"] = line(note)
    return lines


def decontaminated_lines(record: dict | None) -> dict:
    """The summary's (and `report`'s) line per --decontaminate set."""
    from cluster_curate.console import Shown
    if not record:
        return {}
    lines = {"decontaminated": Shown(record, hidden=True)}
    for i, r in enumerate(record["sets"]):
        lines[f"decontaminated {i + 1}"] = Shown(
            None, f"{r['path']}: {eval_set_text(r)}" + (f": left out ({listed_ids(r['ids'], r['rows'])})"
                                                         if r["rows"] else ""),
            label=f"decontaminated: {Path(r['path']).name}", in_json=False)
    return lines


def eval_set_text(r: dict) -> str:
    """`60 rows ask 60 of its 200 questions`, with --decontaminate-ngrams `90 rows: 60 ask 60 of its 200
    questions as written, 30 more share a run of 13 words with one`: one set's record
    (decontamination.set_record), as select's summary and inspect's say it."""
    if "ngram" not in r:
        return (f"{counted(r['rows'], 'row')} {'asks' if r['rows'] == 1 else 'ask'} {r['questions_in_pool']:,} of "
                f"its {counted(r['questions'], 'question')}")
    # the rows that share only a run of words ask none of the questions as written: counted apart, not under "ask"
    return (f"{counted(r['rows'], 'row')}: {r['copies']:,} {'asks' if r['copies'] == 1 else 'ask'} "
            f"{r['questions_in_pool']:,} of its {counted(r['questions'], 'question')} as written, "
            f"{r['ngram_rows']:,} more {'shares' if r['ngram_rows'] == 1 else 'share'} a run of {r['ngram']} words "
            "with one")


def target_copies(o: dict, clusters: str, c, x: dict, target_emb) -> dict:
    """The pool rows (positions in c.ids) that ask one of the target's questions: the same prompt turns
    (exact_dedup.prompt_keys, system prompts and whitespace aside), whatever the answer; what an evaluation set
    given as the target would leak into training. From the keys embed keeps (in the pool's and the target's
    embeddings `target_emb`; the pool's as decontaminate left them in x), else from the raw data; when that cannot
    be read, the reason."""
    import numpy as np
    try:
        asked = questions_of(target_emb, o, "--target")[0]
        pool = x.get("pool_questions")
        if pool is None:
            pool = _pool_questions(o, clusters, c, x["emb_path"], "the check for the target's questions in the pool")
    except CurateError as e:
        return {"checked": False, "why_not": str(e), "rows": np.zeros(0, np.int64)}
    found, in_pool = pool.asking(asked)
    return {"checked": True, "rows": np.flatnonzero(found), "target_questions": int(asked.size),
            "target_questions_in_pool": int(in_pool.size)}


def copies_summary(copies: dict, ids, rows) -> dict:
    """What the artifact records of the target's questions in the pool (pool positions -> ids), with the
    warning when selected rows ask them."""
    import numpy as np

    from cluster_curate.decontamination import LISTED_IDS
    if not copies["checked"]:
        return {"checked": False, "why_not": copies["why_not"]}
    chosen = np.sort(ids[np.intersect1d(rows, copies["rows"])])
    out = {"checked": True, "target_questions": copies["target_questions"],
           "target_questions_in_pool": copies["target_questions_in_pool"], "pool_rows": int(len(copies["rows"])),
           "selected": int(len(chosen)), "ids": chosen[:LISTED_IDS].tolist()}
    if len(chosen):
        shown = ", ".join(map(str, out["ids"][:5])) + (", ..." if len(chosen) > 5 else "")
        one = len(chosen) == 1
        out["warning"] = (f"{counted(len(chosen), 'selected row')} {'asks' if one else 'ask'} a question of the "
                          f"target (the same prompt; {'id' if one else 'ids'} {shown}): if the target is an evaluation "
                          f"set, {'it leaks' if one else 'they leak'} it into training; --decontaminate TARGET leaves "
                          f"{'it' if one else 'them'} out")
    return out


def target_copies_line(copies: dict, decontaminated: dict | None = None):
    """The summary's (and `report`'s) line on the target's questions in the pool: in the rows --decontaminate left
    (`decontaminated`: what it recorded), where it left rows out."""
    from cluster_curate.console import Shown
    if not copies["checked"]:
        return Shown(copies, f"not looked for ({copies['why_not']})", "target's questions in the pool")
    n, q = copies["pool_rows"], copies["target_questions_in_pool"]
    out = rows_left_out(decontaminated)
    left = f" (after --decontaminate left out {counted(out, 'row')})" if out else ""
    total = counted(copies["target_questions"], "question")
    text = (f"{counted(n, 'pool row')} {'asks' if n == 1 else 'ask'} {q:,} of the target's {total}; "
            f"{copies['selected']:,} of them selected{left}"
            + (f" ({listed_ids(copies['ids'], copies['selected'])})" if copies["selected"] else "") if n else
            f"none of the target's {total} is asked by a pool row{left}")
    return Shown({k: v for k, v in copies.items() if k != "warning"}, text, "target's questions in the pool")


def bounds_text(bounds: list[dict]) -> str:
    """`floor 0.1 (--source-min-share, in place of the mixture file's min_share 0.6)`: an input's bounds
    (select._bounds_said), as select's summary and `report` say them."""
    return "; ".join(f"{b['bound']} {b['share']:g} ({b['from']}"
                     + (f", in place of {b['replaced_from']} {b['replaced']:g}" if "replaced" in b else "") + ")"
                     for b in bounds)
