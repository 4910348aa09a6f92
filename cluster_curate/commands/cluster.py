"""`cluster E --out C`: spherical k-means (faiss) over an embeddings artifact; the centroids beside it."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from cluster_curate.errors import CurateError
from cluster_curate.io import names
from cluster_curate.options import (DATASET_OPTIONS, OUTPUT_OPTIONS, Argument, CommandSpec, CountOrWord, Option,
                                    float_range, int_range, lazy, recorded, resolve, seed_type)


OPTIONS = (
    Option("out", path=True, flags=("--out", "-o"), required=True, run=False,
           help="Clusters artifact to write (.parquet); the centroids go beside it (OUT.centroids.npy)."),
    Option("k", flags=("--k",), type=CountOrWord("clusters", ("auto",)), default="auto", show_default=True,
           help="Number of clusters, or auto: ceil(sqrt(n)) capped at n/2 (deliberately more clusters than "
                "natural groups, so rare groups get clusters of their own). The paper uses k = number of GPUs."),
    Option("iters", record=True, type=int_range(1), default=20, show_default=True, help="k-means iterations."),
    Option("seed", record=True, type=seed_type(), default=0, show_default=True,
           help="Seeds the training sample and the initial centroids."),
    Option("center", is_flag=True, default=False,
           help="Subtract the mean feature before L2-normalising (default: L2 only)."),
    Option("max_size_factor", record=True, type=float_range(1.0), shown_default="no cap",
           help="Soft cap: no cluster above ceil(A·n/k) rows; rows over it move to the nearest of their 8 "
                "closest centroids with room (the paper uses 1.5)."),
    Option("sample_size", type=int_range(1), shown_default="min(n, max(128·k, 2^24/k))",
           help="Rows k-means trains on before every row is assigned."),
    Option("gpus", type=int_range(0),
           help="GPUs for faiss: all it sees by default, 0 = CPU (choose devices with CUDA_VISIBLE_DEVICES)."),
    Option("batch_rows", type=int_range(1), default=65536, show_default=True,
           help="Rows per assignment batch (memory: the feature matrix plus one batch)."),
    Option("groups", type=CountOrWord("groups", ("auto", "none")), default="auto", show_default=True,
           help="Group the k clusters into coarse groups (average linkage of the centroids); `select` then "
                "water-fills the budget over groups first, then over the clusters inside each, so the many "
                "clusters of one dominant kind share one quota. auto: cut where --group-cut says; G: cut "
                "into G groups; none: flat quotas over clusters."),
    Option("group_cut", default="row", choices=lazy("cluster_curate.cluster_groups", "GROUP_CUTS"), show_default=True,
           help="Where --groups auto cuts: row: clusters whose centroids are as similar as a row is to its own "
                "centroid share a group; pair: as similar as two rows of one cluster are (fewer, larger groups; "
                "on real data it can join a rare kind into a dominant one)."),
    Option("split_mixed", negatable=True, shown_default="with --k auto; a given --k is kept",
           help="After k-means, cut in two every cluster whose 2-means halves are less similar than two rows of "
                "one cluster typically are, again inside each half (halves of at least 16 rows): two rare kinds "
                "that k-means put in one cluster get a quota each."),
    Option("kinds", default="auto", choices=("auto", "answers", "none"), show_default=True,
           help="answers: join groups whose clusters give the same answer to the same input (two wordings of one "
                "request) into one kind, which `select` gives m^0.5 of a group's share for its m groups. It reads "
                "the rows' prompts and responses: --data, else the dataset the embeddings record (unchanged). "
                "Rows whose answers are all different join nothing, and the selection is the groups'. none: "
                "every group is a kind of its own. auto: answers where there are groups and that data can be "
                "read, else none (the summary says why)."),
    Option("data", path=True, run=False, multiple=True,
           help="The raw dataset that was embedded (a mixture: each input, in the order embedded, or its mixture "
                "file), for --kinds answers; default: the one the embeddings record. `run` passes its own."),
    *(replace(o, run=False) for o in DATASET_OPTIONS),  # `run` reads the data with embed's
    *OUTPUT_OPTIONS,
)


def _choose_k(o: dict, n: int, embeddings: str):
    from cluster_curate import clustering as C
    k = o["k"]
    if k in (None, "auto"):
        return C.auto_k(n), f"auto: {C.AUTO_K_RULE}"
    k = int(k)
    if k < 1:
        raise CurateError(f"--k must be >= 1 or 'auto', got {k}")
    if k > n:
        raise CurateError(f"{embeddings}: --k {k:,} is larger than the number of rows ({n:,})")
    return k, "given"


def _groups(o: dict, res):
    from cluster_curate import cluster_groups as G
    groups = o["groups"]
    if groups == "auto":
        cut = G.group_cut_similarity(res, o["group_cut"])
        return G.group_clusters(res.centroids, min_similarity=cut), \
            f"auto ({o['group_cut']}): {G.GROUP_CUTS[o['group_cut']]} = {cut:.4f}"
    if groups in (None, "none"):
        return None, None
    return G.group_clusters(res.centroids, n_groups=int(groups)), "given"


def check_kinds(o: dict) -> None:
    """--kinds answers needs groups to join (also `run`'s check, before its first stage)."""
    if o.get("kinds") == "answers" and o.get("groups") in (None, "none"):
        raise CurateError(f"--kinds {o['kinds']} joins groups of clusters: not with --groups none")


def check_groups(o: dict, rows: int | None = None) -> None:
    """--groups G within the clusters there can be (`run`'s check, before embed; cluster_groups makes the same one
    after k-means): a given --k that no split grows, else the most the split of mixed clusters can make of the
    given or auto k on `rows` rows (each cut leaves SPLIT_MIN_ROWS rows or more on either side)."""
    from cluster_curate.cluster_groups import SPLIT_MIN_ROWS, check_group_count
    from cluster_curate.clustering import auto_k
    groups, k = o.get("groups"), o.get("k")
    if groups in (None, "auto", "none"):
        return
    split = k in (None, "auto") if o.get("split_mixed") is None else o.get("split_mixed")
    if k not in (None, "auto") and not split:
        return check_group_count(int(groups), int(k))
    if not rows:
        return
    k, what = (auto_k(rows), f"k = auto ({auto_k(rows)} for {rows:,} rows)") if k in (None, "auto") else \
        (int(k), f"k = {k}")
    most = min(rows, k + rows // SPLIT_MIN_ROWS)
    if not 1 <= int(groups) <= most:
        raise CurateError(f"--groups {groups} must be between 1 and {most}, the most clusters the split of mixed "
                          f"clusters can make of {what}")


def _read_answers(o: dict, embeddings: str) -> tuple[tuple | None, str | None]:
    """For kinds: ((ids, answer keys, response word counts, a function that reads the prompts, the data's source) of
    the raw data's rows (--data, else the dataset the embeddings record), None), read and checked against the
    embeddings' dataset before any k-means; (None, why) when there are no kinds. Holds a few bytes a row, not the
    texts: the prompts are read again only when two clusters answer alike (answer_kinds.answer_agreement). The keys
    and counts are the embeddings' own where embed kept them (_stored_answers): the data is opened and checked, not
    read."""
    if o["kinds"] == "none":
        return None, "--kinds none"
    if o["kinds"] == "auto" and o["groups"] in (None, "none"):
        return None, "auto: no groups to join (--groups none)"
    check_kinds(o)
    import numpy as np

    from cluster_curate import answer_kinds as AK
    from cluster_curate.commands.common import NoDatasetRecorded, open_recorded_data
    from cluster_curate.io.readers import read_checked_meta
    # as k-means reads it: its errors
    emeta = read_checked_meta(embeddings, None if o["force"] else names.EMBEDDINGS, o["force"])
    ids, keys, words = [], [], []
    try:
        ds = open_recorded_data(o, embeddings, emeta.dataset)
        if ds is None:
            raise NoDatasetRecorded(f"{embeddings}: records no dataset")
        stored = _stored_answers(o, embeddings, emeta, ds)
        if stored is not None:
            return stored, None
        from cluster_curate import console
        with console.progress("kinds: read the answers", total=ds.rows, quiet_when_short=True) as bar:
            for batch in ds.iter_batches():
                for ex in batch.examples:
                    ids.append(ex.id)
                    keys.append(AK.answer_key(ex.response))
                    words.append(len(ex.response.split()))
                bar.advance(batch.num_rows)
    except (CurateError, OSError) as e:
        if o["kinds"] == "auto" and not o["data"]:  # a --data given is read or refused, never passed over
            why = f"auto: the answers were not read ({e})" + ("" if "pass --data" in str(e) else
                                                              "; pass --data DATA for kinds")
            if not isinstance(e, NoDatasetRecorded):  # recorded, but gone or changed: say so
                from cluster_curate import console
                console.warn(f"{embeddings}: {why}")
            return None, why
        hint = (f"--kinds {o['kinds']} reads the rows' prompts and responses from --data DATA, else from the dataset "
                f"{embeddings} was embedded from; --kinds none reads no data")
        raise (e if isinstance(e, CurateError) else CurateError(str(e))).hinted(hint) from None

    def prompts() -> list[str]:
        return [text for _, text in _read_prompts(ds)]
    return (np.asarray(ids, dtype=np.int64), np.asarray(keys, dtype=np.int64), np.asarray(words, dtype=np.int64),
            prompts, ds.source), None


def _stored_answers(o: dict, embeddings: str, emeta, ds) -> tuple | None:
    """(ids, answer keys, response word counts, a function that reads the prompts) of the embedded rows, from the
    columns embed keeps for them (features/embed.ANSWER_COLUMNS): what a pass over the data `ds` would give for
    those rows, without the pass; the prompts are read from `ds` only when two clusters answer alike. None where
    the data must be read instead: an artifact written before those columns, or data read otherwise than embed
    read it (common.reads_as_recorded: --data, --force, other reading options)."""
    from cluster_curate.commands.common import reads_as_recorded
    from cluster_curate.features.embed import ANSWER_COLUMNS
    from cluster_curate.io.artifacts import artifact_schema
    if not reads_as_recorded(o, emeta.dataset) or not set(ANSWER_COLUMNS) <= set(artifact_schema(embeddings).names):
        return None
    import numpy as np

    from cluster_curate.io.readers import read_columns
    try:
        table = read_columns(embeddings, ["id", *ANSWER_COLUMNS])
    except CurateError:  # a part without them (written by an older version beside newer ones): read the data
        return None
    ids = table.column("id").to_numpy().astype(np.int64, copy=False)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    keys, words = (table.column(c).to_numpy().astype(np.int64, copy=False)[order] for c in ANSWER_COLUMNS)

    def prompts() -> list[str]:  # the embedded rows' prompts, in `ids` order
        read = _read_prompts(ds)
        data_ids = np.asarray([i for i, _ in read], dtype=np.int64)
        return [read[i][1] for i in _embedded_rows(ds.source, data_ids, ids)]
    return ids, keys, words, prompts, ds.source


def _read_prompts(ds) -> list[tuple[int, str]]:
    """(id, prompt text) of every row of `ds`, read with a progress bar; said before what they are read for."""
    from cluster_curate import console
    from cluster_curate.features.text import example_text
    read = []
    with console.progress("kinds: read the prompts", total=ds.rows, quiet_when_short=True) as bar:
        for batch in ds.iter_batches():
            read += [(ex.id, example_text(ex, "prompt")) for ex in batch.examples]
            bar.advance(batch.num_rows)
    console.info("kinds: comparing the prompts' words in the clusters that give the same answers")
    return read


def _embedded_rows(source: str, data_ids, ids):
    """Where each of the embedded `ids` (sorted) is among the `data_ids` read from `source`, in reading order."""
    import numpy as np

    from cluster_curate.io.readers import align
    by_id = np.argsort(data_ids, kind="stable")
    pos = align(data_ids[by_id], ids, lambda i: f"{source}: has no row with id {int(i)}, which was embedded; pass "
                "the dataset that was embedded (and its reading options)")
    return by_id if pos is None else by_id[pos]


def _kinds(answers: tuple | None, ids, res, group_of) -> tuple:
    """(kind of each group, each kind's weight, the short answers' record) when there are kinds, else Nones.
    The record is what `select --within auto` decides from (within_orders.auto_order), so that it need not read
    the data again where no short answer repeats."""
    if answers is None:
        return None, None, None
    from cluster_curate import answer_kinds as AK
    from cluster_curate.within_orders import SHORT_ANSWER_WORDS, auto_order
    data_ids, keys, words, read_prompts, source = answers
    at = _embedded_rows(source, data_ids, ids)  # the data's rows of the embedded ids

    def prompts() -> list[str]:
        everything = read_prompts()
        return [everything[i] for i in at]
    from cluster_curate import console
    console.info(f"kinds: comparing the answers of the {res.k:,} clusters")
    kind_of_group = AK.answer_kinds(group_of, AK.answer_agreement(prompts, keys[at], res.labels, res.k))
    order, _, short = auto_order(keys[at], words[at])
    record = {"rows": short, "max_words": SHORT_ANSWER_WORDS, "repeat": order == "answers"}
    return kind_of_group, AK.kind_weights(kind_of_group), record


def _kmeans(o: dict, embeddings: str, ngpu: int):
    """Read the features, run k-means on `ngpu` GPUs (+ the split of mixed clusters); returns what the artifact
    needs."""
    from cluster_curate import cluster_groups as G
    from cluster_curate import clustering as C
    from cluster_curate import console
    from cluster_curate.io.readers import read_embeddings
    ids, x, emeta = read_embeddings(embeddings, force=o["force"], batch_rows=o["batch_rows"],
                                    completeness_checked=True)  # by cluster() before any work
    n, d = x.shape
    split_mixed = o["k"] in (None, "auto") if o["split_mixed"] is None else o["split_mixed"]
    k, k_rule = _choose_k(o, n, embeddings)
    norm = C.normalise_features(x, center=o["center"], chunk_rows=o["batch_rows"])
    if norm["zero_rows"]:
        console.warn(f"{embeddings}: {norm['zero_rows']} rows have an all-zero embedding (similarity 0 to every "
                     "centroid)")
    shared = C.mean_resultant_length(x, chunk_rows=o["batch_rows"])
    if shared > 0.9 and not o["center"]:
        console.warn(f"{embeddings}: the features share one dominant direction (length of the mean unit vector "
                     f"{shared:.3f}; cosine similarities are all near 1): consider --center")
    size, sample_rule = _sample_size(o, n, k)
    device = f"{ngpu} GPU(s)" if ngpu else "cpu"
    console.info(f"k-means: {n:,} rows x {d} dims, k = {k}, training on {size:,} rows, {o['iters']} iterations, "
                 f"{device}")
    res = C.cluster_features(x, k, iters=o["iters"], seed=o["seed"], sample_size=size, gpus=ngpu,
                             max_size_factor=o["max_size_factor"], batch_rows=o["batch_rows"],
                             progress=partial(console.progress, quiet_when_short=True))
    split = None
    if split_mixed:
        console.info(f"k-means: cutting mixed clusters (2-means inside each of the {k:,})")
        cut = G.group_cut_similarity(res, "pair")
        res, cuts = G.split_mixed_clusters(x, res, cut)
        split = {"rule": f"{G.SPLIT_RULE} = {cut:.4f}", "min_similarity": cut, "min_rows": G.SPLIT_MIN_ROWS,
                 "k_means": k, "cuts": cuts}
    return dict(ids=ids, emeta=emeta, n=n, d=d, k=k, k_rule=k_rule, norm=norm, shared=shared, device=device,
                res=res, split=split, sample_rule=sample_rule)


def _sample_size(o: dict, n: int, k: int) -> tuple[int, str]:
    """The rows k-means trains on, and the rule that chose them (the params' sample_rule). A --sample-size below k
    is raised to k, one row per centroid at least: said, else the summary's "trained on k rows" surprises."""
    from cluster_curate import console
    from cluster_curate import kmeans as K
    given = o["sample_size"]
    if given is None:
        return K.training_sample_size(n, k), K.SAMPLE_RULE
    if given < k:
        console.warn(f"--sample-size {given} is below k = {k}: k-means trains on at least one row per centroid, "
                     f"so on {k:,} rows")
        return k, f"given (--sample-size {given}), raised to k = {k}"
    return min(given, n), "given (--sample-size)"


def _params(o: dict, r: dict, group_of, groups_rule, kinds: tuple, centroid_bytes: bytes) -> dict:
    import hashlib

    from cluster_curate import answer_kinds as AK
    from cluster_curate import clustering as C
    res = r["res"]
    return {
        **recorded(OPTIONS, o),
        "exact_duplicates": r["emeta"].params.get("exact_duplicates"),  # left out at embed; carried to the manifest
        "k": res.k, "k_rule": r["k_rule"], "split_mixed": r["split"],
        "normalisation": r["norm"]["normalisation"], "spherical": True, "dim": r["d"], "sample_size": res.sample_size,
        "sample_rule": r["sample_rule"],
        "max_cluster_size": res.cap, "moved": res.moved,
        "cap_candidates": C.CAP_CANDIDATES if o["max_size_factor"] is not None else None,
        "objective": res.objective, "objective_before_cap": res.objective_uncapped,
        "objective_kind": "mean cosine similarity to the assigned centroid (higher is better)",
        "train_objective": res.train_objective, "device": r["device"], "zero_rows": r["norm"]["zero_rows"],
        "mean_resultant_length": round(r["shared"], 6),
        "sizes": res.sizes.tolist(),
        "groups": None if group_of is None else group_of.tolist(), "groups_rule": groups_rule,
        # recorded only when asked for, so that artifacts made without it keep their fingerprints
        **({} if kinds[0] is None else {"kinds": "answers", "kind_of_group": kinds[0].tolist(),
                                        "kind_weights": kinds[1].tolist(), "kind_power": AK.KIND_POWER,
                                        "kinds_rule": AK.KINDS_RULE, "short_answers": kinds[2]}),
        # the file is sidecar_path(artifact, CENTROIDS); its name is not recorded so that the same inputs give
        # the same metadata whatever the output is called
        "centroids": {"sidecar": names.CENTROIDS, "shape": list(res.centroids.shape), "dtype": "float32",
                      "blake2b": hashlib.blake2b(centroid_bytes, digest_size=12).hexdigest()},
    }


def cluster(embeddings: str, out: str, **options) -> tuple[dict, list[dict]]:
    """Read an embeddings artifact, k-means it, write the clusters artifact (+ centroids beside it).
    Returns the summary dict and the size-band table."""
    import pyarrow as pa

    from cluster_curate.io.artifacts import check_writable, make_meta, output_inputs, sidecar_path
    from cluster_curate.io.writer import atomic_write_bytes, npy_bytes, write_artifact

    t0 = time.perf_counter()
    o = resolve(OPTIONS, dict(options, out=out), "cluster")
    check_writable(out, o["overwrite"], inputs=output_inputs(embeddings, o["data"]), kind=names.CLUSTERS)
    if o["iters"] < 1:
        raise CurateError(f"--iters must be >= 1, got {o['iters']}")
    if o["seed"] < 0:
        raise CurateError(f"--seed must be >= 0, got {o['seed']}")
    from cluster_curate.io.readers import check_embeddings_complete
    check_embeddings_complete(embeddings, o["force"])  # job-array parts missing: refused before the data is read
    from cluster_curate.kmeans import resolve_gpus
    ngpu = resolve_gpus(o["gpus"])  # faiss missing or broken: said before the data is read
    answers, no_kinds = _read_answers(o, embeddings)
    r = _kmeans(o, embeddings, ngpu)
    res = r["res"]
    group_of, groups_rule = _groups(o, res)
    kinds = _kinds(answers, r["ids"], res, group_of)
    del answers
    centroid_bytes = npy_bytes(res.centroids)
    centroids_file = sidecar_path(out, names.CENTROIDS)
    params = _params(o, r, group_of, groups_rule, kinds, centroid_bytes)
    from cluster_curate.clustering import ALGORITHM_VERSION
    meta = make_meta(names.CLUSTERS, params, {"embeddings": r["emeta"].as_input(embeddings, out)}, r["emeta"].dataset,
                     ALGORITHM_VERSION)
    table = pa.table({"id": pa.array(r["ids"], pa.int64()), "cluster": pa.array(res.labels, pa.int32()),
                      "similarity": pa.array(res.similarity, pa.float32())})
    # the centroids first: an artifact never exists without them. A kill between the two renames leaves an artifact
    # in place (--overwrite) with others, whose bytes it does not record: readers.sidecars_unlike_record tells
    atomic_write_bytes(centroids_file, centroid_bytes)
    from cluster_curate.io.mixture import with_source_columns
    write_artifact(with_source_columns(table, r["emeta"].dataset), out, meta, overwrite=o["overwrite"])
    return _summary(o, r, group_of, groups_rule, kinds[0], no_kinds, out, centroids_file, t0)


def _summary(o, r, group_of, groups_rule, kind_of_group, no_kinds, out, centroids_file, t0):
    import math

    import numpy as np

    from cluster_curate import answer_kinds as AK
    from cluster_curate import clustering as C
    from cluster_curate import console
    res, n, k, split = r["res"], r["n"], r["k"], r["split"]
    stats = C.size_stats(res.sizes)
    Shown = console.Shown
    summary = {
        "out": out, "rows": n, "dim": r["d"], "k": res.k,
        "k_rule": f"auto = ceil(sqrt({n}))" + (f", capped at {k}" if k < math.ceil(math.sqrt(n)) else "")
                  if r["k_rule"] != "given" else "given (--k)",
        "mixed_clusters_cut": Shown(split["cuts"] if split else 0,
                                    (f"{split['cuts']} (k-means k = {k}; halves less similar than "
                                     f"{split['min_similarity']:.4f})") if split else
                                    "no (--no-split-mixed)" if r["k_rule"] != "given" else "no (a given --k is kept)"),
        "normalisation": r["norm"]["normalisation"],
        "trained_on_rows": Shown(int(res.sample_size), f"{console.counted(res.sample_size, 'row')} "
                                 f"({'all' if res.sample_size == n else f'{res.sample_size / n:.1%}'})", "trained on"),
        "iterations": o["iters"], "seed": o["seed"], "device": r["device"],
        "objective": Shown(round(res.objective, 5), label="objective (mean cosine)"),
        "cluster_size": console.min_median_max(res.sizes, "cluster size min / median / max"),
        "max_over_min_size": Shown(round(stats["max_over_min"], 2), label=C.SIZE_RATIO_LABEL),
        "empty_clusters": stats["empty"],
    }
    if group_of is not None:
        group_sizes = np.bincount(group_of, weights=res.sizes).astype(int)
        per_group = console.min_median_max(group_sizes, "rows per group min / median / max")
        holding = C.groups_holding_rows(group_of, res.sizes)  # groups of empty clusters alone hold none
        summary["groups"] = Shown(len(group_sizes), f"{console.counted(len(group_sizes), 'group')} of clusters"
                                  + (f", {holding} holding rows" if holding < len(group_sizes) else "")
                                  + f" (average linkage of the centroids; {groups_rule}), {per_group.label} "
                                  f"{per_group.text}")
        summary["groups_rule"] = Shown(groups_rule, hidden=True)  # in the groups line above
        summary["rows_per_group"] = Shown(per_group.value, hidden=True)
    if kind_of_group is not None:
        n_kinds = int(kind_of_group.max()) + 1
        summary["kinds"] = Shown(n_kinds, f"{console.counted(n_kinds, 'kind')} of groups ({AK.KINDS_RULE}); "
                               f"{console.counted(len(kind_of_group) - n_kinds, 'group')} joined into another's kind")
        summary["groups_joined"] = Shown(len(kind_of_group) - n_kinds, hidden=True)
    else:
        summary["kinds_why_not"] = Shown(no_kinds, f"none: every group is a kind of its own ({no_kinds})", "kinds")
    if res.cap is not None:
        summary["size_cap"] = Shown(int(res.cap),
                                    f"{console.counted(res.cap, 'row')} (--max-size-factor {o['max_size_factor']})")
        summary["moved_by_the_cap"] = res.moved
        summary["objective_before_the_cap"] = round(res.objective_uncapped, 5)
    summary["centroids"] = str(centroids_file)
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    mean = n / res.k
    rows = []
    for (label, count), (lo, hi) in zip(stats["histogram"].items(), C.SIZE_BINS):
        in_band = (res.sizes >= lo * mean) & (res.sizes < hi * mean)
        rows.append({"size_band": label, "clusters": count, "rows": int(res.sizes[in_band].sum())})
    warning = C.uneven_sizes_warning(res.sizes, k_given=r["k_rule"] == "given", grouped=group_of is not None)
    if warning:
        console.warn(warning)
    return summary, rows


def render(result, options: dict) -> None:
    from cluster_curate import console
    summary, rows = result
    console.summary(f"cluster → {summary['out']}", summary, rows)


SPEC = CommandSpec(
    "cluster", cluster, (Argument("embeddings"),), OPTIONS, render, table="size_bands",
    algorithm=lazy("cluster_curate.clustering", "ALGORITHM_VERSION"),
    help="""k-means (faiss, spherical: cosine on L2-normalised features) over an embeddings artifact.

    \b
    Writes `id`, `cluster`, `similarity` (cosine to its centroid) and OUT.centroids.npy.
    Examples:
      cluster-curate cluster emb.parquet --out clusters.parquet
      cluster-curate cluster emb.parquet --out clusters.parquet --k 4 --max-size-factor 1.5 --groups none  # paper
      cluster-curate cluster emb.parquet --out clusters.parquet --kinds none  # no kinds: reads no data
    """)
