"""`run DATA --out DIR`: the four stages with their artifacts kept in DIR, each skipped while up to date."""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from pathlib import Path

from cluster_curate.console import counted
from cluster_curate.errors import CurateError, DataChanged
from cluster_curate.io import names
from cluster_curate.options import (DATASET_OPTIONS, Argument, CommandSpec, Option, cli_defaulted, named_changes,
                                    read_options, resolve, run_options)

OWN_OPTIONS = (
    Option("out", path=True, flags=("--out", "-o"), required=True,
           help="Directory for the artifacts of every stage."),
    Option("overwrite", is_flag=True, default=False,
           help="Replace the outputs of a run made in OUT with other options (the stages whose options changed, "
           "and those after them); without it such a run is refused. Up-to-date stages are still skipped."),
    Option("force", is_flag=True, default=False, help="Passed to every stage (use mismatched inputs anyway)."),
)


def stage_specs() -> dict:
    from cluster_curate.commands import spec
    return {stage: spec(stage) for stage in names.STAGES}


def stage_options() -> tuple[list[Option], dict[str, list[str]]]:
    """The options `run` takes (each once, from the first stage that declares it) and each stage's names."""
    options, seen, by_stage = [], set(), {}
    for stage, spec in stage_specs().items():
        by_stage[stage] = [o.name for o in run_options(spec)]
        for o in run_options(spec):
            if o.name not in seen:
                seen.add(o.name)
                options.append(o)
    return options, by_stage


def made_by(stage: str, path) -> int | None:
    """The algorithm version a stage's output records it was made with (None: none there to read)."""
    from cluster_curate.io.artifacts import read_meta
    from cluster_curate.loader import read_manifest
    try:
        return read_manifest(path).get("algorithm") if stage == "shard" else read_meta(path).algorithm
    except (CurateError, OSError):
        return None


def output_fingerprint(stage: str, path, check_content: bool = False) -> str | None:
    """Fingerprint of a stage's finished output, or None when it is missing or incomplete (`check_content`: or a
    shard file is not the one its manifest records: removed, rewritten or swapped with another since). The shards'
    is their manifest's, then the hash of the manifest's and the left-over ids' bytes: either edited or removed,
    the shards are written again (export trusts both)."""
    import hashlib

    from cluster_curate.io.readers import read_checked_meta
    from cluster_curate.loader import read_manifest, shard_files
    p = Path(path)
    try:
        if stage == "shard":
            if not p.is_dir():
                return None
            if check_content:
                shard_files(p, check_content=True)
            manifest = read_manifest(p)
            h = hashlib.sha256((p / names.MANIFEST).read_bytes())
            if manifest.get("leftover_file"):
                leftover = p / manifest["leftover_file"]
                h.update(leftover.read_bytes() if leftover.is_file() else b"\0missing")
            return f"{manifest.get('fingerprint')}:{h.hexdigest()[:16]}"
        return read_checked_meta(p).fingerprint if p.exists() else None  # a file changed since: no fingerprint
    except (CurateError, OSError):
        return None


def _output_state(stage: str, output) -> tuple:
    """What tells a stage's output replaced: its fingerprint, and the files beside it."""
    from cluster_curate.io.readers import sidecars_unlike_record
    now = output_fingerprint(stage, output)
    try:
        return now, None if stage == "shard" or now is None else sidecars_unlike_record(output)
    except (CurateError, OSError):
        return now, "unreadable"


def same_output(stage: str, recorded: str | None, now: str | None) -> bool:
    """Whether an output is the one recorded; shards recorded before their manifest's bytes were (its fingerprint
    alone) are compared by that."""
    if stage == "shard" and recorded is not None and ":" not in recorded and now is not None:
        return recorded == now.split(":")[0]
    return recorded == now


