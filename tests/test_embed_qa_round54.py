"""QA round 54, the features: a tokenizer larger than its model's vocabulary, the text feature's all-zero rows
(a one-row dataset, prompts of numbers alone), the semantic feature's cut rows, a BERT folder as `--features hidden
--model`, a model folder without weights, and where the proxy is saved (README). Tiny models built here with
save_pretrained, as users save theirs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_curate.cli import main
from cluster_curate.errors import CurateError
from cluster_curate.features.models import load_model
from cluster_curate.features.semantic import load_encoder
from cluster_curate.features.text import TextFeaturizer
from cluster_curate.io.artifacts import read_artifact

from tiny_encoder import build_bert, gsm8k_rows
from tiny_lm import build_llama, build_tokenizer

torch.set_num_threads(1)
README = Path(__file__).resolve().parents[1] / "README.md"


def _run(cli_runner, args, code=0):
    res = cli_runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def _said(res) -> str:
    return " ".join(res.output.split())


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _data_with_a_bad_last_line(tmp_path) -> Path:
    """GSM8K rows, then a line that is not JSON: a check made before the data is read fails first."""
    path = _write(tmp_path / "d.jsonl", gsm8k_rows(20))
    with open(path, "a") as f:
        f.write("{not json\n")
    return path


def _emb(table) -> np.ndarray:
    return np.stack(table.column("embedding").to_numpy(zero_copy_only=False))


# ------------------------------------------------------------------------------- 1. tokenizer past the vocabulary
@pytest.fixture(scope="module")
def mismatched_llama(tmp_path_factory) -> Path:
    """A Llama of 300-ish embedding rows saved with the tokenizer of a 600-token vocabulary (another model's)."""
    path = build_llama(tmp_path_factory.mktemp("m") / "llama")
    build_tokenizer(vocab_size=600).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def mismatched_bert(tmp_path_factory) -> Path:
    """A BertModel of 100 embedding rows saved with the ~400-token WordPiece tokenizer of tiny_encoder."""
    from transformers import AutoTokenizer, BertConfig, BertModel
    full = build_bert(tmp_path_factory.mktemp("m") / "bert")
    path = full.parent / "bert_mismatch"
    cfg = BertConfig.from_pretrained(full)
    cfg.vocab_size = 100
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(path)
    AutoTokenizer.from_pretrained(full).save_pretrained(path)
    return path


def _vocabulary_error(option: str, path: Path, tokens: int, rows: int) -> str:
    return (f"ERROR: {option} {path}: its tokenizer has {tokens:,} tokens but the model's input embedding has "
            f"{rows:,} rows (token ids from {rows:,} on have no row): give the tokenizer saved with this model "
            "(save_pretrained both into one folder)")


def test_a_models_tokenizer_past_its_embedding_is_refused_before_the_data_is_read(tmp_path, cli_runner,
                                                                                   mismatched_llama):
    """It was an `INTERNAL ERROR: IndexError: index out of range in self` in the first batch, after the data was
    read and the preparation done, leaving OUT.partial. Now one line before the data is read (the bad last line
    of the data is not reached), for every model feature."""
    from transformers import AutoTokenizer
    tokens = len(AutoTokenizer.from_pretrained(mismatched_llama))
    rows = load_model_rows(mismatched_llama)
    assert tokens > rows
    data = _data_with_a_bad_last_line(tmp_path)
    for feature in ("gradient", "hidden", "lora-gradient"):
        res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", feature,
                                "--model", mismatched_llama], code=2)
        assert res.output.strip() == _vocabulary_error("--model", mismatched_llama, tokens, rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]
    # the loader compares with the weights' embedding rows (an API caller, a hub id, a --checkpoints model)
    with pytest.raises(CurateError) as err:
        load_model(str(mismatched_llama))
    assert f"ERROR: {err.value}" == _vocabulary_error("--model", mismatched_llama, tokens, rows)


def load_model_rows(path: Path) -> int:
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path).get_input_embeddings().num_embeddings


