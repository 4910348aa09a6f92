"""The Python API and the option declarations: `cluster_curate.run` is the CLI's `run` without click, each
option has one declaration (CLI, run, Python API), deprecated spellings still work and warn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cluster_curate as cc
from cluster_curate.cli import main
from cluster_curate.errors import CurateError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"
OPTS = {"dim": 32, "k": 8, "fraction": 0.31, "num_shards": 2, "micro_batch_size": 2}


def test_python_run_equals_the_cli_run(cli_runner, tmp_path):
    from cluster_curate import console
    console.configure(quiet=True)
    result = cc.run(str(DATA), str(tmp_path / "api"), **OPTS)
    assert [s["status"] for s in result["stages"]] == ["ran"] * 4
    args = [a for k, v in OPTS.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    cli = cli_runner.invoke(main, ["run", str(DATA), "--out", str(tmp_path / "cli"), *args, "--json"])
    assert cli.exit_code == 0, cli.output
    # the same options, defaults included, so the same up-to-date requests and output fingerprints
    api_state = json.loads((tmp_path / "api" / "run-state.json").read_text())
    assert api_state == json.loads((tmp_path / "cli" / "run-state.json").read_text())
    again = cc.run(str(DATA), str(tmp_path / "api"), **OPTS)
    assert [s["status"] for s in again["stages"]] == ["up to date"] * 4


def test_python_api_rejects_an_unknown_option(tmp_path):
    with pytest.raises(CurateError, match="unknown option.*fractoin"):
        cc.select(str(tmp_path / "c.parquet"), str(tmp_path / "s.parquet"), fractoin=0.3)
    with pytest.raises(CurateError, match="--within must be one of auto, random, far"):
        cc.select(str(tmp_path / "c.parquet"), str(tmp_path / "s.parquet"), fraction=0.3, within="sideways")


def test_deprecated_embed_spelling_warns_and_means_num_parts(cli_runner, tmp_path):
    new = cli_runner.invoke(main, ["embed", str(DATA), "--out", str(tmp_path / "new"), "--dim", "16",
                                   "--num-parts", "2", "--part-index", "1", "--json"])
    old = cli_runner.invoke(main, ["embed", str(DATA), "--out", str(tmp_path / "old"), "--dim", "16",
                                   "--num-shards", "2", "--shard-index", "1", "--json"])
    assert new.exit_code == 0 and old.exit_code == 0, old.output
    assert "--num-shards is deprecated" in old.stderr and "--shard-index is deprecated" in old.stderr
    assert "deprecated" not in new.stderr
    assert json.loads(old.stdout)["process"] == json.loads(new.stdout)["process"] == "piece 1/2"
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == sorted(p.name for p in (tmp_path / "new").iterdir())


def test_cli_choices_come_from_the_registries():
    from cluster_curate.features.embed import FEATURE_KINDS
    from cluster_curate.io.formats import FORMATS
    from cluster_curate.within_orders import WITHIN_CHOICES, WITHIN_ORDERS
    from cluster_curate.sharding import ALLOCATIONS

    def choices(command, name):
        param = next(p for p in main.commands[command].params if p.name == name)
        return tuple(param.type.choices)

    assert choices("select", "within") == WITHIN_CHOICES == ("auto", *WITHIN_ORDERS) == choices("run", "within")
    assert choices("shard", "allocation") == ALLOCATIONS
    assert choices("inspect", "fmt") == ("auto", *FORMATS)
    assert set(FEATURE_KINDS.names) == {"gradient", "lora-gradient", "hidden", "loss-trajectory", "text", "semantic"}
    # run takes shard's --num-shards (ranks), not embed's job-array pieces
    run_names = {p.name for p in main.commands["run"].params}
    assert "num_shards" in run_names and "num_parts" not in run_names and "part_index" not in run_names


def test_stage_by_stage_reads_the_data_as_embed_did(tmp_path):
    """`embed --on-bad-row skip` (or a field mapping) is recorded with the dataset: cluster's kinds, select and
    shard read the data the same way without being told again, and the shards equal run's."""
    from cluster_curate import console
    console.configure(quiet=True)
    lines = DATA.read_text().splitlines()
    bad = json.loads(lines[5])
    bad["answer"] = ""  # an empty response: a bad row
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines[:5] + [json.dumps(bad)] + lines[6:]) + "\n")
    with pytest.raises(CurateError, match=r"data.jsonl:6: field 'answer'"):
        cc.embed(str(data), str(tmp_path / "refused.parquet"), dim=32)
    cc.embed(str(data), str(tmp_path / "e.parquet"), dim=32, on_bad_row="skip")
    cc.cluster(str(tmp_path / "e.parquet"), str(tmp_path / "c.parquet"), k=8)
    cc.select(str(tmp_path / "c.parquet"), str(tmp_path / "s.parquet"), fraction=0.31)
    cc.shard(str(tmp_path / "s.parquet"), str(data), str(tmp_path / "shards"), num_shards=2, micro_batch_size=2)
    cc.run(str(data), str(tmp_path / "run"), on_bad_row="skip", **OPTS)
    import pyarrow.parquet as pq
    for staged, name in (("c.parquet", "clusters.parquet"), ("s.parquet", "selection.parquet")):
        assert pq.read_table(tmp_path / staged).column("id").equals(pq.read_table(tmp_path / "run" / name).column("id"))
    shards = sorted((tmp_path / "shards").glob("shard-*.parquet"))
    assert len(shards) == 2
    for ours in shards:
        assert pq.read_table(ours).equals(pq.read_table(tmp_path / "run" / "shards" / ours.name))


def test_stage_by_stage_reads_a_mixture_as_embed_did(tmp_path):
    """The same for a mixture given as several --data paths: `shard --data a --data b` reads each input as embed
    did (--on-bad-row skip recorded per input); it was refused as 'a different dataset'."""
    from cluster_curate import console
    console.configure(quiet=True)
    lines = DATA.read_text().splitlines()
    bad = json.loads(lines[5])
    bad["answer"] = ""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(lines[:5] + [json.dumps(bad)] + lines[6:150]) + "\n")
    b.write_text("\n".join(lines[150:]) + "\n")
    cc.run([str(a), str(b)], str(tmp_path / "run"), on_bad_row="skip", **OPTS)
    run = tmp_path / "run"
    cc.shard(str(run / "selection.parquet"), [str(a), str(b)], str(tmp_path / "shards"), num_shards=2,
             micro_batch_size=2)
    import pyarrow.parquet as pq
    for ours in sorted((tmp_path / "shards").glob("shard-*.parquet")):
        assert pq.read_table(ours).equals(pq.read_table(run / "shards" / ours.name))


def test_run_takes_a_token_budget(tmp_path):
    """run's up-front check knows the token modes (it raised KeyError on --token-budget / --token-fraction)."""
    from cluster_curate import console
    console.configure(quiet=True)
    opts = {k: v for k, v in OPTS.items() if k != "fraction"}
    result = cc.run(str(DATA), str(tmp_path / "r"), token_fraction=0.3, **opts)
    assert [s["status"] for s in result["stages"]] == ["ran"] * 4
    tokens = result["summaries"]["select"]["tokens_selected"]
    assert 0.28 * tokens["total"] < tokens["selected"] <= 0.3 * tokens["total"]  # within a row of the budget
