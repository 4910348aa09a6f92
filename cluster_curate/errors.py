"""The one exception type users see: a one-line message, exit code 2, never a traceback."""


class CurateError(Exception):
    """Bad input or usage. The message names the file, line/row and field when there is one."""

    exit_code = 2


def counted(n, noun: str, plural: str | None = None) -> str:
    """`1 row`, `2 rows`, `1,234 rows`: a count with its noun in the number it takes, as messages and summaries
    word it (`plural` when adding an s is wrong: counted(n, "batch", "batches")). Here, beside the error type,
    so that the pure stages word their messages without the console."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def not_a_share(flag: str, value: float) -> CurateError:
    """The error of a share option (`--fraction`, ...) outside (0, 1]; a whole number up to 100 (`--fraction 31`)
    was meant as a percentage, which the message writes as the share."""
    hint = f" ({value:g} reads as a percentage: write {value / 100:g})" if value in range(2, 101) else ""
    return CurateError(f"{flag} must be in (0, 1], got {value}{hint}")
