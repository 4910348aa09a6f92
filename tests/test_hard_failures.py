"""Hard failures mid-write, with real subprocesses and real OS limits (README "run DATA --out DIR"): a command
killed with SIGKILL (the OOM killer), a disk that refuses a write (RLIMIT_FSIZE, as a full disk or quota), an output
folder made read-only, an input that cannot be read. Each gives one line naming the path and what to do, exit 2,
the previous output intact and nothing half-written under its name; what a killed writer left is removed by the
next run of that output."""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import FIXTURES, SHARED_DATA
from process_helpers import cli_in_child, wait_stopped

# one worker runs the module: its pipelines (module fixtures) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("hard-failures")
GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
GSM_FULL = SHARED_DATA / "gsm8k" / "train.jsonl"

# each writing command as a user types it, in the folder that holds the data, and the output it writes: the stages'
# are those of the `run` folder r/ (one pipeline to make)
COMMANDS = {
    "embed": (["embed", "data.jsonl", "--out", "r/embeddings.parquet", "--features", "text", "--dim", "16"],
              "r/embeddings.parquet"),
    "cluster": (["cluster", "r/embeddings.parquet", "--out", "r/clusters.parquet", "--k", "6"], "r/clusters.parquet"),
    "select": (["select", "r/clusters.parquet", "--out", "r/selection.parquet", "--fraction", "0.31"],
               "r/selection.parquet"),
    "shard": (["shard", "r/selection.parquet", "--data", "data.jsonl", "--out", "r/shards", "--num-shards", "2",
               "--micro-batch-size", "2"], "r/shards"),
    "run": (["run", "data.jsonl", "--out", "r", "--features", "text", "--dim", "16", "--k", "6", "--fraction",
             "0.31", "--num-shards", "2", "--micro-batch-size", "2"], "r"),
    "export-trl": (["export", "r/shards", "--for", "trl", "--out", "ex_trl"], "ex_trl"),  # batch-interleaved
    "export-torchtune": (["export", "r/shards", "--for", "torchtune", "--out", "ex_tt"], "ex_tt"),  # by sample
    "export-jsonl": (["export", "r/shards", "--for", "jsonl", "--out", "ex_jsonl"], "ex_jsonl"),  # rows as they were
    "report": (["report", "r", "--out", "plots"], "plots"),
}
MADE_BY_RUN = ("embed", "cluster", "select", "shard")
AGAIN = {"run": ("--fraction", "0.3")}  # `run` again with a stage to redo (select, shard), not all up to date


def _again(name: str) -> list[str]:
    """The command run a second time over its previous output: replacing it (report writes its plots anyway)."""
    argv, _ = COMMANDS[name]
    if name in AGAIN:  # the option's value changed in place
        flag, value = AGAIN[name]
        argv = [value if i and argv[i - 1] == flag else a for i, a in enumerate(argv)]
    return [*argv, *([] if name == "report" else ["--overwrite"])]


def _cli(argv, cwd, preexec_fn=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return subprocess.run([sys.executable, "-m", "cluster_curate", *argv, "-q"], cwd=cwd, capture_output=True,
                          text=True, env=dict(env, OMP_NUM_THREADS="1"), preexec_fn=preexec_fn, timeout=300)


def _pipeline(folder: Path, data: Path) -> Path:
    folder.mkdir()
    shutil.copy(data, folder / "data.jsonl")
    for name, (argv, _) in COMMANDS.items():
        if name in MADE_BY_RUN:
            continue
        r = _cli(argv, folder)
        assert r.returncode == 0, r.stderr
    return folder


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """Every command's output, once: each test works on a copy."""
    return _pipeline(tmp_path_factory.mktemp("hard") / "pipeline", GSM)


def _copy(pipeline: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pipeline, tmp_path / "work", symlinks=True))


def _files(path: Path) -> dict[str, str]:
    """Each file under `path` (or `path` itself) and a hash of its bytes."""
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    return {str(f.relative_to(path.parent)): hashlib.sha1(f.read_bytes()).hexdigest() for f in files}


def _entries(folder: Path) -> set[str]:
    return {str(f.relative_to(folder)) for f in folder.rglob("*")}


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "INTERNAL ERROR" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    return line


