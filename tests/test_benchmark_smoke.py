"""Smoke test of the evidence harness (benchmarks/evidence.py): it runs end to end on a tiny configuration
and writes its tables and plots. No accuracy targets here: those live in benchmarks/results/quality.md."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[1]
# seconds after which a run of the harness is taken for hung, not a speed bound: the five evidence runs below took
# 176 s together on a loaded 2-core machine, where each was given 170 s
HANG = 600


def test_skillmix_generator_is_long_tailed_and_test_is_new(tmp_path):
    import skillmix

    paths = skillmix.write_benchmark(tmp_path, rows=600, variant="worked", seed=3, test_per_skill=5)
    train = [json.loads(line) for line in paths["train"].read_text().splitlines()]
    test = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    counts = skillmix.skill_counts(600)
    assert sum(counts) == 600 and counts == sorted(counts, reverse=True)
    assert {r["skill"] for r in test} == set(skillmix.SKILL_NAMES)
    assert all(sum(r["skill"] == s for r in test) == 5 for s in skillmix.SKILL_NAMES)
    assert not {r["instruction"] for r in test} & {r["instruction"] for r in train}
    assert all(r["output"].split("Answer: ")[-1] for r in train)
    assert set(train[0]) == {"instruction", "output", "skill"}  # the tool sees no template/topic labels


def test_final_answer_scoring():
    import train_eval

    toks = train_eval.words("7 doubled: 7 + 7 = 14. Answer: 14")
    assert train_eval.final_answer(toks, train_eval.words("Answer:")) == ["14"]
    assert train_eval.final_answer(["14"], train_eval.words("Answer:")) == []


@pytest.mark.slow
def test_evidence_quick_runs_and_writes_tables(tmp_path):
    results = tmp_path / "results"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "evidence.py"), "--quick", "--rows", "360", "--epochs", "1",
           "--test-per-skill", "4", "--contenders", "full,random,oracle", "--variants", "short,worked",
           "--work", str(tmp_path / "work"), "--results", str(results)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (results / "quality.md").read_text()
    for variant in ("short", "worked"):
        assert f"## Variant `{variant}`" in md
        assert (results / f"{variant}_per_skill.png").stat().st_size > 0
        assert (results / f"{variant}_time.png").stat().st_size > 0
    data = json.loads((results / "quality.json").read_text())
    for variant in ("short", "worked"):
        res = data["results"][variant]
        assert set(res) == {"full", "random", "oracle"}
        assert res["full"]["rows"] == 360 and res["random"]["rows"] == res["oracle"]["rows"] == round(0.31 * 360)
        assert len(res["oracle"]["per_skill"]) == 12
        assert all(0.0 <= v <= 1.0 for v in res["oracle"]["per_skill"].values())
        v = data["validity"][variant]  # the benchmark's own check is computed and reported
        assert v["decided"] and v["seeds"] == 1 and not v["seeds_ok"] and not v["valid"]
    assert md.count("**Validity:** NOT VALID") == 2

    # a contender-only run relates to the stored full / random / oracle of the same recipe
    again = tmp_path / "again"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "evidence.py"), "--quick", "--rows", "360", "--epochs", "1",
           "--test-per-skill", "4", "--contenders", "default", "--variants", "short", "--work", str(tmp_path / "work"),
           "--results", str(again), "--baselines", str(results / "quality.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((again / "quality.json").read_text())["results"]["short"]
    assert list(res) == ["full", "random", "oracle", "default"]
    assert all(res[n]["stored"] for n in ("full", "random", "oracle")) and "stored" not in res["default"]
    assert res["random"]["macro"] == data["results"]["short"]["random"]["macro"]
    assert "recovered_macro" in res["default"] and "coverage" in res["default"]
    assert "| random (stored) |" in (again / "quality.md").read_text()
    proc = subprocess.run(cmd[:6] + ["2"] + cmd[7:], capture_output=True, text=True, timeout=HANG)
    assert proc.returncode != 0 and "differs from this run's" in proc.stderr

    # another training seed for the same selections: a run of its own, not the cached one, and not comparable
    # with baselines trained at the selection seed
    offset = [*cmd[:-4], "--results", str(tmp_path / "offset"), "--train-seed-offset", "7"]
    proc = subprocess.run([*offset, "--baselines", str(results / "quality.json")], capture_output=True, text=True,
                          timeout=HANG)
    assert proc.returncode != 0 and "train_seed_offset 7" in proc.stderr
    proc = subprocess.run(offset, capture_output=True, text=True, timeout=HANG)
    assert proc.returncode == 0 and "1 training runs to do" in proc.stderr, proc.stderr[-2000:]
    res = json.loads((tmp_path / "offset" / "quality.json").read_text())["results"]["short"]["default"]
    assert res["seed_list"] == [7]


def test_bench_target_runs_on_the_pool_embed_keeps(tmp_path):
    """The skill pool holds exact copies, which `embed` leaves out: every contender selects from the kept rows
    and the results name row ids, not positions."""
    import bench_target
    import pyarrow.parquet as pq

    log: list[str] = []
    pool = bench_target.prepare_pool(tmp_path, "short", log, less=False)
    res = bench_target.skill_draw(pool, 0, [0], False, log, [0.6], [2], ("hits", "cluster"))
    kept = set(pq.read_table(pool["text"], columns=["id"])["id"].to_pylist())
    assert len(kept) < 5000 and res["budget"] == round(0.1 * len(kept))
    skill = json.loads((pool["dir"] / "labels.json").read_text())["skill"]
    names = json.loads((pool["dir"] / "labels.json").read_text())["skills"]
    for name in ("random", "untargeted", "rds", "tool", "tool-w0.6-h2", "tool-w0.6-h2-cluster", "oracle"):
        rows = res["selections"][name][0]
        assert len(rows) == len(set(rows)) == res["budget"] and set(rows) <= kept, name
        counts = [sum(names[skill[i]] == s for i in rows) for s in res["targets"]]
        assert counts == res["measures"][name]["counts"], name  # measured on the ids the trainer gets
    m = res["measures"]
    assert m["oracle"]["share"] == 1.0 and m["tool"]["share"] > 0.9 > m["untargeted"]["share"]
    assert m["tool"]["counts"] == m["tool-w0.6-h2"]["counts"]  # the command's default is the in-process default


def test_training_digest_keys_the_training_seed_and_keeps_the_old_runs():
    import evidence

    sel = evidence.Selection([3, 1, 2])
    legacy = evidence.hashlib.blake2b(evidence.json.dumps(
        [[3, 1, 2], False, sorted(vars(evidence.train_eval.TrainConfig()).items())], default=str).encode(),
        digest_size=8).hexdigest()
    assert evidence.training_digest(sel) == evidence.training_digest(sel, train_seed_offset=0) == legacy
    assert evidence.training_digest(sel, train_seed_offset=100) != legacy


def test_validity_needs_full_quality_a_clear_oracle_gap_and_three_seeds():
    import evidence

    def trained(macro, worsts, losses=None):
        losses = losses or [0.0] * len(worsts)
        return {"trained": True, "macro": macro, "worst": sum(worsts) / len(worsts), "per_seed_worst": worsts,
                "seeds": len(worsts), "converged": sum(x <= evidence.CONVERGED_LOSS for x in losses)}

    res = {"full": trained(0.95, [0.8, 0.8, 0.8]), "random": trained(0.7, [0.20, 0.25, 0.22]),
           "oracle": trained(0.85, [0.55, 0.60, 0.50])}
    v = evidence.validity(res)
    assert v["valid"] and v["worst_gap"] > 0.3 and abs(v["seed_spread"] - 0.10) < 1e-9 and not v["unconverged"]
    res["oracle"] = trained(0.8, [0.75, 0.30, 0.35], losses=[0.0, 0.15, 0.08])  # gap 0.23 < spread 0.45
    v = evidence.validity(res)
    assert not v["valid"] and not v["gap_ok"] and v["unconverged"] == {"oracle": 2}
    res["full"] = trained(0.80, [0.8, 0.8, 0.8])
    assert not evidence.validity(res)["full_ok"]
    assert not evidence.validity({"full": res["full"]})["decided"]


def test_results_name_paths_from_the_repository():
    from common import ROOT, relative

    text = f"embed {ROOT}/out/evidence/worked/train.jsonl --data {ROOT.parent}/shared/data/g.jsonl out/evidence/worked"
    assert relative(text) == "embed out/evidence/worked/train.jsonl --data ../shared/data/g.jsonl out/evidence/worked"


@pytest.mark.slow
def test_label_controls_keep_the_defaults_counts_and_join_each_skill_into_one_kind(tmp_path):
    """`default-counts` draws other rows with the default's per-skill counts; `perfect-joins` rewrites the
    default's kinds to one per skill (each group's most common skill) before the tool's select reads them."""
    import evidence
    import numpy as np
    import pyarrow.parquet as pq
    import skillmix
    import train_eval

    paths = skillmix.write_benchmark(tmp_path, rows=600, variant="short", seed=0, test_per_skill=2)
    rows = train_eval.load_rows(paths["train"], "skill")
    labels = json.loads((tmp_path / "labels.json").read_text())
    skill, defs, defaults = np.asarray(labels["skill"]), evidence.contenders(), evidence.tool_defaults()
    args = (paths["train"], rows, labels, 186, tmp_path, defaults)
    default = evidence.curate(defs["default"], 0, *args)
    counts = evidence.curate(defs["default-counts"], 0, *args)
    assert np.array_equal(np.bincount(skill[counts.ids], minlength=12), np.bincount(skill[default.ids], minlength=12))
    assert set(counts.ids) != set(default.ids)
    assert counts.ids == evidence.curate(defs["default-counts"], 0, *args).ids  # seeded
    joined = evidence.curate(defs["perfect-joins"], 0, *args)
    assert len(joined.ids) == 186 and joined.train_path is None
    table = pq.read_table(tmp_path / "artifacts" / "perfect-joins" / "clusters-s0.parquet")
    params = json.loads(table.schema.metadata[b"cluster_curate"])["params"]
    kind = np.asarray(params["kind_of_group"])
    group_of_row = np.asarray(params["groups"])[table.column("cluster").to_numpy()]
    major = [np.bincount(skill[table.column("id").to_numpy()[group_of_row == g]]).argmax() for g in range(len(kind))]
    assert all((kind[g] == kind[h]) == (major[g] == major[h]) for g in range(len(kind)) for h in range(len(kind)))
    assert np.bincount(kind).max() > 1  # some skill's groups were joined
    assert np.allclose(params["kind_weights"], np.bincount(kind) ** 0.5)


