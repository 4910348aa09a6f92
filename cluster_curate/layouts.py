"""What `export` writes: the shards' plan in the layout and columns a trainer reads, and the settings that keep it.

Trainers that shard one dataset themselves deal it to ranks in one of two ways:

- whole micro-batches round-robin (HF Trainer, TRL, Accelerate, LLaMA-Factory, axolotl — all go through
  Accelerate's `BatchSamplerShard`, `split_batches=False`): process p gets batches p, p + N, p + 2N, ... of one
  sequential batch sampler, so the file is *batch-interleaved*;
- single samples round-robin (`torch.utils.data.DistributedSampler(shuffle=False)`: plain torchrun loops,
  torchtune's `StatefulDistributedSampler`): rank r gets indices r, r + N, ..., so the file is
  *sample-interleaved*.

Either way rank r then reads exactly shard r, micro-batch after micro-batch, if the trainer keeps the order
(no shuffling, no packing, no length grouping) and its batch size is the shards' `--micro-batch-size`.

Columns: `hf`, `accelerate` and `torchrun` keep the shards' columns; `trl` writes conversational
`prompt`/`completion` (TRL then trains on the completion only); `torchtune`, `llamafactory` and `axolotl` write an
OpenAI-style `messages` column. Every layout keeps `id`, `weight` and `step` for checking with `verify`. `jsonl`
and `parquet` write just the selected rows in their original columns, in dataset order.

Preference pairs (`--format preference`, io/preference.py): `trl` writes DPO's conversational `prompt`/`chosen`/
`rejected`, `llamafactory` a ranking dataset and `axolotl` what its DPO `chat_template.default` reads (both:
`messages` the prompt turns, `chosen`/`rejected` one assistant turn each), `torchtune` what its `preference_dataset`
reads (`chosen`/`rejected`: each the whole conversation, the prompt turns then one answer); the others keep every
column. A mixture's pairs are read per input (`_records`), every row of a DPO layout must be one.

Tool calling (`chat_columns`): `trl` and `axolotl` keep an assistant turn's calls as OpenAI `tool_calls` (arguments
as JSON text) and a tool turn's `tool_call_id` / `name`, and write the schemas as a `tools` column (TRL passes it to
the chat template; axolotl reads it with `field_tools`); `llamafactory` writes its own function_call / observation
turns and names `tools` in dataset_info.json; `torchtune`'s openai style has no tool calls, so its export refuses
such rows (naming the row and the layouts that keep them) rather than dropping the calls. A mixture's row is read
from its input's own columns as that input was read (`_records`), not from the normalised `messages`, which hold
the calls and schemas as text. Preference pairs keep them so too (`preference_columns`, records.preference_messages):
in the prompt, and as an answer that is a call (a `function_call` answer for llamafactory's ranking format).

Pure functions of the manifest and the shards' table; `commands/export.py` reads and writes
(docs/architecture.md, "Commands").
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from cluster_curate.errors import CurateError, counted
from cluster_curate.io import names
from cluster_curate.io.fields import resolve_fields
from cluster_curate.io.formats import RecordError
from cluster_curate.io.records import chat_messages
from cluster_curate.io.shard_writer import json_text_aligned
from cluster_curate.io.tool_calls import TOOL_RESULT_ROLES
from cluster_curate.loader import decoded_json, interleaved_order
from cluster_curate.sharding import SHARD_COLUMNS

PLAN_COLUMNS = ("id", "weight", "step")          # kept in every trainer layout, for `verify`
# Parquet metadata of `export --for parquet`: the columns kept as JSON text (a list of names, JSON)
JSON_COLUMNS_KEY = b"json_columns"
# ... and a mixture's: each input's rows, in order, and the columns they hold (`_input_columns`)
INPUT_COLUMNS_KEY = b"input_columns"


@dataclass(frozen=True)
class Target:
    name: str
    layout: str | None          # "batch" | "sample" | None (source rows in dataset order)
    columns: str                # "shard" | "prompt-completion" | "messages" | "source"
    weights_applied: bool       # whether the recipe multiplies the loss by `weight`


TARGETS = {t.name: t for t in (
    Target("hf", "batch", "shard", True),
    Target("trl", "batch", "prompt-completion", True),
    Target("accelerate", "batch", "shard", True),
    Target("torchrun", "sample", "shard", True),
    Target("torchtune", "sample", "messages", False),
    Target("llamafactory", "batch", "messages", False),
    Target("axolotl", "batch", "messages", False),
    Target("jsonl", None, "source", False),
    Target("parquet", None, "source", False),
)}
TARGET_NAMES = tuple(TARGETS)
# the layouts that write preference pairs for a DPO trainer (preference_columns: every chat layout), and those
# that keep every column (the pairs as they are)
DPO_TARGETS = ("trl", "llamafactory", "torchtune", "axolotl")
KEEP_COLUMNS_TARGETS = tuple(t.name for t in TARGETS.values() if t.columns in ("shard", "source"))


def mixed_pairs_note(pairs: list[str], others: list[str]) -> str:
    """What `export` will do with a mixture of preference-pair inputs and inputs of one answer a row, said by
    embed before any work: no command before export knows which layout the user wants."""
    return (f"the mixture holds preference pairs (input {', '.join(pairs)}) and rows of one answer (input "
            f"{', '.join(others)}): export --for {', '.join(DPO_TARGETS)} (DPO) will refuse its shards, a pairwise "
            f"loss needing both answers in every row; --for {', '.join(KEEP_COLUMNS_TARGETS)} keep every row with its "
            "columns. To train DPO on the pairs, curate them apart")


# ---------------------------------------------------------------------------------------------- checks

def check_job(manifest: dict, world_size: int | None, micro_batch_size: int | None, source: str = "shards") -> None:
    """The job's world size and micro-batch size must be the ones the shards were planned for."""
    n, m = int(manifest["num_shards"]), int(manifest["micro_batch_size"])
    if world_size is not None and world_size != n:
        raise CurateError(f"{source}: planned for {n} ranks, not --world-size {world_size} "
                          f"(re-run `cluster-curate shard --num-shards {world_size}`)")
    if micro_batch_size is not None and micro_batch_size != m:
        raise CurateError(f"{source}: planned with micro-batch size {m}, not --micro-batch-size {micro_batch_size} "
                          f"(re-run `cluster-curate shard --micro-batch-size {micro_batch_size}`)")


