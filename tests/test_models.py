"""Loading feature models (features/models.py): local directories, hub ids offline, GGUF files, device/dtype."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_curate.errors import CurateError
from cluster_curate.features import models
from cluster_curate.features.extractors import FEATURES, extract
from cluster_curate.features.models import (collate, encode_examples, load_model, resolve_device,
                                            resolve_dtype)
from cluster_curate.io.datasets import Example
from tiny_lm import build_llama

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_llama(tmp_path_factory.mktemp("tiny") / "llama", tie=True)


def test_load_local_directory(tiny_dir):
    fm = load_model(str(tiny_dir))
    assert fm.device == torch.device("cpu") and fm.dtype == torch.float32
    assert fm.name == str(tiny_dir.resolve())
    assert fm.output_layer is fm.module.get_output_embeddings()
    assert fm.hidden_size == 64 and fm.vocab_size == len(fm.tokenizer)
    assert not fm.module.training and not any(p.requires_grad for p in fm.module.parameters())
    ids = torch.tensor([[1, 5, 9, 11]])
    h = fm.hidden_fn(ids, torch.ones_like(ids))
    assert h.shape == (1, 4, 64)


def test_dtype_override_and_auto_choice(tiny_dir):
    fm = load_model(str(tiny_dir), dtype="bf16", device="cpu")
    assert fm.dtype == torch.bfloat16 and next(fm.module.parameters()).dtype == torch.bfloat16
    enc, _ = encode_examples(fm.tokenizer, [Example(0, [{"role": "user", "content": "hi"}], "ok"),
                                            Example(1, [{"role": "user", "content": "a longer question"}], "")],
                             None)
    fp32 = load_model(str(tiny_dir))
    for kind in FEATURES:  # the bf16 code path (what a GPU gets) runs and agrees with fp32 to bf16 precision
        out = extract(fm, collate(enc, fm.pad_id, fm.device), kind)
        ref = extract(fp32, collate(enc, fp32.pad_id, fp32.device), kind)
        assert out["embedding"].dtype == np.float32 and np.isfinite(out["embedding"]).all()
        cos = (out["embedding"] * ref["embedding"]).sum(1) / (
            np.linalg.norm(out["embedding"], axis=1) * np.linalg.norm(ref["embedding"], axis=1))
        assert (cos > 0.95).all(), (kind, cos)
    # auto: bf16 on a GPU, fp32 on CPU
    assert resolve_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("float16", torch.device("cpu")) == torch.float16
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(CurateError, match="dtype"):
        resolve_dtype("int3", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(CurateError, match="CUDA is not available"):
            resolve_device("cuda")


def test_devices_torch_knows_but_this_machine_lacks_are_one_line(monkeypatch):
    """`--device mps`, `xpu` and `meta` were INTERNAL ERRORs at the first tensor moved there, and a GPU index past
    the machine's at the model's load."""
    for device, said in (("mps", "MPS is not available"), ("xpu", "XPU is not available"),
                         ("meta", "not a device the features are computed on")):
        with pytest.raises(CurateError, match=f"--device {device}: {said}"):
            resolve_device(device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the GPU boundary: one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0").index == 0
    with pytest.raises(CurateError, match=r"--device cuda:3: this machine has 1 GPU\(s\), cuda:0 to cuda:0"):
        resolve_device("cuda:3")


def test_a_model_without_a_causal_lm_head_is_refused_before_loading_its_weights(tmp_path):
    """A BERT folder as --model loaded as BertLMHeadModel with a head of random weights (transformers' load report
    on stderr, then every row embedded from it, exit 0); so did a causal LM saved without its head."""
    from transformers import BertConfig, Gemma3Config, LlamaConfig

    from tiny_encoder import build_bert
    with pytest.raises(CurateError, match=r"is a BertModel, not a causal LM with its LM head"):
        load_model(str(build_bert(tmp_path / "bert")))
    # the rule by the config alone: Gemma 3's causal LM class is its ...ForConditionalGeneration (a first version of
    # this check refused it); a Llama saved without its head is not one
    assert models.is_causal_lm(Gemma3Config(architectures=["Gemma3ForConditionalGeneration"]))
    assert models.is_causal_lm(LlamaConfig(architectures=["LlamaForCausalLM"]))
    assert not models.is_causal_lm(LlamaConfig(architectures=["LlamaModel"]))
    assert not models.is_causal_lm(BertConfig(architectures=["BertModel"]))
    # a model of its own code whose causal LM class is in its auto_map (ChatGLM's ["ChatGLMModel"]), with
    # --trust-remote-code: it was refused by the first version too
    own = {"AutoModelForCausalLM": "modeling.ChatGLMForConditionalGeneration"}
    assert models.is_causal_lm(LlamaConfig(architectures=["ChatGLMModel"], auto_map=own))


def test_offline_hub_id_not_cached_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CurateError, match="offline"):
        load_model("cluster-curate-tests/no-such-model")


def test_missing_and_invalid_paths(tmp_path):
    with pytest.raises(CurateError, match="no such file or directory"):
        load_model(str(tmp_path / "nope" / "model"))
    with pytest.raises(CurateError, match="config.json"):
        load_model(str(tmp_path))
    with pytest.raises(CurateError, match="no such GGUF file"):
        load_model(str(tmp_path / "model.gguf"))


@pytest.mark.parametrize("spec, is_path", [("gpt2", False), ("HuggingFaceTB/SmolLM2-135M", False),
                                           ("./SmolLM2-135M", True), ("~/models/m", True), ("/models/m", True),
                                           ("models/smollm/135m", True), ("smollm2-135m-q8_0.gguf", True),
                                           ("models\\m", True), ("nope/", True), ("my model", True),
                                           ("org/my model/", True), ("org/name-1.5_b", False)])
def test_a_spec_not_on_disk_is_a_missing_path_or_a_hub_id(spec, is_path):
    """One public rule for --model, --encoder and --checkpoints: a missing path is refused, a hub id looked up.
    A spec no hub id can be (`nope/`, as a shell completes a folder) was an INTERNAL ERROR (HFValidationError)."""
    assert models.looks_like_local_path(spec) is is_path


def test_gguf_without_the_extra_names_it(tmp_path, monkeypatch):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF")
    real = importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(CurateError, match=r"pip install the gguf extra \('\.\[cpu,gguf\]' in the checkout"):
        load_model(str(fake))


def test_corrupt_gguf_is_a_clear_error(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"not a gguf file at all")
    with pytest.raises(CurateError, match="could not be loaded"):
        load_model(str(fake))


def test_a_model_or_encoder_folder_without_its_tokenizer_says_so(tmp_path):
    """A folder holding a model's config and weights but no tokenizer said "could not be loaded: Couldn't
    instantiate the backend tokenizer from one of:" and stopped there (transformers' first line): it says what is
    missing now, for --model and --encoder alike."""
    from tiny_encoder import build_bert
    from tiny_lm import build_llama

    from cluster_curate.features.semantic import load_encoder
    for folder, load, flag in ((build_llama(tmp_path / "lm", layers=1, hidden=32), load_model, "--model"),
                               (build_bert(tmp_path / "enc"), load_encoder, "--encoder")):
        for f in folder.iterdir():
            if f.name.startswith(("tokenizer", "vocab", "special_tokens")):
                f.unlink()
        with pytest.raises(CurateError) as e:
            load(str(folder))
        assert str(e.value) == (f"{flag} {folder}: could not be loaded: no tokenizer in the folder (no "
                                "tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.txt, nor vocab.json "
                                "with merges.txt): save it beside the model")


def test_a_model_saved_again_under_the_same_path_is_another_model(tmp_path):
    """A local --model was recorded by its path alone: its weights saved again under that path, `run` kept the
    embeddings of the old ones ('up to date'), a job-array piece (or --resume) added chunks of the new ones to
    those of the old, and `--like` embedded a target with the new ones. Its files' fingerprint is recorded now: run
    embeds again, saying why, and a piece or --like of the other weights is refused; a copy of the folder is the
    same model."""
    import json
    import shutil

    from conftest import FIXTURES
    from conftest import cli_in_process as cli
    from tiny_lm import build_llama

    from cluster_curate.io.lineage import model_fingerprint
    build_llama(tmp_path / "m", layers=1, hidden=32)
    shutil.copytree(tmp_path / "m", tmp_path / "copy")
    assert model_fingerprint(tmp_path / "copy") == model_fingerprint(tmp_path / "m") is not None
    (tmp_path / "d.jsonl").write_text("".join(open(FIXTURES / "gsm8k" / "train-300.jsonl").readlines()[:40]))
    (tmp_path / "t.jsonl").write_text("".join(open(FIXTURES / "gsm8k" / "train-300.jsonl").readlines()[40:50]))
    emb = ["--model", "m", "--features", "hidden", "--dim", "16"]
    run = ["run", "d.jsonl", "--out", "r", *emb, "--budget", "12", "-n", "2", "--json"]
    assert cli(*run, cwd=tmp_path).returncode == 0
    assert cli("embed", "d.jsonl", "--out", "parts", *emb, "--num-parts", "2", "--part-index", "0", "--commit-every",
               "10", "-q", cwd=tmp_path).returncode == 0
    build_llama(tmp_path / "m", layers=1, hidden=32, seed=1)  # saved again: other weights, the same path
    again = cli(*run, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    stages = json.loads(again.stdout)["stages"]
    assert [s["status"] for s in stages] == ["ran"] * 4
    assert stages[0]["reason"] == "its input changed (--model m: its content changed)"
    piece = cli("embed", "d.jsonl", "--out", "parts", *emb, "--num-parts", "2", "--part-index", "1", "--commit-every",
                "10", cwd=tmp_path)
    assert piece.returncode == 2 and "parts: holds parts of a run with other parameters or data" in piece.stderr
    like = cli("embed", "t.jsonl", "--like", "parts/part-00000-of-00002.parquet", "--out", "t.parquet", cwd=tmp_path)
    assert like.returncode == 2 and like.stderr.strip().endswith(
        "its --model m is not the one it was embedded with (its files changed since, or are gone): its feature "
        "space cannot be reproduced"), like.stderr
    # a local --encoder (--features semantic) likewise
    from tiny_encoder import build_bert
    build_bert(tmp_path / "enc")
    sem = ["run", "d.jsonl", "--out", "s", "--features", "semantic", "--encoder", "enc", "--budget", "12", "-n", "2",
           "--json"]
    assert cli(*sem, cwd=tmp_path).returncode == 0
    build_bert(tmp_path / "enc", seed=1)
    again = cli(*sem, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["stages"][0]["reason"] == "its input changed (--encoder enc: its content changed)"


@pytest.fixture(scope="module")
def smollm2():
    """The real model, loaded once for the tests that read it (half a minute: its GGUF weights are dequantized)."""
    if not SMOLLM2.is_file():
        pytest.skip(f"SmolLM2 GGUF absent ({SMOLLM2}); run `make smollm2` to fetch it")
    return load_model(str(SMOLLM2))


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")  # one worker loads the model
def test_smollm2_gguf_loads_and_gives_batch_invariant_features(smollm2):
    fm = smollm2
    assert fm.hidden_size == 576 and fm.tokenizer.chat_template
    exs = [Example(0, [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. "
                                                   "How many in total?"}],
                   "She sold 48/2 = 24 clips in May, so 48 + 24 = 72 in total.\n#### 72"),
           Example(1, [{"role": "user", "content": "Write a Python function that adds two numbers."}],
                   "def add(a, b):\n    return a + b")]
    enc, skipped = encode_examples(fm.tokenizer, exs, None)
    assert not skipped
    assert fm.tokenizer.decode(enc[1].input_ids[enc[1].response_start:]) == exs[1].response + "<|im_end|>\n"
    both = extract(fm, collate(enc, fm.pad_id, fm.device), "gradient")
    alone = extract(fm, collate(enc[1:], fm.pad_id, fm.device), "gradient")
    assert both["embedding"].shape == (2, 576)
    np.testing.assert_allclose(both["embedding"][1], alone["embedding"][0], atol=1e-4)
    # an instruction-tuned model finds these answers far more likely than chance (ln 49152 = 10.8)
    assert (both["loss"] < 4.0).all(), both["loss"]


@pytest.mark.slow
@pytest.mark.xdist_group("smollm2")
def test_tokenizer_option_takes_the_gguf_file_the_model_option_takes(smollm2):
    from cluster_curate.commands.common import load_tokenizer
    tok = load_tokenizer(str(SMOLLM2))
    text = "Natalia sold 48 clips in April and half as many in May."
    assert tok(text)["input_ids"] == smollm2.tokenizer(text)["input_ids"]
    with pytest.raises(CurateError, match="not a directory nor a .gguf file"):
        load_tokenizer(str(SMOLLM2.with_suffix(".txt")))


def test_a_model_shorter_than_a_row_cuts_it_to_its_position_limit(tmp_path):
    """A model with learned positions (GPT-2's n_positions) whose tokenizer declares no model_max_length: a row
    longer than its positions was an INTERNAL ERROR (IndexError in its position embedding) unless --max-length was
    lowered by hand. The limit is read from the model's config once: such rows are cut to it and said, as
    --max-length cuts them, naming the limit."""
    import json

    from conftest import cli_in_process as cli
    from tiny_lm import build_tokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = build_tokenizer(chat_template=False)
    assert tok.model_max_length > 10 ** 6  # the tokenizer says nothing of the model's limit
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)).save_pretrained(
        tmp_path / "gpt")
    tok.save_pretrained(tmp_path / "gpt")
    fm = load_model(str(tmp_path / "gpt"))
    assert fm.max_positions == 64 and models.position_limit(object()) is None  # none declared: no cut
    long = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. " * 3
    rows = [{"question": long if i % 2 else f"How many clips? {i}", "answer": f"#### {48 + i}"} for i in range(6)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    enc, _ = encode_examples(fm.tokenizer, [Example(i, [{"role": "user", "content": r["question"]}], r["answer"])
                                            for i, r in enumerate(rows)], None)
    cut = sum(e.n_tokens > 64 for e in enc)  # the model's input: the plain template's scaffold, BOS and EOS
    whole = {e.id: e.whole_tokens for e in enc}  # what a trainer without a template reads: the text and EOS
    assert cut == 3
    assert models.settle_max_length(None, [fm]) == models.settle_max_length(1024, [fm, None]) == 64
    assert models.settle_max_length(32, [fm]) == 32 and models.settle_max_length(None, []) is None

    import pyarrow.parquet as pq

    from cluster_curate.io.artifacts import read_meta
    for given in (None, "100"):
        r = cli("embed", "d.jsonl", "--out", "h.parquet", "--features", "hidden", "--model", "gpt", "--device",
                "cpu", "--overwrite", "--json", *(["--max-length", given] if given else []), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        warnings = json.loads(r.stdout)["warnings"]
        assert (f"{cut} row(s) longer than the model's position limit, 64 tokens (below --max-length "
                f"{given or 1024}): the model's features see them cut") in " ".join(warnings), warnings
        table = pq.read_table(tmp_path / "h.parquet").to_pydict()
        assert table["id"] == list(range(6))
        assert np.isfinite(np.array(table["embedding"], dtype=np.float64)).all()
        assert np.isfinite(np.array(table["loss"], dtype=np.float64)).all()
        assert dict(zip(table["id"], table["n_tokens"])) == whole  # counted whole, as a trainer reads them
        # the limit the model read with is recorded, and report says it
        assert read_meta(tmp_path / "h.parquet").params["model_max_length"] == 64
        shown = cli("report", "h.parquet", cwd=tmp_path)
        assert f"{int(given or 1024):,} (the model's position limit: 64)" in shown.stdout, shown.stdout


def test_tokenizers_that_read_ids_otherwise_are_told_apart(tmp_path):
    """A checkpoint of loss-trajectory is fed --model's token ids: another size, another vocabulary of the same
    size (two tokens' ids swapped) or another pre-tokenizer on the same vocabulary each read other words; a copy
    of the same tokenizer files reads them alike."""
    import json

    from tiny_lm import build_tokenizer
    from transformers import AutoTokenizer
    build_tokenizer().save_pretrained(tmp_path / "a")
    build_tokenizer().save_pretrained(tmp_path / "same")
    build_tokenizer(vocab_size=280).save_pretrained(tmp_path / "smaller")

    def edited(name, edit):
        spec = json.loads((tmp_path / "a" / "tokenizer.json").read_text())
        edit(spec)
        build_tokenizer().save_pretrained(tmp_path / name)
        (tmp_path / name / "tokenizer.json").write_text(json.dumps(spec))
        return AutoTokenizer.from_pretrained(tmp_path / name)

    def swap_two(spec):
        vocab = spec["model"]["vocab"]
        first, second = sorted(vocab, key=vocab.get)[-2:]  # two merged tokens, not bytes
        vocab[first], vocab[second] = vocab[second], vocab[first]

    def prefix_space(spec):
        spec["pre_tokenizer"]["add_prefix_space"] = True

    a = AutoTokenizer.from_pretrained(tmp_path / "a")
    assert models.tokenizer_difference(a, AutoTokenizer.from_pretrained(tmp_path / "same")) is None
    assert models.tokenizer_difference(a, AutoTokenizer.from_pretrained(tmp_path / "smaller")) == \
        "its tokenizer has 280 tokens, not 300"
    assert models.tokenizer_difference(a, edited("swapped", swap_two)) == "its tokenizer has another vocabulary"
    assert "into other tokens" in models.tokenizer_difference(a, edited("spaced", prefix_space))
    # a checkpoint fine-tuned from it that added a token reads every id of `a` alike; the other way round it does not
    grown = AutoTokenizer.from_pretrained(tmp_path / "same")
    grown.add_special_tokens({"additional_special_tokens": ["<|tool|>"]})
    assert models.tokenizer_difference(a, grown) is None
    assert models.tokenizer_difference(grown, a) == "its tokenizer has 300 tokens, not 301"


@pytest.mark.parametrize("files, holds", [
    (["tokenizer.json"], True), (["tokenizer_config.json"], True), (["vocab.txt"], True),
    (["spm.model"], True), (["qwen.tiktoken"], True), (["vocab.json", "merges.txt"], True),
    (["vocab.json"], False), (["config.json", "model.safetensors"], False), ([], False)])
def test_model_encoder_and_tokenizer_folders_hold_a_tokenizer_by_one_rule(tmp_path, files, holds):
    """--model and --encoder folders were checked against a list of file names, --tokenizer folders by another
    rule: a sentencepiece model under its own name or a tiktoken file passed one and was refused by the other,
    a vocab.json without its merges the other way round. One rule decides for all three."""
    from cluster_curate.commands.common import check_tokenizer_path
    from cluster_curate.features.models import check_tokenizer_files
    for name in files:
        (tmp_path / name).write_text("{}")
    for check in (lambda: check_tokenizer_files(tmp_path, f"--model {tmp_path}"),
                  lambda: check_tokenizer_path(str(tmp_path))):
        if holds:
            check()
        else:
            with pytest.raises(CurateError, match="no tokenizer in th"):
                check()
