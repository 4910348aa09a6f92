"""Which faiss build is in use: exactly one of faiss-cpu and a faiss-gpu wheel must be installed.

Both wheels provide the same `faiss` module, so with both installed the files of the one installed last win
(and uninstalling either deletes files the other needs): the package depends on neither and offers them as the
extras `cpu` and `gpu`, and `import_faiss()` refuses a mix, or no faiss at all, with one line saying what to run.
Every use of faiss in the package goes through `import_faiss()`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from cluster_curate.errors import CurateError

INSTALL_HINT = ("install one of the extras cpu or gpu: pip install \".[cpu]\" in the checkout (\".[gpu]\" for "
                "faiss on CUDA 12), or the wheel with [cpu] / [gpu]")
_FAISS_WHEEL = re.compile(r"^faiss[-_.]?(cpu|gpu.*)?$")


def installed_faiss_wheels() -> dict[str, str]:
    """{distribution name: version} of every installed distribution that provides the faiss module."""
    from importlib.metadata import distributions
    found = {}
    for dist in distributions():
        name = (dist.metadata["Name"] or "").lower()
        if _FAISS_WHEEL.match(name):
            found[name.replace("_", "-")] = dist.version
    return found


def faiss_build_problem(wheels: dict[str, str]) -> str | None:
    """What is wrong with this set of faiss distributions, or None (one build, or none known: conda's faiss)."""
    cpu = sorted(n for n in wheels if not n.startswith("faiss-gpu"))
    gpu = sorted(n for n in wheels if n.startswith("faiss-gpu"))
    if cpu and gpu or len(gpu) > 1:
        both = " and ".join(f"{n} {wheels[n]}" for n in cpu + gpu)
        return (f"{both} are installed; they provide the same faiss module and which one loads is undefined: "
                f"pip uninstall -y {' '.join(cpu + gpu)}, then {INSTALL_HINT}")
    return None


@lru_cache(maxsize=1)
def import_faiss():
    """The faiss module, after checking that one build is installed (CurateError otherwise)."""
    problem = faiss_build_problem(installed_faiss_wheels())
    if problem:
        raise CurateError(problem)
    try:
        import faiss
    except ImportError as e:
        raise CurateError(f"faiss is not installed ({e}); {INSTALL_HINT}") from None
    return faiss
