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
