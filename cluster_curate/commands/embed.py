"""`embed DATA --out E`: one feature row per parsed example into the embeddings artifact (a file; a directory
of parts when several processes share the run: cluster_curate/distributed.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from cluster_curate.errors import CurateError, counted
from cluster_curate.options import (DATASET_OPTIONS, OUTPUT_OPTIONS, Argument, CommandSpec, Option, lazy,
                                    read_options, resolve, seed_type)


_FEATURES = "cluster_curate.features.embed"


def _proxy_default(name: str):
    """The default of a --proxy-* option: features.proxy.ProxyOptions' field."""
    return lazy("cluster_curate.features.proxy", f"ProxyOptions.{name}")


def _features_help() -> str:
    from cluster_curate.features.embed import FEATURE_KINDS
    return ("A feature kind, or a comma list of them (concatenated L2-normalised blocks): "
            + FEATURE_KINDS.help_text() + ".")


OPTIONS = (
    Option("out", path=True, flags=("--out", "-o"), required=True, run=False,
           help="Embeddings artifact to write (a .parquet file; a directory of parts when run under torchrun or "
                "with --num-parts)."),
    Option("model", path=True, default="proxy", show_default=True,
           help="proxy (built in: trained briefly on the data, no download), a saved proxy (OUT.proxy), a local "
                "model directory, a .gguf file, or a Hugging Face id (from the local cache when offline)."),
    Option("features", help=_features_help,
           shown_default="text, chosen by the evidence benchmark; gradient is the paper's"),
    Option("encoder", path=True, shown_default="all-MiniLM-L6-v2 (bundled in the semantic extra, no download)",
           help="semantic: an encoder directory (transformers or sentence-transformers), a Hugging Face id (from "
                "the local cache when offline), or all-MiniLM-L6-v2."),
    Option("feature_weights", help="Comma list, one weight per feature block (default: 1 each)."),
    Option("dim", record=True, type=int,
           help="Output dimension per block: random projection for gradient/hidden (default: "
           "hidden size), lora-gradient (default 8192), SVD width for text (default 256)."),
    Option("pool", record=True, default="all", choices=("all", "response"), show_default=True,
           help="hidden: mean over all tokens, or over the positions that predict response tokens."),
    Option("layers", record=True, help="lora-gradient: comma list of linear-layer name patterns (default: all)."),
    Option("checkpoints", help="loss-trajectory: comma list of proxy warm-up steps or model paths/ids, which are fed "
           "--model's token ids, so share its tokenizer (default: the proxy's own warm-up checkpoints)."),
    Option("text_field", record=True, default="prompt", choices=lazy("cluster_curate.features.text", "TEXT_FIELDS"),
           show_default=True,
           help="text, semantic: which text the feature looks at."),
    Option("text_weighting", default="slot", choices=lazy("cluster_curate.features.text", "TEXT_WEIGHTINGS"),
           show_default=True,  # = features.text.DEFAULT_TEXT_WEIGHTING
           help="text: slot weighs a word by its (sublinear) count and by how few words stand in its place "
                "across the data, so a template's slot fillers (topic nouns, names) weigh less than the words "
                "that tell two requests apart, and keeps the numbers a request is worded with ('take 10') while "
                "masking operands; tf weighs words by their count alone; tfidf weighs rare words (topics, "
                "names) most."),
    Option("text_sample", type=int, default=20000, show_default=True,
           help="text: rows (seeded sample) the vocabulary, word weights and SVD are fitted on."),
    Option("max_length", record=True, type=int, shown_default=lazy(_FEATURES, "DEFAULT_MAX_LENGTH"),
           help="Tokens per example; the prompt is truncated from the left first. semantic: lowers the "
                "encoder's own limit (cut on its tokenizer's truncation side)."),
    Option("batch_tokens", type=int, shown_default=lazy(_FEATURES, "DEFAULT_BATCH_TOKENS"),
           help="Padded tokens per batch (length-sorted buckets); does not change the features."),
    Option("device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N."),
    Option("dtype", default="auto", show_default=True,
           help="auto (bfloat16 on GPU, float32 on CPU) | float32 | bfloat16 | float16."),
    Option("trust_remote_code", is_flag=True, default=False,
           help="Allow model code from the model's repository (off by default)."),
    Option("seed", record=True, type=seed_type(), default=0, show_default=True,
           help="Seeds the proxy, samples and projections."),
    Option("keep_duplicates", is_flag=True, default=False,
           help="Keep exact duplicates (same normalised prompt and response). By default only the lowest id of "
           "each is embedded, so they cannot both be selected; the others are counted and listed."),
    Option("like", path=True, metavar="POOL_EMBEDDINGS", run=False,
           help="Embed DATA in the feature space of this embeddings artifact (its features, model or proxy, "
                "projection seeds, text basis), e.g. a few examples of the target task for `select --target`; "
                "refused when that space cannot be reproduced."),
    Option("num_parts", type=int, default=1, show_default=True, run=False, deprecated=(("--num-shards",),),
           help="Job-array pieces: this run is piece --part-index of K, writing its part into --out."),
    Option("part_index", type=int, default=0, show_default=True, run=False, deprecated=(("--shard-index",),),
           help="Job-array pieces: which piece this run is, 0 to --num-parts - 1 (e.g. $SLURM_ARRAY_TASK_ID)."),
    Option("commit_every", type=int, shown_default=lazy("cluster_curate.distributed", "DEFAULT_COMMIT_EVERY"),
           help="Rows per committed chunk (what --resume keeps after a crash)."),
    Option("resume", is_flag=True, default=False, run=False,
           help="Continue an interrupted run (same command) from its committed chunks."),
    Option("proxy_size", choices=lazy("cluster_curate.features.proxy", "SIZES"),
           shown_default=_proxy_default("size"),
           help="Proxy width/depth: tiny 2x64, small 3x128, base 4x256 (layers x width)."),
    Option("proxy_sample", type=float, shown_default=_proxy_default("sample"),
           help="Fraction of rows the proxy warms up on (at least 128, at most 20000 rows)."),
    Option("proxy_epochs", type=float, shown_default=_proxy_default("epochs"), help="Passes over the warm-up sample."),
    Option("proxy_steps", type=int, help="Exact warm-up steps (overrides --proxy-epochs)."),
    Option("proxy_tokenizer", choices=("bpe", "word"), shown_default=_proxy_default("tokenizer"),
           help="Tokenizer trained on the sample: byte-level BPE or words."),
    Option("proxy_vocab", type=int, shown_default=_proxy_default("vocab_size"), help="Proxy tokenizer vocabulary size."),
    Option("proxy_checkpoints", type=int, shown_default=_proxy_default("checkpoints"),
           help="Warm-up checkpoints kept (loss-trajectory uses them)."),
    Option("proxy_budget", type=float, shown_default=_proxy_default("budget"),
           help="Cap on the warm-up's cost as a share of the feature pass (caps the steps on small data; "
                "--proxy-steps is not capped)."),
    *DATASET_OPTIONS,
    *OUTPUT_OPTIONS,
)
# --proxy-* option -> features.proxy.ProxyOptions field
_PROXY_FIELDS = {"proxy_size": "size", "proxy_sample": "sample", "proxy_epochs": "epochs", "proxy_steps": "steps",
                 "proxy_tokenizer": "tokenizer", "proxy_vocab": "vocab_size", "proxy_checkpoints": "checkpoints",
                 "proxy_budget": "budget"}