def test_kinds_by_skill_joins_the_groups_of_one_majority_skill():
    import common
    import numpy as np

    group_of_row = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3])
    skill = np.array([5, 5, 1, 1, 1, 5, 5, 1, 5])  # majorities: 5, 1, 5, 5
    kind, weights = common.kinds_by_skill(group_of_row, skill, 4)
    assert kind.tolist() == [0, 1, 0, 0]  # numbered in order of first appearance
    assert np.allclose(weights, [3 ** 0.5, 1.0])


def test_learnability_kinds_scales_each_kinds_share_by_its_held_out_loss(tmp_path, monkeypatch):
    """answers-learn (round 30 prototype): a kind's weight times its mean held-out loss over the median kind's,
    clipped to LEARN_CLIP; the proxy's warm-up rows (NaN) are left out and a kind with no held-out row keeps its
    weight. The fit itself is bench_difficulty_signal.heldout_loss's, run for real in test_skillfamily."""
    import bench_difficulty_signal
    import bench_family_train as T
    import numpy as np
    from cluster_curate.budget_sequence import Kinds

    loss = np.array([1.0, 1.0, np.nan, 9.0, 4.0, 4.0, np.nan, np.nan, 0.5])  # by row (positions 0..8)
    monkeypatch.setattr(bench_difficulty_signal, "heldout_loss", lambda d, n, args: loss if n == 9 else None)
    kinds = Kinds(np.array([0, 0, 1, 2]), np.array([2 ** 0.5, 1.0, 1.0]))
    ids = np.array([0, 1, 2, 4, 5, 6, 7])  # row 3 (loss 9) and row 8 left out by embed
    group_of_row = np.array([0, 1, 1, 2, 2, 3, 3])  # kind 0: rows 0-2 (mean 1); kind 1: 4, 5 (4); kind 2: none held
    got = T.learnability_kinds(kinds, group_of_row, ids, tmp_path, 9)
    assert got.of_group.tolist() == [0, 0, 1, 2]
    assert np.allclose(got.weight, [2 ** 0.5 * 0.5, 1.0 * 1.6, 1.0])  # median 2.5: 1/2.5 clipped to 0.5, 4/2.5