class RunState:
    """What `run` did last time in DIR: per stage, its algorithm version, a hash of its options, its input's
    fingerprint and its output's fingerprint. A stage is up to date while all four still match, so a re-run
    (or a run after a crash, or after an upgrade) redoes only the stages whose algorithm, options, input or
    output changed, and `stale` says which."""

    def __init__(self, directory):
        import json
        self.path = Path(directory) / names.RUN_STATE
        self.stages = json.loads(self.path.read_text()) if self.path.is_file() else {}

    @staticmethod
    def request(stage: str, options: dict, input_fingerprint: str | None, algorithm: int,
                given: frozenset = frozenset(), named: dict | None = None) -> dict:
        """What a stage's up-to-date check compares; `given`: the stage's options not taken at their defaults;
        `named`: {"upstream": the stage's input, "named": the fingerprints of the inputs its options name}, of
        which `input_fingerprint` is the hash (kept to say which changed)."""
        import json

        from cluster_curate.io.artifacts import stable_hash
        return {"algorithm": algorithm, "options": stable_hash({"stage": stage, "options": options}),
                "input": input_fingerprint,
                "option_values": json.loads(json.dumps(options, default=str)),  # to name what changed
                "given": sorted(given),  # to tell an upgrade's new default from the user's choice
                **({"input_parts": json.loads(json.dumps(named, default=str))} if named else {})}

    def changed_options(self, stage: str, request: dict) -> dict:
        """{option: (recorded, now)} where this run's options differ from the recorded run's for `stage`."""
        rec = (self.stages.get(stage) or {}).get("option_values")
        if rec is None:
            return {}
        now = request["option_values"]
        # an ADDED_LATER option left out of either side (made before it, or recorded at its value) is at its value
        later = {k: v for k, v in ADDED_LATER.items() if k in rec or k in now}
        rec, now = _settled({**later, **rec}), _settled({**later, **now})
        unread = _unread(rec) & _unread(now)  # what the features read neither then nor now cannot change them
        rec_taken, now_taken = {**rec, **_compared(rec)}, {**now, **_compared(now)}
        changed = {k: (rec.get(k), now.get(k)) for k in sorted(set(rec) | set(now))
                   if rec_taken.get(k) != now_taken.get(k) and k not in unread}
        if "gpus" in changed and rec.get("gpus") is not None and _resolved_gpus(now) == rec["gpus"]:
            del changed["gpus"]  # given before, all faiss sees now: the same where that is as many (as --device)
        auto_before = [k for k in ("device", "dtype") if k in changed and rec.get(k) in (None, "auto")]
        if changed.keys() & {"device", "dtype"} and not auto_before:
            # given before, `auto` now: the same where auto resolves to it on this machine (torch only here). A
            # recorded `auto` was the device of the machine that ran it, which need not be this one
            resolved = _resolved_device(rec), _resolved_device(now)
            changed = {k: v for k, v in changed.items() if k not in ("device", "dtype")
                       or resolved[0][k] != resolved[1][k]}
        return changed

    def option_changes(self, stage: str, request: dict) -> tuple[dict, dict]:
        """changed_options split in two: (the user's changes, which replace the stage's outputs; the options taken
        at their defaults both then and now, whose default changed with an upgrade, which re-run the stage)."""
        changed = self.changed_options(stage, request)
        rec = self.stages.get(stage) or {}
        if "given" in rec:  # an option added since is not among them: it was at its default then
            then = {k for k in changed if k not in rec["given"]}
        else:  # recorded before `run` noted them: a former default's value counts as taken by default
            then = {k for k, (old, _) in changed.items() if old in FORMER_DEFAULTS.get(k, ())}
        moved = {k for k in then if k not in request["given"]}
        return ({k: v for k, v in changed.items() if k not in moved},
                {k: v for k, v in changed.items() if k in moved})

    def stale(self, stage: str, request: dict, output) -> str | None:
        """Why `stage` must run again (None: it is up to date)."""
        rec = self.stages.get(stage)
        if rec is None:  # an interrupted first run's embed: its committed chunks are resumed where the plan is the same
            from cluster_curate.distributed import committed_chunks
            chunks = committed_chunks(output) if stage == "embed" else []
            return f"not finished before ({counted(len(chunks), 'committed chunk')} found)" if chunks else \
                "not run before"
        if "algorithm" not in rec:
            return "recorded by an earlier version of cluster-curate"
        mine, moved = self.option_changes(stage, request) if rec["options"] != request["options"] else ({}, {})
        if moved and not mine:
            return f"its default{'s' if len(moved) > 1 else ''} changed ({named_changes(moved)})"
        if mine:  # none: options given now at the values the stage took without them (_settled)
            return "its options changed"  # before the algorithm: --target given or dropped changes select's too
        # the output's own record decides where the state's differs (a targeted select's state, before this
        # version, noted selection's version beside the targeting's its artifact records)
        if rec["algorithm"] != request["algorithm"] and made_by(stage, output) != request["algorithm"]:
            return f"its algorithm changed (version {rec['algorithm']} -> {request['algorithm']})"
        if rec["input"] != request["input"]:
            return "its input changed" + _named_input_change(rec, request)
        if not same_output(stage, rec["fingerprint"], output_fingerprint(stage, output, check_content=True)):
            from cluster_curate.io.artifacts import cut_short
            from cluster_curate.io.readers import rows_changed
            if cut_short(output):
                return "its output is damaged (cut short)"
            changed = rows_changed(output)
            return f"its output was changed ({changed})" if changed else "its output is missing or was changed"
        if stage != "shard":  # its fingerprint is its .parquet's: the files beside it are checked against its record
            from cluster_curate.io.readers import sidecars_unlike_record
            return sidecars_unlike_record(output)
        return None

    @contextmanager
    def remaking(self, stage: str, output):
        """While `stage` is made again: its record and those of the stages after it marked RUN_REMAKING, on disk
        before any output is touched (artifacts.check_run_finished: their readers refuse the folder until `run`
        finishes them; record drops the mark). A stage that stops with its output as it was (its own output is
        written beside it and renamed into place) puts the records back as they were: the folder is the previous
        run's, whole; one killed, or stopped after its output was replaced, keeps them marked."""
        import copy

        from cluster_curate.io.artifacts import RUN_REMAKING
        before, was = copy.deepcopy(self.stages), _output_state(stage, output)
        later = [s for s in names.STAGES[names.STAGES.index(stage):] if s in self.stages]
        if any(not self.stages[s].get(RUN_REMAKING) for s in later):
            for s in later:
                self.stages[s][RUN_REMAKING] = True
            self._write()
        try:
            yield
        except BaseException:
            if self.stages != before and _output_state(stage, output) == was:
                self.stages = before
                self._write()
            raise

    def settle(self, stage: str) -> None:
        """`stage` found up to date: its mark of a run stopped before (remaking) dropped."""
        from cluster_curate.io.artifacts import RUN_REMAKING
        if self.stages.get(stage, {}).pop(RUN_REMAKING, None):
            self._write()

    def record(self, stage: str, request: dict, output) -> None:
        self.stages[stage] = dict(request, fingerprint=output_fingerprint(stage, output))
        self._write()

    def _write(self) -> None:
        from cluster_curate.io.writer import write_json
        write_json(self.path, self.stages, indent=1, sort_keys=True, newline=False)


# Options added after `run` directories existed, at the value that matches a directory made before them: left out
# of the up-to-date check while at it, so such a directory stays up to date with it (--kinds none; the default
# is auto since round 20, and a directory made before then is clustered again, with kinds: FORMER_DEFAULTS).
ADDED_LATER = {"kinds": "none", "decontaminate": (), "decontaminate_ngrams": None, "rejected_field": None,
               "label_field": None}

# The defaults that changed since `run` recorded option values, with the values they had: in a directory
# recorded before `run` noted which options the user gave, an option at one of these was taken by default.
FORMER_DEFAULTS = {"text_weighting": ("tf",), "kinds": ("none",), "target_weight": (0.75,), "within": ("random",)}


def _settled(values: dict) -> dict:
    """A stage's option values (recorded or asked for) with those it was not given, which the stage settles itself,
    at the value it takes (embed.stage_defaults, the proxy's, --dim of text features, shard's --length-window):
    an option given at that value asks for the run made without it, not for other options."""
    from cluster_curate.commands.embed import _PROXY_FIELDS, stage_defaults
    from cluster_curate.features.embed import DEFAULT_TEXT_DIM
    from cluster_curate.features.proxy import ProxyOptions
    from cluster_curate.sharding import DEFAULT_LENGTH_WINDOW
    proxy = ProxyOptions()
    taken = {**stage_defaults(), **{k: getattr(proxy, a) for k, a in _PROXY_FIELDS.items()},
             "length_window": DEFAULT_LENGTH_WINDOW.get(values.get("balance"))}
    if "features" in values and str(values["features"] or taken["features"]).replace(" ", "") == "text":
        taken["dim"] = DEFAULT_TEXT_DIM
    settled = {k: taken[k] if v is None and taken.get(k) is not None else v for k, v in values.items()}
    for k in ("commit_every", "batch_rows"):  # how the work is chunked: the same result (README, `run`)
        settled.pop(k, None)
    if "features" not in values:  # not embed's options
        return settled
    from cluster_curate.features.semantic import bundled_key
    if "semantic" in _features_of(settled) and (key := bundled_key(settled.get("encoder"))):
        settled["encoder"] = key  # what semantic loads without --encoder (or by its hub id)
    settled.pop("batch_tokens", None)  # batching does not change the features (README, features/embed)
    return settled


