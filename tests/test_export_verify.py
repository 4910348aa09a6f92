"""`export` layouts and columns, the config snippets against the trainers' documented keys, and `verify`'s
classification of what ranks consumed (pure functions; the real trainer runs are in test_trainers_plan.py)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from cluster_curate.commands.export import _read_shards as read_shards
from cluster_curate.commands.export import export as export_command
from cluster_curate.commands.verify import read_consumed, verify
from cluster_curate.errors import CurateError
from cluster_curate.loader import ConsumedLog, interleaved_order, shard_files
from cluster_curate.plan_check import check_plan, format_check
from shard_helpers import make_selection

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
N, M = 2, 2


def export(shards, trainer, out, **options):
    return export_command(str(shards), trainer=trainer, out=str(out), **options)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from cluster_curate.commands.shard import shard
    tmp = tmp_path_factory.mktemp("export")
    out = {}
    for name, data in (("qa", FIXTURES / "gsm8k" / "train-300.jsonl"),
                       ("chat", FIXTURES / "chat" / "messages-300.jsonl")):
        make_selection(tmp / f"{name}.parquet", data, k=3, fraction=0.3, n_tokens=True)
        shard(str(tmp / f"{name}.parquet"), str(data), str(tmp / name), num_shards=N, micro_batch_size=M)
        out[name] = tmp / name
    return out


def _ids(path, rank):
    return pq.read_table(shard_files(path)[rank], columns=["id"]).column("id").to_pylist()


# ------------------------------------------------------------------------------------------ layouts

def test_interleaved_orders_deal_each_rank_its_shard():
    steps = 3
    shard = lambda r: [r * steps * M + i for i in range(steps * M)]  # noqa: E731 (row indices of shard r)
    batch = np.array(interleaved_order(N, steps, M, "batch"))
    dealt_batches = batch.reshape(-1, M)  # Accelerate: batch p, p + N, ... to process p
    assert [dealt_batches[r::N].reshape(-1).tolist() for r in range(N)] == [shard(0), shard(1)]
    sample = np.array(interleaved_order(N, steps, M, "sample"))
    assert [sample[r::N].tolist() for r in range(N)] == [shard(0), shard(1)]  # DistributedSampler(shuffle=False)
    with pytest.raises(CurateError, match="unknown layout"):
        interleaved_order(N, steps, M, "rows")


def test_export_batch_and_sample_layouts_keep_plan_columns(shards, tmp_path):
    for target, dealing in (("hf", "batch"), ("torchrun", "sample")):
        export(shards["qa"], target, tmp_path / target, world_size=N, micro_batch_size=M)
        t = pq.read_table(tmp_path / target / "train.parquet")
        assert {"id", "weight", "step", "question", "answer"} <= set(t.column_names)
        ids = np.array(t.column("id").to_pylist())
        got = ([ids.reshape(-1, M)[r::N].reshape(-1).tolist() for r in range(N)] if dealing == "batch"
               else [ids[r::N].tolist() for r in range(N)])
        assert got == [_ids(shards["qa"], 0), _ids(shards["qa"], 1)]
        assert (tmp_path / target / "README.md").read_text().count("Traps")


def test_export_trl_writes_conversational_prompt_completion(shards, tmp_path):
    export(shards["chat"], "trl", tmp_path / "trl")
    t = pq.read_table(tmp_path / "trl" / "train.parquet")
    assert t.column_names == ["prompt", "completion", "id", "weight", "step"]
    row = t.slice(0, 1).to_pylist()[0]
    assert row["prompt"][-1]["role"] == "user" and [c["role"] for c in row["completion"]] == ["assistant"]
    source = {r["id"]: r for r in read_shards(shards["chat"]).to_pylist()}[row["id"]]
    assert row["prompt"] + row["completion"] == source["messages"]  # the conversation, split at the last answer
    args = json.loads((tmp_path / "trl" / "training_args.json").read_text())
    assert args["packing"] is False and args["train_sampling_strategy"] == "sequential"
    assert args["per_device_train_batch_size"] == M


@pytest.mark.slow  # importing trl takes seconds
def test_written_training_args_are_accepted_by_transformers_and_trl(shards, tmp_path):
    """training_args.json holds keywords of the installed TrainingArguments / SFTConfig, with the order kept."""
    from transformers import TrainingArguments
    from trl import SFTConfig
    for target, cls in (("hf", TrainingArguments), ("trl", SFTConfig)):
        export(shards["chat"], target, tmp_path / target)
        kwargs = json.loads((tmp_path / target / "training_args.json").read_text())
        args = cls(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", **kwargs)
        assert args.train_sampling_strategy == "sequential" and args.per_device_train_batch_size == M


def test_export_messages_from_question_answer(shards, tmp_path):
    export(shards["qa"], "torchtune", tmp_path / "tt")
    t = pq.read_table(tmp_path / "tt" / "train.parquet")
    row = t.slice(0, 1).to_pylist()[0]
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
    cfg = (tmp_path / "tt" / "config.yaml").read_text()
    assert "shuffle: False" in cfg and "packed: False" in cfg and f"batch_size: {M}" in cfg


def test_export_selected_rows_in_original_format(shards, tmp_path):
    from cluster_curate.loader import read_manifest
    export(shards["qa"], "jsonl", tmp_path / "j")
    rows = [json.loads(line) for line in (tmp_path / "j" / "selected.jsonl").read_text().splitlines()]
    source = (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()
    leftover = read_manifest(shards["qa"])["leftover_ids"]
    assert leftover  # the rows `--remainder drop` left out of the shards are selected rows too: read back
    ids = sorted(_ids(shards["qa"], 0) + _ids(shards["qa"], 1) + leftover)
    assert rows == [json.loads(source[i]) for i in ids]  # the original records, in dataset order
    export(shards["qa"], "parquet", tmp_path / "p")
    assert pq.read_table(tmp_path / "p" / "selected.parquet").to_pylist() == rows
    # --data's errors are shard's, with what export reads it for
    with pytest.raises(CurateError, match=r"gone.jsonl: no such file or directory \(the 2 selected rows left over, in "
                                          r"no shard, are read from it\)$"):
        export(shards["qa"], "jsonl", tmp_path / "x", data=tmp_path / "gone.jsonl")
    with pytest.raises(CurateError, match=r"qa: was made from .*train-300.jsonl \(fingerprint \w+\), not from "
                                          r".*messages-300.jsonl \(fingerprint \w+\); pass --force to use it anyway "
                                          r"\(the 2 selected rows left over"):
        export(shards["qa"], "jsonl", tmp_path / "x", data=FIXTURES / "chat" / "messages-300.jsonl")


def test_export_jsonl_writes_dates_times_and_decimals_as_text_and_refuses_bytes(tmp_path):
    """Parquet date, timestamp, decimal and duration columns were an INTERNAL ERROR at `export --for jsonl`
    ('Object of type date is not JSON serializable'), after the other layouts had written them: they are written
    as ISO 8601 text, exact decimal text and seconds. A column of bytes, which JSON cannot hold, is refused in one
    line before anything is written (--for parquet keeps it)."""
    import datetime
    import decimal

    import pyarrow as pa

    from cluster_curate.commands.shard import shard
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()[:40]]
    day = datetime.date(2024, 1, 1)
    extra = {"day": [day + datetime.timedelta(days=i) for i in range(40)],
             "at": [datetime.datetime(2024, 1, 1, 3, i) for i in range(40)],
             "price": [decimal.Decimal(f"{i}.10") for i in range(40)],
             "took": [datetime.timedelta(seconds=i / 2) for i in range(40)]}
    for name, columns in (("typed", extra), ("bytes", {"blob": [b"\x00\x01"] * 40})):
        data = tmp_path / f"{name}.parquet"
        pq.write_table(pa.Table.from_pydict({**pa.Table.from_pylist(rows).to_pydict(), **columns}), data)
        make_selection(tmp_path / f"{name}-sel.parquet", data, k=3, fraction=1.0)
        shard(str(tmp_path / f"{name}-sel.parquet"), str(data), str(tmp_path / f"{name}-shards"), num_shards=N,
              micro_batch_size=M)
    export(tmp_path / "typed-shards", "jsonl", tmp_path / "j")
    written = [json.loads(line) for line in (tmp_path / "j" / "selected.jsonl").read_text().splitlines()]
    assert len(written) == 40
    assert written[3] == {**rows[3], "day": "2024-01-04", "at": "2024-01-01T03:03:00", "price": "3.10", "took": 1.5}
    with pytest.raises(CurateError, match=r"bytes-shards: column 'blob' holds bytes, which JSON Lines cannot; export "
                                          r"--for parquet keeps them$"):
        export(tmp_path / "bytes-shards", "jsonl", tmp_path / "b")
    assert not (tmp_path / "b").exists()
    export(tmp_path / "bytes-shards", "parquet", tmp_path / "p")
    assert pq.read_table(tmp_path / "p" / "selected.parquet").column("blob").to_pylist() == [b"\x00\x01"] * 40


def test_export_reads_the_left_over_rows_as_shard_reads_the_data(tmp_path, cli_runner):
    """The data changed since the shards were made: export said its own 'not the data the shards were made from',
    and had no --force. Now shard's line and shard's --force (the data as it is now); a left-over row the data no
    longer holds is one line naming its id, not a row silently missing from selected.jsonl."""
    from cluster_curate.cli import main
    from cluster_curate.loader import read_manifest
    data = tmp_path / "train.jsonl"
    lines = (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines(keepends=True)
    data.write_text("".join(lines))
    make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.3, n_tokens=True)
    assert cli_runner.invoke(main, ["shard", str(tmp_path / "sel.parquet"), "--out", str(tmp_path / "shards"),
                                    "-n", str(N), "-m", str(M), "-q"]).exit_code == 0
    leftover = read_manifest(tmp_path / "shards")["leftover_ids"]
    assert len(leftover) == 2
    with open(data, "a") as f:  # a row added since: the rows the shards hold are the same
        f.write(lines[0])

    def run(*argv, code):
        ran = cli_runner.invoke(main, [argv[0], str(tmp_path / "sel.parquet" if argv[0] == "shard" else
                                                     tmp_path / "shards"), *argv[1:]])
        assert ran.exit_code == code, ran.output
        return ran.output

    changed = run("export", "--for", "jsonl", "--out", str(tmp_path / "x"), code=2)
    assert changed == run("shard", "--out", str(tmp_path / "sh"), "-n", "2", code=2).replace(
        "sel.parquet records", "shards records").replace("\n", " (the 2 selected rows left over, in no shard, are "
                                                          "read from it)\n"), changed
    assert not (tmp_path / "x").exists() and not (tmp_path / "sh").exists()
    run("export", "--for", "jsonl", "--out", str(tmp_path / "x"), "--force", "-q", code=0)
    rows = [json.loads(line) for line in (tmp_path / "x" / "selected.jsonl").read_text().splitlines()]
    ids = sorted(_ids(tmp_path / "shards", 0) + _ids(tmp_path / "shards", 1) + leftover)
    assert rows == [json.loads(lines[i]) for i in ids]  # every selected row, in dataset order
    data.write_text("".join(lines[:max(leftover)]))  # the last left-over row is gone
    gone = run("export", "--for", "jsonl", "--out", str(tmp_path / "y"), "--force", code=2)
    assert gone == (f"ERROR: {data}: left-over id {max(leftover)} is not a readable example of this dataset "
                    f"(1 left-over id missing; were the shards made from {data}?)\n"), gone
    assert not (tmp_path / "y").exists()
    cut = [i for i in sorted(pq.read_table(tmp_path / "sel.parquet").column("id").to_pylist()) if i >= max(leftover)]
    gone = run("shard", "--out", str(tmp_path / "sh"), "-n", "2", "--force", "-q", code=2)  # as export words it
    assert gone == (f"ERROR: {data}: selected id {cut[0]} is not a readable example of this dataset "
                    f"({len(cut)} selected ids missing; was the selection made from {data}?)\n"), gone


def test_every_export_says_how_many_rows_it_wrote_and_which_it_left_out(shards, tmp_path, cli_runner):
    """The trainers' exports write the planned steps (the rows `--remainder drop` left over are in no step); jsonl
    and parquet every selected row, and need no job sizes (they write no plan). Each summary says which."""
    from cluster_curate.cli import main
    from cluster_curate.loader import read_manifest
    m = read_manifest(shards["qa"])
    assert m["leftover_rows"] == 2
    got = {}
    for trainer in ("trl", "torchrun", "jsonl", "parquet"):
        r = cli_runner.invoke(main, ["export", str(shards["qa"]), "--for", trainer, "--out", str(tmp_path / trainer),
                                     "--json"])
        assert r.exit_code == 0, r.output
        got[trainer] = json.loads(r.stdout.strip().splitlines()[-1])
    for trainer in ("trl", "torchrun"):
        s = got[trainer]
        assert (s["rows"], s["selected_rows"], s["leftover_rows"]) == (m["sharded_rows"], m["selected_rows"], 2)
    for trainer in ("jsonl", "parquet"):
        s = got[trainer]
        assert (s["rows"], s["selected_rows"], s["leftover_rows"]) == (m["selected_rows"], m["selected_rows"], 0)
    r = cli_runner.invoke(main, ["export", str(shards["qa"]), "--for", "trl", "--out", str(tmp_path / "t2")])
    assert r.exit_code == 0, r.output
    assert re.search(r"left over \(not written\) +│ 2 \(beyond the last whole step of 2 × 2", r.output), r.output


def test_export_refuses_mismatched_job(shards, tmp_path):
    with pytest.raises(CurateError, match="planned for 2 ranks, not --world-size 4"):
        export(shards["qa"], "hf", tmp_path / "x", world_size=4)
    with pytest.raises(CurateError, match="micro-batch size 2, not --micro-batch-size 8"):
        export(shards["qa"], "hf", tmp_path / "x", micro_batch_size=8)
    with pytest.raises(CurateError, match="--for must be one of hf, trl"):
        export(shards["qa"], "deepspeed", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    export(shards["qa"], "hf", tmp_path / "y")
    with pytest.raises(CurateError, match="already exists"):
        export(shards["qa"], "hf", tmp_path / "y")


# LLaMA-Factory's dataset_info.json keys (data/README.md; DatasetAttr.join in llamafactory/data/parser.py, 0.9.5)
LLAMAFACTORY_KEYS = {"hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name", "file_name",
                     "file_sha1", "formatting", "ranking", "subset", "split", "folder", "num_samples", "columns",
                     "tags"}
LLAMAFACTORY_COLUMNS = {"prompt", "query", "response", "history", "messages", "system", "tools", "images", "videos",
                        "audios", "chosen", "rejected", "kto_tag"}
LLAMAFACTORY_TAGS = {"role_tag", "content_tag", "user_tag", "assistant_tag", "observation_tag", "function_tag",
                     "system_tag"}
# axolotl's config keys used (AxolotlInputConfig / SFTDataset in axolotl/utils/schemas, 0.19.0)
AXOLOTL_TOP = {"plugins", "trainer_cls", "datasets", "shuffle_merged_datasets", "curriculum_sampling",
               "sample_packing", "val_set_size", "excess_length_strategy", "micro_batch_size"}
AXOLOTL_DATASET = {"path", "ds_type", "type", "field_messages", "message_property_mappings", "roles_to_train",
                   "split", "data_files"}
# with `rl: dpo` (validate_config makes each dataset entry a DPODataset, dropping other keys), 0.19.0
AXOLOTL_DPO_TOP = {"rl", "plugins", "trainer_cls", "datasets", "shuffle_merged_datasets", "excess_length_strategy",
                   "val_set_size", "micro_batch_size"}
AXOLOTL_DPO_DATASET = {"path", "split", "type", "data_files", "revision", "field_messages", "field_chosen",
                       "field_rejected"}
# the roles axolotl/prompt_strategies/dpo/chat_template.py `default` maps when the config gives no `roles`
AXOLOTL_DPO_ROLES = {"user", "assistant", "system", "tool"}


def axolotl_pairs(folder: Path) -> dict[int, tuple[list[dict], str, str]]:
    """`export --for axolotl` of preference pairs, read as axolotl's DPO `chat_template.default` strategy reads
    it: its config.yaml keys are axolotl's, its dataset's fields are the file's columns, the prompt turns hold the
    roles the strategy maps and each answer is one assistant turn. {id: (prompt turns, chosen, rejected)}."""
    yaml = pytest.importorskip("yaml")
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    assert set(cfg) <= AXOLOTL_DPO_TOP and cfg["rl"] == "dpo" and cfg["shuffle_merged_datasets"] is False
    assert cfg["excess_length_strategy"] == "raise" and isinstance(cfg["micro_batch_size"], int)
    assert cfg["val_set_size"] == 0
    assert cfg["trainer_cls"] == "cluster_curate.integrations.axolotl.PlanDPOTrainer"
    assert cfg["plugins"] == ["cluster_curate.integrations.axolotl.ConsumedIdsPlugin"]
    (entry,) = cfg["datasets"]
    assert set(entry) <= AXOLOTL_DPO_DATASET and entry["type"] == "chat_template.default"
    rows = pq.read_table(entry["path"]).to_pylist()
    pairs = {}
    for row in rows:
        prompt, chosen, rejected = (row[entry[f"field_{k}"]] for k in ("messages", "chosen", "rejected"))
        assert prompt and all(set(t) == {"role", "content"} and t["role"] in AXOLOTL_DPO_ROLES for t in prompt)
        assert chosen["role"] == rejected["role"] == "assistant"
        pairs[row["id"]] = (prompt, chosen["content"], rejected["content"])
    assert len(pairs) == len(rows)
    return pairs


def test_llamafactory_dataset_info_uses_documented_keys(shards, tmp_path):
    export(shards["chat"], "llamafactory", tmp_path / "lf")
    info = json.loads((tmp_path / "lf" / "dataset_info.json").read_text())
    entry = info["cluster_curate"]
    assert set(entry) <= LLAMAFACTORY_KEYS and set(entry["columns"]) <= LLAMAFACTORY_COLUMNS
    assert set(entry["tags"]) <= LLAMAFACTORY_TAGS and entry["formatting"] == "sharegpt"
    assert (tmp_path / "lf" / entry["file_name"]).is_file()
    t = pq.read_table(tmp_path / "lf" / entry["file_name"])
    turns = t.column(entry["columns"]["messages"]).to_pylist()
    tags = entry["tags"]
    for conv in turns:  # LLaMA-Factory's sharegpt converter: optional system first, then user/assistant pairs
        body = conv[1:] if conv[0][tags["role_tag"]] == tags["system_tag"] else conv
        assert [m[tags["role_tag"]] for m in body] == [tags["user_tag"], tags["assistant_tag"]] * (len(body) // 2)
    cfg = (tmp_path / "lf" / "config.yaml").read_text()
    assert "disable_shuffling: true" in cfg and "dataset: cluster_curate" in cfg


def test_llamafactory_config_keys_are_training_arguments_of_transformers_5(shards, tmp_path):
    """LLaMA-Factory parses its YAML with HfArgumentParser(..., allow_extra_keys=False): `group_by_length: false`,
    a TrainingArguments field transformers 5 removed, made it refuse the config. Every key that is not
    LLaMA-Factory's own (its data and fine-tuning arguments) is a field of transformers' Seq2SeqTrainingArguments."""
    yaml = pytest.importorskip("yaml")
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments
    export(shards["chat"], "llamafactory", tmp_path / "lf")
    cfg = yaml.safe_load((tmp_path / "lf" / "config.yaml").read_text())
    own = {"dataset_dir", "dataset", "disable_shuffling", "packing", "neat_packing"}
    hf = {k: v for k, v in cfg.items() if k not in own}
    HfArgumentParser(Seq2SeqTrainingArguments).parse_dict({"output_dir": str(tmp_path / "run"), **hf},
                                                          allow_extra_keys=False)
    assert hf == {"per_device_train_batch_size": M}


def test_axolotl_yaml_uses_documented_keys(shards, tmp_path):
    yaml = pytest.importorskip("yaml")
    export(shards["chat"], "axolotl", tmp_path / "ax")
    cfg = yaml.safe_load((tmp_path / "ax" / "config.yaml").read_text())
    assert set(cfg) <= AXOLOTL_TOP and all(set(d) <= AXOLOTL_DATASET for d in cfg["datasets"])
    assert cfg["shuffle_merged_datasets"] is False and cfg["curriculum_sampling"] is True
    assert cfg["sample_packing"] is False and cfg["micro_batch_size"] == M and cfg["val_set_size"] == 0
    # utils/data/sft.py filters by it as the DPO path does: a row over sequence_len stops the run, not dropped
    assert cfg["excess_length_strategy"] == "raise"
    assert Path(cfg["datasets"][0]["path"]).is_file()
    assert cfg["plugins"] == ["cluster_curate.integrations.axolotl.ConsumedIdsPlugin"]
    assert cfg["trainer_cls"] == "cluster_curate.integrations.axolotl.PlanSFTTrainer"
    assert cfg["datasets"][0]["type"] == "cluster_curate.integrations.axolotl"


def test_axolotl_sft_config_says_what_reorders_rows(shards, tmp_path):
    """The SFT config.yaml says, before its keys, what in axolotl would move a planned row to another rank or step
    (the list order of `datasets:`, its shuffles, sampler and packing) and which keys keep the order; its README
    says how to check the run."""
    export(shards["chat"], "axolotl", tmp_path / "ax")
    text = (tmp_path / "ax" / "config.yaml").read_text()
    note = text[:text.index("\nplugins:")]
    assert all(line.startswith("# ") for line in note.splitlines())
    for said in ("`datasets:` in list order", "first", "`shuffle_merged_datasets: false`",
                 "`shuffle_before_merging_datasets: true`", "`curriculum_sampling: true`", "trainer_cls",
                 "`sample_packing: true`", "`dataset_prepared_path`", "--overwrite", "`sequence_len`",
                 "`excess_length_strategy: raise`"):
        assert said in note, said
    readme = (tmp_path / "ax" / "README.md").read_text()
    assert "verify SHARDS --log OUTPUT_DIR/consumed" in readme and "`output_dir`" in readme
    assert "`excess_length_strategy: raise`: by default axolotl drops a row longer than `sequence_len`" in readme
    # merge_datasets shuffles the rows themselves, before any sampler: trainer_cls does not undo it
    assert "`shuffle_merged_datasets: false` (else axolotl shuffles the file itself" in readme


def test_axolotl_dpo_config_says_what_reorders_or_drops_rows(preference_shards, tmp_path):
    """The DPO config.yaml says, before its keys, what in axolotl's preference data path (utils/data/rl.py,
    0.19.0) would move a planned pair to another rank or step or take it out (the list order of `datasets:`, its
    shuffles, the validation split, the length filter, the sampler) and which keys keep the plan; its README says
    the same of `val_set_size`, and its keys are axolotl's (`axolotl_pairs`)."""
    export(preference_shards["standard"], "axolotl", tmp_path / "ax")
    axolotl_pairs(tmp_path / "ax")
    text = (tmp_path / "ax" / "config.yaml").read_text()
    note = text[:text.index("\nrl: dpo\n")]
    assert all(line.startswith("# ") for line in note.splitlines())
    for said in ("`datasets:` in list order", "first", "`shuffle_merged_datasets: false`",
                 "`shuffle_before_merging_datasets: true`", "`val_set_size: 0`", "`test_datasets`",
                 "`excess_length_strategy: raise`", "`sequence_len`", "`curriculum_sampling`", "trainer_cls",
                 "`dataset_exact_deduplication`", "`dataset_prepared_path`", "--overwrite"):
        assert said in note, said
    readme = (tmp_path / "ax" / "README.md").read_text()
    assert "`val_set_size: 0`" in readme and "verify SHARDS --log OUTPUT_DIR/consumed" in readme


