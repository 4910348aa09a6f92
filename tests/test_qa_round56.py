"""QA round 56, the smaller mends: a target is read as an evaluation set is (a folder of its splits read whole, not
refused as training data's; a CSV folder names one file to give); --dedup names the rows it drops; a counting
tokenizer does not warn of a model's length limit; verify names packing or a per-device batch size only where the
micro-batches say so on a job of fewer processes than planned."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import FIXTURES
from conftest import cli_in_process as _cli
from test_datasets import write_jsonl

GSM = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]


def _folder(path, names, rows=20):
    path.mkdir()
    for i, name in enumerate(names):
        (path / name).write_text("".join(json.dumps(r) + "\n" for r in GSM[i * rows:(i + 1) * rows]))
    return path


def test_a_target_folder_of_splits_is_read_whole_by_select_and_run(tmp_path):
    """`--target gsm8k/` (train.jsonl + test.jsonl) was refused as "an evaluation split's rows trained on" by the
    embed select runs on it: a target is not trained on, so both of its files are its rows, as --decontaminate
    reads such a folder."""
    target = _folder(tmp_path / "gsm8k", ("train.jsonl", "test.jsonl"), rows=5)
    data = write_jsonl(tmp_path / "d.jsonl", GSM[100:220])
    emb, clusters = tmp_path / "e.parquet", tmp_path / "c.parquet"
    for args in (("embed", data, "--out", emb, "--features", "text", "--dim", "8"),
                 ("cluster", emb, "--out", clusters, "--k", "3")):
        assert _cli(*args, "-q").returncode == 0
    sel = tmp_path / "s.parquet"
    r = _cli("select", clusters, "--embeddings", emb, "--target", target, "--fraction", "0.2", "--out", sel, "-q")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(str(sel).replace(".parquet", ".target.parquet")).num_rows == 10  # both files' rows
    out = tmp_path / "run"
    r = _cli("run", data, "--out", out, "--features", "text", "--dim", "8", "--k", "3", "--fraction", "0.2",
             "--num-shards", "1", "--target", target, "-q")
    assert r.returncode == 0, r.stderr


def test_dedup_names_the_rows_it_drops(tmp_path):
    """`--dedup` counted the near-duplicates it dropped but named none: no selection holds them, and the user could
    tell them from the rows not selected only by subtracting ids. They are listed in the metadata and shown."""
    from cluster_curate.io.artifacts import read_artifact
    rows = GSM[:60] + [dict(r, question=r["question"] + " Explain.") for r in GSM[:6]]  # 6 near-copies
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    emb, clusters, sel = tmp_path / "e.parquet", tmp_path / "c.parquet", tmp_path / "s.parquet"
    for args in (("embed", data, "--out", emb, "--features", "text", "--dim", "8"),
                 ("cluster", emb, "--out", clusters, "--k", "3")):
        assert _cli(*args, "-q").returncode == 0
    r = _cli("select", clusters, "--embeddings", emb, "--fraction", "1", "--dedup", "0.98", "--out", sel)
    assert r.returncode == 0, r.stderr
    table, meta = read_artifact(sel)
    ids = meta.params["dedup_ids"]
    # --fraction 1: every row not selected is one --dedup dropped, one of each copied pair among them
    assert len(ids) == meta.params["dedup_dropped"] >= 6
    assert sorted(set(range(66)) - set(table["id"].to_pylist())) == sorted(ids)
    assert {i % 60 for i in ids} >= set(range(6))
    shown = " ".join(r.stdout.replace("│", " ").split())  # the table's wrapped cell, as read
    assert f"(ids {', '.join(map(str, ids[:5]))}, ...), listed in the selection's params.dedup_ids" in shown
    report = " ".join(_cli("report", sel).stdout.replace("│", " ").split())
    assert f"(ids {', '.join(map(str, ids[:5]))}, ...), listed in the selection's params.dedup_ids" in report


def test_a_counting_tokenizer_does_not_warn_of_a_models_length_limit(tmp_path):
    """`inspect --tokenizer MiniLM` on a row past 512 tokens printed transformers' "Token indices sequence length
    is longer than the specified maximum sequence length for this model ... indexing errors": the tokenizer only
    counts there, and the row is counted whole."""
    import pytest
    encoder = pytest.importorskip("cluster_curate.features.semantic").bundled_encoder_dir()
    rows = GSM[:5] + [{"question": "word " * 3000, "answer": "42"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    r = _cli("inspect", data, "--tokenizer", encoder, "--json")
    assert r.returncode == 0, r.stderr
    assert "sequence length" not in r.stderr and r.stderr.strip() == "", r.stderr
    assert json.loads(r.stdout)["lengths"]["prompt_tokens"]["max"] >= 3000


@pytest.mark.parametrize("batch_size, epochs, named", [(4, 1, False), (4, 2, False), (2, 1, True)])
def test_a_job_on_fewer_processes_is_told_of_packing_only_where_its_batches_say_so(tmp_path, batch_size, epochs,
                                                                                   named):
    """A 3 x 4 torchrun export run on 2 processes (DistributedSampler deals its rows to 2 ranks, each rank's last
    micro-batch of 2): verify named "a rank wrote no log" and also "micro-batches of 2 rows where the plan has 4:
    packing ... or a per-device batch size", which did not apply. A first mend hid that cause whenever a rank wrote
    no log, also where every micro-batch was short (a per-device batch size of 2: review); it is named there."""
    from shard_helpers import make_selection
    from torch.utils.data import DataLoader, DistributedSampler

    from cluster_curate.commands.verify import planned_grid, verify
    from cluster_curate.loader import ConsumedLog, interleaved_order
    make_selection(tmp_path / "sel.parquet", FIXTURES / "gsm8k" / "train-300.jsonl", k=3, fraction=0.3, n_tokens=True)
    assert _cli("shard", tmp_path / "sel.parquet", "--out", tmp_path / "shards", "-n", "3", "-m", "4",
                "-q").returncode == 0
    _, ids, _ = planned_grid(tmp_path / "shards")
    steps, n, m = ids.shape
    rows = ids.transpose(1, 0, 2).reshape(-1)[interleaved_order(n, steps, m, "sample")].tolist()
    sizes = []
    for r in range(2):
        loader = DataLoader(rows, batch_size=batch_size, collate_fn=list,
                            sampler=DistributedSampler(rows, num_replicas=2, rank=r, shuffle=False))
        with ConsumedLog(tmp_path / "log", rank=r) as log:
            for _ in range(epochs):
                for batch in loader:
                    log.record(batch, loss=1.0)
                    sizes.append(len(batch))
    assert sizes[-1] < m  # each rank ends in a short micro-batch
    causes = verify(tmp_path / "shards", log=tmp_path / "log")["causes"]
    assert "a rank wrote no log: was the job run on the planned number of processes, each logging?" in causes
    assert bool([c for c in causes if "packing" in c or "per-device batch size" in c]) == named, causes


def test_a_target_folder_of_csv_splits_names_one_file_to_give(tmp_path):
    """A CSV folder is never read whole; as --target it was told to give its files "as DATA: DIR/*.csv", which
    --target (one path) cannot take (review). It names one file."""
    import csv

    from cluster_curate.commands.select_parts import open_target
    from cluster_curate.errors import CurateError
    folder = tmp_path / "t"
    folder.mkdir()
    for name, rows in (("train.csv", GSM[:5]), ("test.csv", GSM[5:10])):
        with open(folder / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["question", "answer"])
            w.writeheader()
            w.writerows({"question": r["question"], "answer": r["answer"]} for r in rows)
    with pytest.raises(CurateError) as e:
        open_target(str(folder), {"on_bad_row": "error"})
    assert str(e.value).endswith(f"give one of its CSV/TSV files, e.g. {folder / 'test.csv'}"), str(e.value)