def test_quality_intervals_reproduce_the_harness_figure_and_bracket_it(tmp_path):
    import common
    import quality_intervals

    run = "quality_r25_short20"  # stored results: 20 seeds of random, the oracle and the answers order
    stored = json.loads((common.RESULTS / run / "quality.json").read_text())["results"]["short"]["within-answers"]
    seeds = quality_intervals.per_seed([run], "short", ["within-answers"])[run]
    rng = quality_intervals.np.random.default_rng(0)
    for m in quality_intervals.METRICS:
        v = quality_intervals.interval(seeds, "within-answers", m, 500, 0.85, rng)
        assert abs(v["recovered"] - stored[f"recovered_{m}"]) < 1e-9  # the same figure evidence.py reports
        assert v["low"] < v["recovered"] < v["high"] and v["units"] == 20 and 0 <= v["below_guard"] <= 1
    md = quality_intervals.main(["--runs", f"{run},{run}", "--contenders", "within-answers", "--draws", "200",
                                 "--results", str(tmp_path)])
    pooled = json.loads(md.with_suffix(".json").read_text())["intervals"]["pooled"]["within-answers"]["macro"]
    assert pooled["units"] == 40 and abs(pooled["recovered"] - stored["recovered_macro"]) < 1e-9  # a run with itself
    assert "| pooled | within-answers | 40 | 86.5% |" in md.read_text()


