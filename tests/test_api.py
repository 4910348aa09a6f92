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


def test_an_option_given_twice_with_other_values_warns_which_is_used(cli_runner, tmp_path):
    """click keeps the last value of an option given twice, silently: `--target a --target b` dropped a. The last
    still wins (a Makefile's later override), and the warning says so; the same value twice is no warning."""
    from cluster_curate.cli import _repeated_options
    params = main.commands["run"].params
    assert _repeated_options(params, ["d.jsonl", "--fraction", "0.3", "--fraction=0.5", "-n4", "-n", "4", "-n", "8",
                                      "--quiet", "--k", "5", "--k", "5", "--", "--fraction", "0.1"]) == [
        ("--fraction", ["0.3", "0.5"]), ("-n", ["4", "4", "8"])]
    r = cli_runner.invoke(main, ["embed", str(DATA), "--out", str(tmp_path / "e.parquet"), "--dim", "16",
                                 "--features", "text", "--dim", "8", "--json"])
    assert r.exit_code == 0, r.output
    said = "--dim given 2 times: the last, 8, is used (not 16)"
    assert said in r.stderr and json.loads(r.stdout)["warnings"] == [said]
    assert json.loads(r.stdout)["dims"] == {"text": 8}
    # a flag and its negation likewise; a deprecated spelling beside the current one is refused (it won, unsaid)
    assert _repeated_options(main.commands["cluster"].params, ["e.parquet", "--split-mixed", "--no-split-mixed"]) == [
        ("--split-mixed", ["--split-mixed", "--no-split-mixed"])]
    r = cli_runner.invoke(main, ["embed", str(DATA), "--out", str(tmp_path / "p"), "--num-shards", "2",
                                 "--num-parts", "1"])
    assert r.exit_code == 2 and r.stderr.strip() == (
        "ERROR: --num-shards (deprecated) and --num-parts both given; give --num-parts alone")
    assert not (tmp_path / "p").exists()


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


TEXT = {"features": "text", "dim": 16}


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    """Embeddings and 40 clusters of the 300 rows (more than a screen's 32 rows of select's table)."""
    from cluster_curate import console
    console.configure(quiet=True)
    d = tmp_path_factory.mktemp("clustered")
    cc.embed(str(DATA), str(d / "e.parquet"), **TEXT)
    cc.cluster(str(d / "e.parquet"), str(d / "c.parquet"), k=40)
    return d


def _cli_json(cli_runner, *args):
    result = cli_runner.invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_api_gets_every_cluster_of_the_table_as_json_does(cli_runner, clustered, tmp_path):
    """select's table was cut to a screen's 33 rows (a '...' row among them) for the API and run's summaries;
    only the screen condenses it now."""
    summary, table = cc.select(str(clustered / "c.parquet"), str(tmp_path / "s.parquet"), fraction=0.3)
    assert len(table) == summary["clusters"] == 40 and "..." not in [r["cluster"] for r in table]
    assert sum(r["selected"] for r in table) == summary["selected"]
    cli = _cli_json(cli_runner, "select", str(clustered / "c.parquet"), "--out", str(tmp_path / "cli.parquet"),
                    "--fraction", "0.3")
    assert cli["per_cluster"] == table
    run = cc.run(str(DATA), str(tmp_path / "run"), k=40, fraction=0.3, num_shards=2, **TEXT)
    assert len(run["summaries"]["select"]["per_cluster"]) == 40
    screen = cli_runner.invoke(main, ["select", str(clustered / "c.parquet"), "--out", str(tmp_path / "screen.parquet"),
                                      "--fraction", "0.3"])
    assert screen.exit_code == 0 and "..." in screen.stdout.split()  # the smallest and largest 16 on a screen


