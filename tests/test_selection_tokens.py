"""Budgets in tokens (budget_sequence.py `token_water_fill`, `select_rows(token_budget=..., token_fraction=...)`): the
selected tokens meet T to within one row, with the row budget's water-filling over groups and clusters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster_curate import selection as S
from cluster_curate.budget_sequence import token_water_fill
from cluster_curate.within_orders import order_within_cluster
from cluster_curate.errors import CurateError

from tiny_encoder import gsm8k_rows
from tiny_lm import build_tokenizer


def _problem(data, max_tokens: int = 400):
    k = data.draw(st.integers(1, 8))
    n = data.draw(st.integers(1, 120))
    clusters = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n)), dtype=np.int64)
    tokens = np.array(data.draw(st.lists(st.integers(0, max_tokens), min_size=n, max_size=n)), dtype=np.int64)
    groups = np.array(data.draw(st.lists(st.integers(0, 2), min_size=k, max_size=k)), dtype=np.int64)
    groups = np.unique(groups, return_inverse=True)[1]  # groups numbered 0.. without gaps
    order = order_within_cluster(clusters, "random", seed=data.draw(st.integers(0, 3)), k=k)
    return clusters, tokens, groups, order, np.bincount(clusters, minlength=k).astype(np.int64)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_unit_tokens_give_the_row_water_filling(data):
    clusters, _, groups, order, sizes = _problem(data)
    ones = np.ones(len(clusters), dtype=np.int64)
    budget = data.draw(st.integers(0, len(clusters)))
    assert np.array_equal(token_water_fill(order, clusters, ones, sizes, budget),
                          S.water_fill_quotas(sizes, budget))
    assert np.array_equal(token_water_fill(order, clusters, ones, sizes, budget, group_of_cluster=groups),
                          S.grouped_quotas(sizes, groups, budget))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_token_budget_met_to_within_one_row_with_level_balance(data):
    clusters, tokens, groups, order, sizes = _problem(data)
    total = int(tokens.sum())
    budget = data.draw(st.integers(0, total))
    power = data.draw(st.sampled_from([0.0, 0.5, 1.0]))
    use_groups = data.draw(st.booleans())
    quotas = token_water_fill(order, clusters, tokens, sizes, budget, power, groups if use_groups else None)
    assert (quotas <= sizes).all()
    starts = np.concatenate([[0], np.cumsum(sizes)])
    taken = [order[starts[c]:starts[c] + quotas[c]] for c in range(len(sizes))]
    nxt = [order[starts[c] + quotas[c]] for c in range(len(sizes)) if quotas[c] < sizes[c]]
    selected = int(sum(tokens[t].sum() for t in taken))
    assert selected <= budget
    if nxt:  # one more row would pass the budget: T is met to within one row
        assert selected + int(tokens[nxt].max()) > budget
        assert budget - selected < max(int(tokens.max()), 1)
    if power == 0 and not use_groups:  # no open cluster's next row is below another cluster's taken level
        level = [int(tokens[t].sum()) for t in taken]
        for c in range(len(sizes)):
            if quotas[c] < sizes[c]:
                reach = level[c] + int(tokens[order[starts[c] + quotas[c]]])
                assert all(level[a] <= reach for a in range(len(sizes)))


def test_gsm8k_token_budget_is_met_and_balanced():
    rows = gsm8k_rows(300)
    tok = build_tokenizer(chat_template=False)
    tokens = np.array([len(tok(r["question"] + "\n" + r["answer"])["input_ids"]) for r in rows], dtype=np.int64)
    assert tokens.max() > 3 * tokens.min()  # lengths vary: a row budget is not a token budget
    rng = np.random.default_rng(0)
    # real skew: a cluster per answer length band (short answers are cheap rows), in shuffled id order
    clusters = np.digitize(tokens, np.quantile(tokens, [0.2, 0.5, 0.8]))
    ids = rng.permutation(len(rows))
    total = int(tokens.sum())
    for budget in (1_000, total // 4, total // 2, total - 7):
        sel = S.select_rows(clusters, ids=ids, tokens=tokens, token_budget=budget, seed=1)
        assert sel.tokens_selected <= budget and sel.tokens_requested == budget and sel.tokens_total == total
        assert budget - sel.tokens_selected < tokens.max()  # within one row
        assert sel.tokens_selected == tokens[sel.rows].sum() and sel.mode == "token-budget"
        # balanced in tokens: every cluster not taken whole got about the same tokens (the level)
        per = np.bincount(clusters[sel.rows], weights=tokens[sel.rows], minlength=4)
        cluster_tokens = np.bincount(clusters, weights=tokens, minlength=4)
        open_ = per < cluster_tokens
        assert per[open_].max() - per[open_].min() <= tokens.max()
        assert (per[~open_] <= per[open_].min() + tokens.max()).all()
    sel = S.select_rows(clusters, ids=ids, tokens=tokens, token_fraction=0.25, seed=1)
    assert sel.tokens_requested == int(np.floor(0.25 * total)) and 0 <= sel.tokens_requested - sel.tokens_selected \
        < tokens.max()
    rows_sel = S.select_rows(clusters, ids=ids, tokens=tokens, fraction=0.25, seed=1)  # rows still report tokens
    assert rows_sel.mode == "fraction" and rows_sel.tokens_selected == tokens[rows_sel.rows].sum()
    # a budget over groups of clusters: met as well
    grouped = S.select_rows(clusters, ids=ids, tokens=tokens, token_budget=total // 3, seed=1,
                            groups=np.array([0, 0, 1, 1]))
    assert 0 <= total // 3 - grouped.tokens_selected < tokens.max()


@pytest.mark.parametrize("kwargs, message", [
    ({"token_budget": 10 ** 9}, r"--token-budget 1,000,000,000 is larger than the data's \d[\d,]* tokens \(words\)"),
    ({"token_budget": 100, "fraction": 0.5}, "give one budget: --token-budget and --fraction"),
    ({"token_budget": 100, "token_fraction": 0.5}, "got both"),
    ({"token_fraction": 1.5}, r"--token-fraction must be in \(0, 1\]"),
    ({"token_budget": -3}, "positive number of tokens"),
    ({"token_budget": 100, "within": "diverse"}, "--within diverse picks rows for a row quota"),
    ({"token_budget": 1}, "less than any cluster's first row"),
])
def test_bad_token_budgets_are_one_line(kwargs, message):
    clusters = np.array([0, 0, 1, 1, 1])
    with pytest.raises(CurateError, match=message) as err:
        S.select_rows(clusters, tokens=np.array([5, 6, 7, 8, 9]), tokens_counted_by="words", **kwargs)
    assert "\n" not in str(err.value)


def _cli(cli_runner, args, code=0):
    from cluster_curate.cli import main
    res = cli_runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == code, res.output
    return res


def test_select_command_token_budget_on_gsm8k(tmp_path, cli_runner):
    import json

    import pyarrow.parquet as pq

    from cluster_curate.commands.common import token_counts
    from cluster_curate.io.datasets import open_dataset
    from conftest import FIXTURES

    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    tok_dir = tmp_path / "tok"
    build_tokenizer(chat_template=True).save_pretrained(tok_dir)
    _cli(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "-q"])
    _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "c.parquet", "-q"])
    examples = [ex for b in open_dataset(str(data)).iter_batches() for ex in b.examples]
    from transformers import AutoTokenizer
    p, r = token_counts(AutoTokenizer.from_pretrained(tok_dir), examples)
    exact = np.array(p) + np.array(r)
    budget = int(exact.sum() * 0.3)
    res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s.parquet", "--token-budget",
                            budget, "--tokenizer", tok_dir, "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["tokens_counted_by"] == f"tokenizer {tok_dir} (exact)"
    sel = pq.read_table(tmp_path / "s.parquet")
    ids = sel.column("id").to_numpy()
    assert sel.column("n_tokens").to_pylist() == exact[ids].tolist()  # shard reuses the exact counts
    assert 0 <= budget - exact[ids].sum() < exact.max()
    assert summary["tokens_selected"] == {"selected": int(exact[ids].sum()), "total": int(exact.sum())}
    # counting tokens in other data than the clusters were made from is refused, naming both
    other = tmp_path / "other.jsonl"
    other.write_text("".join(data.read_text().splitlines(keepends=True)[:-1]))
    res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s0.parquet", "--token-budget",
                            budget, "--tokenizer", tok_dir, "--data", other], code=2)
    assert f"c.parquet: was made from {data} (fingerprint" in res.output and f"not from {other}" in res.output
    assert not (tmp_path / "s0.parquet").exists()
    # without --tokenizer: the embeddings' counts (words, for the text feature), and the summary says so
    res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s2.parquet", "--token-fraction",
                            "0.25", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["tokens_counted_by"] == "the embeddings' n_tokens: whitespace words (no model tokenizer)"
    # a row budget still reports the tokens it keeps
    res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s3.parquet", "--fraction",
                            "0.31", "--json"])
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert "tokens_selected" in summary and summary["kept"] == 0.3100
    res = _cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s4.parquet", "--token-budget",
                            10 ** 9], code=2)
    assert "is larger than the data's" in res.output and res.output.count("ERROR") == 1


def test_run_tokenizer_counts_tokens_once_and_shard_reuses_selects_counts(cli_runner, tmp_path, monkeypatch):
    """`run --tokenizer T` counted every selected row's tokens twice: at select (its n_tokens column) and again at
    shard. shard now reuses select's counts when they were made by the same, unchanged tokenizer; the shards and
    manifest are those a second count gives. A tokenizer changed since is counted again."""
    import json
    import os

    import pyarrow.parquet as pq

    from cluster_curate.commands import common
    from conftest import FIXTURES

    tok_dir = tmp_path / "tok"
    build_tokenizer(chat_template=True).save_pretrained(tok_dir)
    passes = []
    real = common.count_tokens_pass

    def counting(ds, ids, tokenizer_path, label, *a, **k):
        passes.append(label)
        return real(ds, ids, tokenizer_path, label, *a, **k)
    monkeypatch.setattr(common, "count_tokens_pass", counting)
    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    _cli(cli_runner, ["run", data, "--out", tmp_path / "p", "--features", "text", "--dim", "16", "--k", "6",
                      "--token-fraction", "0.3", "--tokenizer", tok_dir, "--num-shards", "2",
                      "--micro-batch-size", "2", "-q"])
    assert passes == ["select: count tokens"]  # not "shard: count tokens" as well
    manifest = json.loads((tmp_path / "p" / "shards" / "manifest.json").read_text())
    assert manifest["params"]["token_source"] == f"tokenizer {tok_dir}"
    # the same as counting again: a tokenizer touched since (its stamp changed) is counted again, same numbers
    for f in tok_dir.iterdir():
        os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10 ** 9))
    _cli(cli_runner, ["shard", tmp_path / "p" / "selection.parquet", "--data", data, "--out", tmp_path / "again",
                      "--tokenizer",
                      tok_dir, "--num-shards", "2", "--micro-batch-size", "2", "-q"])
    assert passes == ["select: count tokens", "shard: count tokens"]
    again = json.loads((tmp_path / "again" / "manifest.json").read_text())
    def same(m):  # the files' byte hashes and sizes cover their footers, which name the output
        return {k: v for k, v in m.items() if k != "inputs"} | {"files": [{**f, "sha256": None, "bytes": None}
                                                                         for f in m["files"]]}
    assert same(again) == same(manifest)
    shards = sorted(p.name for p in (tmp_path / "p" / "shards").iterdir() if p.suffix == ".parquet")
    assert shards and all(pq.read_table(tmp_path / "p" / "shards" / f).equals(pq.read_table(tmp_path / "again" / f))
                          for f in shards)


def test_run_selects_again_when_its_tokenizer_is_saved_again(cli_runner, tmp_path, monkeypatch):
    """`run --tokenizer DIR` kept its selection 'up to date' after another tokenizer was saved in DIR: the
    selection's token counts were the old tokenizer's, and over the budget by the new one's. Its files are an input
    of select now, as --model's are of embed: the selection is the one a fresh run makes."""
    import json

    import pyarrow.parquet as pq

    from conftest import FIXTURES
    monkeypatch.chdir(tmp_path)
    build_tokenizer(vocab_size=300).save_pretrained("tok")
    run = ["run", FIXTURES / "gsm8k" / "train-300.jsonl", "--features", "text", "--dim", "16", "--k", "6",
           "--token-budget", "6000", "--tokenizer", "tok", "--num-shards", "2", "--json", "--out"]
    _cli(cli_runner, [*run, "p"])
    build_tokenizer(vocab_size=280).save_pretrained("tok")
    stages = json.loads(_cli(cli_runner, [*run, "p"]).stdout)["stages"]
    assert [s["status"] for s in stages] == ["up to date", "up to date", "ran", "ran"]
    assert stages[2]["reason"] == "its input changed (--tokenizer tok: its content changed)"
    _cli(cli_runner, [*run, "fresh"])
    ids = [sorted(pq.read_table(f"{d}/selection.parquet").column("id").to_pylist()) for d in ("p", "fresh")]
    assert ids[0] == ids[1]


