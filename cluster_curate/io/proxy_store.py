"""A trained proxy on disk (`<artifact>.proxy/`, features/proxy.py says what it holds): written once,
atomically, by the leader of an `embed` run; read by every process. Nothing is unpickled when loading."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from cluster_curate.errors import CurateError, cannot_read
from cluster_curate.features.proxy import CHAT_TEMPLATE, PROXY_MARKER
from cluster_curate.io.writer import staged_directory


def _ckpt_name(step: int) -> str:
    return f"checkpoints/step-{step:06d}.safetensors"


def save_proxy(proxy, directory, extra: dict | None = None) -> Path:
    """Write a TrainedProxy to `directory`, built beside it and swapped into place whole."""
    from safetensors.torch import save_file

    final = Path(directory)
    with staged_directory(final, is_proxy_dir) as tmp:
        (tmp / "checkpoints").mkdir(parents=True)
        proxy.tokenizer.save_pretrained(tmp)
        # Tied weights: save the embedding once; lm_head.weight is the same tensor.
        state = {k: v.detach().cpu().contiguous() for k, v in proxy.gpt.state_dict().items() if k != "lm_head.weight"}
        save_file(state, tmp / "model.safetensors")
        for step, sd in proxy.checkpoints.items():
            save_file({k: v.contiguous() for k, v in sd.items() if k != "lm_head.weight"}, tmp / _ckpt_name(step))
        config = {"model_type": PROXY_MARKER, "gpt": proxy.gpt.cfg.to_dict(), "options": asdict(proxy.options),
                  "checkpoints": {str(s): _ckpt_name(s) for s in sorted(proxy.checkpoints)},
                  "train": proxy.log, **(extra or {})}
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    return final


def is_proxy_dir(path) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    try:
        return json.loads(cfg.read_text()).get("model_type") == PROXY_MARKER
    except (OSError, ValueError):
        return False


def read_proxy_config(path) -> dict:
    p = Path(path)
    if not is_proxy_dir(p):
        raise CurateError(f"{p}: not a saved cluster-curate proxy (no config.json with model_type '{PROXY_MARKER}')")
    return json.loads((p / "config.json").read_text())


def proxy_checkpoint_steps(path) -> list[int]:
    return sorted(int(s) for s in read_proxy_config(path)["checkpoints"])


def load_proxy_gpt(path, step: int | None = None) -> tuple:
    """(GPT, tokenizer) of a saved proxy: the final weights, or those of warm-up checkpoint `step`."""
    from safetensors.torch import load_file
    from transformers import PreTrainedTokenizerFast

    from cluster_curate.features.gpt import GPT, GPTConfig

    p = Path(path)
    config = read_proxy_config(p)
    gpt = GPT(GPTConfig(**config["gpt"]))
    if step is None:
        file = p / "model.safetensors"
    else:
        name = config["checkpoints"].get(str(step))
        if name is None:
            raise CurateError(f"{p}: no warm-up checkpoint at step {step} "
                              f"(have {', '.join(config['checkpoints']) or 'none'})")
        file = p / name
    try:
        state = load_file(file)
    except (OSError, RuntimeError) as e:
        raise cannot_read(file, e, "the proxy weights") from None
    state["lm_head.weight"] = state["embed.weight"]
    gpt.load_state_dict(state)
    gpt.lm_head.weight = gpt.embed.weight  # keep them tied after loading
    gpt.eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(p)
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    return gpt, tokenizer


def load_proxy(path, step: int | None = None, *, device=None):
    """FeatureModel of a saved proxy (final weights, or warm-up checkpoint `step`)."""
    from cluster_curate.features.models import resolve_device, wrap_gpt

    gpt, tokenizer = load_proxy_gpt(path, step)
    dev = resolve_device(device)
    gpt.to(dev)
    name = "proxy" if step is None else f"proxy@{step}"
    return wrap_gpt(gpt, tokenizer, device=dev, name=name)
