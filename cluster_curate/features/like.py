"""Embedding other data in an existing embeddings artifact's feature space (`embed TARGET --like POOL`).

A feature space is more than its options: `text` is the pool's fitted vocabulary, IDF and SVD basis (saved
beside the pool's artifact), the proxy is the one trained on the pool (saved beside it too), and the
projections of model features are drawn from the recorded seed. `embedder_like` rebuilds exactly that
Embedder from the pool artifact's metadata and sidecar files, or refuses (CurateError) when it cannot:
a missing or replaced sidecar, a feature whose state was not saved. `same_space` tells whether two
embeddings artifacts are in one space (a target checked by `select --target`).
"""

from __future__ import annotations

from pathlib import Path

from cluster_curate.errors import CurateError

# The recorded `embed` params that define the space (the others, e.g. `text_sample`, only say how it was fitted)
SPACE_PARAMS = ("model", "features", "feature_weights", "dim", "dims", "pool", "layers", "checkpoints",
                "text_field", "text_weighting", "max_length", "seed", "dtype", "proxy_key")


def space_params(params: dict) -> dict:
    return {k: params.get(k) for k in SPACE_PARAMS}


def like_record(pool_path, pool_meta) -> dict:
    """What a target embedded --like the pool records about it (`params['like']`)."""
    return {"path": str(pool_path), "fingerprint": pool_meta.fingerprint, "space": space_params(pool_meta.params)}


def same_space(pool_meta, target_meta, *, target_name: str = "target") -> None:
    """Raise a one-line CurateError unless the target was embedded in the pool's feature space: with `embed
    --like` from this pool (its fingerprint), or — only when nothing in the space was fitted on the pool
    (no `text`, no proxy) — with the same space-defining options."""
    like = (target_meta.params or {}).get("like")
    if like and like.get("fingerprint") == pool_meta.fingerprint:
        return
    pool_space, target_space = space_params(pool_meta.params), space_params(target_meta.params)
    fitted = "text" in (pool_space["features"] or []) or pool_space["model"] == "proxy"
    if like:
        raise CurateError(f"{target_name}: embedded --like {like.get('path')}, a different embeddings artifact than "
                          "the pool's (its fingerprint differs): not the pool's feature space")
    if fitted:
        what = "text basis" if "text" in (pool_space["features"] or []) else "proxy model"
        raise CurateError(f"{target_name}: not embedded in the pool's feature space (the pool's {what} was fitted on "
                          "the pool): embed it with `embed TARGET --like POOL_EMBEDDINGS`")
    diff = [k for k in SPACE_PARAMS if pool_space[k] != target_space[k]]
    if diff:
        k = diff[0]
        raise CurateError(f"{target_name}: field {k}: {target_space[k]!r} differs from the pool's {pool_space[k]!r}: "
                          "not the pool's feature space (embed it with `embed TARGET --like POOL_EMBEDDINGS`)")


def _text_featurizer(pool_path, params: dict, dataset_fingerprint):
    from cluster_curate.features.text import TextFeaturizer
    from cluster_curate.io.artifacts import sidecar_path, stable_hash
    basis = sidecar_path(pool_path, "text.npz")
    if not basis.is_file():
        raise CurateError(f"{pool_path}: the pool's text basis {basis} is missing: cannot reproduce its feature space")
    feat = TextFeaturizer.load(basis)
    key_file = sidecar_path(pool_path, "text.key")
    # the key `embed` wrote with the basis: a basis re-fitted by another embed to the same place is refused
    key = stable_hash({"dataset": dataset_fingerprint, "dim": feat.dim, "field": params.get("text_field"),
                       "seed": params.get("seed"), "weighting": params.get("text_weighting"),
                       "sample": params.get("text_sample"), "max_features": TextFeaturizer.max_features})
    if not key_file.is_file() or key_file.read_text() != key:
        raise CurateError(f"{basis}: not the text basis this embeddings artifact was made with (re-fitted since?): "
                          "cannot reproduce its feature space")
    if (feat.field, feat.weighting) != (params.get("text_field"), params.get("text_weighting")):
        raise CurateError(f"{basis}: field text_field/text_weighting differ from the artifact's: cannot reproduce "
                          "its feature space")
    return feat


