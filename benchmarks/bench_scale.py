"""Every stage at the scale users have: wall time and peak RSS of each command, on ~200k rows of instruction data,
and the count that every row of the data is accounted for.

Data (built under --work, never in the repository): GSM8K train and the Code Alpaca sample as Alpaca rows,
repeated to --rows with deterministic perturbations (numbers shifted, names and a few words swapped: near
duplicates, not copies), about 3% exact copies of earlier rows; the empty responses of Code Alpaca stay, so
the commands run with --on-bad-row skip. Commands as a user types them, default options otherwise: inspect,
embed, cluster, select --fraction 0.3, shard --num-shards 8, report, and the whole job (`run`). Each is a fresh
process; its peak RSS is GNU time's (/usr/bin/time). With --baseline (another checkout's root) the same commands
run on it, stage by stage next to this checkout's, and the outputs are compared (shard ids, selection ids). With
--profile each of this checkout's commands runs once more under cProfile (into another folder; its times are not
the table's) and the table names the three functions with the most time of their own (`run`: those of its stages).
With --baseline and --repeats N, the --stages then run N times more by each checkout in turn (A B A B), and a
second table gives their medians of CPU (user + system) and wall seconds, peak RSS and the pairs' median ratios.

    python benchmarks/bench_scale.py --rows 200000 --baseline /tmp/base-checkout
    python benchmarks/bench_scale.py --rows 100000 --profile --name scale_100k
    python benchmarks/bench_scale.py --rows 20000 --baseline /tmp/base-checkout --repeats 5 --stages embed,shard
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import DATA, ROOT, parser, relative, tool_cmd, write_results

NAMES = ["Alice", "Bob", "Carmen", "Deepak", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemi", "Luis"]
SWAPS = [("many", "much"), ("each", "every"), ("total", "overall"), ("buys", "purchases"), ("write", "create"),
         ("function", "routine"), ("list", "array"), ("find", "compute"), ("given", "provided")]


def _perturb(text: str, k: int) -> str:
    text = re.sub(r"\d+", lambda m: str(int(m.group()) + k) if len(m.group()) < 9 else m.group(), text)
    text = re.sub(r"\b[A-Z][a-z]{2,}\b(?= (?:has|had|is|was|buys|bought|wants|makes|sells|earns))",
                  NAMES[k % len(NAMES)], text)
    for a, b in SWAPS[k % len(SWAPS):][:3]:
        text = re.sub(rf"\b{a}\b", b, text)
    return text


def make_data(path: Path, rows: int) -> None:
    base = [{"instruction": r["question"], "input": "", "output": r["answer"]}
            for r in map(json.loads, (DATA / "gsm8k" / "train.jsonl").read_text().splitlines())]
    base += [{"instruction": r["instruction"], "input": r.get("input", ""), "output": r["output"]}
             for r in json.loads((DATA / "code_alpaca" / "code_alpaca_2k.json").read_text())]
    rng, out = random.Random(1234), []
    for i in range(rows):
        rep, j = divmod(i, len(base))
        if rep == 0:
            out.append(base[j])
        elif rng.random() < 0.03:
            out.append(out[rng.randrange(len(out))])  # an exact copy of an earlier row
        else:
            out.append({k: _perturb(v, rep) for k, v in base[j].items()})
    path.write_text("".join(json.dumps(r) + "\n" for r in out))


def timed(tree: Path, args: list[str], profile: Path | None = None) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds: user + system) of one command in a fresh process, run by the
    checkout `tree` (under cProfile, its statistics written to `profile`, when given). The peak and the CPU are
    GNU time's: a child of this (large) process would count this process's pages in its own peak."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    tool = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "cluster_curate"] if profile else tool_cmd()
    with tempfile.NamedTemporaryFile("r") as peak, tempfile.TemporaryFile() as err:  # a file: a full pipe blocks
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", peak.name, *tool, *args, "-q"], env=env,
                              stdout=subprocess.DEVNULL, stderr=err)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
        kib, user, system = peak.read().split()[-3:]
        return seconds, int(kib) / 1024, float(user) + float(system)


def commands(data: Path, out: Path) -> dict[str, list]:
    """Each stage's command line, writing under `out`."""
    e, c, s = out / "embeddings.parquet", out / "clusters.parquet", out / "selection.parquet"
    skip = ["--on-bad-row", "skip"]
    return {"inspect": ["inspect", data, *skip],
                "embed": ["embed", data, "--out", e, *skip],
                "cluster": ["cluster", e, "--out", c],
                "select": ["select", c, "--out", s, "--fraction", "0.3"],
                "shard": ["shard", s, "--data", data, "--out", out / "shards", "--num-shards", "8"],
                "report": ["report", out, "--out", out / "report"],
                # the whole job as a user types it, in its own folder (its four stages again, in one process)
                "run": ["run", data, "--out", out / "run", "--fraction", "0.3", "--num-shards", "8", *skip]}


