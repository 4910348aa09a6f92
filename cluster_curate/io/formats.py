"""Record formats of instruction datasets: detect which one a dataset uses, and turn a record into chat turns.

A format maps one source record (a dict of columns) to `(prompt, response)`:

    prompt    list of chat turns [{"role": "system"|"user"|"assistant"|"tool"|..., "content": str}] holding a user
              turn and ending with a user turn or a tool's result
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
                       one; 0 or false, the rejected column's is (`_labelled`); any other label is a bad row
    xlam               xLAM / APIGen function calling: query -> answers, the list of tool calls (or its JSON text),
                       with `tools`; detected by the three columns. The response is the calls as text (below)
    glaive             glaive-function-calling-v2: `chat` ("USER: ...\n\n\nASSISTANT: <functioncall> {...}") and
                       `system` ("SYSTEM: ..." then the tool schemas), read as the OpenAI chat and tools they
                       transcribe (io/glaive.py), then as `messages`

Columns of popular datasets that no format names are read as `--prompt-field A --response-field B` would read them
(`_KNOWN_PAIRS`): MetaMathQA's query -> response, OpenMathInstruct-2's problem -> generated_solution, xP3's and
FLAN's inputs -> targets.

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

Tool calling (any conversation format):
    - an assistant turn's text is its content, then its tool calls one per line, each the JSON of {"name",
      "arguments"} (OpenAI `tool_calls[].function`, legacy `function_call`; arguments that are JSON text are
      parsed, so spacing does not matter); a ShareGPT `function_call` turn's value is the call text already;
    - tool results (roles tool, function, ipython; ShareGPT observation) are context turns, and a prompt may end
      with one;
    - a `tools` column (a list of schemas, or its JSON text; any format, found like `system`) is rendered into the
      system turn, as chat templates do (`_with_tools`: that turn keeps the rendered text under `tools` as well).
    `chat_messages` gives a trainer the same example with the calls kept structured (export's chat layouts).

A bad record raises `RecordError(field, reason)`; the reader turns it into an error or a reject naming file and row.
Context turns keep their role as written (a `tool` turn stays `tool`); ShareGPT speakers are mapped to roles.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

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
# preference pairs: detected by `chosen` AND `rejected`, before every other format (resolve_fields: _preference_fields)
FORMAT.register("preference", "DPO pairs: (prompt ->) chosen, with rejected (TRL's preference columns)", "chosen",
                response=None, detect_order=-1, also=("rejected",))
# xLAM / APIGen (Salesforce/xlam-function-calling-60k): the answer is a list of calls, not text (_answer_calls)
FORMAT.register("xlam", "xLAM / APIGen function calling: query -> answers (a list of tool calls), with tools",
                "query", response=("answers",), detect_order=5, also=("tools",))
# glaiveai/glaive-function-calling-v2: a USER: / ASSISTANT: transcript beside a system prompt holding the tool
# schemas, read as the OpenAI chat it transcribes (io/glaive.py)
FORMAT.register("glaive", "glaive-function-calling-v2: a `chat` transcript, the tools in its `system` column", "chat",
                response=None, detect_order=6, also=("system",))
FORMATS = FORMAT.names
TURNS = "turns"  # questions alone: a column of the user's questions, no registered format (see the docstring)


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


FIX_HINT = ("pass --prompt-field COLUMN --response-field COLUMN (several prompt columns: --prompt-field A,B; a column "
            "of chat turns: --format messages --prompt-field COLUMN)")

# Column names, compared ignoring case, that a hint may suggest (the detection itself only takes the exact ones).
_PROMPT_NAMES = ("instruction", "prompt", "question", "query", "problem", "input", "text")
_RESPONSE_NAMES = ("output", "response", "completion", "answer", "answers", "long_answer", "solution", "target")
# A hint's response where no column has one of those names: a column named `..._solution` (OpenMathInstruct-2's
# `generated_solution`, beside its `expected_answer`), a worked solution before a bare answer.
_RESPONSE_SUFFIXES = ("solution", "response", "output", "completion", "answer")


def _by_lower_name(columns, names, exclude=()) -> list[str]:
    """The columns whose lower-cased name is one of `names` (in the order of `names`)."""
    lower: dict[str, str] = {}
    for c in columns:
        if c not in exclude:
            lower.setdefault(c.lower(), c)
    return [lower[n] for n in names if n in lower]


# words of a column name that say it holds something about an answer, not the answer (`chosen_avg_rating`)
_ABOUT_AN_ANSWER = frozenset({"rating", "ratings", "score", "scores", "model", "reward", "logps", "id", "len"})


def _answer_pair(columns) -> tuple[str, str] | None:
    """The (chosen, rejected) columns of preference pairs named otherwise than TRL's: `chosen_response` /
    `rejected_response` (`chosen` in the name, the same name with `rejected`), StackExchange-paired's `response_j`
    (the preferred answer) / `response_k`; None when no two columns are named so."""
    lower = {c.lower(): c for c in columns}
    for name, column in lower.items():
        other = (name.replace("chosen", "rejected", 1) if "chosen" in name
                 else name[:-2] + "_k" if name.endswith("_j") else None)
        if other in lower and not _ABOUT_AN_ANSWER & set(name.replace("-", "_").split("_")):
            return column, lower[other]
    return None


# Datasets of two answers whose preferred one a label column names, row by row: (the question's column, the answer
# a label of 1 prefers, the one 0 prefers, the label columns). stanfordnlp/SHP (and SHP-2): `labels` 1 where
# human_ref_A is preferred; PKU-Alignment/PKU-SafeRLHF: the index of the better (the safer) response.
_LABELLED_PAIRS = (("history", "human_ref_A", "human_ref_B", ("labels",)),
                   ("prompt", "response_1", "response_0", ("better_response_id", "safer_response_id")))
# nvidia/HelpSteer2's preference file: the sign of `preference_strength` (-3..3) names the preferred answer
# (negative: response_1), 0 is a tie: no label of 1 and 0 (`_labelled`), and no pair for a tie.
_SIGNED_PAIR = ("response_1", "response_2", "preference_strength")


def _signed_pair_refusal(columns) -> str | None:
    """What to do with HelpSteer2's pairs, when these are its columns."""
    a, b, strength = _SIGNED_PAIR
    if not set(_SIGNED_PAIR) <= set(columns):
        return None
    return (f"{a} and {b} are two answers whose preferred one the sign of {strength} names ({a} where it is "
            f"negative, {b} where it is positive, a tie at 0), which no flag reads: write a column that is 1 where "
            f"{strength} is negative and 0 where it is positive (leaving the ties out), then pass --response-field "
            f"{a} --rejected-field {b} --label-field COLUMN")


