"""`select --decontaminate EVAL` on real data: what it finds, what a selection without it leaks, and its cost.

The pool is GSM8K train (7,473 rows; its questions share none with GSM8K test) with questions of GSM8K test
planted in it, in three kinds:
  verbatim     the test row itself (question and solution)
  respaced     the test question with its whitespace changed, and another solution (the same question: caught)
  reworded     the test question with a sentence added ("Show your work."): another prompt, so a near-copy for
               the clusters and not caught by design (the check is for copies, not paraphrases)
  in a chat    the test question as the first user turn of a chat that goes on (its solution, a follow-up
               question, an answer): the prompt is the whole chat, caught by its user turn's key
Every row is an OpenAI `messages` chat (GSM8K's as one user and one assistant turn).
EVAL is all of GSM8K test (1,319 rows). Counted: the planted rows each selection keeps, for the default 31%
selection and for `--target` (200 test rows as the target: the case where relevance takes copies first),
each without and with --decontaminate (the target: every third planted question and other test rows), and
with --decontaminate-ngrams 13; and, on the whole pool, what shared n-grams of 8, 13 and 20 words find.
Timed (median of --repeats): `select` with and without it, from the `prompt_key` column embed keeps and from
a pass over the data (embeddings written before that column); and the keys' cost inside embed
(exact_dedup.prompt_keys over every pool prompt) against embed's own time.

    .venv/bin/python benchmarks/bench_decontaminate.py [--planted 150] [--repeats 5]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from common import DATA, cli, parser, write_results

KINDS = ("verbatim", "respaced", "reworded", "in a chat")


def planted_pool(tmp: Path, per_kind: int, seed: int = 0):
    """The pool (train + planted test questions, shuffled) and EVAL; returns (pool, eval, target, kind per id)."""
    train = [json.loads(line) for line in open(DATA / "gsm8k" / "train.jsonl")]
    test = [json.loads(line) for line in open(DATA / "gsm8k" / "test.jsonl")]
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(test), len(KINDS) * per_kind, replace=False)
    chat = lambda *turns: {"messages": [{"role": ("user", "assistant")[k % 2], "content": t}  # noqa: E731
                                        for k, t in enumerate(turns)]}
    rows = [(chat(r["question"], r["answer"]), None) for r in train]
    for j, i in enumerate(picked):
        kind, q = KINDS[j // per_kind], test[i]
        if kind == "verbatim":
            q = chat(q["question"], q["answer"])
        elif kind == "respaced":
            q = chat("  " + q["question"].replace(" ", "  ") + "\n", "Another solution.\n#### 0")
        elif kind == "reworded":
            q = chat(q["question"] + " Show your work.", q["answer"])
        else:
            q = chat(q["question"], q["answer"], "Can you check it another way?", "Yes: the same steps backwards "
                     "give the same answer.")
        rows.append((q, kind))
    order = rng.permutation(len(rows))
    pool, eval_, target = tmp / "pool.jsonl", tmp / "gsm8k_test.jsonl", tmp / "target.jsonl"
    pool.write_text("".join(json.dumps(rows[i][0]) + "\n" for i in order))
    eval_.write_text("".join(json.dumps(r) + "\n" for r in test))
    others = [i for i in range(len(test)) if i not in set(picked.tolist())][:200 - len(picked[::3])]
    target.write_text("".join(json.dumps(test[i]) + "\n" for i in sorted([*picked[::3], *others])))
    kind_of_id = {new: rows[old][1] for new, old in enumerate(order) if rows[old][1]}
    return pool, eval_, target, kind_of_id


def planted_in(selection: Path, kind_of_id: dict) -> dict:
    import pyarrow.parquet as pq
    ids = pq.read_table(selection, columns=["id"]).column("id").to_pylist()
    kinds = [kind_of_id[i] for i in ids if i in kind_of_id]
    return {k: kinds.count(k) for k in KINDS} | {"selected": len(ids)}


def ngram_precision(pool_prompts, eval_prompts, kind_of_id: dict) -> list[dict]:
    """decontamination.shares_ngram at several n: the reworded copies it finds, and the rows of GSM8K train
    (no test question among them) it takes for copies."""
    from cluster_curate.decontamination import eval_ngrams, shares_ngram
    out = []
    for n in (8, 13, 20):
        t0 = time.perf_counter()
        grams, boilerplate = eval_ngrams(eval_prompts, n)
        hit = shares_ngram(pool_prompts, grams, n)
        seconds = time.perf_counter() - t0
        kind = np.array([kind_of_id.get(i) or "train" for i in range(len(pool_prompts))])
        out.append({"n": n, "seconds": seconds, "boilerplate": boilerplate,
                    **{k: int((hit & (kind == k)).sum()) for k in (*KINDS, "train")}})
    return out


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--planted", type=int, default=150, help="rows planted of each kind")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--results", default=None)
    args = ap.parse_args(argv)
    log: list[str] = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        pool, eval_, target, kind_of_id = planted_pool(tmp, args.planted)
        run = tmp / "run"
        embed_s = cli(["run", pool, "--out", run, "--fraction", "0.31", "--num-shards", "4"], log)
        clusters, emb = run / "clusters.parquet", run / "embeddings.parquet"
        rows, times = [], {}
        for name, extra in [("default 31%", []), ("default 31%, --decontaminate", ["--decontaminate", eval_]),
                            ("default 31%, --decontaminate --decontaminate-ngrams 13",
                             ["--decontaminate", eval_, "--decontaminate-ngrams", "13"]),
                            ("--target (200 test rows), 10%", ["--target", target, "--fraction", "0.1"]),
                            ("--target, 10%, --decontaminate", ["--target", target, "--fraction", "0.1",
                                                                "--decontaminate", eval_])]:
            out = tmp / f"s{len(rows)}.parquet"
            budget = [] if "--fraction" in extra else ["--fraction", "0.31"]
            times[name] = statistics.median(cli(["select", clusters, "--out", out, *budget, *extra, "--overwrite"],
                                                log) for _ in range(args.repeats))
            rows.append((name, planted_in(out, kind_of_id)))
        # embeddings written before embed kept prompt_key: the same rows, from a pass over the data
        import pyarrow.parquet as pq
        table = pq.read_table(emb)
        pq.write_table(table.drop(["prompt_key", "prompt_turn_keys"]).replace_schema_metadata(table.schema.metadata),
                       emb)
        out = tmp / "old.parquet"
        times["default 31%, --decontaminate (embeddings without prompt_key)"] = statistics.median(
            cli(["select", clusters, "--out", out, "--fraction", "0.31", "--decontaminate", eval_, "--overwrite"],
                log) for _ in range(args.repeats))
        same = planted_in(out, kind_of_id) == rows[1][1]  # the --decontaminate row
        from cluster_curate.exact_dedup import prompt_keys, user_turn_keys
        from cluster_curate.io.datasets import ReadOptions, open_dataset
        prompts = [ex.prompt for b in open_dataset(str(pool), ReadOptions()).iter_batches() for ex in b.examples]
        t0 = time.perf_counter()
        prompt_keys(prompts)
        keys_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        user_turn_keys(prompts)
        turn_keys_s = time.perf_counter() - t0
        ngram_rows = ngram_precision(prompts, [ex.prompt for b in open_dataset(str(eval_), ReadOptions())
                                               .iter_batches() for ex in b.examples], kind_of_id)
    n = args.planted
    lines = [f"# `--decontaminate` on GSM8K train with GSM8K test questions planted ({n} of each kind)", "",
             "EVAL = GSM8K test (1,319 rows). Planted rows a selection keeps, of the "
             f"{n} verbatim, {n} respaced (another solution), {n} reworded (a sentence added: not caught, by "
             f"design) and {n} asked in a chat's first turn (the chat goes on):", "",
             "| selection | selected | verbatim kept | respaced kept | reworded kept | in a chat kept |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {name} | {r['selected']:,} | {r['verbatim']} | {r['respaced']} | {r['reworded']} | "
              f"{r['in a chat']} |" for name, r in rows]
    lines += ["", f"`select` wall time, median of {args.repeats} (a process each, 1 thread):", "",
              "| select | seconds |", "|---|---:|"]
    lines += [f"| {name} | {s:.2f} |" for name, s in times.items()]
    lines += ["", "Shared word n-grams (`decontamination.shares_ngram`, what `--decontaminate-ngrams N` adds) "
              f"on the whole pool: the planted rows they find, of {n} each, and the GSM8K train rows (none of them "
              "a test question) they take for copies:", "",
              "| n | verbatim | respaced | reworded | in a chat | train rows taken (of 7,473) | n-grams left out as "
              "boilerplate | seconds |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['n']} | {r['verbatim']} | {r['respaced']} | {r['reworded']} | {r['in a chat']} | {r['train']} | "
              f"{r['boilerplate']} | {r['seconds']:.2f} |" for r in ngram_rows]
    lines += ["", f"Without `prompt_key` and `prompt_turn_keys` in the embeddings, the pass over the data finds the "
              f"same rows: {'yes' if same else 'NO'}.",
              f"The keys inside `embed`: `prompt_keys` over all {len(prompts):,} pool prompts took {keys_s:.3f} s, "
              f"`user_turn_keys` (the chats' turns) {turn_keys_s:.3f} s; the whole `run` (embed, cluster, select, "
              f"shard) took {embed_s:.1f} s."]
    write_results("decontaminate", lines, {"planted_per_kind": n, "kept": dict(rows), "seconds": times,
                                           "same_rows_from_the_data": same, "prompt_keys_seconds": keys_s,
                                           "user_turn_keys_seconds": turn_keys_s,
                                           "ngrams": ngram_rows,
                                           "run_seconds": embed_s, "commands": log[:6]},
                  argv=argv, results=args.results)


if __name__ == "__main__":
    main()