def _compared(values: dict) -> dict:
    """Options as the stage takes them, where other spellings make the same ones (named as the user wrote them):
    embed's --feature-weights as numbers (1 each is the default; 1 and 1.0 one weight), --model and --encoder as the
    folders they name (models/x, ./models/x/, its absolute path; their files are compared as embed's input,
    _model_files); select's source shares in any order and spelling."""
    from cluster_curate.features.embed import parse_weights
    from cluster_curate.features.semantic import bundled_key
    if "features" not in values:
        return {k: _shares(values[k]) for k in ("source_min_share", "source_max_share") if values.get(k)}
    found = {}
    try:
        found["feature_weights"] = parse_weights(values.get("feature_weights"), len(_features_of(values)))
    except CurateError:  # a record from before a check: compared as it was written
        pass
    for name in ("model", "encoder"):
        spec = values.get(name)
        if spec not in (None, "proxy") and bundled_key(spec) is None and Path(str(spec)).expanduser().exists():
            found[name] = str(Path(str(spec)).expanduser().resolve())
    return found


def _shares(spec) -> tuple | str:
    """--source-min-share / --source-max-share as the shares they give (`math=0.5,code=0.2` is `code=0.2, math=0.50`),
    else as written (select refuses it)."""
    from cluster_curate.io.mixture import share_item
    try:
        return tuple(sorted((name, share) for name, _, share in map(share_item, str(spec).split(","))))
    except ValueError:
        return spec


def _features_of(values: dict) -> list[str]:
    from cluster_curate.features.embed import DEFAULT_FEATURES, parse_features
    try:
        return parse_features(values.get("features") or DEFAULT_FEATURES)
    except CurateError:
        return []


def _unread(values: dict) -> set[str]:
    """embed's options that none of `values`' features reads (text runs no model or encoder: their --max-length,
    --device, proxy options...): given or not, they make the same features."""
    from cluster_curate.commands.embed import _PROXY_FIELDS, DIM_FEATURES, POOL_FEATURES
    from cluster_curate.features.embed import MODEL_FEATURES
    if "features" not in values:
        return set()
    features = set(_features_of(values))
    if not features:
        return set()
    runs_model, runs_encoder = bool(features & set(MODEL_FEATURES)), "semantic" in features
    read_by = {"model": runs_model, "encoder": runs_encoder, "dim": bool(features & set(DIM_FEATURES)),
               "pool": bool(features & set(POOL_FEATURES)), "layers": "lora-gradient" in features,
               "checkpoints": "loss-trajectory" in features, "text_weighting": "text" in features,
               "text_sample": "text" in features, "text_field": bool(features & {"text", "semantic"}),
               **{k: runs_model or runs_encoder for k in ("max_length", "device", "dtype", "trust_remote_code")},
               **{k: runs_model for k in _PROXY_FIELDS}}
    return {k for k, read in read_by.items() if not read}


def _resolved_device(values: dict) -> dict:
    """{"device", "dtype"} as embed resolves them on this machine (auto: cuda when there is one, bf16 there and
    fp32 on CPU): a value given at what auto resolves to is the same run. A value torch refuses stays as it is."""
    from cluster_curate.features.models import resolve_device, resolve_dtype
    device, dtype = values.get("device"), values.get("dtype")
    try:
        dev = resolve_device(device)
        dtype = str(resolve_dtype(dtype, dev)).replace("torch.", "")
        device = str(dev)
    except CurateError:
        pass
    return {"device": device, "dtype": dtype}


def _resolved_gpus(values: dict) -> int | None:
    """cluster's --gpus as faiss resolves it on this machine (None: all it sees); None where it refuses the value."""
    from cluster_curate.kmeans import resolve_gpus
    try:
        return resolve_gpus(values.get("gpus"))
    except CurateError:
        return None


def _named_input_change(rec: dict, request: dict) -> str:
    """` (--decontaminate a.jsonl: its content changed)`: which input an option names changed, where the stage's input
    did not, and which data input changed (embed's input: `m1.jsonl: its content changed`); '' where that is not
    known (recorded before run kept the parts, or an artifact before the stage changed)."""
    was, now = rec.get("input_parts"), request.get("input_parts")
    if not was or not now:
        return ""
    # embed's input is the data: each input's recorded fingerprint names the one that changed
    said, other_inputs = _data_changed(was.get("data"), now.get("data"))
    if was["upstream"] != now["upstream"] and not (said or other_inputs):
        return ""
    def parts(named):  # a target's fingerprint alone, or {"target": it, "decontaminate": [each set's]}
        return named if isinstance(named, dict) else {"target": named, "decontaminate": []}
    a, b = parts(was["named"]), parts(now["named"])
    said += [f"--target {request['option_values'].get('target')}"] if a.get("target") != b.get("target") else []
    said += [f"--{k} {request['option_values'].get(k)}" for k in ("model", "encoder", "tokenizer")
             if a.get(k) != b.get(k)]
    sets, before = request["option_values"].get("decontaminate") or [], a.get("decontaminate") or []
    said += [f"--decontaminate {path}" for i, path in enumerate(sets)
             if i >= len(before) or before[i] != (b.get("decontaminate") or [])[i]]
    said = other_inputs + ([f"{', '.join(said)}: {'its' if len(said) == 1 else 'their'} content changed"] if said
                           else [])
    if was.get("mixture_shares") != now.get("mixture_shares"):
        said.append("the mixture file's min_share / max_share changed")
    return f" ({'; '.join(said)})" if said else ""