def _labelled_pair(columns) -> tuple[str, str, str, tuple[str, ...]] | None:
    """The entry of _LABELLED_PAIRS whose answer columns and a label column these columns hold (its label columns
    those present), else None."""
    cols = set(columns)
    for question, a, b, labels in _LABELLED_PAIRS:
        present = tuple(label for label in labels if label in cols)
        if {a, b} <= cols and present:
            return question, a, b, present
    return None


def _label_flags(pair: tuple[str, str, str, tuple[str, ...]], prompt: bool = True) -> str:
    """The flags that read a labelled pair (`_labelled_pair`) in the order of its label."""
    question, a, b, labels = pair
    return (f"{f'--prompt-field {question} ' if prompt else ''}--response-field {a} --rejected-field {b} "
            f"--label-field {labels[0]}")


# The prompt and response columns of popular datasets that no format's names cover, read as `--prompt-field A
# --response-field B` reads them (a custom pair: prompt-completion): MetaMathQA; OpenMathInstruct-2 (its
# `expected_answer` is the last line of the solution); xP3 and the FLAN collections. Not problem -> solution: MATH,
# an evaluation set, ships so (refused as data, the message gives the flags: Magicoder-OSS-Instruct's).
_KNOWN_PAIRS = (("query", "response"), ("problem", "generated_solution"), ("inputs", "targets"))


def _known_pair(columns: set) -> tuple[list[str], str | None]:
    """([prompt column], response column) of the first known pair these columns hold, else ([], None)."""
    pair = next((p for p in _KNOWN_PAIRS if set(p) <= columns), None)
    return ([pair[0]], pair[1]) if pair else ([], None)


def _fix_hint(columns) -> str:
    """The flags that would read these columns when their names look like a prompt and a response (or a
    preference pair's two answers, a labelled pair's with their label), else FIX_HINT."""
    labelled, signed = _labelled_pair(columns), _signed_pair_refusal(columns)
    if signed:
        return signed
    if labelled:
        question, a, b, labels = labelled
        return (f"pass {_label_flags(labelled)} ({labels[0]} is 1 where {a} is the preferred answer, 0 where {b} "
                f"is{'; or ' + ', '.join(labels[1:]) if labels[1:] else ''})")
    prompts = _by_lower_name(columns, _PROMPT_NAMES)
    pair = _answer_pair(columns)
    if pair:
        prompt = next((p for p in prompts if p not in pair), None)
        return (f"pass --prompt-field {prompt} --response-field {pair[0]} --rejected-field {pair[1]} (or other "
                "columns; the chosen answer's, then the rejected one's)" if prompt else
                f"pass --response-field {pair[0]} --rejected-field {pair[1]} (the chosen answer's column, then the "
                "rejected one's) and --prompt-field COLUMN, unless each holds the whole conversation")
    responses = (_by_lower_name(columns, _RESPONSE_NAMES, exclude=prompts[:1])
                 or [c for end in _RESPONSE_SUFFIXES for c in columns if c.lower().endswith("_" + end)])
    if prompts and responses:
        return f"pass --prompt-field {prompts[0]} --response-field {responses[0]} (or other columns)"
    if not responses and (TURNS in columns or any(p.lower() not in ("text", "input") for p in prompts)):
        return ("no column looks like a response: questions alone (an evaluation set) are no training data, give "
                "them to select or run --decontaminate as they are; else " + FIX_HINT)
    return FIX_HINT


def detect_format(columns) -> str | None:
    """The format whose columns are present, or None."""
    cols = set(columns)
    for entry in sorted(FORMAT, key=lambda e: e.detect_order):
        if entry.value in cols and (entry.response is None or set(entry.response) & cols) \
                and set(getattr(entry, "also", ())) <= cols:
            return entry.name
    return None


def _root_column(field: str, columns: set) -> str | None:
    """The column a field reads: itself, or for a dotted path (`data.question`) the column of its first key."""
    if field in columns:
        return field
    root = field.split(".")[0]
    return root if "." in field and root in columns else None


def _prompt_columns(prompt_field: str | None) -> list[str]:
    """--prompt-field A or A,B -> [A] or [A, B]."""
    if prompt_field is None:
        return []
    from cluster_curate.errors import CurateError
    names = [c.strip() for c in prompt_field.split(",")]
    if not all(names):
        raise CurateError(f"--prompt-field {prompt_field!r}: an empty column name; pass COLUMN or COLUMN,COLUMN")
    return names


