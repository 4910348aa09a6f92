"""Install and packaging (issue 20 #13, #14): the wheel and sdist carry the LICENSE, and exactly one faiss build
is in use (faiss-cpu here), a mix or no faiss being refused with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import files as dist_files
from pathlib import Path


from cluster_curate.faiss_build import faiss_build_problem, import_faiss, installed_faiss_wheels
from conftest import ROOT
from embeddings_factory import mixture, write_embeddings


def _tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files (what a clone has), so the build leaves nothing in the worktree."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, names):
        src, dst = ROOT / name.decode(), dest / name.decode()
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    return dest


def test_built_wheel_and_sdist_carry_the_license_and_the_wheel_runs(tmp_path):
    src = _tracked_copy(tmp_path / "src")
    out = tmp_path / "dist"
    # PEP 517 build with the environment's setuptools (what `python -m build --no-isolation` does; no network)
    for hook in ("build_wheel", "build_sdist"):  # one process each: a second hook in one process may skip
        subprocess.run([sys.executable, "-c", f"import sys, setuptools.build_meta as b; b.{hook}(sys.argv[1])",
                        str(out)], cwd=src, check=True, capture_output=True)
    (wheel,) = out.glob("cluster_curate-*.whl")
    (sdist,) = out.glob("cluster_curate-*.tar.gz")
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    with zipfile.ZipFile(wheel) as z:
        (lic,) = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(lic).decode() == license_text
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert "Provides-Extra: cpu" in meta and "Provides-Extra: gpu" in meta
    assert not any(line.startswith("Requires-Dist: faiss") and "extra ==" not in line for line in meta.splitlines())
    with tarfile.open(sdist) as t:
        (lic,) = [m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE")]
        assert t.extractfile(lic).read().decode() == license_text
    # the wheel installed elsewhere runs from there, outside the checkout
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run([sys.executable, "-c", "import cluster_curate, sys; print(cluster_curate.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert run.stdout.strip().startswith(str(target))
    version = subprocess.run([sys.executable, "-m", "cluster_curate", "--version"], cwd=tmp_path, env=env,
                             capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip(), version.stderr
    script = subprocess.run([str(target / "bin" / "cluster-curate"), "--version"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)  # the entry point pip wrote: pyproject's scripts
    assert script.returncode == 0 and script.stdout == version.stdout, script.stderr


def test_faiss_build_rules():
    assert faiss_build_problem({"faiss-cpu": "1.8.0"}) is None
    assert faiss_build_problem({"faiss-gpu-cu12": "1.8.0"}) is None
    assert faiss_build_problem({}) is None  # conda's faiss: no wheel metadata, the import decides
    both = faiss_build_problem({"faiss-cpu": "1.15.1", "faiss-gpu-cu12": "1.11.0"})
    assert both.startswith("faiss-cpu 1.15.1 and faiss-gpu-cu12 1.11.0 are installed; they provide the same faiss "
                           "module") and "pip uninstall -y faiss-cpu faiss-gpu-cu12, then install one of the extras" in both
    assert faiss_build_problem({"faiss-gpu-cu11": "1", "faiss-gpu-cu12": "1"}) is not None


def test_the_cpu_build_is_the_one_in_use():
    """On this machine: faiss-cpu is installed, no GPU build, and the module that loads is faiss-cpu's files."""
    wheels = installed_faiss_wheels()
    assert "faiss-cpu" in wheels and not any(n.startswith("faiss-gpu") for n in wheels), wheels
    faiss = import_faiss()
    owned = {str(f.locate().resolve()) for f in dist_files("faiss-cpu") if f.name == "__init__.py"}
    assert str(Path(faiss.__file__).resolve()) in owned
    assert (faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0) == 0


def _cluster(tmp_path, extra_path: Path) -> subprocess.CompletedProcess:
    x, _ = mixture(60, d=8)
    emb = tmp_path / "e.parquet"
    write_embeddings(emb, x)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(extra_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "cluster_curate", "cluster", str(emb), "--out",
                           str(tmp_path / "c.parquet"), "--k", "3"], env=env, capture_output=True, text=True,
                          cwd=tmp_path)


def test_a_second_faiss_build_is_refused_with_one_line(tmp_path):
    """A faiss-gpu wheel installed beside faiss-cpu (its metadata on the path): exit 2, one line, no output."""
    site = tmp_path / "site"
    info = site / "faiss_gpu_cu12-1.11.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faiss-gpu-cu12\nVersion: 1.11.0\n")
    r = _cluster(tmp_path, site)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: faiss-cpu ") and "faiss-gpu-cu12 1.11.0 are installed" \
        in lines[0], r.stderr
    assert not (tmp_path / "c.parquet").exists()


def test_no_faiss_says_which_extra_to_install(tmp_path):
    site = tmp_path / "site"
    (site / "faiss").mkdir(parents=True)  # shadows the real module: an import that fails as a missing one does
    (site / "faiss" / "__init__.py").write_text("raise ImportError('No module named faiss')\n")
    r = _cluster(tmp_path, site)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert 'faiss is not installed' in r.stderr and 'pip install ".[cpu]" in the checkout' in r.stderr
