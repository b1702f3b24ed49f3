"""Evaluates a training run's checkpoints, or published weights, on a config's eval split
(`nets-eval` when installed, `python eval.py` in a checkout).

    nets-eval --workdir=runs/r50                      # the run's newest checkpoint
    nets-eval --workdir=runs/r50 --step=900 --noema
    nets-eval --workdir=runs/r50 --best               # the weights of its best evaluation
    nets-eval --workdir=runs/r50 --averaged           # the average nets-average wrote
    nets-eval --workdir=runs/r50 --watch              # each new checkpoint, until the last step
    nets-eval --weights=resnet50.a1_in1k \\
        --config=configs/imagenet_resnet50.yaml       # with the weights' own preprocessing

A run's evaluation prints one line and appends a record to `<workdir>/eval.jsonl`: loss,
top-1, top-5, images, seconds. Every device JAX sees is used, as in training. Errors are one
line on stderr.
"""

import sys
from pathlib import Path

from absl import flags

from nets_cli import common
from nets_training import workdir

_WORKDIR = flags.DEFINE_string("workdir", None, "A training run's folder.")
_STEP = flags.DEFINE_integer("step", None, "This checkpoint (default: the newest).", lower_bound=0)
_BEST = flags.DEFINE_bool(
    "best", False, "The weights of the run's best evaluation (<workdir>/best)."
)
_AVERAGED = flags.DEFINE_bool(
    "averaged", False, "The average nets-average wrote of the run's weights (<workdir>/averaged)."
)
_EMA = flags.DEFINE_bool("ema", True, "The EMA of the weights, when the run kept one.")
_WATCH = flags.DEFINE_bool("watch", False, "Evaluate each new checkpoint until the run's last.")
_POLL = flags.DEFINE_float("poll_seconds", 30.0, "With --watch: how often to look.")
# More than 0: at 0 the watch would read the checkpoints' folder without pause, a core's whole time.
flags.register_validator(
    "poll_seconds", lambda seconds: seconds > 0, "must be more than 0 (seconds between two looks)"
)
_GIVE_UP = flags.DEFINE_float(
    "give_up_seconds",
    900.0,
    "With --watch: stop after this long without a new checkpoint while no run holds the workdir "
    "(the run died or was stopped), after at most the time a run takes to start "
    f"({workdir.START_SECONDS:g} s) while it has no checkpoint or no config.yaml; a live run is "
    "waited for.",
    lower_bound=0,
)
_MODEL = flags.DEFINE_string(
    "model", None, "With --weights: the network, where the weights do not say (a .pth file)."
)
_WEIGHTS = flags.DEFINE_string(
    "weights", None, "Published weights: a file, a Hub folder, a Hub name or a URL."
)
_CONFIG = flags.DEFINE_string("config", None, "With --weights: the YAML config whose data to use.")
_SET = flags.DEFINE_multi_string(
    "set", [], "key.path=value overrides of --config, or of a run's config.yaml (--workdir)."
)


def main(argv: list[str]) -> None:
    common.start(argv)
    from nets_inference import evaluate, load
    from nets_training import config
    from nets_training.errors import UserError

    exit_code = 0
    try:
        common.check_source(_WORKDIR.value, _WEIGHTS.value, _MODEL.value)
        common.check_eval_data(_WEIGHTS.value, _CONFIG.value)
        kept = common.kept_weights(
            _BEST.value, _AVERAGED.value, _WEIGHTS.value, _STEP.value, _WATCH.value
        )
        if _WEIGHTS.value:
            cfg = config.load(Path(_CONFIG.value), _SET.value)
            common.check_overrides(
                _SET.value, cfg.data.name, evaluate.WEIGHTS_KEYS, "evaluating published weights"
            )
            records = [evaluate.evaluate_weights(_MODEL.value, _WEIGHTS.value, cfg)]
            append = lambda record: None  # noqa: E731 (no run folder to keep it in)
        else:
            if _WATCH.value:
                evaluate.wait_for_start(
                    Path(_WORKDIR.value).expanduser(), _POLL.value, _GIVE_UP.value, say
                )
            data_name = load.run_config(Path(_WORKDIR.value).expanduser(), _SET.value).data.name
            common.check_overrides(_SET.value, data_name, evaluate.RUN_KEYS, "evaluating a run")
            evaluator = evaluate.build(_WORKDIR.value, _SET.value)
            append = evaluator.append
            if _WATCH.value:
                say(
                    f"watching {evaluator.workdir / 'checkpoints'} until step "
                    f"{evaluator.last_step}, every {_POLL.value:g} s; giving up after "
                    f"{_GIVE_UP.value:g} s without a new checkpoint while no run holds the "
                    f"workdir ({min(_GIVE_UP.value, workdir.START_SECONDS):g} s while it has none)"
                )
                records = evaluate.watch(evaluator, _EMA.value, _POLL.value, _GIVE_UP.value)
            elif kept:
                records = [evaluator.evaluate(None, _EMA.value, kept=kept)]
            else:
                steps = evaluator.checkpoint_steps()
                if _STEP.value is None and not steps:
                    raise UserError(f"--workdir {_WORKDIR.value}: no checkpoint there yet")
                step = steps[-1] if _STEP.value is None else _STEP.value
                records = [evaluator.evaluate(step, _EMA.value)]
        for record in records:
            what = f"step {record['step']}" if "step" in record else record["weights"]
            what += " (the run's best)" if record.get("best") else ""
            what += " (averaged)" if record.get("averaged") else ""
            exit_code = max(exit_code, common.report(record, what, append))
    except (UserError, ValueError) as e:  # OutOfMemory and PeerLost: exit status 1
        print(f"{common.program()}: {e}", file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 2))
    sys.exit(exit_code)


def say(line: str) -> None:
    """What `--watch` waits for, on stderr: stdout holds the evaluations' figures alone."""
    print(line, file=sys.stderr, flush=True)


def run() -> None:
    """The `nets-eval` console script."""
    common.run(main, __name__)


if __name__ == "__main__":
    run()
