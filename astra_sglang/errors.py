"""One exception type for user-facing failures: the CLI prints its message on one line, never a traceback."""


class AstraError(Exception):
    """A failure the user can act on (bad op name, missing tool, malformed file). The message says what to do."""
