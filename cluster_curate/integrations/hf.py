"""Keep the plan in the Hugging Face `Trainer` and TRL's `SFTTrainer` (and `DPOTrainer`), and weight each
example's loss.

    from cluster_curate.integrations.hf import PlanTrainerMixin, ConsumedIdsCallback

    class PlanTrainer(PlanTrainerMixin, Trainer): ...          # or (PlanTrainerMixin, trl.SFTTrainer)
    ds = datasets.load_dataset("parquet", data_files="export/train.parquet", split="train")  # export --for hf|trl
    trainer = PlanTrainer(model=model, args=TrainingArguments(per_device_train_batch_size=M, ...),
                          train_dataset=ds, callbacks=[ConsumedIdsCallback("consumed/")])

What the mixin changes, and nothing else:

- the train sampler is `PlannedOrderSampler` (sequential), whatever `train_sampling_strategy` says and on every
  transformers version (4.x has no "sequential" strategy); Accelerate then deals micro-batch p, p + N, ... to
  process p, which on a batch-interleaved export is exactly shard p in order;
- `id` and `weight` survive `remove_unused_columns` and the collator (they are set aside before the collator
  and put back as tensors);
- the loss: per example, the mean cross-entropy over its label tokens (labels != -100: the response tokens when
  the prompt is masked); per micro-batch, the mean over its examples of weight × that loss. That is the
  loader's convention (`(per_example * weight).mean()`); DDP then averages over ranks, so a global step is the
  weighted mean over all N × M examples divided by N × M (not by the sum of the weights). The loss is a
  per-micro-batch mean, so the Trainer divides it by the gradient-accumulation steps as usual;
- each micro-batch's ids, weights and loss go to every `ConsumedIdsCallback` (for `cluster-curate verify`);
- before the first step it refuses a job whose world size × per_device_train_batch_size is not the rows a planned
  step holds (num_shards × micro_batch_size, read from the `step` column), as `load_shard` refuses another world
  size: the Trainer would deal other ranks' rows and train to the end; and a process of a job of several whose
  TrainingArguments are not data-parallel (on CPU: use_cpu=True, ddp_backend="gloo"), which would train alone.

With TRL `padding_free=True` a micro-batch is one row of its examples end to end: each example's loss is that of
its segment (position_ids restart at 0), weighted as above.

With TRL `packing=True` the `id` column does not survive (TRL packs input_ids and labels only): the mixin then
recovers each packed segment's id from its tokens, so `verify` shows what packing did to the plan, and falls back
to TRL's own unweighted loss.

With TRL's `DPOTrainer` (preference pairs, `export --for trl` of `--format preference` data) the mixin keeps the
order, `id` and `weight` and logs each micro-batch, but the loss stays DPO's own, unweighted: a batch holds no
`labels` (DPO scores each pair, chosen against rejected, beside a reference model), so there is no per-example
cross-entropy to weight.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Sampler
from transformers import TrainerCallback

from cluster_curate.errors import CurateError
from cluster_curate.loader import ConsumedLog

PLAN_KEYS = ("id", "weight")


class PlannedOrderSampler(Sampler):
    """0, 1, ..., len - 1: the exported file is already in the order the ranks must be dealt."""

    def __init__(self, data_source):
        self.n = len(data_source)

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def trained_micro_batches(global_step: int, accumulation: int, per_epoch: int | None) -> int:
    """The micro-batches a process trained on in `global_step` optimizer steps. The Trainer ends each epoch's last
    accumulation early (an epoch of 6 micro-batches at 4 a step is 2 steps), so a step is not always `accumulation`
    micro-batches; `per_epoch`: the data loader's micro-batches (None: unknown, every step a full one)."""
    if not per_epoch:
        return global_step * accumulation
    steps_per_epoch = -(-per_epoch // accumulation)
    epochs, steps = divmod(global_step, steps_per_epoch)
    return epochs * per_epoch + min(steps * accumulation, per_epoch)


def plan_rows_per_step(dataset) -> int | None:
    """The rows each planned step of an exported dataset holds, num_shards × micro_batch_size: the length of each
    run of one number in the `step` column every trainer layout keeps (the manifest's two numbers do not survive
    `datasets`' loading; an export repeated holds each number twice). None where there is no plan to read: not a
    `datasets.Dataset`, no `step` column (TRL's packing and axolotl's tokenization drop it), no rows, runs of
    unequal lengths (rows taken out or mixed in before training) or rows shuffled: `verify` names those."""
    try:
        import datasets
    except ImportError:  # the Trainer takes any torch Dataset; `datasets` need not be installed
        return None
    if not isinstance(dataset, datasets.Dataset) or "step" not in dataset.column_names:
        return None
    column = dataset.with_format("arrow")["step"]
    if column.null_count or not len(column):
        return None
    steps = column.to_numpy()
    # runs of one step number: an export repeated (concatenate_datasets([ds, ds])) holds each number twice
    bounds = np.flatnonzero(np.diff(steps) != 0) + 1
    runs = set(np.diff(np.concatenate(([0], bounds, [steps.size]))).tolist())
    ordered = np.count_nonzero(np.diff(steps) < 0) * 2 < max(bounds.size, 1)  # not shuffled before training
    return runs.pop() if len(runs) == 1 and ordered else None


class ConsumedIdsCallback(TrainerCallback):
    """Writes LOGDIR/rank-RRRRR.jsonl: one line per micro-batch this process trained on (fed by the mixin)."""

    def __init__(self, log_dir):
        self.log_dir, self.log = log_dir, None

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        # resumed from a checkpoint (its state loaded by now): the micro-batches trained up to it stay logged
        per_epoch = len(train_dataloader) if train_dataloader is not None and hasattr(train_dataloader, "__len__") \
            else None
        self.log = ConsumedLog(self.log_dir, rank=args.process_index, resume_at=trained_micro_batches(
            state.global_step, args.gradient_accumulation_steps, per_epoch))

    def record(self, ids, weights=None, loss=None):
        if self.log is not None:
            self.log.record(ids, weights, loss)

    def on_train_end(self, args, state, control, **kwargs):
        if self.log is not None:
            self.log.close()


class _KeepPlanColumns:
    """Wraps a collator: sets `id` / `weight` aside, collates the rest, puts them back as tensors."""

    def __init__(self, collator):
        self.collator = collator

    def __call__(self, features):
        kept = {k: [f.pop(k) for f in features] for k in PLAN_KEYS if features and k in features[0]}
        if None in kept.get("id", ()):
            # a dataset mixed in beside the export (axolotl's `datasets:` list) has no ids: say so, not a TypeError
            raise ValueError("PlanTrainerMixin: a row without an id reached the trainer: rows of another dataset are "
                             "mixed with the export's; train the export alone (its ids are what verify checks)")
        batch = self.collator(features)
        if "id" in kept:
            batch["id"] = torch.tensor(kept["id"], dtype=torch.long)
        if "weight" in kept:
            batch["weight"] = torch.tensor(kept["weight"], dtype=torch.float32)
        return batch


def weighted_causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor,
                            position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """mean_i weight_i × (mean cross-entropy over example i's label tokens), next-token shifted; an example with
    no label token contributes 0. `position_ids` of one row holding several examples end to end (TRL's
    `padding_free`: a position 0 starts each): the examples are its segments, in order."""
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:]
    per_token = torch.nn.functional.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)),
                                                  shift_labels.reshape(-1), reduction="none", ignore_index=-100)
    per_token = per_token.view(shift_labels.shape)
    mask = (shift_labels != -100).float()
    if labels.size(0) == 1 < weight.numel() and position_ids is not None:
        # each label token's example: the segments counted up to it (the collator masks each segment's first token,
        # so no token is predicted across two examples)
        segment = (position_ids[0] == 0).cumsum(0)[1:] - 1
        n = weight.numel()
        if int(segment[-1]) + 1 != n:
            raise ValueError(f"PlanTrainerMixin: a padding-free row holds {int(segment[-1]) + 1} examples (its "
                             f"position_ids restart so often) but the micro-batch has {n} weights")
        zeros = torch.zeros(n, dtype=per_token.dtype, device=per_token.device)
        loss_sum = zeros.index_add(0, segment, (per_token * mask)[0])
        counts = zeros.index_add(0, segment, mask[0])
        per_example = loss_sum / counts.clamp(min=1)
    else:
        per_example = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
    return (per_example * weight.to(per_example.dtype)).mean()