def _file_size_limit(limit: int):
    """A full disk or quota as the process meets it: writes past `limit` bytes fail with EFBIG (SIGXFSZ
    ignored, as Python does; its default would kill the process instead)."""
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _as_a_user():
    """The command as a user whom file modes bind: root gives up the capabilities that override them."""
    if os.geteuid() == 0:
        for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if _LIBC.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "cannot drop the capability")


def _modes_bind() -> bool:
    """Whether _as_a_user's commands are refused by a mode (not as root that keeps its capabilities)."""
    import tempfile
    if os.geteuid() != 0:
        return True
    with tempfile.NamedTemporaryFile() as f:
        os.chmod(f.name, 0)
        return subprocess.run(["test", "-r", f.name], preexec_fn=_as_a_user).returncode != 0


modes_bind = pytest.mark.skipif(not _modes_bind(), reason="root that cannot give up its capabilities reads and "
                                                          "writes any file")


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_write_the_disk_refuses_is_one_line_and_the_previous_output_stays_whole(pipeline, tmp_path, name):
    """A write past the file-size limit (EFBIG, as ENOSPC or EDQUOT on a full disk or quota) was an INTERNAL ERROR
    `[Errno 27] File too large` naming no file, and report's plot was left truncated under its name."""
    work = _copy(pipeline, tmp_path)
    out = work / COMMANDS[name][1]
    before, entries = _files(out), _entries(work)
    line = _one_error_line(_cli(_again(name), work, preexec_fn=_file_size_limit(4096)))
    named = re.escape(COMMANDS[name][1].removesuffix(".parquet"))  # the output, or a file of it
    assert re.match(rf"ERROR: {named}(?:[./]\S*)?: cannot write it: file too large \(.*ulimit -f\) "
                    r"\(nothing half-written was kept; raise the limit or write to another file system", line), line
    assert _files(out) == before
    left = _entries(work) - entries
    assert left == ({"r/embeddings.partial", "r/embeddings.partial/plan.json"} if name == "embed" else set())


@modes_bind
@pytest.mark.parametrize("name", ["shard", "export-torchtune"])
def test_a_read_only_folder_output_is_refused_before_any_work(pipeline, tmp_path, name):
    """`--overwrite` of shards or an export whose folder is read-only (chmod 0500): the new folder was built,
    then swapping it in failed, an INTERNAL ERROR `Permission denied: 'sh' -> '.sh.xxxxxxxx.old/old'` that left
    that hidden folder behind."""
    work = _copy(pipeline, tmp_path)
    out = work / COMMANDS[name][1]
    before, entries = _files(out), _entries(work)
    out.chmod(0o500)
    try:
        r = _cli(_again(name), work, preexec_fn=_as_a_user)
    finally:
        out.chmod(0o755)
    shown = COMMANDS[name][1]
    assert _one_error_line(r) == (f"ERROR: {shown}: cannot replace it: cannot write in it (permission denied); "
                                  f"make it writable (chmod u+w {shown}) or choose another --out")
    assert _files(out) == before and _entries(work) == entries


@modes_bind
def test_a_read_only_output_folder_and_an_unreadable_input_are_one_line(pipeline, tmp_path):
    """The folder that holds an output read-only, an input artifact that cannot be read (chmod 000): one line
    naming the path and what to do (the artifact's was `not a readable Parquet file ([Errno 13] ...)`)."""
    work = _copy(pipeline, tmp_path)
    r_dir, selection = work / "r", work / "r" / "selection.parquet"
    before, entries = _files(selection), _entries(work)
    r_dir.chmod(0o500)
    try:
        r = _cli(_again("select"), work, preexec_fn=_as_a_user)
    finally:
        r_dir.chmod(0o755)
    assert _one_error_line(r) == (f"ERROR: r/selection.parquet: cannot create it: cannot write in {r_dir} "
                                  "(permission denied); make it writable or choose another output")
    (r_dir / "clusters.parquet").chmod(0)
    try:
        r = _cli(_again("select"), work, preexec_fn=_as_a_user)
    finally:
        (r_dir / "clusters.parquet").chmod(0o644)
    assert _one_error_line(r) == ("ERROR: r/clusters.parquet: cannot read it (permission denied); make it readable "
                                  "(chmod u+r) or run as a user who may read it")
    assert _files(selection) == before and _entries(work) == entries