def test_axolotl_sft_config_keeps_every_row_out_of_the_validation_split(shards, tmp_path):
    """axolotl splits `val_set_size` rows off the end of the training data (create_train_validation_split,
    shuffle=False): a merged config's `val_set_size: 0.05` would take the plan's last steps away. The SFT config
    sets it to 0, its README says why and where an evaluation set goes."""
    yaml = pytest.importorskip("yaml")
    export(shards["chat"], "axolotl", tmp_path / "ax")
    assert yaml.safe_load((tmp_path / "ax" / "config.yaml").read_text())["val_set_size"] == 0
    readme = (tmp_path / "ax" / "README.md").read_text()
    assert "`val_set_size: 0`" in readme and "`test_datasets`" in readme


# --------------------------------------------------------------------------------------------- verify

def _grid(steps=4):
    return np.arange(steps * N * M).reshape(steps, N, M) + 100


def _log(per_rank):
    return {r: [{"step": t, "ids": list(map(int, b))} for t, b in enumerate(batches)]
            for r, batches in per_rank.items()}


def test_verify_passes_the_plan_and_names_shuffling():
    g = _grid()
    good = _log({r: [g[t, r] for t in range(4)] for r in range(N)})
    assert check_plan(g, good).ok
    rng = np.random.default_rng(0)
    flat = rng.permutation(g.reshape(-1))
    shuffled = _log({r: [flat.reshape(-1, M)[r::N][t] for t in range(4)] for r in range(N)})
    c = check_plan(g, shuffled)
    assert not c.ok and "shuffling sampler" in format_check(c)


