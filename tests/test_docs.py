"""README.md and docs/architecture.md against the code, for the drift that recurs mechanically: a flag README
gives a command that the command does not take, an option nobody documented, an error README quotes that the
tool no longer prints, a `--json` key missing from README's table, a code comment citing a section that is gone,
a module the architecture's map does not name, a function or class the docs name that was renamed, rank logic
outside distributed.py. Fast: no pipeline runs."""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES, ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
PACKAGE = ROOT / "cluster_curate"
SOURCES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# flags of other programs that README's commands and prose name: torchrun's, the golden outputs' script
OTHER_PROGRAMS = {"--nnodes", "--nproc-per-node", "--regenerate"}
# a command line or a span opening with a command's name; a span `shard = load_shard(...)` is Python
COMMAND_LINE = re.compile(r"(?:^|cluster-curate |-m cluster_curate )(\w+)(?= )(?! =)(.*?)(?=cluster-curate |$)")


def _commands() -> dict:
    from cluster_curate.cli import main
    return main.commands


def _flags(command) -> set[str]:
    """The spellings a click command takes, hidden deprecated ones aside (README must use the current ones)."""
    return {f for p in command.params if not getattr(p, "hidden", False) for f in (*p.opts, *p.secondary_opts)}


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _code_spans(text: str) -> list[str]:
    """Inline code spans and the lines of fenced code blocks."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
    return [line for b in blocks for line in b.splitlines()] + inline


def test_every_flag_readme_gives_a_command_is_one_that_command_takes():
    """`cluster-curate CMD ... --flag`, `torchrun ... -m cluster_curate CMD ...` and spans that open with a command's
    name (`select --decontaminate`, `run train.jsonl ... --target t.jsonl`): each flag is in CMD's --help."""
    commands = _commands()
    wrong, checked = [], 0
    for span in _code_spans(README):
        for m in COMMAND_LINE.finditer(span):
            name, rest = m.groups()
            if name not in commands:
                continue
            for flag in FLAG.findall(rest):
                checked += 1
                if flag not in _flags(commands[name]) and flag not in OTHER_PROGRAMS:
                    wrong.append(f"{name} {flag}  (in `{span.strip()}`)")
    assert checked > 40, checked  # the parse found README's commands
    assert not wrong, "README gives a command a flag it does not take:\n" + "\n".join(wrong)


def test_every_flag_readme_names_exists_and_every_option_is_documented():
    """Outside the benchmarks' table (their scripts' own flags), a flag README names is some command's; and every
    option of every command's --help is in README (a negatable one by either spelling)."""
    from cluster_curate.cli import main
    commands = _commands()
    known = {f for c in commands.values() for f in _flags(c)} | _flags(main) | OTHER_PROGRAMS
    prose = README.replace(_section(README, "Benchmarks and evidence"), "")
    unknown = sorted(set(FLAG.findall(prose)) - known)
    assert not unknown, f"README names flags no command takes: {unknown}"
    named = set(FLAG.findall(README))
    undocumented = sorted({f"{name} {p.opts[-1]}" for name, c in commands.items() for p in c.params
                           if p.opts[-1].startswith("--") and not getattr(p, "hidden", False)
                           and p.name != "help" and not named & {*p.opts, *p.secondary_opts}})
    assert not undocumented, f"options README does not mention: {undocumented}"


def test_every_option_in_help_says_what_it_does():
    """No option of a command's --help is a bare flag and default: each has its line of help."""
    bare = sorted(f"{name} {p.opts[-1]}" for name, c in _commands().items() for p in c.params
                  if p.param_type_name == "option" and not getattr(p, "hidden", False) and not (p.help or "").strip())
    assert not bare, f"options without help: {bare}"


def _as_pattern(quoted: str) -> re.Pattern:
    """A message as README quotes it: `…` / `...` stand for any text, `[...]` for a list."""
    parts = re.split(r"\s*(?:…|\.\.\.)\s*", quoted.replace("[...]", "…"))
    return re.compile(r".*".join(re.escape(p) for p in parts))


BAD = FIXTURES / "bad"
GSM8K = FIXTURES / "gsm8k" / "train-300.jsonl"
_ROWS = [json.loads(line) for line in GSM8K.read_text(encoding="utf-8").splitlines()[:20]]
# files whose whole is a mistake, written by the test (name -> bytes)
MADE = {
    "data.tsv": "question\tanswer\n" + "".join(f"q{i}\ta{i}{chr(9) + 'x' if i == 10 else ''}\n" for i in range(12)),
    "nested.jsonl": "".join(json.dumps({"data": {"question": r["question"]}}) + "\n" for r in _ROWS),
    "utf16.jsonl": "".join(json.dumps(r) + "\n" for r in _ROWS).encode("utf-16"),
    "array.jsonl": json.dumps(_ROWS),
    "squad.json": json.dumps({"version": "1.1", "data": _ROWS}, indent=1),
}


