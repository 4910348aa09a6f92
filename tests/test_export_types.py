"""`export` of columns whose values Python or JSON hold only through something else (nanosecond temporal values,
which pyarrow gives as Python objects only through pandas; a UUID), of left-over rows read back in another Arrow
type than the shards', and of chats whose turns LLaMA-Factory skips or torchtune refuses (README, "Training with
your trainer")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import cli_in_process as _cli
from test_datasets import write_jsonl

FAST = ["--features", "text", "--dim", "4", "--k", "2"]
REPO = Path(__file__).resolve().parents[1]


def _questions(n: int) -> dict:
    return {"question": [f"How many apples does person {i} keep after giving {i % 7} away?" for i in range(n)],
            "answer": [f"They keep {i} apples, counted twice over by number {i * 3}." for i in range(n)]}


def _run_all(tmp_path: Path, data: str, out: str = "out", micro_batch: int = 2) -> None:
    """`run` on every row of `data`, 2 ranks, text features: shards to export."""
    r = _cli("run", data, "--out", out, *FAST, "--fraction", "1.0", "--num-shards", "2", "--micro-batch-size",
             str(micro_batch), "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def _cli_process(*argv, cwd) -> subprocess.CompletedProcess:
    """The command in a process of its own, where it imports what it imports itself: pandas kept out
    (cli._let_pyarrow_skip_pandas), `datasets` (which registers its extension types) only when it reads through it;
    a test process that has imported them cannot show either."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cluster_curate", *map(str, argv)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_nanosecond_temporal_columns_export_as_iso_text_and_seconds(tmp_path):
    """pandas writes datetime64[ns]: timestamp, duration and time64 in nanoseconds. `export --for jsonl` crashed
    (INTERNAL ERROR: 'not safely convertible to microseconds ... Install pandas'), and so did every chat layout,
    which read each row's columns. Now ISO 8601 text with the nine fraction digits, and seconds."""
    n = 120
    pq.write_table(pa.table({
        **_questions(n),
        "ts": pa.array([1_000_000_000_000_000_001 + i for i in range(n)], pa.timestamp("ns", "UTC")),
        "dur": pa.array([1_500_000_001] * n, pa.duration("ns")),
        "t64": pa.array([3_723_000_000_005] * n, pa.time64("ns")),
        "stamps": pa.array([[5, None]] * n, pa.list_(pa.timestamp("ns"))),
        "us": pa.array([1_000_000_000_123_000_000] * n, pa.timestamp("ns")),  # whole microseconds
    }), tmp_path / "data.parquet")
    _run_all(tmp_path, "data.parquet")
    for trainer in ("jsonl", "torchtune"):
        r = _cli_process("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
        assert r.returncode == 0 and "INTERNAL ERROR" not in r.stderr, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "jsonl" / "selected.jsonl").read_text().splitlines()]
    assert len(rows) == n
    assert rows[0]["ts"] == "2001-09-09T01:46:40.000000001+00:00"
    assert rows[7]["ts"] == "2001-09-09T01:46:40.000000008+00:00"
    assert rows[0]["dur"] == 1.500000001
    assert rows[0]["t64"] == "01:02:03.000000005"
    assert rows[0]["stamps"] == ["1970-01-01T00:00:00.000000005", None]
    assert rows[0]["us"] == "2001-09-09T01:46:40.123000"  # as isoformat wrote it before: six digits
    assert pq.read_table(tmp_path / "torchtune" / "train.parquet").num_rows == n


def test_uuid_column_exports_as_its_text(tmp_path):
    """A Parquet UUID column (pyarrow's arrow.uuid extension type): `export --for jsonl` crashed ('UUID is not
    JSON serializable'); its canonical text now, and `--for parquet` keeps the UUID type."""
    n = 100
    pq.write_table(pa.table({**_questions(n), "uid": pa.array([uuid.UUID(int=i).bytes for i in range(n)],
                                                                pa.uuid())}), tmp_path / "data.parquet")
    _run_all(tmp_path, "data.parquet")
    for trainer in ("jsonl", "parquet"):
        r = _cli("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "jsonl" / "selected.jsonl").read_text().splitlines()]
    assert [r["uid"] for r in rows] == [str(uuid.UUID(int=i)) for i in range(n)]
    kept = pq.read_table(tmp_path / "parquet" / "selected.parquet")
    assert kept.column("uid").type == pa.uuid() and kept.column("uid")[3].as_py() == uuid.UUID(int=3)


def test_leftover_rows_of_an_extension_type_merge_with_the_shards_rows(tmp_path):
    """`datasets.save_to_disk` with an Array2D feature: the shards hold the column as its storage (lists of lists),
    the left-over rows read back through `datasets` as the extension type, and `export --for jsonl|parquet`, which
    adds them, crashed ('Unable to merge: Field grid has incompatible types'). Every row is written now."""
    datasets = pytest.importorskip("datasets")
    n = 60
    features = datasets.Features({"question": datasets.Value("string"), "answer": datasets.Value("string"),
                                  "grid": datasets.Array2D(shape=(2, 2), dtype="int32")})
    datasets.Dataset.from_dict({**_questions(n), "grid": [[[i, 1], [2, 3]] for i in range(n)]},
                               features=features).save_to_disk(str(tmp_path / "hf"))
    _run_all(tmp_path, "hf", micro_batch=16)
    leftover = json.loads((tmp_path / "out" / "shards" / "manifest.json").read_text())["leftover_ids"]
    assert leftover  # 60 rows, 2 ranks of 16: 28 left over
    for trainer in ("jsonl", "parquet"):  # a process of its own: the shards are read before `datasets` is imported
        r = _cli_process("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
        assert r.returncode == 0 and "INTERNAL ERROR" not in r.stderr, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "jsonl" / "selected.jsonl").read_text().splitlines()]
    assert [r["grid"] for r in rows] == [[[i, 1], [2, 3]] for i in range(n)]
    assert pq.read_table(tmp_path / "parquet" / "selected.parquet").column("grid").to_pylist() == \
        [[[i, 1], [2, 3]] for i in range(n)]