class PlanTrainerMixin:
    """Mix in before `transformers.Trainer`, `trl.SFTTrainer` or `trl.DPOTrainer` (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        self._ids_by_tokens = None
        super().__init__(*args, **kwargs)
        strategy = getattr(self.args, "train_sampling_strategy", None)
        if getattr(self.args, "group_by_length", False) or strategy in ("group_by_length", "batch_rebalance"):
            raise ValueError(f"PlanTrainerMixin: train_sampling_strategy={strategy!r} / group_by_length reorders the "
                             "planned rows (the plan already groups lengths); use 'sequential'")
        self.data_collator = _KeepPlanColumns(self.data_collator)
        if self._ids_by_tokens is None:
            # our loss never takes num_items_in_batch: the Trainer then neither counts the batch's label tokens
            # across ranks nor (transformers 4.x) skips the division by the accumulation steps
            self.model_accepts_loss_kwargs = False

    @property
    def loss_is_scaled_for_ga(self):
        """Our weighted loss is a per-micro-batch mean, so the Trainer divides it by the accumulation steps
        (transformers 5.x reads this); TRL's own loss under packing is already scaled (None: the Trainer decides)."""
        return None if getattr(self, "_ids_by_tokens", None) is not None else False

    # -- the plan's sizes, checked before the first step (as load_shard checks a shard's world size when opened)
    def get_train_dataloader(self, *args, **kwargs):
        self._check_plan_sizes()
        return super().get_train_dataloader(*args, **kwargs)

    def _check_plan_sizes(self):
        """The rows a planned step holds must be the rows this job deals a step, else the Trainer deals rows of
        other ranks' micro-batches (and trains to the end without a word: only `verify` would say it)."""
        self._check_trains_in_parallel()
        planned = plan_rows_per_step(self.train_dataset)
        if planned is None:
            return
        batch = self._train_batch_size  # the data loader's, after auto_find_batch_size
        total = getattr(self, "get_total_train_batch_size", None)  # transformers 5.x: its data-parallel processes
        world = (total(self.args) // (batch * self.args.gradient_accumulation_steps) if total is not None
                 else self.args.world_size)
        if world * batch != planned:
            raise CurateError(f"PlanTrainerMixin: the train dataset was written for {planned} rows a step (its `step` "
                              f"column: num_shards × micro_batch_size) but this job has world size {world} × "
                              f"per_device_train_batch_size {batch} = {world * batch} rows a step: run it on the ranks "
                              "and per-device batch size its export's README.md names (\"Planned for N ranks × "
                              f"micro-batch M\"), or re-run `cluster-curate shard --num-shards {world} "
                              f"--micro-batch-size {batch}` and export again")

    def _check_trains_in_parallel(self):
        """A process of a job of several (torch.distributed or torchrun) whose TrainingArguments are not
        data-parallel (on CPU without use_cpu=True transformers says NOT_PARALLEL, world size 1; ddp_backend alone
        reports the world size but wraps no DDP): each rank would train the whole dataset into its own weights."""
        from transformers.training_args import ParallelMode

        from cluster_curate.distributed import trainer_rank_and_world
        found = trainer_rank_and_world()
        if found is None or found[1] <= 1:
            return
        mode = self.args.parallel_mode
        if mode in (ParallelMode.NOT_PARALLEL, ParallelMode.NOT_DISTRIBUTED) or (
                mode == ParallelMode.DISTRIBUTED and self.args.world_size != found[1]):
            raise CurateError(f"PlanTrainerMixin: this process is rank {found[0]} of {found[1]} (torch.distributed / "
                              f"torchrun) but its TrainingArguments train it alone (parallel_mode {mode.value}, "
                              f"world size {self.args.world_size}): each rank would train the whole dataset into its "
                              "own weights; make the Trainer data-parallel (on CPU: TrainingArguments(use_cpu=True, "
                              "ddp_backend=\"gloo\"))")

    # -- order
    def _get_train_sampler(self, *args, **kwargs):
        dataset = args[0] if args else kwargs.get("train_dataset", self.train_dataset)
        return PlannedOrderSampler(dataset if dataset is not None else self.train_dataset)

    # -- columns
    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        self._signature_columns = list(self._signature_columns) + [k for k in PLAN_KEYS
                                                                   if k not in self._signature_columns]

    # -- TRL packing: remember which tokens are which example, since packing drops the id column
    def _prepare_dataset(self, dataset, processing_class, args, *rest):
        prepare = super()._prepare_dataset
        if len(rest) != 3:  # DPOTrainer's (dataset, processing_class, args, dataset_name): nothing is packed
            return prepare(dataset, processing_class, args, *rest)
        packing, formatting_func, dataset_name = rest
        if packing and dataset_name == "train" and "id" in dataset.column_names:
            unpacked = prepare(dataset, processing_class, args, False, formatting_func, dataset_name)
            self._ids_by_tokens = {tuple(r["input_ids"]): r["id"] for r in unpacked.select_columns(["input_ids", "id"])}
        return prepare(dataset, processing_class, args, packing, formatting_func, dataset_name)

    def _packed_ids(self, inputs) -> list[int]:
        """The ids of the examples packed into this micro-batch (-1 for a segment matching none), from the
        segment boundaries (position_ids restart at 0) and each segment's tokens."""
        ids = []
        input_ids, positions = inputs["input_ids"], inputs.get("position_ids")
        for row in range(input_ids.size(0)):
            tokens = input_ids[row].tolist()
            starts = ([i for i, p in enumerate(positions[row].tolist()) if p == 0] if positions is not None else [0])
            for a, b in zip(starts, starts[1:] + [len(tokens)]):
                ids.append(int(self._ids_by_tokens.get(tuple(tokens[a:b]), -1)))
        return ids

    # -- loss and logging
    def training_step(self, model, inputs, *args, **kwargs):
        ids = inputs.pop("id", None)
        weight = inputs.get("weight")
        if ids is None and self._ids_by_tokens is not None:
            ids = self._packed_ids(inputs)
        loss = super().training_step(model, inputs, *args, **kwargs)
        logs = [cb for cb in self.callback_handler.callbacks if isinstance(cb, ConsumedIdsCallback)]
        if logs:
            # the Trainer returns the loss divided by the accumulation steps: log the micro-batch's own loss
            scale = 1.0 if self.loss_is_scaled_for_ga is not False else getattr(
                self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
            ids = ids.tolist() if torch.is_tensor(ids) else ids
            weights = None if weight is None else weight.tolist()
            for cb in logs:
                cb.record(ids, weights, float(loss) * scale)
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        weight = inputs.pop("weight", None)
        inputs.pop("id", None)
        if weight is None or "labels" not in inputs:  # e.g. TRL packing dropped the plan columns
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = weighted_causal_lm_loss(outputs.logits, labels, weight, inputs.get("position_ids"))
        return (loss, outputs) if return_outputs else loss
