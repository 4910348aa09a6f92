"""The one exception type users see: a one-line message, exit code 2, never a traceback."""

import os


class CurateError(Exception):
    """Bad input or usage. The message names the file, line/row and field when there is one."""

    exit_code = 2

    def hinted(self, hint: str) -> "CurateError":
        """The error with why the caller did what failed added (`... (--kinds auto reads the rows' prompts ...)`):
        one line as before, of the plain type (a subclass keeps what it carries, DataChanged)."""
        return CurateError(f"{self} ({hint})")


class DataChanged(CurateError):
    """The data at the place an artifact records holds other rows now (artifacts.check_dataset_matches): `run`
    words it as a change made while it ran, which another run mends. `source`: the file that changed (a mixture's:
    its first input that did)."""

    def __init__(self, message: str, source: str):
        super().__init__(message)
        self.source = source

    def hinted(self, hint: str) -> "DataChanged":
        return DataChanged(f"{self} ({hint})", self.source)


def counted(n, noun: str, plural: str | None = None) -> str:
    """`1 row`, `2 rows`, `1,234 rows`: a count with its noun in the number it takes, as messages and summaries
    word it (`plural` when adding an s is wrong: counted(n, "batch", "batches")). Here, beside the error type,
    so that the pure stages word their messages without the console."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def cannot_read(path, e: BaseException, what: str = "it") -> CurateError:
    """An input that cannot be read, one wording for data, artifacts and shards: `PATH: cannot read it (permission
    denied); make it readable (chmod u+r) or run as a user who may read it`; `what` names it (`the shard`). The
    reason is the error's own words without the path it repeats (`[Errno 13] Failed to open local file 'PATH'`)."""
    if isinstance(e, PermissionError):
        mode = "u+rx" if os.path.isdir(path) else "u+r"  # a folder is listed and entered
        return CurateError(f"{path}: cannot read {what} (permission denied); make it readable (chmod {mode}) or run "
                           "as a user who may read it")
    first = (str(e).splitlines() or [""])[0]  # Arrow's errors go on with detail lines
    reason = e.strerror.lower() if isinstance(e, OSError) and e.strerror else first.strip("'\"") or type(e).__name__
    return CurateError(f"{path}: cannot read {what} ({reason})")


def not_a_share(flag: str, value: float) -> CurateError:
    """The error of a share option (`--fraction`, ...) outside (0, 1]; a whole number up to 100 (`--fraction 31`)
    was meant as a percentage, which the message writes as the share."""
    hint = f" ({value:g} reads as a percentage: write {value / 100:g})" if value in range(2, 101) else ""
    return CurateError(f"{flag} must be in (0, 1], got {value}{hint}")