def _data_parts(ds) -> list:
    """[[source, fingerprint], ...]: each data input's, to name the one that changed (embed's input is the
    data's fingerprint, of them all)."""
    from cluster_curate.io.mixture import Mixture
    return [[d.source, d.fingerprint()] for d in (ds.datasets if isinstance(ds, Mixture) else [ds])]


def _data_changed(was: list | None, now: list | None) -> tuple[list[str], list[str]]:
    """The data inputs whose content changed (their sources), and where other inputs are given now, what changed
    (recorded and now: _data_parts; none where either was not recorded)."""
    if not was or not now:
        return [], []
    before, given = [source for source, _ in was], [source for source, _ in now]
    if list(map(os.path.normpath, before)) != list(map(os.path.normpath, given)):  # ./p.jsonl is p.jsonl
        return [], [f"the data inputs changed: {', '.join(before)} before, {', '.join(given)} now"]
    return [source for (source, a), (_, b) in zip(was, now) if a != b], []


def _file_shares(ds, data, embeddings: Path) -> list | None:
    """A mixture file's min_share / max_share per input, which select reads from the file (select.file_shares):
    part of select's input, so that editing one, or taking it out, selects again. None when neither the file nor
    the embeddings' record (the file as it was embedded) sets one: a directory made before stays up to date."""
    from cluster_curate.io.artifacts import read_meta
    from cluster_curate.io.datasets import data_paths
    from cluster_curate.io.mixture import Mixture
    if not isinstance(ds, Mixture) or len(data_paths(data)) != 1:  # several inputs named: no file, no shares
        return None
    shares = [[i.name, i.min_share, i.max_share] for i in ds.inputs]
    recorded = []
    if embeddings.exists():
        try:
            recorded = read_meta(embeddings).dataset.get("inputs") or []
        except CurateError:  # damaged or replaced: embed runs again, and its record is then the file's
            pass
    bounded = [(lo, hi) for _, lo, hi in shares] + [(i.get("min_share"), i.get("max_share")) for i in recorded]
    return shares if any(lo is not None or hi is not None for lo, hi in bounded) else None


def _at_added_later_value(name: str, value) -> bool:
    if name not in ADDED_LATER:
        return False
    later = ADDED_LATER[name]
    return tuple(value or ()) == later if isinstance(later, tuple) else value == later  # several values: a tuple


def _check_options(stage_opts: dict, named_inputs) -> tuple[dict, str | dict | None]:
    """A stage's options for its up-to-date check, and the fingerprints of the inputs its options name (`select
    --target` and `--decontaminate`: they count as inputs, by their content: `named_inputs`, from preflight).
    Without a target its options are left out, so a directory made before they existed stays up to date
    (ADDED_LATER likewise)."""
    stage_opts = {k: v for k, v in stage_opts.items() if not _at_added_later_value(k, v)}
    if "target" not in stage_opts:
        return stage_opts, None
    if stage_opts["target"] is None:
        stage_opts = {k: v for k, v in stage_opts.items() if k not in ("target", "target_weight")}
    return stage_opts, named_inputs


def _model_files(opts: dict) -> dict | None:
    """{"model": ..., "encoder": ...}: the fingerprints of the local --model and --encoder embed's features use
    (io/lineage.model_fingerprint); None when they use neither."""
    from cluster_curate.features.embed import DEFAULT_FEATURES, MODEL_FEATURES, parse_features
    from cluster_curate.io.lineage import model_fingerprint
    from cluster_curate.io import proxy_store
    features = set(parse_features(opts.get("features") or DEFAULT_FEATURES))
    model, encoder = opts.get("model"), opts.get("encoder")
    found = {}
    if features & set(MODEL_FEATURES) and model not in (None, "proxy") and not proxy_store.is_proxy_dir(model):
        found["model"] = model_fingerprint(model)
    if "semantic" in features and encoder:
        found["encoder"] = model_fingerprint(encoder)
    found = {k: v for k, v in found.items() if v}
    return found or None


def _stage_extra(spec) -> dict:
    return {k: v() for k, v in spec.extra.items()}