@dataclass
class _Run:
    """What the phases of one embed run share."""
    data: str
    out: str
    opts: dict
    layout: object
    device: object
    ds: object = None
    parsed: int = 0
    total_rows: int = 0
    per_chunk: object = None
    record: dict = field(default_factory=dict)
    features: list = field(default_factory=list)
    copies: object = ()  # ids of the exact duplicates left out (np.ndarray after the scan)
    same_answer: object = ()  # ids of the embedded preference pairs whose two answers are the same (np.ndarray)
    scan_s: float = 0.0
    like: tuple | None = None  # --like: (the pool's path, its meta)


def stage_defaults() -> dict:
    """The options embed takes at a default of its own when they are not given (None): settle_options fills them,
    and `run` reads a run made with them given at that value as the same run."""
    from cluster_curate.distributed import DEFAULT_COMMIT_EVERY
    from cluster_curate.features.embed import DEFAULT_BATCH_TOKENS, DEFAULT_FEATURES, DEFAULT_MAX_LENGTH
    return {"features": DEFAULT_FEATURES, "max_length": DEFAULT_MAX_LENGTH, "batch_tokens": DEFAULT_BATCH_TOKENS,
            "commit_every": DEFAULT_COMMIT_EVERY}


def settle_options(opts: dict) -> list[str]:
    """Fill the defaults that live in the stages, build the proxy options, validate (here and in run's
    preflight); returns the features."""
    from cluster_curate.features import proxy as P
    given = {name for name in stage_defaults() if opts[name] is not None}
    for name, default in stage_defaults().items():
        if opts[name] is None:
            opts[name] = default
    proxy = P.ProxyOptions()
    for name, attr in _PROXY_FIELDS.items():
        if opts[name] is not None:
            setattr(proxy, attr, opts[name])
    proxy.seed, proxy.max_length = opts["seed"], opts["max_length"]
    opts["proxy"] = proxy
    return _validate(opts, given)


