"""A record as the pipeline's example and as a trainer's chat turns: the entry points of the formats (io/formats.py).

    to_example           (prompt turns, response): what the commands read of a row (io/datasets.py's Example)
    chat_messages        that example as a trainer's chat template reads it: tool calls kept structured (OpenAI
                         style), the tool schemas beside the turns (export's chat layouts: layouts.py)
    preference_messages  a preference pair so: (prompt turns, chosen answer, rejected answer, tool schemas)

Each reads a record through the module of its kind: turns.py (conversations, questions alone), preference.py
(pairs; `to_preference` is the pipeline's reading of one), tool_calls.py (xLAM's calls, the tool schemas),
glaive.py (a glaive row, read as the OpenAI chat it transcribes). A bad record raises RecordError.
"""

from __future__ import annotations

from cluster_curate.io.formats import FORMAT, TURNS, FieldMap, RecordError, field_text, field_value
from cluster_curate.io.glaive import openai_record
from cluster_curate.io.preference import labelled_fields, rejected_answer, to_preference
from cluster_curate.io.tool_calls import (answer_calls, calls_text, openai_message, tool_schemas, with_tool_schemas,
                                          without_tool_schemas)
from cluster_curate.io.turns import (asked_question, chat_turns, conversation_example, conversational_pair,
                                     is_nested_turns, is_turn_list, last_assistant_index, nested_turns, parsed_turns,
                                     question_turns, with_system_column)


def to_example(rec: dict, fields: FieldMap):
    """(prompt turns, response) for one record, or RecordError. Questions alone (`fields.prompts_only`): the
    response may be missing or empty (then "")."""
    if fields.format == TURNS:
        return question_turns(field_value(rec, fields.prompt), fields.prompt), ""
    if fields.format == "glaive":
        return _as_openai(to_example, rec, fields)
    if fields.rejected:
        return to_preference(rec, fields)[:2]
    if FORMAT.get(fields.format).response is None:
        if fields.prompts_only:
            conv = fields.prompt
            turns = with_system_column(chat_turns(field_value(rec, conv), conv, fields.format), rec, fields)
            return asked_question(turns, conv)
        return conversation_example(rec, fields)
    value = None if fields.response is None else field_value(rec, fields.response)
    if fields.format == "prompt-completion" and is_turn_list(value) and not fields.prompt_extra:
        prompt, response = conversational_pair(field_value(rec, fields.prompt), value, fields)
        return with_tool_schemas(prompt, rec, fields), response
    asked = (field_value(rec, fields.prompt) if fields.prompts_only and value in (None, "") and not fields.prompt_extra
             else None)
    if fields.format in ("prompt-completion", "qa") and is_nested_turns(asked):
        return asked_question(nested_turns(asked, fields.prompt), fields.prompt)
    if asked is not None and fields.format == "prompt-completion":
        if is_turn_list(asked):  # TRL's conversational prompt alone
            return asked_question(chat_turns(asked, fields.prompt, "messages"), fields.prompt)
        if isinstance(asked, (list, tuple)) and asked:  # the turns as a list of texts (the Hub's MT-Bench)
            return question_turns(asked, fields.prompt), ""
    if fields.format == "xlam" and not (fields.prompts_only and value in (None, "")):
        response = calls_text(answer_calls(value, fields.response))  # as an assistant turn's calls read
    else:
        response = field_text(value, fields.response or "response", "response", required=not fields.prompts_only)
    if fields.prompt_extra:
        texts = [field_text(field_value(rec, c), c, "prompt", required=False, parts=True)
                 for c in fields.prompt_columns]
        prompt = "\n\n".join(t for t in texts if t.strip())
        if not prompt and fields.input is None:
            raise RecordError(fields.prompt, "empty prompt (every prompt column is empty)")
    else:
        prompt = field_text(field_value(rec, fields.prompt), fields.prompt, "prompt", required=fields.input is None,
                       parts=True)
    if fields.input:
        try:  # optional: a row without the key (flat or nested) has no input
            extra = field_value(rec, fields.input)
        except RecordError:
            extra = None
        extra = field_text(extra, fields.input, "input", required=False)
        if extra.strip():
            prompt = f"{prompt}\n\n{extra}" if prompt.strip() else extra
        if not prompt.strip():
            raise RecordError(fields.prompt, "empty prompt")
    turns = []
    if fields.system:
        system = field_text(rec.get(fields.system), fields.system, "system prompt", required=False)
        if system.strip():
            turns.append({"role": "system", "content": system})
    turns.append({"role": "user", "content": prompt})
    return with_tool_schemas(turns, rec, fields), response