def test_an_encoders_tokenizer_past_its_embedding_is_refused_before_the_data_is_read(tmp_path, cli_runner,
                                                                                      mismatched_bert):
    from transformers import AutoTokenizer
    tokens = len(AutoTokenizer.from_pretrained(mismatched_bert))
    data = _data_with_a_bad_last_line(tmp_path)
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", "semantic",
                            "--encoder", mismatched_bert], code=2)
    assert res.output.strip() == _vocabulary_error("--encoder", mismatched_bert, tokens, 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]
    with pytest.raises(CurateError) as err:
        load_encoder(str(mismatched_bert), device="cpu")
    assert f"ERROR: {err.value}" == _vocabulary_error("--encoder", mismatched_bert, tokens, 100)


# ------------------------------------------------------------------------------- 2. the text feature's zero rows
def test_a_one_row_dataset_gets_a_text_vector(tmp_path, cli_runner):
    """One row: the text basis had no direction (k = rows - 1 = 0), the row an all-zero vector, and the warning
    blamed punctuation. The one direction a single row has is its own (unit) row: its vector is (1, 0, ...)."""
    data = _write(tmp_path / "d.jsonl", gsm8k_rows(1))
    out = tmp_path / "e.parquet"
    res = _run(cli_runner, ["embed", data, "--out", out])
    assert "WARNING" not in res.output
    emb = _emb(read_artifact(out)[0])
    assert emb.shape == (1, 256) and emb[0, 0] == pytest.approx(1.0) and not emb[0, 1:].any()
    # the same of a question of numbers alone (its one term, the number token)
    feat = TextFeaturizer(dim=4).fit(["12"])
    assert feat.transform(["12", "7"]).tolist() == [[1.0, 0, 0, 0], [1.0, 0, 0, 0]]


def test_rows_of_numbers_alone_are_warned_of_as_such(tmp_path, cli_runner):
    """Prompts that are numbers alone are masked to one token: the basis has no direction, every row is zero, and
    the warning said "only punctuation, symbols or spaces". Now it says what they hold."""
    rows = [{"prompt": str(i * 7), "response": str(i * 14)} for i in range(12)]
    data = _write(tmp_path / "d.jsonl", rows)
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet"])
    assert ("WARNING: 12 row(s) have an all-zero embedding: their text holds only numbers, which the text feature "
            "masks (every number reads as one token); kept, but cluster finds them similar to no centroid (ids 0, 1, "
            "2, 3, 4, 5, 6, 7, 8, 9, ...)") in _said(res)


def test_the_zero_reason_names_the_cause():
    feat = TextFeaturizer(dim=8).fit([r["question"] for r in gsm8k_rows(40)])
    assert feat.zero_reason("?!") == ("holds no word the text feature counts (only punctuation, symbols or spaces, "
                                      "e.g. '?')")
    assert feat.zero_reason("12, 30 + 4.5") == ("holds only numbers, which the text feature masks (every number "
                                                  "reads as one token)")
    assert feat.zero_reason("zyzzyva quokka", 40) == ("holds no word or word pair of the text feature's vocabulary "
                                                      "(fitted on 40 sampled rows)")


def test_a_warning_of_zero_rows_for_several_reasons_counts_each(tmp_path, cli_runner):
    """Rows embedded --like a pool: one of no word, one of words the pool's text basis never saw."""
    pool = _write(tmp_path / "pool.jsonl", gsm8k_rows(30))
    _run(cli_runner, ["embed", pool, "--out", tmp_path / "pool.parquet", "--dim", "8"])
    rows = gsm8k_rows(34)[30:]
    rows[1]["question"], rows[3]["question"] = "???", "zyzzyva quokka"
    target = _write(tmp_path / "t.jsonl", rows)
    res = _run(cli_runner, ["embed", target, "--like", tmp_path / "pool.parquet", "--out", tmp_path / "t.parquet"])
    assert ("WARNING: 2 row(s) have an all-zero embedding; 1 row whose text holds no word or word pair of the text "
            "feature's vocabulary; 1 row whose text holds no word the text feature counts (only punctuation, symbols "
            "or spaces, e.g. '?'); kept, but cluster finds them similar to no centroid (ids 1, 3)") in _said(res)