# what each stage writes in its folder (`commands`): removed before a stage runs again
OUTPUTS = {"embed": "embeddings.*", "cluster": "clusters.*", "select": "selection.*",
           "shard": "shards", "report": "report", "run": "run"}


def stages(tree: Path, data: Path, out: Path, profiles: Path | None = None) -> dict[str, tuple]:
    """Each command's (wall seconds, peak MiB, CPU seconds), writing under `out`; with `profiles`, each under
    cProfile, its statistics written there as STAGE.prof."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    lines = commands(data, out)
    if profiles:  # the stages; `run` is them again
        lines.pop("run")
    return {name: timed(tree, [str(a) for a in args], profiles and profiles / f"{name}.prof")
            for name, args in lines.items()}


def paired(trees: dict[str, Path], data: Path, work: Path, names: list[str], repeats: int) -> dict:
    """`repeats` runs of each named stage by each checkout in turn (A B A B: a drift of the machine's speed
    falls on both), each checkout in its folder of the first run (its inputs there), the stage's own output
    removed first (embed's text basis too: it is fitted each run). {stage: {checkout: [(wall, peak, cpu)]}}."""
    found: dict = {name: {tree: [] for tree in trees} for name in names}
    for _ in range(repeats):
        for name in names:
            for i, (tree, root) in enumerate(reversed(trees.items())):
                out = work / f"run-{i}"
                for made in out.glob(OUTPUTS[name]) if name in OUTPUTS else ():
                    shutil.rmtree(made) if made.is_dir() else made.unlink()
                found[name][tree].append(timed(root, [str(a) for a in commands(data, out)[name]]))
    return found


def paired_table(found: dict) -> list[str]:
    """Medians of the paired runs, and the median of the pairs' ratios (this checkout / baseline)."""
    from statistics import median
    lines = ["| stage | runs | this checkout CPU s | baseline CPU s | CPU ratio | this checkout wall s | "
             "baseline wall s | wall ratio | peak MiB (this / baseline) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, runs in found.items():
        here, base = runs["this checkout"], runs["baseline"]

        def mid(rows, at):
            return median(r[at] for r in rows)

        def ratio(at):
            return median(a[at] / b[at] for a, b in zip(here, base))
        lines.append(f"| {name} | {len(here)} | {mid(here, 2):.2f} | {mid(base, 2):.2f} | {ratio(2):.3f}x | "
                     f"{mid(here, 0):.2f} | {mid(base, 0):.2f} | {ratio(0):.3f}x | {mid(here, 1):.0f} / "
                     f"{mid(base, 1):.0f} |")
    return lines


def hotspots(profile: Path, top: int = 3) -> list[str]:
    """The `top` functions with the most time of their own in a cProfile file, as "module:function s"."""
    import pstats
    found = sorted(pstats.Stats(str(profile)).stats.items(), key=lambda kv: -kv[1][2])[:top]

    def where(file: str, name: str) -> str:  # "~": a built-in, named "<built-in method x>" or "<method ...>"
        if file == "~":
            return name.strip("<>").removeprefix("built-in method ")
        if file.startswith("<"):  # "<frozen importlib._bootstrap>" (a first import), "<string>" (code run as text)
            return f"{file.strip('<>')}:{name}"
        path = relative(file).removeprefix("cluster_curate/")  # outside the repository: package/module.py
        return f"{'/'.join(Path(path).parts[-2:]) if path.startswith(('/', '../')) else path}:{name}"
    return [f"{where(file, name)} {own:.1f} s" for (file, _, name), (_, _, own, *_) in found]


def accounting(out: Path) -> dict:
    """Rows of the data = embedded + bad rows + exact copies left out; selected = in shards + left over."""
    import pyarrow.parquet as pq

    from cluster_curate.io.artifacts import read_meta
    meta = read_meta(out / "embeddings.parquet")
    manifest = json.loads((out / "shards" / "manifest.json").read_text())
    rejects = out / "embeddings.rejects.jsonl"
    bad = sum(1 for _ in rejects.open()) if rejects.exists() else 0
    ids = hashlib.sha256()
    in_shards = 0
    for f in sorted((out / "shards").glob("shard-*.parquet")):
        column = pq.read_table(f, columns=["id"])["id"].to_numpy()
        in_shards += column.size
        ids.update(column.tobytes())
    selection = pq.read_table(out / "selection.parquet", columns=["id"])["id"].to_numpy()
    return {"rows_in_data": meta.dataset["rows"], "embedded": meta.rows, "bad_rows": bad,
            "exact_copies": manifest["exact_duplicates"]["dropped"], "selected": int(selection.size),
            "in_shards": in_shards, "left_over": manifest["leftover_rows"],
            "shard_ids_sha256": ids.hexdigest()[:16],
            "selection_ids_sha256": hashlib.sha256(selection.tobytes()).hexdigest()[:16]}


def main(argv=None) -> None:
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/cluster-curate-bench-scale"))
    ap.add_argument("--baseline", type=Path, help="another checkout's root, run stage by stage next to this one")
    ap.add_argument("--name", default="scale")
    ap.add_argument("--profile", action="store_true", help="run this checkout's commands once more under cProfile")
    ap.add_argument("--repeats", type=int, default=0,
                    help="with --baseline: then run --stages this many times more, the two checkouts in turn")
    ap.add_argument("--stages", default="embed,shard", help="the stages --repeats runs (comma-separated)")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / f"instructions-{args.rows}.jsonl"
    if not data.exists():
        make_data(data, args.rows)
    trees = {"this checkout": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    runs, books = {}, {}
    for i, (name, tree) in enumerate(reversed(trees.items())):
        out = args.work / f"run-{i}"
        runs[name] = stages(tree, data, out)
        books[name] = accounting(out)
    here = runs["this checkout"]
    found = {}
    if args.profile:
        profiles = args.work / "profiles"
        profiles.mkdir(exist_ok=True)
        stages(ROOT, data, args.work / "run-profiled", profiles)
        found = {stage: hotspots(profiles / f"{stage}.prof") for stage in here if stage != "run"}
    lines = [f"# every stage at {args.rows:,} rows", "",
             f"`{data.name}`: GSM8K + Code Alpaca, perturbed near duplicates and ~3% exact copies; default options, "
             "--on-bad-row skip; one fresh process per command, run once (a shared 2-core machine: single runs, "
             "compare within a row).", ""]
    head = "| stage | " + " | ".join(f"{n} s | {n} peak MiB" for n in runs) + " |" + \
        (" baseline / this checkout, time |" if args.baseline else "") + (" top 3 by own time |" if found else "")
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for stage in here:
        cells = " | ".join(f"{runs[n][stage][0]:.1f} | {runs[n][stage][1]:.0f}" for n in runs)
        ratio = f" {runs['baseline'][stage][0] / here[stage][0]:.2f}x |" if args.baseline else ""
        spots = f" {'; '.join(found.get(stage, ['(the stages above)']))} |" if found else ""
        lines.append(f"| {stage} | {cells} |{ratio}{spots}")
    b = books["this checkout"]

    def holds(ok: bool) -> str:
        return "holds" if ok else "DOES NOT hold"

    lines += ["", f"Accounted for: {b['rows_in_data']:,} rows = {b['embedded']:,} embedded + {b['bad_rows']} bad rows "
              f"+ {b['exact_copies']:,} exact copies left out "
              f"({holds(b['embedded'] + b['bad_rows'] + b['exact_copies'] == b['rows_in_data'])}); "
              f"{b['selected']:,} selected = {b['in_shards']:,} in shards + {b['left_over']} left over "
              f"({holds(b['in_shards'] + b['left_over'] == b['selected'])})."]
    if args.baseline:
        same = all(books["baseline"][k] == b[k] for k in ("shard_ids_sha256", "selection_ids_sha256"))
        lines.append(f"Shard and selection ids the same as the baseline's: {same}.")
    found_pairs = {}
    if args.baseline and args.repeats:
        found_pairs = paired(trees, data, args.work, args.stages.split(","), args.repeats)
        lines += ["", f"Paired runs: each stage again {args.repeats} times by each checkout in turn (A B A B), in "
                  "its folder above, its own output removed first (embed fits its text basis each run); medians, "
                  "and the median of the pairs' ratios (this checkout / baseline). CPU = user + system seconds, "
                  "peak = GNU time's.", "", *paired_table(found_pairs)]
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    lines += ["", f"Load average at the end: {load}."]
    payload = {"rows": args.rows,
               "stages": {n: {s: {"seconds": round(t, 2), "peak_mib": round(m), "cpu_seconds": round(c, 2)}
                              for s, (t, m, c) in r.items()} for n, r in runs.items()},
               "accounting": books, "hotspots": found,
               "paired": {s: {n: [{"seconds": round(t, 2), "peak_mib": round(m), "cpu_seconds": round(c, 2)}
                                  for t, m, c in rows] for n, rows in by.items()} for s, by in found_pairs.items()}}
    write_results(args.name, lines, payload, argv)


if __name__ == "__main__":
    sys.exit(main())
