"""The phases of `embed` (commands/embed.py): scan the data, prepare the models and fitted featurizers
(shared by every process through files beside the output), compute the features chunk by chunk, finish."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cluster_curate.errors import CurateError, counted
from cluster_curate.io import names
from cluster_curate.io.artifacts import sidecar_path, stable_hash
from cluster_curate.options import recorded


def scan(run, read_options) -> None:
    """Pass 1: parse every row (bad input fails here, before any model work); count rows per chunk."""
    import numpy as np
    t0 = time.perf_counter()

    from cluster_curate.exact_dedup import example_key, first_of_each, same_answer
    from cluster_curate.io.mixture import Mixture, open_inputs
    run.ds = ds = open_inputs(run.data, read_options)
    if isinstance(ds, Mixture):  # inputs that disagree on a column's type fail here, before any model work
        ds.check_columns()
        pairs = [n for n, d in zip(ds.names, ds.datasets) if d.field_map.rejected]
        if 0 < len(pairs) < len(ds.names) and run.layout.leader:  # a trap that export alone would spring, late
            from cluster_curate import console
            from cluster_curate.layouts import mixed_pairs_note
            console.warn(mixed_pairs_note(pairs, [n for n in ds.names if n not in pairs]), once=True)
    commit_every = run.opts["commit_every"]
    ids, keys, same = [], [], []
    from cluster_curate import console
    # no line before it: a bad row's error stays the one line on stderr; a JSON file's count is known after it
    with console.progress("embed: read the data", total=ds.rows, quiet_when_short=True) as bar:
        for batch in ds.iter_batches():
            ids += [ex.id for ex in batch.examples]
            same += [ex.id for ex in batch.examples if same_answer(ex.response, ex.rejected)]
            if not run.opts["keep_duplicates"]:
                keys += [example_key(ex.prompt, ex.response, ex.rejected) for ex in batch.examples]
            bar.advance(batch.num_rows)
    ids = np.asarray(ids, dtype=np.int64)
    if keys:  # exact copies: only the lowest id of each is embedded (and so can be selected)
        keep, copy_of = first_of_each(ids, keys)
        run.copies = np.sort(ids[~keep])
        if isinstance(ds, Mixture) and run.layout.leader and (~keep).any():
            note = copies_across_inputs(ds.names, ds.offsets(), ids[~keep], copy_of[~keep])
            if note:
                console.warn(note)
        ids = ids[keep]
        ds.skip_ids = frozenset(run.copies.tolist())
    # the embedded pairs whose two answers are the same
    run.same_answer = np.setdiff1d(np.asarray(same, np.int64), np.asarray(run.copies, np.int64))
    total = int(ds.rows or 0)
    n_chunks = -(-total // commit_every) if total else 0
    per_chunk = np.bincount(ids // commit_every, minlength=n_chunks).astype(np.int64) if ids.size else \
        np.zeros(n_chunks, dtype=np.int64)
    run.parsed, run.total_rows, run.per_chunk, run.record = int(ids.size), total, per_chunk, ds.record()
    run.scan_s = time.perf_counter() - t0
    parsed = run.parsed
    if parsed == 0 and not ds.rejects:
        raise CurateError(f"{ds.source}: no row parsed; nothing to embed")
    if parsed == 0:  # every row bad: listed in the rejects file, as a run that goes on lists them (one process)
        listed = ""
        if not run.layout.multi:
            path = sidecar_path(run.out, names.REJECTS)
            write_rejects(path, [r.to_dict() for r in ds.rejects], [])
            listed = f"; listed in {path}"
        n = len(ds.rejects)
        every = "its only row is a bad row" if n == 1 else f"all {n:,} rows are bad rows"
        raise CurateError(f"{ds.source}: {every}, skipped (--on-bad-row skip): nothing to embed; "
                          f"{'the row' if n == 1 else 'the first'}: {ds.rejects[0]}{listed}")


def write_rejects(path, bad_rows: list[dict], skipped_rows: list[dict]) -> bool:
    """The rows reported instead of embedded, in id order, to `path` (JSON lines: a bad row's reject, or a row
    that had nothing to embed: no response token for the model, no token for the encoder; with its `kind`); an old
    list there is removed when there is none. Returns whether there was any."""
    import json

    from cluster_curate.io.writer import atomic_write_bytes
    reported = [dict(r, kind="bad row") for r in bad_rows] + [dict(r, kind="nothing to embed")
                                                             for r in skipped_rows]
    if reported:
        reported.sort(key=lambda r: r["id"])
        atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in reported).encode())
    elif path.exists():
        path.unlink()
    return bool(reported)


PROXY_SALT = 1  # salts tell the seeded samples apart: the proxy's warm-up 1, the text basis 2 (features/text.py)


def copies_across_inputs(names_: list[str], first_ids, copies, kept) -> str | None:
    """The warning for a mixture's rows left out as exact copies of another input's rows (`copies`, each a copy of
    the kept id in `kept`): they count as that input's, whose floor or cap then bounds them (None: no such row)."""
    import numpy as np
    src_copy, src_kept = (np.searchsorted(first_ids, np.asarray(x), side="right") - 1 for x in (copies, kept))
    across = src_copy != src_kept
    if not across.any():
        return None
    pairs, n = np.unique(np.stack([src_copy[across], src_kept[across]]), axis=1, return_counts=True)
    said = "; ".join(f"{counted(int(k), 'row')} of input {names_[a]} {'is a copy' if k == 1 else 'are copies'} of "
                     f"rows of input {names_[b]}" for (a, b), k in zip(pairs.T, n))
    return (f"exact copies across inputs, embedded once as the first input's rows: {said} (a share bound on that "
            "input counts them; --keep-duplicates keeps every copy)")


