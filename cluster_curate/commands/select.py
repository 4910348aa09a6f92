"""`select C --out S`: a balanced, budgeted subset of every cluster."""

from __future__ import annotations

import time
from pathlib import Path

from cluster_curate.commands import select_parts as P
from cluster_curate.commands.common import NoDatasetRecorded, check_every_id_read, open_clusters_data
from cluster_curate.errors import CurateError, counted
from cluster_curate.io import names
from cluster_curate.options import (DATASET_OPTIONS, OUTPUT_OPTIONS, Argument, CommandSpec, Option, int_range,
                                    lazy, recorded, resolve, seed_type)


def _order_help() -> str:
    from cluster_curate.within_orders import SHORT_ANSWER_WORDS, WITHIN
    return (f"Order inside a cluster: auto: `answers` where responses of at most {SHORT_ANSWER_WORDS} words repeat "
            "(one-word answers, labels), else `random` (reads the responses when the data can be found); "
            + WITHIN.help_text() + ".")


OPTIONS = (
    Option("out", path=True, flags=("--out", "-o"), required=True, run=False,
           help="Selection artifact to write (.parquet)."),
    Option("fraction", type=float, help="Budget as a fraction of all rows, in (0, 1]."),
    Option("budget", type=int,
           help="Budget as a number of rows: met exactly, or every row (with a warning) where the data has fewer."),
    Option("per_cluster_ratio", type=float,
           help="The paper's rule: every cluster keeps floor(R × smallest cluster size) rows, R in (0, 1]."),
    Option("token_budget", type=int, metavar="T",
           help="Budget in tokens: quotas water-filled in tokens, the selected tokens within one row of T."),
    Option("token_fraction", type=float, metavar="F", help="Budget as a fraction of all tokens, in (0, 1]."),
    Option("tokenizer", path=True,
           help="Local tokenizer directory or .gguf model (the trainer's): count every row's tokens with it (one "
                "pass over the data), exact. Default: the embeddings' n_tokens (the feature model's or encoder's "
                "tokenizer), else whitespace words; the summary says which."),
    Option("data", path=True, run=False, multiple=True,
           help="The raw data, for --tokenizer, word counts or --within answers and auto (default: the dataset, or "
                "every input of a mixture, that the clusters' lineage records)."),
    Option("source_min_share", metavar="[NAME=]SHARE,...", joined=",",
           help="A mixture's inputs: each gives at least this share of the budget (rows, or tokens with a token "
                "budget), met exactly or refused; SHARE for every input or NAME=SHARE, a comma list or the option "
                "given again (mixture files can set min_share per input)."),
    Option("source_max_share", metavar="[NAME=]SHARE,...", joined=",",
           help="A mixture's inputs: each gives at most this share of the budget (as --source-min-share)."),
    Option("balance_power", type=float, default=0.0, show_default=True,
           help="Quota ∝ size^p under the cluster sizes: 0 = balanced (water-filling), 1 = proportional "
                "(--per-cluster-ratio does not use it)."),
    Option("within", record=True, default="auto", choices=lazy("cluster_curate.within_orders", "WITHIN_CHOICES"),
           show_default=True, help=_order_help),
    Option("embeddings", path=True, run=False,
           help="Embeddings artifact (features for diverse / --dedup, loss for hard, n_tokens for shard). "
                "Default: the one the clusters were made from, when it is still there."),
    Option("dedup", record=True, type=float, metavar="COSINE",
           help="Drop a row whose cosine similarity to an already kept row of its cluster exceeds COSINE "
                "(before quotas are filled), unless both responses are short answers that differ, case, spaces and "
                "the punctuation around them aside (one pass over the data reads them)."),
    Option("seed", record=True, type=seed_type(), default=0, show_default=True, help="Seeds the random order."),
    *DATASET_OPTIONS,
    Option("target", path=True, metavar="TARGET",
           help="A few examples of the task to curate for (tens to thousands of rows): a dataset in any supported "
                "format, embedded like the clusters' embeddings (written beside --out as OUT.target.parquet), or "
                "an embeddings artifact made with `embed TARGET --like`. The budget goes to the rows nearest the "
                "target, round-robin over its rows, spread over the clusters it pulls from."),
    Option("target_weight", type=float, shown_default=lazy("cluster_curate.targeting", "DEFAULT_TARGET_WEIGHT"),
           help="With --target: 1 = pure relevance (the nearest rows, round-robin over target rows), 0 = the "
                "balance over clusters alone (in the random order; not over groups and kinds); in between, the "
                "budget is spread over the clusters the target pulls from, by how many target rows each holds, "
                "inside the budget / weight most relevant rows."),
    Option("decontaminate", path=True, multiple=True, metavar="EVAL",
           help="Leave out the rows that ask a question of EVAL (the same prompt turns, or in a chat the same "
                "user turn, system prompts and whitespace aside, whatever the answer) before the budget is counted, "
                "so that an evaluation set cannot leak into training. EVAL: a dataset in any supported format, "
                "answers optional (IFEval's `prompt`, MT-Bench's `turns`, a chat ending with the user's turn), or "
                "its embeddings. May be given several times."),
    Option("decontaminate_ngrams", type=int_range(3), metavar="N",
           help="With --decontaminate: also leave out the rows whose prompt shares a run of N words with an EVAL "
                "prompt (reworded copies; 13 is GPT-3's choice). Reads the data once."),
    *OUTPUT_OPTIONS,
)


def _embeddings(o: dict, clusters: str, cmeta):
    """The embeddings artifact to use: --embeddings, else the clusters' own (when unchanged)."""
    from cluster_curate import console
    from cluster_curate.io.artifacts import check_same_dataset, read_meta
    from cluster_curate.io.lineage import upstream
    if o["embeddings"] is not None:
        emeta = read_meta(o["embeddings"], None if o["force"] else names.EMBEDDINGS)
        check_same_dataset({clusters: cmeta, o["embeddings"]: emeta}, force=o["force"])
        return o["embeddings"], emeta, None
    path, found = upstream(clusters, cmeta, "embeddings")
    if path is None:
        return None, None, found
    console.info(f"using the clusters' embeddings {path}")
    return path, found, None