def test_family_intervals_reproduce_the_stored_median_and_bracket_it():
    import common
    import quality_intervals

    stem = "family_train_test_answers_prop_short"  # stored: 8 valid test instances, 3 seeds each
    summary = {s["contender"]: s for s in json.loads((common.RESULTS / f"{stem}.json").read_text())["summary"]}
    instances = quality_intervals.family_per_seed(stem, "short", ["answers-prop"])
    assert len(instances) == summary["answers-prop"]["instances"] == 8
    rng = quality_intervals.np.random.default_rng(0)
    for m, key in (("macro", "median_macro"), ("worst", "median_worst")):
        v = quality_intervals.interval(instances, "answers-prop", m, 300, 0.85, rng)
        assert abs(v["recovered"] - summary["answers-prop"][key]) < 1e-9  # bench_family_train.py's median
        assert v["low"] <= v["recovered"] <= v["high"] and v["units"] == 8


def test_family_intervals_take_undecided_instances_only_when_asked_and_only_with_their_gap_passed(tmp_path,
                                                                                                   monkeypatch):
    """An instance still to be decided (its full-data run to come) is context with --undecided, and in
    bench_family_train.py's summary when none is valid yet, once random and the oracle passed its worst-skill gap:
    never one that failed the check (the gap, or full data), nor one whose oracle has a single seed (the gap is
    judged on two or more)."""
    import bench_family_train
    import common
    import quality_intervals

    ref = json.loads((common.RESULTS / "family_train_dev_worked_reference.json").read_text())
    # the first five dev instances before their full-data runs, 1002's oracle cut to its first seed
    keep = ("1002", "1003", "1005", "1008", "1009")
    runs = {k: v for k, v in ref["runs"].items() if k.split("-")[0] in keep and not k.endswith("-full")}
    runs["1002-worked-oracle"] = runs["1002-worked-oracle"][:1]
    validity = {f"{i}-worked": "no" if i == "1008" else "?" for i in keep}  # as the harness stores them
    (tmp_path / "undecided.json").write_text(json.dumps({**ref, "runs": runs, "validity": validity}))
    monkeypatch.setattr(quality_intervals, "RESULTS", tmp_path)
    assert quality_intervals.family_per_seed("undecided", "worked", ["answers"]) == []
    undecided = quality_intervals.family_per_seed("undecided", "worked", ["answers"], undecided=True)
    assert len(undecided) == 3  # 1008 failed the worst-skill gap (0.18 < 0.20); 1002's is not judged on one seed
    # each instance's share, as the harness computes it (1003: (0.954 - 0.855) / (0.971 - 0.855))
    shares = sorted(quality_intervals.recovered(i, "answers", "macro", np.arange(3)) for i in undecided)
    assert [round(x, 3) for x in shares] == [0.856, 1.016, 1.087]
    # bench_family_train.py's own summary, with no instance valid yet, takes the same three
    bench_family_train.main(["--split", "dev", "--merge", str(tmp_path / "undecided.json"), "--name", "again",
                             "--results", str(tmp_path)])
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["validity"] == validity
    summary = {s["contender"]: s for s in again["summary"]}
    assert summary["answers"]["instances"] == 3 and summary["answers"]["median_macro"] == np.median(shares)
    # one whose full data failed (1003 at 0.80 macro, under 0.85) is decided, not counted, though its gap passed
    runs["1003-worked-full"] = [{**ref["runs"]["1003-worked-random"][0], "macro": 0.80}]
    (tmp_path / "full_failed.json").write_text(json.dumps({**ref, "runs": runs, "validity": validity}))
    bench_family_train.main(["--split", "dev", "--merge", str(tmp_path / "full_failed.json"), "--name", "failed",
                             "--results", str(tmp_path)])
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed["validity"]["1003-worked"] == "no"
    summary = {s["contender"]: s for s in failed["summary"]}
    assert summary["answers"]["instances"] == 2


