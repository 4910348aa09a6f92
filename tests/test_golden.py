"""Behaviour is unchanged: the demo pipeline and `run` on every fixture format give the recorded artifacts and
summaries (canonical form and how to regenerate after an intended change: tests/golden_outputs.py)."""

from __future__ import annotations

import json

import pytest

from golden_outputs import GOLDEN, SCENARIOS, scenario_in_subprocess


@pytest.mark.parametrize("name", SCENARIOS)
def test_outputs_match_the_golden_record(name, tmp_path):
    expected = json.loads(GOLDEN.read_text())[name]
    got = scenario_in_subprocess(name, tmp_path)
    assert got["summaries"] == expected["summaries"]
    assert got["metas"] == expected["metas"]
    assert sorted(got["files"]) == sorted(expected["files"])
    for path, form in expected["files"].items():
        assert got["files"][path] == form, path