def _inputs(o: dict, clusters: str, c, needs: set):
    """Per-row inputs of the order and dedup, aligned with the clusters' ids."""
    import numpy as np

    from cluster_curate.clustering import normalise_features
    from cluster_curate.io.readers import read_embedding_columns, read_embeddings_for
    emb_path, emeta, why_not = _embeddings(o, clusters, c.meta)
    if emb_path is None and needs & {"features", "loss"}:
        from cluster_curate.within_orders import AUTO, WITHIN
        order_needs = () if o["within"] == AUTO else WITHIN.get(o["within"]).needs
        what = f"--within {o['within']}" if "features" in order_needs or o["dedup"] is None else "--dedup"
        said = "the feature vectors" if "features" in needs else "the `loss` column"
        raise CurateError(f"{what} needs {said} of the embeddings artifact: pass --embeddings E ({why_not})")
    extra = read_embedding_columns(emb_path, ["n_tokens", "loss"], c.ids) if emb_path is not None else {}
    loss = extra.get("loss")
    if "loss" in needs:
        if loss is None:
            raise CurateError(f"{emb_path}: --within {o['within']} needs a 'loss' column, and this artifact has none")
        if np.isnan(loss).all():
            raise CurateError(f"{emb_path}: --within {o['within']} needs loss values, and its 'loss' column is all "
                              "null/NaN")
    features = None
    if "features" in needs:
        features = read_embeddings_for(emb_path, c.ids, force=o["force"], what=f" of {clusters}")
        normalise_features(features, center=c.meta.params.get("normalisation") == "center+l2")
    answers = _answers(o, clusters, c, emb_path=emb_path)[0] if "answers" in needs else None
    dedup_keys, dedup_short = _dedup_answers(o, clusters, c) if o["dedup"] is not None else (None, None)
    return dict(emb_path=emb_path, emeta=emeta, why_not=why_not, loss=loss, features=features,
                n_tokens=extra.get("n_tokens"), answers=answers, dedup_keys=dedup_keys, dedup_short=dedup_short)


def _dedup_answers(o: dict, clusters: str, c) -> tuple:
    """--dedup's answers: a key per row, equal for responses equal but for case, spaces and the punctuation around
    them (answer_kinds.loose_answer_key: "Paris." is "Paris"), and whether each is a short answer, from a pass over the
    data (embed keeps the strict keys only); two short answers that differ are not near-duplicates. (None, None)
    where the data cannot be read: feature cosine alone, said as `--within auto` says it."""
    from cluster_curate.answer_kinds import loose_answer_key
    from cluster_curate.within_orders import SHORT_ANSWER_WORDS
    try:
        keys, words = _answers(o, clusters, c, why="--dedup", key=loose_answer_key)
    except CurateError as e:
        if not isinstance(e, NoDatasetRecorded):
            from cluster_curate import console
            console.warn(f"--dedup: the responses were not read, so feature cosine alone ({e})")
        return None, None
    return keys, words <= SHORT_ANSWER_WORDS


def _warn_no_n_tokens(clusters: str, x: dict, tokens) -> None:
    """The clusters' embeddings recorded, but gone or changed, and no counts made here (--tokenizer, or the words a
    token budget counts): the selection gets no n_tokens, which is said (after _tokens: a token budget fills them)."""
    why_not = x["why_not"]
    if x["emb_path"] is None and why_not and "records no" not in why_not and tokens is None:
        from cluster_curate import console
        console.warn(f"{clusters}: {why_not}; the selection gets no n_tokens (shard then counts words unless given "
                     "--embeddings or --tokenizer); pass --embeddings E")


def _answers(o: dict, clusters: str, c, ds=None, emb_path=None, why: str | None = None, key=None):
    """Each row's answer (answer_kinds.answer_key of its response, or `key` of it) and its response's word count,
    aligned with the clusters' ids (`--within answers`, `auto`, `--dedup`): those embed kept in the embeddings
    `emb_path` (_kept_answers; the data is opened and checked, not read), else from one pass over the raw data."""
    import numpy as np

    from cluster_curate.answer_kinds import answer_key
    from cluster_curate.commands.common import examples_of_ids
    if ds is None:
        # why the data is read; the recorded data's error already says "pass --data DATA", and --data's needs no hint
        why = why or f"--within {o['within']}"
        ds = open_clusters_data(o, clusters, c, why, hint=None if o.get("data") else f"{why} reads the rows' responses")
    kept = _kept_answers(o, c, emb_path) if key is None else None  # embed keeps answer_key's
    if kept is not None:
        return kept
    key = key or answer_key
    keys = np.zeros(len(c.ids), dtype=np.int64)
    words = np.zeros(len(c.ids), dtype=np.int64)
    found = np.zeros(len(c.ids), dtype=bool)
    for pos, chosen in examples_of_ids(ds, c.ids, "select: read the answers"):
        keys[pos] = [key(e.response) for e in chosen]
        words[pos] = [len(e.response.split()) for e in chosen]
        found[pos] = True
    check_every_id_read(ds, c.ids, found)
    return keys, words


def _kept_answers(o: dict, c, emb_path) -> tuple | None:
    """(answer keys, response words) of the clusters' ids from the columns embed keeps (features/embed.
    ANSWER_COLUMNS) in the clusters' own embeddings `emb_path`: what the pass over the data reads, without it.
    None where the data must be read: no embeddings or --embeddings given (another run's, which may have read
    the data otherwise), embeddings written before those columns, or data read otherwise than embed read it
    (common.reads_as_recorded)."""
    if emb_path is None or o["embeddings"] is not None:
        return None
    import numpy as np

    from cluster_curate.commands.common import reads_as_recorded
    from cluster_curate.features.embed import ANSWER_COLUMNS
    from cluster_curate.io.readers import read_embedding_columns
    if not reads_as_recorded(o, c.meta.dataset):
        return None
    try:
        got = read_embedding_columns(emb_path, list(ANSWER_COLUMNS), c.ids)
    except CurateError:  # an id the embeddings lack (--embeddings of another run): the data has it
        return None
    if len(got) != len(ANSWER_COLUMNS):
        return None
    return tuple(np.asarray(got[name], dtype=np.int64) for name in ANSWER_COLUMNS)