@pytest.mark.skipif(not (SHARED_DATA / "gsm8k" / "train.jsonl").exists(),
                    reason="the shared real datasets are not here (bench_scale builds its data from them)")
def test_scale_data_is_near_duplicates_with_some_exact_copies(tmp_path):
    import bench_scale

    bench_scale.make_data(tmp_path / "a.jsonl", 12000)  # the 9,473 real rows, then perturbed repeats
    bench_scale.make_data(tmp_path / "b.jsonl", 12000)
    text = (tmp_path / "a.jsonl").read_text()
    assert text == (tmp_path / "b.jsonl").read_text()  # deterministic
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(rows) == 12000 and set(rows[0]) == {"instruction", "input", "output"}
    first, repeats = rows[:9473], rows[9473:]
    seen = {json.dumps(r, sort_keys=True) for r in first}
    copies = sum(json.dumps(r, sort_keys=True) in seen for r in repeats)
    assert 0 < copies < len(repeats) // 2  # some exact copies; most repeats are near duplicates
    assert repeats[0]["instruction"] != first[0]["instruction"]
    assert bench_scale._perturb("Tom has 3 apples", 2) == "Carmen has 5 apples"


def test_scale_paired_runs_give_medians_and_the_median_of_the_pairs_ratios():
    import bench_scale

    # (wall s, peak MiB, CPU s) of three A B pairs: the ratios' median is not the medians' ratio
    found = {"embed": {"this checkout": [(10.0, 400, 8.0), (12.0, 410, 9.0), (30.0, 420, 10.0)],
                       "baseline": [(20.0, 430, 10.0), (15.0, 400, 12.0), (40.0, 420, 10.0)]}}
    lines = bench_scale.paired_table(found)
    assert lines[2] == "| embed | 3 | 9.00 | 10.00 | 0.800x | 12.00 | 20.00 | 0.750x | 410 / 420 |"


def test_scale_hotspots_name_the_functions_with_the_most_own_time(tmp_path):
    import cProfile

    import bench_scale

    from cluster_curate.features.text import TextFeaturizer
    texts = [f"take {n} apples from the {w} basket" for n in range(40) for w in ("red", "green", "old")]
    cProfile.runctx("TextFeaturizer(dim=8).fit(texts)", globals(), {"texts": texts, "TextFeaturizer": TextFeaturizer},
                    str(tmp_path / "fit.prof"))
    # every function named, whichever are the top ones (a first import inside fit makes importlib's the top
    # ones in a fresh process): a module path from the repository or a package, a built-in's or frozen module's name
    spots = bench_scale.hotspots(tmp_path / "fit.prof", top=100_000)
    assert bench_scale.hotspots(tmp_path / "fit.prof") == spots[:3]  # the default: the top 3
    assert any(s.startswith("string:<module> ") for s in spots) and all(s.endswith(" s") for s in spots)
    assert not any(s.startswith(("<", "/")) for s in spots), [s for s in spots if s.startswith(("<", "/"))]


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "gsm8k" / "test.jsonl").exists(),
                    reason="the shared real datasets are not here (bench_decontaminate plants GSM8K test in train)")