def preflight(ds, opts: dict, by_stage: dict) -> str | None:
    """Every stage's options checked before the first expensive stage (issue 20 #2): each stage's own checks,
    then one parse of the data (a bad row is reported first, as embed would), then what needs the number of
    examples (--k, and one global step of N × M rows within the selection's size; for a budget in tokens, what it
    can buy where select will count words). Returns the fingerprints of the inputs select's options name: the
    --target's, and with --decontaminate or a local --tokenizer, {"target": it, "decontaminate": each set's,
    "tokenizer": its files' fingerprint} (None: none of them)."""
    import numpy as np

    from cluster_curate import selection as S
    from cluster_curate.budget_sequence import (TOKEN_MODES, check_budget_buys_a_row, most_rows_within,
                                                token_budget_for)
    from cluster_curate.commands import cluster as cluster_cmd
    from cluster_curate.commands import embed as embed_cmd
    from cluster_curate.commands import select as select_cmd
    from cluster_curate.commands import select_parts
    from cluster_curate.commands.embed_parts import N_TOKENS_WORDS
    from cluster_curate.decontamination import RowQuestions
    from cluster_curate.exact_dedup import example_key, first_of_each
    from cluster_curate.features.embed import MODEL_FEATURES
    from cluster_curate.features.text import word_counts as word_count
    specs = stage_specs()
    resolved = {stage: resolve(specs[stage].options, {n: opts[n] for n in by_stage[stage]}, stage)
                for stage in names.STAGES}
    features = embed_cmd.settle_options(dict(resolved["embed"]))
    mode = select_cmd.check_options(resolved["select"])
    if resolved["select"]["within"] == "hard" and not set(features) & set(MODEL_FEATURES):
        raise CurateError(f"--within hard needs a loss per example, which only the model features compute "
                          f"({', '.join(MODEL_FEATURES)}, with --model); --features here: {','.join(features)}")
    words = _counts_words(features, resolved["select"]) and mode in TOKEN_MODES
    decontaminate = resolved["select"]["decontaminate"] or ()
    data_rows, word_counts, questions, ids = 0, [], [], []
    c = resolved["cluster"]
    # what needs the rows embed keeps counts them so: exact duplicates left out (else cluster refuses a --k, and
    # select a budget short of one step, after embed has run)
    keys = None if resolved["embed"]["keep_duplicates"] else []
    for batch in ds.iter_batches():
        data_rows += len(batch.examples)
        if keys is not None:
            keys += [example_key(e.prompt, e.response, e.rejected) for e in batch.examples]
        if words:
            word_counts.append(np.array([word_count(e)[0] for e in batch.examples], dtype=np.int64))
        if decontaminate:  # the rows' questions: EVAL given as the data itself is refused before embed
            questions.append(RowQuestions.of([e.prompt for e in batch.examples]))
        ids.append(np.array([e.id for e in batch.examples], dtype=np.int64))
    if not data_rows:  # every row a bad row (--on-bad-row skip): embed refuses the data, saying how to read them,
        return None  # where the checks of counts below would blame the plan (0 rows selected "use fewer shards")
    ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    # embed keeps the lowest id of each key (exact_dedup)
    copies = ~first_of_each(ids, keys)[0] if keys is not None else np.zeros(data_rows, dtype=bool)
    named_inputs = _check_target(resolved["select"])
    # each read now, as select will (with --decontaminate-ngrams, the prompts: an EVAL embeddings' recorded data):
    # a bad row, or data that is gone, before the first stage
    ngrams = resolved["select"]["decontaminate_ngrams"] is not None
    evals = [select_parts.questions_of(p, resolved["select"], "--decontaminate", with_prompts=ngrams,
                                     warn_skipped=False) for p in decontaminate]
    asking = np.zeros(data_rows, dtype=bool)  # the rows that ask an EVAL's question
    if evals:
        named_inputs = {"target": named_inputs, "decontaminate": [fingerprint for _, fingerprint, _ in evals]}
        asked = np.concatenate([keys for keys, _, _ in evals])
        asking = RowQuestions.joined(questions).asking(asked)[0]
        if asking.size and asking.all():
            raise select_parts.nothing_left(decontaminate, data_rows)
    left_out = copies | asking  # the rows select chooses from are the others
    selectable = data_rows - int(left_out.sum())
    for name, low in (("iters", 1), ("seed", 0)):
        if c.get(name) is not None and c[name] < low:
            raise CurateError(f"--{name} must be >= {low}, got {c[name]}")
    if c.get("k") not in (None, "auto") and int(c["k"]) > data_rows:
        raise CurateError(f"--k {c['k']} is larger than the number of examples ({data_rows})")
    if c.get("k") not in (None, "auto") and int(c["k"]) > data_rows - int(copies.sum()):
        raise CurateError(f"--k {c['k']} is larger than the number of examples embed keeps "
                          f"({data_rows - int(copies.sum())}: {counted(int(copies.sum()), 'exact duplicate')} of "
                          "others left out; --keep-duplicates keeps them)")
    cluster_cmd.check_kinds(c)
    cluster_cmd.check_groups(c, data_rows - int(copies.sum()))
    s = resolved["select"]
    most = {"fraction": lambda: S.fraction_budget(selectable, s["fraction"]),
            "budget": lambda: min(selectable, int(s["budget"])),
            "per-cluster-ratio": lambda: math.ceil(s["per_cluster_ratio"] * selectable),
            "token-budget": lambda: selectable, "token-fraction": lambda: selectable}[mode]()
    notes = [f"{counted(int(copies.sum()), 'exact duplicate')} left out"] * bool(copies.any()) + [
        f"{counted(int((asking & ~copies).sum()), 'row')} ask a --decontaminate set's questions"] * bool(asking.any())
    said = [f"of {data_rows:,}: {'; '.join(notes)}"] if notes else []  # in one parenthesis with the words below
    budget = f"--{mode} {s[mode.replace('-', '_')]} of {counted(selectable, 'row')}"
    if words:  # the tokens select will count: what the budget can buy is known now, not after embed
        word_counts = np.concatenate(word_counts) if word_counts else np.zeros(0, dtype=np.int64)
        word_counts = word_counts[~left_out]
        requested = token_budget_for(int(word_counts.sum()), s["token_budget"], s["token_fraction"], N_TOKENS_WORDS)
        check_budget_buys_a_row(word_counts, requested, mode, N_TOKENS_WORDS)
        # the most rows of any order: the shortest ones (the water-filling's order is known only after cluster)
        most = most_rows_within(word_counts, requested)
        said.insert(0, f"{requested:,} of their {int(word_counts.sum()):,} words")
    budget += f" ({'; '.join(said)})" if said else ""
    why = " and ".join(["exact duplicates"] * bool(copies.any()) + ["--decontaminate"] * bool(asking.any()))
    _check_source_bounds(ds, s, mode, most if mode in ("fraction", "budget") else None,
                         (ids, left_out, why) if left_out.any() else None)
    h = resolved["shard"]
    from cluster_curate.sharding import check_counts, check_length_window, check_sizes
    check_counts(h["num_shards"], h["micro_batch_size"])
    check_length_window(h["length_window"])
    if h["allocation"] == "paper":  # else shard refuses it after embed, cluster and select have run
        from cluster_curate.clustering import auto_k
        k = auto_k(data_rows) if c.get("k") in (None, "auto") else int(c["k"])
        if k != h["num_shards"]:
            given = f"--k {k}" if c.get("k") not in (None, "auto") else f"--k auto gives {counted(k, 'cluster')} here"
            raise CurateError(f"--allocation paper gives rank r the rows of cluster r, so it needs as many clusters "
                              f"as shards: {given} and --num-shards is {h['num_shards']}; pass --k {h['num_shards']}")
    check_sizes(most, h["num_shards"], h["micro_batch_size"], f"{budget} selects at most {most:,}")
    from cluster_curate.io.lineage import model_fingerprint
    tokenizer = resolved["select"]["tokenizer"]
    if tokenizer and (files := model_fingerprint(tokenizer)):  # its token counts: saved again, select runs again
        named_inputs = {**(named_inputs if isinstance(named_inputs, dict) else
                           {"target": named_inputs, "decontaminate": []}), "tokenizer": files}
    return named_inputs


def _counts_words(features: list[str], select_opts: dict) -> bool:
    """Whether select will count tokens as whitespace words: no --tokenizer, and no feature whose model or
    encoder counts them at embed (embed_parts.N_TOKENS_WORDS)."""
    from cluster_curate.features.embed import FEATURE_KINDS
    return select_opts["tokenizer"] is None and not any(
        FEATURE_KINDS.get(f).uses_model or FEATURE_KINDS.get(f).attrs.get("encoder") for f in features)


