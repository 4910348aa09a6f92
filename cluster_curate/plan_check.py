"""What `verify` checks: did the training job consume the plan? What each rank logged it consumed vs the shards.

The log is a directory of one JSON-lines file per rank (`rank-00000.jsonl`, ...), one line per micro-batch in the
order the rank consumed them: `{"step": t, "ids": [...], "weights": [...], "loss": x}` (`weights` and `loss`
optional). `cluster_curate.loader.ConsumedLog` writes it from a plain loop;
`cluster_curate.integrations.hf.ConsumedIdsCallback` from the HF Trainer / TRL.

`check_plan` is a pure function of the planned grid (step × rank × slot) and the logs. Each consumed id is
classified against the planned one at the same rank, step and slot (step modulo the plan's steps: every epoch
repeats the plan): in plan, out of order (planned for this rank at another position), on the wrong rank, or
out of plan; each rank's multiset of ids gives the missing and the duplicated ones. A cause is named from the
pattern (shuffling, the wrong layout, double sharding, packing).
Reading the logs and the shards is `commands/verify.py`'s (docs/architecture.md, "Commands").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from cluster_curate.loader import interleaved_order

KINDS = ("out of order", "wrong rank", "out of plan", "duplicated", "missing", "weight", "no ids")
WEIGHT_TOLERANCE = 1e-6
KEPT_PROBLEMS = 1000  # problems kept with their details (all are counted)


# ------------------------------------------------------------------------------------------------ check

@dataclass
class RankCheck:
    rank: int
    steps_logged: int
    rows_logged: int
    counts: Counter = field(default_factory=Counter)   # kind -> number of ids
    in_plan: int = 0


@dataclass
class PlanCheck:
    ranks: list[RankCheck]
    problems: list[tuple[int, int | None, str, str]]    # (rank, step, kind, detail): the first KEPT_PROBLEMS
    problem_count: int
    causes: list[str]
    steps: int
    micro_batch_size: int

    @property
    def ok(self) -> bool:
        return not self.problem_count

    def problem_lines(self, limit: int | None = None) -> list[str]:
        """`rank R step T: kind: detail`, the first `limit` ones, then how many more."""
        shown = self.problems[:limit] if limit is not None else self.problems
        lines = [f"rank {r}" + (f" step {t}" if t is not None else "") + f": {kind}: {detail}"
                 for r, t, kind, detail in shown]
        if self.problem_count > len(shown):
            lines.append(f"... {self.problem_count - len(shown)} more")
        return lines


def _dealt(file_ids: np.ndarray, n: int, m: int, dealing: str) -> list[np.ndarray]:
    """What each rank gets from a file of ids when the trainer deals it by `dealing` ("batch" | "sample")."""
    if dealing == "sample":
        return [file_ids[r::n] for r in range(n)]
    batches = file_ids.reshape(-1, m)
    return [batches[r::n].reshape(-1) for r in range(n)]


def check_plan(planned: np.ndarray, consumed: dict[int, list[dict] | None],
               planned_weights: np.ndarray | None = None) -> PlanCheck:
    """Compare the planned grid ids[step, rank, slot] with what each rank logged (see the module docstring)."""
    steps, n, m = planned.shape
    owner: dict[int, set[int]] = {}
    for r in range(n):
        for i in np.unique(planned[:, r, :]):
            owner.setdefault(int(i), set()).add(r)
    problems: list[tuple[int, int | None, str, str]] = []
    count = 0

    def problem(*p):
        nonlocal count
        count += 1
        if len(problems) < KEPT_PROBLEMS:
            problems.append(p)

    ranks: list[RankCheck] = []
    sizes: Counter = Counter()
    for r in range(n):
        log = consumed.get(r)
        if log is None:
            ranks.append(RankCheck(r, 0, 0))
            problem(r, None, "missing", "no log from this rank")
            continue
        rc = RankCheck(r, len(log), 0)
        plan_r = planned[:, r, :]
        own = set(int(i) for i in np.unique(plan_r))
        seen: Counter = Counter()
        for t, rec in enumerate(log):
            ids = rec.get("ids")
            if ids is None:
                rc.counts["no ids"] += 1
                problem(r, t, "no ids", "the micro-batch reached the model without its `id` column")
                continue
            sizes[len(ids)] += 1
            rc.rows_logged += len(ids)
            want = plan_r[t % steps]  # epoch after epoch, the same planned order
            want_w = planned_weights[t % steps, r] if planned_weights is not None else None
            weights = rec.get("weights")
            for j, i in enumerate(ids):
                seen[i] += 1
                if j < want.size and i == want[j]:
                    rc.in_plan += 1
                    if weights is not None and want_w is not None and j < len(weights) \
                            and abs(weights[j] - want_w[j]) > WEIGHT_TOLERANCE:
                        rc.counts["weight"] += 1
                        problem(r, t, "weight", f"id {i} trained with weight {weights[j]:.6g}, planned {want_w[j]:.6g}")
                    continue
                if i in own:
                    kind, detail = "out of order", f"id {i} planned for this rank at another step"
                elif i in owner:
                    kind, detail = "wrong rank", f"id {i} planned for rank {min(owner[i])}"
                else:
                    kind, detail = "out of plan", f"id {i} is in no shard"
                rc.counts[kind] += 1
                problem(r, t, kind, detail)
        epochs = max(1, -(-len(log) // steps))
        planned_count = Counter({i: c * epochs for i, c in Counter(int(i) for i in plan_r.reshape(-1)).items()})
        for i, c in seen.items():
            if i in planned_count and c > planned_count[i]:
                rc.counts["duplicated"] += c - planned_count[i]
                problem(r, None, "duplicated", f"id {i} consumed {c} times, planned {planned_count[i]}")
        missing = [i for i, c in planned_count.items() if seen[i] < c]
        if missing:
            rc.counts["missing"] += sum(planned_count[i] - seen[i] for i in missing)
            problem(r, None, "missing", f"{len(missing)} planned ids never consumed (first: id {missing[0]})")
        ranks.append(rc)
    return PlanCheck(ranks, problems, count, _causes(planned, consumed, ranks, sizes), steps, m)


def _causes(planned: np.ndarray, consumed: dict, ranks: list[RankCheck], sizes: Counter) -> list[str]:
    """The likely cause of each pattern of problems, in words the user can act on."""
    steps, n, m = planned.shape
    total = lambda kind: sum(rc.counts[kind] for rc in ranks)  # noqa: E731
    causes = []
    if any(consumed.get(r) is None for r in range(n)):
        causes.append("a rank wrote no log: was the job run on the planned number of processes, each logging?")
    if total("no ids"):
        causes.append("micro-batches lost their `id` column before the model: packing (TRL keeps only input_ids/"
                      "labels) or remove_unused_columns dropped it")
    odd = {s: c for s, c in sizes.items() if s != m}
    if odd:
        causes.append(f"micro-batches of {', '.join(str(s) for s in sorted(odd))} rows where the plan has {m}: packing "
                      "(several examples per row) or a per-device batch size other than --micro-batch-size")
    logged = {r: [i for rec in (consumed.get(r) or []) for i in (rec.get("ids") or [])] for r in range(n)}
    wrong_layout = False
    for layout in ("batch", "sample"):  # a file of one layout dealt the other way
        file_ids = planned.transpose(1, 0, 2).reshape(-1)[interleaved_order(n, steps, m, layout)]
        other = "sample" if layout == "batch" else "batch"
        dealt = _dealt(file_ids, n, m, other)
        if total("wrong rank") and all(logged[r] and list(dealt[r][: len(logged[r])]) == logged[r] for r in range(n)):
            wrong_layout = True
            causes.append(f"the data is {layout}-interleaved but the trainer dealt {other}s: export it --for the "
                          f"trainer you run ({'torchrun/torchtune' if other == 'sample' else 'hf/trl/accelerate'})")
    if total("wrong rank") and not wrong_layout and not odd:  # packing moves rows across ranks too
        causes.append("rows went to other ranks than planned: a shuffling sampler (HF Trainer's default "
                      "train_sampling_strategy='random', DistributedSampler(shuffle=True)), or the wrong export layout")
    own_only = all(not rc.counts["wrong rank"] and not rc.counts["out of plan"] for rc in ranks)
    fraction = [rc.rows_logged / max(1, steps * m) for rc in ranks]
    if own_only and n > 1 and all(0 < f <= 1.0 / n + 1e-9 for f in fraction) and total("missing"):
        causes.append(f"each rank consumed only 1/{n} of its own shard: the shard was dealt a second time (a rank's "
                      "own shard handed to accelerator.prepare or a DistributedSampler) — give the framework the "
                      "global order (export --for accelerate) or iterate the shard yourself")
    elif own_only and total("out of order"):
        causes.append("each rank read its own rows in another order: a shuffling or length-grouping sampler, "
                      "or packing (TRL's best-fit-decreasing packing sorts longest first)")
    if total("weight"):
        causes.append("the loss weights differ from the shards' `weight` column")
    if total("missing") and not causes:
        short = [rc.rank for rc in ranks if rc.steps_logged % steps]
        if short:
            causes.append(f"rank(s) {', '.join(map(str, short))} stopped inside an epoch of the plan's {steps} steps "
                          "(max_steps, or an interrupted run)")
    return causes


def format_check(check: PlanCheck, max_problems: int = 10) -> str:
    """A short table per rank, the first problems, and the likely causes."""
    head = ["rank", "steps", "rows", "in plan"] + [k for k in KINDS]
    planned_rows = check.steps * check.micro_batch_size
    rows = [[str(rc.rank), f"{rc.steps_logged}/{check.steps}", f"{rc.rows_logged}/{planned_rows}",
             str(rc.in_plan)] + [str(rc.counts[k]) for k in KINDS] for rc in check.ranks]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    if check.ok:
        lines.append("plan followed: every rank consumed exactly its shard, in order")
        return "\n".join(lines)
    lines += check.problem_lines(max_problems) + [f"cause: {c}" for c in check.causes]
    return "\n".join(lines)
