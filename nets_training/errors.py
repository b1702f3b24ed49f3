"""The exceptions that the programs (train.py, eval.py, ...) print as a single line instead of a
traceback."""


class UserError(Exception):
    """Bad input from the user: a config key, a value, a path, a data file.

    Its message is the whole story (what was wrong, where, and what would be valid), so the
    entry point prints it alone and exits non-zero.
    """


class PeerLost(UserError):
    """Another process of a multi-process run ended (killed, preempted, crashed): its collectives
    fail in this one, which cannot go on alone. Every process must be started again to resume."""

    exit_code = 1


class ClassCountError(UserError):
    """The data has more classes, `data_classes`, than the network has logits: a new network can
    take the data's count, a trained one cannot (evaluation says so)."""

    def __init__(self, message: str, data_classes: int):
        super().__init__(message)
        self.data_classes = data_classes


class OutOfMemory(UserError):
    """The device could not hold what was asked of it; the message says which settings need less
    (`out_of_memory.explain_evaluation`). Not a mistake in the input: exit status 1."""

    exit_code = 1
