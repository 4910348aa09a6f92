"""Preference pairs (format `preference`, io/formats.py): a record's prompt turns, chosen answer and rejected answer.

    explicit prompt   a prompt column (text, or a list of turns) beside the two answers, each text or a list of
                      turns whose last assistant turn it is; a chosen column that holds the whole conversation beside
                      it (UltraFeedback, Capybara) gives the prompt (`_whole_pair`)
    implicit prompt   no prompt column: chosen and rejected each hold the whole conversation, as `messages` is read,
                      or an Anthropic HH transcript (Human: / Assistant: turns); the turns before the last assistant
                      turn are the prompt, which the two share
    labelled pair     a label column names the chosen answer row by row (`labelled_fields`: 1 or true, the response
                      column's; 0 or false, the rejected column's)
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from cluster_curate.io.fields import ColumnsHint
from cluster_curate.io.formats import FieldMap, RecordError, field_text, field_value
from cluster_curate.io.tool_calls import TOOL_RESULT_ROLES, with_tool_schemas
from cluster_curate.io.turns import chat_turns, is_turn_list, require_prompt_text, split_turns


def _answer(value, field: str) -> str:
    """A preference response given beside its prompt: text, or a list of turns whose last assistant turn it is."""
    if is_turn_list(value) or (isinstance(value, str) and value.lstrip().startswith("[{")):
        turns = chat_turns(value, field, "messages")
        said = [i for i, t in enumerate(turns) if t["role"] == "assistant"]
        if not said:
            raise RecordError(field, "missing response: no assistant turn")
        if not turns[said[-1]]["content"].strip():
            raise RecordError(f"{field}[{said[-1]}]", "empty response (the last assistant turn is empty)")
        return turns[said[-1]]["content"]
    return field_text(value, field, "response")


def _asking_turns(value, field: str) -> list[dict] | None:
    """A preference answer's turns when they hold the user's turns too (the whole conversation), else None."""
    if not (is_turn_list(value) or (isinstance(value, str) and value.lstrip().startswith("[{"))):
        return None
    turns = chat_turns(value, field, "messages")
    return turns if any(t["role"] == "user" for t in turns) else None


def _whole_pair(chosen: list[dict], asked, rejected_value, fields: FieldMap, rec: dict):
    """A pair whose `chosen` holds the whole conversation although a prompt column is given (UltraFeedback
    binarized: the question and its answer; Capybara DPO: several turns, the prompt column the first question):
    the prompt is chosen's turns before its last answer, not the prompt column alone (the turns between them
    would be lost, the answer set against the wrong question). The prompt column must be its first question;
    a rejected conversation must share its prompt."""
    prompt, response = split_turns(chosen, fields.response)
    first = next(t["content"] for t in prompt if t["role"] == "user")
    given = (next((t["content"] for t in chat_turns(asked, fields.prompt, "messages") if t["role"] == "user"), "")
             if is_turn_list(asked) else field_text(asked, fields.prompt, "prompt", parts=True))
    if " ".join(given.split()) != " ".join(first.split()):
        raise RecordError(fields.prompt, f"differs from the first user turn of {fields.response} (which holds the "
                                         "whole conversation): which one is the question is unclear")
    if fields.system and prompt[0]["role"] != "system":
        system = field_text(rec.get(fields.system), fields.system, "system prompt", required=False)
        prompt = [{"role": "system", "content": system}, *prompt] if system.strip() else prompt
    other = _asking_turns(rejected_value, fields.rejected)
    if other is None:
        return prompt, response, _answer(rejected_value, fields.rejected)
    before, rejected = split_turns(other, fields.rejected)
    if before != [t for t in prompt if t["role"] != "system"] and before != prompt:
        raise RecordError(fields.rejected, f"its turns before the last assistant turn differ from "
                                           f"{fields.response}'s (a preference pair answers one prompt)")
    return prompt, response, rejected


_TEXT_LABELS = {"1": 1, "true": 1, "0": 0, "false": 0}


def labelled_fields(rec: dict, fields: FieldMap) -> FieldMap:
    """A preference record's fields in the order of its label (`fields.label`; then None): 1 or true, the response
    column's answer (the conversation column's, without a prompt column) is the chosen one; 0 or false, the
    rejected column's is, and the two columns swap; as numbers, booleans or their text. Any other label is a
    RecordError."""
    if not fields.label:
        return fields
    value = field_value(rec, fields.label)
    chosen = "response" if fields.response else "prompt"
    if isinstance(value, str):  # a CSV's columns are text: pandas writes a float column's 1 as 1.0
        text = value.strip().lower()
        value = _TEXT_LABELS.get(re.sub(r"^([01])\.0*$", r"\1", text), value)
    if isinstance(value, (bool, int, float)) and value in (0, 1):
        if value:
            return replace(fields, label=None)
        return replace(fields, label=None, rejected=getattr(fields, chosen), **{chosen: fields.rejected})
    raise RecordError(fields.label, f"label {json.dumps(value, default=str)}: expected 1 ({getattr(fields, chosen)} "
                                    f"is the chosen answer) or 0 ({fields.rejected} is)")


def to_preference(rec: dict, fields: FieldMap):
    """(prompt turns, chosen response, rejected response) for one preference record, or RecordError. The
    record's tool schemas (a `tools` column, as TRL's DPOTrainer reads it) are rendered into the prompt's system
    turn, as `records.to_example` renders them. A labelled pair in the order of its label (`labelled_fields`)."""
    fields = labelled_fields(rec, fields)
    prompt, chosen, rejected = _preference_pair(rec, fields)
    return with_tool_schemas(prompt, rec, fields), chosen, rejected


def rejected_answer(rec: dict, fields: FieldMap):
    """A preference record's rejected answer as given (text or turns); missing or empty is a RecordError."""
    value = field_value(rec, fields.rejected)
    if value is None or (isinstance(value, (str, list, tuple)) and not value):
        raise RecordError(fields.rejected, "missing rejected response")
    return value