def _validate(o: dict, given: set) -> list[str]:
    """The options checked before any reading; `given`: those of stage_defaults() the user gave."""
    from pathlib import Path

    from cluster_curate.features.embed import FEATURE_KINDS, MODEL_FEATURES, parse_features, parse_weights
    features = parse_features(o["features"])
    for name, low, what in (("dim", 1, "positive"), ("max_length", 2, "at least 2"),
                            ("batch_tokens", 1, "positive"), ("text_sample", 2, "at least 2"),
                            ("commit_every", 1, "at least 1")):
        if o.get(name) is not None and o[name] < low:
            raise CurateError(f"--{name.replace('_', '-')} must be {what}, got {o[name]}")
    parse_weights(o["feature_weights"], len(features))  # one per feature: before the text basis is fitted
    if o["checkpoints"] and "loss-trajectory" not in features:
        raise CurateError("--checkpoints is only used by --features loss-trajectory")
    if o["layers"] and "lora-gradient" not in features:  # else silently ignored
        raise CurateError("--layers is only used by --features lora-gradient")
    if o["dtype"] not in (None, "auto"):  # the proxy never resolved it: --dtype fp8 went unnoticed
        from cluster_curate.features.models import resolve_dtype
        resolve_dtype(o["dtype"], None)
    from cluster_curate.features.semantic import DEFAULT_ENCODER, bundled_key
    # at its default it changes nothing, as a Makefile may give it (README, `run`: the same run)
    if o["encoder"] is not None and bundled_key(o["encoder"]) != DEFAULT_ENCODER and "semantic" not in features:
        raise CurateError(f"--encoder {o['encoder']} is only used by --features semantic")
    if "semantic" in features:  # fail before reading the data: a missing package, directory or weights
        from cluster_curate.features.models import check_local_model
        from cluster_curate.features.semantic import check_encoder_spec
        check_encoder_spec(o["encoder"])
        if bundled_key(o["encoder"]) is None:
            check_local_model(o["encoder"], f"--encoder {o['encoder']}", o["trust_remote_code"])
    if not o.get("like"):  # --like takes the pool's dim and pool (a user's other value is refused there)
        _check_read_by_features(o, features)
    uses_model = any(f in MODEL_FEATURES for f in features)
    if o["model"] != "proxy" and not uses_model:
        raise CurateError(f"--model {o['model']} is not used by --features {','.join(features)} (no model); "
                          "add a model feature, e.g. --features text,gradient")
    encoder = any(getattr(FEATURE_KINDS.get(f), "encoder", False) for f in features)
    if not uses_model and not encoder:  # else silently ignored: text runs no model or encoder
        from cluster_curate.features.embed import DEFAULT_MAX_LENGTH
        unread = {"device": o["device"] not in (None, "auto"), "dtype": o["dtype"] not in (None, "auto"),
                  # at its default, as a Makefile may give it; --like sets the pool's, read or not
                  "max_length": "max_length" in given and o["max_length"] != DEFAULT_MAX_LENGTH and not o.get("like")}
        name = next((name for name, given_here in unread.items() if given_here), None)
        if name:
            raise CurateError(f"--{name.replace('_', '-')} {o[name]} is not used by --features {','.join(features)} "
                              "(no model or encoder runs); leave it out, or add a model feature, e.g. --features "
                              "text,gradient")
    if not o.get("like"):  # --like sets the pool's model
        _check_proxy_options(o, features, uses_model)
    if uses_model and not encoder and o["dtype"] not in (None, "auto"):
        from cluster_curate.commands.embed_parts import checkpoint_items
        from cluster_curate.io import proxy_store as store
        proxies = [str(o["model"])] + [i for i in checkpoint_items(o) if not i.isdigit()]
        if all(m == "proxy" or store.is_proxy_dir(m) for m in proxies):  # else silently ignored
            raise CurateError(f"--dtype {o['dtype']} is not used by the built-in proxy, which always runs in "
                              "float32; leave it out, or pass a pretrained model with --model")
    if uses_model and o["model"] != "proxy":
        spec = str(o["model"])
        looks_local = spec.startswith(("/", ".", "~")) or spec.endswith(".gguf") or spec.count("/") > 1
        if looks_local and not Path(spec).expanduser().exists():  # fail before reading the data
            raise CurateError(f"--model {spec}: no such file or directory")
        from cluster_curate.io import proxy_store as store
        if not store.is_proxy_dir(spec):  # no weights, a tokenizer of another model: before the data is read
            from cluster_curate.features.models import check_local_model
            check_local_model(spec, f"--model {spec}", o["trust_remote_code"])
    o["proxy"].validate()
    if o["checkpoints"] or "loss-trajectory" in features:
        _check_checkpoints(o, features)
    return features