def resolve_fields(columns, fmt: str | None, prompt_field: str | None, response_field: str | None,
                   source: str = "dataset", prompts_only: bool = False, rejected_field: str | None = None,
                   label_field: str | None = None) -> FieldMap:
    """The field mapping for these columns: detected, or forced by the user's options. Raises CurateError with a
    one-line message (the option or column at fault, the columns found, the flags that would fix it).
    `prompts_only`: questions alone (the module docstring): a format's prompt column without its response
    column is detected too (after every format with both), then a `turns` column, then a column named like a
    question in any case (_PROMPT_NAMES but `text` and `input`: MATH's `problem`). `rejected_field`: the rejected
    answer's column of preference pairs (the format they imply), `response_field` then the chosen one's.
    `label_field`: the column saying which of the two is the chosen answer, row by row (`_labelled`)."""
    from cluster_curate.errors import CurateError

    cols = list(columns)
    colset = set(cols)
    shown = ", ".join(cols) if len(cols) <= 30 else ", ".join(cols[:30]) + f", ... ({len(cols)} columns)"
    prompts = _prompt_columns(prompt_field)
    if fmt is not None and fmt not in FORMATS:
        raise CurateError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if rejected_field and fmt not in (None, "preference"):
        raise CurateError(f"--rejected-field {rejected_field!r} names a preference pair's rejected answer: it goes "
                          f"with --format preference, not {fmt}")
    if label_field and fmt not in (None, "preference"):
        raise CurateError(f"--label-field {label_field!r} says which answer of a preference pair is the chosen one: "
                          f"it goes with --format preference, not {fmt}")
    # a column the user named must exist, whatever the format
    for option, name in [("--prompt-field", p) for p in prompts] + [("--response-field", response_field),
                                                                    ("--rejected-field", rejected_field),
                                                                    ("--label-field", label_field)]:
        if name and _root_column(name, colset) is None:
            raise CurateError(f"{source}: {option} {name!r}: no such column; columns found: [{shown}]")
    if fmt is None:
        fmt = "preference" if rejected_field or label_field else detect_format(colset)
        if fmt is None and not prompts and response_field is None and not prompts_only:
            prompts, response_field = _known_pair(colset)
        if fmt is None and prompts_only and not prompts:
            fmt = next((e.name for e in sorted(FORMAT, key=lambda e: e.detect_order)
                        if e.value in colset and set(getattr(e, "also", ())) <= colset),  # xlam: its `tools`
                       TURNS if TURNS in colset else None)
            if fmt == TURNS:
                return FieldMap(TURNS, TURNS, prompts_only=True)
            named = [c for c in _by_lower_name(cols, _PROMPT_NAMES) if c.lower() not in ("text", "input")]
            if fmt is None and named:  # MATH's `problem`, a `Question` or `query` column
                fmt, prompts = "prompt-completion", named[:1]
        if fmt == "glaive" and (prompts or response_field):  # a pair of columns named: read as before glaive
            fmt = None
        if fmt is None and prompts:
            if response_field is None:
                found = _by_lower_name(cols, _RESPONSE_NAMES, exclude=prompts)
                if len(found) != 1:
                    pair = _answer_pair(cols)
                    which = (f"preference pairs? pass --response-field {pair[0]} --rejected-field {pair[1]}" if pair
                             else "no column looks like one" if not found else "several could be: " + ", ".join(found))
                    raise CurateError(f"{source}: --prompt-field {prompt_field} needs --response-field COLUMN too "
                                      f"({which}); columns found: [{shown}]")
                response_field = found[0]
            fmt = "prompt-completion"  # a custom pair of columns behaves like prompt/completion
        if fmt is None:
            raise CurateError(f"{source}: unrecognised record format; columns found: [{shown}]. {_fix_hint(cols)}")

    entry = FORMAT.get(fmt)
    if fmt == "preference":
        return _preference_fields(cols, prompts, response_field, rejected_field, label_field, source, shown)
    if entry.response is None:
        if len(prompts) > 1:
            raise CurateError(f"--prompt-field {prompt_field}: format {fmt} reads its turns from one column")
        conv = (prompts[0] if prompts else None) or response_field or entry.value
        if _root_column(conv, colset) is None:
            raise CurateError(f"{source}: format {fmt} needs a conversation column {conv!r}; columns found: "
                              f"[{shown}]. Pass --prompt-field COLUMN naming the column that holds the turns")
        # a `system` column beside ShareGPT turns: LLaMA-Factory's sharegpt keeps the system prompt there (a
        # mixture's shards hold `messages` and a `system` column read from them: not read twice)
        # (glaive's `system` column holds the tool schemas too: io/glaive.py reads it)
        system = "system" if fmt in ("sharegpt", "glaive") and "system" in colset and conv != "system" else None
        return FieldMap(fmt, conv, system=system, prompts_only=prompts_only, tools=_tools_column(colset, {conv}))

    if response_field and response_field in prompts:
        raise CurateError(f"{source}: --response-field {response_field!r} is a --prompt-field column too: the "
                          "answer would be part of its own question; name the columns of each")
    prompt, *extra = prompts or [entry.value]
    if response_field:
        response = response_field
    else:
        response = next((c for c in entry.response if c in colset), entry.response[0])
        if prompts_only and response not in colset:  # questions alone
            response = None
    missing = [c for c in (prompt, response) if c and _root_column(c, colset) is None]
    if missing:
        which = " and ".join(repr(c) for c in missing)
        raise CurateError(f"{source}: format {fmt} needs column {which}, not found; columns found: [{shown}]. "
                          f"{_fix_hint(cols)}")
    used = {prompt, *extra}
    input_field = _alpaca_input(prompt, colset, used) if fmt == "alpaca" else None
    system = _system_column(colset, {*used, response})
    return FieldMap(fmt, prompt, response, input_field, system, tuple(extra), prompts_only=prompts_only,
                    tools=_tools_column(colset, {*used, response, input_field, system}))


def _alpaca_input(prompt: str, columns: set, used: set) -> str | None:
    """alpaca's input: its column (`input`, or dolly-15k's `context`: the passage a closed_qa / summarization
    instruction is about), else the key beside a nested instruction (data.instruction -> data.input)."""
    nested_in = prompt.rpartition(".")[0] if prompt not in columns else ""
    name = (f"{nested_in}.input" if nested_in and "input" not in columns
            else next((c for c in ("input", "context") if c in columns), None))
    return name if name not in used else None


def _system_column(columns: set, used: set) -> str | None:
    """The system prompt's column beside a prompt and a response: `system`, or Open-Orca's `system_prompt`."""
    return next((c for c in ("system", "system_prompt") if c in columns and c not in used), None)


