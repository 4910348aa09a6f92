"""Reading data folders, column names and outputs as a first-time user meets them (QA round 55): a folder of
JSON/JSONL or CSV splits is refused as a Parquet one is (an evaluation split's rows were trained on); a column is
named as it is spelled (outer spaces, a comma); "pass --overwrite" is said only where --overwrite replaces the
output; a folder that is no dataset says what it holds and what to give; a compressed file is named by its
compression, a cut-short one as cut short."""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from cluster_curate.errors import CurateError
from cluster_curate.io.datasets import ReadOptions, open_dataset
from conftest import FIXTURES
from conftest import cli_in_process as _cli
from test_datasets import read_all, write_jsonl

GSM = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()]
MIXED = "which read as one dataset would be mixed (an evaluation split's rows trained on); which split is read is " \
        "not guessed: give one, e.g. "


def refused(r) -> str:
    """The one line a refused command printed, without its `ERROR: `."""
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: ") and "INTERNAL" not in r.stderr, r.stderr
    return lines[0][len("ERROR: "):]


def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        w = csv.writer(f, lineterminator="\r\n")  # as a spreadsheet saves it
        w.writerow(header)
        w.writerows(rows)
    return path


# ------------------------------------------------------------------------------------------ 1: JSON / CSV splits

@pytest.mark.parametrize("names, held, give", [
    (("train.jsonl", "test.jsonl"), "test: test.jsonl; train: train.jsonl", "train.jsonl"),  # GSM8K as shipped
    (("train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl", "test-00000-of-00001.jsonl"),  # the hub's parts
     "test: test-00000-of-00001.jsonl; train: train-00000-of-00002.jsonl and 1 more file", "train-*.jsonl"),
    (("train.json", "validation.json.gz"), "train: train.json; validation: validation.json.gz", "train.json"),
    (("dev.jsonl", "train.ndjson"), "dev: dev.jsonl; train: train.ndjson", "train.ndjson"),
])
def test_a_folder_of_json_splits_is_refused_as_a_parquet_one_is(tmp_path, names, held, give):
    """Read as one "json-files" dataset, `run` trained on the test split's rows without a word."""
    d = tmp_path / "gsm8k"
    d.mkdir()
    (d / "LICENSE").write_text("MIT\n")
    for i, name in enumerate(names):
        text = "".join(json.dumps(r) + "\n" for r in GSM[i * 20:(i + 1) * 20])
        (d / name).write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    with pytest.raises(CurateError) as e:
        open_dataset(d)
    assert str(e.value) == f"{d}: a directory of JSON splits ({held}), {MIXED}{d / give}"
    out = tmp_path / "out"
    r = _cli("run", d, "--out", out, "--features", "text", "--dim", "4", "--k", "2", "--fraction", "0.5",
             "--num-shards", "1", "-q")
    assert refused(r) == str(e.value) and not (out / "embeddings.parquet").exists()
    # the split named is read, its parts as DATA (the shell's pattern) too
    train = sorted(d.glob(give))
    assert _cli("inspect", *train, "-q").returncode == 0
    # files that name no training split beside an evaluation one are one dataset, as Parquet parts are
    other = tmp_path / "suite"
    other.mkdir()
    for name in ("test.jsonl", "validation.jsonl", "BFCL_v3_simple.json"):
        write_jsonl(other / name, GSM[:5])
    assert read_all(other)[0].container == "json-files"


def test_a_folder_of_csv_files_says_what_to_give_and_refuses_splits(tmp_path):
    """`directory holds no data files to read (2 .csv)` was untrue, and named nothing to give."""
    rows = [(r["question"], r["answer"]) for r in GSM[:10]]

    def refused_folder(name: str, files: tuple, readme: bool = False) -> tuple:
        d = tmp_path / name
        d.mkdir()
        for file in files:
            write_csv(d / file, ["question", "answer"], rows)
        if readme:
            (d / "README.md").write_text("scores\n")
        with pytest.raises(CurateError) as e:
            open_dataset(d)
        return d, str(e.value)

    d, said = refused_folder("sheets", ("a.csv", "b.csv"))
    assert said == (f"{d}: directory holds no .parquet, .jsonl or .json files, which a directory is read for "
                    f"(2 .csv); give its CSV/TSV files as DATA (several files are read as one dataset): {d}/*.csv")
    assert _cli("inspect", d / "a.csv", d / "b.csv", "-q").returncode == 0  # what the line says to give reads
    one, said = refused_folder("one", ("qa.tsv",), readme=True)
    assert said.endswith(f"(1 .md, 1 .tsv); give its CSV/TSV file as DATA (several files are read as one dataset): "
                         f"{one / 'qa.tsv'}")
    splits, said = refused_folder("splits", ("train.csv", "test.csv"))
    assert said == f"{splits}: a directory of CSV splits (test: test.csv; train: train.csv), {MIXED}" \
                   f"{splits / 'train.csv'}"


