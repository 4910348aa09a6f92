"""Per-example features from a FeatureModel and a collated batch (features/models.py: `collate`).

Every extractor is a pure function of (model, batch): an example's features do not depend on which other
examples share its batch nor on how much padding it gets (right padding + attention mask; tested).

* `gradient` (the paper's feature, one forward pass, no backward): g = mean over response positions t of
  (p(gold_{t+1} | ≤t) − 1) · h_t, with h_t the last-layer hidden state the LM head sees. It is the gradient of
  the example's mean response loss with respect to the output-layer rows of the gold tokens. Logits are only
  computed at response positions, in chunks of rows (log-softmax + gather), so no batch × length × vocab
  tensor ever exists.
* `hidden`: mean of the last hidden states over all non-pad tokens (`pool="all"`), or over the positions that
  predict response tokens (`pool="response"`).
* `lora-gradient` (LESS/LoGra): the per-example gradient of the example's mean response loss with respect to
  the weight of each selected `nn.Linear` layer, G_b = Σ_t dy_bt ⊗ x_bt, projected as P_outᵀ G_b P_in without
  ever forming G_b: forward hooks keep x·P_in [B, T, k_in], hooks on the layer outputs receive dy in the single
  backward pass of the batch loss Σ_b loss_b (so each example's gradient is its own) and compute
  (dy·P_out)ᵀ(x·P_in) per example. Only activation gradients are computed, never weight gradients.
  Layers: every `nn.Linear` except the LM head, or those matching `layers` patterns (a pattern with * ? [ is
  a glob that must match the module name or a dotted tail of it, e.g. `layers.1.*proj`; any other pattern
  is a substring of the name, e.g. `q_proj`; the LM head is included only when a pattern names it). Dimension: `dim` is split evenly over the L layers (the first dim mod L layers get one more);
  a layer with d_l dims uses k_in = ⌈√d_l⌉, k_out = ⌈d_l / k_in⌉ and keeps the first d_l entries of the
  k_out × k_in projected gradient (rescaled by √(k_in·k_out/d_l)), so E[<φ(G), φ(G')>] = <G, G'> per layer.
  P_in, P_out are seeded Gaussians (projection.py), identical on every machine. Bias gradients are not used.
* `loss-trajectory`: the example's mean response loss (one column; the caller stacks one per checkpoint).

All return {"embedding": float32 [B, D], "loss": float32 [B]} where loss is the mean response-token
cross-entropy. `projector` (an array [H, D], e.g. projection.random_projection) reduces `gradient`/`hidden`
to D dims; for `lora-gradient` it is a `LoraProjector`.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from cluster_curate.errors import CurateError
from cluster_curate.features.models import FeatureModel
from cluster_curate.features.projection import derive_seed, random_projection_torch

FEATURES = ("gradient", "lora-gradient", "hidden", "loss-trajectory")
POOLS = ("all", "response")
DEFAULT_LORA_DIM = 8192          # LESS's projection dimension
LOGIT_CHUNK_ELEMENTS = 1 << 24   # rows per logits chunk = this // vocab (64 MiB of fp32 logits)


# ----------------------------------------------------------------------------------------------- helpers
@dataclass
class _Rows:
    """Positions that predict a response token: batch index, position, gold next token, 1/n of the example."""
    b: Tensor
    t: Tensor
    target: Tensor
    counts: Tensor      # [B] response tokens per example
    inv_n: Tensor       # [N] 1 / counts[b] per row, fp32


def _response_rows(batch: dict) -> _Rows:
    labels = batch["labels"]
    nxt = labels[:, 1:]
    b, t = (nxt != -100).nonzero(as_tuple=True)
    counts = torch.bincount(b, minlength=labels.shape[0])
    if bool((counts == 0).any()):
        bad = [batch["ids"][i] if "ids" in batch else i for i in (counts == 0).nonzero().flatten().tolist()]
        raise ValueError(f"examples {bad} have no response token; encode_examples() reports them instead")
    return _Rows(b=b, t=t, target=nxt[b, t], counts=counts, inv_n=(1.0 / counts.float())[b])


def _chunks(n_rows: int, vocab: int):
    step = max(1, LOGIT_CHUNK_ELEMENTS // max(vocab, 1))
    for start in range(0, n_rows, step):
        yield slice(start, min(n_rows, start + step))


def _logits(fm: FeatureModel, h: Tensor) -> Tensor:
    head = fm.output_layer
    return F.linear(h, head.weight, head.bias).float()


def _per_example_mean(values: Tensor, rows: _Rows, batch_size: int) -> Tensor:
    """Mean over each example's response rows of values [N, ...] -> [B, ...] (fp32)."""
    out = torch.zeros((batch_size, *values.shape[1:]), dtype=torch.float32, device=values.device)
    out.index_add_(0, rows.b, values.float())
    return out / rows.counts.to(out.dtype).view(-1, *([1] * (values.dim() - 1)))