def target(name: str) -> Target:
    if name not in TARGETS:
        raise CurateError(f"unknown --for {name!r}; choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


# ------------------------------------------------------------------------------------------- layouts

def arrange(table: pa.Table, manifest: dict, layout: str) -> pa.Table:
    """The concatenated shards (rank 0 first) in the global order of `layout` ("batch" | "sample")."""
    order = interleaved_order(int(manifest["num_shards"]), int(manifest["steps"]), int(manifest["micro_batch_size"]),
                              layout)
    if table.num_rows != len(order):
        raise CurateError(f"the shards hold {table.num_rows} rows, the manifest plans {len(order)}")
    return table.take(pa.array(order, pa.int64()))


def _source_names(table: pa.Table) -> list[str]:
    """The shards' source columns (without the columns `shard` adds)."""
    return [c for c in table.column_names if c not in ("id",) + SHARD_COLUMNS]


def _record_fields(table: pa.Table, read=None, source: str = "shards"):
    """The record format's fields of the shards' source rows: `read`'s --format / --prompt-field /
    --response-field / --rejected-field / --label-field, else detected from the columns they hold values in (a
    column null in every shard row is another schema's, whose rows embed read as bad: io/fields.most_read_format)."""
    held = [c for c in _source_names(table) if table.column(c).null_count < table.num_rows]
    return resolve_fields(held, getattr(read, "format", None), getattr(read, "prompt_field", None),
                          getattr(read, "response_field", None), source,
                          rejected_field=getattr(read, "rejected_field", None),
                          label_field=getattr(read, "label_field", None))


def chat_columns(table: pa.Table, style: str, source: str = "shards", read=None, trainer: str | None = None,
                 inputs: list[dict] | None = None, json_columns=()) -> pa.Table:
    """`messages` (the response as the last assistant turn) or conversational `prompt`/`completion`, from whatever
    record format the source rows use (detected, or `read`'s --format / --prompt-field / --response-field); plus
    `id`, `weight`, `step`. Turns are {role, content}; with tool calling (records.chat_messages) also `tool_calls`
    ([{type, function: {name, arguments: JSON text}}], `id` where given) and a tool turn's `tool_call_id` / `name`,
    and a `tools` column: the schemas as JSON text (TRL and axolotl's chat_template strategy parse it). `trainer`:
    llamafactory writes its function_call / observation turns instead (`_llamafactory_turns`), torchtune refuses
    rows with tool calls (its openai style drops them).
    `inputs`: a mixture's inputs as its lineage record lists them (each row is read as its input's record:
    `_records`; `json_columns`: the manifest's). Preference pairs: `preference_columns`."""
    records = _records(table, read, source, inputs, json_columns)
    if any(row_fields.rejected for _, row_fields in records):
        return preference_columns(table, style, records, source, trainer)
    chats, tools, misordered = [], [], []
    for i, (rec, row_fields) in enumerate(records):
        where = f"{source}: row {i} (id {table.column('id')[i].as_py()})"
        try:
            messages, schemas = chat_messages(rec, row_fields)
        except RecordError as e:
            raise CurateError(f"{where}: field {e.field}: {e.reason}") from None
        if trainer == "torchtune":
            _refuse_tool_calling(where, messages, schemas)
        if trainer == "llamafactory":
            messages = _llamafactory_turns(messages, where)
        if trainer in _TURN_ORDER and (bad := _TURN_ORDER[trainer][0](messages)):
            misordered.append((where, *bad))
        chats.append(messages)
        tools.append(schemas)
    _refuse_turn_order(misordered, len(records), trainer, keeping="trl, axolotl or hf")
    turn = _turn_type(chats)
    if style == "messages":
        chat = {"messages": pa.array(chats, pa.list_(turn))}
    elif style == "prompt-completion":
        chat = {"prompt": pa.array([m[:-1] for m in chats], pa.list_(turn)),
                "completion": pa.array([m[-1:] for m in chats], pa.list_(turn))}
    else:
        raise CurateError(f"unknown chat style {style!r}")
    # JSON text: one Arrow struct for schemas of other properties would add null keys to them. The whole list's:
    # axolotl's ChatTemplateStrategy._get_tools json.loads a text, and passes a list's text items on unparsed
    if any(tools):
        chat["tools"] = pa.array([json.dumps(s, ensure_ascii=False) if s else None for s in tools], pa.string())
    return pa.table({**chat, **{c: table.column(c) for c in PLAN_COLUMNS}})


def _records(table: pa.Table, read, source: str, inputs: list[dict] | None,
             json_columns=()) -> list[tuple[dict, object]]:
    """(record, fields) per row, its JSON-text columns (`json_columns`, the manifest's) decoded to the objects or
    text it held (a conversational `prompt` whose turns' keys differ from row to row is text in the shards). One
    dataset's rows: their source columns, read by `_record_fields`. A mixture's row: its input's own record
    (`_input_readings`), as that input was read (io/mixture.py `text_as_json`), so that tool schemas of a struct
    column lose its null keys as the input's own reading drops them; the normalised columns hold the last user
    question alone, the calls and the tool schemas as text, and no rejected answer."""
    rows = decoded_json(plain_rows(table.select(_source_names(table))), json_columns)
    readings = _input_readings(table, read, source, inputs)
    if readings is None:
        fields = _record_fields(table, read, source)
        return [(rec, fields) for rec in rows]
    out = []
    for rec, name in zip(rows, table.column("source").cast(pa.string()).to_pylist()):
        names_of, fields = readings[name]
        out.append(({names_of[c]: rec[c] for c in names_of}, fields))
    return out


def _input_readings(table: pa.Table, read, source: str, inputs: list[dict] | None) -> dict | None:
    """A mixture's inputs that have rows here: name -> ({shard column: its name in the input}, the fields of the
    input's own columns, read with its recorded options under those given now); None for one dataset."""
    from cluster_curate.io.datasets import ReadOptions, original_name
    from cluster_curate.io.mixture import (IDENTITY_COLUMNS, MIXTURE_RESERVED, NORMALISED_COLUMNS, as_recorded,
                                           stored_rename)
    if not inputs or "source" not in table.column_names:
        return None
    source_of = table.column("source").cast(pa.string())
    readings = {}
    for item in inputs:
        mine = table.filter(pc.equal(source_of, item["name"]))
        if not mine.num_rows:
            continue
        renamed = {new: old for old, new in stored_rename(item.get("rename") or {}).items()}
        names_of = {}
        for c in _source_names(mine):
            if c in IDENTITY_COLUMNS + NORMALISED_COLUMNS or mine.column(c).null_count == mine.num_rows:
                continue  # the mixture's own columns, and the other inputs' (null in this input's rows)
            # mixture.reserved_rename undone (`source_id` stays: a single source's shards hold it so too)
            base = original_name(c, MIXTURE_RESERVED)
            names_of[c] = renamed.get(base, base)
        given = as_recorded(item, read or ReadOptions())  # its recorded options, under those given now
        readings[item["name"]] = (names_of, resolve_fields(
            list(names_of.values()), given.format, given.prompt_field, given.response_field,
            f"{source}: input {item['name']}", rejected_field=given.rejected_field, label_field=given.label_field))
    return readings


def mixture_inputs(manifest: dict) -> list[dict] | None:
    """The shards' mixture inputs as their manifest's lineage record lists them; None for one dataset's."""
    from cluster_curate.io.mixture import is_mixture_record
    dataset = manifest.get("dataset")
    return dataset["inputs"] if is_mixture_record(dataset) else None


def _shard_fields(table: pa.Table, read, inputs: list[dict] | None) -> dict:
    """The fields the shards' rows are read by (as `read` says, else detected): {None: fields} for one dataset, a
    mixture's (`inputs`: its lineage record's) {input name: fields} of each input with rows here."""
    readings = _input_readings(table, read, "shards", inputs)
    return {None: _record_fields(table, read)} if readings is None else {
        name: fields for name, (_, fields) in readings.items()}


def is_preference(table: pa.Table, read=None, inputs: list[dict] | None = None) -> bool:
    """Whether the shards' rows are preference pairs; a mixture's, whether an input's are."""
    try:
        return any(fields.rejected for fields in _shard_fields(table, read, inputs).values())
    except CurateError:
        return False


def pair_labels(table: pa.Table, read=None, inputs: list[dict] | None = None) -> list[str]:
    """Where the shards' pairs ordered by a label column (--label-field) hold their chosen answer, in words, for
    the layouts that keep the columns as written (`_traps`); a mixture's, per input."""
    try:
        readings = _shard_fields(table, read, inputs)
    except CurateError:
        return []
    return [f"{f'input {name}: ' if name else ''}`{fields.response or fields.prompt}` where `{fields.label}` is 1, "
            f"`{fields.rejected}` where it is 0" for name, fields in readings.items() if fields.label]


def preference_columns(table: pa.Table, style: str, records: list[tuple[dict, object]],
                       source: str = "shards", trainer: str | None = None) -> pa.Table:
    """Preference pairs (`records`: `_records`) as TRL's DPOTrainer reads them (style `prompt-completion`:
    conversational `prompt`, `chosen`, `rejected`, each answer one assistant turn), as LLaMA-Factory's ranking
    datasets and axolotl's DPO `chat_template.default` strategy do (style `messages`: `messages` the prompt turns,
    `chosen` and `rejected` one assistant turn each), or for `trainer` torchtune as its preference_dataset does
    (`chosen` and `rejected` each the whole conversation: the prompt turns, then its answer); for torchtune and
    axolotl a row with tool calling is refused (`_refuse_tool_calling`); plus `id`, `weight`, `step`. Turns and tool
    calling as `chat_columns` writes them (an answer may be a call). A mixture's row of an input of other records is
    refused: a pairwise loss needs both answers of every row."""
    from cluster_curate.io.records import preference_messages
    prompts, chosen, rejected, tools, misordered = [], [], [], [], []
    for i, (rec, fields) in enumerate(records):
        if not fields.rejected:
            name = table.column("source")[i].as_py()
            raise CurateError(f"{source}: row {i} (id {table.column('id')[i].as_py()}): input {name} holds no "
                              f"preference pairs (format {fields.format}) beside the other inputs' pairs: a DPO "
                              "layout needs both answers in every row; export the pairs apart, or --for "
                              f"{', '.join(KEEP_COLUMNS_TARGETS)}, which keep every column")
        where = f"{source}: row {i} (id {table.column('id')[i].as_py()})"
        try:
            prompt, good, bad, schemas = preference_messages(rec, fields)
        except RecordError as e:
            raise CurateError(f"{where}: field {e.field}: {e.reason}") from None
        if trainer in _NO_TOOL_CALLS:
            _refuse_tool_calling(where, [*prompt, good, bad], schemas, trainer, keeping="trl or llamafactory")
        if trainer == "llamafactory":  # its function_call / observation turns; an answer may be a function_call
            prompt, (good, bad) = _llamafactory_turns(prompt, where), _llamafactory_turns([good, bad], where)
            if skip := _llamafactory_skips(prompt, ranking=True):
                misordered.append((where, *skip))
        prompts.append(prompt)
        chosen.append(good)
        rejected.append(bad)
        tools.append(schemas)
    # torchtune's preference_dataset checks no turn order (torchtune/datasets/_preference.py)
    _refuse_turn_order(misordered, len(records), trainer, keeping="trl, torchtune or hf")
    turn = _turn_type([*prompts, chosen, rejected])
    if trainer == "torchtune":
        chat = {"chosen": pa.array([p + [c] for p, c in zip(prompts, chosen)], pa.list_(turn)),
                "rejected": pa.array([p + [r] for p, r in zip(prompts, rejected)], pa.list_(turn))}
    elif style == "prompt-completion":
        chat = {"prompt": pa.array(prompts, pa.list_(turn)), "chosen": pa.array([[c] for c in chosen], pa.list_(turn)),
                "rejected": pa.array([[r] for r in rejected], pa.list_(turn))}
    elif style == "messages":
        chat = {"messages": pa.array(prompts, pa.list_(turn)), "chosen": pa.array(chosen, turn),
                "rejected": pa.array(rejected, turn)}
    else:
        raise CurateError(f"unknown chat style {style!r}")
    if any(tools):  # JSON text, as chat_columns writes it (TRL's DPOTrainer parses it)
        chat["tools"] = pa.array([json.dumps(t, ensure_ascii=False) if t else None for t in tools], pa.string())
    return pa.table({**chat, **{c: table.column(c) for c in PLAN_COLUMNS}})


# the trainers whose reading has no tool calls (their export refuses such rows), and what it does with them
_NO_TOOL_CALLS = {
    "torchtune": "torchtune's openai conversation style does not carry (it would drop the calls)",
    # axolotl/prompt_strategies/dpo/chat_template.py: each turn's role and content, no tools for the template
    "axolotl": "axolotl's DPO chat_template strategy does not carry (it keeps each turn's role and content alone)",
}


def _refuse_tool_calling(where: str, messages: list[dict], schemas, trainer: str = "torchtune",
                         keeping: str = "trl, axolotl or llamafactory") -> None:
    """`trainer`'s reading (torchtune's openai conversation style and its preference_dataset, axolotl's DPO
    chat_template strategy) has no tool calls: refuse, never drop. `keeping`: the layouts that keep them."""
    if schemas or any(_tool_turn(m) for m in messages):
        raise CurateError(f"{where}: holds tool calls or tool turns, which {_NO_TOOL_CALLS[trainer]}; export "
                          f"--for {keeping} keeps them")


def _llamafactory_skips(messages: list[dict], ranking: bool = False) -> tuple[int, str] | None:
    """(turn index, why) where LLaMA-Factory's sharegpt converter (data/converter.py, SharegptDatasetConverter)
    skips the row, logging "Skipping this abnormal example" and training on the rest: after one leading system turn
    the turns must go user (or observation), assistant (or function_call), in turn, an even number of them (a
    ranking prompt: odd, ending on the user's turn). None where it takes the row."""
    start = 1 if messages and messages[0]["role"] == "system" else 0
    for i, m in enumerate(messages[start:], start):
        expected = ("user", "observation") if (i - start) % 2 == 0 else ("assistant", "function_call")
        if m["role"] not in expected:
            return i, (f"{m['role']} where it expects {' or '.join(expected)} (user and assistant turns in turn, "
                       "after one leading system turn)")
    if (len(messages) - start) % 2 != (1 if ranking else 0):
        last = messages[-1]["role"] if len(messages) > start else "none"
        return max(len(messages) - 1, 0), (f"{last}, the prompt's last, where it expects a user turn" if ranking
                                           else f"{last}, the last, where it expects an assistant turn")
    return None


def _torchtune_raises(messages: list[dict]) -> tuple[int, str] | None:
    """(turn index, why) where torchtune's SFT datasets raise (torchtune/data/_messages.py validate_messages: a
    system turn only first, no two user turns in a row, an assistant turn only after a user turn); None where
    they take the row."""
    if len(messages) < 2:
        return 0, f"{messages[0]['role'] if messages else 'none'}, the only one (it takes a user and an assistant turn)"
    last = "assistant"
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and last != "user":
            return i, f"assistant after {last}, not after user"
        if m["role"] == "user" and last == "user":
            return i, "user after user"
        if m["role"] == "system" and i > 0:
            return i, "system, not the first turn"
        last = m["role"]
    return None


# the trainers that skip or refuse a row whose turns are not in their order: what checks it, and what it does
_TURN_ORDER = {
    "llamafactory": (_llamafactory_skips, "LLaMA-Factory's sharegpt converter skips (\"Skipping this abnormal "
                                          "example\": it would train on the other rows alone)"),
    "torchtune": (_torchtune_raises, "torchtune's chat dataset raises on (validate_messages)"),
}


def _refuse_turn_order(misordered: list[tuple[str, int, str]], rows: int, trainer: str | None, keeping: str) -> None:
    """One line for the rows whose turns `trainer` takes in no such order (`_TURN_ORDER`): the first, its turn and
    why, and how many; never a file the trainer silently thins. `keeping`: the layouts that keep such turns."""
    if not misordered:
        return
    where, turn, why = misordered[0]
    raise CurateError(f"{where}: turn {turn} is {why}, which {_TURN_ORDER[trainer][1]}; {len(misordered):,} of "
                      f"{rows:,} rows are so: export --for {keeping} keeps their turns as written")


def _tool_turn(message: dict) -> bool:
    return bool(message.get("tool_calls")) or message["role"] in TOOL_RESULT_ROLES


def _turn_type(chats: list[list[dict]]) -> pa.DataType:
    """{role, content}, plus the tool-calling keys that some turn has (a turn without one holds null there)."""
    keys = {k for messages in chats for m in messages for k in m}
    calls = [c for messages in chats for m in messages for c in m.get("tool_calls") or ()]
    call = pa.struct(([("id", pa.string())] if any("id" in c for c in calls) else [])
                     + [("type", pa.string()), ("function", pa.struct([("name", pa.string()),
                                                                       ("arguments", pa.string())]))])
    return pa.struct([("role", pa.string()), ("content", pa.string())]
                     + ([("tool_calls", pa.list_(call))] if "tool_calls" in keys else [])
                     + [(k, pa.string()) for k in ("tool_call_id", "name") if k in keys])


def _llamafactory_turns(messages: list[dict], where: str) -> list[dict]:
    """LLaMA-Factory's sharegpt turns (data/README.md): an assistant turn's calls become a `function_call` turn
    whose content is the JSON of the call ({"name", "arguments"}, a list for several), a tool's result an
    `observation` turn; several results in a row are one observation, joined as its own OpenAI converter joins
    them. A turn with both text and calls has no such form: refused rather than losing the text."""
    out: list[dict] = []
    for m in messages:
        if m.get("tool_calls"):
            if (m.get("content") or "").strip():
                raise CurateError(f"{where}: an assistant turn holds text and tool calls; LLaMA-Factory's function_call "
                                  "turn holds the calls alone: export --for trl or axolotl keeps both")
            calls = [{"name": c["function"]["name"], "arguments": _parsed(c["function"]["arguments"])}
                     for c in m["tool_calls"]]
            out.append({"role": "function_call",
                        "content": json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)})
        elif m["role"] in TOOL_RESULT_ROLES:
            if out and out[-1]["role"] == "observation":
                out[-1]["content"] += "\n</tool_response>\n<tool_response>\n" + (m.get("content") or "")
            else:
                out.append({"role": "observation", "content": m.get("content") or ""})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