def test_verify_accepts_whole_epochs_and_names_a_partial_one():
    g = _grid()
    two = _log({r: [g[t % 4, r] for t in range(8)] for r in range(N)})
    w = np.linspace(0.5, 2.0, g.size).reshape(g.shape)
    for r in range(N):
        for t, rec in enumerate(two[r]):
            rec["weights"] = w[t % 4, r].tolist()
    assert check_plan(g, two, w).ok
    for steps in (6, 2, 1):  # at 1/N of the plan or less it was blamed on a shard dealt a second time
        short = _log({r: [g[t % 4, r] for t in range(steps)] for r in range(N)})
        c = check_plan(g, short)
        assert not c.ok and c.causes == ["rank(s) 0, 1 stopped inside an epoch of the plan's 4 steps (max_steps, or "
                                         "an interrupted run)"], steps


def test_verify_names_double_sharding_and_wrong_layout():
    g = _grid()
    twice = _log({r: [g[t, r] for t in range(r, 4, N)] for r in range(N)})
    text = format_check(check_plan(g, twice))
    assert "only 1/2 of its own shard" in text
    # a batch-interleaved file dealt sample by sample (DistributedSampler on an `export --for hf` file)
    file_ids = g.transpose(1, 0, 2).reshape(-1)[interleaved_order(N, 4, M, "batch")]
    wrong = _log({r: list(file_ids[r::N].reshape(-1, M)) for r in range(N)})
    causes = check_plan(g, wrong).causes
    # at N = M = 2 a sample-interleaved file dealt by micro-batches consumes the same order: one cause, ambiguous
    assert len(causes) == 1 and "ambiguous" in causes[0] and "-interleaved but" not in causes[0]
    assert "batchs" not in format_check(check_plan(g, wrong))


def _own_shard_dealt_again(own: list[int], n: int, r: int, m: int, dealer: str) -> list[list[int]]:
    """Rank r's micro-batches when its own shard (`own`, its ids in order) is dealt to the n ranks a second time,
    by accelerate's own BatchSamplerShard (accelerator.prepare of a rank-local loader) or torch's DistributedSampler."""
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler
    if dealer.startswith("sampler"):
        sampler = DistributedSampler(own, num_replicas=n, rank=r, shuffle=False, drop_last=dealer.endswith("drop"))
        return [list(b) for b in DataLoader(own, batch_size=m, sampler=sampler, collate_fn=list)]
    from accelerate.data_loader import BatchSamplerShard
    batches = BatchSampler(SequentialSampler(own), m, drop_last=dealer == "drop-last")
    return [[own[i] for i in b] for b in BatchSamplerShard(batches, n, r, even_batches=dealer != "uneven")]


@pytest.mark.parametrize("n, steps", [(4, 58), (3, 10), (2, 4), (4, 2)])
@pytest.mark.parametrize("dealer", ["even", "uneven", "drop-last", "sampler", "sampler-drop"])
@pytest.mark.parametrize("epochs", [1, 2])
def test_verify_names_a_shard_dealt_again_whatever_the_remainder(n, steps, dealer, epochs, tmp_path):
    """A rank's own shard handed to accelerator.prepare (README's trap) with steps not a multiple of N: each rank
    got ceil(steps / N) micro-batches (even_batches wraps round to the first ones), more than 1/N of the plan, and
    verify blamed "a shuffling or length-grouping sampler, or packing". Now the log is matched to the dealing
    itself (by micro-batches or by samples, ceil or floor, wrapped or not, epoch after epoch)."""
    m = 2
    if dealer == "drop-last" and steps < n:
        pytest.skip("every rank gets no micro-batch at all: nothing was consumed")
    g = np.arange(steps * n * m).reshape(steps, n, m) + 100
    for r in range(n):
        batches = _own_shard_dealt_again(g[:, r].reshape(-1).tolist(), n, r, m, dealer)
        with ConsumedLog(tmp_path, rank=r) as log:
            for _ in range(epochs):
                for b in batches:
                    log.record(b)
    c = check_plan(g, read_consumed(tmp_path, n))
    assert not c.ok and c.causes == [
        f"each rank consumed only 1/{n} of its own shard: the shard was dealt a second time (a rank's own shard "
        "handed to accelerator.prepare or a DistributedSampler) — give the framework the global order (export "
        "--for accelerate) or iterate the shard yourself"], c.causes


