"""Tool calling (any conversation format): a turn's tool calls, and the tool schemas of a record.

- an assistant turn's text is its content, then its tool calls one per line, each the JSON of {"name",
  "arguments"} (OpenAI `tool_calls[].function`, legacy `function_call`; arguments that are JSON text are
  parsed, so spacing does not matter); a ShareGPT `function_call` turn's value is the call text already;
- tool results (roles tool, function, ipython; ShareGPT observation) are context turns, and a prompt may end
  with one;
- a `tools` column (a list of schemas, or its JSON text; any format, found like `system`) is rendered into the
  system turn, as chat templates do (`with_tool_schemas`: that turn keeps the rendered text under `tools` as well).
`records.chat_messages` gives a trainer the same example with the calls kept structured (export's chat layouts:
`openai_message`). xLAM's answer is its list of calls (`answer_calls`), written as an assistant turn's calls are.
"""

from __future__ import annotations

import json

from cluster_curate.io.formats import FieldMap, RecordError, json_text, kind_of


# Turns that hold what a tool returned: a prompt may end with one (the model answers the tool's result).
TOOL_RESULT_ROLES = frozenset({"tool", "function", "ipython", "observation"})


def _call_arguments(value, field: str):
    """A call's arguments (`field`): JSON text parsed (so its spacing does not matter), objects without
    their null keys, anything else as given."""
    if isinstance(value, str):
        try:
            return json_text(value, field)
        except json.JSONDecodeError:
            return value
    return _without_nulls(value)