def _parsed(arguments: str):
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def source_rows(table: pa.Table, manifest: dict, leftovers: pa.Table | None = None) -> pa.Table:
    """The selected rows once each (repeats of `--remainder wrap` dropped; the left-over rows of `--remainder
    drop`, read back from the data, added), in dataset order, with their original column names and nothing
    `shard` added. `leftovers`: raw rows (`id` + source columns as the reader names them)."""
    if "wrapped" in table.column_names:
        table = table.filter(pc.invert(table.column("wrapped")))
    from cluster_curate.io.datasets import RAW_RESERVED, original_name
    from cluster_curate.io.mixture import NORMALISED_COLUMNS
    renamed = {new: old for old, new in (manifest.get("renamed_source_columns") or {}).items()}
    mixture = mixture_inputs(manifest) is not None and "source" in table.column_names
    # a mixture's normalised columns are no input's; its `source` and `source_row` name each row's input and row
    ours = NORMALISED_COLUMNS if mixture else ()

    def input_name(c: str) -> str:
        # a reader's name as the input has it: a source `id` is `source_id`, a mixture input's `prompt`
        # `source_prompt` (io/datasets.py `reserved_rename`; a mixture file's `rename` is kept, and so is
        # `source_source`: an input's `source` beside the mixture's)
        return original_name(original_name(c, NORMALISED_COLUMNS) if mixture else c, RAW_RESERVED)

    def source_name(c: str) -> str:
        # shard's renames as the manifest records them (one dataset's by its names in the data, a mixture's by
        # its names in the mixture); else a reader's name (manifests that recorded shard's renames alone)
        if mixture:
            return input_name(renamed.get(c, c))
        return renamed[c] if c in renamed else input_name(c)

    keep = [c for c in _source_names(table) if c not in ours]
    # our `id` apart: a source column of that name is back under its name
    ids = table.column("id").chunks
    rows = table.select(keep).rename_columns([source_name(c) for c in keep])
    json_columns = [source_name(c) for c in manifest.get("json_columns") or () if c not in ours]
    if leftovers is not None and leftovers.num_rows:
        # the leftovers' reader says which of its columns are JSON text of objects (_read_leftovers)
        json_columns += [input_name(c)
                         for c in json.loads((leftovers.schema.metadata or {}).get(JSON_COLUMNS_KEY, b"[]"))
                         if c not in ours and input_name(c) not in json_columns]
        ids += leftovers.column("id").chunks
        theirs = [c for c in leftovers.column_names if c not in ("id",) + ours]
        leftovers = leftovers.select(theirs).rename_columns([input_name(c) for c in theirs])
        (rows, leftovers), _ = json_text_aligned([rows, leftovers], json_columns)
        rows = concat_rows([rows, leftovers])
    rows = rows.take(pc.sort_indices(pa.chunked_array(ids, pa.int64())))
    if mixture:  # each input's rows (one run in id order) and its columns: a row is written with its own alone
        rows = rows.replace_schema_metadata({**(rows.schema.metadata or {}), INPUT_COLUMNS_KEY: json.dumps(
            _input_columns(rows, rows.column("source").cast(pa.string()).to_pylist())).encode()})
    if json_columns:  # said in the file: a reader decodes them (`export --for jsonl` writes them as they were)
        rows = rows.replace_schema_metadata({**(rows.schema.metadata or {}),
                                             JSON_COLUMNS_KEY: json.dumps(json_columns).encode()})
    return rows