def _preference_fields(cols: list, prompts: list, response_field: str | None, rejected_field: str | None,
                       label_field: str | None, source: str, shown: str) -> FieldMap:
    """preference: `chosen` (or --response-field) and `rejected` (or --rejected-field), with the prompt column
    `prompt` (or --prompt-field) when there is one; without one, `chosen` holds the whole conversation. The two
    answers of a known labelled pair (_LABELLED_PAIRS) need their label, in its order: else pairs would be
    inverted without a word."""
    from cluster_curate.errors import CurateError
    colset = set(cols)
    chosen, rejected = response_field or "chosen", rejected_field or "rejected"
    missing = [c for c in (chosen, rejected) if _root_column(c, colset) is None]
    if missing:
        raise CurateError(f"{source}: format preference needs columns {chosen!r} and {rejected!r} "
                          f"({' and '.join(repr(c) for c in missing)} not found); columns found: [{shown}]"
                          + (f". {_fix_hint(cols)}" if _answer_pair(cols) else ""))
    if chosen == rejected:
        raise CurateError(f"{source}: the chosen and the rejected answer would both be column {chosen!r}: a pair "
                          "would hold one answer twice; name the column of each (--response-field CHOSEN "
                          "--rejected-field REJECTED)")
    if len(prompts) > 1:
        raise CurateError(f"--prompt-field {','.join(prompts)}: format preference reads its prompt from one column")
    prompt = prompts[0] if prompts else ("prompt" if "prompt" in colset else None)
    if prompt in (chosen, rejected):
        raise CurateError(f"{source}: --prompt-field {prompt!r} is the {'chosen' if prompt == chosen else 'rejected'}"
                          " answer's column: its answer would be part of its own question; name a column of the "
                          "prompt alone, or pass no --prompt-field when chosen and rejected hold the whole "
                          "conversation (lists of chat turns, or Anthropic HH's Human: / Assistant: transcripts)")
    _check_label(label_field, chosen, rejected, prompt, cols, source)
    if prompt is None:  # the implicit prompt: chosen is the conversation, as `messages` is read
        return FieldMap("preference", chosen, None, rejected=rejected, label=label_field,
                        tools=_tools_column(colset, {chosen, rejected, label_field}))
    system = "system" if "system" in colset and "system" not in (prompt, chosen, rejected, label_field) else None
    return FieldMap("preference", prompt, chosen, system=system, rejected=rejected, label=label_field,
                    tools=_tools_column(colset, {prompt, chosen, rejected, system, label_field}))


def _check_label(label_field: str | None, chosen: str, rejected: str, prompt: str | None, cols: list,
                 source: str) -> None:
    """A label column that is another field's is refused; so are a known labelled pair's answers without its
    label (the pairs labelled 0 would be inverted), or in the order that inverts every pair, and HelpSteer2's
    without a label of 0 and 1 (_SIGNED_PAIR)."""
    from cluster_curate.errors import CurateError
    named = {chosen: "chosen answer's", rejected: "rejected answer's", prompt: "prompt's"}
    if label_field and label_field in named:
        raise CurateError(f"{source}: --label-field {label_field!r} is the {named[label_field]} column; name the "
                          "column saying which answer is the chosen one (1: --response-field's, 0: --rejected-field's)")
    signed = _signed_pair_refusal(cols)
    if signed and {chosen, rejected} == set(_SIGNED_PAIR[:2]) and label_field in (None, _SIGNED_PAIR[2]):
        raise CurateError(f"{source}: {signed}")
    pair = _labelled_pair(cols)
    if pair is None or {chosen, rejected} != set(pair[1:3]):
        return
    _, a, b, labels = pair
    if label_field is None:
        raise CurateError(f"{source}: {a} and {b} are two answers whose preferred one {labels[0]} names row by row: "
                          f"pass {_label_flags(pair, prompt=False)} ({labels[0]} 1: {a} is the chosen answer, 0: "
                          f"{b} is); without it the pairs labelled otherwise would be inverted")
    if label_field in labels and chosen != a:
        raise CurateError(f"{source}: --label-field {label_field} is 1 where {a} is preferred: pass "
                          f"{_label_flags((None, a, b, (label_field,)), prompt=False)} (this order would invert "
                          "every pair)")


def _tools_column(columns: set, used: set) -> str | None:
    """The column of tool schemas, when there is one that no other field reads."""
    return "tools" if "tools" in columns and "tools" not in used else None


# ----------------------------------------------------------------------------------------------- records

def _text(value, field: str, what: str, required: bool = True, parts: bool = False) -> str:
    """A text field: str kept, numbers turned into text (the source column keeps the number), anything else an
    error. parts=True (prompt columns): a list of texts, such as PubMedQA's CONTEXTS, is joined by blank lines."""
    if value is None:
        if required:
            raise RecordError(field, f"missing {what}")
        return ""
    if isinstance(value, bool):
        raise RecordError(field, f"{what} is a boolean, expected text")
    if isinstance(value, (int, float)):
        value = str(value)
    if parts and isinstance(value, (list, tuple)):
        odd = [v for v in value if not isinstance(v, str)]
        if odd:  # a null item too (next(..., None) could not tell it from none)
            raise RecordError(field, f"{what} is a list holding {_kind(odd[0])}, expected text or a list of texts")
        value = "\n\n".join(v for v in value if v.strip())
    if not isinstance(value, str):
        raise RecordError(field, f"{what} is {_kind(value)}, expected text")
    if required and not value.strip():
        raise RecordError(field, f"empty {what}")
    return value


def _kind(value) -> str:
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
                   "system": "system", "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool",
                   "function_call": "assistant"}
# Turns that hold what a tool returned: a prompt may end with one (the model answers the tool's result).
TOOL_RESULT_ROLES = frozenset({"tool", "function", "ipython", "observation"})


