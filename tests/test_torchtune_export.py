"""`export --for torchtune` read by torchtune itself (0.6.1): the dataset of the written config.yaml built by
torchtune's config system with its own builders (`chat_dataset`, `preference_dataset`), as written and merged into
a recipe config torchtune ships, tokenised by its Qwen2 tokenizer (ChatML turns) over a byte-level vocabulary made
here; the tokens and labels are compared with the source conversations."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES
from test_outputs import FAST, _cli

torchtune = pytest.importorskip("torchtune")  # the dev extra installs it: `make test` runs these
from omegaconf import OmegaConf  # noqa: E402 (torchtune's config system)
from torchtune import config  # noqa: E402

# the configs `tune cp` copies: recipes/configs beside the torchtune package (torchtune/_cli/cp.py)
RECIPE_CONFIGS = Path(torchtune.__file__).parent.parent / "recipes" / "configs"
IGNORED = -100  # torchtune's CROSS_ENTROPY_IGNORE_IDX: a masked token's label


def _ok(*argv, cwd):
    r = _cli(*argv, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """torchtune's Qwen2Tokenizer over the 256 byte symbols with no merges: every byte one token, so any text
    decodes back exactly; <|im_start|> / <|im_end|> frame each turn."""
    from torchtune.models.qwen2._tokenizer import Qwen2Tokenizer, bytes_to_unicode
    tmp = tmp_path_factory.mktemp("tokenizer")
    (tmp / "vocab.json").write_text(json.dumps({ch: i for i, ch in enumerate(bytes_to_unicode().values())}))
    (tmp / "merges.txt").write_text("#version: 0.2\n")
    return Qwen2Tokenizer(str(tmp / "vocab.json"), str(tmp / "merges.txt"),
                          special_tokens={"<|endoftext|>": 256, "<|im_start|>": 257, "<|im_end|>": 258})


def _chatml(turns: list[dict]) -> str:
    """The turns as the Qwen2 tokenizer frames them (the last one closed by its eos, <|im_end|>)."""
    return "\n".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>" for t in turns)


def _datasets(export_dir: Path, recipe_config: str, tokenizer):
    """The export's dataset built from its config.yaml as written, and from that file merged into a recipe config
    torchtune ships (whose own dataset settings the merge keeps where ours name none)."""
    ours = OmegaConf.load(export_dir / "config.yaml")
    merged = OmegaConf.merge(OmegaConf.load(RECIPE_CONFIGS / recipe_config), ours)
    assert merged.shuffle is False and merged.batch_size == 2
    return {name: config.instantiate(cfg.dataset, tokenizer=tokenizer)
            for name, cfg in (("as written", ours), (recipe_config, merged))}


def test_chat_dataset_reads_the_sft_export_with_its_system_prompts_and_turns(tmp_path, tokenizer):
    """Chats with a system prompt and several turns: torchtune's tokens are each exported conversation, its labels
    the assistant turns alone (the prompt masked), also once merged into llama2/7B_qlora.yaml, whose dataset
    says `train_on_input: True`."""
    source = [json.loads(line) for line in (FIXTURES / "chat" / "messages-300.jsonl").read_text().splitlines()]
    _ok("run", str(FIXTURES / "chat" / "messages-300.jsonl"), "--out", "out", *FAST, "-q", cwd=tmp_path)
    _ok("export", "out/shards", "--for", "torchtune", "--out", "tt", "-q", cwd=tmp_path)
    readme = (tmp_path / "tt" / "README.md").read_text()
    assert "`train_on_input: False`" in readme and "`tensor_parallel_dim: T`" in readme
    exported = pq.read_table(tmp_path / "tt" / "train.parquet").to_pylist()
    chats = [source[row["id"]]["messages"] for row in exported]
    assert any(c[0]["role"] == "system" for c in chats) and any(len(c) > 3 for c in chats)
    for name, ds in _datasets(tmp_path / "tt", "llama2/7B_qlora.yaml", tokenizer).items():
        assert len(ds) == len(exported), name
        for i, chat in enumerate(chats):
            sample = ds[i]
            assert tokenizer.decode(sample["tokens"]) == _chatml(chat), (name, i)
            trained = [t for t in sample["labels"] if t != IGNORED]
            assert tokenizer.decode(trained) == _chatml([t for t in chat if t["role"] == "assistant"]), (name, i)