def concat_rows(tables: list[pa.Table]) -> pa.Table:
    """Rows of one dataset read apart (the shards' and the left-over rows', the batches these were read in) as one
    table, joined as `shard` joins its batches (io/shard_writer.py): Arrow's promotions, an extension type (a
    `datasets` Array2D, which the shards hold as its storage) as its storage, and a column whose types none of
    those joins (numbers in one, text in another) as text, or one line naming it."""
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    tables = [_extensions_as_storage(t) for t in tables]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    from cluster_curate.io.shard_writer import joined_tables
    return joined_tables(tables)


def _extensions_as_storage(table: pa.Table) -> pa.Table:
    for i, field in enumerate(table.schema):
        if isinstance(field.type, pa.BaseExtensionType):
            column = table.column(i)
            table = table.set_column(i, field.name, pa.chunked_array([c.storage for c in column.chunks],
                                                                     field.type.storage_type))
    return table


def _input_columns(rows: pa.Table, sources: list[str]) -> list[dict]:
    """A mixture's rows in id order, input by input: [{source, rows, columns}], the columns those rows hold (the
    other inputs' are null in them)."""
    runs, start = [], 0
    for name, run in groupby(sources):
        n = len(list(run))
        part = rows.slice(start, n)
        runs.append({"source": name, "rows": n, "columns": [c for c in part.column_names
                                                            if part.column(c).null_count < n]})
        start += n
    return runs


