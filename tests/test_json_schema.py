"""Every command's `--json` object against its documented schema (cluster_curate/summary_schema.py, README
"JSON output"): run through the CLI on the fixtures, one pipeline directory for all of them."""

from __future__ import annotations

import json
import re

import pytest

from cluster_curate.summary_schema import COMMON, SCHEMAS, check, schema_of
from conftest import FIXTURES

pytestmark = pytest.mark.xdist_group("json-schema")  # one worker makes the objects, once

DATA = str(FIXTURES / "gsm8k" / "train-300.jsonl")
FAST = ["--features", "text", "--dim", "16"]


def _json(cli_runner, *args, code=0) -> dict:
    from cluster_curate.cli import main
    r = cli_runner.invoke(main, [str(a) for a in args] + ["--json"])
    assert r.exit_code == code, r.output
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout  # one object, on one line, and nothing else on stdout
    return json.loads(lines[0])


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """The --json object of each command, made in one folder (each command's output is the next one's input)."""
    from click.testing import CliRunner

    from cluster_curate.commands.verify import planned_grid
    from cluster_curate.loader import ConsumedLog
    cli, d = CliRunner(), tmp_path_factory.mktemp("pipeline")
    p = {name: d / name for name in ("embeddings.parquet", "clusters.parquet", "selection.parquet", "shards")}
    got = {"inspect": _json(cli, "inspect", DATA),
           "embed": _json(cli, "embed", DATA, "--out", p["embeddings.parquet"], *FAST),
           "cluster": _json(cli, "cluster", p["embeddings.parquet"], "--out", p["clusters.parquet"]),
           "select": _json(cli, "select", p["clusters.parquet"], "--out", p["selection.parquet"], "--fraction", 0.31,
                           "--dedup", 0.99),
           # without pairing by length, micro-batch 2 leaves a balance worth a warning on these 93 rows
           "shard": _json(cli, "shard", p["selection.parquet"], "--data", DATA, "--out", p["shards"], "-n", 4,
                          "-m", 2, "--no-pair-lengths"),
           "run": _json(cli, "run", DATA, "--out", d / "run", *FAST, "--fraction", 0.31, "-n", 4, "-m", 2,
                        "--no-pair-lengths")}
    got["report"] = _json(cli, "report", d, "--out", d / "plots")
    got["export"] = _json(cli, "export", p["shards"], "--for", "hf", "--out", d / "hf")
    _, grid, weights = planned_grid(p["shards"])
    for rank in range(grid.shape[1]):
        with ConsumedLog(d / "log", rank=rank) as log:
            for step in range(grid.shape[0]):
                other = (rank + 1) % grid.shape[1]  # each rank trained on the next one's shard
                log.record(grid[step, other], weights[step, other])
    got["verify"] = _json(cli, "verify", p["shards"], "--log", d / "log", code=3)
    return got


@pytest.mark.parametrize("command", list(SCHEMAS))
def test_json_object_follows_the_schema(objects, command):
    obj = objects[command]
    assert check(obj, schema_of(command)) == []
    assert list(obj)[:len(COMMON)] == list(COMMON) and obj["command"] == command


def test_json_figures_are_numbers_and_warnings_are_in_the_object(objects):
    shard, select, cluster = objects["shard"], objects["select"], objects["cluster"]
    # the figures that used to be display strings ("1.0519 / 1.1213", "1 / 14 / 61")
    assert 1 <= shard["token_imbalance"]["mean"] <= shard["token_imbalance"]["p95"]
    assert cluster["cluster_size"]["min"] <= cluster["cluster_size"]["median"] <= cluster["cluster_size"]["max"]
    assert select["selected"] == 93 and select["kept"] == 0.31 and select["budget"]["rows"] == 93
    assert sum(r["selected"] for r in select["per_cluster"]) == 93
    # shard warns about the balance micro-batch 2 allows unpaired: printed on stderr and in the object
    assert shard["warnings"] and "--micro-batch-size" in shard["warnings"][0]
    # the same data and options: the same warnings, but for where each wrote its left-over ids
    assert [w.replace("/run/shards/", "/shards/") for w in objects["run"]["summaries"]["shard"]["warnings"]] == \
        shard["warnings"]
    assert objects["verify"]["ok"] is False and objects["verify"]["problem_count"] > 0
    # the artifact path of each command
    assert objects["embed"]["output"].endswith("embeddings.parquet") and objects["shard"]["output"].endswith("shards")
    assert objects["inspect"]["output"] is None and objects["report"]["output"].endswith("plots")