def _call_arguments(value):
    """A call's arguments: JSON text parsed (so its spacing does not matter), objects without their null keys,
    anything else as given."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return _without_nulls(value)


def _without_nulls(value):
    """Objects (at any depth) without their null keys: calls (or tool schemas) kept as Parquet / Arrow structs share
    one type, which holds every call's argument names, so a name another call has reads as null in this one (as a
    turn's `tool_calls` does, _tool_calls). Arguments given as JSON text keep their nulls."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_nulls(v) for v in value]
    return value


def _tool_calls(turn: dict, field: str) -> list[dict]:
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
            calls = json.loads(calls)
        except json.JSONDecodeError as e:
            raise RecordError(field, f"tool calls are text that is not valid JSON ({e.msg})") from None
    if not isinstance(calls, (list, tuple)):
        raise RecordError(field, f"tool calls are {_kind(calls)}, expected a list of calls")
    return [(f"{field}[{j}]", c) for j, c in enumerate(calls)]


def _call(where: str, call) -> dict:
    """One call as {"name", "arguments"}: {name, arguments}, or OpenAI's {id, type, function: {name, arguments}}."""
    if isinstance(call, dict) and "function" in call:
        where, call = f"{where}.function", call["function"]
    if not isinstance(call, dict):
        raise RecordError(where, f"tool call is {_kind(call)}, expected an object with a name and arguments")
    if not isinstance(call.get("name"), str) or not call["name"].strip():
        raise RecordError(where, "no name")
    return {"name": call["name"], "arguments": _call_arguments(call.get("arguments"))}


def _answer_calls(value, field: str) -> list[dict]:
    """xLAM's answer: its list of calls (JSON text as the Hub keeps it), each {name, arguments}."""
    if value is None:
        raise RecordError(field, "missing response")
    calls = [_call(where, call) for where, call in _listed_calls(value, field)]
    if not calls:  # xLAM's irrelevance rows: no call, and no text to learn either
        raise RecordError(field, "empty response (an empty list of tool calls)")
    return calls


def _call_text(calls: list[dict]) -> str:
    """Tool calls as text, one JSON object per line: what the model learns to write, whatever the template."""
    return "\n".join(json.dumps(c, ensure_ascii=False) for c in calls)


def _message(turn: dict, role: str, content: str | None, field: str, parsed: list[dict]) -> dict:
    """A turn as a trainer's chat template reads it (OpenAI style): role, content, and where given `tool_calls`
    ({"type": "function", "function": {"name", "arguments"}}, arguments as JSON text: one Arrow type for every
    row), a tool turn's `tool_call_id` and `name`. A ShareGPT function_call turn's JSON becomes its calls.
    `parsed`: the turn's `_tool_calls`."""
    message = {"role": role, "content": content}
    calls = turn.get("tool_calls") if isinstance(turn.get("tool_calls"), (list, tuple)) else None
    if turn.get("from") == "function_call" and content:  # LLaMA-Factory: the call(s) as JSON text
        value = _call_arguments(content)
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


def _listed(value, field: str, what: str, items: str, all_text: bool = False) -> list:
    """A list, or its JSON text (a CSV column holding JSON; `all_text`: any text is read as JSON, else text that
    opens a list); a RecordError naming `what` when it is missing, not valid JSON or no list (of `items`)."""
    if isinstance(value, str) and (all_text or value.lstrip().startswith("[")):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RecordError(field, f"{what} is text that is not valid JSON ({e.msg})") from None
    if value is None:
        raise RecordError(field, f"missing {what}")
    if not isinstance(value, (list, tuple)):
        raise RecordError(field, f"{what} is {_kind(value)}, expected a list of {items}")
    return value


def _parsed_turns(value, field: str, fmt: str, messages: bool = False) -> list[tuple[str, str, dict | None]]:
    """(role, text, message) per turn: the text is what the pipeline reads (an assistant turn's content, then its
    tool calls one per line), the message what a trainer gets (`_message`; with `messages` only, since every
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
        else:
            role = t.get("role")
            if not isinstance(role, str):
                raise RecordError(f"{field}[{i}].role", "turn has no role")
            role = _SHAREGPT_ROLES.get(role.lower(), role.lower()) if fmt == "sharegpt" else role
            content = _content(t.get("content"), f"{field}[{i}].content")
        # most turns call no tool: their text is their content
        called = t.get("tool_calls") is not None or t.get("function_call") is not None
        parsed = _tool_calls(t, f"{field}[{i}]") if called else []
        text = "\n".join(x for x in (content, _call_text(parsed)) if x) if parsed else content or ""
        turns.append((role, text, _message(t, role, content, f"{field}[{i}]", parsed) if messages else None))
    return turns


def _alternating_turns(texts) -> list[dict]:
    """LIMA's `conversations`, a list of plain texts: the user's and the assistant's in turn, the user first, as
    ShareGPT turns."""
    return [{"from": "gpt" if i % 2 else "human", "value": text} for i, text in enumerate(texts)]


def _turns(value, field: str, fmt: str) -> list[dict]:
    return [{"role": role, "content": text} for role, text, _ in _parsed_turns(value, field, fmt)]


def _with_system_column(turns: list, rec: dict, fields: FieldMap, message=None) -> list:
    """A conversation's turns with the record's `system` column as their first turn (when it holds text). A
    conversation that opens with a system turn of its own keeps it; a different text in the column is an error
    rather than one of the two dropped. `message(role, text)` makes the turn (default: {role, content})."""
    if not fields.system:
        return turns
    system = _text(rec.get(fields.system), fields.system, "system prompt", required=False)
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


def _conversation(rec: dict, fields: FieldMap):
    conv = fields.prompt
    turns = _with_system_column(_turns(field_value(rec, conv), conv, fields.format), rec, fields)
    prompt, response = _split_turns(turns, conv)
    return _with_tools(prompt, rec, fields), response


def _is_turn_list(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, dict) for t in value)


def _conversational_pair(prompt, completion, fields: FieldMap):
    """TRL's conversational prompt-completion (what `export --for trl` writes): `prompt` a list of turns ending
    with a user turn, `completion` a list of turns holding the assistant's answer (its last assistant turn)."""
    turns = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
             else _turns(prompt, fields.prompt, "messages"))
    done = len(turns)
    turns += _turns(completion, fields.response, "messages")
    if not any(t["role"] == "assistant" for t in turns[done:]):
        raise RecordError(fields.response, "missing response: no assistant turn in the completion")
    return _split_turns(turns, fields.prompt)