# The features that read --dim (text's SVD width, the projections of gradient, lora-gradient and hidden) and
# --pool (hidden's mean); the others' width is their own (semantic: the encoder's, loss-trajectory: checkpoints).
DIM_FEATURES = ("text", "gradient", "lora-gradient", "hidden")
POOL_FEATURES = ("hidden",)


def _check_read_by_features(o: dict, features: list[str]) -> None:
    """--dim or a --pool other than its default that no feature reads: refused (else silently ignored, and the
    artifact recorded the --dim it was not made with)."""
    listed = ",".join(features)
    if o.get("dim") is not None and not set(features) & set(DIM_FEATURES):
        raise CurateError(f"--dim {o['dim']} is not used by --features {listed} (its width is the "
                          f"{'encoder' if 'semantic' in features else 'feature'}'s own); leave it out, or add a "
                          f"feature it sizes ({', '.join(DIM_FEATURES)})")
    if o.get("pool") not in (None, "all") and not set(features) & set(POOL_FEATURES):
        raise CurateError(f"--pool {o['pool']} is not used by --features {listed} (only hidden is pooled by it); "
                          "leave it out, or add --features hidden")


def _check_proxy_options(o: dict, features: list[str], uses_model: bool) -> None:
    """A --proxy-* option where no proxy is trained (text features, or --model a model of its own), at another value
    than its default: refused, as --pool and --device are (else silently ignored; at the default it changes
    nothing, as a Makefile may give it)."""
    from cluster_curate.features.proxy import ProxyOptions
    listed = ",".join(features)
    default = ProxyOptions()
    proxy = [name for name, attr in _PROXY_FIELDS.items()
             if o.get(name) is not None and o[name] != getattr(default, attr)]
    if proxy and not (uses_model and o["model"] == "proxy"):
        flag = f"--{proxy[0].replace('_', '-')} {o[proxy[0]]}"
        raise CurateError(f"{flag} is only used by the proxy model trained here, and " +
                          (f"--model {o['model']} is used instead; leave it out" if uses_model else
                           f"--features {listed} runs no model; leave it out, or add a model feature, e.g. "
                           "--features text,gradient"))


