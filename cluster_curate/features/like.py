"""Which embeddings share a feature space (`embed TARGET --like POOL`, `select --target`): pure functions of the
artifacts' recorded `params` (docs/architecture.md: stages touch no files; commands/embed_parts.prepare_like
loads the pool's fitted state).

A feature space is more than its options: `text` is the pool's fitted vocabulary, IDF and SVD basis, the proxy
is the one trained on the pool, and the projections of model features are drawn from the recorded seed. So a
target is in the pool's space when it was embedded --like that very artifact (its fingerprint), or — only when
nothing in the space was fitted on the pool — with the same space-defining options.
"""

from __future__ import annotations

from cluster_curate.errors import CurateError

# The recorded `embed` params that define the space (others, e.g. `text_sample`, only say how it was fitted)
SPACE_PARAMS = ("model", "model_fingerprint", "features", "feature_weights", "dim", "dims", "pool", "layers",
                "checkpoints", "text_field", "text_weighting", "max_length", "seed", "proxy_key")
# the `embed` options --like takes from the pool (param name = option name)
LIKE_OPTIONS = ("features", "feature_weights", "dim", "pool", "layers", "text_field", "text_weighting",
                "text_sample", "max_length", "seed")


def space_params(params: dict) -> dict:
    return {k: params.get(k) for k in SPACE_PARAMS}


def like_record(pool_path, pool_meta) -> dict:
    """What a target embedded --like the pool records about it (`params['like']`)."""
    return {"path": str(pool_path), "fingerprint": pool_meta.fingerprint}


def fitted_on_pool(params: dict) -> str | None:
    """What of the space was fitted on the pool's own data (None when nothing was): the state of a feature kind
    without a model (features/embed.FEATURE_KINDS, e.g. the text basis), or the proxy."""
    from cluster_curate.features.embed import FEATURE_KINDS
    for kind in params.get("features") or []:
        if kind in FEATURE_KINDS.names and not FEATURE_KINDS.get(kind).uses_model:
            return f"{kind} feature's fitted state"
    if str(params.get("model") or "").startswith("proxy"):
        return "proxy model"
    return None


def check_like(pool_path, params: dict) -> None:
    """What `embed --like` cannot reproduce, refused before any work."""
    features = params.get("features")
    if not isinstance(features, list) or not features:
        raise CurateError(f"{pool_path}: field features: not recorded (not made by `embed`?): cannot reproduce its "
                          "feature space")
    if "loss-trajectory" in features:
        raise CurateError(f"{pool_path}: --features loss-trajectory: embedding other data --like it is not supported "
                          "(its checkpoint models are not recorded in full)")
    from cluster_curate.io.lineage import model_fingerprint
    semantic = params.get("semantic") or {}
    for flag, spec, recorded in (("--model", params.get("model"), params.get("model_fingerprint")),
                                 ("--encoder", semantic.get("encoder"), semantic.get("files"))):
        if recorded and model_fingerprint(spec) != recorded:
            raise CurateError(f"{pool_path}: its {flag} {spec} is not the one it was embedded with (its files changed "
                              "since, or are gone): its feature space cannot be reproduced")


def same_space(pool_meta, target_meta, *, target_name: str = "target") -> None:
    """Raise a one-line CurateError unless the target's embeddings are in the pool's feature space."""
    like = target_meta.params.get("like")
    if like and like.get("fingerprint") == pool_meta.fingerprint:
        return
    if like:
        raise CurateError(f"{target_name}: embedded --like {like.get('path')}, another embeddings artifact than the "
                          "pool's (its fingerprint differs): not the pool's feature space")
    what = fitted_on_pool(pool_meta.params)
    if what:
        raise CurateError(f"{target_name}: not embedded in the pool's feature space (the pool's {what} was fitted on "
                          "the pool): embed it with `embed TARGET --like POOL_EMBEDDINGS`, or pass the raw data")
    pool_space, target_space = space_params(pool_meta.params), space_params(target_meta.params)
    for k in SPACE_PARAMS:
        if pool_space[k] != target_space[k]:
            raise CurateError(f"{target_name}: field {k}: {target_space[k]!r} differs from the pool's "
                              f"{pool_space[k]!r}: not the pool's feature space (embed it with `embed TARGET --like "
                              "POOL_EMBEDDINGS`)")
