"""The benchmark family (benchmarks/skillfamily.py) and its selection-only and trained harnesses: instances
have the properties the family promises, and the harnesses run end to end. No quality targets here: those
live in benchmarks/results/family_*.md."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import skillfamily as F

ROOT = Path(__file__).resolve().parents[1]


def test_pool_and_splits():
    assert len(F.POOL) >= 40 and len({p.name for p in F.POOL}) == len(F.POOL)
    dev, test = F.SPLITS["dev"], F.SPLITS["test"]
    assert not set(dev) & set(test)


@pytest.mark.parametrize("seed", [1000, 1001, 2000, 2007])
def test_instance_has_what_the_family_promises(seed):
    inst = F.draw_instance(seed)
    again = F.draw_instance(seed)
    assert inst.describe() == again.describe()  # seeded
    assert 8 <= len(inst.skills) <= 20 and 0.8 <= inst.zipf <= 1.5
    rows = [s.rows for s in inst.skills]
    assert sum(rows) == inst.rows and min(rows) >= 40 and rows == sorted(rows, reverse=True)
    assert all(2 <= len(s.templates) <= 8 for s in inst.skills)
    assert any(s.role == "diverse" and len(s.templates) == 8 for s in inst.skills)
    twins = inst.twin_pairs()
    assert twins
    for frequent, rare in twins:
        a, b = inst.skills[frequent], inst.skills[rare]
        assert a.rows > b.rows and a.primitive.family == b.primitive.family and a.primitive.param != b.primitive.param
        assert a.templates == b.templates  # the same frames and phrases: the prompts differ by the parameter only


def test_rows_are_alpaca_both_styles_share_prompts_and_test_prompts_are_new(tmp_path):
    short = F.write_instance(tmp_path / "short", 1003, "short", test_per_skill=3)
    worked = F.write_instance(tmp_path / "worked", 1003, "worked", test_per_skill=3)
    read = lambda p: [json.loads(line) for line in Path(p).read_text().splitlines()]  # noqa: E731
    s_train, w_train = read(short["train"]), read(worked["train"])
    assert set(s_train[0]) == {"instruction", "output", "skill"}
    assert [r["instruction"] for r in s_train] == [r["instruction"] for r in w_train]
    assert all(w["output"].endswith("Answer: " + s["output"]) for s, w in zip(s_train, w_train))
    # answers-final (round 33) keys a worked row by its final answer, as answers-prop keys the one-word row
    import bench_family
    final = bench_family.answer_numbers([bench_family.final_answer(w["output"]) for w in w_train])
    assert np.array_equal(final, bench_family.answer_numbers([s["output"] for s in s_train]))
    assert np.array_equal(bench_family.answer_numbers([bench_family.final_answer(s["output"]) for s in s_train]),
                          bench_family.answer_numbers([s["output"] for s in s_train]))
    test = read(short["test"])
    assert not {r["instruction"] for r in test} & {r["instruction"] for r in s_train}
    labels = json.loads(Path(short["labels"]).read_text())
    assert len(labels["skill"]) == len(s_train) and labels["twins"]
    # a rare twin's prompts differ from its frequent twin's by one word or number
    # (nouns and numbers masked: nouns and operands vary inside every skill; a parameter given as a digit is
    # masked with them, so its templates look the same as the twin's, as the tool's text feature sees them)
    names, nouns = labels["skills"], set(F.draw_instance(1003).nouns)

    def shape(text):
        words = text.lower().replace(",", " ").replace(":", " ").replace("(", " ").replace(")", " ").split()
        return tuple("N" if w in nouns else "D" if w.isdigit() else w for w in words)
    for frequent, rare in labels["twins"]:
        fw = {shape(r["instruction"]) for r in s_train if r["skill"] == names[frequent]}
        rw = {shape(r["instruction"]) for r in s_train if r["skill"] == names[rare]}
        assert all(any(len(a) == len(b) and sum(x != y for x, y in zip(a, b)) <= 1 for a in fw) for b in rw)


def test_test_prompts_ask_for_operands_their_skill_was_trained_on():
    inst = F.draw_instance(1001)
    seen_train, seen_test = F.generate(inst, "short", 20, "seen")
    free_train, free_test = F.generate(inst, "short", 20, "new")
    assert seen_train == free_train  # the test design never changes the training rows (nor the cheap measures)
    trained = {(r["skill"], r["_operand"]) for r in seen_train}
    assert all((r["skill"], r["_operand"]) in trained for r in seen_test)
    assert sum((r["skill"], r["_operand"]) not in trained for r in free_test) > 0.1 * len(free_test)
    assert not {r["instruction"] for r in seen_test} & {r["instruction"] for r in seen_train}
    with pytest.raises(ValueError, match="test_operands"):
        F.generate(inst, "short", 1, "unseen")


def test_an_instance_is_valid_only_on_its_reference_runs():
    validity = F.validity
    runs = lambda *xs: [{"macro": m, "worst": w} for m, w in xs]  # noqa: E731
    ref = {"random": runs((0.5, 0.1), (0.5, 0.12)), "oracle": runs((0.8, 0.5), (0.8, 0.46)), "full": runs((0.9, 0.6))}
    assert validity(ref) == "yes"
    assert validity({**ref, "full": runs((0.84, 0.6))}) == "no"  # the full data must be learnt
    exactly = {**ref, "random": runs((0.5, 0.1), (0.5, 0.1)), "oracle": runs((0.8, 0.3), (0.8, 0.3))}
    assert validity(exactly) == "yes"  # 20 points is enough (0.3 - 0.1 is 0.19999... in floating point)
    assert validity({**ref, "oracle": runs((0.8, 0.25), (0.8, 0.27))}) == "no"  # under 20 points of worst skill
    assert validity({**ref, "oracle": runs((0.8, 0.9), (0.8, 0.0))}) == "no"  # not above the seed spread
    assert validity({**ref, "oracle": runs((0.8, 0.5))}) == "?" and validity({"random": ref["random"]}) == "?"
    # the worst-skill gap decides before the full data is trained; a passing gap waits for it
    assert validity({k: ref[k] for k in ("random", "oracle")}) == "?"
    assert validity({"random": ref["random"], "oracle": runs((0.8, 0.25), (0.8, 0.27))}) == "no"
    # the gap alone: judged once random has a run and the oracle two, whatever the full data did
    assert F.worst_gap_passed(ref) is True and F.worst_gap_passed({**ref, "full": runs((0.84, 0.6))}) is True
    assert F.worst_gap_passed({**ref, "oracle": runs((0.8, 0.25), (0.8, 0.27))}) is False
    assert F.worst_gap_passed({**ref, "oracle": runs((0.8, 0.5))}) is None and F.worst_gap_passed({}) is None


def test_a_run_is_cached_under_its_recipe():
    import hashlib
    from bench_family_train import run_digest
    ids = [3, 5, 8]
    # train_eval's own recipe keeps the key the runs of rounds 10-12 were stored under
    assert run_digest(ids, 80, 0, {}) == hashlib.blake2b(b"[[3, 5, 8], 80, 0]", digest_size=8).hexdigest()
    assert len({run_digest(ids, 80, 0, {}), run_digest(ids, 80, 0, {"lr": 1e-3}), run_digest(ids, 80, 1, {}),
                run_digest(ids, 40, 0, {}), run_digest(ids[:2], 80, 0, {})}) == 5


def test_the_wording_reference_is_the_oracle_when_each_skill_has_one_wording():
    from bench_family import wording_reference
    from cluster_curate.selection import water_fill_quotas
    skills = np.repeat([0, 1, 2], [300, 60, 40])
    ids, budget = np.arange(len(skills)), 120
    oracle = water_fill_quotas(np.bincount(skills), budget)
    one = wording_reference(ids, skills, {"template": np.zeros(len(skills), int)}, budget, [0], [], oracle)
    assert one["coverage"] == 1.0 and one["worst"] == 1.0
    # the frequent skill asked in 3 wordings takes 3 of the 5 quotas (72 rows against its share of 40)
    template = np.where(skills == 0, np.arange(len(skills)) % 3, 0)
    three = wording_reference(ids, skills, {"template": template}, budget, [0], [], oracle)
    assert three["dominant"] == 72 / 40 and three["worst"] == 24 / 40


def test_the_spread_order_takes_one_row_of_each_answer_before_a_second():
    from bench_family import spread_order_key
    from cluster_curate.selection import select_rows
    rng = np.random.default_rng(0)
    clusters = rng.integers(0, 4, 300)
    answers = rng.integers(0, 12, 300)
    ids = np.arange(300) * 7
    for kind in (clusters, clusters // 2):  # a kind of one cluster each, then of two
        key = spread_order_key(kind, answers, ids, 3)
        rank = np.floor(-key).astype(int)  # the row's rank among its kind's rows with its answer
        for budget in (8, 40, 120, 299):
            rows = select_rows(clusters, ids=ids, budget=budget, seed=3, within="hard", loss=key).rows
            plain = select_rows(clusters, ids=ids, budget=budget, seed=3).rows
            assert np.array_equal(np.bincount(clusters[rows], minlength=4), np.bincount(clusters[plain], minlength=4))
            taken = np.zeros(300, bool)
            taken[rows] = True
            for c in range(4):  # a cluster takes no second row of an answer before a first row of another
                mine = clusters == c
                if taken[mine].any() and (~taken[mine]).any():
                    assert rank[mine & taken].max() <= rank[mine & ~taken].min()
                if kind is clusters:
                    got = answers[taken & mine]
                    assert len(set(got)) == min(len(got), len(set(answers[mine])))
    # unique answers (real data): exactly the random order
    for budget in (10, 93):
        assert np.array_equal(select_rows(clusters, ids=ids, budget=budget, seed=5, within="hard",
                                          loss=spread_order_key(clusters, np.arange(300), ids, 5)).rows,
                              select_rows(clusters, ids=ids, budget=budget, seed=5).rows)


@pytest.mark.slow
def test_bench_family_and_trained_quick_run(tmp_path):
    res = tmp_path / "res"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_family.py"), "--instances", "1",
                           "--mechanisms", "default,pair,tool-tf/groupby,answers,answer-sets,answers-spread,answers-prop",
                           "--check-cli", "1",
                           "--work", str(tmp_path / "w"), "--results", str(res)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((res / "family_dev.json").read_text())
    m = data["instances"][0]["metrics"]
    assert set(m) == {"random", "wording", "default", "pair", "tool-tf/groupby", "answers", "answer-sets",
                      "answers-spread", "answers-prop"}
    assert m["answers-spread"] == m["answers"] == m["answers-prop"]  # the same quotas: other rows, same counts
    assert 0 < m["default"]["coverage"] <= 1 and m["random"]["coverage"] < m["wording"]["coverage"] <= 1
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_family_train.py"), "--quick",
                           "--work", str(tmp_path / "t"), "--results", str(res)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (res / "family_train_dev_quick.md").read_text()
    assert "| 1000 | short |" in md and "Spearman" in md and "| default |" in md
    # --only-valid: one oracle seed decides no validity, so the label-free contender is not trained again
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_family_train.py"), "--quick",
                           "--only-valid", "--work", str(tmp_path / "t"), "--results", str(res)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "0 training runs to do" in proc.stdout and "validity ?, not trained on default" in proc.stdout
    assert "| default |" not in (res / "family_train_dev_quick.md").read_text()
    # --merge: the same tables again from the runs the results file stores, with the cache gone
    shutil.rmtree(tmp_path / "t" / "i1000-short-seen" / "runs")
    merge = [sys.executable, str(ROOT / "benchmarks" / "bench_family_train.py"), "--quick", "--results", str(res),
             "--merge", str(res / "family_train_dev_quick.json")]
    md = (res / "family_train_dev_quick.md").read_text()
    proc = subprocess.run(merge + ["--name", "merged"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = lambda text: [line for line in text.splitlines() if line.startswith("| 1000 ")]  # noqa: E731
    assert table((res / "merged.md").read_text()) == table(md) != []
    # runs of another recipe are not joined to these
    proc = subprocess.run(merge + ["--lr", "3e-3", "--name", "other"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "is not this run's" in proc.stderr and "Traceback" not in proc.stderr


def test_difficulty_statistics_of_a_skill():
    from bench_difficulty_signal import skill_statistics

    got = skill_statistics(["Upper: cat", "Upper: dog", "Loud: cat", "Upper: emu"], ["CAT", "dog", "cat", "x"])
    assert got["rows"] == 4 and got["diversity"] == 3 / 4  # "CAT" and "cat" are one answer
    assert got["entropy"] == pytest.approx(1.5)
    assert got["copy"] == 3 / 4 and got["length"] == 2.5
    # "cat" occurs in 2 prompts, both answered "cat": those rows are explained fully; "upper" (3 rows) explains
    # "dog" and "x" by 1/3 each; no other word occurs twice.
    assert got["word_join"] == pytest.approx((1 + 1 / 3 + 1 + 1 / 3) / 4)


@pytest.mark.slow  # the proxy's fit and the longer held-out fit on every skill of an instance
def test_difficulty_signal_runs_on_the_oracles_runs(tmp_path):
    import bench_difficulty_signal

    names = [s.name for s in F.draw_instance(1002).skills]
    acc = {k: i / len(names) for i, k in enumerate(names)}  # a made-up difficulty ladder in skill order
    runs = {"runs": {"1002-short-oracle": [{"per_skill": acc}]}, "validity": {"1002-short": "yes"},
            "recipe": {"test_per_skill": 5}}
    (tmp_path / "r.json").write_text(json.dumps(runs))
    bench_difficulty_signal.main(["--runs", str(tmp_path / "r.json"), "--results", str(tmp_path), "--fit-steps", "4"])
    got = json.loads((tmp_path / "difficulty_signal.json").read_text())
    inst = got["instances"]["1002"]
    assert set(inst["skills"]) == set(names)
    assert inst["skills"][names[0]]["difficulty"] == 1.0
    assert inst["skills"][names[0]]["rows"] == F.draw_instance(1002).skills[0].rows
    assert all(0 < v["proxy_loss"] < 20 for v in inst["skills"].values())  # the tool's proxy read every skill
    assert all(0 < v["heldout_loss"] < 20 for v in inst["skills"].values())  # ... and the longer fit's held-out rows
    assert got["fit"][got["fit"].index("--proxy-steps") + 1] == "4" and "--proxy-epochs" not in got["fit"]
    assert got["summary"]["valid"]["rows"]["n"] == 1
    assert "| 1002 | yes |" in (tmp_path / "difficulty_signal.md").read_text()