def _keys(ids, seed: int, salt: int):
    from cluster_curate.features.embed import sample_keys
    return sample_keys(ids, seed * 1000003 + salt)


def sample(ds, k: int, seed: int, salt: int, label: str = "sample") -> list:
    """Pass 2: a seeded uniform sample of k parsed examples (the k smallest keys), in id order; `label` names
    what it is for on its progress bar."""
    import numpy as np

    from cluster_curate import console
    from cluster_curate.features.embed import BottomK
    keep = BottomK(k)
    with console.progress(f"{label}: draw a {k:,}-row sample", total=ds.rows, quiet_when_short=True) as bar:
        for batch in ds.iter_batches():
            bar.advance(batch.num_rows)
            if not batch.examples:
                continue
            keys = _keys(np.array([ex.id for ex in batch.examples]), seed, salt)
            for ex, key in zip(batch.examples, keys.tolist()):
                keep.add(key, ex.id, ex)
    return keep.smallest(k)


def sample_ids(ids, k: int, seed: int, salt: int):
    """The ids of the examples `sample` takes, given every parsed example's id (e.g. an embeddings artifact's id
    column): which rows the proxy warmed up on (salt PROXY_SALT), so a reader can tell its loss on them apart."""
    import numpy as np
    ids = np.asarray(ids)
    return np.sort(ids[np.lexsort((ids, _keys(ids, seed, salt)))[:k]])  # ties as BottomK: the lower id


@dataclass
class Models:
    fm: object = None
    proxy_dir: object = None
    warmup_s: float = 0.0
    model_name: str | None = None
    model_fingerprint: str | None = None  # a local --model's files (io/lineage.model_fingerprint)
    trajectory: list = field(default_factory=list)
    trajectory_names: list = field(default_factory=list)
    featurizers: dict = field(default_factory=dict)
    prepare_s: float = 0.0
    max_length: int | None = None  # the model features': --max-length, at most the models' position limit


def prepare(run) -> Models:
    """The model (the proxy, trained here when needed), the checkpoint models, the fitted featurizers."""
    from cluster_curate import console
    from cluster_curate.io import proxy_store as store
    from cluster_curate.features.embed import FEATURE_KINDS, MODEL_FEATURES
    m, opts = Models(), run.opts
    t_load = time.perf_counter()
    if any(f in MODEL_FEATURES for f in run.features):
        from cluster_curate.features.models import load_model, resolve_device
        from cluster_curate.io.lineage import model_fingerprint
        if opts["model"] == "proxy":
            m.proxy_dir, m.warmup_s = _proxy(run)
            m.fm = store.load_proxy(m.proxy_dir, device=resolve_device(run.device))
            m.model_name = "proxy"
        elif store.is_proxy_dir(opts["model"]):
            m.proxy_dir = opts["model"]
            m.fm = store.load_proxy(m.proxy_dir, device=resolve_device(run.device))
            m.model_name = f"proxy:{opts['model']}"
        else:
            m.fm = load_model(opts["model"], device=run.device, dtype=opts["dtype"],
                              trust_remote_code=opts["trust_remote_code"], features=run.features)
            m.model_name, m.model_fingerprint = opts["model"], model_fingerprint(opts["model"])
        if "loss-trajectory" in run.features:
            m.trajectory, m.trajectory_names = _trajectory(opts, m.proxy_dir, m.fm)
        from cluster_curate.features.models import settle_max_length
        m.max_length = settle_max_length(run.opts["max_length"], [m.fm, *m.trajectory])
    for kind in run.features:
        entry = FEATURE_KINDS.get(kind)
        if not entry.uses_model:
            m.featurizers[kind] = entry.prepare()((LikeContext if run.like else PrepareContext)(run, kind))
            if getattr(m.featurizers[kind], "notice", None):  # e.g. a causal LM used as an encoder
                console.warn(m.featurizers[kind].notice)
    m.prepare_s = time.perf_counter() - t_load
    return m


def _cut_rows_note(run, m: Models, cut: int) -> str:
    """The warning for the rows the model features saw cut (to --max-length, or to the model's position limit)."""
    given, used = run.opts["max_length"], m.max_length
    limit = (f"--max-length {given} tokens" if used == given
             else f"the model's position limit, {used} tokens (below --max-length {given})")
    return (f"{cut} row(s) longer than {limit}: the model's features see them cut (the prompt's start first); "
            "their n_tokens count them whole, as a trainer reads them")


