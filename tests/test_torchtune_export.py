"""`export --for torchtune` read by torchtune itself (0.6.1): the dataset of the written config.yaml built by
torchtune's config system with its own builders (`chat_dataset`, `preference_dataset`), as written and merged into
a recipe config torchtune ships, tokenised by its Qwen2 tokenizer (ChatML turns) over a byte-level vocabulary made
here; the tokens and labels are compared with the source conversations."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torchtune  # the dev extra's (pyproject.toml): these tests run, never skip, under `make test`
from omegaconf import OmegaConf  # torchtune's config system
from torchtune import config

from conftest import FIXTURES
from test_outputs import FAST, _cli

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


@pytest.fixture(scope="module")
def sft_export(tmp_path_factory) -> tuple[Path, list[list[dict]]]:
    """`run` (2 ranks, micro-batch 2) and `export --for torchtune` of chats with system prompts and several turns:
    the export's folder and each exported row's source conversation."""
    tmp = tmp_path_factory.mktemp("sft")
    source = [json.loads(line) for line in (FIXTURES / "chat" / "messages-300.jsonl").read_text().splitlines()]
    _ok("run", str(FIXTURES / "chat" / "messages-300.jsonl"), "--out", "out", *FAST, "-q", cwd=tmp)
    _ok("export", "out/shards", "--for", "torchtune", "--out", "tt", "-q", cwd=tmp)
    exported = pq.read_table(tmp / "tt" / "train.parquet").to_pylist()
    return tmp / "tt", [source[row["id"]]["messages"] for row in exported]


def test_chat_dataset_reads_the_sft_export_with_its_system_prompts_and_turns(sft_export, tokenizer):
    """Chats with a system prompt and several turns: torchtune's tokens are each exported conversation, its labels
    the assistant turns alone (the prompt masked), also once merged into llama2/7B_qlora.yaml, whose dataset
    says `train_on_input: True`."""
    out, chats = sft_export
    readme = (out / "README.md").read_text()
    assert "`train_on_input: False`" in readme and "`tensor_parallel_dim: T`" in readme
    assert any(c[0]["role"] == "system" for c in chats) and any(len(c) > 3 for c in chats)
    for name, ds in _datasets(out, "llama2/7B_qlora.yaml", tokenizer).items():
        assert len(ds) == len(chats), name
        for i, chat in enumerate(chats):
            sample = ds[i]
            assert tokenizer.decode(sample["tokens"]) == _chatml(chat), (name, i)
            trained = [t for t in sample["labels"] if t != IGNORED]
            assert tokenizer.decode(trained) == _chatml([t for t in chat if t["role"] == "assistant"]), (name, i)


def test_a_config_whose_dataset_is_a_list_takes_the_export_as_its_first_item(sft_export, tokenizer, tmp_path):
    """torchtune's recipes also take `dataset:` as a list, whose datasets they concatenate (ConcatDataset); config.yaml
    does not merge into such a config (OmegaConf refuses a mapping over a list) and said nothing of it. It says to
    make its `dataset` the list's first item: the recipe's data set-up then deals rank r the rows of shard r, in the
    planned micro-batches, before the user's other datasets; as the second item they would reach other ranks."""
    from omegaconf import ListConfig
    from torch.utils.data import DataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler
    from torchtune.datasets import ConcatDataset
    out, chats = sft_export
    num_ranks, micro_batch = 2, 2  # FAST's
    other = [json.loads(line) for line in (FIXTURES / "chat" / "messages-300.jsonl").read_text().splitlines()[:5]]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    user = OmegaConf.create({"dataset": [{"_component_": "torchtune.datasets.chat_dataset", "source": "json",
                                          "data_files": str(tmp_path / "mine.jsonl"), "split": "train",
                                          "conversation_column": "messages", "conversation_style": "openai"}],
                             "shuffle": True, "batch_size": 8})
    ours = OmegaConf.load(out / "config.yaml")
    with pytest.raises(Exception, match="incompatible container types"):
        OmegaConf.merge(user, ours)
    said = " ".join(line.lstrip("# ") for line in (out / "config.yaml").read_text().splitlines() if line[:1] == "#")
    assert "`dataset:` is a list" in said and "make this `dataset` its first item" in said, said

    def dealt(datasets) -> list[list[str]]:  # each rank's texts in the order it reads them (the recipes' set-up)
        cfg = OmegaConf.merge(user, {k: v for k, v in ours.items() if k != "dataset"}, {"dataset": datasets})
        assert isinstance(cfg.dataset, ListConfig) and cfg.shuffle is False and cfg.batch_size == micro_batch
        ds = ConcatDataset([config.instantiate(c, tokenizer) for c in cfg.dataset])
        return [[tokenizer.decode(ds[i]["tokens"]) for batch in DataLoader(
            range(len(ds)), batch_size=cfg.batch_size, collate_fn=list,
            sampler=StatefulDistributedSampler(ds, num_replicas=num_ranks, rank=r, shuffle=cfg.shuffle))
            for i in batch] for r in range(num_ranks)]

    planned = [[_chatml(c) for c in chats[r::num_ranks]] for r in range(num_ranks)]
    first = dealt([ours.dataset, *user.dataset])
    assert [texts[:len(planned[r])] for r, texts in enumerate(first)] == planned
    second = dealt([*user.dataset, ours.dataset])
    assert [texts[-len(planned[r]):] for r, texts in enumerate(second)] != planned


