"""decontamination.py: shared word n-grams between an evaluation set's prompts and the pool's."""

from __future__ import annotations

from cluster_curate.decontamination import BOILERPLATE_MIN, eval_ngrams, shares_ngram


def _p(text: str, system: str | None = None) -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


Q = "Janet's ducks lay 16 eggs per day and she eats three for breakfast every morning before work"


def test_a_reworded_question_shares_an_ngram_and_another_does_not():
    grams, boilerplate = eval_ngrams([_p(Q)], 8)
    assert boilerplate == 0 and len(grams) == len(Q.replace("'", " ").split()) - 8 + 1
    pool = [_p(Q + " Show your work."), _p("  JANET'S ducks lay 16 eggs, per day; and she eats three!"),
            _p("Tom's hens lay 12 eggs per day and he eats two for lunch"), _p("Janet's ducks lay 16 eggs")]
    assert shares_ngram(pool, grams, 8).tolist() == [True, True, False, False]  # case, punctuation aside


def test_system_turns_and_template_wording_do_not_match():
    template = "Below is an instruction that describes a task write a response that completes the request"
    evals = [_p(f"{template} question number {i} about apples", system=Q) for i in range(3 * BOILERPLATE_MIN)]
    grams, boilerplate = eval_ngrams(evals, 8)
    assert boilerplate > 0 and not any("janet" in g or "below is an instruction" in g for g in grams)
    pool = [_p(f"{template} something else entirely here", system=Q), _p(f"{template} question number 3 about apples")]
    assert shares_ngram(pool, grams, 8).tolist() == [False, True]


def test_prompts_shorter_than_n_have_no_ngrams():
    grams, _ = eval_ngrams([_p("add ten to 7")], 8)
    assert grams == set() and shares_ngram([_p("add ten to 7")], grams, 8).tolist() == [False]
    assert shares_ngram([], grams, 8).shape == (0,)


def test_the_summary_line_counts_in_the_right_number():
    """decontaminated_lines words each count with its noun in the number it takes (console.counted)."""
    from cluster_curate.commands.select_parts import decontaminated_lines
    one = {"path": "one.jsonl", "fingerprint": "f", "questions": 1, "questions_in_pool": 1, "rows": 1, "ids": [4],
           "copies": 1, "ngram_rows": 0, "ngram": 13, "boilerplate_ngrams": 0}
    many = dict(one, path="many.jsonl", questions=200, questions_in_pool=60, rows=90, copies=60, ngram_rows=30)
    lines = decontaminated_lines({"rows_left_out": 91, "sets": [one, many]})
    texts = [lines[f"decontaminated {i}"].text for i in (1, 2)]
    assert texts[0] == "one.jsonl: 1 row asks 1 of its 1 question (1 copy, 0 more sharing 13 words): left out"
    assert texts[1] == "many.jsonl: 90 rows ask 60 of its 200 questions (60 copies, 30 more sharing 13 words): left out"


def test_a_question_eval_asks_several_times_is_no_template():
    """An EVAL that repeats a question (several references or samples per question: 3 × BOILERPLATE_MIN rows of
    Q) counted each copy towards the template share, so Q's n-grams were dropped as boilerplate and a reworded
    copy of Q in the pool was not found; shares now count EVAL's distinct questions."""
    others = [_p(f"another question number {i} about pears and apples") for i in range(3)]
    evals = [_p(Q)] * (3 * BOILERPLATE_MIN) + others
    grams, boilerplate = eval_ngrams(evals, 8)
    assert boilerplate == 0 and shares_ngram([_p("Please: " + Q + " Explain.")], grams, 8).tolist() == [True]


def test_the_target_copies_line_and_warning_count_in_the_right_number_and_say_what_was_left_out():
    """select --target's check for the target's questions in the pool said '1 pool rows ask 1 of the target's
    questions' and warned '1 selected rows ask ... ids 563 ... they leak it'; and with --decontaminate 'none ... is
    asked by a pool row' where it had left the rows that ask them out. Now in the right number, saying so."""
    import numpy as np

    from cluster_curate.commands.select_parts import copies_summary, target_copies_line
    ids = np.arange(100, 110)
    one = copies_summary({"checked": True, "rows": np.array([3]), "target_questions": 1,
                          "target_questions_in_pool": 1}, ids, np.array([3, 4]))
    assert one["warning"].startswith("1 selected row asks a question of the target (the same prompt; id 103): if "
                                     "the target is an evaluation set, it leaks it into training")
    assert target_copies_line(one).text == "1 pool row asks 1 of the target's 1 question; 1 of them selected"
    none = copies_summary({"checked": True, "rows": np.zeros(0, np.int64), "target_questions": 200,
                           "target_questions_in_pool": 0}, ids, np.array([3]))
    assert "warning" not in none
    assert target_copies_line(none, {"rows_left_out": 60, "sets": []}).text == \
        "none of the target's 200 questions is asked by a pool row (after --decontaminate left out 60 rows)"
    assert target_copies_line(none, None).text == "none of the target's 200 questions is asked by a pool row"
