"""What `verify` checks: did the training job consume the plan? What each rank logged it consumed vs the shards.

The log is a directory of one JSON-lines file per rank (`rank-00000.jsonl`, ...), one line per micro-batch in the
order the rank consumed them: `{"step": t, "ids": [...], "weights": [...], "loss": x}` (`weights` and `loss`
optional). `cluster_curate.loader.ConsumedLog` writes it from a plain loop;
`cluster_curate.integrations.hf.ConsumedIdsCallback` from the HF Trainer / TRL.

`check_plan` is a pure function of the planned grid (step × rank × slot) and the logs. Each consumed id is
classified against the planned one at the same rank, step and slot (step modulo the plan's steps: every epoch
repeats the plan): in plan, out of order (planned for this rank at another position), on the wrong rank, or
out of plan; each rank's multiset of ids gives the missing ones (planned, consumed by no line of the rank), the
duplicated ones and a log stopped inside a later epoch. A line that logs a micro-batch again (the same step and ids,
or the same ids on the next line) is counted duplicated and left out, and a log whose step numbers jump (it starts
at a checkpoint's step, a line was taken out) has the micro-batches between counted missing, so that the lines after
them keep their places in the plan (`_placed`). A cause is named from the pattern (shuffling, the wrong layout,
double sharding, packing, rows taken out before dealing, a job on another number of processes).
Reading the logs and the shards is `commands/verify.py`'s (docs/architecture.md, "Commands").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from cluster_curate.errors import counted
from cluster_curate.loader import interleaved_order

KINDS = ("out of order", "wrong rank", "out of plan", "duplicated", "missing", "short epoch", "weight", "no ids")
# trainers log weights as float32 (33.33333206 for a planned 33.333333333): relative to the weight, a few float32
# ulps (2**-23 each), and an absolute floor for weights near 0
WEIGHT_RTOL, WEIGHT_ATOL = 2 ** -20, 1e-6
KEPT_PROBLEMS = 1000  # problems kept with their details (all are counted)


# ------------------------------------------------------------------------------------------------ check

@dataclass
class RankCheck:
    rank: int
    steps_logged: int
    rows_logged: int
    counts: Counter = field(default_factory=Counter)   # kind -> number of ids
    in_plan: int = 0
    nan_weights: int = 0      # ids logged with a NaN weight
    off_weights: int = 0      # ids logged at their place with a number other than the planned weight
    odd_weights: int = 0      # micro-batches whose weights list is not one per id
    repeated: int = 0         # micro-batches logged again (_placed)
    renumbered: int = 0       # of them, logged again under another step number than the first time
    starts_at: int = 0        # the step the log starts at: the lines before it are not in the log
    unlogged: int = 0         # micro-batches after its start the log has no line for (its step numbers jump)
    unnumbered: int = 0       # micro-batches the log has no line for, its step numbers going on without them


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


def _flatten(log: list[dict]):
    """The logged ids as flat arrays: id, the log line (step) and the slot in that micro-batch of each; the
    logged weight of each (NaN where none was logged, or its list was not one per id); whether one was (a logged
    weight may be NaN itself: the loss was, and that is a problem); the lines that had no ids; the micro-batches'
    sizes; (line, weights, ids) of each weights list of another length than its ids."""
    lens = np.array([-1 if rec.get("ids") is None else len(rec["ids"]) for rec in log], dtype=np.int64)
    has = lens >= 0
    ids = np.fromiter((i for rec in log if rec.get("ids") is not None for i in rec["ids"]), dtype=np.int64,
                      count=int(lens[has].sum()))
    line = np.repeat(np.flatnonzero(has), lens[has])
    starts = np.concatenate(([0], np.cumsum(lens[has])[:-1])) if has.any() else np.zeros(0, dtype=np.int64)
    slot = np.arange(ids.size) - np.repeat(starts, lens[has])
    logged = [rec for rec in log if rec.get("ids") is not None]
    fits = np.array([rec.get("weights") is not None and len(rec["weights"]) == len(rec["ids"]) for rec in logged],
                    dtype=bool)
    weights = np.fromiter((w for rec, ok in zip(logged, fits) for w in (
        rec["weights"] if ok else [np.nan] * len(rec["ids"]))), dtype=np.float64, count=ids.size)
    odd = [(int(t), len(log[t]["weights"]), len(log[t]["ids"])) for t, ok in zip(np.flatnonzero(has), fits)
           if not ok and log[t].get("weights") is not None]
    return ids, line, slot, weights, np.repeat(fits, lens[has]), np.flatnonzero(~has), lens[has], odd


def check_plan(planned: np.ndarray, consumed: dict[int, list[dict] | None],
               planned_weights: np.ndarray | None = None) -> PlanCheck:
    """Compare the planned grid ids[step, rank, slot] with what each rank logged (see the module docstring)."""
    steps, n, m = planned.shape
    consumed = dict(consumed)  # each rank's log less its repeated lines, for the causes too
    flat_ids = planned.transpose(1, 0, 2).reshape(-1)
    flat_rank = np.repeat(np.arange(n), steps * m)
    every, first = np.unique(flat_ids, return_index=True)
    owner = flat_rank[first]  # the first rank each planned id belongs to (ids, in `every` order)
    problems: list[tuple[int, int | None, str, str]] = []  # the first KEPT_PROBLEMS, in log order
    count = 0

    def problem(r, t, kind, detail):
        nonlocal count
        count += 1
        if len(problems) < KEPT_PROBLEMS:
            problems.append((r, t, kind, detail))

    def room() -> int:
        return max(0, KEPT_PROBLEMS - len(problems))

    ranks: list[RankCheck] = []
    sizes: Counter = Counter()
    positions: dict[int, np.ndarray] = {}  # rank -> each logged row's place in the plan's rows (the causes')
    unlogged: dict[int, np.ndarray] = {}   # rank -> the planned ids at the places its log has no line for
    for r in range(n):
        log = consumed.get(r)
        positions[r] = unlogged[r] = np.zeros(0, dtype=np.int64)
        if log is None:
            # every planned id of the rank is unaccounted for: the table's `missing` says so, not 0
            ranks.append(RankCheck(r, 0, 0, Counter(missing=int(planned[:, r, :].size))))
            problem(r, None, "missing", "no log from this rank")
            continue
        plan_r = planned[:, r, :]
        repeated, placed, gaps = _placed(log, plan_r)
        if (any(g[2] is None for g in gaps) or any(log[t].get("step") != log[first].get("step")
                                                    for t, (_, first) in repeated.items())) \
                and _guesses_unfounded(log, plan_r, placed):
            repeated, placed, gaps = _placed(log, plan_r, guess=False)
        rc = RankCheck(r, len(log), sum(len(rec.get("ids") or ()) for rec in log), repeated=len(repeated))
        for t, (at, first) in repeated.items():  # its ids counted once here: the rest of the log is checked without it
            rc.counts["duplicated"] += len(log[t]["ids"])
            step = log[t].get("step")
            again = step != log[first].get("step") and type(step) is int  # ConsumedLog.record called twice
            rc.renumbered += again
            # the step its ids first came at in the plan: the logged number may be another (a line numbered wrong)
            size = counted(len(log[t]["ids"]), "id")
            problem(r, at, "duplicated", f"step {placed[first] % steps}'s micro-batch ({size}) logged again on log "
                                         f"line {t + 1}" + (f" as step {step}" if again else ""))
        for at, k, was, now in gaps:  # its planned ids counted missing here, and once in the multiset below
            rc.counts["missing"] += k * m
            if was is None:
                rc.unnumbered += 1
                problem(r, at, "missing", f"micro-batch not logged ({counted(m, 'id')}): log line {now + 1} is the "
                                          "next one planned")
                continue
            if not at:
                rc.starts_at = k
                problem(r, None, "missing", f"the log starts at step {k}: the "
                                            f"{counted(k, 'micro-batch', 'micro-batches')} before it "
                                            f"({counted(k * m, 'id')}) {'is' if k == 1 else 'are'} not in this folder")
                continue
            rc.unlogged += k
            said = f"micro-batch not logged ({counted(m, 'id')})" if k == 1 else \
                f"{k} micro-batches not logged (steps {at} to {at + k - 1}, {counted(k * m, 'id')})"
            problem(r, at, "missing", f"{said}: the log goes from step {was} to step {now}")
        log = consumed[r] = [log[t] for t in placed]
        place = np.fromiter(placed.values(), dtype=np.int64, count=len(placed))
        ids, line, slot, weights, has_w, no_ids, lens, odd_w = _flatten(log)
        # each row's place in the plan's rows epoch after epoch, for the causes: the rows of the micro-batches no
        # line logged passed over
        positions[r] = (place[line] - line) * m + np.arange(ids.size)
        line, no_ids = place[line], place[no_ids]  # each line at its place in the plan from here on
        odd_w = [(int(place[t]), n_w, n_ids) for t, n_w, n_ids in odd_w]
        sizes.update(lens.tolist())
        rc.odd_weights = len(odd_w)
        for t in no_ids:
            rc.counts["no ids"] += 1
            problem(r, int(t), "no ids", "the micro-batch reached the model without its `id` column")
        for t, n_w, n_ids in odd_w:  # its ids' weights are unknown: one problem for the micro-batch, not each id
            problem(r, t, "weight", f"{n_w} weight{'s' * (n_w != 1)} logged for a micro-batch of {n_ids} ids")
        inside = slot < m
        want = np.full(ids.size, -1, dtype=np.int64)
        want[inside] = plan_r[line[inside] % steps, slot[inside]]  # epoch after epoch, the same planned order
        match = inside & (ids == want)
        rc.in_plan = int(match.sum())
        own = np.isin(ids, plan_r)
        pos = np.searchsorted(every, ids).clip(0, max(0, every.size - 1))
        anywhere = (every[pos] == ids) if every.size else np.zeros(ids.size, dtype=bool)
        # an id of a micro-batch whose weights list is not one per id trained with an unknown weight
        odd_line = np.isin(line, [t for t, _, _ in odd_w])
        wrong_w = match & odd_line
        if planned_weights is not None:
            planned_w = planned_weights[line[match] % steps, r, slot[match]]
            # isclose is False for a NaN, and a NaN weight logged is a NaN loss
            wrong_w[match] |= has_w[match] & ~np.isclose(weights[match], planned_w, rtol=WEIGHT_RTOL,
                                                         atol=WEIGHT_ATOL)
        rc.nan_weights = int((wrong_w & has_w & np.isnan(weights)).sum())
        rc.off_weights = int((wrong_w & has_w & ~np.isnan(weights)).sum())
        kind = np.select([match & wrong_w, match, own, anywhere], [5, 0, 1, 2], default=3)
        for code, name in ((1, "out of order"), (2, "wrong rank"), (3, "out of plan"), (5, "weight")):
            rc.counts[name] += int((kind == code).sum())
        bad = np.flatnonzero((kind != 0) & ~((kind == 5) & odd_line))  # those of a wrong-length list: told above
        count += bad.size
        for at in bad[: room()]:  # the details of the first ones, in log order
            i, t = int(ids[at]), int(line[at])
            if kind[at] == 5:
                want_w = planned_weights[t % steps, r, slot[at]]
                problems.append((r, t, "weight", f"id {i} trained with weight {weights[at]:.6g}, planned {want_w:.6g}"))
            elif kind[at] == 1:
                problems.append((r, t, "out of order", _planned_at(plan_r, i, t % steps, int(slot[at]))))
            elif kind[at] == 2:
                problems.append((r, t, "wrong rank", f"id {i} planned for rank {owner[pos[at]]}"))
            else:
                problems.append((r, t, "out of plan", f"id {i} is in no shard"))
        whole, rest = _unlogged(plan_r, gaps)
        unlogged[r] = plan_r.reshape(-1) if whole else rest
        plan_ids, plan_c, seen, epochs = _multiplicity(plan_r, np.concatenate((ids, rest)), whole)
        for i in np.flatnonzero(seen > plan_c * epochs):
            rc.counts["duplicated"] += int(seen[i] - plan_c[i] * epochs)
            problem(r, None, "duplicated", f"id {plan_ids[i]} consumed {seen[i]} times, planned {plan_c[i] * epochs}"
                                           + (f" ({_epochs_said(epochs, steps)})" if epochs > 1 else ""))
        never = np.flatnonzero(seen < plan_c)  # short of one epoch: planned ids no line of this rank consumed
        if never.size:
            rc.counts["missing"] += int((plan_c[never] - seen[never]).sum())
            said = "never consumed" if not seen[never].any() else "consumed fewer times than one epoch plans"
            problem(r, None, "missing", f"{never.size} planned ids {said} (first: id {plan_ids[never[0]]})")
        # ids consumed fewer epochs than others, where some id was consumed in a later epoch (packing's uneven
        # ranks log more rows than an epoch without any)
        stopped = np.flatnonzero((seen >= plan_c) & (seen < plan_c * epochs))
        if stopped.size and (seen > plan_c).any():
            rc.counts["short epoch"] += int(stopped.size)
            problem(r, None, "short epoch", f"the log stops inside epoch {epochs} of the plan ({rc.rows_logged} rows "
                                            f"logged, {plan_r.size} an epoch): {stopped.size} planned ids consumed "
                                            f"in fewer epochs than the others (first: id {plan_ids[stopped[0]]})")
        ranks.append(rc)
    for r in sorted(k for k in consumed if k >= n):  # a job run on more processes than planned
        problem(r, None, "beyond the plan", f"a log of {len(consumed[r] or ())} micro-batches from a rank the plan "
                                            f"does not have (it has {n})")
    return PlanCheck(ranks, problems, count, _causes(planned, consumed, ranks, sizes, positions, unlogged), steps, m)


def _placed(log: list[dict], plan_r: np.ndarray, guess: bool = True):
    """Where each line of a rank's log comes in the plan: at its place, the micro-batches the rank trained before
    it, epoch after epoch. ({line: (its place, the earlier line it repeats)} of each line that logs a micro-batch
    again, {line: place} of the others, (place, count, the step numbers before and after) of each run of places no
    line came at, or (place, 1, None, the line after it) of one the step numbers do not show.)

    A line logs a micro-batch again where its ids are the line right before's: with no step logged, or under
    another step number where the line after it is the micro-batch planned at its place (ConsumedLog.record
    called twice for one micro-batch); or where its step number and ids are an earlier line's (a run resumed from a
    checkpoint whose log kept the lines after it). Not where its ids are the micro-batch planned at its place: the
    next epoch of a log whose step numbers start again, two planned micro-batches alike. A line comes at the place
    after the line before, or where its step number jumps past that (a run resumed into a fresh log folder starts
    at its checkpoint; a line taken out of a log), unless its ids are the micro-batch planned at the place after
    (a line numbered wrong); or one further on where it and the line after it are the next two planned (a loop
    that went on to the next micro-batch before ConsumedLog.record: the step numbers go on without it). One place off, every later line would be too: read as shuffling. `guess`: the two cases the step
    numbers do not show (a repeat under the next number, a micro-batch the numbers go on without) are read so;
    check_plan reads a log again without them where most of its lines are not at their planned place (shuffled:
    a chance match is no repeat or skip)."""
    steps = plan_r.shape[0]
    seen: dict = {}  # (step, ids) -> the line that logged them first
    before = None    # (line, ids) of the last line placed
    last, at = -1, 0  # the step number of the line before (None: none logged), the next place
    repeated, placed, gaps = {}, {}, []
    for t, rec in enumerate(log):
        step = rec["step"] if type(rec.get("step")) is int else None
        ids = rec.get("ids")
        planned = ids is not None and plan_r[at % steps].tolist() == ids
        if ids is not None and not planned:
            # under the next step number: where the line after it is the one planned here (a rank whose epoch is one
            # micro-batch logs its ids on line after line)
            after = t + 1 < len(log) and log[t + 1].get("ids") == plan_r[at % steps].tolist()
            first = before[0] if before is not None and before[1] == ids and (step is None or after and guess) else \
                seen.get((step, tuple(ids))) if step is not None else None
            if first is not None:
                repeated[t] = (at, first)
                last = step
                continue
        if step is not None and last is not None and step > last + 1 and not planned:
            gaps.append((at, step - last - 1, last, step))
            at += step - last - 1
        elif guess and ids is not None and not planned and t + 1 < len(log) \
                and ids == plan_r[(at + 1) % steps].tolist() and log[t + 1].get("ids") == plan_r[(at + 2) % steps].tolist():
            gaps.append((at, 1, None, t))  # the step numbers go on without it: this line and the next in the plan
            at += 1
        placed[t] = at
        if ids is not None:
            seen.setdefault((step, tuple(ids)), t)
        before = (t, ids) if ids is not None else None
        last, at = step, at + 1
    return repeated, placed, gaps


def _guesses_unfounded(log: list[dict], plan_r: np.ndarray, placed: dict) -> bool:
    """Whether `_placed`'s guesses (a repeat under the next step number, a micro-batch the step numbers go on
    without) explain a log better read as shuffled: most of its lines are not at their planned place, or it holds
    every planned micro-batch exactly once an epoch for whole epochs (nothing is missing or repeated: its order is
    another, and a chance match of neighbours is no sign)."""
    steps = plan_r.shape[0]
    at_place = sum(plan_r[at % steps].tolist() == log[t].get("ids") for t, at in placed.items())
    if at_place < 0.9 * len(placed):
        return True
    epochs, rest = divmod(len(log), steps)
    logged = Counter(tuple(rec["ids"]) for rec in log if rec.get("ids") is not None)
    return not rest and logged == Counter({k: n * epochs for k, n in Counter(map(tuple, plan_r.tolist())).items()})


def _unlogged(plan_r: np.ndarray, gaps: list) -> tuple[int, np.ndarray]:
    """The planned ids at the places no line of a rank's log came at (`_placed`'s gaps): how many whole epochs of
    the plan, and the ids of the places left over (a run resumed at micro-batch 10⁷ holds no 10⁷ of them here)."""
    steps = plan_r.shape[0]
    whole, rest = 0, [np.zeros(0, dtype=np.int64)]
    for at, k, _, _ in gaps:
        epochs, k = divmod(k, steps)
        whole += epochs
        rest.append(plan_r[(at + np.arange(k)) % steps].reshape(-1))
    return whole, np.concatenate(rest)


def _planned_at(plan_r: np.ndarray, i: int, step: int, slot: int) -> str:
    """Where a rank's own id that it logged out of order was planned: at another step (which), or at this step in
    another place of the micro-batch (it said "at another step" for both)."""
    steps, slots = np.nonzero(plan_r == i)  # a wrapped id is planned twice
    here = slots[steps == step]
    if here.size:
        return f"id {i} planned for this step at position {int(here[0])} of the micro-batch, logged at {slot}"
    return f"id {i} planned for this rank at step {int(steps[0])}" + (" (and others)" if steps.size > 1 else "")


def _multiplicity(plan_r: np.ndarray, ids: np.ndarray, whole: int = 0):
    """(a rank's planned ids, times each is planned in one epoch, times it was consumed, the epochs the log spans);
    `whole`: epochs of the plan consumed besides `ids` (`_unlogged`'s). The epochs are counted in rows, not log
    lines: a per-device batch size other than the plan's logs more lines."""
    epochs = max(1, -(-ids.size // max(1, plan_r.size)) + whole)
    plan_ids, plan_c = np.unique(plan_r, return_counts=True)
    seen_ids, seen_c = np.unique(ids, return_counts=True)
    seen = np.zeros(plan_ids.size, dtype=np.int64)
    if seen_ids.size:
        k = np.searchsorted(seen_ids, plan_ids).clip(0, seen_ids.size - 1)
        hit = seen_ids[k] == plan_ids
        seen[hit] = seen_c[k[hit]]
    return plan_ids, plan_c, seen + whole * plan_c, epochs


def _epochs_said(epochs: int, steps: int) -> str:
    return f"the log spans {epochs} epoch{'s' * (epochs != 1)} of the plan's {steps} steps"


_OTHER = {"batch": "sample", "sample": "batch"}
_DEALT = {"batch": "micro-batches", "sample": "samples"}  # how a trainer deals a file to its ranks
_TRAINERS = {"batch": "hf/trl/accelerate", "sample": "torchrun/torchtune"}  # the trainers that deal so


def _epochs_of(sequence: np.ndarray, logged: list[int], at: np.ndarray) -> bool:
    """Whether `logged` is `sequence` epoch after epoch, up to where it stopped, each row at its place `at`
    (`check_plan`'s positions: one after the other, past the micro-batches the log has no line for)."""
    if not len(sequence):
        return not len(logged)
    return np.array_equal(np.asarray(sequence)[at % len(sequence)], logged)


def _dealt_again(plan_r: np.ndarray, n: int, r: int, logged: list[int], at: np.ndarray) -> bool:
    """Whether rank r logged its own shard (plan_r: steps × m ids) dealt to the n ranks a second time, epoch after
    epoch: by micro-batches (accelerate's BatchSamplerShard: a rank-local loader given to accelerator.prepare) or by
    samples (a DistributedSampler). Rank r gets every n-th one from r on: ceil(units / n) of them, the last round
    filled from the shard's start when the units are not a multiple of n (even_batches=True, DistributedSampler's
    padding), or floor(units / n) (drop_last); those of r::n alone (even_batches=False) are one of the two."""
    steps, m = plan_r.shape
    logged = np.asarray(logged, dtype=np.int64)
    for unit in {m, 1}:  # rows per unit dealt: a micro-batch, a sample
        units = steps * m // unit
        per_rank = -(-units // n)
        wrapped = np.resize(plan_r.reshape(-1), (per_rank * n, unit))[r::n].reshape(-1)
        if any(k and _epochs_of(wrapped[: k * unit], logged, at) for k in {units // n, per_rank}):
            return True
    return False


def _dealt_sequence(consumed: dict, ranks, dealing: str) -> np.ndarray:
    """The ids the `ranks` consumed as one sequence, in the order a trainer dealing by `dealing` handed them out:
    micro-batch (or sample) k of the r-th of n ranks is the (k·n + r)-th of the dataset it dealt."""
    lines = [[rec.get("ids") or [] for rec in consumed.get(r) or []] for r in ranks]
    if dealing == "sample":
        lines = [[[i] for line in rank for i in line] for rank in lines]
    units = [rank[k] for k in range(max(map(len, lines), default=0)) for rank in lines if k < len(rank)]
    return np.array([i for unit in units for i in unit], dtype=np.int64)


def _passed_over(sequence: np.ndarray, order: np.ndarray) -> int | None:
    """How many of `order`'s rows (epoch after epoch) `sequence` passes over up to its last row, where it is
    `order` with some rows left out (the rows a trainer dealt after taking some out: the tail of repeats that
    evens the last batches out matches the next epoch's start); None where it is not. 0: a prefix of `order`,
    a run that stopped early (with another per-device batch size than the plan's too), no row taken out."""
    epochs = -(-sequence.size // max(1, order.size)) + 1
    left = enumerate(np.tile(order, epochs).tolist())
    at = -1
    for i in sequence.tolist():  # a greedy subsequence match
        at = next((k for k, j in left if j == i), None)
        if at is None:
            return None
    return at + 1 - sequence.size


def _rows_taken_out(planned: np.ndarray, consumed: dict, unlogged: dict) -> int:
    """The planned rows no rank consumed, where the planned ranks consumed the rest in the order of an export dealt
    as its trainer deals it (a filter on length before dealing); 0 for any other pattern. Not those of a rank beyond
    the plan's (a job on more processes), nor those of micro-batches a log has no line for (`unlogged`: told
    missing where they are)."""
    steps, n, m = planned.shape
    if any(consumed.get(r) is None for r in range(n)):
        return 0
    flat = planned.transpose(1, 0, 2).reshape(-1)
    reached = [i for log in consumed.values() for rec in log or () for i in rec.get("ids") or ()]
    lost = np.setdiff1d(flat, np.concatenate([np.asarray(reached, dtype=np.int64), *unlogged.values()])).size
    for layout in ("batch", "sample") if lost else ():
        sequence = _dealt_sequence(consumed, range(n), layout)
        if sequence.size and _passed_over(sequence, flat[interleaved_order(n, steps, m, layout)]):
            return lost
    return 0


def _dealt_to_the_ranks_that_logged(planned: np.ndarray, consumed: dict) -> bool:
    """Whether the ranks that logged (a job on more or fewer processes than the plan's) consumed an export dealt to
    them as its trainer deals it, in its order epoch after epoch: rows on other ranks than planned, nothing else."""
    steps, n, m = planned.shape
    ranks = sorted(r for r, log in consumed.items() if log is not None)
    flat = planned.transpose(1, 0, 2).reshape(-1)
    for layout in ("batch", "sample"):
        sequence = _dealt_sequence(consumed, ranks, layout)
        if sequence.size and _passed_over(sequence, flat[interleaved_order(n, steps, m, layout)]) == 0:
            return True
    return False


def _short_ends(consumed: dict, m: int) -> bool:
    """Whether every micro-batch of another size than `m` is shorter and the last of its rank's epoch, after
    micro-batches of `m`, every epoch alike (a sampler's share of rows that is no multiple of m)."""
    for log in consumed.values():
        sizes = [len(rec.get("ids") or ()) for rec in log or ()]
        odd = [i for i, s in enumerate(sizes) if s != m]
        if odd and (not odd[0] or any(sizes[i] > m for i in odd) or
                    odd != list(range(odd[0], len(sizes), odd[0] + 1))):
            return False
    return True


def _causes(planned: np.ndarray, consumed: dict, ranks: list[RankCheck], sizes: Counter, positions: dict,
            unlogged: dict) -> list[str]:
    """The likely cause of each pattern of problems, in words the user can act on (`positions`, `unlogged`:
    check_plan's, each rank's logged rows at their places in the plan and the planned ids it has no line for)."""
    steps, n, m = planned.shape
    total = lambda kind: sum(rc.counts[kind] for rc in ranks)  # noqa: E731
    causes = []
    beyond = sorted(k for k in consumed if k >= n)
    if beyond:
        causes.append(f"the job ran on more processes than the {n} the shards were planned for (rank {beyond[-1]} "
                      f"logged): launch it on {n}, or shard again with --num-shards for the processes you have")
        # where the rows went that the planned ranks never consumed (not a filter on length)
        own = [i for r in range(n) for rec in consumed.get(r) or () for i in rec.get("ids") or ()]
        went = np.setdiff1d(np.intersect1d(planned, [i for r in beyond for rec in consumed[r] or ()
                                                     for i in rec.get("ids") or ()]), own)
        if went.size:
            causes.append(f"{went.size} planned rows reached none of the {n} planned ranks: rank"
                          f"{'s' * (len(beyond) > 1)} {', '.join(map(str, beyond))} logged them")
    if any(consumed.get(r) is None for r in range(n)):
        causes.append("a rank wrote no log: was the job run on the planned number of processes, each logging?")
    # a job on another number of processes, its export dealt in order: rows on other ranks, not shuffled
    other_ranks = bool(beyond or any(consumed.get(r) is None for r in range(n))) and \
        _dealt_to_the_ranks_that_logged(planned, consumed)
    logs = [log for log in consumed.values() if log is not None]
    if logs and not any(logs):  # the log files were opened (ConsumedLog, the callback's on_train_begin), never fed
        causes.append("no rank logged any micro-batch (every log is empty): the job stopped before its first step, "
                      "or nothing fed the logs: a Trainer without PlanTrainerMixin (ConsumedIdsCallback logs what "
                      "the mixin hands it), or a loop that never calls ConsumedLog.record")
    if any(rc.repeated > rc.renumbered for rc in ranks):
        causes.append("a micro-batch was logged twice (the same step and ids on two lines): trained twice after a "
                      "resume from a checkpoint whose log kept the lines after it (ConsumedLog(..., resume_at=the "
                      "micro-batches trained before the checkpoint)), or ConsumedLog.record called twice for one "
                      "micro-batch")
    if any(rc.renumbered for rc in ranks):
        causes.append("a micro-batch was logged twice under two step numbers (the same ids on two lines in a row): "
                      "ConsumedLog.record called twice for one micro-batch, or a loop that trained it twice")
    for start in sorted({rc.starts_at for rc in ranks} - {0}):
        causes.append(f"the log of rank(s) {', '.join(str(rc.rank) for rc in ranks if rc.starts_at == start)} starts "
                      f"at step {start}: the lines before it are not in this folder (a run resumed from a checkpoint "
                      "into a fresh log folder): put the earlier run's lines before them to verify the whole run")
    if any(rc.unlogged for rc in ranks):
        causes.append(f"rank(s) {', '.join(str(rc.rank) for rc in ranks if rc.unlogged)} logged no line for some "
                      "micro-batches (its step numbers jump past them): lines taken out of the log, or a run resumed "
                      "from a checkpoint past the end of the log it kept")
    if any(rc.unnumbered for rc in ranks):
        causes.append(f"rank(s) {', '.join(str(rc.rank) for rc in ranks if rc.unnumbered)} logged no line for some "
                      "micro-batches, its step numbers going on without them: a loop that went on to the next "
                      "micro-batch before ConsumedLog.record (the micro-batch skipped, or its line not written)")
    if total("no ids"):
        causes.append("micro-batches lost their `id` column before the model: packing (TRL keeps only input_ids/"
                      "labels) or remove_unused_columns dropped it")
    logged = {r: [i for rec in (consumed.get(r) or []) for i in (rec.get("ids") or [])] for r in range(n)}
    # a shard dealt again: each rank's log is every n-th part of its own shard; a run stopped early (or several
    # epochs of the plan) is each shard in order, which rank 0's dealing also starts with
    in_plan_order = all(_epochs_of(planned[:, r].reshape(-1), logged[r], positions[r]) for r in range(n))
    dealt_again = n > 1 and all(consumed.get(r) is not None and _dealt_again(planned[:, r], n, r, logged[r],
                                                                             positions[r])
                                for r in range(n)) and not in_plan_order
    # rows filtered out before dealing: the rest dealt in order, every later row's place shifted
    taken_out = 0 if dealt_again or in_plan_order else _rows_taken_out(planned, consumed, unlogged)
    odd = {s: c for s, c in sizes.items() if s != m}
    # a DistributedSampler's share of a shard, the rows left after some were taken out, or the rows of a job on
    # fewer processes than planned (a rank wrote no log, said above), end in a short micro-batch: not packing
    # (which makes them longer), nor a per-device batch size
    fewer = any(consumed.get(r) is None for r in range(n)) and _short_ends(consumed, m)
    if odd and not dealt_again and not taken_out and not fewer:
        causes.append(f"micro-batches of {', '.join(str(s) for s in sorted(odd))} rows where the plan has {m}: packing "
                      "(several examples per row) or a per-device batch size other than --micro-batch-size")
    matched = []  # the layouts whose file, dealt the other way, gives exactly what the ranks consumed
    for layout in ("batch", "sample"):  # a file of one layout dealt the other way
        file_ids = planned.transpose(1, 0, 2).reshape(-1)[interleaved_order(n, steps, m, layout)]
        dealt = _dealt(file_ids, n, m, _OTHER[layout])
        # epoch after epoch, each row at its place (a trainer deals each epoch alike)
        if total("wrong rank") and all(logged[r] and _epochs_of(dealt[r], logged[r], positions[r]) for r in range(n)):
            matched.append(layout)
    wrong_layout = bool(matched)
    if taken_out:
        causes.append(f"{taken_out} planned rows reached no rank and the rest were dealt in the plan's order without "
                      "them: rows were taken out before dealing (a filter on length, TRL's max_length, axolotl's "
                      "sequence_len; README 'Training with your trainer')")
    if len(matched) == 1:
        layout, other = matched[0], _OTHER[matched[0]]
        causes.append(f"the data is {layout}-interleaved but the trainer dealt {_DEALT[other]}: export it --for "
                      f"the trainer you run ({_TRAINERS[other]})")
    elif matched:  # at this N, M both mismatches deal the same order: the log cannot tell which it was
        causes.append(f"the wrong export layout: with {n} ranks and micro-batches of {m} rows, a batch-interleaved "
                      "file dealt by samples and a sample-interleaved file dealt by micro-batches give the same "
                      "order, so which one it was is ambiguous here: export --for the trainer you run "
                      f"({_TRAINERS['batch']} deal micro-batches; {_TRAINERS['sample']} deal samples)")
    if total("wrong rank") and not wrong_layout and not odd and not taken_out and not other_ranks:  # packing too
        causes.append("rows went to other ranks than planned: a shuffling sampler (HF Trainer's default "
                      "train_sampling_strategy='random', DistributedSampler(shuffle=True)), or the wrong export layout")
    own_only = all(not rc.counts["wrong rank"] and not rc.counts["out of plan"] for rc in ranks)
    if not dealt_again and own_only and n > 1 and total("missing"):
        # dealt again and shuffled (HF Trainer's default sampler over a rank-local shard): not the dealt order,
        # but each rank read its own rows alone, at most 1/n of them, and not the start of its shard (a run stopped
        # early). Not past 1/n: a shuffled own shard stopped at ceil(steps / n) looks the same
        fraction = [rc.rows_logged / max(1, steps * m) for rc in ranks]
        dealt_again = all(0 < f <= 1.0 / n + 1e-9 for f in fraction) and not in_plan_order
    if dealt_again:
        causes.append(f"each rank consumed only 1/{n} of its own shard: the shard was dealt a second time (a rank's "
                      "own shard handed to accelerator.prepare or a DistributedSampler) — give the framework the "
                      "global order (export --for accelerate) or iterate the shard yourself")
    elif own_only and total("out of order") and not taken_out:
        causes.append("each rank read its own rows in another order: a shuffling or length-grouping sampler, "
                      "or packing (TRL's best-fit-decreasing packing sorts longest first)")
    if any(rc.odd_weights for rc in ranks):
        causes.append("the logged weights are not one per id: log each micro-batch's `weight` beside its ids "
                      "(ConsumedLog.record(batch['id'], batch['weight'], loss)), or no weights at all")
    if any(rc.nan_weights for rc in ranks):
        causes.append("NaN loss weights were logged: their micro-batches' loss is NaN (a row without a `weight`, "
                      "or a weight computed to NaN, reached the loss)")
    if any(rc.off_weights for rc in ranks):
        causes.append("the loss weights differ from the shards' `weight` column")
    if (total("missing") or total("short epoch")) and not causes:
        short = [rc.rank for rc in ranks if rc.steps_logged % steps]
        empty = [r for r in range(n) if consumed.get(r) == []]
        if empty:  # their `missing` alone, and an empty cause
            causes.append(f"rank(s) {', '.join(map(str, empty))} logged no micro-batch (an empty log): stopped "
                          "before its first step, or nothing fed its log (ConsumedLog.record never called there)")
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
