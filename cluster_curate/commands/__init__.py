"""One module per command (docs/architecture.md, "Commands"). Each declares its options (`OPTIONS`), has a
Python function that reads its inputs through cluster_curate/io, calls the pure stage and writes through
cluster_curate/io/writer.py, and a `SPEC` from which cli.py builds the click command."""

COMMANDS = ("inspect", "embed", "cluster", "select", "shard", "run", "report", "export", "verify")


def spec(name: str):
    """The CommandSpec of a command (imports only that command's module)."""
    import importlib
    return importlib.import_module(f"cluster_curate.commands.{name}").SPEC