def test_leftover_rows_of_another_type_are_joined_as_shard_joins_them(tmp_path):
    """A left-over row read back with a column of another type than the shards' (numbers there, text now: the data
    as it is, --force) crashed `export --for jsonl|parquet` ('Unable to merge: Field odd has incompatible types:
    int64 vs string'); the column is text now, as `shard` writes numbers beside text."""
    n = 60
    pq.write_table(pa.table({**_questions(n), "odd": pa.array(range(n), pa.int64())}), tmp_path / "data.parquet")
    _run_all(tmp_path, "data.parquet", micro_batch=16)
    leftover = json.loads((tmp_path / "out" / "shards" / "manifest.json").read_text())["leftover_ids"]
    assert leftover
    pq.write_table(pa.table({**_questions(n), "odd": pa.array([f"text-{i}" for i in range(n)])}),
                   tmp_path / "data.parquet")
    for trainer in ("jsonl", "parquet"):
        r = _cli("export", "out/shards", "--for", trainer, "--out", trainer, "--force", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp_path / "jsonl" / "selected.jsonl").read_text().splitlines()]
    assert [r["odd"] for r in rows] == [f"text-{i}" if i in leftover else str(i) for i in range(n)]
    assert pq.read_table(tmp_path / "parquet" / "selected.parquet").column("odd").to_pylist() == \
        [r["odd"] for r in rows]


def _chats(n: int) -> list[dict]:
    """Every fourth row with two system turns, then two user turns in a row, two assistant turns in a row; then a
    row LLaMA-Factory and torchtune take (one system turn, user, assistant)."""
    q = _questions(n)
    rows = []
    for i, (question, answer) in enumerate(zip(q["question"], q["answer"])):
        kind = i % 4
        if kind == 0:
            m = [{"role": "system", "content": "S1"}, {"role": "system", "content": "S2"},
                 {"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        elif kind == 1:
            m = [{"role": "user", "content": f"Context {i}"}, {"role": "user", "content": question},
                 {"role": "assistant", "content": answer}]
        elif kind == 2:
            m = [{"role": "user", "content": question}, {"role": "assistant", "content": "Let me think."},
                 {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"},
                 {"role": "assistant", "content": answer}]
        else:
            m = [{"role": "system", "content": "S"}, {"role": "user", "content": question},
                 {"role": "assistant", "content": answer}]
        rows.append({"messages": m})
    return rows


@pytest.mark.parametrize("trainer", ["llamafactory", "torchtune"])
def test_turns_out_of_a_trainers_order_are_refused_naming_the_row(tmp_path, trainer):
    """LLaMA-Factory's sharegpt converter skips a row whose turns do not go (system,) user, assistant, ... in turn
    ('Skipping this abnormal example'), torchtune raises on it: the export wrote such rows with exit 0. Now one line
    naming the first row, its turn and how many rows are so; the rows both take are exported."""
    write_jsonl(tmp_path / "chat.jsonl", _chats(80))
    _run_all(tmp_path, "chat.jsonl")
    r = _cli("export", "out/shards", "--for", trainer, "--out", trainer, "-q", cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / trainer).exists()
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert "row 0 (id " in line and "turn " in line and "60 of 80 rows" in line
    assert "--for trl, axolotl or hf keeps" in line
    first = json.loads((tmp_path / "chat.jsonl").read_text().splitlines()[int(line.split("(id ")[1].split(")")[0])])
    assert [m["role"] for m in first["messages"]] != ["system", "user", "assistant"]

    write_jsonl(tmp_path / "good.jsonl", [c for i, c in enumerate(_chats(80)) if i % 4 == 3])
    _run_all(tmp_path, "good.jsonl", out="good")
    r = _cli("export", "good/shards", "--for", trainer, "--out", f"good-{trainer}", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(tmp_path / f"good-{trainer}" / "train.parquet").num_rows == 20


def test_llamafactory_ranking_prompt_with_two_system_turns_is_refused(tmp_path):
    """A DPO pair whose prompt holds two system turns: LLaMA-Factory's ranking converter skips it, so the export
    refuses it in one line; TRL's DPO export keeps it."""
    q = _questions(40)
    pairs = [{"prompt": ([{"role": "system", "content": "A"}] if i % 2 else [])
              + [{"role": "system", "content": "B"}, {"role": "user", "content": question}],
              "chosen": [{"role": "assistant", "content": answer}],
              "rejected": [{"role": "assistant", "content": "I do not know."}]}
             for i, (question, answer) in enumerate(zip(q["question"], q["answer"]))]
    write_jsonl(tmp_path / "pairs.jsonl", pairs)
    _run_all(tmp_path, "pairs.jsonl")
    r = _cli("export", "out/shards", "--for", "llamafactory", "--out", "lf", "-q", cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "lf").exists()
    assert len(r.stderr.strip().splitlines()) == 1 and "turn 1 is system" in r.stderr and "20 of 40 rows" in r.stderr
    r = _cli("export", "out/shards", "--for", "trl", "--out", "trl", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