def orca_dpo_rows(n: int = 40) -> list[dict]:
    """Rows shaped as Intel/orca_dpo_pairs': `system` (empty in some rows), `question`, `chosen` and `rejected` as
    text; GSM8K questions, the right answer chosen and a wrong one rejected."""
    rows = []
    for i, line in enumerate((FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()[:n]):
        r = json.loads(line)
        final = r["answer"].split("####")[-1].strip()
        rows.append({"system": "" if i % 3 == 0 else "You are an AI assistant. Think step by step.",
                     "question": r["question"], "chosen": r["answer"], "rejected": f"The answer is {final}0."})
    return rows


def test_preference_dataset_reads_the_dpo_export_of_pairs_with_system_prompts_and_turns(tmp_path, tokenizer):
    """Orca DPO pairs (a system column) and UltraFeedback / Capybara pairs (whole conversations, some multi-turn):
    `export --for torchtune` wrote no layout for them (refused). Now torchtune's preference_dataset, built from the
    written config.yaml as written and merged into llama3_1/8B_lora_dpo.yaml, reads each pair: chosen and rejected
    are the prompt turns then that answer, the labels that answer alone."""
    from test_input_formats import ultrafeedback_rows
    from test_datasets import write_jsonl
    cases = {"orca": (orca_dpo_rows(), ["--prompt-field", "question"]), "capybara": (ultrafeedback_rows(), [])}
    for name, (rows, fields) in cases.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
        _ok("run", f"{name}.jsonl", "--out", name, *FAST[:-6], "--fraction", "0.5", "-n", "2", "--micro-batch-size",
            "2", *fields, "-q", cwd=tmp_path)
        _ok("export", f"{name}/shards", "--for", "torchtune", "--out", f"{name}-tt", "-q", cwd=tmp_path)
        out = tmp_path / f"{name}-tt"
        assert "preference_dataset" in (out / "config.yaml").read_text()
        assert "lora_dpo_distributed" in (out / "README.md").read_text()
        exported = pq.read_table(out / "train.parquet").to_pylist()
        pairs = []
        for row in exported:
            rec = rows[row["id"]]
            if name == "orca":
                prompt = ([{"role": "system", "content": rec["system"]}] if rec["system"] else []) + [
                    {"role": "user", "content": rec["question"]}]
                good, bad = rec["chosen"], rec["rejected"]
            else:
                prompt, good, bad = rec["chosen"][:-1], rec["chosen"][-1]["content"], rec["rejected"][-1]["content"]
            pairs.append((prompt, good, bad))
        assert any(p[0]["role"] == "system" for p, _, _ in pairs) or name != "orca"
        assert any(len(p) > 1 for p, _, _ in pairs)
        for config_name, ds in _datasets(out, "llama3_1/8B_lora_dpo.yaml", tokenizer).items():
            assert len(ds) == len(exported), config_name
            for i, (prompt, good, bad) in enumerate(pairs):
                sample = ds[i]
                for side, answer in (("chosen", good), ("rejected", bad)):
                    turn = {"role": "assistant", "content": answer}
                    assert tokenizer.decode(sample[f"{side}_input_ids"]) == _chatml(prompt + [turn]), (name, i)
                    trained = [t for t in sample[f"{side}_labels"] if t != IGNORED]
                    answers = [t for t in prompt if t["role"] == "assistant"] + [turn]
                    assert tokenizer.decode(trained) == _chatml(answers), (name, config_name, i, side)