def _check_checkpoints(o: dict, features: list[str]) -> None:
    """--checkpoints, before the proxy trains or a model loads (after them a bad item cost the warm-up): what
    can be told from the options and the files."""
    from pathlib import Path

    from cluster_curate.commands.embed_parts import check_kept_checkpoints, check_trajectory_points, checkpoint_items
    from cluster_curate.features.models import looks_like_local_path
    from cluster_curate.io import proxy_store as store
    items, model = checkpoint_items(o), str(o["model"])
    if not all(items):
        raise CurateError(f"--checkpoints {o['checkpoints']}: an empty item; give a comma list of warm-up steps "
                          "or model paths/ids")
    steps = [int(s) for s in items if s.isdigit()]
    saved = model != "proxy" and store.is_proxy_dir(model)
    if steps and model != "proxy" and not saved:
        raise CurateError(f"--checkpoints {steps[0]}: a step number only names a warm-up checkpoint of the proxy, "
                          f"and --model {model} is not one")
    if saved:
        check_kept_checkpoints(o, features, store.proxy_checkpoint_steps(model), model)
    elif model == "proxy" and o["proxy"].steps is not None:  # the steps kept are known before the warm-up
        check_kept_checkpoints(o, features, o["proxy"].checkpoint_steps(o["proxy"].steps),
                               f"the warm-up (--proxy-steps {o['proxy'].steps})")
    for item in items:
        if not item.isdigit() and not store.is_proxy_dir(item) and looks_like_local_path(item) \
                and not Path(item).expanduser().exists():
            raise CurateError(f"--checkpoints {item}: no such file or directory")
    # the proxy's tokenizer is trained on this data: no model given beside it shares it (a saved proxy may: its
    # tokenizer is compared once the proxy is trained, embed_parts._trajectory)
    models = [item for item in items if not item.isdigit() and not store.is_proxy_dir(item)]
    if models and model == "proxy":
        raise CurateError(f"--checkpoints {models[0]}: a model with a tokenizer of its own, but every checkpoint is "
                          "fed --model's token ids, and the proxy (--model proxy) is trained here with a tokenizer "
                          f"of its own: pass it as --model too (--model {models[0]}), or give the proxy's warm-up "
                          "steps")
    if items:  # after what is wrong with an item: that is what to mend first
        check_trajectory_points(items, "--checkpoints names")


def _adopt_space(opts: dict):
    """--like POOL: the pool's feature-space options replace the defaults (one given with another value is an
    error), and its model: the proxy saved beside it, or the same model. Returns (path, meta)."""
    from cluster_curate.features.like import LIKE_OPTIONS, check_like
    from cluster_curate.io import proxy_store as store
    from cluster_curate.io.artifacts import read_meta, sidecar_path
    from cluster_curate.io import names
    pool = opts["like"]
    meta = read_meta(pool, names.EMBEDDINGS)
    params = meta.params
    check_like(pool, params)
    declared = {o.name: o.default for o in OPTIONS}
    for name in LIKE_OPTIONS:
        value = params.get(name)
        if name == "features":
            value = ",".join(value)
        elif name == "feature_weights" and value is not None:
            value = ",".join(f"{w:g}" for w in value)
        given = opts[name]
        if given is not None and given != declared[name] and given != value:
            # None: the pool left it at its default ('unset' read as "anything goes"); dim's default is per feature
            dims = ", ".join(f"{k} {v}" for k, v in (params.get("dims") or {}).items()) if name == "dim" else ""
            shown = value if value is not None else "the default" + (f" ({dims} dims)" if dims else "")
            raise CurateError(f"--{name.replace('_', '-')} {given}: --like {pool} embeds in its feature space, "
                              f"where it is {shown}; leave --{name.replace('_', '-')} out")
        if value is not None or name in ("dim", "layers", "feature_weights"):
            opts[name] = value
    model = params.get("model")
    if model is None:  # no model feature
        return pool, meta
    if model == "proxy" or str(model).startswith("proxy:"):
        directory = sidecar_path(pool, names.PROXY) if model == "proxy" else model[len("proxy:"):]
        if not store.is_proxy_dir(directory):
            raise CurateError(f"{pool}: the pool's proxy {directory} is missing: cannot reproduce its feature space")
        if params.get("proxy_key") and store.read_proxy_config(directory).get("key") != params["proxy_key"]:
            raise CurateError(f"{directory}: not the proxy {pool} was made with (re-trained since?): cannot "
                              "reproduce its feature space")
        opts["model"] = str(directory)
    else:
        opts["model"] = model
        if opts["dtype"] == declared["dtype"] and params.get("dtype"):
            opts["dtype"] = params["dtype"]
    return pool, meta


