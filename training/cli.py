"""What the command lines (train.py, eval.py, export.py) do first, said once."""

from absl import app, flags, logging


def start(argv: list[str]) -> None:
    """Refuses positional arguments, and keeps orbax's info-level logs (a line per checkpoint
    read or written) out of the output unless `--verbosity` asks for them."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