def _zero_rows_note(n: int, ids: list, reasons: dict) -> str:
    """The warning for the rows embedded as all-zero vectors (counted over every chunk; `ids`: the first few this
    process computed, none when an --resume kept them all; `reasons`: the text feature's reason -> rows, of the rows
    this process computed, features/text.TextFeaturizer.zero_reason)."""
    if len(reasons) == 1:
        why = f": their text {next(iter(reasons))}"
    else:
        why = "".join(f"; {counted(k, 'row')} whose text {reason}" for reason, k in sorted(reasons.items()))
    return (f"{n} row(s) have an all-zero embedding{why}; kept, but cluster finds them similar to no centroid"
            f"{ids_shown(ids, n)}")


def _encoder_cut_note(run, cut: int, ids: list, sem: dict) -> str:
    """The warning for the rows the encoder saw cut to its max length (`ids`: the first few this process computed),
    as _cut_rows_note's for the causal LM's."""
    given = run.opts["max_length"]
    limit = (f"--max-length {given} tokens" if sem["max_length"] < sem["model_max_length"]
             else f"the encoder's max length, {sem['max_length']} tokens{above_encoder_limit(given, sem)}")
    return (f"{cut} row(s) longer than {limit}: semantic embeds them cut (on the {sem['truncation_side']}, as the "
            f"encoder's tokenizer cuts){ids_shown(ids, cut)}")


def above_encoder_limit(given: int | None, sem: dict) -> str:
    """`, below --max-length N` where the user asked for more than the encoder reads (it cannot read more); not
    for the default, which is the model features' length and never the encoder's."""
    from cluster_curate.features.embed import DEFAULT_MAX_LENGTH
    return f", below --max-length {given}" if given not in (None, DEFAULT_MAX_LENGTH) and \
        given > sem["model_max_length"] else ""


def ids_shown(ids: list, n: int) -> str:
    """` (ids 3, 7, ...)`: the first ids of the `n` rows a warning names (none: an --resume kept them all)."""
    return f" (ids {', '.join(map(str, ids))}{', ...' if n > len(ids) else ''})" if ids else ""


class _Lazy:
    """A progress bar opened on first use (its total is only known then)."""

    def __enter__(self):
        from contextlib import ExitStack
        self._stack, self._bar = ExitStack(), None
        return self

    def bar(self, description, total, unit):
        from cluster_curate import console
        if self._bar is None:
            self._bar = self._stack.enter_context(console.progress(description, total=total, unit=unit))
        return self._bar

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)


def _proxy(run):
    """Train the proxy on a seeded sample (the leader of each piece, when no matching one is saved beside the
    output), then every process loads it from disk so all use the same weights. Returns (dir, seconds)."""
    from cluster_curate import distributed
    from cluster_curate.features import proxy as P
    from cluster_curate.io import proxy_store as store
    opts = run.opts["proxy"]
    directory = sidecar_path(run.out, names.PROXY)
    from cluster_curate.features.embed import FEATURES_VERSION
    key = stable_hash({"dataset": run.record.get("fingerprint"), "options": opts.__dict__,
                       "algorithm": FEATURES_VERSION})
    seconds = [0.0]

    def ready() -> bool:
        return store.is_proxy_dir(directory) and store.read_proxy_config(directory).get("key") == key

    def train() -> None:
        import tokenizers  # noqa: F401 - library imports are start-up, not warm-up (any model needs them)
        import transformers  # noqa: F401
        from transformers import PreTrainedTokenizerFast  # noqa: F401

        from cluster_curate import console
        from cluster_curate.features.embed import release_free_memory
        from cluster_curate.features.models import resolve_device
        t0 = time.perf_counter()
        chosen = sample(run.ds, opts.sample_size(run.parsed), opts.seed, salt=PROXY_SALT, label="proxy")
        with _Lazy() as lazy:
            def on_step(step, total, loss):
                lazy.bar("proxy warm-up", total, "steps").advance(1)
            trained = P.train_proxy(chosen, opts, device=resolve_device(run.device), on_step=on_step,
                                    dataset_rows=run.parsed, check_kept=lambda kept, whose: check_kept_checkpoints(
                                        run.opts, run.features, kept, whose), warn=console.warn)
        # Job-array pieces started together may all train it (deterministically): the first one saved wins.
        if not ready():
            store.save_proxy(trained, directory, extra={"key": key, "dataset": run.record})
        seconds[0] = time.perf_counter() - t0
        del chosen
        import gc
        gc.collect()
        release_free_memory()  # the sample and the tokenizer trainer's buffers, before the feature pass
        console.info(f"proxy: trained on {console.counted(trained.log['rows'], 'row')}, "
                     f"{console.counted(trained.log['steps'], 'step')} in "
                     f"{seconds[0]:.1f}s (tokenizer {trained.log['tokenizer_seconds']:.1f}s, loss "
                     f"{trained.log['loss_first']:.2f} -> {trained.log['loss_last10']:.2f}); saved to {directory}")

    distributed.leader_prepares(run.layout, ready, train)
    if not store.is_proxy_dir(directory):  # a job-array piece whose leader did not train (cannot happen) or a race
        raise CurateError(f"{directory}: the proxy was not saved")
    return directory, seconds[0]