def test_bench_decontaminate_leaves_out_every_planted_copy(tmp_path):
    import bench_decontaminate
    bench_decontaminate.main(["--planted", "20", "--repeats", "1", "--results", str(tmp_path)])
    got = json.loads((tmp_path / "decontaminate.json").read_text())
    kept = got["kept"]
    for name in ("default 31%, --decontaminate", "--target, 10%, --decontaminate"):
        assert kept[name]["verbatim"] == kept[name]["respaced"] == kept[name]["in a chat"] == 0, kept
    assert kept["--target (200 test rows), 10%"]["verbatim"] > 0  # what relevance takes without it
    assert kept["default 31%, --decontaminate --decontaminate-ngrams 13"]["reworded"] == 0
    assert {r["n"]: r["reworded"] for r in got["ngrams"]}[13] == 20
    assert got["same_rows_from_the_data"]


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "code_alpaca" / "code_alpaca_2k.json").exists(),
                    reason="the shared real datasets are not here (bench_preference_balance pairs Code Alpaca)")
def test_bench_preference_balance_plans_the_rejected_answers_tokens(tmp_path):
    import bench_preference_balance
    bench_preference_balance.main(["--rows", "400", "--num-shards", "4", "--results", str(tmp_path)])
    got = json.loads((tmp_path / "preference_balance.json").read_text())["results"]
    counted = got["independent / rejected counted (preference)"]
    ignored = got["independent / rejected ignored (prompt -> chosen)"]
    assert counted["rows"] == ignored["rows"] == 400
    assert 1.0 <= counted["mean"] < ignored["mean"]  # the plan that counts what a DPO step reads balances it


@pytest.mark.skipif(not ((SHARED_DATA / "gsm8k" / "test.jsonl").exists()
                         and (SHARED_DATA / "code_alpaca" / "code_alpaca_2k.json").exists()),
                    reason="the shared real datasets are not here (bench_smollm2_mix mixes GSM8K and Code Alpaca)")
def test_bench_smollm2_mix_runs_end_to_end_for_the_gpu_machine(tmp_path):
    """The GPU machine's script (a few minutes of lent time, no second try) runs its whole path here: the real
    mixture, the tool's 31% through the CLI, a fine-tune of each contender and the held-out loss per source; a tiny
    Llama stands in for SmolLM2, which takes minutes to fine-tune on a CPU."""
    import bench_smollm2_mix
    from tiny_lm import build_llama

    model = build_llama(tmp_path / "llama")
    bench_smollm2_mix.main(["--quick", "--device", "cpu", "--model", str(model), "--results", str(tmp_path)])
    got = json.loads((tmp_path / "smollm2_mix_quick.json").read_text())
    res, budget = got["results"], round(0.31 * 64)
    assert list(res) == ["full", "random 31%", "tool 31%"]
    assert [res[n]["rows"] for n in res] == [64, budget, budget]
    pool, _ = bench_smollm2_mix.load_mix(64, 0.07, 16)
    assert res["full"]["code_rows"] == sum(r["source"] == "code" for r in pool) == round(0.07 * 64)
    for r in res.values():
        assert r["steps"] == 1 and np.isfinite(r["final_train_loss"])
        assert set(r["held_out_loss"]) == {"code", "gsm8k"} and all(0 < v < 50 for v in r["held_out_loss"].values())
    assert [c.split()[1] for c in got["commands"]] == ["embed", "cluster", "select"]
    assert f"--budget {budget}" in got["commands"][-1]
    assert (tmp_path / "smollm2_mix_quick.md").read_text().startswith("# llama fine-tuned on GSM8K + Code Alpaca")
