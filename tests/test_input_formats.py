"""TSV files and nested fields (`--prompt-field data.question`) through real `cluster-curate` processes: the same
selection as the same data in CSV, lineage that reads the data again the same way, and shards that carry the
original columns unchanged."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq

from conftest import FIXTURES
from test_datasets import write_tsv
from test_outputs import FAST, _cli

GSM_CSV = FIXTURES / "gsm8k" / "train-300.csv"


def _ids(path) -> list[int]:
    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


def test_a_tsv_runs_end_to_end_as_the_same_data_in_csv(tmp_path):
    shutil.copy(GSM_CSV, tmp_path / "train.csv")
    write_tsv(GSM_CSV, tmp_path / "train.tsv")
    r = _cli("inspect", "train.tsv", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {k: json.loads(r.stdout)[k] for k in ("container", "format", "rows", "examples")} == {
        "container": "tsv", "format": "qa", "rows": 300, "examples": 300}
    for name in ("train.csv", "train.tsv"):
        r = _cli("run", name, "--out", name + ".out", *FAST, "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    csv_out, tsv_out = tmp_path / "train.csv.out", tmp_path / "train.tsv.out"
    assert _ids(tsv_out / "selection.parquet") == _ids(csv_out / "selection.parquet")
    for shard in sorted((csv_out / "shards").glob("shard-*.parquet")):
        assert pq.read_table(tsv_out / "shards" / shard.name).equals(pq.read_table(shard))
