import pyarrow as pa
import pytest

from cluster_curate.errors import CurateError
from cluster_curate.io import artifacts as A
from cluster_curate.io import writer as W


def _meta(kind="embeddings", fp="abc"):
    return A.make_meta(kind, {"seed": 0}, {"data": {"path": "d.jsonl", "fingerprint": fp, "rows": 3}},
                       {"source": "d.jsonl", "fingerprint": fp, "rows": 3})


def test_roundtrip_and_metadata(tmp_path):
    t = pa.table({"id": [0, 1, 2], "x": [1.0, 2.0, 3.0]})
    p = tmp_path / "e.parquet"
    W.write_artifact(t, p, _meta())
    table, meta = A.read_artifact(p, kind="embeddings")
    assert table.equals(t)
    assert meta.kind == "embeddings" and meta.rows == 3 and meta.params == {"seed": 0}
    assert meta.fingerprint == _meta().fingerprint


def test_a_missing_column_is_one_line_naming_it(tmp_path):
    p = tmp_path / "e.parquet"
    W.write_artifact(pa.table({"id": [0, 1], "x": [1.0, 2.0]}), p, _meta())
    assert A.read_artifact(p, columns=["x"])[0].column_names == ["x"]
    with pytest.raises(CurateError,
                       match=r"e.parquet: cannot read the artifact \(no column 'cluster' in .*e.parquet\)"):
        A.read_artifact(p, columns=["id", "cluster"])


def test_refuses_overwrite_and_wrong_kind(tmp_path):
    p = tmp_path / "e.parquet"
    W.write_artifact(pa.table({"id": [0]}), p, _meta())
    with pytest.raises(CurateError, match="--overwrite"):
        W.write_artifact(pa.table({"id": [0]}), p, _meta())
    W.write_artifact(pa.table({"id": [1]}), p, _meta(), overwrite=True)
    with pytest.raises(CurateError, match="'embeddings' artifact, expected 'clusters'"):
        A.read_meta(p, kind="clusters")
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".tmp")]


def test_parts_directory_reads_as_one(tmp_path):
    d = tmp_path / "parts"
    m = _meta()
    W.write_part(pa.table({"id": [2, 3]}), d, "part-00001.parquet", m)
    W.write_part(pa.table({"id": [0, 1]}), d, "part-00000.parquet", m)
    table, meta = A.read_artifact(d, kind="embeddings")
    assert table.column("id").to_pylist() == [0, 1, 2, 3]
    assert meta.rows == 4


def test_lineage_check(tmp_path):
    a, b = _meta(fp="one"), _meta(fp="two")
    with pytest.raises(CurateError, match="different dataset"):
        A.check_same_dataset({"a": a, "b": b})
    assert A.check_same_dataset({"a": a, "b": b}, force=True)["fingerprint"] == "one"


def test_plain_parquet_is_not_an_artifact(tmp_path):
    import pyarrow.parquet as pq
    p = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"id": [0]}), p)
    with pytest.raises(CurateError, match="not a cluster-curate artifact"):
        A.read_meta(p)
    with pytest.raises(CurateError, match="no such file"):
        A.read_meta(tmp_path / "missing.parquet")