def test_checker_finds_what_breaks_a_schema():
    schema = {"a": int, "b?": {"c": [str]}, "d": (float, None)}
    assert check({"a": 1, "d": None}, schema) == []
    problems = check({"a": True, "b": {"c": ["x", 2]}, "Bad Key": 0}, schema)
    assert problems == ["$: key 'Bad Key' is not snake_case", "$: missing key 'd'", "$.a: True is not int",
                        "$.b.c[1]: 2 is not str", "$: key 'Bad Key' is not in the schema"]


def _text(*args) -> str:
    """A command's human summary, piped (not a terminal: 80 columns)."""
    from click.testing import CliRunner

    from cluster_curate.cli import main
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_human_summaries_speak_one_vocabulary_and_never_cut_a_path(objects, tmp_path):
    from pathlib import Path
    embeddings = objects["embed"]["output"]
    pipeline = Path(embeddings).parent
    embed = _text("embed", DATA, "--out", tmp_path / "e.parquet", *FAST)
    for raw in ("artifact_rows", "rows_in_data", "None", "{", "rows_per_s"):  # no raw keys or values
        assert raw not in embed, embed
    assert "text (16 dims)" in embed and "feature pass rate" in embed
    # the selected share is "kept" in select and report alike
    select = _text("select", pipeline / "clusters.parquet", "--out", tmp_path / "s.parquet", "--fraction", 0.31)
    report = _text("report", pipeline / "selection.parquet")
    for text in (select, report):
        assert re.search(r"kept \(fraction of the rows embedded\) +│ 0.31", text) and "kept ┃" in text, text
        assert "share" not in text
    # a long path wraps onto the next lines instead of being cut with "…"
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6) / "clusters.parquet"
    cluster = _text("cluster", embeddings, "--out", deep)
    assert "…" not in cluster
    assert "".join(line.strip("│ ") for line in cluster.splitlines()[:12] if "│" in line).find(deep.name) >= 0


def test_a_mixtures_inspect_object_follows_the_schema_with_each_inputs_fields_as_one_inputs(cli_runner, tmp_path):
    """A mixture's `inspect --json` broke its schema: `fields` held an object per input where one input's holds
    column names, and each of `inputs` gave its fields as one display string. Each input's `fields` is now the
    object that input alone gives; the bad-row count is `bad_rows` (as embed's), `rejected` kept beside it for one
    release, since a preference pair's rejected answer is another thing."""
    from test_datasets import write_jsonl
    from test_input_formats import hh_rows
    rows, _ = hh_rows(6)
    rows[4]["chosen"] = rows[4]["chosen"].rpartition("\n\nAssistant:")[0] + "\n\nAssistant: "  # one bad row
    write_jsonl(tmp_path / "hh.jsonl", rows)
    alone = {path: _json(cli_runner, "inspect", path, "--on-bad-row", "skip") for path in (DATA, tmp_path / "hh.jsonl")}
    mixture = _json(cli_runner, "inspect", DATA, tmp_path / "hh.jsonl", "--on-bad-row", "skip")
    assert check(mixture, schema_of("inspect")) == []
    assert [i["fields"] for i in mixture["inputs"]] == [one["fields"] for one in alone.values()]
    assert [(i["bad_rows"], i["rejected"]) for i in mixture["inputs"]] == [(0, 0), (1, 1)]
    assert (mixture["bad_rows"], mixture["rejected"]) == (1, 1)
    assert [(one["bad_rows"], one["rejected"]) for one in alone.values()] == [(0, 0), (1, 1)]