def _auto_order(o: dict, clusters: str, c, emb_path=None) -> tuple[str, np.ndarray | None, dict]:
    """`--within auto` resolved (within_orders.auto_order): the order, its answer keys, and what decided it.
    Where `cluster` read the answers (its kinds) and no short one repeats, the random order without reading the
    data again. Data that cannot be read gives the random order, not an error (nothing asked for answers): with
    a warning when the clusters record a dataset that is gone or changed, as `cluster --kinds auto` does."""
    from cluster_curate import console
    from cluster_curate.within_orders import SHORT_ANSWER_WORDS, auto_order
    read = c.meta.params.get("short_answers")
    if read and read["max_words"] == SHORT_ANSWER_WORDS and not read["repeat"]:
        order, answers, short, by = "random", None, read["rows"], " (read by `cluster`)"
    else:
        try:
            ds = open_clusters_data(o, clusters, c, "--within auto")
        except CurateError as e:
            if not isinstance(e, NoDatasetRecorded):
                console.warn(f"--within auto: the responses were not read, so the random order ({e})")
            return "random", None, {"order": "random", "why": f"the responses were not read: {e}"}
        keys, words = _answers(o, clusters, c, ds, emb_path)
        (order, answers, short), by = auto_order(keys, words), ""
    why = (f"{short:,} of {len(c.ids):,} responses are answers of at most {SHORT_ANSWER_WORDS} words"
           + (", and some repeat" if order == "answers" else ", and none repeats" if short else "") + by)
    return order, answers, {"order": order, "short_answers": short, "rows": len(c.ids), "why": why}


def _tokens(o: dict, clusters: str, c, x: dict, token_mode: bool):
    """Tokens per row (aligned with the clusters' ids) and what counted them: --tokenizer (exact), else the
    embeddings' n_tokens, else whitespace words from the data (read only when a token budget needs them)."""
    import numpy as np

    from cluster_curate.commands.common import count_tokens_pass
    n_tokens = x["n_tokens"]
    if o["tokenizer"] is None and n_tokens is not None and not np.isnan(np.asarray(n_tokens, np.float64)).any():
        what = (x["emeta"].params.get("n_tokens") if x["emeta"] is not None else None) or "embeddings n_tokens"
        return np.asarray(n_tokens, dtype=np.int64), f"the embeddings' n_tokens: {what}"
    if o["tokenizer"] is None and not token_mode:
        return None, None
    ds = open_clusters_data(o, clusters, c)
    counts = count_tokens_pass(ds, c.ids, o["tokenizer"], "select: count tokens")
    check_every_id_read(ds, c.ids, counts >= 0)
    return counts, (f"tokenizer {o['tokenizer']} (exact)" if o["tokenizer"] else
                    "whitespace words (no --tokenizer and no n_tokens in the embeddings)")


def _check_data(o: dict) -> None:
    """--data, given, must be there whether or not the selection reads it (a row budget, n_tokens in the
    embeddings): a missing path is an error, not ignored. What it holds is checked where it is read, with the
    reading options the clusters record (opening it here without them refused a moved copy of the same data)."""
    from cluster_curate.io.containers import is_missing
    from cluster_curate.io.datasets import data_paths
    for path in data_paths(o["data"]):
        if is_missing(path):
            raise CurateError(f"{path}: no such file or directory")


def check_no_share_options(o: dict) -> None:
    """Data of one input: no source shares to bound (`run` checks it before embed)."""
    if o["source_min_share"] or o["source_max_share"]:
        raise CurateError("--source-min-share / --source-max-share: the data is not a mixture (one input)")


def _sources(o: dict, c):
    """A mixture's source index per row (from the inputs' first ids its lineage records), its input names,
    the floor / cap shares per input (options, else the mixture file's) as arrays (NaN: none), where each
    floor and cap came from (io/mixture.source_bounds), and each input's bounds as the summary says them
    (_bounds_said)."""
    import numpy as np

    from cluster_curate.io.mixture import source_bounds, source_index
    source = source_index(c.meta.dataset, c.ids)
    if source is None:
        check_no_share_options(o)
        file_shares(o["data"], None)  # a mixture file given: not the one dataset the clusters were made from
        return None, None, None, None, None, None
    names_ = [i["name"] for i in c.meta.dataset["inputs"]]
    in_file = file_shares(o["data"], c.meta.dataset["inputs"])
    lo, hi, lo_from, hi_from = source_bounds(o["source_min_share"], o["source_max_share"], names_, *in_file)
    from cluster_curate.selection import binding_source_bound
    bounded = binding_source_bound(names_, lo, hi, (lo_from, hi_from)) is not None
    as_array = (lambda v: np.array([np.nan if s is None else s for s in v], dtype=np.float64))
    return (source, names_, as_array(lo) if bounded else None, as_array(hi) if bounded else None,
            (lo_from, hi_from), _bounds_said(names_, (lo, hi), (lo_from, hi_from), in_file))


def _bounds_said(names_: list[str], shares: tuple, origins: tuple, in_file: tuple) -> list[list[dict]]:
    """Per input, its floor and cap (whatever their value: a floor of 0 can lift the file's) and where each was set,
    with the mixture file's bound an option replaced (`in_file`: file_shares)."""
    from cluster_curate.io.mixture import source_bounds
    file_origins = source_bounds(None, None, names_, *in_file)[2:]
    said = [[] for _ in names_]
    for bound, values, froms, file_values, file_froms in zip(("floor", "cap"), shares, origins, in_file[:2],
                                                            file_origins):
        for i, (v, origin, was, was_from) in enumerate(zip(values, froms, file_values, file_froms)):
            if v is None:
                continue
            said[i].append({"bound": bound, "share": v, "from": origin,
                            **({"replaced": was, "replaced_from": was_from}
                               if was is not None and origin != was_from else {})})
    return said