def chat_messages(rec: dict, fields: FieldMap) -> tuple[list[dict], list | None]:
    """The example of `to_example` as a trainer's chat template reads it: the prompt's turns, then the response's,
    each `openai_message` (OpenAI style: tool calls as `tool_calls`, a tool turn's `tool_call_id` and `name` kept), the
    system turn the record's own (the trainer renders the tool schemas itself); and the tool schemas (None
    without). Raises RecordError as to_example does."""
    if fields.rejected:  # a preference pair: its prompt, then its chosen answer
        prompt, chosen, _, tools = preference_messages(rec, fields)
        return prompt + [chosen], tools
    if fields.format == "glaive":
        return _as_openai(chat_messages, rec, fields)
    prompt, response = to_example(rec, fields)  # its checks
    tools = tool_schemas(rec, fields)
    if FORMAT.get(fields.format).response is None:
        parsed = with_system_column(parsed_turns(field_value(rec, fields.prompt), fields.prompt, fields.format,
                                                   messages=True),
                                     rec, fields, lambda r, c: (r, c, {"role": r, "content": c}))
    else:
        value = field_value(rec, fields.response)
        if fields.format == "prompt-completion" and is_turn_list(value) and not fields.prompt_extra:
            given = field_value(rec, fields.prompt)
            parsed = ([("user", given, {"role": "user", "content": given})] if isinstance(given, str)
                      else parsed_turns(given, fields.prompt, "messages", messages=True))
            parsed += parsed_turns(value, fields.response, "messages", messages=True)
        elif fields.format == "xlam":  # one prompt text, the calls as the answer's tool_calls
            calls = answer_calls(value, fields.response)
            return without_tool_schemas(prompt) + [openai_message({}, "assistant", None, calls)], tools
        else:  # one prompt text, one response text
            return without_tool_schemas(prompt) + [{"role": "assistant", "content": response}], tools
    last = last_assistant_index([{"role": role} for role, _, _ in parsed])
    return [message for _, _, message in parsed[: last + 1]], tools


def preference_messages(rec: dict, fields: FieldMap) -> tuple[list[dict], dict, dict, list | None]:
    """A preference pair of `to_preference` as `chat_messages` gives a trainer its turns: (prompt turns, chosen
    answer, rejected answer, tool schemas or None). Turns the record gives as turns are each `openai_message` (tool
    calls as `tool_calls`, a tool turn's `tool_call_id` and `name`: an answer may be a call); the others (text, an HH
    transcript) as `to_preference` reads them. Raises RecordError as to_preference does."""
    fields = labelled_fields(rec, fields)
    prompt, chosen, rejected = to_preference(rec, fields)  # its checks
    field = fields.response or fields.prompt
    answered = _given_turns(field_value(rec, field), field, fields.format if fields.response is None else "messages")
    if answered is not None and (fields.response is None or any(role == "user" for role, _, _ in answered)):
        asked = answered[: last_assistant_index([{"role": role} for role, _, _ in answered])]  # the whole conversation
    else:
        raw = field_value(rec, fields.prompt)
        asked = parsed_turns(raw, fields.prompt, "messages", messages=True) if is_turn_list(raw) else []
    # the turns before the record's own (a system column's turn) as read, the tool schemas taken out of them
    head = without_tool_schemas(prompt[: len(prompt) - len(asked)])
    return ([*head, *(message for _, _, message in asked)], _answer_message(answered, chosen),
            _answer_message(_given_turns(rejected_answer(rec, fields), fields.rejected, "messages"), rejected),
            tool_schemas(rec, fields))


def _given_turns(value, field: str, fmt: str) -> list[tuple[str, str, dict]] | None:
    """`parsed_turns` with their messages of a value given as turns (or their JSON text); None for text."""
    if is_turn_list(value) or (isinstance(value, str) and value.lstrip().startswith("[{")):
        return parsed_turns(value, field, fmt, messages=True)
    return None


def _answer_message(turns: list[tuple[str, str, dict]] | None, text: str) -> dict:
    """An answer's last assistant turn as an `openai_message` where it is given as turns, else its text as one."""
    if turns is None:
        return {"role": "assistant", "content": text}
    return turns[last_assistant_index([{"role": role} for role, _, _ in turns])][2]


def _as_openai(read, rec: dict, fields: FieldMap):
    """`read` (to_example, chat_messages) of a glaive row's OpenAI-messages record (io/glaive.py): what an OpenAI
    input of the same conversation gives. Its errors name the glaive column, not the record built from it."""
    record, as_messages = openai_record(rec, fields)
    try:
        return read(record, as_messages)
    except RecordError as e:
        raise RecordError(fields.prompt, *e.parts) from None
