"""A conversation's turns: a column of chat turns (OpenAI `messages`, ShareGPT `conversations`, TRL's conversational
prompt and completion) read as {role, content} turns, and the example they make.

Context turns keep their role as written (a `tool` turn stays `tool`); ShareGPT speakers are mapped to roles
(`_SHAREGPT_ROLES`), and LIMA's `conversations`, a list of plain texts, are the user's and the assistant's turns in
turn. A conversation's example is its turns before the last assistant turn and that turn's text (`split_turns`).
Questions alone (io/formats.py's docstring): a conversation that awaits its answer (`asked_question`), a `turns`
column of the user's questions (`question_turns`), BFCL's lists of turns (`nested_turns`).
"""

from __future__ import annotations

import json
import math

from cluster_curate.io.fields import ColumnsHint
from cluster_curate.io.formats import FieldMap, RecordError, field_text, field_value, json_text, kind_of
from cluster_curate.io.tool_calls import (TOOL_RESULT_ROLES, calls_text, openai_message, turn_tool_calls,
                                          with_tool_schemas)


def _content(value, field: str) -> str | None:
    """Message content: a string, or OpenAI's list of parts ([{"type": "text", "text": ...}])."""
    if isinstance(value, float) and math.isnan(value):
        return None  # pandas' missing value (NaN), not the text "nan"
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
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isinf(value):
        return str(value)
    raise RecordError(field, f"message content is {value!r}, expected text" if isinstance(value, float) else
                      f"message content is a {type(value).__name__}, expected text")


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                   "system": "system", "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool",
                   "function_call": "assistant"}


def _listed(value, field: str, what: str, items: str, all_text: bool = False) -> list:
    """A list, or its JSON text (a CSV column holding JSON; `all_text`: any text is read as JSON, else text that
    opens a list); a RecordError naming `what` when it is missing, not valid JSON or no list (of `items`)."""
    if isinstance(value, str) and (all_text or value.lstrip().startswith("[")):
        if not value.lstrip().startswith(("[", "{")):  # a prompt's column named for the turns' (one flag given)
            shown = value if len(value) <= 40 else value[:37] + "..."
            raise RecordError(field, f"{what} is plain text ({shown!r}), not a list of {items}")
        try:
            value = json_text(value, field)
        except json.JSONDecodeError as e:
            raise RecordError(field, f"{what} is text that is not valid JSON ({e.msg})") from None
    if value is None:
        raise RecordError(field, f"missing {what}")
    if not isinstance(value, (list, tuple)):
        raise RecordError(field, f"{what} is {kind_of(value)}, expected a list of {items}")
    return value


def parsed_turns(value, field: str, fmt: str, messages: bool = False) -> list[tuple[str, str, dict | None]]:
    """(role, text, message) per turn: the text is what the pipeline reads (an assistant turn's content, then its
    tool calls one per line), the message what a trainer gets (`openai_message`; with `messages` only, since every
    row's reading would pay for it)."""
    value = _listed(value, field, "conversation", "turns", all_text=True)
    if fmt == "sharegpt" and value and all(isinstance(t, str) for t in value):
        value = _alternating_turns(value)
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
            if role == "assistant" and str(speaker).lower() == "function_call" and content and "\\u" in content:
                try:  # LLaMA-Factory's call as JSON text, which a trainer's turns parse (openai_message)
                    json_text(content, f"{field}[{i}].value")
                except json.JSONDecodeError:
                    pass  # text that is no JSON stays text there
        else:
            role = t.get("role")
            if not isinstance(role, str):
                # ShareGPT speakers (from/value) under a `messages` column: the sharegpt format reads them
                raise RecordError(f"{field}[{i}].role", "turn has no role",
                                  *((" (", *_sharegpt_hint(field, "from/value"), ")")
                                    if fmt == "messages" and "from" in t else ()))
            role = _SHAREGPT_ROLES.get(role.lower(), role.lower()) if fmt == "sharegpt" else role
            content = _content(t.get("content"), f"{field}[{i}].content")
        # most turns call no tool: their text is their content
        called = t.get("tool_calls") is not None or t.get("function_call") is not None
        parsed = turn_tool_calls(t, f"{field}[{i}]") if called else []
        text = "\n".join(x for x in (content, calls_text(parsed)) if x) if parsed else content or ""
        turns.append((role, text, openai_message(t, role, content, parsed) if messages else None))
    return turns


