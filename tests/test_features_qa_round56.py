"""QA round 56, the features: a model without a chat template counts a row's tokens as `--tokenizer` does (the
text and EOS, not the `### User:` scaffold its features read), `embed --help` says what the gradient feature
computes, and a `--dim` above the model's hidden size for gradient / hidden is warned of (as text's above what its
sample holds). Tiny models built here with save_pretrained, as users save theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from cluster_curate.cli import main
from cluster_curate.features.embed import FEATURE_KINDS
from cluster_curate.io.artifacts import read_artifact
from cluster_curate.io.datasets import open_dataset

from tiny_encoder import gsm8k_rows
from tiny_lm import build_llama

torch.set_num_threads(1)


def _run(cli_runner, args, code=0):
    res = cli_runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _summary(res) -> dict:
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def plain_llama(tmp_path_factory) -> Path:
    """A Llama (hidden size 64) whose tokenizer has no chat template: a base model."""
    return build_llama(tmp_path_factory.mktemp("plain") / "tiny", chat_template=False)


# ------------------------------------------------------------------- 1. n_tokens without a chat template
def test_n_tokens_of_a_model_without_a_chat_template_are_its_tokenizers_counts(tmp_path, cli_runner, plain_llama):
    """embed's n_tokens (token budgets and shard balance without --tokenizer) and `select --tokenizer` with the
    same tokenizer count a row alike: the prompt's text, the answer and EOS (README: "without a template, the
    text and EOS"); they counted BOS and the scaffold beside it, 22 tokens more per GSM8K row. A row cut to
    --max-length for the features is counted whole."""
    from transformers import AutoTokenizer

    data = _write(tmp_path / "d.jsonl", gsm8k_rows(12))
    _run(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--features", "gradient", "--model",
                      plain_llama, "--max-length", "96", "-q"])
    _run(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "c.parquet", "--k", "2", "-q"])
    _run(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s.parquet", "--fraction", "1.0",
                      "--tokenizer", plain_llama, "-q"])
    emb, _ = read_artifact(tmp_path / "e.parquet", kind="embeddings")
    embedded = dict(zip(emb.column("id").to_pylist(), emb.column("n_tokens").to_pylist()))
    sel = pq.read_table(tmp_path / "s.parquet")
    counted = dict(zip(sel.column("id").to_pylist(), sel.column("n_tokens").to_pylist()))
    assert len(embedded) == 12 and embedded == counted
    tok = AutoTokenizer.from_pretrained(plain_llama)
    assert not tok.chat_template and tok.eos_token_id is not None
    examples = [e for b in open_dataset(str(data)).iter_batches() for e in b.examples]
    text = {e.id: len(tok(e.prompt[0]["content"], add_special_tokens=False)["input_ids"])
            + len(tok(e.response, add_special_tokens=False)["input_ids"]) + 1 for e in examples}
    assert embedded == text
    assert max(text.values()) > 96  # some rows were cut for the features, and counted whole


# ------------------------------------------------------------------------------------- 2. the help's words
def test_embed_help_says_what_the_gradient_feature_computes(cli_runner):
    """The feature is mean over response positions of (p(gold) - 1) · h_t, the gradient w.r.t. the output rows
    of the gold tokens (README's table, extractors' docstring): not the gradient w.r.t. the hidden states."""
    words = FEATURE_KINDS.get("gradient").help
    assert words == ("the paper's: mean over response positions of (p(gold) - 1) * h_t (h_t: the last hidden "
                     "state), the response loss's gradient w.r.t. the output-layer rows of the gold tokens (random "
                     "projection to --dim)")
    shown = "".join(_run(cli_runner, ["embed", "--help"]).output.split())
    assert "".join(words.split()) in shown and "w.r.t.thelasthiddenstates" not in shown


# ------------------------------------------------------------------------ 3. --dim above the hidden size
def test_dim_above_the_hidden_size_is_warned_of(tmp_path, cli_runner, plain_llama):
    """`--dim 128` on a model of hidden size 64 gives vectors of rank 64: said in one warning naming the hidden
    size (text's --dim above what its sample holds is warned of, not refused, likewise); --dim 64 says nothing."""
    data = _write(tmp_path / "d.jsonl", gsm8k_rows(6))
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "wide.parquet", "--features", "gradient,hidden",
                            "--model", plain_llama, "--dim", "128", "--json"])
    said = [w for w in _summary(res)["warnings"] if w.startswith("--dim")]
    assert said == ["--dim 128: the gradient and hidden vectors have the model's hidden size, 64; projected to 128 "
                    "dims they span only 64 directions (give at most --dim 64, or leave it out)"]
    table, _ = read_artifact(tmp_path / "wide.parquet", kind="embeddings")
    assert table.schema.field("embedding").type.list_size == 256  # still made as asked
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "fit.parquet", "--features", "hidden", "--model",
                            plain_llama, "--dim", "64", "--json"])
    assert not [w for w in _summary(res)["warnings"] if w.startswith("--dim")]
    # a target embedded --like the wide pool takes its --dim, which it cannot change: not warned of (review)
    res = _run(cli_runner, ["embed", data, "--out", tmp_path / "t.parquet", "--like", tmp_path / "wide.parquet",
                            "--json"])
    assert not [w for w in _summary(res)["warnings"] if w.startswith("--dim")]


