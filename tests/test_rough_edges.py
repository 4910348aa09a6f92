"""The rough edges of real machines, as a user meets them on the command line (real files; real subprocesses where
the edge is the process's: its signals, streams, locale and start-up): a `~` the shell did not expand, a pipe closed
by `head`, ..."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, cli_in_process
from process_helpers import at_default, signal_stopped, stop_when

pytestmark = pytest.mark.slow  # real subprocesses

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
FAST = ["--features", "text", "--dim", "16", "--k", "6", "--fraction", "0.31", "--num-shards", "2",
        "--micro-batch-size", "2", "-q"]


def _cli(*argv, cwd, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full_env.update(OMP_NUM_THREADS="1", **env)
    return subprocess.run([sys.executable, "-m", "cluster_curate", *map(str, argv)], cwd=cwd, capture_output=True,
                          text=True, env=full_env, timeout=60)


def test_a_tilde_the_shell_left_alone_is_the_home_folder(tmp_path):
    """`--out=~/curated` (and a quoted '~/x') reaches the tool unexpanded: the writers made a folder named `~` in
    the working directory while pyarrow expanded it, an INTERNAL ERROR."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    (home / "data.jsonl").write_bytes(GSM.read_bytes())
    r = _cli("run", "~/data.jsonl", "--out=~/curated", *FAST, cwd=cwd, HOME=str(home))
    assert r.returncode == 0, r.stderr
    assert (home / "curated" / "shards" / "manifest.json").is_file()
    r = _cli("shard", "~/curated/selection.parquet", "--data", "~/data.jsonl", "--out", "~/shards",
             "--embeddings=~/curated/embeddings.parquet", "--num-shards", "2", "-q", cwd=cwd, HOME=str(home))
    assert r.returncode == 0, r.stderr
    assert (home / "shards" / "manifest.json").is_file()
    assert list(cwd.iterdir()) == []  # no folder named `~`


def test_a_pipe_closed_by_head_is_no_internal_error(tmp_path):
    """`cluster-curate report DIR --json | head -c 100`: the reader leaves before the summary is printed."""
    assert _cli("run", GSM, "--out", tmp_path / "p", *FAST, cwd=tmp_path).returncode == 0
    for json_flag in (["--json"], []):
        cmd = [sys.executable, "-m", "cluster_curate", "report", str(tmp_path / "p"), *json_flag]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path) as p:
            p.stdout.close()  # gone before the command prints (it takes a second to start)
            err = p.stderr.read().decode()
        assert p.returncode == 1 and err == "", err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_mid_embed_cleans_up_like_ctrl_c_and_the_rerun_resumes(tmp_path, signum):
    """SIGTERM (a job's time limit, `timeout`) killed the command at once: no word, and the output's lock file
    left in the user's folder. It now ends as Ctrl-C does: one line, exit 143, only the committed chunks kept.
    So does SIGHUP (the terminal or ssh session closed), exit 129: it left the temporaries too."""
    rows = GSM.read_text().splitlines()
    (tmp_path / "data.jsonl").write_text("".join(f'{r[:-1]}, "copy": {k}}}\n' for k in range(20) for r in rows))
    embed = [sys.executable, "-m", "cluster_curate", "embed", "data.jsonl", "--out", "e.parquet", "--features",
             "text", "--dim", "16", "--commit-every", "300", "--keep-duplicates"]
    p = subprocess.Popen(embed, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=at_default(signum))
    stop_when(p, lambda: (tmp_path / "e.partial" / "chunk-000000.parquet").exists(), interval=0.01)
    signal_stopped(p, signum)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signum, err
    assert err.strip().splitlines()[-1] == f"terminated ({signal.Signals(signum).name})"
    assert sorted(f.name for f in tmp_path.iterdir() if f.name.startswith(".")) == []  # no lock, no temporary
    assert not [f for f in (tmp_path / "e.partial").iterdir() if f.name.startswith(".")]
    r = _cli(*embed[3:], "--resume", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"] == 20 * len(rows)


@pytest.mark.parametrize("signum,line", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated (SIGTERM)"),
                                         (signal.SIGHUP, "terminated (SIGHUP)")])
