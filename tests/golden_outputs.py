"""Golden outputs of the pipeline: the artifacts and `--json` summaries of the demo pipeline and of `run` on
every fixture format, reduced to a canonical form and compared with tests/golden/outputs.json.

The canonical form drops what may change without a change of behaviour: the tool version recorded in
metadata, timings (`*seconds*`, rates), the shard files' byte hashes in the manifest (they cover the version
in each file's footer; the shards themselves are compared by content), and the absolute path a dataset record
keeps beside a relative data path (`absolute_path`: it names the scenario's temporary directory). What a CPU
of another kind changes without a change of behaviour is kept, but compared to a tolerance: its BLAS kernels
move float results at the last bits (the projection's components, k-means' centroids, about 1e-8 relative), so
every float -- a JSON value, or a float column or array summarised by its size, two fixed random projections,
min and max -- is compared within FLOAT_TOL, and the lineage fingerprints that hash those floats are recorded
as labels in order of first appearance (#1, #2, ...): which artifact is whose input stays checked, the hash's
value does not. Everything else -- ids, clusters, selections, shard rows, texts, metadata fields -- must stay
identical. Each scenario runs in a fresh interpreter with one BLAS/OpenMP thread (ENV): k-means' float sums also
depend on the thread count.

When a default or an algorithm changes on purpose, regenerate and review the diff of the JSON file:

    .venv/bin/python tests/golden_outputs.py --regenerate
    git diff tests/golden/outputs.json
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "outputs.json"
SHARD = ["--num-shards", "4", "--micro-batch-size", "2"]

# (name, data relative to the repository, extra `run` options). Each fixture format once; the options vary
# so that most stage options are exercised by some scenario.
RUNS = [
    ("gsm8k-jsonl", "fixtures/gsm8k/train-300.jsonl", ["--fraction", "0.31", *SHARD]),
    ("gsm8k-csv", "fixtures/gsm8k/train-300.csv",
     ["--budget", "50", "--within", "far", "--remainder", "wrap", "--k", "8", *SHARD]),
    ("gsm8k-parquet", "fixtures/gsm8k/train-300.parquet",
     ["--per-cluster-ratio", "0.5", "--k", "4", "--groups", "none", "--max-size-factor", "1.5",
      "--allocation", "paper", "--num-shards", "4", "--micro-batch-size", "2"]),
    ("alpaca-json", "fixtures/code_alpaca/code_alpaca-300.json",
     ["--fraction", "0.31", "--within", "diverse", "--dedup", "0.9", "--balance", "padded", *SHARD]),
    ("alpaca-by-id", "fixtures/code_alpaca/code_alpaca-300-by-id.json",
     ["--fraction", "0.4", "--balance-power", "0.5", "--weights", "none", "--text-weighting", "tfidf",
      "--dim", "64", *SHARD]),
    ("alpaca-response-jsonl", "fixtures/code_alpaca/code_alpaca-300-response.jsonl",
     ["--fraction", "0.31", "--within", "near", "--center", "--text-field", "both", "--allocation", "random",
      *SHARD]),
    ("alpaca-hf", "fixtures/code_alpaca/code_alpaca-300.hf",
     ["--fraction", "0.31", "--groups", "3", "--split-mixed", "--length-window", "0", *SHARD]),
    ("alpaca-parquet-dir", "fixtures/code_alpaca/code_alpaca-300.parquet.d",
     ["--fraction", "0.31", "--group-cut", "pair", "--seed", "3", *SHARD]),
    ("prompt-completion", "fixtures/code_alpaca/prompt-completion-300.jsonl", ["--fraction", "0.31", *SHARD]),
    ("messages", "fixtures/chat/messages-300.jsonl", ["--fraction", "0.31", "--iters", "5", *SHARD]),
    ("sharegpt", "fixtures/chat/sharegpt-300.json", ["--fraction", "0.31", "--text-sample", "100", *SHARD]),
]

DEMO_DATA = "fixtures/gsm8k/train-300.jsonl"


def demo_commands(out: str = "demo") -> list[list[str]]:
    """The Makefile's demo pipeline, stage by stage (its default options)."""
    return [
        ["embed", DEMO_DATA, "--out", f"{out}/embeddings.parquet"],
        ["cluster", f"{out}/embeddings.parquet", "--out", f"{out}/clusters.parquet"],
        ["select", f"{out}/clusters.parquet", "--out", f"{out}/selection.parquet", "--fraction", "0.31"],
        ["shard", f"{out}/selection.parquet", "--data", DEMO_DATA, "--out", f"{out}/shards", *SHARD],
    ]