@pytest.mark.parametrize("argv, quoted", [
    (["inspect", "data.tsv"], "data.tsv:12: 3 fields where the header has 2"),
    (["inspect", "nested.jsonl", "--prompt-field", "data.question", "--response-field", "data.answer"],
     "field 'data.answer': missing ('data' has no key 'answer')"),
    (["inspect", "utf16.jsonl"], "UTF-16 text (it starts with a UTF-16 byte-order mark)"),
    (["inspect", "array.jsonl"], "holds one JSON array, not JSON lines"),
    (["inspect", "squad.json"], "one JSON object whose key 'data' holds a list of N records"),
    (["inspect", BAD / "invalid_json.jsonl"], "ERROR: data.jsonl:1234: invalid JSON (…)"),
    (["run", GSM8K, "--out", "r", "--token-fraction", "0.02", "--num-shards", "8", "--micro-batch-size", "4"],
     "… rows, but --token-fraction F … selects at most …"),
    (["inspect", BAD / "empty_response.jsonl"], "field 'output': empty response"),
    (["inspect", BAD / "unknown_format.jsonl"], "unrecognised record format; columns found: [...]"),
    (["inspect", "someone/no-such-dataset"], "the hub is offline (…) and '…' is not in the local cache"),
    (["embed", GSM8K, "--out", "e.parquet", "--features", "hidden", "--model", "someone/no-such-model"],
     "not found locally or in the Hugging Face cache, and the hub is offline"),
])
def test_troubleshooting_quotes_what_the_tool_prints(argv, quoted, cli_runner, tmp_path, monkeypatch):
    """Each of these rows of README's Troubleshooting table quotes the error the tool prints (file names, line
    numbers and field names aside: README's are examples). The hub is offline, as conftest.py makes it."""
    table = _section(README, "Troubleshooting")
    assert f"`{quoted}`" in table, f"README's Troubleshooting quotes no {quoted!r}"
    from cluster_curate.cli import main
    monkeypatch.chdir(tmp_path)
    for name, content in MADE.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    res = cli_runner.invoke(main, [str(a) for a in argv] + ["-q"])
    assert res.exit_code == 2, res.output
    said = res.output.strip().splitlines()[-1]
    generic = re.sub(r"\S*/(\w+\.jsonl)", "data.jsonl", said)
    generic = re.sub(r"(data\.jsonl):\d+", r"\1:1234", generic)
    generic = re.sub(r"field '(answer|question)'", "field 'output'", generic)
    generic = re.sub(r"a list of \d+ records", "a list of N records", generic)
    generic = re.sub(r"--token-fraction [\d.]+", "--token-fraction F", generic)
    assert _as_pattern(quoted).search(generic), f"README quotes {quoted!r}; the tool prints {said!r}"


def test_readme_json_table_names_every_key_of_the_schema():
    """README's "JSON output" table has a row per command naming each top-level key of its schema, a key that
    may be absent marked `?` as in cluster_curate/summary_schema.py."""
    from cluster_curate.summary_schema import SCHEMAS
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", _section(README, "JSON output"), re.M))
    problems = []
    for command, schema in SCHEMAS.items():
        row = rows.get(command, "")
        top = re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", row)  # the keys of nested objects are in parentheses
        documented = set(re.findall(r"`([a-z_]+\??)`", top))
        named = {k.rstrip("?") for k in re.findall(r"`([a-z_]+\??)`", row)}
        problems += [f"{command}: {key}" for key in schema if key.rstrip("?") not in named
                     or key.rstrip("?") in {d.rstrip("?") for d in documented} and key not in documented]
        problems += [f"{command}: README's {key} is no key of the schema" for key in documented - set(schema)]
    assert not problems, f"README's JSON table and summary_schema.py differ: {problems}"


