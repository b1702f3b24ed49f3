"""What every program does first, said once: its name in messages, quiet logs, the flags it
refuses."""

import logging as python_logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from absl import app, flags, logging

from nets_training import preemption
from nets_training.errors import UserError


def program() -> str:
    """The name the user typed, for one-line errors: `train.py` from a checkout, `nets-train`
    as an installed console script."""
    return Path(sys.argv[0]).name


def run(main: Callable[[list[str]], None], program_module: str) -> None:
    """absl's `app.run(main)`, with `--help` describing the program: absl takes the usage text
    from `__main__` and the flags it lists from the module `sys.argv[0]` names, which are a thin
    script or pip's console-script wrapper rather than the program's module. A Ctrl-C ends it
    within a second or two, in one line (`preemption.exit_promptly`)."""
    module = sys.modules[program_module]
    sys.modules["__main__"].__doc__ = module.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(module.__name__):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    with preemption.exit_promptly(lambda: f"{program()}: SIGINT: stopped"):
        app.run(main)


def fail(message: str, exit_code: int) -> NoReturn:
    """Says `message` on stderr in one line, after the program's name, and ends the process with
    `exit_code`, without the interpreter's teardown (`preemption.exit_now`: the exit handlers of
    libraries would print their own errors about what the failure left behind)."""
    print(f"{program()}: {message}", file=sys.stderr)
    preemption.exit_now(exit_code)


def start(argv: list[str]) -> None:
    """Refuses positional arguments, and keeps info-level logs out of the output unless
    `--verbosity` asks for them: orbax's (a line per checkpoint read or written) and JAX's (the
    backends it could not start, `libtpu.so` on every machine without a TPU)."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    quiet_unless_asked()


def quiet_unless_asked() -> None:
    """Warnings and errors only, unless the user set `--verbosity`."""
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
        python_logging.getLogger("jax").setLevel(python_logging.WARNING)


def check_source(workdir: str | None, weights: str | None, model: str | None) -> None:
    """eval's and export's network: a training run (`--workdir`) or published weights
    (`--weights`, a file, folder, Hub name or URL), one of the two."""
    if bool(workdir) == bool(weights):
        raise UserError("give --workdir (a training run) or --weights, not both")
    if workdir and model:
        raise UserError(
            f"--model is for --weights; the run in {workdir} is the network its config.yaml names"
        )