def test_a_hub_style_folder_names_the_data_files_in_its_folders(tmp_path):
    """`hubjson/{README.md,data/train.jsonl}` said "no data files to read (1 .md, 1 folder)", naming no file."""
    d = tmp_path / "hubjson"
    (d / "data").mkdir(parents=True)
    (d / "README.md").write_text("---\nconfigs: ...\n---\n")
    write_jsonl(d / "data" / "train.jsonl", GSM[:10])
    with pytest.raises(CurateError) as e:
        open_dataset(d)
    assert str(e.value) == (f"{d}: directory holds no data files directly in it (1 .md, 1 folder), and only a "
                            f"Parquet directory's folders are read; its folders hold data/train.jsonl: give it: "
                            f"{d / 'data' / 'train.jsonl'}")
    write_jsonl(d / "data" / "train-2.jsonl", GSM[10:20])  # one split's files in one folder: the folder
    with pytest.raises(CurateError, match=rf"its folders hold data/train-2.jsonl, data/train.jsonl: give their "
                                          rf"folder: {d / 'data'}$"):
        open_dataset(d)
    assert read_all(d / "data")[0].rows == 20
    write_jsonl(d / "data" / "test.jsonl", GSM[20:25])  # splits: the one rule, the training split to give
    with pytest.raises(CurateError) as e:
        open_dataset(d)
    assert str(e.value) == (f"{d}: a directory of JSON splits (test: data/test.jsonl; train: data/train-2.jsonl and "
                            f"1 more file), {MIXED}{d / 'data' / 'train*.jsonl'}")


# ------------------------------------------------------------------------------------------ 2: column names

def test_a_column_named_with_outer_spaces_or_a_comma_is_read_by_its_exact_name(tmp_path):
    rows = [(r["question"], r["answer"]) for r in GSM[:10]]
    spaced = write_csv(tmp_path / "messy.csv", ["question ", "answer"], rows)
    comma = write_csv(tmp_path / "sheet.csv", ["Question, as asked", "Answer"], rows)
    for path, prompt, response in ((spaced, "question ", "answer"), (comma, "Question, as asked", "Answer")):
        ds, _, ex = read_all(path, ReadOptions(prompt_field=prompt, response_field=response))
        assert ds.fields["prompt"] == prompt and [e.prompt[0]["content"] for e in ex] == [q for q, _ in rows]
    # the columns listed as typed: quoted where a space or a comma is part of a name, so that it can be pasted
    with pytest.raises(CurateError) as e:
        read_all(spaced, ReadOptions(prompt_field="question", response_field="answer"))
    assert str(e.value) == f"{spaced}: --prompt-field 'question': no such column; columns found: ['question ', answer]"
    with pytest.raises(CurateError) as e:
        read_all(comma, ReadOptions(prompt_field="Question"))
    assert str(e.value).endswith("no such column; columns found: ['Question, as asked', Answer]")
    # two columns by a comma, spaces around it as before
    two = write_csv(tmp_path / "two.csv", ["title", "body", "answer"], [("t", "b", "a")])
    ds, _, ex = read_all(two, ReadOptions(prompt_field="title, body", response_field="answer"))
    assert ds.fields["prompt"] == "title,body" and ex[0].prompt[0]["content"] == "t\n\nb"


def test_the_hint_for_columns_no_format_reads_is_ready_to_paste(tmp_path):
    odd = write_csv(tmp_path / "odd.csv", ["Frage Text", "Antwort $x", "a,b"], [("q", "a", "c")])
    r = _cli("inspect", odd)
    assert refused(r).startswith(f"{odd}: unrecognised record format; columns found: ['Frage Text', 'Antwort $x', "
                                 "'a,b']. pass --prompt-field COLUMN")


# ------------------------------------------------------------------------------------------ 3: --overwrite