def _sharegpt_hint(conv: str, keys: str = "") -> tuple:
    """A RecordError's parts saying that ShareGPT speakers (`keys`: how they are written, when not under `role`)
    are read by the sharegpt format, with `conv` the conversation column."""
    return (f"ShareGPT speakers{' as ' + keys if keys else ''}: ",
            ColumnsHint((("prompt", conv),), format="sharegpt"))


def _alternating_turns(texts) -> list[dict]:
    """LIMA's `conversations`, a list of plain texts: the user's and the assistant's in turn, the user first, as
    ShareGPT turns."""
    return [{"from": "gpt" if i % 2 else "human", "value": text} for i, text in enumerate(texts)]


def chat_turns(value, field: str, fmt: str) -> list[dict]:
    return [{"role": role, "content": text} for role, text, _ in parsed_turns(value, field, fmt)]


def with_system_column(turns: list, rec: dict, fields: FieldMap, message=None) -> list:
    """A conversation's turns with the record's `system` column as their first turn (when it holds text). A
    conversation that opens with a system turn of its own keeps it; a different text in the column is an error
    rather than one of the two dropped. `message(role, text)` makes the turn (default: {role, content})."""
    if not fields.system:
        return turns
    system = field_text(rec.get(fields.system), fields.system, "system prompt", required=False)
    if not system.strip():
        return turns
    if turns and _role(turns[0]) == "system":
        if _content_of(turns[0]).strip() != system.strip():
            raise RecordError(fields.system, f"a system prompt, and {fields.prompt} opens with a different system "
                                             "turn: which one is the record's is unclear")
        return turns
    return [(message or (lambda r, c: {"role": r, "content": c}))("system", system), *turns]


def _role(turn) -> str:
    return turn[0] if isinstance(turn, tuple) else turn["role"]


def _content_of(turn) -> str:
    return turn[1] if isinstance(turn, tuple) else turn["content"]


def conversation_example(rec: dict, fields: FieldMap):
    conv = fields.prompt
    turns = with_system_column(chat_turns(field_value(rec, conv), conv, fields.format), rec, fields)
    prompt, response = split_turns(turns, conv)
    return with_tool_schemas(prompt, rec, fields), response


def is_turn_list(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, dict) for t in value)


def conversational_pair(prompt, completion, fields: FieldMap):
    """TRL's conversational prompt-completion (what `export --for trl` writes): `prompt` a list of turns ending
    with a user turn, `completion` a list of turns holding the assistant's answer (its last assistant turn)."""
    turns = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
             else chat_turns(prompt, fields.prompt, "messages"))
    done = len(turns)
    turns += chat_turns(completion, fields.response, "messages")
    if not any(t["role"] == "assistant" for t in turns[done:]):
        raise RecordError(fields.response, "missing response: no assistant turn in the completion")
    return split_turns(turns, fields.prompt)


def last_assistant_index(turns: list[dict]) -> int | None:
    return max((i for i, t in enumerate(turns) if t["role"] == "assistant"), default=None)