# Anthropic HH-RLHF's transcripts: "\n\nHuman: ...\n\nAssistant: ...". A speaker's name opens a turn only after a
# blank line, as the dataset writes it: "Human:" elsewhere in a text is part of that text.
_TRANSCRIPT_TURN = re.compile(r"\n\n(Human|Assistant):")
_TRANSCRIPT_ROLES = {"Human": "user", "Assistant": "assistant"}
_TRANSCRIPT_SPEAKERS = {role: speaker for speaker, role in _TRANSCRIPT_ROLES.items()}


def _is_transcript(value) -> bool:
    return isinstance(value, str) and value.lstrip().startswith("Human:") and "\n\nAssistant:" in value


def _transcript_turns(text: str) -> list[dict]:
    """An HH transcript's turns, {role, content}, each text without the spaces around it (the one after the
    speaker's colon, a trailing newline): what a chat template renders."""
    parts = _TRANSCRIPT_TURN.split("\n\n" + text.lstrip())  # "", speaker, text, speaker, text, ...
    return [{"role": _TRANSCRIPT_ROLES[parts[i]], "content": parts[i + 1].strip()} for i in range(1, len(parts), 2)]


def _conversation_turns(value, field: str, fmt: str):
    """An implicit-prompt answer's whole conversation: (chat turns, or an HH transcript's, and how an error names
    turn i: `chosen[3]` in a list, its number and speaker in a transcript, whose text has no indices)."""
    if isinstance(value, str) and not value.lstrip().startswith("["):
        value = value.replace("\r\n", "\n")  # CRLF line ends (a file that went through Windows tools): the LF form
        if not _is_transcript(value):
            raise RecordError(field, "plain text with no prompt column to answer: add a `prompt` column (or ",
                              ColumnsHint((("prompt", "COLUMN"),)), "), or give chosen and rejected as lists of chat "
                              "turns or as Anthropic HH transcripts (each turn opened by a blank line and Human: or "
                              "Assistant:)")
        turns = _transcript_turns(value)
        return turns, lambda i: f"{field} (transcript turn {i + 1}: {_TRANSCRIPT_SPEAKERS[turns[i]['role']]})"
    return chat_turns(value, field, fmt), None


def _preference_pair(rec: dict, fields: FieldMap):
    if fields.response is None:  # implicit prompt: two whole conversations that share their prompt
        turns, turn_field = _conversation_turns(field_value(rec, fields.prompt), fields.prompt, fields.format)
        prompt, response = split_turns(turns, fields.prompt, turn_field)
        turns, turn_field = _conversation_turns(rejected_answer(rec, fields), fields.rejected, "messages")
        other, rejected = split_turns(turns, fields.rejected, turn_field)
        if other != prompt:
            raise RecordError(fields.rejected, "its turns before the last assistant turn differ from chosen's (a "
                                               "preference pair answers one prompt)")
        return prompt, response, rejected
    value = rejected_answer(rec, fields)
    raw = field_value(rec, fields.prompt)
    whole = _asking_turns(field_value(rec, fields.response), fields.response)
    if whole is not None:  # chosen is the whole conversation beside its prompt column (UltraFeedback, Capybara)
        return _whole_pair(whole, raw, value, fields, rec)
    rejected = _answer(value, fields.rejected)
    response = _answer(field_value(rec, fields.response), fields.response)
    if is_turn_list(raw):
        prompt = chat_turns(raw, fields.prompt, "messages")
        # as a conversation's prompt (split_turns): it may end with a tool's result, which the answers answer
        if not prompt or (prompt[-1]["role"] != "user" and prompt[-1]["role"] not in TOOL_RESULT_ROLES):
            raise RecordError(fields.prompt, "the prompt's turns do not end with a user or tool turn")
        if not any(t["role"] == "user" for t in prompt):
            raise RecordError(fields.prompt, "the prompt's turns hold no user turn")
        require_prompt_text(prompt, fields.prompt)
    else:
        prompt = [{"role": "user", "content": field_text(raw, fields.prompt, "prompt", parts=True)}]
        if fields.system:
            system = field_text(rec.get(fields.system), fields.system, "system prompt", required=False)
            if system.strip():
                prompt.insert(0, {"role": "system", "content": system})
    return prompt, response, rejected