def test_an_output_the_tool_did_not_write_is_said_so_first_not_pass_overwrite(tmp_path):
    """`already exists (pass --overwrite to replace it)`, then with --overwrite `not a file cluster-curate wrote`:
    a dead end. The first line says whose it is."""
    data = write_jsonl(tmp_path / "d.jsonl", GSM[:40])
    emb = ["--features", "text", "--dim", "4", "-q"]
    mine = tmp_path / "mine.parquet"
    mine.write_text("my notes\n")
    r = _cli("embed", data, "--out", mine, *emb)
    assert refused(r) == (f"--out {mine}: already exists: not a file cluster-curate wrote (no 'cluster_curate' "
                          "metadata); --overwrite replaces only the tool's own outputs: choose another --out")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("keep\n")
    r = _cli("embed", data, "--out", folder, *emb)
    assert refused(r) == (f"--out {folder}: already exists: a directory cluster-curate did not write (no "
                          "part-*.parquet files); --overwrite replaces only the tool's own outputs: choose another "
                          "--out")
    assert mine.read_text() == "my notes\n" and (folder / "a.txt").read_text() == "keep\n"
    # the tool's own output: --overwrite is the way
    own = tmp_path / "e.parquet"
    assert _cli("embed", data, "--out", own, *emb).returncode == 0
    assert refused(_cli("embed", data, "--out", own, *emb)) == f"{own}: already exists (pass --overwrite to replace it)"
    assert _cli("embed", data, "--out", own, *emb, "--overwrite").returncode == 0


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)])
def test_an_empty_directory_as_a_one_file_output_is_refused(tmp_path, overwrite):
    """`embed --out DIR --overwrite` on an empty DIR wrote a Parquet file named DIR."""
    data = write_jsonl(tmp_path / "d.jsonl", GSM[:40])
    d = tmp_path / "emb"
    d.mkdir()
    r = _cli("embed", data, "--out", d, "--features", "text", "--dim", "4", "-q", *overwrite)
    assert refused(r) == (f"--out {d}: an empty directory, but an embeddings artifact is written as one Parquet "
                          f"file: give a file, e.g. {d / 'embeddings.parquet'}")
    assert d.is_dir() and not any(d.iterdir())
    assert _cli("embed", data, "--out", d / "embeddings.parquet", "--features", "text", "--dim", "4", "-q",
                *overwrite).returncode == 0


# ------------------------------------------------------------------------------------------ 5: compression

@pytest.mark.parametrize("name, said", [
    ("train.jsonl.zst", "zstd-compressed, not text; decompress it (zstd -d) or recompress it as .gz"),
    ("train.jsonl.zstd", "zstd-compressed, not text; decompress it (zstd -d) or recompress it as .gz"),
    ("train.jsonl.xz", "xz-compressed, not text; decompress it (xz -d) or recompress it as .gz"),
    ("train.csv.bz2", "bzip2-compressed, not text; decompress it (bzip2 -d) or recompress it as .gz"),
    ("train.zip", "a zip archive, not text; extract it and give the file inside"),
])
def test_a_file_compressed_otherwise_than_gzip_is_named_by_its_compression(tmp_path, name, said):
    import bz2
    import lzma
    text = "".join(json.dumps(r) + "\n" for r in GSM[:5]).encode()
    p = tmp_path / name
    p.write_bytes(lzma.compress(text) if name.endswith(".xz") else bz2.compress(text) if name.endswith(".bz2")
                  else b"\x28\xb5\x2f\xfd" + text)
    with pytest.raises(CurateError) as e:
        open_dataset(p)
    assert str(e.value) == f"{p}: {said}"