def file_shares(data, recorded: list[dict] | None) -> tuple[list, list, list | None]:
    """Each input's min_share, max_share and place in its file (for messages): a mixture file given as --data is
    read as it is now (`run` gives its own, so an edited share selects again); else the ones the clusters' lineage
    records (the file's when it was embedded), whose places are not known."""
    from cluster_curate.io.datasets import data_paths
    from cluster_curate.io.mixture import is_mixture_file, mixture_inputs
    paths = data_paths(data) if data else []
    if len(paths) != 1 or not is_mixture_file(paths[0]):
        recorded = recorded or []
        return [i.get("min_share") for i in recorded], [i.get("max_share") for i in recorded], None
    if recorded is None:
        raise CurateError(f"--data {paths[0]}: a mixture file, and the clusters were made from one dataset")
    live = mixture_inputs(paths)
    if [i.name for i in live] != [i["name"] for i in recorded]:
        raise CurateError(f"--data {paths[0]}: its inputs ({', '.join(i.name for i in live)}) are not those the "
                          f"clusters were made from ({', '.join(i['name'] for i in recorded)})")
    return [i.min_share for i in live], [i.max_share for i in live], [i.where for i in live]


def check_no_source_bounds(names: list[str], low, high, origins: tuple[list, list]) -> None:
    """--target takes rows in order of relevance to the target and does not meet a mixture's floors or caps on
    its sources: any floor above 0 or cap below 1 is refused rather than silently left unmet, naming the first
    and where it was set (`origins`, io/mixture.source_bounds)."""
    from cluster_curate.selection import binding_source_bound
    bound = binding_source_bound(names, low, high, origins)
    if bound is not None:
        raise CurateError(f"{bound} is not met by --target (rows come in order of relevance to the target); select "
                          "without --target, or lift the bounds with --source-min-share 0 --source-max-share 1")


def check_options(o: dict):
    """Refuses select's bad options before any work (here and in run's preflight); returns the budget mode."""
    from cluster_curate import selection as S
    from cluster_curate.budget_sequence import check_token_budget_args
    mode = check_token_budget_args(o["token_budget"], o["token_fraction"])
    if mode is None and o["target"] is not None and all(o[b] is None for b in ("fraction", "budget",
                                                                                "per_cluster_ratio")):
        # not check_budget_args' list, which names --per-cluster-ratio: --target refuses it
        raise CurateError("--target spends a budget: give one of --fraction F, --budget N (rows), or "
                          "--token-budget T or --token-fraction F (tokens)")
    if mode is None:
        mode = S.check_budget_args(o["fraction"], o["budget"], o["per_cluster_ratio"])
    else:
        rows_given = [name for name in ("fraction", "budget", "per_cluster_ratio") if o[name] is not None]
        if rows_given:  # as selection.select_rows says it, but before any work (and in run's preflight)
            raise CurateError(f"give one budget: --{mode} and --{rows_given[0].replace('_', '-')} were both given")
    if o["dedup"] is not None and not 0 < o["dedup"] <= 1:
        raise CurateError(f"--dedup must be a cosine similarity in (0, 1], got {o['dedup']}")
    if not 0 <= o["balance_power"] <= 1:
        raise CurateError(f"--balance-power must be between 0 and 1, got {o['balance_power']}")
    if o["balance_power"] and mode == "per-cluster-ratio":  # the rule gives every cluster one count: no power in it
        from cluster_curate import console  # said, not refused: scripts and `run` folders made with it still run
        console.warn("--balance-power is not used with --per-cluster-ratio (every cluster keeps the same number of "
                     "rows)", once=True)
    from cluster_curate.commands.common import check_tokenizer_path
    check_tokenizer_path(o["tokenizer"])  # else `run` finds it missing after embed and cluster
    if o["target_weight"] is not None and o["target"] is None:
        raise CurateError("--target-weight is only used with --target")
    P.check_decontaminate_options(o)
    if o["target"] is not None:
        from cluster_curate.targeting import check_target_weight
        if mode == "per-cluster-ratio":
            raise CurateError("--target spends a budget: give --fraction, --budget, --token-budget or "
                              "--token-fraction, not --per-cluster-ratio")
        for name, unused in (("within", ("auto", "random")), ("dedup", (None,))):
            if o[name] not in unused:
                raise CurateError(f"--{name.replace('_', '-')}: not used with --target (rows come in order of "
                                  "relevance to the target)")
        check_target_weight(o["target_weight"] if o["target_weight"] is not None else 0.0)
    return mode