def _last_assistant(turns: list[dict]) -> int | None:
    return max((i for i, t in enumerate(turns) if t["role"] == "assistant"), default=None)


def _split_turns(turns: list[dict], conv: str, turn_field=None):
    """(the turns before the last assistant turn, its text): the example of a conversation. The prompt holds a
    user turn and ends with one, or with a tool's result (the model answers it); the response may be a tool call
    alone (the model learns to call the tool). `turn_field(i)` names turn i in an error (default `conv[i]`)."""
    last = _last_assistant(turns)
    if last is None:
        roles = list(dict.fromkeys(t["role"] for t in turns))
        # ShareGPT speakers (human/gpt) under `role`: the sharegpt format maps them, the messages format does not
        hint = (f"; ShareGPT speakers: pass --format sharegpt --prompt-field {conv}"
                if any(_SHAREGPT_ROLES.get(r.lower()) == "assistant" for r in roles) else "")
        raise RecordError(conv, "missing response: no assistant turn in the conversation"
                          + (f" (roles: {', '.join(roles)}{hint})" if roles else ""))
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
    return prompt, response


# ------------------------------------------------------------------------------------------------ tools

def tool_schemas(rec: dict, fields: FieldMap) -> list | None:
    """The record's tool schemas (a list, or its JSON text, as LLaMA-Factory keeps them), None without any. Given
    as objects, they lose their null keys: a Parquet struct column gives each schema every other's properties."""
    value = rec.get(fields.tools) if fields.tools else None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RecordError(fields.tools, f"tools are text that is not valid JSON ({e.msg})") from None
    else:
        value = _without_nulls(value)
    if isinstance(value, dict):  # one schema
        value = [value]
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise RecordError(fields.tools, f"tools are {_kind(value)}, expected a list of tool schemas")
    return list(value) or None


def tools_text(tools: list) -> str:
    """Tool schemas as the system turn holds them: a chat template renders them into the system prompt, so the
    tokens the trainer sees include them (one JSON object per line, after a heading)."""
    return "# Tools\n\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)


def _with_tools(prompt: list[dict], rec: dict, fields: FieldMap) -> list[dict]:
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
    """A system turn's text less the tool schemas `_with_tools` rendered into it."""
    content, tools = turn["content"], turn.get("tools")
    return content[: -len(tools)].rstrip("\n") if tools and content.endswith(tools) else content


def without_tool_schemas(prompt: list[dict]) -> list[dict]:
    """The prompt's {role, content} turns with the record's own system prompt, the tool schemas `_with_tools`
    rendered into it taken out (a trainer renders them from a `tools` column), and a system turn that held
    nothing else dropped."""
    own = [{"role": t["role"], "content": own_system_prompt(t) if "tools" in t else t["content"]} for t in prompt]
    return [t for t in own if t["role"] != "system" or t["content"].strip()]


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
                value = json.loads(value)
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
            raise RecordError(field, f"missing ({where} is {_kind(value)}, not an object)")
        if key not in value:
            raise RecordError(field, f"missing ({where} has no key {key!r})")
        value = value[key]
    return value


def _question_list(value, field: str) -> list[dict]:
    """A `turns` column (TURNS): the user's questions in order, each text or {content: text}, as user turns."""
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
        turns.append({"role": "user", "content": _text(t, where, "question")})
    return turns


def _is_nested_turns(value) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(t, (list, tuple)) for t in value)


def _nested_turns(value, field: str) -> list[dict]:
    """BFCL's `question`: one list of {role, content} turns per turn of a multi-turn test (empty where the test
    adds a function instead), read as one conversation."""
    return [t for i, inner in enumerate(value) for t in _turns(inner, f"{field}[{i}]", "messages")]


def _asked(turns: list[dict], conv: str):
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
        return _split_turns(turns, conv)
    if not turns[-1]["content"].strip():
        raise RecordError(f"{conv}[{len(turns) - 1}]", "empty question (the last user turn is empty)")
    return turns, ""


def _answer(value, field: str) -> str:
    """A preference response given beside its prompt: text, or a list of turns whose last assistant turn it is."""
    if _is_turn_list(value) or (isinstance(value, str) and value.lstrip().startswith("[{")):
        turns = _turns(value, field, "messages")
        said = [i for i, t in enumerate(turns) if t["role"] == "assistant"]
        if not said:
            raise RecordError(field, "missing response: no assistant turn")
        if not turns[said[-1]]["content"].strip():
            raise RecordError(f"{field}[{said[-1]}]", "empty response (the last assistant turn is empty)")
        return turns[said[-1]]["content"]
    return _text(value, field, "response")


def _asking_turns(value, field: str) -> list[dict] | None:
    """A preference answer's turns when they hold the user's turns too (the whole conversation), else None."""
    if not (_is_turn_list(value) or (isinstance(value, str) and value.lstrip().startswith("[{"))):
        return None
    turns = _turns(value, field, "messages")
    return turns if any(t["role"] == "user" for t in turns) else None