@pytest.mark.parametrize("name", ["cut.jsonl.gz", "cut.json.gz", "cut.csv.gz", "folder/cut.jsonl.gz"])
def test_a_cut_short_gzip_file_is_said_to_be_cut_short(tmp_path, name):
    rows = GSM[:200]
    if name.endswith(".csv.gz"):
        import io
        text = io.StringIO()
        csv.writer(text).writerows([("question", "answer")] + [(r["question"], r["answer"]) for r in rows])
        text = text.getvalue()
    elif name.endswith(".json.gz"):
        text = json.dumps(rows, indent=1)
    else:
        text = "".join(json.dumps(r) + "\n" for r in rows)
    whole = gzip.compress(text.encode())
    p = tmp_path / name
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(whole[:len(whole) // 2])
    r = _cli("inspect", tmp_path / "folder" if name.startswith("folder/") else p)
    assert refused(r) == (f"{p}: cannot read it: the compressed file is cut short (it ends before its end-of-stream "
                          "marker); copy or download it again")


# ------------------------------------------------------------------------------------------ review mends

def _folder(path, names, rows=20):
    path.mkdir()
    for i, name in enumerate(names):
        text = "".join(json.dumps(r) + "\n" for r in GSM[i * rows:(i + 1) * rows])
        (path / name).write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return path


def test_an_evaluation_set_folder_of_splits_is_read_whole(tmp_path):
    """The split refusal guards what is trained on: `--decontaminate gsm8k/` (train.jsonl + test.jsonl) was refused
    as "an evaluation split's rows trained on", where every question of both is looked for in the pool."""
    from cluster_curate.commands.select_parts import questions_of
    evals = _folder(tmp_path / "gsm8k", ("train.jsonl", "test.jsonl"))
    keys, _, _ = questions_of(str(evals), {"on_bad_row": "error"}, "--decontaminate")
    assert len(keys) == 40
    data = write_jsonl(tmp_path / "d.jsonl", GSM[:60])  # 40 of its rows ask a question of the set
    out = tmp_path / "out"
    r = _cli("run", data, "--out", out, "--features", "text", "--dim", "4", "--k", "2", "--fraction", "1",
             "--num-shards", "1", "--decontaminate", evals, "-q")
    assert r.returncode == 0, r.stderr
    import pyarrow.parquet as pq
    assert pq.read_table(out / "selection.parquet").num_rows == 20
    # the same folder as DATA is still refused
    with pytest.raises(CurateError, match="a directory of JSON splits"):
        open_dataset(evals)


@pytest.mark.parametrize("names", [
    ("train.jsonl", "dev_notes.json"), ("train.jsonl", "eval_results.json"),
    ("train.jsonl", "evaluation_prompts.jsonl"), ("train.jsonl", "test_train_overlap.jsonl"),
    ("train.jsonl", "train_v2.jsonl"), ("train.jsonl", "trainer_logs.jsonl"), ("train.jsonl", "contest.jsonl"),
    ("train.jsonl", "latest.jsonl"), ("train-math.jsonl", "train-code.jsonl"),
])
def test_a_file_named_like_a_split_but_no_split_is_read(tmp_path, names):
    """An evaluation word with another word after it (`dev_notes`) is a split only where a training file carries
    the same word (`train_gsm8k` / `test_gsm8k`) or the hub's part numbering does."""
    assert read_all(_folder(tmp_path / "f", names))[0].container == "json-files"


@pytest.mark.parametrize("names, held, give", [
    (("train_gsm8k.jsonl", "test_gsm8k.jsonl"), "test_gsm8k: test_gsm8k.jsonl; train_gsm8k: train_gsm8k.jsonl",
     "train_gsm8k.jsonl"),
    (("gsm8k_train.jsonl", "gsm8k_test.jsonl"), "gsm8k_test: gsm8k_test.jsonl; gsm8k_train: gsm8k_train.jsonl",
     "gsm8k_train.jsonl"),
    (("train.jsonl", "test-v2.jsonl"), "test: test-v2.jsonl; train: train.jsonl", "train.jsonl"),
    (("train_sft.jsonl", "test_sft.jsonl"), "test_sft: test_sft.jsonl; train_sft: train_sft.jsonl",
     "train_sft.jsonl"),
    (("train-00000-of-00001.jsonl", "validation_matched-00000-of-00001.jsonl"),
     "train: train-00000-of-00001.jsonl; validation_matched: validation_matched-00000-of-00001.jsonl",
     "train-00000-of-00001.jsonl"),
    (("train-0.jsonl", "train-1.jsonl.gz", "test.jsonl"), "test: test.jsonl; train: train-0.jsonl and 1 more file",
     "train-*.jsonl train-*.jsonl.gz"),
])
def test_splits_by_a_shared_word_are_refused_naming_the_training_one(tmp_path, names, held, give):
    """`train_gsm8k` + `test_gsm8k` suggested the test split; `gsm8k_train` + `gsm8k_test` was read whole; the
    pattern for `train-0.jsonl` + `train-1.jsonl.gz` matched one of them."""
    d = _folder(tmp_path / "f", names)
    with pytest.raises(CurateError) as e:
        open_dataset(d)
    shown = " ".join(str(d / g) for g in give.split())
    assert str(e.value) == f"{d}: a directory of JSON splits ({held}), {MIXED}{shown}"


def test_an_own_folder_of_another_kind_is_named_as_what_it_is(tmp_path):
    """`embed --out RUN_FOLDER` said "a directory cluster-curate did not write (no part-*.parquet files)"."""
    data = write_jsonl(tmp_path / "d.jsonl", GSM[:60])
    run = tmp_path / "run"
    assert _cli("run", data, "--out", run, "--features", "text", "--dim", "4", "--k", "2", "--fraction", "0.5",
                "--num-shards", "1", "-q").returncode == 0
    emb = ["--features", "text", "--dim", "4", "-q"]
    for folder, what in ((run, "a `run` folder"), (run / "shards", "a shards directory")):
        for overwrite, exists in (((), "already exists: "), (("--overwrite",), "")):
            assert refused(_cli("embed", data, "--out", folder, *emb, *overwrite)) == (
                f"--out {folder}: {exists}{what} cluster-curate wrote, not an earlier embeddings output; --overwrite "
                "replaces only the tool's own outputs of the same kind: choose another --out")
    import shutil
    selection = shutil.copy(run / "selection.parquet", tmp_path / "selection.parquet")
    assert refused(_cli("shard", selection, "--data", data, "--out", run, "-n", "1", "--overwrite",
                        "-q")).startswith(f"--out {run}: a `run` folder cluster-curate wrote, not an earlier shards "
                                          "output")
    assert (run / "run-state.json").is_file() and (run / "shards" / "manifest.json").is_file()