def parts_commands(out: str = "parts") -> list[list[str]]:
    """`embed` as a job array of two pieces writing one part directory, then the rest on that directory."""
    data = "fixtures/gsm8k/train-300.jsonl"
    pieces = [["embed", data, "--out", f"{out}/emb", "--commit-every", "128", "--num-shards", "2",
               "--shard-index", str(i)] for i in (0, 1)]
    return pieces + [
        ["cluster", f"{out}/emb", "--out", f"{out}/clusters.parquet", "--k", "6"],
        ["select", f"{out}/clusters.parquet", "--out", f"{out}/selection.parquet", "--fraction", "0.2"],
        ["shard", f"{out}/selection.parquet", "--data", data, "--out", f"{out}/shards", "--num-shards", "3"],
    ]


# ---------------------------------------------------------------------------------------------- canonical form

_DROP_KEYS = ("seconds", "rows_per_s", "tokens_per_s")
_DROP_EXACT = ("sha256", "bytes", "absolute_path")  # file bytes: the Parquet writer's version
FLOAT_TOL = 1e-6  # relative, and absolute near 0: 100x the last-bit moves seen between two kinds of CPU
_FINGERPRINT = re.compile(r"^[0-9a-f]{24}(:[0-9a-f]{16})?$")  # lineage hashes (blake2b, 12 bytes, in hex); run's
# record of shards adds their manifest's bytes' hash


def normalise(obj, *, drop_version: bool = True):
    """JSON data without timings and the tool version (see the module docstring)."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if any(d in k for d in _DROP_KEYS) or (drop_version and k == "version") or k in _DROP_EXACT:
                continue
            out[k] = normalise(v, drop_version=drop_version)
        return out
    if isinstance(obj, list):
        return [normalise(v, drop_version=drop_version) for v in obj]
    return obj


def _digest(data: bytes) -> str:
    # prefixed: label_fingerprints tells the record's own exact digests from the tool's hashes by it
    return "sha256:" + hashlib.sha256(data).hexdigest()[:24]


def float_summary(values) -> dict:
    """Float values as a few numbers compared within FLOAT_TOL: how many (and how many not finite), two fixed
    random projections scaled to the values' own size (one value of 76,800 moved by 1% of their size shows), min, max."""
    import numpy as np
    v = np.asarray(values, dtype=np.float64).ravel()
    finite = v[np.isfinite(v)]
    out = {"n": int(v.size), "not_finite": int(v.size - finite.size)}
    if finite.size:
        w = np.random.default_rng(0).standard_normal((2, finite.size))
        out.update(proj=(w @ finite / np.sqrt(finite.size)).tolist(), min=float(finite.min()),
                   max=float(finite.max()))
    return out


def _array_form(a):
    if a.dtype.kind == "f":
        return {"dtype": str(a.dtype), "shape": list(a.shape), **float_summary(a)}
    return _digest(a.tobytes()) + f" {a.dtype} {a.shape}"


def _is_list(t) -> bool:
    import pyarrow as pa
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _float_values(column):
    """A float column (or a list column of floats), flattened, as numpy (nulls as NaN)."""
    arr = column.combine_chunks()
    while _is_list(arr.type):
        arr = arr.flatten()
    return arr.to_numpy(zero_copy_only=False)


def _is_float(t) -> bool:
    import pyarrow as pa
    while _is_list(t):
        t = t.value_type
    return pa.types.is_floating(t)


def _parquet_form(path: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    table = f.read()
    meta = dict(table.schema.metadata or {})
    ours = meta.pop(b"cluster_curate", None)
    plain = table.replace_schema_metadata(None)
    floats = {field.name: float_summary(_float_values(plain.column(field.name)))
              for field in plain.schema if _is_float(field.type)}
    exact = plain.drop_columns(list(floats))
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, exact.schema) as w:
        w.write_table(exact)
    return {"rows": table.num_rows, "row_groups": f.num_row_groups, "schema": str(plain.schema),
            "other_metadata": sorted(k.decode() for k in meta),
            "meta": normalise(json.loads(ours)) if ours else None, "data": _digest(sink.getvalue()),
            "floats": floats}


def file_form(path: Path):
    import numpy as np
    if path.suffix == ".parquet":
        return _parquet_form(path)
    if path.suffix == ".json":
        return normalise(json.loads(path.read_text()))
    if path.suffix == ".npy":
        return _array_form(np.load(path, allow_pickle=False))
    if path.suffix == ".npz":  # a zip: its entries carry write times
        with np.load(path, allow_pickle=False) as z:
            return {k: _array_form(z[k]) for k in sorted(z.files)}
    return _digest(path.read_bytes())