def test_only_embeddings_that_read_a_causal_lm_move_to_version_9(tmp_path):
    """The count's fix bumped embed's one version for every feature: `run` on a folder of text features made by
    version 8 embedded, clustered, selected and sharded again though nothing of theirs changed (review). Embeddings
    of text or semantic alone, and the text basis, keep version 8; those that read a causal LM record 9."""
    from conftest import cli_in_process

    from cluster_curate.commands.embed import algorithm_version
    assert algorithm_version({"features": "text"}) == algorithm_version({"features": "text,semantic"}) == 8
    assert algorithm_version({"features": None}) == 8  # the default
    assert algorithm_version({"features": "text,gradient"}) == algorithm_version({"features": "hidden"}) == 9
    data = _write(tmp_path / "d.jsonl", gsm8k_rows(40))
    model = build_llama(tmp_path / "lm", chat_template=False)
    for features, version in (("text", 8), ("hidden", 9)):
        out = tmp_path / f"{features}.parquet"
        r = cli_in_process("embed", data, "--out", out, "--features", features, "--dim", "8",
                           *(["--model", model, "--device", "cpu"] if features == "hidden" else []), "-q")
        assert r.returncode == 0, r.stderr
        assert read_artifact(out)[1].algorithm == version


def test_embed_does_not_print_transformers_sequence_length_warning(tmp_path, capfd):
    """A model whose tokenizer declares model_max_length 64: embed counts a longer row whole and cuts it itself
    (its own warning), but transformers also printed "Token indices sequence length is longer than the specified
    maximum sequence length ... indexing errors", untrue there (review)."""
    from conftest import cli_in_process
    model = build_llama(tmp_path / "lm", chat_template=False)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps(dict(config, model_max_length=64)))
    rows = gsm8k_rows(6) + [{"question": "word " * 400, "answer": "42"}]
    data = _write(tmp_path / "d.jsonl", rows)
    r = cli_in_process("embed", data, "--out", tmp_path / "e.parquet", "--features", "hidden", "--model", model,
                       "--device", "cpu", "--max-length", "48")
    assert r.returncode == 0, r.stderr
    printed = r.stderr + capfd.readouterr().err  # transformers' logger writes to the stderr it found at import
    assert "sequence length" not in printed, printed
    n_tokens = pq.read_table(tmp_path / "e.parquet").column("n_tokens").to_pylist()
    assert max(n_tokens) > 400  # counted whole
