"""Record formats of instruction datasets: detect which one a dataset uses, and turn a record into chat turns.

A format maps one source record (a dict of columns) to `(prompt, response)`:

    prompt    list of chat turns [{"role": "system"|"user"|"assistant"|"tool"|..., "content": str}] holding a user
              turn and ending with a user turn or a tool's result; its user and system turns hold some text
    response  str, non-empty (a tool call alone is a response: the model learns to call the tool; empty for
              questions alone: below)

Supported formats (detected from the column names, overridable with --format / --prompt-field / --response-field;
`--prompt-field A,B` makes the prompt of several columns, joined by a blank line, e.g. PubMedQA's CONTEXTS,QUESTION;
a field `data.question` is a path into nested objects unless a column has that very name: `field_value`):

    alpaca             instruction (+ input, or dolly-15k's `context`; + optional system) -> output (or `response`)
    prompt-completion  prompt -> completion (or `response`); both may be lists of turns (TRL conversational)
    qa                 question -> answer (GSM8K and friends)
    messages           OpenAI chat: `messages` = [{role, content}...]; the LAST assistant turn is the response,
                       every turn before it (system, user, earlier assistant turns) is the prompt
    sharegpt           `conversations` = [{from, value}...] with from in human/gpt/system (same rule as messages);
                       LIMA's list of plain texts is the user's and the assistant's turns in turn
    preference         TRL / DPO preference pairs: `chosen` and `rejected`; with a `prompt` column, prompt -> chosen
                       (text, or a list of assistant turns); without one, `chosen` is the whole conversation (read as
                       `messages`, or an Anthropic HH transcript: "\n\nHuman: ...\n\nAssistant: ...") and `rejected`
                       the same conversation with the other answer. The example's response is the chosen one; the
                       rejected one rides along (`Example.rejected`, counted in its tokens). Two answers whose
                       preferred one a label column names row by row (SHP's `labels`, PKU-SafeRLHF's
                       `better_response_id`: --label-field): 1 or true, the response column's answer is the chosen
                       one; 0 or false, the rejected column's is (`preference.labelled_fields`); any other label is a
                       bad row
    xlam               xLAM / APIGen function calling: query -> answers, the list of tool calls (or its JSON text),
                       with `tools`; detected by the three columns. The response is the calls as text (io/tool_calls.py)
    glaive             glaive-function-calling-v2: `chat` ("USER: ...\n\n\nASSISTANT: <functioncall> {...}") and
                       `system` ("SYSTEM: ..." then the tool schemas), read as the OpenAI chat and tools they
                       transcribe (io/glaive.py), then as `messages`


Questions alone (`resolve_fields(..., prompts_only=True)`: an evaluation set read for its questions, as
`--decontaminate` reads it): a row needs no response. The prompt column of a format above is enough (IFEval's
`prompt`, a list of `question`s or `instruction`s; else a column named like a question whatever its case, such as
MATH's `problem`; a response present is read as above, a missing or empty one is no error), a conversation may
end with a user turn (then it is all question; an empty last assistant turn is the slot for the answer), and a
`turns` column (TURNS: MT-Bench, Arena-Hard) holds the user's questions in order, each text or {content: text},
read as consecutive user turns (each is a question of its own to decontamination), as does a `prompt` column
that holds a list of texts and no response (HuggingFaceH4/mt_bench_prompts). A `question` (or `prompt`) column
that holds lists of turns, one list per turn of a multi-turn test (BFCL: `[[{role, content}], ...]`), is read as
one conversation of those turns (its user turns each a question, as `turns`).

Each part is a module of io/: which columns a dataset's records are read from (fields.py: resolve_fields,
detect_format, the hints for known datasets' columns), a conversation's turns (turns.py), tool calls and tool
schemas (tool_calls.py), preference pairs (preference.py), and a record as an example and as a trainer's turns
(records.py: to_example, chat_messages, preference_messages). This module holds what they share: the formats
(FORMAT), the columns a format reads (FieldMap), a field's value (field_value) and the error of a bad record.

A bad record raises `RecordError(field, reason)`; the reader turns it into an error or a reject naming file and row.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from cluster_curate.registry import Registry


# A format: its prompt column, its response columns in order of preference (None: a conversation column that
# holds both), and where it comes in detection (the first whose columns are present wins; of JSON rows whose
# columns differ, ties of io/fields.most_read_format). Add one: a line
# here (its reading, where its record is more than a prompt text and a response text: io/records.py; a conversation
# format with new speaker names also maps them in io/turns.py).
FORMAT = Registry("--format")
FORMAT.register("alpaca", "instruction (+ input, + optional system) -> output (or response)", "instruction",
                response=("output", "response"), detect_order=2)
FORMAT.register("prompt-completion", "prompt -> completion (or response)", "prompt",
                response=("completion", "response"), detect_order=3)
FORMAT.register("qa", "question -> answer (GSM8K and friends)", "question", response=("answer", "response"),
                detect_order=4)
FORMAT.register("messages", "OpenAI chat `messages`; the last assistant turn is the response", "messages",
                response=None, detect_order=0)
FORMAT.register("sharegpt", "`conversations` of {from, value}; the last gpt turn is the response", "conversations",
                response=None, detect_order=1)
# preference pairs: detected by `chosen` AND `rejected`, before every other format (fields.py: _preference_fields)
FORMAT.register("preference", "DPO pairs: (prompt ->) chosen, with rejected (TRL's preference columns)", "chosen",
                response=None, detect_order=-1, also=("rejected",))
# xLAM / APIGen (Salesforce/xlam-function-calling-60k): the answer is a list of calls, not text (io/tool_calls.py)
FORMAT.register("xlam", "xLAM / APIGen function calling: query -> answers (a list of tool calls), with tools",
                "query", response=("answers",), detect_order=5, also=("tools",))
# glaiveai/glaive-function-calling-v2: a USER: / ASSISTANT: transcript beside a system prompt holding the tool
# schemas, read as the OpenAI chat it transcribes (io/glaive.py)
FORMAT.register("glaive", "glaive-function-calling-v2: a `chat` transcript, the tools in its `system` column", "chat",
                response=None, detect_order=6, also=("system",))
FORMATS = FORMAT.names
TURNS = "turns"  # questions alone: a column of the user's questions, no registered format (see the docstring)


class RecordError(ValueError):
    """A record that cannot become an example: which field, and why. The why is text and io/fields.py's
    ColumnsHints: `reason` words each hint as flags, `worded(wording)` as the reader words them (a mixture's input
    as its mixture file's keys)."""

    def __init__(self, field: str | None, *parts):
        self.field, self.parts = field, parts
        self.reason = self.worded(lambda hint: hint.as_flags())
        super().__init__(self.reason)

    def worded(self, wording) -> str:
        return worded_parts(self.parts, wording)


def worded_parts(parts, wording) -> str:
    """Text and ColumnsHints (io/fields.py) as one message, each hint worded by `wording`."""
    return "".join(part if isinstance(part, str) else wording(part) for part in parts)


@dataclass(frozen=True)
class FieldMap:
    """Which columns a format reads. `prompt` is the conversation column for messages/sharegpt."""
    format: str
    prompt: str
    response: str | None = None     # None for conversation formats (the response is inside the conversation),
                                    # and for questions alone without a response column
    input: str | None = None        # alpaca's optional second prompt field
    system: str | None = None       # optional system-prompt column (alpaca, prompt-completion, qa): `system`, or
                                    # Open-Orca's `system_prompt`
    prompt_extra: tuple[str, ...] = ()  # more prompt columns after `prompt` (--prompt-field A,B)
    prompts_only: bool = False      # questions alone: a row needs no response (the module docstring)
    rejected: str | None = None     # preference: the rejected response's column
    label: str | None = None        # preference: the column saying, row by row, which answer is the chosen one
    tools: str | None = None        # optional column of tool schemas (any format): rendered into the system turn

    @property
    def prompt_columns(self) -> tuple[str, ...]:
        return (self.prompt, *self.prompt_extra)

    def as_dict(self) -> dict:
        conversation = self.format != TURNS and FORMAT.get(self.format).response is None
        d = {"prompt": ",".join(self.prompt_columns),
             "response": self.response or (f"{self.prompt} (last assistant turn)" if conversation else "none")}
        if self.input:
            d["input"] = self.input
        if self.system:
            d["system"] = self.system
        if self.rejected:
            d["rejected"] = self.rejected
        if self.label:
            d["label"] = self.label
        if self.tools:
            d["tools"] = self.tools
        return d


def field_text(value, field: str, what: str, required: bool = True, parts: bool = False) -> str:
    """A text field: str kept, numbers turned into text (the source column keeps the number), anything else an
    error. parts=True (prompt columns): a list of texts, such as PubMedQA's CONTEXTS, is joined by blank lines."""
    if isinstance(value, float) and math.isnan(value):
        value = None  # pandas' missing value, as its to_json / to_dict writes it (NaN), is no text "nan"
    if value is None:
        if required:
            raise RecordError(field, f"missing {what}")
        return ""
    if isinstance(value, bool):
        raise RecordError(field, f"{what} is a boolean, expected text")
    if isinstance(value, float) and math.isinf(value):
        raise RecordError(field, f"{what} is {value}, expected text")
    if isinstance(value, (int, float)):
        value = str(value)
    if parts and isinstance(value, (list, tuple)):
        odd = [v for v in value if not isinstance(v, str)]
        if odd:  # a null item too (next(..., None) could not tell it from none)
            raise RecordError(field, f"{what} is a list holding {kind_of(odd[0])}, expected text or a list of texts")
        value = "\n\n".join(v for v in value if v.strip())
    if not isinstance(value, str):
        raise RecordError(field, f"{what} is {kind_of(value)}, expected text")
    if required and not value.strip():
        raise RecordError(field, f"empty {what}")
    return value


def kind_of(value) -> str:
    """'an object', 'a list', 'a number', ... for messages."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "null"
    return "a " + type(value).__name__


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # what JSON text writes one as: \ud800 to \udfff
_LONE = ("a lone UTF-16 surrogate ({!r}), half of a pair: no character, and no UTF-8 text can hold it; write the "
         "character itself, or both halves of its escape")


def lone_surrogate(value, path: str = "") -> tuple[str, str] | None:
    """(where, why) of the first lone UTF-16 surrogate in a value read from JSON (an escape `\\ud83d` without its
    pair: no character, which no UTF-8 text, Parquet's or a tokenizer's, can hold): the path of the field holding it
    ('' for `value` itself), or of the object one of whose keys does (a key is named in the reason, escaped: as a
    field's name it could not be printed or written either). None for a value without one."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return found and (path, _LONE.format(found.group()))
    for k, x in value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ():
        found = isinstance(k, str) and lone_surrogate(k)
        found = (path, f"a key ({k!r}) holding {found[1]}") if found else lone_surrogate(
            x, f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}" if path else k)
        if found:
            return found
    return None


def json_text(text: str, field: str | None):
    """json.loads of JSON text a field holds (a CSV column's object, a tool call's arguments, a `tools` column),
    its value checked as a record read from JSON is: a lone UTF-16 surrogate escaped in it (lone_surrogate) is a
    RecordError naming `field`, not a crash where the text is hashed or written. Text that is no JSON raises
    json.JSONDecodeError, as json.loads does."""
    value = json.loads(text)
    found = _SURROGATE_ESCAPE.search(text) and lone_surrogate(value)
    if found:
        where, why = found
        raise RecordError(field, f"JSON text holding, at {where}, {why}" if where else f"JSON text holding {why}")
    return value


def field_value(rec: dict, field: str):
    """The value of `field` in a record: its key of that name when it has one (a key may hold a dot), else the
    dotted path into nested objects and lists (`data.question`, `conversations.0.value`: a step that is a whole
    number indexes a list, from 0; an object or list may be JSON text, as a conversation column may). A step
    that is not there is a RecordError naming the whole path; the value at the end, null included, is the
    caller's to judge, as a flat column's is."""
    if field in rec or "." not in field:
        return rec.get(field)
    keys = field.split(".")
    value = rec
    for i, key in enumerate(keys):
        where = f"'{'.'.join(keys[:i])}'" if i else "the record"
        if isinstance(value, str) and value.startswith(("{", "[")):
            # an object or list kept as JSON text: a CSV column, or a shard column whose rows mix objects and text
            try:
                value = json_text(value, ".".join(keys[:i]))
            except json.JSONDecodeError:
                pass
        if isinstance(value, (list, tuple)):
            if not key.isdigit():
                raise RecordError(field, f"missing ({where} is a list, not an object: give an item's index, "
                                         f"{'.'.join(keys[:i] + ['0'] + keys[i:])})")
            if int(key) >= len(value):
                raise RecordError(field, f"missing ({where} has {len(value)} item{'' if len(value) == 1 else 's'}, "
                                         f"no item {key})")
            value = value[int(key)]
            continue
        if not isinstance(value, dict):
            raise RecordError(field, f"missing ({where} is {kind_of(value)}, not an object)")
        if key not in value:
            raise RecordError(field, f"missing ({where} has no key {key!r})")
        value = value[key]
    return value
