"""Outputs (issue 20 #1, #3, #4, #5, #17): creatable before any work, umask modes, one writer at a time,
committed chunks never discarded silently, and no folder left by a failed `run`."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster_curate.errors import CurateError
from cluster_curate.io.artifacts import check_creatable
from cluster_curate.io.lock import lock_path, output_lock
from conftest import FIXTURES, cli_in_process
from process_helpers import cli_in_child

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
FAST = ["--features", "text", "--dim", "16", "--k", "6", "--fraction", "0.31", "--num-shards", "2",
        "--micro-batch-size", "2"]


def _cli(*argv, cwd=None, umask=None):
    def pre():
        if umask is not None:
            os.umask(umask)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    return subprocess.run([sys.executable, "-m", "cluster_curate", *argv], cwd=cwd, capture_output=True, text=True,
                          preexec_fn=pre, env=env, timeout=300)


def test_a_command_run_in_process_gives_what_its_process_gives(tmp_path):
    """Most tests run the commands in the suite's own process (conftest.cli_in_process), sparing an interpreter's
    start-up and imports each: the exit status and both streams are what `python -m cluster_curate` gives, for a
    usage error, an error in the data, a table, and a JSON summary with a warning (its times and rates aside)."""
    lines = GSM.read_text().splitlines(keepends=True)
    for where in ("process", "in-process"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "dup.jsonl").write_text("".join(lines[:40] + lines[:3]))
    for argv in (["run", "dup.jsonl", "--bogus"], ["inspect", FIXTURES / "bad" / "invalid_json.jsonl"],
                 ["inspect", "dup.jsonl"],
                 ["embed", "dup.jsonl", "--out", "e.parquet", "--features", "text", "--dim", "8", "--json"]):
        process = _cli(*map(str, argv), cwd=tmp_path / "process")
        here = cli_in_process(*argv, cwd=tmp_path / "in-process")
        if "--json" in argv:
            timed = ("seconds", "_per_s")  # how long it took, and the rates it ran at
            summary = [{k: v for k, v in json.loads(r.stdout).items() if not k.endswith(timed)}
                       for r in (process, here)]
            assert summary[0] == summary[1] and summary[0]["rows"] == 40
        else:
            assert here.stdout == process.stdout, argv
        # --json keeps the progress on stderr (README, JSON output): its rates aside
        untimed = [re.sub(r" \([\d,.]+ rows/s so far.*\)$", "", r.stderr, flags=re.M) for r in (here, process)]
        assert (here.returncode, untimed[0]) == (process.returncode, untimed[1]), argv
        assert process.stderr if process.returncode else process.stdout, argv  # each said something


def test_a_python_warning_given_in_process_is_on_the_commands_stderr_as_a_process_shows_it(monkeypatch):
    """pytest keeps the warnings a test gives for its summary: a library's warning during an in-process command
    would not be on its stderr, where a process prints it and where a test counting the lines looks. Shown as a new
    interpreter shows warnings: a UserWarning is, a library's DeprecationWarning is not."""
    import warnings

    from cluster_curate import console
    begin = console.begin_command

    def warning_library():
        warnings.warn("a library's note", UserWarning)
        warnings.warn("a library's deprecation", DeprecationWarning)
        begin()
    monkeypatch.setattr(console, "begin_command", warning_library)
    for _ in range(2):  # each command, as each process
        r = cli_in_process("inspect", GSM, "-q")
        assert r.returncode == 0 and r.stderr.startswith(f"{__file__}:") and "deprecation" not in r.stderr, r.stderr
        assert r.stderr.count("UserWarning: a library's note") == 1, r.stderr


