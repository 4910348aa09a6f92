"""Record formats of instruction datasets: detect which one a dataset uses, and turn a record into chat turns.

A format maps one source record (a dict of columns) to `(prompt, response)`:

    prompt    list of chat turns [{"role": "system"|"user"|"assistant"|..., "content": str}], ending with a user turn
    response  str, non-empty

Supported formats (detected from the column names, overridable with --format / --prompt-field / --response-field):

    alpaca             instruction (+ input, + optional system) -> output (or `response`)
    prompt-completion  prompt -> completion (or `response`)
    qa                 question -> answer (GSM8K and friends)
    messages           OpenAI chat: `messages` = [{role, content}...]; the LAST assistant turn is the response,
                       every turn before it (system, user, earlier assistant turns) is the prompt
    sharegpt           `conversations` = [{from, value}...] with from in human/gpt/system (same rule as messages)

A bad record raises `RecordError(field, reason)`; the reader turns it into an error or a reject naming file and row.
Context turns keep their role as written (a `tool` turn stays `tool`); ShareGPT speakers are mapped to roles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cluster_curate.registry import Registry

# A format: its prompt column, its response columns in order of preference (None: a conversation column that
# holds both), and where it comes in detection (the first whose columns are present wins). Add one: a line
# here (a conversation format with new speaker names also maps them in _turns).
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
FORMATS = FORMAT.names


class RecordError(ValueError):
    """A record that cannot become an example: which field, and why."""

    def __init__(self, field: str | None, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


@dataclass(frozen=True)
class FieldMap:
    """Which columns a format reads. `prompt` is the conversation column for messages/sharegpt."""
    format: str
    prompt: str
    response: str | None = None     # None for conversation formats (the response is inside the conversation)
    input: str | None = None        # alpaca's optional second prompt field
    system: str | None = None       # optional system-prompt column (alpaca, prompt-completion, qa)

    def as_dict(self) -> dict:
        d = {"prompt": self.prompt, "response": self.response or f"{self.prompt} (last assistant turn)"}
        if self.input:
            d["input"] = self.input
        if self.system:
            d["system"] = self.system
        return d


FIX_HINT = (f"pass --format {{{','.join(FORMATS)}}} if the columns have other names, "
            "or --prompt-field COLUMN --response-field COLUMN")


def detect_format(columns) -> str | None:
    """The format whose columns are present, or None."""
    cols = set(columns)
    for entry in sorted(FORMAT, key=lambda e: e.detect_order):
        if entry.value in cols and (entry.response is None or set(entry.response) & cols):
            return entry.name
    return None


def resolve_fields(columns, fmt: str | None, prompt_field: str | None, response_field: str | None,
                   source: str = "dataset") -> FieldMap:
    """The field mapping for these columns: detected, or forced by the user's options. Raises CurateError with a
    one-line message (columns found + the flags that would fix it) when nothing fits."""
    from cluster_curate.errors import CurateError

    cols = list(columns)
    colset = set(cols)
    shown = ", ".join(cols) if len(cols) <= 30 else ", ".join(cols[:30]) + f", ... ({len(cols)} columns)"
    if fmt is None:
        fmt = detect_format(colset)
        if fmt is None:
            if prompt_field and response_field:
                fmt = "prompt-completion"  # a custom pair of columns behaves like prompt/completion
            else:
                raise CurateError(f"{source}: unrecognised record format; columns found: [{shown}]. {FIX_HINT}")
    if fmt not in FORMATS:
        raise CurateError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")

    entry = FORMAT.get(fmt)
    if entry.response is None:
        conv = prompt_field or response_field or entry.value
        if conv not in colset:
            raise CurateError(f"{source}: format {fmt} needs a conversation column {conv!r}; columns found: "
                              f"[{shown}]. Pass --prompt-field COLUMN naming the column that holds the turns")
        return FieldMap(fmt, conv)

    prompt = prompt_field or entry.value
    if response_field:
        response = response_field
    else:
        response = next((c for c in entry.response if c in colset), entry.response[0])
    missing = [c for c in (prompt, response) if c not in colset]
    if missing:
        which = " and ".join(repr(c) for c in missing)
        raise CurateError(f"{source}: format {fmt} needs column {which}, not found; columns found: [{shown}]. "
                          "Pass --prompt-field COLUMN --response-field COLUMN")
    input_field = "input" if fmt == "alpaca" and "input" in colset and prompt != "input" else None
    system = "system" if "system" in colset and "system" not in (prompt, response) else None
    return FieldMap(fmt, prompt, response, input_field, system)


# ----------------------------------------------------------------------------------------------- records

def _text(value, field: str, what: str, required: bool = True) -> str:
    """A text field: str kept, numbers turned into text, anything else an error."""
    if value is None:
        if required:
            raise RecordError(field, f"missing {what}")
        return ""
    if isinstance(value, bool):
        raise RecordError(field, f"{what} is a boolean, expected text")
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        raise RecordError(field, f"{what} is a {type(value).__name__}, expected text")
    if required and not value.strip():
        raise RecordError(field, f"empty {what}")
    return value


def _content(value, field: str) -> str | None:
    """Message content: a string, or OpenAI's list of parts ([{"type": "text", "text": ...}])."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "".join(texts)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise RecordError(field, f"message content is a {type(value).__name__}, expected text")


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                   "system": "system", "tool": "tool", "function": "tool", "observation": "tool",
                   "function_call": "assistant"}