@dataclass
class PrepareContext:
    """What a feature kind's `prepare(context)` gets (features/embed.FEATURE_KINDS): the command's options,
    the parsed row count, the dataset's fingerprint, a seeded sample, and state shared by every process."""
    run: object
    kind: str

    @property
    def opts(self) -> dict:
        return self.run.opts

    @property
    def parsed(self) -> int:
        return self.run.parsed

    @property
    def dataset_fingerprint(self) -> str | None:
        return self.run.record.get("fingerprint")

    @property
    def device(self):
        """Where the run computes (a featurizer with a model of its own loads it there)."""
        return self.run.device

    def sample(self, k: int, salt: int) -> list:
        """A seeded uniform sample of k parsed examples, in id order (`salt` tells apart the kinds' samples)."""
        return sample(self.run.ds, k, self.opts["seed"], salt, label=self.kind)

    def shared(self, key: dict, build) -> bytes:
        """Bytes made once, by the leader of this piece, unless the ones beside the output have this key:
        `build()` runs there and its bytes go to the sidecar `<out>.<kind>.npz` (the key to `<kind>.key`);
        every process then reads them. The state of the artifact in place (`--overwrite` with other options) is
        kept as `<kind>.prev.*` until the new artifact is whole (drop_previous_states): an embed stopped before
        leaves the artifact in place with the state it was made with, which `--like` and `select --target` read."""
        import os
        from pathlib import Path

        from cluster_curate import distributed
        from cluster_curate.io.writer import atomic_write_bytes
        assert self.kind in names.FEATURE_STATE_KINDS, self.kind  # so that no input is allowed there (sidecars)
        state, state_key = names.feature_state(self.kind)
        path, key_file = sidecar_path(self.run.out, state), sidecar_path(self.run.out, state_key)
        prev, prev_key = (sidecar_path(self.run.out, s) for s in names.feature_state(self.kind, previous=True))
        digest = stable_hash(key)

        def ready() -> bool:
            return path.exists() and _keyed(key_file, digest)

        def make() -> None:
            if Path(self.run.out).exists() and key_file.exists() and path.exists() and not prev_key.exists():
                os.replace(path, prev)  # the state first, its key last: a key names a whole state
                os.replace(key_file, prev_key)
            atomic_write_bytes(path, build())
            atomic_write_bytes(key_file, digest.encode())

        distributed.leader_prepares(self.run.layout, ready, make)
        return path.read_bytes()


def _keyed(key_file, digest: str) -> bool:
    """Whether a state's key file names the state of this key (`digest`: stable_hash of it)."""
    return key_file.is_file() and key_file.read_text() == digest


def drop_previous_states(out) -> None:
    """The states kept for the artifact an embed --overwrite replaced (PrepareContext.shared): gone once the new
    artifact is whole, the key first (a key names a whole state)."""
    for kind in names.FEATURE_STATE_KINDS:
        state, key = names.feature_state(kind, previous=True)
        sidecar_path(out, key).unlink(missing_ok=True)
        sidecar_path(out, state).unlink(missing_ok=True)


class LikeContext(PrepareContext):
    """`embed --like POOL`: the pool's fitted state (beside the pool's artifact), never a new fit. The kind's key,
    made from the pool's options and dataset, must be the one written with that state: a state re-fitted since
    is refused, as is a missing one."""

    @property
    def dataset_fingerprint(self) -> str | None:
        return self.run.like[1].dataset.get("fingerprint")

    def shared(self, key: dict, build) -> bytes:
        pool = self.run.like[0]
        state, state_key = names.feature_state(self.kind)
        path, key_file = sidecar_path(pool, state), sidecar_path(pool, state_key)
        if not path.is_file():
            raise CurateError(f"{pool}: the pool's {self.kind} state {path} is missing: cannot reproduce its feature "
                              "space")
        digest = stable_hash(key)
        prev, prev_key = (sidecar_path(pool, s) for s in names.feature_state(self.kind, previous=True))
        if not _keyed(key_file, digest):
            if _keyed(prev_key, digest):  # an embed --overwrite of other options stopped before its end
                return prev.read_bytes()
            raise CurateError(f"{path}: not the {self.kind} state {pool} was made with (re-fitted since, or by "
                              "another version?): cannot reproduce its feature space")
        return path.read_bytes()


def checkpoint_items(opts: dict) -> list[str]:
    """--checkpoints A,B,C as its items ([] when it is not given)."""
    return [s.strip() for s in opts["checkpoints"].split(",")] if opts["checkpoints"] else []


def check_kept_checkpoints(opts: dict, features, kept: list[int], whose: str) -> None:
    """The proxy's warm-up checkpoints `kept` (known before it trains, `whose` says how) against what reads them:
    --checkpoints' step numbers must be among them, and a loss-trajectory of its own checkpoints needs two."""
    from cluster_curate.features.proxy import check_checkpoint_steps
    items = checkpoint_items(opts)
    check_checkpoint_steps([int(s) for s in items if s.isdigit()], kept, whose)
    if "loss-trajectory" in features and not items:
        check_trajectory_points(kept, f"{whose} keeps")