def select(clusters: str, out: str, **options) -> tuple[dict, list[dict]]:
    """Read a clusters artifact (and the embeddings when an order, dedup or n_tokens needs them), choose the
    rows, write the selection artifact. Returns the summary dict and the per-cluster table (every cluster's row:
    render() condenses it for a screen)."""
    import numpy as np
    import pyarrow as pa

    from cluster_curate import console
    from cluster_curate import selection as S
    from cluster_curate.budget_sequence import TOKEN_MODES
    from cluster_curate.io.artifacts import check_writable, output_inputs, sidecar_path
    from cluster_curate.io.readers import read_clusters
    from cluster_curate.within_orders import AUTO, WITHIN

    t0 = time.perf_counter()
    o = resolve(OPTIONS, dict(options, out=out), "select")
    mode = check_options(o)
    order = None if o["within"] == AUTO else WITHIN.get(o["within"])
    inputs = output_inputs(clusters, o["embeddings"], o["target"], o["data"], o["tokenizer"], o["decontaminate"])
    check_writable(out, o["overwrite"], inputs=inputs, kind=names.SELECTION)
    target_emb = sidecar_path(out, names.TARGET_EMBEDDINGS)
    embeds_target = o["target"] is not None and P.target_embeddings_meta(o["target"]) is None  # raw target data
    target_there = target_emb.exists() or target_emb.is_symlink()
    if embeds_target:  # embedded beside `out`, and like `out` replaced only with --overwrite (it may be the user's)
        if not o["overwrite"] and target_there:
            raise CurateError(f"{target_emb}: already exists, and select writes the --target embeddings there (pass "
                              "--overwrite to replace it, or choose another --out)")
        check_writable(target_emb, True, inputs=inputs, kind=names.EMBEDDINGS,
                       label=f"{target_emb} (the --target embeddings select writes beside --out)")
    # each EVAL read first: a bad, empty or unreadable set is refused before the pool's features are read
    evals = [P.questions_of(path, o, "--decontaminate", with_prompts=o["decontaminate_ngrams"] is not None)
             for path in o["decontaminate"] or ()]
    c = read_clusters(clusters, force=o["force"],
                      need_similarity=f"--within {o['within']}" if order and "similarity" in order.needs else None)
    _check_data(o)
    if o["target"] is not None:
        try:
            return _select_targeted(o, mode, clusters, c, out, t0, evals)
        except BaseException:
            if embeds_target and not target_there:  # embedded for a selection that failed: not left to refuse it again
                target_emb.unlink(missing_ok=True)
            raise
    needs = (set(order.needs) if order else set()) | ({"features"} if o["dedup"] is not None else set())
    x = _inputs(o, clusters, c, needs)
    c, x["decontaminated"] = P.decontaminate(o, clusters, c, x, evals)
    sources, source_names, share_lo, share_hi, share_from, bounds = _sources(o, c)
    tokens, x["counted_by"] = _tokens(o, clusters, c, x, mode in TOKEN_MODES)
    _warn_no_n_tokens(clusters, x, tokens)
    if order is None:  # auto: after what must read the data, so that data it cannot read is that one's error
        within, x["answers"], x["auto"] = _auto_order(o, clusters, c, x["emb_path"])
        order = WITHIN.get(within)
    sel = S.select_rows(c.labels, k=c.k, ids=c.ids, similarity=c.similarity, loss=x["loss"], answers=x["answers"],
                        features=x["features"], fraction=o["fraction"], budget=o["budget"],
                        per_cluster_ratio=o["per_cluster_ratio"], balance_power=o["balance_power"],
                        within=order.name, dedup=o["dedup"], seed=o["seed"],
                        groups=c.groups, kinds=c.kinds, tokens=tokens, token_budget=o["token_budget"],
                        token_fraction=o["token_fraction"], tokens_counted_by=x["counted_by"] or "",
                        sources=sources, source_min_share=share_lo, source_max_share=share_hi,
                        source_names=source_names, source_bound_origins=share_from, answer_keys=x["dedup_keys"],
                        short_answers=x["dedup_short"], left_out=_left_out(x))
    x["features"] = None
    for note in sel.notes:
        console.warn(note)
    columns = {"id": pa.array(c.ids[sel.rows], pa.int64()), "cluster": pa.array(sel.cluster, pa.int32()),
               "rank_in_cluster": pa.array(sel.rank_in_cluster, pa.int32())}
    _add_n_tokens(columns, o, x, tokens, sel.rows)
    if sources is not None:
        unit = "tokens" if mode in TOKEN_MODES else "rows"
        x["sources"] = _source_figures(source_names, sources, tokens, sel.rows, bounds,
                                       None if sel.source_budget is None else (sel.source_budget, unit))
    params = _params(o, mode, sel, c, x)
    if x.get("auto"):
        params["within_auto"] = x["auto"]
    _add_token_figures(params, o, x, tokens, sel, mode)
    if sources is not None:
        params["sources"] = x["sources"]
        if share_lo is not None:
            params["source_shares"] = {"min": [None if np.isnan(v) else v for v in share_lo],
                                       "max": [None if np.isnan(v) else v for v in share_hi]}
    _write_selection(o, c, x, clusters, out, columns, params, algorithm_version(o))
    summary = _summary(o, mode, sel, c, x, out)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    return summary, S.selection_summary_rows(sel, limit=None)


def _write_selection(o: dict, c, x: dict, clusters: str, out: str, columns: dict, params: dict, algorithm: int,
                     extra_inputs: dict | None = None) -> None:
    """The selection artifact: its columns (plus a mixture's source columns), its inputs recorded relative to
    `out`, and its metadata."""
    import pyarrow as pa

    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.mixture import with_source_columns
    from cluster_curate.io.writer import write_artifact
    inputs = {"clusters": c.meta.as_input(clusters, out)}
    if x["emeta"] is not None:
        inputs["embeddings"] = x["emeta"].as_input(x["emb_path"], out)
    inputs.update(extra_inputs or {})
    write_artifact(with_source_columns(pa.table(columns), c.meta.dataset), out,
                   make_meta(names.SELECTION, params, inputs, c.meta.dataset, algorithm), overwrite=o["overwrite"])


def _target_embeddings(o: dict, emb_path, emeta, out: str):
    """The target's feature rows in the pool's space: its embeddings artifact (checked to be in the pool's
    space), or its raw data embedded --like the pool beside the output. Returns (path, ids, rows, meta)."""
    from cluster_curate.features.like import same_space
    from cluster_curate.io.artifacts import sidecar_path
    from cluster_curate.io.readers import read_embeddings
    target = o["target"]
    tmeta = P.target_embeddings_meta(target)
    if tmeta is not None and (tmeta.fingerprint == emeta.fingerprint or Path(target).resolve() ==
                              Path(emb_path).resolve()):  # in the pool's space, but every pool row its own target
        raise CurateError(f"--target {target}: is the pool's own embeddings (those the clusters were made from): give "
                          "a few examples of the task instead")
    if tmeta is not None:
        same_space(emeta, tmeta, target_name=f"--target {target}")
        path = target
    else:
        if not Path(target).exists():
            raise CurateError(f"--target {target}: no such file or directory")
        from cluster_curate.commands.embed import embed
        read = P.open_target(target, o, pool_meta=emeta)  # its format detected, or the way to give its fields
        path = str(sidecar_path(out, names.TARGET_EMBEDDINGS))
        # embedded with the fields it was opened with (a `Question,Answer` CSV's, found as open_target found them)
        made = embed(target, path, like=str(emb_path), overwrite=True, not_trained=True, **read.opts.given())
        if made["bad_rows"]:  # rows the target summary does not count: said, as --decontaminate says an EVAL's
            from cluster_curate import console
            console.warn(f"--target {target}: {counted(made['bad_rows'], 'bad row')} skipped (--on-bad-row skip), "
                         f"so not served as target rows; listed in {made['rejects']}")
    ids, rows, tmeta = read_embeddings(path, force=o["force"])
    return path, ids, rows, tmeta