def _whole_pair(chosen: list[dict], asked, rejected_value, fields: FieldMap, rec: dict):
    """A pair whose `chosen` holds the whole conversation although a prompt column is given (UltraFeedback
    binarized: the question and its answer; Capybara DPO: several turns, the prompt column the first question):
    the prompt is chosen's turns before its last answer, not the prompt column alone (the turns between them
    would be lost, the answer set against the wrong question). The prompt column must be its first question;
    a rejected conversation must share its prompt."""
    prompt, response = _split_turns(chosen, fields.response)
    first = next(t["content"] for t in prompt if t["role"] == "user")
    given = (next((t["content"] for t in _turns(asked, fields.prompt, "messages") if t["role"] == "user"), "")
             if _is_turn_list(asked) else _text(asked, fields.prompt, "prompt", parts=True))
    if " ".join(given.split()) != " ".join(first.split()):
        raise RecordError(fields.prompt, f"differs from the first user turn of {fields.response} (which holds the "
                                         "whole conversation): which one is the question is unclear")
    if fields.system and prompt[0]["role"] != "system":
        system = _text(rec.get(fields.system), fields.system, "system prompt", required=False)
        prompt = [{"role": "system", "content": system}, *prompt] if system.strip() else prompt
    other = _asking_turns(rejected_value, fields.rejected)
    if other is None:
        return prompt, response, _answer(rejected_value, fields.rejected)
    before, rejected = _split_turns(other, fields.rejected)
    if before != [t for t in prompt if t["role"] != "system"] and before != prompt:
        raise RecordError(fields.rejected, f"its turns before the last assistant turn differ from "
                                           f"{fields.response}'s (a preference pair answers one prompt)")
    return prompt, response, rejected


def _labelled(rec: dict, fields: FieldMap) -> FieldMap:
    """A preference record's fields in the order of its label (`fields.label`; then None): 1 or true, the response
    column's answer (the conversation column's, without a prompt column) is the chosen one; 0 or false, the
    rejected column's is, and the two columns swap. Any other label is a RecordError."""
    if not fields.label:
        return fields
    value = field_value(rec, fields.label)
    chosen = "response" if fields.response else "prompt"
    if isinstance(value, (bool, int, float)) and value in (0, 1):
        if value:
            return replace(fields, label=None)
        return replace(fields, label=None, rejected=getattr(fields, chosen), **{chosen: fields.rejected})
    raise RecordError(fields.label, f"label {json.dumps(value, default=str)}: expected 1 ({getattr(fields, chosen)} "
                                    f"is the chosen answer) or 0 ({fields.rejected} is)")


def to_preference(rec: dict, fields: FieldMap):
    """(prompt turns, chosen response, rejected response) for one preference record, or RecordError. The
    record's tool schemas (a `tools` column, as TRL's DPOTrainer reads it) are rendered into the prompt's system
    turn, as `to_example` renders them. A labelled pair in the order of its label (`_labelled`)."""
    fields = _labelled(rec, fields)
    prompt, chosen, rejected = _preference_pair(rec, fields)
    return _with_tools(prompt, rec, fields), chosen, rejected


def _rejected_value(rec: dict, fields: FieldMap):
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
            raise RecordError(field, "plain text with no prompt column to answer: add a `prompt` column (or pass "
                                     "--prompt-field COLUMN), or give chosen and rejected as lists of chat turns or as "
                                     "Anthropic HH transcripts (each turn opened by a blank line and Human: or "
                                     "Assistant:)")
        turns = _transcript_turns(value)
        return turns, lambda i: f"{field} (transcript turn {i + 1}: {_TRANSCRIPT_SPEAKERS[turns[i]['role']]})"
    return _turns(value, field, fmt), None


def _preference_pair(rec: dict, fields: FieldMap):
    if fields.response is None:  # implicit prompt: two whole conversations that share their prompt
        turns, turn_field = _conversation_turns(field_value(rec, fields.prompt), fields.prompt, fields.format)
        prompt, response = _split_turns(turns, fields.prompt, turn_field)
        turns, turn_field = _conversation_turns(_rejected_value(rec, fields), fields.rejected, "messages")
        other, rejected = _split_turns(turns, fields.rejected, turn_field)
        if other != prompt:
            raise RecordError(fields.rejected, "its turns before the last assistant turn differ from chosen's (a "
                                               "preference pair answers one prompt)")
        return prompt, response, rejected
    value = _rejected_value(rec, fields)
    raw = field_value(rec, fields.prompt)
    whole = _asking_turns(field_value(rec, fields.response), fields.response)
    if whole is not None:  # chosen is the whole conversation beside its prompt column (UltraFeedback, Capybara)
        return _whole_pair(whole, raw, value, fields, rec)
    rejected = _answer(value, fields.rejected)
    response = _answer(field_value(rec, fields.response), fields.response)
    if _is_turn_list(raw):
        prompt = _turns(raw, fields.prompt, "messages")
        # as a conversation's prompt (_split_turns): it may end with a tool's result, which the answers answer
        if not prompt or (prompt[-1]["role"] != "user" and prompt[-1]["role"] not in TOOL_RESULT_ROLES):
            raise RecordError(fields.prompt, "the prompt's turns do not end with a user or tool turn")
        if not any(t["role"] == "user" for t in prompt):
            raise RecordError(fields.prompt, "the prompt's turns hold no user turn")
    else:
        prompt = [{"role": "user", "content": _text(raw, fields.prompt, "prompt", parts=True)}]
        if fields.system:
            system = _text(rec.get(fields.system), fields.system, "system prompt", required=False)
            if system.strip():
                prompt.insert(0, {"role": "system", "content": system})
    return prompt, response, rejected


