"""The bad-input and misuse matrix (issue 20): each case is a real `cluster-curate` subprocess that must exit 2
with one line `ERROR: ...` naming the file/row/field or the option at fault, print no traceback, leave nothing
behind (no output, partial, temporary, lock or folder), change no input, and fail before any expensive stage
(nothing of a stage's output is ever started, and it fails within seconds of the interpreter's start-up).

The working directory holds a finished pipeline folder (`run`) and small real datasets; every case runs
against a snapshot of it (names, sizes, modification times and bytes of every file) taken before and after."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURES, cli_in_process

pytestmark = pytest.mark.slow  # ~50 interpreter start-ups

GSM = FIXTURES / "gsm8k" / "train-300.jsonl"
FAST = ["--features", "text", "--dim", "16", "--k", "6"]
SHARD = ["--num-shards", "2", "--micro-batch-size", "2"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("misuse")
    lines = GSM.read_text().splitlines(keepends=True)
    (w / "data.jsonl").write_text("".join(lines[:120]))
    (w / "small.jsonl").write_text("".join(lines[:20]))
    shutil.copy(FIXTURES / "code_alpaca" / "code_alpaca-300.json", w / "other.json")
    (w / "plain.jsonl").write_text(json.dumps({"text": "t", "label": "l"}) + "\n")
    (w / "pubmed.jsonl").write_text(json.dumps({"QUESTION": "q?", "CONTEXTS": ["c"], "LONG_ANSWER": "a"}) + "\n")
    for name in ("invalid_json.jsonl", "empty_response.jsonl", "latin1.jsonl", "latin1.csv", "unknown_format.jsonl",
                 "empty.jsonl", "not_object.jsonl", "unknown.txt", "truncated.json", "messages_bad.jsonl"):
        shutil.copy(FIXTURES / "bad" / name, w / name)
    (w / "binary.parquet").write_bytes(b"PAR1 not really")
    (w / "pqdir").mkdir()  # a Parquet dataset directory: every .parquet file below it is read
    shutil.copy(FIXTURES / "gsm8k" / "train-300.parquet", w / "pqdir" / "part-0.parquet")
    (w / "gzipped.jsonl").write_bytes(gzip.compress((w / "data.jsonl").read_bytes()))  # a download saved as .jsonl
    with zipfile.ZipFile(w / "zipped.jsonl", "w") as z:
        z.write(w / "data.jsonl", "data.jsonl")
    rows = [json.loads(line) for line in lines[:20]]
    with open(w / "semicolons.csv", "w", newline="") as f:  # a European spreadsheet's CSV
        csv.writer(f, delimiter=";").writerows([["question", "answer"], *([r["question"], r["answer"]] for r in rows)])
    with open(w / "semicolons_quoted.csv", "w", newline="") as f:  # answers holding line breaks, so quoted
        csv.writer(f, delimiter=";").writerows([["question", "answer"], *([r["question"], r["answer"]] for r in
                                                                          map(json.loads, lines[:120]))])
    (w / "header_quote.csv").write_text('"question,answer\nWhat is x; y?,z\nab,cd\n')  # another separator below
    with open(w / "commas.tsv", "w", newline="") as f:
        csv.writer(f).writerows([["question", "answer"], *([r["question"], r["answer"]] for r in rows)])
    (w / "pqmix").mkdir()  # Parquet parts and a JSON Lines file beside them
    shutil.copy(FIXTURES / "gsm8k" / "train-300.parquet", w / "pqmix" / "part-0.parquet")
    shutil.copy(w / "small.jsonl", w / "pqmix" / "extra.jsonl")
    (w / "textdir").mkdir()  # files of several types, no Parquet
    (w / "config-only").mkdir()  # a model's config without its tokenizer
    (w / "config-only" / "config.json").write_text("{}")
    shutil.copy(w / "small.jsonl", w / "textdir" / "a.jsonl")
    shutil.copy(FIXTURES / "gsm8k" / "train-300.csv", w / "textdir" / "b.csv")
    (w / "stray_tab.tsv").write_text('question\tanswer\nq0\ta0\n"q1\non two lines"\ta1\nq2\ta2\tstray\n')
    (w / "empty_answer.tsv").write_text("question\tanswer\nq0\ta0\nq1\t\n")
    (w / "two_index_columns.tsv").write_text("\t\tquestion\tanswer\n0\t0\tq0\ta0\n1\t1\tq1\ta1\n")  # pandas'
    (w / "nested.jsonl").write_text(json.dumps({"data": {"question": "q0", "answer": "a0"}}) + "\n"
                                    + json.dumps({"data": {"question": "q1"}}) + "\n")
    (w / "twice.jsonl").write_text((w / "small.jsonl").read_text() * 2)
    (w / "floors.yaml").write_text("inputs:\n  - path: data.jsonl\n    min_share: 0.9\n"
                                   "  - path: other.json\n    min_share: 0.5\n")
    (w / "copies.yaml").write_text("inputs:\n  - path: small.jsonl\n  - {path: twice.jsonl, name: copy, "
                                   "min_share: 0.2}\n")
    (w / "caps.yaml").write_text("inputs:\n  - path: data.jsonl\n    max_share: 0.3\n  - path: other.json\n")

    def make(*argv):  # in this process: the cases are the processes
        r = cli_in_process(*argv, cwd=w)
        assert r.returncode == 0, r.stderr

    make("run", "data.jsonl", "--out", "p", *FAST, "--fraction", "0.31", *SHARD, "-q")
    (w / "p" / "report").mkdir()  # an existing output for the --overwrite cases
    (w / "eval_gone.jsonl").write_text("".join(lines[:5]))  # an evaluation set embedded, then moved away
    make("embed", "eval_gone.jsonl", "--like", "p/embeddings.parquet", "--out", "eval_emb.parquet", "-q")
    (w / "eval_gone.jsonl").unlink()
    make("embed", "other.json", "--out", "other_emb.parquet", *FAST[:4], "-q")  # another dataset's: ids 0..299 too
    return w


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    return env


def _snapshot(root: Path) -> dict:
    """Every path under root; for files their size, modification time and bytes (a directory's own mtime moves
    when a probe or lock file comes and goes, which leaves nothing behind)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns,
                                             hashlib.blake2b(p.read_bytes(), digest_size=8).hexdigest())
        else:
            out[str(p.relative_to(root))] = "dir"
    return out


