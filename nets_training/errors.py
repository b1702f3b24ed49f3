"""The exceptions that `train.py` prints as a single line instead of a traceback."""


class UserError(Exception):
    """Bad input from the user: a config key, a value, a path, a data file.

    Its message is the whole story (what was wrong, where, and what would be valid), so the
    entry point prints it alone and exits non-zero.
    """


class PeerLost(UserError):
    """Another process of a multi-process run ended (killed, preempted, crashed): its collectives
    fail in this one, which cannot go on alone. Every process must be started again to resume."""

    exit_code = 1