def tree_form(directory: Path) -> tuple[dict, dict]:
    """{file: canonical form} and {file: metadata}: a Parquet file's metadata is stored once per scenario, under
    the first file that carries it (every shard of a run carries the same), and later files refer to that one."""
    files, metas, first = {}, {}, {}
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            name = str(p.relative_to(directory))
            form = file_form(p)
            if isinstance(form, dict) and form.get("meta") is not None:
                owner = first.setdefault(json.dumps(form["meta"], sort_keys=True), name)
                metas.setdefault(owner, form["meta"])
                form = dict(form, meta=owner)
            files[name] = form
    return files, metas


def label_fingerprints(record):
    """record with each lineage hash replaced by its label in order of first appearance (#1, #2, ...). The walk
    goes in key order, so the labels are the same on every machine; equal hashes get equal labels."""
    labels: dict = {}

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(x[k]) for k in sorted(x)}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, str) and _FINGERPRINT.match(x):
            return labels.setdefault(x, f"#{len(labels) + 1}")
        return x
    return walk(record)


def mismatches(got, expected, where: str = ""):
    """Where got differs from expected: floats beyond FLOAT_TOL, anything else at all (one line each)."""
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if not math.isclose(got, expected, rel_tol=FLOAT_TOL, abs_tol=FLOAT_TOL):
            yield f"{where}: {got!r} != {expected!r}"
    elif isinstance(expected, dict) and isinstance(got, dict):
        if sorted(got) != sorted(expected):
            yield f"{where}: keys {sorted(set(got) ^ set(expected))} differ"
        for k in sorted(set(got) & set(expected)):
            yield from mismatches(got[k], expected[k], f"{where}/{k}")
    elif isinstance(expected, list) and isinstance(got, list) and len(got) == len(expected):
        for i, (g, e) in enumerate(zip(got, expected)):
            yield from mismatches(g, e, f"{where}[{i}]")
    elif got != expected:
        yield f"{where}: {str(got)[:200]} != {str(expected)[:200]}"


# ---------------------------------------------------------------------------------------------- running

def _invoke(args: list[str]) -> dict:
    from click.testing import CliRunner

    from cluster_curate.cli import main
    result = CliRunner().invoke(main, [*args, "--json"])
    if result.exit_code != 0:
        raise AssertionError(f"cluster-curate {' '.join(args)} failed ({result.exit_code}): {result.output}"
                             f"{result.exception!r}")
    return normalise(json.loads(result.stdout))


def scenario(name: str, workdir: Path) -> dict:
    """Run one scenario in `workdir` (which gets a link to the fixtures, so every recorded path is relative)."""
    cwd = os.getcwd()
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "fixtures").exists():
        (workdir / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    os.chdir(workdir)
    try:
        if name in ("demo", "parts"):
            summaries = [_invoke(c) for c in (demo_commands() if name == "demo" else parts_commands())]
        else:
            _, data, extra = next(r for r in RUNS if r[0] == name)
            first = _invoke(["run", data, "--out", name, *extra])
            summaries = [first, _invoke(["run", data, "--out", name, *extra])["stages"]]
        files, metas = tree_form(workdir / name)
        return label_fingerprints({"summaries": summaries, "files": files, "metas": metas})
    finally:
        os.chdir(cwd)


SCENARIOS = ["demo", "parts", *(r[0] for r in RUNS)]
# one BLAS / OpenMP thread, whatever the caller's environment: k-means' float sums depend on the thread count
ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def scenario_in_subprocess(name: str, workdir: Path, threads: int = 1) -> dict:
    """`scenario` in a fresh interpreter with the settings of ENV (threads: BLAS / OpenMP threads instead of 1)."""
    import subprocess
    env = {**os.environ, **ENV, "PYTHONHASHSEED": "0",
           **{k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    proc = subprocess.run([sys.executable, str(Path(__file__)), "--scenario", name, str(workdir)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"golden scenario {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def regenerate() -> None:
    import tempfile
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            results[name] = scenario_in_subprocess(name, Path(tmp) / name)
            print(f"recorded {name}", file=sys.stderr)
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--scenario"]:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(scenario(sys.argv[2], Path(sys.argv[3])), sort_keys=True))
    elif sys.argv[1:] == ["--regenerate"]:
        regenerate()
    else:
        sys.exit("usage: python tests/golden_outputs.py --regenerate")