@pytest.mark.parametrize("prefix_space", [False, True])
def test_answer_tokens_are_trls_count_whatever_the_tokenizer_does_to_a_text_alone(prefix_space):
    """A byte-level tokenizer that adds a prefix space to a text it reads alone counted one token more per answer
    (`Ġ`) than TRL, which counts the answer after its prompt (the whole's tokens beyond their common prefix with the
    prompt's, the generation prompt included)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cluster_curate.features.models import answer_token_counts
    from cluster_curate.io.datasets import Example
    from tiny_lm import CHATML, SENTENCES
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(SENTENCES * 4, trainer=trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>")
    fast.chat_template = CHATML
    rows = gsm8k_rows(20)
    examples = [Example(i, [{"role": "user", "content": r["question"]}], r["answer"]) for i, r in enumerate(rows)]

    def trl(ex):
        texts = (fast.apply_chat_template(list(ex.prompt), add_generation_prompt=True, tokenize=False),
                 fast.apply_chat_template([*ex.prompt, {"role": "assistant", "content": ex.response}], tokenize=False))
        p, w = (fast(text, add_special_tokens=False)["input_ids"] for text in texts)
        return len(w) - next((j for j, (a, b) in enumerate(zip(p, w)) if a != b), min(len(p), len(w)))
    assert answer_token_counts(fast, examples, [e.response for e in examples]) == [trl(e) for e in examples]


def test_embeddings_gone_and_a_token_budget_gives_no_false_warning_of_no_n_tokens(tmp_path, cli_runner):
    """The clusters' embeddings gone and a token budget: select warned that 'the selection gets no n_tokens', then
    counted the words from the data and wrote them as its n_tokens. Warned only where it gets none."""
    import json

    import pyarrow.parquet as pq

    from conftest import FIXTURES
    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    _cli(cli_runner, ["embed", data, "--out", tmp_path / "e.parquet", "--dim", "16", "-q"])
    _cli(cli_runner, ["cluster", tmp_path / "e.parquet", "--out", tmp_path / "c.parquet", "--k", "4", "-q"])
    (tmp_path / "e.parquet").unlink()
    summary = json.loads(_cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "s.parquet",
                                           "--token-budget", "5000", "--json"]).stdout.strip().splitlines()[-1])
    assert summary["n_tokens_column"] and summary["tokens_counted_by"].startswith("whitespace words")
    assert not any("n_tokens" in w for w in summary["warnings"]), summary["warnings"]
    assert pq.read_table(tmp_path / "s.parquet").column("n_tokens").null_count == 0
    summary = json.loads(_cli(cli_runner, ["select", tmp_path / "c.parquet", "--out", tmp_path / "r.parquet",
                                           "--budget", "50", "--json"]).stdout.strip().splitlines()[-1])
    assert not summary["n_tokens_column"] and any("gets no n_tokens" in w for w in summary["warnings"])


def test_a_tokenizer_folder_is_known_by_its_files_before_any_work(tmp_path):
    """--tokenizer DIR is checked before the first stage: a folder with no tokenizer file is refused naming what it
    holds (transformers said so after embed and cluster); ByT5's save_pretrained writes tokenizer_config.json alone
    (no vocabulary file), which is a tokenizer's folder all the same."""
    from cluster_curate.commands.common import check_tokenizer_path
    from transformers import ByT5Tokenizer
    ByT5Tokenizer().save_pretrained(tmp_path / "byt5")
    check_tokenizer_path(str(tmp_path / "byt5"))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(CurateError, match=r"no tokenizer in this directory \(no tokenizer.json, .*; it holds "
                                          r"config.json\)"):
        check_tokenizer_path(str(tmp_path / "model"))