def test_a_shard_read_in_another_order_or_stopped_early_is_not_called_dealt_again():
    """The other causes of a rank's own rows out of place stay theirs: each rank's shard shuffled, or a run
    stopped after about 1/N of the plan's steps."""
    n, steps, m = 4, 58, 2
    g = np.arange(steps * n * m).reshape(steps, n, m) + 100
    rng = np.random.default_rng(0)
    shuffled = _log({r: rng.permutation(g[:, r].reshape(-1)).reshape(-1, m)[:15] for r in range(n)})
    assert [x for x in check_plan(g, shuffled).causes if "1/4" in x or "another order" in x] == [
        "each rank read its own rows in another order: a shuffling or length-grouping sampler, or packing (TRL's "
        "best-fit-decreasing packing sorts longest first)"]
    # dealt again and shuffled (HF Trainer's default sampler over a rank-local shard), 1/n of each: named as dealt
    # again (a first version of the exact dealt-order check lost it)
    steps_even = 16
    h = np.arange(steps_even * n * m).reshape(steps_even, n, m) + 100
    dealt = {r: rng.permutation(h[:, r].reshape(-1)).reshape(-1, m)[r::n] for r in range(n)}
    assert any("1/4 of its own shard" in x for x in check_plan(h, _log(dealt)).causes)
    stopped = _log({r: g[:15, r] for r in range(n)})
    assert check_plan(g, stopped).causes == ["rank(s) 0, 1, 2, 3 stopped inside an epoch of the plan's 58 steps "
                                             "(max_steps, or an interrupted run)"]


def test_verify_catches_a_nan_weight_and_a_weights_list_of_another_length(shards, tmp_path, cli_runner):
    """A NaN loss weight, or a micro-batch's weights list of another length than its ids, passed as the plan
    followed (exit 0): NaN stood for "no weight logged" and compares False with the tolerance, and a list of the
    wrong length was read as NaNs. Both are the plan not followed now; a log of ids alone still passes."""
    from cluster_curate.cli import main
    from cluster_curate.commands.verify import planned_grid
    _, g, w = planned_grid(shards["qa"])

    def logged(name, weights):
        for r in range(N):
            with ConsumedLog(tmp_path / name, rank=r) as log:
                for t in range(g.shape[0]):
                    log.record(g[t, r], weights(t, r), loss=1.0)
        return verify(str(shards["qa"]), log=str(tmp_path / name))

    assert logged("ids-only", lambda t, r: None)["ok"]  # a trainer that logs its ids alone
    nan = logged("nan", lambda t, r: [float("nan"), *w[t, r, 1:]] if (t, r) == (3, 1) else w[t, r])
    assert not nan["ok"] and nan["problems"] == [
        f"rank 1 step 3: weight: id {g[3, 1, 0]} trained with weight nan, planned {w[3, 1, 0]:.6g}"]
    assert nan["ranks"][1]["weight"] == 1 and nan["ranks"][1]["in_plan"] == g.shape[0] * M  # the id was in place
    assert any("NaN" in c for c in nan["causes"]), nan["causes"]
    odd = logged("len", lambda t, r: [9.0] if r == 1 else w[t, r])
    assert not odd["ok"] and odd["problem_count"] == g.shape[0], odd["problems"]
    assert odd["problems"][:2] == [f"rank 1 step {t}: weight: 1 weight logged for a micro-batch of {M} ids"
                                   for t in range(2)]
    assert odd["ranks"][1]["weight"] == g.shape[0] * M and odd["ranks"][0]["weight"] == 0
    assert any("not one per id" in c for c in odd["causes"]), odd["causes"]
    for name in ("nan", "len"):
        assert cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / name)]).exit_code == 3


@pytest.mark.parametrize("n, m", [(2, 3), (3, 2), (4, 1)])
def test_verify_names_the_one_wrong_layout_that_was_consumed(n, m):
    steps = 4
    g = np.arange(steps * n * m).reshape(steps, n, m) + 100
    for layout, other, dealt in (("batch", "sample", "samples"), ("sample", "batch", "micro-batches")):
        file_ids = g.transpose(1, 0, 2).reshape(-1)[interleaved_order(n, steps, m, layout)]
        if other == "sample":  # DistributedSampler(shuffle=False): sample r, r + n, ... to rank r
            per_rank = {r: list(file_ids[r::n].reshape(-1, m)) for r in range(n)}
        else:  # Accelerate / HF Trainer: micro-batch r, r + n, ... to rank r
            per_rank = {r: list(file_ids.reshape(-1, m)[r::n]) for r in range(n)}
        c = check_plan(g, _log(per_rank))
        wrong = [x for x in c.causes if "-interleaved but" in x or "ambiguous" in x]
        assert wrong == [x for x in c.causes if "layout" in x or "interleaved" in x]
        if m == 1:  # one row per micro-batch: both ways of dealing are the same, so is the file
            assert c.ok
            continue
        assert len(wrong) == 1 and f"the data is {layout}-interleaved but the trainer dealt {dealt}" in wrong[0]


def test_verify_counts_duplicates_missing_weights_and_lost_ids():
    g = _grid()
    w = np.ones(g.shape)
    log = _log({r: [g[t, r] for t in range(4)] for r in range(N)})
    log[0][1]["ids"] = list(map(int, g[0, 0]))          # step 0 again instead of step 1
    log[1][0]["weights"] = [1.0, 2.0]
    log[1][2]["ids"] = None
    c = check_plan(g, log, w)
    kinds = {(r, k) for r, _, k, _ in c.problems}
    assert {(0, "duplicated"), (0, "missing"), (0, "out of order"), (1, "weight"), (1, "no ids")} <= kinds
    assert "lost their `id` column" in format_check(c)


def test_verify_accepts_weights_logged_as_float32_and_refuses_other_ones():
    """A trainer logs its loss weights as float32: 33.33333206 for a planned 33.333333333 was refused by an absolute
    tolerance of 1e-6 (past 32 a float32 is coarser than that). Now relative: a float32 rounding passes, a NaN or
    a weight off by 1e-4 of itself does not."""
    g = _grid()
    w = np.geomspace(0.01, 5000.0, g.size).reshape(g.shape)
    w[0, 0, 0] = 100 / 3

    def logged(weights):
        log = _log({r: [g[t, r] for t in range(4)] for r in range(N)})
        for r in range(N):
            for t, rec in enumerate(log[r]):
                rec["weights"] = [float(x) for x in weights[t, r]]
        return check_plan(g, log, w)

    assert float(np.float32(100 / 3)) == pytest.approx(33.33333206)
    assert logged(w.astype(np.float32)).ok
    off = w.copy()
    off[1, 1, 0] *= 1 + 1e-4
    off[2, 0, 1] = np.nan
    c = logged(off.astype(np.float32))
    assert [(r, t, k) for r, t, k, _ in c.problems] == [(0, 2, "weight"), (1, 1, "weight")]
    assert c.ranks[0].nan_weights == 1 and c.ranks[1].off_weights == 1