def test_check_creatable(tmp_path):
    check_creatable(tmp_path / "new" / "deeper" / "x.parquet")  # folders to be made: fine
    assert not (tmp_path / "new").exists()
    (tmp_path / "f.jsonl").write_text("{}")
    with pytest.raises(CurateError, match=r"f.jsonl/x.parquet: cannot create it: .*f.jsonl is a file, not a directory"):
        check_creatable(tmp_path / "f.jsonl" / "x.parquet")
    with pytest.raises(CurateError, match=r"f.jsonl/a/b: cannot create it: .*f.jsonl is a file"):
        check_creatable(tmp_path / "f.jsonl" / "a" / "b")
    with pytest.raises(CurateError, match=r"^/proc/x.parquet: cannot create it: cannot write in /proc"):
        check_creatable("/proc/x.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.jsonl"]  # the probe is gone


SETPRIV = "/usr/bin/setpriv"


@pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists(SETPRIV), reason="root without setpriv writes anywhere")
def test_an_unwritable_directory_fails_before_any_work(tmp_path):
    """`--out ro_dir/e.parquet` with ro_dir mode 0555, as a user the mode applies to (root runs the command
    without its override capabilities): one line, exit 2, at once (it was an INTERNAL ERROR after the whole
    embedding)."""
    ro = tmp_path / "ro_dir"
    ro.mkdir()
    os.chmod(ro, 0o555)
    prefix = [SETPRIV, "--bounding-set=-dac_override,-dac_read_search",
              "--inh-caps=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    for argv in (["embed", str(GSM), "--out", str(ro / "e.parquet")],
                 ["run", str(GSM), "--out", str(ro / "r"), *FAST]):
        t0 = time.monotonic()
        r = subprocess.run([*prefix, sys.executable, "-m", "cluster_curate", *argv], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2, r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith(f"ERROR: {ro}/") and f": cannot create it: cannot write in {ro} (permission " \
            "denied)" in line, line
        assert time.monotonic() - t0 < 30 and list(ro.iterdir()) == []
    os.chmod(ro, 0o755)


@pytest.mark.slow
def test_every_output_honours_the_umask(tmp_path):
    """Under umask 022 every file of a pipeline folder is 0644 and every folder 0755 (temporary files renamed
    into place were 0600: clusters, selection, centroids, run-state, rejects, the proxy's weights)."""
    data = tmp_path / "data.jsonl"
    lines = GSM.read_text().splitlines(keepends=True)[:80]
    data.write_text("".join(lines) + "{bad json\n")
    r = _cli("run", str(data), "--out", str(tmp_path / "p"), *FAST, "--on-bad-row", "skip", "-q", umask=0o022)
    assert r.returncode == 0, r.stderr
    r = _cli("embed", str(data), "--out", str(tmp_path / "g.parquet"), "--features", "gradient", "--proxy-size",
             "tiny", "--proxy-steps", "2", "--proxy-vocab", "300", "--max-length", "64", "--on-bad-row", "skip",
             "-q", umask=0o022)
    assert r.returncode == 0, r.stderr
    modes = {str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")}
    expected_files = ["p/clusters.parquet", "p/selection.parquet", "p/clusters.centroids.npy", "p/run-state.json",
                      "p/embeddings.rejects.jsonl", "p/embeddings.parquet", "p/shards/manifest.json",
                      "g.proxy/model.safetensors"]
    for name in expected_files:
        assert name in modes, sorted(modes)
    wrong = {n: oct(m) for n, m in modes.items() if n != "data.jsonl" and
             m != (0o755 if (tmp_path / n).is_dir() else 0o644)}
    assert not wrong, wrong


def test_a_second_writer_fails_at_once_naming_the_holder(tmp_path):
    out = tmp_path / "e.parquet"
    with output_lock(out, "embed"):
        assert lock_path(out).exists()
        holder = json.loads(lock_path(out).read_text())
        assert holder["pid"] == os.getpid() and holder["command"] == "embed"
        r = _cli("embed", str(GSM), "--out", str(out), "--features", "text", "--dim", "8")
        assert r.returncode == 2
        assert f"{out}: in use by another cluster-curate (`embed`, pid {os.getpid()}" in r.stderr
        assert not out.exists()
    assert not lock_path(out).exists()  # released and removed
    with output_lock(out, "embed"):  # free again
        pass
    with output_lock(tmp_path / "new" / "dir" / "x", "run"):
        assert (tmp_path / "new" / "dir").is_dir()
    assert not (tmp_path / "new").exists()  # made for the lock, removed with it


def test_a_folders_lock_covers_what_is_in_it(tmp_path):
    """`embed --out cur/embeddings.parquet --overwrite` while `run --out cur` wrote there went ahead (each took
    its own lock): the run's embeddings were replaced under it. Now each is refused while the other writes."""
    run_dir = tmp_path / "cur"
    run_dir.mkdir()
    with output_lock(run_dir, "run"):
        r = _cli("embed", str(GSM), "--out", str(run_dir / "embeddings.parquet"), "--features", "text", "--dim", "8",
                 "--overwrite")
        assert r.returncode == 2, r.stderr
        [line] = r.stderr.splitlines()
        assert line.startswith(f"ERROR: {run_dir / 'embeddings.parquet'}: in use by another cluster-curate (`run`, "
                               f"pid {os.getpid()} on ") and f") writing {run_dir}; wait for it" in line, line
    with output_lock(run_dir / "embeddings.parquet", "embed"):
        r = _cli("run", str(GSM), "--out", str(run_dir), *FAST, "-q")
        assert r.returncode == 2, r.stderr
        assert f"in use by another cluster-curate (`embed`, pid {os.getpid()}" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cur"]  # neither wrote anything, no lock left
    with output_lock(run_dir, "run"):  # inspect's --rejects file is an output too
        r = _cli("inspect", str(GSM), "--rejects", str(run_dir / "rejects.jsonl"))
        assert r.returncode == 2 and "in use by another cluster-curate (`run`" in r.stderr, r.stderr
        assert r.stderr.rstrip().endswith("wait for it to finish or choose another --rejects"), r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cur"]


def test_an_output_and_its_folder_twin_share_sidecars_and_refuse_each_other(tmp_path):
    """`embed --out X/` (a job-array piece) and `embed --out X.parquet` stage in one `X.partial`: each took its own
    lock, the second said the first's chunks were an interrupted run's, and its --overwrite deleted them under the
    piece. A writer of either is now refused while the other writes, a worker's part of it too."""
    from cluster_curate import distributed
    for held, other in ((tmp_path / "e.parquet", tmp_path / "e"), (tmp_path / "e", tmp_path / "e.parquet")):
        with output_lock(held, "embed"):
            r = _cli("embed", str(GSM), "--out", str(other), "--features", "text", "--dim", "8")
            assert r.returncode == 2 and f"in use by another cluster-curate (`embed`, pid {os.getpid()}" in r.stderr
    with distributed.worker_lock(distributed.Layout(num_shards=2, shard_index=1), str(tmp_path / "e")):
        r = _cli("embed", str(GSM), "--out", str(tmp_path / "e.parquet"), "--features", "text", "--dim", "8")
        assert r.returncode == 2 and "in use by another cluster-curate" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither wrote anything, no lock left
    with output_lock(tmp_path / "cur", "run"):  # review: a run or shard folder writes no sidecar X.*: no clash
        r = _cli("embed", str(GSM), "--out", str(tmp_path / "cur.parquet"), "--features", "text", "--dim", "8", "-q")
        assert r.returncode == 0, r.stderr


def test_a_lock_file_replaced_at_every_look_is_a_refusal_not_a_hang(tmp_path, monkeypatch):
    """Taking a lock retries when the file it locked was removed by its last holder meanwhile (another then
    makes a new one), which has no end if that happens at every look: the retries had no deadline. They now give
    up after the wait a holder gets to say who it is, with the refusal line, and touch nothing."""
    from cluster_curate.io import lock

    real_stat = os.stat

    def replaced(path, *args, **kwargs):  # the lock file is another file at every look, as under endless churn
        st = real_stat(path, *args, **kwargs)
        return os.stat_result((st.st_mode, st.st_ino + 1, *st[2:10])) if str(path).endswith(".lock") else st

    out = tmp_path / "e"
    lock_path(out).touch()  # another writer's lock file, which it replaces at every look
    monkeypatch.setattr(lock, "_WAIT", 0.5)
    monkeypatch.setattr(os, "stat", replaced)
    start = time.monotonic()
    with pytest.raises(CurateError) as refused:
        with output_lock(out, "embed"):
            pass
    assert time.monotonic() - start < 30
    monkeypatch.undo()
    assert str(refused.value) == (f"{out}: in use by another cluster-curate (holder unknown); wait for it to finish "
                                  "or choose another --out")
    assert [p.name for p in tmp_path.iterdir()] == [".e.lock"]  # the other writer's, as it was; nothing made


_NO_LOCKS = """
import errno, fcntl
def refused(*args):  # what flock gets from NFS mounted without its lock service
    raise OSError(errno.ENOLCK, "No locks available")
fcntl.flock = refused
"""


@pytest.mark.parametrize("argv,written", [
    (["run", str(GSM), "--out", "r", *FAST, "-q"], "r/shards/manifest.json"),
    (["embed", str(GSM), "--out", "e", "--features", "text", "--dim", "8", "--num-parts", "2", "--part-index", "0",
      "-q"], "e/part-00000-of-00002.parquet"),
])
def test_a_file_system_that_refuses_locks_is_a_warning_not_an_internal_error(tmp_path, argv, written):
    """On a file system that refuses flock (ENOLCK) every writing command ended in an INTERNAL ERROR. It now says
    once that it writes without the one-writer check, and writes."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    r = subprocess.run([*cli_in_child(_NO_LOCKS), *argv], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    named = argv[3] if argv[0] == "run" else "e/part-00000-of-00002.parquet"
    assert r.stderr.splitlines() == [f"WARNING: {named}: its file system refuses locks (No locks available); going "
                                     "on without the check that no other cluster-curate writes it at the same time"]
    assert (tmp_path / written).is_file()
    assert not [p for p in tmp_path.rglob(".*.lock")]


def test_a_folder_named_through_a_link_has_the_folders_lock(tmp_path):
    """`run --out link` (a link to the folder a `run` was writing) took a lock of its own beside the link: both
    wrote the same files, and one ended in an INTERNAL ERROR when the other had renamed its temporary file."""
    run_dir, link = tmp_path / "cur", tmp_path / "link"
    run_dir.mkdir()
    link.symlink_to(run_dir)
    with output_lock(run_dir, "run"):
        for argv in (["run", str(GSM), "--out", str(link), *FAST, "-q"],
                     ["embed", str(GSM), "--out", str(link / "embeddings.parquet"), "--features", "text"],
                     ["shard", str(link / "selection.parquet"), "--out", str(link / "shards"), "--num-shards", "2"],
                     ["export", str(link / "shards"), "--for", "trl", "--out", str(link / "trl")]):
            r = _cli(*argv)
            assert r.returncode == 2, r.stderr
            assert f"in use by another cluster-curate (`run`, pid {os.getpid()}" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cur", "link"]  # nothing written, no lock left


# A process taking the lock `{lock}` names (its round's folder for {d}) round after round, each round when the
# starting gun (a byte on the pipe `gun`) fires; it says `held` or the refusal line, and lets go when told.
_AT_ONCE = """import os, sys
from cluster_curate import distributed
from cluster_curate.errors import CurateError
from cluster_curate.io.lock import output_lock
print('ready', flush=True)
for d in sys.argv[1:]:
    if not os.read({gun}, 1):
        break  # the test ended early
    try:
        with {lock}:
            print('held', flush=True)
            sys.stdin.readline()
    except CurateError as e:
        print(e, flush=True)
        sys.stdin.readline()
"""


def _at_once(folder, locks: list[str], rounds: int) -> list[list[tuple[int, str]]]:
    """Per round, the pid and line of each process taking one of `locks` (_AT_ONCE), in their order, when all try
    at the same moment: they are started, imported and waiting on one pipe, which fires once they all are."""
    gun, fire = os.pipe()
    names = [f"r{i}" for i in range(rounds)]
    children = [subprocess.Popen([sys.executable, "-c", _AT_ONCE.format(gun=gun, lock=lock), *names], cwd=folder,
                                 pass_fds=[gun], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for lock in locks]
    os.close(gun)
    try:
        assert [c.stdout.readline() for c in children] == ["ready\n"] * len(children)
        lines = []
        for _ in names:
            os.write(fire, b"x" * len(children))
            lines.append([(c.pid, c.stdout.readline().strip()) for c in children])
            for c in children:
                c.stdin.write("\n")
                c.stdin.flush()
    finally:
        os.close(fire)
        for c in children:
            c.communicate(timeout=60)
    assert [c.returncode for c in children] == [0] * len(children)
    assert not list(folder.rglob(".*.lock"))  # every lock let go and removed
    return lines


WORKER = "distributed.worker_lock(distributed.Layout(num_shards=2, shard_index=1), d + '/e')"


@pytest.mark.parametrize("locks, refused", [
    (["output_lock(d + '/e', 'embed')"] * 6, "{d}/e: in use by another cluster-curate (`embed`, pid {pid} on "),
    (["output_lock(d + '/cur', 'run')", "output_lock(d + '/cur/embeddings.parquet', 'embed')"],
     ": in use by another cluster-curate (`{command}`, pid {pid} on "),
    (["output_lock(d + '/e', 'embed')", WORKER], ": in use by another cluster-curate (`embed`, pid {pid} on ")],
    ids=["one output", "a folder and a file in it", "an output and a worker's part of it"])
def test_writers_starting_at_the_same_moment_one_writes_the_others_are_refused_naming_it(tmp_path, locks, refused):
    """The lock is taken with flock, atomic for one output. A folder's writer and a writer in it, or an output's
    and a worker's of a part of it, take two locks: each looked at the other's before taking its own, so when both
    started at the same moment both could pass the look and both write (5 rounds in 30 of the second, 2 in 20 of
    the third). Each now looks again once it holds its own, and the later gives way."""
    commands = ["run" if "'run'" in lock else "embed" for lock in locks]
    for i, round_ in enumerate(_at_once(tmp_path, locks, 30 if len(locks) == 2 else 10)):
        held = [n for n, (_, line) in enumerate(round_) if line == "held"]
        assert len(held) == 1, (i, round_)
        pid, command = round_[held[0]][0], commands[held[0]]
        for _, line in round_[:held[0]] + round_[held[0] + 1:]:
            assert line.startswith(f"r{i}/") and refused.format(d=f"r{i}", pid=pid, command=command) in line \
                and line.endswith("; wait for it to finish or choose another --out"), (i, round_)


@pytest.mark.slow
def test_commands_writing_one_output_started_at_the_same_moment_one_writes(tmp_path):
    """Four `embed --out new/e.parquet` (a folder none has made yet) started at the same moment, twice: one writes,
    each other is refused with one line, naming it, or, when it came after it had finished, the output it wrote."""
    from cluster_curate.io.readers import read_embeddings
    code = "import os\nfrom cluster_curate.cli import main\nprint('ready', flush=True)\nos.read({}, 1)\nmain()"
    for round_ in ("a", "b"):
        (tmp_path / round_).mkdir()
        gun, fire = os.pipe()
        commands = [subprocess.Popen([sys.executable, "-c", code.format(gun), "embed", str(GSM), "--out",
                                      "new/e.parquet", "--features", "text", "--dim", "8", "-q"], cwd=tmp_path / round_,
                                     pass_fds=[gun], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for _ in range(4)]
        os.close(gun)
        assert [c.stdout.readline() for c in commands] == ["ready\n"] * 4
        os.write(fire, b"xxxx")
        os.close(fire)
        ended = [(c.pid, c.communicate(timeout=300)[1], c.returncode) for c in commands]
        [winner] = [pid for pid, _, rc in ended if rc == 0]
        for pid, err, rc in ended:
            if pid != winner:
                assert rc == 2 and err.count("\n") == 1 and (
                    err.startswith(f"ERROR: new/e.parquet: in use by another cluster-curate (`embed`, pid {winner} on ")
                    or err == "ERROR: new/e.parquet: already exists (pass --overwrite to replace it)\n"), err
        assert len(read_embeddings(tmp_path / round_ / "new" / "e.parquet")[0]) == 300
        assert not [p.name for p in (tmp_path / round_).rglob(".*")]  # no lock or temporary left


@pytest.mark.slow
def test_two_concurrent_runs_into_one_folder(tmp_path):
    out = tmp_path / "r"
    # another process holds the folder as a `run` does, until told to stop (a real `run` as the holder raced:
    # on a busy machine it could finish before the second had started)
    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom cluster_curate.io.lock import output_lock\n"
                               f"with output_lock({str(out)!r}, 'run'):\n    print('held', flush=True)\n"
                               "    sys.stdin.readline()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        second = _cli("run", str(GSM), "--out", str(out), *FAST, "-q")
        assert second.returncode == 2, second.stderr
        assert f"in use by another cluster-curate (`run`, pid {holder.pid}" in second.stderr, second.stderr
        assert not (out / "shards").exists()  # nothing written by the one that was turned away
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    again = _cli("run", str(GSM), "--out", str(out), *FAST, "-q")
    assert again.returncode == 0, again.stderr
    assert (out / "shards" / "manifest.json").is_file() and not lock_path(out).exists()


def test_a_refused_run_leaves_the_folder_the_holder_made(tmp_path):
    """A `run --out new` refused while another held `new` removed `new`, empty, on its way out, as a failed run
    removes the folder it made: it had looked for `new` before the lock, and the holder had made it since. Only a
    run that holds the lock removes what it made, and before it lets go."""
    holder = subprocess.Popen([sys.executable, "-c", """import fcntl, json, os, socket, sys, time
fd = os.open('.new.lock', os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print('locked', flush=True)
sys.stdin.readline()  # taken, not yet written who holds it (output_lock writes it next)
os.mkdir('new')
os.write(fd, json.dumps({'pid': os.getpid(), 'host': socket.gethostname(), 'command': 'run', 'since': 'now',
                         'order': time.monotonic_ns()}).encode())
sys.stdin.readline()
os.unlink('.new.lock')"""], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        refused = subprocess.Popen([sys.executable, "-m", "cluster_curate", "run", str(GSM), "--out", "new", *FAST],
                                   cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        while refused.poll() is None and not _waiting_on(refused.pid, tmp_path / ".new.lock"):
            pass  # until it waits for the holder to say who it is: it has looked for `new` (not there) before
        holder.stdin.write("\n")
        holder.stdin.flush()
        _, err = refused.communicate(timeout=120)
        assert refused.returncode == 2 and err.startswith(f"ERROR: new: in use by another cluster-curate (`run`, pid "
                                                          f"{holder.pid} on "), err
        assert (tmp_path / "new").is_dir()
    finally:
        holder.communicate("\n", timeout=60)


def _waiting_on(pid: int, lock: Path) -> bool:
    """Whether the process `pid` waits for the holder of `lock` to say who it is: it sleeps (the only sleep in
    cluster_curate is that wait, io/lock.py), or has `lock` open (where the kernel does not tell where one sleeps)."""
    proc = Path(f"/proc/{pid}")
    try:
        return "sleep" in (proc / "wchan").read_text() or any(os.readlink(fd) == str(lock)
                                                                for fd in (proc / "fd").iterdir())
    except OSError:  # an fd closed while listed, or the process gone
        return False


@pytest.mark.slow
def test_run_replacement_rules(tmp_path):
    """Same options: up to date; changed data: stale stages re-run (run's job); other options: refused without
    --overwrite, replaced with it; a failed run into a new folder leaves no folder."""
    data = tmp_path / "data.jsonl"
    lines = GSM.read_text().splitlines(keepends=True)
    data.write_text("".join(lines[:120]))
    out = tmp_path / "p"

    def run(*extra):
        r = cli_in_process("run", data, "--out", out, *FAST, *extra, "--json")
        return r, (json.loads(r.stdout) if r.returncode == 0 else None)

    r, first = run()
    assert r.returncode == 0, r.stderr
    r, again = run()
    assert [s["status"] for s in again["stages"]] == ["up to date"] * 4
    data.write_text("".join(lines[:130]))  # the data changed: every stage is stale, and run redoes them
    r, stale = run()
    assert r.returncode == 0 and [s["status"] for s in stale["stages"]] == ["ran"] * 4, r.stderr
    r, _ = run("--fraction", "0.5")
    assert r.returncode == 2 and "other select options (--fraction 0.31 -> 0.5); pass --overwrite" in r.stderr
    r, replaced = run("--fraction", "0.5", "--overwrite")
    assert {s["stage"]: s["status"] for s in replaced["stages"]} == {
        "embed": "up to date", "cluster": "up to date", "select": "ran", "shard": "ran"}
    failed = cli_in_process("run", FIXTURES / "bad" / "invalid_json.jsonl", "--out", tmp_path / "new", *FAST)
    assert failed.returncode == 2 and not (tmp_path / "new").exists()


def test_committed_chunks_are_not_discarded_without_being_told(tmp_path):
    """Issue 20 #3: a killed embed's committed chunks, then the same command without --resume: refused, saying
    --resume continues and --overwrite starts over; the chunks are still there."""
    from cluster_curate.distributed import ChunkedOutput, Layout
    out = tmp_path / "e.parquet"
    staging = tmp_path / "e.partial"
    plan = {"rows": 60}
    ChunkedOutput(out, Layout(), plan, 20)  # a run starts: its staging folder and plan
    (staging / "chunk-000000.parquet").write_bytes(b"committed")  # ... commits a chunk, and is killed
    with pytest.raises(CurateError, match=r"e.partial: holds 1 committed chunk\(s\) of an interrupted run of this "
                                          r"command; pass --resume to continue it or --overwrite to start over"):
        ChunkedOutput(out, Layout(), plan, 20)
    assert (staging / "chunk-000000.parquet").read_bytes() == b"committed"
    with pytest.raises(CurateError, match="with other parameters or data; --overwrite to start over"):
        ChunkedOutput(out, Layout(), {"rows": 61}, 20)
    # --resume with other options names them (it said 'other parameters or data' alone)
    with pytest.raises(CurateError, match=r"e.partial: holds an interrupted run with other parameters or data "
                                          r"\(--commit-every 20 -> 10, --rows 60 -> 61\); the same command "
                                          r"resumes it \(embed's --resume, run as it was\)"):
        ChunkedOutput(out, Layout(), {"rows": 61}, 10, resume=True)
    other = tmp_path / "f.parquet"
    ChunkedOutput(other, Layout(), {"params": {"dim": None, "dims": [256]}, "dataset": "a"}, 20)
    with pytest.raises(CurateError, match=r"\(the data, --dim \(not given\) -> 64\)"):  # dims: not an option
        ChunkedOutput(other, Layout(), {"params": {"dim": 64, "dims": [64]}, "dataset": "b"}, 20, resume=True,
                      options={"dim"})
    ChunkedOutput(out, Layout(), plan, 20, resume=True)  # continuing is fine
    ChunkedOutput(out, Layout(), plan, 20, overwrite=True)  # and so is starting over, when asked
    assert not (staging / "chunk-000000.parquet").exists()
