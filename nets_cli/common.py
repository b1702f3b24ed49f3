"""What every program does first, said once: its name in messages, quiet logs, the flags it
refuses."""

import logging as python_logging
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from absl import app, flags, logging

from nets_cli import output
from nets_training import config, preemption, sources, workdir
from nets_training.errors import UserError


def program() -> str:
    """The name the user typed, for one-line errors: `train.py` from a checkout, `nets-train`
    as an installed console script."""
    return Path(sys.argv[0]).name


def run(main: Callable[[list[str]], None], program_module: str) -> None:
    """absl's `app.run(main)`, with `--help` describing the program: absl takes the usage text
    from `__main__` and the flags it lists from the module `sys.argv[0]` names, which are a thin
    script or pip's console-script wrapper rather than the program's module. A Ctrl-C ends it
    within a second or two, in one line (`preemption.exit_promptly`); one piped to a reader that
    stops early (`| head`) ends quietly (`output.quiet_when_the_reader_stops`)."""
    module = sys.modules[program_module]
    sys.modules["__main__"].__doc__ = module.__doc__
    for flag in flags.FLAGS.get_key_flags_for_module(module.__name__):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    with (
        preemption.exit_promptly(lambda: f"{program()}: SIGINT: stopped"),
        output.quiet_when_the_reader_stops(),
    ):
        app.run(main, flags_parser=parse_flags)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing of the flags, whose errors (an unknown flag, a value of the wrong type or
    out of its bounds) are one line, exit status 2, rather than absl's two: `FATAL Flags parsing
    error: ...` and `Pass --helpshort or --helpfull to see help on flags.`"""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        fail("; ".join(line.strip() for line in str(error).splitlines() if line.strip()), 2)


def typed_command(argv: Sequence[str]) -> list[str]:
    """`argv` (`sys.orig_argv`) as the user typed it: a console script by its name where PATH
    finds it (`nets-train ...`), not the interpreter and the script's path that its shebang
    made of it; `python train.py ...` as it is."""
    script = Path(argv[1]) if len(argv) > 1 else None
    if script is None or script.suffix == ".py" or script.name != program():
        return list(argv)
    found = shutil.which(script.name)
    return [script.name if found and Path(found) == script else str(script), *argv[2:]]


def fail(message: str, exit_code: int) -> NoReturn:
    """Says `message` on stderr in one line, after the program's name, and ends the process with
    `exit_code`, without the interpreter's teardown (`preemption.exit_now`: the exit handlers of
    libraries would print their own errors about what the failure left behind)."""
    print(f"{program()}: {message}", file=sys.stderr)
    preemption.exit_now(exit_code)


def start(argv: list[str]) -> None:
    """Refuses positional arguments in one line (absl's `app.UsageError` would print the whole
    help above it), and keeps info-level logs out of the output unless `--verbosity` asks for
    them: orbax's (a line per checkpoint read or written) and JAX's (the backends it could not
    start, `libtpu.so` on every machine without a TPU)."""
    if len(argv) > 1:
        fail(unexpected(argv[1:]), 2)
    quiet_unless_asked()


def unexpected(arguments: Sequence[str]) -> str:
    """The refusal of positional `arguments`; to a program with a `--set` flag, those that read
    as config overrides (`optim.lr=0.1`) are shown written as it takes them."""
    overrides = [a for a in arguments if re.match(r"[A-Za-z_][\w.]*=", a)]
    message = f"unexpected arguments: {' '.join(arguments)}"
    if not overrides or "set" not in flags.FLAGS:
        return message
    written = " ".join(f"--set {shlex.quote(a)}" for a in overrides)
    return f"{message} (a config override is a flag: write {written})"


def quiet_unless_asked() -> None:
    """Warnings and errors only, unless the user set `--verbosity`."""
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
        python_logging.getLogger("jax").setLevel(python_logging.WARNING)


def require(flag: flags.FlagHolder, what: str) -> None:
    """Refuses a missing flag that the program cannot run without, in one line that says `what`
    it takes (absl's `mark_flag_as_required` says `FATAL Flags parsing error` instead)."""
    if flag.value is None:
        raise UserError(f"--{flag.name} is required: {what}")


def check_overrides(
    overrides: Sequence[str],
    data_name: str,
    reads: Mapping[str, Sequence[str]] | None = None,
    what: str = "",
) -> None:
    """Refuses a `--set` key that would change nothing: one that the program does not read
    (`reads`: the keys it reads, per section, doing `what`; None: every key), or a data key that
    `data_name`'s source ignores (`sources.READ_BY`: digits read no data.dir)."""
    for key in set_keys(overrides):
        section, _, name = key.partition(".")
        if reads is not None and name.split(".")[0] not in reads.get(section, ()):
            keys = "; ".join(f"{s}: {', '.join(names)}" for s, names in reads.items())
            raise UserError(f"--set {key} would change nothing: {what} reads only {keys}")
        readers = sources.READ_BY.get(name, ()) if section == "data" else ()
        if readers and data_name not in readers:
            raise UserError(
                f"--set {key} would change nothing: data.name={data_name} does not read it "
                f"(only {', '.join(readers)} do)"
            )


def set_keys(overrides: Sequence[str]) -> list[str]:
    """The key paths that `key.path=value` overrides set: a mapping value sets each of its keys
    (`--set 'data={name: cifar10, dir: D}'` sets data.name and data.dir)."""

    def leaves(key: str, value: Any) -> list[str]:
        if isinstance(value, dict) and value:
            return [k for name, v in value.items() for k in leaves(f"{key}.{name}", v)]
        return [key]

    keys = []
    for override in overrides:
        key, _, text = override.partition("=")
        keys += leaves(key.strip(), config.parse_yaml(text, f"--set {key}"))
    return keys


def check_source(workdir: str | None, weights: str | None, model: str | None) -> None:
    """eval's and export's network: a training run (`--workdir`) or published weights
    (`--weights`, a file, folder, Hub name or URL), one of the two."""
    if not workdir and not weights:
        raise UserError(
            "give --workdir (a training run's folder) or --weights (published weights: a file, "
            "folder, Hub name or URL)"
        )
    if workdir and weights:
        raise UserError("give --workdir (a training run) or --weights, not both")
    if workdir and model:
        raise UserError(
            f"--model is for --weights; the run in {workdir} is the network its config.yaml names"
        )


# The flags that name a run's kept weights: the folder, and what they are.
KEPT_FLAGS = {
    "--best": (workdir.BEST_DIR, "the weights of a run's best evaluation"),
    "--averaged": (workdir.AVERAGED_DIR, "the average nets-average wrote of a run's weights"),
}


def kept_weights(
    best: bool, averaged: bool, weights: str | None, step: int | None, watch: bool = False
) -> str | None:
    """The folder of the run's kept weights that `--best` or `--averaged` names
    (`workdir.BEST_DIR`, `workdir.AVERAGED_DIR`), None for neither; each is one checkpoint of a
    run: not with the other, `--weights`, `--step` or `--watch`."""
    if best and averaged:
        raise UserError("give --best (the run's best evaluation's weights) or --averaged, not both")
    if not (best or averaged):
        return None
    flag = "--best" if best else "--averaged"
    folder, what = KEPT_FLAGS[flag]
    for other, given in (("--weights", weights), ("--step", step is not None), ("--watch", watch)):
        if given:
            raise UserError(f"{flag} is {what}: not with {other}")
    return folder


def check_eval_data(weights: str | None, config_file: str | None) -> None:
    """eval's data, once `check_source` passed: published weights (`--weights`) are evaluated on
    the data of the `--config` given, a training run (`--workdir`) on its own config.yaml's."""
    if weights and not config_file:
        raise UserError("--weights needs --config (the data to evaluate on)")
    if not weights and config_file:
        raise UserError(
            "--config is for --weights; a run (--workdir) evaluates with its own config.yaml: "
            "change a key with --set (e.g. --set data.dir=NEW)"
        )


def report(record: Mapping[str, Any], what: str, append: Callable[[Any], None]) -> int:
    """Prints an evaluation `record` of `what` (a step, weights) in one line, then keeps it with
    `append`; 1 when that fails (a read-only or full disk: the figures are out, the record
    lost, said in one line), else 0."""
    print(
        f"{what}: eval loss {record['eval/loss']:.4f}, top-1 {100 * record['eval/top1']:.2f}%, "
        f"top-5 {100 * record['eval/top5']:.2f}% on {record['eval/images']} images in "
        f"{record['eval/seconds']:.1f} s",
        flush=True,
    )
    try:
        append(record)
    except OSError as e:
        print(
            f"{program()}: the record was not written ({e.filename or 'eval.jsonl'}: "
            f"{e.strerror or e})",
            file=sys.stderr,
        )
        return 1
    return 0