def _dealt_after_taking_out(file_ids, out: set, n: int, m: int, dealing: str) -> dict:
    """What each rank consumes when the trainer takes the rows `out` of the exported file before dealing it by
    `dealing` (micro-batches of m, or samples, round-robin), the last round evened out with rows from the start
    (HF / accelerate even_batches, DistributedSampler's padding)."""
    kept = [int(i) for i in file_ids if int(i) not in out]
    unit = m if dealing == "batch" else 1
    units = -(-len(kept) // unit)
    padded = (kept * 2)[: -(-units // n) * n * unit]
    rows = {r: np.array(padded).reshape(-1, unit)[r::n].reshape(-1) for r in range(n)}
    return {r: [own[k: k + m] for k in range(0, own.size, m)] for r, own in rows.items()}


@pytest.mark.parametrize("layout, dealing", [("batch", "batch"), ("sample", "sample")])
def test_verify_names_rows_taken_out_before_dealing_not_shuffling(layout, dealing):
    """A trainer that drops rows before dealing (TRL's max_length, a `.filter` on length, axolotl's sequence_len)
    deals the export's order without them: every later row moves on. verify blamed a shuffling sampler or the
    wrong layout; it says how many planned rows reached no rank and that the rest kept the plan's order."""
    n, m, steps = 2, 2, 8
    g = np.arange(steps * n * m).reshape(steps, n, m) + 100
    file_ids = g.transpose(1, 0, 2).reshape(-1)[interleaved_order(n, steps, m, layout)]
    c = check_plan(g, _log(_dealt_after_taking_out(file_ids, {103, 110, 117}, n, m, dealing)))
    assert not c.ok
    assert c.causes == ["3 planned rows reached no rank and the rest were dealt in the plan's order without them: "
                        "rows were taken out before dealing (a filter on length, TRL's max_length, axolotl's "
                        "sequence_len; README 'Training with your trainer')"], c.causes
    # rows shuffled, not taken out: the shuffling cause, not this one
    rng = np.random.default_rng(1)
    shuffled = _dealt_after_taking_out(rng.permutation(file_ids), {103}, n, m, dealing)
    assert not any("taken out" in x for x in check_plan(g, _log(shuffled)).causes)
    # a run that stopped early, dealt by a per-device batch of 1 (not the plan's 2): the order's first rows, none
    # passed over, so none taken out: the batch size is the cause
    stopped = _dealt_after_taking_out(file_ids[: file_ids.size // 2], set(), n, 1, dealing)
    causes = check_plan(g, _log(stopped)).causes
    assert not any("taken out" in x for x in causes) and any("per-device batch size" in x for x in causes), causes


def test_verify_counts_as_missing_only_ids_a_rank_never_consumed():
    """`missing` took the epochs from the number of log lines: a run with a per-device batch size of 1 (twice the
    plan's lines) had every id counted missing once though it was consumed, and a run stopped inside epoch 2 said
    "N planned ids never consumed" of ids consumed once. Now `missing` is the ids no line of the rank consumed; a
    run stopped inside a later epoch says so."""
    g = _grid()
    file_ids = g.reshape(-1)  # batch-interleaved: dealt by micro-batches of 1 instead of M
    halves = {r: [[int(i)] for i in file_ids[r::N]] for r in range(N)}
    c = check_plan(g, _log(halves))
    for r in range(N):
        never = set(g[:, r].reshape(-1).tolist()) - {b[0] for b in halves[r]}
        assert c.ranks[r].counts["missing"] == len(never) and c.ranks[r].counts["duplicated"] == 0
    assert any("per-device batch size" in x for x in c.causes)
    stopped = check_plan(g, _log({r: [g[t % 4, r] for t in range(6)] for r in range(N)}))
    assert [rc.counts["missing"] for rc in stopped.ranks] == [0, 0] and not stopped.ok
    assert [k for _, _, k, _ in stopped.problems] == ["short epoch"] * N
    assert "never consumed" not in " ".join(stopped.problem_lines())
    assert stopped.problem_lines()[0] == (f"rank 0: short epoch: the log stops inside epoch 2 of the plan (12 rows "
                                          f"logged, 8 an epoch): 4 planned ids consumed in fewer epochs than the "
                                          f"others (first: id {g[2, 0, 0]})")
    assert [rc.counts["short epoch"] for rc in stopped.ranks] == [4, 4]
    # packing's uneven ranks: more rows than an epoch on one rank, none consumed twice: no epoch stopped short
    packed = check_plan(g, _log({0: [g[:, 0].reshape(-1).tolist() + [int(g[0, 1, 0])]],
                                 1: [g[:, 1].reshape(-1)[1:].tolist()]}))
    assert not any(k == "short epoch" for _, _, k, _ in packed.problems), packed.problems
    # over several epochs a duplicate is counted against them, and its line says how many the log spans
    again = _log({r: [g[t % 4, r] for t in range(8)] for r in range(N)})
    again[0][7]["ids"] = list(map(int, g[0, 0]))  # step 0 a third time instead of step 3
    c = check_plan(g, again)
    assert c.ranks[0].counts["duplicated"] == M and c.ranks[0].counts["missing"] == 0
    assert f"rank 0: duplicated: id {g[0, 0, 0]} consumed 3 times, planned 2 (the log spans 2 epochs of the " \
           "plan's 4 steps)" in c.problem_lines()


def test_an_id_out_of_order_is_told_where_it_was_planned():
    """A rank's own id logged out of order said "planned for this rank at another step" even where it was
    planned for that very step, only in another place of the micro-batch (a collator that sorts a micro-batch);
    now it names the place, or the step it was planned for."""
    g = _grid()
    log = _log({r: [g[t, r] for t in range(4)] for r in range(N)})
    log[0][1]["ids"] = list(map(int, g[1, 0][::-1]))          # step 1's two ids, swapped
    log[1][2]["ids"] = [int(g[3, 1, 0]), int(g[2, 1, 1])]     # step 3's first id at step 2
    details = {(r, t): d for r, t, k, d in check_plan(g, log).problems if k == "out of order"}
    assert details[(0, 1)] == f"id {g[1, 0, 0]} planned for this step at position 0 of the micro-batch, logged at 1"
    assert details[(1, 2)] == f"id {g[3, 1, 0]} planned for this rank at step 3"


def test_a_rank_without_a_log_counts_its_planned_rows_as_missing():
    """The table said `missing 0` for the rank whose problem line was `missing: no log from this rank`."""
    g = _grid()
    c = check_plan(g, _log({0: [g[t, 0] for t in range(4)]}))  # rank 1 wrote nothing
    assert [rc.counts["missing"] for rc in c.ranks] == [0, 4 * M]
    assert ("a rank wrote no log: was the job run on the planned number of processes, each logging?"
            in c.causes)


def test_verify_names_a_cause_when_every_rank_log_is_empty(shards, tmp_path):
    """Every rank's log opened (ConsumedLog, the callback's on_train_begin) and nothing recorded: exit 3 with every
    planned id missing and no cause at all (`"causes": []`). Now it names one; a log with a step has other causes."""
    cause = ("no rank logged any micro-batch (every log is empty): the job stopped before its first step, or nothing "
             "fed the logs: a Trainer without PlanTrainerMixin (ConsumedIdsCallback logs what the mixin hands it), "
             "or a loop that never calls ConsumedLog.record")
    for r in range(N):
        ConsumedLog(tmp_path / "log", rank=r).close()
    got = verify(str(shards["qa"]), log=str(tmp_path / "log"))
    assert not got["ok"] and got["causes"] == [cause], got["causes"]
    assert f"cause: {cause}" in got["report"]
    g = _grid()
    assert check_plan(g, _log({0: [], 1: []})).causes == [cause]
    assert cause not in check_plan(g, _log({0: [g[0, 0]], 1: []})).causes


def test_verify_of_a_folder_without_any_rank_log_says_where_the_logs_are(shards, tmp_path, cli_runner):
    """`verify shards/ --log consumed/` where the job wrote consumed/run1/rank-*.jsonl (or any wrong folder): a
    table of every rank 'missing: no log from this rank', blaming the number of processes. Now one line."""
    from cluster_curate.cli import main
    from cluster_curate.commands.verify import planned_grid
    _, g, _ = planned_grid(shards["qa"])
    for r in range(N):
        with ConsumedLog(tmp_path / "consumed" / "run1", rank=r) as log:
            log.record(g[0, r])
    (tmp_path / "empty").mkdir()
    _one_error_line(cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "consumed")]),
                    "consumed: no rank log here (rank-00000.jsonl ...); found some in",
                    str(tmp_path / "consumed" / "run1"))
    _one_error_line(cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "empty")]),
                    "empty: no rank log here", "pass the directory the training job's ConsumedLog")
    ran = cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "consumed" / "run1")])
    assert ran.exit_code == 3 and "ERROR" not in ran.output  # the right folder: checked (one step of 4 ran)


def test_consumed_log_round_trip_and_bad_lines(shards, tmp_path):
    from cluster_curate.commands.verify import planned_grid
    _, g, w = planned_grid(shards["qa"])
    for r in range(N):
        with ConsumedLog(tmp_path / "log", rank=r) as log:
            for t in range(g.shape[0]):
                log.record(g[t, r], w[t, r], loss=1.0)
    assert verify(str(shards["qa"]), log=str(tmp_path / "log"))["ok"]
    (tmp_path / "log" / "rank-00001.jsonl").write_text('{"step": 0, "ids": [1, 2]}\n{"step": 1, "ids": "x"}\n')
    with pytest.raises(CurateError, match=r"rank-00001.jsonl:2: field ids: not a list of integers"):
        read_consumed(tmp_path / "log", N)
    (tmp_path / "log" / "rank-00001.jsonl").unlink()
    # a job run on 3 processes was a bad input (exit 2, no --json); the plan not followed, said so (exit 3)
    (tmp_path / "log" / "rank-00002.jsonl").write_text('{"step": 0, "ids": [1, 2]}\n')
    assert read_consumed(tmp_path / "log", N) == {0: read_consumed(tmp_path / "log", N)[0], 1: None,
                                                  2: [{"step": 0, "ids": [1, 2]}]}
    got = verify(str(shards["qa"]), log=str(tmp_path / "log"))
    assert not got["ok"] and "rank 2: beyond the plan: a log of 1 micro-batches from a rank the plan does not have " \
        "(it has 2)" in got["problems"]
    assert got["causes"][0] == ("the job ran on more processes than the 2 the shards were planned for (rank 2 "
                                "logged): launch it on 2, or shard again with --num-shards for the processes you have")



def test_torchtune_sampler_deals_the_sample_interleaved_export(shards, tmp_path):
    """torchtune's recipes deal with torchdata's StatefulDistributedSampler (a DistributedSampler): with
    `shuffle: False` and batch_size M, rank r reads exactly shard r's micro-batches from `export --for torchtune`."""
    sampler_mod = pytest.importorskip("torchdata.stateful_dataloader.sampler")
    from torch.utils.data import DataLoader
    export(shards["qa"], "torchtune", tmp_path / "tt")
    ids = pq.read_table(tmp_path / "tt" / "train.parquet", columns=["id"]).column("id").to_pylist()
    for r in range(N):
        sampler = sampler_mod.StatefulDistributedSampler(ids, num_replicas=N, rank=r, shuffle=False)
        batches = list(DataLoader(ids, batch_size=M, sampler=sampler, collate_fn=list))
        assert [i for b in batches for i in b] == _ids(shards["qa"], r) and {len(b) for b in batches} == {M}


# ------------------------------------------------------------------------------------------------ CLI

def _one_error_line(result, *needles):
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("ERROR: "), result.output
    assert all(n in lines[0] for n in needles), lines[0]
    assert "Traceback" not in result.output


