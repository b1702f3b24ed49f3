"""What the command lines (train.py, eval.py, export.py) do first, said once."""

from absl import app, flags, logging

from nets_training.errors import UserError


def start(argv: list[str]) -> None:
    """Refuses positional arguments, and keeps orbax's info-level logs (a line per checkpoint
    read or written) out of the output unless `--verbosity` asks for them."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)


def check_source(workdir: str | None, weights: str | None, model: str | None) -> None:
    """eval.py's and export.py's network: a training run (`--workdir`) or published weights
    (`--weights` with `--model`), one of the two."""
    if bool(workdir) == bool(weights):
        raise UserError("give --workdir (a training run) or --weights with --model, not both")
    if weights and not model:
        raise UserError("--weights needs --model (the network the weights are for)")