def source_records(rows: pa.Table) -> list[dict]:
    """The rows as the records they were read from: the columns kept as JSON text (`JSON_COLUMNS_KEY` in the
    table's metadata: objects whose keys differ from row to row, lists whose items differ in type) decoded; a
    mixture's rows with their own input's columns alone (`INPUT_COLUMNS_KEY`)."""
    metadata = rows.schema.metadata or {}
    records = decoded_json(plain_rows(rows), json.loads(metadata.get(JSON_COLUMNS_KEY, b"[]")))
    if INPUT_COLUMNS_KEY in metadata:
        runs = json.loads(metadata[INPUT_COLUMNS_KEY])
        whose = (run["columns"] for run in runs for _ in range(run["rows"]))
        records = [{c: rec[c] for c in columns} for rec, columns in zip(records, whose)]
    return records


def json_lines(rows: pa.Table, source: str) -> bytes:
    """The rows as JSON Lines (--for jsonl), as they were read: dates and times as ISO 8601 text (nanoseconds too:
    `plain_rows`), decimals as exact text, durations as seconds and UUIDs as their text, which JSON has no type for;
    a column of bytes refused (--for parquet keeps it)."""
    binary = next((f.name for f in rows.schema if _holds_bytes(f.type)), None)
    if binary is not None:
        raise CurateError(f"{source}: column {binary!r} holds bytes, which JSON Lines cannot; export --for parquet "
                          "keeps them")
    return "".join(json.dumps(r, ensure_ascii=False, default=_json_text) + "\n" for r in source_records(rows)).encode()


def _holds_bytes(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):  # a UUID is written as its text (plain_rows); another as its storage
        return t.extension_name != "arrow.uuid" and _holds_bytes(t.storage_type)
    if pa.types.is_dictionary(t):
        return _holds_bytes(t.value_type)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return True
    return any(_holds_bytes(t.field(i).type) for i in range(t.num_fields))  # lists, structs, maps


def _json_text(value):
    """json.dumps's default for the Arrow values it has no type for."""
    if isinstance(value, (datetime.date, datetime.time)):  # a datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# ------------------------------------------------------------------------------------ plain values

_NS_PER_S = 10**9


def plain_rows(table: pa.Table) -> list[dict]:
    """`table.to_pylist()`, save for the values that call cannot give without pandas (nanosecond timestamps, times
    and durations: the CLI keeps pandas unimported, cli._let_pyarrow_skip_pandas) or gives as objects JSON has no
    form for (a UUID): a nanosecond timestamp or time is ISO 8601 text with its nine fraction digits, a nanosecond
    duration its seconds (a float), a UUID its canonical text, another extension type's value its storage's."""
    if not any(_needs_plain(f.type) for f in table.schema):
        return table.to_pylist()
    columns = [[v for chunk in table.column(i).chunks for v in _plain_values(chunk)]
               for i in range(table.num_columns)]
    return [dict(zip(table.column_names, values)) for values in zip(*columns)] if columns else \
        [{} for _ in range(table.num_rows)]


def _needs_plain(t: pa.DataType) -> bool:
    if isinstance(t, pa.BaseExtensionType):
        return True
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        return t.unit == "ns"
    if pa.types.is_dictionary(t):
        return _needs_plain(t.value_type)
    return any(_needs_plain(t.field(i).type) for i in range(t.num_fields))  # lists, structs, maps


