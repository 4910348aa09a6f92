"""Correctness of the model features on tiny models built here (features/extractors.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from cluster_curate.errors import CurateError
from cluster_curate.features.extractors import (FEATURES, LoraProjector, extract, lora_projector,
                                                select_linear_layers)
from cluster_curate.features.models import collate, encode_examples, load_model, wrap_gpt
from cluster_curate.features.projection import random_projection, random_projection_torch
from cluster_curate.io.datasets import Example
from tiny_lm import build_llama, build_tokenizer

torch.set_num_threads(1)

EXAMPLES = [
    Example(0, [{"role": "user", "content": "How many clips did Natalia sell in April and May?"}],
            "Natalia sold 48/2 = 24 clips in May. The answer is 72."),
    Example(1, [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Write a function that returns the sum of two numbers."}],
            "def add(a, b):\n    return a + b"),
    Example(2, [{"role": "user", "content": "Weng earns $12 an hour. How much for 50 minutes?"}], "$10"),
    Example(3, [{"role": "user", "content": "hi"}],
            "Yesterday, she just did 50 minutes of babysitting, and then she sold half as many clips."),
]


@pytest.fixture(scope="module")
def fm(tmp_path_factory):
    return load_model(str(build_llama(tmp_path_factory.mktemp("tiny") / "llama")))


def features(fm, examples, kind, max_length=None, **kw):
    enc, skipped = encode_examples(fm.tokenizer, examples, max_length)
    assert not skipped
    out = extract(fm, collate(enc, fm.pad_id, fm.device), kind, **kw)
    return {e.id: (out["embedding"][i], out["loss"][i]) for i, e in enumerate(enc)}


def single_inputs(fm, example):
    enc, _ = encode_examples(fm.tokenizer, [example], None)
    batch = collate(enc, fm.pad_id, fm.device)
    return batch, enc[0]


# ------------------------------------------------------------------------------------------- gradient
def test_gradient_equals_autograd_of_gold_rows(fm):
    got = features(fm, EXAMPLES, "gradient")
    head = fm.output_layer
    for ex in EXAMPLES:
        batch, enc = single_inputs(fm, ex)
        weight = head.weight.detach().clone().requires_grad_(True)
        with torch.no_grad():
            hidden = fm.hidden_fn(batch["input_ids"], batch["attention_mask"])[0]
        logits = hidden @ weight.T
        ids = batch["input_ids"][0]
        total = torch.zeros(fm.hidden_size)
        positions = range(max(enc.response_start, 1) - 1, enc.n_tokens - 1)
        for t in positions:
            gold = int(ids[t + 1])
            loss_t = torch.nn.functional.cross_entropy(logits[t:t + 1], ids[t + 1:t + 2])
            (grad,) = torch.autograd.grad(loss_t, weight, retain_graph=True)
            total += grad[gold]
        expected = (total / len(positions)).numpy()
        assert len(positions) == enc.n_response_tokens
        np.testing.assert_allclose(got[ex.id][0], expected, atol=1e-5, rtol=0)


def test_loss_equals_transformers_loss_and_hidden_fn_is_what_the_head_sees(fm):
    got = features(fm, EXAMPLES, "loss-trajectory")
    for ex in EXAMPLES:
        batch, _ = single_inputs(fm, ex)
        with torch.no_grad():
            out = fm.module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            labels=batch["labels"])
            hidden = fm.hidden_fn(batch["input_ids"], batch["attention_mask"])
        np.testing.assert_allclose(got[ex.id][1], float(out.loss), rtol=1e-5)
        np.testing.assert_allclose(got[ex.id][0], [float(out.loss)], rtol=1e-5)
        torch.testing.assert_close(fm.output_layer(hidden), out.logits, atol=1e-5, rtol=1e-5)


def test_hidden_pools(fm):
    got_all = features(fm, EXAMPLES, "hidden")
    got_resp = features(fm, EXAMPLES, "hidden", pool="response")
    for ex in EXAMPLES:
        batch, enc = single_inputs(fm, ex)
        with torch.no_grad():
            hidden = fm.hidden_fn(batch["input_ids"], batch["attention_mask"])[0]
        np.testing.assert_allclose(got_all[ex.id][0], hidden.mean(0).numpy(), atol=1e-5)
        resp = hidden[max(enc.response_start, 1) - 1:enc.n_tokens - 1].mean(0)
        np.testing.assert_allclose(got_resp[ex.id][0], resp.numpy(), atol=1e-5)


# ------------------------------------------------------------------------------------------- lora-gradient
def exact_projected_gradient(fm, example, projector: LoraProjector) -> np.ndarray:
    """Autograd on one example alone: dense per-layer weight gradients, then P_out^T G P_in."""
    model = copy.deepcopy(fm.module)
    model.requires_grad_(True)
    batch, _ = single_inputs(fm, example)
    loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 labels=batch["labels"]).loss
    modules = dict(model.named_modules())
    grads = torch.autograd.grad(loss, [modules[layer.name].weight for layer in projector.layers])
    parts = []
    for layer, g in zip(projector.layers, grads):
        phi = layer.p_out.T @ g @ layer.p_in                      # [k_out, k_in]
        parts.append(phi.flatten()[:layer.dim] * layer.scale)
    return torch.cat(parts).detach().numpy()


@pytest.mark.parametrize("layers", [None, "q_proj,down_proj,lm_head"])
def test_lora_gradient_equals_exact_per_example_gradient(fm, layers):
    projector = lora_projector(fm, dim=300, seed=7, layers=layers)
    assert sum(layer.dim for layer in projector.layers) == 300
    got = features(fm, EXAMPLES, "lora-gradient", projector=projector)
    for ex in EXAMPLES:
        expected = exact_projected_gradient(fm, ex, projector)
        assert got[ex.id][0].shape == (300,)
        np.testing.assert_allclose(got[ex.id][0], expected, atol=1e-4, rtol=0)
        assert np.abs(expected).max() > 1e-3  # a real, non-trivial gradient


def test_lora_layers_selection_and_dim_errors(fm):
    names = [n for n, _ in select_linear_layers(fm)]
    assert len(names) == 2 * 7 and "lm_head" not in names  # q k v o gate up down per layer; head excluded
    assert [n for n, _ in select_linear_layers(fm, "layers.1.*proj")] == [n for n in names if ".1." in n]
    assert "lm_head" in [n for n, _ in select_linear_layers(fm, ["lm_head"])]
    with pytest.raises(CurateError, match="matches no linear layer"):
        select_linear_layers(fm, "no_such_layer")
    with pytest.raises(CurateError, match="smaller than the number of linear layers"):
        lora_projector(fm, dim=5)
    a, b = lora_projector(fm, 100, seed=3), lora_projector(fm, 100, seed=3)
    assert all(torch.equal(x.p_in, y.p_in) and torch.equal(x.p_out, y.p_out) for x, y in zip(a.layers, b.layers))
    assert a.describe()["dim"] == 100


def test_lora_gradient_on_a_model_without_linear_layers_does_not_blame_layers_never_given(tmp_path):
    """GPT-2's projections are Conv1D: with no --layers given, the refusal read '--layers : matches no linear layer',
    naming an option the user never passed; now it says the model has no nn.Linear layer for LoRA, and why."""
    from transformers import GPT2Config, GPT2LMHeadModel
    directory = tmp_path / "gpt"
    GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=64, n_embd=32, n_layer=1, n_head=2)).save_pretrained(
        directory)
    build_tokenizer().save_pretrained(directory)
    gpt = load_model(str(directory))
    with pytest.raises(CurateError) as err:
        lora_projector(gpt, 64)
    assert str(err.value) == (f"--features lora-gradient: {gpt.name} has no nn.Linear layer besides its LM head to "
                              "take LoRA gradients of (its projections are Conv1D, as GPT-2's); use --features "
                              "gradient or hidden with this model")
    with pytest.raises(CurateError, match="--layers c_attn: matches no linear layer"):  # given: as before
        select_linear_layers(gpt, "c_attn")


def test_lora_gradient_does_not_touch_weights_or_their_grads(fm):
    before = {n: p.detach().clone() for n, p in fm.module.named_parameters()}
    features(fm, EXAMPLES[:2], "lora-gradient", projector=lora_projector(fm, 64))
    for n, p in fm.module.named_parameters():
        assert p.grad is None and not p.requires_grad
        assert torch.equal(p, before[n])
    assert not any(m._forward_hooks for m in fm.module.modules())


# ------------------------------------------------------------------------------------------- invariance
@pytest.mark.parametrize("kind", FEATURES)
def test_batch_composition_and_padding_do_not_change_features(fm, kind):
    kw = {"projector": lora_projector(fm, 96, seed=1)} if kind == "lora-gradient" else {}
    together = features(fm, EXAMPLES, kind, **kw)
    reversed_ = features(fm, EXAMPLES[::-1], kind, **kw)
    for ex in EXAMPLES:
        alone = features(fm, [ex], kind, **kw)  # no padding at all
        for other in (together, reversed_):
            np.testing.assert_allclose(other[ex.id][0], alone[ex.id][0], atol=1e-5, rtol=1e-4)
            np.testing.assert_allclose(other[ex.id][1], alone[ex.id][1], atol=1e-5, rtol=1e-5)


def test_truncation_cuts_prompt_from_left_and_keeps_features_of_untruncated(fm):
    tok = fm.tokenizer
    full, _ = encode_examples(tok, EXAMPLES, None)
    lengths = {e.id: e.n_tokens for e in full}
    limit = sorted(lengths.values())[1]  # some examples fit, others are truncated
    cut, skipped = encode_examples(tok, EXAMPLES, limit)
    assert not skipped
    by_id = {e.id: e for e in full}
    for e in cut:
        f = by_id[e.id]
        assert e.n_tokens <= limit and e.truncated == (f.n_tokens > limit)
        resp = f.input_ids[f.response_start:]
        if len(resp) < limit:  # only the prompt is cut, from the left
            assert e.input_ids == f.input_ids[-e.n_tokens:] and e.input_ids[e.response_start:] == resp
        else:                  # response alone too long: one prompt token, response cut at the right
            assert e.response_start == 1 and e.input_ids[0] == f.input_ids[f.response_start - 1]
            assert e.input_ids[1:] == resp[:limit - 1]
        assert e.n_response_tokens == e.n_tokens - max(e.response_start, 1)
    # examples that fit keep exactly their features, whatever truncation does to their batch-mates
    a = features(fm, EXAMPLES, "gradient")
    b = features(fm, EXAMPLES, "gradient", max_length=limit)
    for e in cut:
        if not e.truncated:
            np.testing.assert_allclose(a[e.id][0], b[e.id][0], atol=1e-5)
    # a truncated example's features are those of its truncated sequence taken alone
    trunc = next(e for e in cut if e.truncated)
    alone = extract(fm, collate([trunc], fm.pad_id, fm.device), "gradient")["embedding"][0]
    np.testing.assert_allclose(b[trunc.id][0], alone, atol=1e-5)


def test_long_response_is_cut_at_the_right(fm):
    ex = Example(9, [{"role": "user", "content": "hi"}], "Natalia sold clips to 48 of her friends. " * 4)
    (e,), _ = encode_examples(fm.tokenizer, [ex], 12)
    assert e.n_tokens == 12 and e.response_start == 1 and e.n_response_tokens == 11 and e.truncated


def test_examples_without_response_tokens_are_reported(tmp_path):
    tok = build_tokenizer(chat_template=False)
    tok.eos_token = None  # no end-of-sequence token: an empty response has nothing to predict
    exs = [Example(0, [{"role": "user", "content": "hi"}], ""),
           Example(1, [{"role": "user", "content": "hi"}], "ok")]
    enc, skipped = encode_examples(tok, exs, None)
    assert [e.id for e in enc] == [1] and skipped[0][0] == 0 and "empty" in skipped[0][1]
    with pytest.raises(CurateError, match="max-length"):
        encode_examples(tok, exs, 1)


def test_chat_and_plain_templates(tmp_path):
    ex = EXAMPLES[1]
    chat = build_tokenizer(chat_template=True)
    (e,), _ = encode_examples(chat, [ex], None)
    prompt_text = chat.apply_chat_template(ex.prompt, tokenize=False, add_generation_prompt=True)
    assert chat.decode(e.input_ids[:e.response_start]) == prompt_text
    assert chat.decode(e.input_ids[e.response_start:]) == ex.response + "<|im_end|>\n"
    plain = build_tokenizer(chat_template=False)
    (p,), _ = encode_examples(plain, [ex], None)
    assert plain.decode(p.input_ids[:p.response_start]) == (
        "<|endoftext|>### System:\nYou are a helpful assistant.\n\n### User:\n"
        "Write a function that returns the sum of two numbers.\n\n### Assistant:\n")
    assert plain.decode(p.input_ids[p.response_start:]) == ex.response + "<|endoftext|>"


def test_collate_right_pads_and_masks_labels(fm):
    enc, _ = encode_examples(fm.tokenizer, EXAMPLES[:3], None)
    b = collate(enc, fm.pad_id, fm.device)
    width = max(e.n_tokens for e in enc)
    assert b["input_ids"].shape == (3, width) and b["ids"] == [0, 1, 2]
    for i, e in enumerate(enc):
        assert b["attention_mask"][i].sum() == e.n_tokens
        assert (b["input_ids"][i, e.n_tokens:] == fm.pad_id).all()
        lab = b["labels"][i]
        assert (lab[:e.response_start] == -100).all() and (lab[e.n_tokens:] == -100).all()
        assert lab[e.response_start:e.n_tokens].tolist() == e.input_ids[e.response_start:]


# ------------------------------------------------------------------------------------------- projections
def test_random_projection_is_seeded_and_preserves_geometry():
    p = random_projection(256, 2048, seed=5)
    assert p.dtype == np.float32 and p.shape == (256, 2048)
    assert np.array_equal(p, random_projection(256, 2048, seed=5))
    assert np.array_equal(p, random_projection_torch(256, 2048, seed=5).numpy())
    assert not np.array_equal(p, random_projection(256, 2048, seed=6))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 256)).astype(np.float32)
    x[10:] = x[:10] + 0.5 * rng.normal(size=(10, 256))  # some pairs with high cosine

    def cos(a):
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        return a @ a.T
    assert np.abs(cos(x @ p) - cos(x)).max() < 0.1


def test_gradient_projection_reduces_dim(fm):
    p = random_projection(fm.hidden_size, 16, seed=0)
    full = features(fm, EXAMPLES, "gradient")
    red = features(fm, EXAMPLES, "gradient", projector=p)
    for ex in EXAMPLES:
        assert red[ex.id][0].shape == (16,)
        np.testing.assert_allclose(red[ex.id][0], full[ex.id][0] @ p, atol=1e-5)


# ------------------------------------------------------------------------------------------- proxy GPT
def test_proxy_gpt_features_match_autograd_and_are_batch_invariant():
    from cluster_curate.features.gpt import GPT, GPTConfig
    tok = build_tokenizer(chat_template=False)
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=len(tok), n_layer=2, n_head=2, d_model=32, max_len=256))
    gpt.train()
    fm = wrap_gpt(gpt, tok)
    assert fm.device.type == "cpu" and fm.dtype == torch.float32 and fm.name == "proxy" and not gpt.training
    projector = lora_projector(fm, 64, seed=2)
    together = features(fm, EXAMPLES, "lora-gradient", projector=projector)
    grads = features(fm, EXAMPLES, "gradient")
    for ex in EXAMPLES:
        alone = features(fm, [ex], "lora-gradient", projector=projector)
        np.testing.assert_allclose(together[ex.id][0], alone[ex.id][0], atol=1e-5)
        batch, _ = single_inputs(fm, ex)
        model = copy.deepcopy(gpt)
        logits = model(batch["input_ids"], batch["attention_mask"])[0, :-1]
        labels = batch["labels"][0, 1:]
        loss = torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100)
        mods = dict(model.named_modules())
        gs = torch.autograd.grad(loss, [mods[l.name].weight for l in projector.layers] + [model.lm_head.weight])
        exact = torch.cat([(l.p_out.T @ g @ l.p_in).flatten()[:l.dim] * l.scale
                           for l, g in zip(projector.layers, gs)])
        np.testing.assert_allclose(together[ex.id][0], exact.numpy(), atol=1e-4)
        # the gradient feature is the head gradient restricted to the gold rows, averaged
        gold_rows = labels[labels != -100]
        assert grads[ex.id][0].shape == (32,)
        assert np.isfinite(grads[ex.id][0]).all() and len(gold_rows) > 0