def check_trajectory_points(points: list, said: str) -> None:
    """One checkpoint is one loss per row: a feature of one dimension, the same direction for every row once
    normalised, so every row fell in one cluster (a warm-up of one step on a few hundred rows)."""
    if len(points) < 2:
        raise CurateError(f"--features loss-trajectory: {said} one checkpoint ({points[0] if points else 'none'}): "
                          "one loss per row, the same feature for every row once normalised; train the proxy "
                          "longer (--proxy-steps N, N at least --proxy-checkpoints) or give --checkpoints A,B,C")


def _trajectory(opts: dict, proxy_dir, fm):
    """The checkpoint models of `loss-trajectory`: --checkpoints (proxy warm-up steps or model specs),
    else the proxy's own warm-up checkpoints."""
    from cluster_curate.io import proxy_store as store
    from cluster_curate.features.models import load_model, load_tokenizer
    items = checkpoint_items(opts)
    if not items:
        if proxy_dir is None:
            raise CurateError("--features loss-trajectory with a model other than the proxy needs --checkpoints "
                              "A,B,C (model paths or ids)")
        steps = store.proxy_checkpoint_steps(proxy_dir)
        check_trajectory_points(steps, f"{proxy_dir} keeps")
        return [store.load_proxy(proxy_dir, s, device=fm.device) for s in steps], [f"step {s}" for s in steps]
    models, labels = [], []
    for item in items:
        if item.isdigit():
            if proxy_dir is None:
                raise CurateError(f"--checkpoints {item}: a step number only names a warm-up checkpoint of the proxy")
            models.append(store.load_proxy(proxy_dir, int(item), device=fm.device))
        elif store.is_proxy_dir(item):
            models.append(store.load_proxy(item, device=fm.device))
            _check_reads_model_ids(item, models[-1].tokenizer, opts["model"], fm)
        else:  # its tokenizer files first: a checkpoint that cannot read the ids is refused before its weights load
            _check_reads_model_ids(item, load_tokenizer(item, trust_remote_code=opts["trust_remote_code"]),
                                   opts["model"], fm)
            models.append(load_model(item, device=str(fm.device), dtype=opts["dtype"],
                                     trust_remote_code=opts["trust_remote_code"], own_ids=False))
        ids = min(len(fm.tokenizer), fm.vocab_size)  # the ids --model reads (its own rows bound them too)
        if models[-1].vocab_size < ids:  # the tokenizers agree, but its embedding is smaller
            raise CurateError(f"--checkpoints {item}: its embedding has {models[-1].vocab_size:,} rows, fewer than "
                              f"the {ids:,} token ids of --model {opts['model']}'s tokenizer")
        labels.append(item)
    return models, labels


def _check_reads_model_ids(item: str, tokenizer, model: str, fm) -> None:
    """Every checkpoint is fed the token ids of --model's tokenizer (fm's): one with another tokenizer reads other
    words (meaningless losses, silently) or ids past its vocabulary (an IndexError mid-pass)."""
    from cluster_curate.features.models import tokenizer_difference
    why = tokenizer_difference(fm.tokenizer, tokenizer)
    if why:
        raise CurateError(f"--checkpoints {item}: {why} (--model {model}'s), and every checkpoint is fed --model's "
                          f"token ids: pass it as --model too (--model {item}), or give checkpoints made from --model")


def embedder_and_params(run, m: Models):
    """The Embedder of the chosen blocks, and the artifact's recorded params."""
    from cluster_curate import console
    from cluster_curate.features.embed import DEFAULT_TEXT_DIM, Embedder, block_dims, dim_above_hidden, parse_weights
    from cluster_curate.io import proxy_store as store
    o, features = run.opts, run.features
    weights = parse_weights(o["feature_weights"], len(features))
    projectors, lora_dim = {}, None
    if m.fm is not None:
        from cluster_curate.features.extractors import DEFAULT_LORA_DIM, lora_projector
        from cluster_curate.features.projection import derive_seed, random_projection_torch
        for kind in ("gradient", "hidden"):
            if kind in features and o["dim"]:
                projectors[kind] = random_projection_torch(m.fm.hidden_size, o["dim"],
                                                           derive_seed(o["seed"], kind)).to(m.fm.device)
        if "lora-gradient" in features:
            lora_dim = o["dim"] or DEFAULT_LORA_DIM
            projectors["lora-gradient"] = lora_projector(m.fm, lora_dim, o["seed"], o["layers"])
    text, semantic = m.featurizers.get("text"), m.featurizers.get("semantic")
    widened = None if run.like else dim_above_hidden(features, o["dim"], m.fm.hidden_size if m.fm else None)
    if widened:  # not of --like's: its --dim is the pool's, which the user cannot change there
        console.warn(widened, once=True)
    dims = block_dims(features, hidden_size=m.fm.hidden_size if m.fm else None, dim=o["dim"],
                      n_checkpoints=len(m.trajectory), text_dim=text.dim if text else DEFAULT_TEXT_DIM,
                      lora_dim=lora_dim, semantic_dim=semantic.dim if semantic else None)
    embedder = Embedder(features=features, fm=m.fm, featurizers=m.featurizers, trajectory=m.trajectory,
                        projectors=projectors, weights=weights, pool=o["pool"], layers=o["layers"],
                        max_length=m.max_length if m.fm is not None else o["max_length"],
                        batch_tokens=o["batch_tokens"], dims=dict(dims))
    fm = m.fm
    from cluster_curate.commands.embed import OPTIONS
    params = {**recorded(OPTIONS, o), "exact_duplicates": _copies_record(run),
              "model": m.model_name, "features": features, "feature_weights": weights if len(features) > 1 else None,
              "dims": dims, "dim_total": int(sum(dims.values())), "checkpoints": m.trajectory_names or None,
              "text_weighting": o["text_weighting"] if text else None,
              "text_sample": o["text_sample"] if text else None,
              "dtype": str(fm.dtype).replace("torch.", "") if fm else None,
              "proxy": dict(o["proxy"].__dict__) if m.model_name == "proxy" else None,
              "proxy_key": store.read_proxy_config(m.proxy_dir).get("key") if m.proxy_dir else None,
              "loss": "mean response-token cross-entropy" if fm else "NaN: no causal LM (semantic has no loss)"
              if semantic else "NaN: no model (text features only)",
              "n_tokens": "model tokens" if fm else N_TOKENS_ENCODER if semantic else N_TOKENS_WORDS}
    if semantic:
        params["semantic"] = semantic.encoder.describe()
    if fm is not None and m.max_length != o["max_length"]:  # what the model read: its position limit
        params["model_max_length"] = m.max_length
    if m.model_fingerprint:  # weights saved again under the same path: another model (--resume, --like, run)
        params["model_fingerprint"] = m.model_fingerprint
    return embedder, params