def test_an_interruption_while_the_command_starts_is_one_line_not_a_traceback(tmp_path, signum, line):
    """Ctrl-C in the second or more the commands take to import printed a traceback of the import (and SIGTERM
    killed the process without a word): the handlers were set only once the command ran."""
    rows = GSM.read_text().splitlines()  # long enough to read that a signal late on a busy machine still lands
    (tmp_path / "data.jsonl").write_text("".join(f'{r[:-1]}, "copy": {k}}}\n' for k in range(40) for r in rows))
    p = subprocess.Popen([sys.executable, "-m", "cluster_curate", "inspect", "data.jsonl"], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=at_default(signum))
    maps = Path(f"/proc/{p.pid}/maps")
    stop_when(p, lambda: "libarrow" in maps.read_text(), interval=0.001)  # importing: pyarrow comes first
    signal_stopped(p, signum)
    _, err = p.communicate(timeout=60)
    assert (p.returncode, err) == (128 + signum, f"{line}\n")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_an_interruption_once_the_command_is_done_does_not_fail_it(tmp_path, signum):
    """Ctrl-C (or SIGTERM, SIGHUP) as a finished command exits: its outputs written and its summary said, it ended
    with 130 and no word (a `--overwrite` already replaced), so CI counted a done job as failed. The entry point
    ignores them once the command is done; an interruption during it still stops it (tests above)."""
    script = ("import os, signal, sys, time\n"
              "from cluster_curate import cli\n"
              "cli.ENTRY_POINT = True  # as __main__ sets it\n"
              f"cli.main(['inspect', {str(GSM)!r}, '-q'], standalone_mode=False)\n"
              f"os.kill(os.getpid(), {int(signum)})\n"
              "time.sleep(0.2)\n"
              "print('exited as done')\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       preexec_fn=at_default(signum))
    assert (r.returncode, r.stdout.strip().splitlines()[-1]) == (0, "exited as done"), r.stderr


def test_a_path_outside_ascii_under_a_locale_that_is_not_utf8_is_refused_before_any_work(tmp_path):
    """Under LC_ALL=C with PYTHONUTF8=0 Python keeps `é` of a path as surrogates, which pyarrow cannot encode:
    an INTERNAL ERROR after the work (run) or at once (report). One line saying what to set instead."""
    assert _cli("run", GSM, "--out", "sortie-é", *FAST, cwd=tmp_path).returncode == 0
    c_locale = dict(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    for argv in (["report", "sortie-é"], ["run", GSM, "--out", "encore-é", *FAST]):
        r = _cli(*argv, cwd=tmp_path, **c_locale)
        assert r.returncode == 2, r.stderr
        [line] = r.stderr.splitlines()
        assert line.endswith("-é: this path is not ASCII and the locale's encoding is ascii, not UTF-8; run with "
                             "LC_ALL=C.UTF-8 (or PYTHONUTF8=1)"), line
    assert not (tmp_path / "encore-é").exists()
    assert _cli("report", "sortie-é", "-q", cwd=tmp_path, **{**c_locale, "PYTHONUTF8": "1"}).returncode == 0


def test_every_command_prints_its_summary_under_a_locale_that_is_not_utf8(tmp_path):
    """README's CI section says LC_ALL=C works: under LC_ALL=C with PYTHONUTF8=0 the summaries' titles and values
    (`select -> S`, `2 x 38`) raised UnicodeEncodeError after the outputs were written, an INTERNAL ERROR and exit 1
    for a job that was done. They print in ASCII there now."""
    c_locale = dict(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    for argv in (["run", GSM, "--out", "out", *(a for a in FAST if a != "-q")], ["report", "out"],
                 ["export", "out/shards", "--for", "trl", "--out", "trl"]):
        r = _cli(*argv, cwd=tmp_path, **c_locale)
        assert r.returncode == 0 and "INTERNAL ERROR" not in r.stderr, r.stderr
        assert r.stdout.isascii() and ("->" in r.stdout or argv[0] == "report"), argv


def test_a_home_folder_that_cannot_be_written_adds_no_line_to_a_quiet_report(tmp_path):
    """A CI runner's or container's read-only HOME (here a file, which no user, root included, can make folders
    in), no XDG_* nor MPLCONFIGDIR: matplotlib said two WARNING lines about its config folder on every `report`,
    through --quiet, though the plots were drawn."""
    assert _cli("run", GSM, "--out", "r", *FAST, cwd=tmp_path).returncode == 0
    (tmp_path / "home").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_") and k != "MPLCONFIGDIR"}
    env.update(HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "cluster_curate", "report", "r", "--out", "plots", "-q"], cwd=tmp_path,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr
    assert (tmp_path / "plots" / "rank_loads.png").is_file()


def test_a_column_outside_ascii_is_found_under_a_locale_that_is_not_utf8(tmp_path):
    """A mixture file names a column of a Spanish dataset (`respuesta_é`): under LC_ALL=C with PYTHONUTF8=0 its
    detection read it in the locale's encoding, failed, and took it for a dataset (`unrecognised record format;
    columns found: [inputs]`), though the file itself is read as UTF-8."""
    rows = [json.loads(line) for line in GSM.read_text().splitlines()[:30]]
    (tmp_path / "es.jsonl").write_text("".join(
        json.dumps({"pregunta": r["question"], "respuesta_é": r["answer"]}) + "\n" for r in rows))
    (tmp_path / "mix.json").write_text(json.dumps({"inputs": [
        {"path": str(GSM)}, {"path": "es.jsonl", "prompt_field": "pregunta", "response_field": "respuesta_é"}]},
        ensure_ascii=False), encoding="utf-8")
    r = _cli("inspect", "mix.json", "--json", cwd=tmp_path, LC_ALL="C", LANG="C", PYTHONUTF8="0",
             PYTHONCOERCECLOCALE="0")
    assert r.returncode == 0, r.stderr
    assert [i["rows"] for i in json.loads(r.stdout)["inputs"]] == [300, 30]
    # the same column named on the command line: its bytes arrive as surrogates, and the column was not found
    r = _cli("inspect", "es.jsonl", "--prompt-field", "pregunta", "--response-field", "respuesta_é", "--json",
             cwd=tmp_path, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["fields"] == {"prompt": "pregunta", "response": "respuesta_é"}


def test_every_json_object_alone_on_a_piped_stdout_strict_json_with_its_warnings_on_stderr(tmp_path):
    """What a CI job reads with `cluster-curate CMD --json > summary.json`: stdout one object a strict parser reads
    (no NaN), the warnings in it and on stderr, no escape code on either stream even with a colour TERM."""
    (tmp_path / "dup.jsonl").write_text(GSM.read_text() + "".join(GSM.read_text().splitlines(True)[:5]))
    commands = [["inspect", "dup.jsonl"],
                ["embed", "dup.jsonl", "--out", "e.parquet", "--num-shards", "1"],  # deprecated spelling: a warning
                ["cluster", "e.parquet", "--out", "c.parquet", "--k", "6"],
                ["select", "c.parquet", "--out", "s.parquet", "--fraction", "0.31"],
                ["shard", "s.parquet", "--data", "dup.jsonl", "--out", "sh", "--num-shards", "2"],
                ["run", "dup.jsonl", "--out", "r", *FAST],
                ["report", "r", "--out", "plots"],
                ["export", "sh", "--for", "trl", "--out", "x"]]

    def strict(constant):
        raise ValueError(f"not JSON: {constant}")

    for argv in commands:
        r = _cli(*argv, "--json", cwd=tmp_path, TERM="xterm-256color")
        assert r.returncode == 0, (argv, r.stderr)
        obj = json.loads(r.stdout, parse_constant=strict)
        assert obj["command"] == argv[0]
        warned = [line.removeprefix("WARNING: ") for line in r.stderr.splitlines() if line.startswith("WARNING: ")]
        assert obj["warnings"] == warned, (argv, r.stderr)
        assert "\x1b" not in r.stdout + r.stderr, argv
        if argv[0] in ("embed", "run"):  # the 5 exact copies, and embed's --num-shards
            assert obj["warnings"], argv


def test_a_mistake_of_the_whole_file_is_named_as_one_not_told_to_skip_its_rows(tmp_path):
    """A UTF-16 file (a Windows export) and a .jsonl that holds one JSON array: each line was a bad row (a UTF-16
    CSV's: `1 field where the header has 2`), and the error said `--on-bad-row skip`, which leaves nothing."""
    rows = [json.loads(line) for line in GSM.read_text().splitlines()[:20]]
    (tmp_path / "windows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-16")
    (tmp_path / "windows.csv").write_text("question,answer\n" + "".join(
        f'"{r["question"]}","{r["answer"]}"\n' for r in rows), encoding="utf-16")
    (tmp_path / "array.jsonl").write_text(json.dumps(rows))
    (tmp_path / "pretty.jsonl").write_text(json.dumps(rows, indent=2))
    utf16 = ": UTF-16 text (it starts with a UTF-16 byte-order mark); re-encode the file as UTF-8"
    array = ": holds one JSON array, not JSON lines (one object per line); name it .json, which reads either"
    for name, why in [("windows.jsonl", utf16), ("windows.csv", utf16), ("array.jsonl", array),
                      ("pretty.jsonl", array)]:
        for skip in ([], ["--on-bad-row", "skip"]):
            r = cli_in_process("inspect", name, *skip, "-q", cwd=tmp_path)
            assert r.returncode == 2 and r.stderr.splitlines() == [f"ERROR: {name}{why}"], r.stderr
    (tmp_path / "array.jsonl").rename(tmp_path / "array.json")
    assert cli_in_process("inspect", "array.json", "-q", cwd=tmp_path).returncode == 0


def test_a_named_pipe_as_data_is_refused_not_waited_on(tmp_path):
    """`mkfifo data.jsonl; zcat x.gz > data.jsonl &`: the data is read more than once, and the second read of
    the pipe waited forever."""
    os.mkfifo(tmp_path / "data.jsonl")
    writer = subprocess.Popen(["sh", "-c", f"cat '{GSM}' > data.jsonl"], cwd=tmp_path)
    try:
        r = _cli("inspect", "data.jsonl", "-q", cwd=tmp_path)
    finally:
        if writer.poll() is None:  # the command never opened the pipe: let the writer go
            open(tmp_path / "data.jsonl", "rb").close()
        writer.wait(timeout=60)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "ERROR: data.jsonl: not a regular file (a pipe or a device), and the data is read more than once; write it "
        "to a file first"], r.stderr


def test_a_file_named_with_a_leading_dash_gets_the_way_to_name_it(tmp_path):
    (tmp_path / "-data.jsonl").write_bytes(GSM.read_bytes())
    r = _cli("inspect", "-data.jsonl", cwd=tmp_path)
    [line] = r.stderr.splitlines()
    assert r.returncode == 2 and line.startswith(
        "ERROR: No such option '-d'. To name the file -data.jsonl, write ./-data.jsonl (see "), line
    assert _cli("inspect", "./-data.jsonl", "-q", cwd=tmp_path).returncode == 0


STEP_8x4 = ["--features", "text", "--dim", "16", "--k", "6", "--num-shards", "8", "--micro-batch-size", "4", "-q"]


def test_a_token_budget_too_small_for_one_step_is_refused_before_embed(tmp_path):
    """`run --token-fraction 0.005 --num-shards 8 --micro-batch-size 4`: embed, cluster and select ran, then shard
    refused the 2 rows selected. The words a text-only run counts are known before embed: refused there, naming
    the options; likewise a token budget below every row, with or without --target."""
    for budget, said in ((["--token-fraction", "0.005"], "32 rows, but --token-fraction 0.005 of 300 rows ("),
                         (["--token-budget", "20"], "--token-budget: 20 tokens is less than the smallest row"),
                         (["--token-budget", "20", "--target", GSM], "--token-budget: 20 tokens is less than the")):
        r = cli_in_process("run", GSM, "--out", "p", *budget, *STEP_8x4, cwd=tmp_path)
        [line] = r.stderr.splitlines()
        assert r.returncode == 2 and said in line, line
        assert not (tmp_path / "p").exists()
    assert "use fewer shards, a smaller micro-batch or a larger budget" in cli_in_process(
        "run", GSM, "--out", "p", "--token-fraction", "0.005", *STEP_8x4, cwd=tmp_path).stderr


def test_a_selection_smaller_than_one_step_after_exact_duplicates_stops_run_before_any_stage(tmp_path):
    """Exact duplicates left out at embed made the selection smaller than run's preflight knew: shard refused it
    (naming neither the budget nor that a larger one then needed --overwrite), later select did, after embed and
    cluster. Preflight counts the rows embed keeps now: refused before the first stage, naming the copies."""
    (tmp_path / "data.jsonl").write_text("".join(GSM.read_text().splitlines(keepends=True)[:100]) * 3)
    step = ["--features", "text", "--dim", "16", "--k", "6", "--num-shards", "4", "--micro-batch-size", "4", "-q"]
    r = cli_in_process("run", "data.jsonl", "--out", "p", "--fraction", "0.1", *step, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == (
        "ERROR: one global step needs --num-shards × --micro-batch-size = 4 × 4 = 16 rows, but --fraction 0.1 of 100 "
        "rows (of 300: 200 exact duplicates left out) selects at most 10; use fewer shards, a smaller micro-batch or "
        "a larger budget"), r.stderr
    assert not (tmp_path / "p").exists()
    r = cli_in_process("run", "data.jsonl", "--out", "p", "--fraction", "0.2", *step, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [s["status"] for s in json.loads(r.stdout)["stages"]] == ["ran"] * 4


def test_a_targeted_token_budget_below_every_row_is_refused_before_the_target_is_embedded(tmp_path):
    assert cli_in_process("run", GSM, "--out", "p", *FAST, cwd=tmp_path).returncode == 0
    r = cli_in_process("select", "p/clusters.parquet", "--out", "s.parquet", "--target", GSM, "--token-budget",
                       "3", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.splitlines()[-1].startswith(
        "ERROR: --token-budget: 3 tokens is less than the smallest row ("), r.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["p"]  # no s.target.parquet: the target was not embedded


def test_report_names_each_plot_once(tmp_path):
    """`report DIR --out plots` listed each plot as `cluster_sizes.png │ plots/cluster_sizes.png`: every name
    twice. Now the folder is in the title and each name once, beside what the plot shows."""
    assert cli_in_process("run", GSM, "--out", "p", *FAST, cwd=tmp_path).returncode == 0
    r = cli_in_process("report", "p", "--out", "plots", cwd=tmp_path, COLUMNS="100")
    assert r.returncode == 0, r.stderr
    assert "plots → plots" in r.stdout
    for name in ("cluster_sizes.png", "features_pca.png", "rank_loads.png"):
        assert r.stdout.count(name) == 1, r.stdout
        assert (tmp_path / "plots" / name).is_file()


def test_select_within_answers_says_pass_data_once_and_not_to_one_who_passed_it(tmp_path):
    """The data moved: '...: no such file or directory; pass --data DATA (--within answers reads the rows'
    responses: pass --data DATA)', said twice; a --data that does not exist was told to pass --data DATA too."""
    (tmp_path / "data.jsonl").write_bytes(GSM.read_bytes())
    assert cli_in_process("run", "data.jsonl", "--out", "p", *FAST, cwd=tmp_path).returncode == 0
    (tmp_path / "data.jsonl").rename(tmp_path / "moved.jsonl")
    sel = ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3", "--within", "answers", "-q"]
    r = cli_in_process(*sel, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("pass --data DATA") == 1, r.stderr
    assert r.stderr.rstrip().endswith("pass --data DATA (--within answers reads the rows' responses)"), r.stderr
    r = cli_in_process(*sel, "--data", "missing.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == "ERROR: missing.jsonl: no such file or directory\n", r.stderr
    # the recorded data is there, and an option of this command's does not fit it: that option is what to mend
    (tmp_path / "moved.jsonl").rename(tmp_path / "data.jsonl")
    r = cli_in_process("shard", "p/selection.parquet", "--out", "sh", "-n", "2", "--prompt-field", "nope",
                       cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("ERROR: data.jsonl (the dataset selection.parquet records"), \
        r.stderr
    assert "--prompt-field 'nope': no such column" in r.stderr and "--data" not in r.stderr, r.stderr


def test_counts_of_one_read_in_the_singular_on_small_data(tmp_path, cli_runner):
    """On small data the summaries and messages said '1 groups of clusters', '1 kinds of groups', 'the smallest
    cluster has 1 rows', a trainer's README 'Planned for 1 ranks ... 1 rows per step, 1 steps'."""
    import re

    import numpy as np

    from cluster_curate.cli import main
    from cluster_curate.errors import CurateError
    from cluster_curate.sharding import paper_allocation
    data = tmp_path / "small.jsonl"
    data.write_text("".join(GSM.read_text().splitlines(keepends=True)[:20]))
    r = cli_runner.invoke(main, ["run", str(data), "--out", str(tmp_path / "p"), "--features", "text", "--dim", "8",
                                 "--k", "1", "--budget", "1", "--num-shards", "1", "--micro-batch-size", "1"])
    assert r.exit_code == 0, r.output
    text = " ".join(re.sub(r"[│┃]", " ", r.stdout).split())
    assert "1 group of clusters (average linkage" in text and "1 kind of groups" in text
    assert "over 1 group of clusters first" in text
    assert not re.search(r"\b1 (groups|kinds)\b", text), text  # (a table's key follows its value: '1 rows per shard')
    with pytest.raises(CurateError, match="the smallest cluster has 1 row, fewer than one micro-batch of 2"):
        paper_allocation(np.array([0, 0, 0, 1]), 2, 2)
    with pytest.raises(CurateError, match="the selection has 1 cluster and --num-shards is 2"):
        paper_allocation(np.zeros(4, dtype=np.int64), 2, 1)
    r = cli_runner.invoke(main, ["export", str(tmp_path / "p" / "shards"), "--for", "trl",
                                 "--out", str(tmp_path / "trl")])
    assert r.exit_code == 0, r.output
    readme = (tmp_path / "trl" / "README.md").read_text()
    assert "Planned for 1 rank × micro-batch 1 = 1 row per step, 1 step." in readme, readme
