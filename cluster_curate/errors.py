"""The one exception type users see: a one-line message, exit code 2, never a traceback."""


class CurateError(Exception):
    """Bad input or usage. The message names the file, line/row and field when there is one."""

    exit_code = 2


def counted(n, noun: str, plural: str | None = None) -> str:
    """`1 row`, `2 rows`, `1,234 rows`: a count with its noun in the number it takes, as messages and summaries
    word it (`plural` when adding an s is wrong: counted(n, "batch", "batches")). Here, beside the error type,
    so that the pure stages word their messages without the console."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