def _project(emb: Tensor, projector) -> Tensor:
    if projector is None:
        return emb
    p = projector if isinstance(projector, Tensor) else torch.from_numpy(np.asarray(projector, dtype=np.float32))
    if p.dim() != 2 or p.shape[0] != emb.shape[1]:
        raise ValueError(f"projector of shape {tuple(p.shape)} does not apply to features of dim {emb.shape[1]}")
    return emb @ p.to(device=emb.device, dtype=torch.float32)


def _to_numpy(x: Tensor) -> np.ndarray:
    return x.detach().to("cpu", torch.float32).numpy()


class _EvalMode:
    """Eval mode (no dropout) for the duration of an extraction, restored afterwards."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def __enter__(self):
        self.was_training = self.module.training
        self.module.eval()

    def __exit__(self, *exc):
        self.module.train(self.was_training)


# ----------------------------------------------------------------------------------------------- forward-only
def _forward_features(fm: FeatureModel, batch: dict, kind: str, pool: str, projector) -> dict[str, np.ndarray]:
    ids, mask = batch["input_ids"], batch["attention_mask"]
    rows = _response_rows(batch)
    bsz = ids.shape[0]
    with torch.no_grad(), _EvalMode(fm.module):
        hidden = fm.hidden_fn(ids, mask)
        h_rows = hidden[rows.b, rows.t]
        loss_rows = torch.empty(len(rows.b), dtype=torch.float32, device=hidden.device)
        coef = torch.empty_like(loss_rows) if kind == "gradient" else None
        for sl in _chunks(len(rows.b), fm.vocab_size):
            logits = _logits(fm, h_rows[sl])
            gold = logits.gather(1, rows.target[sl, None]).squeeze(1)
            nll = torch.logsumexp(logits, dim=1) - gold
            loss_rows[sl] = nll
            if coef is not None:
                coef[sl] = torch.exp(-nll) - 1.0  # p(gold) - 1
            del logits
        loss = _per_example_mean(loss_rows, rows, bsz)
        if kind == "gradient":
            emb = _per_example_mean(coef[:, None] * h_rows.float(), rows, bsz)
        elif kind == "hidden" and pool == "all":
            m = mask.to(torch.float32)[..., None]
            emb = (hidden.float() * m).sum(1) / m.sum(1).clamp_min(1.0)
        elif kind == "hidden":
            emb = _per_example_mean(h_rows, rows, bsz)
        else:  # loss-trajectory
            emb = loss[:, None]
        if kind in ("gradient", "hidden"):
            emb = _project(emb, projector)
    return {"embedding": _to_numpy(emb), "loss": _to_numpy(loss)}


# ----------------------------------------------------------------------------------------------- lora-gradient
@dataclass
class LoraLayer:
    name: str
    d_in: int
    d_out: int
    dim: int            # entries this layer contributes to the embedding
    k_in: int
    k_out: int
    p_in: Tensor        # [d_in, k_in], N(0, 1/k_in)
    p_out: Tensor       # [d_out, k_out], N(0, 1/k_out)
    scale: float        # sqrt(k_in * k_out / dim): keeps inner products unbiased after taking `dim` entries


class LoraProjector:
    """Seeded Kronecker-factored projections for the selected linear layers; `dim` in total."""

    def __init__(self, layers: list[tuple[str, int, int]], dim: int, seed: int = 0):
        if not layers:
            raise CurateError("--layers matches no linear layer of the model")
        if dim < len(layers):
            raise CurateError(f"--dim {dim} is smaller than the number of linear layers ({len(layers)}); "
                              f"raise --dim or select fewer --layers")
        self.dim, self.seed = int(dim), int(seed)
        base, extra = divmod(self.dim, len(layers))
        self.layers: list[LoraLayer] = []
        for i, (name, d_in, d_out) in enumerate(layers):
            d_l = base + (1 if i < extra else 0)
            k_in = math.isqrt(d_l - 1) + 1 if d_l > 1 else 1   # ceil(sqrt(d_l))
            k_out = -(-d_l // k_in)
            self.layers.append(LoraLayer(
                name=name, d_in=d_in, d_out=d_out, dim=d_l, k_in=k_in, k_out=k_out,
                p_in=random_projection_torch(d_in, k_in, derive_seed(seed, name, "in")),
                p_out=random_projection_torch(d_out, k_out, derive_seed(seed, name, "out")),
                scale=math.sqrt(k_in * k_out / d_l)))
        self._device = torch.device("cpu")

    @property
    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def to(self, device: torch.device) -> "LoraProjector":
        if torch.device(device) != self._device:
            for layer in self.layers:
                layer.p_in, layer.p_out = layer.p_in.to(device), layer.p_out.to(device)
            self._device = torch.device(device)
        return self

    def project(self, layer: LoraLayer, g: Tensor) -> Tensor:
        """[B, k_out, k_in] projected gradients -> [B, layer.dim]."""
        return g.reshape(g.shape[0], -1)[:, :layer.dim] * layer.scale

    def describe(self) -> dict:
        """For artifact metadata."""
        return {"dim": self.dim, "seed": self.seed, "n_layers": len(self.layers),
                "layers": [[l.name, l.d_in, l.d_out, l.dim, l.k_in, l.k_out] for l in self.layers]}


def _matches(name: str, patterns) -> bool:
    parts = name.split(".")
    suffixes = [".".join(parts[i:]) for i in range(len(parts))]
    for pat in patterns:
        if any(c in pat for c in "*?["):
            if any(fnmatch.fnmatchcase(s, pat) for s in suffixes):
                return True
        elif pat in name:
            return True
    return False


def _split_patterns(layers) -> list[str] | None:
    if layers is None:
        return None
    if isinstance(layers, str):
        layers = layers.split(",")
    pats = [p.strip() for p in layers if p and p.strip()]
    return pats or None


def select_linear_layers(fm: FeatureModel, layers=None) -> list[tuple[str, torch.nn.Linear]]:
    """(name, module) of the linear layers lora-gradient uses, in module order (see module docstring)."""
    patterns = _split_patterns(layers)
    chosen = []
    for name, mod in fm.module.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        if mod is fm.output_layer:
            if patterns is not None and _matches(name, patterns):
                chosen.append((name, mod))
        elif patterns is None or _matches(name, patterns):
            chosen.append((name, mod))
    if not chosen and patterns is None:  # no --layers given: the model has none to take
        kinds = sorted({type(mod).__name__ for mod in fm.module.modules() if "Conv1D" in type(mod).__name__})
        raise CurateError(f"--features lora-gradient: {fm.name} has no nn.Linear layer besides its LM head to take "
                          "LoRA gradients of" + (f" (its projections are {', '.join(kinds)}, as GPT-2's)" if kinds
                                                 else "") + "; use --features gradient or hidden with this model")
    if not chosen:
        raise CurateError(f"--layers {','.join(patterns)}: matches no linear layer of {fm.name}")
    return chosen


def lora_projector(fm: FeatureModel, dim: int = DEFAULT_LORA_DIM, seed: int = 0, layers=None) -> LoraProjector:
    """The projector for `lora-gradient` on this model: layers selected by `layers` patterns, `dim` total."""
    chosen = select_linear_layers(fm, layers)
    return LoraProjector([(n, m.in_features, m.out_features) for n, m in chosen], dim, seed).to(fm.device)


def _lora_features(fm: FeatureModel, batch: dict, projector: LoraProjector) -> dict[str, np.ndarray]:
    ids, mask = batch["input_ids"], batch["attention_mask"]
    rows = _response_rows(batch)
    bsz, width = ids.shape
    projector.to(fm.device)
    modules = dict(fm.module.named_modules())
    keep = mask.bool()[..., None]
    acc = {layer.name: torch.zeros(bsz, layer.k_out, layer.k_in, dtype=torch.float32, device=fm.device)
           for layer in projector.layers}
    head_layer = None

    def make_hook(layer: LoraLayer):
        def forward_hook(mod, inputs, output):
            x = inputs[0]
            if x.shape[:2] != (bsz, width):
                raise CurateError(f"lora-gradient: layer {layer.name} sees inputs of shape {tuple(x.shape)}; "
                                  f"it needs [batch, time, features] (exclude it with --layers)")
            xp = torch.where(keep, x.detach().float() @ layer.p_in, 0.0)   # [B, T, k_in]
            replaced = None
            if not output.requires_grad:
                # Nothing upstream needs a gradient (weights are frozen): make this output a leaf so the
                # backward pass starts here and reaches it.
                replaced = output = output.detach().requires_grad_(True)

            def grad_hook(dy):
                a = torch.where(keep, dy.float() @ layer.p_out, 0.0)           # [B, T, k_out]
                acc[layer.name].add_(torch.einsum("btk,btj->bkj", a, xp))

            output.register_hook(grad_hook)
            return replaced
        return forward_hook

    handles = []
    params = list(fm.module.parameters())
    grad_flags = [p.requires_grad for p in params]
    try:
        for p in params:  # activation gradients only: no weight gradient is computed or stored
            p.requires_grad_(False)
        for layer in projector.layers:
            mod = modules.get(layer.name)
            if mod is None:
                raise CurateError(f"lora-gradient: the projector's layer {layer.name} is not in {fm.name}")
            if mod is fm.output_layer:
                head_layer = layer
                continue
            handles.append(mod.register_forward_hook(make_hook(layer)))
        with torch.enable_grad(), _EvalMode(fm.module):
            hidden = fm.hidden_fn(ids, mask)
            h_rows = hidden[rows.b, rows.t]
            with torch.no_grad():
                hd = h_rows.detach()
                w = fm.output_layer.weight
                dh = torch.empty(hd.shape, dtype=torch.float32, device=hd.device)
                loss_rows = torch.empty(len(rows.b), dtype=torch.float32, device=hd.device)
                for sl in _chunks(len(rows.b), fm.vocab_size):
                    logits = _logits(fm, hd[sl])
                    lse = torch.logsumexp(logits, dim=1)
                    loss_rows[sl] = lse - logits.gather(1, rows.target[sl, None]).squeeze(1)
                    # d(mean loss of the row's example)/d logits = (softmax - onehot) / n_b
                    dlogits = torch.exp(logits - lse[:, None])
                    dlogits[torch.arange(dlogits.shape[0], device=dlogits.device), rows.target[sl]] -= 1.0
                    dlogits *= rows.inv_n[sl, None]
                    del logits
                    dh[sl] = dlogits.to(w.dtype) @ w if w.dtype != torch.float32 else dlogits @ w
                    if head_layer is not None:
                        a = dlogits @ head_layer.p_out                       # [c, k_out]
                        xp = hd[sl].float() @ head_layer.p_in               # [c, k_in]
                        acc[head_layer.name].index_add_(0, rows.b[sl], a[:, :, None] * xp[:, None, :])
                    del dlogits
            if h_rows.requires_grad:
                torch.autograd.backward(h_rows, grad_tensors=dh.to(h_rows.dtype))
    finally:
        for h in handles:
            h.remove()
        for p, flag in zip(params, grad_flags):
            p.requires_grad_(flag)
    emb = torch.cat([projector.project(layer, acc[layer.name]) for layer in projector.layers], dim=1)
    loss = _per_example_mean(loss_rows, rows, bsz)
    return {"embedding": _to_numpy(emb), "loss": _to_numpy(loss)}


# ----------------------------------------------------------------------------------------------- entry point
def extract(fm: FeatureModel, batch: dict, kind: str, *, pool: str = "all", projector=None,
            layers=None) -> dict[str, np.ndarray]:
    """Features of one collated batch: {"embedding": float32 [B, D], "loss": float32 [B]}.

    kind: one of FEATURES. pool: for `hidden`, "all" tokens or the "response"-predicting positions.
    projector: for gradient/hidden an [H, D] matrix (None keeps H); for lora-gradient a LoraProjector
    (None: `lora_projector(fm, DEFAULT_LORA_DIM, seed=0, layers)`, built once per model).
    layers: lora-gradient layer patterns when no projector is given.
    """
    if kind not in FEATURES:
        raise CurateError(f"--features {kind}: unknown model feature (expected one of {', '.join(FEATURES)})")
    if pool not in POOLS:
        raise CurateError(f"--pool {pool}: expected one of {', '.join(POOLS)}")
    if kind == "lora-gradient":
        if torch.is_inference_mode_enabled():
            raise RuntimeError("lora-gradient needs autograd: do not call extract() under torch.inference_mode()")
        if projector is None:
            key = ("lora_projector", DEFAULT_LORA_DIM, 0, tuple(_split_patterns(layers) or ()))
            if key not in fm.cache:
                fm.cache[key] = lora_projector(fm, DEFAULT_LORA_DIM, 0, layers)
            projector = fm.cache[key]
        if not isinstance(projector, LoraProjector):
            raise TypeError("lora-gradient needs a LoraProjector (extractors.lora_projector)")
        return _lora_features(fm, batch, projector)
    return _forward_features(fm, batch, kind, pool, projector)
