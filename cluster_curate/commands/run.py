"""`run DATA --out DIR`: the four stages with their artifacts kept in DIR, each skipped while up to date."""

from __future__ import annotations

import time
from pathlib import Path

from cluster_curate.errors import CurateError
from cluster_curate.io import names
from cluster_curate.options import Argument, CommandSpec, Option, read_options, resolve, run_options

OWN_OPTIONS = (
    Option("out", flags=("--out", "-o"), required=True, help="Directory for the artifacts of every stage."),
    Option("overwrite", is_flag=True, default=False, help="Redo every stage even when up to date."),
    Option("force", is_flag=True, default=False, help="Passed to every stage (use mismatched inputs anyway)."),
)


def stage_specs() -> dict:
    from cluster_curate.commands import spec
    return {stage: spec(stage) for stage in names.STAGES}


def stage_options() -> tuple[list[Option], dict[str, list[str]]]:
    """The options `run` takes (each once, from the first stage that declares it) and each stage's names."""
    options, seen, by_stage = [], set(), {}
    for stage, spec in stage_specs().items():
        by_stage[stage] = [o.name for o in run_options(spec)]
        for o in run_options(spec):
            if o.name not in seen:
                seen.add(o.name)
                options.append(o)
    return options, by_stage


def output_fingerprint(stage: str, path) -> str | None:
    """Fingerprint of a stage's finished output, or None when it is missing or incomplete."""
    from cluster_curate.io.artifacts import read_meta
    from cluster_curate.loader import read_manifest
    p = Path(path)
    try:
        if stage == "shard":
            return read_manifest(p).get("fingerprint") if p.is_dir() else None
        return read_meta(p).fingerprint if p.exists() else None
    except CurateError:
        return None


class RunState:
    """What `run` did last time in DIR: per stage, its algorithm version, a hash of its options, its input's
    fingerprint and its output's fingerprint. A stage is up to date while all four still match, so a re-run
    (or a run after a crash, or after an upgrade) redoes only the stages whose algorithm, options, input or
    output changed, and `stale` says which."""

    def __init__(self, directory):
        import json
        self.path = Path(directory) / names.RUN_STATE
        self.stages = json.loads(self.path.read_text()) if self.path.is_file() else {}

    @staticmethod
    def request(stage: str, options: dict, input_fingerprint: str | None, algorithm: int) -> dict:
        from cluster_curate.io.artifacts import stable_hash
        return {"algorithm": algorithm, "options": stable_hash({"stage": stage, "options": options}),
                "input": input_fingerprint}

    def stale(self, stage: str, request: dict, output) -> str | None:
        """Why `stage` must run again (None: it is up to date)."""
        rec = self.stages.get(stage)
        if rec is None:
            return "not run before"
        if "algorithm" not in rec:
            return "recorded by an earlier version of cluster-curate"
        if rec["algorithm"] != request["algorithm"]:
            return f"its algorithm changed (version {rec['algorithm']} -> {request['algorithm']})"
        if rec["options"] != request["options"]:
            return "its options changed"
        if rec["input"] != request["input"]:
            return "its input changed"
        if rec["fingerprint"] != output_fingerprint(stage, output):
            return "its output is missing or was changed"
        return None

    def record(self, stage: str, request: dict, output) -> None:
        from cluster_curate.io.writer import write_json
        self.stages[stage] = dict(request, fingerprint=output_fingerprint(stage, output))
        write_json(self.path, self.stages, indent=1, sort_keys=True, newline=False)


def _stage_extra(spec) -> dict:
    return {k: v() for k, v in spec.extra.items()}


def run(data: str, out: str, *, overwrite: bool = False, force: bool = False, **options) -> dict:
    """The whole pipeline: embed, cluster, select, shard into the directory `out`, each stage skipped while its
    output is up to date with its inputs and options. Returns {"out", "stages", "summaries", "tables"}."""
    from cluster_curate import console
    from cluster_curate.io.datasets import open_dataset

    declared, by_stage = stage_options()
    opts = resolve(declared, options, "run")
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    state = RunState(d)
    paths = {stage: d / name for stage, name in names.RUN_OUTPUTS.items()}
    upstream = open_dataset(data, read_options(opts)).fingerprint()  # the raw data's, then each output's
    inputs = {"embed": (data,), "cluster": (str(paths["embed"]),), "select": (str(paths["cluster"]),),
              "shard": (str(paths["select"]), data)}
    done, summaries, tables = [], {}, {}
    for stage, spec in stage_specs().items():
        stage_opts = {name: opts[name] for name in by_stage[stage]}
        request = state.request(stage, stage_opts, upstream, spec.algorithm())
        output = paths[stage]
        t0 = time.monotonic()
        why = "--overwrite" if overwrite else state.stale(stage, request, output)
        if why is None:
            done.append({"stage": stage, "status": "up to date", "seconds": 0.0, "output": str(output)})
        else:
            console.info(f"run: {stage}: {why}")
            extra = {"resume": True} if stage == "embed" else {}
            result = spec.function(*inputs[stage], out=str(output), overwrite=True, force=force, **stage_opts,
                                   **extra, **_stage_extra(spec))
            with console.capture() as captured:
                spec.render(result, dict(stage_opts, out=str(output)))
            for title, data_, rows in captured:
                summaries[title], tables[title] = data_, rows
            state.record(stage, request, output)
            done.append({"stage": stage, "status": "ran", "seconds": round(time.monotonic() - t0, 2),
                         "output": str(output), "reason": why})
        upstream = output_fingerprint(stage, output)
    return {"out": str(d), "stages": done, "summaries": summaries, "tables": tables}


def render(result: dict, options: dict) -> None:
    from cluster_curate import console
    if console.JSON_MODE:
        console.summary("run", {k: result[k] for k in ("out", "stages", "summaries")})
        return
    for title, data_ in result["summaries"].items():
        console.summary(title, data_, result["tables"][title])
    console.summary("run", {"out": result["out"]}
                    | {s["stage"]: f"{s['status']} ({s['seconds']} s)" + (f": {s['reason']}" if "reason" in s else "")
                       for s in result["stages"]})


SPEC = CommandSpec(
    "run", run, (Argument("data"),), OWN_OPTIONS + tuple(stage_options()[0]), render,
    short_help="The whole pipeline in one command, resumable.",
    help="""The whole pipeline in one command: embed, cluster, select, shard, with artifacts kept in OUT.

    \b
    OUT/embeddings.parquet  OUT/clusters.parquet  OUT/selection.parquet  OUT/shards/
    Re-running skips every stage whose output is up to date with its inputs and options (recorded in
    OUT/run-state.json); after an interruption it continues where it stopped (embed resumes its committed
    chunks). Options are those of the four subcommands; --seed seeds them all.

    \b
    Example:
      cluster-curate run train.jsonl --out curated/ --fraction 0.31 --num-shards 8 --micro-batch-size 4
    """)
