"""decontamination.py: shared word n-grams between an evaluation set's prompts and the pool's."""

from __future__ import annotations

import pytest

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
    # GSM8K train against its test split with --decontaminate-ngrams 13: no copy, 4 rows sharing 13 words (it said
    # "4 rows ask 0 of its 1,319 questions", which contradicts itself)
    gsm8k = dict(one, path="test.jsonl", questions=1319, questions_in_pool=0, rows=4, copies=0, ngram_rows=4)
    many["ids"], gsm8k["ids"] = list(range(90)), [5, 6, 7, 8]
    lines = decontaminated_lines({"rows_left_out": 95, "sets": [one, many, gsm8k]})
    texts = [lines[f"decontaminated {i}"].text for i in (1, 2, 3)]
    assert texts[0] == ("one.jsonl: 1 row: 1 asks 1 of its 1 question as written, 0 more share a run of 13 words "
                        "with one: left out (id 4)")
    assert texts[1] == ("many.jsonl: 90 rows: 60 ask 60 of its 200 questions as written, 30 more share a run of 13 "
                        "words with one: left out (ids " + ", ".join(map(str, range(20))) + ": first 20 of 90; all in "
                        "the artifact's metadata)")
    assert texts[2] == ("test.jsonl: 4 rows: 0 ask 0 of its 1,319 questions as written, 4 more share a run of 13 "
                        "words with one: left out (ids 5, 6, 7, 8)")


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
    assert target_copies_line(one).text == "1 pool row asks 1 of the target's 1 question; 1 of them selected (id 103)"
    none = copies_summary({"checked": True, "rows": np.zeros(0, np.int64), "target_questions": 200,
                           "target_questions_in_pool": 0}, ids, np.array([3]))
    assert "warning" not in none
    assert target_copies_line(none, {"rows_left_out": 60, "sets": []}).text == \
        "none of the target's 200 questions is asked by a pool row (after --decontaminate left out 60 rows)"
    assert target_copies_line(none, None).text == "none of the target's 200 questions is asked by a pool row"


# ------------------------------------------------------------------ an evaluation set read for its questions alone