def _check_target(s: dict) -> str | None:
    """The --target's fingerprint (None: no target), for select's up-to-date check. A raw target is opened once
    (its format detected) and parsed as select will embed it (with --on-bad-row): a bad row is reported before
    the first stage, not after embed and cluster have run; its content is hashed from the same opening. Select's
    embed then reads it as embed reads any data (`embed` takes a path: its own scan, fingerprint and feature
    pass), and only when select is not up to date."""
    from cluster_curate.commands.select_parts import open_target, target_embeddings_meta
    if s["target"] is None:
        return None
    meta = target_embeddings_meta(s["target"])
    if meta is not None:  # an artifact is read as it is
        return meta.fingerprint
    target = open_target(s["target"], s)
    for _ in target.iter_batches():
        pass
    return target.fingerprint()


def _check_source_bounds(ds, s: dict, mode: str, budget_rows: int | None, left_out=None) -> None:
    """A mixture's floors (--source-min-share, else each input's min_share) and caps (likewise) that no selection
    can meet: with a budget mode or --within order that takes no water-filling order (`mode`), floors more than
    the whole selection together, caps on every input less than it, or (a budget in rows) a floor of more rows than
    an input has: with exact duplicates or --decontaminate (`left_out`: the examples' ids, whether each is a copy
    of an earlier one or asks a set's question, and which of the two left rows out), its examples that are
    neither. select checks the exact bounds on the rows it can take; these are the failures certain from the
    options and counts."""
    from cluster_curate.commands.select import check_no_share_options, check_no_source_bounds
    from cluster_curate.io.mixture import Mixture, source_bounds
    if not isinstance(ds, Mixture):
        check_no_share_options(s)
        return
    low, high, low_from, high_from = source_bounds(s["source_min_share"], s["source_max_share"], ds.names,
                                                   [i.min_share for i in ds.inputs], [i.max_share for i in ds.inputs],
                                                   [i.where for i in ds.inputs])
    if s["target"] is not None:
        check_no_source_bounds(ds.names, low, high, (low_from, high_from))
    from cluster_curate.selection import binding_source_bound, check_source_bounds_order
    bound = binding_source_bound(ds.names, low, high, (low_from, high_from))
    if bound is not None:
        check_source_bounds_order(mode, s["within"], bound)
    floors = {name: share or 0.0 for name, share in zip(ds.names, low)}
    if sum(floors.values()) > 1 + 1e-9:
        named = ", ".join(f"{name} {share:g} from {origin}" for (name, share), origin in zip(floors.items(), low_from)
                          if share)
        raise CurateError(f"the sources' floors ({named}) add up to {sum(floors.values()):.0%} of the selection, "
                          "more than all of it; lower them where they are set")
    if all(cap is not None for cap in high) and sum(high) < 1 - 1e-9:  # every input capped, short of the whole
        named = ", ".join(f"{name} {cap:g} from {origin}" for name, cap, origin in zip(ds.names, high, high_from))
        raise CurateError(f"the sources' caps ({named}) add up to {sum(high):.0%} of the selection, less than all "
                          "of it; raise them where they are set")
    if budget_rows is not None:
        import numpy as np
        rows, out = [d.num_rows() for d in ds.datasets], [0] * len(ds.datasets)
        if left_out is not None:  # each input's examples, less the copies and those asking a question
            source = np.searchsorted(ds.offsets(), left_out[0], side="right") - 1
            out = np.bincount(source[left_out[1]], minlength=len(rows)).tolist()
            rows = (np.bincount(source, minlength=len(rows)) - out).tolist()
        for (name, share), n, gone, origin in zip(floors.items(), rows, out, low_from):
            if math.ceil(share * budget_rows) > n:
                said = f" left after {left_out[2]} left out {counted(int(gone), 'row')}" if gone else ""
                raise CurateError(f"source {name}: its floor is {math.ceil(share * budget_rows):,} rows "
                                  f"({share:g} of {budget_rows:,}, {origin}) and it has only {counted(int(n), 'row')}"
                                  f"{said}")
        # each input gives at most its cap's rows (budget_sequence.source_bounded_rows: floor(cap x budget)), and
        # never more than it has: select would refuse a budget they cannot fill, after embed and cluster. Not with
        # --dedup or --decontaminate-ngrams: the rows they leave out are known only then, and select cuts the
        # budget to the rows left
        most = sum(n if cap is None else min(n, math.floor(cap * budget_rows + 1e-9)) for n, cap in zip(rows, high))
        if most < budget_rows and s.get("dedup") is None and s.get("decontaminate_ngrams") is None:
            capped = "; ".join(f"{origin} for {name}" for name, cap, origin in zip(ds.names, high, high_from)
                               if cap is not None)
            raise CurateError(f"the sources' caps allow at most {most:,} rows, less than the budget of "
                              f"{budget_rows:,} (set by {capped}); raise them where they are set, or lower the budget")


def _check_selection_fills_a_step(selection: Path, opts: dict) -> None:
    """The selection made (or kept) against one global step, before shard: what preflight could only bound (a
    budget in tokens counted at embed, exact duplicates left out, --dedup) is known now, and the message names
    the budget, which shard's own does not."""
    from cluster_curate.io.artifacts import read_meta
    budget = next(b for b in ("fraction", "budget", "per_cluster_ratio", "token_budget", "token_fraction")
                  if opts[b] is not None)  # the one preflight allowed
    meta = read_meta(selection)
    rows, dropped = meta.rows, int((meta.params.get("exact_duplicates") or {}).get("dropped") or 0)
    # preflight counted the rows of the data: where copies of other rows were left out, the step's shortfall is theirs
    from cluster_curate.commands.select_parts import rows_left_out
    left, deco = meta.params.get("rows"), rows_left_out(meta.params.get("decontaminated"))
    why = ([counted(dropped, "exact duplicate")] if dropped else []) + \
        ([f"{counted(deco, 'row')} --decontaminate left out"] if deco else [])  # ...asking an EVAL's questions
    of = f" of the {counted(int(left), 'row')} left after {' and '.join(why)}" if why and left is not None else ""
    from cluster_curate.sharding import check_sizes
    check_sizes(rows, opts["num_shards"], opts["micro_batch_size"], f"--{budget.replace('_', '-')} {opts[budget]} "
                f"selected {rows:,}{of} (the embeddings and clusters are kept for the rerun)")