def test_a_report_whose_plot_the_disk_refuses_keeps_the_earlier_plots_all(pipeline, tmp_path):
    """`report --out plots` whose second plot hits the file-size limit (EFBIG, as a full disk): the first plot
    was the new one and the others the earlier report's, a mix; now they are all the earlier ones, and the next
    report replaces them all."""
    work = _copy(pipeline, tmp_path)
    plots = work / COMMANDS["report"][1]
    sizes = {p.name: p.stat().st_size for p in plots.iterdir()}
    largest = max(sizes, key=sizes.get)  # the plot the limit refuses; cluster_sizes.png, smaller, comes first
    assert sizes["cluster_sizes.png"] < sizes[largest]
    for p in plots.iterdir():
        p.write_bytes(b"an earlier report's " + p.name.encode())
    before, entries = _files(plots), _entries(work)
    line = _one_error_line(_cli(_again("report"), work, preexec_fn=_file_size_limit(sizes[largest] - 1)))
    assert line.startswith(f"ERROR: plots/{largest}: cannot write it: file too large"), line
    assert _files(plots) == before and _entries(work) == entries
    assert _cli(_again("report"), work).returncode == 0
    assert {p.name: p.stat().st_size for p in plots.iterdir()} == sizes


def test_an_artifact_cut_short_is_named_damaged_and_its_stage_or_run_makes_it_again(pipeline, tmp_path):
    """A selection.parquet cut to half its bytes (a full disk in another tool, a copy stopped part-way) was
    `not a file cluster-curate wrote ... choose another --out` on `select --overwrite` and `run`, and `not a
    readable Parquet file (Parquet magic bytes not found ...)` where it was read: the wrong way for the user."""
    import json
    work = _copy(pipeline, tmp_path)
    selection = work / "r" / "selection.parquet"
    whole = selection.read_bytes()
    damaged = (f"ERROR: r/selection.parquet: damaged: cut short at {len(whole) // 2:,} bytes, no Parquet footer (a "
               "full disk or a copy stopped part-way); make it again: `select ... --overwrite`, or the same `run`")
    selection.write_bytes(whole[:len(whole) // 2])
    assert _one_error_line(_cli(_again("shard"), work)) == damaged  # where it is read
    assert _cli(["report", "r"], work).returncode == 2
    r = _cli(_again("select"), work)
    assert r.returncode == 0, r.stderr
    assert selection.read_bytes() == whole
    selection.write_bytes(whole[:len(whole) // 2])
    r = _cli([*COMMANDS["run"][0], "--json"], work)  # run re-runs the stage whose output is damaged, no more
    assert r.returncode == 0, r.stderr
    assert [(s["stage"], s.get("reason")) for s in json.loads(r.stdout)["stages"]] == [
        ("embed", None), ("cluster", None), ("select", "its output is damaged (cut short)"), ("shard", None)]
    assert selection.read_bytes() == whole


@pytest.mark.parametrize("in_one_step", [True, False])
def test_a_folder_output_is_swapped_in_whole_with_or_without_an_exchange_of_folders(tmp_path, monkeypatch,
                                                                                     in_one_step):
    """The new folder takes the old one's place in one step (renameat2 RENAME_EXCHANGE) or, where the system
    cannot, in two renames; either way the old one is gone after, and nothing hidden stays beside it."""
    from cluster_curate.io import writer
    if not in_one_step:
        monkeypatch.setattr(writer, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    for version in ("old", "new"):
        with writer.staged_directory(out, lambda d: True) as work:
            (work / "version.txt").write_text(version)
    assert [f.name for f in tmp_path.iterdir()] == ["out"] and (out / "version.txt").read_text() == "new"


# --------------------------------------------------------------------------------------------- SIGKILL

@pytest.fixture(scope="module")
def big_pipeline(tmp_path_factory) -> Path:
    """The pipeline on GSM8K's whole train split: long enough writes to kill a command in the middle of one."""
    if not GSM_FULL.exists():
        pytest.skip(f"{GSM_FULL} is not here")
    return _pipeline(tmp_path_factory.mktemp("hard-big") / "pipeline", GSM_FULL)


# Run in the command's process: it stops itself (SIGSTOP) the first time it acts on an existing path (under its
# working folder) that the pattern in argv[1] matches, at that moment's audit event: a temporary file about to be
# renamed into place, a built folder about to get its mode. A watcher polling from outside missed temporaries that
# live a few milliseconds on a loaded machine (CI: the command ran to its end before it was seen).
_STOP_AT = """
import os, re, signal, sys
pattern, stopped = re.compile(sys.argv.pop(1)), []
def stop_at(event, args):
    if (event in ("open", "os.rename", "os.chmod") and not stopped and isinstance(args[0], (str, bytes, os.PathLike))
            and pattern.fullmatch(os.path.relpath(os.fsdecode(args[0]))) and os.path.lexists(args[0])):
        stopped.append(args[0])
        signal.raise_signal(signal.SIGSTOP)
sys.addaudithook(stop_at)
"""


def _kill_mid_write(argv: list[str], work: Path, temporary: str) -> str:
    """Start the command and SIGKILL it while a temporary file or folder matching `temporary` (its path under
    `work`) exists: no handler runs, as under the OOM killer. Returns that temporary's path."""
    p, hit = _stop_mid_write(argv, work, temporary)
    p.kill()
    _, err = p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL, err
    return hit


def _stop_mid_write(argv: list[str], work: Path, temporary: str) -> tuple[subprocess.Popen, str]:
    """Start the command and have it stop itself (_STOP_AT) when it acts on a temporary matching `temporary` (its
    path under `work`), however loaded the machine is. Returns the stopped process and that temporary's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.Popen([*cli_in_child(_STOP_AT), temporary, *argv, "-q"], cwd=work,
                         env=dict(env, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    if not wait_stopped(p):
        raise AssertionError(f"the command ended (exit {p.returncode}) before it reached {temporary}: "
                             f"{p.stderr.read()}")
    pattern = re.compile(temporary)
    [hit] = [str(f.relative_to(work)) for f in work.rglob("*") if pattern.fullmatch(str(f.relative_to(work)))]
    return p, hit


@pytest.mark.slow
@pytest.mark.parametrize("name,temporary", [
    ("embed", r"r/embeddings\.partial/\.chunk-\d+\.parquet\.\w{8}\.tmp"),  # a chunk being committed
    ("shard", r"r/\.shards\.\w{8}\.tmp"),                                     # the shards' folder being built
    ("export-trl", r"\.ex_trl\.\w{8}\.tmp/\.train\.parquet\.\w{8}\.tmp"),
    ("export-jsonl", r"\.ex_jsonl\.\w{8}\.tmp"),
    ("run", r"r/\.shards\.\w{8}\.tmp"),                             # run's last stage
])
def test_a_command_killed_mid_write_leaves_the_previous_output_whole_and_the_rerun_removes_its_leftovers(
        big_pipeline, tmp_path, name, temporary):
    """SIGKILL (the OOM killer) while a command writes: the previous output is whole (a later command never
    reads half an output), and the next run of the same command removes what the killed one left (its hidden
    temporary folder, a shards folder's worth, stayed for good, one more per kill)."""
    work = _copy(big_pipeline, tmp_path)
    out = work / COMMANDS[name][1]
    before, entries = _files(out / "shards" if name == "run" else out), _entries(work)
    left = _kill_mid_write(_again(name), work, temporary)
    assert _files(out / "shards" if name == "run" else out) == before  # run: its stages before shard ran again
    assert left in _entries(work) - entries
    r = _cli(_again(name) + (["--resume"] if name == "embed" else []), work)
    assert r.returncode == 0, r.stderr
    assert {e for e in _entries(work) - entries if Path(e).name.startswith(".")} == set()
    assert _cli(["report", "r"], work).returncode == 0  # the pipeline reads as whole


@pytest.mark.slow
def test_a_killed_worker_of_a_job_array_embed_leaves_what_its_rerun_removes_and_a_worker_at_work_keeps_its_own(
        tmp_path):
    """The workers of a multi-process embed (job-array pieces, torchrun ranks) hold no output lock, so what a
    killed one left (a chunk's temporary) stayed until an --overwrite. Each now holds its part's lock: its rerun
    (--resume, from the chunks it committed) removes its own leftovers, never those of a worker at work beside it,
    and a second process of the same part is refused, as is a single-process embed of the whole output."""
    import json
    if not GSM_FULL.exists():
        pytest.skip(f"{GSM_FULL} is not here")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(GSM_FULL, work / "data.jsonl")
    embed = ["embed", "data.jsonl", "--out", "e", "--features", "text", "--dim", "16", "--num-parts", "2",
             "--commit-every", "500"]  # 15 chunks: piece 0 owns the even ones, piece 1 the odd ones
    left = _kill_mid_write([*embed, "--part-index", "0"], work,  # piece 0 killed after its first chunks
                           r"e\.partial/\.chunk-0000(0[68]|1[024])\.parquet\.\w{8}\.tmp")
    at_work, its_own = _stop_mid_write([*embed, "--part-index", "1"], work,
                                       r"e\.partial/\.chunk-\d{5}[13579]\.parquet\.\w{8}\.tmp")
    try:
        line = _one_error_line(_cli([*embed, "--part-index", "1", "--resume"], work))
        assert line.startswith("ERROR: e/part-00001-of-00002.parquet: in use by another cluster-curate (`embed`, "
                               f"pid {at_work.pid} on "), line
        before = _files(work)
        line = _one_error_line(_cli([*embed[:8], "--overwrite"], work))  # all of `e` in one process, over the pieces
        assert line.startswith(f"ERROR: e: in use by another cluster-curate (`embed`, pid {at_work.pid} on "), line
        assert _files(work) == before
        again = _cli([*embed, "--part-index", "0", "--resume", "--json"], work)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["chunks_resumed"] >= 3  # chunks 0, 2 and 4 at least
        assert not (work / left).exists() and (work / its_own).exists()
    finally:
        at_work.send_signal(signal.SIGCONT)
        _, err = at_work.communicate(timeout=300)
    assert at_work.returncode == 0, err
    assert sorted(_entries(work)) == ["data.jsonl", "e", "e.text.key", "e.text.npz", "e/part-00000-of-00002.parquet",
                                      "e/part-00001-of-00002.parquet"]


@contextmanager
def _held_by_a_child(work: Path, lock: str):
    """A python child in `work` holding the lock made by the expression `lock` (io/lock.py) until the block ends,
    as a command writing there holds it; yields the child (its pid is the holder's)."""
    code = ("import sys\nfrom cluster_curate import distributed\nfrom cluster_curate.io.lock import output_lock\n"
            f"with {lock}:\n    print('held', flush=True)\n    sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", code], cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        yield child
    finally:
        child.communicate("\n", timeout=60)
    assert child.returncode == 0


PIECE = ["embed", "data.jsonl", "--out", "e", "--features", "text", "--dim", "16", "--overwrite", "--num-parts", "2",
         "--part-index"]  # a job array's worker, with its index to come, into `e`, over the output there


def _two_pieces(tmp_path: Path) -> Path:
    """A folder holding data.jsonl and `e`, the output of a job array of two workers (PIECE)."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(GSM, work / "data.jsonl")
    for index in "01":
        r = _cli([*PIECE, index], work)
        assert r.returncode == 0, r.stderr
    return work


def test_a_single_process_embed_is_refused_while_a_worker_of_a_multi_process_one_writes_that_output(tmp_path):
    """A single-process `embed --overwrite` of the output a job array's workers were writing went ahead (it held
    the output's lock, they their parts'), replacing the parts under them: now it is refused at once, naming the
    worker, and touches nothing. The workers of one job still run side by side."""
    work = _two_pieces(tmp_path)
    before, entries = _files(work / "e"), _entries(work)
    with _held_by_a_child(work, "distributed.worker_lock(distributed.Layout(num_shards=2, shard_index=1), 'e')") \
            as worker:
        line = _one_error_line(_cli(PIECE[:-3], work))  # the same embed in one process
        assert line.startswith(f"ERROR: e: in use by another cluster-curate (`embed`, pid {worker.pid} on "), line
        assert line.endswith(f") writing {work / 'e' / 'part-00001-of-00002.parquet'}; wait for it to finish or "
                             "choose another --out"), line
        assert _files(work / "e") == before and _entries(work) - {".e.part-00001-of-00002.parquet.lock"} == entries
        r = _cli([*PIECE, "0"], work)  # the other worker of its job
        assert r.returncode == 0, r.stderr
    assert _entries(work) == entries  # no lock left behind


def test_a_worker_of_a_multi_process_embed_is_refused_while_a_single_process_one_writes_that_output(tmp_path):
    """A worker of a job array started while a single-process `embed` wrote its output (each held its own lock)
    and wrote its part beside it: now each worker is refused at once, naming that process, and touches nothing."""
    work = _two_pieces(tmp_path)
    before, entries = _files(work / "e"), _entries(work)
    with _held_by_a_child(work, "output_lock('e', 'embed')") as single:
        for index in "01":
            line = _one_error_line(_cli([*PIECE, index], work))
            assert line.startswith(f"ERROR: e/part-0000{index}-of-00002.parquet: in use by another cluster-curate "
                                   f"(`embed`, pid {single.pid} on "), line
            assert line.endswith(f") writing {work / 'e'}; wait for it to finish or choose another --out"), line
        assert _files(work / "e") == before and _entries(work) - {".e.lock"} == entries
    assert _entries(work) == entries  # no lock left behind


# one output `elsewhere/e` as typed from work/: through a link to it, its own path, a second spelling through a
# folder, a linked parent folder
SPELLINGS = ["e", "../elsewhere/e", "./sub/../../elsewhere/e", "lp/e"]
# the lock of a single-process writer of an output, and of the worker of part 1 of 2 of it
LOCKS = {"single": "output_lock({!r}, 'embed')",
         "worker": "distributed.worker_lock(distributed.Layout(num_shards=2, shard_index=1), {!r})"}


@pytest.mark.parametrize("holder, other", [("single", "worker"), ("worker", "single"), ("worker", "worker")])
def test_one_output_has_one_lock_however_it_is_spelled(tmp_path, monkeypatch, holder, other):
    """A single-process writer and the workers of a multi-process embed find each other's locks whichever way each
    names the output (through a link, a linked folder, `sub/..`), and the refusal names it as the user typed it: a
    worker's line was `sub/../../elsewhere/e/part-...` for `--out ./sub/../../elsewhere/e` (Path drops a `./`)."""
    from cluster_curate import distributed
    from cluster_curate.errors import CurateError
    from cluster_curate.io.lock import output_lock
    take = {"single": lambda out: output_lock(out, "embed"),
            "worker": lambda out: distributed.worker_lock(distributed.Layout(num_shards=2, shard_index=1), out)}
    work = tmp_path / "work"
    for folder in (work / "sub", tmp_path / "elsewhere" / "e"):
        folder.mkdir(parents=True)
    (work / "e").symlink_to("../elsewhere/e")
    (work / "lp").symlink_to("../elsewhere")
    monkeypatch.chdir(work)
    part = "/part-00001-of-00002.parquet" if other == "worker" else ""
    for held_as in SPELLINGS:
        with _held_by_a_child(work, LOCKS[holder].format(held_as)) as child:
            for typed in [s for s in SPELLINGS if s != held_as]:
                with pytest.raises(CurateError) as refused:
                    with take[other](typed):
                        pass
                assert str(refused.value).startswith(f"{typed}{part}: in use by another cluster-curate (`embed`, "
                                                     f"pid {child.pid} on "), (held_as, str(refused.value))
    assert sorted(_entries(tmp_path)) == ["elsewhere", "elsewhere/e", "work", "work/e", "work/lp", "work/sub"]


def test_a_torchrun_of_one_process_holds_the_output_as_a_plain_process_does(tmp_path):
    """`torchrun --nproc-per-node 1 cluster-curate embed` took no lock at all (a torchrun's processes write one
    output together, but one process writes it alone): it replaced an output another command was writing."""
    work = _two_pieces(tmp_path)
    before = _files(work / "e")
    one = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}
    with _held_by_a_child(work, "output_lock('e', 'embed')") as single:
        r = subprocess.run([sys.executable, "-m", "cluster_curate", *PIECE[:-3], "-q"], cwd=work, capture_output=True,
                           text=True, env=dict(os.environ, OMP_NUM_THREADS="1", **one), timeout=300)
        line = _one_error_line(r)
        assert line.startswith(f"ERROR: e: in use by another cluster-curate (`embed`, pid {single.pid} on "), line
        assert _files(work / "e") == before


UNREADABLE = "cannot read it (permission denied); make it readable (chmod u+r) or run as a user who may read it"


@modes_bind
@pytest.mark.parametrize("name", ["embed", "run"])
def test_an_unreadable_data_file_says_what_an_unreadable_artifact_says(pipeline, tmp_path, name):
    """DATA that cannot be read (chmod 000) was click's `Path 'data.jsonl' is not readable.`, with no hint, while
    an artifact's says what to do: one wording for both."""
    work = _copy(pipeline, tmp_path)
    (work / "data.jsonl").chmod(0)
    try:
        r = _cli(_again(name), work, preexec_fn=_as_a_user)
    finally:
        (work / "data.jsonl").chmod(0o644)
    assert _one_error_line(r) == f"ERROR: data.jsonl: {UNREADABLE}"


@modes_bind
def test_an_unreadable_folder_of_data_files_says_what_to_do(tmp_path):
    """A folder of data files that cannot be listed (chmod 000) said `cannot read the directory (permission
    denied)` with no hint, where an unreadable file says what to do: a folder's hint is u+rx (listed and entered)."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"prompt": "2+2?", "response": "4"}\n')
    folder.chmod(0)
    try:
        r = _cli(["inspect", "data"], tmp_path, preexec_fn=_as_a_user)
    finally:
        folder.chmod(0o755)
    assert _one_error_line(r) == ("ERROR: data: cannot read the directory (permission denied); make it readable "
                                  "(chmod u+rx) or run as a user who may read it")


@modes_bind
@pytest.mark.parametrize("argv", [["export", "r/shards", "--for", "trl", "--out", "ex"],
                                  ["verify", "r/shards", "--log", "logs"],
                                  ["-c", "from cluster_curate.loader import load_shard; load_shard('r/shards', 1)"]],
                         ids=["export", "verify", "load_shard"])
def test_an_unreadable_shard_is_one_wording_wherever_it_is_read(pipeline, tmp_path, argv):
    """A shard that cannot be read was `cannot read shard ([Errno 13] Permission denied: '...')`, built in three
    places: the path once, and what to do, as for any input."""
    work = _copy(pipeline, tmp_path)
    shard = work / "r" / "shards" / "shard-00001-of-00002.parquet"
    shard.chmod(0)
    try:
        if argv[0] == "-c":
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
            r = subprocess.run([sys.executable, *argv], cwd=work, capture_output=True, text=True, env=env,
                               preexec_fn=_as_a_user, timeout=300)
            line = r.stderr.strip().splitlines()[-1]
        else:
            line = _one_error_line(_cli(argv, work, preexec_fn=_as_a_user))
    finally:
        shard.chmod(0o644)
    assert line.endswith("r/shards/shard-00001-of-00002.parquet: cannot read the shard (permission denied); make "
                         "it readable (chmod u+r) or run as a user who may read it"), line
    assert line.count("shard-00001") == 1, line


@modes_bind
def test_an_unreadable_mixture_file_or_part_of_a_parquet_folder_says_what_unreadable_data_says(tmp_path):
    """A mixture file and a file of a Parquet folder that cannot be read said `cannot read ([Errno 13] ...)` and
    `cannot read (Permission denied)`, with no hint, where unreadable DATA says what to do: one wording for all."""
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    shutil.copy(GSM, tmp_path / "data.jsonl")
    (tmp_path / "mix.yaml").write_text("inputs:\n  - path: data.jsonl\n")
    (tmp_path / "folder").mkdir()
    pq.write_table(pj.read_json(GSM), tmp_path / "folder" / "part-0.parquet")
    for data, unreadable in (("mix.yaml", "mix.yaml"), ("folder", "folder/part-0.parquet")):
        (tmp_path / unreadable).chmod(0)
        try:
            r = _cli(["inspect", data], tmp_path, preexec_fn=_as_a_user)
        finally:
            (tmp_path / unreadable).chmod(0o644)
        assert _one_error_line(r) == f"ERROR: {unreadable}: {UNREADABLE}"
