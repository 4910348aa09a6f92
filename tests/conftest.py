import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED_DATA = ROOT.parent / "shared" / "data"

# Tests never touch the network: any hub access must fail fast and clearly.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The property tests draw the same examples on every run (a seed from each test), so that CI checks what was checked
# before a change was submitted; `make test-explore` draws new ones (HYPOTHESIS_PROFILE=explore), to look for the
# rows no example held yet.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


def make_unreadable(path: Path, monkeypatch) -> None:
    """Make reading `path` fail with permission denied: chmod 0, or (root reads anything) make the reader's
    open() of that path fail as it would for another user."""
    from cluster_curate.io import containers
    if os.geteuid() != 0:
        path.chmod(0)
        return
    real_open = open

    def deny(file, *a, **k):
        if str(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **k)
    monkeypatch.setattr(containers, "open", deny, raising=False)


@pytest.fixture(autouse=True)
def cpu_unless_marked_gpu(request, monkeypatch):
    """The suite's tests compare features bit for bit and run the same on every machine: on a GPU machine
    they still see no GPU (in this process and in the subprocesses they start). The CUDA paths are tested
    in test_gpu.py, marked `gpu`."""
    if request.node.get_closest_marker("gpu") is None:
        import torch
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def cli_runner():
    from click.testing import CliRunner
    return CliRunner()


def _process_warning_filters() -> None:
    """The warning filters a new interpreter starts with (no -W, no PYTHONWARNINGS): each warning shown once per
    place, a DeprecationWarning only where __main__ gives it, pending deprecations, imports and resources never."""
    warnings.resetwarnings()
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    warnings.simplefilter("default", append=True)


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """As a process prints a warning: on stderr, with its line of source."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def cli_in_process(*argv, cwd=None, **env) -> subprocess.CompletedProcess:
    """`python -m cluster_curate ARGV` run from `cwd` with `env` added, in this process (click's CliRunner): the
    exit status and the two streams a subprocess gives, without an interpreter's start-up and imports (one to
    three seconds a command on a loaded machine). For tests of what a command does; a test of the process itself
    (signals, exit codes the interpreter sets, start-up, locks between processes) starts a real one. An exception
    the command let through, which a process would print as a traceback, fails the test with its traceback; a
    Python warning is printed on its stderr as a process prints it (pytest would keep it for its summary)."""
    from click.testing import CliRunner

    from cluster_curate.cli import main
    before = os.getcwd()
    os.chdir(cwd or before)
    try:
        runner = CliRunner(env={"RANK": None, "WORLD_SIZE": None, "LOCAL_RANK": None, **env})  # one process
        with warnings.catch_warnings():
            _process_warning_filters()
            warnings.showwarning = _print_warning
            r = runner.invoke(main, [str(a) for a in argv], prog_name="python -m cluster_curate")
    finally:
        os.chdir(before)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception.with_traceback(r.exc_info[2])
    return subprocess.CompletedProcess(["cluster-curate", *map(str, argv)], r.exit_code, r.stdout, r.stderr)


@pytest.fixture
def api_warnings(monkeypatch) -> list[str]:
    """The warnings the Python API's calls give in this test, as they are given (console.WARNINGS), the console
    quiet: each call is a command of its own, which says each of its warnings once."""
    from cluster_curate import console
    monkeypatch.setattr(console, "QUIET", True)
    given: list[str] = []
    monkeypatch.setattr(console, "WARNINGS", given)
    return given
