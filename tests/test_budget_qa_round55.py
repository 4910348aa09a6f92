"""Round 55 QA: a token budget larger than the tokens --decontaminate left names those rows, as a row budget does
(it named "the data's N tokens", the tokens of fewer rows than the data's)."""

from __future__ import annotations

import numpy as np
import pytest

from cluster_curate.errors import CurateError
from cluster_curate.selection import select_rows


def test_a_token_budget_above_what_decontamination_left_names_them():
    clusters = np.repeat(np.arange(4), 5)
    tokens = np.full(20, 10)
    with pytest.raises(CurateError) as e:
        select_rows(clusters, token_budget=250, tokens=tokens, tokens_counted_by="words", left_out=3)
    assert str(e.value) == ("--token-budget 250 is larger than the 200 tokens (words) left after removing 3 rows "
                            "--decontaminate matched; lower it or use --token-fraction")
    with pytest.raises(CurateError, match=r"larger than the data's 200 tokens \(words\); lower it"):
        select_rows(clusters, token_budget=250, tokens=tokens, tokens_counted_by="words")