def _refuse_replacement(state: RunState, d: Path, requests: dict) -> None:
    """Re-running stale stages is run's job (a default that changed with an upgrade among them); other options
    for a stage already run in `d` replace its outputs, which needs --overwrite (issue 20 #4)."""
    changes = [(stage, state.option_changes(stage, request)[0]) for stage, request in requests.items()]
    per_stage = [f"{stage} options ({named_changes(changed, 3)})" for stage, changed in changes if changed]
    if per_stage:  # every stage's: --overwrite replaces each of them (it named the first stage's alone)
        said = ", ".join(per_stage[:-1]) + " and " + per_stage[-1] if len(per_stage) > 1 else per_stage[0]
        raise CurateError(f"{d}: holds a run made with other {said}; pass --overwrite to replace it, or choose "
                          "another --out")


def _refuse_unrecorded_outputs(state: RunState, paths: dict) -> None:
    """Outputs of the tool's in the stages' places where no run-state.json records a run (`embed ... --out
    DIR/embeddings.parquet`, as a Makefile writes them): re-running the stages would replace them without
    --overwrite (README, Artifacts). Where it records stages, an output it does not (a selection short of a step)
    is its own run's."""
    found = [p for stage, p in paths.items() if output_fingerprint(stage, p) is not None]
    if found:
        more = f" (and {counted(len(found) - 1, 'other output')})" if len(found) > 1 else ""
        raise CurateError(f"{found[0]}: an output that no {state.path.name} beside it records (made by a stage's own "
                          f"command?){more}; pass --overwrite to replace it, or choose another --out")


def _check_resumable(embeddings: Path, opts: dict) -> None:
    """The committed chunks of an interrupted first embed made with another --commit-every: embed refuses to resume
    them (a chunk is that many rows) and would not start afresh without --overwrite. Refused here, before `run`
    says it found them."""
    import json

    from cluster_curate.distributed import DEFAULT_COMMIT_EVERY, committed_chunks, plan_changes
    from cluster_curate.io.artifacts import sidecar_path
    chunks = committed_chunks(embeddings)
    plan = sidecar_path(embeddings, names.STAGING) / names.STAGING_PLAN
    try:
        old = json.loads(plan.read_text()) if chunks else None
        was = old.get("commit_every") if old else None
    except (OSError, ValueError, AttributeError):
        return  # embed says what it found
    now = opts.get("commit_every") or DEFAULT_COMMIT_EVERY
    if was is not None and was != now:  # embed's words, which name what else differs once it has made its plan
        raise CurateError(f"{plan.parent}: holds an interrupted run with other parameters or data "
                          f"({plan_changes(old, dict(old, commit_every=now))}: "
                          f"{counted(len(chunks), 'committed chunk')}); run as it was (--commit-every {was}, and "
                          "the options it was made with) to resume it, or pass --overwrite to start afresh")


def _own_unreadable_shards(shards: Path) -> bool:
    """Whether run's shards folder is one shard would refuse as a folder it did not write (its manifest.json edited
    by hand) while it holds only the names shard writes: recorded as run's own, it is emptied and made again
    (_empty_own_shards), as run's other outputs are."""
    from cluster_curate.io.artifacts import SHARDS, only_shard_files, replace_refusal
    return shards.is_dir() and not shards.is_symlink() and bool(replace_refusal(shards, SHARDS)) \
        and only_shard_files(shards)


def _empty_own_shards(shards: Path) -> None:
    if _own_unreadable_shards(shards):
        for entry in shards.iterdir():
            entry.unlink()


def _check_stage_outputs(paths: dict, data, own_shards: bool) -> None:
    """Before the first stage: a file or folder of the user's where a stage writes (a `shards/` of their own), or
    beside it under one of its sidecars' names, which that stage refuses to replace. It was found when the stage
    came, after the stages before it had run (embedding for hours, with a model). `own_shards`: a run-state.json
    records the shards, which are run's own even with a manifest edited by hand (_empty_own_shards)."""
    from cluster_curate.io.artifacts import SHARDS, check_writable, output_inputs
    kinds = {"embed": names.EMBEDDINGS, "cluster": names.CLUSTERS, "select": names.SELECTION, "shard": SHARDS}
    for stage, path in paths.items():
        if stage == "shard" and own_shards and _own_unreadable_shards(path):  # emptied and made again
            continue
        check_writable(path, True, inputs=output_inputs(data), kind=kinds[stage], label=f"run's {stage} output {path}")


def run(data, out: str, *, overwrite: bool = False, force: bool = False, defaulted: frozenset | None = None,
        **options) -> dict:
    """The whole pipeline: embed, cluster, select, shard into the directory `out`, each stage skipped while its
    output is up to date with its inputs and options. `defaulted`: the options in `options` taken at their
    defaults (the CLI's; None: those not in `options`). Returns {"out", "stages",
    "summaries" (per stage run: its --json object), "results" (per stage run: its result and options)}.
    A failed run into a directory it created leaves no directory behind."""
    import shutil

    from cluster_curate.io.artifacts import check_creatable, check_not_input, output_inputs
    from cluster_curate.io.lock import output_lock

    d = Path(out)
    if d.exists() and not d.is_dir():  # check_creatable would name the run-state.json it cannot make inside it
        raise CurateError(f"--out {out}: is a file; run's --out is a directory, for the artifacts of every stage: "
                          "name a directory (a new one is made)")
    check_creatable(d / names.RUN_STATE)
    check_not_input(d, output_inputs(data), f"--out {out}", holds=False)  # a DIR holding its data is fine
    with output_lock(d, "run"):  # `created` looked at under it: before, another run may be making `d`
        created = not d.exists()
        try:
            return _run(data, d, overwrite, force, options, frozenset(options) - (defaulted or frozenset()))
        except BaseException:
            if created and d.is_dir() and not any(d.iterdir()):
                shutil.rmtree(d, ignore_errors=True)
            raise