# ------------------------------------------------------------------------------- 3. semantic's cut rows
def test_semantic_warns_of_the_rows_it_cut_with_their_ids(tmp_path, cli_runner):
    """The rows an encoder cut were told only in the summary's cell; the model features warn of theirs."""
    enc = build_bert(tmp_path / "bert", model_max_length=96)
    rows = gsm8k_rows(12)
    for i, row in enumerate(rows):  # short questions, but three repeated thrice
        row["question"] = " ".join([row["question"]] * 3) if i in (2, 5, 9) else f"How many clips are {i} and {i}?"
    data = _write(tmp_path / "d.jsonl", rows)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(enc)
    long = [i for i, r in enumerate(rows) if len(tok(r["question"])["input_ids"]) > 96]
    assert long == [2, 5, 9]
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", "semantic",
                            "--encoder", enc])
    assert ("WARNING: 3 row(s) longer than the encoder's max length, 96 tokens: semantic embeds them cut (on the "
            "right, as the encoder's tokenizer cuts) (ids 2, 5, 9)") in _said(res)
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e2.parquet", "--features", "semantic",
                            "--encoder", enc, "--max-length", "8"])
    assert re.search(r"WARNING: 12 row\(s\) longer than --max-length 8 tokens: semantic embeds them cut \(on the "
                     r"right, as the encoder's tokenizer cuts\) \(ids 0, 1, 2, .*, 9, \.\.\.\)", _said(res))


# ------------------------------------------------------------------------------- 4. hidden with an encoder
def test_hidden_with_an_encoder_folder_is_refused_in_true_words(tmp_path, cli_runner):
    bert = build_bert(tmp_path / "bert")
    data = _write(tmp_path / "d.jsonl", gsm8k_rows(5))
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", "hidden",
                            "--model", bert], code=2)
    assert res.output.strip() == (
        f"ERROR: --model {bert}: is a BertModel, not a causal LM with its LM head (a ...ForCausalLM); --features "
        "hidden pools the hidden states of a causal LM's decoder, which reads the text left to right as a trainer's "
        "model does (its loss column comes from the LM head), not an encoder's; for its sentence embeddings use "
        f"--features semantic --encoder {bert}")
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", "text,gradient",
                            "--model", bert], code=2)
    assert res.output.strip() == (
        f"ERROR: --model {bert}: is a BertModel, not a causal LM with its LM head (a ...ForCausalLM); its features "
        f"would come from a head of random weights; for its sentence embeddings use --features semantic --encoder "
        f"{bert}")


# ------------------------------------------------------------------------------- 5. a folder without weights
def test_a_model_folder_without_weights_is_refused_as_the_encoders_is(tmp_path, cli_runner):
    """--model printed transformers' "Error no file named model.safetensors ... found in directory ..."."""
    data = _data_with_a_bad_last_line(tmp_path)
    bert = build_bert(tmp_path / "m" / "bert", weights=False)
    llama = build_llama(tmp_path / "m" / "llama")
    (llama / "model.safetensors").unlink()
    for option, feature, folder in (("--model", "gradient", bert), ("--model", "hidden", llama),
                                    ("--encoder", "semantic", bert)):
        res = _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", feature, option,
                                folder], code=2)
        assert res.output.strip() == (f"ERROR: {option} {folder}: the directory has no weights (model.safetensors, "
                                      "pytorch_model.bin); save the model with save_pretrained, not only its config")
    with pytest.raises(CurateError, match="the directory has no weights"):
        load_model(str(llama))


# ------------------------------------------------------------------------------- 6. README: the proxy's folder
def test_readme_says_where_the_proxy_is_saved():
    from cluster_curate.io import names
    from cluster_curate.io.artifacts import sidecar_path
    text = " ".join(README.read_text().split())
    assert "OUT.proxy" not in text
    assert sidecar_path("o/emb.parquet", names.PROXY) == Path("o/emb.proxy")
    assert sidecar_path("emb/", names.PROXY) == Path("emb.proxy")
    assert ("saved beside the output, as its name less `.parquet` plus `.proxy` (`--out o/emb.parquet`: "
            "`o/emb.proxy/`; `--out emb/`: `emb.proxy/`), and reusable with `--model o/emb.proxy`") in text