def _select_targeted(o: dict, mode: str, clusters: str, c, out: str, t0: float, evals: list):
    """`select --target`: targeting.py's relevance and balance over the clusters; the artifact also records, per
    selected row, its nearest target row and the cosine to it, and in its params how each target row is served."""
    import numpy as np
    import pyarrow as pa

    from cluster_curate import console
    from cluster_curate import targeting as T
    from cluster_curate.budget_sequence import TOKEN_MODES
    from cluster_curate.io.readers import read_embeddings_for
    sources, source_names, low, high, origins, _ = _sources(o, c)
    if low is not None:
        check_no_source_bounds(source_names, low, high, origins)
    x = _inputs(o, clusters, c, set())
    if x["emb_path"] is None:
        raise CurateError(f"--target needs the pool's embeddings: pass --embeddings E ({x['why_not']})")
    c, x["decontaminated"] = P.decontaminate(o, clusters, c, x, evals)
    if x["decontaminated"]:
        sources = _sources(o, c)[0]  # of the rows left
    weight = T.DEFAULT_TARGET_WEIGHT if o["target_weight"] is None else o["target_weight"]
    token_mode = mode in TOKEN_MODES
    tokens, x["counted_by"] = _tokens(o, clusters, c, x, token_mode)
    budget = _target_budget(o, mode, len(c.ids), tokens, x["counted_by"], _left_out(x))  # before the target is embedded
    tpath, tids, target, tmeta = _target_embeddings(o, x["emb_path"], x["emeta"], out)
    copies = P.target_copies(o, clusters, c, x, tpath)
    pool = read_embeddings_for(x["emb_path"], c.ids, force=o["force"], what=f" of {clusters}")
    if c.meta.params.get("normalisation") == "center+l2":  # the space the clusters were made in
        mean = pool.mean(axis=0, dtype=np.float64).astype(np.float32)
        pool -= mean
        target = target - mean
    T.check_target_space(pool.shape[1], target, target_name=f"--target {tpath}")
    search = T.search_target(pool, target, depth=T.list_depth(budget, weight, len(target), len(pool)), seed=o["seed"])
    sel = T.select_targeted(c.labels, search, budget=None if token_mode else budget, target_weight=weight,
                            balance_power=o["balance_power"], ids=c.ids, seed=o["seed"], k=c.k, tokens=tokens,
                            token_budget=o["token_budget"], token_fraction=o["token_fraction"],
                            tokens_counted_by=x["counted_by"] or "", left_out=_left_out(x))
    service = T.target_service(pool, target, search, sel, c.labels)
    del pool
    for r in service["per_target"]:  # pool positions -> ids; target rows -> target ids
        r["target_id"] = int(tids[r.pop("target_row")])
        r["nearest_selected"] = [int(c.ids[i]) for i in r["nearest_selected"]]
    copies = P.copies_summary(copies, c.ids, sel.rows)
    for note in [*sel.notes, *([copies["warning"]] if copies.get("warning") else [])]:
        console.warn(note)
    columns = {"id": pa.array(c.ids[sel.rows], pa.int64()), "cluster": pa.array(sel.cluster, pa.int32()),
               "rank_in_cluster": pa.array(sel.rank_in_cluster, pa.int32()),
               "nearest_target": pa.array(tids[sel.owner], pa.int64()),
               "relevance": pa.array(sel.relevance, pa.float32())}
    _add_n_tokens(columns, o, x, tokens, sel.rows)
    params = _params(o, mode, sel, c, x)
    _add_token_figures(params, o, x, tokens, sel, mode)
    if sources is not None:
        params["sources"] = x["sources"] = _source_figures(source_names, sources, tokens, sel.rows)
    params["quotas_over_groups"] = False  # the targeted balance is over the clusters the target pulls from
    params.update({"within": "relevance to the target", "target_weight": weight, "min_target_hits": T.MIN_TARGET_HITS,
                   "target_quotas": "in proportion to the target rows each pulled cluster holds",
                   "relevant_rows": sel.relevant_rows, "target_service": service,
                   "target_copies": {k: v for k, v in copies.items() if k != "warning"}})
    _write_selection(o, c, x, clusters, out, columns, params, algorithm_version(o),
                     {"target": tmeta.as_input(tpath, out)})
    o["within"] = params["within"]
    summary = _summary(o, mode, sel, c, x, out)
    summary.pop("quotas", None)
    summary.update(target_summary(service, tpath))
    summary["target_copies"] = P.target_copies_line(copies, x["decontaminated"])
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    return summary, service["clusters"]


def _budget_share(row: dict, of_budget: dict) -> str:
    """`, 40.0% of the 12,345-token budget`: an input's share of the budget its floor and cap are shares of (from
    the counts: the recorded share is rounded)."""
    size, unit = of_budget["budget"], of_budget["unit"]
    selected = row["selected_tokens" if unit == "tokens" else "selected"]
    return f", {selected / max(size, 1):.1%} of the {size:,}-{unit[:-1]} budget"


def _source_figures(names: list[str], sources, tokens, rows, bounds=None, budget: tuple | None = None) -> list[dict]:
    """A mixture's per-input rows (and tokens) before and after the selection (budget_sequence.source_accounting), with
    an input's floor and cap (`bounds`: _bounds_said) and, where they were applied, its share of the `budget` they
    are shares of (selection.Selection.source_budget, and its unit: "rows", or "tokens" with a token budget)."""
    import numpy as np

    from cluster_curate.budget_sequence import source_accounting
    chosen = np.zeros(len(sources), dtype=bool)
    chosen[rows] = True
    figures = source_accounting(names, sources, tokens, chosen)
    for row, said in zip(figures, bounds or []):
        if said:
            row["bounds"] = said
        if budget is not None:
            size, unit = budget
            row["share_of_budget"] = {"share": round(row["selected_tokens" if unit == "tokens" else "selected"]
                                                     / max(size, 1), 4), "budget": size, "unit": unit}
    return figures


def _add_n_tokens(columns: dict, o: dict, x: dict, tokens, rows) -> None:
    """The selection's n_tokens column: the counts made here (--tokenizer, or words for a token budget; shard
    reuses them), else the embeddings'."""
    import pyarrow as pa
    if tokens is not None and (o["tokenizer"] or x["n_tokens"] is None):
        columns["n_tokens"] = pa.array(tokens[rows], pa.int64())
    elif x["n_tokens"] is not None:
        picked = x["n_tokens"][rows]
        columns["n_tokens"] = pa.array(picked, from_pandas=True) if picked.dtype.kind == "f" else pa.array(picked)


