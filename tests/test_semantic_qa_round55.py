"""Round 55 QA on `--features semantic`: the hub id every summary names for the bundled encoder loads it (offline,
as `--encoder all-MiniLM-L6-v2` does), and a --max-length above what the encoder reads is said, not dropped."""

from __future__ import annotations

import json

import numpy as np

from cluster_curate.features import semantic as S
from cluster_curate.io.artifacts import read_artifact

from conftest import FIXTURES


def _embed(cli_runner, tmp_path, data, name, *extra):
    from cluster_curate.cli import main
    out = tmp_path / f"{name}.parquet"
    res = cli_runner.invoke(main, ["embed", str(data), "--out", str(out), "--features", "semantic", "--json",
                                   *map(str, extra)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1]), read_artifact(out, kind="embeddings")[0], res.output


def test_the_bundled_encoders_hub_id_names_it_offline(tmp_path, cli_runner, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "g.jsonl"
    data.write_text("".join((FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(True)[:12]))
    named = S.BUNDLED_ENCODERS[S.DEFAULT_ENCODER].name
    assert S.bundled_key(named) == S.DEFAULT_ENCODER and S.bundled_key(None) == S.DEFAULT_ENCODER
    assert S.bundled_key("./" + named) is None  # a path is a path
    by_key, t_key, _ = _embed(cli_runner, tmp_path, data, "key")
    by_id, t_id, _ = _embed(cli_runner, tmp_path, data, "id", "--encoder", named)
    assert by_id["encoder"] == by_key["encoder"] == named
    emb = [t.column("embedding").combine_chunks().values.to_numpy() for t in (t_key, t_id)]
    assert np.array_equal(emb[0], emb[1])


def test_a_max_length_above_the_encoders_own_is_said(tmp_path, cli_runner):
    rows = [json.dumps({"question": "word " * 600, "answer": "x"}) + "\n"]
    rows += (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(True)[:5]
    data = tmp_path / "long.jsonl"
    data.write_text("".join(rows))
    summary, _, output = _embed(cli_runner, tmp_path, data, "above", "--max-length", "1000")
    assert "max length 256 (model 256, below --max-length 1000)" in summary["semantic"]
    assert "1 row(s) longer than the encoder's max length, 256 tokens, below --max-length 1000" in output
    summary, _, output = _embed(cli_runner, tmp_path, data, "default")  # the default is the model features' own
    assert "max length 256 (model 256)," in summary["semantic"] and "below" not in output
