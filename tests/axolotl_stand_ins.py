"""axolotl is not installed here (0.19.0 pins other transformers and TRL versions): how it resolves the names an
`export --for axolotl` config.yaml gives, mirrored from its code (axolotl/integrations/base.py `load_plugin`,
axolotl/prompt_strategies/__init__.py `load`, axolotl/utils/import_helper.py `get_cls_from_module_str`,
axolotl/datasets.py `TokenizedPromptDataset`), and stand-ins for the three axolotl classes our names build on:
`BasePlugin`, `AxolotlTrainer` (a transformers `Trainer`) and the chat_template strategy (the chat template over
the conversation, the loss on its last answer; like axolotl's, it returns the tokens alone)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types


def load_plugin(name: str):
    """A `plugins:` item: import "module", getattr "Class", instantiate it."""
    module_name, class_name = name.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), class_name)()


def get_cls_from_module_str(name: str):
    """`trainer_cls:`: import the module, getattr the class."""
    module_name, class_name = name.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), class_name)


def load_strategy(strategy: str, tokenizer, cfg, ds_cfg):
    """A dataset `type:` with dots and no `load_` function named: the last part is a module of the package the
    others name, and its `load` makes the strategy."""
    package, load_fn = "axolotl.prompt_strategies", "load"
    if len(strategy.split(".")) > 1:
        importlib.import_module("." + strategy.split(".")[-1], ".".join(strategy.split(".")[:-1]))
        package, strategy = ".".join(strategy.split(".")[:-1]), strategy.split(".")[-1]
    return getattr(importlib.import_module(f".{strategy}", package), load_fn)(tokenizer, cfg, ds_cfg=ds_cfg)


def tokenize_dataset(strategy, dataset):
    """axolotl's TokenizedPromptDataset: a batched map that removes every column the file had."""
    return dataset.map(strategy.tokenize_prompt, batched=strategy.supports_batched, batch_size=1_000,
                       remove_columns=list(dataset.features.keys()))


class ChatTemplateStandIn:
    """axolotl's chat_template strategy, in what our names rely on: rows in, tokens out, every other field gone."""

    supports_batched = True

    def __init__(self, tokenizer, field_messages: str):
        self.tokenizer, self.field_messages = tokenizer, field_messages

    def tokenize_prompt(self, prompt: dict) -> dict:
        from plan_trainers_job import encode_chat_like_trl
        rows = [encode_chat_like_trl(self.tokenizer, turns[:-1], turns[-1:]) for turns in prompt[self.field_messages]]
        return {k: [r[k] for r in rows] for k in ("input_ids", "attention_mask", "labels")}


class BasePluginStandIn:
    def add_callbacks_pre_trainer(self, cfg, model):
        return []


def install(set_module) -> None:
    """Where axolotl is not installed, `set_module(name, module)` (monkeypatch.setitem on sys.modules, or
    sys.modules.__setitem__ in a job) puts the stand-ins where our names import axolotl's classes from."""
    loaded = sys.modules.get("axolotl")
    if loaded.__spec__ is not None if loaded is not None else importlib.util.find_spec("axolotl") is not None:
        return  # the real axolotl (a stand-in, installed before, has no spec)
    from transformers import Trainer

    for name in ("axolotl", "axolotl.integrations", "axolotl.core", "axolotl.core.trainers",
                 "axolotl.prompt_strategies"):
        set_module(name, types.ModuleType(name))
    set_module("axolotl.integrations.base", types.SimpleNamespace(BasePlugin=BasePluginStandIn))
    set_module("axolotl.core.trainers.base", types.SimpleNamespace(AxolotlTrainer=Trainer))
    set_module("axolotl.prompt_strategies.chat_template", types.SimpleNamespace(
        load=lambda tokenizer, cfg, ds_cfg=None, processor=None: ChatTemplateStandIn(
            tokenizer, ds_cfg.get("field_messages", "messages"))))