def to_example(rec: dict, fields: FieldMap):
    """(prompt turns, response) for one record, or RecordError. Questions alone (`fields.prompts_only`): the
    response may be missing or empty (then "")."""
    if fields.format == TURNS:
        return _question_list(field_value(rec, fields.prompt), fields.prompt), ""
    if fields.format == "glaive":
        return _as_openai(to_example, rec, fields)
    if fields.rejected:
        return to_preference(rec, fields)[:2]
    if FORMAT.get(fields.format).response is None:
        if fields.prompts_only:
            conv = fields.prompt
            return _asked(_with_system_column(_turns(field_value(rec, conv), conv, fields.format), rec, fields), conv)
        return _conversation(rec, fields)
    value = None if fields.response is None else field_value(rec, fields.response)
    if fields.format == "prompt-completion" and _is_turn_list(value) and not fields.prompt_extra:
        prompt, response = _conversational_pair(field_value(rec, fields.prompt), value, fields)
        return _with_tools(prompt, rec, fields), response
    asked = (field_value(rec, fields.prompt) if fields.prompts_only and value in (None, "") and not fields.prompt_extra
             else None)
    if fields.format in ("prompt-completion", "qa") and _is_nested_turns(asked):
        return _asked(_nested_turns(asked, fields.prompt), fields.prompt)
    if asked is not None and fields.format == "prompt-completion":
        if _is_turn_list(asked):  # TRL's conversational prompt alone
            return _asked(_turns(asked, fields.prompt, "messages"), fields.prompt)
        if isinstance(asked, (list, tuple)) and asked:  # the turns as a list of texts (the Hub's MT-Bench)
            return _question_list(asked, fields.prompt), ""
    if fields.format == "xlam" and not (fields.prompts_only and value in (None, "")):
        response = _call_text(_answer_calls(value, fields.response))  # as an assistant turn's calls read
    else:
        response = _text(value, fields.response or "response", "response", required=not fields.prompts_only)
    if fields.prompt_extra:
        texts = [_text(field_value(rec, c), c, "prompt", required=False, parts=True) for c in fields.prompt_columns]
        prompt = "\n\n".join(t for t in texts if t.strip())
        if not prompt and fields.input is None:
            raise RecordError(fields.prompt, "empty prompt (every prompt column is empty)")
    else:
        prompt = _text(field_value(rec, fields.prompt), fields.prompt, "prompt", required=fields.input is None,
                       parts=True)
    if fields.input:
        try:  # optional: a row without the key (flat or nested) has no input
            extra = field_value(rec, fields.input)
        except RecordError:
            extra = None
        extra = _text(extra, fields.input, "input", required=False)
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
    return _with_tools(turns, rec, fields), response


def chat_messages(rec: dict, fields: FieldMap) -> tuple[list[dict], list | None]:
    """The example of `to_example` as a trainer's chat template reads it: the prompt's turns, then the response's,
    each `_message` (OpenAI style: tool calls as `tool_calls`, a tool turn's `tool_call_id` and `name` kept), the
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
        parsed = _with_system_column(_parsed_turns(field_value(rec, fields.prompt), fields.prompt, fields.format,
                                                   messages=True),
                                     rec, fields, lambda r, c: (r, c, {"role": r, "content": c}))
    else:
        value = field_value(rec, fields.response)
        if fields.format == "prompt-completion" and _is_turn_list(value) and not fields.prompt_extra:
            given = field_value(rec, fields.prompt)
            parsed = ([("user", given, {"role": "user", "content": given})] if isinstance(given, str)
                      else _parsed_turns(given, fields.prompt, "messages", messages=True))
            parsed += _parsed_turns(value, fields.response, "messages", messages=True)
        elif fields.format == "xlam":  # one prompt text, the calls as the answer's tool_calls
            calls = _answer_calls(value, fields.response)
            return without_tool_schemas(prompt) + [_message({}, "assistant", None, fields.response, calls)], tools
        else:  # one prompt text, one response text
            return without_tool_schemas(prompt) + [{"role": "assistant", "content": response}], tools
    last = _last_assistant([{"role": role} for role, _, _ in parsed])
    return [message for _, _, message in parsed[: last + 1]], tools


def preference_messages(rec: dict, fields: FieldMap) -> tuple[list[dict], dict, dict, list | None]:
    """A preference pair of `to_preference` as `chat_messages` gives a trainer its turns: (prompt turns, chosen
    answer, rejected answer, tool schemas or None). Turns the record gives as turns are each `_message` (tool calls
    as `tool_calls`, a tool turn's `tool_call_id` and `name`: an answer may be a call); the others (text, an HH
    transcript) as `to_preference` reads them. Raises RecordError as to_preference does."""
    fields = _labelled(rec, fields)
    prompt, chosen, rejected = to_preference(rec, fields)  # its checks
    field = fields.response or fields.prompt
    answered = _given_turns(field_value(rec, field), field, fields.format if fields.response is None else "messages")
    if answered is not None and (fields.response is None or any(role == "user" for role, _, _ in answered)):
        asked = answered[: _last_assistant([{"role": role} for role, _, _ in answered])]  # the whole conversation
    else:
        raw = field_value(rec, fields.prompt)
        asked = _parsed_turns(raw, fields.prompt, "messages", messages=True) if _is_turn_list(raw) else []
    # the turns before the record's own (a system column's turn) as read, the tool schemas taken out of them
    head = without_tool_schemas(prompt[: len(prompt) - len(asked)])
    return ([*head, *(message for _, _, message in asked)], _answer_message(answered, chosen),
            _answer_message(_given_turns(_rejected_value(rec, fields), fields.rejected, "messages"), rejected),
            tool_schemas(rec, fields))


def _given_turns(value, field: str, fmt: str) -> list[tuple[str, str, dict]] | None:
    """`_parsed_turns` with their messages of a value given as turns (or their JSON text); None for text."""
    if _is_turn_list(value) or (isinstance(value, str) and value.lstrip().startswith("[{")):
        return _parsed_turns(value, field, fmt, messages=True)
    return None


def _answer_message(turns: list[tuple[str, str, dict]] | None, text: str) -> dict:
    """An answer's last assistant turn as a `_message` where it is given as turns, else its text as one."""
    if turns is None:
        return {"role": "assistant", "content": text}
    return turns[_last_assistant([{"role": role} for role, _, _ in turns])][2]


def _as_openai(read, rec: dict, fields: FieldMap):
    """`read` (to_example, chat_messages) of a glaive row's OpenAI-messages record (io/glaive.py): what an OpenAI
    input of the same conversation gives. Its errors name the glaive column, not the record built from it."""
    from cluster_curate.io.glaive import openai_record
    record, as_messages = openai_record(rec, fields)
    try:
        return read(record, as_messages)
    except RecordError as e:
        raise RecordError(fields.prompt, e.reason) from None