def test_cli_export_refuses_a_mismatched_job_in_one_line(shards, tmp_path, cli_runner):
    from cluster_curate.cli import main
    qa = str(shards["qa"])
    _one_error_line(cli_runner.invoke(main, ["export", qa, "--for", "hf", "--out", str(tmp_path / "x"),
                                             "--world-size", "4"]), "planned for 2 ranks, not --world-size 4")
    _one_error_line(cli_runner.invoke(main, ["export", qa, "--for", "trl", "--out", str(tmp_path / "x"),
                                             "--micro-batch-size", "3"]), "not --micro-batch-size 3")
    _one_error_line(cli_runner.invoke(main, ["export", str(tmp_path), "--for", "hf", "--out", str(tmp_path / "x")]),
                    "no manifest.json")
    assert not (tmp_path / "x").exists()
    ok = cli_runner.invoke(main, ["export", qa, "--for", "torchrun", "--out", str(tmp_path / "t"), "--world-size", "2",
                                  "--micro-batch-size", "2", "--json"])
    assert ok.exit_code == 0, ok.output
    summary = json.loads(ok.output)
    assert summary["layout"] == "sample"
    assert summary["rows"] == pq.read_metadata(tmp_path / "t" / "train.parquet").num_rows


def test_export_out_inside_the_shards_or_an_export_is_refused_as_report_out_is(shards, tmp_path, cli_runner):
    """`export SHARDS --for hf --out SHARDS/hf` was written, and then `shard --out SHARDS --overwrite` and `run
    --overwrite` refused the folder it replaces whole: "holds hf, which cluster-curate did not write". Now refused
    first, in the line `report --out` gives there (the same check), nothing written."""
    import shutil

    from cluster_curate.cli import main
    copy = tmp_path / "shards"
    shutil.copytree(shards["qa"], copy)
    before = sorted(p.name for p in copy.iterdir())
    for out in (copy / "hf", copy / "sub" / "hf"):
        refused = cli_runner.invoke(main, ["export", str(copy), "--for", "hf", "--out", str(out), "--overwrite"])
        _one_error_line(refused, f"--out {out}: inside the shards directory {copy}, which `--overwrite` replaces whole",
                        "choose a folder beside it")
        assert refused.output == cli_runner.invoke(main, ["report", str(copy), "--out", str(out)]).output
    assert sorted(p.name for p in copy.iterdir()) == before
    assert cli_runner.invoke(main, ["export", str(copy), "--for", "hf", "--out", str(tmp_path / "hf"), "-q"]
                             ).exit_code == 0  # beside it
    _one_error_line(cli_runner.invoke(main, ["export", str(copy), "--for", "jsonl", "--out",
                                             str(tmp_path / "hf" / "j")]),
                    f"inside the export directory {tmp_path / 'hf'}")
    assert not (tmp_path / "hf" / "j").exists()


def test_export_of_every_selected_row_refuses_a_manifest_whose_counts_disagree(shards, tmp_path, cli_runner):
    """A manifest.json edited by hand (its leftover_ids cut): `export --for jsonl` wrote 145 of the 150 selected
    rows and said `left over (not written) 0`, exit 0. The rows it writes (the shards' once each and the left-over
    ones) are checked against selected_rows: one line naming the manifest and the counts, nothing written."""
    import shutil

    from cluster_curate.cli import main
    from cluster_curate.loader import read_manifest
    copy = tmp_path / "shards"
    shutil.copytree(shards["qa"], copy)
    manifest = read_manifest(copy)
    selected, leftover = manifest["selected_rows"], manifest["leftover_ids"]
    assert len(leftover) == 2 and manifest["sharded_rows"] == selected - 2
    for ids, said in ((leftover[:1], f"{selected - 1} rows to write, not {selected}"),
                      ([leftover[0], _ids(copy, 0)[0]], "1 of them twice")):
        (copy / "manifest.json").write_text(json.dumps(dict(manifest, leftover_ids=ids)))
        for trainer in ("jsonl", "parquet"):
            _one_error_line(cli_runner.invoke(main, ["export", str(copy), "--for", trainer, "--out",
                                                     str(tmp_path / trainer)]),
                            f"{copy / 'manifest.json'}: selected_rows {selected}, but the shards hold {selected - 2} "
                            f"rows and leftover_ids {len(ids)} (leftover_rows says 2): {said}; the manifest was "
                            "changed since `shard` wrote it")
            assert not (tmp_path / trainer).exists()


def test_cli_verify_exit_codes(shards, tmp_path, cli_runner, monkeypatch):
    """0 the plan was followed, 3 it was not, 2 bad input, 1 verify itself failed (an INTERNAL ERROR): a CI job
    tells a training that broke the plan from a check that did not run (README, "In a Makefile or CI")."""
    from cluster_curate import plan_check
    from cluster_curate.cli import main
    from cluster_curate.commands.verify import planned_grid
    _, g, w = planned_grid(shards["qa"])
    for r in range(N):
        with ConsumedLog(tmp_path / "good", rank=r) as log, ConsumedLog(tmp_path / "swapped", rank=r) as bad:
            for t in range(g.shape[0]):
                log.record(g[t, r], w[t, r])
                bad.record(g[t, 1 - r], w[t, 1 - r])  # every rank trained on the other's shard
    good = cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "good")])
    assert good.exit_code == 0, good.output
    bad = cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "swapped")])
    assert bad.exit_code == 3 and "wrong rank" in bad.output and "planned for rank 1" in bad.output, bad.output
    followed = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in bad.stdout.splitlines()
                if line.count("│") == 3}["plan followed"]
    assert followed == "no"  # was Python's False
    as_json = cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "swapped"), "--json"])
    assert as_json.exit_code == 3 and json.loads(as_json.stdout)["ok"] is False
    with monkeypatch.context() as m:
        m.setattr(plan_check, "check_plan", lambda *a, **k: 1 / 0)
        failed = cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "good")])
    assert failed.exit_code == 1 and "INTERNAL ERROR: ZeroDivisionError" in failed.stderr, failed.output
    (tmp_path / "good" / "rank-00000.jsonl").write_text('{"step": 0, "ids": [1], "weights": ["a"]}\n')
    _one_error_line(cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "good")]),
                    "rank-00000.jsonl:1: field weights")
    _one_error_line(cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log", str(tmp_path / "none")]),
                    "no such log directory")
    # one rank's log file named: it said 'no such log directory' of a file that is there
    _one_error_line(cli_runner.invoke(main, ["verify", str(shards["qa"]), "--log",
                                             str(tmp_path / "good" / "rank-00000.jsonl")]),
                    f"rank-00000.jsonl: a file; --log takes the folder of every rank's log (rank-NNNNN.jsonl): "
                    f"{tmp_path / 'good'}")


def test_shard_files_swapped_or_changed_since_shard_are_refused_by_verify_and_export(shards, tmp_path, cli_runner):
    """The manifest records each file's sha256: two files swapped (the training would read the other rank's plan
    and verify would call it followed) or one rewritten is one line naming the file, before verify or export
    reads anything."""
    import shutil

    from cluster_curate.cli import main
    from cluster_curate.commands.verify import planned_grid
    copy = tmp_path / "shards"
    shutil.copytree(shards["qa"], copy)
    _, g, w = planned_grid(copy)  # the copy is the same shards
    for r in range(N):
        with ConsumedLog(tmp_path / "log", rank=r) as log:
            for t in range(g.shape[0]):
                log.record(g[t, 1 - r], w[t, 1 - r])  # what the ranks read from the swapped files
    first, second = shard_files(copy)
    Path(first).rename(tmp_path / "aside")
    Path(second).rename(first)
    (tmp_path / "aside").rename(second)
    for args in (["verify", str(copy), "--log", str(tmp_path / "log")],
                 ["export", str(copy), "--for", "hf", "--out", str(tmp_path / "hf")]):
        _one_error_line(cli_runner.invoke(main, args), f"{first}: not the file `shard` wrote for rank 0 (it holds "
                                                       f"rank 1's shard, {Path(second).name}: the files were swapped")
    assert not (tmp_path / "hf").exists()
    for path in (first, second):  # put back, then the second one's rows written again: the same rows, other bytes
        shutil.copy2(shards["qa"] / Path(path).name, path)
    pq.write_table(pq.read_table(second), second, compression="none")
    _one_error_line(cli_runner.invoke(main, ["verify", str(copy), "--log", str(tmp_path / "log")]),
                    f"{second}: not the file `shard` wrote for rank 1 (its sha256 is not the manifest's: the file "
                    "was changed or replaced since)")