# (case id, argv after `cluster-curate`, what the one line must contain). Paths are relative to the work dir.
CASES = [
    # ---- embed: outputs that cannot be created, found before any work
    ("embed-out-proc", ["embed", "data.jsonl", "--out", "/proc/e.parquet"], "/proc/e.parquet: cannot create it"),
    ("embed-out-sys", ["embed", "data.jsonl", "--out", "/sys/e.parquet"], "/sys/e.parquet: cannot create it"),
    ("embed-out-file-as-folder", ["embed", "data.jsonl", "--out", "data.jsonl/e.parquet"],
     "data.jsonl is a file, not a directory"),
    ("embed-out-exists", ["embed", "data.jsonl", "--out", "p/embeddings.parquet"],
     "p/embeddings.parquet: already exists (pass --overwrite"),
    ("embed-resume-finished", ["embed", "data.jsonl", "--out", "p/embeddings.parquet", "--resume", "--dim", "16"],
     "p/embeddings.parquet: already finished, nothing to resume (--resume continues an interrupted embed); use it "
     "as it is"),
    # ---- embed: bad data, named by file, line and field
    ("embed-missing-file", ["embed", "missing.jsonl", "--out", "e.parquet"], "missing.jsonl: no such file or directory"),
    ("embed-invalid-json", ["embed", "invalid_json.jsonl", "--out", "e.parquet"], "invalid_json.jsonl:4: invalid JSON"),
    ("embed-empty-response", ["embed", "empty_response.jsonl", "--out", "e.parquet"],
     "empty_response.jsonl:3: field 'answer': empty response"),
    ("embed-latin1", ["embed", "latin1.jsonl", "--out", "e.parquet"], "latin1.jsonl:2: not valid UTF-8 text"),
    ("embed-latin1-csv", ["embed", "latin1.csv", "--out", "e.parquet"], "latin1.csv:3: not valid UTF-8 text"),
    ("embed-not-object", ["embed", "not_object.jsonl", "--out", "e.parquet"],
     "not_object.jsonl:2: expected a JSON object, found an array"),
    ("embed-truncated-json", ["embed", "truncated.json", "--out", "e.parquet"], "truncated.json:5: invalid JSON"),
    ("embed-tsv-stray-tab", ["embed", "stray_tab.tsv", "--out", "e.parquet"],
     "stray_tab.tsv:5: 3 fields where the header has 2 (a value holding a tab must be quoted)"),
    ("run-tsv-repeated-column", ["run", "two_index_columns.tsv", "--out", "r", *FAST, "--fraction", "0.5", *SHARD],
     "two_index_columns.tsv:1: column '' appears 2 times in the header; give each column its own name"),
    ("run-target-nested", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.5", *SHARD, "--target",
                           "nested.jsonl", "--prompt-field", "question", "--response-field", "answer"],
     "--target nested.jsonl: unrecognised record format; columns found: [data]: a target is read in its own format"),
    ("run-tsv-empty-answer", ["run", "empty_answer.tsv", "--out", "r", *FAST, "--fraction", "0.5", *SHARD],
     "empty_answer.tsv: id 1: field 'answer': empty response"),
    ("embed-nested-missing", ["embed", "nested.jsonl", "--out", "e.parquet", "--prompt-field", "data.question",
                              "--response-field", "data.answer"],
     "nested.jsonl:2: field 'data.answer': missing ('data' has no key 'answer')"),
    ("embed-nested-no-root", ["embed", "nested.jsonl", "--out", "e.parquet", "--prompt-field", "dta.question",
                              "--response-field", "data.answer"], "--prompt-field 'dta.question': no such column"),
    ("embed-messages-bad", ["embed", "messages_bad.jsonl", "--out", "e.parquet"], "field 'messages[1]': empty response"),
    ("embed-gzip-named-jsonl", ["embed", "gzipped.jsonl", "--out", "e.parquet"],
     "gzipped.jsonl: gzip-compressed, but its name does not end in .gz; rename it gzipped.jsonl.gz"),
    ("embed-zip-named-jsonl", ["embed", "zipped.jsonl", "--out", "e.parquet"], "zipped.jsonl: a zip archive, not text"),
    ("embed-csv-semicolons", ["embed", "semicolons.csv", "--out", "e.parquet"],
     "semicolons.csv:1: the header is the one column 'question;answer': the file is separated by ';', not ','"),
    ("embed-csv-header-quote-open", ["embed", "header_quote.csv", "--out", "e.parquet"],  # not a ';' file
     "header_quote.csv:1: a quote opens a value in this row and is never closed"),
    ("embed-csv-semicolons-quoted", ["embed", "semicolons_quoted.csv", "--out", "e.parquet"],  # pyarrow stopped
     "semicolons_quoted.csv:1: the header is the one column 'question;answer': the file is separated by ';'"),
    ("embed-tsv-commas", ["embed", "commas.tsv", "--out", "e.parquet"], "separated by ',', not a tab; name it .csv"),
    ("run-parquet-dir-with-jsonl", ["run", "pqmix", "--out", "r", *FAST, "--fraction", "0.3", *SHARD],
     "pqmix: a directory of .parquet files (part-0.parquet) that also holds extra.jsonl, which"),
    ("embed-dir-of-other-types", ["embed", "textdir", "--out", "e.parquet"],
     "it holds a.jsonl, b.csv: give the files as DATA"),
    ("embed-empty", ["embed", "empty.jsonl", "--out", "e.parquet"], "empty.jsonl: dataset is empty"),
    ("embed-unknown-type", ["embed", "unknown.txt", "--out", "e.parquet"], "unknown.txt: unknown file type"),
    ("embed-not-parquet", ["embed", "binary.parquet", "--out", "e.parquet"], "binary.parquet: not a readable Parquet"),
    ("embed-data-is-clusters", ["embed", "p/clusters.parquet", "--out", "e.parquet"],  # told to pass --prompt-field
     "p/clusters.parquet: is a cluster-curate 'clusters' artifact, not data: give the dataset it was made from "
     "(data.jsonl)"),
    ("embed-data-is-a-run-folder", ["embed", "p", "--out", "e.parquet"],
     "p: is a cluster-curate `run` folder, not data: give the dataset it was made from (data.jsonl)"),
    # a stage given run's folder read its first file (clusters.parquet) as the artifact: 'expected embeddings'
    ("cluster-input-is-a-run-folder", ["cluster", "p", "--out", "c.parquet"],
     "p: is a `run` folder, not one artifact: give the file in it that the command reads (p/embeddings.parquet, "
     "p/clusters.parquet, p/selection.parquet)"),
    ("embed-unknown-format", ["embed", "unknown_format.jsonl", "--out", "e.parquet"],
     "unrecognised record format; columns found: [text, label]. pass --prompt-field COLUMN --response-field COLUMN"),
    ("embed-hint-upper-case", ["embed", "pubmed.jsonl", "--out", "e.parquet"],
     "pass --prompt-field QUESTION --response-field LONG_ANSWER"),
    # ---- embed: options
    ("embed-prompt-field-missing", ["embed", "data.jsonl", "--out", "e.parquet", "--prompt-field", "NOPE"],
     "--prompt-field 'NOPE': no such column"),
    ("embed-response-field-missing", ["embed", "data.jsonl", "--out", "e.parquet", "--response-field", "NOPE"],
     "--response-field 'NOPE': no such column"),
    ("embed-prompt-field-alone", ["embed", "plain.jsonl", "--out", "e.parquet", "--prompt-field", "text"],
     "--prompt-field text needs --response-field COLUMN too"),
    ("embed-format-qa-wrong-columns", ["embed", "plain.jsonl", "--out", "e.parquet", "--format", "qa"],
     "format qa needs columns 'question' and 'answer'"),
    ("embed-format-unknown", ["embed", "data.jsonl", "--out", "e.parquet", "--format", "nosuch"],
     "Invalid value for '--format'"),
    ("embed-dim-zero", ["embed", "data.jsonl", "--out", "e.parquet", "--dim", "0"], "--dim must be positive"),
    ("embed-dim-word", ["embed", "data.jsonl", "--out", "e.parquet", "--dim", "abc"], "Invalid value for '--dim'"),
    ("embed-feature-unknown", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "nosuch"],
     "unknown feature 'nosuch'"),
    ("embed-model-missing", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "gradient", "--model",
                             "./no-model"], "--model ./no-model: no such file or directory"),
    ("embed-model-hub-offline", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "hidden", "--model",
                                 "nobody/no-such-model"], "--model nobody/no-such-model: not found locally"),
    ("embed-dtype-unknown", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "gradient", "--dtype", "fp8"],
     "--dtype 'fp8': expected auto, float32, bfloat16 or float16"),  # the proxy ran with it, unnoticed
    ("embed-layers-without-lora", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "gradient", "--layers",
                                   "q_proj"], "--layers is only used by --features lora-gradient"),  # was ignored
    ("embed-device-text-only", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "text", "--device", "cuda"],
     "--device cuda is not used by --features text (no model or encoder runs)"),  # was ignored
    ("embed-dtype-text-only", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "text", "--dtype",
                               "bfloat16"], "--dtype bfloat16 is not used by --features text"),  # was ignored
    ("embed-dtype-proxy", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "gradient", "--dtype",
                           "bfloat16"], "--dtype bfloat16 is not used by the built-in proxy"),  # was ignored
    ("run-device-text-only", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.5", *SHARD, "--device",
                              "cuda"], "--device cuda is not used by --features text"),  # was ignored
    # --checkpoints: refused before the proxy warms up (a bad one was found after the warm-up, which was saved)
    ("embed-checkpoints-not-kept", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "loss-trajectory",
                                    "--proxy-size", "tiny", "--checkpoints", "1,5"],
     "--checkpoints 5: no such warm-up checkpoint; the warm-up (1 step on 120 rows) keeps those at step 1"),
    ("embed-checkpoints-not-kept-steps-given", ["embed", "data.jsonl", "--out", "e.parquet", "--features",
                                                "loss-trajectory", "--proxy-steps", "4", "--checkpoints", "2"],
     "--checkpoints 2: no such warm-up checkpoint; the warm-up (--proxy-steps 4) keeps those at steps 1, 3, 4"),
    ("embed-checkpoints-missing-path", ["embed", "data.jsonl", "--out", "e.parquet", "--features", "loss-trajectory",
                                       "--proxy-size", "tiny", "--checkpoints", "./nope"],
     "--checkpoints ./nope: no such file or directory"),
    ("run-checkpoints-empty-item", ["run", "data.jsonl", "--out", "r", "--features", "loss-trajectory", "--k", "6",
                                    "--fraction", "0.5", *SHARD, "--checkpoints", "1,,2"],
     "--checkpoints 1,,2: an empty item"),
    ("embed-seed-negative", ["embed", "data.jsonl", "--out", "e.parquet", "--seed", "-1"],
     "Invalid value for '--seed': -1 is not in the range 0<=x<=4294967295"),  # was an INTERNAL ERROR (numpy's)
    ("embed-seed-too-large", ["embed", "data.jsonl", "--out", "e.parquet", "--seed", "4294967296"],
     "Invalid value for '--seed': 4294967296 is not in the range 0<=x<=4294967295"),  # INTERNAL ERROR too
    ("embed-unknown-option", ["embed", "data.jsonl", "--out", "e.parquet", "--fraktion", "0.3"],
     "No such option '--fraktion'"),
    # ---- cluster
    ("cluster-not-artifact", ["cluster", "data.jsonl", "--out", "c.parquet"], "data.jsonl: not"),
    ("cluster-wrong-kind", ["cluster", "p/clusters.parquet", "--out", "c.parquet"],
     "is a 'clusters' artifact, expected 'embeddings'"),
    ("cluster-k-too-large", ["cluster", "p/embeddings.parquet", "--out", "c.parquet", "--k", "5000"],
     "--k 5,000 is larger than the number of rows (120)"),
    ("cluster-iters-zero", ["cluster", "p/embeddings.parquet", "--out", "c.parquet", "--iters", "0"],
     "Invalid value for '--iters': 0 is not in the range x>=1"),
    ("cluster-out-proc", ["cluster", "p/embeddings.parquet", "--out", "/proc/c.parquet"], "cannot create it"),
    ("cluster-out-exists", ["cluster", "p/embeddings.parquet", "--out", "p/clusters.parquet"], "already exists"),
    # ---- select
    # an evaluation set that cannot be read: the error named the file alone, after the pool's embeddings were opened
    ("select-decontaminate-empty", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3",
                                    "--decontaminate", "empty.jsonl"], "--decontaminate empty.jsonl: "),
    ("select-decontaminate-bad-row", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3",
                                      "--within", "diverse", "--decontaminate", "invalid_json.jsonl"],
     "--decontaminate invalid_json.jsonl:"),
    ("select-decontaminate-empty-folder", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3",
                                           "--decontaminate", "p/report"], "--decontaminate p/report: directory holds"),
    # EVAL as its embeddings with --decontaminate-ngrams reads the data they record: gone, refused after cluster
    ("run-decontaminate-ngrams-eval-data-gone", ["run", "data.jsonl", "--out", "q", *FAST, "--fraction", "0.31",
                                                 *SHARD, "--decontaminate", "eval_emb.parquet",
                                                 "--decontaminate-ngrams", "13"],
     "--decontaminate eval_emb.parquet: its recorded data: eval_gone.jsonl: no such file or directory"),
    # the data itself as EVAL: nothing left to select, said after embed and cluster had run
    ("run-decontaminate-the-data-itself", ["run", "data.jsonl", "--out", "q", *FAST, "--fraction", "0.31", *SHARD,
                                           "--decontaminate", "data.jsonl"],
     "--decontaminate data.jsonl: every one of the 120 rows asks a question of it; nothing is left to select"),
    ("select-decontaminate-empty-path", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3",
                                         "--decontaminate", ""], "--decontaminate: an empty path"),  # read the cwd
    # a floor that an input meets, but not once --decontaminate leaves out its rows: said after embed and cluster
    ("run-decontaminate-empties-a-floored-source", ["run", "data.jsonl", "other.json", "--out", "q", *FAST,
                                                    "--fraction", "0.31", *SHARD, "--decontaminate", "other.json",
                                                    "--source-min-share", "other=0.2"],
     "source other: its floor is 8 rows (0.2 of 37, --source-min-share) and it has only 0 rows left after "
     "--decontaminate left out 300 rows"),
    # (messages_bad.jsonl's rows, a chat ending with the user's turn or an empty answer, are questions to it)
    ("run-decontaminate-bad-row", ["run", "data.jsonl", "--out", "q", *FAST, "--fraction", "0.31", *SHARD,
                                   "--decontaminate", "not_object.jsonl"], "--decontaminate not_object.jsonl:2: "),
    ("select-no-budget", ["select", "p/clusters.parquet", "--out", "s.parquet"],
     "give exactly one of --fraction F, --budget N, --per-cluster-ratio R (rows), or --token-budget T or "
     "--token-fraction F (tokens)"),
    ("select-fraction-zero", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0"],
     "--fraction must be in (0, 1]"),
    ("select-two-budgets", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3", "--budget", "5"],
     "(got --fraction, --budget)"),
    ("select-wrong-kind", ["select", "p/embeddings.parquet", "--out", "s.parquet", "--fraction", "0.3"],
     "is an 'embeddings' artifact, expected 'clusters'"),
    ("select-dedup-range", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3", "--dedup", "2"],
     "--dedup must be a cosine similarity in (0, 1]"),
    ("select-out-file-as-folder", ["select", "p/clusters.parquet", "--out", "data.jsonl/s.parquet", "--fraction",
                                   "0.3"], "is a file, not a directory"),
    ("select-missing-argument", ["select"], "Missing argument 'CLUSTERS'"),
    ("select-target-no-budget", ["select", "p/clusters.parquet", "--out", "s.parquet", "--target", "small.jsonl"],
     "--target spends a budget: give one of --fraction F, --budget N (rows), or --token-budget T or "
     "--token-fraction F (tokens)"),  # named --per-cluster-ratio, which --target refuses
    ("run-target-no-budget", ["run", "data.jsonl", "--out", "r", *FAST, *SHARD, "--target", "small.jsonl"],
     "--target spends a budget: give one of --fraction F, --budget N (rows), or --token-budget T"),
    ("select-target-with-a-floor", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3",
                                    "--target", "other.json", "--source-min-share", "0.2"],
     "--source-min-share / --source-max-share: the data is not a mixture (one input)"),
    ("select-target-a-clusters-artifact", ["select", "p/clusters.parquet", "--out", "s.parquet", "--fraction", "0.3",
                                           "--target", "p/clusters.parquet"],  # was 'unrecognised record format'
     "--target p/clusters.parquet: is a 'clusters' artifact, which holds no examples"),
    ("select-missing-out", ["select", "p/clusters.parquet", "--fraction", "0.3"], "Missing option '--out'"),
    # ---- shard
    ("shard-data-is-embeddings", ["shard", "p/selection.parquet", "--data", "p/embeddings.parquet", "--out", "sh",
                                  *SHARD], "p/embeddings.parquet: is a cluster-curate 'embeddings' artifact, not data"),
    ("shard-other-dataset", ["shard", "p/selection.parquet", "--data", "other.json", "--out", "sh", *SHARD],
     "other.json"),
    ("shard-embeddings-other-dataset", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "sh",
                                        *SHARD, "--embeddings", "other_emb.parquet"],
     "other_emb.parquet: was made from other.json"),
    ("shard-step-too-big", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "sh", "--num-shards",
                            "64", "--micro-batch-size", "4"], "one global step needs"),
    ("shard-zero-shards", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "sh", "--num-shards", "0"],
     "--num-shards"),
    ("shard-out-sys", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "/sys/shards", *SHARD],
     "/sys/shards: cannot create it"),
    ("shard-missing-num-shards", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "sh"],
     "Missing option '--num-shards'"),
    ("shard-wrong-kind", ["shard", "p/clusters.parquet", "--data", "data.jsonl", "--out", "sh", *SHARD],
     "is a 'clusters' artifact, expected 'selection'"),
    ("shard-seed-negative", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "sh", *SHARD, "--seed",
                             "-1"], "Invalid value for '--seed': -1 is not in the range 0<=x<=4294967295"),
    ("shard-out-exists", ["shard", "p/selection.parquet", "--data", "data.jsonl", "--out", "p/shards", *SHARD],
     "p/shards: already exists"),
    # ---- run: every stage's options before the first stage
    ("run-no-budget", ["run", "data.jsonl", "--out", "r", *FAST, *SHARD],
     "give exactly one of --fraction F, --budget N, --per-cluster-ratio R (rows), or --token-budget T or "
     "--token-fraction F (tokens)"),
    ("run-fraction-zero", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0", *SHARD],
     "--fraction must be in (0, 1]"),
    ("run-step-too-big", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.31", "--num-shards", "16",
                          "--micro-batch-size", "16"],
     "16 × 16 = 256 rows, but --fraction 0.31 of 120 rows selects at most 37"),
    # --remainder wrap fills no step the selection is short of (its repeats never share one): refused by shard, after
    # embed, cluster and select, whose selection then needed --overwrite for the rerun with a larger budget
    ("run-step-too-big-with-wrap", ["run", "data.jsonl", "--out", "r", *FAST, "--budget", "3", *SHARD, "--remainder",
                                    "wrap"], "2 × 2 = 4 rows, but --budget 3 of 120 rows selects at most 3"),
    ("run-k-too-large", ["run", "small.jsonl", "--out", "r", "--k", "50", "--fraction", "0.5", *SHARD],
     "--k 50 is larger than the number of examples (20)"),
    # embed leaves the exact copies out: cluster refused the --k after embed had run
    ("run-k-too-large-after-exact-copies", ["run", "twice.jsonl", "--out", "r", "--k", "30", "--fraction", "0.5",
                                            *SHARD],
     "--k 30 is larger than the number of examples embed keeps (20: 20 exact duplicates of others left out; "
     "--keep-duplicates keeps them)"),
    # the step checked against the rows embed keeps: select refused it after embed and cluster had run
    ("run-step-too-big-after-exact-copies", ["run", "twice.jsonl", "--out", "r", "--fraction", "0.3",
                                             "--num-shards", "2", "--micro-batch-size", "4"],
     "2 × 4 = 8 rows, but --fraction 0.3 of 20 rows (of 40: 20 exact duplicates left out) selects at most 6"),
    ("run-floor-after-exact-copies", ["run", "copies.yaml", "--out", "r", "--fraction", "0.5", *SHARD],
     "source copy: its floor is 2 rows (0.2 of 10, copies.yaml: inputs[1].min_share) and it has only 0 rows left "
     "after exact duplicates left out 40 rows"),
    ("run-bad-row-first", ["run", "invalid_json.jsonl", "--out", "r", "--fraction", "0.5", *SHARD],
     "invalid_json.jsonl:4: invalid JSON"),
    ("run-other-options", ["run", "data.jsonl", "--out", "p", *FAST, "--fraction", "0.5", *SHARD],
     "p: holds a run made with other select options (--fraction 0.31 -> 0.5); pass --overwrite"),
    ("run-other-options-named-as-written", ["run", "data.jsonl", "--out", "p", *FAST, "--fraction", "0.31", *SHARD,
                                            "--dedup", "0.9", "--center"],  # were 'None -> 0.9', 'False -> True'
     "p: holds a run made with other cluster options (--center off -> on)"),
    ("run-other-options-not-given-before", ["run", "data.jsonl", "--out", "p", *FAST, "--fraction", "0.31", *SHARD,
                                            "--dedup", "0.9"], "(--dedup (not given) -> 0.9)"),
    # the output written inside the data's directory: embed ran, then cluster read the embeddings as data rows
    ("run-out-inside-a-parquet-dataset", ["run", "pqdir", "--out", "pqdir/curated", *FAST, "--fraction", "0.3", *SHARD],
     "--out pqdir/curated: is inside the input directory pqdir, which is read whole (a data directory's files "
     "are its rows"),
    ("embed-out-inside-a-parquet-dataset", ["embed", "pqdir", "--out", "pqdir/e.parquet"],
     "--out pqdir/e.parquet: is inside the input directory pqdir"),
    ("run-out-file-as-folder", ["run", "data.jsonl", "--out", "data.jsonl/r", *FAST, "--fraction", "0.3", *SHARD],
     "is a file, not a directory"),
    ("run-missing-num-shards", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.3"],
     "Missing option '--num-shards'"),
    ("run-missing-out", ["run", "data.jsonl", *FAST, "--fraction", "0.3", *SHARD], "Missing option '--out'"),
    ("run-within-hard-no-loss", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.3", "--within", "hard",
                                 *SHARD], "--within hard needs a loss per example"),
    ("run-floors-above-all", ["run", "floors.yaml", "--out", "r", *FAST, "--fraction", "0.3", *SHARD],
     "the sources' floors (data 0.9 from floors.yaml: inputs[0].min_share, other 0.5 from floors.yaml: "
     "inputs[1].min_share) add up to 140% of the selection"),
    # caps that hold less than the selection, or bounds with an order they cannot cut: refused after embed and cluster
    ("run-caps-below-all", ["run", "data.jsonl", "other.json", "--out", "r", *FAST, "--fraction", "0.3",
                            "--source-max-share", "0.4", *SHARD],
     "the sources' caps (data 0.4 from --source-max-share, other 0.4 from --source-max-share) add up to 80% of the "
     "selection, less than all of it"),
    ("run-bounds-with-diverse", ["run", "data.jsonl", "other.json", "--out", "r", *FAST, "--fraction", "0.3",
                                 "--within", "diverse", "--source-max-share", "other=0.5", *SHARD],
     "source other: its cap 0.5 (--source-max-share) needs a budget taken in water-filling order, not --within "
     "diverse; lift the bounds with --source-min-share 0 --source-max-share 1, or choose another budget or order"),
    ("run-bounds-with-per-cluster-ratio", ["run", "data.jsonl", "other.json", "--out", "r", *FAST,
                                           "--per-cluster-ratio", "0.5", "--source-min-share", "other=0.2", *SHARD],
     "source other: its floor 0.2 (--source-min-share) needs a budget taken in water-filling order, not "
     "--per-cluster-ratio"),
    ("run-floor-above-a-files-cap", ["run", "caps.yaml", "--out", "r", *FAST, "--fraction", "0.3",
                                     "--source-min-share", "data=0.5", *SHARD],
     "source data: its floor 0.5 (--source-min-share) is above its cap 0.3 (caps.yaml: inputs[0].max_share)"),
    ("run-target-with-a-files-cap", ["run", "caps.yaml", "--out", "r", *FAST, "--fraction", "0.3", "--target",
                                     "other.json", *SHARD],
     "source data: its cap 0.3 (caps.yaml: inputs[0].max_share) is not met by --target"),
    ("run-floor-above-rows", ["run", "data.jsonl", "other.json", "--out", "r", *FAST, "--budget", "400",
                              "--source-min-share", "data=0.5", *SHARD],
     "source data: its floor is 200 rows (0.5 of 400, --source-min-share) and it has only 120 rows"),
    ("run-target-bad-row", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.3", "--target",
                            "empty_response.jsonl", *SHARD], "empty_response.jsonl:"),
    ("run-dim-zero", ["run", "data.jsonl", "--out", "r", "--dim", "0", "--fraction", "0.3", *SHARD],
     "--dim must be positive"),
    # found only by a later stage: embed's text basis was fitted, or embed and cluster ran, before the refusal
    ("run-groups-above-k", ["run", "data.jsonl", "--out", "r", *FAST, "--groups", "9", "--fraction", "0.5", *SHARD],
     "--groups 9 must be between 1 and k = 6"),
    # k auto and the split of mixed clusters: the most clusters they can make is known before embed
    ("run-groups-above-auto-k", ["run", "data.jsonl", "--out", "r", "--features", "text", "--dim", "16", "--groups",
                                 "100", "--fraction", "0.5", *SHARD],
     "--groups 100 must be between 1 and 18, the most clusters the split of mixed clusters can make of k = auto (11 "
     "for 120 rows)"),
    ("run-tokenizer-missing", ["run", "data.jsonl", "--out", "r", *FAST, "--token-fraction", "0.5", "--tokenizer",
                               "no-tokenizer", *SHARD], "--tokenizer no-tokenizer: not a directory nor a .gguf file"),
    # a folder holding no tokenizer: transformers refused it after embed and cluster had run
    ("run-tokenizer-config-only", ["run", "data.jsonl", "--out", "r", *FAST, "--token-fraction", "0.5", "--tokenizer",
                                   "config-only", *SHARD],
     "--tokenizer config-only: no tokenizer in this directory (no tokenizer.json, tokenizer_config.json, "
     "tokenizer.model, vocab.txt, nor vocab.json with merges.txt; it holds config.json)"),
    ("run-tokenizer-data-folder", ["run", "data.jsonl", "--out", "r", *FAST, "--token-fraction", "0.5", "--tokenizer",
                                   "textdir", *SHARD], "--tokenizer textdir: no tokenizer in this directory"),
    ("run-feature-weights-count", ["run", "data.jsonl", "--out", "r", *FAST, "--feature-weights", "1,2", "--fraction",
                                   "0.5", *SHARD], "--feature-weights: 2 weight(s) for 1 feature block(s)"),
    ("run-length-window-negative", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.5", *SHARD,
                                    "--length-window", "-3"], "--length-window must be 0 (off) or a number of steps"),
    ("run-source-share-one-input", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.5", *SHARD,
                                    "--source-max-share", "0.5"],
     "--source-min-share / --source-max-share: the data is not a mixture (one input)"),
    ("embed-commit-every-zero", ["embed", "data.jsonl", "--out", "e.parquet", "--commit-every", "0"],
     "--commit-every must be at least 1, got 0"),  # was an INTERNAL ERROR (ZeroDivisionError)
    # embed, cluster and select ran, then shard refused the paper's allocation for k != N
    ("run-paper-allocation-k", ["run", "data.jsonl", "--out", "r", *FAST, "--fraction", "0.5", *SHARD, "--allocation",
                                "paper"], "so it needs as many clusters as shards: --k 6 and --num-shards is 2; pass --k 2"),
    ("run-paper-allocation-k-auto", ["run", "data.jsonl", "--out", "r", "--fraction", "0.5", *SHARD, "--allocation",
                                     "paper"], "--k auto gives 11 clusters here and --num-shards is 2; pass --k 2"),
    # ---- report and inspect
    ("export-missing-for", ["export", "p/shards", "--out", "e"], "Missing option '--for'. Choose from: hf, trl"),
    ("export-data-for-a-trainer", ["export", "p/shards", "--for", "trl", "--out", "e", "--data", "data.jsonl"],
     "--data is only used by --for jsonl|parquet (the data of the selected rows left over from the shards); --for "
     "trl writes the shards' rows: leave --data out"),  # was ignored
    ("export-world-size-zero", ["export", "p/shards", "--for", "trl", "--out", "e", "--world-size", "0"],
     "Invalid value for '--world-size' / '-n': 0 is not in the range x>=1"),  # was told to re-run shard --num-shards 0
    ("verify-missing-log", ["verify", "p/shards"], "Missing option '--log'"),
    ("verify-log-holds-no-rank-log", ["verify", "p/shards", "--log", "p/report"],
     "p/report: no rank log here (rank-00000.jsonl ...)"),
    ("report-not-artifact", ["report", "data.jsonl"], "data.jsonl: not"),
    ("report-missing", ["report", "nowhere"], "nowhere: no such file or directory"),
    ("report-out-proc", ["report", "p", "--out", "/proc/rep"], "/proc/rep: cannot create it"),
    ("inspect-missing", ["inspect", "missing.jsonl"], "missing.jsonl: no such file or directory"),
    ("inspect-unknown-format", ["inspect", "unknown_format.jsonl"], "unrecognised record format"),
    ("no-such-command", ["embedd", "data.jsonl"], "No such command 'embedd'"),
]


@pytest.mark.parametrize("argv,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_misuse_is_one_line_exit_2_and_leaves_nothing(work, argv, expected):
    before = _snapshot(work)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "cluster_curate", *argv], cwd=work, capture_output=True, text=True,
                       env=_env(), timeout=120)
    seconds = time.monotonic() - t0
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "INTERNAL ERROR" not in r.stderr
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), r.stderr
    assert expected in lines[0], lines[0]
    assert r.stdout == ""
    assert _snapshot(work) == before, "a file was created, changed or removed"
    assert seconds < 30, seconds  # start-up plus the checks; the expensive stages take longer than this here


def test_the_matrix_is_large_enough():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)