def _check_same_dims(like, params: dict) -> None:
    pool, meta = like
    if params["dims"] != meta.params.get("dims"):
        raise CurateError(f"{pool}: field dims: {meta.params.get('dims')}, rebuilt {params['dims']}: cannot reproduce "
                          "its feature space")


def _check_one_file(out: str) -> None:
    """One process writes the artifact as one .parquet file: an --out written as a folder (`emb/`, as a torchrun
    run's) became a file of that name, which a later `ls emb/` or a parts reader does not expect."""
    import os
    if out.endswith(("/", os.sep)):
        file = out.rstrip("/" + os.sep)
        raise CurateError(f"--out {out}: a folder, but one process writes the embeddings as one .parquet file (a "
                          "folder of parts under torchrun or with --num-parts): give a file, e.g. --out "
                          f"{file if file.endswith('.parquet') else file + '.parquet'}")


def embed(data, out: str, not_trained: bool = False, **options) -> dict:
    """One feature row per parsed example of `data` (a dataset, or several inputs / a mixture file: a
    mixture, io/mixture.py) into the embeddings artifact `out`. Returns the summary. `not_trained`: `data` is a
    target, whose rows no model is trained on (io/datasets.py ReadOptions)."""
    from cluster_curate import console, distributed
    from cluster_curate.commands import embed_parts as parts
    from cluster_curate.features.embed import bound_host_memory

    t_start = time.perf_counter()
    opts = resolve(OPTIONS, dict(options, out=out), "embed")
    bound_host_memory()
    like = _adopt_space(opts) if opts["like"] else None
    features = settle_options(opts)
    layout = distributed.detect(opts["num_parts"], opts["part_index"])
    from pathlib import Path

    from cluster_curate.io import names
    from cluster_curate.io.artifacts import check_writable, output_inputs, replace_refusal
    inputs = output_inputs(data, opts["like"])  # `out` is none of them and holds none of them
    if layout.multi:  # the parts' own checks come with the plan; the directory must at least be creatable, and
        # a file in its place is replaced (--overwrite) only when it is an embeddings artifact
        check_writable(out, True, inputs=inputs,
                       kind=names.EMBEDDINGS if opts["overwrite"] and Path(out).is_file() else None)
    else:  # before the scan and the text basis, which writes a sidecar beside `out`
        _check_one_file(str(out))
        if opts["resume"] and not opts["overwrite"] and Path(out).is_file() \
                and replace_refusal(out, names.EMBEDDINGS) is None:
            # the run finished: "pass --overwrite" would throw the finished work away and compute it again
            raise CurateError(f"{out}: already finished, nothing to resume (--resume continues an interrupted "
                              "embed); use it as it is, or pass --overwrite to embed again")
        check_writable(out, opts["overwrite"], inputs=inputs, kind=names.EMBEDDINGS)
    if layout.torchrun and not layout.leader:  # one progress bar and one summary: rank 0's
        console.configure(quiet=True, json_mode=False)
    device = distributed.device_for(layout, opts["device"])
    # under torchrun device_for has already turned auto into this rank's GPU when there is one
    distributed.init(layout, use_cuda=str(device or "").startswith("cuda"))
    try:
        with distributed.worker_lock(layout, out):
            run = _Run(data, out, opts, layout, device, features=features, like=like)
            parts.scan(run, replace(read_options(opts), not_trained=not_trained))
            models = parts.prepare(run)
            embedder, params = parts.embedder_and_params(run, models)
            if like:
                _check_same_dims(like, params)
                from cluster_curate.features.like import like_record
                params["like"] = like_record(*like)
            done = parts.feature_pass(run, embedder, params)
            return parts.finish(run, models, done, t_start)
    finally:
        distributed.shutdown(layout)


def algorithm_version(o: dict) -> int:
    """The version embeddings made with options `o` record (features.embed.algorithm_version of their features)."""
    from cluster_curate.features.embed import algorithm_version as of_features
    from cluster_curate.features.embed import parse_features
    return of_features(parse_features(o.get("features")))


def copies_line(dropped: int | None):
    """The exact duplicates embed left out, as its summary, select's and `report`'s say them."""
    from cluster_curate.console import Shown
    return Shown(dropped, label="exact duplicates left out")


