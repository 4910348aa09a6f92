"""Behaviour is unchanged: the demo pipeline and `run` on every fixture format give the recorded artifacts and
summaries (canonical form, the float tolerance and how to regenerate after an intended change:
tests/golden_outputs.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from golden_outputs import GOLDEN, SCENARIOS, float_summary, mismatches, scenario_in_subprocess


@pytest.mark.parametrize("name", SCENARIOS)
def test_outputs_match_the_golden_record(name, tmp_path):
    expected = json.loads(GOLDEN.read_text())[name]
    got = scenario_in_subprocess(name, tmp_path)
    bad = list(mismatches(got, expected))
    assert not bad, f"{len(bad)} differences, the first: " + "; ".join(bad[:10])


def test_the_record_holds_when_floats_are_summed_in_another_order(tmp_path):
    # two BLAS threads sum k-means' floats in another order, as a CPU of another kind does: the artifacts differ
    # at the last bits (the fingerprints with them), and the canonical form still matches the record
    expected = json.loads(GOLDEN.read_text())["demo"]
    got = scenario_in_subprocess("demo", tmp_path, threads=2)
    assert list(mismatches(got, expected)) == []


def test_the_float_summary_sees_one_value_move_but_not_the_last_bits():
    v = np.random.default_rng(1).standard_normal((300, 256)).astype(np.float32) / 16
    last_bits = v * np.float32(1 + 3e-7)  # a few float32 ulps, everywhere
    one_value = v.copy()
    one_value[123, 45] += 0.01 * float(np.sqrt(np.mean(v ** 2)))
    assert list(mismatches(float_summary(last_bits), float_summary(v))) == []
    assert list(mismatches(float_summary(one_value), float_summary(v)))
