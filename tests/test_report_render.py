"""What the tables of `report` and the commands' summaries show on a narrow screen (piped output is 80
columns wide): no number is ever cut, a mixture's sources table starts with the source, names the user gave
print as given, and `embed --help` names the defaults the code has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster_curate import console
from cluster_curate.cli import main

ROOT = Path(__file__).resolve().parents[1]
GSM = ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"
ALPACA = ROOT / "fixtures" / "code_alpaca" / "code_alpaca-300.json"


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s│┃]+", text) if w]


@pytest.fixture
def narrow(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(console, "QUIET", False)
    monkeypatch.setattr(console, "JSON_MODE", False)


def test_a_table_wider_than_the_screen_keeps_every_number_whole(narrow, capsys):
    """11 columns of 6- to 10-digit numbers do not fit 80 columns: the table comes in parts, each starting
    with the row's name, and every number is printed whole on one line (it used to be folded: 56189 -> 5618/9)."""
    rows = [{"source": name, **{f"column_{i}_of_the_table": 10 ** (5 + i % 5) + 7 * i + s for i in range(10)},
             "share": 0.4981} for s, name in enumerate(("math", "code_alpaca"))]
    console.summary("sources", {"inputs": 2, "path": "/a/" + "very_long_directory/" * 8 + "x.parquet"}, rows)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    words = _words(out)
    for r in rows:
        for v in r.values():
            assert (f"{v:,}" if isinstance(v, int) else str(v)) in words, (v, out)
    assert words.count("code_alpaca") >= 2  # each part names its rows
    header_lines = [line for line in out.splitlines() if line.startswith("┃")]
    assert all(line.split("┃")[1].strip() in ("", "source") for line in header_lines)  # the first column each time


def test_a_table_that_fits_is_one_table(narrow, capsys):
    console.summary("t", {"a": 1}, [{"cluster": 3, "size": 156, "selected": 9, "kept": "5.8%"}])
    out = capsys.readouterr().out
    assert out.count("┏") == 1 and "│       3 │  156 │        9 │ 5.8% │" in out


@pytest.fixture(scope="module")
def mixture_run(tmp_path_factory):
    """A two-input mixture (one name with an underscore) through `run`, the summaries printed at 80 columns."""
    from click.testing import CliRunner
    tmp = tmp_path_factory.mktemp("mix")
    (tmp / "mix.yaml").write_text(f"inputs:\n  - path: {GSM}\n    name: gsm_math\n  - path: {ALPACA}\n"
                                  "    name: code\n")
    runner = CliRunner(env={"COLUMNS": "80"})
    result = runner.invoke(main, ["run", str(tmp / "mix.yaml"), "--out", str(tmp / "out"), "--features", "text",
                                  "--dim", "32", "--k", "8", "--fraction", "0.31", "--num-shards", "2",
                                  "--micro-batch-size", "2"])
    assert result.exit_code == 0, result.output
    return runner, tmp / "out", result.stdout


def test_select_summary_names_a_source_as_given(mixture_run):
    _, _, out = mixture_run
    assert re.search(r"│ source gsm_math +│ \d+ of 300 rows selected", out), out
    assert "gsm math" not in out


def test_report_sources_table_starts_with_the_source_and_keeps_every_number(mixture_run, tmp_path):
    import json
    runner, out, _ = mixture_run
    shown = runner.invoke(main, ["report", str(out), "--out", str(tmp_path / "plots")])
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    data = json.loads(runner.invoke(main, ["report", str(out), "--json"]).stdout)
    table = data["sources"]["table"]
    assert list(table[0])[:3] == ["source", "rows", "tokens"]
    words = _words(text)
    for row in table:
        for v in row.values():
            assert (f"{v:,}" if isinstance(v, int) else str(v)) in words, (v, text)
    sources = text[text.index("\nsources"):]
    first_header = next(line for line in sources.splitlines() if line.startswith("┃") and "source" in line)
    assert first_header.split("┃")[1].strip() == "source"
    # the plots' file names are printed as they are on disk
    assert "cluster_sizes.png" in words and "cluster sizes.png" not in text


def test_embed_help_names_the_default_text_weighting(cli_runner):
    from cluster_curate.features.text import DEFAULT_TEXT_WEIGHTING
    text = " ".join(cli_runner.invoke(main, ["embed", "--help"], terminal_width=200).output.split())
    assert "TF-IDF" not in text  # the default weighting is not TF-IDF
    weighting = text[text.index("--text-weighting [") + 1:]
    assert weighting[:weighting.index("--text-sample")].strip().endswith(f"[default: {DEFAULT_TEXT_WEIGHTING}]")
    assert "weighted as --text-weighting says" in text


def test_main_help_lines_each_stage_up_with_what_it_does_and_names_every_command(cli_runner):
    """`cluster-curate --help`'s pipeline: each stage's usage, then at least two spaces, then what it does (the
    shard line read `--out D N equal, ...`, its usage running into its words), and every command is named."""
    text = cli_runner.invoke(main, ["--help"], terminal_width=200).output
    pipeline = text[text.index("The pipeline"):text.index("Options:")]
    stages = [line for line in pipeline.splitlines() if line.strip().split(" ")[0] in
              ("embed", "cluster", "select", "shard")]
    assert len(stages) == 4
    starts = {re.search(r"\S  +(\S)", line).start(1) for line in stages}
    assert len(starts) == 1, stages  # one column for what each stage does
    assert stages[-1].split("   ")[-1].strip().startswith("N equal")
    for command in ("run", "inspect", "report", "export", "verify"):
        assert f"`{command}`" in pipeline


