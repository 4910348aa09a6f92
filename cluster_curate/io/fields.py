"""Which columns a dataset's records are read from: `resolve_fields` gives the FieldMap of a dataset's columns,
detected (`detect_format`: the first format of io/formats.py's FORMAT whose columns are present; of JSON rows whose
columns differ, `most_read_format`: the one that reads the most of them) or forced by --format / --prompt-field /
--response-field / --rejected-field / --label-field, or refuses them in one line that names the option or column at
fault, the columns found and the columns that would read them (`_fix_hint`): a `FieldsRefusal`, whose `ColumnsHint`
each caller words (flags for one input; a mixture file's keys in io/mixture.py).

Columns of popular datasets that no format names are read as `--prompt-field A --response-field B` would read them
(`_KNOWN_PAIRS`): MetaMathQA's query -> response, OpenMathInstruct-2's problem -> generated_solution, xP3's and
FLAN's inputs -> targets. Two answers whose preferred one a label column names row by row (`_LABELLED_PAIRS`: SHP,
PKU-SafeRLHF) are read with their label alone, and HelpSteer2's signed preference is refused with the way to read it
(`_SIGNED_PAIR`). A hint for a dataset's columns is an entry of one of these tables.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from cluster_curate.errors import CurateError
from cluster_curate.io.formats import FORMAT, FORMATS, TURNS, FieldMap, worded_parts


@dataclass(frozen=True)
class ColumnsHint:
    """Columns that would read a dataset: `fields`, (field, column) in the flags' order (`prompt`, `response`,
    `rejected`, `label`), and `note`, what the hint says of them; `format`, the format that reads them, when the
    hint names one; `left_to_user`, (field, when it is needed) of a column the hint cannot name (COLUMN). Data, not
    words: a single input's message words it as flags (`as_flags`), a mixture's input as its mixture file's keys
    (io/mixture.py)."""
    fields: tuple[tuple[str, str], ...]
    note: str | None = None
    format: str | None = None
    left_to_user: tuple[str, str] | None = None

    def as_flags(self) -> str:
        # a column quoted as a shell needs (a CSV header `Question Text`), so that the hint can be pasted
        flags = [f"--format {self.format}"] * bool(self.format) + [f"--{field}-field {as_typed(column)}"
                                                                   for field, column in self.fields]
        left = f" and --{self.left_to_user[0]}-field COLUMN, {self.left_to_user[1]}" if self.left_to_user else ""
        return f"pass {' '.join(flags)}" + (f" ({self.note})" if self.note else "") + left


def as_typed(column: str) -> str:
    """A column name as a shell takes it, to be pasted: quoted where it holds a space or a shell character, or a
    comma, which a list of columns (`columns found: [...]`, --prompt-field A,B) separates them by."""
    quoted = shlex.quote(column)
    return f"'{column}'" if quoted == column and "," in column else quoted


def _shown_columns(columns) -> str:
    """The columns a message lists (`columns found: [...]`), each as typed (as_typed), the first 30 of many."""
    cols = [as_typed(c) for c in columns]
    return ", ".join(cols) if len(cols) <= 30 else ", ".join(cols[:30]) + f", ... ({len(cols)} columns)"


class FieldsRefusal(CurateError):
    """A refusal of a dataset's columns that suggests the columns that would read them: its parts are text and
    ColumnsHints; its message words each hint as flags, `worded(wording)` as the caller words them."""

    def __init__(self, *parts: str | ColumnsHint):
        self.parts = parts
        super().__init__(self.worded(ColumnsHint.as_flags))

    def worded(self, wording) -> str:
        return worded_parts(self.parts, wording)


class UnrecognisedFormat(FieldsRefusal):
    """Columns no format reads, no field named: `headline` the refusal without its hint, `columns` those found
    (shown), for a caller that reads the data another way (a --target read as an evaluation set's questions)."""

    def __init__(self, source, shown: str, *hint: str | ColumnsHint):
        self.headline, self.columns = f"{source}: unrecognised record format; columns found: [{shown}]", shown
        super().__init__(f"{self.headline}. ", *hint)


class NoResponseColumn(FieldsRefusal):
    """--prompt-field named alone where no one column looks like the response."""


class MissingColumn(CurateError):
    """A column a field option names (`option`: --response-field) that the data lacks; a mixture words it as the
    key of its file that named the column (io/mixture.py)."""

    def __init__(self, source, option: str, column: str, columns: str):
        self.option, self.column, self.columns = option, column, columns
        super().__init__(f"{source}: {option} {column!r}: no such column; columns found: [{columns}]")


# columns the hint cannot guess: worded as flags for one input, as its keys for a mixture's (io/mixture.py)
FIX_HINT = ColumnsHint((("prompt", "COLUMN"), ("response", "COLUMN")),
                       "several prompt columns: A,B; a column of chat turns: format messages, that column the prompt")

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
# (negative: response_1), 0 is a tie: no label of 1 and 0 (`preference.labelled_fields`), and no pair for a tie.
_SIGNED_PAIR = ("response_1", "response_2", "preference_strength")


def _signed_pair_refusal(columns) -> tuple[str, ColumnsHint] | None:
    """What to do with HelpSteer2's pairs, when these are its columns (a FieldsRefusal's parts)."""
    a, b, strength = _SIGNED_PAIR
    if not set(_SIGNED_PAIR) <= set(columns):
        return None
    return (f"{a} and {b} are two answers whose preferred one the sign of {strength} names ({a} where it is "
            f"negative, {b} where it is positive, a tie at 0), which no flag reads: write a column that is 1 where "
            f"{strength} is negative and 0 where it is positive (leaving the ties out), then ",
            ColumnsHint((("response", a), ("rejected", b), ("label", "COLUMN"))))


def _labelled_pair(columns) -> tuple[str, str, str, tuple[str, ...]] | None:
    """The entry of _LABELLED_PAIRS whose answer columns and a label column these columns hold (its label columns
    those present), else None."""
    cols = set(columns)
    for question, a, b, labels in _LABELLED_PAIRS:
        present = tuple(label for label in labels if label in cols)
        if {a, b} <= cols and present:
            return question, a, b, present
    return None


def _label_hint(pair: tuple[str, str, str, tuple[str, ...]], note: str, prompt: bool = True) -> ColumnsHint:
    """The columns that read a labelled pair (`_labelled_pair`) in the order of its label."""
    question, a, b, labels = pair
    asked = (("prompt", question),) if prompt else ()
    return ColumnsHint((*asked, ("response", a), ("rejected", b), ("label", labels[0])), note)


# The prompt and response columns of popular datasets that no format's names cover, read as `--prompt-field A
# --response-field B` reads them (a custom pair: prompt-completion): MetaMathQA; OpenMathInstruct-2 (its
# `expected_answer` is the last line of the solution); xP3 and the FLAN collections. Not problem -> solution: MATH,
# an evaluation set, ships so (refused as data, the message gives the flags: Magicoder-OSS-Instruct's).
_KNOWN_PAIRS = (("query", "response"), ("problem", "generated_solution"), ("inputs", "targets"))


def _known_pair(columns: set) -> tuple[list[str], str | None]:
    """([prompt column], response column) of the first known pair these columns hold, else ([], None)."""
    pair = next((p for p in _KNOWN_PAIRS if set(p) <= columns), None)
    return ([pair[0]], pair[1]) if pair else ([], None)


def _fix_hint(columns) -> tuple[str | ColumnsHint, ...]:
    """The columns that would read these when their names look like a prompt and a response (or a preference
    pair's two answers, a labelled pair's with their label), else FIX_HINT: a FieldsRefusal's parts."""
    labelled, signed = _labelled_pair(columns), _signed_pair_refusal(columns)
    if signed:
        return signed
    if labelled:
        question, a, b, labels = labelled
        return (_label_hint(labelled, f"{labels[0]} is 1 where {a} is the preferred answer, 0 where {b} "
                                      f"is{'; or ' + ', '.join(labels[1:]) if labels[1:] else ''}"),)
    prompts = _by_lower_name(columns, _PROMPT_NAMES)
    pair = _answer_pair(columns)
    if pair:
        prompt = next((p for p in prompts if p not in pair), None)
        return ((ColumnsHint((("prompt", prompt), ("response", pair[0]), ("rejected", pair[1])),
                             "or other columns; the chosen answer's, then the rejected one's"),) if prompt else
                (ColumnsHint((("response", pair[0]), ("rejected", pair[1])),
                             "the chosen answer's column, then the rejected one's",
                             left_to_user=("prompt", "unless each holds the whole conversation")),))
    responses = (_by_lower_name(columns, _RESPONSE_NAMES, exclude=prompts[:1])
                 or [c for end in _RESPONSE_SUFFIXES for c in columns if c.lower().endswith("_" + end)])
    if prompts and responses:
        return (ColumnsHint((("prompt", prompts[0]), ("response", responses[0])), "or other columns"),)
    if not responses and (TURNS in columns or any(p.lower() not in ("text", "input") for p in prompts)):
        return ("no column looks like a response: questions alone (an evaluation set) are no training data, give "
                "them to select or run --decontaminate as they are; else ", FIX_HINT)
    return (FIX_HINT,)


def _reads(entry, cols: set) -> bool:
    """Whether format `entry` reads a row of these columns: its prompt column, one of its response columns and the
    columns it also needs."""
    return entry.value in cols and (entry.response is None or bool(set(entry.response) & cols)) \
        and set(getattr(entry, "also", ())) <= cols


def detect_format(columns) -> str | None:
    """The format whose columns are present, or None."""
    cols = set(columns)
    return next((e.name for e in sorted(FORMAT, key=lambda e: e.detect_order) if _reads(e, cols)), None)


def most_read_format(shapes: dict[frozenset, int]) -> tuple[str | None, int]:
    """The format that reads the most rows, `shapes` the columns rows hold (`held_columns`) -> how many rows hold
    them, and how many it reads; ties in detect_format's order (a file of both formats' columns in every row is read
    as it is). Not the first format whose columns any row holds: one row of another schema would make every other
    row a bad row."""
    best, most = None, 0
    for entry in sorted(FORMAT, key=lambda e: e.detect_order):
        n = sum(rows for cols, rows in shapes.items() if _reads(entry, cols))
        if n > most:
            best, most = entry.name, n
    return best, most


def reads_row(fmt: str, columns) -> bool:
    """Whether format `fmt` reads a row holding these columns."""
    return _reads(FORMAT.get(fmt), set(columns))


def held_columns(rec: dict) -> list[str]:
    """The columns a row holds a value in: a null (pandas' NaN too) is none, as a field reads it (field_text)."""
    return [k for k, v in rec.items() if v is not None and not (isinstance(v, float) and v != v)]


def read_columns(fields: FieldMap) -> list[str]:
    """The columns a row is read from (the optional ones of a system prompt, tools and a label aside): what a row
    of other columns is told it lacks."""
    return [c for c in (*fields.prompt_columns, fields.input, fields.response, fields.rejected) if c]


def _root_column(field: str, columns: set) -> str | None:
    """The column a field reads: itself, or for a dotted path (`data.question`) the column of its first key."""
    if field in columns:
        return field
    root = field.split(".")[0]
    return root if "." in field and root in columns else None


def _prompt_columns(prompt_field: str | None, columns: set) -> list[str]:
    """--prompt-field A or A,B -> [A] or [A, B]; a column of that exact name first (a spreadsheet's `Question, as
    asked`, or `question ` with its space), then each part as typed, else without its outer spaces (`A, B`)."""
    if prompt_field is None:
        return []
    if prompt_field in columns:
        return [prompt_field]
    names = [c if c in columns else c.strip() for c in prompt_field.split(",")]
    if not all(names):
        raise CurateError(f"--prompt-field {prompt_field!r}: an empty column name; pass COLUMN or COLUMN,COLUMN")
    return names


def resolve_fields(columns, fmt: str | None, prompt_field: str | None, response_field: str | None,
                   source: str = "dataset", prompts_only: bool = False, rejected_field: str | None = None,
                   label_field: str | None = None) -> FieldMap:
    """The field mapping for these columns: detected, or forced by the user's options. Raises CurateError with a
    one-line message (the option or column at fault, the columns found, the flags that would fix it).
    `prompts_only`: questions alone (io/formats.py's docstring): a format's prompt column without its response
    column is detected too (after every format with both), then a `turns` column, then a column named like a
    question in any case (_PROMPT_NAMES but `text` and `input`: MATH's `problem`). `rejected_field`: the rejected
    answer's column of preference pairs (the format they imply), `response_field` then the chosen one's.
    `label_field`: the column saying which of the two is the chosen answer, row by row
    (`preference.labelled_fields`)."""

    cols = list(columns)
    colset = set(cols)
    shown = _shown_columns(cols)
    prompts = _prompt_columns(prompt_field, colset)
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
            raise MissingColumn(source, option, name, shown)
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
        # a pair of columns named is read as a prompt and a response (prompt-completion, below), not as the
        # conversation column that the columns hold too: `--prompt-field conversations.0.value --response-field
        # conversations.1.value` reads two items of the turns, and a flat pair beside a `messages` column is that
        # pair; glaive's columns are read so for one field named too
        if fmt is not None and fmt != "preference" and FORMAT.get(fmt).response is None and (
                (prompts or response_field) if fmt == "glaive" else
                (prompts and response_field and response_field not in prompts)):
            fmt = None
        named = [*prompts, *([response_field] if response_field else [])]
        if fmt not in (None, "preference", "glaive") and FORMAT.get(fmt).response is None and len(named) == 1 \
                and any(part.isdigit() for part in named[0].split(".")[1:]):  # one item of the turns: not a chat
            flag, other = ("--prompt-field", "--response-field") if prompts else ("--response-field", "--prompt-field")
            raise CurateError(f"{source}: {flag} {named[0]} names one item of a conversation ({fmt}): name the other "
                              f"item too ({other}, a dotted path as well), or the conversation's column alone")
        if fmt is None and prompts:
            if response_field is None:
                found = _by_lower_name(cols, _RESPONSE_NAMES, exclude=prompts)
                if len(found) != 1:
                    pair = _answer_pair(cols)
                    which = (("preference pairs? ", ColumnsHint((("response", pair[0]), ("rejected", pair[1]))))
                             if pair else ("no column looks like one" if not found
                                           else "several could be: " + ", ".join(found),))
                    raise NoResponseColumn(f"{source}: --prompt-field {as_typed(prompt_field)} needs --response-field "
                                           "COLUMN too (", *which, f"); columns found: [{shown}]")
                response_field = found[0]
            fmt = "prompt-completion"  # a custom pair of columns behaves like prompt/completion
        if fmt is None:
            raise UnrecognisedFormat(source, shown, *_fix_hint(cols))

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
        # a `system` column beside ShareGPT turns: LLaMA-Factory's sharegpt keeps the system prompt there, and
        # OpenHermes-2.5 in `system_prompt` (a mixture's shards hold `messages` and a `system` column read from them:
        # not read twice); glaive's `system` column holds the tool schemas too: io/glaive.py reads it
        system = (_system_column(colset, {conv}) if fmt == "sharegpt" else
                  "system" if fmt == "glaive" and "system" in colset and conv != "system" else None)
        return FieldMap(fmt, conv, system=system, prompts_only=prompts_only, tools=_tools_column(colset, {conv}))

    prompt, *extra = prompts or [entry.value]
    if response_field:
        response = response_field
    else:
        response = next((c for c in entry.response if c in colset), entry.response[0])
        if prompts_only and response not in colset:  # questions alone
            response = None
    if response in (prompt, *extra):  # both flags, or one naming the column that the format reads for the other
        given, other = ("response", "prompt") if response_field else ("prompt", "response")
        raise CurateError(f"{source}: " + (
            f"--response-field {response!r} is a --prompt-field column too: the answer would be part of its own "
            "question; name the columns of each" if response_field and prompts else
            f"--{given}-field {response!r} is the {other}'s column too (format {fmt} reads its {other} from it): "
            f"the answer would be part of its own question; pass --{other}-field COLUMN too"))
    missing = [c for c in (prompt, response) if c and _root_column(c, colset) is None]
    if missing:
        which = " and ".join(repr(c) for c in missing)
        found = detect_format(cols)  # a --format that names another format than the columns'
        hint = ((f"these columns are format {found}'s: pass --format {found}, or leave --format out",)
                if found and found != fmt else _fix_hint(cols))
        raise FieldsRefusal(f"{source}: format {fmt} needs column{'s' * (len(missing) > 1)} {which}, not found; "
                            f"columns found: [{shown}]. ", *hint)
    used = {prompt, *extra}
    input_field = _alpaca_input(prompt, colset, {*used, response}) if fmt == "alpaca" else None
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
    """The system prompt's column beside a prompt and a response, or ShareGPT turns: `system`, or Open-Orca's and
    OpenHermes-2.5's `system_prompt`."""
    return next((c for c in ("system", "system_prompt") if c in columns and c not in used), None)


def _preference_fields(cols: list, prompts: list, response_field: str | None, rejected_field: str | None,
                       label_field: str | None, source: str, shown: str) -> FieldMap:
    """preference: `chosen` (or --response-field) and `rejected` (or --rejected-field), with the prompt column
    `prompt` (or --prompt-field) when there is one; without one, `chosen` holds the whole conversation. The two
    answers of a known labelled pair (_LABELLED_PAIRS) need their label, in its order: else pairs would be
    inverted without a word."""
    colset = set(cols)
    chosen, rejected = response_field or "chosen", rejected_field or "rejected"
    missing = [c for c in (chosen, rejected) if _root_column(c, colset) is None]
    if missing:
        raise FieldsRefusal(f"{source}: format preference needs columns {chosen!r} and {rejected!r} "
                            f"({' and '.join(repr(c) for c in missing)} not found); columns found: [{shown}]",
                            *((". ", *_fix_hint(cols)) if _answer_pair(cols) else ()))
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
    named = {chosen: "chosen answer's", rejected: "rejected answer's", prompt: "prompt's"}
    if label_field and label_field in named:
        raise CurateError(f"{source}: --label-field {label_field!r} is the {named[label_field]} column; name the "
                          "column saying which answer is the chosen one (1: --response-field's, 0: --rejected-field's)")
    signed = _signed_pair_refusal(cols)
    if signed and {chosen, rejected} == set(_SIGNED_PAIR[:2]) and label_field in (None, _SIGNED_PAIR[2]):
        raise FieldsRefusal(f"{source}: ", *signed)
    pair = _labelled_pair(cols)
    if pair is None or {chosen, rejected} != set(pair[1:3]):
        return
    _, a, b, labels = pair
    if label_field is None:
        raise FieldsRefusal(f"{source}: {a} and {b} are two answers whose preferred one {labels[0]} names row by "
                            "row: ", _label_hint(pair, f"{labels[0]} 1: {a} is the chosen answer, 0: {b} is",
                                                 prompt=False),
                            "; without it the pairs labelled otherwise would be inverted")
    if label_field in labels and chosen != a:
        raise FieldsRefusal(f"{source}: --label-field {label_field} is 1 where {a} is preferred: ",
                            _label_hint((None, a, b, (label_field,)), "this order would invert every pair",
                                        prompt=False))


def _tools_column(columns: set, used: set) -> str | None:
    """The column of tool schemas, when there is one that no other field reads."""
    return "tools" if "tools" in columns and "tools" not in used else None
