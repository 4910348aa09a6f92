"""Keep the plan in axolotl and log what each rank trained on, for `cluster-curate verify`. `export --for axolotl`
writes into its `config.yaml`:

    plugins:
      - cluster_curate.integrations.axolotl.ConsumedIdsPlugin
    trainer_cls: cluster_curate.integrations.axolotl.PlanSFTTrainer     # PlanDPOTrainer with rl: dpo
    datasets:
      - type: cluster_curate.integrations.axolotl                       # SFT; DPO keeps chat_template.default

- `ConsumedIdsPlugin`: axolotl imports the "module.Class" of each `plugins:` item and instantiates it; its
  `add_callbacks_pre_trainer` hook adds `ConsumedIdsCallback` (integrations/hf.py) to the trainer, which writes
  OUTPUT_DIR/consumed/rank-RRRRR.jsonl (axolotl's `output_dir`): `verify SHARDS --log OUTPUT_DIR/consumed`.
- `PlanSFTTrainer` / `PlanDPOTrainer`: axolotl's trainers with `PlanTrainerMixin`, which keeps the planned order
  and hands each micro-batch's ids to that callback. axolotl's SFT trainer reads `curriculum_sampling: true` as a
  sequential sampler, but its DPO trainer (`AxolotlDPOTrainer`, TRL's `DPOTrainer` under it) does not derive from
  that trainer and takes the Hugging Face `Trainer`'s sampler, which shuffles (`train_sampling_strategy="random"`;
  no axolotl key sets it). The loss stays axolotl's: neither dataset carries `weight`.
- the SFT dataset `type`: axolotl's `chat_template` strategy, each row's `id` kept. axolotl's tokenization drops
  every column of the file but what the strategy returns (its DPO strategy drops only the ones it read), so the
  trainer would have no id to log; axolotl resolves a dotted `type` to a module and calls its `load`.

The classes are built on first use, so that this module imports where axolotl is not installed (the machine that
curates).
"""

from __future__ import annotations

from pathlib import Path

CONSUMED_DIR = "consumed"  # under axolotl's output_dir


def consumed_log_dir(output_dir) -> Path:
    """Where `ConsumedIdsPlugin` has the ranks log what they trained on (`verify --log`)."""
    return Path(output_dir) / CONSUMED_DIR


def load(tokenizer, cfg, ds_cfg=None, processor=None):
    """axolotl's dataset `type: cluster_curate.integrations.axolotl`: its `chat_template` strategy, loaded from the
    same config, whose tokenized rows keep the row's `id`."""
    from axolotl.prompt_strategies.chat_template import load as chat_template
    return KeepIdStrategy(chat_template(tokenizer, cfg, ds_cfg=ds_cfg, processor=processor))


class KeepIdStrategy:
    """A prompt tokenizing strategy that adds each row's `id` to what `strategy` makes of it (one row, or a batch
    of rows as lists); everything else is `strategy`'s."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __getattr__(self, name):
        if name == "strategy":  # not set yet (unpickling in a worker process): no recursion
            raise AttributeError(name)
        return getattr(self.strategy, name)

    def tokenize_prompt(self, prompt: dict) -> dict:
        tokenized = self.strategy.tokenize_prompt(prompt)
        ids = prompt["id"]
        if isinstance(ids, list) and len(tokenized.get("input_ids", ())) != len(ids):
            raise ValueError(f"the chat_template strategy made {len(tokenized.get('input_ids', ()))} rows of "
                             f"{len(ids)}: the ids would no longer match their rows")
        return {**tokenized, "id": ids}


def __getattr__(name: str):
    # plugins and trainer_cls are "module.Class" strings, resolved by import and getattr: module attributes
    if name not in _BUILDERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = _BUILDERS[name]()
    globals()[name] = built
    return built


def _plan_trainer(name: str, base: type) -> type:
    from cluster_curate.integrations.hf import PlanTrainerMixin
    return type(name, (PlanTrainerMixin, base),
                {"__module__": __name__,
                 "__doc__": f"axolotl's {base.__name__} in the planned order (see the module)."})


def _plan_sft_trainer() -> type:
    from axolotl.core.trainers.base import AxolotlTrainer
    return _plan_trainer("PlanSFTTrainer", AxolotlTrainer)


def _plan_dpo_trainer() -> type:
    from axolotl.core.trainers.dpo.trainer import AxolotlDPOTrainer
    return _plan_trainer("PlanDPOTrainer", AxolotlDPOTrainer)


def _consumed_ids_plugin() -> type:
    from axolotl.integrations.base import BasePlugin

    from cluster_curate.integrations.hf import ConsumedIdsCallback

    def add_callbacks_pre_trainer(self, cfg, model):
        return [ConsumedIdsCallback(consumed_log_dir(cfg.output_dir))]

    return type("ConsumedIdsPlugin", (BasePlugin,),
                {"__module__": __name__, "add_callbacks_pre_trainer": add_callbacks_pre_trainer,
                 "__doc__": "Adds ConsumedIdsCallback: each rank logs its micro-batches' ids (see the module)."})


_BUILDERS = {"PlanSFTTrainer": _plan_sft_trainer, "PlanDPOTrainer": _plan_dpo_trainer,
             "ConsumedIdsPlugin": _consumed_ids_plugin}