IFEVAL = [{"key": 1000, "prompt": "Write a 300+ word summary of the wikipedia page about Raymond III, Count of "
           "Tripoli. Do not use any commas.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
          {"key": 1001, "prompt": "I am planning a trip to Japan, and I would like thee to write an itinerary for my "
           "journey in a Shakespearean style.", "instruction_id_list": ["language:response_language"],
           "kwargs": [{"language": "en"}]}]
MT_BENCH = [{"question_id": 81, "category": "writing", "turns": [
    "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences and "
    "must-see attractions.", "Rewrite your previous response. Start every sentence with the letter A."]}]
ARENA_HARD = [{"question_id": "328c149ed45a41c0b9d6f14659e63599", "cluster": "ABC Sequence Puzzles & Groups",
               "turns": [{"content": "Use ABC notation to write a melody in the style of a folk tune."}]}]
CHAT = [{"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 7 * 8?"}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                      {"role": "user", "content": "What is the capital of France?"}]},
        {"messages": [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": ""}]}]


def _write_jsonl(path, rows):
    import json
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _read(path, prompts_only=True):
    from cluster_curate.io.datasets import ReadOptions, open_dataset
    ds = open_dataset(path, ReadOptions(prompts_only=prompts_only))
    return ds, [(ex.prompt, ex.response) for b in ds.iter_batches() for ex in b.examples]


def _user(*texts):
    return [{"role": "user", "content": t} for t in texts]


def test_evaluation_sets_without_answers_are_read_for_their_questions(tmp_path):
    """IFEval (`prompt` and its instructions), MT-Bench (`turns` of text), Arena-Hard (`turns` of {content}), a
    list of questions (`question` or `instruction` alone, JSON Lines, CSV or Parquet), MATH (`problem`, its
    `solution` no format's response) and chats that end with the user's turn: refused as data (no response, or
    no format), read for their questions with prompts_only."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from cluster_curate.errors import CurateError
    pq.write_table(pa.Table.from_pylist(ARENA_HARD), tmp_path / "arena.parquet")  # a list of structs
    (tmp_path / "questions.csv").write_text('question\n"What is 2 + 2?"\n"Name, with care, a river."\n')
    (tmp_path / "mt_bench.csv").write_text('question_id,turns\n81,"[""Compose a poem."", ""Make it rhyme.""]"\n')
    cases = [
        (_write_jsonl(tmp_path / "ifeval.jsonl", IFEVAL), "prompt-completion",
         [(_user(r["prompt"]), "") for r in IFEVAL]),
        (_write_jsonl(tmp_path / "mt_bench.jsonl", MT_BENCH), "turns", [(_user(*MT_BENCH[0]["turns"]), "")]),
        (_write_jsonl(tmp_path / "mt_bench_prompts.jsonl", [{"prompt": MT_BENCH[0]["turns"], "prompt_id": 81}]),
         "prompt-completion", [(_user(*MT_BENCH[0]["turns"]), "")]),  # the Hub's copy: the turns in `prompt`
        (_write_jsonl(tmp_path / "arena.jsonl", ARENA_HARD), "turns",
         [(_user(ARENA_HARD[0]["turns"][0]["content"]), "")]),
        (tmp_path / "arena.parquet", "turns", [(_user(ARENA_HARD[0]["turns"][0]["content"]), "")]),
        (tmp_path / "mt_bench.csv", "turns", [(_user("Compose a poem.", "Make it rhyme."), "")]),  # JSON text
        (tmp_path / "questions.csv", "qa", [(_user("What is 2 + 2?"), ""), (_user("Name, with care, a river."), "")]),
        (_write_jsonl(tmp_path / "instructions.jsonl", [{"instruction": "Sort 3, 1, 2."}]), "alpaca",
         [(_user("Sort 3, 1, 2."), "")]),
        (_write_jsonl(tmp_path / "math.jsonl", [{"problem": "What is $1 + 1$?", "level": "Level 1", "type": "Algebra",
                                                 "solution": "$\\boxed{2}$"}]), "prompt-completion",
         [(_user("What is $1 + 1$?"), "")]),
        (_write_jsonl(tmp_path / "chat.jsonl", CHAT), "messages",
         [(CHAT[0]["messages"], ""), (CHAT[1]["messages"], ""), (_user("Name a prime."), "")]),
    ]
    for path, fmt, expected in cases:
        ds, read = _read(path)
        assert (ds.format, read) == (fmt, expected), path.name
        with pytest.raises(CurateError) as e:  # as data (embed, a --target): no response, refused as before
            _read(path, prompts_only=False)
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert _read(tmp_path / "ifeval.jsonl")[0].fields == {"prompt": "prompt", "response": "none"}


def test_a_set_with_answers_reads_the_same_examples_for_its_questions():
    """Every bundled format with its responses: prompts_only reads the very prompts and responses that the data
    reading does (the decontamination of such sets is unchanged)."""
    from conftest import FIXTURES
    for path in [FIXTURES / "gsm8k" / "train-300.jsonl", FIXTURES / "gsm8k" / "train-300.csv",
                 FIXTURES / "gsm8k" / "train-300.parquet", FIXTURES / "chat" / "messages-300.jsonl",
                 FIXTURES / "chat" / "sharegpt-300.json", FIXTURES / "code_alpaca" / "code_alpaca-300.json",
                 FIXTURES / "code_alpaca" / "prompt-completion-300.jsonl"]:
        data, as_data = _read(path, prompts_only=False)
        questions, as_questions = _read(path)
        assert len(as_data) == 300 and as_questions == as_data and questions.format == data.format, path.name


def test_a_row_without_a_question_is_a_bad_row_naming_file_line_and_field(tmp_path):
    """Questions alone need no answer, but a row with no question (or one that cannot be read) is refused with one
    line naming the file, the line and the field; --on-bad-row skip leaves it out."""
    import pytest

    from cluster_curate.errors import CurateError
    from cluster_curate.io.datasets import ReadOptions, open_dataset
    cases = [
        (IFEVAL[:1] + [{"key": 1002, "instruction_id_list": []}], "field 'prompt': missing prompt"),
        (IFEVAL[:1] + [{"key": 1002, "prompt": "  "}], "field 'prompt': empty prompt"),
        (MT_BENCH + [{"question_id": 82, "turns": []}], "field 'turns': no question (the list of turns is empty)"),
        (MT_BENCH + [{"question_id": 82, "turns": None}], "field 'turns': missing turns"),
        (MT_BENCH + [{"question_id": 82, "turns": "Compose a poem."}], "field 'turns': turns is text, expected a list"),
        (MT_BENCH + [{"question_id": 82, "turns": ["Compose a poem.", ""]}], "field 'turns[1]': empty question"),
        (ARENA_HARD + [{"question_id": "x", "turns": [{"text": "Compose."}]}], "field 'turns[0].content': missing "
                                                                                "question"),
        (ARENA_HARD + [{"question_id": "x", "turns": [{"role": "assistant", "content": "Sure."}]}],
         "field 'turns[0].role': a turn of role 'assistant'"),
        (CHAT[:1] + [{"messages": [{"role": "system", "content": "Be brief."}]}],
         "field 'messages': no question: no user turn in the conversation (roles: system)"),
        (CHAT[:1] + [{"messages": []}],
         "field 'messages': no question: no user turn in the conversation (it is empty)"),
        (CHAT[:1] + [{"messages": [{"role": "user", "content": " "}]}], "field 'messages[0]': empty question"),
    ]
    for rows, message in cases:
        path = _write_jsonl(tmp_path / "eval.jsonl", rows)
        with pytest.raises(CurateError) as e:
            _read(path)
        assert str(e.value).startswith(f"{path}:2: {message}") and "\n" not in str(e.value), str(e.value)
        ds = open_dataset(path, ReadOptions(prompts_only=True, on_bad_row="skip"))
        assert sum(len(b.examples) for b in ds.iter_batches()) == 1 and [r.id for r in ds.rejects] == [1]


# ------------------------------------------------------------------------------------ select, end to end

def _cli_json(cli_runner, args):
    import json

    from cluster_curate.cli import main
    res = cli_runner.invoke(main, [*map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout.strip().splitlines()[-1])


def _without_columns(path, columns):
    """The embeddings as embed wrote them before it kept `columns`."""
    import pyarrow.parquet as pq
    t = pq.read_table(path)
    pq.write_table(t.drop(columns).replace_schema_metadata(t.schema.metadata), path)


def test_decontaminate_ngrams_reads_the_pool_once_for_its_questions_and_its_words(tmp_path, cli_runner,
                                                                                   monkeypatch):
    """Embeddings without the rows' prompt keys and --decontaminate-ngrams: the keys and the word n-grams come from
    one pass over the pool's data (it took two), and leave out the rows they did with the keys embed kept."""
    import json

    from cluster_curate.io.datasets import Dataset
    from conftest import FIXTURES
    data = FIXTURES / "chat" / "messages-300.jsonl"
    rows = [json.loads(line)["messages"] for line in data.read_text().splitlines()]
    single = [[t["content"] for t in r if t["role"] == "user"] for r in rows]
    single = [turns[0] for turns in single if len(turns) == 1]
    evals = _write_jsonl(tmp_path / "gsm8k_test.jsonl", [{"question": q, "answer": "#### 0"} for q in single[:3]] + [
        {"question": f"Read this carefully. {single[3]} Explain each step.", "answer": "#### 0"}])
    emb, clusters = tmp_path / "emb.parquet", tmp_path / "clusters.parquet"
    _cli_json(cli_runner, ["embed", data, "--out", emb, "--dim", "16"])
    _cli_json(cli_runner, ["cluster", emb, "--out", clusters, "--k", "4"])
    select = ["select", clusters, "--fraction", "0.5", "--within", "random", "--decontaminate", evals,
              "--decontaminate-ngrams", "13"]
    kept = _cli_json(cli_runner, [*select, "--out", tmp_path / "kept.parquet"])["decontaminated"]
    assert kept["sets"][0]["copies"] >= 3 and kept["sets"][0]["ngram_rows"] >= 1
    _without_columns(emb, ["prompt_key"])
    passes, read = [], Dataset.iter_batches

    def counting(self, *args, **kwargs):  # the reader itself, its passes over the pool counted
        if self.source == str(data):
            passes.append(self.source)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(Dataset, "iter_batches", counting)
    assert _cli_json(cli_runner, [*select, "--out", tmp_path / "read.parquet"])["decontaminated"] == kept
    assert len(passes) == 1


# ------------------------------------------------------------------- multi-turn pool rows, end to end

def _chat_pool(name):
    """A bundled chat fixture (OpenAI messages or ShareGPT, 100 of its 300 chats of two user turns, their questions
    GSM8K's and Code Alpaca's) and each row's user turns, whitespace aside."""
    import json

    from conftest import FIXTURES
    path = FIXTURES / "chat" / name
    if name.endswith(".jsonl"):
        turns = [[t["content"] for t in json.loads(line)["messages"] if t["role"] == "user"]
                 for line in path.read_text().splitlines()]
    else:
        turns = [[t["value"] for t in r["conversations"] if t["from"] == "human"] for r in json.loads(path.read_text())]
    return path, [[" ".join(t.split()) for t in row] for row in turns]


def _gsm8k_eval(tmp_path, turns):
    """A GSM8K-shaped evaluation set (`question`, `answer`): the first question of five two-turn chats, the second
    of two, the only one of three single-turn rows (one respaced), and four the pool does not ask."""
    two = [row for row in turns if len(row) == 2]
    one = [row[0] for row in turns if len(row) == 1]
    questions = [row[0] for row in two[:5]] + [row[1] for row in two[5:7]] + one[:2] + ["  " + one[2] + "\n"] + [
        "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
        "Josh decides to try flipping a house. He buys a house for $80,000 and then puts in $50,000 in repairs. "
        "This increased the value of the house by 150%. How much profit did he make?",
        "James decides to run 3 sprints 3 times a week. He runs 60 meters each sprint. How many total meters does "
        "he run a week?",
        "Toulouse has twice as many sheep as Charleston. Charleston has 4 times as many sheep as Seattle. How many "
        "sheep do Toulouse, Charleston, and Seattle have together if Seattle has 20 sheep?"]
    path = _write_jsonl(tmp_path / "gsm8k_test.jsonl", [{"question": q, "answer": "#### 0"} for q in questions])
    asked = {" ".join(q.split()) for q in questions}
    return path, asked, sorted(i for i, row in enumerate(turns) if asked & set(row))


@pytest.mark.parametrize("name", ["messages-300.jsonl", "sharegpt-300.json"])
def test_decontaminate_finds_a_question_in_any_user_turn_of_a_chat(tmp_path, cli_runner, name):
    """A pool chat that opens with an evaluation question and goes on (or asks it in a later turn) asks it: select
    --decontaminate leaves it out, as it does a row that asks it alone, and says so; inspect counts it, run's
    preflight and --target's check of the target's questions find it, and embeddings written before embed kept
    the user turns' keys give the same rows by reading the data."""
    import pyarrow.parquet as pq

    from cluster_curate.cli import main
    data, turns = _chat_pool(name)
    evals, asked, asking = _gsm8k_eval(tmp_path, turns)
    assert sum(len(turns[i]) == 2 for i in asking) == 7  # rows whose whole prompt is no question of the set
    emb, clusters = tmp_path / "emb.parquet", tmp_path / "clusters.parquet"
    _cli_json(cli_runner, ["embed", data, "--out", emb, "--dim", "16"])
    _cli_json(cli_runner, ["cluster", emb, "--out", clusters, "--k", "4"])
    select = ["select", clusters, "--fraction", "0.5", "--decontaminate", evals]
    summary = _cli_json(cli_runner, [*select, "--out", tmp_path / "s.parquet"])
    (record,) = summary["decontaminated"]["sets"]
    assert summary["decontaminated"]["rows_left_out"] == record["rows"] == len(asking)
    assert sorted(record["ids"]) == asking and record["questions_in_pool"] == len(asked) - 4
    assert summary["rows"] == len(turns) - len(asking)
    chosen = pq.read_table(tmp_path / "s.parquet", columns=["id"]).column("id").to_pylist()
    assert len(chosen) == summary["selected"] and not set(chosen) & set(asking)
    shown = " ".join(cli_runner.invoke(main, [*map(str, select), "--out", tmp_path / "t.parquet"]).stdout
                     .replace("│", " ").split())
    assert f"rows {len(turns) - len(asking)} ({len(turns)} clustered, {len(asking)} left out by --decontaminate)" \
        in shown
    (counted,) = _cli_json(cli_runner, ["inspect", data, "--decontaminate", evals])["decontamination"]
    assert (counted["rows"], sorted(counted["ids"])) == (len(asking), asking)
    copies = _cli_json(cli_runner, ["select", clusters, "--fraction", "0.5", "--target", evals,
                                    "--out", tmp_path / "target.parquet"])["target_copies"]
    assert (copies["pool_rows"], copies["target_questions_in_pool"]) == (len(asking), len(asked) - 4)
    run = _cli_json(cli_runner, ["run", data, "--out", tmp_path / "curated", "--dim", "16", "--k", "4",
                                 "--fraction", "0.5", "--decontaminate", evals, "--num-shards", "2"])
    assert run["summaries"]["select"]["decontaminated"]["rows_left_out"] == len(asking)
    _without_columns(emb, ["prompt_turn_keys"])
    again = _cli_json(cli_runner, [*select, "--out", tmp_path / "old.parquet"])
    assert again["decontaminated"] == summary["decontaminated"]


def test_what_the_rows_ask_is_read_from_the_kept_columns_with_one_read_of_their_ids(tmp_path, cli_runner,
                                                                                     monkeypatch):
    """select --decontaminate reads what the clusters' rows ask from the prompt keys and user turns' keys embed
    kept: the `id` column once with both (it was read twice), and the same questions a pass over the data gives."""
    import numpy as np

    from cluster_curate.commands.select_parts import _kept_questions
    from cluster_curate.decontamination import RowQuestions
    from cluster_curate.io import readers
    from cluster_curate.io.datasets import open_dataset
    data, turns = _chat_pool("messages-300.jsonl")
    emb = tmp_path / "emb.parquet"
    _cli_json(cli_runner, ["embed", data, "--out", emb, "--dim", "16"])
    ids = np.arange(0, len(turns), 2)  # some of the rows, as clusters --decontaminate left
    columns_read, read = [], readers.read_parquet

    def counting(path, columns=None):  # the reader itself, the columns it was asked for counted
        columns_read.extend(columns or ["every column"])
        return read(path, columns)

    monkeypatch.setattr(readers, "read_parquet", counting)
    kept = _kept_questions(emb, ids)
    assert columns_read.count("id") == 1
    wanted = set(ids.tolist())
    expected = RowQuestions.of([ex.prompt for b in open_dataset(data).iter_batches() for ex in b.examples
                                if ex.id in wanted])
    assert len(expected.turn_keys) > 0  # chats of two user turns among them
    for got, want in zip((kept.keys, kept.turn_rows, kept.turn_keys),
                         (expected.keys, expected.turn_rows, expected.turn_keys)):
        assert np.array_equal(got, want)