def _run(data: str, d: Path, overwrite: bool, force: bool, options: dict, given: frozenset) -> dict:
    from cluster_curate import console
    from cluster_curate.io.artifacts import stable_hash
    from cluster_curate.io.mixture import open_inputs

    declared, by_stage = stage_options()
    opts = resolve(declared, options, "run")
    ds = open_inputs(data, read_options(opts))
    named_inputs = preflight(ds, opts, by_stage)
    state = RunState(d)
    specs = stage_specs()
    # each stage's options as its up-to-date check compares them, and the fingerprint of an input an option names
    checked = {stage: _check_options({n: opts[n] for n in by_stage[stage]}, named_inputs)
               for stage in names.STAGES}
    model_files = _model_files(opts)
    if model_files:  # a local --model or --encoder is an input of embed, by its files: saved again, embed runs again
        checked["embed"] = (checked["embed"][0], model_files)
    given_by_stage = {stage: given & set(by_stage[stage]) for stage in names.STAGES}
    if not overwrite:  # other options for a stage already run here: a replacement
        _refuse_replacement(state, d, {stage: state.request(stage, checked[stage][0], None,
                                                            specs[stage].algorithm_version(opts),
                                                            given_by_stage[stage])
                                       for stage in names.STAGES})
    paths = {stage: d / name for stage, name in names.RUN_OUTPUTS.items()}
    _check_stage_outputs(paths, data, "shard" in state.stages)
    if not overwrite and not state.stages:  # outputs of the tool's that no run recorded: a replacement
        _refuse_unrecorded_outputs(state, paths)
    d.mkdir(parents=True, exist_ok=True)
    upstream = ds.fingerprint()  # the raw data's, then each output's
    inputs = {"embed": (data,), "cluster": (str(paths["embed"]),), "select": (str(paths["cluster"]),),
              "shard": (str(paths["select"]), data)}
    shares = _file_shares(ds, data, paths["embed"])
    done, summaries, shown = [], {}, {}  # shown: each stage's (result, options) for its render()
    for stage, spec in specs.items():
        stage_opts = {name: opts[name] for name in by_stage[stage]}
        stage_checked, named_input = checked[stage]  # under "target", the key directories made before keep
        with_shares = {"mixture_shares": shares} if stage == "select" and shares else {}
        parts = (None if named_input is None and not with_shares else
                 {"upstream": upstream, "named": named_input, **with_shares})
        key = upstream if parts is None else stable_hash({"upstream": upstream, "target": named_input, **with_shares})
        if stage == "embed":  # to name the input that changed; not in `key`: directories made before stay up to date
            parts = {**(parts or {"upstream": upstream, "named": named_input}), "data": _data_parts(ds)}
        request = state.request(stage, stage_checked, key, spec.algorithm_version(stage_opts), given_by_stage[stage],
                                parts)
        output = paths[stage]
        t0, warned = time.monotonic(), len(console.WARNINGS)
        why = state.stale(stage, request, output)
        if why is None:
            if stage == "select":
                _check_selection_fills_a_step(output, opts)
            state.settle(stage)
            done.append({"stage": stage, "status": "up to date", "seconds": 0.0, "output": str(output)})
        else:
            if stage == "embed" and stage not in state.stages and not overwrite:
                _check_resumable(output, stage_opts)  # before "not finished before" is said
            console.info(f"run: {stage}: {why}")
            extra = {"resume": True} if stage == "embed" else {}
            if stage == "cluster" and stage_opts.get("kinds") not in (None, "none"):  # it reads the rows' texts
                extra = {"data": data, **{o.name: opts[o.name] for o in DATASET_OPTIONS}}  # as run reads them
            if stage == "select" and shares:  # the mixture file's bounds as they are now, not as embed recorded them
                extra = {"data": data}
            # an embed no run recorded keeps the committed chunks of another plan without --overwrite (an interrupted
            # first run's, or an `embed` command's: the same plan's are resumed), as `embed --resume` does
            replace = overwrite or stage != "embed" or stage in state.stages
            with state.remaking(stage, output):
                if stage == "shard" and stage in state.stages:
                    _empty_own_shards(output)
                try:
                    result = spec.function(*inputs[stage], out=str(output), overwrite=replace, force=force,
                                           **stage_opts, **extra, **_stage_extra(spec))
                except DataChanged as e:  # its advice (--data, --force) is a stage command's, not run's
                    raise CurateError(f"{e.source}: changed while run was running (after embed read it); "
                                      "run the same command again: the stages run again on the data as it is now") \
                        from None
            if stage == "select":  # not recorded when too small: the rerun with a larger budget needs no --overwrite
                _check_selection_fills_a_step(output, opts)
            state.record(stage, request, output)
            seconds = round(time.monotonic() - t0, 2)
            # each stage's object is the one its own command prints with --json
            summaries[stage] = console.json_object(stage, spec.summary(result), seconds,
                                                   console.WARNINGS[warned:])
            shown[stage] = (result, dict(stage_opts, out=str(output)))
            done.append({"stage": stage, "status": "ran", "seconds": seconds, "output": str(output), "reason": why})
        upstream = output_fingerprint(stage, output)
    return {"out": str(d), "stages": done, "summaries": summaries, "results": shown}


def as_json(result: dict) -> dict:
    return {k: result[k] for k in ("out", "stages", "summaries")}


def render(result: dict, options: dict) -> None:
    from cluster_curate import console
    specs = stage_specs()
    for stage, (stage_result, stage_opts) in result["results"].items():
        specs[stage].render(stage_result, stage_opts)
    console.summary("run", {"out": result["out"]}
                    | {s["stage"]: f"{s['status']} ({s['seconds']} s)" + (f": {s['reason']}" if "reason" in s else "")
                       for s in result["stages"]})


SPEC = CommandSpec(
    "run", run, (Argument("data", nargs=-1),), OWN_OPTIONS + tuple(stage_options()[0]), render, as_json=as_json,
    extra={"defaulted": cli_defaulted},
    short_help="The whole pipeline in one command, resumable.",
    help="""The whole pipeline in one command: embed, cluster, select, shard, with artifacts kept in OUT.

    \b
    OUT/embeddings.parquet  OUT/clusters.parquet  OUT/selection.parquet  OUT/shards/
    Re-running skips every stage whose output is up to date with its inputs and options (recorded in
    OUT/run-state.json); after an interruption it continues where it stopped (embed resumes its committed
    chunks). Options are those of the four subcommands; --seed seeds them all.

    \b
    Example:
      cluster-curate run train.jsonl --out curated/ --fraction 0.31 --num-shards 8 --micro-batch-size 4
      cluster-curate run math.jsonl code.parquet chat.json --out curated/ --fraction 0.31 --num-shards 8
    """)