def _add_token_figures(params: dict, o: dict, x: dict, tokens, sel, mode: str) -> None:
    """The selection's token figures, for a budget in tokens or counts by --tokenizer."""
    from cluster_curate.budget_sequence import TOKEN_MODES
    if tokens is not None and (mode in TOKEN_MODES or o["tokenizer"]):
        params["tokens"] = {"counted_by": x["counted_by"], "total": sel.tokens_total,
                            "requested": sel.tokens_requested, "selected": sel.tokens_selected}
        if o["tokenizer"]:  # shard --tokenizer (run passes it) reuses the n_tokens column while it is unchanged
            from cluster_curate.commands.common import tokenizer_stamp
            params["tokens"]["tokenizer_stamp"] = tokenizer_stamp(o["tokenizer"])


def _target_budget(o: dict, mode: str, n: int, tokens, counted_by: str | None, left_out: int = 0) -> int:
    """The budget in rows; for a budget in tokens, the rows it buys at the pool's mean tokens per row, which only
    sizes the search's nearest lists (select_targeted cuts by tokens), and a budget larger than the data or
    smaller than its smallest row is refused here, before the target is embedded (`left_out`: _left_out's)."""
    import math

    from cluster_curate.budget_sequence import TOKEN_MODES, check_budget_buys_a_row, token_budget_for
    from cluster_curate.selection import fraction_budget
    if mode in TOKEN_MODES:
        total = int(tokens.sum())
        requested = token_budget_for(total, o["token_budget"], o["token_fraction"], counted_by, left_out)
        check_budget_buys_a_row(tokens, requested, mode, counted_by)
        return min(n, max(1, math.ceil(requested * n / max(total, 1))))
    return fraction_budget(n, o["fraction"]) if mode == "fraction" else int(o["budget"])


def target_summary(service: dict, path) -> dict:
    """The summary lines (and `report`'s) of how a targeted selection serves its target."""
    import numpy as np

    from cluster_curate.targeting import MIN_TARGET_HITS, pulled_clusters
    per = service["per_target"]
    counts = np.array([r["selected_nearest_to_it"] for r in per])
    weight = service["target_weight"]
    pulled = [r for r in service["clusters"] if pulled_clusters(r["target_rows"], weight)]
    shown = ", ".join(f"{r['cluster']} ({counted(r['target_rows'], 'target row')}, {r['selected']} selected)"
                      for r in pulled[:5])
    none = ("--target-weight 0: the balance over every cluster alone" if not weight else
            f"no cluster holds the nearest pool row of {MIN_TARGET_HITS} target rows or more: the budget went in "
            "relevance order")
    from cluster_curate.console import Shown, min_median_max
    return {
        "target": Shown({"path": None if path is None else str(path), "rows": service["target_rows"],
                         "served": service["served"], "far": service["far"]},
                        f"{path}: {counted(service['target_rows'], 'row')}, {service['served']} served, "
                        f"{service['far']} far from the pool"),
        "target_weight": Shown({"weight": service["target_weight"], "relevant_rows": service["relevant_rows"]},
                               f"{service['target_weight']} (relevant part: "
                               f"{counted(service['relevant_rows'], 'row')})"),
        "selected_nearest_each_target_row": min_median_max(
            counts, "selected rows nearest each target row min / median / max"),
        "clusters_the_target_pulled_from": Shown(
            [r["cluster"] for r in pulled],
            f"{len(pulled)}: {shown}" + (", ..." if len(pulled) > 5 else "") if pulled else f"0 ({none})"),
    }


def _left_out(x: dict) -> int:
    """The rows --decontaminate left out before the budget was counted (0 without it)."""
    return P.rows_left_out(x.get("decontaminated"))


def _params(o, mode, sel, c, x) -> dict:
    from cluster_curate.commands.embed_parts import LISTED_COPIES
    n, chosen = len(c.ids), len(sel.rows)
    return {
        "exact_duplicates": c.meta.params.get("exact_duplicates"),  # left out at embed
        **recorded(OPTIONS, o),
        "mode": mode, "value": o[mode.replace("-", "_")], "requested": sel.requested, "selected": chosen, "rows": n,
        "fraction_selected": chosen / n, "balance_power": o["balance_power"] if mode != "per-cluster-ratio" else None,
        "dedup_dropped": sel.dedup_dropped, "k": c.k,
        # which rows --dedup dropped (the first LISTED_COPIES, as embed lists exact duplicates): no selection holds them
        **({"dedup_ids": c.ids[sel.dedup_rows[:LISTED_COPIES]].tolist()} if o["dedup"] is not None else {}),
        "cluster_sizes": sel.sizes.tolist(), "quotas": sel.quotas.tolist(),
        "available_sizes": sel.available.tolist() if o["dedup"] is not None else None,
        "quotas_over_groups": c.groups is not None and mode != "per-cluster-ratio",
        "clusters_covered": int((sel.quotas > 0).sum()), "notes": sel.notes,
        **({"quotas_over_kinds": True} if c.kinds is not None and mode != "per-cluster-ratio" else {}),
        **({"decontaminated": x["decontaminated"]} if x.get("decontaminated") else {}),
    }


