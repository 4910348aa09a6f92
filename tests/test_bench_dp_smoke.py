"""Smoke test of benchmarks/bench_dp_time.py: a tiny real 2-rank gloo run from the tool's own shards produces
the table, and every rank ran the same number of steps in every run (no timing targets asserted here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_dp_time_tiny(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_dp_time.py"), "--rows", "48", "--repeats", "1",
           "--data", str(ROOT / "fixtures" / "gsm8k" / "train-300.jsonl"),
           "--configs", "full,tool", "--embed-args=--features=text", "--name", "dp_smoke",
           "--results-dir", str(tmp_path / "results"), "--work", str(tmp_path / "work")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (tmp_path / "results" / "dp_smoke.md").read_text()
    assert "| configuration |" in md and "| full |" in md and "| tool |" in md
    result = json.loads((tmp_path / "results" / "dp_smoke.json").read_text())
    for name, runs in result["runs"].items():
        manifest = json.loads((tmp_path / "work" / name / "manifest.json").read_text())
        for run in runs:
            assert run["steps"] == [manifest["steps"]] * 2, name  # every rank ran every planned step
            assert run["epoch_seconds"] > 0 and run["compute_seconds"] > 0
        assert result["summary"][name]["steps_per_rank_all_equal"]
    assert result["summary"]["full"]["rows"] > result["summary"]["tool"]["rows"]
    # `run` made the very shards of the four commands (the benchmark checks it), and its time is reported
    assert result["summary"]["tool"]["run_seconds"] > 0 and "Counting curation, `run`" in md


def test_curation_repeats_start_without_the_previous_output(tmp_path):
    # a repeat that found the text basis (or proxy) fitted by the one before would time less work than a user's run
    from bench_dp_time import clear_output
    for name in ("embeddings.parquet", "embeddings.text.npz", "embeddings.text.key", "embeddings-gradient.parquet"):
        (tmp_path / name).write_text("x")
    (tmp_path / "embeddings.proxy").mkdir()
    (tmp_path / "embeddings.proxy" / "model.safetensors").write_text("x")
    (tmp_path / "run-out").mkdir()
    (tmp_path / "run-out" / "run-state.json").write_text("{}")
    clear_output(tmp_path / "embeddings.parquet")
    clear_output(tmp_path / "run-out")
    clear_output(tmp_path / "never-written.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embeddings-gradient.parquet"]