def _without_nulls(value):
    """Objects (at any depth) without their null keys: calls (or tool schemas) kept as Parquet / Arrow structs share
    one type, which holds every call's argument names, so a name another call has reads as null in this one (as a
    turn's `tool_calls` does, turn_tool_calls). Arguments given as JSON text keep their nulls."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_nulls(v) for v in value]
    return value


def turn_tool_calls(turn: dict, field: str) -> list[dict]:
    """A turn's tool calls, each {"name", "arguments"}: OpenAI's `tool_calls[].function` and its legacy
    `function_call`. A turn without either (or with null, as Arrow writes a key other turns have) has none."""
    given = []
    if turn.get("tool_calls") is not None:
        given += _listed_calls(turn["tool_calls"], f"{field}.tool_calls")
    if turn.get("function_call") is not None:
        given.append((f"{field}.function_call", turn["function_call"]))
    return [_call(where, call) for where, call in given]


def _listed_calls(calls, field: str) -> list[tuple[str, object]]:
    """(where, call) for each item of a list of calls, or of its JSON text (a CSV column, xLAM's answers)."""
    if isinstance(calls, str):
        try:
            calls = json_text(calls, field)
        except json.JSONDecodeError as e:
            raise RecordError(field, f"tool calls are text that is not valid JSON ({e.msg})") from None
    if not isinstance(calls, (list, tuple)):
        raise RecordError(field, f"tool calls are {kind_of(calls)}, expected a list of calls")
    return [(f"{field}[{j}]", c) for j, c in enumerate(calls)]


def _call(where: str, call) -> dict:
    """One call as {"name", "arguments"}: {name, arguments}, or OpenAI's {id, type, function: {name, arguments}}."""
    if isinstance(call, dict) and "function" in call:
        where, call = f"{where}.function", call["function"]
    if not isinstance(call, dict):
        raise RecordError(where, f"tool call is {kind_of(call)}, expected an object with a name and arguments")
    if not isinstance(call.get("name"), str) or not call["name"].strip():
        raise RecordError(where, "no name")
    return {"name": call["name"], "arguments": _call_arguments(call.get("arguments"), f"{where}.arguments")}


def answer_calls(value, field: str) -> list[dict]:
    """xLAM's answer: its list of calls (JSON text as the Hub keeps it), each {name, arguments}."""
    if value is None:
        raise RecordError(field, "missing response")
    calls = [_call(where, call) for where, call in _listed_calls(value, field)]
    if not calls:
        raise RecordError(field, NO_CALL)
    return calls


# MadeAgents/xlam-irrelevance-7.5k's rows (xLAM's, the right tool taken out of `tools`) answer "[]": call no tool.
# An OpenAI chat says that with a text reply; an assistant turn with an empty call list and no text is no message
# a chat template renders as such (Qwen's render an empty answer, Llama 3's and gpt-oss' raise), so a trainer
# would learn to end the turn at once. No faithful reading: the row is refused, saying how to give it one.
NO_CALL = ("an empty list of tool calls (an xLAM irrelevance row: no tool fits the query) has no chat form: chat "
           "templates render an assistant turn with no call and no text as an empty answer or refuse it, so a "
           "trainer would learn to say nothing; give such rows a text answer that says no tool fits (e.g. "
           "`messages` with the question and that reply, and `tools`)")


def calls_text(calls: list[dict]) -> str:
    """Tool calls as text, one JSON object per line: what the model learns to write, whatever the template."""
    return "\n".join(json.dumps(c, ensure_ascii=False) for c in calls)


def openai_message(turn: dict, role: str, content: str | None, parsed: list[dict]) -> dict:
    """A turn as a trainer's chat template reads it (OpenAI style): role, content, and where given `tool_calls`
    ({"type": "function", "function": {"name", "arguments"}}, arguments as JSON text: one Arrow type for every
    row), a tool turn's `tool_call_id` and `name`. A ShareGPT function_call turn's JSON becomes its calls.
    `parsed`: the turn's `turn_tool_calls`."""
    message = {"role": role, "content": content}
    calls = turn.get("tool_calls") if isinstance(turn.get("tool_calls"), (list, tuple)) else None
    if turn.get("from") == "function_call" and content:  # LLaMA-Factory: the call(s) as JSON text
        value = _call_arguments(content, "content")  # a lone surrogate in it is a bad row at read (turns.py)
        items = value if isinstance(value, list) else [value]
        if items and all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in items):
            parsed = [{"name": c["name"], "arguments": c.get("arguments")} for c in items]
            calls, message["content"] = None, None
    if parsed:
        ids = [c.get("id") if isinstance(c, dict) else None for c in calls or ()]
        message["tool_calls"] = [
            {**({"id": ids[j]} if j < len(ids) and isinstance(ids[j], str) else {}), "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                          else json.dumps(c["arguments"], ensure_ascii=False)}}
            for j, c in enumerate(parsed)]
    if message["content"] is None and not parsed:
        message["content"] = ""  # as to_example reads a null content
    for key in ("tool_call_id", "name") if role in TOOL_RESULT_ROLES else ():
        if isinstance(turn.get(key), str):
            message[key] = turn[key]
    return message


def tool_schemas(rec: dict, fields: FieldMap) -> list | None:
    """The record's tool schemas (a list, or its JSON text, as LLaMA-Factory keeps them), None without any. Given
    as objects, they lose their null keys: a Parquet struct column gives each schema every other's properties."""
    value = rec.get(fields.tools) if fields.tools else None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json_text(value, fields.tools)
        except json.JSONDecodeError as e:
            raise RecordError(fields.tools, f"tools are text that is not valid JSON ({e.msg})") from None
    else:
        value = _without_nulls(value)
    if isinstance(value, dict):  # one schema
        value = [value]
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise RecordError(fields.tools, f"tools are {kind_of(value)}, expected a list of tool schemas")
    return list(value) or None


def tools_text(tools: list) -> str:
    """Tool schemas as the system turn holds them: a chat template renders them into the system prompt, so the
    tokens the trainer sees include them (one JSON object per line, after a heading)."""
    return "# Tools\n\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


def with_tool_schemas(prompt: list[dict], rec: dict, fields: FieldMap) -> list[dict]:
    """The prompt with the record's tool schemas rendered into its system turn (after the system prompt, or in a
    system turn of their own). That turn keeps the rendered text under `tools` too, so that what the record's
    own system prompt says can be told from it (inspect counts system prompts)."""
    tools = tool_schemas(rec, fields)
    if not tools:
        return prompt
    text = tools_text(tools)
    if prompt and prompt[0]["role"] == "system":
        own = prompt[0]["content"]
        system = {"role": "system", "content": f"{own}\n\n{text}" if own.strip() else text, "tools": text}
        return [system, *prompt[1:]]
    return [{"role": "system", "content": text, "tools": text}, *prompt]


def own_system_prompt(turn: dict) -> str:
    """A system turn's text less the tool schemas `with_tool_schemas` rendered into it."""
    content, tools = turn["content"], turn.get("tools")
    return content[: -len(tools)].rstrip("\n") if tools and content.endswith(tools) else content


def without_tool_schemas(prompt: list[dict]) -> list[dict]:
    """The prompt's {role, content} turns with the record's own system prompt, the tool schemas `with_tool_schemas`
    rendered into it taken out (a trainer renders them from a `tools` column), and a system turn that held
    nothing else dropped."""
    own = [{"role": t["role"], "content": own_system_prompt(t) if "tools" in t else t["content"]} for t in prompt]
    return [t for t in own if t["role"] != "system" or t["content"].strip()]