# what `n_tokens` counts (params["n_tokens"]; select and shard name it in their summaries)
N_TOKENS_ENCODER = ("encoder tokens (the semantic encoder's tokenizer, not the trainer's: shard --tokenizer "
                    "balances exact tokens)")
N_TOKENS_WORDS = "whitespace words (no model tokenizer)"


@dataclass
class Pass:
    output: object
    meta: object
    todo: list
    done_rows: int = 0
    done_tokens: int = 0
    seconds: float = 0.0
    zero_ids: list = field(default_factory=list)  # the first ids of rows embedded as all zeros, by this process
    zero_reasons: dict = field(default_factory=dict)  # why the text feature gave them no value -> rows
    cut_ids: list = field(default_factory=list)  # the first ids of rows an encoder cut, by this process


def feature_pass(run, embedder, params) -> Pass:
    """Pass 3: the features, chunk by chunk, each chunk committed as soon as it is done."""
    from cluster_curate import console, distributed
    from cluster_curate.features.embed import KEPT_COLUMNS, algorithm_version, chunk_table, release_free_memory
    from cluster_curate.io.artifacts import make_meta
    from cluster_curate.io.mixture import with_source_columns
    version = algorithm_version(run.features)
    meta = make_meta(names.EMBEDDINGS, params, {"data": run.record}, run.record, version)
    # what --resume must find unchanged (the columns: chunks committed before KEPT_COLUMNS lack some); not
    # `model_max_length`, which the model decides: a run interrupted before it was recorded resumes
    plan = {"params": {k: v for k, v in params.items() if k != "model_max_length"},
            "dataset": run.record.get("fingerprint"), "algorithm": version, "columns": list(KEPT_COLUMNS)}
    output = distributed.ChunkedOutput(run.out, run.layout, plan, run.opts["commit_every"],
                                       resume=run.opts["resume"], overwrite=run.opts["overwrite"],
                                       options=set(run.opts))
    n_chunks = len(run.per_chunk)
    todo = [c for c in range(n_chunks) if output.todo(c)]
    todo_set = set(todo)
    p = Pass(output, meta, todo)
    t_feat = time.perf_counter()
    with console.progress("embed", total=int(run.per_chunk[todo].sum()) if todo else 0, unit="rows") as bar:
        def on_batch(rows, tokens):
            p.done_rows += rows
            p.done_tokens += tokens
            rate = p.done_tokens / max(time.perf_counter() - t_feat, 1e-9)
            bar.advance(rows, description=f"embed ({rate:,.0f} tokens/s)")

        def flush(chunk, examples):
            if chunk not in todo_set:
                return
            result = embedder.embed(examples, on_batch=on_batch)
            skipped = [{"id": int(i), "reason": r} for i, r in result.skipped]
            if skipped:
                bar.advance(len(skipped))
            zero = result.ids[~result.embedding.any(axis=1)]  # no feature at all: a text of no word ("?")
            p.zero_ids = sorted([*p.zero_ids, *zero.tolist()])[:10]
            if zero.size and "text" in embedder.featurizers:
                _count_zero_reasons(run, embedder.featurizers["text"], examples, zero, p.zero_reasons)
            p.cut_ids = sorted([*p.cut_ids, *result.truncated_ids])[:10]
            # rows cut: by an encoder to its max length, to --max-length for the causal LM's features
            output.commit(chunk, with_source_columns(chunk_table(result), run.record), skipped,
                          {"truncated": int(result.truncated), "model_cut": int(result.model_cut),
                           "zero_rows": int(zero.size)})
            del result
            release_free_memory()

        current, buf = -1, []
        for batch in run.ds.iter_batches():
            for ex in batch.examples:
                c = output.chunk_of(ex.id)
                if c != current:
                    if current >= 0:
                        flush(current, buf)
                    for gap in range(current + 1, c):  # chunks with no parsed row still get (empty) parts
                        flush(gap, [])
                    current, buf = c, []
                if c in todo_set:
                    buf.append(ex)
        if current >= 0:
            flush(current, buf)
        for gap in range(current + 1, n_chunks):
            flush(gap, [])
    p.seconds = time.perf_counter() - t_feat
    return p


