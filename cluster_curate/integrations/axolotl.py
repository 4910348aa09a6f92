"""Keep the plan in axolotl's DPO trainer: `export --for axolotl` of preference pairs writes

    trainer_cls: cluster_curate.integrations.axolotl.PlanDPOTrainer

into its `config.yaml`. axolotl's SFT trainer reads `curriculum_sampling: true` as a sequential sampler, but its DPO
trainer (`AxolotlDPOTrainer`, TRL's `DPOTrainer` under it) does not derive from that trainer and takes the
Hugging Face `Trainer`'s sampler, which shuffles (`train_sampling_strategy="random"`; no axolotl key sets it).
`PlanDPOTrainer` is `AxolotlDPOTrainer` with `PlanTrainerMixin` (integrations/hf.py): the planned order, `id` and
`weight` kept, DPO's own loss. The class is built on first use, so that this module imports where axolotl is not
installed (the machine that curates).
"""

from __future__ import annotations


def __getattr__(name: str):
    # axolotl's trainer_cls is a "module.Class" string, resolved by import and getattr: a module attribute
    if name != "PlanDPOTrainer":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from axolotl.core.trainers.dpo.trainer import AxolotlDPOTrainer

    from cluster_curate.integrations.hf import PlanTrainerMixin

    trainer = type("PlanDPOTrainer", (PlanTrainerMixin, AxolotlDPOTrainer),
                   {"__module__": __name__, "__doc__": "axolotl's DPO trainer in the planned order (see the module)."})
    globals()[name] = trainer
    return trainer
