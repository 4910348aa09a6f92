"""The one exception type users see: a one-line message, exit code 2, never a traceback."""


class CurateError(Exception):
    """Bad input or usage. The message names the file, line/row and field when there is one."""

    exit_code = 2