def _headings(text: str) -> set[str]:
    return {h.strip() for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _citations(pattern: str) -> list[tuple[str, str]]:
    """(file, cited section) of every citation in the package, tests and benchmarks (comments joined over lines)."""
    found = []
    for path in SOURCES:
        text = re.sub(r"\s*\n\s*#?\s*", " ", path.read_text(encoding="utf-8"))
        found += [(str(path.relative_to(ROOT)), m) for m in re.findall(pattern, text)]
    return found


def test_code_cites_sections_that_exist():
    """A citation of a section of docs/architecture.md names one of its headings; of README, a README heading (or
    the part of one a command's heading spells)."""
    arch = _headings(ARCHITECTURE)
    readme = _headings(README)
    cited = _citations(r'architecture\.md,? "([^"]+)"')
    assert len(cited) > 20
    gone = [f"{f}: {s!r}" for f, s in cited if s not in arch]
    assert not gone, f"citations of docs/architecture.md sections that do not exist ({sorted(arch)}): {gone}"
    gone = [f"{f}: {s!r}" for f, s in _citations(r'README(?:\.md)?,? "([^"]+)"') if not any(s in h for h in readme)]
    assert not gone, f"citations of README sections that do not exist: {gone}"


def _named_modules(module_map: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]+", module_map))


@pytest.mark.parametrize("where", ["docs/architecture.md, Layers", "README.md, Development"])
def test_every_module_is_in_the_module_maps(where):
    """Both module maps (architecture's "Layers", README's "Development") name every module of the package, and
    no module that is gone."""
    text, heading = (ARCHITECTURE, "Layers") if where.startswith("docs") else (README, "Development")
    module_map = _section(text, heading).split("```", 2)[1]
    modules = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")
    missing = [str(m) for m in modules if m.stem not in _named_modules(module_map)]
    assert not missing, f"{where} does not name {missing}"
    stems = {m.stem for m in modules} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    gone = sorted(set(re.findall(r"([A-Za-z_]+)\.py\b", module_map)) - stems - {"__init__", "__main__"})
    assert not gone, f"{where} names modules that do not exist: {gone}"


def test_only_distributed_reads_ranks_from_the_environment():
    """docs/architecture.md, "Ranks": distributed.py is the only module that knows ranks and world size."""
    variable = r"""["'](?:RANK|WORLD_SIZE|LOCAL_RANK)["']"""
    reads = re.compile(rf"environ[^\n]{{0,40}}{variable}|{variable}\s+(?:not )?in\s+(?:os\.)?environ")
    readers = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
               if p.name != "distributed.py" and reads.search(p.read_text(encoding="utf-8"))]
    assert not readers, f"modules reading torchrun's rank variables themselves: {readers}"


def _has(module, name: str) -> bool:
    """`module.name` exists; a name the module makes on first use from a package not installed here
    (integrations/axolotl.py builds its trainers where axolotl is) counts: its `__getattr__` knows the name and
    fails importing that package, where an unknown name is an AttributeError."""
    try:
        return hasattr(module, name)
    except ImportError:
        return True


def _has_member(cls: type, name: str) -> bool:
    """A class's attribute, field, or attribute its instances set (`self.name = ...`, `self.name: T = ...`)."""
    import inspect
    return hasattr(cls, name) or bool(re.search(rf"self\.{name}\b\s*[:=]", inspect.getsource(cls)))


def test_the_names_the_docs_give_exist():
    """README's `cluster_curate.module.name` and docs/architecture.md's `module.name` / `path/module.name` /
    `Class.method` (a module of the package, a class of one) name what the code has: a rename shows here."""
    import importlib
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        dotted = ".".join(("cluster_curate", *parts[:-1], *([] if parts[-1] == "__init__" else parts[-1:])))
        module = importlib.import_module(dotted)
        modules[dotted] = module
        for key in ("/".join(parts), parts[-1]) if parts[-1] != "__init__" else ("/".join(parts[:-1]),):
            modules.setdefault(key, module)
    classes = {n: c for m in list(modules.values()) for n, c in vars(m).items()
               if isinstance(c, type) and c.__module__ == m.__name__}
    missing = [name for name in set(re.findall(r"cluster_curate(?:\.\w+)+", README))
               if name not in modules and not _has(modules[name.rsplit(".", 1)[0]], name.rsplit(".", 1)[1])]
    files = r"py|npz|npy|parquet|jsonl?|yaml|lock|tmp|old|md"
    for span in _code_spans(ARCHITECTURE):
        for owner, name in re.findall(r"((?:\w+/)*\w+)(?:\.py)?\.(\w+)", span):
            if re.fullmatch(files, name):
                continue
            if owner in modules and not _has(modules[owner], name) or owner in classes and not _has_member(
                    classes[owner], name):
                missing.append(f"{owner}.{name}")
    assert not missing, f"names the docs give that the code does not have: {sorted(missing)}"


def test_one_short_flag_per_option_on_every_command():
    """`export shards/ -o exp`: `-o` was no option of shard and export (embed, cluster, select, run and report took
    it), nor `-m` of export (shard and run took it). An option's short flag is the same on every command."""
    from cluster_curate.commands import COMMANDS, spec
    short: dict[str, set] = {}
    for name in COMMANDS:
        for o in spec(name).options:
            if o.name in ("out", "micro_batch_size", "num_shards", "world_size"):
                short.setdefault(o.name, set()).add(next((f for f in o.cli_flags if not f.startswith("--")), None))
    assert short == {"out": {"-o"}, "micro_batch_size": {"-m"}, "num_shards": {"-n"}, "world_size": {"-n"}}
