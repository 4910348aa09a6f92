"""cluster-curate: learning-effect clustering, balanced selection and data-parallel allocation.

The Python API (the CLI is a thin layer over it; options are the CLI's, spelled as keywords, their values checked
and converted by the CLI's types: fraction="0.3" or np.float64(0.3) is 0.3, k=10.5 is refused):

    import cluster_curate as cc
    cc.run("train.jsonl", "curated/", fraction=0.31, num_shards=8, micro_batch_size=4)
    cc.embed("train.jsonl", "emb.parquet")                 # -> summary dict
    cc.cluster("emb.parquet", "clusters.parquet", k=64)    # -> (summary, size table)
    cc.select("clusters.parquet", "sel.parquet", fraction=0.31)
    cc.shard("sel.parquet", "train.jsonl", "shards/", num_shards=8)   # -> manifest
    cc.inspect("train.jsonl"); cc.report("curated/")            # one path or a list
    cc.export("shards/", trainer="hf", out="export-hf/")        # the plan in the layout a trainer deals
    cc.verify("shards/", log="consumed/")                       # -> {"ok": ..., "problems": [...], ...}

A summary's composite figures are `console.Shown(value, text, label)` (the table's form beside the value);
`cluster_curate.console.machine(summary)` gives the plain values, as `--json` prints them (README, "JSON output").

Importing the package stays light (a trainer imports cluster_curate.loader): the functions load on first use.
"""

__version__ = "0.1.0"

_API = {"inspect": "inspect", "embed": "embed", "cluster": "cluster", "select": "select", "shard": "shard",
        "run": "run", "report": "report", "export": "export", "verify": "verify"}
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        import functools
        import importlib

        from cluster_curate import console
        function = getattr(importlib.import_module(f"cluster_curate.commands.{name}"), _API[name])

        @functools.wraps(function)
        def command(*args, **kwargs):
            console.begin_command()  # each call is a command: its once-warnings are its own
            return function(*args, **kwargs)
        return command
    raise AttributeError(f"module 'cluster_curate' has no attribute {name!r}")