def split_turns(turns: list[dict], conv: str, turn_field=None):
    """(the turns before the last assistant turn, its text): the example of a conversation. The prompt holds a
    user turn and ends with one, or with a tool's result (the model answers it); the response may be a tool call
    alone (the model learns to call the tool). `turn_field(i)` names turn i in an error (default `conv[i]`)."""
    last = last_assistant_index(turns)
    if last is None:
        roles = list(dict.fromkeys(t["role"] for t in turns))
        # ShareGPT speakers (human/gpt) under `role`: the sharegpt format maps them, the messages format does not
        hint = (("; ", *_sharegpt_hint(conv))
                if any(_SHAREGPT_ROLES.get(r.lower()) == "assistant" for r in roles) else ())
        raise RecordError(conv, "missing response: no assistant turn in the conversation",
                          *((f" (roles: {', '.join(roles)}", *hint, ")") if roles else ()))
    response = turns[last]["content"]
    if not response.strip():
        raise RecordError(turn_field(last) if turn_field else f"{conv}[{last}]",
                          "empty response (the last assistant turn is empty)")
    prompt = turns[:last]
    if not prompt:
        raise RecordError(conv, "no user turn before the last assistant turn (it is the first turn)")
    if prompt[-1]["role"] != "user" and prompt[-1]["role"] not in TOOL_RESULT_ROLES:
        raise RecordError(conv, f"no user or tool turn right before the last assistant turn (it follows a "
                                f"{prompt[-1]['role']!r} turn)")
    if not any(t["role"] == "user" for t in prompt):
        roles = ", ".join(dict.fromkeys(t["role"] for t in prompt))
        raise RecordError(conv, f"no user turn before the last assistant turn (roles before it: {roles})")
    require_prompt_text(prompt, conv)
    return prompt, response


def require_prompt_text(prompt: list[dict], field: str) -> None:
    """A prompt's user and system turns must hold some text, as a text prompt must (`field_text`): turns that are
    empty, null or hold no text parts (an image alone) ask nothing. One empty turn among others is no error."""
    if not any(t["content"].strip() for t in prompt
               if t["role"] != "assistant" and t["role"] not in TOOL_RESULT_ROLES):
        raise RecordError(field, "empty prompt (no text in its user turns)")


def question_turns(value, field: str) -> list[dict]:
    """A `turns` column (formats.TURNS): the user's questions in order, each text or {content: text}, as user turns."""
    value = _listed(value, field, "turns", "questions")
    if not value:
        raise RecordError(field, "no question (the list of turns is empty)")
    turns = []
    for i, t in enumerate(value):
        where = f"{field}[{i}]"
        if isinstance(t, dict):
            if t.get("role", "user") != "user":
                raise RecordError(f"{where}.role", f"a turn of role {t.get('role')!r}: `turns` holds the user's "
                                                   "questions (a conversation goes in a `messages` column)")
            t, where = t.get("content"), f"{where}.content"
        turns.append({"role": "user", "content": field_text(t, where, "question")})
    return turns


def is_nested_turns(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, (list, tuple)) for t in value)


def nested_turns(value, field: str) -> list[dict]:
    """BFCL's `question`: one list of {role, content} turns per turn of a multi-turn test (empty where the test
    adds a function instead), read as one conversation."""
    return [t for i, inner in enumerate(value) for t in chat_turns(inner, f"{field}[{i}]", "messages")]


def asked_question(turns: list[dict], conv: str):
    """Questions alone: (the question a conversation asks, no response). All of it when it ends with a user turn
    or a tool's result (an evaluation set's chat awaiting its answer; an empty last assistant turn is that slot),
    else its prompt as an example's (the turns before the last assistant turn)."""
    if turns and turns[-1]["role"] == "assistant" and not turns[-1]["content"].strip():
        turns = turns[:-1]
    if turns and turns[-1]["role"] in TOOL_RESULT_ROLES and any(t["role"] == "user" for t in turns):
        return turns, ""  # awaiting the answer to a tool's result: all of it is the question, as a prompt may end
    if not turns or turns[-1]["role"] != "user":
        if not any(t["role"] == "user" for t in turns):
            roles = ", ".join(dict.fromkeys(t["role"] for t in turns))
            raise RecordError(conv, "no question: no user turn in the conversation"
                              + (f" (roles: {roles})" if roles else " (it is empty)"))
        return split_turns(turns, conv)
    if not turns[-1]["content"].strip():
        raise RecordError(f"{conv}[{len(turns) - 1}]", "empty question (the last user turn is empty)")
    return turns, ""