def _count_zero_reasons(run, text, examples: list, zero, reasons: dict) -> None:
    """Why the text feature gave the rows `zero` (ids of `examples`) no value, added up in `reasons`."""
    from cluster_curate.features.text import example_text
    rows = None if run.like else min(run.parsed, run.opts["text_sample"])  # --like: the pool's sample
    wanted = set(zero.tolist())
    for ex in examples:
        if ex.id in wanted:
            reason = text.zero_reason(example_text(ex, text.field), rows)
            reasons[reason] = reasons.get(reason, 0) + 1


LISTED_COPIES = 10000  # ids of dropped exact duplicates recorded in the metadata (the count is always exact)


def _copies_record(run) -> dict:
    """What the metadata says about exact duplicates (copied downstream into every artifact and the manifest)."""
    import numpy as np
    if run.opts["keep_duplicates"]:
        return {"dropped": 0, "kept": True}
    copies = np.asarray(run.copies, dtype=np.int64)
    return {"dropped": int(copies.size), "ids": copies[:LISTED_COPIES].tolist(), "kept": False}


def _per_source(run, bad_ids: list, skipped_ids: list) -> dict:
    """A mixture's inputs, each: its rows in the data = rows embedded + bad rows + exact duplicates left out +
    rows that kept no response token (the select summary's "of N rows" is the embedded count, so that a
    user can tell where an input's other rows went); {} for one dataset."""
    import numpy as np

    from cluster_curate.io.mixture import is_mixture_record, source_index
    if not is_mixture_record(run.record):
        return {}
    inputs = run.record["inputs"]

    def per_input(ids) -> np.ndarray:
        return np.bincount(source_index(run.record, np.asarray(ids, dtype=np.int64)), minlength=len(inputs))

    bad, copies, skipped = per_input(bad_ids), per_input(run.copies), per_input(skipped_ids)
    return {"sources": [{"source": i["name"], "rows_in_data": int(i["rows"]), "bad_rows": int(bad[s]),
                         "exact_duplicates_dropped": int(copies[s]), "skipped_no_response": int(skipped[s]),
                         "rows": int(i["rows"] - bad[s] - copies[s] - skipped[s])} for s, i in enumerate(inputs)]}


def _skipped_note(run, bad_ids: list, rejects_path) -> str:
    """The warning for the bad rows skipped: a mixture's per input, and by what skipped them (--on-bad-row skip, or
    an input's `on_bad_row: skip` in the mixture file, where no flag was given)."""
    import numpy as np

    from cluster_curate.io.mixture import is_mixture_record, source_index
    how = "--on-bad-row skip" if run.opts.get("on_bad_row") == "skip" else "its mixture file's on_bad_row: skip"
    what = counted(len(bad_ids), "bad row")
    if is_mixture_record(run.record):
        inputs = run.record["inputs"]
        per = np.bincount(source_index(run.record, np.asarray(bad_ids, dtype=np.int64)), minlength=len(inputs))
        what = ", ".join(f"{counted(int(n), 'bad row')} of input {inputs[s]['name']}" for s, n in enumerate(per) if n)
    return f"{run.ds.source}: {what} skipped ({how}), so not embedded; listed in {rejects_path}"


def source_losses(src: dict) -> list[str]:
    """Where a mixture input's rows that were not embedded went (one of `_per_source`'s sources), in words."""
    return [counted(src[key], noun) for key, noun in (("bad_rows", "bad row"),
                                                      ("exact_duplicates_dropped", "exact duplicate"),
                                                      ("skipped_no_response", "row without a response token"))
            if src[key]]


def select_target(run) -> str | None:
    """The --target when this run is select's own embedding of it (its raw rows --like the pool, into the
    TARGET_EMBEDDINGS file beside the selection: commands/select.py): target rows, which are never selected, and
    whose skipped bad rows select warns of itself; else None."""
    from pathlib import Path
    if run.like and Path(run.out).name.endswith(f".{names.TARGET_EMBEDDINGS}"):
        return str(run.data)
    return None