def test_model_loading_bars_only_on_a_terminal(monkeypatch):
    """transformers' (and huggingface_hub's, and the GGUF reader's) tqdm bars are off while a model loads into a
    log, on when stderr is a terminal, and as they were afterwards."""
    import io

    from transformers import modeling_gguf_pytorch_utils as gguf_reader
    from transformers.utils import logging as tf_logging

    from cluster_curate.features.models import _loading_bars

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(console, "QUIET", False)  # --quiet: off on a terminal too
    assert tf_logging.is_progress_bar_enabled()
    own_tqdm = gguf_reader.tqdm
    for stderr, on in ((io.StringIO(), False), (Tty(), True)):
        monkeypatch.setattr("sys.stderr", stderr)
        with _loading_bars(gguf=True):
            assert tf_logging.is_progress_bar_enabled() is on
            assert gguf_reader.tqdm is tf_logging.tqdm  # follows transformers' switch
        assert tf_logging.is_progress_bar_enabled() and gguf_reader.tqdm is own_tqdm  # as they were
    tf_logging.disable_progress_bar()  # the user's own choice is kept: not turned on again after loading
    try:
        with _loading_bars(gguf=False):
            pass
        assert not tf_logging.is_progress_bar_enabled()
    finally:
        tf_logging.enable_progress_bar()


def test_a_slow_rate_is_not_shown_as_zero():
    from cluster_curate.console import rate_text
    assert [rate_text(x) for x in (0, 0.43, 3.7, 9.6, 42.5, 3668.2)] == ["0", "0.43", "3.7", "10", "42", "3,668"]


def test_rows_with_other_columns_keep_each_value_under_its_own_header(capsys):
    from cluster_curate import console
    console.configure(quiet=False, json_mode=False)
    console.summary("t", {"a": 1}, [{"x": 1, "y": 2}, {"x": 3}, {"y": 5, "x": 4, "z": 9}])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in lines[1:]]
    assert cells == [["1", "2", ""], ["3", "", ""], ["4", "5", "9"]]


def test_report_prints_token_counts_as_whole_numbers(cli_runner, tmp_path):
    """`report` showed the token lengths of the embeddings as 'p50 88.0, ..., max 201.0': whole counts are now
    printed (and given in --json) as integers, as `inspect` gives them; the mean keeps one decimal."""
    from cluster_curate.commands.report import describe
    out = tmp_path / "e.parquet"
    r = cli_runner.invoke(main, ["embed", str(GSM), "--out", str(out), "--features", "text", "--dim", "8", "-q"])
    assert r.exit_code == 0, r.output
    (_, data, _), = describe({"embeddings": out})
    shown = data["n_tokens"]
    assert re.fullmatch(r"mean \d+\.\d, p50 \d+, p95 \d+, max \d+", shown.text), shown.text
    assert all(isinstance(shown.value[k], int) for k in ("p50", "p95", "max")), shown.value


def test_report_selection_table_has_every_cluster_in_json_and_both_ends_on_a_screen(narrow, tmp_path):
    """`report`'s per-cluster table of a selection: --json holds every cluster (it held the 40 largest, so the
    small clusters, which the balance is about, were missing), and the screen shows the smallest and the largest
    around a '...' row, as `select` does."""
    import json

    from click.testing import CliRunner
    runner = CliRunner(env={"COLUMNS": "80"})
    emb, clusters, sel = (str(tmp_path / n) for n in ("emb.parquet", "clusters.parquet", "sel.parquet"))
    for args in (["embed", str(GSM), "--out", emb, "--dim", "32"], ["cluster", emb, "--out", clusters, "--k", "60"],
                 ["select", clusters, "--out", sel, "--fraction", "0.31"]):
        assert runner.invoke(main, args).exit_code == 0
    data = json.loads(runner.invoke(main, ["report", sel, "--json"]).stdout)
    table, selection = data["selection"]["table"], data["selection"]
    assert sorted(r["cluster"] for r in table) == list(range(60))
    assert sum(r["selected"] for r in table) == selection["selected"]
    text = runner.invoke(main, ["report", sel]).stdout
    rows = [_words(line) for line in text.splitlines() if line.startswith("│") and _words(line)[0].isdigit()]
    shown = [r for r in rows if len(r) == 4]  # the per-cluster table's rows: cluster, size, selected, kept
    by_size = sorted(table, key=lambda r: (r["size"], r["cluster"]))
    assert [int(r[0]) for r in shown] == [r["cluster"] for r in by_size[:16] + by_size[-16:]]
    assert "..." in _words(text)


def test_summaries_write_counts_with_thousands_separators_and_name_the_output_alike(narrow, capsys):
    """Summaries printed `7473` in one place and `7,473` in another, `out` in some and `output` in others (the
    --json key is `output` for all). A seed is a value to pass back, not a count: no separator."""
    console.summary("t", {"out": "p/shards", "rows": 7473, "seed": 1234, "tokens_per_s": 123456.7, "kept": 0.3127,
                          "shown": console.Shown(7473, label="selected rows")},
                    [{"cluster": 3, "size": 1234, "kept": 0.5}])
    out = capsys.readouterr().out
    pairs = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines()[2:8]}
    assert pairs == {"output": "p/shards", "rows": "7,473", "seed": "1234", "tokens per s": "123,457",
                     "kept": "0.3127", "selected rows": "7,473"}, out
    assert "│       3 │ 1,234 │  0.5 │" in out, out