def _turns(value, field: str, fmt: str) -> list[dict]:
    if isinstance(value, str):  # e.g. a CSV column holding JSON
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RecordError(field, f"conversation is text that is not valid JSON ({e.msg})") from None
    if value is None:
        raise RecordError(field, "missing conversation")
    if not isinstance(value, (list, tuple)):
        raise RecordError(field, f"conversation is a {type(value).__name__}, expected a list of turns")
    turns = []
    for i, t in enumerate(value):
        if not isinstance(t, dict):
            raise RecordError(f"{field}[{i}]", f"turn is a {type(t).__name__}, expected an object")
        if fmt == "sharegpt" and "from" in t:
            speaker = t.get("from")
            role = _SHAREGPT_ROLES.get(str(speaker).lower())
            if role is None:
                raise RecordError(f"{field}[{i}].from", f"unknown speaker {speaker!r} (expected human, gpt or system)")
            content = _content(t.get("value"), f"{field}[{i}].value")
        else:
            role = t.get("role")
            if not isinstance(role, str):
                raise RecordError(f"{field}[{i}].role", "turn has no role")
            role = _SHAREGPT_ROLES.get(role.lower(), role.lower()) if fmt == "sharegpt" else role
            content = _content(t.get("content"), f"{field}[{i}].content")
        turns.append({"role": role, "content": "" if content is None else content})
    return turns


def _conversation(rec: dict, fields: FieldMap):
    conv = fields.prompt
    turns = _turns(rec.get(conv), conv, fields.format)
    last = max((i for i, t in enumerate(turns) if t["role"] == "assistant"), default=None)
    if last is None:
        raise RecordError(conv, "missing response: no assistant turn in the conversation")
    response = turns[last]["content"]
    if not response.strip():
        raise RecordError(f"{conv}[{last}]", "empty response (the last assistant turn is empty)")
    prompt = turns[:last]
    if not prompt or prompt[-1]["role"] != "user":
        raise RecordError(conv, "no user turn right before the last assistant turn")
    return prompt, response


def to_example(rec: dict, fields: FieldMap):
    """(prompt turns, response) for one record, or RecordError."""
    if FORMAT.get(fields.format).response is None:
        return _conversation(rec, fields)
    response = _text(rec.get(fields.response), fields.response, "response")
    prompt = _text(rec.get(fields.prompt), fields.prompt, "prompt", required=fields.input is None)
    if fields.input:
        extra = _text(rec.get(fields.input), fields.input, "input", required=False)
        if extra.strip():
            prompt = f"{prompt}\n\n{extra}" if prompt.strip() else extra
        if not prompt.strip():
            raise RecordError(fields.prompt, "empty prompt")
    turns = []
    if fields.system:
        system = _text(rec.get(fields.system), fields.system, "system prompt", required=False)
        if system.strip():
            turns.append({"role": "system", "content": system})
    turns.append({"role": "user", "content": prompt})
    return turns, response