def finish(run, m: Models, p: Pass, t_start: float) -> dict:
    """Reported rows, then the artifact; returns the summary."""
    from cluster_curate import console
    from cluster_curate.features.embed import empty_chunk_table
    from cluster_curate.io.mixture import with_source_columns
    layout, output = run.layout, p.output
    mine = [c for c in range(len(run.per_chunk)) if layout.owns(c)]
    skipped_rows, cut = output.skipped_rows(mine), output.counts(mine)  # resumed chunks' too
    bad_rows = [r.to_dict() for r in run.ds.rejects if layout.owns(output.chunk_of(r.id))]
    empty = with_source_columns(empty_chunk_table(int(p.meta.params.get("dim_total", 0))), run.record)
    result = output.finish(p.meta, len(run.per_chunk), empty)
    if result["complete"]:
        drop_previous_states(run.out)
    rejects_path = output.rejects_path()
    reported = write_rejects(rejects_path, bad_rows, skipped_rows)
    dims = p.meta.params["dims"]
    todo_set = set(p.todo)
    summary = {
        "output": result["path"], "process": layout.describe(), "rows": result["rows"],
        "artifact_rows": result["artifact_rows"], "parts": result["parts"], "complete": result["complete"],
        "rows_in_data": run.total_rows, "skipped_no_response": len(skipped_rows), "bad_rows": len(bad_rows),
        "rejects": str(rejects_path) if reported else None, "model": m.model_name or "none",
        "features": list(run.features), "dims": dims, "dim": int(sum(dims.values())),
        "device": str(m.fm.device) if m.fm else str(m.featurizers["semantic"].encoder.device)
        if "semantic" in m.featurizers else "cpu", "chunks_computed": len(p.todo),
        "chunks_resumed": len(mine) - len([c for c in mine if c in todo_set]),
        "seconds": round(time.perf_counter() - t_start, 3), "scan_seconds": round(run.scan_s, 3),
        "warmup_seconds": round(m.warmup_s, 3),
        "prepare_seconds": round(m.prepare_s, 3), "feature_seconds": round(p.seconds, 3),
        "rows_per_s": round(p.done_rows / max(p.seconds, 1e-9), 1),
        "tokens_per_s": round(p.done_tokens / max(p.seconds, 1e-9), 1),
    }
    copies = _copies_record(run)
    summary["exact_duplicates_dropped"] = copies["dropped"]
    if result["parts"] == 1 and result["complete"]:  # one process embedded all of it: each input's rows add up
        summary.update(_per_source(run, [r["id"] for r in bad_rows], [r["id"] for r in skipped_rows]))
    target = select_target(run)
    if bad_rows and not target:  # this process's, else told only in a summary line (select warns of a --target's)
        console.warn(_skipped_note(run, [r["id"] for r in bad_rows], rejects_path))
    for src in summary.get("sources", []):
        if src["rows_in_data"] and not src["rows"]:  # a whole input gone, which one warning above does not tell
            console.warn(f"source {src['source']}: none of its {counted(src['rows_in_data'], 'row')} embedded "
                         f"({', '.join(source_losses(src))}), so nothing of it can be selected")
    # the copies and the same-answer pairs are counted over the whole data (every process scans it all): the leader
    # of each piece says them, once per command, not once per torchrun rank
    if copies["dropped"] and layout.leader:
        shown = ", ".join(str(i) for i in copies["ids"][:10]) + (", ..." if copies["dropped"] > 10 else "")
        said = f"{copies['dropped']} exact duplicate(s) (same normalised prompt and response as a lower id)"
        if target:  # rows of the target, not of the pool: the target counts each once
            console.warn(f"--target {target}: {said} left out of the target: its ids {shown}")
        else:
            console.warn(f"{said} not embedded, so never selected: ids {shown} (the first {LISTED_COPIES} in the "
                         "artifact's metadata; --keep-duplicates keeps them)")
    if m.proxy_dir is not None:
        summary["proxy"] = str(m.proxy_dir)
    if cut.get("model_cut"):  # else silent: what the model saw of them is not all the trainer will
        console.warn(_cut_rows_note(run, m, cut["model_cut"]))
    if cut.get("zero_rows"):  # kept (a row, not a bad one), but no cluster is near them: said here, not first there
        console.warn(_zero_rows_note(cut["zero_rows"], p.zero_ids, p.zero_reasons))
    sem = p.meta.params.get("semantic")
    if sem and cut.get("truncated"):  # as the causal LM's cut rows: what the encoder saw of them is not all
        console.warn(_encoder_cut_note(run, cut["truncated"], p.cut_ids, sem))
    if sem:
        summary["encoder"] = sem["encoder"]
        summary["semantic"] = (f"{sem['pooling']} pooling ({sem['pooling_from']}), max length {sem['max_length']} "
                               f"(model {sem['model_max_length']}{above_encoder_limit(run.opts['max_length'], sem)}), "
                               f"cut on the {sem['truncation_side']}; "
                               f"{cut.get('truncated', 0)} row(s) cut by this process")
        summary["n_tokens"] = p.meta.params["n_tokens"]
    if run.same_answer.size and layout.leader:  # kept: a well-formed row (the user may drop them by their ids)
        shown = ", ".join(map(str, run.same_answer[:10].tolist())) + (", ..." if run.same_answer.size > 10 else "")
        console.warn(f"{run.same_answer.size} preference pair(s) whose chosen and rejected answers are the same "
                     f"(spacing aside): a DPO loss on them is zero, they cost tokens and teach nothing; kept (ids "
                     f"{shown}; `inspect` counts them)")
    if skipped_rows:
        shown = ", ".join(str(r["id"]) for r in skipped_rows[:10])
        why = "; ".join(sorted({r["reason"] for r in skipped_rows})[:2])  # the model's cut, the encoder's tokens
        console.warn(f"{len(skipped_rows)} row(s) had nothing to embed ({why}) and were not embedded (ids {shown}"
                     f"{', ...' if len(skipped_rows) > 10 else ''}); listed in {rejects_path}")
    return summary