def test_a_shard_left_from_another_run_is_refused_by_a_training_start(shards, tmp_path):
    """A training does not hash its shards (verify and export do): a file left from another run with the same
    rows per shard (a node's stale copy) was read as this plan's. Its size is checked against the manifest's by
    load_shard and shard_files; a manifest written before sizes were recorded is read as before."""
    import shutil

    from cluster_curate.loader import load_shard
    copy = tmp_path / "shards"
    shutil.copytree(shards["qa"], copy)
    first, _ = shard_files(copy)
    table = pq.read_table(first)
    pq.write_table(table.set_column(table.column_names.index("question"), "question",
                                    [[p + " (another run)" for p in table.column("question").to_pylist()]]), first)
    expected = f"{first}: not the file `shard` wrote for rank 0 ("
    for read in (lambda: load_shard(copy, rank=0, world_size=N), lambda: shard_files(copy)):
        with pytest.raises(CurateError) as e:
            read()
        assert str(e.value).startswith(expected) and "bytes, the manifest records" in str(e.value)
    assert len(load_shard(copy, rank=1, world_size=N)) == len(pq.read_table(shard_files(shards["qa"])[1]))
    manifest = json.loads((copy / "manifest.json").read_text())
    for f in manifest["files"]:
        del f["bytes"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert load_shard(copy, rank=0, world_size=N).column_names == table.column_names


def test_verify_runs_as_a_process(shards, tmp_path):
    """The installed entry point, as a job's last step runs it: exit status 3 on a broken plan."""
    import subprocess
    import sys
    from cluster_curate.commands.verify import planned_grid
    _, g, _ = planned_grid(shards["qa"])
    with ConsumedLog(tmp_path / "log", rank=0) as log:
        log.record(g[0, 0])  # one step, then the job stopped; rank 1 never logged
    proc = subprocess.run([sys.executable, "-m", "cluster_curate", "verify", str(shards["qa"]), "--log",
                           str(tmp_path / "log")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and "no log from this rank" in proc.stdout + proc.stderr


def test_wrapped_repeats_verify_and_export_once(tmp_path):
    """--remainder wrap: a repeated id is planned twice (verify expects both), the selected rows export once."""
    from cluster_curate.commands.shard import shard
    from cluster_curate.commands.verify import planned_grid
    data = FIXTURES / "gsm8k" / "train-300.jsonl"
    sel = make_selection(tmp_path / "sel.parquet", data, k=3, fraction=0.3, n_tokens=True)
    shard(str(tmp_path / "sel.parquet"), str(data), str(tmp_path / "w"), num_shards=N, micro_batch_size=M,
          remainder="wrap")
    _, g, w = planned_grid(tmp_path / "w")
    assert np.unique(g).size < g.size  # some rows are repeats
    for r in range(N):
        with ConsumedLog(tmp_path / "log", rank=r) as log:
            for t in range(g.shape[0]):
                log.record(g[t, r], w[t, r])
    assert verify(str(tmp_path / "w"), log=str(tmp_path / "log"))["ok"]
    export(tmp_path / "w", "parquet", tmp_path / "p")
    source = [json.loads(line) for line in data.read_text().splitlines()]
    assert pq.read_table(tmp_path / "p" / "selected.parquet").to_pylist() == [source[i] for i in sel["ids"]]


# ------------------------------------------------------------------------------------ preference pairs (DPO)

@pytest.fixture(scope="module")
def preference_shards(tmp_path_factory):
    """Shards of GSM8K questions as DPO pairs (the right answer chosen, a wrong one rejected): TRL's standard form
    (prompt text) and its implicit-prompt conversational form."""
    from cluster_curate.commands.shard import shard
    from test_input_formats import preference_rows
    tmp = tmp_path_factory.mktemp("export-preference")
    out = {}
    for form in ("standard", "implicit"):
        data = tmp / f"{form}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in preference_rows(40, form)))
        make_selection(tmp / f"{form}-sel.parquet", data, k=3, fraction=0.5, n_tokens=True)
        shard(str(tmp / f"{form}-sel.parquet"), str(data), str(tmp / form), num_shards=N, micro_batch_size=M)
        out[form] = tmp / form
    return out


def test_export_trl_of_preference_pairs_writes_dpo_columns_and_dpo_settings(preference_shards, tmp_path):
    from trl import DPOConfig
    for form, shards in preference_shards.items():
        summary = export(shards, "trl", tmp_path / form)
        t = pq.read_table(tmp_path / form / "train.parquet")
        assert t.column_names == ["prompt", "chosen", "rejected", "id", "weight", "step"]
        source = {r["id"]: r for r in read_shards(shards).to_pylist()}
        for row in t.to_pylist():
            src = source[row["id"]]
            question = src["prompt"] if form == "standard" else src["chosen"][0]["content"]
            good = src["chosen"] if form == "standard" else src["chosen"][-1]["content"]
            bad = src["rejected"] if form == "standard" else src["rejected"][-1]["content"]
            assert row["prompt"] == [{"role": "user", "content": question}]
            assert row["chosen"] == [{"role": "assistant", "content": good}]
            assert row["rejected"] == [{"role": "assistant", "content": bad}]
        ids = np.array(t.column("id").to_pylist())
        assert [ids.reshape(-1, M)[r::N].reshape(-1).tolist() for r in range(N)] == [_ids(shards, 0), _ids(shards, 1)]
        assert summary["loss_weights_applied"].value is False
        kwargs = json.loads((tmp_path / form / "training_args.json").read_text())
        assert not {"packing", "completion_only_loss", "shuffle_dataset"} & set(kwargs)  # SFTConfig's, not DPO's
        args = DPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", **kwargs)
        assert args.train_sampling_strategy == "sequential" and args.per_device_train_batch_size == M
        assert args.max_length is None
        readme = (tmp_path / form / "README.md").read_text()
        assert "DPOTrainer" in readme and "`weight` is NOT applied" in readme


def test_export_llamafactory_of_preference_pairs_writes_a_ranking_dataset(preference_shards, tmp_path):
    shards = preference_shards["implicit"]
    export(shards, "llamafactory", tmp_path / "lf")
    entry = json.loads((tmp_path / "lf" / "dataset_info.json").read_text())["cluster_curate"]
    assert set(entry) <= LLAMAFACTORY_KEYS and set(entry["columns"]) <= LLAMAFACTORY_COLUMNS
    assert entry["ranking"] is True and entry["formatting"] == "sharegpt"
    assert entry["columns"] == {"messages": "messages", "chosen": "chosen", "rejected": "rejected"}
    t = pq.read_table(tmp_path / "lf" / entry["file_name"])
    source = {r["id"]: r for r in read_shards(shards).to_pylist()}
    tags = entry["tags"]
    for row in t.to_pylist():  # LLaMA-Factory's ranking converter: an odd number of turns, then one answer each
        assert [m[tags["role_tag"]] for m in row["messages"]] == [tags["user_tag"]]
        assert row["chosen"] == {"role": tags["assistant_tag"], "content": source[row["id"]]["chosen"][-1]["content"]}
        assert row["rejected"] == {"role": tags["assistant_tag"],
                                   "content": source[row["id"]]["rejected"][-1]["content"]}
    cfg = (tmp_path / "lf" / "config.yaml").read_text()
    assert "stage: dpo" in cfg and "disable_shuffling: true" in cfg


def test_export_axolotl_of_preference_pairs_writes_its_dpo_chat_template_dataset(preference_shards, tmp_path):
    """axolotl was refused preference pairs (no place for the rejected answer in its SFT chat layout); its DPO
    `chat_template.default` reads `messages` (the prompt turns) and `chosen` / `rejected` (one assistant turn
    each), in the planned order, with the settings that keep it."""
    for form, shards in preference_shards.items():
        summary = export(shards, "axolotl", tmp_path / form)
        source = {r["id"]: r for r in read_shards(shards).to_pylist()}
        pairs = axolotl_pairs(tmp_path / form)
        for i, (prompt, good, bad) in pairs.items():
            src = source[i]
            question = src["prompt"] if form == "standard" else src["chosen"][0]["content"]
            assert prompt == [{"role": "user", "content": question}]
            assert (good, bad) == ((src["chosen"], src["rejected"]) if form == "standard" else
                                   (src["chosen"][-1]["content"], src["rejected"][-1]["content"]))
        ids = np.array(list(pairs))
        assert [ids.reshape(-1, M)[r::N].reshape(-1).tolist() for r in range(N)] == [_ids(shards, 0), _ids(shards, 1)]
        assert summary["loss_weights_applied"].value is False
        assert f"micro_batch_size: {M}\n" in (tmp_path / form / "config.yaml").read_text()
        readme = (tmp_path / form / "README.md").read_text()
        assert "rl: dpo" in readme and "PlanDPOTrainer" in readme and "`weight` is not applied" in readme


def test_axolotl_trainer_cls_is_its_dpo_trainer_in_the_planned_order(monkeypatch):
    """The `trainer_cls` the DPO config names, resolved as axolotl resolves it (import the module, getattr the
    class): axolotl's DPO trainer under PlanTrainerMixin, whose sampler is the plan's (axolotl's own samples at
    random). axolotl is not installed here (it pins other transformers and TRL versions): its AxolotlDPOTrainer, a
    TRL DPOTrainer, stands in as TRL's; without it the name says which package is missing."""
    import importlib.util
    import sys
    import types

    import trl

    from cluster_curate.integrations.hf import PlannedOrderSampler, PlanTrainerMixin
    from cluster_curate.layouts import AXOLOTL_TRAINER
    module_name, class_name = AXOLOTL_TRAINER.rsplit(".", 1)
    module = importlib.import_module(module_name)  # imports where axolotl is not installed
    with pytest.raises(AttributeError):
        module.PlanTrainer
    if importlib.util.find_spec("axolotl") is None:
        with pytest.raises(ModuleNotFoundError, match="axolotl"):
            getattr(module, class_name)
        for name in ("axolotl", "axolotl.core", "axolotl.core.trainers", "axolotl.core.trainers.dpo"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        monkeypatch.setitem(sys.modules, "axolotl.core.trainers.dpo.trainer",
                            types.SimpleNamespace(AxolotlDPOTrainer=trl.DPOTrainer))
    base = importlib.import_module("axolotl.core.trainers.dpo.trainer").AxolotlDPOTrainer
    try:
        trainer = getattr(module, class_name)
        assert trainer.__mro__[1:3] == (PlanTrainerMixin, base) and getattr(module, class_name) is trainer
        assert f"{trainer.__module__}.{trainer.__name__}" == AXOLOTL_TRAINER
        assert trainer._get_train_sampler is PlanTrainerMixin._get_train_sampler
        assert isinstance(trainer._get_train_sampler(types.SimpleNamespace(), list(range(6))), PlannedOrderSampler)
    finally:
        vars(module).pop(class_name, None)  # built on the stand-in: not kept for later tests


def _axolotl_names(monkeypatch):
    """axolotl's stand-ins installed where it is missing; our module with nothing built on them kept after."""
    import sys

    from axolotl_stand_ins import install
    install(lambda name, module: monkeypatch.setitem(sys.modules, name, module))
    module = importlib.import_module("cluster_curate.integrations.axolotl")
    for name in ("ConsumedIdsPlugin", "PlanSFTTrainer"):
        monkeypatch.delitem(vars(module), name, raising=False)  # built on the stand-ins: not kept for later tests
    return module


def test_axolotl_plugin_resolves_as_axolotl_loads_it_and_adds_the_consumed_ids_callback(shards, tmp_path,
                                                                                      monkeypatch):
    """The `plugins:` item of both configs, loaded as axolotl's plugin manager loads one (import the module,
    getattr the class, instantiate it): an axolotl BasePlugin whose add_callbacks_pre_trainer hook gives the
    trainer a ConsumedIdsCallback writing under axolotl's output_dir, where the README sends `verify --log`."""
    import types

    from axolotl_stand_ins import load_plugin
    from cluster_curate.integrations.hf import ConsumedIdsCallback
    yaml = pytest.importorskip("yaml")
    export(shards["chat"], "axolotl", tmp_path / "ax")
    (name,) = yaml.safe_load((tmp_path / "ax" / "config.yaml").read_text())["plugins"]
    module = _axolotl_names(monkeypatch)
    plugin = load_plugin(name)
    assert type(plugin).__mro__[1] is importlib.import_module("axolotl.integrations.base").BasePlugin
    assert f"{type(plugin).__module__}.{type(plugin).__name__}" == name
    (callback,) = plugin.add_callbacks_pre_trainer(types.SimpleNamespace(output_dir=str(tmp_path / "model-out")),
                                                   model=None)
    assert isinstance(callback, ConsumedIdsCallback)
    assert Path(callback.log_dir) == module.consumed_log_dir(tmp_path / "model-out")
    assert module.consumed_log_dir(tmp_path / "model-out") == tmp_path / "model-out" / "consumed"


def test_axolotl_sft_names_resolve_and_keep_each_rows_id_through_its_tokenization(shards, tmp_path, monkeypatch):
    """The SFT config's `trainer_cls`, resolved as axolotl resolves it: its AxolotlTrainer under PlanTrainerMixin.
    Its dataset `type`, resolved as axolotl resolves a dotted type (the module's `load`): axolotl's chat_template
    strategy, whose tokenized rows hold the row's `id` (axolotl's tokenization removes every column of the file),
    in file order, the tokens the strategy's own."""
    import types

    from axolotl_stand_ins import get_cls_from_module_str, load_strategy, tokenize_dataset
    from cluster_curate.integrations.hf import PlannedOrderSampler, PlanTrainerMixin
    from tiny_lm import build_tokenizer
    datasets = pytest.importorskip("datasets")
    yaml = pytest.importorskip("yaml")
    export(shards["chat"], "axolotl", tmp_path / "ax")
    cfg = yaml.safe_load((tmp_path / "ax" / "config.yaml").read_text())
    _axolotl_names(monkeypatch)
    trainer = get_cls_from_module_str(cfg["trainer_cls"])
    base = importlib.import_module("axolotl.core.trainers.base").AxolotlTrainer
    assert trainer.__mro__[1:3] == (PlanTrainerMixin, base)
    assert isinstance(trainer._get_train_sampler(types.SimpleNamespace(), list(range(6))), PlannedOrderSampler)

    (entry,) = cfg["datasets"]
    tok = build_tokenizer()
    strategy = load_strategy(entry["type"], tok, cfg, entry)
    own = importlib.import_module("axolotl.prompt_strategies.chat_template").load(tok, cfg, ds_cfg=entry)
    rows = datasets.Dataset.from_parquet(entry["path"])
    tokenized = tokenize_dataset(strategy, rows)
    assert tokenized["id"] == rows["id"] and set(tokenized.column_names) == {"input_ids", "attention_mask", "labels",
                                                                              "id"}
    assert tokenized.remove_columns("id").to_list() == tokenize_dataset(own, rows).to_list()
    one = rows[0]  # a row alone (axolotl's unbatched path)
    assert strategy.tokenize_prompt({k: [v] for k, v in one.items()})["id"] == [one["id"]]
    assert strategy.supports_batched is own.supports_batched


def test_export_keeps_every_column_of_preference_pairs_for_hf(preference_shards, tmp_path):
    export(preference_shards["standard"], "hf", tmp_path / "hf")  # the shards' columns, rejected among them
    assert {"prompt", "chosen", "rejected"} <= set(pq.read_table(tmp_path / "hf" / "train.parquet").column_names)


# ------------------------------------------------------------------------------- source columns given back

def _run_and_export(cli_runner, tmp_path, *data, fraction="0.55"):
    """`run` at small size (text features, 16 dims; 0.55 leaves selected rows over for export to read back),
    then `export --for jsonl` and `--for parquet`: (the manifest, the jsonl records, the parquet records)."""
    from cluster_curate.cli import main
    out = tmp_path / "cur"
    for args in (["run", *map(str, data), "--out", str(out), "--fraction", fraction, "--num-shards", "2",
                  "--micro-batch-size", "2", "--features", "text", "--dim", "16", "-q"],
                 ["export", str(out / "shards"), "--for", "jsonl", "--out", str(tmp_path / "ej"), "-q"],
                 ["export", str(out / "shards"), "--for", "parquet", "--out", str(tmp_path / "ep"), "-q"]):
        res = cli_runner.invoke(main, args)
        assert res.exit_code == 0, res.output
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    lines = [json.loads(line) for line in (tmp_path / "ej" / "selected.jsonl").read_text().splitlines()]
    return manifest, lines, pq.read_table(tmp_path / "ep" / "selected.parquet").to_pylist()


def _gsm_rows(n, extra):
    lines = (FIXTURES / "gsm8k" / "train-300.jsonl").read_text().splitlines()[:n]
    return [{**extra(k), **json.loads(line)} for k, line in enumerate(lines)]


def test_export_gives_back_a_source_id_and_source_id_column_under_their_names(tmp_path, cli_runner):
    """Data with both `id` and `source_id` came back as `{"_source_id": <its id>, "id": <its source_id>}`, and the
    manifest recorded no rename. Each column is back under its name, in its place, left-over rows too."""
    rows = _gsm_rows(120, lambda k: {"id": f"q-{k}", "source_id": f"gsm8k/{k}"})
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest, lines, table = _run_and_export(cli_runner, tmp_path, tmp_path / "d.jsonl")
    assert manifest["renamed_source_columns"] == {"id": "source_id", "source_id": "_source_id"}
    assert manifest["leftover_ids"]  # read back from the data, not the shards
    by_id = {r["id"]: r for r in rows}
    assert len(lines) == manifest["selected_rows"] and all(
        list(r.items()) == list(by_id[r["id"]].items()) for r in lines)
    assert table == lines


def test_shard_columns_beside_their_source_names_are_all_kept(tmp_path, cli_runner):
    """A column `weight` beside `source_weight` was an INTERNAL ERROR after three stages (both renamed
    `source_weight`). The shards hold both under names no other column has, and export gives them back."""
    rows = _gsm_rows(120, lambda k: {"weight": 1.0 + k, "source_weight": 0.5 * k, "_source_weight": "w"})
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest, lines, table = _run_and_export(cli_runner, tmp_path, tmp_path / "d.jsonl")
    assert manifest["renamed_source_columns"] == {"weight": "source_weight", "source_weight": "_source_weight",
                                                  "_source_weight": "__source_weight"}
    by_question = {r["question"]: r for r in rows}
    assert len(lines) == manifest["selected_rows"] and all(
        list(r.items()) == list(by_question[r["question"]].items()) for r in lines)
    assert table == lines


def test_a_mixture_exports_each_row_with_its_own_inputs_columns(tmp_path, cli_runner):
    """A mixture's `export --for jsonl` wrote every row with every input's columns and the mixture's normalised
    `prompt` / `response` / `messages` / `system`, an input's own `prompt` under `source_prompt`. Each row now has
    its `source`, `source_row` and its own input's columns under their own names (an input's own `source` stays
    `source_source`, beside the mixture's)."""
    math = _gsm_rows(60, lambda k: {"source": f"s{k}"})
    code = [dict(json.loads(line), source_prompt=f"sp{k}") for k, line in enumerate(
        (FIXTURES / "code_alpaca" / "prompt-completion-300.jsonl").read_text().splitlines()[:60])]
    for name, rows in (("math", math), ("pc", code)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest, lines, table = _run_and_export(cli_runner, tmp_path, tmp_path / "math.jsonl", tmp_path / "pc.jsonl")
    assert manifest["leftover_ids"]
    selected = sorted(manifest["leftover_ids"] + [i for f in sorted((tmp_path / "cur" / "shards").glob("shard-*"))
                                                  for i in _ids(tmp_path / "cur" / "shards", int(f.name[6:11]))])
    originals = [{"source": "math", "source_row": k, **{"source_source" if c == "source" else c: v
                                                         for c, v in r.items()}} for k, r in enumerate(math)]
    originals += [{"source": "pc", "source_row": k, **r} for k, r in enumerate(code)]
    assert lines == [originals[i] for i in sorted(set(selected))]
    assert [list(r) for r in lines[-1:]] == [["source", "source_row", "prompt", "completion", "source_prompt"]]
    # Parquet: one table, a row null in the other input's columns; the file says whose rows hold which
    assert [{k: v for k, v in r.items() if v is not None} for r in table] == lines
    runs = json.loads(pq.read_schema(tmp_path / "ep" / "selected.parquet").metadata[b"input_columns"])
    assert [(r["source"], r["columns"]) for r in runs] == [
        ("math", ["source", "source_row", "source_source", "question", "answer"]),
        ("pc", ["source", "source_row", "prompt", "completion", "source_prompt"])]