def _feature_model(pool_path, params: dict, device, dtype, trust_remote_code: bool):
    from cluster_curate.features import proxy as P
    from cluster_curate.features.models import load_model, resolve_device
    from cluster_curate.io.artifacts import sidecar_path
    model = params.get("model")
    if model == "proxy" or (isinstance(model, str) and model.startswith("proxy:")):
        directory = sidecar_path(pool_path, "proxy") if model == "proxy" else Path(model[len("proxy:"):])
        if not P.is_proxy_dir(directory):
            raise CurateError(f"{pool_path}: the pool's proxy model {directory} is missing: cannot reproduce its "
                              "feature space")
        if params.get("proxy_key") and P.read_proxy_config(directory).get("key") != params["proxy_key"]:
            raise CurateError(f"{directory}: not the proxy this embeddings artifact was made with (re-trained "
                              "since?): cannot reproduce its feature space")
        return P.load_proxy(directory, device=resolve_device(device))
    return load_model(model, device=device, dtype=dtype or params.get("dtype"), trust_remote_code=trust_remote_code)


def embedder_like(pool_path, *, device=None, dtype=None, trust_remote_code: bool = False, batch_tokens=None):
    """(Embedder, pool meta): the Embedder that made the pool's embeddings artifact, rebuilt from its metadata
    and sidecars. Refuses what it cannot rebuild exactly."""
    from cluster_curate.features.embed import DEFAULT_BATCH_TOKENS, DEFAULT_TEXT_DIM, Embedder, block_dims
    from cluster_curate.io.artifacts import read_meta

    meta = read_meta(pool_path, "embeddings")
    params = meta.params or {}
    features = params.get("features")
    if not isinstance(features, list) or not features:
        raise CurateError(f"{pool_path}: records no --features (not made by `embed`?): cannot reproduce its "
                          "feature space")
    if "loss-trajectory" in features:
        raise CurateError(f"{pool_path}: --features loss-trajectory: embedding other data --like it is not supported "
                          "(its checkpoint models are not recorded in full)")
    text = _text_featurizer(pool_path, params, meta.dataset.get("fingerprint")) if "text" in features else None
    fm, projectors, lora_dim = None, {}, None
    if any(f != "text" for f in features):
        from cluster_curate.features.extractors import DEFAULT_LORA_DIM, lora_projector
        from cluster_curate.features.projection import derive_seed, random_projection_torch
        fm = _feature_model(pool_path, params, device, dtype, trust_remote_code)
        seed, dim = int(params.get("seed") or 0), params.get("dim")
        for kind in ("gradient", "hidden"):  # as `embed` draws them: same width, same derived seed
            if kind in features and dim:
                projectors[kind] = random_projection_torch(fm.hidden_size, dim, derive_seed(seed, kind)).to(fm.device)
        if "lora-gradient" in features:
            lora_dim = dim or DEFAULT_LORA_DIM
            projectors["lora-gradient"] = lora_projector(fm, lora_dim, seed, params.get("layers"))
    dims = block_dims(features, hidden_size=fm.hidden_size if fm else None, dim=params.get("dim"),
                      text_dim=text.dim if text else DEFAULT_TEXT_DIM, lora_dim=lora_dim)
    if params.get("dims") and dict(params["dims"]) != dims:
        raise CurateError(f"{pool_path}: field dims: rebuilt {dims}, recorded {params['dims']}: cannot reproduce "
                          "its feature space")
    weights = params.get("feature_weights") or None
    embedder = Embedder(features=features, fm=fm, text=text, projectors=projectors, weights=weights,
                        pool=params.get("pool") or "all", layers=params.get("layers"),
                        max_length=params.get("max_length"), batch_tokens=batch_tokens or DEFAULT_BATCH_TOKENS,
                        dims=dict(dims))
    return embedder, meta
