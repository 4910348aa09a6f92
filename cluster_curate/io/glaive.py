"""glaiveai/glaive-function-calling-v2's rows read as the OpenAI chat they transcribe (format `glaive`).

A row has two text columns:

    system  "SYSTEM: You are a helpful assistant with access to the following functions. Use them if required -\n"
            followed by zero, one or several pretty-printed JSON tool schemas, one after another
    chat    "USER: ...\n\n\nASSISTANT: <functioncall> {"name": "f", "arguments": '{"a": 1}'} <|endoftext|>\n\n\n"
            "FUNCTION RESPONSE: {...}\n\n\nASSISTANT: ... <|endoftext|>\n\n\nUSER: ..."

`openai_record` gives the record an OpenAI-messages input would hold for the same conversation: `messages` (the
system prompt without its schemas, then user, assistant and tool turns; a `<functioncall>` is the assistant turn's
`tool_calls`, its arguments the JSON text it quotes) and `tools` (the schemas). io/records.py reads
that record as `messages`, so an example, its trainer turns and its exports are an OpenAI chat's.
"""

from __future__ import annotations

import json
import re

from cluster_curate.io.formats import FieldMap, RecordError, field_value, lone_surrogate

# A speaker opens a turn at the start of the transcript or after a blank line, as the dataset writes it.
_SPEAKER = re.compile(r"(?:\A\s*|\n\s*\n)(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]*")
_ROLES = {"USER": "user", "ASSISTANT": "assistant", "FUNCTION RESPONSE": "tool"}
_END = "<|endoftext|>"  # closes an assistant turn: the model's end of text, no part of what it says
_CALL = "<functioncall>"
_SCHEMA = re.compile(r"^\{", re.MULTILINE)  # each schema is pretty-printed from the start of a line
# {"name": "...", "arguments": '...'}: the arguments are JSON text in single quotes, which makes the call no JSON
_QUOTED_CALL = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*\'(.*)\'\s*\}', re.DOTALL)


def openai_record(rec: dict, fields: FieldMap) -> tuple[dict, FieldMap]:
    """(the OpenAI-messages record of a glaive row, the fields that read it); RecordError naming `system` or
    `chat` (and the turn) for a transcript or a call that cannot be read."""
    system, tools = _system(rec.get(fields.system) if fields.system else None, fields.system)
    turns = [{"role": "system", "content": system}] if system else []
    turns += _chat(field_value(rec, fields.prompt), fields.prompt)
    return ({"messages": turns, "tools": tools},
            FieldMap("messages", "messages", prompts_only=fields.prompts_only, tools="tools"))


def _system(value, field: str | None) -> tuple[str, list | None]:
    """The system prompt's own text and its tool schemas (None without any)."""
    if value is None:
        return "", None
    if not isinstance(value, str):
        raise RecordError(field, f"system prompt is not text ({type(value).__name__})")
    text = value.strip().removeprefix("SYSTEM:").strip()
    first = _SCHEMA.search(text)
    if first is None:  # "with no access to external functions."
        return text, None
    own, tools, decoder, at = text[: first.start()].strip(), [], json.JSONDecoder(), first.start()
    while at < len(text):
        try:
            schema, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as e:
            raise RecordError(field, f"tool schema {len(tools) + 1} is not valid JSON ({e.msg} at character "
                                     f"{e.pos})") from None
        if not isinstance(schema, dict):
            raise RecordError(field, f"tool schema {len(tools) + 1} is {type(schema).__name__}, expected an object")
        found = lone_surrogate(schema)  # the schemas are JSON text the system prompt holds, parsed here
        if found:
            at_where = f", at {found[0]}," if found[0] else ""
            raise RecordError(field, f"tool schema {len(tools) + 1} holding{at_where} {found[1]}")
        tools.append(schema)
        while at < len(text) and text[at].isspace():
            at += 1
    return own, tools


def _chat(value, field: str) -> list[dict]:
    """The transcript's turns as OpenAI messages."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise RecordError(field, "missing conversation")
    if not isinstance(value, str):
        raise RecordError(field, f"conversation is {type(value).__name__}, expected a USER: / ASSISTANT: transcript")
    parts = _SPEAKER.split(value)  # text before the first speaker, then speaker, text, speaker, text, ...
    if parts[0].strip() or len(parts) == 1:
        raise RecordError(field, "text before the first turn: a transcript opens with USER: (or ASSISTANT: or "
                                 "FUNCTION RESPONSE:)")
    turns = []
    for k in range(1, len(parts), 2):
        role, text = _ROLES[parts[k]], parts[k + 1].strip()
        where = f"{field}[{len(turns)}]"
        if role != "assistant":
            turns.append({"role": role, "content": text})
            continue
        text = text.removesuffix(_END).rstrip()
        said, _, call = text.partition(_CALL)
        turn = {"role": "assistant", "content": said.strip() or (None if call else "")}
        if call:
            turn["tool_calls"] = [{"type": "function", "function": _call(call.strip(), where)}]
        turns.append(turn)
    return turns


def _call(text: str, where: str) -> dict:
    """A `<functioncall>`'s {name, arguments}: JSON, or JSON whose arguments are JSON text in single quotes."""
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        quoted = _QUOTED_CALL.fullmatch(text)
        if quoted is None:
            raise RecordError(where, f"a <functioncall> that is not {{\"name\": ..., \"arguments\": ...}}: "
                                     f"{_clipped(text)}") from None
        call = {"name": json.loads(quoted.group(1)), "arguments": quoted.group(2)}
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"].strip():
        raise RecordError(where, f"a <functioncall> without a name: {_clipped(text)}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # kept as the JSON text it is, as an OpenAI call's arguments are
        arguments = arguments.replace("\\'", "'")  # a quote inside the single-quoted text is written \'
        try:
            json.loads(arguments)
        except json.JSONDecodeError as e:
            raise RecordError(where, f"the <functioncall>'s arguments are not valid JSON ({e.msg}): "
                                     f"{_clipped(arguments)}") from None
    return {"name": call["name"], "arguments": arguments}


def _clipped(text: str, width: int = 80) -> str:
    return repr(text if len(text) <= width else text[: width - 3] + "...")