@pytest.mark.parametrize("call, line", [
    (lambda c, o: cc.select(c / "c.parquet", o, budget=True), "--budget: True is not a number"),
    (lambda c, o: cc.select(c / "c.parquet", o, fraction=0.3, seed=1.5), "--seed: 1.5 is not a whole number"),
    (lambda c, o: cc.select(c / "c.parquet", o, fraction="a third"), "--fraction: 'a third' is not a valid float"),
    (lambda c, o: cc.cluster(c / "e.parquet", o, k=10.5), "--k: 10.5 is not a whole number"),
    (lambda c, o: cc.cluster(c / "e.parquet", o, k=0), "--k: must be >= 1, got 0"),
    (lambda c, o: cc.run(DATA, o, fraction=0.3, num_shards=2, seed=2**40),
     "--seed: 1099511627776 is not in the range 0<=x<=4294967295"),
    (lambda c, o: cc.run(DATA, o, fraction=0.3, num_shards=[2]), "--num-shards: [2] is not a number"),
    (lambda c, o: cc.run(DATA, o, fraction=0.3), "run: missing option --num-shards"),
    (lambda c, o: cc.shard(c / "c.parquet", num_shards=2), "shard: missing option --out"),
])
def test_the_api_refuses_what_the_cli_refuses_before_any_stage_runs(clustered, tmp_path, call, line):
    with pytest.raises(CurateError) as e:
        call(clustered, tmp_path / "out")
    assert str(e.value) == line
    assert not (tmp_path / "out").exists()


def test_the_api_records_the_values_the_cli_does(cli_runner, clustered, tmp_path):
    """Text, a float for a count and numpy's scalars converted as click converts the CLI's text: the same params
    and fingerprint (np.int64(90) was recorded as "90"), and a summary json.dumps takes."""
    import numpy as np

    from cluster_curate.console import machine
    from cluster_curate.io.artifacts import read_meta
    summary, _ = cc.select(clustered / "c.parquet", tmp_path / "api.parquet", budget=np.int64(300) * 3 // 10,
                           seed=np.int64(3), dedup="0.9", balance_power=np.float64(0.5))
    _cli_json(cli_runner, "select", str(clustered / "c.parquet"), "--out", str(tmp_path / "cli.parquet"),
              "--budget", "90", "--seed", "3", "--dedup", "0.9", "--balance-power", "0.5")
    api, cli = read_meta(tmp_path / "api.parquet"), read_meta(tmp_path / "cli.parquet")
    assert api.params == cli.params and api.fingerprint == cli.fingerprint
    assert json.loads(json.dumps(machine(summary)))["out"] == str(tmp_path / "api.parquet")
    opts = {"k": 8.0, "fraction": "0.31", "num_shards": 2.0, "micro_batch_size": np.int64(2), "seed": "4"}
    cc.run(str(DATA), str(tmp_path / "api"), **opts, **TEXT)
    _cli_json(cli_runner, "run", str(DATA), "--out", str(tmp_path / "cli"), "--features", "text", "--dim", "16",
              "--k", "8", "--fraction", "0.31", "--num-shards", "2", "--micro-batch-size", "2", "--seed", "4")
    assert (json.loads((tmp_path / "api" / "run-state.json").read_text())
            == json.loads((tmp_path / "cli" / "run-state.json").read_text()))


def test_report_and_shard_take_their_inputs_as_the_cli_does(clustered, tmp_path):
    """report took one path's letters for paths, a Path or an unknown keyword raised TypeError; shard's data is
    optional as --data is; a pathlib.Path `out` is a string in the JSON form of the summary."""
    from cluster_curate.console import machine
    cc.select(str(clustered / "c.parquet"), str(tmp_path / "s.parquet"), fraction=0.3)
    sections, plots = cc.report(str(tmp_path / "s.parquet"))
    assert cc.report(tmp_path / "s.parquet") == cc.report([str(tmp_path / "s.parquet")]) == (sections, plots)
    assert [title for title, _, _ in sections][:1] and plots == []
    with pytest.raises(CurateError) as e:
        cc.report([str(tmp_path / "s.parquet")], plots="p")
    assert str(e.value) == "report: unknown option(s) plots (known: force, out, seed)"
    manifest = cc.shard(str(tmp_path / "s.parquet"), out=tmp_path / "shards", num_shards=2)
    assert json.loads(json.dumps(machine(manifest)))["out"] == str(tmp_path / "shards")
    assert len(list((tmp_path / "shards").glob("shard-*.parquet"))) == 2
