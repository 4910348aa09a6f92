"""`run`'s up-to-date check reads options that make the same features as the same run (README, `run`: "an option
given at the value its stage takes without it ... is the same run"), and embed refuses --dim and --pool where no
feature reads them, as it refuses --encoder, --model and --device."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster_curate.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"
STEP = ["--fraction", "0.3", "--num-shards", "2", "--micro-batch-size", "2"]
FAST = ["--features", "text", "--dim", "16", "--k", "6", *STEP]


def _rows(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"rows-{n}.jsonl"
    path.write_text("".join(DATA.read_text().splitlines(keepends=True)[:n]))
    return path


def _statuses(runner, data, out, *argv) -> list[str]:
    result = runner.invoke(main, ["run", str(data), "--out", str(out), *argv, "--json"])
    assert result.exit_code == 0, result.output
    return [s["status"] for s in json.loads(result.stdout)["stages"]]


def _refused(runner, data, out, *argv) -> str:
    result = runner.invoke(main, ["run", str(data), "--out", str(out), *argv])
    assert result.exit_code == 2, result.output
    return result.stderr


# One run per kind of feature, made once: a run that is up to date, or refused, writes nothing.
@pytest.fixture(scope="module")
def text_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("text") / "r"
    assert _statuses(CliRunner(), DATA, out, *FAST) == ["ran"] * 4
    return DATA, out, FAST


@pytest.fixture(scope="module")
def model_run(tmp_path_factory):
    from tiny_lm import build_llama
    root = tmp_path_factory.mktemp("model")
    model = build_llama(root / "models" / "tiny")
    build_llama(root / "models" / "other", hidden=32)
    data, out = _rows(root, 30), root / "r"
    argv = ["--features", "gradient", "--k", "3", *STEP, "--model", os.path.relpath(model)]  # models/tiny's like
    assert _statuses(CliRunner(), data, out, *argv) == ["ran"] * 4
    return data, out, argv


@pytest.fixture(scope="module")
def semantic_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("semantic")
    data, out = _rows(root, 30), root / "r"
    argv = ["--features", "semantic", "--k", "3", *STEP]
    assert _statuses(CliRunner(), data, out, *argv) == ["ran"] * 4
    return data, out, argv


@pytest.mark.parametrize("extra", [["--batch-tokens", "4096"], ["--feature-weights", "1"],
                                   ["--feature-weights", "1.0"], ["--trust-remote-code"],
                                   ["--commit-every", "100"], ["--batch-rows", "1000"]],
                         ids=" ".join)
def test_text_run_is_up_to_date_with_what_makes_the_same_features(cli_runner, text_run, extra):
    data, out, argv = text_run
    assert _statuses(cli_runner, data, out, *argv, *extra) == ["up to date"] * 4


@pytest.mark.parametrize("extra, said", [(["--max-length", "512"], "--max-length 512 is not used by --features text"),
                                         (["--proxy-size", "base"], "--proxy-size base is only used by the proxy")])
def test_text_run_refuses_a_model_option_no_model_reads(cli_runner, text_run, extra, said):
    data, out, argv = text_run  # else silently ignored (as --dim and --device are refused)
    assert said in _refused(cli_runner, data, out, *argv, *extra)


def test_text_run_still_refuses_what_text_reads(cli_runner, text_run):
    data, out, argv = text_run
    assert "other embed options (--dim 16 -> 32)" in _refused(cli_runner, data, out, *argv, "--dim", "32")
    assert "(--feature-weights (not given) -> 2)" in _refused(cli_runner, data, out, *argv, "--feature-weights", "2")


@pytest.mark.parametrize("extra", ["--model ./{model}/", "--model {absolute}", "--batch-tokens 4096",
                                   "--feature-weights 1"])
def test_model_run_is_up_to_date_with_what_makes_the_same_features(cli_runner, model_run, extra):
    data, out, argv = model_run
    model = argv[-1]
    extra = extra.format(model=model, absolute=os.path.abspath(model)).split()
    assert _statuses(cli_runner, data, out, *argv, *extra) == ["up to date"] * 4


def test_model_run_still_refuses_other_features(cli_runner, model_run):
    data, out, argv = model_run
    assert "other embed options (--dim (not given) -> 8)" in _refused(cli_runner, data, out, *argv, "--dim", "8")
    other = str(Path(argv[-1]).parent / "other")
    assert f"other embed options (--model {argv[-1]} -> {other})" in _refused(cli_runner, data, out,
                                                                              *argv[:-1], other)


@pytest.mark.parametrize("extra", ["--encoder all-MiniLM-L6-v2", "--batch-tokens 4096"])
def test_semantic_run_is_up_to_date_with_what_makes_the_same_features(cli_runner, semantic_run, extra):
    data, out, argv = semantic_run
    assert _statuses(cli_runner, data, out, *argv, *extra.split()) == ["up to date"] * 4


def test_semantic_run_still_refuses_a_shorter_max_length(cli_runner, semantic_run):
    data, out, argv = semantic_run  # a lower --max-length cuts the encoder's texts: other features
    assert "other embed options (--max-length 1024 -> 8)" in _refused(cli_runner, data, out, *argv,
                                                                        "--max-length", "8")


@pytest.mark.parametrize("argv, said", [
    (["--features", "semantic", "--dim", "64"], "--dim 64 is not used by --features semantic"),
    (["--features", "semantic", "--pool", "response"], "--pool response is not used by --features semantic"),
    (["--features", "text", "--pool", "response"], "--pool response is not used by --features text"),
    (["--features", "loss-trajectory", "--dim", "8"], "--dim 8 is not used by --features loss-trajectory"),
    (["--features", "gradient", "--pool", "response"], "--pool response is not used by --features gradient"),
])
@pytest.mark.parametrize("command", ["embed", "run"])
def test_dim_and_pool_no_feature_reads_are_refused_in_one_line(cli_runner, tmp_path, command, argv, said):
    out = tmp_path / ("e.parquet" if command == "embed" else "r")
    extra = STEP if command == "run" else []
    result = cli_runner.invoke(main, [command, str(_rows(tmp_path, 20)), "--out", str(out), *argv, *extra])
    assert result.exit_code == 2 and said in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("features, option", [("text,semantic", {"dim": 8}), ("hidden", {"pool": "response"}),
                                              ("gradient", {"dim": 8}), ("text", {"dim": 8}),
                                              ("semantic", {"pool": "all"})])
def test_dim_and_pool_a_feature_reads_are_taken(features, option):
    from cluster_curate.commands.embed import _check_read_by_features
    _check_read_by_features({"dim": None, "pool": "all", **option}, features.split(","))


def test_a_device_given_is_the_same_run_only_where_the_run_named_it(cli_runner, semantic_run, tmp_path):
    """`auto` now after `--device cpu` on this CPU-only machine (conftest) is the same run. A run made with `auto`
    and given `--device cpu` now is not: `auto` was the device of the machine that ran it (a GPU's bf16 features
    re-run on a CPU were kept as up to date by a first version of this rule)."""
    data, out, argv = semantic_run
    assert "other embed options (--device auto -> cpu)" in _refused(cli_runner, data, out, *argv, "--device",
                                                                   "cpu")
    given = tmp_path / "cpu"
    assert _statuses(cli_runner, data, given, *argv, "--device", "cpu", "--dtype", "float32") == ["ran"] * 4
    assert _statuses(cli_runner, data, given, *argv) == ["up to date"] * 4


def test_gpus_given_is_the_same_run_where_faiss_sees_as_many(cli_runner, tmp_path):
    """`--gpus 0` before and all faiss sees now (none on this machine) cluster alike: the same run; `--gpus` given
    after a run made without it is not (all it saw was the machine that ran it's), as for --device."""
    data, out = _rows(tmp_path, 60), tmp_path / "r"
    argv = ["--features", "text", "--dim", "16", "--k", "4", *STEP]
    assert _statuses(cli_runner, data, out, *argv, "--gpus", "0") == ["ran"] * 4
    assert _statuses(cli_runner, data, out, *argv) == ["up to date"] * 4
    other = tmp_path / "auto"
    assert _statuses(cli_runner, data, other, *argv) == ["ran"] * 4
    assert "--gpus (not given) -> 0" in _refused(cli_runner, data, other, *argv, "--gpus", "0")