def rows_left_lines(bad: int, skipped: int, rejects: str | None, dropped: int | None, parts: bool = False) -> dict:
    """The data's rows not embedded, under the summary's --json keys, as its lines (and `report`'s) say them: the
    bad rows and those with nothing to embed (a line where there are any), the list of them (`rejects`: a file, or
    with `parts` the directory holding one per part), the exact duplicates left out."""
    from cluster_curate.console import Shown
    lines = {"bad_rows": Shown(bad, label="bad rows", hidden=not bad),
             "skipped_no_response": Shown(skipped, label="skipped (nothing to embed)", hidden=not skipped)}
    if rejects:
        lines["rejects"] = Shown(rejects, label="rejects files (in)" if parts else "rejects file")
    return lines | {"exact_duplicates_dropped": copies_line(dropped)}


def render(result: dict, options: dict) -> None:
    """The summary for a reader: the figures of the result (--json gives them as they are), in words."""
    from cluster_curate import console
    from cluster_curate.commands import embed_parts as parts
    r = result
    rows = f"{r['rows']:,} of {r['rows_in_data']:,} rows in the data"
    if r["parts"] > 1 or not r["complete"]:
        rows += (f"; the artifact: {r['artifact_rows']:,} rows in {counted(r['parts'], 'part')}"
                 + ("" if r["complete"] else ", not complete yet (the other parts not written yet)"))
    data = {"output": r["output"], "process": r["process"], "rows embedded": rows,
            **rows_left_lines(r["bad_rows"], r["skipped_no_response"], r["rejects"], r["exact_duplicates_dropped"])}
    for src in r.get("sources", []):  # a mixture: where each input's rows went
        left = parts.source_losses(src)
        embedded = f"{src['rows']:,} of {src['rows_in_data']:,} rows embedded"
        embedded += f" ({', '.join(left)})" if left else ""
        data[f"source {src['source']}"] = console.Shown(None, embedded, label=f"source {src['source']}")  # as written
    data["features"] = ", ".join(f"{name} ({d} dims)" for name, d in r["dims"].items()) + (
        f"; {r['dim']} dims in all" if len(r["dims"]) > 1 else "")
    data["model"] = r["model"]
    for key in ("proxy", "encoder", "semantic", "n_tokens"):
        if key in r:
            data[key.replace("_", " ")] = r[key]
    data["device"] = r["device"]
    data["chunks"] = f"{r['chunks_computed']} computed, {r['chunks_resumed']} resumed"
    rest = r["seconds"] - r["scan_seconds"] - r["prepare_seconds"] - r["feature_seconds"]
    warmup = f" (proxy warm-up {r['warmup_seconds']:g})" if r["warmup_seconds"] else ""
    data["seconds"] = (f"{r['seconds']:g} in all: reading the data {r['scan_seconds']:g}, preparation "
                       f"{r['prepare_seconds']:g}{warmup}, feature pass {r['feature_seconds']:g}, the rest "
                       f"{max(rest, 0):.3g} (checks, rejects, duplicates, metadata)")
    # not the progress line's rate, which counts the rows computed so far over the computing time
    data["feature pass rate"] = (f"{console.rate_text(r['rows_per_s'])} rows/s, "
                                 f"{console.rate_text(r['tokens_per_s'])} tokens/s (reading, computing and writing)")
    console.summary("embed", data)


SPEC = CommandSpec(
    "embed", embed, (Argument("data", nargs=-1),), OPTIONS, render,
    algorithm=lambda: algorithm_version,
    help="""One feature vector per example of DATA (by default the prompt's words, weighted as --text-weighting
    says, reduced by SVD; the paper's gradient feature and other model features with --features).

    \b
    Examples:
      cluster-curate embed train.jsonl --out emb.parquet
      cluster-curate embed train.jsonl --out emb.parquet --features text,gradient --feature-weights 1,0.5
      cluster-curate embed train.jsonl --out emb.parquet --model Qwen/Qwen2.5-0.5B-Instruct --dim 1024
      cluster-curate embed target.jsonl --like emb.parquet --out target-emb.parquet
      torchrun --nproc-per-node 8 -m cluster_curate embed train.jsonl --out emb/
    """)