def _plain_values(arr: pa.Array) -> list:
    """One array's `plain_rows` values."""
    t = arr.type
    if not _needs_plain(t):
        return arr.to_pylist()
    valid = arr.is_valid().to_pylist()
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.uuid":
            return [str(uuid.UUID(bytes=b)) if b is not None else None for b in arr.storage.to_pylist()]
        return _plain_values(arr.storage)
    if pa.types.is_dictionary(t):
        return _plain_values(arr.dictionary_decode())
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        ns = arr.cast(pa.int64()).to_pylist()
        if pa.types.is_duration(t):
            return [None if v is None else v / _NS_PER_S for v in ns]  # int / int: correctly rounded
        if pa.types.is_time64(t):
            return [None if v is None else _with_fraction(
                datetime.time(v // (3600 * _NS_PER_S), v // (60 * _NS_PER_S) % 60, v // _NS_PER_S % 60).isoformat(),
                v % _NS_PER_S, len("HH:MM:SS")) for v in ns]
        # the whole seconds as pyarrow gives a microsecond timestamp (its time zone too), then the fraction
        seconds = pa.array([None if v is None else v // _NS_PER_S * 10**6 for v in ns], pa.timestamp("us", t.tz))
        return [None if v is None else _with_fraction(d.isoformat(), v % _NS_PER_S, len("YYYY-MM-DDTHH:MM:SS"))
                for v, d in zip(ns, seconds.to_pylist())]
    if pa.types.is_fixed_size_list(t):
        size, start, values = t.list_size, arr.offset * t.list_size, _plain_values(arr.values)
        return [values[start + i * size: start + (i + 1) * size] if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets, values = arr.offsets.to_pylist(), _plain_values(arr.values)
        if pa.types.is_map(t):  # as to_pylist gives a map: (key, value) pairs
            values = [None if e is None else (e["key"], e["value"]) for e in values]
        return [values[offsets[i]:offsets[i + 1]] if ok else None for i, ok in enumerate(valid)]
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        children = [_plain_values(c) for c in arr.flatten()]
        return [dict(zip(names, values)) if ok else None for ok, values in zip(valid, zip(*children))] \
            if children else [{} if ok else None for ok in valid]
    return arr.to_pylist()


def _with_fraction(iso: str, nanoseconds: int, seconds_end: int) -> str:
    """ISO 8601 text of whole seconds with its fraction after the seconds (before an offset) as isoformat writes
    one: none when there is none, six digits for whole microseconds (what a value of pandas' datetime64[ns] from a
    microsecond time was written as before), nine where the nanoseconds need them."""
    fraction = ("" if not nanoseconds else f".{nanoseconds // 1000:06d}" if nanoseconds % 1000 == 0
                else f".{nanoseconds:09d}")
    return iso[:seconds_end] + fraction + iso[seconds_end:]


def data_file(tgt: Target) -> str:
    """The name of the data file `export --for tgt` writes."""
    return names.EXPORT_SELECTED[tgt.name] if tgt.columns == "source" else names.EXPORT_DATA


def layout_table(table: pa.Table, manifest: dict, tgt: Target, source: str = "shards",
                 leftovers: pa.Table | None = None, read=None) -> pa.Table:
    """The table `export --for tgt` writes (`read`: the ReadOptions naming the record format's fields)."""
    if tgt.columns == "source":
        return source_rows(table, manifest, leftovers)
    arranged = arrange(table, manifest, tgt.layout)
    if tgt.columns == "shard":
        return arranged
    return chat_columns(arranged, tgt.columns, source, read, tgt.name, mixture_inputs(manifest),
                        manifest.get("json_columns") or ())


# ------------------------------------------------------------------------------------ config snippets

def uses_tools(rows: pa.Table | None) -> bool:
    """Whether `chat_columns` wrote tool calling: a `tools` column, or turns with calls or tool results."""
    if rows is None:
        return False
    if "tools" in rows.column_names:
        return True
    for name in ("messages", "prompt", "completion", "chosen", "rejected"):
        turns = rows.column(name) if name in rows.column_names else None
        if turns is not None and pa.types.is_list(turns.type):
            turns = pc.list_flatten(turns)
        # lists of turns; LLaMA-Factory's ranking answers are one turn each
        if turns is not None and pa.types.is_struct(turns.type) and "role" in [f.name for f in turns.type]:
            if "tool_calls" in [f.name for f in turns.type]:
                return True
            roles = set(pc.unique(pc.struct_field(turns, "role")).to_pylist())
            if roles & (TOOL_RESULT_ROLES | {"function_call"}):
                return True
    return False


# integrations/axolotl.py: axolotl's trainers with the plan's sampler (its DPO trainer, TRL's DPOTrainer, samples
# at random whatever `curriculum_sampling` says), the plugin that logs each rank's ids for `verify`, and the SFT
# dataset type that keeps each row's id through axolotl's tokenization
AXOLOTL_TRAINER = "cluster_curate.integrations.axolotl.PlanDPOTrainer"
AXOLOTL_SFT_TRAINER = "cluster_curate.integrations.axolotl.PlanSFTTrainer"
AXOLOTL_PLUGIN = "cluster_curate.integrations.axolotl.ConsumedIdsPlugin"
AXOLOTL_SFT_TYPE = "cluster_curate.integrations.axolotl"
AXOLOTL_VERIFY = (f"`plugins: [{AXOLOTL_PLUGIN}]` has each rank log the ids it trained on in "
                  "OUTPUT_DIR/consumed/ (OUTPUT_DIR: axolotl's `output_dir`): check the run with `cluster-curate "
                  "verify SHARDS --log OUTPUT_DIR/consumed`")
# utils/data/shared.py create_train_validation_split: `val_set_size` rows off the end (train_test_split,
# shuffle=False), for SFT and DPO alike; 0 is axolotl's default, said so that a merged config's value gives way
_AXOLOTL_VAL_SET = ("`val_set_size: 0`: axolotl splits `val_set_size` of the rows off the file's end for "
                    "evaluation, rows the plan's last steps then lack; an evaluation set goes in `test_datasets`")
# what in axolotl 0.19.0 moves or takes out a row of the file, said in each config before its keys: the list
# order and the shuffles (utils/data/shared.py merge_datasets, a lone dataset shuffled too), then the rest
_AXOLOTL_LIST_NOTE = (
    "# the plan's order, kept: axolotl concatenates the `datasets:` in list order, so this one goes first (alone,\n"
    "# for `verify`: another dataset's rows are out of the plan); after another's rows the planned rows would reach\n"
    "# other ranks and steps than planned. It shuffles the concatenation (this file alone too) unless\n"
    "# `shuffle_merged_datasets: false`, and each dataset before with `shuffle_before_merging_datasets: true`.\n")
# the validation split (create_train_validation_split, above); load_preprocessed_dataset (utils/data/shared.py)
# finds the prepared rows by generate_dataset_hash_from_config, a hash of the config's keys (the path, not the
# file), so a new file at the same path is not read
_AXOLOTL_SPLIT_AND_CACHE_NOTE = (
    "# A `val_set_size` takes the file's last rows for evaluation (`val_set_size: 0`; an evaluation set goes in\n"
    "# `test_datasets`). After an `export --overwrite` axolotl trains the rows it prepared from the old file,\n"
    "# found under `dataset_prepared_path` (default last_run_prepared) by this config: delete them first.\n")
# under SFT, utils/data/sft.py _load_raw_datasets filters the merged rows by `excess_length_strategy`
# (utils/data/utils.py handle_long_seq_in_dataset: drop by default, truncate, or raise)
_AXOLOTL_ORDER_NOTE = (
    f"{_AXOLOTL_LIST_NOTE}"
    "# Its sampler shuffles unless `curriculum_sampling: true` (trainer_cls's sampler is sequential either way),\n"
    "# and `sample_packing: true` packs rows several to a sequence, in another order. A row longer than\n"
    "# `sequence_len` is dropped (the default `excess_length_strategy`), every later row moving to another rank and\n"
    "# step: `excess_length_strategy: raise` stops instead (`verify` reports rows dropped).\n"
    f"{_AXOLOTL_SPLIT_AND_CACHE_NOTE}")
# under `rl: dpo` (utils/data/rl.py): core/builders/rl.py passes no curriculum_sampling to the trainer, whose
# sampler is TRL's (random); _load_split filters each dataset by `excess_length_strategy` (_drop_long_sequences,
# _raise_on_long_sequences); deduplication hashes str(row) after chat_template.default, which keeps `id`
_AXOLOTL_DPO_ORDER_NOTE = (
    f"{_AXOLOTL_LIST_NOTE}"
    "# Its DPO trainer samples at random, `curriculum_sampling` or not (trainer_cls's sampler is sequential). A pair\n"
    "# longer than `sequence_len` is dropped (the default `excess_length_strategy`; truncate drops one whose\n"
    "# prompt alone exceeds it): `excess_length_strategy: raise` stops instead. `dataset_exact_deduplication`\n"
    "# compares whole rows, `id` included: it finds no copy here.\n"
    f"{_AXOLOTL_SPLIT_AND_CACHE_NOTE}")
# a recipe config may give `dataset:` as a list, whose datasets the recipes concatenate (ConcatDataset): a dict
# does not merge into it, and the sampler deals the plan's rows to their ranks only at the head of the list
_TORCHTUNE_LIST_NOTE = (
    "# a config whose `dataset:` is a list (torchtune concatenates its datasets): make this `dataset` its first\n"
    "# item, dataset: [{_component_: ..., source: parquet, ...}, <yours>, ...] (a mapping does not merge into a\n"
    "# list; after another dataset's rows the planned rows would reach other ranks and steps than planned)\n")


def config_files(tgt: Target, manifest: dict, data_path: str, rows: pa.Table | None = None,
                 preference: bool = False, labels: list[str] = ()) -> dict[str, str]:
    """File name -> text of the settings that keep the plan for `tgt` (and a README of its traps); `rows`: the
    data file's table (tool calling needs more settings); `preference`: for the DPO stage of the trainer (`trl`:
    DPOConfig, `llamafactory`: stage dpo, a ranking dataset); `labels`: `pair_labels`."""
    n, m, steps = int(manifest["num_shards"]), int(manifest["micro_batch_size"]), int(manifest["steps"])
    tools = tgt.columns in ("messages", "prompt-completion") and uses_tools(rows)
    files: dict[str, str] = {}

    def dump(obj) -> str:
        return json.dumps(obj, indent=2) + "\n"

    if tgt.name in ("hf", "trl"):
        args = {"per_device_train_batch_size": m, "train_sampling_strategy": "sequential",
                "dataloader_drop_last": False}
        if tgt.name == "trl" and preference:  # DPOConfig: no packing, no dataset shuffling, no completion_only_loss
            args.update(max_length=None)
        elif tgt.name == "trl":
            args.update(packing=False, shuffle_dataset=False, max_length=None, completion_only_loss=True)
        files[names.TRAINING_ARGS] = dump(args)
    elif tgt.name == "accelerate":
        files[names.DATALOADER_ARGS] = dump({"batch_size": m, "shuffle": False, "drop_last": False,
                                             "split_batches": False, "num_processes": n})
    elif tgt.name == "torchrun":
        files[names.DATALOADER_ARGS] = dump({"batch_size": m, "sampler": "DistributedSampler", "shuffle": False,
                                             "drop_last": False, "num_replicas": n})
    elif tgt.name == "torchtune" and preference:  # preference_dataset reads the `chosen` / `rejected` conversations
        files[names.TRAINER_CONFIG] = (
            "# merge into your torchtune DPO recipe config (lora_dpo_distributed / full_dpo_distributed)\n"
            f"{_TORCHTUNE_LIST_NOTE}"
            "dataset:\n"
            "  _component_: torchtune.datasets.preference_dataset\n"
            "  source: parquet\n"
            f"  data_files: {data_path}\n"
            "  split: train\n"
            "  train_on_input: False\n"
            "shuffle: False\n"
            f"batch_size: {m}\n")
    elif tgt.name == "torchtune":
        files[names.TRAINER_CONFIG] = (
            "# merge into your torchtune recipe config (full_finetune_distributed / lora_finetune_distributed)\n"
            f"{_TORCHTUNE_LIST_NOTE}"
            "dataset:\n"
            "  _component_: torchtune.datasets.chat_dataset\n"
            "  source: parquet\n"
            f"  data_files: {data_path}\n"
            "  split: train\n"
            "  conversation_column: messages\n"
            "  conversation_style: openai\n"
            # loss on the answers alone, said: a recipe's own `train_on_input: True` (llama2/7B_qlora) survives a merge
            "  train_on_input: False\n"
            "  packed: False\n"
            "shuffle: False\n"
            f"batch_size: {m}\n")
    elif tgt.name == "llamafactory":
        files[names.LLAMAFACTORY_DATASET_INFO] = dump({"cluster_curate": llamafactory_entry(
            Path(data_path).name, preference, tools=tools,
            tools_column=rows is not None and "tools" in rows.column_names)})
        files[names.TRAINER_CONFIG] = (
            f"# merge into your LLaMA-Factory training YAML (stage: {'dpo' if preference else 'sft'})\n"
            f"dataset_dir: {Path(data_path).parent}\n"
            "dataset: cluster_curate\n"
            "disable_shuffling: true\n"
            f"per_device_train_batch_size: {m}\n"
            "packing: false\n"
            "neat_packing: false\n")  # no group_by_length: transformers 5 has none, and LLaMA-Factory refuses it
    elif tgt.name == "axolotl" and preference:
        # validate_config makes a DPO dataset entry a DPODataset (utils/schemas/datasets.py), which has none of
        # the SFT entry's ds_type or message_property_mappings: chat_template.default reads role and content
        files[names.TRAINER_CONFIG] = (
            "# merge into your axolotl config (DPO; for IPO add dpo_loss_type: [\"ipo\"])\n"
            f"{_AXOLOTL_DPO_ORDER_NOTE}"
            "rl: dpo\n"
            f"plugins:\n  - {AXOLOTL_PLUGIN}\n"
            f"trainer_cls: {AXOLOTL_TRAINER}\n"
            "datasets:\n"
            f"  - path: {data_path}\n"
            "    type: chat_template.default\n"
            "    field_messages: messages\n"
            "    field_chosen: chosen\n"
            "    field_rejected: rejected\n"
            "shuffle_merged_datasets: false\n"
            "val_set_size: 0\n"
            "excess_length_strategy: raise\n"
            f"micro_batch_size: {m}\n")
    elif tgt.name == "axolotl":
        files[names.TRAINER_CONFIG] = (
            "# merge into your axolotl config\n"
            f"{_AXOLOTL_ORDER_NOTE}"
            f"plugins:\n  - {AXOLOTL_PLUGIN}\n"
            f"trainer_cls: {AXOLOTL_SFT_TRAINER}\n"
            "datasets:\n"
            f"  - path: {data_path}\n"
            "    ds_type: parquet\n"
            f"    type: {AXOLOTL_SFT_TYPE}\n"
            "    field_messages: messages\n"
            + ("    field_tools: tools\n" if rows is not None and "tools" in rows.column_names else "") +
            "    message_property_mappings:\n"
            "      role: role\n"
            "      content: content\n"
            + ("      tool_calls: tool_calls\n      tool_call_id: tool_call_id\n      name: name\n" if tools else "") +
            "    roles_to_train: [assistant]\n"
            "shuffle_merged_datasets: false\n"
            "curriculum_sampling: true\n"
            "sample_packing: false\n"
            "val_set_size: 0\n"
            "excess_length_strategy: raise\n"
            f"micro_batch_size: {m}\n")
    files[names.EXPORT_README] = _traps(tgt, n, m, steps, manifest.get("json_columns") or (), tools, preference,
                                        labels)
    return files


def llamafactory_entry(file_name: str, preference: bool = False, tools: bool = False,
                       tools_column: bool = False) -> dict:
    """The dataset_info.json entry for the exported `messages` column (sharegpt formatting, OpenAI tags; with tool
    calling its function_call / observation tags, and the `tools` column); for preference pairs a ranking dataset
    whose `chosen` and `rejected` columns hold one assistant turn each."""
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
            "system_tag": "system"}
    if tools:
        tags.update(function_tag="function_call", observation_tag="observation")
    columns = {"messages": "messages", **({"chosen": "chosen", "rejected": "rejected"} if preference else {}),
               **({"tools": "tools"} if tools_column else {})}
    return {"file_name": file_name, "formatting": "sharegpt", **({"ranking": True} if preference else {}),
            "columns": columns, "tags": tags}


_TRAPS = {
    "hf": ["`train_sampling_strategy` must be `\"sequential\"` (transformers 5.x; the default `\"random\"` shuffles "
           "the global order, so ranks get rows of other shards); on 4.x override `_get_train_sampler` — "
           "`cluster_curate.integrations.hf.PlanTrainerMixin` does both",
           "`remove_unused_columns=True` (the default) drops `weight` and `id` before the collator: use the mixin, "
           "which keeps them and multiplies each example's loss by its weight",
           "`group_by_length` / `train_sampling_strategy=\"group_by_length\"` or `\"batch_rebalance\"` reorder "
           "the rows"],
    "trl": ["everything for `hf`, plus:",
            "`packing=True` (best-fit-decreasing by default) re-sorts the rows longest first and mixes examples "
            "of different steps into one row; keep `packing=False`",
            "`shuffle_dataset=True` shuffles the dataset before training",
            "a `max_length` that truncates a prompt to nothing drops that row (TRL filters fully masked rows): "
            "leave `max_length=None` or make it longer than the longest row"],
    "accelerate": ["give `accelerator.prepare` one DataLoader over this file (batch size M, no shuffling): it deals "
                   "the batches to the ranks itself",
                   "never hand it a rank's own shard (`load_shard(...)` data): it shards it a second time and each "
                   "rank silently trains on 1/N of its shard",
                   "`split_batches=True` splits each batch across ranks instead of dealing whole batches"],
    "torchrun": ["`cluster_curate.loader.distributed_sampler(EXPORT_DIR, ds)`: the `DistributedSampler(shuffle=False)` "
                 "of `dataloader.json`, refused unless the job has its `num_replicas` processes (a bare one deals "
                 "the rows to however many run, other shards' rows to each); with the default `shuffle=True` every "
                 "rank gets other rows",
                 "batch size M per rank, and `drop_last=False` (the file's length is a multiple of N: nothing is "
                 "padded)",
                 "a plain loop can skip this file: `cluster_curate.loader.load_shard(dir).micro_batches()` reads "
                 "the rank's shard directly"],
    "torchtune": ["`shuffle: False` (torchtune's default recipes shuffle)",
                  "`packed: True` packs rows into fixed-length sequences, in another order",
                  "`train_on_input: False`: the loss is on every assistant turn of a conversation (its earlier "
                  "answers too, where `--for trl` trains the last one alone), the system and user turns masked",
                  "`tokenizer.max_seq_len` truncates a longer row (a prompt longer than it leaves nothing to train "
                  "on): leave it null or make it longer than the longest row",
                  "`tensor_parallel_dim: T` (full_finetune_distributed) deals the rows to world size / T data-parallel "
                  "ranks: run N × T processes",
                  "torchtune has no per-example loss weight: `weight` is not applied"],
    "llamafactory": ["`disable_shuffling: true` (else the HF Trainer's random sampler shuffles)",
                     "`packing` / `neat_packing` reorder and merge rows",
                     "LLaMA-Factory has no per-example loss weight: `weight` is not applied"],
    "axolotl": ["`shuffle_merged_datasets: false` (else axolotl shuffles the file itself, before any sampler) and "
                f"`curriculum_sampling: true` (sequential sampler; `trainer_cls: {AXOLOTL_SFT_TRAINER}` keeps the "
                "order whatever it says: install cluster-curate where axolotl runs)",
                "`sample_packing: true` reorders rows (multipack)",
                "`excess_length_strategy: raise`: by default axolotl drops a row longer than `sequence_len`, and "
                "every later row moves to another rank and step; make it longer than the longest row",
                _AXOLOTL_VAL_SET,
                "this file first in `datasets:` (alone, for `verify`): axolotl concatenates them in list order",
                AXOLOTL_VERIFY,
                f"`type: {AXOLOTL_SFT_TYPE}` is axolotl's `chat_template` strategy (the same keys) keeping each "
                "row's `id`, which axolotl's tokenization drops, for the log",
                "axolotl has no per-example loss weight: `weight` is not applied"],
    "jsonl": ["the selected rows in their original columns, in dataset order: no plan, no weights"],
    # with tool calling only
    "trl-tools": ["tool calls: `tool_calls[].function.arguments` is JSON text, as OpenAI writes it (Parquet has one "
                  "type per column, and arguments differ from call to call); TRL hands it to the chat template as "
                  "it is, and a template that renders `arguments | tojson` writes it as a quoted string: use one "
                  "that renders text arguments as they are (Qwen3's does)"],
    "parquet": ["the selected rows in their original columns, in dataset order: no plan, no weights"],
}


_PREFERENCE_TRAPS = {
    "trl": ["preference pairs: the file holds DPO's conversational `prompt`/`chosen`/`rejected`; train it with "
            "`trl.DPOTrainer` and a `DPOConfig` holding these settings (`train_sampling_strategy=\"sequential\"`, "
            "or `cluster_curate.integrations.hf.PlanTrainerMixin`, which keeps the order and logs the ids)",
            "`weight` is NOT applied: DPO's loss is per pair (chosen against rejected, beside a reference model) and "
            "the mixin leaves it to TRL; the weights are in the file and the consumed log for `verify` only",
            "a `max_length` that truncates a prompt to its whole length drops that row (DPOTrainer filters them): "
            "leave `max_length=None` or make it longer than the longest prompt"],
    "torchtune": ["preference pairs: `chosen` and `rejected` each hold the whole conversation (the prompt turns, "
                  "then one answer), what `torchtune.datasets.preference_dataset` reads: train with a DPO recipe "
                  "(`lora_dpo_distributed`, `full_dpo_distributed`; `lora_dpo_single_device` for one rank)",
                  "`shuffle: False` (torchtune's DPO configs shuffle)",
                  "`tokenizer.max_seq_len` truncates a longer conversation (the DPO configs set 1024): make it "
                  "longer than the longest row",
                  "torchtune has no per-example loss weight: `weight` is not applied"],
    "axolotl": ["preference pairs: `messages` holds the prompt turns, `chosen` and `rejected` one assistant turn "
                "each, what axolotl's DPO `type: chat_template.default` reads: train with `rl: dpo` (IPO: "
                "`dpo_loss_type: [\"ipo\"]`); `rl: orpo` and `kto` read other dataset types",
                f"`trainer_cls: {AXOLOTL_TRAINER}` keeps the order (install cluster-curate where axolotl "
                "runs): axolotl's DPO trainer ignores `curriculum_sampling` and samples at random",
                "`excess_length_strategy: raise`: by default axolotl drops a pair whose prompt and answer exceed "
                "`sequence_len`, and every later row moves to another rank and step; make it longer than the "
                "longest pair",
                _AXOLOTL_VAL_SET,
                AXOLOTL_VERIFY,
                "chat_template.default looks each answer up in the chat template's rendering of it: under a "
                "template that trims each turn (Llama 3's) an answer with spaces or newlines at its ends is not "
                "found and axolotl stops (\"Prompt, chosen and rejected keys are required\")",
                "axolotl has no per-example loss weight: `weight` is not applied"],
    "llamafactory": ["preference pairs: `dataset_info.json` declares a ranking dataset (`ranking: true`, `chosen` "
                     "and `rejected` one assistant turn each): train with `stage: dpo` (or another pairwise stage)",
                     "`disable_shuffling: true` (else the HF Trainer's random sampler shuffles)",
                     "LLaMA-Factory has no per-example loss weight: `weight` is not applied"],
}


def _traps(tgt: Target, n: int, m: int, steps: int, json_columns=(), tools: bool = False,
           preference: bool = False, labels: list[str] = ()) -> str:
    lines = [f"# `{data_file(tgt)}` for {tgt.name}", ""]
    if tgt.layout:
        how = ("whole micro-batches round-robin" if tgt.layout == "batch" else "single samples round-robin")
        lines += [f"Planned for {counted(n, 'rank')} × micro-batch {m} = {counted(n * m, 'row')} per step, "
                  f"{counted(steps, 'step')}. The file is "
                  f"{tgt.layout}-interleaved, for a trainer that deals {how}: run it on exactly {n} processes with "
                  f"a per-device batch size of {m}, without shuffling, and rank r reads exactly shard r in order.",
                  "", "Check that it did: log each rank's ids (`cluster_curate.loader.ConsumedLog`, or the HF "
                  "callback) and run `cluster-curate verify SHARDS --log LOGDIR`.", ""]
    traps = (list(_PREFERENCE_TRAPS[tgt.name]) if preference and tgt.name in _PREFERENCE_TRAPS else
             list(_TRAPS[tgt.name]) + (_TRAPS.get(f"{tgt.name}-tools", []) if tools else []))
    # the chat layouts read such columns as turns, and jsonl writes them back as they were
    if json_columns and tgt.columns in ("shard", "source") and tgt.name != "jsonl":
        traps.append(", ".join(f"`{c}`" for c in json_columns) + ": JSON text, one value per row (their lists or "
                     "objects differ in keys or types from row to row, which one Parquet column type cannot hold "
                     "without adding null keys): `json.loads` them"
                     + (" (`--for jsonl` writes them as they were)" if tgt.name == "parquet" else ""))
    if labels and tgt.columns in ("shard", "source"):  # the DPO layouts write each pair chosen first
        traps.append("preference pairs ordered by a label column (--label-field), kept as written: the chosen answer "
                     f"is {'; '.join(labels)}; `--for trl`, `llamafactory` or `torchtune` write each pair chosen first")
    lines += ["## Traps", ""] + [f"- {t}" for t in traps] + [""]
    return "\n".join(lines)