def _summary(o, mode, sel, c, x, out) -> dict:
    from cluster_curate.commands.embed import copies_line
    from cluster_curate.console import Shown, min_median_max
    n, chosen = len(c.ids), len(sel.rows)
    value = o[mode.replace("-", "_")]
    nonempty, covered = int((sel.sizes > 0).sum()), int((sel.quotas > 0).sum())
    q = sel.quotas[sel.sizes > 0]
    budget = {"mode": mode, "value": value, "rows": None if sel.requested is None else int(sel.requested)}
    summary = {
        "out": out, "rows": n, "clusters": c.k,
        "budget": Shown(budget, f"--{mode} {value}" + (f" = {counted(sel.requested, 'row')}" if mode == "fraction"
                                                          else "")),
        "selected": chosen, "kept": P.kept_line(chosen / n, x.get("decontaminated")),
        "exact_duplicates_left_out": copies_line((c.meta.params.get("exact_duplicates") or {}).get("dropped")),
        "clusters_covered": P.covered_line(covered, nonempty),
        "per_cluster_quota": min_median_max(q, "per-cluster quota min / median / max"),
        **P.within_lines(o["within"], x.get("auto")),
    }
    if mode == "per-cluster-ratio":
        summary["rule"] = P.ratio_rule(o["per_cluster_ratio"], sel.available, q, chosen / n, x.get("decontaminated"))
    else:
        summary["balance_power"] = o["balance_power"]
        if c.kinds is not None:
            summary["quotas"] = (f"over {counted(len(c.kinds.weight), 'kind')} of groups first (a kind of m "
                                 f"groups: m^{c.meta.params.get('kind_power')} of a group's share), then over the "
                                 f"{counted(max(c.groups) + 1, 'group')} inside each, then the clusters inside "
                                 "each")
        elif c.groups is not None:
            summary["quotas"] = (f"over {counted(max(c.groups) + 1, 'group')} of clusters first, then the "
                                 "clusters inside each")
    if o["dedup"] is not None:
        summary["near_duplicates_dropped"] = P.near_duplicates_line(sel.dedup_dropped, o["dedup"],
                                                                 c.ids[sel.dedup_rows[:5]].tolist())
    summary.update(P.decontaminated_lines(x.get("decontaminated")))
    has_tokens = bool(x["n_tokens"] is not None or x.get("counted_by"))
    summary["n_tokens_column"] = Shown(has_tokens, "yes" if has_tokens else
                                       f"no ({x['why_not'] or 'embeddings have no n_tokens'})", "n_tokens column")
    if not has_tokens:
        summary["n_tokens_why_not"] = Shown(x["why_not"] or "embeddings have no n_tokens", hidden=True)
    if sel.tokens_total is not None:
        from cluster_curate.budget_sequence import TOKEN_MODES
        if mode in TOKEN_MODES:
            budget["tokens"] = int(sel.tokens_requested)
            summary["budget"] = Shown(budget, f"--{mode} {value} = {sel.tokens_requested:,} tokens")
        summary["tokens_selected"] = Shown({"selected": int(sel.tokens_selected), "total": int(sel.tokens_total)},
                                           f"{sel.tokens_selected:,} of {sel.tokens_total:,} "
                                           f"({sel.tokens_selected / max(sel.tokens_total, 1):.1%})")
        summary["tokens_counted_by"] = x["counted_by"]
    sources = x.get("sources") or []
    if sources:
        summary["sources"] = Shown(sources, hidden=True)  # one line per input below
    # shares from the counts: the recorded ones are rounded to 4 decimals, and rounded again they could say 17.0%
    # of 10 rows in 59 (16.9%)
    rows_in, tokens_in = (max(1, sum(r.get(k) or 0 for r in sources)) for k in ("selected", "selected_tokens"))
    for row in sources:
        # the share of the budget where the floors and caps are shares of it, and it is not the selection's
        of_budget = row.get("share_of_budget")
        budget_unit = of_budget["unit"] if of_budget and of_budget["budget"] != (
            sel.tokens_selected if of_budget["unit"] == "tokens" else chosen) else None
        tok = (f", {row['selected_tokens']:,} tokens ({row['selected_tokens'] / tokens_in:.1%} of the selection"
               + (_budget_share(row, of_budget) if budget_unit == "tokens" else "") + ")"
               if "selected_tokens" in row else "")
        rows_share = (f"{row['selected'] / rows_in:.1%} of the selection"
                      + (_budget_share(row, of_budget) if budget_unit == "rows" else ""))
        bounds = f"; {P.bounds_text(row['bounds'])}" if row.get("bounds") else ""
        # the label given, not made from the key: the input's name as the user wrote it (no "_" -> " ")
        summary[f"source {row['source']}"] = Shown(None, f"{row['selected']:,} of {row['rows']:,} rows selected "
                                                         f"({rows_share}){tok}{bounds}",
                                                   label=f"source {row['source']}", in_json=False)
    summary.update(P.notes_lines(sel.notes))
    return summary


SCREEN_ROWS = 32  # the table on a screen: the smallest and largest 16 clusters (--json and the API: every one)


def render(result, options: dict) -> None:
    from cluster_curate import console
    from cluster_curate.selection import condensed
    summary, rows = result
    decontaminated = getattr(summary.get("decontaminated"), "value", None) or {}
    if left := decontaminated.get("rows_left_out"):  # where the other rows went
        n = summary["rows"]
        summary = {**summary, "rows": f"{n:,} ({n + left:,} clustered, {left:,} left out by --decontaminate)"}
    # a targeted selection's rows come most pulled first: its first ones; else the smallest and largest clusters
    rows = rows[:SCREEN_ROWS] if rows and "target_rows" in rows[0] else condensed(rows, SCREEN_ROWS)
    shown = [dict(r, kept=f"{r['kept']:.1%}" if isinstance(r["kept"], float) else "-" if r["kept"] is None
                  else r["kept"]) if "kept" in r else r for r in rows]
    console.summary(f"select → {summary['out']}", summary, shown)


def algorithm_version(o: dict) -> int:
    """The version a selection made with options `o` records: targeting's for a targeted one, else selection's."""
    if o.get("target") is not None:
        from cluster_curate.targeting import ALGORITHM_VERSION
        return ALGORITHM_VERSION
    from cluster_curate.selection import ALGORITHM_VERSION
    return ALGORITHM_VERSION


SPEC = CommandSpec(
    "select", select, (Argument("clusters"),), OPTIONS, render, table="per_cluster",
    algorithm=lambda: algorithm_version,
    help="""A balanced, budgeted subset of every cluster: --fraction F | --budget N | --per-cluster-ratio R.

    \b
    Quotas by water-filling: small clusters are taken whole, the rest of the budget is spread evenly.
    Writes `id`, `cluster`, `rank_in_cluster` (+ `n_tokens` when the embeddings are reachable).
    Examples:
      cluster-curate select clusters.parquet --out sel.parquet --fraction 0.31
      cluster-curate select clusters.parquet --out sel.parquet --per-cluster-ratio 0.5 --within far   # the paper
      cluster-curate select clusters.parquet --out sel.parquet --budget 20000 --dedup 0.95 --embeddings emb.parquet
      cluster-curate select clusters.parquet --out sel.parquet --fraction 0.1 --target my_task_examples.jsonl
      cluster-curate select clusters.parquet --out sel.parquet --fraction 0.31 --decontaminate eval_set.jsonl
    """)
